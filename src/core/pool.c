/*
 * The worker pool of a context: threads for the blocking work of its
 * providers (unpacking images, reading records, removing cgroups, the file
 * side of transfers), so that nothing blocking runs on the loop thread.
 *
 * One pool per context, never libuv's process-wide pool: an application's
 * own uv_queue_work/uv_fs_* then neither starves sbx nor is starved by it,
 * and one context's stuck work (an upload from a FIFO nobody writes, a
 * cgroup that lingers) cannot hold up another context's.
 *
 * Threads start lazily, one per queued item no idle thread can take, up to
 * the size; at most `size` items run at once (shrinking the size takes
 * effect as running items finish). A finished item's `done` runs on the
 * context's loop thread, delivered through the context's task queue (its
 * uv_async_t). The loop does not close while an item is queued or running
 * (the context counts them), so no completion is lost; the threads are
 * joined by the loop thread as it ends.
 */
#include "internal.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#define POOL_MAX_THREADS SBX_WORKERS_MAX

struct sbx__work {
    sbx__work_fn work;
    sbx__work_done_fn done;
    void *data;
    struct sbx__work *next, *prev;
    bool queued;
    bool cancelled;
    struct sbx__pool *pool;
};

struct sbx__pool {
    sbx_context *ctx;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct sbx__work *head, *tail;
    size_t queued;
    unsigned size;     /* at most this many items run at once */
    unsigned running;  /* items running now */
    unsigned max_running; /* the most seen at once (tests check the size is honoured) */
    unsigned nthreads; /* started so far */
    unsigned idle;     /* threads waiting for an item */
    unsigned starting; /* threads created that have not yet looked at the queue */
    bool shutdown;
    pthread_t threads[POOL_MAX_THREADS];
};

unsigned sbx__workers_default(void)
{
    const char *s = getenv("SBX_WORKERS");
    long long v = 0;
    if (s && *s && sbx__parse_pyint(s, &v) == 0 && v >= 1 && v <= SBX_WORKERS_MAX)
        return (unsigned)v;
    if (s && *s)
        sbx_log(SBX_LOG_WARNING, "SBX_WORKERS=%s is not a number from 1 to %d: using %d", s,
                SBX_WORKERS_MAX, SBX_WORKERS_DEFAULT);
    return SBX_WORKERS_DEFAULT;
}

struct sbx__pool *sbx__pool_new(sbx_context *ctx, unsigned size)
{
    struct sbx__pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->ctx = ctx;
    p->size = size;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    return p;
}

static void unlink_locked(struct sbx__pool *p, struct sbx__work *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        p->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        p->tail = w->prev;
    w->next = w->prev = NULL;
    w->queued = false;
    p->queued--;
}

/* On the loop thread: the item's end, then the item goes. */
static void deliver(void *arg)
{
    struct sbx__work *w = arg;
    if (w->done)
        w->done(w->data, w->cancelled);
    free(w);
}

static void *worker_main(void *arg)
{
    struct sbx__pool *p = arg;
    pthread_mutex_lock(&p->lock);
    p->starting--;
    for (;;) {
        while (!p->shutdown && (!p->head || p->running >= p->size)) {
            p->idle++;
            pthread_cond_wait(&p->cond, &p->lock);
            p->idle--;
        }
        if (!p->head) /* shutdown, nothing left */
            break;
        if (p->running >= p->size)
            continue;
        struct sbx__work *w = p->head;
        unlink_locked(p, w);
        p->running++;
        if (p->running > p->max_running)
            p->max_running = p->running;
        pthread_mutex_unlock(&p->lock);
        w->work(w->data);
        pthread_mutex_lock(&p->lock);
        p->running--;
        /* A slot is free: a thread held back by the size may take the next item. */
        if (p->head)
            pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock);
        /* Counts the item as ended in the same step, so the loop cannot close before it runs. */
        sbx__context_work_end(p->ctx, deliver, w);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Starts threads while queued items outnumber the threads free to take them and the size allows. */
static int grow_locked(struct sbx__pool *p)
{
    while (p->queued > p->idle + p->starting && p->nthreads < p->size &&
           p->nthreads < POOL_MAX_THREADS) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        /* Workers take no signals: they belong to the application's threads. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        int rc = pthread_create(&p->threads[p->nthreads], &attr, worker_main, p);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            return -rc;
        char name[16];
        snprintf(name, sizeof(name), "sbx-worker-%u", p->nthreads % 100);
        pthread_setname_np(p->threads[p->nthreads], name);
        p->nthreads++;
        p->starting++;
    }
    return 0;
}

int sbx__pool_submit(struct sbx__pool *p, sbx__work_fn work, sbx__work_done_fn done, void *data,
                     struct sbx__work **out)
{
    struct sbx__work *w = calloc(1, sizeof(*w));
    if (!w)
        return SBX_ENOMEM;
    w->work = work;
    w->done = done;
    w->data = data;
    w->pool = p;
    sbx__context_work_begin(p->ctx);
    pthread_mutex_lock(&p->lock);
    w->prev = p->tail;
    if (p->tail)
        p->tail->next = w;
    else
        p->head = w;
    p->tail = w;
    w->queued = true;
    p->queued++;
    int rc = grow_locked(p);
    if (rc < 0 && p->nthreads == 0) {
        unlink_locked(p, w);
        pthread_mutex_unlock(&p->lock);
        sbx__context_work_abandon(p->ctx);
        free(w);
        sbx_log(SBX_LOG_ERROR, "cannot start an sbx worker thread: %s", strerror(-rc));
        return SBX_EIO;
    }
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
    if (out)
        *out = w;
    return SBX_OK;
}

bool sbx__work_cancel(struct sbx__work *w)
{
    struct sbx__pool *p = w->pool;
    pthread_mutex_lock(&p->lock);
    bool was_queued = w->queued;
    if (was_queued) {
        unlink_locked(p, w);
        w->cancelled = true;
    }
    pthread_mutex_unlock(&p->lock);
    if (was_queued)
        sbx__context_work_end(p->ctx, deliver, w);
    return was_queued;
}

void sbx__pool_cancel_all(struct sbx__pool *p)
{
    for (;;) {
        pthread_mutex_lock(&p->lock);
        /*
         * Items without an end are cleanups (close a file, remove a temp
         * file or a staged startup file): they still run, and the loop waits
         * for them, so freeing a context leaves nothing behind.
         */
        struct sbx__work *w = p->head;
        while (w && !w->done)
            w = w->next;
        if (w) {
            unlink_locked(p, w);
            w->cancelled = true;
        }
        pthread_mutex_unlock(&p->lock);
        if (!w)
            return;
        sbx__context_work_end(p->ctx, deliver, w);
    }
}

void sbx__pool_set_size(struct sbx__pool *p, unsigned size)
{
    pthread_mutex_lock(&p->lock);
    p->size = size;
    /* Threads held back by a smaller size may go; new ones start for what is queued. */
    (void)grow_locked(p);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

unsigned sbx__pool_size(struct sbx__pool *p)
{
    pthread_mutex_lock(&p->lock);
    unsigned n = p->size;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void sbx__pool_stats(struct sbx__pool *p, sbx__pool_stat *out)
{
    pthread_mutex_lock(&p->lock);
    out->size = p->size;
    out->queued = p->queued;
    out->running = p->running;
    out->max_running = p->max_running;
    out->threads = p->nthreads;
    pthread_mutex_unlock(&p->lock);
}

void sbx__pool_free(struct sbx__pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->shutdown = true;
    pthread_cond_broadcast(&p->cond);
    unsigned n = p->nthreads;
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
