/*
 * Server-Sent Events (text/event-stream) as the WHATWG HTML standard's
 * "event stream interpretation" reads them, as a push parser: the bytes are
 * UTF-8 decoded (a leading BOM dropped, invalid sequences replaced with
 * U+FFFD), cut into lines at CRLF, LF or CR, and each line is a comment, a
 * field, or the empty line that dispatches the event being built.
 *
 * Three stages, each keeping only what a chunk boundary can cut: the BOM
 * check holds up to 2 bytes, the UTF-8 decoder up to 3 bytes of a sequence,
 * the line splitter a field name of up to 5 bytes. A field's value goes
 * straight into the event being built, which max_event bounds.
 */
#include "remote/latch.h"

#include <sbx/wire.h>

#include <limits.h>

/* Where the line splitter is within the current line. */
enum line_state {
    L_START, /* nothing of the line yet */
    L_NAME,  /* in the field name, before any ':' */
    L_SPACE, /* just after the ':' (one space there is dropped) */
    L_VALUE, /* in the field's value */
    L_SKIP,  /* a comment, or a field no name this short could be: ignored to its end */
};

enum field { F_OTHER, F_DATA, F_EVENT, F_ID, F_RETRY };

/* The longest field name the standard knows ("event", "retry"). */
#define NAME_MAX_LEN 5

struct sbx_sse {
    size_t max;
    sbx_sse_event_cb cb;
    void *user;
    sbx_latch latch;
    uint64_t off; /* bytes fed before the current chunk */

    /* The BOM check: how many of EF BB BF the stream began with so far. */
    unsigned bom_have;
    bool bom_done;

    /* The UTF-8 decoder, within a sequence when need > 0. */
    unsigned need, have;  /* continuation bytes the sequence needs, has */
    unsigned char lo, hi; /* the range the next continuation byte must be in */
    unsigned char stash[4];
    unsigned stash_len; /* bytes of the sequence held from earlier chunks */
    uint64_t stash_off; /* where the held sequence began */
    size_t seq_start;   /* where it began in the current chunk (0 if earlier) */

    /*
     * The line splitter. A line is never held whole: its value goes straight
     * into the buffer of its field, so that only the event is bounded (a
     * 1 MiB data line fits max_event 1 MiB) and a comment costs nothing.
     */
    bool skip_lf; /* the last line ended with CR: an LF next belongs to it */
    enum line_state state;
    enum field field;
    char name[NAME_MAX_LEN];
    unsigned name_len;
    uint64_t line_off;
    bool had_value;        /* the line's value has a byte (an empty retry is ignored) */
    bool id_nul;           /* the id being read holds a NUL: it will be ignored */
    bool retry_ok;         /* the retry value so far is digits that fit */
    long long retry_value; /* ... and is this */

    /* The event being built, and the stream's state. */
    sbx_buf data, type, id_next, id, last_id;
    uint64_t event_off;
    long long retry;
};

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* A buffer that held a large event goes back, so an idle stream keeps little memory. */
static void buf_reset(sbx_buf *b)
{
    if (b->cap > 64 * 1024)
        sbx__buf_free(b);
    else if (b->data)
        b->data[b->len = 0] = 0;
}

static int nomem(sbx_sse *r, sbx_error **err, size_t n)
{
    return sbx__latch_fail(&r->latch, err, SBX_ENOMEM,
                           "SSE reader: out of memory buffering %zu more bytes of the line at "
                           "byte offset %llu",
                           n, (unsigned long long)r->line_off);
}

static int too_big(sbx_sse *r, sbx_error **err, const char *what, uint64_t off)
{
    return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                           "SSE %s of more than %zu bytes at byte offset %llu: refused (raise "
                           "max_event)",
                           what, r->max, (unsigned long long)off);
}

static int dispatch(sbx_sse *r, sbx_error **err)
{
    /* The standard sets the last event ID even for an event it then drops as empty. */
    r->last_id.len = 0;
    if (sbx__buf_append(&r->last_id, r->id.data ? r->id.data : "", r->id.len) < 0)
        return nomem(r, err, r->id.len);
    if (r->data.len == 0) {
        buf_reset(&r->type);
        return 0;
    }
    /* Every data line ended with a LF; the last one is not part of the data. */
    r->data.data[--r->data.len] = 0;
    r->latch.in_cb = true;
    int rc = r->cb(r->type.len ? r->type.data : "message", r->data.data, r->data.len,
                   r->last_id.data, r->user);
    r->latch.in_cb = false;
    buf_reset(&r->data);
    buf_reset(&r->type);
    return sbx__latch_stop(&r->latch, rc);
}

