"""tclamp installed the way a user installs it: `pip install` of a copy of
this checkout into a fresh environment outside it, then the documented route
to a system tclsh.  The copy is deleted before tclsh runs, so nothing can
point into a checkout; and no path tclsh shows points into this one."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, TCLSH, needs_index, needs_make, run_tclsh
from tclamp import pkgindex

VERSION = (ROOT / "src" / "tclamp" / "VERSION").read_text().strip()
# This run's torch as an index serves it: without a local label such as
# +cu130 or +cpu, which no index has (pip then takes the build it finds).
TORCH_RELEASE = torch.__version__.split("+")[0]

# Everything tclsh loaded, and every place Python looks: all must be in
# the environment tclamp was installed into.
REPORT = """\
package require tclamp
puts [package present tclamp]
puts [torch::autocast_get_dtype cpu]
py import sys
py import torch
puts [join [list $::tclamp::python [lindex [info loaded] 0 0] \
    [py eval {__import__('tclamp').__file__}] [py eval torch.__file__] \
    [py eval sys.executable] [py eval sys.prefix]] \\n]
puts [join [lsearch -all -inline -not [py eval sys.path] *.zip] \\n]
"""


def users_env(**settings):
    """A user's environment: nothing that leads Python or Tcl to this checkout."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONPATH", "PYTHONHOME", "TCLAMP_PYTHON", "TCLLIBPATH")}
    return dict(env, **settings)


def users_tclsh(script, cwd, **settings):
    return subprocess.run([TCLSH], input=script, capture_output=True, text=True, cwd=cwd,
                          env=users_env(**settings), timeout=300)


def pip(python, *args):
    return subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                          check=True, capture_output=True, text=True, timeout=900,
                          env=users_env())


@pytest.fixture(scope="module")
def torch_env(tmp_path_factory):
    """A fresh environment outside the checkout with this run's torch."""
    venv = tmp_path_factory.mktemp("users") / "venv"
    subprocess.run([os.path.join(sys.base_prefix, "bin", "python3"), "-m", "venv", str(venv)], check=True, timeout=300)
    pip(venv / "bin" / "python", "install", f"torch=={TORCH_RELEASE}", "numpy",
        "setuptools>=68", "wheel")
    return venv


