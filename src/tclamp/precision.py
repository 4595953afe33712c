"""float32 precision: the classic torch.set_float32_matmul_precision, and
torch >= 2.9's per-backend settings (torch.backends...fp32_precision)."""
import types

import torch

from .arguments import Command, Param, Plan, Signature
from .errors import UsageError

# torch's functions as tclamp found them when it loaded (as autocast.TORCH):
# a plan never holds torch.<name> as it is at planning, since a remembered
# plan would keep a test's mock after its patch ended (and change nothing, or
# read the mock's value), and a patch would be seen by a command's first
# call but not by its repeats.  An older torch (< 2.9) has no fp32_precision
# getter or setter: None, and the commands that need them say so.
TORCH = types.SimpleNamespace(
    set_float32_matmul_precision=torch.set_float32_matmul_precision,
    get_float32_matmul_precision=torch.get_float32_matmul_precision,
    set_fp32_precision=getattr(torch._C, "_set_fp32_precision_setter", None),
    get_fp32_precision=getattr(torch._C, "_get_fp32_precision_getter", None))

PRECISIONS = ("highest", "high", "medium")
INVALID_PRECISION = "Invalid precision. Use highest, high, or medium"


def plan_set(precision):
    return Plan(((TORCH.set_float32_matmul_precision, (precision,)),),
                "float32 matmul precision set", True)


def plan_get():
    return Plan(((TORCH.get_float32_matmul_precision, ()),), None, True)


# --- fp32_precision, per backend ----------------------------------------------
# Each backend by its path under torch.backends ("generic" is
# torch.backends.fp32_precision itself), as the (backend, op) pair that
# torch.backends hands to torch's own getter and setter, and the precisions
# torch accepts there.  `none` lets the setting follow its parent.
CUDA_PRECISIONS = ("none", "ieee", "tf32")
CPU_PRECISIONS = ("none", "ieee", "tf32", "bf16")
BACKENDS = {
    "generic": (("generic", "all"), CPU_PRECISIONS),
    "cuda.matmul": (("cuda", "matmul"), CUDA_PRECISIONS),
    "cudnn": (("cuda", "all"), CUDA_PRECISIONS),
    "cudnn.conv": (("cuda", "conv"), CUDA_PRECISIONS),
    "cudnn.rnn": (("cuda", "rnn"), CUDA_PRECISIONS),
    "mkldnn": (("mkldnn", "all"), CPU_PRECISIONS),
    "mkldnn.matmul": (("mkldnn", "matmul"), CPU_PRECISIONS),
    "mkldnn.conv": (("mkldnn", "conv"), CPU_PRECISIONS),
    "mkldnn.rnn": (("mkldnn", "rnn"), CPU_PRECISIONS),
}


def one_of(words):
    return ", ".join(words[:-1]) + f", or {words[-1]}"


INVALID_BACKEND = f"Invalid backend. Use {one_of(tuple(BACKENDS))}"
BACKEND = Param("backend", ("-backend",), default="generic", choices=tuple(BACKENDS),
                invalid=INVALID_BACKEND)


def precision_for_backend(values):
    precisions = BACKENDS[values["backend"]][1]
    if values["precision"] not in precisions:
        return "precision", f"Invalid precision for {values['backend']}. Use {one_of(precisions)}"
    return None


FP32_PRECISION_TORCH = "2.9"


def torch_fp32_precision(name, command):
    """torch's own fp32_precision setter or getter (TORCH's); an older torch
    (which pyproject allows) has neither, and the command says which it
    needs."""
    function = getattr(TORCH, name)
    if function is None:
        raise UsageError("TORCH_VERSION",
                         f"torch::{command} needs torch {FP32_PRECISION_TORCH} or newer "
                         f"(this is torch {torch.__version__})", FP32_PRECISION_TORCH)
    return function


def plan_set_fp32(precision, backend):
    setter = torch_fp32_precision("set_fp32_precision", "set_fp32_precision")
    return Plan(((setter, (*BACKENDS[backend][0], precision)),), "fp32 precision set", True)


def plan_get_fp32(backend):
    getter = torch_fp32_precision("get_fp32_precision", "get_fp32_precision")
    return Plan(((getter, BACKENDS[backend][0]),), None, True)


COMMANDS = (
    Command("set_float32_matmul_precision", "setFloat32MatmulPrecision",
            Signature((Param("precision", ("-precision",), choices=PRECISIONS),),
                      "Usage: torch::set_float32_matmul_precision precision",
                      INVALID_PRECISION,
                      ("Missing required precision parameter. Valid precisions: highest, high, medium",) * 2),
            plan_set),
    Command("get_float32_matmul_precision", "getFloat32MatmulPrecision",
            Signature((), "Usage: torch::get_float32_matmul_precision"), plan_get),
    Command("set_fp32_precision", "setFp32Precision",
            Signature((Param("precision", ("-precision",), choices=CPU_PRECISIONS,
                             invalid=f"Invalid precision. Use {one_of(CPU_PRECISIONS)}"),
                       BACKEND),
                      "Usage: torch::set_fp32_precision precision [backend]",
                      missing=("Missing required precision parameter. Valid precisions: "
                               + ", ".join(CPU_PRECISIONS),) * 2,
                      check=precision_for_backend),
            plan_set_fp32),
    Command("get_fp32_precision", "getFp32Precision",
            Signature((BACKEND,), "Usage: torch::get_fp32_precision [backend]"),
            plan_get_fp32),
)
