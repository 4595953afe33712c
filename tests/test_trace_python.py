"""torch::autocast_trace where Tcl cannot reach: a tracer that fails, and
traces on two threads at once, in interpreters Python made."""
import gc
import sys
import threading

import pytest
import torch

import processes
import tclamp
from tclamp import module_calls, trace


@pytest.fixture
def interp():
    made = tclamp.Interp()
    made.eval("py exec {import torch; a = torch.ones(2, 2)}")
    yield made
    made.delete()


def nothing_installed():
    """No dispatch mode, global hook or module wrapper a trace put in is left."""
    from torch.nn.modules import module
    return (torch._C._len_torch_dispatch_stack(), len(module._global_forward_pre_hooks),
            len(module._global_forward_hooks),
            torch.nn.Module.__call__ is module_calls.call) == (0, 0, 0, False)


def broken_check(tensor):
    raise RuntimeError("cannot look at this tensor")


def test_a_failing_tracer_is_a_clear_error(interp, monkeypatch):
    """The script still runs to its end (the tracer stops recording, the
    operators go on), then the command fails with the tracer's error."""
    monkeypatch.setattr(trace, "holds_nonfinite", broken_check)
    with pytest.raises(tclamp.TclError) as failed:
        interp.eval("torch::autocast_trace { py eval {a + 1}; set ::after [py eval {str((a @ a).sum().item())}] }")
    assert failed.value.result == "The tracer failed: RuntimeError: cannot look at this tensor"
    assert failed.value.errorcode == "TCLAMP TRACE_FAILED RuntimeError"
    assert interp.eval("set ::after") == "8.0"
    assert nothing_installed()


def test_a_failed_tracer_holds_no_tensor(interp, monkeypatch):
    """The failure kept for the command's error holds neither the output the
    tracer failed on nor the tracer: with the cyclic collector off, the
    output goes when the script drops it (it stayed, until a collection)."""
    monkeypatch.setattr(trace, "holds_nonfinite", broken_check)
    gc.disable()
    try:
        with pytest.raises(tclamp.TclError) as failed:
            interp.eval("torch::autocast_trace { py exec {import weakref; out = a * 2;"
                        " out_ref = weakref.ref(out); del out} }")
        assert failed.value.result == "The tracer failed: RuntimeError: cannot look at this tensor"
        assert interp.eval("py eval {out_ref() is None}") == "1"
    finally:
        gc.enable()
    assert nothing_installed()


def test_the_scripts_own_error_wins_over_the_tracers(interp, monkeypatch):
    monkeypatch.setattr(trace, "holds_nonfinite", broken_check)
    with pytest.raises(tclamp.TclError) as failed:
        interp.eval("torch::autocast_trace { py eval {a + 1}; error mine {} {MY CODE} }")
    assert (failed.value.result, failed.value.errorcode) == ("mine", "MY CODE")
    assert nothing_installed()


def test_a_tracer_that_cannot_start_changes_nothing(interp, monkeypatch):
    def refuse(self):
        raise RuntimeError("no dispatch mode here")
    monkeypatch.setattr(torch.utils._python_dispatch.TorchDispatchMode, "__enter__", refuse)
    with pytest.raises(tclamp.TclError) as failed:
        interp.eval("torch::autocast_trace { set ::ran 1 }")
    assert failed.value.result == "The tracer failed: RuntimeError: no dispatch mode here"
    assert interp.eval("info exists ::ran") == "0"
    assert nothing_installed()


def test_a_trace_sees_its_own_thread_only():
    """Each thread's trace counts its own operators: the dispatch mode is
    per thread, as autocast's state is."""
    results, ready = {}, threading.Barrier(2)

    def traced(name, expression):
        interp = tclamp.Interp()
        try:
            interp.eval("py exec {import torch; a = torch.ones(64, 64)}")
            ready.wait()
            results[name] = interp.eval(
                f"lmap row [dict get [torch::autocast_trace {{"
                f" for {{set i 0}} {{$i < 50}} {{incr i}} {{ py eval {{{expression}}} }} }}] ops]"
                f" {{list [dict get $row op] [dict get $row count]}}")
        finally:
            interp.delete()

    threads = [threading.Thread(target=traced, args=("mm", "a @ a")),
               threading.Thread(target=traced, args=("add", "a + a"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {"mm": "{aten::mm 50}", "add": "{aten::add 50}"}


def test_a_rule_set_while_a_rule_is_set_on_the_same_thread(tmp_path):
    """A module whose __hash__ runs Tcl that sets another module's rule:
    the rule table hashed it under its lock, and the inner command took
    the same lock again (tclsh hung).  The table now goes by identity and
    never calls __hash__: the module's rule alone is set."""
    r = processes.tclsh(tmp_path, """
        package require tclamp
        py exec {
        import torch, tclamp
        other = torch.nn.Linear(2, 2)
        class Hashing(torch.nn.Linear):
            def __hash__(self):
                tclamp.tcl.eval("torch::autocast_module_dtype [py eval other] float32 cpu")
                return id(self)
        module = Hashing(2, 2)
        }
        puts [torch::autocast_module_dtype [py eval module] float16 cpu]
        puts [llength [torch::autocast_module_rules cpu]]
        puts [torch::autocast_module_dtype [py eval module] none cpu]
        puts [torch::autocast_module_dtype [py eval other] none cpu]
        puts [llength [torch::autocast_module_rules cpu]]
    """)
    processes.assert_clean(r)
    assert r.stdout.split("\n") == ["module dtype set", "1", "module dtype removed",
                                    "module dtype removed", "0", ""]


def test_the_rule_list_is_read_while_another_thread_sets_rules():
    """torch::autocast_module_rules read the rule table while another
    thread could set a rule in it: 'dictionary changed size during
    iteration'.  A trace function stands for the thread switch, at every
    line Python runs while the list is made."""
    from tclamp import module_calls, module_rules
    kept = [torch.nn.Linear(1, 1) for _ in range(3)]
    added = []

    def add_rule():
        added.append(torch.nn.Linear(1, 1))
        module_calls.set_rule(added[-1], "cpu", torch.float16)

    def switch(frame, event, arg):
        if event == "line":
            other = threading.Thread(target=add_rule)
            other.start()
            other.join()
        return switch

    for module in kept:
        module_calls.set_rule(module, "cpu", torch.float32)
    try:
        sys.settrace(switch)
        try:
            listed = module_rules.rule_list("cpu")
        finally:
            sys.settrace(None)
        # the table as it was at one moment: the rules set before, then
        # those the other thread had set by then
        rows = [(row["module"], row["dtype"]) for row in listed]
        assert rows == ([(module, "float32") for module in kept]
                        + [(module, "float16") for module in added[:len(rows) - len(kept)]])
        assert len(added) > len(rows) - len(kept)   # it set some while the table was read
    finally:
        for module in kept + added:
            module_calls.set_rule(module, "cpu", None)
    assert not module_calls.rules and torch.nn.Module.__call__ is not module_calls.call
