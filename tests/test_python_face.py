"""tclamp with Python as the host: tclamp.tcl, Interp, TclError."""
import gc
import os
import pickle
import subprocess
import sys
import threading
import time

import pytest
import torch

import tclamp
from tclamp import TclError, tcl
from conftest import ROOT, TCL_VERSION, reset_autocast, tcl_length


@pytest.fixture(autouse=True)
def autocast_off():
    yield
    reset_autocast()


def test_eval_in_process_interpreter():
    assert tcl.eval("set x 5; expr {$x * 2}") == "10"
    assert tcl.eval("package present tclamp") == tclamp.__version__


def test_call_converts_arguments():
    assert tcl.call("list", 1, "a b", [2, [3, "c d"]], None, True) == "1 {a b} {2 {3 {c d}}} {} 1"
    assert tcl.call("dict", "get", {"k": {"n": 2.5}}, "k", "n") == "2.5"
    assert tcl.call("expr", 2**100, "+", 1) == str(2**100 + 1)


@pytest.mark.parametrize("number", [
    2**63 - 1, 2**63, -2**63 - 1, 2**64 - 1, 2**64, -10**30,
    10**(sys.get_int_max_str_digits() - 1), -10**(sys.get_int_max_str_digits() + 5)],
    ids=["2**63-1", "2**63", "-2**63-1", "2**64-1", "2**64", "-10**30", "at-digit-limit",
         "past-digit-limit"])
def test_ints_of_any_size_come_back_as_ints(number):
    assert tcl.call("set", "big", number, result=object) == number
    assert tcl.call("list", number, 7, result=list) == [number, 7]
    assert tcl.call("set", "big", result=object) == number     # what Tcl kept
    assert type(tcl.call("set", "big", result=object)) is int
    assert tcl.eval("expr {$big - 1}", result=int) == number - 1


@pytest.mark.parametrize("text", ["a\0b", "héllo wörld", "\U0001F600 astral", "中文 ✓", ""])
def test_strings_round_trip(text):
    assert tcl.call("set", "roundtrip", text) == text
    assert tcl.eval("string length $roundtrip") == str(tcl_length(text))


@pytest.mark.parametrize("name", ["made\U0001F600", "made\0nul", "made\u00e9"])
def test_a_command_named_by_any_str_is_called_by_that_name(name):
    """Interp.create_command names the command as a script spells it: on
    Tcl 8.6 a character beyond the BMP was written as Python's UTF-8 (the
    command was listed but `invalid command name` to every call), and a NUL
    was refused (embedded null character)."""
    interp = tclamp.Interp()
    try:
        interp.create_command(name, lambda *words: f"{name}: {list(words)}")
        assert interp.call("info", "commands", "made*") == interp.call("list", name)
        assert interp.call(name, "a") == f"{name}: ['a']"
        assert interp.eval(f"{{{name}}} b") == f"{name}: ['b']"
    finally:
        interp.delete()


def test_tcl_error_fields():
    with pytest.raises(TclError) as info:
        tcl.eval("proc fails {} {error oops {} {MY CODE {with space}}}; fails")
    e = info.value
    assert (e.result, e.errorcode, str(e)) == ("oops", "MY CODE {with space}", "oops")
    assert e.errorinfo.startswith("oops\n    while executing\n\"error oops")


def test_errors_survive_pickling():
    """As a worker's exception does (multiprocessing).  UsageError, whose
    args are only its message, failed to unpickle: __init__ wants kind and
    message."""
    with pytest.raises(TclError) as info:
        tcl.eval("proc fails {} {error oops {} {MY CODE}}; fails")
    again = pickle.loads(pickle.dumps(info.value))
    assert vars(again) == vars(info.value) and str(again) == "oops"
    usage = pickle.loads(pickle.dumps(tclamp.UsageError("WRONG_ARGS", "wrong # args", "x", 1)))
    assert (usage.kind, usage.message, usage.details, str(usage)) == (
        "WRONG_ARGS", "wrong # args", ("x", 1), "wrong # args")


