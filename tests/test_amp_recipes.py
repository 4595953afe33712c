"""The AMP recipes beyond the basic step, written as a Tcl user writes
them (torch:: commands and py handles, each step in `py scope`, a proc
looping over the steps) and as the same recipe in Python on torch.amp,
compared after every step: the parameters bit for bit, the scale and
growth tracker the Tcl user reads, the loss, and the dtype each layer's
output had under the autocast block.  Some steps get an inf in the loss,
so skipped steps and backoffs are compared too.

Recipes: gradient clipping after unscale, gradient accumulation, two
models with two losses and two optimizers on one scaler, a gradient
penalty (autograd.grad of the scaled loss, unscaled by hand), Adam in its
foreach and fused forms (and bfloat16 with a disabled scaler), a
checkpoint saved mid-run and resumed in new objects, and custom autograd
functions (torch.amp.custom_fwd/custom_bwd) called under the block.  Then: handles and
memory over 2000 steps, and the errors of steps taken in the wrong order,
which must be torch's own, leave no handle behind, and leave the scaler
usable."""
import gc
import math
import os
import sys
import tracemalloc

import pytest
import torch
import torch.nn.functional as F

import tclamp

STEPS = 8
INF_STEPS = (1, 6)      # an inf loss here: the step is skipped, the scale backs off


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                               torch.nn.ReLU(), torch.nn.Linear(16, 4))


MODEL = ("torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), "
         "torch.nn.ReLU(), torch.nn.Linear(16, 4))")


class Recorder:
    """Per-step records: parameters, scale, tracker, loss, and the output
    dtype of each watched module during the step."""

    def __init__(self):
        self.steps = []
        self.dtypes = []

    def watch(self, model, tag="m"):
        for name, module in model.named_modules():
            if name:
                module.register_forward_hook(
                    lambda mod, args, out, name=f"{tag}.{name}": self.dtypes.append(
                        (name, out.dtype)))
        return ""

    def record(self, step, scale, tracker, loss, *models):
        params = [p.detach().clone() for m in models for p in m.parameters()]
        self.steps.append({"step": int(step), "scale": float(scale), "tracker": int(tracker),
                           "loss": float(loss), "params": params, "dtypes": self.dtypes})
        self.dtypes = []
        return ""


def python_record(rec, step, scaler, loss, *models):
    rec.record(step, scaler.get_scale(), scaler.state_dict().get("_growth_tracker", 0),
               loss.item(), *models)


