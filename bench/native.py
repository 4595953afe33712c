"""The native baselines of bench/run.py: Tcl commands in C++ that call ATen.

build_aten_direct() compiles bench/aten_direct.cpp into bench/build/ (once,
again when the source, the torch or the Tcl changes) against the headers
of the torch that this Python imports, linked to that torch's
libtorch_cpu.so and libc10.so (with their directory as the rpath), so that
a tclsh that has run `package require tclamp` holds one copy of ATen.
"""
import hashlib
import shlex
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUILD = HERE / "build"
SOURCE = HERE / "aten_direct.cpp"


class BuildError(Exception):
    """Why the native baseline could not be built (the bench says so)."""


def tcl_config(tclsh="tclsh"):
    """The variables of the running tclsh's tclConfig.sh."""
    found = subprocess.run([tclsh, str(ROOT / "tools" / "tcl-config.tcl")],
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise BuildError("no tclConfig.sh for " + tclsh + ": " + found.stderr.strip())
    config = {}
    for line in Path(found.stdout.strip()).read_text().splitlines():
        name, eq, value = line.partition("=")
        if eq and name.isidentifier():
            config[name] = value.strip("'")
    return config


def torch_flags():
    """Compiler and linker flags for the torch this Python imports."""
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as error:
        raise BuildError(f"torch cannot be imported: {error}") from None
    lib = Path(torch.__file__).resolve().parent / "lib"
    includes = cpp_extension.include_paths()
    if not (Path(includes[0]) / "ATen" / "autocast_mode.h").exists():
        raise BuildError(f"torch's C++ headers are missing (no {includes[0]}/ATen/autocast_mode.h)")
    abi = int(torch.compiled_with_cxx11_abi())
    return ([f"-D_GLIBCXX_USE_CXX11_ABI={abi}"] + [f"-I{path}" for path in includes],
            [f"-L{lib}", f"-Wl,-rpath,{lib}", "-ltorch_cpu", "-lc10"], torch.__version__)


def build(source, output, extra_cflags=(), extra_ldflags=(), stubs=True, tclsh="tclsh"):
    """Compile one C++ Tcl extension against torch and Tcl; returns its path.
    Raises BuildError with the reason when it cannot."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise BuildError("no C++ compiler (g++) on PATH")
    config = tcl_config(tclsh)
    cflags, ldflags, torch_version = torch_flags()
    tcl_cflags = shlex.split(config.get("TCL_INCLUDE_SPEC", ""))
    tcl_libs = shlex.split(config["TCL_STUB_LIB_SPEC" if stubs else "TCL_LIB_SPEC"])
    command = [compiler, "-std=c++20", "-O2", "-fPIC", "-shared", "-Wall",
               *(["-DUSE_TCL_STUBS"] if stubs else []), *cflags, *tcl_cflags, *extra_cflags,
               *map(str, source), "-o", str(output), *ldflags, *extra_ldflags, *tcl_libs]
    # Rebuilt when the command (torch, Tcl, flags) or a source changes.
    stamp = hashlib.sha256(" ".join(command + [torch_version]).encode())
    for path in source:
        stamp.update(Path(path).read_bytes())
    stamp_file = Path(str(output) + ".stamp")
    if Path(output).exists() and stamp_file.exists() and stamp_file.read_text() == stamp.hexdigest():
        return Path(output)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"{Path(compiler).name} failed:\n" + done.stderr[-3000:])
    stamp_file.write_text(stamp.hexdigest())
    return Path(output)


def build_aten_direct(tclsh="tclsh"):
    return build([SOURCE], BUILD / "aten_direct.so", tclsh=tclsh)


if __name__ == "__main__":
    print(build_aten_direct())
