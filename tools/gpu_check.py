"""The suite on a GPU machine that has python3 with a CUDA torch and nothing
else tclamp needs (no Tcl, no compilers, no network), from the folder that
`make gpu-pack` made here (build/gpu-check: Debian's Tcl packages, the
tclamp wheel for that Python, the test tools' wheels).

    tools/gpu-check.sh [OUT]        (make gpu-check; docs/matrix.md)

Unpacks Tcl into build/gpu-check-run/tcl, makes a venv there that sees
the machine's own Python packages (torch) and holds the test tools, puts
the wheel's bridge beside the checkout's Python modules (as `make setup`'s
editable build does), then runs pytest on tests/ (the Tcl suite, the CUDA
tier, the memory tests, everything else; where CPUs are left over, the
tcltest files in a run of their own beside the rest) and a memory
diagnostic.  All
output also goes to OUT/gpu-check.log (OUT: the argument, else $OUT, else
build/gpu-check-out); the last line is the summary.  Exit status 0 when
nothing failed.
"""
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ElementTree
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACK = ROOT / "build" / "gpu-check"
RUN = ROOT / "build" / "gpu-check-run"
TCL_ROOT = RUN / "tcl"
VENV = RUN / "venv"
PACKAGE = ROOT / "src" / "tclamp"
UNPACKED_TCLSH = TCL_ROOT / "usr" / "bin" / "tclsh8.6"
TCLSH = RUN / "bin" / "tclsh8.6"
TCL_LIBRARY = TCL_ROOT / "usr" / "share" / "tcltk" / "tcl8.6"
LIBTCL_DIR = TCL_ROOT / "usr" / "lib" / "x86_64-linux-gnu"


class Log:
    """Writes to stdout and to the log file."""

    def __init__(self, path):
        self.file = open(path, "w", encoding="utf-8")

    def __call__(self, text=""):
        print(text, flush=True)
        self.file.write(text + "\n")
        self.file.flush()


def deb_members(path):
    """(name, bytes) of each member of a .deb (an ar archive)."""
    with open(path, "rb") as deb:
        if deb.read(8) != b"!<arch>\n":
            raise SystemExit(f"gpu-check: {path} is not a Debian package")
        while header := deb.read(60):
            name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
            yield name, deb.read(size)
            deb.read(size % 2)


def unpack_deb(path, destination):
    """dpkg-deb -x in Python: the machine may have no dpkg."""
    for name, data in deb_members(path):
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                # Debian's own files, absolute links included.
                if hasattr(tarfile, "fully_trusted_filter"):
                    tar.extractall(destination, filter="fully_trusted")
                else:
                    tar.extractall(destination)


def unpack_tcl(log):
    for deb in sorted((PACK / "debs").glob("*.deb")):
        unpack_deb(deb, TCL_ROOT)
        log(f"unpacked {deb.name}")
    # Thread beside Tcl's library, whose parent directory is on every
    # tclsh's auto_path; TCLLIBPATH is the tests' own (ROOT/tcl).
    for thread in (TCL_ROOT / "usr" / "lib" / "tcltk" / "x86_64-linux-gnu").glob("thread*"):
        thread.rename(TCL_LIBRARY.parent / thread.name)


# Debian's tclsh looks for libtcl, its library and its Tcl modules
# (tcltest) under /usr; these say where they are now.
TCL_SETTINGS = {"TCL_LIBRARY": str(TCL_LIBRARY), "TCL8_6_TM_PATH": str(TCL_LIBRARY / "tcl8")}
TCLSH_WRAPPER = """#!/bin/sh
# The unpacked tclsh8.6, also for a test that runs it with no environment.
export TCL_LIBRARY='{TCL_LIBRARY}' TCL8_6_TM_PATH='{TCL8_6_TM_PATH}'
export LD_LIBRARY_PATH='{libtcl}'${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}
exec '{tclsh}' "$@"
"""


