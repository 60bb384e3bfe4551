/*
 * Contexts: one libuv loop on one thread runs every async operation of the
 * providers made in the context. Other threads hand it work through a locked
 * task queue and a uv_async_t wake-up.
 */
#include "internal.h"

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>

#include <uv.h>

struct task {
    sbx__task_fn fn;
    void *data;
    struct task *next;
};

struct sbx_context {
    uv_loop_t loop;
    uv_async_t wake;
    pthread_t thread;
    pthread_mutex_t lock;
    struct task *head, *tail;
    bool stopping;
    bool detached; /* freed by its own thread when the last ref went on the loop */
    atomic_int refs;
    bool is_default;
    struct sbx__pool *pool; /* its threads start with the first blocking item */
    size_t work_pending;    /* pool items queued or running (under lock) */
    bool closed;            /* the loop closes its handles: no more wake-ups (under lock) */
    /* The remote kit's HTTP engine (src/remote/http.c), made on the loop at first use. */
    void *http;
    void (*http_close)(void *http);
};

static __thread sbx_context *current_ctx;

static pthread_mutex_t default_lock = PTHREAD_MUTEX_INITIALIZER;
static sbx_context *default_ctx;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A forked child has no loop thread: forget the parent's contexts (they leak by design). */
/* The parent's context as a forked child inherited it: kept reachable, never used. */
static sbx_context *abandoned_ctx;

static void atfork_child(void)
{
    pthread_mutex_init(&default_lock, NULL);
    if (default_ctx)
        abandoned_ctx = default_ctx;
    default_ctx = NULL;
    current_ctx = NULL;
}

static void install_atfork(void) { pthread_atfork(NULL, NULL, atfork_child); }

static void close_cb(uv_handle_t *h) { (void)h; }

static void walk_close(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, close_cb);
}

static void run_tasks(uv_async_t *a)
{
    sbx_context *ctx = a->data;
    for (;;) {
        pthread_mutex_lock(&ctx->lock);
        struct task *t = ctx->head;
        ctx->head = ctx->tail = NULL;
        /* Pool items still out will post their ends: the loop must be there to run them. */
        bool stopping = ctx->stopping && ctx->work_pending == 0;
        if (!t && stopping)
            ctx->closed = true;
        pthread_mutex_unlock(&ctx->lock);
        if (!t) {
            if (stopping) {
                /* The HTTP engine closes its own handles (their memory is its). */
                if (ctx->http)
                    ctx->http_close(ctx->http);
                ctx->http = NULL;
                uv_walk(&ctx->loop, walk_close, NULL);
            }
            return;
        }
        while (t) {
            struct task *next = t->next;
            t->fn(t->data);
            free(t);
            t = next;
        }
    }
}

static void *loop_main(void *arg)
{
    sbx_context *ctx = arg;
    current_ctx = ctx;
    uv_run(&ctx->loop, UV_RUN_DEFAULT);
    /* Handles closed by walk_close need one more turn to finish closing. */
    while (uv_loop_close(&ctx->loop) == UV_EBUSY) {
        uv_walk(&ctx->loop, walk_close, NULL);
        uv_run(&ctx->loop, UV_RUN_NOWAIT);
    }
    current_ctx = NULL;
    /*
     * Nothing was queued or running when the loop closed; a close callback
     * may have submitted more since (a transfer's file to close): the
     * workers finish it, then are joined. Ends and tasks posted after the
     * loop closed (never woken for) run here, on this thread.
     */
    sbx__pool_free(ctx->pool);
    ctx->pool = NULL;
    for (;;) {
        pthread_mutex_lock(&ctx->lock);
        struct task *t = ctx->head;
        ctx->head = ctx->tail = NULL;
        pthread_mutex_unlock(&ctx->lock);
        if (!t)
            break;
        while (t) {
            struct task *next = t->next;
            t->fn(t->data);
            free(t);
            t = next;
        }
    }
    pthread_mutex_lock(&ctx->lock);
    bool detached = ctx->detached;
    pthread_mutex_unlock(&ctx->lock);
    if (detached) {
        pthread_mutex_destroy(&ctx->lock);
        free(ctx);
    }
    return NULL;
}

