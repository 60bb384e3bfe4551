/*
 * [term] A box's bytes made safe for a terminal: the rules are in termesc.h.
 * A UTF-8 decoder that never passes what it has not checked: a sequence is
 * held until it is complete and valid (RFC 3629's table of well-formed
 * byte sequences), then written whole or escaped byte by byte.
 */
#include "core/termesc.h"

static int put_ctl(sbx_buf *out, unsigned char c)
{
    char s[2] = { '^', c == 0x7f ? '?' : (char)(c + 0x40) };
    return sbx__buf_append(out, s, 2);
}

static int put_hex(sbx_buf *out, const unsigned char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        char s[4] = { '\\', 'x', hex[p[i] >> 4], hex[p[i] & 15] };
        if (sbx__buf_append(out, s, 4) < 0)
            return SBX_ENOMEM;
    }
    return SBX_OK;
}

/* A complete, valid sequence: written, unless it encodes a C1 control (U+0080..U+009F). */
static int put_seq(sbx_buf *out, const unsigned char *p, size_t n)
{
    if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
        return put_hex(out, p, n);
    return sbx__buf_append(out, p, n) < 0 ? SBX_ENOMEM : SBX_OK;
}

/* Starts a byte outside any sequence (`t` holds nothing). */
static int start(sbx_termesc *t, unsigned char c, sbx_buf *out)
{
    if (c == '\r') {
        t->pend[0] = c;
        t->npend = 1;
        return SBX_OK;
    }
    if (c == '\n' || c == '\t' || (c >= 0x20 && c < 0x7f))
        return sbx__buf_append(out, &c, 1) < 0 ? SBX_ENOMEM : SBX_OK;
    if (c < 0x20 || c == 0x7f)
        return put_ctl(out, c) < 0 ? SBX_ENOMEM : SBX_OK;
    /* RFC 3629, section 4: the lead byte fixes the length and the range of the second byte. */
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 1;
    else if (c == 0xe0)
        need = 2, lo = 0xa0;
    else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef)
        need = 2;
    else if (c == 0xed)
        need = 2, hi = 0x9f; /* no surrogates */
    else if (c == 0xf0)
        need = 3, lo = 0x90;
    else if (c >= 0xf1 && c <= 0xf3)
        need = 3;
    else if (c == 0xf4)
        need = 3, hi = 0x8f; /* nothing past U+10FFFF */
    if (!need)
        return put_hex(out, &c, 1);
    t->pend[0] = c;
    t->npend = 1;
    t->need = need;
    t->lo = lo;
    t->hi = hi;
    return SBX_OK;
}

int sbx__termesc_feed(sbx_termesc *t, const void *in, size_t n, sbx_buf *out)
{
    const unsigned char *p = in;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        int rc = SBX_OK;
        if (t->npend && !t->need) {
            /* A CR: part of a CRLF, or shown. */
            t->npend = 0;
            if (c == '\n') {
                if (sbx__buf_append(out, "\r\n", 2) < 0)
                    return SBX_ENOMEM;
                continue;
            }
            if (put_ctl(out, '\r') < 0)
                return SBX_ENOMEM;
        } else if (t->need) {
            if (c >= t->lo && c <= t->hi) {
                t->pend[t->npend++] = c;
                t->lo = 0x80;
                t->hi = 0xbf;
                if (--t->need == 0) {
                    rc = put_seq(out, t->pend, t->npend);
                    t->npend = 0;
                }
                if (rc < 0)
                    return rc;
                continue;
            }
            /* Cut short: what was held is not UTF-8; this byte starts afresh. */
            rc = put_hex(out, t->pend, t->npend);
            t->npend = 0;
            t->need = 0;
            if (rc < 0)
                return rc;
        }
        if ((rc = start(t, c, out)) < 0)
            return rc;
    }
    return SBX_OK;
}

int sbx__termesc_flush(sbx_termesc *t, sbx_buf *out)
{
    int rc = SBX_OK;
    if (t->npend && !t->need)
        rc = put_ctl(out, '\r') < 0 ? SBX_ENOMEM : SBX_OK;
    else if (t->npend)
        rc = put_hex(out, t->pend, t->npend);
    *t = (sbx_termesc){ 0 };
    return rc;
}

char *sbx__termesc_field(const char *s)
{
    sbx_buf b = { 0 };
    sbx_termesc t = { 0 };
    int rc = SBX_OK;
    for (const char *p = s ? s : ""; *p && rc == SBX_OK; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '\t' || c == '\n' || c == '\r') {
            /* Whatever was held ends here; the control itself is shown, not obeyed. */
            rc = sbx__termesc_flush(&t, &b);
            if (rc == SBX_OK && put_ctl(&b, c) < 0)
                rc = SBX_ENOMEM;
        } else {
            rc = sbx__termesc_feed(&t, p, 1, &b);
        }
    }
    if (rc == SBX_OK)
        rc = sbx__termesc_flush(&t, &b);
    if (rc == SBX_OK && sbx__buf_append(&b, "", 0) < 0) /* "" for an empty field */
        rc = SBX_ENOMEM;
    if (rc < 0) {
        sbx__buf_free(&b);
        return NULL;
    }
    return b.data;
}
