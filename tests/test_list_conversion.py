"""Lists between Python and Tcl, with the Python host.

A Python list or tuple becomes a Tcl list of its converted items; a Tcl list
without text that comes back as a str gets its text from the bridge when
its items are integers or words that need no quoting, and from Tcl
otherwise.  Either way the text is Tcl's own: held here against the text
Tcl itself writes for a list of the same items (`own`), and against the
values read back.
"""
import math
import re
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

import tclamp
from conftest import TCL9, tcl_env

# Tcl's own text of a list of these items: a new list, built and written by
# Tcl (the bridge plays no part in it).
OWN = """
proc own {l} {
    set r {}
    foreach x $l {lappend r $x}
    string range $r 0 end
}
"""


@pytest.fixture
def interp():
    i = tclamp.Interp()
    i.eval(OWN)
    return i


@pytest.fixture(scope="module")
def shared():
    i = tclamp.Interp()
    i.eval(OWN)
    return i


EDGE_INTS = [0, 1, -1, 9, 10, -10, 99, 100, 12345, 2**31 - 1, 2**31, -2**31, 2**32 - 1, 2**32,
             2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**64, 10**19 - 1, 10**19, 10**30, -10**30]
EDGE_INTS += [s * 10**k + d for k in range(1, 19) for d in (-1, 0, 1) for s in (1, -1)]


def test_ints_as_decimal_text(interp):
    text = interp.call("set", "y", EDGE_INTS)
    assert text == " ".join(map(str, EDGE_INTS))
    assert interp.eval("own $y") == text
    assert interp.call("set", "y", result=list) == EDGE_INTS
    assert interp.eval("llength $y") == str(len(EDGE_INTS))
    assert interp.eval(f"lindex $y {EDGE_INTS.index(2**32 - 1)}") == str(2**32 - 1)


def test_a_huge_list_both_ways(interp):
    big = list(range(-500_000, 500_000))
    text = interp.call("set", "y", big)
    assert len(text) == len(" ".join(map(str, big)))
    assert text == " ".join(map(str, big))
    assert interp.call("set", "y", result=list) == big
    assert interp.eval("expr {[lindex $y end] + [llength $y]}") == str(499_999 + 1_000_000)
    # one item that needs quoting at the end: Tcl writes all of it
    text = interp.call("set", "z", big + ["a b"])
    assert text == " ".join(map(str, big)) + " {a b}"
    assert interp.eval("own $z") == text


def test_tuple_and_nested(interp):
    value = (1, [2, (3, "x y")], (), [], "", "{", -0)
    text = interp.call("set", "y", value)
    assert text == "1 {2 {3 {x y}}} {} {} {} \\{ 0"
    assert interp.eval("own $y") == text
    assert interp.call("set", "y", result=object) == [1, [2, [3, "x y"]], "", "", "", "{", 0]


@pytest.mark.parametrize("items, text", [
    (["#a", "b"], "{#a} b"),            # a first word with # would be a comment
    (["a", "#b"], "a #b"),
    ([1, "#b"], "1 #b"),
    (["#"], "{#}"),
    (["a;b", "$x", "[y]", "c\\d", 'e"f', "g}h", "i{j"], None),
    (["é", "中文", "añé€", "a\0b"], "é 中文 añé€ a\0b"),
    (["a b", "\t", "\n", "x\r", "\v", "\f"], None),
])
def test_words_quoted_as_tcl_quotes_them(interp, items, text):
    got = interp.call("set", "y", items)
    assert got == interp.eval("own $y")
    if text is not None:
        assert got == text
    assert interp.call("set", "y", result=list) == items
    assert [interp.call("lindex", got, k) for k in range(len(items))] == list(map(str, items))


def test_numbers_and_bools(interp):
    items = [True, False, 1.5, -0.0, 1e100, 2.5e-300, math.inf, -math.inf, 3, 2**70]
    got = interp.call("set", "y", items)
    assert got == "1 0 1.5 -0.0 1e+100 2.5e-300 Inf -Inf 3 1180591620717411303424"
    assert got == interp.eval("own $y")
    assert interp.call("set", "y", [math.nan, 1]) == "NaN 1"
    assert interp.call("set", "y", [True, 2], result=object) == [1, 2]


def test_subclasses_convert_as_their_base(interp):
    """An int or str subclass converts as its value; a list subclass as what
    iterating it gives (a plain list or tuple, as itself)."""
    class I(int):
        def __repr__(self):
            return "not this"

        __str__ = __repr__

        def __index__(self):
            return 99

    class S(str):
        def __str__(self):
            return "nor this"

    class L(list):
        def __iter__(self):
            return iter(list.__iter__(self))

        def __getitem__(self, k):
            return "never this"

    class T(tuple):
        pass

    items = L([I(5), S("a b"), T((I(-7), S("c"))), True, I(2**80)])
    got = interp.call("set", "y", items)
    assert got == "5 {a b} {-7 c} 1 " + str(2**80)
    assert got == interp.eval("own $y")
    assert interp.call("set", "y", result=object) == [5, "a b", [-7, "c"], 1, 2**80]
    assert interp.call("llength", T(range(40))) == "40"

    class Reversed(list):
        def __iter__(self):
            return reversed(list(list.__iter__(self)))

    assert interp.call("set", "y", Reversed([1, 2, 3])) == "3 2 1"


