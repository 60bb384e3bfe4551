/*
 * The loop thread stays responsive while blocking work is held open: a
 * context's worker pool of one thread is held by an upload from a FIFO
 * nobody writes yet (the worker blocks in open), and behind it wait a
 * create that will fail, a stop whose box left a cgroup that cannot be
 * removed (cgroup removal retries), a status and a download. Meanwhile an
 * exec on another box and a timer on the context's loop must complete. Only
 * then is the FIFO released, and everything queued must finish.
 *
 * No timing threshold: a blocked loop makes the waits below reach their
 * generous deadline (a failure), never a flaky comparison. The timer's
 * lateness is printed as a diagnostic only.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <fcntl.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include <uv.h>

/* Generous: only a blocked loop (or a broken machine) takes this long. */
#define DEADLINE_S 120.0

/* A diagnostic line in the TAP output (not a check). */
static void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

/* The stdout of a command that must succeed (static buffer). */
static const char *out_of_box(sbx_sandbox *sb, const char *cmd)
{
    static char buf[4096];
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, cmd, NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    const char *o = sbx_exec_result_stdout(r, NULL);
    snprintf(buf, sizeof(buf), "%s", o ? o : "");
    sbx_exec_result_free(r);
    return buf;
}

/* --- a timer on the context's loop, counting its ticks -------------------- */

struct ticker {
    sbx_context *ctx;
    uv_timer_t timer;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned ticks;
    uint64_t start_ns, interval_ms;
    uint64_t max_late_ns, sum_late_ns;
    bool closed;
};

static void tick(uv_timer_t *t)
{
    struct ticker *k = t->data;
    pthread_mutex_lock(&k->lock);
    k->ticks++;
    uint64_t due = k->start_ns + (uint64_t)k->ticks * k->interval_ms * 1000000ull;
    uint64_t now = uv_hrtime();
    uint64_t late = now > due ? now - due : 0;
    if (late > k->max_late_ns)
        k->max_late_ns = late;
    k->sum_late_ns += late;
    pthread_cond_broadcast(&k->cond);
    pthread_mutex_unlock(&k->lock);
    /* Each tick re-armed from its due time: lateness does not accumulate. */
    uint64_t next = due + k->interval_ms * 1000000ull;
    uint64_t wait_ms = next > now ? (next - now) / 1000000ull : 0;
    uv_timer_start(t, tick, wait_ms, 0);
}

static void ticker_start_task(void *data)
{
    struct ticker *k = data;
    uv_timer_init(sbx__context_uv(k->ctx), &k->timer);
    k->timer.data = k;
    k->start_ns = uv_hrtime();
    uv_timer_start(&k->timer, tick, k->interval_ms, 0);
}

static void ticker_closed(uv_handle_t *h)
{
    struct ticker *k = h->data;
    pthread_mutex_lock(&k->lock);
    k->closed = true;
    pthread_cond_broadcast(&k->cond);
    pthread_mutex_unlock(&k->lock);
}

static void ticker_stop_task(void *data)
{
    struct ticker *k = data;
    uv_timer_stop(&k->timer);
    uv_close((uv_handle_t *)&k->timer, ticker_closed);
}

static struct timespec deadline_in(double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)s;
    return ts;
}

/* Waits until the timer has ticked `n` more times; false at the deadline. */
static bool ticker_wait(struct ticker *k, unsigned n)
{
    struct timespec dl = deadline_in(DEADLINE_S);
    pthread_mutex_lock(&k->lock);
    unsigned want = k->ticks + n;
    int rc = 0;
    while (k->ticks < want && rc == 0)
        rc = pthread_cond_timedwait(&k->cond, &k->lock, &dl);
    bool ok = k->ticks >= want;
    pthread_mutex_unlock(&k->lock);
    return ok;
}

static void ticker_report(struct ticker *k, const char *phase)
{
    pthread_mutex_lock(&k->lock);
    diag("timer (%llu ms) during %s: %u ticks, lateness max %.2f ms, mean %.3f ms",
             (unsigned long long)k->interval_ms, phase, k->ticks, k->max_late_ns / 1e6,
             k->ticks ? k->sum_late_ns / 1e6 / k->ticks : 0.0);
    k->ticks = 0;
    k->max_late_ns = k->sum_late_ns = 0;
    k->start_ns = uv_hrtime();
    pthread_mutex_unlock(&k->lock);
}

/* --- helpers --------------------------------------------------------------- */

static void wait_done(sbx_future *f, const char *what)
{
    int rc = sbx_future_wait(f, DEADLINE_S, NULL);
    if (rc == SBX_ETIMEDOUT)
        TAP_FAIL("%s did not finish within %.0f s: the loop or the pool is stuck", what,
                 DEADLINE_S);
}

