/*
 * One protocol stream: reads frames and dispatches them by type and channel;
 * queues outgoing frames and writes them as the socket accepts. A malformed
 * frame closes this stream (with an ERROR frame when possible) and nothing
 * else: other connections and their commands carry on.
 */
#include "agent/agent.h"
#include "proto/pty.h"
#include "proto/procs.h"
#include "proto/forward.h" /* [endpoint] */

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

static void on_readable(struct watch *w, uint32_t events);
static void on_writable(struct watch *w, uint32_t events);

static void conn_free(void *p)
{
    struct conn *c = p;
    sbx__proto_reader_free(&c->rd);
    while (c->qhead) {
        struct obuf *o = c->qhead;
        c->qhead = o->next;
        free(o->data);
        free(o);
    }
    free(c);
}

static void send_hello(struct conn *c)
{
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx_msg_hello h = {SBX_PROTO_MAGIC, SBX_PROTO_MIN_VERSION, SBX_PROTO_VERSION,
                       SBX_PROTO_MAX_PAYLOAD, (char *)AGENT_VERSION};
    sbx__msg_hello_encode(&b, &h);
    conn_send(c, &b, SBX_MSG_HELLO, 0);
}

struct conn *conn_new(int fd_in, int fd_out)
{
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    fcntl(fd_in, F_SETFL, fcntl(fd_in, F_GETFL) | O_NONBLOCK);
    fcntl(fd_out, F_SETFL, fcntl(fd_out, F_GETFL) | O_NONBLOCK);
    sbx__proto_reader_init(&c->rd, SBX_PROTO_MAX_PAYLOAD);
    c->same_fd = fd_in == fd_out;
    watch_init(&c->in, fd_in, on_readable);
    /* A socket registers once for both directions: `out` mirrors `in` then. */
    watch_init(&c->out, c->same_fd ? -1 : fd_out, on_writable);
    watch_set(&c->in, EPOLLIN);
    send_hello(c);
    return c;
}

static int out_fd(const struct conn *c)
{
    return c->same_fd ? c->in.fd : c->out.fd;
}

static void want_write(struct conn *c, bool on)
{
    if (c->same_fd)
        watch_set(&c->in, EPOLLIN | (on ? EPOLLOUT : 0));
    else
        watch_set(&c->out, on ? EPOLLOUT : 0);
}

/* Writes as much of the queue as the fd takes. -1 when the stream broke. */
static int flush(struct conn *c)
{
    while (c->qhead) {
        struct iovec iov[16];
        int n = 0;
        for (struct obuf *o = c->qhead; o && n < 16; o = o->next, n++) {
            iov[n].iov_base = o->data + o->off;
            iov[n].iov_len = o->len - o->off;
        }
        ssize_t w = writev(out_fd(c), iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                break;
            return -1;
        }
        c->queued -= (size_t)w;
        while (w > 0) {
            struct obuf *o = c->qhead;
            size_t left = o->len - o->off;
            if ((size_t)w < left) {
                o->off += (size_t)w;
                break;
            }
            w -= (ssize_t)left;
            c->qhead = o->next;
            if (!c->qhead)
                c->qtail = NULL;
            free(o->data);
            free(o);
        }
    }
    want_write(c, c->qhead != NULL);
    if (c->throttled && c->queued < AGENT_QUEUE_LOW)
        conn_resume(c);
    return 0;
}

static void enqueue(struct conn *c, uint8_t *data, size_t len)
{
    struct obuf *o = c->write_failed ? NULL : malloc(sizeof(*o));
    if (!o) {
        /* Closing here would free channels our caller is still using: defer it. */
        free(data);
        c->write_failed = true;
        return;
    }
    o->next = NULL;
    o->data = data;
    o->len = len;
    o->off = 0;
    if (c->qtail)
        c->qtail->next = o;
    else
        c->qhead = o;
    c->qtail = o;
    c->queued += len;
    if (c->queued > AGENT_QUEUE_HIGH)
        c->throttled = true;
    /* Only the first frame of an idle queue is written now; the rest follow on EPOLLOUT. */
    if (c->qhead == o && flush(c) < 0)
        c->write_failed = true;
}

