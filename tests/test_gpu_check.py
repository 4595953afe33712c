"""gpu-check's pytest runs (tools/gpu_check.py): where CPUs are left over
beside the workers, the tcltest files run in a pytest of their own beside
the others, and then every test is in exactly one of the two runs, as
pytest itself collects them; elsewhere there is one run of everything.
Its workers take the longest files first, the long files' tests one at a
time (gpu_schedule.py)."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from gpu_schedule import KEPT_WHOLE, LONGEST_FIRST, SHARED_BY_ID, work_unit

sys.path.insert(0, str(ROOT / "tools"))
import gpu_check  # noqa: E402  (a script, found in tools/)

TCLTEST_FILE = """package require tcltest
namespace import ::tcltest::*
test {NAME}-1 {} -body {expr 1} -result 1
test {NAME}-2 {} -body {expr 2} -result 2
cleanupTests
"""


def runs_on(monkeypatch, tmp_path, cpus, jobs=None):
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    if jobs is None:
        monkeypatch.delenv("GPU_CHECK_JOBS", raising=False)
    else:
        monkeypatch.setenv("GPU_CHECK_JOBS", str(jobs))
    return gpu_check.pytest_runs(tmp_path)


def selection(command):
    """The words of a run's command that choose its tests: the files it
    names, what it ignores, the plugins it turns off (not the cache)."""
    words = command[command.index("pytest") + 1:]
    chosen = []
    for i, word in enumerate(words):
        if word == "-p" and words[i + 1] != "no:cacheprovider":
            chosen += ["-p", words[i + 1]]
        elif word.startswith("--ignore-glob=") or (not word.startswith("-")
                                                   and words[i - 1] not in ("-p", "-n", "--dist")):
            chosen.append(word)
    return chosen


def pytest_in(project, words, **env):
    """A pytest run in `project` that passed, as a plain run (not as the
    xdist worker this test may run in) or with `env`; tclamp and the
    tests' modules (gpu_schedule) importable."""
    inherited = {name: value for name, value in os.environ.items()
                 if name != "PYTEST_XDIST_WORKER"}
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *words],
                       cwd=project, capture_output=True, text=True, timeout=300,
                       env=dict(inherited, PYTHONPATH=path, **env))
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def collected(project, words, **env):
    """The tests that pytest collects, in order, as a serial run or with `env`."""
    r = pytest_in(project, ["--collect-only", "-q", *words], **env)
    return [line for line in r.stdout.splitlines() if "::" in line]


def test_with_cpus_to_spare_the_tcltest_files_run_beside_the_rest_each_test_once(
        monkeypatch, tmp_path):
    runs = runs_on(monkeypatch, tmp_path, cpus=16)
    assert [junit.name for _, junit in runs] == ["pytest.xml", "pytest-tcltest.xml"]
    assert runs[0][0][runs[0][0].index("-n") + 1] == "8"
    assert "--no-loadscope-reorder" in runs[0][0]
    # A project shaped as tclamp's: Python and tcltest files, some in a folder.
    project = tmp_path / "project"
    (project / "tests" / "deeper").mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntcltest_files = ["*.test"]\n')
    for folder in (project / "tests", project / "tests" / "deeper"):
        stem = folder.name
        (folder / f"test_{stem}.py").write_text("def test_a():\n    pass\n")
        (folder / f"{stem}.test").write_text(TCLTEST_FILE.replace("{NAME}", stem))
    everything = collected(project, ["tests"])
    python_run, tcltest_run = (collected(project, selection(command)) for command, _ in runs)
    assert len(everything) == 6
    assert sorted(python_run + tcltest_run) == sorted(everything)
    assert all(re.search(r"\.test::", item) for item in tcltest_run) and len(tcltest_run) == 4
    assert not any(re.search(r"\.test::", item) for item in python_run)


@pytest.mark.parametrize("cpus, jobs, parallel", [(2, 2, ["-n", "2"]), (2, None, []),
                                                  (4, 3, ["-n", "3"])])
def test_without_cpus_to_spare_one_run_takes_everything(monkeypatch, tmp_path, cpus, jobs,
                                                        parallel):
    (command, junit), = runs_on(monkeypatch, tmp_path, cpus, jobs)
    assert junit.name == "pytest.xml"
    assert selection(command) == ["tests"]
    assert ("-n" in command) == bool(parallel)
    if parallel:
        assert command[command.index("-n"):command.index("-n") + 2] == parallel
        assert "--no-loadscope-reorder" in command     # gpu_schedule's LONGEST_FIRST order


