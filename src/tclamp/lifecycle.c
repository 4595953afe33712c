/*
 * lifecycle.c -- Python's start for a Tcl host, and the process's end.
 *
 * Start: `package require tclamp` in a process without Python starts it
 * (lifecycle_start), once, under lifecycle_lock; a process that runs
 * Python already (tkinter, an embedder) is checked to use this very copy
 * of the bridge (check_same_bridge).
 *
 * End: Python is closed first on each route, on the thread that ends the
 * process, while what Python's atexit handlers may still use is alive:
 *
 *   route                     thread       steps                     still alive
 *   `exit` in an interpreter  the caller   exit_command:             Tcl whole, torch,
 *     with tclamp                          close_python, then         every thread
 *                                          Tcl's own exit
 *   Tcl_Exit, Tcl_Finalize,   the caller   tcl_exit_handler:         Tcl (its exit
 *     `exit` elsewhere                     close_python; on_exit     handlers run),
 *                                          ends the process before   torch
 *                                          destructors if Tcl
 *                                          threads are still there
 *   libc's exit alone         the caller   close_python_at_process_  torch (hooked
 *                                          exit: atexit and flush,   again after it
 *                                          no finalizing             loaded)
 *   Python's own end (a       Python's     bridge_at_python_exit:    everything
 *     Python host)            main         interpreters and handles
 *                                          go, Tcl's output flushed
 *
 * close_python runs Python's atexit handlers, releases every handle's
 * object, then finalizes Python only on the thread Python started on and
 * with no other thread inside it; otherwise it flushes every open file and
 * keeps the GIL.  A second thread that ends the process meanwhile waits
 * for the first to end it.
 *
 * Threads: a Tcl thread's own Python state goes with the thread
 * (thread_exit_handler); a Python thread that made interpreters gives
 * Tcl's per-thread data back as it ends (ThreadGuard); a fork's child
 * disowns the interpreters of the threads it lacks
 * (bridge_after_fork_in_child).
 */
#include "bridge.h"
#include <dlfcn.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

atomic_int python_state;
atomic_int python_finalized;
atomic_int entries_active;
atomic_int abandoned_threads;
atomic_int deletions_pending;
atomic_int tcl_threads_in_python;
int python_started_here;
int tcl_finalizing;
int tcl_ready;
int handles_released;
_Thread_local ThreadBridge here;
InterpState *all_states;
PyObject *shutdown_steps;
static PyThreadState *first_state;      /* the state Python started with */

/* Start and close, one thread at a time.  (Not a Tcl_Mutex: tcl.h makes
   those no-ops unless the includer defines TCL_THREADS.) */
static pthread_mutex_t lifecycle_lock = PTHREAD_MUTEX_INITIALIZER;

static void close_python(int may_finalize);
static void close_python_for_exit(int may_finalize);
static void close_python_at_process_exit(void);
static pthread_t closer;                /* the thread that closes Python */
static int closing;                     /* ... while it runs its steps */

/* ------------------------------------------------------------------ */
/* What the process's end and a thread's end do to the core's state     */

/* The thread's kept exception goes, and what it holds (GIL held). */
void
release_in_flight(ThreadBridge *t)
{
    Py_CLEAR(t->in_flight);
    Py_CLEAR(t->in_flight_walked);
    if (t->in_flight_code != NULL) {
        Tcl_DecrRefCount(t->in_flight_code);
        t->in_flight_code = NULL;
    }
    Py_CLEAR(t->errorstack_text);
    if (t->errorstack_list != NULL) {
        Tcl_DecrRefCount(t->errorstack_list);
        t->errorstack_list = NULL;
    }
}

/* At exit: every object a handle holds goes now, while Python can still
   run its __del__ and close methods.  The commands stay, inert.  The
   handles' own references and every state's dicts are taken into one list
   with nothing run meanwhile (no collection either: allocating may start
   one), and go together: a finalizer may delete handles, interpreters, and
   the states this loop walks. */
