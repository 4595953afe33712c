"""Argument parsing for the torch:: commands, driven by declarations.

A command takes its parameters either positionally, in declared order, or,
when the first argument starts with "-", as flag/value pairs in any order
(the last of a repeated flag wins).  The two forms do not mix: a -name
word after a positional one is an error that names it (`MIXED_ARGUMENTS`;
a word of several list elements, such as a dict, is a value even when it
starts with "-"),
except for the seed's commands, whose messages are fixed (there it is a
value like any other).  Every failure raises UsageError with the command's
documented text before anything is changed.

The errorCode names what was wrong after the kind: `INVALID_VALUE`,
`INVALID_HANDLE` and `UNKNOWN_OPTION` add the option and its value,
`MISSING_VALUE` the option left without one, `MISSING_ARGUMENT` the absent
parameter, `MIXED_ARGUMENTS` the first -name word after a positional one.  An option is named as the call wrote it; a positional argument
by its parameter's first flag (`-device_type`).  `USAGE` adds nothing: no
one word is at fault.
"""
from dataclasses import dataclass, field
from typing import NamedTuple

from .bridge import tcl_boolean, tcl_number  # noqa: F401  (the converters' words: Tcl's own)
from .errors import UsageError

REQUIRED = object()


class Plan(NamedTuple):
    """What a command's planner returns: the bridge runs it (_bridge.c,
    python_command).  A tuple, so the bridge reads it as one."""
    steps: tuple                  # (callable, args) pairs, called in order
    result: object                # None: the last step's value; a dict: that value
                                  # mapped; anything else: the result itself
    words_only: bool              # the plan depends on the command's words alone
                                  # (state is read by steps), so the bridge may
                                  # remember it and run it again for the same words
    program: bytes = None         # the steps as ATen calls (aten.py), or None


MISSING_VALUE = "Missing value for parameter"
MIXED = ('Named argument {} after positional ones: give every argument as a -name value'
         ' pair, or every one positionally')


@dataclass(frozen=True)
class Param:
    name: str
    flags: tuple                  # e.g. ("-device_type", "-device")
    default: object = REQUIRED
    choices: object = None        # word -> value mapping, or a tuple of words
    convert: object = None        # str -> value; ValueError means invalid
    invalid: str = ""             # message for a bad value ("" = the command's)
    named_only: bool = False      # given only as -flag value
    empty_ok: bool = False        # "" is a value (an empty dict), not an absence

    @property
    def required(self):
        return self.default is REQUIRED

    def reader(self):
        """(name, word -> value) for a valid word; raises for any other."""
        if isinstance(self.choices, dict):
            return self.name, self.choices.__getitem__
        if self.choices is not None:
            choices = self.choices

            def chosen(word):
                if not (isinstance(word, str) and word in choices):
                    raise KeyError(word)
                return word
            return self.name, chosen
        return self.name, self.convert or as_given


