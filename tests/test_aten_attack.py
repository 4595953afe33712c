"""The ATen path of the autocast commands under attack: whatever a script or
a host can do that might make a repeated command (ATen's functions, called
from C without Python) mean something else than the Python path, crash,
leak or hang.  Each case runs in a process of its own (processes.py), and
checks exact results and torch's state as Python's getters read it.

Checked by hand and not kept here (too slow for the suite): valgrind on a
tclsh script making 57,000 repeated calls loses the same 1,321 bytes in 21
blocks (all Python's and numpy's start-up) with the path on and off.
"""

import subprocess
import sys
import textwrap

import pytest

from conftest import needs_tkinters_tcl
from processes import assert_clean, assert_no_crash, environment, python, tclsh
from test_aten_path import ATEN, WEIGHT
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


# A bridge built without the ATen path (TCLAMP_NO_ATEN: test_switch_builds)
# runs no program, so the cases about programs themselves do not apply.
needs_programs = pytest.mark.skipif(ATEN != "aten", reason="the bridge was built without "
                                    "the ATen path (TCLAMP_NO_ATEN): no program runs")


@needs_programs
def test_hand_made_programs_are_refused(tmp_path):
    """A planned command's program runs in place of its steps, so one that
    could not mean what they mean is refused with the plan (TypeError),
    the Python path as well: a program ending in a set for a result taken
    from the last step read a dtype name at index -1 (the bytes of a
    function), an unknown device made ATen throw through C (abort), and a
    dict or None result went unmapped; torch::autocast's body (BODY) ends
    its program and gives its result.  A program that fits still runs."""
    r = python(tmp_path, """\
        import torch, tclamp
        from tclamp import aten
        from tclamp.aten import BODY
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
            "an op past the table": plan("ok", bytes((BODY + 1, 0, 0))),
            "body, result a constant": plan("ok", bytes((1, 0, 1, BODY, 0, 0))),
            "body, not last": plan(None, bytes((BODY, 0, 0, 1, 0, 1))),
            "cache flag 2": plan("ok", bytes((aten.SET_CACHE_ENABLED, 0, 2))),
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
                                          "get_dtype, result None", "device 77", "an op past the table",
                                          "body, result a constant", "body, not last",
                                          "cache flag 2", "enabled 2", "dtype 63")] + ["fits: ['ok', 'ok', 'ok'] True"]


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


class any_of(str):
    """Equal to any of the texts given (the first is what it shows)."""
    def __new__(cls, *texts):
        self = super().__new__(cls, texts[0])
        self.texts = texts
        return self

    def __eq__(self, other):
        return other in self.texts

    __hash__ = str.__hash__


def test_other_ways_to_call_the_commands(tmp_path):
    """Ensembles, namespace import, tailcall, coroutines, interp alias from
    a child, a child's own tclamp; a safe interpreter cannot load it."""
    r = tclsh(tmp_path, STATE + """\
        namespace ensemble create -command ::ac \\
            -map {en ::torch::autocast_enable gd ::torch::autocast_get_dtype}
        namespace eval ::user { namespace import ::torch::* }
        set out {}
        foreach i {1 2 3} {
            lappend out [ac en cpu bfloat16] [ac gd cpu] [::user::autocast_set_dtype float16 cpu] \\
                [apply {{} {tailcall torch::autocast_get_dtype cpu}}] \\
                [coroutine co$i apply {{} {
                    yield [torch::autocast_set_dtype bfloat16 cpu]
                    torch::autocast_get_dtype cpu
                }}] [co$i]
        }
        puts $out
        interp create child
        interp alias child enable {} torch::autocast_enable
        interp alias child dtype {} torch::autocast_get_dtype
        puts [child eval {list [enable cpu float16] [enable cpu float16] [dtype cpu] [dtype cpu]}]
        child eval [list set ::auto_path $::auto_path]
        puts [child eval {
            package require tclamp
            list [torch::autocast_set_dtype float32 cpu] [torch::autocast_set_dtype float32 cpu] \\
                [torch::autocast_get_dtype cpu] [torch::autocast_get_dtype cpu]
        }]
        interp delete child
        puts [list [torch::autocast_get_dtype cpu] [torch::autocast_get_dtype cpu] [py call state]]
        interp create -safe safe
        puts [list [catch {load {} Tclamp safe} m] $m]
        """)
    assert_clean(r)
    assert r.stdout.splitlines() == [
        " ".join(["{autocast enabled} bfloat16 {autocast dtype set} float16 "
                  "{autocast dtype set} bfloat16"] * 3),
        "{autocast enabled} {autocast enabled} float16 float16",
        "{autocast dtype set} {autocast dtype set} float32 float32",
        "float32 float32 {cpu=1/float32 cuda=0/float16}",
        # Tcl 8.6's words, and Tcl 9's
        any_of("1 {can't use package in a safe interpreter: no Tclamp_SafeInit procedure}",
               "1 {cannot use library in a safe interpreter: no Tclamp_SafeInit procedure}")]


def test_threads_and_a_pool_while_python_runs_and_the_path_toggles(tmp_path):
    """Four Tcl threads and a pool of three call the commands over and over
    while the main thread runs Python loops on its own state and turns the
    path off and on between them: every thread reads back only what it set
    (checked against Python's getter every 97 rounds too)."""
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        set body {
            set ::auto_path $path
            package require tclamp
            proc work {dtype dev n} {
                set bad 0
                for {set i 0} {$i < $n} {incr i} {
                    torch::autocast_set_dtype $dtype $dev
                    torch::autocast_enable $dev
                    if {[torch::autocast_get_dtype $dev] ne $dtype} { incr bad }
                    if {![torch::autocast_is_enabled $dev]} { incr bad }
                    torch::autocast_disable -device $dev
                    if {[torch::autocastIsEnabled -device $dev]} { incr bad }
                    if {$i % 97 == 0 && [py eval "str(__import__('torch').get_autocast_dtype('$dev'))"]
                            ne "torch.$dtype"} { incr bad }
                }
                list $bad [torch::autocast_get_dtype $dev] [torch::autocast_is_enabled $dev]
            }
            thread::wait
        }
        set threads {}
        foreach dtype {float16 bfloat16 float32 float16} dev {cpu cuda cpu cuda} {
            set t [thread::create -joinable [list apply [list path $body] $auto_path]]
            lappend threads $t
            thread::send -async $t [list work $dtype $dev 20000] result($t)
        }
        set pool [tpool::create -minworkers 3 -maxworkers 3 \\
            -initcmd [list apply {{p} {set ::auto_path $p; package require tclamp}} $auto_path]]
        set jobs {}
        for {set j 0} {$j < 30} {incr j} {
            lappend jobs [tpool::post $pool {
                set out {}
                for {set k 0} {$k < 300} {incr k} {
                    torch::autocast_enable cpu bfloat16
                    lappend out [torch::autocast_get_dtype cpu] [torch::autocast_is_enabled cpu]
                    torch::autocast_disable cpu
                    lappend out [torch::autocast_is_enabled cpu]
                }
                lsort -unique $out
            }]
        }
        set toggles 0
        while 1 {
            py exec {
import torch, tclamp.aten
for _ in range(2000):
    torch.set_autocast_enabled("cpu", True)
    torch.set_autocast_dtype("cpu", torch.float16)
    torch.set_autocast_enabled("cpu", False)
}
            py exec "tclamp.aten.use([expr {$toggles % 2}])"
            incr toggles
            set done 1
            foreach t $threads { if {![info exists result($t)]} { set done 0 } }
            if {$done} break
            update
        }
        py exec "tclamp.aten.use(True)"
        foreach t $threads { puts $result($t) }
        set outs {}
        foreach j $jobs { tpool::wait $pool $j; lappend outs [tpool::get $pool $j] }
        puts [lsort -unique $outs]
        foreach t $threads { thread::release $t }
        foreach t $threads { thread::join $t }
        tpool::release $pool
        puts [list [torch::autocast_get_dtype cpu] [torch::autocast_is_enabled cpu]]
        """, timeout=120)
    assert_clean(r)
    assert r.stdout.splitlines() == ["0 float16 0", "0 bfloat16 0", "0 float32 0", "0 float16 0",
                                     "{0 1 bfloat16}", "float16 0"]


def test_threads_with_child_interpreters_that_come_and_go(tmp_path):
    """Four Tcl threads each make child interpreters with tclamp, call
    through them and an alias to them, delete them, and two end with
    thread::exit, while the main thread runs Python: each thread reads
    back what it set, through every interpreter of its own."""
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        set body {
            set ::auto_path $path
            package require tclamp
            proc work {n ending} {
                set bad 0
                for {set r 0} {$r < $n} {incr r} {
                    set c [interp create]
                    $c eval [list set ::auto_path $::auto_path]
                    $c eval {package require tclamp}
                    interp alias {} enable {} $c eval torch::autocast_enable
                    for {set i 0} {$i < 100} {incr i} {
                        $c eval {torch::autocast_set_dtype bfloat16 cpu; torch::autocast_enable cpu}
                        if {[$c eval {torch::autocast_get_dtype cpu}] ne "bfloat16"} { incr bad }
                        if {[torch::autocast_get_dtype cpu] ne "bfloat16"} { incr bad }
                        torch::autocast_set_dtype float16 cpu
                        if {[$c eval {torch::autocast_get_dtype cpu}] ne "float16"} { incr bad }
                        enable cpu float32
                        if {[torch::autocast_get_dtype cpu] ne "float32"} { incr bad }
                    }
                    interp delete $c
                }
                if {$ending eq "exit"} { thread::exit }
                return $bad
            }
            thread::wait
        }
        set threads {}
        foreach ending {return exit return exit} {
            set t [thread::create [list apply [list path $body] $auto_path]]
            lappend threads $t
            thread::send -async $t [list work 10 $ending] result($t)
        }
        set returned [list [lindex $threads 0] [lindex $threads 2]]
        while {!([info exists result([lindex $returned 0])] && [info exists result([lindex $returned 1])]
                 && [llength [thread::names]] == 3)} {
            py exec {
import torch
for _ in range(500):
    torch.set_autocast_dtype("cpu", torch.bfloat16)
    torch.clear_autocast_cache()
}
            after 5
            update
        }
        foreach t $returned { puts $result($t); thread::release $t }
        puts [list [torch::autocast_get_dtype cpu] [torch::autocast_get_dtype cpu]]
        """, timeout=120)
    assert_clean(r)
    assert r.stdout.splitlines() == ["0", "0", "bfloat16 bfloat16"]


