"""py keep: a handle outlives the `py scope` that made it.

`py scope` itself is the bridge's C command (scope_command in _bridge.c):
it runs its body in the caller's frame and releases, at the body's end,
the handles the body made, except those whose names occur in the body's
result, those renamed, and those passed to `py keep`, which then belong to
the enclosing scope, if any.
"""
from . import _bridge
from .errors import UsageError, wrong_args


def py_keep(*args):
    """py keep handle: the handle outlives the scope that made it."""
    if len(args) != 1:
        raise wrong_args("py keep handle")
    obj = args[0]
    if isinstance(obj, str):            # live handle names arrive as their objects
        raise UsageError("HANDLE", f'not a py object handle: "{obj}"')
    interp = _bridge.current()
    name = interp.handle_name(obj)
    if name is not None:
        interp.keep_in_scope(name)
    return obj


def add_commands(interp):
    """::py::keep, for the py ensemble (::py::scope is the bridge's)."""
    interp.create_command("::py::keep", py_keep)
