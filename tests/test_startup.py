"""tclamp with Tcl as the host: a plain tclsh, started the way users do."""
import sys
import tomllib

from conftest import ROOT, run_tclsh


def test_pipe_prints_result_and_nothing_on_stderr(tclsh):
    r = tclsh("package require tclamp\nputs [py eval 1+1]\n")
    assert (r.returncode, r.stdout, r.stderr) == (0, "2\n", "")


def test_version_matches_project(tclsh):
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    r = tclsh("puts [package require tclamp]\n")
    assert r.stdout == version + "\n"


def test_uses_checkout_environment_with_torch(tclsh):
    r = tclsh("package require tclamp\npy import sys\nputs [py eval sys.prefix]\n"
              "puts [py eval {__import__('torch').__version__}]\n"
              "puts [py eval {__import__('tclamp').__file__}]\n")
    prefix, torch_version, package_file = r.stdout.splitlines()
    assert prefix == sys.prefix
    assert torch_version == __import__("torch").__version__
    assert package_file == str(ROOT / "src" / "tclamp" / "__init__.py")


def test_tclamp_python_selects_environment(tclsh):
    r = tclsh("package require tclamp\npy import sys\nputs [py eval sys.executable]\n",
              TCLAMP_PYTHON=sys.executable)
    assert r.stdout.strip() == sys.executable


def test_tclamp_python_without_torch_is_a_tcl_error(tclsh):
    # The base interpreter of the virtual environment has no torch.
    r = tclsh("puts [catch {package require tclamp} m]\nputs $m\nputs alive\n",
              TCLAMP_PYTHON=sys._base_executable)
    lines = r.stdout.splitlines()
    assert lines[0] == "1"
    assert "No module named 'torch'" in lines[1]
    assert lines[-1] == "alive" and r.returncode == 0


def test_failed_startup_is_an_error_and_tclsh_goes_on(tclsh):
    r = tclsh("puts [catch {package require tclamp} m o]\nputs $m\n"
              "puts [dict get $o -errorcode]\nputs alive\n", TCLAMP_PYTHON="/nonexistent")
    assert r.stdout.splitlines() == [
        "1", 'tclamp: cannot start Python: "/nonexistent" is not an executable file',
        "TCLAMP PYTHON_START", "alive"]
    assert r.returncode == 0


def test_atexit_runs_and_output_is_flushed_through_a_pipe(tclsh):
    r = tclsh("package require tclamp\n"
              "py exec {import atexit; atexit.register(print, 'atexit ran')}\n"
              "py exec {print('buffered line')}\n"
              "puts {from tcl}\n")
    assert sorted(r.stdout.splitlines()) == ["atexit ran", "buffered line", "from tcl"]
    assert r.stdout.index("buffered line") < r.stdout.index("atexit ran")


def test_exit_from_inside_python_flushes(tclsh):
    r = tclsh("package require tclamp\n"
              "py exec {import atexit; atexit.register(print, 'atexit ran')}\n"
              "py exec {print('before exit'); import tclamp; tclamp.tcl.eval('exit 3')}\n")
    assert r.returncode == 3
    assert r.stdout.splitlines() == ["before exit", "atexit ran"]


def test_python_installs_no_signal_handlers(tclsh):
    # The process catches no signal: Ctrl-C stops tclsh as it always does.
    r = tclsh("package require tclamp\npy import signal\n"
              "puts [exec grep SigCgt /proc/[pid]/status]\n")
    assert int(r.stdout.split()[1], 16) & ~(0b11 << 31) == 0   # bits 32-33: libc's own


def test_lappend_auto_path_works_too(tclsh):
    r = tclsh(f"lappend auto_path {ROOT / 'tcl'}\npackage require tclamp\n"
              "puts [torch::autocast_get_dtype cpu]\n", TCLLIBPATH="")
    assert r.stdout == "bfloat16\n"


def test_all_tcl_runs_the_tcltest_files_without_pytest(tclsh):
    r = tclsh(f"set argv {{-file autocast.test}}\nsource {ROOT / 'tests' / 'all.tcl'}\n",
              TCLAMP_PYTHON=sys.executable)
    assert "Failed\t0" in r.stdout and "Passed\t1" in r.stdout


def test_install_tcl_for_a_system_tclsh(tmp_path):
    import subprocess
    target = tmp_path / "lib" / "tclamp"
    subprocess.run(["make", "-s", "install-tcl", f"TCL_PKG_DIR={target}", f"PY={sys.executable}"],
                   cwd=ROOT, check=True, capture_output=True)
    r = run_tclsh(f"lappend auto_path {tmp_path / 'lib'}\nputs [package require tclamp]\n"
                  "puts [torch::autocast_get_dtype cpu]\n", tmp_path, TCLLIBPATH="")
    assert r.stdout.split() == [tclamp_version(), "bfloat16"]
    subprocess.run(["make", "-s", "uninstall-tcl", f"TCL_PKG_DIR={target}"], cwd=ROOT, check=True)
    assert not target.exists()


def tclamp_version():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
