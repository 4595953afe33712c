/*
 * bridge.h -- what the bridge's C files share (private: not installed).
 *
 *   _bridge.c        the core: values both ways, errors, handles, commands,
 *                    py call/eval/exec/scope.  Read it front to back.
 *   interp.c         on the core: the Interp type, the Python host, the
 *                    module and Tclamp_Init, the two ways in.
 *   text_fast.c      speed only: long text copied in blocks, a str's UTF-8
 *                    written for Tcl, a list's text written from its ints.
 *                    TCLAMP_NO_ACCELERATORS leaves each to the general way.
 *   aten_programs.c  speed only: remembered autocast plans run as calls of
 *                    ATen's own functions, with no Python (aten_ops.h lists
 *                    them).  TCLAMP_NO_ATEN leaves every plan to its steps.
 *   lifecycle.c      the process's state (thread bridges, interpreters,
 *                    shutdown steps); starting Python for a Tcl host, and
 *                    ending: the exit routes, closing Python, a thread's end.
 * docs/design.md shows the flows through them.  Everything that is policy
 * (argument parsing, the torch:: commands, error texts) is Python's.
 *
 * Lifetimes, the rules every file keeps:
 *   - One Python per process, started by exactly one thread (lifecycle_lock).
 *   - A thread enters Python with the thread state it parked on the way out
 *     (the fast path), or else through PyGILState, which also serves threads
 *     that Python itself made.  A Tcl thread new to Python gets a state of its
 *     own, deleted when the thread ends, unless Python frames are still live
 *     on it (thread::exit under Python): then it is abandoned, never freed.
 *   - Exit, from any thread: handles are released, then Python is finalized
 *     if no other thread is inside it; otherwise atexit runs and every open
 *     file is flushed, and the exiting thread keeps the GIL so that no Python
 *     code runs again.  Exit never waits for another thread.  Once a
 *     Python host's Python finalizes, another thread that would take the
 *     GIL waits for the process's end instead (as Python 3.14 makes it).
 *   - An interpreter's bridge state (InterpState) lives until both Tcl has
 *     deleted the interpreter and no Python object refers to it; commands
 *     and handles only borrow it.  A Python-made interpreter is deleted on
 *     its own thread when its last Python reference goes, once it is idle,
 *     or when Python's cycle collector, run there while it and every
 *     child of it that the bridge knows are idle, finds its object in a
 *     cycle (Interp_traverse shows the collector what it and those children
 *     hold only then).  What a thread's end leaves (thread::exit) is no
 *     thread's: `thread` NULL.
 *
 * Every way in, and how it holds the GIL:
 *
 *   entry point                          thread            GIL
 *   Tcl command (python_command, py *,   the interp's      enter()/leave(); ATen
 *     handle_command, scope_command)                       programs run without;
 *                                                          py scope enters after
 *                                                          its body
 *   Tcl callbacks (command deleted,      the interp's      enter()/leave(), or
 *     interp deleted, timers, stdout)                      already held (Python
 *                                                          called Tcl)
 *   Interp methods, module functions     any Python one    held; run_without_gil
 *                                                          around Tcl's work
 *   cycle collector (Interp_traverse,    any Python one    held; it sees and
 *     Interp_clear)                                        clears an interp
 *                                                          only on its thread
 *   Tclamp_Init (package require)        any Tcl thread    lifecycle_lock, then
 *                                                          enter()/leave()
 *   exit hooks (exit_command, Tcl's      the exiting one   close_python takes it
 *     exit handler, libc's atexit)                         and may keep it
 *   Tcl thread exit handler              the ending one    takes its own state
 *   ThreadGuard (a Python thread ends)   that thread       held by Python
 *
 *   tohil's mode (here.holding, set by keep_gil): the thread keeps the GIL
 *   while it runs Tcl, as tohil does; enter() swaps to the thread's own
 *   state in the main interpreter and leave() swaps back.
 *
 * Threading notes: what the files leave to the GIL.  A free-threaded
 * Python (3.13t, 3.14t) must run with its GIL on: tclamp/__init__.py and
 * load.tcl refuse one whose GIL is off, and a free-threaded build of this
 * module declares that it needs the GIL (BRIDGE_INIT).  A port to a GIL-less
 * Python replaces each of these with locks or atomics of its own:
 *   - all_states (the list of InterpStates) and each state's refs, busy,
 *     delete_requested, cancel_sent, evaluations and interrupted: plain
 *     fields, read and written with the GIL held;
 *   - Interp_cancel and Interp_interrupt against deletion: the GIL held
 *     throughout keeps the interpreter alive, since interp_deleted needs
 *     it to clear s->interp; and Interp_interrupt against the end of the
 *     evaluation it stops, which takes back (with the GIL) what it sent;
 *   - handles_made (handle names) and handles_released (the process's
 *     end): plain counters and flags;
 *   - a state's handles, by_object, scripts and code caches, and every
 *     command's remembered plans (MEMO_SLOTS): dicts and slots read and
 *     refilled with nothing else running Python; borrowed references
 *     (a handle's object, PyDict_GetItem results, a list's items from
 *     PySequence_Fast_GET_ITEM) stay valid only for that reason, and so
 *     do the reference counts of objects that threads share;
 *   - the exit path (close_python): when another thread is inside Python,
 *     the exiting thread keeps the GIL so that no Python code runs again;
 *     without a GIL nothing stops the others;
 *   - keep_gil (tohil's mode) keeps the GIL while Tcl runs, and the
 *     per-thread state that entering parks and takes back (ThreadBridge)
 *     assumes that holding a thread state means holding the GIL;
 *   - tcl_exit_proc, and the ThreadGuard's clean-up, run with the GIL
 *     held on the thread that set them.
 * What does not rest on the GIL: python_state and the entry counters
 * (atomics), lifecycle_lock (start and close), the unused-object queue
 * (unused_lock), and the ATen programs, which run without the GIL.
 */
