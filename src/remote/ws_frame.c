/*
 * The WebSocket codec (src/remote/ws_frame.h): RFC 6455's framing and
 * opening handshake, pure, for the client in ws.c. Every byte it reads
 * comes from a server and is hostile: each length is checked before it is
 * used, nothing grows past the limits given, and a stream that breaks the
 * protocol ends with the close code section 7.4.1 names for it.
 */
#include "remote/ws_frame.h"

#include <nettle/base64.h>
#include <nettle/sha1.h>

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

/* --- UTF-8 ---------------------------------------------------------------- */

/*
 * One byte at a time, so a text message split anywhere (across fragments,
 * across reads) is checked the same and fails at its first bad byte, as
 * section 8.1 asks ("fail fast"). The ranges are those of RFC 3629's
 * table: no overlong forms, no surrogates, nothing past U+10FFFF.
 */
bool sbx__utf8_feed(sbx__utf8 *u, const uint8_t *s, size_t len, size_t *bad)
{
    for (size_t i = 0; i < len; i++) {
        uint8_t c = s[i];
        if (u->need) {
            if (c < u->lo || c > u->hi) {
                *bad = i;
                return false;
            }
            u->need--;
            u->lo = 0x80;
            u->hi = 0xBF;
        } else if (c < 0x80) {
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            u->need = 1;
            u->lo = 0x80;
            u->hi = 0xBF;
        } else if (c >= 0xE0 && c <= 0xEF) {
            u->need = 2;
            u->lo = c == 0xE0 ? 0xA0 : 0x80;
            u->hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            u->need = 3;
            u->lo = c == 0xF0 ? 0x90 : 0x80;
            u->hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            *bad = i;
            return false;
        }
    }
    return true;
}

bool sbx__utf8_valid(const void *s, size_t len)
{
    sbx__utf8 u = {0};
    size_t bad;
    return sbx__utf8_feed(&u, s, len, &bad) && u.need == 0;
}

/* --- decoding ------------------------------------------------------------- */

static const uint8_t empty_payload[1];

void sbx__ws_decoder_init(sbx__ws_decoder *d, size_t max_message, bool from_client)
{
    memset(d, 0, sizeof(*d));
    d->max_message = max_message ? max_message : SBX_WS_DEFAULT_MAX_MESSAGE;
    d->from_client = from_client;
    d->hdr_need = 2;
}

void sbx__ws_decoder_free(sbx__ws_decoder *d)
{
    sbx__buf_free(&d->msg);
    sbx_error_free(d->failed);
    d->failed = NULL;
}

int sbx__ws_decoder_close_code(const sbx__ws_decoder *d)
{
    return d->failed ? d->close_code : 0;
}

static __attribute__((format(printf, 5, 6))) int
fail(sbx__ws_decoder *d, sbx_error **err, int close_code, uint64_t at, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    int code = close_code == SBX_WS_INTERNAL_ERROR ? SBX_ENOMEM : SBX_EPROTO;
    d->close_code = close_code;
    d->failed = sbx_error_new(code,
                              "the %s broke the WebSocket protocol at byte %llu: %s (close "
                              "code %d)",
                              d->from_client ? "client" : "server", (unsigned long long)at, what,
                              close_code);
    if (!d->failed)
        return SBX_ENOMEM;
    sbx__fail(err, sbx_error_copy(d->failed));
    return code;
}

static bool is_control(int op)
{
    return (op & 0x8) != 0;
}

