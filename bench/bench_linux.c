/*
 * The linux provider against its floors, in one run on one machine:
 *
 *   create->ready   sbx_sandbox_start() of a "none"-image box (cached), until
 *                   the agent said hello
 *   TTI             start + the first exec ("true") returning
 *   exec            one "true" in a warm box, through the agent
 *   stop            sbx_sandbox_stop() until everything is removed
 *   fork+exec       posix_spawn + wait of /bin/true on the host (the floor)
 *   bwrap           bwrap --unshare-all --ro-bind / / --proc /proc --dev /dev true
 *
 * Prints p50/p90/p99 and the ratios to the floors. Needs root.
 *   build/bench/bench_linux [N] [--userns]   (default N = 200; --userns: boxes in
 *                                            user namespaces with idmapped layers)
 */
#include "core/internal.h"

#include <spawn.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct stats {
    double p50, p90, p99;
};

static struct stats summarize(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp);
    struct stats s = { v[n / 2], v[(n * 9) / 10], v[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] };
    return s;
}

static void print(const char *name, struct stats s)
{
    printf("%-22s p50 %8.3f ms   p90 %8.3f ms   p99 %8.3f ms\n", name, s.p50, s.p90, s.p99);
}

static double spawn_wait(const char *const argv[])
{
    double t0 = now_ms();
    pid_t pid;
    /* posix_spawn's argv is char *const[] for history's sake; it does not write to it. */
    if (posix_spawn(&pid, argv[0], NULL, NULL, (char *const *)(uintptr_t)argv, environ) != 0)
        return -1;
    int st;
    waitpid(pid, &st, 0);
    return now_ms() - t0;
}

int main(int argc, char **argv)
{
    int n = 200;
    bool userns = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--userns"))
            userns = true;
        else
            n = (int)strtol(argv[i], NULL, 10);
    }
    if (n < 10)
        n = 10;
    if (geteuid() != 0) {
        fprintf(stderr, "bench_linux: needs root (namespaces, cgroups)\n");
        return 77;
    }
    char tmpl[] = "/tmp/sbx-bench-XXXXXX";
    if (!mkdtemp(tmpl))
        return 1;
    setenv("SBX_STATE_DIR", tmpl, 1);
    double *create = calloc((size_t)n, sizeof(double)), *tti = calloc((size_t)n, sizeof(double));
    double *exec = calloc((size_t)n, sizeof(double)), *stop = calloc((size_t)n, sizeof(double));
    double *fork_ = calloc((size_t)n, sizeof(double)), *bw = calloc((size_t)n, sizeof(double));
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new(userns ? "{\"linux\": {\"userns\": true}}" : "{\"linux\": {}}", &p,
                         &e) != SBX_OK) {
        fprintf(stderr, "provider: %s\n", sbx_error_message(e));
        return 1;
    }
    sbx_spec *spec = sbx_spec_new();
    /* Warm-up: builds the none image's skeleton once, loads the binaries. */
    for (int i = 0; i < 3; i++) {
        sbx_sandbox *sb = NULL;
        sbx_sandbox_new(p, spec, &sb, NULL);
        if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK) {
            fprintf(stderr, "start: %s\n", sbx_error_message(e));
            return 1;
        }
        sbx_sandbox_free(sb);
    }
    for (int i = 0; i < n; i++) {
        sbx_sandbox *sb = NULL;
        sbx_exec_result *r = NULL;
        sbx_sandbox_new(p, spec, &sb, NULL);
        double t0 = now_ms();
        if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK) {
            fprintf(stderr, "start: %s\n", sbx_error_message(e));
            return 1;
        }
        double t1 = now_ms();
        sbx_sandbox_exec(sb, "true", NULL, &r, NULL);
        double t2 = now_ms();
        sbx_exec_result_free(r);
        create[i] = t1 - t0;
        tti[i] = t2 - t0;
        double t3 = now_ms();
        sbx_sandbox_stop(sb, NULL);
        stop[i] = now_ms() - t3;
        sbx_sandbox_free(sb);
    }
    sbx_sandbox *warm = NULL;
    sbx_sandbox_new(p, spec, &warm, NULL);
    sbx_sandbox_start(warm, NULL, NULL);
    for (int i = 0; i < n; i++) {
        sbx_exec_result *r = NULL;
        double t0 = now_ms();
        sbx_sandbox_exec(warm, "true", NULL, &r, NULL);
        exec[i] = now_ms() - t0;
        sbx_exec_result_free(r);
    }
    sbx_sandbox_free(warm);
    const char *t_argv[] = { "/bin/true", NULL };
    for (int i = 0; i < n; i++)
        fork_[i] = spawn_wait(t_argv);
    struct stat st;
    bool have_bwrap = stat("/usr/bin/bwrap", &st) == 0;
    const char *b_argv[] = { "/usr/bin/bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc",
                       "/proc", "--dev", "/dev", "/bin/true", NULL };
    for (int i = 0; have_bwrap && i < n; i++)
        bw[i] = spawn_wait(b_argv);

    printf("linux provider, %d iterations, none image (cached), net none%s\n", n,
           userns ? ", userns" : "");
    struct stats sc = summarize(create, n), st_ = summarize(tti, n), se = summarize(exec, n);
    struct stats ss = summarize(stop, n), sf = summarize(fork_, n);
    print("create->ready", sc);
    print("create+first exec", st_);
    print("exec (warm box)", se);
    print("stop (all removed)", ss);
    print("fork+exec /bin/true", sf);
    struct stats sb = { 0, 0, 0 };
    if (have_bwrap) {
        sb = summarize(bw, n);
        print("bwrap --unshare-all", sb);
    }
    printf("ratios (p50): create/fork+exec %.1fx, create/bwrap %.2fx, exec/fork+exec %.2fx\n",
           sc.p50 / sf.p50, have_bwrap ? sc.p50 / sb.p50 : 0.0, se.p50 / sf.p50);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    sbx__rm_rf(tmpl);
    free(create);
    free(tti);
    free(exec);
    free(stop);
    free(fork_);
    free(bw);
    return 0;
}
