# The README's float16 training step, driven from Tcl, beside the same step
# written in Python, the floor (the step's pieces as six Python functions,
# each called from Tcl), the floor with two Tcl procs made and deleted in
# each step, and the floor with the step's two tensors handed to Tcl as
# handles that `py scope` releases, in this one process, on the same model,
# optimizer and scaler; bench/train_step.py runs it and reads what it
# prints.
#     tclsh train_step.tcl device rounds steps ?profile|stamps|counts which?
# Each round times `steps` steps of each (wall time, the device synchronized
# at both ends), the five taking turns and starting in turn; then `steps`
# instrumented steps of each stamp the time between the step's pieces, in
# chunks of 25 ordered Tcl, Tcl with the scaler's methods, Python, floor,
# floor timed inside, the same again, floor, Python, methods, Tcl, again
# and again, so that a drift or a burst in the machine's speed weighs on
# all of them alike.  With "stamps", only those; with "profile",
# cProfile's view of `steps` Tcl-driven steps instead; with "counts"
# (under callgrind, bench/step_counts.py), `steps` steps of one of the five
# (which: tcl, python, calls, procs or handles), callgrind counting only
# those.
package require tclamp
lassign $argv device rounds steps mode

py exec [string map [list DEVICE $device] {
import time
import torch

torch.manual_seed(0)
device = "DEVICE"
if device == "cpu":
    # Small enough that the step's own cost shows, as on a launch-bound GPU.
    torch.set_num_threads(1)
    width, depth, batch_size = 32, 2, 16
else:
    width, depth, batch_size = 1024, 9, 512
layers = []
for _ in range(depth - 1):
    layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(width, width)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device, init_scale=1024.0)
batch = torch.randn(batch_size, width, device=device)
now = time.perf_counter_ns
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)


def python_step():
    optimizer.zero_grad()
    with torch.autocast(device, dtype=torch.float16):
        loss = model(batch).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def python_steps(n):
    sync()
    start = now()
    for _ in range(int(n)):
        python_step()
    sync()
    return now() - start


# The floor of any Tcl-driven step: its pieces as plain Python functions
# that keep the step's tensors themselves, each called from Tcl once.
def piece_zero_grad():
    optimizer.zero_grad()


def piece_forward():
    global loss
    with torch.autocast(device, dtype=torch.float16):
        loss = model(batch).float().pow(2).mean()


def piece_scale():
    global scaled
    scaled = scaler.scale(loss)


def piece_backward():
    scaled.backward()


def piece_step():
    scaler.step(optimizer)


def piece_update():
    global loss, scaled
    scaler.update()
    del loss, scaled        # the step's tensors go at its end, as in python_step


# Two of them once more, handing the step's tensors to Tcl as well.
def piece_forward_out():
    piece_forward()
    return loss


def piece_scale_out():
    piece_scale()
    return scaled


# The floor's pieces once more, each timing its own Python code from inside
# (and one that runs nothing, whose time is the timing's own): what torch's
# work costs at each place in a step that Tcl drives, without the call from
# Tcl and back.
inner = []


def timed(piece):
    def run():
        start = now()
        piece()
        inner.append(now() - start)
    return run


timed_zero_grad, timed_forward, timed_scale, timed_backward, timed_step, timed_update, \
    timed_nothing = map(timed, (piece_zero_grad, piece_forward, piece_scale, piece_backward,
                                piece_step, piece_update, lambda: None))


def inner_rows():
    """The times taken since the last call, a row of seven per step."""
    global inner
    rows, inner = [inner[i:i + 7] for i in range(0, len(inner), 7)], []
    return rows


