"""The torch:: commands against the same torch calls made from Python, and
against native Tcl commands that call ATen from C++: `make bench` (or
python bench/run.py [--quick] [--tclibtorch PATH.so]).

Prints tables of ratios, each measured side by side in one process, and
writes them to their section of bench/RESULTS.md with the machine and
versions.  The native baselines: bench/aten_direct.cpp (built here by
bench/native.py), and TCLIBTORCH's own autocast commands when given a
library built from a TCLIBTORCH checkout (--tclibtorch, or the
TCLAMP_BENCH_TCLIBTORCH environment variable; see bench/native.py).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import native
from results import RESULTS, machine, write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENV = dict(os.environ, TCLLIBPATH=str(ROOT / "tcl"), TCLAMP_PYTHON=sys.executable)
TARGETS = {"set_dtype": 1.5, "enable": 1.5, "disable": 1.5, "is_enabled": 2.0, "get_dtype": 2.0}
NATIVE_TARGET = 2.0   # issue 21: each command at most 2.0x the direct ATen call
FLOOR = "floor"   # a planned command whose one step is bool(): the bridge alone
HOW = """\
How to reproduce: `make setup`, then `.venv/bin/python bench/run.py` (`--quick` for
fewer rounds). It builds the direct-ATen baseline itself (bench/aten_direct.cpp,
with g++, against the headers of the venv's torch, into bench/build/). TCLIBTORCH
is measured only from a library you build from its checkout (none of its code is
in this repository): `git clone https://github.com/vicmay/TCLIBTORCH` (measured
so far: its commit 01e225c), then
`.venv/bin/python bench/native.py --tclibtorch TCLIBTORCH build/tclibtorch`
(its src/amp_precision.cpp unchanged, with an init of ours that registers its
four autocast command procedures as `tclibtorch::autocast_*`; its CMakeLists.txt
builds all of TCLIBTORCH against a CUDA libtorch, which this machine lacks), and
`.venv/bin/python bench/run.py --tclibtorch build/tclibtorch/tclibtorch_autocast.so`.
"""


def run_bench_tcl(rounds, calls, aten_so="", tclibtorch_so=""):
    """The samples of bench.tcl, and the load errors it reported."""
    out = subprocess.run(["tclsh", str(HERE / "bench.tcl"), str(rounds), str(calls),
                          str(aten_so), str(tclibtorch_so)],
                         env=ENV, capture_output=True, text=True, check=True).stdout
    samples, errors = defaultdict(list), {}
    for line in out.splitlines():
        if line.startswith("error:"):
            contender, _, message = line[len("error:"):].partition(" ")
            errors[contender] = message
            continue
        key, value = line.rsplit(" ", 1)
        samples[key].append(float(value))
    return samples, errors


def rss_line(program, code):
    """(seconds, max RSS in MiB) for one new process running `code`."""
    start = time.perf_counter()
    out = subprocess.run(program, input=code, env=ENV, capture_output=True, text=True,
                         check=True).stdout
    seconds = time.perf_counter() - start
    return seconds, int(out.split()[-1]) / 1024


def startup(rounds):
    tcl = "package require tclamp\nputs [py eval {__import__('resource').getrusage(0).ru_maxrss}]\n"
    python = "import torch\nprint(__import__('resource').getrusage(0).ru_maxrss)\n"
    results = defaultdict(list)
    for _ in range(rounds):     # alternate, so both see the same machine
        for name, program, code in (("tclsh", ["tclsh"], tcl), ("python", [sys.executable], python)):
            seconds, rss = rss_line(program, code)
            results[name + ":s"].append(seconds)
            results[name + ":rss"].append(rss)
    return {k: statistics.median(v) for k, v in results.items()}


def ratio(samples, key, baseline):
    """The median of the per-round ratios: each round's two figures were
    taken in turns, under the same conditions."""
    return statistics.median(a / b for a, b in zip(samples[key], samples[baseline]))


def table(samples, start):
    med = {k: statistics.median(v) for k, v in samples.items()}
    rows = ["| command | form | tclamp ns | Python `torch.f(...)` ns | ratio | target | met | "
            "Python, hoisted to locals, ns | ratio | empty Tcl proc ns |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(k for k in med if k.startswith("cmd:") and k != "cmd:" + FLOOR):
        name = key[4:]
        base, _, form = name.partition("/")
        to_python, to_local = ratio(samples, key, "py:" + name), ratio(samples, key, "pylocal:" + name)
        rows.append(f"| {base} | {form or 'positional'} | {med[key]:.0f} | {med['py:' + name]:.0f} | "
                    f"{to_python:.2f}x | {TARGETS[base]}x | "
                    f"{'yes' if to_python <= TARGETS[base] else 'no'} | "
                    f"{med['pylocal:' + name]:.0f} | {to_local:.2f}x | {med['noop:' + name]:.0f} |")
    bridge = med["cmd:" + FLOOR] - med["noop:" + FLOOR] - med["pylocal:" + FLOOR]
    rows += ["", "Where the time goes: a repeated autocast command runs ATen's own functions "
             "from C (its remembered plan's program, see src/tclamp/aten.py), with no Python "
             "and no GIL, so it is quicker than the same torch call made from Python. "
             f"A command whose plan calls Python instead, here `bool()` "
             f"({med['pylocal:' + FLOOR]:.0f} ns from Python), costs {med['cmd:' + FLOOR]:.0f} ns "
             f"against an empty Tcl proc's {med['noop:' + FLOOR]:.0f} ns: the GIL hand-off, "
             f"remembered plan and result add {bridge:.0f} ns (the `ATen path off` column below "
             "is the autocast commands on that path)."]
    train = med["train:tcl"] / med["train:python"]
    rows += ["", "| measure | tclamp | baseline | ratio | target |", "|---|---|---|---|---|",
             f"| training step, Tcl-driven vs pure Python under torch.autocast (ms) | "
             f"{med['train:tcl']:.3f} | {med['train:python']:.3f} | {train:.3f}x | 1.02x |",
             f"| start-up: `package require tclamp` in tclsh vs `import torch` in python (s) | "
             f"{start['tclsh:s']:.3f} | {start['python:s']:.3f} | "
             f"{start['tclsh:s'] / start['python:s']:.3f}x | 1.05x |",
             f"| resident memory after start-up (MiB) | {start['tclsh:rss']:.1f} | "
             f"{start['python:rss']:.1f} | {start['tclsh:rss'] / start['python:rss']:.3f}x | |",
             f"| resident memory growth over 1,000,000 calls after warm-up (KiB) | "
             f"{med['rss:after'] - med['rss:before']:.0f} | 0 | | 0 |"]
    return "\n".join(rows)


def native_table(samples, missing):
    """tclamp against the native commands, command by command; `missing`
    says why a baseline has no figures (not built, not given, not loaded)."""
    med = {k: statistics.median(v) for k, v in samples.items()}

    def against(name, contender, baseline="cmd"):
        """`contender`'s ns and baseline/contender, or dashes without figures."""
        key = f"{contender}:{name}"
        if key not in med or f"{baseline}:{name}" not in med:
            return "–", "–", None
        value = ratio(samples, f"{baseline}:{name}", key)
        return f"{med[key]:.0f}", f"{value:.2f}x", value

    rows = ["| command | form | tclamp ns | direct ATen C++ ns | ratio to it | target | met | "
            "TCLIBTORCH ns | tclamp / TCLIBTORCH | TCLIBTORCH / direct ATen | "
            "tclamp, ATen path off, ns | its ratio to direct ATen |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    names = sorted(k[4:] for k in med if k.startswith("cmd:") and k != "cmd:" + FLOOR) + [FLOOR]
    for name in names:
        base, _, form = name.partition("/")
        aten_ns, to_aten, value = against(name, "aten")
        tlt_ns, to_tlt, _ = against(name, "tlt")
        tlt_to_aten = against(name, "aten", "tlt")[1]
        off_ns, off_to_aten = against(name, "pypath")[0], against(name, "aten", "pypath")[1]
        if name == FLOOR:
            label, target, met = "floor: a plan that calls Python | `bridge_floor cpu` / `aten::nothing cpu`", "", ""
        else:
            label, target = f"{base} | {form or 'positional'}", f"{NATIVE_TARGET}x"
            met = "–" if value is None else "yes" if value <= NATIVE_TARGET else "no"
        rows.append(f"| {label} | {med['cmd:' + name]:.0f} | {aten_ns} | {to_aten} | {target} | "
                    f"{met} | {tlt_ns} | {to_tlt} | {tlt_to_aten} | "
                    f"{off_ns} | {off_to_aten} |")
    notes = [f"- {who}: {why}" for who, why in missing.items()]
    return "\n".join(rows + ([""] + notes if notes else []))


def native_baselines(tclibtorch):
    """(aten .so or "", TCLIBTORCH .so or "", {baseline: why it is missing})."""
    missing = {}
    try:
        aten = native.build_aten_direct()
    except native.BuildError as error:
        aten = ""
        missing["direct ATen C++"] = "NOT BUILT, so not measured: " + " ".join(str(error).split())
    if not tclibtorch:
        missing["TCLIBTORCH"] = ("not measured in this run: no library given "
                                 "(`--tclibtorch PATH.so`; how to build one is below)")
    elif not Path(tclibtorch).exists():
        missing["TCLIBTORCH"] = f"not measured: {tclibtorch} does not exist"
        tclibtorch = ""
    return aten, tclibtorch, missing


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--output", default=str(RESULTS))
    parser.add_argument("--tclibtorch", default=os.environ.get("TCLAMP_BENCH_TCLIBTORCH", ""),
                        metavar="PATH.so", help="TCLIBTORCH's autocast commands, built by "
                        "bench/native.py --tclibtorch (default: $TCLAMP_BENCH_TCLIBTORCH)")
    options = parser.parse_args()
    rounds, calls = (3, 20000) if options.quick else (7, 200000)
    aten, tclibtorch, missing = native_baselines(options.tclibtorch)
    samples, errors = run_bench_tcl(rounds, calls, aten, tclibtorch)
    for contender, message in errors.items():
        who = {"aten": "direct ATen C++", "tlt": "TCLIBTORCH"}[contender]
        missing[who] = f"NOT LOADED, so not measured: {message}"
    start = startup(rounds)
    text = table(samples, start)
    native_text = native_table(samples, missing)
    header = (f"## The torch:: commands (bench/run.py)\n\n{machine()}.\n"
              f"{rounds} rounds of {calls} calls each, in 5 turns in which the contenders "
              "alternate (each turn starts with the next one); ns are medians, and each ratio "
              "is the median of the rounds' ratios, measured side by side in one process "
              "(start-up: alternating new processes).\n\n")
    native_header = (
        "\n\nAgainst native commands, in the same process and turns: `aten::*` "
        "(bench/aten_direct.cpp), C++ Tcl commands that read the same words with plain "
        "string compares and call ATen's autocast functions directly (the steps of the "
        "torch:: command: set_dtype sets the dtype, then clears the autocast cache), the "
        "floor any in-process command has; and TCLIBTORCH's own C++ commands "
        "(`torch::autocast_*` in TCLIBTORCH, here as `tclibtorch::autocast_*`). TCLIBTORCH "
        "has no autocast_get_dtype; its autocast_enable without a dtype sets float16 "
        "(tclamp's keeps the device's dtype) and its set_dtype does not clear the "
        "cache. Each baseline answers the same string as the torch:: command (checked "
        "before timing).\n\n")
    print(text + native_header + native_text)
    write_section("run.py", header + text + native_header + native_text + "\n\n" + HOW,
                  Path(options.output))


if __name__ == "__main__":
    main()
