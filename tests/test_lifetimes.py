"""Python-hosted interpreters' lifetimes, memory, sizes, a second
copy of the bridge, and output order.  Each case runs in its own process:
a crash must show as a failed test, not as a dead pytest."""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tclamp

from conftest import TCL9, TCLSH, needs_tkinters_tcl, run_tclsh, tcl_env


def run_python(code, prelude="", timeout=240):
    r = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env=tcl_env(TCLAMP_PYTHON=sys.executable),
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}"
    return r.stdout.splitlines()


RSS = """
import os
def rss_kib():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
"""


def test_last_reference_dropped_while_its_interpreter_runs():
    out = run_python("""
        import gc, tclamp
        holder = {"i": tclamp.Interp()}
        holder["i"].eval("proc drop {} {py exec {import __main__; __main__.holder.clear()}; set ::after_drop 1}")
        holder["i"].eval("after 0 drop")
        other = tclamp.Interp()
        for _ in range(5):
            other.eval("update")
            gc.collect()
        print("done", holder)
    """)
    assert out == ["done {}"]


def test_last_reference_dropped_in_another_thread():
    out = run_python("""
        import gc, threading, queue, tclamp
        made = queue.Queue()
        release = threading.Event()
        def owner():
            interp = tclamp.Interp()
            interp.eval("set h [py call object]")
            made.put(interp)
            del interp
            release.wait()
            # the owner thread uses the bridge again: deferred deletions run here
            print("owner", tclamp.tcl.eval("expr {6 * 7}"))
        t = threading.Thread(target=owner)
        t.start()
        interp = made.get()
        del interp
        gc.collect()
        release.set()
        t.join()
        # an interpreter whose thread has ended
        box = []
        t = threading.Thread(target=lambda: box.append(tclamp.Interp()))
        t.start(); t.join()
        print("dead thread's interp alive:", box[0].alive)
        box.clear(); gc.collect()
        print("done")
    """)
    assert out == ["owner 42", "dead thread's interp alive: False", "done"]


def test_interp_deleted_while_busy_waits():
    out = run_python("""
        import tclamp, __main__
        interp = tclamp.Interp()
        __main__.victim = interp
        del interp
        print(__main__.victim.eval("py exec {import __main__; del __main__.victim}; set still 1"))
    """)
    assert out == ["1"]


def test_interps_that_returned_handles_are_freed():
    # 200 interpreters, each holding a
    # 1 MiB object through a handle, after warm-up (the first imports torch).
    out = run_python(prelude=RSS, code="""
        import gc, tclamp
        def one():
            interp = tclamp.Interp()
            interp.eval("set h [py eval {bytearray(1 << 20)}]")
        for _ in range(5):
            one()
        gc.collect()
        before = rss_kib()
        for _ in range(200):
            one()
        gc.collect()
        print(rss_kib() - before)
    """)
    grown = int(out[-1])
    assert grown < 20 * 1024, f"200 interpreters left {grown} KiB behind"


def test_short_lived_threads_give_tcl_back():
    # Memory per short-lived Python thread
    # that used tclamp.tcl (each makes an interpreter and ends).
    out = run_python(prelude=RSS, code="""
        import threading, tclamp
        def use():
            tclamp.tcl.eval("set x [string repeat a 1000]")
        def run(n):
            for _ in range(n):
                t = threading.Thread(target=use)
                t.start(); t.join()
        run(30)
        before = rss_kib()
        run(300)
        print((rss_kib() - before) / 300)
    """)
    per_thread = float(out[-1])
    assert per_thread < 16, f"{per_thread:.1f} KiB per thread"


def test_sizes_past_tcl_8_6s_limit():
    """Tcl 8.6 counts lengths in int: a longer str or bytes is an
    OverflowError, and a longer result of Python a Tcl error, each naming
    the limit.  Tcl 9 counts in Tcl_Size: the same values go through."""
    out = run_python("""
        import tclamp
        big = "a" * (2**31)
        for value in (big, bytes(2**31)):
            try:
                print(tclamp.tcl.call("string", "length", value))
            except OverflowError as e:
                print(e)
        del big
        try:
            print(tclamp.tcl.eval('string length [py eval {"a" * (2**31)}]'))
        except OverflowError as e:      # the Python exception comes back as itself
            print(f"{type(e).__name__}: {e}")
        print(tclamp.tcl.eval("string length [py eval {'a' * 1000}]"))
    """)
    if TCL9:
        assert out == [str(2**31)] * 3 + ["1000"]
    else:
        assert out == ["str too long for Tcl: 2147483648 bytes (at most 2147483647)",
                       "bytes too long for Tcl: 2147483648 bytes (at most 2147483647)",
                       "OverflowError: str too long for Tcl: 2147483648 bytes (at most 2147483647)",
                       "1000"]


