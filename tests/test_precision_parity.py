"""A differential test of the precision commands (set_fp32_precision,
get_fp32_precision, set_float32_matmul_precision,
get_float32_matmul_precision) against torch itself.

Each seeded sequence mixes the Tcl commands, in every documented form
(positional, -name value, camelCase, at top level and inside a proc,
repeated so that remembered plans run), with changes made through torch's
own Python API (the fp32_precision attributes, the legacy
set_float32_matmul_precision and allow_tf32 switches, the backends' flags()
context managers around Tcl calls) and with bad words.  The sequence runs
twice from the same start: once with torch's own API alone (the reference:
what each Tcl command is documented to call, and the documented refusal
for a bad call), once through Tcl.  Every step's outcome (result or error,
errorCode, warnings torch raised) and torch's whole precision state after
it must agree; in the Tcl run every Tcl getter must also read what torch's
own getters read after every step, and a refused call must change nothing.
The same sequences run again in a second Tcl thread (the Thread package):
the settings are the process's, so that thread's commands read and change
what torch reads from the main one."""
import random
import warnings
from unittest import mock

import pytest
import torch

import tclamp
from tclamp import TclError

pytestmark = pytest.mark.skipif(not hasattr(torch._C, "_get_fp32_precision_getter"),
                                reason="torch < 2.9 has no per-backend fp32 precision")

PAIRS = {"generic": ("generic", "all"), "cuda.matmul": ("cuda", "matmul"),
         "cudnn": ("cuda", "all"), "cudnn.conv": ("cuda", "conv"), "cudnn.rnn": ("cuda", "rnn"),
         "mkldnn": ("mkldnn", "all"), "mkldnn.matmul": ("mkldnn", "matmul"),
         "mkldnn.conv": ("mkldnn", "conv"), "mkldnn.rnn": ("mkldnn", "rnn")}
CUDA_PRECISIONS = ("none", "ieee", "tf32")
CPU_PRECISIONS = ("none", "ieee", "tf32", "bf16")
PRECISIONS = {b: CPU_PRECISIONS if b == "generic" or b.startswith("mkldnn") else CUDA_PRECISIONS
              for b in PAIRS}
LEGACY = ("highest", "high", "medium")


def one_of(words):
    return ", ".join(words[:-1]) + f", or {words[-1]}"


INVALID_BACKEND = f"Invalid backend. Use {one_of(tuple(PAIRS))}"
MIXED = ("Named argument {} after positional ones: give every argument as a -name value"
         " pair, or every one positionally")

# name: (camel, params: ((name, flag, valid words, default or None), ...),
#        usage, invalid message per param, missing message)
SPECS = {
    "set_fp32_precision": (
        "setFp32Precision",
        (("precision", "-precision", CPU_PRECISIONS, None), ("backend", "-backend", tuple(PAIRS), "generic")),
        "Usage: torch::set_fp32_precision precision [backend]",
        {"precision": f"Invalid precision. Use {one_of(CPU_PRECISIONS)}", "backend": INVALID_BACKEND},
        "Missing required precision parameter. Valid precisions: none, ieee, tf32, bf16"),
    "get_fp32_precision": (
        "getFp32Precision", (("backend", "-backend", tuple(PAIRS), "generic"),),
        "Usage: torch::get_fp32_precision [backend]", {"backend": INVALID_BACKEND}, None),
    "set_float32_matmul_precision": (
        "setFloat32MatmulPrecision", (("precision", "-precision", LEGACY, None),),
        "Usage: torch::set_float32_matmul_precision precision",
        {"precision": "Invalid precision. Use highest, high, or medium"},
        "Missing required precision parameter. Valid precisions: highest, high, medium"),
    "get_float32_matmul_precision": (
        "getFloat32MatmulPrecision", (), "Usage: torch::get_float32_matmul_precision", {}, None),
}

interp = None


def is_number(word):
    """A negative number is a value, not a flag: as Tcl reads numbers."""
    return interp.call("string", "is", "double", "-strict", word) == "1"


def is_flag(word):
    return word.startswith("-") and not is_number(word)


