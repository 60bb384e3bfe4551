/*
 * TCP forwarding's pieces without a box (src/proto/forward.c): the FORWARD
 * codec, the host's parser of the agent's answer (split at every byte), and
 * the relay over socket pairs: bytes both ways, a half-close passed on,
 * bounded buffering when a side stops reading, a failure closing both.
 */
#include "tap.h"
#include "common.h"

#include "proto/forward.h"
#include "kit/forward.h"

#include <pthread.h>
#include <sys/un.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

static size_t frame(uint8_t *out, uint8_t type, uint32_t ch, void (*fill)(sbx_pbuf *, const void *),
                    const void *arg)
{
    sbx_pbuf b = { 0 };
    sbx__pbuf_begin(&b);
    fill(&b, arg);
    TAP_EQ_INT(sbx__pbuf_finish(&b, type, ch), 0);
    memcpy(out, b.data, b.len);
    size_t n = b.len;
    sbx__pbuf_free(&b);
    return n;
}

static void fill_hello(sbx_pbuf *b, const void *arg)
{
    (void)arg;
    sbx_msg_hello h = { SBX_PROTO_MAGIC, 1, 3, 1 << 20, (char *)"agent" };
    sbx__msg_hello_encode(b, &h);
}

static void fill_status(sbx_pbuf *b, const void *arg)
{
    const int *e = arg;
    sbx__msg_status_encode(b, *e, *e ? "cannot connect to 127.0.0.1:8000 in the box: refused\n" : "");
}

static void test_forward_codec(void)
{
    sbx_pbuf b = { 0 };
    sbx__pbuf_begin(&b);
    TAP_EQ_INT(sbx__msg_forward_encode(&b, 8000, 0), 0);
    TAP_EQ_INT(sbx__pbuf_finish(&b, SBX_MSG_FORWARD, SBX_FORWARD_CHANNEL), 0);
    sbx_frame f;
    size_t used;
    TAP_EQ_INT(sbx__proto_parse(b.data, b.len, SBX_PROTO_MAX_PAYLOAD, &f, &used), 1);
    uint32_t port = 0, flags = 1;
    TAP_EQ_INT(sbx__msg_forward_decode(&f, &port, &flags), 0);
    TAP_EQ_INT(port, 8000);
    TAP_EQ_INT(flags, 0);
    TAP_EQ_STR(sbx__proto_type_name(SBX_MSG_FORWARD), "FORWARD");
    /* Port 0, port 65536, a short or long payload: malformed. */
    uint8_t p0[8] = { 0 }, big[8] = { 0, 1, 0, 0 };
    sbx_frame g = { SBX_MSG_FORWARD, 1, p0, 8 };
    TAP_EQ_INT(sbx__msg_forward_decode(&g, &port, &flags), -1);
    g.payload = big;
    TAP_EQ_INT(sbx__msg_forward_decode(&g, &port, &flags), -1);
    g.len = 7;
    TAP_EQ_INT(sbx__msg_forward_decode(&g, &port, &flags), -1);
    sbx__pbuf_free(&b);
}

/* Feeds `bytes` split at `cut`; the parser's verdict. */
static int feed_split(const uint8_t *bytes, size_t n, size_t cut, int *e, char *msg,
                      const uint8_t **rest, size_t *rest_len, uint8_t *rest_copy)
{
    sbx_forward_reply p;
    sbx__forward_reply_init(&p);
    int rc = sbx__forward_reply_feed(&p, bytes, cut, e, msg, 256, rest, rest_len);
    if (rc == 0)
        rc = sbx__forward_reply_feed(&p, bytes + cut, n - cut, e, msg, 256, rest, rest_len);
    if (rc == 1)
        memcpy(rest_copy, *rest, *rest_len);
    sbx__forward_reply_free(&p);
    return rc;
}

