/*
 * Streaming exec output: where the chunks a provider hands over with
 * sbx_op_exec_output() go. One sink per exec whose caller listens (an
 * output callback or fds) or drops the output (keep_output 0).
 *
 * Callbacks are called at once, on the loop thread. An fd gets a queue and
 * is written without ever blocking the loop: a pipe, FIFO, tty or character
 * device is reopened through /proc/self/fd with O_NONBLOCK (a new open file
 * description, so the caller's flags never change) and written when epoll
 * says it is writable; a socket is dup'ed and written with MSG_DONTWAIT;
 * anything else (regular files, block devices, or a reopen that failed) is
 * written on the context's worker pool, one write in flight. When more than SINK_HIGH
 * bytes wait, the provider is asked to stop reading the command's output
 * (sbx_op_exec_on_flow) until they drop under SINK_LOW: memory stays
 * bounded, the command blocks, and nothing is lost. A write error kills the
 * command (the op is cancelled) and the exec fails with SBX_EIO.
 *
 * Lifetime: the sandbox call owns the sink; a posted cancel and each
 * thread-pool write hold a reference, so the memory outlives them.
 */
#include "internal.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include <uv.h>

#define SINK_HIGH (256u << 10)
#define SINK_LOW (64u << 10)
/* Fallback delivery (non-streaming providers): the whole output, in chunks this size. */
#define FALLBACK_CHUNK (64u << 10)

enum fd_mode { FD_POLL, FD_SOCK, FD_POOL };

struct fdw {
    sbx__exec_sink *s;
    int user_fd;  /* the caller's, for messages */
    int fd;       /* ours: a reopen or a dup, closed at the end; -1 once closed */
    enum fd_mode mode;
    uv_poll_t *poll; /* FD_POLL / FD_SOCK, while waiting to be writable */
    bool polling;
    sbx_buf q;   /* bytes not yet written, from q.data + head */
    size_t head;
    size_t inflight; /* FD_POOL: bytes in the thread-pool write */
    int err;         /* the write's errno once it failed */
    const char *what; /* "stdout", "stderr" or "stdout and stderr" */
};

struct sbx__exec_sink {
    sbx_context *ctx;
    uv_loop_t *loop;
    int refs;
    sbx_exec_output_cb cb;
    void *user;
    bool drop_output;
    bool provider_streams;
    struct fdw fdw[2];
    int nfdw;
    int map[2]; /* stream - 1 -> fdw index, or -1 */
    sbx_op *op; /* the provider step, while it runs */
    sbx_op_flow_cb flow_cb;
    void *flow_data;
    bool paused;
    bool failed;
    bool aborted;
    bool closed_fds;
    sbx_error *fail_err;
    void (*drained_cb)(void *);
    void *drained_data;
};

static void sink_unref(sbx__exec_sink *s);

static size_t pending(const sbx__exec_sink *s)
{
    size_t n = 0;
    for (int i = 0; i < s->nfdw; i++)
        n += s->fdw[i].q.len - s->fdw[i].head + s->fdw[i].inflight;
    return n;
}

static void poll_closed(uv_handle_t *h)
{
    struct fdw *w = h->data;
    free(h);
    sink_unref(w->s);
}

/* Closes our descriptors and poll handles (loop thread); idempotent. */
static void close_fds(sbx__exec_sink *s)
{
    if (s->closed_fds)
        return;
    s->closed_fds = true;
    for (int i = 0; i < s->nfdw; i++) {
        struct fdw *w = &s->fdw[i];
        if (w->poll && w->poll->data) {
            s->refs++;
            uv_close((uv_handle_t *)w->poll, poll_closed);
        } else {
            free(w->poll);
        }
        w->poll = NULL;
        /* A pool write in flight still uses the fd: it closes it when it returns. */
        if (w->fd >= 0 && !w->inflight) {
            close(w->fd);
            w->fd = -1;
        }
    }
}

static void cancel_task(void *data)
{
    sbx__exec_sink *s = data;
    if (s->op)
        sbx__op_cancel(s->op);
    sink_unref(s);
}

static void check_drained(sbx__exec_sink *s);

