"""Python code that runs Tcl through tclamp in a process that runs tkinter.

Each tkinter callback takes the GIL back from the thread state that tkinter
parked as it entered Tcl, and Python aborts when it finds none: Tcl run
from Python through tclamp can reach those callbacks (`update`, `vwait`).
So on such a thread the bridge enters Tcl by the `call` of a tkinter
interpreter of the thread's own, as tkinter enters it, and a command of the
bridge's in that interpreter does the work (run_without_gil in interp.c).
"""
import sys

from . import _bridge


def make():
    """This thread's entry (the bridge keeps it for the thread): the `call`
    of a new Tcl-only tkinter interpreter, or None where tkinter's Tcl is not
    tclamp's."""
    tkinter = sys.modules["_tkinter"]
    path = getattr(tkinter, "__file__", None)
    if path is None:
        return None             # built into Python: its Tcl cannot be told from ours
    try:
        app = tkinter.create(None, "", "Tk", False, False, False)   # no Tk, no window; str results
    except tkinter.TclError:
        return None             # tkinter's Tcl cannot start here: it runs no callbacks either
    return app.call if _bridge.serve_tkinter(app.interpaddr(), path) else None
