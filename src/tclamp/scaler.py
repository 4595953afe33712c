"""The GradScaler commands, on torch.amp.GradScaler itself.

Scalers, tensors and optimizers are `py` object handles.  torch keeps the
scaler's state on its device, resets the inf flag on every update, refuses
a second step() before update() and checks the growth/backoff bounds.
"""
import torch

from . import _bridge
from .arguments import Command, Param, Signature, number_between, positive_int, tcl_boolean
from .autocast import DEVICES, INVALID_DEVICE
from .errors import UsageError


def described(value):
    return f'"{value}"' if isinstance(value, str) else f"a {type(value).__name__}"


def handle_of(kind, expected):
    def check(value):
        if not isinstance(value, expected):
            raise UsageError("INVALID_HANDLE",
                             f"Invalid {kind}: expected a {kind} handle, got {described(value)}")
        return value
    return check


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def flags(name, camel):
    return (f"-{name}", f"-{camel}")


SCALER = Param("scaler", ("-scaler",), convert=handle_of("scaler", torch.amp.GradScaler))
OPTIMIZER = Param("optimizer", ("-optimizer",),
                  convert=handle_of("optimizer", torch.optim.Optimizer))
TENSOR = Param("tensor", ("-tensor",), convert=handle_of("tensor", torch.Tensor))
MISSING_HANDLES = "Missing required parameter: {}"
POSITIVE = number_between(0.0, float("inf"))


def handles_signature(command, *params):
    names = " ".join(p.name for p in params)
    missing = MISSING_HANDLES.format(", ".join(p.name for p in params))
    return Signature(params, f"Usage: torch::{command} {names}", missing=(missing, missing))


def plan_new(init_scale, growth_factor, backoff_factor, growth_interval, device, enabled):
    scaler = torch.amp.GradScaler(device or default_device(), init_scale, growth_factor,
                                  backoff_factor, growth_interval, enabled)
    return (), scaler, False


def plan_scale(scaler, tensor):
    return ((scaler.scale, (tensor,)),), None, False


def plan_step(scaler, optimizer):
    return ((scaler.step, (optimizer,)),), "scaler step completed", False


def plan_unscale(scaler, optimizer):
    return ((scaler.unscale_, (optimizer,)),), "scaler unscaled", False


def plan_update(scaler, new_scale):
    return ((scaler.update, (new_scale,)),), "scaler updated", False


def plan_get_scale(scaler):
    return ((scaler.get_scale, ()),), None, False


def plan_free(scaler):
    return ((_bridge.current().release, (scaler,)),), "scaler freed", False


COMMANDS = (
    Command("grad_scaler_new", "gradScalerNew",
            Signature((Param("init_scale", flags("init_scale", "initScale"), 65536.0,
                             convert=POSITIVE,
                             invalid="Invalid init_scale: must be a positive number"),
                       Param("growth_factor", flags("growth_factor", "growthFactor"), 2.0,
                             convert=number_between(1.0, float("inf")),
                             invalid="Invalid growth_factor: must be a number greater than 1"),
                       Param("backoff_factor", flags("backoff_factor", "backoffFactor"), 0.5,
                             convert=number_between(0.0, 1.0),
                             invalid="Invalid backoff_factor: must be a number between 0 and 1"),
                       Param("growth_interval", flags("growth_interval", "growthInterval"), 2000,
                             convert=positive_int,
                             invalid="Invalid growth_interval: must be a positive integer"),
                       Param("device", ("-device", "-device_type"), None, choices=DEVICES,
                             invalid=INVALID_DEVICE, named_only=True),
                       Param("enabled", ("-enabled",), True, convert=tcl_boolean,
                             invalid="Invalid boolean for -enabled", named_only=True)),
                      "Usage: torch::grad_scaler_new [init_scale] [growth_factor] "
                      "[backoff_factor] [growth_interval]"),
            plan_new),
    Command("grad_scaler_scale", "gradScalerScale",
            handles_signature("grad_scaler_scale", SCALER, TENSOR), plan_scale),
    Command("grad_scaler_step", "gradScalerStep",
            handles_signature("grad_scaler_step", SCALER, OPTIMIZER), plan_step),
    Command("grad_scaler_unscale", "gradScalerUnscale",
            handles_signature("grad_scaler_unscale", SCALER, OPTIMIZER), plan_unscale),
    Command("grad_scaler_update", "gradScalerUpdate",
            Signature((SCALER, Param("new_scale", ("-new_scale", "-newScale"), None,
                                     convert=POSITIVE,
                                     invalid="Invalid new_scale: must be a positive number")),
                      "Usage: torch::grad_scaler_update scaler [new_scale]",
                      missing=(MISSING_HANDLES.format("scaler"),) * 2),
            plan_update),
    Command("grad_scaler_get_scale", "gradScalerGetScale",
            handles_signature("grad_scaler_get_scale", SCALER), plan_get_scale),
    Command("grad_scaler_free", "gradScalerFree",
            handles_signature("grad_scaler_free", SCALER), plan_free),
)
