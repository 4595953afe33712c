/*
 * interp.c -- the bridge seen from Python, and its two ways in.
 *
 *   tclamp.Interp   a Tcl interpreter as a Python object: eval and call
 *                   with the GIL released, the commands tclamp registers,
 *                   its handles, and its end (deleted when its last
 *                   reference goes, or by the cycle collector).  attach()
 *                   gives any interpreter, made here or by Tcl, its state.
 *   Python host     libtcl loaded at run time; Interp() makes a Tcl
 *                   interpreter, whose stdout keeps order with Python's.
 *   the module      tclamp._bridge: configure, memo, current, use_aten...
 *   Tclamp_Init     `package require tclamp` in a Tcl host.
 *
 * It sits on the core (_bridge.c, which calls nothing here): values,
 * errors, handles and commands come from there, through bridge.h.
 */
#include "bridge.h"
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#define KEPT_VALUES 128         /* Interp.eval scripts, Interp.call command names kept */

static PyTypeObject InterpType;

/* Tcl work that Python asks for: a script (objc 0, objv[0]) or a command's
   words, evaluated with `flags`, or (file) the file named objv[0], read in
   `encoding` (NULL: Tcl's default); `code` is how it ended. */
typedef struct {
    Tcl_Interp *interp;
    Tcl_Size objc;
    int flags, code;
    Tcl_Obj *const *objv;
    int file;
    const char *encoding;
} TclWork;

static void
do_tcl_work(TclWork *w)
{
    w->code = w->file ? Tcl_FSEvalFileEx(w->interp, w->objv[0], w->encoding)
        : w->objc == 0 ? Tcl_EvalObjEx(w->interp, w->objv[0], w->flags)
        : Tcl_EvalObjv(w->interp, w->objc, w->objv, w->flags);
}

/*
 * tkinter in the process.  Each of its Python callbacks takes the GIL back
 * from the thread state that tkinter parked when it entered Tcl (its own
 * per-thread slot), and Python aborts when none is parked there.  Tcl that
 * Python runs through tclamp reaches those callbacks when it runs the
 * thread's events (`update`, `vwait`), so where tkinter is loaded and no
 * Tcl runs below this Python code, Tcl is entered as tkinter enters it:
 * by the `call` of a tkinter interpreter of the thread's own
 * (tkinter_entry.py), which parks the state in that slot, releases the
 * GIL and runs the command below, and that command does the work.
 */
static _Thread_local TclWork *work_for_tkinter;
#define RUN_WORK "tclamp_run_work"

static int
run_work_for_tkinter(ClientData cd, Tcl_Interp *tkinters, int objc, Tcl_Obj *const objv[])
{
    TclWork *w = work_for_tkinter;
    work_for_tkinter = NULL;
    if (w != NULL) {
        do_tcl_work(w);
        wait_if_python_finalizing();
    }
    return TCL_OK;
}

/* This thread's tkinter `call` to enter Tcl by (a new reference), or NULL
   to enter it directly: no tkinter, Tcl runs below us already (tkinter's
   slot then holds what it should), or tkinter runs another Tcl. */
static PyObject *
tkinter_entry(void)
{
    static PyObject *tkinter_name, *make_entry;
    if (here.depth > 0)
        return NULL;
    if (here.tkinter_call == NULL) {
        if (tkinter_name == NULL
                && (tkinter_name = PyUnicode_InternFromString("_tkinter")) == NULL) {
            PyErr_Clear();
            return NULL;
        }
        if (PyDict_GetItemWithError(PyImport_GetModuleDict(), tkinter_name) == NULL) {
            PyErr_Clear();
            return NULL;
        }
        if (make_entry == NULL) {
            PyObject *module = PyImport_ImportModule("tclamp.tkinter_entry");
            make_entry = module ? PyObject_GetAttrString(module, "make") : NULL;
            Py_XDECREF(module);
        }
        /* The thread's first time: its entry, or None */
        here.tkinter_call = make_entry ? PyObject_CallNoArgs(make_entry) : NULL;
        if (here.tkinter_call == NULL) {
            PyErr_Clear();
            return NULL;
        }
    }
    return here.tkinter_call == Py_None ? NULL : Py_NewRef(here.tkinter_call);
}

/* For tkinter_entry.make: the command that the thread's tkinter
   interpreter (its address) runs the work by, if that interpreter is of
   tclamp's Tcl (the library that tkinter's module at `path` uses is this
   one). */
static PyObject *
bridge_serve_tkinter(PyObject *module, PyObject *args)
{
    unsigned long long address;
    const char *path;
    if (!PyArg_ParseTuple(args, "Ks:serve_tkinter", &address, &path))
        return NULL;
    void *tkinter = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    void *its = tkinter != NULL ? dlsym(tkinter, "Tcl_CreateObjCommand") : NULL;
    if (tkinter != NULL)
        dlclose(tkinter);
    if (its == NULL || its != (void *)tclStubsPtr->tcl_CreateObjCommand)
        Py_RETURN_FALSE;
    Tcl_CreateObjCommand((Tcl_Interp *)(uintptr_t)address, RUN_WORK,
                         run_work_for_tkinter, NULL, NULL);
    Py_RETURN_TRUE;
}

/* Runs Tcl work for Python with the GIL released (kept while holding; a
   parked state taken back for good means holding began inside). */
static void
run_without_gil(TclWork *w)
{
    if (here.holding) {
        do_tcl_work(w);
        return;
    }
    PyThreadState *saved = here.parked;
    PyObject *call = tkinter_entry();
    if (call != NULL) {
        /* Parked in tkinter's slot, not here: our commands then take the
           GIL back as tkinter's callbacks do, and Python code that runs
           meanwhile finds nothing here that it does not hold. */
        here.parked = NULL;
        work_for_tkinter = w;
        PyObject *done = PyObject_CallFunction(call, "s", RUN_WORK);
        Py_DECREF(call);
        here.parked = saved;
        int ran = work_for_tkinter == NULL;
        work_for_tkinter = NULL;
        Py_XDECREF(done);
        PyErr_Clear();          /* the call's result, "", cannot fail */
        if (ran)
            return;
    }
    here.parked = PyEval_SaveThread();
    do_tcl_work(w);
    wait_if_python_finalizing();
    if (here.parked != NULL)
        PyEval_RestoreThread(here.parked);
    here.parked = saved;
}

/* ------------------------------------------------------------------ */
/* Interp methods                                                       */

/* What Python asks a result to become: Interp.eval and call, `result=`. */
enum { AS_STR, AS_INT, AS_FLOAT, AS_LIST, AS_OBJECT };

static int
wanted_result(PyObject *result)
{
    if (result == (PyObject *)&PyUnicode_Type)
        return AS_STR;
    if (result == (PyObject *)&PyLong_Type)
        return AS_INT;
    if (result == (PyObject *)&PyFloat_Type)
        return AS_FLOAT;
    if (result == (PyObject *)&PyList_Type)
        return AS_LIST;
    if (result == (PyObject *)&PyBaseObject_Type)
        return AS_OBJECT;
    PyErr_Format(PyExc_TypeError, "result must be str, int, float, list or object, not %R",
                 result);
    return -1;
}

/* The keyword arguments of eval and call: only `result`. */
static int
parse_result_keyword(const char *method, PyObject *const *values, PyObject *kwnames, int *want)
{
    *want = AS_STR;
    Py_ssize_t n = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, "result") != 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%S'",
                         method, name);
            return -1;
        }
        if ((*want = wanted_result(values[i])) < 0)
            return -1;
    }
    return 0;
}

/* The message Tcl left in `interp` about a value, as a ValueError. */
static PyObject *
value_error(Tcl_Interp *interp)
{
    PyObject *message = str_from_tcl(Tcl_GetObjResult(interp));
    Tcl_ResetResult(interp);
    if (message != NULL) {
        PyErr_SetObject(PyExc_ValueError, message);
        Py_DECREF(message);
    }
    return NULL;
}

/* An integer of any size, as Tcl reads it. */
static PyObject *
int_from_tcl(Tcl_Interp *interp, Tcl_Obj *obj)
{
    long long w;
    if (obj->typePtr == NULL || obj->typePtr != bignum_type) {
        if (int_obj_value(obj, &w) == TCL_OK
                && (obj->typePtr == NULL || obj->typePtr != bignum_type))
            return PyLong_FromLongLong(w);
    }
    /* Past 64 bits (where Tcl 8.6 would wrap), or not an integer: Tcl's
       hexadecimal digits, which Python reads at any length, or its error. */
    Tcl_Obj *hex = Tcl_Format(interp, "%llx", 1, &obj);
    if (hex == NULL)
        return value_error(interp);
    Tcl_IncrRefCount(hex);
    PyObject *value = PyLong_FromString(Tcl_GetString(hex), NULL, 16);
    Tcl_DecrRefCount(hex);
    return value;
}

static PyObject *float_from_tcl(Tcl_Interp *interp, Tcl_Obj *obj);
static PyObject *list_from_tcl(Tcl_Interp *interp, Tcl_Obj *obj);

/* Tcl 9's other lists: a type that gives its elements by index (`lseq`'s
   arithmetic series) is a list that Tcl holds without making its items.
   (A number or a dict answers only its length as a list: not one.)  Tcl
   8.6 has none. */
