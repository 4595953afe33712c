"""torch::autocast_module_dtype: one module computes in its own dtype.

A rule is kept per module and device type.  While autocast is on for that
device, a module with a rule runs its forward pass with autocast's dtype
set to the rule's, after its floating-point inputs on that device are cast
to it (as autocast casts an operator's inputs); `float32` so keeps a layer
out of low precision.  Children run under their parent's rule unless they
have their own: the innermost rule wins.  module_calls does it around the
module's call, so neither the model's code nor the module is touched.
"""
import types

import torch

from . import module_calls
from .arguments import Command, Param, Plan, Signature
from .autocast import DEVICE_OR_ALL, DTYPE_NAMES, DTYPES, INVALID_DEVICE, autocast_device
from .errors import UsageError
from .scaler import handle_of

RULE_DTYPES = {**DTYPES, "none": None}
INVALID_RULE_DTYPE = "Invalid dtype. Use float16, bfloat16, float32, or none"
MODULE = Param("module", ("-module",), convert=handle_of("module", torch.nn.Module))
DEVICE = Param("device_type", ("-device_type", "-device"), default="cuda",
               convert=autocast_device, invalid=INVALID_DEVICE)
COMPILED = ("Invalid module: a torch.compile'd module cannot have a rule;"
            " compiled code would not apply it")


BOUND_CALL = ("Invalid module: its class's __call__ is {found}, bound when the class was made,"
              " which does not go through the rule")
CALL_BY_NAME = ("Invalid module: its class's __call__, {found}, calls torch.nn.Module.{name}"
                " by name{through}, not torch.nn.Module.__call__, so it does not go through"
                " the rule")
NO_MODULE_CALL = ("Invalid module: its class's __call__, {found}, does not call"
                  " torch.nn.Module.__call__ (as super().__call__(...) does), so it does not"
                  " go through the rule")


def unruled_call(why):
    """The message for what binds_torch_call found: it names what the
    class holds, as the message that said "torch's own
    torch.nn.Module.__call__" for another library's wrapper of it left a
    user wondering where torch's own was."""
    found, function, name = why
    what = (module_calls.qualified_name(found) if isinstance(found, types.FunctionType)
            else f"a {module_calls.qualified_name(found)} object")
    if function is None:
        return NO_MODULE_CALL.format(found=what)
    if name is not None:
        through = "" if function is found else f" (in {module_calls.qualified_name(function)})"
        return CALL_BY_NAME.format(found=what, name=name, through=through)
    torch_own = f"torch's own {module_calls.torch_call_name(function)}"
    return BOUND_CALL.format(found=torch_own if function is found
                             else f"{what} (which calls {torch_own})")


def set_rule(module, dtype, device_type):
    if dtype is not None and module_calls.is_compiled(module):
        raise UsageError("INVALID_VALUE", COMPILED, "-module")
    if dtype is not None and (why := module_calls.binds_torch_call(module)) is not None:
        raise UsageError("INVALID_VALUE", unruled_call(why), "-module")
    module_calls.set_rule(module, device_type, dtype)
    return "module dtype set" if dtype is not None else "module dtype removed"


def rule_list(device_type):
    return [{"module": module, "device_type": device, "dtype": DTYPE_NAMES[dtype]}
            for module, dtypes in module_calls.rule_table()
            for device, dtype in dtypes.items()
            if device_type is None or device == device_type]


def plan_set(module, dtype, device_type):
    return Plan(((set_rule, (module, dtype, device_type)),), None, False)


def plan_list(device_type):
    return Plan(((rule_list, (device_type,)),), None, False)


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
            Signature((DEVICE_OR_ALL,), "Usage: torch::autocast_module_rules [device_type]",
                      INVALID_DEVICE),
            plan_list),
)
