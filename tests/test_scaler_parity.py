"""Differential test of the torch::grad_scaler_* commands against
torch.amp.GradScaler called from Python.

Two worlds start from identical copies of a tiny model (Linear(4, 4), SGD,
float16 autocast on the CPU): the Tcl world's scaler is made and driven by
the torch:: commands, the Python world's by the same calls on
torch.amp.GradScaler.  Seeded random sequences of operations (scales of
finite, inf and NaN losses, unscale, step, update with and without a new
scale as a number or a tensor, get_scale, state_dict, load_state_dict of
saved and edited dicts, free, disabled scalers, every argument form) run
in both; after each one the outcome (the result, or the error's message
and errorCode) must be what the Python call's is, or the documented
refusal of a value torch cannot take, and the scalers' state, the
parameters and the gradients must be identical.  A refused or failed call
must change nothing that the Python world, which did not make it, did not
change either."""
import math
import random
import warnings

import pytest
import torch

import tclamp

FLOAT32_MAX = torch.finfo(torch.float32).max
FLOAT32_LEAST = 2.0 ** -149
RELEASED = 'py object handle "{}" has been released'

# Each parameter's spellings: (snake flag, camelCase flag or None).
FLAGS = {
    "scaler": ("-scaler",), "tensor": ("-tensor",), "optimizer": ("-optimizer",),
    "new_scale": ("-new_scale", "-newScale"), "state_dict": ("-state_dict", "-stateDict"),
    "init_scale": ("-init_scale", "-initScale"),
    "growth_factor": ("-growth_factor", "-growthFactor"),
    "backoff_factor": ("-backoff_factor", "-backoffFactor"),
    "growth_interval": ("-growth_interval", "-growthInterval"),
    "device": ("-device", "-device_type"), "enabled": ("-enabled",),
}
CAMEL = {"grad_scaler_new": "gradScalerNew", "grad_scaler_scale": "gradScalerScale",
         "grad_scaler_unscale": "gradScalerUnscale", "grad_scaler_step": "gradScalerStep",
         "grad_scaler_update": "gradScalerUpdate", "grad_scaler_get_scale": "gradScalerGetScale",
         "grad_scaler_state_dict": "gradScalerStateDict",
         "grad_scaler_load_state_dict": "gradScalerLoadStateDict",
         "grad_scaler_free": "gradScalerFree"}

# The documented refusals (docs/grad_scaler_update.md, grad_scaler_new.md).
POSITIVE = "must be a positive number"
AT_MOST = f"must be at most {FLOAT32_MAX!r}"
AT_LEAST = f"must be at least {FLOAT32_LEAST!r}"


def scale_rule(value):
    """The documented rule for a scale (new_scale, init_scale, a state's
    scale): None when valid, else the message's tail."""
    if not value > 0:               # NaN too
        return POSITIVE
    if value > FLOAT32_MAX:
        return AT_MOST
    if value < FLOAT32_LEAST:
        return AT_LEAST
    return None


def word(value):
    """A number as a Tcl word."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    return str(value)


def same(a, b):
    """Exactly equal: tensors bit for bit (NaN where NaN), the rest ==."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        if a.is_floating_point():
            return torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(
                a.nan_to_num(0.0), b.nan_to_num(0.0))
        return torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def python_error(error):
    """What Tcl reports for a Python exception: message and errorCode."""
    return (f"{type(error).__name__}: {error}", ["PYTHON", type(error).__name__, str(error)])


class World:
    def __init__(self, state):
        self.model = torch.nn.Linear(4, 4)
        self.model.load_state_dict(state)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.5)
        self.scaler = None
        self.scaled = None

    def loss(self, x, multiplier):
        with torch.autocast("cpu", dtype=torch.float16):
            out = self.model(x)
        return out.float().pow(2).mean() * multiplier


