"""pytest plugin: runs tcltest files in a real tclsh, one pytest item per
tcltest case (docs/pytest.md).

Installed with tclamp (entry point `pytest11`; `-p no:tclamp` turns it off).
The files it takes are those matching the ini option `tcltest_files`
(default `*.test`).  Collection sources each file in tclsh with
tcltest::test replaced by a recorder, so no case's setup, body or cleanup
runs.  The first selected case of a file runs all the file's selected cases
in one tclsh; the others are skipped there through tcltest's -skip.  tclamp
is findable there (auto_path) and Python starts from this pytest's
interpreter (TCLAMP_PYTHON); TCLSH names another tclsh.  Under pytest-xdist
all of a file's cases go to one worker.
"""
import codecs
import contextlib
import fcntl
import fnmatch
import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePath

import pytest

try:    # pytest's own report pieces: --tb=line gets one line, xdist carries them
    from _pytest._code.code import (ReprEntryNative, ReprExceptionInfo, ReprFileLocation,
                                     ReprTraceback)
except ImportError:     # a pytest that moved them: the report as plain text
    ReprExceptionInfo = None

from . import PACKAGE_DIR

DRIVER = PACKAGE_DIR / "tcltest_driver.tcl"
SUMMARY = re.compile(r"^.*:\tTotal\t(\d+)\tPassed\t(\d+)\tSkipped\t(\d+)\tFailed\t(\d+)$", re.M)
COUNTS = ("Total", "Passed", "Skipped", "Failed")
TAIL = 4000  # characters of stray output kept in a file-level failure
ELSEWHERE = ("the file sent tcltest's output elsewhere (tcltest::configure -outfile, "
             "or tcltest::outputChannel)")
HALF_CHARACTER = re.compile("[\ud800-\udfff]")
# A file's scratch directory, in the temporary directory.  An older tclamp's,
# tclamp-tcltest-<random>, held no lock: the sweep leaves those alone.
SCRATCH = "tclamp-tcltest-locked-"


def shown(text):
    """Text with each half of a character (a lone surrogate, which Tcl 8.6
    strings can hold) written as its escape \\udXXX: no terminal, file or
    environment variable takes one as it is."""
    return HALF_CHARACTER.sub(lambda half: f"\\u{ord(half[0]):04x}", text)


def tcl_output_error(error):
    """Decoding Tcl's output: half a character, which Tcl 8.6 writes as the
    three bytes ED A0-BF xx, is shown as its escape; any other bad byte as
    U+FFFD."""
    if isinstance(error, UnicodeDecodeError):
        data, start = error.object, error.start
        half = data[start:start + 3]
        if len(half) == 3 and half[0] == 0xED and 0xA0 <= half[1] <= 0xBF \
                and 0x80 <= half[2] <= 0xBF:
            return shown(half.decode("utf-8", "surrogatepass")), start + 3
        return "\ufffd", start + 1
    raise error


codecs.register_error("tclamp-tcl-output", tcl_output_error)


def killed_with_parent():
    """For a child's preexec_fn on Linux: the kernel kills the child
    (SIGKILL) when the thread that started it dies, so that a tclsh whose
    pytest is killed (SIGTERM, SIGKILL) does not hang on forever.  Reading
    EOF on a pipe from pytest would need tclsh's event loop, which a case
    that hangs (`after 600000`, `exec sleep`) never enters.  None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    parent = os.getpid()

    def preexec():
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # pytest died before that
            os._exit(1)
    return preexec


def locked(fd):
    """Takes the lock on an open directory unless another process holds it
    or the file system has no locks (Lustre without -o flock: ENOSYS), where
    a leftover cannot be told from a directory in use and so stays."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def scratch_directory():
    """A file's scratch directory, locked while its pytest runs: the lock
    goes with the process however it ends, in any pid namespace that shares
    the directory, so the next pytest can tell a leftover from one in use."""
    path = tempfile.mkdtemp(prefix=SCRATCH)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            locked(fd)
            yield Path(path)
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(path, ignore_errors=True)


