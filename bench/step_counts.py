"""README's float16 training step on the CPU, counted instead of timed:
`python bench/step_counts.py [--quick] [--tclsh TCLSH]` (`make bench` runs it).

Timing the step on a shared or noisy machine moves by more than tclamp's
own share of it (bench/train_step.py's rounds show the spread).  Here
callgrind counts, for the same five steps as train_step.py (the step in
pure Python, the README step driven from Tcl, the floor: its pieces as six
`::py::call`s, the floor with two Tcl procs made and deleted, and the floor
with the step's two tensors as handles that `py scope` releases), the
instructions run per step, with the level-1 cache misses and the
mispredicted branches of callgrind's simulated cache and branch
predictor, and, for the README step against Python's, in whose code the
excess falls: Tcl's, the bridge's, Python's, torch's or the C run-time's.
The counts repeat from run to run, so a change of a few hundred
instructions per step shows.  They are not time: a miss costs a
different number of cycles on each CPU, and callgrind's cache is not the
CPU's.  Only the measured steps are counted (train_step.tcl's "counts"
mode turns counting on and off around them, through a small library built
here), after the same warm-up as the timed runs.

Needs valgrind and a C compiler; without them it says so and writes
nothing.  Writes its section of bench/RESULTS.md.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from results import RESULTS, machine, write_section
from train_step import HERE, tcl_env

STEPS = {"python": "pure Python", "tcl": "the README step (Tcl)",
         "calls": "the floor: six `::py::call`s",
         "procs": "the floor with two Tcl procs made and deleted",
         "handles": "the floor with two handles and `py scope`"}
# callgrind's events, and what the table calls them.
EVENTS = (("Ir", "instructions"), ("I1mr", "instruction-cache misses (L1)"),
          ("D1mr", "data-cache read misses (L1)"), ("Bcm", "conditional branches mispredicted"),
          ("Bim", "indirect branches mispredicted"))
TOGGLE_C = """#include <valgrind/callgrind.h>
void toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""


def build_toggle(folder):
    """The library whose toggle() turns callgrind's counting over."""
    source, library = folder / "toggle.c", folder / "libtoggle.so"
    source.write_text(TOGGLE_C)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", str(library),
                    str(source)], check=True)
    return library


def count(tclsh, which, steps, folder, toggle):
    """Each event's count per step, for `steps` steps of one of the five,
    and by_library's split of it (whose sum is callgrind's summary)."""
    out = folder / f"callgrind.{which}"
    env = dict(tcl_env(), TCLAMP_COUNTS_TOGGLE=str(toggle))
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--cache-sim=yes",
                    "--branch-sim=yes", f"--callgrind-out-file={out}", tclsh,
                    str(HERE / "train_step.tcl"), "cpu", "0", str(steps), "counts", which],
                   env=env, check=True, capture_output=True)
    found = by_library(out, steps)
    return {name: sum(value for (_, event), value in found.items() if event == name)
            for name, _ in EVENTS}, found


# Which code each count falls in: a shared object's file name, by the
# start of its name.
LIBRARIES = (("Tcl (libtcl)", ("libtcl",)), ("the bridge (tclamp's C)", ("_bridge",)),
             ("Python (libpython)", ("libpython",)),
             ("torch (libtorch, libc10, ...)", ("libtorch", "libc10", "libgomp", "libshm")),
             ("the C and C++ run-time (libc, ld.so, libstdc++, ...)",
              ("libc.", "libc-", "ld-linux", "libm.", "libstdc++", "libgcc", "libpthread")))
OTHER = "the rest"
COST_LINE_START = frozenset("0123456789+-*")   # a position, absolute or relative


def library_of(path):
    name = path.rsplit("/", 1)[-1]
    return next((label for label, starts in LIBRARIES if name.startswith(starts)), OTHER)


def by_library(out, steps):
    """Each event's count per step in each library's code, read from
    callgrind's own file: a cost line counts for the object (ob=) it is
    in; the line after a calls= line is the callee's inclusive cost, which
    the callee's own lines count already."""
    names, objects, current, after_call, found = [], {}, "", False, {}
    with open(out) as lines:
        for line in lines:
            if line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith(("ob=", "cob=")):     # a name is given once, either way
                spec = line.partition("=")[2].strip()
                ident, _, name = spec.partition(" ") if spec.startswith("(") else ("", "", spec)
                if name:
                    objects[ident] = name
                if line.startswith("ob="):
                    current = objects.get(ident, name)
            elif line.startswith("calls="):
                after_call = True
            elif line[:1] in COST_LINE_START:
                if after_call:
                    after_call = False
                    continue
                library = library_of(current)
                for name, value in zip(names, line.split()[1:]):
                    found[library, name] = found.get((library, name), 0) + int(value) / steps
    return found


def table(counts, steps):
    """One row per step: each event's count per step, and for all but
    Python its excess over Python."""
    python = counts["python"]
    lines = [f"{steps} steps of each after the warm-up, counted by callgrind "
             "(`--cache-sim=yes --branch-sim=yes`); the model: 2 linear layers of width 32, "
             "a batch of 16, one thread.  Each cell: the count per step, then (but for "
             "Python's) its excess over Python's.",
             "",
             "| per step | " + " | ".join(label for _, label in EVENTS) + " |",
             "|---|" + "---|" * len(EVENTS)]
    for which, step in STEPS.items():
        cells = []
        for name, _ in EVENTS:
            value = counts[which][name]
            cells.append(f"{value:,.0f}" if which == "python" else
                         f"{value:,.0f} ({value - python[name]:+,.0f}, "
                         f"{value / python[name]:.3f}x)")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def library_table(libraries):
    """Where the README step's excess over the Python step lies: each
    library's share of each event, per step."""
    tcl, python = libraries["tcl"], libraries["python"]
    lines = ["Where the README step's excess over Python's lies, by the code that ran it "
             "(per step; callgrind's counts summed by the shared object that ran them):",
             "",
             "| code | " + " | ".join(label for _, label in EVENTS) + " |",
             "|---|" + "---|" * len(EVENTS)]
    for label in [label for label, _ in LIBRARIES] + [OTHER]:
        cells = [f"{tcl.get((label, name), 0) - python.get((label, name), 0):+,.0f}"
                 for name, _ in EVENTS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--tclsh", default="tclsh")
    parser.add_argument("--output", default=str(RESULTS))
    options = parser.parse_args()
    missing = [tool for tool in ("valgrind", os.environ.get("CC", "cc")) if not shutil.which(tool)]
    if missing:
        print(f"step_counts.py: nothing counted: {' and '.join(missing)} not found")
        return
    steps = 100 if options.quick else 400
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        toggle = build_toggle(folder)
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            found = {which: pool.submit(count, options.tclsh, which, steps, folder, toggle)
                     for which in STEPS}
            results = {which: future.result() for which, future in found.items()}
    counts = {which: result[0] for which, result in results.items()}
    text = (table(counts, steps) + "\n\n"
            + library_table({which: result[1] for which, result in results.items()}))
    print(text)
    header = (f"## README's training step, counted: instructions, cache and branch misses "
              f"(bench/step_counts.py)\n\n{machine(options.tclsh)}.\n\n")
    write_section("step_counts.py", header + text + "\n\nHow to reproduce: `make setup`, then "
                  "`.venv/bin/python bench/step_counts.py` (valgrind and a C compiler).",
                  Path(options.output))


if __name__ == "__main__":
    sys.exit(main())