def copy_of_checkout(target):
    """The checkout's files as git sees them: no environment, no build."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    return target


def site_packages(venv):
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def refusal_of_checkout(checkout, tcl_dir):
    """What install-tcl says when its tclamp runs from a checkout."""
    return (f"tclamp install-tcl: this tclamp runs from the checkout {checkout}, which a Tcl "
            "package must not depend on: pip install the checkout (without -e) into an "
            f"environment outside it and run its tclamp install-tcl, or use TCLLIBPATH={tcl_dir}\n")


def assert_runs_from(venv, r):
    assert (r.returncode, r.stderr) == (0, "")
    version, dtype, *paths = r.stdout.splitlines()
    assert (version, dtype) == (VERSION, "bfloat16")
    package = site_packages(venv) / "tclamp"
    python, bridge, init, torch_init, executable, prefix = paths[:6]
    # `tclamp install-tcl` records bin/python; the package's index finds bin/pythonX.Y.
    assert python in (f"{venv}/bin/python", f"{venv}/bin/python{sys.version_info[0]}."
                                             f"{sys.version_info[1]}")
    assert (executable, prefix) == (python, str(venv))
    major = subprocess.run([TCLSH], input="puts [string index [info tclversion] 0]",
                           capture_output=True, text=True).stdout.strip()
    assert bridge.startswith(f"{package}/_bridge{major}.cpython-")     # this Tcl's bridge
    assert (init, torch_init) == (str(package / "__init__.py"),
                                  str(site_packages(venv) / "torch" / "__init__.py"))
    for path in paths:
        assert not path.startswith(str(ROOT)), path
    assert str(site_packages(venv)) in paths[6:]


@needs_index
def test_pip_install_then_tcl_dir_or_install_tcl(torch_env, tmp_path):
    source = copy_of_checkout(tmp_path / "tclamp-src")
    # The environment has setuptools: building with it needs nothing fetched.
    pip(torch_env / "bin" / "python", "install", "--no-build-isolation", str(source))
    shutil.rmtree(source)
    tclamp_command = torch_env / "bin" / "tclamp"

    tcl_dir = subprocess.run([tclamp_command, "--tcl-dir"], check=True, capture_output=True,
                             text=True, env=users_env()).stdout
    assert tcl_dir == f"{site_packages(torch_env) / 'tclamp'}\n"
    r = users_tclsh(REPORT, tmp_path, TCLLIBPATH=tcl_dir.strip())
    assert_runs_from(torch_env, r)

    target = tmp_path / "lib" / "tclamp"
    r = subprocess.run([tclamp_command, "install-tcl", target], check=True,
                       capture_output=True, text=True, env=users_env())
    assert r.stdout == (f"wrote {target / 'pkgIndex.tcl'}: `package require tclamp` works in "
                        f"a tclsh whose auto_path has {target.parent} (or {target})\n")
    index = (target / "pkgIndex.tcl").read_text()
    assert [line.split()[:3] for line in index.splitlines()
            if line and not line.startswith(("#", " ", "}"))] == [["package", "ifneeded", "tclamp"]]
    assert str(ROOT) not in index
    assert sorted(os.listdir(target)) == ["pkgIndex.tcl"]
    r = users_tclsh(f"lappend auto_path {target.parent}\n" + REPORT, tmp_path)
    assert_runs_from(torch_env, r)
    # Scanning the index (any missing package makes Tcl scan) runs nothing.
    r = users_tclsh(f"lappend auto_path {target.parent}\ncatch {{package require no_such}}\n"
                    "puts [list [package versions tclamp] [namespace exists ::tclamp] "
                    "[info loaded]]\n", tmp_path)
    assert r.stdout == f"{VERSION} 0 {{}}\n"
    # The documented undoing: the index, and the directories install-tcl made.
    r = subprocess.run([tclamp_command, "uninstall-tcl", target], check=True,
                       capture_output=True, text=True, env=users_env())
    assert r.stdout == f"removed {target / 'pkgIndex.tcl'}, {target}, {target.parent}\n"
    assert not (tmp_path / "lib").exists()


@needs_index
def test_editable_install_starts_its_environment_and_install_tcl_refuses(torch_env, tmp_path):
    """`pip install -e` of a checkout that `make setup` never ran in: the
    index beside src/tclamp names the environment installed into, and
    install-tcl refuses to write an index into the checkout, as for any."""
    source = copy_of_checkout(tmp_path / "tclamp-src")
    pip(torch_env / "bin" / "python", "install", "--no-build-isolation", "-e", str(source))
    try:
        tclamp_command = torch_env / "bin" / "tclamp"
        package = source / "src" / "tclamp"
        tcl_dir = subprocess.run([tclamp_command, "--tcl-dir"], check=True, capture_output=True,
                                 text=True, env=users_env()).stdout
        assert tcl_dir == f"{package}\n"
        r = users_tclsh(REPORT, tmp_path, TCLLIBPATH=str(package))
        assert (r.returncode, r.stderr) == (0, "")
        version, dtype, python, bridge, init, torch_init, executable, prefix, *path = \
            r.stdout.splitlines()
        assert (version, dtype) == (VERSION, "bfloat16")
        assert python == executable == f"{torch_env}/bin/python"     # pip's, which built it
        assert prefix == str(torch_env)
        assert bridge.startswith(f"{package}/_bridge")
        assert (init, torch_init) == (str(package / "__init__.py"),
                                      str(site_packages(torch_env) / "torch" / "__init__.py"))
        assert str(site_packages(torch_env)) in path

        r = subprocess.run([tclamp_command, "install-tcl", tmp_path / "lib" / "tclamp"],
                           capture_output=True, text=True, env=users_env())
        assert (r.returncode, r.stdout) == (1, "")
        assert r.stderr == refusal_of_checkout(source, package)
        assert not (tmp_path / "lib").exists()
    finally:
        pip(torch_env / "bin" / "python", "uninstall", "-y", "tclamp")


@needs_index
@needs_make
def test_make_install_tcl_and_uninstall_tcl(torch_env, tmp_path):
    source = copy_of_checkout(tmp_path / "tclamp-src")
    target = tmp_path / "lib" / "tcltk" / "tclamp"
    make = ["make", "-s", f"INSTALL_VENV={torch_env}", f"TCL_PKG_DIR={target}",
            f"TORCH_SPEC=torch=={TORCH_RELEASE}"]
    pip(torch_env / "bin" / "python", "uninstall", "-y", "tclamp")   # make installs it
    subprocess.run([*make, "install-tcl"], cwd=source, check=True, capture_output=True,
                   timeout=900, env=users_env())
    shutil.rmtree(source)
    r = users_tclsh(f"lappend auto_path {target.parent}\n" + REPORT, tmp_path)
    assert_runs_from(torch_env, r)

    # The environment was there before install-tcl: only tclamp leaves it.
    subprocess.run([*make, "uninstall-tcl"], cwd=ROOT, check=True, capture_output=True,
                   env=users_env())
    assert not (tmp_path / "lib").exists()       # nor what install-tcl made for it
    assert not (site_packages(torch_env) / "tclamp").exists()
    assert (site_packages(torch_env) / "torch").is_dir()


@needs_make
def test_uninstall_tcl_removes_an_environment_install_tcl_made(tmp_path):
    made = tmp_path / "tclamp-python"
    (made / "bin").mkdir(parents=True)
    (made / ".made-by-tclamp").touch()
    target = tmp_path / "tcltk" / "tclamp"
    target.mkdir(parents=True)
    (target / "pkgIndex.tcl").write_text(INSTALLED_INDEX_START)
    subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={made}",
                    f"TCL_PKG_DIR={target}"], check=True, capture_output=True)
    assert os.listdir(tmp_path) == ["tcltk"] and os.listdir(tmp_path / "tcltk") == []


# The first line of an index that `tclamp install-tcl` wrote.
INSTALLED_INDEX_START = f"# tclamp {VERSION}: written by `tclamp install-tcl` for any tclsh\n"


@needs_make
def test_make_uninstall_tcl_removes_only_tclamps_index_from_a_directory_that_holds_more(tmp_path):
    """docs/install.md: make uninstall-tcl removes what make install-tcl
    put there.  A TCL_PKG_DIR that holds more (another package, a user's
    file) loses tclamp's index alone and stays, with a word saying so, and
    one whose index is not tclamp's keeps it: `rm -rf $(TCL_PKG_DIR)`
    removed all of it, whoever's it was, once the environment was gone."""
    gone = tmp_path / "environment that is gone"
    mine = tmp_path / "my tcl"
    (mine / "otherpkg").mkdir(parents=True)
    (mine / "otherpkg" / "pkgIndex.tcl").write_text("package ifneeded otherpkg 1.0 {}\n")
    (mine / "notes.txt").write_text("mine\n")
    (mine / "pkgIndex.tcl").write_text(INSTALLED_INDEX_START)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "pkgIndex.tcl").write_text("package ifneeded theirs 1.0 {}\n")
    said = []
    for target in (mine, theirs):
        r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={gone}",
                            f"TCL_PKG_DIR={target}"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        said.append(r.stdout)
    assert sorted(os.listdir(mine)) == ["notes.txt", "otherpkg"]
    assert (mine / "otherpkg" / "pkgIndex.tcl").is_file()
    assert (theirs / "pkgIndex.tcl").read_text() == "package ifneeded theirs 1.0 {}\n"
    assert said == [f"make uninstall-tcl: {target} holds more than tclamp's index: left there\n"
                    for target in (mine, theirs)]


