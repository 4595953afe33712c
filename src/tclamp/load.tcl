# tclamp: loads the bridge beside this file into the interpreter that asked.
# A package index (written from pkgindex.py) sources this on `package
# require tclamp`, with `dir` (this directory), `python` (the Python its
# writer chose, or empty), `version` (the version it declared) and `index`
# (the index's own directory) set.
#
# Python starts from $env(TCLAMP_PYTHON), else ::tclamp::python (a name
# without a slash is looked up on PATH); the bridge starts the one checked.
# A started Python cannot be swapped, and a wrong one can take the process
# down, so the first start in a process checks that Python first.

# The binaries built for this Tcl (8.6 and 9 speak different stubs): one
# loader, and a bridge for each Python it was built with.
set tcl_major [expr {[package vsatisfies [package provide Tcl] 9.0-] ? 9 : 8}]
set so [info sharedlibextension]
set loader [lindex [glob -nocomplain -types f -directory $dir _loader$tcl_major*$so] 0]
set bridges [glob -nocomplain -types f -directory $dir _bridge$tcl_major*$so]
if {$loader eq "" || ![llength $bridges]} {
    set built [lsort -unique [lmap f [glob -nocomplain -tails -directory $dir _bridge*$so] {
        regsub {^_bridge(\d).*} $f {\1}
    }]]
    throw {TCLAMP NOT_BUILT} "tclamp: no bridge for Tcl [info patchlevel] in $dir\
        ([expr {$built eq "" ? "none is built" : "it has Tcl [join $built {, }]"}]):\
        build it with that Tcl's headers (make setup TCLSH=[info nameofexecutable])"
}

