"""The autocast commands' ATen path (aten.py, aten_programs.c): a
repeated command calls ATen's own functions from C.  It must be on where
the set-up says it is, and mean exactly what the Python path means: the
same results, errors and thread-local state, after every call, in any
order, on every thread, with the weight cache cleared where it was.
"""
import json
import random

from processes import assert_clean, tclsh
from tclamp import _bridge

# Every form of the state-setting and reading commands, good and bad.
DEVICES = ("cpu", "cuda")
DTYPES = ("float16", "bfloat16", "float32")


def command_words():
    words = []
    for device in DEVICES:
        for dtype in DTYPES:
            words += [f"torch::autocast_enable {device} {dtype}",
                      f"torch::autocastEnable -dtype {dtype} -device {device}",
                      f"torch::autocast_set_dtype {dtype} {device}",
                      f"torch::autocastSetDtype -device_type {device} -dtype {dtype}"]
        words += [f"torch::autocast_enable {device}", f"torch::autocast_disable {device}",
                  f"torch::autocastDisable -device {device}",
                  f"torch::autocast_is_enabled {device}", f"torch::autocastIsEnabled -device {device}",
                  f"torch::autocast_get_dtype {device}", f"torch::autocastGetDtype -device {device}"]
    words += ["torch::autocast_enable", "torch::autocast_disable", "torch::autocast_is_enabled",
              "torch::autocast_get_dtype", "torch::autocast_set_dtype bfloat16",
              "torch::autocast_clear_cache",
              # refused: never remembered, and nothing changes
              "torch::autocast_enable CPU", "torch::autocast_set_dtype float64 cpu",
              "torch::autocast_enable cpu float16 extra", "torch::autocast_is_enabled cuda:0",
              "torch::autocast_set_dtype", "torch::autocast_disable -device"]
    return words


RECORD = """\
package require tclamp
py exec {
import torch
def state():
    return " ".join(f"{d}={int(torch.is_autocast_enabled(d))}/{torch.get_autocast_dtype(d)}"
                    for d in ("cpu", "cuda"))
}
if {$argv eq "python"} { py exec {import tclamp.aten; tclamp.aten.use(False)} }
puts [dict get [tclamp::info] autocast_path]
foreach script [py eval {__import__('json').loads(open('calls.json').read())}] {
    set rc [catch $script result options]
    puts [list $script $rc $result [expr {$rc ? [dict get $options -errorcode] : ""}] [py call state]]
}
"""


# A weight, a matmul that casts it (cached inside a caching block), and an
# in-place update of it, as an optimizer step makes.
WEIGHT = """\
        py exec {
import torch
w = torch.nn.Parameter(torch.ones(2, 2))
x = torch.ones(2, 2)
def product():
    return (w @ x)[0, 0].item()
def bump():
    with torch.no_grad():
        w.add_(1)
}
"""


# A build without the ATen path (TCLAMP_NO_ATEN) runs every command on the
# Python path, and says so.
ATEN = "python" if "aten" in _bridge.BUILT_WITHOUT.split() else "aten"


def lines_on_both_paths(tmp_path, script):
    """The script's output lines after its first (the path it ran on), run
    with the ATen path as set up and with it off ($argv "python"); they
    must be the same."""
    runs = {}
    for path in ("aten", "python"):
        r = tclsh(tmp_path, script.replace("$argv", f'"{path}"'), name=f"{path}.tcl")
        assert_clean(r)
        first, *lines = r.stdout.splitlines()
        assert first == (ATEN if path == "aten" else path)
        runs[path] = lines
    assert runs["aten"] == runs["python"]
    return runs["aten"]


def test_the_path_is_on(tmp_path):
    """On the stacks we claim (Linux, torch 2.4 to 2.13) the functions are
    found and check out: if that detection broke, this fails, rather than
    every command quietly taking the slow path."""
    r = tclsh(tmp_path, """\
        package require tclamp
        puts [dict get [tclamp::info] autocast_path]
        py exec {import tclamp.aten; tclamp.aten.use(False)}
        puts [dict get [tclamp::info] autocast_path]
        py exec {tclamp.aten.use(True)}
        puts [dict get [tclamp::info] autocast_path]
        """)
    assert_clean(r)
    assert r.stdout.split() == [ATEN, "python", ATEN]


