"""tclamp's pytest plugin on user-style tcltest files (tests/plugin_cases/,
kept out of the project's own collection): every case its own item, nothing
reported green that tclsh does not report green, and pytest's habits kept.
Each test runs pytest (or tclsh) in a scratch directory, as a user would."""
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

import pytest

from conftest import ROOT, TCL9, TCLSH, sigint_as_at_a_terminal, tcl_env, torch_sees_gpu
from tclamp.pytest_plugin import id_text

CASES = ROOT / "tests" / "plugin_cases"
SHAPES_IDS = ["plain-1.1", "with space", "twice", "twice[2]", "setup-fails", "cleanup-fails",
              "needs-gpu", "talks", "waits", "tcl: :ns", "creates-file"]


def copy_cases(directory, *names):
    for name in names:
        shutil.copy(CASES / name, directory / name)


def run_pytest(directory, *args, cache=False, env=None, start=("-m", "pytest")):
    """pytest in directory, with the plugin (and tclamp) of this checkout
    whichever checkout the environment has installed; start is what
    Python runs."""
    options = [] if cache else ["-p", "no:cacheprovider"]
    return subprocess.run([sys.executable, *start, *options, *args], cwd=directory,
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT / "src"),
                                   **(env or {})))


def collected_ids(directory, *args):
    """The node ids that `pytest --collect-only -q` lists, one a line."""
    listed = run_pytest(directory, "--collect-only", "-q", *args)
    return listed.stdout.split("\n\n")[0].splitlines()


def outcomes(result):
    """pytest's closing line as {word: count}, e.g. {"failed": 4, "passed": 6}."""
    last = result.stdout.strip().splitlines()[-1]
    return {("errors" if word.startswith("error") else word): int(count)
            for count, word in re.findall(
                r"(\d+) (passed|failed|skipped|deselected|xfailed|errors?)\b", last)}


def junit_cases(path):
    """(name, outcome) for each testcase of a junit file; outcome is
    "passed" or the tags of what it holds, e.g. "failure" or "failure+error"."""
    suite = ElementTree.parse(path).getroot().find("testsuite")
    return [(case.get("name"), "+".join(child.tag for child in case
                                        if child.tag in ("failure", "skipped", "error"))
             or "passed")
            for case in suite.iter("testcase")]


def tclsh_cases(directory, name, env=None):
    """(pytest name, outcome) for each case `tclsh NAME` reports, and the run:
    a name as the plugin's id_text writes it, and the Nth case of a repeated
    name name[N], as the plugin names it."""
    r = subprocess.run([TCLSH, name, "-verbose", "pass skip"], cwd=directory,
                       capture_output=True, text=True, timeout=300, env=env)
    cases, seen, in_failure = [], {}, False
    for line in r.stdout.splitlines():
        if m := re.fullmatch(r"\+\+\+\+ (.*) (PASSED|SKIPPED: .*)", line):
            cases.append((m[1], "passed" if m[2] == "PASSED" else "skipped"))
        elif m := re.fullmatch(r"==== (.*) FAILED", line):
            if in_failure:   # the line that closes tcltest's failure report
                cases.append((m[1], "failure"))
            in_failure = not in_failure
    named = []
    for case_name, outcome in cases:
        seen[case_name] = seen.get(case_name, 0) + 1
        pytest_name = id_text(case_name)
        if seen[case_name] > 1 or "[" in pytest_name or pytest_name.endswith("]"):
            pytest_name += f"[{seen[case_name]}]"
        named.append((pytest_name, outcome))
    return named, r


def section(text, title):
    """A pytest report section, from its ___ title ___ line to the next
    section, with each "--- Captured X call ---" line written [X]."""
    match = re.search(rf"^_+ {re.escape(title)} _+\n(.*?)(?=^_{{5,}} |^={{5,}} |^-+ generated)",
                      text, re.M | re.S)
    assert match, f"no section {title!r} in:\n{text}"
    return re.sub(r"^-+ Captured (\w+) call -+$", r"[\1]", match[1], flags=re.M)


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """One pytest run of shapes.test with -rA and a junit file."""
    directory = tmp_path_factory.mktemp("shapes")
    copy_cases(directory, "shapes.test")
    result = run_pytest(directory, "-rA", "--junitxml=junit.xml", "shapes.test")
    return directory, result


def test_every_case_is_reported_as_tclsh_reports_it(shapes, tmp_path):
    directory, result = shapes
    copy_cases(tmp_path, "shapes.test")
    expected, r = tclsh_cases(tmp_path, "shapes.test")
    assert "shapes.test:\tTotal\t11\tPassed\t6\tSkipped\t1\tFailed\t4" in r.stdout
    assert expected == [("plain-1.1", "passed"), ("with space", "failure"), ("twice", "passed"),
                        ("twice[2]", "failure"), ("setup-fails", "failure"),
                        ("cleanup-fails", "failure"), ("needs-gpu", "skipped"),
                        ("talks", "passed"), ("waits", "passed"), ("tcl: :ns", "passed"),
                        ("creates-file", "passed")]
    assert junit_cases(directory / "junit.xml") == expected
    assert outcomes(result) == {"failed": 4, "passed": 6, "skipped": 1}
    assert result.returncode == 1


def test_failures_show_tcltest_own_report(shapes):
    _, result = shapes
    assert section(result.stdout, "shapes.test: with space") == (
        "==== with space a failing case whose name has a space FAILED\n"
        "==== Contents of test case:\n\n    string toupper abc\n\n"
        "---- Result was:\nABC\n"
        "---- Result should have been (exact matching):\nabc\n"
        "==== with space FAILED\n")
    setup = section(result.stdout, "shapes.test: setup-fails")
    assert setup.startswith("==== setup-fails an error in -setup fails the case; its body "
                            "never runs FAILED\n==== Contents of test case:\n\n"
                            "    set ::body_ran 1\n\n---- Test setup failed:\nsetup broke\n")
    cleanup = section(result.stdout, "shapes.test: cleanup-fails")
    assert "---- Test cleanup failed:\ncleanup broke\n" in cleanup
    assert cleanup.endswith("==== cleanup-fails FAILED\n")
    assert "FAILED shapes.test::twice[2] - ==== twice the second case of a repeated name " \
           "fails FAILED" in result.stdout


def test_tb_line_shows_each_failure_in_one_whole_line(tmp_path):
    # Before, --tb=line printed each whole report, then its first 50
    # characters ("==== with space a failing case whose name has a sp").
    copy_cases(tmp_path, "shapes.test")
    r = run_pytest(tmp_path, "--tb=line", "shapes.test")
    lines = (CASES / "shapes.test").read_text().splitlines()
    where = {name: f"{tmp_path / 'shapes.test'}:{1 + lines.index(start)}:" for name, start in [
        ("with space", 'test "with space" {a failing case whose name has a space} -body {'),
        ("twice", "test twice {the second case of a repeated name fails} -body {"),
        ("setup", "test setup-fails {an error in -setup fails the case; its body never runs} "
                  "-setup {"),
        ("cleanup", "test cleanup-fails {an error in -cleanup fails a case whose body passed} "
                    "-body {")]}
    assert re.search(r"^=+ FAILURES =+\n(.*?)^=+ short test summary", r.stdout,
                     re.M | re.S)[1].splitlines() == [
        f"{where['with space']} ==== with space a failing case whose name has a space FAILED: "
        "Result was: ABC",
        f"{where['twice']} ==== twice the second case of a repeated name fails FAILED: "
        "Result was: a b",
        f"{where['setup']} ==== setup-fails an error in -setup fails the case; its body never "
        "runs FAILED: Test setup failed: setup broke",
        f"{where['cleanup']} ==== cleanup-fails an error in -cleanup fails a case whose body "
        "passed FAILED: Test cleanup failed: cleanup broke"]
    # without the terminal (and its --tb), failures are failures
    assert run_pytest(tmp_path, "-p", "no:terminal", "shapes.test").returncode == 1


