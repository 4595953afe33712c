"""`exit` with Python on the stack: from a handle's method, a function, `py
exec`, an after event, a `__del__` run by a release, a Python thread; from
several threads at once, while other threads use Python or wait in Tcl, and
from atexit handlers.  The process ends with its code, its files flushed.

Every script runs in a process of its own, with a time limit (processes.py),
so that a crash or a hang is a failed test and never a dead pytest.
"""
import pytest

from processes import assert_clean, assert_no_crash, python, tclsh


# --- exit with Python on the stack -----------------------------------------
#
# Each case: (host, script, exit code, stdout lines, files and their content,
# whether the files' data is lost today).  Each script runs once; one test
# checks the exit code and output, another the files.

EXIT_CASES = {
    "from-a-handle-method": ("tcl", """\
        package require tclamp
        py exec {
        import tclamp, atexit
        class Writer:
            def __init__(self, path):
                self.f = open(path, 'w')
            def go(self, code):
                self.f.write('written-before-exit')
                tclamp.tcl.eval(f'exit {code}')
                print('NOT REACHED')
        atexit.register(print, 'atexit ran')
        }
        set w [py call Writer out.txt]
        puts "tcl before"
        $w go 7
        puts NOT-REACHED
        """, 7, ["tcl before", "atexit ran"], {"out.txt": "written-before-exit"}, True),
    "from-a-function-with-a-local-file": ("tcl", """\
        package require tclamp
        py exec {
        import tclamp, atexit
        atexit.register(print, 'atexit ran')
        def work(path):
            f = open(path, 'w')
            f.write('local-data')
            tclamp.tcl.eval('exit 2')
        }
        torch::autocast -device cpu {py call work out.txt}
        """, 2, ["atexit ran"], {"out.txt": "local-data"}, True),
    "from-py-exec-with-a-global-file": ("tcl", """\
        package require tclamp
        py exec {
        import tclamp, atexit
        atexit.register(print, 'atexit ran')
        g = open('out.txt', 'w'); g.write('global-data')
        }
        py exec {tclamp.tcl.eval('exit 9')}
        """, 9, ["atexit ran"], {"out.txt": "global-data"}, True),
    "from-python-in-an-after-event": ("tcl", """\
        package require tclamp
        py exec {
        import tclamp, atexit
        atexit.register(print, 'atexit ran')
        g = open('out.txt', 'w'); g.write('global-data')
        def tick():
            tclamp.tcl.eval('after 0 {py call final}')
        def final():
            print('final', flush=True)
            tclamp.tcl.eval('exit 9')
        }
        after 10 {py call tick}
        vwait forever
        """, 9, ["final", "atexit ran"], {"out.txt": "global-data"}, True),
    "from-a-del-run-by-release": ("tcl", """\
        package require tclamp
        py exec {
        import tclamp, atexit
        atexit.register(print, 'atexit ran')
        g = open('out.txt', 'w'); g.write('global-data')
        class Quitter:
            def __del__(self):
                tclamp.tcl.eval('exit 5')
        }
        set q [py call Quitter]
        rename $q {}
        puts NOT-REACHED
        """, 5, ["atexit ran"], {"out.txt": "global-data"}, True),
    "plain-tcl-exit-in-an-after-event": ("tcl", """\
        package require tclamp
        py exec {
        import atexit
        atexit.register(print, 'atexit ran')
        g = open('out.txt', 'w'); g.write('global-data')
        }
        after 10 {exit 9}
        vwait forever
        """, 9, ["atexit ran"], {"out.txt": "global-data"}, False),
    "from-a-python-thread-of-a-tcl-host": ("tcl", """\
        package require tclamp
        py exec {
        import threading, tclamp, atexit, time
        atexit.register(print, 'atexit ran')
        g = open('out.txt', 'w'); g.write('global-data')
        def quitter():
            f = open('local.txt', 'w'); f.write('local-data')
            time.sleep(0.2)
            tclamp.tcl.eval('exit 5')
        threading.Thread(target=quitter).start()
        }
        puts "main waits"
        py exec {time.sleep(2)}
        puts NOT-REACHED
        """, 5, ["main waits", "atexit ran"],
        {"out.txt": "global-data", "local.txt": "local-data"}, False),
    "python-host-exit-under-a-function": ("python", """\
        import tclamp, atexit
        atexit.register(print, 'atexit ran')
        print('buffered before exit')
        def work():
            f = open('out.txt', 'w'); f.write('local-data')
            tclamp.Interp().eval('exit 3')
            print('NOT REACHED')
        work()
        """, 3, ["buffered before exit", "atexit ran"], {"out.txt": "local-data"}, False),
    "python-host-exit-from-a-thread": ("python", """\
        import tclamp, threading, atexit, time
        atexit.register(print, 'atexit ran')
        f = open('out.txt', 'w'); f.write('main-data')
        print('buffered')
        def worker():
            tclamp.tcl.eval('exit 4')
        threading.Thread(target=worker).start()
        time.sleep(30)
        print('NOT REACHED')
        """, 4, ["buffered", "atexit ran"], {"out.txt": "main-data"}, False),
}

