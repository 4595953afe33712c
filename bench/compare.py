"""tclamp's Tcl<->Python bridge against its peers, CPython's own _tkinter and
tohil, side by side: `make bench` (or python bench/compare.py [--quick]).

Everything runs in this one Python process: a tclamp.Interp, the raw
_tkinter interpreter (tkinter.Tcl().tk, no display needed) and tohil's
interpreter (its Python module, built from the source in ../shared/peers by
build_tohil.sh) share one libtcl, and the contenders of an operation take
turns within every round, so a ratio compares things measured under the
same conditions.

- Tcl -> Python: each operation is timed inside Tcl by `time {...} N`: tclamp
  through `py`, _tkinter through a Python function registered with
  tk.createcommand, tohil through `tohil::call`/`tohil::eval` in its own
  interpreter, and tclamp's own floor, the same Python function registered
  as a direct Tcl command (Interp.create_command).
- Python host: Interp.eval/call against tk.eval/call and tohil.eval/call,
  timed by timeit.
- Ensemble: what Tcl's dispatch through a namespace ensemble costs with no
  Python in it, beside what `py call f` costs over `::py::call f`.
- New processes: the 1 Mi-character round trip, and a new str of that
  length whose UTF-8 Tcl reads once, where each library
  in turn runs it first, then each is timed in a run of its own; a figure
  that depends on what ran before (malloc's state) shows as a spread
  between the orders, and its cause, fresh pages, as minor page faults.

A sample runs enough iterations for ROUND_SECONDS, in SLICES turns that
alternate with the other contenders'; the table holds the median of ROUNDS
samples.  Before timing, every contender's result is checked against the
expected value, so nothing fast-but-wrong is reported.
Writes its section of bench/RESULTS.md.
"""
import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
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

PEERS = Path(os.environ.get("TCLAMP_PEERS", ROOT.parent / "shared" / "peers"))
TOHIL_BUILD = ROOT / "build" / f"tohil-py{sys.version_info[0]}.{sys.version_info[1]}"


def load_tohil():
    """tohil's Python half, built (once) by the peers folder's build_tohil.sh
    against this Python: (module, None), or (None, why not)."""
    script = PEERS / "build_tohil.sh"
    if not script.is_file():
        return None, f"no {script} to build it with"
    built = subprocess.run(["sh", str(script), str(TOHIL_BUILD)], capture_output=True, text=True,
                           env=dict(os.environ, TCLAMP_DIR=str(ROOT), TOHIL_PYTHON=sys.executable))
    if built.returncode != 0:
        return None, ((built.stdout + built.stderr).strip() or "build_tohil.sh failed").splitlines()[-1]
    # its interpreter, made on import, finds its Tcl half by TCLLIBPATH
    os.environ["TCLLIBPATH"] = f"{TOHIL_BUILD / 'tcl'} {os.environ.get('TCLLIBPATH', '')}"
    sys.path.insert(0, str(TOHIL_BUILD / "py"))
    try:
        import tohil
    except Exception as error:      # noqa: BLE001 (reported in the results)
        return None, f"import tohil: {error}"
    return tohil, None


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
# tohil loses a reference to a builtin it calls by name, every call (after
# some thousands `len` is freed and the process crashes), so its `len` is
# found in __main__ instead: the same function.
MAIN_NAMES = {"f": f, "obj": Thing(), "text": text, "main_len": len}


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
    peers: dict                     # name -> timer; a peer that cannot do it is left out
    peer_limit: float = 1.0         # of the fastest peer
    floor: object = None
    floor_limit: float = None
    floor_expected: object = None   # when the floor does less than the operation
    samples: dict = field(default_factory=dict)

    def contenders(self):
        timers = {"tclamp": self.tclamp, **self.peers, "floor": self.floor}
        return {name: timer for name, timer in timers.items() if timer is not None}


def as_text(value):
    """A result as text, whatever form the bridge gives it in: _tkinter gives
    ints and tuples, tohil its tclobj, tclamp str."""
    if isinstance(value, (list, tuple)):
        return " ".join(as_text(v) for v in value)
    return str(value)


