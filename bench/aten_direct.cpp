// The floor for the torch:: autocast commands: Tcl commands written in C++
// that call ATen's autocast setters directly, with no Python in between.
// bench/run.py builds it (bench/build/) against the torch that Python
// imports and links that torch's libtorch_cpu.so and libc10.so, so the
// process holds one copy of ATen and these commands and tclamp's change the
// same thread-local state.  In tclsh, after `package require tclamp`:
//     load bench/build/aten_direct.so Atendirect
//
//     aten::set_dtype dtype ?device?      aten::set_dtype -dtype D ?-device D?
//     aten::enable ?device? ?dtype?       aten::enable ?-device D? ?-dtype D?
//     aten::disable ?device?              aten::is_enabled ?device?
//     aten::get_dtype ?device?            (and -device D, -device_type D)
//     aten::nothing ?device?              (reads its words, calls nothing: 0)
//
// Each does the steps the torch:: command's plan does (set_dtype: set the
// dtype, then clear the autocast cache; enable with a dtype: the same, then
// enable) and returns the same result.  Words are read with plain string
// compares; a C++ exception becomes a Tcl error.
//
// The ATen functions are called as the bridge's ATen programs call them:
// by the C++ names and C types of the bridge's one table (aten_ops.h),
// bound here with asm labels, so this file restates no signature.
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <cstring>
#include <exception>
#include <tcl.h>

#include "../src/tclamp/aten_ops.h"

#define ATEN_DECLARE(code, field, binding, symbol, result, params, result_code, arg_codes) \
    extern "C" result aten_##field params __asm__(symbol);
ATEN_OP_TABLE(ATEN_DECLARE)
#undef ATEN_DECLARE