def test_same_as_the_python_path(tmp_path):
    """Four hundred calls in a random order, each command written the same
    way several times (the first plans in Python, the others run ATen's
    functions): every result, error and the state after each call are those
    of the Python path."""
    words = command_words()
    calls = [random.Random(seed).choice(words) for seed in range(400)]
    (tmp_path / "calls.json").write_text(json.dumps(calls))
    assert len(lines_on_both_paths(tmp_path, RECORD)) == 400


def test_exact_results_and_state(tmp_path):
    """The same command three times (the last two run ATen's functions):
    each time the result, and torch's state as Python reads it, are
    exactly what the command says."""
    r = tclsh(tmp_path, """\
        package require tclamp
        proc both {script} {
            set out {}
            for {set i 0} {$i < 3} {incr i} {
                lappend out [uplevel 1 $script] \\
                    [py eval {f"{int(__import__('torch').is_autocast_enabled('cpu'))} {__import__('torch').get_autocast_dtype('cpu')}"}]
            }
            puts $out
        }
        both {torch::autocast_enable cpu float16}
        both {torch::autocast_is_enabled cpu}
        both {torch::autocast_get_dtype cpu}
        both {torch::autocast_set_dtype bfloat16 cpu}
        both {torch::autocast_get_dtype cpu}
        both {torch::autocast_disable cpu}
        both {torch::autocast_is_enabled cpu}
        py exec {import torch; torch.set_autocast_dtype("cpu", torch.float64)}
        both {torch::autocast_get_dtype cpu}
        """)
    assert_clean(r)
    on16, on = "{1 torch.float16}", "{1 torch.bfloat16}"
    assert r.stdout.splitlines() == [
        "{autocast enabled} {1 torch.float16} " * 2 + "{autocast enabled} {1 torch.float16}",
        " ".join(["1 " + on16] * 3),
        " ".join(["float16 " + on16] * 3),
        " ".join(["{autocast dtype set} " + on] * 3),
        " ".join(["bfloat16 " + on] * 3),
        " ".join(["{autocast disabled} {0 torch.bfloat16}"] * 3),
        " ".join(["0 {0 torch.bfloat16}"] * 3),
        " ".join(["float64 {0 torch.float64}"] * 3),
    ]


def test_cache_cleared_on_every_call(tmp_path):
    """set_dtype and enable with a dtype clear the weight-cast cache each
    time, also when ATen's functions run: after an in-place update of a
    weight, a matmul inside a caching block sees the new weight."""
    r = tclsh(tmp_path, """\
        package require tclamp
""" + WEIGHT + """\
        set seen {}
        torch::autocast -device cpu -dtype bfloat16 {
            foreach script {
                {torch::autocast_set_dtype bfloat16 cpu}
                {torch::autocast_enable cpu bfloat16}
                {torch::autocast_clear_cache}
            } {
                for {set i 0} {$i < 3} {incr i} {
                    py call product;    # caches w's cast
                    py call bump
                    eval $script
                    lappend seen [py call product]
                }
            }
        }
        puts $seen
        """)
    assert_clean(r)
    assert r.stdout.split() == [str(2.0 * (i + 2)) for i in range(9)]


