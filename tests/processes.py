"""Running a script in a process of its own, with a time limit, so that a
crash or a hang is a failed test and never a dead pytest."""
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, TCLSH, tcl_env

CRASH_SIGNS = ("Fatal Python error", "Segmentation", "terminate called", "Aborted",
               "double free", "corrupted", "AddressSanitizer")
TIME_LIMIT = 60


def environment():
    """A user's environment for this checkout: its tclamp for Tcl and for
    Python (PYTHONPATH, so that a Python host imports this tree's bridge)."""
    return tcl_env(TCLAMP_PYTHON=sys.executable, PYTHONPATH=str(ROOT / "src"))


def run(command, cwd, timeout=TIME_LIMIT, extra_env=None):
    env = environment()
    env.update(extra_env or {})
    started = time.monotonic()
    try:
        r = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=timeout,
                           env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"{command[0]} hung for {timeout} s\nstdout:\n{hung.stdout}\n"
                    f"stderr:\n{hung.stderr}")
    r.report = (f"exit {r.returncode} after {time.monotonic() - started:.1f} s\n"
                f"stdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}")
    return r


def tclsh(tmp_path, script, name="main.tcl", **kwargs):
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    return run([TCLSH, str(path)], tmp_path, **kwargs)


def python(tmp_path, script, options=(), name="main.py", **kwargs):
    path = tmp_path / name
    path.write_text(textwrap.dedent(script))
    return run([sys.executable, *options, str(path)], tmp_path, **kwargs)


# For a script's memory checks: glibc's count of the bytes malloc has
# handed out (mallinfo2), which Python's own small objects do not reach,
# after `count` threads that each ran `work`, one after another.
BYTES_IN_USE = """\
import ctypes, gc, threading
class _Counts(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                'arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost'.split()]
_libc = ctypes.CDLL(None)
_libc.mallinfo2.restype = _Counts
def bytes_in_use_after_threads(count, work):
    for _ in range(count):
        t = threading.Thread(target=work)
        t.start(); t.join()
    gc.collect()
    return _libc.mallinfo2().uordblks
"""


def assert_no_crash(r):
    assert r.returncode >= 0, r.report       # not killed by a signal
    for sign in CRASH_SIGNS:
        assert sign not in r.stderr, r.report


def assert_clean(r, rc=0):
    assert_no_crash(r)
    assert r.returncode == rc, r.report
    assert "Traceback" not in r.stderr, r.report
