/* One validating pass over a JSON answer that builds no number of an array of numbers (issue 33).
 *
 * scan(data, span_type) returns the document as Python objects, except each array whose first element
 * is a number, which becomes an instance of span_type (a subclass of Span) holding the array's byte
 * span in `data` and its length: every number of it is checked against JSON's grammar, none is
 * converted. It returns None, never raising on the input, for anything it is unsure of: a body
 * orjson refuses, and also some orjson accepts (an array that starts with a number and holds anything
 * else, an integer of 19 digits or more, an exponent near double's range, a repeated key, nesting
 * deeper than MAX_DEPTH). The caller then asks another reader, whose verdict counts: whatever this
 * pass accepts, orjson accepts with the same document (tests/test_lazyjson.py fuzzes it).
 *
 * Written defensively: every read is bounded by `end`, the nesting is an explicit bounded stack
 * (no recursion), every Python object is owned by the stack or released on the way out.
 *
 * Why our own and not a dependency: simdjson's DOM parse (pysimdjson) writes a double per number on
 * its tape, 0.55 of check_json's 0.63 ms on the mock's 690 kB answer; a reader that keeps numbers raw
 * (yyjson's READ_NUMBER_AS_RAW) still writes a DOM node per number, and its Python bindings on PyPI
 * (yyjson, ypyjson) would be a new dependency for it (not measured here). What the checks need is
 * narrower than a parser: a verdict, the structure around the arrays, and each array's length. That
 * fits in this file, at about 5 GB/s here (bench/json_readers.py), built at install with no download.
 *
 * offsets(data, span_type) reads a `bytes` answer's metadata header the same way, but for its top-level
 * `data` array of objects, which it checks and sums (end - start) without building them (below).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#define MAX_DEPTH 256
#define MAX_INT_DIGITS 18   /* always within int64 */
#define MAX_EXP_SPAN 280    /* |exponent| + integer digits beyond this: unsure of double's range */

static inline int is_ws(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
static inline int is_digit(unsigned char c) { return (unsigned char)(c - '0') < 10; }

typedef struct {
    PyObject_HEAD
    PyObject *data;
    Py_ssize_t start, end, length;
    int int64;              /* no element has a fraction or an exponent (as_int64 checks the rest) */
    PyObject *values;       /* built by the Python side on first use; NULL until then */
} Span;

static void Span_dealloc(Span *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->data);
    Py_CLEAR(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Span_traverse(Span *self, visitproc visit, void *arg) {
    Py_VISIT(self->data);
    Py_VISIT(self->values);
    return 0;
}

static int Span_clear(Span *self) {
    Py_CLEAR(self->data);
    Py_CLEAR(self->values);
    return 0;
}

static Py_ssize_t Span_len(Span *self) { return self->length; }

/* Every element as a native int64, 8 bytes each, read from the (validated) span; None where one is not
 * a JSON integer of at most MAX_INT_DIGITS digits. A packed embedding's range check builds no int. */
static PyObject *Span_as_int64(Span *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->int64 || self->length == 0 || self->data == NULL || !PyBytes_Check(self->data)) Py_RETURN_NONE;
    Py_ssize_t size = PyBytes_GET_SIZE(self->data);
    if (self->start < 0 || self->end > size || self->start >= self->end) Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, self->length * 8);
    if (out == NULL) return NULL;
    int64_t *values = (int64_t *)PyBytes_AS_STRING(out);
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(self->data) + self->start + 1;
    const unsigned char *end = (const unsigned char *)PyBytes_AS_STRING(self->data) + self->end - 1;
    Py_ssize_t n = 0;
    while (p < end) {
        if (is_ws(*p) || *p == ',') { p++; continue; }
        int negative = 0;
        if (*p == '-') { negative = 1; p++; }
        int64_t v = 0;
        int digits = 0;
        while (p < end && is_digit(*p)) {
            if (++digits > MAX_INT_DIGITS) { Py_DECREF(out); Py_RETURN_NONE; }
            v = v * 10 + (*p++ - '0');
        }
        if (digits == 0 || (p < end && !is_ws(*p) && *p != ',') || n == self->length) {
            Py_DECREF(out);
            Py_RETURN_NONE;  /* a fraction or an exponent (the wide loop does not tell them apart) */
        }
        values[n++] = negative ? -v : v;
    }
    if (n != self->length) { Py_DECREF(out); Py_RETURN_NONE; }
    return out;
}

