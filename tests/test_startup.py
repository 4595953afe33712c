"""tclamp with Tcl as the host: a plain tclsh, started the way users do."""
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:     # Python 3.10: pytest brings tomli, the same parser
    import tomli as tomllib

import tclamp
from conftest import ROOT, TCLSH, needs_setup
from tclamp import pkgindex

VERSION = (ROOT / "src" / "tclamp" / "VERSION").read_text().strip()
# The Python this environment was made from, which has no torch
# (sys._base_executable is that only from Python 3.11 on).
BASE_PYTHON = os.path.join(sys.base_prefix, "bin", "python{}.{}".format(*sys.version_info))


def test_pipe_prints_result_and_nothing_on_stderr(tclsh):
    r = tclsh("package require tclamp\nputs [py eval 1+1]\n")
    assert (r.returncode, r.stdout, r.stderr) == (0, "2\n", "")


def test_one_version_everywhere(tclsh):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"file": "src/tclamp/VERSION"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)
    assert tclamp.__version__ == importlib.metadata.version("tclamp") == VERSION
    r = tclsh("puts [package require tclamp]\nputs [package present tclamp]\n"
              "puts [dict get [tclamp::info] tclamp_version]\n")
    assert r.stdout.split() == [VERSION] * 3
    cli = subprocess.run([sys.executable, "-m", "tclamp", "--version"], capture_output=True,
                         text=True, check=True)
    assert cli.stdout == f"tclamp {VERSION}\n"
    # Compiled into the bridge (and so into its loader), and written into
    # the package indexes only when they are generated.
    assert tclamp._bridge.VERSION == VERSION
    written = [path for path in [ROOT / "pyproject.toml", ROOT / "setup.py",
                                 *ROOT.glob("src/tclamp/*.py"), *ROOT.glob("src/tclamp/*.tcl"),
                                 *ROOT.glob("src/tclamp/*.[ch]")]
               if path.name != "pkgIndex.tcl" and VERSION in path.read_text()]
    assert written == []
    if (ROOT / ".git").exists():        # not in make matrix's copies
        needs_setup("git", shutil.which("git"))     # a GPU machine's copy may have none
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split()
        assert not [name for name in tracked if name.endswith("pkgIndex.tcl")]


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


@pytest.mark.parametrize("route", ["TCLAMP_PYTHON", "::tclamp::python"])
def test_an_empty_choice_of_python_falls_back_to_the_index(tclsh, route):
    """docs/install.md, which Python starts: an empty TCLAMP_PYTHON, or an
    empty ::tclamp::python, names none, and the index's Python starts.  An
    empty ::tclamp::python was taken as the choice: `no Python environment
    found: set TCLAMP_PYTHON ...`, with the checkout's environment there."""
    setting = "namespace eval ::tclamp {set python {}}\n" if route == "::tclamp::python" else ""
    r = tclsh(setting + "package require tclamp\npy import sys\nputs [py eval sys.prefix]\n"
              "puts $::tclamp::python\n",
              **({"TCLAMP_PYTHON": ""} if route == "TCLAMP_PYTHON" else {}))
    assert r.stdout.splitlines() == [sys.prefix, sys.executable], r.stderr


@pytest.mark.parametrize("route", ["TCLAMP_PYTHON", "::tclamp::python"])
def test_a_blank_or_missing_choice_of_python_is_an_error_naming_it(tclsh, route):
    """Only an empty choice names no Python: one of spaces or a tab is a
    name, looked up on PATH as any name without a slash, and one with a
    slash that names no file is not an executable file; each the same
    TCLAMP PYTHON_START by either route, the tclsh going on."""
    for python, said in ((" ", '" " is not a command on PATH'),
                         ("\t", '"\t" is not a command on PATH'),
                         ("no/such/python", '"no/such/python" is not an executable file')):
        setting = (f"namespace eval ::tclamp {{variable python {{{python}}}}}\n"
                   if route == "::tclamp::python" else "")
        r = tclsh(setting + CHECK, **({"TCLAMP_PYTHON": python} if route == "TCLAMP_PYTHON"
                                      else {}), PATH="/usr/bin:/bin")
        assert r.stdout.splitlines() == [
            "1", f"tclamp: cannot start Python: {said}", "TCLAMP PYTHON_START", "", "alive"]


