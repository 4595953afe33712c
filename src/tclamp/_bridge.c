/*
 * _bridge.c -- tclamp's Tcl<->Python bridge.
 *
 * This one shared object is both the Python extension module
 * `tclamp._bridge` and the Tcl extension `Tclamp` (Tclamp_Init), so one
 * process never holds two copies of the bridge's state.
 *
 *   Tcl host:    `package require tclamp` loads this file; Tclamp_Init starts
 *                CPython in the environment named by $TCLAMP_PYTHON or
 *                ::tclamp::python (set by pkgIndex.tcl), then hands the
 *                interpreter to tclamp._attach, which registers the commands.
 *   Python host: `import tclamp` loads this file as a module; Interp() loads
 *                libtcl, creates an interpreter and attaches it the same way.
 *
 * Everything that is policy (argument parsing, the torch:: commands, error
 * texts) lives in Python.  This file only converts values, moves errors
 * across with their details, manages the GIL, and runs command "plans"
 * (see python_command) so that repeated calls need no Python parsing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <tcl.h>
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#ifndef TCL_SIZE_MAX            /* Tcl 8.6: sizes are int; Tcl 9 has Tcl_Size */
typedef int Tcl_Size;
#endif

#if TCL_UTF_MAX > 3             /* Tcl_UniChar is 32 bits (Tcl 9) */
#  define UNICHAR_CODEC (PY_BIG_ENDIAN ? "utf-32-be" : "utf-32-le")
#else                           /* Tcl_UniChar is UTF-16 (Tcl 8.6) */
#  define UNICHAR_CODEC (PY_BIG_ENDIAN ? "utf-16-be" : "utf-16-le")
#endif

#define HANDLE_PREFIX "::py::obj"
#define MEMO_SLOTS 8            /* remembered argument lists per command */

/* Set once by tclamp/__init__.py through configure(). */
static PyObject *TclErrorType;  /* tclamp.TclError(result, errorcode, errorinfo) */
static PyObject *describe_error;/* exc -> (message, errorcode, errorInfo tail|None) */

static int python_started_here; /* Tcl host: we initialized Python */
static int python_finalized;    /* after Tcl's exit handler ran */
static Tcl_ThreadId python_thread;

typedef struct InterpObject InterpObject;

/*
 * Each thread's place in the bridge.  `parked` is the Python thread state
 * the thread set aside (releasing the GIL) when it went from Python into
 * Tcl, or when it attached to Python from Tcl; NULL while the thread runs
 * Python.  Entering Python from Tcl takes it back, leaving parks it again:
 * one GIL hand-off each way and no lookups.
 */
typedef struct {
    PyThreadState *parked;
    InterpObject *current;      /* innermost interpreter calling Python */
    int depth;                  /* Tcl->Python entries in progress */
    unsigned long generation;   /* remembered plans are valid for this one */
} ThreadBridge;
static _Thread_local ThreadBridge here;

/* Runs Tcl code from Python with the GIL released. */
#define WITHOUT_GIL(statement) do {                 \
        here.parked = PyEval_SaveThread();          \
        statement;                                  \
        PyEval_RestoreThread(here.parked);          \
        here.parked = NULL;                         \
    } while (0)

/* ------------------------------------------------------------------ */
/* Entering Python from Tcl                                             */

typedef struct {
    PyThreadState *restored;    /* parked state we took back, if any */
    InterpObject *saved;
} Entry;

static void
enter(Entry *e, InterpObject *owner)
{
    ThreadBridge *t = &here;
    e->restored = t->parked;
    if (t->parked != NULL) {
        t->parked = NULL;
        PyEval_RestoreThread(e->restored);
    }
    e->saved = t->current;
    t->current = owner;
    t->depth++;
}

static void
leave(Entry *e)
{
    ThreadBridge *t = &here;
    t->depth--;
    t->current = e->saved;
    if (e->restored != NULL)
        t->parked = PyEval_SaveThread();
}

/* ------------------------------------------------------------------ */
/* The Interp type: a Tcl interpreter as seen from Python              */

struct InterpObject {
    PyObject_HEAD
    Tcl_Interp *interp;         /* NULL once Tcl deleted it */
    Tcl_ThreadId thread;        /* Tcl interpreters are bound to one thread */
    int python_owned;           /* created by Interp(): deleted with us */
    PyObject *handles;          /* "::py::objN" -> object */
    unsigned long next_handle;
};

static PyTypeObject InterpType;
static PyTypeObject OutcomeType;

