/*
 * aten_programs.c -- remembered autocast plans run as calls of ATen's own
 * functions, with no Python object made and the GIL not taken.
 *
 * What this file assumes, each checked where it can be:
 *   - The ABI.  The functions are found by their C++ names (aten_ops.h) in
 *     the libtorch that `import torch` loaded, called through C function
 *     pointers whose types restate their C++ signatures; aten.py checks
 *     each against torch's own binding (each reads back what the other
 *     wrote, for both devices) before handing them over (use_aten).
 *   - No throws.  ATen throws only on a device or dtype it does not know,
 *     and a C++ exception through these C frames ends the process: so a
 *     program holds only the devices and dtypes aten.py checked
 *     (aten_program_fits), and anything else runs its steps in Python.
 *   - Threads.  The functions read and write the calling thread's autocast
 *     state, as the bindings do; a program runs on the command's own
 *     thread from its command's memo, which only that thread's interpreter
 *     uses.
 *   - Exit.  libtorch's static objects go in libc's exit; programs stop
 *     before (stop_programs_at_exit, registered after ATen's first call).
 *   - Bodies.  torch::autocast's program runs the command's body between
 *     its ATen calls (run_block); the body is Tcl, and none of the above
 *     holds across it, so the program is counted as running only while it
 *     calls ATen.
 * Built with TCLAMP_NO_ATEN, no program runs: every plan runs its steps.
 */
#include "bridge.h"
#include "aten_ops.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ATEN_OPS for aten.py: (torch binding, C++ name, result code, argument
   codes) for each op, in code order. */
PyObject *
aten_op_table(void)
{
#define ATEN_ROW(code, field, binding, symbol, result, params, result_code, arg_codes) \
    {binding, symbol, result_code, arg_codes},
    static const char *const rows[][4] = {ATEN_OP_TABLE(ATEN_ROW)};
    PyObject *table = PyTuple_New(ATEN_OPS);
    for (int i = 0; table != NULL && i < ATEN_OPS; i++) {
        PyObject *row = Py_BuildValue("(ssss)", rows[i][0], rows[i][1], rows[i][2], rows[i][3]);
        if (row == NULL)
            Py_CLEAR(table);
        else
            PyTuple_SET_ITEM(table, i, row);
    }
    return table;
}

#ifndef TCLAMP_NO_ATEN

/*
 * torch.set_autocast_dtype and its siblings are Python bindings of ATen's
 * at::autocast functions: parsing their arguments and taking the GIL cost
 * several times what the thread-local write they make does.  aten.py finds
 * the functions themselves in the libtorch that Python loaded, checks them
 * against torch's bindings, and hands them over (use_aten).  A program is
 * <op, device, argument> triples, ops numbered as below; the devices and
 * dtypes are ATen's own codes, which aten.py read from torch.
 */
#define ATEN_DTYPES 64          /* ATen's dtype codes are below this */
#define ATEN_FUNCTION(code, field, binding, symbol, result, params, ...) result (*field) params;
static struct {
    ATEN_OP_TABLE(ATEN_FUNCTION)
    const char *dtype_names[ATEN_DTYPES];   /* NULL: a code aten.py did not name */
} aten;
atomic_int aten_on;
static atomic_int programs_running;     /* threads between the check of aten_on and its end */
static atomic_int programs_stopped;     /* by exit: libtorch's objects are going */

/* Whether a program can stand for its plan's steps: ATen's ops on the
   devices aten.py checked (cpu 0, cuda 1), with a dtype it named or a
   flag of 0 or 1, giving the plan's result as run_program makes it: the
   constant, or the value of a last is_enabled (result None) or get_dtype
   (result a dict, the dtypes' names), or the body's (ATEN_BODY, last;
   result None).  Anything else would run
   something the steps do not mean (ATen throws on an unknown device, and
   C++ exceptions end the process here). */
int
aten_program_fits(PyObject *program, PyObject *result)
{
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(program);
    Py_ssize_t n = PyBytes_GET_SIZE(program);
    for (Py_ssize_t i = 0; i < n; i += 3) {
        if ((p[i] >= ATEN_OPS && !(p[i] == ATEN_BODY && i == n - 3)) || p[i + 1] > 1
                || (p[i] == ATEN_SET_DTYPE && (p[i + 2] >= ATEN_DTYPES
                        || (aten.set_dtype != NULL && aten.dtype_names[p[i + 2]] == NULL)))
                || ((p[i] == ATEN_SET_ENABLED || p[i] == ATEN_SET_CACHE_ENABLED) && p[i + 2] > 1))
            return 0;
    }
    if (p[n - 3] == ATEN_BODY)  /* the command ends as its body did */
        return result == Py_None;
    if (result == Py_None)
        return p[n - 3] == ATEN_IS_ENABLED;
    if (PyDict_Check(result))
        return p[n - 3] == ATEN_GET_DTYPE;
    return 1;
}

