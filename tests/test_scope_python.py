"""py scope in an interpreter Python made, and stopped by Interp.cancel
(what Ctrl-C at the tclamp prompt does)."""
import sys
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


# --- the scope's mark: the highest number its interpreter has listed ------
# Handle numbers are the process's, each interpreter lists its own: the
# scopes below see numbers made by other interpreters, on this thread and
# on others, between and around their own handles.


@pytest.fixture
def main_names():
    """Names put into __main__ (where py exec runs) for one test."""
    main = sys.modules["__main__"].__dict__
    added = []

    def put(**names):
        added.extend(names)
        main.update(names)
    yield put
    for name in added:
        main.pop(name, None)


def number(name):
    return int(name.rsplit("obj", 1)[1])


def test_scope_body_makes_handles_in_another_interp_on_this_thread(interp, main_names):
    """A's scope body makes handles in B, and runs a scope in B whose body
    makes handles in A: each scope releases its own interpreter's body
    handles only, whatever the numbers between them."""
    other = tclamp.Interp()
    try:
        other.eval("py exec {import torch; t = torch.ones(3)}")
        main_names(
            make_y=lambda: other.eval("set y [py eval {t + 2}]"),
            make_q=lambda: interp.eval("set q [py eval {t + 4}]"),
            scope_in_other=lambda: other.eval(
                "py scope { set z [py eval {t + 3}]; py call make_q; py keep [py eval {t + 5}] }"))
        a0 = interp.eval("set a0 [py eval {t + 0}]")
        b0 = other.eval("set b0 [py eval {t + 0}]")
        r = interp.eval("""py scope {
            set x [py eval {t + 1}]
            py call make_y
            set in [py call scope_in_other]
            set w [py eval {t + 6}]
            list $in
        }""")
        y, z, q, w, x = (other.eval("set y"), other.eval("set z"), interp.eval("set q"),
                         interp.eval("set w"), interp.eval("set x"))
        assert number(a0) < number(b0) < number(x) < number(y) < number(z) < number(q) \
            < number(r) < number(w)
        assert interp.handle_names() == [a0]
        assert other.handle_names() == [b0, y, r]
        assert other.eval(f"[{r} sum] item") == "18.0"
        assert other.eval("info commands $z") == ""
        assert interp.eval("info commands ::py::obj*") == a0
    finally:
        other.delete()


def test_scopes_on_two_threads_interleave_numbers(main_names):
    """Two threads, each with its own interpreter, each in a scope while the
    other makes and releases handles (the order forced by events, not by
    time): each scope releases exactly its own body's handles."""
    steps = {name: threading.Event() for name in ("a_made", "b_made", "a_done")}
    main_names(steps=steps)
    results, errors = {}, []

    def run(me, script):
        try:
            made = tclamp.Interp()
            made.eval("py exec {import torch}")
            pre = made.eval("set pre [py eval {torch.ones(1)}]")
            r = made.eval(script)
            results[me] = (pre, r, made.handle_names(),
                           made.eval("lmap v {x y k} {expr {[info commands [set $v]] ne {}}}"),
                           made.eval("lmap v {x y k} {set $v}", result=list))
            made.delete()
        except BaseException as error:
            errors.append(error)
            for event in steps.values():
                event.set()

    a = threading.Thread(target=run, args=("a", """py scope {
        set x [py eval {torch.ones(2)}]
        py exec {steps['a_made'].set(); steps['b_made'].wait()}
        py release $pre
        set y [py eval {torch.ones(3)}]
        set k [py keep [py eval {torch.ones(4)}]]
        py exec {steps['a_done'].set()}
        list done
    }"""))
    b = threading.Thread(target=run, args=("b", """py exec {steps['a_made'].wait()}
        py scope {
            set x [py eval {torch.ones(5)}]
            set y [py eval {torch.ones(6)}]
            py release $x
            py exec {steps['b_made'].set(); steps['a_done'].wait()}
            set k [py keep [py eval {torch.ones(7)}]]
            list $y
        }"""))
    a.start()
    b.start()
    a.join()
    b.join()
    assert not errors
    a_pre, a_r, a_live, a_alive, (ax, ay, ak) = results["a"]
    b_pre, b_r, b_live, b_alive, (bx, by, bk) = results["b"]
    assert number(a_pre) < number(ax) < number(bx) < number(by) < number(ay) < number(ak) \
        < number(bk)
    assert (a_r, a_live, a_alive) == ("done", [ak], "0 0 1")
    assert (b_r, b_live, b_alive) == (by, [b_pre, by, bk], "0 1 1")


