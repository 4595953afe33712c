# Soak: Tcl threads hammer tclamp at once until a deadline, each checking
# that its autocast state stays its own; the main thread measures memory.
#   tclsh soak.tcl SECONDS THREADS
package require Thread
package require tclamp
lassign $argv seconds nthreads

set worker {
    package require tclamp
    py exec {
import gc, torch
class Thing:
    def __init__(self, n): self.n = int(n)
    def twice(self): return 2 * self.n
soak_matrix = torch.ones(4, 4)
}
    proc fail {args} { return -code error -errorcode {SOAK FAIL} [join $args] }
    proc soak {id deadline} {
        set dtypes {float16 bfloat16 float32}
        set mine [lindex $dtypes [expr {$id % 3}]]
        set rounds 0
        while {[clock milliseconds] < $deadline} {
            incr rounds
            torch::autocast_enable cpu $mine
            torch::autocastSetDtype -dtype $mine -device cpu
            if {[torch::autocast_get_dtype cpu] ne $mine} { fail cross-talk: dtype }
            if {[py eval {str((soak_matrix @ soak_matrix).dtype)}] ne "torch.$mine"} {
                fail cross-talk: computed dtype
            }
            foreach bad {{float64 cpu} {-device} {-frob 1} {float16 cpu extra} {}} {
                if {![catch {torch::autocast_set_dtype {*}$bad}]} { fail accepted $bad }
            }
            catch {py eval 1/0}
            catch {py call no_such_function}
            set h [py call Thing $rounds]
            if {[$h twice] != 2 * $rounds} { fail handle }
            rename $h {}
            torch::autocast -device cpu -dtype bfloat16 {
                if {[torch::autocast_get_dtype cpu] ne "bfloat16"} { fail block dtype }
            }
            if {[torch::autocast_get_dtype cpu] ne $mine} { fail block restore }
            if {$rounds % 25 == 0} {
                interp create child
                child eval [list set auto_path $::auto_path]
                child eval {package require tclamp; py eval 1+1}
                interp delete child
            }
            torch::autocast_disable cpu
            if {[torch::autocast_is_enabled cpu]} { fail disable }
        }
        return $rounds
    }
}

proc rss_kib {} {
    set status [read [set f [open /proc/self/status]]][close $f]
    regexp {VmRSS:\s+(\d+)} $status -> kib
    return $kib
}

proc run {seconds nthreads worker} {
    set threads {}
    for {set i 0} {$i < $nthreads} {incr i} {
        set t [thread::create]
        thread::send $t [list set ::auto_path $::auto_path]
        thread::send $t $worker
        lappend threads $t
    }
    set deadline [expr {[clock milliseconds] + int($seconds * 1000)}]
    foreach t $threads id [lsearch -all $threads *] {
        thread::send -async $t [list catch [list soak $id $deadline] ::result ::options] ::done($t)
    }
    # the main thread works too, on cuda state, which no worker touches
    set mine 0
    while {[clock milliseconds] < $deadline} {
        torch::autocast_set_dtype bfloat16
        if {[torch::autocast_get_dtype] ne "bfloat16"} { error "main thread cross-talk" }
        incr mine
        after 1 {set ::tick 1}
        vwait ::tick
    }
    set report {}
    foreach t $threads {
        if {![info exists ::done($t)]} { vwait ::done($t) }
        lappend report [thread::send $t {
            list $::result [expr {[dict exists $::options -errorcode]
                                  ? [dict get $::options -errorcode] : "NONE"}]
        }]
        thread::release $t
    }
    list $mine $report
}

run 1 $nthreads $worker   ;# warm-up: allocators and caches settle
py exec {import gc; gc.collect()}
set before [rss_kib]
lassign [run $seconds $nthreads $worker] mine report
py exec {gc.collect()}
set after [rss_kib]
puts "main $mine"
foreach entry $report { puts "worker $entry" }
puts "rss $before $after"
puts "handles [llength [info commands ::py::obj*]]"