/* The checks the first header byte allows: bits and opcode against the message state. */
static int first_byte(sbx__ws_decoder *d, sbx_error **err)
{
    uint8_t b = d->hdr[0];
    int op = b & 0x0f;
    d->fin = (b & 0x80) != 0;
    d->opcode = op;
    if (b & 0x70)
        return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                    "reserved bits 0x%02x set, and no extension was agreed", b & 0x70);
    if (op != SBX__WS_CONTINUATION && op != SBX_WS_TEXT && op != SBX_WS_BINARY &&
        op != SBX_WS_CLOSE && op != SBX_WS_PING && op != SBX_WS_PONG)
        return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at, "unknown opcode 0x%x", op);
    if (is_control(op) && !d->fin)
        return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                    "a control frame (opcode 0x%x) without FIN: control frames are never "
                    "fragmented",
                    op);
    if (op == SBX__WS_CONTINUATION && !d->msg_opcode)
        return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                    "a continuation frame with no fragmented message to continue");
    if ((op == SBX_WS_TEXT || op == SBX_WS_BINARY) && d->msg_opcode)
        return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                    "a new message before the fragmented one ended");
    return 0;
}

static int second_byte(sbx__ws_decoder *d, sbx_error **err)
{
    uint8_t b = d->hdr[1];
    d->masked = (b & 0x80) != 0;
    unsigned len7 = b & 0x7f;
    if (d->masked && !d->from_client)
        return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                    "a masked frame: a server never masks");
    if (!d->masked && d->from_client)
        return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                    "an unmasked frame: a client always masks");
    if (is_control(d->opcode) && len7 > SBX__WS_MAX_CONTROL)
        return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                    "a control frame (opcode 0x%x) of more than 125 bytes", d->opcode);
    d->hdr_need = (uint8_t)(2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + (d->masked ? 4 : 0));
    return 0;
}

/* The header is whole: its length, in its shortest form and within the limit. */
static int header_done(sbx__ws_decoder *d, sbx_error **err)
{
    unsigned len7 = d->hdr[1] & 0x7f;
    uint64_t len = len7;
    size_t k = 2;
    if (len7 == 126) {
        len = (uint64_t)d->hdr[2] << 8 | d->hdr[3];
        k = 4;
        if (len < 126)
            return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                        "a 16-bit length of %llu, which fits in 7 bits: not its shortest form",
                        (unsigned long long)len);
    } else if (len7 == 127) {
        len = 0;
        for (int i = 0; i < 8; i++)
            len = len << 8 | d->hdr[2 + i];
        k = 10;
        if (len >> 63)
            return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                        "a 64-bit length with its most significant bit set");
        if (len <= 0xffff)
            return fail(d, err, SBX_WS_PROTOCOL_ERROR, d->frame_at,
                        "a 64-bit length of %llu, which fits in 16 bits: not its shortest form",
                        (unsigned long long)len);
    }
    if (d->masked)
        memcpy(d->key, d->hdr + k, 4);
    if (is_control(d->opcode)) {
        d->ctl_len = 0;
    } else {
        /* The whole message counts, fragments joined: refused before its bytes arrive. */
        if (len > d->max_message - d->msg.len)
            return fail(d, err, SBX_WS_TOO_BIG, d->frame_at,
                        "a message of more than %zu bytes (%zu joined so far, a frame of %llu)",
                        d->max_message, d->msg.len, (unsigned long long)len);
        if (d->opcode != SBX__WS_CONTINUATION) {
            d->msg_opcode = d->opcode;
            d->msg.len = 0;
            memset(&d->utf8, 0, sizeof(d->utf8));
        }
    }
    d->left = len;
    d->frame_pos = 0;
    d->in_payload = true;
    return 0;
}

/* `n` payload bytes at `src`, stream offset `at`: kept (unmasked) and, for text, checked. */
static int payload(sbx__ws_decoder *d, const uint8_t *src, size_t n, uint64_t at, sbx_error **err)
{
    uint8_t *dst;
    if (is_control(d->opcode)) {
        dst = d->ctl + d->ctl_len;
        memcpy(dst, src, n);
        d->ctl_len += n;
    } else {
        size_t old = d->msg.len;
        if (sbx__buf_append(&d->msg, src, n) < 0)
            return fail(d, err, SBX_WS_INTERNAL_ERROR, at, "out of memory for a message");
        dst = (uint8_t *)d->msg.data + old;
    }
    if (d->masked)
        sbx__ws_mask(dst, n, d->key, d->frame_pos);
    d->frame_pos += n;
    size_t bad;
    if (d->msg_opcode == SBX_WS_TEXT && !is_control(d->opcode) &&
        !sbx__utf8_feed(&d->utf8, dst, n, &bad))
        return fail(d, err, SBX_WS_INVALID_DATA, at + bad,
                    "a text message that is not UTF-8 (byte 0x%02x)", dst[bad]);
    return 0;
}

