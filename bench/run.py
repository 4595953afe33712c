"""The torch:: commands against the same torch calls made from Python:
`make bench` (or python bench/run.py [--quick]).

Prints a table of ratios, each measured side by side in one process, and
writes it to its section of bench/RESULTS.md with the machine and versions.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from results import RESULTS, machine, write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENV = dict(os.environ, TCLLIBPATH=str(ROOT / "tcl"), TCLAMP_PYTHON=sys.executable)
TARGETS = {"set_dtype": 1.5, "enable": 1.5, "disable": 1.5, "is_enabled": 2.0, "get_dtype": 2.0}
FLOOR = "floor"   # a planned command whose one step is bool(): the bridge alone


def run_bench_tcl(rounds, calls):
    out = subprocess.run(["tclsh", str(HERE / "bench.tcl"), str(rounds), str(calls)],
                         env=ENV, capture_output=True, text=True, check=True).stdout
    samples = defaultdict(list)
    for line in out.splitlines():
        key, value = line.rsplit(" ", 1)
        samples[key].append(float(value))
    return samples


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
    rows += ["", f"Where the time goes: an empty Tcl proc call costs {med['noop:' + FLOOR]:.0f} ns "
             f"in this loop; a tclamp command whose plan calls `bool()` ({med['pylocal:' + FLOOR]:.0f} ns "
             f"from Python) costs {med['cmd:' + FLOOR]:.0f} ns, so the bridge itself (GIL hand-off, "
             f"remembered plan, result) adds {bridge:.0f} ns to each call; the rest is torch's "
             "own function."]
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds and calls")
    parser.add_argument("--output", default=str(RESULTS))
    options = parser.parse_args()
    rounds, calls = (3, 20000) if options.quick else (7, 200000)
    samples = run_bench_tcl(rounds, calls)
    start = startup(rounds)
    text = table(samples, start)
    header = (f"## The torch:: commands (bench/run.py)\n\n{machine()}.\n"
              f"{rounds} rounds of {calls} calls each, in 5 turns that alternate with the "
              "baseline's; ns are medians, and each ratio is the median of the rounds' ratios, "
              "measured side by side in one process (start-up: alternating new processes).\n\n")
    print(text)
    write_section("run.py", header + text, Path(options.output))


if __name__ == "__main__":
    main()
