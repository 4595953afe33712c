"""The end of the process, as the C bridge runs it (lifecycle.c,
close_python): the steps it calls, in the order of SHUTDOWN_STEPS."""
import gc
import io
import threading

from . import _pycompat


def run_atexit():
    """Python's atexit handlers, as its own end runs them (once).  Not when
    that end is under way on Python's main thread (threading's shutdown
    comes first): it runs them, and a Tcl `exit` from one of them would run
    them all again."""
    if not (threading._SHUTTING_DOWN and threading.current_thread() is threading.main_thread()):
        _pycompat.run_exitfuncs()


def flush_files():
    """Every open file's buffered data is written out."""
    for obj in gc.get_objects():
        # By type alone: isinstance would ask proxies and lazy modules.
        if issubclass(type(obj), BUFFERED_FILES):
            try:
                if not obj.closed:
                    obj.flush()
            except Exception:  # a broken stream must not stop the rest
                pass


BUFFERED_FILES = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)


def other_threads_running():
    """Whether finalizing would wait for a thread of Python's: exit must
    not.  From another thread, finalizing also waits for Python's main
    thread: the Tcl thread that started Python, which may be alive."""
    current = threading.current_thread()
    return any(t is not current and not t.daemon and t.is_alive()
               for t in threading.enumerate())


def thread_ended():
    """This thread is ending while Python keeps its state (thread::exit with
    Python frames live, or the thread that started Python): tell threading,
    so that joins and the process's end do not wait for it."""
    _pycompat.end_thread(threading.current_thread(), join_other_threads)


def join_other_threads():
    """threading's end from Python 3.13 on, once a thread has ended under
    thread::exit: wait for the non-daemon threads that still run."""
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join()


SHUTDOWN_STEPS = (run_atexit, other_threads_running, thread_ended, flush_files)