def tclsh_wrapper():
    TCLSH.parent.mkdir(parents=True, exist_ok=True)
    TCLSH.write_text(TCLSH_WRAPPER.format(libtcl=LIBTCL_DIR, tclsh=UNPACKED_TCLSH, **TCL_SETTINGS))
    TCLSH.chmod(0o755)


def environment():
    """What every process of the run gets: the unpacked Tcl (the Python
    host loads libtcl from LD_LIBRARY_PATH)."""
    env = dict(os.environ, TCLSH=str(TCLSH), **TCL_SETTINGS,
               LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(LIBTCL_DIR),
                                                             os.environ.get("LD_LIBRARY_PATH")])))
    # The tests skip what needs this machine's absent tools (conftest's
    # needs_setup) or the package index, which this run goes without.
    env.update(TCLAMP_GPU_CHECK="1", PIP_NO_INDEX="1")
    # The machine's own pytest plugins stay out of the tests' pytest runs
    # (pytest-benchmark warns on stderr under xdist).
    env["PYTEST_ADDOPTS"] = "-p no:benchmark"
    for name in ("TCLAMP_PYTHON", "TCL_CONFIG", "WISH", "PYTHONPATH"):
        env.pop(name, None)
    return env


def venv_python():
    return VENV / "bin" / "python3"


def ask(python, code, env=None):
    return json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                                     check=True, env=env).stdout)


def make_venv(log):
    """A venv of this python3 that sees the checkout's modules, then the
    packages this python3 sees (its torch, even when this python3 is itself
    in a venv), through a .pth file, after its own site-packages, which get
    the test tools.  The checkout comes first: a tclamp this python3 already
    has (installed, or another checkout's) must not be the one tested."""
    import venv
    venv.EnvBuilder(symlinks=True, with_pip=False).create(VENV)
    site = Path(ask(venv_python(), "import json, sysconfig; print(json.dumps(sysconfig.get_path('purelib')))"))
    own = set(ask(venv_python(), "import json, sys; print(json.dumps(sys.path))"))
    here = str(Path(__file__).resolve().parent)
    seen = [p for p in sys.path if p and p != here and p not in own and os.path.isdir(p)]
    (site / "gpu_check_origin.pth").write_text("".join(f"{p}\n" for p in [ROOT / "src", *seen]))
    log(f"venv {VENV}, which also sees: {', '.join(seen) or 'nothing more'}")
    return site


def install_wheels(site, log):
    """Unzips the test tools' wheels into the venv (pure Python: no pip
    needed); numpy only if the machine's Python has none.  tclamp's wheel:
    its metadata (pytest's plugin entry point) into the venv, its bridge
    binaries beside the checkout's modules, which the venv imports first."""
    has_numpy = subprocess.run([sys.executable, "-c", "import numpy"],
                               capture_output=True).returncode == 0
    wheels = [wheel for wheel in sorted((PACK / "wheels").glob("*.whl"))
              if not (has_numpy and wheel.name.startswith("numpy-"))]
    for wheel in wheels:
        name = wheel.name.split("-")[0]
        with zipfile.ZipFile(wheel) as archive:
            if name != "tclamp":
                archive.extractall(site)
                continue
            tag = f"-cp{sys.version_info[0]}{sys.version_info[1]}-"
            if tag not in wheel.name:
                raise SystemExit(f"gpu-check: the pack is for another Python ({wheel.name}), this is "
                                 f"{sys.version.split()[0]}: make gpu-pack GPU_PYTHON=<a python of "
                                 "this version> on the development machine")
            check_same_tree(archive)
            for member in archive.namelist():
                if ".dist-info/" in member:
                    archive.extract(member, site)
                elif built(member):
                    (PACKAGE / Path(member).name).write_bytes(archive.read(member))
    log(f"installed {', '.join(w.name for w in wheels)}"
        + (" (numpy: the machine's own)" if has_numpy else ""))


def built(member):
    """What the build adds to the package: the bridges, loaders and index."""
    return member.startswith("tclamp/") and (member.endswith(".so") or member == "tclamp/pkgIndex.tcl")