void conn_send(struct conn *c, sbx_pbuf *b, uint8_t type, uint32_t channel)
{
    if (c->dead) {
        sbx__pbuf_free(b);
        return;
    }
    if (sbx__pbuf_finish(b, type, channel) < 0) {
        sbx__pbuf_free(b);
        c->write_failed = true;
        return;
    }
    uint8_t *data = b->data;
    size_t len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    enqueue(c, data, len);
}

void conn_send_raw(struct conn *c, uint8_t type, uint32_t channel, const void *p, size_t n)
{
    if (c->dead)
        return;
    uint8_t *data = malloc(SBX_PROTO_HEADER + n);
    if (!data) {
        c->write_failed = true;
        return;
    }
    sbx__proto_put_header(data, type, channel, (uint32_t)n);
    if (n)
        memcpy(data + SBX_PROTO_HEADER, p, n);
    enqueue(c, data, SBX_PROTO_HEADER + n);
}

void conn_chan_add(struct conn *c, struct chan *ch)
{
    ch->next = c->chans;
    c->chans = ch;
}

void conn_chan_remove(struct conn *c, struct chan *ch)
{
    for (struct chan **pp = &c->chans; *pp; pp = &(*pp)->next) {
        if (*pp == ch) {
            *pp = ch->next;
            ch->next = NULL;
            return;
        }
    }
}

struct chan *conn_chan_find(struct conn *c, uint32_t id)
{
    for (struct chan *ch = c->chans; ch; ch = ch->next)
        if (ch->id == id)
            return ch;
    return NULL;
}

void conn_resume(struct conn *c)
{
    c->throttled = false;
    for (struct chan *ch = c->chans, *next; ch; ch = next) {
        next = ch->next; /* resuming may finish the exec and unlink it */
        if (ch->kind == CHAN_EXEC)
            exec_resume(ch);
        else if (ch->kind == CHAN_PTY)
            pty_resume(ch);
    }
    /* Downloads restart from conns_pump() after this batch. */
}

void conn_close(struct conn *c, const char *why)
{
    if (c->dead)
        return;
    c->dead = true;
    if (why && !c->exit_on_close)
        agent_log("closing a connection: %s", why);
    /* Commands of a stream nobody reads any more are killed, transfers dropped. */
    while (c->chans) {
        struct chan *ch = c->chans;
        c->chans = ch->next;
        ch->next = NULL;
        if (ch->kind == CHAN_EXEC)
            exec_detach(ch);
        else if (ch->kind == CHAN_PTY)
            pty_detach(ch);
        else
            file_abort(c, ch);
    }
    watch_close(&c->in);
    watch_close(&c->out);
    agent_defer_free(c, conn_free);
}

