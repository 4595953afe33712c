"""The ATen path of the autocast commands under attack: whatever a script or
a host can do that might make a repeated command (ATen's functions, called
from C without Python) mean something else than the Python path, crash,
leak or hang.  Each case runs in a process of its own (processes.py), and
checks exact results and torch's state as Python's getters read it.

Checked by hand and not kept here (too slow for the suite): valgrind on a
tclsh script making 57,000 repeated calls loses the same 1,321 bytes in 21
blocks (all Python's and numpy's start-up) with the path on and off.
"""
import sys

import pytest

from conftest import needs_tkinters_tcl
from processes import assert_clean, assert_no_crash, python, tclsh
from test_tohil import run as run_with_tohil, tohil  # noqa: F401  (the fixture)

# Python's view of both devices' autocast state, for the scripts.
STATE = """\
package require tclamp
py exec {
import torch
def state():
    return " ".join(f"{d}={int(torch.is_autocast_enabled(d))}/"
                    f"{str(torch.get_autocast_dtype(d)).removeprefix('torch.')}"
                    for d in ("cpu", "cuda"))
}
"""


def test_hand_made_programs_are_refused(tmp_path):
    """A planned command's program runs in place of its steps, so one that
    could not mean what they mean is refused with the plan (TypeError),
    the Python path as well: a program ending in a set for a result taken
    from the last step read a dtype name at index -1 (the bytes of a
    function), an unknown device made ATen throw through C (abort), and a
    dict or None result went unmapped.  A program that fits still runs."""
    r = python(tmp_path, """\
        import torch, tclamp
        interp = tclamp.Interp()
        ENABLE = ((torch.set_autocast_enabled, ("cpu", True)),)
        def plan(result, program, steps=ENABLE):
            return lambda *words: (steps, result, True, program)
        cases = {
            "set, result None": plan(None, bytes((1, 0, 1))),
            "is_enabled, result dict": plan({True: "on", False: "off"}, bytes((3, 0, 0)),
                                            ((torch.is_autocast_enabled, ("cpu",)),)),
            "get_dtype, result None": plan(None, bytes((4, 0, 0)),
                                           ((torch.get_autocast_dtype, ("cpu",)),)),
            "device 77": plan("ok", bytes((1, 77, 1))),
            "op 9": plan("ok", bytes((9, 0, 0))),
            "enabled 2": plan("ok", bytes((1, 0, 2))),
            "dtype 63": plan("ok", bytes((0, 0, 63))),
            "fits": plan("ok", bytes((1, 0, 1))),
        }
        for name, parser in cases.items():
            interp.create_command("::t", parser, planned=True)
            torch.set_autocast_enabled("cpu", False)
            out = []
            for _ in range(3):
                try:
                    out.append(interp.eval("t"))
                except Exception as error:
                    out.append(f"{type(error).__name__}: {error}")
            print(f"{name}: {out} {torch.is_autocast_enabled('cpu')}")
        """)
    assert_clean(r)
    refused = "[" + ", ".join(['"TypeError: a command plan\'s program is not ATen calls that '
                               'give its result"'] * 3) + "] False"
    assert r.stdout.splitlines() == [
        f"{name}: {refused}" for name in ("set, result None", "is_enabled, result dict",
                                          "get_dtype, result None", "device 77", "op 9",
                                          "enabled 2", "dtype 63")] + ["fits: ['ok', 'ok', 'ok'] True"]