def test_python_threads_with_interpreters_of_their_own(tmp_path):
    """A Python program: the state it set before importing tclamp is kept
    (the set-up's checks restore it), and three Python threads, each with
    its own tclamp.Interp, mix the commands with torch's own setters."""
    r = python(tmp_path, """\
        import threading, torch
        torch.set_autocast_enabled("cpu", True); torch.set_autocast_dtype("cpu", torch.float16)
        torch.set_autocast_enabled("cuda", True); torch.set_autocast_dtype("cuda", torch.bfloat16)
        import tclamp, tclamp.aten
        def state():
            return [(d, torch.is_autocast_enabled(d), str(torch.get_autocast_dtype(d)))
                    for d in ("cpu", "cuda")]
        print(tclamp.tcl.eval("dict get [tclamp::info] autocast_path"), state())
        out = {}
        def work(dtype, dev):
            interp = tclamp.Interp()
            bad = 0
            for _ in range(3000):
                interp.eval(f"torch::autocast_set_dtype {dtype} {dev}")
                interp.eval(f"torch::autocast_enable {dev}")
                bad += str(torch.get_autocast_dtype(dev)) != "torch." + dtype
                bad += not torch.is_autocast_enabled(dev)
                bad += interp.eval(f"torch::autocast_get_dtype {dev}") != dtype
                torch.set_autocast_dtype(dev, torch.float32)
                bad += interp.eval(f"torch::autocast_get_dtype {dev}") != "float32"
                interp.eval(f"torch::autocast_disable {dev}")
                bad += torch.is_autocast_enabled(dev)
            out[dtype, dev] = (bad, state())
        threads = [threading.Thread(target=work, args=case)
                   for case in (("float16", "cpu"), ("bfloat16", "cuda"), ("bfloat16", "cpu"))]
        for t in threads: t.start()
        for t in threads: t.join()
        for case in sorted(out): print(*case, *out[case])
        print(state())
        """)
    assert_clean(r)
    fresh = {"cpu": "torch.bfloat16", "cuda": "torch.float16"}    # a new thread's dtypes
    def after(dtype, dev):
        return [(d, False, "torch.float32" if d == dev else fresh[d]) for d in ("cpu", "cuda")]
    assert r.stdout.splitlines() == [
        f"{ATEN} [('cpu', True, 'torch.float16'), ('cuda', True, 'torch.bfloat16')]",
        f"bfloat16 cpu 0 {after('bfloat16', 'cpu')}",
        f"bfloat16 cuda 0 {after('bfloat16', 'cuda')}",
        f"float16 cpu 0 {after('float16', 'cpu')}",
        "[('cpu', True, 'torch.float16'), ('cuda', True, 'torch.bfloat16')]"]


