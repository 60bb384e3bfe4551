/*
 * The length-prefixed envelopes of the Connect streaming protocol and of
 * gRPC-web: a flag byte, a 4-byte big-endian length, the message. The
 * reader checks each header before it buffers a byte of the message, so a
 * peer cannot make it hold more than max_message; an envelope that arrives
 * whole in one chunk is handed to the callback where it lies, uncopied.
 * Also the encoder, and the parser of a gRPC-web trailers block.
 */
#include "remote/latch.h"

#include <sbx/wire.h>

#include <limits.h>
#include <strings.h>

struct sbx_envelope {
    size_t max;
    unsigned opts;
    sbx_envelope_cb cb;
    void *user;
    sbx_latch latch;
    uint64_t off; /* bytes fed before the current chunk */
    unsigned char hdr[5];
    unsigned hdr_have; /* header bytes so far; 5 while reading the message */
    uint32_t msg_len;
    sbx_buf msg;      /* the message so far, when it spans chunks */
    uint64_t env_off; /* where the current envelope began */
    bool final_seen;  /* the END_STREAM or TRAILERS envelope came: nothing may follow */
};

static const char *protocol(const sbx_envelope *r)
{
    return (r->opts & SBX_ENVELOPE_CONNECT) ? "Connect" : "gRPC-web";
}

static unsigned final_flag(const sbx_envelope *r)
{
    return (r->opts & SBX_ENVELOPE_CONNECT) ? SBX_ENVELOPE_FLAG_END_STREAM
                                            : SBX_ENVELOPE_FLAG_TRAILERS;
}

/* A whole header in r->hdr: the envelope is refused here, before any of its message is kept. */
static int check_header(sbx_envelope *r, sbx_error **err)
{
    unsigned flags = r->hdr[0];
    r->msg_len = (uint32_t)r->hdr[1] << 24 | (uint32_t)r->hdr[2] << 16 | (uint32_t)r->hdr[3] << 8 |
                 r->hdr[4];
    unsigned known = SBX_ENVELOPE_FLAG_COMPRESSED | final_flag(r);
    if (flags & ~known)
        return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                               "envelope at byte offset %llu has flags 0x%02x, which %s does not "
                               "define (it knows 0x%02x)",
                               (unsigned long long)r->env_off, flags, protocol(r), known);
    if ((flags & SBX_ENVELOPE_FLAG_COMPRESSED) && !(r->opts & SBX_ENVELOPE_ALLOW_COMPRESSED))
        return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                               "envelope at byte offset %llu is compressed (flags 0x%02x), which "
                               "this reader does not accept: refused (create it with "
                               "SBX_ENVELOPE_ALLOW_COMPRESSED and decompress the message)",
                               (unsigned long long)r->env_off, flags);
    if (r->msg_len > r->max)
        return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                               "envelope message of %lu bytes at byte offset %llu: more than "
                               "max_message (%zu): refused (raise max_message)",
                               (unsigned long)r->msg_len, (unsigned long long)r->env_off, r->max);
    return 0;
}

static int deliver(sbx_envelope *r, const void *msg)
{
    unsigned flags = r->hdr[0];
    r->hdr_have = 0;
    if (flags & final_flag(r))
        r->final_seen = true;
    r->latch.in_cb = true;
    int rc = r->cb(flags, msg, r->msg_len, r->user);
    r->latch.in_cb = false;
    if (r->msg.cap > 64 * 1024)
        sbx__buf_free(&r->msg);
    r->msg.len = 0;
    return sbx__latch_stop(&r->latch, rc);
}

int sbx_envelope_new(size_t max_message, unsigned flags, sbx_envelope_cb cb, void *user,
                     sbx_envelope **out, sbx_error **err)
{
    if (!cb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_envelope_new: %s is NULL", cb ? "out" : "cb");
    unsigned proto = flags & (SBX_ENVELOPE_CONNECT | SBX_ENVELOPE_GRPC_WEB);
    unsigned unknown =
        flags & ~(SBX_ENVELOPE_CONNECT | SBX_ENVELOPE_GRPC_WEB | SBX_ENVELOPE_ALLOW_COMPRESSED);
    if (unknown)
        return sbx__set_error(err, SBX_EINVAL, "sbx_envelope_new: unknown flags 0x%x", unknown);
    if (proto != SBX_ENVELOPE_CONNECT && proto != SBX_ENVELOPE_GRPC_WEB)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_envelope_new: say which protocol the envelopes are: "
                              "SBX_ENVELOPE_CONNECT or SBX_ENVELOPE_GRPC_WEB (not %s)",
                              proto ? "both" : "neither");
    sbx_envelope *r = calloc(1, sizeof(*r));
    if (!r)
        return sbx__set_error(err, SBX_ENOMEM, "sbx_envelope_new: out of memory");
    r->max = max_message ? max_message : SBX_ENVELOPE_DEFAULT_MAX_MESSAGE;
    r->opts = flags;
    r->cb = cb;
    r->user = user;
    *out = r;
    return SBX_OK;
}

