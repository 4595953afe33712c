"""The tclamp command: its prompt, driven through a pseudo-terminal, and its
script mode, held against a plain tclsh running the same script."""
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
import torch

from conftest import ROOT, TCL9, TCLSH, needs_setup, sigint_as_at_a_terminal, tcl_env

VERSION = (ROOT / "src" / "tclamp" / "VERSION").read_text().strip()


def python_buffered_env(**extra):
    """The environment of a user's shell: this machine sets PYTHONUNBUFFERED,
    which would hide what Python's buffers do."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(extra)
    return env


def spawn(home, *args):
    env = python_buffered_env(HOME=str(home), TERM="dumb")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp", *args], env=env, cwd=str(home),
                          encoding="utf-8", timeout=60, dimensions=(24, 200))
    child.expect_exact("exit or Ctrl-D to leave")
    child.expect_exact("% ")
    return child


@pytest.fixture
def prompt(tmp_path):
    child = spawn(tmp_path)
    yield child
    child.close(force=True)


def run(child, line):
    """Sends a line and returns what came back before the next prompt."""
    child.sendline(line)
    child.expect_exact("% ")
    return child.before.replace("\r\n", "\n").split("\n", 1)[1].strip()


def python_line(child, line):
    """Sends a line at Python's prompt (`py interact`) and returns what it
    printed before the next `>>> `."""
    child.sendline(line)
    child.expect_exact(">>> ")
    return child.before.replace("\r\n", "\n").split("\n", 1)[1]


def interrupt(child, line):
    """Starts a command, presses Ctrl-C a second later; what it printed and
    how long the prompt took to come back."""
    child.sendline(line)
    child.expect_exact(line)
    time.sleep(1)
    pressed = time.monotonic()
    child.sendintr()
    child.expect_exact("% ")
    return child.before.replace("\r\n", "\n").strip(), time.monotonic() - pressed


def test_banner_shows_tclamp_info(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), TERM="dumb")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp"], env=env, encoding="utf-8",
                          timeout=60, dimensions=(24, 200))
    child.expect_exact("% ")
    devices = torch.cuda.device_count()
    cuda = f"CUDA: {devices} device{'s' * (devices != 1)}" if devices else "no CUDA"
    tcl_version = subprocess.run([TCLSH], input="puts [info patchlevel]", text=True,
                                 capture_output=True).stdout.strip()
    assert child.before.strip() == (
        f"tclamp {VERSION} (Tcl {tcl_version}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, {cuda}); exit or Ctrl-D to leave")
    child.close(force=True)


def test_command_result(prompt):
    assert run(prompt, "torch::autocast_get_dtype cpu") == "bfloat16"
    assert run(prompt, "expr {6 * 7}") == "42"


def test_a_result_that_stdout_cannot_encode_is_written_as_tcl_writes_it(tmp_path):
    """A result with a lone surrogate: Python's print refused it, and tclamp
    ended with a traceback.  It goes out as tclsh writes a result, through
    Tcl's stdout: Tcl 8.6 writes the surrogate's three bytes, Tcl 9 writes
    up to it and refuses it (its error is shown); the prompt goes on."""
    env = python_buffered_env(HOME=str(tmp_path), TERM="dumb")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp"], env=env, cwd=str(tmp_path),
                          encoding="utf-8", codec_errors="surrogatepass", timeout=60)
    child.expect_exact("% ")
    try:
        shown = run(child, 'py eval {"a\\ud800b"}')
        assert shown == ('aerror writing "stdout": invalid or incomplete multibyte or wide character'
                         if TCL9 else "a\ud800b")
        assert run(child, "expr {6 * 7}") == "42"
    finally:
        child.close(force=True)


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


def test_tab_completes_ensemble_subcommands(prompt):
    prompt.send("py e\t\t")             # two matches: the second Tab lists them
    prompt.expect(r"eval\s+exec")
    prompt.send("v\t")
    prompt.expect_exact("py eval")
    prompt.sendline(" 6*7")
    prompt.expect_exact("42")
    prompt.expect_exact("% ")
    prompt.send("string rev\t")         # Tcl's own ensembles too
    prompt.expect_exact("string reverse")
    prompt.sendline(" abc")
    prompt.expect_exact("cba")
    prompt.expect_exact("% ")


def test_tab_completes_variables(prompt):
    run(prompt, "set name_alpha 1; set name_beta 2")
    prompt.send("puts $name_a\t")
    prompt.expect_exact("puts $name_alpha")
    prompt.sendline("")
    prompt.expect_exact("1")
    prompt.expect_exact("% ")
    run(prompt, "namespace eval ::demo {variable level 7}")
    prompt.send("puts $::demo::le\t")
    prompt.expect_exact("$::demo::level")
    prompt.sendline("")
    prompt.expect_exact("7")
    prompt.expect_exact("% ")


def test_tab_completes_names_that_tcl_must_quote(prompt):
    # Tcl lists these names quoted ({tally up}): each is read as one name,
    # and inserted as a word that Tcl reads back as that name.
    run(prompt, "proc {tally up} {} {return 42}; proc {qq[1]} {} {return bracket}; "
                "set {my var} 7; namespace eval {zz ns} {proc f {} {return 3}}")
    for typed, inserted, result in (("tall", "tally\\ up", "42"),
                                    ("qq", "qq\\[1\\]", "bracket"),
                                    ("puts $my", "{my var}", "7"),
                                    ("zz\tf", "zz\\ ns::f", "3")):
        prompt.send(typed + "\t")
        prompt.expect_exact(inserted, timeout=10)
        prompt.sendline("")
        prompt.expect_exact(result, timeout=10)
        prompt.expect_exact("% ")


def test_error_prints_message_not_traceback(prompt):
    out = run(prompt, "torch::autocast_enable gpu")
    assert out == "Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32"
    out = run(prompt, "py eval 1/0")
    assert out == "ZeroDivisionError: division by zero"
    assert "Python traceback" in run(prompt, "set errorInfo")


def test_traceback_option(tmp_path):
    child = spawn(tmp_path, "--traceback")
    child.sendline("py eval 1/0")
    child.expect_exact("Python traceback (most recent call last):")
    child.expect_exact("% ")
    child.close(force=True)


def test_exit_cannot_be_caught_and_history_is_kept(prompt, tmp_path):
    run(prompt, "set remembered 1")
    prompt.sendline("catch {exit 3}; puts {still here}")
    prompt.expect(pexpect.EOF)
    prompt.close()
    assert prompt.before.replace("\r\n", "\n") == "catch {exit 3}; puts {still here}\n"
    assert prompt.exitstatus == 3
    assert "set remembered 1" in (tmp_path / ".tclamp_history").read_text()


def test_a_history_that_cannot_be_written_is_left_quietly(tmp_path):
    """A home without a writable ~/.tclamp_history (here a directory; or
    HOME=/nonexistent) printed a Python traceback as tclamp ended."""
    (tmp_path / ".tclamp_history").mkdir()
    child = spawn(tmp_path)
    child.sendline("exit 3")
    child.expect(pexpect.EOF)
    child.close()
    assert child.before.replace("\r\n", "\n") == "exit 3\n"
    assert child.exitstatus == 3


def test_exit_reads_its_code_as_tcl_does(prompt):
    assert run(prompt, "exit foo") == 'expected integer but got "foo"'
    assert run(prompt, "exit 1 2") == 'wrong # args: should be "exit ?returnCode?"'
    assert run(prompt, "set errorCode") == "TCL WRONGARGS"
    prompt.sendline("exit 0x10")
    prompt.expect(pexpect.EOF)
    prompt.close()
    assert prompt.exitstatus == 16


def test_ctrl_c_stops_a_tcl_loop_and_a_vwait(prompt):
    run(prompt, "set n 0")
    out, took = interrupt(prompt, "while 1 {incr n}")
    assert out == "^Cinterrupted" and took < 5
    assert int(run(prompt, "set n")) > 0
    out, took = interrupt(prompt, "catch {vwait forever}; puts {not reached}")
    assert out == "^Cinterrupted" and took < 5
    out, _ = interrupt(prompt, "py exec {while True: pass}")
    assert out == "^Cinterrupted"
    assert run(prompt, "expr {6 * 7}") == "42"          # the interpreter goes on


def test_ctrl_c_leaves_every_child_interpreter_usable(prompt):
    """Tcl's cancel marks the children at every depth; after Ctrl-C the
    grandchild `{c d}` failed each command sent to it with `eval unwound`
    (the take-down of the marks stopped at the children)."""
    run(prompt, "interp create c; c eval {interp create d; interp create e}")
    prompt.sendline("puts [string toupper started]; while 1 {}")
    prompt.expect_exact("STARTED")
    prompt.sendintr()
    prompt.expect_exact("% ")
    assert prompt.before.replace("\r\n", "\n").strip().endswith("interrupted")
    assert run(prompt, "interp eval {c d} {incr n}") == "1"
    assert run(prompt, "interp eval {c d} {incr n}") == "2"
    assert run(prompt, "c eval {e eval {incr n}}") == "1"
    assert run(prompt, "c eval {incr n}") == "1"


def test_ctrl_c_stops_a_gets_stdin_and_stdin_reads_on(prompt):
    """Tcl's own stdin reads again after a signal: the prompt's stdin ends
    a blocking read that Ctrl-C came for, and otherwise is Tcl's (the
    terminal's options, a line read, non-blocking reads)."""
    out, took = interrupt(prompt, "catch {gets stdin line}; puts {not reached}")
    assert out == "^Cinterrupted" and took < 5
    assert run(prompt, "info exists line") == "0"
    prompt.sendline("puts [gets stdin x]/$x")
    prompt.expect_exact("puts [gets stdin x]/$x")
    prompt.sendline("hello")
    prompt.expect_exact("5/hello")
    prompt.expect_exact("% ")
    assert run(prompt, "dict exists [fconfigure stdin] -mode") == "1"
    assert run(prompt, "fconfigure stdin -blocking 0; list [gets stdin] [fblocked stdin]") == "{} 1"
    assert run(prompt, "fconfigure stdin -blocking 1; fconfigure stdin -blocking") == "1"


