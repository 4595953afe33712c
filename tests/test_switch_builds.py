"""The bridge built without each speed layer (bridge.h): without the text
accelerators (TCLAMP_NO_ACCELERATORS, text_fast.c) and without the ATen
programs (TCLAMP_NO_ATEN, aten_programs.c).  Each build is made in a copy
of this checkout and runs the cases whose results must not depend on a
speed layer, the one list below, as the usual build runs them: the same
results, errors and state, only slower.
"""
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import ROOT, needs_setup

# The cases that say what a user sees of values, commands and plans; each
# switch-off build must pass all of them.
SAME_RESULTS = [
    "tests/test_text_conversion.py", "tests/test_list_conversion.py",
    "tests/test_speed_semantics.py", "tests/test_handles_and_values.py",
    "tests/test_aten_path.py", "tests/test_torch_api.py", "tests/test_memo_switch.py",
    "tests/autocast.test", "tests/plans.test", "tests/scaler.test",
]
# What each switch leaves out, by a function only that layer has.
SWITCHES = {"TCLAMP_NO_ACCELERATORS": ("accelerators", "utf8_packed"),
            "TCLAMP_NO_ATEN": ("aten", "programs_running")}
COPIED = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.so", "__pycache__",
                                "*.egg-info", ".pytest_cache")


def symbols(library):
    return subprocess.run(["nm", str(library)], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module", params=sorted(SWITCHES))
def switched(request, tmp_path_factory):
    """A copy of the checkout with the bridge built with this switch."""
    needs_setup("a C compiler with Tcl's and Python's headers", shutil.which("cc")
                and os.environ.get("TCL_CONFIG")
                and Path(sysconfig.get_paths()["include"], "Python.h").is_file())
    switch = request.param
    copy = tmp_path_factory.mktemp(switch.lower()) / "tclamp"
    shutil.copytree(ROOT, copy, ignore=COPIED)
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                           cwd=copy, env=dict(os.environ, CFLAGS=f"-D{switch}"),
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    return switch, copy


def test_the_build_leaves_the_layer_out(switched):
    switch, copy = switched
    name, only_there = SWITCHES[switch]
    library, = (copy / "src" / "tclamp").glob("_bridge*.so")
    r = subprocess.run([sys.executable, "-c", "import tclamp; print(tclamp._bridge.__file__); "
                        "print(tclamp._bridge.BUILT_WITHOUT)"],
                       env=dict(os.environ, PYTHONPATH=str(copy / "src")),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == [str(library), name]
    assert only_there not in symbols(library)
    import tclamp
    if platform.machine() == "x86_64" or name == "aten":   # the usual build has it
        assert only_there in symbols(tclamp._bridge.__file__)


def test_same_results(switched):
    switch, copy = switched
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        *SAME_RESULTS], cwd=copy,
                       env=dict(os.environ, PYTHONPATH=str(copy / "src")),
                       capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert " passed" in r.stdout.splitlines()[-1] and " skipped" not in r.stdout.splitlines()[-1]