static PyMethodDef Span_methods[] = {
    {"as_int64", (PyCFunction)Span_as_int64, METH_NOARGS,
     "Every element as a native 64-bit integer, 8 bytes each, when each is a JSON integer; else None."},
    {NULL}
};

static PyMemberDef Span_members[] = {
    {"_data", T_OBJECT, offsetof(Span, data), READONLY, "the body the span is of"},
    {"_start", T_PYSSIZET, offsetof(Span, start), READONLY, "offset of the array's '['"},
    {"_end", T_PYSSIZET, offsetof(Span, end), READONLY, "offset just past its ']'"},
    {"_values", T_OBJECT, offsetof(Span, values), 0, "the elements, once built (None before)"},
    {NULL}
};

static PySequenceMethods Span_as_sequence = {.sq_length = (lenfunc)Span_len};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "poolbench_locust._jsonscan.Span",
    .tp_basicsize = sizeof(Span),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An array of numbers of a JSON body, validated, its numbers not built.",
    .tp_dealloc = (destructor)Span_dealloc,
    .tp_traverse = (traverseproc)Span_traverse,
    .tp_clear = (inquiry)Span_clear,
    .tp_members = Span_members,
    .tp_methods = Span_methods,
    .tp_as_sequence = &Span_as_sequence,
    .tp_new = NULL,  /* made by scan() only */
};

/* ---- the pass ---------------------------------------------------------------------------- */


static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end) {
    while (p < end && is_ws(*p)) p++;
    return p;
}

/* Past a run of digits: eight at a time while eight bytes are left (a byte is a digit when it minus
 * '0' is below 10; a carry only corrupts the bytes after the first non-digit, which are not looked at). */
static inline const unsigned char *skip_digits(const unsigned char *p, const unsigned char *end) {
    while (end - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        uint64_t x = v ^ 0x3030303030303030ULL;
        uint64_t bad = ((x + 0x7676767676767676ULL) | x) & 0x8080808080808080ULL;
        if (bad) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            return p + (__builtin_ctzll(bad) >> 3);
#else
            break;
#endif
        }
        p += 8;
    }
    while (p < end && is_digit(*p)) p++;
    return p;
}

/* A number's end, or NULL where it is not one of JSON's (or is one whose range this pass is unsure of).
 * *is_int: no fraction and no exponent; *int_digits: digits before any fraction. */
static inline const unsigned char *number(const unsigned char *p, const unsigned char *end, int *is_int,
                                          Py_ssize_t *int_digits) {
    const unsigned char *q;
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') {
        q = p + 1;
    } else if (is_digit(*p)) {
        q = skip_digits(p + 1, end);
    } else {
        return NULL;
    }
    *int_digits = q - p;
    *is_int = 1;
    p = q;
    if (p < end && *p == '.') {
        q = skip_digits(p + 1, end);
        if (q == p + 1) return NULL;
        p = q;
        *is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        q = skip_digits(p, end);
        if (q == p || q - p > 3) return NULL;  /* no digits; or an exponent past 999: unsure */
        long e = 0;
        for (const unsigned char *d = p; d < q; d++) e = e * 10 + (*d - '0');
        if (e + *int_digits > MAX_EXP_SPAN) return NULL;
        p = q;
        *is_int = 0;
    } else if (*int_digits > MAX_EXP_SPAN) {
        return NULL;
    }
    return p;
}

static PyObject *scalar_number(const unsigned char *p, const unsigned char *q, int is_int, Py_ssize_t int_digits) {
    char buf[64];
    Py_ssize_t n = q - p;
    if (is_int) {
        if (int_digits > MAX_INT_DIGITS) return NULL;
        memcpy(buf, p, n);
        buf[n] = 0;
        return PyLong_FromLongLong(strtoll(buf, NULL, 10));
    }
    char *heap = NULL, *text = buf;
    if (n >= (Py_ssize_t)sizeof(buf)) {
        heap = PyMem_Malloc(n + 1);
        if (heap == NULL) return NULL;
        text = heap;
    }
    memcpy(text, p, n);
    text[n] = 0;
    double d = PyOS_string_to_double(text, NULL, NULL);
    PyMem_Free(heap);
    if (d == -1.0 && PyErr_Occurred()) return NULL;
    if (!isfinite(d)) return NULL;  /* orjson refuses a number past double's range */
    return PyFloat_FromDouble(d);
}

