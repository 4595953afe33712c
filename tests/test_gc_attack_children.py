"""Adversarial cases for the cycle collection through child interpreters
(inner_states, Interp_traverse), the retiring of an ended thread's
interpreters (retire_thread_states) and the end's release of every handle
(release_all_handles) that test_interp_cycles*.py and
test_gc_attack_threads_exits.py leave out.  Each script runs in a process
of its own (processes.py); a crash or a hang fails the test.
"""
import textwrap

import pytest

from processes import BYTES_IN_USE, assert_clean, python, tclsh
from test_interp_cycles import program


def test_cycles_through_children_at_every_depth_and_recreated_children(tmp_path):
    """Four interpreters, each in one cycle through a handle of its own or
    of a child at depth 1, 2 or 3, go in one collection; a child deleted
    and made again under its name (its Interp objects kept), then renamed,
    still holds the cycle, which goes with the parent."""
    r = python(tmp_path, program("""\
        pending = []
        class Holder:
            def __init__(s, tag): s.p, s.m = pending[-1]; s.tag = tag
            def __del__(s): print('holder del', s.tag, s.p.alive, flush=True)
        def make(tag, depth):
            p = tclamp.Interp()
            m = Marker()
            path = []
            for d in range(depth):
                p.eval('interp eval {%s} {interp create k%d}' % (' '.join(path), d))
                path.append('k%d' % d)
                child(p, '{%s}' % ' '.join(path))
            pending.append((p, m))
            p.eval('interp eval {%s} {set h [py call Holder %s]}' % (' '.join(path), tag))
            pending.clear()
            return weakref.ref(m)
        ws = [make('a', 1), make('b', 2), make('c', 3), make('d', 0)]
        print('alive', [w() is not None for w in ws], interps(), flush=True)
        gc.collect()
        print('gone', [w() is None for w in ws], interps(), flush=True)
        kept = []
        def make_again():
            p = tclamp.Interp()
            for _ in range(3):
                p.eval('catch {interp delete c}; interp create c'); child(p, 'c')
                p.eval('c eval {py exec {kept.append(tclamp.tcl.interp)}}')
            m = Marker()
            pending.append((p, m)); p.eval('c eval {set h [py call Holder re]}')
            p.eval('rename c c2')
            p.eval('c2 eval {set g [py call Holder re2]}')
            pending.clear()
            return weakref.ref(m)
        w = make_again()
        print('kept', [k.alive for k in kept], flush=True)
        gc.collect()
        print('gone', w() is None, [k.alive for k in kept], interps() - len(kept))
    """), extra_env={"PYTHONMALLOC": "debug"})
    assert_clean(r)
    lines = r.stdout.splitlines()
    assert lines[0] == "alive [True, True, True, True] 10", r.report
    assert sorted(lines[1:5]) == ["holder del a True", "holder del b True",
                                  "holder del c True", "holder del d True"], r.report
    assert lines[5:7] == ["gone [True, True, True, True] 0", "kept [False, False, True]"], r.report
    assert sorted(lines[7:9]) == ["holder del re True", "holder del re2 True"], r.report
    assert lines[9:] == ["gone True [False, False, False] 0"], r.report


def test_a_running_child_grandchild_or_alias_hides_the_parents_children(tmp_path):
    """While a grandchild's handle method, an alias from the parent to it,
    or a child's alias back to the parent runs, the parent shows the
    collector nothing (gc.get_referents) and stays; so in another thread;
    idle, it shows what its children hold."""
    r = python(tmp_path, program("""\
        pending = []
        class Holder:
            def __init__(s): s.p, s.m = pending[-1]
            def __del__(s): print('holder del', s.p.alive, flush=True)
            def collect(s): return '%s %s' % (gc.collect() >= 0, len(gc.get_referents(s.p)))
        def make():
            p = tclamp.Interp()
            m = Marker()
            p.eval('interp create c'); child(p, 'c')
            p.eval('c eval {interp create g}'); child(p, '{c g}')
            pending.append((p, m))
            p.eval('interp eval {c g} {set h [py call Holder]}')
            pending.clear()
            p.create_command('pcollect', lambda: gc.collect() >= 0 and len(gc.get_referents(p)))
            p.eval('interp alias c pcollect {} pcollect')
            p.eval('interp alias {} gh {c g} [interp eval {c g} {set h}]')
            return weakref.ref(m), p
        w, p = make()
        print('idle', any(type(o) is Holder for o in gc.get_referents(p)))
        print('grandchild', p.eval('interp eval {c g} {$h collect}'), w() is not None)
        print('alias', p.eval('gh collect'), w() is not None)
        print('child alias', p.eval('c eval pcollect'), w() is not None)
        t = threading.Thread(target=lambda: print('thread', gc.collect() >= 0,
                                                  len(gc.get_referents(p)), flush=True))
        t.start(); t.join()
        del p
        gc.collect()
        print('gone', w() is None, interps())
    """))
    assert_clean(r)
    assert r.stdout == ("idle True\ngrandchild True 0 True\nalias True 0 True\n"
                        "child alias 0 True\nthread True 0\nholder del True\n"
                        "gone True 0\n"), r.report