@functools.lru_cache(maxsize=None)  # once per pytest process
def remove_scratch_left_behind():
    """Removes the scratch directories that no pytest holds: a pytest killed
    with SIGKILL cannot remove its own.  Only this user's, only real
    directories (a symlink of that name is neither followed nor removed),
    and none made in the last minute: one is locked just after it is made."""
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(SCRATCH):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            made = os.fstat(fd)
            if made.st_uid == os.getuid() and time.time() - made.st_mtime > 60 and locked(fd):
                shutil.rmtree(entry.path, ignore_errors=True)
        finally:
            os.close(fd)


def pytest_addoption(parser):
    parser.addini("tcltest_files", type="args", default=["*.test"],
                  help="glob patterns of the tcltest files that tclamp's plugin runs "
                       "(default: *.test)")


def matches(parts, pattern):
    """Whether path components match pattern components, each as fnmatch
    does, with a `**` component standing for any number of them (none
    included), as in glob(recursive=True).  Each (component, pattern
    component) pair is decided once: tried afresh, repeated `**` took work
    exponential in their count."""
    @functools.lru_cache(maxsize=None)
    def from_(part, place):
        if place == len(pattern):
            return part == len(parts)
        if pattern[place] == "**":
            return from_(part, place + 1) or (part < len(parts) and from_(part + 1, place))
        return part < len(parts) and fnmatch.fnmatchcase(parts[part], pattern[place]) \
            and from_(part + 1, place + 1)
    return from_(0, 0)


def takes(config, path):
    """Whether the plugin runs the file at path (tcltest_files): a pattern
    matches the end of the path, as PurePath.match does, or all of it when
    it is absolute; `**` is recursive."""
    for pattern in config.getini("tcltest_files"):
        pattern = PurePath(pattern)
        starts = [0] if pattern.is_absolute() else range(len(path.parts))
        if any(matches(path.parts[start:], pattern.parts) for start in starts):
            return True
    return False