@dataclass(frozen=True)
class Signature:
    params: tuple
    usage: str                    # too many positional arguments
    invalid: str = ""             # a value that is not valid
    missing: tuple = ("", "")     # a required value absent: (positional, named)
    check: object = None          # values -> None, or (parameter name, message)
                                  # for values that are valid alone, not together
    seed_messages: bool = False   # the seed fixes every message: no mixed-form error
    by_flag: dict = field(init=False, compare=False)
    flag_list: str = field(init=False, compare=False)
    positional: tuple = field(init=False, compare=False)
    required_params: tuple = field(init=False, compare=False)
    defaults: dict = field(init=False, compare=False)
    readers: tuple = field(init=False, compare=False)
    least_words: int = field(init=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "by_flag", {f: p for p in self.params for f in p.flags})
        object.__setattr__(self, "required_params", tuple(p for p in self.params if p.required))
        object.__setattr__(self, "defaults", {p.name: p.default for p in self.params})
        # The plain positional form's shortcut (see parse): a reader per
        # positional parameter, and how many words give every required one
        # (more than any call has when a required one is named-only).
        positional = tuple(p for p in self.params if not p.named_only)
        object.__setattr__(self, "readers", tuple(p.reader() for p in positional))
        object.__setattr__(self, "least_words", len(self.params) + 1
                           if any(p.required and p.named_only for p in self.params)
                           else max((i + 1 for i, p in enumerate(positional) if p.required),
                                    default=0))
        object.__setattr__(self, "positional", tuple(p.name for p in positional))
        object.__setattr__(self, "flag_list", ", ".join(f for p in self.params for f in p.flags))

    def unknown(self, flag, word):
        # A handle's object in a name's place is named as its errorCode
        # names it (<Tensor>): its repr is no word the call wrote, and a
        # tensor's runs to many lines.
        return UsageError("UNKNOWN_OPTION",
                          f"Unknown parameter: {word_of(flag)}. Valid parameters are: "
                          f"{self.flag_list}",
                          word_of(flag), word_of(word))

    def parse(self, args):
        """The parameters' values by name, converted and validated.

        Most calls give every word positionally, and valid: those take the
        shortcut, which only reads the words; any word that needs a rule
        (a flag, an empty word) or fails to read sends the call through
        parse_words, which applies every rule and raises the documented
        error."""
        if self.least_words <= len(args) <= len(self.readers):
            values = self.defaults.copy()
            try:
                for (name, read), word in zip(self.readers, args):
                    if word.__class__ is str and (not word or word[0] == "-"):
                        break
                    values[name] = read(word)
                else:
                    if not (self.check and self.check(values)):
                        return values
            except Exception:       # whatever a reader raises: the rules decide
                pass
        return self.parse_words(args)

    def parse_words(self, args):
        if args and not self.params:
            raise UsageError("USAGE", self.usage)
        named = bool(args) and is_flag(args[0])
        words, flags = {}, {}               # by parameter name
        if named:
            for i in range(0, len(args), 2):
                if i + 1 == len(args):
                    raise UsageError("MISSING_VALUE", MISSING_VALUE, word_of(args[i]))
                param = self.by_flag.get(args[i]) if isinstance(args[i], str) else None
                if param is None:
                    raise self.unknown(args[i], args[i + 1])
                words[param.name], flags[param.name] = args[i + 1], args[i]
        else:
            if not self.seed_messages:
                for word in args:
                    if is_named_word(word):
                        raise UsageError("MIXED_ARGUMENTS", MIXED.format(word), word)
            if len(args) > len(self.positional):
                raise UsageError("USAGE", self.usage)
            words = dict(zip(self.positional, args))
        for param in self.required_params:
            word = words.get(param.name)    # str, or a handle's object (never compared)
            if word is None or word.__class__ is str and word == "" and not param.empty_ok:
                raise UsageError("MISSING_ARGUMENT", self.missing[named], param.flags[0])
        values = self.defaults.copy()
        for param in self.params:
            if param.name in words:
                values[param.name] = self.value(param, words[param.name],
                                                flags.get(param.name, param.flags[0]))
        refusal = self.check(values) if self.check else None
        if refusal:
            name, message = refusal
            param = next(p for p in self.params if p.name == name)
            raise UsageError("INVALID_VALUE", message, flags.get(name, param.flags[0]),
                             word_of(words.get(name, "")))
        return values

    def value(self, param, word, flag):
        _, read = param.reader()
        try:
            return read(word)
        except (KeyError, TypeError, ValueError):
            raise UsageError("INVALID_VALUE", param.invalid or self.invalid,
                             flag, word_of(word)) from None
        except UsageError as error:         # a converter's own kind and text
            raise UsageError(error.kind, error.message, flag, word_of(word)) from None


