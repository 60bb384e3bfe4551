/*
 * A box's endpoint against a direct loopback connection, measured in one
 * run on one machine: the same small server (this binary, `--serve PORT`)
 * runs on the host and in a linux box without a network, and the same
 * client talks to each, directly (host 127.0.0.1:PORT) and through the
 * box's endpoint (the shim's forwarder, a FORWARD stream, the agent's
 * relay). Rows:
 *
 *   request     connect, a 1-byte request, its 1-byte answer, close
 *   round trip  1 byte there and back on an open connection
 *   download    256 MiB from the server, MiB/s
 *   100 at once 100 connections, 1 MiB each, all open together: seconds
 *
 * Ratios are endpoint / direct (latency: above 1 is slower; throughput:
 * below 1 is slower). Nothing passes or fails on a number. Needs root.
 *
 *   build/bench/bench_endpoint [N]     (N iterations per latency row, default 1000)
 */
#include "core/internal.h"
#include "lib/bench.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>

#define BOX_PORT 9000

/* --- the server: "E" echoes each byte; "S<u64 decimal>\n" sends that many bytes ----------- */

static void *serve_one(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char mode;
    if (read(fd, &mode, 1) == 1 && mode == 'E') {
        char b[4096];
        ssize_t n;
        while ((n = read(fd, b, sizeof(b))) > 0)
            if (write(fd, b, (size_t)n) != n)
                break;
    } else if (mode == 'S') {
        bench_send_zeros(fd);
    }
    close(fd);
    return NULL;
}

static int serve(int port)
{
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigaction(SIGPIPE, &ign, NULL);
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 1024) < 0)
        return 1;
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        pthread_t t;
        if (pthread_create(&t, NULL, serve_one, (void *)(intptr_t)c) == 0)
            pthread_detach(t);
        else
            close(c);
    }
}

/* --- the client ---------------------------------------------------------- */

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

static void must_read(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r <= 0)
            bench_die("read: %s", r < 0 ? strerror(errno) : "EOF");
        c += r;
        n -= (size_t)r;
    }
}

/* One request: connect, "E" + 1 byte, its echo, close. Seconds. */
static double one_request(int port)
{
    double t0 = bench_now();
    int fd = dial(port);
    if (fd < 0)
        bench_die("connect to %d: %s", port, strerror(errno));
    char c = 'x';
    if (write(fd, "Ex", 2) != 2)
        bench_die("write: %s", strerror(errno));
    must_read(fd, &c, 1);
    close(fd);
    return bench_now() - t0;
}

static double download(int port, unsigned long long bytes)
{
    double t0 = bench_now();
    int fd = dial(port);
    char req[40];
    int n = snprintf(req, sizeof(req), "S%llu\n", bytes);
    if (fd < 0 || write(fd, req, (size_t)n) != n)
        bench_die("download request: %s", strerror(errno));
    unsigned long long got = bench_drain(fd);
    if (got != bytes)
        bench_die("download: %llu of %llu bytes", got, bytes);
    return bench_now() - t0;
}

struct many_arg {
    int port;
};

static void *many_one(void *arg)
{
    download(((struct many_arg *)arg)->port, 1 << 20);
    return NULL;
}

static double hundred_at_once(int port)
{
    pthread_t t[100];
    struct many_arg a = { port };
    double t0 = bench_now();
    for (int i = 0; i < 100; i++)
        if (pthread_create(&t[i], NULL, many_one, &a) != 0)
            bench_die("pthread_create");
    for (int i = 0; i < 100; i++)
        pthread_join(t[i], NULL);
    return bench_now() - t0;
}

struct rows {
    double req_p50, req_p99, rtt_p50, rtt_p99, mibs, many_s;
};

static void measure(int port, int n, struct rows *r)
{
    double *v = calloc((size_t)n, sizeof(double));
    for (int i = 0; i < n / 10; i++)
        one_request(port); /* warm-up */
    for (int i = 0; i < n; i++)
        v[i] = one_request(port);
    r->req_p50 = bench_pct(v, n, 50);
    r->req_p99 = bench_pct(v, n, 99);
    int fd = dial(port);
    if (fd < 0 || write(fd, "E", 1) != 1)
        bench_die("echo connection: %s", strerror(errno));
    for (int i = 0; i < n; i++) {
        double t0 = bench_now();
        char c = 'y';
        if (write(fd, &c, 1) != 1)
            bench_die("write: %s", strerror(errno));
        must_read(fd, &c, 1);
        v[i] = bench_now() - t0;
    }
    close(fd);
    r->rtt_p50 = bench_pct(v, n, 50);
    r->rtt_p99 = bench_pct(v, n, 99);
    double best = 1e9;
    for (int i = 0; i < 3; i++) {
        double s = download(port, 256ull << 20);
        best = s < best ? s : best;
    }
    r->mibs = 256.0 / best;
    r->many_s = hundred_at_once(port);
    free(v);
}