@needs_make
def test_make_uninstall_tcl_takes_a_directory_with_a_space_as_one(tmp_path):
    """Unquoted, `rm -rf $(TCL_PKG_DIR)` of ".../a b/tclamp" removed .../a;
    an empty INSTALL_VENV or TCL_PKG_DIR (/bin/python, or install-tcl's
    default directory) is refused before anything runs."""
    (tmp_path / "a").mkdir()
    made = tmp_path / "tclamp python"
    made.mkdir()
    (made / ".made-by-tclamp").touch()
    target = tmp_path / "a b" / "tclamp"
    target.mkdir(parents=True)
    subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={made}",
                    f"TCL_PKG_DIR={target}"], check=True, capture_output=True)
    assert sorted(os.listdir(tmp_path)) == ["a", "a b"] and os.listdir(tmp_path / "a b") == []
    for empty in ("INSTALL_VENV", "TCL_PKG_DIR"):
        r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={made}",
                            f"TCL_PKG_DIR={target}", f"{empty}="], capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (2, "")
        assert r.stderr.startswith("make uninstall-tcl: INSTALL_VENV and TCL_PKG_DIR must not "
                                   "be empty\n")


@needs_make
def test_make_uninstall_tcl_names_a_directory_as_it_is_and_refuses_a_single_quote(tmp_path):
    """make uninstall-tcl said which TCL_PKG_DIR it left inside double
    quotes: a ` in the name ran what it held as a command (and the name
    said was cut).  A ' in either name ended the recipes' own quotes: a
    shell syntax error (install-tcl's after it had begun); now both refuse
    it before anything runs (install-tcl by the same check)."""
    odd = tmp_path / 'a`touch ran`b"c'
    odd.mkdir()
    (odd / "notes.txt").write_text("mine\n")
    r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={tmp_path / 'gone'}",
                        f"TCL_PKG_DIR={odd}"], capture_output=True, text=True, cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, f"make uninstall-tcl: {odd} holds more than tclamp's index: left there\n", "")
    assert sorted(os.listdir(tmp_path)) == [odd.name] and os.listdir(odd) == ["notes.txt"]
    quoted = tmp_path / "it's"
    quoted.mkdir()
    for named in ([f"INSTALL_VENV={quoted}", f"TCL_PKG_DIR={tmp_path / 'x'}"],
                  [f"INSTALL_VENV={tmp_path / 'gone'}", f"TCL_PKG_DIR={quoted}"]):
        r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", *named],
                           capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (2, "")
        assert r.stderr.startswith("make uninstall-tcl: INSTALL_VENV and TCL_PKG_DIR must not "
                                   "hold a ' (a single quote)\n")
    assert sorted(os.listdir(tmp_path)) == [odd.name, "it's"] and os.listdir(quoted) == []


def make_question(*args):
    """0 if make has nothing to do for these targets and settings."""
    return subprocess.run(["make", "-q", "-C", ROOT, *args], capture_output=True).returncode


@needs_make
def test_another_torch_spec_sets_up_again(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".tclamp-torch").write_text("torch==2.13.0\n")
    stamp = venv / ".tclamp-setup"
    stamp.touch()
    assert make_question(str(stamp), f"VENV={venv}", "TORCH_SPEC=torch==2.13.0") == 0
    assert make_question(str(stamp), f"VENV={venv}", "TORCH_SPEC=torch==2.12.0") == 1
    dry = subprocess.run(["make", "-n", "-C", ROOT, str(stamp), f"VENV={venv}",
                          "TORCH_SPEC=torch==2.12.0"], capture_output=True, text=True).stdout
    assert f'{venv}/bin/python -m pip install --disable-pip-version-check "torch==2.12.0"' in dry
    assert f"echo 'torch==2.12.0' > {venv}/.tclamp-torch" in dry


@needs_make
def test_a_new_index_template_writes_the_index_beside_the_package_again():
    """The build writes src/tclamp/pkgIndex.tcl from pkgindex.py's template:
    a changed template builds again, else the checkout keeps the old index."""
    stamp = ".venv/.tclamp-built"
    if not (ROOT / stamp).exists() or make_question(stamp) != 0:
        pytest.skip("the checkout's .venv is not set up and built")
    assert make_question("-W", "src/tclamp/pkgindex.py", stamp) == 1


@needs_make
def test_setup_records_the_environment_for_the_checkout_index(tmp_path):
    venv = tmp_path / "venv"
    assert make_question("tcl/python-path", f"VENV={venv}") == 1
    dry = subprocess.run(["make", "-n", "tcl/python-path", f"VENV={venv}"], cwd=ROOT,
                         capture_output=True, text=True).stdout
    assert dry == f"mkdir -p tcl/\necho '{venv}/bin/python' > tcl/python-path\n"


def test_tcl_dir_of_a_checkout_is_its_tcl_directory():
    r = subprocess.run([sys.executable, "-m", "tclamp", "--tcl-dir"], capture_output=True,
                       text=True, check=True)
    assert r.stdout == f"{ROOT / 'tcl'}\n"


