"""Threads at awkward moments: several that load tclamp at the same moment,
and `thread::exit` from deep inside Python, in Tcl and in Python threads.

Every script runs in a process of its own, with a time limit (processes.py),
so that a crash or a hang is a failed test and never a dead pytest.
"""
import sys

from processes import CRASH_SIGNS, assert_clean, python, tclsh


# --- threads that load tclamp at the same moment --------------------------

FIRST_LOAD_POOL = """\
package require Thread
set pool [tpool::create -minworkers 6 -maxworkers 6 -initcmd \\
    [list apply {{path} {set ::auto_path $path; package require tclamp}} $auto_path]]
set jobs {}
for {set i 0} {$i < 6} {incr i} {
    lappend jobs [tpool::post $pool {py eval {__import__('threading').get_ident() > 0}}]
}
set results {}
foreach job $jobs { tpool::wait $pool $job; lappend results [tpool::get $pool $job] }
puts $results
tpool::release $pool
"""

FIRST_LOAD_THREADS = """\
package require Thread
set threads {}
for {set i 0} {$i < 8} {incr i} {
    lappend threads [thread::create -joinable [list apply {{path} {
        set ::auto_path $path; package require tclamp; py eval 1; thread::wait
    }} $auto_path]]
}
package require tclamp
set results {}
foreach t $threads { lappend results [thread::send $t {py eval 6*7}] }
foreach t $threads { thread::release $t }
foreach t $threads { thread::join $t }
puts $results
"""


def test_concurrent_first_load_is_clean_every_time(tmp_path):
    """Six pool workers, or eight threads and the main thread, start Python
    at the same moment: one starts it, the others wait; a race there
    shows in some runs only, so it runs three times."""
    failures = []
    runs = [(FIRST_LOAD_POOL, "1 1 1 1 1 1")] * 2 + [(FIRST_LOAD_THREADS, " ".join(["42"] * 8))]
    for n, (script, expected) in enumerate(runs):
        r = tclsh(tmp_path, script, name=f"load{n}.tcl")
        if r.returncode != 0 or r.stdout.split("\n")[0] != expected or any(
                sign in r.stderr for sign in CRASH_SIGNS + ("failed to read",)):
            failures.append(r.report)
    assert not failures, f"{len(failures)} of {len(runs)} runs failed:\n" + "\n".join(failures)


def test_two_threads_in_blocks_of_different_dtypes_without_the_cache_never_meet(tmp_path):
    """docs/hosts.md, threads: torch's cast cache is one for the process, so
    two threads in blocks of different dtypes at once can meet each other's
    casts (a dtype mismatch, some runs only); with -cache_enabled 0 they
    never do, however the threads interleave."""
    r = tclsh(tmp_path, """\
        package require tclamp
        package require Thread
        py exec {import torch; shared = torch.nn.Linear(32, 32); x = torch.randn(4, 32)}
        set work {
            proc run {dtype n} {
                set seen {}
                for {set i 0} {$i < $n} {incr i} {
                    lappend seen [torch::autocast -device_type cpu -dtype $dtype -cache_enabled 0 {
                        py eval {str(__import__('__main__').shared(__import__('__main__').x).dtype)}
                    }]
                }
                lsort -unique $seen
            }
        }
        set threads {}
        foreach dtype {float16 bfloat16} {
            set t [thread::create -joinable]
            thread::send $t [list set ::auto_path $::auto_path]
            thread::send $t {package require tclamp}
            thread::send $t $work
            thread::send -async $t [list run $dtype 500] ::result($dtype)
            lappend threads $t
        }
        foreach dtype {float16 bfloat16} {
            if {![info exists ::result($dtype)]} { vwait ::result($dtype) }
            puts $::result($dtype)
        }
        foreach t $threads { thread::release $t; thread::join $t }
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == ["torch.float16", "torch.bfloat16"], r.report


# --- thread::exit under Python --------------------------------------------

def test_thread_exit_four_levels_deep_leaves_frames_usable(tmp_path):
    """Tcl -> Python -> Tcl -> Python -> thread::exit in a worker; the main
    thread then reads and tries to clear the frames and traceback that the
    dead thread left, collects garbage, and exits with a code."""
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        set t [thread::create -joinable {thread::wait}]
        thread::send $t [list set auto_path $auto_path]
        thread::send $t {package require tclamp}
        thread::send $t {proc inner {} { py exec {import tclamp, sys
        try:
            raise ValueError('boom')
        except ValueError as e:
            kept.append(e)
            kept.append(sys._getframe())
            tclamp.tcl.eval('thread::exit')} }}
        catch {thread::send $t {py exec {import sys, tclamp
        kept = []
        big = bytearray(10**6)
        def deep():
            local_obj = [1, 2, 3]
            kept.append(sys._getframe())
            tclamp.tcl.eval('inner')
        deep()}}} msg
        puts "send: $msg"
        thread::join $t
        py exec {
        import gc, traceback
        gc.collect()
        for k in kept:
            if isinstance(k, BaseException):
                print(''.join(traceback.format_exception(k)).splitlines()[-1])
                continue
            print(k.f_code.co_name, 'local_obj' in k.f_locals, len(traceback.format_stack(k)) > 0)
            try:
                k.clear()
            except RuntimeError as e:
                print('clear:', e)
        del kept
        gc.collect()
        }
        puts end
        exit 4
    """)
    assert_clean(r, 4)
    assert r.stdout.splitlines() == [
        "send: target thread died",
        "deep True True", "clear: cannot clear an executing frame",
        "ValueError: boom",
        "<module> False True", "clear: cannot clear an executing frame",
        "end"], r.report


