"""The plan memo changes nothing: every registered command, called with
words made from its own declaration (valid and invalid words, positional
and -name forms, every flag's spelling, both command names), gives the same
results, error messages and errorCodes, and leaves torch's state the same
after each call, with the bridge remembering plans and with it not
(_bridge.memo).  A plan that claims to depend on its words alone but does
not shows here as a difference.

Each run is a process of its own, so both start from the same fresh state;
the calls come in one shuffled order, so a remembered plan is reused after
other commands have changed the state it must not have kept.  With the
memo off no ATen program runs either: the autocast commands' C path is
compared with their Python steps too.
"""
import json
import random
import re
import sys

from processes import assert_clean, run

# Words any parameter is tried with: the commands' own words and others.
GENERIC = ("cpu", "cuda", "float16", "bfloat16", "float32", "none", "1", "0", "true", "no",
           "2.5", "0.5", "3", "-1", "nan", "bogus", "")
# Valid words that the generic ones cannot be (Tcl, substituted at the call).
HINTS = {"state_dict": ("[torch::grad_scaler_state_dict $scaler]", "{}")}
# The objects handle parameters take, each in a Tcl variable of its name.
SAMPLES = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.ones(1, 2)).sum().backward()
samples = {"scaler": torch.amp.GradScaler("cpu"), "optimizer": optimizer,
           "tensor": torch.ones(2), "module": model}
