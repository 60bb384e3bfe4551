/*
 * The local provider's hot path: create/stop, one exec at a time, many execs
 * at once, large stdout, and a large upload. Prints numbers; never fails on
 * them.
 *
 *   build/bench/bench_local [iterations]
 */
#include <sbx.h>
#include "lib/bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 200;
    if (n < 1)
        n = 1;
    char root[] = "/tmp/sbx-bench-XXXXXX";
    if (!mkdtemp(root))
        bench_die_err("mkdtemp", NULL);
    char cfg[256];
    snprintf(cfg, sizeof(cfg), "{\"local\": {\"workspace_root\": \"%s\", \"concurrency\": 64}}",
             root);
    sbx_error *e = NULL;
    sbx_provider *p = NULL;
    if (sbx_provider_new(cfg, &p, &e))
        bench_die_err("provider", e);
    sbx_spec *spec = bench_spec(NULL);

    double t0 = bench_now();
    for (int i = 0; i < n; i++) {
        sbx_sandbox *sb = NULL;
        if (sbx_sandbox_new(p, spec, &sb, &e) || sbx_sandbox_start(sb, NULL, &e) ||
            sbx_sandbox_stop(sb, &e))
            bench_die_err("create/stop", e);
        sbx_sandbox_free(sb);
    }
    double dt = bench_now() - t0;
    printf("create+stop           %8.1f us each  (%d)\n", dt / n * 1e6, n);

    sbx_sandbox *sb = NULL;
    if (sbx_sandbox_new(p, spec, &sb, &e) || sbx_sandbox_start(sb, NULL, &e))
        bench_die_err("start", e);
    t0 = bench_now();
    for (int i = 0; i < n; i++) {
        sbx_exec_result *r = NULL;
        if (sbx_sandbox_exec(sb, "true", NULL, &r, &e))
            bench_die_err("exec", e);
        sbx_exec_result_free(r);
    }
    dt = bench_now() - t0;
    printf("exec 'true' serial    %8.1f us each  (%d)\n", dt / n * 1e6, n);

    sbx_future **fs = calloc((size_t)n, sizeof(*fs));
    t0 = bench_now();
    for (int i = 0; i < n; i++)
        if (sbx_sandbox_exec_async(sb, "echo hi", NULL, &fs[i], &e))
            bench_die_err("exec_async", e);
    for (int i = 0; i < n; i++) {
        if (sbx_future_wait(fs[i], -1, &e))
            bench_die_err("wait", e);
        sbx_future_free(fs[i]);
    }
    dt = bench_now() - t0;
    printf("exec 'echo' x%-4d     %8.1f execs/s (concurrency 64)\n", n, n / dt);
    free(fs);

    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, -1);
    t0 = bench_now();
    sbx_exec_result *r = NULL;
    if (sbx_sandbox_exec(sb, "head -c 268435456 /dev/zero", o, &r, &e))
        bench_die_err("exec big", e);
    dt = bench_now() - t0;
    size_t len = 0;
    sbx_exec_result_stdout(r, &len);
    printf("stdout 256 MiB        %8.1f MiB/s   (%zu bytes)\n", len / dt / (1 << 20), len);
    sbx_exec_result_free(r);

    char src[512];
    snprintf(src, sizeof(src), "%s/big.bin", root);
    if (sbx_sandbox_exec(sb, "head -c 536870912 /dev/zero > ../big.bin", o, &r, &e))
        bench_die_err("make file", e);
    sbx_exec_result_free(r);
    t0 = bench_now();
    if (sbx_sandbox_upload(sb, src, "in/big.bin", &e))
        bench_die_err("upload", e);
    dt = bench_now() - t0;
    printf("upload 512 MiB        %8.1f MiB/s\n", 512 / dt);
    unlink(src);
    sbx_exec_opts_free(o);

    sbx_sandbox_free(sb);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    rmdir(root);
    return 0;
}
