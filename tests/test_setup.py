"""The set-up's own checks: each must be able to fail, or it proves nothing."""
import os
import shutil
import stat
import subprocess

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


def test_setup_would_install_what_is_missing(tmp_path):
    # Only the Thread package is missing where make setup installed the rest.
    needs_setup("what make setup installs (Tcl's headers, Tk, Xvfb, valgrind)",
                os.environ.get("TCL_CONFIG") and all(map(shutil.which, (WISH, "Xvfb", "valgrind"))))
    r = subprocess.run(["make", "-n", "system-packages", f"TCLSH={fake_tclsh(tmp_path, 'Thread')}",
                        f"WISH={WISH}"],
                       cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
    # Debian's name for the Thread package of this Tcl version
    thread_deb = "tcl-thread" if TCL_VERSION < (9, 0) else "tcl{}.{}-thread".format(*TCL_VERSION)
    assert f"missing='{thread_deb}'" in r.stdout