def python_stamped(n):
    """The step with the stamps of tcl_stamped (Python has no scope: its
    stamps take the step's tensors going)."""
    rows = []
    for _ in range(int(n)):
        s = [now()]
        s.append(now())
        optimizer.zero_grad()
        s.append(now())
        with torch.autocast(device, dtype=torch.float16):
            s.append(now())
            loss = model(batch).float().pow(2).mean()
            s.append(now())
        s.append(now())
        scaled = scaler.scale(loss)
        s.append(now())
        scaled.backward()
        s.append(now())
        scaler.step(optimizer)
        s.append(now())
        scaler.update()
        s.append(now())
        del scaled, loss
        s.append(now())
        s.append(now())
        rows.append(s)
    return rows
}]

set optimizer [py eval optimizer]
set scaler [py eval scaler]

# The step as README teaches it (with the zero_grad a real loop has).
proc tcl_step {} {
    global scaler optimizer device
    py scope {
        $optimizer zero_grad
        set loss [torch::autocast -device_type $device -dtype float16 {
            py eval {model(batch).float().pow(2).mean()}
        }]
        [torch::grad_scaler_scale $scaler $loss] backward
        torch::grad_scaler_step $scaler $optimizer
        torch::grad_scaler_update $scaler
    }
}

# Six calls into Python and no torch:: command, handle or scope.
proc calls_step {} {
    ::py::call piece_zero_grad
    ::py::call piece_forward
    ::py::call piece_scale
    ::py::call piece_backward
    ::py::call piece_step
    ::py::call piece_update
}

# The six calls again, with what a handle costs Tcl alone: a command made
# where the step's two tensors would become handles, and deleted at the
# step's end (a proc whose body is not empty: deleting one that is would
# make Tcl compile every script anew).
namespace eval ::bench {}
set procs_made 0
proc procs_step {} {
    ::py::call piece_zero_grad
    ::py::call piece_forward
    proc ::bench::loss[incr ::procs_made] {} {return 1}
    ::py::call piece_scale
    proc ::bench::scaled$::procs_made {} {return 1}
    ::py::call piece_backward
    ::py::call piece_step
    ::py::call piece_update
    rename ::bench::loss$::procs_made {}
    rename ::bench::scaled$::procs_made {}
}

# The six calls again, the step's two tensors now also held by handles,
# which the scope releases at the step's end as the README step's: what
# handles and a scope add to the floor, with no torch:: command.
proc handles_step {} {
    py scope {
        ::py::call piece_zero_grad
        set loss [::py::call piece_forward_out]
        set scaled [::py::call piece_scale_out]
        ::py::call piece_backward
        ::py::call piece_step
        ::py::call piece_update
    }
}

proc tcl_steps {n {step tcl_step}} {
    py call sync
    set start [::py::call now]
    for {set i 0} {$i < $n} {incr i} {
        $step
    }
    py call sync
    expr {[::py::call now] - $start}
}

# The same stamps as python_stamped: before the scope, at the body's start,
# around the autocast block and the forward pass in it, after each
# command, at the body's end, after the scope, and an empty pair.  Made
# twice: as README writes the step (tcl_stamped), and with the scaler's
# three commands replaced by the same methods called through the scaler's
# handle (methods_stamped), which is what each command adds over the
# bridge's generic call at its place in the step.
set stamped {
    global scaler optimizer device
    set rows {}
    for {set i 0} {$i < $n} {incr i} {
        set s [list [::py::call now]]
        py scope {
            lappend s [::py::call now]
            $optimizer zero_grad
            lappend s [::py::call now]
            set loss [torch::autocast -device_type $device -dtype float16 {
                lappend s [::py::call now]
                set loss [py eval {model(batch).float().pow(2).mean()}]
                lappend s [::py::call now]
                set loss
            }]
            lappend s [::py::call now]
            set scaled [SCALE]
            lappend s [::py::call now]
            $scaled backward
            lappend s [::py::call now]
            STEP
            lappend s [::py::call now]
            UPDATE
            lappend s [::py::call now]
        }
        lappend s [::py::call now]
        lappend s [::py::call now]
        lappend rows $s
    }
    return $rows
}
proc tcl_stamped {n} [string map {
    SCALE {torch::grad_scaler_scale $scaler $loss}
    STEP {torch::grad_scaler_step $scaler $optimizer}
    UPDATE {torch::grad_scaler_update $scaler}
} $stamped]
proc methods_stamped {n} [string map {
    SCALE {$scaler scale $loss}
    STEP {$scaler step $optimizer}
    UPDATE {$scaler update}
} $stamped]