def pytest_collect_file(file_path, parent):
    if takes(parent.config, file_path):
        return TclTestFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist: all of a tcltest file's cases go to one worker, which
    runs them in one tclsh.  A worker's tclsh runs every selected case of
    the file, so a file shared between workers would run each case in each
    of them.  --dist loadfile and loadscope keep a file whole already, and
    each runs everything everywhere; load, worksteal and loadgroup become
    loadgroup with each tcltest file one group (loadfile, with a warning,
    where xdist lacks what that overrides)."""
    dist = config.getvalue("dist")
    if dist not in ("load", "worksteal", "loadgroup"):
        return None
    try:  # only xdist calls this hook
        from xdist.scheduler import LoadGroupScheduling
    except ImportError:
        LoadGroupScheduling = None
    if not hasattr(LoadGroupScheduling, "_split_scope"):
        # An xdist that renamed or moved the private method overridden below
        # would never call the override, and would split files.  Its public
        # --dist loadfile keeps every file whole instead (xdist's own hook,
        # called after this one, reads the mode).  An xdist_group mark on
        # each case would not do: load and worksteal ignore it, and
        # loadgroup writes it into the case's node id.
        also = ", and xdist_group marks are not followed" if dist == "loadgroup" else ""
        warnings.warn(pytest.PytestWarning(
            f"tclamp: --dist {dist} runs as --dist loadfile: this pytest-xdist lacks "
            "xdist.scheduler.LoadGroupScheduling._split_scope, which tclamp uses to keep "
            "each tcltest file on one worker; so each Python test file goes whole to one "
            f"worker too{also}"))
        config.option.dist = "loadfile"
        return None

    class TclTestFilesWhole(LoadGroupScheduling):
        def _split_scope(self, nodeid):
            # A node id's path is relative to rootdir; collection matched the
            # file's absolute path.
            file = nodeid.split("::", 1)[0]
            if takes(config, Path(os.path.normpath(config.rootpath / file))):
                return file
            return super()._split_scope(nodeid)

    return TclTestFilesWhole(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if not isinstance(item, TclTestCase):
        return
    report = outcome.get_result()
    # A case's time is what tclsh measured around it; starting tclsh and
    # sourcing the file belong to no case.
    if call.when == "call":
        report.duration = item.seconds
    elif report.passed:
        report.duration = 0.0
    # tcltest's own text, not a traceback into this plugin; a skip points
    # at the case, not at this plugin.
    if call.excinfo and isinstance(call.excinfo.value, TclTestFailure):
        text = shown(str(call.excinfo.value))
        if ReprExceptionInfo is None:
            report.longrepr = text
            return
        # printed as it is; a failing case's crash line alone for --tb=line
        # (-r shows it after " - ")
        entries = [ReprEntryNative([text + "\n"])]
        if call.when == "call" and item.config.getoption("tbstyle", None) == "line":
            entries = []
        report.longrepr = ReprExceptionInfo(
            reprtraceback=ReprTraceback(entries, None, "native"),
            reprcrash=ReprFileLocation(str(item.path), item.line or 0, crash_line(text)))
    elif report.skipped and isinstance(report.longrepr, tuple):
        report.longrepr = (str(item.path), item.line, report.longrepr[2])


def crash_line(text):
    """A failure's one line: its text's first, and after tcltest's
    "==== NAME DESCRIPTION FAILED" what failed (the report's first "----"
    line, with the line under it when it ends in a colon)."""
    lines = text.splitlines() or [""]
    if lines[0].startswith("==== "):
        # the header spans lines when the name or description does
        end = next((number for number, line in enumerate(lines)
                    if line.endswith(" FAILED") or line.startswith("---- ")), 0)
        if not lines[end].endswith(" FAILED"):
            end = 0
        head = " ".join([lines[0], *(line.strip() for line in lines[1:end + 1])])
        for number, line in enumerate(lines):
            if line.startswith("---- "):
                what = line[5:]
                if what.endswith(":") and number + 1 < len(lines):
                    what += " " + lines[number + 1]
                return f"{head}: {what}"
    return lines[0]


def marked_not_to_run(item):
    """Whether pytest's marks keep the item from running (skip, a true
    skipif, xfail with run=False), as pytest decides when it sets the item
    up: its case must not run in the file's tclsh either."""
    try:
        from _pytest.skipping import evaluate_skip_marks, evaluate_xfail_marks
    except ImportError:  # another pytest: plain skip marks at least
        return any(True for _ in item.iter_markers("skip"))
    try:
        if evaluate_skip_marks(item) is not None:
            return True
        xfailed = evaluate_xfail_marks(item)
    except (Exception, pytest.fail.Exception):  # a bad condition: pytest fails the item
        return True
    return bool(xfailed and not xfailed.run and not item.config.option.runxfail)


class TclTestFailure(Exception):
    """A case or a whole tcltest file failed; the message says how."""


# What a node id writes as an escape: a backslash (so that an escape reads
# one way only), what would break the id's line or the terminal (control
# characters, U+2028 and U+2029, half characters), what junit's XML cannot
# hold (U+FFFE and U+FFFF, which pytest writes there as the text #xFFFF),
# and a space between two colons (the id writes `::` as `: :`).
ESCAPED_IN_ID = re.compile(
    r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]|(?<=:) (?=:)")
SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def id_text(name):
    """A tcltest name as its node id writes it: on one line, with no `::`
    (pytest splits ids there: a colon that follows a colon gets a space
    before it), and no two names alike.  Escapes are \\\\, \\n, \\r, \\t,
    \\xXX and \\uXXXX (as shown() writes a half character)."""
    def escape(match):
        char = match[0]
        if char in SHORT_ESCAPES:
            return SHORT_ESCAPES[char]
        return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    return re.sub("(?<=:)(?=:)", " ", ESCAPED_IN_ID.sub(escape, name))