void
release_all_handles(void)
{
    handles_released = 1;
    int collector_was_on = PyGC_Disable();
    Py_ssize_t count = 0;
    for (InterpState *s = all_states; s != NULL; s = s->next) {
        count += 2;
        for (Handle *h = s->newest; h != NULL; h = h->older)
            count += h->object != NULL;
    }
    PyObject *held = PyList_New(count);
    if (held == NULL)
        count = 0;              /* no memory: they go with the process */
    Py_ssize_t i = 0;
    for (InterpState *s = count ? all_states : NULL; s != NULL; s = s->next) {
        PyObject *handles = PyDict_New(), *by_object = PyDict_New();
        if (handles == NULL || by_object == NULL) {
            Py_XDECREF(handles);
            Py_XDECREF(by_object);
            break;
        }
        for (Handle *h = s->newest; h != NULL; h = h->older) {
            if (h->object != NULL) {
                PyList_SET_ITEM(held, i++, h->object);
                h->object = NULL;
            }
        }
        PyList_SET_ITEM(held, i++, s->handles);
        PyList_SET_ITEM(held, i++, s->by_object);
        s->handles = handles;
        s->by_object = by_object;
    }
    if (collector_was_on)
        PyGC_Enable();
    Py_XDECREF(held);
    PyErr_Clear();
}

/* The first idle interpreter of this thread that `wanted` picks, or NULL.
   (Deleting one changes the list: callers ask again after each.) */
InterpState *
idle_here(int (*wanted)(const InterpState *s))
{
    Tcl_ThreadId me = Tcl_GetCurrentThread();
    for (InterpState *s = all_states; s != NULL; s = s->next) {
        if (s->interp != NULL && s->thread == me && !Tcl_InterpActive(s->interp) && wanted(s))
            return s;
    }
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Starting Python for a Tcl host                                       */

static const char *
own_path(void)
{
    Dl_info info;
    return dladdr((void *)&own_path, &info) ? info.dli_fname : NULL;
}

/* `import tclamp` finds the package beside the bridge, and nothing else
   there: that directory on sys.path would put its environment's whole
   site-packages ahead of the started Python's own (another environment
   when TCLAMP_PYTHON chose the Python). */
static const char finder_source[] =
    "import sys, types\n"
    "from importlib.machinery import PathFinder\n"
    "sys.meta_path.insert(0, types.SimpleNamespace(find_spec=lambda name, path=None, target=None:\n"
    "    PathFinder.find_spec(name, [where]) if name == 'tclamp' else None))\n";

/* Our module object is this very shared object: make `import
   tclamp._bridge` find it rather than load a second copy, and `import
   tclamp` find the Python files beside it, whatever the environment has
   installed.  Paths are the OS's bytes, in the file system's encoding.
   (GIL held.) */
static void
adopt_this_copy(ModuleInit module_init)
{
    PyObject *module = module_init();
    PyObject *modules = PySys_GetObject("modules");
    const char *path = own_path();
    PyObject *file = path ? PyUnicode_DecodeFSDefault(path) : NULL;
    if (module == NULL || modules == NULL || file == NULL
            || PyModule_AddObjectRef(module, "__file__", file) < 0
            || PyDict_SetItemString(modules, "tclamp._bridge", module) < 0
            || PyDict_SetItemString(modules, MODULE_NAME(TCL_MAJOR_VERSION), module) < 0)
        PyErr_Print();
    if (path != NULL) {
        char *dir = strdup(path), *slash;
        for (int up = 0; up < 2 && (slash = strrchr(dir, '/')) != NULL; up++)
            *slash = '\0';     /* .../src/tclamp/_bridge.so -> .../src */
        PyObject *where = PyUnicode_DecodeFSDefault(dir);
        PyObject *globals = where ? Py_BuildValue("{sO}", "where", where) : NULL;
        PyObject *done = globals ? PyRun_String(finder_source, Py_file_input, globals, globals)
                                 : NULL;
        if (done == NULL)
            PyErr_Print();
        Py_XDECREF(done);
        Py_XDECREF(globals);
        Py_XDECREF(where);
        free(dir);
    }
    Py_XDECREF(file);
    Py_XDECREF(module);
}

static int
start_error(Tcl_Interp *interp, Tcl_Obj *message)
{
    Tcl_SetObjResult(interp, message);
    Tcl_SetErrorCode(interp, "TCLAMP", "PYTHON_START", NULL);
    return TCL_ERROR;
}

/* Starts the Python at `exe`: the OS's bytes for the path Tcl holds as
   `name`. */
static int
start_python_at(Tcl_Interp *interp, ModuleInit module_init, const char *exe, const char *name)
{
    if (access(exe, X_OK) != 0)
        return start_error(interp, Tcl_ObjPrintf(
            "tclamp: cannot start Python: \"%s\" is not an executable file", name));
    struct sigaction tcl_sigint;
    sigaction(SIGINT, NULL, &tcl_sigint);
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.install_signal_handlers = 0;   /* signals belong to the Tcl host */
    config.parse_argv = 0;
    config.buffered_stdio = 0;            /* in order with Tcl's output */
    PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, exe);
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status))
        return start_error(interp, Tcl_ObjPrintf("tclamp: cannot start Python from \"%s\": %s",
                                                 name, status.err_msg ? status.err_msg : "failed"));
    adopt_this_copy(module_init);
    /* Importing `signal` (torch does) installs Python's SIGINT handler even
       so; import it now and give the host its own disposition back. */
    PyObject *signal_module = PyImport_ImportModule("signal");
    if (signal_module == NULL)
        PyErr_Print();
    Py_XDECREF(signal_module);
    sigaction(SIGINT, &tcl_sigint, NULL);
    python_started_here = 1;
    atomic_store(&python_state, PY_RUNNING);
    atexit(close_python_at_process_exit);
    /* This thread's state is its own, like any Tcl thread's. */
    here.own = first_state = PyThreadState_Get();
    atomic_fetch_add(&tcl_threads_in_python, 1);
    here.known = 1;
    Tcl_CreateThreadExitHandler(thread_exit_handler, NULL);
    here.parked = PyEval_SaveThread();
    return TCL_OK;
}