def same_float(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def assert_same(python, tcl):
    assert len(python.steps) == len(tcl.steps) == STEPS, (len(python.steps), len(tcl.steps))
    for p, t in zip(python.steps, tcl.steps):
        where = f"step {p['step']}"
        assert p["step"] == t["step"], where
        assert p["scale"] == t["scale"], (where, p["scale"], t["scale"])
        assert p["tracker"] == t["tracker"], (where, p["tracker"], t["tracker"])
        assert same_float(p["loss"], t["loss"]), (where, p["loss"], t["loss"])
        assert p["dtypes"] == t["dtypes"], (where, p["dtypes"], t["dtypes"])
        assert len(p["params"]) == len(t["params"])
        for i, (a, b) in enumerate(zip(p["params"], t["params"])):
            assert torch.equal(a, b), (where, f"parameter {i}", (a - b).abs().max())


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a machine whose CPUs other jobs share,
    torch's spinning threads make a step many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def interp():
    interp = tclamp.Interp()
    interp.eval("py import torch; py import operator")
    yield interp
    interp.delete()


def run_tcl(interp, script, call):
    """Defines the recipe's procs (`script`), runs `call`, and returns the
    recorder; every handle the recipe made must be gone afterwards."""
    rec = Recorder()
    interp.create_command("::record", rec.record)
    interp.create_command("::watch", rec.watch)
    interp.eval(COMMON_TCL)
    interp.eval(script)
    before = interp.handle_count
    interp.eval(call)
    assert interp.handle_count == before, interp.eval("info commands ::py::obj*")
    return rec


# What every Tcl recipe shares: a seeded model, a data generator of its
# own (so a model made later draws nothing from the data's stream), and a
# batch.  The model is made with the seed set, as the Python one is.
COMMON_TCL = r"""
# torch.manual_seed returns the default generator: a handle, kept out of
# the recipe by a scope (as is the parameters() generator an optimizer takes)
proc new_model {{seed 0}} {
    py scope { py call -types int torch.manual_seed $seed; list }
    py eval {%s}
}
proc new_generator {} {
    set g [py call torch.Generator]
    py call -types {str int} torch.Generator.manual_seed $g 1
    return $g
}
proc batch {gen} {
    list [py call -types int -kwlist [list generator $gen] torch.randn 16 8] \
         [py call -types int -kwlist [list generator $gen] torch.randn 16 4]
}
# the loss of one batch, under float16 autocast, times inf when asked
proc forward_loss {model x y poison {dtype float16}} {
    set loss [torch::autocast -device_type cpu -dtype $dtype {
        py call torch.nn.functional.mse_loss [py call $model $x] $y
    }]
    if {$poison} { set loss [py call -types {str float} operator.mul $loss inf] }
    return $loss
}
proc record_step {step scaler loss args} {
    record $step [torch::grad_scaler_get_scale $scaler] \
        [expr {[torch::grad_scaler_state_dict $scaler] eq {} ? 0
               : [dict get [torch::grad_scaler_state_dict $scaler] _growth_tracker]}] \
        [$loss item] {*}$args
}
""" % MODEL


def python_batch(gen):
    return torch.randn(16, 8, generator=gen), torch.randn(16, 4, generator=gen)


def python_setup(rec):
    torch.manual_seed(0)
    model = make_model()
    rec.watch(model)
    gen = torch.Generator()
    gen.manual_seed(1)
    return model, gen


def python_loss(model, x, y, poison, dtype=torch.float16):
    with torch.autocast("cpu", dtype=dtype):
        loss = F.mse_loss(model(x), y)
    return loss * float("inf") if poison else loss


# --- gradient clipping: unscale, clip the real gradients, step ---

CLIP_TCL = r"""
proc train_clip {steps inf_steps kind} {
    set model [new_model]
    watch $model
    set gen [new_generator]
    if {$kind eq "sgd"} {
        set opt [py scope { py call -kwlist {lr 0.05 momentum 0.9} -kwtypes {lr float momentum float} \
            torch.optim.SGD [$model parameters] }]
    } else {        ;# a fused optimizer: the scaler hands it no scale once unscaled
        set opt [py scope { py call -kwlist {lr 0.01 fused 1} -kwtypes {lr float fused bool} \
            torch.optim.Adam [$model parameters] }]
    }
    set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 3 -device cpu]
    for {set step 0} {$step < $steps} {incr step} {
        py scope {
            lassign [batch $gen] x y
            $opt zero_grad
            set loss [forward_loss $model $x $y [expr {$step in $inf_steps}]]
            [torch::grad_scaler_scale $scaler $loss] backward
            torch::grad_scaler_unscale $scaler $opt
            py call -types {str float} torch.nn.utils.clip_grad_norm_ [$model parameters] 0.5
            torch::grad_scaler_step $scaler $opt
            torch::grad_scaler_update $scaler
            record_step $step $scaler $loss $model
        }
    }
    foreach h [list $model $gen $opt $scaler] { py release $h }
}
"""


def python_clip(rec, kind):
    model, gen = python_setup(rec)
    if kind == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.01, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024, growth_interval=3)
    for step in range(STEPS):
        x, y = python_batch(gen)
        opt.zero_grad()
        loss = python_loss(model, x, y, step in INF_STEPS)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        scaler.step(opt)
        scaler.update()
        python_record(rec, step, scaler, loss, model)


@pytest.mark.parametrize("kind", ["sgd", "adam_fused"])
def test_clipping_after_unscale(interp, kind):
    python = Recorder()
    python_clip(python, kind)
    tcl = run_tcl(interp, CLIP_TCL, f"train_clip {STEPS} {{{' '.join(map(str, INF_STEPS))}}} {kind}")
    assert_same(python, tcl)
    # the recipe did something: steps skipped and the scale both backed off and grew
    scales = [s["scale"] for s in python.steps]
    assert min(scales) < 1024 and any(b > a for a, b in zip(scales, scales[1:]))


# --- gradient accumulation: each micro-batch's loss / N, one step per N ---

ACCUM = 4

