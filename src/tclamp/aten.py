"""ATen's own autocast functions, for the bridge to call without Python.

torch.set_autocast_dtype, set_autocast_enabled, clear_autocast_cache,
is_autocast_enabled, get_autocast_dtype and the cache flag's and nesting
count's functions are Python bindings of at::autocast functions: each call
parses its arguments and needs the GIL, which costs several times the
thread-local read or write it makes.  A torch:: command's remembered plan
made of these calls only, or torch::autocast's block (run_block), also
carries them as a program (`program`), which the bridge runs from C with
no Python at all (aten_programs.c).

The functions are looked up by their C++ names in the libtorch that
`import torch` loaded, and checked against torch's bindings before they are
used: each must read back what the other wrote, on this thread, for both
devices.  Anything unexpected (another torch, another platform, a
function missing) leaves the bridge on the Python path, which means the
same.
"""
import ctypes
import os

import torch

from . import _bridge
from .arguments import Plan
from .autocast import DTYPE_NAMES, DTYPES, TORCH, run_block

# ctypes for the codes of aten_ops.h's table.
CTYPES = {"": None, "b": ctypes.c_int8, "?": ctypes.c_bool, "i": ctypes.c_int}
# The ops in code order, as the bridge's table (aten_ops.h) gives them:
# torch's binding, the C++ name of the function it calls, and that
# function's result and argument types.
OPS = tuple((getattr(TORCH, binding), symbol, CTYPES[result], tuple(CTYPES[c] for c in args))
            for binding, symbol, result, args in _bridge.ATEN_OPS)
OP_CODES = {binding: code for code, (binding, *_) in enumerate(OPS)}
SET_DTYPE, SET_ENABLED = OP_CODES[TORCH.set_autocast_dtype], OP_CODES[TORCH.set_autocast_enabled]
SET_CACHE_ENABLED = OP_CODES[TORCH.set_autocast_cache_enabled]
# torch::autocast's program ends with BODY, which is no function: the
# bridge runs the command's body there (run_block in aten_programs.c).
BODY = len(OPS)
# c10::DeviceType's codes: CPU and CUDA are its first two, and the check
# below confirms them.  Other devices' steps stay in Python.
DEVICE_CODES = {"cpu": 0, "cuda": 1}


