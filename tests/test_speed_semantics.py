"""What the bridge keeps to be fast never changes a result (Python host).

Interp.eval keeps the Tcl values of recent scripts (so Tcl reuses their
bytecode) and Interp.call the values of command names; py eval/exec keep
compiled code per interpreter; typed results read Tcl's own types.  Each
test runs the same text again after what it could depend on changed.
tests/cache.test does the same from the Tcl side.
"""
import math
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tclamp
from conftest import tcl_length, tcl_text
from tclamp import TclError

import __main__


@pytest.fixture
def interp():
    return tclamp.Interp()


def test_script_again_after_proc_redefined(interp):
    interp.eval("proc answer {} {return 1}")
    assert interp.eval("answer") == "1"
    interp.eval("proc answer {} {return 2}")
    assert interp.eval("answer") == "2"
    interp.eval("rename answer {}")
    with pytest.raises(TclError) as info:
        interp.eval("answer")
    assert info.value.result == 'invalid command name "answer"'


def test_script_again_after_variable_and_namespace_change(interp):
    script = "set ::value"
    interp.eval("set ::value a")
    assert interp.eval(script) == "a"
    interp.eval("set ::value b")
    assert interp.eval(script) == "b"
    interp.eval("namespace eval ::ns {proc answer {} {return ns}}; proc answer {} {return global}")
    assert interp.eval("answer") == "global"
    interp.eval("namespace eval ::ns {namespace export answer}; rename ::answer {}")
    interp.eval("namespace import ::ns::answer")
    assert interp.eval("answer") == "ns"


def test_script_that_raises_raises_again(interp):
    for _ in range(3):
        with pytest.raises(TclError) as info:
            interp.eval("error boom {} {MY CODE}")
        assert (info.value.result, info.value.errorcode, info.value.code) == ("boom", "MY CODE", 1)
    for _ in range(2):
        with pytest.raises(TclError) as info:
            interp.eval("break")
        assert (info.value.result, info.value.code) == ('invoked "break" outside of a loop', 1)


def test_more_scripts_than_are_kept(interp):
    interp.eval("set ::total 0")
    for round_ in range(2):
        for i in range(300):
            assert interp.eval(f"incr ::total; expr {{{i} * 2}}") == str(i * 2)
    assert interp.eval("set ::total") == "600"


def test_command_name_again_after_redefinition(interp):
    interp.eval("proc greet {who} {return hello-$who}")
    assert interp.call("greet", "a") == "hello-a"
    interp.eval("proc greet {who} {return bye-$who}")
    assert interp.call("greet", "a") == "bye-a"
    interp.eval("rename greet {}")
    with pytest.raises(TclError) as info:
        interp.call("greet", "a")
    assert info.value.result == 'invalid command name "greet"'
    interp.eval("proc greet {who} {return again-$who}")
    assert interp.call("greet", "b") == "again-b"


def test_str_subclass_script_is_not_kept_by_its_own_equality(interp):
    class Weird(str):
        def __hash__(self):
            return 0

        def __eq__(self, other):
            return True

    assert interp.eval(Weird("set w 1")) == "1"
    assert interp.eval(Weird("set w 2")) == "2"
    assert interp.call(Weird("set"), "w") == "2"


def test_py_eval_from_python_sees_main_changes(interp):
    __main__.speed_probe = 1
    try:
        assert interp.call("py", "eval", "speed_probe + 1") == "2"
        __main__.speed_probe = 10
        assert interp.call("py", "eval", "speed_probe + 1") == "11"
        interp.call("py", "exec", "speed_probe = 20")
        assert interp.call("py", "eval", "speed_probe + 1") == "21"
        __main__.speed_probe = lambda: "function"
        assert interp.call("py", "call", "speed_probe") == "function"
    finally:
        del __main__.speed_probe
    with pytest.raises(NameError, match="name 'speed_probe' is not defined"):
        interp.call("py", "eval", "speed_probe + 1")      # the exception itself