static enum field field_of(const char *name, size_t n)
{
    static const struct {
        const char *name;
        enum field f;
    } known[] = {{"data", F_DATA}, {"event", F_EVENT}, {"id", F_ID}, {"retry", F_RETRY}};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(known); i++)
        if (n == strlen(known[i].name) && memcmp(name, known[i].name, n) == 0)
            return known[i].f;
    return F_OTHER;
}

/* The event's size as it would be dispatched: its data lines joined, and its type. */
static size_t event_size(const sbx_sse *r)
{
    /* Between lines, data ends with the LF its last line added, which dispatch drops. */
    size_t data = r->data.len;
    if (data && r->field != F_DATA)
        data--;
    return data + r->type.len;
}

/* The field's name is known (the line reached ':' or its end): its value starts. */
static int begin_value(sbx_sse *r, sbx_error **err)
{
    switch (r->field) {
    case F_DATA:
    case F_EVENT:
        if (r->data.len == 0 && r->type.len == 0)
            r->event_off = r->line_off;
        if (r->field == F_EVENT) {
            buf_reset(&r->type);
        } else if (event_size(r) > r->max) {
            /* Even an empty data line adds a LF when more follows. */
            return too_big(r, err, "event", r->event_off);
        }
        break;
    case F_ID:
        r->id_next.len = 0;
        r->id_nul = false;
        break;
    case F_RETRY:
        r->retry_value = 0;
        r->retry_ok = true;
        break;
    case F_OTHER:
        break;
    }
    return 0;
}

/* More of the value: `n` bytes, never holding CR or LF. */
static int value_bytes(sbx_sse *r, const char *v, size_t n, sbx_error **err)
{
    switch (r->field) {
    case F_DATA:
    case F_EVENT:
        if (event_size(r) + n > r->max)
            return too_big(r, err, "event", r->event_off);
        if (sbx__buf_append(r->field == F_DATA ? &r->data : &r->type, v, n) < 0)
            return nomem(r, err, n);
        break;
    case F_ID:
        if (r->id_next.len + n > r->max)
            return too_big(r, err, "id", r->line_off);
        if (memchr(v, 0, n))
            r->id_nul = true;
        if (sbx__buf_append(&r->id_next, v, n) < 0)
            return nomem(r, err, n);
        break;
    case F_RETRY:
        for (size_t i = 0; i < n && r->retry_ok; i++) {
            int d = v[i] - '0';
            if (d < 0 || d > 9 || r->retry_value > (LLONG_MAX - d) / 10)
                r->retry_ok = false; /* not ASCII digits (or past long long): ignored */
            else
                r->retry_value = r->retry_value * 10 + d;
        }
        break;
    case F_OTHER:
        break; /* unknown fields are ignored, as the standard says */
    }
    return 0;
}

/* The line ended: its field takes effect, or, when it was empty, the event is dispatched. */
static int end_line(sbx_sse *r, sbx_error **err)
{
    enum line_state st = r->state;
    r->state = L_START;
    if (st == L_START)
        return dispatch(r, err);
    if (st == L_SKIP)
        return 0;
    switch (r->field) {
    case F_DATA:
        if (sbx__buf_append(&r->data, "\n", 1) < 0)
            return nomem(r, err, 1);
        break;
    case F_ID:
        /* An id holding NUL is ignored: it could not be sent back as Last-Event-ID. */
        if (!r->id_nul) {
            sbx_buf t = r->id;
            r->id = r->id_next;
            r->id_next = t;
            if (!r->id.data && sbx__buf_append(&r->id, "", 0) < 0)
                return nomem(r, err, 0);
        }
        break;
    case F_RETRY:
        if (r->retry_ok && r->had_value)
            r->retry = r->retry_value;
        break;
    case F_EVENT:
    case F_OTHER:
        break;
    }
    r->field = F_OTHER;
    return 0;
}

