"""A small network and synthetic data for the Tcl examples.

Tcl drives it: the functions take and return plain values or torch objects
that arrive in Tcl as `py` object handles.
"""
import torch
import torch.nn.functional as F

INPUTS, HIDDEN, SAMPLES, BATCH = 16, 64, 2048, 128

torch.manual_seed(0)
features = torch.randn(SAMPLES, INPUTS)
targets = torch.tanh(features @ torch.randn(INPUTS, 1) / 4) + 0.05 * torch.randn(SAMPLES, 1)
model = torch.nn.Sequential(
    torch.nn.Linear(INPUTS, HIDDEN), torch.nn.ReLU(),
    torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
    torch.nn.Linear(HIDDEN, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
last_dtype = None


def batch_count():
    return SAMPLES // BATCH


def forward_loss(batch):
    """The loss of one batch; runs under whatever autocast Tcl has set."""
    global last_dtype
    rows = slice(int(batch) * BATCH, (int(batch) + 1) * BATCH)
    optimizer.zero_grad()
    output = model(features[rows])
    last_dtype = str(output.dtype).removeprefix("torch.")
    return F.mse_loss(output.float(), targets[rows])


def computed_dtype():
    """The dtype the last forward pass computed in."""
    return last_dtype


def full_loss():
    with torch.no_grad():
        return round(F.mse_loss(model(features).float(), targets).item(), 4)


def predict(rows):
    with torch.no_grad():
        return model(features[: int(rows)])
