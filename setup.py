"""Builds the bridge and its Tcl loader once for each Tcl found.

For each tclConfig.sh (Tcl 8.6, Tcl 9.0) this makes tclamp._bridge<major>,
the bridge compiled against that Tcl's stubs, and tclamp._loader<major>,
what a tclsh of that Tcl loads first (see loader.c).  Neither links
libpython or libtcl, and no path of this machine is compiled in: the wheel
works with any build of its Python and any tclsh of those Tcls.

Which Tcls: $TCLAMP_TCL_CONFIG, a list of tclConfig.sh paths separated by
':' (a file inside an unpacked Debian package works: its paths are read
below that root), else $TCL_CONFIG (one), else the record that
`make setup TCLSH=...` left in the environment, else every Tcl installed
in the usual places.
"""
import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
VERSION = (ROOT / "src" / "tclamp" / "VERSION").read_text().strip()
# The bridge's C files (bridge.h says what each holds).
BRIDGE_SOURCES = ["_bridge.c", "interp.c", "text_fast.c", "aten_programs.c", "lifecycle.c"]
BRIDGE_HEADERS = ["bridge.h", "compat.h", "aten_ops.h"]
SETTINGS = ["TCL_VERSION", "TCL_INCLUDE_SPEC", "TCL_STUB_LIB_SPEC"]
USUAL_PLACES = ["/usr/lib/tcl8.6/tclConfig.sh", "/usr/lib/tcl9.0/tclConfig.sh",
                "/usr/local/lib/tclConfig.sh", "/usr/local/lib/tcl9.0/tclConfig.sh",
                "/opt/homebrew/lib/tclConfig.sh", "/usr/local/opt/tcl-tk/lib/tclConfig.sh"]
# What `make setup TCLSH=...` recorded in the environment: that Tcl's
# tclConfig.sh.  (pip's isolated build runs in a Python of its own:
# VIRTUAL_ENV names the user's.)
RECORDS = [Path(p) / ".tclamp-tcl-config"
           for p in (sys.prefix, os.environ.get("VIRTUAL_ENV")) if p]


def chosen_configs():
    listed = os.environ.get("TCLAMP_TCL_CONFIG") or os.environ.get("TCL_CONFIG")
    for record in RECORDS:
        if not listed and record.is_file():
            listed = record.read_text().strip()
    if listed:
        return [p for p in listed.split(os.pathsep) if p]
    return [p for p in USUAL_PLACES if Path(p).is_file()]


def read_config(path):
    """A tclConfig.sh's settings, read by letting sh source it; paths that
    exist only below the root the file sits in (an unpacked package) are
    moved there."""
    script = ". %s && printf '%%s\\n' %s" % (
        shlex.quote(path), " ".join('"$%s"' % name for name in SETTINGS))
    out = subprocess.run(["sh", "-c", script], check=True, capture_output=True, text=True)
    config = dict(zip(SETTINGS, out.stdout.splitlines()))
    root = path[:path.index("/usr/")] if "/usr/" in path else ""

    def moved(flag):
        for prefix in ("-I", "-L", ""):
            if flag.startswith(prefix + "/"):
                where = flag[len(prefix):]
                if root and os.path.exists(root + where):
                    return prefix + root + where
        return flag

    for name in ("TCL_INCLUDE_SPEC", "TCL_STUB_LIB_SPEC"):
        config[name] = [moved(flag) for flag in shlex.split(config[name])]
    return config


def extensions():
    built, modules = set(), []
    for path in chosen_configs():
        if not Path(path).is_file():
            raise SystemExit(f"tclamp: no tclConfig.sh at {path}")
        tcl = read_config(path)
        major = tcl["TCL_VERSION"].split(".")[0]
        if major in built:
            continue
        built.add(major)
        common = dict(
            include_dirs=[f[2:] for f in tcl["TCL_INCLUDE_SPEC"] if f.startswith("-I")],
            define_macros=[("USE_TCL_STUBS", "1"), ("TCLAMP_VERSION", '"%s"' % VERSION)],
            extra_compile_args=["-std=gnu11", "-Wall", "-Wno-unused-parameter",
                                # no build path in the binary, unless asked for
                                "-g" if os.environ.get("TCLAMP_DEBUG") else "-g0"],
            extra_link_args=tcl["TCL_STUB_LIB_SPEC"],
            depends=[f"src/tclamp/{h}" for h in BRIDGE_HEADERS],
        )
        modules.append(Extension(f"tclamp._bridge{major}",
                                 sources=[f"src/tclamp/{c}" for c in BRIDGE_SOURCES], **common))
        modules.append(Extension(f"tclamp._loader{major}", sources=["src/tclamp/loader.c"],
                                 **common))
    if not modules:
        raise SystemExit("tclamp: no Tcl found to build for: install tcl8.6-dev or "
                         "tcl9.0-dev, or set TCLAMP_TCL_CONFIG to a tclConfig.sh")
    return modules


class BuildWithoutPaths(build_ext):
    """Links without the run-time search paths that this Python's own build
    flags carry (pyenv's -rpath to its lib): the bridge links no libpython.
    Each extension compiles in a directory of its own."""

    def build_extensions(self):
        self.compiler.linker_so = [arg for arg in self.compiler.linker_so
                                   if not arg.startswith(("-Wl,-rpath", "-Wl,-R"))]
        super().build_extensions()

    def build_extension(self, ext):
        # The same C file is built for each Tcl: each build in its own place.
        shared_temp = self.build_temp
        self.build_temp = os.path.join(shared_temp, ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = shared_temp


class BuildWithIndex(build_py):
    """Writes the package index that sits beside the package (pkgindex.py)."""

    def run(self):
        super().run()
        if self.dry_run:
            return
        spec = importlib.util.spec_from_file_location("pkgindex", ROOT / "src/tclamp/pkgindex.py")
        pkgindex = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(pkgindex)
        # An editable install runs the package from src: the index goes
        # there, and names the environment being installed into (pip builds
        # with its python), which load.tcl cannot tell from src's place.
        # The last `pip install -e` of a checkout names its own.
        editable = getattr(self, "editable_mode", False)
        package = ROOT / "src" if editable else Path(self.build_lib)
        index = package / "tclamp" / "pkgIndex.tcl"
        index.write_text(pkgindex.index_text(
            VERSION, "beside the package (tclamp --tcl-dir prints this directory)",
            python=sys.executable if editable else ""))


setup(ext_modules=extensions(),
      cmdclass={"build_ext": BuildWithoutPaths, "build_py": BuildWithIndex})