@pytest.mark.parametrize("route", ["TCLAMP_PYTHON", "::tclamp::python"])
def test_a_python_named_without_a_slash_is_found_on_path(tclsh, route):
    """`TCLAMP_PYTHON=python3` starts the python3 a shell would: the first
    on PATH (not one in the current directory)."""
    python = Path(sys.executable)
    path = f"{python.parent}:{os.environ['PATH']}"
    script = "package require tclamp\npy import sys\nputs [py eval sys.executable]\n"
    if route == "TCLAMP_PYTHON":
        r = tclsh(script, TCLAMP_PYTHON=python.name, PATH=path)
    else:
        r = tclsh(f"namespace eval tclamp {{variable python {python.name}}}\n" + script,
                  PATH=path)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{python}\n", "")


def test_a_python_named_without_a_slash_and_not_on_path(tclsh, tmp_path):
    talker = tmp_path / "talker"
    talker.write_text("#!/bin/sh\necho 'hello from a shell script'\n")
    talker.chmod(0o755)
    # Not on PATH: the current directory counts only as a shell counts it.
    for python in ("tclamp-no-such-python", "talker"):
        r = tclsh(CHECK, TCLAMP_PYTHON=python, PATH="/usr/bin:/bin")
        assert r.stdout.splitlines() == [
            "1", f'tclamp: cannot start Python: "{python}" is not a command on PATH',
            "TCLAMP PYTHON_START", "", "alive"]
    # An empty entry is the current directory, and so is an empty PATH (one
    # empty entry, as sh, bash and execvp take it; before, no entry at all).
    for path in (":/usr/bin:/bin", ""):
        r = tclsh(CHECK, TCLAMP_PYTHON="talker", PATH=path)
        assert r.stdout.splitlines() == [
            "1", f'tclamp: cannot start Python: "{talker}" is not a Python interpreter '
                 "(hello from a shell script)", "TCLAMP PYTHON_START", "", "alive"]


def test_a_python_named_without_a_slash_and_path_unset_is_looked_up_on_the_default_path(tclsh):
    """With PATH unset, execvp and sh search the system's default path
    (/bin:/usr/bin on Linux); before, load.tcl searched nothing. `true`
    prints nothing, so the probe shows which file was found."""
    r = tclsh(CHECK, TCLAMP_PYTHON="true", PATH=None)
    assert r.stdout.splitlines() == [
        "1", 'tclamp: cannot start Python: "/bin/true" is not a Python interpreter '
             "(it printed nothing)", "TCLAMP PYTHON_START", "", "alive"]
    # and a name it does not hold says where it was looked for
    r = tclsh(CHECK, TCLAMP_PYTHON="no-such-python-here", PATH=None)
    assert r.stdout.splitlines() == [
        "1", 'tclamp: cannot start Python: "no-such-python-here" is not a command on the '
             "default path /bin:/usr/bin (PATH is unset)", "TCLAMP PYTHON_START", "", "alive"]


def test_a_path_entry_beginning_with_a_tilde_is_a_name_as_the_os_takes_it(tclsh, tmp_path):
    """A PATH entry is a directory name as exec takes it: ~/bin is a
    directory named ~ (in the current directory), not the home directory's
    bin.  Tcl 8.6's file commands read a leading ~ as the home directory:
    load.tcl checked and probed ~/bin/python in the home directory, and the
    bridge then started the literal path (or failed: not an executable
    file), not the one checked."""
    python = Path(sys.executable)
    home_bin = tmp_path / "home" / "bin"
    home_bin.mkdir(parents=True)
    talker = home_bin / python.name
    talker.write_text("#!/bin/sh\necho 'hello from a shell script'\n")
    talker.chmod(0o755)
    r = tclsh("package require tclamp\npy import sys\nputs [py eval sys.executable]\n",
              TCLAMP_PYTHON=python.name, HOME=str(tmp_path / "home"),
              PATH=f"~/bin:{python.parent}:/usr/bin:/bin")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"{python}\n", "")


