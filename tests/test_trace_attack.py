"""torch::autocast_module_dtype and torch::autocast_trace against what real
model code does: another library's wrapper of Module.__call__, TorchScript
modules, modules whose class compares or hashes by value, recursion,
expanded outputs, forward-mode AD, freed storage, tensor subclasses; and
differential checks of the trace (module dtypes against forward hooks,
nonfinite counts against torch.isfinite outside any dispatch mode)."""
import gc
import random
import sys
import textwrap
import types
import weakref

import pytest
import torch

import tclamp
from tclamp import module_calls


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 4)
        self.fc2 = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc2(self.fc1(x))


class ByValue(torch.nn.Linear):
    """Equal to any ByValue of the same size (a config-keyed cache would
    define this): two distinct modules, one hash."""
    def __eq__(self, other):
        return isinstance(other, ByValue) and self.in_features == other.in_features

    def __hash__(self):
        return hash(self.in_features)


class Unhashable(torch.nn.Linear):
    def __eq__(self, other):
        return self is other
    __hash__ = None


@pytest.fixture
def interp():
    made = tclamp.Interp()
    made.eval("py exec {import torch}")
    yield made
    made.delete()
    for device in ("cuda", "cpu"):
        torch.set_autocast_enabled(device, False)
    torch.set_autocast_dtype("cpu", torch.bfloat16)
    torch.set_autocast_dtype("cuda", torch.float16)


def under_bfloat16(function):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return function()


def test_a_wrapper_another_library_put_on_module_call_does_not_hide_rules(monkeypatch):
    """A library that wraps torch.nn.Module.__call__ after tclamp was loaded
    (an instrumentation or profiling hook): tclamp only went in when
    Module.__call__ was torch's own, so a rule was silently not applied
    (bfloat16 for a float32 rule) and a trace named no module."""
    torch_own = torch.nn.Module.__call__
    calls = []

    def counting(self, *args, **kwargs):
        calls.append(type(self).__name__)
        return torch_own(self, *args, **kwargs)
    monkeypatch.setattr(torch.nn.Module, "__call__", counting)
    net, x = TwoLayers(), torch.randn(2, 4)
    module_calls.set_rule(net.fc1, "cpu", torch.float32)
    try:
        assert under_bfloat16(lambda: net.fc1(x)).dtype == torch.float32
        assert calls == ["Linear"]          # the library's wrapper still runs
        assert under_bfloat16(lambda: net(x)).dtype == torch.bfloat16
    finally:
        module_calls.set_rule(net.fc1, "cpu", None)
    # The rule gone, the library's wrapper is back, and tclamp is out.
    assert torch.nn.Module.__dict__["__call__"] is counting
    # A trace sees module paths under the library's wrapper too.
    module_calls.trace_begin()
    try:
        paths = []
        hook = net.fc2.register_forward_hook(lambda *_: paths.append(module_calls.current_path()))
        net(x)
        hook.remove()
    finally:
        module_calls.trace_end(None)
    assert paths == ["TwoLayers.fc2"]
    assert torch.nn.Module.__dict__["__call__"] is counting


def test_a_library_that_puts_torchs_own_call_back_does_not_drop_rules(monkeypatch):
    """tclamp wrapped another library's wrapper; that library then put back
    torch's own Module.__call__ (its saved original), taking tclamp's out of
    the chain: the next rule puts it in again."""
    torch_own = torch.nn.Module.__call__
    monkeypatch.setattr(torch.nn.Module, "__call__", lambda self, *a, **k: torch_own(self, *a, **k))
    first, second, x = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.randn(2, 4)
    module_calls.set_rule(first, "cpu", torch.float32)
    try:
        torch.nn.Module.__call__ = torch_own         # the library's unpatch
        module_calls.set_rule(second, "cpu", torch.float32)
        assert [under_bfloat16(lambda: m(x)).dtype for m in (first, second)] == [torch.float32] * 2
    finally:
        module_calls.set_rule(first, "cpu", None)
        module_calls.set_rule(second, "cpu", None)
    assert torch.nn.Module.__dict__["__call__"] is torch_own


