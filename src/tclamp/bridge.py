"""The Python half of the `py` ensemble (call, eval and exec are the C
bridge's; import, interact and the names they cannot resolve are here).

Arguments arrive as str, or as the object itself when the argument names a
live object handle (the C bridge looks those up).
"""
import _sitebuiltins
import builtins
import code
import importlib
import importlib.util
import os
import re
import sys
import textwrap

from . import _bridge, scope
from .current import tcl
from .errors import UsageError, wrong_args


# A file name's (or any OS word's) bytes read as Tcl reads its own: in its
# system encoding, a byte that does not decode standing for the character
# of its value, as tclsh reads its argv.  Python's str would not do: in a C
# locale its names are UTF-8 where Tcl 8.6's are ISO 8859-1, and it keeps an
# undecodable byte as a lone surrogate, which Tcl writes as three bytes.
OS_WORD = """{bytes} {
    set lenient [expr {[package vsatisfies [info tclversion] 9] ? {-profile tcl8} : {}}]
    encoding convertfrom {*}$lenient [encoding system] $bytes
}"""


def tcl_name(interp, name):
    """The Tcl string that names the same file as `name` (str, bytes or path)."""
    return interp.call("apply", OS_WORD, os.fsencode(name))


def _main_namespace():
    return sys.modules["__main__"].__dict__


def py_import(*args):
    """py import module: import it and bind its top-level name in __main__."""
    if len(args) != 1:
        raise wrong_args("py import module")
    name = args[0]
    if not isinstance(name, str):
        # A live handle's name arrives as its object: the module name is
        # the word's text, as py eval's and py exec's source is.
        name = _bridge.current().handle_name(name)
    importlib.import_module(name)
    top = name.partition(".")[0]
    _main_namespace()[top] = sys.modules[top]
    return name


# The tclamp prompt's py interact (prompt.Evaluator.interact), which
# every interpreter's `py interact` runs while it is set: a child
# interpreter's too, where Ctrl-C must be Python's as in the prompt's own.
interact_hook = None


def py_interact(*args, console_type=None):
    """py interact: Python's own prompt, reading stdin, in __main__ (where
    py eval and py exec run), until end of file; then back to Tcl."""
    if console_type is None:
        if interact_hook is not None:
            return interact_hook(*args)
        console_type = code.InteractiveConsole
    if args:
        raise wrong_args("py interact")
    console = console_type(_main_namespace(), filename="<py interact>")
    replaced = {}
    for name in ("exit", "quit"):
        quitter = getattr(builtins, name, None)
        if type(quitter) is _sitebuiltins.Quitter:
            replaced[name] = (quitter, _Quitter(quitter.name, quitter.eof))
            setattr(builtins, name, replaced[name][1])
    try:
        console.interact(banner=f"Python {sys.version.split()[0]} in __main__;"
                                f" end of file (Ctrl-D) returns to Tcl", exitmsg="")
    finally:
        for name, (quitter, ours) in replaced.items():
            if getattr(builtins, name, None) is ours:
                setattr(builtins, name, quitter)
    return ""


class _Quitter(_sitebuiltins.Quitter):
    """exit() and quit() under py interact.  Python's own close sys.stdin
    before they raise SystemExit; in a process that goes on (a plain
    tclsh, where SystemExit is a Tcl error) every later py interact, and
    input(), would fail with `I/O operation on closed file`.  These only
    raise SystemExit."""

    def __call__(self, code=None):
        raise SystemExit(code)


def _name_parts(name):
    """The parts of a dotted name; NameError if one is empty."""
    parts = name.split(".")
    if not all(parts):
        raise NameError(f"bad name '{name}'")
    return parts


_MISSING = object()


def resolve(name):
    """The object a dotted name means: its first part looked up in __main__,
    then in builtins (by the C bridge, which `py call` uses directly), else
    the longest module path that imports (os.path.join)."""
    first, *rest = _name_parts(name)
    obj = _bridge.main_or_builtin(first, _MISSING)
    if obj is _MISSING:
        for split in range(len(rest), -1, -1):
            module_name = ".".join([first, *rest[:split]])
            try:
                obj = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                # Only "this module does not exist" means: try a shorter
                # path.  A module that exists but fails to import its own
                # imports shows that error.
                if exc.name not in parents(module_name):
                    raise
                continue
            rest = rest[split:]
            break
        else:
            raise NameError(f"name '{first}' is not defined")
    for attribute in rest:
        obj = getattr(obj, attribute)
    return obj


def parents(module_name):
    """os.path.join -> {"os", "os.path", "os.path.join"}"""
    parts = module_name.split(".")
    return {".".join(parts[:n]) for n in range(1, len(parts) + 1)}


# The indentation of each line that is not blank, as textwrap reads lines.
_INDENTS = re.compile(r"^([ \t]*)[^ \t\n]", re.MULTILINE)