static int
is_abstract_list(const Tcl_ObjType *type)
{
#if TCL_MAJOR_VERSION > 8
    return type->version > offsetof(Tcl_ObjType, indexProc) && type->indexProc != NULL;
#else
    (void)type;
    return 0;
#endif
}

/* A value as the Python type that Tcl's own type of it suggests: an integer
   is an int, a double a float, a list (Tcl 9's abstract ones too) a list of
   such values, a byte array
   that has no text bytes, anything else a str. */
static PyObject *
object_from_tcl(Tcl_Interp *interp, Tcl_Obj *obj)
{
    const Tcl_ObjType *type = obj->typePtr;
    if (type == NULL)
        return str_from_tcl(obj);
    if (type == int_type || type == wide_type || type == bignum_type)
        return int_from_tcl(interp, obj);
    if (type == double_type)
        return float_from_tcl(interp, obj);
    if (type == list_type || is_abstract_list(type))
        return list_from_tcl(interp, obj);
    if (type == bytearray_type && obj->bytes == NULL) {
        Tcl_Size n;
        unsigned char *bytes = Tcl_GetByteArrayFromObj(obj, &n);
        return PyBytes_FromStringAndSize((const char *)bytes, n);
    }
    return str_from_tcl(obj);
}

static PyObject *
float_from_tcl(Tcl_Interp *interp, Tcl_Obj *obj)
{
    double d;
    if (Tcl_GetDoubleFromObj(NULL, obj, &d) == TCL_OK)
        return PyFloat_FromDouble(d);
    if (obj->typePtr == double_type && double_type != NULL)
        return PyFloat_FromDouble(Py_NAN);      /* the one double Tcl will not give */
    if (Tcl_GetDoubleFromObj(interp, obj, &d) != TCL_OK)
        return value_error(interp);
    return PyFloat_FromDouble(d);
}