@pytest.mark.parametrize("style", ["closure", "global", "functools.wraps", "object"])
@pytest.mark.parametrize("target", ["__call__", "_wrapped_call_impl"])
def test_a_class_bound_to_a_call_another_library_wrapped_before_tclamp_is_refused(
        tmp_path, target, style):
    """A library that replaced Module.__call__ or Module._wrapped_call_impl
    with a wrapper calling torch's own before tclamp was imported: a class
    bound to _wrapped_call_impl (torch's own under a wrapped __call__, the
    wrapper when that was wrapped) was taken for a class with its own
    __call__, and its float32 rule was set and silently not applied
    (bfloat16).  Bound to any of torch's three, wrapped or not, it is
    refused; a plain module is ruled, and the library's wrapper still runs."""
    import processes
    wrapper = {
        "closure": """
            def wrap(replaced):
                def counting(self, *args, **kwargs):
                    calls.add(type(self).__name__)
                    return replaced(self, *args, **kwargs)
                return counting
            setattr(torch.nn.Module, TARGET, wrap(torch.nn.Module.__dict__[TARGET]))
            """,
        "global": """
            replaced = torch.nn.Module.__dict__[TARGET]
            def counting(self, *args, **kwargs):
                calls.add(type(self).__name__)
                return replaced(self, *args, **kwargs)
            setattr(torch.nn.Module, TARGET, counting)
            """,
        "functools.wraps": """
            def wrap(replaced):
                @functools.wraps(replaced)
                def counting(self, *args, **kwargs):
                    calls.add(type(self).__name__)
                    return replaced(self, *args, **kwargs)
                return counting
            setattr(torch.nn.Module, TARGET, wrap(torch.nn.Module.__dict__[TARGET]))
            """,
        # A wrapper that is an object holding what it wraps, as wrapt makes:
        # a class bound to it was not looked into (ruled, and bfloat16).
        "object": """
            class Counting:
                def __init__(self, replaced):
                    self.__wrapped__ = replaced
                def __get__(self, instance, owner=None):
                    return self if instance is None else functools.partial(self, instance)
                def __call__(self, module, *args, **kwargs):
                    calls.add(type(module).__name__)
                    return self.__wrapped__(module, *args, **kwargs)
            setattr(torch.nn.Module, TARGET, Counting(torch.nn.Module.__dict__[TARGET]))
            """,
    }[style]
    (tmp_path / "library.py").write_text(
        f"import functools\nimport torch\nTARGET, calls = {target!r}, set()\n"
        + textwrap.dedent(wrapper))
    r = processes.python(tmp_path, r"""
        import torch
        import library
        import tclamp
        class BoundCall(torch.nn.Linear):
            __call__ = torch.nn.Module.__call__
        class BoundWrapped(torch.nn.Linear):
            __call__ = torch.nn.Module._wrapped_call_impl
        class BoundImpl(torch.nn.Linear):
            __call__ = torch.nn.Module._call_impl
        modules = [torch.nn.Linear(4, 2), BoundCall(4, 2), BoundWrapped(4, 2), BoundImpl(4, 2)]
        tclamp.tcl.eval('''
            py exec {import __main__}
            proc rule {i} {
                set module [py eval "__main__.modules\[$i\]"]
                if {[catch {torch::autocast_module_dtype $module float32 cpu} message options]} {
                    return [list 1 $message [dict get $options -errorcode]]
                }
                return [list 0 $message]
            }''')
        for i in range(len(modules)):
            print(tclamp.tcl.eval(f"rule {i}"))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            print(*[str(module(torch.randn(3, 4)).dtype) for module in modules])
        print(*sorted(library.calls))
    """)
    processes.assert_clean(r)

    def refused(found):
        return (f"1 {{Invalid module: its class's __call__ is {found}, bound when the class was"
                " made, which does not go through the rule} {TCLAMP INVALID_VALUE -module}")
    # The message names what the class holds: the library's wrapper by its
    # own name (it said "torch's own torch.nn.Module.__call__" for it too).
    # (Python 3.10 keeps no qualified name in the code, and functools.wraps
    # gave the wrapper torch's: there it is named by its code's name.)
    wrapper = {"closure": "library.wrap.<locals>.counting", "global": "library.counting",
               "functools.wraps": ("library.wrap.<locals>.counting" if sys.version_info >= (3, 11)
                                   else "library.counting"),
               "object": "a library.Counting object"}[style]
    by_wrapper = refused(f"{wrapper} (which calls torch's own torch.nn.Module.__call__)")
    by_torch = refused("torch's own torch.nn.Module.__call__")
    bound_call, bound_wrapped = ((by_wrapper, by_torch) if target == "__call__"
                                 else (by_torch, by_wrapper))
    ran = "BoundCall Linear" if target == "__call__" else "BoundWrapped"
    assert r.stdout.split("\n") == [
        "0 {module dtype set}", bound_call, bound_wrapped,
        refused("torch's own torch.nn.Module._call_impl"),
        "torch.float32 torch.bfloat16 torch.bfloat16 torch.bfloat16", ran, ""], r.report


def test_a_proxy_that_refuses_to_be_read_does_not_fail_the_rule():
    """What a callable object that a __call__ holds wraps is read as its
    __wrapped__: a proxy whose target is not there (one of a web
    framework's, outside its context) raises an error other than
    AttributeError there, which failed torch::autocast_module_dtype.  (A
    __call__ that calls forward itself is refused, for that: the proxy is
    read on the way, and its error is not what comes out.)"""
    from tclamp import module_rules
    from tclamp.errors import UsageError

    class Proxy:
        def __call__(self, *args):
            return args
        def __getattr__(self, name):
            raise RuntimeError("working outside of the context")
    proxy = Proxy()

    class UsesProxy(torch.nn.Linear):
        def __call__(self, x):
            return self.forward(proxy(x)[0])
    module = UsesProxy(4, 4)
    with pytest.raises(UsageError, match="^Invalid module: its class's __call__, .*UsesProxy"
                       r"\.__call__, does not call torch\.nn\.Module\.__call__"):
        module_rules.set_rule(module, torch.float32, "cpu")
    assert module_rules.set_rule(module, None, "cpu") == "module dtype removed"