def test_a_childs_interp_object_kept_after_its_parent_is_collected(tmp_path):
    """The child's Interp (tclamp.tcl there), kept by Python and by the
    collected handle object, answers as deleted once the collection ended
    its parent: every method a clean error or an empty answer."""
    r = python(tmp_path, program("""\
        kept, current = [], []
        class H:
            def __init__(s): s.p = current[0]; s.c = tclamp.tcl.interp; kept.append(s.c)
            def __del__(s): print('H del', s.c.alive, s.p.alive, flush=True)
        def make():
            p = tclamp.Interp()
            current.append(p)
            p.eval('interp create c'); child(p, 'c')
            p.eval('c eval {set h [py call H]}')
            current.clear()
            m = Marker(); p.create_command('f', lambda: (p, m))
            return weakref.ref(m)
        w = make()
        c = kept[0]
        gc.collect()
        print('gone', w() is None, c.alive, interps())
        for name, f in [('eval', lambda: c.eval('set x')), ('call', lambda: c.call('set', 'x')),
                        ('release', lambda: c.release(kept)), ('names', lambda: c.handle_names()),
                        ('name', lambda: c.handle_name(kept)), ('argument', lambda: c.argument('x')),
                        ('count', lambda: c.handle_count), ('cancel', lambda: c.cancel()),
                        ('evaluate', lambda: c.evaluate('set x')), ('keep', lambda: c.keep_in_scope('x')),
                        ('delete', lambda: c.delete()), ('command', lambda: c.create_command('x', print)),
                        ('referents', lambda: gc.get_referents(c))]:
            try:
                print(name, repr(f()))
            except Exception as e:
                print(name, type(e).__name__, e)
        kept.clear(); del c
        gc.collect()
        print('left', interps())
    """), extra_env={"PYTHONMALLOC": "debug"})
    assert_clean(r)
    deleted = "RuntimeError the Tcl interpreter has been deleted"
    assert r.stdout == (
        "H del True True\ngone True False 1\n"
        f"eval {deleted}\ncall {deleted}\nrelease {deleted}\nnames []\nname None\n"
        f"argument {deleted}\ncount 0\ncancel None\nevaluate {deleted}\nkeep {deleted}\n"
        f"delete None\ncommand {deleted}\nreferents []\nleft 0\n"), r.report


def test_children_of_tclshs_main_interpreter_are_never_collected(tmp_path):
    """tclsh's main interpreter is Tcl's: what its child and grandchild
    hold (self-referencing handle objects, a command keeping the child's
    Interp) survives every collection, from either of them, and goes
    with `interp delete`."""
    r = tclsh(tmp_path, """\
        package require tclamp
        interp create c
        c eval [list set auto_path $auto_path]
        c eval {package require tclamp}
        c eval {interp create g; g eval [list set auto_path $auto_path]; g eval {package require tclamp}}
        py exec {
        import gc, weakref, tclamp
        gc.disable()
        class Node:
            def __init__(s): s.me = s; s.interp = tclamp.tcl.interp
            def __del__(s): print('node del', flush=True)
            def hello(s): return 'hello %s' % s.interp.eval('set x')
        refs = []
        def note(): refs.append(weakref.ref(tclamp.tcl.interp.argument(tclamp.tcl.eval('set h'))))
        }
        c eval {set x c; set h [py eval {Node()}]; py call note}
        c eval {g eval {set x g; set h [py eval {Node()}]; py call note}}
        c eval {py exec {ci = tclamp.tcl.interp; ci.create_command('keepme', lambda: ci)}}
        py exec {gc.collect()}
        c eval {py exec {gc.collect()}}
        c eval {g eval {py exec {gc.collect()}}}
        puts [py eval {[r() is not None for r in refs]}]
        puts "[c eval {$h hello}] [c eval {g eval {$h hello}}]"
        interp delete c
        py exec {gc.collect()}
        puts [py eval {[r() is None for r in refs]}]
    """)
    assert_clean(r)
    assert r.stdout == "1 1\nhello c hello g\nnode del\nnode del\n1 1\n", r.report