static int
check_usable(InterpObject *self)
{
    if (self->interp == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Tcl interpreter has been deleted");
        return -1;
    }
    if (self->thread != Tcl_GetCurrentThread()) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a Tcl interpreter can only be used from the thread that created it");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Value conversion                                                     */

static PyObject *
str_from_tcl(Tcl_Obj *obj)
{
    Tcl_Size len, i;
    const char *s = Tcl_GetStringFromObj(obj, &len);
    for (i = 0; i < len; i++) {
        if ((unsigned char)s[i] >= 0x80)
            break;
    }
    if (i == len)               /* plain ASCII: the common, fast case */
        return PyUnicode_FromStringAndSize(s, len);
    /* Tcl's internal UTF-8 writes NUL as C0 80 and, in 8.6, characters
       beyond the BMP as surrogates: go through Tcl's own code units. */
    Tcl_Size n;
    Tcl_UniChar *u = Tcl_GetUnicodeFromObj(obj, &n);
    return PyUnicode_Decode((const char *)u, (Py_ssize_t)n * sizeof(Tcl_UniChar),
                            UNICHAR_CODEC, "surrogatepass");
}

static Tcl_Obj *
tcl_from_str(PyObject *s)
{
    if (PyUnicode_IS_ASCII(s)) {
        Py_ssize_t len = PyUnicode_GET_LENGTH(s);
        const char *data = (const char *)PyUnicode_DATA(s);
        if (memchr(data, 0, len) == NULL)
            return Tcl_NewStringObj(data, (Tcl_Size)len);
    }
    PyObject *units = PyUnicode_AsEncodedString(s, UNICHAR_CODEC, "surrogatepass");
    if (units == NULL)
        return NULL;
    Tcl_Obj *obj = Tcl_NewUnicodeObj((const Tcl_UniChar *)PyBytes_AS_STRING(units),
                                     (Tcl_Size)(PyBytes_GET_SIZE(units) / sizeof(Tcl_UniChar)));
    Py_DECREF(units);
    return obj;
}

static Tcl_Obj *make_handle(InterpObject *owner, PyObject *value);

/* Frees a Tcl value nobody holds yet (refcount 0); NULL is fine. */
static void
discard(Tcl_Obj *obj)
{
    if (obj != NULL) {
        Tcl_IncrRefCount(obj);
        Tcl_DecrRefCount(obj);
    }
}

/* A Python value as a new (refcount 0) Tcl value, or NULL with a Python error. */
static Tcl_Obj *
to_tcl(InterpObject *owner, PyObject *v)
{
    if (v == Py_None)
        return Tcl_NewObj();
    if (PyBool_Check(v))
        return Tcl_NewIntObj(v == Py_True);
    if (PyLong_Check(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow && !(x == -1 && PyErr_Occurred()))
            return Tcl_NewWideIntObj((Tcl_WideInt)x);
        PyErr_Clear();
        PyObject *digits = PyLong_Type.tp_repr(v);   /* decimal, any size */
        if (digits == NULL)
            return NULL;
        Tcl_Obj *obj = tcl_from_str(digits);
        Py_DECREF(digits);
        return obj;
    }
    if (PyFloat_Check(v))
        return Tcl_NewDoubleObj(PyFloat_AS_DOUBLE(v));
    if (PyUnicode_Check(v))
        return tcl_from_str(v);
    if (PyBytes_Check(v))
        return Tcl_NewByteArrayObj((const unsigned char *)PyBytes_AS_STRING(v),
                                   (Tcl_Size)PyBytes_GET_SIZE(v));
    if (PyList_Check(v) || PyTuple_Check(v) || PyDict_Check(v)) {
        if (Py_EnterRecursiveCall(" while converting a Python value to Tcl"))
            return NULL;
        Tcl_Obj *result = NULL;
        if (PyDict_Check(v)) {
            Py_ssize_t pos = 0;
            PyObject *key, *value;
            result = Tcl_NewDictObj();
            while (PyDict_Next(v, &pos, &key, &value)) {
                Tcl_Obj *k = to_tcl(owner, key), *x = k ? to_tcl(owner, value) : NULL;
                if (x == NULL) {
                    discard(k);
                    discard(result);
                    result = NULL;
                    break;
                }
                Tcl_DictObjPut(NULL, result, k, x);
            }
        } else {
            PyObject *seq = PySequence_Fast(v, "");
            if (seq != NULL) {
                Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
                result = Tcl_NewListObj(0, NULL);
                for (Py_ssize_t i = 0; i < n; i++) {
                    Tcl_Obj *item = to_tcl(owner, PySequence_Fast_GET_ITEM(seq, i));
                    if (item == NULL) {
                        discard(result);
                        result = NULL;
                        break;
                    }
                    Tcl_ListObjAppendElement(NULL, result, item);
                }
                Py_DECREF(seq);
            }
        }
        Py_LeaveRecursiveCall();
        return result;
    }
    return make_handle(owner, v);
}

/* A Tcl argument for Python: the object if it names a live handle, else str. */
static PyObject *
arg_to_python(InterpObject *owner, Tcl_Obj *obj, int *is_handle)
{
    Tcl_Size len;
    const char *s = Tcl_GetStringFromObj(obj, &len);
    if (len > (Tcl_Size)sizeof(HANDLE_PREFIX) - 1
            && memcmp(s, HANDLE_PREFIX, sizeof(HANDLE_PREFIX) - 1) == 0
            && owner->handles != NULL) {
        PyObject *key = PyUnicode_FromStringAndSize(s, len);
        if (key == NULL)
            return NULL;
        PyObject *found = PyDict_GetItemWithError(owner->handles, key);
        Py_DECREF(key);
        if (found != NULL) {
            if (is_handle) *is_handle = 1;
            return Py_NewRef(found);
        }
        if (PyErr_Occurred())
            return NULL;
    }
    return str_from_tcl(obj);
}

static PyObject *
args_to_python(InterpObject *owner, int objc, Tcl_Obj *const objv[], int *any_handle)
{
    PyObject *args = PyTuple_New(objc);
    if (args == NULL)
        return NULL;
    for (int i = 0; i < objc; i++) {
        PyObject *a = arg_to_python(owner, objv[i], any_handle);
        if (a == NULL) {
            Py_DECREF(args);
            return NULL;
        }
        PyTuple_SET_ITEM(args, i, a);
    }
    return args;
}

/* ------------------------------------------------------------------ */
/* Errors, both ways                                                    */

static Tcl_Obj *
attr_to_tcl(PyObject *obj, const char *name)
{
    PyObject *attr = PyObject_GetAttrString(obj, name);
    Tcl_Obj *result = (attr && PyUnicode_Check(attr)) ? tcl_from_str(attr) : NULL;
    Py_XDECREF(attr);
    PyErr_Clear();
    return result;
}

static void
describe_in_c(PyObject *value, Tcl_Obj **message, Tcl_Obj **code)
{
    if (value != NULL && TclErrorType != NULL && PyObject_IsInstance(value, TclErrorType) == 1) {
        *message = attr_to_tcl(value, "result");
        *code = attr_to_tcl(value, "errorcode");
    }
    PyErr_Clear();
    if (*message == NULL || *code == NULL) {
        const char *type = value ? Py_TYPE(value)->tp_name : "Exception";
        PyObject *text = value ? PyObject_Str(value) : NULL;
        const char *utf8 = text ? PyUnicode_AsUTF8(text) : NULL;
        PyErr_Clear();
        discard(*message);
        discard(*code);
        *message = utf8 && *utf8 ? Tcl_ObjPrintf("%s: %s", type, utf8) : Tcl_NewStringObj(type, -1);
        *code = Tcl_NewListObj(0, NULL);
        Tcl_ListObjAppendElement(NULL, *code, Tcl_NewStringObj("PYTHON", -1));
        Tcl_ListObjAppendElement(NULL, *code, Tcl_NewStringObj(type, -1));
        Tcl_ListObjAppendElement(NULL, *code, Tcl_NewStringObj(utf8 ? utf8 : "", -1));
        Py_XDECREF(text);
    }
}

/* The pending Python exception becomes the Tcl error; returns TCL_ERROR. */
static int
report_python_error(InterpObject *owner, Tcl_Interp *interp)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);

    /* (message, errorcode, text to add to errorInfo or None) */
    PyObject *desc = (describe_error && value)
        ? PyObject_CallOneArg(describe_error, value) : NULL;
    Tcl_Obj *message = NULL, *code = NULL, *info = NULL;
    if (desc != NULL && PyTuple_Check(desc) && PyTuple_GET_SIZE(desc) == 3) {
        message = to_tcl(owner, PyTuple_GET_ITEM(desc, 0));
        code = message ? to_tcl(owner, PyTuple_GET_ITEM(desc, 1)) : NULL;
        if (code && PyTuple_GET_ITEM(desc, 2) != Py_None)
            info = to_tcl(owner, PyTuple_GET_ITEM(desc, 2));
    }
    Py_XDECREF(desc);
    PyErr_Clear();
    if (message == NULL || code == NULL) {
        /* Describing failed too (at Python's recursion limit, say): what C
           can read without running Python code will do. */
        discard(message);
        discard(info);
        message = code = info = NULL;
        describe_in_c(value, &message, &code);
    }
    Py_XDECREF(value);
    Tcl_SetObjResult(interp, message);
    Tcl_SetObjErrorCode(interp, code);
    if (info)                       /* errorInfo starts with the message */
        Tcl_AppendObjToErrorInfo(interp, info);
    return TCL_ERROR;
}