def test_each_thread_its_own_state(tmp_path):
    """Tcl threads running the same commands over and over each set only
    their own thread's state, as torch's own functions do."""
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        set body {
            set ::auto_path $path
            package require tclamp
            proc work {dtype n} {
                for {set i 0} {$i < $n} {incr i} {
                    torch::autocast_set_dtype $dtype cpu
                    torch::autocast_enable cpu
                    if {[torch::autocast_get_dtype cpu] ne $dtype} { return "saw another dtype" }
                    torch::autocast_disable cpu
                }
                list [torch::autocast_get_dtype cpu] [torch::autocast_is_enabled cpu] \\
                     [py eval {str(__import__('torch').get_autocast_dtype('cpu'))}]
            }
            thread::wait
        }
        set threads {}
        foreach dtype {float16 bfloat16 float32 float16} {
            set t [thread::create -joinable [list apply [list path $body] $auto_path]]
            lappend threads $t
            thread::send -async $t [list work $dtype 20000] result($t)
        }
        foreach t $threads { while {![info exists result($t)]} { vwait result($t) } }
        foreach t $threads { puts $result($t); thread::release $t }
        foreach t $threads { thread::join $t }
        puts [list [torch::autocast_get_dtype cpu] [torch::autocast_is_enabled cpu]]
        """, timeout=120)
    assert_clean(r)
    assert r.stdout.splitlines() == [
        "float16 0 torch.float16", "bfloat16 0 torch.bfloat16", "float32 0 torch.float32",
        "float16 0 torch.float16", "bfloat16 0"]


def test_runs_while_another_thread_holds_the_gil(tmp_path):
    """A repeated command enters no Python, nor does a torch::autocast
    block whose body does not: a Tcl thread calling for 0.8 s
    finishes while a Python thread holds the GIL for 2 s (in a C call that
    never lets it go), at least 0.5 s before it lets go; with the path off,
    the same calls wait for it.
    The holder takes the GIL before the calls start, so that their own
    taking and giving it back cannot keep it from the holder, and after the
    worker's set-up, which takes the GIL too."""
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        py exec {
            import ctypes, threading, time, tclamp.aten
            libc = ctypes.PyDLL(None)
            def hold():
                global held_until
                time.sleep(0.05)    # lets start() return to the main thread
                libc.usleep(2000000)
                held_until = time.time() * 1000
        }
        set worker [thread::create [list apply {{path} {
            set ::auto_path $path
            package require tclamp
            proc calls {{for 800}} {
                set end [expr {[clock milliseconds] + $for}]
                while {[clock milliseconds] < $end} {
                    torch::autocast_set_dtype bfloat16 cpu
                    torch::autocast -device_type cpu -dtype float16 {
                        torch::autocast_is_enabled cpu
                    }
                }
                clock milliseconds
            }
            calls 50;   # plans them, in Python
            thread::wait
        }} $auto_path]]
        thread::send $worker {};    # its set-up, which takes the GIL, is done
        foreach on {True False} {
            py exec "tclamp.aten.use($on); holder = threading.Thread(target=hold); holder.start()"
            after 150;                                  # the holder is in usleep
            unset -nocomplain done
            thread::send -async $worker calls done;     # calls for 0.8 s
            while {![info exists done]} { vwait done }
            py exec {holder.join()}
            puts [expr {$done < [py eval held_until] - 500 ? "before" : "after"}]
        }
        """, timeout=120)
    assert_clean(r)
    assert r.stdout.split() == ["before" if ATEN == "aten" else "after", "after"]


def test_start_keeps_the_python_path_when_dtypes_do_not_read_back(monkeypatch):
    """aten.start: where ATen's getter reads back none of torch's dtypes, or
    not the three the commands set, the bridge stays on the Python path
    (start gives None), and importing tclamp does not fail."""
    import torch
    from tclamp import aten
    monkeypatch.setattr(aten, "read_dtype_codes", lambda get_dtype: {})
    assert aten.start() == (None, None)
    monkeypatch.setattr(aten, "read_dtype_codes", lambda get_dtype: {torch.float16: 5})
    assert aten.start() == (None, None)


# torch::autocast blocks, each run three times at one place (the first
# plans in Python; the others run the block's program, on the ATen path):
# bodies that end every way, change the state, nest, and read it.
BLOCKS = """\
package require tclamp
py exec {
import torch
def state():
    nesting = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return " ".join(f"{d}={int(torch.is_autocast_enabled(d))}/"
                    f"{str(torch.get_autocast_dtype(d)).removeprefix('torch.')}"
                    for d in ("cpu", "cuda")) \\
        + f" cache={int(torch.is_autocast_cache_enabled())} nesting={nesting}"
}
if {$argv eq "python"} { py exec {import tclamp.aten; tclamp.aten.use(False)} }
puts [dict get [tclamp::info] autocast_path]
proc record {script} {
    for {set i 0} {$i < 3} {incr i} {
        set rc [catch {uplevel 1 $script} result options]
        dict unset options -errorstack
        # (keys sorted: the paths leave them in different orders)
        puts [list $rc $result [lsort -stride 2 -index 0 $options] [py call state]]
    }
}
proc in_proc {script} { record $script; return after }
record {torch::autocast -device_type cpu -dtype bfloat16 {py call state}}
record {torch::autocast -device cpu -dtype float16 -enabled 0 -cache_enabled no {py call state}}
record {torch::autocast -device_type cuda -dtype float16 {py call state}}
record {torch::autocast -device_type cpu {torch::autocast -device_type cuda -dtype bfloat16 {
    torch::autocast -device_type cpu -enabled false {py call state}}}}
