"""What users run: README's float16 training step, driven from Tcl, against
the same step in pure Python, on the CPU (a small model, so that the step's
own cost shows) and on CUDA where torch sees a GPU:
`python bench/train_step.py [--quick] [--device cpu|cuda|all] [--profile]`
(`make bench` runs it).

Both steps run in one tclsh (bench/train_step.tcl) on one model, optimizer
and scaler, in rounds in which they take turns and start in turn; the
ratio is the median of the rounds' ratios, with its spread (lowest and
highest).  A third step runs in the same rounds: the same pieces as six
Python functions, each called from Tcl (`::py::call`) and keeping the
step's tensors in Python, with no torch:: command, handle or scope.  It is
the floor of any step that Tcl drives one piece at a time.  Then the first
two run once more with a time stamp between the step's pieces, which gives
each piece's cost inside the step (a command costs more there than in a
tight loop: the step's own work evicts it from the caches); the stamps'
own cost is measured in the same steps and taken off.
--profile prints cProfile's view of the Tcl-driven step (inside tclsh).

Writes its section of bench/RESULTS.md, one table per device.
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from results import RESULTS, ROOT, machine, write_section

HERE = Path(__file__).resolve().parent
TARGETS = {"cpu": 1.05, "cuda": 1.02}
COMMAND_TARGET_US = 2.0       # each torch:: command over its torch call, in the step
SCOPE_TARGET_US = 5.0
# (piece, what the Tcl step runs, what the Python step runs, its target)
PIECES = (
    ("scope", "`py scope {...}`", "(deleting the step's tensors)", SCOPE_TARGET_US),
    ("zero_grad", "`$optimizer zero_grad`", "`optimizer.zero_grad()`", None),
    ("block", "`torch::autocast -device_type D -dtype float16 {...}`",
     "`with torch.autocast(D, dtype=torch.float16):`", COMMAND_TARGET_US),
    ("forward", "`py eval {model(batch).float().pow(2).mean()}`", "the same expression", None),
    ("scale", "`torch::grad_scaler_scale $scaler $loss`", "`scaler.scale(loss)`",
     COMMAND_TARGET_US),
    ("backward", "`$scaled backward`", "`scaled.backward()`", None),
    ("step", "`torch::grad_scaler_step $scaler $optimizer`", "`scaler.step(optimizer)`",
     COMMAND_TARGET_US),
    ("update", "`torch::grad_scaler_update $scaler`", "`scaler.update()`", COMMAND_TARGET_US),
)
HOW = ("How to reproduce: `make setup`, then `.venv/bin/python bench/train_step.py` "
       "(`--quick` for fewer rounds; `--device cuda` on a GPU machine, where "
       "`make gpu-check` runs it too).")


def tcl_env():
    """tclamp from this checkout, before anything TCLLIBPATH names already
    (a GPU machine's unpacked packages), with this Python."""
    paths = [str(ROOT / "tcl")] + ([os.environ["TCLLIBPATH"]] if os.environ.get("TCLLIBPATH")
                                   else [])
    return dict(os.environ, TCLLIBPATH=" ".join(paths), TCLAMP_PYTHON=sys.executable)


def run_tcl(tclsh, device, rounds, steps, profile=False):
    script = HERE / "train_step.tcl"
    return subprocess.run([tclsh, str(script), device, str(rounds), str(steps)]
                          + (["profile"] if profile else []), env=tcl_env(),
                          capture_output=True, text=True, check=True).stdout


def pieces_us(rows):
    """Median µs of each piece over the stamped steps (see train_step.tcl),
    less the stamps' own cost (the empty pair at each row's end)."""
    found = {name: [] for name, *_ in PIECES}
    for s in rows:
        c = s[11] - s[10]
        found["scope"].append((s[10] - s[0]) - (s[9] - s[1]) - 2 * c)
        found["zero_grad"].append(s[2] - s[1] - c)
        found["block"].append((s[5] - s[2]) - (s[4] - s[3]) - 2 * c)
        found["forward"].append(s[4] - s[3] - c)
        found["scale"].append(s[6] - s[5] - c)
        found["backward"].append(s[7] - s[6] - c)
        found["step"].append(s[8] - s[7] - c)
        found["update"].append(s[9] - s[8] - c)
    return {name: statistics.median(values) / 1000 for name, values in found.items()}


def measure(tclsh, device, rounds, steps):
    out = run_tcl(tclsh, device, rounds, steps)
    took = {"tcl": [], "python": [], "calls": []}     # ns of each round's steps
    stamps = {"tcl": [], "python": []}
    for line in out.splitlines():
        kind, *values = line.split()
        if kind == "round":
            for name, ns in zip(took, map(int, values)):
                took[name].append(ns)
        elif kind in ("tcl_stamps", "python_stamps"):
            stamps[kind.partition("_")[0]].append([int(v) for v in values])
    # Each against Python: the median of the rounds' ratios, lowest, highest.
    ratios = {name: [ns / python for ns, python in zip(took[name], took["python"])]
              for name in ("tcl", "calls")}
    return {"ms": {name: statistics.median(ns) / steps / 1e6 for name, ns in took.items()},
            "ratio": {name: (statistics.median(r), min(r), max(r)) for name, r in ratios.items()},
            "tcl": pieces_us(stamps["tcl"]), "python": pieces_us(stamps["python"])}


def table(device, rounds, steps, m):
    target = TARGETS[device]

    def against_python(label, name, target_cell, met_cell):
        ratio, low, high = m["ratio"][name]
        return (f"| {label} | {m['ms'][name]:.3f} | {m['ms']['python']:.3f} | "
                f"{ratio:.3f}x ({low:.3f}-{high:.3f}) | {target_cell} | {met_cell} |")
    rows = [f"### {device}", "",
            f"{rounds} rounds of {steps} steps of each; the model: "
            + ("2 linear layers of width 32, a batch of 16, one thread" if device == "cpu"
               else "9 linear layers of width 1024, a batch of 512") + ".", "",
            "| measure | tclamp (Tcl) | pure Python | ratio (lowest-highest) | target | met |",
            "|---|---|---|---|---|---|",
            against_python("one step (ms, median)", "tcl", f"{target:.2f}x",
                           "yes" if m["ratio"]["tcl"][0] <= target else "no"),
            against_python("the floor: six `::py::call`s of the step's pieces (ms, median)",
                           "calls", "", ""), "",
            "Each piece inside the step (µs, median of the stamped steps):", "",
            "| piece | Tcl runs | Python runs | Tcl µs | Python µs | over Python | target | met |",
            "|---|---|---|---|---|---|---|---|"]
    for name, tcl_runs, python_runs, piece_target in PIECES:
        over = m["tcl"][name] - m["python"][name]
        met = "" if piece_target is None else "yes" if over <= piece_target else "no"
        rows.append(f"| {name} | {tcl_runs} | {python_runs} | {m['tcl'][name]:.1f} | "
                    f"{m['python'][name]:.1f} | {over:+.1f} | "
                    f"{'' if piece_target is None else f'{piece_target:g} µs'} | {met} |")
    return "\n".join(rows)


def profile_rows(tclsh, device, steps=500, rows=12):
    """The head of cProfile's table for the Tcl-driven step (inside tclsh)."""
    lines = run_tcl(tclsh, device, 1, steps, profile=True).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
    return (f"cProfile inside tclsh, {steps} Tcl-driven steps, by own time (Tcl and the "
            "bridge's C show under the Python function that entered them):\n\n```text\n"
            + "\n".join(lines[start:start + 1 + rows]) + "\n```")


def cuda_available():
    code = "import torch; print(torch.cuda.is_available())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True).stdout.strip() == "True"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer rounds and steps")
    parser.add_argument("--device", choices=("cpu", "cuda", "all"), default="all",
                        help="all: cpu, and cuda where torch sees a GPU")
    parser.add_argument("--tclsh", default="tclsh")
    parser.add_argument("--profile", action="store_true",
                        help="print cProfile's view of the Tcl-driven step, and stop")
    parser.add_argument("--output", default=str(RESULTS))
    options = parser.parse_args()
    devices = ["cpu", "cuda"] if options.device == "all" else [options.device]
    if options.device == "all" and not cuda_available():
        devices = ["cpu"]
    if options.profile:
        for device in devices:
            print(run_tcl(options.tclsh, device, 1, 2000, profile=True))
        return
    rounds, steps = (5, 200) if options.quick else (21, 500)
    tables = []
    for device in devices:
        m = measure(options.tclsh, device, rounds, steps)
        tables.append(table(device, rounds, steps, m) + "\n\n" + profile_rows(options.tclsh, device))
        print(tables[-1] + "\n", flush=True)
    header = (f"## README's training step, Tcl against pure Python (bench/train_step.py)\n\n"
              f"{machine(options.tclsh)}.\n\n")
    write_section("train_step.py", header + "\n\n".join(tables) + "\n\n" + HOW,
                  Path(options.output))


if __name__ == "__main__":
    main()
