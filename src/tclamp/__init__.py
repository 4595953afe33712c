"""tclamp: control PyTorch automatic mixed precision from Tcl.

From Tcl: `package require tclamp` gives the torch:: commands and `py`.
From Python: `tclamp.tcl.eval(script)` runs Tcl in the interpreter that
called this code, or in this thread's own in-process interpreter.
"""
from pathlib import Path

# Defined before the submodules are imported: errors.py uses it too.
PACKAGE_DIR = Path(__file__).absolute().parent

import atexit  # noqa: E402
import ctypes  # noqa: E402
import importlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402


def _tcl_loads(major):
    """Whether this process can load a libtcl of that major version."""
    names = {"8": "libtcl8.6", "9": "libtcl9.0"}[major]
    suffix = ".dylib" if sys.platform == "darwin" else ".so"
    try:
        ctypes.CDLL(os.environ.get("TCLAMP_LIBTCL") or names + suffix)
    except OSError:
        return False
    return True


def _recorded_tcl():
    """The major version of the Tcl that `make setup` last built this
    environment's bridge for (its tclConfig.sh, recorded in the
    environment), or ""."""
    try:
        config = (Path(sys.prefix) / ".tclamp-tcl-config").read_text().strip()
        found = re.search(r"^TCL_MAJOR_VERSION='?(\d+)", Path(config).read_text(), re.MULTILINE)
    except OSError:
        return ""
    return found.group(1) if found else ""


def _load_bridge():
    """The bridge for the Tcl this process uses: the one a Tcl host loaded
    (it registers itself as tclamp._bridge), else $TCLAMP_TCL's (8.6 or
    9.0), else tkinter's, else the one of the last `make setup` (a checkout
    may hold a bridge for each Tcl), else the first built whose libtcl
    loads."""
    if "tclamp._bridge" in sys.modules:
        return sys.modules["tclamp._bridge"]
    built = sorted({path.name[len("_bridge")] for path in PACKAGE_DIR.glob("_bridge[0-9]*")})
    wanted = os.environ.get("TCLAMP_TCL", "")
    if not wanted and "_tkinter" in sys.modules:
        wanted = str(sys.modules["_tkinter"].TCL_VERSION)
    if not wanted:
        recorded = _recorded_tcl()
        wanted = recorded if recorded in built else ""
    wanted = wanted.split(".")[0]
    if wanted and wanted not in built or not built:
        raise ImportError(f"tclamp has no bridge for Tcl {wanted or '8.6 or 9.0'} in "
                          f"{PACKAGE_DIR} (built: {', '.join(built) or 'none'})")
    major = wanted or next((m for m in built if _tcl_loads(m)), built[0])
    module = importlib.import_module(f"tclamp._bridge{major}")
    sys.modules["tclamp._bridge"] = module
    return module


from . import _pycompat  # noqa: E402

if _pycompat.runs_without_gil():
    raise ImportError(_pycompat.FREE_THREADED_ERROR.format(who="this Python"))

_bridge = _load_bridge()

from .current import tcl  # noqa: E402
from .shutdown import SHUTDOWN_STEPS  # noqa: E402
from .errors import TclError, UsageError, describe_error  # noqa: E402

__version__ = _bridge.VERSION      # compiled in from src/tclamp/VERSION
__all__ = ["Interp", "TclError", "UsageError", "tcl", "__version__"]

Interp = _bridge.Interp

_bridge.configure(TclError, describe_error, SHUTDOWN_STEPS)
atexit.register(_bridge.at_python_exit)
os.register_at_fork(after_in_child=_bridge.after_fork_in_child)


# What stopped the first import of the torch:: commands part way, if
# anything that is no Exception did (Ctrl-C's KeyboardInterrupt), and then
# the error that one more try ended with: torch's import, stopped inside,
# leaves modules behind that no later import in this process can finish,
# and each further try leaves more (torch's own exit may then crash), so
# after one failed try there are no more.
_import_stopped_by = None
_import_broken = None


def _import_commands():
    global _import_stopped_by, _import_broken
    if _import_broken is not None:
        raise ImportError(_import_broken)
    try:
        from . import bridge, commands
    except Exception as error:
        if _import_stopped_by is None:
            raise
        _import_broken = _cannot_import_torch(f"{type(error).__name__}: {error}")
        raise ImportError(_import_broken) from error
    except BaseException as error:
        if _import_stopped_by is not None and _torch_half_imported():
            # The one more try stopped inside torch too: a further try
            # would import it a third time (and crash the process's exit).
            _import_broken = _cannot_import_torch(
                f"the next try was stopped by {type(error).__name__} too")
        _import_stopped_by = type(error).__name__
        raise
    return bridge, commands


def _cannot_import_torch(why):
    """What every call says once torch cannot be imported again (why: the
    last try's end)."""
    return (f"tclamp cannot import torch: an earlier import of it in this process was "
            f"stopped part way by {_import_stopped_by}, and torch cannot be imported "
            f"again until the process starts anew ({why})")


def _torch_half_imported():
    """Whether an import of torch stopped part way left its modules behind
    without torch itself (which the import system removes)."""
    return "torch" not in sys.modules and any(name.startswith("torch.") for name in list(sys.modules))


def _attach(interp):
    """Called by the C bridge for every Tcl interpreter that gets tclamp."""
    bridge, commands = _import_commands()

    bridge.add_py_ensemble(interp)
    commands.register(interp)
    # `package require tclamp` here finds the package beside this file (a
    # child interpreter has its own auto_path: its script adds this folder).
    interp.call("apply", "{dir} {if {$dir ni $::auto_path} {lappend ::auto_path $dir}}",
                bridge.tcl_name(interp, PACKAGE_DIR))
