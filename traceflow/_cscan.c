/* traceflow._cscan: the compiled line scanner of the Claude Code transcript importer.
 *
 * scan() walks a transcript's lines exactly as claude_code_lines.read_lines does (the same byte
 * searches, the same windows, the same carry-over state) and handles the lines that make up
 * nearly all of a transcript's bytes:
 *
 *   - lines of record types the importer ignores;
 *   - tool-result and meta user lines (their timestamp and promptId);
 *   - ordinary assistant lines: the row claude_code_rows.fast_block would build, from a validating
 *     JSON parse that builds nothing but the fields the row needs;
 *   - user prompts and turn_duration / compact_boundary system lines: the fields of their event
 *     (claude_code_rows.line_event makes the row), read with byte searches equivalent to the
 *     importer's regular expressions, and timestamps in Claude Code's own form.
 *
 * At any other line (an API error, anything unusual, anything this parser is not sure orjson or
 * the regular expressions would read the same way) it stops and returns that line's
 * position; the Python code handles that one line and calls scan() again. So the compiled and
 * the pure-Python importer give the same rows by construction wherever scan() declines, and
 * tests/test_cscan.py checks they agree wherever it does not.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

typedef const unsigned char *ptr;

/* ---- byte searches, as bytes.find(needle, start, end) >= 0 ---------------------------------- */

static ptr find(ptr hay, ptr end, const char *needle, Py_ssize_t n)
{
    if (n == 0)
        return hay;
    if (end - hay < n)
        return NULL;
    return (ptr)memmem(hay, (size_t)(end - hay), needle, (size_t)n);
}

/* ---- a validating JSON reader that keeps only what the row needs ----------------------------- */

enum { K_ABSENT = 0, K_NULL, K_TRUE, K_FALSE, K_STR, K_INT, K_FLOAT, K_OBJ, K_OTHER };

typedef struct {
    int kind;
    ptr s;             /* K_STR: the raw bytes between the quotes; K_FLOAT: the number's text */
    Py_ssize_t n;
    int escaped;       /* K_STR: holds a backslash escape */
    long long i;       /* K_INT */
} Val;

typedef struct {
    ptr p, end;
    int bad; /* 1: not sure (let Python decide) */
} Cur;

#define MAX_DEPTH 256

static inline void ws(Cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static inline int hexval(unsigned char h)
{
    if (h >= '0' && h <= '9')
        return h - '0';
    if (h >= 'a' && h <= 'f')
        return h - 'a' + 10;
    if (h >= 'A' && h <= 'F')
        return h - 'A' + 10;
    return -1;
}

/* One UTF-8 sequence starting at p (p[0] >= 0x80); its length, or 0 when invalid. */
static inline int utf8_len(ptr p, ptr end)
{
    unsigned char b = p[0];
    if (b >= 0xC2 && b <= 0xDF) {
        if (end - p < 2 || (p[1] & 0xC0) != 0x80)
            return 0;
        return 2;
    }
    if (b >= 0xE0 && b <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
            return 0;
        if (b == 0xE0 && p[1] < 0xA0)
            return 0; /* overlong */
        if (b == 0xED && p[1] >= 0xA0)
            return 0; /* a surrogate */
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
            return 0;
        if (b == 0xF0 && p[1] < 0x90)
            return 0;
        if (b == 0xF4 && p[1] >= 0x90)
            return 0;
        return 4;
    }
    return 0;
}

/* A string; c->p at its opening quote. Validates escapes, control characters and UTF-8. */
static void string(Cur *c, Val *v)
{
    ptr p = c->p + 1, end = c->end;
    int escaped = 0;
    ptr s = p;
    for (;;) {
#ifdef __SSE2__
        while (end - p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)p);
            __m128i special = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                /* bytes < 0x20 or >= 0x80: (x as signed) < 0x20 */
                _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)));
            int mask = _mm_movemask_epi8(special);
            if (mask) {
                p += __builtin_ctz((unsigned)mask);
                break;
            }
            p += 16;
        }
#endif
        if (p >= end) {
            c->bad = 1;
            return;
        }
        unsigned char b = *p;
        if (b == '"')
            break;
        if (b == '\\') {
            escaped = 1;
            if (end - p < 2) {
                c->bad = 1;
                return;
            }
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6) {
                    c->bad = 1;
                    return;
                }
                int h0 = hexval(p[2]), h1 = hexval(p[3]), h2 = hexval(p[4]), h3 = hexval(p[5]);
                if ((h0 | h1 | h2 | h3) < 0) {
                    c->bad = 1;
                    return;
                }
                int u = (h0 << 12) | (h1 << 8) | (h2 << 4) | h3;
                if (u >= 0xD800 && u <= 0xDFFF) {
                    c->bad = 1; /* surrogates: orjson's rules decide */
                    return;
                }
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                p += 2;
            } else {
                c->bad = 1;
                return;
            }
            continue;
        }
        if (b < 0x20) {
            c->bad = 1;
            return;
        }
        if (b >= 0x80) {
            int n = utf8_len(p, end);
            if (!n) {
                c->bad = 1;
                return;
            }
            p += n;
            continue;
        }
        p++;
    }
    if (v) {
        v->kind = K_STR;
        v->s = s;
        v->n = p - s;
        v->escaped = escaped;
    }
    c->p = p + 1;
}

/* A number: JSON's grammar; ints of up to 18 digits keep their value, longer ones and floats
 * with large exponents are left to Python. */
static void number(Cur *c, Val *v)
{
    ptr p = c->p, end = c->end, s = p;
    int neg = 0, isfloat = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) {
        c->bad = 1;
        return;
    }
    ptr digits = p;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        c->bad = 1;
        return;
    }
    Py_ssize_t ndigits = p - digits;
    if (p < end && *p == '.') {
        isfloat = 1;
        p++;
        ptr f = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p == f) {
            c->bad = 1;
            return;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        isfloat = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        ptr f = p;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        if (p == f || p - f > 2) { /* no digits, or an exponent orjson may not map to a double */
            c->bad = 1;
            return;
        }
    }
    if (p - s > 40) {
        c->bad = 1;
        return;
    }
    if (!isfloat && ndigits > 18) {
        c->bad = 1;
        return;
    }
    if (v) {
        if (isfloat) {
            v->kind = K_FLOAT;
            v->s = s;
            v->n = p - s;
        } else {
            long long x = 0;
            for (ptr d = digits; d < digits + ndigits; d++)
                x = x * 10 + (*d - '0');
            v->kind = K_INT;
            v->i = neg ? -x : x;
        }
    }
    c->p = p;
}

