/*
 * The context's worker pool against libuv's process-wide pool, measured in
 * this one run: the round trip of one empty blocking item (submitted from
 * the caller's thread, its end seen by the caller), and 20,000 items in
 * flight at once, both pools at 4 threads. The sbx figure includes the hop
 * of the end onto the context's loop thread and back to the caller, which
 * uv_queue_work run on the caller's own loop does not pay. Comparisons, not
 * pass/fail.
 */
#include "lib/bench.h"

#include "core/internal.h"

#include <pthread.h>
#include <stdatomic.h>

#include <uv.h>

#define N 5000
#define MANY 20000

struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned want, got;
};

static void noop_work(void *data) { (void)data; }

static void count_done(void *data, bool cancelled)
{
    (void)cancelled;
    struct waiter *w = data;
    pthread_mutex_lock(&w->lock);
    if (++w->got >= w->want)
        pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void wait_for(struct waiter *w)
{
    pthread_mutex_lock(&w->lock);
    while (w->got < w->want)
        pthread_cond_wait(&w->cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

static unsigned uv_left;
static void uv_noop(uv_work_t *r) { (void)r; }
static void uv_after(uv_work_t *r, int status)
{
    (void)r;
    (void)status;
    uv_left--;
}

int main(void)
{
    static double sbx_rt[N], uv_rt[N];
    sbx_context *ctx = NULL;
    sbx_error *err = NULL;
    if (sbx_context_new(&ctx, &err) || sbx_context_set_workers(ctx, 4, &err)) {
        fprintf(stderr, "bench_pool: %s\n", sbx_error_message(err));
        return 1;
    }
    struct waiter w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
    for (int i = 0; i < N; i++) {
        w.want = w.got + 1;
        double t0 = bench_now();
        sbx__context_submit(ctx, noop_work, count_done, &w, NULL);
        wait_for(&w);
        sbx_rt[i] = bench_now() - t0;
    }
    w.want = w.got + MANY;
    double t0 = bench_now();
    for (int i = 0; i < MANY; i++)
        sbx__context_submit(ctx, noop_work, count_done, &w, NULL);
    wait_for(&w);
    double sbx_many = bench_now() - t0;
    sbx_context_free(ctx);

    setenv("UV_THREADPOOL_SIZE", "4", 1);
    uv_loop_t loop;
    uv_loop_init(&loop);
    static uv_work_t reqs[MANY];
    for (int i = 0; i < N; i++) {
        uv_left = 1;
        double t1 = bench_now();
        uv_queue_work(&loop, &reqs[0], uv_noop, uv_after);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_rt[i] = bench_now() - t1;
    }
    uv_left = MANY;
    t0 = bench_now();
    for (int i = 0; i < MANY; i++)
        uv_queue_work(&loop, &reqs[i], uv_noop, uv_after);
    uv_run(&loop, UV_RUN_DEFAULT);
    double uv_many = bench_now() - t0;
    uv_loop_close(&loop);

    printf("\nworker pool (4 threads)                     context pool   libuv pool   ratio\n");
    double s50 = bench_pct(sbx_rt, N, 50), s99 = bench_pct(sbx_rt, N, 99);
    double u50 = bench_pct(uv_rt, N, 50), u99 = bench_pct(uv_rt, N, 99);
    printf("  one item round trip p50 (ms)              %10.3f   %10.3f   %5.2fx\n", s50 * 1e3,
           u50 * 1e3, s50 / u50);
    printf("  one item round trip p99 (ms)              %10.3f   %10.3f   %5.2fx\n", s99 * 1e3,
           u99 * 1e3, s99 / u99);
    printf("  %d items in flight, all done (ms)      %10.1f   %10.1f   %5.2fx\n", MANY,
           sbx_many * 1e3, uv_many * 1e3, sbx_many / uv_many);
    return 0;
}
