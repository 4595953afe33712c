# tclamp, beside its bridge: the directory `tclamp --tcl-dir` prints for
# auto_path or TCLLIBPATH.  Scanning only declares the package, with the
# version from VERSION; load.tcl runs on `package require tclamp`.
apply {{dir} {
    set f [open [file join $dir VERSION]]
    set version [string trim [read $f]]
    close $f
    package ifneeded tclamp $version [list apply {{dir version} {
        set python ""   ;# the Python this package is installed in, if found
        source [file join $dir load.tcl]
    }} $dir $version]
}} $dir
