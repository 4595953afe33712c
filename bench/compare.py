"""tclamp's Tcl<->Python bridge against CPython's own _tkinter, side by side:
`make bench` (or python bench/compare.py [--quick]).

Everything runs in this one Python process: a tclamp.Interp and the raw
_tkinter interpreter (tkinter.Tcl().tk, no display needed) share one libtcl,
and the contenders of an operation take turns within every round, so a
ratio compares two things measured under the same conditions.

- Tcl -> Python: each operation is timed inside Tcl by `time {...} N`: tclamp
  through `py`, _tkinter through a Python function registered with
  tk.createcommand, and tclamp's own floor, the same Python function
  registered as a direct Tcl command (Interp.create_command).
- Python host: Interp.eval/call against tk.eval/call, timed by timeit.

A sample runs enough iterations for ROUND_SECONDS, in SLICES turns that
alternate with the other contenders'; the table holds the median of ROUNDS
samples.  Before timing, every contender's result is checked against the
expected value, so nothing fast-but-wrong is reported.
Writes its section of bench/RESULTS.md.
"""
import argparse
import gc
import statistics
import sys
import timeit
import tkinter
from dataclasses import dataclass, field
from pathlib import Path

from results import RESULTS, ROOT, machine, write_section

sys.path.insert(0, str(ROOT / "src"))   # measure this checkout's bridge, whatever
import tclamp  # noqa: E402             # the environment has installed