def oracle(command, args):
    """The documented outcome of a call's words alone: ("error", message,
    errorCode words) or ("call", values)."""
    _, params, usage, invalid, missing = SPECS[command]
    by_flag = {p[1]: p for p in params}
    words, written = {}, {}
    if args and not params:
        return "error", usage, ["TCLAMP", "USAGE"]
    if args and is_flag(args[0]):
        for i in range(0, len(args), 2):
            if i + 1 == len(args):
                return "error", "Missing value for parameter", ["TCLAMP", "MISSING_VALUE", args[i]]
            if args[i] not in by_flag:
                return "error", (f"Unknown parameter: {args[i]}. Valid parameters are: "
                                 + ", ".join(by_flag)), ["TCLAMP", "UNKNOWN_OPTION", args[i], args[i + 1]]
            words[by_flag[args[i]][0]] = args[i + 1]
            written[by_flag[args[i]][0]] = args[i]
    else:
        for word in args:
            if is_flag(word) and not set(word) & set(" \t\n\r\v\f"):
                return "error", MIXED.format(word), ["TCLAMP", "MIXED_ARGUMENTS", word]
        if len(args) > len(params):
            return "error", usage, ["TCLAMP", "USAGE"]
        words = {p[0]: w for p, w in zip(params, args)}
    for name, flag, _, default in params:
        if default is None and not words.get(name):
            return "error", missing, ["TCLAMP", "MISSING_ARGUMENT", flag]
    values = {}
    for name, flag, valid, default in params:
        if name in words:
            if words[name] not in valid:
                return "error", invalid[name], ["TCLAMP", "INVALID_VALUE",
                                                written.get(name, flag), words[name]]
            values[name] = words[name]
        else:
            values[name] = default
    if command == "set_fp32_precision" and values["precision"] not in PRECISIONS[values["backend"]]:
        return "error", (f"Invalid precision for {values['backend']}. "
                         f"Use {one_of(PRECISIONS[values['backend']])}"), \
            ["TCLAMP", "INVALID_VALUE", written.get("precision", "-precision"), values["precision"]]
    return "call", values


# --- torch's side -----------------------------------------------------------------
def backend_object(backend):
    obj = torch.backends
    for part in backend.split(".") if backend != "generic" else ():
        obj = getattr(obj, part)
    return obj


def python_error(error):
    """A Python exception as a Tcl command reports it."""
    return ("error", f"{type(error).__name__}: {error}", ["PYTHON", type(error).__name__, str(error)])


def attempt(function, *args):
    try:
        return ("ok", function(*args))
    except Exception as error:       # noqa: BLE001  (torch's error is the outcome)
        return python_error(error)


def state():
    """All of torch's precision state, as its own getters read it (an
    error where torch's getter raises: a legacy/new mix it cannot name)."""
    return (tuple(torch._C._get_fp32_precision_getter(*pair) for pair in PAIRS.values()),
            attempt(torch.get_float32_matmul_precision),
            attempt(lambda: torch.backends.cuda.matmul.allow_tf32),
            attempt(lambda: torch.backends.cudnn.allow_tf32),
            attempt(torch._C._get_onednn_allow_tf32),
            torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark, torch.backends.mkldnn.enabled,
            torch.backends.mkldnn.deterministic,
            # and autocast's, which no precision command may touch
            tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")),
            torch.is_autocast_cache_enabled())


START_RAW = {pair: torch._C._get_fp32_precision_getter(*pair) for pair in PAIRS.values()}
START = state()


def reset():
    """Back to the start, hidden state included: torch keeps the legacy
    allow_tf32 switches apart from what its getters read (after
    cudnn.allow_tf32 = False and cudnn.fp32_precision = "tf32", conv and rnn
    both read tf32, yet cudnn.allow_tf32 raises that they differ), so they
    are set first."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._C._set_cudnn_allow_tf32(True)
        torch._C._set_cublas_allow_tf32(False)
        torch._C._set_onednn_allow_tf32(False)
    torch.set_float32_matmul_precision("highest")
    for pair, precision in START_RAW.items():
        torch._C._set_fp32_precision_setter(*pair, precision)
    torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic = START[5], START[6]
    torch.backends.cudnn.benchmark, torch.backends.mkldnn.enabled = START[7], START[8]
    torch.backends.mkldnn.deterministic = START[9]
    for device, (enabled, dtype) in zip(("cpu", "cuda"), START[10]):
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)
    torch.set_autocast_cache_enabled(START[11])


def torch_call(command, values):
    """What the command is documented to call, through torch's own API."""
    if command == "set_fp32_precision":
        backend, precision = values["backend"], values["precision"]
        if backend == "mkldnn":     # documented: mkldnn's own setting (torch's attribute
            outcome = attempt(torch._C._set_fp32_precision_setter, "mkldnn", "all", precision)
        else:                       # sets generic in torch 2.13)
            outcome = attempt(setattr, backend_object(backend), "fp32_precision", precision)
        return ("ok", "fp32 precision set") if outcome[0] == "ok" else outcome
    if command == "get_fp32_precision":
        return attempt(getattr, backend_object(values["backend"]), "fp32_precision")
    if command == "set_float32_matmul_precision":
        outcome = attempt(torch.set_float32_matmul_precision, values["precision"])
        return ("ok", "float32 matmul precision set") if outcome[0] == "ok" else outcome
    return attempt(torch.get_float32_matmul_precision)


