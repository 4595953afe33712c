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
    runs = {}
    for path in ("aten", "python"):
        r = tclsh(tmp_path, RECORD.replace("$argv", f'"{path}"'), name=f"{path}.tcl")
        assert_clean(r)
        first, *lines = r.stdout.splitlines()
        assert first == (ATEN if path == "aten" else path)
        runs[path] = lines
    assert runs["aten"] == runs["python"]
    assert len(runs["aten"]) == 400


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
    """A repeated command enters no Python: a Tcl thread calling for 0.8 s
    finishes while a Python thread holds the GIL for 2 s (in a C call that
    never lets it go), at least 0.5 s before it lets go; with the path off,
    the same calls wait for it.
    The holder takes the GIL before the calls start, so that their own
    taking and giving it back cannot keep it from the holder."""
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
                    torch::autocast_is_enabled cpu
                }
                clock milliseconds
            }
            calls 50;   # plans them, in Python
            thread::wait
        }} $auto_path]]
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