static void skip_value(Cur *c, int depth);

static int literal(Cur *c, const char *word, Py_ssize_t n)
{
    if (c->end - c->p < n || memcmp(c->p, word, (size_t)n) != 0) {
        c->bad = 1;
        return 0;
    }
    c->p += n;
    return 1;
}

/* A value we only keep the kind (and scalar) of; objects and arrays are validated and skipped. */
static void value(Cur *c, Val *v, int depth)
{
    ws(c);
    if (c->p >= c->end) {
        c->bad = 1;
        return;
    }
    switch (*c->p) {
    case '"':
        string(c, v);
        return;
    case '{':
    case '[':
        skip_value(c, depth);
        if (v)
            v->kind = *(c->p - 1) == '}' ? K_OBJ : K_OTHER;
        return;
    case 't':
        if (literal(c, "true", 4) && v)
            v->kind = K_TRUE;
        return;
    case 'f':
        if (literal(c, "false", 5) && v)
            v->kind = K_FALSE;
        return;
    case 'n':
        if (literal(c, "null", 4) && v)
            v->kind = K_NULL;
        return;
    default:
        number(c, v);
        return;
    }
}

/* After a member or element: 1 at a ',' (another follows), 0 at `close` (the end), -1 otherwise. */
static int after_item(Cur *c, unsigned char close)
{
    ws(c);
    if (c->p < c->end && (*c->p == ',' || *c->p == close)) {
        return *c->p++ == ',';
    }
    c->bad = 1;
    return -1;
}

/* A member's key and its ':'; 0, or -1 (bad). */
static int member_key(Cur *c, Val *key)
{
    ws(c);
    if (c->p >= c->end || *c->p != '"') {
        c->bad = 1;
        return -1;
    }
    string(c, key);
    if (c->bad)
        return -1;
    ws(c);
    if (c->p >= c->end || *c->p != ':') {
        c->bad = 1;
        return -1;
    }
    c->p++;
    return 0;
}

/* Opening an object or array at c->p: 1 when it has items, 0 when it is empty (and consumed). */
static int open_items(Cur *c, unsigned char close, int depth)
{
    if (depth >= MAX_DEPTH) {
        c->bad = 1;
        return 0;
    }
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    return 1;
}

typedef struct Spec Spec;
static void object(Cur *c, Spec *spec, int depth);
static Spec NO_NAMES;

static void skip_value(Cur *c, int depth)
{
    ws(c);
    if (c->p >= c->end) {
        c->bad = 1;
        return;
    }
    if (*c->p == '{') {
        object(c, &NO_NAMES, depth);
        return;
    }
    if (*c->p != '[') {
        value(c, NULL, depth);
        return;
    }
    if (!open_items(c, ']', depth))
        return;
    do
        skip_value(c, depth + 1);
    while (!c->bad && after_item(c, ']') == 1);
}

/* An object whose keys named in `names` are read into `vals` (and, where `subs[i]` is set and the
 * value is an object, read by that function). Another key is skipped; a duplicate of a named one,
 * or a key written with escapes, makes the line Python's. */
struct Spec {
    int count;
    const char *const *names;
    Val *vals;
    Spec *const *subs; /* may be NULL */
};
static Spec NO_NAMES = {0, NULL, NULL, NULL};

static void object(Cur *c, Spec *spec, int depth)
{
    /* c->p at '{' */
    if (!open_items(c, '}', depth))
        return;
    do {
        Val key = {0};
        if (member_key(c, &key) < 0)
            return;
        int which = -1;
        if (key.escaped && spec->count) {
            c->bad = 1; /* a key written with escapes may spell a named one */
            return;
        }
        for (int i = 0; i < spec->count; i++) {
            const char *name = spec->names[i];
            if ((Py_ssize_t)strlen(name) == key.n && memcmp(name, key.s, (size_t)key.n) == 0) {
                which = i;
                break;
            }
        }
        if (which < 0) {
            skip_value(c, depth + 1);
            continue;
        }
        Val *v = &spec->vals[which];
        if (v->kind != K_ABSENT) {
            c->bad = 1; /* a duplicate key: which copy wins is the JSON parser's rule */
            return;
        }
        ws(c);
        if (spec->subs && spec->subs[which] && c->p < c->end && *c->p == '{') {
            object(c, spec->subs[which], depth + 1);
            v->kind = K_OBJ;
        } else {
            value(c, v, depth + 1);
            if (!c->bad && v->kind == K_ABSENT)
                v->kind = K_OTHER;
        }
    } while (!c->bad && after_item(c, '}') == 1);
}

/* ---- the assistant record ------------------------------------------------------------------ */

enum { T_TYPE, T_MESSAGE, T_TIMESTAMP, T_APIERR, T_COST, T_SESSION, T_AGENT, T_SIDECHAIN, T_REQUEST,
       T_VERSION, T_CWD, T_BRANCH, T_UUID, T_N };
static const char *const TOP_NAMES[] = {"type", "message", "timestamp", "isApiErrorMessage", "costUSD",
                                        "sessionId", "agentId", "isSidechain", "requestId", "version",
                                        "cwd", "gitBranch", "uuid"};
enum { M_USAGE, M_MODEL, M_ID, M_STOP, M_N };
static const char *const MSG_NAMES[] = {"usage", "model", "id", "stop_reason"};
enum { U_INPUT, U_READ, U_CREATION, U_OUTPUT, U_BREAKDOWN, U_DETAILS, U_SPEED, U_TIER, U_N };
static const char *const USAGE_NAMES[] = {"input_tokens", "cache_read_input_tokens",
                                          "cache_creation_input_tokens", "output_tokens", "cache_creation",
                                          "output_tokens_details", "speed", "service_tier"};