ACCUM_TCL = r"""
proc train_accumulate {steps accum inf_steps} {
    set model [new_model]
    watch $model
    set gen [new_generator]
    set opt [py scope { py call -kwlist {lr 0.05} -kwtypes {lr float} torch.optim.SGD [$model parameters] }]
    set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 3 -device cpu]
    for {set step 0} {$step < $steps} {incr step} {
        py scope {
            for {set micro 0} {$micro < $accum} {incr micro} {
                lassign [batch $gen] x y
                set loss [forward_loss $model $x $y [expr {$step in $inf_steps && $micro == 1}]]
                set loss [py call -types {str int} operator.truediv $loss $accum]
                [torch::grad_scaler_scale $scaler $loss] backward
            }
            torch::grad_scaler_step $scaler $opt
            torch::grad_scaler_update $scaler
            $opt zero_grad
            record_step $step $scaler $loss $model
        }
    }
    foreach h [list $model $gen $opt $scaler] { py release $h }
}
"""


def python_accumulate(rec):
    model, gen = python_setup(rec)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024, growth_interval=3)
    for step in range(STEPS):
        for micro in range(ACCUM):
            x, y = python_batch(gen)
            loss = python_loss(model, x, y, step in INF_STEPS and micro == 1)
            loss = loss / ACCUM
            scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        python_record(rec, step, scaler, loss, model)


def test_gradient_accumulation(interp):
    python = Recorder()
    python_accumulate(python)
    tcl = run_tcl(interp, ACCUM_TCL,
                  f"train_accumulate {STEPS} {ACCUM} {{{' '.join(map(str, INF_STEPS))}}}")
    assert_same(python, tcl)


# --- two models, two losses, two optimizers, one scaler ---

MULTI_TCL = r"""
proc train_two_models {steps inf_steps} {
    set model0 [new_model]
    watch $model0 m0
    set model1 [new_model 7]
    watch $model1 m1
    set gen [new_generator]
    set opt0 [py scope { py call -kwlist {lr 0.05} -kwtypes {lr float} torch.optim.SGD [$model0 parameters] }]
    set opt1 [py scope { py call -kwlist {lr 0.01} -kwtypes {lr float} torch.optim.Adam [$model1 parameters] }]
    set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 3 -device cpu]
    for {set step 0} {$step < $steps} {incr step} {
        py scope {
            lassign [batch $gen] x y
            $opt0 zero_grad
            $opt1 zero_grad
            torch::autocast -device_type cpu -dtype float16 {
                set out0 [py call $model0 $x]
                set out1 [py call $model1 $x]
                set mix0 [py call operator.add [py call -types {int str} operator.mul 2 $out0] \
                                               [py call -types {int str} operator.mul 3 $out1]]
                set mix1 [py call operator.sub [py call -types {int str} operator.mul 3 $out0] \
                                               [py call -types {int str} operator.mul 5 $out1]]
                set loss0 [py call torch.nn.functional.mse_loss $mix0 $y]
                set loss1 [py call torch.nn.functional.mse_loss $mix1 $y]
            }
            if {$step in $inf_steps} { set loss1 [py call -types {str float} operator.mul $loss1 inf] }
            # the first backward keeps the graph the second one goes through again
            py call -kwlist {retain_graph 1} -kwtypes {retain_graph bool} \
                torch.autograd.backward [torch::grad_scaler_scale $scaler $loss0]
            [torch::grad_scaler_scale $scaler $loss1] backward
            torch::grad_scaler_unscale $scaler $opt0
            py call -types {str float} torch.nn.utils.clip_grad_norm_ [$model0 parameters] 1.0
            torch::grad_scaler_step $scaler $opt0
            torch::grad_scaler_step $scaler $opt1
            torch::grad_scaler_update $scaler
            record_step $step $scaler $loss1 $model0 $model1
        }
    }
    foreach h [list $model0 $model1 $gen $opt0 $opt1 $scaler] { py release $h }
}
"""


