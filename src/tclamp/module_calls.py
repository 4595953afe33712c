"""What tclamp does around a module's forward pass: the rules of
torch::autocast_module_dtype, and the module paths of torch::autocast_trace.

torch.nn.Module.__call__ is wrapped while a rule exists or a trace runs, and
is torch's own again when neither does.  Module hooks would not do: torch
calls even `always_call` forward hooks only when forward raises an
Exception (not KeyboardInterrupt or SystemExit), hooks are copied with the
module by deepcopy and pickle, global hooks run for every thread, and a
module with hooks runs its forward inside a closure that keeps its
arguments alive in a traceback.  The wrapper's own frame holds what it
replaced, and puts it back in `finally`.
"""
import copy
import dis
import functools
import itertools
import sys
import threading
import types
import weakref

import torch

_torch_call = torch.nn.Module.__call__
# What `call` goes on to: the Module.__call__ it replaced when it went in
# (torch's own, or a wrapper another library put there since), and whether
# it is in the chain now (it stays in while a wrapper put over it calls it).
_replaced = _torch_call
_installed = False


class RuleTable:
    """module -> {device type: dtype}, by the module's identity: a
    WeakKeyDictionary hashed and compared modules, so a module whose class
    makes equal ones (its own __eq__ and __hash__) got another's rule, and
    one that cannot be hashed failed every call while rules existed or a
    trace ran.  A module that goes away takes its rules (its id can be
    another's only after that).  data: id -> (weak reference, dtypes).
    names: id -> the names of the classes the module has been seen with
    while it has had its entry (see class_names)."""

    def __init__(self):
        self.data = {}
        self.names = {}
        # Another value whenever a module gets or loses its entry (set,
        # removed, or gone with its module), after the change: what is
        # worked out from the modules ruled (_rules_summary) is kept under
        # it.  next() on a count is one step, on any thread.
        self.generation = next(_generations)

    def get(self, module, default=None):
        entry = self.data.get(id(module))
        return entry[1] if entry is not None and entry[0]() is module else default

    def __contains__(self, module):
        return self.get(module) is not None

    def __len__(self):
        return len(self.data)

    def __setitem__(self, module, dtypes):
        key, table = id(module), weakref.ref(self)

        def gone(ref):
            owner = table()
            data = getattr(owner, "data", None)
            if data is not None and data.get(key, (None,))[0] is ref:
                data.pop(key, None)
                owner.names.pop(key, None)
                owner.generation = next(_generations)
                if not data:        # the last ruled module went: torch's own again
                    with _lock:
                        _update()
        # The names go in before the entry: a reader that finds the entry
        # finds them.
        self.names[key] = {type(module).__name__}
        self.data[key] = (weakref.ref(module, gone), dtypes)
        self.generation = next(_generations)

    def __delitem__(self, module):
        if self.get(module) is None:
            raise KeyError(module)
        del self.data[id(module)]
        self.names.pop(id(module), None)
        self.generation = next(_generations)

    def class_names(self, module):
        """The names of the classes module has been seen with since it got
        its entry, its class now among them (added here), or None where it
        has none.  A TorchScript copy keeps only the name of the class its
        module had when the copy was made (its original_name), and a
        module's __class__ can be set after that: the copy of a ruled
        Linear subclass, found by that subclass's name, ran silently
        without the rule once the ruled module's __class__ was set to
        Linear.  They are added to where tclamp meets the module: when the
        rule is set, when it is called with its rule, and at each call of
        a TorchScript module (which reads them).  The set is shared (the
        summary holds it), so what is added is seen there."""
        entry, names = self.data.get(id(module)), self.names.get(id(module))
        if entry is None or entry[0]() is not module:
            return None
        if names is not None:
            name = type(module).__name__
            if name not in names:
                names.add(name)
        return names


_generations = itertools.count()


# module -> {device type: dtype}; a module that goes away takes its rules
rules = RuleTable()
# Reentrant: a finalizer (a module's __del__) may run Tcl that sets another
# rule on this thread while the lock is held.
_lock = threading.RLock()
_traces = 0                     # traces running, on every thread
# Per thread: the module path stack of this thread's traces, or None.
_here = threading.local()


