"""tclamp.tcl: the Tcl interpreter of the Python code that runs now."""
import threading

from . import _bridge

_thread_interp = threading.local()


class CurrentTcl:
    """tclamp.tcl: the Tcl interpreter whose command is running this Python
    code, or else this thread's own in-process interpreter (made on first
    use)."""

    @property
    def interp(self):
        interp = _bridge.current()
        if interp is None:
            if _bridge.thread_ended():
                # A finalizer that the thread's end runs, while Python clears
                # the thread's locals: reading _thread_interp would make them
                # anew, and nothing would free them.  Interp() refuses.
                return _bridge.Interp()
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