/* Runs the ops of a program (`len` bytes): the value of the last that reads
   one, or -1. */
static int
run_ops(const unsigned char *program, int len)
{
    int value = -1;
    for (int i = 0; i + 2 < len; i += 3) {
        signed char device = (signed char)program[i + 1];
        switch (program[i]) {
        case ATEN_SET_DTYPE:   aten.set_dtype(device, (signed char)program[i + 2]); break;
        case ATEN_SET_ENABLED: aten.set_enabled(device, program[i + 2] != 0); break;
        case ATEN_CLEAR_CACHE: aten.clear_cache(); break;
        case ATEN_IS_ENABLED:  value = aten.is_enabled(device); break;
        case ATEN_GET_DTYPE:   value = aten.get_dtype(device); break;
        case ATEN_IS_CACHE_ENABLED:  value = aten.is_cache_enabled(); break;
        case ATEN_SET_CACHE_ENABLED: aten.set_cache_enabled(program[i + 2] != 0); break;
        case ATEN_INCREMENT_NESTING: aten.increment_nesting(); break;
        case ATEN_DECREMENT_NESTING: aten.decrement_nesting(); break;
        }
    }
    return value;
}

/* torch::autocast's program, which ends with the body: what run_block in
   autocast.py does, with ATen's functions.  The device's autocast state
   and the cache flag are saved, the ops before the body set them and count
   one more nesting, the body runs in the caller's frame, and then, however
   it ended, the nesting is counted down (the cache cleared at the
   outermost) and what was saved is set again.  Where the dtype changes, or
   the cache is turned on where it was off, entering and leaving, the cache
   is cleared too, as run_block does.  The program is counted as running
   only around the ATen calls: the body may take long, or exit.  Called
   counted; returns counted, with the body's code. */
static int
run_block(Tcl_Interp *interp, const unsigned char *program, int len, Tcl_Obj *body,
          Tcl_Obj *name)
{
    signed char device = (signed char)program[len - 2];
    bool enabled = aten.is_enabled(device), cache_enabled = aten.is_cache_enabled();
    signed char dtype = aten.get_dtype(device);
    run_ops(program, len - 3);
    /* casts of another dtype would clash (one made while the cache was off) */
    bool turned_on = aten.is_cache_enabled() && !cache_enabled;
    if (aten.get_dtype(device) != dtype || turned_on)
        aten.clear_cache();
    atomic_fetch_sub(&programs_running, 1);
    int code = run_body(interp, body, Tcl_GetString(name));
    atomic_fetch_add(&programs_running, 1);
    if (!atomic_load(&programs_stopped)) {
        /* turned_on too: the body may have turned the cache off again */
        if (aten.decrement_nesting() == 0 || aten.get_dtype(device) != dtype || turned_on
                || (aten.is_cache_enabled() && !cache_enabled))
            aten.clear_cache();
        aten.set_enabled(device, enabled);
        aten.set_dtype(device, dtype);
        aten.set_cache_enabled(cache_enabled);
    }
    return code;
}

/* Runs a remembered plan's program: ATen's functions, called from this
   thread as torch's bindings would call them, with no Python object made
   and the GIL not taken.  -1 (and nothing changed) when the program's
   result has no Tcl form of its own here: the steps run instead. */
static int
run_program(Tcl_Interp *interp, const Memo *m, Tcl_Obj *body, Tcl_Obj *name)
{
    /* copies: the slot is not ours to trust across ATen's calls, nor
       across a body, which may run this command again */
    unsigned char program[PROGRAM_MAX];
    int len = m->program_len;
    memcpy(program, m->program, len);
    if (program[len - 3] == ATEN_BODY)
        return body != NULL ? run_block(interp, program, len, body, name) : -1;
    Tcl_Obj *constant = m->constant;
    if (constant) Tcl_IncrRefCount(constant);
    int value = run_ops(program, len);
    if (program[len - 3] == ATEN_GET_DTYPE
            && (value < 0 || value >= ATEN_DTYPES || aten.dtype_names[value] == NULL)) {
        /* a dtype aten.py did not name, set from Python: Python names it */
        if (constant) Tcl_DecrRefCount(constant);
        return -1;
    }
    if (constant != NULL) {
        Tcl_SetObjResult(interp, constant);
        Tcl_DecrRefCount(constant);
    } else if (program[len - 3] == ATEN_IS_ENABLED) {
        Tcl_SetObjResult(interp, Tcl_NewIntObj(value));     /* as to_tcl gives a bool */
    } else {
        Tcl_SetObjResult(interp, Tcl_NewStringObj(aten.dtype_names[value], -1));
    }
    return TCL_OK;
}