PYTHON_SOURCE = {
    "attr": lambda b, v: f"torch.backends{'.' + b if b != 'generic' else ''}.fp32_precision = {v!r}",
    "legacy": lambda v: f"torch.set_float32_matmul_precision({v!r})",
    "allow_tf32": lambda b, v: f"torch.backends.{b}.allow_tf32 = {v!r}",
}


def python_source(step):
    """A Python step as the code that `py exec` runs in the Tcl run."""
    return "import torch\n" + PYTHON_SOURCE[step[0]](*step[1:-1])


def python_step(step):
    """A change through torch's own Python API, the same in both runs: made
    here, or (in the Tcl run, where the step says "tcl") by Tcl's
    `py exec`, so that torch's warnings and errors cross the bridge."""
    kind = step[0]
    if kind == "attr":
        return attempt(setattr, backend_object(step[1]), "fp32_precision", step[2])
    if kind == "legacy":
        return attempt(torch.set_float32_matmul_precision, step[1])
    if kind == "allow_tf32":
        return attempt(setattr, {"cuda.matmul": torch.backends.cuda.matmul,
                                 "cudnn": torch.backends.cudnn,
                                 "mkldnn": torch.backends.mkldnn}[step[1]], "allow_tf32", step[2])
    raise AssertionError(step)


FLAGS = {"generic": lambda kw: torch.backends.flags(**kw),
         "cudnn": lambda kw: torch.backends.cudnn.flags(**kw),
         "mkldnn": lambda kw: torch.backends.mkldnn.flags(**kw)}


# --- words ------------------------------------------------------------------------
BAD_PRECISIONS = ["", "IEEE", "Ieee", "TF32", "Tf32", "BF16", "None", "NONE", "fp32", "fp16",
                  "bfloat16", "float32", "tf32 ", " tf32", "tf32\n", "\u0456eee", "ie\u0435e",
                  "\uff54\uff46\uff13\uff12", "bf\uff11\uff16", "tf32\u200b", "ieee\0", "0", "1",
                  "-1", "-0x10", "1e3", "-inf", "{ieee}", "ieee tf32", "{}", "[x]", "$x", "\\",
                  "-", "--", "HIGHEST", "High", "MEDIUM", "low", "highest\0", "hig\u04bb",
                  "\U0001d5c1igh", "bf16\u00a0", "true", "nan"]
BAD_BACKENDS = ["", "GENERIC", "Generic", "cuda", "cpu", "gpu", "mkldnn.", ".matmul",
                "mkldnn.matmul.x", "cudnn.matmul", "cuda.conv", "mkldnn matmul", "mkldnn_matmul",
                "mkldnn/matmul", "cuda.Matmul", "mkIdnn", "mkldnn.matmuI",
                "\uff4d\uff4b\uff4c\uff44\uff4e\uff4e", "cudnn\u00a0", "cud\u0578n", "-1", "0",
                "generic all", "{generic}", "onednn", "mps", "xpu"]
FLAG_WORDS = ["-precision", "-backend", "-level", "-Precision", "-precision ", "-", "--", "-p",
              "-device", "-backend\0"]


def some_precision(rng, legacy):
    good = LEGACY if legacy else CPU_PRECISIONS
    return rng.choice(good) if rng.random() < 0.7 else rng.choice(BAD_PRECISIONS + list(good))


def some_backend(rng):
    return rng.choice(tuple(PAIRS)) if rng.random() < 0.75 else rng.choice(BAD_BACKENDS)