class FramedError(TclError):
    """Gives its own errorstack, read-only, as subclasses did before
    TclError had one."""

    @property
    def errorstack(self):
        return "CALL {framed frame}"


def test_subclass_with_errorstack_property():
    """Making one failed: TclError.__init__ set errorstack, and the property
    has no setter.  The bridge reads the property when the error goes into
    Tcl, and sets errorstack on the TclErrors it makes."""
    made = FramedError("framed", "FRAMED 1")
    assert (made.result, made.errorcode, made.errorstack) == ("framed", "FRAMED 1",
                                                               "CALL {framed frame}")
    again = pickle.loads(pickle.dumps(made))
    assert (type(again), again.result, again.errorstack) == (FramedError, "framed",
                                                             "CALL {framed frame}")

    def raise_framed():
        raise FramedError("framed", "FRAMED 1")
    sys.modules["__main__"].__dict__["raise_framed"] = raise_framed
    tcl.eval("proc framed {} { py call raise_framed }")
    assert tcl.eval("list [catch framed m o] $m [dict get $o -errorcode] "
                    "[dict get $o -errorstack]") == \
        "1 framed {FRAMED 1} {CALL {framed frame} CALL framed}"
    with pytest.raises(TclError) as info:
        tcl.eval("framed")
    assert (type(info.value), info.value.errorstack) == (TclError,
                                                         "CALL {framed frame} CALL framed")
    assert (TclError("plain").errorstack, TclError("set", errorstack="CALL x").errorstack) == (
        "", "CALL x")


def test_usage_error_from_python():
    with pytest.raises(TclError) as info:
        tcl.eval("torch::autocast_disable cpu cuda")
    assert info.value.result == "Usage: torch::autocast_disable [device_type]"
    assert info.value.errorcode == "TCLAMP USAGE"


def test_python_error_inside_tcl_comes_back_as_itself():
    with pytest.raises(ValueError, match=r"invalid literal for int\(\) with base 10: 'x'"):
        tcl.eval("py eval {int('x')}")
    # Tcl saw it as a Tcl error, with its details
    assert tcl.eval("catch {py eval {int('x')}} m o; dict get $o -errorcode") == \
        "PYTHON ValueError {invalid literal for int() with base 10: 'x'}"
    assert "Python traceback" in tcl.eval("dict get $o -errorinfo")


def test_python_exception_through_tcl_is_the_same_object():
    """A KeyError raised in Python, carried by a Tcl error through a proc
    and a catch that throws it on, is caught in Python as itself."""
    raised = KeyError("k1")

    def fail():
        raise raised
    sys.modules["__main__"].__dict__["fail"] = fail
    tcl.eval("proc pass_on {} { if {[catch {py call fail} m o]} { return -options $o $m } }")
    with pytest.raises(KeyError) as info:
        tcl.eval("pass_on")
    assert info.value is raised
    assert info.value.__traceback__ is not None
    # a Tcl error of the script's own, after catching it, is a TclError
    with pytest.raises(TclError) as info:
        tcl.eval("catch {py call fail}; error other {} {MINE 1}")
    assert (info.value.result, info.value.errorcode) == ("other", "MINE 1")
    # the torch:: commands' usage errors stay TclError, with their errorCode
    with pytest.raises(TclError) as info:
        tcl.eval("torch::autocast_enable nowhere")
    assert info.value.errorcode == "TCLAMP INVALID_VALUE -device_type nowhere"


def test_tcl_error_through_python_and_back_keeps_errorcode():
    tcl.eval("proc inner {} {error deep {} {DEEP 1}}")
    sys.modules["__main__"].__dict__["reenter"] = lambda: tcl.eval("inner")
    with pytest.raises(TclError) as info:
        tcl.eval("py call reenter")
    assert (info.value.result, info.value.errorcode) == ("deep", "DEEP 1")


