"""tclamp's Tcl package index, from one template.

Three indexes are written from it, each with the version compiled into the
bridge: the one beside the package (written by the build, for
`tclamp --tcl-dir`), a checkout's tcl/pkgIndex.tcl (written by
`make setup`), and the one `tclamp install-tcl` writes for any tclsh.
Scanning an index only declares the package; `package require tclamp`
sources load.tcl.

    python src/tclamp/pkgindex.py tcl/pkgIndex.tcl     (make: the checkout's)
"""
import re
import sys
from pathlib import Path

TEMPLATE = """\
# tclamp %(version)s: %(about)s
# Scanning only declares the package; `package require tclamp` loads it.
package ifneeded tclamp %(version)s [list apply {{dir version python index} {
    if {![file exists [file join $dir load.tcl]]} {
        throw {TCLAMP NOT_INSTALLED} "tclamp: no Python package in $dir any more,\\
            which the index in $index names: install tclamp again and run its\\
            `tclamp install-tcl $index`, or remove tclamp from Tcl: rm\\
            [file join $index pkgIndex.tcl]"
    }
    source [file join $dir load.tcl]
}} %(package)s %(version)s %(python)s [file normalize $dir]]
"""

# The package directory as the index finds it at scan time.
BESIDE = "$dir"
IN_CHECKOUT = "[file join [file dirname $dir] src tclamp]"


def tcl_word(text):
    """`text` as one Tcl word.  A newline is written as \\n: Tcl reads a
    backslash and a newline as a space."""
    if re.fullmatch(r"[\w./+:@%,=-]+", text):
        return text
    return re.sub(r'([\s{}\[\]$"\\;])', lambda c: "\\n" if c[1] == "\n" else "\\" + c[1], text)


def index_text(version, about, package=BESIDE, python=""):
    """The index for `package` (a Tcl word, or a path) and `python` (the
    python executable to start, or "" for load.tcl to find one)."""
    if package not in (BESIDE, IN_CHECKOUT):
        package = tcl_word(str(package))
    # A newline in `about` (a path's) would end the comment.
    return TEMPLATE % {"version": version, "about": about.replace("\n", "\\n"),
                       "package": package, "python": tcl_word(python) if python else "{}"}


if __name__ == "__main__":
    # The checkout's index: its Python is the one make setup recorded in
    # tcl/python-path (load.tcl reads it), else the checkout's .venv.
    version = (Path(__file__).parent / "VERSION").read_text().strip()
    Path(sys.argv[1]).write_text(index_text(
        version, "a checkout (TCLLIBPATH=<checkout>/tcl); the package is in src/tclamp",
        IN_CHECKOUT))