def test_argument_lists_beyond_the_slots(tmp_path):
    """One command written 18 ways (more than its 8 remembered argument
    lists), and its siblings, called 900 times in a fixed random order:
    every slot is reused many times over, and each result and the state
    after each call are what the words say, on the ATen path and then on
    the Python path."""
    r = tclsh(tmp_path, STATE + """\
        set calls {}
        foreach dev {cpu cuda} {
            foreach dt {float16 bfloat16 float32} {
                lappend calls [list torch::autocast_set_dtype $dt $dev] \\
                    [list torch::autocast_set_dtype -dtype $dt -device $dev] \\
                    [list torch::autocast_set_dtype -device_type $dev -data_type $dt] \\
                    [list torch::autocast_enable $dev $dt] [list torch::autocastEnable -dtype $dt -device $dev]
            }
            lappend calls [list torch::autocast_disable $dev] [list torch::autocast_enable $dev] \\
                [list torch::autocast_is_enabled $dev] [list torch::autocast_get_dtype -device $dev]
        }
        proc expect {call} {
            global model
            set words [lassign $call cmd]
            set dev [expr {"cuda" in $words ? "cuda" : "cpu"}]
            set dt [lsearch -inline -regexp $words {float}]
            switch -glob -- $cmd {
                *get_dtype { return [dict get $model $dev dtype] }
                *set_dtype - *SetDtype { dict set model $dev dtype $dt; return "autocast dtype set" }
                *nable {
                    if {$dt ne ""} { dict set model $dev dtype $dt }
                    dict set model $dev on 1; return "autocast enabled"
                }
                *isable { dict set model $dev on 0; return "autocast disabled" }
                *is_enabled { return [dict get $model $dev on] }
            }
        }
        set runs {}
        foreach on {True False} {
            py exec "import tclamp.aten; tclamp.aten.use($on)"
            py exec {for d in ("cpu", "cuda"): torch.set_autocast_enabled(d, False); torch.set_autocast_dtype(d, torch.float32)}
            set model {cpu {on 0 dtype float32} cuda {on 0 dtype float32}}
            expr {srand(7)}
            set out {}
            set wrong 0
            for {set i 0} {$i < 900} {incr i} {
                set call [lindex $calls [expr {int(rand() * [llength $calls])}]]
                set got [{*}$call]
                set want [expect $call]
                set state [py call state]
                dict with model {
                    set want_state "cpu=[dict get $cpu on]/[dict get $cpu dtype] cuda=[dict get $cuda on]/[dict get $cuda dtype]"
                }
                if {$got ne $want || $state ne $want_state} { incr wrong; puts "$call: $got $state" }
                lappend out $got $state
            }
            lappend runs $out
            puts "$on: $wrong wrong of [expr {[llength $out] / 2}]"
        }
        puts [expr {[lindex $runs 0] eq [lindex $runs 1] ? "same" : "differ"}]
        """)
    assert_clean(r)
    assert r.stdout.splitlines() == ["True: 0 wrong of 900", "False: 0 wrong of 900", "same"]


def test_traces_that_reenter_rename_and_delete(tmp_path):
    """Execution traces on the commands: an enter trace that calls the same
    command with other words each time, a leave trace that renames it, an
    enter trace that deletes it, and a delete trace that calls a twin."""
    r = tclsh(tmp_path, STATE + """\
        set log {}
        proc reenter {cmd op} {
            global log
            lappend log [torch::autocast_set_dtype float16 cpu] [torch::autocast_get_dtype cpu]
        }
        trace add execution torch::autocast_set_dtype enter reenter
        for {set i 0} {$i < 3} {incr i} {
            lappend log [torch::autocast_set_dtype bfloat16 cpu] [torch::autocast_get_dtype cpu]
        }
        trace remove execution torch::autocast_set_dtype enter reenter
        puts $log
        puts [py call state]
        proc move {cmd code result op} { catch {rename ::torch::autocast_disable ::torch::off} }
        torch::autocast_disable cpu
        trace add execution torch::autocast_disable leave move
        puts [torch::autocast_disable cpu]
        puts [list [catch {torch::autocast_disable cpu} m] $m]
        puts [list [torch::off cpu] [torch::off cpu] [torch::off cpu]]
        torch::autocast_is_enabled cpu
        torch::autocast_is_enabled cpu
        trace add execution torch::autocast_is_enabled enter {apply {{cmd op} {
            rename ::torch::autocast_is_enabled {}
        }}}
        puts [list [catch {torch::autocast_is_enabled cpu} m] $m]
        puts [list [catch {torch::autocast_is_enabled cpu} m] $m]
        puts [torch::autocastIsEnabled cpu]
        torch::autocastGetDtype cpu
        torch::autocastGetDtype cpu
        trace add command torch::autocastGetDtype delete {apply {{old new op} {
            puts "deleted: [torch::autocast_get_dtype cpu] [torch::autocast_get_dtype cpu]"
        }}}
        rename torch::autocastGetDtype {}
        puts [py call state]
        """)
    assert_clean(r)
    # the trace's call, then the traced one, each followed by the dtype read
    set_dtype = "{autocast dtype set} float16 {autocast dtype set} bfloat16"
    assert r.stdout.splitlines() == [
        " ".join([set_dtype] * 3),
        "cpu=0/bfloat16 cuda=0/float16",
        "autocast disabled",
        '1 {invalid command name "torch::autocast_disable"}',
        "{autocast disabled} {autocast disabled} {autocast disabled}",
        '1 {invalid command name "torch::autocast_is_enabled"}',
        '1 {invalid command name "torch::autocast_is_enabled"}',
        "0",
        "deleted: bfloat16 bfloat16",
        "cpu=0/bfloat16 cuda=0/float16"]


