"""Output order through pipes and files, signals that end a tclsh running
Python, fork from Python, and tkinter handing a Python thread's calls to
its main thread.

Every script runs in a process of its own, with a time limit (processes.py),
so that a crash or a hang is a failed test and never a dead pytest.
"""
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import TCLSH, needs_setup, needs_tkinters_tcl
from processes import TIME_LIMIT, assert_clean, assert_no_crash, environment, python, run, tclsh


# --- output order, signals, fork -------------------------------------------

ORDER_SCRIPT = """\
package require tclamp
puts 1; py exec {print(2)}; puts 3; py exec {print(4)}; puts 5
puts -nonewline 6; py exec {print(7, end='')}; puts ""
puts stderr e1; py exec {import sys; print('e2', file=sys.stderr)}; puts stderr e3
py exec {import sys; sys.stdout.write('8\\n')}; puts 9
py exec {import os; os.write(1, b'10\\n')}; puts 11
py exec {import tclamp; print(12); tclamp.tcl.eval('puts 13'); print(14)}
puts 15
py exec {print(16); import os; os._exit(3)}
"""


def test_output_order_through_a_pipe_and_into_a_file(tmp_path):
    """Tcl's and Python's output in the order they ran, nested both ways,
    up to a Python os._exit that ends the process on the spot."""
    script = tmp_path / "order.tcl"
    script.write_text(ORDER_SCRIPT)
    r = run([TCLSH, str(script)], tmp_path)
    assert_no_crash(r)
    assert r.returncode == 3, r.report
    assert r.stdout.split() == ["1", "2", "3", "4", "5", "67", "8", "9", "10", "11", "12", "13",
                                "14", "15", "16"], r.report
    assert r.stderr.split() == ["e1", "e2", "e3"], r.report
    both = tmp_path / "both.txt"
    with open(both, "w") as f:
        p = subprocess.run([TCLSH, str(script)], stdout=f, stderr=subprocess.STDOUT,
                           cwd=tmp_path, timeout=TIME_LIMIT, env=environment())
    assert p.returncode == 3
    assert both.read_text().split() == ["1", "2", "3", "4", "5", "67", "e1", "e2", "e3", "8",
                                        "9", "10", "11", "12", "13", "14", "15", "16"]