int sbx_envelope_feed(sbx_envelope *r, const void *data, size_t len, sbx_error **err)
{
    if (!r || (!data && len))
        return sbx__set_error(err, SBX_EINVAL, "sbx_envelope_feed: %s is NULL",
                              r ? "data" : "reader");
    int rc = sbx__latch_enter(&r->latch, "sbx_envelope_feed", true, err);
    if (rc)
        return rc;
    const unsigned char *p = data;
    uint64_t off = r->off;
    r->off += len;
    size_t i = 0;
    while (i < len) {
        if (r->final_seen)
            return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                                   "%s stream has bytes after its %s envelope, at byte offset "
                                   "%llu: it must be the last",
                                   protocol(r),
                                   (r->opts & SBX_ENVELOPE_CONNECT) ? "end-of-stream" : "trailers",
                                   (unsigned long long)(off + i));
        if (r->hdr_have < 5) {
            if (r->hdr_have == 0)
                r->env_off = off + i;
            size_t take = 5 - r->hdr_have < len - i ? 5 - r->hdr_have : len - i;
            memcpy(r->hdr + r->hdr_have, p + i, take);
            r->hdr_have += (unsigned)take;
            i += take;
            if (r->hdr_have < 5)
                break;
            if ((rc = check_header(r, err)))
                return rc;
        }
        size_t left = r->msg_len - r->msg.len;
        if (r->msg.len == 0 && len - i >= left) {
            /* The whole message is in this chunk: the callback reads it in place. */
            const void *m = left ? (const void *)(p + i) : (const void *)"";
            i += left;
            if ((rc = deliver(r, m)))
                return rc;
            continue;
        }
        size_t take = left < len - i ? left : len - i;
        if (sbx__buf_append(&r->msg, p + i, take) < 0)
            return sbx__latch_fail(&r->latch, err, SBX_ENOMEM,
                                   "envelope reader: out of memory buffering a message of %lu "
                                   "bytes at byte offset %llu",
                                   (unsigned long)r->msg_len, (unsigned long long)r->env_off);
        i += take;
        if (r->msg.len == r->msg_len && (rc = deliver(r, r->msg.data)))
            return rc;
    }
    return 0;
}

int sbx_envelope_end(sbx_envelope *r, sbx_error **err)
{
    if (!r)
        return sbx__set_error(err, SBX_EINVAL, "sbx_envelope_end: reader is NULL");
    int rc = sbx__latch_enter(&r->latch, "sbx_envelope_end", false, err);
    if (rc || r->latch.ended)
        return rc;
    r->latch.ended = true;
    if (r->hdr_have > 0 && r->hdr_have < 5)
        return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                               "%s stream ended inside a 5-byte envelope header (%u bytes of it, "
                               "at byte offset %llu)",
                               protocol(r), r->hdr_have, (unsigned long long)r->env_off);
    if (r->hdr_have == 5)
        return sbx__latch_fail(&r->latch, err, SBX_EPROTO,
                               "%s stream ended inside the envelope at byte offset %llu, after "
                               "%zu of %lu message bytes",
                               protocol(r), (unsigned long long)r->env_off, r->msg.len,
                               (unsigned long)r->msg_len);
    return 0;
}

void sbx_envelope_free(sbx_envelope *r)
{
    if (!r)
        return;
    sbx__latch_free(&r->latch);
    sbx__buf_free(&r->msg);
    free(r);
}

