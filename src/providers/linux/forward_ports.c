/*
 * [netw] The newer API's SupportsSandboxPortForwarding.forward_ports for
 * linux boxes: a box's own loopback ports carried to another address
 * (compose's `network_mode: service:x`: a service reaches its peer's ports
 * on its own 127.0.0.1). docs/networking.md, "Forwarding a box's loopback".
 *
 * Host side, no agent involved: a thread of the caller enters the box's
 * network namespace (setns moves only that thread), listens there on
 * 127.0.0.1:PORT for each port, and connects each accepted connection to
 * TARGET:PORT from the same namespace, so the outbound side leaves through
 * the box's own eth0 and reaches only what the box itself could reach. The
 * bytes are moved by the agent protocol's relay (src/proto/forward.h):
 * non-blocking, half-close passed on.
 */
#include "providers/linux/linux.h"
#include "proto/forward.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define FP_MAX_PORTS 64
#define FP_MAX_CONNS 256

struct fp_conn {
    int client, target;
    uint16_t port;
    bool connecting; /* the target's connect is in progress */
    sbx_relay relay;
};

struct fp {
    int nsfd, pidfd, cancel_fd;
    int stop_r; /* the caller's own stop: the forward could not become ready */
    int ready_w; /* the thread writes its setup's errno (0: listening) here */
    struct sockaddr_storage target;
    socklen_t target_len;
    size_t n;
    uint16_t ports[FP_MAX_PORTS];
    int listeners[FP_MAX_PORTS];
    struct fp_conn conns[FP_MAX_CONNS];
    size_t nconns;
    bool box_gone;
};

static void conn_close(struct fp *f, size_t i)
{
    struct fp_conn *c = &f->conns[i];
    if (!c->connecting)
        sbx__relay_free(&c->relay);
    close(c->client);
    close(c->target);
    f->conns[i] = f->conns[--f->nconns];
}