def item_names(cases):
    """pytest names for (name, occurrence) pairs: the name as id_text writes
    it, with [N] on the Nth case of a repeated name, and [1] on the first
    when the name holds a `[` or ends in `]`, so that [N] always gives the
    number (`x[2][1]` is the case named x[2], `x[2]` the second case named
    x, whatever their order), and an id with a `[` ends in `]`: pytest
    takes what follows the first `[` as parameters and writes them back
    closed (the short summary, junit), so x[a would come back as x[a].  As
    id_text gives each name its own text, each pair gets its own pytest
    name."""
    names = []
    for name, occurrence in cases:
        base = id_text(name)
        numbered = occurrence > 1 or "[" in base or base.endswith("]")
        names.append(f"{base}[{occurrence}]" if numbered else base)
    return names


def split_output(text, nonce):
    """(text of each case by index, text outside any case) from a stream
    with the driver's start/end lines."""
    cases, outside, current, position = {}, [], None, 0
    for marker in re.finditer(rf"\n{nonce} (start|end) (\d+)\n", text):
        chunk = text[position:marker.start()]
        if current is None:
            outside.append(chunk)
        else:
            cases[current] = cases.get(current, "") + chunk
        current = int(marker[2]) if marker[1] == "start" else None
        position = marker.end()
    if current is None:
        outside.append(text[position:])
    else:
        cases[current] = cases.get(current, "") + text[position:]
    return cases, "".join(outside)


def interrupted(mode, path, records):
    """Where a file's tclsh was when pytest was interrupted, from what the
    driver had recorded."""
    running = None
    try:
        lines = records.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        if record["event"] == "start":
            running = record["name"]
        elif record["event"] in ("result", "exit"):
            running = None
    if mode == "collect":
        where = "collected the file (its top-level code)"
    elif running is None:
        where = "ran the file's top-level code, outside any case"
    else:
        where = f"ran case {running}"
    return shown(f"{path.name}: interrupted while tclsh {where}")


def exit_status(returncode):
    if returncode < 0:
        return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


@dataclass
class CaseRun:
    name: str
    occurrence: int
    outcome: str = "unfinished"  # or passed, failed, skipped, error, unknown
    reason: str = ""
    constraints: str = ""
    seconds: float = 0.0
    tcltest: str = ""
    change: tuple = (1, 0, 0, 0)  # what it added to tcltest's Total Passed Skipped Failed
    stdout: str = ""
    stderr: str = ""