static inline int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return 0;
    }
    *out = v;
    return 1;
}

/* The string whose opening quote is at *pp; *pp moves past its closing quote. NULL where it is not
 * a JSON string of valid UTF-8 (a control character, a bad escape, a lone surrogate). */
static PyObject *string(const unsigned char **pp, const unsigned char *end) {
    const unsigned char *start = *pp + 1, *p = start;
    int escaped = 0;
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') break;
        if (c < 0x20) return NULL;
        if (c == '\\') {
            escaped = 1;
            if (end - p < 2) return NULL;
            p += 2;
            continue;
        }
        p++;
    }
    if (p >= end) return NULL;
    *pp = p + 1;
    if (!escaped) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)start, p - start, "strict");
        if (s == NULL) PyErr_Clear();  /* bad UTF-8, an encoded surrogate: refused */
        return s;
    }
    /* decode the escapes into UTF-8: never longer than the escaped text */
    unsigned char *buf = PyMem_Malloc(p - start + 1);
    if (buf == NULL) return NULL;
    unsigned char *o = buf;
    const unsigned char *s = start;
    while (s < p) {
        if (*s != '\\') { *o++ = *s++; continue; }
        s++;  /* within p: the scan above skipped two bytes per backslash */
        unsigned char e = *s++;
        unsigned cp;
        switch (e) {
            case '"': *o++ = '"'; continue;
            case '\\': *o++ = '\\'; continue;
            case '/': *o++ = '/'; continue;
            case 'b': *o++ = '\b'; continue;
            case 'f': *o++ = '\f'; continue;
            case 'n': *o++ = '\n'; continue;
            case 'r': *o++ = '\r'; continue;
            case 't': *o++ = '\t'; continue;
            case 'u': break;
            default: PyMem_Free(buf); return NULL;
        }
        if (p - s < 4 || !hex4(s, &cp)) { PyMem_Free(buf); return NULL; }
        s += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (p - s < 6 || s[0] != '\\' || s[1] != 'u' || !hex4(s + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                PyMem_Free(buf);
                return NULL;  /* a lone high surrogate */
            }
            s += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            PyMem_Free(buf);
            return NULL;  /* a lone low surrogate */
        }
        if (cp < 0x80) {
            *o++ = (unsigned char)cp;
        } else if (cp < 0x800) {
            *o++ = 0xC0 | (cp >> 6);
            *o++ = 0x80 | (cp & 0x3F);
        } else if (cp < 0x10000) {
            *o++ = 0xE0 | (cp >> 12);
            *o++ = 0x80 | ((cp >> 6) & 0x3F);
            *o++ = 0x80 | (cp & 0x3F);
        } else {
            *o++ = 0xF0 | (cp >> 18);
            *o++ = 0x80 | ((cp >> 12) & 0x3F);
            *o++ = 0x80 | ((cp >> 6) & 0x3F);
            *o++ = 0x80 | (cp & 0x3F);
        }
    }
    PyObject *str = PyUnicode_DecodeUTF8((const char *)buf, o - buf, "strict");
    PyMem_Free(buf);
    if (str == NULL) PyErr_Clear();
    return str;
}


/* ---- arrays of numbers 64 bytes at a time (AVX2, where the CPU has it) ----------------------
 *
 * Each byte of a block is classed (digit, '0', '-', '+', '.', 'e'/'E', ','), one bit per byte in a
 * 64-bit mask per class, and JSON's number grammar is checked on the masks: what may come before and
 * after each byte, where each run of digits starts (after ',' or a sign: the integer part; after '.':
 * the fraction; after 'e' or its sign: the exponent) and what ends it (adding a run's start bit to the
 * digit mask carries through the run to the byte just after it). A block holding any other byte (']',
 * a space) stops it: the scalar loop goes on from the start of the last number that began before that
 * block, every number before which is checked. What it is unsure of (an exponent of three digits or
 * more, a whole block of digits) makes the body unsure. */

typedef struct {
    uint64_t c, e, m1, m2, s, p, d, iz, x3;  /* the previous block's masks (their last bits carry) */
    uint64_t k1, k2, k3;                     /* carries out of the three run additions */
} Carry;

