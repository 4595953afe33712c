"""The torch::grad_scaler_* commands against torch.amp.GradScaler called
from Python: the same calls, the same outcomes."""
import pytest
import torch

import tclamp

FLOAT32_MAX = torch.finfo(torch.float32).max
FLOAT32_LEAST = 2.0 ** -149
POSITIVE = "must be a positive number"
AT_MOST = f"must be at most {FLOAT32_MAX!r}"
AT_LEAST = f"must be at least {FLOAT32_LEAST!r}"


@pytest.fixture
def interp():
    interp = tclamp.Interp()
    yield interp
    interp.delete()


def test_update_takes_a_tensor_new_scale_as_torch_does(interp):
    """torch's update() takes new_scale as a float or a one-element tensor;
    the command refused every tensor handle with "must be a positive
    number" (even torch.tensor(8.0)).  Now a tensor's value is the scale, a
    one-element tensor's value follows the number's rule, and torch reports
    the rest; a refused one changes nothing."""
    interp.eval("""
        py exec {
import torch
parity_net = torch.nn.Linear(4, 4)
parity_opt = torch.optim.SGD(parity_net.parameters(), lr=0.1)
}
        set net [py eval parity_net]
        set opt [py eval parity_opt]
        set s [torch::grad_scaler_new -init_scale 1024 -device cpu]
        proc iteration {} {
            [torch::grad_scaler_scale $::s [py call torch.sum [py call $::net [py eval {torch.ones(2, 4)}]]]] backward
            torch::grad_scaler_step $::s $::opt
        }
        proc outcome {script} {
            list [catch {uplevel #0 $script} m o] $m [expr {[dict exists $o -errorcode] ? [dict get $o -errorcode] : {}}]
        }
    """)
    run = lambda script: interp.eval(f"outcome {{{script}}}")
    as_list = lambda *words: interp.call("list", *words)
    interp.eval("iteration")
    interp.eval("py exec {parity_t = torch.tensor(8.0)}")
    assert run("torch::grad_scaler_update $s [py eval parity_t]") == as_list(0, "scaler updated", "")
    interp.eval("py exec {parity_t.fill_(99.0)}")   # later changes to the tensor do not reach the scale
    assert interp.eval("torch::grad_scaler_get_scale $s") == "8.0"
    interp.eval("iteration")
    assert run("torch::gradScalerUpdate -newScale [py eval {torch.tensor(32.0, dtype=torch.float64)}]"
               " -scaler $s") == as_list(0, "scaler updated", "")
    assert interp.eval("torch::grad_scaler_get_scale $s") == "32.0"
    torch_says = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                  "torch.FloatTensor with requires_grad=False.")
    for tensor in ("torch.tensor([2.0, 4.0])", "torch.tensor(4.0, requires_grad=True)"):
        interp.eval("iteration")
        assert run(f"torch::grad_scaler_update $s [py eval {{{tensor}}}]") == as_list(
            1, f"AssertionError: {torch_says}", as_list("PYTHON", "AssertionError", torch_says)), tensor
        assert interp.eval("torch::grad_scaler_get_scale $s") == "32.0"
        interp.eval("torch::grad_scaler_update $s 32")
    # torch's copy_ into its 0-d scale refuses a shape [1] tensor: its error too.
    interp.eval("iteration")
    assert run("torch::grad_scaler_update $s [py eval {torch.tensor([4.0])}]") == as_list(
        1, "RuntimeError: output with shape [] doesn't match the broadcast shape [1]",
        as_list("PYTHON", "RuntimeError", "output with shape [] doesn't match the broadcast shape [1]"))
    interp.eval("torch::grad_scaler_update $s 32")
    interp.eval("iteration")
    before = interp.eval("torch::grad_scaler_state_dict $s")
    for tensor, tail in (("torch.tensor(0.0)", POSITIVE), ("torch.tensor(-2)", POSITIVE),
                         ("torch.tensor(float('nan'))", POSITIVE),
                         ("torch.tensor(1e39, dtype=torch.float64)", AT_MOST),
                         ("torch.tensor(1e-50, dtype=torch.float64)", AT_LEAST)):
        assert run(f"torch::grad_scaler_update -new_scale [py eval {{{tensor}}}] -scaler $s") == as_list(
            1, f"Invalid new_scale: {tail}",
            as_list("TCLAMP", "INVALID_VALUE", "-new_scale", "<Tensor>")), tensor
        assert interp.eval("torch::grad_scaler_state_dict $s") == before
    # The refusals left the step to update, as a refused number does.
    assert run("torch::grad_scaler_update $s") == as_list(0, "scaler updated", "")
    interp.eval("py release $s; py release $opt; py release $net")
