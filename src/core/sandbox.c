/*
 * The sandbox lifecycle (reference-api.md C-F): state checks, defaults,
 * startup files, idempotent stop. Every operation is written once, async;
 * the blocking calls at the end submit and wait.
 *
 * Threading: sandbox state is guarded by `lock` so the async entry points
 * can answer state errors at once, from any thread. Provider calls and
 * their continuations run on the loop thread. Each in-flight call holds a
 * reference, so the provider's box state outlives every call using it.
 */
#include "internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>

enum sb_state { SB_NEW, SB_STARTING, SB_STARTED, SB_CLOSED };

struct pending_stop {
    sbx_future *f;
    struct pending_stop *next;
};

struct sbx_sandbox {
    sbx_provider *p;
    sbx_spec *spec;
    pthread_mutex_t lock;
    enum sb_state state;
    void *box;
    char *id;
    bool owned;
    atomic_int refs;
    sbx_future *start_future; /* while starting: cancelled by a concurrent stop */
    bool box_closed;          /* the provider's close was called (loop thread only) */
    struct pending_stop *pending_stops;
    struct sbx__pty_home *pty_home; /* pty exec facade state (pty_exec.c), made on first use */
    char *box_tmpdir; /* the box's TMPDIR, asked once by transfer_exec.c (under lock) */
    bool paused;      /* paused through this handle (under lock): its box answers nothing */
};

enum call_kind {
    CALL_START,
    CALL_EXEC,
    CALL_UPLOAD,
    CALL_DOWNLOAD,
    CALL_STATUS,
    CALL_ENDPOINT,
    CALL_SERIALIZE,
    CALL_CONNECT,
    CALL_AGENT_ADDRESS,
    CALL_LOG_ADDRESS, /* [svc-logs] */
    CALL_LOG_STREAM,  /* [svc-logs] */
    CALL_STATS,
    CALL_PTY_OPEN, /* ABI 3: lasts as long as the session */
    CALL_PAUSE,    /* ABI 3 */
    CALL_RESUME,
};

/* One async operation on a sandbox, possibly several provider steps long. */
struct call {
    enum call_kind kind;
    sbx_sandbox *sb;
    sbx_provider *p; /* for connect, which has no sandbox yet */
    sbx_future *f;
    sbx_op *op; /* the provider step in flight (loop thread only) */
    sbx_pty_session *pty; /* pty_open: the session (a reference) */
    char *a, *b;
    int port;
    sbx_exec_opts *opts;
    /*
     * log_stream: its socket, closed with the call while fd_held (a call
     * made by calloc, as connect's is, holds none: fd 0 is stdin), and
     * handed to the provider when the call runs; the window asked for.
     */
    int fd;
    bool fd_held;
    double since;
    long long tail;
    unsigned flags;
    /* exec: where its output streams; while it drains to slow fds, the outcome waits here */
    sbx__exec_sink *sink;
    bool draining;
    int drain_code;
    sbx_error *drain_err;
    void *drain_value;
    /* start: */
    size_t next_file;
    char *tmpdir;
    char *tmpfile;
    int stage_errno;      /* staging a startup file on the pool failed with this */
    bool stage_dir_failed; /* ... making the temp directory, not writing the file */
    int saved_code;
    sbx_error *saved_err;
};

static void sandbox_ref(sbx_sandbox *sb) { atomic_fetch_add(&sb->refs, 1); }

struct box_free_task {
    sbx_provider *p;
    void *box;
};

static void box_free_run(void *data)
{
    struct box_free_task *t = data;
    t->p->ops->box_free(t->box);
    sbx__provider_unref(t->p);
    free(t);
}

static void sandbox_unref(sbx_sandbox *sb)
{
    if (!sb || atomic_fetch_sub(&sb->refs, 1) != 1)
        return;
    sbx_provider *p = sb->p;
    void *box = sb->box;
    sbx_spec_free(sb->spec);
    free(sb->id);
    sbx__pty_home_free(sb->pty_home);
    free(sb->box_tmpdir);
    pthread_mutex_destroy(&sb->lock);
    free(sb);
    /*
     * Providers own loop handles (agent connections, timers) in their box
     * state, and libuv handles may only be closed on the loop thread: box_free
     * runs there, like every other provider call.
     */
    if (box && !sbx__context_on_loop(p->ctx)) {
        struct box_free_task *t = malloc(sizeof(*t));
        if (t) {
            *t = (struct box_free_task){ p, box };
            if (sbx__context_post(p->ctx, box_free_run, t) == SBX_OK)
                return;
            free(t);
        }
    }
    if (box)
        p->ops->box_free(box);
    sbx__provider_unref(p);
}

static sbx_sandbox *sandbox_alloc(sbx_provider *p)
{
    sbx_sandbox *sb = calloc(1, sizeof(*sb));
    if (!sb)
        return NULL;
    sb->p = p;
    sbx__provider_ref(p);
    pthread_mutex_init(&sb->lock, NULL);
    atomic_init(&sb->refs, 1);
    return sb;
}

