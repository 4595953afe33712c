"""The pytest plugin runs a user's own tcltest files, case by case."""
import subprocess
import sys

USER_TESTS = """
package require tcltest
namespace import ::tcltest::*
package require tclamp
test good {passes} {torch::autocast_get_dtype cpu} bfloat16
test bad {fails} {torch::autocast_get_dtype cpu} float16
test skipped {skips} -constraints nonexistent -body {} -result {}
cleanupTests
"""


def run_pytest(directory, *args):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
                          cwd=directory, capture_output=True, text=True, timeout=300)


def test_cases_become_items(tmp_path):
    (tmp_path / "user.test").write_text(USER_TESTS)
    r = run_pytest(tmp_path, "user.test")
    assert "1 failed, 1 passed, 1 skipped" in r.stdout
    assert "PASSED user.test::good" in r.stdout
    assert "FAILED user.test::bad - ==== bad fails FAILED" in r.stdout
    assert "---- Result was:\nbfloat16\n" in r.stdout
    assert "SKIPPED [1]" in r.stdout and ": nonexistent" in r.stdout


def test_error_outside_a_case_fails_the_file(tmp_path):
    (tmp_path / "broken.test").write_text("package require tcltest\nno_such_command\n")
    r = run_pytest(tmp_path, "broken.test")
    assert "FAILED broken.test::<file>" in r.stdout
    assert 'invalid command name "no_such_command"' in r.stdout
