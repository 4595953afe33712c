"""The native baselines of bench/run.py: Tcl commands in C++ that call ATen.

build_aten_direct() compiles bench/aten_direct.cpp into bench/build/ (once,
again when the source, the torch or the Tcl changes) against the headers
of the torch that this Python imports, linked to that torch's
libtorch_cpu.so and libc10.so (with their directory as the rpath), so that
a tclsh that has run `package require tclamp` holds one copy of ATen.

build_tclibtorch(checkout, outdir) builds TCLIBTORCH's autocast commands
from a checkout of it that the user provides (none of its code is in this
repository): its src/amp_precision.cpp, with its src/libtorchtcl.h, and
a small init written here that registers its four autocast command
procedures as ::tclibtorch::autocast_* (::torch:: is tclamp's):

    python bench/native.py --tclibtorch ~/TCLIBTORCH build/tclibtorch
    python bench/run.py --tclibtorch build/tclibtorch/tclibtorch_autocast.so
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
# The bridge's table of ATen functions, which aten_direct.cpp calls by.
ATEN_OPS = ROOT / "src" / "tclamp" / "aten_ops.h"


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


def build(source, output, extra_cflags=(), extra_ldflags=(), stubs=True, tclsh="tclsh",
          std="c++20", optimize="-O2", headers=()):
    """Compile one C++ Tcl extension against torch and Tcl; returns its path
    (rebuilt when a source or one of `headers` changed).  Raises BuildError
    with the reason when it cannot."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise BuildError("no C++ compiler (g++) on PATH")
    config = tcl_config(tclsh)
    cflags, ldflags, torch_version = torch_flags()
    tcl_cflags = shlex.split(config.get("TCL_INCLUDE_SPEC", ""))
    tcl_libs = shlex.split(config["TCL_STUB_LIB_SPEC" if stubs else "TCL_LIB_SPEC"])
    command = [compiler, f"-std={std}", optimize, "-fPIC", "-shared", "-Wall",
               *(["-DUSE_TCL_STUBS"] if stubs else []), *extra_cflags, *cflags, *tcl_cflags,
               *map(str, source), "-o", str(output), *ldflags, *extra_ldflags, *tcl_libs]
    # Rebuilt when the command (torch, Tcl, flags) or a source changes.
    stamp = hashlib.sha256(" ".join(command + [torch_version]).encode())
    for path in [*source, *headers]:
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
    return build([SOURCE], BUILD / "aten_direct.so", tclsh=tclsh, headers=[ATEN_OPS])


# What src/amp_precision.cpp needs from the rest of TCLIBTORCH (the handle
# tables and GetNextHandle its GradScaler commands use), and an init that
# registers only the autocast commands.  The procedures and their argument
# parsing are TCLIBTORCH's own, compiled from its file unchanged.
TCLIBTORCH_INIT = """\
#include "libtorchtcl.h"
std::unordered_map<std::string, torch::Tensor> tensor_storage;
std::unordered_map<std::string, std::shared_ptr<torch::optim::Optimizer>> optimizer_storage;
std::unordered_map<std::string, std::shared_ptr<torch::nn::Module>> module_storage;
std::string GetNextHandle(const std::string& prefix) {
    static int next = 0;
    return prefix + std::to_string(next++);
}
extern "C" int Tclibtorchautocast_Init(Tcl_Interp* interp) {
    if (Tcl_InitStubs(interp, "8.5", 0) == NULL) return TCL_ERROR;
    Tcl_CreateObjCommand(interp, "tclibtorch::autocast_enable", Torch_AutocastEnable_Cmd, NULL, NULL);
    Tcl_CreateObjCommand(interp, "tclibtorch::autocast_disable", Torch_AutocastDisable_Cmd, NULL, NULL);
    Tcl_CreateObjCommand(interp, "tclibtorch::autocast_is_enabled", Torch_AutocastIsEnabled_Cmd, NULL, NULL);
    Tcl_CreateObjCommand(interp, "tclibtorch::autocast_set_dtype", Torch_AutocastSetDtype_Cmd, NULL, NULL);
    return Tcl_PkgProvide(interp, "tclibtorchautocast", "1.0");
}
"""


def build_tclibtorch(checkout, outdir, tclsh="tclsh"):
    """TCLIBTORCH's autocast commands, from its checkout, as one .so in
    outdir, with its build's flags (-O3, linked to libtcl, not stubs) but
    C++20, which this torch's headers need (its CMakeLists.txt says C++17)."""
    src = Path(checkout) / "src"
    for name in ("amp_precision.cpp", "libtorchtcl.h"):
        if not (src / name).exists():
            raise BuildError(f"{src / name} is missing: is {checkout} a TCLIBTORCH checkout?")
    outdir = Path(outdir)
    # amp_precision.cpp includes c10/cuda/CUDAGuard.h but uses nothing from
    # it; a CPU-only torch ships that header without the CUDA ones it needs.
    shim = outdir / "shim" / "c10" / "cuda"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "CUDAGuard.h").write_text("// empty: the autocast commands use no CUDA API\n")
    init = outdir / "tclibtorch_autocast_init.cpp"
    init.write_text(TCLIBTORCH_INIT)
    lib = Path(torch_flags()[1][0][2:])
    return build([src / "amp_precision.cpp", init], outdir / "tclibtorch_autocast.so",
                 extra_cflags=[f"-I{outdir / 'shim'}", f"-I{src}", "-Wno-unused-parameter"],
                 extra_ldflags=["-ltorch"] if (lib / "libtorch.so").exists() else [],
                 stubs=False, tclsh=tclsh, optimize="-O3")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tclibtorch", nargs=2, metavar=("CHECKOUT", "OUTDIR"),
                        help="build TCLIBTORCH's autocast commands from CHECKOUT into OUTDIR")
    options = parser.parse_args()
    try:
        print(build_tclibtorch(*options.tclibtorch) if options.tclibtorch else build_aten_direct())
    except BuildError as error:
        raise SystemExit(f"not built: {error}")