def find_functions():
    """The C functions of OPS, called through ctypes, or None."""
    try:
        library = ctypes.CDLL("libtorch_cpu" + (".dylib" if os.uname().sysname == "Darwin"
                                                else ".so"),
                              mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        functions = []
        for _, symbol, restype, argtypes in OPS:
            function = getattr(library, symbol)
            function.restype, function.argtypes = restype, argtypes
            functions.append(function)
        return functions
    except (OSError, AttributeError):
        return None


def read_dtype_codes(get_dtype):
    """ATen's code for every torch dtype, read by setting each one through
    torch's binding and reading it back through ATen's function."""
    codes = {}
    saved = TORCH.get_autocast_dtype("cpu")
    try:
        for dtype in DTYPE_NAMES:
            try:
                TORCH.set_autocast_dtype("cpu", dtype)
            except (RuntimeError, TypeError):
                continue
            codes[dtype] = get_dtype(DEVICE_CODES["cpu"])
    finally:
        TORCH.set_autocast_dtype("cpu", saved)
    return codes


def agrees(functions, dtype_codes):
    """Whether ATen's functions and torch's bindings see the same state
    (this thread's, restored afterwards)."""
    (set_dtype, set_enabled, _, is_enabled, get_dtype,
     is_cache_enabled, set_cache_enabled, increment_nesting, decrement_nesting) = functions
    saved = {d: (TORCH.is_autocast_enabled(d), TORCH.get_autocast_dtype(d)) for d in DEVICE_CODES}
    saved_cache = TORCH.is_autocast_cache_enabled()
    try:
        for on in (True, False):
            set_cache_enabled(on)
            if TORCH.is_autocast_cache_enabled() != on:
                return False
            TORCH.set_autocast_cache_enabled(not on)
            if is_cache_enabled() == on:
                return False
        nesting = TORCH.autocast_increment_nesting()
        counts = (increment_nesting(), TORCH.autocast_decrement_nesting(), decrement_nesting())
        if counts != (nesting + 1, nesting, nesting - 1):
            return False
        for device, code in DEVICE_CODES.items():
            other = next(d for d in DEVICE_CODES if d != device)
            for on in (True, False):
                set_enabled(code, on)
                TORCH.set_autocast_enabled(other, not on)
                if TORCH.is_autocast_enabled(device) != on or is_enabled(code) != on:
                    return False
            for dtype in (torch.float16, torch.bfloat16):
                set_dtype(code, dtype_codes[dtype])
                if TORCH.get_autocast_dtype(device) != dtype:
                    return False
                TORCH.set_autocast_dtype(device, torch.float32)
                if get_dtype(code) != dtype_codes[torch.float32]:
                    return False
        return True
    finally:
        for device, (enabled, dtype) in saved.items():
            TORCH.set_autocast_enabled(device, enabled)
            TORCH.set_autocast_dtype(device, dtype)
        TORCH.set_autocast_cache_enabled(saved_cache)


def start():
    """The functions' addresses and the dtype names by code when the
    functions check out, else None; and the dtype codes (or None)."""
    functions = find_functions()
    if functions is None:
        return None, None
    codes = read_dtype_codes(functions[4])
    names = {code: DTYPE_NAMES[dtype] for dtype, code in codes.items()}
    if not set(DTYPES.values()) <= codes.keys() \
            or len(names) != len(codes) or not 0 <= min(names) <= max(names) < 64 \
            or not agrees(functions, codes):
        return None, None
    return ((tuple(ctypes.cast(f, ctypes.c_void_p).value for f in functions),
             tuple(names.get(code) for code in range(max(names) + 1))), codes)


FOUND, DTYPE_CODES = start()


def use(on):
    """Turns the ATen path on (where it was found) or off, for the whole
    process: a benchmark compares the two.  Whether it is on now."""
    return _bridge.use_aten(*FOUND) if on and FOUND else _bridge.use_aten(None)


use(True)


def block_program(device_type, dtype, enabled, cache_enabled):
    """torch::autocast's block as a program: run_block's entry as ATen
    calls, then the body; the bridge saves and restores the state around
    it as run_block does."""
    entry = ((TORCH.set_autocast_enabled, (device_type, enabled)),)
    if dtype is not None:
        entry += ((TORCH.set_autocast_dtype, (device_type, dtype)),)
    entry += ((TORCH.set_autocast_cache_enabled, (cache_enabled,)),
              (TORCH.autocast_increment_nesting, ()))
    calls = program(entry)
    return calls + bytes((BODY, DEVICE_CODES[device_type], 0)) if calls else None


def program(steps):
    """The steps as ATen calls (bytes of op, device, argument), or None
    when one of them is not such a call."""
    if DTYPE_CODES is None:
        return None
    if len(steps) == 1 and steps[0][0] is run_block:
        return block_program(*steps[0][1])
    calls = bytearray()
    for function, args in steps:
        op = next((code for binding, code in OP_CODES.items() if binding is function), None)
        device = DEVICE_CODES.get(args[0]) if args and isinstance(args[0], str) else 0
        argument = 0
        if op == SET_DTYPE:
            argument = DTYPE_CODES.get(args[1]) if isinstance(args[1], torch.dtype) else None
        elif op == SET_ENABLED:
            argument = int(args[1]) if isinstance(args[1], bool) else None
        elif op == SET_CACHE_ENABLED:
            argument = int(args[0]) if isinstance(args[0], bool) else None
        if None in (op, device, argument):
            return None
        calls += bytes((op, device, argument))
    return bytes(calls) or None


def with_programs(parser):
    """The parser, with each remembered plan's program added (a plan that
    is not remembered runs once: its steps serve)."""
    def plan(*args):
        made = parser(*args)
        steps, result, words_only = made[:3]    # a Plan, or a tuple in its order
        return Plan(steps, result, True, program(steps)) if words_only else made
    return plan
