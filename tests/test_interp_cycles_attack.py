"""Adversarial cases for the cycle collection of Python-made interpreters
(Interp_traverse / Interp_clear): collections from inside the interpreter,
from finalizers, from other threads, from child interpreters' events, at
the process's end, through remembered plans, and many interpreters with
the collector's automatic runs on.  Each script runs in a process of its
own (processes.py); a crash or a hang fails the test."""
from processes import assert_clean, assert_no_crash, python, tclsh
from test_interp_cycles import program


def test_collect_inside_a_handle_method_keeps_the_busy_interpreter(tmp_path):
    r = python(tmp_path, program("""\
        class Obj:
            def __init__(s, interp): s.interp = interp
            def collect(s): return (gc.collect() >= 0, len(gc.get_referents(s.interp)))
        def make():
            interp = tclamp.Interp()
            m = Marker()
            interp.create_command('make', lambda: Obj(interp))
            interp.create_command('f', lambda: m)
            interp.eval('set h [make]')
            return interp.create_command, weakref.ref(m)
        cc, marker = make()
        i = cc.__self__
        del cc
        print(i.eval('$h collect'), marker() is not None, len(gc.get_referents(i)) > 2)
        del i
        before = interps()
        gc.collect()
        print(marker() is None, interps() == before - 1)
    """))
    assert_clean(r)
    assert r.stdout == "1 0 True True\nTrue True\n", r.report


def test_finalizers_of_the_cycle_that_change_the_interpreter(tmp_path):
    """A finalizer of the cycle deletes the interpreter, makes and renames a
    new handle (the cycle lives on), releases another handle, or runs the
    collector through Tcl: each ends with the interpreter gone."""
    r = python(tmp_path, program("""\
        class F:
            def __init__(s, interp, mode): s.interp = interp; s.mode = mode
            def __del__(s):
                p = s.interp
                if s.mode == 'delete':
                    p.delete(); print('deleted', p.alive)
                elif s.mode == 'make':
                    print('made', p.eval('set g [mk2]; rename $g ::kept; ::kept name'))
                elif s.mode == 'release':
                    print('released', repr(p.eval('py release $::other')))
                elif s.mode == 'eval-gc':
                    print('evalgc', p.eval('py call gc.collect') >= '0')
            def name(s): return 'f'
        class G:
            def __init__(s, interp): s.interp = interp
            def __del__(s): print('G del')
            def name(s): return 'g'
        for mode in ('delete', 'make', 'release', 'eval-gc'):
            def make(mode=mode):
                p = tclamp.Interp()
                p.create_command('mk', lambda: F(p, mode))
                p.create_command('mk2', lambda: G(p))
                p.eval('set h [mk]; set other [mk2]')
            make()
            print(mode, gc.collect() > 0, interps(), flush=True)
            gc.collect()
            print(mode, 'second', interps(), flush=True)
    """))
    assert_clean(r)
    assert r.stdout == (
        "G del\ndeleted False\ndelete True 0\ndelete second 0\n"
        "made g\nG del\nmake False 1\nG del\nmake second 0\n"
        "G del\nreleased ''\nrelease True 0\nrelease second 0\n"
        "evalgc True\nG del\neval-gc True 0\neval-gc second 0\n"), r.report


def test_raising_finalizers_and_a_pending_event_in_a_collected_interpreter(tmp_path):
    r = python(tmp_path, program("""\
        class Bad:
            def __init__(s, interp): s.interp = interp
            def __del__(s): raise ValueError('boom in del')
        class Helper:
            def __del__(s): print('helper del'); raise KeyError('helper')
        def make():
            p = tclamp.Interp()
            p.create_command('mk', lambda: Bad(p))
            h = Helper()
            p.create_command('helper', lambda: h)
            p.eval('set a [mk]; set b [helper]')
            p.eval('after 0 {puts never}; after 100000 {puts never}; after idle {puts never}')
        make()
        print('collected', gc.collect() > 0, interps(), flush=True)
        tclamp.Interp().eval('update')
        print('ok')
    """))
    assert_no_crash(r)
    assert r.returncode == 0, r.report
    assert r.stdout == "helper del\ncollected True 0\nok\n", r.report
    assert "boom in del" in r.stderr and "KeyError: 'helper'" in r.stderr, r.report
    assert "tp_clear" not in r.stderr, r.report


