/*
 * _bridge.c -- tclamp's Tcl<->Python bridge: the core.
 *
 * This one shared object is both the Python extension module
 * `tclamp._bridge` and the Tcl extension `Tclamp` (Tclamp_Init), so one
 * process never holds two copies of the bridge's state.
 *
 *   Tcl host:    `package require tclamp` loads the shared object;
 *                Tclamp_Init starts CPython in the environment named by
 *                $TCLAMP_PYTHON or ::tclamp::python (set by pkgIndex.tcl),
 *                then hands the interpreter to tclamp._attach, which
 *                registers the commands.
 *   Python host: `import tclamp` loads it as a module; Interp() loads
 *                libtcl, creates an interpreter and attaches it the same way.
 *                Python may also be running already when Tcl loads us (a
 *                program using tkinter, an application embedding both).
 *
 * Everything that is policy (argument parsing, the torch:: commands, error
 * texts) lives in Python.  This file, the core, converts values, moves
 * errors across with their details, manages the GIL and the lifetimes of
 * interpreters and handles, and runs command "plans" (see python_command).
 * interp.c, on top of it, holds the Interp type, the Python host and both
 * ways in (the module's init, Tclamp_Init).  bridge.h has the shared types,
 * the lifetime rules and how each entry point holds the GIL; the speed
 * layers and the process's start and end are files of their own.
 */
#include "bridge.h"
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CODE_CACHE_SIZE 128     /* py eval/exec sources kept compiled, per interpreter */
#define DELETE_RETRY_MS 10      /* an interpreter still running is deleted later */

/* Set once by tclamp/__init__.py through _bridge.configure (interp.c). */
PyObject *TclErrorType, *describe_error;

/* ------------------------------------------------------------------ */
/* Entering Python from Tcl                                             */

/* First contact of a thread: remember to clean up at its end, and give a
   pure Tcl thread a Python thread state of its own (taking the GIL). */
static void
first_contact(ThreadBridge *t, Entry *e)
{
    t->known = 1;
    Tcl_CreateThreadExitHandler(thread_exit_handler, NULL);
    if (PyGILState_GetThisThreadState() != NULL)
        return;                 /* one of Python's threads */
    PyGILState_Ensure();        /* creates the state, takes the GIL; kept */
    t->own = PyThreadState_Get();
    atomic_fetch_add(&tcl_threads_in_python, 1);
    e->restored = t->own;       /* leave() parks it */
}

/* Why Python takes no call from Tcl now, as a Tcl error in `interp` if
   given; -1. */
static int
python_refused(Tcl_Interp *interp)
{
    if (interp != NULL && atomic_load(&python_finalized)) {
        Tcl_SetObjResult(interp, Tcl_NewStringObj("Python has been finalized", -1));
        Tcl_SetErrorCode(interp, "TCLAMP", "FINALIZED", NULL);
    } else if (interp != NULL) {
        /* Python still runs (a __del__ that the end of the process set
           off, say), but takes no more calls from Tcl. */
        Tcl_SetObjResult(interp, Tcl_NewStringObj(
            "the process is exiting: Python takes no more calls from Tcl", -1));
        Tcl_SetErrorCode(interp, "TCLAMP", "EXITING", NULL);
    }
    return -1;
}

/* Takes the GIL for this thread; returns -1 (a Tcl error in `interp` if
   given) when Python is no longer there to enter. */
int
enter(Entry *e, InterpState *owner, Tcl_Interp *interp)
{
    ThreadBridge *t = &here;
    /* Counted before the check: the closing thread reads the count after
       marking Python closed, so it either sees us or we see the mark. */
    if (t->depth == 0)
        atomic_fetch_add(&entries_active, 1);
    if (!python_usable()) {
        if (t->depth == 0)
            atomic_fetch_sub(&entries_active, 1);
        return python_refused(interp);
    }
    wait_if_python_finalizing();
    e->restored = NULL;
    e->ensured = 0;
    e->swapped = NULL;
    /* Holding the GIL, and called from tohil's subinterpreter: this
       thread's own state, in the main interpreter, for the while.  (Not
       PyGILState_Check: a subinterpreter turns it off.) */
    if (t->holding) {
        PyThreadState *mine = PyGILState_GetThisThreadState();
        PyThreadState *current = PyThreadState_Swap(mine);
        if (current != mine)
            e->swapped = current;
    }
    if (t->parked != NULL) {
        e->restored = t->parked;
        t->parked = NULL;
        PyEval_RestoreThread(e->restored);
    } else {
        if (!t->known)
            first_contact(t, e);
        /* Not when this thread's own state holds the GIL already (Python
           deletes an interpreter, say): PyGILState_Release may be clearing
           that state now (a C thread's callback ends), and our Release
           would then delete it under the code that called us. */
        PyThreadState *now = PyThreadState_GetUnchecked();
        if (e->restored == NULL && (now == NULL || now != PyGILState_GetThisThreadState())) {
            e->gil = PyGILState_Ensure();
            e->ensured = 1;
        }
    }
    e->saved = t->current;
    t->current = owner;
    t->depth++;
    if (owner != NULL)
        state_hold(owner);
    return 0;
}

void
leave(Entry *e)
{
    ThreadBridge *t = &here;
    if (t->current != NULL)
        state_unhold(t->current);
    t->depth--;
    t->current = e->saved;
    if (e->restored != NULL && !t->holding)
        t->parked = PyEval_SaveThread();
    else if (e->ensured)
        PyGILState_Release(e->gil);
    if (e->swapped != NULL)
        PyThreadState_Swap(e->swapped);
    if (t->depth == 0)
        atomic_fetch_sub(&entries_active, 1);
}

/* Tcl's stdout is buffered and Python's is not when Tcl hosts: writing out
   what Tcl holds before Python runs keeps the two in order, and nothing
   is left in a thread's buffer if another thread ends the process. */
void
flush_tcl_stdout(void)
{
    Tcl_Channel out = Tcl_GetStdChannel(TCL_STDOUT);
    if (out != NULL && Tcl_OutputBuffered(out) > 0)
        Tcl_Flush(out);
}

static void
lifetime_enter(Lifetime *l)
{
    l->busy++;
}

static void
lifetime_leave(Lifetime *l)
{
    if (--l->busy == 0 && l->deleted)
        l->free(l);
}

static void
lifetime_delete(Lifetime *l)
{
    l->deleted = 1;
    if (l->busy == 0)
        l->free(l);
}

/* Every command implemented here begins and ends a call the same way:
   Python entered, and its record held, so that a deletion while it runs
   waits for its end. */
static int
command_begin(Entry *e, InterpState *owner, Lifetime *life, Tcl_Interp *interp)
{
    if (enter(e, owner, interp) < 0)
        return -1;
    lifetime_enter(life);
    return 0;
}

static int
command_end(Entry *e, Lifetime *life, int rc)
{
    lifetime_leave(life);
    leave(e);
    return rc;
}

/* A record's command is deleted: the record goes once no call runs it. */
static void
record_deleted(Lifetime *life)
{
    Entry e;
    if (enter(&e, NULL, NULL) < 0)
        return;                 /* Python is gone: nothing left to free */
    lifetime_delete(life);
    leave(&e);
}

/* ------------------------------------------------------------------ */
/* Interpreters                                                         */

/* The states of interpreters that have a parent (children that loaded
   tclamp): the cycle collector's (Interp_traverse).  Guarded by the GIL. */
InterpState *inner_states;

InterpState *
state_new(Tcl_Interp *interp, int python_owned)
{
    InterpState *s = (InterpState *)PyMem_Calloc(1, sizeof(InterpState));
    if (s == NULL)
        return (InterpState *)PyErr_NoMemory();
    s->handles = PyDict_New();
    s->by_object = PyDict_New();
    if (s->handles == NULL || s->by_object == NULL) {
        Py_XDECREF(s->handles);
        Py_XDECREF(s->by_object);
        PyMem_Free(s);
        return NULL;
    }
    s->interp = interp;
    s->thread = Tcl_GetCurrentThread();
    s->python_owned = python_owned;
    s->refs = 1;                /* the interpreter's own */
    s->next = all_states;
    if (all_states)
        all_states->prev = s;
    all_states = s;
    if (Tcl_GetParent(interp) != NULL) {
        s->next_inner = inner_states;
        if (inner_states)
            inner_states->prev_inner = s;
        inner_states = s;
    }
    return s;
}

/* Drops one reference; the last frees the state.  Needs the GIL. */
void
state_decref(InterpState *s)
{
    if (--s->refs > 0)
        return;
    if (s->prev) s->prev->next = s->next; else all_states = s->next;
    if (s->next) s->next->prev = s->prev;
    if (s->prev_inner || inner_states == s) {
        if (s->prev_inner) s->prev_inner->next_inner = s->next_inner;
        else inner_states = s->next_inner;
        if (s->next_inner) s->next_inner->prev_inner = s->prev_inner;
    }
    Py_CLEAR(s->handles);
    Py_CLEAR(s->by_object);
    Py_CLEAR(s->scripts);       /* emptied already, on the interpreter's thread */
    Py_CLEAR(s->command_names);
    Py_CLEAR(s->codes[0]);
    Py_CLEAR(s->codes[1]);
    PyMem_Free(s);
}

void
state_hold(InterpState *s)
{
    s->busy++;
}

/* Python runs Tcl in it (busy: a compiled loop may call no command, so Tcl
   counts no level), or Tcl runs a command of its own there. */
int
runs_script(const InterpState *s)
{
    return s->busy > 0 || Tcl_InterpActive(s->interp);
}

void
state_unhold(InterpState *s)
{
    if (--s->busy == 0 && s->delete_requested && s->interp != NULL)
        request_delete(s);
}

int
check_usable(InterpState *s)
{
    if (s == NULL || s->interp == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Tcl interpreter has been deleted");
        return -1;
    }
    if (s->thread != Tcl_GetCurrentThread()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a Tcl interpreter can only be used from the thread that created it");
        return -1;
    }
    return 0;
}

/* The interpreter is deleted now if that is safe, else when it is next
   idle on its own thread (Tcl forbids deleting an interpreter that runs). */
static void
delete_later(ClientData cd)
{
    InterpState *s = cd;
    Entry e;
    if (enter(&e, NULL, NULL) < 0)
        return;
    request_delete(s);
    state_decref(s);            /* the timer's reference */
    leave(&e);
}

/* delete_requested, set and cleared here only, so that deletions_pending
   counts the states that have it (run_pending_deletions looks only then). */
static void
mark_for_deletion(InterpState *s)
{
    if (!s->delete_requested) {
        s->delete_requested = 1;
        atomic_fetch_add(&deletions_pending, 1);
    }
}

void
unmark_for_deletion(InterpState *s)
{
    if (s->delete_requested) {
        s->delete_requested = 0;
        atomic_fetch_sub(&deletions_pending, 1);
    }
}

void
request_delete(InterpState *s)
{
    if (s->interp == NULL || s->thread == NULL)
        return;                 /* gone, or its thread ended and left it */
    if (s->thread != Tcl_GetCurrentThread()) {
        mark_for_deletion(s);
        return;                 /* its own thread does it (run_pending_deletions) */
    }
    if (runs_script(s)) {
        mark_for_deletion(s);
        if (s->busy == 0) {     /* running from an event: try again soon */
            s->refs++;
            Tcl_CreateTimerHandler(DELETE_RETRY_MS, delete_later, s);
        }
        return;
    }
    unmark_for_deletion(s);
    Tcl_DeleteInterp(s->interp);
}

static int
is_left_to_us(const InterpState *s)
{
    return s->delete_requested && s->busy == 0;
}

/* Deletes this thread's interpreters that were left to it (their last
   Python reference went in another thread, or while they ran). */
void
run_pending_deletions(void)
{
    if (atomic_load_explicit(&deletions_pending, memory_order_relaxed) == 0)
        return;
    InterpState *s;
    while ((s = idle_here(is_left_to_us)) != NULL)
        request_delete(s);
}

/* ------------------------------------------------------------------ */
/* Value conversion                                                     */

/* A value past the running Tcl's size limit (2 GiB of text in 8.6; see
   TCL_LIST_MAX for lists) is an error, never cut. */
int
check_tcl_size(Py_ssize_t n, Py_ssize_t most, const char *what, const char *unit)
{
    if (n > most) {
        PyErr_Format(PyExc_OverflowError, "%s too long for Tcl: %zd %s (at most %zd)",
                     what, n, unit, most);
        return -1;
    }
    return 0;
}

/* Tcl's own value types, known once Tcl's stubs are ready (find_tcl_types):
   a value is read by its type where that saves parsing its text.  Each is
   learnt from a value Tcl makes, since Tcls register different names
   (Tcl 9 registers no "int"). */
const Tcl_ObjType *string_type, *int_type, *wide_type, *bignum_type,
    *double_type, *list_type, *dict_type, *bytearray_type;

static const Tcl_ObjType *
type_of(Tcl_Obj *obj)
{
    Tcl_IncrRefCount(obj);
    const Tcl_ObjType *type = obj->typePtr;
    Tcl_DecrRefCount(obj);
    return type;
}

static void
look_up_tcl_types(void)
{
    const Tcl_UniChar unit = 'x';
    Tcl_Obj *one = Tcl_NewIntObj(1);
    Tcl_Obj *big = Tcl_NewStringObj("0x10000000000000000", -1);
    Tcl_WideInt unused;
    string_type = type_of(Tcl_NewUnicodeObj(&unit, 1));
    int_type = type_of(Tcl_NewWideIntObj(1));
    wide_type = type_of(Tcl_NewWideIntObj((Tcl_WideInt)1 << 40));  /* differs where long is 32 bits */
    Tcl_IncrRefCount(big);
    Tcl_GetWideIntFromObj(NULL, big, &unused);      /* too big: parsed as a bignum */
    bignum_type = big->typePtr;
    Tcl_DecrRefCount(big);
    double_type = type_of(Tcl_NewDoubleObj(0.5));
    list_type = type_of(Tcl_NewListObj(1, &one));
    dict_type = type_of(Tcl_NewDictObj());
    bytearray_type = type_of(Tcl_NewByteArrayObj((const unsigned char *)"x", 1));
}

void
find_tcl_types(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, look_up_tcl_types);
}

/* Tcl's code units (UTF-16 in 8.6, UTF-32 in 9) as a str; surrogates that
   make a pair become one character, a lone one is kept. */
static PyObject *
str_from_units(Tcl_Obj *obj)
{
    Tcl_Size n;
    Tcl_UniChar *u = Tcl_GetUnicodeFromObj(obj, &n);
    int order = PY_BIG_ENDIAN ? 1 : -1;         /* native; a BOM is a character */
    return UNITS_ARE_UTF16
        ? PyUnicode_DecodeUTF16((const char *)u, (Py_ssize_t)n * 2, "surrogatepass", &order)
        : PyUnicode_DecodeUTF32((const char *)u, (Py_ssize_t)n * 4, "surrogatepass", &order);
}

