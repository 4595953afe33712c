# tclamp from a checkout: TCLLIBPATH=<checkout>/tcl, or lappend auto_path.
# The package itself lives in src/tclamp, beside its bridge.
set dir [file normalize [file join $dir .. src tclamp]]
source [file join $dir pkgIndex.tcl]