def test_a_helper_that_only_names_a_library_wrapper_does_not_refuse_a_class_that_calls_super():
    """A class's own __call__ calls a profiler's is_enabled() (a global)
    and then super().__call__: it goes through the rule.  is_enabled only
    names the profiler's wrapper, which holds torch's own as a global, but
    all that the __call__ reached was looked into: the class was refused
    as bound to torch's own call.  A class bound to the wrapper itself, or
    to one that calls torch's own through a helper, is still refused."""
    from tclamp import module_rules
    from tclamp.errors import UsageError
    profiler = {"torch": torch}
    exec(textwrap.dedent("""
        _original = torch.nn.Module.__call__
        def profiled_call(self, *args, **kwargs):
            return _original(self, *args, **kwargs)
        def is_enabled():
            return torch.nn.Module.__dict__["__call__"] is profiled_call
        def through(self, *args, **kwargs):
            return _original(self, *args, **kwargs)
        def delegating(self, *args, **kwargs):
            return through(self, *args, **kwargs)
        """), profiler)
    user = {"torch": torch, "is_enabled": profiler["is_enabled"]}
    exec(textwrap.dedent("""
        class Logged(torch.nn.Linear):
            def __call__(self, x):
                if is_enabled():
                    print("profiled")
                return super().__call__(x)
        """), user)
    logged, x = user["Logged"](4, 4), torch.randn(2, 4)
    bound = [type("Bound", (torch.nn.Linear,), {"__call__": profiler[name]})(4, 4)
             for name in ("profiled_call", "delegating")]
    assert module_rules.set_rule(logged, torch.float32, "cpu") == "module dtype set"
    try:
        assert under_bfloat16(lambda: logged(x)).dtype == torch.float32
        for module, name in zip(bound, ("profiled_call", "delegating")):
            with pytest.raises(UsageError) as refused:
                module_rules.set_rule(module, torch.float32, "cpu")
            assert str(refused.value) == (
                f"Invalid module: its class's __call__ is {name} (which calls torch's own"
                " torch.nn.Module.__call__), bound when the class was made, which does not"
                " go through the rule")
    finally:
        module_rules.set_rule(logged, None, "cpu")
    assert module_calls.rule_table() == []


@pytest.mark.parametrize("make", ["script", "trace"])
def test_a_rule_inside_a_torchscript_module_is_an_error_not_ignored(make):
    """TorchScript runs a submodule's forward without Module.__call__: a
    float32 rule on torch.jit.script(net).fc1 (or a traced net's) gave a
    silent bfloat16.  As for torch.compile: calling it is an error until the
    rule goes; a rule on the TorchScript module itself applies."""
    x = torch.randn(2, 4)
    scripted = torch.jit.script(TwoLayers()) if make == "script" else torch.jit.trace(TwoLayers(), x)
    module_calls.set_rule(scripted.fc1, "cpu", torch.float32)
    try:
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module"):
            under_bfloat16(lambda: scripted(x))
        # the submodule called itself, from Python, is ruled (a traced
        # module's submodules cannot be called)
        if make == "script":
            assert under_bfloat16(lambda: scripted.fc1(x)).dtype == torch.float32
    finally:
        module_calls.set_rule(scripted.fc1, "cpu", None)
    assert under_bfloat16(lambda: scripted(x)).dtype == torch.bfloat16
    module_calls.set_rule(scripted, "cpu", torch.float32)
    try:
        assert under_bfloat16(lambda: scripted(x)).dtype == torch.float32
    finally:
        module_calls.set_rule(scripted, "cpu", None)


def test_calling_a_torchscript_module_does_not_walk_every_ruled_module(monkeypatch):
    """Every call of a TorchScript module while rules exist looks for a copy
    of each ruled module by its first tensor: that was read with
    named_parameters, a generator costing microseconds a module (600 ruled
    layers: 4.5 ms a call of a scripted Linear, 30 us without rules).  Now
    it is read from the module's own tables, and named_parameters is used
    only where a copy could be: still refused, and still run in float32."""
    walked = []

    class Counted(torch.nn.Linear):
        def named_parameters(self, *args, **kwargs):
            walked.append(self)
            return super().named_parameters(*args, **kwargs)
    ruled = torch.nn.Sequential(*[Counted(4, 4) for _ in range(20)])
    x, unrelated = torch.randn(2, 4), torch.jit.script(torch.nn.Linear(4, 4))
    copy = torch.jit.script(torch.nn.Sequential(ruled[7]))
    for layer in ruled:
        module_calls.set_rule(layer, "cpu", torch.float32)
    try:
        assert under_bfloat16(lambda: unrelated(x)).dtype == torch.bfloat16
        assert walked == []
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* was made from"):
            under_bfloat16(lambda: copy(x))
        assert walked == [ruled[7]]
        assert under_bfloat16(lambda: ruled(x)).dtype == torch.float32
    finally:
        for layer in ruled:
            module_calls.set_rule(layer, "cpu", None)