def check_same_tree(archive):
    """The wheel must hold this checkout's tclamp, or the tests would test
    another one."""
    differ = [member for member in archive.namelist()
              if member.startswith("tclamp/") and not member.endswith("/") and not built(member)
              and not ((PACKAGE / member[len("tclamp/"):]).is_file()
                       and (PACKAGE / member[len("tclamp/"):]).read_bytes() == archive.read(member))]
    if differ:
        raise SystemExit("gpu-check: the pack's wheel was built from another tree "
                         f"({', '.join(differ)} differ): run make gpu-pack again")


CONSOLE_SCRIPTS = """import importlib.metadata, os, sys
bin = os.path.dirname(sys.executable)
for entry in importlib.metadata.entry_points(group="console_scripts"):
    path = os.path.join(bin, entry.name)
    if not os.path.exists(path):
        with open(path, "w") as script:
            script.write(f"#!{sys.executable}\\nimport sys\\nimport {entry.module}\\n"
                         f"sys.exit({entry.module}.{entry.attr}())\\n")
        os.chmod(path, 0o755)
"""


def console_scripts(env):
    """The venv's commands, as pip would write them, for every package it
    sees (tclamp's own, torch's torchrun): the tests run some."""
    subprocess.run([str(venv_python()), "-c", CONSOLE_SCRIPTS], check=True, env=env)


def checkout_index(env):
    """tcl/pkgIndex.tcl and tcl/python-path, as `make setup` writes them."""
    (ROOT / "tcl").mkdir(exist_ok=True)
    (ROOT / "tcl" / "python-path").write_text(f"{venv_python()}\n")
    subprocess.run([str(venv_python()), str(PACKAGE / "pkgindex.py"), str(ROOT / "tcl" / "pkgIndex.tcl")],
                   check=True, env=env)


SANITY = r"""
if {[catch {
    puts "Tcl [info patchlevel]: [info nameofexecutable]"
    foreach {name path} [list library [info library] \
            Thread [package ifneeded Thread [package require Thread]] \
            tcltest [package ifneeded tcltest [package require tcltest]]] {
        if {[string first $root $path] < 0} { error "$name is not the unpacked one: $path" }
    }
    package require tclamp
    py exec {import torch}
    puts "tclamp [package present tclamp], Python [py eval {__import__('sys').version.split()[0]}],\
        torch [py eval torch.__version__], CUDA [py eval torch.version.cuda]:\
        [py eval {', '.join(map(torch.cuda.get_device_name, range(torch.cuda.device_count()))) or 'torch sees no GPU'}]"
} message]} {
    puts $message
    exit 1
}
"""


def sanity(env, log):
    """The unpacked Tcl, its Thread and tcltest, and tclamp with the
    machine's torch, in one tclsh."""
    r = subprocess.run([str(TCLSH)], input=f"set root {{{TCL_ROOT}}}\n" + SANITY, capture_output=True,
                       text=True, env=dict(env, TCLLIBPATH=str(ROOT / "tcl")))
    for line in (r.stdout + r.stderr).splitlines():
        log(line)
    if r.returncode != 0:
        raise SystemExit("gpu-check: the unpacked Tcl does not run tclamp (above)")