/* A write to `w` failed: drop what waits, kill the command, remember why. */
static void fdw_fail(struct fdw *w, int errnum)
{
    sbx__exec_sink *s = w->s;
    w->err = errnum;
    sbx__buf_free(&w->q);
    w->head = 0;
    if (w->polling) {
        uv_poll_stop(w->poll);
        w->polling = false;
    }
    if (!s->failed) {
        s->failed = true;
        s->fail_err = sbx_error_new_errno(
            SBX_EIO, errnum,
            "writing the command's %s to fd %d failed, so the command was killed (keep the "
            "descriptor open and read it until the exec completes)",
            w->what, w->user_fd);
        /* Not from inside the provider's read callback that is delivering this chunk. */
        s->refs++;
        if (sbx__context_post(s->ctx, cancel_task, s) < 0)
            s->refs--;
    }
    check_drained(s);
}

static void flow_update(sbx__exec_sink *s)
{
    size_t n = pending(s);
    if (!s->paused && n > SINK_HIGH) {
        s->paused = true;
        if (s->flow_cb && s->op)
            s->flow_cb(s->op, 1, s->flow_data);
    } else if (s->paused && n <= SINK_LOW) {
        s->paused = false;
        if (s->flow_cb && s->op)
            s->flow_cb(s->op, 0, s->flow_data);
    }
}

/* write(2) that turns a closed pipe into EPIPE without raising SIGPIPE in the process. */
static ssize_t write_nosig(int fd, const void *p, size_t n)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigset_t was_pending;
    sigpending(&was_pending);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t r = write(fd, p, n);
    int e = errno;
    if (r < 0 && e == EPIPE && !sigismember(&was_pending, SIGPIPE)) {
        /* Consume the SIGPIPE this write raised for this thread (blocked, so still pending). */
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return r;
}

static void pool_start(struct fdw *w);
static void poll_cb(uv_poll_t *h, int status, int events);

/* Writes what it can now (non-blocking modes). */
static void fdw_flush(struct fdw *w)
{
    while (w->q.len > w->head) {
        size_t n = w->q.len - w->head;
        ssize_t r = w->mode == FD_SOCK
                        ? send(w->fd, w->q.data + w->head, n, MSG_DONTWAIT | MSG_NOSIGNAL)
                        : write_nosig(w->fd, w->q.data + w->head, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!w->poll && !(w->poll = calloc(1, sizeof(*w->poll)))) {
                fdw_fail(w, ENOMEM);
                return;
            }
            /* uv_poll_init makes the fd non-blocking: a socket's description is the caller's too. */
            int flags = w->mode == FD_SOCK ? fcntl(w->fd, F_GETFL) : -1;
            int rc = w->poll->data ? 0 : uv_poll_init(w->s->loop, w->poll, w->fd);
            if (flags >= 0)
                fcntl(w->fd, F_SETFL, flags);
            if (rc < 0) {
                /* Not pollable: the worker pool writes it, blocking there, not here. */
                free(w->poll);
                w->poll = NULL;
                w->mode = FD_POOL;
                pool_start(w);
                return;
            }
            w->poll->data = w;
            if (uv_poll_start(w->poll, UV_WRITABLE, poll_cb) == 0)
                w->polling = true;
            else
                fdw_fail(w, EIO);
            return;
        }
        if (r < 0) {
            fdw_fail(w, errno);
            return;
        }
        w->head += (size_t)r;
    }
    w->q.len = w->head = 0;
    if (w->polling) {
        uv_poll_stop(w->poll);
        w->polling = false;
    }
}

static void poll_cb(uv_poll_t *h, int status, int events)
{
    (void)events;
    struct fdw *w = h->data;
    if (status < 0) {
        fdw_fail(w, EIO);
        return;
    }
    fdw_flush(w);
    flow_update(w->s);
    check_drained(w->s);
}

struct pool_write {
    struct fdw *w;
    char *buf;
    size_t len;
    int err;
};

static void pool_work(void *data)
{
    struct pool_write *pw = data;
    size_t off = 0;
    while (off < pw->len) {
        ssize_t r = write_nosig(pw->w->fd, pw->buf + off, pw->len - off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* A non-blocking description in pool mode: wait for room here, off the loop. */
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
            continue;
        }
        if (r <= 0) {
            pw->err = r < 0 ? errno : EIO;
            return;
        }
        off += (size_t)r;
    }
}

static void pool_after(void *data, bool cancelled)
{
    struct pool_write *pw = data;
    struct fdw *w = pw->w;
    sbx__exec_sink *s = w->s;
    w->inflight = 0;
    free(pw->buf);
    int err = cancelled ? ECANCELED : pw->err;
    free(pw);
    if (s->closed_fds && w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
    }
    if (err && !w->err)
        fdw_fail(w, err);
    else if (!w->err && !s->closed_fds)
        pool_start(w);
    flow_update(s);
    check_drained(s);
    sink_unref(s);
}

