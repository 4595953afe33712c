"""Every torch API point and ATen symbol that tclamp relies on, checked
once per torch (every stack of `make matrix` runs this file): one failure
that names all that this torch lacks, instead of a torch:: command failing
later or the ATen path quietly turned off."""
import ctypes
import importlib
import inspect
import os

import torch
from torch.torch_version import TorchVersion

from tclamp import aten

# By dotted name, what tclamp's modules call or test against.
API = (
    # the torch:: autocast commands and the scoped block (autocast.py)
    "torch.set_autocast_dtype", "torch.get_autocast_dtype", "torch.set_autocast_enabled",
    "torch.is_autocast_enabled", "torch.set_autocast_cache_enabled",
    "torch.is_autocast_cache_enabled", "torch.clear_autocast_cache",
    "torch.autocast_increment_nesting", "torch.autocast_decrement_nesting",
    "torch.amp.is_autocast_available",
    "torch.float16", "torch.bfloat16", "torch.float32", "torch.float64", "torch.dtype",
    # precision.py, info.py
    "torch.set_float32_matmul_precision", "torch.get_float32_matmul_precision",
    "torch.cuda.is_available", "torch.cuda.device_count",
    # scaler.py: the GradScaler and the methods the commands call
    "torch.amp.GradScaler", "torch.amp.GradScaler.scale", "torch.amp.GradScaler.step",
    "torch.amp.GradScaler.unscale_", "torch.amp.GradScaler.update",
    "torch.amp.GradScaler.get_scale", "torch.amp.GradScaler.state_dict",
    "torch.amp.GradScaler.load_state_dict", "torch.optim.Optimizer",
    # trace.py and module_rules.py
    "torch.Tensor", "torch.isfinite", "torch.nn.Module",
    "torch.nn.modules.module.register_module_forward_hook",
    "torch.nn.modules.module.register_module_forward_pre_hook",
    "torch.utils._python_dispatch.TorchDispatchMode",
)
# What torch 2.9 brought: before it, the fp32 precision commands say which
# torch they need (tests/precision.test).
API_SINCE_2_9 = ("torch._C._set_fp32_precision_setter", "torch._C._get_fp32_precision_getter",
                 "torch.backends.fp32_precision")
# The keyword arguments tclamp passes.
KEYWORDS = {
    "torch.nn.Module.register_forward_pre_hook": ("prepend", "with_kwargs"),
    "torch.nn.Module.register_forward_hook": ("always_call",),
    "torch.nn.modules.module.register_module_forward_hook": ("always_call",),
}


def resolve(dotted):
    """The object a dotted name names, importing modules on the way, or None."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            value = getattr(value, part, None)
        return value
    return None


def missing_api():
    names = API + (API_SINCE_2_9 if TorchVersion(torch.__version__) >= "2.9" else ())
    missing = [name for name in names if resolve(name) is None]
    for name, keywords in KEYWORDS.items():
        function = resolve(name)
        parameters = inspect.signature(function).parameters if function else {}
        missing += [f"{name}({keyword}=)" for keyword in keywords if keyword not in parameters]
    return missing


def missing_aten_symbols():
    library = ctypes.CDLL("libtorch_cpu.so", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    return [symbol for _, symbol, _, _ in aten.OPS if not hasattr(library, symbol)]


def test_this_torch_has_all_that_tclamp_uses():
    missing = missing_api() + missing_aten_symbols()
    assert not missing, f"torch {torch.__version__} lacks what tclamp uses: {', '.join(missing)}"
    # ...and its ATen functions agree with its Python bindings, so the
    # bridge runs the ATen path, not the Python fallback.
    assert aten.FOUND is not None, (
        f"torch {torch.__version__}: the ATen autocast functions disagree with torch's bindings")


def test_what_a_torch_lacks_is_named(monkeypatch):
    # The check can fail: a method gone, a keyword gone.
    monkeypatch.delattr(torch.amp.GradScaler, "unscale_")
    monkeypatch.setattr(torch.nn.modules.module, "register_module_forward_hook", lambda hook: None)
    assert missing_api() == ["torch.amp.GradScaler.unscale_",
                             "torch.nn.modules.module.register_module_forward_hook(always_call=)"]
