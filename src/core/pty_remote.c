/*
 * Terminals a provider opens itself (provider.h pty_open, ABI 3): the core's
 * side of a session whose bytes travel the provider's own way (a remote
 * service's PTY over a WebSocket) instead of over sbx-agent's protocol.
 *
 * Two threads meet here. The provider runs on the context's loop thread: it
 * delivers output, the exit status or a failure (sbx_pty_session_*), and the
 * core calls its callbacks there (tasks posted from the caller's thread).
 * The caller's handle (pty.c) blocks on its own thread: it reads what
 * arrived under the session's lock and waits on an eventfd that the loop
 * side signals at every change (so sbx_pty_fd works in poll loops as for an
 * agent's socket).
 *
 * Lifetime: the session is shared by the handle and by the sandbox's
 * pty_open call (which holds the sandbox, so the provider outlives the
 * session); whichever lets go last frees it. The provider's op completes
 * when it has let go of the connection (`released`): no callback runs after.
 */
#include "core/internal.h"
#include "proto/pty.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/*
 * Flow control: past HIGH unread bytes (both streams) the provider is asked
 * to pause its source, and to resume once the reader brought it under LOW.
 * The window (SBX_PTY_WINDOW a stream) still bounds a provider that ignores it.
 */
#define FLOW_HIGH (256u << 10)
#define FLOW_LOW (64u << 10)

struct sbx_pty_session {
    atomic_int refs;
    pthread_mutex_t lock;
    int efd;
    sbx_context *ctx; /* borrowed: the handle holds the sandbox, the call holds it too */

    /* The request (immutable once the call is made). */
    sbx_pty_opts *req;
    unsigned attach_id;
    int takeover;
    unsigned long long since;

    /* Everything below under `lock`. */
    const struct sbx_pty_session_ops *ops;
    void *conn;
    unsigned id;
    bool ready;
    bool close_sent;
    bool released; /* the provider's op completed: no more callbacks */
    bool abandoned; /* the opener gave up waiting: a late ready is closed at once */
    bool paused, flow_posted;
    struct sbx__pty_window out[2];
    bool exited;
    int code;
    bool gone;
    int gone_code;
    char *gone_msg;
};