def test_interpreters_a_python_thread_leaves_by_thread_exit(tmp_path):
    """A Python thread ends by thread::exit inside its interpreter's eval:
    that interpreter (in a cycle, with a child and a pending event) and its
    child answer the main thread with clean errors, cancel does nothing,
    collections leave them (also in threads that get the ended one's id);
    the process ends cleanly, the handle's object released."""
    r = python(tmp_path, program("""\
        tclamp.Interp()         # imports what a first interpreter needs, here
        G = {}
        class H:
            def __init__(s, p): s.p = p
            def __del__(s): print('H del', flush=True)
        def worker():
            p = tclamp.Interp()
            m = Marker(); G['m'] = weakref.ref(m)
            p.create_command('f', lambda: (p, m))
            p.call('set', 'h', H(p))
            p.eval('interp create c'); child(p, 'c')
            p.eval('c eval {py exec {G["c"] = tclamp.tcl.interp}}; after 100000 {puts never}')
            G['p'], G['ident'] = p, threading.get_ident()
            p.eval('package require Thread; thread::exit')
        t = threading.Thread(target=worker); t.start(); t.join()
        for i in (G.pop('p'), G.pop('c')):
            for f in (lambda: i.eval('set x'), lambda: i.call('set', 'x'), lambda: i.release(G),
                      lambda: i.argument('x'), lambda: i.evaluate('set x'), lambda: i.delete(),
                      lambda: i.create_command('x', print), lambda: i.keep_in_scope('x')):
                try:
                    f(); print('used')
                except RuntimeError as e:
                    assert 'only be used from the thread' in str(e), e
            print(i.alive, i.cancel(), len(gc.get_referents(i)))
        del i
        print('collected', gc.collect() >= 0, G['m']() is not None, flush=True)
        def again():
            tclamp.Interp().eval('update')
            gc.collect()
            if threading.get_ident() == G['ident']:
                G['same'] = 1
        for _ in range(50):
            t = threading.Thread(target=again); t.start(); t.join()
            if 'same' in G: break
        print('same id', 'same' in G, G['m']() is not None, flush=True)
    """))
    assert_clean(r)
    assert r.stdout == ("True None 0\nTrue None 0\ncollected True True\nsame id True True\n"
                        "H del\n"), r.report


# --- bugs this pass found ---------------------------------------------------

def test_a_parent_collected_inside_its_childs_deletion(tmp_path):
    r = python(tmp_path, program("""\
        q = tclamp.Interp()                 # any idle Python-made interpreter
        kids = []
        def make():
            p = tclamp.Interp()             # only its own command keeps it: a cycle
            p.create_command('f', lambda: p)
            p.eval('interp create c'); child(p, 'c')
            p.eval('c eval {py call X; py exec {kids.append(tclamp.tcl.interp)}}')
        class X:
            def __del__(s):
                print('collect', gc.collect() > 0, flush=True)  # p: deleted and freed by Tcl
                q.eval('set junk {}; foreach n {500 1000 2000 3000 4000 6000 8000 12000 16000} '
                       '{lappend junk [string repeat A $n]}')
                print('referents', len(gc.get_referents(q)) > 0, flush=True)
        make()
        kids.pop().delete()                 # the child, from Python, with p idle
        print('end', flush=True)
    """))
    assert_clean(r)
    assert r.stdout == "collect True\nreferents True\nend\n", r.report