static PyObject *
list_from_tcl(Tcl_Interp *interp, Tcl_Obj *obj)
{
    Tcl_Size n;
    Tcl_Obj **items = NULL;
    /* An abstract list gives its items one at a time, into a list Python
       made first: asked for all at once, Tcl 9.0 allocates them all, and
       for `lseq 2**61` the size overflows (a crash), where Python refuses
       the list (MemoryError). */
    int by_index = obj->typePtr != NULL && is_abstract_list(obj->typePtr);
    if (by_index ? Tcl_ListObjLength(interp, obj, &n) != TCL_OK
                 : Tcl_ListObjGetElements(interp, obj, &n, &items) != TCL_OK)
        return value_error(interp);
    if (Py_EnterRecursiveCall(" while converting a Tcl list to Python"))
        return NULL;
    PyObject *list = PyList_New(n);
    for (Tcl_Size i = 0; list != NULL && i < n; i++) {
        Tcl_Obj *element = by_index ? NULL : items[i];
        if (by_index && Tcl_ListObjIndex(interp, obj, i, &element) != TCL_OK) {
            Py_CLEAR(list);
            value_error(interp);
            break;
        }
        Tcl_IncrRefCount(element);      /* an abstract list's may be new, held by none */
        PyObject *item = object_from_tcl(interp, element);
        Tcl_DecrRefCount(element);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    Py_LeaveRecursiveCall();
    return list;
}

/* How a script run from Python ended, as Tcl ends a script at level 0:
   `return` counts down its -level and then ends with its -code. */
static int
effective_code(Tcl_Interp *interp, int code)
{
    if (code != TCL_RETURN)
        return code;
    Tcl_Obj *options = Tcl_GetReturnOptions(interp, code);
    Tcl_IncrRefCount(options);
    Tcl_Obj *level_value = option_value(options, "-level");
    Tcl_Obj *code_value = option_value(options, "-code");
    int level = 1, inner = TCL_OK;
    if (level_value != NULL)
        Tcl_GetIntFromObj(NULL, level_value, &level);
    if (code_value != NULL)
        Tcl_GetIntFromObj(NULL, code_value, &inner);
    Tcl_DecrRefCount(options);
    return level <= 1 ? inner : TCL_RETURN;
}

/* What an evaluation from Python returns: the result as asked for (str by
   default), or NULL with tclamp.TclError raised for any other outcome than
   a normal end. */
static PyObject *
eval_result(Tcl_Interp *interp, int code, int want)
{
    int effective = effective_code(interp, code);
    if (effective != TCL_OK)
        return raise_tcl_error(interp, effective, code == TCL_RETURN);
    Tcl_Obj *obj = Tcl_GetObjResult(interp);
    if (want == AS_STR) {
        PyObject *result = str_from_tcl(obj);
        Tcl_ResetResult(interp);
        return result;
    }
    Tcl_IncrRefCount(obj);
    Tcl_ResetResult(interp);
    PyObject *result = want == AS_INT ? int_from_tcl(interp, obj)
        : want == AS_FLOAT ? float_from_tcl(interp, obj)
        : want == AS_LIST ? list_from_tcl(interp, obj)
        : object_from_tcl(interp, obj);
    Tcl_DecrRefCount(obj);
    return result;
}

/* Runs Tcl work on behalf of Python, the interpreter held busy so that its
   deletion waits; callers Tcl_Preserve it until they have read the result. */
static int
run_tcl(InterpState *s, TclWork w)
{
    state_hold(s);
    run_without_gil(&w);
    flush_tcl_stdout();         /* before Python prints again */
    return w.code;
}

/* Takes down a descendant's cancel mark.  Tcl_Canceled without flags takes
   down a cancel's and leaves the result alone; an unwinding's
   (TCL_CANCEL_UNWIND) outlives it, and an evaluation that ends at level 0
   takes it down: an empty command, which calls no command (the mark
   stops it first), and so runs none of the child's code. */
static void
drop_child_mark(Tcl_Interp *child)
{
    Tcl_Canceled(child, 0);
    if (Tcl_Canceled(child, TCL_CANCEL_UNWIND) == TCL_OK || Tcl_InterpActive(child)
            || Tcl_InterpDeleted(child))
        return;
    Tcl_Preserve(child);
    Tcl_InterpState saved = Tcl_SaveInterpState(child, TCL_OK);
    Tcl_EvalObjv(child, 0, NULL, 0);
    Tcl_RestoreInterpState(child, saved);
    Tcl_Release(child);
}

/* Tcl_CancelEval marks the interpreter's children (at any depth) as well,
   and a mark stays until that interpreter next looks: one that ran nothing
   since would fail its next command.  Tcl_Canceled without flags takes a
   mark down and leaves the result alone (an unwinding, `exit`'s, stays).
   The descendants are found by this interpreter's `interp children`, given
   each one's path, not by theirs: a child's own `interp` may be redefined
   or traced (a safe child's code is untrusted), and running it here could
   hang, recurse without end, or delete the child as it ran. */
static void
drop_cancel_marks(Tcl_Interp *interp)
{
    Tcl_Canceled(interp, 0);
    if (Tcl_InterpDeleted(interp))
        return;
    Tcl_Obj *paths = Tcl_NewListObj(0, NULL);      /* to visit, in order */
    Tcl_Obj *words[3] = {Tcl_NewStringObj("::interp", -1), Tcl_NewStringObj("children", -1),
                         Tcl_NewObj()};
    Tcl_IncrRefCount(paths);
    for (int i = 0; i < 3; i++)
        Tcl_IncrRefCount(words[i]);
    Tcl_ListObjAppendElement(NULL, paths, words[2]);      /* {}: the interpreter */
    Tcl_Size visited = 0, count;
    while (Tcl_ListObjLength(NULL, paths, &count) == TCL_OK && visited < count) {
        Tcl_Obj *path;
        Tcl_ListObjIndex(NULL, paths, visited++, &path);
        Tcl_IncrRefCount(path);
        Tcl_DecrRefCount(words[2]);
        words[2] = path;
        Tcl_InterpState saved = Tcl_SaveInterpState(interp, TCL_OK);
        Tcl_Obj *names = NULL;
        if (Tcl_EvalObjv(interp, 3, words, TCL_EVAL_GLOBAL) == TCL_OK)
            Tcl_IncrRefCount(names = Tcl_GetObjResult(interp));
        Tcl_RestoreInterpState(interp, saved);
        if (Tcl_InterpDeleted(interp)) {
            if (names != NULL)
                Tcl_DecrRefCount(names);
            break;
        }
        Tcl_Size n;
        Tcl_Obj **items;
        if (names != NULL && Tcl_ListObjGetElements(NULL, names, &n, &items) == TCL_OK) {
            for (Tcl_Size i = 0; i < n; i++) {
                Tcl_Obj *child_path = Tcl_DuplicateObj(path);
                Tcl_IncrRefCount(child_path);
                Tcl_Interp *child = NULL;
                if (Tcl_ListObjAppendElement(NULL, child_path, items[i]) == TCL_OK)
                    child = Tcl_GetChild(interp, Tcl_GetString(child_path));
                if (child != NULL) {
                    drop_child_mark(child);
                    Tcl_ListObjAppendElement(NULL, paths, child_path);
                }
                Tcl_DecrRefCount(child_path);
            }
        }
        if (names != NULL)
            Tcl_DecrRefCount(names);
    }
    for (int i = 0; i < 3; i++)
        Tcl_DecrRefCount(words[i]);
    Tcl_DecrRefCount(paths);
}

/* A cancel that reached Tcl as its evaluation ended would stop the next
   one: a command of its own takes it, and the interpreter's result and
   error state are as they were.  Tcl lifts a cancel as a command it called
   returns to level 0; a file run by Interp.eval_file is no command, so
   there the cancel is still up after the script took it, and a command
   called as one (not compiled into a script) lifts it. */
static void
drop_stale_cancel(InterpState *s)
{
    s->cancel_sent = 0;
    Tcl_InterpState saved = Tcl_SaveInterpState(s->interp, TCL_OK);
    Tcl_Obj *command = Tcl_NewStringObj("list", -1);
    Tcl_IncrRefCount(command);
    Tcl_EvalObjEx(s->interp, command, TCL_EVAL_GLOBAL);
    if (Tcl_Canceled(s->interp, 0) != TCL_OK)
        Tcl_EvalObjv(s->interp, 1, &command, TCL_EVAL_GLOBAL);
    Tcl_DecrRefCount(command);
    Tcl_RestoreInterpState(s->interp, saved);
    drop_cancel_marks(s->interp);   /* the children's: Tcl marked them too */
}

/* After Tcl ran: the caller's result is read; then deferred deletions. */
static void
tcl_done(InterpState *s)
{
    if (s->cancel_sent && s->busy == 1 && s->interp != NULL && !Tcl_InterpActive(s->interp))
        drop_stale_cancel(s);       /* the outermost evaluation ended */
    state_unhold(s);
    run_pending_deletions();
}

/* The interpreter, for a method that takes a str and may run here; NULL
   with the error otherwise. */
static InterpState *
usable_given_str(InterpObject *self, PyObject *arg)
{
    if (check_usable(self->state) < 0)
        return NULL;
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "str expected, not %s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    return self->state;
}

/* py keep (scope.py). */
static PyObject *
Interp_keep_in_scope(InterpObject *self, PyObject *name)
{
    InterpState *s = usable_given_str(self, name);
    if (s == NULL)
        return NULL;
    keep_in_scope(s, name);
    Py_RETURN_NONE;
}

static void
release_kept_value(PyObject *capsule)
{
    Tcl_DecrRefCount((Tcl_Obj *)PyCapsule_GetPointer(capsule, "tclamp.value"));
}

/* The Tcl value of `text`, with a reference for the caller.  The values of
   recent texts are kept in `*cache` (on the interpreter's thread, which
   alone frees them), with what Tcl made of them: a script's bytecode, the
   command a name means.  Without them (measured for issue 30, compare.py)
   Interp.eval("set x") went from 0.43x _tkinter's time to 2.3x, and
   Interp.call(proc, "a", 1) from 0.89x to 1.07x: both past their targets. */
static Tcl_Obj *
kept_value(PyObject **cache, PyObject *text)
{
    Tcl_Obj *obj;
    if (!PyUnicode_CheckExact(text) || PyUnicode_GET_LENGTH(text) > CACHE_MAX_CHARS) {
        if ((obj = tcl_from_str(text)) != NULL)
            Tcl_IncrRefCount(obj);
        return obj;
    }
    if (*cache == NULL && (*cache = PyDict_New()) == NULL)
        return NULL;
    PyObject *kept = PyDict_GetItemWithError(*cache, text);
    if (kept != NULL) {
        obj = PyCapsule_GetPointer(kept, "tclamp.value");
        Tcl_IncrRefCount(obj);
        return obj;
    }
    if (PyErr_Occurred() || (obj = tcl_from_str(text)) == NULL)
        return NULL;
    Tcl_IncrRefCount(obj);      /* the caller's */
    Tcl_IncrRefCount(obj);      /* the capsule's */
    PyObject *capsule = PyCapsule_New(obj, "tclamp.value", release_kept_value);
    if (capsule == NULL) {
        Tcl_DecrRefCount(obj);
        PyErr_Clear();
        return obj;
    }
    cache_put(*cache, text, capsule, KEPT_VALUES);
    Py_DECREF(capsule);
    return obj;
}

/* Interp.eval's and Interp.call's first checks: their result= keyword
   (after the positional arguments), and an interpreter this thread may use. */
static InterpState *
usable_wanting(InterpObject *self, const char *method, PyObject *const *keywords,
               PyObject *kwnames, int *want)
{
    if (parse_result_keyword(method, keywords, kwnames, want) < 0 || check_usable(self->state) < 0)
        return NULL;
    return self->state;
}

/* The end of an evaluation that Interp.interrupt stopped.  Tcl's cancel
   (Tcl_CancelEval) reaches the interpreter as an async handler, and its
   mark is one-shot: one that came after the evaluation's last look, or
   that a catch took the error of and nothing looked again, would stop
   the next command here (Python's next line, or the Tcl that called
   Python).  The thread's ready handlers run now, and the marks go.  Then
   the call raises what Ctrl-C raises: Python's pending SIGINT handler
   runs now, as the call returns (the KeyboardInterrupt, not a TclError,
   and not in whatever Python code runs next), or the KeyboardInterrupt
   that Python code under Tcl raised came back as itself; else
   KeyboardInterrupt. */
static PyObject *
interrupted_result(Tcl_Interp *interp, int code, int want)
{
    if (Tcl_AsyncReady())
        Tcl_AsyncInvoke(NULL, TCL_OK);
    drop_cancel_marks(interp);
    if (PyErr_CheckSignals() < 0)
        return NULL;
    PyObject *result = eval_result(interp, code, want);
    if (result == NULL && PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
        return NULL;
    Py_XDECREF(result);
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    return NULL;
}

/* Empties the interpreter's -errorstack before an evaluation from Python
   that follows an error report_python_error made there.  Tcl logs no
   frames for an error whose errorInfo the script gives (`error message
   info`, `return -code error -errorinfo ...`): its -errorstack is the list
   the last logged error left, here that Python error's.  It came back with
   the new error (its TclError's errorstack), was given to Tcl again and
   grew by the procs around it each time: a loop in a proc catching such
   errors from `py call` grew the list without end, each turn slower.  Now
   such an error brings none back, and Tcl logs the py command's frames as
   for any error from Python.  The pending errorInfo and errorCode go to
   ::errorInfo and ::errorCode first, as the evaluation's own reset sends
   them; the emptying's own errorCode goes nowhere (level 1: with level 0
   the second reset wrote NONE to ::errorCode, where the error had left
   its own). */
static void
forget_given_errorstack(InterpState *s, Tcl_Interp *interp)
{
    s->errorstack_given = 0;
    Tcl_ResetResult(interp);
    set_errorstack(interp, Tcl_NewListObj(0, NULL), 1);
    Tcl_ResetResult(interp);
}

/* Runs Tcl work for Python at level 0; its result as `want` asks, or its
   error raised. */
static inline PyObject *
run_global(InterpState *s, TclWork work, int want)
{
    Tcl_Interp *interp = s->interp;
    if (s->errorstack_given)
        forget_given_errorstack(s, interp);
    int code, depth = ++s->evaluations;
    Tcl_Preserve(interp);
    code = run_tcl(s, work);
    s->evaluations--;
    PyObject *result;
    if (s->interrupted == depth) {
        s->interrupted = 0;
        result = interrupted_result(interp, code, want);
    } else
        result = eval_result(interp, code, want);
    Tcl_Release(interp);
    tcl_done(s);
    return result;
}

static PyObject *
Interp_eval(InterpObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    int want;
    if (nargs != 1)
        return PyErr_Format(PyExc_TypeError, "eval() takes 1 positional argument (%zd given)",
                            nargs);
    InterpState *s = usable_wanting(self, "eval", args + nargs, kwnames, &want);
    if (s == NULL)
        return NULL;
    PyObject *script = args[0];
    if (!PyUnicode_Check(script))
        return PyErr_Format(PyExc_TypeError, "script must be str, not %.100s",
                            Py_TYPE(script)->tp_name);
    release_unused_objects();
    Tcl_Obj *obj = kept_value(&s->scripts, script);
    if (obj == NULL)
        return NULL;
    PyObject *result = run_global(s, (TclWork){s->interp, 0, TCL_EVAL_GLOBAL, 0, &obj}, want);
    Tcl_DecrRefCount(obj);
    return result;
}

static PyObject *
Interp_call(InterpObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    int want;
    InterpState *s = usable_wanting(self, "call", args + nargs, kwnames, &want);
    if (s == NULL)
        return NULL;
    Py_ssize_t n = nargs;
    if (n == 0)
        return PyErr_Format(PyExc_TypeError, "call() needs a command name");
    release_unused_objects();
    if (check_tcl_size(n, TCL_LIST_MAX, "call", "words") < 0)
        return NULL;
    Tcl_Obj *stack[CALL_STACK_ARGS], **objv = stack;
    if (n > CALL_STACK_ARGS && (objv = PyMem_New(Tcl_Obj *, n)) == NULL)
        return PyErr_NoMemory();
    Py_ssize_t made;
    unsigned long mark = handles_made;
    /* Preserved from here: converting an object runs finalizers (a handle's
       name is cleared for it), and one may delete the interpreter. */
    Tcl_Interp *interp = s->interp;
    Tcl_Preserve(interp);
    for (made = 0; made < n; made++) {
        if (made == 0 && PyUnicode_CheckExact(args[0])) {
            if ((objv[0] = kept_value(&s->command_names, args[0])) == NULL)
                break;
            continue;
        }
        objv[made] = to_tcl(s, args[made]);
        if (objv[made] == NULL)
            break;
        Tcl_IncrRefCount(objv[made]);
    }
    PyObject *result = NULL;
    if (made == n)
        result = run_global(s, (TclWork){s->interp, (Tcl_Size)n, TCL_EVAL_GLOBAL, 0, objv}, want);
    else if (handles_made != mark)
        delete_handles_since(s, mark);
    while (made-- > 0)
        Tcl_DecrRefCount(objv[made]);
    if (objv != stack)
        PyMem_Free(objv);
    Tcl_Release(interp);
    return result;
}

#define EMPTY_ENCODING "unknown encoding \"\": an empty name names none (leave " \
    "encoding out for Tcl's default; iso8859-1 reads each byte as the character of that code)"

/* eval_file's TclError for encoding '', as Tcl's for a name it does not
   know (result, errorCode TCL LOOKUP ENCODING {}), made without Tcl. */
static PyObject *
raise_empty_encoding(void)
{
    if (TclErrorType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tclamp is not configured");
        return NULL;
    }
    PyObject *exc = PyObject_CallFunction(TclErrorType, "sssi", EMPTY_ENCODING,
                                          "TCL LOOKUP ENCODING {}", EMPTY_ENCODING, TCL_ERROR);
    if (exc != NULL) {
        PyErr_SetObject(TclErrorType, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* Runs a file's script as tclsh runs its script: by Tcl_FSEvalFileEx from
   no command, at level 0.  Run by the `source` command (seen in Tcl 8.6),
   errorInfo has that command's frame and lacks others: a `while` or `for`
   body's, the file and line of a `break` or `return -code` at the top. */
static PyObject *
Interp_eval_file(InterpObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "encoding", NULL};
    PyObject *path = NULL;
    const char *encoding = NULL;
    /* A path as open() takes one (str, bytes, os.PathLike), a NUL in it a
       ValueError */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|z:eval_file", kwlist,
                                     PyUnicode_FSDecoder, &path, &encoding)
            || check_usable(self->state) < 0) {
        Py_XDECREF(path);
        return NULL;
    }
    /* A byte that is no UTF-8 decodes to a lone surrogate, which Tcl's
       file system writes as three bytes of its own: another file's name.
       Refused, as no Tcl text names that file. */
    if (PyUnicode_AsUTF8AndSize(path, NULL) == NULL) {
        Py_DECREF(path);
        return NULL;
    }
    /* An empty name: Tcl 8.6 read the file as bytes, Tcl 9 refuses it.
       Refused on both, as a name Tcl does not know is, before Tcl runs. */
    if (encoding != NULL && encoding[0] == '\0') {
        Py_DECREF(path);
        return raise_empty_encoding();
    }
    InterpState *s = self->state;
    release_unused_objects();
    Tcl_Obj *obj = tcl_from_str(path);
    Py_DECREF(path);
    if (obj == NULL)
        return NULL;
    Tcl_IncrRefCount(obj);
    PyObject *result = run_global(s, (TclWork){s->interp, .objv = &obj, .file = 1,
                                               .encoding = encoding}, AS_STR);
    Tcl_DecrRefCount(obj);
    return result;
}

/* Runs a script (str, or a command's Script) in the current Tcl frame (the
   caller of the running command) and returns its Outcome without raising. */
static PyObject *
Interp_evaluate(InterpObject *self, PyObject *script)
{
    InterpState *s = self->state;
    Tcl_Obj *obj = check_usable(s) < 0 ? NULL : script_to_tcl(script);
    if (obj == NULL)
        return NULL;
    PyObject *outcome = outcome_new();
    if (outcome == NULL) {
        discard(obj);
        return NULL;
    }
    Tcl_Interp *interp = s->interp;
    int code;
    Tcl_IncrRefCount(obj);
    Tcl_Preserve(interp);
    /* A body, nested on the C stack as run_body's are, and counted with
       them: past their limit, refused as there. */
    if (body_may_nest(interp)) {
        here.bodies_running++;
        code = run_tcl(s, (TclWork){interp, 0, 0, 0, &obj});
        here.bodies_running--;
    } else {
        state_hold(s);          /* as run_tcl would: tcl_done lets go */
        code = TCL_ERROR;
    }
    Tcl_DecrRefCount(obj);
    outcome_fill(outcome, interp, code);
    Tcl_Release(interp);
    tcl_done(s);
    return outcome;
}

/* The interpreter for a new command that runs `callable`; NULL (an
   exception set) when it is not usable, or `callable` is not one. */
static InterpState *
state_for_command(InterpObject *self, PyObject *callable)
{
    InterpState *s = self->state;
    if (check_usable(s) < 0)
        return NULL;
    if (!PyCallable_Check(callable)) {
        PyErr_SetString(PyExc_TypeError, "callable expected");
        return NULL;
    }
    return s;
}

static PyObject *
Interp_create_command(InterpObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"name", "callable", "planned", "script", "handle_form", NULL};
    PyObject *name, *callable, *handle_form = Py_None;
    int planned = 0, script = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UO|ppO:create_command", kwlist,
                                     &name, &callable, &planned, &script, &handle_form))
        return NULL;
    InterpState *s = state_for_command(self, callable);
    if (s == NULL)
        return NULL;
    if (script && !planned)
        return PyErr_Format(PyExc_ValueError, "a script command is a planned one");
    if (handle_form == Py_None) {
        handle_form = NULL;
    } else if (!planned || script || !PyTuple_Check(handle_form) || PyTuple_GET_SIZE(handle_form) != 4
               || !PyTuple_Check(PyTuple_GET_ITEM(handle_form, 0))
               || PyTuple_GET_SIZE(PyTuple_GET_ITEM(handle_form, 0)) == 0
               || !PyUnicode_CheckExact(PyTuple_GET_ITEM(handle_form, 1))
               || !PyTuple_Check(PyTuple_GET_ITEM(handle_form, 2))
               /* a str or None: a plan's dict result maps, which this answer would not */
               || (PyTuple_GET_ITEM(handle_form, 3) != Py_None
                   && !PyUnicode_CheckExact(PyTuple_GET_ITEM(handle_form, 3)))) {
        return PyErr_Format(PyExc_ValueError, "a handle form is (types, method, defaults, "
                            "result: a str or None), of a planned command that takes no script");
    } else {
        PyObject *types = PyTuple_GET_ITEM(handle_form, 0);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++) {
            if (!PyType_Check(PyTuple_GET_ITEM(types, i)))
                return PyErr_Format(PyExc_TypeError, "a handle form's types are classes");
        }
    }
    /* The name as a script would spell it: Tcl 8.6 writes a character beyond
       the BMP (and NUL) otherwise than Python's UTF-8 does. */
    Tcl_Obj *tcl_name = tcl_from_str(name);
    if (tcl_name == NULL)
        return NULL;
    Tcl_IncrRefCount(tcl_name);
    PyObject *made = add_command(s, Tcl_GetString(tcl_name), python_command, callable,
                                 planned, script, handle_form);
    Tcl_DecrRefCount(tcl_name);
    return made;
}

