"""The tclamp prompt: a tclsh with tclamp loaded, for a terminal.

When stdin is not a terminal, commands are read from it as tclsh reads
them: through Tcl's own stdin (a script's `gets stdin` reads the next line),
with no banner, prompt or result printed, and only an error's message.

Line editing and history (~/.tclamp_history) come from readline; a command
runs once Tcl says it is complete (`info complete`), so procs and braces
can span lines.  Tab completes command and namespace names, the
subcommands of ensembles (`py e<Tab>`) and variables (`$na<Tab>`).
~/.tclamprc is sourced first.  As in tclsh: `exit` ends the program
whatever catches it, Ctrl-C stops the running command (here it comes back
to the prompt), an error prints its message (with --traceback, Tcl's
errorInfo; or type `set errorInfo` after the fact), and a script's error
prints errorInfo, with the file and line.
"""
import atexit
import code
import ctypes
import os
import re
import shutil
import signal
import socket
import sys
import threading
from pathlib import Path

from . import _bridge, bridge
from .bridge import py_interact, tcl_name
from .errors import TclError, crossed_tcl, describe_error

HISTORY = os.path.expanduser("~/.tclamp_history")
RC_FILE = os.path.expanduser("~/.tclamprc")

# Tcl reads the code as its own exit does, and reports a bad one alike:
# 8.6's exit takes an int (as `string repeat` reads its count), 9's the low
# bits of any integer (as `format %d` does).
EXIT = """proc ::exit {{returnCode 0}} {
    try {
        if {![package vsatisfies [info tclversion] 9]} {
            string repeat {} $returnCode
        }
        set code [format %d $returnCode]
    } on error {message options} {
        return -code error -errorcode [dict get $options -errorcode] $message
    }
    ::tclamp::prompt::exit $code
}"""


class Evaluator:
    """Runs the prompt's scripts so that `exit` and Ctrl-C end them as they
    end a tclsh's: no `catch` in the script can stop either.

    Both cancel the evaluation (Interp.cancel, Tcl_CancelEval), which any
    thread may do.  While Tcl runs it holds no GIL and runs no Python, so Python's
    own SIGINT handler would wait for it; a watcher thread hears the signal
    through Python's wakeup fd instead.  While Python code of the script runs,
    the handler cancels before it raises KeyboardInterrupt there, so that a
    `catch` around that code cannot go on.  Under `py interact` Ctrl-C is
    Python's, as at its own prompt: Python code there gets the
    KeyboardInterrupt, and Tcl that it runs (tclamp.tcl.eval) is stopped
    alone (Interp.interrupt), with an error that a `catch` in it may catch
    as Python's `except BaseException` catches KeyboardInterrupt; the
    script that opened the prompt goes on."""

    def __init__(self, interp):
        self.interp = interp
        self.lock = threading.RLock()   # the SIGINT handler may interrupt a holder
        self.running = False       # a script is being evaluated
        self.canceled = False      # ... and Ctrl-C cancelled it
        self.interrupted = False   # the last script was stopped by Ctrl-C
        self.exit_code = None      # set by `exit`
        # The `py interact`s running in the script, innermost last: the
        # interpreter each runs in (this one or a child with tclamp of its
        # own), and how many evaluations Python had started there as it began
        self.python_prompts = []
        interp.create_command("::tclamp::prompt::exit", self.exit)
        bridge.interact_hook = self.interact    # every interpreter's py interact
        interp.eval(EXIT)
        _bridge.interruptible_stdin()
        reader, self.wakeup = socket.socketpair()
        self.wakeup.setblocking(False)
        signal.set_wakeup_fd(self.wakeup.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGINT, self.on_sigint)
        threading.Thread(target=self.watch, args=(reader,), daemon=True).start()

    def cancel(self):
        self.interp.cancel()

    def cancel_running(self):
        """Cancels the running script, once, unless Python's prompt runs in
        it (then stops the Tcl that code typed there runs, each time), and
        ends a `gets stdin` it waits in (under Python's prompt, the
        KeyboardInterrupt then comes); whether one was running."""
        with self.lock:
            if self.python_prompts:
                interp, outside = self.python_prompts[-1]
                interp.interrupt(outside)
            elif self.running and not self.canceled:
                self.canceled = True
                self.cancel()
            if self.running:
                _bridge.interrupt_stdin()   # each time: a read may begin after a cancel
            return self.running

    def watch(self, reader):
        while True:
            if signal.SIGINT in reader.recv(64):
                self.cancel_running()

    def on_sigint(self, signum, frame):
        # Python code running inside the script (py exec), or the prompt
        # itself: stop it.  After a cancelled evaluation: nothing is left.
        if self.cancel_running() or not self.canceled:
            raise KeyboardInterrupt

    def interact(self, *args):
        """py interact, where Ctrl-C is Python's own: its console takes the
        KeyboardInterrupt, and the Tcl command that opened it goes on.
        Another thread's (a Thread package interpreter with tclamp) is the
        plain one: Ctrl-C, and signal handlers, are the main thread's."""
        if threading.current_thread() is not threading.main_thread():
            return py_interact(*args, console_type=code.InteractiveConsole)
        interp = _bridge.current()      # whose py interact this is
        with self.lock:
            self.python_prompts.append((interp, interp.evaluations))
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        evaluator = self

        class Console(code.InteractiveConsole):
            def runcode(self, compiled):
                # Tcl's exit, called from here, cancelled the script (the
                # call fails with `eval unwound`, unless Python caught it):
                # Python's prompt ends, without a traceback, and so does
                # the script, as at sys.exit.
                try:
                    exec(compiled, self.locals)
                except SystemExit:
                    raise
                except BaseException:
                    if evaluator.exit_code is None:
                        self.showtraceback()
                if evaluator.exit_code is not None:
                    raise SystemExit(evaluator.exit_code)

        try:
            return py_interact(*args, console_type=Console)
        finally:
            signal.signal(signal.SIGINT, previous)
            with self.lock:
                self.python_prompts.pop()

    def exit(self, code):
        self.exit_code = int(code)
        self.cancel()

    def run(self, script, file=False, encoding=None):
        """The script's result (with `file`, of the file named `script`, as
        tclsh runs its script); TclError if it failed, was interrupted
        (`interrupted` is then true) or called exit (`exit_code` is set)."""
        with self.lock:
            self.running, self.canceled = True, False
        try:
            if file:
                return self.interp.eval_file(script, encoding)
            return self.interp.eval(script)
        except TclError:
            raise
        except Exception as error:
            # A Python exception comes back as itself (docs/py.md); the
            # prompt reports it as the Tcl error it was, or, refused before
            # Tcl ran (a file name eval_file has no Tcl text for), as itself.
            message = describe_error(error)[0]
            if crossed_tcl(error) is None:
                raise TclError(message, errorinfo=message) from error
            raise TclError(message, self.interp.eval("set ::errorCode"),
                           self.interp.eval("set ::errorInfo")) from error
        finally:
            with self.lock:
                self.running = False
            ctypes.pythonapi.PyErr_CheckSignals()   # the handler of a Ctrl-C that cancelled
            self.interrupted, self.canceled = self.canceled, False


