import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# gpu-check's schedule (its hook, for xdist, by its name here).
from gpu_schedule import order_longest_first, pytest_xdist_make_scheduler  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent

# `make test` runs the suite: the tests' own make commands must behave as a
# user's make does, not as sub-makes of that one (no "Entering directory").
for name in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"):
    os.environ.pop(name, None)


def recorded_tcl_config():
    """The tclConfig.sh of the Tcl that `make setup` built this environment's
    bridge for (setup.py reads the same record), or None."""
    try:
        return (Path(sys.prefix) / ".tclamp-tcl-config").read_text().strip() or None
    except OSError:
        return None


def tclsh_of(config):
    """The tclsh that a tclConfig.sh describes."""
    r = subprocess.run(["sh", "-c", '. "$0" && echo "$TCL_EXEC_PREFIX/bin/tclsh$TCL_VERSION"', config],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 and os.access(r.stdout.strip(), os.X_OK) else None


# The Tcl under test: $TCLSH (make passes it), else the one the bridge was
# built for, else tclsh.  Its tclConfig.sh goes to every build the tests run
# (setup.py reads TCL_CONFIG), so that none falls back to another Tcl.
if "TCLSH" not in os.environ and recorded_tcl_config():
    os.environ["TCL_CONFIG"] = recorded_tcl_config()
    os.environ["TCLSH"] = tclsh_of(recorded_tcl_config()) or "tclsh"
TCLSH = os.environ.setdefault("TCLSH", "tclsh")
# Its wish: the same name with wish for tclsh (tclsh9.0 -> wish9.0).
WISH = os.environ.get("WISH") or str(Path(TCLSH).with_name(Path(TCLSH).name.replace("tclsh", "wish")))
if "TCL_CONFIG" not in os.environ:
    found = subprocess.run([TCLSH, str(ROOT / "tools" / "tcl-config.tcl")],
                           capture_output=True, text=True)
    if found.returncode == 0:
        os.environ["TCL_CONFIG"] = found.stdout.strip()
TCL_VERSION = tuple(int(part) for part in subprocess.run(
    [TCLSH], input="puts [info tclversion]\n", capture_output=True, text=True,
    check=True).stdout.split("."))
TCL9 = TCL_VERSION >= (9, 0)


def tkinter_tcl_version():
    """The Tcl version this Python's tkinter was built with, or None without
    tkinter (asked in a child, so that pytest's process loads no libtcl)."""
    r = subprocess.run([sys.executable, "-c", "import _tkinter; print(_tkinter.TCL_VERSION)"],
                       capture_output=True, text=True)
    return tuple(int(part) for part in r.stdout.split(".")) if r.returncode == 0 else None


TKINTER_TCL = tkinter_tcl_version()
# A bridge binary is built for one Tcl major version: a tkinter host whose
# Tcl is another one cannot load it ("incompatible stubs mechanism").
needs_tkinters_tcl = pytest.mark.skipif(
    TKINTER_TCL != TCL_VERSION,
    reason=(f"this Python's tkinter has Tcl {'.'.join(map(str, TKINTER_TCL))}, the Tcl under test "
            f"is {'.'.join(map(str, TCL_VERSION))}" if TKINTER_TCL else "this Python has no tkinter"))


def tcl_length(text):
    """`string length` of text in the Tcl under test: UTF-16 code units in
    Tcl 8.6 (a character beyond the BMP is two), code points in Tcl 9, as
    in Python (two surrogates stay two characters)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2 if not TCL9 else len(text)


def tcl_text(text):
    """text as it comes back from the Tcl under test: Tcl 8.6 keeps UTF-16
    code units, so a high and a low surrogate side by side come back as the
    one character beyond the BMP that they encode."""
    return text if TCL9 else text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def sigint_as_at_a_terminal():
    """A program started at a terminal has SIGINT in its default state; one
    started by a shell's background job inherits it ignored (a preexec_fn
    for a child that a test sends SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tcl_env(**extra):
    """The environment a user's tclsh would have: tclamp on TCLLIBPATH and
    no TCLAMP_PYTHON unless given. A variable given as None is unset."""
    env = {k: v for k, v in os.environ.items() if k != "TCLAMP_PYTHON"}
    env["TCLLIBPATH"] = str(ROOT / "tcl")
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def run_tclsh(script, cwd, timeout=300, **env):
    # found on this process's PATH: a test may give the script another
    return subprocess.run([shutil.which(TCLSH) or TCLSH], input=script, capture_output=True,
                          text=True, cwd=cwd, env=tcl_env(**env), timeout=timeout)


@pytest.fixture
def tclsh(tmp_path):
    """Runs a script in a fresh tclsh started in an empty directory."""
    return lambda script, **env: run_tclsh(script, tmp_path, **env)


# tools/gpu_check.py runs the suite on a machine that brings only its
# Python and torch (TCLAMP_GPU_CHECK=1).  There a test that needs what
# `make setup` installs here skips, naming what; here its absence fails.
GPU_CHECK = os.environ.get("TCLAMP_GPU_CHECK") == "1"


def needs_setup(what, present):
    """Goes on if `present`; else skips under gpu-check, fails elsewhere."""
    if present:
        return
    if GPU_CHECK:
        pytest.skip(f"needs {what}, which this machine lacks (gpu-check)")
    pytest.fail(f"make setup installs {what}, and it is missing")


def needs_compiler(compiler="cc"):
    needs_setup(f"a C compiler ({compiler}) and Tcl's headers",
                shutil.which(compiler) and os.environ.get("TCL_CONFIG"))


# Installing from the package index: not where pip is told there is none.
needs_index = pytest.mark.skipif(bool(os.environ.get("PIP_NO_INDEX")),
                                 reason="needs the package index, and pip has none here (PIP_NO_INDEX)")
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs make, which this machine lacks")


def compile_with_tcl(program, source):
    """A C program that embeds the Tcl under test, compiled with the
    settings of its tclConfig.sh (TCL_CONFIG)."""
    needs_compiler()
    subprocess.run(["sh", "-c", '. "$TCL_CONFIG" && exec cc -o "$0" "$1" $TCL_INCLUDE_SPEC $TCL_LIB_SPEC',
                    str(program), str(source)], check=True)


@functools.cache
def torch_sees_gpu():
    """Whether torch sees a GPU, asked in a child so that pytest's own
    process starts no CUDA driver."""
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                       capture_output=True, text=True, check=True)
    return r.stdout.strip() == "True"


def pytest_collection_modifyitems(items):
    """The CUDA tier: tests marked cuda and the cases of cuda.test, skipped
    with the reason where torch sees no GPU.  In an xdist worker, the
    longest files first."""
    order_longest_first(items)
    tier = []
    for item in items:
        if item.path.name == "cuda.test":
            item.add_marker(pytest.mark.cuda)
        if item.get_closest_marker("cuda"):
            tier.append(item)
    if tier and not torch_sees_gpu():
        for item in tier:
            item.add_marker(pytest.mark.skip(reason="torch sees no GPU"))


def reset_autocast():
    """torch's autocast state as a new thread has it (this process's tests
    change it through the commands)."""
    import torch
    for device in ("cuda", "cpu"):
        torch.set_autocast_enabled(device, False)
    torch.set_autocast_dtype("cuda", torch.float16)
    torch.set_autocast_dtype("cpu", torch.bfloat16)