#ifndef TCLAMP_BRIDGE_H
#define TCLAMP_BRIDGE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <tcl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "compat.h"

/* Nothing here is seen outside the shared object, and calls between its
   files go straight to their target. */
#pragma GCC visibility push(hidden)

#define HANDLE_NAMESPACE "::py"
#define HANDLE_PREFIX HANDLE_NAMESPACE "::obj"
#define MEMO_SLOTS 8            /* remembered argument lists per command */
#define CALL_STACK_ARGS 8       /* arguments converted without an allocation */
#define PROGRAM_MAX 18          /* bytes of a remembered ATen program: six calls */
/* Text shorter than this goes the general way; longer text may be copied
   in blocks (text_fast.c). */
#define BLOCK_COPY_MIN 256

/* One build per Tcl major version, each its own module: tclamp._bridge8,
   tclamp._bridge9.  tclamp/__init__.py makes the one in use tclamp._bridge. */
#define MODULE_INIT_(major) PyInit__bridge##major
#define MODULE_INIT(major) MODULE_INIT_(major)
#define BRIDGE_INIT MODULE_INIT(TCL_MAJOR_VERSION)
#define MODULE_NAME_(major) "tclamp._bridge" #major
#define MODULE_NAME(major) MODULE_NAME_(major)

/* ---- Python's lifetime in this process (lifecycle.c) ---- */

/* PY_CLOSING: atexit handlers run, and every thread may still enter. */
enum { PY_NOT_STARTED, PY_RUNNING, PY_CLOSING, PY_CLOSED };
extern atomic_int python_state;         /* PY_CLOSED: nobody enters again */
extern atomic_int python_finalized;     /* Py_FinalizeEx has begun */
extern atomic_int entries_active;       /* threads inside a Tcl->Python call */
extern atomic_int abandoned_threads;    /* states left with live frames */
extern atomic_int deletions_pending;    /* interpreters waiting to be deleted */
extern atomic_int tcl_threads_in_python;/* Tcl threads with a state of ours, not ended */
extern int python_started_here;         /* Tcl host: we initialized Python */
extern int tcl_finalizing;              /* Tcl's exit handlers are running */
extern int tcl_ready;                   /* this copy's Tcl stubs are initialized */
extern int handles_released;            /* their objects went at the end (GIL) */