/* py call, eval and exec: `resolve` serves the names that py call cannot
   look up itself (bridge.resolve). */
static PyObject *
Interp_create_py_command(InterpObject *self, PyObject *args)
{
    const char *name, *kind;
    PyObject *resolve;
    if (!PyArg_ParseTuple(args, "ssO:create_py_command", &name, &kind, &resolve))
        return NULL;
    InterpState *s = state_for_command(self, resolve);
    if (s == NULL)
        return NULL;
    Tcl_ObjCmdProc *proc = strcmp(kind, "call") == 0 ? py_call_command
        : strcmp(kind, "eval") == 0 ? py_eval_command
        : strcmp(kind, "exec") == 0 ? py_exec_command : NULL;
    if (proc == NULL)
        return PyErr_Format(PyExc_ValueError, "kind must be call, eval or exec, not '%s'", kind);
    return add_command(s, name, proc, resolve, 0, 0, NULL);
}

static PyObject *
Interp_delete(InterpObject *self, PyObject *unused)
{
    InterpState *s = self->state;
    if (s != NULL && s->interp != NULL) {
        if (check_usable(s) < 0)
            return NULL;
        Tcl_DeleteInterp(s->interp);
    }
    Py_RETURN_NONE;
}

static PyObject *
Interp_get_alive(InterpObject *self, void *unused)
{
    InterpState *s = self->state;
    return PyBool_FromLong(s != NULL && s->interp != NULL && !Tcl_InterpDeleted(s->interp));
}

static PyObject *
Interp_get_evaluations(InterpObject *self, void *unused)
{
    InterpState *s = self->state;
    return PyLong_FromLong(s != NULL ? s->evaluations : 0);
}

static PyObject *
Interp_get_handle_count(InterpObject *self, void *unused)
{
    InterpState *s = self->state;
    return PyLong_FromSsize_t(s && s->handles ? PyDict_GET_SIZE(s->handles) : 0);
}

/* Deletes the handle of `obj` in this interpreter; returns how many (0 or 1). */
static PyObject *
Interp_release(InterpObject *self, PyObject *obj)
{
    InterpState *s = self->state;
    if (check_usable(s) < 0)
        return NULL;
    Handle *h = handle_of(s, obj);
    if (h == NULL)
        return PyErr_Occurred() ? NULL : PyLong_FromLong(0);
    Tcl_DeleteCommandFromToken(s->interp, h->token);
    return PyLong_FromLong(1);
}