def scaler_state(scaler, opt):
    if scaler is None:
        return None
    if not scaler._enabled:         # torch sets no more than this on a disabled one
        return {"enabled": False, "state_dict": scaler.state_dict(),
                "get_scale": scaler.get_scale()}
    stage = scaler._per_optimizer_states.get(id(opt))
    return {
        "enabled": scaler._enabled,
        "scale": scaler._scale, "tracker": scaler._growth_tracker,
        "init_scale": scaler._init_scale, "init_tracker": scaler._init_growth_tracker,
        "factors": (scaler._growth_factor, scaler._backoff_factor, scaler._growth_interval),
        "stage": None if stage is None else stage["stage"],
        "found_inf": None if stage is None else dict(stage["found_inf_per_device"]),
        "others": len(scaler._per_optimizer_states) - (stage is not None),
        "state_dict": scaler.state_dict(),
        "get_scale": scaler.get_scale(),
    }


class Harness:
    """The two worlds and the Tcl interpreter; `run` makes one operation in
    both and checks them."""

    def __init__(self, interp, seed):
        self.interp = interp
        self.rng = random.Random(seed)
        torch.manual_seed(seed)
        state = torch.nn.Linear(4, 4).state_dict()
        self.py = World(state)
        self.tcl = World(state)
        self.grabbed = {}
        self.outcome = None
        self.freed = None           # the released handle's name, once freed
        self.log = []
        self.names = []             # every scaler handle made
        interp.create_command("::parity_grab", self.grab)
        interp.create_command("::parity_outcome", self.record)
        interp.create_command("::parity_loss", lambda: self.tcl_loss)
        interp.eval("proc parity_run {script} {"
                    " set code [catch {uplevel #0 $script} m o];"
                    " parity_outcome $code $m [expr {$code == 1 ? [dict get $o -errorcode] : {}}]}")
        interp.call("set", "::opt", self.tcl.opt)
        self.new_scaler(forced=True)

    def grab(self, name, value):
        self.grabbed[name] = value
        return ""

    def record(self, code, message, errorcode):
        self.outcome = (int(code), message, self.interp.call("lrange", errorcode, 0, "end"))
        return ""

    def as_list(self, words):
        return self.interp.call("list", *words)

    # -- forms ------------------------------------------------------------

    def command(self, name, params, positional_ok=True):
        """A call of torch::name with params (name -> Tcl word), in a random
        form: snake or camel name, positional or named (random spellings
        and order)."""
        command = "torch::" + (name if self.rng.random() < 0.5 else CAMEL[name])
        # How the errorCode names each parameter: as the call wrote it, a
        # positional one by its first flag.
        self.flag_of = {key: FLAGS[key][0] for key in params}
        if positional_ok and self.rng.random() < 0.5:
            return " ".join([command] + list(params.values()))
        items = list(params.items())
        self.rng.shuffle(items)
        words = [command]
        for key, value in items:
            self.flag_of[key] = self.rng.choice(FLAGS[key])
            words += [self.flag_of[key], value]
        return " ".join(words)

    # -- running an operation in both worlds ---------------------------------

    def run(self, label, script, python, refusal=None, expect_result=None):
        """Run `script` in Tcl and `python` (a function of the Python world,
        or None where the call is refused before torch) and check both.
        refusal: (message, errorCode words) of a documented refusal."""
        self.log.append(label)
        before = self.snapshot(self.tcl)
        self.outcome = None
        self.interp.call("parity_run", "py scope {" + script + "}")
        code, message, errorcode = self.outcome
        where = f"{label}: {script!r}\n  log: {self.log[-12:]}"
        if self.freed is not None and "$s" in script:
            expected = ("error",) + python_error(ValueError(RELEASED.format(self.freed)))
        elif refusal is not None:
            expected = ("error",) + refusal
        else:
            try:
                value = python(self.py)
            except Exception as error:      # noqa: BLE001  (any of torch's)
                expected = ("error",) + python_error(error)
            else:
                expected = ("ok", expect_result(value) if expect_result else value)
        if expected[0] == "error":
            assert (code, message, errorcode) == (1, expected[1], self.as_list(expected[2])), where
            after = self.snapshot(self.tcl)
            if refusal is not None or self.freed is not None:
                assert self.same_snapshot(before, after), f"a refused call changed state: {where}"
        else:
            assert code == 0, f"{where}\n  Tcl: {message!r} {errorcode!r}"
            if expected[1] is not None:
                assert message == expected[1], where
        self.compare(where)
        return message

    def snapshot(self, world):
        return (scaler_state(world.scaler, world.opt),
                [p.detach().clone() for p in world.model.parameters()],
                [None if p.grad is None else p.grad.clone() for p in world.model.parameters()])

    @staticmethod
    def same_snapshot(a, b):
        return same(a[0], b[0]) and all(same(x, y) for x, y in zip(a[1] + a[2], b[1] + b[2]))

    def compare(self, where):
        t, p = self.snapshot(self.tcl), self.snapshot(self.py)
        if self.freed is None:
            assert same(t[0], p[0]), f"scaler state differs after {where}\n  tcl {t[0]}\n  py  {p[0]}"
        for a, b in zip(t[1] + t[2], p[1] + p[2]):
            assert same(a, b), f"parameters or gradients differ after {where}\n {a}\n {b}"

    # -- operations --------------------------------------------------------

    def new_scaler(self, forced=False):
        rng = self.rng
        values = {"init_scale": rng.choice([65536.0, 1024.0, 2.0 ** 15, 8.0, 0.5, 3.0]),
                  "growth_factor": rng.choice([2.0, 1.5, 4.0]),
                  "backoff_factor": rng.choice([0.5, 0.25, 0.9]),
                  "growth_interval": rng.choice([1, 1, 2, 3, 2000])}
        enabled = rng.random() < 0.85
        bad = None
        if not forced and rng.random() < 0.15:
            key, value, tail = rng.choice([
                ("init_scale", 0.0, POSITIVE), ("init_scale", -1.0, POSITIVE),
                ("init_scale", 1e39, AT_MOST), ("init_scale", 1e-50, AT_LEAST),
                ("init_scale", float("nan"), POSITIVE),
                ("growth_factor", 1.0, "must be a number greater than 1"),
                ("backoff_factor", 1.0, "must be a number between 0 and 1"),
                ("growth_interval", 0, "must be a positive integer")])
            values[key], bad = value, (key, tail)
        words = {k: word(v) for k, v in values.items()}
        named = not enabled or rng.random() < 0.5
        if named:
            words["device"] = "cpu"
            if not enabled or rng.random() < 0.5:
                words["enabled"] = rng.choice(["0", "false", "no"]) if not enabled else "1"
        script = "set ::s [" + self.command("grad_scaler_new", words, positional_ok=not named) + "]"
        if bad is not None:
            key, tail = bad
            refusal = (f"Invalid {key}: {tail}",
                       ["TCLAMP", "INVALID_VALUE", self.flag_of[key], words[key]])
            saved, self.freed = self.freed, None        # the call does not use $s
            try:
                self.run("new (refused)", script, None, refusal=refusal)
            finally:
                self.freed = saved
            return
        # Without -device, the scaler's device is the documented default:
        # cuda where torch sees a GPU (the model stays on the CPU in both).
        device = "cpu" if named else ("cuda" if torch.cuda.is_available() else "cpu")
        self.py.scaler = torch.amp.GradScaler(device, values["init_scale"], values["growth_factor"],
                                              values["backoff_factor"], values["growth_interval"],
                                              enabled)
        self.freed = None
        self.log.append(f"new {script}")
        self.interp.eval(script)
        self.interp.eval("parity_grab scaler $::s")
        self.names.append(self.interp.eval("set ::s"))
        self.tcl.scaler = self.grabbed.pop("scaler")
        self.compare("new " + script)

    def forward(self, backward=True):
        x = torch.randn(8, 4, generator=self.generator())
        multiplier = self.rng.choice([1.0, 1.0, 1.0, 4.0, math.inf, -math.inf, math.nan, 1e30])
        self.tcl_loss = self.tcl.loss(x, multiplier)
        py_loss = self.py.loss(x, multiplier)
        call = self.command("grad_scaler_scale", {"scaler": "$::s", "tensor": "$loss"})
        script = f"set loss [parity_loss]; set sc [{call}]; parity_grab scaled $sc"
        if backward:
            script += "; $sc backward"

        def python(world):
            scaled = world.scaler.scale(py_loss)
            self.py_scaled = scaled
            if backward:
                scaled.backward()
        self.grabbed.pop("scaled", None)
        self.run(f"scale x{multiplier} backward={backward}", script.replace("$::s", "$s"), python)
        if "scaled" in self.grabbed:
            assert same(self.grabbed.pop("scaled"), self.py_scaled), self.log[-5:]

    def generator(self):
        return torch.Generator().manual_seed(self.rng.randrange(2**31))

    def optimizer_call(self, name, method):
        call = self.command(name, {"scaler": "$s", "optimizer": "$::opt"})
        result = {"grad_scaler_step": "scaler step completed",
                  "grad_scaler_unscale": "scaler unscaled"}[name]
        self.run(name, call, lambda w: getattr(w.scaler, method)(w.opt),
                 expect_result=lambda _: result)

    def update(self):
        rng = self.rng
        kind = rng.choice(["none", "none", "none", "float", "float", "bad", "tensor"])
        params, refusal = {"scaler": "$s"}, None
        if kind == "none":
            python = lambda w: w.scaler.update()
        elif kind in ("float", "bad"):
            value = rng.choice([1.0, 8.0, 1024.0, 3.5, 1e-3, FLOAT32_LEAST, FLOAT32_MAX]
                               if kind == "float" else
                               [-3.0, 0.0, 1e39, 1e-50, math.inf, -math.inf, math.nan])
            params["new_scale"] = word(value)
            python = lambda w: w.scaler.update(value)
            if kind == "bad":
                refusal = (f"Invalid new_scale: {scale_rule(value)}", None)
        else:
            return self.update_with_tensor()
        script = self.command("grad_scaler_update", params)
        if refusal is not None:
            refusal = (refusal[0], ["TCLAMP", "INVALID_VALUE", self.flag_of["new_scale"],
                                    params["new_scale"]])
        self.run(f"update {kind}", script, python, refusal=refusal,
                 expect_result=lambda _: "scaler updated")

    def update_with_tensor(self):
        """update with a tensor handle as new_scale, as torch takes one: a
        one-element real tensor's value follows the number's rule, torch
        checks the rest (size, requires_grad)."""
        rng = self.rng
        make = rng.choice([lambda: torch.tensor(8.0), lambda: torch.tensor([256.0]),
                           lambda: torch.tensor(32.0, dtype=torch.float64),
                           lambda: torch.tensor(16), lambda: torch.tensor([[0.5]]),
                           lambda: torch.tensor([2.0, 4.0]),
                           lambda: torch.tensor(4.0, requires_grad=True),
                           lambda: torch.tensor(0.0), lambda: torch.tensor(-2.0),
                           lambda: torch.tensor(math.nan),
                           lambda: torch.tensor(1e39, dtype=torch.float64),
                           lambda: torch.tensor(1e-50, dtype=torch.float64)])
        tensor = make()
        self.interp.call("set", "::ns", tensor)
        params = {"scaler": "$s", "new_scale": "$::ns"}
        script = self.command("grad_scaler_update", params)
        refusal = None
        if tensor.numel() == 1 and scale_rule(float(tensor.detach())):
            refusal = (f"Invalid new_scale: {scale_rule(float(tensor.detach()))}",
                       ["TCLAMP", "INVALID_VALUE", self.flag_of["new_scale"], "<Tensor>"])
        self.run("update tensor", script, lambda w: w.scaler.update(make()), refusal=refusal,
                 expect_result=lambda _: "scaler updated")
        self.interp.eval("py release $::ns")

    def get_scale(self):
        call = self.command("grad_scaler_get_scale", {"scaler": "$s"})
        self.run("get_scale", call, lambda w: w.scaler.get_scale(), expect_result=repr)

    def state_dict(self):
        call = self.command("grad_scaler_state_dict", {"scaler": "$s"})
        text = self.run("state_dict", call, lambda w: w.scaler.state_dict(),
                        expect_result=lambda d: self.as_list(
                            [x for k, v in d.items() for x in (k, v)]))
        if self.freed is None:
            self.saved.append(text)

    def load_state_dict(self):
        rng = self.rng
        enabled = self.py.scaler._enabled
        choice = rng.random()
        if self.saved and choice < 0.4:
            text = rng.choice(self.saved)
            refusal = None
        else:
            state = {"scale": rng.choice([1.0, 2.0 ** 10, 0.3, 65536.0]),
                     "growth_factor": rng.choice([2.0, 3.0]),
                     "backoff_factor": rng.choice([0.5, 0.125]),
                     "growth_interval": rng.choice([1, 2, 5]),
                     "_growth_tracker": rng.choice([0, 0, 1, 4])}
            refusal = None
            if choice > 0.75:
                key, value, tail = rng.choice([
                    ("scale", -1.0, "scale must be 0 or a positive number"),
                    ("scale", 1e39, "scale " + AT_MOST), ("scale", 1e-50, "scale " + AT_LEAST),
                    ("growth_factor", 0.5, "growth_factor must be a number greater than 1"),
                    ("backoff_factor", 1.0, "backoff_factor must be a number between 0 and 1"),
                    ("growth_interval", 0, "growth_interval must be a positive integer"),
                    ("growth_interval", 2.5, "growth_interval must be a positive integer"),
                    ("_growth_tracker", -2**31 - 1, "_growth_tracker must be at least -2147483648"),
                    ("_growth_tracker", 2**31, "_growth_tracker must be at most 2147483647")])
                state[key] = value
                refusal = f"Invalid scaler state: {tail}"
            text = self.as_list([x for k, v in state.items() for x in (k, word(v))])
        if choice > 0.95 or text == "":
            text = ""
            refusal = None if not enabled else (
                "Invalid scaler state: the dict is empty (the state of a disabled scaler), "
                "and this scaler is enabled")
        self.interp.call("set", "::sd", text)
        script = self.command("grad_scaler_load_state_dict", {"scaler": "$s", "state_dict": "$::sd"})
        if refusal is not None:
            refusal = (refusal, ["TCLAMP", "INVALID_VALUE", self.flag_of["state_dict"], text])

        def python(world):
            state = {}
            if text:
                d = dict(zip(*[iter(self.interp.call("lrange", text, 0, "end").split())] * 2))
                state = {k: (int(v) if k in ("growth_interval", "_growth_tracker") else float(v))
                         for k, v in d.items()}
            world.scaler.load_state_dict(state)
        self.run("load_state_dict", script, python, refusal=refusal,
                 expect_result=lambda _: "scaler state loaded")

    def free(self):
        how = self.rng.choice(["free", "free", "rename", "release"])
        if how == "free":
            script = self.command("grad_scaler_free", {"scaler": "$s"})
            expected = "scaler freed"
        else:
            script = "rename $s {}" if how == "rename" else "py release $s"
            expected = ""
        name = self.interp.eval("set ::s")
        self.run(f"free {how}", script, lambda w: None, expect_result=lambda _: expected)
        if self.freed is None:
            self.freed = name
            assert self.interp.eval(f"info commands {name}") == ""

    def wrong_handle(self):
        """A handle of the wrong kind: the documented error, nothing changed."""
        self.interp.call("set", "::t", torch.ones(1))
        script, refusal = self.rng.choice([
            (self.command("grad_scaler_step", {"scaler": "$s", "optimizer": "$::t"}),
             ("Invalid optimizer: expected an optimizer handle, got a Tensor",
              ["TCLAMP", "INVALID_HANDLE", "-optimizer", "<Tensor>"])),
            (self.command("grad_scaler_unscale", {"scaler": "$::opt", "optimizer": "$::opt"}),
             ("Invalid scaler: expected a scaler handle, got a SGD",
              ["TCLAMP", "INVALID_HANDLE", "-scaler", "<SGD>"])),
        ])
        saved = self.freed
        if "$s" not in script:
            self.freed = None
        try:
            if saved is None or "$s" not in script:
                self.run("wrong handle", script, None, refusal=refusal)
        finally:
            self.freed = saved
        self.interp.eval("py release $::t")

    def zero_grad(self):
        set_to_none = self.rng.random() < 0.5
        self.log.append(f"zero_grad {set_to_none}")
        self.py.opt.zero_grad(set_to_none)
        self.tcl.opt.zero_grad(set_to_none)

    def sequence(self, length):
        self.saved = []
        ops = [(self.forward, 6), (lambda: self.forward(backward=False), 1),
               (lambda: self.optimizer_call("grad_scaler_step", "step"), 5),
               (lambda: self.optimizer_call("grad_scaler_unscale", "unscale_"), 2),
               (self.update, 5), (self.get_scale, 2), (self.state_dict, 2),
               (self.load_state_dict, 2), (self.free, 0.4), (self.new_scaler, 0.6),
               (self.zero_grad, 2), (self.wrong_handle, 0.5)]
        functions, weights = zip(*ops)
        for _ in range(length):
            if self.freed is not None and self.rng.random() < 0.3:
                self.new_scaler(forced=True)
            self.rng.choices(functions, weights)[0]()