def test_objects_in_a_list_become_handles(interp):
    thing, other = object(), []
    got = interp.call("set", "y", [thing, 7, [thing], (other,)])
    assert re.fullmatch(r"::py::obj\d+ 7 ::py::obj\d+ \{\{\}\}", got), got
    handle = got.split()[0]
    assert got.split()[2] == handle     # one handle for one object
    assert interp.eval(f"py call id {handle}") == str(id(thing))
    assert interp.eval("py call id [lindex $y 0]") == str(id(thing))


def test_list_argument_of_py_call(interp):
    interp.eval("py exec {def show(x): return repr(x)}")
    assert interp.eval("py call show [list 1 -2 30]") == "'1 -2 30'"
    assert interp.eval("py call show [list 1 {a b} 3]") == "'1 {a b} 3'"
    assert interp.eval("set l [lrepeat 3 -5]; py call show $l") == "'-5 -5 -5'"


def test_text_given_to_a_list_is_the_one_tcl_uses(interp):
    """The text the bridge writes stays with the list: Tcl reads it as its
    own, and evaluates the list the same way."""
    assert interp.call("set", "y", [1, -2, 3]) == "1 -2 3"
    assert interp.eval("string length $y") == "6"
    assert interp.eval("string index $y 2") == "-"
    assert interp.eval("lappend y 4") == "1 -2 3 4"
    assert interp.call("set", "c", ["set", "v", 42]) == "set v 42"
    assert interp.eval("eval $c; set v") == "42"
    assert interp.eval("concat $c x") == "set v 42 x"


def test_empty_and_single(interp):
    assert interp.call("set", "y", []) == ""
    assert interp.call("set", "y", [0]) == "0"
    assert interp.call("set", "y", [-9223372036854775808]) == "-9223372036854775808"
    assert interp.call("set", "y", [""]) == "{}"


ATOMS = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70),
    st.integers(min_value=-1000, max_value=1000),
    st.booleans(),
    st.floats(allow_nan=False),
    st.text(alphabet=st.sampled_from(["a", "Z", "0", "-", " ", "{", "}", "[", "]", "$", ";",
                                      "\\", '"', "#", "é", "中", "\0", "\t", "\n"]),
            max_size=6),
)
ITEMS = st.recursive(ATOMS, lambda inner: st.lists(inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ITEMS, max_size=12))
def test_hypothesis_text_is_tcls(shared, items):
    got = shared.call("set", "y", items)
    assert got == shared.eval("own $y")
    assert shared.eval("llength $y") == str(len(items))
    # a second read is the same text (Tcl keeps what it was given)
    assert shared.call("set", "y") == got


def test_refused_dict_frees_what_it_made(interp):
    """A dict whose keys are one Tcl key (1 and '1') is refused; the Tcl key
    that the dict did not keep is freed (it was not: ~76 bytes a call)."""
    def rss_kb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4

    def refuse(n):
        for _ in range(n):
            with pytest.raises(ValueError, match='two keys of the dict are the same Tcl key "1"'):
                interp.call("set", "z", [5, {1: "a", "1": "b"}])

    refuse(10_000)
    before = rss_kb()
    refuse(200_000)
    assert rss_kb() - before < 2048
    assert interp.call("set", "z", {1: "a", "2": [1, 2]}) == "1 a 2 {1 2}"


@pytest.mark.parametrize("key", ["\0", "\ud800", "\U0001F600", "\xff"])
def test_refused_dict_names_its_key_as_it_is(interp, key):
    """The message names the key that two keys of the dict are (a tuple of
    one str is a list of one word): NUL, a lone surrogate, and (on Tcl 8.6)
    a character beyond the BMP came out as U+FFFD, one for each byte of
    Tcl's UTF-8 of them."""
    with pytest.raises(ValueError) as refused:
        interp.call("list", {(key,): 1, key: 2})
    assert str(refused.value) == f'two keys of the dict are the same Tcl key "{key}"'


# Tcl 8.6 has no lseq: the same values as a plain list, so that the test
# below runs (and holds) there too.
LSEQ_8_6 = """
proc lseq {from {to {}} {by 1}} {
    if {$to eq {}} {lassign [list 0 [expr {$from - 1}]] from to}
    set r {}
    for {set x [expr {$from + 0 * $by}]} {$x <= $to} {set x [expr {$x + $by}]} {lappend r $x}
    return $r
}
"""