def cast_inputs(value, device_type, dtype, within=frozenset()):
    """What autocast does to an operator's inputs: floating tensors on the
    device (float64 excepted) become dtype; lists, tuples and dicts are
    looked into.  A container with nothing to cast is passed on as it is
    (forward may fill it in place); one with something is copied, keeping
    its type (a defaultdict's factory, an OrderedDict subclass's attributes)
    where the type can be copied (into a new object holding the cast
    items), else as the plain list, tuple or dict that torch's own autocast
    passes.  A container met again inside itself (a list
    that holds itself) is passed on as it is: within holds the ids of those
    being looked into."""
    if isinstance(value, torch.Tensor):
        if (value.is_floating_point() and value.dtype not in (torch.float64, dtype)
                and value.device.type == device_type):
            return value.to(dtype)
        return value
    if isinstance(value, (list, tuple, dict)):
        if id(value) in within:
            return value
        within = within | {id(value)}
    if isinstance(value, (list, tuple)):
        items = [cast_inputs(item, device_type, dtype, within) for item in value]
        if all(new is old for new, old in zip(items, value)):
            return value
        try:
            rebuilt = type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
            # A constructor that reads its arguments otherwise (one per item)
            # can build something else without failing: a tuple of the list.
            if len(rebuilt) == len(items) and all(new is item for new, item in zip(rebuilt, items)):
                return rebuilt
        except Exception:       # a subclass whose constructor takes other arguments
            pass
        return list(items) if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        changed = {}
        for key, item in value.items():
            cast = cast_inputs(item, device_type, dtype, within)
            if cast is not item:
                changed[key] = cast
        if not changed:
            return value
        try:
            copied = copy.copy(value)
            # A copy that is the caller's own dict (__copy__ returning self)
            # would have its tensors cast in the caller's hands.
            if copied is not value:
                for key, cast in changed.items():
                    copied[key] = cast
                return copied
        except Exception:       # a subclass that refuses to be copied or set
            pass
        copied = dict(value.items())    # as read above: keys() may refuse too
        copied.update(changed)
        return copied
    return value


def held_names(parent):
    """What parent holds, by id: (module, attribute path), the nearest path
    first: fc1 for a child, layers.3 for an item of a ModuleList or
    ModuleDict child (which forward calls without calling the container)."""
    names, level = {id(parent): (parent, None)}, [("", parent)]
    while level:
        below = []
        for prefix, holder in level:
            for name, child in holder._modules.items():
                if child is not None and id(child) not in names:
                    names[id(child)] = (child, prefix + name)
                    below.append((f"{prefix}{name}.", child))
        level = below
    return names


def held_as(caller, module):
    """module's path under the module that calls it (its class name if that
    one does not hold it).  caller's names are read once per call of its
    forward, not per module it calls: looking through a 1000-layer model
    for each layer cost seconds a pass.  A child that forward makes
    as it runs (made on first use) is among its direct children."""
    if caller[2] is None:
        caller[2] = held_names(caller[0])
    held, name = caller[2].get(id(module), (None, None))
    if held is not module:
        name = next((n for n, child in caller[0]._modules.items() if child is module), None)
    return name or type(module).__name__


def call(module, /, *args, **kwargs):
    """torch.nn.Module.__call__ while tclamp needs it."""
    paths = getattr(_here, "paths", None)
    if paths is None:
        return _ruled_call(module, args, kwargs)
    # [module, path, what it holds (held_names, when it first calls one)]
    # A module called again inside its own call (recursion, directly or
    # through another) keeps the path it has there: it was named again
    # under itself, Rec.Rec.Rec.lin, a new path for each level.
    path = next((entry[1] for entry in paths if entry[0] is module), None)
    if path is None:
        path = f"{paths[-1][1]}.{held_as(paths[-1], module)}" if paths else type(module).__name__
    paths.append([module, path, None])
    try:
        return _ruled_call(module, args, kwargs)
    finally:
        paths.pop()


COMPILED_HOLDS_RULE = ("tclamp: a torch.compile'd module holds a module with an autocast"
                       " dtype rule, which compiled code would not apply: remove the rule"
                       " (torch::autocast_module_dtype module none device), or set it on the"
                       " module that is not compiled")


