/*
 * text_fast.c -- the bridge's accelerators for text.  Each is a faster way
 * to a result that the core's general way (Tcl's or Python's own
 * conversions) gives as well:
 *   - long ASCII copied 64 bytes at a time, each block checked as it goes
 *     (for a byte with the high bit set, or for NUL): one pass, where
 *     Python's decoder takes 8 bytes at a time and a NUL check is a pass
 *     of its own;
 *   - a str's UTF-8 written for Tcl eight or four characters at a time,
 *     so that Tcl has both a str's code units and its text without
 *     converting one character at a time;
 *   - a list's text written from its integers' values;
 *   - a value held only as code units checked for a handle's name on its
 *     units, so that a long text makes no UTF-8.
 * Built with TCLAMP_NO_ACCELERATORS, each entry point below says "not
 * done" and the core goes the general way; the suite runs such a build
 * (tests/test_speed_semantics.py) and compares.
 */
#include "bridge.h"
#include <stdint.h>
#include <string.h>

#ifndef TCLAMP_NO_ACCELERATORS

#ifdef __SSE2__
#  include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#  include <immintrin.h>
#  define HAVE_PACKED_UTF8 1
#endif

#ifdef __SSE2__
/* The 64-byte blocks at the start of src that copy_blocks may copy,
   checked 64 bytes at a time; returns how many bytes it copied. */
static Py_ssize_t
copy_blocks_fast(char *dst, const char *src, Py_ssize_t n, int nul)
{
    Py_ssize_t i = 0;
    const __m128i zero = _mm_setzero_si128();
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        __m128i hit = nul
            ? _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(a, zero), _mm_cmpeq_epi8(b, zero)),
                           _mm_or_si128(_mm_cmpeq_epi8(c, zero), _mm_cmpeq_epi8(d, zero)))
            : _mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d));
        if (_mm_movemask_epi8(hit))
            return i;
        _mm_storeu_si128((__m128i *)(dst + i), a);
        _mm_storeu_si128((__m128i *)(dst + i + 16), b);
        _mm_storeu_si128((__m128i *)(dst + i + 32), c);
        _mm_storeu_si128((__m128i *)(dst + i + 48), d);
    }
    return i;
}
#endif

/* Four characters at a time, in vector registers where the machine has
   them (GCC's vector extensions: SSE2 on x86-64, NEON on ARM).  Signed
   lanes, since SSE2 compares only those; characters fit either way.
   Each character's UTF-8, the way Tcl writes it (NUL as C0 80), is worked
   out in all lanes at once without a branch (mixed scripts defeat a
   branch predictor), as a little-endian word of up to 3 bytes. */
typedef int32_t Lanes __attribute__((vector_size(16)));
typedef uint16_t Units __attribute__((vector_size(8)));
typedef uint8_t Latin __attribute__((vector_size(4)));

typedef struct {
    Lanes word, two, three;     /* two, three: all ones where that many bytes or more */
    Lanes surrogate;            /* all ones for a surrogate, which Tcl writes itself */
} Utf8Lanes;

/* For lanes of any width (the writer for AVX2 takes eight at a time). */
#define UTF8_LANES(u, c) do {                                                  \
        (u).two = ((c) > 0x7F) | ((c) == 0);                                   \
        (u).three = (c) > 0x7FF;                                               \
        (u).word = ((c) & ~(u).two)                                            \
            | ((0x80C0 | (c) >> 6 | ((c) << 8 & 0x3F00)) & (u).two & ~(u).three) \
            | ((0x8080E0 | (c) >> 12 | ((c) << 2 & 0x3F00) | ((c) << 16 & 0x3F0000)) \
               & (u).three);                                                   \
        (u).surrogate = ((c) & 0xF800) == 0xD800;                              \
    } while (0)

static inline __attribute__((always_inline)) Utf8Lanes
utf8_lanes(Lanes c)
{
    Utf8Lanes u;
    UTF8_LANES(u, c);
    return u;
}

static inline __attribute__((always_inline)) Lanes
load_lanes(int kind, const void *data, Py_ssize_t i)
{
    if (kind == PyUnicode_1BYTE_KIND) {
        Latin v;
        memcpy(&v, (const Py_UCS1 *)data + i, sizeof v);
        return __builtin_convertvector(v, Lanes);
    }
    Units v;
    memcpy(&v, (const Py_UCS2 *)data + i, sizeof v);
    return __builtin_convertvector(v, Lanes);
}