def dedent_block(text):
    """py exec's source without the leading whitespace that all its
    non-blank lines share (textwrap.dedent's rule), so that a block indented
    inside a proc runs; lines stay where they were, so error line numbers
    are the block's own.  Text with no common margin is returned as it is."""
    # A common margin: every such line starts with the same space or tab.
    if {margin[:1] for margin in _INDENTS.findall(text)} not in ({" "}, {"\t"}):
        return text
    return textwrap.dedent(text)


def expression_source(text):
    """py eval's source: py exec's margin removed (dedent_block), then the
    spaces and tabs still leading it, which Python's own eval() ignores
    (compile() does not), so `py eval { x + 1 }` is x + 1."""
    if text[:1] not in (" ", "\t", "\n"):   # a first line with no margin: as written
        return text
    return dedent_block(text).lstrip(" \t")


NONE_WORD = "::py::None"
CALL_USAGE = _bridge.PY_CALL_USAGE      # as the C command gives it
TYPE_WORDS = ("str", "int", "float", "bool", "name", "list", "dict")
TYPES_READ = {"int": int, "float": float, "list": list, "dict": dict}


def call_with_options(*words):
    """py call with options before the callable (the C command comes here
    when its first word starts with "-"): tohil's -kwlist and -nonevalue,
    and the -types and -kwtypes that say what a word becomes in Python.
    words are as the C bridge converts them: a live handle's object, else str.
    Everything is checked before anything is called."""
    options = {"-kwlist": "", "-nonevalue": NONE_WORD, "-types": "", "-kwtypes": ""}
    i = 0
    while i < len(words) and isinstance(words[i], str) and words[i].startswith("-"):
        if words[i] not in options:
            raise UsageError("UNKNOWN_OPTION",
                             f'bad option "{words[i]}": must be -kwlist, -nonevalue,'
                             f' -types or -kwtypes', words[i])
        if i + 2 >= len(words):             # the value, and then the callable
            raise wrong_args(CALL_USAGE)
        options[words[i]] = words[i + 1]
        i += 2
    if i == len(words):
        raise wrong_args(CALL_USAGE)
    target, args = words[i], words[i + 1:]
    interp = tcl.interp
    none_word = _text_option(options, "-nonevalue")
    types = [_parse_type(interp, t) for t in _tcl_list(interp, _text_option(options, "-types"), "-types")]
    if len(types) == 1:
        types *= len(args)
    elif types and len(types) != len(args):
        raise UsageError("USAGE", f"-types gives {len(types)} types for {len(args)}"
                         f" argument{'' if len(args) == 1 else 's'}")
    kw_words = _tcl_list(interp, _text_option(options, "-kwlist"), "-kwlist")
    if len(kw_words) % 2:
        raise UsageError("USAGE", "-kwlist must be a list of name value pairs")
    kw_names = kw_words[0::2]
    kw_types = _tcl_list(interp, _text_option(options, "-kwtypes"), "-kwtypes")
    if len(kw_types) % 2:
        raise UsageError("USAGE", "-kwtypes must be a list of name type pairs")
    kw_type_of = {}
    for name, word in zip(kw_types[0::2], kw_types[1::2]):
        if name not in kw_names:
            raise UsageError("USAGE", f'-kwtypes names "{name}", which -kwlist does not')
        kw_type_of[name] = _parse_type(interp, word)
    positional = [_typed(interp, arg, types[n] if types else None, none_word, f"argument {n + 1}")
                  for n, arg in enumerate(args)]
    keywords = {}
    for name, word in zip(kw_names, kw_words[1::2]):
        keywords[name] = _typed(interp, interp.argument(word), kw_type_of.get(name), none_word,
                                f"keyword {name}")
    # Every word is read: now the names, which may import.
    positional = _resolve_names(positional)
    keywords = _resolve_names(keywords)
    function = resolve(target) if isinstance(target, str) else target
    return function(*positional, **keywords)


class _Name:
    """A word of type name, read and checked, not yet looked up (looking it
    up may import a module)."""
    __slots__ = ("word", "what")

    def __init__(self, word, what):
        self.word = word
        self.what = what


def _check_name(word, what):
    """A _Name for `word` if it can name something: a dotted name whose
    first part is in __main__, in builtins, or a module that exists (found
    without importing it)."""
    try:
        first = _name_parts(word)[0]
        if (_bridge.main_or_builtin(first, _MISSING) is _MISSING
                and importlib.util.find_spec(first) is None):
            raise NameError(f"name '{first}' is not defined")
    except (NameError, ImportError, ValueError) as error:
        raise UsageError("INVALID_VALUE", f"{what}: {error}", word) from None
    return _Name(word, what)


