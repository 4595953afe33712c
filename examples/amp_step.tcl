# The demo's model and its training step, for examples/train_amp.tcl and
# bench/trace_overhead.tcl: `source` this after `package require tclamp`.
# Sets ::scaler, ::optimizer and ::batches, and defines train_step.

py exec [list import sys]
py call sys.path.append [file dirname [file normalize [info script]]]
py import tiny_model
set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 50 -device cpu]
set optimizer [py eval tiny_model.optimizer]
set batches [py call tiny_model.batch_count]

# One training step in the current autocast dtype; returns the batch's loss.
proc train_step {batch} {
    global scaler optimizer
    # The step's tensors (the loss, the scaled loss) go when the scope ends.
    py scope {
        set loss [torch::autocast -device_type cpu { py call tiny_model.forward_loss $batch }]
        if {[torch::autocast_get_dtype cpu] eq "float16"} {
            # float16 gradients can underflow: scale the loss, step through the scaler
            [torch::grad_scaler_scale $scaler $loss] backward
            torch::grad_scaler_step $scaler $optimizer
            torch::grad_scaler_update $scaler
        } else {
            $loss backward
            $optimizer step
        }
        $loss item
    }
}