def test_a_pytest_that_moved_its_report_pieces_still_runs_and_reports_the_cases(shapes, tmp_path):
    # The plugin borrows report pieces from pytest's private _pytest._code.code.
    # Before, a pytest without them there failed at the plugin's import: every
    # pytest run where tclamp is installed stopped with an ImportError.
    # (the plugin's own import fails; pytest's modules keep theirs)
    moved = ("import builtins, sys, pytest\n"
             "real_import = builtins.__import__\n"
             "def moved(name, globals=None, *args, **kwargs):\n"
             "    if name == '_pytest._code.code' and (globals or {}).get('__name__')"
             " == 'tclamp.pytest_plugin':\n"
             "        raise ImportError(name)\n"
             "    return real_import(name, globals, *args, **kwargs)\n"
             "builtins.__import__ = moved\n"
             "sys.exit(pytest.main(sys.argv[1:]))\n")
    copy_cases(tmp_path, "shapes.test")
    r = run_pytest(tmp_path, "-rA", "shapes.test", start=("-c", moved))
    assert outcomes(r) == outcomes(shapes[1]) == {"failed": 4, "passed": 6, "skipped": 1}
    assert section(r.stdout, "shapes.test: with space") == section(
        shapes[1].stdout, "shapes.test: with space")
    assert "FAILED shapes.test::twice[2] - ==== twice the second case" in r.stdout