/* Bytes of the current line (no CR or LF among them); `off` where s[0] came from. */
static int line_bytes(sbx_sse *r, const char *s, size_t n, uint64_t off, sbx_error **err)
{
    if (n && r->state == L_START) {
        r->line_off = off;
        r->name_len = 0;
        r->field = F_OTHER;
        r->state = s[0] == ':' ? L_SKIP : L_NAME;
        r->had_value = false;
    }
    while (n) {
        switch (r->state) {
        case L_NAME: {
            const char *colon = memchr(s, ':', n);
            size_t take = colon ? (size_t)(colon - s) : n;
            if (r->name_len + take > NAME_MAX_LEN) {
                r->state = L_SKIP;
                return 0;
            }
            memcpy(r->name + r->name_len, s, take);
            r->name_len += (unsigned)take;
            if (!colon)
                return 0;
            s += take + 1;
            n -= take + 1;
            r->field = field_of(r->name, r->name_len);
            r->state = L_SPACE;
            int rc = begin_value(r, err);
            if (rc)
                return rc;
            break;
        }
        case L_SPACE:
            if (s[0] == ' ') {
                s++;
                n--;
            }
            r->state = L_VALUE;
            break;
        case L_VALUE:
            r->had_value = true;
            return value_bytes(r, s, n, err);
        case L_SKIP:
        case L_START:
            return 0;
        }
    }
    return 0;
}

/* Decoded text: cuts it into lines. `off` is where p[0] came from in the stream. */
static int push(sbx_sse *r, const char *p, size_t n, uint64_t off, sbx_error **err)
{
    size_t i = 0;
    int rc;
    if (r->skip_lf && n) {
        r->skip_lf = false;
        if (p[0] == '\n')
            i = 1;
    }
    while (i < n) {
        size_t j = i;
        while (j < n && p[j] != '\n' && p[j] != '\r')
            j++;
        if ((rc = line_bytes(r, p + i, j - i, off + i, err)))
            return rc;
        if (j == n)
            return 0; /* the line goes on in the next chunk */
        if (r->state == L_NAME) {
            /* A line without ':' is a field named by the whole line, with an empty value. */
            r->field = field_of(r->name, r->name_len);
            if ((rc = begin_value(r, err)))
                return rc;
        }
        if ((rc = end_line(r, err)))
            return rc;
        if (p[j] == '\r') {
            if (j + 1 == n)
                r->skip_lf = true;
            else if (p[j + 1] == '\n')
                j++;
        }
        i = j + 1;
    }
    return 0;
}

/* Pushes p[a, b) of the current chunk, which starts at stream offset `off`. */
static int flush(sbx_sse *r, const unsigned char *p, size_t a, size_t b, uint64_t off,
                 sbx_error **err)
{
    return a < b ? push(r, (const char *)p + a, b - a, off + a, err) : 0;
}

/*
 * The WHATWG Encoding standard's UTF-8 decoder: a valid sequence passes
 * through as its bytes; the longest prefix of one that cannot complete
 * becomes one U+FFFD, and the byte that broke it is read again. Valid runs
 * go to the line splitter whole, not byte by byte.
 */
