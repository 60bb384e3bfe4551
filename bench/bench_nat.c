/*
 * [nat] What network "nat" costs, measured in one run on one machine:
 *
 *   create      box start (create to ready), network "none" against "nat"
 *               (nat adds the egress ruleset through sbx-nft and pasta)
 *   download    256 MiB from a server on the host's loopback: the host's
 *               own client (direct) against the same client in a nat box
 *               (through pasta's host gateway, allowed by "host:PORT")
 *
 * Ratios are nat / baseline (time: above 1 is slower; throughput: below 1
 * is slower). Nothing passes or fails on a number. Needs root and pasta.
 * Every byte stays on this machine (the host's loopback and the box).
 *
 *   build/bench/bench_nat [N]     (N boxes of each kind, default 10)
 */
#include "core/internal.h"
#include "lib/bench.h"
#include "providers/linux/linux.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>

#define DOWNLOAD (256ull << 20)

/* The server: "<bytes>\n" in, that many zero bytes out, one connection at a time. */
static void serve(int s)
{
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigaction(SIGPIPE, &ign, NULL);
    for (;;) {
        int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        bench_send_zeros(c);
        close(c);
    }
}

/* The client: downloads `bytes` from addr:port; seconds, or -1. */
static double fetch(const char *addr, int port, unsigned long long bytes)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    if (fd < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return -1;
    double t0 = bench_now();
    char req[40];
    int n = snprintf(req, sizeof(req), "%llu\n", bytes);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    return bench_drain(fd) == bytes ? bench_now() - t0 : -1;
}

static double start_time(sbx_provider *p, const char *options, sbx_sandbox **out)
{
    sbx_spec *spec = bench_spec(options);
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    double t0 = bench_now();
    if (sbx_sandbox_new(p, spec, &sb, &e) != SBX_OK || sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
        bench_die("a box (%s): %s", options, sbx_error_message(e));
    double t = bench_now() - t0;
    sbx_spec_free(spec);
    if (out) {
        *out = sb;
    } else {
        if (sbx_sandbox_stop(sb, &e) != SBX_OK)
            bench_die("stop: %s", sbx_error_message(e));
        sbx_sandbox_free(sb);
    }
    return t;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--fetch")) {
        /* In the box: the same client, its seconds on stdout. */
        double t = fetch(argv[2], (int)strtol(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
        printf("%.6f\n", t);
        return t < 0;
    }
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 10;
    if (n < 1)
        n = 10;
    if (geteuid() != 0) {
        fprintf(stderr, "bench_nat: needs root (linux boxes)\n");
        return 0;
    }
    if (access("/usr/bin/pasta", X_OK) != 0) {
        fprintf(stderr, "bench_nat: needs pasta (apt-get install passt)\n");
        return 0;
    }
    bench_state_dir(); /* removed on every way out; the boxes die with the bench */

    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t sl = sizeof(sa);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 64) < 0 ||
        getsockname(s, (struct sockaddr *)&sa, &sl) < 0)
        bench_die("listen: %s", strerror(errno));
    int port = ntohs(sa.sin_port);
    pid_t srv = bench_child(); /* killed on every way out */
    if (srv == 0)
        serve(s);
    close(s);

    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new("{\"linux\": {}}", &p, &e) != SBX_OK)
        bench_die("provider: %s", sbx_error_message(e));
    /* One of each first: the image and the caches are warm for both. */
    start_time(p, "{\"network\": \"none\"}", NULL);
    start_time(p, "{\"network\": \"nat\"}", NULL);
    double *none = calloc((size_t)n, sizeof(double)), *nat = calloc((size_t)n, sizeof(double));
    if (!none || !nat)
        bench_die("out of memory");
    for (int i = 0; i < n; i++) {
        none[i] = start_time(p, "{\"network\": \"none\"}", NULL);
        nat[i] = start_time(p, "{\"network\": \"nat\"}", NULL);
    }
    double none50 = bench_pct(none, n, 50), nat50 = bench_pct(nat, n, 50);

    double direct = fetch("127.0.0.1", port, DOWNLOAD);
    if (direct < 0)
        bench_die("the direct download failed");
    char opts[128];
    snprintf(opts, sizeof(opts), "{\"network\": \"nat\", \"egress\": {\"allow\": [\"host:%d\"]}}",
             port);
    sbx_sandbox *sb = NULL;
    start_time(p, opts, &sb);
    char self[4096];
    ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (k <= 0)
        bench_die("readlink: %s", strerror(errno));
    self[k] = 0;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "/tmp/bench-nat --fetch " SBX_NAT_GATEWAY " %d %llu", port,
             DOWNLOAD);
    sbx_exec_result *r = NULL;
    if (sbx_sandbox_upload(sb, self, "/tmp/bench-nat", &e) != SBX_OK ||
        sbx_sandbox_exec(sb, cmd, NULL, &r, &e) != SBX_OK)
        bench_die("the box's client: %s", sbx_error_message(e));
    const char *o = sbx_exec_result_stdout(r, NULL);
    double boxed = o ? strtod(o, NULL) : -1;
    if (sbx_exec_result_return_code(r) != 0 || boxed <= 0)
        bench_die("the download in the box failed: %s", sbx_exec_result_stderr(r, NULL));
    sbx_exec_result_free(r);
    if (sbx_sandbox_stop(sb, &e) != SBX_OK)
        bench_die("stop: %s", sbx_error_message(e));
    sbx_sandbox_free(sb);

    double mib = (double)DOWNLOAD / (1 << 20);
    printf("# nat: %d boxes of each kind; download of %.0f MiB from the host's 127.0.0.1:%d\n", n,
           mib, port);
    printf("%-28s %12s %12s %8s\n", "nat vs baseline", "baseline", "nat", "ratio");
    printf("%-28s %9.3f ms %9.3f ms %7.2fx\n", "create p50 (vs none)", none50 * 1e3, nat50 * 1e3,
           nat50 / none50);
    printf("%-28s %9.3f ms %9.3f ms %7.2fx\n", "create p99 (vs none)",
           bench_pct(none, n, 99) * 1e3, bench_pct(nat, n, 99) * 1e3,
           bench_pct(nat, n, 99) / bench_pct(none, n, 99));
    printf("%-28s %7.0f MiB/s %7.0f MiB/s %6.2fx\n", "download (vs host direct)", mib / direct,
           mib / boxed, direct / boxed);
    free(none);
    free(nat);
    sbx_provider_free(p);
    bench_child_end(srv);
    bench_state_end();
    return 0;
}
