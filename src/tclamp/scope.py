"""py scope and py keep: the handles a script makes go when it ends.

Every object returned to Tcl becomes a handle command, `::py::objN`, that
holds the object until it is released.  N grows with every handle the
process makes and never comes back, so a scope needs no bookkeeping of its
own while its body runs: the handles made in the body are those numbered
above the newest one alive when the body began.

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
# errorInfo).  Nested scopes finish before their outer catch stores, so one
# set of variables serves them all.
NAMESPACE = "::tclamp::scope"
BODY, CODE, RESULT, OPTIONS = (f"{NAMESPACE}::{name}"
                               for name in ("body", "code", "result", "options"))
RUN_BODY = f"set {CODE} [catch ${BODY} {RESULT} {OPTIONS}]"
END_AS_BODY_ENDED = f"return -options ${OPTIONS} ${RESULT}"
RELEASE = f"{NAMESPACE}::release"
TCL_ERROR = "1"


class Scope:
    """One running `py scope`: it releases the handles numbered above
    `newest` at its end, except the names in `kept`."""
    __slots__ = ("newest", "kept")

    def __init__(self, newest):
        self.newest = newest
        self.kept = set()


# interpreter -> its running scopes, innermost last (only while one runs)
_running = {}


def handle_number(name):
    match = HANDLE_NAME.fullmatch(name)
    return int(match[1]) if match else None


def newest_handle(names):
    """The number of the newest `::py::objN` among the live handle names
    (oldest first; a renamed handle moves to the end under its new name)."""
    for name in reversed(names):
        number = handle_number(name)
        if number is not None:
            return number
    return 0


def made_after(names, newest):
    """The live handles numbered above `newest`, oldest first."""
    made = []
    for name in reversed(names):
        number = handle_number(name)
        if number is not None:
            if number <= newest:
                break
            made.append(name)
    made.reverse()
    return made


def run_scope(body):
    interp = _bridge.current()
    scope = Scope(newest_handle(interp.handle_names()))
    scopes = _running.setdefault(interp, [])
    scopes.append(scope)
    try:
        interp.call("set", BODY, body)
        ran = interp.evaluate(RUN_BODY)
    finally:
        scopes.pop()
        if not scopes:
            del _running[interp]
    try:
        code = interp.call("set", CODE)
    except TclError:
        return ran      # Tcl_CancelEval (Ctrl-C) unwinds through the catch
    made = [name for name in made_after(interp.handle_names(), scope.newest)
            if name not in scope.kept]
    if made and code != TCL_ERROR:
        # An error's message is no value to hand on: then all of them go.
        passed_on = set(HANDLE_IN_TEXT.findall(interp.call("set", RESULT)))
        made = [name for name in made if name not in passed_on]
    if made:
        interp.call(RELEASE, made)
    outcome = interp.evaluate(END_AS_BODY_ENDED)
    # -nocomplain: an inner scope has unset the body already.
    interp.call("unset", "-nocomplain", BODY, CODE, RESULT, OPTIONS)
    return outcome


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
            if number > scope.newest:
                # The innermost scope that began before the handle was made.
                scope.kept.add(name)
                break
    return obj


def add_commands(interp):
    """::py::scope and ::py::keep, for the py ensemble."""
    interp.eval(f"namespace eval {NAMESPACE} {{\n"
                "    proc release {names} {\n"
                "        foreach name $names {\n"
                "            # A finalizer of one may have released another.\n"
                "            catch {rename $name {}}\n"
                "        }\n"
                "    }\n"
                "}")
    interp.create_command("::py::scope", plan_scope, planned=True)
    interp.create_command("::py::keep", py_keep)