int sbx_sandbox_new(sbx_provider *p, const sbx_spec *spec, sbx_sandbox **out, sbx_error **err)
{
    if (!p || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_new: provider and out are required");
    sbx_sandbox *sb = sandbox_alloc(p);
    if (!sb)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (spec && !(sb->spec = sbx_spec_copy(spec))) {
        sandbox_unref(sb);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    *out = sb;
    return SBX_OK;
}

/* --- calls --------------------------------------------------------------- */

static struct call *call_new(enum call_kind kind, sbx_sandbox *sb, enum sbx__value_kind vk)
{
    struct call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->kind = kind;
    c->sb = sb;
    c->p = sb ? sb->p : NULL;
    c->f = sbx__future_new(c->p->ctx, vk);
    if (!c->f) {
        free(c);
        return NULL;
    }
    if (sb)
        sandbox_ref(sb);
    return c;
}

static void call_free(struct call *c)
{
    free(c->a);
    free(c->b);
    sbx_exec_opts_free(c->opts);
    sbx__exec_sink_free(c->sink);
    sbx_error_free(c->drain_err);
    if (c->drain_value)
        sbx_exec_result_free(c->drain_value);
    free(c->tmpfile);
    free(c->tmpdir);
    if (c->fd_held)
        close(c->fd);
    sbx_error_free(c->saved_err);
    sbx__pty_session_unref(c->pty);
    if (c->sb)
        sandbox_unref(c->sb);
    else
        sbx__provider_unref(c->p); /* connect holds the provider itself */
    free(c);
}

/* Completes the caller's future and ends the call. */
static void call_finish(struct call *c, int code, sbx_error *err, void *value)
{
    sbx__future_set_cancel(c->f, NULL, NULL);
    if (c->pty)
        sbx__pty_session_done(c->pty, code, err); /* the provider never ran, or let go */
    sbx__future_complete(c->f, code, err, value);
    call_free(c);
}

static void call_cancel(void *data)
{
    struct call *c = data;
    if (c->draining) {
        /* The command ended; its output still drains to a slow fd: stop waiting for it. */
        sbx__exec_sink_abort(c->sink);
        call_finish(c, SBX_ECANCELED,
                    sbx_error_new(SBX_ECANCELED, "operation cancelled while its output drained"),
                    NULL);
        return;
    }
    if (c->op)
        sbx__op_cancel(c->op);
}

/* Makes the op for the next provider step, wired to cancellation. */
static sbx_op *call_step(struct call *c, sbx__op_done_fn done)
{
    c->op = sbx__op_new(c->p, done, c);
    if (c->op)
        sbx__future_set_cancel(c->f, call_cancel, c);
    return c->op;
}

static void call_oom(struct call *c)
{
    call_finish(c, SBX_ENOMEM, sbx_error_new(SBX_ENOMEM, "out of memory"), NULL);
}

static int submit(struct call *c, sbx__task_fn fn, sbx_future **out, sbx_error **err)
{
    /* The caller's reference to the future; the call holds the other. */
    *out = c->f;
    if (sbx__context_post(c->p->ctx, fn, c) < 0) {
        *out = NULL;
        sbx_future_free(c->f);
        call_finish(c, SBX_ENOMEM, NULL, NULL);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    return SBX_OK;
}

static int oom(sbx_error **err) { return sbx__set_error(err, SBX_ENOMEM, "out of memory"); }

static int need_started(sbx_sandbox *sb, sbx_error **err)
{
    /* Caller holds sb->lock. */
    if (sb->state != SB_STARTED)
        return sbx__set_error(err, SBX_ESTATE, "Sandbox has not been started");
    return SBX_OK;
}

static char *provider_repr(const sbx_provider *p) { return sbx__repr(p->name); }

/* --- start --------------------------------------------------------------- */

static void start_upload_next(struct call *c);
static void run_pending_stops(sbx_sandbox *sb);

/* What a start staged (a temp file, its directory), removed on the pool. */
struct staged {
    char *file, *dir;
};

static void staged_remove_work(void *data)
{
    struct staged *st = data;
    if (st->file)
        unlink(st->file);
    if (st->dir)
        rmdir(st->dir);
    free(st->file);
    free(st->dir);
    free(st);
}

static void start_settle(struct call *c, enum sb_state state, int code, sbx_error *err)
{
    sbx_sandbox *sb = c->sb;
    pthread_mutex_lock(&sb->lock);
    sb->state = state;
    sb->start_future = NULL;
    pthread_mutex_unlock(&sb->lock);
    if (c->tmpdir || c->tmpfile) {
        /* The staged startup files go on the pool: unlink and rmdir touch the disk. */
        struct staged *st = malloc(sizeof(*st));
        if (st) {
            st->file = steal_pointer(&c->tmpfile);
            st->dir = steal_pointer(&c->tmpdir);
            if (sbx__context_submit(c->p->ctx, staged_remove_work, NULL, st, NULL) < 0)
                staged_remove_work(st);
        }
    }
    sandbox_ref(sb);
    call_finish(c, code, err, NULL);
    run_pending_stops(sb);
    sandbox_unref(sb);
}

static void start_closed_after_failure(int code, sbx_error *err, void *value, void *data)
{
    struct call *c = data;
    (void)value;
    c->op = NULL;
    if (code < 0) {
        sbx_log(SBX_LOG_WARNING, "closing sandbox %s after a failed start also failed: %s",
                c->sb->id ? c->sb->id : "?", sbx_error_message(err));
        sbx_error_free(err);
    }
    start_settle(c, SB_CLOSED, c->saved_code, steal_pointer(&c->saved_err));
}

/* A startup step failed after the box exists: close it, then report the original error. */
static void start_fail_and_close(struct call *c, int code, sbx_error *err)
{
    c->saved_code = code;
    c->saved_err = err;
    sbx__future_set_cancel(c->f, NULL, NULL); /* closing is not cancellable */
    sbx_op *op = sbx__op_new(c->p, start_closed_after_failure, c);
    if (!op) {
        start_settle(c, SB_CLOSED, code, steal_pointer(&c->saved_err));
        return;
    }
    c->op = op;
    c->p->ops->close(op, c->p->state, c->sb->box, 1);
}

static void start_upload_done(int code, sbx_error *err, void *value, void *data)
{
    struct call *c = data;
    (void)value;
    c->op = NULL;
    /* The staged file stays until the next one is staged or the start ends (on the pool). */
    if (code < 0) {
        start_fail_and_close(c, code, err);
        return;
    }
    if (sbx__future_cancelled(c->f)) {
        start_fail_and_close(c, SBX_ECANCELED,
                             sbx_error_new(SBX_ECANCELED, "sandbox start was cancelled"));
        return;
    }
    c->next_file++;
    start_upload_next(c);
}

/*
 * Worker: stages startup file next_file in a private temp directory (made
 * with the first one), after removing the one uploaded before it. The loop
 * does not touch the call meanwhile: it waits for stage_done.
 */
static void stage_work(void *data)
{
    struct call *c = data;
    const struct sbx_spec_file *file = &c->sb->spec->files[c->next_file];
    c->stage_errno = 0;
    if (c->tmpfile) {
        unlink(c->tmpfile);
        free(c->tmpfile);
        c->tmpfile = NULL;
    }
    if (!c->tmpdir) {
        const char *base = getenv("TMPDIR");
        char *tmpl = sbx__printf("%s/sbx-upload-XXXXXX", base && *base ? base : "/tmp");
        if (!tmpl || !mkdtemp(tmpl)) {
            c->stage_errno = tmpl ? errno : ENOMEM;
            c->stage_dir_failed = true;
            free(tmpl);
            return;
        }
        c->tmpdir = tmpl;
    }
    c->tmpfile = sbx__printf("%s/file-%zu", c->tmpdir, c->next_file);
    if (!c->tmpfile)
        c->stage_errno = ENOMEM;
    /* [svc-logs] The providers' uploads keep the staged file's mode: it is the file's. */
    else if (sbx__write_file_atomic(c->tmpfile, file->data, file->len,
                                    file->mode >= 0 ? (mode_t)file->mode : 0600) < 0)
        c->stage_errno = errno ? errno : EIO;
}

static void stage_done(void *data, bool cancelled)
{
    struct call *c = data;
    const struct sbx_spec_file *file = &c->sb->spec->files[c->next_file];
    if (cancelled || sbx__future_cancelled(c->f)) {
        start_fail_and_close(c, SBX_ECANCELED,
                             sbx_error_new(SBX_ECANCELED, "sandbox start was cancelled"));
        return;
    }
    if (c->stage_errno && c->stage_dir_failed) {
        start_fail_and_close(c, SBX_EIO,
                             sbx_error_new_errno(SBX_EIO, c->stage_errno,
                                                 "cannot make a temporary directory for "
                                                 "startup files"));
        return;
    }
    if (c->stage_errno) {
        start_fail_and_close(c, SBX_EIO,
                             sbx_error_new_errno(SBX_EIO, c->stage_errno,
                                                 "cannot stage startup file %s", file->path));
        return;
    }
    sbx_op *op = call_step(c, start_upload_done);
    if (!op) {
        start_fail_and_close(c, SBX_ENOMEM, NULL);
        return;
    }
    c->p->ops->upload_file(op, c->p->state, c->sb->box, c->tmpfile, file->path);
}

/*
 * Startup files go through the provider's upload_file from private temp files,
 * as the reference does, so every provider gets them the same way. They are
 * written on the context's worker pool, not the loop: they can be large.
 */
static void start_upload_next(struct call *c)
{
    const sbx_spec *spec = c->sb->spec;
    if (c->next_file >= spec->n_files) {
        start_settle(c, SB_STARTED, SBX_OK, NULL);
        return;
    }
    if (sbx__context_submit(c->p->ctx, stage_work, stage_done, c, NULL) < 0)
        start_fail_and_close(c, SBX_ENOMEM, NULL);
}

static void start_close_cancelled(int code, sbx_error *err, void *value, void *data)
{
    start_closed_after_failure(code, err, value, data);
}

static void start_created(int code, sbx_error *err, void *value, void *data)
{
    struct call *c = data;
    sbx_sandbox *sb = c->sb;
    c->op = NULL;
    if (code < 0) {
        /* Nothing exists: the sandbox may be started again, as the reference allows. */
        if (code != SBX_ECANCELED && sbx_error_code(err) != SBX_ECREATE &&
            sbx_error_code(err) != SBX_EVERIFY)
            sbx_log(SBX_LOG_DEBUG, "create failed: %s", sbx_error_message(err));
        start_settle(c, SB_NEW, code, err);
        return;
    }
    const char *id = c->p->ops->box_id(value);
    pthread_mutex_lock(&sb->lock);
    sb->box = value;
    sb->id = sbx__strdup0(id ? id : "");
    sb->owned = true;
    pthread_mutex_unlock(&sb->lock);
    if (sbx__future_cancelled(c->f)) {
        /* The reference leaks a box whose create was cancelled; sbx closes it. */
        c->saved_code = SBX_ECANCELED;
        c->saved_err = sbx_error_new(SBX_ECANCELED, "sandbox start was cancelled");
        sbx_op *op = sbx__op_new(c->p, start_close_cancelled, c);
        if (!op) {
            start_settle(c, SB_CLOSED, SBX_ECANCELED, steal_pointer(&c->saved_err));
            return;
        }
        c->op = op;
        c->p->ops->close(op, c->p->state, sb->box, 1);
        return;
    }
    start_upload_next(c);
}

static void start_run(void *data)
{
    struct call *c = data;
    if (sbx__future_cancelled(c->f)) {
        start_settle(c, SB_NEW, SBX_ECANCELED,
                     sbx_error_new(SBX_ECANCELED, "sandbox start was cancelled"));
        return;
    }
    sbx_op *op = call_step(c, start_created);
    if (!op) {
        start_settle(c, SB_NEW, SBX_ENOMEM, NULL);
        return;
    }
    /* What the create reports (an image's pull) reaches the start's future (on_progress). */
    sbx__op_set_progress_future(op, c->f);
    c->p->ops->create(op, c->p->state, c->sb->spec);
}

int sbx_sandbox_start_async(sbx_sandbox *sb, const sbx_spec *spec, sbx_future **out,
                            sbx_error **err)
{
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_start: sandbox and out are required");
    pthread_mutex_lock(&sb->lock);
    int rc = SBX_OK;
    if (sb->state == SB_CLOSED)
        rc = sbx__set_error(err, SBX_ESTATE, "Sandbox has been stopped");
    else if (sb->state != SB_NEW)
        rc = sbx__set_error(err, SBX_ESTATE, "Sandbox is already started");
    else if (!spec && !sb->spec)
        rc = sbx__set_error(err, SBX_EINVAL, "Sandbox.start() requires a SandboxSpec");
    if (rc < 0) {
        pthread_mutex_unlock(&sb->lock);
        return rc;
    }
    if (spec) {
        sbx_spec *copy = sbx_spec_copy(spec);
        if (!copy) {
            pthread_mutex_unlock(&sb->lock);
            return oom(err);
        }
        sbx_spec_free(sb->spec);
        sb->spec = copy;
    }
    struct call *c = call_new(CALL_START, sb, SBX_VALUE_NONE);
    if (!c) {
        pthread_mutex_unlock(&sb->lock);
        return oom(err);
    }
    sb->state = SB_STARTING;
    sb->start_future = c->f;
    pthread_mutex_unlock(&sb->lock);
    return submit(c, start_run, out, err);
}

/* --- simple one-step calls ------------------------------------------------ */

static void exec_drained(void *data)
{
    struct call *c = data;
    int code = c->drain_code;
    sbx_error *err = steal_pointer(&c->drain_err);
    void *value = steal_pointer(&c->drain_value);
    c->draining = false;
    sbx__exec_sink_settle(c->sink, &code, &err, &value);
    call_finish(c, code, err, value);
}

static void simple_done(int code, sbx_error *err, void *value, void *data)
{
    struct call *c = data;
    c->op = NULL;
    if (c->kind == CALL_EXEC && c->sink && sbx__future_cancelled(c->f)) {
        /* The caller cancelled: do not wait for a reader to take what is still queued. */
        sbx__exec_sink_abort(c->sink);
        sbx__exec_sink_finish(c->sink, code, value, NULL, NULL); /* keep_output; nothing waits */
        call_finish(c, code, err, value);
        return;
    }
    if (c->kind == CALL_EXEC && c->sink) {
        c->drain_code = code;
        c->drain_err = err;
        c->drain_value = value;
        if (!sbx__exec_sink_finish(c->sink, code, value, exec_drained, c)) {
            c->draining = true; /* exec_drained, or a cancel, finishes it */
            return;
        }
        exec_drained(c);
        return;
    }
    if (code >= 0 && (c->kind == CALL_PAUSE || c->kind == CALL_RESUME)) {
        pthread_mutex_lock(&c->sb->lock);
        c->sb->paused = c->kind == CALL_PAUSE;
        pthread_mutex_unlock(&c->sb->lock);
    }
    if (code >= 0 && c->kind == CALL_SERIALIZE) {
        /* Add the spec's workdir when the provider's descriptor lacks it (reference F.38). */
        json_t *d = value ? json_loads(value, 0, NULL) : NULL;
        if (!json_is_object(d)) {
            json_decref(d);
            free(value);
            call_finish(c, SBX_EPROVIDER,
                        sbx_error_new(SBX_EPROVIDER,
                                      "provider '%s' serialize() did not return a JSON object",
                                      c->p->name),
                        NULL);
            return;
        }
        json_t *wd = json_object_get(d, "workdir");
        if ((!wd || json_is_null(wd)) && c->sb->spec) {
            const char *w = c->sb->spec->workdir;
            json_object_set_new(d, "workdir", w ? json_string(w) : json_null());
            free(value);
            value = sbx__json_dump(d);
        }
        json_decref(d);
    }
    if (code >= 0 && c->kind == CALL_ENDPOINT && !value) {
        call_finish(c, SBX_ETYPE,
                    sbx_error_new(SBX_ETYPE,
                                  "Sandbox provider endpoint() must return SandboxEndpoint, got "
                                  "NoneType"),
                    NULL);
        return;
    }
    call_finish(c, code, err, value);
}

static void simple_run(void *data)
{
    struct call *c = data;
    if (sbx__future_cancelled(c->f)) {
        call_finish(c, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "operation cancelled"), NULL);
        return;
    }
    /*
     * A stop that raced this call reached the loop first and the provider
     * closed the box (its state lives on until the last call lets go): do
     * not hand the provider a closed box. A call accepted before the stop
     * was queued before its close, so it still runs on the box.
     */
    bool closed = c->sb->box_closed;
    if (closed && c->kind == CALL_STATUS) {
        call_finish(c, SBX_OK, NULL, (void *)(intptr_t)SBX_STATUS_STOPPED);
        return;
    }
    if (closed) {
        /* The message the same call gets when it comes after the stop (need_started). */
        call_finish(c, SBX_ESTATE, sbx_error_new(SBX_ESTATE, "Sandbox has not been started"),
                    NULL);
        return;
    }
    sbx_op *op = call_step(c, simple_done);
    if (!op) {
        call_oom(c);
        return;
    }
    const struct sbx_provider_ops *o = c->p->ops;
    void *st = c->p->state, *box = c->sb->box;
    switch (c->kind) {
    case CALL_EXEC:
        if (c->sink)
            sbx__op_set_exec_sink(op, c->sink);
        o->exec(op, st, box, c->a, c->opts);
        break;
    case CALL_UPLOAD:
        o->upload_file(op, st, box, c->a, c->b);
        break;
    case CALL_DOWNLOAD:
        o->download_file(op, st, box, c->a, c->b);
        break;
    case CALL_STATUS:
        o->status(op, st, box);
        break;
    case CALL_ENDPOINT:
        o->endpoint(op, st, box, c->port);
        break;
    case CALL_SERIALIZE:
        o->serialize(op, st, box, c->a);
        break;
    case CALL_AGENT_ADDRESS:
        o->agent_address(op, st, box);
        break;
    case CALL_LOG_ADDRESS:
        o->log_address(op, st, box);
        break;
    case CALL_STATS:
        o->stats(op, st, box);
        break;
    case CALL_PAUSE:
        o->pause(op, st, box);
        break;
    case CALL_RESUME:
        o->resume(op, st, box);
        break;
    case CALL_PTY_OPEN:
        sbx__op_set_pty_session(op, c->pty);
        o->pty_open(op, st, box, c->pty);
        break;
    case CALL_LOG_STREAM: {
        c->fd_held = false; /* the provider's from here on */
        o->log_stream(op, st, box, c->fd, c->since, c->tail, c->flags);
        break;
    }
    default:
        sbx_op_complete(op, SBX_EINVAL, NULL, NULL);
        break;
    }
}

/* Calls a paused box cannot answer: refused at once rather than left to time out. */
static bool needs_running(enum call_kind kind)
{
    return kind == CALL_EXEC || kind == CALL_UPLOAD || kind == CALL_DOWNLOAD ||
           kind == CALL_AGENT_ADDRESS || kind == CALL_PTY_OPEN || kind == CALL_LOG_STREAM;
}

/* Checks state and makes a one-step call; the caller fills its arguments. */
static int begin_simple(sbx_sandbox *sb, enum call_kind kind, enum sbx__value_kind vk,
                        struct call **out, sbx_error **err)
{
    pthread_mutex_lock(&sb->lock);
    int rc = need_started(sb, err);
    if (rc == SBX_OK && sb->paused && needs_running(kind))
        rc = sbx__set_error(err, SBX_ESTATE,
                            "Sandbox %s is paused: resume it first (sbx_sandbox_resume, "
                            "resume(), sbx unpause)",
                            sb->id ? sb->id : "");
    pthread_mutex_unlock(&sb->lock);
    if (rc < 0)
        return rc;
    struct call *c = call_new(kind, sb, vk);
    if (!c)
        return oom(err);
    *out = c;
    return SBX_OK;
}

int sbx_sandbox_exec_async(sbx_sandbox *sb, const char *command, const sbx_exec_opts *opts,
                           sbx_future **out, sbx_error **err)
{
    if (!sb || !command || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_exec: sandbox, command and out are required");
    struct call *c;
    int rc = begin_simple(sb, CALL_EXEC, SBX_VALUE_EXEC_RESULT, &c, err);
    if (rc < 0)
        return rc;
    c->a = strdup(command);
    c->opts = sbx__exec_opts_copy(opts);
    /* cwd defaults to spec.workdir; env is not merged here (providers merge spec.env). */
    if (c->opts && !c->opts->cwd && sb->spec && sb->spec->workdir)
        c->opts->cwd = strdup(sb->spec->workdir);
    if (!c->a || !c->opts) {
        sbx_future_free(c->f);
        call_finish(c, SBX_ENOMEM, NULL, NULL);
        return oom(err);
    }
    if ((rc = sbx__exec_sink_new(sb->p, opts, &c->sink, err)) < 0) {
        sbx_future_free(c->f);
        call_finish(c, rc, NULL, NULL);
        return rc;
    }
    /*
     * A provider that does not stream hands the core its whole output, which
     * the sink then delivers and drops: it must keep it whatever the caller asked.
     */
    if (c->sink && !sbx__exec_sink_streams(c->sink))
        c->opts->drop_output = false;
    return submit(c, simple_run, out, err);
}

static int transfer_async(sbx_sandbox *sb, enum call_kind kind, const char *a, const char *b,
                          sbx_future **out, sbx_error **err)
{
    if (!sb || !a || !b || !out)
        return sbx__set_error(err, SBX_EINVAL, "%s: sandbox, both paths and out are required",
                              kind == CALL_UPLOAD ? "sbx_sandbox_upload" : "sbx_sandbox_download");
    struct call *c;
    int rc = begin_simple(sb, kind, SBX_VALUE_NONE, &c, err);
    if (rc < 0)
        return rc;
    c->a = strdup(a);
    c->b = strdup(b);
    if (!c->a || !c->b) {
        sbx_future_free(c->f);
        call_finish(c, SBX_ENOMEM, NULL, NULL);
        return oom(err);
    }
    return submit(c, simple_run, out, err);
}

int sbx_sandbox_upload_async(sbx_sandbox *sb, const char *local_path, const char *remote_path,
                             sbx_future **out, sbx_error **err)
{
    return transfer_async(sb, CALL_UPLOAD, local_path, remote_path, out, err);
}

int sbx_sandbox_download_async(sbx_sandbox *sb, const char *remote_path, const char *local_path,
                               sbx_future **out, sbx_error **err)
{
    return transfer_async(sb, CALL_DOWNLOAD, remote_path, local_path, out, err);
}

int sbx_sandbox_status_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err)
{
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_status: sandbox and out are required");
    pthread_mutex_lock(&sb->lock);
    enum sb_state st = sb->state;
    pthread_mutex_unlock(&sb->lock);
    struct call *c = call_new(CALL_STATUS, sb, SBX_VALUE_STATUS);
    if (!c)
        return oom(err);
    if (st != SB_STARTED) {
        /* No handle: UNKNOWN before start, STOPPED after stop (reference C.19). */
        sbx_status s = st == SB_CLOSED ? SBX_STATUS_STOPPED : SBX_STATUS_UNKNOWN;
        *out = c->f;
        call_finish(c, SBX_OK, NULL, (void *)(intptr_t)s);
        return SBX_OK;
    }
    return submit(c, simple_run, out, err);
}

int sbx_sandbox_endpoint_async(sbx_sandbox *sb, int port, sbx_future **out, sbx_error **err)
{
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_endpoint: sandbox and out are required");
    if (port < 1 || port > 65535)
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox endpoint port must be an integer between 1 and 65535, got %d",
                              port);
    pthread_mutex_lock(&sb->lock);
    bool declared = false;
    sbx_buf list = { 0 };
    sbx__buf_append(&list, "[", 1);
    for (size_t i = 0; sb->spec && i < sb->spec->n_ports; i++) {
        declared |= sb->spec->ports[i] == port;
        sbx__buf_printf(&list, "%s%d", i ? ", " : "", sb->spec->ports[i]);
    }
    sbx__buf_append(&list, "]", 1);
    pthread_mutex_unlock(&sb->lock);
    if (!declared) {
        int rc = sbx__set_error(err, SBX_EINVAL,
                                "Sandbox port %d was not declared in SandboxSpec.ports; declared "
                                "ports: %s",
                                port, list.data ? list.data : "[]");
        sbx__buf_free(&list);
        return rc;
    }
    sbx__buf_free(&list);
    if (!sb->p->ops->endpoint) {
        _cleanup_free_ char *r = provider_repr(sb->p);
        return sbx__set_error(err, SBX_ENOTSUP,
                              "Sandbox provider %s does not support service endpoints", r);
    }
    struct call *c;
    int rc = begin_simple(sb, CALL_ENDPOINT, SBX_VALUE_ENDPOINT, &c, err);
    if (rc < 0)
        return rc;
    c->port = port;
    return submit(c, simple_run, out, err);
}

int sbx__sandbox_agent_address_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err)
{
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "a sandbox and out are required");
    if (!sb->p->ops->agent_address) {
        _cleanup_free_ char *r = provider_repr(sb->p);
        if (sb->p->ops->pty_open)
            /* Its terminals are its own (pty_open); what needs the agent itself cannot be. */
            return sbx__set_error(err, SBX_ENOTSUP,
                                  "Sandbox provider %s runs no sbx-agent in its boxes: "
                                  "listing their sessions and processes needs one (its "
                                  "terminals and background processes work without)",
                                  r);
        return sbx__set_error(err, SBX_ENOTSUP,
                              "Sandbox provider %s does not support PTY sessions", r);
    }
    struct call *c;
    int rc = begin_simple(sb, CALL_AGENT_ADDRESS, SBX_VALUE_STRING, &c, err);
    if (rc < 0)
        return rc;
    return submit(c, simple_run, out, err);
}