static PyObject *
dict_str(Tcl_Obj *dict, const char *key)
{
    Tcl_Obj *k = Tcl_NewStringObj(key, -1), *v = NULL;
    Tcl_IncrRefCount(k);
    Tcl_DictObjGet(NULL, dict, k, &v);
    Tcl_DecrRefCount(k);
    return v ? str_from_tcl(v) : PyUnicode_FromString("");
}

/* The interpreter's error (code != OK) becomes tclamp.TclError; returns NULL. */
static PyObject *
raise_tcl_error(Tcl_Interp *interp, int code)
{
    if (code == TCL_BREAK || code == TCL_CONTINUE) {
        Tcl_SetObjResult(interp, Tcl_ObjPrintf("invoked \"%s\" outside of a loop",
                                               code == TCL_BREAK ? "break" : "continue"));
        code = TCL_ERROR;
    }
    Tcl_Obj *options = Tcl_GetReturnOptions(interp, code);
    Tcl_IncrRefCount(options);
    PyObject *result = str_from_tcl(Tcl_GetObjResult(interp));
    PyObject *errorcode = dict_str(options, "-errorcode");
    PyObject *errorinfo = dict_str(options, "-errorinfo");
    Tcl_DecrRefCount(options);
    Tcl_ResetResult(interp);
    if (result && errorcode && errorinfo && TclErrorType) {
        PyObject *exc = PyObject_CallFunctionObjArgs(TclErrorType, result, errorcode, errorinfo, NULL);
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
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Object handles: a Python object as a Tcl command                    */

/* A command's clientData outlives a deletion that happens while the
   command runs (a method that releases its own handle): `busy` counts
   running calls, and the last one out frees what `deleted` marked. */
typedef struct {
    InterpObject *owner;        /* strong */
    PyObject *object;           /* strong */
    PyObject *name;
    int busy, deleted;
} Handle;

static void free_handle(Handle *h);

static int
handle_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    Handle *h = cd;
    if (objc < 2) {
        Tcl_WrongNumArgs(interp, 1, objv, "method ?arg ...?");
        return TCL_ERROR;
    }
    Entry e;
    enter(&e, h->owner);
    h->busy++;
    int rc = TCL_ERROR;
    PyObject *name = str_from_tcl(objv[1]);
    PyObject *attr = name ? PyObject_GetAttr(h->object, name) : NULL;
    PyObject *value = NULL;
    if (attr != NULL) {
        if (PyCallable_Check(attr)) {
            PyObject *args = args_to_python(h->owner, objc - 2, objv + 2, NULL);
            value = args ? PyObject_Call(attr, args, NULL) : NULL;
            Py_XDECREF(args);
        } else if (objc == 2) {
            value = Py_NewRef(attr);        /* a plain attribute: read it */
        } else {
            PyErr_Format(PyExc_TypeError, "attribute '%U' is not callable", name);
        }
    }
    Tcl_Obj *result = value ? to_tcl(h->owner, value) : NULL;
    if (result != NULL) {
        Tcl_SetObjResult(interp, result);
        rc = TCL_OK;
    } else {
        rc = report_python_error(h->owner, interp);
    }
    Py_XDECREF(value);
    Py_XDECREF(attr);
    Py_XDECREF(name);
    if (--h->busy == 0 && h->deleted)
        free_handle(h);
    leave(&e);
    return rc;
}

static void
free_handle(Handle *h)
{
    if (!python_finalized) {
        Entry e;
        enter(&e, NULL);
        Py_DECREF(h->name);
        Py_DECREF(h->object);
        Py_DECREF(h->owner);
        leave(&e);
    }
    ckfree((char *)h);
}

static void
handle_deleted(ClientData cd)
{
    Handle *h = cd;
    if (!python_finalized) {    /* the name is free for reuse at once */
        Entry e;
        enter(&e, NULL);
        if (h->owner->handles != NULL && PyDict_DelItem(h->owner->handles, h->name) < 0)
            PyErr_Clear();
        leave(&e);
    }
    h->deleted = 1;
    if (h->busy == 0)
        free_handle(h);
}

static Tcl_Obj *
make_handle(InterpObject *owner, PyObject *value)
{
    if (owner == NULL || owner->interp == NULL || owner->handles == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "a %.200s cannot become a Tcl value outside a Tcl interpreter",
                     Py_TYPE(value)->tp_name);
        return NULL;
    }
    PyObject *name = PyUnicode_FromFormat(HANDLE_PREFIX "%lu", ++owner->next_handle);
    if (name == NULL || PyDict_SetItem(owner->handles, name, value) < 0) {
        Py_XDECREF(name);
        return NULL;
    }
    Handle *h = (Handle *)ckalloc(sizeof(Handle));
    h->owner = (InterpObject *)Py_NewRef(owner);
    h->object = Py_NewRef(value);
    h->name = name;
    h->busy = h->deleted = 0;
    const char *cname = PyUnicode_AsUTF8(name);
    Tcl_CreateObjCommand(owner->interp, cname, handle_command, h, handle_deleted);
    return Tcl_NewStringObj(cname, -1);
}

