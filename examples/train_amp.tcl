# Trains a small network from Tcl with automatic mixed precision on the CPU:
# each forward pass runs in a scoped autocast block, the precision schedule
# switches the dtype between epochs, and float16 epochs use a GradScaler.
#
#   TCLLIBPATH=$PWD/tcl tclsh examples/train_amp.tcl     (or: make demo)
package require tclamp

py exec [list import sys]
py call sys.path.append [file dirname [file normalize [info script]]]
py import tiny_model

# epoch -> the dtype autocast computes in (the seed page's dynamic control)
set schedule {0 bfloat16 1 bfloat16 2 bfloat16 3 float16 4 float16 5 float16}
set scaler [torch::grad_scaler_new -init_scale 1024 -growth_interval 50 -device cpu]
set optimizer [py eval tiny_model.optimizer]
set batches [py call tiny_model.batch_count]

puts [format "%-6s %-9s %-11s %s" epoch dtype train_loss full_loss]
puts [format "%-6s %-9s %-11s %.4f" - float32 - [py call tiny_model.full_loss]]
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

dict for {epoch dtype} $schedule {
    if {[torch::autocast_get_dtype cpu] ne $dtype} {
        torch::autocast_set_dtype $dtype cpu
        puts "-- schedule: autocast now computes in $dtype"
    }
    set total 0.0
    for {set batch 0} {$batch < $batches} {incr batch} {
        set total [expr {$total + [train_step $batch]}]
    }
    puts [format "%-6d %-9s %-11.4f %.4f" $epoch [py call tiny_model.computed_dtype] \
              [expr {$total / $batches}] [py call tiny_model.full_loss]]
}
puts "grad scaler scale: [torch::grad_scaler_get_scale $scaler]"
# What one more step did, operator by operator: the dtypes autocast chose,
# its casts, the backward pass, the scaler's checks and the optimizer.
set traced_step [torch::autocast_trace -format table { train_step 0 }]
torch::grad_scaler_free $scaler
py release $optimizer
puts "handles left: [dict get [tclamp::info] handle_count]"
puts "-- one training step in [torch::autocast_get_dtype cpu], traced:"
puts $traced_step
