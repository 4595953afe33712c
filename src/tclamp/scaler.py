"""The GradScaler commands, on torch.amp.GradScaler itself.

Scalers, tensors and optimizers are `py` object handles.  torch keeps the
scaler's state on its device, resets the inf flag on every update, refuses
a second step() before update() and checks the growth/backoff bounds.
"""
import sys
from dataclasses import dataclass

import torch

from . import _bridge
from .arguments import (Command, MethodCall, Param, Plan, Signature, number_above,
                        number_between, positive_int, tcl_boolean, tcl_number)
from .autocast import INVALID_DEVICE, autocast_device
from .current import tcl
from .errors import UsageError


def described(value):
    return f'"{value}"' if isinstance(value, str) else f"a {type(value).__name__}"


def handle_of(kind, expected):
    article = "an" if kind[0] in "aeiou" else "a"

    def check(value):
        if not isinstance(value, expected):
            raise UsageError("INVALID_HANDLE", f"Invalid {kind}: expected {article} {kind} "
                                               f"handle, got {described(value)}")
        return value
    check.handle_type = expected        # the bridge's check of the plain form
    return check


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


SCALER = Param("scaler", ("-scaler",), convert=handle_of("scaler", torch.amp.GradScaler))
OPTIMIZER = Param("optimizer", ("-optimizer",),
                  convert=handle_of("optimizer", torch.optim.Optimizer))
TENSOR = Param("tensor", ("-tensor",), convert=handle_of("tensor", torch.Tensor))
MISSING_HANDLES = "Missing required parameter: {}"
# What torch can store: the scale lives in a float32 tensor, the growth
# tracker in an int32 one, and growth_interval goes to C++ as an int64.
# An infinite growth factor would never grow the scale (torch keeps the
# old scale when the grown one is not finite): refused as meaningless.
# Beyond them torch fails later, or half-way through loading a state; a
# scale below the smallest positive float32 (a subnormal) is stored as 0,
# which scales every loss to 0 and never grows again.
FLOAT32_MAX = torch.finfo(torch.float32).max
FLOAT32_LEAST = 2.0 ** -149
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
FLOAT64_MAX = sys.float_info.max


def bounded(convert, invalid, least=None, most=None):
    """`convert`, refusing a value below `least` with "<invalid> must be at
    least <least>" and one above `most` with "... must be at most <most>"."""
    def check(word):
        value = convert(word)
        if least is not None and value < least:
            raise UsageError("INVALID_VALUE", f"{invalid} must be at least {least!r}")
        if most is not None and value > most:
            raise UsageError("INVALID_VALUE", f"{invalid} must be at most {most!r}")
        return value
    return check


@dataclass(frozen=True)
class Rule:
    """torch's rule for one of the scaler's numbers, which serves both the
    commands' parameters and the keys of a saved state: `convert` reads a
    word (ValueError: it is not `valid`); least and most bound what torch
    can store."""
    convert: object
    valid: str                    # what a valid value is, e.g. "a positive number"
    least: object = None
    most: object = None

    def checked(self, invalid):
        return bounded(self.convert, invalid, self.least, self.most)

    def param(self, name, camel, default):
        invalid = f"Invalid {name}:"
        return Param(name, (f"-{name}", f"-{camel}"), default, convert=self.checked(invalid),
                     invalid=f"{invalid} must be {self.valid}")


SCALE = Rule(number_above(0.0), "a positive number", FLOAT32_LEAST, FLOAT32_MAX)
GROWTH_FACTOR = Rule(number_above(1.0), "a number greater than 1", most=FLOAT64_MAX)
BACKOFF_FACTOR = Rule(number_between(0.0, 1.0), "a number between 0 and 1")
GROWTH_INTERVAL = Rule(positive_int, "a positive integer", most=INT64_MAX)


def new_scale_param():
    """update's new_scale: a number by the SCALE rule, or, as torch takes
    one, a tensor handle.  A one-element tensor's value must pass the same
    rule (it fills the float32 scale as a number does; reading it waits for
    the device): a complex one's real part, which is all torch's copy into
    the scale keeps; torch checks the rest (device, size, requires_grad)
    and says what is wrong in its own words."""
    invalid = "Invalid new_scale:"
    number = SCALE.checked(invalid)

    def convert(word):
        if not isinstance(word, torch.Tensor):
            return number(word)
        if word.numel() != 1:
            return word
        try:
            value = float(word.detach().real)
        except (RuntimeError, NotImplementedError):     # no value to read (meta)
            return word
        if not value > 0.0:                                 # NaN too
            raise ValueError(value)
        bounded(float, invalid, SCALE.least, SCALE.most)(value)
        return word
    return Param("new_scale", ("-new_scale", "-newScale"), None, convert=convert,
                 invalid=f"{invalid} must be {SCALE.valid}")


def handles_signature(command, *params, check=None):
    names = " ".join(p.name for p in params)
    missing = MISSING_HANDLES.format(", ".join(p.name for p in params))
    return Signature(params, f"Usage: torch::{command} {names}", missing=(missing, missing),
                     check=check)


def plan_new(init_scale, growth_factor, backoff_factor, growth_interval, device, enabled):
    scaler = torch.amp.GradScaler(device or default_device(), init_scale, growth_factor,
                                  backoff_factor, growth_interval, enabled)
    return Plan((), scaler, False)