/* Called with lifecycle_lock held: one thread starts Python, any others
   wait for it and then use it.  The path is Tcl's text (as load.tcl
   checked it); the OS and Python's config take it in the system encoding,
   which is not UTF-8 in a C locale. */
static int
start_python(Tcl_Interp *interp, ModuleInit module_init)
{
    /* load.tcl's choice, as it checked it (a command name found on PATH). */
    const char *name = Tcl_GetVar(interp, "::tclamp::checked_python", TCL_GLOBAL_ONLY);
    if (name == NULL || *name == '\0')
        name = Tcl_GetVar2(interp, "::env", "TCLAMP_PYTHON", TCL_GLOBAL_ONLY);
    if (name == NULL || *name == '\0')
        name = Tcl_GetVar(interp, "::tclamp::python", TCL_GLOBAL_ONLY);
    if (name == NULL)
        return start_error(interp, Tcl_NewStringObj(
            "tclamp: no Python environment found: set TCLAMP_PYTHON to its python executable", -1));
    Tcl_DString native;
    int rc = start_python_at(interp, module_init,
                             Tcl_UtfToExternalDString(NULL, name, -1, &native), name);
    Tcl_DStringFree(&native);
    return rc;
}

/* Python was started by someone else: make sure it is this copy's module. */
int
check_same_bridge(Tcl_Interp *interp, ModuleInit module_init)
{
    int ok = 1;
    const char *path = own_path();
    PyObject *modules = PySys_GetObject("modules");
    PyObject *m = modules ? PyDict_GetItemString(modules, "tclamp._bridge") : NULL;
    if (m == NULL && modules != NULL && PyDict_GetItemString(modules, "tclamp") == NULL) {
        adopt_this_copy(module_init);   /* tclamp not imported yet: this copy is it */
        return TCL_OK;
    }
    PyObject *file = m ? PyObject_GetAttrString(m, "__file__") : NULL;
    /* The OS's bytes for both paths (__file__ in the file system's encoding). */
    PyObject *file_bytes = file && PyUnicode_Check(file) ? PyUnicode_EncodeFSDefault(file) : NULL;
    if (file_bytes != NULL && path != NULL) {
        const char *f = PyBytes_AS_STRING(file_bytes);
        char a[PATH_MAX], b[PATH_MAX];
        ok = realpath(f, a) && realpath(path, b) && strcmp(a, b) == 0;
        if (!ok) {
            Tcl_DString theirs, ours;
            Tcl_SetObjResult(interp, Tcl_ObjPrintf(
                "tclamp: this process already uses the bridge at \"%s\", not \"%s\"",
                Tcl_ExternalToUtfDString(NULL, f, -1, &theirs),
                Tcl_ExternalToUtfDString(NULL, path, -1, &ours)));
            Tcl_DStringFree(&theirs);
            Tcl_DStringFree(&ours);
            Tcl_SetErrorCode(interp, "TCLAMP", "OTHER_BRIDGE", NULL);
        }
    }
    Py_XDECREF(file_bytes);
    Py_XDECREF(file);
    PyErr_Clear();
    return ok ? TCL_OK : TCL_ERROR;
}

