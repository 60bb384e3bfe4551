/*
 * The core's own overhead: an exec round trip through the async core and the
 * sync facade on the in-memory fake provider (no process is started), next
 * to a bare fork+exec of /bin/true measured in the same run. The fake is the
 * test plugin build/tests/fakes/sbx-fake.so, which bench/run.sh puts on
 * SBX_PLUGIN_PATH.
 */
#include "lib/bench.h"

#include <sbx.h>

#define N 2000

int main(void)
{
    static double base[N], core[N], async_batch;
    for (int i = 0; i < 200; i++)
        base[i] = bench_fork_exec_true();
    double base_p50 = bench_pct(base, 200, 50), base_p99 = bench_pct(base, 200, 99);

    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_spec *spec = sbx_spec_new();
    sbx_error *err = NULL;
    if (sbx_provider_new("{\"fake\": {}}", &p, &err) || sbx_sandbox_new(p, spec, &sb, &err) ||
        sbx_sandbox_start(sb, NULL, &err)) {
        fprintf(stderr, "bench_core: %s\n", sbx_error_message(err));
        return 1;
    }
    for (int i = 0; i < N; i++) {
        sbx_exec_result *r = NULL;
        double t0 = bench_now();
        sbx_sandbox_exec(sb, "exit 0", NULL, &r, NULL);
        core[i] = bench_now() - t0;
        sbx_exec_result_free(r);
    }
    /* 1000 execs in flight at once, then all awaited. */
    static sbx_future *fs[1000];
    double t0 = bench_now();
    for (int i = 0; i < 1000; i++)
        sbx_sandbox_exec_async(sb, "exit 0", NULL, &fs[i], NULL);
    for (int i = 0; i < 1000; i++) {
        sbx_future_wait(fs[i], -1, NULL);
        sbx_future_free(fs[i]);
    }
    async_batch = bench_now() - t0;

    printf("== core (fake provider: no process; measures sbx's own overhead)\n");
    bench_row("baseline: fork+exec /bin/true", base_p50, base_p99, base_p50);
    double c50 = bench_pct(core, N, 50), c99 = bench_pct(core, N, 99);
    bench_row("sbx_sandbox_exec round trip (core only)", c50, c99, base_p50);
    printf("%-44s %8.1f us per exec, 1000 in flight\n", "sbx_sandbox_exec_async batch",
           async_batch / 1000 * 1e6);
    sbx_sandbox_free(sb);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    return 0;
}