bool sbx__sandbox_has_pty_open(const sbx_sandbox *sb)
{
    return sb && sb->p->ops->pty_open != NULL;
}

int sbx__sandbox_pty_open(sbx_sandbox *sb, sbx_pty_session *s, sbx_error **err)
{
    struct call *c;
    int rc = begin_simple(sb, CALL_PTY_OPEN, SBX_VALUE_NONE, &c, err);
    if (rc < 0)
        return rc;
    sbx__pty_session_ref(s);
    c->pty = s;
    sbx__pty_session_set_context(s, c->p->ctx);
    sbx_future *f = NULL;
    if ((rc = submit(c, simple_run, &f, err)) < 0)
        return rc;
    /* Nobody waits on the future: the session hears the outcome (sbx__pty_session_done). */
    sbx_future_free(f);
    return SBX_OK;
}

/* [svc-logs] Where the box's service log is (a JSON object text future; provider.h log_address). */
int sbx__sandbox_log_address_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err)
{
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "a sandbox and out are required");
    if (!sb->p->ops->log_address) {
        _cleanup_free_ char *r = provider_repr(sb->p);
        return sbx__set_error(err, SBX_ENOTSUP,
                              "Sandbox provider %s does not keep service logs (linux and "
                              "docker do)",
                              r);
    }
    struct call *c;
    int rc = begin_simple(sb, CALL_LOG_ADDRESS, SBX_VALUE_STRING, &c, err);
    if (rc < 0)
        return rc;
    return submit(c, simple_run, out, err);
}