/* A protocol violation: tell the host why (best effort), then close. */
static void proto_error(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void proto_error(struct conn *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_status_encode(&b, EPROTO, msg);
    if (sbx__pbuf_finish(&b, SBX_MSG_ERROR, 0) == 0) {
        /* One direct non-blocking write; a full socket just loses the courtesy. */
        ssize_t n = write(out_fd(c), b.data, b.len);
        (void)n;
    }
    sbx__pbuf_free(&b);
    conn_close(c, msg);
}

static void dispatch(struct conn *c, const sbx_frame *f)
{
    if (!c->got_hello) {
        sbx_msg_hello *h = NULL;
        if (f->type != SBX_MSG_HELLO || f->channel != 0 || sbx__msg_hello_decode(f, &h) < 0) {
            proto_error(c, "expected a HELLO frame first (got type 0x%02x)", f->type);
            return;
        }
        sbx_msg_hello mine = {SBX_PROTO_MAGIC, SBX_PROTO_MIN_VERSION, SBX_PROTO_VERSION, 0, NULL};
        int v = sbx__proto_negotiate(&mine, h);
        free(h);
        if (v < 0) {
            proto_error(c, "no common protocol version (agent speaks %d..%d)",
                        SBX_PROTO_MIN_VERSION, SBX_PROTO_VERSION);
            return;
        }
        c->got_hello = true;
        c->version = v;
        return;
    }
    struct chan *ch = f->channel ? conn_chan_find(c, f->channel) : NULL;
    switch (f->type) {
    case SBX_MSG_PING: {
        uint64_t cookie;
        if (sbx__msg_u64_decode(f, &cookie) < 0) {
            proto_error(c, "malformed PING");
            return;
        }
        sbx_pbuf b = {0};
        sbx__pbuf_begin(&b);
        sbx__msg_u64_encode(&b, cookie);
        conn_send(c, &b, SBX_MSG_PONG, f->channel);
        return;
    }
    case SBX_MSG_EXEC:
    case SBX_MSG_FILE_PUT:
    case SBX_MSG_FILE_GET:
        if (f->channel == 0 || ch) {
            proto_error(c, "%s on channel %u, which is 0 or already open",
                        sbx__proto_type_name(f->type), f->channel);
            return;
        }
        int rc;
        if (f->type == SBX_MSG_EXEC)
            rc = exec_start(c, f->channel, f);
        else if (f->type == SBX_MSG_FILE_PUT)
            rc = file_put_start(c, f->channel, f);
        else
            rc = file_get_start(c, f->channel, f);
        if (rc < 0)
            proto_error(c, "malformed %s payload", sbx__proto_type_name(f->type));
        return;
    case SBX_MSG_PTY_OPEN:
    case SBX_MSG_PTY_ATTACH:
        if (f->channel == 0 || ch) {
            proto_error(c, "%s on channel %u, which is 0 or already open",
                        sbx__proto_type_name(f->type), f->channel);
            return;
        }
        __attribute__((fallthrough)); /* clang does not read the comment form */
    case SBX_MSG_PTY_RESIZE:
    case SBX_MSG_PTY_SIGNAL:
    case SBX_MSG_PTY_DETACH:
        if (c->version < 3) {
            proto_error(c, "%s needs protocol version 3", sbx__proto_type_name(f->type));
            return;
        }
        if (pty_frame(c, ch, f) < 0)
            proto_error(c, "malformed %s payload", sbx__proto_type_name(f->type));
        return;
    case SBX_MSG_PTY_LIST:
    case SBX_MSG_PS:
        /* A one-frame question: the answer ends the channel, nothing stays open. */
        if (f->channel == 0 || ch) {
            proto_error(c, "%s on channel %u, which is 0 or already open",
                        sbx__proto_type_name(f->type), f->channel);
            return;
        }
        if (c->version < SBX_PROTO_PROCS_VERSION) {
            proto_error(c, "%s needs protocol version %d", sbx__proto_type_name(f->type),
                        SBX_PROTO_PROCS_VERSION);
            return;
        }
        if (f->len != 0) {
            proto_error(c, "malformed %s payload", sbx__proto_type_name(f->type));
            return;
        }
        if (f->type == SBX_MSG_PTY_LIST)
            pty_list(c, f->channel);
        else
            ps_list(c, f->channel);
        return;
    case SBX_MSG_STDIN:
        if (ch && ch->kind == CHAN_PTY) {
            pty_frame(c, ch, f);
            return;
        }
        /* Frames for a channel that already ended are expected (races): ignored. */
        if (ch && ch->kind == CHAN_EXEC)
            exec_stdin(c, ch, f);
        return;
    case SBX_MSG_OUTPUT_ACK: {
        uint64_t n;
        if (c->version < 5) {
            proto_error(c, "OUTPUT_ACK needs protocol version 5");
            return;
        }
        if (sbx__msg_u64_decode(f, &n) < 0) {
            proto_error(c, "malformed OUTPUT_ACK payload");
            return;
        }
        if (ch && ch->kind == CHAN_EXEC)
            exec_output_ack(ch, n);
        return;
    }
    case SBX_MSG_DATA:
        if (ch && ch->kind == CHAN_PUT)
            file_put_data(c, ch, f);
        return;
    case SBX_MSG_CANCEL:
        if (ch && ch->kind == CHAN_EXEC)
            exec_cancel(ch);
        else if (ch && ch->kind == CHAN_PTY)
            pty_frame(c, ch, f);
        else if (ch) {
            conn_chan_remove(c, ch);
            file_abort(c, ch);
        }
        return;
    case SBX_MSG_FORWARD: /* [endpoint] forward.c; the stream turns into the connection */
        if (f->channel == 0 || ch) {
            proto_error(c, "FORWARD on channel %u, which is 0 or already open", f->channel);
            return;
        }
        if (forward_start(c, f->channel, f) < 0)
            proto_error(c, "malformed FORWARD payload");
        return;
    case SBX_MSG_HELLO:
        proto_error(c, "a second HELLO");
        return;
    default:
        if (!sbx__proto_type_name(f->type))
            proto_error(c, "unknown frame type 0x%02x", f->type);
        else
            proto_error(c, "frame type %s is not valid from the host",
                        sbx__proto_type_name(f->type));
        return;
    }
}

static void on_readable(struct watch *w, uint32_t events)
{
    struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, in));
    if (events & EPOLLOUT) {
        if (flush(c) < 0) {
            conn_close(c, "write failed");
            return;
        }
    }
    if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        return;
    /* A bounded number of reads per event keeps one busy stream from starving the rest. */
    for (int round = 0; round < 16 && !c->dead; round++) {
        size_t avail;
        uint8_t *p = sbx__proto_reader_space(&c->rd, 64 * 1024, &avail);
        if (!p) {
            conn_close(c, "out of memory");
            return;
        }
        ssize_t n = read(c->in.fd, p, avail);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                return;
            conn_close(c, NULL);
            return;
        }
        if (n == 0) {
            conn_close(c, NULL);
            return;
        }
        sbx__proto_reader_commit(&c->rd, (size_t)n);
        sbx_frame f;
        int rc = 0;
        while (!c->dead && (rc = sbx__proto_reader_next(&c->rd, &f)) == 1)
            dispatch(c, &f);
        if (!c->dead && rc < 0) {
            proto_error(c, "malformed frame (bad length; max payload %u bytes)",
                        SBX_PROTO_MAX_PAYLOAD);
            return;
        }
    }
}