namespace {

signed char code_of(at::DeviceType device) { return static_cast<signed char>(device); }
signed char code_of(at::ScalarType dtype) { return static_cast<signed char>(dtype); }

enum Result { DTYPE_SET, ENABLED, DISABLED, FALSE_, TRUE_, FLOAT16, BFLOAT16, FLOAT32, NRESULTS };
const char *const TEXTS[NRESULTS] = {"autocast dtype set", "autocast enabled", "autocast disabled",
                                     "0", "1", "float16", "bfloat16", "float32"};

// The result strings, made once per interpreter and shared by every call.
struct Results {
    Tcl_Obj *obj[NRESULTS];
};

// What the words of a call say; a word that is absent keeps its default.
struct Words {
    at::DeviceType device = at::kCUDA;
    bool has_dtype = false;
    at::ScalarType dtype = at::kHalf;
};

bool device_of(const char *word, Words &words) {
    if (std::strcmp(word, "cpu") == 0) words.device = at::kCPU;
    else if (std::strcmp(word, "cuda") == 0) words.device = at::kCUDA;
    else return false;
    return true;
}

bool dtype_of(const char *word, Words &words) {
    if (std::strcmp(word, "float16") == 0) words.dtype = at::kHalf;
    else if (std::strcmp(word, "bfloat16") == 0) words.dtype = at::kBFloat16;
    else if (std::strcmp(word, "float32") == 0) words.dtype = at::kFloat;
    else return false;
    words.has_dtype = true;
    return true;
}

// Reads objv[1..] as positional words (in the order `order` gives: 'd' a
// device, 't' a dtype) or, when the first starts with '-', as -name value
// pairs.  Returns false, with a Tcl error, for anything else.
bool parse(Tcl_Interp *interp, int objc, Tcl_Obj *const objv[], const char *order, Words &words) {
    bool ok = true;
    if (objc > 1 && Tcl_GetString(objv[1])[0] == '-') {
        for (int i = 1; ok && i < objc; i += 2) {
            const char *name = Tcl_GetString(objv[i]);
            if (i + 1 >= objc) ok = false;
            else if (!std::strcmp(name, "-device") || !std::strcmp(name, "-device_type"))
                ok = std::strchr(order, 'd') && device_of(Tcl_GetString(objv[i + 1]), words);
            else if (!std::strcmp(name, "-dtype") || !std::strcmp(name, "-data_type"))
                ok = std::strchr(order, 't') && dtype_of(Tcl_GetString(objv[i + 1]), words);
            else ok = false;
        }
    } else {
        ok = objc - 1 <= (int)std::strlen(order);
        for (int i = 1; ok && i < objc; i++) {
            const char *word = Tcl_GetString(objv[i]);
            ok = order[i - 1] == 'd' ? device_of(word, words) : dtype_of(word, words);
        }
    }
    if (!ok) Tcl_SetObjResult(interp, Tcl_NewStringObj("aten: bad arguments", -1));
    return ok;
}

int result(Tcl_Interp *interp, void *data, Result which) {
    Tcl_SetObjResult(interp, static_cast<Results *>(data)->obj[which]);
    return TCL_OK;
}

int fail(Tcl_Interp *interp, const std::exception &e) {
    Tcl_SetObjResult(interp, Tcl_NewStringObj(e.what(), -1));
    return TCL_ERROR;
}

int set_dtype(void *data, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[]) {
    Words words;
    if (!parse(interp, objc, objv, "td", words)) return TCL_ERROR;
    if (!words.has_dtype) {
        Tcl_SetObjResult(interp, Tcl_NewStringObj("aten: no dtype", -1));
        return TCL_ERROR;
    }
    try {
        aten_set_dtype(code_of(words.device), code_of(words.dtype));
        aten_clear_cache();
    } catch (const std::exception &e) { return fail(interp, e); }
    return result(interp, data, DTYPE_SET);
}

int enable(void *data, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[]) {
    Words words;
    if (!parse(interp, objc, objv, "dt", words)) return TCL_ERROR;
    try {
        if (words.has_dtype) {
            aten_set_dtype(code_of(words.device), code_of(words.dtype));
            aten_clear_cache();
        }
        aten_set_enabled(code_of(words.device), true);
    } catch (const std::exception &e) { return fail(interp, e); }
    return result(interp, data, ENABLED);
}

int disable(void *data, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[]) {
    Words words;
    if (!parse(interp, objc, objv, "d", words)) return TCL_ERROR;
    try {
        aten_set_enabled(code_of(words.device), false);
    } catch (const std::exception &e) { return fail(interp, e); }
    return result(interp, data, DISABLED);
}

int is_enabled(void *data, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[]) {
    Words words;
    if (!parse(interp, objc, objv, "d", words)) return TCL_ERROR;
    bool on;
    try {
        on = aten_is_enabled(code_of(words.device));
    } catch (const std::exception &e) { return fail(interp, e); }
    return result(interp, data, on ? TRUE_ : FALSE_);
}

int get_dtype(void *data, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[]) {
    Words words;
    if (!parse(interp, objc, objv, "d", words)) return TCL_ERROR;
    at::ScalarType dtype;
    try {
        dtype = static_cast<at::ScalarType>(aten_get_dtype(code_of(words.device)));
    } catch (const std::exception &e) { return fail(interp, e); }
    switch (dtype) {
    case at::kHalf: return result(interp, data, FLOAT16);
    case at::kBFloat16: return result(interp, data, BFLOAT16);
    case at::kFloat: return result(interp, data, FLOAT32);
    default:
        Tcl_SetObjResult(interp, Tcl_NewStringObj(c10::toString(dtype), -1));
        return TCL_OK;
    }
}

// The floor's twin: a native command that reads its words and returns a
// result, with no call into ATen.
int nothing(void *data, Tcl_Interp *interp, int objc, Tcl_Obj *const objv[]) {
    Words words;
    if (!parse(interp, objc, objv, "d", words)) return TCL_ERROR;
    return result(interp, data, FALSE_);
}

void free_results(void *data, Tcl_Interp *) {
    Results *results = static_cast<Results *>(data);
    for (Tcl_Obj *obj : results->obj) Tcl_DecrRefCount(obj);
    delete results;
}

}  // namespace

extern "C" int Atendirect_Init(Tcl_Interp *interp) {
    if (Tcl_InitStubs(interp, TCL_VERSION, 0) == nullptr) return TCL_ERROR;
    Results *results = new Results;
    for (int i = 0; i < NRESULTS; i++) {
        results->obj[i] = Tcl_NewStringObj(TEXTS[i], -1);
        Tcl_IncrRefCount(results->obj[i]);
    }
    Tcl_CallWhenDeleted(interp, free_results, results);
    Tcl_CreateObjCommand(interp, "aten::set_dtype", set_dtype, results, nullptr);
    Tcl_CreateObjCommand(interp, "aten::enable", enable, results, nullptr);
    Tcl_CreateObjCommand(interp, "aten::disable", disable, results, nullptr);
    Tcl_CreateObjCommand(interp, "aten::is_enabled", is_enabled, results, nullptr);
    Tcl_CreateObjCommand(interp, "aten::get_dtype", get_dtype, results, nullptr);
    Tcl_CreateObjCommand(interp, "aten::nothing", nothing, results, nullptr);
    return Tcl_PkgProvide(interp, "atendirect", "1.0");
}