class DriverRun:
    """What one run of the driver on one file recorded."""

    def __init__(self, mode, path, cwd, selection=()):
        nonce = secrets.token_hex(8)
        env = dict(os.environ, PYTHONUNBUFFERED="1",
                   TCLAMP_PYTHON=os.environ.get("TCLAMP_PYTHON", sys.executable))
        remove_scratch_left_behind()
        with scratch_directory() as scratch:
            records = scratch / "records"
            # each name as the driver's records write it (JSON, ASCII)
            (scratch / "selection").write_text("".join(
                f"{occurrence} {json.dumps(name)[1:-1]}\n" for name, occurrence in selection),
                encoding="ascii")
            # Files, not pipes: a process that a case leaves running keeps
            # tclsh's stdout and stderr open, and the run must end with tclsh
            # (as `tclsh FILE` does), not with that process.
            with open(scratch / "selection", "rb") as stdin, \
                    open(scratch / "stdout", "wb") as stdout, \
                    open(scratch / "stderr", "wb") as stderr:
                try:
                    self.returncode = subprocess.run(
                        [os.environ.get("TCLSH", "tclsh"), str(DRIVER), mode, str(path),
                         str(records), nonce],
                        stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd,
                        preexec_fn=killed_with_parent()).returncode
                except KeyboardInterrupt:
                    # Ctrl-C on a file that hangs: say where (tclsh is gone)
                    raise KeyboardInterrupt(interrupted(mode, path, records)) from None
                except pytest.fail.Exception as failed:
                    # a timeout's pytest.fail (pytest-timeout): the same
                    raise pytest.fail.Exception(
                        f"{failed.msg}\n{interrupted(mode, path, records)}",
                        pytrace=False) from None
            # newlines as subprocess's text mode gave them
            output = [(scratch / name).read_text(encoding="utf-8", errors="tclamp-tcl-output")
                      for name in ("stdout", "stderr")]
            lines = records.read_text(encoding="utf-8").splitlines() if records.exists() else []
        self.collected = []      # (name, occurrence, line) in collect mode
        self.cases = {}          # (name, occurrence) -> CaseRun, in run mode
        self.deselected = []     # (name, occurrence) of cases skipped as not selected
        self.exit = self.error = None
        self.ended = self.cleaned_up = False
        tcltest = []
        by_index = {}
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # cut short by a crash
                break
            event = record["event"]
            if event == "case":
                self.collected.append((record["name"], int(record["occurrence"]),
                                       int(record["line"]) if record["line"] else None))
            elif event == "start":
                case = CaseRun(record["name"], int(record["occurrence"]))
                self.cases[(case.name, case.occurrence)] = by_index[int(record["case"])] = case
            elif event == "result":
                case = by_index[int(record["case"])]
                case.outcome, case.reason = record["outcome"], record["reason"]
                case.constraints, case.tcltest = record["constraints"], record["tcltest"]
                case.seconds = int(record["usec"]) / 1e6
                case.change = tuple(map(int, record["change"].split()))
            elif event == "deselected":
                self.deselected.append((record["name"], int(record["occurrence"])))
            elif event == "tcltest":
                tcltest.append(record["text"])
            elif event == "exit":
                self.exit = record
                if record["case"]:
                    case = by_index[int(record["case"])]
                    case.tcltest, record["case_name"] = record["tcltest"], case.name
            elif event == "error":
                self.error = record
            elif event == "end":
                self.ended = True
            elif event == "cleanup":
                self.cleaned_up = True
        self.tcltest = "".join(tcltest)
        stdout, self.stdout = split_output(output[0], nonce)
        stderr, self.stderr = split_output(output[1], nonce)
        for index, case in by_index.items():
            case.stdout, case.stderr = stdout.get(index, ""), stderr.get(index, "")

    def stray_output(self):
        """The output outside any case, for a file-level report."""
        parts = []
        for title, text in (("tcltest's output outside any case", self.tcltest),
                            ("stdout outside any case", self.stdout),
                            ("stderr outside any case", self.stderr)):
            if text.strip():
                parts.append(f"---- {title}:\n{text[-TAIL:].rstrip()}")
        return parts

    def collect_problem(self):
        """Why the file could not be collected, or None."""
        if self.error:
            why = (f"error outside any test case while collecting: {self.error['message']}\n"
                   "(collection runs the file's top-level code, not its cases)\n"
                   + self.error["errorinfo"])
        elif self.exit and self.exit["cleaned_up"] != "1":
            why = (f"the file called exit {self.exit['status']} while collecting, "
                   "before tcltest::cleanupTests; cases after it would never run")
        elif not (self.ended or self.exit):
            why = f"tclsh {exit_status(self.returncode)} before the end of the file"
        elif self.returncode != 0:
            why = f"tclsh {exit_status(self.returncode)} while collecting"
        else:
            return None
        return "\n".join([why, *self.stray_output()])

    def problems(self, collected):
        """What is wrong with the file as a whole after a run, most telling
        first: a list of texts, empty when the file ran to its end and
        tcltest's own count agrees with the cases' results."""
        problems = []
        unfinished = [c.name for c in self.cases.values() if c.outcome == "unfinished"]
        if self.error and self.error.get("case"):
            problems.append(f"case {self.error['case']}: tcltest::test raised an error, "
                            f"which stopped the file: {self.error['message']}\n"
                            + self.error["errorinfo"])
        elif self.error:
            problems.append(f"error outside any test case: {self.error['message']}\n"
                            + self.error["errorinfo"])
        if self.exit and self.exit["case"]:
            problems.append(f"case {self.exit['case_name']} called exit {self.exit['status']}")
        elif self.exit and self.exit["cleaned_up"] != "1":
            problems.append(f"the file called exit {self.exit['status']} "
                            "before tcltest::cleanupTests")
        elif unfinished:
            problems.append(f"case {unfinished[0]} never finished")
        elif not (self.ended or self.exit or self.error):
            problems.append("tclsh stopped before the end of the file")
        for name, occurrence in self.deselected:
            if (name, occurrence) not in collected:
                problems.append(f"case {name} (call {occurrence} of that name) appeared "
                                "when the file ran but not when it was collected: "
                                "it did not run")

        counts = [len(self.deselected), 0, len(self.deselected), 0]
        for case in self.cases.values():
            if case.outcome == "error":
                # tcltest::test raised it: what tcltest counted (nothing,
                # for a bad option)
                counts = [n + change for n, change in zip(counts, case.change)]
                continue
            counts[0] += 1
            if case.outcome in ("passed", "skipped", "failed"):
                counts[COUNTS.index(case.outcome.capitalize())] += 1
        summaries = [tuple(map(int, m.groups())) for m in SUMMARY.finditer(self.tcltest)]
        tcltest_counts = [sum(column) for column in zip(*summaries)]
        if not summaries and self.cleaned_up:
            problems.append("tcltest printed no Total/Passed/Skipped/Failed line where the "
                            "plugin reads it, though the file called tcltest::cleanupTests: "
                            f"{ELSEWHERE}")
        elif not summaries:
            problems.append("tcltest printed no Total/Passed/Skipped/Failed line: "
                            "the file did not reach tcltest::cleanupTests")
        elif tcltest_counts != counts:
            problems.append("tcltest's count disagrees with the cases' results")
        if self.returncode != 0:
            problems.append(f"tclsh {exit_status(self.returncode)}")
        if not problems:
            return []
        shown = "  ".join(f"{name} {n}" for name, n in zip(COUNTS, tcltest_counts))
        problems.append(f"tcltest counted:         {shown or 'nothing'}")
        problems.append("the cases' results give: "
                        + "  ".join(f"{name} {n}" for name, n in zip(COUNTS, counts))
                        + f"  ({len(self.deselected)} skipped as not selected)")
        return problems + self.stray_output()


