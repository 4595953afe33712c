"""What users run: README's float16 training step, driven from Tcl, against
the same step in pure Python, on the CPU (a small model, so that the step's
own cost shows) and on CUDA where torch sees a GPU:
`python bench/train_step.py [--quick] [--device cpu|cuda|all] [--profile]`
(`make bench` runs it).

Both steps run in one tclsh (bench/train_step.tcl) on one model, optimizer
and scaler, in rounds in which they take turns and start in turn; the ratio
is the median of the rounds' ratios, with its spread (lowest and highest).
A third step runs in the same rounds: the same pieces as six Python
functions, each called from Tcl (`::py::call`) and keeping the step's
tensors in Python, with no torch:: command, handle or scope.  It is the
floor of any step that Tcl drives one piece at a time.  A fourth is that
floor with the step's two tensors (the loss and the scaled loss) also
handed to Tcl, as handles that `py scope` releases at the step's end, as
the README step's are; a fifth makes and deletes two plain Tcl procs at the
same places instead.  So the README step's excess over Python splits into
the floor, the handles and scope (and of those, what making and deleting a
Tcl command costs Tcl itself, with no Python), and the torch:: commands
with the handle's method call.  Then the README step, the Python step and
the floor run again, in short turns, with a time stamp between the step's
pieces, which gives each piece's cost inside the step (a command costs more
there than in a tight loop: the step's own work evicts it from the caches);
the stamps' own cost is measured in the same steps and taken off.  The
floor's pieces show what a bare return to Tcl costs at each place in the
step, and so what a command, handle or scope adds above that; and, as each
floor piece's function also times itself from inside, how much of that
return is torch's own work running slower between calls from Tcl, and how
much the call itself.  The README step is stamped a second time with the
scaler's three commands replaced by the same methods called through the
scaler's handle (`$scaler step $optimizer`): the two differ only there, so
each command's own cost over the bridge's generic call, at its place in the
step, shows apart from the return to Tcl and the handles.  The stamped
steps run in `STAMP_RUNS` tclsh processes: a piece's cost moves between
processes more than within one, so each piece is the median over the
processes, with the lowest and highest.
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
STAMP_RUNS = 3                # tclsh processes that stamp the pieces (the timed one too)
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
# The same pieces as the floor can stamp them: its autocast block is inside
# its forward call, and the step's tensors go in its last call (in the Tcl
# step, when the scope ends).
FLOOR_PIECES = (
    ("zero_grad", ("zero_grad",)),
    ("the autocast block with its forward pass", ("block", "forward")),
    ("scale", ("scale",)),
    ("backward", ("backward",)),
    ("step", ("step",)),
    ("update, with the step's tensors going (the scope's end)", ("update", "scope")),
)
# The scaler's commands, and the same methods called through the scaler's
# handle in train_step.tcl's methods_stamped.
COMMANDS = (
    ("scale", "`torch::grad_scaler_scale $scaler $loss`", "`$scaler scale $loss`"),
    ("step", "`torch::grad_scaler_step $scaler $optimizer`", "`$scaler step $optimizer`"),
    ("update", "`torch::grad_scaler_update $scaler`", "`$scaler update`"),
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


def run_tcl(tclsh, device, rounds, steps, mode=""):
    """train_step.tcl's output; mode: "" (rounds, then stamps), "stamps" or "profile"."""
    script = HERE / "train_step.tcl"
    return subprocess.run([tclsh, str(script), device, str(rounds), str(steps)]
                          + ([mode] if mode else []), env=tcl_env(),
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


def inner_us(rows):
    """Median µs of each floor piece timed inside its Python function (see
    inner_stamped), less the timing's own cost (the row's last, empty)."""
    return {label: statistics.median(row[i] - row[-1] for row in rows) / 1000
            for i, (label, _) in enumerate(FLOOR_PIECES)}


def median_and_spread(values):
    values = list(values)
    return statistics.median(values), min(values), max(values)


def measure(tclsh, device, rounds, steps, stamp_runs):
    outs = [run_tcl(tclsh, device, rounds, steps)]
    outs += [run_tcl(tclsh, device, 0, steps, "stamps") for _ in range(stamp_runs - 1)]
    took = {"tcl": [], "python": [], "calls": [], "procs": [], "handles": []}  # ns, each round
    runs = []       # each process's pieces: {"tcl"|"methods"|"python"|"calls": {piece: µs},
                    #                         "inner": ...}
    for out in outs:
        stamps = {"tcl": [], "methods": [], "python": [], "calls": [], "inner": []}
        for line in out.splitlines():
            kind, *values = line.split()
            if kind == "round":
                for name, ns in zip(took, map(int, values)):
                    took[name].append(ns)
            elif kind.endswith("_stamps") and kind.removesuffix("_stamps") in stamps:
                stamps[kind.removesuffix("_stamps")].append([int(v) for v in values])
        inner = stamps.pop("inner")
        runs.append({step: pieces_us(rows) for step, rows in stamps.items()})
        runs[-1]["inner"] = inner_us(inner)
    # Each against Python: the median of the rounds' ratios, lowest, highest.
    ratios = {name: [ns / python for ns, python in zip(took[name], took["python"])]
              for name in took if name != "python"}
    # Each piece: the median over the processes, and the spread of its excess.
    pieces = {}
    for name, *_ in PIECES:
        over = [run["tcl"][name] - run["python"][name] for run in runs]
        pieces[name] = {step: statistics.median(run[step][name] for run in runs)
                        for step in ("tcl", "python")}
        pieces[name]["over"] = median_and_spread(over)
    # Against the floor: each step's excess over Python, and Tcl's over the floor.
    floor = {}
    for label, names in FLOOR_PIECES:
        excess = [{step: sum(run[step][name] - run["python"][name] for name in names)
                   for step in ("tcl", "calls")} for run in runs]
        above = [e["tcl"] - e["calls"] for e in excess]
        # The floor's excess, split: its Python code's own time over Python's
        # (torch's work, slower between calls from Tcl), and the call.
        own = [run["inner"][label] - sum(run["python"][name] for name in names)
               for run in runs]
        floor[label] = {"tcl": statistics.median(e["tcl"] for e in excess),
                        "calls": statistics.median(e["calls"] for e in excess),
                        "above": median_and_spread(above),
                        "own": median_and_spread(own),
                        "call": median_and_spread(e["calls"] - o for e, o in zip(excess, own))}
    # Each scaler command against its method through the handle, same step.
    commands = {name: {"tcl": statistics.median(run["tcl"][name] for run in runs),
                       "methods": statistics.median(run["methods"][name] for run in runs),
                       "over": median_and_spread(run["tcl"][name] - run["methods"][name]
                                                 for run in runs)}
                for name, *_ in COMMANDS}
    return {"ms": {name: statistics.median(ns) / steps / 1e6 for name, ns in took.items()},
            "ratio": {name: median_and_spread(r) for name, r in ratios.items()},
            "pieces": pieces, "floor": floor, "commands": commands, "stamp_runs": len(runs)}


def spread(triple):
    """A median with its lowest and highest, in µs."""
    return "{:+.1f} ({:+.1f} to {:+.1f})".format(*triple)


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
                           "calls", "", ""),
            against_python("the floor, with two Tcl procs made and deleted in the step "
                           "(ms, median)", "procs", "", ""),
            against_python("the floor, the step's two tensors also held by handles that "
                           "`py scope` releases (ms, median)", "handles", "", ""), "",
            f"Each piece inside the step (µs; in each of {m['stamp_runs']} tclsh processes the "
            f"median of {steps} stamped steps of each, then the median over the "
            "processes):", "",
            "| piece | Tcl runs | Python runs | Tcl µs | Python µs | over Python "
            "(lowest-highest process) | target | met |",
            "|---|---|---|---|---|---|---|---|"]
    for name, tcl_runs, python_runs, piece_target in PIECES:
        piece = m["pieces"][name]
        over = piece["over"][0]
        met = "" if piece_target is None else "yes" if over <= piece_target else "no"
        rows.append(f"| {name} | {tcl_runs} | {python_runs} | {piece['tcl']:.1f} | "
                    f"{piece['python']:.1f} | {spread(piece['over'])} | "
                    f"{'' if piece_target is None else f'{piece_target:g} µs'} | {met} |")
    against, split = [], []
    for label, _ in FLOOR_PIECES:
        piece = m["floor"][label]
        against.append(f"| {label} | {piece['tcl']:+.1f} | {piece['calls']:+.1f} | "
                       f"{spread(piece['above'])} |")
        split.append(f"| {label} | {piece['calls']:+.1f} | {spread(piece['own'])} | "
                     f"{spread(piece['call'])} |")
    rows += ["", "Against the floor (µs, medians over the same processes): the floor runs "
             "each piece as one `::py::call` of a Python function, so its excess is what a "
             "return to Tcl costs at that place in the step, and the last column is what "
             "tclamp's command, handle or scope adds above that.", "",
             "| piece | Tcl over Python | floor over Python | Tcl over the floor "
             "(lowest-highest process) |", "|---|---|---|---|"] + against
    rows += ["", "Each scaler command against the same method called through the scaler's "
             "handle, at the same place in the same step (µs, medians over the same "
             "processes): the two steps differ only there, so the last column is what the "
             "command itself costs over the bridge's generic call.", "",
             "| piece | Tcl runs | the same through the handle | command µs | method µs | "
             "command over the method (lowest-highest process) |", "|---|---|---|---|---|---|"]
    for name, command, method in COMMANDS:
        c = m["commands"][name]
        rows.append(f"| {name} | {command} | {method} | {c['tcl']:.1f} | {c['methods']:.1f} | "
                    f"{spread(c['over'])} |")
    rows += ["", "The floor's excess, split (µs, medians over the same processes): each "
             "piece's Python function also timed itself from inside, in steps of their own "
             "among the others, so its first column is what torch's own work costs over "
             "the Python step's at that place when Tcl drives the step, and the second what "
             "the call from Tcl and back costs.", "",
             "| piece | floor over Python | its Python code over Python's (lowest-highest) "
             "| the call (lowest-highest) |", "|---|---|---|---|"] + split
    return "\n".join(rows)


