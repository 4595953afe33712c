"""py scope in an interpreter Python made, and stopped by Interp.cancel
(what Ctrl-C at the tclamp prompt does)."""
import threading

import pytest

import tclamp


@pytest.fixture
def interp():
    made = tclamp.Interp()
    made.eval("py exec {import torch; t = torch.ones(3)}")
    yield made
    made.delete()


def test_scope_in_a_python_made_interpreter(interp):
    kept = interp.eval("py scope { py eval {t + 1}; [py eval {t * 2}] sum }")
    assert interp.handle_names() == [kept]
    assert interp.eval(f"{kept} item") == "6.0"


def test_cancel_goes_through_a_scope_unchanged(interp):
    """The cancellation ends the evaluation with Tcl's own error, no scope
    stays open, the handles the stopped bodies made are released as each
    scope unwinds (the bridge deletes them; no Tcl runs for it), and the
    interpreter's next scope works."""
    timer = threading.Timer(0.3, interp.cancel)
    timer.start()
    with pytest.raises(tclamp.TclError) as stopped:
        interp.eval("py scope { set a [py eval {t + 1}]; py scope { set b [py eval {t + 2}]; while 1 {} } }")
    timer.join()
    assert (stopped.value.result, stopped.value.errorcode) == ("eval unwound",
                                                              "TCL CANCEL IUNWIND {eval unwound}")
    assert interp.eval("list [string match ::py::obj* $a] [string match ::py::obj* $b]") == "1 1"
    assert interp.eval("list [info commands $a] [info commands $b]") == "{} {}"
    assert interp.handle_count == 0
    assert interp.eval("py scope { [[py eval {t * 3}] sum] item; list ok }") == "ok"
    assert interp.handle_count == 0
