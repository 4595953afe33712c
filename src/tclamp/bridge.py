"""The Python side of the bridge: the `py` ensemble and `tclamp.tcl`.

Arguments arrive as str, or as the object itself when the argument names a
live object handle (the C bridge looks those up).
"""
import builtins
import importlib
import sys
import threading

from . import _bridge
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


def py_exec(*args):
    """py exec code: run statements in __main__."""
    if len(args) != 1:
        raise _wrong_args("py exec code")
    exec(compile(args[0], "<py exec>", "exec"), _main_namespace())


def py_eval(*args):
    """py eval expression: evaluate it in __main__ and return the value."""
    if len(args) != 1:
        raise _wrong_args("py eval expression")
    return eval(compile(args[0], "<py eval>", "eval"), _main_namespace())


def resolve(name):
    """The object a dotted name means: looked up in __main__, then in
    builtins, then imported as a module path (os.path.join)."""
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
                if exc.name is None or not module_name.startswith(exc.name):
                    raise
                continue
            rest = rest[split:]
            break
        else:
            raise NameError(f"name '{first}' is not defined")
    for attribute in rest:
        obj = getattr(obj, attribute)
    return obj


def py_call(*args):
    """py call callable ?arg ...?: the callable is a dotted name or a handle."""
    if not args:
        raise _wrong_args("py call callable ?arg ...?")
    target, *call_args = args
    function = resolve(target) if isinstance(target, str) else target
    return function(*call_args)


PY_SUBCOMMANDS = {"import": py_import, "exec": py_exec, "eval": py_eval, "call": py_call}


def add_py_ensemble(interp):
    for name, function in PY_SUBCOMMANDS.items():
        interp.create_command(f"::py::{name}", function)
    # ::py::release is the bridge's own (it deletes the handle's command).
    interp.eval("namespace eval ::py {namespace ensemble create"
                " -subcommands {call eval exec import release}}")


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

    def eval(self, script):
        """Evaluate a Tcl script at global level; returns the result as str."""
        return self.interp.eval(script)

    def call(self, command, *args):
        """Call a Tcl command; args go over as Tcl values (str, numbers,
        lists, dicts; other objects as handles)."""
        return self.interp.call(command, *args)


tcl = CurrentTcl()