def same(value, expected):
    """Whether a contender's result is the expected one.  A list expected is
    a list of those very values (types too); a tuple, any of its texts;
    anything else, its text."""
    if isinstance(expected, list):
        return isinstance(value, (list, tuple)) and list(value) == expected \
            and all(type(v) is type(e) for v, e in zip(value, expected))
    if isinstance(expected, tuple):
        return as_text(value) in expected
    return as_text(value) == str(expected)


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

# What the new-process tables run (and their rows in the main one): the
# round trip, and a new str whose UTF-8 Tcl reads once, then lets go.
ROUND_TRIP = {"tclamp": "interp.call('set', 't', OTHER_SOURCE[1:])",
              "_tkinter": "tk.call('set', 't', OTHER_SOURCE[1:])",
              "tohil": "tohil.call('set', 't', OTHER_SOURCE[1:], to=str)"}
BYTELENGTH = {"tclamp": "interp.call('string', 'bytelength', OTHER_SOURCE[1:])",
              "_tkinter": "tk.call('string', 'bytelength', OTHER_SOURCE[1:])",
              "tohil": "tohil.call('string', 'bytelength', OTHER_SOURCE[1:])"}
IN_NEW_PROCESSES = {"round trip": (ROUND_TRIP, OTHER_SOURCE[1:]),
                    "bytelength": (BYTELENGTH, len(OTHER_SOURCE[1:].encode()))}