/* Runs a remembered plan's program (the core found it for the words).
   Counted before the check: stop_programs_at_exit marks programs stopped,
   then waits for the count, so either it sees us or we see the mark (both
   sequentially consistent). */
int
aten_run_program(Tcl_Interp *interp, const Memo *m, Tcl_Obj *body, Tcl_Obj *name)
{
    atomic_fetch_add(&programs_running, 1);
    int code = atomic_load(&aten_on) ? run_program(interp, m, body, name) : -1;
    atomic_fetch_sub(&programs_running, 1);
    return code;
}

/* libc's exit, before libtorch's static objects go: programs stop, and
   exit waits for one that another thread is running.  A thread that still
   runs Tcl then (a Python program's daemon thread in a loop of commands:
   Python has finalized and exit does not wait for it) would otherwise call
   clear_cache on a map being destroyed; on the Python path its next call
   waits for the end (wait_if_python_finalizing).
   A program takes microseconds: a thread stopped in one (by a debugger,
   say) is waited for a second at most. */
static void
stop_programs_at_exit(void)
{
    atomic_store(&programs_stopped, 1);
    atomic_store(&aten_on, 0);
    struct timespec millisecond = {0, 1000000};
    for (int i = 0; i < 1000 && atomic_load(&programs_running) > 0; i++)
        nanosleep(&millisecond, NULL);
}

/* use_aten(functions, dtype_names): the ATen functions' addresses (aten_ops.h),
   in the order of the ATEN_ ops, and dtype names by code (None where
   unnamed); from then on programs run.  use_aten(None) stops them, as for
   a torch without them; the functions, once given, are kept (other
   threads may be calling them).  Returns whether programs run. */
PyObject *
bridge_use_aten(PyObject *module, PyObject *args)
{
    PyObject *functions = NULL, *names = NULL;
    if (!PyArg_ParseTuple(args, "|OO!:use_aten", &functions, &PyTuple_Type, &names))
        return NULL;
    if (functions == NULL)
        return PyBool_FromLong(atomic_load(&aten_on));
    if (functions == Py_None) {
        atomic_store(&aten_on, 0);
        Py_RETURN_FALSE;
    }
    void *address[ATEN_OPS];
    if (!PyTuple_Check(functions) || PyTuple_GET_SIZE(functions) != ATEN_OPS || names == NULL
            || PyTuple_GET_SIZE(names) > ATEN_DTYPES)
        return PyErr_Format(PyExc_TypeError, "use_aten: %d addresses and up to %d dtype names",
                            ATEN_OPS, ATEN_DTYPES);
    for (int i = 0; i < ATEN_OPS; i++) {
        address[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(functions, i));
        if (address[i] == NULL)
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "use_aten: a NULL address");
    }
    if (aten.set_dtype == NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
            PyObject *name = PyTuple_GET_ITEM(names, i);
            const char *text = name == Py_None ? NULL : PyUnicode_AsUTF8(name);
            if (text == NULL && name != Py_None)
                return NULL;
            aten.dtype_names[i] = text ? strdup(text) : NULL;
        }
#define ATEN_TAKE(code, field, ...) memcpy(&aten.field, &address[code], sizeof(void *));
        ATEN_OP_TABLE(ATEN_TAKE)
        /* libc runs exit handlers last registered first: clear_cache's map,
           made on its first call, must be older than stop_programs_at_exit. */
        aten.clear_cache();
        atexit(stop_programs_at_exit);
    } else if (memcmp(&aten.set_dtype, &address[ATEN_SET_DTYPE], sizeof(void *)) != 0) {
        return PyErr_Format(PyExc_ValueError, "use_aten: another libtorch's functions");
    }
    atomic_store_explicit(&aten_on, 1, memory_order_release);
    Py_RETURN_TRUE;
}

#else   /* TCLAMP_NO_ATEN: plans run their steps */

int aten_program_fits(PyObject *program, PyObject *result) { return 1; }

atomic_int aten_on;             /* never set */

int
aten_run_program(Tcl_Interp *interp, const Memo *m, Tcl_Obj *body, Tcl_Obj *name)
{
    return -1;
}

PyObject *
bridge_use_aten(PyObject *module, PyObject *args)
{
    Py_RETURN_FALSE;
}

#endif
