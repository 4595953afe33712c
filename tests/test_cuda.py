"""The CUDA tier with Python as the host: the torch:: commands, run through
tclamp.tcl, set the CUDA autocast state that this Python's torch then
computes in.  Skipped where torch sees no GPU (the cuda marker, conftest)."""
import sys
import threading

import pytest
import torch

from tclamp import TclError, tcl
from conftest import reset_autocast

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def autocast_off():
    yield
    reset_autocast()


def matmul_dtype():
    a = torch.ones(8, 8, device="cuda")
    return (a @ a).dtype


def test_commands_set_the_cuda_state_torch_computes_in():
    linear = torch.nn.Linear(8, 4).cuda()
    x = torch.randn(2, 8, device="cuda")
    assert tcl.eval("torch::autocast_enable cuda float16") == "autocast enabled"
    assert (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")) == (True, torch.float16)
    assert (matmul_dtype(), linear(x).dtype) == (torch.float16, torch.float16)
    if torch.cuda.is_bf16_supported():
        assert tcl.eval("torch::autocastSetDtype -dtype bfloat16 -device cuda") == "autocast dtype set"
        assert (matmul_dtype(), linear(x).dtype) == (torch.bfloat16, torch.bfloat16)
    torch.set_autocast_dtype("cuda", torch.float32)
    assert tcl.eval("torch::autocast_get_dtype") == "float32"
    assert tcl.eval("torch::autocast_disable cuda") == "autocast disabled"
    assert not torch.is_autocast_enabled("cuda") and matmul_dtype() == torch.float32


def test_scoped_block_from_python_restores_the_cuda_state():
    sys.modules["__main__"].__dict__["cuda_matmul_dtype"] = lambda: str(matmul_dtype())
    assert tcl.eval("torch::autocast -device_type cuda -dtype float16 {py call cuda_matmul_dtype}") \
        == "torch.float16"
    assert not torch.is_autocast_enabled("cuda")
    with pytest.raises(ZeroDivisionError):
        tcl.eval("torch::autocast -device_type cuda {py call cuda_matmul_dtype; py eval 1/0}")
    with pytest.raises(TclError) as info:
        tcl.eval("torch::autocast -device_type cuda -dtype float64 {py call cuda_matmul_dtype}")
    assert (info.value.result, info.value.errorcode) == (
        "Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32",
        "TCLAMP INVALID_VALUE -dtype float64")
    assert (torch.is_autocast_enabled("cuda"), matmul_dtype()) == (False, torch.float32)


def test_python_threads_keep_their_own_cuda_state():
    results = {}

    def work(dtype):
        tcl.eval(f"torch::autocast_enable cuda {dtype}")
        seen = set()
        for _ in range(100):
            seen.add(tcl.eval("torch::autocast_get_dtype cuda"))
            seen.add(str(matmul_dtype()))
        results[dtype] = seen

    threads = [threading.Thread(target=work, args=(d,)) for d in ("float16", "float32")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {d: {d, f"torch.{d}"} for d in ("float16", "float32")}
    assert not torch.is_autocast_enabled("cuda")


def test_float16_training_with_the_scaler_commands():
    """The README's step with Python objects as handles: the loss goes
    down; an inf gradient skips the step and halves the scale."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data, target = torch.randn(16, 4, device="cuda"), torch.randn(16, 1, device="cuda")
    tcl.call("set", "optimizer", optimizer)
    tcl.call("set", "loss_of", lambda: torch.nn.functional.mse_loss(model(data).float(), target))
    tcl.eval("set scaler [torch::grad_scaler_new -init_scale 1024]")

    def step():
        optimizer.zero_grad()
        loss = tcl.eval("""
            set loss [torch::autocast -device_type cuda -dtype float16 {py call $loss_of}]
            [torch::grad_scaler_scale $scaler $loss] backward
            torch::grad_scaler_step $scaler $optimizer
            torch::grad_scaler_update $scaler
            $loss item""", result=float)
        return loss

    losses = [step() for _ in range(20)]
    assert losses[-1] < losses[0]
    assert tcl.eval("torch::grad_scaler_get_scale $scaler") == "1024.0"
    assert tcl.eval("py call getattr $scaler _device") == "cuda"

    before = model.weight.detach().clone()
    optimizer.zero_grad()
    tcl.eval("""set loss [torch::autocast -device_type cuda -dtype float16 {py call $loss_of}]
                [torch::grad_scaler_scale $scaler $loss] backward""")
    model.weight.grad.fill_(float("inf"))
    assert tcl.eval("torch::grad_scaler_step $scaler $optimizer") == "scaler step completed"
    assert torch.equal(before, model.weight.detach())
    tcl.eval("torch::grad_scaler_update $scaler")
    assert tcl.eval("torch::grad_scaler_get_scale $scaler") == "512.0"
    tcl.eval("torch::grad_scaler_free $scaler; py release $optimizer; py release $loss_of")
