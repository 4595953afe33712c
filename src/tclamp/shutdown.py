"""The end of the process, as the C bridge runs it (lifecycle.c,
close_python): the steps it calls, in the order of SHUTDOWN_STEPS."""
import gc
import io
import threading

from . import _pycompat


def run_atexit():
    """Python's atexit handlers, as its own end runs them (once).  Not once
    that end has begun to run them: a Tcl `exit` from one of them, or from
    another thread meanwhile, would run them all again."""
    if not _atexit_begun:
        _pycompat.run_exitfuncs()


_atexit_begun = False


def _mark_atexit_begun():
    global _atexit_begun
    _atexit_begun = True


_pycompat.after_threading_shutdown(_mark_atexit_begun)


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
