/* What the benchmarks share: see bench.h. */
#include "lib/bench.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"

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

double bench_now_ms(void)
{
    return bench_now() * 1e3;
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

void bench_die_err(const char *what, const sbx_error *e)
{
    bench_die("%s: %s", what, e ? sbx_error_message(e) : "failed");
}

static char state_dir[64];

static void state_gone(void)
{
    bench_state_end();
}

const char *bench_state_dir(void)
{
    if (state_dir[0])
        return state_dir;
    snprintf(state_dir, sizeof(state_dir), "/tmp/sbx-bench-XXXXXX");
    if (!mkdtemp(state_dir)) {
        state_dir[0] = 0;
        bench_die("a state directory: mkdtemp: %s", strerror(errno));
    }
    setenv("SBX_STATE_DIR", state_dir, 1);
    bench_on_die(state_gone);
    return state_dir;
}

void bench_state_end(void)
{
    if (state_dir[0])
        sbx__rm_rf(state_dir);
    state_dir[0] = 0;
}

static pid_t children[8];

static void children_gone(void)
{
    for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
        if (children[i] > 0)
            bench_child_end(children[i]);
}

pid_t bench_child(void)
{
    size_t i = 0;
    while (i < sizeof(children) / sizeof(children[0]) && children[i] > 0)
        i++;
    if (i == sizeof(children) / sizeof(children[0]))
        bench_die("more than %zu helper processes", i);
    static bool hooked;
    if (!hooked)
        bench_on_die(children_gone);
    hooked = true;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        /* It must not outlive the bench, whatever ends it. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(1);
        return 0;
    }
    children[i] = pid;
    return pid;
}

void bench_child_end(pid_t pid)
{
    for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
        if (children[i] == pid)
            children[i] = 0;
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
}

void bench_at_end(const char *cmd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        bench_die("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        /*
         * Its own session: a ^C to the bench's process group does not end
         * it. It keeps none of the bench's descriptors (a box's control
         * socket must close with the bench), nor its stdout.
         */
        setsid();
        if (dup2(p[0], 3) < 0)
            _exit(127);
        close_range(4, ~0U, 0);
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0)
            dup2(null, 0), dup2(null, 1);
        char c;
        ssize_t r;
        do
            r = read(3, &c, 1);
        while (r < 0 && errno == EINTR);
        close(3);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* The write end stays open, unused, until the bench's last moment; never reaped. */
    close(p[0]);
}

void bench_send_zeros(int fd)
{
    char line[32];
    size_t k = 0;
    while (k + 1 < sizeof(line) && read(fd, line + k, 1) == 1 && line[k] != '\n')
        k++;
    line[k] = 0;
    unsigned long long left = strtoull(line, NULL, 10);
    static char zero[1 << 16];
    while (left) {
        ssize_t w = write(fd, zero, left < sizeof(zero) ? left : sizeof(zero));
        if (w <= 0)
            break;
        left -= (unsigned long long)w;
    }
}

unsigned long long bench_drain(int fd)
{
    static char buf[1 << 17];
    unsigned long long got = 0;
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0)
        got += (unsigned long long)r;
    close(fd);
    return got;
}