enum { B_5M, B_1H, B_N };
static const char *const BREAKDOWN_NAMES[] = {"ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"};
enum { D_THINKING, D_N };
static const char *const DETAILS_NAMES[] = {"thinking_tokens"};

typedef struct {
    Val top[T_N], msg[M_N], usage[U_N], breakdown[B_N], details[D_N];
} Record;

/* Parse a whole line as one JSON value; 0 when it is an object read into r, -1 when Python must. */
static int read_record(ptr start, ptr end, Record *r)
{
    memset(r, 0, sizeof *r);
    Spec breakdown = {B_N, BREAKDOWN_NAMES, r->breakdown, NULL};
    Spec details = {D_N, DETAILS_NAMES, r->details, NULL};
    Spec *usage_subs[U_N] = {NULL, NULL, NULL, NULL, &breakdown, &details, NULL, NULL};
    Spec usage = {U_N, USAGE_NAMES, r->usage, usage_subs};
    Spec *msg_subs[M_N] = {&usage, NULL, NULL, NULL};
    Spec msg = {M_N, MSG_NAMES, r->msg, msg_subs};
    Spec *top_subs[T_N] = {NULL, &msg};
    Spec top = {T_N, TOP_NAMES, r->top, top_subs};
    Cur c = {start, end, 0};
    ws(&c);
    if (c.p >= c.end || *c.p != '{')
        return -1;
    object(&c, &top, 0);
    if (c.bad)
        return -1;
    ws(&c);
    return c.p == c.end ? 0 : -1;
}

/* ---- building the row ----------------------------------------------------------------------- */

/* The Python value of a JSON string (escapes decoded), or NULL with an error set. */
static PyObject *str_of(const Val *v)
{
    if (!v->escaped)
        return PyUnicode_DecodeUTF8((const char *)v->s, v->n, "strict");
    /* decode the escapes (no surrogates: string() declined them) into UTF-8 */
    char *buf = PyMem_Malloc((size_t)v->n + 1);
    if (!buf)
        return PyErr_NoMemory();
    Py_ssize_t o = 0;
    for (ptr p = v->s, end = v->s + v->n; p < end;) {
        if (*p != '\\') {
            buf[o++] = (char)*p++;
            continue;
        }
        unsigned char e = p[1];
        p += 2;
        switch (e) {
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'n': buf[o++] = '\n'; break;
        case 'r': buf[o++] = '\r'; break;
        case 't': buf[o++] = '\t'; break;
        case 'u': {
            int u = (hexval(p[0]) << 12) | (hexval(p[1]) << 8) | (hexval(p[2]) << 4) | hexval(p[3]);
            p += 4;
            if (u < 0x80) {
                buf[o++] = (char)u;
            } else if (u < 0x800) {
                buf[o++] = (char)(0xC0 | (u >> 6));
                buf[o++] = (char)(0x80 | (u & 0x3F));
            } else {
                buf[o++] = (char)(0xE0 | (u >> 12));
                buf[o++] = (char)(0x80 | ((u >> 6) & 0x3F));
                buf[o++] = (char)(0x80 | (u & 0x3F));
            }
            break;
        }
        default: buf[o++] = (char)e; /* " \ / */
        }
    }
    PyObject *s = PyUnicode_DecodeUTF8(buf, o, "strict");
    PyMem_Free(buf);
    return s;
}

/* A nullable column: None (null or absent), else a str (want K_STR) or an int (want K_INT);
 * -1 for a value of another type (Python's line), -2 on a Python error. */
static int nullable(const Val *v, int want, PyObject **out)
{
    if (v->kind == K_ABSENT || v->kind == K_NULL) {
        *out = Py_NewRef(Py_None);
        return 0;
    }
    if (v->kind != want)
        return -1;
    *out = want == K_STR ? str_of(v) : PyLong_FromLongLong(v->i);
    return *out ? 0 : -2;
}

static int text(const Val *v, PyObject **out) { return nullable(v, K_STR, out); }

/* Python's truthiness of true / false / null / absent; -1 for another value. */
static int flag(const Val *v)
{
    if (v->kind == K_TRUE)
        return 1;
    if (v->kind == K_FALSE || v->kind == K_NULL || v->kind == K_ABSENT)
        return 0;
    return -1;
}

static int is_nonempty_str(const Val *v) { return v->kind == K_STR && v->n > 0; }

/* The carried state of the line walk (claude_code_lines.read_lines' locals and ctx.state). */
typedef struct {
    PyObject *session_id, *prompt_id, *last_user_ts; /* owned; str or None */
    int prev_was_user;
} State;

/* Values repeated on most lines (model, version, cwd, ...): reuse the last str when the bytes match. */
typedef struct {
    PyObject *obj;
    char *bytes;
    Py_ssize_t n;
} Memo;

enum { MEMO_VERSION, MEMO_MODEL, MEMO_CWD, MEMO_BRANCH, MEMO_SPEED, MEMO_TIER, MEMO_STOP, MEMO_SESSION,
       MEMO_AGENT, MEMO_N };

static int memo_text(Memo *m, const Val *v, PyObject **out)
{
    if (v->kind == K_STR && !v->escaped && m->obj && m->n == v->n && memcmp(m->bytes, v->s, (size_t)v->n) == 0) {
        *out = Py_NewRef(m->obj);
        return 0;
    }
    int rc = text(v, out);
    if (rc == 0 && v->kind == K_STR && !v->escaped) {
        char *copy = PyMem_Realloc(m->bytes, (size_t)v->n + 1);
        if (copy) {
            memcpy(copy, v->s, (size_t)v->n);
            m->bytes = copy;
            m->n = v->n;
            Py_XSETREF(m->obj, Py_NewRef(*out));
        }
    }
    return rc;
}