def test_tcl_dir_takes_no_script():
    # nor the prompt's words (-encoding without a script: tclsh's $argv)
    for words in (["script.tcl"], ["-encoding"], ["-encoding", "utf-8"]):
        r = subprocess.run([sys.executable, "-m", "tclamp", "--tcl-dir", *words],
                           capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (2, "")
        assert r.stderr.endswith("\ntclamp: error: --tcl-dir prints a directory and runs "
                                 "nothing: it takes no script\n")


def test_install_tcl_refuses_to_point_into_a_checkout(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tclamp", "install-tcl", tmp_path / "lib"],
                       capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == refusal_of_checkout(ROOT, ROOT / "tcl")
    assert not (tmp_path / "lib").exists()


def test_install_tcl_takes_one_directory():
    r = subprocess.run([sys.executable, "-m", "tclamp", "install-tcl", "a", "b"],
                       capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", "usage: tclamp install-tcl [dir]\n")


@pytest.mark.parametrize("path", ["/opt/plain/python3", "/home/a user/venv/bin/python",
                                  '/x/{brace/"quote"/$dollar/[bracket]/back\\slash;semi',
                                  "/x/new\nline/bin/python", "/x/back\\\nnewline"])
def test_paths_in_the_index_are_tcl_words(path, tmp_path):
    r = run_tclsh(f"set path {pkgindex.tcl_word(path)}\nputs $path\n", tmp_path)
    assert (r.stdout, r.stderr) == (path + "\n", "")


def test_an_index_for_paths_with_a_newline_is_valid_tcl(tmp_path):
    """install-tcl's comment line names the package and the Python: a
    newline there must end neither the comment nor a word."""
    package, python = "/x/nl\nvenv/site-packages/tclamp", "/x/nl\nvenv/bin/python"
    index = tmp_path / "pkgIndex.tcl"
    index.write_text(pkgindex.index_text(
        VERSION, f"the package is the Python one in {package}, and Python starts from {python}",
        package, python))
    r = run_tclsh(f"set dir {tmp_path}\nsource {index}\n"
                  f"foreach word [lrange [package ifneeded tclamp {VERSION}] end-3 end-1] {{\n"
                  "    puts [string map {\\n <newline>} $word]\n}\n", tmp_path)
    assert (r.stdout, r.stderr) == ("/x/nl<newline>venv/site-packages/tclamp\n"
                                    f"{VERSION}\n/x/nl<newline>venv/bin/python\n", "")


def install_tcl_outside_a_checkout(*words, cwd=None, **env):
    """`python -m tclamp install-tcl ...` as a pip-installed tclamp runs it
    (this checkout's own refuses, as test_install_tcl_refuses_... shows),
    with the environment variables `env` added."""
    program = ("import sys\nfrom tclamp import cli\ncli.checkout = lambda: None\n"
               "sys.exit(cli.main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", program, *map(str, words)],
                          capture_output=True, text=True, cwd=cwd, env={**os.environ, **env})


def test_an_empty_directory_is_refused_and_nothing_changes(tmp_path):
    """`tclamp install-tcl ""` would write into the current directory, and
    uninstall-tcl would remove the index there."""
    (tmp_path / "pkgIndex.tcl").write_text("# tclamp 0.1.0: written by `tclamp install-tcl`\n")
    for step in ("install-tcl", "uninstall-tcl"):
        r = install_tcl_outside_a_checkout(step, "", cwd=tmp_path)
        assert (r.returncode, r.stdout) == (1, "")
        assert r.stderr == (f'tclamp {step}: the directory is "" (an empty name): name a '
                            "directory, or leave it out for /usr/local/lib/tcltk/tclamp\n")
        assert os.listdir(tmp_path) == ["pkgIndex.tcl"]
        assert (tmp_path / "pkgIndex.tcl").read_text() == (
            "# tclamp 0.1.0: written by `tclamp install-tcl`\n")


def test_a_directory_name_that_is_not_utf8_is_refused_and_uninstalled_without_a_traceback(
        tmp_path):
    """Tcl reads a name's undecodable bytes as other characters, so an
    index there would never be found: install-tcl refuses the name, as one
    line.  Before, it wrote the index and then, printing the name to a
    strict UTF-8 stdout (a user's en_US.UTF-8 locale), failed with a
    UnicodeEncodeError traceback; uninstall-tcl, removing such an index,
    did the same."""
    strict = {"PYTHONIOENCODING": "utf-8:strict"}
    target = tmp_path / os.fsdecode(b"x\xff") / "tclamp"       # the bytes x, 0xff
    r = install_tcl_outside_a_checkout("install-tcl", target, **strict)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"tclamp install-tcl: the name {tmp_path}/x\\xff/tclamp is not utf-8 "
                        "text, and Tcl cannot name it: choose another directory\n")
    assert os.listdir(tmp_path) == []
    target.mkdir(parents=True)
    (target / "pkgIndex.tcl").write_text("# tclamp 0.1.0: written by `tclamp install-tcl`\n")
    r = install_tcl_outside_a_checkout("uninstall-tcl", target, **strict)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == f"removed {tmp_path}/x\\xff/tclamp/pkgIndex.tcl, {tmp_path}/x\\xff/tclamp\n"
    assert os.listdir(tmp_path) == [os.fsdecode(b"x\xff")]
    # Its refusals name the directory the same way.
    r = install_tcl_outside_a_checkout("uninstall-tcl", target, **strict)
    assert (r.returncode, r.stderr) == (1, f"tclamp uninstall-tcl: no pkgIndex.tcl in {tmp_path}/"
                                           "x\\xff/tclamp: name the directory that tclamp "
                                           "install-tcl wrote to\n")
    target.mkdir()
    (target / "pkgIndex.tcl").write_text("package ifneeded foo 1.0 {}\n")
    r = install_tcl_outside_a_checkout("uninstall-tcl", target, **strict)
    assert (r.returncode, r.stderr) == (1, f"tclamp uninstall-tcl: {tmp_path}/x\\xff/tclamp/"
                                           "pkgIndex.tcl is not an index that tclamp install-tcl "
                                           "wrote: left as it is\n")


def test_install_tcl_leaves_another_packages_index_alone(tmp_path):
    other = tmp_path / "tcllib"
    other.mkdir()
    (other / "pkgIndex.tcl").write_text("package ifneeded foo 1.0 {}\n")
    r = install_tcl_outside_a_checkout("install-tcl", other)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"tclamp install-tcl: {other / 'pkgIndex.tcl'} is another package's "
                        "index, which this would overwrite: name a directory of tclamp's own, "
                        f"such as {other / 'tclamp'}\n")
    assert (other / "pkgIndex.tcl").read_text() == "package ifneeded foo 1.0 {}\n"
    r = install_tcl_outside_a_checkout("uninstall-tcl", other)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"tclamp uninstall-tcl: {other / 'pkgIndex.tcl'} is not an index "
                        "that tclamp install-tcl wrote: left as it is\n")
    assert os.listdir(other) == ["pkgIndex.tcl"]
    # Nor the index beside the package, which `tclamp --tcl-dir` names.
    beside = ROOT / "src" / "tclamp"
    r = install_tcl_outside_a_checkout("uninstall-tcl", beside)
    assert (r.returncode, r.stderr) == (1, f"tclamp uninstall-tcl: {beside / 'pkgIndex.tcl'} is "
                                           "not an index that tclamp install-tcl wrote: left "
                                           "as it is\n")
    assert (beside / "pkgIndex.tcl").is_file()
    r = install_tcl_outside_a_checkout("install-tcl", other / "pkgIndex.tcl")
    assert (r.returncode, r.stderr) == (1, f"tclamp install-tcl: {other / 'pkgIndex.tcl'} is "
                                           "a file, not a directory\n")