static int
release_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    InterpObject *owner = cd;
    if (objc != 2) {
        Tcl_WrongNumArgs(interp, 1, objv, "handle");
        return TCL_ERROR;
    }
    Entry e;
    enter(&e, owner);
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
    return Tcl_DeleteCommand(interp, Tcl_GetString(objv[1])) == 0 ? TCL_OK : TCL_ERROR;
}

/* ------------------------------------------------------------------ */
/* Outcome: a Tcl script's return code, result and options, kept whole */

typedef struct {
    PyObject_HEAD
    int code;
    Tcl_Obj *result;
    Tcl_Obj *options;
} OutcomeObject;

static void
Outcome_dealloc(OutcomeObject *self)
{
    if (self->result) Tcl_DecrRefCount(self->result);
    if (self->options) Tcl_DecrRefCount(self->options);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Outcome_get_code(OutcomeObject *self, void *unused)
{
    return PyLong_FromLong(self->code);
}

static PyObject *
Outcome_get_result(OutcomeObject *self, void *unused)
{
    return str_from_tcl(self->result);
}

static PyGetSetDef Outcome_getset[] = {
    {"code", (getter)Outcome_get_code, NULL, "Tcl return code (0 ok, 1 error, 2 return, 3 break, 4 continue)", NULL},
    {"result", (getter)Outcome_get_result, NULL, "the script's result", NULL},
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

static int
apply_outcome(Tcl_Interp *interp, OutcomeObject *o)
{
    Tcl_SetObjResult(interp, o->result);
    return Tcl_SetReturnOptions(interp, o->options);
}

/* ------------------------------------------------------------------ */
/* Commands implemented in Python                                       */

/*
 * A "function" command calls its callable with the converted arguments and
 * converts the value back.  A "planned" command calls its callable (a
 * parser) with the arguments and gets a plan back:
 *
 *     (steps, result, cacheable)
 *     steps:  tuple of (callable, args-tuple), called in order
 *     result: None (convert the last step's value), a dict (map that value),
 *             or a constant
 *
 * A cacheable plan depends only on the argument strings (and on state that
 * only changes with invalidate_plans()), so it is kept in a small
 * per-command memo keyed by them: a repeated call runs the steps straight
 * from C without creating a single Python object for its arguments.
 */
typedef struct {
    int objc;                   /* 0: empty slot */
    unsigned long generation;   /* the thread's plan generation it was made in */
    char *key;                  /* the arguments, each as <length><bytes> */
    size_t keylen;
    PyObject *steps;
    PyObject *result;           /* None or dict; NULL when constant */
    Tcl_Obj *constant;
    PyObject *last_value;       /* the last immutable value converted, */
    Tcl_Obj *last_obj;          /* and what it became: reused if it recurs */
} Memo;

typedef struct {
    InterpObject *owner;        /* borrowed: Tcl deletes commands before it
                                   drops the interpreter's own reference */
    PyObject *callable;
    int planned;
    int busy, deleted;          /* as for Handle */
    int memo_next;
    Memo memo[MEMO_SLOTS];
} Command;

static void free_command(Command *cmd);

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
    ckfree(m->key);
    Py_XDECREF(m->steps);
    Py_XDECREF(m->result);
    Py_XDECREF(m->last_value);
    if (m->constant) Tcl_DecrRefCount(m->constant);
    if (m->last_obj) Tcl_DecrRefCount(m->last_obj);
    memset(m, 0, sizeof(*m));
}

static int
check_plan(PyObject *plan, PyObject **steps, PyObject **result, int *cacheable)
{
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 3
            || !PyTuple_Check(PyTuple_GET_ITEM(plan, 0))) {
        PyErr_SetString(PyExc_TypeError, "a command plan is (steps, result, cacheable)");
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
    *cacheable = PyObject_IsTrue(PyTuple_GET_ITEM(plan, 2));
    return *cacheable < 0 ? -1 : 0;
}

static void
memo_store(Command *cmd, int objc, Tcl_Obj *const objv[], PyObject *steps,
           PyObject *result, Tcl_Obj *constant)
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
    m->generation = here.generation;
    m->steps = Py_NewRef(steps);
    m->result = constant ? NULL : Py_NewRef(result);
    m->constant = constant;
    if (constant) Tcl_IncrRefCount(constant);
}

/* Readers return one of a few immutable values (a bool, a dtype's name):
   a memo entry keeps the last one's Tcl value to hand out again. */
static int
reusable(PyObject *value)
{
    return PyBool_Check(value) || PyUnicode_CheckExact(value) || value == Py_None;
}

