"""A C program that embeds Tcl, loads tclamp and returns from main without
ending Tcl: Python is closed from libc's exit handlers.

libc runs those last registered first, so the C++ static destructors of
torch (registered when `package require tclamp` imports it) ran before an
exit hook registered when Python started.  Finalizing Python there read
torch._C's freed method table; whether that crashed depended on what the
freed memory held (a SIGSEGV in one checkout, never in another).  Freed
memory is made to hold a pattern here (glibc's MALLOC_PERTURB_), so such a
read crashes every run, and valgrind checks one run for any invalid read.
"""
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, compile_with_tcl, needs_setup, tcl_env

# A tensor handle and an atexit handler that uses torch: both are released
# or run at the end, and need torch intact then.
PAYLOAD = """\
package require tclamp
py exec {f = open("a.txt", "w"); f.write("python-data")}
set ::writer [py call open b.txt w]
$::writer write handle-data
set ::ones [py eval {__import__("torch").ones(3)}]
py exec {
import atexit, torch
atexit.register(lambda: print("atexit ran", torch.zeros(2).add(1).sum().item()))
}
puts "tcl says hello"
"""
OUTPUT = ["tcl says hello", "atexit ran 2.0"]


@pytest.fixture
def embed(tmp_path):
    program = tmp_path / "embed"
    compile_with_tcl(program, ROOT / "tests" / "hosts" / "embed.c")
    (tmp_path / "main.tcl").write_text(PAYLOAD)
    return [str(program), "main.tcl"]


def run(command, tmp_path, **env):
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=900,
                          stdin=subprocess.DEVNULL,
                          env=tcl_env(TCLAMP_PYTHON=sys.executable, **env))


def assert_ended_well(r, tmp_path):
    report = f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}"
    assert r.returncode == 0, report
    assert r.stdout.splitlines() == OUTPUT, report
    assert r.stderr == "", report
    assert (tmp_path / "a.txt").read_text() == "python-data"
    assert (tmp_path / "b.txt").read_text() == "handle-data"


def test_returning_from_main_ends_cleanly_every_time(embed, tmp_path):
    # 255: freed bytes read as set flags and wild pointers (12 of 12 runs
    # crashed with it before the fix, 0 of 3 without it).
    for _ in range(5):
        assert_ended_well(run(embed, tmp_path, MALLOC_PERTURB_="255"), tmp_path)


def test_returning_from_main_reads_no_freed_memory(embed, tmp_path):
    needs_setup("valgrind", shutil.which("valgrind"))
    suppressions = tmp_path / "ld.supp"
    # ld.so's vectorized strncmp reads a whole word past a short string
    # while dlopen reads RUNPATHs: not ours, and harmless.
    suppressions.write_text("{\n   ld.so-strncmp\n   Memcheck:Addr8\n   fun:strncmp\n"
                            "   fun:is_dst\n}\n")
    r = run(["valgrind", "--error-exitcode=99", "--undef-value-errors=no",
             f"--suppressions={suppressions}", "--num-callers=30", *embed], tmp_path,
            PYTHONMALLOC="malloc")
    assert "ERROR SUMMARY: 0 errors" in r.stderr, r.stderr[-6000:]
    r.stderr = ""       # valgrind's own report
    assert_ended_well(r, tmp_path)