def test_a_finalizer_run_as_a_python_thread_ends_makes_no_interpreter(tmp_path):
    """The thread's end has retired its interpreters (no other thread may
    use or delete them); a finalizer that its end runs (the kept exception,
    released inside Tcl_FinalizeThread) would make one that no thread could
    delete or use, and one that a new thread with the same id could."""
    r = python(tmp_path, """\
        import threading, tclamp
        tclamp.Interp()
        G = {}
        class Late:
            def __del__(s):
                try:
                    tclamp.Interp()
                    G['late'] = 'made'
                except RuntimeError as e:
                    G['late'] = str(e)
        def boom():
            raise ValueError(Late())
        def worker():
            p = tclamp.Interp()
            p.create_command('boom', boom)
            p.eval('catch boom')            # the exception stays kept until the thread ends
        t = threading.Thread(target=worker); t.start(); t.join()
        print('late:', G['late'], flush=True)
        print('main still makes one:', tclamp.Interp().eval('set x 1'), flush=True)
    """)
    assert_clean(r)
    assert r.stdout == ("late: this thread is ending: it can make no Tcl interpreter\n"
                        "main still makes one: 1\n"), r.report


def test_tclamp_tcl_in_a_finalizer_run_as_a_python_thread_ends_leaves_nothing(tmp_path):
    """The same finalizer through tclamp.tcl, run at four places of a
    thread's end: the kept exception's release (after the thread's
    interpreters are retired); an object of the user's own threading.local,
    and a command's callable on tclamp.tcl's interpreter (both while Python
    clears the thread's state, before tclamp's guard has its turn); a
    handle's object, as the thread's interpreter is deleted.  Each refuses
    before it reads tclamp.tcl's thread-local: read while Python clears the
    thread's state, it was made anew with a new interpreter, and nothing
    freed them (a dict, a weakref and an interpreter per thread)."""
    r = python(tmp_path, """\
        import collections, gc, threading, tclamp
        tclamp.Interp()
        said = collections.Counter()
        mine = threading.local()
        class Late:
            def method(s): pass
            def __del__(s):
                try:
                    tclamp.tcl.eval('set x 1')
                except (RuntimeError, tclamp.TclError) as e:
                    said[str(e)] += 1
        def boom():
            raise ValueError(Late())
        def kept():
            p = tclamp.Interp()
            p.create_command('boom', boom)
            p.eval('catch boom')            # kept until the thread ends
        def own_local():
            mine.late = Late()              # the thread's dict holds it before tclamp's guard
            tclamp.tcl.eval('set y 2')
        def command():
            tclamp.tcl.interp.create_command('late', Late().method)
        def held():
            tclamp.tcl.call('set', 'h', Late())     # a handle of the thread's interpreter
        def counts():
            gc.collect()
            return collections.Counter(type(o).__name__ for o in gc.get_objects())
        for worker in (kept, own_local, command, held):
            for n in (20, 400):
                if n == 400:
                    before = counts()
                for _ in range(n):
                    t = threading.Thread(target=worker); t.start(); t.join()
            grown = {k: v for k, v in (counts() - before).items() if v >= 100}
            print(worker.__name__, grown, dict(said), flush=True)
            said.clear()
    """)
    assert_clean(r)
    ending = "{'this thread is ending: it can make no Tcl interpreter': 420}"
    assert r.stdout.splitlines() == [
        f"kept {{}} {ending}", f"own_local {{}} {ending}", f"command {{}} {ending}",
        "held {} {'attempt to call eval in deleted interpreter': 420}"], r.report