@needs_tkinters_tcl
def test_tkinters_tcl(tmp_path):
    """tkinter's interpreter with tclamp, while a Python thread keeps
    setting its own thread's dtype."""
    r = python(tmp_path, """\
        import threading, tkinter, torch
        tcl = tkinter.Tcl()
        tcl.eval("package require tclamp")
        print(tcl.eval("dict get [tclamp::info] autocast_path"))
        seen = []
        for dtype in ("float16", "bfloat16") * 2:
            for _ in range(3):
                seen.append((tcl.eval(f"torch::autocast_enable cpu {dtype}"),
                             tcl.eval("torch::autocast_get_dtype cpu"),
                             str(torch.get_autocast_dtype("cpu")), torch.is_autocast_enabled("cpu")))
        print(sorted(set(seen)))
        stop = False
        def spin():
            while not stop:
                torch.set_autocast_dtype("cpu", torch.float32)
        thread = threading.Thread(target=spin)
        thread.start()
        read = set()
        for _ in range(1000):       # each waits for the spinning thread's GIL
            tcl.eval("torch::autocast_set_dtype bfloat16 cpu")
            read.add(tcl.eval("torch::autocast_get_dtype cpu"))
        stop = True
        thread.join()
        print(read)
        """)
    assert_clean(r)
    assert r.stdout.splitlines() == [
        ATEN,
        "[('autocast enabled', 'bfloat16', 'torch.bfloat16', True), "
        "('autocast enabled', 'float16', 'torch.float16', True)]",
        "{'bfloat16'}"]