static inline uint64_t add_carry(uint64_t a, uint64_t b, uint64_t *carry) {
    uint64_t sum, out;
    uint64_t c1 = __builtin_add_overflow(a, b, &sum);
    uint64_t c2 = __builtin_add_overflow(sum, *carry, &out);
    *carry = c1 | c2;
    return out;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_WIDE 1

__attribute__((target("avx2"))) static inline uint64_t eq_mask(__m256i lo, __m256i hi, char c) {
    __m256i v = _mm256_set1_epi8(c);
    uint32_t a = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(lo, v));
    uint32_t b = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(hi, v));
    return (uint64_t)a | ((uint64_t)b << 32);
}

__attribute__((target("avx2"))) static inline uint64_t digit_mask(__m256i lo, __m256i hi) {
    /* signed compare after moving '0'..'9' to -128..-119 */
    __m256i shift = _mm256_set1_epi8((char)(0x80 - '0'));
    __m256i limit = _mm256_set1_epi8((char)(-128 + 10));
    __m256i a = _mm256_cmpgt_epi8(limit, _mm256_add_epi8(lo, shift));
    __m256i b = _mm256_cmpgt_epi8(limit, _mm256_add_epi8(hi, shift));
    return (uint64_t)(uint32_t)_mm256_movemask_epi8(a) | ((uint64_t)(uint32_t)_mm256_movemask_epi8(b) << 32);
}

/* Checks the blocks from p (a number's start) while 64 bytes are left and every byte is of a number.
 * Returns 0 where the grammar is broken (or unsure), else 1 with *resume at the start of the first
 * number not known good and *commas the commas before it. */
__attribute__((target("avx2"))) static int wide_numbers(const unsigned char *p, const unsigned char *end,
                                                         const unsigned char **resume, Py_ssize_t *commas,
                                                         int *fraction) {
    Carry k = {.c = 1ULL << 63};  /* the byte before the first number is as if a ',' */
    const unsigned char *start = p;
    Py_ssize_t n = 0;
    uint64_t seen_pe = 0;
    while (end - p >= 64) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)p);
        __m256i hi = _mm256_loadu_si256((const __m256i *)(p + 32));
        uint64_t D = digit_mask(lo, hi);
        uint64_t Z = eq_mask(lo, hi, '0');
        uint64_t M = eq_mask(lo, hi, '-');
        uint64_t S = eq_mask(lo, hi, '+');
        uint64_t P = eq_mask(lo, hi, '.');
        uint64_t E = eq_mask(_mm256_or_si256(lo, _mm256_set1_epi8(0x20)), _mm256_or_si256(hi, _mm256_set1_epi8(0x20)), 'e');
        uint64_t C = eq_mask(lo, hi, ',');
        if (~(D | M | S | P | E | C)) break;  /* another byte: the scalar loop's */
        if (D == ~0ULL) return 0;              /* 64 digits in a row: unsure of the range */
        uint64_t pC = (C << 1) | (k.c >> 63), pE = (E << 1) | (k.e >> 63);
        uint64_t M1 = M & pC, M2 = M & pE;
        uint64_t pM1 = (M1 << 1) | (k.m1 >> 63), pM2 = (M2 << 1) | (k.m2 >> 63);
        uint64_t pS = (S << 1) | (k.s >> 63), pP = (P << 1) | (k.p >> 63), pD = (D << 1) | (k.d >> 63);
        uint64_t bad = (M & ~(pC | pE)) | (S & ~pE);            /* a sign where none may be */
        bad |= (pM1 | pM2 | pS | pP) & ~D;                      /* a sign or '.' not followed by a digit */
        bad |= pE & ~(D | S | M);                               /* 'e' followed by neither */
        bad |= pC & ~(D | M);                                   /* ',' followed by no number */
        uint64_t IZ = Z & (pC | pM1);                           /* an integer part's leading zero */
        bad |= ((IZ << 1) | (k.iz >> 63)) & D;                  /* ... followed by a digit */
        uint64_t RS = D & ~pD;
        uint64_t sum1 = add_carry(D, RS & (pC | pM1), &k.k1);
        uint64_t sum2 = add_carry(D, RS & pP, &k.k2);
        uint64_t sum3 = add_carry(D, RS & (pE | pS | pM2), &k.k3);
        uint64_t A1 = sum1 & ~D, A2 = sum2 & ~D, A3 = sum3 & ~D;  /* just after an integer, fraction, exponent */
        bad |= (P & ~A1) | (E & ~(A1 | A2));
        bad |= (A1 & ~(P | E | C)) | (A2 & ~(E | C)) | (A3 & ~C);
        bad |= C & ~(A1 | A2 | A3);
        uint64_t X3 = D & ~sum3;                                /* the exponents' digits */
        bad |= X3 & ((X3 << 1) | (k.x3 >> 63)) & ((X3 << 2) | (k.x3 >> 62));  /* three or more */
        if (bad) return 0;
        seen_pe |= P | E;
        if (C) {
            n += __builtin_popcountll(C);
            start = p + 64 - __builtin_clzll(C);  /* just past the block's last ',' */
        }
        k.c = C; k.e = E; k.m1 = M1; k.m2 = M2; k.s = S; k.p = P; k.d = D; k.iz = IZ; k.x3 = X3;
        p += 64;
    }
    *resume = start;
    *commas = n;
    *fraction = seen_pe != 0;
    return 1;
}
#endif

