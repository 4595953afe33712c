# Runs one tcltest file for tclamp's pytest plugin: tclsh tcltest_driver.tcl FILE
# Prints tcltest's start/pass/skip lines, which the plugin reads.  Exits 1
# when the file raised an error outside its test cases.
package require tcltest
set file [file normalize [lindex $argv 0]]
lappend auto_path [file dirname [file normalize [info script]]]
tcltest::configure -verbose {start pass skip error} -testdir [file dirname $file]
set argv {}
set failed [catch {uplevel #0 [list source $file]} message options]
if {$failed} {
    puts stderr [dict get $options -errorinfo]
    exit 1
}
exit 0
