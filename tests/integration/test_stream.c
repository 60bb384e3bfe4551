/*
 * Streaming exec on real providers: a linux box (through sbx-agent) and
 * local host processes, plus the core's fallback for a provider that does
 * not stream (fake). No timing thresholds: "first bytes before the end" is
 * shown by a command that prints, then blocks until the test creates a
 * gate file, which the test does only after it saw the first chunk; if
 * chunks came only at the end the test would wait forever, so each wait is
 * bounded by a generous deadline that fails the test.
 */
#include "linux_fixture.h"
#include "tap.h"
#include "common.h"
#include "lib/box.h"

#include <sbx.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define DEADLINE_S 60

enum kind { LINUX, LOCAL };

static sbx_provider *make(enum kind k)
{
    if (k == LINUX) {
        need_boxes();
        return provider(NULL);
    }
    tap_allow_fd_changes();
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "{\"local\": {\"workspace_root\": \"%s/ws\"}}", tap_tmpdir());
    return provider_of(cfg);
}

/* Where a box's commands and the test agree to put a gate file (relative: the default cwd). */
static const char *gate(enum kind k) { return k == LINUX ? "/tmp/sbx-gate" : "sbx-gate"; }

static int wait_future(sbx_future *f, sbx_error **e)
{
    int rc = sbx_future_wait(f, DEADLINE_S, e);
    if (rc == SBX_ETIMEDOUT && !sbx_future_done(f))
        TAP_FAIL("the exec did not complete within %d s", DEADLINE_S);
    return rc;
}

/* --- a collector for the output callback --------------------------------- */

struct collect {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char *buf[3]; /* [SBX_STREAM_STDOUT], [SBX_STREAM_STDERR] */
    size_t len[3];
    size_t chunks;
    int bad_stream;
    bool on_other_thread; /* every call came from a thread other than the test's */
    pthread_t test_thread;
};

static void collect_init(struct collect *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->on_other_thread = true;
    c->test_thread = pthread_self();
}

static void collect_cb(int stream, const char *data, size_t len, void *user)
{
    struct collect *c = user;
    pthread_mutex_lock(&c->lock);
    if (pthread_equal(pthread_self(), c->test_thread))
        c->on_other_thread = false;
    if (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR) {
        c->bad_stream = stream;
    } else {
        char *n = realloc(c->buf[stream], c->len[stream] + len + 1);
        if (n) {
            memcpy(n + c->len[stream], data, len);
            c->len[stream] += len;
            n[c->len[stream]] = 0;
            c->buf[stream] = n;
        }
    }
    c->chunks++;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
}

/* Waits (bounded) until `stream` holds `text`; fails the test otherwise. */
static void collect_wait_for(struct collect *c, int stream, const char *text)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += DEADLINE_S;
    pthread_mutex_lock(&c->lock);
    while (!(c->buf[stream] && strstr(c->buf[stream], text))) {
        if (pthread_cond_timedwait(&c->cond, &c->lock, &dl) == ETIMEDOUT) {
            pthread_mutex_unlock(&c->lock);
            TAP_FAIL("no chunk holding '%s' arrived while the command ran (%d s)", text,
                     DEADLINE_S);
        }
    }
    pthread_mutex_unlock(&c->lock);
}

static const char *collected(struct collect *c, int stream)
{
    return c->buf[stream] ? c->buf[stream] : "";
}

static void collect_free(struct collect *c)
{
    free(c->buf[1]);
    free(c->buf[2]);
}

/* --- first bytes before the end ------------------------------------------ */

