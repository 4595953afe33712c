"""tclamp: control PyTorch automatic mixed precision from Tcl.

From Tcl: `package require tclamp` gives the torch:: commands and `py`.
From Python: `tclamp.tcl.eval(script)` runs Tcl in the interpreter that
called this code, or in this thread's own in-process interpreter.
"""
from pathlib import Path

# Defined before the submodules are imported: errors.py uses it too.
PACKAGE_DIR = Path(__file__).absolute().parent

import atexit  # noqa: E402

from . import _bridge  # noqa: E402
from .bridge import SHUTDOWN_STEPS, tcl  # noqa: E402
from .errors import TclError, UsageError, describe_error  # noqa: E402

__version__ = (PACKAGE_DIR / "VERSION").read_text().strip()   # written there only
__all__ = ["Interp", "TclError", "UsageError", "tcl", "__version__"]

Interp = _bridge.Interp

_bridge.configure(TclError, describe_error, SHUTDOWN_STEPS)
atexit.register(_bridge.at_python_exit)


def _attach(interp):
    """Called by the C bridge for every Tcl interpreter that gets tclamp."""
    from . import bridge, commands

    bridge.add_py_ensemble(interp)
    commands.register(interp)
    # Child interpreters find the package beside this file.
    interp.call("apply", "{dir} {if {$dir ni $::auto_path} {lappend ::auto_path $dir}}",
                str(PACKAGE_DIR))
    interp.call("package", "provide", "tclamp", __version__)