bool sbx__sandbox_has_log_stream(const sbx_sandbox *sb) { return sb->p->ops->log_stream; }

/* [svc-logs] The provider writes the log into `fd` (always taken: closed on failure). */
int sbx__sandbox_log_stream_async(sbx_sandbox *sb, int fd, double since, long long tail,
                                  unsigned flags, sbx_future **out, sbx_error **err)
{
    struct call *c = NULL;
    int rc = begin_simple(sb, CALL_LOG_STREAM, SBX_VALUE_NONE, &c, err);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    c->fd = fd;
    c->fd_held = true;
    c->since = since;
    c->tail = tail;
    c->flags = flags;
    return submit(c, simple_run, out, err);
}

static int need_connect_support(const sbx_provider *p, sbx_error **err)
{
    if (p->ops->serialize && p->ops->connect)
        return SBX_OK;
    _cleanup_free_ char *r = provider_repr(p);
    return sbx__set_error(err, SBX_ENOTSUP, "provider %s does not support serialize()/connect()",
                          r);
}

int sbx_sandbox_serialize_async(sbx_sandbox *sb, const char *scope, sbx_future **out,
                                sbx_error **err)
{
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_serialize: sandbox and out are required");
    int rc = need_connect_support(sb->p, err);
    if (rc < 0)
        return rc;
    struct call *c;
    if ((rc = begin_simple(sb, CALL_SERIALIZE, SBX_VALUE_STRING, &c, err)) < 0)
        return rc;
    if (scope && !(c->a = strdup(scope))) {
        sbx_future_free(c->f);
        call_finish(c, SBX_ENOMEM, NULL, NULL);
        return oom(err);
    }
    return submit(c, simple_run, out, err);
}