static void first_bytes_cb(enum kind k)
{
    sbx_provider *p = make(k);
    sbx_sandbox *sb = start(p, NULL);
    TAP_EQ_INT(sbx_provider_supports(p, "exec-stream"), 1);
    struct collect c;
    collect_init(&c);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_OK(sbx_exec_opts_set_output_cb(o, collect_cb, &c));
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "rm -f %1$s; echo first; echo first-err >&2; while [ ! -e %1$s ]; do sleep 0.01; "
             "done; echo second",
             gate(k));
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_exec_async(sb, cmd, o, &f, NULL));
    /* Blocks until the first chunk came: only streaming gets past here before the gate. */
    collect_wait_for(&c, SBX_STREAM_STDOUT, "first\n");
    collect_wait_for(&c, SBX_STREAM_STDERR, "first-err\n");
    TAP_TRUE(!sbx_future_done(f));
    char touch[256];
    snprintf(touch, sizeof(touch), "touch %s", gate(k));
    sbx_exec_result_free(run(sb, touch, NULL));
    sbx_error *e = NULL;
    TAP_EQ_INT(wait_future(f, &e), SBX_OK);
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_future_take_exec_result(f, &r, &e));
    /* Every chunk before the completion, on the loop thread, and the result keeps the output. */
    TAP_EQ_STR(collected(&c, SBX_STREAM_STDOUT), "first\nsecond\n");
    TAP_EQ_STR(collected(&c, SBX_STREAM_STDERR), "first-err\n");
    TAP_TRUE(c.on_other_thread);
    TAP_EQ_INT(c.bad_stream, 0);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "first\nsecond\n");
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "first-err\n");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    sbx_future_free(f);
    sbx_exec_opts_free(o);
    collect_free(&c);
    stop_free(sb);
    sbx_provider_free(p);
}

/* Reads `fd` until `text` was seen (bounded); returns what was read (malloc'd). */
static void first_bytes_fd(enum kind k)
{
    sbx_provider *p = make(k);
    sbx_sandbox *sb = start(p, NULL);
    int po[2], pe[2];
    TAP_EQ_INT(pipe2(po, O_CLOEXEC), 0);
    TAP_EQ_INT(pipe2(pe, O_CLOEXEC), 0);
    int flags_before = fcntl(po[1], F_GETFL);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_OK(sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, po[1]));
    TAP_OK(sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDERR, pe[1]));
    TAP_OK(sbx_exec_opts_set_keep_output(o, 0));
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "rm -f %1$s; echo one; echo uno >&2; while [ ! -e %1$s ]; do sleep 0.01; done; "
             "echo two; echo dos >&2",
             gate(k));
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_exec_async(sb, cmd, o, &f, NULL));
    char *a = read_fd_until(po[0], "one\n", DEADLINE_S);
    char *b = read_fd_until(pe[0], "uno\n", DEADLINE_S);
    TAP_TRUE(!sbx_future_done(f));
    /* The caller's descriptor keeps its flags: the core writes through its own. */
    TAP_EQ_INT(fcntl(po[1], F_GETFL), flags_before);
    char touch[256];
    snprintf(touch, sizeof(touch), "touch %s", gate(k));
    sbx_exec_result_free(run(sb, touch, NULL));
    sbx_error *e = NULL;
    TAP_EQ_INT(wait_future(f, &e), SBX_OK);
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_future_take_exec_result(f, &r, &e));
    /* keep_output 0: the result carries none, but every byte went to the fds. */
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "");
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    close(po[1]);
    close(pe[1]);
    char rest[64] = {0};
    TAP_EQ_INT(read(po[0], rest, sizeof(rest) - 1), 4);
    TAP_EQ_STR(rest, "two\n");
    memset(rest, 0, sizeof(rest));
    TAP_EQ_INT(read(pe[0], rest, sizeof(rest) - 1), 4);
    TAP_EQ_STR(rest, "dos\n");
    TAP_EQ_STR(a, "one\n");
    TAP_EQ_STR(b, "uno\n");
    free(a);
    free(b);
    close(po[0]);
    close(pe[0]);
    sbx_exec_result_free(r);
    sbx_future_free(f);
    sbx_exec_opts_free(o);
    stop_free(sb);
    sbx_provider_free(p);
}

/* --- order, separation, keep_output -------------------------------------- */