static void test_reply_parser_split_anywhere(void)
{
    uint8_t bytes[1024];
    int zero = 0, refused = 111;
    size_t n = frame(bytes, SBX_MSG_HELLO, 0, fill_hello, NULL);
    n += frame(bytes + n, SBX_MSG_STATUS, SBX_FORWARD_CHANNEL, fill_status, &zero);
    memcpy(bytes + n, "box data", 8);
    n += 8;
    for (size_t cut = 0; cut <= n; cut++) {
        int e = 0;
        char msg[256];
        const uint8_t *rest;
        size_t rest_len = 0;
        uint8_t copy[64];
        int rc = feed_split(bytes, n, cut, &e, msg, &rest, &rest_len, copy);
        if (rc != 1)
            TAP_FAIL("cut at %zu: rc %d (%s)", cut, rc, msg);
        /* Exactly the bytes past STATUS that the feed which completed it brought. */
        size_t status_end = n - 8;
        TAP_EQ_INT(rest_len, cut >= status_end ? cut - status_end : 8);
        TAP_TRUE(memcmp(copy, "box data", rest_len) == 0);
    }
    /* A refusal: its errno and a one-line copy of the agent's message. */
    n = frame(bytes, SBX_MSG_HELLO, 0, fill_hello, NULL);
    n += frame(bytes + n, SBX_MSG_STATUS, SBX_FORWARD_CHANNEL, fill_status, &refused);
    int e = 0;
    char msg[256];
    const uint8_t *rest;
    size_t rest_len;
    uint8_t copy[8];
    TAP_EQ_INT(feed_split(bytes, n, n, &e, msg, &rest, &rest_len, copy), -1);
    TAP_EQ_INT(e, 111);
    TAP_EQ_STR(msg, "cannot connect to 127.0.0.1:8000 in the box: refused?");
    /* No HELLO first; then a length past the bound: refused without buffering it. */
    n = frame(bytes, SBX_MSG_STATUS, SBX_FORWARD_CHANNEL, fill_status, &zero);
    TAP_EQ_INT(feed_split(bytes, n, n, &e, msg, &rest, &rest_len, copy), -1);
    TAP_CONTAINS(msg, "HELLO");
    n = frame(bytes, SBX_MSG_HELLO, 0, fill_hello, NULL);
    sbx__proto_put_header(bytes + n, SBX_MSG_STATUS, 1, SBX_FORWARD_MAX_REPLY + 1);
    n += SBX_PROTO_HEADER;
    TAP_EQ_INT(feed_split(bytes, n, n, &e, msg, &rest, &rest_len, copy), -1);
    TAP_EQ_INT(e, EPROTO);
}

static void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

/* Steps the relay until it says done (0 or -1), waiting on both fds between steps. */
static int run_relay(sbx_relay *r, int max_steps)
{
    for (int i = 0; i < max_steps; i++) {
        int rc = sbx__relay_step(r, 0);
        if (rc <= 0)
            return rc;
        struct pollfd p[2];
        for (int k = 0; k < 2; k++) {
            unsigned w = sbx__relay_want(r, k);
            p[k] = (struct pollfd){ r->fd[k], (short)((w & SBX_RELAY_IN ? POLLIN : 0) |
                                                      (w & SBX_RELAY_OUT ? POLLOUT : 0)), 0 };
        }
        if (poll(p, 2, 50) == 0)
            return 1; /* nothing can move: the caller acts */
    }
    return 1;
}