class TclTestFile(pytest.File):
    """A tcltest file: its cases are the items; the file as a whole fails (as
    an error at teardown of its last case) when tcltest's count and the
    cases' results disagree, or it errs outside a case, or it exits early."""

    run = None

    @property
    def start_dir(self):
        """The directory pytest was started in, which is the file's working
        directory as it is for `tclsh FILE`, wherever a test or fixture
        has moved pytest's own since."""
        return self.config.invocation_params.dir

    def collect(self):
        try:
            collected = DriverRun("collect", self.path, self.start_dir)
        except OSError as error:
            raise self.CollectError(f"cannot start tclsh: {error}") from None
        problem = collected.collect_problem()
        if problem:
            raise self.CollectError(shown(f"{self.path.name}: {problem}"))
        pairs = [(name, occurrence) for name, occurrence, _ in collected.collected]
        self.collected_cases = set(pairs)
        self.ran = {}  # (name, occurrence) -> the DriverRun that ran it
        for (name, occurrence, line), item_name in zip(collected.collected, item_names(pairs)):
            # The id given as text is parsed the way pytest parses ids it reads
            # back (--lf), which splits off a [N] suffix as parameters.
            yield TclTestCase.from_parent(self, name=item_name, nodeid=f"{self.nodeid}::{item_name}",
                                          tcl_name=name, occurrence=occurrence, line=line)

    def setup(self):
        if self.run is not None:
            return
        # --setup-only and --setup-plan (which implies it) run no test: no
        # case's setup, body or cleanup either.
        if getattr(self.config.option, "setuponly", False):
            return
        # The file is set up again when other files' cases come between its
        # own (node ids given as a.test::x b.test::y a.test::z): its cases
        # that the first tclsh ran keep their results, and run no more.
        selected = [(item.tcl_name, item.occurrence) for item in self.session.items
                    if item.parent is self and (item.tcl_name, item.occurrence) not in self.ran
                    and not marked_not_to_run(item)]
        if not selected:
            return
        try:
            self.run = DriverRun("run", self.path, self.start_dir, selected)
        except OSError as error:
            raise TclTestFailure(f"cannot start tclsh: {error}")
        self.ran.update(dict.fromkeys(selected, self.run))

    def teardown(self):
        run, self.run = self.run, None
        if run is None:
            return
        problems = run.problems(self.collected_cases)
        if problems:  # they show what the file wrote outside its cases
            raise TclTestFailure("\n".join([f"{self.path.name}: {problems[0]}", *problems[1:]]))
        # What the file wrote outside its cases (its top-level code, say),
        # which `tclsh FILE` shows too: the output of this teardown.
        sys.stdout.write(run.stdout)
        sys.stderr.write(run.stderr)


