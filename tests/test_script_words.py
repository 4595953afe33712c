"""A script command's Script (see _bridge.c: Script) borrows its word from
the running command: kept beyond it, it names nothing, and says so."""
import pytest

import tclamp
from tclamp import _bridge


@pytest.fixture
def interp():
    made = tclamp.Interp()
    yield made
    made.delete()


def test_a_kept_script_names_nothing_after_its_command(interp):
    kept = []

    def run(script, tag):
        kept.append(script)
        return _bridge.current().evaluate(script)

    interp.create_command("::run", lambda *words: (((run, (words[0],)),), None, False),
                          planned=True, script=True)
    assert interp.eval("set v 1; run tag {incr v}") == "2"
    script, = kept
    assert type(script) is _bridge.Script
    with pytest.raises(RuntimeError, match="^the command that got this script has returned$"):
        str(script)
    with pytest.raises(RuntimeError, match="^the command that got this script has returned$"):
        interp.evaluate(script)
    assert interp.eval("set v") == "2"


def test_the_parser_gets_the_script_last_and_its_text(interp):
    seen = []

    def parser(*words):
        seen.append([word if isinstance(word, str) else (type(word).__name__, str(word))
                     for word in words])
        return (), "", False

    interp.create_command("::parsed", parser, planned=True, script=True)
    interp.eval("parsed -a b {the body}; parsed {only}; parsed")
    assert seen == [["-a", "b", ("Script", "the body")], [("Script", "only")], []]


def test_a_script_command_is_a_planned_one(interp):
    with pytest.raises(ValueError, match="^a script command is a planned one$"):
        interp.create_command("::bad", lambda *words: None, script=True)


def test_a_plan_of_another_shape_is_refused(interp):
    """The bridge reads a Plan as a tuple: any other shape a planner returns
    is its bug, named as such; a Plan runs."""
    from tclamp.arguments import Plan
    plans = {"list": [(), "x", False], "two": ((), "x"), "five": ((), "x", False, None, 0),
             "steps": ("no steps", "x", False), "plan": Plan((), "x", True),
             "program": Plan(((bool, ()),), "y", True, None)}
    seen = {}
    for name, plan in plans.items():
        interp.create_command(f"::{name}", lambda *words, plan=plan: plan, planned=True)
        try:
            seen[name] = interp.eval(name)
        except TypeError as error:      # the planner's own error, back in its host
            seen[name] = f"TypeError: {error}"
    wrong = "TypeError: a command plan is a Plan: (steps, result, words_only[, program bytes])"
    assert seen == {"list": wrong, "two": wrong, "five": wrong, "steps": wrong,
                    "plan": "x", "program": "y"}