/* What a word passes to Python as, in this interpreter: a live handle's
   object, else the str (py call's -kwlist values and list items). */
static PyObject *
Interp_argument(InterpObject *self, PyObject *word)
{
    InterpState *s = usable_given_str(self, word);
    if (s == NULL)
        return NULL;
    Tcl_Obj *obj = tcl_from_str(word);
    if (obj == NULL)
        return NULL;
    Tcl_IncrRefCount(obj);
    PyObject *value = arg_to_python(s, obj, NULL);
    Tcl_DecrRefCount(obj);
    return value;
}

/* A Tcl list's items, or a dict's keys and values (a Python dict, in Tcl's
   order, a repeated key's last value kept), as str. */
static PyObject *
words_from_tcl(Tcl_Interp *interp, Tcl_Obj *obj, int as_dict)
{
    Tcl_Size n;
    Tcl_Obj **items;
    if (as_dict && Tcl_DictObjSize(interp, obj, &n) != TCL_OK)
        return value_error(interp);
    if (Tcl_ListObjGetElements(interp, obj, &n, &items) != TCL_OK)    /* a dict's own pairs */
        return value_error(interp);
    PyObject *words = as_dict ? PyDict_New() : PyList_New(n);
    for (Tcl_Size i = 0; words != NULL && i < n; i += as_dict ? 2 : 1) {
        PyObject *item = str_from_tcl(items[i]);
        if (item != NULL && !as_dict) {
            PyList_SET_ITEM(words, i, item);
            continue;
        }
        PyObject *value = item != NULL ? str_from_tcl(items[i + 1]) : NULL;
        if (value == NULL || PyDict_SetItem(words, item, value) < 0)
            Py_CLEAR(words);
        Py_XDECREF(item);
        Py_XDECREF(value);
    }
    return words;
}

/* A word as Tcl reads a value of `kind` (bool, int, float, list or dict),
   ValueError with Tcl's message where it reads none: the torch:: commands'
   arguments and py call's -types.  Tcl's reading functions, not its
   commands, so that no trace sees it and no redefined command changes it. */
static PyObject *
Interp_read_word(InterpObject *self, PyObject *args)
{
    PyObject *word, *kind;
    if (!PyArg_ParseTuple(args, "OO:read_word", &word, &kind)
            || usable_given_str(self, word) == NULL)
        return NULL;
    Tcl_Interp *interp = self->state->interp;
    Tcl_Obj *obj = tcl_from_str(word);
    if (obj == NULL)
        return NULL;
    Tcl_IncrRefCount(obj);
    PyObject *value;
    int truth;
    if (kind == (PyObject *)&PyBool_Type)
        value = Tcl_GetBooleanFromObj(interp, obj, &truth) == TCL_OK ? PyBool_FromLong(truth)
                                                                     : value_error(interp);
    else if (kind == (PyObject *)&PyLong_Type)
        value = int_from_tcl(interp, obj);
    else if (kind == (PyObject *)&PyFloat_Type)
        value = float_from_tcl(interp, obj);
    else if (kind == (PyObject *)&PyList_Type || kind == (PyObject *)&PyDict_Type)
        value = words_from_tcl(interp, obj, kind == (PyObject *)&PyDict_Type);
    else
        value = PyErr_Format(PyExc_TypeError, "kind must be bool, int, float, list or dict, "
                             "not %R", kind);
    Tcl_DecrRefCount(obj);
    return value;
}

/* Stops the running evaluation (Ctrl-C at a prompt): any thread may ask.
   With nothing running it does nothing, so that no later evaluation is
   stopped.  The GIL, held throughout, keeps the interpreter alive: Tcl
   frees it only after interp_deleted, which takes the GIL, cleared
   s->interp. */
static PyObject *
Interp_cancel(InterpObject *self, PyObject *unused)
{
    InterpState *s = self->state;
    if (s != NULL && s->interp != NULL && s->thread != NULL && runs_script(s)) {
        s->cancel_sent = 1;
        Tcl_CancelEval(s->interp, NULL, NULL, TCL_CANCEL_UNWIND);
    }
    Py_RETURN_NONE;
}

/* Ctrl-C for Python code that waits in Tcl (under the tclamp prompt's
   `py interact`): stops the innermost evaluation that Python started here,
   if more than `outside` run, and nothing around it.  Tcl's cancel without
   TCL_CANCEL_UNWIND (`interp cancel`): one error, which ends what that
   evaluation runs unless a catch there takes it; the call that started it
   raises KeyboardInterrupt (interrupted_result).  Any thread may ask; with
   the GIL held throughout, it comes before that evaluation's end, which
   takes back what reached Tcl too late, or after it, and then sends
   nothing.  Whether it sent one. */
static PyObject *
Interp_interrupt(InterpObject *self, PyObject *args)
{
    int outside = 0;
    if (!PyArg_ParseTuple(args, "|i:interrupt", &outside))
        return NULL;
    InterpState *s = self->state;
    /* none running: nothing to stop, whatever `outside` says (a cancel sent
       to an idle interpreter would stop its next command) */
    if (s == NULL || s->interp == NULL || s->thread == NULL || s->evaluations <= outside
            || s->evaluations == 0)
        Py_RETURN_FALSE;
    s->interrupted = s->evaluations;
    Tcl_CancelEval(s->interp, NULL, NULL, 0);
    Py_RETURN_TRUE;
}

static PyObject *
Interp_handle_names(InterpObject *self, PyObject *unused)
{
    InterpState *s = self->state;
    return s && s->handles ? handle_names(s) : PyList_New(0);
}

