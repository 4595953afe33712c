"""torch::autocast_trace: which operators torch ran, and in which dtype.

The script runs in the caller's frame under a TorchDispatchMode, which sees
every operator after autocast has chosen its dtypes (so autocast's own
casts show, as aten::_to_copy), on this thread and in the backward passes
it starts.  module_calls names the module each operator ran in, from this
thread's own module calls.  Nothing is installed outside a trace: it costs
nothing then.
"""
import sys
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _bridge, module_calls
from .arguments import BodySignature, Command, Param, Plan, Signature
from .autocast import DTYPE_NAMES, INVALID_DEVICE, autocast_device
from .errors import UsageError

TCL_OK = 0
NO_TENSOR = "none"      # the dtype shown for an operator that returns no tensor

USAGE = "Usage: torch::autocast_trace ?-device_type device? ?-format format? script"
OPTIONS = Signature(
    (Param("device_type", ("-device_type", "-device"), default=None, convert=autocast_device,
           invalid=INVALID_DEVICE),
     Param("as_table", ("-format",), default=False, choices={"dict": False, "table": True},
           invalid="Invalid format. Use dict or table")),
    USAGE)


def tensors_in(value):
    """The tensors in an operator's output or arguments (lists, tuples and
    dicts looked into)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


# Set while a tracer looks at values: the operators it runs for that are its
# own, and an enclosing trace does not count them.
_looking = threading.local()


# Floating dtypes that torch.isfinite does not take, but float32 holds
# exactly, inf and NaN included.
_UPCAST = {dtype for dtype in DTYPE_NAMES
           if dtype.is_floating_point and dtype.itemsize == 1}
UNCHECKED = None


# Sparse layouts whose stored values values() gives (COO's are _values()).
_COMPRESSED = {torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc}


def has_values(tensor):
    """False for meta and fake tensors (torch.compile's, FakeTensorMode's):
    they have a shape and a dtype, but no values to hold inf or NaN."""
    fake = sys.modules.get("torch._subclasses.fake_tensor")     # not loaded: none is
    return not (tensor.is_meta or (fake is not None and isinstance(tensor, fake.FakeTensor)))


def unexpanded(tensor):
    """tensor without the repeats of its expanded dimensions (stride 0, as
    expand and broadcast_to make): along one every value is the same, so the
    first is looked at alone.  torch.isfinite made its answer at the full
    size: z.expand(2**31) of one float took 24 s and 14 GB to check."""
    if tensor.layout != torch.strided or tensor.is_nested:
        return tensor
    strides = tensor.stride()
    if 0 not in strides:
        return tensor
    return tensor[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in strides)]


def beyond_storage(tensor):
    """Whether a plain tensor's elements reach past the memory its storage
    has: one freed by untyped_storage().resize_(0), as FSDP frees
    parameters, whose views ops still make.  torch.isfinite read the freed
    memory (the process died, a segmentation fault)."""
    if (type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.layout != torch.strided
            or tensor.is_nested or tensor.numel() == 0):
        return False
    last = tensor.storage_offset() + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))
    return (last + 1) * tensor.element_size() > tensor.untyped_storage().nbytes()


def holds_nonfinite(tensor):
    """True or False, or UNCHECKED for an output whose values torch.isfinite
    cannot look at (a nested tensor's, say), or may not: reading a CUDA
    tensor's values waits for the GPU, which a CUDA graph capture forbids
    (the capture would fail)."""
    if not (tensor.is_floating_point() or tensor.is_complex()) or not has_values(tensor):
        return False
    # A zero tensor (aten::_efficientzerotensor, as forward-mode AD makes:
    # torch.func.jvp, jacfwd) has no memory: inside a dispatch mode its
    # ZeroTensor handling is off, and torch.isfinite read through a null
    # pointer (the process died, a segmentation fault).  It holds zeros.
    if tensor._is_zerotensor():
        return False
    if tensor.is_cuda and torch.cuda.is_current_stream_capturing():
        return UNCHECKED
    _looking.active = True
    try:
        # A sparse tensor's inf or NaN is among its stored values, which
        # torch.isfinite takes; it refuses the sparse tensor itself.
        if tensor.layout == torch.sparse_coo:
            tensor = tensor._values()
        elif tensor.layout in _COMPRESSED:
            tensor = tensor.values()
        tensor = unexpanded(tensor)
        if beyond_storage(tensor):
            return UNCHECKED
        if tensor.dtype in _UPCAST:
            tensor = tensor.float()
        return not bool(torch.isfinite(tensor).all())
    except NotImplementedError:
        return UNCHECKED
    except TypeError:
        # A tensor subclass that implements no isfinite (its
        # __torch_dispatch__ returned NotImplemented: torch.masked's
        # MaskedTensor) failed the whole trace.
        if type(tensor) in (torch.Tensor, torch.nn.Parameter):
            raise
        return UNCHECKED
    finally:
        _looking.active = False


class OperatorTrace(TorchDispatchMode):
    """Counts (operator, output dtype) pairs, and those whose floating
    output held inf or NaN."""

    def __init__(self, device_type):
        super().__init__()
        self.device_type = device_type
        self.counts = {}            # (op, dtype) -> calls, in first-seen order
        self.nonfinite = {}         # (op, dtype) -> calls whose output held inf/NaN
        self.by_module = {}         # (module path, op, dtype) -> calls
        self.unchecked = {}         # (op, dtype) -> calls with an output not looked into
        self.first_nonfinite = {}
        self.failure = None         # the tracer's first failure, as its Tcl error
        self.outer_paths = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        output = func(*args, **(kwargs or {}))
        if self.failure is None and not getattr(_looking, "active", False):
            try:
                self.record(func._schema.name, output, args)
            except Exception as error:      # reported when the script has ended
                # Not error itself: its traceback holds the operator's
                # tensors, and this tracer (a cycle) through record's frame.
                self.failure = tracer_failed(error)
        return output

    def on_device(self, tensors):
        return [t for t in tensors
                if self.device_type is None or t.device.type == self.device_type]

    def record(self, op, output, args):
        outputs = list(tensors_in(output))
        if outputs:
            tensors = self.on_device(outputs)
            dtypes = dict.fromkeys(DTYPE_NAMES[t.dtype] for t in tensors)
        else:
            # In-place foreach operators and .item() return no tensor: they
            # count where their arguments live.
            dtypes = dict.fromkeys([NO_TENSOR] if self.on_device(tensors_in(args)) else [])
            tensors = []
        module = module_calls.current_path()
        for dtype in dtypes:
            key = (op, dtype)
            self.counts[key] = self.counts.get(key, 0) + 1
            if module:
                self.by_module[(module, *key)] = self.by_module.get((module, *key), 0) + 1
            found = [holds_nonfinite(t) for t in tensors if DTYPE_NAMES[t.dtype] == dtype]
            if UNCHECKED in found:
                self.unchecked[key] = self.unchecked.get(key, 0) + 1
            if True in found:
                self.nonfinite[key] = self.nonfinite.get(key, 0) + 1
                if not self.first_nonfinite:
                    self.first_nonfinite = {"op": op, "dtype": dtype, "module": module}

    def __enter__(self):
        self.outer_paths = module_calls.trace_begin()
        try:
            return super().__enter__()
        except BaseException:
            module_calls.trace_end(self.outer_paths)
            raise

    def __exit__(self, *exc):
        """Takes this tracer, and only it, off the thread's dispatch stack.
        A mode the script entered and left on stays on (its own exit pops
        the top); the stack not as the trace left it is the tracer's failure."""
        try:
            stack = [torch._C._get_dispatch_stack_at(i)
                     for i in range(torch._C._len_torch_dispatch_stack())]
            if stack and stack[-1] is self:
                return super().__exit__(*exc)
            if self not in stack:
                raise RuntimeError("the script took the tracer off the dispatch stack")
            above = stack[stack.index(self) + 1:]
            for _ in above:
                torch._C._pop_torch_dispatch_stack(None)
            torch._C._pop_torch_dispatch_stack(None)
            for mode in above:
                torch._C._push_on_torch_dispatch_stack(mode)
            raise RuntimeError("the script left a dispatch mode on ("
                               + ", ".join(type(mode).__name__ for mode in above)
                               + "): the trace took its own tracer off from under it")
        finally:
            module_calls.trace_end(self.outer_paths)

    def result(self):
        def rows(counts):
            return [{"op": op, "dtype": dtype, "count": n} for (op, dtype), n in counts.items()]
        return {"ops": rows(self.counts),
                "nonfinite": rows(self.nonfinite),
                "modules": [{"module": module, "op": op, "dtype": dtype, "count": n}
                            for (module, op, dtype), n in self.by_module.items()],
                "first_nonfinite": self.first_nonfinite,
                "unchecked": rows(self.unchecked)}


def table(trace):
    """The trace as aligned columns, one operator and dtype a row, in the
    order they first ran (the shape of torch.profiler's tables)."""
    nonfinite = {(row["op"], row["dtype"]): row["count"] for row in trace["nonfinite"]}
    header = ("operator", "dtype", "count", "nonfinite")
    rows = [(row["op"], row["dtype"], str(row["count"]),
             str(nonfinite.get((row["op"], row["dtype"]), 0))) for row in trace["ops"]]
    widths = [max(len(cells[i]) for cells in [header, *rows]) for i in range(len(header))]

    def line(cells):
        return (f"{cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}  "
                f"{cells[2]:>{widths[2]}}  {cells[3]:>{widths[3]}}").rstrip()
    lines = [line(header), line(["-" * w for w in widths]), *map(line, rows)]
    first = trace["first_nonfinite"]
    if first:
        where = f" in {first['module']}" if first["module"] else ""
        lines.append(f"first nonfinite output: {first['op']} ({first['dtype']}){where}")
    for row in trace["unchecked"]:
        lines.append(f"not checked for inf or NaN: {row['op']} ({row['dtype']}),"
                     f" {row['count']} of its calls")
    return "\n".join(lines)


def run_trace(script, device_type, as_table):
    """The script's own outcome when it does not end normally; else the trace."""
    tracer = OperatorTrace(device_type)
    try:
        tracer.__enter__()
    except Exception as error:
        raise tracer_failed(error) from None
    try:
        outcome = _bridge.current().evaluate(script)
    finally:
        try:
            tracer.__exit__(None, None, None)
        except Exception as error:
            tracer.failure = tracer.failure or tracer_failed(error)
    if outcome.code != TCL_OK:
        return outcome
    if tracer.failure is not None:
        raise tracer.failure
    trace = tracer.result()
    return table(trace) if as_table else trace


def tracer_failed(error):
    text = str(error)
    return UsageError("TRACE_FAILED", f"The tracer failed: {type(error).__name__}"
                                      + (f": {text}" if text else ""), type(error).__name__)


def plan_trace(device_type, as_table):
    """The script is the command's Script, which the bridge gives run_trace."""
    return Plan(((run_trace, (device_type, as_table)),), None, True)


COMMANDS = (
    Command("autocast_trace", "autocastTrace", BodySignature(OPTIONS), plan_trace),
)