@pytest.mark.parametrize("sig, loop", [
    (signal.SIGINT, "py exec {\nimport time\nwhile True:\n    time.sleep(0.01)\n}"),
    (signal.SIGTERM, "while 1 { py eval {sum(range(1000))} }"),
])
def test_signal_ends_tclsh_running_python_like_plain_tclsh(sig, loop, tmp_path):
    """Python installs no handlers in a Tcl host: the signal's default
    action ends the process, as it ends a plain tclsh."""
    script = tmp_path / "loop.tcl"
    script.write_text(f"package require tclamp\nputs ready\nflush stdout\n{loop}\n")

    def default_signals():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    p = subprocess.Popen([TCLSH, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp_path, env=environment(), preexec_fn=default_signals)
    try:
        assert p.stdout.readline() == "ready\n"
        time.sleep(0.3)
        p.send_signal(sig)
        _, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        pytest.fail(f"tclsh ignored {sig.name}")
    assert p.returncode == -sig, err
    assert err == ""


def test_fork_from_python_child_exits_and_parent_goes_on(tmp_path):
    """A forked child (of a process with a Tcl worker thread) uses Python
    and Tcl, runs an event loop and exits with its own code; the parent
    goes on."""
    r = tclsh(tmp_path, """\
        package require Thread
        package require tclamp
        set t [thread::create {thread::wait}]
        thread::send $t [list set auto_path $auto_path]
        thread::send $t {package require tclamp; py eval 1}
        puts "parent before"
        py exec {
        import os, tclamp
        pid = os.fork()
        if pid == 0:
            print('child python', flush=True)
            print('child tcl', tclamp.tcl.eval('after 10 {set ::x 42}; vwait ::x; set ::x'), flush=True)
            tclamp.tcl.eval('exit 3')
        _, status = os.waitpid(pid, 0)
        print('child status', os.waitstatus_to_exitcode(status), flush=True)
        }
        puts "parent after [thread::send $t {py eval 6*7}]"
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == ["parent before", "child python", "child tcl 42",
                                     "child status 3", "parent after 42"], r.report


# Python 3.12 on warns of a fork in a process with threads.
QUIET_FORK = ("-W", "ignore:This process:DeprecationWarning")


def test_fork_leaves_the_forking_threads_interpreters_to_the_child(tmp_path):
    """Python's fork clears the other threads' states on the forking thread,
    in the child: a state's guard freed there (its thread made an
    interpreter) leaves the forking thread's interpreters and Tcl data
    alone; the child's tclamp.tcl, a kept Interp and a new one work."""
    r = python(tmp_path, """\
        import os, threading, tclamp
        kept = tclamp.Interp()
        kept.eval('set y 5')
        ready, stop = threading.Event(), threading.Event()
        def worker():
            tclamp.tcl.eval('set x 1'); ready.set(); stop.wait()
        t = threading.Thread(target=worker, daemon=True)
        t.start(); ready.wait()
        pid = os.fork()
        if pid == 0:
            try:
                print('child', tclamp.tcl.eval('expr 2'), kept.alive, kept.eval('set y'),
                      tclamp.Interp().eval('expr 3'), flush=True)
            except BaseException as e:
                print('child', repr(e), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        stop.set(); t.join()
        print('parent', os.waitstatus_to_exitcode(status), tclamp.tcl.eval('expr 4'), kept.eval('set y'))
    """, options=QUIET_FORK)
    assert_clean(r)
    assert r.stdout == "child 2 True 5 3\nparent 0 4 5\n", r.report


def test_a_fork_childs_new_thread_gets_no_interpreter_of_a_thread_it_lacks(tmp_path):
    """In the child, a Python thread's interpreters are no thread's: a
    thread the child starts, which glibc gives that thread's id (its stack
    is free), does not take them over (deleting them on its way in
    panicked Tcl: "Tcl_AsyncDelete: cannot find async handler")."""
    r = python(tmp_path, """\
        import os, threading, tclamp
        ready, stop, held = threading.Event(), threading.Event(), []
        def worker():
            held.append(tclamp.Interp()); tclamp.tcl.eval('set secret 1')
            ready.set(); stop.wait()
        t = threading.Thread(target=worker, daemon=True)
        t.start(); ready.wait()
        pid = os.fork()
        if pid == 0:
            out = []
            def in_child():
                out.append(tclamp.tcl.eval('info exists secret'))
                try:
                    held[0].eval('expr 1')
                except RuntimeError as e:
                    out.append(str(e))
            c = threading.Thread(target=in_child)
            c.start(); c.join()
            print('child', out, held[0].alive, flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        stop.set(); t.join()
        print('parent', os.waitstatus_to_exitcode(status))
    """, options=QUIET_FORK)
    assert_clean(r)
    assert r.stdout == ("child ['0', 'a Tcl interpreter can only be used from the thread that "
                        "created it'] True\nparent 0\n"), r.report


@needs_tkinters_tcl
def test_tkinter_marshals_py_calls_from_a_python_thread(tmp_path):
    """tkinter runs a Python thread's Tcl calls on the main thread, inside
    mainloop: tclamp must take the GIL there as tkinter hands it over."""
    needs_setup("Xvfb", shutil.which("xvfb-run"))
    r = run(["xvfb-run", "-a", sys.executable, "-c", textwrap.dedent("""\
        import tkinter, threading
        root = tkinter.Tk(); root.withdraw()
        root.tk.eval('package require tclamp')
        results = []
        f = open('out.txt', 'w')
        def worker():
            for i in range(30):
                results.append(root.tk.call('py', 'eval', f'{i}*2'))
            root.tk.call('py', 'exec', 'import tclamp; r = tclamp.tcl.eval("expr 1+2")')
            results.append(root.tk.call('py', 'eval', 'r'))
            results.append(root.tk.call('py', 'call', 'object').startswith('::py::obj'))
            f.write('worker-data')
            root.after(0, root.quit)
        threading.Thread(target=worker).start()
        root.mainloop()
        print(results[:3], results[-2:], len(results))
        root.destroy()
    """)], tmp_path)
    assert_clean(r)
    assert r.stdout == "[0, 2, 4] ['3', True] 32\n", r.report
    assert (tmp_path / "out.txt").read_text() == "worker-data"