def operations(tohil):
    if not Path(tclamp._bridge.__file__).resolve().is_relative_to(ROOT):
        sys.exit(f"tclamp was imported from {tclamp._bridge.__file__}, not from {ROOT}")
    vars(sys.modules["__main__"]).update(MAIN_NAMES)
    tk = tkinter.Tcl().tk
    interp = tclamp.Interp()
    for evaluate in [tk.eval, interp.eval] + ([tohil.eval] if tohil else []):
        evaluate(SETUP_TCL)

    thing = MAIN_NAMES["obj"]
    for name, function in (("f", f), ("obj.method", thing.method), ("pyeval", tkinter_eval),
                           ("h", tkinter_object_command(thing)), ("len", len), ("text", text)):
        tk.createcommand(name, function)
    for name, function in (("direct_f", f), ("direct_method", thing.method),
                           ("direct_m", thing.m), ("direct_len", len), ("direct_text", text)):
        interp.create_command(name, function)
    if tohil:
        tohil.register_callback("direct_f", f)
    interp.eval("set h [py eval obj]")

    def tcl(ours, theirs, floor=None, tohils=None):
        peers = {"_tkinter": TclTimer(tk.eval, theirs)}
        if tohil and tohils:
            peers["tohil"] = TclTimer(tohil.eval, tohils)
        return dict(tclamp=TclTimer(interp.eval, ours), peers=peers,
                    floor=TclTimer(interp.eval, floor) if floor else None)

    L = list(range(LIST_LENGTH))
    namespace = {"interp": interp, "tk": tk, "tohil": tohil, "ASCII_TEXT": ASCII_TEXT,
                 "OTHER_SOURCE": OTHER_SOURCE, "L": L}

    def python(ours, theirs, tohils=None):
        peers = {"_tkinter": PyTimer(theirs, namespace)}
        if tohil and tohils:
            peers["tohil"] = PyTimer(tohils, namespace)
        return dict(tclamp=PyTimer(ours, namespace), peers=peers)

    ops = [
        Operation("`py call f`", NOTHING, **tcl("py call f", "f", "direct_f", "tohil::call f")),
        # The command `py call` dispatches to, called by its name: the same
        # call without Tcl's ensemble dispatch (docs/py.md, "What the bridge
        # keeps").
        Operation("`::py::call f`", NOTHING, **tcl("::py::call f", "f", "direct_f", "tohil::call f")),
        Operation("`py call f a b`", NOTHING, floor_limit=1.5,
                  **tcl("py call f a b", "f a b", "direct_f a b", "tohil::call f a b")),
        Operation("`py call obj.method a`", NOTHING,
                  **tcl("py call obj.method a", "obj.method a", "direct_method a",
                        "tohil::call obj.method a")),
        Operation("`py eval 1+1` (the same text every time)", 2, floor_limit=5.0,
                  floor_expected=NOTHING,
                  **tcl("py eval 1+1", "pyeval 1+1", "direct_f 1+1", "tohil::eval 1+1")),
        Operation("handle method call `$h m a`", NOTHING,
                  **tcl("$h m a", "h m a", "direct_m a")),
        Operation("Python function as a Tcl command, `f a b`", NOTHING,
                  **tcl("direct_f a b", "f a b", None, "direct_f a b")),
        Operation("1 MiB ASCII string, Tcl -> Python (`py call len $s`)", MIB,
                  **tcl("py call len $s", "len $s", "direct_len $s", "tohil::call main_len $s")),
        Operation("1 Mi-char non-ASCII string, Python -> Tcl, then `string length` (from Tcl)",
                  MIB, **tcl("string length [py call text]", "string length [text]",
                              "string length [direct_text]", "string length [tohil::call text]")),
        Operation("Python host: `Interp.eval(\"set x\")`", "hello", peer_limit=0.5,
                  **python("interp.eval('set x')", "tk.eval('set x')", "tohil.eval('set x')")),
        Operation("Python host: `Interp.call(proc, \"a\", 1)`", 1,
                  **python("interp.call('p', 'a', 1)", "tk.call('p', 'a', 1)",
                           "tohil.call('p', 'a', 1)")),
        Operation("Python host: 1 MiB ASCII string round trip", ASCII_TEXT,
                  **python("interp.call('set', 't', ASCII_TEXT)", "tk.call('set', 't', ASCII_TEXT)",
                           "tohil.call('set', 't', ASCII_TEXT, to=str)")),
        Operation("Python host: 1 Mi-char non-ASCII round trip", OTHER_SOURCE[1:],
                  **python(ROUND_TRIP["tclamp"], ROUND_TRIP["_tkinter"], ROUND_TRIP["tohil"])),
        Operation("Python host: 1 Mi-char non-ASCII string, Python -> Tcl, then `string length`",
                  MIB, **python("interp.call('string', 'length', OTHER_SOURCE[1:])",
                                "tk.call('string', 'length', OTHER_SOURCE[1:])",
                                "tohil.call('string', 'length', OTHER_SOURCE[1:])")),
        Operation("Python host: 1 Mi-char non-ASCII string, Python -> Tcl, then its UTF-8 form "
                  "(`string bytelength`)", IN_NEW_PROCESSES["bytelength"][1],
                  **python(BYTELENGTH["tclamp"], BYTELENGTH["_tkinter"], BYTELENGTH["tohil"])),
        Operation("Python host: a Tcl list of 10^5 ints into a Python list of int", L,
                  **python("interp.call('lset', 'L', 0, 0, result=list)",
                           "list(tk.call('lset', 'L', 0, 0))",
                           "list(map(int, tohil.call('lset', 'L', 0, 0, to=list)))")),
        Operation("Python host: a Python list of 10^5 ints into a Tcl variable, the result "
                  "in each bridge's own form (`Interp.call(\"set\", \"y\", L)`)",
                  " ".join(map(str, L)),
                  **python("interp.call('set', 'y', L)", "tk.call('set', 'y', L)",
                           "tohil.call('set', 'y', L)")),
        Operation("Python host: a Python list of 10^5 ints to `llength`", LIST_LENGTH,
                  **python("interp.call('llength', L)", "tk.call('llength', L)",
                           "tohil.call('llength', L)")),
        Operation("Python host: a Python list of 10^5 ints into a Tcl variable, the result "
                  "as Python values", L,
                  **python("interp.call('set', 'y', L, result=object)", "tk.call('set', 'y', L)",
                           "list(map(int, tohil.call('set', 'y', L, to=list)))")),
        Operation("Python host: the same, `result=list`", L,
                  **python("interp.call('set', 'y', L, result=list)", "tk.call('set', 'y', L)",
                           "list(map(int, tohil.call('set', 'y', L, to=list)))")),
    ]
    versions = {"tclamp": interp.eval("info patchlevel"), "_tkinter": tk.call("info", "patchlevel")}
    if tohil:
        versions["tohil"] = tohil.eval("info patchlevel")
    return ops, versions


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


def check(op, name, timer):
    value = timer.result()
    expected = op.floor_expected if name == "floor" and op.floor_expected else op.expected
    if not same(value, expected):
        sys.exit(f"{op.label}: {name} returned {str(value)[:80]!r}, "
                 f"expected {str(expected)[:80]!r}")


