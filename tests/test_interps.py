"""Interpreters that die while in use: a child deleted by the Python code
it runs, Python-made interpreters dropped at awkward moments, and ones used
after their thread ended or from another thread.

Every script runs in a process of its own, with a time limit (processes.py),
so that a crash or a hang is a failed test and never a dead pytest.
"""
from processes import assert_clean, python, tclsh


# --- interpreters that die while in use -----------------------------------

def test_child_interpreter_deleted_by_the_python_code_it_runs(tmp_path):
    r = tclsh(tmp_path, """\
        package require tclamp
        proc make_child {} {
            interp create child
            child eval [list set auto_path $::auto_path]
            child eval {package require tclamp}
            interp alias child kill_me {} interp delete child
            child eval {py exec {
        import tclamp, gc
        class Victim:
            def suicide(self, what):
                interp = tclamp.tcl.interp
                tclamp.tcl.eval('kill_me')
                gc.collect()
                try:
                    tclamp.tcl.eval('set x 1')
                except tclamp.TclError as e:
                    print('eval after delete:', e, flush=True)
                if what == 'self': return self
                if what == 'list': return [self, object(), 'x']
                if what == 'err': raise ValueError('after delete')
                return 'str-ok'
            def __del__(self): print('Victim del', flush=True)
        }}
        }
        foreach what {str self list err} {
            make_child
            set h [child eval {py call Victim}]
            set rc [catch {child eval [list $h suicide $what]} m]
            puts [list $what $rc [regsub -all {::py::obj\\d+} $m H] [interp exists child]]
        }
        py exec {import gc; gc.collect()}
        puts done
    """)
    assert_clean(r)
    after = "eval after delete: attempt to call eval in deleted interpreter"
    assert r.stdout.splitlines() == [
        after, "Victim del", "str 0 str-ok 0",
        after, "Victim del", "self 0 H 0",
        after, "Victim del", "list 0 {H H x} 0",
        after, "Victim del", "err 1 {ValueError: after delete} 0",
        "done"], r.report


def test_python_made_interp_dropped_at_awkward_moments(tmp_path):
    """The last reference to a Python-made interpreter goes: inside its own
    command; inside its own `after` script, run by another interpreter's
    vwait; from another thread while its thread waits in another
    interpreter's vwait; from another thread while its thread is idle.
    Python's debug allocator and dev mode catch use after free."""
    r = python(tmp_path, """\
        import tclamp, gc, threading, time, weakref
        holder = {}
        class Held:
            pass
        def interp_with_object():
            interp = tclamp.Interp()
            interp.create_command('make', Held)
            interp.eval('set h [make]')
            gone = weakref.ref(next(o for o in gc.get_objects() if type(o) is Held))
            return interp, gone
        def dropper():
            holder.pop('i')
            gc.collect()
            return 'dropped'
        holder['i'], gone = interp_with_object()
        holder['i'].create_command('dropme', dropper)
        print(1, holder['i'].eval('set a [dropme]; set b [string toupper $a]; return $b'),
              gone() is None, flush=True)
        other = tclamp.Interp()
        holder['i'], gone = interp_with_object()
        holder['i'].create_command('dropme', dropper)
        holder['i'].eval('after 5 {dropme; set ::after_drop [info commands dropme]}')
        print(2, other.eval('after 50 {set ::done 1}; vwait ::done; set ::done'), flush=True)
        other.eval('update')
        gc.collect()
        print(2, 'freed' if gone() is None else 'kept', flush=True)
        holder['i'], gone = interp_with_object()
        def drop_from_another_thread():
            time.sleep(0.2)
            holder.clear(); gc.collect()
        threading.Thread(target=drop_from_another_thread).start()
        print(3, other.eval('after 600 {set ::done 3}; vwait ::done; set ::done'), flush=True)
        other.eval('update')
        print(3, 'freed' if gone() is None else 'kept', flush=True)
        box = [tclamp.Interp()]
        t = threading.Thread(target=lambda: (box.clear(), gc.collect())); t.start(); t.join()
        print(4, tclamp.Interp().eval('expr 2+3'), flush=True)
    """, options=["-X", "dev"], extra_env={"PYTHONMALLOC": "debug"})
    assert_clean(r)
    assert r.stdout.splitlines() == ["1 DROPPED True", "2 1", "2 freed", "3 3", "3 freed",
                                     "4 5"], r.report