PyObject *
str_from_tcl(Tcl_Obj *obj)
{
    /* Held only as code units (a str from Python, say): read those rather
       than have Tcl write UTF-8 for us to decode. */
    int is_string = obj->typePtr == string_type && string_type != NULL;
    if (obj->bytes == NULL && is_string)
        return str_from_units(obj);
    if (obj->bytes == NULL && obj->typePtr == list_type && list_type != NULL)
        write_list_text(obj, int_type, wide_type);
    Tcl_Size len;
    const char *s = Tcl_GetStringFromObj(obj, &len);
    PyObject *str = len >= BLOCK_COPY_MIN ? ascii_str(s, len) : NULL;
    if (str != NULL)
        return str;
    /* Long text that Tcl keeps as a string: its code units decode several
       times faster than its UTF-8, and Tcl has them already (a str from
       Python carries both), or makes them as its string commands would. */
    if (is_string && len >= BLOCK_COPY_MIN)
        return str_from_units(obj);
    /* Tcl's UTF-8 is standard UTF-8 but for NUL (C0 80) and, in Tcl 8.6,
       a character beyond the BMP written as its two surrogates: those fail
       strict decoding and go through Tcl's own code units. */
    str = PyUnicode_DecodeUTF8(s, len, NULL);
    if (str != NULL || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
        return str;
    PyErr_Clear();
    /* A value that is text alone loses nothing by getting its code units,
       and keeps them for the next read. */
    if (is_string || obj->typePtr == NULL)
        return str_from_units(obj);
    /* Making code units makes a value a string: a list, a byte array or a
       dict would lose its type (and result=object would read it as text),
       so a copy of its text makes them. */
    Tcl_Obj *copy = Tcl_NewStringObj(s, len);
    Tcl_IncrRefCount(copy);
    str = str_from_units(copy);
    Tcl_DecrRefCount(copy);
    return str;
}

/* The Tcl code units of a str: in Tcl 8.6 a character beyond the BMP is
   two (a surrogate pair). */
static Py_ssize_t
tcl_units(PyObject *s)
{
    Py_ssize_t len = PyUnicode_GET_LENGTH(s), n = len;
    if (UNITS_ARE_UTF16 && PyUnicode_KIND(s) == PyUnicode_4BYTE_KIND) {
        const Py_UCS4 *data = PyUnicode_4BYTE_DATA(s);
        for (Py_ssize_t i = 0; i < len; i++)
            n += data[i] > 0xFFFF;
    }
    return n;
}

/* A str that is not ASCII (or holds NUL) as Tcl code units: Tcl then
   counts and indexes it without decoding UTF-8.  A str of the same width
   is handed over as it is; others are widened, or split into surrogate
   pairs for Tcl 8.6. */
static Tcl_Obj *
tcl_from_units(PyObject *s)
{
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (kind == (int)sizeof(Tcl_UniChar))
        return Tcl_NewUnicodeObj((const Tcl_UniChar *)data, (Tcl_Size)len);
    Py_ssize_t n = tcl_units(s);    /* fits: tcl_from_str checked */
    Tcl_UniChar *units = PyMem_New(Tcl_UniChar, n ? n : 1);
    if (units == NULL)
        return (Tcl_Obj *)PyErr_NoMemory();
    Py_ssize_t j = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (UNITS_ARE_UTF16 && c > 0xFFFF) {
            c -= 0x10000;
            units[j++] = (Tcl_UniChar)(0xD800 | (c >> 10));
            c = 0xDC00 | (c & 0x3FF);
        }
        units[j++] = (Tcl_UniChar)c;
    }
    Tcl_Obj *obj = Tcl_NewUnicodeObj(units, (Tcl_Size)n);
    PyMem_Free(units);
    return obj;
}

Tcl_Obj *
tcl_from_str(PyObject *s)
{
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    if (PyUnicode_IS_ASCII(s)) {
        const char *data = (const char *)PyUnicode_DATA(s);
        if (check_tcl_size(len, TCL_SIZE_MAX, "str", "bytes") < 0)
            return NULL;
        Tcl_Obj *obj = len >= BLOCK_COPY_MIN ? ascii_tcl(data, len) : NULL;
        if (obj != NULL)
            return obj;
        if (memchr(data, 0, len) == NULL)
            return Tcl_NewStringObj(data, (Tcl_Size)len);
    }
    /* Each code unit can take up to three bytes of Tcl's UTF-8; in Tcl 8.6
       a character beyond the BMP is two units (counted only where they can
       take a str past the limit: Tcl panics when it writes a text longer). */
    Py_ssize_t units = len > (Py_ssize_t)(TCL_SIZE_MAX / 6) ? tcl_units(s) : len;
    if (check_tcl_size(units > PY_SSIZE_T_MAX / 6 ? PY_SSIZE_T_MAX : units * 3, TCL_SIZE_MAX,
                       "str", "bytes of Tcl's UTF-8 at most") < 0)
        return NULL;
    Tcl_Obj *obj = tcl_from_units(s);
    if (obj != NULL)
        add_utf8(obj, s);
    return obj;
}

static Tcl_Obj *make_handle(InterpState *owner, PyObject *value);

/* An int too long for Python's decimal conversion limit: Tcl reads it in
   hexadecimal (no limit) and writes its own decimal digits. */
static Tcl_Obj *
big_int_to_tcl(InterpState *owner, PyObject *v)
{
    PyObject *hex = PyNumber_ToBase(v, 16);
    if (hex == NULL)
        return NULL;
    Tcl_Obj *text = tcl_from_str(hex), *value = NULL;
    Py_DECREF(hex);
    if (text == NULL)
        return NULL;
    Tcl_IncrRefCount(text);
    if (owner == NULL || owner->interp == NULL
            || Tcl_ExprObj(owner->interp, text, &value) != TCL_OK) {
        if (owner && owner->interp)
            Tcl_ResetResult(owner->interp);
        PyErr_SetString(PyExc_ValueError, "this int cannot become a Tcl integer");
        value = NULL;
    }
    Tcl_DecrRefCount(text);
    if (value == NULL)
        return NULL;
    Tcl_Obj *result = Tcl_DuplicateObj(value);     /* unshared, refcount 0 */
    Tcl_DecrRefCount(value);
    return result;
}

#define LIST_STACK_ITEMS 16     /* items of a list converted without an allocation */

static Tcl_Obj *
dict_to_tcl(InterpState *owner, PyObject *v)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    Tcl_Obj *result = Tcl_NewDictObj();
    Tcl_Size size = 0, grown;
    while (PyDict_Next(v, &pos, &key, &value)) {
        /* Held while they are converted: making a handle can run Python (a
           finalizer) that empties the dict and would free them. */
        Py_INCREF(key);
        Py_INCREF(value);
        Tcl_Obj *k = to_tcl(owner, key), *x = k ? to_tcl(owner, value) : NULL;
        Py_DECREF(key);
        Py_DECREF(value);
        if (x == NULL) {
            discard(k);
            discard(result);
            return NULL;
        }
        Tcl_IncrRefCount(k);    /* a key the dict holds already keeps its own: k goes */
        Tcl_DictObjPut(NULL, result, k, x);
        Tcl_DictObjSize(NULL, result, &grown);
        if (grown == size) {    /* 1 and '1' are one Tcl key */
            /* named as Python reads Tcl's text (NUL is C0 80 there, ...) */
            PyObject *name = str_from_tcl(k);
            if (name != NULL) {
                PyErr_Format(PyExc_ValueError,
                             "two keys of the dict are the same Tcl key \"%U\"", name);
                Py_DECREF(name);
            }
            Tcl_DecrRefCount(k);
            discard(result);
            return NULL;
        }
        Tcl_DecrRefCount(k);
        size = grown;
    }
    return result;
}

/* A list or tuple as a Tcl list: its items are converted into an array,
   which then becomes the list at its size (appending them one by one
   would grow the list as it goes). */
static Tcl_Obj *
sequence_to_tcl(InterpState *owner, PyObject *v)
{
    PyObject *seq = PySequence_Fast(v, "");     /* a subclass: what iterating it gives */
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Tcl_Obj *stack[LIST_STACK_ITEMS], **items = stack, *result = NULL;
    if (check_tcl_size(n, TCL_LIST_MAX, PyList_Check(v) ? "list" : "tuple", "items") < 0
            || (n > LIST_STACK_ITEMS && (items = PyMem_New(Tcl_Obj *, n)) == NULL)) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t made = 0;
    /* a list that converting an item changed (a handle's __del__, say) is
       read again; an int, the commonest item, is made here */
    while (made < n && made < PySequence_Fast_GET_SIZE(seq)) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, made);
        int overflow = 1;
        long long x = PyLong_CheckExact(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : 0;
        if (overflow) {         /* held while converted, as in dict_to_tcl */
            Py_INCREF(item);
            items[made] = to_tcl(owner, item);
            Py_DECREF(item);
        } else {
            items[made] = new_int_obj(x);
        }
        if (items[made] == NULL)
            break;
        made++;
    }
    if (made == n)
        result = Tcl_NewListObj((Tcl_Size)n, items);
    else if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "the list changed size while it was converted");
    if (result == NULL) {
        while (made-- > 0)
            discard(items[made]);
    }
    if (items != stack)
        PyMem_Free(items);
    Py_DECREF(seq);
    return result;
}

/* A Python value as a new (refcount 0) Tcl value, or NULL with a Python error. */
Tcl_Obj *
to_tcl(InterpState *owner, PyObject *v)
{
    if (v == Py_None)
        return Tcl_NewObj();
    if (PyBool_Check(v))
        return Tcl_NewIntObj(v == Py_True);
    if (PyLong_Check(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow && !(x == -1 && PyErr_Occurred()))
            return new_int_obj(x);
        PyErr_Clear();
        PyObject *digits = PyLong_Type.tp_repr(v);   /* decimal, any size */
        if (digits == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_ValueError))
                return NULL;
            PyErr_Clear();          /* past Python's digit limit */
            return big_int_to_tcl(owner, v);
        }
        Tcl_Obj *obj = tcl_from_str(digits);
        Py_DECREF(digits);
        Tcl_WideInt unused;
        if (obj != NULL)        /* Tcl reads the digits into a bignum (then finds it */
            Tcl_GetWideIntFromObj(NULL, obj, &unused);   /* too wide): an int, not text */
        return obj;
    }
    if (PyFloat_Check(v))
        return Tcl_NewDoubleObj(PyFloat_AS_DOUBLE(v));
    if (PyUnicode_Check(v))
        return tcl_from_str(v);
    if (PyBytes_Check(v)) {
        if (check_tcl_size(PyBytes_GET_SIZE(v), TCL_SIZE_MAX, "bytes", "bytes") < 0)
            return NULL;
        return Tcl_NewByteArrayObj((const unsigned char *)PyBytes_AS_STRING(v),
                                   (Tcl_Size)PyBytes_GET_SIZE(v));
    }
    if (PyList_Check(v) || PyTuple_Check(v) || PyDict_Check(v)) {
        if (Py_EnterRecursiveCall(" while converting a Python value to Tcl"))
            return NULL;
        Tcl_Obj *result = NULL;
        if (PyDict_Check(v)) {
            result = dict_to_tcl(owner, v);
        } else {
            result = sequence_to_tcl(owner, v);
        }
        Py_LeaveRecursiveCall();
        return result;
    }
    return make_handle(owner, v);
}

unsigned long handles_made;      /* names are unique in the process (GIL) */

/* to_tcl for a whole result: if it fails partway, the handles it made for
   the part already converted go again, so nothing is left behind (they are
   the newest: nothing else makes handles while it runs, GIL held). */
static Tcl_Obj *
result_to_tcl(InterpState *owner, PyObject *v)
{
    unsigned long mark = handles_made;
    Tcl_Obj *obj = to_tcl(owner, v);
    if (obj == NULL && handles_made != mark)
        delete_handles_since(owner, mark);
    return obj;
}

static int
is_handle_name(const char *s, Tcl_Size len)
{
    const Tcl_Size prefix = (Tcl_Size)sizeof(HANDLE_PREFIX) - 1;
    if (len <= prefix || memcmp(s, HANDLE_PREFIX, prefix) != 0)
        return 0;
    for (Tcl_Size i = prefix; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
    }
    return 1;
}

/* Whether `s` is ::py::objN for the N a handle was made with, written as
   its name was (::py::obj07 is another name). */
static int
is_own_name(const char *s, size_t len, unsigned long number)
{
    const size_t prefix = sizeof(HANDLE_PREFIX) - 1;
    return is_handle_name(s, (Tcl_Size)len) && s[prefix] != '0'
        && len - prefix == (size_t)digits_of(number)
        && strtoul(s + prefix, NULL, 10) == number;
}

/* A handle's own name, ::py::objN, in text (NUL-terminated); its length. */
#define HANDLE_TEXT_ROOM (sizeof(HANDLE_PREFIX) + 20)
static size_t
handle_text(unsigned long number, char text[HANDLE_TEXT_ROOM])
{
    const size_t len = sizeof(HANDLE_PREFIX) - 1 + digits_of(number);
    memcpy(text, HANDLE_PREFIX, sizeof(HANDLE_PREFIX) - 1);
    write_digits(number, text + len);
    text[len] = '\0';
    return len;
}

/* Whether Tcl's command table of `s` may be read here: on its thread, while
   the interpreter lives and its handles do.  (Once the objects were released
   at exit, no handle is live: the commands stay, inert.) */
static int
can_look_up(const InterpState *s)
{
    return !handles_released && s->interp != NULL && s->thread == Tcl_GetCurrentThread();
}

static int handle_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[]);

/* The handle of `s` whose command `word` names now, if any. */
static Handle *
handle_named(InterpState *s, Tcl_Obj *word)
{
    if (!can_look_up(s))
        return NULL;
    Tcl_Command token = Tcl_GetCommandFromObj(s->interp, word);
    Tcl_CmdInfo info;
    if (token == NULL || !Tcl_GetCommandInfoFromToken(token, &info)
            || info.objProc != handle_command || ((Handle *)info.objClientData)->owner != s
            || ((Handle *)info.objClientData)->gone)
        return NULL;
    return info.objClientData;
}

/* Whether handle h's command is still under the name it was made with:
   in ::py, with its own tail (Tcl tells both from the command's token,
   with no look-up by name). */
static int
under_own_name(const Handle *h)
{
    char name[HANDLE_TEXT_ROOM];
    handle_text(h->number, name);
    Tcl_CmdInfo info;
    return Tcl_GetCommandInfoFromToken(h->token, &info) && info.namespacePtr != NULL
        && strcmp(info.namespacePtr->fullName, HANDLE_NAMESPACE) == 0
        && strcmp(Tcl_GetCommandName(h->owner->interp, h->token),
                  name + sizeof(HANDLE_NAMESPACE "::") - 1) == 0;
}

/* Whether Tcl is deleting handle h's command and has taken its name
   already (a script's delete trace deleted it again): its release has
   begun, though its deletion callback has not run yet.  Tcl then names it
   "" (a command may be named so: `rename $h ::`), so the full name it
   would have must find no other command for that. */
static int
lost_name(const Handle *h)
{
    if (!can_look_up(h->owner) || *Tcl_GetCommandName(h->owner->interp, h->token) != '\0')
        return 0;
    Tcl_Obj *name = Tcl_NewObj();
    Tcl_IncrRefCount(name);
    Tcl_GetCommandFullName(h->owner->interp, h->token, name);
    const int lost = Tcl_FindCommand(h->owner->interp, Tcl_GetString(name), NULL,
                                     TCL_GLOBAL_ONLY) != h->token;
    Tcl_DecrRefCount(name);
    return lost;
}

/* The name handle h's command has now (a new Tcl value): the one it was
   made with, unless the script renamed it.  Tcl tells; no trace follows
   renames, so nothing a script's own traces do can stale it.  Where Tcl's
   table cannot be read, the name it was made with. */
Tcl_Obj *
handle_name_now(const Handle *h)
{
    if (!can_look_up(h->owner) || under_own_name(h))
        return tcl_from_str(h->name);
    Tcl_Obj *name = Tcl_NewObj();
    Tcl_GetCommandFullName(h->owner->interp, h->token, name);
    return name;
}

/* handle_name_now as a str. */
PyObject *
handle_name_str(const Handle *h)
{
    Tcl_Obj *name = handle_name_now(h);
    if (name == NULL)
        return NULL;
    Tcl_IncrRefCount(name);
    PyObject *text = str_from_tcl(name);
    Tcl_DecrRefCount(name);
    return text;
}

/* The names of the live handles of `s`, oldest first.  Off its thread, the
   names they were made with: its thread changes its list without the GIL. */
PyObject *
handle_names(InterpState *s)
{
    if (!can_look_up(s))
        return PyDict_Keys(s->handles);
    PyObject *names = PyList_New(0);
    for (Handle *h = s->newest; names != NULL && h != NULL; h = h->older) {
        const int listed = h->object != NULL && !lost_name(h);
        PyObject *name = listed ? handle_name_str(h) : NULL;
        if (listed && (name == NULL || PyList_Append(names, name) < 0))
            Py_CLEAR(names);
        Py_XDECREF(name);
    }
    if (names != NULL && PyList_Reverse(names) < 0)
        Py_CLEAR(names);
    return names;
}

/* A name of the handle form that names no live handle of `owner` now:
   where it belongs, for a clear error (handle names are unique in the
   process).  `found`: the object owner's handle made with that name holds,
   or NULL. */