def is_compiled(module):
    """Whether module is what torch.compile(module) returns, or a module
    compiled in place (module.compile()): compiled code calls the modules
    inside without Module.__call__, so no rule of theirs would apply."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")    # not loaded: none is
    return eval_frame is not None and (
        isinstance(module, eval_frame.OptimizedModule)
        or getattr(module, "_compiled_call_impl", None) is not None)


def binds_torch_call(module):
    """Why module's class never reaches tclamp's wrapper, or None.  Its
    class, or a base of it below torch.nn.Module, holds torch's own
    Module.__call__ (or _call_impl), or another library's wrapper of it, as
    its __call__, bound when the class was made (`__call__ =
    torch.nn.Module.__call__`); or its __call__ calls _call_impl or
    _wrapped_call_impl by name (`self._call_impl(x)`,
    `torch.nn.Module._call_impl(self, x)`), which runs forward without
    Module.__call__.  Either way a rule on it was silently not applied.
    A class's own __call__ above such a base is no way round it: its
    `super().__call__(x)` finds the base's (a rule on it was accepted and
    not applied), so the base counts whatever that __call__ does.  Nor is
    what a __call__ calls on the way there (a helper of it that only names
    a library's wrapper, `Module.__call__ is wrapper`, made the class
    refused): one whose code names __call__ goes on to the base's, which
    is what is looked at next, unless it also names _call_impl or
    _wrapped_call_impl.
    A class's own __call__ (not torch's) that cannot be seen to go on to
    Module.__call__ (_reaches_module_call: `return self.forward(x)`, or
    `getattr(self, "_call" + "_impl")(x)`, a name no code reads) never
    reaches it either: such a rule was accepted and silently not applied.
    The answer names what was found, for the message: (what the class
    holds as __call__, the function that names torch's, or None where
    that is what the class holds, and torch's function or the name it
    calls), or (the __call__ that does not go on, None, None)."""
    for klass in type(module).__mro__:
        if klass is torch.nn.Module:
            return None
        found = vars(klass).get("__call__")
        if found is None:
            continue
        if isinstance(found, types.FunctionType) and not _in_torch(found):
            names = _code_names(found.__code__)
            called = _torch_call_named(names)
            if called is not None:
                return found, found, called
            if "__call__" in names:
                continue
        reached = _calls_torch_call(found)
        if reached is not None:
            return (found, *reached)
        own = _own_call(found)
        if own is not None and not _reaches_module_call(own):
            return own, None, None
    return None


def _own_call(found):
    """The __call__ a class holds (found) as written outside torch: found
    itself, or, where it is a decorator of torch's (`@torch.no_grad()`),
    the function that decorator wraps (functools.wraps's __wrapped__).
    None where found is torch's own code (a torch class's __call__, as
    torch.fx's GraphModule has), which is taken as it is."""
    while isinstance(found, types.FunctionType) and _in_torch(found):
        found = getattr(found, "__wrapped__", None)
    return found


def _reaches_module_call(function):
    """Whether a class's own __call__ (function, not torch's) can be seen
    to go on to Module.__call__: its code, or that of a function it holds
    (as _calls_torch_call looks: in its closure, as a global its code
    reads, as a default, as functools.wraps's __wrapped__; a wrapper that
    is an object, by its __wrapped__), reads the name __call__
    (`super().__call__(x)`, `torch.nn.Module.__call__(self, x)`), or holds
    tclamp's `call` (a library's wrapper put over it, bound as the
    class's __call__).  Anything else cannot be told from one that calls
    forward itself (`self.forward(x)`), or _call_impl by a name made as
    it runs, past Module.__call__ and so past the rule.  torch's
    functions met on the way are not read or looked into: torch's own
    code that names __call__ is not the class's way to Module.__call__."""
    seen, waiting = set(), [function]
    while waiting:
        function = waiting.pop()
        if function is None or id(function) in seen:
            continue
        if function is call:
            return True
        seen.add(id(function))
        if isinstance(function, types.FunctionType):
            if _in_torch(function):
                continue
            if "__call__" in _code_names(function.__code__):
                return True
        waiting.extend(_held(function))
    return False


def _held(function):
    """What a function holds that it may call (functools.wraps's
    __wrapped__, its defaults, its closure, the globals its code reads),
    or what a wrapper that is no function wraps (_wrapped_by)."""
    if not isinstance(function, types.FunctionType):
        return (_wrapped_by(function),)
    return (getattr(function, "__wrapped__", None),
            *(function.__defaults__ or ()),
            *(function.__kwdefaults__ or {}).values(),
            *_closure_values(function),
            *(function.__globals__.get(name) for name in _global_names(function.__code__)))


_GLOBAL_READS = frozenset(("LOAD_GLOBAL", "LOAD_NAME"))


def _global_names(code):
    """The global names code reads, and those of the code made inside it
    (a lambda, a comprehension before Python 3.12), in the order read.
    Not co_names, which also holds the attribute names code reads: in
    `self._skip(x)` a global function _skip (calling
    torch.nn.Module.__call__) was taken for a helper the __call__ calls,
    and a global called from a lambda was not followed."""
    names = {}
    for inner in _codes_in(code):
        try:
            names.update((op.argval, None) for op in dis.get_instructions(inner)
                         if op.opname in _GLOBAL_READS)
        except Exception:       # code made by hand that dis cannot read (an index past co_names)
            names.update((name, None) for name in inner.co_names)
    return names


_TORCH_CALLS = ("_wrapped_call_impl", "_call_impl")


def _torch_call_named(names):
    """Which of torch's calls (_TORCH_CALLS) code reading `names` calls by
    name, or None."""
    return next((name for name in _TORCH_CALLS if name in names), None)


def _codes_in(code):
    """code, and the code made inside it (a lambda, a comprehension before
    Python 3.12), at any depth."""
    waiting = [code]
    while waiting:
        code = waiting.pop()
        yield code
        waiting.extend(const for const in code.co_consts if isinstance(const, types.CodeType))


def _code_names(code):
    """The attribute and global names code reads, and those of the code
    made inside it."""
    return {name for inner in _codes_in(code) for name in inner.co_names}


def _calls_torch_call(function):
    """Whether function is torch's own Module._wrapped_call_impl or
    _call_impl, or calls one of them by what it holds or by name: a wrapper
    another library put in place of Module.__call__ or _wrapped_call_impl
    (before or after tclamp was loaded) was taken for a class's own
    __call__, and a rule on a class bound to it was silently not applied.
    torch's own are told by the module that defined them and their name,
    as Module's attributes may be wrappers now.  A wrapper holds what it
    calls as functools.wraps's __wrapped__, in its closure, as a default,
    or as a global its code reads; a class's own __call__ that calls
    super().__call__ holds none of them.  One that holds tclamp's `call`
    (put over it while a rule was set) goes through the rules.  A function
    of the user's or a library's (not torch's) that names _call_impl or
    _wrapped_call_impl calls it by name, past Module.__call__.  The
    answer, where it calls one: (the function of torch's found, None), or
    (the function that names one, the name)."""
    torch_globals = vars(sys.modules[torch.nn.Module.__module__])
    seen, waiting = set(), [function]
    while waiting:
        function = waiting.pop()
        if function is None or function is call or id(function) in seen:
            continue
        seen.add(id(function))
        if isinstance(function, types.FunctionType):
            if function.__globals__ is torch_globals:
                if function.__code__.co_name in _TORCH_CALLS:
                    return function, None
            elif not _in_torch(function):
                names = _code_names(function.__code__)
                called = _torch_call_named(names)
                if called is not None:
                    return function, called
        waiting.extend(_held(function))
    return None


def _in_torch(function):
    """Whether function is torch's: torch's own code that names _call_impl
    (torch.compile's) is not a class's way round Module.__call__.  Code
    run with globals whose __name__ is no string (exec) is not torch's:
    it failed set_rule with an AttributeError."""
    name = function.__globals__.get("__name__")
    return isinstance(name, str) and (name == "torch" or name.startswith("torch."))


def qualified_name(function):
    """A function's module and qualified name as its code was written:
    functools.wraps copies the wrapped function's __module__ and
    __qualname__ onto a wrapper, which would name torch's for a library's
    one.  Another callable is named by its class.  Code run with globals
    of its own (exec) has no module name."""
    if isinstance(function, types.FunctionType):
        code, module = function.__code__, function.__globals__.get("__name__")
        name = getattr(code, "co_qualname", None)
        if name is None:        # Python 3.10: only a wrapper's own name is sure
            name = code.co_name if hasattr(function, "__wrapped__") else function.__qualname__
        return f"{module}.{name}" if isinstance(module, str) else name
    klass = type(function)
    return f"{klass.__module__}.{klass.__qualname__}"


def torch_call_name(function):
    """What a user knows torch's function by: Module.__call__ is
    _wrapped_call_impl."""
    if function.__code__.co_name == "_wrapped_call_impl":
        return "torch.nn.Module.__call__"
    return "torch.nn.Module." + function.__code__.co_name


def _wrapped_by(wrapper):
    """What a wrapper that is no function calls: a partial's or
    partialmethod's func, or what a callable object (a wrapt-style
    wrapper) holds as __wrapped__; such a wrapper bound as a class's
    __call__ was not looked into, and the class's rule was set and not
    applied.  Classes and modules are not looked into, nor other
    attributes of just any object: a mock makes them as they are read."""
    if isinstance(wrapper, (functools.partial, functools.partialmethod)):
        return wrapper.func
    if callable(wrapper) and not isinstance(wrapper, (type, types.ModuleType)):
        try:
            return getattr(wrapper, "__wrapped__", None)
        except Exception:       # a proxy with nothing behind it (outside its context)
            return None
    return None


def _closure_values(function):
    for cell in function.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:      # a variable not yet (or no longer) set
            pass


# What a TorchScript module's compiled code would not apply, after what it
# has to do with the ruled module.
_SCRIPTED = "tclamp: a TorchScript module (torch.jit.script or torch.jit.trace) "
_RULE_NOT_APPLIED = (" a module with an autocast dtype rule, which its compiled code would not"
                     " apply: remove the rule (torch::autocast_module_dtype module none device),"
                     " or set it on the TorchScript module that is called")
SCRIPTED_HOLDS_RULE = _SCRIPTED + "holds" + _RULE_NOT_APPLIED
SCRIPTED_FROM_RULED = _SCRIPTED + "was made from" + _RULE_NOT_APPLIED


def _made_from_ruled(scripted):
    """Whether scripted was made from a module that has a rule (or from one
    that holds it): torch.jit.script and torch.jit.trace make new module
    objects, which share the Python model's parameters and buffers, so a
    rule on the model's module was silently not applied to the TorchScript
    one.  A copy of the ruled module is a module of scripted (or scripted
    itself) of the ruled one's class (by name: TorchScript keeps only its
    original_name) that holds the ruled one's parameters and buffers, each
    under the same name.  Sharing tensors is not enough: a module whose
    weight is tied to a ruled one's (an Embedding's weight that is a ruled
    Linear's) was refused, though called from Python it runs without the
    rule; one made from a module inside the ruled one (its fc) shares only
    some of them.  A module of the ruled one's class tied to all its
    tensors under the same names cannot be told from a copy.  A ruled
    module without parameters or buffers (a ReLU) cannot be told by this.
    A ruled module that holds scripted (a Python model with a TorchScript
    part), whose rule does apply there, names scripted's tensors under
    scripted's path in it, which no module of scripted has.  The class is
    any the ruled module has been seen with since it was ruled
    (RuleTable.class_names): its __class__ can be set after the copy was
    made."""
    names = {}          # id -> the tensor's names in scripted (tied ones: several)
    for name, tensor in (*scripted.named_parameters(remove_duplicate=False),
                         *scripted.named_buffers(remove_duplicate=False)):
        names.setdefault(id(tensor), []).append(name)
    if not names:
        return False
    for ruled_module, _ in rule_table():
        if isinstance(ruled_module, torch.jit.ScriptModule):
            continue            # its rule applies where it is called
        # Its first tensor names the places a copy could be; the rest are
        # read only where one is (most calls: nowhere).
        first_name, first = _first_tensor(ruled_module)
        if first is None:
            continue
        paths = [name[:len(name) - len(first_name)] for name in names.get(id(first), ())
                 if name == first_name or name.endswith("." + first_name)]
        if not paths:
            continue
        rest = [(name, tensor) for name, tensor in itertools.chain(
            ruled_module.named_parameters(), ruled_module.named_buffers()) if tensor is not first]
        for path in paths:
            if all(path + name in names.get(id(tensor), ()) for name, tensor in rest) \
                    and _module_at(scripted, path).original_name in _class_names(ruled_module):
                return True
    return False


def _class_names(module):
    """The class names a copy of module can have: those module has been
    seen with while ruled (RuleTable.class_names), or, where it has no
    rule now, its class's."""
    return rules.class_names(module) or {type(module).__name__}


# (rules.generation, (weak reference, class names) of each ruled module
# that is no ScriptModule, the ids of those that are): what a TorchScript
# module's call needs of the rules to know that none can concern it.  The
# class names are the rule table's own sets (RuleTable.names), which grow
# without a new generation.
_summary = (None, (), frozenset())


def _rules_summary():
    """The ruled Python modules (weakly) and the ids of the ruled
    ScriptModules, worked out again only when a module got or lost its
    rule (not for each call of a TorchScript module: every call walked
    the TorchScript module's modules and tensors, and copied each rule's
    dtypes, also where no rule could concern it).  The generation is read
    before the table, so a change made meanwhile gives another one and is
    read at the next call.  The modules' classes now are not kept (a
    module's __class__ can be set), but the sets of the class names each
    has been seen with are, which _may_hold_a_copy adds its class now to."""
    global _summary
    generation = rules.generation
    summary = _summary
    if summary[0] != generation:
        refs, scripts = [], set()
        names = rules.names.copy()
        for key, (ref, _) in rules.data.copy().items():
            module = ref()
            if isinstance(module, torch.jit.ScriptModule):
                scripts.add(id(module))
            elif module is not None:
                refs.append((ref, names.get(key) or {type(module).__name__}))
        summary = _summary = (generation, tuple(refs), frozenset(scripts))
    return summary[1:]


def _may_hold_a_copy(scripted, ruled):
    """Whether _made_from_ruled could find a copy of a ruled Python module
    in scripted: only in a module of a class it has been seen with while
    ruled, by name (its class now is added to those first)."""
    names = _original_names(scripted)
    if names is None:
        return True
    for ref, seen in ruled:
        module = ref()
        if module is None:
            continue
        name = type(module).__name__
        if name not in seen:
            seen.add(name)
        if not names.isdisjoint(seen):
            return True
    return False


# id -> (weak reference, the original_name of each module in it), per
# TorchScript module whose modules' classes cannot change.
_script_names = {}


def _original_names(scripted):
    """The class names (original_name) of scripted and the modules in it,
    or None where they cannot be read.  _made_from_ruled finds a copy of a
    ruled module only in a module of its class, so where none of these is
    the class of a ruled Python module it need not look.  They are read
    once per TorchScript module: TorchScript refuses a module put in
    another's place unless it is of the same TorchScript type (same class,
    same modules), so they stay what they were, except under an attribute
    declared as a torch.jit.interface, which takes a module of any class
    that has its methods: a TorchScript module with one is read at every
    call."""
    entry = _script_names.get(id(scripted))
    if entry is not None and entry[0]() is scripted:
        return entry[1]
    try:
        names = frozenset(module.original_name for module in scripted.modules())
        fixed = not _holds_interface(scripted._c._type())
    except Exception:           # an old-style ScriptModule without them: look each time
        return None
    if fixed:
        key = id(scripted)

        def gone(ref):
            if _script_names.get(key, (None,))[0] is ref:
                _script_names.pop(key, None)
        _script_names[key] = (weakref.ref(scripted, gone), names)
    return names


def _holds_interface(script_type):
    """Whether a TorchScript type, or one of its attributes' types at any
    depth, is a torch.jit.interface."""
    waiting, seen = [script_type], set()
    while waiting:
        held = waiting.pop()
        if isinstance(held, torch._C.InterfaceType):
            return True
        name = str(held)        # a type's Python object is made anew each time it is read
        if name not in seen:
            seen.add(name)
            waiting.extend(held.containedTypes())
    return False


def _first_tensor(module):
    """module's first parameter (else its first buffer) and its name, as
    named_parameters (named_buffers) gives it first: that generator cost
    about 6 microseconds a module, paid for every rule on every call of a
    TorchScript module (600 rules: 4.5 ms a call)."""
    for kind in ("_parameters", "_buffers"):
        waiting, seen = [("", module)], set()
        while waiting:
            prefix, held = waiting.pop()
            if id(held) in seen:
                continue
            seen.add(id(held))
            for name, tensor in getattr(held, kind).items():
                if tensor is not None:
                    return prefix + name, tensor
            # Popped last first: children in order, each before what follows it.
            waiting.extend((f"{prefix}{name}.", child)
                           for name, child in reversed(held._modules.items()) if child is not None)
    return None, None


def _module_at(scripted, path):
    """The module of scripted at path ("" or "layers.3."): ScriptModules
    have no get_submodule."""
    module = scripted
    for part in path.split(".")[:-1]:
        module = module._modules[part]
    return module


def _ruled_call(module, args, kwargs):
    dtypes = rules.get(module)
    if dtypes is None and not rules and not _traces:
        with _lock:             # the last ruled module has gone
            _update()
    if dtypes is not None:
        rules.class_names(module)       # seen with its class now: a copy may keep it
    if rules and is_compiled(module):
        inner = getattr(module, "_orig_mod", module)
        if any(m in rules for m in inner.modules()):
            raise RuntimeError(COMPILED_HOLDS_RULE)
    # TorchScript runs its submodules' forward itself, without __call__: a
    # rule on one was silently not applied.  Its own rule applies (it is
    # called from Python, through here).
    if rules and isinstance(module, torch.jit.ScriptModule):
        # Each search only where a rule could concern it (a ruled
        # ScriptModule, a ruled module of a class it holds).
        ruled, ruled_scripts = _rules_summary()
        if ruled_scripts - {id(module)} and any(
                m in rules for m in module.modules() if m is not module):
            raise RuntimeError(SCRIPTED_HOLDS_RULE)
        if _may_hold_a_copy(module, ruled) and _made_from_ruled(module):
            raise RuntimeError(SCRIPTED_FROM_RULED)
    # A copy: the table may change (on any thread) while forward runs.
    active = [(device, dtype) for device, dtype in list(dtypes.items())
              if torch.is_autocast_enabled(device)] if dtypes else []
    if not active:
        return _replaced(module, *args, **kwargs)
    replaced = [(device, torch.get_autocast_dtype(device)) for device, _ in active]
    cache_enabled = torch.is_autocast_cache_enabled()
    try:
        # A weight cast cached under one dtype would be handed out under another.
        torch.set_autocast_cache_enabled(False)
        for device, dtype in active:
            torch.set_autocast_dtype(device, dtype)
            args = cast_inputs(args, device, dtype)
            kwargs = cast_inputs(kwargs, device, dtype)
        return _replaced(module, *args, **kwargs)
    finally:
        for device, dtype in replaced:
            torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(cache_enabled)


def _update():
    """Wraps Module.__call__ when needed, puts back what it replaced when
    not (only if it is still ours: someone else may have wrapped it since,
    and then goes on calling it).  What it wraps is what is there: torch's
    own, or another library's wrapper put there after tclamp was loaded
    (rules and module paths were silently not seen under one).  torch's own
    found there while tclamp's wrapper should be in means another library
    put it back and dropped the wrapper, which then goes in again.
    Called with _lock held."""
    global _replaced, _installed
    needed = _traces > 0 or len(rules) > 0
    current = torch.nn.Module.__dict__["__call__"]
    if needed and (not _installed or current is _torch_call):
        _replaced, _installed = current, True
        torch.nn.Module.__call__ = call
    elif not needed and _installed and current is call:
        torch.nn.Module.__call__ = _replaced
        _installed = False


def set_rule(module, device_type, dtype):
    """dtype None removes the rule."""
    with _lock:
        dtypes = rules.get(module)
        if dtype is not None:
            if dtypes is None:
                dtypes = rules[module] = {}
            dtypes[device_type] = dtype
            rules.class_names(module)
        elif dtypes is not None:
            dtypes.pop(device_type, None)
            if not dtypes:
                del rules[module]
        _update()


def rule_table():
    """The rules now, as (module, {device type: dtype}) pairs.  The table is
    copied in one step (in C) before it is read: another thread's set_rule,
    or a finalizer's, would otherwise change it while it is iterated."""
    table = rules.data.copy()
    return [(module, dict(dtypes)) for ref, dtypes in table.values()
            if (module := ref()) is not None]


def trace_begin():
    """This thread's traces start seeing module paths; returns what to
    give trace_end."""
    global _traces
    outer = getattr(_here, "paths", None)
    if outer is None:
        _here.paths = []
    with _lock:
        _traces += 1
        _update()
    return outer


def trace_end(outer):
    global _traces
    if outer is None:
        _here.paths = None
    with _lock:
        _traces -= 1
        _update()


def current_path():
    paths = getattr(_here, "paths", None)
    return paths[-1][1] if paths else ""
