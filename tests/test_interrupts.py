"""Ctrl-C (SIGINT, KeyboardInterrupt) at awkward moments, each in a fresh
process with a time limit: the host goes on (or ends as it should), tclamp
is never left half made, output is not lost, and torch's autocast state
comes back.

Each signal is a real SIGINT that the process sends itself at the chosen
moment (a hook on an import, or Python code that Tcl runs), so that
Python's own handler raises the KeyboardInterrupt where a user's Ctrl-C
would; nothing here waits on a clock.
"""
import signal
import subprocess
import sys

import pytest

from conftest import needs_tkinters_tcl
from processes import TIME_LIMIT, assert_clean, assert_no_crash, environment, python

# Python's own SIGINT handler, as at a terminal (a test run in the
# background starts its children with SIGINT ignored), and a hook that
# sends SIGINT the first time the module $STOP_AT is looked for (the
# first $STOP_TIMES times, if given; _CtrlC.fired: how many it sent).
STOP_AT_IMPORT = """\
import importlib.abc, os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
class _CtrlC(importlib.abc.MetaPathFinder):
    fired = 0
    def find_spec(self, name, path, target=None):
        if name == os.environ.get("STOP_AT") and _CtrlC.fired < int(os.environ.get("STOP_TIMES", 1)):
            _CtrlC.fired += 1
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, _CtrlC())
"""

# torch.nn: in the middle of torch's own import; tclamp.scaler: torch is
# in, tclamp's commands are half imported.
STOPS = ["torch.nn", "tclamp.scaler"]

FIRST_USE = {
    "tclamp.tcl": "run = lambda script: tclamp.tcl.eval(script)\n",
    "Interp": "run = lambda script: tclamp.Interp().eval(script)\n",
    "tkinter": "import tkinter\n"
               "run = lambda script: tkinter.Tcl().eval('package require tclamp; ' + script)\n",
}

CANNOT = ("tclamp cannot import torch: an earlier import of it in this process was stopped "
          "part way by KeyboardInterrupt, and torch cannot be imported again until the "
          "process starts anew")


def calls_after_stops(tmp_path, first_use, turns, **stops):
    """A fresh process that makes `turns` calls, the first one tclamp's
    first use (FIRST_USE), with SIGINT sent as `stops` say (STOP_AT_IMPORT);
    each call prints its turn and result, or its error's type and message
    (up to a parenthesis); then a last line, `stops N`: how many it sent."""
    return python(tmp_path, STOP_AT_IMPORT + "import tclamp\n" + FIRST_USE[first_use] + f"""\
for turn in range({turns}):
    try:
        print(turn, run('list [torch::autocast_is_enabled cpu] [py eval 6*7]'))
    except BaseException as error:
        print(turn, type(error).__name__, str(error).partition(' (')[0])
print('stops', _CtrlC.fired)
""", extra_env=stops)


@pytest.mark.parametrize("first_use", ["tclamp.tcl", "Interp",
                                       pytest.param("tkinter", marks=needs_tkinters_tcl)])
@pytest.mark.parametrize("stop", STOPS)
def test_ctrl_c_during_the_lazy_torch_import_then_the_next_call(tmp_path, stop, first_use):
    """The first call stops with KeyboardInterrupt (tkinter: its TclError
    of it).  Stopped inside torch's own import, torch cannot be imported
    again in that process (as in Python alone): every later call says so
    clearly; stopped after it, the next call works."""
    r = calls_after_stops(tmp_path, first_use, 3, STOP_AT=stop)
    assert_clean(r)
    lines = r.stdout.splitlines()
    assert len(lines) == 4 and lines.pop() == "stops 1", r.report
    assert lines[0] in ("0 KeyboardInterrupt ", "0 TclError KeyboardInterrupt"), r.report
    if stop == "torch.nn":
        assert lines[1:] == [f"{turn} {kind} {CANNOT}" for turn in (1, 2)
                             for kind in (["TclError ImportError:"] if first_use == "tkinter"
                                          else ["ImportError"])], r.report
    else:
        assert lines[1:] == ["1 0 42", "2 0 42"], r.report


