/*
 * The apptainer provider's exec, through the agent in the instance against
 * through the CLI (`apptainer exec ... sh -c`, the reference's way, which
 * `agent: false` keeps), in the same run, on tests/fakes/apptainer (put on
 * PATH here when no apptainer is: the fake's own startup, a Python
 * interpreter, is part of every CLI exec, as apptainer's Go runtime and
 * starter are on a cluster). Also create+stop on both paths. Prints numbers;
 * never fails on them.
 *
 *   build/bench/bench_apptainer [iterations]
 */
#include <sbx.h>
#include "lib/bench.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, sbx_error *e)
{
    bench_die("%s: %s", what, e ? sbx_error_message(e) : "failed");
}

/* Whether an `apptainer` is on PATH (the real CLI: then it is what runs). */
static int on_path(const char *path)
{
    char p[PATH_MAX];
    for (const char *s = path ? path : ""; *s;) {
        size_t n = strcspn(s, ":");
        if (n && n < sizeof(p) - 16) {
            snprintf(p, sizeof(p), "%.*s/apptainer", (int)n, s);
            if (access(p, X_OK) == 0)
                return 1;
        }
        s += n + (s[n] == ':');
    }
    return 0;
}

static void bench_path(const char *label, int agent, int n, double base)
{
    char cfg[512];
    snprintf(cfg, sizeof(cfg),
             "{\"apptainer\": {\"agent\": %s, \"create\": {\"default_image\": "
             "\"docker://debian:12\"}}}",
             agent ? "true" : "false");
    sbx_error *e = NULL;
    sbx_provider *p = NULL;
    if (sbx_provider_new(cfg, &p, &e))
        die("provider", e);
    sbx_spec *spec = bench_spec(NULL);
    int m = n < 10 ? n : 10;
    double *cs = calloc((size_t)m, sizeof(double)), *v = calloc((size_t)n, sizeof(double));
    if (!cs || !v)
        die("calloc", NULL);
    for (int i = 0; i < m; i++) {
        sbx_sandbox *sb = NULL;
        double t0 = bench_now();
        if (sbx_sandbox_new(p, spec, &sb, &e) || sbx_sandbox_start(sb, NULL, &e))
            die("start", e);
        sbx_sandbox_free(sb); /* stops it */
        cs[i] = bench_now() - t0;
    }
    char what[128];
    snprintf(what, sizeof(what), "%s: create+stop", label);
    bench_row(what, bench_pct(cs, m, 50), bench_pct(cs, m, 99), base);
    sbx_sandbox *sb = NULL;
    if (sbx_sandbox_new(p, spec, &sb, &e) || sbx_sandbox_start(sb, NULL, &e))
        die("start", e);
    for (int i = 0; i < n; i++) {
        sbx_exec_result *r = NULL;
        double t0 = bench_now();
        if (sbx_sandbox_exec(sb, "true", NULL, &r, &e))
            die("exec", e);
        v[i] = bench_now() - t0;
        if (sbx_exec_result_return_code(r) != 0)
            die("exec: true failed", NULL);
        sbx_exec_result_free(r);
    }
    snprintf(what, sizeof(what), "%s: exec true", label);
    bench_row(what, bench_pct(v, n, 50), bench_pct(v, n, 99), base);
    sbx_sandbox_free(sb);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    free(cs);
    free(v);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 100;
    if (n < 1)
        n = 1;
    bench_state_dir();
    /* The fake CLI when no apptainer is on PATH (run from the source tree, as make bench does). */
    const char *path = getenv("PATH");
    char fakes[PATH_MAX], newpath[8192];
    if (!on_path(path) && realpath("tests/fakes", fakes)) {
        snprintf(newpath, sizeof(newpath), "%s:%s", fakes, path ? path : "/usr/bin:/bin");
        setenv("PATH", newpath, 1);
        char st[PATH_MAX];
        snprintf(st, sizeof(st), "%s/fake-apptainer", bench_state_dir());
        setenv("FAKE_APPTAINER_STATE", st, 1);
        printf("apptainer: tests/fakes/apptainer (the fake CLI: namespaces, no image)\n");
    }
    double base = bench_fork_exec_true();
    bench_path("apptainer agent", 1, n, base);
    bench_path("apptainer cli  ", 0, n, base);
    bench_state_end();
    return 0;
}
