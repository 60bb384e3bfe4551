/*
 * Forwarded TCP connections (docs/agent-protocol.md, "Forwarding"): a
 * stream whose only request is FORWARD(port) stops being a protocol stream.
 * The agent connects to 127.0.0.1:port in the box (it runs in the box's
 * network namespace, so a server bound to the box's loopback is reachable
 * with no network device at all), answers STATUS, and from then on copies
 * bytes both ways (proto/forward.c's relay: a bounded buffer per direction,
 * a half-close passed on as shutdown(SHUT_WR), both ends closed when either
 * fails). Errors before the hand-over are STATUS frames on the ordinary
 * stream, which the host then closes.
 */
#include "agent/agent.h"
#include "proto/forward.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* Forwarded connections the agent carries at once; more are refused (EMFILE). */
#define AGENT_MAX_FORWARDS 1024

struct fwd {
    struct watch host, box;
    sbx_relay relay;
    bool up;          /* the box side is connected and STATUS queued */
    uint32_t channel; /* FORWARD's channel, for the STATUS */
    uint16_t port;
    uint8_t *pending; /* the stream's unsent frames (HELLO), sent before STATUS */
    size_t pending_len;
};

static unsigned n_fwds;

static void fwd_free(void *p)
{
    struct fwd *f = p;
    sbx__relay_free(&f->relay);
    free(f->pending);
    free(f);
}

static void fwd_close(struct fwd *f)
{
    if (f->host.fd < 0 && f->box.fd < 0)
        return;
    watch_close(&f->host);
    watch_close(&f->box);
    n_fwds--;
    agent_defer_free(f, fwd_free);
}

static uint32_t ev(unsigned want)
{
    return (want & SBX_RELAY_IN ? EPOLLIN : 0) | (want & SBX_RELAY_OUT ? EPOLLOUT : 0);
}

static void fwd_arm(struct fwd *f)
{
    /*
     * A side with nothing to wait for leaves the epoll set: registered with
     * no events it would still report HUP on every wait (level-triggered).
     */
    watch_set(&f->host, ev(sbx__relay_want(&f->relay, 0)));
    watch_set(&f->box, ev(sbx__relay_want(&f->relay, 1)));
}

static void fwd_pump(struct fwd *f, unsigned hup)
{
    int rc = sbx__relay_step(&f->relay, hup);
    if (rc <= 0) {
        fwd_close(f);
        return;
    }
    fwd_arm(f);
}

/* The STATUS frame, built on the stack side of a pbuf. */
static int status_frame(sbx_pbuf *b, uint32_t channel, int errnum, const char *msg)
{
    sbx__pbuf_begin(b);
    sbx__msg_status_encode(b, errnum, msg);
    return sbx__pbuf_finish(b, SBX_MSG_STATUS, channel);
}

/* The box side's connect finished: STATUS, then the relay; or the error and the end. */
static void fwd_connected(struct fwd *f)
{
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(f->box.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    char msg[160] = "";
    if (err)
        snprintf(msg, sizeof(msg), "cannot connect to 127.0.0.1:%u in the box: %s",
                 (unsigned)f->port, strerror(err));
    sbx_pbuf b = { 0 };
    if (status_frame(&b, f->channel, err, msg) < 0 ||
        sbx__relay_preload(&f->relay, 1, f->pending, f->pending_len) < 0 ||
        sbx__relay_preload(&f->relay, 1, b.data, b.len) < 0) {
        sbx__pbuf_free(&b);
        fwd_close(f);
        return;
    }
    sbx__pbuf_free(&b);
    free(f->pending);
    f->pending = NULL;
    f->pending_len = 0;
    if (err) {
        /* One try at telling the host why (its buffer is empty: it fits), then the end. */
        sbx_relay_dir *d = &f->relay.dir[1];
        ssize_t n = send(f->host.fd, d->buf + d->off, d->len, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)n;
        fwd_close(f);
        return;
    }
    f->up = true;
    fwd_pump(f, 0);
}

static void on_host(struct watch *w, uint32_t events)
{
    struct fwd *f = (struct fwd *)((char *)w - offsetof(struct fwd, host));
    fwd_pump(f, events & (EPOLLHUP | EPOLLERR) ? 1u : 0u);
}

static void on_box(struct watch *w, uint32_t events)
{
    struct fwd *f = (struct fwd *)((char *)w - offsetof(struct fwd, box));
    if (!f->up) {
        fwd_connected(f);
        return;
    }
    fwd_pump(f, events & (EPOLLHUP | EPOLLERR) ? 2u : 0u);
}

/* A refusal on the still-ordinary stream; the host closes it. */
static void refuse(struct conn *c, uint32_t channel, int errnum, const char *msg)
{
    sbx_pbuf b = { 0 };
    sbx__pbuf_begin(&b);
    sbx__msg_status_encode(&b, errnum, msg);
    conn_send(c, &b, SBX_MSG_STATUS, channel);
}

int forward_start(struct conn *c, uint32_t channel, const sbx_frame *fr)
{
    uint32_t port, flags;
    if (sbx__msg_forward_decode(fr, &port, &flags) < 0)
        return -1;
    if (c->chans || !c->same_fd) {
        refuse(c, channel, EBUSY, "FORWARD must be the only request of a socket stream");
        return 0;
    }
    if (n_fwds >= AGENT_MAX_FORWARDS) {
        refuse(c, channel, EMFILE, "the box carries too many forwarded connections (1024)");
        return 0;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        char msg[128];
        snprintf(msg, sizeof(msg), "cannot make a socket in the box: %s", strerror(errno));
        refuse(c, channel, errno, msg);
        return 0;
    }
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    if (rc < 0 && errno != EINPROGRESS) {
        int e = errno;
        char msg[160];
        snprintf(msg, sizeof(msg), "cannot connect to 127.0.0.1:%u in the box: %s",
                 (unsigned)port, strerror(e));
        close(fd);
        refuse(c, channel, e, msg);
        return 0;
    }
    struct fwd *f = calloc(1, sizeof(*f));
    uint8_t *rest = NULL;
    size_t rest_len = 0;
    if (!f || sbx__relay_init(&f->relay, -1, fd) < 0) {
        free(f);
        close(fd);
        refuse(c, channel, ENOMEM, "out of memory");
        return 0;
    }
    int host_fd = conn_hand_over(c, &f->pending, &f->pending_len, &rest, &rest_len);
    /* What the host sent past FORWARD (it should wait for STATUS) goes to the box first. */
    if (host_fd < 0 || f->pending_len + 64 > SBX_RELAY_BUF ||
        sbx__relay_preload(&f->relay, 0, rest, rest_len) < 0) {
        free(rest);
        if (host_fd >= 0)
            close(host_fd);
        close(fd);
        fwd_free(f);
        return 0;
    }
    free(rest);
    f->relay.fd[0] = host_fd;
    f->channel = channel;
    f->port = (uint16_t)port;
    watch_init(&f->host, host_fd, on_host);
    watch_init(&f->box, fd, on_box);
    n_fwds++;
    if (rc == 0)
        fwd_connected(f);
    else
        watch_set(&f->box, EPOLLOUT);
    return 0;
}
