"""The errors that cross the bridge, and how a Python exception reads in Tcl."""
import gc
import inspect
import itertools
import os
import sys
import traceback
import types

from . import PACKAGE_DIR, _bridge


class TclError(Exception):
    """A Tcl script that did not end normally, seen from Python.

    result is the error message, errorcode the Tcl errorCode (a Tcl list, as
    a string), errorinfo Tcl's stack trace, errorstack Tcl's -errorstack
    (the procs the error left, a Tcl list), and code the Tcl return code:
    1 for an error, 3 for break, 4 for continue, 2 for a return that left
    the top level, or an application's own code.  If the exception travels
    back into Tcl, it ends the command the same way, with the same details.
    """

    # Set on an error only when it has one, so that a subclass may define
    # errorstack itself, as a property without a setter too (subclasses
    # did before TclError had it).
    errorstack = ""

    def __init__(self, result, errorcode="NONE", errorinfo="", code=1, errorstack=""):
        super().__init__(result)
        self.result = result
        self.errorcode = errorcode
        self.errorinfo = errorinfo
        self.code = code
        if errorstack:
            self.errorstack = errorstack


class UsageError(Exception):
    """A command called wrongly: message is the documented text, and the
    Tcl errorCode is `TCLAMP <kind> ?detail ...?`, the details naming the
    offending option and value (see arguments.py)."""

    def __init__(self, kind, message, *details):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details

    def __reduce__(self):
        # Its args hold the message alone, which __init__ cannot take back
        # (pickle, multiprocessing).
        return type(self), (self.kind, self.message, *self.details), self.__dict__


def wrong_args(usage):
    """A py command given the wrong number of words, in the words of the
    bridge's C commands (WRONG_ARGS: a printf format whose one %s Python's
    % fills alike)."""
    return UsageError("WRONG_ARGS", _bridge.WRONG_ARGS % usage)


# An exception's traceback and chain, read through BaseException's own
# descriptors: a class may define properties of these names that fail.
TRACEBACK, CAUSE_OF, CONTEXT_OF, SUPPRESS_CONTEXT = (
    BaseException.__dict__[name].__get__
    for name in ("__traceback__", "__cause__", "__context__", "__suppress_context__"))
# A class's name, through type's own descriptor: a metaclass may fail it.
NAME_OF = type.__dict__["__name__"].__get__


# Where the C bridge keeps what a Python exception's error had in Tcl when
# it came back to Python (_bridge.c, keep_crossing): a key of the
# exception's own __dict__, read through BaseException's descriptor.
CROSSING = "__tcl_crossing__"
DICT_OF = BaseException.__dict__["__dict__"].__get__


def user_frames(tb, limit=None, inner=False):
    """The text of the traceback (of its first `limit` entries) without
    tclamp's own outer frames (py eval, py call), which say nothing about
    the user's code; with `inner`, without its own innermost ones either:
    tclamp.tcl.eval's, through which an error came back from Tcl."""
    try:
        frames = traceback.extract_tb(tb, limit)
    except Exception:       # a module's loader failed to give its source: no lines
        frames = traceback.StackSummary.from_list(
            [(frame.f_code.co_filename, lineno, frame.f_code.co_name, "")
             for frame, lineno in itertools.islice(traceback.walk_tb(tb), limit)])
    start, end = 0, len(frames)
    while start < end - 1 and frames[start].filename.startswith(f"{PACKAGE_DIR}{os.sep}"):
        start += 1
    while inner and end > start and frames[end - 1].filename.startswith(f"{PACKAGE_DIR}{os.sep}"):
        end -= 1
    return "".join(traceback.format_list(frames[start:end])).rstrip()


LOST = object()     # what a copied or pickled Held holds: it is no object's


class Held:
    """What the crossing record (_bridge.c, keep_crossing) holds of an
    exception as it came back from Tcl: its __cause__, its __context__ and
    its traceback's first entry (with none, the frame it came back to),
    each held, not known by its id, which a new object takes once the old
    is freed (the same raise in the same function gives a new entry the
    same code and instruction too).  Copied or pickled it holds none
    (LOST), and matches no object."""
    __slots__ = ("value",)

    def __init__(self, value=LOST):
        self.value = value

    def __reduce__(self):
        return Held, ()