@torch.jit.interface
class OneArgument(torch.nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:    # Linear's argument name
        pass


class Swappable(torch.nn.Module):
    """Its inner module, declared as an interface, can be replaced after
    scripting by a TorchScript module of another class."""
    inner: OneArgument

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.inner(x)


class Other(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, input):
        return self.fc(input)


class Relabelled(torch.nn.Linear):
    pass


def test_a_torchscript_call_skips_the_search_where_no_rule_can_concern_it(monkeypatch):
    """Each call of a TorchScript module while any rule existed walked its
    modules and tensors (named_parameters) and copied every rule's dtypes,
    also where no ruled module was of a class it holds, or a ScriptModule:
    2.3 times the cost of a call of a scripted 3-Linear Sequential.  Now
    that search runs only where a ruled module's class is among the
    TorchScript module's, and the rules are summed up again only when a
    module gets or loses one: each change is seen at the next call, as is
    a tensor tied to a ruled module's afterwards, a ruled module's class
    that is set, a rule's module that goes, and a module of another class
    put under an interface attribute."""
    searched = []
    search = module_calls._made_from_ruled
    monkeypatch.setattr(module_calls, "_made_from_ruled",
                        lambda scripted: searched.append(scripted) or search(scripted))
    x, layer_norm, linear = torch.randn(2, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 4)
    scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()))
    swappable = torch.jit.script(Swappable())
    other, relabelled = Other(), Relabelled(4, 4)
    module_calls.set_rule(layer_norm, "cpu", torch.float32)
    try:
        for _ in range(3):
            assert under_bfloat16(lambda: scripted(x)).dtype == torch.bfloat16
        assert searched == []
        # A rule on a Linear: the next call searches, finds no copy.
        module_calls.set_rule(linear, "cpu", torch.float32)
        assert under_bfloat16(lambda: scripted(x)).dtype == torch.bfloat16
        assert searched == [scripted]
        # Its tensors tied to the ruled Linear's: a copy, at the next call.
        tied = scripted._modules["0"]     # (scripted[0] is the Python model's)
        tied.weight, tied.bias = linear.weight, linear.bias
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* was made from"):
            under_bfloat16(lambda: scripted(x))
        module_calls.set_rule(linear, "cpu", None)
        assert under_bfloat16(lambda: scripted(x)).dtype == torch.bfloat16
        # Tied to a ruled module of another class, it is no copy, until
        # that module's class is set to Linear (no rule changed).
        module_calls.set_rule(relabelled, "cpu", torch.float32)
        tied.weight, tied.bias = relabelled.weight, relabelled.bias
        assert under_bfloat16(lambda: scripted(x)).dtype == torch.bfloat16
        relabelled.__class__ = torch.nn.Linear
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* was made from"):
            under_bfloat16(lambda: scripted(x))
        module_calls.set_rule(relabelled, "cpu", None)
        # A rule on a module inside it, and its removal: seen at the next call.
        module_calls.set_rule(scripted._modules["1"], "cpu", torch.float32)
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* holds"):
            under_bfloat16(lambda: scripted(x))
        module_calls.set_rule(scripted._modules["1"], "cpu", None)
        assert under_bfloat16(lambda: scripted(x)).dtype == torch.bfloat16
        # A ruled module that goes takes its part of the summary with it.
        module_calls.set_rule(linear, "cpu", torch.float32)
        del linear
        gc.collect()
        searched.clear()
        assert under_bfloat16(lambda: scripted(x)).dtype == torch.bfloat16
        assert searched == []
        # Under an interface attribute: a copy of a ruled Other put in after
        # the first call is found at the next.
        module_calls.set_rule(other, "cpu", torch.float32)
        assert under_bfloat16(lambda: swappable(x)).dtype == torch.bfloat16
        swappable.inner = torch.jit.script(other)
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* was made from"):
            under_bfloat16(lambda: swappable(x))
    finally:
        for module, _ in module_calls.rule_table():
            for device in ("cpu",):
                module_calls.set_rule(module, device, None)
    assert module_calls.rule_table() == []

def test_the_torchscript_error_through_tcl(interp):
    import builtins
    builtins._attack = [torch.jit.script(TwoLayers()), torch.randn(2, 4)]
    try:
        fc1 = interp.eval("py eval {__import__('builtins')._attack[0].fc1}")
        assert interp.eval(f"torch::autocast_module_dtype {fc1} float32 cpu") == "module dtype set"
        code = interp.eval("torch::autocast -device_type cpu {"
                           " list [catch {py eval {str(__import__('builtins')._attack[0]("
                           "__import__('builtins')._attack[1]).dtype)}} m] $m }")
        assert code.startswith("1 {RuntimeError: tclamp: a TorchScript module (torch.jit.script or"
                               " torch.jit.trace) holds a module with an autocast dtype rule")
        interp.eval(f"torch::autocast_module_dtype {fc1} none cpu")
        assert interp.eval("llength [torch::autocast_module_rules]") == "0"
    finally:
        del builtins._attack


def test_modules_equal_by_value_do_not_share_a_rule():
    """The rule belongs to the module object: a class that makes two
    modules equal (same __hash__, __eq__ True) gave the second one the
    first one's float32 rule."""
    first, second, x = ByValue(4, 4), ByValue(4, 4), torch.randn(2, 4)
    module_calls.set_rule(first, "cpu", torch.float32)
    try:
        assert [under_bfloat16(lambda: m(x)).dtype for m in (first, second)] == [torch.float32,
                                                                                  torch.bfloat16]
        # removing the rule of the one without a rule removes nothing
        module_calls.set_rule(second, "cpu", None)
        assert under_bfloat16(lambda: first(x)).dtype == torch.float32
        assert [m is first for m, _ in module_calls.rule_table()] == [True]
    finally:
        module_calls.set_rule(first, "cpu", None)
    assert not module_calls.rules


def test_an_unhashable_module_runs_under_a_trace_and_takes_a_rule(interp):
    """torch runs a module whose class sets __hash__ = None; under tclamp's
    wrapper (a trace running, or any rule) its call failed:
    TypeError: unhashable type."""
    import builtins
    builtins._attack = module = Unhashable(4, 4)
    try:
        trace = interp.eval("torch::autocast -device_type cpu {"
                            " torch::autocast_trace {py eval {__import__('builtins')._attack(torch.ones(2, 4))}} }")
        assert "module Unhashable op aten::addmm dtype bfloat16 count 1" in trace
        handle = interp.eval("py eval {__import__('builtins')._attack}")
        interp.eval(f"torch::autocast_module_dtype {handle} float16 cpu")
        assert under_bfloat16(lambda: module(torch.ones(2, 4))).dtype == torch.float16
        interp.eval(f"torch::autocast_module_dtype {handle} none cpu")
    finally:
        del builtins._attack