/* The frame's payload is whole: 1 and the event when it ends a message or is a control frame. */
static int frame_done(sbx__ws_decoder *d, sbx__ws_event *ev, sbx_error **err)
{
    d->in_payload = false;
    d->hdr_len = 0;
    d->hdr_need = 2;
    memset(ev, 0, sizeof(*ev));
    if (is_control(d->opcode)) {
        d->ctl[d->ctl_len] = 0;
        ev->opcode = d->opcode;
        ev->data = d->ctl;
        ev->len = d->ctl_len;
        if (d->opcode == SBX_WS_CLOSE) {
            int rc = sbx__ws_close_parse(d->ctl, d->ctl_len, &ev->status, ev->reason);
            if (rc == SBX_WS_INVALID_DATA)
                return fail(d, err, rc, d->frame_at, "a close frame whose reason is not UTF-8");
            if (rc && d->ctl_len == 1)
                return fail(d, err, rc, d->frame_at, "a close frame of 1 byte");
            if (rc)
                return fail(d, err, rc, d->frame_at,
                            "a close frame with code %d, which may not be sent",
                            d->ctl[0] << 8 | d->ctl[1]);
            d->closed = true;
        }
        return 1;
    }
    if (!d->fin)
        return 0;
    if (d->msg_opcode == SBX_WS_TEXT && d->utf8.need)
        return fail(d, err, SBX_WS_INVALID_DATA, d->offset,
                    "a text message that ends inside a UTF-8 character");
    /* A NUL after the bytes (an sbx_buf has room for it): text reads as a string. */
    if (d->msg.data)
        d->msg.data[d->msg.len] = 0;
    ev->opcode = d->msg_opcode;
    ev->data = d->msg.data ? (const uint8_t *)d->msg.data : empty_payload;
    ev->len = d->msg.len;
    d->msg_opcode = 0;
    d->reset_msg = true;
    return 1;
}

int sbx__ws_decode(sbx__ws_decoder *d, const void *data, size_t len, size_t *used,
                   sbx__ws_event *ev, sbx_error **err)
{
    *used = 0;
    if (d->failed) {
        sbx__fail(err, sbx_error_copy(d->failed));
        return sbx_error_code(d->failed);
    }
    if (d->reset_msg) {
        d->msg.len = 0;
        d->reset_msg = false;
    }
    if (d->closed) {
        /* Nothing may follow a close frame; what does is not the caller's business. */
        d->offset += len;
        *used = len;
        return 0;
    }
    const uint8_t *p = data;
    size_t i = 0;
    int rc = 0;
    while (i < len) {
        if (!d->in_payload) {
            if (d->hdr_len == 0)
                d->frame_at = d->offset;
            d->hdr[d->hdr_len++] = p[i++];
            d->offset++;
            if (d->hdr_len == 1)
                rc = first_byte(d, err);
            else if (d->hdr_len == 2)
                rc = second_byte(d, err);
            if (rc < 0 || d->hdr_len < d->hdr_need)
                goto out;
            if ((rc = header_done(d, err)) < 0)
                goto out;
        } else {
            size_t n = len - i;
            if (n > d->left)
                n = (size_t)d->left;
            rc = payload(d, p + i, n, d->offset, err);
            i += n;
            d->offset += n;
            d->left -= n;
            if (rc < 0)
                goto out;
        }
        if (d->in_payload && d->left == 0 && (rc = frame_done(d, ev, err)) != 0)
            goto out;
    out:
        if (rc != 0)
            break;
    }
    *used = i;
    return rc;
}

