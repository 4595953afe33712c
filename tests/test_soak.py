"""Soak: many threads of mixed commands, py calls, errors, handles and
interpreters at once; then every host and way of ending, over and over.
`make test` runs them briefly; `make soak` (TCLAMP_SOAK_SECONDS=600) runs
them for ten minutes, half each."""
import itertools
import os
import sys
import time

import pytest

from conftest import ROOT, run_tclsh

SOAK_SECONDS = float(os.environ.get("TCLAMP_SOAK_SECONDS", "6"))


@pytest.mark.soak
def test_soak(tmp_path):
    seconds = SOAK_SECONDS / 2
    r = run_tclsh(f"set argv {{{seconds} 4}}\nsource {ROOT / 'tests' / 'soak.tcl'}\n",
                  tmp_path, timeout=seconds + 300, TCLAMP_PYTHON=sys.executable)
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


@pytest.mark.soak
def test_hosts_soak(tmp_path_factory):
    """Round after round of the host matrix (tests/test_hosts.py), in a
    shuffled order, until the time is up; every run is checked in full."""
    import random
    from test_hosts import ENDINGS, HOSTS, test_host_and_ending
    # A host given as pytest.param (tkinter) runs unless its skip mark applies.
    hosts = [host.values[0] if hasattr(host, "values") else host for host in HOSTS
             if not any(mark.name == "skipif" and mark.args[0]
                        for mark in getattr(host, "marks", ()))]
    combinations = list(itertools.product(hosts, ENDINGS))
    deadline = time.monotonic() + SOAK_SECONDS / 2
    runs = 0
    while runs == 0 or time.monotonic() < deadline:
        random.shuffle(combinations)
        for host, ending in combinations:
            try:
                test_host_and_ending(host, ending, tmp_path_factory.mktemp(f"{host}-{ending}"))
            except pytest.skip.Exception:
                continue    # a host this machine lacks (under gpu-check: conftest's needs_setup)
            runs += 1
            if time.monotonic() >= deadline:
                break
    print(f"{runs} host runs")