/* Hands the queued bytes to the worker pool when no write is in flight. */
static void pool_start(struct fdw *w)
{
    if (w->inflight || w->q.len == w->head || w->err)
        return;
    struct pool_write *pw = calloc(1, sizeof(*pw));
    if (!pw) {
        fdw_fail(w, ENOMEM);
        return;
    }
    pw->w = w;
    if (w->head) {
        memmove(w->q.data, w->q.data + w->head, w->q.len - w->head);
        w->q.len -= w->head;
        w->head = 0;
    }
    pw->buf = steal_pointer(&w->q.data);
    pw->len = w->q.len;
    w->q.len = w->q.cap = 0;
    w->inflight = pw->len;
    w->s->refs++;
    /* The context's own pool (core/pool.c), never libuv's process-wide one. */
    sbx_context *ctx = sbx__context_of_uv(w->s->loop);
    if (!ctx || sbx__context_submit(ctx, pool_work, pool_after, pw, NULL) < 0) {
        w->s->refs--;
        w->inflight = 0;
        free(pw->buf);
        free(pw);
        fdw_fail(w, EIO);
    }
}

static void fdw_write(struct fdw *w, const char *data, size_t len)
{
    if (w->err || w->fd < 0)
        return; /* failed: the command is being killed; nothing more goes there */
    if (w->head && w->head == w->q.len)
        w->q.len = w->head = 0;
    /* Keep the queue's memory to what waits: move the unwritten rest to the front. */
    if (w->head && w->head >= w->q.len / 2) {
        memmove(w->q.data, w->q.data + w->head, w->q.len - w->head);
        w->q.len -= w->head;
        w->head = 0;
    }
    if (sbx__buf_append(&w->q, data, len) < 0) {
        fdw_fail(w, ENOMEM);
        return;
    }
    if (w->mode == FD_POOL)
        pool_start(w);
    else if (!w->polling)
        fdw_flush(w);
}

/* Our own descriptor for the caller's `fd`, and how to write it. */
static int fdw_open(sbx__exec_sink *s, struct fdw *w, int fd, sbx_error **err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sbx__set_errno(err, SBX_EINVAL, errno,
                              "the output descriptor %d for the command's %s is not usable", fd,
                              w->what);
    w->s = s;
    w->user_fd = fd;
    w->fd = -1;
    if (S_ISSOCK(st.st_mode)) {
        w->mode = FD_SOCK;
        w->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
        /* A new open file description: O_NONBLOCK there leaves the caller's fd as it is. */
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        w->mode = FD_POLL;
        w->fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    }
    if (w->fd >= 0)
        return SBX_OK; /* the poll handle is made on the loop thread, when first needed */
    w->mode = FD_POOL;
    if (w->fd < 0)
        w->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (w->fd < 0)
        return sbx__set_errno(err, SBX_EINVAL, errno,
                              "the output descriptor %d for the command's %s is not usable", fd,
                              w->what);
    return SBX_OK;
}

int sbx__exec_sink_new(sbx_provider *p, const sbx_exec_opts *o, sbx__exec_sink **out,
                       sbx_error **err)
{
    *out = NULL;
    if (!o || (!o->output_cb && !o->has_out_fd[0] && !o->has_out_fd[1] && !o->drop_output))
        return SBX_OK;
    sbx__exec_sink *s = calloc(1, sizeof(*s));
    if (!s)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    s->ctx = p->ctx;
    s->loop = sbx__context_uv(p->ctx);
    s->refs = 1;
    s->cb = o->output_cb;
    s->user = o->output_user;
    s->drop_output = o->drop_output;
    s->provider_streams = (sbx__provider_caps(p) & SBX_CAP_EXEC_STREAM) != 0;
    s->map[0] = s->map[1] = -1;
    for (int i = 0; i < 2; i++) {
        if (!o->has_out_fd[i])
            continue;
        if (i == 1 && o->has_out_fd[0] && o->out_fd[0] == o->out_fd[1]) {
            s->map[1] = s->map[0];
            s->fdw[s->map[0]].what = "stdout and stderr";
            continue;
        }
        struct fdw *w = &s->fdw[s->nfdw];
        w->what = i ? "stderr" : "stdout";
        int rc = fdw_open(s, w, o->out_fd[i], err);
        if (rc < 0) {
            close_fds(s);
            sink_unref(s);
            return rc;
        }
        s->map[i] = s->nfdw++;
    }
    *out = s;
    return SBX_OK;
}

