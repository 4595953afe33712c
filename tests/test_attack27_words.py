"""Attacks on issue 27's change (04e90e4): Signature.parse's shortcut for
positional words must report exactly what the full rules (parse_words)
reported before it, and a command's Script must never reach Tcl from a
thread other than its interpreter's.

The expected values in WORDS were read from the parent commit (2585ba6),
which parsed every call with the full rules."""
import subprocess
import sys
import textwrap

import pytest

import tclamp

SETUP = r"""py exec {
import torch
t = torch.ones(1); t2 = torch.ones(2)
meta = torch.ones(1, device="meta")
c = torch.tensor(1 + 1j)
s = torch.amp.GradScaler("cpu"); sd = torch.amp.GradScaler("cpu", enabled=False)
net = torch.nn.Linear(2, 1); o = torch.optim.SGD(net.parameters(), lr=0.1)
}
set t [py eval t]; set t2 [py eval t2]; set meta [py eval meta]; set c [py eval c]
set s [py eval s]; set sd [py eval sd]; set o [py eval o]; set m [py eval net]
"""
OUTCOME = ('list [catch $cmd __m __o] $__m'
           ' [expr {[dict exists $__o -errorcode] ? [dict get $__o -errorcode] : "-"}]')


@pytest.fixture(scope="module")
def interp():
    made = tclamp.Interp()
    made.eval(SETUP)
    yield made
    made.delete()


def outcome(interp, command):
    interp.call("set", "cmd", command)
    code, message, errorcode = interp.eval(OUTCOME, result=list)
    return code, message, errorcode