static int wide = 0;  /* the CPU has AVX2 (set at import) */

/* An array that starts with a number, from its '[': every element a number, or NULL (unsure). */
static PyObject *numbers(const unsigned char **pp, const unsigned char *base, const unsigned char *end,
                         PyObject *data, PyTypeObject *span_type) {
    const unsigned char *p = skip_ws(*pp + 1, end);
    Py_ssize_t count = 0;
    int all_int = 1;
#ifdef HAVE_WIDE
    if (wide) {
        int fraction;
        if (!wide_numbers(p, end, &p, &count, &fraction)) return NULL;
        if (fraction) all_int = 0;
    }
#endif
    for (;;) {
        int is_int;
        Py_ssize_t int_digits;
        p = skip_ws(p, end);
        p = number(p, end, &is_int, &int_digits);
        if (p == NULL) return NULL;
        all_int &= is_int && int_digits <= MAX_INT_DIGITS;
        count++;
        if (p < end && *p == ',') { p++; continue; }  /* the common case: no space */
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == ',') { p++; continue; }
        if (*p == ']') break;
        return NULL;
    }
    p++;
    Span *span = (Span *)span_type->tp_alloc(span_type, 0);
    if (span == NULL) return NULL;
    Py_INCREF(data);
    span->data = data;
    span->start = *pp - base;
    span->end = p - base;
    span->length = count;
    span->int64 = all_int;
    span->values = NULL;
    *pp = p;
    return (PyObject *)span;
}

typedef struct {
    PyObject *container;
    PyObject *key;  /* an object's key whose value is being read */
} Level;

/* The JSON value that starts at *pp (after any whitespace), read as scan() reads a document; *pp moves
 * past it. NULL where unsure, with no exception set but a MemoryError. */
