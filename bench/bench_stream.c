/*
 * Streaming exec on a warm linux box: what listening costs, and what it buys.
 *
 * Rows (ms, p50 and p90 over N runs, in one process, one box):
 *   create->ready          sbx_sandbox_start
 *   exec true              the one-shot exec nobody streams (the hot path)
 *   exec echo, callback    the same with an output callback (the streaming path)
 *   exec echo, fd          the same with stdout to a pipe (the fd writer)
 *   first byte             `echo x; sleep 0.2`: submit to the first chunk
 *   one-shot total         the same command, submit to the result
 *
 * The streaming rows compile only against a header that has the streaming
 * API, so this file also builds against an older libsbx to compare the
 * one-shot figures (docs/benchmarks.md says how). Needs root and the linux
 * provider; prints a skip line otherwise.
 */
#include <sbx.h>
#include "lib/bench.h"

#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void exec_ok(sbx_sandbox *sb, const char *cmd, const sbx_exec_opts *o)
{
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_exec(sb, cmd, o, &r, &e) != SBX_OK)
        bench_die_err(cmd, e);
    if (sbx_exec_result_return_code(r) != 0) {
        const char *er = sbx_exec_result_stderr(r, NULL);
        bench_die("%s exited %d: %s", cmd, sbx_exec_result_return_code(r), er ? er : "");
    }
    sbx_exec_result_free(r);
}

static void row(const char *what, double *v, int n)
{
    printf("  %-30s %8.3f %8.3f\n", what, bench_pct(v, n, 50), bench_pct(v, n, 90));
}

#ifdef SBX_STREAM_STDOUT
struct first {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    double at;
};

static void first_cb(int stream, const char *data, size_t len, void *user)
{
    (void)stream, (void)data, (void)len;
    struct first *f = user;
    pthread_mutex_lock(&f->lock);
    if (f->at == 0)
        f->at = bench_now_ms();
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

static void count_cb(int stream, const char *data, size_t len, void *user)
{
    (void)stream, (void)data;
    *(size_t *)user += len;
}
#endif

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 300;
    if (n < 10)
        n = 10;
    if (geteuid() != 0) {
        printf("\n# bench_stream: skipped (linux boxes need root)\n");
        return 0;
    }
    char tmpl[] = "/tmp/sbx-bench-stream-XXXXXX";
    if (!mkdtemp(tmpl))
        return 1;
    setenv("SBX_STATE_DIR", tmpl, 1);
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new("{\"linux\": {}}", &p, &e) != SBX_OK)
        bench_die_err("provider", e);
    sbx_spec *spec = bench_spec(NULL);
    double *v = calloc((size_t)n, sizeof(double));

    printf("\n# bench_stream: %d runs, warm linux box (ms)      %8s %8s\n", n, "p50", "p90");
    for (int i = 0; i < n; i++) {
        sbx_sandbox *sb = NULL;
        sbx_sandbox_new(p, spec, &sb, NULL);
        double t0 = bench_now_ms();
        if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
            bench_die_err("start", e);
        v[i] = bench_now_ms() - t0;
        sbx_sandbox_stop(sb, NULL);
        sbx_sandbox_free(sb);
    }
    row("create->ready", v, n);

    sbx_sandbox *sb = NULL;
    sbx_sandbox_new(p, spec, &sb, NULL);
    if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
        bench_die_err("start", e);
    for (int i = 0; i < 20; i++)
        exec_ok(sb, "true", NULL);
    for (int i = 0; i < n; i++) {
        double t0 = bench_now_ms();
        exec_ok(sb, "true", NULL);
        v[i] = bench_now_ms() - t0;
    }
    row("exec true (one-shot)", v, n);
    for (int i = 0; i < n; i++) {
        double t0 = bench_now_ms();
        exec_ok(sb, "echo hello", NULL);
        v[i] = bench_now_ms() - t0;
    }
    row("exec echo (one-shot)", v, n);

#ifdef SBX_STREAM_STDOUT
    sbx_exec_opts *o = sbx_exec_opts_new();
    size_t got = 0;
    sbx_exec_opts_set_output_cb(o, count_cb, &got);
    for (int i = 0; i < n; i++) {
        double t0 = bench_now_ms();
        exec_ok(sb, "echo hello", o);
        v[i] = bench_now_ms() - t0;
    }
    row("exec echo, callback", v, n);
    sbx_exec_opts_free(o);

    int pp[2];
    if (pipe2(pp, O_CLOEXEC | O_NONBLOCK) < 0)
        return 1;
    o = sbx_exec_opts_new();
    sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, pp[1]);
    char sink[4096];
    for (int i = 0; i < n; i++) {
        double t0 = bench_now_ms();
        exec_ok(sb, "echo hello", o);
        v[i] = bench_now_ms() - t0;
        while (read(pp[0], sink, sizeof(sink)) > 0)
            ;
    }
    row("exec echo, fd", v, n);
    sbx_exec_opts_free(o);
    close(pp[0]);
    close(pp[1]);

    /* Time to first byte against the one-shot result, for a command that keeps running. */
    int m = n < 30 ? n : 30;
    double *w = calloc((size_t)m, sizeof(double));
    struct first f = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    o = sbx_exec_opts_new();
    sbx_exec_opts_set_output_cb(o, first_cb, &f);
    for (int i = 0; i < m; i++) {
        f.at = 0;
        sbx_future *fu = NULL;
        double t0 = bench_now_ms();
        if (sbx_sandbox_exec_async(sb, "echo x; sleep 0.2", o, &fu, &e) != SBX_OK)
            bench_die_err("exec", e);
        sbx_future_wait(fu, -1, NULL);
        w[i] = bench_now_ms() - t0;
        v[i] = f.at - t0;
        sbx_future_free(fu);
    }
    row("`echo x; sleep 0.2` first byte", v, m);
    row("`echo x; sleep 0.2` result", w, m);
    sbx_exec_opts_free(o);
    free(w);

    /*
     * Bulk output: 256 MiB streamed to a callback, against the same command
     * on the host read through a pipe by this process (the window per exec
     * of protocol 5 acknowledges every 256 KiB; this shows what that costs).
     */
    const char *bulk = "head -c 268435456 /dev/zero";
    double host_s = 1e9, box_s = 1e9;
    for (int r = 0; r < 3; r++) {
        double t0 = bench_now_ms();
        FILE *fp = popen(bulk, "r");
        static char big[1 << 16];
        size_t total = 0, k;
        while (fp && (k = fread(big, 1, sizeof(big), fp)) > 0)
            total += k;
        if (fp)
            pclose(fp);
        double t = (bench_now_ms() - t0) / 1e3;
        if (total == 268435456u && t < host_s)
            host_s = t;
        o = sbx_exec_opts_new();
        got = 0;
        sbx_exec_opts_set_output_cb(o, count_cb, &got);
        sbx_exec_opts_set_keep_output(o, 0);
        sbx_exec_opts_set_output_limit(o, (size_t)512 << 20);
        t0 = bench_now_ms();
        exec_ok(sb, bulk, o);
        t = (bench_now_ms() - t0) / 1e3;
        sbx_exec_opts_free(o);
        if (got == 268435456u && t < box_s)
            box_s = t;
    }
    printf("  %-30s %8.0f MiB/s\n", "256 MiB, host pipe (baseline)", 256 / host_s);
    printf("  %-30s %8.0f MiB/s  x%.2f of the baseline\n", "256 MiB streamed from a box",
           256 / box_s, host_s / box_s);
#endif

    sbx_sandbox_stop(sb, NULL);
    sbx_sandbox_free(sb);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    free(v);
    nftw(tmpl, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