static void test_relay_half_close_and_bounds(void)
{
    /* client <-> [a | relay | b] <-> server */
    int c[2], s[2];
    TAP_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c), 0);
    TAP_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
    nonblock(c[1]);
    nonblock(s[0]);
    sbx_relay r;
    TAP_EQ_INT(sbx__relay_init(&r, c[1], s[0]), 0);
    TAP_EQ_INT(sbx__relay_preload(&r, 1, "first ", 6), 0);
    TAP_EQ_INT((int)write(c[0], "request", 7), 7);
    TAP_EQ_INT(shutdown(c[0], SHUT_WR), 0);
    TAP_EQ_INT(run_relay(&r, 100), 1);
    char buf[64] = { 0 };
    TAP_EQ_INT((int)read(s[1], buf, sizeof(buf)), 7);
    TAP_EQ_STR(buf, "request");
    /* The client's half-close reached the server as EOF... */
    TAP_EQ_INT((int)read(s[1], buf, sizeof(buf)), 0);
    /* ...which still answers on the other half. */
    TAP_EQ_INT((int)write(s[1], "answer", 6), 6);
    close(s[1]);
    TAP_EQ_INT(run_relay(&r, 100), 0);
    memset(buf, 0, sizeof(buf));
    TAP_EQ_INT((int)read(c[0], buf, sizeof(buf)), 12);
    TAP_EQ_STR(buf, "first answer");
    TAP_EQ_INT((int)read(c[0], buf, sizeof(buf)), 0);
    sbx__relay_free(&r);
    close(c[0]);
    close(c[1]);
    close(s[0]);

    /* A client that never reads: the relay holds at most its buffer, then stops reading. */
    TAP_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c), 0);
    TAP_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
    nonblock(c[1]);
    nonblock(s[0]);
    nonblock(s[1]);
    TAP_EQ_INT(sbx__relay_init(&r, c[1], s[0]), 0);
    static char chunk[1 << 16];
    size_t sent = 0;
    for (int i = 0; i < 10000; i++) {
        ssize_t w = write(s[1], chunk, sizeof(chunk));
        if (w > 0)
            sent += (size_t)w;
        sbx__relay_step(&r, 0);
        if (w < 0 && !(sbx__relay_want(&r, 1) & SBX_RELAY_IN))
            break;
    }
    TAP_TRUE(r.dir[1].len <= SBX_RELAY_BUF);
    TAP_EQ_INT((int)(sbx__relay_want(&r, 1) & SBX_RELAY_IN), 0);
    TAP_TRUE(sent < (64u << 20)); /* the server was held back, not buffered for */
    /* The client goes away: the relay fails, both ends are to be closed. */
    close(c[0]);
    TAP_EQ_INT(sbx__relay_step(&r, 1), -1);
    sbx__relay_free(&r);
    close(c[1]);
    close(s[0]);
    close(s[1]);
}

/* --- the host loop (src/kit/forward.c) against a fake agent ---------------- */

/*
 * The fake agent answers by the requested port: 1 echoes the connection's
 * bytes (STATUS 0 first), 2 never answers, 3 refuses (ECONNREFUSED).
 */
static void *fake_stream(void *arg)
{
    int fd = (int)(intptr_t)arg;
    uint8_t buf[4096];
    size_t len = 0;
    sbx_frame f;
    size_t used;
    int seen = 0;
    uint32_t port = 0, flags;
    /* HELLO, then FORWARD. */
    while (seen < 2) {
        ssize_t n = read(fd, buf + len, sizeof(buf) - len);
        if (n <= 0)
            goto out;
        len += (size_t)n;
        while (seen < 2 && sbx__proto_parse(buf, len, 4096, &f, &used) == 1) {
            if (seen == 1 && sbx__msg_forward_decode(&f, &port, &flags) < 0)
                goto out;
            memmove(buf, buf + used, len - used);
            len -= used;
            seen++;
        }
    }
    uint8_t out[512];
    size_t n = frame(out, SBX_MSG_HELLO, 0, fill_hello, NULL);
    if (port == 2) {
        (void)!write(fd, out, n);
        while (read(fd, buf, sizeof(buf)) > 0)
            ;
        goto out;
    }
    int e = port == 3 ? ECONNREFUSED : 0;
    n += frame(out + n, SBX_MSG_STATUS, SBX_FORWARD_CHANNEL, fill_status, &e);
    (void)!write(fd, out, n);
    if (port == 1) {
        ssize_t k;
        if (len)
            (void)!write(fd, buf, len);
        while ((k = read(fd, buf, sizeof(buf))) > 0)
            (void)!write(fd, buf, (size_t)k);
        shutdown(fd, SHUT_WR);
    }
out:
    close(fd);
    return NULL;
}

static void *fake_agent(void *arg)
{
    int l = (int)(intptr_t)arg;
    for (;;) {
        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            return NULL;
        pthread_t t;
        pthread_create(&t, NULL, fake_stream, (void *)(intptr_t)c);
        pthread_detach(t);
    }
}

static char logged[4096];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_cb(void *data, const char *msg)
{
    (void)data;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof(logged) - n, "%s\n", msg);
    pthread_mutex_unlock(&log_lock);
}