def test_break_and_return_at_top_level():
    assert tcl.eval("return -level 0 fine") == "fine"
    with pytest.raises(TclError, match='invoked "break" outside of a loop'):
        tcl.eval("break")


def test_no_leak_of_tclerror_class():
    def fail_many(times):
        for _ in range(times):
            try:
                tcl.eval("error x")
            except TclError:
                pass
        gc.collect()
        return sys.getrefcount(TclError)

    before = fail_many(10)
    assert fail_many(2000) == before


def test_commands_set_torch_state():
    assert tcl.eval("torch::autocast_enable cpu float16") == "autocast enabled"
    assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16
    a = torch.ones(4, 4)
    assert (a @ a).dtype == torch.float16
    torch.set_autocast_dtype("cpu", torch.bfloat16)
    assert tcl.eval("torch::autocastGetDtype cpu") == "bfloat16"


def test_objects_go_to_tcl_as_handles():
    class Counter:
        n = 0

        def bump(self, by):
            self.n += int(by)
            return self.n

    counter = Counter()
    handle = tcl.call("set", "counter", counter)
    assert handle.startswith("::py::obj")
    assert tcl.eval("$counter bump 2; $counter bump 3") == "5"
    assert counter.n == 5
    count = tcl.interp.handle_count
    tcl.eval("py release $counter")
    assert tcl.interp.handle_count == count - 1


def test_separate_interpreters():
    a, b = tclamp.Interp(), tclamp.Interp()
    a.eval("set v a")
    b.eval("set v b")
    assert (a.eval("set v"), b.eval("set v")) == ("a", "b")
    a.delete()
    assert not a.alive and b.alive
    with pytest.raises(RuntimeError, match="deleted"):
        a.eval("set v")


def test_current_interpreter_is_the_caller():
    b = tclamp.Interp()
    b.eval("set who b")
    sys.modules["__main__"].__dict__["who_calls"] = lambda: tcl.eval("set who")
    assert b.eval("py call who_calls") == "b"


def test_interpreter_is_bound_to_its_thread():
    interp = tcl.interp
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, interp.eval, "set x")))
    thread.start()
    thread.join()
    assert "thread that created it" in str(errors[0].value)


