/* Shared bench helpers: monotonic clock, percentiles, a bare fork+exec baseline. */
#ifndef SBX_BENCH_H
#define SBX_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts `v` and returns the p-th percentile (0..100). */
static inline double bench_pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(double), bench_cmp);
    int i = (int)(p / 100.0 * (n - 1) + 0.5);
    return v[i];
}

/* One fork+exec+wait of /bin/true: the floor every exec is compared with. */
static inline double bench_fork_exec_true(void)
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

static inline void bench_row(const char *what, double p50, double p99, double base_p50)
{
    printf("%-44s p50 %8.3f ms  p99 %8.3f ms  %7.2fx fork+exec\n", what, p50 * 1e3, p99 * 1e3,
           base_p50 > 0 ? p50 / base_p50 : 0);
}

#endif
