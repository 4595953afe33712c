# Prints the tclConfig.sh of the Tcl that runs this script (the one its -dev
# package installs, which the build reads), or fails saying where it looked.
# A tclConfig.sh of another Tcl version (an unversioned one that belongs to
# the system's default Tcl) is passed over.
#     $TCLSH tools/tcl-config.tcl
set version [info tclversion]

proc configures {config version} {
    set f [open $config]
    set text [read $f]
    close $f
    regexp -line "^TCL_VERSION='[string map {. \\.} $version]'\$" $text
}

set dirs {}
if {![catch {tcl::pkgconfig get libdir,runtime} libdir]} {
    lappend dirs [file join $libdir tcl$version] $libdir
}
# A tclsh built from source, or a distribution without tcl::pkgconfig's
# libdir: beside its lib directory, or beside its script library.
set prefix [file dirname [file dirname [info nameofexecutable]]]
lappend dirs [file join $prefix lib] [file join $prefix lib tcl$version] \
    [file dirname [info library]] [file join /usr lib tcl$version]
foreach dir $dirs {
    set config [file join $dir tclConfig.sh]
    if {[file readable $config] && [configures $config $version]} {
        puts $config
        exit 0
    }
}
puts stderr "no tclConfig.sh for Tcl [info patchlevel] (looked in [join [lsort -unique $dirs] {, }]):\
    install its development package (Debian: tcl$version-dev)"
exit 1