int sbx_envelope_encode(unsigned flags, const void *msg, size_t len, void **out, size_t *out_len,
                        sbx_error **err)
{
    if (!out || !out_len || (!msg && len))
        return sbx__set_error(err, SBX_EINVAL, "sbx_envelope_encode: %s is NULL",
                              !out       ? "out"
                              : !out_len ? "out_len"
                                         : "msg");
    if (flags > 0xff)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_envelope_encode: flags 0x%x do not fit the flag byte", flags);
    if (len > UINT32_MAX)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_envelope_encode: a message of %zu bytes does not fit an "
                              "envelope (at most 4294967295)",
                              len);
    unsigned char *b = malloc(len + 5);
    if (!b)
        return sbx__set_error(err, SBX_ENOMEM, "sbx_envelope_encode: out of memory for %zu bytes",
                              len + 5);
    b[0] = (unsigned char)flags;
    b[1] = (unsigned char)(len >> 24);
    b[2] = (unsigned char)(len >> 16);
    b[3] = (unsigned char)(len >> 8);
    b[4] = (unsigned char)len;
    if (len)
        memcpy(b + 5, msg, len);
    *out = b;
    *out_len = len + 5;
    return SBX_OK;
}

/* --- gRPC-web trailers ------------------------------------------------------ */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * grpc-message is percent-encoded UTF-8. The gRPC spec asks a reader never
 * to fail on a bad escape: it is kept as written. So is %00, which would cut
 * the C string short.
 */
static char *percent_decode(const char *v, size_t n)
{
    char *s = malloc(n + 1), *o = s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (v[i] == '%' && i + 2 < n && (hi = hexval(v[i + 1])) >= 0 &&
            (lo = hexval(v[i + 2])) >= 0 && (hi | lo)) {
            *o++ = (char)(hi << 4 | lo);
            i += 2;
        } else {
            *o++ = v[i];
        }
    }
    *o = 0;
    return s;
}

static bool name_is(const char *s, size_t n, const char *name)
{
    return n == strlen(name) && strncasecmp(s, name, n) == 0;
}

int sbx_grpc_trailers_parse(const void *block, size_t len, int *status, char **message,
                            sbx_error **err)
{
    if (!status || !message || (!block && len))
        return sbx__set_error(err, SBX_EINVAL, "sbx_grpc_trailers_parse: %s is NULL",
                              !status    ? "status"
                              : !message ? "message"
                                         : "block");
    const char *b = block;
    long st = -1;
    char *msg = NULL;
    bool have_msg = false;
    size_t pos = 0;
    int rc = 0;
    while (pos < len) {
        const char *nl = memchr(b + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - b) : len, next = nl ? end + 1 : len;
        size_t at = pos, n = end - pos;
        if (n && b[at + n - 1] == '\r')
            n--;
        pos = next;
        if (n == 0)
            continue;
        const char *line = b + at, *colon = memchr(line, ':', n);
        if (!colon) {
            rc = sbx__set_error(err, SBX_EPROTO,
                                "gRPC-web trailers: the line at byte offset %zu has no ':'", at);
            goto fail;
        }
        size_t nlen = (size_t)(colon - line);
        const char *v = colon + 1;
        size_t vlen = n - nlen - 1;
        /* Optional whitespace around a header value is not part of it (RFC 9110). */
        while (vlen && (v[0] == ' ' || v[0] == '\t')) {
            v++;
            vlen--;
        }
        while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
            vlen--;
        if (name_is(line, nlen, "grpc-status")) {
            long val = 0;
            size_t k = 0;
            for (; k < vlen && v[k] >= '0' && v[k] <= '9' && val <= INT_MAX; k++)
                val = val * 10 + (v[k] - '0');
            if (st >= 0 || !vlen || k < vlen || val > INT_MAX) {
                rc = sbx__set_error(
                    err, SBX_EPROTO, "gRPC-web trailers: %s grpc-status '%.*s' at byte offset %zu",
                    st >= 0 ? "a second" : "an invalid", (int)(vlen > 64 ? 64 : vlen), v, at);
                goto fail;
            }
            st = val;
        } else if (name_is(line, nlen, "grpc-message")) {
            if (have_msg) {
                rc = sbx__set_error(err, SBX_EPROTO,
                                    "gRPC-web trailers: a second grpc-message at byte offset %zu",
                                    at);
                goto fail;
            }
            if (!(msg = percent_decode(v, vlen))) {
                rc = sbx__set_error(err, SBX_ENOMEM, "gRPC-web trailers: out of memory");
                goto fail;
            }
            have_msg = true;
        }
    }
    if (st < 0) {
        rc = sbx__set_error(err, SBX_EPROTO, "gRPC-web trailers have no grpc-status (%zu bytes)",
                            len);
        goto fail;
    }
    if (!have_msg && !(msg = strdup(""))) {
        rc = sbx__set_error(err, SBX_ENOMEM, "gRPC-web trailers: out of memory");
        goto fail;
    }
    *status = (int)st;
    *message = msg;
    return SBX_OK;
fail:
    free(msg);
    return rc;
}