static PyObject *read_value(const unsigned char **pp, const unsigned char *base, const unsigned char *end,
                            PyObject *data, PyTypeObject *span_type) {
    const unsigned char *p = *pp;
    Level stack[MAX_DEPTH];
    int depth = 0;
    PyObject *value = NULL;

    for (;;) {
        /* a value starts here */
        p = skip_ws(p, end);
        if (p >= end) goto unsure;
        switch (*p) {
            case '{':
                if (depth == MAX_DEPTH) goto unsure;
                p = skip_ws(p + 1, end);
                if (p < end && *p == '}') {
                    p++;
                    if ((value = PyDict_New()) == NULL) goto unsure;
                    break;
                }
                if (p >= end || *p != '"') goto unsure;
                {
                    PyObject *key = string(&p, end);
                    if (key == NULL) goto unsure;
                    PyObject *dict = PyDict_New();
                    if (dict == NULL) { Py_DECREF(key); goto unsure; }
                    stack[depth].container = dict;
                    stack[depth].key = key;
                    depth++;
                }
                p = skip_ws(p, end);
                if (p >= end || *p != ':') goto unsure;
                p++;
                continue;
            case '[':
                if (depth == MAX_DEPTH) goto unsure;
                {
                    const unsigned char *q = skip_ws(p + 1, end);
                    if (q < end && *q == ']') {
                        p = q + 1;
                        if ((value = PyList_New(0)) == NULL) goto unsure;
                        break;
                    }
                    if (q < end && (*q == '-' || is_digit(*q))) {
                        if ((value = numbers(&p, base, end, data, span_type)) == NULL) goto unsure;
                        break;
                    }
                    PyObject *list = PyList_New(0);
                    if (list == NULL) goto unsure;
                    stack[depth].container = list;
                    stack[depth].key = NULL;
                    depth++;
                    p = q;
                }
                continue;
            case '"':
                if ((value = string(&p, end)) == NULL) goto unsure;
                break;
            case 't':
                if (end - p < 4 || memcmp(p, "true", 4)) goto unsure;
                p += 4;
                value = Py_NewRef(Py_True);
                break;
            case 'f':
                if (end - p < 5 || memcmp(p, "false", 5)) goto unsure;
                p += 5;
                value = Py_NewRef(Py_False);
                break;
            case 'n':
                if (end - p < 4 || memcmp(p, "null", 4)) goto unsure;
                p += 4;
                value = Py_NewRef(Py_None);
                break;
            default: {
                int is_int;
                Py_ssize_t int_digits;
                const unsigned char *q = number(p, end, &is_int, &int_digits);
                if (q == NULL) goto unsure;
                if ((value = scalar_number(p, q, is_int, int_digits)) == NULL) goto unsure;
                p = q;
            }
        }
        /* a value ended: it goes into its container, and containers that end with it end */
        for (;;) {
            if (depth == 0) {
                *pp = p;
                return value;
            }
            Level *top = &stack[depth - 1];
            p = skip_ws(p, end);
            if (p >= end) goto unsure;
            if (top->key == NULL) {  /* an array */
                int failed = PyList_Append(top->container, value);
                Py_CLEAR(value);
                if (failed) goto unsure;
                if (*p == ',') { p++; break; }
                if (*p != ']') goto unsure;
                p++;
            } else {  /* an object */
                Py_ssize_t before = PyDict_GET_SIZE(top->container);
                int failed = PyDict_SetItem(top->container, top->key, value);
                Py_CLEAR(value);
                Py_CLEAR(top->key);
                /* a repeated key: orjson keeps the last, as a dict does, but leave such bodies to it */
                if (failed || PyDict_GET_SIZE(top->container) == before) goto unsure;
                if (*p == ',') {
                    p = skip_ws(p + 1, end);
                    if (p >= end || *p != '"') goto unsure;
                    if ((top->key = string(&p, end)) == NULL) goto unsure;
                    p = skip_ws(p, end);
                    if (p >= end || *p != ':') goto unsure;
                    p++;
                    break;
                }
                if (*p != '}') goto unsure;
                p++;
            }
            value = top->container;  /* the container ends: it is the value now */
            top->container = NULL;
            depth--;
        }
    }

unsure:
    Py_XDECREF(value);
    while (depth > 0) {
        depth--;
        Py_XDECREF(stack[depth].container);
        Py_XDECREF(stack[depth].key);
    }
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError)) PyErr_Clear();
    return NULL;
}

static int span_type_arg(PyObject *args, PyObject **data, PyTypeObject **span_type) {
    if (!PyArg_ParseTuple(args, "SO!", data, &PyType_Type, span_type)) return 0;
    if (!PyType_IsSubtype(*span_type, &SpanType)) {
        PyErr_SetString(PyExc_TypeError, "span_type must be a subclass of Span");
        return 0;
    }
    return 1;
}

/* None where unsure, or the MemoryError raised */
static PyObject *unsure(void) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *scan(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *data;
    PyTypeObject *span_type;
    if (!span_type_arg(args, &data, &span_type)) return NULL;
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(data);
    const unsigned char *end = base + PyBytes_GET_SIZE(data);
    const unsigned char *p = base;
    PyObject *value = read_value(&p, base, end, data, span_type);
    if (value == NULL) return unsure();
    if (skip_ws(p, end) != end) {  /* trailing bytes */
        Py_DECREF(value);
        Py_RETURN_NONE;
    }
    return value;
}

/* ---- the `bytes` answer's metadata --------------------------------------------------------------
 *
 * vLLM's `bytes` answer describes its body in a header of JSON, one object of about 100 bytes per input:
 * {"data": [{"index", "embed_dtype", "endianness", "start", "end", "shape"}, ...], "usage": {...}, ...}.
 * orjson builds a dict per input (16 us for 64 inputs) only for the checks to add up end - start. Here
 * the objects of the top-level `data` after the first are checked against JSON's grammar and their
 * `start` and `end` added up, without building them. */

/* A plain string (printable ASCII, no escape: what else a key or value holds is left to another reader)
 * whose opening quote is at p: past its closing quote, or NULL. */
static inline const unsigned char *plain_string(const unsigned char *p, const unsigned char *end) {
    for (p++; p < end; p++) {
        unsigned char c = *p;
        if (c == '"') return p + 1;
        if (c < 0x20 || c > 0x7e || c == '\\') return NULL;
    }
    return NULL;
}