static void memo_clear(Memo *memo)
{
    for (int i = 0; i < MEMO_N; i++) {
        Py_CLEAR(memo[i].obj);
        PyMem_Free(memo[i].bytes);
        memo[i].bytes = NULL;
    }
}

/* The row of an ordinary assistant record (claude_code_rows.fast_block's tuple), appended to acc.
 * 0: appended; -1: not ordinary (Python's line); -2: a Python error. */
static int assistant_row(const Record *r, long long no, PyObject *file_agent, State *st, Memo *memo,
                         PyObject *acc)
{
    const Val *msg = r->msg, *u = r->usage, *top = r->top;
    if (top[T_MESSAGE].kind != K_OBJ || msg[M_USAGE].kind != K_OBJ || top[T_TIMESTAMP].kind != K_STR)
        return -1;
    const Val *model = &msg[M_MODEL];
    if (model->kind == K_STR && model->escaped)
        return -1;
    if (model->kind == K_STR && model->n == 11 && memcmp(model->s, "<synthetic>", 11) == 0)
        return -1;
    if (flag(&top[T_APIERR]) != 0)
        return -1;
    int sidechain = flag(&top[T_SIDECHAIN]);
    if (sidechain < 0)
        return -1;
    const Val *cost = &top[T_COST];
    if (!(cost->kind == K_ABSENT || cost->kind == K_NULL || cost->kind == K_FLOAT))
        return -1;
    /* token counts: ints or nothing; a breakdown / details that is not an object counts as absent */
    int has_breakdown = u[U_BREAKDOWN].kind == K_OBJ;
    const Val *counts[] = {&u[U_INPUT], &u[U_READ], &u[U_CREATION], &u[U_OUTPUT], &r->breakdown[B_5M],
                           &r->breakdown[B_1H], &r->details[D_THINKING]};
    for (int i = 0; i < 7; i++) {
        if (i >= 4 && i <= 5 && !has_breakdown)
            continue;
        if (i == 6 && u[U_DETAILS].kind != K_OBJ)
            continue;
        if (!(counts[i]->kind == K_ABSENT || counts[i]->kind == K_NULL || counts[i]->kind == K_INT))
            return -1;
    }
    /* session and parent, as claude_code_rows._ids */
    const Val *sid = &top[T_SESSION], *agent = &top[T_AGENT];
    if (!(sid->kind == K_ABSENT || sid->kind == K_NULL || sid->kind == K_STR))
        return -1;
    if (!(agent->kind == K_ABSENT || agent->kind == K_NULL || agent->kind == K_STR))
        return -1;
    if (st->session_id != Py_None && !PyUnicode_CheckExact(st->session_id))
        return -1;
    if (st->prompt_id != Py_None && !PyUnicode_CheckExact(st->prompt_id))
        return -1;
    if (st->last_user_ts != Py_None && !PyUnicode_CheckExact(st->last_user_ts))
        return -1;
    /* every other text column must be text or nothing */
    const Val *texts[] = {&top[T_REQUEST], &msg[M_ID], &top[T_VERSION], model, &top[T_CWD], &top[T_BRANCH],
                          &top[T_UUID], &u[U_SPEED], &u[U_TIER], &msg[M_STOP]};
    for (int i = 0; i < 10; i++)
        if (!(texts[i]->kind == K_ABSENT || texts[i]->kind == K_NULL || texts[i]->kind == K_STR))
            return -1;

    PyObject *f[25] = {NULL};
    int rc = -1;
#define TAKE(i, expr)                                                                                         \
    do {                                                                                                      \
        int _r = (expr);                                                                                      \
        if (_r) {                                                                                             \
            rc = _r == -1 ? -1 : -2;                                                                           \
            goto fail;                                                                                        \
        }                                                                                                     \
    } while (0)
    f[0] = PyLong_FromLongLong(no);
    if (!f[0]) {
        rc = -2;
        goto fail;
    }
    TAKE(1, text(&top[T_REQUEST], &f[1]));
    TAKE(2, text(&msg[M_ID], &f[2]));
    TAKE(3, text(&top[T_TIMESTAMP], &f[3]));
    f[4] = Py_NewRef(st->prev_was_user ? st->last_user_ts : Py_None);
    PyObject *own = NULL, *agent_obj = NULL;
    if (is_nonempty_str(sid)) {
        TAKE(5, memo_text(&memo[MEMO_SESSION], sid, &own));
        if (PyUnicode_GET_LENGTH(own) == 0) { /* cannot happen: n > 0 bytes decode to a non-empty str */
            Py_DECREF(own);
            own = NULL;
            rc = -1;
            goto fail;
        }
    } else {
        own = Py_NewRef(st->session_id);
    }
    if (memo_text(&memo[MEMO_AGENT], agent, &agent_obj)) {
        Py_DECREF(own);
        rc = PyErr_Occurred() ? -2 : -1;
        goto fail;
    }
    f[20] = agent_obj;
    PyObject *agent_id = is_nonempty_str(agent) ? agent_obj : file_agent;
    int file_agent_true = file_agent != Py_None && PyObject_IsTrue(file_agent);
    if (agent_id != Py_None && PyObject_IsTrue(agent_id) && (sidechain || file_agent_true)) {
        f[5] = PyUnicode_FromFormat("agent-%U", agent_id);
        if (!f[5]) {
            Py_DECREF(own);
            rc = -2;
            goto fail;
        }
        f[6] = own; /* the parent */
    } else {
        f[5] = own;
        f[6] = Py_NewRef(Py_None);
    }
    f[7] = Py_NewRef(st->prompt_id);
    TAKE(8, memo_text(&memo[MEMO_VERSION], &top[T_VERSION], &f[8]));
    TAKE(9, memo_text(&memo[MEMO_MODEL], model, &f[9]));
    /* cold, read, creation, (5m, 1h), output: `x or 0` */
    const int cols[] = {10, 11, 12, 15};
    const Val *cv[] = {&u[U_INPUT], &u[U_READ], &u[U_CREATION], &u[U_OUTPUT]};
    for (int i = 0; i < 4; i++) {
        f[cols[i]] = PyLong_FromLongLong(cv[i]->kind == K_INT ? cv[i]->i : 0);
        if (!f[cols[i]]) {
            rc = -2;
            goto fail;
        }
    }
    if (has_breakdown) {
        const Val *b5 = &r->breakdown[B_5M], *b1 = &r->breakdown[B_1H];
        f[13] = PyLong_FromLongLong(b5->kind == K_INT ? b5->i : 0);
        f[14] = PyLong_FromLongLong(b1->kind == K_INT ? b1->i : 0);
        if (!f[13] || !f[14]) {
            rc = -2;
            goto fail;
        }
    } else {
        f[13] = Py_NewRef(Py_None);
        f[14] = Py_NewRef(Py_None);
    }
    if (u[U_DETAILS].kind == K_OBJ)
        TAKE(16, nullable(&r->details[D_THINKING], K_INT, &f[16]));
    else
        f[16] = Py_NewRef(Py_None);
    if (cost->kind == K_FLOAT) {
        char num[48];
        memcpy(num, cost->s, (size_t)cost->n);
        num[cost->n] = 0;
        double d = PyOS_string_to_double(num, NULL, NULL);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            rc = -1;
            goto fail;
        }
        f[17] = PyFloat_FromDouble(d);
        if (!f[17]) {
            rc = -2;
            goto fail;
        }
    } else {
        f[17] = Py_NewRef(Py_None);
    }
    TAKE(18, memo_text(&memo[MEMO_CWD], &top[T_CWD], &f[18]));
    TAKE(19, memo_text(&memo[MEMO_BRANCH], &top[T_BRANCH], &f[19]));
    TAKE(21, text(&top[T_UUID], &f[21]));
    TAKE(22, memo_text(&memo[MEMO_SPEED], &u[U_SPEED], &f[22]));
    TAKE(23, memo_text(&memo[MEMO_TIER], &u[U_TIER], &f[23]));
    TAKE(24, memo_text(&memo[MEMO_STOP], &msg[M_STOP], &f[24]));