static int wait_up(int port)
{
    for (int i = 0; i < 400; i++) {
        int fd = dial(port);
        if (fd >= 0) {
            char c = 'z';
            if (write(fd, "Ez", 2) == 2 && read(fd, &c, 1) == 1 && c == 'z') {
                close(fd);
                return 0;
            }
            close(fd);
        }
        struct timespec ts = { 0, 25 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--serve"))
        return serve((int)strtol(argv[2], NULL, 10));
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 1000;
    if (n < 10)
        n = 10;
    if (geteuid() != 0) {
        fprintf(stderr, "bench_endpoint: needs root (linux boxes)\n");
        return 77;
    }
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigaction(SIGPIPE, &ign, NULL);
    bench_state_dir(); /* removed on every way out; the boxes die with the bench */

    /* The direct baseline: the same server, a child process on the host, on a free port. */
    int direct_port;
    {
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET };
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sizeof(sa);
        if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            getsockname(s, (struct sockaddr *)&sa, &sl) < 0)
            bench_die("a free port: %s", strerror(errno));
        direct_port = ntohs(sa.sin_port);
        close(s);
    }
    char portbuf[16];
    snprintf(portbuf, sizeof(portbuf), "%d", direct_port);
    pid_t host_srv = bench_child(); /* killed on every way out */
    if (host_srv == 0) {
        execl("/proc/self/exe", "bench_endpoint", "--serve", portbuf, (char *)NULL);
        _exit(127);
    }

    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    sbx_spec *spec = bench_spec(NULL);
    sbx_spec_add_port(spec, BOX_PORT, NULL);
    if (sbx_provider_new("{\"linux\": {}}", &p, &e) != SBX_OK ||
        sbx_sandbox_new(p, spec, &sb, &e) != SBX_OK || sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
        bench_die("a box: %s", sbx_error_message(e));
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (sl <= 0)
        bench_die("readlink: %s", strerror(errno));
    self[sl] = 0;
    sbx_exec_result *r = NULL;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "setsid -f /tmp/bench-srv --serve %d >/dev/null 2>&1", BOX_PORT);
    if (sbx_sandbox_upload(sb, self, "/tmp/bench-srv", &e) != SBX_OK ||
        sbx_sandbox_exec(sb, cmd, NULL, &r, &e) != SBX_OK)
        bench_die("the box's server: %s", sbx_error_message(e));
    sbx_exec_result_free(r);
    sbx_endpoint *ep = NULL;
    if (sbx_sandbox_endpoint(sb, BOX_PORT, &ep, &e) != SBX_OK)
        bench_die("endpoint: %s", sbx_error_message(e));
    int ep_port = (int)strtol(strrchr(sbx_endpoint_url(ep), ':') + 1, NULL, 10);
    printf("# endpoint %s -> box 127.0.0.1:%d; direct 127.0.0.1:%d (the same server on the "
           "host)\n",
           sbx_endpoint_url(ep), BOX_PORT, direct_port);
    sbx_endpoint_free(ep);
    if (wait_up(direct_port) < 0 || wait_up(ep_port) < 0)
        bench_die("a server did not come up");

    struct rows d, b;
    measure(direct_port, n, &d);
    measure(ep_port, n, &b);
    printf("%-28s %12s %12s %8s\n", "endpoint vs direct", "direct", "endpoint", "ratio");
    printf("%-28s %9.3f ms %9.3f ms %7.2fx\n", "request p50 (new conn)", d.req_p50 * 1e3,
           b.req_p50 * 1e3, b.req_p50 / d.req_p50);
    printf("%-28s %9.3f ms %9.3f ms %7.2fx\n", "request p99", d.req_p99 * 1e3, b.req_p99 * 1e3,
           b.req_p99 / d.req_p99);
    printf("%-28s %9.3f ms %9.3f ms %7.2fx\n", "round trip p50 (open conn)", d.rtt_p50 * 1e3,
           b.rtt_p50 * 1e3, b.rtt_p50 / d.rtt_p50);
    printf("%-28s %9.3f ms %9.3f ms %7.2fx\n", "round trip p99", d.rtt_p99 * 1e3,
           b.rtt_p99 * 1e3, b.rtt_p99 / d.rtt_p99);
    printf("%-28s %7.0f MiB/s %7.0f MiB/s %6.2fx\n", "download 256 MiB", d.mibs, b.mibs,
           b.mibs / d.mibs);
    printf("%-28s %10.3f s %10.3f s %7.2fx\n", "100 conns x 1 MiB at once", d.many_s, b.many_s,
           b.many_s / d.many_s);

    bench_child_end(host_srv);
    if (sbx_sandbox_stop(sb, &e) != SBX_OK)
        bench_die("stop: %s", sbx_error_message(e));
    sbx_sandbox_free(sb);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    bench_state_end();
    return 0;
}
