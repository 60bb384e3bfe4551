/*
 * [netw] What joining a box-to-box network costs a linux box's create
 * (docs/networking.md): the same "none"-image box created and stopped N
 * times with no network (its own namespace with lo only) and in a network
 * (a veth pair, an address, the peers' hosts files rewritten), interleaved
 * so both see the same machine. Also `sbx network create` itself, and the
 * create time with 8 peers already in the network (every join rewrites
 * each peer's /etc/hosts). Nothing passes or fails on a number. Needs root.
 *
 *   build/bench/bench_network [N]     (N creates per row, default 30)
 */
#include "core/internal.h"
#include "lib/bench.h"

#include <sbx.h>
#include <stdarg.h>

static char state_root[64];

static sbx_sandbox *start_box(sbx_provider *p, const char *opts)
{
    sbx_spec *s = bench_spec(opts);
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_new(p, s, &sb, &e) < 0 || sbx_sandbox_start(sb, NULL, &e) < 0)
        bench_die("start: %s", sbx_error_message(e));
    sbx_spec_free(s);
    return sb;
}

static void stop_box(sbx_sandbox *sb)
{
    sbx_error *e = NULL;
    if (sbx_sandbox_stop(sb, &e) < 0)
        bench_die("stop: %s", sbx_error_message(e));
    sbx_sandbox_free(sb);
}

/* One create (start until ready), timed; the box is stopped untimed. */
static double one(sbx_provider *p, const char *opts)
{
    double t0 = bench_now();
    sbx_sandbox *sb = start_box(p, opts);
    double t = bench_now() - t0;
    stop_box(sb);
    return t;
}

static void row(const char *what, double *v, int n, double base)
{
    double p50 = bench_pct(v, n, 50), p99 = bench_pct(v, n, 99);
    printf("%-40s p50 %8.2f ms  p99 %8.2f ms", what, p50 * 1e3, p99 * 1e3);
    if (base > 0)
        printf("  %+7.2f ms (%.2fx none)", (p50 - base) * 1e3, p50 / base);
    printf("\n");
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 30; /* a benchmark's own argument, not outside input */
    if (n < 1 || n > 10000)
        bench_die("N must be 1..10000");
    if (geteuid() != 0) {
        printf("bench_network: skipped (box-to-box networks need root)\n");
        return 0;
    }
    snprintf(state_root, sizeof(state_root), "/tmp/sbx-bench-net-XXXXXX");
    if (!mkdtemp(state_root))
        bench_die("mkdtemp: %s", strerror(errno));
    setenv("SBX_STATE_DIR", state_root, 1);
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new("{\"linux\": {}}", &p, &e) < 0)
        bench_die("provider: %s", sbx_error_message(e));
    double *none = calloc((size_t)n, sizeof(double)), *net = calloc((size_t)n, sizeof(double));
    double *crowd = calloc((size_t)n, sizeof(double)), *mk = calloc((size_t)n, sizeof(double));
    if (!none || !net || !crowd || !mk)
        bench_die("out of memory");
    /* network create / rm, N times. */
    for (int i = 0; i < n; i++) {
        double t0 = bench_now();
        if (sbx_provider_network_create(p, "b", NULL, &e) < 0)
            bench_die("network create: %s", sbx_error_message(e));
        mk[i] = bench_now() - t0;
        if (sbx_provider_network_remove(p, "b", &e) < 0)
            bench_die("network rm: %s", sbx_error_message(e));
    }
    if (sbx_provider_network_create(p, "b", NULL, &e) < 0)
        bench_die("network create: %s", sbx_error_message(e));
    one(p, NULL); /* warm: the none image's skeleton, the seccomp cache */
    for (int i = 0; i < n; i++) {
        none[i] = one(p, NULL);
        net[i] = one(p, "{\"network\": \"b\"}");
    }
    sbx_sandbox *peers[8];
    for (int i = 0; i < 8; i++)
        peers[i] = start_box(p, "{\"network\": \"b\"}");
    for (int i = 0; i < n; i++)
        crowd[i] = one(p, "{\"network\": \"b\"}");
    for (int i = 0; i < 8; i++)
        stop_box(peers[i]);
    if (sbx_provider_network_remove(p, "b", &e) < 0)
        bench_die("network rm: %s", sbx_error_message(e));
    printf("linux box create (start until ready), %d each, interleaved:\n", n);
    double base = bench_pct(none, n, 50);
    row("network none", none, n, 0);
    row("network NAME (empty)", net, n, base);
    row("network NAME (8 peers in it)", crowd, n, base);
    row("sbx network create", mk, n, 0);
    sbx_provider_free(p);
    sbx__rm_rf(state_root);
    free(none);
    free(net);
    free(crowd);
    free(mk);
    return 0;
}
