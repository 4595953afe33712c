/*
 * loader.c -- what a Tcl host loads before the bridge.
 *
 * The bridge is a Python extension module, and like every one in a wheel
 * it links no libpython: it uses the symbols of the Python that loads it,
 * so one build serves every build of that Python version.  A tclsh has no
 * Python, and Tcl's `load` keeps a library's symbols to itself, so
 * load.tcl first loads this file (built for each Tcl, no Python in it)
 * and asks it to open the chosen libpython with its symbols global: then
 * the bridge, and torch's own extension modules, find them.
 */
#include <tcl.h>
#include <dlfcn.h>
#include <string.h>
#include "compat.h"

/* ::tclamp::python_loaded: the version (3.11) of the Python whose symbols
   the process has in its global view already (Python hosts Tcl, or an
   earlier load_python), or an empty string. */
static int
python_loaded_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    if (objc != 1) {
        Tcl_WrongNumArgs(interp, 1, objv, NULL);
        return TCL_ERROR;
    }
    /* A static string, safe to read without Python's lock. */
    const char *(*version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "Py_GetVersion");
    const char *text = version ? version() : "";
    const char *dot = strchr(text, '.');
    Tcl_Size length = dot ? (Tcl_Size)(dot + 1 + strspn(dot + 1, "0123456789") - text) : 0;
    Tcl_SetObjResult(interp, Tcl_NewStringObj(text, length));
    return TCL_OK;
}

/* ::tclamp::load_python path: opens that libpython for good, its symbols
   global.  One loaded already under the same name (privately, by another
   extension such as tohil) is made global instead of loaded twice.  The
   OS gets the path's bytes in the system encoding, as Tcl read them (in a
   C locale Tcl 8.6 reads ISO 8859-1, and its own text is UTF-8). */
static int
load_python_command(ClientData cd, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[])
{
    if (objc != 2) {
        Tcl_WrongNumArgs(interp, 1, objv, "libpython");
        return TCL_ERROR;
    }
    Tcl_DString native;
    const char *path = Tcl_UtfToExternalDString(NULL, Tcl_GetString(objv[1]), -1, &native);
    const char *name = strrchr(path, '/');
    void *lib = dlopen(name ? name + 1 : path, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    if (lib == NULL)
        lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    Tcl_DStringFree(&native);
    if (lib == NULL) {
        Tcl_DString said;   /* dlerror names the path in the system encoding */
        Tcl_SetObjResult(interp, Tcl_ObjPrintf("tclamp: cannot start Python: %s",
                                               Tcl_ExternalToUtfDString(NULL, dlerror(), -1, &said)));
        Tcl_DStringFree(&said);
        Tcl_SetErrorCode(interp, "TCLAMP", "PYTHON_START", NULL);
        return TCL_ERROR;
    }
    return TCL_OK;
}

int
Tclampload_Init(Tcl_Interp *interp)
{
    if (Tcl_InitStubs(interp, TCLAMP_TCL_VERSIONS, 0) == NULL)
        return TCL_ERROR;
    Tcl_CreateObjCommand(interp, "::tclamp::python_loaded", python_loaded_command, NULL, NULL);
    Tcl_CreateObjCommand(interp, "::tclamp::load_python", load_python_command, NULL, NULL);
    /* The version this build is: load.tcl checks the package index's. */
    return Tcl_SetVar2Ex(interp, "::tclamp::version", NULL, Tcl_NewStringObj(TCLAMP_VERSION, -1),
                         TCL_GLOBAL_ONLY | TCL_LEAVE_ERR_MSG) ? TCL_OK : TCL_ERROR;
}