static sbx_sandbox *start_in(sbx_provider *p, const char *image)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_workdir(s, "/work");
    if (image)
        sbx_spec_set_image(s, image);
    sbx_sandbox *sb = start(p, s);
    sbx_spec_free(s);
    return sb;
}

/*
 * Makes the box's cgroups impossible to remove: an empty child group in each
 * (rmdir of the parent says EBUSY while it has children, and killing the
 * group's processes does not help). Returns how many were made.
 */
static int pin_cgroups(const json_t *cgroups, char made[][600], int max)
{
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(cgroups, i, v)
    {
        const char *dir = json_string_value(v);
        if (!dir || n >= max)
            continue;
        snprintf(made[n], 600, "%s/held-by-test", dir);
        if (mkdir(made[n], 0755) == 0)
            n++;
    }
    return n;
}

/* --- the test ---------------------------------------------------------------- */

static void test_loop_responsive_while_blocking_work_is_held(void)
{
    need_boxes();
    sbx_context *ctx = NULL;
    TAP_OK(sbx_context_new(&ctx, &e_));
    /* One worker: whatever needs the pool waits behind the held upload. */
    TAP_OK(sbx_context_set_workers(ctx, 1, &e_));
    TAP_EQ_INT(sbx_context_workers(ctx), 1);
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new_in(ctx, "{\"linux\": {}}", &p, &e_));

    sbx_sandbox *a = start_in(p, NULL); /* answers execs throughout */
    sbx_sandbox *b = start_in(p, NULL); /* the upload target; then a download source */
    sbx_sandbox *c = start_in(p, NULL); /* stopped after its shim dies, cgroups pinned */
    TAP_EQ_STR(out_of_box(a, "echo hi"), "hi\n");
    {
        sbx_exec_result *r = NULL;
        TAP_OK(sbx_sandbox_exec(b, "head -c 300000 /dev/urandom > /tmp/blob; echo ok", NULL, &r,
                                &e_));
        sbx_exec_result_free(r);
    }

    /* Box c: its shim dies uncleanly, and its cgroups get a child nobody removes. */
    char c_dir[1024];
    snprintf(c_dir, sizeof(c_dir), "%s/boxes/%s", state_dir, sbx_sandbox_id(c));
    sbx_linux_record rec;
    TAP_OK(sbx__linux_record_read(c_dir, &rec, &e_));
    char pinned[8][600];
    int npinned = pin_cgroups(rec.cgroups, pinned, 8);
    pid_t shim = rec.shim_pid;
    sbx__linux_record_free(&rec);
    if (npinned == 0)
        TAP_SKIP("the box has no cgroups to pin (no cgroup filesystem for boxes)");
    TAP_EQ_INT(kill(shim, SIGKILL), 0);
    for (int i = 0; i < 6000 && kill(shim, 0) == 0; i++)
        usleep(10 * 1000); /* not our child: wait for its pid to go */
    TAP_NE_INT(kill(shim, 0), 0);

    struct ticker k = { .ctx = ctx, .interval_ms = 10 };
    pthread_mutex_init(&k.lock, NULL);
    pthread_cond_init(&k.cond, NULL);
    TAP_OK(sbx__context_post(ctx, ticker_start_task, &k));
    TAP_TRUE(ticker_wait(&k, 5));
    ticker_report(&k, "warm-up");

    /* Hold: an upload from a FIFO nobody writes: the only worker blocks in open(). */
    char fifo[600], got[600];
    snprintf(fifo, sizeof(fifo), "%s/fifo", tap_tmpdir());
    snprintf(got, sizeof(got), "%s/blob", tap_tmpdir());
    TAP_EQ_INT(mkfifo(fifo, 0600), 0);
    sbx_future *up = NULL, *create = NULL, *stop = NULL, *status = NULL, *down = NULL;
    TAP_OK(sbx_sandbox_upload_async(b, fifo, "/tmp/from-fifo", &up, &e_));
    /* Wait (for a state, not a time) until the upload holds the worker, so nothing overtakes it. */
    for (int i = 0;; i++) {
        sbx__pool_stat held;
        sbx__pool_stats(sbx__context_pool(ctx), &held);
        if (held.running == 1)
            break;
        if (i >= (int)(DEADLINE_S * 1000))
            TAP_FAIL("the upload from the FIFO never reached the worker pool");
        usleep(1000);
    }
    /* Behind it: a create that will fail, the stop that meets pinned cgroups, a status, a download. */
    sbx_spec *bad = sbx_spec_new();
    sbx_spec_set_image(bad, "no-such-image-for-this-test");
    sbx_sandbox *d = NULL;
    TAP_OK(sbx_sandbox_new(p, bad, &d, &e_));
    TAP_OK(sbx_sandbox_start_async(d, bad, &create, &e_));
    TAP_OK(sbx_sandbox_stop_async(c, &stop, &e_));
    TAP_OK(sbx_sandbox_status_async(a, &status, &e_));
    TAP_OK(sbx_sandbox_download_async(b, "/tmp/blob", got, &down, &e_));

    /*
     * While all that is held: execs on another box complete, again and again,
     * and the loop's timer keeps ticking. A loop blocked by any of it (the
     * open, the cgroup retries, the create's image step, the download's file
     * writes) would leave these waiting until the deadline.
     */
    for (int i = 0; i < 20; i++) {
        sbx_future *x = NULL;
        TAP_OK(sbx_sandbox_exec_async(a, "echo alive", NULL, &x, &e_));
        wait_done(x, "an exec on another box while the pool is held");
        sbx_exec_result *r = NULL;
        TAP_OK(sbx_future_take_exec_result(x, &r, &e_));
        TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "alive\n");
        sbx_exec_result_free(r);
        sbx_future_free(x);
    }
    TAP_TRUE(ticker_wait(&k, 20));
    /* Still held: nothing behind the upload has run (the pool has one thread). */
    TAP_EQ_INT(sbx_future_done(up), 0);
    TAP_EQ_INT(sbx_future_done(create), 0);
    TAP_EQ_INT(sbx_future_done(stop), 0);
    TAP_EQ_INT(sbx_future_done(down), 0);
    sbx__pool_stat ps;
    sbx__pool_stats(sbx__context_pool(ctx), &ps);
    TAP_EQ_INT(ps.running, 1);
    TAP_EQ_INT(ps.max_running, 1);
    TAP_TRUE(ps.queued >= 3);
    ticker_report(&k, "held (upload from a FIFO, create, stop, status, download queued)");

    /* Release: a writer opens the FIFO; the upload then refuses it (not a regular file). */
    int w = open(fifo, O_WRONLY | O_CLOEXEC);
    TAP_TRUE(w >= 0);
    close(w);
    wait_done(up, "the upload after its FIFO was opened");
    TAP_EQ_INT(sbx_future_code(up, NULL), SBX_EINVAL);
    wait_done(create, "the failing create");
    sbx_error *ce = NULL;
    TAP_TRUE(sbx_future_code(create, &ce) < 0);
    diag("the create failed as it should: %s", sbx_error_message(ce));
    sbx_error_free(ce);
    /* The stop retries its pinned cgroups on a worker; execs still run meanwhile. */
    for (int i = 0; i < 5 && !sbx_future_done(stop); i++) {
        sbx_future *x = NULL;
        TAP_OK(sbx_sandbox_exec_async(a, "true", NULL, &x, &e_));
        wait_done(x, "an exec while a stop retries a cgroup removal");
        TAP_OK(sbx_future_code(x, &e_));
        sbx_future_free(x);
    }
    wait_done(stop, "the stop of the box with pinned cgroups");
    wait_done(status, "the status");
    sbx_status st = SBX_STATUS_UNKNOWN;
    TAP_OK(sbx_future_take_status(status, &st, &e_));
    TAP_EQ_INT(st, SBX_STATUS_RUNNING);
    wait_done(down, "the download");
    TAP_OK(sbx_future_code(down, &e_));
    struct stat sst;
    TAP_EQ_INT(stat(got, &sst), 0);
    TAP_EQ_INT(sst.st_size, 300000);
    TAP_TRUE(ticker_wait(&k, 5));
    ticker_report(&k, "release (cgroup retries, download writes on the worker)");

    /* The pinned groups are still there: the stop did retry and give up, not skip them. */
    for (int i = 0; i < npinned; i++) {
        TAP_EQ_INT(stat(pinned[i], &sst), 0);
        TAP_EQ_INT(rmdir(pinned[i]), 0);
        char *parent = pinned[i]; /* no longer needed: cut in place */
        *strrchr(parent, '/') = 0;
        rmdir(parent);
        *strrchr(parent, '/') = 0;
        rmdir(parent); /* the shared sbx/ level, when no other box uses it */
    }

    TAP_OK(sbx__context_post(ctx, ticker_stop_task, &k));
    pthread_mutex_lock(&k.lock);
    while (!k.closed)
        pthread_cond_wait(&k.cond, &k.lock);
    pthread_mutex_unlock(&k.lock);
    sbx_future_free(up);
    sbx_future_free(create);
    sbx_future_free(stop);
    sbx_future_free(status);
    sbx_future_free(down);
    sbx_sandbox_free(d);
    sbx_spec_free(bad);
    sbx_sandbox_free(c);
    stop_free(b);
    stop_free(a);
    sbx_provider_free(p);
    sbx_context_free(ctx);
    pthread_cond_destroy(&k.cond);
    pthread_mutex_destroy(&k.lock);
    census_check(state_dir);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP_T(test_loop_responsive_while_blocking_work_is_held, 300),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
