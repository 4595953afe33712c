"""Text between Python and Tcl, both ways, with the Python host.

A str of 1- or 2-byte characters that is not pure ASCII (or holds NUL)
reaches Tcl with UTF-8 written by the bridge next to its characters; long
String-typed Tcl values go to Python from their characters.  Tried: random
texts over the edge characters of every UTF-8 length (and NUL, lone
surrogates, characters beyond the BMP), at every length 0..40 and some long
ones, held against Tcl's own copy of the same text (equality, hashing,
sorting and their UTF-8) and through Tcl's string, list, dict, array,
regexp, command-name and mutation commands, read back into Python; long
Tcl values decoded from 4-byte, CESU-8 and modified UTF-8 sequences.

Only script commands that Tcl 8.6 and 9.0 both have: a value's UTF-8 is
`encoding convertto utf-8` (standard UTF-8, NUL as one byte), and what
depends on how a Tcl keeps text (UTF-16 in 8.6) follows the Tcl under test.
"""
import random

import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

import tclamp
from conftest import TCL9, tcl_length


@pytest.fixture
def interp():
    return tclamp.Interp()


# Has Tcl make its own UTF-8 form of $v (every command that reads the value
# as text does).  Tcl 9 refuses to encode a lone surrogate, after making it.
MAKE_UTF8 = "catch {encoding convertto utf-8 $v}"


# Edge characters of each UTF-8 length, in both Python kinds.
LATIN = ["\0", "\x01", "a", " ", "{", "\\", "\x7f", "\x80", "\xbf", "\xc0", "\xe9", "\xff"]
WIDE = LATIN + ["\u0100", "\u07ff", "\u0800", "\u0fff", "\u1000", "\u4e2d", "\ud7ff",
                "\ue000", "\ufeff", "\ufffd", "\ufffe", "\uffff"]

CHECK = r"""
proc ::chk {ours} {
    set theirs [string reverse [string reverse $ours]]
    join [list \
        [string length [encoding convertto utf-8 $ours]] \
        [string length [encoding convertto utf-8 $theirs]] \
        [string equal $ours $theirs] [dict exists [dict create $theirs 1] $ours] \
        [string compare $ours $theirs] [expr {$ours eq $theirs}] \
        [expr {[lsort -unique [list $ours $theirs]] eq [list $ours]}] \
        [binary encode hex [encoding convertto utf-8 $ours]] \
        [binary encode hex [encoding convertto utf-8 $theirs]] \
        [string length $ours]] ,
}
"""


@pytest.fixture(scope="module")
def checker():
    i = tclamp.Interp()
    i.eval(CHECK)
    return i


def check_text(i, text):
    i.call("set", "v", text)
    out = i.eval("::chk $v").split(",")
    expected = text.encode("utf-8")
    assert out[0] == out[1] == str(len(expected)), ascii(text)
    # Tcl compares and hashes values by their UTF-8: the bridge's must be
    # byte for byte Tcl's own.
    assert out[2:7] == ["1", "1", "0", "1", "1"], ascii(text)
    assert out[7] == out[8], ascii(text)
    assert bytes.fromhex(out[7]) == expected, ascii(text)
    assert out[9] == str(len(text)), ascii(text)


@pytest.mark.parametrize("length", range(0, 41))
def test_every_length_random_mix(checker, length):
    rnd = random.Random(length)
    for alphabet in (LATIN, WIDE, ["\0", "\xe9"], ["\0", "\u4e2d"], ["a", "\xff"]):
        for _ in range(25):
            check_text(checker, "".join(rnd.choice(alphabet) for _ in range(length)))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.text(alphabet=st.sampled_from(LATIN), max_size=80),
                 st.text(alphabet=st.sampled_from(WIDE), max_size=80),
                 st.text(alphabet=st.characters(max_codepoint=0xFFFF,
                                                blacklist_categories=("Cs",)), max_size=80)))
def test_hypothesis_utf8_is_tcls(checker, text):
    check_text(checker, text)


# 16384: the bridge counts a str's UTF-8 in blocks of that many characters
@pytest.mark.parametrize("n", [255, 256, 257, 1023, 1024, 1025, 16383, 16384, 16385, 32769,
                               65537])
def test_long_texts(checker, n):
    rnd = random.Random(n)
    for alphabet in (LATIN, WIDE):
        check_text(checker, "".join(rnd.choice(alphabet) for _ in range(n)))
    check_text(checker, "a" * (n - 1) + "\0")
    check_text(checker, "\0" + "a" * (n - 1))
    check_text(checker, "\uffff" * n)
    check_text(checker, "\0" * n)
    check_text(checker, "\xff" * (n - 1) + "\u0800")