def test_forked_child(tmp_path):
    """os.fork from py exec: the child's commands, remembered before the
    fork, set and read the child's state; the parent's is its own."""
    r = tclsh(tmp_path, """\
        package require tclamp
        foreach i {1 2} { torch::autocast_enable cpu bfloat16; torch::autocast_get_dtype cpu }
        py exec {import os, torch; pid = os.fork()}
        if {[py eval pid] == 0} {
            set out {}
            for {set i 0} {$i < 3} {incr i} {
                lappend out [torch::autocast_get_dtype cpu] [torch::autocast_set_dtype float16 cpu] \\
                    [torch::autocast_get_dtype cpu] [py eval {str(torch.get_autocast_dtype('cpu'))}] \\
                    [torch::autocast_is_enabled cpu]
            }
            puts "child $out"
            flush stdout
            exit 3
        }
        set status [py eval {os.waitpid(pid, 0)[1] >> 8}]
        puts "parent $status [torch::autocast_get_dtype cpu] [torch::autocast_get_dtype cpu]"
        """)
    assert_clean(r)
    assert r.stdout.splitlines() == [
        "child " + " ".join(["bfloat16"] + ["{autocast dtype set} float16 torch.float16 1 float16"] * 2
                            + ["{autocast dtype set} float16 torch.float16 1"]),
        "parent 3 bfloat16 bfloat16"]