static int context_create(sbx_context **out, sbx_error **err)
{
    pthread_once(&atfork_once, install_atfork);
    sbx_context *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = uv_loop_init(&ctx->loop);
    if (rc < 0) {
        free(ctx);
        return sbx__set_error(err, SBX_EIO, "cannot start the sbx event loop: %s", uv_strerror(rc));
    }
    ctx->pool = sbx__pool_new(ctx, sbx__workers_default());
    if (!ctx->pool) {
        uv_loop_close(&ctx->loop);
        free(ctx);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&ctx->lock, NULL);
    uv_async_init(&ctx->loop, &ctx->wake, run_tasks);
    ctx->wake.data = ctx;
    atomic_init(&ctx->refs, 1);
    /* Small stack is plenty: the loop thread runs callbacks, not deep work. */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    /* The loop thread must not take the process's signals (SIGINT, SIGTERM). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&ctx->thread, &attr, loop_main, ctx);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        uv_close((uv_handle_t *)&ctx->wake, NULL);
        uv_run(&ctx->loop, UV_RUN_NOWAIT);
        uv_loop_close(&ctx->loop);
        pthread_mutex_destroy(&ctx->lock);
        sbx__pool_free(ctx->pool);
        free(ctx);
        return sbx__set_errno(err, SBX_EIO, rc, "cannot start the sbx loop thread");
    }
    *out = ctx;
    return SBX_OK;
}

int sbx_context_new(sbx_context **out, sbx_error **err)
{
    if (!out)
        return sbx__set_error(err, SBX_EINVAL, "out is NULL");
    return context_create(out, err);
}

static void context_destroy(sbx_context *ctx)
{
    /*
     * Items nobody started are cancelled (their ends run on the loop with
     * cancelled = true); running ones finish, and the loop waits for their
     * ends before it closes.
     */
    sbx__pool_cancel_all(ctx->pool);
    pthread_mutex_lock(&ctx->lock);
    ctx->stopping = true;
    bool self = pthread_equal(pthread_self(), ctx->thread);
    if (self)
        ctx->detached = true;
    /*
     * Under the lock, as in sbx__context_post: the loop reads `stopping` under
     * it and then closes the handle and the loop's descriptors, so a send
     * after the unlock could write to a closed (or reused) descriptor.
     */
    uv_async_send(&ctx->wake);
    pthread_mutex_unlock(&ctx->lock);
    if (self) {
        /* Freed by the loop thread itself when it returns from uv_run. */
        pthread_detach(ctx->thread);
        return;
    }
    pthread_join(ctx->thread, NULL);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

void sbx__context_ref(sbx_context *ctx) { atomic_fetch_add(&ctx->refs, 1); }

void sbx__context_unref(sbx_context *ctx)
{
    if (!ctx)
        return;
    if (ctx->is_default) {
        /* Under the lock so a concurrent sbx__context_default cannot revive a dying one. */
        pthread_mutex_lock(&default_lock);
        if (atomic_fetch_sub(&ctx->refs, 1) != 1) {
            pthread_mutex_unlock(&default_lock);
            return;
        }
        if (default_ctx == ctx)
            default_ctx = NULL;
        pthread_mutex_unlock(&default_lock);
        context_destroy(ctx);
        return;
    }
    if (atomic_fetch_sub(&ctx->refs, 1) == 1)
        context_destroy(ctx);
}

void sbx_context_free(sbx_context *ctx) { sbx__context_unref(ctx); }

int sbx__context_default(sbx_context **out, sbx_error **err)
{
    pthread_mutex_lock(&default_lock);
    if (default_ctx) {
        atomic_fetch_add(&default_ctx->refs, 1);
        *out = default_ctx;
        pthread_mutex_unlock(&default_lock);
        return SBX_OK;
    }
    sbx_context *ctx = NULL;
    int rc = context_create(&ctx, err);
    if (rc == SBX_OK) {
        ctx->is_default = true;
        default_ctx = ctx;
        *out = ctx;
    }
    pthread_mutex_unlock(&default_lock);
    return rc;
}

int sbx__context_post(sbx_context *ctx, sbx__task_fn fn, void *data)
{
    struct task *t = malloc(sizeof(*t));
    if (!t)
        return SBX_ENOMEM;
    t->fn = fn;
    t->data = data;
    t->next = NULL;
    pthread_mutex_lock(&ctx->lock);
    if (ctx->tail)
        ctx->tail->next = t;
    else
        ctx->head = t;
    ctx->tail = t;
    /*
     * Wake the loop before unlocking: once the lock is released the loop may
     * run the task, which can drop the last reference and free the context,
     * so touching ctx->wake after the unlock would be a use after free. A
     * closed loop is not woken (its descriptor may be gone): loop_main runs
     * what is left.
     */
    if (!ctx->closed)
        uv_async_send(&ctx->wake);
    pthread_mutex_unlock(&ctx->lock);
    return SBX_OK;
}

struct barrier {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
};

static void barrier_run(void *data)
{
    struct barrier *b = data;
    pthread_mutex_lock(&b->lock);
    b->done = true;
    pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

void sbx__context_drain(sbx_context *ctx)
{
    struct barrier b = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };
    if (sbx__context_post(ctx, barrier_run, &b) < 0)
        return;
    pthread_mutex_lock(&b.lock);
    while (!b.done)
        pthread_cond_wait(&b.cond, &b.lock);
    pthread_mutex_unlock(&b.lock);
}

bool sbx__context_on_loop(const sbx_context *ctx) { return current_ctx == ctx; }
bool sbx__on_any_loop(void) { return current_ctx != NULL; }
void *sbx__context_uv(sbx_context *ctx) { return &ctx->loop; }
void *sbx__context_http(sbx_context *ctx) { return ctx->http; }
void sbx__context_set_http(sbx_context *ctx, void *http, void (*close_fn)(void *http))
{
    ctx->http = http;
    ctx->http_close = close_fn;
}

sbx_context *sbx__context_of_uv(void *loop)
{
    return (sbx_context *)((char *)loop - offsetof(struct sbx_context, loop));
}

struct sbx__pool *sbx__context_pool(sbx_context *ctx) { return ctx->pool; }

void sbx__context_work_begin(sbx_context *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    ctx->work_pending++;
    pthread_mutex_unlock(&ctx->lock);
}

void sbx__context_work_abandon(sbx_context *ctx)
{
    pthread_mutex_lock(&ctx->lock);
    ctx->work_pending--;
    if (ctx->stopping && ctx->work_pending == 0 && !ctx->closed)
        uv_async_send(&ctx->wake);
    pthread_mutex_unlock(&ctx->lock);
}

void sbx__context_work_end(sbx_context *ctx, sbx__task_fn fn, void *data)
{
    struct task *t = malloc(sizeof(*t));
    pthread_mutex_lock(&ctx->lock);
    if (t) {
        t->fn = fn;
        t->data = data;
        t->next = NULL;
        if (ctx->tail)
            ctx->tail->next = t;
        else
            ctx->head = t;
        ctx->tail = t;
    }
    /*
     * One step under the lock: the loop cannot see the count drop to zero
     * (and close) before the task that carries the end is queued.
     */
    ctx->work_pending--;
    if (!ctx->closed)
        uv_async_send(&ctx->wake);
    pthread_mutex_unlock(&ctx->lock);
    if (!t)
        sbx_log(SBX_LOG_ERROR, "out of memory delivering the end of a blocking sbx task");
}

int sbx__context_submit(sbx_context *ctx, sbx__work_fn work, sbx__work_done_fn done, void *data,
                        struct sbx__work **out)
{
    /* Only the loop thread (or a worker) submits; after loop_main joined the pool, none. */
    if (!ctx->pool)
        return SBX_ESTATE;
    return sbx__pool_submit(ctx->pool, work, done, data, out);
}

int sbx_context_set_workers(sbx_context *ctx, unsigned n, sbx_error **err)
{
    if (!ctx)
        return sbx__set_error(err, SBX_EINVAL, "ctx is NULL");
    if (n < 1 || n > SBX_WORKERS_MAX)
        return sbx__set_error(err, SBX_EINVAL,
                              "a context's worker pool takes 1 to %d threads (got %u)",
                              SBX_WORKERS_MAX, n);
    sbx__pool_set_size(ctx->pool, n);
    return SBX_OK;
}

unsigned sbx_context_workers(const sbx_context *ctx)
{
    return ctx ? sbx__pool_size(ctx->pool) : 0;
}