static void
handle_name_error(InterpState *owner, PyObject *key, Tcl_Obj *word, PyObject *found)
{
    Tcl_Size len;
    const char *s = Tcl_GetStringFromObj(word, &len);
    const size_t prefix = sizeof(HANDLE_PREFIX) - 1;
    const unsigned long number = strtoul(s + prefix, NULL, 10);
    if (found != NULL) {
        /* Its command is elsewhere: the script renamed it. */
        for (Handle *h = owner->newest; h != NULL; h = h->older) {
            if (h->number != number || h->gone || lost_name(h))
                continue;
            PyObject *name = handle_name_str(h);
            if (name != NULL)
                PyErr_Format(PyExc_ValueError, "py object handle \"%U\" was renamed to \"%U\"",
                             key, name);
            Py_XDECREF(name);
            return;
        }
    }
    /* Asked first: a handle renamed there may have any name of the form
       (::py::obj07, a number not reached yet), which Tcl finds where it may
       read that interpreter's commands. */
    for (InterpState *other = all_states; other != NULL; other = other->next) {
        if (other == owner || other->handles == NULL)
            continue;
        int there = PyDict_Contains(other->handles, key) == 1;
        if (!there && can_look_up(other)) {
            Tcl_CmdInfo info;
            there = Tcl_GetCommandInfo(other->interp, s, &info) && info.objProc == handle_command
                && !((Handle *)info.objClientData)->gone;
        }
        if (there) {
            PyErr_Format(PyExc_ValueError,
                         "py object handle \"%U\" belongs to another interpreter", key);
            return;
        }
    }
    if (number == 0 || number > handles_made || !is_own_name(s, (size_t)len, number))
        PyErr_Format(PyExc_ValueError, "py object handle \"%U\" was never made", key);
    else
        PyErr_Format(PyExc_ValueError, "py object handle \"%U\" has been released", key);
}

/* A Tcl argument for Python: the object if it names a live handle, else
   str.  A handle goes by its command's full name: ::py::objN, or the one
   the script renamed it to (`rename $h ::mymodel`), as it comes back from
   Python. */
PyObject *
arg_to_python(InterpState *owner, Tcl_Obj *obj, int *is_handle)
{
    if (obj->bytes == NULL && obj->typePtr == string_type && string_type != NULL
            && !units_may_name_handle(obj))
        return str_from_units(obj);
    Tcl_Size len;
    const char *s = Tcl_GetStringFromObj(obj, &len);
    /* "::" too: a handle renamed to `::` has the empty name there. */
    if (len < 2 || s[0] != ':' || s[1] != ':' || owner == NULL || owner->handles == NULL)
        return str_from_tcl(obj);
    /* The handle whose command the name is, as Tcl finds it (and keeps
       what it found in the word). */
    Handle *h = handle_named(owner, obj);
    if (h != NULL) {
        if (is_handle) *is_handle = 1;
        return Py_NewRef(h->object);
    }
    /* Decoded as every text is (NUL, surrogates): a text that names no
       handle is then the str it would be anyway. */
    PyObject *key = str_from_tcl(obj);
    if (key == NULL || !is_handle_name(s, len))
        return key;
    PyObject *found = PyDict_GetItemWithError(owner->handles, key);
    if (found != NULL && !can_look_up(owner)) {
        /* No command to ask: the name it was made with is its name. */
        Py_DECREF(key);
        if (is_handle) *is_handle = 1;
        return Py_NewRef(found);
    }
    if (!PyErr_Occurred())
        handle_name_error(owner, key, obj, found);
    Py_DECREF(key);
    return NULL;
}

#define NONE_WORD "::py::None"    /* py call's default -nonevalue */

/* An argument of py call that is the None word is None (tohil's rule). */
static PyObject *
none_if_none_word(PyObject *arg)
{
    if (arg != NULL && PyUnicode_Check(arg)
            && PyUnicode_GET_LENGTH(arg) == (Py_ssize_t)sizeof(NONE_WORD) - 1
            && PyUnicode_CompareWithASCIIString(arg, NONE_WORD) == 0)
        Py_SETREF(arg, Py_NewRef(Py_None));
    return arg;
}

/* The words, then `last` when not NULL (a command's Script).  -1 with a
   Python error; call_args_release in either case. */
static int
call_args_fill(CallArgs *a, InterpState *owner, int objc, Tcl_Obj *const objv[],
               int *any_handle, int none_words, PyObject *last)
{
    int n = objc + (last != NULL);
    a->n = 0;
    a->slot = n <= CALL_STACK_ARGS ? a->stack : PyMem_New(PyObject *, (size_t)n + 2);
    if (a->slot == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (; a->n < objc; a->n++) {
        PyObject *v = arg_to_python(owner, objv[a->n], any_handle);
        if ((a->slot[a->n + 2] = none_words ? none_if_none_word(v) : v) == NULL)
            return -1;
    }
    if (last != NULL)
        a->slot[2 + a->n++] = Py_NewRef(last);
    return 0;
}

static PyObject *
call_args_call(CallArgs *a, PyObject *callable)
{
    return PyObject_Vectorcall(callable, a->slot + 2,
                               (size_t)a->n | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static void
call_args_release(CallArgs *a)
{
    if (a->slot == NULL)
        return;
    while (a->n > 0)
        Py_DECREF(a->slot[1 + a->n--]);
    if (a->slot != a->stack)
        PyMem_Free(a->slot);
}

/* ------------------------------------------------------------------ */
/* Errors, both ways                                                    */

/* By the exception's own type: isinstance would read a __class__ that the
   exception may define, and that may raise. */
static int
python_exception_is(PyObject *value, PyObject *type)
{
    return value != NULL && type != NULL && PyType_Check(type)
        && PyType_IsSubtype(Py_TYPE(value), (PyTypeObject *)type);
}

/* What C can say about an exception without running Python code: used
   when describe_error itself fails (at Python's recursion limit, say).
   A TclError keeps its own text and errorCode; anything else is its type. */
static void
describe_in_c(PyObject *value, Tcl_Obj **message, Tcl_Obj **code)
{
    *message = *code = NULL;
    if (python_exception_is(value, TclErrorType)) {
        PyObject *result = PyObject_GetAttrString(value, "result");
        PyObject *errorcode = result ? PyObject_GetAttrString(value, "errorcode") : NULL;
        if (errorcode && PyUnicode_Check(result) && PyUnicode_Check(errorcode)) {
            *message = tcl_from_str(result);
            *code = tcl_from_str(errorcode);
        }
        Py_XDECREF(result);
        Py_XDECREF(errorcode);
    }
    PyErr_Clear();
    if (*message == NULL || *code == NULL) {
        discard(*message);
        discard(*code);
        const char *type = value ? Py_TYPE(value)->tp_name : "Exception";
        *message = Tcl_NewStringObj(type, -1);
        *code = Tcl_NewListObj(0, NULL);
        Tcl_ListObjAppendElement(NULL, *code, Tcl_NewStringObj("PYTHON", -1));
        Tcl_ListObjAppendElement(NULL, *code, Tcl_NewStringObj(type, -1));
    }
}

/* A TclError's Tcl return code (break, continue, a custom code): it ends
   the command the same way when the error travels back into Tcl. */
static int
tcl_error_code(PyObject *value)
{
    int code = TCL_ERROR;
    if (python_exception_is(value, TclErrorType)) {
        PyObject *attr = PyObject_GetAttrString(value, "code");
        int overflow = 0;
        long n = attr && PyLong_Check(attr) ? PyLong_AsLongAndOverflow(attr, &overflow) : TCL_ERROR;
        if (!overflow && n != TCL_OK && n >= INT_MIN && n <= INT_MAX)   /* else an error */
            code = (int)n;
        Py_XDECREF(attr);
    }
    PyErr_Clear();
    return code;
}

/* The thread's kept exception, held while code runs that must leave a
   command's outcome as it was (finalizers of the handles a scope ends):
   one whose Tcl catches a Python error of its own would keep that one in
   its place, and the outcome's error would come back to Python as a
   TclError. */
typedef struct {
    PyObject *value;
    Tcl_Obj *code;
    PyObject *walked;
} KeptInFlight;

static KeptInFlight
hold_in_flight(void)
{
    KeptInFlight held = { Py_XNewRef(here.in_flight), here.in_flight_code,
                          Py_XNewRef(here.in_flight_walked) };
    if (held.code != NULL)
        Tcl_IncrRefCount(held.code);
    return held;
}

static void
put_back_in_flight(KeptInFlight held)
{
    ThreadBridge *t = &here;
    PyObject *value = t->in_flight, *walked = t->in_flight_walked;
    Tcl_Obj *code = t->in_flight_code;
    t->in_flight = held.value;
    t->in_flight_code = held.code;
    t->in_flight_walked = held.walked;
    Py_XDECREF(value);          /* may run code: the thread's state is set */
    Py_XDECREF(walked);
    if (code != NULL)
        Tcl_DecrRefCount(code);
}

/* A Python exception that became a Tcl error is kept (one per thread, the
   latest) with the errorCode value Tcl carries: when that same value comes
   back to Python, the error is still the exception's, which raise_tcl_error
   raises again, itself.  The torch:: commands' usage errors and TclErrors
   come back as TclError, as their errorCode says. */
static void
keep_in_flight(PyObject *value, Tcl_Obj *code)
{
    if (python_exception_is(value, TclErrorType))
        return;
    PyObject *errors = PyImport_ImportModule("tclamp.errors");
    PyObject *usage_type = errors ? PyObject_GetAttrString(errors, "UsageError") : NULL;
    int is_usage = python_exception_is(value, usage_type);
    Py_XDECREF(usage_type);
    PyErr_Clear();
    /* Kept, it must not keep what its finished frames held (a model's
       tensors, an object whose __del__ is due): see errors.release_frames. */
    PyObject *walked = errors && !is_usage
        ? PyObject_CallMethod(errors, "release_frames", "O", value) : NULL;
    Py_XDECREF(errors);
    PyErr_Clear();
    if (is_usage)
        return;
    /* The three are set before the old ones go, which may run code (a
       __del__ whose Python error Tcl keeps in their place). */
    Tcl_IncrRefCount(code);
    put_back_in_flight((KeptInFlight){ Py_NewRef(value), code, walked });
}

/* The kept exception, if `code` is its errorCode value (a new reference,
   and it is kept no more), and what release_frames did to it (`walked`, a
   new reference or NULL); else NULL. */
static PyObject *
take_in_flight(Tcl_Obj *code, PyObject **walked)
{
    ThreadBridge *t = &here;
    *walked = NULL;
    if (t->in_flight == NULL || code == NULL || code != t->in_flight_code)
        return NULL;
    PyObject *value = t->in_flight;
    t->in_flight = NULL;
    *walked = t->in_flight_walked;
    t->in_flight_walked = NULL;
    Tcl_DecrRefCount(t->in_flight_code);
    t->in_flight_code = NULL;
    return value;
}

/* A return options dict's value for `key` (borrowed), or NULL. */
Tcl_Obj *
option_value(Tcl_Obj *options, const char *key)
{
    Tcl_Obj *k = Tcl_NewStringObj(key, -1), *v = NULL;
    Tcl_IncrRefCount(k);
    Tcl_DictObjGet(NULL, options, k, &v);
    Tcl_DecrRefCount(k);
    return v;
}

/* Takes `key` out of a return options dict that only the caller holds. */
static void
remove_option(Tcl_Obj *options, const char *key)
{
    Tcl_Obj *k = Tcl_NewStringObj(key, -1);
    Tcl_IncrRefCount(k);
    Tcl_DictObjRemove(NULL, options, k);
    Tcl_DecrRefCount(k);
}

static PyObject *
dict_str(Tcl_Obj *dict, const char *key)
{
    Tcl_Obj *v = option_value(dict, key);
    return v ? str_from_tcl(v) : PyUnicode_FromString("");
}

/* The -errorstack of return options as text, for Python (a TclError's
   errorstack, a crossing's record), or NULL (a Python error set).  The
   thread remembers the text and the list: when that text goes back into
   Tcl (frames_left), the list is used, not parsed again from it, which
   cost the square of the depth for an error that crosses at each level. */
static PyObject *
errorstack_text(Tcl_Obj *options)
{
    ThreadBridge *t = &here;
    Tcl_Obj *list = option_value(options, "-errorstack");
    if (list == NULL)
        return PyUnicode_FromString("");
    PyObject *text = str_from_tcl(list);
    if (text != NULL) {
        Tcl_IncrRefCount(list);
        if (t->errorstack_list != NULL)
            Tcl_DecrRefCount(t->errorstack_list);
        t->errorstack_list = list;
        Py_XSETREF(t->errorstack_text, Py_NewRef(text));   /* a str: runs no code */
    }
    return text;
}

/* A Python exception (not a TclError) whose error came back to Python
   through Tcl keeps what its error had there, under this key of its own
   __dict__: (-errorstack, -errorinfo, (its __cause__ and __context__,
   __suppress_context__, and its traceback's first entry then, or with
   none the Python frame it came back to, each held: held), what
   errors.release_frames did to it as it went into Tcl, or None: it walks
   no further next time).  When it goes
   on into Tcl again, its errorInfo goes on from there, unless it was
   raised from or while handling another since, or with another traceback
   (with_traceback: its entries then are no longer the last of it), and
   the frames it left begin -errorstack, as a TclError's do
   (errors.crossed_tcl says which); then the key goes (the same object
   raised again later, from elsewhere, left no such frames).  The dict is
   read and written as it is, so that no attribute code of the exception's
   class runs (it may fail, or run Tcl). */
#define CROSSING_KEY "__tcl_crossing__"

/* `obj` (NULL: None) held as errors.Held: known by its id alone, it might
   be a new object made where the old one was freed. */
static PyObject *
held(PyObject *obj)
{
    PyObject *errors = PyImport_ImportModule("tclamp.errors");
    PyObject *h = errors ? PyObject_CallMethod(errors, "Held", "O", obj ? obj : Py_None) : NULL;
    Py_XDECREF(errors);
    return h;
}

static void
keep_crossing(PyObject *exc, Tcl_Obj *options, PyObject *walked)
{
    PyObject *dict = PyObject_GenericGetDict(exc, NULL);
    PyObject *errorstack = dict && PyDict_Check(dict) ? errorstack_text(options) : NULL;
    PyObject *errorinfo = errorstack ? dict_str(options, "-errorinfo") : NULL;
    PyErr_Clear();      /* nothing kept (out of memory): no call with it set */
    if (errorinfo != NULL) {
        PyObject *tb = PyException_GetTraceback(exc);
        PyObject *cause = PyException_GetCause(exc), *context = PyException_GetContext(exc);
        /* none (raised by C code, a builtin): the Python frame running now,
           whose entry will be its innermost as it goes on */
        PyObject *first = held(tb != NULL && tb != Py_None ? tb : (PyObject *)PyEval_GetFrame());
        PyObject *held_cause = held(cause), *held_context = held(context);
        Py_XDECREF(tb);
        Py_XDECREF(cause);
        Py_XDECREF(context);
        PyErr_Clear();
        PyObject *crossing = first && held_cause && held_context ? Py_BuildValue(
            "(OO(OOiO)O)", errorstack, errorinfo, held_cause, held_context,
            (int)((PyBaseExceptionObject *)exc)->suppress_context, first,
            walked ? walked : Py_None) : NULL;
        Py_XDECREF(first);
        Py_XDECREF(held_cause);
        Py_XDECREF(held_context);
        if (crossing == NULL || PyDict_SetItemString(dict, CROSSING_KEY, crossing) < 0)
            PyErr_Clear();
        Py_XDECREF(crossing);
    }
    Py_XDECREF(errorinfo);
    Py_XDECREF(errorstack);
    Py_XDECREF(dict);
}

/* The Tcl frames an exception's error left before it reached Python: a
   TclError's errorstack, or, for one whose error went on from what it had
   in Tcl, what keep_crossing kept, as describe_error gave it (`crossed`,
   borrowed; NULL when it gave none), when it is a list of pairs Tcl takes
   back; else NULL (an error raised in Python, or one whose errorstack was
   changed).  An empty one (blanks too) is NULL: seeded, Tcl would add no
   INNER frame.  What keep_crossing kept goes.  A reference of the
   caller's own: code that runs before it is used may take the list the
   thread remembers (errorstack_text) from it. */
static Tcl_Obj *
frames_left(PyObject *value, PyObject *crossed)
{
    PyObject *text = NULL;
    if (python_exception_is(value, TclErrorType)) {
        text = PyObject_GetAttrString(value, "errorstack");
    } else if (value != NULL) {
        PyObject *dict = PyObject_GenericGetDict(value, NULL);
        PyObject *crossing = dict && PyDict_Check(dict)
            ? PyDict_GetItemString(dict, CROSSING_KEY) : NULL;
        if (crossed != NULL)
            text = Py_NewRef(crossed);
        if (crossing != NULL && PyDict_DelItemString(dict, CROSSING_KEY) < 0)
            PyErr_Clear();  /* a hostile key's __eq__: tcl_from_str below runs clean */
        Py_XDECREF(dict);
    }
    Tcl_Obj *frames = text == NULL || !PyUnicode_Check(text) ? NULL
        : text == here.errorstack_text ? here.errorstack_list : tcl_from_str(text);
    Py_XDECREF(text);
    PyErr_Clear();
    if (frames == NULL)
        return NULL;
    Tcl_IncrRefCount(frames);
    Tcl_Size length;
    if (Tcl_ListObjLength(NULL, frames, &length) != TCL_OK || length == 0 || length % 2) {
        Tcl_DecrRefCount(frames);
        frames = NULL;
    }
    return frames;
}

/* Sets the interpreter's -errorstack to `frames` (taking that reference:
   a new object goes; one the caller counts stays the caller's), as
   `return -level $level -code error -errorstack $frames` would: level 0
   for an error this command raises; level 1 when nothing is raised and the
   next Tcl_ResetResult drops the errorCode that sets (NONE) unsent, where
   after level 0 it would write it to ::errorCode. */
void
set_errorstack(Tcl_Interp *interp, Tcl_Obj *frames, int level)
{
    Tcl_Obj *options = Tcl_NewListObj(0, NULL);
    Tcl_IncrRefCount(options);
    Tcl_ListObjAppendElement(NULL, options, Tcl_NewStringObj("-code", -1));
    Tcl_ListObjAppendElement(NULL, options, Tcl_NewIntObj(TCL_ERROR));
    Tcl_ListObjAppendElement(NULL, options, Tcl_NewStringObj("-level", -1));
    Tcl_ListObjAppendElement(NULL, options, Tcl_NewIntObj(level));
    Tcl_ListObjAppendElement(NULL, options, Tcl_NewStringObj("-errorstack", -1));
    Tcl_ListObjAppendElement(NULL, options, frames);
    Tcl_SetReturnOptions(interp, options);
    Tcl_DecrRefCount(options);
}

/* The pending Python exception becomes the Tcl outcome (an error, or the
   code a TclError carries); returns that code. */
int
report_python_error(InterpState *owner, Tcl_Interp *interp)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);

    /* (message, errorcode, text to add to errorInfo or None[, what
       errorInfo starts with instead of the message, or None[, the frames
       it left in Tcl before it came back to Python (frames_left)]]) */
    PyObject *desc = (describe_error && value)
        ? PyObject_CallOneArg(describe_error, value) : NULL;
    unsigned long mark = handles_made;      /* those converting it makes */
    Tcl_Obj *message = NULL, *code = NULL, *info = NULL, *head = NULL;
    Py_ssize_t size = desc != NULL && PyTuple_Check(desc) ? PyTuple_GET_SIZE(desc) : 0;
    PyObject *crossed = size == 5 ? Py_NewRef(PyTuple_GET_ITEM(desc, 4)) : NULL;
    if (size >= 3 && size <= 5) {
        message = to_tcl(owner, PyTuple_GET_ITEM(desc, 0));
        code = message ? to_tcl(owner, PyTuple_GET_ITEM(desc, 1)) : NULL;
        if (code && PyTuple_GET_ITEM(desc, 2) != Py_None)
            info = to_tcl(owner, PyTuple_GET_ITEM(desc, 2));
        if (code && size >= 4 && PyTuple_GET_ITEM(desc, 3) != Py_None
                && (head = to_tcl(owner, PyTuple_GET_ITEM(desc, 3))) == NULL) {
            /* NULLed as they go: the fallback below discards them again */
            discard(info);
            info = NULL;
            discard(code);
            code = NULL;
        }
    }
    Py_XDECREF(desc);
    PyErr_Clear();
    if (message == NULL || code == NULL) {
        discard(message);
        discard(code);
        discard(info);
        info = NULL;
        describe_in_c(value, &message, &code);
    }
    /* An error's text keeps no handle: an object in a TclError's result or
       errorCode got one that no script could release (one per error). */
    if (handles_made != mark && owner != NULL)
        delete_handles_since(owner, mark);
    int rc = tcl_error_code(value);
    if (rc == TCL_ERROR && value != NULL)
        keep_in_flight(value, code);
    /* A return that left a script Python ran, with levels to go: what is
       left of its options (raise_tcl_error) ends this command. */
    Tcl_Obj *left = NULL;
    if (rc == TCL_RETURN && value != NULL) {
        PyObject *options = PyObject_GetAttrString(value, "_return_options");
        if (options != NULL && PyUnicode_Check(options))
            left = tcl_from_str(options);
        Py_XDECREF(options);
        PyErr_Clear();
    }
    Tcl_Obj *frames = rc == TCL_ERROR ? frames_left(value, crossed) : NULL;
    Py_XDECREF(crossed);
    Py_XDECREF(value);
    Tcl_SetObjResult(interp, message);
    if (rc == TCL_ERROR) {
        /* the procs an error left before it passed through Python begin
           -errorstack */
        if (frames != NULL) {
            set_errorstack(interp, frames, 0);
            Tcl_DecrRefCount(frames);
        }
        /* The list Tcl's -errorstack holds now is this error's: the next
           evaluation from Python starts with none (run_global). */
        if (owner != NULL && owner->interp == interp)
            owner->errorstack_given = 1;
        Tcl_SetObjErrorCode(interp, code);
        if (head != NULL) {
            /* errorInfo starts with what the result is when it begins */
            Tcl_IncrRefCount(message);
            Tcl_SetObjResult(interp, head);
            Tcl_AppendObjToErrorInfo(interp, info ? info : Tcl_NewObj());
            Tcl_SetObjResult(interp, message);
            Tcl_DecrRefCount(message);
        } else if (info) {          /* errorInfo starts with the message */
            Tcl_AppendObjToErrorInfo(interp, info);
        }
    } else {
        discard(code);
        discard(info);
        discard(head);
    }
    if (left != NULL) {
        Tcl_IncrRefCount(left);
        rc = Tcl_SetReturnOptions(interp, left);
        Tcl_DecrRefCount(left);
    }
    return rc;
}

/* A command's value (NULL: the pending Python error) as its Tcl result;
   the command's return code.  Takes the reference to `value`, and drops
   it before the result is set: the last reference to an object whose
   finalizer runs Tcl (a __del__ calling tclamp.tcl.eval, which resets the
   interpreter's result) must not go after the result is in place. */
static int
command_result(InterpState *owner, Tcl_Interp *interp, PyObject *value)
{
    Tcl_Obj *obj = value ? result_to_tcl(owner, value) : NULL;
    Py_XDECREF(value);          /* a finalizer keeps a pending error as it was */
    if (obj == NULL)
        return report_python_error(owner, interp);
    Tcl_SetObjResult(interp, obj);
    return TCL_OK;
}

/* An error that a return ended the script with (`return -code error`, or
   a proc's `return -level 2`) is one Tcl has logged no frames for: its
   -errorstack in `options` is still the last logged error's, an unrelated
   one, and goes, unless the return gave it (-errorstack, -options). */
static void
drop_stale_errorstack(Tcl_Interp *interp, Tcl_Obj *options)
{
    Tcl_Obj *given = Tcl_GetReturnOptions(interp, TCL_RETURN);
    Tcl_IncrRefCount(given);
    if (option_value(given, "-errorstack") == NULL)
        remove_option(options, "-errorstack");
    Tcl_DecrRefCount(given);
}

/* The interpreter's outcome `code` (not OK) becomes tclamp.TclError with
   the code it carries, or the Python exception (KeyboardInterrupt and
   SystemExit too) that caused it; returns NULL.  `returned`: the script
   ended with a return that stands for `code` (effective_code). */
PyObject *
raise_tcl_error(Tcl_Interp *interp, int code, int returned)
{
    Tcl_Obj *options = Tcl_GetReturnOptions(interp, code);
    Tcl_IncrRefCount(options);
    if (code == TCL_ERROR && returned)
        drop_stale_errorstack(interp, options);
    if (code == TCL_ERROR) {    /* a Python exception's own error, back */
        PyObject *walked;
        PyObject *original = take_in_flight(option_value(options, "-errorcode"), &walked);
        if (original != NULL) {
            keep_crossing(original, options, walked);
            Py_XDECREF(walked);
            Tcl_DecrRefCount(options);
            Tcl_ResetResult(interp);
            PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(original)), original,
                          PyException_GetTraceback(original));
            return NULL;
        }
    }
    if (code == TCL_BREAK || code == TCL_CONTINUE) {
        Tcl_SetObjResult(interp, Tcl_ObjPrintf("invoked \"%s\" outside of a loop",
                                               code == TCL_BREAK ? "break" : "continue"));
    }   /* a return that leaves the top level, or an application's own code,
           keeps its result */
    PyObject *result = str_from_tcl(Tcl_GetObjResult(interp));
    PyObject *errorcode = code == TCL_ERROR ? dict_str(options, "-errorcode")
                                            : PyUnicode_FromString("NONE");
    PyObject *errorinfo = dict_str(options, "-errorinfo");
    PyObject *errorstack = code == TCL_ERROR ? errorstack_text(options)
                                             : PyUnicode_FromString("");
    /* A return with levels to go past the script's own (effective_code):
       its options, one level fewer, go with the exception, so that back in
       Tcl it goes on as it would have (report_python_error). */
    PyObject *left = NULL;
    if (code == TCL_RETURN) {
        Tcl_Obj *value = option_value(options, "-level");
        int level = 1;
        if (value != NULL && Tcl_GetIntFromObj(NULL, value, &level) == TCL_OK && level > 1) {
            Tcl_Obj *rest = Tcl_DuplicateObj(options), *key = Tcl_NewStringObj("-level", -1);
            Tcl_IncrRefCount(rest);
            Tcl_IncrRefCount(key);
            Tcl_DictObjPut(NULL, rest, key, Tcl_NewIntObj(level - 1));
            left = str_from_tcl(rest);
            Tcl_DecrRefCount(key);
            Tcl_DecrRefCount(rest);
        }
    }
    Tcl_DecrRefCount(options);
    Tcl_ResetResult(interp);
    if (result && errorcode && errorinfo && errorstack && TclErrorType) {
        PyObject *exc = PyObject_CallFunction(TclErrorType, "OOOiO", result, errorcode,
                                              errorinfo, code, errorstack);
        if (exc != NULL && left != NULL && PyObject_SetAttrString(exc, "_return_options", left) < 0)
            Py_CLEAR(exc);
        if (exc != NULL) {
            PyErr_SetObject(TclErrorType, exc);
            Py_DECREF(exc);
        }
    } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_RuntimeError, "tclamp is not configured");
    }
    Py_XDECREF(result);
    Py_XDECREF(errorcode);
    Py_XDECREF(errorinfo);
    Py_XDECREF(errorstack);
    Py_XDECREF(left);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Object handles: a Python object as a Tcl command                    */