def take_turns(plan, r, samples):
    """One round: the contenders take SLICES turns each, the one that goes
    first rotating with the round, so a burst of other work on the machine
    hits them alike."""
    turns = plan[r % len(plan):] + plan[:r % len(plan)]
    spent = {name: 0.0 for name, _, _ in turns}
    for _ in range(SLICES):
        for name, timer, n in turns:
            spent[name] += timer(n)
    for name, total in spent.items():
        samples.setdefault(name, []).append(total / SLICES)


def measure(ops, rounds, seconds):
    """Check each contender's result, then take `rounds` samples of each."""
    plan = {}
    for op in ops:
        for name, timer in op.contenders().items():
            check(op, name, timer)
            plan.setdefault(id(op), []).append((name, timer, calibrate(timer, seconds / SLICES)))
    for r in range(rounds):
        for op in ops:
            take_turns(plan[id(op)], r, op.samples)


def ratio(samples, ours, theirs):
    """The median of the rounds' ratios (each round measured side by side)."""
    return statistics.median(a / b for a, b in zip(samples[ours], samples[theirs]))


PEER_NAMES = ("_tkinter", "tohil")


def table(ops):
    rows = ["| operation | tclamp ns | _tkinter ns | tohil ns | ratio to the fastest peer "
            "| floor ns | ratio | targets | met |", "|---|---|---|---|---|---|---|---|---|"]
    met = total = 0
    for op in ops:
        med = {name: statistics.median(values) for name, values in op.samples.items()}
        fastest = min((name for name in PEER_NAMES if name in med), key=med.get)
        peer_ratio = ratio(op.samples, "tclamp", fastest)
        targets = [f"<= {op.peer_limit:.1f}x fastest peer"]
        results = [peer_ratio <= op.peer_limit]
        floor_cells = "– | –"
        if "floor" in med:
            floor_ratio = ratio(op.samples, "tclamp", "floor")
            floor_cells = f"{med['floor']:,.0f} | {floor_ratio:.2f}x"
            if op.floor_limit is not None:
                targets.append(f"<= {op.floor_limit:.1f}x floor")
                results.append(floor_ratio <= op.floor_limit)
        met += sum(results)
        total += len(results)
        peers = " | ".join(f"{med[name]:,.0f}" if name in med else "–" for name in PEER_NAMES)
        rows.append(f"| {op.label} | {med['tclamp']:,.0f} | {peers} | {peer_ratio:.2f}x "
                    f"({fastest}) | {floor_cells} | {'; '.join(targets)} | "
                    f"{'; '.join('met' if ok else 'MISSED' for ok in results)} |")
    return "\n".join(rows), met, total


def how_measured(ops):
    lines = ["How each row is measured:", ""]
    for op in ops:
        parts = []
        for name, timer in op.contenders().items():
            form = timer.script if isinstance(timer, TclTimer) else timer.statement
            where = "in Tcl" if isinstance(timer, TclTimer) else "in Python"
            parts.append(f"{name} `{form}` ({where})")
        lines.append(f"- {op.label}: " + "; ".join(parts))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# What `py call` pays that `::py::call` does not: Tcl's dispatch through a
# namespace ensemble, timed with no Python in it (a C command of Tcl's own,
# without a compiler, reached through an ensemble and by its name).

ENSEMBLE_ALONE = {"through an ensemble": "bench_ensemble abs 1",
                  "by its name": "::tcl::mathfunc::abs 1"}


def measure_ensemble(rounds, seconds):
    interp = tclamp.Interp()
    interp.eval("namespace ensemble create -command ::bench_ensemble"
                " -map {abs ::tcl::mathfunc::abs}")
    through, named = (TclTimer(interp.eval, script) for script in ENSEMBLE_ALONE.values())
    op = Operation("Tcl alone: an ensemble", 1, tclamp=through, peers={"by its name": named})
    measure([op], rounds, seconds)
    return {"through an ensemble": statistics.median(op.samples["tclamp"]),
            "by its name": statistics.median(op.samples["by its name"])}