_exit_runs = {}


def exit_case(name, tmp_path_factory):
    if name not in _exit_runs:
        host, script, *_ = EXIT_CASES[name]
        where = tmp_path_factory.mktemp(name)
        r = tclsh(where, script) if host == "tcl" else python(where, script)
        _exit_runs[name] = (r, where)
    return _exit_runs[name]


@pytest.mark.parametrize("name", list(EXIT_CASES))
def test_exit_with_python_on_the_stack_ends_with_its_code(name, tmp_path_factory):
    r, _ = exit_case(name, tmp_path_factory)
    _, _, rc, lines, _, _ = EXIT_CASES[name]
    assert_clean(r, rc)
    assert r.stdout.splitlines() == lines, r.report


@pytest.mark.parametrize("name", list(EXIT_CASES))
def test_exit_with_python_on_the_stack_flushes_files(name, tmp_path_factory):
    r, where = exit_case(name, tmp_path_factory)
    files = EXIT_CASES[name][4]
    assert {f: (where / f).read_text() for f in files} == files, r.report


def test_exit_from_three_tcl_threads_at_once(tmp_path):
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        py exec {import atexit; atexit.register(print, 'atexit ran'); g = open('out.txt','w'); g.write('main-data')}
        set threads {}
        foreach c {4 5 6} {
            lappend threads [thread::create [list apply {{path} {
                set ::auto_path $path; package require tclamp; thread::wait}} $auto_path]]
        }
        foreach t $threads c {4 5 6} {
            thread::send -async $t [list py exec "import tclamp, time; time.sleep(0.2); tclamp.tcl.eval('exit $c')"]
        }
        puts main
        vwait forever
    """)
    assert_no_crash(r)
    assert r.returncode in (4, 5, 6), r.report
    assert r.stdout.splitlines() == ["main", "atexit ran"], r.report
    assert (tmp_path / "out.txt").read_text() == "main-data", r.report


# The Thread package's exit handler releases each pool and returns while its
# workers are still deleting their interpreters and ending their threads;
# libraries' destructors run beside them corrupted the heap now and then.
# Each round: eight workers that used torch, the exit from the main thread
# or from a thread without tclamp.
@pytest.mark.parametrize("ending", ["exit 3", "thread::create {exit 3}; vwait forever"])
def test_exit_while_a_pools_workers_that_used_torch_end(ending, tmp_path):
    script = """\
        package require Thread
        set pool [tpool::create -minworkers 8 -maxworkers 8 -initcmd [list apply {{path} {
            set ::auto_path $path; package require tclamp
            torch::autocast -device cpu -dtype bfloat16 {
                py exec {import torch; torch.ones(4, 4) @ torch.ones(4, 4)}
            }}} $auto_path]]
        set job [tpool::post $pool {py exec {open('out.txt', 'w').write('worker-data')}}]
        tpool::wait $pool $job
        package require tclamp
        py exec {import atexit; atexit.register(print, 'atexit ran')}
        puts main
        ENDING
        """.replace("ENDING", ending)
    for round_ in range(4):
        r = tclsh(tmp_path, script)
        assert_clean(r, 3)
        assert r.stdout.splitlines() == ["main", "atexit ran"], f"round {round_}: {r.report}"
        assert (tmp_path / "out.txt").read_text() == "worker-data", r.report


def test_exit_from_two_python_threads_at_once(tmp_path):
    r = python(tmp_path, """\
        import tclamp, threading, atexit, time
        atexit.register(print, 'atexit ran')
        f = open('out.txt', 'w'); f.write('main-data')
        print('buffered')
        go = threading.Barrier(2)
        def worker(code):
            interp = tclamp.Interp()
            go.wait()
            interp.eval(f'exit {code}')
        for code in (4, 5):
            threading.Thread(target=worker, args=(code,)).start()
        time.sleep(30)
        print('NOT REACHED')
    """)
    assert_no_crash(r)
    assert r.returncode in (4, 5), r.report
    assert r.stdout.splitlines() == ["buffered", "atexit ran"], r.report
    assert (tmp_path / "out.txt").read_text() == "main-data", r.report


def test_exit_while_other_threads_use_python_and_handles(tmp_path):
    """Four Tcl threads make, call and release handles in a loop and call
    back into Tcl from Python; one of them exits from under Python.  Other
    threads may see "Python has been finalized" on their way out; nothing
    may crash, and the exit code and the data stand."""
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        py exec {import atexit; atexit.register(print, 'atexit ran'); g = open('out.txt', 'w'); g.write('data')}
        for {set i 0} {$i < 4} {incr i} {
            thread::create [list apply {{path i} {
                set ::auto_path $path; package require tclamp
                py exec {class O:
            def m(self, *a): return [self, a]}
                while 1 {
                    set h [py call O]
                    $h m x y
                    py exec {import tclamp; tclamp.tcl.eval('set ::n [expr {[incr ::n] % 50}]')}
                    rename $h {}
                    if {$i == 3 && [incr ::count] == 200} {
                        py exec {import tclamp; tclamp.tcl.eval('exit 7')}
                    }
                }
            }} $auto_path $i]
        }
        while 1 { py eval {[1, 2, 3]}; after 1; update }
    """)
    assert_no_crash(r)
    assert r.returncode == 7, r.report
    assert r.stdout.splitlines() == ["atexit ran"], r.report
    assert (tmp_path / "out.txt").read_text() == "data", r.report


