/*
 * TCP forwarding through the agent: the FORWARD codec, the host's parser of
 * the answer, and the relay (forward.h says how a forwarding stream goes).
 */
#include "proto/forward.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

const char *sbx__proto_forward_type_name(uint8_t type)
{
    return type == SBX_MSG_FORWARD ? "FORWARD" : NULL;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int sbx__msg_forward_encode(sbx_pbuf *b, uint32_t port, uint32_t flags)
{
    sbx__pbuf_u32(b, port);
    sbx__pbuf_u32(b, flags);
    return b->oom ? -1 : 0;
}

int sbx__msg_forward_decode(const sbx_frame *f, uint32_t *port, uint32_t *flags)
{
    if (f->len != 8)
        return -1;
    uint32_t p = get32(f->payload);
    if (p < 1 || p > 65535)
        return -1;
    *port = p;
    *flags = get32(f->payload + 4);
    return 0;
}

/* --- the host's parser of the answer ------------------------------------- */

void sbx__forward_reply_init(sbx_forward_reply *p)
{
    memset(p, 0, sizeof(*p));
    sbx__proto_reader_init(&p->rd, SBX_FORWARD_MAX_REPLY);
}

void sbx__forward_reply_free(sbx_forward_reply *p) { sbx__proto_reader_free(&p->rd); }

static int reply_fail(sbx_forward_reply *p, int *errnum, int e, char *msg, size_t msg_len,
                      const char *fmt, const char *arg)
{
    p->state = -1;
    *errnum = e;
    if (msg_len)
        snprintf(msg, msg_len, fmt, arg);
    return -1;
}

/* A copy of an agent's message that prints as one line of text. */
static void clean_copy(char *dst, size_t dst_len, const char *src)
{
    size_t i = 0;
    for (; dst_len && src[i] && i + 1 < dst_len; i++)
        dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
    if (dst_len)
        dst[i] = 0;
}

int sbx__forward_reply_feed(sbx_forward_reply *p, const void *data, size_t n, int *errnum,
                            char *msg, size_t msg_len, const uint8_t **rest, size_t *rest_len)
{
    if (p->state)
        return p->state;
    if (sbx__proto_reader_feed(&p->rd, data, n) < 0)
        return reply_fail(p, errnum, ENOMEM, msg, msg_len, "%s", "out of memory");
    sbx_frame f;
    int rc;
    while ((rc = sbx__proto_reader_next(&p->rd, &f)) == 1) {
        if (!p->got_hello) {
            sbx_msg_hello *h = NULL;
            if (f.type != SBX_MSG_HELLO || f.channel != 0 || sbx__msg_hello_decode(&f, &h) < 0)
                return reply_fail(p, errnum, EPROTO, msg, msg_len, "%s",
                                  "the agent did not answer with a HELLO");
            bool magic = h->magic == SBX_PROTO_MAGIC;
            free(h);
            if (!magic)
                return reply_fail(p, errnum, EPROTO, msg, msg_len, "%s",
                                  "the peer is not an sbx agent (bad HELLO magic)");
            p->got_hello = true;
            continue;
        }
        if (f.type == SBX_MSG_ERROR || (f.type == SBX_MSG_STATUS && f.channel == SBX_FORWARD_CHANNEL)) {
            sbx_msg_status *s = NULL;
            if (sbx__msg_status_decode(&f, &s) < 0)
                return reply_fail(p, errnum, EPROTO, msg, msg_len, "%s",
                                  "the agent's answer to FORWARD is malformed");
            if (f.type == SBX_MSG_STATUS && s->errnum == 0) {
                free(s);
                p->state = 1;
                /* What came after the STATUS frame is the box's first data. */
                *rest = p->rd.buf + p->rd.start;
                *rest_len = p->rd.len;
                return 1;
            }
            char text[512];
            clean_copy(text, sizeof(text), s->message);
            int e = f.type == SBX_MSG_ERROR ? EPROTO : s->errnum;
            free(s);
            /* An agent without forwarding closes the stream with ERROR "unknown frame type". */
            return reply_fail(p, errnum, e > 0 ? e : EPROTO, msg, msg_len, "%s", text);
        }
        return reply_fail(p, errnum, EPROTO, msg, msg_len, "%s",
                          "the agent answered FORWARD with an unexpected frame");
    }
    if (rc < 0)
        return reply_fail(p, errnum, EPROTO, msg, msg_len, "%s",
                          "the agent's answer to FORWARD is not a valid frame");
    return 0;
}

/* --- the relay ------------------------------------------------------------ */

int sbx__relay_init(sbx_relay *r, int a, int b)
{
    memset(r, 0, sizeof(*r));
    r->fd[0] = a;
    r->fd[1] = b;
    r->dir[0].buf = malloc(SBX_RELAY_BUF);
    r->dir[1].buf = malloc(SBX_RELAY_BUF);
    if (!r->dir[0].buf || !r->dir[1].buf) {
        sbx__relay_free(r);
        return -1;
    }
    return 0;
}

void sbx__relay_free(sbx_relay *r)
{
    free(r->dir[0].buf);
    free(r->dir[1].buf);
    r->dir[0].buf = r->dir[1].buf = NULL;
}

int sbx__relay_preload(sbx_relay *r, int from, const void *data, size_t n)
{
    sbx_relay_dir *d = &r->dir[from];
    if (n > SBX_RELAY_BUF - d->off - d->len)
        return -1;
    memcpy(d->buf + d->off + d->len, data, n);
    d->len += n;
    return 0;
}

/* One direction: read while there is room, write while there are bytes. */
static void relay_dir(sbx_relay *r, int i)
{
    sbx_relay_dir *d = &r->dir[i];
    int src = r->fd[i], dst = r->fd[1 - i];
    /* A few rounds, not until EAGAIN: one busy connection must not starve the others. */
    for (int round = 0; round < 4 && !r->failed; round++) {
        bool moved = false;
        if (!d->eof && d->off + d->len < SBX_RELAY_BUF) {
            if (d->len == 0)
                d->off = 0;
            ssize_t n = recv(src, d->buf + d->off + d->len, SBX_RELAY_BUF - d->off - d->len,
                             MSG_DONTWAIT);
            if (n > 0) {
                d->len += (size_t)n;
                moved = true;
            } else if (n == 0) {
                d->eof = true;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                r->failed = true;
                return;
            }
        }
        if (d->len > 0) {
            ssize_t n = send(dst, d->buf + d->off, d->len, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (n > 0) {
                d->off += (size_t)n;
                d->len -= (size_t)n;
                if (d->len == 0)
                    d->off = 0;
                moved = true;
            } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                r->failed = true;
                return;
            }
        }
        if (d->eof && d->len == 0 && !d->shut) {
            /* Half-close: the source is done sending; the other side still may. */
            if (shutdown(dst, SHUT_WR) < 0 && errno != ENOTCONN) {
                r->failed = true;
                return;
            }
            d->shut = true;
        }
        if (!moved)
            break;
    }
}

int sbx__relay_step(sbx_relay *r, unsigned hup)
{
    if (!r->failed)
        relay_dir(r, 0);
    if (!r->failed)
        relay_dir(r, 1);
    if (r->failed)
        return -1;
    if (r->dir[0].shut && r->dir[1].shut)
        return 0;
    /*
     * A side that hung up (or failed) and that we no longer read or write
     * can never let the relay finish: what is left would only fail later.
     */
    for (int i = 0; i < 2; i++)
        if ((hup & (1u << i)) && sbx__relay_want(r, i) == 0) {
            r->failed = true;
            return -1;
        }
    return 1;
}

unsigned sbx__relay_want(const sbx_relay *r, int side)
{
    unsigned w = 0;
    const sbx_relay_dir *in = &r->dir[side], *out = &r->dir[1 - side];
    if (!in->eof && in->off + in->len < SBX_RELAY_BUF)
        w |= SBX_RELAY_IN;
    if (out->len > 0)
        w |= SBX_RELAY_OUT;
    return w;
}