def test_interp_deleted_inside_its_own_eval_with_live_handles_raises_its_error(tmp_path):
    """Interp.delete() from the script that Interp.eval runs: the commands
    after it fail with Tcl's error, and that error reaches Python as a
    TclError, though releasing the interpreter then deletes live handles
    (whose deletion once cleared it: a SystemError, "returned NULL without
    setting an exception"); their objects go too."""
    r = python(tmp_path, """\
        import gc, tclamp
        class Held:
            pass
        for setup, script in [("set pre [py call Held]", "py exec {doomed.delete()}; set g 1"),
                              ("", "set h [py call Held]; py exec {doomed.delete()}; set g 1"),
                              ("", "set h [py call Held]; py exec {doomed.delete()}"),
                              ("", "py exec {doomed.delete()}; py call Held")]:
            doomed = tclamp.Interp()     # py exec runs in __main__: this script
            if setup:
                doomed.eval(setup)
            try:
                print(repr(doomed.eval(script)), doomed.alive, flush=True)
            except tclamp.TclError as e:
                print("TclError", e.result, doomed.alive, flush=True)
            del doomed
            gc.collect()
            print("left", sum(type(o) is Held for o in gc.get_objects()), flush=True)
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == [
        "TclError attempt to call eval in deleted interpreter False", "left 0",
        "TclError attempt to call eval in deleted interpreter False", "left 0",
        "'' False", "left 0",
        "TclError attempt to call eval in deleted interpreter False", "left 0"], r.report


def test_interps_used_after_their_thread_ended_or_from_another_thread(tmp_path):
    r = python(tmp_path, """\
        import tclamp, threading
        box = []
        class Big:
            def __del__(self): print('Big del', flush=True)
        def make():
            interp = tclamp.Interp()
            interp.create_command('mk', Big)
            interp.eval('set h [mk]')
            box.append(interp)
        t = threading.Thread(target=make); t.start(); t.join()
        dead = box[0]
        print('alive', dead.alive, dead.handle_count, dead.handle_names())
        def attempts(interp, who):
            for name, call in [('eval', lambda: interp.eval('set x 1')),
                               ('call', lambda: interp.call('set', 'x', 1)),
                               ('evaluate', lambda: interp.evaluate('set x')),
                               ('release', lambda: interp.release(object())),
                               ('create_command', lambda: interp.create_command('a', print)),
                               # the interpreter is checked before the callable
                               ('create_py_command', lambda: interp.create_py_command('b', 'call', 5)),
                               ('delete', lambda: interp.delete())]:
                try:
                    print(who, name, call())
                except RuntimeError as e:
                    print(who, name, e)
        attempts(dead, 'dead')
        live = tclamp.Interp()
        t = threading.Thread(target=attempts, args=(live, 'other')); t.start(); t.join()
        print(live.eval('expr 1+1'))
        for call in (lambda: live.create_command('a', 5), lambda: live.create_py_command('b', 'call', 5)):
            try:
                call()
            except TypeError as e:
                print('live', e)
    """)
    assert_clean(r)
    deleted = "the Tcl interpreter has been deleted"
    wrong = "a Tcl interpreter can only be used from the thread that created it"
    assert r.stdout.splitlines() == [
        "Big del", "alive False 0 []",
        f"dead eval {deleted}", f"dead call {deleted}", f"dead evaluate {deleted}",
        f"dead release {deleted}", f"dead create_command {deleted}",
        f"dead create_py_command {deleted}", "dead delete None",
        f"other eval {wrong}", f"other call {wrong}", f"other evaluate {wrong}",
        f"other release {wrong}", f"other create_command {wrong}",
        f"other create_py_command {wrong}", f"other delete {wrong}",
        "2", "live callable expected", "live callable expected"], r.report


def test_interp_deleted_by_a_finalizer_that_making_a_handle_runs(tmp_path):
    """Interp.call(..., obj) makes a handle for obj; a command the script
    renamed onto that handle's name goes first, and its object's finalizer
    calls Interp.delete(). The interpreter was freed under the bridge's (and
    before it Tcl's own) look-up of that name: tclsh aborted ("called
    Tcl_FindHashEntry on deleted table"). Interp.call keeps it until the
    call ends: the call fails with Tcl's error, and nothing is left."""
    r = python(tmp_path, """\
        import gc, tclamp
        class Held:
            pass
        doomed = tclamp.Interp()
        class Deleter:
            def __del__(self):
                doomed.delete()
        h = doomed.call("set", "h", Held())
        n = int(h[len("::py::obj"):])
        d = doomed.call("set", "d", Deleter())
        doomed.eval(f"rename {d} ::py::obj{n + 2}")
        try:
            print(repr(doomed.call("set", "v", Held())), flush=True)
        except tclamp.TclError as e:
            print("TclError", e.result, doomed.alive, flush=True)
        del doomed
        gc.collect()
        print("left", sum(type(o) in (Held, Deleter) for o in gc.get_objects()), flush=True)
    """)
    assert_clean(r)
    assert r.stdout.splitlines() == [
        "TclError attempt to call eval in deleted interpreter False", "left 0"], r.report