static void order(enum kind k)
{
    sbx_provider *p = make(k);
    sbx_sandbox *sb = start(p, NULL);
    struct collect c;
    collect_init(&c);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_OK(sbx_exec_opts_set_output_cb(o, collect_cb, &c));
    sbx_exec_result *r =
        run(sb, "i=0; while [ $i -lt 3000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done", o);
    char *want_out = calloc(1, 64 * 1024), *want_err = calloc(1, 64 * 1024);
    size_t no = 0, ne = 0;
    for (int i = 0; i < 3000; i++) {
        no += (size_t)snprintf(want_out + no, 64 * 1024 - no, "out%d\n", i);
        ne += (size_t)snprintf(want_err + ne, 64 * 1024 - ne, "err%d\n", i);
    }
    TAP_EQ_STR(collected(&c, SBX_STREAM_STDOUT), want_out);
    TAP_EQ_STR(collected(&c, SBX_STREAM_STDERR), want_err);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), want_out);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), want_err);
    sbx_exec_result_free(r);

    /* keep_output 0: chunks still come; the result holds none. */
    collect_free(&c);
    collect_init(&c);
    TAP_OK(sbx_exec_opts_set_keep_output(o, 0));
    r = run(sb, "echo kept-nowhere; echo e >&2; exit 3", o);
    TAP_EQ_STR(collected(&c, SBX_STREAM_STDOUT), "kept-nowhere\n");
    TAP_EQ_STR(collected(&c, SBX_STREAM_STDERR), "e\n");
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "");
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 3);
    sbx_exec_result_free(r);
    free(want_out);
    free(want_err);
    collect_free(&c);
    sbx_exec_opts_free(o);
    stop_free(sb);
    sbx_provider_free(p);
}

/* --- timeouts keep their partial output ---------------------------------- */

static void timeout_partial(enum kind k)
{
    sbx_provider *p = make(k);
    sbx_sandbox *sb = start(p, NULL);
    struct collect c;
    collect_init(&c);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_OK(sbx_exec_opts_set_timeout(o, 1));
    /* No callback first: the one-shot exec returns the partial output too. */
    sbx_exec_result *r = run(sb, "echo partial; printf perr >&2; sleep 100", o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "partial\n");
    if (k == LINUX)
        TAP_EQ_STR(sbx_exec_result_stderr(r, NULL),
                   "perr\ncommand timed out after 1s: 'echo partial; printf perr >&2; sleep 100'");
    else
        TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "perr\nlocal command timed out after 1s");
    sbx_exec_result_free(r);

    /* Streaming and keep_output 0: the chunks came; stderr is the message alone. */
    TAP_OK(sbx_exec_opts_set_output_cb(o, collect_cb, &c));
    TAP_OK(sbx_exec_opts_set_keep_output(o, 0));
    r = run(sb, "echo partial; sleep 100", o);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    TAP_EQ_STR(collected(&c, SBX_STREAM_STDOUT), "partial\n");
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "");
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), k == LINUX
                                                    ? "command timed out after 1s: 'echo partial; sleep 100'"
                                                    : "local command timed out after 1s");
    sbx_exec_result_free(r);
    collect_free(&c);
    sbx_exec_opts_free(o);
    stop_free(sb);
    sbx_provider_free(p);
}

/* --- a slow fd reader gets every byte; a gone one kills the command ------ */

struct slow_reader {
    int fd;
    size_t total;
    size_t bad; /* bytes that were not the pattern */
};

/* This process's peak resident set (VmHWM), KiB. */
static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

static void *slow_read(void *arg)
{
    struct slow_reader *s = arg;
    char buf[16384];
    for (;;) {
        ssize_t n = read(s->fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != ((s->total + (size_t)i) % 2 ? '\n' : 'y'))
                s->bad++;
        s->total += (size_t)n;
        /* Slower than the box writes: the core must hold back, not drop. */
        struct timespec ms = { 0, 300000 };
        nanosleep(&ms, NULL);
    }
    return NULL;
}