/* --- connect ------------------------------------------------------------- */

static void connect_done(int code, sbx_error *err, void *value, void *data)
{
    struct call *c = data;
    c->op = NULL;
    if (code < 0) {
        call_finish(c, code, err, NULL);
        return;
    }
    sbx_sandbox *sb = sandbox_alloc(c->p);
    json_t *d = json_loads(c->a, 0, NULL);
    json_t *wd = json_object_get(d, "workdir");
    int wrc = SBX_OK;
    if (sb && (sb->spec = sbx_spec_new()) &&
        (!json_is_string(wd) ||
         (wrc = sbx_spec_set_workdir(sb->spec, json_string_value(wd))) == SBX_OK)) {
        /*
         * [endpoint] A descriptor that lists the box's declared ports (linux)
         * declares them on this handle too, so endpoint() works after a
         * connect; without "ports" none are declared, as the reference does.
         */
        json_t *ports = json_object_get(d, "ports");
        size_t pi;
        json_t *pv;
        json_array_foreach(ports, pi, pv)
        {
            if (json_is_integer(pv) && pi < 1024)
                (void)sbx_spec_add_port(sb->spec, (int)json_integer_value(pv), NULL);
        }
        const char *id = c->p->ops->box_id(value);
        sb->box = value;
        sb->id = sbx__strdup0(id ? id : "");
        sb->owned = false;
        sb->state = SB_STARTED;
        json_decref(d);
        call_finish(c, SBX_OK, NULL, sb);
        return;
    }
    /* A descriptor is input: its workdir becomes every exec's cwd, so it must be a box path. */
    sbx_error *e = wrc == SBX_EINVAL ? sbx_error_new(SBX_EINVAL,
                                                     "the descriptor's workdir %s is not an "
                                                     "absolute path; fix or drop it",
                                                     json_string_value(wd))
                                     : NULL;
    json_decref(d);
    if (sb)
        sandbox_unref(sb);
    c->p->ops->box_free(value);
    if (e)
        call_finish(c, SBX_EINVAL, e, NULL);
    else
        call_oom(c);
}

