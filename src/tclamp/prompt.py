"""The tclamp prompt: an interactive tclsh with tclamp already loaded.

    tclamp [--traceback] [script.tcl [arg ...]]

Line editing and history (~/.tclamp_history) come from readline; a command
runs once Tcl says it is complete (`info complete`), so procs and braces
can span lines; Tab completes command and namespace names.  An error prints
its message; --traceback prints Tcl's errorInfo instead (or type
`set errorInfo` after the fact).
"""
import argparse
import os
import sys

import tclamp
from tclamp import TclError

HISTORY = os.path.expanduser("~/.tclamp_history")
# `exit` must come back here, so that Python saves history and flushes.
EXIT_PROC = "proc ::exit {{code 0}} {return -code error -errorcode [list TCLAMP EXIT $code] exit}"


def completions(interp, text):
    """Command and namespace names that start with `text`."""
    qualified = text.startswith("::")
    pattern = ("" if qualified else "::") + text.replace("\\", "\\\\") + "*"
    namespace = pattern.rpartition("::")[0] or "::"
    names = interp.call("info", "commands", pattern).split()
    try:
        names += [child + "::" for child in
                  interp.call("namespace", "children", namespace, pattern).split()]
    except TclError:         # no such namespace
        pass
    if not qualified:
        names = [name.removeprefix("::") for name in names]
    return sorted(name for name in set(names) if name.startswith(text))


def setup_readline(interp):
    try:
        import readline
    except ImportError:      # no line editing; everything else still works
        return
    readline.set_completer_delims(" \t\n[{;\"$")
    matches = []

    def complete(text, state):
        if state == 0:
            matches[:] = completions(interp, text)
        return matches[state] if state < len(matches) else None

    readline.set_completer(complete)
    readline.parse_and_bind("tab: complete")
    try:
        readline.read_history_file(HISTORY)
    except OSError:
        pass
    import atexit
    atexit.register(lambda: readline.write_history_file(HISTORY))


def exit_code(error):
    words = error.errorcode.split()
    return int(words[2]) if words[:2] == ["TCLAMP", "EXIT"] and len(words) > 2 else None


def evaluate(interp, script, traceback):
    """Runs a complete script and prints its result or error.  Returns
    (succeeded, exit code if the script called exit)."""
    try:
        result = interp.eval(script)
    except TclError as error:
        code = exit_code(error)
        if code is None:
            print(error.errorinfo if traceback else error.result, file=sys.stderr)
        return code == 0, code
    if result:
        print(result)
    return True, None


def interact(interp, traceback):
    import torch
    print(f"tclamp {tclamp.__version__} (Tcl {interp.eval('info patchlevel')}, "
          f"torch {torch.__version__}); exit or Ctrl-D to leave")
    setup_readline(interp)
    buffer = ""
    while True:
        try:
            line = input("> " if buffer else "% ")
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print()
            buffer = ""
            continue
        buffer += line + "\n"
        if interp.call("info", "complete", buffer) != "1":
            continue
        script, buffer = buffer, ""
        try:
            _, code = evaluate(interp, script, traceback)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            continue
        if code is not None:
            return code


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tclamp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--traceback", action="store_true",
                        help="print Tcl's errorInfo (with any Python traceback) on errors")
    parser.add_argument("script", nargs="?", help="a Tcl script to run instead of the prompt")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments ($argv)")
    options = parser.parse_args(argv)
    interp = tclamp.tcl.interp
    interp.eval(EXIT_PROC)
    if options.script is None:
        interp.call("set", "tcl_interactive", 1)
        return interact(interp, options.traceback)
    interp.call("set", "argv0", options.script)
    interp.call("set", "argv", options.args)
    interp.call("set", "argc", len(options.args))
    succeeded, code = evaluate(interp, interp.call("list", "source", options.script),
                               options.traceback)
    return code if code is not None else (0 if succeeded else 1)


if __name__ == "__main__":
    sys.exit(main())
