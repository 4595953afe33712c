# tclamp's benchmarks, run inside one tclsh by bench/run.py:
#   tclsh bench.tcl ROUNDS CALLS ?ATEN_SO? ?TCLIBTORCH_SO?
# Every ratio compares two things measured side by side in this process,
# round after round; run.py takes the medians.  Prints "name value" lines.
# ATEN_SO (bench/aten_direct.cpp, built by bench/native.py) and
# TCLIBTORCH_SO (TCLIBTORCH's autocast commands, built by the user) are the
# native baselines; an empty or absent one is not measured.
package require tclamp
lassign $argv rounds calls aten_so tclibtorch_so
# Loaded after tclamp has imported torch: they link the same libtorch_cpu.so.
# One that does not load is reported ("error:NAME message") and left out.
foreach {var prefix contender} {aten_so Atendirect aten tclibtorch_so Tclibtorchautocast tlt} {
    if {[set $var] ne "" && [catch {load [set $var] $prefix} message]} {
        puts "error:$contender [string map {\n " "} $message]"
        set $var ""
    }
}

py exec {
import time, timeit, torch
def rss_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
# The baselines: the same torch calls made directly from Python, timed by
# timeit, written the way a script writes them (torch.f(...)) and with the
# function and arguments hoisted into local variables (the fastest form).
DIRECT = {
    "set_dtype": ("torch.set_autocast_dtype('cpu', torch.bfloat16)", "f('cpu', bf16)"),
    "enable": ("torch.set_autocast_enabled('cpu', True)", "enable('cpu', True)"),
    "disable": ("torch.set_autocast_enabled('cpu', False)", "enable('cpu', False)"),
    "is_enabled": ("torch.is_autocast_enabled('cpu')", "is_enabled('cpu')"),
    "get_dtype": ("torch.get_autocast_dtype('cpu')", "get_dtype('cpu')"),
    "floor": ("bool()", "noop()"),
}
SETUP = ("f = torch.set_autocast_dtype; bf16 = torch.bfloat16; noop = bool;"
         "enable = torch.set_autocast_enabled; is_enabled = torch.is_autocast_enabled;"
         "get_dtype = torch.get_autocast_dtype")
def direct(name, form, n):
    """ns per call of the baseline `name`, as written (0) or hoisted (1)."""
    timer = timeit.Timer(DIRECT[name][int(form)], SETUP, globals={"torch": torch})
    return timer.timeit(int(n)) / int(n) * 1e9

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128))
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
x, y = torch.randn(64, 128), torch.randn(64, 128)
def step():
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(net(x).float(), y)
    loss.backward()
    opt.step()
def python_training(n):
    """ms per step of the same loop in pure Python under torch.autocast."""
    start = time.perf_counter_ns()
    for _ in range(int(n)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            step()
    return (time.perf_counter_ns() - start) / int(n) / 1e6
}

# The bridge's own cost on its Python path: a remembered plan whose one
# step is bool().
py exec {
import tclamp, tclamp.aten
tclamp.tcl.interp.create_command("::bridge_floor", lambda *a: (((bool, ()),), "", True), planned=True)
}

# ns per iteration of `body`, run in a compiled proc loop
proc tcl_loop {body n} {
    proc ::bench_body {n} "
        set start \[clock microseconds\]
        for {set i 0} {\$i < \$n} {incr i} {$body}
        expr {(\[clock microseconds\] - \$start) * 1000.0 / \$n}
    "
    bench_body $n
}
proc noop {args} {}