def test_python_threads_have_their_own_interpreter_and_autocast_state():
    results = {}
    # The three run at once, and their interpreters' ids are taken while
    # all three live (a loaded machine could otherwise run them one after
    # another, and an ended thread's id be given again).
    together = threading.Barrier(3)

    def work(dtype):
        tcl.eval(f"torch::autocast_enable cpu {dtype}")
        a = torch.ones(4, 4)
        seen = set()
        together.wait(timeout=120)
        for _ in range(200):
            seen.add(tcl.eval("torch::autocast_get_dtype cpu"))
            seen.add(str((a @ a).dtype))
        results[dtype] = (seen, id(tcl.interp))
        together.wait(timeout=120)

    threads = [threading.Thread(target=work, args=(d,)) for d in ("float16", "bfloat16", "float32")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for dtype, (seen, _) in results.items():
        assert seen == {dtype, f"torch.{dtype}"}
    assert len({interp for _, interp in results.values()}) == 3
    assert not torch.is_autocast_enabled("cpu")


def test_interp_rejects_arguments():
    with pytest.raises(TypeError):
        tclamp.Interp("x")


def test_interpreter_deleted_from_inside_its_own_eval():
    doomed = tclamp.Interp()
    sys.modules["__main__"].__dict__["doomed"] = doomed
    try:
        doomed.eval("py exec {doomed.delete()}; set after 1")
    except TclError:
        pass
    assert not doomed.alive
    with pytest.raises(RuntimeError, match="deleted"):
        doomed.eval("set after")
    assert tcl.eval("expr {1 + 1}") == "2"


def test_cancel_with_nothing_running_stops_nothing():
    interp = tclamp.Interp()
    interp.cancel()
    threading.Thread(target=interp.cancel).start()
    assert interp.eval("expr {6 * 7}") == "42"
    timer = threading.Timer(0.3, interp.cancel)
    timer.start()
    with pytest.raises(TclError) as info:
        interp.eval("while 1 {}")
    assert (info.value.result, info.value.errorcode) == (
        "eval unwound", "TCL CANCEL IUNWIND {eval unwound}")
    assert interp.eval("expr {6 * 7}") == "42"


def test_a_cancel_leaves_the_child_interpreters_usable():
    """Tcl's cancel marks every child interpreter too, and a child that ran
    nothing since failed each later command with `eval unwound` (at the
    tclamp prompt: `interp create c`, a loop stopped by Ctrl-C, then any
    `c eval`)."""
    interp = tclamp.Interp()
    interp.eval("interp create c; interp create {c d}")

    def cancel_once_running():
        while interp.evaluations == 0:
            time.sleep(0.01)
        interp.cancel()

    canceller = threading.Thread(target=cancel_once_running)
    canceller.start()
    with pytest.raises(TclError, match="^eval unwound$"):
        interp.eval("while 1 {}")
    canceller.join()
    assert interp.eval("c eval {set a 1}") == "1"
    assert interp.eval("c eval {set a 2}") == "2"
    assert interp.eval("interp eval {c d} {set b 3}") == "3"
    assert interp.eval("c eval {d eval {set b 4}}") == "4"


def cancel_a_loop(interp, stop=None):
    """Runs `while 1 {}` in interp and stops it from another thread, with
    Interp.cancel, or with `stop`; what the evaluation raised."""
    def stop_once_running():
        while interp.evaluations == 0:
            time.sleep(0.01)
        (stop or interp.cancel)()

    stopper = threading.Thread(target=stop_once_running)
    stopper.start()
    try:
        interp.eval("while 1 {}")
    except BaseException as error:     # TclError, KeyboardInterrupt
        return error
    finally:
        stopper.join()


def test_a_cancel_leaves_the_grandchildren_usable_too():
    """The children's marks were taken down by running `interp children` in
    each child: there Tcl's unwinding mark (which Tcl_Canceled leaves up)
    failed that command, so the grandchildren were never reached, and
    `interp eval {c d}` failed with `eval unwound`, again and again."""
    interp = tclamp.Interp()
    interp.eval("interp create c; interp create {c d}; interp create {c d e}")
    error = cancel_a_loop(interp)
    assert isinstance(error, TclError) and str(error) == "eval unwound"
    assert interp.eval("interp eval {c d} {set b 1}") == "1"
    assert interp.eval("interp eval {c d} {set b 2}") == "2"
    assert interp.eval("interp eval {c d e} {set b 3}") == "3"
    assert interp.eval("c eval {set a 1}") == "1"


@pytest.mark.parametrize("stop", ["cancel", "interrupt"])
def test_taking_down_the_cancel_marks_runs_no_code_of_a_child(stop):
    """The take-down ran `::interp children` in each child, where the child's
    own code could answer: a safe child (untrusted code) that redefined
    `interp`, or traced it, ran there after Interp.interrupt, so it could
    hang the call for good (`proc interp args {while 1 {}}`), recurse
    without end (an `interp` that makes a new child each time), or delete
    itself through an alias as it ran (Tcl panics: `DeleteInterpProc called
    with active evals`).  The children are found from the interpreter
    itself now, and no command of theirs runs."""
    interp = tclamp.Interp()
    interp.eval("""interp create -safe s
        s eval {
            interp create d
            rename interp real
            proc interp args {incr ::walked; real {*}$args}
            proc traced args {incr ::traced}
            trace add execution real enter traced
        }""")
    error = cancel_a_loop(interp, interp.cancel if stop == "cancel" else interp.interrupt)
    assert isinstance(error, TclError if stop == "cancel" else KeyboardInterrupt), repr(error)
    assert interp.eval("s eval {list [info exists walked] [info exists traced]}") == "0 0"
    assert interp.eval("interp eval {s d} {set b 1}") == "1"


def test_a_child_that_deletes_itself_when_asked_for_its_children_is_no_crash():
    """Tcl panicked (abort) when the take-down after Interp.interrupt ran
    the child's `interp`, and that deleted the child through an alias."""
    script = """if 1:
        import threading, time, tclamp
        interp = tclamp.Interp()
        interp.eval("interp create s; interp alias s kill {} interp delete s;"
                    "s eval {rename interp real; proc interp args {kill; return}}")
        def stop():
            while interp.evaluations == 0:
                time.sleep(0.01)
            interp.interrupt()
        threading.Thread(target=stop).start()
        try:
            interp.eval("while 1 {}")
        except KeyboardInterrupt:
            print("KeyboardInterrupt", interp.eval("interp children"))
        """
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout) == (0, "KeyboardInterrupt s\n"), r.stderr