def test_ctrl_c_in_python_code_under_catch_stops_the_command(prompt):
    out, took = interrupt(prompt, "catch {py exec {while True: pass}}; puts {not reached}")
    assert out == "^Cinterrupted" and took < 5
    run(prompt, "set n 0")
    out, took = interrupt(
        prompt, "while 1 {incr n; catch {py exec {import time; time.sleep(0.01)}}}")
    assert out == "^Cinterrupted" and took < 5
    assert run(prompt, "expr {6 * 7}") == "42"


def test_ctrl_c_in_a_ruled_forward_puts_the_state_back(prompt):
    """Ctrl-C while a module with a dtype rule runs its forward pass (a
    KeyboardInterrupt, which torch's always_call hooks never see): the
    autocast dtype and cast cache are what they were, and the module's rule
    still applies to the next call."""
    run(prompt, "py exec {class Spin(torch.nn.Module):\n    def forward(self, x):\n"
                "        global seen\n        seen = str(torch.get_autocast_dtype('cpu'))\n"
                "        while x: pass}")
    run(prompt, "set spin [py eval Spin()]")
    assert run(prompt, "torch::autocast_module_dtype $spin float32 cpu") == "module dtype set"
    assert run(prompt, "torch::autocast_enable cpu bfloat16") == "autocast enabled"
    run(prompt, "py exec {torch.set_autocast_cache_enabled(True)}")    # the rule turns it off
    out, _ = interrupt(prompt, "py call -types int $spin 1")
    assert out == "^Cinterrupted"
    assert run(prompt, "torch::autocast_status cpu") == "enabled 1 dtype bfloat16 cache_enabled 1"
    assert run(prompt, "py call -types int $spin 0; py eval seen") == "torch.float32"
    assert run(prompt, "torch::autocast_get_dtype cpu") == "bfloat16"


def test_ctrl_c_at_the_prompt_drops_the_lines_typed(prompt):
    prompt.sendline("set unfinished {")
    prompt.expect_exact("> ")
    prompt.sendintr()
    prompt.expect_exact("% ")
    assert run(prompt, "info exists unfinished") == "0"


def test_rc_file_is_read_first(tmp_path):
    (tmp_path / ".tclamprc").write_text("set from_rc 42\nproc greet {} {return hello}\n")
    child = spawn(tmp_path)
    assert run(child, "greet") == "hello"
    assert run(child, "set from_rc") == "42"
    assert run(child, "set tcl_rcFileName") == str(tmp_path / ".tclamprc")
    child.close(force=True)


def test_rc_file_in_a_non_ascii_home_is_read_in_a_c_locale(tmp_path):
    # In a C locale Python's names are UTF-8 and Tcl 8.6's ISO 8859-1: the
    # file is handed to Tcl as Tcl names those bytes, and $tcl_rcFileName is
    # what `file exists` finds.
    home = tmp_path / "h\u00e9"
    home.mkdir()
    (home / ".tclamprc").write_text("set from_rc 42\n")
    env = python_buffered_env(HOME=str(home), TERM="dumb", LC_ALL="C", LANG="C")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp"], env=env, cwd=str(tmp_path),
                          encoding="utf-8", codec_errors="replace", timeout=60,
                          dimensions=(24, 200))
    child.expect_exact("exit or Ctrl-D to leave")
    child.expect_exact("% ")
    assert run(child, "set from_rc") == "42"
    assert run(child, "file exists $tcl_rcFileName") == "1"
    child.close(force=True)


