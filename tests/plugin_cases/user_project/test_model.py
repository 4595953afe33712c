"""The user's Python tests, in the same directory as their Tcl tests."""
import tclamp


def test_python_sees_the_tcl_commands():
    assert tclamp.tcl.eval("torch::autocast_get_dtype cpu") == "bfloat16"
