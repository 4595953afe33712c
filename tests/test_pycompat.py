"""The CPython-private names of the process-life code (_pycompat.py): each
chosen by the running version, and a Python without one refuses to import
tclamp, naming it."""
import subprocess
import sys
import textwrap

from conftest import ROOT
from tclamp import _pycompat

VERSION = sys.version.split()[0]


def run_python(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_each_python_gets_the_name_its_version_has():
    expected = ("_os_thread_handle" if sys.version_info >= (3, 14)
                else "_handle" if sys.version_info >= (3, 13) else None)
    assert _pycompat.THREAD_HANDLE == expected


def test_a_missing_name_stops_the_import_and_is_named():
    r = run_python("""
        import atexit
        del atexit._run_exitfuncs
        try:
            import tclamp
        except ImportError as e:
            print(type(e).__name__, e)
    """)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == (f"MissingPrivateAPI tclamp: Python {VERSION} has no atexit._run_exitfuncs, "
                        "which tclamp needs to run atexit handlers at exit; "
                        "this Python is not supported yet\n")


def test_a_missing_thread_name_stops_the_import_and_is_named():
    # Up to 3.12 a method of the class; from 3.13 on an attribute of each thread.
    name, removal = (("_stop", "del threading.Thread._stop") if sys.version_info < (3, 13) else
                     (_pycompat.THREAD_HANDLE, f"del threading.main_thread().{_pycompat.THREAD_HANDLE}"))
    r = run_python(f"""
        import os, threading
        {removal}
        try:
            import tclamp
        except ImportError as e:
            print(e, flush=True)
        os._exit(0)     # Python's own end needs what was removed
    """)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == (f"tclamp: Python {VERSION} has no threading.Thread.{name}, which tclamp "
                        "needs to mark a thread ended that thread::exit stopped; "
                        "this Python is not supported yet\n")


def test_an_ended_thread_is_neither_joined_nor_waited_for_at_exit():
    # The thread never returns to threading's bootstrap (as under
    # thread::exit): it waits on an event nobody sets.
    r = run_python("""
        import threading
        from tclamp import _pycompat
        ended, never = threading.Event(), threading.Event()

        def body():
            _pycompat.end_thread(threading.current_thread(), lambda: print("shutdown replaced"))
            ended.set()
            never.wait()

        thread = threading.Thread(target=body)
        thread.start()
        ended.wait()
        thread.join()
        print("joined", thread.is_alive())
    """)
    replaced = "shutdown replaced\n" if sys.version_info >= (3, 13) else ""
    assert (r.returncode, r.stdout, r.stderr) == (0, "joined False\n" + replaced, "")


def test_only_the_end_of_waiting_is_kept_quiet():
    seen = []
    hook = _pycompat._quiet_threads_ended(seen.append)
    other = type("Unraisable", (), {"exc_value": ValueError("shown")})
    hook(type("Unraisable", (), {"exc_value": _pycompat.ThreadsEnded("quiet")}))
    hook(other)
    assert seen == [other]
    assert _pycompat.STOP_WAITING_BY_EXCEPTION == (sys.version_info >= (3, 15))
