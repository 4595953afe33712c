"""py scope and py keep: the handles a script makes go when it ends.

Every object returned to Tcl becomes a handle command, `::py::objN`, that
holds the object until it is released.  N grows with every handle the
process makes and never comes back, so a scope needs no bookkeeping of its
own while its body runs: it makes a throwaway handle when it begins, and
the handles made in the body are those numbered above that one.

A handle survives its scope when its name occurs in the body's result, at
any depth of list or dict nesting (it is found in the result's text, as a
whole name), or when `py keep` passed it on; it then belongs to the
enclosing scope, if any.  A handle renamed away from the `::py::objN` form
is the script's own, and no scope releases it.
"""
import re

from . import _bridge
from .errors import TclError, UsageError

HANDLE_NAME = re.compile(r"::py::obj(\d+)")
HANDLE_IN_TEXT = re.compile(r"::py::obj\d+(?!\d)")

# The body runs in the caller's frame through `catch`, so that its result
# can be read before the handles in it are judged; `return -options` then
# ends the command exactly as the body ended (any code, errorCode,
# errorInfo).  Nested scopes finish before their outer catch stores, and
# each value is unset as it is taken, so one set of variables serves all.
NAMESPACE = "::tclamp::scope"
HELPERS = f"""namespace eval {NAMESPACE} {{
    proc take {{name}} {{
        variable $name
        set value [set $name]
        unset $name
        return $value
    }}
    # Keeps the body for RUN_BODY; returns the marker's handle name.
    proc begin {{script marker}} {{
        variable body $script
        return $marker
    }}
    # The body's return code, followed by its result when asked.
    proc ended {{with_result}} {{
        variable result
        set code [take code]
        if {{$with_result}} {{
            return "$code $result"
        }}
        return $code
    }}
    proc release {{names}} {{
        foreach name $names {{
            # A finalizer of one may have released another.
            catch {{rename $name {{}}}}
        }}
    }}
}}"""
RUN_BODY = (f"set {NAMESPACE}::code [catch [{NAMESPACE}::take body]"
            f" {NAMESPACE}::result {NAMESPACE}::options]")
END_AS_BODY_ENDED = f"return -options [{NAMESPACE}::take options] [{NAMESPACE}::take result]"
BEGIN, ENDED, RELEASE = (f"{NAMESPACE}::{name}" for name in ("begin", "ended", "release"))
TCL_ERROR = "1"


class Scope:
    """One running `py scope`: it releases the handles numbered above
    `mark` at its end, except the names in `kept`."""
    __slots__ = ("mark", "kept")

    def __init__(self, mark):
        self.mark = mark
        self.kept = set()


class Marker:
    """The throwaway object whose handle's number marks a scope's start."""


# interpreter -> its running scopes, innermost last (only while one runs)
_running = {}


def handle_number(name):
    match = HANDLE_NAME.fullmatch(name)
    return int(match[1]) if match else None


def made_after(names, mark):
    """The live handles numbered above `mark`, oldest first.  The names are
    oldest first too, so the scan from the end stops at the first older
    one.  (A handle renamed moves to the end under its new name; one
    renamed away and back to its `::py::objN` name hides the handles made
    before that from this scan, and they are left alive.)"""
    made = []
    for name in reversed(names):
        number = handle_number(name)
        if number is not None:
            if number < mark:
                break
            made.append(name)
    made.reverse()
    return made


def run_scope(body):
    interp = _bridge.current()
    # The marker's handle is numbered above every handle made so far and
    # below every one made from now on.
    marker = Marker()
    scope = Scope(handle_number(interp.call(BEGIN, body, marker)))
    interp.release(marker)
    scopes = _running.setdefault(interp, [])
    scopes.append(scope)
    try:
        ran = interp.evaluate(RUN_BODY)
    finally:
        scopes.pop()
        if not scopes:
            del _running[interp]
    made = [name for name in made_after(interp.handle_names(), scope.mark)
            if name not in scope.kept]
    try:
        code, _, result = interp.call(ENDED, bool(made)).partition(" ")
    except TclError:
        return ran      # Tcl_CancelEval (Ctrl-C) unwinds through the catch
    if made and code != TCL_ERROR:
        # An error's message is no value to hand on: then all of them go.
        passed_on = set(HANDLE_IN_TEXT.findall(result))
        made = [name for name in made if name not in passed_on]
    if made:
        interp.call(RELEASE, made)
    return interp.evaluate(END_AS_BODY_ENDED)


def plan_scope(*args):
    """py scope body"""
    if len(args) != 1:
        raise UsageError("WRONG_ARGS", 'wrong # args: should be "py scope body"')
    body = args[0]
    if not isinstance(body, str):
        body = handle_name(_bridge.current(), body)   # a body that is one handle's name
    return ((run_scope, (body,)),), None, False


def handle_name(interp, obj):
    """The name of obj's handle: an object going back to Tcl is named by
    the one handle it has there."""
    return interp.call("lindex", obj)


def py_keep(*args):
    """py keep handle: the handle outlives the scope that made it."""
    if len(args) != 1:
        raise UsageError("WRONG_ARGS", 'wrong # args: should be "py keep handle"')
    obj = args[0]
    if isinstance(obj, str):            # live handle names arrive as their objects
        raise UsageError("HANDLE", f'not a py object handle: "{obj}"')
    interp = _bridge.current()
    name = handle_name(interp, obj)
    number = handle_number(name)
    if number is not None:
        for scope in reversed(_running.get(interp, ())):
            if number > scope.mark:
                # The innermost scope that began before the handle was made.
                scope.kept.add(name)
                break
    return obj


def add_commands(interp):
    """::py::scope and ::py::keep, for the py ensemble."""
    interp.eval(HELPERS)
    interp.create_command("::py::scope", plan_scope, planned=True)
    interp.create_command("::py::keep", py_keep)
