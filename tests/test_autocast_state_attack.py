"""The autocast commands against Python changing torch's autocast state
between them, in one process and on one thread: every torch:: getter must
say what torch's own getters say (and what a matmul computes in) at the
moment it runs, every setter must write torch's real state, and a block
must put back what it found, whatever Python did before, inside or around
it.  Each command is run many times with the same words, so that its plan
is remembered and, on the ATen path, runs from C without Python; the same
random interleavings run with the path off and the memo off (the Python
path, parsed every time) and must give the same transcript.

Also: a monkeypatch of torch's autocast functions (a pytest mock, a user's
wrapper).  The commands call torch's functions as tclamp found them when it
loaded, on every path, so a later patch is never seen, and never kept: a
plan made while a mock was in place went on calling the mock after it was
gone, so that the command no longer changed torch's state at all.
"""
import random
import warnings
from unittest import mock

import pytest
import torch

import tclamp
from tclamp import TclError, _bridge, aten
from conftest import reset_autocast

# torch warns where autocast cannot run (cuda here, float32 on cpu): expected.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
NAMES = {v: k for k, v in DTYPES.items()} | {torch.float64: "float64"}
A = torch.ones(3, 3)

# Each getter in every form: positional, named (both names), camelCase.
IS_ENABLED = ["torch::autocast_is_enabled {d}", "torch::autocast_is_enabled -device {d}",
              "torch::autocastIsEnabled -device_type {d}", "torch::autocastIsEnabled {d}"]
GET_DTYPE = ["torch::autocast_get_dtype {d}", "torch::autocastGetDtype -device {d}",
             "torch::autocast_get_dtype -device_type {d}", "torch::autocastGetDtype {d}"]
STATUS = ["dict get [torch::autocast_status {d}] {k}", "dict get [torch::autocastStatus] {d} {k}",
          "dict get [torch::autocast_status -device {d}] {k}"]


@pytest.fixture(autouse=True)
def clean_state():
    reset_autocast()
    torch.set_autocast_cache_enabled(False)
    yield
    reset_autocast()
    torch.set_autocast_cache_enabled(False)
    aten.use(True)
    _bridge.memo(True)


def truth():
    """torch's own view, and what a cpu matmul computes in now."""
    return {"cpu": (int(torch.is_autocast_enabled("cpu")), NAMES[torch.get_autocast_dtype("cpu")]),
            "cuda": (int(torch.is_autocast_enabled("cuda")), NAMES[torch.get_autocast_dtype("cuda")]),
            "default": int(torch.is_autocast_enabled()),
            "cache": int(torch.is_autocast_cache_enabled()),
            "mm": NAMES[torch.mm(A, A).dtype]}


def expected_mm(state):
    return state["cpu"][1] if state["cpu"][0] else "float32"


