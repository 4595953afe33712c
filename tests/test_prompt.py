"""The interactive prompt, driven through a pseudo-terminal."""
import os
import sys

import pexpect
import pytest

from conftest import ROOT


@pytest.fixture
def prompt(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), TERM="dumb")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp"], env=env, cwd=str(tmp_path),
                          encoding="utf-8", timeout=60, dimensions=(24, 200))
    child.expect_exact("exit or Ctrl-D to leave")
    child.expect_exact("% ")
    yield child
    child.close(force=True)


def run(child, line):
    """Sends a line and returns what came back before the next prompt."""
    child.sendline(line)
    child.expect_exact("% ")
    return child.before.replace("\r\n", "\n").split("\n", 1)[1].strip()


def test_command_result(prompt):
    assert run(prompt, "torch::autocast_get_dtype cpu") == "bfloat16"
    assert run(prompt, "expr {6 * 7}") == "42"


def test_multi_line_proc(prompt):
    prompt.sendline("proc square {x} {")
    prompt.expect_exact("> ")
    prompt.sendline("    expr {$x * $x}")
    prompt.expect_exact("> ")
    prompt.sendline("}")
    prompt.expect_exact("% ")
    assert run(prompt, "square 12") == "144"


def test_tab_completes_command_names(prompt):
    prompt.send("torch::autocast_get_dt\t")
    prompt.expect_exact("torch::autocast_get_dtype")
    prompt.sendline(" cuda")
    prompt.expect_exact("float16")
    prompt.expect_exact("% ")


def test_tab_completes_namespaces(prompt):
    prompt.send("torc\t")
    prompt.expect_exact("torch::")
    prompt.send("autocastIsE\t")
    prompt.expect_exact("autocastIsEnabled")
    prompt.sendline("")
    prompt.expect_exact("0")


def test_error_prints_message_not_traceback(prompt):
    out = run(prompt, "torch::autocast_enable gpu")
    assert out == "Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32"
    out = run(prompt, "py eval 1/0")
    assert out == "ZeroDivisionError: division by zero"
    assert "Python traceback" in run(prompt, "set errorInfo")


def test_traceback_option(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), TERM="dumb")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp", "--traceback"], env=env,
                          encoding="utf-8", timeout=60)
    child.expect_exact("% ")
    child.sendline("py eval 1/0")
    child.expect_exact("Python traceback (most recent call last):")
    child.expect_exact("% ")
    child.close(force=True)


def test_exit_and_history(prompt, tmp_path):
    run(prompt, "set remembered 1")
    prompt.sendline("exit 3")
    prompt.expect(pexpect.EOF)
    prompt.close()
    assert prompt.exitstatus == 3
    assert "set remembered 1" in (tmp_path / ".tclamp_history").read_text()


def test_script_mode(tmp_path):
    script = tmp_path / "s.tcl"
    script.write_text("puts [torch::autocast_enable cpu]\nputs $argv\nexit 5\n")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp", str(script), "a", "b"],
                          encoding="utf-8", timeout=60, cwd=str(ROOT))
    child.expect(pexpect.EOF)
    child.close()
    assert child.before.split() == ["autocast", "enabled", "a", "b"]
    assert child.exitstatus == 5


def test_plain_interactive_tclsh_prints_the_version(tmp_path):
    """At a terminal, tclsh echoes results: package require shows the version
    (in a pipe tclsh echoes nothing, so only `puts` output appears)."""
    env = dict(os.environ, TCLLIBPATH=str(ROOT / "tcl"), HOME=str(tmp_path))
    env.pop("TCLAMP_PYTHON", None)
    child = pexpect.spawn("tclsh", env=env, cwd=str(tmp_path), encoding="utf-8", timeout=60)
    child.expect_exact("% ")
    child.sendline("package require tclamp")
    child.expect_exact("0.1.0")
    child.expect_exact("% ")
    child.sendline("torch::autocast_set_dtype float16 cuda extra_arg")
    child.expect_exact("Usage: torch::autocast_set_dtype dtype [device_type]")
    child.expect_exact("% ")
    child.sendline("exit")
    child.expect(pexpect.EOF)