ROUNDS = 7
ROUND_SECONDS = 0.05       # per contender and round, in SLICES turns
SLICES = 5
MIB = 1 << 20
LIST_LENGTH = 10 ** 5
ASCII_TEXT = "abcdefgh" * (MIB // 8)
# Non-ASCII text, all in the BMP (Latin, Cyrillic, CJK, €).  Every use takes
# OTHER_SOURCE[1:], a new str of 1 Mi characters: CPython keeps a str's UTF-8
# once made, so passing the same object again would time that cache.  (An
# ASCII str is its own UTF-8, so ASCII_TEXT is passed as is.)
OTHER_SOURCE = ("añé€жю中文" * (MIB // 8 + 1))[:MIB + 1]

# tohil, the peer named in the design card, has no source release on PyPI and
# no Debian package, so it cannot be built here.  The figures for it
# (ns, medians the author measured on this machine) are quoted for
# reference only.
TOHIL_REFERENCE = [
    ("`py call f`", 318), ("`py call f a b`", 472), ("`py call obj.method a`", 464),
    ("`py eval 1+1`", 3_372),
    ("1 Mi-char non-ASCII string, Python -> Tcl, then used as a Tcl string", 2_505_000),
]


# What the Tcl code calls.  They live in __main__, where `py call` looks.
def f(*args):
    """Does nothing, so only the bridge is timed."""


class Thing:
    def method(self, a):
        """Does nothing, like f."""

    m = method


def text():
    return OTHER_SOURCE[1:]


# A function that returns None gives "" in tclamp and "None" in _tkinter.
NOTHING = ("", "None")
MAIN_NAMES = {"f": f, "obj": Thing(), "text": text}


def tkinter_eval(source):
    """What a _tkinter user registers to evaluate Python from Tcl."""
    return eval(source, vars(sys.modules["__main__"]))


def tkinter_object_command(thing):
    """A _tkinter command that dispatches to a method, like `$h m a`."""
    def dispatch(method, *args):
        return getattr(thing, method)(*args)
    return dispatch


class TclTimer:
    """ns per iteration of a Tcl script, timed by Tcl's own `time`."""

    def __init__(self, evaluate, script):
        self.evaluate, self.script = evaluate, script

    def __call__(self, n):
        gc.disable()            # as timeit does on the Python side
        try:
            report = self.evaluate(f"time {{{self.script}}} {n}")
        finally:
            gc.enable()
        return float(str(report).split()[0]) * 1000     # "X microseconds per iteration"

    def result(self):
        return self.evaluate(self.script)


class PyTimer:
    """ns per execution of a Python statement, timed by timeit."""

    def __init__(self, statement, namespace):
        self.statement, self.namespace = statement, namespace
        self.timer = timeit.Timer(statement, globals=namespace)

    def __call__(self, n):
        return self.timer.timeit(n) / n * 1e9

    def result(self):
        return eval(self.statement, self.namespace)


@dataclass
class Operation:
    label: str
    expected: object
    tclamp: object
    peer: object
    peer_name: str = "_tkinter"
    peer_limit: float = 1.0
    floor: object = None
    floor_limit: float = None
    floor_expected: object = None   # when the floor does less than the operation
    samples: dict = field(default_factory=dict)

    def contenders(self):
        return {name: timer for name, timer in
                (("tclamp", self.tclamp), ("peer", self.peer), ("floor", self.floor))
                if timer is not None}


def same(value, expected):
    """Whether a contender's result is the expected one; _tkinter returns
    ints and tuples where tclamp returns str, so scalars compare as text."""
    if isinstance(expected, list):
        return isinstance(value, (list, tuple)) and list(value) == expected
    if isinstance(expected, tuple):
        return str(value) in expected
    return str(value) == str(expected)


def typed_list_reader(interp, expected):
    """How tclamp turns `lset L 0 0` (a Tcl list of ints) into a Python list
    of int: (statement, description).  A typed-result API is used as soon as
    the bridge has one: any Interp method named call*/eval* beyond the two
    str ones, or a keyword argument of call/eval, that returns exactly the
    list.  Otherwise the default str result is parsed (a Tcl list of plain
    ints has decimal words and no braces)."""
    tries = []
    for family, args in (("call", "'lset', 'L', 0, 0"), ("eval", "'lset L 0 0'")):
        for name in sorted(dir(interp)):
            if name.startswith(family) and name != family and callable(getattr(interp, name)):
                tries.append(f"interp.{name}({args})")
        for keyword in ("typed=True", "result=list", "result='list'", "as_list=True",
                        "want='list'", "type=list", "convert=True", "objects=True"):
            tries.append(f"interp.{family}({args}, {keyword})")
    for statement in tries:
        try:
            value = eval(statement, {"interp": interp})
        except Exception:       # not this bridge's API: try the next one
            continue
        if isinstance(value, (list, tuple)) and all(type(v) is int for v in value) \
                and list(value) == expected:
            if isinstance(value, tuple):
                statement = f"list({statement})"
            return statement, f"the typed-result API, `{statement}`"
    statement = "list(map(int, interp.call('lset', 'L', 0, 0).split()))"
    return statement, (f"the str result, parsed in Python: `{statement}` (no typed-result "
                       f"API found: none of the {len(tries)} forms tried returned the list)")


SETUP_TCL = f"""
set x hello
proc p {{a b}} {{set b}}
set s [string repeat abcdefgh {MIB // 8}]
proc ints {{n}} {{
    set l {{}}
    for {{set i 0}} {{$i < $n}} {{incr i}} {{lappend l $i}}
    return $l
}}
set L [ints {LIST_LENGTH}]
"""


def operations():
    if not Path(tclamp._bridge.__file__).resolve().is_relative_to(ROOT):
        sys.exit(f"tclamp was imported from {tclamp._bridge.__file__}, not from {ROOT}")
    vars(sys.modules["__main__"]).update(MAIN_NAMES)
    tk = tkinter.Tcl().tk
    interp = tclamp.Interp()
    for evaluate in (tk.eval, interp.eval):
        evaluate(SETUP_TCL)

    thing = MAIN_NAMES["obj"]
    for name, function in (("f", f), ("obj.method", thing.method), ("pyeval", tkinter_eval),
                           ("h", tkinter_object_command(thing)), ("len", len), ("text", text)):
        tk.createcommand(name, function)
    for name, function in (("direct_f", f), ("direct_method", thing.method),
                           ("direct_m", thing.m), ("direct_len", len), ("direct_text", text)):
        interp.create_command(name, function)
    interp.eval("set h [py eval obj]")

    def tcl(ours, theirs, floor=None):
        return dict(tclamp=TclTimer(interp.eval, ours), peer=TclTimer(tk.eval, theirs),
                    floor=TclTimer(interp.eval, floor) if floor else None)

    namespace = {"interp": interp, "tk": tk, "ASCII_TEXT": ASCII_TEXT,
                 "OTHER_SOURCE": OTHER_SOURCE}

    def python(ours, theirs):
        return dict(tclamp=PyTimer(ours, namespace), peer=PyTimer(theirs, namespace))

    expected_list = list(range(LIST_LENGTH))
    list_statement, list_how = typed_list_reader(interp, expected_list)
    ops = [
        Operation("`py call f`", NOTHING, **tcl("py call f", "f", "direct_f")),
        Operation("`py call f a b`", NOTHING, floor_limit=1.5,
                  **tcl("py call f a b", "f a b", "direct_f a b")),
        Operation("`py call obj.method a`", NOTHING,
                  **tcl("py call obj.method a", "obj.method a", "direct_method a")),
        Operation("`py eval 1+1` (the same text every time)", 2, floor_limit=5.0,
                  floor_expected=NOTHING,
                  peer_name="_tkinter (a command that calls eval)",
                  **tcl("py eval 1+1", "pyeval 1+1", "direct_f 1+1")),
        Operation("handle method call `$h m a`", NOTHING,
                  peer_name="_tkinter (a command that calls the method)",
                  **tcl("$h m a", "h m a", "direct_m a")),
        Operation("Python function as a Tcl command, `f a b`", NOTHING,
                  **tcl("direct_f a b", "f a b")),
        Operation("1 MiB ASCII string, Tcl -> Python (`py call len $s`)", MIB,
                  **tcl("py call len $s", "len $s", "direct_len $s")),
        Operation("1 Mi-char non-ASCII string, Python -> Tcl, then `string length` (from Tcl)",
                  MIB, **tcl("string length [py call text]", "string length [text]",
                              "string length [direct_text]")),
        Operation("Python host: `Interp.eval(\"set x\")`", "hello", peer_limit=0.5,
                  **python("interp.eval('set x')", "tk.eval('set x')")),
        Operation("Python host: `Interp.call(proc, \"a\", 1)`", 1,
                  **python("interp.call('p', 'a', 1)", "tk.call('p', 'a', 1)")),
        Operation("Python host: 1 MiB ASCII string round trip", ASCII_TEXT,
                  **python("interp.call('set', 't', ASCII_TEXT)", "tk.call('set', 't', ASCII_TEXT)")),
        Operation("Python host: 1 Mi-char non-ASCII round trip", OTHER_SOURCE[1:],
                  **python("interp.call('set', 't', OTHER_SOURCE[1:])",
                           "tk.call('set', 't', OTHER_SOURCE[1:])")),
        Operation("Python host: 1 Mi-char non-ASCII string, Python -> Tcl, then `string length`",
                  MIB, **python("interp.call('string', 'length', OTHER_SOURCE[1:])",
                                "tk.call('string', 'length', OTHER_SOURCE[1:])")),
        Operation("Python host: 1 Mi-char non-ASCII string, Python -> Tcl, then its UTF-8 form "
                  "(`string bytelength`)", len(OTHER_SOURCE[1:].encode()),
                  **python("interp.call('string', 'bytelength', OTHER_SOURCE[1:])",
                           "tk.call('string', 'bytelength', OTHER_SOURCE[1:])")),
        Operation("Python host: a Tcl list of 10^5 ints into a Python list of int", expected_list,
                  **python(list_statement, "list(tk.call('lset', 'L', 0, 0))")),
    ]
    return ops, list_how, tk.call("info", "patchlevel"), interp.eval("info patchlevel")


def load_average():
    """The 1-minute load average: other work on the machine shows in the times
    (the ratios, measured side by side, suffer less)."""
    return open("/proc/loadavg").read().split()[0]


def calibrate(timer, seconds):
    """Iterations that take at least `seconds` (the runs also warm up)."""
    n = 1
    while True:
        ns = timer(n)
        if ns * n >= seconds * 1e9:
            return n
        n = max(2 * n, int(seconds * 1e9 / max(ns, 1.0) * 1.2))


def measure(ops, rounds, seconds):
    """Check each contender's result, then take `rounds` samples of each.
    Within a round the contenders of an operation take turns, SLICES times
    each, so a burst of other work on the machine hits them alike."""
    plan = {}
    for op in ops:
        for name, timer in op.contenders().items():
            value = timer.result()
            expected = op.floor_expected if name == "floor" and op.floor_expected else op.expected
            if not same(value, expected):
                sys.exit(f"{op.label}: {name} returned {str(value)[:80]!r}, "
                         f"expected {str(expected)[:80]!r}")
            plan.setdefault(id(op), []).append((name, timer, calibrate(timer, seconds / SLICES)))
    for r in range(rounds):
        for op in ops:
            order = plan[id(op)]
            turns = order[r % len(order):] + order[:r % len(order)]   # each goes first in turn
            spent = {name: 0.0 for name, _, _ in turns}
            for _ in range(SLICES):
                for name, timer, n in turns:
                    spent[name] += timer(n)
            for name, total in spent.items():
                op.samples.setdefault(name, []).append(total / SLICES)


def table(ops):
    rows = ["| operation | tclamp ns | best peer ns (name) | ratio | floor ns | ratio | "
            "targets | met |", "|---|---|---|---|---|---|---|---|"]
    met = total = 0
    for op in ops:
        med = {name: statistics.median(values) for name, values in op.samples.items()}
        ours = med["tclamp"]
        peer_ratio = ours / med["peer"]
        targets = [f"<= {op.peer_limit:.1f}x peer"]
        results = [peer_ratio <= op.peer_limit]
        floor_cells = "– | –"
        if "floor" in med:
            floor_ratio = ours / med["floor"]
            floor_cells = f"{med['floor']:,.0f} | {floor_ratio:.2f}x"
            if op.floor_limit is not None:
                targets.append(f"<= {op.floor_limit:.1f}x floor")
                results.append(floor_ratio <= op.floor_limit)
        met += sum(results)
        total += len(results)
        rows.append(f"| {op.label} | {ours:,.0f} | {med['peer']:,.0f} ({op.peer_name}) | "
                    f"{peer_ratio:.2f}x | {floor_cells} | {'; '.join(targets)} | "
                    f"{'; '.join('met' if ok else 'MISSED' for ok in results)} |")
    return "\n".join(rows), met, total


def how_measured(ops):
    lines = ["How each row is measured (tclamp / peer / floor):", ""]
    for op in ops:
        parts = []
        for timer in op.contenders().values():
            form = timer.script if isinstance(timer, TclTimer) else timer.statement
            where = "in Tcl" if isinstance(timer, TclTimer) else "in Python"
            parts.append(f"`{form}` ({where})")
        lines.append(f"- {op.label}: " + " / ".join(parts))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--output", default=str(RESULTS))
    options = parser.parse_args()
    rounds, seconds = (3, 0.01) if options.quick else (ROUNDS, ROUND_SECONDS)
    ops, list_how, tk_tcl, our_tcl = operations()
    load_before = load_average()
    measure(ops, rounds, seconds)
    rows, met, total = table(ops)
    tohil = "\n".join(f"| {label} | {ns:,} |" for label, ns in TOHIL_REFERENCE)
    text = f"""## The bridge against _tkinter (bench/compare.py)

{machine()}. Tcl in this process: {our_tcl} (tclamp), {tk_tcl} (_tkinter).

{rounds} rounds, medians. In each round the contenders of an operation take {SLICES} turns
of at least {seconds * 1000 / SLICES:.0f} ms each. All in one Python process; load average
{load_before} before, {load_average()} after. Peer: CPython's own `_tkinter` (the raw
`tkinter.Tcl().tk`). Floor: the same Python function registered as a direct Tcl command
in tclamp (`Interp.create_command`), the bridge's own cost.

{rows}

{met} of {total} targets met.

The list row reads the list with {list_how}.

tohil is NOT measured: it cannot be installed here (no source release on PyPI, not
packaged by Debian). The issue's figures for it, for reference only, not measured in this run:

| operation | tohil ns (issue 12, not this run) |
|---|---|
{tohil}

{how_measured(ops)}
"""
    print(text)
    write_section("compare.py", text, Path(options.output))


if __name__ == "__main__":
    main()