@pytest.mark.parametrize("path", ["aten", "python"])
def test_exit_from_a_worker_while_the_main_thread_calls(path, tmp_path):
    """A worker thread calls exit while the main thread calls the commands
    as fast as it can: the process ends with the worker's status, on either
    path (the main thread may first see, as an error, that the process is
    exiting, or once Python is finalized, that it is)."""
    r = tclsh(tmp_path, f"""\
        package require Thread
        package require tclamp
        if {{"{path}" eq "python"}} {{ py exec {{import tclamp.aten; tclamp.aten.use(False)}} }}
        set w [thread::create [list apply {{{{p}} {{
            set ::auto_path $p; package require tclamp; torch::autocast_enable cpu; thread::wait
        }}}} $auto_path]]
        thread::send -async $w {{after 300 {{exit 5}}}}
        while 1 {{
            torch::autocast_set_dtype bfloat16 cpu
            torch::autocast_enable cpu
            torch::autocast_get_dtype cpu
            torch::autocast_is_enabled cpu
            torch::autocast_clear_cache
        }}
        """)
    assert_no_crash(r)
    assert r.returncode == 5, r.report
    assert r.stderr == "" or r.stderr.startswith(
        ("the process is exiting: Python takes no more calls from Tcl",
         "Python has been finalized")), r.report


def test_daemon_python_thread_calling_at_the_end(tmp_path):
    """A daemon Python thread runs a Tcl loop of repeated commands while the
    program ends: Python finalizes without it, and libc's exit destroys
    libtorch's static objects while it still calls ATen's functions.  With
    torch 2.4 about half such runs died of SIGSEGV in clear_cache (its map
    was gone); the path now stops first, at libc's exit.  Atexit handlers,
    before and after tclamp's own, still have it.  (On the Python path
    torch's own binding may abort there, as it does for a pure Python
    daemon thread calling torch.clear_autocast_cache.)"""
    r = python(tmp_path, """\
        import atexit, sys, threading, time
        def last():         # registered before tclamp: runs after its end
            print("last", sys.modules["tclamp"]._bridge.use_aten(), flush=True)
        atexit.register(last)
        import tclamp
        started = threading.Event()
        def loop():
            interp = tclamp.Interp()
            calls = ("torch::autocast_set_dtype bfloat16 cpu; torch::autocast_clear_cache; "
                     "torch::autocast_get_dtype cpu; torch::autocast_enable cpu")
            interp.eval(calls)
            started.set()
            interp.eval("while 1 { %s }" % calls)
        threading.Thread(target=loop, daemon=True).start()
        started.wait()
        interp = tclamp.Interp()
        def first():        # registered after tclamp: runs before its end
            print("first", tclamp._bridge.use_aten(),
                  [interp.eval("torch::autocast_set_dtype float16 cpu") for _ in range(3)], flush=True)
        atexit.register(first)
        time.sleep(0.2)
        print("main ends", flush=True)
        """)
    assert_clean(r)
    on = ATEN == "aten"
    assert r.stdout.splitlines() == [
        "main ends", f"first {on} ['autocast dtype set', 'autocast dtype set', 'autocast dtype set']",
        f"last {on}"]