def test_uninstall_tcl_removes_what_install_tcl_wrote_and_made(tmp_path):
    (tmp_path / "lib").mkdir()
    target = tmp_path / "lib" / "tcltk" / "tclamp"
    for _ in range(2):      # the second one, over the first, keeps what the first made
        r = install_tcl_outside_a_checkout("install-tcl", target)
        assert (r.returncode, r.stderr) == (0, "")
    assert os.listdir(target) == ["pkgIndex.tcl"]
    r = install_tcl_outside_a_checkout("uninstall-tcl", target)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == f"removed {target / 'pkgIndex.tcl'}, {target}, {target.parent}\n"
    assert os.listdir(tmp_path / "lib") == []
    r = install_tcl_outside_a_checkout("uninstall-tcl", target)
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == (f"tclamp uninstall-tcl: no pkgIndex.tcl in {target}: name the "
                        "directory that tclamp install-tcl wrote to\n")
    r = install_tcl_outside_a_checkout("uninstall-tcl", "a", "b")
    assert (r.returncode, r.stderr) == (1, "usage: tclamp uninstall-tcl [dir]\n")


def test_install_tcl_over_another_environments_index_says_so(tmp_path):
    target = tmp_path / "tclamp"
    target.mkdir()
    (target / "pkgIndex.tcl").write_text(
        "# tclamp 0.1.0: written by `tclamp install-tcl` for any tclsh; the package is the "
        "Python one in /x/site-packages/tclamp, and Python starts from /x/bin/python\n")
    wrote = (f"wrote {target / 'pkgIndex.tcl'}: `package require tclamp` works in a tclsh "
             f"whose auto_path has {tmp_path} (or {target})")
    r = install_tcl_outside_a_checkout("install-tcl", target)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == wrote + "; it replaces the index that started /x/bin/python\n"
    r = install_tcl_outside_a_checkout("install-tcl", target)      # the same environment
    assert (r.returncode, r.stdout, r.stderr) == (0, wrote + "\n", "")


def test_uninstall_tcl_keeps_a_directory_that_holds_more(tmp_path):
    target = tmp_path / "tcltk" / "tclamp"
    assert install_tcl_outside_a_checkout("install-tcl", target).returncode == 0
    (tmp_path / "tcltk" / "other").mkdir()
    r = install_tcl_outside_a_checkout("uninstall-tcl", target)
    assert r.stdout == f"removed {target / 'pkgIndex.tcl'}, {target}\n"
    assert os.listdir(tmp_path / "tcltk") == ["other"]