/* shutdown.SHUTDOWN_STEPS (set through configure), in this order: */
enum { STEP_RUN_ATEXIT, STEP_OTHER_THREADS, STEP_THREAD_ENDED, STEP_FLUSH_FILES, STEP_COUNT };
extern PyObject *shutdown_steps;

static inline int
python_usable(void)
{
    int state = atomic_load_explicit(&python_state, memory_order_seq_cst);
    return state == PY_RUNNING || state == PY_CLOSING;
}

typedef struct InterpState InterpState;
typedef struct InterpObject InterpObject;

/*
 * Each thread's place in the bridge.  `parked` is the Python thread state
 * the thread set aside (releasing the GIL) when it went from Python into
 * Tcl; NULL while it runs Python or holds no state of ours.  `own` is the
 * state tclamp made for a Tcl thread (NULL for Python's own threads).
 */
typedef struct {
    PyThreadState *parked;
    PyThreadState *own;
    InterpState *current;       /* innermost interpreter calling Python */
    int depth;                  /* Tcl->Python entries in progress */
    int bodies_running;         /* nested bodies that C commands run (run_body) */
    int known;                  /* thread exit handler registered */
    int ending_normally;        /* the thread's own end, not thread::exit */
    int holding;                /* keeps the GIL while in Tcl: tohil is here */
    PyObject *tkinter_call;     /* how Python enters Tcl where tkinter runs
                                   (tkinter_entry.py): None, directly */
    uint64_t ended;             /* id of the thread state whose end retired its
                                   interpreters: that state makes no new one */
    uint64_t guarded;           /* id of the thread state whose dict holds our guard, */
    const void *guarded_dict;   /* and that dict and its locals' key, as they were */
    const void *guarded_key;    /* then: the state's clearing drops both */
    PyObject *in_flight;        /* the exception the last Python error came from, */
    Tcl_Obj *in_flight_code;    /* and its errorCode: see keep_in_flight */
    PyObject *in_flight_walked; /* what errors.release_frames did to it, or NULL */
    PyObject *errorstack_text;  /* the last -errorstack given to Python as text, */
    Tcl_Obj *errorstack_list;   /* and the list it was: see errorstack_text */
} ThreadBridge;
extern _Thread_local ThreadBridge here;

/* A Tcl->Python entry in progress (enter, leave). */
typedef struct {
    PyThreadState *restored;    /* parked state we took back, if any */
    int ensured;                /* took the GIL through PyGILState */
    PyGILState_STATE gil;
    InterpState *saved;
    PyThreadState *swapped;     /* tohil's, while we run (see keep_gil) */
} Entry;

/* A record that outlives a deletion that happens while it runs (a method
   that releases its own handle): `busy` counts running calls, and the last
   one out frees what `deleted` marked. */
typedef struct Lifetime {
    int busy, deleted;
    void (*free)(struct Lifetime *);
} Lifetime;