int
lifecycle_start(Tcl_Interp *interp, ModuleInit module_init)
{
    int rc = TCL_OK;
    pthread_mutex_lock(&lifecycle_lock);
    switch (atomic_load(&python_state)) {
    case PY_CLOSED:
        Tcl_SetObjResult(interp, Tcl_NewStringObj("tclamp: Python has been finalized", -1));
        Tcl_SetErrorCode(interp, "TCLAMP", "FINALIZED", NULL);
        rc = TCL_ERROR;
        break;
    case PY_NOT_STARTED:
        if (Py_IsInitialized())     /* the process runs Python already */
            atomic_store(&python_state, PY_RUNNING);
        else
            rc = start_python(interp, module_init);
        break;
    }
    if (rc == TCL_OK)
        tcl_ready = 1;
    pthread_mutex_unlock(&lifecycle_lock);
    return rc;
}

/* Only the copy in use closes Python: a second copy that was refused
   would take the GIL at exit and keep it. */
void
lifecycle_loaded(void)
{
    pthread_mutex_lock(&lifecycle_lock);
    watch_tcl_exit();
    /* Loading imported torch, whose C++ static destructors libc runs
       before every exit handler registered earlier: ours again, so that
       Python's atexit handlers and handles go while torch works. */
    static int hooked_after_torch;
    if (python_started_here && !hooked_after_torch) {
        hooked_after_torch = 1;
        atexit(close_python_at_process_exit);
    }
    pthread_mutex_unlock(&lifecycle_lock);
}

/* ------------------------------------------------------------------ */
/* Threads                                                              */

static int
is_python_owned(const InterpState *s)
{
    return s->python_owned;
}

static void
disown(InterpState *s)
{
    s->thread = NULL;
    unmark_for_deletion(s);
}

/* What this thread's end leaves of its interpreters (one that runs, or
   one Tcl made) is no thread's: no other may use or delete it, not even a
   new one that gets the same thread id; and the ending thread state makes
   no more.  (A C thread that calls Python again gets a new state, which
   may.)  (GIL held.) */
static void
retire_thread_states(void)
{
    here.ended = PyThreadState_GetID(PyThreadState_Get());
    Tcl_ThreadId me = Tcl_GetCurrentThread();
    for (InterpState *s = all_states; s != NULL; s = s->next)
        if (s->thread == me)
            disown(s);
}

/* A fork's child (os.register_at_fork): its only thread is the one that
   forked, and the other threads' interpreters are no thread's, as at their
   end; a thread the child starts may get one's thread id. */
PyObject *
bridge_after_fork_in_child(PyObject *module, PyObject *unused)
{
    if (all_states == NULL)
        Py_RETURN_NONE;         /* no interpreter; Tcl may not be loaded */
    Tcl_ThreadId me = Tcl_GetCurrentThread();
    for (InterpState *s = all_states; s != NULL; s = s->next)
        if (s->thread != me && s->thread != NULL)
            disown(s);
    Py_RETURN_NONE;
}