def test_uninstall_tcl_leaves_a_symbolic_link_named_tclamp(tmp_path):
    """A directory named tclamp that is a symbolic link to the user's own:
    the index goes, the link and its directory stay.  uninstall-tcl removed
    the index and then failed on the link ('[Errno 20] Not a directory')."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "tcltk").mkdir()
    link = tmp_path / "tcltk" / "tclamp"
    link.symlink_to(tmp_path / "mine")
    assert install_tcl_outside_a_checkout("install-tcl", link).returncode == 0
    r = install_tcl_outside_a_checkout("uninstall-tcl", link)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"removed {link / 'pkgIndex.tcl'}\n", "")
    assert link.is_symlink() and os.listdir(tmp_path / "mine") == []


def test_uninstall_tcl_leaves_the_index_of_another_environment_that_is_there(tmp_path):
    """An index another environment's install-tcl wrote over this one's
    starts that environment's Python; this environment's uninstall-tcl
    removed it, and the other tclamp was no Tcl package any more.  It is
    refused while that Python is there, and removed once it is gone."""
    other = tmp_path / "other"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "python").symlink_to(sys.executable)
    target = tmp_path / "tcltk" / "tclamp"
    target.mkdir(parents=True)
    index = INSTALLED_INDEX_START.rstrip("\n") + (
        f"; the package is the Python one in {other}, and Python starts from "
        f"{other / 'bin' / 'python'}\n")
    (target / "pkgIndex.tcl").write_text(index)
    r = install_tcl_outside_a_checkout("uninstall-tcl", target)
    assert (r.returncode, r.stdout, r.stderr) == (
        1, "", f"tclamp uninstall-tcl: {target / 'pkgIndex.tcl'} starts {other / 'bin' / 'python'}, "
               "another environment's tclamp: left as it is (its tclamp uninstall-tcl removes it)\n")
    assert (target / "pkgIndex.tcl").read_text() == index
    (other / "bin" / "python").unlink()
    (other / "bin" / "python").symlink_to(tmp_path / "python3.gone")
    r = install_tcl_outside_a_checkout("uninstall-tcl", target)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"removed {target / 'pkgIndex.tcl'}, {target}\n", "")


def fake_environment(place):
    """An environment install-tcl made, whose tclamp is this one (as a
    pip-installed tclamp runs it, with that environment as its prefix)."""
    (place / "bin").mkdir(parents=True)
    (place / ".made-by-tclamp").touch()
    tclamp = place / "bin" / "tclamp"
    tclamp.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys\nfrom tclamp import cli\n"
                      f"cli.checkout = lambda: None\nsys.prefix = sys.argv.pop(1)\n"
                      "sys.exit(cli.main(sys.argv[1:]))' \"$(dirname \"$0\")/..\" \"$@\"\n")
    tclamp.chmod(0o755)
    (place / "bin" / "python").symlink_to(sys.executable)
    return place


@needs_make
def test_make_uninstall_tcl_with_its_environment_leaves_another_packages_index(tmp_path):
    """With INSTALL_VENV's tclamp there, a TCL_PKG_DIR whose index is
    another package's stopped make uninstall-tcl (that tclamp refuses such
    an index, exit 2) and the environment stayed; without it the same
    directory was left with a word and the uninstall went on.  Now both
    leave the index, say so, and remove the environment."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "pkgIndex.tcl").write_text("package ifneeded theirs 1.0 {}\n")
    made = fake_environment(tmp_path / "made")
    r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={made}",
                        f"TCL_PKG_DIR={theirs}"], capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, f"make uninstall-tcl: {theirs} holds more than tclamp's index: left there\n", "")
    assert (theirs / "pkgIndex.tcl").read_text() == "package ifneeded theirs 1.0 {}\n"
    assert sorted(os.listdir(tmp_path)) == ["theirs"]


@needs_make
def test_make_uninstall_tcl_removes_what_an_environment_whose_python_is_gone_installed(tmp_path):
    """An environment install-tcl made whose Python no longer runs (its base
    Python upgraded away: bin/python dangles, bin/tclamp's #! names it):
    make uninstall-tcl ran its tclamp and stopped there ('not found', exit
    2), removing nothing.  The index, its directory and the environment go."""
    made = tmp_path / "made"
    (made / "bin").mkdir(parents=True)
    (made / ".made-by-tclamp").touch()
    (made / "bin" / "python").symlink_to(tmp_path / "python3.gone")
    (made / "bin" / "tclamp").write_text(f"#!{made / 'bin' / 'python'}\nimport sys\n")
    (made / "bin" / "tclamp").chmod(0o755)
    target = tmp_path / "tcltk" / "tclamp"
    target.mkdir(parents=True)
    (target / "pkgIndex.tcl").write_text(INSTALLED_INDEX_START)
    r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={made}",
                        f"TCL_PKG_DIR={target}"], capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert os.listdir(tmp_path) == ["tcltk"] and os.listdir(tmp_path / "tcltk") == []


@needs_make
def test_make_uninstall_tcl_leaves_the_index_of_another_environment_that_is_there(tmp_path):
    """make install-tcl with INSTALL_VENV=new over an index that old's wrote
    replaces it; make uninstall-tcl INSTALL_VENV=old then removed new's
    index too, and new's tclamp was no package any more.  An index that
    starts another environment's Python that is there stays, with a word;
    one that starts INSTALL_VENV's (however INSTALL_VENV is named) or a
    Python that is gone goes.  The environment goes in each case."""
    new = fake_environment(tmp_path / "new")
    target = tmp_path / "tcltk" / "tclamp"
    said = []
    for starts, venv in ((new / "bin" / "python", tmp_path / "old"),
                         (tmp_path / "old" / "bin" / "python", tmp_path / "old"),
                         (tmp_path / "old" / "bin" / "python", None),
                         (tmp_path / "same" / "bin" / "python", tmp_path / "tcltk" / ".." / "same")):
        venv = fake_environment(venv) if venv else tmp_path / "gone"
        target.mkdir(parents=True, exist_ok=True)
        (target / "pkgIndex.tcl").write_text(
            INSTALLED_INDEX_START.rstrip("\n") + f"; the package is the Python one in "
            f"{venv}, and Python starts from {starts}\n")
        r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={venv}",
                            f"TCL_PKG_DIR={target}"], capture_output=True, text=True)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        said.append(r.stdout.replace(str(target), "TARGET"))
        assert not venv.exists() and new.exists()
    assert said == [f"make uninstall-tcl: TARGET: its index starts {new}/bin/python, another "
                    "environment's tclamp: left there\n",
                    "removed TARGET/pkgIndex.tcl, TARGET\n", "", "removed TARGET/pkgIndex.tcl, TARGET\n"]
    assert sorted(os.listdir(tmp_path)) == ["new", "tcltk"] and os.listdir(tmp_path / "tcltk") == []