@pytest.fixture
def interp():
    interp = tclamp.Interp()
    yield interp
    interp.delete()


@pytest.mark.parametrize("seed", range(30))
def test_random_sequences_match_torch(interp, seed):
    baseline = interp.handle_count
    harness = Harness(interp, seed)
    harness.sequence(60)
    interp.eval("py release $::opt")
    for name in harness.names:      # those the sequence did not free
        interp.eval(f"if {{[info commands {name}] ne {{}}}} {{py release {name}}}")
    assert interp.handle_count == baseline, "handles left behind"


def new_scale_world(interp):
    """For the new_scale tests: a cpu scaler $s at 1024 on a Linear's SGD
    ($net, $opt), `iteration` (a scaled backward and a step) and `outcome`
    (a script's catch code, result and errorCode).  Returns run(script),
    the outcome of a script, and as_list(*words), a Tcl list."""
    interp.eval("""
        py exec {
import torch
parity_net = torch.nn.Linear(4, 4)
parity_opt = torch.optim.SGD(parity_net.parameters(), lr=0.1)
}
        set net [py eval parity_net]
        set opt [py eval parity_opt]
        set s [torch::grad_scaler_new -init_scale 1024 -device cpu]
        proc iteration {} {
            [torch::grad_scaler_scale $::s [py call torch.sum [py call $::net [py eval {torch.ones(2, 4)}]]]] backward
            torch::grad_scaler_step $::s $::opt
        }
        proc outcome {script} {
            list [catch {uplevel #0 $script} m o] $m [expr {[dict exists $o -errorcode] ? [dict get $o -errorcode] : {}}]
        }
    """)
    return (lambda script: interp.eval(f"outcome {{{script}}}"),
            lambda *words: interp.call("list", *words))