def python_two_models(rec):
    model0, gen = python_setup(rec)
    torch.manual_seed(7)
    model1 = make_model()
    rec.dtypes.clear()
    for m in (model0, model1):      # re-watch under the Tcl tags
        for module in m.modules():
            module._forward_hooks.clear()
    rec.watch(model0, "m0")
    rec.watch(model1, "m1")
    opt0 = torch.optim.SGD(model0.parameters(), lr=0.05)
    opt1 = torch.optim.Adam(model1.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024, growth_interval=3)
    for step in range(STEPS):
        x, y = python_batch(gen)
        opt0.zero_grad()
        opt1.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            out0 = model0(x)
            out1 = model1(x)
            loss0 = F.mse_loss(2 * out0 + 3 * out1, y)
            loss1 = F.mse_loss(3 * out0 - 5 * out1, y)
        if step in INF_STEPS:
            loss1 = loss1 * float("inf")
        scaler.scale(loss0).backward(retain_graph=True)
        scaler.scale(loss1).backward()
        scaler.unscale_(opt0)
        torch.nn.utils.clip_grad_norm_(model0.parameters(), 1.0)
        scaler.step(opt0)
        scaler.step(opt1)
        scaler.update()
        python_record(rec, step, scaler, loss1, model0, model1)


def test_two_models_two_optimizers_one_scaler(interp):
    python = Recorder()
    python_two_models(python)
    tcl = run_tcl(interp, MULTI_TCL, f"train_two_models {STEPS} {{{' '.join(map(str, INF_STEPS))}}}")
    assert_same(python, tcl)


# --- gradient penalty: autograd.grad of the scaled loss, unscaled by hand ---

PENALTY_TCL = r"""
proc train_penalty {steps inf_steps} {
    set model [new_model]
    watch $model
    set gen [new_generator]
    set opt [py scope { py call -kwlist {lr 0.05} -kwtypes {lr float} torch.optim.SGD [$model parameters] }]
    set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 3 -device cpu]
    for {set step 0} {$step < $steps} {incr step} {
        py scope {
            lassign [batch $gen] x y
            $opt zero_grad
            set loss [forward_loss $model $x $y [expr {$step in $inf_steps}]]
            # the gradients of the scaled loss, with their graph, then unscaled
            set params [py call list [$model parameters]]
            set scaled_grads [py call -kwlist {create_graph 1} -kwtypes {create_graph bool} \
                -types {str list} torch.autograd.grad [torch::grad_scaler_scale $scaler $loss] $params]
            set inv_scale [expr {1.0 / [torch::grad_scaler_get_scale $scaler]}]
            set norm_sq 0
            torch::autocast -device_type cpu -dtype float16 {
                foreach g $scaled_grads {
                    set g [py call -types {str float} operator.mul $g $inv_scale]
                    set norm_sq [py call -types {str int} operator.add [[py call -types {str int} torch.pow $g 2] sum] $norm_sq]
                }
                set penalized [py call operator.add $loss [$norm_sq sqrt]]
            }
            [torch::grad_scaler_scale $scaler $penalized] backward
            torch::grad_scaler_step $scaler $opt
            torch::grad_scaler_update $scaler
            record_step $step $scaler $penalized $model
        }
    }
    foreach h [list $model $gen $opt $scaler] { py release $h }
}
"""


def python_penalty(rec):
    model, gen = python_setup(rec)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024, growth_interval=3)
    for step in range(STEPS):
        x, y = python_batch(gen)
        opt.zero_grad()
        loss = python_loss(model, x, y, step in INF_STEPS)
        scaled_grads = torch.autograd.grad(scaler.scale(loss), list(model.parameters()),
                                           create_graph=True)
        inv_scale = 1.0 / scaler.get_scale()
        with torch.autocast("cpu", dtype=torch.float16):
            norm_sq = 0
            for g in scaled_grads:
                g = g * inv_scale
                norm_sq = g.pow(2).sum() + norm_sq
            penalized = loss + norm_sq.sqrt()
        scaler.scale(penalized).backward()
        scaler.step(opt)
        scaler.update()
        python_record(rec, step, scaler, penalized, model)


def test_gradient_penalty(interp):
    python = Recorder()
    python_penalty(python)
    tcl = run_tcl(interp, PENALTY_TCL, f"train_penalty {STEPS} {{{' '.join(map(str, INF_STEPS))}}}")
    assert_same(python, tcl)


# --- Adam, foreach and fused (the scaler hands a fused one its scale) ---