/* What a Tcl value means to Python, kept as its internal representation
   (see py call, py eval and py exec): code, a dotted name's parts, or a
   handle's method name. */
enum { RUN_EVAL, RUN_EXEC, CALL_NAME, METHOD_NAME };
static PyObject *python_rep_of(Tcl_Obj *obj, int kind);
static void keep_python_rep(Tcl_Obj *obj, PyObject *meaning, int kind);

static int
handle_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    Handle *h = cd;
    if (h->gone) {              /* called by a finalizer its deletion set off */
        Tcl_SetObjResult(interp, Tcl_ObjPrintf("invalid command name \"%s\"",
                                               Tcl_GetString(objv[0])));
        Tcl_SetErrorCode(interp, "TCL", "LOOKUP", "COMMAND", Tcl_GetString(objv[0]), NULL);
        return TCL_ERROR;
    }
    if (objc < 2) {
        Tcl_WrongNumArgs(interp, 1, objv, "method ?arg ...?");
        return TCL_ERROR;
    }
    Entry e;
    if (command_begin(&e, h->owner, &h->life, interp) < 0)
        return TCL_ERROR;
    if (handles_released) {
        Tcl_SetObjResult(interp, Tcl_NewStringObj("py objects were released: the process is ending", -1));
        Tcl_SetErrorCode(interp, "TCLAMP", "FINALIZED", NULL);
        return command_end(&e, &h->life, TCL_ERROR);
    }
    int rc = TCL_ERROR;
    PyObject *object = Py_NewRef(h->object);    /* a method may release it */
    PyObject *name = python_rep_of(objv[1], METHOD_NAME);
    if (name != NULL) {
        Py_INCREF(name);
    } else if ((name = str_from_tcl(objv[1])) != NULL) {
        keep_python_rep(objv[1], name, METHOD_NAME);
    }
    PyObject *attr = name ? PyObject_GetAttr(object, name) : NULL;
    PyObject *value = NULL;
    if (attr != NULL) {
        if (PyCallable_Check(attr)) {
            CallArgs args;
            if (call_args_fill(&args, h->owner, objc - 2, objv + 2, NULL, 0, NULL) == 0)
                value = call_args_call(&args, attr);
            call_args_release(&args);
        } else if (objc == 2) {
            value = Py_NewRef(attr);        /* a plain attribute: read it */
        } else {
            PyErr_Format(PyExc_TypeError, "attribute '%U' is not callable", name);
        }
    }
    /* The object's last reference may be ours, when the method deleted
       its handle: it goes before the result is set. */
    Py_XDECREF(attr);
    Py_XDECREF(name);
    Py_DECREF(object);
    rc = command_result(h->owner, interp, value);
    return command_end(&e, &h->life, rc);
}

static void
free_handle(Lifetime *life)
{
    Handle *h = (Handle *)life;
    Py_DECREF(h->name);
    Py_DECREF(h->id);
    state_decref(h->owner);
    PyMem_Free(h);
}

/* The owner's list of live handles, newest first (py scope reads it). */
static void
link_newest(Handle *h)
{
    InterpState *owner = h->owner;
    h->newer = NULL;
    h->older = owner->newest;
    if (h->older) h->older->newer = h;
    owner->newest = h;
    /* Not always h: a finalizer that make_handle set off may have listed
       a handle numbered after h before h. */
    if (h->number > owner->top_number)
        owner->top_number = h->number;
}

static void
unlink_handle(Handle *h)
{
    if (h->newer) h->newer->older = h->older; else h->owner->newest = h->older;
    if (h->older) h->older->newer = h->newer;
}

/* The live handle of `s` whose object's id is `id`, or NULL (none, or an
   error set): by_object holds its address. */
static Handle *
handle_with_id(InterpState *s, PyObject *id)
{
    PyObject *where = PyDict_GetItemWithError(s->by_object, id);
    return where != NULL ? (Handle *)PyLong_AsVoidPtr(where) : NULL;
}

/* handle_with_id, but not one whose release has begun (lost_name): the
   object's handle as scripts and Python see it. */
static Handle *
live_handle_with_id(InterpState *s, PyObject *id)
{
    Handle *h = handle_with_id(s, id);
    return h != NULL && !lost_name(h) ? h : NULL;
}

/* obj's live handle in `s`, or NULL (none, or an error set). */
Handle *
handle_of(InterpState *s, PyObject *obj)
{
    if (s->by_object == NULL)
        return NULL;
    PyObject *id = PyLong_FromVoidPtr(obj);
    Handle *h = id != NULL ? live_handle_with_id(s, id) : NULL;
    Py_XDECREF(id);
    return h;
}

/* The handle's command is gone: the object goes with it (its last
   reference, if nothing else holds it, so __del__/close run now). */