def test_characters_beyond_the_bmp_count_twice_against_tcl_8_6s_limit():
    """In Tcl 8.6 a character beyond the BMP is two code units, and up to
    six bytes of text: a str of 540 million emoji (1.6 billion bytes by three
    per character, under the limit) went in, and Tcl panicked (an abort)
    when it wrote its text.  It is an OverflowError naming its units' worst
    case; a str of the same length in the BMP is not refused (this str is
    2 GiB: the test runs where Tcl 8.6's limit is)."""
    if TCL9:
        pytest.skip("Tcl 9 has no 2 GiB limit")
    out = run_python("""
        import tclamp
        n = 540_000_000
        big = "\\U0001F600" * n
        try:
            print(tclamp.tcl.call("string", "bytelength", big))
        except OverflowError as e:
            print(e)
        del big
        print(tclamp.tcl.call("string", "length", "\\u00e9" * n))
    """)
    assert out == ["str too long for Tcl: 3240000000 bytes of Tcl's UTF-8 at most"
                   " (at most 2147483647)", "540000000"]


def test_second_copy_of_the_bridge_is_refused(tmp_path):
    bridge = Path(tclamp._bridge.__file__)   # the bridge this Tcl and Python use
    copy = tmp_path / "copy" / bridge.name
    copy.parent.mkdir()
    shutil.copy(bridge, copy)
    r = run_tclsh("package require tclamp\n"
                  f"puts [list [catch {{load {copy} Tclamp}} m o] $m [dict get $o -errorcode]]\n"
                  "puts [py eval 6*7]\n", tmp_path, TCLAMP_PYTHON=sys.executable)
    assert r.stdout.splitlines()[0] == (
        f'1 {{tclamp: this process already uses the bridge at "{bridge}", not "{copy}"}} '
        "{TCLAMP OTHER_BRIDGE}"), r.stdout + r.stderr
    assert r.stdout.splitlines()[1] == "42" and r.returncode == 0


@needs_tkinters_tcl
def test_second_copy_under_tkinter_is_refused(tmp_path):
    bridge = Path(tclamp._bridge.__file__)   # the bridge this Tcl and Python use
    copy = tmp_path / bridge.name
    shutil.copy(bridge, copy)
    out = run_python(f"""
        import tkinter
        tcl = tkinter.Tcl()
        print(tcl.eval("package require tclamp"))
        try:
            tcl.eval("load {copy} Tclamp")
        except tkinter.TclError as e:
            print("refused:", "already uses the bridge" in str(e))
        print(tcl.eval("py eval 6*7"))
    """)
    assert out[1:] == ["refused: True", "42"]


ORDER = "puts 1; py exec {print(2)}; puts 3; py exec {print(4)}; puts 5\n"


def test_output_order_through_a_pipe(tclsh):
    r = tclsh("package require tclamp\n" + ORDER)
    assert r.stdout.split() == ["1", "2", "3", "4", "5"]


def test_output_order_into_a_file(tmp_path):
    script = tmp_path / "order.tcl"
    script.write_text("package require tclamp\n" + ORDER)
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        subprocess.run([TCLSH, str(script)], stdout=f, stderr=subprocess.PIPE, timeout=120,
                       env=tcl_env(TCLAMP_PYTHON=sys.executable), check=True)
    assert out.read_text().split() == ["1", "2", "3", "4", "5"]


def test_stdout_and_stderr_order_into_one_file(tmp_path):
    script = tmp_path / "order.tcl"
    script.write_text("package require tclamp\n"
                      "puts a; py exec {import sys; print('b', file=sys.stderr)}; puts c\n"
                      "py exec {print('d')}; puts stderr e; puts f\n")
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        subprocess.run([TCLSH, str(script)], stdout=f, stderr=subprocess.STDOUT, timeout=120,
                       env=tcl_env(TCLAMP_PYTHON=sys.executable), check=True)
    assert out.read_text().split() == ["a", "b", "c", "d", "e", "f"]