/* An integer of at most MAX_INT_DIGITS digits at p (JSON's form): past it, its value in *out; or NULL. */
static inline const unsigned char *small_int(const unsigned char *p, const unsigned char *end, long long *out) {
    int is_int;
    Py_ssize_t digits;
    const unsigned char *q = number(p, end, &is_int, &digits);
    if (q == NULL || !is_int || digits > MAX_INT_DIGITS) return NULL;
    long long v = 0;
    for (const unsigned char *d = (*p == '-') ? p + 1 : p; d < q; d++) v = v * 10 + (*d - '0');
    *out = (*p == '-') ? -v : v;
    return q;
}

/* One object of `data` after the first, from its '{': past its '}' with its end - start in *size; NULL
 * where unsure (not flat: a value other than a number, a plain string, a literal or an array of numbers;
 * `start` or `end` missing, repeated or not a small integer). */
static const unsigned char *flat_item(const unsigned char *p, const unsigned char *end, long long *size) {
    long long start = 0, stop = 0;
    int seen = 0;  /* 1: start, 2: end */
    p = skip_ws(p + 1, end);
    for (;;) {
        if (p >= end || *p != '"') return NULL;
        const unsigned char *key = p + 1, *q = plain_string(p, end);
        if (q == NULL) return NULL;
        Py_ssize_t key_len = q - 1 - key;
        p = skip_ws(q, end);
        if (p >= end || *p != ':') return NULL;
        p = skip_ws(p + 1, end);
        if (p >= end) return NULL;
        int which = key_len == 5 && !memcmp(key, "start", 5) ? 1 : key_len == 3 && !memcmp(key, "end", 3) ? 2 : 0;
        if (which) {
            if (seen & which) return NULL;  /* repeated: orjson keeps the last; leave it to orjson */
            seen |= which;
            p = small_int(p, end, which == 1 ? &start : &stop);
        } else if (*p == '"') {
            p = plain_string(p, end);
        } else if (*p == '[') {  /* a shape: numbers, or nothing */
            p = skip_ws(p + 1, end);
            if (p < end && *p == ']') {
                p++;
            } else {
                for (;;) {
                    int is_int;
                    Py_ssize_t digits;
                    p = number(skip_ws(p, end), end, &is_int, &digits);
                    if (p == NULL) return NULL;
                    p = skip_ws(p, end);
                    if (p < end && *p == ',') { p++; continue; }
                    if (p < end && *p == ']') { p++; break; }
                    return NULL;
                }
            }
        } else if (*p == 't' || *p == 'f' || *p == 'n') {
            const char *word = *p == 't' ? "true" : *p == 'f' ? "false" : "null";
            size_t n = strlen(word);
            if ((size_t)(end - p) < n || memcmp(p, word, n)) return NULL;
            p += n;
        } else {
            int is_int;
            Py_ssize_t digits;
            p = number(p, end, &is_int, &digits);
        }
        if (p == NULL) return NULL;
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == ',') { p = skip_ws(p + 1, end); continue; }
        if (*p != '}') return NULL;
        if (seen != 3) return NULL;
        *size = stop - start;  /* each within 10^18: no overflow */
        return p + 1;
    }
}

/* The first object's end - start, each an int of at most 18 digits (as small_int reads them). */
static int first_size(PyObject *item, long long *size) {
    PyObject *start = PyDict_GetItemString(item, "start"), *stop = PyDict_GetItemString(item, "end");
    if (start == NULL || stop == NULL || !PyLong_CheckExact(start) || !PyLong_CheckExact(stop)) return 0;
    long long a = PyLong_AsLongLong(start), b = PyLong_AsLongLong(stop);
    if (PyErr_Occurred()) { PyErr_Clear(); return 0; }
    *size = b - a;  /* scalar_number built them from at most 18 digits */
    return 1;
}

/* `data`'s array from its '[': a list of its first object alone (built), *count objects and *described
 * = the sum of end - start over them; NULL where unsure (an element that is not an object). */
