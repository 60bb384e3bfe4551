/* What the benchmarks share: see bench.h. */
#include "lib/bench.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_pct(double *v, int n, double p)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    int i = (int)(p / 100.0 * n + 0.5) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

double bench_fork_exec_true(void)
{
    double t0 = bench_now();
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return bench_now() - t0;
}

void bench_row(const char *what, double p50, double p99, double base_p50)
{
    printf("%-44s p50 %8.3f ms  p99 %8.3f ms  %7.2fx fork+exec\n", what, p50 * 1e3, p99 * 1e3,
           base_p50 > 0 ? p50 / base_p50 : 0);
}

sbx_spec *bench_spec(const char *options)
{
    json_error_t je;
    json_t *o = options ? json_loads(options, 0, &je) : json_object();
    if (!json_is_object(o))
        bench_die("provider_options %s: not a JSON object", options);
    json_object_set_new(o, "die_with_creator", json_true());
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    sbx_spec *s = sbx_spec_new();
    sbx_error *e = NULL;
    if (!text || !s)
        bench_die("a spec: out of memory");
    if (sbx_spec_set_provider_options(s, text, &e) != SBX_OK ||
        sbx_spec_set_ttl(s, BENCH_BOX_TTL_S) != SBX_OK)
        bench_die("a spec: %s", e ? sbx_error_message(e) : "bad ttl");
    free(text);
    return s;
}

static void (*on_die[8])(void);
static int n_on_die;

void bench_on_die(void (*fn)(void))
{
    if (n_on_die < 8)
        on_die[n_on_die++] = fn;
}

void bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program_invocation_short_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    while (n_on_die > 0)
        on_die[--n_on_die]();
    exit(1);
}