static int
run_steps(Command *cmd, Tcl_Interp *interp, PyObject *steps, PyObject *result,
          Tcl_Obj *constant, Memo *memo)
{
    PyObject *value = NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(steps);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *step = PyTuple_GET_ITEM(steps, i);
        Py_XDECREF(value);
        value = PyObject_Call(PyTuple_GET_ITEM(step, 0), PyTuple_GET_ITEM(step, 1), NULL);
        if (value == NULL)
            return report_python_error(cmd->owner, interp);
    }
    if (value != NULL && Py_IS_TYPE(value, &OutcomeType)) {
        int rc = apply_outcome(interp, (OutcomeObject *)value);
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
    if (memo != NULL && memo->last_value == value) {
        Py_DECREF(value);
        Tcl_SetObjResult(interp, memo->last_obj);
        return TCL_OK;
    }
    Tcl_Obj *obj = to_tcl(cmd->owner, value);
    if (obj == NULL) {
        Py_DECREF(value);
        return report_python_error(cmd->owner, interp);
    }
    if (memo != NULL && reusable(value)) {
        Py_XSETREF(memo->last_value, Py_NewRef(value));
        if (memo->last_obj) Tcl_DecrRefCount(memo->last_obj);
        memo->last_obj = obj;
        Tcl_IncrRefCount(obj);
    }
    Py_DECREF(value);
    Tcl_SetObjResult(interp, obj);
    return TCL_OK;
}

/* Runs a remembered plan.  The steps are torch's own functions, but hold
   the plan anyway: a step that re-entered this command could reuse its
   slot, and then the slot's last result is no longer ours to set. */
static int
run_memo(Command *cmd, Tcl_Interp *interp, Memo *m)
{
    PyObject *steps = Py_NewRef(m->steps);
    PyObject *result = m->result ? Py_NewRef(m->result) : NULL;
    Tcl_Obj *constant = m->constant;
    if (constant) Tcl_IncrRefCount(constant);
    int rc = run_steps(cmd, interp, steps, result, constant, m);
    if (constant) Tcl_DecrRefCount(constant);
    Py_XDECREF(result);
    Py_DECREF(steps);
    return rc;
}

static int
python_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    Command *cmd = cd;
    if (python_finalized) {
        Tcl_SetObjResult(interp, Tcl_NewStringObj("Python has been finalized", -1));
        return TCL_ERROR;
    }
    Entry e;
    enter(&e, cmd->owner);
    cmd->busy++;
    int rc;
    if (cmd->planned) {
        for (int i = 0; i < MEMO_SLOTS; i++) {
            Memo *m = &cmd->memo[i];
            if (m->objc != 0 && m->generation == here.generation
                    && memo_matches(m, objc, objv)) {
                rc = run_memo(cmd, interp, m);
                goto done;
            }
        }
    }
    int any_handle = 0;
    PyObject *args = args_to_python(cmd->owner, objc - 1, objv + 1, &any_handle);
    PyObject *value = args ? PyObject_Call(cmd->callable, args, NULL) : NULL;
    Py_XDECREF(args);
    if (value == NULL) {
        rc = report_python_error(cmd->owner, interp);
    } else if (!cmd->planned) {
        Tcl_Obj *obj = to_tcl(cmd->owner, value);
        if (obj == NULL) {
            rc = report_python_error(cmd->owner, interp);
        } else {
            Tcl_SetObjResult(interp, obj);
            rc = TCL_OK;
        }
    } else {
        PyObject *steps, *result;
        int cacheable;
        Tcl_Obj *constant = NULL;
        if (check_plan(value, &steps, &result, &cacheable) < 0
                || (result != Py_None && !PyDict_Check(result)
                    && (constant = to_tcl(cmd->owner, result)) == NULL)) {
            rc = report_python_error(cmd->owner, interp);
        } else {
            if (constant) Tcl_IncrRefCount(constant);
            if (cacheable && !any_handle)
                memo_store(cmd, objc, objv, steps, result, constant);
            rc = run_steps(cmd, interp, steps, result, constant, NULL);
            if (constant) Tcl_DecrRefCount(constant);
        }
    }
    Py_XDECREF(value);
done:
    if (--cmd->busy == 0 && cmd->deleted)
        free_command(cmd);
    leave(&e);
    return rc;
}

static void
free_command(Command *cmd)
{
    if (!python_finalized) {
        Entry e;
        enter(&e, NULL);
        for (int i = 0; i < MEMO_SLOTS; i++)
            memo_clear(&cmd->memo[i]);
        Py_DECREF(cmd->callable);
        leave(&e);
    }
    ckfree((char *)cmd);
}

static void
python_command_deleted(ClientData cd)
{
    Command *cmd = cd;
    cmd->deleted = 1;
    if (cmd->busy == 0)
        free_command(cmd);
}

/* ------------------------------------------------------------------ */
/* Interp methods                                                       */

/* What an evaluation from Python returns: the result as str, or NULL with
   tclamp.TclError raised (`return` at the top is a normal end, as in tclsh). */
static PyObject *
eval_result(Tcl_Interp *interp, int code)
{
    if (code != TCL_OK && code != TCL_RETURN)
        return raise_tcl_error(interp, code);
    PyObject *result = str_from_tcl(Tcl_GetObjResult(interp));
    Tcl_ResetResult(interp);
    return result;
}

static PyObject *
Interp_eval(InterpObject *self, PyObject *script)
{
    if (check_usable(self) < 0)
        return NULL;
    if (!PyUnicode_Check(script))
        return PyErr_Format(PyExc_TypeError, "script must be str, not %.100s",
                            Py_TYPE(script)->tp_name);
    Tcl_Obj *obj = tcl_from_str(script);
    if (obj == NULL)
        return NULL;
    Tcl_Interp *interp = self->interp;
    int code;
    Tcl_IncrRefCount(obj);
    Tcl_Preserve(interp);       /* the script may delete its interpreter */
    WITHOUT_GIL(code = Tcl_EvalObjEx(interp, obj, TCL_EVAL_GLOBAL));
    Tcl_DecrRefCount(obj);
    PyObject *result = eval_result(interp, code);
    Tcl_Release(interp);
    return result;
}