/* Deletes the interpreters Python made on this thread (it is ending). */
void
delete_thread_interps(void)
{
    InterpState *s;
    while ((s = idle_here(is_python_owned)) != NULL)
        Tcl_DeleteInterp(s->interp);
}

/*
 * A Python thread that made an interpreter must give Tcl's per-thread data
 * back when it ends.  The guard sits in the thread state's dict, which
 * Python clears on the ending thread itself, with the GIL held.  A fork's
 * child clears the other threads' states on the forking thread: there the
 * guard is not its thread's, and leaves the thread alone.
 */
typedef struct {
    PyObject_HEAD
    uint64_t state;             /* id of the thread state whose dict holds it */
    PyObject *locals_key;       /* that state's, kept so no other takes its address */
} ThreadGuard;

static void
ThreadGuard_dealloc(PyObject *self)
{
    if (python_usable() && !tcl_finalizing
        && ((ThreadGuard *)self)->state == PyThreadState_GetID(PyThreadState_Get())) {
        Py_CLEAR(here.tkinter_call);    /* its interpreter goes while Tcl has the thread */
        delete_thread_interps();
        retire_thread_states();
        here.ending_normally = 1;
        Tcl_FinalizeThread();
        here.ending_normally = 0;
        here.known = 0;
    }
    Py_CLEAR(((ThreadGuard *)self)->locals_key);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject ThreadGuardType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tclamp._bridge.ThreadGuard",
    .tp_basicsize = sizeof(ThreadGuard),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = ThreadGuard_dealloc,
};

static int
is_python_main_thread(void)
{
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *main = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
    PyObject *ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
    int is_main = ident && PyLong_AsUnsignedLong(ident) == PyThread_get_thread_ident();
    Py_XDECREF(ident);
    Py_XDECREF(main);
    Py_XDECREF(threading);
    PyErr_Clear();
    return is_main;
}

/* Reading a new threading.local's data makes this thread its locals' key
   (which outlives the local), for thread_is_ending to watch. */
static int
make_locals_key(void)
{
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *local = threading ? PyObject_CallMethod(threading, "local", NULL) : NULL;
    PyObject *data = local ? PyObject_GetAttrString(local, "__dict__") : NULL;
    Py_XDECREF(data);
    Py_XDECREF(local);
    Py_XDECREF(threading);
    return data != NULL ? 0 : -1;
}

int
guard_python_thread(void)
{
    if (!here.known) {          /* to notice thread::exit on this thread */
        here.known = 1;
        Tcl_CreateThreadExitHandler(thread_exit_handler, NULL);
    }
    if (here.own != NULL || is_python_main_thread())
        return 0;               /* a Tcl thread, or the process's own end */
    PyObject *dict = PyThreadState_GetDict();
    if (dict == NULL || PyDict_GetItemString(dict, "tclamp.thread_guard") != NULL)
        return 0;
    ThreadGuard *guard = (ThreadGuard *)PyType_GenericAlloc(&ThreadGuardType, 0);
    if (guard == NULL)
        return -1;
    PyThreadState *current = PyThreadState_Get();
    uint64_t state = PyThreadState_GetID(current);
    int rc = LOCALS_HAVE_A_KEY && LOCALS_KEY(current) == NULL ? make_locals_key() : 0;
    if (rc == 0)
        rc = PyDict_SetItemString(dict, "tclamp.thread_guard", (PyObject *)guard);
    if (rc == 0) {              /* (else it goes, leaving the thread be) */
        guard->state = here.guarded = state;
        guard->locals_key = Py_XNewRef(LOCALS_KEY(current));
        here.guarded_dict = dict;
        here.guarded_key = guard->locals_key;
    }
    Py_DECREF(guard);
    return rc;
}

/* Its end has retired its interpreters, or Python is clearing its state:
   the dict that holds the guard, or the locals' key, is no longer the one
   the state ran with (Python sets each to NULL as it drops it, before the
   guard's turn, and a finalizer run then that reads a local or the dict
   makes a new one; only the clearing does either).  An interpreter or a
   tclamp.tcl made then would be held by what nothing frees. */
