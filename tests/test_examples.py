"""The example scripts a user runs (make demo runs the first)."""
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, TCLSH, run_tclsh, tcl_env

ROW = re.compile(r"^(\d+)\s+(\w+)\s+([\d.]+)\s+([\d.]+)$")


def test_train_amp_demo(tmp_path):
    r = run_tclsh(f"source {ROOT / 'examples' / 'train_amp.tcl'}\n", tmp_path)
    assert r.returncode == 0 and r.stderr == ""
    rows = [m.groups() for line in r.stdout.splitlines() if (m := ROW.match(line))]
    assert [(int(e), d) for e, d, _, _ in rows] == [
        (0, "bfloat16"), (1, "bfloat16"), (2, "bfloat16"),
        (3, "float16"), (4, "float16"), (5, "float16")]
    losses = [float(full) for *_, full in rows]
    start = float(r.stdout.splitlines()[1].split()[-1])
    assert losses == sorted(losses, reverse=True) and losses[-1] < start / 10
    lines = r.stdout.splitlines()
    switch = lines.index("-- schedule: autocast now computes in float16")
    assert lines[switch + 1].startswith("3 ")
    end = lines.index("handles left: 0")     # each step in py scope, the rest freed
    assert lines[end - 1].startswith("grad scaler scale: ")
    # It ends with the trace of one float16 step with the grad scaler.
    assert lines[end + 1:end + 3] == [
        "-- one training step in float16, traced:",
        "operator                                          dtype    count  nonfinite"]
    rows = {tuple(line.split()[:2]): int(line.split()[2]) for line in lines[end + 4:]}
    assert len(rows) == len(lines) - end - 4
    # three Linear layers forward in float16, their weight gradients' matmuls too
    assert rows[("aten::addmm", "float16")] == 3 and rows[("aten::mm", "float16")] == 5
    assert ("aten::_amp_foreach_non_finite_check_and_unscale_", "none") in rows
    assert not any(dtype == "bfloat16" for _, dtype in rows)


def test_inference_example(tmp_path):
    r = run_tclsh(f"source {ROOT / 'examples' / 'infer_amp.tcl'}\n", tmp_path)
    lines = r.stdout.splitlines()
    assert lines[:2] == ["float32 output: torch.float32", "autocast output: torch.bfloat16"]
    assert float(lines[2].split()[-1]) < 0.05
    assert lines[3] == "autocast still on after the block: 0"
    assert lines[4:] == ["handles left: 0"]


def test_each_example_s_run_line_names_programs_a_checkout_has():
    """The command in each example's header runs as written from a checkout
    after `make setup`, with no environment activated: its programs are
    tclsh or the ones in .venv/bin (torchrun is not on PATH)."""
    for example in sorted((ROOT / "examples").glob("*.tcl")):
        header = example.read_text().split("package require")[0]
        runs = re.findall(r"^#   TCLLIBPATH=\S+ (\S+)", header, re.M)
        for program in runs:
            assert program == "tclsh" or program.startswith(".venv/bin/"), (example.name, program)


@pytest.mark.parametrize("args,error", [
    (["-epochs"], 'option "-epochs" needs a value'),
    (["-epochs", "2", "-dtype"], 'option "-dtype" needs a value'),
    (["-epochs", "two"], '-epochs needs a whole number of epochs, 1 or more: got "two"'),
    (["-epochs", "0"], '-epochs needs a whole number of epochs, 1 or more: got "0"'),
])
def test_ddp_example_refuses_an_option_without_a_value_before_it_starts(args, error, tmp_path):
    """`-epochs` with no value trained for no epoch at all and ended as if
    it had trained; the check comes before torch.distributed, so it needs
    no torchrun."""
    r = subprocess.run([shutil.which(TCLSH) or TCLSH, str(ROOT / "examples" / "train_ddp.tcl"), *args],
                       capture_output=True, text=True, cwd=tmp_path, env=tcl_env(), timeout=300)
    assert r.returncode != 0 and r.stderr.startswith(error + "\n"), r.stderr
    assert "torch.distributed" not in r.stderr and r.stdout == ""