static int decode(sbx_sse *r, const unsigned char *p, size_t n, uint64_t off, sbx_error **err)
{
    size_t run = 0; /* p[run, i) is valid and not yet pushed */
    size_t i = 0;
    int rc;
    r->seq_start = 0;
    while (i < n) {
        unsigned char b = p[i];
        if (r->need == 0) {
            if (b < 0x80) {
                i++;
                continue;
            }
            r->lo = 0x80;
            r->hi = 0xBF;
            if (b >= 0xC2 && b <= 0xDF) {
                r->need = 1;
            } else if (b >= 0xE0 && b <= 0xEF) {
                r->need = 2;
                if (b == 0xE0)
                    r->lo = 0xA0; /* no overlong forms */
                if (b == 0xED)
                    r->hi = 0x9F; /* no surrogates */
            } else if (b >= 0xF0 && b <= 0xF4) {
                r->need = 3;
                if (b == 0xF0)
                    r->lo = 0x90;
                if (b == 0xF4)
                    r->hi = 0x8F; /* nothing past U+10FFFF */
            } else {
                if ((rc = flush(r, p, run, i, off, err)) ||
                    (rc = push(r, replacement, 3, off + i, err)))
                    return rc;
                run = ++i;
                continue;
            }
            r->have = 0;
            r->seq_start = i++;
            continue;
        }
        if (b < r->lo || b > r->hi) {
            uint64_t at = r->stash_len ? r->stash_off : off + r->seq_start;
            if ((rc = flush(r, p, run, r->seq_start, off, err)) ||
                (rc = push(r, replacement, 3, at, err)))
                return rc;
            r->need = 0;
            r->stash_len = 0;
            run = i; /* b is read again, as the start of what follows */
            continue;
        }
        r->lo = 0x80;
        r->hi = 0xBF;
        i++;
        if (++r->have == r->need) {
            r->need = 0;
            if (r->stash_len) {
                /* Its first bytes came in an earlier chunk: they go first (run is 0). */
                unsigned sl = r->stash_len;
                r->stash_len = 0;
                if ((rc = push(r, (const char *)r->stash, sl, r->stash_off, err)))
                    return rc;
            }
        }
    }
    if (r->need) {
        /* A sequence cut by the chunk's end: keep its bytes for the next chunk. */
        if ((rc = flush(r, p, run, r->seq_start, off, err)))
            return rc;
        if (!r->stash_len)
            r->stash_off = off + r->seq_start;
        memcpy(r->stash + r->stash_len, p + r->seq_start, n - r->seq_start);
        r->stash_len += (unsigned)(n - r->seq_start);
        return 0;
    }
    return flush(r, p, run, n, off, err);
}

int sbx_sse_new(size_t max_event, sbx_sse_event_cb cb, void *user, sbx_sse **out, sbx_error **err)
{
    if (!cb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sse_new: %s is NULL", cb ? "out" : "cb");
    sbx_sse *r = calloc(1, sizeof(*r));
    if (!r)
        return sbx__set_error(err, SBX_ENOMEM, "sbx_sse_new: out of memory");
    r->max = max_event ? max_event : SBX_SSE_DEFAULT_MAX_EVENT;
    r->cb = cb;
    r->user = user;
    r->retry = -1;
    *out = r;
    return SBX_OK;
}

int sbx_sse_feed(sbx_sse *r, const void *data, size_t len, sbx_error **err)
{
    if (!r || (!data && len))
        return sbx__set_error(err, SBX_EINVAL, "sbx_sse_feed: %s is NULL", r ? "data" : "reader");
    int rc = sbx__latch_enter(&r->latch, "sbx_sse_feed", true, err);
    if (rc)
        return rc;
    const unsigned char *p = data;
    uint64_t off = r->off;
    r->off += len;
    if (!r->bom_done) {
        static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
        while (len && r->bom_have < 3 && *p == bom[r->bom_have]) {
            r->bom_have++;
            p++;
            len--;
            off++;
        }
        if (r->bom_have < 3 && !len)
            return 0; /* the BOM, or not: the next chunk says */
        r->bom_done = true;
        /* A prefix of a BOM that was not one is text (an invalid sequence, so U+FFFD). */
        if (r->bom_have < 3 && r->bom_have && (rc = decode(r, bom, r->bom_have, 0, err)))
            return rc;
    }
    return decode(r, p, len, off, err);
}

int sbx_sse_end(sbx_sse *r, sbx_error **err)
{
    if (!r)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sse_end: reader is NULL");
    int rc = sbx__latch_enter(&r->latch, "sbx_sse_end", false, err);
    if (rc)
        return rc;
    /* An event (or line) the stream did not finish is dropped, as the standard says. */
    r->latch.ended = true;
    r->state = L_START;
    r->skip_lf = false;
    buf_reset(&r->data);
    buf_reset(&r->type);
    r->need = r->stash_len = 0;
    return SBX_OK;
}

const char *sbx_sse_last_id(const sbx_sse *r)
{
    return r && r->last_id.data ? r->last_id.data : "";
}

long long sbx_sse_retry_ms(const sbx_sse *r)
{
    return r ? r->retry : -1;
}

void sbx_sse_free(sbx_sse *r)
{
    if (!r)
        return;
    sbx__latch_free(&r->latch);
    sbx__buf_free(&r->id_next);
    sbx__buf_free(&r->data);
    sbx__buf_free(&r->type);
    sbx__buf_free(&r->id);
    sbx__buf_free(&r->last_id);
    free(r);
}
