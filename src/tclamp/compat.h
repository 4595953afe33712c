/*
 * compat.h -- what differs between the Tcls (8.6, 9.0) and the Pythons
 * (3.10 to 3.15) that the bridge is built for, in one place.  bridge.h (so
 * every bridge file) and loader.c include it; nothing else in them asks
 * for a version.
 */
#ifndef TCLAMP_COMPAT_H
#define TCLAMP_COMPAT_H

#include <limits.h>

/* Tcl 8.6 counts in int; Tcl 9 in Tcl_Size (ptrdiff_t), past 2 GiB. */
#if TCL_MAJOR_VERSION < 9
typedef int Tcl_Size;
#  define TCL_SIZE_MAX INT_MAX
#endif

/* The most items a Tcl list holds (Tcl panics past it): its store, a
   header of under 64 bytes and the items' pointers, is counted in an
   unsigned int in Tcl 8.6 (about 537 million items) and in Tcl_Size in 9. */
#if TCL_MAJOR_VERSION < 9
#  define TCL_LIST_MAX ((Tcl_Size)(((size_t)UINT_MAX - 64) / sizeof(void *)))
#else
#  define TCL_LIST_MAX ((Tcl_Size)(((size_t)TCL_SIZE_MAX - 64) / sizeof(void *)))
#endif

/* Tcl's code units (Tcl_UniChar): UTF-16 in Tcl 8.6, where a character
   past U+FFFF is two surrogates; UTF-32 in Tcl 9. */
#define UNITS_ARE_UTF16 (TCL_UTF_MAX <= 3)

/* What Tcl_InitStubs is asked for: either Tcl, from the one source (the
   headers decide which stubs mechanism the binary speaks). */
#define TCLAMP_TCL_VERSIONS "8.6-10"

/* The file name of libtcl, for a Python host that loads it: the Tcl the
   headers describe. */
#if defined(__APPLE__)
#  define TCLAMP_LIBTCL_NAME "libtcl" TCL_VERSION ".dylib"
#else
#  define TCLAMP_LIBTCL_NAME "libtcl" TCL_VERSION ".so"
#endif

/* glibc 2.34 moved dlopen (dlsym, dlclose...) and pthread_once into libc
   under new versions; asking for the versions every glibc has keeps the
   wheel manylinux_2_28 (and older) when it is built on a newer glibc. */
#if defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
#  if defined(__x86_64__)
#    define TCLAMP_OLD_GLIBC "GLIBC_2.2.5"
#  else
#    define TCLAMP_OLD_GLIBC "GLIBC_2.17"
#  endif
__asm__(".symver dlopen,dlopen@" TCLAMP_OLD_GLIBC);
__asm__(".symver dlsym,dlsym@" TCLAMP_OLD_GLIBC);
__asm__(".symver dladdr,dladdr@" TCLAMP_OLD_GLIBC);
__asm__(".symver dlerror,dlerror@" TCLAMP_OLD_GLIBC);
__asm__(".symver dlclose,dlclose@" TCLAMP_OLD_GLIBC);
__asm__(".symver pthread_once,pthread_once@" TCLAMP_OLD_GLIBC);
#endif

/* The thread state this thread runs now, or NULL (never a fatal error):
   public from Python 3.13, named with an underscore before. */
#if defined(PY_VERSION_HEX) && PY_VERSION_HEX < 0x030D0000
#  define PyThreadState_GetUnchecked _PyThreadState_UncheckedGet
#endif

/* Python's end has begun (after its atexit handlers): public from 3.13. */
#if defined(PY_VERSION_HEX) && PY_VERSION_HEX < 0x030D0000
#  define Py_IsFinalizing _Py_IsFinalizing
#endif

/* The key that a thread's threading.local data is found by: from Python
   3.13 a thread state's own, made on the thread's first read of a local
   and dropped as the state is cleared, before its dict (3.12 keeps that
   data in the dict). */
#if defined(PY_VERSION_HEX) && PY_VERSION_HEX >= 0x030D0000
#  define LOCALS_HAVE_A_KEY 1
#  define LOCALS_KEY(state) ((state)->threading_local_key)
#else
#  define LOCALS_HAVE_A_KEY 0
#  define LOCALS_KEY(state) ((PyObject *)NULL)
#endif

/* A Tcl integer of a C one.  Tcl 8.6 makes a wide one through
   Tcl_SetWideIntObj; where a long has 64 bits it makes the same value
   as a long directly. */
static inline Tcl_Obj *
new_int_obj(long long x)
{
#if TCL_MAJOR_VERSION < 9 && LONG_MAX == LLONG_MAX
    return Tcl_NewLongObj((long)x);
#else
    return Tcl_NewWideIntObj((Tcl_WideInt)x);
#endif
}

/* The value of a Tcl integer that fits in 64 bits (TCL_ERROR for any
   other value).  Tcl 8.6 reads a wide one through its reader of a long:
   where a long has 64 bits, that is the one to call. */
static inline int
int_obj_value(Tcl_Obj *obj, long long *x)
{
#if TCL_MAJOR_VERSION < 9 && LONG_MAX == LLONG_MAX
    long value;
    int code = Tcl_GetLongFromObj(NULL, obj, &value);
#else
    Tcl_WideInt value;
    int code = Tcl_GetWideIntFromObj(NULL, obj, &value);
#endif
    *x = (long long)value;
    return code;
}

/* Sets a value's internal representation to two pointers of `type`, after
   freeing the one it had.  Tcl 9 does this itself (Tcl_StoreInternalRep);
   Tcl 8.6 documents the fields an object type sets (Tcl_ObjType(3)). */
static inline void
store_two_ptr_rep(Tcl_Obj *obj, const Tcl_ObjType *type, void *ptr1, void *ptr2)
{
#if TCL_MAJOR_VERSION >= 9
    Tcl_ObjInternalRep rep;
    rep.twoPtrValue.ptr1 = ptr1;
    rep.twoPtrValue.ptr2 = ptr2;
    Tcl_StoreInternalRep(obj, type, &rep);
#else
    if (obj->typePtr != NULL && obj->typePtr->freeIntRepProc != NULL)
        obj->typePtr->freeIntRepProc(obj);
    obj->typePtr = type;
    obj->internalRep.twoPtrValue.ptr1 = ptr1;
    obj->internalRep.twoPtrValue.ptr2 = ptr2;
#endif
}

/* Room for up to `room` bytes of text in a value that has none yet (its
   internal representation stays); NULL when memory is short.  text_done
   then cuts the text to the `length` bytes written.  Tcl 9 has this as
   Tcl_InitStringRep; in Tcl 8.6 it is the `bytes`/`length` protocol that
   Tcl_Obj(3) documents for an object type's string procedure. */
static inline char *
text_room(Tcl_Obj *obj, size_t room)
{
#if TCL_MAJOR_VERSION >= 9
    return Tcl_InitStringRep(obj, NULL, (Tcl_Size)room);
#else
    char *bytes = Tcl_AttemptAlloc((unsigned)room + 1);
    if (bytes != NULL) {
        bytes[0] = '\0';
        obj->bytes = bytes;
        obj->length = 0;
    }
    return bytes;
#endif
}

static inline void
text_done(Tcl_Obj *obj, Tcl_Size length)
{
#if TCL_MAJOR_VERSION >= 9
    Tcl_InitStringRep(obj, NULL, length);
#else
    obj->bytes = Tcl_Realloc(obj->bytes, (unsigned)length + 1);
    obj->bytes[length] = '\0';
    obj->length = length;
#endif
}

#endif
