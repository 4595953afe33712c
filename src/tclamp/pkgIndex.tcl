# tclamp: the bridge beside this file is both the Tcl extension and the
# Python module.  Python starts from $env(TCLAMP_PYTHON) if set, else from
# ::tclamp::python, which defaults to the environment tclamp is installed in.
package ifneeded tclamp 0.1.0 [list apply {{dir} {
    if {![info exists ::tclamp::python]} {
        foreach candidate [list [file join $dir .. .. .venv bin python] \
                               [file join $dir .. .. .. .. bin python]] {
            if {[file executable $candidate]} {
                namespace eval ::tclamp [list variable python [file normalize $candidate]]
                break
            }
        }
    }
    set bridge [glob -nocomplain -directory $dir _bridge*[info sharedlibextension]]
    if {[llength $bridge] != 1} {
        return -code error -errorcode {TCLAMP NOT_BUILT} \
            "tclamp: expected one built bridge in $dir, found [llength $bridge] (run: make setup)"
    }
    load [lindex $bridge 0] Tclamp
}} $dir]