def some_args(rng, command):
    legacy = "float32" in command
    takes = {"set_fp32_precision": ("precision", "backend"), "get_fp32_precision": ("backend",),
             "set_float32_matmul_precision": ("precision",), "get_float32_matmul_precision": ()}[command]
    word = {"precision": lambda: some_precision(rng, legacy), "backend": lambda: some_backend(rng)}
    shape = rng.random()
    if shape < 0.45:                                   # positional, usually the right count
        count = rng.choice([len(takes), len(takes), max(len(takes) - 1, 0), len(takes) + 1])
        names = list(takes) + ["precision"] * 3
        return [word[names[i]]() if names[i] in word else some_precision(rng, legacy)
                for i in range(count)]
    if shape < 0.85:                                   # named, any order, maybe repeated
        pairs = [(f"-{name}", word[name]()) for name in takes if rng.random() < 0.85]
        if rng.random() < 0.15:
            name = rng.choice(takes or ("precision",))
            pairs.append((f"-{name}", word.get(name, lambda: "x")()))
        rng.shuffle(pairs)
        if rng.random() < 0.1:
            pairs.insert(rng.randrange(len(pairs) + 1), (rng.choice(FLAG_WORDS), "ieee"))
        args = [w for pair in pairs for w in pair]
        if rng.random() < 0.08:
            args.append(rng.choice(FLAG_WORDS))      # a flag left without its value
        return args
    pool = BAD_PRECISIONS + BAD_BACKENDS + FLAG_WORDS + list(PAIRS) + list(CPU_PRECISIONS) + list(LEGACY)
    return [rng.choice(pool) for _ in range(rng.randrange(4))]


COMMANDS = tuple(SPECS)


def via(rng):
    return rng.choice(["python", "tcl"])


def some_step(rng, depth=0):
    r = rng.random()
    if r < 0.6:
        command = rng.choice(COMMANDS)
        return ("tcl", command, rng.random() < 0.5, rng.choice(["top", "proc", "literal"]),
                tuple(some_args(rng, command)))
    if r < 0.72:
        backend = rng.choice(tuple(PAIRS))
        value = rng.choice(CPU_PRECISIONS) if rng.random() < 0.8 else rng.choice(BAD_PRECISIONS[:12])
        return ("attr", backend, value, via(rng))
    if r < 0.82:
        return ("legacy", rng.choice(LEGACY) if rng.random() < 0.8 else rng.choice(
            ["HIGH", "Medium", "low", "", "highest "]), via(rng))
    if r < 0.92:
        return ("allow_tf32", rng.choice(["cuda.matmul", "cudnn", "mkldnn"]), rng.random() < 0.5,
                via(rng))
    if depth:
        return some_step(rng, depth)
    which = rng.choice(tuple(FLAGS))
    kwargs = {}
    if rng.random() < 0.7:
        kwargs["fp32_precision"] = rng.choice(PRECISIONS["cudnn" if which == "cudnn" else "generic"])
    if which != "generic" and rng.random() < 0.5:
        kwargs["enabled"] = rng.random() < 0.5
    if which == "cudnn" and rng.random() < 0.4:
        kwargs["allow_tf32"] = rng.random() < 0.5
    return ("flags", which, tuple(sorted(kwargs.items())),
            tuple(some_step(rng, 1) for _ in range(rng.randint(1, 3))))


def sequence(seed, length=24):
    rng = random.Random(seed)
    steps = []
    while len(steps) < length:
        if steps and rng.random() < 0.2:
            steps.append(rng.choice(steps))             # again: a remembered plan runs
        else:
            steps.append(some_step(rng))
    return steps


# --- the two runs -----------------------------------------------------------------
SETUP = r"""
proc run_top {words} {
    set rc [catch {uplevel #0 $words} m o]
    list $rc $m [expr {$rc == 1 ? [dict get $o -errorcode] : ""}]
}
proc run_literal {script} {
    # a proc made for the call, whose body has the command's words as text
    proc literal_call {} [string map [list @SCRIPT@ $script] {
        set rc [catch {@SCRIPT@} m o]
        list $rc $m [expr {$rc == 1 ? [dict get $o -errorcode] : ""}]
    }]
    literal_call
}
proc run_in_proc {words} {
    set rc [catch {{*}$words} m o]
    list $rc $m [expr {$rc == 1 ? [dict get $o -errorcode] : ""}]
}
"""