def test_a_finalizer_at_a_threads_end_that_reads_a_local_first_is_refused_still(tmp_path):
    """A finalizer of the thread's threading.local data that first reads or
    writes a local, or reprs a list (each makes the thread state's dict or
    locals' key anew while Python clears them; CPython leaks those), then
    uses tclamp.tcl: still refused, with the user's local set before or
    after tclamp's first use.  It made an interpreter and leaked it (with
    tclamp.tcl's own local) at every thread's end."""
    r = python(tmp_path, """\
        import collections, gc, threading, tclamp
        said = collections.Counter()
        other, mine = threading.local(), threading.local()
        class Late:
            def __init__(s, first): s.first = first
            def __del__(s):
                s.first()
                try:
                    tclamp.tcl.eval('set x 1')
                except RuntimeError as e:
                    said[str(e)] += 1
        firsts = {'read': lambda: getattr(other, 'x', None),
                  'write': lambda: setattr(other, 'y', 1),
                  'repr': lambda: repr([1])}
        def interps():
            gc.collect()
            return sum(type(o) is tclamp.Interp for o in gc.get_objects())
        for name, first in firsts.items():
            for local_first in (False, True):
                def work():
                    if local_first:
                        mine.late = Late(first)
                    tclamp.tcl.eval('set y 2')
                    if not local_first:
                        mine.late = Late(first)
                before = interps()
                for _ in range(40):
                    t = threading.Thread(target=work); t.start(); t.join()
                print(name, local_first, interps() - before, dict(said), flush=True)
                said.clear()
    """)
    assert_clean(r)
    ending = "{'this thread is ending: it can make no Tcl interpreter': 40}"
    assert r.stdout.splitlines() == [f"{name} {local_first} 0 {ending}"
                                     for name in ("read", "write", "repr")
                                     for local_first in (False, True)], r.report


def test_a_thread_that_makes_an_interpreter_before_it_reads_a_local_is_not_ending(tmp_path):
    """A Python thread whose first use of tclamp makes an interpreter, before
    the thread has read any threading.local, goes on to use tclamp.tcl and
    locals of its own.  From Python 3.13 the bridge tells a thread's end by
    its locals' key, which Python makes on a thread's first read of a
    local: the guard makes it, or the thread would be taken for one that
    ends, and tclamp.tcl refused."""
    r = python(tmp_path, """\
        import threading, tclamp
        said = []
        mine = threading.local()
        def work():
            said.append(tclamp.Interp().eval('expr {2*3}'))
            said.append(tclamp.tcl.eval('expr {6*7}'))
            mine.late = tclamp.tcl.eval('set y 5')
            said.append(mine.late)
        for _ in range(3):
            t = threading.Thread(target=work); t.start(); t.join()
        print(said, flush=True)
    """)
    assert_clean(r)
    assert r.stdout == str(["6", "42", "5"] * 3) + "\n", r.report


def test_a_c_threads_callback_that_uses_tclamp_tcl_ends_cleanly(tmp_path):
    """A thread that C made (here libc's pthread_create, through ctypes) runs
    a Python callback: Python makes it a thread state for the call and
    clears it as the call returns (PyGILState_Release), which deletes the
    interpreter tclamp.tcl made there.  The bridge's own entries under that
    deletion take no second hold of the GIL, whose release would delete the
    state being cleared: the process aborted (PyThreadState_Get: NULL)."""
    r = python(tmp_path, """\
        import ctypes, tclamp
        libc = ctypes.CDLL(None)
        said = []
        def start(arg):
            said.append(tclamp.tcl.eval('expr {6*7}'))
            return None
        routine = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(start)
        for _ in range(3):
            thread = ctypes.c_ulong()
            assert libc.pthread_create(ctypes.byref(thread), None, routine, None) == 0
            libc.pthread_join(thread, None)
        print(said, tclamp.tcl.eval('expr {1+1}'), flush=True)
    """)
    assert_clean(r)
    assert r.stdout == "['42', '42', '42'] 2\n", r.report



def on_a_c_thread(calls, then):
    """A script in which one thread that C made runs `call(value)`, which
    `calls` defines: first as its start routine (value None), then in libc's
    rounds of a thread key's destructors (four at most), each while `call`
    has set `key` again; each call has a thread state of its own.  Then the
    script's main thread runs `then`."""
    return ("import ctypes, threading, tclamp\n"
            "libc = ctypes.CDLL(None)\n"
            "key = ctypes.c_uint()\n"
            + textwrap.dedent(calls) +
            "again = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(call)\n"
            "assert libc.pthread_key_create(ctypes.byref(key), again) == 0\n"
            "start = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(call)\n"
            "thread = ctypes.c_ulong()\n"
            "assert libc.pthread_create(ctypes.byref(thread), None, start, None) == 0\n"
            "libc.pthread_join(thread, None)\n"
            + textwrap.dedent(then))