#undef TAKE
    PyObject *row = PyTuple_New(25);
    if (!row) {
        rc = -2;
        goto fail;
    }
    for (int i = 0; i < 25; i++)
        PyTuple_SET_ITEM(row, i, f[i]);
    int err = PyList_Append(acc, row);
    Py_DECREF(row);
    if (err)
        return -2;
    /* `if own_session: st["session_id"] = own_session` */
    if (is_nonempty_str(sid)) {
        PyObject *own_now = f[6] != Py_None ? f[6] : f[5];
        Py_SETREF(st->session_id, Py_NewRef(own_now));
    }
    st->prev_was_user = 0;
    return 0;
fail:
    for (int i = 0; i < 25; i++)
        Py_XDECREF(f[i]);
    if (rc == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            PyErr_Clear(); /* Python's line: it reports the bad bytes its own way */
        else
            rc = -2;
    }
    return rc;
}


/* ---- the importer's regular expressions, as byte searches ----------------------------------- */

/* rb'"key"\s*:\s*' followed by: RE_QUOTED '"([^"]+)"', RE_LOWER '"([a-z]+)"', RE_NUMBER '([0-9.]+)',
 * RE_DIGITS '([0-9]+)' or RE_TRUE 'true'. The leftmost match, as re.search finds it; its group in
 * (*gs, *gn). `key` includes its quotes. */
enum { RE_QUOTED, RE_LOWER, RE_NUMBER, RE_DIGITS, RE_TRUE };

static inline int re_space(unsigned char b)
{
    return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v';
}

static int re_search(ptr start, ptr end, const char *key, int mode, ptr *gs, Py_ssize_t *gn)
{
    Py_ssize_t kn = (Py_ssize_t)strlen(key);
    for (ptr at = find(start, end, key, kn); at; at = find(at + 1, end, key, kn)) {
        ptr p = at + kn;
        while (p < end && re_space(*p))
            p++;
        if (p >= end || *p != ':')
            continue;
        p++;
        while (p < end && re_space(*p))
            p++;
        if (mode == RE_TRUE) {
            if (end - p >= 4 && memcmp(p, "true", 4) == 0)
                return 1;
            continue;
        }
        if (mode == RE_QUOTED || mode == RE_LOWER) {
            if (p >= end || *p != '"')
                continue;
            p++;
            ptr g = p;
            if (mode == RE_QUOTED) {
                ptr q = memchr(p, '"', (size_t)(end - p));
                if (!q || q == g)
                    continue;
                *gs = g;
                *gn = q - g;
                return 1;
            }
            while (p < end && *p >= 'a' && *p <= 'z')
                p++;
            if (p == g || p >= end || *p != '"')
                continue;
            *gs = g;
            *gn = p - g;
            return 1;
        }
        ptr g = p;
        while (p < end && ((*p >= '0' && *p <= '9') || (mode == RE_NUMBER && *p == '.')))
            p++;
        if (p == g)
            continue;
        *gs = g;
        *gn = p - g;
        return 1;
    }
    return 0;
}

/* The decoded group of re_search, Py_None when there is no match; NULL (error cleared) when the
 * bytes are not UTF-8, where Python's .decode() would raise. */
static PyObject *re_text(ptr start, ptr end, const char *key, int mode)
{
    ptr g;
    Py_ssize_t n;
    if (!re_search(start, end, key, mode, &g, &n))
        return Py_NewRef(Py_None);
    PyObject *s = PyUnicode_DecodeUTF8((const char *)g, n, "strict");
    if (!s)
        PyErr_Clear();
    return s;
}

/* Microseconds since the epoch of a timestamp written as Claude Code writes them,
 * YYYY-MM-DDTHH:MM:SS[.fff|.ffffff]Z, with every field in range (what datetime.fromisoformat accepts);
 * 0 and *ok = 0 for any other text (Python's iso_micros decides). */
