# Runs one tcltest file for tclamp's pytest plugin (pytest_plugin.py):
#
#   tclsh tcltest_driver.tcl collect FILE RECORDS NONCE
#       Sources FILE with tcltest::test replaced by a recorder, so no case's
#       setup, body or cleanup runs; the file's top-level code does run.
#   tclsh tcltest_driver.tcl run FILE RECORDS NONCE  < selection
#       Sources FILE for real.  The cases to run come on stdin, one
#       "OCCURRENCE NAME" line each, NAME written as in a record (OCCURRENCE
#       counts the calls of that name, from 1); every other case goes through tcltest with
#       -skip *, so tcltest itself counts it as skipped.  Each case that runs
#       has its stdout and stderr between "\nNONCE start|end INDEX\n" lines.
#
# RECORDS receives one JSON object per line, all values strings, written and
# flushed as things happen so that a crash loses nothing already recorded.
# The records are ASCII: every other character is a \u escape, a character
# past U+FFFF two of them, so half of one (which Tcl 8.6 keeps in a string
# and writes as UTF-8 no decoder takes) reads back as it was.
#   {"event":"case","name":..,"occurrence":..,"line":..}       (collect)
#   {"event":"start","case":..,"name":..,"occurrence":..}      (run)
#   {"event":"result","case":..,"name":..,"occurrence":..,"outcome":..,
#    "reason":..,"constraints":..,"usec":..,"tcltest":..,
#    "change":..}   (run; change: what the case added to tcltest's Total
#                    Passed Skipped Failed, e.g. "1 1 0 0")
#   {"event":"deselected","case":..,"name":..,"occurrence":..} (run)
#   {"event":"tcltest","text":..}   tcltest's output outside any case
#   {"event":"exit","status":..,"case":..,"cleaned_up":..,"tcltest":..}
#   {"event":"error","message":..,"errorinfo":..,"case":..}   an error that
#                                   stopped the file; case: the name of the
#                                   case whose test call raised it, or ""
#   {"event":"cleanup"}             tcltest::cleanupTests was called
#   {"event":"end"}                 the file was sourced to its end
namespace eval ::tclamp_pytest {
    # Tcl 9 looks up an unqualified global (argv) in the namespace only.
    variable mode [lindex $::argv 0]
    variable file [file normalize [lindex $::argv 1]]
    variable nonce [lindex $::argv 3]
    variable records [open [lindex $::argv 2] w]
    chan configure $records -encoding ascii -translation lf
    # Tcl 9 refuses to encode or decode half a character unless told so;
    # Tcl 8.6 always does (as ED A0 xx) and knows no profiles.
    variable profile [expr {[catch {encoding profiles}] ? {} : {-profile tcl8}}]

    variable depth 0       ;# > 0 while a case runs: tests inside it are its own
    variable case ""       ;# index of the running case
    variable case_text ""  ;# tcltest's output for the running case
    variable cases 0       ;# top-level test calls so far
    variable calls         ;# name -> top-level test calls of that name so far
    array set calls {}
    variable selected      ;# "occurrence name" -> 1 for the cases to run
    array set selected {}
    variable cleaned_up 0  ;# tcltest::cleanupTests was called
    variable raised ""     ;# the case whose test call last raised an error