TRACK = """py exec {
import gc, weakref
refs = []
def track(*objects):
    refs.extend(weakref.ref(o) for o in objects)
def tracked_alive():
    gc.collect()
    return [r() is not None for r in refs]
}"""


def test_scope_runs_inside_a_python_call_from_the_same_interp(interp, main_names):
    """py eval runs Python that runs a scope in the same interpreter, inside
    the outer scope's body: the inner body's handles go when it ends, bar
    the one its result names, which the outer scope then releases."""
    main_names(again=interp)
    interp.eval(TRACK)
    r = interp.eval("""py scope {
        set a [py eval {t + 1}]
        set c [py eval {again.eval('py scope { set b [py eval {t + 2}]; set c [py eval {t + 3}]; '
                                   'py call track $b $c; list $c }')}]
        set during [list [info commands $b] [expr {[info commands $c] eq $c}] \
                        [llength [info commands ::py::obj*]] [py call tracked_alive]]
        list $a $during
    }""")
    a, during = interp.eval(f"lindex {{{r}}} 0"), interp.eval(f"lindex {{{r}}} 1")
    assert during == "{} 1 2 {0 1}"
    assert interp.handle_names() == [a]
    assert interp.eval("py call tracked_alive") == "0 0"


def test_handle_numbered_above_the_newest_survives_and_is_kept(interp, main_names):
    """A handle made while another was being made (the finalizer of a handle
    renamed onto the new one's name made it) has the higher number though
    the other is listed as the newest: it was made before the scopes below
    began, so none of them releases it, and Interp.keep_in_scope in an
    inner scope gives it to the scope around the outer one."""
    class Maker:
        def __del__(self):
            interp.eval("set made [py eval {t + 7}]")
    main_names(Maker=Maker, keep_made=lambda: interp.keep_in_scope(interp.eval("set made")))
    old = interp.eval("set old [py call Maker]")
    probe = interp.eval("set probe [py eval {t + 0}]")
    interp.eval(f"rename $probe {{}}; rename $old ::py::obj{number(probe) + 1}")
    new = interp.eval("set new [py eval {t + 8}]")
    made = interp.eval("set made")
    assert (number(new), number(made)) == (number(probe) + 1, number(probe) + 2)
    interp.eval("py scope { py release $new; py eval {t + 9}; list }")
    assert interp.handle_names() == [made]
    assert interp.eval(f"py scope {{ [{made} sum] item }}") == "24.0"
    # the same, made inside an outer scope; kept from Python in an inner one
    interp.eval(f"rename {made} {{}}")
    r = interp.eval("""py scope {
        set old [py call Maker]
        set probe [py eval {t + 0}]
        rename $probe {}
        rename $old ::py::obj[expr {[string range $probe 9 end] + 1}]
        set new [py eval {t + 8}]
        py scope { py call keep_made; list }
        llength [info commands ::py::obj*]
    }""")
    made, new = interp.eval("set made"), interp.eval("set new")
    assert (number(new), number(made)) == (number(interp.eval("set probe")) + 1,
                                           number(interp.eval("set probe")) + 2)
    assert r == "2"
    assert interp.handle_names() == [made]
    assert interp.eval(f"py scope {{ [{made} sum] item }}") == "24.0"
    assert interp.handle_names() == [made]