set commands {
    set_dtype       set_dtype   {torch::autocast_set_dtype bfloat16 cpu}
    set_dtype/named set_dtype   {torch::autocast_set_dtype -dtype bfloat16 -device cpu}
    enable          enable      {torch::autocast_enable cpu}
    enable/named    enable      {torch::autocast_enable -device cpu}
    disable         disable     {torch::autocast_disable cpu}
    disable/named   disable     {torch::autocast_disable -device cpu}
    is_enabled      is_enabled  {torch::autocast_is_enabled cpu}
    is_enabled/named is_enabled {torch::autocast_is_enabled -device cpu}
    get_dtype       get_dtype   {torch::autocast_get_dtype cpu}
    get_dtype/named get_dtype   {torch::autocast_get_dtype -device cpu}
    floor           floor       {bridge_floor cpu}
}
# The native twin of a torch:: command (the same words), or "" if none:
# aten:: (ATen called from C++) and TCLIBTORCH's (which has no get_dtype).
proc twin {contender script} {
    set words [lrange $script 1 end]
    set command [lindex $script 0]
    switch -- $contender {
        aten {
            if {$::aten_so eq ""} {return ""}
            if {$command eq "bridge_floor"} {return [list aten::nothing {*}$words]}
            return [list [string map {torch::autocast_ aten::} $command] {*}$words]
        }
        tlt {
            if {$::tclibtorch_so eq "" || $command in {bridge_floor torch::autocast_get_dtype}} {
                return ""
            }
            return [list [string map {torch:: tclibtorch::} $command] {*}$words]
        }
    }
}
# A twin must answer what the torch:: command answers, or it is no twin.
foreach {name baseline script} $commands {
    foreach contender {aten tlt} {
        set other [twin $contender $script]
        if {$other eq "" || $name eq "floor"} continue
        set ours [{*}$script]
        set theirs [{*}$other]
        if {$ours ne $theirs} {
            error "`$other` answers \"$theirs\", `$script` \"$ours\""
        }
    }
}

# In each round the contenders of a command take turns, SLICES times, so
# that a slower stretch of a shared machine falls on all of them; each
# slice starts with the next contender, so none always runs first.
set slices 5
for {set round 0} {$round < $rounds} {incr round} {
    foreach {name baseline script} $commands {
        set n [expr {$calls / $slices}]
        # pypath: the same command with the ATen path off (torch's Python
        # functions called from the remembered plan): what that path buys.
        set contenders {cmd noop py pylocal}
        if {$name ne "floor"} {lappend contenders pypath}
        foreach contender {aten tlt} {
            if {[twin $contender $script] ne ""} {lappend contenders $contender}
        }
        foreach contender $contenders {set total($contender) 0}
        for {set slice 0} {$slice < $slices} {incr slice} {
            set first [expr {($round + $slice) % [llength $contenders]}]
            foreach contender [concat [lrange $contenders $first end] \
                                      [lrange $contenders 0 [expr {$first - 1}]]] {
                set ns [switch -- $contender {
                    cmd {tcl_loop $script $n}
                    noop {tcl_loop "noop [lrange $script 1 end]" $n}
                    py {py call direct $baseline 0 $n}
                    pylocal {py call direct $baseline 1 $n}
                    pypath {
                        py exec {tclamp.aten.use(False)}
                        set ns [tcl_loop $script $n]
                        py exec {tclamp.aten.use(True)}
                        set ns
                    }
                    default {tcl_loop [twin $contender $script] $n}
                }]
                set total($contender) [expr {$total($contender) + $ns}]
            }
        }
        foreach contender $contenders {
            puts "$contender:$name [expr {$total($contender) / $slices}]"
        }
        array unset total
    }
    flush stdout
}

# A training step driven from Tcl against the same loop in pure Python.
set steps 200
py call python_training 20
for {set round 0} {$round < $rounds} {incr round} {
    set start [clock microseconds]
    for {set i 0} {$i < $steps} {incr i} {
        torch::autocast_enable cpu bfloat16
        py call step
        torch::autocast_disable cpu
    }
    puts "train:tcl [expr {([clock microseconds] - $start) / 1000.0 / $steps}]"
    puts "train:python [py call python_training $steps]"
    flush stdout
}

# Resident memory before and after a million calls (after a warm-up).
set mix {
    {torch::autocast_set_dtype bfloat16 cpu} {torch::autocast_enable -device cpu}
    {torch::autocast_is_enabled cpu} {torch::autocast_get_dtype cpu}
    {torch::autocast_disable cpu}
}
proc churn {mix n} {
    for {set i 0} {$i < $n} {incr i 5} {
        foreach command $mix { {*}$command }
        catch {torch::autocast_set_dtype float64}
    }
}
churn $mix 100000
puts "rss:before [py call rss_kib]"
churn $mix 1000000
puts "rss:after [py call rss_kib]"