static void session_free(sbx_pty_session *s)
{
    sbx_pty_opts_free(s->req);
    free(s->out[0].buf);
    free(s->out[1].buf);
    free(s->gone_msg);
    if (s->efd >= 0)
        close(s->efd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void sbx__pty_session_ref(sbx_pty_session *s) { atomic_fetch_add(&s->refs, 1); }

void sbx__pty_session_unref(sbx_pty_session *s)
{
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        session_free(s);
}

int sbx__pty_session_new(sbx_pty_opts *req, unsigned attach_id, int takeover,
                         unsigned long long since, sbx_pty_session **out, sbx_error **err)
{
    sbx_pty_session *s = calloc(1, sizeof(*s));
    if (!s) {
        sbx_pty_opts_free(req);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    atomic_init(&s->refs, 1);
    pthread_mutex_init(&s->lock, NULL);
    s->req = req;
    s->attach_id = attach_id;
    s->takeover = takeover;
    s->since = since;
    s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->efd < 0) {
        int e = errno;
        session_free(s);
        return sbx__set_errno(err, SBX_EIO, e, "eventfd for a PTY session");
    }
    *out = s;
    return SBX_OK;
}

void sbx__pty_session_set_context(sbx_pty_session *s, sbx_context *ctx) { s->ctx = ctx; }

/* Wakes the handle's reader (and poll loops on sbx_pty_fd). */
static void wake(sbx_pty_session *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->efd, &one, sizeof(one));
    (void)n; /* EAGAIN: the counter is already non-zero, the reader will wake */
}

static void drain_wake(sbx_pty_session *s)
{
    uint64_t v;
    ssize_t n = read(s->efd, &v, sizeof(v));
    (void)n;
}

/* Caller holds the lock. */
static void set_gone(sbx_pty_session *s, int code, const char *msg)
{
    if (s->gone || s->exited)
        return;
    s->gone = true;
    s->gone_code = code;
    free(s->gone_msg);
    s->gone_msg = strdup(msg && msg[0] ? msg : "the session ended");
}

/* --- tasks the handle posts to the loop ------------------------------------- */

enum task_kind { T_WRITE, T_RESIZE, T_SIGNAL, T_CLOSE, T_FLOW };

struct task {
    sbx_pty_session *s;
    enum task_kind kind;
    unsigned a, b;
    char name[16];
    size_t len;
    uint8_t data[];
};

static void task_run(void *arg)
{
    struct task *t = arg;
    sbx_pty_session *s = t->s;
    pthread_mutex_lock(&s->lock);
    bool callable = s->ops && !s->released && !s->close_sent;
    const struct sbx_pty_session_ops *ops = s->ops;
    void *conn = s->conn;
    int flow = -1;
    if (callable && t->kind == T_CLOSE)
        s->close_sent = true;
    if (t->kind == T_FLOW) {
        s->flow_posted = false;
        size_t unread = s->out[0].len + s->out[1].len;
        bool want = unread >= FLOW_HIGH ? true : unread <= FLOW_LOW ? false : s->paused;
        if (callable && ops->flow && want != s->paused) {
            s->paused = want;
            flow = want;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (callable) {
        switch (t->kind) {
        case T_WRITE:
            ops->write(conn, t->data, t->len);
            break;
        case T_RESIZE:
            ops->resize(conn, t->a, t->b);
            break;
        case T_SIGNAL:
            ops->signal(conn, (int)t->a, t->name);
            break;
        case T_CLOSE:
            ops->close(conn, (int)t->a);
            break;
        case T_FLOW:
            if (flow >= 0)
                ops->flow(conn, flow);
            break;
        }
    }
    sbx__pty_session_unref(s);
    free(t);
}

static int post(sbx_pty_session *s, enum task_kind kind, unsigned a, unsigned b, const char *name,
                const void *data, size_t len, sbx_error **err)
{
    struct task *t = calloc(1, sizeof(*t) + len);
    if (!t)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    t->s = s;
    t->kind = kind;
    t->a = a;
    t->b = b;
    if (name)
        snprintf(t->name, sizeof(t->name), "%s", name);
    t->len = len;
    if (len)
        memcpy(t->data, data, len);
    sbx__pty_session_ref(s);
    if (!s->ctx || sbx__context_post(s->ctx, task_run, t) < 0) {
        sbx__pty_session_unref(s);
        free(t);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    return SBX_OK;
}

/* --- the provider's side (loop thread) -------------------------------------- */

int sbx_pty_session_ready(sbx_pty_session *s, const struct sbx_pty_session_ops *ops, void *conn,
                          unsigned id)
{
    if (!s)
        return SBX_EINVAL;
    int rc = SBX_OK;
    pthread_mutex_lock(&s->lock);
    if (s->ready || !ops || !ops->write || !ops->resize || !ops->signal || !ops->close ||
        id == 0) {
        set_gone(s, SBX_EPROVIDER,
                 s->ready ? "the provider said the session was ready twice"
                          : "the provider's session is not usable (no id, or its callbacks "
                            "lack write, resize, signal or close)");
        rc = SBX_EINVAL;
    } else {
        s->ops = ops;
        s->conn = conn;
        s->id = id;
        s->ready = true;
    }
    bool late = rc == SBX_OK && s->abandoned;
    pthread_mutex_unlock(&s->lock);
    /* Nobody holds a handle to it any more: have the provider let go (an open ends it). */
    if (late)
        sbx__pty_session_close(s, s->attach_id == 0, -1, NULL);
    wake(s);
    return rc;
}

int sbx__pty_window_add(struct sbx__pty_window *q, unsigned long long offset, const uint8_t *data,
                     size_t len)
{
    uint64_t next = q->offset + q->len;
    if (offset != SBX_PTY_OFFSET_NEXT && q->started && offset < next) {
        /* A replay overlapping what came already: keep only the new part. */
        if (offset + len <= next)
            return 0;
        data += next - offset;
        len -= (size_t)(next - offset);
        offset = next;
    }
    if (offset != SBX_PTY_OFFSET_NEXT && (!q->started || q->len == 0)) {
        q->offset = offset; /* a gap (bytes the service no longer had) shows in read's offset */
        next = offset;
    }
    q->started = true;
    if (!q->buf && !(q->buf = malloc(SBX_PTY_WINDOW)))
        return -1;
    if (len > SBX_PTY_WINDOW) {
        size_t skip = len - SBX_PTY_WINDOW;
        data += skip;
        len = SBX_PTY_WINDOW;
        q->len = 0;
        q->offset = next + skip;
    }
    if (q->len + len > SBX_PTY_WINDOW) {
        size_t drop = q->len + len - SBX_PTY_WINDOW;
        memmove(q->buf, q->buf + drop, q->len - drop);
        q->len -= drop;
        q->offset += drop;
    }
    memcpy(q->buf + q->len, data, len);
    q->len += len;
    return 0;
}

size_t sbx__pty_window_take(struct sbx__pty_window *q, void *buf, size_t cap,
                            unsigned long long *offset)
{
    size_t take = cap < q->len ? cap : q->len;
    memcpy(buf, q->buf, take);
    if (offset)
        *offset = q->offset;
    memmove(q->buf, q->buf + take, q->len - take);
    q->len -= take;
    q->offset += take;
    return take;
}

void sbx_pty_session_output(sbx_pty_session *s, int stream, unsigned long long offset,
                            const void *data, size_t len)
{
    if (!s || !len || !data || (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR))
        return;
    bool post_flow = false;
    pthread_mutex_lock(&s->lock);
    if (!s->exited && !s->gone && !s->released) {
        if (sbx__pty_window_add(&s->out[stream == SBX_STREAM_STDERR], offset, data, len) < 0)
            set_gone(s, SBX_ENOMEM, "out of memory for the session's output");
        size_t unread = s->out[0].len + s->out[1].len;
        if (unread >= FLOW_HIGH && !s->paused && !s->flow_posted && s->ops && s->ops->flow) {
            s->flow_posted = true;
            post_flow = true;
        }
    }
    pthread_mutex_unlock(&s->lock);
    /* The pause goes through a task: never re-enter the provider from its own call. */
    if (post_flow && post(s, T_FLOW, 0, 0, NULL, NULL, 0, NULL) < 0) {
        pthread_mutex_lock(&s->lock);
        s->flow_posted = false;
        pthread_mutex_unlock(&s->lock);
    }
    wake(s);
}

void sbx_pty_session_exit(sbx_pty_session *s, int code)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    if (!s->exited && !s->gone) {
        s->exited = true;
        s->code = code;
    }
    pthread_mutex_unlock(&s->lock);
    wake(s);
}

void sbx_pty_session_fail(sbx_pty_session *s, sbx_error *err)
{
    if (!s) {
        sbx_error_free(err);
        return;
    }
    pthread_mutex_lock(&s->lock);
    set_gone(s, err ? sbx_error_code(err) : SBX_EIO,
             err ? sbx_error_message(err) : "the provider lost the session");
    pthread_mutex_unlock(&s->lock);
    sbx_error_free(err);
    wake(s);
}

void sbx__pty_session_done(sbx_pty_session *s, int code, const sbx_error *err)
{
    pthread_mutex_lock(&s->lock);
    if (!s->released) {
        s->released = true;
        if (code < 0)
            set_gone(s, code, err ? sbx_error_message(err) : sbx_strerror(code));
        else if (!s->close_sent)
            set_gone(s, SBX_EIO, "the provider ended the session without an exit status");
    }
    pthread_mutex_unlock(&s->lock);
    wake(s);
}

const char *sbx_pty_session_command(const sbx_pty_session *s)
{
    return s ? s->req->command : NULL;
}
const char *const *sbx_pty_session_argv(const sbx_pty_session *s)
{
    return s ? (const char *const *)s->req->argv : NULL;
}
const char *sbx_pty_session_cwd(const sbx_pty_session *s) { return s ? s->req->cwd : NULL; }
const char *sbx_pty_session_user(const sbx_pty_session *s) { return s ? s->req->user : NULL; }
size_t sbx_pty_session_env_count(const sbx_pty_session *s) { return s ? s->req->n_env : 0; }
const char *sbx_pty_session_env_at(const sbx_pty_session *s, size_t i)
{
    return s && i < s->req->n_env ? s->req->env[i] : NULL;
}
void sbx_pty_session_size(const sbx_pty_session *s, unsigned *rows, unsigned *cols)
{
    if (rows)
        *rows = s ? s->req->rows : 24;
    if (cols)
        *cols = s ? s->req->cols : 80;
}
int sbx_pty_session_pipes(const sbx_pty_session *s) { return s ? s->req->pipes : 0; }
unsigned sbx_pty_session_attach_id(const sbx_pty_session *s) { return s ? s->attach_id : 0; }
int sbx_pty_session_takeover(const sbx_pty_session *s) { return s ? s->takeover : 0; }
unsigned long long sbx_pty_session_since(const sbx_pty_session *s) { return s ? s->since : 0; }

/* --- the handle's side (the caller's thread) -------------------------------- */

enum until { U_READY, U_BYTES_OUT, U_BYTES_ERR, U_EXIT, U_RELEASED };

/* Caller holds the lock. */
static bool holds(const sbx_pty_session *s, enum until u)
{
    bool over = s->exited || s->gone || s->released;
    switch (u) {
    case U_READY:
        return s->ready || s->gone || s->released;
    case U_BYTES_OUT:
        return s->out[0].len || over;
    case U_BYTES_ERR:
        return s->out[1].len || over;
    case U_EXIT:
        return over;
    case U_RELEASED:
        return s->released;
    }
    return true;
}

/* Waits until `u` holds: true, or false when the time (< 0: none) ran out. */
static bool wait_for(sbx_pty_session *s, enum until u, double timeout_s)
{
    double deadline = timeout_s < 0 ? -1 : sbx__monotonic_s() + timeout_s;
    for (;;) {
        drain_wake(s);
        pthread_mutex_lock(&s->lock);
        bool ok = holds(s, u);
        pthread_mutex_unlock(&s->lock);
        if (ok)
            return true;
        int ms = -1;
        if (deadline >= 0) {
            double left = deadline - sbx__monotonic_s();
            if (left <= 0)
                return false;
            ms = (int)(left * 1000) + 1;
        }
        struct pollfd pf = {.fd = s->efd, .events = POLLIN};
        poll(&pf, 1, ms);
    }
}

/* Keeps sbx_pty_fd readable while a read would not wait. Caller holds the lock. */
static void rearm(sbx_pty_session *s)
{
    if (s->out[0].len || s->out[1].len || s->exited || s->gone || s->released)
        wake(s);
}

static int gone_error(sbx_pty_session *s, sbx_error **err)
{
    /* Caller holds the lock. */
    if (s->gone)
        return sbx__set_error(err, s->gone_code, "PTY session %u: %s", s->id, s->gone_msg);
    return sbx__set_error(err, SBX_EIO, "PTY session %u: the provider ended the session", s->id);
}

double sbx__pty_open_timeout_s = 120;

int sbx__pty_session_start(sbx_pty_session *s, unsigned *id, sbx_error **err)
{
    bool in_time = wait_for(s, U_READY, sbx__pty_open_timeout_s);
    pthread_mutex_lock(&s->lock);
    int rc = SBX_OK;
    if (!in_time && !s->ready && !s->gone && !s->released) {
        s->abandoned = true;
        rc = sbx__set_error(err, SBX_ETIMEDOUT,
                            "the provider did not open the PTY session in %.3g s (is its "
                            "service reachable?)",
                            sbx__pty_open_timeout_s);
    } else if (s->ready && !s->gone)
        *id = s->id;
    else if (s->gone)
        rc = sbx__set_error(err, s->gone_code, "%s", s->gone_msg);
    else
        rc = sbx__set_error(err, SBX_EPTY, "the provider ended the session before it ran");
    rearm(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sbx__pty_session_read(sbx_pty_session *s, int k, void *buf, size_t cap, double timeout_s,
                          size_t *n, unsigned long long *offset, sbx_error **err)
{
    bool in_time = wait_for(s, k ? U_BYTES_ERR : U_BYTES_OUT, timeout_s);
    pthread_mutex_lock(&s->lock);
    struct sbx__pty_window *q = &s->out[k];
    int rc = SBX_OK;
    bool post_flow = false;
    if (q->len) {
        *n = sbx__pty_window_take(q, buf, cap, offset);
        if (s->paused && !s->flow_posted && s->out[0].len + s->out[1].len <= FLOW_LOW) {
            s->flow_posted = true;
            post_flow = true;
        }
    } else if (s->exited) {
        *n = 0;
    } else if (s->gone || s->released) {
        rc = gone_error(s, err);
    } else {
        (void)in_time;
        rc = sbx__set_error(err, SBX_ETIMEDOUT, "PTY session %u: no output in %.3g s", s->id,
                            timeout_s);
    }
    rearm(s);
    pthread_mutex_unlock(&s->lock);
    if (post_flow && post(s, T_FLOW, 0, 0, NULL, NULL, 0, NULL) < 0) {
        pthread_mutex_lock(&s->lock);
        s->flow_posted = false;
        pthread_mutex_unlock(&s->lock);
    }
    return rc;
}

/* SBX_OK while the session runs, else why not. */
static int live(sbx_pty_session *s, sbx_error **err)
{
    pthread_mutex_lock(&s->lock);
    int rc = SBX_OK;
    if (s->gone)
        rc = gone_error(s, err);
    else if (s->close_sent)
        rc = sbx__set_error(err, SBX_EPTY, "PTY session %u is closed", s->id);
    else if (s->released)
        rc = gone_error(s, err);
    else if (s->exited)
        rc = sbx__set_error(err, SBX_EPTY, "PTY session %u has ended", s->id);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sbx__pty_session_write(sbx_pty_session *s, const void *data, size_t len, sbx_error **err)
{
    int rc = live(s, err);
    const uint8_t *d = data;
    /* Bounded tasks: a large write goes to the provider in 64 KiB pieces. */
    do {
        size_t piece = len < 65536 ? len : 65536;
        if (rc >= 0)
            rc = post(s, T_WRITE, 0, 0, NULL, d, piece, err);
        d += piece;
        len -= piece;
    } while (len && rc >= 0);
    return rc;
}

int sbx__pty_session_resize(sbx_pty_session *s, unsigned rows, unsigned cols, sbx_error **err)
{
    int rc = live(s, err);
    return rc < 0 ? rc : post(s, T_RESIZE, rows, cols, NULL, NULL, 0, err);
}

int sbx__pty_session_signal(sbx_pty_session *s, int signo, const char *name, sbx_error **err)
{
    int rc = live(s, err);
    return rc < 0 ? rc : post(s, T_SIGNAL, (unsigned)signo, 0, name, NULL, 0, err);
}

int sbx__pty_session_wait(sbx_pty_session *s, double timeout_s, int *code, sbx_error **err)
{
    wait_for(s, U_EXIT, timeout_s);
    pthread_mutex_lock(&s->lock);
    int rc = SBX_OK;
    if (s->exited) {
        if (code)
            *code = s->code;
    } else if (s->gone || s->released) {
        rc = gone_error(s, err);
    } else {
        rc = sbx__set_error(err, SBX_ETIMEDOUT, "PTY session %u did not end in %.3g s", s->id,
                            timeout_s);
    }
    rearm(s);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/*
 * Has the provider close its connection (`end`: the session too) and, when
 * `wait_s` >= 0, waits that long for it to let go. Once per session; later
 * calls only wait.
 */
int sbx__pty_session_close(sbx_pty_session *s, int end, double wait_s, sbx_error **err)
{
    pthread_mutex_lock(&s->lock);
    bool send = s->ready && !s->close_sent && !s->released;
    pthread_mutex_unlock(&s->lock);
    int rc = send ? post(s, T_CLOSE, end != 0, 0, NULL, NULL, 0, err) : SBX_OK;
    if (rc < 0 || wait_s < 0 || !send)
        return rc;
    if (!wait_for(s, U_RELEASED, wait_s))
        return sbx__set_error(err, SBX_ETIMEDOUT,
                              "PTY session %u: the provider did not close it in %.3g s", s->id,
                              wait_s);
    return SBX_OK;
}

/* After a detach: the handle's reads say so. */
void sbx__pty_session_detached(sbx_pty_session *s)
{
    pthread_mutex_lock(&s->lock);
    set_gone(s, SBX_EPTY, "the PTY session was detached");
    pthread_mutex_unlock(&s->lock);
}

int sbx__pty_session_fd(const sbx_pty_session *s) { return s->efd; }

bool sbx__pty_session_ready_to_read(sbx_pty_session *s)
{
    pthread_mutex_lock(&s->lock);
    bool r = s->out[0].len || s->out[1].len || s->exited || s->gone || s->released ||
             s->close_sent;
    pthread_mutex_unlock(&s->lock);
    return r;
}