def names(interp, kind, text):
    """Commands or variables (`kind`), and namespaces, that start with `text`,
    each as a word that Tcl reads back as that name (see as_word)."""
    qualified = text.startswith("::")
    pattern = ("" if qualified else "::") + re.sub(r"([*?\[\]\\])", r"\\\1", text) + "*"
    namespace = pattern.rpartition("::")[0] or "::"
    found = interp.call("info", kind, pattern, result=list)
    try:
        found += [child + "::" for child in
                  interp.call("namespace", "children", namespace, pattern, result=list)]
    except TclError:         # no such namespace
        pass
    if not qualified:
        found = [name.removeprefix("::") for name in found]
    words = (as_word(name, kind) for name in set(found) if name.startswith(text))
    return sorted(word for word in words if word is not None)


# What a command word must escape, and how ($, ; and the like by a backslash).
COMMAND_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\v": "\\v", "\f": "\\f",
                   **{c: "\\" + c for c in " ;$[]{}\"\\"}}
# A variable name that $name reads whole: letters, digits, _ and :: (Tcl's rule).
BARE_VARIABLE = re.compile(r"(?:[A-Za-z0-9_]|::+)*")


def as_word(name, kind):
    """The name as typed after the prompt: a command's with its special
    characters escaped (`tally\\ up`, which stays one word as more is typed
    after a namespace), a variable's in braces where $name would not read
    it whole (`{my var}`, for `${my var}`; a namespace's brace left open for
    the rest of the name), or None for a variable ${...} cannot name."""
    if kind == "commands":
        return "".join(COMMAND_ESCAPES.get(c, c) for c in name)
    if BARE_VARIABLE.fullmatch(name):
        return name
    if "}" in name:
        return None
    return "{" + name + ("" if name.endswith("::") else "}")