/* The name of obj's handle in this interpreter, or None. */
static PyObject *
Interp_handle_name(InterpObject *self, PyObject *obj)
{
    InterpState *s = self->state;
    Handle *h = s != NULL ? handle_of(s, obj) : NULL;
    if (h == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    return handle_name_str(h);
}

static PyMethodDef Interp_methods[] = {
    {"cancel", (PyCFunction)Interp_cancel, METH_NOARGS,
     "cancel(): stop the evaluation running in this interpreter (from any thread)"},
    {"interrupt", (PyCFunction)Interp_interrupt, METH_VARARGS,
     "interrupt(outside=0) -> bool: Ctrl-C for Python code that waits in Tcl: the innermost "
     "evaluation Python started here, if more than `outside` run, stops with a Tcl error "
     "(a catch may catch it) and its call raises KeyboardInterrupt (from any thread)"},
    {"handle_names", (PyCFunction)Interp_handle_names, METH_NOARGS,
     "handle_names() -> list: the names of the live object handles, oldest first"},
    {"keep_in_scope", (PyCFunction)Interp_keep_in_scope, METH_O,
     "keep_in_scope(name): py keep's work: the innermost scope that began before the "
     "handle was made does not release it"},
    {"handle_name", (PyCFunction)Interp_handle_name, METH_O,
     "handle_name(obj) -> str or None: the name of obj's handle here"},
    {"eval", (PyCFunction)(void (*)(void))Interp_eval, METH_FASTCALL | METH_KEYWORDS,
     "eval(script, *, result=str): evaluate a Tcl script at global level; the result "
     "as str, or as int, float, list or object (by Tcl's own type of it)"},
    {"call", (PyCFunction)(void (*)(void))Interp_call, METH_FASTCALL | METH_KEYWORDS,
     "call(cmd, *args, result=str): call a Tcl command with converted arguments; "
     "the result as eval() gives it"},
    {"eval_file", (PyCFunction)(void (*)(void))Interp_eval_file, METH_VARARGS | METH_KEYWORDS,
     "eval_file(path, encoding=None): run a file's script as tclsh runs its script; "
     "the result, or TclError"},
    {"evaluate", (PyCFunction)Interp_evaluate, METH_O,
     "evaluate(script) -> Outcome: run a script in the calling Tcl frame, keeping its return code"},
    {"create_command", (PyCFunction)(void (*)(void))Interp_create_command,
     METH_VARARGS | METH_KEYWORDS,
     "create_command(name, callable, planned=False, script=False): a Tcl command implemented "
     "in Python (script: its last word reaches the parser and the plan's steps as a Script)"},
    {"create_py_command", (PyCFunction)Interp_create_py_command, METH_VARARGS,
     "create_py_command(name, kind, resolve): py call, eval or exec (kind) as a Tcl command"},
    {"release", (PyCFunction)Interp_release, METH_O,
     "release(obj) -> int: delete the object handle of obj (1 if it had one)"},
    {"argument", (PyCFunction)Interp_argument, METH_O,
     "argument(word): what the word passes to Python as (a live handle's object, else the str)"},
    {"read_word", (PyCFunction)Interp_read_word, METH_VARARGS,
     "read_word(word, kind): the word as Tcl reads a bool, int, float, list or dict "
     "(list items, dict keys and values as str); ValueError with Tcl's message"},
    {"delete", (PyCFunction)Interp_delete, METH_NOARGS, "delete the Tcl interpreter"},
    {NULL}
};

static PyGetSetDef Interp_getset[] = {
    {"alive", (getter)Interp_get_alive, NULL, "whether the Tcl interpreter still exists", NULL},
    {"handle_count", (getter)Interp_get_handle_count, NULL, "number of live object handles", NULL},
    {"evaluations", (getter)Interp_get_evaluations, NULL,
     "how many of Python's eval, call and eval_file run in it now (nested ones each count)", NULL},
    {NULL}
};

/* The Python object for a state: made on demand for Tcl-made interpreters
   (and kept until Tcl deletes them), the user's own for Python-made ones. */
static PyObject *
state_object(InterpState *s)
{
    if (s->object != NULL)
        return Py_NewRef((PyObject *)s->object);
    InterpObject *o = PyObject_GC_New(InterpObject, &InterpType);
    if (o == NULL)
        return NULL;
    o->state = s;
    s->refs++;
    if (!s->python_owned && s->interp != NULL) {
        s->object = o;              /* owned: released in interp_deleted */
        Py_INCREF(o);
    } else if (s->python_owned) {
        s->object = o;              /* borrowed, as Interp() does */
    }
    PyObject_GC_Track(o);
    return (PyObject *)o;
}

/* Tcl deleted the interpreter (its commands went first). */
static void
interp_deleted(ClientData cd, Tcl_Interp *interp)
{
    InterpState *s = cd;
    /* First: a __del__ that the process's end runs after Python stopped
       taking calls from Tcl may still hold the Interp. */
    s->interp = NULL;
    Entry e;
    if (enter(&e, NULL, NULL) < 0)
        return;
    unmark_for_deletion(s);
    Py_CLEAR(s->handles);           /* any object a handle still held */
    Py_CLEAR(s->scripts);           /* Tcl values: freed on their own thread */
    Py_CLEAR(s->command_names);
    if (!s->python_owned && s->object != NULL) {
        InterpObject *o = s->object;
        s->object = NULL;
        Py_DECREF(o);
    }
    state_decref(s);                /* the interpreter's reference */
    leave(&e);
}

static void
release_command_deleted(ClientData cd)
{
    Entry e;
    if (enter(&e, NULL, NULL) < 0)
        return;
    state_decref(cd);
    leave(&e);
}

/* Give `interp` the bridge: the py ensemble's C part, then tclamp._attach. */

static InterpObject *
attach(Tcl_Interp *interp, int python_owned)
{
    InterpState *s = state_new(interp, python_owned);
    if (s == NULL)
        return NULL;
    InterpObject *self = (InterpObject *)state_object(s);
    if (self == NULL) {
        state_decref(s);
        return NULL;
    }
    Tcl_SetAssocData(interp, "tclamp", interp_deleted, s);
    s->refs++;                      /* ::py::release borrows it too */
    Tcl_CreateObjCommand(interp, "::py::release", release_command, s, release_command_deleted);
    s->refs++;                      /* and ::py::scope */
    Tcl_CreateObjCommand(interp, "::py::scope", scope_command, s, release_command_deleted);

    PyObject *tclamp = PyImport_ImportModule("tclamp");
    PyObject *r = tclamp ? PyObject_CallMethod(tclamp, "_attach", "O", self) : NULL;
    Py_XDECREF(tclamp);
    if (r == NULL) {
        /* A Tcl-made interpreter keeps what was made so far until Tcl
           deletes it; ours goes now. */
        if (python_owned) {
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            Tcl_DeleteInterp(interp);
            PyErr_Restore(type, value, tb);
        }
        Py_DECREF(self);
        return NULL;
    }
    Py_DECREF(r);
    wrap_exit(interp);
    /* The one place tclamp is provided, with the version compiled in. */
    Tcl_PkgProvideEx(interp, "tclamp", TCLAMP_VERSION, NULL);
    return self;
}

/*
 * A Python-made interpreter holds objects for Python: its handles' objects
 * and its commands' callables and remembered plans, and so, through its
 * children (at any depth) that loaded tclamp, theirs.  A cycle back to its
 * object through any of them (a callback that keeps the Interp to call it
 * later) is collected as Python's own cycles are, by showing the collector
 * those references, but only where the object's end lets them all go at
 * once: the object is the interpreter's own, and the collector runs on the
 * interpreter's thread while neither it nor any of its children runs
 * anything, and the process is not ending.  Interp_clear then deletes the
 * interpreter, as that end would (its children with it).  Anywhere else
 * the collector is shown nothing, and the cycle waits for a collection
 * that can end it.  A Python-made interpreter has no parent, so each
 * child's references are shown once, by its one Python-made ancestor.
 */

/* Whether `o` is a live interpreter inside `s`'s, at any depth.  The walk
   up stops at an interpreter Tcl is deleting: its parent may be gone
   already (a finalizer that its deletion ran collected the parent). */
static int
inside(const InterpState *o, const InterpState *s)
{
    if (o->interp == NULL || o->thread != s->thread || Tcl_InterpDeleted(o->interp))
        return 0;
    for (Tcl_Interp *up = Tcl_GetParent(o->interp); up != NULL; up = Tcl_GetParent(up)) {
        if (up == s->interp)
            return 1;
        if (Tcl_InterpDeleted(up))
            return 0;
    }
    return 0;
}

static int
collectable(InterpObject *self)
{
    InterpState *s = self->state;
    if (s == NULL || handles_released || atomic_load(&python_state) != PY_RUNNING
            || !s->python_owned || s->object != self || s->interp == NULL
            || s->thread != Tcl_GetCurrentThread() || Tcl_InterpDeleted(s->interp)
            || runs_script(s))
        return 0;
    /* A child's running script (its `after` event, say) would end where it
       stands. */
    for (const InterpState *o = inner_states; o != NULL; o = o->next_inner) {
        if (inside(o, s) && runs_script(o))
            return 0;
    }
    return 1;
}

/* What an interpreter's state holds for Python, shown to the collector. */
static int
visit_held(const InterpState *s, visitproc visit, void *arg)
{
    Py_VISIT(s->handles);
    for (Handle *h = s->newest; h != NULL; h = h->older)
        Py_VISIT(h->object);
    for (Command *cmd = s->commands; cmd != NULL; cmd = cmd->next) {
        Py_VISIT(cmd->callable);
        Py_VISIT(cmd->handle_types);
        Py_VISIT(cmd->handle_defaults);
        for (int i = 0; i < MEMO_SLOTS; i++) {
            Py_VISIT(cmd->memo[i].steps);
            Py_VISIT(cmd->memo[i].result);
        }
    }
    return 0;
}

static int
Interp_traverse(InterpObject *self, visitproc visit, void *arg)
{
    if (!collectable(self))
        return 0;
    int rc = visit_held(self->state, visit, arg);
    for (const InterpState *o = inner_states; rc == 0 && o != NULL; o = o->next_inner) {
        if (inside(o, self->state))
            rc = visit_held(o, visit, arg);
    }
    return rc;
}

static int
Interp_clear(InterpObject *self)
{
    if (collectable(self))
        request_delete(self->state);    /* deleted now: it runs nothing */
    return 0;
}

static void
Interp_dealloc(InterpObject *self)
{
    PyObject_GC_UnTrack(self);
    InterpState *s = self->state;
    if (s != NULL) {
        if (s->object == self)
            s->object = NULL;
        if (s->python_owned)
            request_delete(s);      /* now, or when idle on its own thread */
        state_decref(s);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------------ */
/* Python host: load libtcl and create interpreters                     */

static Tcl_Interp *(*create_interp)(void);

/* libtcl for a Python host: the one the process has loaded already (a
   tkinter program's), else $TCLAMP_LIBTCL, else the system's by its name.
   No path of the machine that built the bridge is used. */
static int
load_libtcl(void)
{
    if (create_interp != NULL)
        return 0;
    const char *chosen = getenv("TCLAMP_LIBTCL");
    void *lib = dlopen(TCLAMP_LIBTCL_NAME, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (lib == NULL && chosen != NULL && *chosen != '\0')
        lib = dlopen(chosen, RTLD_NOW | RTLD_GLOBAL);
    else if (lib == NULL)
        lib = dlopen(TCLAMP_LIBTCL_NAME, RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL) {
        PyErr_Format(PyExc_ImportError, "cannot load the Tcl " TCL_VERSION " library (%s): set "
                     "TCLAMP_LIBTCL to the path of " TCLAMP_LIBTCL_NAME, dlerror());
        return -1;
    }
    void (*find_executable)(const char *) = (void (*)(const char *))dlsym(lib, "Tcl_FindExecutable");
    create_interp = (Tcl_Interp *(*)(void))dlsym(lib, "Tcl_CreateInterp");
    if (find_executable == NULL || create_interp == NULL) {
        create_interp = NULL;
        PyErr_SetString(PyExc_ImportError, "the Tcl library lacks Tcl_CreateInterp");
        return -1;
    }
    find_executable(NULL);
    return 0;
}

/* tclamp's two stacked channels (ordered stdout, the prompt's stdin): the
   instance data of each starts with its own Tcl_Channel, and what they do
   not change is the driver's below. */
static Tcl_Channel
stacked_below(ClientData cd)
{
    return Tcl_GetStackedChannel(*(Tcl_Channel *)cd);
}

static void
stacked_watch(ClientData cd, int mask)
{
    Tcl_Channel below = stacked_below(cd);
    Tcl_ChannelWatchProc(Tcl_GetChannelType(below))(Tcl_GetChannelInstanceData(below), mask);
}

static int
stacked_handle(ClientData cd, int direction, ClientData *handlePtr)
{
    return Tcl_GetChannelHandle(stacked_below(cd), direction, handlePtr);
}

static int
stacked_close(ClientData cd, Tcl_Interp *interp, int flags)
{
    if ((flags & (TCL_CLOSE_READ | TCL_CLOSE_WRITE)) == 0)
        ckfree(cd);
    return 0;
}

/* Python host: both Python's sys.stdout and Tcl's stdout buffer what is
   written.  Tcl's is stacked with this channel, which writes out Python's
   buffer before each write of Tcl's; Tcl's is written out before Python
   runs (flush_tcl_stdout).  So the output keeps the order it was written
   in, on a terminal, a pipe or a file. */
typedef struct {
    Tcl_Channel self;
} OrderedStdout;

static void
flush_python_stdout(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *out = PySys_GetObject("stdout");     /* borrowed */
    PyObject *done = out && out != Py_None ? PyObject_CallMethod(out, "flush", NULL) : NULL;
    Py_XDECREF(done);
    PyErr_Restore(type, value, tb);     /* a broken stream stops no Tcl output */
}

static int
ordered_output(ClientData cd, const char *buf, int toWrite, int *errorCodePtr)
{
    OrderedStdout *o = cd;
    /* Once Python is closed (Tcl's exit flushes after), it has written its
       last out, and a check of the GIL says yes to every thread. */
    if (python_usable()) {
        Entry e;
        if (PyGILState_Check()) {
            flush_python_stdout();
        } else if (enter(&e, NULL, NULL) == 0) {
            flush_python_stdout();
            leave(&e);
        }
    }
    int written = Tcl_WriteRaw(stacked_below(o), buf, toWrite);
    if (written < 0)
        *errorCodePtr = Tcl_GetErrno();
    return written;
}

static int
ordered_block_mode(ClientData cd, int mode)
{
    return 0;                   /* the channel below has its own */
}

static const Tcl_ChannelType ordered_stdout_type = {
    "tclamp-ordered-stdout", TCL_CHANNEL_VERSION_5, TCL_CLOSE2PROC, NULL, ordered_output,
    NULL, NULL, NULL, stacked_watch, stacked_handle, stacked_close, ordered_block_mode,
    NULL, NULL, NULL, NULL, NULL
};

static _Thread_local int stdout_ordered;

/* As the thread's Tcl data goes (Tcl_FinalizeThread): Tcl frees no stdout
   that is still stacked (about 1 KB a thread), and the thread may make an
   interpreter later (a C thread's next call), with a new stdout. */
static void
unorder_stdout(ClientData unused)
{
    stdout_ordered = 0;
    Tcl_Channel out = Tcl_GetStdChannel(TCL_STDOUT);
    if (out != NULL && Tcl_GetChannelType(Tcl_GetTopChannel(out)) == &ordered_stdout_type)
        Tcl_UnstackChannel(NULL, out);
}

/* Once per thread (each has its own stdout channel). */
static void
order_stdout_with_python(Tcl_Interp *interp)
{
    Tcl_Channel out = Tcl_GetStdChannel(TCL_STDOUT);
    if (stdout_ordered || out == NULL)
        return;
    stdout_ordered = 1;
    OrderedStdout *o = (OrderedStdout *)ckalloc(sizeof(OrderedStdout));
    o->self = Tcl_StackChannel(interp, &ordered_stdout_type, o, TCL_WRITABLE, out);
    if (o->self == NULL) {      /* stdout is not writable: nothing to order */
        ckfree(o);
        Tcl_ResetResult(interp);
        return;
    }
    Tcl_CreateThreadExitHandler(unorder_stdout, NULL);
}

/* The prompt's stdin (`tclamp`, `tclamp script.tcl`).  Ctrl-C there cancels
   the running script, but Tcl's own stdin driver reads again when a signal
   interrupts its read, so a `gets stdin` went on waiting for a line.  This
   channel, stacked on that one, waits for input a tenth of a second at a
   time, and fails a blocking read with EINTR once the prompt has asked
   (interrupt_stdin, after it cancelled the script) since the read began. */
typedef struct {
    Tcl_Channel self;
    int blocking;
} PromptStdin;

static atomic_uint stdin_interrupts;    /* interrupt_stdin's calls, ever */

static int
prompt_stdin_input(ClientData cd, char *buf, int toRead, int *errorCodePtr)
{
    PromptStdin *in = cd;
    Tcl_Channel below = stacked_below(cd);
    ClientData handle;
    if (in->blocking && Tcl_GetChannelHandle(below, TCL_READABLE, &handle) == TCL_OK) {
        unsigned int asked = atomic_load(&stdin_interrupts);
        struct pollfd ready = {(int)(intptr_t)handle, POLLIN, 0};
        int n;
        while ((n = poll(&ready, 1, 100)) == 0 || (n < 0 && errno == EINTR)) {
            if (atomic_load(&stdin_interrupts) != asked) {
                /* The cancel that came first takes hold now, as in `after`'s
                   wait, so that no command runs on after the read fails. */
                if (Tcl_AsyncReady())
                    Tcl_AsyncInvoke(NULL, TCL_OK);
                *errorCodePtr = EINTR;
                return -1;
            }
        }
    }
    int n = Tcl_ReadRaw(below, buf, toRead);
    if (n < 0)
        *errorCodePtr = Tcl_GetErrno();
    return n;
}

static int
prompt_stdin_block_mode(ClientData cd, int mode)
{
    Tcl_Channel below = stacked_below(cd);
    Tcl_DriverBlockModeProc *set = Tcl_ChannelBlockModeProc(Tcl_GetChannelType(below));
    ((PromptStdin *)cd)->blocking = mode == TCL_MODE_BLOCKING;
    return set ? set(Tcl_GetChannelInstanceData(below), mode) : 0;
}

/* The terminal's options (-mode, Tcl 9's -inputmode) are the driver's below. */
static int
prompt_stdin_get_option(ClientData cd, Tcl_Interp *interp, const char *name, Tcl_DString *value)
{
    Tcl_Channel below = stacked_below(cd);
    Tcl_DriverGetOptionProc *get = Tcl_ChannelGetOptionProc(Tcl_GetChannelType(below));
    if (get != NULL)
        return get(Tcl_GetChannelInstanceData(below), interp, name, value);
    return name == NULL ? TCL_OK : Tcl_BadChannelOption(interp, name, "");
}

static int
prompt_stdin_set_option(ClientData cd, Tcl_Interp *interp, const char *name, const char *value)
{
    Tcl_Channel below = stacked_below(cd);
    Tcl_DriverSetOptionProc *set = Tcl_ChannelSetOptionProc(Tcl_GetChannelType(below));
    if (set != NULL)
        return set(Tcl_GetChannelInstanceData(below), interp, name, value);
    return Tcl_BadChannelOption(interp, name, "");
}

/* seek and tell (stdin redirected from a file) are the driver's below:
   Tcl seeks only a channel whose own type can. */
static long long
prompt_stdin_wide_seek(ClientData cd, long long offset, int mode, int *errorCodePtr)
{
    Tcl_Channel below = stacked_below(cd);
    Tcl_DriverWideSeekProc *seek = Tcl_ChannelWideSeekProc(Tcl_GetChannelType(below));
    if (seek != NULL)
        return seek(Tcl_GetChannelInstanceData(below), offset, mode, errorCodePtr);
    *errorCodePtr = EINVAL;
    return -1;
}

#if TCL_MAJOR_VERSION < 9
/* Tcl 8.6 seeks a channel only if its type has the narrow one too. */
static int
prompt_stdin_seek(ClientData cd, long offset, int mode, int *errorCodePtr)
{
    return (int)prompt_stdin_wide_seek(cd, offset, mode, errorCodePtr);
}
#else
#define prompt_stdin_seek NULL
#endif

static const Tcl_ChannelType prompt_stdin_type = {
    "tclamp-prompt-stdin", TCL_CHANNEL_VERSION_5, TCL_CLOSE2PROC, prompt_stdin_input, NULL,
    prompt_stdin_seek, prompt_stdin_set_option, prompt_stdin_get_option, stacked_watch,
    stacked_handle, stacked_close, prompt_stdin_block_mode, NULL, NULL,
    prompt_stdin_wide_seek, NULL, NULL
};

/* interruptible_stdin(): this thread's Tcl stdin becomes the prompt's (once). */
static PyObject *
bridge_interruptible_stdin(PyObject *module, PyObject *unused)
{
    Tcl_Channel in = Tcl_GetStdChannel(TCL_STDIN);
    if (in != NULL && Tcl_GetChannelType(Tcl_GetTopChannel(in)) != &prompt_stdin_type) {
        PromptStdin *p = (PromptStdin *)ckalloc(sizeof(PromptStdin));
        Tcl_DString mode;
        Tcl_DStringInit(&mode);
        Tcl_GetChannelOption(NULL, in, "-blocking", &mode);
        p->blocking = strcmp(Tcl_DStringValue(&mode), "0") != 0;
        Tcl_DStringFree(&mode);
        p->self = Tcl_StackChannel(NULL, &prompt_stdin_type, p, TCL_READABLE, in);
        if (p->self == NULL)    /* stdin is not readable: nothing waits on it */
            ckfree(p);
    }
    Py_RETURN_NONE;
}

/* interrupt_stdin(): a blocking read of the prompt's stdin that began
   before it ends, interrupted (EINTR); any thread may ask. */
static PyObject *
bridge_interrupt_stdin(PyObject *module, PyObject *unused)
{
    atomic_fetch_add(&stdin_interrupts, 1);
    Py_RETURN_NONE;
}

static PyObject *
Interp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0))
        return PyErr_Format(PyExc_TypeError, "Interp() takes no arguments");
    if (thread_is_ending()) {
        /* (a finalizer that the thread's end runs): none would delete it */
        PyErr_SetString(PyExc_RuntimeError,
                        "this thread is ending: it can make no Tcl interpreter");
        return NULL;
    }
    if (Py_IsFinalizing()) {
        /* (a finalizer of Python's end): the interpreters have gone */
        PyErr_SetString(PyExc_RuntimeError,
                        "the process is exiting: it can make no Tcl interpreter");
        return NULL;
    }
    if (load_libtcl() < 0)
        return NULL;
    Tcl_Interp *interp = create_interp();
    if (Tcl_InitStubs(interp, TCLAMP_TCL_VERSIONS, 0) == NULL) {
        PyErr_SetString(PyExc_ImportError, "the Tcl library is not Tcl " TCL_VERSION);
        return NULL;
    }
    tcl_ready = 1;
    find_tcl_types();
    watch_tcl_exit();
    run_pending_deletions();
    if (Tcl_Init(interp) != TCL_OK) {
        raise_tcl_error(interp, TCL_ERROR, 0);
        Tcl_DeleteInterp(interp);
        return NULL;
    }
    if (guard_python_thread() < 0) {
        Tcl_DeleteInterp(interp);
        return NULL;
    }
    order_stdout_with_python(interp);
    return (PyObject *)attach(interp, 1);
}

static PyTypeObject InterpType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tclamp._bridge.Interp",
    .tp_doc = "Interp(): a new Tcl interpreter in this thread with tclamp's commands.",
    .tp_basicsize = sizeof(InterpObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Interp_new,
    .tp_dealloc = (destructor)Interp_dealloc,
    .tp_traverse = (traverseproc)Interp_traverse,
    .tp_clear = (inquiry)Interp_clear,
    .tp_free = PyObject_GC_Del,
    .tp_methods = Interp_methods,
    .tp_getset = Interp_getset,
};

/* ------------------------------------------------------------------ */
/* The Python module                                                    */

static PyObject *
bridge_configure(PyObject *module, PyObject *args)
{
    PyObject *error_type, *describe, *steps;
    if (!PyArg_ParseTuple(args, "OOO!:configure", &error_type, &describe, &PyTuple_Type, &steps))
        return NULL;
    if (PyTuple_GET_SIZE(steps) != STEP_COUNT)
        return PyErr_Format(PyExc_TypeError, "configure: %d shutdown steps expected", STEP_COUNT);
    Py_XSETREF(TclErrorType, Py_NewRef(error_type));
    Py_XSETREF(describe_error, Py_NewRef(describe));
    Py_XSETREF(shutdown_steps, Py_NewRef(steps));
    Py_RETURN_NONE;
}

static PyObject *
bridge_current(PyObject *module, PyObject *unused)
{
    return here.current ? state_object(here.current) : Py_NewRef(Py_None);
}

static PyObject *
bridge_thread_ended(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(thread_is_ending());
}

/* memo(enabled), memo() -> bool: whether commands remember their plans
   (python_command).  A test and diagnostic switch: off, every call parses
   its words and runs its plan's steps, and no program runs; kept plans
   stay, unused, until it is on again. */
static PyObject *
bridge_memo(PyObject *module, PyObject *args)
{
    int enabled = -1;
    if (!PyArg_ParseTuple(args, "|p:memo", &enabled))
        return NULL;
    if (enabled >= 0)
        atomic_store(&memo_on, enabled);
    return PyBool_FromLong(atomic_load(&memo_on));
}

/* main_or_builtin(name, missing): what `name` means in __main__, then in
   builtins; `missing` if neither has it. */
static PyObject *
bridge_main_or_builtin(PyObject *module, PyObject *args)
{
    PyObject *name, *missing;
    if (!PyArg_ParseTuple(args, "UO:main_or_builtin", &name, &missing))
        return NULL;
    PyObject *found = look_up_first(name);
    return found != NULL || PyErr_Occurred() ? found : Py_NewRef(missing);
}

/* tohil, loaded into a Tcl interpreter of this thread, runs Python without
   taking the GIL: from now on this thread keeps the GIL, with its own
   thread state, whenever it is in Tcl, as tohil itself does (so other
   threads run Python only while this one does). */
static PyObject *
bridge_keep_gil(PyObject *module, PyObject *unused)
{
    here.holding = 1;
    Py_RETURN_NONE;
}

static PyMethodDef bridge_methods[] = {
    {"configure", bridge_configure, METH_VARARGS,
     "configure(TclError, describe_error, shutdown_steps): set by tclamp on import"},
    {"use_aten", bridge_use_aten, METH_VARARGS,
     "use_aten(functions, dtype_names), use_aten(None), use_aten() -> bool: whether plans' "
     "programs run (see aten.py)"},
    {"main_or_builtin", bridge_main_or_builtin, METH_VARARGS,
     "main_or_builtin(name, missing): what name means in __main__, then in builtins, else missing"},
    {"memo", bridge_memo, METH_VARARGS,
     "memo(enabled), memo() -> bool: whether commands remember their plans (a test switch)"},
    {"serve_tkinter", bridge_serve_tkinter, METH_VARARGS,
     "serve_tkinter(interpaddr, path) -> bool: a tkinter interpreter of this thread runs "
     "tclamp's Tcl work (tkinter_entry.py), if its module at path uses tclamp's Tcl"},
    {"keep_gil", bridge_keep_gil, METH_NOARGS,
     "keep_gil(): this thread keeps the GIL while it runs Tcl (for tohil)"},
    {"interruptible_stdin", bridge_interruptible_stdin, METH_NOARGS,
     "interruptible_stdin(): this thread's Tcl stdin becomes the prompt's, whose blocking "
     "read interrupt_stdin() ends"},
    {"interrupt_stdin", bridge_interrupt_stdin, METH_NOARGS,
     "interrupt_stdin(): a blocking read of the prompt's stdin ends with EINTR (any thread)"},
    {"current", bridge_current, METH_NOARGS,
     "the Interp whose Tcl command is running Python in this thread, or None"},
    {"thread_ended", bridge_thread_ended, METH_NOARGS,
     "thread_ended() -> bool: this thread is ending, and Interp() refuses"},
    {"at_python_exit", bridge_at_python_exit, METH_NOARGS,
     "delete this thread's Python-made interpreters and flush Tcl's output (atexit)"},
    {"after_fork_in_child", bridge_after_fork_in_child, METH_NOARGS,
     "in a fork's child: the interpreters of the threads it lacks are no thread's"},
    {NULL}
};

/* The speed layers this build leaves out (see bridge.h), for the tests. */
static const char built_without[] = ""
#ifdef TCLAMP_NO_ACCELERATORS
    " accelerators"
#endif
#ifdef TCLAMP_NO_ATEN
    " aten"
#endif
    ;

static struct PyModuleDef bridge_module = {
    PyModuleDef_HEAD_INIT, MODULE_NAME(TCL_MAJOR_VERSION),
    "tclamp's Tcl<->Python bridge (see _bridge.c and interp.c).", -1, bridge_methods,
};

PyMODINIT_FUNC
BRIDGE_INIT(void)
{
    if (PyType_Ready(&InterpType) < 0 || ThreadGuard_ready() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&bridge_module);
    if (m == NULL || core_add_to_module(m) < 0) {
        Py_XDECREF(m);
        return NULL;
    }
#ifdef Py_GIL_DISABLED
    /* A free-threaded Python turns its GIL on for us (threading notes). */
    if (PyUnstable_Module_SetGIL(m, Py_MOD_GIL_USED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    PyObject *aten_ops = aten_op_table();
    int added = aten_ops != NULL && PyModule_AddObjectRef(m, "ATEN_OPS", aten_ops) == 0;
    Py_XDECREF(aten_ops);
    if (!added || PyModule_AddObjectRef(m, "Interp", (PyObject *)&InterpType) < 0
            || PyModule_AddStringConstant(m, "VERSION", TCLAMP_VERSION) < 0
            || PyModule_AddStringConstant(m, "TCL_VERSION", TCL_VERSION) < 0
            || PyModule_AddStringConstant(m, "BUILT_WITHOUT", built_without + (*built_without == ' ')) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    int not_started = PY_NOT_STARTED;   /* imported by a Python host */
    atomic_compare_exchange_strong(&python_state, &not_started, PY_RUNNING);
    return m;
}

/* ------------------------------------------------------------------ */
/* The Tcl extension: stubs, Python, then this interpreter attached     */

int
Tclamp_Init(Tcl_Interp *interp)
{
    if (Tcl_InitStubs(interp, TCLAMP_TCL_VERSIONS, 0) == NULL
            || lifecycle_start(interp, BRIDGE_INIT) != TCL_OK)
        return TCL_ERROR;
    find_tcl_types();
    Entry e;
    if (enter(&e, NULL, interp) < 0)
        return TCL_ERROR;
    int rc = check_same_bridge(interp, BRIDGE_INIT);
    if (rc == TCL_OK) {
        InterpObject *self = attach(interp, 0);
        if (self == NULL)
            rc = report_python_error(NULL, interp);
        Py_XDECREF(self);
    }
    leave(&e);
    if (rc != TCL_OK)
        return rc;
    lifecycle_loaded();
    if (!python_started_here)   /* a Python program's Tcl (tkinter) */
        order_stdout_with_python(interp);
    return TCL_OK;
}
