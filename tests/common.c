/* The TAP harness (tests/tap.h) and helpers shared by the C tests. */
#include "tap.h"
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sbx.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

static int skip_pipe = -1;
static bool allow_fd_changes;
static char tmpdir_path[256];

void tap_fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "# %s:%d: ", file, line);
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
    fflush(stdout);
    _exit(1);
}

void tap_skip(const char *why)
{
    if (skip_pipe >= 0) {
        ssize_t n = write(skip_pipe, why, strlen(why));
        (void)n;
    }
    fflush(stdout);
    _exit(77);
}

void tap_allow_fd_changes(void) { allow_fd_changes = true; }

const char *tap_tmpdir(void)
{
    /* Made by the parent before the fork, so it is removed however the test ends. */
    return tmpdir_path;
}

/* The open descriptors of this process, as a bitmap of the first 1024. */
static void fd_snapshot(unsigned char *map, size_t n)
{
    memset(map, 0, n);
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int self = dirfd(d);
    struct dirent *de;
    while ((de = readdir(d))) {
        int fd = (int)strtol(de->d_name, NULL, 10);
        if (de->d_name[0] == '.' || fd == self || (size_t)fd >= n * 8)
            continue;
        map[fd / 8] |= (unsigned char)(1u << (fd % 8));
    }
    closedir(d);
}

/*
 * Under TSan (make check-tsan), for every test binary. The fork tests start
 * threads in a child of a multi-threaded process on purpose (the library
 * must allow it), which TSan otherwise stops.
 */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SBX_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SBX_TSAN 1
#endif
#ifdef SBX_TSAN
#include <sanitizer/common_interface_defs.h>
const char *__tsan_default_options(void);
__attribute__((visibility("default"))) const char *__tsan_default_options(void)
{
    return "die_after_fork=0";
}
/*
 * Debian's libuv is not instrumented and closes descriptors with a raw
 * syscall(SYS_close), which TSan does not see. When a worker thread then
 * gets the same number from opendir() (the local provider removing a
 * workspace), TSan pairs the loop's old epoll_ctl on the pipe with the
 * worker's closedir and reports a race on "file descriptor N" that is not
 * one: libuv removed the pipe from epoll before closing it. The same
 * happens when a transfer thread's libarchive (not instrumented either)
 * or the transfer thread itself opens and closes a descriptor whose number
 * libuv's loop held and closed unseen (uv_pipe: the local provider's exec
 * pipes during a directory transfer).
 */
const char *__tsan_default_suppressions(void);
__attribute__((visibility("default"))) const char *__tsan_default_suppressions(void)
{
    return "race:rm_rf_at\nrace:libarchive.so\nrace:uv_pipe\n";
}
/*
 * Matching a race against that suppression starts TSan's symbolizer, a
 * child process talking to us over two pipes. Start it before the harness
 * takes its descriptor snapshot so its pipes are not counted as a leak.
 */
static void prime_sanitizer(void)
{
    char buf[256];
    __sanitizer_symbolize_pc(__builtin_return_address(0), "%F", buf, sizeof(buf));
}
#else
static void prime_sanitizer(void) {}
#endif

/* Weak: a test file may define tap_prime() to warm up process-wide state. */
__attribute__((weak)) void tap_prime(void);

int tap_bulk(int n)
{
#ifdef SBX_TSAN
    return n / 10;
#else
    return getenv("SBX_VALGRIND") ? n / 10 : n;
#endif
}

/* SBX_TEST_TIMEOUT_SCALE stretches every alarm (valgrind, an emulated guest). */
static unsigned timeout_scale(void)
{
    const char *scale = getenv("SBX_TEST_TIMEOUT_SCALE");
    return scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1;
}

/*
 * A test that outlives its alarm says where every thread was before it dies,
 * so a hang in CI can be read from the log: gdb attaches and prints all
 * backtraces (fork, exec and waitpid are async-signal-safe); without gdb, the
 * main thread's raw frames.
 */