@needs_programs   # the loop runs without the GIL until libc's exit stops its programs
def test_a_daemon_thread_is_not_ended_while_the_process_exits(tmp_path):
    """After libc's exit stops the programs, the daemon thread's next command
    would take the GIL of a finalized Python, which before 3.14 ends the
    thread with pthread_exit: its thread-local destructors then ran beside
    libc's exit handlers (the heap corruption that the test above met now
    and then).  The thread waits for the end instead.  A thread-specific
    value whose destructor is libc's puts tells: it prints only if the
    thread is ended."""
    r = python(tmp_path, """\
        import ctypes, threading, time
        import tclamp
        libc = ctypes.CDLL(None)
        key = ctypes.c_uint()
        assert libc.pthread_key_create(ctypes.byref(key),
                                       ctypes.cast(libc.puts, ctypes.c_void_p)) == 0
        message = ctypes.create_string_buffer(b"the daemon thread was ended")
        started = threading.Event()
        def loop():
            libc.pthread_setspecific(key, message)
            interp = tclamp.Interp()
            calls = "torch::autocast_set_dtype bfloat16 cpu; torch::autocast_get_dtype cpu"
            interp.eval(calls)
            started.set()
            interp.eval("while 1 { %s }" % calls)
        threading.Thread(target=loop, daemon=True).start()
        started.wait()
        time.sleep(0.1)
        print("main ends", tclamp._bridge.use_aten(), flush=True)
        """)
    assert_clean(r)
    assert r.stdout == "main ends True\n"


@needs_programs   # on the Python path torch's binding may abort there (see above)
def test_daemon_threads_in_clear_cache_while_the_program_ends(tmp_path):
    """Eight daemon threads clear the cache in a Tcl loop while the program
    ends: libc's exit must not destroy the cache's map while one of them is
    inside clear_cache (gdb showed a thread there when it died).  Before
    exit waited for a program in flight, this died of SIGSEGV in one run in
    twenty from here and in two runs in three from a shell: how often
    depends on the process's layout, so each run's environment has another
    size.  The output goes to a file, as a program's often does."""
    (tmp_path / "main.py").write_text(textwrap.dedent("""\
        import threading, time
        import tclamp
        started = threading.Barrier(9)
        def loop():
            interp = tclamp.Interp()
            interp.eval("torch::autocast_clear_cache; torch::autocast_clear_cache")
            started.wait()
            interp.eval("while 1 { torch::autocast_clear_cache }")
        for _ in range(8):
            threading.Thread(target=loop, daemon=True).start()
        started.wait()
        time.sleep(0.05)
        print("main ends", tclamp._bridge.use_aten())
        """))
    for run in range(8):
        output = tmp_path / f"output{run}"
        with open(output, "w") as sink:
            r = subprocess.run([sys.executable, str(tmp_path / "main.py")], cwd=tmp_path,
                               env=dict(environment(), PADDING="x" * 997 * run),
                               stdin=subprocess.DEVNULL, stdout=sink,
                               stderr=subprocess.STDOUT, timeout=60)
        assert (r.returncode, output.read_text()) == (0, "main ends True\n")


@pytest.mark.parametrize("path", ["aten", "python"])
def test_atexit_handlers_call_the_commands(path, tmp_path):
    """Python's atexit handlers, run when Tcl exits, call repeated commands
    through tclamp.tcl.eval: they work and set the state."""
    r = tclsh(tmp_path, f"""\
        package require tclamp
        if {{"{path}" eq "python"}} {{ py exec {{import tclamp.aten; tclamp.aten.use(False)}} }}
        torch::autocast_enable cpu bfloat16
        torch::autocast_get_dtype cpu
        py exec {{
import atexit, tclamp, torch
def bye():
    out = [tclamp.tcl.eval(s) for s in ["torch::autocast_enable cpu float16",
                                        "torch::autocast_get_dtype cpu"] * 3]
    print("atexit", out, torch.get_autocast_dtype("cpu"), flush=True)
atexit.register(bye)
}}
        exit 4
        """)
    assert_clean(r, rc=4)
    assert r.stdout == ("atexit ['autocast enabled', 'float16', 'autocast enabled', 'float16', "
                        "'autocast enabled', 'float16'] torch.float16\n")