# --- checkpoints: torch's own state_dict, as a Tcl dict of plain numbers ---

def saved_scale(word):
    """A saved scale: by the SCALE rule, or 0, which torch's float32 scale
    becomes when it backs off below the least one (a diverged run's
    checkpoint, which then loads back, as torch's own does)."""
    if tcl_number(word, float) == 0.0:
        return 0.0
    return SCALE.checked("Invalid scaler state: scale")(word)


def integer(word):
    return tcl_number(word, int)


# torch.amp.GradScaler.state_dict()'s keys, each with its rule: whatever
# torch's state can hold, so that every state grad_scaler_state_dict
# returns loads back.  The tracker is an int32 that torch lets wrap to a
# negative one past the largest.
STATE_RULES = {
    "scale": Rule(saved_scale, "0 or a positive number"),
    "growth_factor": GROWTH_FACTOR,
    "backoff_factor": BACKOFF_FACTOR,
    "growth_interval": GROWTH_INTERVAL,
    "_growth_tracker": Rule(integer, "an integer", -INT32_MAX - 1, INT32_MAX),
}
NOT_A_STATE = ("Invalid scaler state: expected a dict with the keys "
               + ", ".join(STATE_RULES))
EMPTY_STATE = ("Invalid scaler state: the dict is empty (the state of a disabled scaler), "
               "and this scaler is enabled")


def invalid_state(text):
    return UsageError("INVALID_VALUE", f"Invalid scaler state: {text}")


def scaler_state(word):
    """A state dict written by grad_scaler_state_dict (and perhaps kept in
    a file): Tcl reads the dict, each value is checked by torch's rules."""
    if not isinstance(word, str):
        raise UsageError("INVALID_VALUE", NOT_A_STATE)
    try:
        given = tcl.interp.read_word(word, dict)
    except ValueError:
        raise UsageError("INVALID_VALUE", NOT_A_STATE) from None
    if not given:
        return {}
    state = {}
    for key, value in given.items():
        if key not in STATE_RULES:
            raise invalid_state(f"unknown key {key}")
        rule = STATE_RULES[key]
        try:
            state[key] = rule.checked(f"Invalid scaler state: {key}")(value)
        except ValueError:
            raise invalid_state(f"{key} must be {rule.valid}") from None
    for key in STATE_RULES:
        if key not in state:
            raise invalid_state(f"missing key {key}")
    return state


def empty_state_for_enabled(values):
    """torch refuses an empty state (a disabled scaler's) when enabled."""
    if not values["state_dict"] and values["scaler"].is_enabled():
        return "state_dict", EMPTY_STATE
    return None


def plan_free(scaler):
    return Plan(((_bridge.current().release, (scaler,)),), "scaler freed", False)


COMMANDS = (
    Command("grad_scaler_new", "gradScalerNew",
            Signature((SCALE.param("init_scale", "initScale", 65536.0),
                       GROWTH_FACTOR.param("growth_factor", "growthFactor", 2.0),
                       BACKOFF_FACTOR.param("backoff_factor", "backoffFactor", 0.5),
                       GROWTH_INTERVAL.param("growth_interval", "growthInterval", 2000),
                       Param("device", ("-device", "-device_type"), None, convert=autocast_device,
                             invalid=INVALID_DEVICE, named_only=True),
                       Param("enabled", ("-enabled",), True, convert=tcl_boolean,
                             invalid="Invalid boolean for -enabled", named_only=True)),
                      "Usage: torch::grad_scaler_new [init_scale] [growth_factor] "
                      "[backoff_factor] [growth_interval]"),
            plan_new),
    Command("grad_scaler_scale", "gradScalerScale",
            handles_signature("grad_scaler_scale", SCALER, TENSOR), MethodCall("scale")),
    Command("grad_scaler_step", "gradScalerStep",
            handles_signature("grad_scaler_step", SCALER, OPTIMIZER),
            MethodCall("step", "scaler step completed")),
    Command("grad_scaler_unscale", "gradScalerUnscale",
            handles_signature("grad_scaler_unscale", SCALER, OPTIMIZER),
            MethodCall("unscale_", "scaler unscaled")),
    Command("grad_scaler_update", "gradScalerUpdate",
            Signature((SCALER, new_scale_param()),
                      "Usage: torch::grad_scaler_update scaler [new_scale]",
                      missing=(MISSING_HANDLES.format("scaler"),) * 2),
            MethodCall("update", "scaler updated")),
    Command("grad_scaler_get_scale", "gradScalerGetScale",
            handles_signature("grad_scaler_get_scale", SCALER), MethodCall("get_scale")),
    Command("grad_scaler_state_dict", "gradScalerStateDict",
            handles_signature("grad_scaler_state_dict", SCALER), MethodCall("state_dict")),
    Command("grad_scaler_load_state_dict", "gradScalerLoadStateDict",
            handles_signature("grad_scaler_load_state_dict", SCALER,
                              Param("state_dict", ("-state_dict", "-stateDict"),
                                    convert=scaler_state, empty_ok=True),
                              check=empty_state_for_enabled),
            MethodCall("load_state_dict", "scaler state loaded")),
    Command("grad_scaler_free", "gradScalerFree",
            handles_signature("grad_scaler_free", SCALER), plan_free),
)