@pytest.mark.parametrize("text", ["a\0b", "\0", "x\U0001F600y", "\U0001F600\0\U0001F601",
                                  "é\0中\U00010000", "\udc80 lone", "plain ascii", ""])
def test_nul_and_astral_both_ways_twice(interp, text):
    for _ in range(2):
        assert interp.call("set", "v", text) == text
        assert interp.eval("set v") == text
        assert interp.call("py", "call", "str", text) == text
        assert interp.call("string", "range", text, 0, "end") == text
        assert interp.call("list", text, text, result=list) == [text, text]
    # After Tcl made its UTF-8 of the value (Tcl 9 refuses to encode a lone
    # surrogate, after making it), and after it was indexed.
    interp.eval("catch {encoding convertto utf-8 $v}; string index $v 0")
    assert interp.eval("set v") == text
    # Tcl's own \u escapes with NUL, built from Tcl source.
    assert interp.eval("set nul \"a\\u0000b\"") == "a\0b"


@pytest.mark.parametrize("special", ["\0", "\u00e9", "\U0001F600", "\x7f", "\x80"])
@pytest.mark.parametrize("at", [0, 63, 64, 255, 256, 1000, 1023])
def test_long_text_with_one_special_character(interp, special, at):
    """Long ASCII text is copied in blocks, checked as it goes: one NUL or
    non-ASCII character anywhere, in a block or in the tail, is seen."""
    text = "abcdefgh" * 128                    # 1024 characters
    text = text[:at] + special + text[at + 1:]
    for _ in range(2):
        assert interp.call("set", "long", text) == text
        assert interp.eval("set long") == text
        assert interp.eval("string length $long") == str(tcl_length(text))
        assert interp.call("py", "call", "str", text) == text
    # Text that Tcl made itself, in its own UTF-8 (C0 80 for NUL, and in
    # Tcl 8.6 a character beyond the BMP as two 3-byte surrogates).
    assert interp.eval('set copy "<$long>"') == f"<{text}>"
    assert interp.call("py", "call", "str", interp.eval("set copy")) == f"<{text}>"


# Texts whose characters take 1, 2 and 3 bytes of UTF-8 (and NUL, 2 in
# Tcl's), in every position of the bridge's blocks of four and of eight
# characters, and in the rest after the last block.
MIXED = ["", "é", "\0", "aé", "\u00ff\0", "€", "a\0é€", "añé€жю中文", "\x7f\x80\u07ff\u0800\uffff"]
MIXED += ["ab\0" * n + "é" * m for n in range(6) for m in range(10)]
MIXED += ["x" * n + "\0" + "é" * (17 - n) for n in range(18)]
MIXED += ["中" * n + "\0" + "ÿ" * (17 - n) for n in range(18)]


@pytest.mark.parametrize("text", MIXED + [("añé€жю中文" * 40000)[:300001], "é" * 70001])
def test_utf8_written_by_the_bridge_is_tcls_own(interp, text):
    """A str of one- or two-byte characters reaches Tcl with its UTF-8
    written by the bridge: it must be byte for byte what Tcl writes for
    the same characters, since Tcl compares values by those bytes (dict
    keys, string equality, hashing)."""
    interp.call("set", "ours", text)
    # Tcl's own copy: built from code units, its UTF-8 made by Tcl.
    interp.eval("set theirs [string reverse [string reverse $ours]]")
    assert interp.eval("string length [encoding convertto utf-8 $ours]") == \
        str(len(text.encode("utf-8")))
    assert interp.eval("dict exists [dict create $theirs 1] $ours") == "1"
    assert interp.eval("expr {[encoding convertto utf-8 $ours] eq [encoding convertto utf-8 $theirs]}") == "1"
    assert interp.eval("string length $ours") == str(len(text))
    assert interp.call("set", "ours") == text
    assert interp.eval("string range $ours 1 end-1") == text[1:-1]
    # Appending to it (the value then drops what the bridge wrote) and
    # back: nothing of the old text lingers.
    interp.eval("append ours Ω")
    assert interp.call("set", "ours") == text + "Ω"
    assert interp.call("py", "call", "str", text, result=str) == text


