"""tohil, the Tcl<->Python bridge many Tcl users already load, and tclamp in
one tclsh, in either order.  tohil is built from its source in
../shared/peers (or $TCLAMP_PEERS) against the checkout's Python; where
that folder is absent, these tests are skipped and say why."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, needs_compiler, tcl_env

PEERS = Path(os.environ.get("TCLAMP_PEERS", ROOT.parent / "shared" / "peers"))


@pytest.fixture(scope="module")
def tohil(tmp_path_factory):
    """The environment of a tclsh that finds both packages."""
    script = PEERS / "build_tohil.sh"
    if not script.is_file():
        pytest.skip(f"NOT TESTED: tohil interop, no {script} to build tohil with")
    needs_compiler("gcc")       # the compiler build_tohil.sh runs
    dest = tmp_path_factory.mktemp("tohil") / "build"
    built = subprocess.run(["sh", str(script), str(dest)], capture_output=True, text=True,
                           env=dict(os.environ, TCLAMP_DIR=str(ROOT),
                                    TOHIL_PYTHON=sys.executable))
    assert built.returncode == 0, built.stdout + built.stderr
    # tohil starts Python from the home and path it is given: this one's
    # whole path, so that it finds torch where a .pth file put it too (a
    # venv that sees another Python's packages, as gpu-check's does).
    path = [str(dest / "py")] + [entry for entry in sys.path if entry]
    return tcl_env(TCLLIBPATH=f"{dest / 'tcl'} {ROOT / 'tcl'}", PYTHONHOME=sys.base_prefix,
                   PYTHONPATH=os.pathsep.join(path))


def run(env, script, tmp_path):
    path = tmp_path / "s.tcl"
    path.write_text(script)
    return subprocess.run(["tclsh", str(path)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def test_tohil_then_tclamp_share_one_python(tohil, tmp_path):
    r = run(tohil, """
package require tohil
package require tclamp
tohil::exec {shared = 6 * 7}
puts [py eval shared]
puts [tohil::call len abc]
puts [torch::autocast_enable cpu]
puts [tohil::eval {__import__('torch').is_autocast_enabled('cpu')}]
puts [py eval {__import__('tclamp').tcl.eval('tohil::eval 1+1')}]
""", tmp_path)
    assert (r.stdout, r.returncode) == ("42\n3\nautocast enabled\n1\n2\n", 0), r.stderr


def test_tclamp_then_tohil_both_work(tohil, tmp_path):
    """tohil finds Python running and makes a subinterpreter of its own (its
    choice: numpy and torch do not load there); it calls Python without
    taking the GIL, so the thread keeps it; calls go both ways."""
    r = run(tohil, """
package require tclamp
puts [py eval {1 + 2}]
package require tohil
puts [tohil::call len abcd]
puts [tohil::eval {6 * 7}]
puts [py eval {__import__('tclamp').tcl.eval('tohil::eval 2*3')}]
puts [torch::autocast_enable cpu]
puts [tohil::eval {__import__('tohil').eval('torch::autocast_is_enabled cpu')}]
puts [py call -types int max 3 10]
""", tmp_path)
    assert (r.stdout, r.returncode) == ("3\n4\n42\n6\nautocast enabled\n1\n10\n", 0), r.stderr
    assert "Fatal" not in r.stderr