ADAM_TCL = r"""
proc train_adam {steps inf_steps kind dtype enabled} {
    set model [new_model]
    watch $model
    set gen [new_generator]
    set opt [py scope { py call -kwlist [list lr 0.01 $kind 1] -kwtypes [list lr float $kind bool] \
        torch.optim.Adam [$model parameters] }]
    set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 3 -device cpu \
        -enabled $enabled]
    for {set step 0} {$step < $steps} {incr step} {
        py scope {
            lassign [batch $gen] x y
            $opt zero_grad
            set loss [forward_loss $model $x $y [expr {$step in $inf_steps}] $dtype]
            [torch::grad_scaler_scale $scaler $loss] backward
            torch::grad_scaler_step $scaler $opt
            torch::grad_scaler_update $scaler
            record_step $step $scaler $loss $model
        }
    }
    foreach h [list $model $gen $opt $scaler] { py release $h }
}
"""


def python_adam(rec, kind, dtype, enabled, inf_steps):
    model, gen = python_setup(rec)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, **{kind: True})
    scaler = torch.amp.GradScaler("cpu", init_scale=1024, growth_interval=3, enabled=enabled)
    for step in range(STEPS):
        x, y = python_batch(gen)
        opt.zero_grad()
        loss = python_loss(model, x, y, step in inf_steps, dtype)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        python_record(rec, step, scaler, loss, model)


@pytest.mark.parametrize("kind,dtype,enabled", [
    ("foreach", "float16", True), ("fused", "float16", True), ("fused", "bfloat16", False)])
def test_adam(interp, kind, dtype, enabled):
    # a disabled scaler does not skip: no inf there, or the weights go NaN in both
    inf_steps = INF_STEPS if enabled else ()
    python = Recorder()
    python_adam(python, kind, getattr(torch, dtype), enabled, inf_steps)
    tcl = run_tcl(interp, ADAM_TCL, f"train_adam {STEPS} {{{' '.join(map(str, inf_steps))}}} "
                                    f"{kind} {dtype} {int(enabled)}")
    assert_same(python, tcl)
    want = "float16" if dtype == "float16" else "bfloat16"
    first = dict(python.steps[0]["dtypes"])
    assert str(first["m.0"]) == str(first["m.3"]) == f"torch.{want}"


# --- a checkpoint mid-run: model, optimizer and scaler saved, resumed in new ones ---

CHECKPOINT_TCL = r"""
proc train_span {model opt scaler gen from to inf_steps} {
    for {set step $from} {$step < $to} {incr step} {
        py scope {
            lassign [batch $gen] x y
            $opt zero_grad
            set loss [forward_loss $model $x $y [expr {$step in $inf_steps}]]
            [torch::grad_scaler_scale $scaler $loss] backward
            torch::grad_scaler_step $scaler $opt
            torch::grad_scaler_update $scaler
            record_step $step $scaler $loss $model
        }
    }
}
proc new_optimizer {model} {
    py scope { py call -kwlist {lr 0.01} -kwtypes {lr float} torch.optim.Adam [$model parameters] }
}
proc train_checkpointed {steps stop inf_steps dir} {
    set model [new_model]
    watch $model
    set gen [new_generator]
    set opt [new_optimizer $model]
    set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 3 -device cpu]
    train_span $model $opt $scaler $gen 0 $stop $inf_steps
    py scope {
        # a state_dict comes back as a Tcl dict of tensor handles: `dict`
        # makes it a Python dict of those tensors again (untyped, torch.save
        # would save the dict's text).  An optimizer's state (nested, with
        # ints, None and bools) does not survive the Tcl dict: it is saved
        # by a line of Python.
        py call -types {dict str} torch.save [$model state_dict] $dir/model.pt
        py call [py eval {lambda opt, path: torch.save(opt.state_dict(), path)}] $opt \
            $dir/optimizer.pt
        py call torch.save [$gen get_state] $dir/data.pt
    }
    set f [open $dir/scaler.ckpt w]
    puts $f [torch::grad_scaler_state_dict $scaler]
    close $f
    foreach h [list $model $gen $opt $scaler] { py release $h }

    # a new process would start here: new objects, loaded from the files
    set model [new_model 99]
    watch $model
    set opt [new_optimizer $model]
    set gen [py call torch.Generator]
    set scaler [torch::grad_scaler_new -device cpu]
    py scope {
        py call -types {str dict} torch.nn.Module.load_state_dict $model \
            [py call torch.load $dir/model.pt]
        py call [py eval {lambda opt, path: opt.load_state_dict(torch.load(path))}] $opt \
            $dir/optimizer.pt
        $gen set_state [py call torch.load $dir/data.pt]
    }
    set f [open $dir/scaler.ckpt]
    torch::grad_scaler_load_state_dict $scaler [read $f]
    close $f
    train_span $model $opt $scaler $gen $stop $steps $inf_steps
    foreach h [list $model $gen $opt $scaler] { py release $h }
}
"""