@dataclass(frozen=True)
class BodySignature:
    """Options as flag/value pairs, then a script: the shape of `if`/`catch`.
    The script arrives last, as the bridge's Script; the values are the
    options' alone, so that the plan depends on them alone (its steps get
    the Script when they run); the usage text is the options'."""
    options: Signature

    def parse(self, args):
        # No script, or an option's name in the script's place
        # (`torch::autocast -dtype`), which as a script would fail as an
        # unknown command named after the option.
        if not args or str(args[-1]) in self.options.by_flag:
            raise UsageError("USAGE", self.options.usage)
        options = args[:-1]
        if options and not is_flag(options[0]):
            mixed = next(filter(is_named_word, options), None)
            if mixed is not None:
                raise UsageError("MIXED_ARGUMENTS", MIXED.format(mixed), mixed)
            raise UsageError("USAGE", self.options.usage)
        return self.options.parse(options)


def as_given(word):
    return word


def word_of(value):
    """How a value reads in an errorCode: a word as given; an object (a
    handle's) as its Python type in angle brackets, e.g. <SGD>."""
    return value if isinstance(value, str) else f"<{type(value).__name__}>"


def is_flag(word):
    """-name starts the named form; a negative number (as Tcl reads one:
    -0x10 too) is still a value."""
    if not (isinstance(word, str) and word.startswith("-")):
        return False
    try:
        tcl_number(word, float)
    except ValueError:
        return True
    return False


# Tcl's list separators: a word with one is several words, so a value (a
# dict such as {-scale 2 ...}), never one -name word.
LIST_SPACE = frozenset(" \t\n\r\v\f")


def is_named_word(word):
    """A -name word after a positional one (MIXED_ARGUMENTS): a flag that
    is one word."""
    return is_flag(word) and LIST_SPACE.isdisjoint(word)


def number_between(low, high):
    """A converter to a number strictly between low and high (NaN is not)."""
    def convert(word):
        value = tcl_number(word, float)
        if not low < value < high:
            raise ValueError(word)
        return value
    return convert


def number_above(low):
    """A converter to a number above low, infinity included (a bound's
    `most` then names the largest that holds); NaN is not."""
    def convert(word):
        value = tcl_number(word, float)
        if not value > low:
            raise ValueError(word)
        return value
    return convert


def positive_int(word):
    value = tcl_number(word, int)
    if value <= 0:
        raise ValueError(word)
    return value


@dataclass(frozen=True)
class Command:
    """One torch:: command: `plan(**values)` turns parsed values into the
    bridge's Plan; see _bridge.c.  A command whose signature ends in a
    script is registered as a script command."""
    name: str                     # snake_case, under ::torch
    camel: str                    # its camelCase alias
    signature: Signature
    plan: object

    @property
    def takes_script(self):
        return isinstance(self.signature, BodySignature)

    def parser(self):
        signature, plan = self.signature, self.plan
        return lambda *args: plan(**signature.parse(args))

    def handle_form(self):
        """(types, method, defaults, result) for the bridge, in C: a call
        whose words are just objects of these types (the leading handle
        parameters, given positionally) means objects[0].method(*objects[1:],
        *defaults), answering `result` (None: the method's value), which is
        what parse and the plan would make of it, done without either; None
        where the command has no such form (its plan is not a MethodCall)."""
        signature, plan = self.signature, self.plan
        if self.takes_script or signature.check or not isinstance(plan, MethodCall):
            return None
        types = []
        for param in signature.params:
            expected = getattr(param.convert, "handle_type", None)
            if expected is None or not param.required or param.named_only:
                break
            types.append(expected)
        rest = signature.params[len(types):]
        if not types or any(p.required for p in rest):
            return None
        return tuple(types), plan.method, tuple(p.default for p in rest), plan.result


class MethodCall:
    """A planner that calls a method of the command's first value with the
    others, in declared order, and answers `result` (None: the method's
    value).  Declared as data, so that the bridge makes the same call
    itself for the handle form (Command.handle_form)."""
    __slots__ = ("method", "result")

    def __init__(self, method, result=None):
        self.method = method
        self.result = result

    def __call__(self, **values):
        first, *rest = values.values()     # parse gives them in declared order
        return Plan(((getattr(first, self.method), tuple(rest)),), self.result, False)
