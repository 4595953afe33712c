# Data-parallel training from Tcl on torch's own engine: torchrun starts one
# tclsh per rank, torch.distributed joins them (gloo on the CPU, nccl on
# GPUs), DistributedDataParallel averages the gradients, and each forward
# pass runs in a scoped autocast block.  float16 steps go through a
# GradScaler; rank 0 logs.
#
#   TCLLIBPATH=$PWD/tcl .venv/bin/torchrun --no-python --nproc-per-node 2 \
#       tclsh examples/train_ddp.tcl ?-epochs n? ?-dtype float16|bfloat16? ?-dump dir?
#
# torchrun passes its environment on, so each tclsh finds tclamp the way
# the calling shell does (TCLLIBPATH, or an installed package).  -dump dir
# makes every rank write its final weights to dir/rank<N>.txt.
package require tclamp

set options {-epochs 8 -dtype {} -dump {}}
if {[llength $argv] % 2} {
    error "option \"[lindex $argv end]\" needs a value"
}
foreach {name value} $argv {
    if {![dict exists $options $name]} {
        error "unknown option \"$name\": use -epochs, -dtype or -dump"
    }
    dict set options $name $value
}
if {![string is entier -strict [dict get $options -epochs]] || [dict get $options -epochs] < 1} {
    error "-epochs needs a whole number of epochs, 1 or more: got \"[dict get $options -epochs]\""
}

py exec {
import gc
import os
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) says where to meet.
# A GPU for each of this machine's ranks, or else all of them on the CPU.
local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
device_type = "cuda" if torch.cuda.device_count() >= local_ranks else "cpu"
dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
rank, world = dist.get_rank(), dist.get_world_size()
device = "cpu"
if device_type == "cuda":
    device = f"cuda:{os.environ['LOCAL_RANK']}"
    torch.cuda.set_device(device)

torch.manual_seed(0)                    # the same data on every rank
features = torch.randn(1024, 16)
targets = torch.tanh(features @ torch.randn(16, 1) / 4)
sampler = DistributedSampler(TensorDataset(features, targets), shuffle=True, seed=0)
loader = DataLoader(TensorDataset(features, targets), batch_size=64, sampler=sampler)

torch.manual_seed(rank)                 # weights differ: DDP starts all from rank 0's
model = DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device),
    device_ids=[device] if device_type == "cuda" else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

def epoch_batches(epoch):
    """This rank's share of the data for one epoch, reshuffled per epoch."""
    global batches
    sampler.set_epoch(int(epoch))
    batches = [(x.to(device), y.to(device)) for x, y in loader]
    return len(batches)

def forward_loss(index):
    """One batch's loss; runs under the autocast state Tcl has set."""
    x, y = batches[int(index)]
    optimizer.zero_grad()
    return F.mse_loss(model(x).float(), y)

def mean_over_ranks(value):
    total = torch.tensor([float(value)], device=device)
    dist.all_reduce(total)
    return total.item() / world

def weights():
    return [v for p in model.module.parameters() for v in p.detach().flatten().tolist()]

def finish():
    # Meet before tearing down: gloo can abort when one rank leaves early.
    # Then drop the model, whose process group goes with it: its gloo
    # threads end now, not while Python is being finalized (a thread that
    # needs Python then aborts the process: terminate called ...).
    global model, optimizer, batches
    dist.barrier()
    dist.destroy_process_group()
    del model, optimizer, batches
    gc.collect()
}
set rank [py eval rank]
set device [py eval device_type]
set dtype [dict get $options -dtype]
if {$dtype eq ""} {
    set dtype [expr {$device eq "cuda" ? "float16" : "bfloat16"}]
}

# Scaling protects float16 gradients; for bfloat16 the scaler passes through.
set scaler [torch::grad_scaler_new -device $device -enabled [expr {$dtype eq "float16"}]]
set optimizer [py eval optimizer]
if {$rank == 0} {
    puts "training on [py eval world] ranks ($device, $dtype)"
}
for {set epoch 1} {$epoch <= [dict get $options -epochs]} {incr epoch} {
    set total 0.0
    set count [py call epoch_batches $epoch]
    for {set batch 0} {$batch < $count} {incr batch} {
        py scope {                      ;# the step's tensors go when it ends
            set loss [torch::autocast -device_type $device -dtype $dtype {
                py call forward_loss $batch
            }]
            set total [expr {$total + [$loss item]}]
            [torch::grad_scaler_scale $scaler $loss] backward    ;# DDP averages the gradients here
            torch::grad_scaler_step $scaler $optimizer
            torch::grad_scaler_update $scaler
        }
    }
    set mean [py call mean_over_ranks [expr {$total / $count}]]
    if {$rank == 0} {
        puts [format "epoch %d loss %.5f scale %s" $epoch $mean [torch::grad_scaler_get_scale $scaler]]
    }
}

if {[dict get $options -dump] ne ""} {
    set f [open [file join [dict get $options -dump] rank$rank.txt] w]
    puts $f [py call weights]
    close $f
}
torch::grad_scaler_free $scaler
py release $optimizer
py call finish