def test_a_rule_goes_with_its_module_and_a_new_module_at_its_address_has_none():
    """The table is by identity now: the rule of a module that went must not
    pass to a module that Python puts at the same address."""
    import gc
    x = torch.randn(2, 4)
    gone = torch.nn.Linear(4, 4)
    address = id(gone)
    module_calls.set_rule(gone, "cpu", torch.float32)
    del gone
    gc.collect()
    assert len(module_calls.rules) == 0 and module_calls.rule_table() == []
    kept = []
    for _ in range(1000):
        candidate = torch.nn.Linear(4, 4)
        if id(candidate) == address:
            break
        kept.append(candidate)
    assert under_bfloat16(lambda: candidate(x)).dtype == torch.bfloat16


def test_trace_module_dtypes_match_forward_hooks():
    """Differential: under random nested rules, each Linear's addmm dtype in
    the trace (module path, dtype) is the dtype its output has, read by a
    forward hook (no dispatch mode), and the one the rules say: the
    innermost rule, else autocast's."""
    from tclamp import trace as trace_module
    rng = random.Random(7)
    x = torch.randn(3, 4)
    for _ in range(12):
        model = torch.nn.Sequential(TwoLayers(), torch.nn.Sequential(torch.nn.Linear(4, 4), TwoLayers()))
        named = dict(model.named_modules())
        chosen = {name: rng.choice([torch.float32, torch.float16, torch.bfloat16])
                  for name in rng.sample(sorted(named), 3)}
        for name, dtype in chosen.items():
            module_calls.set_rule(named[name], "cpu", dtype)
        seen = {}
        hooks = [m.register_forward_hook(lambda m, i, o, n=n: seen.__setitem__(n, o.dtype))
                 for n, m in named.items() if isinstance(m, torch.nn.Linear)]
        try:
            tracer = trace_module.OperatorTrace(None)
            tracer.__enter__()
            try:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    model(x)
            finally:
                tracer.__exit__(None, None, None)
            traced = {row["module"]: row["dtype"] for row in tracer.result()["modules"]
                      if row["op"] == "aten::addmm"}
        finally:
            for hook in hooks:
                hook.remove()
            for name in chosen:
                module_calls.set_rule(named[name], "cpu", None)
        expected = {}
        for name in seen:
            ruled = [n for n in chosen if n == "" or name == n or name.startswith(n + ".")]
            innermost = max(ruled, key=len) if ruled else None
            expected[name] = chosen[innermost] if innermost is not None else torch.bfloat16
        assert seen == expected, chosen
        as_paths = {("Sequential." + n) if n else "Sequential": str(d).removeprefix("torch.")
                    for n, d in seen.items()}
        assert traced == as_paths, chosen
    assert not module_calls.rules


def test_an_expanded_output_is_checked_at_its_stored_size(interp):
    """expand and broadcast_to repeat one stored value along a stride-0
    dimension: torch.isfinite answered at the full size, so z.expand(2**31)
    of one float took 24 s and 14 GB under a trace (untraced: nothing), and
    z.expand(2**40) failed the trace (can't allocate memory).  An inf
    behind the expansion is still found, wherever it is stored."""
    interp.eval("py exec {z = torch.zeros(1); row = torch.tensor([1.0, float('inf')])}")
    trace = interp.eval("torch::autocast_trace { py eval {z.expand(2**40).shape} }")
    assert trace == ("ops {{op aten::expand dtype float32 count 1}} nonfinite {} modules {}"
                     " first_nonfinite {} unchecked {}")
    nonfinite = interp.eval("""lmap script {
        {row.expand(2**39, 2)}
        {row[:, None].expand(2, 2**39)}
        {row[:, None, None].expand(2, 2**19, 2**19)[1:]}
        {row[:1].expand(2**40)}
    } { dict get [torch::autocast_trace [list py eval $script]] nonfinite }""")
    # (row's views by indexing hold its inf too: unsqueeze)
    assert nonfinite == ("{{op aten::expand dtype float32 count 1}}"
                         " {{op aten::unsqueeze dtype float32 count 1} {op aten::expand dtype float32 count 1}}"
                         " {{op aten::unsqueeze dtype float32 count 2} {op aten::expand dtype float32 count 1}"
                         " {op aten::slice dtype float32 count 1}}"
                         " {}")


def test_the_wrapper_goes_when_the_last_ruled_module_does():
    """Rules take the wrapper away when none is left: when the last ruled
    module went, Module.__call__ stayed tclamp's until some module was
    next called."""
    import gc
    module = torch.nn.Linear(2, 2)
    module_calls.set_rule(module, "cpu", torch.float32)
    assert torch.nn.Module.__call__ is module_calls.call
    del module
    gc.collect()
    assert len(module_calls.rules) == 0
    assert torch.nn.Module.__call__ is not module_calls.call