struct InterpState {
    Tcl_Interp *interp;         /* NULL once Tcl deleted it */
    Tcl_ThreadId thread;        /* Tcl interpreters are bound to one thread; NULL
                                   once it ended and left this one (thread::exit) */
    int python_owned;           /* made by Interp(): deleted with its object */
    int refs;                   /* the interpreter, its commands and handles, the object */
    int busy;                   /* Tcl<->Python calls in progress */
    int delete_requested;       /* the Python object went; delete when idle */
    int cancel_sent;            /* Interp.cancel stopped an evaluation (GIL) */
    int evaluations;            /* Python's eval, call, eval_file running here (GIL) */
    int interrupted;            /* the one of them Interp.interrupt stopped, by
                                   its depth (1: outermost); 0: none (GIL) */
    int errorstack_given;       /* report_python_error made Tcl's error here:
                                   the next evaluation from Python starts with
                                   an empty -errorstack (run_global) */
    PyObject *handles;          /* "::py::objN", the name a handle was made
                                   with -> its object (the one reference) */
    PyObject *by_object;        /* id(object) -> its Handle's address: one
                                   handle per object */
    PyObject *scripts;          /* Interp.eval: script str -> its Tcl value (capsule),
                                   whose bytecode Tcl keeps; NULL until used */
    PyObject *command_names;    /* Interp.call: name str -> its Tcl value, which
                                   keeps the command Tcl found */
    PyObject *codes[2];         /* py eval, py exec: source str -> code object */
    struct Handle *newest;      /* live handles, newest made first (->older): py scope's */
    unsigned long top_number;   /* the highest number of a handle it listed: a scope's mark */
    struct ScopeFrame *scopes;  /* running py scopes, innermost first (->outer) */
    struct Command *commands;   /* records of its Python-made commands (->next) */
    InterpObject *object;       /* owned if Tcl made the interpreter, else borrowed */
    InterpState *prev, *next;   /* every state, for exit and cross-thread work */
    InterpState *prev_inner, *next_inner;   /* in _bridge.c's inner_states, if
                                               the interpreter has a parent */
};

struct InterpObject {
    PyObject_HEAD
    InterpState *state;
};

extern InterpState *all_states;         /* guarded by the GIL */

/* A Python object's Tcl command, ::py::objN (see make_handle). */
typedef struct Handle {
    Lifetime life;
    InterpState *owner;         /* counted in owner->refs */
    PyObject *object;           /* owned, as owner->handles holds it too (NULL once gone) */
    PyObject *name;             /* the name it was made with, its key in
                                   owner->handles (handle_name_now: its name) */
    PyObject *id;               /* id(object), its key in owner->by_object */
    Tcl_Command token;          /* its command, */
    int gone;                   /* until this is set */
    unsigned long number;       /* N of the name it was made with, ::py::objN */
    struct Handle *older, *newer;   /* in owner's list while its command lives */
} Handle;

/* A command's words as the arguments of a vectorcall, on the C stack when
   there are few: no tuple to make and unpack.  slot[2 ..] holds them;
   slot[0] and slot[1] are free for the call (PY_VECTORCALL_ARGUMENTS_OFFSET,
   or a method's object). */
typedef struct {
    PyObject *stack[CALL_STACK_ARGS + 2];
    PyObject **slot;
    Py_ssize_t n;               /* converted so far */
} CallArgs;

/* A remembered plan (see python_command in _bridge.c). */
typedef struct {
    int objc;                   /* 0: empty slot */
    char *key;                  /* the arguments, each as <length><bytes> */
    size_t keylen;
    PyObject *steps;
    PyObject *result;           /* None or dict; NULL when constant */
    Tcl_Obj *constant;
    int program_len;            /* 0: none */
    unsigned char program[PROGRAM_MAX];
} Memo;

/* A command implemented in Python (see python_command). */
typedef struct Command {
    Lifetime life;
    InterpState *owner;         /* counted in owner->refs */
    struct Command *prev, *next;    /* in owner->commands until the record is freed */
    PyObject *callable;
    int planned;
    int script;                 /* the last word is a script (see python_command) */
    int memo_next;
    Memo memo[MEMO_SLOTS];
    /* The handle form (arguments.Command.handle_form): words that are just
       objects of these types mean the first's method, given the others and
       the defaults, answering handle_result (NULL: the method's value). */
    PyObject *handle_types, *handle_method, *handle_defaults;
    Tcl_Obj *handle_result;
} Command;

/*
 * The files call each other one way only: interp.c calls the core, which
 * calls nothing of it, and both call the three leaves, which call nothing
 * of either.  What they share below the core is here, as inline functions,
 * or in lifecycle.c, which owns the process's state.
 */