def profile_rows(tclsh, device, steps=500, rows=12):
    """The head of cProfile's table for the Tcl-driven step (inside tclsh)."""
    lines = run_tcl(tclsh, device, 1, steps, "profile").splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
    return (f"cProfile inside tclsh, {steps} Tcl-driven steps, by own time (Tcl and the "
            "bridge's C show under the Python function that entered them):\n\n```text\n"
            + "\n".join(lines[start:start + 1 + rows]) + "\n```")


def torch_says(expression):
    """What this Python's torch answers, printed, in a process of its own
    (the bench's own process imports no torch)."""
    return subprocess.run([sys.executable, "-c", f"import torch; print({expression})"],
                          capture_output=True, text=True).stdout.strip()


def cuda_available():
    return torch_says("torch.cuda.is_available()") == "True"


def gpu():
    """The GPU the cuda rows ran on, for the machine line."""
    return (torch_says("f'{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}'")
            or "a GPU torch did not name")


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
            print(run_tcl(options.tclsh, device, 1, 2000, "profile"))
        return
    rounds, steps = (5, 200) if options.quick else (21, 500)
    tables = []
    for device in devices:
        m = measure(options.tclsh, device, rounds, steps, STAMP_RUNS)
        tables.append(table(device, rounds, steps, m) + "\n\n" + profile_rows(options.tclsh, device))
        print(tables[-1] + "\n", flush=True)
    header = (f"## README's training step, Tcl against pure Python (bench/train_step.py)\n\n"
              f"{machine(options.tclsh)}" + (f"; {gpu()}" if "cuda" in devices else "") + ".\n\n")
    write_section("train_step.py", header + "\n\n".join(tables) + "\n\n" + HOW,
                  Path(options.output))


if __name__ == "__main__":
    main()