def test_tclamp_python_keeps_its_own_path_ahead_of_the_index_environment(tclsh, tmp_path):
    """The index's package sits in another environment's site-packages than
    the Python TCLAMP_PYTHON picks: tclamp comes from there (the Python
    files of the bridge Tcl loaded), and nothing else does."""
    site = tmp_path / "index-env" / "site-packages"
    site.mkdir(parents=True)
    (site / "tclamp").symlink_to(ROOT / "src" / "tclamp")
    (site / "amp_marker.py").write_text("WHERE = 'the index environment'\n")
    index = tmp_path / "lib" / "tclamp" / "pkgIndex.tcl"
    index.parent.mkdir(parents=True)
    index.write_text(pkgindex.index_text(VERSION, "a test's", site / "tclamp"))
    r = tclsh("package require tclamp\npy import sys\nputs [py eval sys.executable]\n"
              "puts [py eval {__import__('tclamp').__file__}]\n"
              "puts [py eval {__import__('torch').__file__}]\n"
              "puts [py eval {str(__import__('importlib.util').util.find_spec('amp_marker'))}]\n"
              "puts [join [py eval sys.path] |]\n",
              TCLAMP_PYTHON=sys.executable, TCLLIBPATH=str(tmp_path / "lib"))
    own_path = subprocess.run([sys.executable, "-c", "import sys; print('|'.join(sys.path[1:]))"],
                              capture_output=True, text=True, check=True, cwd=tmp_path,
                              env={k: v for k, v in os.environ.items() if k != "TCLAMP_PYTHON"})
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [sys.executable, str(site / "tclamp" / "__init__.py"),
                                     __import__("torch").__file__, "None", own_path.stdout.strip()]


@pytest.mark.parametrize("route", ["TCLAMP_PYTHON", "::tclamp::python"])
def test_a_non_ascii_python_path_starts_in_a_c_locale(tclsh, tmp_path, route):
    """In a C locale Tcl's system encoding is ISO 8859-1: the path it holds
    (ä's two UTF-8 bytes read as two characters) goes back to the OS, and to
    Python's config, as those bytes."""
    venv = tmp_path / "vä x"
    venv.symlink_to(sys.prefix)
    python = venv / "bin" / "python"
    script = ("package require tclamp\npy import sys\n"
              "puts [py eval {ascii(sys.executable)}]\nputs [py eval {ascii(sys.prefix)}]\n")
    if route == "TCLAMP_PYTHON":
        r = tclsh(script, TCLAMP_PYTHON=str(python), LC_ALL="C")
    else:
        r = tclsh(f"namespace eval tclamp {{variable python {{{python}}}}}\n" + script,
                  LC_ALL="C")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [ascii(str(python)), ascii(str(venv))]


def test_the_auto_path_entry_tclamp_adds_names_its_folder_in_a_c_locale(tclsh, tmp_path):
    """Every interpreter that gets tclamp has the package's folder put on
    auto_path, by Python: in a C locale Tcl 8.6 names files in ISO 8859-1
    while Python's names are UTF-8, so the entry must carry the folder's
    bytes as Tcl reads them.  A tclsh loads tclamp from a checkout under é;
    a Python program's child interpreter finds tclamp through that entry
    alone (and Tcl's own library)."""
    (tmp_path / "é").mkdir()
    checkout = fake_checkout(tmp_path / "é")
    package = checkout / "src" / "tclamp"
    r = tclsh("package require tclamp\nset dir [lindex $auto_path end]\n"
              "puts [list [file isfile [file join $dir load.tcl]] "
              "[binary encode hex [encoding convertto [encoding system] $dir]]]\n",
              TCLLIBPATH=str(checkout / "tcl"), TCLAMP_PYTHON=sys.executable, LC_ALL="C")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"1 {os.fsencode(package).hex()}\n", "")

    program = (f"import sys\nsys.path.insert(0, {str(checkout / 'src')!r})\nimport tclamp\n"
               "print(tclamp.__file__)\n"
               "print(tclamp.Interp().eval('interp create child\\n"
               "child eval [list set ::auto_path [list [info library] [lindex $::auto_path end]]]\\n"
               "list [encoding system] [child eval {package require tclamp}]'))\n")
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                       cwd=tmp_path, env=dict(os.environ, LC_ALL="C"), timeout=300)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [str(package / "__init__.py"), f"iso8859-1 {VERSION}"]