def crossed_tcl(exc):
    """(errorinfo, entries since, errorstack) of a Python exception whose
    error came back to Python through Tcl: its errorInfo and -errorstack
    then, and how many entries its traceback has gained since (walked to
    the entry that was its first then, not through the whole traceback: an
    error that crosses many times would cost the square of its crossings),
    if it has been raised from or while handling no other exception since
    (nor `from None`, hiding the one it was handling),
    and its traceback still ends with the entries it had then (not cleared
    or replaced: with_traceback); or None."""
    try:
        crossing = dict.get(DICT_OF(exc), CROSSING)
    except Exception:       # a key of its own whose __eq__ fails
        return None
    if not (type(crossing) is tuple and len(crossing) == 4 and type(crossing[0]) is str
            and type(crossing[1]) is str and type(crossing[2]) is tuple
            and len(crossing[2]) == 4):
        return None
    cause, context, suppress, first = crossing[2]
    if not (type(cause) is Held and type(context) is Held and type(first) is Held
            and cause.value is CAUSE_OF(exc) and context.value is CONTEXT_OF(exc)
            and first.value is not LOST):
        return None
    # __suppress_context__ changes what Python shows only of a context with
    # no cause: `raise error from None` of one with none keeps its lines.
    if (suppress != int(SUPPRESS_CONTEXT(exc)) and context.value is not None
            and cause.value is None):
        return None
    since, tb = 0, TRACEBACK(exc)
    if type(first.value) is types.FrameType:
        # It had no traceback then (raised by C code): every entry is one
        # it gained since, the innermost that of the frame it came back to.
        innermost = None
        while tb is not None:
            since, innermost, tb = since + 1, tb, tb.tb_next
        if innermost is not None and innermost.tb_frame is not first.value:
            return None
        return crossing[1], since, crossing[0]
    while tb is not None and tb is not first.value:
        since, tb = since + 1, tb.tb_next
    if first.value is not None and tb is None:  # that entry is no longer in it
        return None
    return crossing[1], since, crossing[0]


def describe_error(exc):
    """(message, errorcode, errorinfo tail or None[, head[, errorstack]])
    for the Tcl error that `exc` becomes: the C bridge calls this for every
    exception it hands to Tcl, and Tcl's errorInfo becomes the message
    followed by the tail; or, given a head, the head followed by the tail
    (a TclError whose errorInfo does not start with its message: `error msg
    info`).  errorstack: the frames a Python exception's error left in Tcl
    before it came back to Python, for one whose errorInfo goes on from
    there; they begin its -errorstack."""
    if issubclass(type(exc), UsageError):
        return exc.message, ("TCLAMP", exc.kind, *exc.details), None
    if issubclass(type(exc), TclError):
        frames = user_frames(TRACEBACK(exc), inner=True)
        head, tail = None, ""
        # The result and errorCode are converted as values are (an int, None,
        # an object: a handle's name), so only a str result can be found at
        # the start of the errorInfo given; any other errorInfo is its head.
        info, result = exc.errorinfo, exc.result
        if info and isinstance(result, str) and isinstance(info, str) \
                and info.startswith(result):
            tail = info[len(result):]
        elif info:
            head = info
        if frames:
            tail += "\n    (passed through Python)\n" + frames
        return exc.result, exc.errorcode, tail, head
    name = NAME_OF(type(exc))
    text = exception_text(exc)
    message = f"{name}: {text}" if text else name
    crossing = crossed_tcl(exc)
    if crossing is not None:
        # Its errorInfo goes on from what it was in Tcl, as a TclError's
        # does, with the frames it has passed since (the first entries of
        # its traceback).  Raised again with another text or traceback,
        # or from another exception, it is described anew.
        errorinfo, entries_since, errorstack = crossing
        if errorinfo == message or errorinfo.startswith(message + "\n"):
            tail = errorinfo[len(message):]
            since = user_frames(TRACEBACK(exc), entries_since, inner=True)
            if since:
                tail += "\n    (passed through Python)\n" + since
            return message, ("PYTHON", name, text), tail, None, errorstack
    frames = user_frames(TRACEBACK(exc))
    earlier = chained(exc)
    if not frames and not earlier:
        return message, ("PYTHON", name, text), None
    tail = "\n" + earlier
    if frames:
        tail += "Python traceback (most recent call last):\n" + frames
    return message, ("PYTHON", name, text), tail.rstrip("\n")