static void slow_reader(enum kind k)
{
    sbx_provider *p = make(k);
    sbx_sandbox *sb = start(p, NULL);
    int pp[2];
    TAP_EQ_INT(pipe2(pp, O_CLOEXEC), 0);
    struct slow_reader s = { .fd = pp[0] };
    pthread_t t;
    TAP_EQ_INT(pthread_create(&t, NULL, slow_read, &s), 0);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_OK(sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, pp[1]));
    TAP_OK(sbx_exec_opts_set_keep_output(o, 0));
    TAP_OK(sbx_exec_opts_set_output_limit(o, (size_t)128 << 20));
    /*
     * 48 MiB written far faster than it is read: without flow control the
     * core would queue most of it in this process; with it, the command
     * waits and memory stays within a few MiB.
     */
    long hwm_before = peak_rss_kib();
    sbx_exec_result *r = run(sb, "yes | head -c 50331648", o);
    long grew = peak_rss_kib() - hwm_before;
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_EQ_INT(sbx_exec_result_truncated(r), 0);
    sbx_exec_result_free(r);
    close(pp[1]); /* the future completed after the last byte was written: EOF follows it */
    pthread_join(t, NULL);
    TAP_EQ_INT(s.total, 50331648);
    TAP_EQ_INT(s.bad, 0);
    if (grew > 16 * 1024)
        TAP_FAIL("the process's peak RSS grew by %ld KiB while a slow reader took 48 MiB: the "
                 "output was queued, not held back",
                 grew);
    close(pp[0]);

    /* A reader that went away: the command is killed, the exec says why, no SIGPIPE. */
    TAP_EQ_INT(pipe2(pp, O_CLOEXEC), 0);
    close(pp[0]);
    TAP_OK(sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, pp[1]));
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_exec_async(sb, "yes", o, &f, NULL));
    sbx_error *e = NULL;
    TAP_EQ_INT(wait_future(f, &e), SBX_EIO);
    TAP_EQ_INT(sbx_error_errno(e), EPIPE);
    TAP_CONTAINS(sbx_error_message(e), "writing the command's stdout to fd");
    sbx_error_free(e);
    sbx_future_free(f);
    close(pp[1]);

    /* A descriptor that is not open is refused at once. */
    TAP_OK(sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, 1000));
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "true", o, &f, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "output descriptor 1000");
    sbx_error_free(e);
    sbx_exec_opts_free(o);
    stop_free(sb);
    sbx_provider_free(p);
}

/*
 * A stream nobody reads holds back its own command only (protocol 5: a
 * window per exec): the box's other execs on the same connection go on.
 * Before, the whole connection stopped and this test waited forever.
 */
static void stalled_reader(enum kind k)
{
    sbx_provider *p = make(k);
    sbx_sandbox *sb = start(p, NULL);
    int pp[2];
    TAP_EQ_INT(pipe2(pp, O_CLOEXEC), 0);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_OK(sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, pp[1]));
    TAP_OK(sbx_exec_opts_set_keep_output(o, 0));
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_exec_async(sb, "yes", o, &f, NULL));
    /* The pipe fills (64 KiB) and the core's queue past its mark: the exec is paused. */
    int queued = 0;
    for (int i = 0; i < DEADLINE_S * 100 && queued < 65536; i++) {
        TAP_EQ_INT(ioctl(pp[0], FIONREAD, &queued), 0);
        if (queued < 65536)
            usleep(10000);
    }
    TAP_TRUE(queued >= 65536);
    for (int i = 0; i < 20; i++) {
        sbx_exec_result *r = run(sb, "echo hi", NULL);
        TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "hi\n");
        sbx_exec_result_free(r);
    }
    TAP_TRUE(!sbx_future_done(f));
    /* Drained, the stalled exec goes on: more bytes come than the pipe and the window held. */
    char buf[65536];
    size_t total = 0;
    while (total < (size_t)8 << 20) {
        ssize_t n = read(pp[0], buf, sizeof(buf));
        TAP_TRUE(n > 0);
        total += (size_t)n;
    }
    sbx_future_cancel(f);
    sbx_error *e = NULL;
    TAP_EQ_INT(wait_future(f, &e), SBX_ECANCELED);
    sbx_error_free(e);
    sbx_future_free(f);
    close(pp[0]);
    close(pp[1]);
    sbx_exec_opts_free(o);
    stop_free(sb);
    sbx_provider_free(p);
}

/* --- cancel mid-stream --------------------------------------------------- */