/* Stores the first `count` lanes' bytes one word at a time. */
static inline __attribute__((always_inline)) char *
store_words(Utf8Lanes u, int count, char *out)
{
    uint32_t words[4], sizes[4];
    Lanes size = 1 - u.two - u.three;
    memcpy(words, &u.word, sizeof words);
    memcpy(sizes, &size, sizeof sizes);
    for (int k = 0; k < count; k++) {
#if PY_BIG_ENDIAN
        words[k] = __builtin_bswap32(words[k]);     /* first byte lowest in memory */
#endif
        memcpy(out, &words[k], 4);
        out += sizes[k];
    }
    return out;
}

#ifdef HAVE_PACKED_UTF8
/* With AVX2, eight characters at a time, and one shuffle packs each four
   characters' bytes together (it works within each half of the register):
   the shuffle for each mix of sizes (a bit per lane for two bytes or more,
   one for three) is made once. */
static uint8_t packing_shuffles[256][16], packed_sizes[256];
static int can_pack;

static void
make_packing_shuffles(void)
{
    for (int mix = 0; mix < 256; mix++) {
        int n = 0;
        memset(packing_shuffles[mix], 0x80, 16);    /* 0x80: a zero byte */
        for (int k = 0; k < 4; k++) {
            int size = 1 + (mix >> k & 1) + (mix >> (k + 4) & 1);
            for (int b = 0; b < size; b++)
                packing_shuffles[mix][n++] = (uint8_t)(4 * k + b);
        }
        packed_sizes[mix] = (uint8_t)n;
    }
    can_pack = __builtin_cpu_supports("avx2");
}

typedef int32_t Lanes8 __attribute__((vector_size(32)));

static __attribute__((target("avx2"))) char *
utf8_packed(int kind, const void *data, Py_ssize_t len, char *out, Lanes *surrogates)
{
    Lanes8 seen = {0};
    for (Py_ssize_t i = 0; i + 8 <= len; i += 8) {
        struct { Lanes8 word, two, three, surrogate; } u;
        Lanes8 c = kind == PyUnicode_1BYTE_KIND
            ? (Lanes8)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)((const Py_UCS1 *)data + i)))
            : (Lanes8)_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const Py_UCS2 *)data + i)));
        UTF8_LANES(u, c);
        seen |= u.surrogate;
        int two = _mm256_movemask_ps((__m256)u.two), three = _mm256_movemask_ps((__m256)u.three);
        int low = (two & 0xF) | (three & 0xF) << 4, high = two >> 4 | (three & 0xF0);
        __m256i shuffle = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)packing_shuffles[low])),
            _mm_loadu_si128((const __m128i *)packing_shuffles[high]), 1);
        __m256i packed = _mm256_shuffle_epi8((__m256i)u.word, shuffle);
        _mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(packed));
        out += packed_sizes[low];
        _mm_storeu_si128((__m128i *)out, _mm256_extracti128_si256(packed, 1));
        out += packed_sizes[high];
    }
    *surrogates |= (Lanes)_mm256_castsi256_si128((__m256i)seen)
                 | (Lanes)_mm256_extracti128_si256((__m256i)seen, 1);
    return out;
}
#endif

/* Writes the UTF-8 of a str of one- or two-byte characters to `out`
   (room for the worst case); returns its end, or NULL for a str with a
   lone surrogate (Tcl writes those its own way; they are rare, so they
   are looked for along the way). */
static inline __attribute__((always_inline)) char *
utf8_of(int kind, const void *data, Py_ssize_t len, char *out)
{
    Lanes surrogates = {0};
    Py_ssize_t i = 0;
#ifdef HAVE_PACKED_UTF8
    if (can_pack) {
        out = utf8_packed(kind, data, len, out, &surrogates);
        i = len & ~(Py_ssize_t)7;
    }
#endif
    for (; i + 4 <= len; i += 4) {
        Utf8Lanes u = utf8_lanes(load_lanes(kind, data, i));
        surrogates |= u.surrogate;
        out = store_words(u, 4, out);
    }
    Lanes rest = {0};
    for (int k = 0; i + k < len; k++)
        rest[k] = (int32_t)PyUnicode_READ(kind, data, i + k);
    Utf8Lanes last = utf8_lanes(rest);
    surrogates |= last.surrogate;
    out = store_words(last, (int)(len - i), out);
    return surrogates[0] | surrogates[1] | surrogates[2] | surrogates[3] ? NULL : out;
}