def python_checkpointed(rec, stop, tmp_path):
    model, gen = python_setup(rec)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024, growth_interval=3)

    def span(model, opt, scaler, gen, start, end):
        for step in range(start, end):
            x, y = python_batch(gen)
            opt.zero_grad()
            loss = python_loss(model, x, y, step in INF_STEPS)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            python_record(rec, step, scaler, loss, model)

    span(model, opt, scaler, gen, 0, stop)
    checkpoint = {"model": model.state_dict(), "optimizer": opt.state_dict(),
                  "scaler": scaler.state_dict(), "data": gen.get_state()}
    torch.save(checkpoint, tmp_path / "python.pt")
    checkpoint = torch.load(tmp_path / "python.pt")
    torch.manual_seed(99)
    model = make_model()
    rec.watch(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    gen = torch.Generator()
    model.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
    gen.set_state(checkpoint["data"])
    span(model, opt, scaler, gen, stop, STEPS)


def test_checkpoint_and_resume(interp, tmp_path):
    stop = 4            # after one skipped step and a growth: tracker and scale both moved
    python = Recorder()
    python_checkpointed(python, stop, tmp_path)
    tcl = run_tcl(interp, CHECKPOINT_TCL,
                  f"train_checkpointed {STEPS} {stop} {{{' '.join(map(str, INF_STEPS))}}} "
                  f"{{{tmp_path}}}")
    assert_same(python, tcl)
    # an uninterrupted Python run is the same run
    whole = Recorder()
    python_adam_plain(whole)
    assert_same(whole, tcl)
    assert python.steps[stop - 1]["tracker"] != 0 or python.steps[stop - 1]["scale"] != 1024


def python_adam_plain(rec):
    model, gen = python_setup(rec)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024, growth_interval=3)
    for step in range(STEPS):
        x, y = python_batch(gen)
        opt.zero_grad()
        loss = python_loss(model, x, y, step in INF_STEPS)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        python_record(rec, step, scaler, loss, model)


# --- handles and memory over many steps ---

LOOP_TCL = r"""
proc train_many {model opt scaler gen n} {
    for {set step 0} {$step < $n} {incr step} {
        py scope {
            lassign [batch $gen] x y
            $opt zero_grad
            set loss [forward_loss $model $x $y [expr {$step % 97 == 5}]]
            [torch::grad_scaler_scale $scaler $loss] backward
            torch::grad_scaler_unscale $scaler $opt
            py call -types {str float} torch.nn.utils.clip_grad_norm_ [$model parameters] 1.0
            torch::grad_scaler_step $scaler $opt
            torch::grad_scaler_update $scaler
            torch::grad_scaler_get_scale $scaler
            torch::grad_scaler_state_dict $scaler
            $loss item
        }
    }
}
set model [new_model]
set opt [py scope { py call -kwlist {lr 0.01 fused 1} -kwtypes {lr float fused bool} \
    torch.optim.Adam [$model parameters] }]
set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 50 -device cpu]
set gen [new_generator]
"""


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_two_thousand_steps_hold_no_handles_or_memory(interp):
    """2000 clipped steps (an inf one every 97): no handle, Python object or
    memory piles up.  sys.getallocatedblocks and RSS over the 2000 steps;
    tracemalloc (which slows every allocation) over 50 more, to name
    the line that grows should one."""
    interp.eval(COMMON_TCL)
    interp.eval(LOOP_TCL)
    interp.eval("train_many $model $opt $scaler $gen 200")     # caches warm
    gc.collect()
    handles = interp.handle_count
    commands = interp.eval("llength [info commands ::py::obj*]")
    blocks, rss_before = sys.getallocatedblocks(), rss()
    interp.eval("train_many $model $opt $scaler $gen 2000")
    gc.collect()
    assert interp.handle_count == handles == 4
    assert interp.eval("llength [info commands ::py::obj*]") == commands
    assert sys.getallocatedblocks() - blocks < 1000      # under one per two steps
    assert rss() - rss_before < 16 * 2**20
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        interp.eval("train_many $model $opt $scaler $gen 50")
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = after.compare_to(before, "lineno")
    assert sum(stat.size_diff for stat in grown) < 32 * 1024, grown[:10]
    assert float(interp.eval("torch::grad_scaler_get_scale $scaler")) > 0