def pytest_runs(out):
    """The pytest commands, each with its junit file: one run, in parallel
    where there are jobs for it (tests/gpu_schedule.py shares it out).
    Every worker collects every file it could be given, and collecting a
    tcltest file runs it in a tclsh that imports torch (45 s for them all
    with a CUDA torch on the development machine, against 9 s for the
    Python files).  So where CPUs are left over beside the workers and the
    memory diagnostic, the tcltest files run in a pytest of their own,
    beside the others, and are collected once."""
    cpus = os.cpu_count() or 1
    jobs = int(os.environ.get("GPU_CHECK_JOBS") or min(8, cpus // 2))
    # pytest-timeout: a hung test fails alone, and the run still ends in time.
    command = [str(venv_python()), "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfEs",
               "--timeout=300", "--durations=15"]
    # Each file whole in one worker, except the long files' tests, one at a
    # time; handed out in the order collected, the longest files first, not
    # by how many tests each has (tests/gpu_schedule.py).
    parallel = (["-n", str(jobs), "--dist", "loadfile", "--no-loadscope-reorder"]
                if jobs > 1 else [])
    if jobs <= 1 or cpus < jobs + 2:
        return [(command + parallel + [f"--junitxml={out / 'pytest.xml'}", "tests"],
                 out / "pytest.xml")]
    # Without pytest's python plugin only tclamp's takes files: its *.test
    # (pyproject's tcltest_files), which the other run leaves out.
    return [(command + parallel + ["--ignore-glob=*.test", f"--junitxml={out / 'pytest.xml'}",
                                   "tests"], out / "pytest.xml"),
            (command + ["-p", "no:python", f"--junitxml={out / 'pytest-tcltest.xml'}", "tests"],
             out / "pytest-tcltest.xml")]


def run_side_by_side(runs, env, log):
    """Runs the commands at once; the first one's output goes to the log as
    it comes, each other's (kept beside its junit file, .log) after it."""
    others = []
    for command, junit in runs[1:]:
        kept = junit.with_suffix(".log")
        with open(kept, "w", encoding="utf-8") as file:
            others.append((command, kept, start(command, env, file)))
    log("$ " + " ".join(runs[0][0]))
    run_logged(runs[0][0], env, log)
    for command, kept, process in others:
        process.wait()
        log("$ " + " ".join(command))
        for line in kept.read_text(encoding="utf-8", errors="replace").splitlines():
            log(line)


def start(command, env, stdout, **options):
    """The command in the checkout, its stderr with its stdout, unbuffered:
    each line is in its output as soon as it is written."""
    return subprocess.Popen(command, cwd=ROOT, env=dict(env, PYTHONUNBUFFERED="1"),
                            stdout=stdout, stderr=subprocess.STDOUT, **options)


def run_logged(command, env, log):
    process = start(command, env, subprocess.PIPE, text=True, errors="replace")
    for line in process.stdout:
        log(line.rstrip("\n"))
    return process.wait()


def counts(junit):
    """passed, failed (errors included), skipped, xfailed from pytest's
    junit file (which writes an expected failure as a skip)."""
    if not junit.exists():
        return 0, 1, 0, 0
    outcomes = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes["failed"] += 1
        elif skipped is not None:
            outcomes["xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"] += 1
        else:
            outcomes["passed"] += 1
    return tuple(outcomes.values())


# --- memory diagnostic (issue 27): run under the venv's python -------------------
FIRST_INFO_TCL = """package require tclamp
py exec {
import os
def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
}
set before [py call rss_kb]
tclamp::info
puts [expr {[py call rss_kb] - $before}]
"""
FIRST_ASK_PYTHON = """import os, torch
def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
before = rss_kb()
torch.cuda.is_available(), torch.cuda.device_count()
print(rss_kb() - before)
"""


def memory_figures(what, hidden):
    """Resident growth in KB: (Tcl, Python alone) for one row, the GPU
    visible or hidden."""
    import tempfile
    sys.path.insert(0, str(ROOT / "tests"))
    import test_handle_memory as memory
    from conftest import tcl_env
    env = {"CUDA_VISIBLE_DEVICES": ""} if hidden else {}
    with tempfile.TemporaryDirectory() as scratch:
        if what == "first":
            tcl = subprocess.run([memory.TCLSH], input=FIRST_INFO_TCL, capture_output=True,
                                 text=True, cwd=scratch, env=tcl_env(**env), check=True)
            python = subprocess.run([sys.executable, "-c", FIRST_ASK_PYTHON], capture_output=True,
                                    text=True, cwd=scratch, env=tcl_env(**env), check=True)
            return int(tcl.stdout), int(python.stdout)
        got, control = getattr(memory, what)(Path(scratch), **env)
        return got["end"][0] - got["warm"][0], control


ROWS = (("first", "the first tclamp::info (Tcl) / torch.cuda.is_available (Python)"),
        ("scope_loop", f"scope in each turn, {9 * 10**4} turns"),
        ("training_loop", f"the demo's training step, {9 * 10**4} steps"))


def start_memory_diagnostic(env):
    """Each row with the GPU visible and hidden, all at once (each run is
    single-threaded), in children of the venv's python, while the suite runs."""
    return {(what, hidden): subprocess.Popen(
                [str(venv_python()), __file__, "--memory", what, str(int(hidden))], cwd=ROOT,
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for what, _ in ROWS for hidden in (False, True)}


def report_memory_diagnostic(started, log):
    results = {key: (process.communicate()[0], process.returncode) for key, process in started.items()}
    log("memory diagnostic: resident growth in KB, Tcl / the same in Python alone")
    log(f"{'':62} {'GPU visible':>15} {'GPU hidden':>15}")
    for what, title in ROWS:
        cells = []
        for hidden in (False, True):
            out, status = results[(what, hidden)]
            cells.append(out.strip() if status == 0 else "failed")
            if status != 0:
                log(f"-- {what}, GPU {'hidden' if hidden else 'visible'}:\n{out}")
        log(f"{title:62} {cells[0]:>15} {cells[1]:>15}")


def bench(env, out, log, quick):
    """README's training step against pure Python (bench/train_step.py), on
    the CPU and on CUDA, before the suite, while the machine is quiet; its
    RESULTS.md section goes to OUT."""
    command = [str(venv_python()), str(ROOT / "bench" / "train_step.py"), "--tclsh", str(TCLSH),
               "--output", str(out / "RESULTS.md")] + (["--quick"] if quick else [])
    log("$ " + " ".join(command))
    if run_logged(command, env, log) != 0:
        log("gpu-check: the bench failed (above)")


def main(argv):
    if argv[:1] == ["--memory"]:
        tcl, python = memory_figures(argv[1], argv[2] == "1")
        print(f"{tcl} / {python}")
        return 0
    out = Path(argv[0] if argv else os.environ.get("OUT") or ROOT / "build" / "gpu-check-out")
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu-check.log")
    started = time.monotonic()
    if not (PACK / "wheels").is_dir():
        raise SystemExit(f"gpu-check: no {PACK}: run `make gpu-pack` on the development machine "
                         "and bring the folder along")
    log(f"gpu-check: {sys.executable} (Python {sys.version.split()[0]}), {os.cpu_count()} CPUs")
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        raise SystemExit(f"gpu-check: {sys.executable} has no torch: set GPU_CHECK_PYTHON "
                         "to the python3 whose torch is to be tested")
    shutil.rmtree(RUN, ignore_errors=True)
    RUN.mkdir(parents=True)
    # The suite expects SIGINT's default action in the programs it starts; a
    # shell that started this in the background left it ignored.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    env = environment()
    unpack_tcl(log)
    tclsh_wrapper()
    site = make_venv(log)
    install_wheels(site, log)
    console_scripts(env)
    checkout_index(env)
    sanity(env, log)
    bench_mode = os.environ.get("GPU_CHECK_BENCH")
    bench_took = ""
    if bench_mode in ("1", "quick", "only"):
        bench_started = time.monotonic()
        bench(env, out, log, quick=bench_mode == "quick")
        bench_took = f" (the bench {time.monotonic() - bench_started:.0f}s of them)"
    if bench_mode == "only":
        log(f"gpu-check: the bench alone, in {time.monotonic() - started:.0f}s")
        return 0
    diagnostic = start_memory_diagnostic(env)
    runs = pytest_runs(out)
    run_side_by_side(runs, env, log)
    passed, failed, skipped, xfailed = map(sum, zip(*(counts(junit) for _, junit in runs)))
    report_memory_diagnostic(diagnostic, log)
    log(f"gpu-check: {passed} passed, {failed} failed, {skipped} skipped, {xfailed} xfailed "
        f"in {time.monotonic() - started:.0f}s{bench_took}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