static void connect_run(void *data)
{
    struct call *c = data;
    sbx_op *op = call_step(c, connect_done);
    if (!op) {
        call_oom(c);
        return;
    }
    c->p->ops->connect(op, c->p->state, c->a);
}

int sbx_sandbox_connect_async(sbx_provider *p, const char *descriptor_json, sbx_future **out,
                              sbx_error **err)
{
    if (!p || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_connect: provider and out are required");
    int rc = need_connect_support(p, err);
    if (rc < 0)
        return rc;
    json_t *d = descriptor_json ? json_loads(descriptor_json, 0, NULL) : NULL;
    if (!json_is_object(d)) {
        json_decref(d);
        return sbx__set_error(err, SBX_ETYPE,
                              "sandbox descriptor must be a JSON object, as "
                              "sbx_sandbox_serialize() returns");
    }
    json_decref(d);
    struct call *c = calloc(1, sizeof(*c));
    if (!c)
        return oom(err);
    c->kind = CALL_CONNECT;
    c->p = p;
    sbx__provider_ref(p);
    c->f = sbx__future_new(p->ctx, SBX_VALUE_SANDBOX);
    c->a = strdup(descriptor_json);
    if (!c->f || !c->a) {
        if (c->f) {
            sbx_future_free(c->f);
            sbx__future_complete(c->f, SBX_ENOMEM, NULL, NULL);
        }
        free(c->a);
        sbx__provider_unref(p);
        free(c);
        return oom(err);
    }
    /* The call holds a provider reference of its own, released in connect_finish. */
    *out = c->f;
    if (sbx__context_post(p->ctx, connect_run, c) < 0) {
        *out = NULL;
        sbx_future_free(c->f);
        call_finish(c, SBX_ENOMEM, NULL, NULL);
        return oom(err);
    }
    return SBX_OK;
}

/* --- stop ---------------------------------------------------------------- */

struct stop_call {
    sbx_sandbox *sb;
    sbx_future **futures;
    size_t n;
};

static void stop_done(int code, sbx_error *err, void *value, void *data)
{
    struct stop_call *s = data;
    (void)value;
    for (size_t i = 0; i < s->n; i++)
        sbx__future_complete(s->futures[i], code, i + 1 == s->n ? err : sbx_error_copy(err), NULL);
    if (!s->n)
        sbx_error_free(err);
    free(s->futures);
    sandbox_unref(s->sb);
    free(s);
}

/* Runs provider close for a sandbox already marked closed; completes `futures`. */
static void close_box(sbx_sandbox *sb, sbx_future **futures, size_t n)
{
    struct stop_call *s = calloc(1, sizeof(*s));
    sbx_op *op = s ? sbx__op_new(sb->p, stop_done, s) : NULL;
    if (!op) {
        for (size_t i = 0; i < n; i++)
            sbx__future_complete(futures[i], SBX_ENOMEM, NULL, NULL);
        free(futures);
        free(s);
        return;
    }
    s->sb = sb;
    sandbox_ref(sb);
    s->futures = futures;
    s->n = n;
    sb->box_closed = true;
    sb->p->ops->close(op, sb->p->state, sb->box, sb->owned);
}

struct close_task {
    sbx_sandbox *sb;
    sbx_future *f;
};

static void close_task_run(void *data)
{
    struct close_task *t = data;
    sbx_future **fs = malloc(sizeof(*fs));
    if (fs) {
        fs[0] = t->f;
        close_box(t->sb, fs, 1);
    } else {
        sbx__future_complete(t->f, SBX_ENOMEM, NULL, NULL);
    }
    sandbox_unref(t->sb);
    free(t);
}

/* After a start settles: stops that arrived during it now act on the outcome. */
static void run_pending_stops(sbx_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    struct pending_stop *p = sb->pending_stops;
    sb->pending_stops = NULL;
    bool close_it = p && sb->state == SB_STARTED;
    if (p && sb->state != SB_CLOSED)
        sb->state = SB_CLOSED;
    pthread_mutex_unlock(&sb->lock);
    if (!p)
        return;
    size_t n = 0;
    for (struct pending_stop *q = p; q; q = q->next)
        n++;
    sbx_future **fs = calloc(n, sizeof(*fs));
    size_t i = 0;
    while (p) {
        struct pending_stop *next = p->next;
        if (fs)
            fs[i++] = p->f;
        else
            sbx__future_complete(p->f, SBX_ENOMEM, NULL, NULL);
        free(p);
        p = next;
    }
    if (!fs)
        return;
    if (close_it) {
        close_box(sb, fs, n);
        return;
    }
    for (i = 0; i < n; i++)
        sbx__future_complete(fs[i], SBX_OK, NULL, NULL);
    free(fs);
}

int sbx_sandbox_stop_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err)
{
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_stop: sandbox and out are required");
    sbx_future *f = sbx__future_new(sb->p->ctx, SBX_VALUE_NONE);
    if (!f)
        return oom(err);
    pthread_mutex_lock(&sb->lock);
    switch (sb->state) {
    case SB_NEW:
    case SB_CLOSED:
        /* Idempotent: nothing to end. */
        sb->state = SB_CLOSED;
        pthread_mutex_unlock(&sb->lock);
        *out = f;
        sbx__future_complete(f, SBX_OK, NULL, NULL);
        return SBX_OK;
    case SB_STARTING: {
        struct pending_stop *p = malloc(sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&sb->lock);
            sbx_future_free(f);
            sbx__future_complete(f, SBX_ENOMEM, NULL, NULL);
            return oom(err);
        }
        p->f = f;
        p->next = sb->pending_stops;
        sb->pending_stops = p;
        sbx_future *start = sb->start_future;
        sbx__future_ref(start);
        pthread_mutex_unlock(&sb->lock);
        /* Stop during start: cancel the start; the box is closed when it settles. */
        sbx_future_cancel(start);
        sbx_future_free(start);
        *out = f;
        return SBX_OK;
    }
    case SB_STARTED:
        break;
    }
    sb->state = SB_CLOSED;
    pthread_mutex_unlock(&sb->lock);
    struct close_task *t = malloc(sizeof(*t));
    if (!t) {
        sbx_future_free(f);
        sbx__future_complete(f, SBX_ENOMEM, NULL, NULL);
        return oom(err);
    }
    t->sb = sb;
    t->f = f;
    sandbox_ref(sb);
    *out = f;
    if (sbx__context_post(sb->p->ctx, close_task_run, t) < 0) {
        sbx__future_complete(f, SBX_ENOMEM, NULL, NULL);
        sandbox_unref(sb);
        free(t);
    }
    return SBX_OK;
}