@needs_make
def test_make_uninstall_tcl_leaves_a_tcl_pkg_dir_that_is_a_symbolic_link(tmp_path):
    """TCL_PKG_DIR a symbolic link to the user's directory: tclamp's index
    goes from it, with and without INSTALL_VENV's tclamp, and the link
    stays with a word that says why (it said the directory held more than
    tclamp's index when nothing was left in it; with the environment's
    tclamp, make failed on the link after the index was gone)."""
    for gone in (True, False):
        mine = tmp_path / f"mine {gone}"
        mine.mkdir()
        link = tmp_path / f"tcltk {gone}" / "tclamp"
        link.parent.mkdir()
        link.symlink_to(mine)
        (mine / "pkgIndex.tcl").write_text(INSTALLED_INDEX_START)
        venv = tmp_path / "gone" if gone else fake_environment(tmp_path / "made")
        r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={venv}",
                            f"TCL_PKG_DIR={link}"], capture_output=True, text=True)
        said = "" if gone else f"removed {link / 'pkgIndex.tcl'}\n"
        assert (r.returncode, r.stdout, r.stderr) == (
            0, said + f"make uninstall-tcl: {link} is a symbolic link: left there\n", "")
        assert link.is_symlink() and os.listdir(mine) == [] and not venv.exists()
    # named with a / at its end (which -L follows): the same word
    r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={venv}",
                        f"TCL_PKG_DIR={link}/"], capture_output=True, text=True)
    assert (r.returncode, r.stdout, r.stderr) == (
        0, f"make uninstall-tcl: {link}/ is a symbolic link: left there\n", "")


def require_through_index(tmp_path, version, package, python):
    """`package require tclamp` in a tclsh whose auto_path has only an index
    written from the template for `version`, `package` and `python`: the
    index's directory, and what the tclsh printed (the error's message and
    errorCode) to stdout and stderr."""
    index_dir = tmp_path / "tcltk" / "tclamp"
    index_dir.mkdir(parents=True)
    (index_dir / "pkgIndex.tcl").write_text(
        pkgindex.index_text(version, "a test", package, python))
    r = run_tclsh(f"set auto_path [list {index_dir.parent}]\n"
                  "catch {package require tclamp} m o\nputs $m\nputs [dict get $o -errorcode]\n",
                  tmp_path)
    return index_dir, (r.stdout, r.stderr)


def test_an_index_whose_package_is_gone_says_which_index_and_what_to_do(tmp_path):
    gone = tmp_path / "venv" / "site-packages" / "tclamp"
    index_dir, printed = require_through_index(tmp_path, VERSION, gone,
                                               str(tmp_path / "venv" / "bin" / "python"))
    assert printed == (
        f"tclamp: no Python package in {gone} any more, which the index in {index_dir} names: "
        f"install tclamp again and run its `tclamp install-tcl {index_dir}`, or remove tclamp "
        f"from Tcl: rm {index_dir / 'pkgIndex.tcl'}\nTCLAMP NOT_INSTALLED\n", "")


def test_an_index_of_another_version_says_which_index_to_write_again(tmp_path):
    package = ROOT / "src" / "tclamp"
    index_dir, printed = require_through_index(tmp_path, "0.0.1", package, "")
    assert printed == (
        f"tclamp: the index in {index_dir} declares tclamp 0.0.1, but the package in {package} "
        f"is {VERSION}: write the index again with that package's "
        f"`tclamp install-tcl {index_dir}`\nTCLAMP VERSION\n", "")


@needs_make
def test_make_uninstall_tcl_removes_the_directories_install_tcl_made_with_the_environment_gone(
        tmp_path):
    """The index records the directories install-tcl made for it (`# made by
    install-tcl: [...]`).  With INSTALL_VENV's tclamp there, uninstall-tcl
    removes those that are empty; with the environment gone, make
    uninstall-tcl removed the index and TCL_PKG_DIR alone and left the
    parents it had made.  Now it removes them too (PYTHON reads the
    record), each only if it is a directory (not a link) with nothing in
    it; one install-tcl did not make stays, empty or not.  Without a
    Python that runs, the index and TCL_PKG_DIR go, as before."""
    said = []
    for case in ("gone", "no python", "there"):
        base = tmp_path / case
        mine = base / 'a "b" \u00e9'               # there before: not recorded
        made = [mine / "lib", mine / "lib" / "tcltk", mine / "lib" / "tcltk" / "tclamp"]
        kept = base / "kept"                        # made, and holds a file now
        linked = base / "linked"                    # made, a link now
        target = made[-1]
        target.mkdir(parents=True)
        (kept / "x").mkdir(parents=True)
        (base / "elsewhere").mkdir()
        linked.symlink_to(base / "elsewhere")
        (target / "pkgIndex.tcl").write_text(
            INSTALLED_INDEX_START + "# made by install-tcl: "
            + json.dumps([str(d) for d in [*reversed(made), kept / "x", kept, linked]]) + "\n")
        (kept / "x" / "notes.txt").write_text("mine\n")
        venv = fake_environment(base / "venv") if case == "there" else base / "venv"
        python = [f"PYTHON={base / 'no-python'}"] if case == "no python" else []
        r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl", f"INSTALL_VENV={venv}",
                            f"TCL_PKG_DIR={target}", *python], capture_output=True, text=True)
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        said.append(r.stdout)
        assert sorted(os.listdir(base)) == sorted(["elsewhere", "kept", "linked", mine.name])
        assert os.listdir(kept / "x") == ["notes.txt"] and not target.exists()
        assert os.listdir(mine) == ([] if case != "no python" else ["lib"]), case
        assert case != "no python" or os.listdir(made[1]) == []
    assert said == ["", "", f"removed {target / 'pkgIndex.tcl'}, {target}, {made[1]}, {made[0]}\n"]


