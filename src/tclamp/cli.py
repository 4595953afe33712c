"""The tclamp command.

    tclamp [--traceback] [script.tcl [arg ...]]   the prompt, or run a script
    tclamp -encoding name script.tcl [arg ...]    read the script in that encoding
                                                  (without a script: the prompt,
                                                  whose $argv is -encoding ?name?)
    tclamp --version                              print tclamp's version
    tclamp --tcl-dir                              print the Tcl package directory
    tclamp install-tcl [dir]                      write a Tcl package index
    tclamp uninstall-tcl [dir]                    remove what install-tcl wrote

`install-tcl` or `uninstall-tcl` as the first word is that step.  A script
of that name runs as `tclamp ./install-tcl` or `tclamp -- install-tcl`.
"""
import argparse
import json
import os
import signal
import sys
from pathlib import Path

from . import PACKAGE_DIR, __version__, pkgindex
from .install_record import MADE, made_by_install, remove_empty

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
    # Bytes the file system's encoding cannot decode: Tcl reads them as
    # other characters, so no tclsh would find the index there.
    if shown(index) != str(index):
        raise SystemExit(
            f"tclamp install-tcl: the name {shown(index.parent)} is not "
            f"{sys.getfilesystemencoding()} text, and Tcl cannot name it: choose another directory")
    if index.parent.exists() and not index.parent.is_dir():
        raise SystemExit(f"tclamp install-tcl: {index.parent} is a file, not a directory")
    # Written through, the link's target (another directory's index, or a
    # file a dangling link names) would change, and uninstall-tcl, which
    # leaves links, could never remove it.
    if index.is_symlink():
        raise SystemExit(f"tclamp install-tcl: {index} is a symbolic link, which this "
                         "would write through: left as it is (remove it, or name another "
                         "directory)")
    line = first_line(index)        # None: no index there (unreadable: writing says why)
    if line is not None and not line.startswith(INDEX_START):
        raise SystemExit(
            f"tclamp install-tcl: {index} is another package's index, which this would "
            f"overwrite: name a directory of tclamp's own, such as {index.parent / 'tclamp'}")
    # The directories this makes (or an earlier install-tcl made), for
    # uninstall-tcl to remove again.
    made = [str(d) for d in [index.parent, *index.parent.parents] if not d.exists()]
    made += [d for d in made_by_install(index) if d not in made]
    # An index another environment's install-tcl wrote names its Python last.
    before = python_started(line or "")
    replaced = (f"; it replaces the index that started {before}"
                if WRITTEN in (line or "")
                and before != sys.executable.replace("\n", "\\n") else "")
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        index.write_text(pkgindex.index_text(
            __version__, f"{WRITTEN} for any tclsh; the package is "
            f"the Python one in {PACKAGE_DIR}{PYTHON_STARTS}{sys.executable}",
            PACKAGE_DIR, sys.executable) + MADE + json.dumps(made) + "\n")
    except OSError as error:
        raise SystemExit(f"tclamp install-tcl: {error}") from None
    print(f"wrote {index}: `package require tclamp` works in a tclsh whose auto_path "
          f"has {index.parent.parent} (or {index.parent}){replaced}")
    return 0


WRITTEN = "written by `tclamp install-tcl`"
INDEX_START = "# tclamp "           # the first line of every index of tclamp's
PYTHON_STARTS = ", and Python starts from "


def python_started(line):
    """The Python an index's first line names last (the Python it starts)."""
    return line.rstrip("\n").rpartition(PYTHON_STARTS)[2]


def shown(path):
    """path for a message, its undecodable bytes written as \\xff (printing
    the surrogates os.fsdecode puts there would fail)."""
    return os.fsencode(path).decode(sys.getfilesystemencoding(), "backslashreplace")


def first_line(index):
    """The first line of `index`, or None where it cannot be read."""
    try:
        with open(index, "rb") as file:
            return file.readline().decode(errors="replace")
    except OSError:
        return None


def same_environment(python):
    """Whether the Python an index starts is this one's environment's (its
    bin's parent is this prefix, however either is named), or is gone (a
    link to a Python upgraded away is gone too)."""
    if not python or not os.path.exists(python):
        return True
    try:
        return Path(python).parent.parent.samefile(sys.prefix)
    except OSError:
        return True


