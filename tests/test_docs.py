"""Every Tcl example in docs/ runs, and its `# Error:` and `# Returns:`
comments hold.  Each page runs in one tclsh, its blocks in order."""
import re

import pytest

from conftest import ROOT, run_tclsh

DOCS = ROOT / "docs"
BLOCK = re.compile(r"```tcl\n(.*?)```", re.S)
EXPECT = re.compile(r"^\s*# (Error|Returns): (.*)$")


def tcl_blocks(page):
    return BLOCK.findall(page.read_text())


def checked(block):
    """The block with each command followed by `# Error: X` or `# Returns: X`
    turned into a check of exactly that outcome."""
    lines = block.splitlines()
    for i, line in enumerate(lines):
        m = EXPECT.match(line)
        if m and i > 0:
            check = "tclamp_expect_error" if m[1] == "Error" else "tclamp_expect_result"
            lines[i - 1] = f"{check} {{{lines[i - 1].strip()}}} {{{m[2]}}}"
    return "\n".join(lines)


_page_runs = {}


def run_page(name, tmp_path_factory):
    if name not in _page_runs:
        _page_runs[name] = _run_page(name, tmp_path_factory)
    return _page_runs[name]


def _run_page(name, tmp_path_factory):
    blocks = tcl_blocks(DOCS / name)
    script = [f"source {{{ROOT / 'tests' / 'docs_prelude.tcl'}}}"]
    script += [f"tclamp_doc_block {n} {{{checked(b)}}}" for n, b in enumerate(blocks)]
    r = run_tclsh("\n".join(script) + "\n", tmp_path_factory.mktemp("docs"))
    outcomes = {}
    for chunk in ("\n" + r.stdout).split("\n@@block ")[1:]:
        number, _, rest = chunk.partition(" ")
        outcomes[int(number)] = rest
    return outcomes, r.stderr


PAGES = sorted(p.name for p in DOCS.glob("*.md"))
CASES = [(name, n) for name in PAGES for n in range(len(tcl_blocks(DOCS / name)))]


@pytest.mark.parametrize("page,block", CASES, ids=[f"{p}#{n}" for p, n in CASES])
def test_doc_example(page, block, tmp_path_factory):
    outcomes, stderr = run_page(page, tmp_path_factory)
    assert block in outcomes, f"the page stopped before block {block}:\n{stderr}"
    assert outcomes[block].startswith("ok"), outcomes[block]


def test_every_command_has_a_page():
    from tclamp.commands import all_commands
    names = {c.name for c in all_commands()} | {"py"}
    assert names <= {p.removesuffix(".md") for p in PAGES}
