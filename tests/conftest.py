import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# `make test` runs the suite: the tests' own make commands must behave as a
# user's make does, not as sub-makes of that one (no "Entering directory").
for name in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"):
    os.environ.pop(name, None)


def tcl_env(**extra):
    """The environment a user's tclsh would have: tclamp on TCLLIBPATH and
    no TCLAMP_PYTHON unless given."""
    env = {k: v for k, v in os.environ.items() if k != "TCLAMP_PYTHON"}
    env["TCLLIBPATH"] = str(ROOT / "tcl")
    env.update(extra)
    return env


def run_tclsh(script, cwd, timeout=300, **env):
    return subprocess.run(["tclsh"], input=script, capture_output=True, text=True,
                          cwd=cwd, env=tcl_env(**env), timeout=timeout)


@pytest.fixture
def tclsh(tmp_path):
    """Runs a script in a fresh tclsh started in an empty directory."""
    return lambda script, **env: run_tclsh(script, tmp_path, **env)