record {torch::autocast -device_type cpu -dtype bfloat16 {
    torch::autocast_disable cpu; torch::autocast_set_dtype float32 cpu
    py exec {torch.set_autocast_cache_enabled(False)}
    py call state}}
record {torch::autocast -device_type cpu {set x 1
    error boom {} {TCLAMP BOOM}}}
record {::torch::autocast -device_type cpu {py call int x}}
record {torch::autocast -device_type cpu {return -code 5 five}}
record {torch::autocast -device_type cpu {break}}
record {for {set j 0} {$j < 3} {incr j} {torch::autocast -device_type cpu {continue}}; set j}
puts [in_proc {torch::autocast -device_type cpu {return -level 2 early}}]
record {torch::autocast -device_type cpu -dtype float16 {torch::autocast_clear_cache; set y 1}}
puts [py call state]
"""


def test_blocks_same_as_the_python_path(tmp_path):
    """torch::autocast runs its remembered block from C on the ATen path:
    the state inside, the body's result and return code with its options
    (errorInfo and its body line too), and the state restored after, are
    the Python path's, however the body ends."""
    lines = lines_on_both_paths(tmp_path, BLOCKS)
    outside = "cpu=0/bfloat16 cuda=0/float16 cache=0 nesting=0"      # tclamp turns the cache off
    ok = "{-code 0 -level 0}"
    assert lines[0:3] == [f"0 {{cpu=1/bfloat16 cuda=0/float16 cache=1 nesting=1}} {ok} {{{outside}}}"] * 3
    assert lines[3] == f"0 {{cpu=0/float16 cuda=0/float16 cache=0 nesting=1}} {ok} {{{outside}}}"
    assert lines[6] == f"0 {{cpu=0/bfloat16 cuda=1/float16 cache=1 nesting=1}} {ok} {{{outside}}}"
    assert lines[9] == f"0 {{cpu=0/bfloat16 cuda=1/bfloat16 cache=1 nesting=3}} {ok} {{{outside}}}"
    assert lines[12] == f"0 {{cpu=0/float32 cuda=0/float16 cache=0 nesting=1}} {ok} {{{outside}}}"
    error = "\n".join(lines[15:25])
    assert error == ("1 boom {-code 1 -errorcode {TCLAMP BOOM} -errorinfo {boom\n"
                     "    while executing\n\"error boom {} {TCLAMP BOOM}\"\n"
                     "    (\"torch::autocast\" body line 2)\n    invoked from within\n"
                     "\"torch::autocast -device_type cpu {set x 1\n    error boom {} {TCLAMP BOOM}}\"\n"
                     "    (\"uplevel\" body line 1)\n    invoked from within\n"
                     f"\"uplevel 1 $script\"}} -errorline 3 -level 0}} {{{outside}}}")
    assert lines[25:35] == lines[15:25]
    assert '    ("::torch::autocast" body line 1)' in lines[45:54]
    assert lines[72:75] == [f"2 five {{-code 5 -level 1}} {{{outside}}}"] * 3
    assert lines[75:78] == [f"3 {{}} {{-code 3 -level 0}} {{{outside}}}"] * 3
    assert lines[78:81] == [f"0 3 {ok} {{{outside}}}"] * 3
    assert lines[81:85] == [f"2 early {{-code 0 -level 2}} {{{outside}}}"] * 3 + ["after"]
    assert lines[85:] == [f"0 1 {ok} {{{outside}}}"] * 3 + [outside]