def _resolve_names(value):
    if isinstance(value, _Name):
        try:
            return resolve(value.word)
        except (NameError, AttributeError, ImportError) as error:
            raise UsageError("INVALID_VALUE", f"{value.what}: {error}", value.word) from None
    if isinstance(value, list):
        return [_resolve_names(item) for item in value]
    if isinstance(value, dict):
        return {key: _resolve_names(item) for key, item in value.items()}
    return value


def _text_option(options, name):
    value = options[name]
    if not isinstance(value, str):
        raise UsageError("INVALID_VALUE", f"{name} takes a word, not a py object handle",
                         name)
    return value


def _tcl_list(interp, text, option):
    """An option's Tcl list's words, as str (Tcl's own parsing; its error
    names the option, as a word's names its argument)."""
    try:
        return interp.read_word(text, list)
    except ValueError as error:
        raise UsageError("INVALID_VALUE", f"{option}: {error}", option) from None


def _parse_type(interp, word):
    """A type word: str, int, float, bool, name, or `list ?type?` and
    `dict ?type?` whose items are of that type (str by default)."""
    try:
        parts = interp.read_word(word, list)
    except ValueError:                      # no list: no type word either
        parts = ()
    if (len(parts) == 1 and parts[0] in TYPE_WORDS
            or len(parts) == 2 and parts[0] in ("list", "dict")):
        item = _parse_type(interp, parts[1]) if len(parts) == 2 else None
        return (parts[0], item)
    raise UsageError("INVALID_VALUE", f'unknown type "{word}": must be str, int, float, bool,'
                     f' name, list ?type? or dict ?type?', word)


def _typed(interp, word, kind, none_word, what):
    """What `word` becomes as type `kind` (None: str, or a handle's object);
    the None word is None whatever the type.  A handle's object passes as
    it is.  `what` says where the word is, for its errors, whose errorCode
    names the word itself (an item's, under a list or dict type)."""
    if not isinstance(word, str):
        return word
    if word == none_word:
        return None
    name, item = kind or ("str", None)
    if name == "str":
        return word
    if name == "name":
        return _check_name(word, what)
    try:
        value = tcl_boolean(word) if name == "bool" else interp.read_word(word, TYPES_READ[name])
    except ValueError as error:
        raise UsageError("INVALID_VALUE", f"{what}: {error}", word) from None
    # An item's errors say where it is: "argument 1 element 2" (counted from
    # 1, as arguments are), 'argument 1 key "b"', one step per level.
    if name == "list":
        return [_typed(interp, interp.argument(w), item, none_word, f"{what} element {n}")
                for n, w in enumerate(value, 1)]
    if name == "dict":
        return {key: _typed(interp, interp.argument(w), item, none_word, f'{what} key "{key}"')
                for key, w in value.items()}
    return value


def tcl_boolean(word):
    """A word as Tcl reads a boolean (true/false, yes/no, on/off and their
    prefixes, in any case, or any number).  ValueError if it is none (a
    handle's object is none either)."""
    if not isinstance(word, str):
        raise ValueError(word)
    try:
        return tcl.interp.read_word(word, bool)
    except ValueError:      # the same words for NaN and 08, whose own are odd here
        raise ValueError(f'expected boolean value but got "{word}"') from None


def tcl_number(word, kind):
    """`word` as Tcl reads a number of `kind` (int or float), as in `expr`:
    0x10, 0o17, 1e3 and " 5 " are numbers, non-ASCII digits are not, 1_0 is
    one on Tcl 9 only.  ValueError for any other word (a handle's object
    too)."""
    if not isinstance(word, str):
        raise ValueError(word)
    return tcl.interp.read_word(word, kind)


def before_load(command, operation):
    """Tcl's `load` is about to run `command` (an execution trace): tohil's
    library, which calls Python without taking the GIL, gets a thread that
    keeps it (see keep_gil in interp.c and tohil's mode in bridge.h).
    add_py_ensemble does the same where tohil came first."""
    if re.search("tohil", command, re.IGNORECASE):
        _bridge.keep_gil()


def add_py_ensemble(interp):
    # call, eval and exec are the bridge's C commands (they run every time a
    # script uses Python); import is here.  eval's and exec's functions
    # prepare their source; call's resolves the names it cannot look up.
    for kind, function in (("call", resolve), ("eval", expression_source),
                           ("exec", dedent_block)):
        interp.create_py_command(f"::py::{kind}", kind, function)
    interp.create_command("::py::import", py_import)
    interp.create_command("::py::interact", py_interact)
    interp.create_command("::tclamp::before_load", before_load)
    interp.eval("trace add execution ::load enter ::tclamp::before_load")
    if interp.eval("info commands ::tohil::eval"):     # tohil came first
        _bridge.keep_gil()
    scope.add_commands(interp)
    # ::py::release is the bridge's own (it deletes the handle's command).
    interp.eval("namespace eval ::py {namespace ensemble create"
                " -subcommands {call eval exec import interact keep release scope}}")
