/*
 * The host side of TCP forwarding into a box (forward.h). Each accepted
 * connection gets its own agent connection: HELLO and FORWARD(port) go out
 * at once, the agent's HELLO and STATUS are parsed with a bounded parser
 * (proto/forward.c), and from then on the relay copies bytes both ways
 * with a 64 KiB buffer per direction. One stream per connection keeps the
 * agent's side a plain byte copy (no framing, no flow control of its own:
 * TCP's), and a slow or stuck connection never holds up another.
 */
#include "kit/forward.h"
#include "proto/forward.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static time_t mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

int sbx__forward_listen(const char *addr, int port, int *bound, char *err, size_t err_len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t sl;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    const char *host = addr ? addr : "127.0.0.1";
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        sl = sizeof(*a4);
    } else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        sl = sizeof(*a6);
    } else {
        snprintf(err, err_len, "'%s' is not an IPv4 or IPv6 address", host);
        return -1;
    }
    if (port < 0 || port > 65535) {
        snprintf(err, err_len, "host port %d is not between 0 and 65535", port);
        return -1;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 1024) < 0) {
        int e = errno;
        snprintf(err, err_len, "cannot listen on %s:%d: %s%s", host, port, strerror(e),
                 e == EADDRINUSE ? " (another program has that port; pick another or 0)" : "");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        snprintf(err, err_len, "getsockname: %s", strerror(errno));
        close(fd);
        return -1;
    }
    *bound = ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
    return fd;
}

/* Connects to the agent and sends HELLO + FORWARD. Returns the non-blocking fd or -1. */
static int open_stream(const char *path, pid_t pid, int port, char *err, size_t err_len)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, err_len, "the agent socket path is too long");
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        snprintf(err, err_len, "cannot reach the box's agent: %s%s", strerror(errno),
                 errno == ENOENT || errno == ECONNREFUSED ? " (the box is stopped)" : "");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (pid > 0) {
        /* Only the box's own agent: a path is a name anybody with the directory could reuse. */
        struct ucred cr;
        socklen_t crl = sizeof(cr);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0 || cr.pid != pid) {
            snprintf(err, err_len, "the process behind %s is not the box's agent", path);
            close(fd);
            return -1;
        }
    }
    sbx_pbuf b = { 0 };
    sbx__pbuf_begin(&b);
    sbx_msg_hello h = { SBX_PROTO_MAGIC, SBX_PROTO_MIN_VERSION, SBX_PROTO_VERSION,
                        SBX_FORWARD_MAX_REPLY, (char *)"sbx-forward" };
    sbx__msg_hello_encode(&b, &h);
    int rc = sbx__pbuf_finish(&b, SBX_MSG_HELLO, 0);
    sbx_pbuf f = { 0 };
    sbx__pbuf_begin(&f);
    sbx__msg_forward_encode(&f, (uint32_t)port, 0);
    rc |= sbx__pbuf_finish(&f, SBX_MSG_FORWARD, SBX_FORWARD_CHANNEL);
    /* A fresh socket's buffer takes both small frames whole. */
    ssize_t w1 = rc < 0 ? -1 : send(fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    ssize_t w2 = w1 != (ssize_t)b.len ? -1 : send(fd, f.data, f.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    bool ok = w2 == (ssize_t)f.len;
    sbx__pbuf_free(&b);
    sbx__pbuf_free(&f);
    if (!ok) {
        snprintf(err, err_len, "cannot send FORWARD to the box's agent: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int sbx__forward_dial(const char *agent_socket, pid_t agent_pid, int port, char *err,
                      size_t err_len)
{
    int fd = open_stream(agent_socket, agent_pid, port, err, err_len);
    if (fd < 0)
        return -1;
    sbx_forward_reply rp;
    sbx__forward_reply_init(&rp);
    int rc = 0, e = 0;
    const uint8_t *rest = NULL;
    size_t rest_len = 0;
    while (rc == 0) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, 10000) <= 0) {
            snprintf(err, err_len, "the box's agent did not answer FORWARD");
            rc = -1;
            break;
        }
        uint8_t buf[512];
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n <= 0 && !(n < 0 && errno == EAGAIN)) {
            snprintf(err, err_len, "the box's agent closed the stream before answering FORWARD");
            rc = -1;
            break;
        }
        if (n > 0)
            rc = sbx__forward_reply_feed(&rp, buf, (size_t)n, &e, err, err_len, &rest, &rest_len);
    }
    /* A dialer reads nothing past STATUS before returning: the box speaks only when spoken to. */
    bool extra = rc == 1 && rest_len > 0;
    sbx__forward_reply_free(&rp);
    if (rc != 1 || extra) {
        if (extra)
            snprintf(err, err_len, "the box's server spoke first; use the forwarding loop");
        close(fd);
        return -1;
    }
    return fd;
}

/* --- the loop -------------------------------------------------------------- */

enum { EP_STOP, EP_LISTEN, EP_CLIENT, EP_AGENT };