def test_str_subclass_and_results(interp):
    class S(str):
        pass
    for text in [S("é\0中"), S("ÿ" * 300), S("a\0")]:
        interp.call("set", "v", text)
        assert interp.eval("string length [encoding convertto utf-8 $v]") == \
            str(len(text.encode("utf-8")))
        assert interp.call("set", "v") == str(text)
    interp.eval("py exec {def echo(x): return x + 'é\\x00中'}")
    interp.eval("set r [py call echo ab]")
    assert interp.eval("string length [encoding convertto utf-8 $r]") == str(2 + 2 + 1 + 3)
    assert interp.eval("expr {$r eq [string reverse [string reverse $r]]}") == "1"
    assert interp.eval("binary encode hex [encoding convertto utf-8 $r]") == "6162c3a900e4b8ad"


STRING_OPS = r"""
proc ::ops {v} {
    set out {}
    lappend out [string map [list \u00e9 E \0 N \u4e2d Z] $v]
    lappend out [regexp -inline -all {[\u00e9\u4e2d]} $v]
    lappend out [string first \u4e2d $v] [string last \0 $v]
    lappend out [string toupper $v] [string index $v end] [string range $v 1 end-1]
    lappend out [string replace $v 0 0 X]
    set w $v; append w \u0416
    lappend out $w
    set l [list $v]; lappend l $v
    lappend out [llength $l] [lindex $l 1]
    lappend out [lsort [list $v b \u00e9]]
    set a($v) 1
    lappend out [array names a]
    set d [dict create $v 1 x 2]
    lappend out [dict keys $d] [dict get $d $v]
    lappend out [string match *$v* "<$v>"]
    lappend out [split $v \0]
    return $out
}
"""


def python_ops(v):
    def upper(s):
        return "".join(c.upper() if len(c.upper()) == 1 else c for c in s)
    out = [v.replace("é", "E").replace("\0", "N").replace("中", "Z"),
           [c for c in v if c in "é中"], v.find("中"), v.rfind("\0"),
           None, v[-1] if v else "", v[1:-1],
           "X" + v[1:] if v else "",
           v + "Ж", 2, v, None, [v], [v, "x"], "1", None, v.split("\0")]
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet=st.sampled_from(["a", "b", "\0", "é", "ÿ", "中", "Ж", " ", "*"]),
               min_size=1, max_size=30))
def test_tcl_commands_on_bridge_text(checker, text):
    i = checker
    i.eval(STRING_OPS)
    got = i.call("ops", text, result=list)
    exp = python_ops(text)
    for k, (g, e) in enumerate(zip(got, exp)):
        if e is None:
            continue
        if isinstance(e, list):
            inner = i.call("lrange", g, 0, "end", result=list)
            assert [str(x) for x in inner] == e, (k, ascii(text))
        else:
            assert str(g) == str(e), (k, ascii(text))
    # a Tcl copy and the bridge's value must sort the same way
    i.call("set", "v", text)
    assert i.eval("lsort [list $v [string reverse [string reverse $v]]]") == \
        i.eval("lsort [list [string reverse [string reverse $v]] $v]")


@pytest.mark.parametrize("text", ["é", "é\0中", "\0", "ÿ" * 300, "中" * 5 + "\0"])
def test_mutations_read_back(interp, text):
    interp.call("set", "v", text)
    interp.eval("string length $v")
    interp.eval("append v \u00e9")
    assert interp.call("set", "v") == text + "é"
    interp.call("set", "v", text)
    interp.eval("set v [string replace $v 0 0 \u4e2d]")
    assert interp.call("set", "v") == "中" + text[1:]
    interp.call("set", "v", text)
    interp.eval("lappend v z")
    assert interp.call("lindex", interp.call("set", "v"), 0) == text
    interp.call("set", "v", text)
    interp.eval(MAKE_UTF8 + "; append v abc")  # grows the bridge's buffer
    assert interp.call("set", "v") == text + "abc"
    assert interp.eval("string length [encoding convertto utf-8 $v]") == \
        str(len(text.encode("utf-8")) + 3)
    interp.call("set", "v", text)
    interp.eval("set v [string trimright $v \0]")
    assert interp.call("set", "v") == text.rstrip("\0")


@pytest.mark.parametrize("name", ["é", "é\0中", "中", "ÿ ÿ", "a\0"])
def test_command_names_and_array_keys(interp, name):
    interp.call("proc", name, "", "return ok")
    assert interp.call(name) == "ok"
    assert interp.eval("string reverse [string reverse [list ok]]") == "ok"
    tcl_name = interp.eval("lindex [info commands [string reverse [string reverse $n]]] 0"
                           .replace("$n", "{" + name + "}")) if "\0" not in name else None
    if tcl_name is not None:
        assert tcl_name == name
    interp.call("set", f"arr({name})", "1")
    assert interp.eval("array names arr") == interp.call("list", name)
    interp.call("set", "k", name)
    assert interp.eval("info exists arr([string reverse [string reverse $k]])") == "1"


