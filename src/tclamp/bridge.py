"""The Python side of the bridge: the `py` ensemble and `tclamp.tcl`.

Arguments arrive as str, or as the object itself when the argument names a
live object handle (the C bridge looks those up).
"""
import atexit
import builtins
import gc
import importlib
import io
import sys
import threading

from . import _bridge, scope
from .errors import UsageError


def _main_namespace():
    return sys.modules["__main__"].__dict__


def _wrong_args(usage):
    return UsageError("WRONG_ARGS", f'wrong # args: should be "{usage}"')


def py_import(*args):
    """py import module: import it and bind its top-level name in __main__."""
    if len(args) != 1:
        raise _wrong_args("py import module")
    name = args[0]
    importlib.import_module(name)
    top = name.partition(".")[0]
    _main_namespace()[top] = sys.modules[top]
    return name


def resolve(name):
    """The object a dotted name means: looked up in __main__, then in
    builtins, then imported as a module path (os.path.join).  `py call`
    (in C) does the first two itself and comes here for the rest."""
    first, *rest = name.split(".")
    namespace = _main_namespace()
    if first in namespace:
        obj = namespace[first]
    elif hasattr(builtins, first):
        obj = getattr(builtins, first)
    else:
        for split in range(len(rest), -1, -1):
            module_name = ".".join([first, *rest[:split]])
            try:
                obj = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                # Only "this module does not exist" means: try a shorter
                # path.  A module that exists but fails to import its own
                # imports shows that error.
                if exc.name not in parents(module_name):
                    raise
                continue
            rest = rest[split:]
            break
        else:
            raise NameError(f"name '{first}' is not defined")
    for attribute in rest:
        obj = getattr(obj, attribute)
    return obj


def parents(module_name):
    """os.path.join -> {"os", "os.path", "os.path.join"}"""
    parts = module_name.split(".")
    return {".".join(parts[:n]) for n in range(1, len(parts) + 1)}


def add_py_ensemble(interp):
    # call, eval and exec are the bridge's C commands (they run every time a
    # script uses Python); import is here.
    for kind in ("call", "eval", "exec"):
        interp.create_py_command(f"::py::{kind}", kind, resolve)
    interp.create_command("::py::import", py_import)
    scope.add_commands(interp)
    # ::py::release is the bridge's own (it deletes the handle's command).
    interp.eval("namespace eval ::py {namespace ensemble create"
                " -subcommands {call eval exec import keep release scope}}")


_thread_interp = threading.local()


class CurrentTcl:
    """tclamp.tcl: the Tcl interpreter whose command is running this Python
    code, or else this thread's own in-process interpreter (made on first
    use)."""

    @property
    def interp(self):
        interp = _bridge.current()
        if interp is None:
            interp = getattr(_thread_interp, "interp", None)
            if interp is None or not interp.alive:
                interp = _thread_interp.interp = _bridge.Interp()
        return interp

    def eval(self, script, *, result=str):
        """Evaluate a Tcl script at global level; returns the result as str,
        or as `result` asks (int, float, list, object: see docs/py.md)."""
        return self.interp.eval(script, result=result)

    def call(self, command, *args, result=str):
        """Call a Tcl command; args go over as Tcl values (str, numbers,
        lists, dicts; other objects as handles).  The result as eval's."""
        return self.interp.call(command, *args, result=result)


tcl = CurrentTcl()


# --- the end of the process, as the C bridge runs it (see close_python) ----

def run_atexit():
    """Python's atexit handlers, as its own end runs them (once)."""
    atexit._run_exitfuncs()


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
    thread = threading.current_thread()
    lock = getattr(thread, "_tstate_lock", None)            # Python 3.12 and older
    if lock is not None and lock.locked():
        lock.release()
    stop = getattr(thread, "_stop", None)
    if stop is not None:
        stop()
    handle = getattr(thread, "_handle", None)               # Python 3.13
    if handle is not None and not handle.is_done():
        handle._set_done()
        thread._delete()
        # Python's own end still waits for every thread it started to come
        # back to its thread bootstrap, which this one never does.
        threading._thread_shutdown = join_other_threads


def join_other_threads():
    """threading's end on Python 3.13 once a thread has ended under
    thread::exit: wait for the non-daemon threads that still run."""
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join()


SHUTDOWN_STEPS = (run_atexit, other_threads_running, thread_ended, flush_files)