/* How many bytes of UTF-8 Tcl writes for a str of one- or two-byte
   characters: one each, a second for NUL (C0 80) and from U+0080, a third
   from U+0800 (a surrogate, too, where Tcl 8.6 writes it). */
static inline __attribute__((always_inline)) size_t
utf8_size(int kind, const void *data, Py_ssize_t len)
{
    size_t size = (size_t)len;
    /* counted in 16-bit lanes, 16384 characters (2 at most each) at a time */
    for (Py_ssize_t start = 0; start < len; start += 16384) {
        Py_ssize_t end = len - start > 16384 ? start + 16384 : len;
        uint16_t extra = 0;
        if (kind == PyUnicode_1BYTE_KIND) {
            for (Py_ssize_t i = start; i < end; i++) {
                Py_UCS1 c = ((const Py_UCS1 *)data)[i];
                extra += (uint8_t)(c - 1) >= 0x7F;      /* NUL, or from U+0080 */
            }
        } else {
            for (Py_ssize_t i = start; i < end; i++) {
                Py_UCS2 c = ((const Py_UCS2 *)data)[i];
                extra += ((uint16_t)(c - 1) >= 0x7F) + (c >= 0x800);
            }
        }
        size += extra;
    }
    return size;
}

/* Gives a value that tcl_from_units made (code units only, no text yet)
   its UTF-8 as well, so that neither `string length` nor a use of its text
   makes Tcl convert the characters one by one.  (A str with characters
   beyond the BMP keeps code units only.)  The text is counted first and
   made at its exact size: no room for the worst case that is cut later. */
void
add_utf8(Tcl_Obj *obj, PyObject *s)
{
    int kind = PyUnicode_KIND(s);
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    const void *data = PyUnicode_DATA(s);
    if (kind != PyUnicode_1BYTE_KIND && kind != PyUnicode_2BYTE_KIND)
        return;
    size_t size = kind == PyUnicode_1BYTE_KIND ? utf8_size(PyUnicode_1BYTE_KIND, data, len)
                                               : utf8_size(PyUnicode_2BYTE_KIND, data, len);
    /* the writers store whole words past the end: 16 bytes at most */
    char *text = text_room(obj, size + 16);
    if (text == NULL)
        return;
    char *end = kind == PyUnicode_1BYTE_KIND
        ? utf8_of(PyUnicode_1BYTE_KIND, data, len, text)
        : utf8_of(PyUnicode_2BYTE_KIND, data, len, text);
    if (end != text + size)         /* a lone surrogate: Tcl writes the text */
        Tcl_InvalidateStringRep(obj);
    else
        text_done(obj, (Tcl_Size)size);
}

void
text_fast_init(void)
{
#ifdef HAVE_PACKED_UTF8
    make_packing_shuffles();
#endif
}

/* Copies src to dst while no byte matches (high bit set when `nul` is
   0, zero when it is 1); returns how many bytes it copied. */
static Py_ssize_t
copy_blocks(char *dst, const char *src, Py_ssize_t n, int nul)
{
    Py_ssize_t i = 0;
#ifdef __SSE2__
    i = copy_blocks_fast(dst, src, n, nul);
#endif
    for (; i < n; i++) {
        unsigned char byte = (unsigned char)src[i];
        if (nul ? byte == 0 : byte >= 0x80)
            return i;
        dst[i] = (char)byte;
    }
    return n;
}

/* Long UTF-8 that is all ASCII as a str; NULL, with no error, otherwise.
   Its first block is looked at before the str is made: text that is not
   ASCII nearly always shows it there, and then costs no str of its length
   made and thrown away. */
PyObject *
ascii_str(const char *s, Py_ssize_t len)
{
    char first[64];
    if (copy_blocks(first, s, sizeof first, 0) < (Py_ssize_t)sizeof first)
        return NULL;
    PyObject *str = PyUnicode_New(len, 127);
    if (str == NULL) {
        PyErr_Clear();          /* the general way reports it */
        return NULL;
    }
    if (copy_blocks((char *)PyUnicode_1BYTE_DATA(str), s, len, 0) == len)
        return str;
    Py_DECREF(str);
    return NULL;
}