def test_tb_line_keeps_a_description_of_many_lines_whole(tmp_path):
    # tcltest's "==== NAME DESCRIPTION FAILED" spans lines when the
    # description does; before, the crash line was its first line alone:
    # "==== long the first line: Result was: 1".
    (tmp_path / "long.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test long {the first line\n    and the second} -body {expr 1} -result 2\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "--tb=line", "long.test")
    assert re.search(r"^=+ FAILURES =+\n(.*?)^=+ short test summary", r.stdout,
                     re.M | re.S)[1].splitlines() == [
        f"{tmp_path / 'long.test'}:3: ==== long the first line and the second FAILED: "
        "Result was: 1"]


def test_case_output_is_in_its_own_report(shapes):
    _, result = shapes
    assert section(result.stdout, "shapes.test: talks") == (
        "[stdout]\n"
        "to stdout from talks\n"
        "[stderr]\n"
        "to stderr from talks\n")
    assert result.stdout.count("from talks") == 2


def test_what_tcltest_prints_for_a_passing_case_is_in_its_report(tmp_path):
    # `tclsh FILE` shows the report of a test that fails inside a passing
    # case's body (tcltest counts only the outer one) and -verbose lines.
    (tmp_path / "nested.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test outer {} -body {\n"
        "    test inner {} -body {expr 1} -result 2\n"
        "    expr 1\n"
        "} -result 1\n"
        "test loud {} -body {configure -verbose p; expr 1} -result 1\n"
        "test quiet {} -body {configure -verbose b; expr 1} -result 1\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-rA", "nested.test")
    assert outcomes(r) == {"passed": 3}
    assert section(r.stdout, "nested.test: outer") == (
        "[tcltest]\n\n\n"
        "==== inner  FAILED\n==== Contents of test case:\nexpr 1\n"
        "---- Result was:\n1\n---- Result should have been (exact matching):\n2\n"
        "==== inner FAILED\n\n")
    assert section(r.stdout, "nested.test: loud") == "[tcltest]\n++++ loud PASSED\n"
    assert not re.search(r"^_+ nested\.test: quiet _+$", r.stdout, re.M)  # nothing to show


def test_output_reaches_the_terminal_with_s(tmp_path):
    copy_cases(tmp_path, "shapes.test")
    r = run_pytest(tmp_path, "-s", "-q", "shapes.test::talks")
    assert outcomes(r) == {"passed": 1}
    assert "to stdout from talks\n" in r.stdout and r.stderr == "to stderr from talks\n"


TOP_LEVEL_TALKS = """package require tcltest
namespace import tcltest::*
puts "top-level: starting"
puts stderr "top-level: a warning"
test a {} -body {puts "in a"} -result {}
puts "between a and b"
test b {} -body {expr 1} -result 1
puts "top-level: done"
cleanupTests
"""


def test_output_outside_any_case_is_shown(tmp_path):
    # `tclsh FILE` prints what the file's top-level code writes; so must pytest
    (tmp_path / "talks.test").write_text(TOP_LEVEL_TALKS)
    r = run_pytest(tmp_path, "-s", "-q", "talks.test")
    assert outcomes(r) == {"passed": 2}
    assert r.stdout.startswith("in a\n..top-level: starting\nbetween a and b\n"
                               "top-level: done\n")
    assert r.stderr == "top-level: a warning\n"
    r = run_pytest(tmp_path, "-rA", "talks.test")
    assert re.search(r"^-+ Captured stdout teardown -+\n"
                     r"top-level: starting\nbetween a and b\ntop-level: done\n"
                     r"-+ Captured stderr teardown -+\ntop-level: a warning\n", r.stdout, re.M)


def test_a_process_left_running_does_not_hold_up_the_run(tmp_path):
    # Its helper holds tclsh's stdout and stderr open for two minutes after
    # tclsh ends; pytest must end with tclsh, as `tclsh FILE` does.
    copy_cases(tmp_path, "background.test")
    try:
        r = run_pytest(tmp_path, "-rA", "background.test")
        assert (tmp_path / "helper.pid").exists()
        assert not (tmp_path / "helper.done").exists()   # the helper still runs
        assert outcomes(r) == {"passed": 1}
        assert section(r.stdout, "background.test: starts-helper") == (
            "[stdout]\n"
            "helper started\n")
    finally:
        if (tmp_path / "helper.pid").exists():
            try:
                os.kill(int((tmp_path / "helper.pid").read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


# A tcltest file whose one case writes its tclsh's pid to `hanging`, then
# sleeps outside the event loop.
SLEEPING_CASE = ("package require tcltest\nnamespace import tcltest::*\n"
                 "test hangs {} -body {\n"
                 "    set f [open hanging w]; puts $f [pid]; close $f\n"
                 "    after 600000\n"
                 "} -result {}\n"
                 "cleanupTests\n")


def start_pytest(tmp_path, env=None, **output):
    """pytest on tmp_path's hang.test, in the background, taking SIGINT as
    at a terminal whatever this test run inherited."""
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "hang.test"], cwd=tmp_path,
        env=dict(os.environ, COLUMNS="200", PYTHONPATH=str(ROOT / "src"), **(env or {})),
        preexec_fn=sigint_as_at_a_terminal, **output)


def wait_for_the_hanging_case(tmp_path, pytest_run):
    """The pid of the tclsh whose case hangs, once the case has written it
    to `hanging` (pytest still running)."""
    for _ in range(1200):
        if (tmp_path / "hanging").exists() and (tmp_path / "hanging").read_text():
            break
        assert pytest_run.poll() is None
        time.sleep(0.05)
    return int((tmp_path / "hanging").read_text())


def test_ctrl_c_on_a_hanging_case_names_it(tmp_path):
    (tmp_path / "hang.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test quick {} -body {expr 1} -result 1\n"
        "test hangs {} -body {expr 1} -cleanup {\n"
        "    set f [open hanging w]; puts $f [pid]; close $f\n"
        "    vwait forever\n"
        "} -result 1\n"
        "cleanupTests\n")
    pytest_run = start_pytest(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        wait_for_the_hanging_case(tmp_path, pytest_run)
        pytest_run.send_signal(signal.SIGINT)
        output, _ = pytest_run.communicate(timeout=60)
    finally:
        pytest_run.kill()
    assert pytest_run.returncode == 2
    assert ("KeyboardInterrupt: hang.test: interrupted while tclsh ran case hangs\n"
            in output), output
    with pytest.raises(ProcessLookupError):   # and that tclsh is gone
        os.kill(int((tmp_path / "hanging").read_text()), 0)


def running_driver(pid):
    """Whether pid is a tclsh running the plugin's driver (not a zombie, not
    a process that took the number since)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        return state != "Z" and b"tcltest_driver.tcl" in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (PR_SET_PDEATHSIG)")
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGKILL],
                         ids=["SIGTERM", "SIGKILL"])
def test_a_killed_pytest_takes_its_tclsh_with_it(tmp_path, signal_number):
    # The case sleeps outside the event loop; before, its tclsh slept on
    # for ten minutes after pytest was gone.
    (tmp_path / "hang.test").write_text(SLEEPING_CASE)
    # (its scratch directory, which a killed pytest leaves, goes with tmp_path)
    pytest_run = start_pytest(tmp_path, env={"TMPDIR": str(tmp_path)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tclsh = None
    try:
        tclsh = wait_for_the_hanging_case(tmp_path, pytest_run)
        assert running_driver(tclsh)
        pytest_run.send_signal(signal_number)
        assert pytest_run.wait(timeout=60) == -signal_number
        for _ in range(1200):   # the kernel has sent it SIGKILL: it goes at once
            if not running_driver(tclsh):
                break
            time.sleep(0.05)
        assert not running_driver(tclsh)
    finally:
        pytest_run.kill()
        if tclsh and running_driver(tclsh):
            os.kill(tclsh, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only (PR_SET_PDEATHSIG)")
def test_the_scratch_directory_of_a_killed_pytest_goes_at_the_next_run(tmp_path):
    """A pytest killed with SIGKILL leaves its file's scratch directory
    behind; the next one that runs a file removes it, as no process holds
    its lock any more, and keeps one that a live process holds, one made in
    the last minute, a symlink (not followed), and an older tclamp's, which
    held no lock."""
    temp = tmp_path / "temp"
    temp.mkdir()
    (tmp_path / "hang.test").write_text(SLEEPING_CASE)
    killed = start_pytest(tmp_path, env={"TMPDIR": str(temp)},
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_the_hanging_case(tmp_path, killed)
        [running] = [name for name in os.listdir(temp) if name.startswith("tclamp-")]
        held = os.open(temp / running, os.O_RDONLY)
        try:    # the running pytest holds it
            with pytest.raises(BlockingIOError):
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(held)
        killed.send_signal(signal.SIGKILL)
        assert killed.wait(timeout=60) == -signal.SIGKILL
    finally:
        killed.kill()
    an_hour_ago = time.time() - 3600
    for name in ("tclamp-tcltest-locked-live", "tclamp-tcltest-locked-new",
                 "tclamp-tcltest-x7k2_q9a"):
        (temp / name).mkdir()
    live = os.open(temp / "tclamp-tcltest-locked-live", os.O_RDONLY)
    fcntl.flock(live, fcntl.LOCK_EX)
    target = tmp_path / "target"
    target.mkdir()
    (target / "kept").write_text("")
    (temp / "tclamp-tcltest-locked-link").symlink_to(target)
    for name in (running, "tclamp-tcltest-locked-live", "tclamp-tcltest-locked-link",
                 "tclamp-tcltest-x7k2_q9a"):
        os.utime(temp / name, (an_hour_ago, an_hour_ago), follow_symlinks=False)
    (tmp_path / "quick.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test quick {} {expr 1} 1\ncleanupTests\n")
    try:
        r = run_pytest(tmp_path, "quick.test", env={"TMPDIR": str(temp)})
    finally:
        os.close(live)
    assert outcomes(r) == {"passed": 1}
    assert sorted(name for name in os.listdir(temp) if name.startswith("tclamp-")) == [
        "tclamp-tcltest-locked-link", "tclamp-tcltest-locked-live", "tclamp-tcltest-locked-new",
        "tclamp-tcltest-x7k2_q9a"]
    assert os.listdir(target) == ["kept"]


def test_a_temporary_directory_without_locks_runs_the_files(tmp_path):
    """A file system that has no flock (Lustre mounted without -o flock
    says ENOSYS): the files run, and a leftover, which cannot be told from
    one in use, stays.  Before, every tcltest file failed to collect with
    "cannot start tclsh: [Errno 38] Function not implemented"."""
    temp = tmp_path / "temp"
    (temp / "tclamp-tcltest-locked-old").mkdir(parents=True)
    an_hour_ago = time.time() - 3600
    os.utime(temp / "tclamp-tcltest-locked-old", (an_hour_ago, an_hour_ago))
    (tmp_path / "conftest.py").write_text(
        "import errno\nimport fcntl\n\n"
        "def flock(fd, operation):\n"
        "    raise OSError(errno.ENOSYS, 'Function not implemented')\n\n"
        "fcntl.flock = flock\n")
    (tmp_path / "quick.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test quick {} {expr 1} 1\ncleanupTests\n")
    r = run_pytest(tmp_path, "quick.test", env={"TMPDIR": str(temp)})
    assert outcomes(r) == {"passed": 1}, r.stdout
    assert os.listdir(temp) == ["tclamp-tcltest-locked-old"]


def test_a_timeout_on_a_hanging_case_names_it(tmp_path):
    # pytest-timeout's way, without it: pytest.fail from a signal handler,
    # here once the case hangs
    (tmp_path / "conftest.py").write_text(
        "import os\nimport signal\nimport pytest\n\n"
        "def timeout(*_):\n"
        "    if not os.path.exists('hanging'):\n"
        "        signal.setitimer(signal.ITIMER_REAL, 0.1)\n"
        "        return\n"
        "    pytest.fail('Timeout (>3s)')\n\n"
        "@pytest.hookimpl(tryfirst=True)\n"
        "def pytest_runtest_setup(item):\n"
        "    if item.name == 'quick':  # the file's tclsh runs in its set-up\n"
        "        signal.signal(signal.SIGALRM, timeout)\n"
        "        signal.setitimer(signal.ITIMER_REAL, 0.1)\n")
    (tmp_path / "hang.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test quick {} -body {expr 1} -result 1\n"
        "test hangs {} -body {expr 1} -cleanup {\n"
        "    close [open hanging w]\n"
        "    vwait forever\n"
        "} -result 1\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-rA", "hang.test")
    assert outcomes(r) == {"errors": 2}
    assert section(r.stdout, "ERROR at setup of hang.test: quick") == (
        "Timeout (>3s)\nhang.test: interrupted while tclsh ran case hangs\n")


def test_unmet_constraint_is_a_skip_naming_it(shapes):
    _, result = shapes
    line = 1 + (CASES / "shapes.test").read_text().splitlines().index(
        "test needs-gpu {skipped: its constraint is not met} -constraints haveGpu -body {")
    assert f"SKIPPED [1] shapes.test:{line}: tcltest constraint not met: haveGpu" in result.stdout


def test_junit_times_are_each_case_own(shapes):
    directory, _ = shapes
    suite = ElementTree.parse(directory / "junit.xml").getroot().find("testsuite")
    times = {case.get("name"): float(case.get("time")) for case in suite.iter("testcase")}
    assert 0.25 <= times["waits"] < 5
    # starting tclsh (seconds) is no case's time, not even the first one's
    assert times["plain-1.1"] < 0.05 and times["tcl: :ns"] < 0.05


def test_ids_are_listed_and_can_be_pasted_back(tmp_path):
    copy_cases(tmp_path, "shapes.test")
    listed = run_pytest(tmp_path, "--collect-only", "-q", "shapes.test")
    assert listed.stdout.splitlines()[:len(SHAPES_IDS)] == [f"shapes.test::{name}"
                                                            for name in SHAPES_IDS]
    # pytest -v prints the same ids, a name with a dot included
    verbose = run_pytest(tmp_path, "-v", "shapes.test")
    assert re.findall(r"^(shapes\.test::.*?) (?:PASSED|FAILED|SKIPPED)", verbose.stdout, re.M) \
        == [f"shapes.test::{name}" for name in SHAPES_IDS]
    r = run_pytest(tmp_path, "-rA", "shapes.test::with space", "shapes.test::twice[2]",
                   "shapes.test::tcl: :ns")
    assert outcomes(r) == {"failed": 2, "passed": 1}
    assert re.findall(r"^(PASSED|FAILED) (shapes\.test::[^-]*?)(?: - |$)", r.stdout, re.M) == [
        ("PASSED", "shapes.test::tcl: :ns"), ("FAILED", "shapes.test::with space"),
        ("FAILED", "shapes.test::twice[2]")]
    # A bare name takes every case of that name, as pytest does with parameters.
    assert outcomes(run_pytest(tmp_path, "shapes.test::twice")) == {"failed": 1, "passed": 1}


def test_a_name_ending_in_a_bracket_is_not_taken_for_a_repeat(tmp_path):
    # Before, the case named x[2] was x[2] when it came before the second
    # case named x (which became x[3]), and x[2][2] after it.
    (tmp_path / "brackets.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test {x[2]} {the first x[2]} {expr 1} 1\n"
        "test x {} {expr 1} 1\n"
        "test x {the second x} {expr 1} 2\n"
        "test {x[2]} {the second x[2]} {expr 1} 1\n"
        "test {y]} {} {expr 1} 1\n"
        "cleanupTests\n")
    assert collected_ids(tmp_path, "brackets.test") == [
        "brackets.test::x[2][1]", "brackets.test::x", "brackets.test::x[2]",
        "brackets.test::x[2][2]", "brackets.test::y][1]"]
    r = run_pytest(tmp_path, "-rA", "brackets.test::x[2]", "brackets.test::x[2][1]")
    assert sorted(re.findall(r"^(PASSED|FAILED) (\S+)", r.stdout, re.M)) == [
        ("FAILED", "brackets.test::x[2]"), ("PASSED", "brackets.test::x[2][1]")]


def test_a_name_with_a_bracket_inside_is_shown_and_reported_by_its_id(tmp_path):
    """pytest reads what follows an id's first `[` as parameters and, where
    it writes an id again (the short summary, junit), closes them with `]`.
    Before, the case named x[a had the id x[a, which -rA and junit wrote as
    x[a] (and [y as [y]): ids that select nothing when passed back."""
    (tmp_path / "open.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test {x[a} {} {expr 1} 2\n"
        "test {[y} {} {expr 1} 1\n"
        "test {x[a} {the second} {expr 1} 1\n"
        "cleanupTests\n")
    ids = ["open.test::x[a[1]", "open.test::[y[1]", "open.test::x[a[2]"]
    assert collected_ids(tmp_path, "open.test") == ids
    r = run_pytest(tmp_path, "-rA", "--junitxml=junit.xml", "open.test")
    assert re.findall(r"^(?:PASSED|FAILED) (\S+)", r.stdout, re.M) == [ids[1], ids[2], ids[0]]
    assert [name for name, _ in junit_cases(tmp_path / "junit.xml")] == [
        name.split("::")[1] for name in ids]
    for name in ids:    # passed back, each selects its case alone
        assert collected_ids(tmp_path, name) == [name]


def test_a_noncharacter_in_a_name_keeps_its_junit_name_its_own(tmp_path):
    """junit's XML cannot hold U+FFFE or U+FFFF; pytest writes them #xFFFE
    and #xFFFF there.  Before, the case named f<U+FFFF> had that character
    in its id, and junit named it f#xFFFF, as it named the case f#xFFFF."""
    (tmp_path / "xml.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test \"f\\uffff\" {} {expr 1} 1\n"
        "test \"e\\ufffe\" {} {expr 1} 1\n"
        "test f#xFFFF {} {expr 1} 1\n"
        "cleanupTests\n")
    assert collected_ids(tmp_path, "xml.test") == [
        "xml.test::f\\uffff", "xml.test::e\\ufffe", "xml.test::f#xFFFF"]
    r = run_pytest(tmp_path, "--junitxml=junit.xml", "xml.test")
    assert outcomes(r) == {"passed": 3}
    assert junit_cases(tmp_path / "junit.xml") == [
        ("f\\uffff", "passed"), ("e\\ufffe", "passed"), ("f#xFFFF", "passed")]


def test_a_name_with_delete_is_its_own_case(tmp_path):
    """The records' encoding (Tcl's ascii) wrote DEL (U+007F) as `?`.
    Before, the failing case named x<DEL> was collected as x?, the name of
    the passing case after it; the plugin selected x? twice, the driver
    skipped x<DEL> as not selected, and pytest reported 2 passed (x? twice),
    where tclsh reports Failed 1.  Python's json.dumps, which writes the
    selection, writes DEL as \\u007f, as the records now do."""
    (tmp_path / "del.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test \"x\\x7f\" {fails} {expr 1} 2\n"
        "test x? {passes} {expr 1} 1\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-rA", "del.test")
    assert outcomes(r) == {"failed": 1, "passed": 1}, r.stdout
    assert re.findall(r"^(PASSED|FAILED) (\S+)(?: - (.*))?$", r.stdout, re.M) == [
        ("PASSED", "del.test::x?", ""),
        ("FAILED", "del.test::x\\x7f", "==== x\x7f fails FAILED: Result was: 1")]


def test_ids_are_one_line_each_names_own_and_select_their_case(tmp_path):
    """Before, the case named with a newline had an id of two lines (the
    same text as the case named with a backslash and an n), the case named
    `a: :b` got `a: :b[2]`, as if it were the second case named a::b (and
    `a: :b` selected both), and `a:::b` became `a: ::b`, which pytest split
    at `::` and so never found."""
    (tmp_path / "ids.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test a::b {} {expr 1} 1\n"
        "test {a: :b} {} {expr 1} 1\n"
        "test a:::b {} {expr 1} 1\n"
        "test \"line\\nbreak\" {} {expr 1} 1\n"
        "test {line\\nbreak} {} {expr 1} 1\n"
        "test \"tab\\tand\\x1b\" {} {expr 1} 1\n"
        "cleanupTests\n")
    ids = ["a: :b", "a:\\x20:b", "a: : :b", "line\\nbreak", "line\\\\nbreak",
           "tab\\tand\\x1b"]
    assert collected_ids(tmp_path, "ids.test") == [f"ids.test::{name}" for name in ids]
    for name in ids:    # each printed id selects its case and no other
        r = run_pytest(tmp_path, "-rA", f"ids.test::{name}")
        assert re.findall(r"^(PASSED|FAILED) (.*)$", r.stdout, re.M) == [
            ("PASSED", f"ids.test::{name}")]


def test_collection_runs_no_test_body(tmp_path):
    copy_cases(tmp_path, "shapes.test")
    r = run_pytest(tmp_path, "--collect-only", "-q", "shapes.test")
    assert r.stdout.splitlines()[-1].startswith("11 tests collected")
    assert not (tmp_path / "body-ran.txt").exists()


@pytest.mark.parametrize("option", ["--setup-only", "--setup-plan"])
def test_setup_only_and_setup_plan_run_no_case(tmp_path, option):
    copy_cases(tmp_path, "shapes.test")
    r = run_pytest(tmp_path, option, "shapes.test")
    assert r.returncode == 0 and "no tests ran" in r.stdout.splitlines()[-1], r.stdout
    assert "shapes.test::creates-file" in r.stdout
    assert not (tmp_path / "body-ran.txt").exists()


def test_k_runs_only_the_selected_cases(tmp_path):
    copy_cases(tmp_path, "shapes.test")
    r = run_pytest(tmp_path, "-rA", "-k", "plain or talks or gpu", "shapes.test")
    assert outcomes(r) == {"passed": 2, "skipped": 1, "deselected": 8}
    assert not (tmp_path / "body-ran.txt").exists()
    # tcltest's own count (the others skipped through -skip) agreed: no file error
    assert "ERROR" not in r.stdout
    r = run_pytest(tmp_path, "-k", "creates", "shapes.test")
    assert outcomes(r) == {"passed": 1, "deselected": 10}
    assert (tmp_path / "body-ran.txt").exists()


def test_a_case_that_marks_keep_from_running_does_not_run(tmp_path):
    # A conftest that skips cases by pytest's marks: their bodies must not
    # run in the file's tclsh either (creates-file leaves body-ran.txt).
    copy_cases(tmp_path, "shapes.test")
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        if item.name == 'creates-file':\n"
        "            item.add_marker(pytest.mark.skip(reason='not in CI'))\n"
        "        if item.name == 'waits':\n"
        "            item.add_marker(pytest.mark.skipif(True, reason='too slow'))\n"
        "        if item.name == 'talks':\n"
        "            item.add_marker(pytest.mark.xfail(run=False, reason='noisy'))\n")
    r = run_pytest(tmp_path, "-rA", "shapes.test")
    assert outcomes(r) == {"failed": 4, "passed": 3, "skipped": 3, "xfailed": 1}, r.stdout
    assert not (tmp_path / "body-ran.txt").exists()
    assert "to stdout from talks" not in r.stdout
    assert "ERROR" not in r.stdout   # tcltest skipped them too: the counts agree


def test_last_failed_reruns_exactly_the_failures(tmp_path):
    copy_cases(tmp_path, "shapes.test")
    assert outcomes(run_pytest(tmp_path, "shapes.test", cache=True)) == {
        "failed": 4, "passed": 6, "skipped": 1}
    (tmp_path / "body-ran.txt").unlink()
    r = run_pytest(tmp_path, "-rA", "--lf", "shapes.test", cache=True)
    assert outcomes(r) == {"failed": 4, "deselected": 7}
    assert re.findall(r"^FAILED (shapes\.test::.*?) - ", r.stdout, re.M) == [
        "shapes.test::with space", "shapes.test::twice[2]", "shapes.test::setup-fails",
        "shapes.test::cleanup-fails"]
    assert not (tmp_path / "body-ran.txt").exists()


TEN_CASES = """package require tcltest
namespace import tcltest::*
for {set i 0} {$i < 10} {incr i} {
    test FILE-$i {} -body {
        set f [open runs.log a]; puts $f "[pid] FILE-$i"; close $f
    } -result {}
}
cleanupTests
"""


def run_two_files_under_xdist(directory, dist, start=("-m", "pytest")):
    """pytest -n 2 on two tcltest files of ten cases and one Python test,
    checking that each case ran once and each file in one tclsh."""
    for file in ("a", "b"):
        (directory / f"{file}.test").write_text(TEN_CASES.replace("FILE", file))
    (directory / "test_python.py").write_text("def test_python():\n    assert 6 * 7 == 42\n")
    r = run_pytest(directory, "-n", "2", "--dist", dist, start=start)
    assert outcomes(r) == {"passed": 21}, r.stdout + r.stderr
    runs = [line.split() for line in (directory / "runs.log").read_text().splitlines()]
    assert sorted(name for _, name in runs) == sorted(f"{file}-{i}" for file in "ab"
                                                     for i in range(10))
    assert len({pid for pid, name in runs if name.startswith("a")}) == 1
    assert len({pid for pid, name in runs if name.startswith("b")}) == 1
    return r


@pytest.mark.parametrize("dist", ["load", "worksteal", "loadgroup"])
def test_xdist_runs_each_case_once_and_each_file_in_one_tclsh(tmp_path, dist):
    # Split among workers case by case, each worker's tclsh would run every
    # case of the file.
    run_two_files_under_xdist(tmp_path, dist)


# An xdist that renamed the private _split_scope, which the plugin's scheduler
# overrides: each definition and each call of it, in every scheduler class,
# says _scope_of instead.
XDIST_RENAMED = """import sys, pytest, xdist.scheduler
for cls in [c for c in vars(xdist.scheduler).values() if isinstance(c, type)]:
    for function in list(vars(cls).values()):
        code = getattr(function, "__code__", None)
        if code and "_split_scope" in code.co_names:
            function.__code__ = code.replace(co_names=tuple(
                "_scope_of" if n == "_split_scope" else n for n in code.co_names))
    if "_split_scope" in vars(cls):
        cls._scope_of = vars(cls)["_split_scope"]
        del cls._split_scope
sys.exit(pytest.main(sys.argv[1:]))
"""
# An xdist that moved LoadGroupScheduling (its own hook keeps finding it).
XDIST_MOVED = """import sys, pytest, xdist.dsession, xdist.scheduler
del xdist.scheduler.LoadGroupScheduling
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("xdist, dist", [(XDIST_RENAMED, "load"), (XDIST_RENAMED, "loadgroup"),
                                         (XDIST_MOVED, "worksteal")],
                         ids=["renamed-load", "renamed-loadgroup", "moved-worksteal"])
def test_an_xdist_without_the_private_hook_point_still_keeps_each_file_whole(
        tmp_path, xdist, dist):
    # Before, with _split_scope renamed, the plugin's override was never
    # called: cases went to workers one by one, and each worker's tclsh ran
    # all of a file's cases; with LoadGroupScheduling moved, the plugin's
    # import of it failed inside the hook (INTERNALERROR).  Now the plugin
    # falls back to --dist loadfile, and says so.
    r = run_two_files_under_xdist(tmp_path, dist, start=("-c", xdist))
    assert f"tclamp: --dist {dist} runs as --dist loadfile" in r.stderr


def test_under_xdist_each_worker_collects_as_the_docs_say(tmp_path):
    (tmp_path / "a.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "set f [open top-level.log a]; puts $f [pid]; close $f\n"
        "test one {} -body {expr 1} -result 1\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-n", "2")
    assert outcomes(r) == {"passed": 1}
    # two workers collect, one tclsh runs the case: three runs of the top level
    assert len(set((tmp_path / "top-level.log").read_text().split())) == 3
    limits = (ROOT / "docs" / "pytest.md").read_text().split("## Limits")[1]
    assert "Under pytest-xdist each worker\n  collects, so with `-n N` it runs N + 1 times." in limits


def test_a_file_whose_cases_are_not_consecutive_runs_once(tmp_path):
    for file in ("a", "b"):
        (tmp_path / f"{file}.test").write_text(TEN_CASES.replace("FILE", file))
    r = run_pytest(tmp_path, "-rA", "a.test::a-0", "b.test::b-0", "a.test::a-1")
    assert outcomes(r) == {"passed": 3}
    assert re.findall(r"^PASSED (\S+)$", r.stdout, re.M) == ["a.test::a-0", "b.test::b-0",
                                                            "a.test::a-1"]
    runs = [line.split() for line in (tmp_path / "runs.log").read_text().splitlines()]
    # a.test's one tclsh ran both its selected cases, before b.test's ran
    assert [name for _, name in runs] == ["a-0", "a-1", "b-0"]
    assert runs[0][0] == runs[1][0] != runs[2][0]


def test_error_outside_cases_after_they_ran_fails_the_file(tmp_path):
    copy_cases(tmp_path, "error_after_cases.test")
    r = run_pytest(tmp_path, "-rA", "error_after_cases.test")
    assert outcomes(r) == {"passed": 2, "errors": 1}
    report = section(r.stdout, "ERROR at teardown of error_after_cases.test: plain")
    assert report.startswith(
        "error_after_cases.test: error outside any test case: "
        "top-level code failed after the cases\n"
        "top-level code failed after the cases\n    while executing\n")
    assert report.endswith(
        "tcltest printed no Total/Passed/Skipped/Failed line: the file did not reach "
        "tcltest::cleanupTests\n"
        "tclsh exited with status 1\n"
        "tcltest counted:         nothing\n"
        "the cases' results give: Total 2  Passed 2  Skipped 0  Failed 0  "
        "(0 skipped as not selected)\n")


def test_exit_inside_a_case_fails_it_and_the_file(tmp_path):
    copy_cases(tmp_path, "exit_in_case.test")
    _, alone = tclsh_cases(tmp_path, "exit_in_case.test")
    assert (alone.returncode, "Total" in alone.stdout) == (0, False)  # tclsh sees no problem
    r = run_pytest(tmp_path, "-rA", "exit_in_case.test")
    assert outcomes(r) == {"failed": 2, "passed": 1, "errors": 1}
    assert section(r.stdout, "exit_in_case.test: quits") == (
        "the case called exit 0\n"
        "[stdout]\n"
        "about to exit\n")
    assert section(r.stdout, "exit_in_case.test: after") == (
        "not run: the file stopped before this case (the file's failure is reported at the "
        "end of its last case)\n")
    assert section(r.stdout, "ERROR at teardown of exit_in_case.test: after") == (
        "exit_in_case.test: case quits called exit 0\n"
        "tcltest printed no Total/Passed/Skipped/Failed line: the file did not reach "
        "tcltest::cleanupTests\n"
        "tcltest counted:         nothing\n"
        "the cases' results give: Total 2  Passed 1  Skipped 0  Failed 0  "
        "(0 skipped as not selected)\n")


BAD_OPTION = ('bad option "-badopt": must be -body, -cleanup, -constraints, -errorCode, '
              '-errorOutput, -match, -output, -result, -returnCodes, or -setup')


def test_a_test_call_that_raises_an_error_is_named_as_tclsh_names_it(tmp_path):
    # tcltest::test raises the error itself (a bad option): tcltest counts
    # no case, and uncaught the error stops the file as it stops `tclsh FILE`.
    (tmp_path / "caught.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "catch {test bad {} -body {expr 1} -result 1 -badopt 3}\n"
        "test good {} -body {expr 1} -result 1\n"
        "cleanupTests\n")
    (tmp_path / "uncaught.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test good {} -body {expr 1} -result 1\n"
        "test bad {} -body {expr 1} -result 1 -badopt 3\n"
        "test after {} -body {expr 1} -result 1\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-rA", "caught.test", "uncaught.test")
    assert outcomes(r) == {"failed": 3, "passed": 2, "errors": 1}
    assert section(r.stdout, "caught.test: bad") == (
        f"tcltest::test raised an error:\n{BAD_OPTION}\n")
    # tcltest counted what the cases' results give: caught.test is whole
    assert "ERROR at teardown of caught.test" not in r.stdout
    assert section(r.stdout, "ERROR at teardown of uncaught.test: after") == (
        f"uncaught.test: case bad: tcltest::test raised an error, which stopped the file: "
        f"{BAD_OPTION}\n"
        f"{BAD_OPTION}\n"
        '    while executing\n"test bad {} -body {expr 1} -result 1 -badopt 3"\n'
        f'    (file "{tmp_path / "uncaught.test"}" line 4)\n'
        "tcltest printed no Total/Passed/Skipped/Failed line: the file did not reach "
        "tcltest::cleanupTests\n"
        "tclsh exited with status 1\n"
        "tcltest counted:         nothing\n"
        "the cases' results give: Total 1  Passed 1  Skipped 0  Failed 0  "
        "(0 skipped as not selected)\n")


def test_an_exit_that_tcl_refuses_is_an_error_in_the_case(tmp_path):
    # `exit foo` raises "expected integer" and tclsh goes on, so the case
    # fails with tcltest's report and the file ends as usual.
    (tmp_path / "exit_foo.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test bad-exit {} -body {exit foo} -result {}\n"
        "test after {} -body {puts {after runs}} -result {}\n"
        "cleanupTests\n")
    _, alone = tclsh_cases(tmp_path, "exit_foo.test")
    assert "exit_foo.test:\tTotal\t2\tPassed\t1\tSkipped\t0\tFailed\t1" in alone.stdout
    r = run_pytest(tmp_path, "-rA", "exit_foo.test")
    assert outcomes(r) == {"failed": 1, "passed": 1}
    assert section(r.stdout, "exit_foo.test: bad-exit") == (
        "==== bad-exit  FAILED\n==== Contents of test case:\nexit foo\n"
        "---- Test generated error; Return code was: 1\n"
        "---- Return code should have been one of: 0 2\n"
        '---- errorInfo: expected integer but got "foo"\n'
        '    while executing\n"exit foo"\n    ("uplevel" body line 1)\n'
        '    invoked from within\n"uplevel 1 $script"\n'
        f"---- errorCode: TCL VALUE {'NUMBER' if TCL9 else 'INTEGER'}\n"
        "==== bad-exit FAILED\n")
    assert section(r.stdout, "exit_foo.test: after") == "[stdout]\nafter runs\n"


def test_count_disagreeing_with_tcltest_fails_the_file(tmp_path):
    copy_cases(tmp_path, "miscount.test")
    r = run_pytest(tmp_path, "-rA", "miscount.test")
    assert outcomes(r) == {"passed": 2, "errors": 1}
    assert section(r.stdout, "ERROR at teardown of miscount.test: two") == (
        "miscount.test: tcltest's count disagrees with the cases' results\n"
        "tcltest counted:         Total 3  Passed 2  Skipped 0  Failed 1\n"
        "the cases' results give: Total 2  Passed 2  Skipped 0  Failed 0  "
        "(0 skipped as not selected)\n"
        "---- tcltest's output outside any case:\n"
        "miscount.test:\tTotal\t3\tPassed\t2\tSkipped\t0\tFailed\t1\n")


def test_a_file_that_sends_tcltest_output_elsewhere_says_so(tmp_path):
    # docs/pytest.md: such a file fails as a whole; the reports say why,
    # and that the file did reach cleanupTests.
    (tmp_path / "outfile.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "configure -outfile [file join [temporaryDirectory] tcltest.out]\n"
        "test good {} -body {expr 1} -result 1\n"
        "test bad {} -body {expr 1} -result 2\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-rA", "outfile.test")
    assert outcomes(r) == {"passed": 1, "failed": 1, "errors": 1}
    elsewhere = ("the file sent tcltest's output elsewhere (tcltest::configure -outfile, "
                 "or tcltest::outputChannel)")
    assert section(r.stdout, "outfile.test: bad") == (
        "tcltest counted this case as failed and wrote no report where the plugin reads it: "
        f"{elsewhere}\n")
    assert section(r.stdout, "ERROR at teardown of outfile.test: bad") == (
        "outfile.test: tcltest printed no Total/Passed/Skipped/Failed line where the plugin "
        f"reads it, though the file called tcltest::cleanupTests: {elsewhere}\n"
        "tcltest counted:         nothing\n"
        "the cases' results give: Total 2  Passed 1  Skipped 0  Failed 1  "
        "(0 skipped as not selected)\n")
    assert "==== bad FAILED" in (tmp_path / "tcltest.out").read_text()


def test_name_that_differs_between_collection_and_run(tmp_path):
    copy_cases(tmp_path, "dynamic.test")
    r = run_pytest(tmp_path, "-rA", "dynamic.test")
    assert outcomes(r) == {"passed": 3, "failed": 1, "errors": 1}
    assert re.findall(r"^PASSED (\S+)$", r.stdout, re.M) == [
        "dynamic.test::size-1", "dynamic.test::size-2", "dynamic.test::counts"]
    assert section(r.stdout, "dynamic.test: after-0") == (
        "not run: the file did not define this case when it ran\n")
    assert section(r.stdout, "ERROR at teardown of dynamic.test: after-0").startswith(
        "dynamic.test: case after-1 (call 1 of that name) appeared when the file ran but not "
        "when it was collected: it did not run\n"
        "tcltest counted:         Total 4  Passed 3  Skipped 1  Failed 0\n"
        "the cases' results give: Total 4  Passed 3  Skipped 1  Failed 0  "
        "(1 skipped as not selected)\n")


def test_files_that_fail_at_top_level_are_collection_errors(tmp_path):
    copy_cases(tmp_path, "broken.test", "exit_at_top.test")
    r = run_pytest(tmp_path, "broken.test", "exit_at_top.test")
    assert outcomes(r) == {"errors": 2}
    assert r.returncode == 2 and "Interrupted: 2 errors during collection" in r.stdout
    assert section(r.stdout, "ERROR collecting broken.test") == (
        'broken.test: error outside any test case while collecting: invalid command name '
        '"no_such_command"\n'
        "(collection runs the file's top-level code, not its cases)\n"
        'invalid command name "no_such_command"\n    while executing\n"no_such_command"\n'
        f'    (file "{tmp_path / "broken.test"}" line 5)\n')
    assert section(r.stdout, "ERROR collecting exit_at_top.test") == (
        "exit_at_top.test: the file called exit 0 while collecting, before "
        "tcltest::cleanupTests; cases after it would never run\n")


def test_a_users_directory_reports_what_tclsh_reports(tmp_path):
    shutil.copytree(CASES / "user_project", tmp_path, dirs_exist_ok=True)
    # Its cuda-enable case runs where torch sees a GPU, and is skipped elsewhere.
    gpu = int(torch_sees_gpu())
    expected, alone = tclsh_cases(tmp_path, "amp.test", env=tcl_env())
    assert (f"amp.test:\tTotal\t5\tPassed\t{3 + gpu}\tSkipped\t{1 - gpu}\tFailed\t1"
            in alone.stdout)
    r = run_pytest(tmp_path, "-v", "-rA", "--junitxml=junit.xml")
    assert outcomes(r) == {"failed": 1, "passed": 4 + gpu} | ({} if gpu else {"skipped": 1})
    # docs/pytest.md shows this very file, and the lines pytest -v prints for it
    page = (ROOT / "docs" / "pytest.md").read_text()
    assert re.search(r"```tcl\n(.*?)```", page, re.S)[1] == (tmp_path / "amp.test").read_text()
    shown = re.findall(r"^(?:amp\.test|test_model\.py)::.*\]$", page, re.M)
    if gpu:     # the page shows a machine without one
        shown = [re.sub(r"(cuda-enable) SKIPPED \(.*?\)", r"\1 PASSED", line) for line in shown]
    printed = {" ".join(line.split()) for line in r.stdout.splitlines()}  # widths differ
    assert len(shown) == 6 and all(" ".join(line.split()) in printed for line in shown)
    assert junit_cases(tmp_path / "junit.xml")[:-1] == expected == [("cpu-default-dtype", "passed"), ("cpu-enable", "passed"),
                               ("python-output", "passed"),
                               ("cuda-enable", "passed" if gpu else "skipped"),
                               ("cpu-wrong-dtype", "failure")]
    assert "PASSED test_model.py::test_python_sees_the_tcl_commands" in r.stdout
    # what Python prints lands in the case that printed it
    assert section(r.stdout, "amp.test: python-output") == (
        "[stdout]\n"
        "from Tcl\nfrom Python\n")


def test_ini_option_chooses_the_files(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sample.test").write_text("id,value\n1,2\n")
    (tmp_path / "tcl").mkdir()
    copy_cases(tmp_path / "tcl", "miscount.test")
    (tmp_path / "tcl" / "ok.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test ok {} {expr 1} 1\ncleanupTests\n")
    r = run_pytest(tmp_path, "tcl/ok.test", "data")
    assert outcomes(r) == {"errors": 1}
    assert "ERROR collecting data/sample.test" in r.stdout
    (tmp_path / "pytest.ini").write_text("[pytest]\ntcltest_files = tcl/ok.test\n")
    r = run_pytest(tmp_path, "-rA")
    assert outcomes(r) == {"passed": 1}
    assert "PASSED tcl/ok.test::ok" in r.stdout


def test_double_star_in_tcltest_files_is_recursive(tmp_path):
    # Before, ** matched one directory, as * does in PurePath.match:
    # tcl/a/ok.test alone was taken.
    for place in ("tcl", "tcl/a", "tcl/a/b", "data", "data/tcl"):
        (tmp_path / place).mkdir()
        (tmp_path / place / "ok.test").write_text(
            "package require tcltest\nnamespace import tcltest::*\n"
            "test ok {} {expr 1} 1\ncleanupTests\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntcltest_files = /nowhere/*.test "
                                         f"{tmp_path}/data/**/ok.test tcl/**/*.test\n")
    r = run_pytest(tmp_path, "--collect-only", "-q")
    assert sorted(r.stdout.split("\n\n")[0].splitlines()) == [
        "data/ok.test::ok", "data/tcl/ok.test::ok", "tcl/a/b/ok.test::ok", "tcl/a/ok.test::ok",
        "tcl/ok.test::ok"]


def test_double_stars_match_in_work_polynomial_in_the_path(monkeypatch):
    """Each ** tried every number of names afresh, so that ** repeated
    took work exponential in their count: `**/**/**/**/**/**/x.test`
    against a file 26 directories deep took 11 s, for each file pytest
    collected.  Counted as the names compared, not timed."""
    from tclamp import pytest_plugin
    compared = 0

    def counted(name, pattern):
        nonlocal compared
        compared += 1
        assert compared < 100000, "too many names compared"
        return fnmatch_case(name, pattern)

    fnmatch_case = pytest_plugin.fnmatch.fnmatchcase
    monkeypatch.setattr(pytest_plugin.fnmatch, "fnmatchcase", counted)
    deep = ("/", *(f"d{n}" for n in range(30)))
    for stars in (1, 2, 8):
        pattern = ("**",) * stars + ("d29", "*.test")
        assert pytest_plugin.matches(deep + ("x.test",), pattern)
        assert not pytest_plugin.matches(deep + ("x.tcl",), pattern)
        assert pytest_plugin.matches(("a", "b.test"), ("**", "*", "**", "*.test"))
        assert not pytest_plugin.matches(("b.test",), ("**", "*", "**", "*.test"))
    assert compared < 5000, compared


def test_no_tclamp_turns_the_plugin_off(tmp_path):
    copy_cases(tmp_path, "broken.test")
    (tmp_path / "test_python.py").write_text("def test_python():\n    assert 6 * 7 == 42\n")
    assert outcomes(run_pytest(tmp_path)) == {"errors": 1}
    assert outcomes(run_pytest(tmp_path, "-p", "no:tclamp")) == {"passed": 1}


def test_the_documented_filter_quiets_tcltest_files_without_the_plugin(tmp_path):
    # -p no:tclamp loads no part of the plugin, so nothing declares
    # tcltest_files: pytest warns, unless the filter docs/pytest.md gives.
    (tmp_path / "test_python.py").write_text("def test_python():\n    assert 6 * 7 == 42\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntcltest_files = tcl/*.test\n")
    warned = run_pytest(tmp_path, "-p", "no:tclamp")
    assert warned.returncode == 0
    assert "PytestConfigWarning: Unknown config option: tcltest_files" in warned.stdout
    options = (ROOT / "docs" / "pytest.md").read_text().split("## Options")[1]
    ini = re.search(r"add to `pytest.ini`.*?```text\n(filterwarnings =\n.*?)```", options, re.S)[1]
    (tmp_path / "pytest.ini").write_text("[pytest]\ntcltest_files = tcl/*.test\n" + ini)
    quiet = run_pytest(tmp_path, "-p", "no:tclamp")
    assert quiet.returncode == 0 and "Warning" not in quiet.stdout + quiet.stderr, quiet.stdout
    # and the plugin still reads the option
    assert run_pytest(tmp_path).returncode == 0
    (tmp_path / "pytest.ini").write_text("[pytest]\ntcltest_files = tcl/*.test\n")
    option = re.search(r"or pass `(-W) \"(.*?)\"`", options)
    quiet = run_pytest(tmp_path, "-p", "no:tclamp", option[1], option[2])
    assert quiet.returncode == 0 and "Warning" not in quiet.stdout + quiet.stderr, quiet.stdout


def test_tclsh_variable_names_the_tclsh(tmp_path):
    copy_cases(tmp_path, "shapes.test")
    r = run_pytest(tmp_path, "shapes.test", env={"TCLSH": "/nonexistent/tclsh"})
    assert outcomes(r) == {"errors": 1}
    assert section(r.stdout, "ERROR collecting shapes.test") == (
        "cannot start tclsh: [Errno 2] No such file or directory: '/nonexistent/tclsh'\n")


def test_a_file_runs_in_the_directory_pytest_started_in(tmp_path):
    # A Python test that runs first leaves pytest in another directory.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "test_a_moves.py").write_text(
        "import os\n\ndef test_moves():\n    os.chdir('elsewhere')\n")
    (tmp_path / "z.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test where {} -body {pwd} -result {" + str(tmp_path.resolve()) + "}\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-rA")
    assert outcomes(r) == {"passed": 2}, r.stdout
    assert re.findall(r"^PASSED (\S+)$", r.stdout, re.M) == [
        "test_a_moves.py::test_moves", "z.test::where"]


def test_package_require_gets_the_tclamp_this_pytest_runs(tmp_path):
    # Another tclamp on auto_path (TCLLIBPATH here; `tclamp install-tcl` puts
    # one in /usr/local/lib/tcltk) with a higher version: a plain require
    # still loads this pytest's, even after a search has declared the other;
    # asking for the other's version gets it.
    other = tmp_path / "other" / "tclamp"
    other.mkdir(parents=True)
    (other / "pkgIndex.tcl").write_text(
        "package ifneeded tclamp 99.0 {package provide tclamp 99.0}\n")
    version = (ROOT / "src" / "tclamp" / "VERSION").read_text().strip()
    (tmp_path / "own.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "catch {package require no_such_package}\n"
        "test own {} -body {package require tclamp} -result " + version + "\n"
        "test works {} -body {torch::autocast_get_dtype cpu} -result bfloat16\n"
        "cleanupTests\n")
    (tmp_path / "asks.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test asks {} -body {package require tclamp 99} -result 99.0\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-rA", "own.test", "asks.test",
                   env={"TCLLIBPATH": str(tmp_path / "other")})
    assert outcomes(r) == {"passed": 3}, r.stdout


def test_interpreters_a_file_creates_get_the_tclamp_this_pytest_runs(tmp_path):
    # Another tclamp of the same version first on TCLLIBPATH: a child
    # interpreter (which reads TCLLIBPATH when it is made, as a tclsh the
    # file starts does), and one given the file's auto_path, find this
    # pytest's first, as the file's own interpreter does; before, they
    # loaded the other and failed.
    version = (ROOT / "src" / "tclamp" / "VERSION").read_text().strip()
    other = tmp_path / "other" / "tclamp"
    other.mkdir(parents=True)
    (other / "pkgIndex.tcl").write_text(
        f"package ifneeded tclamp {version} {{error {{the other tclamp}}}}\n")
    (tmp_path / "child.test").write_text(
        "package require tcltest\nnamespace import tcltest::*\n"
        "test child {} -setup {interp create child} -body {\n"
        "    child eval {package require tclamp}\n"
        "    child eval {torch::autocast_get_dtype cpu}\n"
        "} -cleanup {interp delete child} -result bfloat16\n"
        "test copied {} -setup {interp create child} -body {\n"
        "    child eval [list set auto_path $::auto_path]\n"
        "    child eval {package require tclamp}\n"
        "    child eval {torch::autocast_get_dtype cpu}\n"
        "} -cleanup {interp delete child} -result bfloat16\n"
        "cleanupTests\n")
    r = run_pytest(tmp_path, "-rA", "child.test", env={"TCLLIBPATH": str(tmp_path / "other")})
    assert outcomes(r) == {"passed": 2}, r.stdout


def run_all_tcl(test_dir):
    """tests/all.tcl on the .test files of test_dir, with no environment."""
    return subprocess.run([TCLSH, str(ROOT / "tests" / "all.tcl"), "-testdir", str(test_dir)],
                          cwd=test_dir, capture_output=True, text=True, timeout=600,
                          env={"PATH": os.environ["PATH"]})


def test_all_tcl_exits_1_when_a_case_is_made_to_fail(tmp_path):
    copy = tmp_path / "scoped.test"
    shutil.copy(ROOT / "tests" / "scoped.test", copy)
    r = run_all_tcl(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^all\.tcl:\tTotal\t(\d+)\tPassed\t\1\tSkipped\t0\tFailed\t0$",
                     r.stdout, re.M)
    text = copy.read_text()
    end = text.rindex("cleanupTests")
    copy.write_text(text[:end] + "test made-to-fail {} {expr 1} 2\n" + text[end:])
    r = run_all_tcl(tmp_path)
    assert r.returncode == 1
    assert re.search(r"^scoped\.test:\tTotal\t\d+\tPassed\t\d+\tSkipped\t0\tFailed\t1$",
                     r.stdout, re.M)
    assert r.stdout.endswith("Files with failing tests or no summary: scoped.test\n")


def test_all_tcl_exits_1_when_a_file_fails_to_load_or_stops_early(tmp_path):
    copy_cases(tmp_path, "broken.test", "exit_in_case.test", "dynamic.test")
    r = run_all_tcl(tmp_path)
    assert r.returncode == 1
    assert "broken.test: exited with status 1\n" in r.stdout
    assert ("exit_in_case.test: printed no tcltest summary (it stopped before cleanupTests)\n"
            in r.stdout)
    assert "all.tcl:\tTotal\t4\tPassed\t4\tSkipped\t0\tFailed\t0\nRan 3 test files.\n" in r.stdout
    assert r.stdout.endswith(
        "Files with failing tests or no summary: broken.test, exit_in_case.test\n")


@pytest.mark.skipif(TCL9, reason="Tcl 9 writes no half character (its channels refuse a lone "
                                   "surrogate, as tclsh9.0 does this file's puts)")
def test_half_characters_in_names_and_reports_lose_nothing(tmp_path):
    # Tcl writes half a character as UTF-8 no strict decoder takes.
    copy_cases(tmp_path, "half_characters.test")
    r = subprocess.run([TCLSH, "half_characters.test"], cwd=tmp_path, capture_output=True,
                       timeout=300)
    assert b"half_characters.test:\tTotal\t4\tPassed\t2\tSkipped\t0\tFailed\t2" in r.stdout
    result = run_pytest(tmp_path, "-rA", "--junitxml=junit.xml", "half_characters.test")
    assert outcomes(result) == {"failed": 2, "passed": 2}
    assert junit_cases(tmp_path / "junit.xml") == [
        ("passes", "passed"), ("half-in-report", "failure"), ("half\\ud83d-name", "failure"),
        ("whole-🚀-é", "passed")]
    assert "---- Result was:\n\\ud83d\n----" in section(
        result.stdout, "half_characters.test: half-in-report")
    assert "---- Result was:\n\\ude80\n----" in section(
        result.stdout, "half_characters.test: half\\ud83d-name")
    assert "half of a rocket: \\ud83d\n" in result.stdout
    # The name as pytest shows it selects the case.
    again = run_pytest(tmp_path, "half_characters.test::half\\ud83d-name")
    assert outcomes(again) == {"failed": 1}
