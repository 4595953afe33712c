"""bench/step_counts.py's reading of callgrind's file: where each count of
the README step lies (Tcl's code, the bridge's, Python's, torch's).  A
callgrind run takes minutes, so these read files written in callgrind's
format, with what its real files hold: an object named first where a call
goes to it (cob=), then by number alone, and a call's inclusive cost,
which must not count twice."""
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import step_counts  # noqa: E402

TCL, BRIDGE, TORCH = "Tcl (libtcl)", "the bridge (tclamp's C)", "torch (libtorch, libc10, ...)"

CALLGRIND_FILE = """\
# callgrind format
version: 1
creator: callgrind-3.19.0
positions: line
events: Ir I1mr
summary: 170 9
ob=(1) /usr/lib/x86_64-linux-gnu/libtcl8.6.so
fl=(1) ???
fn=(1) Tcl_EvalObjv
0 10 1
cob=(2) /work/tclamp/src/tclamp/_bridge8.cpython-311-x86_64-linux-gnu.so
cfi=(2) ???
cfn=(2) python_command
calls=2 0
0 150 8
+2 5
ob=(2)
fl=(2)
fn=(2) python_command
0 40 2
cob=(3) /venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
cfn=(3) at::linear
calls=1 0
0 110 6
ob=(3)
fl=(3) ???
fn=(3) at::linear
0 100 6
-1 10
ob=(1)
fn=(1)
* 5
"""


def test_each_count_lies_in_the_object_that_ran_it_and_calls_count_once(tmp_path):
    out = tmp_path / "callgrind.out"
    out.write_text(CALLGRIND_FILE)
    found = step_counts.by_library(out, steps=10)
    assert found == {(TCL, "Ir"): 2.0, (TCL, "I1mr"): 0.1,
                     (BRIDGE, "Ir"): 4.0, (BRIDGE, "I1mr"): 0.2,
                     (TORCH, "Ir"): 11.0, (TORCH, "I1mr"): 0.6}
    # The objects' counts are the whole file's: callgrind's summary line.
    assert sum(v for (_, event), v in found.items() if event == "Ir") * 10 == 170


def test_the_table_shows_each_code_s_excess_over_python_s():
    python = {(TCL, "Ir"): 0.0, (TORCH, "Ir"): 1000.0, (TORCH, "I1mr"): 50.0}
    tcl = {(TCL, "Ir"): 2500.0, (TCL, "I1mr"): 130.0, (TORCH, "Ir"): 990.0, (TORCH, "I1mr"): 50.0}
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:3]
            for line in step_counts.library_table({"tcl": tcl, "python": python}).splitlines()
            if line.startswith("| ") and not line.startswith("| code")}
    assert rows[TCL] == ["+2,500", "+130"]
    assert rows[TORCH] == ["-10", "+0"]
    assert rows["the rest"] == ["+0", "+0"]


def test_libraries_are_told_by_their_file_names():
    assert step_counts.library_of("/usr/lib/x86_64-linux-gnu/libtcl9.0.so") == TCL
    assert step_counts.library_of("/x/libtcl8.6.so") == TCL
    assert step_counts.library_of("/r/lib/libpython3.12.so.1.0") == "Python (libpython)"
    assert step_counts.library_of("/t/lib/libc10.so") == TORCH
    assert step_counts.library_of("/lib/x86_64-linux-gnu/libc.so.6").startswith("the C and C++")
    assert step_counts.library_of("/usr/bin/tclsh8.6") == "the rest"