class Run:
    """One interleaving: an interpreter, its procs, a random generator and
    the transcript of what the Tcl getters said."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.interp = tclamp.Interp()
        self.log = []
        self.interp.create_command("::truth_now", lambda *w: self.check("in Tcl"))
        self.interp.create_command("::py_change", lambda *w: self.python_change())
        self.interp.create_command("::py_with", self.python_with_around)
        # The same getters byte-compiled in a proc, and the setters too.
        self.interp.eval("proc in_proc {script} { eval $script }\n"
                         "proc set_in_proc {args} { {*}$args }")

    def tcl(self, script):
        if self.rng.random() < 0.5:
            return self.interp.eval(script)
        return self.interp.call("in_proc", script)

    def getters(self):
        r = self.rng
        got = {}
        for d in ("cpu", "cuda"):
            got[d] = (int(self.tcl(r.choice(IS_ENABLED).format(d=d))),
                      self.tcl(r.choice(GET_DTYPE).format(d=d)))
            assert self.tcl(r.choice(STATUS).format(d=d, k="enabled")) == str(got[d][0])
            assert self.tcl(r.choice(STATUS).format(d=d, k="dtype")) == got[d][1]
        got["default"] = int(self.tcl(r.choice(["torch::autocast_is_enabled",
                                                "torch::autocastIsEnabled"])))
        got["cache"] = int(self.tcl(r.choice(STATUS).format(d="cpu", k="cache_enabled")))
        got["mm"] = NAMES[torch.mm(A, A).dtype]
        return got

    def check(self, where):
        want = truth()
        assert want["mm"] == expected_mm(want), (where, want)
        got = self.getters()
        assert got == want, (where, self.log[-5:])
        self.log.append((where, sorted(got.items())))
        return ""

    # --- changes ------------------------------------------------------------
    def python_change(self):
        r = self.rng
        d = r.choice(["cpu", "cpu", "cuda"])
        kind = r.randrange(5)
        if kind == 4:       # torch's older, deprecated names for the same state
            dt = r.choice([torch.float16, torch.bfloat16])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r.choice([lambda: torch.set_autocast_enabled(r.random() < 0.5),    # cuda
                          lambda: torch.set_autocast_cpu_enabled(r.random() < 0.5),
                          lambda: torch.set_autocast_cpu_dtype(dt),
                          lambda: torch.set_autocast_gpu_dtype(dt)])()
        elif kind == 0:
            torch.set_autocast_enabled(d, r.random() < 0.5)
        elif kind == 1:
            torch.set_autocast_dtype(d, r.choice(list(DTYPES.values()) + [torch.float64] * (d == "cpu")))
        elif kind == 2:
            torch.set_autocast_cache_enabled(r.random() < 0.5)
        else:
            torch.is_autocast_enabled()       # a read only
        self.log.append(("python", d, kind))
        return ""

    def tcl_setter(self):
        r = self.rng
        d = r.choice(["cpu", "cpu", "cuda"])
        dt = r.choice(list(DTYPES))
        script = r.choice([
            f"torch::autocast_enable {d}", f"torch::autocast_enable {d} {dt}",
            f"torch::autocastEnable -device {d} -dtype {dt}", f"torch::autocast_enable -device_type {d}",
            f"torch::autocast_disable {d}", f"torch::autocastDisable -device {d}",
            f"torch::autocast_set_dtype {dt} {d}", f"torch::autocastSetDtype -dtype {dt} -device {d}",
            f"torch::autocast_set_dtype -data_type {dt} -device_type {d}",
            "torch::autocast_clear_cache", "torch::autocastClearCache"])
        if r.random() < 0.5:
            self.interp.eval(script)
        else:
            self.interp.call("set_in_proc", *script.split())
        self.log.append(("tcl", script))

    def saved(self, device=None):
        """A block or a `with` puts back its own device's state and the
        cache flag (Python may change the other device's inside)."""
        t = truth()
        return (t["cpu"], t["cuda"], t["cache"]) if device is None else (t[device], t["cache"])

    def tcl_block(self):
        """A block whose body checks, lets Python change the state, checks,
        and maybe fails: afterwards the state is what it was."""
        r = self.rng
        d = r.choice(["cpu", "cpu", "cuda"])
        options = r.choice(["", f"-dtype {r.choice(list(DTYPES))}", f"-data_type {r.choice(list(DTYPES))}"])
        options += r.choice(["", " -enabled 0", " -enabled yes"]) + r.choice(["", " -cache_enabled 0"])
        ending = r.choice(["", "", "error boom {} {MY BOOM}"])
        inner = r.choice(list(DTYPES))
        body = r.choice(["truth_now; py_change; truth_now",
                         f"py_with {d} {r.choice(list(DTYPES))} {{truth_now; "
                         f"torch::autocast -device {d} -dtype {inner} {{truth_now; py_change}}; truth_now}}",
                         f"py_with cpu float16 {{torch::autocast_set_dtype {inner} cpu; truth_now}}"])
        body += f"; truth_now; {ending}"
        before = self.saved(d)
        code = self.interp.eval(f"catch {{torch::autocast -device {d} {options} {{{body}}}}} m o; "
                                "list $m [dict get $o -code]")
        assert code in ("{} 0", "boom 1"), code
        assert self.saved(d) == before, ("block", d, options, body)
        self.check("after block")

    def python_with_around(self, device, dtype, script):
        """A Tcl command: `with torch.autocast` (another dtype) around Tcl
        inside a torch::autocast block; torch puts its state back."""
        before = self.saved(device)
        with torch.autocast(device, dtype=DTYPES[dtype]):
            self.check("py_with")
            self.interp.eval(script)
            self.check("py_with, after script")
        assert self.saved(device) == before
        return ""

    def python_with(self):
        """`with torch.autocast` (or the decorator) around Tcl that checks
        and sets; afterwards torch has put the state back."""
        r = self.rng
        d = r.choice(["cpu", "cuda"])
        dt = r.choice(list(DTYPES.values()))
        before = self.saved(d)
        if r.random() < 0.5:
            with torch.autocast(d, dtype=dt, enabled=r.random() < 0.8):
                self.check("in with")
                self.tcl_setter()
                self.check("in with, set")
                if r.random() < 0.5:
                    self.tcl_block()
        else:
            @torch.amp.autocast(d, dtype=dt)
            def decorated():
                self.check("decorated")
                self.tcl_setter()
                self.check("decorated, set")
            decorated()
        assert self.saved(d)[0] == before[0]

    def bad_words(self):
        before = self.saved()
        script = self.rng.choice([
            "torch::autocast_enable gpu", "torch::autocast_set_dtype float64 cpu",
            "torch::autocast -device cpu -dtype nope {set x 1}", "torch::autocast_disable cpu cuda",
            "torch::autocast -device cpu -enabled maybe {py_change}",
            "torch::autocastSetDtype -device cpu"])
        with pytest.raises(TclError):
            self.interp.eval(script)
        assert self.saved() == before, script

    def nesting(self):
        n = torch.autocast_increment_nesting()
        self.tcl_block()
        assert torch.autocast_decrement_nesting() == n - 1

    def step(self):
        self.rng.choice([self.python_change, self.python_change, self.tcl_setter, self.tcl_setter,
                         self.tcl_block, self.python_with, self.bad_words, self.nesting])()
        self.check("top")


def transcript(seed, steps):
    run = Run(seed)
    try:
        run.check("start")
        for _ in range(steps):
            run.step()
        return run.log
    finally:
        run.interp.delete()
        reset_autocast()
        torch.set_autocast_cache_enabled(False)


@pytest.mark.parametrize("seed", range(3))
def test_getters_follow_python_changes_and_paths_agree(seed):
    """Differential: after every step the Tcl getters (each form, at top
    level and in a proc) say what torch says, a matmul computes in the
    dtype they name, blocks and errors leave the state as they found it;
    and the ATen path's transcript is the Python path's."""
    assert aten.use(True) == (tclamp.tcl.eval("dict get [tclamp::info] autocast_path") == "aten")
    fast = transcript(seed, 250)
    aten.use(False)
    _bridge.memo(False)
    try:
        slow = transcript(seed, 250)
    finally:
        aten.use(True)
        _bridge.memo(True)
    assert fast == slow
    assert len(fast) > 250


def test_the_differential_fails_on_a_lie():
    """The check above can fail: a getter that answered from a value kept
    since its first call is caught."""
    run = Run(0)
    try:
        run.check("start")
        real = run.getters

        def stale():
            got = real()
            got["cpu"] = (1 - got["cpu"][0], got["cpu"][1])
            return got
        run.getters = stale
        with pytest.raises(AssertionError):
            run.check("lie")
    finally:
        run.interp.delete()


# --- monkeypatched torch functions -------------------------------------------

def repeated(interp, script, times=4):
    return [interp.eval(script) for _ in range(times)]


def test_a_mock_made_during_planning_is_not_kept():
    """A plan made while torch.set_autocast_enabled was a do-nothing mock
    kept calling the mock after the patch ended: `torch::autocast_enable
    mps` (the Python path) and `torch::autocast_enable -device cpu` (new
    words on the ATen path) then never changed torch's state again."""
    interp = tclamp.Interp()
    try:
        calls = []
        with mock.patch("torch.set_autocast_enabled", lambda d, on: calls.append((d, on))):
            repeated(interp, "torch::autocast_enable mps")
            repeated(interp, "torch::autocast_enable -device cpu")
            repeated(interp, "torch::autocast_disable cpu")
        assert calls == []      # the commands call torch's own function
        for device in ("mps", "cpu"):
            torch.set_autocast_enabled(device, False)
            repeated(interp, f"torch::autocast_enable -device {device}" if device == "cpu"
                     else f"torch::autocast_enable {device}")
            assert torch.is_autocast_enabled(device), device
        assert calls == []
        torch.set_autocast_enabled("mps", False)
    finally:
        interp.delete()


@pytest.mark.parametrize("path", ["aten", "python"])
def test_the_same_words_mean_the_same_whatever_was_patched(path):
    """Whether a command saw a patch of torch's function depended on
    whether its words had run before (a remembered plan keeps the function
    it planned with): now no call sees one, first or repeated, on either
    path, for the setters, the getters, the status and the block."""
    aten.use(path == "aten")
    interp = tclamp.Interp()
    seen = []
    names = ["set_autocast_enabled", "set_autocast_dtype", "get_autocast_dtype",
             "is_autocast_enabled", "clear_autocast_cache", "is_autocast_cache_enabled",
             "set_autocast_cache_enabled", "autocast_increment_nesting",
             "autocast_decrement_nesting"]
    scripts = ["torch::autocast_enable cpu float16", "torch::autocast_get_dtype cpu",
               "torch::autocast_is_enabled cpu", "torch::autocast_set_dtype bfloat16 cpu",
               "torch::autocast_disable cpu", "torch::autocast_clear_cache",
               "torch::autocast_status cpu", "torch::autocast -device cpu -dtype float16 {set x 1}"]
    try:
        results = []
        for patched in (False, True, False, True):
            patches = [mock.patch(f"torch.{n}", lambda *a, n=n: seen.append(n)) for n in names]
            if patched:
                for p in patches:
                    p.start()
            try:
                results.append([repeated(interp, s, 2) for s in scripts])
            finally:
                if patched:
                    for p in patches:
                        p.stop()
            assert not torch.is_autocast_enabled("cpu")
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert seen == []
        assert all(r == results[0] for r in results), results
    finally:
        interp.delete()


@pytest.mark.parametrize("path", ["aten", "python"])
def test_blocks_inside_and_around_python_with_cached_weights(path):
    """A weight cast cached by `with torch.autocast` (cache on) under one
    dtype, then a torch::autocast block of another dtype inside it, and a
    Python `with` of another dtype inside a block, three times each (the
    repeats run the block's program on the ATen path): the block clears
    the cache where its dtype differs, so no matmul meets a cast of the
    other dtype, each computes in the dtype in force, and each state is
    put back."""
    aten.use(path == "aten")
    interp = tclamp.Interp()
    weight = torch.nn.Parameter(torch.ones(3, 3))
    out = []
    interp.create_command("::mm_dtype", lambda *w: out.append(NAMES[(weight @ A).dtype]) or "")

    def python_with_inside(*words):
        with torch.autocast("cpu", dtype=torch.float16, cache_enabled=True):
            out.append(NAMES[(weight @ A).dtype])
            interp.eval("torch::autocast_set_dtype bfloat16 cpu; mm_dtype")
        out.append(NAMES[(weight @ A).dtype])
        return ""
    interp.create_command("::python_with_inside", python_with_inside)
    try:
        for _ in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=True):
                out.append(NAMES[(weight @ A).dtype])
                interp.eval("torch::autocast -device cpu -dtype float16 {mm_dtype; "
                            "torch::autocast -device cpu -dtype float32 {mm_dtype}; mm_dtype}")
                out.append(NAMES[(weight @ A).dtype])
                interp.eval("torch::autocast -device cpu -dtype float32 {python_with_inside}")
                out.append(NAMES[(weight @ A).dtype])
            assert truth()["cpu"] == (0, "bfloat16") and truth()["cache"] == 0
        assert out == ["bfloat16", "float16", "float32", "float16", "bfloat16",
                       "float16", "bfloat16", "float32", "bfloat16"] * 3
    finally:
        interp.delete()