def test_a_cancel_as_a_job_ends_never_stops_the_next():
    """A watchdog whose timer fires just as its job ends."""
    interp = tclamp.Interp()
    stopped = 0
    for n in range(300):
        timer = threading.Timer(0.0005 * (n % 7), interp.cancel)
        timer.start()
        try:
            interp.eval("after 1")
        except TclError:
            stopped += 1
        timer.join()
        assert interp.eval("set next ok") == "ok", f"job {n}"
    assert 0 < stopped < 300


def test_eval_file_runs_a_file_as_tclsh_and_a_cancel_there_ends_with_it(tmp_path):
    """Interp.eval_file, tclamp's script mode: at level 0, as tclsh runs
    its script, so errorInfo keeps a loop body's frame.  Its commands run
    as no command, whose return to level 0 would lift a cancel: the next
    evaluation failed with `eval unwound` too."""
    interp = tclamp.Interp()
    (tmp_path / "loop.tcl").write_text("while 1 {\n    error boom\n}\n")
    with pytest.raises(TclError) as info:
        interp.eval_file(str(tmp_path / "loop.tcl"))
    assert info.value.errorinfo == (
        'boom\n    while executing\n"error boom"\n    ("while" body line 2)\n'
        '    invoked from within\n"while 1 {\n    error boom\n}"\n'
        f'    (file "{tmp_path / "loop.tcl"}" line 1)')
    (tmp_path / "spins.tcl").write_text("set before 1\nwhile 1 {}\n")
    timer = threading.Timer(0.3, interp.cancel)
    timer.start()
    with pytest.raises(TclError, match="eval unwound"):
        interp.eval_file(str(tmp_path / "spins.tcl"))
    assert interp.eval("set before") == "1"
    assert interp.call("list", "next") == "next"
    (tmp_path / "latin1.tcl").write_bytes(b'return "\xe9"\n')
    assert interp.eval_file(str(tmp_path / "latin1.tcl"), "iso8859-1") == "\u00e9"
    # Called by Python code that a proc runs, it runs in that proc's frame,
    # as `source` there would (docs/py.md).
    (tmp_path / "level.tcl").write_text("list [info level] [info exists local]\n")
    interp.eval("package require tclamp; py exec {import tclamp}")
    interp.eval("proc p {path} {set local 1; py call tclamp.tcl.interp.eval_file $path}")
    level = str(tmp_path / "level.tcl")
    assert (interp.call("p", level), interp.eval_file(level)) == ("1 1", "0 0")