def assert_refused_changing_nothing(interp, run, as_list, update, cases):
    """Each (tensor expression, message tail) of cases, given as new_scale
    by update (a command with {} for the tensor's handle), is refused with
    "Invalid new_scale: tail" and leaves the scaler's state as it was; the
    step is then still to be updated, as after a refused number."""
    before = interp.eval("torch::grad_scaler_state_dict $s")
    for tensor, tail in cases:
        assert run(update.format(f"[py eval {{{tensor}}}]")) == as_list(
            1, f"Invalid new_scale: {tail}",
            as_list("TCLAMP", "INVALID_VALUE", "-new_scale", "<Tensor>")), tensor
        assert interp.eval("torch::grad_scaler_state_dict $s") == before
    assert run("torch::grad_scaler_update $s") == as_list(0, "scaler updated", "")


def test_update_takes_a_tensor_new_scale_as_torch_does(interp):
    """torch's update() takes new_scale as a float or a one-element tensor;
    the command refused every tensor handle with "must be a positive
    number" (even torch.tensor(8.0)).  Now a tensor's value is the scale, a
    one-element tensor's value follows the number's rule, and torch reports
    the rest; a refused one changes nothing."""
    run, as_list = new_scale_world(interp)
    interp.eval("iteration")
    interp.eval("py exec {parity_t = torch.tensor(8.0)}")
    assert run("torch::grad_scaler_update $s [py eval parity_t]") == as_list(0, "scaler updated", "")
    interp.eval("py exec {parity_t.fill_(99.0)}")   # later changes to the tensor do not reach the scale
    assert interp.eval("torch::grad_scaler_get_scale $s") == "8.0"
    interp.eval("iteration")
    assert run("torch::gradScalerUpdate -newScale [py eval {torch.tensor(32.0, dtype=torch.float64)}]"
               " -scaler $s") == as_list(0, "scaler updated", "")
    assert interp.eval("torch::grad_scaler_get_scale $s") == "32.0"
    torch_says = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                  "torch.FloatTensor with requires_grad=False.")
    for tensor in ("torch.tensor([2.0, 4.0])", "torch.tensor(4.0, requires_grad=True)"):
        interp.eval("iteration")
        assert run(f"torch::grad_scaler_update $s [py eval {{{tensor}}}]") == as_list(
            1, f"AssertionError: {torch_says}", as_list("PYTHON", "AssertionError", torch_says)), tensor
        assert interp.eval("torch::grad_scaler_get_scale $s") == "32.0"
        interp.eval("torch::grad_scaler_update $s 32")
    # torch's copy_ into its 0-d scale refuses a shape [1] tensor: its error too.
    interp.eval("iteration")
    assert run("torch::grad_scaler_update $s [py eval {torch.tensor([4.0])}]") == as_list(
        1, "RuntimeError: output with shape [] doesn't match the broadcast shape [1]",
        as_list("PYTHON", "RuntimeError", "output with shape [] doesn't match the broadcast shape [1]"))
    interp.eval("torch::grad_scaler_update $s 32")
    interp.eval("iteration")
    assert_refused_changing_nothing(
        interp, run, as_list, "torch::grad_scaler_update -new_scale {} -scaler $s",
        (("torch.tensor(0.0)", POSITIVE), ("torch.tensor(-2)", POSITIVE),
         ("torch.tensor(float('nan'))", POSITIVE),
         ("torch.tensor(1e39, dtype=torch.float64)", AT_MOST),
         ("torch.tensor(1e-50, dtype=torch.float64)", AT_LEAST)))
    interp.eval("py release $s; py release $opt; py release $net")