def ensemble_lines(ops, alone):
    by_label = {op.label: op for op in ops}
    through, named = (statistics.median(by_label[label].samples["tclamp"])
                      for label in ("`py call f`", "`::py::call f`"))
    ensemble, direct = alone["through an ensemble"], alone["by its name"]
    return (f"| `{ENSEMBLE_ALONE['through an ensemble']}` against "
            f"`{ENSEMBLE_ALONE['by its name']}` (Tcl alone) | {ensemble:,.0f} | {direct:,.0f} "
            f"| {ensemble - direct:,.0f} |\n"
            f"| `py call f` against `::py::call f` (the table above) | {through:,.0f} "
            f"| {named:,.0f} | {through - named:,.0f} |")


# ---------------------------------------------------------------------------
# Rows of the main table in new processes, each library running first in turn.

ORDER_WARM_UP = 5       # calls each library makes, in the order, before timing
ORDER_CALLS = 20        # calls of each library's one timed run
ORDER_SPREAD = 1.1      # tclamp's slowest order against its fastest, at most


def order_child(what, order):
    """In a new process: each library in `order` is loaded and runs `what`
    (a key of IN_NEW_PROCESSES) ORDER_WARM_UP times, in that order; then
    each, in that order, runs it ORDER_CALLS times, timed, and reports its
    ns and minor page faults a call."""
    statements, expected = IN_NEW_PROCESSES[what]
    namespace = {"OTHER_SOURCE": OTHER_SOURCE}
    for name in order:
        if name == "tclamp":
            namespace["interp"] = tclamp.Interp()
        elif name == "_tkinter":
            namespace["tk"] = tkinter.Tcl().tk
        else:
            namespace["tohil"], why = load_tohil()
            if why:
                sys.exit(f"tohil: {why}")
        if not same(eval(statements[name], namespace), expected):
            sys.exit(f"{name}: {what} gave a wrong result")
        for _ in range(ORDER_WARM_UP):
            eval(statements[name], namespace)
    figures = {}
    for name in order:
        timer = timeit.Timer(statements[name], globals=namespace)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        ns = timer.timeit(ORDER_CALLS) / ORDER_CALLS * 1e9
        figures[name] = [ns, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
                         / ORDER_CALLS]
    print(json.dumps(figures))