def uninstall_tcl(directory):
    """Removes the index install-tcl wrote to directory, then the directories
    it made for it, each only if nothing else is in it."""
    index = Path(directory).absolute() / "pkgIndex.tcl"
    if not index.is_file():
        raise SystemExit(f"tclamp uninstall-tcl: no pkgIndex.tcl in {shown(index.parent)}: "
                         "name the directory that tclamp install-tcl wrote to")
    if index.is_symlink():
        raise SystemExit(f"tclamp uninstall-tcl: {shown(index)} is a symbolic link, which "
                         "install-tcl does not write: left as it is")
    line = first_line(index) or ""
    if not (line.startswith(INDEX_START) and WRITTEN in line):
        # Another package's, or the one beside tclamp's package (pip
        # uninstall removes that) or in a checkout.
        raise SystemExit(f"tclamp uninstall-tcl: {shown(index)} is not an index that tclamp "
                         "install-tcl wrote: left as it is")
    # An index another environment's install-tcl wrote over this one's
    # starts that environment's Python: while that is there, it is its own.
    started = python_started(line)
    if PYTHON_STARTS in line and not same_environment(started):
        raise SystemExit(f"tclamp uninstall-tcl: {shown(index)} starts {started}, another "
                         "environment's tclamp: left as it is (its tclamp uninstall-tcl "
                         "removes it)")
    # Its own directory (the documented ones are named tclamp) and those
    # made for it, deepest first.
    places = [Path(d) for d in made_by_install(index)]
    if index.parent.name == "tclamp" and index.parent not in places:
        places.insert(0, index.parent)
    try:
        index.unlink()
        removed = [str(index), *map(str, remove_empty(places, index))]
    except OSError as error:
        raise SystemExit(f"tclamp uninstall-tcl: {error}") from None
    # (an index an older install-tcl wrote may have such a name)
    print("removed " + ", ".join(map(shown, removed)))
    return 0


def split_at_script(argv):
    """tclamp's own words (its options, then the script's name), the
    script's arguments and -encoding's name (None without one).  The
    arguments are every word after the script's name, `--` too, as tclsh
    passes them (argparse would take a `--` there as its own).  Without a
    script they are the prompt's: `-encoding` and a name, if any, as in
    tclsh.  `-` is no script either: as in tclsh, the commands come from
    stdin, and it, the words after it and the -encoding words are $argv.
    The word after `-encoding` is its name whatever it starts with
    (`-encoding -x x.tcl` is tclsh's `unknown encoding "-x"`), so it is
    read here, not by argparse."""
    own, named = [], []     # tclamp's other options; the -encoding words
    index = 0
    while index < len(argv):
        word = argv[index]
        encoding = named[-1] if named else None
        if word == "--":
            return own + argv[index:index + 2], argv[index + 2:], encoding
        if word == "-" or word == "-encoding" and index + 2 >= len(argv):
            # tclsh reads -encoding so only before a name and a script;
            # without a script (and - is none) it runs its prompt, these
            # words its $argv.
            return own, named + argv[index:], None
        if not word.startswith("-"):
            return own + [word], argv[index + 1:], encoding
        if word == "-encoding":
            named += argv[index:index + 2]
            index += 2
        else:
            own.append(word)
            index += 1
    return own, [], named[-1] if named else None


def step_directory(argv):
    """The directory of `tclamp install-tcl [dir]` (or uninstall-tcl's).  An
    empty one would name the current directory: refused, as is a second."""
    if len(argv) > 2:
        raise SystemExit(f"usage: tclamp {argv[0]} [dir]")
    if argv[1:] == [""]:
        raise SystemExit(f'tclamp {argv[0]}: the directory is "" (an empty name): name a '
                         f"directory, or leave it out for {DEFAULT_INSTALL_DIR}")
    return argv[1] if len(argv) == 2 else DEFAULT_INSTALL_DIR


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["install-tcl"]:
        return install_tcl(step_directory(argv))
    if argv[:1] == ["uninstall-tcl"]:
        return uninstall_tcl(step_directory(argv))
    parser = argparse.ArgumentParser(
        prog="tclamp", formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s [--traceback] [-encoding name] [script.tcl [arg ...]]\n"
              "       %(prog)s --version | --tcl-dir\n"
              "       %(prog)s install-tcl [dir]\n"
              "       %(prog)s uninstall-tcl [dir]",
        description="Tcl with tclamp loaded: the interactive prompt, or a script.",
        epilog=f"install-tcl writes a pkgIndex.tcl for this tclamp to dir (default "
               f"{DEFAULT_INSTALL_DIR});\nuninstall-tcl removes it, and the directories "
               "install-tcl made for it.\nA script named install-tcl (or uninstall-tcl) runs as "
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
    words, script_args, encoding = split_at_script(argv)
    options = parser.parse_args(words)
    if encoding is None and options.script is not None:
        encoding = options.encoding     # written -encoding=name
    if options.tcl_dir:
        if options.script is not None or encoding is not None or script_args:
            parser.error("--tcl-dir prints a directory and runs nothing: it takes no script")
        print(tcl_dir())
        return 0

    try:
        from . import prompt, tcl
        interp = tcl.interp             # loads Tcl, and imports torch: seconds
        prompt.name_executable(prompt.runner())
        if options.script is None:
            return prompt.interact(interp, options.traceback, script_args)
        return prompt.run_script(interp, options.script, script_args, encoding)
    except KeyboardInterrupt:
        # Ctrl-C before the script or the prompt runs (while torch loads,
        # or the banner asks CUDA): it ends tclamp as it ends a script,
        # not with Python's traceback.
        if sys.stderr is not None:
            print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