# (command, (code, message, errorCode)) as the parent commit gave them.
WORDS = [
    ('torch::autocast_enable ""',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-device_type', ''])),
    ('torch::autocast_enable cpu ""',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-dtype', ''])),
    ('torch::autocast_enable "" float16',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-device_type', ''])),
    ('torch::autocast_enable -',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-'])),
    ('torch::autocast_enable cpu -x',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-dtype', '-x'])),
    ('torch::autocast_enable -1',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-device_type', '-1'])),
    ('torch::autocast_enable cpu float64',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-dtype', 'float64'])),
    ('torch::autocast_enable cpu float16 extra',
     (1, 'Usage: torch::autocast_enable [device_type] [dtype]', ['TCLAMP', 'USAGE'])),
    ('torch::autocast_enable $t',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-device_type', '<Tensor>'])),
    ('torch::autocast_enable cpu $t',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-dtype', '<Tensor>'])),
    ('torch::autocastEnable -device_type cpu -dtype',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-dtype'])),
    ('torch::autocast_disable ""',
     (1, 'Invalid device type. Use cuda or cpu', ['TCLAMP', 'INVALID_VALUE', '-device_type', ''])),
    ('torch::autocast_disable -5',
     (1, 'Invalid device type. Use cuda or cpu', ['TCLAMP', 'INVALID_VALUE', '-device_type', '-5'])),
    ('torch::autocast_disable cuda:0',
     (1, 'Invalid device type. Use cuda or cpu', ['TCLAMP', 'INVALID_VALUE', '-device_type', 'cuda:0'])),
    ('torch::autocast_disable cpu cpu',
     (1, 'Usage: torch::autocast_disable [device_type]', ['TCLAMP', 'USAGE'])),
    ('torch::autocast_set_dtype',
     (1, 'Missing required dtype parameter', ['TCLAMP', 'MISSING_ARGUMENT', '-dtype'])),
    ('torch::autocast_set_dtype ""',
     (1, 'Missing required dtype parameter', ['TCLAMP', 'MISSING_ARGUMENT', '-dtype'])),
    ('torch::autocast_set_dtype "" cpu',
     (1, 'Missing required dtype parameter', ['TCLAMP', 'MISSING_ARGUMENT', '-dtype'])),
    ('torch::autocast_set_dtype float16 ""',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-device_type', ''])),
    ('torch::autocast_set_dtype float16 -device_type',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-device_type', '-device_type'])),
    ('torch::autocast_set_dtype -1 cpu',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-dtype', '-1'])),
    ('torch::autocast_set_dtype $t2 cpu',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-dtype', '<Tensor>'])),
    ('torch::autocast_set_dtype -dtype',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-dtype'])),
    ('torch::autocast_get_dtype -device',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-device'])),
    ('torch::autocast_get_dtype bogus',
     (1, 'Invalid device type. Use cuda or cpu', ['TCLAMP', 'INVALID_VALUE', '-device_type', 'bogus'])),
    ('torch::autocast_status ""',
     (1, 'Invalid device type. Use cuda or cpu', ['TCLAMP', 'INVALID_VALUE', '-device_type', ''])),
    ('torch::autocast_status cpu -x',
     (1, 'Named argument -x after positional ones: give every argument as a -name value pair, or every one positionally', ['TCLAMP', 'MIXED_ARGUMENTS', '-x'])),
    ('torch::autocast_status -x cpu',
     (1, 'Unknown parameter: -x. Valid parameters are: -device_type, -device', ['TCLAMP', 'UNKNOWN_OPTION', '-x', 'cpu'])),
    ('torch::autocast_status $t',
     (1, 'Invalid device type. Use cuda or cpu', ['TCLAMP', 'INVALID_VALUE', '-device_type', '<Tensor>'])),
    ('torch::autocast_clear_cache x',
     (1, 'Usage: torch::autocast_clear_cache', ['TCLAMP', 'USAGE'])),
    ('torch::autocast_clear_cache ""',
     (1, 'Usage: torch::autocast_clear_cache', ['TCLAMP', 'USAGE'])),
    ('torch::grad_scaler_new ""',
     (1, 'Invalid init_scale: must be a positive number', ['TCLAMP', 'INVALID_VALUE', '-init_scale', ''])),
    ('torch::grad_scaler_new -1',
     (1, 'Invalid init_scale: must be a positive number', ['TCLAMP', 'INVALID_VALUE', '-init_scale', '-1'])),
    ('torch::grad_scaler_new 0',
     (1, 'Invalid init_scale: must be a positive number', ['TCLAMP', 'INVALID_VALUE', '-init_scale', '0'])),
    ('torch::grad_scaler_new 1 1',
     (1, 'Invalid growth_factor: must be a number greater than 1', ['TCLAMP', 'INVALID_VALUE', '-growth_factor', '1'])),
    ('torch::grad_scaler_new 1 2 1',
     (1, 'Invalid backoff_factor: must be a number between 0 and 1', ['TCLAMP', 'INVALID_VALUE', '-backoff_factor', '1'])),
    ('torch::grad_scaler_new 1 2 0.5 0',
     (1, 'Invalid growth_interval: must be a positive integer', ['TCLAMP', 'INVALID_VALUE', '-growth_interval', '0'])),
    ('torch::grad_scaler_new 1 2 0.5 1.5',
     (1, 'Invalid growth_interval: must be a positive integer', ['TCLAMP', 'INVALID_VALUE', '-growth_interval', '1.5'])),
    ('torch::grad_scaler_new 1 2 0.5 10 extra',
     (1, 'Usage: torch::grad_scaler_new [init_scale] [growth_factor] [backoff_factor] [growth_interval]', ['TCLAMP', 'USAGE'])),
    ('torch::grad_scaler_new 1 -device cpu',
     (1, 'Named argument -device after positional ones: give every argument as a -name value pair, or every one positionally', ['TCLAMP', 'MIXED_ARGUMENTS', '-device'])),
    ('torch::grad_scaler_new -device cpu 1',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '1'])),
    ('torch::grad_scaler_new -device',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-device'])),
    ('torch::grad_scaler_new -enabled maybe',
     (1, 'Invalid boolean for -enabled', ['TCLAMP', 'INVALID_VALUE', '-enabled', 'maybe'])),
    ('torch::grad_scaler_new $t2',
     (1, 'Invalid init_scale: must be a positive number', ['TCLAMP', 'INVALID_VALUE', '-init_scale', '<Tensor>'])),
    ('torch::grad_scaler_new $t2 -enabled 0',
     (1, 'Named argument -enabled after positional ones: give every argument as a -name value pair, or every one positionally', ['TCLAMP', 'MIXED_ARGUMENTS', '-enabled'])),
    ('torch::grad_scaler_new 1 2 $t2',
     (1, 'Invalid backoff_factor: must be a number between 0 and 1', ['TCLAMP', 'INVALID_VALUE', '-backoff_factor', '<Tensor>'])),
    ('torch::grad_scaler_new nan',
     (1, 'Invalid init_scale: must be a positive number', ['TCLAMP', 'INVALID_VALUE', '-init_scale', 'nan'])),
    ('torch::grad_scaler_new 1e400',
     (1, 'Invalid init_scale: must be at most 3.4028234663852886e+38', ['TCLAMP', 'INVALID_VALUE', '-init_scale', '1e400'])),
    ('torch::grad_scaler_scale',
     (1, 'Missing required parameter: scaler, tensor', ['TCLAMP', 'MISSING_ARGUMENT', '-scaler'])),
    ('torch::grad_scaler_scale $s',
     (1, 'Missing required parameter: scaler, tensor', ['TCLAMP', 'MISSING_ARGUMENT', '-tensor'])),
    ('torch::grad_scaler_scale $s ""',
     (1, 'Missing required parameter: scaler, tensor', ['TCLAMP', 'MISSING_ARGUMENT', '-tensor'])),
    ('torch::grad_scaler_scale "" $t',
     (1, 'Missing required parameter: scaler, tensor', ['TCLAMP', 'MISSING_ARGUMENT', '-scaler'])),
    ('torch::grad_scaler_scale $t $s',
     (1, 'Invalid scaler: expected a scaler handle, got a Tensor', ['TCLAMP', 'INVALID_HANDLE', '-scaler', '<Tensor>'])),
    ('torch::grad_scaler_scale $s $o',
     (1, 'Invalid tensor: expected a tensor handle, got a SGD', ['TCLAMP', 'INVALID_HANDLE', '-tensor', '<SGD>'])),
    ('torch::grad_scaler_scale $s $t -x',
     (1, 'Named argument -x after positional ones: give every argument as a -name value pair, or every one positionally', ['TCLAMP', 'MIXED_ARGUMENTS', '-x'])),
    ('torch::grad_scaler_scale $s -tensor $t',
     (1, 'Named argument -tensor after positional ones: give every argument as a -name value pair, or every one positionally', ['TCLAMP', 'MIXED_ARGUMENTS', '-tensor'])),
    ('torch::grad_scaler_scale -scaler $s',
     (1, 'Missing required parameter: scaler, tensor', ['TCLAMP', 'MISSING_ARGUMENT', '-tensor'])),
    ('torch::grad_scaler_scale -scaler $s -tensor',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-tensor'])),
    ('torch::grad_scaler_scale $s $t $t',
     (1, 'Usage: torch::grad_scaler_scale scaler tensor', ['TCLAMP', 'USAGE'])),
    ('torch::grad_scaler_scale nothing $t',
     (1, 'Invalid scaler: expected a scaler handle, got "nothing"', ['TCLAMP', 'INVALID_HANDLE', '-scaler', 'nothing'])),
    ('torch::grad_scaler_scale ::py::obj999999 $t',
     (1, 'ValueError: py object handle "::py::obj999999" was never made', ['PYTHON', 'ValueError', 'py object handle "::py::obj999999" was never made'])),
    ('torch::grad_scaler_step $s $t',
     (1, 'Invalid optimizer: expected an optimizer handle, got a Tensor', ['TCLAMP', 'INVALID_HANDLE', '-optimizer', '<Tensor>'])),
    ('torch::grad_scaler_step $o $s',
     (1, 'Invalid scaler: expected a scaler handle, got a SGD', ['TCLAMP', 'INVALID_HANDLE', '-scaler', '<SGD>'])),
    ('torch::grad_scaler_step $s ""',
     (1, 'Missing required parameter: scaler, optimizer', ['TCLAMP', 'MISSING_ARGUMENT', '-optimizer'])),
    ('torch::grad_scaler_unscale $s $m',
     (1, 'Invalid optimizer: expected an optimizer handle, got a Linear', ['TCLAMP', 'INVALID_HANDLE', '-optimizer', '<Linear>'])),
    ('torch::grad_scaler_update ""',
     (1, 'Missing required parameter: scaler', ['TCLAMP', 'MISSING_ARGUMENT', '-scaler'])),
    ('torch::grad_scaler_update $s -1',
     (1, 'Invalid new_scale: must be a positive number', ['TCLAMP', 'INVALID_VALUE', '-new_scale', '-1'])),
    ('torch::grad_scaler_update $s 0',
     (1, 'Invalid new_scale: must be a positive number', ['TCLAMP', 'INVALID_VALUE', '-new_scale', '0'])),
    ('torch::grad_scaler_update $s ""',
     (1, 'Invalid new_scale: must be a positive number', ['TCLAMP', 'INVALID_VALUE', '-new_scale', ''])),
    # A tensor new_scale is torch's to check (it takes one): before the
    # first scale, torch's error; see test_scaler_parity.py.
    ('torch::grad_scaler_update $s $t2',
     (1, 'AssertionError: Attempted update but _scale is None.  This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration.', ['PYTHON', 'AssertionError', 'Attempted update but _scale is None.  This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration.'])),
    ('torch::grad_scaler_update $t 2',
     (1, 'Invalid scaler: expected a scaler handle, got a Tensor', ['TCLAMP', 'INVALID_HANDLE', '-scaler', '<Tensor>'])),
    ('torch::grad_scaler_update $s 2 3',
     (1, 'Usage: torch::grad_scaler_update scaler [new_scale]', ['TCLAMP', 'USAGE'])),
    ('torch::grad_scaler_get_scale $o',
     (1, 'Invalid scaler: expected a scaler handle, got a SGD', ['TCLAMP', 'INVALID_HANDLE', '-scaler', '<SGD>'])),
    ('torch::grad_scaler_get_scale -scaler',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-scaler'])),
    ('torch::grad_scaler_state_dict ""',
     (1, 'Missing required parameter: scaler', ['TCLAMP', 'MISSING_ARGUMENT', '-scaler'])),
    ('torch::grad_scaler_load_state_dict $s',
     (1, 'Missing required parameter: scaler, state_dict', ['TCLAMP', 'MISSING_ARGUMENT', '-state_dict'])),
    ('torch::grad_scaler_load_state_dict $s ""',
     (1, 'Invalid scaler state: the dict is empty (the state of a disabled scaler), and this scaler is enabled', ['TCLAMP', 'INVALID_VALUE', '-state_dict', ''])),
    ('torch::grad_scaler_load_state_dict $sd ""',
     (0, 'scaler state loaded', '-')),
    ('torch::grad_scaler_load_state_dict $s {scale 2}',
     (1, 'Invalid scaler state: missing key growth_factor', ['TCLAMP', 'INVALID_VALUE', '-state_dict', 'scale 2'])),
    ('torch::grad_scaler_load_state_dict $s {scale 2 growth_factor 2 backoff_factor 0.5 growth_interval 10 _growth_tracker 1.5}',
     (1, 'Invalid scaler state: _growth_tracker must be an integer', ['TCLAMP', 'INVALID_VALUE', '-state_dict', 'scale 2 growth_factor 2 backoff_factor 0.5 growth_interval 10 _growth_tracker 1.5'])),
    ('torch::grad_scaler_load_state_dict $s {scale 2 growth_factor 2 backoff_factor 0.5 growth_interval 10 _growth_tracker 0 extra}',
     (1, 'Invalid scaler state: expected a dict with the keys scale, growth_factor, backoff_factor, growth_interval, _growth_tracker', ['TCLAMP', 'INVALID_VALUE', '-state_dict', 'scale 2 growth_factor 2 backoff_factor 0.5 growth_interval 10 _growth_tracker 0 extra'])),
    ('torch::grad_scaler_load_state_dict $s {scale 2 growth_factor 2 backoff_factor 0.5 growth_interval 10 bogus 0}',
     (1, 'Invalid scaler state: unknown key bogus', ['TCLAMP', 'INVALID_VALUE', '-state_dict', 'scale 2 growth_factor 2 backoff_factor 0.5 growth_interval 10 bogus 0'])),
    ('torch::grad_scaler_load_state_dict $s "\\{"',
     (1, 'Invalid scaler state: expected a dict with the keys scale, growth_factor, backoff_factor, growth_interval, _growth_tracker', ['TCLAMP', 'INVALID_VALUE', '-state_dict', '{'])),
    # Changed since: a word of several list elements is a value, not a -name word.
    ('torch::grad_scaler_load_state_dict $s {-scale 2}',
     (1, 'Invalid scaler state: unknown key -scale', ['TCLAMP', 'INVALID_VALUE', '-state_dict', '-scale 2'])),
    ('torch::grad_scaler_load_state_dict $s $t',
     (1, 'Invalid scaler state: expected a dict with the keys scale, growth_factor, backoff_factor, growth_interval, _growth_tracker', ['TCLAMP', 'INVALID_VALUE', '-state_dict', '<Tensor>'])),
    ('torch::grad_scaler_load_state_dict $t {scale 2}',
     (1, 'Invalid scaler: expected a scaler handle, got a Tensor', ['TCLAMP', 'INVALID_HANDLE', '-scaler', '<Tensor>'])),
    ('torch::grad_scaler_load_state_dict "" ""',
     (1, 'Missing required parameter: scaler, state_dict', ['TCLAMP', 'MISSING_ARGUMENT', '-scaler'])),
    ('torch::grad_scaler_load_state_dict -scaler $s -state_dict',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-state_dict'])),
    ('torch::grad_scaler_load_state_dict -scaler $s -state_dict ""',
     (1, 'Invalid scaler state: the dict is empty (the state of a disabled scaler), and this scaler is enabled', ['TCLAMP', 'INVALID_VALUE', '-state_dict', ''])),
    ('torch::grad_scaler_free ""',
     (1, 'Missing required parameter: scaler', ['TCLAMP', 'MISSING_ARGUMENT', '-scaler'])),
    ('torch::grad_scaler_free $t',
     (1, 'Invalid scaler: expected a scaler handle, got a Tensor', ['TCLAMP', 'INVALID_HANDLE', '-scaler', '<Tensor>'])),
    ('torch::set_float32_matmul_precision ""',
     (1, 'Missing required precision parameter. Valid precisions: highest, high, medium', ['TCLAMP', 'MISSING_ARGUMENT', '-precision'])),
    ('torch::set_float32_matmul_precision $t',
     (1, 'Invalid precision. Use highest, high, or medium', ['TCLAMP', 'INVALID_VALUE', '-precision', '<Tensor>'])),
    ('torch::set_float32_matmul_precision highest extra',
     (1, 'Usage: torch::set_float32_matmul_precision precision', ['TCLAMP', 'USAGE'])),
    ('torch::set_float32_matmul_precision -precision',
     (1, 'Missing value for parameter', ['TCLAMP', 'MISSING_VALUE', '-precision'])),
    ('torch::set_fp32_precision ieee bogus',
     (1, 'Invalid backend. Use generic, cuda.matmul, cudnn, cudnn.conv, cudnn.rnn, mkldnn, mkldnn.matmul, mkldnn.conv, or mkldnn.rnn', ['TCLAMP', 'INVALID_VALUE', '-backend', 'bogus'])),
    ('torch::set_fp32_precision "" generic',
     (1, 'Missing required precision parameter. Valid precisions: none, ieee, tf32, bf16', ['TCLAMP', 'MISSING_ARGUMENT', '-precision'])),
    ('torch::get_fp32_precision -1',
     (1, 'Invalid backend. Use generic, cuda.matmul, cudnn, cudnn.conv, cudnn.rnn, mkldnn, mkldnn.matmul, mkldnn.conv, or mkldnn.rnn', ['TCLAMP', 'INVALID_VALUE', '-backend', '-1'])),
    ('torch::autocast_module_dtype $t float16',
     (1, 'Invalid module: expected a module handle, got a Tensor', ['TCLAMP', 'INVALID_HANDLE', '-module', '<Tensor>'])),
    ('torch::autocast_module_dtype $m',
     (1, 'Missing required parameter: module, dtype', ['TCLAMP', 'MISSING_ARGUMENT', '-dtype'])),
    ('torch::autocast_module_dtype $m float64',
     (1, 'Invalid dtype. Use float16, bfloat16, float32, or none', ['TCLAMP', 'INVALID_VALUE', '-dtype', 'float64'])),
    ('torch::autocast_module_dtype "" float16',
     (1, 'Missing required parameter: module, dtype', ['TCLAMP', 'MISSING_ARGUMENT', '-module'])),
    ('torch::autocast_module_rules cpu x',
     (1, 'Usage: torch::autocast_module_rules [device_type]', ['TCLAMP', 'USAGE'])),
    ('torch::autocast_module_rules $t',
     (1, 'Invalid device type. Use cuda or cpu', ['TCLAMP', 'INVALID_VALUE', '-device_type', '<Tensor>'])),
    ('torch::autocast -device_type cpu -dtype float8 {list}',
     (1, 'Invalid parameters. Device type: cuda or cpu. Dtype: float16, bfloat16, or float32', ['TCLAMP', 'INVALID_VALUE', '-dtype', 'float8'])),
    ('torch::autocast cpu {list}',
     (1, 'Usage: torch::autocast ?-device_type device? ?-dtype dtype? ?-enabled boolean? ?-cache_enabled boolean? body', ['TCLAMP', 'USAGE'])),
    ('torch::autocast -device_type cpu -enabled maybe {list}',
     (1, 'Invalid boolean for -enabled', ['TCLAMP', 'INVALID_VALUE', '-enabled', 'maybe'])),
    ('torch::autocast -bogus 1 {list}',
     (1, 'Unknown parameter: -bogus. Valid parameters are: -device_type, -device, -dtype, -data_type, -enabled, -cache_enabled', ['TCLAMP', 'UNKNOWN_OPTION', '-bogus', '1'])),
    ('torch::autocast',
     (1, 'Usage: torch::autocast ?-device_type device? ?-dtype dtype? ?-enabled boolean? ?-cache_enabled boolean? body', ['TCLAMP', 'USAGE'])),
    ('torch::autocast_trace -format xml {list}',
     (1, 'Invalid format. Use dict or table', ['TCLAMP', 'INVALID_VALUE', '-format', 'xml'])),
    ('torch::autocast_trace cpu {list}',
     (1, 'Usage: torch::autocast_trace ?-device_type device? ?-format format? script', ['TCLAMP', 'USAGE'])),
    ('torch::autocast_trace',
     (1, 'Usage: torch::autocast_trace ?-device_type device? ?-format format? script', ['TCLAMP', 'USAGE'])),
    ('tclamp::info extra',
     (1, 'Usage: tclamp::info', ['TCLAMP', 'USAGE'])),
]


@pytest.mark.parametrize("command, expected", WORDS, ids=[c for c, _ in WORDS])
def test_words_report_what_the_full_rules_reported(interp, command, expected):
    """Empty words, words starting with '-', negative numbers, handles of
    the wrong kind, tensors as words, too many or too few words, named-only
    parameters, a check, the state dict word: the same error, twice (the
    second call may meet a remembered plan)."""
    code, message, errorcode = expected
    for _ in range(2):
        assert outcome(interp, command) == (code, message, errorcode)


MIXED = ("Named argument {} after positional ones: give every argument as a -name value"
         " pair, or every one positionally")


@pytest.mark.parametrize("command, flag", [
    ("torch::grad_scaler_new $meta -enabled 0", "-enabled"),
    ("torch::grad_scaler_new $c -device cpu", "-device"),
    ("torch::grad_scaler_new 2 $c -growth_factor 3", "-growth_factor"),
    ("torch::grad_scaler_new 2 2 $meta -x", "-x"),
])
def test_a_word_whose_reading_raises_does_not_hide_a_mixed_flag(interp, command, flag):
    """A positional word that a converter cannot read with an exception
    other than ValueError/TypeError (float() of a meta tensor or a complex
    tensor raises RuntimeError) must not be read before the later -name
    word is judged: parse_words reports MIXED_ARGUMENTS first, and so did
    every call before the shortcut (whose first version read the word
    first and let the RuntimeError out)."""
    assert outcome(interp, command) == (1, MIXED.format(flag),
                                        ["TCLAMP", "MIXED_ARGUMENTS", flag])


CROSS_THREAD = textwrap.dedent("""
    import sys
    import threading
    import tclamp
    from tclamp import _bridge

    # b spins with the GIL, which a takes back twice a run: at Python's
    # 5 ms switch interval the 20000 runs took over 3 minutes.
    sys.setswitchinterval(1e-5)
    box = {}
    stop = threading.Event()
    refused = []
    ran = []

    def a():
        ia = tclamp.Interp()

        def run(script):
            box["script"] = script
            return _bridge.current().evaluate(script)

        ia.create_command("::run", lambda *w: (((run, ()),), None, False),
                          planned=True, script=True)
        try:
            ia.eval("proc p {} { set body {set k 0; for {set i 0} {$i < 50} {incr i}"
                    " { incr k $i }; set k}; for {set j 0} {$j < 20000} {incr j}"
                    " { run $body } }; p")
        finally:
            stop.set()

    def b():
        ib = tclamp.Interp()
        while not stop.is_set():
            script = box.get("script")
            if script is None:
                continue
            try:
                ib.evaluate(script)
                ran.append(1)
            except RuntimeError as error:
                refused.append(str(error))

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("ran", len(ran), "refused", len(refused))
""")


def test_a_script_is_not_evaluated_by_another_threads_interpreter(tmp_path):
    """A Script borrows a Tcl value of the thread whose command got it:
    another thread's interpreter must not run it while its own thread runs
    it too (both would compile and run one Tcl_Obj at once: the first
    version let it, and the process died of SIGSEGV in 2 runs of 3).  Every
    such evaluate is refused with RuntimeError, and the process lives."""
    script = tmp_path / "cross_thread.py"
    script.write_text(CROSS_THREAD)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split()[:2] == ["ran", "0"], done.stdout


def test_script_text_of_nul_unicode_and_huge_bodies():
    """str() of a Script gives its word's text whole (NUL, a character
    beyond the BMP, 5 MB), and evaluate runs that very word."""
    from tclamp import _bridge
    made = tclamp.Interp()
    seen = []

    def run(script):
        seen.append(str(script))
        return _bridge.current().evaluate(script)

    try:
        made.create_command("::run", lambda *w: (((run, ()),), None, True),
                            planned=True, script=True)
        body = "list a\x00b \U0001F600 \u00e9"
        made.call("set", "b", body)
        assert made.eval("run $b") == "a\x00b \U0001F600 \u00e9"
        assert seen[-1] == body
        big = "set x {" + "y" * 5_000_000 + "}; string length $x"
        made.call("set", "b", big)
        assert made.eval("run $b") == "5000000"
        assert seen[-1] == big
        assert made.eval("run [list list \U0001F600 \x00]") == "\U0001F600 \x00"
    finally:
        made.delete()