class TclRunner:
    """Runs Tcl words in the interpreter, or in a second Tcl thread."""

    def __init__(self, interp, thread=None):
        self.interp, self.thread = interp, thread

    def run(self, form, words):
        if form == "literal":       # the call as a script's text, compiled where it runs
            script = self.interp.call("list", "run_literal", self.interp.call("list", *words))
        else:
            script = self.interp.call("list", "run_top" if form == "top" else "run_in_proc",
                                      self.interp.call("list", *words))
        if self.thread:
            script = self.interp.call("list", "thread::send", self.thread, script)
        reply = self.interp.eval(script)
        rc = self.interp.call("lindex", reply, 0)
        message = self.interp.call("lindex", reply, 1)
        code = self.interp.call("lindex", reply, 2)
        return rc, message, code


def tcl_list(words):
    return interp.call("list", *words)


def outcome_of(rc, message, code):
    if rc == "0":
        return ("ok", message)
    if rc == "1":
        return ("error", message, code)
    return ("rc" + rc, message, code)


def expected_outcome(outcome):
    return outcome if outcome[0] == "ok" else (outcome[0], outcome[1], tcl_list(outcome[2]))


class Run:
    def __init__(self, runner=None, rng=None, warning_action="always"):
        self.runner, self.rng, self.warning_action = runner, rng, warning_action
        self.log, self.problems = [], []

    def step(self, step):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(self.warning_action)
            outcome = self.perform(step)
        self.log.append((step, outcome, tuple((w.category.__name__, str(w.message)) for w in caught),
                         state()))
        if self.runner:
            self.check_getters(step)

    def perform(self, step):
        if step[0] == "flags":
            _, which, kwargs, inner = step
            done = []
            try:            # torch's flags() itself refuses some legacy/new mixes
                with FLAGS[which](dict(kwargs)):
                    for s in inner:
                        done.append(self.perform_logged(s))
            except Exception as error:  # noqa: BLE001
                return tuple(done), python_error(error)
            return tuple(done), None
        if step[0] != "tcl":
            if step[-1] == "python":
                return python_step(step)
            if self.runner is None:     # what `py exec` answers for it
                outcome = python_step(step)
                return ("ok", "") if outcome[0] == "ok" else expected_outcome(outcome)
            return outcome_of(*self.runner.run("top", ["py", "exec", python_source(step)]))
        _, command, camel, form, args = step
        verdict = oracle(command, list(args))
        if self.runner is None:
            if verdict[0] == "error":
                return expected_outcome(verdict)
            return expected_outcome(torch_call(command, verdict[1]))
        name = f"::torch::{SPECS[command][0] if camel else command}"
        before = state()
        outcome = outcome_of(*self.runner.run(form, [name, *args]))
        if outcome[0] != "ok" and state() != before:
            self.problems.append(f"{name} {args!r} failed ({outcome[1]!r}) and changed torch's "
                                 f"state:\n  before {before}\n  after  {state()}")
        return outcome

    def perform_logged(self, step):
        outcome = self.perform(step)
        if self.runner:
            self.check_getters(step)
        return (outcome, state())

    def check_getters(self, step):
        """Every Tcl getter, in a random form, against torch's own."""
        for backend in (None, *PAIRS):
            args = [] if backend is None else self.rng.choice([[backend], ["-backend", backend]])
            name = "::torch::" + self.rng.choice(["get_fp32_precision", "getFp32Precision"])
            got = outcome_of(*self.runner.run(self.rng.choice(["top", "proc"]), [name, *args]))
            want = ("ok", getattr(backend_object(backend or "generic"), "fp32_precision"))
            if got != want:
                self.problems.append(f"after {step!r}: {name} {args} gave {got!r}, torch reads {want!r}")
        for name in ("get_float32_matmul_precision", "getFloat32MatmulPrecision"):
            got = outcome_of(*self.runner.run(self.rng.choice(["top", "proc"]), [f"::torch::{name}"]))
            want = expected_outcome(attempt(torch.get_float32_matmul_precision))
            if got != want:
                self.problems.append(f"after {step!r}: torch::{name} gave {got!r}, torch {want!r}")


@pytest.fixture(scope="module")
def tcl():
    global interp
    interp = tclamp.Interp()
    interp.eval(SETUP)
    yield interp
    reset()