/* --- accessors ----------------------------------------------------------- */

const char *sbx_sandbox_id(const sbx_sandbox *sb) { return sb ? sb->id : NULL; }
sbx_provider *sbx_sandbox_provider(const sbx_sandbox *sb) { return sb ? sb->p : NULL; }
const char *sbx_sandbox_workdir(const sbx_sandbox *sb)
{
    return sb && sb->spec ? sb->spec->workdir : NULL;
}
int sbx_sandbox_owned(const sbx_sandbox *sb) { return sb ? sb->owned : 0; }

/*
 * Drops the caller's reference. As in sbx_provider_free, the loop may still
 * hold the last ones (a stop's completion, an op's provider reference):
 * drain it, so that when the provider was freed first it is released (and
 * its context's thread joined) before this returns. Not on a loop thread:
 * waiting there could deadlock two loops draining each other.
 */
static void sandbox_release(sbx_sandbox *sb)
{
    sbx_context *ctx = sb->p->ctx;
    sbx__context_ref(ctx);
    sandbox_unref(sb);
    if (!sbx__on_any_loop())
        sbx__context_drain(ctx);
    sbx__context_unref(ctx);
}

char *sbx__sandbox_box_tmpdir(sbx_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    char *d = sb->box_tmpdir ? strdup(sb->box_tmpdir) : NULL;
    pthread_mutex_unlock(&sb->lock);
    return d;
}

void sbx__sandbox_set_box_tmpdir(sbx_sandbox *sb, const char *dir)
{
    pthread_mutex_lock(&sb->lock);
    if (!sb->box_tmpdir)
        sb->box_tmpdir = strdup(dir);
    pthread_mutex_unlock(&sb->lock);
}

void sbx_sandbox_free(sbx_sandbox *sb)
{
    if (!sb)
        return;
    pthread_mutex_lock(&sb->lock);
    bool live = sb->state == SB_STARTING || (sb->state == SB_STARTED && sb->owned);
    pthread_mutex_unlock(&sb->lock);
    if (live) {
        /* Freeing never leaks a box this handle started. */
        sbx_future *f = NULL;
        if (sbx_sandbox_stop_async(sb, &f, NULL) == SBX_OK) {
            if (!sbx__on_any_loop()) {
                sbx_error *e = NULL;
                if (sbx_future_wait(f, -1, &e) < 0)
                    sbx_log(SBX_LOG_WARNING, "stopping sandbox %s on free failed: %s",
                            sb->id ? sb->id : "?", sbx_error_message(e));
                sbx_error_free(e);
            }
            sbx_future_free(f);
        }
    }
    sandbox_release(sb);
}

void sbx_sandbox_detach(sbx_sandbox *sb)
{
    if (!sb)
        return;
    pthread_mutex_lock(&sb->lock);
    sb->owned = false;
    pthread_mutex_unlock(&sb->lock);
    sandbox_release(sb);
}

/* --- the blocking facade ------------------------------------------------- */

static int refuse_on_loop(const char *fn, sbx_error **err)
{
    if (!sbx__on_any_loop())
        return SBX_OK;
    return sbx__set_error(err, SBX_ESTATE,
                          "%s() is blocking; use %s_async() in code that runs on the sbx loop "
                          "instead.",
                          fn, fn);
}

#define WAIT_NONE(f, err)                                                                          \
    do {                                                                                           \
        int wrc_ = sbx_future_wait((f), -1, (err));                                               \
        sbx_future_free(f);                                                                        \
        return wrc_;                                                                               \
    } while (0)