def test_a_complex_new_scale_is_checked_by_its_real_part(interp):
    """torch's update() copies a one-element complex tensor into its float32
    scale, keeping the real part (with a warning); the command passed every
    complex tensor to torch unchecked, so torch.tensor(-5+1j) made the scale
    -5.0 (grad_scaler_update.md: the scale becomes a positive number), a
    state that grad_scaler_load_state_dict then refuses.  Now the real part
    follows the number's rule: a positive one is the scale, as in Python,
    and any other is refused, changing nothing."""
    run, as_list = new_scale_world(interp)
    interp.eval("py exec {import warnings}")
    python = torch.amp.GradScaler("cpu", init_scale=1024.0)
    python.scale(torch.ones(()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        python.update(torch.tensor(8 + 3j))
        interp.eval("iteration")
        assert run("py exec {warnings.simplefilter('ignore')}; "
                   "torch::grad_scaler_update $s [py eval {torch.tensor(8+3j)}]") \
            == as_list(0, "scaler updated", "")
    assert interp.eval("torch::grad_scaler_get_scale $s") == repr(python.get_scale()) == "8.0"
    interp.eval("iteration")
    assert_refused_changing_nothing(
        interp, run, as_list, "torch::grad_scaler_update $s {}",
        (("torch.tensor(-5+1j)", POSITIVE), ("torch.tensor(0j)", POSITIVE),
         ("torch.tensor(complex('nan+1j'))", POSITIVE),
         ("torch.tensor(1e39+0j, dtype=torch.complex128)", AT_MOST),
         ("torch.tensor([1e-50+1j], dtype=torch.complex128)", AT_LEAST)))
    interp.eval("py release $s; py release $opt; py release $net")


def state_after_a_step_loads_back(interp, make_scaler, loss):
    """One step of the scaler `s` that the Tcl `make_scaler` makes, on the
    Python `loss` of a fresh net, then its state_dict loaded into a new
    scaler: the Tcl list of that state, the load's catch code and result,
    and whether the new scaler's state_dict is the same."""
    return interp.eval(r"""
        py exec {
import torch
reload_net = torch.nn.Linear(2, 1)
reload_opt = torch.optim.SGD(reload_net.parameters(), lr=0.1)
}
        %s
        [torch::grad_scaler_scale $s [py eval {%s}]] backward
        torch::grad_scaler_step $s [py eval reload_opt]
        torch::grad_scaler_update $s
        set saved [torch::grad_scaler_state_dict $s]
        set resumed [torch::grad_scaler_new -device cpu]
        list $saved [catch {torch::grad_scaler_load_state_dict $resumed $saved} m] $m \
            [expr {[torch::grad_scaler_state_dict $resumed] eq $saved}]
    """ % (make_scaler, loss))


def loaded_back(state):
    """What state_after_a_step_loads_back gives when `state` loads back."""
    return "{" + " ".join(f"{k} {v}" for k, v in state.items()) + "} 0 {scaler state loaded} 1"


def test_a_state_that_backed_off_to_zero_loads_back(interp):
    """grad_scaler_load_state_dict.md: a scaler loaded with what
    grad_scaler_state_dict returned goes on as the saved one would have.
    From the least scale (2**-149, which grad_scaler_new takes), one
    overflowing step with backoff 0.5 makes the float32 scale 0."""
    result = state_after_a_step_loads_back(
        interp, "set s [torch::grad_scaler_new -init_scale 1.401298464324817e-45 -device cpu]",
        'reload_net(torch.ones(1, 2)).sum() * float("inf")')
    python = torch.amp.GradScaler("cpu")
    python.load_state_dict({"scale": 0.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                            "growth_interval": 2000, "_growth_tracker": 0})
    assert result == loaded_back(python.state_dict())


def test_a_state_whose_tracker_wrapped_loads_back(interp):
    """The largest tracker that a state may hold (2147483647) wraps to
    -2147483648 at torch's next clean step (an int32 tensor), in Python
    too; grad_scaler_state_dict returns that, and it loads back."""
    result = state_after_a_step_loads_back(
        interp, "set s [torch::grad_scaler_new -device cpu]\n"
        "torch::grad_scaler_load_state_dict $s [list scale 1024.0 growth_factor 2.0 "
        "backoff_factor 0.5 growth_interval [expr {2**63 - 1}] _growth_tracker [expr {2**31 - 1}]]",
        "reload_net(torch.ones(1, 2)).sum()")
    saved = {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
             "growth_interval": 2**63 - 1, "_growth_tracker": -2**31}
    python = torch.amp.GradScaler("cpu")
    python.load_state_dict(saved)                   # torch takes it back
    assert python.state_dict() == saved
    assert result == loaded_back(saved)