def measure_orders(what, names, rounds):
    """For each library first in turn, `rounds` new processes running
    `what`, the orders rotating; {first: {name: [(ns, faults) of each
    process]}}."""
    orders = [[first] + [n for n in names if n != first] for first in names]
    samples = {order[0]: {} for order in orders}
    for r in range(rounds):
        for order in orders[r % len(orders):] + orders[:r % len(orders)]:
            out = subprocess.run([sys.executable, __file__, "--order-child",
                                  what + ":" + ",".join(order)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"order {order}: {out.stderr.strip()[-300:]}")
            for name, figures in json.loads(out.stdout.splitlines()[-1]).items():
                samples[order[0]].setdefault(name, []).append(figures)
    return samples


def order_table(samples):
    names = list(samples)
    rows = ["| first to run it | " + " | ".join(f"{n} ns" for n in names)
            + " | ratio to the fastest peer | tclamp's minor faults a call | target | met |",
            "|---|" + "---|" * len(names) + "---|---|---|---|"]
    met = total = 0
    ours = {}
    for first, figures in samples.items():
        med = {n: statistics.median(ns for ns, _ in figures[n]) for n in names}
        ours[first] = med["tclamp"]
        fastest = min((n for n in names if n != "tclamp"), key=med.get)
        r = statistics.median(a[0] / b[0] for a, b in zip(figures["tclamp"], figures[fastest]))
        faults = statistics.median(f for _, f in figures["tclamp"])
        met += r <= 1.0
        total += 1
        rows.append(f"| {first} | " + " | ".join(f"{med[n]:,.0f}" for n in names)
                    + f" | {r:.2f}x ({fastest}) | {faults:,.0f} | <= 1.0x fastest peer | "
                    + ("met" if r <= 1.0 else "MISSED") + " |")
    spread = max(ours.values()) / min(ours.values())
    met += spread <= ORDER_SPREAD
    total += 1
    rows.append(f"| tclamp: its slowest order / its fastest | {spread:.2f}x |"
                + " |" * (len(names) - 1) + f" | | <= {ORDER_SPREAD}x | "
                + ("met" if spread <= ORDER_SPREAD else "MISSED") + " |")
    return "\n".join(rows), met, total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--output", default=str(RESULTS))
    parser.add_argument("--order-child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    rounds, seconds = (3, 0.01) if options.quick else (ROUNDS, ROUND_SECONDS)
    if options.order_child:
        what, order = options.order_child.split(":")
        order_child(what, order.split(","))
        return
    tohil, tohil_why = load_tohil()
    ops, versions = operations(tohil)
    load_before = load_average()
    measure(ops, rounds, seconds)
    alone = measure_ensemble(rounds, seconds)
    rows, met, total = table(ops)
    names = ["tclamp", "_tkinter"] + (["tohil"] if tohil else [])
    trip_rows, trip_met, trip_total = order_table(measure_orders("round trip", names, rounds))
    bytes_rows, bytes_met, bytes_total = order_table(measure_orders("bytelength", names, rounds))
    load_after = load_average()
    tcls = ", ".join(f"{version} ({name})" for name, version in versions.items())
    tohil_line = (f"tohil {(TOHIL_BUILD / 'BUILD-INFO').read_text().split()[1]} is built from its "
                  f"source by ../shared/peers/build_tohil.sh (`TCLAMP_PEERS` names another\n"
                  f"folder); its Python module and its interpreter run in this process." if tohil
                  else f"tohil is NOT measured in this run: {tohil_why}.")
    text = f"""## The bridge against _tkinter and tohil (bench/compare.py)

{machine()}. Tcl in this process: {tcls}.

{rounds} rounds, medians. In each round the contenders of an operation take {SLICES} turns
of at least {seconds * 1000 / SLICES:.0f} ms each, the first turn rotating. All in one Python
process; load average {load_before} before, {load_after} after. Peers: CPython's own
`_tkinter` (the raw `tkinter.Tcl().tk`) and tohil.
{tohil_line}
A ratio is the median of the rounds' ratios to the peer with the lowest median.
Floor: the same Python function registered as a direct Tcl command in tclamp
(`Interp.create_command`), the bridge's own cost.
Reproduce: `make setup`, then `.venv/bin/python bench/compare.py` (`--quick`: 3 short rounds).

{rows}

{met} of {total} targets met.

Each bridge's own form of a result: tclamp `str` by default; _tkinter Python
values (`wantobjects`: a tuple of int for a list); tohil its `tclobj`, which
converts nothing until asked (`to=str`, or `to=list`, a list of str, where a
row needs Python values). tohil has no object handles: that row has no tohil
figure. tohil calls `main_len`, `len` bound in `__main__`: called by its
builtin name, tohil drops a reference to `len` on every call, and after some
thousands of calls the process crashes (tohil 4.4.2, alone in a process too).

### What the ensemble costs

`py` is a namespace ensemble, and Tcl runs a call through an ensemble twice:
it copies the words into a new list and dispatches the command it maps to.
Tcl compiles that into one dispatch only for an ensemble marked by a private
flag, and tclamp uses public Tcl API only. The same {rounds} rounds, with no
Python in the first row:

| call | through the ensemble ns | by the command's name ns | difference ns |
|---|---|---|---|
{ensemble_lines(ops, alone)}

### In new processes, whichever library ran first

Two rows of the table above, each in new processes: in each, the
libraries are loaded and run it {ORDER_WARM_UP} times in the order shown (the first one
first), then each in that order runs it {ORDER_CALLS} times, timed. {rounds} processes for
each order, the orders rotating; medians. Minor faults: pages that malloc had given
back to the system and took again, each a page fault (what made tclamp's figure
depend on what ran before it, up to issue 21).

The 1 Mi-character round trip (`{ROUND_TRIP['tclamp']}`):

{trip_rows}

{trip_met} of {trip_total} targets met.

A new 1 Mi-character str whose UTF-8 Tcl reads once (`{BYTELENGTH['tclamp']}`).
tclamp gives Tcl the text's code units and its UTF-8 (4.5 MB for this
text in Tcl 8.6), _tkinter its UTF-8 alone (2.4 MB); with the 2 MiB str the caller
made, what is freed after each call can pass glibc's threshold for giving
the top of the heap back to the system, and then every call takes its
pages afresh. In a new process it does; in the long process of the table
above, earlier rows have raised that threshold, and the row is level.

{bytes_rows}

{bytes_met} of {bytes_total} targets met.

{how_measured(ops)}
"""
    print(text)
    write_section("compare.py", text, Path(options.output))


if __name__ == "__main__":
    main()
