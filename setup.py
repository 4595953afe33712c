"""Builds the one C file of the bridge against Tcl's stubs and libpython.

The paths come from Tcl's own tclConfig.sh (Debian's tcl8.6-dev), so the
same shared object loads into any tclsh 8.6 and imports into this Python.
"""
import os
import shlex
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Extension, setup

TCL_SETTINGS = ["TCL_LIB_SPEC", "TCL_LIB_FILE", "TCL_INCLUDE_SPEC", "TCL_STUB_LIB_SPEC"]


def tcl_config():
    """Tcl's build settings, read by letting sh source its tclConfig.sh."""
    candidates = [os.environ.get("TCL_CONFIG", ""), "/usr/lib/tcl8.6/tclConfig.sh",
                  "/usr/local/lib/tclConfig.sh"]
    for path in filter(None, candidates):
        if Path(path).is_file():
            script = ". %s && printf '%%s\\n' %s" % (
                shlex.quote(path), " ".join('"$%s"' % name for name in TCL_SETTINGS))
            out = subprocess.run(["sh", "-c", script], check=True, capture_output=True, text=True)
            return dict(zip(TCL_SETTINGS, out.stdout.splitlines()))
    raise SystemExit("tclConfig.sh not found: install tcl8.6-dev (or set TCL_CONFIG)")


tcl = tcl_config()
libtcl = os.path.join(tcl["TCL_LIB_SPEC"].split()[0].removeprefix("-L"), tcl["TCL_LIB_FILE"])
# Tcl as host needs libpython linked in (python itself does not).
python_lib = []
if sysconfig.get_config_var("Py_ENABLE_SHARED"):
    libdir = sysconfig.get_config_var("LIBDIR")
    python_lib = ["-L" + libdir, "-lpython" + sysconfig.get_config_var("LDVERSION"),
                  "-Wl,-rpath," + libdir]

bridge = Extension(
    "tclamp._bridge",
    sources=["src/tclamp/_bridge.c"],
    include_dirs=[flag[2:] for flag in shlex.split(tcl["TCL_INCLUDE_SPEC"])],
    define_macros=[("USE_TCL_STUBS", "1"),
                   ("TCLAMP_LIBTCL", '"%s"' % libtcl),
                   ("TCLAMP_LIBTCL_SONAME", '"%s"' % os.path.basename(libtcl))],
    extra_compile_args=["-std=gnu11", "-Wall", "-Wno-unused-parameter"],
    extra_link_args=shlex.split(tcl["TCL_STUB_LIB_SPEC"]) + python_lib,
)

setup(ext_modules=[bridge])