int
thread_is_ending(void)
{
    PyThreadState *state = PyThreadState_Get();
    uint64_t id = PyThreadState_GetID(state);
    return here.ended == id
        || (here.guarded == id && ((const void *)state->dict != here.guarded_dict
                                   || (const void *)LOCALS_KEY(state) != here.guarded_key));
}

int
ThreadGuard_ready(void)
{
    return PyType_Ready(&ThreadGuardType);
}

/* ------------------------------------------------------------------ */
/* Closing Python, from whichever thread ends the process               */

/* Calls shutdown step `i` (see shutdown.py SHUTDOWN_STEPS); its truth value,
   or 0 when Python code can no longer run. */
int
shutdown_step(int i)
{
    PyObject *r = shutdown_steps ? PyObject_CallNoArgs(PyTuple_GET_ITEM(shutdown_steps, i)) : NULL;
    int truth = r ? PyObject_IsTrue(r) : 0;
    Py_XDECREF(r);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        truth = 0;
    }
    return truth > 0;
}


/*
 * Called once, by the thread that ends the process.  Every object a handle
 * holds is released first.  Then Python is finalized if no other thread is
 * inside it (finalizing waits for Python's threads and cuts off any thread
 * that comes back to it); otherwise atexit runs and everything written is
 * flushed, and this thread keeps the GIL: no Python code runs again, and
 * the process ends without waiting for anyone.
 */
static void
close_python(int may_finalize)
{
    pthread_mutex_lock(&lifecycle_lock);
    int was = atomic_load(&python_state);
    if (was == PY_RUNNING) {
        atomic_store(&python_state, PY_CLOSING);
        closer = pthread_self();
    }
    pthread_mutex_unlock(&lifecycle_lock);
    if (was != PY_RUNNING && !pthread_equal(closer, pthread_self())) {
        /* Another thread is ending the process (two threads called exit,
           or one woke up because the other's ending killed its target):
           racing it through exit() would crash; it ends us too. */
        for (;;)
            pause();
    }
    if (was != PY_RUNNING)
        return;
    ThreadBridge *t = &here;
    if (t->parked != NULL) {
        PyEval_RestoreThread(t->parked);
        t->parked = NULL;
    } else if (!PyGILState_Check()) {
        PyGILState_Ensure();
    }
    closing = 1;
    flush_tcl_stdout();         /* what Tcl wrote comes before what they print */
    /* Python's own order: atexit handlers (other threads still run, and
       may still call Python), then the objects go, and nobody enters. */
    shutdown_step(STEP_RUN_ATEXIT);
    atomic_store(&python_state, PY_CLOSED);
    release_all_handles();
    int others = atomic_load(&entries_active) - (t->depth > 0);
    if (t->depth > 0)           /* frames below us keep __main__ and their locals */
        shutdown_step(STEP_FLUSH_FILES);
    /* A subinterpreter that another extension made and left (tohil's) makes
       Py_FinalizeEx abort the process: then Python is left as it is. */
    int subinterpreters = PyInterpreterState_Next(PyInterpreterState_Head()) != NULL;
    /* The exception kept for its Tcl error goes too, and what its frames
       hold (its errorCode value stays: Tcl may be gone). */
    Py_CLEAR(t->in_flight);
    Py_CLEAR(t->in_flight_walked);
    t->in_flight_code = NULL;
    Py_CLEAR(t->errorstack_text);
    t->errorstack_list = NULL;
    /* Only the thread Python started on finalizes it: Python 3.13 ends any
       other thread that takes the GIL while it finalizes (its own files'
       writes release the GIL), so a Tcl thread that ends the process after
       the worker that started Python has gone would vanish mid-way. */
    int starter = t->own != NULL && t->own == first_state;
    if (may_finalize && starter && others == 0 && atomic_load(&abandoned_threads) == 0
            && !subinterpreters && !shutdown_step(STEP_OTHER_THREADS)) {
        closing = 0;            /* finalizing runs no more of our steps */
        atomic_store(&python_finalized, 1);
        Py_FinalizeEx();
        return;
    }
    if (t->depth == 0)
        shutdown_step(STEP_FLUSH_FILES);
    closing = 0;
}