static void
handle_deleted(ClientData cd)
{
    Handle *h = cd;
    InterpState *s = h->owner;
    /* Out of the list first: the command is gone, whatever happens next. */
    h->gone = 1;
    unlink_handle(h);
    Entry e;
    if (enter(&e, NULL, NULL) < 0)
        return;                 /* Python is gone; so is the object */
    /* An error on its way out of Python stays (Tcl deletes the commands of
       an interpreter deleted while it ran when Interp.eval releases it). */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    InterpState *outer = here.current;
    here.current = s;           /* a __del__ run now sees who released it */
    if (s->by_object != NULL && handle_with_id(s, h->id) == h
            && PyDict_DelItem(s->by_object, h->id) < 0)
        PyErr_Clear();
    /* The object goes last, once this handle is gone everywhere: Tcl finds
       the command until this returns, and a finalizer may call it. */
    PyObject *object = h->object;
    h->object = NULL;
    if (object != NULL && s->handles != NULL
            && PyDict_GetItemWithError(s->handles, h->name) == object
            && PyDict_DelItem(s->handles, h->name) < 0)
        PyErr_Clear();
    PyErr_Clear();
    Py_XDECREF(object);
    here.current = outer;
    lifetime_delete(&h->life);
    PyErr_Restore(type, value, tb);
    leave(&e);
}

/* Deletes whatever command the script put under the handle name `text`
   (a proc, a handle renamed there), so that Tcl_CreateObjCommand finds
   none.  Tcl's own deletion there is unsafe: when the deleted command's
   callbacks (a handle's finalizer) put another command under the name,
   Tcl frees that one's record without deleting it, and a handle renamed
   there kept its object, its place in the list and a dangling token.
   0, or -1 with a Python error when the name is taken again each time. */
static int
clear_handle_name(Tcl_Interp *interp, const char *text)
{
    for (int tries = 0; tries < 8; tries++) {
        Tcl_Command there = Tcl_FindCommand(interp, text, NULL, TCL_GLOBAL_ONLY);
        if (there == NULL)
            return 0;
        Tcl_DeleteCommandFromToken(interp, there);
    }
    PyErr_Format(PyExc_RuntimeError,
                 "cannot make py object handle \"%s\": a command was put under that name "
                 "again each time it was deleted", text);
    return -1;
}

static Tcl_Obj *
make_handle(InterpState *owner, PyObject *value)
{
    if (owner == NULL || owner->interp == NULL || owner->handles == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "a %.200s cannot become a Tcl value outside a Tcl interpreter",
                     Py_TYPE(value)->tp_name);
        return NULL;
    }
    PyObject *id = PyLong_FromVoidPtr(value);
    if (id == NULL)
        return NULL;
    /* One handle per object; one whose release has begun is none (a new
       one takes its place in by_object, which its deletion leaves). */
    Handle *known = live_handle_with_id(owner, id);
    if (known != NULL || PyErr_Occurred()) {
        Py_DECREF(id);
        return known != NULL ? handle_name_now(known) : NULL;
    }
    /* Taken before anything that can run Python (clearing the name may
       delete a command whose finalizer makes handles too). */
    const unsigned long number = ++handles_made;
    char text[HANDLE_TEXT_ROOM];
    const Py_ssize_t len = (Py_ssize_t)handle_text(number, text);
    /* Preserved while the clearing runs finalizers: one may delete the
       interpreter (Interp.delete), which Tcl must not free under the
       clearing's look-ups. */
    Tcl_Interp *interp = owner->interp;
    Tcl_Preserve(interp);
    int cleared = clear_handle_name(interp, text);
    Tcl_Release(interp);
    if (cleared == 0 && owner->interp == NULL)
        PyErr_SetString(PyExc_RuntimeError, "the Tcl interpreter has been deleted");
    if (cleared < 0 || owner->interp == NULL) {
        Py_DECREF(id);
        return NULL;
    }
    /* A finalizer that clearing the name ran may have made this object's
       handle: one handle per object. */
    known = live_handle_with_id(owner, id);
    if (known != NULL || PyErr_Occurred()) {
        Py_DECREF(id);
        return known != NULL ? handle_name_now(known) : NULL;
    }
    Handle *h = (Handle *)PyMem_Calloc(1, sizeof(Handle));
    PyObject *name = PyUnicode_FromStringAndSize(text, len);
    PyObject *where = PyLong_FromVoidPtr(h);
    if (h == NULL || name == NULL || where == NULL) {
        if (h == NULL)
            PyErr_NoMemory();
        PyMem_Free(h);
        Py_XDECREF(name);
        Py_XDECREF(where);
        Py_DECREF(id);
        return NULL;
    }
    h->life.free = free_handle;
    h->owner = owner;
    owner->refs++;
    h->object = Py_NewRef(value);
    h->name = name;
    h->id = id;
    h->number = number;
    /* The command first (clear_handle_name left nothing there, and
       nothing runs Python from here on). */
    h->token = Tcl_CreateObjCommand(owner->interp, text, handle_command, h, handle_deleted);
    link_newest(h);
    if (h->token == NULL) {
        /* Tcl is deleting the interpreter (a method that ran on, or a __del__
           the deletion set off): the name, which names nothing, as every
           handle's there will soon, and nothing is kept for it. */
        Py_DECREF(where);
        handle_deleted(h);
        return Tcl_NewStringObj(text, (Tcl_Size)len);
    }
    if (PyDict_SetItem(owner->handles, name, value) < 0
            || PyDict_SetItem(owner->by_object, id, where) < 0) {
        Py_DECREF(where);
        Tcl_DeleteCommandFromToken(owner->interp, h->token);    /* the error stays */
        return NULL;
    }
    Py_DECREF(where);
    return Tcl_NewStringObj(text, (Tcl_Size)len);
}

/* The number of the handle of `s` that `name` names now, else 0.  A
   handle the script renamed counts too: py keep of its new name holds
   once it is renamed back to its own name (a scope then ends it again). */
static unsigned long
handle_number(InterpState *s, PyObject *name)
{
    Tcl_Obj *word = tcl_from_str(name);     /* Tcl's form: NUL, surrogates */
    if (word == NULL) {
        PyErr_Clear();
        return 0;
    }
    Tcl_IncrRefCount(word);
    const Handle *h = handle_named(s, word);
    Tcl_DecrRefCount(word);
    return h != NULL ? h->number : 0;
}

/* Deletes the handles listed (GIL held), each that is still there under
   its own name: a finalizer that one of them runs may delete another, or
   rename it (it is then the script's).  After release_all_handles the
   commands stay, inert. */
static void
delete_handles(Handle *const *gone, size_t n)
{
    if (handles_released)
        return;
    for (size_t i = 0; i < n; i++)
        lifetime_enter(&gone[i]->life);     /* the records outlive the loop */
    for (size_t i = 0; i < n; i++) {
        Handle *h = gone[i];
        /* No Python here: a conversion's error may be pending. */
        if (!h->gone && h->owner->interp != NULL && under_own_name(h))
            Tcl_DeleteCommandFromToken(h->owner->interp, h->token);
    }
    for (size_t i = 0; i < n; i++)
        lifetime_leave(&gone[i]->life);
}

/* A list of handles that grows past its first few on the heap. */
typedef struct {
    Handle *small[16], **items;
    size_t count, room;
} HandleList;

static void
handle_list_init(HandleList *l)
{
    l->items = l->small;
    l->count = 0;
    l->room = sizeof l->small / sizeof l->small[0];
}

static void
handle_list_add(HandleList *l, Handle *h)
{
    if (l->count == l->room) {
        Handle **bigger = (Handle **)ckalloc(2 * l->room * sizeof(Handle *));
        memcpy(bigger, l->items, l->count * sizeof(Handle *));
        if (l->items != l->small)
            ckfree((char *)l->items);
        l->items = bigger;
        l->room *= 2;
    }
    l->items[l->count++] = h;
}

/* Deletes them oldest first, as they were made, then frees the list. */
static void
handle_list_delete(HandleList *l)
{
    for (size_t i = 0; i < l->count / 2; i++) {
        Handle *newer = l->items[i];
        l->items[i] = l->items[l->count - 1 - i];
        l->items[l->count - 1 - i] = newer;
    }
    delete_handles(l->items, l->count);
    if (l->items != l->small)
        ckfree((char *)l->items);
}

/* After a conversion failed partway: the handles it made go (they are the
   ones numbered above `mark`), and the Python error stays (handle_deleted
   keeps it). */
void
delete_handles_since(InterpState *owner, unsigned long mark)
{
    HandleList made;
    handle_list_init(&made);
    for (Handle *h = owner->newest; h != NULL && h->number > mark; h = h->older)
        handle_list_add(&made, h);
    handle_list_delete(&made);
}

static int wrong_args(Tcl_Interp *interp, const char *usage);

int
release_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    InterpState *owner = cd;
    if (objc != 2)
        return wrong_args(interp, "py release handle");
    Entry e;
    if (enter(&e, owner, interp) < 0)
        return TCL_ERROR;
    int is_handle = 0;
    PyObject *found = arg_to_python(owner, objv[1], &is_handle);
    Py_XDECREF(found);
    PyErr_Clear();
    leave(&e);
    if (!is_handle) {
        Tcl_SetObjResult(interp, Tcl_ObjPrintf("not a py object handle: \"%s\"",
                                               Tcl_GetString(objv[1])));
        Tcl_SetErrorCode(interp, "TCLAMP", "HANDLE", NULL);
        return TCL_ERROR;
    }
    /* The command the word names (arg_to_python looked it up, and the word
       keeps what Tcl found), whatever the name it has now. */
    Tcl_Command token = Tcl_GetCommandFromObj(interp, objv[1]);
    if (token == NULL)
        return Tcl_DeleteCommand(interp, Tcl_GetString(objv[1])) == 0 ? TCL_OK : TCL_ERROR;
    return Tcl_DeleteCommandFromToken(interp, token) == 0 ? TCL_OK : TCL_ERROR;
}

/* ------------------------------------------------------------------ */
/* Outcome: a Tcl script's return code, result and options, kept whole */

typedef struct {
    PyObject_HEAD
    int code;
    Tcl_Obj *result;
    Tcl_Obj *options;           /* NULL for a plain normal end */
} OutcomeObject;