static void on_writable(struct watch *w, uint32_t events)
{
    (void)events;
    struct conn *c = (struct conn *)((char *)w - offsetof(struct conn, out));
    if (flush(c) < 0)
        conn_close(c, "write failed");
}

/* [endpoint] forward.c takes the socket over: see agent.h. */
int conn_hand_over(struct conn *c, uint8_t **pending, size_t *pending_len, uint8_t **rest,
                   size_t *rest_len)
{
    if (c->dead || !c->same_fd) {
        conn_close(c, NULL);
        return -1;
    }
    uint8_t *p = malloc(c->queued ? c->queued : 1);
    uint8_t *r = malloc(c->rd.len ? c->rd.len : 1);
    if (!p || !r) {
        free(p);
        free(r);
        conn_close(c, "out of memory");
        return -1;
    }
    size_t n = 0;
    for (struct obuf *o = c->qhead; o; o = o->next) {
        memcpy(p + n, o->data + o->off, o->len - o->off);
        n += o->len - o->off;
    }
    if (c->rd.len)
        memcpy(r, c->rd.buf + c->rd.start, c->rd.len);
    *rest_len = c->rd.len;
    *pending = p;
    *pending_len = n;
    *rest = r;
    int fd = c->in.fd;
    watch_set(&c->in, 0);
    c->in.fd = -1; /* conn_close must not close it */
    conn_close(c, NULL);
    return fd;
}