def test_a_tcl_script_whose_python_wraps_torchs_setter(tmp_path):
    """tclsh the host: a proc's byte-compiled call and a top-level one,
    during, after and again during a wrapper that records and does nothing; the
    state torch reads is what the commands wrote each time."""
    from processes import assert_clean, tclsh
    r = tclsh(tmp_path, """\
        package require tclamp
        proc on {} { torch::autocastEnable -device cpu }
        proc state {} { py eval {int(torch.is_autocast_enabled('cpu'))} }
        py exec {import torch; real = torch.set_autocast_enabled; seen = []}
        set out {}
        foreach wrapped {1 0 1} {
            if {$wrapped} {
                py exec {torch.set_autocast_enabled = lambda d, on: seen.append((d, on))}
            } else {
                py exec {torch.set_autocast_enabled = real}
            }
            foreach _ {1 2 3} {
                on; lappend out [state] [torch::autocast_is_enabled cpu]
                torch::autocast_disable cpu; lappend out [state]
                torch::autocast -device cpu {lappend out [state]}; lappend out [state]
            }
        }
        puts [llength [py eval seen]]
        puts $out
        """)
    assert_clean(r)
    assert r.stdout.split("\n")[:2] == ["0", " ".join(["1 1 0 1 0"] * 9)], r.report