# An empty ::tclamp::python names no Python, as an empty TCLAMP_PYTHON does:
# the index's Python is taken then.
if {![info exists ::tclamp::python] || $::tclamp::python eq ""} {
    set parent [file dirname [file normalize $dir]]
    set lib [file dirname $parent]
    if {$python eq "" && [file tail $parent] eq "src"} {
        # A checkout: the Python of its last `make setup` (make VENV=...
        # records it), else its .venv.
        set recorded [file join $lib tcl python-path]
        if {[file readable $recorded]} {
            set f [open $recorded]
            set python [string trim [read $f]]
            close $f
        } elseif {[file executable [file join $lib .venv bin python]]} {
            set python [file join $lib .venv bin python]
        }
    } elseif {$python eq "" && [string match python* [file tail $lib]]} {
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
} elseif {[info exists ::tclamp::python] && $::tclamp::python ne ""} {
    set python $::tclamp::python
} else {
    set python ""   ;# the bridge says how to name one, if it must start Python
}

load $loader Tclampload
if {$::tclamp::version ne $version} {
    throw {TCLAMP VERSION} "tclamp: the index in $index declares tclamp $version, but\
        the package in $dir is $::tclamp::version: write the index again with that\
        package's `tclamp install-tcl $index`"
}
# Unless the process has a Python's symbols in view already (a Python host,
# or an earlier load: the loader gives its version), the chosen Python is
# checked, then its libpython is loaded for the bridge to use.
set running [::tclamp::python_loaded]
if {$running ne ""} {
    set tag cpython-[string map {. {}} $running]
    if {![llength [lsearch -all -glob $bridges *.$tag-*]]} {
        throw {TCLAMP PYTHON_START} "tclamp: this process runs Python $running, and\
            tclamp in $dir has no bridge built for it"
    }
} else {
    if {$python eq ""} {
        throw {TCLAMP PYTHON_START} \
            "tclamp: no Python environment found: set TCLAMP_PYTHON to its python executable"
    }
    # A name without a slash (python3) is a command on PATH, as a shell
    # finds it (an empty entry is the current directory).
    if {[string first / $python] < 0} {
        set found ""
        # (an empty PATH is one empty entry, where split gives none). An
        # unset PATH is the system's default path, which execvp and sh
        # search: glibc's confstr(_CS_PATH), which Tcl cannot call, is
        # /bin:/usr/bin on Linux (Python's os.defpath too).
        if {[info exists ::env(PATH)]} {
            set places [expr {$::env(PATH) eq "" ? {{}} : [split $::env(PATH) :]}]
            set searched PATH
        } else {
            set places {/bin /usr/bin}
            set searched "the default path /bin:/usr/bin (PATH is unset)"
        }
        foreach place $places {
            # A leading ~ is a name, as exec takes it (Tcl 8.6's file
            # commands would read it as the home directory, which the
            # bridge then would not start).
            set candidate [file join [pwd] {*}[lmap part [list $place $python] {
                expr {[string match ~* $part] ? "./$part" : $part}
            }]]
            if {[file isfile $candidate] && [file executable $candidate]} {
                set found $candidate
                break
            }
        }
        if {$found eq ""} {
            throw {TCLAMP PYTHON_START} \
                "tclamp: cannot start Python: \"$python\" is not a command on $searched"
        }
        set python $found
    }
    if {[file isdirectory $python]} {
        throw {TCLAMP PYTHON_START} \
            "tclamp: cannot start Python: \"$python\" is a directory, not a python executable"
    }
    if {![file executable $python]} {
        throw {TCLAMP PYTHON_START} \
            "tclamp: cannot start Python: \"$python\" is not an executable file"
    }
    # About 10 ms: the Python's ABI (a free-threaded build's bridges are
    # cpython-314t) and version (all a Python 2 gives, in the same line),
    # whether it finds torch (without importing it) on the path the bridge
    # will give it, whether its GIL is on (with the environment the bridge
    # will give it), and its libpython.
    set probe {import sys
if sys.version_info < (3, 4): print("tclamp-probe cpython-%d%d %s False gil -" % (sys.version_info[:2] + (sys.version.split()[0],))); sys.exit()
import os, sysconfig, importlib.util
if sys.path and sys.path[0] == "": del sys.path[0]
v = lambda name: sysconfig.get_config_var(name) or ""
name = v("INSTSONAME") or v("LDLIBRARY")
places = [v("PYTHONFRAMEWORKPREFIX"), v("LIBDIR"), os.path.join(v("LIBDIR"), v("MULTIARCH")),
          v("LIBPL"), os.path.join(sys.base_prefix, "lib")]
lib = next((os.path.join(d, name) for d in places if d and os.path.isfile(os.path.join(d, name))), name)
print("tclamp-probe", sys.implementation.cache_tag + ("t" if v("Py_GIL_DISABLED") else ""),
      sys.version.split()[0], importlib.util.find_spec("torch") is not None,
      "gil" if getattr(sys, "_is_gil_enabled", lambda: True)() else "nogil", lib)}
    if {[catch {exec -- $python -c $probe << {} 2>@1} said]
            || ![regexp -line {^tclamp-probe (\S+) (\S+) (True|False) (gil|nogil) (.*)$} $said -> tag found torch gil libpython]} {
        # Its first line, or a Python traceback's last (the error itself;
        # exec adds a line of its own after a failed program's output).
        regsub {\nchild process exited abnormally$} [string trim $said] {} said
        set lines [split $said \n]
        set said [lindex $lines [expr {[string match Traceback* [lindex $lines 0]] ? "end" : 0}]]
        set said [string range [string trim $said] 0 199]
        if {$said eq ""} {
            set said "it printed nothing"
        }
        throw {TCLAMP PYTHON_START} \
            "tclamp: cannot start Python: \"$python\" is not a Python interpreter ($said)"
    }
    if {$gil eq "nogil"} {
        throw {TCLAMP PYTHON_START} "tclamp: the Python at $python is free-threaded and\
            runs without the GIL, which tclamp's bridge relies on (see the threading notes\
            in bridge.h): run it with the GIL on (PYTHON_GIL=1) or use a Python built with the GIL"
    }
    # The bridges' file names carry the ABI they were built for: .cpython-311-...
    if {![llength [lsearch -all -glob $bridges *.$tag-*]]} {
        set built [lmap b $bridges {regsub {.*\.cpython-(\d)(\d+t?)-.*} [file tail $b] {\1.\2}}]
        throw {TCLAMP PYTHON_START} "tclamp: the Python at $python is $found, but this\
            tclamp was built for Python [join $built {, }]: set TCLAMP_PYTHON to a Python\
            [join $built { or }] that has torch, or install tclamp into the Python you want"
    }
    if {$torch ne "True"} {
        throw {TCLAMP PYTHON_START} \
            "tclamp: the Python at $python has no torch (install it there)"
    }
    if {$libpython eq ""} {
        throw {TCLAMP PYTHON_START} "tclamp: cannot start Python: the Python at $python\
            has no shared libpython (tclamp needs a Python built with --enable-shared)"
    }
    ::tclamp::load_python $libpython
    # The bridge starts the Python checked here (a name found on PATH).
    set ::tclamp::checked_python $python
}
# The bridge built for this Python (its file name carries the ABI tag).
set bridge [lindex [lsearch -all -inline -glob $bridges *.$tag-*] 0]

# Tclamp_Init runs once per interpreter and provides the package; after
# `package forget`, `load` finds the bridge loaded and it is provided here.
try {
    load $bridge Tclamp
} finally {
    unset -nocomplain ::tclamp::checked_python
}
package provide tclamp $::tclamp::version
