# Runs every tcltest file here without pytest: tclsh tests/all.tcl
package require tcltest
lappend auto_path [file join [file dirname [file normalize [info script]]] .. tcl]
tcltest::configure -testdir [file dirname [file normalize [info script]]] {*}$argv
tcltest::runAllTests