def test_rc_file_error_is_shown_and_the_prompt_starts(tmp_path):
    (tmp_path / ".tclamprc").write_text("set ok 1\nno_such_command\n")
    env = dict(os.environ, HOME=str(tmp_path), TERM="dumb")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp"], env=env, encoding="utf-8",
                          timeout=60, dimensions=(24, 200))
    child.expect_exact("exit or Ctrl-D to leave")
    child.expect_exact("% ")
    assert child.before.replace("\r\n", "\n").strip() == (
        'invalid command name "no_such_command"\n    while executing\n"no_such_command"\n'
        f'    (file "{tmp_path / ".tclamprc"}" line 2)')
    assert run(child, "set ok") == "1"
    child.close(force=True)


@pytest.mark.parametrize("body", ["while 1 {}", "py exec {import time; time.sleep(60)}",
                                  "vwait forever"], ids=["tcl-loop", "python", "vwait"])
def test_ctrl_c_stops_the_rc_file_and_the_prompt_starts(tmp_path, body):
    (tmp_path / ".tclamprc").write_text(f"set before 1\n{body}\nset after 1\n")
    env = python_buffered_env(HOME=str(tmp_path), TERM="dumb")
    child = pexpect.spawn(sys.executable, ["-m", "tclamp"], env=env, cwd=str(tmp_path),
                          encoding="utf-8", timeout=60, dimensions=(24, 200))
    child.expect_exact("exit or Ctrl-D to leave")
    time.sleep(1)
    child.sendintr()
    child.expect_exact("% ")
    assert child.before.replace("\r\n", "\n").strip() == "^Cinterrupted"
    assert run(child, "list [info exists before] [info exists after]") == "1 0"
    child.sendline("exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_script_mode(tmp_path):
    script = tmp_path / "s.tcl"
    script.write_text("puts [torch::autocast_enable cpu]\nputs $argv\nexit 5\n")
    r = subprocess.run([sys.executable, "-m", "tclamp", str(script), "a", "--traceback"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.split() == ["autocast", "enabled", "a", "--traceback"]
    assert r.returncode == 5


@pytest.mark.parametrize("args", [["--", "x"], ["--"], ["--", "--", "x"],
                                  ["a", "--traceback", "--", "-b"]],
                         ids=["dashes-x", "dashes", "two-dashes", "options"])
def test_every_word_after_the_script_is_its_argument(tmp_path, args):
    (tmp_path / "args.tcl").write_text('puts "$argc <$argv>"\n')
    by_tclsh = subprocess.run([TCLSH, "args.tcl", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp", "args.tcl", *args],
                               capture_output=True, text=True, cwd=tmp_path)
    assert (by_tclamp.stdout, by_tclamp.returncode) == (by_tclsh.stdout, 0) == \
        (f"{len(args)} <{' '.join(args)}>\n", 0)


def test_arguments_that_are_not_utf8_read_as_tclsh_reads_them(tmp_path):
    """A byte that does not decode stands for its own character, as in
    tclsh, on Tcl 8.6 and 9 (tclamp gave Tcl Python's lone surrogate,
    U+DCFF, and `puts` wrote three bytes that are no UTF-8)."""
    (tmp_path / "args.tcl").write_text(
        "foreach word $argv {puts [list [string length $word] $word]}\n")
    args = [b"\xff", b"a\xc3\xa9", b"\xe9t\xe9", b"x y"]
    by_tclsh = subprocess.run([TCLSH, "args.tcl", *args], capture_output=True,
                              cwd=tmp_path, env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp", "args.tcl", *args],
                               capture_output=True, cwd=tmp_path)
    assert (by_tclamp.stdout, by_tclamp.returncode) == (by_tclsh.stdout, 0) == \
        ("1 \u00ff\n2 a\u00e9\n3 \u00e9t\u00e9\n3 {x y}\n".encode(), 0)
    # A script so named is the file $argv0 names, as in tclsh, which has no
    # such file (Tcl writes U+00FF as two bytes); tclamp failed on
    # ::errorCode, as eval_file refused Python's name for it.
    (tmp_path / "x\udcff.tcl").write_text("puts ran\n", errors="surrogateescape")
    by_tclsh = subprocess.run([TCLSH, b"x\xff.tcl"], capture_output=True, cwd=tmp_path,
                              env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp", b"x\xff.tcl"],
                               capture_output=True, cwd=tmp_path)
    assert (by_tclamp.stdout, by_tclamp.stderr, by_tclamp.returncode) == \
        (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode) == \
        (b"", 'couldn\'t read file "x\u00ff.tcl": no such file or directory\n'.encode(), 1)
    # Names whose Tcl text Python cannot give as a file name (NUL, which Tcl
    # reads C0 80 as; a surrogate's bytes): their error, not a failure to
    # read ::errorCode, which no Tcl error had set.
    for name in b"x\xc0\x80.tcl", b"x\xed\xa0\x80.tcl":
        r = subprocess.run([sys.executable, "-m", "tclamp", name], capture_output=True,
                           cwd=tmp_path)
        assert (r.stdout, r.returncode, r.stderr.count(b"\n")) == (b"", 1, 1)
        assert re.match(rb"(ValueError|UnicodeEncodeError): ", r.stderr), r.stderr


SCRIPTS = {
    "error": 'puts before\nproc f {x} {\n    nosuch $x\n}\nf 1\nputs after\n',
    "caught_exit": "puts [catch {exit 3}]\nputs after\n",
    "exit_code": "exit 0x10\n",
    "bad_exit": "exit foo\n",
    "too_large_exit": "exit 4294967296\n",
    "largest_exit": "exit 4294967295\n",
    "falls_off": "puts done\n",
    # tclamp ran the script by `source`, whose frame Tcl 8.6 puts in errorInfo
    # in place of these: a loop body's, and the line at the top.
    "error_in_loops": "foreach x {1} {\n    while 1 {\n        for {} 1 {} {\n"
                      "            error boom\n        }\n    }\n}\n",
    "break_at_top": "puts before\nbreak\n",
    "return_code": "return -code error -errorcode {MY CODE} failed\n",
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_ends_as_in_tclsh(tmp_path, name):
    """The same script, run by tclsh and by tclamp: the same output, the same
    errorInfo with file and line, the same exit status."""
    script = tmp_path / f"{name}.tcl"
    script.write_text(SCRIPTS[name])
    by_tclsh = subprocess.run([TCLSH, script.name], capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp", script.name],
                               capture_output=True, text=True, cwd=tmp_path)
    assert (by_tclamp.stdout, by_tclamp.stderr, by_tclamp.returncode) == \
        (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode)


def test_an_error_with_a_lone_surrogate_is_written_as_tclsh_writes_it(tmp_path):
    """An error whose message holds a lone surrogate: tclamp wrote Python's
    escape for it (the six characters \\ud800) where tclsh writes it
    through Tcl's stderr: Tcl 8.6 the surrogate's three bytes, Tcl 9 (its
    stderr replaces what it cannot encode) U+FFFD.  Both in a script's
    errorInfo and in the message of a command read from a pipe."""
    (tmp_path / "lone.tcl").write_text('puts a\nerror "p[format %c 0xD800]q"\n')
    by_tclsh = subprocess.run([TCLSH, "lone.tcl"], capture_output=True, cwd=tmp_path,
                              env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp", "lone.tcl"],
                               capture_output=True, cwd=tmp_path)
    written = b"\xef\xbf\xbd" if TCL9 else b"\xed\xa0\x80"
    assert by_tclsh.stderr.startswith(b"p" + written + b"q\n    while executing\n")
    assert (by_tclamp.stdout, by_tclamp.stderr, by_tclamp.returncode) == \
        (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode) == \
        (b"a\n", by_tclsh.stderr, 1)
    commands = b'puts a\nerror "p[format %c 0xD800]q"\nputs b\n'
    by_tclsh = subprocess.run([TCLSH], input=commands, capture_output=True, cwd=tmp_path,
                              env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp"], input=commands,
                               capture_output=True, cwd=tmp_path)
    assert (by_tclamp.stdout, by_tclamp.stderr, by_tclamp.returncode) == \
        (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode) == \
        (b"a\nb\n", b"p" + written + b"q\n", 0)


@pytest.mark.parametrize("name", ["no_such.tcl", "a_directory"])
def test_a_script_that_cannot_be_read_fails_as_in_tclsh(tmp_path, name):
    """tclsh prints the message alone; tclamp added `while executing
    "source no_such.tcl"`."""
    (tmp_path / "a_directory").mkdir()
    by_tclsh = subprocess.run([TCLSH, name], capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp", name],
                               capture_output=True, text=True, cwd=tmp_path)
    assert (by_tclamp.stdout, by_tclamp.stderr, by_tclamp.returncode) == \
        (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode)
    assert by_tclamp.stderr.startswith(f'couldn\'t read file "{name}": ')
    assert by_tclamp.stderr.count("\n") == 1


def test_ctrl_c_ends_a_script_as_a_shell_reports_it(tmp_path):
    (tmp_path / "loop.tcl").write_text("puts started\nflush stdout\nwhile 1 {}\n")
    child = subprocess.Popen([sys.executable, "-m", "tclamp", "loop.tcl"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=sigint_as_at_a_terminal)
    assert child.stdout.readline() == "started\n"
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert (out, err, child.returncode) == ("", "interrupted\n", 128 + signal.SIGINT)


def test_ctrl_c_ends_a_script_waiting_in_gets_stdin(tmp_path):
    (tmp_path / "reads.tcl").write_text(
        "puts started\nflush stdout\ncatch {gets stdin line}\nputs {after the catch}\n")
    child = subprocess.Popen([sys.executable, "-m", "tclamp", "reads.tcl"], cwd=tmp_path,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=python_buffered_env(),
                             preexec_fn=sigint_as_at_a_terminal)
    assert child.stdout.readline() == "started\n"
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    try:
        child.wait(timeout=60)      # stdin stays open: no end of file ends the read
    finally:
        child.kill()
    out, err = child.stdout.read(), child.stderr.read()
    child.stdin.close()
    assert (out, err, child.returncode) == ("", "interrupted\n", 128 + signal.SIGINT)


def test_a_script_seeks_its_stdin_from_a_file_as_in_tclsh(tmp_path):
    """tclamp script.tcl < file: tell and seek are the file's, as in tclsh
    (the prompt's stdin, stacked on it, had none: tell -1, seek failed)."""
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    (tmp_path / "seeks.tcl").write_text(
        "gets stdin a\nputs [list $a [tell stdin]]\nseek stdin 0\n"
        "puts [list [gets stdin] [read stdin] [tell stdin] [eof stdin]]\n"
        "seek stdin -4 end\nputs [gets stdin]\n")
    runs = []
    for program in [TCLSH], [sys.executable, "-m", "tclamp"]:
        with open(tmp_path / "in.txt") as stdin:
            runs.append(subprocess.run([*program, "seeks.tcl"], stdin=stdin,
                                       capture_output=True, text=True, cwd=tmp_path,
                                       env=tcl_env()))
    assert [(r.stdout, r.stderr, r.returncode) for r in runs] == \
        [("one 4\none {two\n} 8 1\ntwo\n", "", 0)] * 2


# Read from a pipe, tclsh prints no banner, prompt or result, only errors;
# `gets stdin` in a command reads the line after it.
PIPED = """gets stdin x
hello
puts got=$x
puts interactive=$tcl_interactive
proc twice {x} {
    expr {2 * $x}
}
twice 21
puts [twice 4]
no_such_command
puts "after the error"
exit 3
puts "not reached"
"""


def test_piped_stdin_is_read_as_tclsh_reads_it(tmp_path):
    by_tclsh = subprocess.run([TCLSH], input=PIPED, capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp"], input=PIPED,
                               capture_output=True, text=True, cwd=tmp_path)
    assert (by_tclamp.stdout, by_tclamp.stderr, by_tclamp.returncode) == \
        (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode) == \
        ("got=hello\ninteractive=0\n8\nafter the error\n",
         'invalid command name "no_such_command"\n', 3)
    # At its end the status is 0, after an error too.
    r = subprocess.run([sys.executable, "-m", "tclamp"], input="puts a\nnosuch\n",
                       capture_output=True, text=True, cwd=tmp_path)
    assert (r.stdout, r.returncode) == ("a\n", 0)


def test_piped_input_cut_inside_a_command_says_so(tmp_path):
    """Input that ends inside a command (a lost close-brace): what came
    before it ran, the cut command does not, and stderr says why, where
    tclsh drops it without a word; the status is 0 in both."""
    piped = "puts a\nputs {b\nputs c\n"
    by_tclsh = subprocess.run([TCLSH], input=piped, capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp"], input=piped,
                               capture_output=True, text=True, cwd=tmp_path)
    assert (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode) == ("a\n", "", 0)
    assert (by_tclamp.stdout, by_tclamp.stderr, by_tclamp.returncode) == \
        ("a\n", "missing close-brace\n", 0)


def test_piped_bytes_that_stdin_cannot_read_end_the_input_as_in_tclsh(tmp_path):
    """Tcl 9 reads stdin in its encoding strictly: a byte that is no UTF-8
    is an error reading stdin, which tclsh takes as the end of its input
    (status 0, no message).  tclamp died with a Python traceback, status 1.
    Tcl 8.6 reads the byte as a character of its own."""
    piped = b"puts one\nputs a\xffb\nputs two\n"
    runs = [subprocess.run(program, input=piped, capture_output=True, cwd=tmp_path,
                           env=tcl_env(LANG="C.UTF-8"), timeout=60)
            for program in ([TCLSH], [sys.executable, "-m", "tclamp"])]
    expected = b"one\n" if TCL9 else "one\na\xffb\ntwo\n".encode()
    assert [(r.stdout, r.stderr, r.returncode) for r in runs] == [(expected, b"", 0)] * 2


@pytest.mark.parametrize("program", [[TCLSH], [sys.executable, "-m", "tclamp"]],
                         ids=["tclsh", "tclamp"])
def test_a_closed_stdin_ends_the_program_at_once(tmp_path, program):
    """`tclamp <&-`: no commands, status 0, as in tclsh (Python's sys.stdin
    is then None: tclamp failed with a traceback asking it for its fd)."""
    r = subprocess.run(program, capture_output=True, text=True, cwd=tmp_path,
                       env=tcl_env(), preexec_fn=lambda: os.close(0), timeout=60)
    assert (r.stdout, r.stderr, r.returncode) == ("", "", 0)


@pytest.mark.parametrize("closed", [1, 2], ids=["stdout", "stderr"])
def test_piped_commands_run_on_with_stdout_or_stderr_closed(tmp_path, closed):
    """`tclamp >&-` or `2>&-` with commands piped: they run to the end, as in
    tclsh (sys.stdout or sys.stderr is then None: tclamp flushed it before
    reading a line and died, status 1, at the first; an error's message went
    to stdout with stderr closed)."""
    piped = "nosuch\nputs after\nputs stderr {to stderr}\nexit 3\n"
    runs = [subprocess.run(program, input=piped, capture_output=True, text=True,
                           cwd=tmp_path, env=tcl_env(), timeout=60,
                           preexec_fn=lambda: os.close(closed))
            for program in ([TCLSH], [sys.executable, "-m", "tclamp"])]
    open_one = ("", 'invalid command name "nosuch"\nto stderr\n') if closed == 1 else \
        ("after\n", "")
    assert [(r.stdout, r.stderr, r.returncode) for r in runs] == [(*open_one, 3)] * 2


def test_piped_exit_reads_a_large_code_as_tclsh_does(tmp_path):
    """8.6's exit takes an int: a larger code is an error, and the next
    command runs; 9's takes the low bits of any integer."""
    piped = "exit 99999999999\nputs {still running}\nexit 4294967295\n"
    by_tclsh = subprocess.run([TCLSH], input=piped, capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp"], input=piped,
                               capture_output=True, text=True, cwd=tmp_path)
    tcl9 = subprocess.run([TCLSH], input="puts [package vsatisfies [info tclversion] 9]",
                          capture_output=True, text=True).stdout == "1\n"
    assert (by_tclamp.stdout, by_tclamp.stderr, by_tclamp.returncode) == \
        (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode) == \
        (("", "", 255) if tcl9 else
         ("still running\n", "integer value too large to represent\n", 255))


@pytest.mark.parametrize("program", [[TCLSH], [sys.executable, "-m", "tclamp"]],
                         ids=["tclsh", "tclamp"])
def test_ctrl_c_while_waiting_for_piped_input_ends_the_program(tmp_path, program):
    env = tcl_env()
    env.pop("PYTHONUNBUFFERED", None)
    child = subprocess.Popen(program, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                             preexec_fn=sigint_as_at_a_terminal)
    child.stdin.write("puts started\nflush stdout\n")
    child.stdin.flush()
    assert child.stdout.readline() == "started\n"
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert (out, err, child.returncode) == ("", "", -signal.SIGINT)


@pytest.mark.parametrize("body", ["while 1 {}", "catch {py exec {while True: pass}}"],
                         ids=["tcl-loop", "python-under-catch"])
def test_ctrl_c_in_a_piped_command_ends_the_program(tmp_path, body):
    """tclsh dies of it; tclamp ends as a script does at Ctrl-C.  It went on
    with the next command (`tclamp < job.tcl` could not be stopped)."""
    child = subprocess.Popen([sys.executable, "-m", "tclamp"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=tmp_path, env=python_buffered_env(),
                             preexec_fn=sigint_as_at_a_terminal)
    child.stdin.write(f"puts started; flush stdout\n{body}\nputs after\n")
    child.stdin.flush()
    assert child.stdout.readline() == "started\n"
    time.sleep(1)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert (out, err, child.returncode) == ("", "interrupted\n", 128 + signal.SIGINT)


def test_prompt_is_interactive(prompt):
    assert run(prompt, "set tcl_interactive") == "1"


def test_the_prompt_has_argv_as_in_tclsh(prompt, tmp_path):
    """tclsh with no script sets argv0 (the program), argc 0 and argv {};
    tclamp set none of them, at the prompt or for piped commands."""
    assert run(prompt, "list $argc $argv [file tail $argv0]") == "0 {} tclamp"
    piped = "puts [list $argc $argv [file tail $argv0] [info script]]\n"
    r = subprocess.run([sys.executable, "-m", "tclamp"], input=piped, capture_output=True,
                       text=True, cwd=tmp_path)
    by_tclsh = subprocess.run([TCLSH], input=piped, capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    assert (r.stdout, r.stderr, r.returncode) == ("0 {} tclamp {}\n", "", 0)
    assert by_tclsh.stdout == f"0 {{}} {Path(TCLSH).name} {{}}\n"


def test_a_tcltest_suite_runs_its_files_in_tclamp(tmp_path):
    """all.tcl's runAllTests runs each file in [info nameofexecutable], as
    tclsh does: that must be a program with tclamp, so the files run."""
    needs_setup("the tclamp command that installing tclamp makes",
                (Path(sys.executable).parent / "tclamp").is_file() or shutil.which("tclamp"))
    (tmp_path / "all.tcl").write_text(
        "package require tcltest\n"
        "tcltest::configure -testdir [file dirname [file normalize [info script]]]\n"
        "tcltest::runAllTests\n")
    (tmp_path / "a.test").write_text(
        "package require tcltest\nnamespace import ::tcltest::*\npackage require tclamp\n"
        "test dtype {} -body {torch::autocast_get_dtype cpu} -result bfloat16\n"
        "test script-mode {} -body {set ::tcl_interactive} -result 0\n"
        "test runner {} -body {file tail [info nameofexecutable]} -result tclamp\n"
        "cleanupTests\n")
    r = subprocess.run([sys.executable, "-m", "tclamp", "all.tcl"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=300)
    assert "all.tcl:\tTotal\t3\tPassed\t3\tSkipped\t0\tFailed\t0\n" in r.stdout, r.stdout
    assert "Sourced 1 Test Files." in r.stdout
    assert r.returncode == 0


@pytest.mark.parametrize("body", ["catch {py exec {while True: pass}}",
                                  "while 1 {catch {py exec {import time; time.sleep(0.01)}}}"],
                         ids=["python-loop", "tcl-loop"])
def test_ctrl_c_under_catch_ends_a_script(tmp_path, body):
    (tmp_path / "caught.tcl").write_text(
        f"puts started\nflush stdout\n{body}\nputs {{after the catch}}\n")
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-m", "tclamp", "caught.tcl"], cwd=tmp_path,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=python_buffered_env(), preexec_fn=sigint_as_at_a_terminal)
        assert child.stdout.readline() == "started\n"
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        assert (out, err, child.returncode) == ("", "interrupted\n", 128 + signal.SIGINT)


@pytest.mark.parametrize("output", ["pipe", "file", "terminal"])
def test_a_script_keeps_the_written_order(tmp_path, output):
    """Tcl's and Python's output, each with its own buffer, in the order the
    script wrote it (PYTHONUNBUFFERED unset, as in a user's shell)."""
    from test_hosts import written_output
    (tmp_path / "order.tcl").write_text(
        "puts 1\npy exec {print(2)}\nputs 3\npy exec {print(4, end='')}\nputs { and 4}\n"
        "py exec {import tclamp; tclamp.tcl.eval('puts 5'); print(6)}\nputs 7\n")
    command = [sys.executable, "-m", "tclamp", "order.tcl"]
    assert written_output(command, output, tmp_path) == "1\n2\n3\n4 and 4\n5\n6\n7\n"


def test_encoding_option_as_in_tclsh(tmp_path):
    """tclsh -encoding name script.tcl: tclamp took -encoding for an unknown
    option (status 2)."""
    (tmp_path / "latin1.tcl").write_bytes(b'puts [list [string length "h\xe9"] $argv]\n')
    for program in [TCLSH], [sys.executable, "-m", "tclamp"]:
        r = subprocess.run([*program, "-encoding", "iso8859-1", "latin1.tcl", "-x"],
                           capture_output=True, text=True, cwd=tmp_path, env=tcl_env())
        assert (r.stdout, r.stderr, r.returncode) == ("2 -x\n", "", 0)
        r = subprocess.run([*program, "-encoding", "no-such", "latin1.tcl"],
                           capture_output=True, text=True, cwd=tmp_path, env=tcl_env())
        assert (r.stdout, r.stderr, r.returncode) == ("", 'unknown encoding "no-such"\n', 1)


@pytest.mark.parametrize("words, expected", [(["-encoding"], "1 -encoding"),
                                             (["-encoding", "utf-8"], "2 {-encoding utf-8}"),
                                             (["-encoding", ""], "2 {-encoding {}}"),
                                             (["-encoding", "no-such"], "2 {-encoding no-such}")],
                         ids=["no-name", "name", "empty-name", "unknown-name"])
def test_encoding_option_without_a_script_as_in_tclsh(tmp_path, words, expected):
    """tclsh (8.6 and 9.0) takes -encoding as an option only before a name
    and a script; without a script it reads its commands, with those words
    as $argv, and exits 0.  tclamp's was argparse's usage error, status 2
    (`expected one argument`, or `-encoding needs a script`)."""
    piped = "puts [list $argc $argv [file tail $argv0] $tcl_interactive]\n"
    by_tclsh = subprocess.run([TCLSH, *words], input=piped, capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    r = subprocess.run([sys.executable, "-m", "tclamp", *words], input=piped,
                       capture_output=True, text=True, cwd=tmp_path)
    assert (by_tclsh.stdout, by_tclsh.stderr, by_tclsh.returncode) == (
        f"{expected} {Path(TCLSH).name} 0\n", "", 0)
    assert (r.stdout, r.stderr, r.returncode) == (f"{expected} tclamp 0\n", "", 0)
    for program in [TCLSH], [sys.executable, "-m", "tclamp"]:
        r = subprocess.run([*program, *words], stdin=subprocess.DEVNULL, capture_output=True,
                           cwd=tmp_path, env=tcl_env())
        assert (r.stdout, r.stderr, r.returncode) == (b"", b"", 0), program
    if words == ["-encoding"]:
        # At the prompt too: $argv holds the word, and it is interactive.
        child = spawn(tmp_path, *words)
        try:
            assert run(child, "list $argc $argv $tcl_interactive") == f"{expected} 1"
        finally:
            child.close(force=True)


@pytest.mark.parametrize("words", [["-"], ["-", "a", "b"], ["-encoding", "utf-8", "-"],
                                   ["-encoding", "utf-8", "-", "x.tcl"]],
                         ids=["dash", "dash-args", "encoding-dash", "encoding-dash-script"])
def test_a_dash_for_the_script_reads_the_commands_as_in_tclsh(tmp_path, words):
    """`tclsh -` (and `tclsh -encoding name -`): a word that starts with -
    is no script, so tclsh reads its commands from stdin with the words as
    $argv.  tclamp took - for a script's name: `couldn't read file "-": no
    such file or directory`, status 1, and ran none of the piped commands."""
    (tmp_path / "x.tcl").write_text("puts script\n")
    piped = "puts [list $argc $argv $tcl_interactive]\n"
    expected = f"{len(words)} {words[0] if words == ['-'] else '{' + ' '.join(words) + '}'} 0\n"
    for program in [TCLSH], [sys.executable, "-m", "tclamp"]:
        r = subprocess.run([*program, *words], input=piped, capture_output=True, text=True,
                           cwd=tmp_path, env=tcl_env())
        assert (r.stdout, r.stderr, r.returncode) == (expected, "", 0), program


@pytest.mark.parametrize("name", ["-x", "-encoding", "--", "--version", "-h"])
def test_an_encoding_name_that_starts_with_a_dash_is_a_name_as_in_tclsh(tmp_path, name):
    """`tclsh -encoding -x x.tcl`: the word after -encoding is its name,
    whatever it starts with (`unknown encoding "-x"`, status 1).  tclamp's
    argparse took it for an option: `argument -encoding: expected one
    argument` with the usage, status 2 (or printed its version, or help)."""
    (tmp_path / "x.tcl").write_text("puts ran\n")
    for program in [TCLSH], [sys.executable, "-m", "tclamp"]:
        r = subprocess.run([*program, "-encoding", name, "x.tcl"], capture_output=True,
                           text=True, cwd=tmp_path, env=tcl_env())
        assert (r.stdout, r.stderr, r.returncode) == (
            "", f'unknown encoding "{name}"\n', 1), program


def test_an_empty_encoding_name_for_a_script_is_refused_on_each_tcl(tmp_path):
    """`-encoding "" script.tcl`: tclsh 8.6 reads the script as bytes,
    tclsh 9 refuses the name (`unknown encoding "": No longer supported`);
    tclamp refuses it on both, as Interp.eval_file does, and runs nothing."""
    (tmp_path / "ran.tcl").write_text("puts ran\n")
    r = subprocess.run([sys.executable, "-m", "tclamp", "-encoding", "", "ran.tcl"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert (r.stdout, r.stderr, r.returncode) == (
        "", 'unknown encoding "": an empty name names none (leave encoding out for '
        "Tcl's default; iso8859-1 reads each byte as the character of that code)\n", 1)


def test_a_script_named_install_tcl(tmp_path):
    (tmp_path / "install-tcl").write_text("puts [list ran $argv0 $argv]\n")
    for words in (["--", "install-tcl", "x"], ["./install-tcl", "x"]):
        r = subprocess.run([sys.executable, "-m", "tclamp", *words], capture_output=True,
                           text=True, cwd=tmp_path)
        assert (r.stdout, r.returncode) == (f"ran {words[-2]} x\n", 0)


def test_plain_interactive_tclsh_prints_the_version(tmp_path):
    """At a terminal, tclsh echoes results: package require shows the version
    (in a pipe tclsh echoes nothing, so only `puts` output appears)."""
    env = dict(os.environ, TCLLIBPATH=str(ROOT / "tcl"), HOME=str(tmp_path))
    env.pop("TCLAMP_PYTHON", None)
    child = pexpect.spawn(TCLSH, env=env, cwd=str(tmp_path), encoding="utf-8", timeout=60)
    child.expect_exact("% ")
    child.sendline("package require tclamp")
    child.expect_exact(VERSION)
    child.expect_exact("% ")
    child.sendline("torch::autocast_set_dtype float16 cuda extra_arg")
    child.expect_exact("Usage: torch::autocast_set_dtype dtype [device_type]")
    child.expect_exact("% ")
    child.sendline("exit")
    child.expect(pexpect.EOF)


@pytest.mark.parametrize("leave", ["exit()", "quit()"])
def test_exit_at_py_interact_in_a_plain_tclsh_leaves_python_s_stdin_open(tmp_path, leave):
    """In a plain tclsh, exit() at `py interact`'s prompt is the Tcl error
    SystemExit: None (docs/hosts.md) and the prompt goes on.  Python's own
    exit() and quit() closed sys.stdin first: every later `py interact`
    failed at once with `ValueError: I/O operation on closed file.` and Tcl
    read the next line meant for Python."""
    env = dict(os.environ, TCLLIBPATH=str(ROOT / "tcl"), HOME=str(tmp_path))
    env.pop("TCLAMP_PYTHON", None)
    child = pexpect.spawn(TCLSH, env=env, cwd=str(tmp_path), encoding="utf-8", timeout=60)
    child.expect_exact("% ")
    child.sendline("package require tclamp")
    child.expect_exact("% ")
    child.sendline("py interact")
    child.expect_exact(">>> ")
    child.sendline(leave)
    child.expect_exact("% ")
    assert child.before.replace("\r", "") == f"{leave}\nSystemExit: None\n"
    child.sendline("py interact; puts back")
    assert child.expect_exact([">>> ", "% "]) == 0, child.before
    child.sendline("print(6 * 7, repr(exit))")
    assert child.expect_exact([">>> ", "% "]) == 0, child.before
    assert child.before.replace("\r", "") == (
        "print(6 * 7, repr(exit))\n42 Use exit() or Ctrl-D (i.e. EOF) to exit\n")
    child.sendeof()
    child.expect_exact("% ")
    assert child.before.replace("\r", "") == "\nback\n"
    child.sendline("exit")
    child.expect(pexpect.EOF)


def test_torch_is_in_main_at_the_prompt(prompt):
    assert run(prompt, "py eval {torch.ones(3).sum().item()}") == "3.0"


def test_scripts_and_package_require_leave_main_alone(tmp_path):
    """Only the prompt imports torch into __main__: a script run by tclamp
    and a plain tclsh's package require do not."""
    script = tmp_path / "s.tcl"
    script.write_text("package require tclamp\nputs [py eval {'torch' in globals()}]\n")
    by_tclamp = subprocess.run([sys.executable, "-m", "tclamp", str(script)],
                               capture_output=True, text=True, cwd=tmp_path)
    by_tclsh = subprocess.run([TCLSH, str(script)], capture_output=True, text=True,
                              cwd=tmp_path, env=tcl_env())
    assert (by_tclamp.stdout, by_tclsh.stdout) == ("0\n", "0\n")


def test_py_interact_at_the_prompt_returns_at_end_of_file(prompt):
    prompt.sendline("py interact")
    prompt.expect_exact("end of file (Ctrl-D) returns to Tcl")
    prompt.expect_exact(">>> ")
    prompt.sendline("answer = torch.tensor(6) * 7")
    prompt.expect_exact(">>> ")
    prompt.sendeof()
    prompt.expect_exact("% ")
    assert run(prompt, "py eval {answer.item()}") == "42"


def test_exit_under_py_interact_at_the_prompt_ends_tclamp(prompt):
    prompt.sendline("catch {py interact}; puts {after interact}")
    prompt.expect_exact(">>> ")
    prompt.sendline('import tclamp; tclamp.tcl.eval("exit 7")')
    prompt.expect(pexpect.EOF)
    prompt.close()
    assert prompt.exitstatus == 7
    assert "unwound" not in prompt.before and "after interact" not in prompt.before


def test_ctrl_c_under_py_interact_is_python_s(prompt):
    """As at Python's own prompt, Ctrl-C drops the line typed or stops the
    code running; Tcl stays usable from Python, and the Tcl command that
    opened the prompt goes on at end of file."""
    prompt.sendline("py interact; puts {after interact}")
    prompt.expect_exact(">>> ")
    prompt.send("half typed")
    prompt.expect_exact("half typed")
    prompt.sendintr()
    prompt.expect_exact(">>> ")
    assert prompt.before.replace("\r\n", "\n") == "\nKeyboardInterrupt\n"
    prompt.sendline("import time, tclamp; time.sleep(60)")
    prompt.expect_exact("time.sleep(60)\r\n")
    time.sleep(1)
    prompt.sendintr()
    prompt.expect_exact(">>> ")
    assert prompt.before.replace("\r\n", "\n") == (
        '^CTraceback (most recent call last):\n  File "<py interact>", line 1, in <module>\n'
        "KeyboardInterrupt\n")
    assert python_line(prompt, 'tclamp.tcl.eval("set from_python 1")') == "'1'\n"
    prompt.sendeof()
    prompt.expect_exact("% ")
    assert prompt.before.replace("\r", "") == "\nafter interact\n"
    assert run(prompt, "set from_python") == "1"


def test_ctrl_c_under_py_interact_ends_a_tcl_gets_stdin(prompt):
    """Python code waiting in Tcl's gets stdin gets its KeyboardInterrupt
    at Ctrl-C (it waited for a line: the read went on, and Python's
    handler only runs once it returns)."""
    prompt.sendline("py interact; puts {after interact}")
    prompt.expect_exact(">>> ")
    prompt.sendline("import tclamp; tclamp.tcl.eval('gets stdin')")
    prompt.expect_exact("tclamp.tcl.eval('gets stdin')\r\n")
    time.sleep(1)
    prompt.sendintr()
    prompt.expect_exact(">>> ")
    assert prompt.before.replace("\r\n", "\n").splitlines()[-1] == "KeyboardInterrupt"
    prompt.sendline("tclamp.tcl.eval('gets stdin')")
    prompt.expect_exact("tclamp.tcl.eval('gets stdin')\r\n")
    prompt.sendline("a line")
    prompt.expect_exact(">>> ")
    assert prompt.before.replace("\r\n", "\n") == "a line\n'a line'\n"
    prompt.sendeof()
    prompt.expect_exact("% ")
    assert prompt.before.replace("\r", "") == "\nafter interact\n"


def test_ctrl_c_under_py_interact_stops_the_tcl_that_python_runs(prompt):
    """Tcl that Python code at `py interact` runs (tclamp.tcl.eval): Ctrl-C
    stopped nothing, since Python's handler waits for Tcl to return and
    the prompt cancels no script under Python's prompt (its cancel would
    unwind py interact too); the line hung.  Now that evaluation alone
    stops (with a Tcl error that a catch there may take) and raises
    KeyboardInterrupt; Python's prompt, the interpreter, a child
    interpreter (Tcl's cancel marks children too) and the script that
    opened the prompt go on.  A Python loop there still stops as at
    Python's own prompt."""
    prompt.sendline("interp create child; py interact; puts {after interact}")
    prompt.expect_exact(">>> ")
    prompt.sendline("import tclamp")
    prompt.expect_exact(">>> ")
    lines = ["print('started'.upper(), flush=True); exec('while True: pass')"] + [
        f"tclamp.tcl.eval('puts [string toupper started]; flush stdout; {script}')"
        for script in ["while 1 {}", "vwait forever", "after 600000", "while 1 {update}",
                       "child eval {while 1 {}}", "py exec {while True: pass}",
                       "catch {while 1 {}} caught; set ::caught $caught"]]
    for n, line in enumerate(lines, 1):
        prompt.sendline(line)
        prompt.expect_exact("STARTED")        # the line runs (its echo has no capitals)
        prompt.sendintr()
        prompt.expect_exact(">>> ")
        shown = prompt.before.replace("\r\n", "\n")
        assert shown.splitlines()[-1] == "KeyboardInterrupt" and "TclError" not in shown, line
        counted = python_line(prompt, "tclamp.tcl.eval('list [incr n] [child eval {incr n}]')")
        assert counted == f"'{n} {n}'\n", line
    # A catch in that Tcl takes the error, as `except BaseException` takes
    # KeyboardInterrupt in Python; the call raises KeyboardInterrupt still.
    assert python_line(prompt, "tclamp.tcl.eval('set ::caught')") == "'eval canceled'\n"
    prompt.sendeof()
    prompt.expect_exact("% ")
    assert prompt.before.replace("\r", "") == "\nafter interact\n"
    assert run(prompt, "list [incr n] [child eval {incr n}]") == f"{len(lines) + 1} {len(lines) + 1}"


def test_ctrl_c_under_a_child_interpreter_s_py_interact_is_python_s_too(prompt):
    """A child interpreter with tclamp of its own has its own `py interact`,
    which the prompt did not know: Ctrl-C idle at its `>>>` cancelled the
    whole script (with unwinding), so each later line there that ran Tcl
    failed with `eval unwound`, and Tcl that a line ran could not be
    stopped alone.  Now it is as under the interpreter's own py interact."""
    run(prompt, "interp create child; child eval [list set auto_path $auto_path]")
    prompt.sendline("child eval {package require tclamp; py interact}; puts {after interact}")
    prompt.expect_exact(">>> ")
    prompt.sendline("import tclamp")
    prompt.expect_exact(">>> ")
    prompt.sendintr()                       # idle: Python's prompt takes it
    prompt.expect_exact(">>> ")
    prompt.sendline("tclamp.tcl.eval('puts [string toupper started]; flush stdout; while 1 {}')")
    prompt.expect_exact("STARTED")
    prompt.sendintr()
    prompt.expect_exact(">>> ")
    shown = prompt.before.replace("\r\n", "\n")
    assert shown.splitlines()[-1] == "KeyboardInterrupt" and "TclError" not in shown
    assert python_line(prompt, "tclamp.tcl.eval('incr n')") == "'1'\n"
    prompt.sendeof()
    prompt.expect_exact("% ")
    assert prompt.before.replace("\r", "") == "\nafter interact\n"
    assert run(prompt, "child eval {incr n}") == "2"


def test_py_interact_of_another_thread_s_interpreter_at_the_prompt(prompt):
    """The prompt's py interact (which sets Python's SIGINT handler, a thing
    only the main thread may do) is not the one of a Thread package's
    interpreter: that one is the plain one."""
    run(prompt, "package require Thread; set t [thread::create];"
                " thread::send $t [list set auto_path $auto_path]")
    prompt.sendline("thread::send $t {package require tclamp; py interact}; puts {after interact}")
    prompt.expect_exact(">>> ")
    assert python_line(prompt, "print(6 * 7)") == "42\n"
    prompt.sendeof()
    prompt.expect_exact("% ")
    assert prompt.before.replace("\r", "") == "\nafter interact\n"


@pytest.mark.parametrize("python,script", [
    ('tclamp.tcl.eval("exit 3")', "puts [catch {py interact}]\nputs after\n"),
    ('tclamp.tcl.eval("proc f {} {exit 3}; f")', "puts [catch {py interact}]\nputs after\n"),
    ('tclamp.tcl.eval("after 0 {exit 3}; update")', "puts [catch {py interact}]\nputs after\n"),
    ('tclamp.tcl.eval("py interact")\ntclamp.tcl.eval("exit 3")', "py interact\nputs after\n"),
    ('import sys; sys.exit(3)', "py interact\nputs after\n"),
], ids=["tcl-exit", "tcl-exit-in-a-proc", "tcl-exit-in-an-event", "nested", "sys-exit"])
def test_exit_from_python_s_prompt_ends_tclamp(tmp_path, python, script):
    """Under `py interact` in a tclamp script, Tcl's exit called from Python
    ends Python's prompt and tclamp, as sys.exit does there (which a Tcl
    catch may stop, docs/hosts.md), and no catch stops it (it failed the
    call with `eval unwound`, and the prompt went on to the next line)."""
    (tmp_path / "s.tcl").write_text(script)
    r = subprocess.run([sys.executable, "-m", "tclamp", "s.tcl"],
                       input=f"import tclamp\n{python}\nprint('still')\n",
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 3 and "still" not in r.stdout and "after" not in r.stdout
    assert "Traceback" not in r.stderr and "unwound" not in r.stderr, r.stderr


def test_py_interact_in_a_tclsh_script_reads_stdin(tmp_path):
    script = tmp_path / "s.tcl"
    script.write_text("package require tclamp\npy exec {x = 5}\n"
                      "puts \"result: [list [py interact]]\"\nputs \"y: [py eval y]\"\n")
    r = subprocess.run([TCLSH, str(script)], input="y = x * 2\nprint('in', y)\n",
                       capture_output=True, text=True, cwd=tmp_path, env=tcl_env())
    assert r.stdout == ">>> >>> in 10\n>>> result: {}\ny: 10\n"     # prompts, as Python writes them
    assert "end of file (Ctrl-D) returns to Tcl" in r.stderr
