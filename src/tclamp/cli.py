"""The tclamp command.

    tclamp [--traceback] [script.tcl [arg ...]]   the prompt, or run a script
    tclamp -encoding name script.tcl [arg ...]    read the script in that encoding
    tclamp --version                              print tclamp's version
    tclamp --tcl-dir                              print the Tcl package directory
    tclamp install-tcl [dir]                      write a Tcl package index

`install-tcl` as the first word is the install step.  A script of that name
runs as `tclamp ./install-tcl` or `tclamp -- install-tcl`.
"""
import argparse
import sys
from pathlib import Path

from . import PACKAGE_DIR, __version__, pkgindex

# On the auto_path of Debian's and Ubuntu's tclsh.
DEFAULT_INSTALL_DIR = "/usr/local/lib/tcltk/tclamp"

def checkout():
    """The checkout this tclamp runs from (an editable install, set up by
    `make setup` or not), or None."""
    root = PACKAGE_DIR.parent.parent
    if PACKAGE_DIR.parent.name == "src" and (root / "setup.py").is_file():
        return root
    return None


def tcl_dir():
    """The directory whose pkgIndex.tcl provides this tclamp to Tcl: a
    checkout's tcl/ once `make setup` wrote its index there."""
    root = checkout()
    return root / "tcl" if root and (root / "tcl" / "pkgIndex.tcl").is_file() else PACKAGE_DIR


def install_tcl(directory):
    """Writes directory/pkgIndex.tcl for this package and this Python."""
    root = checkout()
    if root:
        raise SystemExit(
            f"tclamp install-tcl: this tclamp runs from the checkout {root}, which a Tcl "
            "package must not depend on: pip install the checkout (without -e) into an "
            "environment outside it and run its tclamp install-tcl, or use "
            f"TCLLIBPATH={tcl_dir()}")
    index = Path(directory).absolute() / "pkgIndex.tcl"
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        index.write_text(pkgindex.index_text(
            __version__, f"written by `tclamp install-tcl` for any tclsh; the package is "
            f"the Python one in {PACKAGE_DIR}, and Python starts from {sys.executable}",
            PACKAGE_DIR, sys.executable))
    except OSError as error:
        raise SystemExit(f"tclamp install-tcl: {error}") from None
    print(f"wrote {index}: `package require tclamp` works in a tclsh whose auto_path "
          f"has {index.parent.parent} (or {index.parent})")
    return 0


def split_at_script(argv):
    """tclamp's own words (its options, then the script's name) and the
    script's arguments: every word after the name, `--` too, as tclsh passes
    them (argparse would take a `--` there as its own)."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return argv[:index + 2], argv[index + 2:]
        if word == "-" or not word.startswith("-"):
            return argv[:index + 1], argv[index + 1:]
        index += 2 if word == "-encoding" else 1     # and its value
    return argv, []


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["install-tcl"]:
        if len(argv) > 2:
            raise SystemExit("usage: tclamp install-tcl [dir]")
        return install_tcl(argv[1] if len(argv) == 2 else DEFAULT_INSTALL_DIR)
    parser = argparse.ArgumentParser(
        prog="tclamp", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [--traceback] [-encoding name] [script.tcl [arg ...]]\n"
              "       %(prog)s --version | --tcl-dir\n"
              "       %(prog)s install-tcl [dir]",
        description="Tcl with tclamp loaded: the interactive prompt, or a script.",
        epilog=f"install-tcl writes a pkgIndex.tcl for this tclamp to dir (default "
               f"{DEFAULT_INSTALL_DIR}).\nA script named install-tcl runs as "
               "`tclamp ./install-tcl` or `tclamp -- install-tcl`.")
    parser.add_argument("--version", action="version", version=f"tclamp {__version__}")
    parser.add_argument("--tcl-dir", action="store_true",
                        help="print the directory to put on auto_path or TCLLIBPATH")
    parser.add_argument("--traceback", action="store_true",
                        help="at the prompt, print Tcl's errorInfo (with any Python "
                             "traceback) on errors")
    parser.add_argument("-encoding", metavar="name",
                        help="the script's encoding, as tclsh's -encoding (default: "
                             "the one tclsh reads a script in)")
    parser.add_argument("script", nargs="?", help="a Tcl script to run instead of the "
                                                  "prompt; the words after it are its $argv")
    words, script_args = split_at_script(argv)
    options = parser.parse_args(words)
    if options.tcl_dir:
        print(tcl_dir())
        return 0
    if options.encoding is not None and options.script is None:
        parser.error("-encoding needs a script")

    from . import prompt, tcl
    interp = tcl.interp             # loads Tcl
    prompt.name_executable(prompt.runner())
    if options.script is None:
        return prompt.interact(interp, options.traceback)
    return prompt.run_script(interp, options.script, script_args, options.encoding)
