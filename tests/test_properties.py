"""Property tests of the argument parser: random argument lists against an
oracle written from the documented rules (spec/anchor-facts), not from the
parser.  Every call must succeed or fail exactly as the oracle says, with
the documented message, and a failed call must change nothing."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tclamp
from tclamp import TclError

DEVICES = ("cuda", "cpu")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
INVALID_PARAMETERS = ("Invalid parameters. Device type: cuda or cpu. "
                      "Dtype: float16, bfloat16, or float32")
INVALID_DEVICE = "Invalid device type. Use cuda or cpu"
DEVICE_FLAGS = {"-device_type": "device", "-device": "device"}
DTYPE_FLAGS = {"-dtype": "dtype", "-data_type": "dtype"}

# name: (positional names, flags in documented order, usage, invalid message)
SPECS = {
    "autocast_enable": (("device", "dtype"), {**DEVICE_FLAGS, **DTYPE_FLAGS},
                        "Usage: torch::autocast_enable [device_type] [dtype]", INVALID_PARAMETERS),
    "autocast_disable": (("device",), DEVICE_FLAGS,
                         "Usage: torch::autocast_disable [device_type]", INVALID_DEVICE),
    "autocast_is_enabled": (("device",), DEVICE_FLAGS,
                            "Usage: torch::autocast_is_enabled [device_type]", INVALID_DEVICE),
    "autocast_get_dtype": (("device",), DEVICE_FLAGS,
                           "Usage: torch::autocast_get_dtype [device_type]", INVALID_DEVICE),
    "autocast_set_dtype": (("dtype", "device"), {**DTYPE_FLAGS, **DEVICE_FLAGS},
                           "Usage: torch::autocast_set_dtype dtype [device_type]", INVALID_PARAMETERS),
}
CAMEL = {"autocast_enable": "autocastEnable", "autocast_disable": "autocastDisable",
         "autocast_is_enabled": "autocastIsEnabled", "autocast_get_dtype": "autocastGetDtype",
         "autocast_set_dtype": "autocastSetDtype"}


def is_number(word):
    """A negative number is a value, not a flag: as Tcl reads numbers."""
    return tclamp.tcl.call("string", "is", "double", "-strict", word) == "1"


PRIMARY_FLAG = {"device": "-device_type", "dtype": "-dtype"}


def oracle(command, args, state):
    """(result, new state) or ("error", (message, errorCode words)) per the
    documented rules: the errorCode names the option as written, or a
    positional argument's first flag, and the offending value."""
    positional, flags, usage, invalid = SPECS[command]
    values, written = {}, {}
    named = bool(args) and args[0].startswith("-") and not is_number(args[0])
    if named:
        for i in range(0, len(args), 2):
            if i + 1 == len(args):
                return "error", ("Missing value for parameter",
                                 ["TCLAMP", "MISSING_VALUE", args[i]])
            if args[i] not in flags:
                return "error", (f"Unknown parameter: {args[i]}. Valid parameters are: "
                                 + ", ".join(flags),
                                 ["TCLAMP", "UNKNOWN_OPTION", args[i], args[i + 1]])
            values[flags[args[i]]] = args[i + 1]
            written[flags[args[i]]] = args[i]
    else:
        if len(args) > len(positional):
            return "error", (usage, ["TCLAMP", "USAGE"])
        values = dict(zip(positional, args))
    if command == "autocast_set_dtype" and not values.get("dtype"):
        return "error", ("Missing required dtype parameter. Valid dtypes: float16, bfloat16, float32"
                         if named else "Missing required dtype parameter",
                         ["TCLAMP", "MISSING_ARGUMENT", "-dtype"])
    device = values.get("device", "cuda")
    dtype = values.get("dtype")
    bad = {"device": device not in DEVICES, "dtype": dtype is not None and dtype not in DTYPES}
    for name in positional:             # the declared order
        if bad[name]:
            return "error", (invalid, ["TCLAMP", "INVALID_VALUE",
                                       written.get(name, PRIMARY_FLAG[name]), values[name]])
    state = dict(state)
    enabled, current = state[device]
    if command == "autocast_enable":
        state[device] = (True, dtype or current)
        return "autocast enabled", state
    if command == "autocast_disable":
        state[device] = (False, current)
        return "autocast disabled", state
    if command == "autocast_set_dtype":
        state[device] = (enabled, dtype)
        return "autocast dtype set", state
    if command == "autocast_is_enabled":
        return str(int(enabled)), state
    return current, state


def torch_state():
    names = {v: k for k, v in DTYPES.items()}
    return {d: (torch.is_autocast_enabled(d), names[torch.get_autocast_dtype(d)]) for d in DEVICES}


WORDS = st.one_of(
    st.sampled_from(["cuda", "cpu", "float16", "bfloat16", "float32", "", "-", "--", "CPU",
                     "float64", "-device", "-device_type", "-dtype", "-data_type", "-1", "-2.5",
                     "{", "}", "[", "\\", "\"", "$x", "a b", "\0", "caf\u00e9", "\U0001F600"]),
    st.text(max_size=12),
    st.text(min_size=200, max_size=400),
    st.builds(lambda s: "-" + s, st.text(max_size=8)),
)


@pytest.fixture(scope="module")
def interp():
    return tclamp.Interp()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(sorted(SPECS)), camel=st.booleans(),
       args=st.lists(WORDS, max_size=5),
       start=st.tuples(st.booleans(), st.sampled_from(sorted(DTYPES)),
                       st.booleans(), st.sampled_from(sorted(DTYPES))))
