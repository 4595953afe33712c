"""Every Tcl example in docs/ and in the README runs as written, and its
`# Error:` and `# Returns:` comments hold; every Python example runs as
written, in a fresh Python, without an error.

Each page runs in one fresh tclsh, its blocks in order, as a reader pasting
them would run them: the script is `package require tclamp` and the blocks,
nothing else, so a page shows its own set-up.  Each block runs inside a
`catch` at global level, to report it alone; a checked line is rewritten
in place into a test of exactly the outcome its comment states."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT, run_tclsh

DOCS = ROOT / "docs"
README = ROOT / "README.md"
EXPECT = re.compile(r"^\s*# (Error|Returns): (.*)$")


def code_blocks(page, language="tcl"):
    """The page's ```language blocks, in order."""
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), re.S)


def checked(block):
    """The block with each command followed by `# Error: X` or `# Returns: X`
    turned into a check of exactly that outcome."""
    lines = block.splitlines()
    for i, line in enumerate(lines):
        m = EXPECT.match(line)
        if m and i > 0:
            command, expected = lines[i - 1].strip(), m[2]
            if m[1] == "Error":
                lines[i - 1] = (
                    f"if {{![catch {{{command}}} ::tclamp_doc_got]}} {{"
                    f" error [string cat {{expected an error from: {command}}}] }}"
                    f" elseif {{$::tclamp_doc_got ne {{{expected}}}}} {{"
                    f" error [string cat {{from: {command}}} \\n {{expected the error: {expected}}}"
                    f" \\n {{got: }} $::tclamp_doc_got] }}")
            else:
                lines[i - 1] = (
                    f"if {{[set ::tclamp_doc_got [{command}]] ne {{{expected}}}}} {{"
                    f" error [string cat {{from: {command}}} \\n {{expected: {expected}}}"
                    f" \\n {{got: }} $::tclamp_doc_got] }}")
    return "\n".join(lines)


_page_runs = {}


def run_page(path, tmp_path_factory):
    if path not in _page_runs:
        _page_runs[path] = _run_page(path, tmp_path_factory)
    return _page_runs[path]


def _run_page(path, tmp_path_factory):
    script = ["package require tclamp"]
    for n, block in enumerate(code_blocks(path)):
        script.append(f"if {{[catch {{\n{checked(block)}\n}} message options]}} {{\n"
                      f"    puts \"@@block {n} failed: [dict get $options -errorinfo]\"\n"
                      f"}} else {{\n    puts \"@@block {n} ok\"\n}}")
    r = run_tclsh("\n".join(script) + "\n", tmp_path_factory.mktemp("docs"))
    outcomes = {}
    for chunk in ("\n" + r.stdout).split("\n@@block ")[1:]:
        number, _, rest = chunk.partition(" ")
        outcomes[int(number)] = rest
    return outcomes, r.stderr


PAGES = [DOCS / name for name in sorted(p.name for p in DOCS.glob("*.md"))] + [README]
CASES = [(path, n) for path in PAGES for n in range(len(code_blocks(path)))]


@pytest.mark.parametrize("page,block", CASES,
                         ids=[f"{p.relative_to(ROOT)}#{n}" for p, n in CASES])
def test_doc_example(page, block, tmp_path_factory):
    outcomes, stderr = run_page(page, tmp_path_factory)
    assert block in outcomes, f"the page stopped before block {block}:\n{stderr}"
    assert outcomes[block].startswith("ok"), outcomes[block]


PYTHON_CASES = [(path, n) for path in PAGES
                for n in range(len(code_blocks(path, "python")))]


@pytest.mark.parametrize("page,block", PYTHON_CASES,
                         ids=[f"{p.relative_to(ROOT)}#python{n}" for p, n in PYTHON_CASES])
def test_doc_python_example(page, block, tmp_path):
    code = code_blocks(page, "python")[block]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr


def test_readme_has_examples():
    assert len(code_blocks(README)) >= 4


def test_every_command_has_a_page():
    from tclamp.commands import all_commands
    names = {c.name for c in all_commands()} | {"py"}
    assert names <= {p.stem for p in PAGES}