/*
 * Runs on the loop thread, except for a sink that failed to be made (no
 * handle was started then). Poll handles close asynchronously and hold a
 * reference, so the last unref happens after they are gone.
 */
static void sink_unref(sbx__exec_sink *s)
{
    if (--s->refs > 0)
        return;
    for (int i = 0; i < s->nfdw; i++)
        sbx__buf_free(&s->fdw[i].q);
    sbx_error_free(s->fail_err);
    free(s);
}

void sbx__exec_sink_free(sbx__exec_sink *s)
{
    if (!s)
        return;
    close_fds(s);
    sink_unref(s);
}

void sbx__exec_sink_attach(sbx__exec_sink *s, sbx_op *op)
{
    s->op = op;
    s->paused = false;
}

void sbx__exec_sink_set_flow(sbx__exec_sink *s, sbx_op_flow_cb cb, void *data)
{
    s->flow_cb = cb;
    s->flow_data = data;
    if (cb && s->paused && s->op)
        cb(s->op, 1, data);
}

void sbx__exec_sink_detach(sbx__exec_sink *s, bool inner)
{
    if (!inner)
        s->op = NULL;
    s->flow_cb = NULL;
    s->flow_data = NULL;
}

sbx_op *sbx__exec_sink_op(sbx__exec_sink *s) { return s->op; }
bool sbx__exec_sink_streams(const sbx__exec_sink *s) { return s->provider_streams; }

void sbx__exec_sink_chunk(sbx__exec_sink *s, int stream, const char *data, size_t len)
{
    if (!len || s->aborted)
        return;
    if (s->cb)
        s->cb(stream, data, len, s->user);
    int i = s->map[stream - 1];
    if (i >= 0) {
        fdw_write(&s->fdw[i], data, len);
        flow_update(s);
    }
}

static void check_drained(sbx__exec_sink *s)
{
    if (!s->drained_cb || pending(s))
        return;
    void (*cb)(void *) = s->drained_cb;
    s->drained_cb = NULL;
    close_fds(s);
    cb(s->drained_data);
}

static void deliver_all(sbx__exec_sink *s, int stream, const char *p, size_t len)
{
    for (size_t off = 0; off < len; off += FALLBACK_CHUNK)
        sbx__exec_sink_chunk(s, stream, p + off, len - off < FALLBACK_CHUNK ? len - off : FALLBACK_CHUNK);
}

static void replace_empty(char **p, size_t *len)
{
    char *e = calloc(1, 1);
    if (!e)
        return; /* keeps the bytes rather than losing the result */
    free(*p);
    *p = e;
    *len = 0;
}

int sbx__exec_sink_finish(sbx__exec_sink *s, int code, sbx_exec_result *r, void (*done)(void *),
                          void *data)
{
    if (code == SBX_OK && r) {
        /* Providers without streaming: the whole output, now, before the future completes. */
        if (!s->provider_streams && !r->error_type) {
            if (r->out)
                deliver_all(s, SBX_STREAM_STDOUT, r->out, r->out_len);
            if (r->err)
                deliver_all(s, SBX_STREAM_STDERR, r->err, r->err_len);
        }
        if (s->drop_output) {
            replace_empty(&r->out, &r->out_len);
            if (!r->error_type)
                replace_empty(&r->err, &r->err_len);
        }
    }
    if (pending(s)) {
        s->drained_cb = done;
        s->drained_data = data;
        return 0;
    }
    close_fds(s);
    return 1;
}

void sbx__exec_sink_settle(sbx__exec_sink *s, int *code, sbx_error **err, void **value)
{
    if (!s->failed)
        return;
    sbx_error_free(*err);
    if (*value)
        sbx_exec_result_free(*value);
    *value = NULL;
    *code = SBX_EIO;
    *err = sbx_error_copy(s->fail_err);
}

void sbx__exec_sink_abort(sbx__exec_sink *s)
{
    s->aborted = true;
    s->drained_cb = NULL;
    for (int i = 0; i < s->nfdw; i++) {
        struct fdw *w = &s->fdw[i];
        sbx__buf_free(&w->q);
        w->head = 0;
        if (w->polling) {
            uv_poll_stop(w->poll);
            w->polling = false;
        }
    }
    close_fds(s);
}