def test_thread_exit_in_python_threads_of_a_tcl_host(tmp_path):
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
        import threading, sys, tclamp
        kept = []
        def leave(code):
            kept.append(sys._getframe())
            tclamp.tcl.eval(f'package require Thread; thread::exit {code}')
            print('NOT REACHED')
        threads = [threading.Thread(target=leave, args=(n,)) for n in range(4)]
        for t in threads: t.start()
        for t in threads: t.join(10)
        print('joined', [t.is_alive() for t in threads], flush=True)
        print([k.f_code.co_name for k in kept])
        f = open('data.txt', 'w'); f.write('data')
        }
        puts end
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == ["joined [False, False, False, False]",
                                     "['leave', 'leave', 'leave', 'leave']", "end"], r.report
    assert (tmp_path / "data.txt").read_text() == "data"


def test_threading_lists_a_tcl_thread_ended_by_thread_exit_and_one_released_until_313(tmp_path):
    """docs/hosts.md, thread::exit under Python: a Tcl thread that Python
    code asked `threading` about is in threading.enumerate(); ended by
    thread::exit under Python it stays there, alive.  One ended by
    thread::release leaves the list only from Python 3.13 on (threading
    drops a thread it did not start when its thread state goes); before,
    Python keeps it, as it keeps any thread it did not start.  Both
    threads live until both are ended, so neither can take the other's
    id.  The page said the released one always leaves the list."""
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        py exec {import threading}
        set init [list apply {{path} {
            set ::auto_path $path; package require tclamp
            py exec {import threading; me = threading.current_thread()}
            thread::wait
        }} $auto_path]
        set exited [thread::create -joinable $init]
        set released [thread::create -joinable $init]
        set ids {}
        foreach t [list $exited $released] {
            lappend ids [thread::send $t {py eval {threading.get_ident()}}]
        }
        py exec "ids = \\[[join $ids ,]\\]"
        puts [py eval {[i in {t.ident for t in threading.enumerate()} for i in ids]}]
        catch {thread::send $exited {py exec {__import__('tclamp').tcl.eval('thread::exit')}}}
        thread::join $exited
        thread::release $released
        thread::join $released
        puts [py eval {[i in {t.ident for t in threading.enumerate()} for i in ids]}]
        puts [py eval {[t.is_alive() for t in threading.enumerate() if t.ident == ids[0]]}]
    """)
    assert_clean(r)
    released_listed = "1" if sys.version_info < (3, 13) else "0"
    assert r.stdout.splitlines() == ["1 1", f"1 {released_listed}", "1"], r.report


def test_thread_exit_in_python_threads_of_a_python_host(tmp_path):
    r = python(tmp_path, """\
        import threading, sys, tclamp
        kept = []
        def leave():
            kept.append(sys._getframe())
            tclamp.tcl.eval('package require Thread; thread::exit')
        t = threading.Thread(target=leave)
        t.start()
        t.join(10)
        print('joined', not t.is_alive(), kept[0].f_code.co_name)
        results = []
        t2 = threading.Thread(target=lambda: results.append(tclamp.tcl.eval('expr 6*7')))
        t2.start(); t2.join(10)
        print(results)
        f = open('data.txt', 'w'); f.write('data')
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == ["joined True leave", "['42']"], r.report
    assert (tmp_path / "data.txt").read_text() == "data"


def test_del_that_calls_thread_exit_in_a_worker(tmp_path):
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        set t [thread::create -joinable {thread::wait}]
        thread::send $t [list set auto_path $auto_path]
        thread::send $t {package require tclamp; py exec {
        import tclamp
        class Leaver:
            def __del__(self):
                tclamp.tcl.eval('package require Thread; thread::exit')
        }; set leaver [py call Leaver]}
        catch {thread::send $t {rename $leaver {}; puts NOT-REACHED}} msg
        puts "send: $msg"
        thread::join $t
        puts [py eval 1+1]
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == ["send: target thread died", "2"], r.report


# --- what a thread's last Python error leaves --------------------------------

def test_python_threads_that_end_after_a_python_error_leave_no_exception(tmp_path):
    """A Python thread of a Python host whose Tcl caught a Python error
    (kept for its Tcl error) takes the exception with it when it ends."""
    r = python(tmp_path, """\
        import gc, threading, weakref, tclamp
        class Held:
            pass
        held = weakref.WeakSet()
        def fail_holding():
            value = Held()
            held.add(value)
            raise ValueError(value)
        def work():
            tclamp.tcl.eval('catch {py call fail_holding}')
            alive.append(len(held))
        alive = []
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
            t.join(30)
        gc.collect()
        print(alive, len(held))
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == ["[1, 1, 1, 1] 0"], r.report