# Characters at each edge of the UTF-8 sizes (and NUL, and surrogates, which
# Tcl writes itself), for texts of one- and two-byte characters.
EDGES = "a\x7f\0\x80\xff\u0100\u07ff\u0800中\ud7ff\ud800\udbff\udc00\udfff\ue000\uffff"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.sampled_from(EDGES), max_size=70)
       | st.text(alphabet=st.sampled_from("a\0\x80\xff"), max_size=70))
def test_utf8_of_any_text_is_tcls_own(interp, text):
    """The property behind the cases above, on random texts: whatever the
    bridge writes (or leaves to Tcl), Tcl holds the same bytes as for its
    own copy (a dict key is those bytes), and the text comes back (Tcl 8.6
    joins a surrogate pair).
    Tcl's copy is made from the code units (`string range` gives a value
    with no text yet), not reversed twice, which would swap a low and a
    high surrogate that meet in the middle."""
    interp.call("set", "v", text)
    interp.eval("set theirs [string range $v 0 end]")
    assert interp.eval("list [dict exists [dict create $theirs 1] $v] [string length $v]") == \
        f"1 {tcl_length(text)}"
    assert interp.call("set", "v") == tcl_text(text)


LONG_TEXTS = MIXED + [("añé€жю中文" * 40000)[:300001], "é" * 70001, "x\udc80y" * 100,
                      "a" * 1000 + "\0" + "b" * 300, "a" * 4096]


def test_texts_tcl_and_python_both_write(interp):
    """A str's text as the bridge gives it to Tcl (its code units, and the
    UTF-8 the accelerators write) is the text Tcl writes for its own copy,
    byte for byte, and finds the same dict key; and it comes back as it
    went.  tests/test_switch_builds.py runs this in a build without the
    accelerators too."""
    interp.eval('''proc utf8_length {text} {
        if {[package vsatisfies [package provide Tcl] 9-]} {
            return [string length [encoding convertto -profile tcl8 utf-8 $text]]
        }
        string length [encoding convertto utf-8 $text]
    }''')
    for text in LONG_TEXTS:
        interp.call("set", "ours", text)
        interp.eval("set theirs [string reverse [string reverse $ours]]")
        same = interp.eval("list [utf8_length $ours] [utf8_length $theirs]"
                           " [dict exists [dict create $theirs 1] $ours] [string length $ours]")
        bytes_ours, bytes_theirs, found, length = same.split()
        assert (bytes_ours, found, length) == (bytes_theirs, "1", str(tcl_length(text))), text[:20]
        assert interp.call("set", "ours") == tcl_text(text)


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb", "é\ud83d", "\U0001F600é\0", "é" * 10 + "\udc80",
                                  "\udc80" + "é" * 15, "é" * 5 + "\ud800" + "é" * 10,
                                  "é" * 15 + "\udfff", "é" * 5 + "\ud83d\ude00" + "é" * 9,
                                  "é" * 2 + "\ud83d\ude00" + "é" * 4])
def test_text_the_bridge_leaves_to_tcl(interp, text):
    """Lone surrogates and characters beyond the BMP go over as code units
    only; Tcl makes their UTF-8 itself (the same as for its own copy), and
    they come back unchanged, but for a high and a low surrogate side by
    side: Tcl 8.6 keeps a character beyond the BMP as those two units, so
    they come back as that one character."""
    interp.call("set", "v", text)
    interp.eval("set theirs [string reverse [string reverse $v]]")
    assert interp.eval("dict exists [dict create $theirs 1] $v") == "1"
    assert interp.call("set", "v") == tcl_text(text)
    interp.eval("catch {encoding convertto utf-8 $v}")      # Tcl makes its UTF-8
    assert interp.eval("set v") == tcl_text(text)