# The subcommands of an ensemble command (py, string, dict, ...), or none.
SUBCOMMANDS = """{name} {
    if {![namespace ensemble exists $name]} { return }
    set config [namespace ensemble configure $name]
    set subcommands [dict get $config -subcommands]
    if {$subcommands eq ""} { set subcommands [dict keys [dict get $config -map]] }
    if {$subcommands eq ""} {
        set ns [dict get $config -namespace]
        foreach pattern [namespace eval $ns {namespace export}] {
            foreach command [info commands ${ns}::$pattern] {
                lappend subcommands [namespace tail $command]
            }
        }
    }
    return $subcommands
}"""


def completions(interp, before, text):
    """What `text` may become, given the line `before` it."""
    if before.endswith("$"):
        return names(interp, "vars", text)
    words = re.split(r"[\[;\n]", before)[-1].split()
    if not words:
        return names(interp, "commands", text)
    if len(words) == 1:
        try:
            subcommands = interp.call("apply", SUBCOMMANDS, words[0], result=list)
        except TclError:
            return []
        return sorted(set(name for name in subcommands if name.startswith(text)))
    return []


def setup_readline(interp):
    try:
        import readline
    except ImportError:      # no line editing; everything else still works
        return
    readline.set_completer_delims(" \t\n[{;\"$")
    matches = []

    def complete(text, state):
        if state == 0:
            before = readline.get_line_buffer()[:readline.get_begidx()]
            matches[:] = completions(interp, before, text)
        return matches[state] if state < len(matches) else None

    readline.set_completer(complete)
    readline.parse_and_bind("tab: complete")
    try:
        readline.read_history_file(HISTORY)
    except OSError:
        pass

    def write_history():
        try:
            readline.write_history_file(HISTORY)
        except OSError:     # no home, or not writable: as Python's own prompt
            pass

    atexit.register(write_history)


def banner(interp):
    facts = interp.call("tclamp::info")
    info = {key: interp.call("dict", "get", facts, key) for key in
            ("tclamp_version", "tcl_version", "python_version", "torch_version",
             "cuda_device_count")}
    devices = int(info["cuda_device_count"])
    cuda = f"CUDA: {devices} device{'s' * (devices != 1)}" if devices else "no CUDA"
    return (f"tclamp {info['tclamp_version']} (Tcl {info['tcl_version']}, "
            f"Python {info['python_version']}, torch {info['torch_version']}, {cuda}); "
            "exit or Ctrl-D to leave")


def report(message, interp=None):
    """Prints to stderr, as tclsh does, and nowhere when it is closed
    (sys.stderr is then None, and print would write to stdout).  Text that
    Python's stderr cannot encode (a lone surrogate, which Python would
    write as the six characters of its escape, \\ud800) goes out as tclsh
    writes an error, through `interp`'s stderr: Tcl 8.6 writes the
    surrogate's three bytes, Tcl 9 (whose stderr replaces what it cannot
    encode) U+FFFD."""
    if sys.stderr is None:
        return
    if interp is not None:
        try:
            message.encode(sys.stderr.encoding or "utf-8")
        except UnicodeEncodeError:
            sys.stderr.flush()
            try:
                interp.call("chan", "puts", "stderr", message)
                return
            except TclError:
                pass
        except LookupError:
            pass
    print(message, file=sys.stderr)


def source(evaluator, path, encoding=None):
    """Runs a file as tclsh runs its script; an error prints errorInfo as
    tclsh prints it, Ctrl-C `interrupted`.  True if it ran."""
    return run_read(evaluator, path, True, file=True, encoding=encoding) is not None


def runner():
    """The tclamp program that is running, as an absolute path, or None:
    [info nameofexecutable], which tcltest runs test files with."""
    argv0 = Path(sys.argv[0])
    candidates = [argv0] if argv0.name.startswith("tclamp") else []
    candidates.append(Path(sys.executable).parent / "tclamp")
    found = shutil.which("tclamp")
    if found:
        candidates.append(Path(found))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate.absolute()
    return None


def name_executable(program):
    """[info nameofexecutable] becomes `program` (tclsh's is its own path)."""
    if program is not None:
        ctypes.CDLL(None).Tcl_FindExecutable(os.fsencode(program))


# Reads the next line of Tcl's stdin into ::tclamp::prompt::line: its
# length, or -1 at the end.
READ_LINE = "gets stdin ::tclamp::prompt::line"