def test_forward_mode_ad_under_a_trace_does_not_crash(tmp_path):
    """Forward-mode AD (torch.func.jvp, jacfwd, forward_ad) makes zero
    tensors (aten::_efficientzerotensor), which have no memory: the
    tracer's torch.isfinite read one through a null pointer, inside its
    dispatch mode, and the process died (segmentation fault)."""
    import processes
    r = processes.tclsh(tmp_path, """
        package require tclamp
        py exec {
        import torch
        lin = torch.nn.Linear(4, 4)
        x = torch.randn(3, 4)
        def jvp():
            out, tangent = torch.func.jvp(lin, (x,), (torch.ones_like(x),))
            return [str(out.dtype), bool(torch.isfinite(tangent).all())]
        }
        set trace [torch::autocast_trace { set ::result [py call jvp] }]
        puts $::result
        puts [lsearch -inline -index 1 [dict get $trace ops] aten::_efficientzerotensor]
        puts [dict get $trace nonfinite]
        puts [llength [dict get [torch::autocast_trace {
            py eval {torch.func.jacfwd(lin)(x[0])}
        }] ops]]
    """)
    processes.assert_clean(r)
    lines = r.stdout.split("\n")
    assert lines[:3] == ["torch.float32 1", "op aten::_efficientzerotensor dtype float32 count 2", ""]
    assert int(lines[3]) > 0 and lines[4:] == [""]


def test_a_tensor_subclass_without_isfinite_is_unchecked_not_a_failed_trace(interp):
    """torch.masked's MaskedTensor implements no isfinite: its
    __torch_dispatch__ returns NotImplemented, torch raises TypeError, and
    the whole trace failed ("The tracer failed: TypeError: Multiple
    dispatch failed ...").  Its outputs are listed under unchecked, as
    documented for outputs that cannot be read."""
    import warnings
    from torch.masked import masked_tensor
    import builtins
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # a prototype
        builtins._attack = masked_tensor(torch.tensor([1.0, float("inf")]),
                                         torch.tensor([True, False]))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = interp.eval("torch::autocast_trace {py eval {__import__('builtins')._attack * 2}}")
        assert trace == ("ops {{op aten::mul dtype float32 count 1}} nonfinite {} modules {}"
                         " first_nonfinite {} unchecked {{op aten::mul dtype float32 count 1}}")
    finally:
        del builtins._attack


def test_a_view_of_freed_storage_is_unchecked_not_read(tmp_path):
    """A parameter whose storage was freed (untyped_storage().resize_(0), as
    FSDP frees parameters between uses) still gets views made of it; the
    tracer's torch.isfinite read the freed memory and the process died
    (segmentation fault).  The view is counted and listed as unchecked."""
    import processes
    r = processes.tclsh(tmp_path, """
        package require tclamp
        py exec {
        import torch
        p = torch.nn.Parameter(torch.randn(1000))
        p.untyped_storage().resize_(0)
        }
        puts [torch::autocast_trace { py eval {p.view(10, 100).shape} }]
        puts [dict get [torch::autocast_trace { py eval {p.detach()[:0]} }] unchecked]
    """)
    processes.assert_clean(r)
    assert r.stdout.split("\n") == [
        "ops {{op aten::view dtype float32 count 1}} nonfinite {} modules {} first_nonfinite {}"
        " unchecked {{op aten::view dtype float32 count 1}}",
        "{op aten::detach dtype float32 count 1}", ""]


class Recursive(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, depth=2):
        return self.lin(x) if depth == 0 else self(self.lin(x), depth - 1)


def test_a_module_that_calls_itself_keeps_its_path():
    """A module called inside its own call (recursion) is the same module:
    it was named again under itself, Recursive.Recursive.Recursive.lin, a
    new module path (and rows) for each level of the recursion."""
    from tclamp import trace as trace_module
    model, x = Recursive(), torch.randn(2, 4)
    tracer = trace_module.OperatorTrace(None)
    tracer.__enter__()
    try:
        model(x, depth=20)
    finally:
        tracer.__exit__(None, None, None)
    rows = [(row["module"], row["op"], row["count"]) for row in tracer.result()["modules"]]
    assert rows == [("Recursive.lin", "aten::t", 21), ("Recursive.lin", "aten::addmm", 21)]


def test_nonfinite_counts_match_an_independent_check():
    """Differential: random chains of float16/float32 operators, some of
    which overflow, some on expanded (stride-0) or transposed operands.
    Each operator's output is checked again outside any dispatch mode
    (torch.isfinite on a contiguous copy); the trace's nonfinite rows and
    first_nonfinite must match."""
    from tclamp import trace as trace_module
    rng = random.Random(11)
    steps = [
        ("aten::mul", lambda t: t * 300.0),
        ("aten::add", lambda t: t + 1.0),
        ("aten::exp", lambda t: t.exp()),
        ("aten::expand", lambda t: t.expand(2, *t.shape)),
        ("aten::transpose", lambda t: t.transpose(-1, -2)),
        ("aten::div", lambda t: t / 0.0),
        ("aten::neg", lambda t: -t),
    ]
    for _ in range(30):
        dtype = rng.choice([torch.float16, torch.float32])
        start = torch.tensor([[rng.uniform(-3, 3) for _ in range(3)] for _ in range(3)], dtype=dtype)
        chain = [rng.choice(steps) for _ in range(rng.randint(1, 6))]
        expected, first, value = {}, {}, start
        for name, step in chain:
            value = step(value)
            key = (name, str(value.dtype).removeprefix("torch."))
            bad = not bool(torch.isfinite(value.contiguous()).all())
            if bad:
                expected[key] = expected.get(key, 0) + 1
                first = first or {"op": name, "dtype": key[1], "module": ""}
        tracer = trace_module.OperatorTrace(None)
        tracer.__enter__()
        try:
            value = start
            for _, step in chain:
                value = step(value)
        finally:
            tracer.__exit__(None, None, None)
        result = tracer.result()
        got = {(row["op"], row["dtype"]): row["count"] for row in result["nonfinite"]}
        assert got == expected, [name for name, _ in chain]
        assert result["first_nonfinite"] == first, [name for name, _ in chain]
        assert result["unchecked"] == []