def test_typed_results(interp):
    interp.eval("set L {}; for {set i 0} {$i < 5} {incr i} {lappend L $i}")
    assert interp.eval("set L", result=list) == [0, 1, 2, 3, 4]
    assert interp.eval("set L") == "0 1 2 3 4"
    assert interp.call("lrange", "{a b} c 3", 0, "end", result=list) == ["a b", "c", "3"]
    assert interp.eval("expr {6 * 7}", result=int) == 42
    assert interp.eval("expr {2 ** 100}", result=int) == 2 ** 100
    assert interp.eval("expr {-(2 ** 70)}", result=int) == -(2 ** 70)
    assert interp.eval("expr {2 ** 64 - 1}", result=object) == 2 ** 64 - 1
    assert interp.eval("return 0x10", result=int) == 16
    assert interp.eval("expr {1 / 4.0}", result=float) == 0.25
    assert interp.eval("return 3", result=float) == 3.0
    # Numbers Tcl computed are numbers; words it only read as text are str.
    assert interp.eval("list [expr {0 + 1}] [expr {5 / 2.0}] [list [expr {1 + 2}] x] {y z} "
                       "[expr {2**80}] 7", result=object) == [1, 2.5, [3, "x"], "y z", 2 ** 80, "7"]
    assert interp.eval("binary format H* 00ff41", result=object) == b"\x00\xffA"
    assert interp.eval("set s hello", result=object) == "hello"
    # A NaN that Tcl holds as a double (it refuses to parse one from text).
    interp.eval("binary scan [binary format w 0x7ff8000000000000] d nan")
    assert math.isnan(interp.eval("set nan", result=object))
    assert math.isnan(interp.eval("set nan", result=float))
    assert interp.eval("set nan") == "NaN"
    # A dict's words are its keys and values; a word Tcl never read as a
    # number is a str.
    assert interp.eval("dict create a 1", result=list) == ["a", "1"]


def test_typed_results_that_do_not_fit(interp):
    with pytest.raises(ValueError) as info:
        interp.eval("set x abc", result=int)
    assert str(info.value) == 'expected integer but got "abc"'
    with pytest.raises(ValueError) as info:
        interp.eval("set x 1.5x", result=float)
    assert str(info.value) == 'expected floating-point number but got "1.5x"'
    with pytest.raises(ValueError) as info:
        interp.eval('set x "a {b"', result=list)
    assert str(info.value) == "unmatched open brace in list"
    with pytest.raises(TypeError) as info:
        interp.eval("set x 1", result=dict)
    assert str(info.value) == "result must be str, int, float, list or object, not <class 'dict'>"
    with pytest.raises(TypeError) as info:
        interp.call("set", "x", 1, typed=True)
    assert str(info.value) == "call() got an unexpected keyword argument 'typed'"
    # The script ran; only reading its result failed, and nothing of that stays.
    assert interp.eval("set x") == "a {b"
    assert interp.eval("info exists ::errorInfo") == "0"


def test_typed_result_after_the_value_changed_type(interp):
    interp.eval("set v {1 2 3}")
    assert interp.eval("set v", result=object) == "1 2 3"        # a pure string
    interp.eval("llength $v")                                 # now a list of words
    assert interp.eval("set v", result=object) == ["1", "2", "3"]
    interp.eval("lset v 0 [expr {0 + 1}]")                   # its first word an int
    assert interp.eval("set v", result=object) == [1, "2", "3"]
    assert interp.eval("set v") == "1 2 3"
    interp.eval("set n 41; incr n")
    assert interp.eval("set n", result=object) == 42
    assert interp.eval("set n") == "42"
    assert interp.eval("set n", result=list) == ["42"]       # a word parsed from its text


def test_tclamp_tcl_passes_result_through():
    assert tclamp.tcl.eval("list a [expr {1 + 1}]", result=list) == ["a", 2]
    assert tclamp.tcl.call("expr", "2 + 2", result=int) == 4