def read_commands(interp, evaluator):
    """tclsh's loop for a stdin that is not a terminal: each complete
    command runs as soon as its last line is read; an error prints its
    message and the next command runs; the status is exit's code, else 0.
    Ctrl-C ends them all, as it ends tclsh and a script (the status then
    as run_script's)."""
    interp.call("set", "tcl_interactive", 0)
    buffer = ""
    while evaluator.exit_code is None and not evaluator.interrupted:
        try:
            length = read_line(interp, evaluator)
        except TclError:
            # Tcl 9 fails a read of bytes that stdin's encoding refuses:
            # tclsh takes an error reading stdin as the end of its input.
            length = "-1"
        if length == "-1":
            if buffer:
                run_read(evaluator, buffer)
            break
        buffer += interp.call("set", "::tclamp::prompt::line") + "\n"
        if interp.call("info", "complete", buffer) == "1":
            script, buffer = buffer, ""
            run_read(evaluator, script)
    if evaluator.exit_code is None and evaluator.interrupted:
        return 128 + signal.SIGINT
    return evaluator.exit_code or 0


def read_line(interp, evaluator):
    """READ_LINE, during which Ctrl-C ends the program as it ends a tclsh
    waiting for input (killed by the signal), with everything written out."""
    for stream in sys.stdout, sys.stderr:
        if stream is not None:      # None: its fd was closed
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return interp.eval(READ_LINE)
    finally:
        signal.signal(signal.SIGINT, evaluator.on_sigint)


def run_read(evaluator, script, traceback=False, **file):
    """Runs one command as the prompt does (or a file, as Evaluator.run's
    `file` asks), its error to stderr (with errorInfo when asked); returns
    its result, or None after an error or Ctrl-C."""
    try:
        return evaluator.run(script, **file)
    except KeyboardInterrupt:
        evaluator.interrupted = True    # also when Ctrl-C came as it ended
        report("interrupted")
    except TclError as error:
        if evaluator.interrupted:
            report("interrupted")
        elif evaluator.exit_code is None:
            report(error.errorinfo if traceback else error.result, evaluator.interp)
    return None


def set_argv(interp, argv0, args):
    """$argv0, $argv and $argc, as tclsh sets them (each word as Tcl reads
    its bytes: bridge.tcl_name)."""
    argv = [tcl_name(interp, word) for word in [argv0, *args]]
    interp.call("set", "argv0", argv[0])
    interp.call("set", "argv", argv[1:])
    interp.call("set", "argc", len(args))


def interact(interp, traceback, args=()):
    evaluator = Evaluator(interp)
    # As tclsh sets them without a script: argv0 the program, and no
    # arguments but those tclsh would pass there (`-encoding ?name?`).
    set_argv(interp, str(runner() or "tclamp"), list(args))
    # The banner names torch: at the prompt, and for commands piped to it
    # (not in scripts), it is there.
    import torch
    sys.modules["__main__"].__dict__.setdefault("torch", torch)
    if not os.isatty(0):
        return read_commands(interp, evaluator)
    interp.call("set", "tcl_interactive", 1)
    rc_file = tcl_name(interp, RC_FILE)
    interp.call("set", "tcl_rcFileName", rc_file)
    print(banner(interp))
    setup_readline(interp)
    if os.path.isfile(RC_FILE):
        source(evaluator, rc_file)
    buffer = ""
    while evaluator.exit_code is None:
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
        result = run_read(evaluator, script, traceback)
        if result:
            show_result(interp, result)
    return evaluator.exit_code


def show_result(interp, result):
    """Prints a command's result at the prompt.  Text that Python's stdout
    cannot encode (a lone surrogate) goes out as tclsh writes a result,
    through Tcl's stdout: Tcl 8.6 writes a surrogate's bytes, Tcl 9 writes
    up to it and refuses it (its error is shown)."""
    try:
        print(result)
    except UnicodeEncodeError:
        try:
            interp.call("chan", "puts", "stdout", result)
        except TclError as error:
            report(error.result)


def run_script(interp, script, args, encoding=None):
    """tclsh's script mode (the file read in `encoding`, else Tcl's
    default); the exit status is exit's code, 1 after an error, and after
    Ctrl-C what a shell reports for a process it stopped."""
    evaluator = Evaluator(interp)
    interp.call("set", "tcl_interactive", 0)
    set_argv(interp, script, args)
    # The file tclsh would read: the one $argv0 names (eval_file refuses
    # Python's name for a byte that is no UTF-8, a lone surrogate).
    ran = source(evaluator, interp.call("set", "argv0"), encoding)
    if evaluator.exit_code is not None:
        return evaluator.exit_code
    if evaluator.interrupted:
        return 128 + signal.SIGINT
    return 0 if ran else 1
