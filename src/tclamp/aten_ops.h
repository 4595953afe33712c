/*
 * aten_ops.h -- the ATen autocast functions that a remembered plan's
 * program calls (aten_programs.c), in one table that everything else
 * reads: the bridge exports it as _bridge.ATEN_OPS, from which aten.py
 * finds and checks the functions.
 *
 * Each row: the op's code (its place), its field in the bridge's table,
 * the torch function that binds it (same name in torch), the C++ function's
 * name as the Itanium C++ ABI writes it (as libtorch_cpu exports it), its C
 * result and argument types, and the same as ctypes codes ("" nothing,
 * "b" int8, "?" bool, "i" int).  c10::DeviceType and c10::ScalarType are
 * int8 enums, passed as such.  The last four are torch::autocast's, for
 * the cache flag and the nesting count that `with torch.autocast` keeps.
 */
#define ATEN_OP_TABLE(OP)                                                       \
    OP(ATEN_SET_DTYPE, set_dtype, "set_autocast_dtype",                         \
       "_ZN2at8autocast18set_autocast_dtypeEN3c1010DeviceTypeENS1_10ScalarTypeE", \
       void, (signed char device, signed char dtype), "", "bb")                \
    OP(ATEN_SET_ENABLED, set_enabled, "set_autocast_enabled",                   \
       "_ZN2at8autocast20set_autocast_enabledEN3c1010DeviceTypeEb",             \
       void, (signed char device, bool enabled), "", "b?")                     \
    OP(ATEN_CLEAR_CACHE, clear_cache, "clear_autocast_cache",                   \
       "_ZN2at8autocast11clear_cacheEv",                                        \
       void, (void), "", "")                                                    \
    OP(ATEN_IS_ENABLED, is_enabled, "is_autocast_enabled",                      \
       "_ZN2at8autocast19is_autocast_enabledEN3c1010DeviceTypeE",               \
       bool, (signed char device), "?", "b")                                    \
    OP(ATEN_GET_DTYPE, get_dtype, "get_autocast_dtype",                         \
       "_ZN2at8autocast18get_autocast_dtypeEN3c1010DeviceTypeE",                \
       signed char, (signed char device), "b", "b")                            \
    OP(ATEN_IS_CACHE_ENABLED, is_cache_enabled, "is_autocast_cache_enabled",    \
       "_ZN2at8autocast25is_autocast_cache_enabledEv",                          \
       bool, (void), "?", "")                                                   \
    OP(ATEN_SET_CACHE_ENABLED, set_cache_enabled, "set_autocast_cache_enabled", \
       "_ZN2at8autocast26set_autocast_cache_enabledEb",                         \
       void, (bool enabled), "", "?")                                          \
    OP(ATEN_INCREMENT_NESTING, increment_nesting, "autocast_increment_nesting", \
       "_ZN2at8autocast17increment_nestingEv",                                  \
       int, (void), "i", "")                                                    \
    OP(ATEN_DECREMENT_NESTING, decrement_nesting, "autocast_decrement_nesting", \
       "_ZN2at8autocast17decrement_nestingEv",                                  \
       int, (void), "i", "")

/* ATEN_BODY, after the ops, is no function: a program that ends with it
   is torch::autocast's, which runs the command's body there (see
   run_block in aten_programs.c). */
#define ATEN_OP_CODE(code, ...) code,
enum { ATEN_OP_TABLE(ATEN_OP_CODE) ATEN_OPS, ATEN_BODY = ATEN_OPS };
#undef ATEN_OP_CODE