static void
Outcome_dealloc(OutcomeObject *self)
{
    if (self->result) Tcl_DecrRefCount(self->result);
    if (self->options) Tcl_DecrRefCount(self->options);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A command that runs a script decides by the code whether it adds a
   result of its own (torch::autocast_trace does only when the script ends
   normally). */
static PyObject *
Outcome_code(OutcomeObject *self, void *unused)
{
    return PyLong_FromLong(self->code);
}

static PyGetSetDef Outcome_getset[] = {
    {"code", (getter)Outcome_code, NULL, "the script's Tcl return code (0 = ok, 1 = error, ...)"},
    {NULL}
};

static PyTypeObject OutcomeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tclamp._bridge.Outcome",
    .tp_doc = "How a Tcl script ended; returned by a command, it ends the command the same way.",
    .tp_basicsize = sizeof(OutcomeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Outcome_dealloc,
    .tp_getset = Outcome_getset,
};

/* An error in a body that a command ran (py scope's, torch::autocast's)
   ends the command as one in Tcl's own `eval` does: after the body's
   errorInfo, the line in the body; Tcl adds the command, and its line in
   the caller's script, as the error leaves it. */
static void
note_body_line(Tcl_Interp *interp, const char *command)
{
    Tcl_AppendObjToErrorInfo(interp, Tcl_ObjPrintf("\n    (\"%s\" body line %d)", command,
                                                   Tcl_GetErrorLine(interp)));
}

/* Bodies that C commands run nest on the C stack, where Tcl's procs do not:
   past this many on one thread, one is refused as Tcl refuses a nesting
   past its own limit.  That limit (1000 by default) ends a script first;
   this one holds where a script raised it (`interp recursionlimit`), which
   let nested bodies run the stack out (14,500 torch::autocast blocks or
   20,000 py scopes in 8 MiB: a crash).  Interp.evaluate (a block on the
   Python path, autocast_trace's script) counts its bodies here too. */
#define BODIES_NESTED_MAX 1000

/* Whether one more body may nest on this thread; else that error is set. */
int
body_may_nest(Tcl_Interp *interp)
{
    if (here.bodies_running < BODIES_NESTED_MAX)
        return 1;
    Tcl_SetObjResult(interp, Tcl_NewStringObj("too many nested evaluations (infinite loop?)", -1));
    Tcl_SetErrorCode(interp, "TCL", "LIMIT", "STACK", NULL);
    return 0;
}

/* Runs `command`'s body (py scope's, a remembered torch::autocast block's)
   in the caller's frame, as Tcl's own value (its bytecode is kept), and
   ends the command as the body ended: an error noted, another code as
   `catch` then `return -options` would pass it on. */
int
run_body(Tcl_Interp *interp, Tcl_Obj *body, const char *command)
{
    if (!body_may_nest(interp))
        return TCL_ERROR;
    here.bodies_running++;
    int code = Tcl_EvalObjEx(interp, body, 0);
    here.bodies_running--;
    if (code == TCL_ERROR) {
        note_body_line(interp, command);
    } else if (code != TCL_OK) {
        Tcl_Obj *options = Tcl_GetReturnOptions(interp, code);
        Tcl_IncrRefCount(options);
        code = Tcl_SetReturnOptions(interp, options);
        Tcl_DecrRefCount(options);
    }
    return code;
}

/* Ends `command` as its body ended.  An error's options go without their
   errorInfo, which is then the body's again, noted: with it, Tcl would
   take the error as logged, and report the body's line as the caller's.
   Its errorCode goes as it is, after them: `error msg {} "\{"` sets one
   that is no list, which return options refuse but `eval` passes on. */
static int
apply_outcome(Tcl_Interp *interp, OutcomeObject *o, Tcl_Obj *command)
{
    if (o->options == NULL || o->code != TCL_ERROR) {
        Tcl_SetObjResult(interp, o->result);
        return o->options ? Tcl_SetReturnOptions(interp, o->options) : TCL_OK;
    }
    Tcl_Obj *errorcode = option_value(o->options, "-errorcode");
    Tcl_Obj *info = option_value(o->options, "-errorinfo");
    Tcl_Obj *options = Tcl_DuplicateObj(o->options);
    Tcl_IncrRefCount(options);
    remove_option(options, "-errorcode");
    remove_option(options, "-errorinfo");
    int code = Tcl_SetReturnOptions(interp, options);
    if (errorcode != NULL)
        Tcl_SetObjErrorCode(interp, errorcode);
    Tcl_SetObjResult(interp, info != NULL ? info : o->result);   /* where errorInfo starts */
    note_body_line(interp, Tcl_GetString(command));
    Tcl_SetObjResult(interp, o->result);
    Tcl_DecrRefCount(options);
    return code;
}

/* An Outcome to fill, made before the script runs: once Tcl has run it,
   nothing can fail. */
PyObject *
outcome_new(void)
{
    OutcomeObject *o = PyObject_New(OutcomeObject, &OutcomeType);
    if (o != NULL) {
        o->result = o->options = NULL;
        o->code = TCL_OK;
    }
    return (PyObject *)o;
}

/* Takes how the script `interp` just ran ended (with `code`) into `outcome`;
   the interpreter's result is reset. */
void
outcome_fill(PyObject *outcome, Tcl_Interp *interp, int code)
{
    OutcomeObject *o = (OutcomeObject *)outcome;
    o->code = code;
    /* A normal end with no options of its own (just -code 0 -level 0)
       needs none to end the command the same way. */
    Tcl_Obj *options = Tcl_GetReturnOptions(interp, code);
    Tcl_Size size = 0;
    Tcl_IncrRefCount(options);
    if (code == TCL_OK && Tcl_DictObjSize(NULL, options, &size) == TCL_OK && size == 2) {
        Tcl_DecrRefCount(options);
        options = NULL;
    }
    o->options = options;
    o->result = Tcl_GetObjResult(interp);
    Tcl_IncrRefCount(o->result);
    Tcl_ResetResult(interp);
}

/* ------------------------------------------------------------------ */
/* Script: the script word of a running command, as Tcl's own value     */

/*
 * A command made with script=True (py scope, torch::autocast) gets its last
 * word as a Script, not as a str: Interp.evaluate runs the word itself, so
 * Tcl reuses the bytecode it compiled for it the last time the caller ran
 * it, where a str would become a new value, compiled on every call.  A
 * Script borrows its word from the command's arguments: when the command
 * returns the word is forgotten, so a Script kept beyond it names nothing;
 * and only the command's thread reads or runs it (any of that thread's
 * interpreters may): no Tcl value is touched from another thread through
 * one.
 */
typedef struct {
    PyObject_HEAD
    Tcl_Obj *word;              /* borrowed; NULL once its command returned */
    Tcl_ThreadId thread;        /* the command's */
} ScriptObject;

/* The word, or NULL with a RuntimeError when it is not this thread's or
   its command has returned. */
static Tcl_Obj *
script_word(ScriptObject *self)
{
    if (self->thread != Tcl_GetCurrentThread()) {
        PyErr_SetString(PyExc_RuntimeError, "this script belongs to a command of another thread");
        return NULL;
    }
    if (self->word == NULL)
        PyErr_SetString(PyExc_RuntimeError, "the command that got this script has returned");
    return self->word;
}

static PyObject *
Script_str(ScriptObject *self)
{
    Tcl_Obj *word = script_word(self);
    return word ? str_from_tcl(word) : NULL;
}

static PyTypeObject ScriptType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tclamp._bridge.Script",
    .tp_doc = "A command's script word, evaluated as Tcl's own value (str() gives its text).",
    .tp_basicsize = sizeof(ScriptObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_str = (reprfunc)Script_str,
};

static PyObject *
script_new(Tcl_Obj *word)
{
    ScriptObject *script = PyObject_New(ScriptObject, &ScriptType);
    if (script != NULL) {
        script->word = word;
        script->thread = Tcl_GetCurrentThread();
    }
    return (PyObject *)script;
}

static void
script_end(PyObject *script)
{
    if (script != NULL) {
        ((ScriptObject *)script)->word = NULL;
        Py_DECREF(script);
    }
}

/* What Interp.evaluate runs: a Script's word, or a str as a new value
   (refcount 0); NULL with an error for anything else. */
Tcl_Obj *
script_to_tcl(PyObject *script)
{
    if (Py_IS_TYPE(script, &ScriptType))
        return script_word((ScriptObject *)script);
    if (PyUnicode_Check(script))
        return tcl_from_str(script);
    PyErr_Format(PyExc_TypeError, "script must be str or Script");
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Commands implemented in Python                                       */

/*
 * A "function" command calls its callable with the converted arguments and
 * converts the value back.  A "planned" command calls its callable (a
 * parser) with the arguments and gets a plan back, a tuple
 * (tclamp.arguments.Plan):
 *
 *     (steps, result, words_only[, program])
 *     steps:      tuple of (callable, args-tuple), called in order
 *     result:     None (convert the last step's value), a dict (map that
 *                 value), or a constant
 *     words_only: true when the plan depends on the command's words alone
 *     program:    None, or the same steps as calls of ATen's autocast
 *                 functions (bytes; see aten.py and aten_programs.c)
 *
 * A words_only plan depends on the argument strings alone (never on state
 * read while planning: whatever depends on state is a step, run on every
 * call), so it is kept in a small per-command memo keyed by them: a
 * repeated call runs the steps straight from C without creating a single
 * Python object for its arguments, and one with a program runs it without
 * entering Python at all.
 *
 * A "script" command's last word is a script (a body): the parser gets it
 * as a Script, last, and makes a plan of the words before it alone, whose
 * steps take the Script as their first argument when they run.  So the
 * body's options are parsed once, and the memo is keyed by them.
 */
/* Whether commands remember plans, for the whole process: always, but
   for a test or a diagnosis that turns it off (_bridge.memo) to see that
   remembering changes nothing.  Read before the GIL is taken. */
atomic_int memo_on = 1;

static int
memo_matches(const Memo *m, int objc, Tcl_Obj *const objv[])
{
    if (m->objc != objc)
        return 0;
    const char *k = m->key, *end = m->key + m->keylen;
    for (int i = 1; i < objc; i++) {
        Tcl_Size len;
        const char *s = Tcl_GetStringFromObj(objv[i], &len);
        if ((size_t)(end - k) < sizeof(Tcl_Size) + (size_t)len
                || memcmp(k, &len, sizeof(Tcl_Size)) != 0
                || memcmp(k + sizeof(Tcl_Size), s, len) != 0)
            return 0;
        k += sizeof(Tcl_Size) + len;
    }
    return k == end;
}

static void
memo_clear(Memo *m)
{
    if (m->objc == 0)
        return;
    Memo old = *m;              /* emptied first: Interp_traverse may see the slot */
    memset(m, 0, sizeof(*m));
    ckfree(old.key);
    Py_XDECREF(old.steps);
    Py_XDECREF(old.result);
    if (old.constant) Tcl_DecrRefCount(old.constant);
}

static int
check_plan(PyObject *plan, PyObject **steps, PyObject **result, int *words_only,
           PyObject **program)
{
    Py_ssize_t n = PyTuple_Check(plan) ? PyTuple_GET_SIZE(plan) : 0;
    *program = n == 4 ? PyTuple_GET_ITEM(plan, 3) : Py_None;
    if ((n != 3 && n != 4) || !PyTuple_Check(PyTuple_GET_ITEM(plan, 0))
            || (*program != Py_None && (!PyBytes_Check(*program)
                                        || PyBytes_GET_SIZE(*program) % 3 != 0
                                        || PyBytes_GET_SIZE(*program) == 0))) {
        PyErr_SetString(PyExc_TypeError,
                        "a command plan is a Plan: (steps, result, words_only"
                        "[, program bytes])");
        return -1;
    }
    if (*program == Py_None)
        *program = NULL;
    else if (!aten_program_fits(*program, PyTuple_GET_ITEM(plan, 1))) {
        PyErr_SetString(PyExc_TypeError,
                        "a command plan's program is not ATen calls that give its result");
        return -1;
    }
    *steps = PyTuple_GET_ITEM(plan, 0);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(*steps); i++) {
        PyObject *step = PyTuple_GET_ITEM(*steps, i);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 2
                || !PyTuple_Check(PyTuple_GET_ITEM(step, 1))) {
            PyErr_SetString(PyExc_TypeError, "a plan step is (callable, args)");
            return -1;
        }
    }
    *result = PyTuple_GET_ITEM(plan, 1);
    *words_only = PyObject_IsTrue(PyTuple_GET_ITEM(plan, 2));
    return *words_only < 0 ? -1 : 0;
}

static void
memo_store(Command *cmd, int objc, Tcl_Obj *const objv[], PyObject *steps,
           PyObject *result, Tcl_Obj *constant, PyObject *program)
{
    size_t keylen = 0;
    for (int i = 1; i < objc; i++) {
        Tcl_Size len;
        Tcl_GetStringFromObj(objv[i], &len);
        keylen += sizeof(Tcl_Size) + len;
    }
    Memo *m = &cmd->memo[cmd->memo_next];
    cmd->memo_next = (cmd->memo_next + 1) % MEMO_SLOTS;
    memo_clear(m);
    m->key = ckalloc(keylen ? keylen : 1);
    char *k = m->key;
    for (int i = 1; i < objc; i++) {
        Tcl_Size len;
        const char *s = Tcl_GetStringFromObj(objv[i], &len);
        memcpy(k, &len, sizeof(Tcl_Size));
        memcpy(k + sizeof(Tcl_Size), s, len);
        k += sizeof(Tcl_Size) + len;
    }
    m->keylen = keylen;
    m->objc = objc;
    m->steps = Py_NewRef(steps);
    m->result = constant ? NULL : Py_NewRef(result);
    m->constant = constant;
    if (constant) Tcl_IncrRefCount(constant);
    if (program != NULL && PyBytes_GET_SIZE(program) <= PROGRAM_MAX) {
        m->program_len = (int)PyBytes_GET_SIZE(program);
        memcpy(m->program, PyBytes_AS_STRING(program), m->program_len);
    }
}

/* A plan step's call: callable(*args), or callable(script, *args). */
static PyObject *
call_step(PyObject *step, PyObject *script)
{
    PyObject *callable = PyTuple_GET_ITEM(step, 0), *args = PyTuple_GET_ITEM(step, 1);
    if (script == NULL)
        return PyObject_Call(callable, args, NULL);
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *small[CALL_STACK_ARGS + 1];
    PyObject **stack = n < CALL_STACK_ARGS ? small : PyMem_New(PyObject *, (size_t)n + 1);
    if (stack == NULL)
        return PyErr_NoMemory();
    stack[0] = script;
    for (Py_ssize_t i = 0; i < n; i++)
        stack[i + 1] = PyTuple_GET_ITEM(args, i);
    PyObject *value = PyObject_Vectorcall(callable, stack, (size_t)n + 1, NULL);
    if (stack != small)
        PyMem_Free(stack);
    return value;
}

static int
run_steps(Command *cmd, Tcl_Interp *interp, PyObject *steps, PyObject *result,
          Tcl_Obj *constant, PyObject *script, Tcl_Obj *name)
{
    PyObject *value = NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(steps);
    /* A body one past the limit is refused before the steps, as the ATen
       path's run_body refuses it: the same error, and no body line of its
       own in errorInfo (Interp.evaluate counts the bodies that run). */
    if (script != NULL && !body_may_nest(interp))
        return TCL_ERROR;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_XDECREF(value);
        value = call_step(PyTuple_GET_ITEM(steps, i), script);
        if (value == NULL)
            return report_python_error(cmd->owner, interp);
    }
    if (value != NULL && Py_IS_TYPE(value, &OutcomeType)) {
        int rc = apply_outcome(interp, (OutcomeObject *)value, name);
        Py_DECREF(value);
        return rc;
    }
    if (constant != NULL) {
        Py_XDECREF(value);
        Tcl_SetObjResult(interp, constant);
        return TCL_OK;
    }
    if (value == NULL)
        value = Py_NewRef(Py_None);
    if (PyDict_Check(result)) {
        PyObject *mapped = PyDict_GetItemWithError(result, value);
        if (mapped == NULL && !PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "unexpected value %R", value);
        Py_XINCREF(mapped);
        Py_SETREF(value, mapped);
        if (value == NULL)
            return report_python_error(cmd->owner, interp);
    }
    return command_result(cmd->owner, interp, value);
}

/* Runs a remembered plan.  The steps are torch's own functions, but hold
   the plan anyway: a step that re-entered this command could reuse its
   slot. */
static int
run_memo(Command *cmd, Tcl_Interp *interp, Memo *m, PyObject *script, Tcl_Obj *name)
{
    PyObject *steps = Py_NewRef(m->steps);
    PyObject *result = m->result ? Py_NewRef(m->result) : NULL;
    Tcl_Obj *constant = m->constant;
    if (constant) Tcl_IncrRefCount(constant);
    int rc = run_steps(cmd, interp, steps, result, constant, script, name);
    if (constant) Tcl_DecrRefCount(constant);
    Py_XDECREF(result);
    Py_DECREF(steps);
    return rc;
}

/* Whether the words are the command's handle form: objects of its types,
   one each (a subtype's check that says yes means what isinstance says). */
static int
handle_form_fits(const Command *cmd, const CallArgs *args)
{
    if (cmd->handle_types == NULL || args->n != PyTuple_GET_SIZE(cmd->handle_types)
            || args->n + PyTuple_GET_SIZE(cmd->handle_defaults) > CALL_STACK_ARGS)
        return 0;
    for (Py_ssize_t i = 0; i < args->n; i++) {
        if (!PyObject_TypeCheck(args->slot[i + 2],
                                (PyTypeObject *)PyTuple_GET_ITEM(cmd->handle_types, i)))
            return 0;
    }
    return 1;
}

/* The handle form's call, made as its plan (a MethodCall) would make it:
   the first object's method, given the other objects and the defaults. */