static PyObject *
Interp_call(InterpObject *self, PyObject *args)
{
    if (check_usable(self) < 0)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n == 0)
        return PyErr_Format(PyExc_TypeError, "call() needs a command name");
    Tcl_Obj **objv = PyMem_New(Tcl_Obj *, n);
    if (objv == NULL)
        return PyErr_NoMemory();
    Py_ssize_t made;
    for (made = 0; made < n; made++) {
        objv[made] = to_tcl(self, PyTuple_GET_ITEM(args, made));
        if (objv[made] == NULL)
            break;
        Tcl_IncrRefCount(objv[made]);
    }
    PyObject *result = NULL;
    if (made == n) {
        Tcl_Interp *interp = self->interp;
        int code;
        Tcl_Preserve(interp);
        WITHOUT_GIL(code = Tcl_EvalObjv(interp, (int)n, objv, TCL_EVAL_GLOBAL));
        result = eval_result(interp, code);
        Tcl_Release(interp);
    }
    while (made-- > 0)
        Tcl_DecrRefCount(objv[made]);
    PyMem_Free(objv);
    return result;
}

/* Runs a script in the current Tcl frame (the caller of the running
   command) and returns its Outcome without raising. */
static PyObject *
Interp_evaluate(InterpObject *self, PyObject *script)
{
    if (check_usable(self) < 0)
        return NULL;
    if (!PyUnicode_Check(script))
        return PyErr_Format(PyExc_TypeError, "script must be str");
    Tcl_Obj *obj = tcl_from_str(script);
    if (obj == NULL)
        return NULL;
    OutcomeObject *o = PyObject_New(OutcomeObject, &OutcomeType);
    if (o == NULL) {
        discard(obj);
        return NULL;
    }
    Tcl_Interp *interp = self->interp;
    int code;
    Tcl_IncrRefCount(obj);
    Tcl_Preserve(interp);
    WITHOUT_GIL(code = Tcl_EvalObjEx(interp, obj, 0));
    Tcl_DecrRefCount(obj);
    o->code = code;
    o->options = Tcl_GetReturnOptions(interp, code);
    Tcl_IncrRefCount(o->options);
    o->result = Tcl_GetObjResult(interp);
    Tcl_IncrRefCount(o->result);
    Tcl_ResetResult(interp);
    Tcl_Release(interp);
    return (PyObject *)o;
}

static PyObject *
Interp_create_command(InterpObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"name", "callable", "planned", NULL};
    const char *name;
    PyObject *callable;
    int planned = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|p:create_command", kwlist,
                                     &name, &callable, &planned))
        return NULL;
    if (check_usable(self) < 0)
        return NULL;
    if (!PyCallable_Check(callable))
        return PyErr_Format(PyExc_TypeError, "callable expected");
    Command *cmd = (Command *)ckalloc(sizeof(Command));
    memset(cmd, 0, sizeof(*cmd));
    cmd->owner = self;
    cmd->callable = Py_NewRef(callable);
    cmd->planned = planned;
    Tcl_CreateObjCommand(self->interp, name, python_command, cmd, python_command_deleted);
    Py_RETURN_NONE;
}

static PyObject *
Interp_delete(InterpObject *self, PyObject *unused)
{
    if (self->interp != NULL) {
        if (check_usable(self) < 0)
            return NULL;
        Tcl_DeleteInterp(self->interp);
    }
    Py_RETURN_NONE;
}

static PyObject *
Interp_get_alive(InterpObject *self, void *unused)
{
    return PyBool_FromLong(self->interp != NULL && !Tcl_InterpDeleted(self->interp));
}

static PyObject *
Interp_get_handle_count(InterpObject *self, void *unused)
{
    return PyLong_FromSsize_t(self->handles ? PyDict_GET_SIZE(self->handles) : 0);
}

/* Deletes every handle command of `obj` (an object may have several). */
static PyObject *
Interp_release(InterpObject *self, PyObject *obj)
{
    if (check_usable(self) < 0)
        return NULL;
    PyObject *names = PyList_New(0), *name, *value;
    Py_ssize_t pos = 0;
    while (names && PyDict_Next(self->handles, &pos, &name, &value)) {
        if (value == obj && PyList_Append(names, name) < 0)
            Py_CLEAR(names);
    }
    if (names == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++)
        Tcl_DeleteCommand(self->interp, PyUnicode_AsUTF8(PyList_GET_ITEM(names, i)));
    PyObject *count = PyLong_FromSsize_t(PyList_GET_SIZE(names));
    Py_DECREF(names);
    return count;
}

static PyMethodDef Interp_methods[] = {
    {"eval", (PyCFunction)Interp_eval, METH_O,
     "eval(script) -> str: evaluate a Tcl script at global level"},
    {"call", (PyCFunction)Interp_call, METH_VARARGS,
     "call(cmd, *args) -> str: call a Tcl command with converted arguments"},
    {"evaluate", (PyCFunction)Interp_evaluate, METH_O,
     "evaluate(script) -> Outcome: run a script in the calling Tcl frame, keeping its return code"},
    {"create_command", (PyCFunction)(void (*)(void))Interp_create_command,
     METH_VARARGS | METH_KEYWORDS,
     "create_command(name, callable, planned=False): a Tcl command implemented in Python"},
    {"release", (PyCFunction)Interp_release, METH_O,
     "release(obj) -> int: delete every object handle of obj"},
    {"delete", (PyCFunction)Interp_delete, METH_NOARGS, "delete the Tcl interpreter"},
    {NULL}
};

static PyGetSetDef Interp_getset[] = {
    {"alive", (getter)Interp_get_alive, NULL, "whether the Tcl interpreter still exists", NULL},
    {"handle_count", (getter)Interp_get_handle_count, NULL, "number of live object handles", NULL},
    {NULL}
};

/* Tcl deletes the interpreter's commands first, then calls this. */
static void
interp_deleted(ClientData cd, Tcl_Interp *interp)
{
    InterpObject *self = cd;
    if (python_finalized)
        return;
    Entry e;
    enter(&e, NULL);
    self->interp = NULL;
    Py_CLEAR(self->handles);
    if (!self->python_owned)
        Py_DECREF(self);            /* the reference the interpreter held */
    leave(&e);
}