# --- steps in the wrong order: torch's errors, nothing left behind ---

class PythonOrder:
    def __init__(self, model, opt, scaler, x, y):
        self.model, self.opt, self.scaler, self.x, self.y = model, opt, scaler, x, y
        self.loss = self.kept = None

    def do(self, op):
        if op == "forward":
            with torch.autocast("cpu", dtype=torch.float16):
                self.loss = F.mse_loss(self.model(self.x), self.y)
        elif op == "scale_backward":
            self.scaler.scale(self.loss).backward()
        elif op == "keep_scaled":
            self.kept = self.scaler.scale(self.loss)
        elif op == "backward_kept":
            self.kept.backward()
        elif op == "unscale":
            self.scaler.unscale_(self.opt)
        elif op == "step":
            self.scaler.step(self.opt)
        elif op == "update":
            self.scaler.update()
        elif op == "zero_grad":
            self.opt.zero_grad()


ORDER_TCL = {
    "forward": "if {[info exists ::loss]} { py release $::loss }\n"
               "set ::loss [py scope { forward_loss $::model $::x $::y 0 }]",
    "scale_backward": "py scope { [torch::grad_scaler_scale $::scaler $::loss] backward }",
    "keep_scaled": "set ::kept [torch::grad_scaler_scale $::scaler $::loss]",
    "backward_kept": "$::kept backward",
    "unscale": "torch::grad_scaler_unscale $::scaler $::opt",
    "step": "torch::grad_scaler_step $::scaler $::opt",
    "update": "torch::grad_scaler_update $::scaler",
    "zero_grad": "$::opt zero_grad",
}

ORDERS = {
    "step before backward": ["forward", "step"],
    "update before step": ["forward", "scale_backward", "update"],
    "unscale twice": ["forward", "scale_backward", "unscale", "unscale", "step", "update"],
    "unscale after step": ["forward", "scale_backward", "step", "unscale", "update"],
    "step twice": ["forward", "scale_backward", "step", "step", "update"],
    "backward after update": ["forward", "keep_scaled", "forward", "scale_backward", "step",
                              "update", "backward_kept"],
    "step again after update": ["forward", "scale_backward", "unscale", "step", "update",
                                "step", "update"],
    "backward twice": ["forward", "keep_scaled", "backward_kept", "backward_kept", "step",
                       "update"],
}


@pytest.mark.parametrize("name", ORDERS)
def test_wrong_order_fails_as_in_torch(interp, name):
    ops = ORDERS[name]
    torch.manual_seed(0)
    model = make_model()
    gen = torch.Generator()
    gen.manual_seed(1)
    x, y = python_batch(gen)
    world = PythonOrder(model, torch.optim.SGD(model.parameters(), lr=0.1),
                        torch.amp.GradScaler("cpu", init_scale=1024.0), x, y)
    python = []
    for op in ops:
        try:
            world.do(op)
            python.append(None)
        except Exception as error:      # noqa: BLE001 - torch's error is the expected outcome
            python.append(f"{type(error).__name__}: {error}")
    interp.eval(COMMON_TCL)
    before = interp.handle_count
    interp.eval("""
        set ::model [new_model]
        set ::opt [py scope { py call -kwlist {lr 0.1} -kwtypes {lr float} torch.optim.SGD [$::model parameters] }]
        set ::scaler [torch::grad_scaler_new -init_scale 1024 -device cpu]
        set gen [new_generator]
        lassign [batch $gen] ::x ::y
        py release $gen
    """)
    tcl = []
    for op in ops:
        code = interp.eval(f"catch {{{ORDER_TCL[op]}}} message")
        tcl.append(None if code == "0" else interp.eval("set message"))
    assert tcl == python
    # torch refuses a step of each wrong order, but for a step again after
    # the update: it unscales the old gradients a second time, silently
    assert any(python) == (name != "step again after update"), python
    assert interp.eval("torch::grad_scaler_state_dict $::scaler") == interp.call(
        "list", *[str(v) for kv in world.scaler.state_dict().items() for v in kv])
    params = interp.eval("py scope { [py call torch.nn.utils.parameters_to_vector "
                         "[$::model parameters]] tolist }")
    assert [float(v) for v in params.split()] == torch.nn.utils.parameters_to_vector(
        model.parameters()).tolist()
    interp.eval("foreach v {::model ::opt ::scaler ::x ::y ::loss ::kept} {"
                " if {[info exists $v]} { py release [set $v]; unset $v } }")
    assert interp.handle_count == before, interp.eval("lmap h [info commands ::py::obj*] {list $h [py call repr $h]}")