/* Frees a Tcl value nobody holds yet (refcount 0); NULL is fine. */
static inline void
discard(Tcl_Obj *obj)
{
    if (obj != NULL) {
        Tcl_IncrRefCount(obj);
        Tcl_DecrRefCount(obj);
    }
}

/* Two digits at a time, for handle names and list texts. */
static const char two_digits[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static inline int
digits_of(unsigned long long u)
{
    static const unsigned long long powers[20] = {
        1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
        100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
        10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
        100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL};
    /* u | 1 has u's digits (a power of ten is even, or 1); t, from its
       bit length, is its number of digits or one less */
    unsigned long long v = u | 1;
    int t = (64 - __builtin_clzll(v)) * 1233 >> 12;
    return t + (v >= powers[t]);
}

/* Writes u's digits ending at `end`, two at a time (in 32 bits when it
   fits, which is quicker). */
static inline void
write_digits(unsigned long long u, char *end)
{
    while (u > 0xFFFFFFFFu) {
        end -= 2;
        memcpy(end, two_digits + 2 * (u % 100), 2);
        u /= 100;
    }
    uint32_t v = (uint32_t)u;
    while (v >= 100) {
        end -= 2;
        memcpy(end, two_digits + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10)
        memcpy(end - 2, two_digits + 2 * v, 2);
    else
        end[-1] = (char)('0' + v);
}

/* ---- _bridge.c: the core, as interp.c uses it ---- */

#define CACHE_MAX_CHARS 16384   /* longer scripts and sources are not kept in dicts */

extern PyObject *TclErrorType;  /* tclamp.TclError(result, errorcode, errorinfo, code) */
extern PyObject *describe_error;/* exc -> (message, errorcode, errorInfo tail|None) */
extern atomic_int memo_on;      /* commands remember their plans (bridge_memo) */
extern unsigned long handles_made;  /* the newest handle's number (GIL) */
extern InterpState *inner_states;   /* states of interpreters with a parent (GIL) */
/* Tcl's value types, learnt once (find_tcl_types): Tcls name them apart. */
extern const Tcl_ObjType *string_type, *int_type, *wide_type, *bignum_type,
    *double_type, *list_type, *dict_type, *bytearray_type;
void find_tcl_types(void);
int core_add_to_module(PyObject *m);

/* Entering Python from Tcl. */
int enter(Entry *e, InterpState *owner, Tcl_Interp *interp);
void leave(Entry *e);
void flush_tcl_stdout(void);

/* Interpreters' states. */
InterpState *state_new(Tcl_Interp *interp, int python_owned);
void state_decref(InterpState *s);
void state_hold(InterpState *s);
void state_unhold(InterpState *s);
int runs_script(const InterpState *s);
int check_usable(InterpState *s);
void request_delete(InterpState *s);
void unmark_for_deletion(InterpState *s);
void run_pending_deletions(void);

/* Values both ways, and errors. */
int check_tcl_size(Py_ssize_t n, Py_ssize_t most, const char *what, const char *unit);
PyObject *str_from_tcl(Tcl_Obj *obj);
Tcl_Obj *tcl_from_str(PyObject *s);
Tcl_Obj *to_tcl(InterpState *owner, PyObject *v);
PyObject *arg_to_python(InterpState *owner, Tcl_Obj *obj, int *is_handle);
void release_unused_objects(void);
void cache_put(PyObject *cache, PyObject *key, PyObject *value, Py_ssize_t size);
int report_python_error(InterpState *owner, Tcl_Interp *interp);
void set_errorstack(Tcl_Interp *interp, Tcl_Obj *frames, int level);
PyObject *raise_tcl_error(Tcl_Interp *interp, int code, int returned);
Tcl_Obj *option_value(Tcl_Obj *options, const char *key);

/* Handles, Outcome and Script. */
void delete_handles_since(InterpState *owner, unsigned long mark);
Handle *handle_of(InterpState *s, PyObject *obj);
Tcl_Obj *handle_name_now(const Handle *h);
PyObject *handle_name_str(const Handle *h);
PyObject *handle_names(InterpState *s);
PyObject *outcome_new(void);
void outcome_fill(PyObject *outcome, Tcl_Interp *interp, int code);
int body_may_nest(Tcl_Interp *interp);
int run_body(Tcl_Interp *interp, Tcl_Obj *body, const char *command);
Tcl_Obj *script_to_tcl(PyObject *script);
void keep_in_scope(InterpState *s, PyObject *name);
PyObject *look_up_first(PyObject *first);

/* The commands attach() and Interp's create_* register. */
PyObject *add_command(InterpState *s, const char *name, Tcl_ObjCmdProc *proc,
                      PyObject *callable, int planned, int script, PyObject *handle_form);
Tcl_ObjCmdProc python_command, py_call_command, py_eval_command, py_exec_command,
    scope_command, release_command;

/* ---- text_fast.c: each returns "not done" when built without it ---- */

void text_fast_init(void);
/* Long UTF-8 that is all ASCII as a str; NULL, with no error, otherwise. */
PyObject *ascii_str(const char *s, Py_ssize_t len);
/* A long ASCII str's bytes as a new Tcl value; NULL when they hold NUL. */
Tcl_Obj *ascii_tcl(const char *data, Py_ssize_t len);
/* Gives a list that has no text yet the text Tcl would write, if cheaply
   (its items of Tcl's integer types, given, are written from their values). */
void write_list_text(Tcl_Obj *list, const Tcl_ObjType *tcl_int, const Tcl_ObjType *tcl_wide);
/* Gives a value made from a str's code units that str's UTF-8 too. */
void add_utf8(Tcl_Obj *obj, PyObject *s);
/* Whether a value held only as code units may name a handle (1 when
   unsure: the caller then reads its text). */
int units_may_name_handle(Tcl_Obj *obj);

/* ---- aten_programs.c ---- */

extern atomic_int aten_on;              /* programs run (never, built without) */
/* Whether a plan's program stands for its steps and gives its result. */
int aten_program_fits(PyObject *program, PyObject *result);
/* Runs a remembered plan's program, with the command's body (or NULL) and
   name: the command's Tcl code, or -1 when its steps must run instead. */
int aten_run_program(Tcl_Interp *interp, const Memo *m, Tcl_Obj *body, Tcl_Obj *name);
PyObject *bridge_use_aten(PyObject *module, PyObject *args);
PyObject *aten_op_table(void);

/* ---- lifecycle.c ---- */

typedef PyObject *(*ModuleInit)(void);
/* Tclamp_Init's first part: Python started (or found) in this process,
   and this copy of the bridge the one it uses. */
int lifecycle_start(Tcl_Interp *interp, ModuleInit module_init);
/* Whether the process's Python uses this copy of the bridge (GIL held). */
int check_same_bridge(Tcl_Interp *interp, ModuleInit module_init);
/* Tclamp_Init's last part, once the interpreter is attached: the hooks
   that close Python at exit. */
void lifecycle_loaded(void);
void thread_exit_handler(ClientData unused);
int guard_python_thread(void);
/* Whether this thread is ending, so that it may make no interpreter (GIL held). */
int thread_is_ending(void);
void watch_tcl_exit(void);
void wrap_exit(Tcl_Interp *interp);
void delete_thread_interps(void);
int shutdown_step(int i);
PyObject *bridge_at_python_exit(PyObject *module, PyObject *unused);
PyObject *bridge_after_fork_in_child(PyObject *module, PyObject *unused);
void wait_if_python_finalizing(void);
int ThreadGuard_ready(void);
void release_in_flight(ThreadBridge *t);
void release_all_handles(void);
/* The first idle interpreter of this thread that `wanted` picks, or NULL. */
InterpState *idle_here(int (*wanted)(const InterpState *s));

#pragma GCC visibility pop

PyMODINIT_FUNC BRIDGE_INIT(void);
int Tclamp_Init(Tcl_Interp *interp);

#endif
