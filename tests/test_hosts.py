"""Every host tclamp runs in, combined with every way its process ends.

A host is what runs the Tcl code that loaded tclamp: tclsh's main thread, a
Tcl worker thread only, a thread pool whose workers load tclamp at the same
moment, a Python program with tclamp.Interp, a Python program with
tkinter's Tcl, a C program that embeds Tcl, and wish on a virtual screen.
The same user code runs in each: it writes a file from Python and another
through an object handle, registers an atexit handler and prints from Tcl
and from Python.  Then it ends in one of five ways.  In every combination
the process must end by itself with the right exit code, print everything
(stdout is a pipe) and leave no file data unflushed.
"""
import re
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, TCLSH, WISH, compile_with_tcl, needs_setup, needs_tkinters_tcl, tcl_env

HOSTS_DIR = ROOT / "tests" / "hosts"

# The user's code, run where tclamp is loaded.  FILE_A and FILE_B are
# replaced by paths in the test's directory.
PAYLOAD = """\
package require tclamp
py exec {f = open(r"FILE_A", "w"); f.write("python-data")}
set ::writer [py call open {FILE_B} w]
$::writer write handle-data
py exec {import atexit; atexit.register(print, "atexit ran")}
puts "tcl says hello"
py exec {print("python says hello")}
"""

# How the user's code ends, and the exit code the process must have.
ENDINGS = {
    "normal": ("", 0),
    # exit with Python on the stack: the block's body runs under Python
    "exit-in-block": ("torch::autocast -device cpu {exit 3}", 3),
    # another thread ends the process while this one waits
    "exit-from-worker": ("package require Thread\n"
                         "thread::create {exit 5}\n"
                         "vwait ::forever", 5),
    # a Tcl thread ends itself from Tcl code that Python called, while a
    # frame of that thread is kept; Python goes on working here
    "thread-exit-under-python": (
        "package require Thread\n"
        "set t [thread::create -joinable {thread::wait}]\n"
        "thread::send $t [list set auto_path $::auto_path]\n"
        "thread::send $t {package require tclamp}\n"
        "catch {thread::send $t {py exec {import sys, tclamp\n"
        "kept_frame = sys._getframe()\n"
        "tclamp.tcl.eval('thread::exit')}}}\n"
        "thread::join $t\n"
        "py exec {print('python still works', kept_frame.f_code.co_name)}", 0),
    # exit while Python threads run: one sleeps, one waits for this thread
    "python-threads-alive": (
        "package require Thread\n"
        "py exec [string map [list MAIN [thread::id]] {\n"
        "import threading, time, tclamp\n"
        "threading.Thread(target=time.sleep, args=(600,)).start()\n"
        "def wait_for_main():\n"
        "    tclamp.tcl.eval('package require Thread; thread::send MAIN {set x 1}')\n"
        "threading.Thread(target=wait_for_main).start()\n"
        "time.sleep(0.3)\n"
        "}]\n"
        "exit 6", 6),
}

TCL_HOSTED = {"tclsh", "worker", "tpool", "embed", "wish"}


def for_host(host, code):
    """tkinter deletes Tcl's `exit` from its interpreter: there a Tcl
    worker thread (whose interpreter has one) ends the process instead,
    while this thread is where the ending puts it."""
    if host != "tkinter":
        return code
    return re.sub(r"(?<!thread::create {)\bexit (\d)",
                  r"package require Thread; thread::create {exit \1}; vwait ::forever", code)


def write_host(host, tmp_path, code, ending):
    """The files and the command line that run the user's `code` and then
    its `ending` in `host`."""
    payload = tmp_path / "payload.tcl"
    payload.write_text(code + (ending if host != "tpool" else "") + "\n")
    main_tcl = tmp_path / "main.tcl"
    if host in ("tclsh", "embed"):
        main_tcl.write_text(f"source {{{payload}}}\n")
        if host == "tclsh":
            return [TCLSH, str(main_tcl)]
        program = tmp_path / "embed"
        compile_with_tcl(program, HOSTS_DIR / "embed.c")
        return [str(program), str(main_tcl)]
    if host == "wish":
        main_tcl.write_text(f"wm withdraw .\nsource {{{payload}}}\ndestroy .\n")
        return ["xvfb-run", "-a", WISH, str(main_tcl)]
    if host == "worker":
        # The main thread never loads tclamp.
        main_tcl.write_text(
            "package require Thread\n"
            "set t [thread::create -joinable {thread::wait}]\n"
            "thread::send $t [list set auto_path $auto_path]\n"
            f"thread::send -async $t {{source {{{payload}}}}} ::done\n"
            "vwait ::done\nthread::release $t\nthread::join $t\n")
        return [TCLSH, str(main_tcl)]
    if host == "tpool":
        # Three workers load tclamp at the same moment; one runs the code.
        # The ending runs in the main thread while they live: `exit` in a
        # pool's job hangs in the Thread package itself, tclamp or not.
        main_tcl.write_text(
            "package require Thread\n"
            "set pool [tpool::create -minworkers 3 -maxworkers 3 -initcmd "
            "[list apply {{path} {set ::auto_path $path; package require tclamp}} $auto_path]]\n"
            f"set job [tpool::post $pool {{source {{{payload}}}}}]\n"
            "tpool::wait $pool $job\n"
            "tpool::get $pool $job\n"
            f"package require tclamp\n{ending}\n"
            "tpool::release $pool\n")
        return [TCLSH, str(main_tcl)]
    main_py = tmp_path / "main.py"
    if host == "interp":
        main_py.write_text("import tclamp\n"
                           "interp = tclamp.Interp()\n"
                           f"interp.eval(r'source {{{payload}}}')\n")
    elif host == "tkinter":
        main_py.write_text("import tkinter\n"
                           "tcl = tkinter.Tcl()\n"
                           f"tcl.eval(r'source {{{payload}}}')\n")
    return [sys.executable, str(main_py)]