def test_a_child_interpreters_event_leaves_its_parent_until_it_ends(tmp_path):
    """The parent is idle while its child and its grandchild run `after`
    events that run the collector: deleting the parent would end those
    scripts where they stand, so it stays until they end, and the next
    collection ends it."""
    r = python(tmp_path, program("""\
        event = 'py exec {print("in %s", gc.collect() >= 0, w() is None)}; py exec {print("%s ended")}'
        def make():
            p = tclamp.Interp()
            m = Marker()
            p.create_command('f', lambda: (p, m))
            p.eval('interp create c; c eval {interp create g}')
            for path in ('c', '{c g}'):
                child(p, path)
            p.eval('c eval [list after 0 {%s}]' % (event % ('child', 'child'),))
            p.eval('interp eval {c g} [list after 0 {%s}]' % (event % ('grandchild', 'grandchild'),))
            p.eval('c alias back f')
            return weakref.ref(m)
        w = make()
        q = tclamp.Interp()
        q.eval('update')
        print('gone', w() is None, flush=True)
        gc.collect()
        print('gone2', w() is None, interps())
    """))
    assert_clean(r)
    assert r.stdout == ("in child True False\nchild ended\n"
                        "in grandchild True False\ngrandchild ended\n"
                        "gone False\ngone2 True 1\n"), r.report


def test_a_remembered_plan_in_a_cycle_is_collected(tmp_path):
    r = python(tmp_path, program("""\
        class Step:
            def __init__(s, interp, m): s.interp = interp; s.m = m
            def __call__(s, *a): return 'stepped'
        def make():
            p = tclamp.Interp()
            m = Marker()
            def parser(*words):
                return (((Step(p, m), ()),), None, True)
            p.create_command('t', parser, planned=True)
            print(p.eval('t a'), p.eval('t a'), p.eval('t b'))
            return weakref.ref(m)
        w = make()
        print('alive', w() is not None)
        gc.collect()
        print('gone', w() is None, interps())
    """))
    assert_clean(r)
    assert r.stdout == "stepped stepped stepped\nalive True\ngone True 0\n", r.report


def test_many_interpreters_in_cycles_with_automatic_collection_and_a_collecting_thread(tmp_path):
    r = python(tmp_path, program("""\
        import time
        stop = False
        def spam():
            while not stop:
                gc.collect(0)
                time.sleep(0)
        t = threading.Thread(target=spam); t.start()
        class Node:
            def __init__(s, interp): s.interp = interp
            def poke(s, x): return len(str(x))
        for i in range(1500):
            p = tclamp.Interp()
            p.create_command('mk', lambda p=p: Node(p))
            p.eval('set hs {}; for {set j 0} {$j < 5} {incr j} {lappend hs [mk]}; '
                   'foreach h $hs {$h poke $h}; rename [lindex $hs 0] ::renamed; py keep [lindex $hs 1]')
            if i % 3 == 0:
                p.eval('py scope {set t [mk]; $t poke 1; py exec {import gc; gc.collect(0)}}')
            del p
        stop = True; t.join()
        gc.collect()
        print('interps left', interps())
    """), timeout=240)
    assert_clean(r)
    assert r.stdout == "interps left 0\n", r.report


def test_a_thread_ends_with_its_interpreter_in_a_cycle_and_a_finalizer_collects(tmp_path):
    r = python(tmp_path, program("""\
        class C:
            def __init__(s, interp): s.interp = interp
            def __del__(s): print('del', gc.collect() >= 0, flush=True)
        def worker(out):
            p = tclamp.Interp()
            m = Marker()
            p.create_command('mk', lambda: C(p))
            p.create_command('f', lambda: (p, m))
            p.eval('set a [mk]; set b [mk]; after 1000000 {puts never}')
            out.append(weakref.ref(m))
        out = []
        t = threading.Thread(target=worker, args=(out,)); t.start(); t.join()
        print('after join', out[0]() is None, flush=True)
        gc.collect()
        print('after gc', out[0]() is None, interps())
        tclamp.Interp().eval('update')
        print('ok')
    """, collector_runs=True))
    assert_clean(r)
    assert r.stdout == "del True\ndel True\nafter join True\nafter gc True 0\nok\n", r.report