def exception_text(exc):
    """str(exc), or what Python's own traceback says when that fails."""
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"

# Where chained keeps what it gave for an exception (Chain): a key of the
# exception's own __dict__, read through BaseException's descriptor.
CHAINED = "__tcl_chained__"


def chained(exc):
    """The exceptions `exc` was raised from or while handling, oldest first,
    each with its traceback and the sentence that links it to the next, as
    Python prints them.

    What it gives is kept with `exc` (Chain): an exception raised from or
    while handling `exc` later takes the earlier ones from there and
    formats `exc` alone, as long as `exc` has the cause and context it had
    (chain_kept).  An error raised anew at each of N levels of Tcl and
    Python calls had its whole chain formatted at each crossing, the square
    of N tracebacks in all.  The earlier ones read as they were then, as an
    error that came back from Tcl goes on from its errorInfo there
    (crossed_tcl)."""
    newest, parts, seen = exc, [], {id(exc)}
    text, texts, ids = "", (), frozenset()
    while True:
        if CAUSE_OF(exc) is not None:
            exc, link = CAUSE_OF(exc), CAUSE
        elif CONTEXT_OF(exc) is not None and not SUPPRESS_CONTEXT(exc):
            exc, link = CONTEXT_OF(exc), CONTEXT
        else:
            break
        if id(exc) in seen:
            break
        seen.add(id(exc))
        frames = user_frames(TRACEBACK(exc))
        message = exception_text(exc)
        block = ("Python traceback (most recent call last):\n" + frames + "\n" if frames else "")
        parts.append(block + NAME_OF(type(exc)) + (f": {message}" if message else "") + "\n" + link)
        kept = chain_kept(exc, seen)
        if kept is not None:
            text, texts, ids = kept
            break
    if not parts:
        return text
    parts.reverse()
    seen.discard(id(newest))
    try:
        DICT_OF(newest)[CHAINED] = Chain(CAUSE_OF(newest), CONTEXT_OF(newest),
                                         SUPPRESS_CONTEXT(newest), texts + tuple(parts),
                                         ids | seen)
    except Exception:       # a key of its own whose __eq__ fails: nothing kept
        pass
    return text + "".join(parts)


class Chain:
    """What chained gave for an exception, kept with it: the texts
    (`texts`, oldest first) and the ids (`ids`) of the exceptions it was
    raised from or while handling, as it had them (`cause`, `context`,
    `suppress`: its cause, its context, and whether that was suppressed,
    held, not known by id).  The ids only find a cycle: a new object at a
    freed one's address makes the walk go on, formatting.  Copied or
    pickled it remembers nothing."""
    __slots__ = ("cause", "context", "suppress", "texts", "ids")

    def __init__(self, cause=LOST, context=LOST, suppress=False, texts=(), ids=frozenset()):
        self.cause, self.context, self.suppress = cause, context, suppress
        self.texts, self.ids = texts, ids

    def __reduce__(self):
        return Chain, ()


def chain_kept(exc, seen):
    """(text, texts, ids) of what chained gave for `exc` and kept (Chain),
    if `exc` still has the cause and context it had then, its context
    suppressed as then, and none of those exceptions is one in `seen`
    (a cycle, which the walk ends where it comes round, not where that
    one's ended); else None."""
    try:
        kept = dict.get(DICT_OF(exc), CHAINED)
        if not (type(kept) is Chain and kept.cause is CAUSE_OF(exc)
                and kept.context is CONTEXT_OF(exc) and kept.suppress is SUPPRESS_CONTEXT(exc)
                and type(kept.texts) is tuple and type(kept.ids) is frozenset
                and seen.isdisjoint(kept.ids)):
            return None
        return "".join(kept.texts), kept.texts, kept.ids
    except Exception:       # a key of its own whose __eq__ fails, a Chain a script made
        return None


# Code whose frame may be suspended, not finished: clearing a suspended
# generator's or coroutine's frame ends it (Python 3.13 refuses to).
SUSPENDABLE = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
               | inspect.CO_ITERABLE_COROUTINE)


