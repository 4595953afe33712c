"""The private parts of CPython that tclamp's process-life code uses.

CPython renames and drops these between versions.  Each one is chosen here
by the running Python's version (newest first, each naming the CPython
version that made it so) and looked up when tclamp is imported: a Python
that lacks what its version should have makes `import tclamp` (and so
`package require tclamp`) fail, naming what is missing, instead of leaving
a step of the process's end to do nothing.
"""
import atexit
import sys
import threading


class MissingPrivateAPI(ImportError):
    """This Python lacks a private name that tclamp's process life needs."""


def _since(choices):
    """The value of `choices` ((first CPython version, value), newest first,
    the last for every older one) for the running Python."""
    return next(value for version, value in choices if sys.version_info >= version)


def _lookup(owner, owner_name, name, purpose):
    """owner.name, or a MissingPrivateAPI that says who needs it."""
    try:
        return getattr(owner, name)
    except AttributeError:
        raise MissingPrivateAPI(
            f"tclamp: Python {sys.version.split()[0]} has no {owner_name}.{name}, which "
            f"tclamp needs {purpose}; this Python is not supported yet") from None


# atexit's own run of the handlers, once (all supported versions).
run_exitfuncs = _lookup(atexit, "atexit", "_run_exitfuncs", "to run atexit handlers at exit")
# Python's end calls threading._shutdown, then runs the atexit handlers
# (all supported versions).
_lookup(threading, "threading", "_shutdown", "to know when Python's end runs atexit")


def after_threading_shutdown(mark):
    """Makes Python's end call `mark()` once threading's shutdown is over
    (it may raise): its atexit handlers run next."""
    shutdown = threading._shutdown

    def shutdown_then_mark():
        try:
            return shutdown()
        finally:
            mark()
    threading._shutdown = shutdown_then_mark

_ENDING = "to mark a thread ended that thread::exit stopped"

# Where a thread's "it has ended" lives.  Up to 3.12 in its tstate lock,
# released with _stop(); 3.13 made it a thread handle (_handle) that
# _set_done() ends, and joins and Python's end wait on handles
# (threading._thread_shutdown); 3.14 renamed the handle _os_thread_handle.
THREAD_HANDLE = _since((((3, 14), "_os_thread_handle"), ((3, 13), "_handle"), ((3, 0), None)))

if THREAD_HANDLE is None:
    _lookup(threading.main_thread(), "threading.Thread", "_tstate_lock", _ENDING)
    _lookup(threading.Thread, "threading.Thread", "_stop", _ENDING)
else:
    _handle_type = type(_lookup(threading.main_thread(), "threading.Thread", THREAD_HANDLE, _ENDING))
    for _name in ("is_done", "_set_done"):
        _lookup(_handle_type, f"threading.Thread.{THREAD_HANDLE}", _name, _ENDING)
    _lookup(threading.Thread, "threading.Thread", "_delete", _ENDING)
    _lookup(threading, "threading", "_thread_shutdown", _ENDING)


# 3.15 calls threading._shutdown again and again while a non-daemon
# thread's state is left (gh-136003), and an ended thread's state stays
# (its frames are live).  An exception from it makes Python's end take the
# threads left for daemon threads (gh-139129).
STOP_WAITING_BY_EXCEPTION = _since((((3, 15), True), ((3, 0), False)))


class ThreadsEnded(Exception):
    """What threading's end raises from 3.15 on, once the threads that
    still run have been joined: the ones left ended under thread::exit."""


def _quiet_threads_ended(previous):
    """sys.unraisablehook, less ThreadsEnded: Python's end reports it as
    unraisable, and it is no error."""
    def hook(unraisable):
        if not isinstance(unraisable.exc_value, ThreadsEnded):
            previous(unraisable)
    hook.quiets_threads_ended = True
    return hook


def _shutdown_then_stop_waiting(shutdown):
    def shutdown_and_stop():
        shutdown()
        raise ThreadsEnded("tclamp: the threads left ended under thread::exit")
    return shutdown_and_stop


def end_thread(thread, shutdown):
    """Marks `thread` (the current one, which will never return to
    threading's bootstrap) ended, so that joins and the process's end do
    not wait for it.  From 3.13 on, Python's end also waits for every
    thread it started to come back to the bootstrap: `shutdown` (a
    function of no arguments) replaces that wait."""
    if THREAD_HANDLE is None:
        lock = thread._tstate_lock      # None on a thread threading did not start
        if lock is not None and lock.locked():
            lock.release()
        thread._stop()
        return
    handle = getattr(thread, THREAD_HANDLE)
    if not handle.is_done():
        handle._set_done()
        thread._delete()
        if STOP_WAITING_BY_EXCEPTION:
            shutdown = _shutdown_then_stop_waiting(shutdown)
            if not getattr(sys.unraisablehook, "quiets_threads_ended", False):
                sys.unraisablehook = _quiet_threads_ended(sys.unraisablehook)
        threading._thread_shutdown = shutdown


# 3.13 made the GIL optional (free-threaded builds) and gave sys a way to
# ask whether it is on; before, it always is.
if sys.version_info >= (3, 13):
    _lookup(sys, "sys", "_is_gil_enabled", "to know whether the GIL is on")


def runs_without_gil():
    """Whether this is a free-threaded Python running with its GIL off.
    tclamp's bridge relies on the GIL (the threading notes in bridge.h).
    Asked of sys each time, so that a test can give the answer."""
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    return is_enabled is not None and not is_enabled()


FREE_THREADED_ERROR = (
    "tclamp: {who} is free-threaded and runs without the GIL, which tclamp's bridge relies on "
    "(see the threading notes in bridge.h): run it with the GIL on (PYTHON_GIL=1) or use a "
    "Python built with the GIL")
