"""pytest plugin: runs tcltest files (*.test) in a real tclsh, one pytest
item per tcltest case.

Installed with tclamp (entry point `pytest11`), so any project can put its
own *.test files under pytest.  Each file runs once, in its own tclsh, with
tclamp findable (auto_path) and Python started from this pytest's
interpreter (TCLAMP_PYTHON).  Set TCLSH to use another tclsh.
"""
import os
import re
import subprocess
import sys

import pytest

from . import PACKAGE_DIR

DRIVER = PACKAGE_DIR / "tcltest_driver.tcl"
START = re.compile(r"^---- (\S+) start$")
PASSED = re.compile(r"^\+\+\+\+ (\S+) PASSED$")
SKIPPED = re.compile(r"^\+\+\+\+ (\S+) SKIPPED: (.*)$")
FAILED_END = re.compile(r"^==== (\S+) FAILED$")


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".test":
        return TclTestFile.from_parent(parent, path=file_path)
    return None


def run_tcltest_file(path, timeout=600):
    """(outcomes, log, returncode): outcome per case name in run order,
    each ("passed"|"skipped"|"failed", detail)."""
    env = dict(os.environ, TCLAMP_PYTHON=os.environ.get("TCLAMP_PYTHON", sys.executable))
    proc = subprocess.run([os.environ.get("TCLSH", "tclsh"), str(DRIVER), str(path)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, env=env, errors="replace")
    outcomes, detail = {}, None
    for line in proc.stdout.splitlines():
        if m := START.match(line):
            outcomes[m[1]] = None
            detail = []
        elif m := PASSED.match(line):
            outcomes[m[1]] = ("passed", "")
        elif m := SKIPPED.match(line):
            outcomes[m[1]] = ("skipped", m[2])
        elif m := FAILED_END.match(line):
            outcomes[m[1]] = ("failed", "\n".join(detail or []).strip())
        elif detail is not None:
            detail.append(line)
    return outcomes, proc.stdout + proc.stderr, proc.returncode


class TclTestFile(pytest.File):
    def collect(self):
        outcomes, log, returncode = run_tcltest_file(self.path)
        for name, outcome in outcomes.items():
            if outcome is None:   # started, never finished: tclsh died
                outcome = ("failed", f"tclsh exited ({returncode}) in this test:\n{log[-4000:]}")
            yield TclTestCase.from_parent(self, name=name, outcome=outcome)
        if returncode != 0 or not outcomes:
            # an error outside any test case, or no test case at all
            yield TclTestCase.from_parent(
                self, name="<file>", outcome=("failed", f"tclsh exited {returncode}:\n{log[-4000:]}"))


class TclTestCase(pytest.Item):
    def __init__(self, *, outcome, **kwargs):
        super().__init__(**kwargs)
        self.outcome = outcome

    def runtest(self):
        status, detail = self.outcome
        if status == "skipped":
            pytest.skip(detail)
        if status == "failed":
            raise TclTestFailure(detail)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, TclTestFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::{self.name}"


class TclTestFailure(Exception):
    pass