def differ(reference, actual):
    """The first step where the two runs part, described."""
    for i, (want, got) in enumerate(zip(reference.log, actual.log)):
        if want != got:
            return (f"step {i}: {want[0]!r}\n  torch: {want[1]!r} warnings {want[2]!r}\n"
                    f"         state {want[3]!r}\n  tcl:   {got[1]!r} warnings {got[2]!r}\n"
                    f"         state {got[3]!r}")
    return None


WARNING_ACTIONS = ("always", "error", "default")


def run_both(seed, runner):
    """Each seed its warnings filter: every warning recorded, each one
    raised as an error, or Python's default (once per place and step)."""
    steps = sequence(seed)
    action = WARNING_ACTIONS[seed % 3]
    reset()
    assert state() == START
    reference = Run(warning_action=action)
    for step in steps:
        reference.step(step)
    reset()
    actual = Run(runner, random.Random(seed), action)
    for step in steps:
        actual.step(step)
    reset()
    return reference, actual


SEEDS = range(80)


@pytest.mark.parametrize("seed", SEEDS)
def test_sequence_matches_torch(tcl, seed):
    """Seeds from 60 run with remembered plans turned off (_bridge.memo):
    remembering must change nothing."""
    tclamp._bridge.memo(seed < 60)
    try:
        reference, actual = run_both(seed, TclRunner(tcl))
    finally:
        tclamp._bridge.memo(True)
    assert actual.problems == []
    assert differ(reference, actual) is None


@pytest.fixture(scope="module")
def second_thread(tcl):
    tcl.eval("package require Thread")
    thread = tcl.eval("""thread::create [list apply {{path} {
        set ::auto_path $path
        package require tclamp
        thread::wait
    }} $::auto_path]""")
    tcl.eval(f"thread::send {thread} {{{SETUP}}}")
    yield thread
    tcl.eval(f"thread::release {thread}")


@pytest.mark.parametrize("seed", SEEDS[:20])
def test_sequence_in_a_second_thread(tcl, second_thread, seed):
    """The settings are the process's (docs/set_fp32_precision.md): another
    Tcl thread's commands change and read what torch reads here."""
    reference, actual = run_both(1000 + seed, TclRunner(tcl, second_thread))
    assert actual.problems == []
    assert differ(reference, actual) is None


def test_the_differential_can_fail(tcl):
    """A runner whose commands change nothing is caught, and so is one whose
    getter lies: the comparison is real."""
    class Frozen(TclRunner):
        def run(self, form, words):
            if "set_" in words[0] or "Set" in words[0]:
                words = ["::torch::get_fp32_precision"]
            return super().run(form, words)

    found = 0
    for seed in range(5):
        reference, actual = run_both(seed, Frozen(tcl))
        found += bool(actual.problems or differ(reference, actual))
    assert found >= 4


# --- a patch of torch's functions and the remembered plans ---------------------
# A plan that held torch.<name> as it was at planning kept a mock after its
# patch ended: the same words then answered "... set" and changed nothing,
# or read the mock's value.  The commands call torch's functions as tclamp
# found them when it loaded, on the first call and on every repeat.
PATCHABLE = [
    ("torch.set_float32_matmul_precision", "torch::set_float32_matmul_precision high",
     lambda: torch.get_float32_matmul_precision(), "high"),
    ("torch._C._set_fp32_precision_setter", "torch::set_fp32_precision bf16 mkldnn.conv",
     lambda: torch.backends.mkldnn.conv.fp32_precision, "bf16"),
    ("torch.get_float32_matmul_precision", "torch::get_float32_matmul_precision", None, "medium"),
    ("torch._C._get_fp32_precision_getter", "torch::get_fp32_precision mkldnn.rnn", None, "tf32"),
]


@pytest.mark.parametrize("target, script, read, value", PATCHABLE, ids=[p[0] for p in PATCHABLE])
def test_a_mock_made_during_planning_is_not_kept(target, script, read, value):
    fresh = tclamp.Interp()         # no plan remembered yet for these words
    reset()
    try:
        with mock.patch(target, return_value="fake") as patched:
            first = fresh.eval(script)
        if read is None:            # a getter: torch's real state, not the mock's value
            torch.set_float32_matmul_precision("medium")
            torch.backends.mkldnn.rnn.fp32_precision = "tf32"
            assert fresh.eval(script) == value
        else:                       # a setter: it really sets, once the patch is gone
            reset()
            assert read() != value
            fresh.eval(script)
            assert read() == value
        assert patched.call_count == 0, "a command called a patch made after tclamp loaded"
        assert first != "fake"
    finally:
        reset()