/* Long ASCII is copied straight into the value's text (Tcl_SetObjLength
   leaves the new bytes to its caller), checked for NUL on the way. */
Tcl_Obj *
ascii_tcl(const char *data, Py_ssize_t len)
{
    Tcl_Obj *obj = Tcl_NewObj();
    Tcl_SetObjLength(obj, (Tcl_Size)len);
    if (copy_blocks(Tcl_GetString(obj), data, len, 1) == len)
        return obj;
    discard(obj);
    return NULL;
}

/* A list's text, as Tcl writes it, for a list whose items are integers
   (without text: written from their values) or words that need no quoting.
   Tcl would give each integer a text of its own (an allocation each) to
   copy from, at several times the cost.  Any other list is left to Tcl. */
static int
is_plain_int(Tcl_Obj *item, const Tcl_ObjType *tcl_int, const Tcl_ObjType *tcl_wide,
             unsigned long long *magnitude)
{
    long long w;
    if (item->bytes != NULL || item->typePtr == NULL
            || (item->typePtr != tcl_int && item->typePtr != tcl_wide)
            || int_obj_value(item, &w) != TCL_OK)
        return 0;
    *magnitude = w < 0 ? 0 - (unsigned long long)w : (unsigned long long)w;
    return w < 0 ? -1 : 1;
}

void
write_list_text(Tcl_Obj *list, const Tcl_ObjType *tcl_int, const Tcl_ObjType *tcl_wide)
{
    Tcl_Size n, len;
    Tcl_Obj **items;
    unsigned long long u;
    if (Tcl_ListObjGetElements(NULL, list, &n, &items) != TCL_OK || n == 0)
        return;
    size_t size = (size_t)n - 1;                /* the spaces */
    for (Tcl_Size i = 0; i < n; i++) {
        int sign = is_plain_int(items[i], tcl_int, tcl_wide, &u);
        if (sign != 0) {
            size += (size_t)digits_of(u) + (sign < 0);
            continue;
        }
        int flags;
        const char *word = Tcl_GetStringFromObj(items[i], &len);
        if (len == 0 || (i == 0 && word[0] == '#')
                || Tcl_ScanCountedElement(word, len, &flags) != len)
            return;                             /* quoted: Tcl writes it */
        size += (size_t)len;
    }
    if (size > (size_t)TCL_SIZE_MAX)
        return;
    char *text = text_room(list, size), *out = text;
    if (text == NULL)
        return;
    for (Tcl_Size i = 0; i < n; i++) {
        if (i > 0)
            *out++ = ' ';
        int sign = is_plain_int(items[i], tcl_int, tcl_wide, &u);
        if (sign == 0) {
            const char *word = Tcl_GetStringFromObj(items[i], &len);
            memcpy(out, word, (size_t)len);
            out += len;
            continue;
        }
        if (sign < 0)
            *out++ = '-';
        out += digits_of(u);
        write_digits(u, out);
    }
    text_done(list, (Tcl_Size)size);
}

/* Whether a value that Tcl holds only as code units may name a handle: a
   full command name, as a handle's is (::py::objN, or any the script renamed
   it to).  Checked on the units, so that a long text makes no UTF-8. */
int
units_may_name_handle(Tcl_Obj *obj)
{
    Tcl_Size n;
    const Tcl_UniChar *u = Tcl_GetUnicodeFromObj(obj, &n);
    return n >= 2 && u[0] == ':' && u[1] == ':';
}

#else   /* TCLAMP_NO_ACCELERATORS: Tcl and Python convert, as they would */

void text_fast_init(void) {}
PyObject *ascii_str(const char *s, Py_ssize_t len) { return NULL; }
Tcl_Obj *ascii_tcl(const char *data, Py_ssize_t len) { return NULL; }
void write_list_text(Tcl_Obj *list, const Tcl_ObjType *tcl_int, const Tcl_ObjType *tcl_wide) {}
void add_utf8(Tcl_Obj *obj, PyObject *s) {}
int units_may_name_handle(Tcl_Obj *obj) { return 1; }

#endif