def test_eval_file_takes_a_path_as_open_does(tmp_path):
    """A pathlib.Path (or bytes) names the file, as for open(); it was a
    TypeError, and a NUL in the name reached Tcl as `invalid argument`."""
    interp = tclamp.Interp()
    script = tmp_path / "where.tcl"
    script.write_text("info script\n")
    assert interp.eval_file(script) == str(script)
    assert interp.eval_file(os.fsencode(script), encoding="utf-8") == str(script)
    with pytest.raises(TypeError, match="os.PathLike"):
        interp.eval_file(None)
    with pytest.raises(ValueError, match="embedded null"):
        interp.eval_file(f"{script}\0x")
    # A byte that is no UTF-8 (a lone surrogate once decoded) has no Tcl
    # text: Tcl wrote the surrogate as three bytes of its own and ran the
    # file of that name instead.
    (tmp_path / os.fsdecode(b"\xed\xb3\xbf.tcl")).write_text("set x other-file\n")
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        interp.eval_file(tmp_path / os.fsdecode(b"\xff.tcl"))
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        interp.eval_file(os.fsencode(tmp_path) + b"/\xff.tcl")


def test_eval_file_refuses_an_empty_encoding_name_on_each_tcl(tmp_path):
    """encoding='' read the file as bytes on Tcl 8.6 and was Tcl 9's error
    `unknown encoding "": No longer supported` (tclsh's `source -encoding
    ""` does the same on each).  Now both refuse it as an unknown name is
    refused, before anything runs: the file does not run, and the
    interpreter's ::errorCode and ::errorInfo stay as they were."""
    interp = tclamp.Interp()
    script = tmp_path / "ran.tcl"
    script.write_bytes(b'set ::ran 1\nreturn "\xe9"\n')
    interp.eval("set ::errorCode before; set ::errorInfo before")
    with pytest.raises(TclError) as info:
        interp.eval_file(script, encoding="")
    assert (info.value.result, info.value.errorcode, info.value.errorinfo, info.value.code) == (
        EMPTY_ENCODING, "TCL LOOKUP ENCODING {}", EMPTY_ENCODING, 1)
    assert interp.eval("list [info exists ::ran] $::errorCode $::errorInfo") == "0 before before"
    # As any name Tcl does not know is refused (by Tcl, whose error it is)
    with pytest.raises(TclError) as info:
        interp.eval_file(script, encoding="no-such")
    assert (info.value.result, info.value.errorcode) == (
        'unknown encoding "no-such"', "TCL LOOKUP ENCODING no-such")
    assert interp.eval("info exists ::ran") == "0"
    assert interp.eval_file(script, encoding="iso8859-1") == "\u00e9"


EMPTY_ENCODING = ('unknown encoding "": an empty name names none (leave encoding out for '
                  "Tcl's default; iso8859-1 reads each byte as the character of that code)")


def test_cancel_from_another_thread_while_the_interpreter_goes():
    for _ in range(200):
        interp = tclamp.Interp()
        done = threading.Event()

        def cancel_until_done(interp=interp):
            while not done.is_set():
                interp.cancel()

        canceller = threading.Thread(target=cancel_until_done)
        canceller.start()
        interp.delete()
        done.set()
        canceller.join()
        assert not interp.alive


# Python code under Tcl that runs Tcl again: the nested evaluation that
# Interp.interrupt (Ctrl-C under the tclamp prompt's py interact) stops.
NESTED = """py exec {
def nested(script):
    try:
        return tclamp.tcl.eval(script)
    except KeyboardInterrupt:
        return 'KeyboardInterrupt'
}"""


def nesting_interp():
    interp = tclamp.Interp()
    interp.eval("package require tclamp; py exec {import tclamp}; interp create child")
    interp.eval(NESTED)
    return interp


def test_interrupt_stops_the_innermost_evaluation_alone_and_leaves_no_cancel():
    """Interp.interrupt stops the innermost evaluation that Python started
    (its call raises KeyboardInterrupt), and the Tcl around it goes on.
    Tcl's cancel is one-shot and marks the children too: a mark that no
    command looked at (sent as the evaluation ended) stopped the next
    command of the Tcl that called Python, or of a child interpreter."""
    interp = nesting_interp()
    interp.create_command("interrupt", lambda: interp.interrupt())
    assert interp.eval("list [py call nested {interrupt; set y 2}] [set after 1] "
                       "[child eval {set a 1}]") == "KeyboardInterrupt 1 1"
    # With only the outer evaluation running, interrupt(1) sends nothing.
    interp.create_command("outside", lambda: interp.interrupt(1))
    assert interp.eval("list [outside] [set after 2]") == "0 2"
    assert interp.evaluations == 0 and not interp.interrupt()
    assert interp.eval("list [set next ok] [child eval {set a 2}]") == "ok 2"