struct ep {
    int kind;
    size_t index;        /* EP_STOP, EP_LISTEN: which one */
    struct fconn *c;     /* EP_CLIENT, EP_AGENT */
    int fd;
    uint32_t registered; /* the epoll events it is registered for; 0: not in the set */
};

/* How long the agent may take to answer FORWARD (its connect in the box included). */
#define HANDSHAKE_S 10

struct fconn {
    struct ep client, agent;
    bool up;
    time_t deadline; /* CLOCK_MONOTONIC seconds: the answer's deadline while !up */
    sbx_forward_reply reply;
    sbx_relay relay;
    struct fconn *prev, *next;
};

struct loop {
    int epfd;
    const sbx_forward_opts *o;
    struct fconn *conns;
    struct fconn *dead; /* ended in this batch of events, freed after it */
    unsigned n_conns, max;
    unsigned n_pending; /* connections still waiting for the agent's answer */
    time_t starved;     /* out of descriptors: accepting paused until then (0: not) */
    struct ep *listen;
    bool accepting;
};

static void logf_(struct loop *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(struct loop *l, const char *fmt, ...)
{
    if (!l->o->log)
        return;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    l->o->log(l->o->log_data, msg);
}

static void ep_set(struct loop *l, struct ep *e, uint32_t events)
{
    if (e->fd < 0 || e->registered == events)
        return;
    struct epoll_event ev = { .events = events, .data.ptr = e };
    int op = !e->registered ? EPOLL_CTL_ADD : events ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
    (void)epoll_ctl(l->epfd, op, e->fd, &ev);
    e->registered = events;
}

static void set_accepting(struct loop *l, bool on)
{
    if (l->accepting == on)
        return;
    l->accepting = on;
    for (size_t i = 0; i < l->o->n_listeners; i++)
        ep_set(l, &l->listen[i], on ? EPOLLIN : 0);
}

static void conn_end(struct loop *l, struct fconn *c)
{
    ep_set(l, &c->client, 0);
    ep_set(l, &c->agent, 0);
    close(c->client.fd);
    close(c->agent.fd);
    c->client.fd = c->agent.fd = -1;
    if (!c->up)
        l->n_pending--;
    sbx__forward_reply_free(&c->reply);
    sbx__relay_free(&c->relay);
    if (c->prev)
        c->prev->next = c->next;
    else
        l->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    /* Later events of this batch may still point at it. */
    c->prev = NULL;
    c->next = l->dead;
    l->dead = c;
    l->n_conns--;
    l->starved = 0;
    set_accepting(l, true);
}

static void bury(struct loop *l)
{
    while (l->dead) {
        struct fconn *c = l->dead;
        l->dead = c->next;
        free(c);
    }
}

static uint32_t to_ev(unsigned want)
{
    return (want & SBX_RELAY_IN ? EPOLLIN : 0) | (want & SBX_RELAY_OUT ? EPOLLOUT : 0);
}

static void conn_pump(struct loop *l, struct fconn *c, unsigned hup)
{
    if (sbx__relay_step(&c->relay, hup) <= 0) {
        conn_end(l, c);
        return;
    }
    /* Out of the set when waiting for nothing: level-triggered HUP would spin. */
    ep_set(l, &c->client, to_ev(sbx__relay_want(&c->relay, 0)));
    ep_set(l, &c->agent, to_ev(sbx__relay_want(&c->relay, 1)));
}

/* The agent's answer, until it says yes (the relay starts) or no (the client is closed). */
static void conn_handshake(struct loop *l, struct fconn *c, uint16_t port)
{
    /* Small reads: what follows STATUS in one must fit the relay's buffer. */
    uint8_t buf[4096];
    ssize_t n = recv(c->agent.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        logf_(l, "forwarding to box port %u: the agent closed the stream", port);
        conn_end(l, c);
        return;
    }
    int e = 0;
    char msg[512];
    const uint8_t *rest = NULL;
    size_t rest_len = 0;
    int rc = sbx__forward_reply_feed(&c->reply, buf, (size_t)n, &e, msg, sizeof(msg), &rest,
                                     &rest_len);
    if (rc == 0)
        return;
    if (rc < 0 || sbx__relay_init(&c->relay, c->client.fd, c->agent.fd) < 0 ||
        sbx__relay_preload(&c->relay, 1, rest, rest_len) < 0) {
        logf_(l, "forwarding to box port %u: %s", port, rc < 0 ? msg : "out of memory");
        conn_end(l, c);
        return;
    }
    c->up = true;
    l->n_pending--;
    sbx__forward_reply_free(&c->reply);
    conn_pump(l, c, 0);
}

static void on_accept(struct loop *l, size_t i)
{
    const sbx_forward_listener *li = &l->o->listeners[i];
    /* A bounded batch per wake-up: the other listeners and connections get their turn. */
    for (int k = 0; k < 64 && l->n_conns < l->max; k++) {
        int cfd = accept4(li->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /*
                 * The pending connection stays queued and the listener
                 * readable: without a pause the level-triggered loop would
                 * spin. Accepting resumes when a connection ends, or in a second.
                 */
                logf_(l, "accept: %s; new connections wait", strerror(errno));
                set_accepting(l, false);
                l->starved = mono_s() + 1;
            } else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
                logf_(l, "accept: %s", strerror(errno));
            }
            return;
        }
        char err[300];
        int afd = open_stream(l->o->agent_socket, l->o->agent_pid, li->port, err, sizeof(err));
        struct fconn *c = afd >= 0 ? calloc(1, sizeof(*c)) : NULL;
        if (!c) {
            logf_(l, "forwarding to box port %u: %s", li->port, afd < 0 ? err : "out of memory");
            if (afd >= 0)
                close(afd);
            close(cfd);
            continue;
        }
        c->client = (struct ep){ EP_CLIENT, i, c, cfd, 0 };
        c->agent = (struct ep){ EP_AGENT, i, c, afd, 0 };
        sbx__forward_reply_init(&c->reply);
        c->deadline = mono_s() + HANDSHAKE_S;
        l->n_pending++;
        c->next = l->conns;
        if (l->conns)
            l->conns->prev = c;
        l->conns = c;
        l->n_conns++;
        /* The client waits (its bytes queue in the kernel) until the agent says yes. */
        ep_set(l, &c->agent, EPOLLIN);
    }
    if (l->n_conns >= l->max)
        set_accepting(l, false);
}

