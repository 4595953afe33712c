"""Reference cycles through a Python-made Interp: a handle's object or a
command's callable that keeps the Interp (a callback that calls it later)
is collected by Python's cycle collector, which deletes the interpreter;
but only on the interpreter's thread while it runs nothing.  Elsewhere the
cycle waits, and the interpreter keeps working.

Each script runs in a process of its own (processes.py), the collector's
automatic runs off, so that only the collections the script makes happen
(test_interp_cycles_attack.py has the harder cases).
"""
import textwrap

from processes import assert_clean, python, tclsh

PRELUDE = """\
import gc, os, threading, weakref, tclamp
class Marker:
    pass
def child(p, path):
    \"\"\"Gives p's child interpreter at path this checkout's tclamp.\"\"\"
    lib = os.path.join(os.environ['PYTHONPATH'], '..', 'tcl')
    p.eval('interp eval %s [list set auto_path [linsert $auto_path 0 %s]]' % (path, lib))
    p.eval('interp eval %s {package require tclamp}' % path)
def interps():
    return sum(type(o) is tclamp.Interp for o in gc.get_objects())
def cycle_through_a_command():
    interp = tclamp.Interp()
    m = Marker()
    interp.create_command('f', lambda: (interp, m))
    return weakref.ref(m)
def cycle_through_a_handle():
    interp = tclamp.Interp()
    m = Marker()
    m.interp = interp
    interp.create_command('make', lambda: m)
    interp.eval('set h [make]')
    return weakref.ref(m)
"""


def program(body, collector_runs=False):
    """The script: PRELUDE, the collector's automatic runs off unless
    collector_runs, then body."""
    return PRELUDE + ("" if collector_runs else "gc.disable()\n") + textwrap.dedent(body)


def test_a_cycle_is_collected_and_its_interpreter_deleted(tmp_path):
    r = python(tmp_path, program("""\
        before = interps()
        for make in (cycle_through_a_command, cycle_through_a_handle):
            marker = make()
            alive = marker() is not None and interps() == before + 1
            gc.collect()
            print(make.__name__, alive, marker() is None, interps() == before)
    """))
    assert_clean(r)
    assert r.stdout == ("cycle_through_a_command True True True\n"
                        "cycle_through_a_handle True True True\n"), r.report


def test_another_threads_collection_leaves_the_cycle_and_the_interpreter_works(tmp_path):
    r = python(tmp_path, program("""\
        def make():
            interp = tclamp.Interp()
            m = Marker()
            interp.create_command('f', lambda: (interp, m))
            interp.create_command('answer', lambda: 42)
            return weakref.ref(m), interp.create_command
        marker, create_command = make()
        t = threading.Thread(target=gc.collect)
        t.start(); t.join()
        interp = create_command.__self__
        print(marker() is not None, interp.eval('answer'))
        del interp, create_command
        gc.collect()
        print(marker() is None)
    """))
    assert_clean(r)
    assert r.stdout == "True 42\nTrue\n", r.report


def test_a_collection_while_the_interpreter_runs_leaves_it_running(tmp_path):
    """An event of the unreachable interpreter runs (from another one's
    update) and collects: it is running, so it stays, and finishes its
    script; the next collection, with it idle, ends it."""
    r = python(tmp_path, program("""\
        def make():
            interp = tclamp.Interp()
            m = Marker()
            interp.create_command('f', lambda: (interp, m))
            interp.create_command('collect', lambda: gc.collect())
            interp.eval('after 0 {collect; set ::after [f]; puts "event ran [llength $::after]"}')
            return weakref.ref(m)
        marker = make()
        tclamp.Interp().eval('update')
        print(marker() is not None)
        gc.collect()
        print(marker() is None)
    """))
    assert_clean(r)
    assert r.stdout == "event ran 2\nTrue\nTrue\n", r.report


def test_a_finalizer_in_the_cycle_still_finds_its_interpreter(tmp_path):
    """Finalizers of the cycle's objects run before it is broken: one that
    uses the Interp, through Python and through its handle, finds both."""
    r = python(tmp_path, program("""\
        class Talker:
            def __init__(self, interp):
                self.interp = interp
            def __del__(self):
                print('finalized', self.interp.eval('set x'), self.interp.eval('$h name'))
            def name(self):
                return 'talker'
        def make():
            interp = tclamp.Interp()
            interp.create_command('make', lambda: Talker(interp))
            interp.eval('set x 5; set h [make]')
        before = interps()
        make()
        gc.collect()
        print(interps() == before)
    """))
    assert_clean(r)
    assert r.stdout == "finalized 5 talker\nTrue\n", r.report


def test_what_a_live_interpreter_holds_is_never_collected(tmp_path):
    """An Interp that is referenced keeps its handles' objects and its
    commands' callables through every collection; gc.get_referents shows
    what it holds, and its deletion lets them go."""
    r = python(tmp_path, program("""\
        interp = tclamp.Interp()
        def make():
            m, n = Marker(), Marker()
            m.interp = interp
            interp.create_command('make', lambda: m)
            interp.create_command('other', lambda: n.__class__.__name__)
            interp.eval('set h [make]')
            return weakref.ref(m), weakref.ref(n)
        marker, other = make()
        for _ in range(3):
            gc.collect()
        print(marker() is not None, other() is not None, marker() in gc.get_referents(interp),
              interp.eval('other'))
        interp.delete()
        gc.collect()
        print(marker() is None, other() is None)
    """))
    assert_clean(r)
    assert r.stdout == "True True True Marker\nTrue True\n", r.report


def test_a_cycle_made_in_a_tcl_host_is_collected_from_its_main_interpreter(tmp_path):
    """In tclsh, the main interpreter runs the collection (py exec), and the
    Python-made one, idle on the same thread, goes."""
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {%s}
        py exec {gc.disable(); before = interps(); marker = cycle_through_a_handle()}
        puts [py eval {str(marker() is not None and interps() == before + 1)}]
        py exec {gc.collect()}
        puts [py eval {str(marker() is None and interps() == before)}]
    """ % PRELUDE)
    assert_clean(r)
    assert r.stdout == "True\nTrue\n", r.report


def test_a_finalizer_run_by_the_interpreters_deletion_cannot_add_to_it(tmp_path):
    """A __del__ that the deletion sets off gets an error when it makes a
    command in the interpreter Tcl is deleting, and Tcl's own error when it
    calls a command there with a new object (whose handle names nothing);
    neither keeps what it offered (Tcl makes no command there, so nothing
    would ever free it)."""
    r = python(tmp_path, program("""\
        refs = []
        class Maker:
            def __init__(self, interp):
                self.interp = interp
            def __del__(self):
                m = Marker()
                refs.append(weakref.ref(m))
                for name, attempt in (("command", lambda: self.interp.create_command('late', lambda: m)),
                                      ("handle", lambda: self.interp.call('set', 'v', m))):
                    try:
                        attempt()
                        print(name, 'made')
                    except Exception as e:
                        print(name, type(e).__name__, e)
                del m
        interp = tclamp.Interp()
        interp.create_command('make', lambda: Maker(interp))
        interp.eval('set h [make]')
        interp.delete()
        print([r() is None for r in refs], interp.alive)
    """))
    assert_clean(r)
    assert r.stdout == ("command RuntimeError the Tcl interpreter has been deleted\n"
                        "handle TclError attempt to call eval in deleted interpreter\n"
                        "[True] False\n"), r.report
