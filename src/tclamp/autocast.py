"""The autocast commands: torch's own thread-local autocast state.

Each command is a declaration; commands.py registers them all in one loop.
"""
import types

import torch

from . import _bridge
from .arguments import BodySignature, Command, Param, Plan, Signature, tcl_boolean

DEVICES = ("cuda", "cpu")     # the seed's, and the ones autocast_status lists
# The one dtype-name rule (aten.py and module_rules.py use these too): every
# dtype torch has is named as torch prints it, without "torch.", so a dtype
# set from Python still reads well; the commands take these three.
DTYPE_NAMES = {value: str(value).removeprefix("torch.")
               for value in vars(torch).values() if isinstance(value, torch.dtype)}
DTYPES = {DTYPE_NAMES[dtype]: dtype for dtype in (torch.float16, torch.bfloat16, torch.float32)}

INVALID_PARAMETERS = ("Invalid parameters. Device type: cuda or cpu. "
                      "Dtype: float16, bfloat16, or float32")
INVALID_DEVICE = "Invalid device type. Use cuda or cpu"

# torch's autocast functions (the bindings of the ATen functions that
# aten_ops.h names) as tclamp found them when it loaded.  The commands call
# these, never torch's attributes as they are at the call: a remembered plan
# keeps the functions it was planned with and the ATen path calls ATen's
# own, so a patched attribute (a test's mock, a user's wrapper) was seen by
# a command's first call and not by the next with the same words, and a
# plan made under a mock went on calling the mock after the patch ended,
# changing no state.  With these, every path, first call or repeated, reads
# and writes torch's real autocast state, and a patch of torch's attributes
# is never seen (docs/design.md, "The ATen contract").
TORCH = types.SimpleNamespace(**{binding: getattr(torch, binding)
                                 for binding, *_ in _bridge.ATEN_OPS})


def autocast_device(word):
    """A device type that torch's autocast runs on: cuda and cpu, and every
    other one torch.amp.is_autocast_available names (mps, xpu, hpu, ...);
    a bare type, without an index.  ValueError for any other word."""
    if not isinstance(word, str) or ":" in word:
        raise ValueError(word)
    try:
        available = torch.amp.is_autocast_available(word)
    except RuntimeError:            # torch knows no such device type
        available = False
    if not available:
        raise ValueError(word)
    return word


DEVICE = Param("device_type", ("-device_type", "-device"), default="cuda",
               convert=autocast_device)
# Absent: every device (autocast_status, and module_rules.py's list).
DEVICE_OR_ALL = Param("device_type", ("-device_type", "-device"), default=None,
                      convert=autocast_device)
DTYPE = Param("dtype", ("-dtype", "-data_type"), default=None, choices=DTYPES)
REQUIRED_DTYPE = Param("dtype", ("-dtype", "-data_type"), choices=DTYPES)


def device_only(command):
    return Signature((DEVICE,), f"Usage: torch::{command} [device_type]", INVALID_DEVICE,
                     seed_messages=True)


def set_dtype_steps(device_type, dtype):
    # Casts cached under the old dtype would clash with the new one.  Whether
    # a cache is on is state, and a plan depends on the words alone, so the
    # clearing is a step of every call (clearing an empty cache costs ~50 ns).
    return ((TORCH.set_autocast_dtype, (device_type, dtype)),
            (TORCH.clear_autocast_cache, ()))


def plan_enable(device_type, dtype):
    steps = ((TORCH.set_autocast_enabled, (device_type, True)),)
    if dtype is not None:
        steps = set_dtype_steps(device_type, dtype) + steps
    return Plan(steps, "autocast enabled", True)


def plan_disable(device_type):
    return Plan(((TORCH.set_autocast_enabled, (device_type, False)),), "autocast disabled", True)


def plan_is_enabled(device_type):
    return Plan(((TORCH.is_autocast_enabled, (device_type,)),), None, True)


def plan_set_dtype(dtype, device_type):
    return Plan(set_dtype_steps(device_type, dtype), "autocast dtype set", True)


def plan_get_dtype(device_type):
    return Plan(((TORCH.get_autocast_dtype, (device_type,)),), DTYPE_NAMES, True)


def plan_clear_cache():
    return Plan(((TORCH.clear_autocast_cache, ()),), "autocast cache cleared", True)


def device_status(device_type):
    return {"enabled": TORCH.is_autocast_enabled(device_type),
            "dtype": DTYPE_NAMES[TORCH.get_autocast_dtype(device_type)],
            "cache_enabled": TORCH.is_autocast_cache_enabled()}