@pytest.mark.parametrize("daemon", [True, False])
def test_exit_while_a_python_thread_waits_in_tcl(daemon, tmp_path):
    r = tclsh(tmp_path, f"""\
        package require tclamp
        py exec {{
        import threading, tclamp, atexit, time
        atexit.register(print, 'atexit ran')
        g = open('out.txt', 'w'); g.write('global-data')
        def waiter():
            tclamp.tcl.eval('vwait ::forever')
        threading.Thread(target=waiter, daemon={daemon}).start()
        time.sleep(0.3)
        }}
        exit 3
    """)
    assert_clean(r, 3)
    assert r.stdout.splitlines() == ["atexit ran"], r.report
    if not daemon:
        # (With a daemon thread in a function of __main__, plain Python too
        # leaves __main__'s objects unfinalized at its end.)
        assert (tmp_path / "out.txt").read_text() == "global-data", r.report


@pytest.mark.parametrize("ending", ["exit 6", "py exec {tclamp.tcl.eval('exit 6')}", ""])
def test_a_tclsh_whose_python_made_an_interpreter_ends_with_tcls_output(ending, tmp_path):
    """An interpreter made by Python in tclsh stacks Tcl's stdout to keep
    Python's output in order with it; Tcl's exit flushes stdout after
    Python has closed, and that flush wrote Python's out with no thread
    state: the process died (SIGSEGV), its output lost."""
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
        import tclamp
        kept = tclamp.Interp()
        print('python', kept.eval('expr 6*7'), end=' ')
        }
        puts -nonewline "tcl unflushed"
        %s
    """ % ending)
    assert_clean(r, 6 if ending else 0)
    assert r.stdout == "python 42 tcl unflushed", r.report


@pytest.mark.parametrize("printer", [
    "py exec {import atexit; atexit.register(lambda: print('X', end=''))}",
    "py exec {class Printer:\n    def __del__(self): print('X', end='')}\nset h [py call Printer]",
])
def test_what_python_prints_at_exit_comes_after_what_tcl_wrote_before(printer, tmp_path):
    """An atexit handler's or a released handle's print, at `exit`, comes
    after the text Tcl wrote before it and still held in its buffer."""
    r = tclsh(tmp_path, """\
        package require tclamp
        %s
        puts -nonewline A
        exit 3
    """ % printer)
    assert_clean(r, 3)
    assert r.stdout == "AX", r.report


def test_a_tcl_exit_from_an_atexit_handler_runs_the_handlers_once(tmp_path):
    """Python's end runs its atexit handlers; a Tcl `exit` in one of them
    ends the process with its code, and runs none of them again."""
    r = python(tmp_path, """\
        import atexit, tclamp
        runs = []
        def handler():
            runs.append(1)
            print('X%d' % len(runs), end='')
            tclamp.tcl.eval('puts -nonewline Y; exit 7')
        atexit.register(handler)
        tclamp.tcl.eval('puts -nonewline A')
    """)
    assert_clean(r, 7)
    assert r.stdout == "AX1Y", r.report


def test_a_tcl_exit_from_a_thread_that_an_atexit_handler_joins_runs_the_handlers_once(tmp_path):
    """Once Python's end runs the atexit handlers, another thread's `exit`
    runs none of them again (it ran the handler again, which then joined
    its own thread).  The thread is there before the end: Python 3.12
    starts none at its end."""
    r = python(tmp_path, """\
        import atexit, threading, tclamp
        told = threading.Event()
        def exits_when_told():
            told.wait()
            tclamp.tcl.eval('puts -nonewline T; exit 4')
        exits = threading.Thread(target=exits_when_told, daemon=True)
        exits.start()
        def handler():
            print('H', end='')
            told.set()
            exits.join()
        atexit.register(handler)
        tclamp.tcl.eval('puts -nonewline A')
    """)
    assert_clean(r, 4)
    assert r.stdout == "AHT", r.report


def test_a_tcl_exit_from_a_thread_that_pythons_end_waits_for_runs_the_handlers(tmp_path):
    """Python's end waits for its threads before it runs the atexit
    handlers: a thread's `exit` then runs them, once."""
    r = python(tmp_path, """\
        import atexit, threading, time, tclamp
        atexit.register(lambda: print('R', end=''))
        def exits_once_python_ends():
            while threading.main_thread().is_alive():
                time.sleep(0.01)
            tclamp.tcl.eval('puts -nonewline T; exit 5')
        threading.Thread(target=exits_once_python_ends).start()
        tclamp.tcl.eval('puts -nonewline A')
    """)
    assert_clean(r, 5)
    assert r.stdout == "ATR", r.report


