/*
 * Futures: the result of one async operation. Waitable with a timeout (a
 * condition variable), pollable (an eventfd made on demand), or completed
 * into a callback on the loop thread. Reference-counted between the caller
 * and the operation, so either may let go first.
 */
#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <time.h>

struct sbx_future {
    sbx_context *ctx;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_int refs;
    enum sbx__value_kind kind;
    bool done;
    bool cancelled;
    bool taken;
    int code;
    sbx_error *err;
    void *value;
    int efd;
    sbx_future_cb cb;
    void *cb_data;
    void (*cancel_cb)(void *data);
    void *cancel_data;
    sbx_progress_cb progress_cb;
    void *progress_data;
};

sbx_future *sbx__future_new(sbx_context *ctx, enum sbx__value_kind kind)
{
    sbx_future *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->ctx = ctx;
    sbx__context_ref(ctx);
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&f->refs, 2); /* the caller's and the operation's */
    f->kind = kind;
    f->efd = -1;
    return f;
}

void sbx__future_ref(sbx_future *f) { atomic_fetch_add(&f->refs, 1); }

static void free_value(enum sbx__value_kind kind, void *v)
{
    if (!v)
        return;
    switch (kind) {
    case SBX_VALUE_EXEC_RESULT:
        sbx_exec_result_free(v);
        break;
    case SBX_VALUE_ENDPOINT:
        sbx_endpoint_free(v);
        break;
    case SBX_VALUE_STRING:
        free(v);
        break;
    case SBX_VALUE_SANDBOX:
        sbx_sandbox_free(v);
        break;
    case SBX_VALUE_STATUS:
    case SBX_VALUE_NONE:
        break;
    }
}

static void future_unref(sbx_future *f)
{
    if (atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    if (!f->taken)
        free_value(f->kind, f->value);
    sbx_error_free(f->err);
    if (f->efd >= 0)
        close(f->efd);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    sbx_context *ctx = f->ctx;
    free(f);
    sbx__context_unref(ctx);
}

struct cb_task {
    sbx_future *f;
    sbx_future_cb cb;
    void *data;
};

static void run_cb(void *arg)
{
    struct cb_task *t = arg;
    t->cb(t->f, t->data);
    future_unref(t->f);
    free(t);
}

/* Queues the user's callback on the loop; holds a ref so the future outlives it. */
static void post_cb(sbx_future *f, sbx_future_cb cb, void *data)
{
    struct cb_task *t = malloc(sizeof(*t));
    if (!t)
        return;
    *t = (struct cb_task){ f, cb, data };
    atomic_fetch_add(&f->refs, 1);
    if (sbx__context_post(f->ctx, run_cb, t) < 0) {
        atomic_fetch_sub(&f->refs, 1);
        free(t);
    }
}

void sbx__future_complete(sbx_future *f, int code, sbx_error *err, void *value)
{
    pthread_mutex_lock(&f->lock);
    if (f->done) {
        pthread_mutex_unlock(&f->lock);
        sbx_error_free(err);
        free_value(f->kind, value);
        return;
    }
    if (code < 0 && !err)
        err = sbx_error_new(code, "%s", sbx_strerror(code));
    f->done = true;
    f->code = code;
    f->err = code < 0 ? err : NULL;
    if (code >= 0)
        sbx_error_free(err);
    f->value = code >= 0 ? value : NULL;
    if (code < 0)
        free_value(f->kind, value);
    f->cancel_cb = NULL;
    if (f->efd >= 0) {
        uint64_t one = 1;
        ssize_t n = write(f->efd, &one, sizeof(one));
        (void)n;
    }
    sbx_future_cb cb = f->cb;
    void *cb_data = f->cb_data;
    f->cb = NULL;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->lock);
    if (cb)
        post_cb(f, cb, cb_data);
    future_unref(f); /* the operation's reference */
}

