# Trains a small network from Tcl with automatic mixed precision on the CPU:
# each forward pass runs in a scoped autocast block, the precision schedule
# switches the dtype between epochs, and float16 epochs use a GradScaler.
#
#   TCLLIBPATH=$PWD/tcl tclsh examples/train_amp.tcl     (or: make demo)
package require tclamp

source [file join [file dirname [file normalize [info script]]] amp_step.tcl]

# epoch -> the dtype autocast computes in (the seed page's dynamic control)
set schedule {0 bfloat16 1 bfloat16 2 bfloat16 3 float16 4 float16 5 float16}

puts [format "%-6s %-9s %-11s %s" epoch dtype train_loss full_loss]
puts [format "%-6s %-9s %-11s %.4f" - float32 - [py call tiny_model.full_loss]]
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
