# What an error costs that is raised anew at each of N levels of Tcl procs
# and Python calls: each level is a proc that py-calls a function, which
# evals the proc one level down and raises a new exception from the error
# (cause), while handling it (context), or `from None` (none); beside plain
# Tcl procs that catch the error and raise their own.
#   TCLLIBPATH=$PWD/tcl tclsh bench/chained_errors.tcl ?ROUNDS? ?DEPTHS?
# Prints, per way and depth, the best round (ms) and the length of the
# errorInfo the outermost catch gets.
package require tclamp
lassign $argv rounds depths
if {$rounds eq ""} { set rounds 5 }
if {$depths eq ""} { set depths {50 100 200 300} }

py exec {
import tclamp
def chain_level(k, how):
    k = int(k)
    if k == 0:
        raise ValueError("bottom")
    try:
        tclamp.tcl.eval(f"chain_level {k - 1} {how}")
    except ValueError as error:
        if how == "cause":
            raise ValueError(f"level {k}") from error
        if how == "context":
            raise ValueError(f"level {k}")
        raise ValueError(f"level {k}") from None
}
proc chain_level {k how} { py call chain_level $k $how }
proc tcl_level {k} {
    if {$k == 0} { error bottom }
    if {[catch {tcl_level [expr {$k - 1}]}]} { error "level $k" }
}
proc best_ms {script} {
    set best Inf
    for {set i 0} {$i < $::rounds} {incr i} {
        set t [clock microseconds]
        catch $script m o
        set best [expr {min($best, [clock microseconds] - $t)}]
    }
    list [expr {$best / 1000.0}] [string length [dict get $o -errorinfo]]
}
foreach how {cause context none} {
    foreach depth $depths {
        puts [format "%-8s depth %3d: %8.2f ms, errorInfo %6d chars" $how $depth \
                  {*}[best_ms [list chain_level $depth $how]]]
    }
}
foreach depth $depths {
    puts [format "plain Tcl depth %3d: %8.2f ms, errorInfo %6d chars" $depth \
              {*}[best_ms [list tcl_level $depth]]]
}