def test_an_interrupt_with_nothing_running_sends_nothing_whatever_outside_says():
    """interrupt(outside) with outside below 0 and nothing running sent
    Tcl's cancel to an idle interpreter (and said it had): the next,
    unrelated, evaluation failed with `eval canceled`."""
    interp = tclamp.Interp()
    assert interp.interrupt(-1) is False
    assert interp.eval("set a 1") == "1"
    interp.create_command("inner", lambda: interp.interrupt(-5))
    with pytest.raises(KeyboardInterrupt):      # one runs: it stops
        interp.eval("inner; set b 2")
    assert interp.eval("set a 2") == "2"


def test_interrupt_from_another_thread_stops_a_nested_tcl_loop():
    interp = nesting_interp()
    done = threading.Event()

    def stop():
        try:
            while interp.evaluations < 2 and not done.is_set():    # the outer one, the nested one
                done.wait(0.01)
            interp.interrupt(1)
        finally:
            if not done.wait(60):       # it did not stop: end the test, not hang it
                interp.cancel()

    thread = threading.Thread(target=stop)
    thread.start()
    try:
        result = interp.eval("list [py call nested {while 1 {}}] [incr n]")
    finally:
        done.set()
        thread.join()
    assert result == "KeyboardInterrupt 1"
    assert interp.eval("list [incr n] [child eval {incr n}]") == "2 1"


def test_an_interrupt_as_a_nested_job_ends_never_stops_the_next():
    """A Ctrl-C that comes just as the nested evaluation ends, after Tcl's
    last look: its mark stopped the next command that ran (at the prompt,
    Python's next line).  A thread that runs Python meanwhile makes the
    end wait for the GIL, as it waits at the prompt while the watcher
    thread sends the interrupt."""
    interp = tclamp.Interp()
    interp.eval("interp create child")
    outcomes = set()

    def jobs():
        for n in range(300):
            timer = threading.Timer(0.0005 * (n % 7), interp.interrupt, (1,))
            timer.start()
            try:
                outcomes.add(interp.eval("after 1"))
            except KeyboardInterrupt:
                outcomes.add("KeyboardInterrupt")
            finally:
                timer.join()
            assert interp.eval("list [set next ok] [child eval {set a ok}]") == "ok ok", n

    done = threading.Event()

    def spin():
        while not done.is_set():
            pass

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    threading.Thread(target=spin, daemon=True).start()
    try:
        interp.create_command("jobs", jobs)
        assert interp.eval("list [jobs] [set after ok]") == "{} ok"
    finally:
        done.set()
        sys.setswitchinterval(interval)
    assert outcomes == {"", "KeyboardInterrupt"}


@pytest.mark.parametrize("code, kind", [("raise KeyboardInterrupt", KeyboardInterrupt),
                                        ("import sys; sys.exit(3)", SystemExit)])
def test_ctrl_c_and_exit_under_tcl_come_back_as_themselves(code, kind):
    """Not as TclError, which `except Exception` would swallow."""
    with pytest.raises(kind) as info:
        try:
            tcl.eval(f"proc deep {{}} {{py exec {{{code}}}}}; deep")
        except Exception:
            pytest.fail("caught as an Exception")
    if kind is SystemExit:
        assert info.value.code == 3
    # What Tcl catches stays caught: the next error is Tcl's own.
    with pytest.raises(TclError) as info:
        tcl.eval(f"catch {{py exec {{{code}}}}}; error plain")
    assert info.value.result == "plain"