static void on_accept(struct fp *f, size_t li)
{
    int c = accept4(f->listeners[li], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0)
        return;
    if (f->nconns == FP_MAX_CONNS) {
        close(c);
        return;
    }
    /* Made in this thread, so in the box's namespace: it leaves through the box's eth0. */
    int t = socket(f->target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_storage to = f->target;
    if (to.ss_family == AF_INET)
        ((struct sockaddr_in *)&to)->sin_port = htons(f->ports[li]);
    else
        ((struct sockaddr_in6 *)&to)->sin6_port = htons(f->ports[li]);
    if (t < 0 || (connect(t, (struct sockaddr *)&to, f->target_len) < 0 && errno != EINPROGRESS)) {
        /* Refused at once: the client sees its connection closed, as with nothing listening. */
        if (t >= 0)
            close(t);
        close(c);
        return;
    }
    f->conns[f->nconns++] = (struct fp_conn){ .client = c, .target = t, .port = f->ports[li],
                                             .connecting = true };
}

static short events_of(unsigned want)
{
    return (short)(((want & SBX_RELAY_IN) ? POLLIN : 0) | ((want & SBX_RELAY_OUT) ? POLLOUT : 0));
}

static void *fp_thread(void *arg)
{
    struct fp *f = arg;
    int e = 0;
    if (setns(f->nsfd, CLONE_NEWNET) < 0)
        e = errno;
    for (size_t i = 0; !e && i < f->n; i++) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(f->ports[i]),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int one = 1;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 128) < 0) {
            e = errno;
            if (s >= 0)
                close(s);
            break;
        }
        f->listeners[i] = s;
    }
    ssize_t w = write(f->ready_w, &e, sizeof(e));
    (void)w;
    if (e)
        return NULL;
    struct pollfd *pfd = calloc(3 + FP_MAX_PORTS + 2 * FP_MAX_CONNS, sizeof(*pfd));
    while (pfd) {
        size_t k = 0;
        pfd[k++] = (struct pollfd){ .fd = f->cancel_fd, .events = POLLIN };
        pfd[k++] = (struct pollfd){ .fd = f->pidfd, .events = POLLIN };
        pfd[k++] = (struct pollfd){ .fd = f->stop_r, .events = POLLIN };
        for (size_t i = 0; i < f->n; i++)
            pfd[k++] = (struct pollfd){ .fd = f->listeners[i], .events = POLLIN };
        for (size_t i = 0; i < f->nconns; i++) {
            struct fp_conn *c = &f->conns[i];
            if (c->connecting) {
                pfd[k++] = (struct pollfd){ .fd = c->client, .events = 0 };
                pfd[k++] = (struct pollfd){ .fd = c->target, .events = POLLOUT };
            } else {
                pfd[k++] = (struct pollfd){ .fd = c->client,
                                            .events = events_of(sbx__relay_want(&c->relay, 0)) };
                pfd[k++] = (struct pollfd){ .fd = c->target,
                                            .events = events_of(sbx__relay_want(&c->relay, 1)) };
            }
        }
        if (poll(pfd, k, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pfd[0].revents || pfd[2].revents)
            break; /* cancelled */
        if (pfd[1].revents) {
            f->box_gone = true; /* the box's init exited */
            break;
        }
        /* Connections first (their slots are in pfd as built), from the last: closing swaps. */
        size_t base = 3 + f->n;
        for (size_t i = f->nconns; i-- > 0;) {
            struct fp_conn *c = &f->conns[i];
            short rc = pfd[base + 2 * i].revents, rt = pfd[base + 2 * i + 1].revents;
            if (c->connecting) {
                if (!rt && !(rc & (POLLHUP | POLLERR)))
                    continue;
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                if ((rc & (POLLHUP | POLLERR)) ||
                    getsockopt(c->target, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr ||
                    sbx__relay_init(&c->relay, c->client, c->target) < 0) {
                    c->connecting = true; /* no relay to free */
                    conn_close(f, i);
                    continue;
                }
                c->connecting = false;
                rc = rt = 0;
            }
            unsigned hup = ((rc & (POLLHUP | POLLERR)) ? 1u : 0u) |
                           ((rt & (POLLHUP | POLLERR)) ? 2u : 0u);
            if (sbx__relay_step(&c->relay, hup) <= 0)
                conn_close(f, i);
        }
        for (size_t i = 0; i < f->n; i++)
            if (pfd[3 + i].revents & POLLIN)
                on_accept(f, i);
    }
    free(pfd);
    while (f->nconns)
        conn_close(f, f->nconns - 1);
    return NULL;
}

int sbx_sandbox_forward_ports(sbx_sandbox *sb, const char *target_address, const int *ports,
                              size_t n_ports, const char *ready_file, int cancel_fd,
                              sbx_error **err)
{
    const char *sd = NULL;
    int net;
    const char *id = sbx_sandbox_id(sb);
    if (!sb || !sbx__linux_provider_extras(sbx_sandbox_provider(sb), &sd, &net))
        return sbx__set_error(err, sb ? SBX_ENOTSUP : SBX_EINVAL,
                              "forward_ports: only the linux provider forwards a box's ports "
                              "to another address");
    struct fp *f = calloc(1, sizeof(*f));
    if (!f)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    f->nsfd = f->pidfd = f->ready_w = f->stop_r = -1;
    f->cancel_fd = cancel_fd;
    for (size_t i = 0; i < FP_MAX_PORTS; i++)
        f->listeners[i] = -1;
    int rc = SBX_OK;
    int ready[2] = { -1, -1 }, stop[2] = { -1, -1 };
    json_t *rec = NULL;
    char *path = NULL;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&f->target;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&f->target;
    if (!target_address) {
        rc = sbx__set_error(err, SBX_EINVAL, "forward_ports: the target address is required");
    } else if (inet_pton(AF_INET, target_address, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        f->target_len = sizeof(*a4);
    } else if (inet_pton(AF_INET6, target_address, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        f->target_len = sizeof(*a6);
    } else {
        rc = sbx__set_error(err, SBX_EINVAL,
                            "forward_ports: the target '%.64s' must be an IPv4 or IPv6 address "
                            "(network_address gives a box's)",
                            target_address);
    }
    if (rc == SBX_OK && (n_ports < 1 || n_ports > FP_MAX_PORTS || !ports))
        rc = sbx__set_error(err, SBX_EINVAL, "forward_ports: 1 to %d ports", FP_MAX_PORTS);
    for (size_t i = 0; rc == SBX_OK && i < n_ports; i++) {
        if (ports[i] < 1 || ports[i] > 65535)
            rc = sbx__set_error(err, SBX_EINVAL,
                                "forward_ports: port %d is not between 1 and 65535", ports[i]);
        else
            f->ports[f->n++] = (uint16_t)ports[i];
    }
    if (rc == SBX_OK && (cancel_fd < 0 || !id))
        rc = sbx__set_error(err, cancel_fd < 0 ? SBX_EINVAL : SBX_ESTATE,
                            cancel_fd < 0 ? "forward_ports: a cancel fd is required"
                                          : "forward_ports: the sandbox is not started");
    if (rc == SBX_OK) {
        path = sbx__printf("%s/boxes/%s/record.json", sd, id);
        if (!path || sbx__load_private_json(path, 1u << 22, &rec, NULL) < 0)
            rc = sbx__set_error(err, SBX_ESTATE, "forward_ports: box %s is stopped", id);
    }
    if (rc == SBX_OK) {
        json_int_t pid = json_integer_value(json_object_get(rec, "init_pid"));
        char ns[64];
        snprintf(ns, sizeof(ns), "/proc/%lld/ns/net", (long long)pid);
        f->pidfd = pid > 0 ? sbx__linux_pidfd_open((pid_t)pid) : -1;
        /*
         * Without pidfds (kernels before 5.3, valgrind) the forward cannot
         * see the box end by itself: it runs until cancelled (poll skips
         * the -1), and the pid is checked by its start time instead.
         */
        bool no_pidfd = f->pidfd < 0 && errno == ENOSYS;
        unsigned long long start = no_pidfd ? sbx__linux_proc_start((pid_t)pid) : 0;
        f->nsfd = pid > 0 && (f->pidfd >= 0 || no_pidfd) ? open(ns, O_RDONLY | O_CLOEXEC) : -1;
        /* The pid is still the box's init once the namespace is open: not a recycled one. */
        struct pollfd pp = { .fd = f->pidfd, .events = POLLIN };
        if (f->nsfd < 0 || (no_pidfd ? sbx__linux_proc_start((pid_t)pid) != start
                                     : poll(&pp, 1, 0) != 0))
            rc = sbx__set_error(err, SBX_ESTATE, "forward_ports: box %s is stopped", id);
    }
    pthread_t t;
    bool started = false;
    if (rc == SBX_OK) {
        if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(stop, O_CLOEXEC) < 0) {
            rc = sbx__set_errno(err, SBX_EIO, errno, "forward_ports: pipe");
        } else {
            f->ready_w = ready[1];
            f->stop_r = stop[0];
            int pe = pthread_create(&t, NULL, fp_thread, f);
            if (pe)
                rc = sbx__set_errno(err, SBX_EIO, pe, "forward_ports: cannot start a thread");
            started = pe == 0;
        }
    }
    if (started) {
        int e = -1;
        if (read(ready[0], &e, sizeof(e)) != (ssize_t)sizeof(e))
            e = EIO;
        if (e) {
            rc = sbx__set_errno(err, e == EADDRINUSE ? SBX_ESTATE : SBX_EIO, e,
                                "forward_ports: cannot listen on the box's loopback%s",
                                e == EADDRINUSE ? " (a port is taken in the box)" : "");
        } else if (ready_file && *ready_file) {
            /* Listening: the box's command may go on (the reference's ready_file). */
            sbx_error *we = NULL;
            if (sbx_sandbox_write_file(sb, ready_file, "", 0, 0644, &we) < 0) {
                rc = sbx_error_code(we);
                if (err)
                    *err = sbx_error_prefix(we, "forward_ports: ready_file");
                else
                    sbx_error_free(we);
                /* The forward never became ready: end the thread. */
                ssize_t w = write(stop[1], "x", 1);
                (void)w;
            }
        }
        pthread_join(t, NULL);
        if (rc == SBX_OK && f->box_gone)
            rc = sbx__set_error(err, SBX_ESTATE, "forward_ports: box %s stopped", id);
    }
    for (size_t i = 0; i < FP_MAX_PORTS; i++)
        if (f->listeners[i] >= 0)
            close(f->listeners[i]);
    if (ready[0] >= 0)
        close(ready[0]);
    if (ready[1] >= 0)
        close(ready[1]);
    for (int i = 0; i < 2; i++)
        if (stop[i] >= 0)
            close(stop[i]);
    if (f->nsfd >= 0)
        close(f->nsfd);
    if (f->pidfd >= 0)
        close(f->pidfd);
    json_decref(rec);
    free(path);
    free(f);
    return rc;
}
