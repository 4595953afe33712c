# tclamp from a checkout: TCLLIBPATH=<checkout>/tcl, or lappend auto_path.
# The package lives in src/tclamp, beside its bridge.  Python starts from
# the environment of the last `make setup` (recorded in python-path, which
# `make VENV=...` sets too), else from the checkout's .venv.
apply {{checkout} {
    set dir [file join $checkout src tclamp]
    set f [open [file join $dir VERSION]]
    set version [string trim [read $f]]
    close $f
    package ifneeded tclamp $version [list apply {{dir version checkout} {
        set recorded [file join $checkout tcl python-path]
        if {[file readable $recorded]} {
            set f [open $recorded]
            set python [string trim [read $f]]
            close $f
        } elseif {[file executable [file join $checkout .venv bin python]]} {
            set python [file join $checkout .venv bin python]
        } else {
            set python ""
        }
        source [file join $dir load.tcl]
    }} $dir $version $checkout]
}} [file dirname [file normalize $dir]]