HOSTS = ["tclsh", "worker", "tpool", "interp", pytest.param("tkinter", marks=needs_tkinters_tcl),
         "embed", "wish"]


@pytest.mark.parametrize("ending", list(ENDINGS))
@pytest.mark.parametrize("host", HOSTS)
def test_host_and_ending(host, ending, tmp_path):
    if host == "wish":
        needs_setup("Xvfb and Tk's wish", shutil.which("xvfb-run") and shutil.which(WISH))
    file_a, file_b = tmp_path / "a.txt", tmp_path / "b.txt"
    code, expected_rc = ENDINGS[ending]
    code = for_host(host, code)
    payload = PAYLOAD.replace("FILE_A", str(file_a)).replace("FILE_B", str(file_b))
    command = write_host(host, tmp_path, payload, code)
    started = time.monotonic()
    r = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=240,
                       stdin=subprocess.DEVNULL,
                       env=tcl_env(TCLAMP_PYTHON=sys.executable))
    report = (f"{host} / {ending}: exit {r.returncode} after {time.monotonic() - started:.1f} s\n"
              f"stdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}")
    assert r.returncode == expected_rc, report
    lines = r.stdout.splitlines()
    for line in ("tcl says hello", "python says hello", "atexit ran"):
        assert line in lines, report
    if host in TCL_HOSTED:       # Tcl's and Python's output in the order they ran
        assert lines.index("tcl says hello") < lines.index("python says hello"), report
    if ending == "thread-exit-under-python":
        assert "python still works deep" not in lines and "python still works <module>" in lines, report
    assert file_a.read_text() == "python-data", report
    assert file_b.read_text() == "handle-data", report
    for bad in ("Fatal Python error", "Segmentation", "Traceback", "terminate called"):
        assert bad not in r.stderr, report


# Python prints with its own buffer (PYTHONUNBUFFERED unset, as a user's
# shell has it), Tcl with its own: the lines must come out 1 to 8 all the same.
ORDER_HOSTS = {
    "interp": ("import tclamp\n"
               "interp = tclamp.Interp()\n"
               "run = interp.eval\n"),
    "tkinter": ("import tkinter\n"
                "run = tkinter.Tcl().eval\n"
                "run('package require tclamp')\n"),
}
ORDER_CODE = """\
print(1)
run("puts 2")
print(3)
run("puts -nonewline 4; py exec {print(5)}; puts 6")
print(7, end="")
run("puts { and 7}; py exec {print(8)}")
"""
IN_ORDER = "1\n2\n3\n45\n6\n7 and 7\n8\n"


def order_env():
    env = tcl_env(TCLAMP_PYTHON=sys.executable)
    env.pop("PYTHONUNBUFFERED", None)
    return env


@pytest.mark.parametrize("output", ["pipe", "file", "terminal"])
@pytest.mark.parametrize("host", [pytest.param(host, marks=needs_tkinters_tcl) if host == "tkinter"
                                  else host for host in ORDER_HOSTS])
def test_python_hosts_keep_the_written_order(host, output, tmp_path):
    program = tmp_path / "order.py"
    program.write_text(ORDER_HOSTS[host] + ORDER_CODE)
    assert written_output([sys.executable, str(program)], output, tmp_path) == IN_ORDER


def written_output(command, output, directory):
    """What `command` writes to stdout when stdout is a pipe, a file or a terminal."""
    if output == "terminal":
        import pexpect
        child = pexpect.spawn(command[0], command[1:], env=order_env(), cwd=str(directory),
                              encoding="utf-8", timeout=120)
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0, child.before
        # the terminal writes \r\n for \n, and Tcl's tty channel \r\r\n
        return child.before.replace("\r", "")
    if output == "file":
        with open(directory / "out.txt", "w") as out:
            subprocess.run(command, stdout=out, env=order_env(), cwd=directory, check=True,
                           timeout=120)
        return (directory / "out.txt").read_text()
    return subprocess.run(command, capture_output=True, text=True, env=order_env(),
                          cwd=directory, check=True, timeout=120).stdout
