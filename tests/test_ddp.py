"""examples/train_ddp.tcl under torchrun, with 2 CPU ranks over gloo: the
ranks end with the same weights, the loss falls, and an error on one rank
fails the whole run.  Each tclsh finds tclamp through TCLLIBPATH, which
torchrun passes on from the caller's environment (the documented route)."""
import re
import subprocess
import sys

from conftest import ROOT, TCLSH, tcl_env

EXAMPLE = ROOT / "examples" / "train_ddp.tcl"
EPOCH = re.compile(r"^epoch (\d+) loss ([\d.]+) scale ([\d.e+]+)$")
PARAMETERS = 16 * 32 + 32 + 32 + 1


def torchrun(*args, cwd):
    # --standalone: a free port, so nothing else on the machine can clash.
    # torchrun's own module: the torchrun script may sit in another
    # environment than this Python (a venv that sees the machine's torch).
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--no-python", "--nproc-per-node", "2",
                           TCLSH, *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=tcl_env(), timeout=300)


def test_two_ranks_train_alike(tmp_path):
    r = torchrun(EXAMPLE, "-epochs", 6, "-dtype", "float16", "-dump", tmp_path, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "terminate called" not in out
    weights = [(tmp_path / f"rank{n}.txt").read_text() for n in (0, 1)]
    assert len(weights[0].split()) == PARAMETERS
    assert weights[0] == weights[1]
    lines = r.stdout.splitlines()
    assert lines[0] == "training on 2 ranks (cpu, float16)"
    epochs = [m.groups() for line in lines if (m := EPOCH.match(line))]
    assert [int(e) for e, _, _ in epochs] == [1, 2, 3, 4, 5, 6]   # rank 0 alone logs
    losses = [float(loss) for _, loss, _ in epochs]
    assert losses[-1] < losses[0] / 4, losses
    assert all(float(scale) >= 1.0 for *_, scale in epochs)       # float16: a real scaler


def test_an_error_on_one_rank_fails_the_run(tmp_path):
    """Rank 1 fails at its third optimizer step (bfloat16, the CPU default):
    torchrun stops rank 0 and exits non-zero, naming rank 1 as the root
    cause.  Rank 1 reports its error and exits 1; after the report, its
    teardown may abort instead (exitcode -6, "terminate called without an
    active exception"): torch's gloo teardown while the peer is gone, which
    pure Python shows too (tests/ddp_failing_rank.py: 1 abort in 42 runs on
    Python 3.12, torch 2.13, none in 20 runs of this test's script).  Rank 0,
    whose peer is gone, may abort the same way, and then torchrun may observe
    it first and name it as the root cause (exitcode -6, seen once in CI)."""
    script = tmp_path / "failing.tcl"
    script.write_text(
        "package require tclamp\n"
        "if {$env(RANK) == 1} {\n"
        "    trace add execution torch::grad_scaler_step enter {apply {args {\n"
        "        if {[incr ::steps] == 3} { error \"rank 1 broke at step 3\" }\n"
        "    }}}\n"
        "}\n"
        f"source {{{EXAMPLE}}}\n")
    r = torchrun(script, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert r.stdout.splitlines()[0] == "training on 2 ranks (cpu, bfloat16)"
    assert not any(EPOCH.match(line) for line in r.stdout.splitlines())
    assert out.count("rank 1 broke at step 3\n") == 1
    root_cause = out[out.index("Root Cause"):]
    abort = "terminate called without an active exception"
    rank1 = r"1 \(local_rank: 1\)\s*\n\s*exitcode\s*: 1"
    if abort in out:        # gloo's teardown, after rank 1 reported its error
        assert out.index("rank 1 broke at step 3\n") < out.index(abort), out
        rank1 = r"1 \(local_rank: 1\)\s*\n\s*exitcode\s*: (1|-6)"
    rank0 = r"0 \(local_rank: 0\)\s*\n\s*exitcode\s*: -6"    # its peer gone
    failed = rf"rank\s*: ({rank1}|{rank0}) "
    assert re.search(failed, root_cause), out


def test_unknown_option(tmp_path):
    r = subprocess.run([TCLSH, str(EXAMPLE), "-epoch", "3"], capture_output=True, text=True,
                       cwd=tmp_path, env=tcl_env(), timeout=300)
    assert r.returncode == 1
    assert r.stderr.startswith('unknown option "-epoch": use -epochs, -dtype or -dump\n')