static PyObject *items(const unsigned char **pp, const unsigned char *base, const unsigned char *end, PyObject *data,
                       PyTypeObject *span_type, Py_ssize_t *count, long long *described) {
    const unsigned char *p = skip_ws(*pp + 1, end);
    *count = 0;
    *described = 0;
    if (p < end && *p == ']') {
        *pp = p + 1;
        return PyList_New(0);
    }
    if (p >= end || *p != '{') return NULL;
    PyObject *first = read_value(&p, base, end, data, span_type);
    if (first == NULL) return NULL;
    long long size;
    if (!first_size(first, &size)) { Py_DECREF(first); return NULL; }
    *count = 1;
    *described = size;
    for (;;) {
        p = skip_ws(p, end);
        if (p < end && *p == ']') break;
        if (p >= end || *p != ',') { Py_DECREF(first); return NULL; }
        p = skip_ws(p + 1, end);
        if (p >= end || *p != '{' || (p = flat_item(p, end, &size)) == NULL) { Py_DECREF(first); return NULL; }
        if (__builtin_add_overflow(*described, size, described)) { Py_DECREF(first); return NULL; }
        ++*count;
    }
    *pp = p + 1;
    PyObject *list = PyList_New(1);
    if (list == NULL) { Py_DECREF(first); return NULL; }
    PyList_SET_ITEM(list, 0, first);
    return list;
}

static PyObject *offsets(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *data;
    PyTypeObject *span_type;
    if (!span_type_arg(args, &data, &span_type)) return NULL;
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(data);
    const unsigned char *end = base + PyBytes_GET_SIZE(data);
    const unsigned char *p = skip_ws(base, end);
    Py_ssize_t count = -1;
    long long described = 0;
    if (p >= end || *p != '{') Py_RETURN_NONE;
    PyObject *doc = PyDict_New(), *key = NULL, *value = NULL;
    if (doc == NULL) return NULL;
    p = skip_ws(p + 1, end);
    for (;;) {
        if (p >= end || *p != '"' || (key = string(&p, end)) == NULL) goto unsure;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') goto unsure;
        p = skip_ws(p + 1, end);
        if (p < end && *p == '[' && count < 0 && PyUnicode_CompareWithASCIIString(key, "data") == 0) {
            value = items(&p, base, end, data, span_type, &count, &described);
        } else {
            value = read_value(&p, base, end, data, span_type);
        }
        if (value == NULL) goto unsure;
        Py_ssize_t before = PyDict_GET_SIZE(doc);
        int failed = PyDict_SetItem(doc, key, value);
        Py_CLEAR(key);
        Py_CLEAR(value);
        if (failed || PyDict_GET_SIZE(doc) == before) goto unsure;  /* a repeated key: left to orjson */
        p = skip_ws(p, end);
        if (p < end && *p == ',') { p = skip_ws(p + 1, end); continue; }
        if (p < end && *p == '}') break;
        goto unsure;
    }
    if (skip_ws(p + 1, end) != end || count < 0) goto unsure;  /* trailing bytes; or no `data` array */
    return Py_BuildValue("(NnL)", doc, count, described);

unsure:
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_DECREF(doc);
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError)) PyErr_Clear();
    return unsure();
}

static PyObject *set_wide(PyObject *Py_UNUSED(module), PyObject *arg) {
    /* tests run both loops: set_wide(False) leaves the scalar one alone; returns the previous setting */
    int before = wide;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
#ifdef HAVE_WIDE
    wide = on && __builtin_cpu_supports("avx2");
#else
    (void)on;
#endif
    return PyBool_FromLong(before);
}

static PyMethodDef methods[] = {
    {"set_wide", set_wide, METH_O, "set_wide(on) -> bool: use the 64-byte loop where the CPU can (tests); the last setting."},
    {"scan", scan, METH_VARARGS,
     "scan(data: bytes, span_type) -> the document, its arrays of numbers as span_type; None where unsure."},
    {"offsets", offsets, METH_VARARGS,
     "offsets(data: bytes, span_type) -> (document, count, described): a `bytes` answer's metadata, its top-level "
     "`data` a list of its first object alone, `count` objects whose end - start add up to `described`; "
     "None where unsure."},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jsonscan", "A validating JSON pass that builds no number of an array of numbers.",
    -1, methods
};

PyMODINIT_FUNC PyInit__jsonscan(void) {
#ifdef HAVE_WIDE
    __builtin_cpu_init();
    wide = __builtin_cpu_supports("avx2");
#endif
    if (PyType_Ready(&SpanType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&SpanType);
    if (PyModule_AddObject(m, "Span", (PyObject *)&SpanType) < 0) {
        Py_DECREF(&SpanType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