static long long days_from_civil(long long y, unsigned m, unsigned d)
{
    y -= m <= 2;
    const long long era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = (unsigned)(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

static int digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 1;
}

static long long canonical_micros(PyObject *text, int *ok)
{
    *ok = 0;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    if (!s) {
        PyErr_Clear();
        return 0;
    }
    int y, mo, d, h, mi, se, frac = 0;
    if (!(n == 20 || n == 24 || n == 27) || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
        s[16] != ':' || s[n - 1] != 'Z')
        return 0;
    if (!digits(s, 4, &y) || !digits(s + 5, 2, &mo) || !digits(s + 8, 2, &d) || !digits(s + 11, 2, &h) ||
        !digits(s + 14, 2, &mi) || !digits(s + 17, 2, &se))
        return 0;
    if (n > 20) {
        if (s[19] != '.' || !digits(s + 20, (int)n - 21, &frac))
            return 0;
        if (n == 24)
            frac *= 1000;
    }
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || se > 59)
        return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > mdays[mo - 1] + (mo == 2 && leap))
        return 0;
    *ok = 1;
    long long days = days_from_civil(y, (unsigned)mo, (unsigned)d);
    return ((days * 86400 + h * 3600 + mi * 60 + se) * 1000000LL) + frac;
}

/* Python's float() of a [0-9.]+ match: digits with at most one point, and at least one digit. */
static int float_text(PyObject *t)
{
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(t, &n);
    int points = 0, nd = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] == '.')
            points++;
        else
            nd++;
    }
    return points <= 1 && nd > 0;
}

/* claude_code_rows._line_session without its side effect: the session and parent of an event line,
 * and the session to remember (or NULL). -1 when Python must decide. All references are new. */
static int line_session(ptr start, ptr end, PyObject *file_agent, PyObject *st_session, PyObject **session,
                        PyObject **parent, PyObject **remember)
{
    PyObject *found = re_text(start, end, "\"sessionId\"", RE_QUOTED);
    if (!found)
        return -1;
    PyObject *agent = re_text(start, end, "\"agentId\"", RE_QUOTED);
    if (!agent) {
        Py_DECREF(found);
        return -1;
    }
    PyObject *own = found != Py_None ? found : st_session; /* [^"]+ is never empty */
    *remember = found != Py_None ? Py_NewRef(found) : NULL;
    PyObject *agent_id = agent != Py_None ? agent : file_agent;
    int file_agent_true = file_agent != Py_None && PyObject_IsTrue(file_agent);
    if (agent_id != Py_None && PyObject_IsTrue(agent_id) &&
        (file_agent_true || re_search(start, end, "\"isSidechain\"", RE_TRUE, &(ptr){0}, &(Py_ssize_t){0}))) {
        *session = PyUnicode_FromFormat("agent-%U", agent_id);
        *parent = Py_NewRef(own);
    } else {
        *session = Py_NewRef(own);
        *parent = Py_NewRef(Py_None);
    }
    Py_DECREF(found);
    Py_DECREF(agent);
    if (!*session) {
        PyErr_Clear();
        Py_DECREF(*parent);
        Py_XDECREF(*remember);
        return -1;
    }
    return 0;
}

/* ---- the line walk --------------------------------------------------------------------------- */

typedef struct {
    Py_buffer user, system, type, timestamp, prompt_id, is_meta, uuid, subtype;
    PyObject *skip_types; /* tuple of bytes */
} Keys;

#define WINDOW 1024

static void keys_release(Keys *k)
{
    Py_buffer *all[] = {&k->user, &k->system, &k->type, &k->timestamp, &k->prompt_id, &k->is_meta, &k->uuid,
                        &k->subtype};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]->obj)
            PyBuffer_Release(all[i]);
}

/* claude_code_lines.Keys.skip: a "type": key, one byte, an ignored type, its closing quote, within
 * the window. */
static int skippable(ptr start, ptr win, const Keys *k)
{
    const char *tk = k->type.buf;
    Py_ssize_t tn = k->type.len;
    ptr at = find(start, win, tk, tn);
    Py_ssize_t nskip = PyTuple_GET_SIZE(k->skip_types);
    while (at) {
        ptr name = at + tn + 1;
        for (Py_ssize_t i = 0; i < nskip; i++) {
            PyObject *t = PyTuple_GET_ITEM(k->skip_types, i);
            Py_ssize_t n = PyBytes_GET_SIZE(t);
            if (name + n + 1 <= win && memcmp(name, PyBytes_AS_STRING(t), (size_t)n) == 0 && name[n] == '"')
                return 1;
        }
        at = find(at + 1, win, tk, tn);
    }
    return 0;
}

/* _field: the bytes after `key` up to the next quote, decoded; NULL + no error when absent,
 * NULL + error when they are not UTF-8. */
static PyObject *field(ptr start, ptr end, const Py_buffer *key, int *found)
{
    ptr at = find(start, end, key->buf, key->len);
    *found = 0;
    if (!at)
        return NULL;
    at += key->len;
    ptr q = at < end ? memchr(at, '"', (size_t)(end - at)) : NULL;
    if (!q)
        return NULL; /* `j > 0` fails: None */
    *found = 1;
    return PyUnicode_DecodeUTF8((const char *)at, q - at, "strict");
}


/* An event as scan() reports it: (kind, line, micros or None, session, parent, prompt_id, version,
 * a, b, prompt key), the arguments of claude_code_rows.line_event after its path; kind 0
 * user_prompt (a: uuid), 1 turn_duration (a: durationMs text), 2 compaction (a: preTokens text,
 * b: trigger). */
static int add_event(PyObject *events, int kind, long long no, PyObject *ts, PyObject *session, PyObject *parent,
                     PyObject *prompt_id, PyObject *version, PyObject *a, PyObject *b, PyObject *key)
{
    PyObject *t = Py_BuildValue("(iLOOOOOOOO)", kind, no, ts, session, parent, prompt_id, version, a, b, key);
    if (!t)
        return -2;
    int err = PyList_Append(events, t);
    Py_DECREF(t);
    return err ? -2 : 0;
}