def test_commands_match_the_oracle(interp, command, camel, args, start):
    torch.set_autocast_enabled("cuda", start[0])
    torch.set_autocast_dtype("cuda", DTYPES[start[1]])
    torch.set_autocast_enabled("cpu", start[2])
    torch.set_autocast_dtype("cpu", DTYPES[start[3]])
    before = torch_state()
    expected, detail = oracle(command, args, before)
    name = f"::torch::{CAMEL[command] if camel else command}"
    try:
        result = interp.call(name, *args)
    except TclError as error:
        assert expected == "error", f"{name} {args!r} failed: {error.result}"
        message, code = detail
        assert error.result == message
        assert error.errorcode == interp.call("list", *code)
        assert torch_state() == before
    else:
        assert expected != "error", f"{name} {args!r} should fail with {detail!r}"
        assert result == expected
        assert torch_state() == detail


# How many words follow the kind in a usage error's errorCode.
DETAILS = {"USAGE": 0, "MISSING_VALUE": 1, "MISSING_ARGUMENT": 1, "INVALID_VALUE": 2,
           "INVALID_HANDLE": 2, "UNKNOWN_OPTION": 2, "MIXED_ARGUMENTS": 1}


FP32_SETTINGS = [("generic", "all"), ("cuda", "all"), ("cuda", "matmul"), ("cuda", "conv"),
                 ("cuda", "rnn"), ("mkldnn", "all"), ("mkldnn", "matmul"), ("mkldnn", "conv"),
                 ("mkldnn", "rnn")]


FP32_START = {pair: torch._C._get_fp32_precision_getter(*pair) for pair in FP32_SETTINGS}


def fp32_precisions():
    return tuple(torch._C._get_fp32_precision_getter(*pair) for pair in FP32_SETTINGS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(["autocast", "autocast_status", "autocast_clear_cache",
                                "set_float32_matmul_precision", "get_float32_matmul_precision",
                                "set_fp32_precision", "get_fp32_precision",
                                "grad_scaler_new", "grad_scaler_get_scale", "grad_scaler_step",
                                "grad_scaler_update", "grad_scaler_state_dict",
                                "grad_scaler_load_state_dict", "grad_scaler_free"]),
       args=st.lists(WORDS, max_size=6))
def test_other_commands_fail_cleanly(interp, command, args):
    """Any argument list: a result, or a TCLAMP usage error that changes
    nothing (the block's body here only sets a variable), whose errorCode
    has the documented shape: an option the command has, or a word of the
    call, and the value as given."""
    before = (torch_state(), torch.is_autocast_cache_enabled(),
              torch.get_float32_matmul_precision(), fp32_precisions())
    interp.call("set", "ran", 0)
    if command == "autocast":
        args = [*args, "set ran 1"]
    try:
        interp.call(f"::torch::{command}", *args)
    except TclError as error:
        code = [interp.call("lindex", error.errorcode, i)
                for i in range(int(interp.call("llength", error.errorcode)))]
        assert code[0] == "TCLAMP", (args, error.result, error.errorcode)
        assert len(code) == 2 + DETAILS[code[1]], code
        if code[1] in ("MISSING_VALUE", "UNKNOWN_OPTION", "MIXED_ARGUMENTS"):
            assert code[2] in args
        elif code[1] != "USAGE":
            assert code[2].startswith("-")
        assert (torch_state(), torch.is_autocast_cache_enabled(),
                torch.get_float32_matmul_precision(), fp32_precisions()) == before
        assert interp.eval("set ran") == "0"
    finally:
        torch.set_float32_matmul_precision("highest")
        for pair, precision in FP32_START.items():
            torch._C._set_fp32_precision_setter(*pair, precision)
        interp.eval("foreach h [info commands ::py::obj*] {py release $h}")


# Words near Tcl's number, boolean and list syntax, and any text.
WORD_PIECES = st.sampled_from(["-", "+", "0", "1", "7", "9", "x", "o", "b", "e", "E", ".", "_",
                               " ", "\t", "\n", "{", "}", '"', "\\", "nan", "inf", "yes", "on",
                               "t", "F", "\u0661", "\uff11", "a"])
WORDS = st.lists(WORD_PIECES, max_size=8).map("".join) | st.text(max_size=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(word=WORDS)
def test_read_word_is_tcls_own_reading(interp, word):
    """Interp.read_word, which the parser uses instead of running Tcl's
    commands, reads a word as those commands do, and fails as they do."""
    def outcome(read, *args, **kw):
        try:
            return read(*args, **kw)
        except ValueError as error:
            return ("error", str(error))
        except TclError as error:
            return ("error", error.result)

    for kind in (int, float):       # repr: NaN is a number here, and no NaN equals another
        assert (repr(outcome(interp.read_word, word, kind))
                == repr(outcome(interp.call, "string", "cat", word, result=kind))), kind
    truth = outcome(interp.call, "::tcl::mathop::!", word, result=int)
    read = outcome(interp.read_word, word, bool)
    assert read == (truth == 0) if isinstance(truth, int) else read[0] == "error"
    assert (outcome(interp.read_word, word, list)
            == outcome(interp.call, "lrange", word, 0, "end", result=list))
    pairs = outcome(interp.call, "dict", "get", word, result=list)
    expected = dict(zip(pairs[0::2], pairs[1::2])) if isinstance(pairs, list) else pairs
    assert outcome(interp.read_word, word, dict) == expected