# Names that are no plain UTF-8 in Tcl: NUL is C0 80 there, a character
# beyond the BMP is two surrogates' bytes in Tcl 8.6, a lone surrogate is
# ED A0 80.
@pytest.mark.parametrize("tail", ["\U0001F600", "a\0b", "\ud800", "é中"])
def test_a_handle_renamed_to_any_name_goes_by_it(interp, tail):
    import __main__
    interp.eval("py exec {class Renamed: pass\nrenamed = Renamed()}")
    new = "::m" + tail
    interp.call("rename", interp.eval("py eval renamed"), new)
    assert interp.eval("py eval renamed") == new
    assert interp.eval("py eval {[renamed, 1]}") == interp.call("list", new, 1)
    assert interp.call("py", "call", "id", new) == str(id(__main__.renamed))
    assert interp.handle_names() == [new]
    assert interp.handle_name(__main__.renamed) == new
    interp.call("proc", "::ma", "", "return other")     # what ends at its NUL
    assert interp.release(__main__.renamed) == 1
    assert interp.call("info", "commands", new) == ""
    assert interp.eval("::ma") == "other" and interp.handle_count == 0


def test_non_ascii_python_names(interp):
    interp.eval("py exec {def fé中(x): return x * 2}")
    assert interp.eval("proc p {} {py call fé中 é\\0}; p") == "é\0é\0"


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb" * 100, "é\ud83d", "\U0001F600é\0" * 100,
                                  "\ud83d\ude00", "é" * 300 + "\udc80"])
def test_surrogates_and_astral_keep_units(interp, text):
    interp.call("set", "v", text)
    assert interp.eval("string length $v") == str(tcl_length(text))
    interp.eval(MAKE_UTF8)
    back = interp.call("set", "v")
    # adjacent surrogate code points were always read back as one character
    assert back.encode("utf-16", "surrogatepass") == text.encode("utf-16", "surrogatepass")


# Tcl's text decoded from bytes as Tcl 8.6 decodes UTF-8: leniently, a
# byte that is no UTF-8 taken as a character of its own (Tcl 9 says so).
FROM_UTF8 = """
proc from_utf8 {hex} {
    set bytes [binary format H* $hex]
    if {[package vsatisfies [package provide Tcl] 9-]} {
        return [encoding convertfrom -profile tcl8 utf-8 $bytes]
    }
    encoding convertfrom utf-8 $bytes
}
"""
# A surrogate pair in CESU-8: Tcl 8.6 keeps text as UTF-16, where the two
# are one character; Tcl 9 keeps two characters.
CESU_PAIR = "\ud800\udc00" if TCL9 else "\U00010000"


@pytest.mark.parametrize("hexbytes, char", [
    ("f09f9880", "\U0001F600"), ("f48fbfbf", "\U0010FFFF"), ("c080", "\0"),
    ("e282ac", "€"), ("c3a9", "é"), ("eda080edb080", CESU_PAIR), ("f0908080", "\U00010000")])
@pytest.mark.parametrize("pad", [0, 255, 300, 5000])
@pytest.mark.parametrize("as_string", [False, True])
def test_long_tcl_text_to_python(interp, hexbytes, char, pad, as_string):
    """Long Tcl values that are String-typed go to Python from their characters."""
    interp.eval(FROM_UTF8)
    interp.eval(f"set s [string repeat a {pad}][from_utf8 {hexbytes}]")
    if as_string:
        interp.eval("string length $s")
    assert interp.call("set", "s") == "a" * pad + char
    interp.eval("append s x")
    if as_string:
        interp.eval("string index $s end")
    assert interp.call("set", "s") == "a" * pad + char + "x"
    assert interp.call("py", "call", "str", interp.call("set", "s")) == "a" * pad + char + "x"


def test_long_tcl_invalid_bytes_to_python(interp):
    interp.eval(FROM_UTF8)
    for pad in (0, 300):
        for hexbytes in ("80", "ff", "c0", "e0a0", "f5808080"):
            interp.eval(f"set s [string repeat a {pad}][from_utf8 {hexbytes}]z")
            before = interp.call("set", "s")
            interp.eval("string length $s")
            assert interp.call("set", "s") == before
            assert before.startswith("a" * pad) and before.endswith("z")


@pytest.mark.parametrize("text", ["é", "a\0b", "中\0" * 200, "ÿ" * 3])
def test_containers_from_python(interp, text):
    lst = interp.call("list", text, [text, text], {text: text})
    assert interp.call("lindex", lst, 0) == text
    interp.call("set", "L", [text, "x", text])
    assert interp.eval("lindex $L 2") == text
    assert interp.eval("string equal [lindex $L 0] [string reverse [string reverse [lindex $L 2]]]") == "1"
    interp.call("set", "D", {text: 1})
    assert interp.eval("dict exists $D [string reverse [string reverse [lindex $L 0]]]") == "1"


