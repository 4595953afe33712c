# tclamp: loads the bridge beside this file into the interpreter that asked.
# A package index sources this on `package require tclamp`, with `dir`
# (this directory), `python` (the Python its writer chose, or empty) and
# `version` (the version it declared) set.
#
# The bridge starts Python from $env(TCLAMP_PYTHON), else ::tclamp::python.
# A started Python cannot be swapped, and a wrong one can take the process
# down, so the first start in a process checks that Python first.

set bridge [glob -nocomplain -types f -directory $dir _bridge*[info sharedlibextension]]
if {[llength $bridge] != 1} {
    throw {TCLAMP NOT_BUILT} \
        "tclamp: expected one built bridge in $dir, found [llength $bridge] (run: make setup)"
}
set bridge [lindex $bridge 0]
set f [open [file join $dir VERSION]]
set installed [string trim [read $f]]
close $f
if {$installed ne $version} {
    throw {TCLAMP VERSION} "tclamp: the Tcl index declares $version but the package\
        in $dir is $installed (run: tclamp install-tcl)"
}

if {![info exists ::tclamp::python]} {
    set lib [file dirname [file dirname [file normalize $dir]]]
    if {$python eq "" && [string match python* [file tail $lib]]} {
        # Installed in <prefix>/lib/pythonX.Y/site-packages: <prefix>/bin/pythonX.Y
        set guess [file join [file dirname [file dirname $lib]] bin [file tail $lib]]
        if {[file executable $guess]} {
            set python $guess
        }
    }
    if {$python ne ""} {
        namespace eval ::tclamp [list variable python $python]
    }
}
if {[info exists ::env(TCLAMP_PYTHON)] && $::env(TCLAMP_PYTHON) ne ""} {
    set python $::env(TCLAMP_PYTHON)
} elseif {[info exists ::tclamp::python]} {
    set python $::tclamp::python
} else {
    set python ""   ;# the bridge says how to name one, if it must start Python
}

# Once any interpreter in this process loaded the bridge, Python runs.
if {$python ne "" && [lsearch -exact -index 1 [info loaded] Tclamp] < 0} {
    if {[file isdirectory $python]} {
        throw {TCLAMP PYTHON_START} \
            "tclamp: cannot start Python: \"$python\" is a directory, not a python executable"
    }
    if {![file executable $python]} {
        throw {TCLAMP PYTHON_START} \
            "tclamp: cannot start Python: \"$python\" is not an executable file"
    }
    # About 10 ms: the Python's version, and whether it finds torch (without
    # importing it) on the path the bridge will give it.
    set probe {import sys, importlib.util
if sys.path and sys.path[0] == "": del sys.path[0]
print("tclamp-probe", sys.implementation.cache_tag, sys.version.split()[0],
      importlib.util.find_spec("torch") is not None)}
    if {[catch {exec -- $python -c $probe << {} 2>@1} said]
            || ![regexp -line {^tclamp-probe (\S+) (\S+) (True|False)$} $said -> tag found torch]} {
        set said [string range [lindex [split [string trim $said] \n] 0] 0 199]
        if {$said eq ""} {
            set said "it printed nothing"
        }
        throw {TCLAMP PYTHON_START} \
            "tclamp: cannot start Python: \"$python\" is not a Python interpreter ($said)"
    }
    # The bridge's file name carries the ABI it was built for: .cpython-311-...
    if {[regexp {\.(cpython-(\d)(\d+))[^.]*\.} [file tail $bridge] -> built major minor]
            && $tag ne $built} {
        throw {TCLAMP PYTHON_START} "tclamp: the Python at $python is $found, but this\
            tclamp was built for Python $major.$minor: set TCLAMP_PYTHON to a Python\
            $major.$minor that has torch, or install tclamp into the Python you want"
    }
    if {$torch ne "True"} {
        throw {TCLAMP PYTHON_START} "the Python at $python has no torch (install it there)"
    }
}

load $bridge Tclamp
# `load` runs Tclamp_Init once per interpreter; after `package forget`
# the package is provided here again.
package provide tclamp $version
