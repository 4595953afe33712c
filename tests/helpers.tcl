# Helpers that several tcltest files share: `source` this file (it is no
# .test file, so neither pytest nor all.tcl runs it on its own).

# The rows of an autocast_trace result's list (ops, nonfinite) for one
# dtype, as op/count pairs.
proc rows {trace key {dtype *}} {
    set found {}
    foreach row [dict get $trace $key] {
        if {[string match $dtype [dict get $row dtype]]} {
            lappend found [dict get $row op] [dict get $row count]
        }
    }
    return $found
}

# The dtypes of a trace's ops, each once.
proc dtypes {trace} {
    lsort -unique [lmap row [dict get $trace ops] {dict get $row dtype}]
}
