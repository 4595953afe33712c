"""What the benchmark scripts share: the machine line and bench/RESULTS.md.

Each script owns one section of RESULTS.md and rewrites only that one, so
the file always holds the last run of every script (`make bench` runs all).
"""
import os
import platform
import re
import subprocess
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
SECTIONS = ("train_step.py", "step_counts.py", "run.py", "compare.py")     # their order in the file
TITLE = ("# tclamp benchmarks\n\n"
         "Written by the scripts in bench/ (`make bench` runs them all); each section "
         "is the last run of its script.\n")


def checkout():
    """The commit measured, and whether src/ has changes not in it."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    return commit + (" + uncommitted changes in src/" if git("status", "--porcelain", "src") else "")


def machine(tclsh="tclsh"):
    """CPU, kernel, the versions of Python, Tcl (tclsh's) and torch, and the
    commit measured, as one line."""
    try:
        tcl = subprocess.run([tclsh], input="puts [info patchlevel]\n", capture_output=True,
                             text=True).stdout.strip() or "not found"
    except FileNotFoundError:
        tcl = "not found"
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "not installed"
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    return (f"{time.strftime('%Y-%m-%d')}, {cpu}, {os.cpu_count()} cores; "
            f"Linux {platform.release()}; Python {platform.python_version()}, "
            f"Tcl {tcl}, torch {torch}; tclamp at {checkout()}")


def _markers(script):
    return f"<!-- {script}: begin -->", f"<!-- {script}: end -->"


def write_section(script, text, path=RESULTS):
    """Replace `script`'s section of the results file with `text`."""
    old = path.read_text() if path.exists() else ""
    sections = {}
    for name in SECTIONS:
        begin, end = _markers(name)
        found = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(end), old, re.S)
        if found:
            sections[name] = found.group(1)
    sections[script] = text.rstrip("\n") + "\n"
    parts = [TITLE]
    for name in SECTIONS:
        if name in sections:
            begin, end = _markers(name)
            parts.append(f"{begin}\n{sections[name]}{end}\n")
    path.write_text("\n".join(parts))
