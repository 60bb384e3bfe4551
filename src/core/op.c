/*
 * Ops: one call into a provider. The provider finishes it once with
 * sbx_op_complete() from any thread; the core's continuation always runs
 * later, on the loop thread, never inside the provider's own call (so a
 * provider that completes at once cannot re-enter the core).
 */
#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include <uv.h>

struct sbx_op {
    sbx_provider *p;
    sbx__op_done_fn done;
    void *data;
    atomic_bool completed;
    atomic_bool cancelled; /* set on the loop, read by providers from worker threads too */
    sbx_op_cancel_cb cancel_cb;
    void *cancel_data;
    int code;
    sbx_error *err;
    void *value;
    sbx_future *progress; /* where sbx_op_progress reports; referenced */
    _Atomic unsigned long long progress_last_ms;
    sbx__exec_sink *sink; /* an exec whose caller listens to its output, else NULL */
    bool sink_borrowed;   /* an inner op feeding its outer op's sink */
    sbx_pty_session *pty; /* pty_open's session, told at once when the op completes */
};

sbx_op *sbx__op_new(sbx_provider *p, sbx__op_done_fn done, void *data)
{
    sbx_op *op = calloc(1, sizeof(*op));
    if (!op)
        return NULL;
    op->p = p;
    sbx__provider_ref(p);
    op->done = done;
    op->data = data;
    atomic_init(&op->completed, false);
    atomic_init(&op->cancelled, false);
    return op;
}

static void deliver(void *arg)
{
    sbx_op *op = arg;
    sbx_provider *p = op->p;
    if (op->err)
        sbx__error_set_provider(op->err, p->name);
    if (op->sink)
        sbx__exec_sink_detach(op->sink, op->sink_borrowed);
    op->done(op->code, op->err, op->value, op->data);
    if (op->progress)
        sbx_future_free(op->progress);
    free(op);
    sbx__provider_unref(p);
}

void sbx_op_complete(sbx_op *op, int code, sbx_error *err, void *value)
{
    if (atomic_exchange(&op->completed, true)) {
        /* A provider bug: log it instead of corrupting the caller's state. */
        sbx_log(SBX_LOG_ERROR, "provider '%s' completed an operation twice", op->p->name);
        sbx_error_free(err);
        return;
    }
    if (code < 0 && !err)
        err = sbx_error_new(code, "%s: %s", op->p->name, sbx_strerror(code));
    if (code >= 0) {
        sbx_error_free(err);
        err = NULL;
    }
    op->code = code;
    op->err = err;
    op->value = value;
    /*
     * Before the result travels: from here on the provider has let go of
     * the session's connection, so no callback may reach it (the call's own
     * end, later, only confirms it).
     */
    if (op->pty)
        sbx__pty_session_done(op->pty, code, err);
    if (sbx__context_post(op->p->ctx, deliver, op) < 0) {
        /* Out of memory for a queue node: deliver here rather than lose the result. */
        deliver(op);
    }
}

void sbx__op_set_pty_session(sbx_op *op, sbx_pty_session *s) { op->pty = s; }

void sbx__op_set_progress_future(sbx_op *op, sbx_future *f)
{
    sbx__future_ref(f);
    op->progress = f;
}

struct progress_report {
    sbx_future *f;
    unsigned long long done, total;
    char stage[64];
};

static void progress_deliver(void *arg)
{
    struct progress_report *r = arg;
    sbx__future_progress(r->f, r->stage, r->done, r->total);
    sbx_future_free(r->f);
    free(r);
}