def test_words_that_change_shape(tmp_path):
    """Words made at run time (string range), kept as other types (lists,
    dicts, numbers), changed in place in a variable between calls, with a
    NUL, non-ASCII letters or 100,000 characters: a remembered plan is
    found by the words' text alone, and each call means its own words."""
    r = tclsh(tmp_path, STATE + """\
        set out {}
        foreach i {1 2 3} {
            lappend out [torch::autocast_set_dtype [string range xbfloat16 1 end] cpu] [torch::autocast_get_dtype cpu]
            lappend out [torch::autocast_set_dtype float16 [string range xcpu 1 end]] [torch::autocast_get_dtype cpu]
        }
        puts $out
        set word bfloat
        append word 16
        set out [list [torch::autocast_set_dtype $word cpu] [torch::autocast_set_dtype $word cpu] [py call state]]
        set word [string replace $word 0 0 {}]
        lappend out [torch::autocast_set_dtype $word cpu] [torch::autocast_set_dtype $word cpu] [py call state]
        set words [list float32 cuda]
        lappend out [torch::autocast_set_dtype {*}$words] [torch::autocast_set_dtype {*}$words]
        lset words 0 bfloat16
        lappend out [torch::autocast_set_dtype {*}$words] [torch::autocast_set_dtype {*}$words] [py call state]
        puts $out
        set refused {}
        foreach word [list [dict create cpu float16] [list cpu] 0 "cpu\\0" "c\\0pu" "cpu\\u00e9" \\
                           [string repeat x 100000] "cpu " " cpu" CPU cuda:0] {
            foreach i {1 2} {
                lappend refused [catch {torch::autocast_enable $word} m][expr {$m eq "Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32"}]
            }
        }
        puts $refused
        puts [list [torch::autocast_enable [list cpu]] [torch::autocast_enable [list cpu]] [py call state]]
        """)
    assert_clean(r)
    lines = r.stdout.splitlines()
    assert lines[0] == " ".join(["{autocast dtype set} bfloat16 {autocast dtype set} float16"] * 3)
    assert lines[1] == ("{autocast dtype set} {autocast dtype set} {cpu=0/bfloat16 cuda=0/float16} "
                        "{autocast dtype set} {autocast dtype set} {cpu=0/float16 cuda=0/float16} "
                        "{autocast dtype set} {autocast dtype set} {autocast dtype set} "
                        "{autocast dtype set} {cpu=0/float16 cuda=0/bfloat16}")
    # 1 and the seed's message for every word but [list cpu], which is cpu
    assert lines[2] == " ".join(["11", "11", "00", "00"] + ["11", "11"] * 9)
    assert lines[3] == "{autocast enabled} {autocast enabled} {cpu=1/float16 cuda=0/bfloat16}"