def uninstall_by(route, index_dir):
    """Runs the removal of index_dir's index by the environment's `tclamp
    uninstall-tcl`, or as make uninstall-tcl does with the environment gone
    (`python3 -I install_record.py INDEX`)."""
    if route == "tclamp":
        r = subprocess.run([sys.executable, "-m", "tclamp", "uninstall-tcl", str(index_dir)],
                           capture_output=True, text=True)
    else:
        r = subprocess.run([sys.executable, "-I", str(ROOT / "src" / "tclamp" / "install_record.py"),
                            str(index_dir / "pkgIndex.tcl")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not (index_dir / "pkgIndex.tcl").exists()


@pytest.mark.parametrize("route", ["tclamp", "install_record"])
def test_a_tampered_record_removes_only_the_index_s_own_directories(tmp_path, route):
    """The record (`# made by install-tcl: [...]`) is a line in a file:
    edited, it named any directory, and an empty one was removed wherever it
    was: elsewhere on the disk, out of the index's tree by `..`, or relative
    to the current directory.  install-tcl only ever makes the index's
    directory and its parents, so only those are removed now."""
    base = tmp_path / "base"
    made = [base / "lib", base / "lib" / "tcltk", base / "lib" / "tcltk" / "tclamp"]
    made[-1].mkdir(parents=True)
    victims = [tmp_path / "victim", base / "victim2", base / "rel-victim", tmp_path / "v" / "w"]
    for victim in victims:
        victim.mkdir(parents=True)
    record = [*map(str, reversed(made)), str(victims[0]), str(base / "lib" / ".." / "victim2"),
              "rel-victim", str(victims[3]), str(tmp_path / "v")]
    (made[-1] / "pkgIndex.tcl").write_text(
        INSTALLED_INDEX_START + "# made by install-tcl: " + json.dumps(record) + "\n")
    cwd = os.getcwd()
    os.chdir(base)
    try:
        uninstall_by(route, made[-1])
    finally:
        os.chdir(cwd)
    assert [v for v in victims if not v.is_dir()] == []
    assert not made[0].exists()


@pytest.mark.parametrize("route", ["tclamp", "install_record"])
def test_a_made_directory_swapped_for_a_link_keeps_what_is_below_it(tmp_path, route):
    """A directory install-tcl made (base/lib) that is a symbolic link now
    (to base/other, which holds tcltk/tclamp/pkgIndex.tcl): the link stayed,
    but the recorded base/lib/tcltk and base/lib/tcltk/tclamp, which now are
    base/other's, were removed through it.  Now a recorded directory below a
    recorded one that is a link stays: it is not the one install-tcl made."""
    base = tmp_path / "base"
    target = base / "other" / "tcltk" / "tclamp"
    target.mkdir(parents=True)
    (base / "lib").symlink_to(base / "other")
    made = [base / "lib", base / "lib" / "tcltk", base / "lib" / "tcltk" / "tclamp"]
    (target / "pkgIndex.tcl").write_text(
        INSTALLED_INDEX_START + "# made by install-tcl: "
        + json.dumps([*map(str, reversed(made))]) + "\n")
    uninstall_by(route, made[-1])
    assert (base / "lib").is_symlink() and target.is_dir()


@pytest.mark.parametrize("target", ["an index", "nothing"])
def test_install_tcl_does_not_write_through_an_index_that_is_a_symbolic_link(tmp_path, target):
    """A pkgIndex.tcl that is a symbolic link: install-tcl wrote through it,
    over the index it links to (another directory's), or made the file a
    dangling link names, which uninstall-tcl (it leaves links) could then
    never remove.  Now it is refused, and nothing changes."""
    elsewhere = tmp_path / "real" / "tclamp" / "pkgIndex.tcl"
    elsewhere.parent.mkdir(parents=True)
    before = INSTALLED_INDEX_START + "# made by install-tcl: []\n"
    if target == "an index":
        elsewhere.write_text(before)
    index_dir = tmp_path / "pkg" / "tclamp"
    index_dir.mkdir(parents=True)
    (index_dir / "pkgIndex.tcl").symlink_to(elsewhere)
    r = install_tcl_outside_a_checkout("install-tcl", index_dir)
    assert (r.returncode, r.stdout, r.stderr) == (
        1, "", f"tclamp install-tcl: {index_dir / 'pkgIndex.tcl'} is a symbolic link, which this "
               "would write through: left as it is (remove it, or name another directory)\n")
    assert (index_dir / "pkgIndex.tcl").is_symlink()
    if target == "an index":
        assert elsewhere.read_text() == before
    else:
        assert not elsewhere.exists()


@pytest.mark.parametrize("route", ["tclamp", "install_record", "make"])
def test_an_index_that_is_a_symbolic_link_is_left(tmp_path, route):
    """install-tcl writes its index as a file; a pkgIndex.tcl that is a
    symbolic link (to an index tclamp wrote elsewhere) is someone's link.
    uninstall-tcl removed the link (and then the emptied directory); now
    it leaves both, and says why."""
    elsewhere = tmp_path / "real" / "tclamp"
    elsewhere.mkdir(parents=True)
    (elsewhere / "pkgIndex.tcl").write_text(INSTALLED_INDEX_START + "# made by install-tcl: []\n")
    index_dir = tmp_path / "pkg" / "tclamp"
    index_dir.mkdir(parents=True)
    (index_dir / "pkgIndex.tcl").symlink_to(elsewhere / "pkgIndex.tcl")
    if route == "tclamp":
        r = subprocess.run([sys.executable, "-m", "tclamp", "uninstall-tcl", str(index_dir)],
                           capture_output=True, text=True)
        assert (r.returncode, r.stderr) == (1, f"tclamp uninstall-tcl: {index_dir / 'pkgIndex.tcl'} "
                                               "is a symbolic link, which install-tcl does not "
                                               "write: left as it is\n")
    elif route == "install_record":
        r = subprocess.run([sys.executable, "-I", str(ROOT / "src" / "tclamp" / "install_record.py"),
                            str(index_dir / "pkgIndex.tcl")], capture_output=True, text=True)
        assert r.returncode == 1 and "is a symbolic link" in r.stderr
    else:
        if shutil.which("make") is None:
            pytest.skip("no make")
        r = subprocess.run(["make", "-s", "-C", ROOT, "uninstall-tcl",
                            f"INSTALL_VENV={tmp_path / 'venv'}", f"TCL_PKG_DIR={index_dir}"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert (index_dir / "pkgIndex.tcl").is_symlink()
    assert (elsewhere / "pkgIndex.tcl").is_file()