static PyObject *
call_handle_form(const Command *cmd, const CallArgs *args)
{
    PyObject *stack[CALL_STACK_ARGS + 1];
    Py_ssize_t n = args->n, extra = PyTuple_GET_SIZE(cmd->handle_defaults);
    memcpy(stack + 1, args->slot + 2, (size_t)n * sizeof(PyObject *));
    for (Py_ssize_t i = 0; i < extra; i++)
        stack[1 + n + i] = PyTuple_GET_ITEM(cmd->handle_defaults, i);
    return PyObject_VectorcallMethod(cmd->handle_method, stack + 1,
                                     (size_t)(n + extra) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* Drops a plan once the command's outcome is set, and keeps that outcome:
   an argument's object whose handle the call deleted goes here, and its
   finalizer may run Tcl (see command_result). */
static int
release_plan_keeping_outcome(Tcl_Interp *interp, int rc, PyObject *plan)
{
    Tcl_InterpState outcome = Tcl_SaveInterpState(interp, rc);
    Py_DECREF(plan);
    return Tcl_RestoreInterpState(interp, outcome);
}

int
python_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    Command *cmd = cd;
    Entry e;
    /* The words that key the memo (objv[1 .. keyc-1]): a script command's
       without its script; a script command given no word at all has no
       memo (its parser reports that). */
    int keyc = cmd->script && objc >= 2 ? objc - 1 : objc;
    int memo_usable = cmd->planned && (!cmd->script || objc >= 2)
        && atomic_load_explicit(&memo_on, memory_order_relaxed);
    /* A script that may be an option's name (`torch::autocast -dtype`)
       goes to the parser, which refuses it whatever the options were. */
    if (memo_usable && cmd->script && Tcl_GetString(objv[objc - 1])[0] == '-')
        memo_usable = 0;
    if (memo_usable && atomic_load(&aten_on) && python_usable()) {
        for (int i = 0; i < MEMO_SLOTS; i++) {
            Memo *m = &cmd->memo[i];
            if (m->program_len != 0 && memo_matches(m, keyc, objv)) {
                int code = aten_run_program(interp, m, cmd->script ? objv[objc - 1] : NULL,
                                            objv[0]);
                if (code >= 0)
                    return code;
                break;
            }
        }
    }
    if (command_begin(&e, cmd->owner, &cmd->life, interp) < 0)
        return TCL_ERROR;
    flush_tcl_stdout();
    int rc;
    PyObject *script = NULL;
    if (cmd->script && objc >= 2 && (script = script_new(objv[objc - 1])) == NULL) {
        rc = report_python_error(cmd->owner, interp);
        goto done;
    }
    if (memo_usable) {
        for (int i = 0; i < MEMO_SLOTS; i++) {
            Memo *m = &cmd->memo[i];
            if (m->objc != 0 && memo_matches(m, keyc, objv)) {
                rc = run_memo(cmd, interp, m, script, objv[0]);
                goto done;
            }
        }
    }
    int any_handle = 0;
    CallArgs args;
    PyObject *value = NULL;
    int handle_form = 0;
    if (call_args_fill(&args, cmd->owner, keyc - 1, objv + 1, &any_handle, 0, script) == 0) {
        handle_form = handle_form_fits(cmd, &args);
        value = handle_form ? call_handle_form(cmd, &args) : call_args_call(&args, cmd->callable);
    }
    /* Before the result is set: an argument's object whose handle the
       call deleted goes here, and its finalizer may run Tcl. */
    call_args_release(&args);
    if (handle_form && value != NULL && cmd->handle_result != NULL) {
        Py_CLEAR(value);
        Tcl_SetObjResult(interp, cmd->handle_result);
        rc = TCL_OK;
    } else if (value == NULL || !cmd->planned || handle_form) {
        rc = command_result(cmd->owner, interp, value);
        value = NULL;
    } else {
        PyObject *steps, *result, *program;
        int words_only;
        Tcl_Obj *constant = NULL;
        if (check_plan(value, &steps, &result, &words_only, &program) < 0
                || (result != Py_None && !PyDict_Check(result)
                    && (constant = result_to_tcl(cmd->owner, result)) == NULL)) {
            rc = release_plan_keeping_outcome(interp, report_python_error(cmd->owner, interp),
                                              value);
            value = NULL;
        } else {
            if (constant) Tcl_IncrRefCount(constant);
            if (words_only && !any_handle && memo_usable)
                memo_store(cmd, keyc, objv, steps, result, constant, program);
            rc = run_steps(cmd, interp, steps, result, constant, script, objv[0]);
            if (constant) Tcl_DecrRefCount(constant);
            rc = release_plan_keeping_outcome(interp, rc, value);
            value = NULL;
        }
    }
    Py_XDECREF(value);
done:
    script_end(script);
    return command_end(&e, &cmd->life, rc);
}

static void
free_command(Lifetime *life)
{
    Command *cmd = (Command *)life;
    if (cmd->prev) cmd->prev->next = cmd->next; else cmd->owner->commands = cmd->next;
    if (cmd->next) cmd->next->prev = cmd->prev;
    for (int i = 0; i < MEMO_SLOTS; i++)
        memo_clear(&cmd->memo[i]);
    Py_DECREF(cmd->callable);
    Py_XDECREF(cmd->handle_types);
    Py_XDECREF(cmd->handle_method);
    Py_XDECREF(cmd->handle_defaults);
    if (cmd->handle_result != NULL)
        Tcl_DecrRefCount(cmd->handle_result);
    state_decref(cmd->owner);
    PyMem_Free(cmd);
}

static void
python_command_deleted(ClientData cd)
{
    record_deleted(&((Command *)cd)->life);
}

/* A Tcl command `name` whose record holds `callable`. */
PyObject *
add_command(InterpState *s, const char *name, Tcl_ObjCmdProc *proc, PyObject *callable,
            int planned, int script, PyObject *handle_form)
{
    /* The handle form's constant result: a Tcl value made once, here. */
    Tcl_Obj *constant = NULL;
    if (handle_form != NULL && PyTuple_GET_ITEM(handle_form, 3) != Py_None) {
        if ((constant = to_tcl(s, PyTuple_GET_ITEM(handle_form, 3))) == NULL)
            return NULL;
        Tcl_IncrRefCount(constant);
    }
    Command *cmd = (Command *)PyMem_Calloc(1, sizeof(Command));
    if (cmd == NULL) {
        if (constant)
            Tcl_DecrRefCount(constant);
        return PyErr_NoMemory();
    }
    cmd->life.free = free_command;
    cmd->owner = s;
    s->refs++;
    cmd->next = s->commands;
    if (cmd->next) cmd->next->prev = cmd;
    s->commands = cmd;
    cmd->callable = Py_NewRef(callable);
    cmd->planned = planned;
    cmd->script = script;
    if (handle_form != NULL) {
        cmd->handle_result = constant;
        cmd->handle_types = Py_NewRef(PyTuple_GET_ITEM(handle_form, 0));
        cmd->handle_method = Py_NewRef(PyTuple_GET_ITEM(handle_form, 1));
        PyUnicode_InternInPlace(&cmd->handle_method);
        cmd->handle_defaults = Py_NewRef(PyTuple_GET_ITEM(handle_form, 2));
    }
    if (Tcl_CreateObjCommand(s->interp, name, proc, cmd, python_command_deleted) == NULL) {
        free_command(&cmd->life);   /* Tcl is deleting the interpreter */
        return PyErr_Format(PyExc_RuntimeError, "the Tcl interpreter has been deleted");
    }
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ */
/* py call, py eval, py exec: the py ensemble's own commands, in C      */

/*
 * They mean exactly what docs/py.md says.  Code runs in __main__'s
 * namespace, compiled as compile(source, "<py eval>", "eval",
 * dont_inherit=True) compiles it, once the command's callable has prepared
 * the source (bridge.expression_source for py eval, bridge.dedent_block for
 * py exec).  A callable's first name is looked up in __main__, then in
 * builtins, and the rest of the dotted name as attributes; only a name that
 * needs an import goes to bridge.resolve (py call's callable), which also
 * raises every lookup error.
 *
 * What the text of a Tcl value means to Python is kept as the value's
 * internal representation, the way Tcl keeps bytecode: a code object for
 * py eval and py exec, a dotted name split into interned parts for py
 * call.  Both depend on the text alone, so neither can go stale when
 * __main__ or a module changes; the lookups themselves run every time.
 * Compiled code is also kept in a bounded dict per interpreter, for source
 * that arrives in a new value.
 */

static const char *const run_modes[] = {"eval", "exec"};
static const char *const run_filenames[] = {"<py eval>", "<py exec>"};
static const char *const run_usages[] = {"py eval expression", "py exec code"};
#define PY_CALL_USAGE "py call ?-kwlist list? ?-nonevalue word? ?-types list? " \
    "?-kwtypes dict? callable ?arg ...?"
/* Tcl's own words for a wrong count.  The module exports both texts
   (WRONG_ARGS, PY_CALL_USAGE): the py commands written in Python give the
   same errors through errors.wrong_args. */
#define WRONG_ARGS "wrong # args: should be \"%s\""

static PyObject *main_name;     /* "__main__", interned (core_add_to_module) */
static PyObject *builtins_name; /* "__builtins__", interned */
static PyObject *builtins_module;
static PyObject *compile_function;  /* builtins.compile */

static int
wrong_args(Tcl_Interp *interp, const char *usage)
{
    Tcl_SetObjResult(interp, Tcl_ObjPrintf(WRONG_ARGS, usage));
    Tcl_SetErrorCode(interp, "TCLAMP", "WRONG_ARGS", NULL);
    return TCL_ERROR;
}

/* Tcl may free a value at any moment, on a thread that cannot take the GIL
   just then (in its own teardown, say): the Python object it held waits
   here, and goes the next time a py command, Interp.eval or Interp.call
   runs (they hold the GIL).  Once Python is closed, nothing runs them. */
static pthread_mutex_t unused_lock = PTHREAD_MUTEX_INITIALIZER;
static PyObject **unused_objects;
static size_t unused_count, unused_room;
static atomic_int unused_waiting;

static void
free_python_rep(Tcl_Obj *obj)
{
    PyObject *held = obj->internalRep.twoPtrValue.ptr1;
    pthread_mutex_lock(&unused_lock);
    if (unused_count == unused_room) {
        size_t room = unused_room ? 2 * unused_room : 16;
        PyObject **grown = realloc(unused_objects, room * sizeof(PyObject *));
        if (grown != NULL) {
            unused_objects = grown;
            unused_room = room;
        }
    }
    if (unused_count < unused_room) {       /* else it stays: no memory to note it */
        unused_objects[unused_count++] = held;
        atomic_store(&unused_waiting, 1);
    }
    pthread_mutex_unlock(&unused_lock);
    obj->typePtr = NULL;
}

/* A copy is plain text, read again if it is used: sharing the Python
   object would need the GIL. */
static void
dup_python_rep(Tcl_Obj *from, Tcl_Obj *to)
{
    (void)from;
    (void)to;
}

static Tcl_ObjType python_rep = {
    "tclamp.python", free_python_rep, dup_python_rep, NULL, NULL,
};

/* With the GIL: the Python objects that Tcl let go. */
void
release_unused_objects(void)
{
    if (atomic_load_explicit(&unused_waiting, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&unused_lock);
    PyObject **objects = unused_objects;
    size_t count = unused_count;
    unused_objects = NULL;
    unused_count = unused_room = 0;
    atomic_store(&unused_waiting, 0);
    pthread_mutex_unlock(&unused_lock);
    for (size_t i = 0; i < count; i++)
        Py_DECREF(objects[i]);
    free(objects);
}

/* What `obj` means to Python (a kind above handle_command), if that is
   known: a borrowed reference, else NULL. */
static PyObject *
python_rep_of(Tcl_Obj *obj, int kind)
{
    if (obj->typePtr == &python_rep && (intptr_t)obj->internalRep.twoPtrValue.ptr2 == kind)
        return obj->internalRep.twoPtrValue.ptr1;
    return NULL;
}

/* Keeps `meaning` as obj's internal representation, if obj has text to
   fall back on. */
static void
keep_python_rep(Tcl_Obj *obj, PyObject *meaning, int kind)
{
    if (obj->bytes == NULL)
        return;
    store_two_ptr_rep(obj, &python_rep, Py_NewRef(meaning), (void *)(intptr_t)kind);
}

/* Keeps `value` under `key` in a dict of at most `size` entries, the oldest
   going first.  A failure only costs the cache. */
void
cache_put(PyObject *cache, PyObject *key, PyObject *value, Py_ssize_t size)
{
    if (PyDict_GET_SIZE(cache) >= size) {
        Py_ssize_t pos = 0;
        PyObject *oldest, *unused;
        if (PyDict_Next(cache, &pos, &oldest, &unused)) {
            Py_INCREF(oldest);
            if (PyDict_DelItem(cache, oldest) < 0)
                PyErr_Clear();
            Py_DECREF(oldest);
        }
    }
    if (PyDict_SetItem(cache, key, value) < 0)
        PyErr_Clear();
}

static PyObject *
compile_source(PyObject *text, int mode)
{
    if (compile_function == NULL
            && (compile_function = PyObject_GetAttrString(builtins_module, "compile")) == NULL)
        return NULL;
    return PyObject_CallFunction(compile_function, "Ossii", text, run_filenames[mode],
                                 run_modes[mode], 0, 1);
}

/* The code object for `source` (a new reference). */
static PyObject *
compiled_code(InterpState *owner, Tcl_Obj *source, int mode, PyObject *prepare)
{
    PyObject *code = python_rep_of(source, mode);
    if (code != NULL)
        return Py_NewRef(code);
    PyObject *text = str_from_tcl(source);
    if (text == NULL)
        return NULL;
    PyObject **cache = &owner->codes[mode];
    if (*cache == NULL && (*cache = PyDict_New()) == NULL) {
        Py_DECREF(text);
        return NULL;
    }
    code = PyDict_GetItemWithError(*cache, text);
    if (code != NULL) {
        Py_INCREF(code);
    } else if (!PyErr_Occurred()) {
        /* `prepare` (py eval's expression_source, py exec's dedent)
           gives the text to compile; the cache keeps the source as
           written. */
        PyObject *prepared = prepare ? PyObject_CallOneArg(prepare, text) : Py_NewRef(text);
        code = prepared ? compile_source(prepared, mode) : NULL;
        Py_XDECREF(prepared);
        if (code != NULL && PyUnicode_GET_LENGTH(text) <= CACHE_MAX_CHARS)
            cache_put(*cache, text, code, CODE_CACHE_SIZE);
    }
    Py_DECREF(text);
    if (code != NULL)
        keep_python_rep(source, code, mode);
    return code;
}

/* sys.modules["__main__"].__dict__ (a new reference). */
static PyObject *
main_namespace(void)
{
    PyObject *main = PyDict_GetItemWithError(PyImport_GetModuleDict(), main_name);
    if (main == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, main_name);
        return NULL;
    }
    if (PyModule_CheckExact(main))
        return Py_NewRef(PyModule_GetDict(main));
    return PyObject_GetAttrString(main, "__dict__");
}

/* eval(code, namespace) or exec(code, namespace), namespace being __main__'s. */
static PyObject *
run_code(PyObject *code, int mode)
{
    PyObject *globals = main_namespace();
    if (globals == NULL)
        return NULL;
    PyObject *value = NULL;
    if (PyDict_Check(globals)) {
        /* eval and exec give the namespace builtins if it has none */
        PyObject *has = PyDict_GetItemWithError(globals, builtins_name);
        if (has != NULL || (!PyErr_Occurred()
                            && PyDict_SetItem(globals, builtins_name, PyEval_GetBuiltins()) == 0))
            value = PyEval_EvalCode(code, globals, globals);
    } else {                    /* not a dict: eval and exec say what is wrong */
        PyObject *run = PyObject_GetAttrString(builtins_module, run_modes[mode]);
        value = run ? PyObject_CallFunctionObjArgs(run, code, globals, NULL) : NULL;
        Py_XDECREF(run);
    }
    Py_DECREF(globals);
    return value;
}

/* The end of every py command: `value` (or the pending exception) becomes
   the Tcl result. */
static int
py_command_done(Command *cmd, Tcl_Interp *interp, PyObject *value, Entry *e)
{
    int rc = command_result(cmd->owner, interp, value);
    return command_end(e, &cmd->life, rc);
}

static int
run_source(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[], int mode)
{
    Command *cmd = cd;
    if (objc != 2)
        return wrong_args(interp, run_usages[mode]);
    Entry e;
    if (command_begin(&e, cmd->owner, &cmd->life, interp) < 0)
        return TCL_ERROR;
    flush_tcl_stdout();
    release_unused_objects();
    PyObject *code = compiled_code(cmd->owner, objv[1], mode, cmd->callable);
    PyObject *value = code ? run_code(code, mode) : NULL;
    Py_XDECREF(code);
    return py_command_done(cmd, interp, value, &e);
}

int
py_eval_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    return run_source(cd, interp, objc, objv, RUN_EVAL);
}

int
py_exec_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    return run_source(cd, interp, objc, objv, RUN_EXEC);
}

/* The parts of a dotted name, interned (attribute lookups by an interned
   name hit Python's type caches): a new reference to a tuple, kept on the
   Tcl value.  A name of a handle's form never is: it may name a handle
   later. */
static PyObject *
name_parts(Tcl_Obj *word, PyObject *text)
{
    PyObject *dot = PyUnicode_FromOrdinal('.');
    PyObject *list = dot ? PyUnicode_Split(text, dot, -1) : NULL;
    Py_XDECREF(dot);
    PyObject *parts = list ? PyList_AsTuple(list) : NULL;
    Py_XDECREF(list);
    if (parts == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts); i++)
        PyUnicode_InternInPlace(&PyTuple_GET_ITEM(parts, i));
    Tcl_Size len;
    const char *s = Tcl_GetStringFromObj(word, &len);
    if (len < (Tcl_Size)sizeof(HANDLE_PREFIX) - 1
            || memcmp(s, HANDLE_PREFIX, sizeof(HANDLE_PREFIX) - 1) != 0)
        keep_python_rep(word, parts, CALL_NAME);
    return parts;
}

/* What the first part of a dotted name means, looked up in __main__, then
   in builtins (a new reference); NULL without an error when it is in
   neither, and an import must decide (bridge.resolve).  The one place for
   this rule: bridge.resolve calls it as _bridge.main_or_builtin. */
PyObject *
look_up_first(PyObject *first)
{
    PyObject *namespace = main_namespace();
    if (namespace == NULL)
        return NULL;
    PyObject *found;
    if (PyDict_CheckExact(namespace)) {
        found = Py_XNewRef(PyDict_GetItemWithError(namespace, first));
    } else {
        found = PyObject_GetItem(namespace, first);
        if (found == NULL && PyErr_ExceptionMatches(PyExc_KeyError))
            PyErr_Clear();
    }
    Py_DECREF(namespace);
    if (found == NULL && !PyErr_Occurred()) {
        found = PyObject_GetAttr(builtins_module, first);
        if (found == NULL && PyErr_ExceptionMatches(PyExc_AttributeError))
            PyErr_Clear();
    }
    return found;
}

/* Calls what the dotted name `parts` names with `args`.  `word` is the
   name as Tcl holds it, for bridge.resolve. */