@pytest.mark.parametrize("host", ["python", "tclsh"])
def test_a_c_thread_that_calls_python_again_gets_an_interpreter_each_time(tmp_path, host):
    """One thread that C made calls Python five times, each call in a
    thread state of its own.  Each call has tclamp.tcl and makes an
    interpreter, and each state's end deletes both; the first end used to
    refuse every later call ("this thread is ending")."""
    script = on_a_c_thread("""\
        said, made = [], []
        def call(value):
            try:
                made.extend([tclamp.tcl.interp, tclamp.Interp()])
                said.append(made[-1].eval('expr {6*7}') + tclamp.tcl.eval('set n %d' % len(said)))
            except Exception as e:
                said.append(repr(e))
            libc.pthread_setspecific(key, ctypes.c_void_p(1))
    """, """\
        print(said, len(made), [p.alive for p in made].count(True), flush=True)
    """)
    if host == "python":
        r = python(tmp_path, script)
    else:
        r = tclsh(tmp_path, "package require tclamp\npy exec {\n%s}\n" % script)
    assert_clean(r)
    assert r.stdout == "['420', '421', '422', '423', '424'] 10 0\n", r.report


def test_python_threads_that_make_an_interpreter_leave_no_memory(tmp_path):
    """Tcl's stdout in a Python host is stacked, per thread, to keep Tcl's
    output and Python's in order.  Tcl frees no stdout that is still
    stacked when it gives a thread's data back: every thread that made an
    interpreter left about 0.8 KB of the C heap behind (glibc's count of
    bytes in use, which Python's own small objects do not reach)."""
    r = python(tmp_path, BYTES_IN_USE + textwrap.dedent("""\
        import tclamp
        work = lambda: tclamp.Interp().eval('puts -nonewline {}')
        before = bytes_in_use_after_threads(200, work)
        grown = bytes_in_use_after_threads(500, work) - before
        print('grown per thread under 0.2 KB:', grown < 100 * 1024, grown, flush=True)
    """))
    assert_clean(r)
    assert r.stdout.startswith("grown per thread under 0.2 KB: True "), r.report


def test_a_finalizer_that_uses_tcl_as_a_c_threads_state_ends_refuses_no_later_call(tmp_path):
    """A finalizer (of a threading.local) that uses tclamp.tcl while the
    state of a C thread's first call, which made no interpreter, is
    cleared makes one (it stays: docs/hosts.md) and a guard in a dict that
    nothing frees; the thread's next call, in a new state, still works."""
    r = python(tmp_path, on_a_c_thread("""\
        local, said = threading.local(), []
        tclamp.tcl.eval('expr 1')
        class UsesTcl:
            def __del__(self): said.append(tclamp.tcl.eval('expr 1'))
        def call(value):
            try:
                if value is None:
                    local.finalized = UsesTcl()
                    libc.pthread_setspecific(key, ctypes.c_void_p(1))
                else:
                    said.append(tclamp.tcl.eval('expr 42'))
            except Exception as e:
                said.append(repr(e))
    """, """\
        print(said, flush=True)
    """))
    assert_clean(r)
    assert r.stdout == "['1', '42']\n", r.report


def test_a_finalizer_at_tclsh_exit_deletes_an_interpreter_another_uses(tmp_path):
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
        import tclamp
        class Deleter:
            def __init__(s, p): s.p = p
            def __del__(s): s.p.delete(); print('deleted', flush=True)
        class User:
            def __init__(s, p): s.p = p
            def __del__(s):
                print('user', s.p.alive, flush=True)
                try:
                    print('user eval', s.p.eval('set x'), flush=True)
                except Exception:
                    print('user eval failed', flush=True)
        p = tclamp.Interp()
        p.eval('set x 1')
        p.call('set', 'a', User(p))
        p.call('set', 'b', Deleter(p))
        p.call('set', 'c', User(p))
        del p
        }
        puts exiting
        exit 3
    """)
    assert_clean(r, rc=3)
    assert r.stdout == ("exiting\nuser True\nuser eval 1\ndeleted\nuser False\n"
                        "user eval failed\n"), r.report
