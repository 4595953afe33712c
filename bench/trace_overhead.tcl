# What torch::autocast_trace costs: the training step of make demo (examples/amp_step.tcl)
# (forward under cpu autocast, backward, optimizer step; bfloat16, and float16
# with the grad scaler), traced and untraced, in turns in this one process.
#   TCLLIBPATH=$PWD/tcl tclsh bench/trace_overhead.tcl ?ROUNDS? ?STEPS?
# Prints, per dtype, the median untraced and traced step (ms) and the median
# of the rounds' ratios.  Outside a trace nothing is installed, so the
# untraced step is also what the package costs with tracing unused.
package require tclamp
lassign [concat $argv 9 20] rounds steps

# The demo's model and step (examples/amp_step.tcl, as make demo runs them).
source [file join [file dirname [file dirname [file normalize [info script]]]] examples amp_step.tcl]
proc untraced {steps} {
    for {set i 0} {$i < $steps} {incr i} { train_step [expr {$i % $::batches}] }
}
# One trace per step, as a user tracing a step at the prompt would.
proc traced {steps} {
    for {set i 0} {$i < $steps} {incr i} {
        torch::autocast_trace { train_step [expr {$i % $::batches}] }
    }
}
proc median {values} {
    set sorted [lsort -real $values]
    set n [llength $sorted]
    expr {$n % 2 ? [lindex $sorted [expr {$n / 2}]]
                 : ([lindex $sorted [expr {$n / 2 - 1}]] + [lindex $sorted [expr {$n / 2}]]) / 2.0}
}
proc ms_per_step {script steps} {
    expr {[lindex [time [list $script $steps] 1] 0] / 1000.0 / $steps}
}

puts [format "%-9s %12s %12s %7s" dtype untraced_ms traced_ms ratio]
foreach dtype {bfloat16 float16} {
    torch::autocast_set_dtype $dtype cpu
    untraced $steps; traced $steps              ;# warm up both paths
    set plain {}; set with {}; set ratios {}
    for {set round 0} {$round < $rounds} {incr round} {
        lappend plain [set a [ms_per_step untraced $steps]]
        lappend with [set b [ms_per_step traced $steps]]
        lappend ratios [expr {$b / $a}]
    }
    puts [format "%-9s %12.3f %12.3f %6.2fx" $dtype [median $plain] [median $with] [median $ratios]]
}
torch::grad_scaler_free $scaler
py release $optimizer