# --- custom autograd functions under autocast (torch.amp.custom_fwd/custom_bwd) ---

CUSTOM_FUNCTIONS = '''
import torch

amp_recipe_seen = []            # (where, autocast on, its dtype, input dtypes)


def amp_recipe_note(where, *tensors):
    amp_recipe_seen.append((where, torch.is_autocast_enabled("cpu"),
                            torch.get_autocast_dtype("cpu"), [t.dtype for t in tensors]))


class AmpRecipeMatmul(torch.autograd.Function):
    """Runs in the caller's autocast dtype; backward in the same state."""
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, a, b):
        amp_recipe_note("forward", a, b)
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        amp_recipe_note("backward", grad, a, b)
        return grad.mm(b.t()), a.t().mm(grad)


class AmpRecipeFloat32Matmul(torch.autograd.Function):
    """Needs float32: its inputs cast to it, autocast off inside."""
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
    def forward(ctx, a, b):
        amp_recipe_note("forward32", a, b)
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        amp_recipe_note("backward32", grad, a, b)
        return grad.mm(b.t()), a.t().mm(grad)
'''


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_custom_autograd_functions(interp, dtype):
    space = {}
    exec(CUSTOM_FUNCTIONS, space)
    torch.manual_seed(3)
    a = torch.randn(4, 8, requires_grad=True)
    b = torch.randn(8, 4, requires_grad=True)
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        mixed = space["AmpRecipeMatmul"].apply(a.mm(b.mm(b.t())), b)
        full = space["AmpRecipeFloat32Matmul"].apply(mixed, b.t())
    (mixed.float().sum() + full.sum()).backward()
    python = (mixed.dtype, full.dtype, a.grad.clone(), b.grad.clone(), space["amp_recipe_seen"])

    interp.eval(f"py exec {{{CUSTOM_FUNCTIONS}}}")
    got = {}
    interp.create_command("::grab", lambda *values: got.setdefault("values", values) and "")
    interp.eval(f"""
        py scope {{
            py scope {{ py call -types int torch.manual_seed 3; list }}
            set a [py call -types int -kwlist {{requires_grad 1}} -kwtypes {{requires_grad bool}} torch.randn 4 8]
            set b [py call -types int -kwlist {{requires_grad 1}} -kwtypes {{requires_grad bool}} torch.randn 8 4]
            torch::autocast -device_type cpu -dtype {dtype} {{
                set mixed [py call AmpRecipeMatmul.apply [$a mm [$b mm [$b t]]] $b]
                set full [py call AmpRecipeFloat32Matmul.apply $mixed [$b t]]
            }}
            [py call operator.add [[$mixed float] sum] [$full sum]] backward
            grab [$mixed dtype] [$full dtype] [$a grad] [$b grad]
        }}
    """)
    import __main__
    try:
        assert got["values"][:2] == python[:2]
        assert torch.equal(got["values"][2], python[2]) and torch.equal(got["values"][3], python[3])
        assert __main__.amp_recipe_seen == python[4]
        # autocast was on in backward too, in the forward's dtype (custom_bwd)
        assert ("backward", True, getattr(torch, dtype)) in [entry[:3] for entry in python[4]]
        assert ("forward32", False) in [entry[:2] for entry in python[4]]
    finally:
        del __main__.amp_recipe_seen[:]