def test_the_loader_opens_a_libpython_under_a_non_ascii_path_in_a_c_locale(tclsh, tmp_path):
    """load.tcl hands the loader the libpython path that Python printed; in
    a C locale Tcl holds it decoded as ISO 8859-1, and the OS must get the
    original bytes back (here the path comes from glob, decoded the same way)."""
    v = lambda name: sysconfig.get_config_var(name) or ""
    name = v("INSTSONAME") or v("LDLIBRARY")
    # Where load.tcl's probe looks; a tclsh starts Python only from a shared one.
    libpython = next(Path(d, name) for d in (v("LIBDIR"), Path(v("LIBDIR"), v("MULTIARCH")),
                                             v("LIBPL"), Path(sys.base_prefix, "lib"))
                     if d and Path(d, name).is_file())
    place = tmp_path / "lib" / "pä x"
    place.mkdir(parents=True)
    (place / libpython.name).symlink_to(libpython)
    script = f"""
set dir {{{Path(tclamp.__file__).parent}}}
set major [expr {{[package vsatisfies [package provide Tcl] 9.0-] ? 9 : 8}}]
load [lindex [glob -directory $dir _loader$major*[info sharedlibextension]] 0] Tclampload
set libpython [lindex [glob -directory {{{tmp_path / "lib"}}} */*] 0]
puts [catch {{::tclamp::load_python $libpython}} said]
puts [list $said [::tclamp::python_loaded]]
"""
    r = tclsh(script, LC_ALL="C")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == ["0", f"{{}} {sys.version_info[0]}.{sys.version_info[1]}"]


# What Tcl loaded of the bridge (load.tcl loads its loader first, which
# loads no Python).
BRIDGE_LOADED = "puts [lsearch -all -inline -index 1 [info loaded] Tclamp]\n"
CHECK = ("puts [catch {package require tclamp} m o]\nputs $m\nputs [dict get $o -errorcode]\n"
         + BRIDGE_LOADED + "puts alive\n")


def test_tclamp_python_without_torch_is_a_tcl_error(tclsh):
    r = tclsh(CHECK, TCLAMP_PYTHON=BASE_PYTHON)
    assert r.stdout.splitlines() == [
        "1", f"tclamp: the Python at {BASE_PYTHON} has no torch (install it there)",
        "TCLAMP PYTHON_START", "", "alive"]
    assert (r.returncode, r.stderr) == (0, "")


def test_a_free_threaded_python_without_its_gil_is_refused_at_once(tclsh, tmp_path):
    # This Python, with the probe's answer made that of a free-threaded
    # Python whose GIL is off (no such Python is installed here).
    nogil = tmp_path / "python"
    nogil.write_text(f"#!/bin/sh\n'{sys.executable}' \"$@\" | sed 's/ True gil / True nogil /'\n")
    nogil.chmod(0o755)
    r = tclsh(CHECK, TCLAMP_PYTHON=str(nogil))
    assert r.stdout.splitlines() == [
        "1", f"tclamp: the Python at {nogil} is free-threaded and runs without the GIL, which "
             "tclamp's bridge relies on (see the threading notes in bridge.h): run it with the "
             "GIL on (PYTHON_GIL=1) or use a Python built with the GIL",
        "TCLAMP PYTHON_START", "", "alive"]
    assert (r.returncode, r.stderr) == (0, "")