void sbx_op_progress(sbx_op *op, const char *stage, unsigned long long done,
                     unsigned long long total)
{
    if (!op || !op->progress || atomic_load(&op->completed))
        return;
    /* At most one report per ~50 ms (the last one, done == total, always goes). */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long now = (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
    unsigned long long last = atomic_load(&op->progress_last_ms);
    if (!(total && done >= total) && last && now - last < 50)
        return;
    atomic_store(&op->progress_last_ms, now ? now : 1);
    struct progress_report *r = calloc(1, sizeof(*r));
    if (!r)
        return;
    snprintf(r->stage, sizeof(r->stage), "%s", stage ? stage : "");
    r->done = done;
    r->total = total;
    r->f = op->progress;
    sbx__future_ref(r->f);
    if (sbx__context_post(op->p->ctx, progress_deliver, r) < 0) {
        sbx_future_free(r->f);
        free(r);
    }
}

void sbx__op_set_exec_sink(sbx_op *op, sbx__exec_sink *s)
{
    op->sink = s;
    sbx__exec_sink_attach(s, op);
}

void sbx__op_inherit_exec_sink(sbx_op *inner, const sbx_op *outer)
{
    if (!inner || !outer || !outer->sink)
        return;
    inner->sink = outer->sink;
    inner->sink_borrowed = true;
}

int sbx_op_exec_streaming(const sbx_op *op) { return op && op->sink ? 1 : 0; }

struct chunk_task {
    sbx_op *op;
    int stream;
    size_t len;
    char data[];
};

static void chunk_deliver(void *arg)
{
    struct chunk_task *t = arg;
    /* Queued before the completion, so the op (and its sink) is still there. */
    if (t->op->sink)
        sbx__exec_sink_chunk(t->op->sink, t->stream, t->data, t->len);
    free(t);
}

void sbx_op_exec_output(sbx_op *op, int stream, const void *data, size_t len)
{
    /* A provider that did not declare streaming gets the fallback: its chunks would come twice. */
    if (!op || !op->sink || !len || !data || atomic_load(&op->completed) ||
        (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR) ||
        !sbx__exec_sink_streams(op->sink))
        return;
    if (sbx__context_on_loop(op->p->ctx)) {
        sbx__exec_sink_chunk(op->sink, stream, data, len);
        return;
    }
    struct chunk_task *t = malloc(sizeof(*t) + len);
    if (!t) {
        sbx_log(SBX_LOG_ERROR, "out of memory queueing %zu bytes of output", len);
        return;
    }
    t->op = op;
    t->stream = stream;
    t->len = len;
    memcpy(t->data, data, len);
    if (sbx__context_post(op->p->ctx, chunk_deliver, t) < 0) {
        sbx_log(SBX_LOG_ERROR, "out of memory queueing %zu bytes of output", len);
        free(t);
    }
}

void sbx_op_exec_on_flow(sbx_op *op, sbx_op_flow_cb cb, void *data)
{
    if (op && op->sink)
        sbx__exec_sink_set_flow(op->sink, cb, data);
}

void *sbx_op_loop(sbx_op *op) { return sbx__context_uv(op->p->ctx); }
sbx_provider *sbx__op_provider(const sbx_op *op) { return op->p; }
const char *sbx_op_provider_name(const sbx_op *op) { return op->p->name; }
int sbx_op_cancelled(const sbx_op *op) { return atomic_load(&op->cancelled); }

void sbx_op_on_cancel(sbx_op *op, sbx_op_cancel_cb cb, void *data)
{
    op->cancel_cb = cb;
    op->cancel_data = data;
}

void sbx__op_cancel(sbx_op *op)
{
    if (atomic_load(&op->cancelled) || atomic_load(&op->completed))
        return;
    atomic_store(&op->cancelled, true);
    if (op->cancel_cb)
        op->cancel_cb(op, op->cancel_data);
}

/* Separate from the op: the op may be freed (delivered) before the item's end runs. */
struct work {
    sbx_op *op;
    sbx_op_work_fn fn;
    void *data;
};

static void work_cb(void *arg)
{
    struct work *wk = arg;
    wk->fn(wk->op, wk->data);
}

static void work_done(void *arg, bool cancelled)
{
    struct work *wk = arg;
    /* Only a context being torn down cancels an item nobody started. */
    if (cancelled)
        sbx_op_complete(wk->op, SBX_ECANCELED, NULL, NULL);
    free(wk);
}

int sbx_op_run_blocking(sbx_op *op, sbx_op_work_fn fn, void *data)
{
    struct work *wk = calloc(1, sizeof(*wk));
    if (!wk)
        return SBX_ENOMEM;
    wk->op = op;
    wk->fn = fn;
    wk->data = data;
    /* The context's own pool: never libuv's process-wide one (see pool.c). */
    int rc = sbx__context_submit(op->p->ctx, work_cb, work_done, wk, NULL);
    if (rc < 0) {
        free(wk);
        return rc;
    }
    return SBX_OK;
}