class Walked:
    """What release_frames did to an exception's traceback, kept with the
    exception for its next crossing (_bridge.c, keep_crossing): its entries
    then, first to last (`entries`), and the frames it could not clear,
    still running then (`running`).  Those entries need no clearing again
    while they are still linked as they were, only those frames, which may
    have finished since.  Copied or pickled it remembers nothing."""
    __slots__ = ("entries", "running")

    def __init__(self, entries=(), running=()):
        self.entries, self.running = entries, running

    def __reduce__(self):
        return Walked, ()


def release_frames(exc):
    """What the frames of `exc` and of the exceptions it was raised from or
    during hold goes, before the bridge keeps it: each finished frame's
    local variables are cleared (traceback.clear_frames), and so is the
    closure of torch's Module._call_impl.inner, which holds the module and
    its arguments (the batch) where clearing frames does not reach: inner
    is made for one call and never leaves it.  Generators' and coroutines'
    frames are left as they are: one may be suspended, still in use.

    An exception that crossed before has only the entries it gained since
    cleared (walked_before), and the frames still running then tried
    again: an error that crosses many times would cost the square of its
    crossings in frame.clear calls (its entries then are compared, by
    identity only).  Returns what it did to `exc`'s own traceback
    (Walked)."""
    inner = _torch_call_inner()
    seen, walked = set(), None
    while exc is not None and id(exc) not in seen and len(seen) < 64:
        seen.add(id(exc))
        before = walked_before(exc)
        known = before.entries
        tb, new = TRACEBACK(exc), []
        while tb is not None and not (known and tb is known[0]):
            new.append(tb)
            tb = tb.tb_next
        # The entries it had then, as they were linked: a tb_next set since
        # anywhere in them may have brought another traceback's frames, so
        # those past the first link that differs are walked as new.  Only
        # identities are compared, no frame cleared again.
        same = 0
        for entry in known:
            if tb is not entry:
                break
            same, tb = same + 1, tb.tb_next
        tail = []
        while tb is not None:
            tail.append(tb)
            tb = tb.tb_next
        frames = ([entry.tb_frame for entry in new] + list(before.running if same else ())
                  + [entry.tb_frame for entry in tail])
        # by id: a frame that caught it again is in it again
        running = {id(frame): frame for frame in frames if not release_frame(frame, inner)}
        if walked is None:
            walked = Walked(tuple(new) + known[:same] + tuple(tail),
                            tuple(running.values()))
        exc = CAUSE_OF(exc) if CAUSE_OF(exc) is not None else CONTEXT_OF(exc)
    return walked


def walked_before(exc):
    """What release_frames did to `exc`'s traceback when it last went into
    Tcl, if it has come back since (keep_crossing keeps it in the crossing
    record); else a Walked that matches no entry."""
    try:
        crossing = dict.get(DICT_OF(exc), CROSSING)
    except Exception:       # a key of its own whose __eq__ fails
        return Walked()
    walked = crossing[3] if type(crossing) is tuple and len(crossing) == 4 else None
    if type(walked) is not Walked:
        return Walked()
    # One a script made (Walked.__new__, other fields) must not stop the
    # walk half way: the frames after would keep what they hold.
    entries, running = getattr(walked, "entries", None), getattr(walked, "running", None)
    if not (type(entries) is tuple and type(running) is tuple
            and all(type(frame) is types.FrameType for frame in running)):
        return Walked()
    return walked


def release_frame(frame, inner):
    """Clears a finished frame (and the closure of torch's inner); False if
    it is still running."""
    if frame.f_code.co_flags & SUSPENDABLE:
        return True
    # A frame holds its free variables' cells; the function, its closure of
    # the same cells.
    cells = ([cell for cell in gc.get_referents(frame) if type(cell) is types.CellType]
             if inner is not None and frame.f_code is inner else ())
    try:
        frame.clear()
    except RuntimeError:        # still running: left as it is
        return False
    for cell in cells:
        try:
            del cell.cell_contents
        except ValueError:      # empty already
            pass
    return True


def _torch_call_inner():
    """The code of the function that torch's Module._call_impl defines
    (`inner`), or None (torch not loaded, or a torch without it)."""
    module = sys.modules.get("torch.nn.modules.module")
    call_impl = getattr(getattr(module, "Module", None), "_call_impl", None)
    constants = getattr(getattr(call_impl, "__code__", None), "co_consts", ())
    return next((c for c in constants if isinstance(c, types.CodeType) and c.co_name == "inner"),
                None)
