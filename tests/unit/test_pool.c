/*
 * The worker pool of a context (src/core/pool.c): its size is honoured
 * (counted, not timed), threads start lazily, contexts do not starve each
 * other, sbx neither uses nor waits for libuv's process-wide pool, and
 * freeing a context cancels what its pool had not started.
 *
 * Items here block on a gate the test opens: a broken limit shows up as a
 * count above the size, a shared pool as a wait that reaches its deadline.
 */
#include "common.h"
#include "tap.h"

#include "core/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#define DEADLINE_S 40

/* --- a gate that items wait at, and counters --------------------------- */

struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned tokens;  /* items that may pass */
    bool open;        /* every item may pass */
    unsigned running; /* items inside work() now */
    unsigned max_running;
    unsigned ran, done, cancelled, done_off_loop;
    sbx_context *ctx;
};

static void gate_init(struct gate *g, sbx_context *ctx)
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->ctx = ctx;
}

static void gate_destroy(struct gate *g)
{
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

static void gated_work(void *data)
{
    struct gate *g = data;
    pthread_mutex_lock(&g->lock);
    g->running++;
    if (g->running > g->max_running)
        g->max_running = g->running;
    pthread_cond_broadcast(&g->cond);
    while (!g->open && g->tokens == 0)
        pthread_cond_wait(&g->cond, &g->lock);
    if (!g->open)
        g->tokens--;
    g->running--;
    g->ran++;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static void gated_done(void *data, bool cancelled)
{
    struct gate *g = data;
    pthread_mutex_lock(&g->lock);
    if (!sbx__context_on_loop(g->ctx))
        g->done_off_loop++;
    if (cancelled)
        g->cancelled++;
    else
        g->done++;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static struct timespec deadline(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += DEADLINE_S;
    return ts;
}

/* Waits until pred(g) holds (under g->lock); fails the test at the deadline. */
#define WAIT_FOR(g, pred, what)                                                                    \
    do {                                                                                           \
        struct timespec dl_ = deadline();                                                          \
        pthread_mutex_lock(&(g)->lock);                                                            \
        int rc_ = 0;                                                                               \
        while (!(pred) && rc_ == 0)                                                                \
            rc_ = pthread_cond_timedwait(&(g)->cond, &(g)->lock, &dl_);                           \
        bool ok_ = (pred);                                                                         \
        pthread_mutex_unlock(&(g)->lock);                                                          \
        if (!ok_)                                                                                  \
            TAP_FAIL("waited %d s for %s", DEADLINE_S, what);                                     \
    } while (0)

static sbx__pool_stat stats(sbx_context *ctx)
{
    sbx__pool_stat s;
    sbx__pool_stats(sbx__context_pool(ctx), &s);
    return s;
}

/* --- tests ----------------------------------------------------------------- */

static void test_size_honoured_and_threads_lazy(void)
{
    sbx_context *ctx = NULL;
    TAP_OK(sbx_context_new(&ctx, &e_));
    TAP_OK(sbx_context_set_workers(ctx, 3, &e_));
    TAP_EQ_INT(sbx_context_workers(ctx), 3);
    /* Nothing asked for a thread yet. */
    TAP_EQ_INT(stats(ctx).threads, 0);
    struct gate g;
    gate_init(&g, ctx);
    enum { N = 12 };
    for (int i = 0; i < N; i++)
        TAP_OK(sbx__context_submit(ctx, gated_work, gated_done, &g, NULL));
    /*
     * Three inside, nine queued: or more than three inside, which the check
     * below then reports (a pool ignoring its size would start them all).
     */
    WAIT_FOR(&g, g.running > 3 || (g.running == 3 && stats(ctx).queued == N - 3),
             "three items running and nine queued");
    TAP_EQ_INT(g.running, 3);
    TAP_EQ_INT(stats(ctx).threads, 3);
    /* One at a time: each token lets one item out, and one queued item in. */
    for (int i = 0; i < N; i++) {
        pthread_mutex_lock(&g.lock);
        g.tokens++;
        pthread_cond_broadcast(&g.cond);
        pthread_mutex_unlock(&g.lock);
        unsigned want = (unsigned)i + 1;
        WAIT_FOR(&g, g.ran >= want, "an item to pass the gate");
        TAP_TRUE(g.running <= 3);
    }
    WAIT_FOR(&g, g.done == N, "every item's end on the loop");
    TAP_EQ_INT(g.max_running, 3);
    TAP_EQ_INT(stats(ctx).max_running, 3);
    TAP_EQ_INT(g.done_off_loop, 0);
    TAP_EQ_INT(g.cancelled, 0);
    /* Threads stay for the next work: never more than the size. */
    TAP_EQ_INT(stats(ctx).threads, 3);

    /* Shrunk to one: the next items run one at a time. */
    TAP_OK(sbx_context_set_workers(ctx, 1, &e_));
    struct gate g2;
    gate_init(&g2, ctx);
    for (int i = 0; i < 4; i++)
        TAP_OK(sbx__context_submit(ctx, gated_work, gated_done, &g2, NULL));
    WAIT_FOR(&g2, g2.running > 1 || (g2.running == 1 && stats(ctx).queued == 3),
             "one item running and three queued");
    TAP_EQ_INT(g2.running, 1);
    pthread_mutex_lock(&g2.lock);
    g2.open = true;
    pthread_cond_broadcast(&g2.cond);
    pthread_mutex_unlock(&g2.lock);
    WAIT_FOR(&g2, g2.done == 4, "the items after shrinking");
    TAP_EQ_INT(g2.max_running, 1);
    sbx_context_free(ctx);
    gate_destroy(&g);
    gate_destroy(&g2);
}

static void test_contexts_do_not_starve_each_other(void)
{
    sbx_context *a = NULL, *b = NULL;
    TAP_OK(sbx_context_new(&a, &e_));
    TAP_OK(sbx_context_new(&b, &e_));
    TAP_OK(sbx_context_set_workers(a, 1, &e_));
    TAP_OK(sbx_context_set_workers(b, 1, &e_));
    struct gate ga, gb;
    gate_init(&ga, a);
    gate_init(&gb, b);
    /* Context a's only worker is held, with more behind it. */
    TAP_OK(sbx__context_submit(a, gated_work, gated_done, &ga, NULL));
    TAP_OK(sbx__context_submit(a, gated_work, gated_done, &ga, NULL));
    WAIT_FOR(&ga, ga.running == 1, "context a's worker to be held");
    /* Context b's work runs anyway. */
    gb.open = true;
    for (int i = 0; i < 5; i++)
        TAP_OK(sbx__context_submit(b, gated_work, gated_done, &gb, NULL));
    WAIT_FOR(&gb, gb.done == 5, "context b's items while context a's pool is held");
    TAP_EQ_INT(ga.done, 0);
    TAP_EQ_INT(stats(a).queued, 1);
    pthread_mutex_lock(&ga.lock);
    ga.open = true;
    pthread_cond_broadcast(&ga.cond);
    pthread_mutex_unlock(&ga.lock);
    WAIT_FOR(&ga, ga.done == 2, "context a's items once released");
    sbx_context_free(a);
    sbx_context_free(b);
    gate_destroy(&ga);
    gate_destroy(&gb);
}

/* --- libuv's process-wide pool, used by "the application" ----------------- */

struct app_work {
    uv_work_t req;
    struct gate *g;
    bool after;
};

static void app_work_cb(uv_work_t *w) { gated_work(((struct app_work *)w->data)->g); }
static void app_after_cb(uv_work_t *w, int status)
{
    (void)status;
    ((struct app_work *)w->data)->after = true;
}

static void test_libuv_pool_neither_used_nor_waited_for(void)
{
    /*
     * The application holds every thread of libuv's own pool (one: set before
     * anything in this process used it). sbx's blocking work (a local box's
     * create, exec, an upload and download of files) must not wait for it.
     */
    setenv("UV_THREADPOOL_SIZE", "1", 1);
    uv_loop_t app;
    TAP_EQ_INT(uv_loop_init(&app), 0);
    struct gate ag;
    gate_init(&ag, NULL);
    struct app_work w = { .g = &ag };
    w.req.data = &w;
    TAP_EQ_INT(uv_queue_work(&app, &w.req, app_work_cb, app_after_cb), 0);
    WAIT_FOR(&ag, ag.running == 1, "the application's work to hold libuv's pool");

    char root[600], up[700], down[700];
    snprintf(root, sizeof(root), "%s/local", tap_tmpdir());
    snprintf(up, sizeof(up), "%s/up.txt", tap_tmpdir());
    snprintf(down, sizeof(down), "%s/sub/down.txt", tap_tmpdir());
    FILE *f = fopen(up, "we");
    TAP_TRUE(f != NULL);
    fputs("through the context's own pool\n", f);
    fclose(f);
    char cfg[800];
    snprintf(cfg, sizeof(cfg), "{\"local\": {\"workspace_root\": \"%s\"}}", root);
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    sbx_spec *spec = sbx_spec_new();
    sbx_sandbox *sb = NULL;
    TAP_OK(sbx_sandbox_new(p, spec, &sb, &e_));
    sbx_future *fs = NULL;
    TAP_OK(sbx_sandbox_start_async(sb, spec, &fs, &e_));
    if (sbx_future_wait(fs, DEADLINE_S, NULL) == SBX_ETIMEDOUT)
        TAP_FAIL("a local create waited for libuv's pool");
    TAP_OK(sbx_future_code(fs, &e_));
    sbx_future_free(fs);
    TAP_OK(sbx_sandbox_upload(sb, up, "in.txt", &e_));
    TAP_OK(sbx_sandbox_download(sb, "in.txt", down, &e_));
    char *data = NULL;
    size_t n = 0;
    TAP_EQ_INT(sbx__read_file(down, &data, &n), 0);
    TAP_EQ_STR(data, "through the context's own pool\n");
    free(data);

    /* The other way: sbx's pool held, the application's libuv work still runs. */
    sbx_context *ctx = NULL;
    TAP_OK(sbx_context_new(&ctx, &e_));
    TAP_OK(sbx_context_set_workers(ctx, 1, &e_));
    struct gate sg;
    gate_init(&sg, ctx);
    TAP_OK(sbx__context_submit(ctx, gated_work, gated_done, &sg, NULL));
    WAIT_FOR(&sg, sg.running == 1, "sbx's worker to be held");
    pthread_mutex_lock(&ag.lock);
    ag.open = true;
    pthread_cond_broadcast(&ag.cond);
    pthread_mutex_unlock(&ag.lock);
    struct gate ag2;
    gate_init(&ag2, NULL);
    ag2.open = true;
    struct app_work w2 = { .g = &ag2 };
    w2.req.data = &w2;
    TAP_EQ_INT(uv_queue_work(&app, &w2.req, app_work_cb, app_after_cb), 0);
    TAP_EQ_INT(uv_run(&app, UV_RUN_DEFAULT), 0);
    TAP_TRUE(w.after && w2.after);
    TAP_EQ_INT(sg.done, 0);
    pthread_mutex_lock(&sg.lock);
    sg.open = true;
    pthread_cond_broadcast(&sg.cond);
    pthread_mutex_unlock(&sg.lock);
    WAIT_FOR(&sg, sg.done == 1, "sbx's item once released");

    sbx_sandbox_free(sb);
    sbx_spec_free(spec);
    sbx_provider_free(p);
    sbx_context_free(ctx);
    TAP_EQ_INT(uv_loop_close(&app), 0);
    gate_destroy(&ag);
    gate_destroy(&ag2);
    gate_destroy(&sg);
}

struct freer {
    sbx_context *ctx;
};

static atomic_int cleanups_run;
static void cleanup_work(void *data)
{
    (void)data;
    atomic_fetch_add(&cleanups_run, 1);
}

static void *free_ctx_thread(void *arg)
{
    sbx_context_free(((struct freer *)arg)->ctx);
    return NULL;
}

static void test_free_cancels_queued_runs_cleanups_waits_for_running(void)
{
    int threads_before = tap_thread_count();
    sbx_context *ctx = NULL;
    TAP_OK(sbx_context_new(&ctx, &e_));
    TAP_OK(sbx_context_set_workers(ctx, 1, &e_));
    struct gate g;
    gate_init(&g, ctx);
    for (int i = 0; i < 4; i++)
        TAP_OK(sbx__context_submit(ctx, gated_work, gated_done, &g, NULL));
    /* Two cleanups (no end): they are not cancelled, they run before the free returns. */
    atomic_store(&cleanups_run, 0);
    TAP_OK(sbx__context_submit(ctx, cleanup_work, NULL, NULL, NULL));
    TAP_OK(sbx__context_submit(ctx, cleanup_work, NULL, NULL, NULL));
    WAIT_FOR(&g, g.running == 1, "the first item to run");
    /* Freed from another thread: it waits for the running item, so it cannot be this one. */
    struct freer fr = { ctx };
    pthread_t t;
    TAP_EQ_INT(pthread_create(&t, NULL, free_ctx_thread, &fr), 0);
    /* The three queued items end, cancelled, on the loop, while the first one still runs. */
    WAIT_FOR(&g, g.cancelled == 3, "the queued items to be cancelled");
    TAP_EQ_INT(g.done, 0);
    pthread_mutex_lock(&g.lock);
    g.open = true;
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.lock);
    TAP_EQ_INT(pthread_join(t, NULL), 0);
    /* The running item's end was delivered before the loop closed. */
    TAP_EQ_INT(g.done, 1);
    TAP_EQ_INT(atomic_load(&cleanups_run), 2);
    TAP_EQ_INT(g.ran, 1);
    TAP_EQ_INT(g.done_off_loop, 0);
    /* The loop thread and the worker are gone. */
    while (tap_thread_count() > threads_before)
        usleep(1000); /* a joined thread leaves /proc/self/task a moment later */
    TAP_EQ_INT(tap_thread_count(), threads_before);
    gate_destroy(&g);
}

static void test_size_checked_and_env_default(void)
{
    sbx_context *ctx = NULL;
    TAP_OK(sbx_context_new(&ctx, &e_));
    TAP_EQ_INT(sbx_context_workers(ctx), SBX_WORKERS_DEFAULT);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_context_set_workers(ctx, 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "1 to 256");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_context_set_workers(ctx, 257, &e), SBX_EINVAL);
    sbx_error_free(e);
    TAP_EQ_INT(sbx_context_set_workers(NULL, 2, NULL), SBX_EINVAL);
    TAP_EQ_INT(sbx_context_workers(NULL), 0);
    TAP_EQ_INT(sbx_context_workers(ctx), SBX_WORKERS_DEFAULT);
    sbx_context_free(ctx);
    setenv("SBX_WORKERS", "3", 1);
    TAP_OK(sbx_context_new(&ctx, &e_));
    TAP_EQ_INT(sbx_context_workers(ctx), 3);
    sbx_context_free(ctx);
    setenv("SBX_WORKERS", "many", 1);
    TAP_OK(sbx_context_new(&ctx, &e_));
    TAP_EQ_INT(sbx_context_workers(ctx), SBX_WORKERS_DEFAULT);
    sbx_context_free(ctx);
    unsetenv("SBX_WORKERS");
}

TAP_MAIN(TAP(test_size_honoured_and_threads_lazy), TAP(test_contexts_do_not_starve_each_other),
         TAP(test_libuv_pool_neither_used_nor_waited_for),
         TAP(test_free_cancels_queued_runs_cleanups_waits_for_running),
         TAP(test_size_checked_and_env_default))