int sbx__forward_run(const sbx_forward_opts *o, char *err, size_t err_len)
{
    struct loop l = { .o = o, .max = o->max_conns ? o->max_conns : SBX_FORWARD_MAX_CONNS };
    l.epfd = epoll_create1(EPOLL_CLOEXEC);
    struct ep *stops = calloc(o->n_stop_fds + 1, sizeof(*stops));
    l.listen = calloc(o->n_listeners + 1, sizeof(*l.listen));
    if (l.epfd < 0 || !stops || !l.listen) {
        snprintf(err, err_len, "cannot start forwarding: %s", strerror(errno ? errno : ENOMEM));
        if (l.epfd >= 0)
            close(l.epfd);
        free(stops);
        free(l.listen);
        return -1;
    }
    for (size_t i = 0; i < o->n_stop_fds; i++) {
        stops[i] = (struct ep){ EP_STOP, i, NULL, o->stop_fds[i], 0 };
        ep_set(&l, &stops[i], EPOLLIN);
    }
    for (size_t i = 0; i < o->n_listeners; i++)
        l.listen[i] = (struct ep){ EP_LISTEN, i, NULL, o->listeners[i].fd, 0 };
    set_accepting(&l, true);
    int stopped = -1;
    struct epoll_event evs[64];
    while (stopped < 0) {
        /* A box that never answers FORWARD must not hold a slot for ever: look each second. */
        int n = epoll_wait(l.epfd, evs, 64, l.n_pending || l.starved ? 1000 : -1);
        if (n < 0 && errno != EINTR) {
            snprintf(err, err_len, "epoll_wait: %s", strerror(errno));
            break;
        }
        /*
         * Events of one batch may name a connection an earlier event of the
         * batch ended: ends are deferred by marking, not freeing mid-batch.
         */
        for (int i = 0; i < n && stopped < 0; i++) {
            struct ep *e = evs[i].data.ptr;
            if (e->kind == EP_STOP) {
                stopped = (int)e->index;
            } else if (e->kind == EP_LISTEN) {
                on_accept(&l, e->index);
            } else {
                struct fconn *c = e->c;
                /* Ended earlier in this batch: see below. */
                if (c->client.fd < 0)
                    continue;
                unsigned hup = evs[i].events & (EPOLLHUP | EPOLLERR)
                                   ? (e->kind == EP_CLIENT ? 1u : 2u)
                                   : 0u;
                if (!c->up && e->kind == EP_AGENT)
                    conn_handshake(&l, c, o->listeners[e->index].port);
                else if (c->up)
                    conn_pump(&l, c, hup);
            }
        }
        if (l.starved && mono_s() >= l.starved) {
            l.starved = 0;
            if (l.n_conns < l.max)
                set_accepting(&l, true);
        }
        if (l.n_pending) {
            time_t now = mono_s();
            for (struct fconn *c = l.conns, *next; c; c = next) {
                next = c->next;
                if (!c->up && now >= c->deadline) {
                    logf_(&l, "forwarding to box port %u: the agent did not answer within %d s",
                          o->listeners[c->agent.index].port, HANDSHAKE_S);
                    conn_end(&l, c);
                }
            }
        }
        bury(&l);
    }
    while (l.conns)
        conn_end(&l, l.conns);
    bury(&l);
    close(l.epfd);
    free(stops);
    free(l.listen);
    return stopped;
}