def test_four_python_threads_same_texts():
    __main__.speed_ident = threading.get_ident
    failures = []
    barrier = threading.Barrier(4)

    def work(me):
        interp = tclamp.Interp()
        interp.eval("proc mine {} {py call speed_ident}")
        barrier.wait()
        for i in range(300):
            if interp.eval("mine") != str(threading.get_ident()):
                failures.append((me, i, "call"))
            if interp.eval(f"py eval {{{me} * 1000 + {i}}}") != str(me * 1000 + i):
                failures.append((me, i, "eval"))
            if interp.call("py", "eval", "speed_ident()", result=int) != threading.get_ident():
                failures.append((me, i, "eval from call"))
            try:        # a Python exception that crossed Tcl comes back itself
                interp.eval("py eval 1/0")
            except ZeroDivisionError as exc:
                if str(exc) != "division by zero":
                    failures.append((me, i, str(exc)))
            else:
                failures.append((me, i, "no error"))
        interp.delete()

    def guarded(me):        # an exception in a thread is a failure, not a warning
        try:
            work(me)
        except BaseException as exc:
            failures.append((me, repr(exc)))

    threads = [threading.Thread(target=guarded, args=(me,)) for me in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        del __main__.speed_ident
    assert failures == []


def test_many_short_sources_do_not_leak_code(interp):
    """Code kept on Tcl values that Tcl frees goes too (the values die in
    Tcl, the objects are released the next time a py command runs)."""
    import gc
    interp.eval("py exec {import gc}")
    gc.collect()
    before = sum(1 for o in gc.get_objects() if type(o).__name__ == "code")
    interp.eval("for {set i 0} {$i < 3000} {incr i} { py eval \"$i + 1\" }")
    interp.eval("py exec {gc.collect()}")
    after = sum(1 for o in gc.get_objects() if type(o).__name__ == "code")
    # At most what the per-interpreter cache holds (128 each for eval and exec).
    assert after - before <= 260, (before, after)
    assert sys.getrefcount(interp) >= 2


class Recorder:
    def method(self, *args):
        return repr(args)


# Every way a Tcl command's words become the arguments of a Python call; the
# first few words sit on the C stack, more take an allocation.
CALL_PATHS = {
    "command": ("recorded {*}$words", False),
    "handle method": ("$h method {*}$words", False),
    "py call name": ("py call recorded {*}$words", True),
    "py call obj.method": ("py call recorder.method {*}$words", True),
    "py call handle": ("py call $f {*}$words", True),
    "py call -kwlist": ("py call -kwlist {} recorded {*}$words", True),
}


@pytest.mark.parametrize("path", list(CALL_PATHS))
def test_call_arguments_of_every_count(interp, path):
    script, none_word = CALL_PATHS[path]
    recorder = Recorder()
    __main__.recorder, __main__.recorded = recorder, recorder.method
    interp.create_command("recorded", recorder.method)
    interp.eval("set h [py eval recorder]; set f [py eval recorded]")
    other = tclamp.Interp()
    foreign = other.eval("py eval recorder")
    assert interp.eval(f"info exists {foreign}") == "0" and foreign != interp.eval("set h")
    for n in (0, 1, 8, 9, 10, 40):
        words = [f"w{i}" for i in range(n)]
        if n >= 9:
            words[8] = "::py::None"
        interp.call("set", "words", words)
        expected = tuple(None if w == "::py::None" and none_word else w for w in words)
        assert interp.eval(script) == repr(expected), (path, n)
    # A word that cannot be converted, after some that were: the error, and
    # nothing kept of the words converted before it.
    interp.eval("set words [list $h]")
    interp.eval(script)
    held = sys.getrefcount(recorder)
    for n in (3, 12):
        interp.call("set", "words", ["x"] * n)
        interp.eval(f"lset words 0 $h; lset words {n - 1} {foreign}")
        with pytest.raises(ValueError) as info:
            interp.eval(script)
        assert str(info.value) == f'py object handle "{foreign}" belongs to another interpreter'
    assert sys.getrefcount(recorder) == held
    del __main__.recorder, __main__.recorded
