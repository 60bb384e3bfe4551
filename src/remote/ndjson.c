/*
 * Newline-delimited JSON (NDJSON, JSON Lines) as a push parser: lines end
 * at LF (a CR before it is dropped), blank lines are skipped, and a last
 * line without its LF is a line when the stream ends, as JSON Lines readers
 * take it. Each line is copied once, into the reader's buffer, so that the
 * callback gets it NUL-terminated whatever the chunking.
 */
#include "remote/latch.h"

#include <sbx/wire.h>

struct sbx_ndjson {
    size_t max;
    unsigned flags;
    sbx_ndjson_line_cb cb;
    void *user;
    sbx_latch latch;
    uint64_t off;     /* bytes fed before the current chunk */
    uint64_t line_no; /* lines ended so far */
    bool line_open;
    uint64_t line_off; /* where the open line began */
    sbx_buf line;
};

static void buf_reset(sbx_buf *b)
{
    if (b->cap > 64 * 1024)
        sbx__buf_free(b);
    else if (b->data)
        b->data[b->len = 0] = 0;
}

static int too_long(sbx_ndjson *r, sbx_error **err)
{
    return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                           "NDJSON line %llu at byte offset %llu has more than %zu bytes: refused "
                           "(raise max_line)",
                           (unsigned long long)(r->line_no + 1), (unsigned long long)r->line_off,
                           r->max);
}

/* The line in r->line is whole (its LF, if any, not in it): deliver it. */
static int deliver(sbx_ndjson *r, sbx_error **err)
{
    char *s = r->line.data;
    size_t n = r->line.len;
    if (n && s[n - 1] == '\r')
        s[--n] = 0;
    if (n > r->max)
        return too_long(r, err);
    uint64_t no = ++r->line_no;
    size_t k = 0;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
        k++;
    int rc = 0;
    if (k < n && (r->flags & SBX_NDJSON_VALIDATE)) {
        json_error_t je;
        json_t *j = json_loadb(s, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!j)
            return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                                   "NDJSON line %llu at byte offset %llu is not JSON: %s (at "
                                   "byte %d of the line)",
                                   (unsigned long long)no, (unsigned long long)r->line_off, je.text,
                                   je.position);
        json_decref(j);
    }
    if (k < n) {
        r->latch.in_cb = true;
        rc = r->cb(s, n, no, r->user);
        r->latch.in_cb = false;
    }
    r->line_open = false;
    buf_reset(&r->line);
    return sbx__latch_stop(&r->latch, rc);
}

static int append(sbx_ndjson *r, const char *p, size_t n, uint64_t off, sbx_error **err)
{
    if (!r->line_open) {
        r->line_open = true;
        r->line_off = off;
    }
    /*
     * A line may hold max bytes and the CR that may end it: refuse as soon as
     * the bytes so far cannot be that, whatever the chunking.
     */
    size_t have = r->line.len + n;
    if (have > r->max + 1 ||
        (have == r->max + 1 && (n ? p[n - 1] : r->line.data[r->line.len - 1]) != '\r'))
        return too_long(r, err);
    if (sbx__buf_append(&r->line, p, n) < 0)
        return sbx__latch_fail(&r->latch, err, SBX_ENOMEM,
                               "NDJSON reader: out of memory buffering line %llu (%zu bytes)",
                               (unsigned long long)(r->line_no + 1), have);
    return 0;
}

int sbx_ndjson_new(size_t max_line, unsigned flags, sbx_ndjson_line_cb cb, void *user,
                   sbx_ndjson **out, sbx_error **err)
{
    if (!cb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_ndjson_new: %s is NULL", cb ? "out" : "cb");
    if (flags & ~SBX_NDJSON_VALIDATE)
        return sbx__set_error(err, SBX_EINVAL, "sbx_ndjson_new: unknown flags 0x%x",
                              flags & ~SBX_NDJSON_VALIDATE);
    sbx_ndjson *r = calloc(1, sizeof(*r));
    if (!r)
        return sbx__set_error(err, SBX_ENOMEM, "sbx_ndjson_new: out of memory");
    r->max = max_line ? max_line : SBX_NDJSON_DEFAULT_MAX_LINE;
    /* max + 1 (a line and its CR) must not wrap. */
    if (r->max == SIZE_MAX)
        r->max--;
    r->flags = flags;
    r->cb = cb;
    r->user = user;
    *out = r;
    return SBX_OK;
}

int sbx_ndjson_feed(sbx_ndjson *r, const void *data, size_t len, sbx_error **err)
{
    if (!r || (!data && len))
        return sbx__set_error(err, SBX_EINVAL, "sbx_ndjson_feed: %s is NULL",
                              r ? "data" : "reader");
    int rc = sbx__latch_enter(&r->latch, "sbx_ndjson_feed", true, err);
    if (rc)
        return rc;
    const char *p = data;
    uint64_t off = r->off;
    r->off += len;
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(p + i, '\n', len - i);
        size_t j = nl ? (size_t)(nl - p) : len;
        if ((rc = append(r, p + i, j - i, off + i, err)))
            return rc;
        if (!nl)
            break;
        if ((rc = deliver(r, err)))
            return rc;
        i = j + 1;
    }
    return 0;
}

int sbx_ndjson_end(sbx_ndjson *r, sbx_error **err)
{
    if (!r)
        return sbx__set_error(err, SBX_EINVAL, "sbx_ndjson_end: reader is NULL");
    int rc = sbx__latch_enter(&r->latch, "sbx_ndjson_end", false, err);
    if (rc || r->latch.ended)
        return rc;
    r->latch.ended = true;
    return r->line_open ? deliver(r, err) : 0;
}

void sbx_ndjson_free(sbx_ndjson *r)
{
    if (!r)
        return;
    sbx__latch_free(&r->latch);
    sbx__buf_free(&r->line);
    free(r);
}