"""
BODIES = ("torch::autocast_get_dtype cpu", "error oops {MY CODE}",
          "py eval {str((torch.ones(2, 2) @ torch.ones(2, 2)).dtype)}")
REPEATS = 3


def literal(word):
    return word if re.fullmatch(r"[-\w.:]+", word) else "{" + word + "}"


def samples_of(param, handle_types):
    """The words to try for a parameter, those it takes first (the first
    is the one other calls use), as Tcl text."""
    handle_type = getattr(param.convert, "handle_type", None)
    if handle_type is not None:
        own = [f"${name}" for name, kind in handle_types.items() if issubclass(kind, handle_type)]
        return own + [f"${name}" for name in handle_types if f"${name}" not in own] + ["nothing"]
    if param.choices is not None:
        return [literal(word) for word in param.choices] + ["bogus", "{}"]
    _, read = param.reader()
    taken, refused = [], []
    for word in GENERIC:
        try:
            read(word)
            taken.append(literal(word))
        except Exception:
            refused.append(literal(word))
    return list(HINTS.get(param.name, ())) + taken + refused


def word_lists(signature, handle_types):
    """The argument lists to call a command with (lists of Tcl words)."""
    params = signature.params
    tries = {p.name: samples_of(p, handle_types) for p in params}
    base = {name: words[0] for name, words in tries.items()}
    positional = [p for p in params if not p.named_only]
    last_required = max((i for i, p in enumerate(positional) if p.required), default=-1)
    required = [p for p in params if p.required]
    lists = [[], [base[p.name] for p in positional], [base[p.name] for p in positional] + ["x"],
             ["-bogus", "1"]]
    lists += [[w for p in params for w in (p.flags[0], base[p.name])],
              [w for p in reversed(params) for w in (p.flags[-1], base[p.name])]]
    for i, param in enumerate(positional):
        for word in tries[param.name]:
            words = [base[p.name] for p in positional[:max(i, last_required) + 1]]
            words[i] = word
            lists.append(words)
        if i > 0:                    # a -name word after a positional one
            lists.append([base[positional[0].name], param.flags[0], base[param.name]])
    for param in params:
        others = [w for p in required if p is not param for w in (p.flags[0], base[p.name])]
        for flag in param.flags:
            for word in tries[param.name]:
                lists.append(others + [flag, word])
            lists.append(others + [flag])                       # no value
        lists.append(others + [param.flags[0], tries[param.name][-1],
                               param.flags[-1], base[param.name]])  # the last one wins
    return lists


def calls(commands, handle_types):
    """Every call, as Tcl text, each REPEATS times, in one shuffled order."""
    scripts = []
    for command, prefix in commands:
        body_form = command.takes_script
        signature = command.signature.options if body_form else command.signature
        for words in word_lists(signature, handle_types):
            for name in dict.fromkeys((command.name, command.camel)):
                head = " ".join([f"{prefix}{name}", *words])
                if body_form:
                    scripts += [f"{head} {{{body}}}" for body in BODIES]
                scripts.append(head)
    everything = [script for script in dict.fromkeys(scripts) for _ in range(REPEATS)]
    random.Random(30).shuffle(everything)
    return everything


def registered():
    """Every planned command as commands.register declares it, with its
    namespace: a new command is called here without a word of this file."""
    from tclamp import commands, info
    return [(c, "torch::") for c in commands.all_commands()] + [(info.COMMAND, "tclamp::")]


def main(memo):
    import torch

    import tclamp
    from tclamp import _bridge, module_calls
    from tclamp.arguments import Plan

    _bridge.memo(memo == "on")
    interp = tclamp.Interp()
    interp.eval("py exec {%s}" % SAMPLES)
    handle_types = {name: type(obj) for name, obj in sys.modules["__main__"].samples.items()}
    refresh = " ".join(f"set {name} [py eval {{samples[{name!r}]}}];" for name in handle_types)
    interp.eval("proc fresh {} {uplevel #0 {%s}}" % refresh)

    # The switch itself: a plan that counts how often it is made.
    made = []
    interp.create_command("::canary", lambda *words: made.append(1) or Plan((), "", True),
                          planned=True)
    interp.eval("canary; canary; canary")
    print(json.dumps({"memo": _bridge.memo(), "canary plans made": len(made)}))

    def read(getter):
        try:
            return str(getter())
        except Exception as error:      # torch refuses some mixes of its precision APIs
            return f"{type(error).__name__}: {error}"

    def state():
        return [read(getter) for getter in (
            lambda: torch.is_autocast_enabled("cpu"), lambda: torch.get_autocast_dtype("cpu"),
            lambda: torch.is_autocast_enabled("cuda"), lambda: torch.get_autocast_dtype("cuda"),
            torch.is_autocast_cache_enabled, torch.get_float32_matmul_precision,
            lambda: torch.backends.fp32_precision, lambda: len(module_calls.rules))]

    for script in calls(registered(), handle_types):
        interp.eval("fresh")
        outcome = interp.eval("list [catch {%s} r o] $r [expr {[dict exists $o -errorcode]"
                              " ? [dict get $o -errorcode] : {}}]" % script, result=list)
        print(json.dumps([script, outcome, state()]))


def test_every_command_means_the_same_with_and_without_the_memo(tmp_path):
    runs = {}
    for memo in ("on", "off"):
        r = run([sys.executable, __file__, memo], tmp_path, timeout=600)
        assert_clean(r)
        header, *records = map(json.loads, r.stdout.splitlines())
        runs[memo] = header, records
    (on, on_records), (off, off_records) = runs["on"], runs["off"]
    # the switch switched: a words-only plan made once, or at each call
    assert on == {"memo": True, "canary plans made": 1}
    assert off == {"memo": False, "canary plans made": 3}
    assert len(on_records) == len(off_records) > 3000
    for a, b in zip(on_records, off_records):
        assert a == b, f"memo on: {a}\nmemo off: {b}"
    # Every command (both names) ran to a result and to an error; a new
    # parameter that no word here fits wants its own in HINTS.
    names = {f"{prefix}{name}" for c, prefix in registered() for name in (c.name, c.camel)}
    seen = {(script.split()[0], outcome[0]) for script, outcome, _ in on_records}
    assert {name for name in names if (name, 0) not in seen} == set()
    assert {name for name in names if (name, 1) not in seen} == set()


if __name__ == "__main__":
    main(sys.argv[1])