/* Python's end when the process ends, from whichever way it ends: Python
   code that called exit while Python closes only has what it wrote
   flushed (close_python is under way on this thread). */
static void
close_python_for_exit(int may_finalize)
{
    if (closing && pthread_equal(closer, pthread_self())) {
        if (here.parked != NULL) {
            PyEval_RestoreThread(here.parked);
            here.parked = NULL;
        }
        shutdown_step(STEP_FLUSH_FILES);
        return;
    }
    close_python(may_finalize);
}

/* libc's exit: an embedder that never ended Tcl, or a second thread that
   called exit while the first closes Python (it waits in close_python).
   Python is not finalized here: libc runs its exit handlers last
   registered first, so the C++ static destructors of libraries loaded
   after this hook was registered have already run (torch._C's method
   table among them), and finalizing walks every object, those that point
   there too. */
static void
close_python_at_process_exit(void)
{
    close_python_for_exit(0);
}

void
thread_exit_handler(ClientData unused)
{
    ThreadBridge *t = &here;
    if (!python_usable() || tcl_finalizing || !t->known)
        return;
    t->known = 0;
    if (t->depth > 0 || (t->own == NULL && !t->ending_normally)) {
        /* thread::exit while Python frames are live on this thread: its
           state must outlive it (frames, tracebacks), so it is abandoned,
           and Python's threading learns that one of its threads ended. */
        atomic_fetch_add(&abandoned_threads, 1);
        if (t->own != NULL)
            atomic_fetch_sub(&tcl_threads_in_python, 1);
        if (t->parked != NULL) {
            PyEval_RestoreThread(t->parked);
            release_in_flight(t);
            retire_thread_states();
            if (t->own == NULL)
                shutdown_step(STEP_THREAD_ENDED);
            t->parked = PyEval_SaveThread();
        } else if (t->holding) {
            retire_thread_states();     /* tohil's mode: the GIL is held */
        }
        return;
    }
    if (t->own == NULL) {       /* a Python thread's own end: the GIL is held */
        release_in_flight(t);
        return;
    }
    PyEval_RestoreThread(t->own);
    t->parked = NULL;
    release_in_flight(t);
    delete_thread_interps();
    retire_thread_states();
    if (t->own == first_state) {
        /* Python 3.11 cannot make a thread state once it has none left (it
           reuses the first one without resetting it): that one stays, and
           threading is told that its main thread ended. */
        shutdown_step(STEP_THREAD_ENDED);
        PyEval_SaveThread();
    } else {
        PyThreadState_Clear(t->own);
        PyThreadState_DeleteCurrent();
    }
    t->own = NULL;
    atomic_fetch_sub(&tcl_threads_in_python, 1);
}

/* ------------------------------------------------------------------ */
/* The exit routes                                                      */

/*
 * After Tcl's exit handlers, other Tcl threads may still be ending: the
 * Thread package's handler releases every thread pool and returns once
 * each worker has signalled, while the workers go on deleting their
 * interpreters and ending their threads.  libc's exit would then run every
 * library's destructors (torch's take a tenth of a second) beside them,
 * and that race corrupted the heap now and then (a pool whose workers
 * loaded tclamp).  So when another Tcl thread that entered Python is still
 * there, the process ends as soon as exit begins: Python is closed, Tcl
 * has flushed this thread's channels, and C's streams are flushed here.
 * (glibc's on_exit hands over the status; elsewhere exit runs as it would.)
 */
static void
end_before_destructors(int status, void *unused)
{
    fflush(NULL);
    _exit(status);
}

/* The second route of the table above: Tcl_Exit from C, `exit` in an
   interpreter without tclamp, or an embedder's Tcl_Finalize. */
static void
tcl_exit_handler(ClientData unused)
{
    close_python_for_exit(python_started_here);
    tcl_finalizing = 1;
#ifdef __GLIBC__
    if (atomic_load(&tcl_threads_in_python) > (here.own != NULL))
        on_exit(end_before_destructors, NULL);  /* registered last: runs first */
#endif
}

