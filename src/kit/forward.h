/*
 * The host side of TCP forwarding into a box through its agent
 * (docs/networking.md): listening sockets on the host, and one loop that
 * accepts on them and carries each connection into the box over a
 * forwarding stream of the agent protocol (proto/forward.h). Used by the
 * linux box's forwarder process (src/shim/forward.c: endpoints and
 * published ports) and by `sbx port-forward` (src/cli/forward.c).
 *
 * Plain blocking code with its own epoll loop: it runs in a process or
 * thread of its own, never on the sbx loop.
 */
#ifndef SBX_KIT_FORWARD_H
#define SBX_KIT_FORWARD_H

#include "core/internal.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Connections one loop carries at once; past this it stops accepting until one ends. */
#define SBX_FORWARD_MAX_CONNS 1024

typedef struct {
    int fd;        /* a listening TCP socket */
    uint16_t port; /* the box port its connections go to (127.0.0.1:port in the box) */
} sbx_forward_listener;

typedef struct {
    const char *agent_socket; /* the agent's unix socket */
    pid_t agent_pid;          /* > 0: the only process accepted behind it (SO_PEERCRED) */
    const sbx_forward_listener *listeners;
    size_t n_listeners;
    const int *stop_fds; /* the loop ends when one is readable (a signalfd, a pidfd) */
    size_t n_stop_fds;
    unsigned max_conns; /* 0: SBX_FORWARD_MAX_CONNS */
    /* Optional: told about each connection that could not be forwarded, and why. */
    void (*log)(void *data, const char *msg);
    void *log_data;
} sbx_forward_opts;

/*
 * Listens on addr:port (addr: an IPv4 or IPv6 literal, NULL: 127.0.0.1;
 * port 0: an ephemeral one), close-on-exec and non-blocking. Returns the fd
 * and the bound port in *bound, or -1 with `err` saying why.
 */
SBX_INTERNAL int sbx__forward_listen(const char *addr, int port, int *bound, char *err,
                                     size_t err_len);

/*
 * Runs until one of the stop fds is readable: returns its index, or -1 with
 * `err` (the loop could not run at all). Open connections are closed on
 * the way out; the listeners stay the caller's.
 */
SBX_INTERNAL int sbx__forward_run(const sbx_forward_opts *o, char *err, size_t err_len);

/*
 * One connection's forwarding stream, blocking (tests, benchmarks): connects
 * to the agent socket, asks for `port`, and returns the stream fd once the
 * agent said yes (it then carries the box connection's bytes), or -1 with
 * `err`.
 */
SBX_INTERNAL int sbx__forward_dial(const char *agent_socket, pid_t agent_pid, int port, char *err,
                                   size_t err_len);

#endif /* SBX_KIT_FORWARD_H */