/* The micros of a timestamp text (or None for None / ""), or NULL when Python must decide. */
static PyObject *event_time(PyObject *ts_s)
{
    if (ts_s == Py_None || PyUnicode_GET_LENGTH(ts_s) == 0)
        return Py_NewRef(Py_None);
    int ok;
    long long us = canonical_micros(ts_s, &ok);
    return ok ? PyLong_FromLongLong(us) : NULL;
}

static int text_or_none(PyObject *o) { return o == Py_None || PyUnicode_CheckExact(o); }

/* A user prompt line (the Python loop's prompt branch and _user_event): 0 done, -1 Python's, -2 error. */
static int user_prompt(ptr start, ptr end, long long no, const Keys *k, PyObject *file_agent, State *st,
                       PyObject *events)
{
    if (!text_or_none(st->session_id) || !text_or_none(st->prompt_id))
        return -1;
    int rc = -1, found;
    PyObject *ts_s = NULL, *prompt = NULL, *uuid = NULL, *ts = NULL, *session = NULL, *parent = NULL,
             *remember = NULL, *uuid_attr = NULL, *version = NULL, *key = NULL;
    ts_s = field(start, end, &k->timestamp, &found);
    if (found && !ts_s)
        goto done;
    if (!ts_s)
        ts_s = Py_NewRef(Py_None);
    prompt = field(start, end, &k->prompt_id, &found);
    if (found && !prompt)
        goto done;
    if (!prompt)
        prompt = Py_NewRef(Py_None);
    if (!(ts = event_time(ts_s)))
        goto done;
    uuid = field(start, end, &k->uuid, &found);
    if (found && !uuid)
        goto done;
    if (!uuid)
        uuid = Py_NewRef(Py_None);
    /* st["prompt_id"] = prompt or uuid or st.get("prompt_id") */
    PyObject *new_prompt = PyObject_IsTrue(prompt) ? prompt : PyObject_IsTrue(uuid) ? uuid : st->prompt_id;
    if (line_session(start, end, file_agent, st->session_id, &session, &parent, &remember) < 0)
        goto done;
    if (!(uuid_attr = re_text(start, end, "\"uuid\"", RE_QUOTED)) ||
        !(version = re_text(start, end, "\"version\"", RE_QUOTED)) ||
        !(key = re_text(start, end, "\"promptId\"", RE_QUOTED)))
        goto done;
    rc = add_event(events, 0, no, ts, session, parent, new_prompt, version, uuid_attr, Py_None, key);
    if (rc == 0) {
        Py_SETREF(st->prompt_id, Py_NewRef(new_prompt));
        if (remember)
            Py_SETREF(st->session_id, Py_NewRef(remember));
        if (ts_s != Py_None)
            Py_SETREF(st->last_user_ts, Py_NewRef(ts_s));
        st->prev_was_user = 1;
    }
done:
    if (rc == -1)
        PyErr_Clear();
    Py_XDECREF(ts_s);
    Py_XDECREF(prompt);
    Py_XDECREF(uuid);
    Py_XDECREF(ts);
    Py_XDECREF(session);
    Py_XDECREF(parent);
    Py_XDECREF(remember);
    Py_XDECREF(uuid_attr);
    Py_XDECREF(version);
    Py_XDECREF(key);
    return rc;
}

/* A system line without usage: an event when its subtype is compact_boundary or turn_duration
 * (_system_event), else nothing. 0 done, -1 Python's, -2 error. */
static int system_event(ptr start, ptr end, long long no, const Keys *k, PyObject *file_agent, State *st,
                        PyObject *events)
{
    int found;
    PyObject *sub = field(start, end, &k->subtype, &found);
    if (found && !sub) {
        PyErr_Clear();
        return -1;
    }
    if (!sub)
        return 0;
    int kind = PyUnicode_CompareWithASCIIString(sub, "turn_duration") == 0       ? 1
               : PyUnicode_CompareWithASCIIString(sub, "compact_boundary") == 0 ? 2
                                                                                 : 0;
    Py_DECREF(sub);
    if (!kind)
        return 0;
    if (!text_or_none(st->session_id) || !text_or_none(st->prompt_id))
        return -1;
    int rc = -1;
    PyObject *session = NULL, *parent = NULL, *remember = NULL, *ts_s = NULL, *ts = NULL, *a = NULL,
             *b = NULL, *version = NULL;
    if (line_session(start, end, file_agent, st->session_id, &session, &parent, &remember) < 0)
        goto done;
    if (!(ts_s = re_text(start, end, "\"timestamp\"", RE_QUOTED)))
        goto done;
    if (kind == 1) {
        if (!(a = re_text(start, end, "\"durationMs\"", RE_NUMBER)))
            goto done;
        if (a != Py_None && !float_text(a))
            goto done;
        b = Py_NewRef(Py_None);
    } else if (!(a = re_text(start, end, "\"preTokens\"", RE_DIGITS)) ||
               !(b = re_text(start, end, "\"trigger\"", RE_LOWER))) {
        goto done;
    }
    if (!(ts = event_time(ts_s)) || !(version = re_text(start, end, "\"version\"", RE_QUOTED)))
        goto done;
    rc = add_event(events, kind, no, ts, session, parent, st->prompt_id, version, a, b, Py_None);
    if (rc == 0 && remember)
        Py_SETREF(st->session_id, Py_NewRef(remember));
done:
    if (rc == -1)
        PyErr_Clear();
    Py_XDECREF(session);
    Py_XDECREF(parent);
    Py_XDECREF(remember);
    Py_XDECREF(ts_s);
    Py_XDECREF(ts);
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_XDECREF(version);
    return rc;
}