def status(device_type):
    if device_type is None:
        return {device: device_status(device) for device in DEVICES}
    return device_status(device_type)


def plan_status(device_type):
    return Plan(((status, (device_type,)),), None, False)


# --- the scoped block: torch::autocast ?options? body -----------------------

BLOCK_PARAMS = (DEVICE, DTYPE,
                Param("enabled", ("-enabled",), default=True, convert=tcl_boolean,
                      invalid="Invalid boolean for -enabled"),
                Param("cache_enabled", ("-cache_enabled",), default=True, convert=tcl_boolean,
                      invalid="Invalid boolean for -cache_enabled"))
BLOCK_USAGE = ("Usage: torch::autocast ?-device_type device? ?-dtype dtype? "
               "?-enabled boolean? ?-cache_enabled boolean? body")
BLOCK_OPTIONS = Signature(BLOCK_PARAMS, BLOCK_USAGE, INVALID_PARAMETERS)


def run_block(body, device_type, dtype, enabled, cache_enabled):
    """What `with torch.autocast(...)` does, around a Tcl body run in the
    caller's frame; the body's outcome (any return code) is kept whole.
    Where the block changes the device's dtype, or turns the cast cache on
    where it was off, entering and leaving, it also clears the cache, as
    autocast_set_dtype does: casts cached under one dtype would clash with
    the other (torch's own nested blocks fail so), and while the cache is
    off the dtype may change without a clearing (a module rule does so)."""
    saved = (TORCH.is_autocast_enabled(device_type), TORCH.get_autocast_dtype(device_type),
             TORCH.is_autocast_cache_enabled())
    TORCH.set_autocast_enabled(device_type, enabled)
    if dtype is not None:
        TORCH.set_autocast_dtype(device_type, dtype)
    turned_on = cache_enabled and not saved[2]
    if dtype not in (None, saved[1]) or turned_on:
        TORCH.clear_autocast_cache()
    TORCH.set_autocast_cache_enabled(cache_enabled)
    TORCH.autocast_increment_nesting()
    try:
        return _bridge.current().evaluate(body)
    finally:
        # turned_on too: a body may have turned the cache off again (a
        # `package require tclamp` in a new interpreter does) after caching
        # casts that the restored dtype would clash with.
        if (TORCH.autocast_decrement_nesting() == 0
                or TORCH.get_autocast_dtype(device_type) != saved[1] or turned_on
                or TORCH.is_autocast_cache_enabled() and not saved[2]):
            TORCH.clear_autocast_cache()
        TORCH.set_autocast_enabled(device_type, saved[0])
        TORCH.set_autocast_dtype(device_type, saved[1])
        TORCH.set_autocast_cache_enabled(saved[2])


def plan_block(device_type, dtype, enabled, cache_enabled):
    """The body is the command's Script, which the bridge gives run_block."""
    return Plan(((run_block, (device_type, dtype, enabled, cache_enabled)),), None, True)


COMMANDS = (
    Command("autocast_enable", "autocastEnable",
            Signature((DEVICE, DTYPE), "Usage: torch::autocast_enable [device_type] [dtype]",
                      INVALID_PARAMETERS, seed_messages=True),
            plan_enable),
    Command("autocast_disable", "autocastDisable", device_only("autocast_disable"), plan_disable),
    Command("autocast_is_enabled", "autocastIsEnabled", device_only("autocast_is_enabled"),
            plan_is_enabled),
    Command("autocast_set_dtype", "autocastSetDtype",
            Signature((REQUIRED_DTYPE, DEVICE), "Usage: torch::autocast_set_dtype dtype [device_type]",
                      INVALID_PARAMETERS,
                      ("Missing required dtype parameter",
                       "Missing required dtype parameter. Valid dtypes: float16, bfloat16, float32"),
                      seed_messages=True),
            plan_set_dtype),
    Command("autocast_get_dtype", "autocastGetDtype", device_only("autocast_get_dtype"),
            plan_get_dtype),
    Command("autocast_clear_cache", "autocastClearCache",
            Signature((), "Usage: torch::autocast_clear_cache"), plan_clear_cache),
    Command("autocast_status", "autocastStatus",
            Signature((DEVICE_OR_ALL,), "Usage: torch::autocast_status [device_type]",
                      INVALID_DEVICE),
            plan_status),
    Command("autocast", "autocast", BodySignature(BLOCK_OPTIONS), plan_block),
)