struct run_arg {
    sbx_forward_opts *o;
    int rc;
};

static void *run_loop(void *arg)
{
    struct run_arg *a = arg;
    char err[200];
    a->rc = sbx__forward_run(a->o, err, sizeof(err));
    return NULL;
}

static int dial_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    TAP_EQ_INT(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void test_host_loop_relays_refuses_and_times_out(void)
{
    tap_allow_fd_changes(); /* the fake agent's threads close theirs on their own time */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (snprintf(path, sizeof(path), "%s/agent.sock", tap_tmpdir()) >= (int)sizeof(path))
        TAP_SKIP("the temporary directory's path is too long for a unix socket");
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    memcpy(sa.sun_path, path, sizeof(path));
    TAP_EQ_INT(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    TAP_EQ_INT(listen(l, 64), 0);
    pthread_t agent;
    pthread_create(&agent, NULL, fake_agent, (void *)(intptr_t)l);

    sbx_forward_listener ls[3];
    int host[3];
    char err[300];
    for (int i = 0; i < 3; i++) {
        ls[i].fd = sbx__forward_listen(NULL, 0, &host[i], err, sizeof(err));
        if (ls[i].fd < 0)
            TAP_FAIL("listen: %s", err);
        ls[i].port = (uint16_t)(i + 1);
    }
    /* A taken port is refused with what to do. */
    TAP_EQ_INT(sbx__forward_listen("127.0.0.1", host[0], &host[0], err, sizeof(err)), -1);
    TAP_CONTAINS(err, "Address already in use");
    TAP_EQ_INT(sbx__forward_listen("not-an-address", 0, &host[0], err, sizeof(err)), -1);
    int stop[2];
    TAP_EQ_INT(pipe2(stop, O_CLOEXEC), 0);
    sbx_forward_opts o = { .agent_socket = path, .agent_pid = 0, .listeners = ls, .n_listeners = 3,
                           .stop_fds = stop, .n_stop_fds = 1, .log = log_cb };
    struct run_arg ra = { &o, -2 };
    pthread_t loop;
    pthread_create(&loop, NULL, run_loop, &ra);

    /* Echo with a half-close: the answer comes after our write side ended. */
    int fd = dial_port(host[0]);
    TAP_EQ_INT((int)write(fd, "ping", 4), 4);
    TAP_EQ_INT(shutdown(fd, SHUT_WR), 0);
    char buf[16] = { 0 };
    size_t got = 0;
    ssize_t n;
    while ((n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)n;
    TAP_EQ_STR(buf, "ping");
    close(fd);
    /* A refusal closes the client, and says why. */
    fd = dial_port(host[2]);
    TAP_EQ_INT((int)read(fd, buf, sizeof(buf)), 0);
    close(fd);
    /* An agent that never answers: the connection ends at the handshake deadline. */
    fd = dial_port(host[1]);
    struct pollfd p = { .fd = fd, .events = POLLIN };
    TAP_EQ_INT(poll(&p, 1, 30000), 1);
    TAP_EQ_INT((int)read(fd, buf, sizeof(buf)), 0);
    close(fd);
    TAP_EQ_INT((int)write(stop[1], "x", 1), 1);
    pthread_join(loop, NULL);
    TAP_EQ_INT(ra.rc, 0);
    pthread_mutex_lock(&log_lock);
    TAP_CONTAINS(logged, "forwarding to box port 3: cannot connect to 127.0.0.1:8000 in the box");
    TAP_CONTAINS(logged, "forwarding to box port 2: the agent did not answer within 10 s");
    pthread_mutex_unlock(&log_lock);
    for (int i = 0; i < 3; i++)
        close(ls[i].fd);
    close(stop[0]);
    close(stop[1]);
    shutdown(l, SHUT_RDWR);
    pthread_join(agent, NULL);
    close(l);
}

TAP_MAIN(TAP(test_forward_codec), TAP(test_reply_parser_split_anywhere),
         TAP(test_relay_half_close_and_bounds), TAP(test_host_loop_relays_refuses_and_times_out))
