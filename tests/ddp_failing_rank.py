"""examples/train_ddp.tcl's training in pure Python, without tclamp, where
rank 1 raises at its third step like test_an_error_on_one_rank_fails_the_run:

    torchrun --standalone --nproc-per-node 2 tests/ddp_failing_rank.py

Rank 1 prints its traceback and exits 1, but now and then its teardown
aborts instead ("terminate called without an active exception", exit code
-6): torch's own gloo teardown while its peer is gone, no Tcl involved."""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
features = torch.randn(1024, 16)
targets = torch.tanh(features @ torch.randn(16, 1) / 4)
sampler = DistributedSampler(TensorDataset(features, targets), shuffle=True, seed=0)
loader = DataLoader(TensorDataset(features, targets), batch_size=64, sampler=sampler)
torch.manual_seed(rank)
model = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", enabled=False)
steps = 0
for epoch in range(1, 9):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        if rank == 1:
            steps += 1
            if steps == 3:
                raise RuntimeError("rank 1 broke at step 3")
        scaler.step(optimizer)
        scaler.update()
dist.barrier()
dist.destroy_process_group()
