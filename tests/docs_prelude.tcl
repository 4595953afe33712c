# Stand-ins for what the docs' examples assume: a model, data, a training
# epoch.  They are real: train_epoch runs a forward and backward pass of a
# small network under whatever autocast state the example has set.
package require tclamp
py exec {
import torch
torch.manual_seed(0)
doc_net = torch.nn.Linear(8, 1)
doc_opt = torch.optim.SGD(doc_net.parameters(), lr=0.05)
doc_x, doc_y = torch.randn(64, 8), torch.randn(64, 1)

def doc_train_epoch():
    doc_opt.zero_grad()
    loss = torch.nn.functional.mse_loss(doc_net(doc_x).float(), doc_y)
    loss.backward()
    doc_opt.step()
    return round(loss.item(), 4)

def doc_forward(data):
    return str(doc_net(doc_x).dtype)

def doc_reset():
    for device in ("cuda", "cpu"):
        torch.set_autocast_enabled(device, False)
    torch.set_autocast_dtype("cuda", torch.float16)
    torch.set_autocast_dtype("cpu", torch.bfloat16)
    torch.set_float32_matmul_precision("highest")
}
proc train_epoch {model data} { py call doc_train_epoch }
proc tiny_model {data} { py call doc_forward $data }
proc calculate_variance {values} {
    set mean [expr {[tcl::mathop::+ {*}$values] / double([llength $values])}]
    set sum 0.0
    foreach v $values { set sum [expr {$sum + ($v - $mean) ** 2}] }
    expr {$sum / [llength $values]}
}
set my_model tiny_model
set model tiny_model
set training_data training-data
set data training-data
set test_data test-data

proc tclamp_expect_error {script expected} {
    if {![catch {uplevel #0 $script} message]} {
        error "expected the error \"$expected\" from: $script"
    }
    if {$message ne $expected} {
        error "from: $script\nexpected the error: $expected\ngot: $message"
    }
}
proc tclamp_expect_result {script expected} {
    set result [uplevel #0 $script]
    if {$result ne $expected} {
        error "from: $script\nexpected: $expected\ngot: $result"
    }
}
proc tclamp_doc_block {n script} {
    py call doc_reset
    if {[catch {uplevel #0 $script} message options]} {
        puts "@@block $n failed: [dict get $options -errorinfo]"
    } else {
        puts "@@block $n ok"
    }
}