/* Give `interp` the bridge: the py ensemble's C part, then tclamp._attach. */
static InterpObject *
attach(Tcl_Interp *interp, int python_owned)
{
    InterpObject *self = PyObject_New(InterpObject, &InterpType);
    if (self == NULL)
        return NULL;
    self->interp = interp;
    self->thread = Tcl_GetCurrentThread();
    self->python_owned = python_owned;
    self->next_handle = 0;
    self->handles = PyDict_New();
    if (self->handles == NULL) {
        self->interp = NULL;
        Py_DECREF(self);
        return NULL;
    }
    if (!python_owned)
        Py_INCREF(self);            /* released by interp_deleted */
    Tcl_SetAssocData(interp, "tclamp", interp_deleted, self);
    Tcl_CreateObjCommand(interp, "::py::release", release_command, self, NULL);

    PyObject *tclamp = PyImport_ImportModule("tclamp");
    PyObject *r = tclamp ? PyObject_CallMethod(tclamp, "_attach", "O", self) : NULL;
    Py_XDECREF(tclamp);
    if (r == NULL) {
        /* Commands made so far borrow `self`: a Tcl-owned interpreter keeps
           it (the assoc data's reference) until it is deleted; ours goes. */
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
    return self;
}

static void
Interp_dealloc(InterpObject *self)
{
    /* Live handles hold references to us, so none exist here. */
    if (self->interp != NULL && self->python_owned
            && self->thread == Tcl_GetCurrentThread())
        Tcl_DeleteInterp(self->interp);
    Py_XDECREF(self->handles);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------------ */
/* Python host: load libtcl and create interpreters                     */

static Tcl_Interp *(*create_interp)(void);

static int
load_libtcl(void)
{
    if (create_interp != NULL)
        return 0;
    void *lib = dlopen(TCLAMP_LIBTCL, RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL)
        lib = dlopen(TCLAMP_LIBTCL_SONAME, RTLD_NOW | RTLD_GLOBAL);
    if (lib == NULL) {
        PyErr_Format(PyExc_ImportError, "cannot load the Tcl library: %s", dlerror());
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

static PyObject *
Interp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0))
        return PyErr_Format(PyExc_TypeError, "Interp() takes no arguments");
    if (load_libtcl() < 0)
        return NULL;
    Tcl_Interp *interp = create_interp();
    if (Tcl_InitStubs(interp, "8.6-", 0) == NULL) {
        PyErr_SetString(PyExc_ImportError, "Tcl 8.6 or newer is required");
        return NULL;
    }
    if (Tcl_Init(interp) != TCL_OK) {
        raise_tcl_error(interp, TCL_ERROR);
        Tcl_DeleteInterp(interp);
        return NULL;
    }
    return (PyObject *)attach(interp, 1);
}

static PyTypeObject InterpType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tclamp._bridge.Interp",
    .tp_doc = "Interp(): a new Tcl interpreter in this thread with tclamp's commands.",
    .tp_basicsize = sizeof(InterpObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Interp_new,
    .tp_dealloc = (destructor)Interp_dealloc,
    .tp_methods = Interp_methods,
    .tp_getset = Interp_getset,
};

/* ------------------------------------------------------------------ */
/* The Python module                                                    */

static PyObject *
bridge_configure(PyObject *module, PyObject *args)
{
    PyObject *error_type, *describe;
    if (!PyArg_ParseTuple(args, "OO:configure", &error_type, &describe))
        return NULL;
    Py_XSETREF(TclErrorType, Py_NewRef(error_type));
    Py_XSETREF(describe_error, Py_NewRef(describe));
    Py_RETURN_NONE;
}

static PyObject *
bridge_current(PyObject *module, PyObject *unused)
{
    PyObject *c = here.current ? (PyObject *)here.current : Py_None;
    return Py_NewRef(c);
}

static PyObject *
bridge_invalidate_plans(PyObject *module, PyObject *unused)
{
    here.generation++;
    Py_RETURN_NONE;
}

static PyMethodDef bridge_methods[] = {
    {"invalidate_plans", bridge_invalidate_plans, METH_NOARGS,
     "forget the plans this thread's commands remembered (state they depend on changed)"},
    {"configure", bridge_configure, METH_VARARGS,
     "configure(TclError, describe_error): set by tclamp on import"},
    {"current", bridge_current, METH_NOARGS,
     "the Interp whose Tcl command is running Python in this thread, or None"},
    {NULL}
};

static struct PyModuleDef bridge_module = {
    PyModuleDef_HEAD_INIT, "tclamp._bridge",
    "tclamp's Tcl<->Python bridge (see _bridge.c).", -1, bridge_methods,
};

PyMODINIT_FUNC
PyInit__bridge(void)
{
    if (PyType_Ready(&InterpType) < 0 || PyType_Ready(&OutcomeType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&bridge_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Interp", (PyObject *)&InterpType) < 0
            || PyModule_AddObjectRef(m, "Outcome", (PyObject *)&OutcomeType) < 0
            || PyModule_AddStringConstant(m, "tcl_version", TCL_PATCH_LEVEL) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

/* ------------------------------------------------------------------ */
/* The Tcl extension                                                    */

static const char *
own_path(void)
{
    Dl_info info;
    return dladdr((void *)&PyInit__bridge, &info) ? info.dli_fname : NULL;
}

/* Tcl's exit: let Python run atexit handlers and flush its output. */
static void
finalize_python(ClientData unused)
{
    if (!python_started_here || python_finalized)
        return;
    if (here.depth > 0 || Tcl_GetCurrentThread() != python_thread) {
        /* exit from inside a Python call or another thread: Python's
           frames are still on some stack, so only flush. */
        Entry e;
        enter(&e, NULL);
        PyRun_SimpleString("import atexit, sys\natexit._run_exitfuncs()\n"
                           "sys.stdout.flush()\nsys.stderr.flush()\n");
        leave(&e);
        return;
    }
    if (here.parked != NULL)
        PyEval_RestoreThread(here.parked);
    here.parked = NULL;
    python_finalized = 1;
    Py_FinalizeEx();
}

static void
drop_thread_state(ClientData unused)
{
    if (python_finalized || here.parked == NULL)
        return;
    PyThreadState *ts = here.parked;
    here.parked = NULL;
    PyEval_RestoreThread(ts);
    PyThreadState_Clear(ts);
    PyThreadState_DeleteCurrent();
}

/* A Tcl thread new to Python gets one thread state for its lifetime. */
static void
ensure_thread_state(void)
{
    if (PyGILState_GetThisThreadState() != NULL)
        return;
    PyGILState_Ensure();            /* creates it, and takes the GIL */
    here.parked = PyEval_SaveThread();
    Tcl_CreateThreadExitHandler(drop_thread_state, NULL);
}

static int
start_python(Tcl_Interp *interp)
{
    const char *exe = getenv("TCLAMP_PYTHON");
    if (exe == NULL || *exe == '\0')
        exe = Tcl_GetVar(interp, "::tclamp::python", TCL_GLOBAL_ONLY);
    if (exe == NULL) {
        Tcl_SetObjResult(interp, Tcl_NewStringObj(
            "tclamp: no Python environment found: set TCLAMP_PYTHON to its python executable", -1));
        Tcl_SetErrorCode(interp, "TCLAMP", "PYTHON_START", NULL);
        return TCL_ERROR;
    }
    if (access(exe, X_OK) != 0) {
        Tcl_SetObjResult(interp, Tcl_ObjPrintf(
            "tclamp: cannot start Python: \"%s\" is not an executable file", exe));
        Tcl_SetErrorCode(interp, "TCLAMP", "PYTHON_START", NULL);
        return TCL_ERROR;
    }
    /* Tcl loaded us (and so libpython) privately; extension modules such
       as torch's need libpython's symbols in the global namespace. */
    Dl_info info;
    if (dladdr((void *)&Py_InitializeFromConfig, &info) && info.dli_fname)
        dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);

    struct sigaction tcl_sigint;
    sigaction(SIGINT, NULL, &tcl_sigint);
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;   /* signals belong to the Tcl host */
    config.parse_argv = 0;
    PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, exe);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        Tcl_SetObjResult(interp, Tcl_ObjPrintf("tclamp: cannot start Python from \"%s\": %s",
                                               exe, status.err_msg ? status.err_msg : "failed"));
        Tcl_SetErrorCode(interp, "TCLAMP", "PYTHON_START", NULL);
        return TCL_ERROR;
    }
    /* Our module object is this very file: make `import tclamp._bridge`
       find it rather than load a second copy, and `import tclamp` find the
       Python files beside it, whatever the environment has installed. */
    PyObject *module = PyInit__bridge();
    PyObject *modules = PySys_GetObject("modules");
    PyObject *sys_path = PySys_GetObject("path");
    const char *path = own_path();
    if (module == NULL || modules == NULL || path == NULL
            || PyModule_AddStringConstant(module, "__file__", path) < 0
            || PyDict_SetItemString(modules, "tclamp._bridge", module) < 0)
        PyErr_Print();
    if (path != NULL && sys_path != NULL) {
        char *dir = strdup(path), *slash;
        for (int up = 0; up < 2 && (slash = strrchr(dir, '/')) != NULL; up++)
            *slash = '\0';     /* .../src/tclamp/_bridge.so -> .../src */
        PyObject *entry = PyUnicode_DecodeFSDefault(dir);
        if (entry == NULL || PyList_Insert(sys_path, 0, entry) < 0)
            PyErr_Print();
        Py_XDECREF(entry);
        free(dir);
    }
    Py_XDECREF(module);
    /* Importing `signal` (torch does) installs Python's SIGINT handler even
       so; import it now and give the host its own disposition back. */
    PyObject *signal_module = PyImport_ImportModule("signal");
    if (signal_module == NULL)
        PyErr_Print();
    Py_XDECREF(signal_module);
    sigaction(SIGINT, &tcl_sigint, NULL);
    python_started_here = 1;
    python_thread = Tcl_GetCurrentThread();
    Tcl_CreateExitHandler(finalize_python, NULL);
    here.parked = PyEval_SaveThread();
    return TCL_OK;
}

/* Python was started by someone else: make sure it is this copy's module. */
static int
check_same_bridge(Tcl_Interp *interp)
{
    int ok = 1;
    const char *path = own_path();
    PyObject *modules = PySys_GetObject("modules");
    PyObject *m = modules ? PyDict_GetItemString(modules, "tclamp._bridge") : NULL;
    PyObject *file = m ? PyObject_GetAttrString(m, "__file__") : NULL;
    if (file != NULL && path != NULL) {
        const char *f = PyUnicode_AsUTF8(file);
        char a[4096], b[4096];
        ok = f && realpath(f, a) && realpath(path, b) && strcmp(a, b) == 0;
        if (!ok)
            Tcl_SetObjResult(interp, Tcl_ObjPrintf(
                "tclamp: this process already uses the bridge at \"%s\", not \"%s\"", f, path));
    }
    Py_XDECREF(file);
    PyErr_Clear();
    return ok ? TCL_OK : TCL_ERROR;
}

int
Tclamp_Init(Tcl_Interp *interp)
{
    if (Tcl_InitStubs(interp, "8.6-", 0) == NULL)
        return TCL_ERROR;
    if (python_finalized) {
        Tcl_SetObjResult(interp, Tcl_NewStringObj("tclamp: Python has been finalized", -1));
        return TCL_ERROR;
    }
    if (!Py_IsInitialized()) {
        if (start_python(interp) != TCL_OK)
            return TCL_ERROR;
    }
    ensure_thread_state();
    Entry e;
    enter(&e, NULL);
    int rc = check_same_bridge(interp);
    if (rc == TCL_OK) {
        InterpObject *self = attach(interp, 0);
        if (self == NULL)
            rc = report_python_error(NULL, interp);
        Py_XDECREF(self);
    }
    leave(&e);
    return rc;
}