void
watch_tcl_exit(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    Tcl_CreateExitHandler(tcl_exit_handler, NULL);
}

/* The first route: `exit` closes Python while Tcl is whole (Python's
   atexit handlers may still call Tcl), then Tcl exits as it would.  (Tcl 9
   keeps Tcl_SetExitProc for applications, so an extension wraps exit.)
   tcl_exit_proc is Tcl's own exit command, what an interpreter fresh from
   Tcl_CreateInterp has (an application may have put a proc of its own in
   its place, which may not exit at all: that one is left alone).  Set with
   the GIL held. */
static Tcl_ObjCmdProc *tcl_exit_proc;

typedef struct {
    Tcl_CmdInfo tcl;            /* the command as Tcl made it */
} WrappedExit;

static int
exit_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    WrappedExit *w = cd;
    int status;
    /* Only an exit that will happen: Tcl reports bad arguments itself. */
    if (objc == 1 || (objc == 2 && Tcl_GetIntFromObj(NULL, objv[1], &status) == TCL_OK))
        close_python_for_exit(python_started_here);
    return w->tcl.objProc(w->tcl.objClientData, interp, objc, objv);
}

static void
exit_command_deleted(ClientData cd)
{
    WrappedExit *w = cd;
    if (w->tcl.deleteProc != NULL)
        w->tcl.deleteProc(w->tcl.deleteData);
    Tcl_Free((char *)w);
}

void
wrap_exit(Tcl_Interp *interp)
{
    Tcl_CmdInfo info;
    if (tcl_exit_proc == NULL) {
        Tcl_Interp *fresh = Tcl_CreateInterp();
        if (Tcl_GetCommandInfo(fresh, "::exit", &info))
            tcl_exit_proc = info.objProc;
        Tcl_DeleteInterp(fresh);
    }
    if (tcl_exit_proc == NULL || !Tcl_GetCommandInfo(interp, "::exit", &info)
            || info.objProc != tcl_exit_proc)
        return;
    WrappedExit *w = (WrappedExit *)Tcl_AttemptAlloc(sizeof *w);
    if (w == NULL)
        return;
    w->tcl = info;
    info.objProc = exit_command;
    info.objClientData = w;
    info.deleteProc = exit_command_deleted;
    info.deleteData = w;
    Tcl_SetCommandInfo(interp, "::exit", &info);
}

/* A Python host's Python, once it finalizes, ends any other thread that
   takes the GIL: before 3.14 with pthread_exit, whose thread-local
   destructors (torch's, Tcl's) then race libc's exit handlers on the
   finalizing thread; in a daemon thread's loop of torch:: commands that
   corrupted the heap now and then.  Such a thread waits here for the
   process's end instead, as Python 3.14 makes it wait. */
static pthread_t python_host_finalizer;     /* runs Python's atexit, then finalizes */
static atomic_int python_host_ending;

void
wait_if_python_finalizing(void)
{
    if (atomic_load(&python_host_ending) && !pthread_equal(pthread_self(), python_host_finalizer)
            && !Py_IsInitialized())
        for (;;)
            pause();
}

/* Python's own end (atexit): the interpreters Python made on this thread
   go, and every handle's object, while Python can still run their __del__;
   Tcl's buffered output is written out. */
PyObject *
bridge_at_python_exit(PyObject *module, PyObject *unused)
{
    if (!tcl_ready || python_started_here)
        Py_RETURN_NONE;         /* Tcl never ran here, or Tcl hosts: its exit does this */
    python_host_finalizer = pthread_self();
    atomic_store(&python_host_ending, 1);
    delete_thread_interps();
    release_all_handles();          /* also of interpreters Tcl made (tkinter) */
    if (atomic_load(&abandoned_threads) > 0)
        shutdown_step(STEP_FLUSH_FILES);    /* finalizing may not get that far */
    Tcl_Channel out = Tcl_GetStdChannel(TCL_STDOUT), err = Tcl_GetStdChannel(TCL_STDERR);
    if (out) Tcl_Flush(out);
    if (err) Tcl_Flush(err);
    Py_RETURN_NONE;
}