@pytest.mark.parametrize("stop", STOPS)
def test_ctrl_c_twice_during_the_lazy_torch_import(tmp_path, stop):
    """Ctrl-C in the first import and again in the one more try that
    follows it.  Stopped inside torch both times, every later call
    imported torch again, a third time, and the process crashed at its
    exit (SIGSEGV, in torch's teardown); now the calls after the second
    stop say that torch cannot be imported, without trying.  Stopped
    after torch is in, the next call works.  A torch that refuses to run
    its import a second time itself (2.15 does, before it looks for
    torch.nn) ends that one more try with its ImportError, so the second
    Ctrl-C never comes and the second call says so already."""
    r = calls_after_stops(tmp_path, "tclamp.tcl", 4, STOP_AT=stop, STOP_TIMES="2")
    assert_clean(r)
    lines = r.stdout.splitlines()
    stops = lines.pop()
    if stop == "torch.nn" and stops == "stops 1":
        assert lines == ["0 KeyboardInterrupt "] + [f"{turn} ImportError {CANNOT}"
                                                    for turn in (1, 2, 3)], r.report
        return
    assert stops == "stops 2", r.report
    assert lines[:2] == ["0 KeyboardInterrupt ", "1 KeyboardInterrupt "], r.report
    if stop == "torch.nn":
        assert lines[2:] == [f"{turn} ImportError {CANNOT}" for turn in (2, 3)], r.report
    else:
        assert lines[2:] == ["2 0 42", "3 0 42"], r.report


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("how", ["script", "piped"])
def test_ctrl_c_as_the_tclamp_program_starts(tmp_path, stop, how):
    """Ctrl-C while `tclamp` loads torch ends it as Ctrl-C in its script
    does: `interrupted`, status 130, and no Python traceback."""
    (tmp_path / "sitecustomize.py").write_text(STOP_AT_IMPORT)
    (tmp_path / "hello.tcl").write_text("puts hello\n")
    env = environment()
    env.update(STOP_AT=stop, PYTHONPATH=f"{tmp_path}:{env['PYTHONPATH']}")
    command = [sys.executable, "-m", "tclamp"] + (["hello.tcl"] if how == "script" else [])
    r = subprocess.run(command, input="puts hello\n", capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=TIME_LIMIT)
    assert (r.stdout, r.stderr, r.returncode) == ("", "interrupted\n", 128 + signal.SIGINT)


# Python code that Tcl calls, which Ctrl-C stops where it stands.
CTRL_C = """\
import os, signal, torch, tclamp
signal.signal(signal.SIGINT, signal.default_int_handler)
tcl = tclamp.tcl
tcl.eval('''py exec {
import os, signal, torch
def ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)
    while True:
        pass
}''')
def attempt(script):
    try:
        return 'ok ' + tcl.eval(script)
    except BaseException as error:
        return type(error).__name__
def state():
    return (torch.is_autocast_enabled('cpu'), str(torch.get_autocast_dtype('cpu')),
            torch.is_autocast_cache_enabled())
"""


@pytest.mark.parametrize("memo", [True, False], ids=["planned", "parsed"])
def test_ctrl_c_inside_an_autocast_block_puts_the_state_back(tmp_path, memo):
    """From a Python host: the block (run twice first, so that a planned
    one runs from C), nested blocks, a block after autocast_enable, and a
    block whose catch takes the KeyboardInterrupt, as Tcl's catch takes
    any error."""
    r = python(tmp_path, CTRL_C + f"""\
tclamp._bridge.memo({memo})
block = 'torch::autocast -device_type cpu -dtype bfloat16 {{ %s }}'
print(attempt(block % 'py eval 1'), attempt(block % 'py eval 2'))
before = state()
print(attempt(block % 'py call ctrl_c'), state() == before)
print(attempt('torch::autocast -device_type cpu -dtype float16 -cache_enabled 0 {{'
              + block % 'py call ctrl_c' + '}}'), state() == before)
print(attempt(block % 'catch {{py call ctrl_c}} m; set m'), state() == before)
tcl.eval('torch::autocast_enable cpu float16')
enabled = state()
print(attempt(block % 'py call ctrl_c'), state() == enabled, enabled)
""")
    assert_clean(r)
    assert r.stdout.splitlines() == [
        "ok 1 ok 2", "KeyboardInterrupt True", "KeyboardInterrupt True", "ok KeyboardInterrupt True",
        "KeyboardInterrupt True (True, 'torch.float16', False)"], r.report


def test_ctrl_c_inside_py_scope_releases_what_it_made(tmp_path):
    r = python(tmp_path, CTRL_C + """\
count = lambda: tcl.eval('dict get [tclamp::info] handle_count')
before = count()
print(attempt('py scope { py eval {torch.ones(3)}; py eval {torch.ones(2)}; py call ctrl_c }'),
      count() == before)
# what py keep gave the scope around its own, released as that one ends
print(attempt('py scope { py scope { py keep [py eval {torch.ones(2)}]; '
              'py eval {torch.ones(1)}; py scope { py eval {torch.ones(4)}; py call ctrl_c } } }'),
      count() == before)
""")
    assert_clean(r)
    assert r.stdout.splitlines() == ["KeyboardInterrupt True"] * 2, r.report


