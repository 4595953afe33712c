"""The set-up's own checks: each must be able to fail, or it proves nothing."""
import os
import shutil
import stat
import subprocess
import sys

import pytest

from conftest import ROOT, TCL_VERSION, TCLSH, WISH, needs_make, needs_setup

pytestmark = needs_make


def fake_tclsh(tmp_path, refuse):
    """A tclsh in which `package require <refuse>` fails, as on a machine
    without that package."""
    script = tmp_path / "tclsh"
    script.write_text(
        "#!/bin/sh\n"
        "{ printf '%s\\n' 'rename package tcl_package' "
        f"'proc package args {{ if {{$args eq {{require {refuse}}}}} {{error \"cannot find package {refuse}\"}}; "
        f"uplevel 1 [list tcl_package {{*}}$args] }}'; cat; }} | {TCLSH} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def check_thread(tclsh):
    return subprocess.run(["make", "-s", "check-thread", f"TCLSH={tclsh}"], cwd=ROOT,
                          capture_output=True, text=True).returncode


def test_thread_check_passes_where_thread_is_installed():
    assert check_thread(TCLSH) == 0


def test_thread_check_fails_without_thread(tmp_path):
    assert check_thread(fake_tclsh(tmp_path, "Thread")) != 0
    # ...and the fake is only missing Thread.
    r = subprocess.run([str(fake_tclsh(tmp_path, "Thread"))], input="puts [package require tcltest]\n",
                       capture_output=True, text=True)
    assert r.stdout.strip().startswith("2.")


def needs_the_rest_set_up():
    """The tests below take away the Thread package alone: elsewhere make
    setup has installed the rest, which a GPU machine lacks."""
    needs_setup("what make setup installs (Tcl's headers, Tk, Xvfb, valgrind)",
                os.environ.get("TCL_CONFIG") and all(map(shutil.which, (WISH, "Xvfb", "valgrind"))))


def test_setup_would_install_what_is_missing(tmp_path):
    needs_the_rest_set_up()
    r = subprocess.run(["make", "-n", "system-packages", f"TCLSH={fake_tclsh(tmp_path, 'Thread')}",
                        f"WISH={WISH}"],
                       cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
    # Debian's name for the Thread package of this Tcl version
    thread_deb = "tcl-thread" if TCL_VERSION < (9, 0) else "tcl{}.{}-thread".format(*TCL_VERSION)
    assert f"missing='{thread_deb}'" in r.stdout


def fake_apt(tmp_path, known):
    """apt-get, apt-cache and sudo that only record what they are asked:
    apt-cache knows the packages in `known`; apt-get install writes its
    packages to installed.txt."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        "sudo": 'exec "$@"\n',
        "apt-cache": f'case " {" ".join(known)} " in *" $2 "*) exit 0;; esac\nexit 100\n',
        "apt-get": f'[ "$1" = update ] && exit 0\nshift 3\necho "$@" > {tmp_path}/installed.txt\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def thread_package_installed(tmp_path, known):
    """What `make system-packages` for a Tcl 9.0 without Thread installs."""
    needs_the_rest_set_up()
    env = dict(os.environ, PATH=f"{fake_apt(tmp_path, known)}:{os.environ['PATH']}")
    subprocess.run(["make", "-s", "system-packages", f"TCLSH={fake_tclsh(tmp_path, 'Thread')}",
                    "TCL_VERSION=9.0", f"WISH={WISH}"],
                   cwd=ROOT, capture_output=True, text=True, env=env)
    return (tmp_path / "installed.txt").read_text()


def test_setup_installs_tcl9_thread_by_its_own_name_where_debian_has_it(tmp_path):
    assert thread_package_installed(tmp_path, ["tcl9.0-thread", "tcl-thread"]) == "tcl9.0-thread\n"


def test_setup_installs_tcl_thread_where_it_serves_both_tcls(tmp_path):
    # sid: no tcl9.0-thread, one tcl-thread for 8.6 and 9.0
    assert thread_package_installed(tmp_path, ["tcl-thread"]) == "tcl-thread\n"


def fake_python(tmp_path, lacks, prefix="/usr", first_line=None, debian=None):
    """A python3 that is this test run's Python, but which code run with -c
    sees as a Python in `prefix` (sys.prefix, sys.base_prefix and
    sys.executable say so; sysconfig, read before, keeps this Python's
    paths), and in which a check for a thing of `lacks` ("ensurepip",
    "Python.h") fails.  debian (default: prefix is /usr): its sysconfig
    has the install scheme of Debian's patches, deb_system, as Debian's
    own Python (and a venv made from it) has.  first_line: what it prints
    before anything (a wrapper's own line)."""
    if debian is None:
        debian = prefix == "/usr"
    python = tmp_path / "python3"
    lines = ["#!/bin/sh"]
    if first_line:
        lines.append(f'echo "{first_line}"')
    if lacks:
        lines.append('case "$*" in ' + "|".join(f"*{thing}*" for thing in lacks) + ") exit 1;; esac")
    # (whether this run's Python is Debian's or not)
    scheme = ("names = tuple(n for n in sysconfig.get_scheme_names() if n != \"deb_system\")"
              + (' + (\"deb_system\",)' if debian else "")
              + "; sysconfig.get_scheme_names = lambda: names; ")
    shim = ("import sys, sysconfig; sysconfig.get_paths(); " + scheme +
            f'sys.prefix = sys.base_prefix = "{prefix}"; '
            f'sys.executable = "{prefix}/bin/python3"; exec(sys.argv.pop(1))')
    lines.append(f'[ "$1" = -c ] && shift && exec {sys.executable} -c \'{shim}\' "$@"')
    lines.append(f'exec {sys.executable} "$@"')
    python.write_text("\n".join(lines) + "\n")
    python.chmod(0o755)
    return python


def test_setup_installs_debian_s_venv_and_headers_for_a_python_without_them(tmp_path):
    """Debian's python3 has no ensurepip (python3.X-venv) and no Python.h
    (python3.X-dev) until they are installed: a fresh machine's set-up
    failed at `python3 -m venv`, and without a venv at the bridge's build."""
    needs_the_rest_set_up()
    python = fake_python(tmp_path, ["ensurepip", "Python.h"])
    version = "{}.{}".format(*sys.version_info[:2])
    env = dict(os.environ, PATH=f"{fake_apt(tmp_path, [])}:{os.environ['PATH']}")
    make = ["make", "-s", "system-packages", f"PYTHON={python}", f"WISH={WISH}"]
    subprocess.run(make + [f"VENV={tmp_path / 'new-venv'}"], cwd=ROOT, capture_output=True, env=env)
    assert (tmp_path / "installed.txt").read_text() == f"python{version}-venv python{version}-dev\n"
    # where the environment is made already, only the headers are missing
    subprocess.run(make, cwd=ROOT, capture_output=True, env=env)
    assert (tmp_path / "installed.txt").read_text() == f"python{version}-dev\n"


def test_setup_stops_for_a_python_not_debian_s_that_lacks_venv_or_headers(tmp_path):
    """python3.X-venv and python3.X-dev serve Debian's own Python alone:
    system-packages asked apt-get for them for any Python that lacked
    ensurepip or Python.h (pyenv's, a build in /usr/local), which they
    do not help, and which fails in apt on a Debian with no python3.X of
    that version.  Now it stops before apt, naming what that Python lacks
    and how to go on; a Debian Python's own check is unchanged."""
    needs_the_rest_set_up()
    version = "{}.{}".format(*sys.version_info[:2])
    env = dict(os.environ, PATH=f"{fake_apt(tmp_path, [])}:{os.environ['PATH']}")
    python = fake_python(tmp_path, ["ensurepip", "Python.h"], prefix="/opt/python")
    make = ["make", "-s", "system-packages", f"PYTHON={python}", f"WISH={WISH}"]
    venv = tmp_path / "new-venv"
    advice = ("It is not Debian's own Python (its sys.base_prefix is /opt/python, not /usr): "
              f"Debian's python{version}-venv and python{version}-dev would not serve it.\n"
              "Give that Python what it lacks (reinstall or rebuild it with its headers and"
              " ensurepip), or name one that has them, or Debian's own: PYTHON=/usr/bin/python3\n")
    r = subprocess.run(make + [f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith(
        f"make: PYTHON={python} has no ensurepip (python -m venv needs it to make {venv})"
        " and no Python.h (the bridge is built with it).\n" + advice)
    assert not (tmp_path / "installed.txt").exists() and not venv.exists()
    # where the environment is made already, only the headers are missing
    r = subprocess.run(make, cwd=ROOT, capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith(
        f"make: PYTHON={python} has no Python.h (the bridge is built with it).\n" + advice)
    assert not (tmp_path / "installed.txt").exists()
    # such a Python that lacks nothing is not stopped, and asks apt for nothing
    python = fake_python(tmp_path, [], prefix="/opt/python")
    r = subprocess.run(make + [f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert not (tmp_path / "installed.txt").exists()


def test_a_python_in_usr_without_debian_s_scheme_is_not_debian_s(tmp_path):
    """A Python built into /usr by hand (or another distribution's) counted
    as Debian's, by its sys.base_prefix alone: system-packages asked apt
    for python3.X-venv and python3.X-dev, which do not serve it.  Debian's
    own Python is told by what its patches give it, the deb_system install
    scheme in its sysconfig (a venv made from it has it too)."""
    needs_the_rest_set_up()
    version = "{}.{}".format(*sys.version_info[:2])
    env = dict(os.environ, PATH=f"{fake_apt(tmp_path, [])}:{os.environ['PATH']}")
    python = fake_python(tmp_path, ["ensurepip", "Python.h"], prefix="/usr", debian=False)
    venv = tmp_path / "new-venv"
    r = subprocess.run(["make", "-s", "system-packages", f"PYTHON={python}", f"WISH={WISH}",
                        f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith(
        f"make: PYTHON={python} has no ensurepip (python -m venv needs it to make {venv})"
        " and no Python.h (the bridge is built with it).\n"
        "It is not Debian's own Python (its sys.base_prefix is /usr, but its sysconfig has"
        " no deb_system scheme, which Debian's patches give Debian's python3): "
        f"Debian's python{version}-venv and python{version}-dev would not serve it.\n")
    assert not (tmp_path / "installed.txt").exists() and not venv.exists()


@pytest.mark.skipif(not os.path.isfile("/etc/debian_version")
                    or not os.access("/usr/bin/python3", os.X_OK),
                    reason="no Debian python3 in /usr/bin here")
def test_debian_s_own_python_and_a_venv_of_it_count_as_debian_s(tmp_path):
    """The check on the real thing: Debian's python3, and a venv made from
    it, are Debian's (apt may serve what they lack; the set-up never stops
    for them)."""
    needs_the_rest_set_up()
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True, capture_output=True)
    env = dict(os.environ, PATH=f"{fake_apt(tmp_path, [])}:{os.environ['PATH']}")
    for python in ["/usr/bin/python3", tmp_path / "venv" / "bin" / "python"]:
        r = subprocess.run(["make", "-s", "system-packages", f"PYTHON={python}", f"WISH={WISH}",
                            f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True,
                           text=True, env=env)
        assert r.returncode == 0 and "not Debian's own" not in r.stderr, (python, r.stderr)


def test_setup_reads_the_python_version_alone_and_refuses_an_empty_python(tmp_path):
    """A PYTHON that prints a line of its own first (a wrapper) made
    system-packages ask apt-get for its words as packages ('Python wrapper:
    ... pythonPython wrapper: ... 3.11-dev'); it asks for python3.X-dev.
    PYTHON empty (an exported empty PYTHON overrides the default) printed
    '/bin/sh: 0: Illegal option -' three times and then '-m: not found';
    now system-packages asks for nothing on its account and the set-up
    says what is wrong."""
    needs_the_rest_set_up()
    python = fake_python(tmp_path, ["Python.h"], first_line="Python wrapper: starting")
    version = "{}.{}".format(*sys.version_info[:2])
    env = dict(os.environ, PATH=f"{fake_apt(tmp_path, [])}:{os.environ['PATH']}")
    r = subprocess.run(["make", "-s", "system-packages", f"PYTHON={python}", f"WISH={WISH}"],
                       cwd=ROOT, capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout) == (0, f"installing Debian packages: python{version}-dev\n")
    assert (tmp_path / "installed.txt").read_text() == f"python{version}-dev\n"
    (tmp_path / "installed.txt").unlink()
    r = subprocess.run(["make", "-s", "setup", "PYTHON=", f"VENV={tmp_path / 'new-venv'}",
                        f"WISH={WISH}"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout) == (2, "== Python environment " + str(tmp_path / "new-venv") + "\n")
    assert r.stderr.startswith("make: PYTHON is empty: name the python3 that makes "
                               f"{tmp_path / 'new-venv'} (PYTHON=python3)\n")
    assert not (tmp_path / "installed.txt").exists() and not (tmp_path / "new-venv").exists()
    # make install-tcl's environment alike
    r = subprocess.run(["make", "-s", "install-tcl", "PYTHON=", f"INSTALL_VENV={tmp_path / 'env'}",
                        f"TCL_PKG_DIR={tmp_path / 'tcl'}", f"WISH={WISH}"], cwd=ROOT,
                       capture_output=True, text=True, env=env)
    assert (r.returncode, r.stdout) == (2, "== Python environment " + str(tmp_path / "env") + "\n")
    assert r.stderr.startswith("make: PYTHON is empty: name the python3 that makes "
                               f"{tmp_path / 'env'} (PYTHON=python3)\n")
    assert sorted(os.listdir(tmp_path)) == ["bin", "python3"]