def test_python_code_at_exit_that_calls_tcl(tmp_path):
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
        import atexit, tclamp
        def bye():
            print('atexit tcl:', tclamp.tcl.eval('set ::x [expr 6*7]'), flush=True)
            print('atexit py via tcl:', tclamp.tcl.eval('py eval 1+1'), flush=True)
        atexit.register(bye)
        class Releases:
            def __del__(self):
                tclamp.tcl.eval('puts "del puts"')
        }
        set r [py call Releases]
        exit 3
    """)
    assert_clean(r, 3)
    # Python's own order: atexit handlers, then the objects go.
    assert r.stdout.splitlines() == ["atexit tcl: 42", "atexit py via tcl: 2", "del puts"], r.report


def test_del_at_exit_that_calls_a_tclamp_command_is_told_the_process_is_exiting(tmp_path):
    """A handle's object released at exit calls a command that needs Python
    from __del__: Python still runs (the __del__ does), so the error says
    that the process is exiting, not that Python has been finalized."""
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
        import tclamp
        class Closer:
            def __del__(self):
                try:
                    tclamp.tcl.eval('torch::autocast_get_dtype cpu')
                except tclamp.TclError as error:
                    print(error.result, '|', error.errorcode, flush=True)
        }
        set c [py call Closer]
        exit 4
    """)
    assert_clean(r, 4)
    assert r.stdout.splitlines() == [
        "the process is exiting: Python takes no more calls from Tcl | TCLAMP EXITING"], r.report


def test_a_finalizer_of_pythons_end_that_uses_tclamp_tcl_is_told_the_process_is_exiting(tmp_path):
    """A module's object whose __del__ uses tclamp.tcl, released as Python
    ends after the interpreters Python made were deleted: no interpreter is
    made then (the error was an ImportError of Python's end)."""
    r = python(tmp_path, """\
        import tclamp
        class Closer:
            def __del__(self):
                try:
                    tclamp.tcl.eval('set x 1')
                except RuntimeError as error:
                    print(type(error).__name__, error, flush=True)
        closer = Closer()
        print(tclamp.tcl.eval('expr {6*7}'), flush=True)
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == [
        "42", "RuntimeError the process is exiting: it can make no Tcl interpreter"], r.report


def test_exit_called_by_a_del_while_exiting(tmp_path):
    """tclsh's exit runs Python's atexit handlers, then releases the
    handles' objects; a Tcl exit from a __del__ then ends the process with
    its code, as an exit in one of Tcl's exit handlers does, and what was
    written before it comes out."""
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
        import tclamp, atexit
        atexit.register(print, 'atexit ran')
        class Quitter:
            def __del__(self):
                print('quitting')
                tclamp.tcl.eval('puts -nonewline said; exit 5')
        }
        set q [py call Quitter]
        exit 2
    """)
    assert_clean(r, 5)
    assert r.stdout == "atexit ran\nquitting\nsaid", r.report


def test_atexit_handler_that_stops_a_worker_lets_it_finish(tmp_path):
    """A common shutdown: an atexit handler tells a worker thread to stop and
    joins it; the worker's last steps go through Tcl back into Python."""
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
        import threading, tclamp, atexit, time
        stop = threading.Event()
        def worker():
            while not stop.is_set():
                tclamp.tcl.eval('after 5; py eval 6*7')
            tclamp.tcl.eval('py exec {print("worker saved its state", flush=True)}')
        t = threading.Thread(target=worker)
        t.start()
        def shutdown():
            stop.set()
            t.join()
            print('worker stopped', flush=True)
        atexit.register(shutdown)
        time.sleep(0.2)
        }
        exit 3
    """)
    assert_clean(r, 3)
    assert r.stdout.splitlines() == ["worker saved its state", "worker stopped"], r.report