def test_handles_as_words(tmp_path):
    """A handle's object for a word goes to the parser as itself (one that
    compares equal to bfloat16 is taken), never remembered under its name:
    once released, the same name is a released handle each time."""
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
class Sly:
    def __hash__(self): return hash("bfloat16")
    def __eq__(self, other): return other == "bfloat16"
}
        set h [py eval Sly()]
        set out {}
        foreach i {1 2 3} {
            torch::autocast_set_dtype float32 cpu
            lappend out [catch {torch::autocast_set_dtype $h cpu} m] $m [torch::autocast_get_dtype cpu]
        }
        puts $out
        py release $h
        set out {}
        foreach i {1 2 3} {
            lappend out [catch {torch::autocast_set_dtype $h cpu} m] $m [torch::autocast_get_dtype cpu]
        }
        puts $out
        """)
    assert_clean(r)
    assert r.stdout.splitlines() == [
        " ".join(["0 {autocast dtype set} bfloat16"] * 3),
        " ".join(['1 {ValueError: py object handle "::py::obj1" has been released} bfloat16'] * 3)]


@pytest.mark.parametrize("path", ["aten", "python"])
def test_another_threads_commands_clear_the_weight_cache(path, tmp_path):
    """The weight-cast cache is one for the process: a worker thread's
    set_dtype, enable with a dtype and clear_cache (repeated, so on the ATen
    path) drop the casts the main thread's scoped block cached, and the
    main thread's next product sees the updated weight."""
    r = tclsh(tmp_path, f"""\
        package require Thread
        package require tclamp
        if {{"{path}" eq "python"}} {{ py exec {{import tclamp.aten; tclamp.aten.use(False)}} }}
{WEIGHT}        set worker [thread::create [list apply {{{{path}} {{
            set ::auto_path $path
            package require tclamp
            thread::wait
        }}}} $auto_path]]
        set seen {{}}
        torch::autocast -device cpu -dtype bfloat16 {{
            foreach script {{
                {{torch::autocast_set_dtype bfloat16 cpu}}
                {{torch::autocast_enable cpu bfloat16}}
                {{torch::autocast_clear_cache}}
                {{torch::autocastSetDtype -dtype bfloat16 -device cuda}}
            }} {{
                for {{set i 0}} {{$i < 3}} {{incr i}} {{
                    py call product
                    py call bump
                    lappend seen [py call product]
                    thread::send $worker $script
                    lappend seen [py call product]
                }}
            }}
        }}
        puts $seen
        """)
    assert_clean(r)
    # stale (the cached cast) until the worker's command, then the new weight
    assert r.stdout.split() == [f"{2.0 * (i + 1 + after)}" for i in range(12) for after in (0, 1)]


def test_tohil_holding_the_gil(tohil, tmp_path):  # noqa: F811
    """tohil loaded first (it keeps the GIL on its thread): repeated
    commands from Tcl and from tohil's Python set what torch reads."""
    r = run_with_tohil(tohil, """\
package require tohil
package require tclamp
puts [dict get [tclamp::info] autocast_path]
set out {}
for {set i 0} {$i < 3} {incr i} {
    lappend out [torch::autocast_enable cpu bfloat16] [torch::autocast_get_dtype cpu] \\
        [tohil::eval {str(__import__('torch').get_autocast_dtype('cpu'))}] \\
        [tohil::eval {__import__('torch').is_autocast_enabled('cpu')}] \\
        [torch::autocast_disable cpu] [tohil::eval {__import__('torch').is_autocast_enabled('cpu')}]
}
puts $out
tohil::exec {
import tohil
calls = ['torch::autocast_set_dtype float16 cpu', 'torch::autocast_get_dtype cpu'] * 3
seen = [str(tohil.eval(call)) for call in calls]
}
puts [tohil::eval {" ".join(seen)}]
puts [tohil::eval {str(__import__('torch').get_autocast_dtype('cpu'))}]
""", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "aten",
        " ".join(["{autocast enabled} bfloat16 torch.bfloat16 1 {autocast disabled} 0"] * 3),
        " ".join(["autocast dtype set", "float16"] * 3),
        "torch.float16"]