def test_an_xdist_worker_collects_the_longest_files_first():
    """gpu-check hands out files in the order its workers collect them:
    gpu_schedule's LONGEST_FIRST, then the rest, each file's tests in order."""
    assert all((ROOT / "tests" / name).is_file() for name in LONGEST_FIRST)
    files = ["tests/test_install.py", "tests/test_lifetimes.py", "tests/test_exit.py",
             "tests/test_prompt.py"]
    plain = collected(ROOT, files)
    worker = collected(ROOT, files, PYTEST_XDIST_WORKER="gw0")
    assert sorted(worker) == sorted(plain) and len(plain) > 20
    assert list(dict.fromkeys(item.split("::")[0] for item in worker)) == [
        "tests/test_prompt.py", "tests/test_exit.py", "tests/test_lifetimes.py",
        "tests/test_install.py"]
    for name in files:
        assert ([item for item in worker if item.startswith(name + "::")]
                == [item for item in plain if item.startswith(name + "::")])


MODULE_CACHE = re.compile(r"^_\w+ = \{\}$", re.M)
WIDE_FIXTURE = re.compile(r"""scope=["'](module|class|package|session)|def setup_module|"""
                          r"""def setup_class|def setUpClass""")


def test_the_long_files_tests_go_out_one_at_a_time(tmp_path):
    """Under gpu-check's options, a long file's tests are shared among the
    workers, and go out first; a file kept whole and the other files go
    to one worker each.  Each long file shared out that way has no
    fixture that outlives a test (each worker would set it up again)."""
    for name in LONGEST_FIRST:
        if name not in KEPT_WHOLE:
            text = (ROOT / "tests" / name).read_text()
            assert not WIDE_FIXTURE.search(text), name
            # A module's cache of runs shared by tests: its file says how (SHARED_BY_ID).
            assert bool(MODULE_CACHE.search(text)) == (name in SHARED_BY_ID), name
    assert all(WIDE_FIXTURE.search((ROOT / "tests" / name).read_text()) for name in KEPT_WHOLE)
    tests = tmp_path / "tests"
    tests.mkdir()
    cases = "".join(f"def test_{n}():\n    pass\n" for n in range(4))
    shared = next(name for name in LONGEST_FIRST if name not in KEPT_WHOLE)
    for name in ("test_other.py", KEPT_WHOLE[0]):
        (tests / name).write_text(cases)
    # The kept-whole file goes out first, to one worker; the shared file's
    # cases take long enough for that worker to come back for some of them.
    (tests / shared).write_text("import time\n" + cases.replace("pass", "time.sleep(1)"))
    r = pytest_in(tmp_path, ["-p", "gpu_schedule", "-v", "-n", "2", "--dist", "loadfile",
                             "--no-loadscope-reorder", "tests"])
    ran = re.findall(r"\[(gw\d)\] .*PASSED tests/(\S+)::(test_\d)", r.stdout)
    assert len(ran) == 12, r.stdout
    workers = {name: {worker for worker, file, _ in ran if file == name}
               for name in ("test_other.py", KEPT_WHOLE[0], shared)}
    assert workers[shared] == {"gw0", "gw1"}
    assert len(workers[KEPT_WHOLE[0]]) == 1 and len(workers["test_other.py"]) == 1
    for worker in ("gw0", "gw1"):
        assert [file for w, file, _ in ran if w == worker][0] != "test_other.py"


def test_tests_that_share_a_cached_run_go_out_together():
    """test_docs.py runs a page once for all its blocks, test_exit.py an exit
    case once for both its checks: under gpu-check each such group is one
    work unit, so no two workers run the same page or case, and the groups
    are as many as the pages and cases."""
    docs = collected(ROOT, ["tests/test_docs.py"])
    pages = {item.split("[", 1)[1].split("#", 1)[0] for item in docs if "#" in item}
    units = {work_unit(item) for item in docs if "#" in item}
    assert len(pages) > 20 and len(units) == len(pages)
    for item in docs:
        if "#" in item:
            page = item.split("[", 1)[1].split("#", 1)[0]
            assert work_unit(item) == f"tests/test_docs.py[{page}]", item
    exits = collected(ROOT, ["tests/test_exit.py", "-k", "on_the_stack"])
    cases = {item.split("[", 1)[1][:-1] for item in exits}
    assert len(exits) == 2 * len(cases) and len({work_unit(item) for item in exits}) == len(cases)
    # Tests that share nothing still go out alone.
    assert work_unit("tests/test_docs.py::test_readme_has_examples") == \
        "tests/test_docs.py::test_readme_has_examples"
