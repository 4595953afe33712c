"""py scope and py keep: the handles a script makes go when it ends.

Every object returned to Tcl becomes a handle command, `::py::objN`, that
holds the object until it is released.  N grows with every handle the
process makes and never comes back, so a scope needs no bookkeeping of its
own while its body runs: it notes the newest number when it begins (the
bridge's handle_mark), and the handles made in the body are those
numbered above it.

A handle survives its scope when its name occurs in the body's result, at
any depth of list or dict nesting (it is found in the result's text, as a
whole name), or when `py keep` passed it on; it then belongs to the
enclosing scope, if any.  A handle the script renamed is its own, whatever
its new name, and no scope releases it.

The body is the command's Script: it runs in the caller's frame as Tcl's
own value (compiled once), and its Outcome (return code, result, options)
ends the command exactly as the body ended, whatever its finalizers do.
"""
import re

from . import _bridge
from .errors import UsageError

HANDLE_IN_TEXT = re.compile(r"::py::obj\d+(?!\d)", re.ASCII)
TCL_ERROR = 1


class Scope:
    """One running `py scope`: it releases the handles numbered above
    `mark` at its end, except the names in `kept`."""
    __slots__ = ("mark", "kept")

    def __init__(self, mark):
        self.mark = mark
        self.kept = set()


# interpreter -> its running scopes, innermost last (only while one runs)
_running = {}


def run_scope(body):
    interp = _bridge.current()
    scope = Scope(interp.handle_mark)
    scopes = _running.setdefault(interp, [])
    scopes.append(scope)
    try:
        ran = interp.evaluate(body)
    finally:
        scopes.pop()
        if not scopes:
            del _running[interp]
    made = interp.handles_since(scope.mark)
    if made and scope.kept:
        made = [name for name in made if name not in scope.kept]
    if made and ran.code != TCL_ERROR:
        # An error's message is no value to hand on: then all of them go.
        passed_on = set(HANDLE_IN_TEXT.findall(ran.result))
        made = [name for name in made if name not in passed_on]
    if made:
        interp.release_handles(made)
    return ran


def plan_scope(*args):
    """py scope body"""
    if len(args) != 1:
        raise UsageError("WRONG_ARGS", 'wrong # args: should be "py scope body"')
    return ((run_scope, ()),), None, True


def py_keep(*args):
    """py keep handle: the handle outlives the scope that made it."""
    if len(args) != 1:
        raise UsageError("WRONG_ARGS", 'wrong # args: should be "py keep handle"')
    obj = args[0]
    if isinstance(obj, str):            # live handle names arrive as their objects
        raise UsageError("HANDLE", f'not a py object handle: "{obj}"')
    interp = _bridge.current()
    name = interp.handle_name(obj)
    number = interp.handle_number(name) if name is not None else 0
    if number:
        for scope in reversed(_running.get(interp, ())):
            if number > scope.mark:
                # The innermost scope that began before the handle was made.
                scope.kept.add(name)
                break
    return obj


def add_commands(interp):
    """::py::scope and ::py::keep, for the py ensemble."""
    interp.create_command("::py::scope", plan_scope, planned=True, script=True)
    interp.create_command("::py::keep", py_keep)