class TclTestCase(pytest.Item):
    def __init__(self, *, tcl_name, occurrence, line, **kwargs):
        super().__init__(**kwargs)
        self.tcl_name, self.occurrence, self.line = tcl_name, occurrence, line
        self.seconds = 0.0

    def runtest(self):
        run = self.parent.ran[(self.tcl_name, self.occurrence)]
        case = run.cases.get((self.tcl_name, self.occurrence))
        if case is None:
            if run.ended:
                raise TclTestFailure("not run: the file did not define this case when it ran")
            raise TclTestFailure("not run: the file stopped before this case (the file's "
                                 "failure is reported at the end of its last case)")
        self.seconds = case.seconds
        sys.stdout.write(case.stdout)
        sys.stderr.write(case.stderr)
        if case.outcome in ("passed", "skipped") and case.tcltest.strip():
            # What tcltest printed for a case that did not fail (the file's
            # -verbose lines, a failing test nested in its body), as under
            # `tclsh FILE`; a failure's is its report.
            self.add_report_section("call", "tcltest", shown(case.tcltest))
        if case.outcome == "passed":
            return
        if case.outcome == "skipped":
            pytest.skip(shown(skip_reason(case)))
        if case.outcome == "failed":
            raise TclTestFailure(case.tcltest.strip("\n") or "tcltest counted this case as "
                                 f"failed and wrote no report where the plugin reads it: {ELSEWHERE}")
        if case.outcome == "error":
            raise TclTestFailure(f"tcltest::test raised an error:\n{case.reason}")
        if case.outcome == "unfinished":
            if run.exit and run.exit["case"]:
                why = f"the case called exit {run.exit['status']}"
            else:
                why = f"tclsh {exit_status(run.returncode)} inside the case"
            raise TclTestFailure("\n".join(filter(None, [why, case.tcltest.strip("\n")])))
        raise TclTestFailure(case.reason)

    def reportinfo(self):
        # pytest -v turns every "." of a name that ends the node id into
        # "::" (as for Class.method); a name written otherwise is left alone.
        return self.path, None if self.line is None else self.line - 1, \
            f"{self.path.name}: {self.name}"


def skip_reason(case):
    """pytest's skip reason for a case tcltest skipped."""
    if not case.reason:
        return "skipped by tcltest's -match/-skip"
    if case.reason == case.constraints.strip() or case.reason in case.constraints.split():
        return f"tcltest constraint not met: {case.reason}"
    return f"skipped by tcltest: {case.reason}"