static char alarm_pid[16];
static void on_alarm(int sig)
{
    static const char msg[] = "# the test's alarm rang; where it was:\n";
    (void)!write(1, msg, sizeof(msg) - 1);
    pid_t g = fork();
    if (g == 0) {
        dup2(1, 2);
        execlp("timeout", "timeout", "60", "gdb", "-q", "-nx", "-batch", "-p", alarm_pid, "-ex",
               "thread apply all bt", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (g < 0 || waitpid(g, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        void *frames[32];
        int n = backtrace(frames, 32);
        backtrace_symbols_fd(frames, n, 1);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void run_child(const struct tap_test *t, int pipe_w)
{
    skip_pipe = pipe_w;
    void *prime[1];
    backtrace(prime, 1); /* loads libgcc now, not in the handler */
    snprintf(alarm_pid, sizeof(alarm_pid), "%d", (int)getpid());
    signal(SIGALRM, on_alarm);
    /*
     * The alarm only catches a hang. Under valgrind every step of the test
     * process is ~20x slower, so tests/run.sh stretches it there.
     */
    alarm(t->timeout_s * timeout_scale());
    prime_sanitizer();
    if (tap_prime)
        tap_prime();
    sbx_prime_library();
    unsigned char before[128], after[128];
    fd_snapshot(before, sizeof(before));
    t->fn();
    fd_snapshot(after, sizeof(after));
    if (!allow_fd_changes) {
        for (int fd = 0; fd < (int)sizeof(before) * 8; fd++) {
            bool was = before[fd / 8] & (1u << (fd % 8));
            bool is = after[fd / 8] & (1u << (fd % 8));
            if (is && !was) {
                char link[64], target[512] = "";
                snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
                ssize_t n = readlink(link, target, sizeof(target) - 1);
                if (n > 0)
                    target[n] = 0;
                tap_fail_at(__FILE__, __LINE__, "test leaked file descriptor %d (%s)", fd, target);
            }
        }
    }
#if defined(__SANITIZE_ADDRESS__)
    /* The child leaves with _exit(), which skips LeakSanitizer's exit hook: check here. */
    if (__lsan_do_recoverable_leak_check())
        tap_fail_at(__FILE__, __LINE__, "LeakSanitizer found leaks (report above)");
#endif
    fflush(stdout);
    _exit(0);
}

/*
 * The filter (argv[1] or $TAP_FILTER) is a comma-separated list of name
 * substrings: a test runs when it contains one of the plain ones (or there
 * are none) and none of those that start with '-'. "linux,-userns": every
 * linux test but the userns ones.
 */
static bool selected(const char *name, const char *filter)
{
    if (!filter || !*filter)
        return true;
    bool any_include = false, included = false;
    for (const char *s = filter; *s;) {
        size_t len = strcspn(s, ",");
        bool exclude = *s == '-';
        const char *pat = s + exclude;
        size_t plen = len - exclude;
        bool hit = false;
        for (const char *h = name; plen && *h && !hit; h++)
            hit = strncmp(h, pat, plen) == 0;
        if (exclude && hit)
            return false;
        if (!exclude && plen) {
            any_include = true;
            included = included || hit;
        }
        s += len + (s[len] == ',');
    }
    return !any_include || included;
}

int tap_main(int argc, char **argv, const struct tap_test *tests, size_t n)
{
    const char *filter = argc > 1 ? argv[1] : getenv("TAP_FILTER");
    bool must_work = getenv("SBX_MUST_WORK") && strcmp(getenv("SBX_MUST_WORK"), "0") != 0;
    size_t planned = 0;
    for (size_t i = 0; i < n; i++)
        if (selected(tests[i].name, filter))
            planned++;
    printf("1..%zu\n", planned);
    fflush(stdout);
    int passed = 0, failed = 0, skipped = 0, num = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tap_test *t = &tests[i];
        if (!selected(t->name, filter))
            continue;
        num++;
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
            return 2;
        snprintf(tmpdir_path, sizeof(tmpdir_path), "/tmp/sbx-test-XXXXXX");
        if (!mkdtemp(tmpdir_path))
            return 2;
        fflush(stdout);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        if (pid == 0) {
            close(p[0]);
            setpgid(0, 0);
            run_child(t, p[1]);
        }
        close(p[1]);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        char why[512] = "";
        ssize_t r = read(p[0], why, sizeof(why) - 1);
        if (r > 0)
            why[r] = 0;
        close(p[0]);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        /* A test that took a while says so (the log shows where a suite's time goes, and a
         * margin shrinking before it is gone). */
        if (took >= 5 || took > t->timeout_s * timeout_scale() / 4.0)
            printf("# %s took %.1f s of its %u s alarm\n", t->name, took, t->timeout_s * timeout_scale());
        /* Kill whatever the test left in its process group, then remove its files. */
        kill(-pid, SIGKILL);
        rm_rf(tmpdir_path);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            printf("ok %d - %s\n", num, t->name);
            passed++;
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
            if (must_work) {
                printf("not ok %d - %s # skipped but SBX_MUST_WORK is set: %s\n", num, t->name, why);
                failed++;
            } else {
                printf("ok %d - %s # SKIP %s\n", num, t->name, why);
                skipped++;
            }
        } else {
            if (WIFSIGNALED(status))
                printf("# %s killed by signal %d%s\n", t->name, WTERMSIG(status),
                       WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
            printf("not ok %d - %s\n", num, t->name);
            failed++;
        }
        fflush(stdout);
    }
    printf("# %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

/* --- helpers ------------------------------------------------------------- */

void sbx_prime_library(void)
{
    /*
     * libuv keeps process-wide descriptors (its signal pipe, the worker pool)
     * from first use to exit. Touch them once before the fd snapshot so a test
     * is only blamed for what it leaks itself.
     */
    static bool primed;
    if (primed)
        return;
    primed = true;
    int threads = tap_thread_count();
    sbx_context *ctx = NULL;
    if (sbx_context_new(&ctx, NULL) == 0)
        sbx_context_free(ctx);
    /*
     * The context's loop thread is joined, but the kernel can list it in
     * /proc/self/task for a moment after pthread_join returns. Wait for it to
     * go, so a test's thread baseline does not count it (seen in CI: a
     * baseline of 2 that later, correctly, came down to 1). Bounded: this is
     * a moment, never a hang. Under ThreadSanitizer the count never comes
     * back: the first thread started TSan's own background thread, which
     * stays; so stop once the count has held still for 100 ms (waiting the
     * whole bound cost TSan runs 6 s per test).
     */
    for (int i = 0, still = 0, last = -1; i < 5000 && still < 100; i++) {
        int now = tap_thread_count();
        if (now <= threads)
            break;
        still = now == last ? still + 1 : 0;
        last = now;
        usleep(1000);
    }
    sbx_prime_hook();
}

int tap_thread_count(void) { return count_dir_entries("/proc/self/task"); }

int count_dir_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

__attribute__((weak)) void sbx_prime_hook(void) {}

int rm_rf(const char *path)
{
    char *argv[] = { (char *)"rm", (char *)"-rf", (char *)path, NULL };
    pid_t pid = fork();
    if (pid == 0) {
        execvp("rm", argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[n] = 0;
    fclose(f);
    return buf;
}

int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t n = strlen(text);
    int rc = fwrite(text, 1, n, f) == n ? 0 : -1;
    return fclose(f) == 0 ? rc : -1;
}

int run_cmd(char *out, size_t out_size, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    char sink[4096];
    for (;;) {
        char *dst = out && len + 1 < out_size ? out + len : sink;
        size_t room = out && len + 1 < out_size ? out_size - len - 1 : sizeof(sink);
        ssize_t n = read(p[0], dst, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (dst != sink)
            len += (size_t)n;
    }
    if (out && out_size)
        out[len] = 0;
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

char *read_fd_until(int fd, const char *text, int deadline_s)
{
    size_t len = 0, cap = 4096;
    char *buf = calloc(1, cap);
    time_t end = time(NULL) + deadline_s;
    while (!strstr(buf, text)) {
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        int left = (int)(end - time(NULL));
        if (left <= 0 || poll(&pf, 1, left * 1000) <= 0)
            TAP_FAIL("no '%s' on the fd within %d s; got '%s'", text, deadline_s, buf);
        if (len + 1025 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n = read(fd, buf + len, 1024);
        if (n <= 0)
            TAP_FAIL("the fd ended before '%s'", text);
        len += (size_t)n;
        buf[len] = 0;
    }
    return buf;
}