# The floor's six calls, stamped where tcl_stamped stamps the same pieces,
# each stamp as there (its autocast block is inside piece_forward, and the
# step's tensors go in piece_update).
proc calls_stamped {n} {
    set rows {}
    for {set i 0} {$i < $n} {incr i} {
        set s [list [::py::call now]]
        lappend s [::py::call now]
        ::py::call piece_zero_grad
        lappend s [::py::call now]
        lappend s [::py::call now]
        ::py::call piece_forward
        lappend s [::py::call now]
        lappend s [::py::call now]
        ::py::call piece_scale
        lappend s [::py::call now]
        ::py::call piece_backward
        lappend s [::py::call now]
        ::py::call piece_step
        lappend s [::py::call now]
        ::py::call piece_update
        lappend s [::py::call now]
        lappend s [::py::call now]
        lappend s [::py::call now]
        lappend rows $s
    }
    return $rows
}

# The floor's calls of the pieces that time themselves.
proc inner_stamped {n} {
    for {set i 0} {$i < $n} {incr i} {
        ::py::call timed_zero_grad
        ::py::call timed_forward
        ::py::call timed_scale
        ::py::call timed_backward
        ::py::call timed_step
        ::py::call timed_update
        ::py::call timed_nothing
    }
    py call inner_rows
}

# Warm-up: torch's first calls, the bridge's remembered plans, the caches.
tcl_steps 50
tcl_steps 50 calls_step
tcl_steps 50 procs_step
tcl_steps 50 handles_step
py call python_steps 50
if {$mode eq "profile"} {
    py exec {import cProfile, pstats; profiler = cProfile.Profile()}
    py call profiler.enable
    tcl_steps $steps
    py call profiler.disable
    py exec {pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(30)}
    exit
}
# The five: the README step, the Python step, the six calls, the six calls
# with procs, and the six calls with handles.
set runs {
    tcl {tcl_steps $steps}
    python {py call python_steps $steps}
    calls {tcl_steps $steps calls_step}
    procs {tcl_steps $steps procs_step}
    handles {tcl_steps $steps handles_step}
}
if {$mode eq "counts"} {
    # callgrind starts with its counting off (--collect-atstart=no); each
    # call of the library's toggle turns it over.
    py exec {import ctypes, os; toggle_counting = ctypes.CDLL(os.environ["TCLAMP_COUNTS_TOGGLE"]).toggle}
    set run [dict get $runs [lindex $argv 4]]
    ::py::call toggle_counting
    eval $run
    ::py::call toggle_counting
    exit
}
if {$mode ne "stamps"} {
    # Each round runs the five in this order, each round starting one
    # further.
    for {set round 0} {$round < $rounds} {incr round} {
        set first [expr {2 * ($round % 5)}]
        set order [concat [lrange $runs $first end] [lrange $runs 0 $first-1]]
        foreach {name run} $order {
            set took($name) [eval $run]
        }
        puts "round $took(tcl) $took(python) $took(calls) $took(procs) $took(handles)"
    }
}
# The stamped steps, in chunks of 25 that take turns.
for {set done 0} {$done < $steps} {incr done 50} {
    foreach who {tcl methods python calls inner inner calls python methods tcl} {
        switch $who {
            tcl {set rows [tcl_stamped 25]}
            methods {set rows [methods_stamped 25]}
            python {set rows [py call python_stamped 25]}
            calls {set rows [calls_stamped 25]}
            inner {set rows [inner_stamped 25]}
        }
        foreach row $rows {
            puts "${who}_stamps $row"
        }
    }
}
puts "scale [py call scaler.get_scale]"
