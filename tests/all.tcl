# Runs every tcltest file here without pytest, each in its own tclsh:
#     tclsh tests/all.tcl ?tcltest options?
# e.g. -file autocast.test, -verbose bps, -testdir DIR.  tclamp comes from
# this checkout (../tcl) and Python from its .venv, so no environment
# variable is needed.  Exits 1 unless every file ran to tcltest's summary
# with no case failed (runAllTests alone exits 0 even when a file could not
# load, or stopped before its summary).
package require tcltest
set here [file dirname [file normalize [info script]]]
set tcl_dir [file join [file dirname $here] tcl]
if {[info exists env(TCLLIBPATH)]} {
    set env(TCLLIBPATH) [linsert $env(TCLLIBPATH) 0 $tcl_dir]
} else {
    set env(TCLLIBPATH) [list $tcl_dir]
}
tcltest::configure -testdir $here {*}$argv
# A file's output is read and echoed as Tcl 8.6 does: a byte that is no
# UTF-8 (raw bytes a case wrote, a surrogate's three bytes) is read as its
# own character and written back.  Tcl 9's channels refuse such bytes by
# default (-profile strict): the read failed, the rest of the file's output
# was lost and a file whose cases all passed was reported as failing.
set profile [expr {[catch {encoding profiles}] ? {} : {-profile tcl8}}]
if {$profile ne {}} {
    chan configure stdout {*}$profile
}

proc matches_any {patterns name} {
    foreach pattern $patterns {
        if {[string match $pattern $name]} {
            return 1
        }
    }
    return 0
}

# Runs one file, echoing its output; returns its summary's four counts, or
# raises an error that says why there is none.
proc run_file {file} {
    set channel [open |[list [info nameofexecutable] $file {*}$::argv 2>@1]]
    chan configure $channel {*}$::profile
    set counts {}
    while {[gets $channel line] >= 0} {
        puts $line
        if {[regexp {:\tTotal\t(\d+)\tPassed\t(\d+)\tSkipped\t(\d+)\tFailed\t(\d+)$} \
                $line -> total passed skipped failed]} {
            set counts [list $total $passed $skipped $failed]
        }
    }
    chan configure $channel -blocking 1
    if {[catch {close $channel} message options]} {
        set code [dict get $options -errorcode]
        if {[lindex $code 0] eq "CHILDSTATUS"} {
            error "exited with status [lindex $code 2]"
        }
        error $message
    }
    if {$counts eq {}} {
        error "printed no tcltest summary (it stopped before cleanupTests)"
    }
    return $counts
}

set totals {0 0 0 0}
set files 0
set failed_files {}
foreach file [lsort [glob -nocomplain -directory [tcltest::testsDirectory] *]] {
    set name [file tail $file]
    if {![matches_any [tcltest::matchFiles] $name] || [matches_any [tcltest::skipFiles] $name]} {
        continue
    }
    incr files
    puts $name
    flush stdout
    if {[catch {run_file $file} counts]} {
        puts "$name: $counts"
        lappend failed_files $name
        continue
    }
    if {[lindex $counts 3] > 0} {
        lappend failed_files $name
    }
    set totals [lmap total $totals count $counts {expr {$total + $count}}]
}

puts "\nall.tcl:\tTotal\t[lindex $totals 0]\tPassed\t[lindex $totals 1]\tSkipped\t[lindex $totals 2]\tFailed\t[lindex $totals 3]"
puts "Ran $files test files."
if {$files == 0} {
    puts "No test file matched."
    exit 1
}
if {[llength $failed_files]} {
    puts "Files with failing tests or no summary: [join $failed_files {, }]"
    exit 1
}
exit 0
