"""Python code that runs Tcl through tclamp in a process that runs tkinter.

Each tkinter callback takes the GIL back from the thread state that tkinter
parked as it entered Tcl, and Python aborts when it finds none: Tcl run
from Python through tclamp can reach those callbacks (`update`, `vwait`).
So on such a thread the bridge enters Tcl by the `call` of a tkinter
interpreter of the thread's own, as tkinter enters it, and a command of the
bridge's in that interpreter does the work (run_without_gil in interp.c).
"""
import sys
import threading

from . import _bridge

# The thread's entry: here.call (None where tkinter runs another Tcl), and
# the interpreter it calls, which goes with the thread's other locals.
here = threading.local()


def make():
    """Makes this thread's entry (the bridge calls it on the first need)."""
    here.call = None
    tkinter = sys.modules["_tkinter"]
    path = getattr(tkinter, "__file__", None)
    if path is None:
        return                  # built into Python: its Tcl cannot be told from ours
    try:
        # Tcl alone (no Tk, no window); results as str
        app = tkinter.create(None, "", "Tk", False, False, False)
    except tkinter.TclError:
        return                  # tkinter's Tcl cannot start here: it runs no callbacks either
    if _bridge.serve_tkinter(app.interpaddr(), path):
        here.app, here.call = app, app.call
