"""tclamp::info: what this tclamp runs on, as a dict."""
import platform
import sys

import torch

from . import __version__, _bridge
from .arguments import Command, Plan, Signature


def info():
    interp = _bridge.current()
    return {"tclamp_version": __version__,
            "python_executable": sys.executable,
            "python_version": platform.python_version(),
            "torch_version": torch.__version__,
            "cuda_available": torch.cuda.is_available(),
            "cuda_device_count": torch.cuda.device_count(),
            "tcl_version": interp.call("info", "patchlevel"),
            "handle_count": interp.handle_count,
            "autocast_path": "aten" if _bridge.use_aten() else "python"}


def plan_info():
    return Plan(((info, ()),), None, False)


COMMAND = Command("info", "info", Signature((), "Usage: tclamp::info"), plan_info)
