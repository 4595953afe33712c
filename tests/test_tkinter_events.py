"""tkinter and tclamp in one Python program, one thread's events: tkinter's
Python callbacks that come due while Tcl runs on tclamp's behalf.

tkinter's callbacks take the GIL back from the thread state that tkinter
parked when it entered Tcl; Tcl that Python runs through tclamp enters Tcl
the same way (src/tclamp/tkinter_entry.py), so `update` and `vwait` there
run them.  Each script runs in a process of its own (a crash is a failed
test, not a dead pytest).
"""
import textwrap

import pytest

from conftest import needs_tkinters_tcl
from processes import BYTES_IN_USE, assert_clean, python

pytestmark = needs_tkinters_tcl


def test_a_tkinter_callback_runs_in_the_event_loop_of_tclamps_interpreter(tmp_path):
    r = python(tmp_path, """\
        import tkinter, tclamp
        tk = tkinter.Tcl()
        tk.createcommand("cb", lambda: print("tkinter callback", flush=True))
        tk.eval("after 0 cb")
        tclamp.tcl.eval("update")
        print("after update", flush=True)
    """)
    assert_clean(r)
    assert r.stdout == "tkinter callback\nafter update\n", r.report


def test_a_tkinter_callback_that_runs_a_block_through_tclamp_runs_the_next_one_in_it(tmp_path):
    """What a GUI's training step does: a tkinter event runs a step through
    tclamp, whose block keeps the window alive (`update`), which runs the
    next tkinter callback, inside the block's autocast state."""
    r = python(tmp_path, """\
        import tkinter, tclamp, torch
        tk = tkinter.Tcl()
        def progress():
            print("progress", torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), flush=True)
        def step():
            tk.eval("after 0 progress")
            tclamp.tcl.eval("torch::autocast -device_type cpu -dtype bfloat16 { update }")
            print("step done", torch.is_autocast_enabled("cpu"), flush=True)
        tk.createcommand("progress", progress)
        tk.createcommand("step", step)
        tk.eval("after 0 step; after 50 {set done 1}; vwait done")
        print("end", flush=True)
    """)
    assert_clean(r)
    assert r.stdout == "progress True torch.bfloat16\nstep done False\nend\n", r.report


def test_tkinters_interpreter_with_tclamp_runs_callbacks_after_a_block(tmp_path):
    """tkinter -> torch::autocast (Python) -> its body through tclamp ->
    `update`; then the script goes on in tkinter's interpreter, whose later
    callbacks still find tkinter's state."""
    r = python(tmp_path, """\
        import tkinter
        tk = tkinter.Tcl()
        tk.eval("package require tclamp")
        ran = []
        tk.createcommand("cb", lambda n: ran.append(n))
        tk.eval("after 0 {cb 1}; torch::autocast -device_type cpu { after 0 {cb 2}; update }; "
                "after 0 {cb 3}; update")
        print(ran, flush=True)
    """)
    assert_clean(r)
    assert r.stdout == "['1', '2', '3']\n", r.report


def test_a_thread_with_its_own_tkinter_interpreter(tmp_path):
    r = python(tmp_path, """\
        import threading, tkinter, tclamp
        def work():
            tk = tkinter.Tcl()
            tk.createcommand("cb", lambda: print("callback on the thread", flush=True))
            tk.eval("after 0 cb")
            tclamp.tcl.eval("update")
            print("thread ends", flush=True)
        t = threading.Thread(target=work)
        t.start()
        t.join()
        tclamp.tcl.eval("update")
        print("end", flush=True)
    """)
    assert_clean(r)
    assert r.stdout == "callback on the thread\nthread ends\nend\n", r.report


def test_threads_that_enter_tcl_through_tkinter_leave_no_memory(tmp_path):
    """Each thread's tkinter interpreter goes at the thread's end, before Tcl
    gives the thread's data back (else Tcl makes it anew, to delete that
    interpreter, and keeps it: about 170 KB a thread)."""
    r = python(tmp_path, BYTES_IN_USE + textwrap.dedent("""\
        import tkinter, tclamp
        work = lambda: tclamp.tcl.eval('update')
        before = bytes_in_use_after_threads(50, work)
        grown = bytes_in_use_after_threads(100, work) - before
        print('grown per thread under 10 KB:', grown < 1000 * 1024, grown, flush=True)
    """))
    assert_clean(r)
    assert r.stdout.startswith("grown per thread under 10 KB: True "), r.report


def test_no_tkinter_no_entry(tmp_path):
    """Without tkinter, Tcl is entered directly: nothing of tkinter's loads."""
    r = python(tmp_path, """\
        import sys, tclamp
        tclamp.tcl.eval("update")
        print("_tkinter" in sys.modules, "tclamp.tkinter_entry" in sys.modules, flush=True)
    """)
    assert_clean(r)
    assert r.stdout == "False False\n", r.report


@pytest.mark.xfail(strict=True, reason=(
    "tkinter's interpreter runs a tclamp command, whose Python calls tkinter: tkinter's return "
    "to Python empties its slot of the parked state, and the command returns to Tcl with the slot "
    "empty, so a tkinter callback that comes due before Tcl returns to tkinter aborts Python "
    "(see docs/hosts.md)"))
def test_python_under_py_that_calls_tkinter_then_a_callback(tmp_path):
    r = python(tmp_path, """\
        import builtins, tkinter
        tk = builtins.tk = tkinter.Tcl()
        tk.eval("package require tclamp")
        tk.createcommand("cb", lambda: print("callback", flush=True))
        tk.eval("after 0 cb; py eval {tk.eval('set x 1')}; update")
        print("end", flush=True)
    """)
    assert_clean(r)
    assert r.stdout == "callback\nend\n", r.report
