"""bench/run.py's native baseline: bench/aten_direct.cpp, C++ Tcl commands
that call ATen's autocast functions directly, must be the torch:: commands'
twins (same words, same answers, the same thread-local state)."""
import os
import shutil
import sys

import pytest

from conftest import ROOT, TCLSH, needs_setup, run_tclsh

sys.path.insert(0, str(ROOT / "bench"))
import native  # noqa: E402
import run  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                                reason="NOT TESTED: no C++ compiler to build bench/aten_direct.cpp")

SCRIPT = """
package require tclamp
load {%s} Atendirect
foreach script {
    {aten::set_dtype float16 cpu} {torch::autocast_get_dtype cpu} {aten::get_dtype cpu}
    {torch::autocast_set_dtype -dtype bfloat16 -device cpu} {aten::get_dtype -device cpu}
    {aten::enable cpu float32} {torch::autocast_is_enabled cpu} {torch::autocast_get_dtype cpu}
    {aten::disable -device_type cpu} {torch::autocast_is_enabled cpu} {aten::is_enabled cpu}
    {torch::autocast_enable cpu} {aten::is_enabled cpu} {aten::get_dtype cpu}
    {aten::is_enabled} {aten::nothing cpu}
    {aten::set_dtype cpu} {aten::set_dtype} {aten::enable cpu float64} {aten::disable cpu cpu}
    {aten::get_dtype -dtype float16}
} {
    puts "$script -> [list [catch $script result] $result]"
}
set f [open /proc/self/maps]
set maps [read $f]
close $f
puts [llength [lsort -unique [regexp -all -inline {\\S*/libtorch_cpu\\.so} $maps]]]
"""


def test_aten_direct_twins_the_torch_commands(tmp_path):
    needs_setup("a C++ compiler and Tcl's headers",
                shutil.which("g++") and os.environ.get("TCL_CONFIG"))
    library = native.build_aten_direct(tclsh=TCLSH)
    r = run_tclsh(SCRIPT % library, tmp_path)
    assert r.stderr == ""
    assert r.stdout.splitlines() == [
        "aten::set_dtype float16 cpu -> 0 {autocast dtype set}",
        "torch::autocast_get_dtype cpu -> 0 float16",
        "aten::get_dtype cpu -> 0 float16",
        "torch::autocast_set_dtype -dtype bfloat16 -device cpu -> 0 {autocast dtype set}",
        "aten::get_dtype -device cpu -> 0 bfloat16",
        "aten::enable cpu float32 -> 0 {autocast enabled}",
        "torch::autocast_is_enabled cpu -> 0 1",
        "torch::autocast_get_dtype cpu -> 0 float32",
        "aten::disable -device_type cpu -> 0 {autocast disabled}",
        "torch::autocast_is_enabled cpu -> 0 0",
        "aten::is_enabled cpu -> 0 0",
        "torch::autocast_enable cpu -> 0 {autocast enabled}",
        "aten::is_enabled cpu -> 0 1",
        "aten::get_dtype cpu -> 0 float32",     # enable without a dtype keeps it
        "aten::is_enabled -> 0 0",              # the default device is cuda
        "aten::nothing cpu -> 0 0",
        "aten::set_dtype cpu -> 1 {aten: bad arguments}",
        "aten::set_dtype -> 1 {aten: no dtype}",
        "aten::enable cpu float64 -> 1 {aten: bad arguments}",
        "aten::disable cpu cpu -> 1 {aten: bad arguments}",
        "aten::get_dtype -dtype float16 -> 1 {aten: bad arguments}",
        "1",                                    # one ATen in the process
    ]


def test_a_baseline_that_cannot_be_built_is_named_in_the_table(monkeypatch):
    monkeypatch.setattr(native.shutil, "which", lambda name: None)
    aten, tclibtorch, missing = run.native_baselines("")
    assert (aten, tclibtorch) == ("", "")
    assert missing == {
        "direct ATen C++": "NOT BUILT, so not measured: no C++ compiler (g++) on PATH",
        "TCLIBTORCH": "not measured in this run: no library given (`--tclibtorch PATH.so`; "
                      "how to build one is below)"}
    samples = {"cmd:set_dtype": [300.0, 310.0], "cmd:floor": [130.0, 128.0],
               "pypath:set_dtype": [220.0, 230.0]}
    assert run.native_table(samples, missing).splitlines()[2:] == [
        "| set_dtype | positional | 305 | – | – | 2.0x | – | – | – | – | 225 | – |",
        "| floor: a plan that calls Python | `bridge_floor cpu` / `aten::nothing cpu` | 129 | – | – |  |  "
        "| – | – | – | – | – |",
        "",
        "- direct ATen C++: NOT BUILT, so not measured: no C++ compiler (g++) on PATH",
        "- TCLIBTORCH: not measured in this run: no library given (`--tclibtorch PATH.so`; "
        "how to build one is below)"]