def test_a_free_threaded_python_without_its_gil_cannot_import_tclamp():
    r = subprocess.run([sys.executable, "-c", "import sys\nsys._is_gil_enabled = lambda: False\n"
                        "try:\n    import tclamp\nexcept ImportError as e:\n    print(e)\n"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == ("tclamp: this Python is free-threaded and runs without the GIL, which "
                        "tclamp's bridge relies on (see the threading notes in bridge.h): run it "
                        "with the GIL on (PYTHON_GIL=1) or use a Python built with the GIL\n")


def test_a_failed_check_starts_nothing_and_tcl_can_try_again(tclsh):
    r = tclsh("catch {package require tclamp}\n" + BRIDGE_LOADED +
              f"set env(TCLAMP_PYTHON) {{{sys.executable}}}\n"
              "puts [package require tclamp]\nputs [torch::autocast_get_dtype cpu]\n",
              TCLAMP_PYTHON=BASE_PYTHON)
    assert r.stdout.splitlines() == ["", VERSION, "bfloat16"]


def other_python():
    """A Python of another minor version than this one, or None."""
    found = glob.glob(os.path.expanduser("~/.pyenv/versions/*/bin/python3.*[0-9]"))
    found += filter(None, (shutil.which(f"python3.{minor}") for minor in range(8, 16)))
    for python in found:
        if not python.endswith(f"python{sys.version_info[0]}.{sys.version_info[1]}"):
            return python
    return None


def test_tclamp_python_of_another_version_is_named(tclsh):
    python = other_python()
    if python is None:
        pytest.skip("no Python of another version on this machine")
    version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    built = f"{sys.version_info[0]}.{sys.version_info[1]}"
    r = tclsh(CHECK, TCLAMP_PYTHON=python)
    assert r.stdout.splitlines() == [
        "1", f"tclamp: the Python at {python} is {version}, but this tclamp was built for "
             f"Python {built}: set TCLAMP_PYTHON to a Python {built} that has torch, or "
             "install tclamp into the Python you want",
        "TCLAMP PYTHON_START", "", "alive"]


def test_tclamp_python_that_is_python_2_is_named_with_its_version(tclsh):
    found = glob.glob(os.path.expanduser("~/.pyenv/versions/2.*/bin/python2.[0-9]"))
    found += filter(None, [shutil.which("python2.7")])
    if not found:
        pytest.skip("no Python 2 on this machine")
    version = subprocess.run([found[0], "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    built = f"{sys.version_info[0]}.{sys.version_info[1]}"
    r = tclsh(CHECK, TCLAMP_PYTHON=found[0])
    assert r.stdout.splitlines() == [
        "1", f"tclamp: the Python at {found[0]} is {version}, but this tclamp was built for "
             f"Python {built}: set TCLAMP_PYTHON to a Python {built} that has torch, or "
             "install tclamp into the Python you want",
        "TCLAMP PYTHON_START", "", "alive"]


def test_tclamp_python_whose_probe_fails_says_the_traceback_error(tclsh, tmp_path):
    """A Python that fails (its site broken, say): the traceback's last line,
    the error, rather than its first, which says nothing."""
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'Traceback (most recent call last):'\n"
                      "echo '  File \"<string>\", line 3, in <module>'\n"
                      "echo \"ModuleNotFoundError: No module named 'sysconfig'\" >&2\nexit 1\n")
    broken.chmod(0o755)
    r = tclsh(CHECK, TCLAMP_PYTHON=str(broken))
    assert r.stdout.splitlines() == [
        "1", f'tclamp: cannot start Python: "{broken}" is not a Python interpreter '
             "(ModuleNotFoundError: No module named 'sysconfig')",
        "TCLAMP PYTHON_START", "", "alive"]


def test_tclamp_python_that_is_no_python(tclsh, tmp_path):
    talker = tmp_path / "talker"
    talker.write_text("#!/bin/sh\necho 'hello from a shell script'\n")
    talker.chmod(0o755)
    quiet = tmp_path / "quiet"
    quiet.write_text("#!/bin/sh\nexit 0\n")
    quiet.chmod(0o755)
    expected = {
        str(tmp_path): f'tclamp: cannot start Python: "{tmp_path}" is a directory, '
                       "not a python executable",
        str(talker): f'tclamp: cannot start Python: "{talker}" is not a Python interpreter '
                     "(hello from a shell script)",
        str(quiet): f'tclamp: cannot start Python: "{quiet}" is not a Python interpreter '
                    "(it printed nothing)",
        str(ROOT / "README.md"): f'tclamp: cannot start Python: "{ROOT / "README.md"}" '
                                 "is not an executable file",
    }
    for python, message in expected.items():
        r = tclsh(CHECK, TCLAMP_PYTHON=python)
        assert r.stdout.splitlines() == ["1", message, "TCLAMP PYTHON_START", "", "alive"]


def test_package_forget_then_require_again(tclsh):
    r = tclsh("package require tclamp\ntorch::autocast_enable cpu float16\n"
              "package forget tclamp\nputs [catch {package present tclamp}]\n"
              "puts [package require tclamp]\nputs [package present tclamp]\n"
              "puts [torch::autocast_get_dtype cpu]\nputs [llength [info loaded]]\n")
    assert r.stdout.splitlines() == ["1", VERSION, VERSION, "float16", "2"]   # loader, bridge


def test_scanning_for_packages_only_declares_tclamp(tclsh):
    """Tcl sources every pkgIndex.tcl on its path when a package is missing:
    tclamp's index then runs nothing but `package ifneeded`."""
    r = tclsh("catch {package require no_such_package}\n"
              "puts [package versions tclamp]\nputs [namespace exists ::tclamp]\n"
              "puts [llength [info loaded]]\nputs [info exists dir]\n")
    assert r.stdout.splitlines() == [VERSION, "0", "0", "0"]


def fake_checkout(tmp_path):
    """A checkout's layout, sharing this checkout's package."""
    checkout = tmp_path / "checkout"
    (checkout / "tcl").mkdir(parents=True)
    (checkout / "src").mkdir()
    (checkout / "src" / "tclamp").symlink_to(ROOT / "src" / "tclamp")
    shutil.copy(ROOT / "tcl" / "pkgIndex.tcl", checkout / "tcl")
    return checkout


def test_checkout_index_starts_the_recorded_python(tclsh, tmp_path):
    """`make VENV=...` records its environment's python in tcl/python-path."""
    checkout = fake_checkout(tmp_path)
    recorded = checkout / "tcl" / "python-path"
    recorded.write_text(f"{tmp_path}/elsewhere/bin/python\n")
    r = tclsh(CHECK, TCLLIBPATH=str(checkout / "tcl"))
    assert r.stdout.splitlines()[:3] == [
        "1", f'tclamp: cannot start Python: "{tmp_path}/elsewhere/bin/python" is not an '
             "executable file", "TCLAMP PYTHON_START"]
    recorded.write_text(sys.executable + "\n")
    r = tclsh("package require tclamp\npy import sys\nputs $::tclamp::python\n"
              "puts [py eval sys.executable]\n", TCLLIBPATH=str(checkout / "tcl"))
    assert r.stdout.splitlines() == [sys.executable, sys.executable]


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
    assert (r.returncode, r.stdout) == (0, "bfloat16\n"), r.stderr


# Its own limit, not gpu-check's per-test --timeout (300 s), which a loaded
# machine's all.tcl can pass.
@pytest.mark.timeout(900)
def test_all_tcl_runs_the_tcltest_files_without_pytest(tmp_path):
    """`tclsh tests/all.tcl` as the README says, with no environment at all:
    every .test file runs to its summary, and the totals add up."""
    r = subprocess.run([shutil.which(TCLSH), str(ROOT / "tests" / "all.tcl")], cwd=tmp_path,
                       env={}, capture_output=True, text=True, timeout=900)
    summaries = re.findall(r"^(\S+):\tTotal\t(\d+)\tPassed\t(\d+)\tSkipped\t(\d+)\tFailed\t(\d+)$",
                           r.stdout, re.M)
    files = sorted(path.name for path in (ROOT / "tests").glob("*.test"))
    assert [summary[0] for summary in summaries] == files + ["all.tcl"], r.stdout + r.stderr
    counts = [[int(n) for n in summary[1:]] for summary in summaries]
    assert counts[-1] == [sum(column) for column in zip(*counts[:-1])]
    total, passed, skipped, failed = counts[-1]
    assert (failed, total) == (0, passed + skipped)
    assert r.stdout.endswith(f"Ran {len(files)} test files.\n") and r.returncode == 0


def test_all_tcl_echoes_output_that_is_no_utf8_and_counts_the_file(tmp_path):
    """A test file whose case writes bytes that are no UTF-8 (a raw byte, a
    surrogate's three bytes): all.tcl echoes them as Tcl 8.6 reads and
    writes them, and counts the file by its summary.  On Tcl 9 in a UTF-8
    locale its pipe refused them: the rest of the file's output was lost
    and the file, whose case passed, was reported as printing no summary
    (exit status 1).  (In the C locale Tcl reads and writes ISO 8859-1,
    which takes every byte.)"""
    (tmp_path / "raw.test").write_text(
        "package require tcltest\n"
        "tcltest::test raw-1 {writes bytes that are no UTF-8} -body {\n"
        "    chan configure stdout -translation binary\n"
        '    puts -nonewline "\\xff\\n\\xed\\xa0\\x80\\n"\n'
        "    flush stdout\n"
        "    chan configure stdout -translation auto -encoding utf-8\n"
        "    puts {after the bytes}\n"
        "    return ok\n"
        "} -result ok\n"
        "tcltest::cleanupTests\n")
    r = subprocess.run([shutil.which(TCLSH), str(ROOT / "tests" / "all.tcl"),
                        "-testdir", str(tmp_path)], cwd=tmp_path, env={"LANG": "C.UTF-8"},
                       capture_output=True, timeout=120)
    assert (r.stdout, r.stderr, r.returncode) == (
        b"raw.test\n\xc3\xbf\n\xed\xa0\x80\nafter the bytes\n"
        b"raw.test:\tTotal\t1\tPassed\t1\tSkipped\t0\tFailed\t0\n\n"
        b"all.tcl:\tTotal\t1\tPassed\t1\tSkipped\t0\tFailed\t0\n"
        b"Ran 1 test files.\n", b"", 0)