def test_sys_exit_under_tcl_ends_a_python_program(tmp_path):
    program = tmp_path / "exits.py"
    program.write_text("import tclamp\ntclamp.tcl.eval('py exec {import sys; sys.exit(7)}')\n"
                       "print('not reached')\n")
    r = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                       timeout=120)
    assert (r.stdout, r.stderr, r.returncode) == ("", "", 7)


def imported_tcl(*setup, **env):
    """The Tcl version of the bridge that `import tclamp` picks in a new
    Python (no TCLAMP_TCL unless given), after the statements in `setup`."""
    environ = {k: v for k, v in os.environ.items() if k != "TCLAMP_TCL"}
    environ.update(env)
    code = "\n".join([*setup, "try:", "    import tclamp", "except ImportError as e:",
                      "    print(e)", "else:", "    print(tclamp._bridge.TCL_VERSION)"])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, env=environ, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    return r.stdout.strip()


BUILT = sorted({p.name[len("_bridge")] for p in (ROOT / "src" / "tclamp").glob("_bridge[0-9]*")})


def test_the_python_host_uses_the_tcl_of_the_last_setup():
    # A checkout set up for Tcl 8.6 and then 9.0 holds both bridges.
    assert imported_tcl() == "{}.{}".format(*TCL_VERSION)


def test_tclamp_tcl_overrides_the_last_setup():
    other = "8.6" if TCL_VERSION >= (9, 0) else "9.0"
    expected = other if other[0] in BUILT else (
        f"tclamp has no bridge for Tcl {other[0]} in {ROOT / 'src' / 'tclamp'} (built: {', '.join(BUILT)})")
    assert imported_tcl(TCLAMP_TCL=other) == expected


def test_the_recorded_tcl_is_read_from_the_environment(tmp_path):
    config = tmp_path / "tclConfig.sh"
    config.write_text("TCL_VERSION='9.0'\nTCL_MAJOR_VERSION='9'\n")
    (tmp_path / ".tclamp-tcl-config").write_text(f"{config}\n")
    fake_prefix = [f"import sys; sys.prefix = {str(tmp_path)!r}", "import tclamp",
                   "print(tclamp._recorded_tcl() or 'none')"]
    r = subprocess.run([sys.executable, "-c", "\n".join(fake_prefix)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, "9\n", "")
    config.unlink()     # a record naming a Tcl that is gone
    r = subprocess.run([sys.executable, "-c", "\n".join(fake_prefix)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (0, "none\n", "")


def test_an_error_that_crosses_many_times_is_described_in_work_linear_in_its_depth():
    """An exception that goes down through 200 nested Tcl -> Python
    crossings and back keeps its errorInfo (the deepest frame and each
    level's), and describing it at each crossing looks only at the
    traceback entries it gained since the last: before, each crossing
    walked the whole traceback again, so the work (counted here as the
    lines describe_error and crossed_tcl run, not timed) grew as the square
    of the depth."""
    from tclamp import errors
    counted = {"describe_error", "crossed_tcl", "<genexpr>"}
    lines = 0

    def count_lines(frame, event, arg):
        nonlocal lines
        lines += event == "line"
        return count_lines

    def tracer(frame, event, arg):
        code = frame.f_code
        if code.co_filename == errors.__file__ and code.co_name in counted:
            return count_lines
        return None

    def down(n):
        if int(n) == 0:
            raise ValueError("bottom")
        return interp.call("down_crossing", int(n) - 1)

    interp = tclamp.Interp()
    interp.create_command("py_down_crossing", down)
    interp.eval("proc down_crossing {n} {py_down_crossing $n}")
    depth = 200
    sys.settrace(tracer)
    try:
        with pytest.raises(ValueError, match="^bottom$"):
            down(depth)
    finally:
        sys.settrace(None)
    info = interp.eval("set ::errorInfo")
    assert info.startswith("ValueError: bottom\n")
    assert info.count('"py_down_crossing $n"') == depth
    assert info.count("(passed through Python)") == depth - 1
    assert lines < 60 * depth, lines
