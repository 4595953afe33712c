# Inference under a scoped autocast block: the same model in float32 and in
# bfloat16, and how far apart their outputs are.
#
#   TCLLIBPATH=$PWD/tcl tclsh examples/infer_amp.tcl
package require tclamp

py exec [list import sys]
py call sys.path.append [file dirname [file normalize [info script]]]
py import tiny_model

# The outputs and the tensors computed from them go when the scope ends.
py scope {
    set full [py call tiny_model.predict 256]
    set half [torch::autocast -device cpu -dtype bfloat16 { py call tiny_model.predict 256 }]
    puts "float32 output: [py call str [$full dtype]]"
    puts "autocast output: [py call str [$half dtype]]"
    puts [format "largest difference: %.4f" [[[[$full sub [$half float]] abs] max] item]]
}
puts "autocast still on after the block: [torch::autocast_is_enabled cpu]"
puts "handles left: [dict get [tclamp::info] handle_count]"