static PyObject *
call_name(Command *cmd, Tcl_Obj *word, PyObject *parts, CallArgs *args)
{
    Py_ssize_t last = PyTuple_GET_SIZE(parts) - 1;
    PyObject *obj = look_up_first(PyTuple_GET_ITEM(parts, 0));
    if (obj == NULL) {
        if (PyErr_Occurred())
            return NULL;
        /* An import, or an error to raise: bridge.resolve does both. */
        PyObject *name = str_from_tcl(word);
        PyObject *function = name ? PyObject_CallOneArg(cmd->callable, name) : NULL;
        Py_XDECREF(name);
        PyObject *value = function ? call_args_call(args, function) : NULL;
        Py_XDECREF(function);
        return value;
    }
    for (Py_ssize_t i = 1; i < last && obj != NULL; i++)
        Py_SETREF(obj, PyObject_GetAttr(obj, PyTuple_GET_ITEM(parts, i)));
    if (obj == NULL)
        return NULL;
    PyObject *value;
    if (last > 0) {             /* obj.name(args), without making a bound method */
        args->slot[1] = obj;
        value = PyObject_VectorcallMethod(PyTuple_GET_ITEM(parts, last), args->slot + 1,
                                          (size_t)(args->n + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                          NULL);
    } else {
        value = call_args_call(args, obj);
    }
    Py_DECREF(obj);
    return value;
}

/* py call -kwlist ... (a first word that starts with "-", which no Python
   name does): bridge.call_with_options parses the options and calls. */
static PyObject *
call_with_options(Command *cmd, int objc, Tcl_Obj *const objv[])
{
    PyObject *bridge = PyImport_ImportModule("tclamp.bridge");
    PyObject *function = bridge ? PyObject_GetAttrString(bridge, "call_with_options") : NULL;
    Py_XDECREF(bridge);
    PyObject *value = NULL;
    if (function != NULL) {
        CallArgs args;
        if (call_args_fill(&args, cmd->owner, objc - 1, objv + 1, NULL, 0, NULL) == 0)
            value = call_args_call(&args, function);
        call_args_release(&args);
    }
    Py_XDECREF(function);
    return value;
}

int
py_call_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    Command *cmd = cd;
    if (objc < 2)
        return wrong_args(interp, PY_CALL_USAGE);
    Entry e;
    if (command_begin(&e, cmd->owner, &cmd->life, interp) < 0)
        return TCL_ERROR;
    flush_tcl_stdout();
    release_unused_objects();
    if (Tcl_GetString(objv[1])[0] == '-')
        return py_command_done(cmd, interp, call_with_options(cmd, objc, objv), &e);
    /* The callable: a dotted name, or the object of a handle. */
    PyObject *parts = python_rep_of(objv[1], CALL_NAME), *target = NULL;
    if (parts != NULL) {
        Py_INCREF(parts);
    } else if ((target = arg_to_python(cmd->owner, objv[1], NULL)) != NULL
               && PyUnicode_Check(target)) {
        parts = name_parts(objv[1], target);
        Py_CLEAR(target);
    }
    PyObject *value = NULL;
    CallArgs args;
    args.slot = NULL;           /* nothing to release if there is nothing to call */
    if ((parts != NULL || target != NULL)
            && call_args_fill(&args, cmd->owner, objc - 2, objv + 2, NULL, 1, NULL) == 0)
        value = parts ? call_name(cmd, objv[1], parts, &args) : call_args_call(&args, target);
    call_args_release(&args);
    Py_XDECREF(parts);
    Py_XDECREF(target);
    return py_command_done(cmd, interp, value, &e);
}

/* The module's share of the core (its init calls this): the Outcome and
   Script types, the usage texts, and the names py call, eval and exec
   look up. */
int
core_add_to_module(PyObject *m)
{
    if (PyType_Ready(&OutcomeType) < 0 || PyType_Ready(&ScriptType) < 0)
        return -1;
    if (builtins_module == NULL) {  /* once, unless it failed */
        Py_XSETREF(main_name, PyUnicode_InternFromString("__main__"));
        Py_XSETREF(builtins_name, PyUnicode_InternFromString("__builtins__"));
        builtins_module = PyImport_ImportModule("builtins");
        if (main_name == NULL || builtins_name == NULL || builtins_module == NULL)
            return -1;
        text_fast_init();
    }
    return PyModule_AddObjectRef(m, "Outcome", (PyObject *)&OutcomeType) < 0
        || PyModule_AddObjectRef(m, "Script", (PyObject *)&ScriptType) < 0
        || PyModule_AddStringConstant(m, "WRONG_ARGS", WRONG_ARGS) < 0
        || PyModule_AddStringConstant(m, "PY_CALL_USAGE", PY_CALL_USAGE) < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* py scope: the handles a script makes go when it ends                  */

/* A growing list of handle numbers (items ckalloc'd; empty: {NULL, 0, 0}). */
typedef struct {
    unsigned long *items;
    size_t count, room;
} Numbers;

/*
 * Handles are numbered in the order they are made, process-wide, and each
 * interpreter lists its live ones newest first: a scope notes the highest
 * number its interpreter has listed when it begins, and at its end the
 * handles numbered above that are the body's.  Those go, except the ones
 * `py keep` gave to the scope (they then belong to the enclosing one), the
 * ones renamed (a script's own), and the ones whose names occur in the
 * body's result, as whole names at any depth, unless the body failed: an
 * error's message is no value to hand on.  See docs/py.md.
 */
typedef struct ScopeFrame {
    unsigned long mark;         /* its interpreter's top_number when it began */
    Numbers kept;               /* the numbers py keep gave it */
    struct ScopeFrame *outer;
} ScopeFrame;

static void
add_number(Numbers *numbers, unsigned long number)
{
    if (numbers->count == numbers->room) {
        numbers->room = numbers->room ? 2 * numbers->room : 8;
        numbers->items = (unsigned long *)ckrealloc((char *)numbers->items,
                                                    numbers->room * sizeof(unsigned long));
    }
    numbers->items[numbers->count++] = number;
}

/* py keep: the handle named `name` outlives the innermost running scope
   that began before it was made, and belongs to the enclosing one. */
void
keep_in_scope(InterpState *s, PyObject *name)
{
    unsigned long number = handle_number(s, name);
    for (ScopeFrame *f = number ? s->scopes : NULL; f != NULL; f = f->outer) {
        if (number > f->mark) {
            add_number(&f->kept, number);
            break;
        }
    }
}

static int
compare_numbers(const void *a, const void *b)
{
    unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
    return (x > y) - (x < y);
}

static void
sort_numbers(Numbers *numbers)
{
    if (numbers->count > 1)
        qsort(numbers->items, numbers->count, sizeof(unsigned long), compare_numbers);
}

/* Whether `number` is among the sorted `numbers`. */
static int
among(unsigned long number, const Numbers *numbers)
{
    return numbers->count > 0 && bsearch(&number, numbers->items, numbers->count,
                                         sizeof number, compare_numbers) != NULL;
}

/* Adds the numbers above `mark` of the handle names in `text`, whole names
   (::py::objN not followed by another digit), to `found`. */
static void
scan_names(const char *text, Tcl_Size len, unsigned long mark, Numbers *found)
{
    const Tcl_Size prefix = (Tcl_Size)sizeof(HANDLE_PREFIX) - 1;
    const char *end = text + len, *p = text;
    while (end - p > prefix && (p = memchr(p, ':', (size_t)(end - p - prefix))) != NULL) {
        if (memcmp(p, HANDLE_PREFIX, prefix) != 0) {
            p++;
            continue;
        }
        const char *digit = p + prefix;
        unsigned long n = 0;
        int fits = digit < end && *digit != '0';    /* no handle's name has a leading 0 */
        for (p = digit; p < end && *p >= '0' && *p <= '9'; p++) {
            if (n > (ULONG_MAX - 9) / 10)
                fits = 0;
            n = n * 10 + (unsigned long)(*p - '0');
        }
        if (p == digit) {
            p = digit;          /* no digits: the next name may start here */
            continue;
        }
        if (fits && n > mark)
            add_number(found, n);
    }
}

/* A text longer than this, held in more than one place, is scanned once. */
#define NAMES_SHARED_TEXT 64
/* A list longer than this is read once, even held in one place: copies of
   a list share its elements (Tcl's copy, as `concat $l` makes), and each
   copy would read them all again. */
#define NAMES_SHARED_ITEMS 64

/* A list or dict the search is inside: its elements (a dict's keys and
   values, in an array of the search's own), and the next one to read. */
typedef struct {
    Tcl_Obj **items;
    Tcl_Size count, next;
    int owned;                  /* items is the search's (ckalloc) */
} ListPlace;

/* A search of a value for handle names (see read_for_names). */
typedef struct {
    unsigned long mark;         /* names numbered above it count */
    Numbers *found;
    ListPlace *places;          /* the lists it is inside, outermost first (ckalloc) */
    size_t depth, room;
    Tcl_HashTable read;         /* values and lists' elements read already (read_before) */
    int read_ready;
} NameSearch;

/* Whether the search has read before (it is then noted as read) the value
   `at` (`end` NULL), or the list elements from `at` to `end`: lists are
   known by their elements, which copies of a list share. */
static int
read_before(NameSearch *search, const void *at, const void *end)
{
    const void *key[2] = {at, end};
    if (!search->read_ready) {
        /* keys of two addresses, counted in ints as Tcl_InitHashTable asks */
        Tcl_InitHashTable(&search->read, (int)(2 * sizeof(void *) / sizeof(int)));
        search->read_ready = 1;
    }
    int is_new;
    Tcl_CreateHashEntry(&search->read, (const char *)key, &is_new);
    return !is_new;
}

/* Whether any of the `n` `items` is a list or dict with no text. */
static int
holds_list(Tcl_Obj *const *items, Tcl_Size n)
{
    for (Tcl_Size i = 0; i < n; i++) {
        if (items[i]->bytes == NULL
                && (items[i]->typePtr == list_type || items[i]->typePtr == dict_type))
            return 1;
    }
    return 0;
}

/* A dict's keys and values, in turn, in an array of `*n` for the caller
   to free; NULL for an empty dict. */
static Tcl_Obj **
dict_items(Tcl_Obj *dict, Tcl_Size *n)
{
    Tcl_Size size = 0;
    Tcl_DictSearch walk;
    Tcl_Obj *key, *value, **items = NULL;
    int done;
    *n = 0;
    if (Tcl_DictObjSize(NULL, dict, &size) != TCL_OK || size == 0)
        return NULL;
    items = (Tcl_Obj **)ckalloc(2 * (size_t)size * sizeof(Tcl_Obj *));
    if (Tcl_DictObjFirst(NULL, dict, &walk, &key, &value, &done) != TCL_OK)
        done = 1;
    for (; !done && *n < 2 * size; Tcl_DictObjNext(&walk, &key, &value, &done)) {
        items[(*n)++] = key;
        items[(*n)++] = value;
    }
    Tcl_DictObjDone(&walk);
    return items;
}

/* Whether the sublist `list`, of the `n` `items`, is read for the first
   time.  A sublist can be met many times over, at each level (2^depth
   times): through references (refCount > 1), or through lists that share
   their elements (Tcl's copy of a list, as `concat $l` makes, shares
   them), where each holds it once.  Only a list holding lists or dicts
   can multiply the reading, and only a long one costs much to read again,
   so only one that is shared, long, or holds them, is noted. */
static int
first_reading(NameSearch *search, Tcl_Obj *list, Tcl_Obj *const *items, Tcl_Size n)
{
    if (n == 0 || (list->refCount <= 1 && n <= NAMES_SHARED_ITEMS && !holds_list(items, n)))
        return 1;
    return !read_before(search, items, items + n);
}

/* The search goes into a list or dict whose elements are the `n` `items`
   (`owned`: the search's to free). */
static void
enter_place(NameSearch *search, Tcl_Obj **items, Tcl_Size n, int owned)
{
    if (search->depth == search->room) {
        search->room = search->room ? 2 * search->room : 16;
        search->places = (ListPlace *)ckrealloc((char *)search->places,
                                                search->room * sizeof(ListPlace));
    }
    search->places[search->depth++] = (ListPlace){items, n, 0, owned};
}

/* Adds the handle numbers that scan_names finds in `value`'s text, without
   writing that text where Tcl holds the value as a number; a list or dict
   with no text is entered (its elements are read by numbers_named): a
   body's result is often a list of numbers, whose text the scope would
   write for nothing.  An element's text holds the names that the list's
   text holds for it, since Tcl's quoting of an element adds no digit and
   splits no name. */
static void
read_for_names(NameSearch *search, Tcl_Obj *value)
{
    const Tcl_ObjType *type = value->typePtr;
    if (value->bytes == NULL && type != NULL) {
        /* Tcl 9's lseq (an "arithseries", not registered) holds numbers only. */
        if (type == int_type || type == wide_type || type == bignum_type
                || type == double_type || strcmp(type->name, "arithseries") == 0)
            return;
        Tcl_Size n = 0;
        Tcl_Obj **items = NULL;
        if (type == dict_type) {
            /* Noted as a list is (first_reading), but a walk costs the
               dict's size: a shared or big one (lrepeat of a big dict) is
               looked up before it is walked.  The result is read once. */
            Tcl_Size size = 0;
            int looked_up = search->depth == 0;
            if (!looked_up && (value->refCount > 1
                               || (Tcl_DictObjSize(NULL, value, &size) == TCL_OK
                                   && size > NAMES_SHARED_ITEMS))) {
                if (read_before(search, value, NULL))
                    return;
                looked_up = 1;
            }
            items = dict_items(value, &n);
            if (!looked_up && holds_list(items, n) && read_before(search, value, NULL)) {
                ckfree((char *)items);
                return;
            }
            enter_place(search, items, n, items != NULL);
            return;
        }
        if (type == list_type && Tcl_ListObjGetElements(NULL, value, &n, &items) == TCL_OK) {
            if (search->depth == 0 || first_reading(search, value, items, n))
                enter_place(search, items, n, 0);
            return;
        }
    }
    Tcl_Size len;
    const char *text = Tcl_GetStringFromObj(value, &len);
    /* lrepeat of one long text, say: scanned once. */
    if (search->depth > 0 && value->refCount > 1 && len > NAMES_SHARED_TEXT
            && read_before(search, value, NULL))
        return;
    scan_names(text, len, search->mark, search->found);
}

/* The numbers above `mark` of the handles that `result` names, sorted.
   Lists are read with a stack of places, not by recursion: a result can
   nest lists deeper than the C stack goes, and their text, which Tcl
   would write, can be past any memory. */
static void
numbers_named(Tcl_Obj *result, unsigned long mark, Numbers *found)
{
    NameSearch search = {mark, found};
    read_for_names(&search, result);
    while (search.depth > 0) {
        ListPlace *place = &search.places[search.depth - 1];
        if (place->next == place->count) {
            if (place->owned)
                ckfree((char *)place->items);
            search.depth--;
        } else {
            read_for_names(&search, place->items[place->next++]);  /* may move places */
        }
    }
    if (search.places != NULL)
        ckfree((char *)search.places);
    if (search.read_ready)
        Tcl_DeleteHashTable(&search.read);
    sort_numbers(found);
}

/* The scope's handles go (GIL held); the body's outcome stays as it was,
   whatever the objects' finalizers do. */
static int
end_scope(InterpState *s, Tcl_Interp *interp, ScopeFrame *f, int code)
{
    HandleList gone;
    handle_list_init(&gone);
    sort_numbers(&f->kept);
    for (Handle *h = s->newest; h != NULL && h->number > f->mark; h = h->older) {
        if (!among(h->number, &f->kept))
            handle_list_add(&gone, h);
    }
    if (gone.count > 0 && code != TCL_ERROR) {
        Numbers named = {NULL, 0, 0};
        numbers_named(Tcl_GetObjResult(interp), f->mark, &named);
        if (named.count > 0) {
            size_t left = 0;
            for (size_t i = 0; i < gone.count; i++) {
                if (!among(gone.items[i]->number, &named))
                    gone.items[left++] = gone.items[i];
            }
            gone.count = left;
        }
        if (named.items != NULL)
            ckfree((char *)named.items);
    }
    if (gone.count == 0) {
        handle_list_delete(&gone);      /* frees the list: deletes nothing */
        return code;
    }
    Tcl_InterpState outcome = Tcl_SaveInterpState(interp, code);
    KeptInFlight held = hold_in_flight();
    handle_list_delete(&gone);
    put_back_in_flight(held);
    return Tcl_RestoreInterpState(interp, outcome);
}

int
scope_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    InterpState *s = cd;
    if (objc != 2)
        return wrong_args(interp, "py scope body");
    if (!python_usable())
        return python_refused(interp);
    /* Python is entered once, at the end, where the handles go: a scope's
       frame and its interpreter's list of handles are this thread's alone,
       the body's commands enter Python for themselves, and the interpreter
       is not deleted while this command runs (Tcl_InterpActive). */
    ScopeFrame frame = {s->top_number, {NULL, 0, 0}, s->scopes};
    s->scopes = &frame;
    int code = run_body(interp, objv[1], "py scope");
    s->scopes = frame.outer;
    Entry e;
    if (enter(&e, s, NULL) == 0) {
        flush_tcl_stdout();     /* before a finalizer prints */
        code = end_scope(s, interp, &frame, code);
        run_pending_deletions();
        leave(&e);
    }                           /* else Python is gone, and the objects with it */
    if (frame.kept.items != NULL)
        ckfree((char *)frame.kept.items);
    return code;
}