    # What Python's json.dumps writes for the characters below U+0080 (DEL
    # as \u007f: it is not printable, and Tcl's ascii would write it as ?)
    variable json_escapes [list \\ \\\\ \" \\\" \b \\b \f \\f \n \\n \r \\r \t \\t]
    for {set code 0} {$code < 32} {incr code} {
        if {[format %c $code] ni $json_escapes} {
            lappend json_escapes [format %c $code] [format \\u%04x $code]
        }
    }
    lappend json_escapes \x7f \\u007f
    unset code
}
# The file sees what `tclsh FILE` gives it.
set argv0 $::tclamp_pytest::file
set argv {}
set argc 0

package require tcltest
# This tclamp's directory goes first on auto_path and on TCLLIBPATH, where
# interpreters that the file creates (copying auto_path, or reading
# TCLLIBPATH when made) and tclsh processes that it starts look: of one
# version, the first found wins, so they load the bridge this one does.
namespace eval ::tclamp_pytest {
    variable own_dir [file dirname [file normalize [info script]]]
}
set auto_path [linsert $auto_path 0 $::tclamp_pytest::own_dir]
set ::env(TCLLIBPATH) [concat [list $::tclamp_pytest::own_dir] \
    [expr {[info exists ::env(TCLLIBPATH)] ? $::env(TCLLIBPATH) : ""}]]
# `package require tclamp` gets the tclamp beside this driver, the one this
# pytest runs, though another (a higher version, or one that TCLLIBPATH or
# `tclamp install-tcl` put on auto_path) is there too: a declared version is
# taken without a search, and each search (`package unknown`, which declares
# every version it finds) is followed by declaring this one alone again.  A
# file that asks for a version this one is not still finds the others.
namespace eval ::tclamp_pytest {
    variable own_version ""
}
proc ::tclamp_pytest::declare_own_tclamp {} {
    variable own_dir
    variable own_version
    # not once tclamp is loading or loaded
    if {[package provide tclamp] ne "" || [namespace exists ::tclamp]
            || ![file exists [file join $own_dir pkgIndex.tcl]]} {
        return
    }
    package forget tclamp
    apply {{dir} { source [file join $dir pkgIndex.tcl] }} $own_dir
    set own_version [lindex [package versions tclamp] 0]
}
proc ::tclamp_pytest::package_unknown {original name args} {
    variable own_version
    if {[llength $original]} {
        uplevel 1 [list {*}$original $name {*}$args]
    }
    if {$name eq "tclamp" && [llength $args] && $own_version ne ""
            && ![package vsatisfies $own_version {*}$args]} {
        return
    }
    declare_own_tclamp
}
::tclamp_pytest::declare_own_tclamp
package unknown [list ::tclamp_pytest::package_unknown [package unknown]]
chan configure stdout -encoding utf-8 -buffering line
chan configure stderr -encoding utf-8

# A JSON string's text, as Python's json.dumps (ensure_ascii) writes it.
proc ::tclamp_pytest::json_text {value} {
    variable json_escapes
    set text ""
    foreach run [regexp -all -inline {[\x00-\x7f]+|[^\x00-\x7f]+} $value] {
        if {[string is ascii $run]} {
            append text [string map $json_escapes $run]
            continue
        }
        foreach char [split $run ""] {
            scan $char %c code
            if {$code > 0xffff} {       ;# Tcl 9: one character, a surrogate pair in JSON
                incr code -0x10000
                append text [format {\u%04x\u%04x} [expr {0xd800 + ($code >> 10)}] \
                    [expr {0xdc00 + ($code & 0x3ff)}]]
            } else {
                append text [format {\u%04x} $code]
            }
        }
    }
    return $text
}

proc ::tclamp_pytest::record {args} {
    variable records
    set fields {}
    foreach {key value} $args {
        lappend fields "\"$key\":\"[json_text $value]\""
    }
    chan puts $records "{[join $fields ,]}"
    chan flush $records
}

# tcltest writes its messages to [outputChannel]; this channel keeps them
# apart from the case's own output: with the case while one runs, else as a
# file-level record.
proc ::tclamp_pytest::capture {command channel args} {
    variable case
    variable case_text
    variable profile
    switch -- $command {
        initialize { return {initialize finalize watch write} }
        write {
            set data [lindex $args 0]
            set text [encoding convertfrom {*}$profile utf-8 $data]
            if {$case ne ""} {
                append case_text $text
            } else {
                record event tcltest text $text
            }
            return [string length $data]
        }
    }
}
tcltest::configure -testdir [file dirname $::tclamp_pytest::file]
set ::tcltest::outputChannel [chan create write ::tclamp_pytest::capture]
chan configure $::tcltest::outputChannel -encoding utf-8 {*}$::tclamp_pytest::profile \
    -translation lf -buffering none -buffersize 1048576

rename ::tcltest::cleanupTests ::tcltest::TclampOriginalCleanupTests
proc ::tcltest::cleanupTests {args} {
    set ::tclamp_pytest::cleaned_up 1
    ::tclamp_pytest::record event cleanup
    tailcall ::tcltest::TclampOriginalCleanupTests {*}$args
}

# Both modes: an exit is recorded (with the case it happened in), then done.
rename ::exit ::tclamp_pytest::real_exit
proc ::exit {{status 0}} {
    if {![string is integer -strict $status]} {
        # exit refuses it (expected integer but got ...) and the file goes
        # on, as under `tclsh FILE`: no exit to record
        catch {::tclamp_pytest::real_exit $status} message options
        return -code error -errorcode [dict get $options -errorcode] $message
    }
    namespace upvar ::tclamp_pytest case case case_text text cleaned_up cleaned_up
    set running $case
    if {$running ne ""} {
        ::tclamp_pytest::mark end $running
        set case ""
    }
    ::tclamp_pytest::record event exit status $status case $running \
        cleaned_up $cleaned_up tcltest $text
    tailcall ::tclamp_pytest::real_exit $status
}

proc ::tclamp_pytest::mark {what index} {
    variable nonce
    foreach channel {stdout stderr} {
        chan puts $channel "\n$nonce $what $index"
        chan flush $channel
    }
}

# --- collect ---------------------------------------------------------------

proc ::tclamp_pytest::collect_case {name description arguments} {
    variable calls
    variable file
    set line ""
    set frame [info frame -1]
    if {[dict get $frame type] eq "source" && [dict exists $frame file]
            && [file normalize [dict get $frame file]] eq $file} {
        set line [dict get $frame line]
    }
    record event case name $name occurrence [incr calls($name)] line $line
}

# --- run -------------------------------------------------------------------

# The constraints a case declares, as written (for naming a skip's reason).
proc ::tclamp_pytest::declared_constraints {arguments} {
    if {[llength $arguments] == 3 && ![string match -* [lindex $arguments 0]]} {
        return [lindex $arguments 0]
    }
    if {[llength $arguments] == 1} {
        set arguments [lindex $arguments 0]
    }
    if {[catch {dict get $arguments -constraints} constraints]} {
        return ""
    }
    return $constraints
}

proc ::tclamp_pytest::run_case {name description arguments} {
    variable depth
    variable cases
    variable calls
    variable selected
    variable case
    variable case_text
    variable raised
    set original [list ::tcltest::TclampOriginalTest $name $description {*}$arguments]
    if {$depth > 0} {
        tailcall {*}$original
    }
    set raised ""
    set index [incr cases]
    set occurrence [incr calls($name)]
    if {![info exists selected([list $occurrence [json_text $name]])]} {
        set skip [tcltest::configure -skip]
        tcltest::configure -skip *
        try {
            uplevel 1 $original
        } on error {message options} {
            set raised $name
            return -options $options $message
        } finally {
            tcltest::configure -skip $skip
        }
        record event deselected case $index name $name occurrence $occurrence
        return
    }

    array set counts [array get ::tcltest::numTests]
    set skipped_because [array get ::tcltest::skippedBecause]
    record event start case $index name $name occurrence $occurrence
    mark start $index
    set case $index
    set case_text ""
    incr depth
    set started [clock microseconds]
    set code [catch {uplevel 1 $original} message options]
    set usec [expr {[clock microseconds] - $started}]
    incr depth -1
    set case ""
    mark end $index

    set reason ""
    foreach count {Total Passed Skipped Failed} {
        lappend change [expr {$::tcltest::numTests($count) - $counts($count)}]
    }
    if {$code == 1} {
        # tcltest::test itself failed (a bad option, say): its errorInfo,
        # less this driver's frames
        set outcome error
        set raised $name
        regsub {\n    while executing\n"::tcltest::TclampOriginalTest .*$} \
            [dict get $options -errorinfo] {} reason
    } else {
        switch -- $change {
            {1 1 0 0} { set outcome passed }
            {1 0 0 1} { set outcome failed }
            {1 0 1 0} {
                set outcome skipped
                foreach {because number} [array get ::tcltest::skippedBecause] {
                    if {![dict exists $skipped_because $because]
                            || [dict get $skipped_because $because] < $number} {
                        set reason $because
                    }
                }
            }
            default {
                set outcome unknown
                set reason "tcltest's Total Passed Skipped Failed changed by $change"
            }
        }
    }
    record event result case $index name $name occurrence $occurrence \
        outcome $outcome reason $reason usec $usec tcltest $case_text \
        constraints [declared_constraints $arguments] change $change
    return -options $options $message
}

# --- main ------------------------------------------------------------------

rename ::tcltest::test ::tcltest::TclampOriginalTest
if {$::tclamp_pytest::mode eq "collect"} {
    proc ::tcltest::test {name description args} {
        tailcall ::tclamp_pytest::collect_case $name $description $args
    }
} else {
    # Names are compared as the records write them: no encoding can lose a
    # character on the way.
    foreach line [split [read stdin] \n] {
        if {[regexp {^(\d+) (.*)$} $line -> occurrence name]} {
            set ::tclamp_pytest::selected([list $occurrence $name]) 1
        }
    }
    unset -nocomplain line occurrence name
    proc ::tcltest::test {name description args} {
        tailcall ::tclamp_pytest::run_case $name $description $args
    }
}

# At top level, so that errorInfo reads as tclsh's own, less its last line.
set ::tclamp_pytest::code [catch {source $::tclamp_pytest::file} \
    ::tclamp_pytest::message ::tclamp_pytest::options]
if {$::tclamp_pytest::code in {3 4}} {
    # what tclsh says about a break or continue at a file's top level
    set ::tclamp_pytest::message "invoked \"[lindex {break continue} \
        [expr {$::tclamp_pytest::code - 3}]]\" outside of a loop"
}
if {$::tclamp_pytest::code ni {0 2}} {
    set ::tclamp_pytest::errorinfo $::tclamp_pytest::message
    if {[dict exists $::tclamp_pytest::options -errorinfo]} {
        set ::tclamp_pytest::errorinfo [dict get $::tclamp_pytest::options -errorinfo]
        regsub {\n    invoked from within\n"source \$::tclamp_pytest::file"$} \
            $::tclamp_pytest::errorinfo {} ::tclamp_pytest::errorinfo
    }
    # An error that a case's test call raised names that case, and reads
    # as tclsh's would, without this driver's frames.
    if {$::tclamp_pytest::raised ne "" && [string first "\n\"::tclamp_pytest::run_case " \
            $::tclamp_pytest::errorinfo] >= 0} {
        regsub {\n    while executing\n"::tcltest::TclampOriginalTest .*?\n    invoked from within\n"::tclamp_pytest::run_case .*?"\n    invoked from within\n} \
            $::tclamp_pytest::errorinfo "\n    while executing\n" ::tclamp_pytest::errorinfo
    } else {
        set ::tclamp_pytest::raised ""
    }
    ::tclamp_pytest::record event error message $::tclamp_pytest::message \
        errorinfo $::tclamp_pytest::errorinfo case $::tclamp_pytest::raised
    ::tclamp_pytest::real_exit 1
}
::tclamp_pytest::record event end
::tclamp_pytest::real_exit 0
