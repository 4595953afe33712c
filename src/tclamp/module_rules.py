"""torch::autocast_module_dtype: one module computes in its own dtype.

A rule is kept per module and device type.  While autocast is on for that
device, a module with a rule runs its forward pass with autocast's dtype
set to the rule's, after its floating-point inputs on that device are cast
to it (as autocast casts an operator's inputs); `float32` so keeps a layer
out of low precision.  Children run under their parent's rule unless they
have their own: the innermost rule wins.  Hooks on the module do it (a
pre-hook sets, a hook that torch calls on every way out restores), so the
model's code is not touched; a module without rules has no hooks.
"""
import threading
import weakref

import torch

from .arguments import Command, Param, Signature
from .autocast import DEVICES, DTYPE_NAMES, INVALID_DEVICE
from .scaler import handle_of

RULE_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16,
               "float32": torch.float32, "none": None}
INVALID_RULE_DTYPE = "Invalid dtype. Use float16, bfloat16, float32, or none"
MODULE = Param("module", ("-module",), convert=handle_of("module", torch.nn.Module))
DEVICE = Param("device_type", ("-device_type", "-device"), default="cuda", choices=DEVICES,
               invalid=INVALID_DEVICE)


class Rules:
    """A module's rules, device type -> dtype, and the hooks that apply them."""
    __slots__ = ("dtypes", "hooks")

    def __init__(self, module):
        self.dtypes = {}
        self.hooks = (module.register_forward_pre_hook(apply_rules, prepend=True,
                                                       with_kwargs=True),
                      module.register_forward_hook(restore, always_call=True))


# module -> Rules; a module that goes away takes its rules with it
_rules = weakref.WeakKeyDictionary()
# Per thread, as autocast's own state: what each running forward pass with
# rules replaced, innermost last, as (module, ((device, dtype), ...), cache).
_replaced = threading.local()


def running():
    stack = getattr(_replaced, "stack", None)
    if stack is None:
        stack = _replaced.stack = []
    return stack


def cast_inputs(value, device_type, dtype):
    """What autocast does to an operator's inputs: floating tensors on the
    device (float64 excepted) become dtype; lists, tuples and dicts are
    looked into."""
    if isinstance(value, torch.Tensor):
        if (value.is_floating_point() and value.dtype not in (torch.float64, dtype)
                and value.device.type == device_type):
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple)):
        items = [cast_inputs(item, device_type, dtype) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return {key: cast_inputs(item, device_type, dtype) for key, item in value.items()}
    return value


def apply_rules(module, args, kwargs):
    rules = _rules.get(module)
    active = [(device, dtype) for device, dtype in (rules.dtypes.items() if rules else ())
              if torch.is_autocast_enabled(device)]
    # A weight cast cached under one dtype would be handed out under another.
    running().append((module, tuple((device, torch.get_autocast_dtype(device))
                                    for device, _ in active),
                      torch.is_autocast_cache_enabled()))
    if not active:
        return None
    torch.set_autocast_cache_enabled(False)
    for device, dtype in active:
        torch.set_autocast_dtype(device, dtype)
        args = cast_inputs(args, device, dtype)
        kwargs = cast_inputs(kwargs, device, dtype)
    return args, kwargs


def restore(module, args, output):
    stack = running()
    # A pre-hook that failed before ours ran leaves nothing of ours to undo.
    if not stack or stack[-1][0] is not module:
        return
    _, replaced, cache_enabled = stack.pop()
    for device, dtype in replaced:
        torch.set_autocast_dtype(device, dtype)
    if replaced:
        torch.set_autocast_cache_enabled(cache_enabled)


def set_rule(module, dtype, device_type):
    rules = _rules.get(module)
    if dtype is None:
        if rules is not None:
            rules.dtypes.pop(device_type, None)
            if not rules.dtypes:
                for hook in rules.hooks:
                    hook.remove()
                del _rules[module]
        return "module dtype removed"
    if rules is None:
        rules = _rules[module] = Rules(module)
    rules.dtypes[device_type] = dtype
    return "module dtype set"


def rule_list(device_type):
    return [{"module": module, "device_type": device, "dtype": DTYPE_NAMES[dtype]}
            for module, rules in list(_rules.items())
            for device, dtype in rules.dtypes.items()
            if device_type is None or device == device_type]


def plan_set(module, dtype, device_type):
    return ((set_rule, (module, dtype, device_type)),), None, False


def plan_list(device_type):
    return ((rule_list, (device_type,)),), None, False


COMMANDS = (
    Command("autocast_module_dtype", "autocastModuleDtype",
            Signature((MODULE,
                       Param("dtype", ("-dtype", "-data_type"), choices=RULE_DTYPES,
                             invalid=INVALID_RULE_DTYPE),
                       DEVICE),
                      "Usage: torch::autocast_module_dtype module dtype [device_type]",
                      missing=("Missing required parameter: module, dtype",) * 2),
            plan_set),
    Command("autocast_module_rules", "autocastModuleRules",
            Signature((Param("device_type", ("-device_type", "-device"), default=None,
                             choices=DEVICES),),
                      "Usage: torch::autocast_module_rules [device_type]", INVALID_DEVICE),
            plan_list),
)