/* --- encoding ------------------------------------------------------------- */

size_t sbx__ws_frame_size(uint64_t len, bool masked)
{
    return 2 + (len < 126 ? 0 : len <= 0xffff ? 2 : 8) + (masked ? 4 : 0) + (size_t)len;
}

void sbx__ws_mask(uint8_t *data, size_t len, const uint8_t key[4], uint64_t pos)
{
    /* Eight bytes at a time with the key turned to this phase: a 1 MiB message is common. */
    uint8_t k8[8];
    for (int j = 0; j < 8; j++)
        k8[j] = key[(pos + (uint64_t)j) & 3];
    uint64_t kw;
    memcpy(&kw, k8, 8);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, data + i, 8);
        w ^= kw;
        memcpy(data + i, &w, 8);
    }
    for (; i < len; i++)
        data[i] ^= k8[i & 7];
}

size_t sbx__ws_frame_write(uint8_t *out, int opcode, bool fin, const void *payload, size_t len,
                           const uint8_t *key)
{
    size_t k = 0;
    out[k++] = (uint8_t)((fin ? 0x80 : 0) | (opcode & 0x0f));
    uint8_t m = key ? 0x80 : 0;
    if (len < 126) {
        out[k++] = (uint8_t)(m | len);
    } else if (len <= 0xffff) {
        out[k++] = m | 126;
        out[k++] = (uint8_t)(len >> 8);
        out[k++] = (uint8_t)len;
    } else {
        out[k++] = m | 127;
        for (int i = 7; i >= 0; i--)
            out[k++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    if (key) {
        memcpy(out + k, key, 4);
        k += 4;
    }
    if (len)
        memcpy(out + k, payload, len);
    if (key)
        sbx__ws_mask(out + k, len, key, 0);
    return k + len;
}

/* --- close frames --------------------------------------------------------- */

bool sbx__ws_status_ok(int status)
{
    return (status >= 1000 && status <= 1003) || (status >= 1007 && status <= 1014) ||
           (status >= 3000 && status <= 4999);
}

size_t sbx__ws_close_payload(uint8_t out[SBX__WS_MAX_CONTROL], int status, const char *reason)
{
    if (status <= 0 || status > 0xffff)
        return 0;
    out[0] = (uint8_t)(status >> 8);
    out[1] = (uint8_t)status;
    size_t n = reason ? strlen(reason) : 0;
    if (n > SBX__WS_MAX_REASON) {
        /* Cut before a continuation byte, never inside a character. */
        n = SBX__WS_MAX_REASON;
        while (n > 0 && ((uint8_t)reason[n] & 0xC0) == 0x80)
            n--;
    }
    if (n)
        memcpy(out + 2, reason, n);
    return 2 + n;
}

int sbx__ws_close_parse(const uint8_t *p, size_t len, int *status,
                        char reason[SBX__WS_MAX_REASON + 1])
{
    reason[0] = 0;
    if (len == 0) {
        *status = SBX_WS_NO_STATUS;
        return 0;
    }
    if (len == 1 || len > SBX__WS_MAX_CONTROL)
        return SBX_WS_PROTOCOL_ERROR;
    int st = p[0] << 8 | p[1];
    if (!sbx__ws_status_ok(st))
        return SBX_WS_PROTOCOL_ERROR;
    if (!sbx__utf8_valid(p + 2, len - 2))
        return SBX_WS_INVALID_DATA;
    memcpy(reason, p + 2, len - 2);
    reason[len - 2] = 0;
    *status = st;
    return 0;
}

/* --- the opening handshake ------------------------------------------------ */

void sbx__ws_key(const uint8_t nonce[16], char out[25])
{
    base64_encode_raw(out, 16, nonce);
    out[24] = 0;
}

void sbx__ws_accept(const char *key, char out[29])
{
    struct sha1_ctx c;
    uint8_t dg[SHA1_DIGEST_SIZE];
    sha1_init(&c);
    sha1_update(&c, strlen(key), (const uint8_t *)key);
    sha1_update(&c, sizeof(WS_GUID) - 1, (const uint8_t *)WS_GUID);
    sha1_digest(&c, sizeof(dg), dg);
    base64_encode_raw(out, sizeof(dg), dg);
    out[28] = 0;
}

int sbx__ws_head_feed(sbx__ws_head *h, const void *data, size_t len, size_t *used, sbx_error **err)
{
    *used = 0;
    if (h->done)
        return 1;
    size_t start = h->buf.len;
    size_t room = SBX__WS_MAX_HEAD - start;
    size_t n = len < room ? len : room;
    if (n && sbx__buf_append(&h->buf, data, n) < 0)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    const char *b = h->buf.data;
    for (size_t i = start; i < start + n; i++) {
        if (b[i] != '\n')
            continue;
        /* The blank line: CRLF CRLF, or bare LFs, which servers rarely send but may. */
        if ((i >= 1 && b[i - 1] == '\n') || (i >= 2 && b[i - 1] == '\r' && b[i - 2] == '\n')) {
            h->buf.len = i + 1;
            h->buf.data[h->buf.len] = 0; /* the buffer held the byte past it: room for the NUL */
            h->done = true;
            *used = i + 1 - start;
            return 1;
        }
    }
    *used = n;
    if (h->buf.len >= SBX__WS_MAX_HEAD)
        return sbx__set_error(err, SBX_EPROTO,
                              "the response to the WebSocket upgrade passes %zu bytes without "
                              "ending its headers",
                              SBX__WS_MAX_HEAD);
    return 0;
}

void sbx__ws_head_free(sbx__ws_head *h)
{
    sbx__buf_free(&h->buf);
    h->done = false;
}

/* At most `cap`-1 bytes of `s` (n long) with every byte that is not printable ASCII as '?'. */
static void printable(char *out, size_t cap, const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        out[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    out[k] = 0;
}

static bool ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Whether a comma-separated header value lists `token` (case-insensitive). */
static bool list_has(const char *v, size_t n, const char *token)
{
    size_t tl = strlen(token), i = 0;
    while (i < n) {
        while (i < n && (ows(v[i]) || v[i] == ','))
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && ows(v[e - 1]))
            e--;
        if (e - s == tl && !strncasecmp(v + s, token, tl))
            return true;
    }
    return false;
}

static bool name_is(const char *name, size_t n, const char *want)
{
    return strlen(want) == n && !strncasecmp(name, want, n);
}

int sbx__ws_head_check(const sbx__ws_head *h, const char *key, const char *const *protocols,
                       size_t n_protocols, int *status, char **protocol, sbx_error **err)
{
    *status = 0;
    *protocol = NULL;
    if (!h->done)
        return sbx__set_error(err, SBX_EPROTO, "the answer to the WebSocket upgrade is cut short");
    const char *p = h->buf.data, *end = p + h->buf.len;
    char shown[128];
    /* The status line: HTTP/1.x, a space, three digits, then a space or its end. */
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl && nl > p && nl[-1] == '\r' ? nl - 1 : nl;
    size_t ll = (size_t)(le - p);
    if (ll < 12 || memcmp(p, "HTTP/1.", 7) != 0 || p[7] < '0' || p[7] > '9' || p[8] != ' ' ||
        p[9] < '1' || p[9] > '9' || p[10] < '0' || p[10] > '9' || p[11] < '0' || p[11] > '9' ||
        (ll > 12 && p[12] != ' ')) {
        printable(shown, 81, p, ll);
        return sbx__set_error(err, SBX_EPROTO,
                              "the answer to the WebSocket upgrade is not HTTP/1.1: '%s'", shown);
    }
    *status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    if (*status != 101) {
        printable(shown, 81, p + 13 > le ? le : p + 13, p + 13 > le ? 0 : (size_t)(le - p - 13));
        return sbx__set_error(err, SBX_EPROTO,
                              "the server answered the WebSocket upgrade with %d%s%s, not 101 "
                              "Switching Protocols",
                              *status, *shown ? " " : "", shown);
    }
    bool upgrade = false, connection = false;
    int n_accept = 0, n_proto = 0;
    const char *accept = NULL, *proto = NULL;
    size_t accept_len = 0, proto_len = 0;
    for (const char *q = nl + 1; q < end;) {
        const char *e = memchr(q, '\n', (size_t)(end - q));
        const char *next = e ? e + 1 : end;
        if (!e)
            e = end;
        if (e > q && e[-1] == '\r')
            e--;
        const char *colon = memchr(q, ':', (size_t)(e - q));
        /* A blank, folded or malformed line carries nothing the checks below read. */
        if (colon && colon > q && !ows(q[0])) {
            const char *v = colon + 1, *ve = e;
            while (v < ve && ows(*v))
                v++;
            while (ve > v && ows(ve[-1]))
                ve--;
            size_t nl_ = (size_t)(colon - q), vl = (size_t)(ve - v);
            if (name_is(q, nl_, "Upgrade")) {
                upgrade |= list_has(v, vl, "websocket");
            } else if (name_is(q, nl_, "Connection")) {
                connection |= list_has(v, vl, "upgrade");
            } else if (name_is(q, nl_, "Sec-WebSocket-Accept")) {
                n_accept++;
                accept = v;
                accept_len = vl;
            } else if (name_is(q, nl_, "Sec-WebSocket-Extensions") && vl) {
                printable(shown, 81, v, vl);
                return sbx__set_error(err, SBX_EPROTO,
                                      "the server turned on the WebSocket extension '%s', which "
                                      "was not asked for",
                                      shown);
            } else if (name_is(q, nl_, "Sec-WebSocket-Protocol") && vl) {
                n_proto++;
                proto = v;
                proto_len = vl;
            }
        }
        q = next;
    }
    if (!upgrade)
        return sbx__set_error(err, SBX_EPROTO,
                              "the server's 101 answer has no 'Upgrade: websocket' header");
    if (!connection)
        return sbx__set_error(err, SBX_EPROTO,
                              "the server's 101 answer has no 'Connection: Upgrade' header");
    if (n_accept != 1)
        return sbx__set_error(err, SBX_EPROTO,
                              "the server's 101 answer has %s "
                              "Sec-WebSocket-Accept header",
                              n_accept ? "more than one" : "no");
    char want[29];
    sbx__ws_accept(key, want);
    if (accept_len != 28 || memcmp(accept, want, 28) != 0) {
        printable(shown, 61, accept, accept_len);
        return sbx__set_error(err, SBX_EPROTO,
                              "the server's Sec-WebSocket-Accept '%s' is not '%s', the one its "
                              "key asks for: not a WebSocket server, or a proxy in the way",
                              shown, want);
    }
    if (n_proto > 1)
        return sbx__set_error(err, SBX_EPROTO,
                              "the server picked more than one WebSocket subprotocol");
    if (n_proto == 1) {
        printable(shown, 81, proto, proto_len);
        for (size_t i = 0; i < n_protocols; i++) {
            if (strlen(protocols[i]) == proto_len && !memcmp(protocols[i], proto, proto_len)) {
                if (!(*protocol = strdup(protocols[i])))
                    return sbx__set_error(err, SBX_ENOMEM, "out of memory");
                return SBX_OK;
            }
        }
        return sbx__set_error(err, SBX_EPROTO,
                              "the server picked the WebSocket subprotocol '%s', which was not "
                              "asked for",
                              shown);
    }
    return SBX_OK;
}
