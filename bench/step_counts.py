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
predictor.  The counts repeat from run to run, so a change of a few
hundred instructions per step shows.  They are not time: a miss costs a
different number of cycles on each CPU, and callgrind's cache is not the
CPU's.  Only the measured steps are counted (train_step.tcl's "counts"
mode turns counting on and off around them, through a small library built
here), after the same warm-up as the timed runs.

Needs valgrind and a C compiler; without them it says so and writes
nothing.  Writes its section of bench/RESULTS.md.
"""
import argparse
import os
import re
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
    """Each event's count per step, for `steps` steps of one of the three."""
    out = folder / f"callgrind.{which}"
    env = dict(tcl_env(), TCLAMP_COUNTS_TOGGLE=str(toggle))
    subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", "--cache-sim=yes",
                    "--branch-sim=yes", f"--callgrind-out-file={out}", tclsh,
                    str(HERE / "train_step.tcl"), "cpu", "0", str(steps), "counts", which],
                   env=env, check=True, capture_output=True)
    text = out.read_text()
    names = re.search(r"^events: (.*)$", text, re.M).group(1).split()
    totals = re.search(r"^summary: (.*)$", text, re.M).group(1).split()
    per_step = {name: int(total) / steps for name, total in zip(names, totals)}
    return {name: per_step[name] for name, _ in EVENTS}


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
            counts = {which: future.result() for which, future in found.items()}
    text = table(counts, steps)
    print(text)
    header = (f"## README's training step, counted: instructions, cache and branch misses "
              f"(bench/step_counts.py)\n\n{machine(options.tclsh)}.\n\n")
    write_section("step_counts.py", header + text + "\n\nHow to reproduce: `make setup`, then "
                  "`.venv/bin/python bench/step_counts.py` (valgrind and a C compiler).",
                  Path(options.output))


if __name__ == "__main__":
    sys.exit(main())