void sbx__future_set_cancel(sbx_future *f, void (*cb)(void *data), void *data)
{
    pthread_mutex_lock(&f->lock);
    f->cancel_cb = cb;
    f->cancel_data = data;
    pthread_mutex_unlock(&f->lock);
}

bool sbx__future_cancelled(const sbx_future *f)
{
    pthread_mutex_lock((pthread_mutex_t *)&f->lock);
    bool c = f->cancelled;
    pthread_mutex_unlock((pthread_mutex_t *)&f->lock);
    return c;
}

static void cancel_task(void *arg)
{
    sbx_future *f = arg;
    pthread_mutex_lock(&f->lock);
    void (*cb)(void *) = f->done ? NULL : f->cancel_cb;
    void *data = f->cancel_data;
    pthread_mutex_unlock(&f->lock);
    if (cb)
        cb(data);
    future_unref(f);
}

void sbx_future_cancel(sbx_future *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->lock);
    bool go = !f->done && !f->cancelled;
    f->cancelled = true;
    pthread_mutex_unlock(&f->lock);
    if (!go)
        return;
    /* The hook is read on the loop, where operations move from step to step. */
    atomic_fetch_add(&f->refs, 1);
    if (sbx__context_post(f->ctx, cancel_task, f) < 0)
        atomic_fetch_sub(&f->refs, 1);
}

static int result_code(sbx_future *f, sbx_error **err)
{
    if (f->code < 0 && err && !*err)
        *err = sbx_error_copy(f->err);
    return f->code;
}