def test_tcl9_abstract_lists_are_lists(interp):
    """Tcl 9's `lseq` gives a list that Tcl holds as an arithmetic series,
    not as its list type: result=object reads it as the list it is (it
    came back as its text), items and all, as it does a list that
    `lrange` copies out of it.  (On Tcl 8.6, a plain list.)"""
    if not interp.eval("info commands lseq"):
        interp.eval(LSEQ_8_6)
    assert interp.eval("lseq 3", result=object) == [0, 1, 2]
    assert interp.eval("lseq 0 1 0.5", result=object) == [0.0, 0.5, 1.0]
    assert interp.eval("list [lseq 2] x", result=object) == [[0, 1], "x"]
    assert interp.eval("lseq 1", result=object) == [0]
    assert interp.eval("lrange [lseq 3] 0 end", result=object) == [0, 1, 2]
    assert interp.eval("dict create a 1", result=object) == "a 1"
    assert interp.eval("expr {7}", result=object) == 7


# Tcl 8.6 has no abstract lists; there the case is left out, not skipped
# (test_switch_builds runs this file under each build and wants no skip).
if TCL9:
    def test_a_tcl9_abstract_list_too_long_for_python_is_a_memory_error():
        """`lseq 2**61` is a list that Tcl 9 holds as a formula.  Read as a
        Python list, its items were asked for all at once, which has Tcl 9.0
        allocate them with a size that overflows: the process died (a
        segmentation fault; for `lseq 2**40`, Tcl's panic).  Its items are read
        one by one, into a list that Python refuses at once: MemoryError.  In a
        child, which the crash ended, its address space bounded (unbounded, the
        overflowing writes went on for minutes)."""
        code = textwrap.dedent("""\
            import os, resource, tclamp
            i = tclamp.Interp()
            size = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(resource.RLIMIT_AS, (size + (2 << 30), resource.RLIM_INFINITY))
            for script, result in [("lseq 2**61", object), ("lseq 2**61", list),
                                   ("list 1 [lseq 2**61]", list)]:
                try:
                    i.eval(script, result=result)
                except MemoryError:
                    print("MemoryError")
            print(i.eval("lseq 3", result=list))
            """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env=tcl_env(TCLAMP_PYTHON=sys.executable))
        assert (r.stdout, r.returncode) == ("MemoryError\n" * 3 + "[0, 1, 2]\n", 0), \
            r.stderr[-2000:]


def test_a_list_longer_than_a_tcl_list_is_an_overflow_error():
    """Tcl 8.6 panics when asked for a list of more than about 537 million
    items (its list's bytes are counted in an unsigned int), far below the
    2**31 that the bridge checked: a longer Python list ended the process.
    Such a list needs over 25 GB; here a list says it holds more than Tcl's
    most (its size field written by ctypes, its items never read, the
    collector off meanwhile), in a child in case it crashes."""
    count = 2**61 if TCL9 else 600_000_000
    code = textwrap.dedent(f"""\
        import ctypes, gc, __main__, tclamp
        i = tclamp.Interp()
        fake = __main__.fake = []
        size = ctypes.c_ssize_t.from_address(
            id(fake) + list.__basicsize__ - 3 * ctypes.sizeof(ctypes.c_void_p))
        gc.disable()
        size.value = {count}
        try:
            for convert in (lambda: i.call("llength", fake), lambda: i.eval("py eval fake")):
                try:
                    convert()
                except OverflowError as e:
                    print(e)
        finally:
            size.value = 0
        gc.enable()
        print(i.eval("llength [py eval {{[1, 2]}}]"))
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=tcl_env(TCLAMP_PYTHON=sys.executable))
    lines = r.stdout.splitlines()
    assert (len(lines), lines[-1:], r.returncode) == (3, ["2"], 0), r.stderr[-2000:]
    for line in lines[:2]:
        most = re.fullmatch(rf"list too long for Tcl: {count} items \(at most (\d+)\)", line)
        assert most and 5 * 10**8 < int(most[1]) < count, line


@pytest.mark.parametrize("value", [["a\0b", 7], ["\U0001F600", 2.5], [["\0"], -1]])
def test_reading_a_lists_text_keeps_it_a_list(interp, value):
    """A list whose text is no plain UTF-8 (NUL is C0 80 in Tcl; a
    character beyond the BMP is two surrogates in Tcl 8.6) is read from
    its characters: reading its text, from Python or by py call, leaves
    it the list it was (it became a string, and result=object gave its
    text)."""
    interp.call("set", "x", value)
    assert interp.eval("set x", result=object) == value
    interp.eval("set x")
    assert interp.eval("set x", result=object) == value
    interp.eval("py call str $x")
    assert interp.eval("set x", result=object) == value