int sbx_sandbox_start(sbx_sandbox *sb, const sbx_spec *spec, sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_start", err);
    if (rc < 0 || (rc = sbx_sandbox_start_async(sb, spec, &f, err)) < 0)
        return rc;
    WAIT_NONE(f, err);
}

int sbx_sandbox_exec(sbx_sandbox *sb, const char *command, const sbx_exec_opts *opts,
                     sbx_exec_result **out, sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_exec", err);
    if (rc < 0 || (rc = sbx_sandbox_exec_async(sb, command, opts, &f, err)) < 0)
        return rc;
    rc = sbx_future_wait(f, -1, err);
    if (rc == SBX_OK)
        rc = sbx_future_take_exec_result(f, out, err);
    sbx_future_free(f);
    return rc;
}

int sbx_sandbox_upload(sbx_sandbox *sb, const char *local_path, const char *remote_path,
                       sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_upload", err);
    if (rc < 0 || (rc = sbx_sandbox_upload_async(sb, local_path, remote_path, &f, err)) < 0)
        return rc;
    WAIT_NONE(f, err);
}

int sbx_sandbox_download(sbx_sandbox *sb, const char *remote_path, const char *local_path,
                         sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_download", err);
    if (rc < 0 || (rc = sbx_sandbox_download_async(sb, remote_path, local_path, &f, err)) < 0)
        return rc;
    WAIT_NONE(f, err);
}

int sbx_sandbox_status(sbx_sandbox *sb, sbx_status *out, sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_status", err);
    if (rc < 0 || (rc = sbx_sandbox_status_async(sb, &f, err)) < 0)
        return rc;
    rc = sbx_future_wait(f, -1, err);
    if (rc == SBX_OK)
        rc = sbx_future_take_status(f, out, err);
    sbx_future_free(f);
    return rc;
}

int sbx_sandbox_endpoint(sbx_sandbox *sb, int port, sbx_endpoint **out, sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_endpoint", err);
    if (rc < 0 || (rc = sbx_sandbox_endpoint_async(sb, port, &f, err)) < 0)
        return rc;
    rc = sbx_future_wait(f, -1, err);
    if (rc == SBX_OK)
        rc = sbx_future_take_endpoint(f, out, err);
    sbx_future_free(f);
    return rc;
}

int sbx_sandbox_serialize(sbx_sandbox *sb, const char *scope, char **json_out, sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_serialize", err);
    if (rc < 0 || (rc = sbx_sandbox_serialize_async(sb, scope, &f, err)) < 0)
        return rc;
    rc = sbx_future_wait(f, -1, err);
    if (rc == SBX_OK)
        rc = sbx_future_take_string(f, json_out, err);
    sbx_future_free(f);
    return rc;
}

static int pause_resume_async(sbx_sandbox *sb, bool pause, sbx_future **out, sbx_error **err)
{
    const char *fn = pause ? "sbx_sandbox_pause" : "sbx_sandbox_resume";
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "%s: a sandbox and out are required", fn);
    if (!sb->p->ops->pause || !sb->p->ops->resume) {
        _cleanup_free_ char *r = provider_repr(sb->p);
        return sbx__set_error(err, SBX_ENOTSUP,
                              "Sandbox provider %s does not support pausing sandboxes (linux "
                              "and docker do)",
                              r);
    }
    struct call *c;
    int rc = begin_simple(sb, pause ? CALL_PAUSE : CALL_RESUME, SBX_VALUE_NONE, &c, err);
    if (rc < 0)
        return rc;
    return submit(c, simple_run, out, err);
}

int sbx_sandbox_pause_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err)
{
    return pause_resume_async(sb, true, out, err);
}

int sbx_sandbox_resume_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err)
{
    return pause_resume_async(sb, false, out, err);
}

static int pause_resume(sbx_sandbox *sb, bool pause, sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop(pause ? "sbx_sandbox_pause" : "sbx_sandbox_resume", err);
    if (rc < 0 || (rc = pause_resume_async(sb, pause, &f, err)) < 0)
        return rc;
    rc = sbx_future_wait(f, -1, err);
    sbx_future_free(f);
    return rc;
}

int sbx_sandbox_pause(sbx_sandbox *sb, sbx_error **err) { return pause_resume(sb, true, err); }

int sbx_sandbox_resume(sbx_sandbox *sb, sbx_error **err) { return pause_resume(sb, false, err); }

int sbx_sandbox_stats(sbx_sandbox *sb, char **json_out, sbx_error **err)
{
    int rc = refuse_on_loop("sbx_sandbox_stats", err);
    if (rc < 0)
        return rc;
    if (!sb || !json_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_stats: a sandbox and out are required");
    if (!sb->p->ops->stats) {
        _cleanup_free_ char *r = provider_repr(sb->p);
        return sbx__set_error(err, SBX_ENOTSUP,
                              "Sandbox provider %s keeps no resource accounts of its boxes "
                              "(linux does)",
                              r);
    }
    struct call *c;
    sbx_future *f;
    if ((rc = begin_simple(sb, CALL_STATS, SBX_VALUE_STRING, &c, err)) < 0 ||
        (rc = submit(c, simple_run, &f, err)) < 0)
        return rc;
    rc = sbx_future_wait(f, -1, err);
    if (rc == SBX_OK)
        rc = sbx_future_take_string(f, json_out, err);
    sbx_future_free(f);
    return rc;
}

int sbx_sandbox_connect(sbx_provider *p, const char *descriptor_json, sbx_sandbox **out,
                        sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_connect", err);
    if (rc < 0 || (rc = sbx_sandbox_connect_async(p, descriptor_json, &f, err)) < 0)
        return rc;
    rc = sbx_future_wait(f, -1, err);
    if (rc == SBX_OK)
        rc = sbx_future_take_sandbox(f, out, err);
    sbx_future_free(f);
    return rc;
}

int sbx_sandbox_stop(sbx_sandbox *sb, sbx_error **err)
{
    sbx_future *f;
    int rc = refuse_on_loop("sbx_sandbox_stop", err);
    if (rc < 0 || (rc = sbx_sandbox_stop_async(sb, &f, err)) < 0)
        return rc;
    WAIT_NONE(f, err);
}

void sbx__sandbox_hold(sbx_sandbox *sb)
{
    sandbox_ref(sb);
}

void sbx__sandbox_release(sbx_sandbox *sb)
{
    sandbox_unref(sb);
}

struct sbx__pty_home *sbx__sandbox_pty_home(sbx_sandbox *sb)
{
    pthread_mutex_lock(&sb->lock);
    if (!sb->pty_home)
        sb->pty_home = sbx__pty_home_new();
    struct sbx__pty_home *h = sb->pty_home;
    pthread_mutex_unlock(&sb->lock);
    return h;
}
