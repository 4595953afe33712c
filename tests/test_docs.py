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


README_ROW = re.compile(r"^\| \[torch::(\w+)\]\(docs/\w+\.md\)(?: `([^`]*)`)? \| ?(\w*) ?\|", re.M)


def test_readme_command_table_lists_every_command_and_its_alias(tmp_path):
    """The README's table of commands names every torch:: command and its
    camelCase alias, each a real command; and the commands its opening list
    says take no positional form (the two that run a script) are exactly
    the rows whose syntax has only options before a script."""
    rows = README_ROW.findall(README.read_text())
    listed = {name for name, _, _ in rows} | {alias for _, _, alias in rows if alias}
    r = run_tclsh("package require tclamp\n"
                  "puts [lmap c [info commands ::torch::*] {namespace tail $c}]\n", tmp_path)
    assert r.returncode == 0, r.stderr
    assert listed == set(r.stdout.split())
    for name, _, alias in rows:         # snake_case and its camelCase spelling
        assert alias == "" and name == "autocast" or \
            alias == re.sub(r"_(\w)", lambda m: m[1].upper(), name), name
    script_only = {name for name, syntax, _ in rows
                   if re.fullmatch(r"(\?-?\w+[^?]*\? )*(body|script)", syntax)}
    assert script_only == {"autocast", "autocast_trace"}
    opening = " ".join(README.read_text().split("## Two commands")[0].split())
    assert ("each but the two that run a script (`torch::autocast` and "
            "`torch::autocast_trace`, options then the script) takes positional or "
            "`-name value` arguments") in opening


def test_readme_claims_a_cpu_build_of_torch_only_where_make_asks_for_one():
    """`make setup` installs TORCH_SPEC with pip's own index: on a fresh
    Debian machine with PyPI that is torch's CUDA build, so the README may
    not promise the CPU build unless the Makefile chooses an index."""
    makefile = (ROOT / "Makefile").read_text()
    spec = re.search(r"^TORCH_SPEC \?= torch==(\S+)$", makefile, re.M)[1]
    setup = " ".join(README.read_text().split("## Two commands")[1]
                     .split("## Using it")[0].split())
    assert f"installs torch {spec}" in setup
    if not re.search(r"index-url|INDEX_URL|find-links|FIND_LINKS", makefile):
        assert "(CPU build)" not in setup
        assert "pip takes the torch build its index offers" in setup


def test_readme_counts_the_bridge_s_c_files_as_layout_lists_them():
    """The README's count of the bridge's C files and headers is the
    checkout's, and its Layout names each of them."""
    text = README.read_text()
    sources = sorted(p.name for p in (ROOT / "src" / "tclamp").glob("*.c"))
    headers = sorted(p.name for p in (ROOT / "src" / "tclamp").glob("*.h"))
    words = {6: "six", 3: "three"}
    opening = " ".join(text.split("**Runs on**")[0].split())
    assert (f"({words.get(len(sources))} C files and {words.get(len(headers))} headers, "
            "listed under [Layout](#layout))") in opening
    layout = text.split("## Layout")[1]
    assert all(name in layout for name in sources + headers)


def test_readme_tclsh_transcripts_show_what_tclsh_answers(tmp_path):
    """The README's `% command` / answer transcripts (in ```sh blocks, which
    the Tcl checks above do not run) are what a fresh tclsh answers, the
    version from `package require tclamp` included."""
    transcripts = [block for block in code_blocks(README, "sh") if "\n% " in "\n" + block]
    assert transcripts
    answered = []
    for block in transcripts:
        lines = [line for line in block.splitlines() if line and not line.startswith("TCLLIBPATH=")]
        pairs = [(lines[i][2:], lines[i + 1]) for i in range(0, len(lines), 2)]
        assert all(line.startswith("% ") for line in lines[::2]), block
        script = "".join(f"puts [{command}]\n" for command, _ in pairs)
        r = run_tclsh(script, tmp_path)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert r.stdout.splitlines() == [answer for _, answer in pairs]
        answered += pairs
    version = (ROOT / "src" / "tclamp" / "VERSION").read_text().strip()
    assert ("package require tclamp", version) in answered
