"""float32 matmul precision (TF32 on CUDA): torch.set_float32_matmul_precision."""
import torch

from .arguments import Command, Param, Signature

PRECISIONS = ("highest", "high", "medium")
INVALID_PRECISION = "Invalid precision. Use highest, high, or medium"


def plan_set(precision):
    return (((torch.set_float32_matmul_precision, (precision,)),),
            "float32 matmul precision set", True)


def plan_get():
    return ((torch.get_float32_matmul_precision, ()),), None, True


COMMANDS = (
    Command("set_float32_matmul_precision", "setFloat32MatmulPrecision",
            Signature((Param("precision", ("-precision",), choices=PRECISIONS),),
                      "Usage: torch::set_float32_matmul_precision precision",
                      INVALID_PRECISION,
                      ("Missing required precision parameter. Valid precisions: highest, high, medium",) * 2),
            plan_set),
    Command("get_float32_matmul_precision", "getFloat32MatmulPrecision",
            Signature((), "Usage: torch::get_float32_matmul_precision"), plan_get),
)