int sbx_future_wait(sbx_future *f, double timeout_s, sbx_error **err)
{
    if (!f)
        return sbx__set_error(err, SBX_EINVAL, "future is NULL");
    pthread_mutex_lock(&f->lock);
    if (!f->done && sbx__on_any_loop()) {
        pthread_mutex_unlock(&f->lock);
        return sbx__set_error(err, SBX_ESTATE,
                              "sbx_future_wait() would block the sbx loop thread; use "
                              "sbx_future_then() in code that runs on the loop");
    }
    struct timespec deadline;
    if (timeout_s >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        double whole = floor(timeout_s);
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    while (!f->done) {
        if (timeout_s < 0) {
            pthread_cond_wait(&f->cond, &f->lock);
        } else if (pthread_cond_timedwait(&f->cond, &f->lock, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    if (!f->done) {
        pthread_mutex_unlock(&f->lock);
        char t[32];
        sbx__fmt_g(timeout_s, t, sizeof(t));
        return sbx__set_error(err, SBX_ETIMEDOUT,
                              "operation still running after %ss; wait again, or cancel it with "
                              "sbx_future_cancel()",
                              t);
    }
    int rc = result_code(f, err);
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int sbx_future_fd(sbx_future *f)
{
    if (!f)
        return -1;
    pthread_mutex_lock(&f->lock);
    if (f->efd < 0) {
        f->efd = eventfd(f->done ? 1 : 0, EFD_CLOEXEC | EFD_NONBLOCK);
    }
    int fd = f->efd;
    pthread_mutex_unlock(&f->lock);
    return fd;
}

int sbx_future_done(const sbx_future *f)
{
    if (!f)
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&f->lock);
    int d = f->done;
    pthread_mutex_unlock((pthread_mutex_t *)&f->lock);
    return d;
}

int sbx_future_then(sbx_future *f, sbx_future_cb cb, void *data)
{
    if (!f || !cb)
        return SBX_EINVAL;
    pthread_mutex_lock(&f->lock);
    if (f->cb) {
        pthread_mutex_unlock(&f->lock);
        return SBX_ESTATE;
    }
    if (f->done) {
        pthread_mutex_unlock(&f->lock);
        post_cb(f, cb, data);
        return SBX_OK;
    }
    f->cb = cb;
    f->cb_data = data;
    pthread_mutex_unlock(&f->lock);
    return SBX_OK;
}

int sbx_future_on_progress(sbx_future *f, sbx_progress_cb cb, void *data)
{
    if (!f || !cb)
        return SBX_EINVAL;
    pthread_mutex_lock(&f->lock);
    int rc = f->progress_cb ? SBX_ESTATE : SBX_OK;
    if (rc == SBX_OK) {
        f->progress_data = data;
        f->progress_cb = cb;
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

void sbx__future_progress(sbx_future *f, const char *stage, unsigned long long done,
                          unsigned long long total)
{
    pthread_mutex_lock(&f->lock);
    sbx_progress_cb cb = f->done ? NULL : f->progress_cb;
    void *data = f->progress_data;
    pthread_mutex_unlock(&f->lock);
    if (cb)
        cb(stage, done, total, data);
}

int sbx_future_code(const sbx_future *f, sbx_error **err)
{
    if (!f)
        return SBX_EINVAL;
    pthread_mutex_lock((pthread_mutex_t *)&f->lock);
    int rc;
    if (!f->done)
        rc = sbx__set_error(err, SBX_ESTATE, "the operation has not completed yet");
    else
        rc = result_code((sbx_future *)f, err);
    pthread_mutex_unlock((pthread_mutex_t *)&f->lock);
    return rc;
}

static int take(sbx_future *f, enum sbx__value_kind kind, void **out, sbx_error **err)
{
    /* A status is a plain value: it can be read again, so it is never "taken". */
    bool keep = kind == SBX_VALUE_STATUS;
    if (!f)
        return sbx__set_error(err, SBX_EINVAL, "future is NULL");
    pthread_mutex_lock(&f->lock);
    int rc;
    if (!f->done) {
        rc = sbx__set_error(err, SBX_ESTATE,
                            "the operation has not completed yet; wait for the future first");
    } else if (f->code < 0) {
        rc = result_code(f, err);
    } else if (f->kind != kind) {
        rc = sbx__set_error(err, SBX_ETYPE, "this future does not hold that kind of result");
    } else if (f->taken) {
        rc = sbx__set_error(err, SBX_ESTATE, "the result was already taken from this future");
    } else {
        *out = f->value;
        f->taken = !keep;
        rc = SBX_OK;
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int sbx_future_take_exec_result(sbx_future *f, sbx_exec_result **out, sbx_error **err)
{
    return take(f, SBX_VALUE_EXEC_RESULT, (void **)out, err);
}

int sbx_future_take_status(sbx_future *f, sbx_status *out, sbx_error **err)
{
    void *v = NULL;
    int rc = take(f, SBX_VALUE_STATUS, &v, err);
    if (rc == SBX_OK)
        *out = (sbx_status)(intptr_t)v;
    return rc;
}

int sbx_future_take_endpoint(sbx_future *f, sbx_endpoint **out, sbx_error **err)
{
    return take(f, SBX_VALUE_ENDPOINT, (void **)out, err);
}

int sbx_future_take_string(sbx_future *f, char **out, sbx_error **err)
{
    return take(f, SBX_VALUE_STRING, (void **)out, err);
}

int sbx_future_take_sandbox(sbx_future *f, sbx_sandbox **out, sbx_error **err)
{
    return take(f, SBX_VALUE_SANDBOX, (void **)out, err);
}

void sbx_future_free(sbx_future *f)
{
    if (f)
        future_unref(f);
}

int sbx__future_wait_json(sbx_future *f, json_t **out, sbx_error **err)
{
    char *text = NULL;
    int rc = sbx_future_wait(f, -1, err);
    if (rc == SBX_OK)
        rc = sbx_future_take_string(f, &text, err);
    sbx_future_free(f);
    if (rc < 0)
        return rc;
    json_t *j = json_loads(text, 0, NULL);
    free(text);
    if (!json_is_object(j)) {
        json_decref(j);
        return sbx__set_error(err, SBX_EPROVIDER, "the provider's answer is not a JSON object");
    }
    *out = j;
    return SBX_OK;
}