def test_ctrl_c_inside_grad_scaler_step_goes_on_as_in_python(tmp_path):
    """Ctrl-C in the optimizer's step under torch::grad_scaler_step, then
    the same step, update and scale again: what torch.amp.GradScaler does
    in Python alone, the same calls one by one."""
    r = python(tmp_path, CTRL_C + """\
tcl.eval('''py exec {
class Stopping(torch.optim.SGD):
    stop = True
    def step(self, *args, **kwargs):
        if self.stop:
            self.stop = False
            ctrl_c()
        return super().step(*args, **kwargs)
def make():
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    return net, Stopping(net.parameters(), lr=0.1)
}''')
tcl.eval('py exec {net, optimizer = make()}; set opt [py eval optimizer]; '
         'set scaler [torch::grad_scaler_new -device cpu -init_scale 1024]; '
         '[torch::grad_scaler_scale $scaler [py eval {net(torch.ones(2, 4)).sum()}]] backward')
by_tcl = [attempt('torch::grad_scaler_step $scaler $opt'),
          attempt('torch::grad_scaler_step $scaler $opt'), attempt('torch::grad_scaler_update $scaler'),
          attempt('torch::grad_scaler_get_scale $scaler'), attempt('py eval {net.weight.tolist()}')]
net, optimizer = make()     # py exec ran in this __main__
scaler = torch.amp.GradScaler('cpu', init_scale=1024)
scaler.scale(net(torch.ones(2, 4)).sum()).backward()
def python_attempt(call):
    try:
        return 'ok ' + str(call())
    except BaseException as error:
        return type(error).__name__
by_python = [python_attempt(lambda: scaler.step(optimizer)),
             python_attempt(lambda: scaler.step(optimizer)),
             python_attempt(scaler.update), python_attempt(scaler.get_scale),
             'ok ' + tcl.call('list', *(tcl.call('list', *row) for row in net.weight.tolist()))]
print(by_tcl)
print(by_python)
""")
    assert_clean(r)
    by_tcl, by_python = r.stdout.splitlines()
    assert by_tcl.startswith("['KeyboardInterrupt', 'ok scaler step completed', 'ok scaler updated', "
                             "'ok 1024.0'"), r.report
    assert [eval(by_python)[i] for i in (0, 3, 4)] == [eval(by_tcl)[i] for i in (0, 3, 4)], r.report
    assert by_python.startswith("['KeyboardInterrupt', 'ok None', 'ok None', 'ok 1024.0'"), r.report


def test_keyboard_interrupt_through_nested_hosts(tmp_path):
    """Python -> Tcl -> Python -> Tcl (an autocast block) -> Python that
    Ctrl-C stops: KeyboardInterrupt out of the outer eval, the state back,
    and the interpreter goes on."""
    r = python(tmp_path, CTRL_C + """\
before = state()
print(attempt('''py exec {tclamp.tcl.eval('torch::autocast -device_type cpu -dtype float16 '
                                          '{ py call ctrl_c }')}'''.replace('py exec {', 'py exec {import tclamp; ')),
      state() == before)
print(attempt('list [torch::autocast_is_enabled cpu] [py eval 6*7]'))
""")
    assert_clean(r)
    assert r.stdout.splitlines() == ["KeyboardInterrupt True", "ok 0 42"], r.report


@pytest.mark.parametrize("where", ["plain", "autocast", "scope"])
def test_ctrl_c_in_python_under_a_tclamp_script_keeps_what_was_written(tmp_path, where):
    """`tclamp script.tcl` stopped while Python code runs: what Tcl and
    Python wrote before (unflushed) comes out, then `interrupted`, status
    130, as the script runner ends at Ctrl-C."""
    call = {"plain": "py call ctrl_c",
            "autocast": "torch::autocast -device_type cpu -dtype bfloat16 { py call ctrl_c }",
            "scope": "py scope { py eval {torch.ones(2)}; py call ctrl_c }"}[where]
    (tmp_path / "job.tcl").write_text(
        "py exec {import os, signal, torch\n"
        "def ctrl_c():\n    os.kill(os.getpid(), signal.SIGINT)\n    while True:\n        pass\n}\n"
        "puts -nonewline tcl; py exec {print('-python', end='')}\n"
        f"catch {{ {call} }}\nputs {{after the catch}}\n")
    env = {k: v for k, v in environment().items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run([sys.executable, "-m", "tclamp", "job.tcl"], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=TIME_LIMIT,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert_no_crash(r)
    assert (r.stdout, r.stderr, r.returncode) == ("tcl-python", "interrupted\n",
                                                  128 + signal.SIGINT)