def test_python_host_ends_with_cycles_alive_and_atexit_collections(tmp_path):
    """The collector's automatic runs are off: one during the script (when
    they come depends on what importing allocated) would end the cycles
    before the atexit handlers' collections."""
    r = python(tmp_path, program("""\
        import atexit
        class Talker:
            def __init__(s, interp): s.interp = interp
            def __del__(s):
                print('del', s.interp.eval('set x'), flush=True)
                gc.collect()
        def make():
            p = tclamp.Interp()
            p.create_command('mk', lambda: Talker(p))
            p.eval('set x 7; set h [mk]; after 100000 {puts never}')
        atexit.register(lambda: print('first registered', gc.collect() >= 0, flush=True))
        for i in range(3): make()
        atexit.register(lambda: (make(), print('last registered', gc.collect() >= 0, flush=True)))
        print('end of main', flush=True)
    """))
    assert_clean(r)
    assert r.stdout == ("end of main\ndel 7\ndel 7\ndel 7\ndel 7\n"
                        "last registered True\nfirst registered True\n"), r.report


def test_tcl_host_collections_in_a_scope_an_event_and_exit_with_cycles(tmp_path):
    r = tclsh(tmp_path, """\
        package require tclamp
        py exec {
        import gc, weakref, tclamp
        gc.disable()                # only the collections the script makes
        class Marker: pass
        class Talker:
            def __init__(s, interp): s.interp = interp
            def __del__(s):
                print('del', s.interp.eval('set x'), flush=True)
                gc.collect()
        def make():
            p = tclamp.Interp()
            p.create_command('mk', lambda: Talker(p))
            p.eval('set x 7; set h [mk]; after 0 {puts "p event"}')
            m = Marker(); p.create_command('f', lambda: (p, m))
            return weakref.ref(m)
        }
        py exec {w = make()}
        set r [py scope {
            py exec {w2 = make(); gc.collect()}
            py eval {str(w() is None)}
        }]
        puts "scope $r"
        update
        puts [py eval {str(w2() is None)}]
        py exec {w3 = make()}
        proc tick {} { py exec {gc.collect()} }
        after 0 tick
        update
        puts [py eval {str(w3() is None)}]
        py exec {make(); make()}
        puts exiting
        exit 3
    """)
    assert_clean(r, rc=3)
    assert r.stdout == ("del 7\ndel 7\nscope True\nTrue\np event\ndel 7\nTrue\n"
                        "exiting\ndel 7\ndel 7\n"), r.report


def test_non_cyclic_releases_still_run_finalizers_at_once(tmp_path):
    r = python(tmp_path, program("""\
        class D:
            def __init__(s, tag): s.tag = tag
            def __del__(s): print('del', s.tag, flush=True)
            def name(s): return s.tag
        p = tclamp.Interp()
        p.create_command('mk', lambda tag: D(tag))
        p.eval('set a [mk a]; $a name')
        print('release', p.eval('py release $a'))
        p.eval('py scope {set b [mk b]; $b name}')
        print('scope ended')
        p.eval('set c [mk c]; rename $c ::renamed')
        p.eval('rename ::renamed {}')
        print('renamed deleted')
        p.eval('set d [mk d]; set e [mk e]')
        print('count', p.handle_count)
        p.delete()
        print('deleted')
        q = tclamp.Interp()
        q.create_command('mk', lambda tag: D(tag))
        q.eval('set f [mk f]')
        del q
        print('end')
    """))
    assert_clean(r)
    lines = r.stdout.splitlines()
    assert lines[:7] == ["del a", "release ", "del b", "scope ended", "del c",
                         "renamed deleted", "count 2"], r.report
    assert sorted(lines[7:9]) == ["del d", "del e"], r.report
    assert lines[9:] == ["deleted", "del f", "end"], r.report