static void cancel_midstream(enum kind k)
{
    sbx_provider *p = make(k);
    sbx_sandbox *sb = start(p, NULL);
    struct collect c;
    collect_init(&c);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_OK(sbx_exec_opts_set_output_cb(o, collect_cb, &c));
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_exec_async(
        sb, "sleep 1000 & echo $! > spid; echo pid:$$; while :; do echo tick; sleep 0.01; done", o,
        &f, NULL));
    collect_wait_for(&c, SBX_STREAM_STDOUT, "tick\n");
    sbx_future_cancel(f);
    sbx_error *e = NULL;
    TAP_EQ_INT(wait_future(f, &e), SBX_ECANCELED);
    sbx_error_free(e);
    sbx_future_free(f);
    long pid = 0;
    pthread_mutex_lock(&c.lock);
    const char *at = strstr(collected(&c, SBX_STREAM_STDOUT), "pid:");
    if (at)
        pid = strtol(at + 4, NULL, 10);
    pthread_mutex_unlock(&c.lock);
    TAP_TRUE(pid > 1);
    /*
     * Nothing of it runs: neither the shell nor its background child (a
     * zombie not yet reaped by whoever inherited it is not running).
     */
    char check[512];
    snprintf(check, sizeof(check),
             "for p in %ld $(cat spid); do s=$(awk '{print $3}' /proc/$p/stat 2>/dev/null); "
             "if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo alive:$p:$s; fi; done; echo checked",
             pid);
    sbx_exec_result *r = run(sb, check, NULL);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "checked\n");
    sbx_exec_result_free(r);
    collect_free(&c);
    sbx_exec_opts_free(o);
    stop_free(sb);
    sbx_provider_free(p);
}

#define BOTH(name)                                                                                 \
    static void test_linux_##name(void) { name(LINUX); }                                          \
    static void test_local_##name(void) { name(LOCAL); }

BOTH(first_bytes_cb)
BOTH(first_bytes_fd)
BOTH(order)
BOTH(timeout_partial)
BOTH(slow_reader)
BOTH(cancel_midstream)
BOTH(stalled_reader)

/* --- a provider that does not stream: the core's fallback ----------------- */

static void test_fake_fallback(void)
{
    tap_allow_fd_changes();
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new("{\"fake\": {\"marker\": \"from-fake\"}}", &p, &e) != SBX_OK)
        TAP_FAIL("provider: %s", sbx_error_message(e));
    TAP_EQ_INT(sbx_provider_supports(p, "exec-stream"), 0);
    sbx_sandbox *sb = NULL;
    sbx_spec *spec = sbx_spec_new();
    TAP_OK(sbx_sandbox_new(p, spec, &sb, NULL));
    TAP_OK(sbx_sandbox_start(sb, NULL, NULL));
    struct collect c;
    collect_init(&c);
    int pp[2];
    TAP_EQ_INT(pipe2(pp, O_CLOEXEC), 0);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_OK(sbx_exec_opts_set_output_cb(o, collect_cb, &c));
    TAP_OK(sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, pp[1]));
    TAP_OK(sbx_exec_opts_set_keep_output(o, 0));
    sbx_exec_result *r = run(sb, "marker", o);
    /* The whole output as chunks before the completion, to the callback and the fd. */
    TAP_CONTAINS(collected(&c, SBX_STREAM_STDOUT), "from-fake");
    char buf[256] = {0};
    TAP_TRUE(read(pp[0], buf, sizeof(buf) - 1) > 0);
    TAP_CONTAINS(buf, "from-fake");
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "");
    sbx_exec_result_free(r);
    close(pp[0]);
    close(pp[1]);
    collect_free(&c);
    sbx_exec_opts_free(o);
    sbx_spec_free(spec);
    stop_free(sb);
    sbx_provider_free(p);
}

TAP_MAIN(TAP_T(test_linux_first_bytes_cb, 120), TAP_T(test_local_first_bytes_cb, 120),
         TAP_T(test_linux_first_bytes_fd, 120), TAP_T(test_local_first_bytes_fd, 120),
         TAP_T(test_linux_order, 120), TAP_T(test_local_order, 120),
         TAP_T(test_linux_timeout_partial, 120), TAP_T(test_local_timeout_partial, 120),
         TAP_T(test_linux_slow_reader, 180), TAP_T(test_local_slow_reader, 180),
         TAP_T(test_linux_cancel_midstream, 120), TAP_T(test_local_cancel_midstream, 120),
         TAP_T(test_linux_stalled_reader, 120), TAP_T(test_local_stalled_reader, 120),
         TAP(test_fake_fallback))
