"""Soak: many threads of mixed commands, py calls, errors, handles and
interpreters at once.  `make test` runs it briefly; `make soak` (or
TCLAMP_SOAK_SECONDS) runs it longer."""
import os
import sys

import pytest

from conftest import ROOT, run_tclsh


@pytest.mark.soak
def test_soak(tmp_path):
    seconds = float(os.environ.get("TCLAMP_SOAK_SECONDS", "6"))
    r = run_tclsh(f"set argv {{{seconds} 4}}\nsource {ROOT / 'tests' / 'soak.tcl'}\n",
                  tmp_path, TCLAMP_PYTHON=sys.executable)
    report = f"exit {r.returncode}\nstderr:\n{r.stderr[-3000:]}\nstdout:\n{r.stdout[-2000:]}"
    assert r.returncode == 0 and r.stderr == "", report
    lines = r.stdout.splitlines()
    workers = [line.split(maxsplit=1)[1] for line in lines if line.startswith("worker ")]
    assert len(workers) == 4, report
    for worker in workers:
        rounds, errorcode = worker.rsplit(" ", 1)
        assert errorcode == "NONE", worker
        assert int(rounds) > 10
    assert int(next(l for l in lines if l.startswith("main ")).split()[1]) > 10
    before, after = map(int, next(l for l in lines if l.startswith("rss ")).split()[1:])
    # The second run repeats the first: memory must not keep growing.
    assert after - before < 16 * 1024, f"resident memory grew by {after - before} KiB"
    assert lines[-1] == "handles 0"