/* After a line's handler (0 done, -1 Python's line, -2 a Python error): whether the walk stops. */
static inline int must_stop(int rc, int *failed, int *stopped)
{
    if (rc == -2)
        *failed = 1;
    else if (rc == -1)
        *stopped = 1;
    return rc < 0;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t pos;
    long long no;
    PyObject *keys_t, *file_agent, *acc, *events;
    State st;
    PyObject *session_id, *prompt_id, *last_user_ts;
    int prev;
    if (!PyArg_ParseTuple(args, "y*nLO!OOOOpO!O!", &data, &pos, &no, &PyTuple_Type, &keys_t, &file_agent,
                          &session_id, &prompt_id, &last_user_ts, &prev, &PyList_Type, &acc, &PyList_Type,
                          &events))
        return NULL;
    Keys k;
    memset(&k, 0, sizeof k);
    if (!PyArg_ParseTuple(keys_t, "y*y*y*y*y*y*y*y*O!", &k.user, &k.system, &k.type, &k.timestamp,
                          &k.prompt_id, &k.is_meta, &k.uuid, &k.subtype, &PyTuple_Type, &k.skip_types)) {
        PyBuffer_Release(&data);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(k.skip_types); i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(k.skip_types, i))) {
            PyErr_SetString(PyExc_TypeError, "skip types must be bytes");
            goto error_early;
        }
    }
    st.session_id = Py_NewRef(session_id);
    st.prompt_id = Py_NewRef(prompt_id);
    st.last_user_ts = Py_NewRef(last_user_ts);
    st.prev_was_user = prev;
    Memo memo[MEMO_N];
    memset(memo, 0, sizeof memo);

    ptr base = data.buf;
    Py_ssize_t size = data.len;
    int stopped = 0, failed = 0;
    Record rec;
    static const char TOOL_RESULT[] = "\"tool_result\"";
    static const char USAGE[] = "\"usage\"";
    while (pos < size) {
        ptr start = base + pos;
        ptr nl = memchr(start, '\n', (size_t)(size - pos));
        ptr end = nl ? nl : base + size;
        Py_ssize_t line_start = pos;
        long long line_no = no + 1;
        Py_ssize_t next = (end - base) + 1;
        if (end - start < 2) {
            no = line_no;
            pos = next;
            continue;
        }
        ptr win = start + WINDOW < end ? start + WINDOW : end;
        if (!find(start, win, k.user.buf, k.user.len)) {
            if (!find(start, win, k.system.buf, k.system.len) && skippable(start, win, &k)) {
                no = line_no;
                pos = next;
                continue;
            }
            if (!find(start, end, USAGE, sizeof USAGE - 1)) {
                if (find(start, end, k.system.buf, k.system.len)) {
                    if (must_stop(system_event(start, end, line_no, &k, file_agent, &st, events), &failed,
                                  &stopped))
                        break;
                } else if (!find(start, end, k.type.buf, k.type.len)) {
                    stopped = 1; /* a record with no type: Python checks it is JSON */
                    break;
                }
                no = line_no;
                pos = next;
                continue;
            }
            if (read_record(start, end, &rec) < 0) {
                stopped = 1;
                break;
            }
            const Val *type = &rec.top[T_TYPE];
            if (type->kind == K_STR && type->escaped) {
                stopped = 1;
                break;
            }
            if (!(type->kind == K_STR && type->n == 9 && memcmp(type->s, "assistant", 9) == 0)) {
                st.prev_was_user = 0;
                no = line_no;
                pos = next;
                continue;
            }
            if (must_stop(assistant_row(&rec, line_no, file_agent, &st, memo, acc), &failed, &stopped))
                break;
            no = line_no;
            pos = next;
            continue;
        }
        /* a user line: a prompt (Python's: it becomes an event) or a tool result / meta line */
        if (end[-1] != '}') {
            stopped = 1; /* maybe truncated: Python validates and reports it */
            break;
        }
        ptr tr_end = start + 2 * WINDOW < end ? start + 2 * WINDOW : end;
        int prompt_line = !find(start, tr_end, TOOL_RESULT, sizeof TOOL_RESULT - 1) &&
                          !find(start, end, k.is_meta.buf, k.is_meta.len);
        if (prompt_line) {
            if (must_stop(user_prompt(start, end, line_no, &k, file_agent, &st, events), &failed, &stopped))
                break;
            no = line_no;
            pos = next;
            continue;
        }
        int has_ts, has_prompt;
        PyObject *ts = field(start, end, &k.timestamp, &has_ts);
        if (has_ts && !ts) {
            PyErr_Clear();
            stopped = 1;
            break;
        }
        PyObject *prompt = field(start, end, &k.prompt_id, &has_prompt);
        if (has_prompt && !prompt) {
            PyErr_Clear();
            Py_XDECREF(ts);
            stopped = 1;
            break;
        }
        if (prompt && PyUnicode_GET_LENGTH(prompt) > 0)
            Py_SETREF(st.prompt_id, prompt);
        else
            Py_XDECREF(prompt);
        if (ts)
            Py_SETREF(st.last_user_ts, ts);
        st.prev_was_user = 1;
        no = line_no;
        pos = next;
        (void)line_start;
    }
    memo_clear(memo);
    PyBuffer_Release(&data);
    keys_release(&k);
    if (failed) {
        Py_DECREF(st.session_id);
        Py_DECREF(st.prompt_id);
        Py_DECREF(st.last_user_ts);
        return NULL;
    }
    PyObject *out = Py_BuildValue("(nLNNNOO)", pos, no, st.session_id, st.prompt_id, st.last_user_ts,
                                  st.prev_was_user ? Py_True : Py_False, stopped ? Py_True : Py_False);
    return out;
error_early:
    PyBuffer_Release(&data);
    keys_release(&k);
    return NULL;
}

static PyMethodDef METHODS[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, pos, no, keys, file_agent, session_id, prompt_id, last_user_ts, prev_was_user, acc)\n"
     "-> (pos, no, session_id, prompt_id, last_user_ts, prev_was_user, stopped)\n\n"
     "Walk the transcript lines of data from byte pos (line number no + 1 on), appending the row of\n"
     "each ordinary assistant line to acc, until the end or a line left to Python (stopped)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_cscan",
                                    "Compiled line scanner for Claude Code transcripts.", -1, METHODS};

PyMODINIT_FUNC PyInit__cscan(void) { return PyModule_Create(&MODULE); }