def test_an_older_torch_found_at_load(tmp_path):
    """tclamp loaded with a torch that has no fp32_precision getter or setter
    (as torch < 2.9): both commands say which torch they need, and the
    legacy ones still run."""
    import subprocess
    import sys
    program = """if True:
        import torch
        del torch._C._set_fp32_precision_setter, torch._C._get_fp32_precision_getter
        import tclamp
        interp = tclamp.Interp()
        for script in ("torch::set_fp32_precision tf32 cudnn.rnn", "torch::getFp32Precision",
                       "torch::set_fp32_precision tf32 cudnn.rnn"):
            print(interp.eval("list [catch {%s} m o] $m [dict get $o -errorcode]" % script))
        print(interp.eval("torch::set_float32_matmul_precision high; torch::get_float32_matmul_precision"))
    """
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    version = torch.__version__
    assert r.stdout.splitlines() == [
        f"1 {{torch::set_fp32_precision needs torch 2.9 or newer (this is torch {version})}} "
        "{TCLAMP TORCH_VERSION 2.9}",
        f"1 {{torch::get_fp32_precision needs torch 2.9 or newer (this is torch {version})}} "
        "{TCLAMP TORCH_VERSION 2.9}",
        f"1 {{torch::set_fp32_precision needs torch 2.9 or newer (this is torch {version})}} "
        "{TCLAMP TORCH_VERSION 2.9}",
        "high"]


def test_torchs_warnings_reach_a_tclsh_user_once(tclsh):
    """A UserWarning torch raises under a Tcl command reaches stderr once,
    as Python prints it, and the command goes on with its result; with
    warnings made errors it is a Tcl error naming it, printed nowhere; the
    precision commands themselves raise none."""
    r = tclsh("""
        package require tclamp
        py exec {import torch, warnings}
        set r [list [torch::set_float32_matmul_precision high]]
        lappend r [py exec {torch.backends.mkldnn.allow_tf32 = True}]
        lappend r [catch {py exec {torch.set_float32_matmul_precision("HIGH")}} m] $m
        lappend r [torch::get_float32_matmul_precision] [torch::set_fp32_precision tf32 mkldnn]
        puts $r
        py exec {warnings.simplefilter("error")}
        set r [list [catch {py exec {torch.set_float32_matmul_precision("MEDIUM")}} m o]]
        lappend r [lrange [dict get $o -errorcode] 0 1] [string match "UserWarning: MEDIUM is not one of*" $m]
        lappend r [torch::get_float32_matmul_precision]
        lappend r [torch::set_fp32_precision ieee mkldnn] [torch::set_float32_matmul_precision medium]
        lappend r [torch::get_fp32_precision mkldnn.matmul] [torch::get_float32_matmul_precision]
        puts $r
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "{float32 matmul precision set} {} 0 {} high {fp32 precision set}",
        "1 {PYTHON UserWarning} 1 high {fp32 precision set} {float32 matmul precision set} bf16 medium"]
    assert r.stderr.count("UserWarning") == 2, r.stderr
    assert r.stderr.count("TF32 acceleration on top of oneDNN") == 1, r.stderr
    assert r.stderr.count("HIGH is not one of") == 1, r.stderr
    assert "MEDIUM" not in r.stderr


def test_flags_around_a_tcl_eval_that_fails(tcl):
    """A Tcl call that fails inside torch's flags() block: the error leaves
    the block as Python's (torch's own RuntimeError, or the TclError of a
    refusal), and flags() restores what it set; what Tcl set stays."""
    reset()
    try:
        with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
            with torch.backends.flags(fp32_precision="bf16"):
                tcl.eval("torch::set_fp32_precision tf32 mkldnn.conv; torch::get_float32_matmul_precision")
        assert (torch.backends.fp32_precision, torch.backends.mkldnn.conv.fp32_precision,
                torch.get_float32_matmul_precision()) == ("none", "tf32", "highest")
        before = state()
        with pytest.raises(TclError) as error:
            with torch.backends.cudnn.flags(enabled=False, fp32_precision="ieee"):
                tcl.eval("torch::setFp32Precision -backend cudnn -precision bf16")
        assert (error.value.result, error.value.errorcode) == (
            "Invalid precision for cudnn. Use none, ieee, or tf32", "TCLAMP INVALID_VALUE -precision bf16")
        assert state() == before
    finally:
        reset()