class _Holder(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class _Relu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(x)


def test_a_new_torchscript_module_at_a_dead_ones_id_gets_no_stale_class_names():
    """_original_names keeps class names per TorchScript module by id: a
    module at the id of one that went, whose entry is still there (its
    weak reference's callback not yet run), that holds a copy of a ruled
    Linear is refused, not skipped with the dead one's names (a ReLU's).
    The entry is put at the new module's id by hand: waiting for CPython
    to reuse an id took from a few to 180 seconds of scripting and
    tracing, and could end with none reused."""
    x, linear = torch.randn(2, 4), torch.nn.Linear(4, 4)
    module_calls.set_rule(linear, "cpu", torch.float32)
    try:
        first = torch.jit.script(_Relu())
        under_bfloat16(lambda: first(x))
        stale = module_calls._script_names[id(first)]
        assert "Linear" not in stale[1]
        dead = weakref.ref(first)
        del first
        gc.collect()
        assert dead() is None and stale[0]() is None
        second = torch.jit.trace(_Holder(linear), x)
        module_calls._script_names[id(second)] = stale
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* was made from"):
            under_bfloat16(lambda: second(x))
        assert module_calls._script_names[id(second)][0]() is second
    finally:
        module_calls.set_rule(linear, "cpu", None)


@pytest.mark.parametrize("make", ["script", "trace"])
def test_a_submodule_of_another_class_cannot_replace_one_of_a_torchscript_module(make):
    """What lets _original_names read a TorchScript module's classes once:
    torch refuses, on a scripted or traced module, a submodule of another
    TorchScript type (a ruled Linear subclass's copy put in a Linear's
    place), so the names kept cannot go stale that way."""
    class Sub(torch.nn.Linear):
        pass
    x = torch.randn(2, 4)
    ruled = Sub(4, 4)
    held = torch.jit.script(_Holder(torch.nn.Linear(4, 4))) if make == "script" \
        else torch.jit.trace(_Holder(torch.nn.Linear(4, 4)), x)
    module_calls.set_rule(ruled, "cpu", torch.float32)
    try:
        under_bfloat16(lambda: held(x))
        with pytest.raises(RuntimeError, match="Expected a value of type"):
            held.inner = torch.jit.trace(ruled, x) if make == "trace" else torch.jit.script(ruled)
        assert under_bfloat16(lambda: held(x)).dtype == torch.bfloat16
    finally:
        module_calls.set_rule(ruled, "cpu", None)


def test_a_torchscript_copy_is_refused_after_the_ruled_modules_class_is_set():
    """A TorchScript copy of a ruled Linear subclass is refused; after the
    ruled module's __class__ is set to Linear (no rule changed) the copy
    computed silently in bfloat16, without the rule."""
    class Sub(torch.nn.Linear):
        pass
    x, ruled = torch.randn(2, 4), Sub(4, 4)
    module_calls.set_rule(ruled, "cpu", torch.float32)
    try:
        copy = torch.jit.script(_Holder(ruled))
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* was made from"):
            under_bfloat16(lambda: copy(x))
        ruled.__class__ = torch.nn.Linear
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* was made from"):
            under_bfloat16(lambda: copy(x))
    finally:
        module_calls.set_rule(ruled, "cpu", None)


def test_a_torchscript_copy_made_under_a_class_set_while_ruled_is_refused_after_it_is_set_back():
    """The class names a ruled module is matched by are all it has been
    seen with while ruled: a ruled Linear whose __class__ is set to a
    subclass, then traced (which calls it, under that class), then set
    back to Linear: the copy, whose original_name is the subclass's, is
    refused, not run without the rule."""
    class Sub(torch.nn.Linear):
        pass
    x, ruled = torch.randn(2, 4), torch.nn.Linear(4, 4)
    module_calls.set_rule(ruled, "cpu", torch.float32)
    try:
        ruled.__class__ = Sub
        copy = torch.jit.trace(_Holder(ruled), x)
        assert copy.inner.original_name == "Sub"
        ruled.__class__ = torch.nn.Linear
        with pytest.raises(RuntimeError, match="^tclamp: a TorchScript module .* was made from"):
            under_bfloat16(lambda: copy(x))
    finally:
        module_calls.set_rule(ruled, "cpu", None)
    assert under_bfloat16(lambda: copy(x)).dtype == torch.bfloat16


class _CallsForward(torch.nn.Linear):
    def __call__(self, x):
        return self.forward(x)


class _CallsImplByString(torch.nn.Linear):
    def __call__(self, x):
        return getattr(self, "_call" + "_impl")(x)


class _MentionsCallImpl(torch.nn.Linear):
    """Names _call_impl in a docstring only."""

    def __call__(self, x):
        "_call_impl, _wrapped_call_impl"
        self.seen = getattr(self, "_call_impl_count", 0) + 1
        return super().__call__(x)


def assert_float32_rule_applies(module):
    """A float32 rule on module is set and applied (it computes in float32
    under bfloat16 autocast), and then removed, leaving no rule."""
    from tclamp import module_rules
    assert module_rules.set_rule(module, torch.float32, "cpu") == "module dtype set"
    try:
        assert under_bfloat16(lambda: module(torch.randn(2, 4))).dtype == torch.float32
    finally:
        module_rules.set_rule(module, None, "cpu")
    assert module_calls.rule_table() == []


def assert_refused_as_skipping(module, call_name):
    """A rule on module is refused, naming its class's __call__ (call_name)
    as one that does not call torch.nn.Module.__call__, and none is set."""
    from tclamp import module_rules
    from tclamp.module_rules import UsageError
    with pytest.raises(UsageError) as refused:
        module_rules.set_rule(module, torch.float32, "cpu")
    assert (refused.value.kind, refused.value.details) == ("INVALID_VALUE", ("-module",))
    assert refused.value.message == (
        f"Invalid module: its class's __call__, {call_name}, does not call"
        " torch.nn.Module.__call__ (as super().__call__(...) does), so it does not go through"
        " the rule")
    assert module_calls.rule_table() == []


def test_a_class_that_only_mentions_call_impl_is_not_refused():
    """binds_torch_call reads the names a __call__'s code reads: a string or
    docstring that says _call_impl, or an attribute _call_impl_count, is no
    call of it; the rule is set and applied."""
    assert_float32_rule_applies(_MentionsCallImpl(4, 4))


@pytest.mark.parametrize("klass", [_CallsForward, _CallsImplByString])
def test_a_class_whose_call_skips_module_call_is_refused_or_ruled(klass):
    """The contract: a rule is applied or refused.  A __call__ that calls
    self.forward, or _call_impl got by a computed name, never reaches
    Module.__call__; the rule was set and the module computed in bfloat16.
    Now it is refused: a class's own __call__ that reads no __call__
    cannot be seen to go on to Module.__call__."""
    from tclamp import module_rules
    from tclamp.module_rules import UsageError
    x, module = torch.randn(2, 4), klass(4, 4)
    try:
        module_rules.set_rule(module, torch.float32, "cpu")
    except UsageError as refused:
        assert (refused.kind, refused.details) == ("INVALID_VALUE", ("-module",))
        assert refused.message == (
            f"Invalid module: its class's __call__, {__name__}.{klass.__qualname__}.__call__,"
            " does not call torch.nn.Module.__call__ (as super().__call__(...) does), so it"
            " does not go through the rule")
        assert module_calls.rule_table() == []
        return
    try:
        assert under_bfloat16(lambda: module(x)).dtype == torch.float32
    finally:
        module_rules.set_rule(module, None, "cpu")


def _passes_on(module, x):
    return torch.nn.Module.__call__(module, x)


class _HelperInLambda(torch.nn.Linear):
    def __call__(self, x):
        return (lambda: _passes_on(self, x))()


class _HelperInComprehension(torch.nn.Linear):
    def __call__(self, x):
        return [_passes_on(self, v) for v in (x,)][0]


@pytest.mark.parametrize("klass", [_HelperInLambda, _HelperInComprehension])
def test_a_global_helper_called_from_a_lambda_or_comprehension_goes_through_the_rule(klass):
    """A class's own __call__ that calls a global helper which calls
    torch.nn.Module.__call__ is ruled; called from a lambda (or, before
    Python 3.12, a comprehension: code of its own) the helper was not
    followed, as only the globals of the __call__'s own code were, and a
    module that goes through the rule was refused."""
    assert_float32_rule_applies(klass(4, 4))


def _skip(module, x):
    """A global that shares its name with _SkipsByMethod's method, and
    calls torch.nn.Module.__call__."""
    return torch.nn.Module.__call__(module, x)


class _SkipsByMethod(torch.nn.Linear):
    def _skip(self, x):
        return self.forward(x)

    def __call__(self, x):
        return self._skip(x)


def test_an_attribute_named_as_a_global_is_not_taken_for_that_global():
    """self._skip(x) reads the attribute _skip, not the global _skip: the
    global (which calls torch.nn.Module.__call__) was taken for a helper
    the __call__ calls, so the rule was set and not applied (bfloat16)."""
    module = _SkipsByMethod(4, 4)
    assert_refused_as_skipping(module, f"{__name__}._SkipsByMethod.__call__")
    assert under_bfloat16(lambda: module(torch.randn(2, 4))).dtype == torch.bfloat16


def test_a_call_whose_globals_name_is_no_string_is_judged_not_a_python_error():
    """Code run with globals whose __name__ is no string (exec with such a
    dict): set_rule failed with AttributeError ('int' object has no
    attribute 'startswith') instead of setting or refusing the rule."""
    made = {}
    for name, body in (("Skips", "self.forward(x)"), ("Passes", "torch.nn.Module.__call__(self, x)")):
        space = {"__name__": 5, "torch": torch}
        exec(f"def __call__(self, x):\n    return {body}\n", space)
        made[name] = type(name, (torch.nn.Linear,), {"__call__": space["__call__"]})(4, 4)
    assert_refused_as_skipping(made["Skips"], "__call__")
    assert_float32_rule_applies(made["Passes"])


def test_a_call_whose_code_cannot_be_read_is_refused_not_a_python_error():
    """A __call__ whose code was made by hand so that a name index is past
    its co_names (it cannot run): reading its globals failed set_rule
    with IndexError; it is judged by its co_names, and refused."""
    def skips(self, x):
        return self.forward(x)
    made = types.FunctionType(skips.__code__.replace(co_names=()), globals())
    module = type("Unreadable", (torch.nn.Linear,), {"__call__": made})(4, 4)
    # (Python 3.10's qualname of a function made so is its code's name)
    assert_refused_as_skipping(module, f"{__name__}.{made.__qualname__}")
