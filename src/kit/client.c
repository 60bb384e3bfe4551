/*
 * The host side of the agent protocol, on the sbx libuv loop.
 *
 * A connection owns one stream (uv_pipe_t over a unix socket or any duplex
 * fd) and a table of open channels, one per op. Lifetimes are counted: the
 * connection stays allocated while its owner, its handles or any channel
 * hold it; a channel stays while it is open or has a write / file request in
 * flight (the op itself may have completed long before).
 *
 * Flow control. Uploads read the local file one chunk at a time through the
 * libuv thread pool and stop reading while a few MiB are waiting in the
 * socket's write queue. Downloads write chunks through the thread pool and
 * stop reading the socket while too much waits for the disk, which in turn
 * makes the agent stop reading the box file. Nothing holds a whole file in
 * memory, and no file I/O runs on the loop thread.
 */
#include "core/internal.h"
#include "kit/client.h"
#include "proto/proto.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <uv.h>

#define UPLOAD_INFLIGHT (4u << 20)
/* Streamed stdin: at most this much read from the caller's fd and not yet in the socket. */
#define STDIN_INFLIGHT (1u << 20)
/* ... and, with a version 2 agent, at most this much sent that the command has not taken. */
#define STDIN_WINDOW (4u << 20)
/*
 * Deadlines of our own: every byte the agent sends, and every silence, is
 * the box's choice. An exec with a timeout is given up EXEC_GRACE_MS after
 * it (the agent kills the group at the timeout and answers at once; past
 * the grace it is not going to). A cancelled exec completes CANCEL_GRACE_MS
 * after the CANCEL even when no EXIT comes, so a signal always ends a
 * waiting caller. A transfer or ping with no progress for the idle timeout
 * fails.
 */
#define EXEC_GRACE_MS 5000u
#define CANCEL_GRACE_MS 2000u
#define DISK_HIGH (16u << 20)
#define DISK_LOW (4u << 20)
#define BUCKETS 256

enum conn_state { ST_CONNECTING, ST_HELLO, ST_READY, ST_DEAD };
enum chan_kind { K_EXEC, K_PUT, K_GET, K_PING };

struct hchan {
    uint32_t id;
    enum chan_kind kind;
    struct hchan *next; /* bucket chain */
    sbx_agent_conn *c;
    sbx_op *op;
    bool done; /* op completed and channel out of the table */
    int refs;

    uv_timer_t *timer;      /* the channel's deadline (closed when the channel finishes) */
    uint64_t last_progress; /* uv_now() of the last frame or local I/O for this channel */
    uint64_t idle_ms;       /* transfers and pings: fail after this much silence */

    /* exec */
    sbx_buf out, err;
    size_t limit;
    bool keep;       /* the result carries the output (sbx_exec_opts_keep_output) */
    bool out_paused; /* the core asked us to stop reading: its fd reader is behind */
    uint64_t out_unacked; /* version 5: output received and not yet acknowledged */
    bool truncated;
    bool cancelled;
    double timeout_s;
    char *desc; /* the command, for messages */
    /* stdin from a descriptor (sbx_exec_opts_set_stdin_fd); uses inflight, read_pending */
    int in_fd;          /* borrowed, never closed; -1: none */
    uv_poll_t *in_poll; /* pipes, FIFOs, sockets, ttys: read when readable */
    int in_flags;       /* its status flags before uv_poll_init made it non-blocking */
    bool in_eof;
    uint64_t in_sent, in_acked; /* STDIN bytes sent / acknowledged by the agent (v2) */
    int64_t in_off;             /* files: the offset of the next read; -1: a stream */

    /* files */
    char *local, *remote;
    uv_file fd;
    int64_t offset;
    size_t inflight; /* upload: bytes handed to the socket, not yet written */
    bool read_pending, eof_sent;
    bool into_dir; /* upload: already redirected into the directory the target named */
    /*
     * An exec that ended while a thread-pool read of its stdin descriptor
     * was still running: its completion waits for that read to return, so
     * the caller, told the exec is done, may close the descriptor it lent.
     */
    bool fin_deferred;
    int fin_code;
    sbx_error *fin_err;
    void *fin_value;
    char *tmp_path; /* download: the temp file until renamed (tmp_anon: its directory) */
    char *tmp_name; /* download: its name in dirfd (not tmp_anon) */
    int dirfd;      /* download: the target's directory, walked once (sbx__mkdir_trusted) */
    bool tmp_anon;  /* download: the temp file is an O_TMPFILE, linked in at the end */
    uint32_t mode;
    int writes_pending;
    bool got_status;
    int status_code; /* sbx code from the agent's STATUS (0 ok) */
    char *status_msg;
    int werr;           /* a local write error (errno) */
    uint64_t size;      /* download: the size FILE_INFO announced */
    uint64_t received;  /* download: DATA bytes so far */
    uint64_t max_bytes; /* download: the cap */
    bool lied;          /* download: the agent broke its own announcement */
    bool opening;       /* download: the temp file is being made on the worker pool */
    bool finishing;     /* download: truncate, chmod and rename running on the pool */
    struct fsreq *held, *held_tail; /* download: writes waiting for the temp file */
};

struct sbx_agent_conn {
    uv_loop_t *loop;
    /*
     * uv_now() of the last progress of any transfer on this connection: a
     * transfer waiting its turn behind others the agent is serving is not
     * stalled (chan_timer_cb), only one on a connection where nothing moves.
     */
    uint64_t xfer_progress;
    uv_pipe_t *pipe;
    uv_timer_t *timer;
    char *path;
    uint64_t deadline; /* uv_now() ms for connect + hello */
    unsigned retry_ms;
    enum conn_state state;
    sbx_agent_connect_cb cb;
    void *cb_data;
    bool owned; /* the owner holds it (after a successful connect) */
    bool one_attempt; /* sbx__agent_reconnect: a refused connect fails at once */
    pid_t peer_pid;   /* > 0: the only process allowed to be listening (SO_PEERCRED) */
    size_t n_open;    /* channels whose op has not completed */
    int local_errno;  /* connect failed on our side (no descriptor left): kept in the error */
    bool closing;
    int refs;
    sbx_proto_reader rd;
    uint32_t next_id;
    struct hchan *table[BUCKETS];
    bool reading;
    size_t disk_pending;
    int out_paused; /* execs whose output reader is behind: the socket is not read */
    int max_payload;
    int version; /* negotiated in the hello */
    sbx_agent_limits limits;
};

static void conn_fail(sbx_agent_conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_reading(sbx_agent_conn *c, bool on);

/* --- lifetimes ----------------------------------------------------------- */

static void conn_unref(sbx_agent_conn *c)
{
    if (--c->refs > 0)
        return;
    sbx__proto_reader_free(&c->rd);
    free(c->path);
    free(c);
}

/* A transfer's local file, closed (and its temp file removed) on the worker pool. */
struct file_drop {
    int fd;
    int dirfd; /* the temp's directory (closed), -1 */
    char *tmp; /* its name in dirfd, to remove */
};

static void file_drop_work(void *data)
{
    struct file_drop *d = data;
    if (d->fd >= 0)
        close(d->fd);
    if (d->tmp && d->dirfd >= 0)
        unlinkat(d->dirfd, d->tmp, 0);
    if (d->dirfd >= 0)
        close(d->dirfd);
    free(d->tmp);
    free(d);
}

static void chan_unref(struct hchan *ch)
{
    if (--ch->refs > 0)
        return;
    if (ch->fd >= 0 || ch->tmp_path || ch->dirfd >= 0) {
        /*
         * Every request on this fd has finished (each holds a ref). Closing a
         * written file and unlinking can wait on the disk: on the pool.
         */
        struct file_drop *d = malloc(sizeof(*d));
        if (d) {
            d->fd = ch->fd;
            d->dirfd = ch->dirfd;
            /* An O_TMPFILE goes with its descriptor: nothing to unlink. */
            d->tmp = ch->tmp_anon ? NULL : steal_pointer(&ch->tmp_name);
            if (sbx__context_submit(sbx__context_of_uv(ch->c->loop), file_drop_work, NULL, d,
                                    NULL) < 0)
                file_drop_work(d);
        } else {
            if (ch->fd >= 0)
                close(ch->fd);
            if (ch->tmp_name && !ch->tmp_anon && ch->dirfd >= 0)
                unlinkat(ch->dirfd, ch->tmp_name, 0);
            if (ch->dirfd >= 0)
                close(ch->dirfd);
        }
        ch->fd = -1;
        ch->dirfd = -1;
    }
    sbx__buf_free(&ch->out);
    sbx__buf_free(&ch->err);
    free(ch->desc);
    free(ch->local);
    free(ch->remote);
    free(ch->tmp_path);
    free(ch->tmp_name);
    free(ch->status_msg);
    sbx_agent_conn *c = ch->c;
    free(ch);
    conn_unref(c);
}

static struct hchan *chan_new(sbx_agent_conn *c, sbx_op *op, enum chan_kind kind)
{
    struct hchan *ch = calloc(1, sizeof(*ch));
    if (!ch)
        return NULL;
    /* Ids are never reused on a connection, so a late frame cannot hit a new op. */
    ch->id = ++c->next_id;
    if (c->next_id == UINT32_MAX)
        c->next_id = 0;
    ch->kind = kind;
    ch->c = c;
    ch->op = op;
    ch->fd = -1;
    ch->dirfd = -1;
    ch->in_fd = -1;
    ch->refs = 1;
    c->refs++;
    struct hchan **b = &c->table[ch->id % BUCKETS];
    ch->next = *b;
    *b = ch;
    c->n_open++;
    return ch;
}

static struct hchan *chan_find(sbx_agent_conn *c, uint32_t id)
{
    for (struct hchan *ch = c->table[id % BUCKETS]; ch; ch = ch->next)
        if (ch->id == id)
            return ch;
    return NULL;
}

static void chan_unlink(struct hchan *ch)
{
    for (struct hchan **pp = &ch->c->table[ch->id % BUCKETS]; *pp; pp = &(*pp)->next) {
        if (*pp == ch) {
            *pp = ch->next;
            ch->next = NULL;
            ch->c->n_open--;
            return;
        }
    }
}

static void chan_handle_closed(uv_handle_t *h)
{
    struct hchan *ch = h->data;
    free(h);
    chan_unref(ch);
}

/* Stops reading the exec's stdin descriptor (EOF, error, or the exec ended). */
static void stdin_stop(struct hchan *ch)
{
    ch->in_eof = true;
    if (ch->in_poll) {
        uv_close((uv_handle_t *)ch->in_poll, chan_handle_closed);
        ch->in_poll = NULL;
        /* Give the caller its descriptor back as it was (uv_poll_init made it non-blocking). */
        fcntl(ch->in_fd, F_SETFL, ch->in_flags);
    }
}

/* Completes the op (once), takes the channel out of the table and drops its ref. */
static void chan_finish(struct hchan *ch, int code, sbx_error *err, void *value)
{
    if (ch->done) {
        sbx_error_free(err);
        return;
    }
    ch->done = true;
    stdin_stop(ch);
    if (ch->out_paused && ch->c->version < 5) {
        ch->out_paused = false;
        if (--ch->c->out_paused == 0 && ch->c->disk_pending < DISK_LOW)
            set_reading(ch->c, true);
    }
    if (ch->timer) {
        uv_close((uv_handle_t *)ch->timer, chan_handle_closed);
        ch->timer = NULL;
    }
    if (ch->op) {
        sbx_op_on_cancel(ch->op, NULL, NULL);
        if (ch->kind == K_EXEC)
            sbx_op_exec_on_flow(ch->op, NULL, NULL); /* ch may go before the core hears */
    }
    if (!ch->op) {
        /* Its op went on on another channel (an upload redirected into a directory). */
        sbx_error_free(err);
    } else if (ch->read_pending && ch->in_fd >= 0) {
        /* stdin_read_cb completes it; the read's request holds a reference to ch. */
        ch->fin_deferred = true;
        ch->fin_code = code;
        ch->fin_err = err;
        ch->fin_value = value;
    } else {
        sbx_op_complete(ch->op, code, err, value);
        ch->op = NULL;
    }
    chan_unlink(ch);
    chan_unref(ch);
}

/* --- deadlines ----------------------------------------------------------- */

static void chan_timer_cb(uv_timer_t *t);

/* (Re)arms the channel's deadline `ms` from now. false when out of memory. */
static bool chan_arm(struct hchan *ch, uint64_t ms)
{
    if (ch->done)
        return true;
    if (!ch->timer) {
        uv_timer_t *t = calloc(1, sizeof(*t));
        if (!t)
            return false;
        uv_timer_init(ch->c->loop, t);
        t->data = ch;
        ch->refs++; /* dropped in chan_handle_closed */
        ch->timer = t;
    }
    uv_timer_start(ch->timer, chan_timer_cb, ms, 0);
    return true;
}

static void chan_progress(struct hchan *ch)
{
    ch->last_progress = uv_now(ch->c->loop);
    if (ch->kind == K_PUT || ch->kind == K_GET)
        ch->c->xfer_progress = ch->last_progress;
}

/* Transfers and pings: fail after `idle_ms` without progress. */
static bool chan_watch_idle(struct hchan *ch)
{
    double s =
        ch->c->limits.idle_timeout_s > 0 ? ch->c->limits.idle_timeout_s : SBX_AGENT_DEFAULT_IDLE_S;
    ch->idle_ms = (uint64_t)(s * 1000.0);
    ch->last_progress = uv_now(ch->c->loop); /* a start, not progress of the connection */
    return chan_arm(ch, ch->idle_ms);
}

/* --- writing ------------------------------------------------------------- */

struct wreq {
    uv_write_t req;
    uint8_t *buf;
    struct hchan *ch; /* holds a ref when set */
    size_t account;   /* bytes counted in ch->inflight */
};

static void upload_pump(struct hchan *ch);

static void write_cb(uv_write_t *req, int status)
{
    struct wreq *w = req->data;
    sbx_agent_conn *c = w->req.handle->data;
    free(w->buf);
    if (status < 0 && status != UV_ECANCELED && c)
        conn_fail(c, SBX_EIO, "writing to the sandbox agent failed: %s", uv_strerror(status));
    if (w->ch) {
        w->ch->inflight -= w->account;
        if (status == 0 && w->ch->c)
            chan_progress(w->ch);
        if (!w->ch->done)
            upload_pump(w->ch);
        chan_unref(w->ch);
    }
    free(w);
}

/* Sends a finished frame (takes `buf`). Returns 0, or -1 when the stream is gone. */
static int send_frame(sbx_agent_conn *c, uint8_t *buf, size_t len, struct hchan *ch, size_t account)
{
    if (c->state == ST_DEAD || !c->pipe) {
        free(buf);
        return -1;
    }
    struct wreq *w = calloc(1, sizeof(*w));
    if (!w) {
        free(buf);
        conn_fail(c, SBX_ENOMEM, "out of memory sending to the sandbox agent");
        return -1;
    }
    w->buf = buf;
    w->req.data = w;
    uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
    if (ch) {
        w->ch = ch;
        w->account = account;
        ch->refs++;
        ch->inflight += account;
    }
    int rc = uv_write(&w->req, (uv_stream_t *)c->pipe, &b, 1, write_cb);
    if (rc < 0) {
        if (ch) {
            ch->inflight -= account;
            ch->refs--;
        }
        free(buf);
        free(w);
        conn_fail(c, SBX_EIO, "writing to the sandbox agent failed: %s", uv_strerror(rc));
        return -1;
    }
    return 0;
}

static int send_pbuf(sbx_agent_conn *c, sbx_pbuf *b, uint8_t type, uint32_t channel)
{
    if (sbx__pbuf_finish(b, type, channel) < 0) {
        sbx__pbuf_free(b);
        return -2;
    }
    uint8_t *data = b->data;
    size_t len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return send_frame(c, data, len, NULL, 0);
}

static void send_empty(sbx_agent_conn *c, uint8_t type, uint32_t channel)
{
    uint8_t *h = malloc(SBX_PROTO_HEADER);
    if (!h)
        return;
    sbx__proto_put_header(h, type, channel, 0);
    send_frame(c, h, SBX_PROTO_HEADER, NULL, 0);
}

/* --- failures ------------------------------------------------------------ */

static sbx_exec_result *lost_result(struct hchan *ch, const char *why)
{
    sbx_exec_result *r = NULL;
    char *msg = sbx__printf("the sandbox agent went away while running %s: %s", ch->desc, why);
    sbx_exec_result_new_take(NULL, 0, msg, msg ? strlen(msg) : 0, 125, "sandbox", &r);
    return r;
}

/* Fails every open channel the way a lost stream does. */
static void fail_all(sbx_agent_conn *c, int code, const char *why)
{
    for (int i = 0; i < BUCKETS; i++) {
        while (c->table[i]) {
            struct hchan *ch = c->table[i];
            if (ch->kind == K_EXEC && !ch->cancelled) {
                sbx_exec_result *r = lost_result(ch, why);
                if (r)
                    chan_finish(ch, SBX_OK, NULL, r);
                else
                    chan_finish(ch, SBX_ENOMEM, NULL, NULL);
            } else if (ch->kind == K_EXEC) {
                chan_finish(ch, SBX_ECANCELED, NULL, NULL);
            } else {
                const char *what = ch->kind == K_PUT   ? "uploading"
                                   : ch->kind == K_GET ? "downloading"
                                                       : "pinging";
                const char *path = ch->remote ? ch->remote : ""; /* none for a ping */
                chan_finish(ch, code,
                            sbx_error_new(code, "%s '%s': the sandbox agent went away: %s", what,
                                          path, why),
                            NULL);
            }
        }
    }
}

static void handle_closed(uv_handle_t *h)
{
    sbx_agent_conn *c = h->data;
    free(h);
    if (c)
        conn_unref(c);
}

static void conn_fail(sbx_agent_conn *c, int code, const char *fmt, ...)
{
    if (c->state == ST_DEAD)
        return;
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    enum conn_state was = c->state;
    c->state = ST_DEAD;
    c->refs++; /* callbacks below may drop the last other reference */
    if (c->pipe) {
        uv_close((uv_handle_t *)c->pipe, handle_closed);
        c->pipe = NULL;
    }
    if (c->timer)
        uv_timer_stop(c->timer);
    fail_all(c, code, why);
    if (was == ST_CONNECTING || was == ST_HELLO) {
        /* The owner never got the connection: report and drop it here. */
        sbx_error *e = c->local_errno ? sbx_error_new_errno(code, c->local_errno, "%s", why)
                                      : sbx_error_new(code, "%s", why);
        sbx_agent_connect_cb cb = c->cb;
        c->cb = NULL;
        if (c->timer) {
            uv_close((uv_handle_t *)c->timer, handle_closed);
            c->timer = NULL;
        }
        if (cb)
            cb(NULL, code, e, c->cb_data);
        else
            sbx_error_free(e);
        c->refs--; /* the owner's (we still hold our own, dropped below) */
    }
    conn_unref(c);
}

/* --- exec ---------------------------------------------------------------- */

/*
 * The reference's timeout result (rc 125, error_type "timeout", its message
 * in stderr), with what the command wrote before it was killed: stdout is
 * the partial stdout ("" when none), stderr the partial stderr, a newline
 * when it did not end with one, then the message. issue 9 asked for the
 * partial output; the reference gave stdout None.
 */
static sbx_exec_result *timeout_result(struct hchan *ch)
{
    sbx_buf err = ch->err;
    ch->err = (sbx_buf){0};
    char *out = steal_pointer(&ch->out.data);
    sbx_exec_result *r = NULL;
    if (sbx_exec_result_new_timeout(out, ch->out.len, err.data, err.len, ch->timeout_s, ch->desc,
                                    &r) < 0)
        return NULL;
    if (ch->truncated)
        sbx_exec_result_set_truncated(r, 1);
    return r;
}

static void chan_timer_cb(uv_timer_t *t)
{
    struct hchan *ch = t->data;
    sbx_agent_conn *c = ch->c;
    if (ch->done)
        return;
    if (ch->kind == K_EXEC) {
        if (ch->cancelled) {
            /* The agent did not confirm the kill in time: the caller is not kept waiting. */
            chan_finish(ch, SBX_ECANCELED, NULL, NULL);
            return;
        }
        /*
         * The timeout passed and the agent, which enforces it, said nothing:
         * report the timeout ourselves, and ask once more for the kill. A late
         * EXIT for this channel is dropped (it is no longer in the table).
         */
        send_empty(c, SBX_MSG_CANCEL, ch->id);
        sbx_exec_result *r = timeout_result(ch);
        chan_finish(ch, r ? SBX_OK : SBX_ENOMEM, NULL, r);
        return;
    }
    uint64_t last = ch->last_progress;
    /* A transfer behind others on a connection that moves waits its turn (sizes are bounded). */
    if ((ch->kind == K_PUT || ch->kind == K_GET) && c->xfer_progress > last)
        last = c->xfer_progress;
    uint64_t idle = uv_now(c->loop) - last;
    if (idle < ch->idle_ms) {
        uv_timer_start(t, chan_timer_cb, ch->idle_ms - idle, 0);
        return;
    }
    send_empty(c, SBX_MSG_CANCEL, ch->id);
    const char *what = ch->kind == K_PUT   ? "uploading"
                       : ch->kind == K_GET ? "downloading"
                                           : "pinging";
    char secs[32];
    sbx__fmt_g((double)ch->idle_ms / 1000.0, secs, sizeof(secs));
    chan_finish(ch, SBX_ETIMEDOUT,
                sbx_error_new(SBX_ETIMEDOUT,
                              "%s '%s': the sandbox agent made no progress for %ss (is the box "
                              "hung?); the transfer was abandoned",
                              what, ch->remote ? ch->remote : "agent", secs),
                NULL);
}

static void exec_done(struct hchan *ch, const sbx_msg_exit *m)
{
    if (ch->cancelled || (m->flags & SBX_EXITF_CANCELLED)) {
        chan_finish(ch, SBX_ECANCELED, NULL, NULL);
        return;
    }
    char *out = steal_pointer(&ch->out.data);
    size_t out_len = ch->out.len;
    char *err = steal_pointer(&ch->err.data);
    size_t err_len = ch->err.len;
    if (!out)
        out = strdup("");
    if (!err)
        err = strdup("");
    int rc = 0;
    const char *type = NULL;
    if (m->kind == SBX_EXIT_TIMEOUT) {
        ch->out.data = out; /* timeout_result takes them back */
        ch->err.data = err;
        sbx_exec_result *r = timeout_result(ch);
        chan_finish(ch, r ? SBX_OK : SBX_ENOMEM, NULL, r);
        return;
    } else if (m->kind == SBX_EXIT_FAILED) {
        free(err);
        err = sbx__printf("%s", m->message);
        err_len = err ? strlen(err) : 0;
        rc = 125;
        type = "sandbox";
    } else if (m->flags & SBX_EXITF_OOM) {
        sbx_buf b = {err, err_len, err_len + 1};
        if (err_len && err[err_len - 1] != '\n')
            sbx__buf_append(&b, "\n", 1);
        sbx__buf_printf(&b, "sbx: the command was %s; raise the box's memory limit",
                        m->message[0] ? m->message : "killed by the out-of-memory killer");
        err = b.data;
        err_len = b.len;
        /* The command's status as docker reports an OOM kill (137), plus sbx's "oom". */
        rc = m->kind == SBX_EXIT_SIGNAL ? 128 + m->code : 125;
        type = "oom";
    } else if (m->kind == SBX_EXIT_SIGNAL) {
        /*
         * 128 + the signal, as a shell and every container runtime report a
         * command killed by a signal (the reference's docker provider: `kill
         * -9 $$` gives 137). The agent sends the signal itself; the mapping is
         * the host's, so every agent-backed provider says the same.
         */
        rc = 128 + m->code;
    } else {
        rc = m->code;
    }
    if (!err || !out) {
        free(out);
        free(err);
        chan_finish(ch, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx_exec_result *r = NULL;
    if (sbx_exec_result_new_take(out, out_len, err, err_len, rc, type, &r) < 0) {
        chan_finish(ch, SBX_ENOMEM, NULL, NULL);
        return;
    }
    if (ch->truncated || (m->flags & (SBX_EXITF_STDOUT_TRUNCATED | SBX_EXITF_STDERR_TRUNCATED)))
        sbx_exec_result_set_truncated(r, 1);
    chan_finish(ch, SBX_OK, NULL, r);
}

/*
 * Version 5: tells the agent the caller took what came (`all`: everything
 * held, on a resume; else once a quarter of the window came, so a caller
 * keeping up never sees the agent wait).
 */
static void output_ack(struct hchan *ch, bool all)
{
    if (ch->c->version < 5 || ch->out_paused || !ch->out_unacked ||
        (!all && ch->out_unacked < SBX_PROTO_OUTPUT_WINDOW / 4))
        return;
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_u64_encode(&b, ch->out_unacked);
    ch->out_unacked = 0;
    send_pbuf(ch->c, &b, SBX_MSG_OUTPUT_ACK, ch->id);
}

static void exec_output(struct hchan *ch, sbx_buf *b, const sbx_frame *f)
{
    if (ch->op && f->len)
        sbx_op_exec_output(ch->op, f->type == SBX_MSG_STDOUT ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR,
                           f->payload, f->len);
    ch->out_unacked += f->len;
    output_ack(ch, false);
    if (!ch->keep)
        return;
    size_t keep = f->len;
    /* The agent caps output too; this guards against one that does not. */
    if (ch->limit && b->len + keep > ch->limit) {
        keep = ch->limit > b->len ? ch->limit - b->len : 0;
        ch->truncated = true;
    }
    if (keep && sbx__buf_append(b, f->payload, keep) < 0)
        ch->truncated = true;
}

/*
 * The core's fd reader fell behind (or caught up). Version 5: the exec's
 * acknowledgements stop (resume), so the agent stops reading this command's
 * pipes once a window is in flight; the connection goes on for the box's
 * other operations. Before: stop (resume) reading the whole connection,
 * which makes the agent stop reading every command's pipes. Either way the
 * command blocks: nothing is dropped, memory stays bounded.
 */
static void exec_flow_cb(sbx_op *op, int pause, void *data)
{
    (void)op;
    struct hchan *ch = data;
    sbx_agent_conn *c = ch->c;
    if (ch->done || ch->out_paused == (pause != 0))
        return;
    ch->out_paused = pause != 0;
    if (c->version >= 5) {
        output_ack(ch, true);
        return;
    }
    if (pause) {
        c->out_paused++;
        set_reading(c, false);
    } else if (--c->out_paused == 0 && c->disk_pending < DISK_LOW) {
        set_reading(c, true);
    }
}

static void exec_cancel_cb(sbx_op *op, void *data)
{
    (void)op;
    struct hchan *ch = data;
    if (ch->done || ch->cancelled)
        return;
    ch->cancelled = true;
    /*
     * The EXIT that follows (after the agent killed the group) completes the
     * op; an agent that never sends it does not hold the caller past the grace.
     */
    send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
    chan_arm(ch, CANCEL_GRACE_MS);
}

static char *describe(const char *command, const char *const *argv)
{
    if (!argv)
        return sbx__repr(command ? command : "");
    sbx_buf b = {0};
    sbx__buf_append(&b, "[", 1);
    for (size_t i = 0; argv[i]; i++) {
        char *q = sbx__repr(argv[i]);
        sbx__buf_printf(&b, "%s%s", i ? ", " : "", q ? q : "''");
        free(q);
    }
    sbx__buf_append(&b, "]", 1);
    return b.data;
}

static void complete_dead_exec(sbx_op *op, const char *desc)
{
    sbx_exec_result *r = NULL;
    char *msg =
        sbx__printf("the sandbox agent went away before running %s: the connection is closed",
                    desc ? desc : "the command");
    if (sbx_exec_result_new_take(NULL, 0, msg, msg ? strlen(msg) : 0, 125, "sandbox", &r) < 0)
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
    else
        sbx_op_complete(op, SBX_OK, NULL, r);
}

void sbx__agent_exec_unreachable(sbx_op *op, const char *why)
{
    sbx_exec_result *r = NULL;
    if (sbx_exec_result_new("", 0, why ? why : "", why ? strlen(why) : 0, 125, "sandbox", &r) < 0)
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
    else
        sbx_op_complete(op, SBX_OK, NULL, r);
}

static void stdin_start(struct hchan *ch, int fd);

void sbx__agent_exec(sbx_agent_conn *c, sbx_op *op, const char *command, const char *const *argv,
                     const sbx_exec_opts *opts, const char *const *base_env)
{
    _cleanup_free_ char *desc = describe(command, argv);
    if (c->state != ST_READY) {
        complete_dead_exec(op, desc);
        return;
    }
    /* The call's env as "K=V" strings, applied after base_env (so it wins). */
    size_t n_env = sbx_exec_opts_env_count(opts);
    char **env = calloc(n_env + 1, sizeof(char *));
    if (!env) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    for (size_t i = 0; i < n_env; i++) {
        const char *k, *v;
        sbx_exec_opts_env_at(opts, i, &k, &v);
        env[i] = sbx__printf("%s=%s", k, v ? v : "");
    }
    struct hchan *ch = chan_new(c, op, K_EXEC);
    if (!ch) {
        sbx_strv_free(env);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    ch->desc = steal_pointer(&desc);
    ch->timeout_s = sbx_exec_opts_timeout(opts);
    ch->limit = sbx_exec_opts_output_limit(opts);
    ch->keep = sbx_exec_opts_keep_output(opts) != 0;
    if (sbx_op_exec_streaming(op))
        sbx_op_exec_on_flow(op, exec_flow_cb, ch);
    if (!ch->limit)
        ch->limit = SBX_DEFAULT_OUTPUT_LIMIT;
    size_t stdin_len = 0;
    const char *stdin_data = sbx_exec_opts_stdin(opts, &stdin_len);
    int stdin_fd = sbx_exec_opts_stdin_fd(opts);
    /* The caller's argv, run without a shell (sbx_exec_opts_set_argv). */
    if (!argv && opts && opts->argv)
        argv = (const char *const *)opts->argv;
    /* A transfer built-in of the agent (src/core/transfer.c) runs in place of a command. */
    bool builtin = opts && opts->builtin_argv;
    if (builtin)
        argv = (const char *const *)opts->builtin_argv;
    uint32_t flags = (builtin ? SBX_EXEC_BUILTIN : argv ? 0 : SBX_EXEC_SHELL) |
                     (stdin_data || stdin_fd >= 0 ? SBX_EXEC_STDIN : 0);
    int64_t timeout_ms = ch->timeout_s < 0 ? -1 : (int64_t)(ch->timeout_s * 1000.0 + 0.5);
    if (timeout_ms >= 0 && !chan_arm(ch, (uint64_t)timeout_ms + EXEC_GRACE_MS)) {
        sbx_strv_free(env);
        chan_finish(ch, SBX_ENOMEM, NULL, NULL);
        return;
    }
    const char *shell_argv[] = {command ? command : "", NULL};
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_exec_encode(&b, flags, timeout_ms, ch->limit, sbx_exec_opts_cwd(opts),
                         sbx_exec_opts_user(opts), argv ? argv : shell_argv, base_env,
                         (const char *const *)env);
    sbx_strv_free(env);
    int rc = send_pbuf(c, &b, SBX_MSG_EXEC, ch->id);
    if (rc == -2) {
        chan_finish(ch, SBX_EINVAL,
                    sbx_error_new(SBX_EINVAL,
                                  "the command and its environment are too large for one request "
                                  "(max %u bytes); pass large data through stdin or a file",
                                  SBX_PROTO_MAX_PAYLOAD),
                    NULL);
        return;
    }
    if (rc < 0)
        return; /* the stream died: conn_fail already completed the op */
    for (size_t off = 0; stdin_data && off < stdin_len;) {
        size_t n = stdin_len - off < SBX_PROTO_CHUNK ? stdin_len - off : SBX_PROTO_CHUNK;
        uint8_t *f = malloc(SBX_PROTO_HEADER + n);
        if (!f) {
            chan_finish(ch, SBX_ENOMEM, NULL, NULL);
            send_empty(c, SBX_MSG_CANCEL, ch->id);
            return;
        }
        sbx__proto_put_header(f, SBX_MSG_STDIN, ch->id, (uint32_t)n);
        memcpy(f + SBX_PROTO_HEADER, stdin_data + off, n);
        if (send_frame(c, f, SBX_PROTO_HEADER + n, NULL, 0) < 0)
            return;
        ch->in_sent += n; /* acknowledged too (v2), though nothing waits for it */
        off += n;
    }
    if (stdin_data)
        send_empty(c, SBX_MSG_STDIN, ch->id);
    if (stdin_fd >= 0 && !ch->done)
        stdin_start(ch, stdin_fd);
    if (!ch->done)
        sbx_op_on_cancel(op, exec_cancel_cb, ch);
}

/* --- errors from the agent's STATUS -------------------------------------- */

static int code_for_agent_errno(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return SBX_ENOENT;
    case EACCES:
    case EPERM:
    case EXDEV:
    case ELOOP: /* RESOLVE_NO_MAGICLINKS, or a link chain too long to be honest */
    case EROFS:
        return SBX_EPERM;
    case EISDIR:
    case EINVAL:
    case ENAMETOOLONG:
        return SBX_EINVAL;
    case ENOMEM:
        return SBX_ENOMEM;
    default:
        return SBX_EIO;
    }
}

static void file_cancel_cb(sbx_op *op, void *data)
{
    (void)op;
    struct hchan *ch = data;
    if (ch->done)
        return;
    send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
    chan_finish(ch, SBX_ECANCELED, NULL, NULL);
}

/* --- upload -------------------------------------------------------------- */

/*
 * A file call (open+fstat, read, write) run on the worker pool of the
 * connection's context, never on the loop thread nor libuv's process-wide
 * pool: a file that blocks (a FIFO nobody writes, a slow disk) holds one
 * worker, not the loop nor anyone else's uv_fs_* work. `cb` runs on the
 * loop once it is done.
 */
struct fsreq {
    struct hchan *ch; /* holds a ref */
    uint8_t *buf;
    size_t len;
    int fd;
    int64_t off; /* -1: at the descriptor's position (a stream) */
    char *path;  /* open */
    ssize_t result; /* >= 0, or -errno */
    struct stat statbuf;
    char *tmp;      /* download: the temp file made, or to rename (anon: its directory) */
    char *tmp_name; /* download: the temp's name in dirfd (not anon) */
    int dirfd;      /* download: the target's directory (made here, or the channel's) */
    sbx_error *err; /* download: why the directory was refused */
    bool anon;      /* download: tmp is an O_TMPFILE's directory */
    uint32_t mode;  /* download: the file's mode at the end */
    uint64_t size;  /* download: its size at the end */
    struct fsreq *next; /* download: in ch->held */
    void (*cb)(struct fsreq *r);
};

static void fs_done(void *data, bool cancelled)
{
    struct fsreq *r = data;
    /* Cancelled only when the context is being torn down. */
    if (cancelled)
        r->result = -ECANCELED;
    r->cb(r);
}

static int fs_submit(struct fsreq *r, sbx__work_fn work, void (*cb)(struct fsreq *))
{
    r->cb = cb;
    /* The connection's loop is a context's (sbx_op_loop()): its pool does the call. */
    return sbx__context_submit(sbx__context_of_uv(r->ch->c->loop), work, fs_done, r, NULL);
}

/* Worker: open for reading, then fstat (the result is the descriptor). */
static void fs_open_stat_work(void *data)
{
    struct fsreq *r = data;
    int fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        r->result = -errno;
        return;
    }
    if (fstat(fd, &r->statbuf) < 0)
        r->statbuf.st_mode = 0;
    r->result = fd;
}

/* Worker: one read of up to r->len bytes into r->buf + SBX_PROTO_HEADER. */
static void fs_read_work(void *data)
{
    struct fsreq *r = data;
    ssize_t n;
    do
        n = r->off >= 0 ? pread(r->fd, r->buf + SBX_PROTO_HEADER, r->len, (off_t)r->off)
                        : read(r->fd, r->buf + SBX_PROTO_HEADER, r->len);
    while (n < 0 && errno == EINTR);
    r->result = n < 0 ? -errno : n;
}

/* Worker: writes all of r->buf at r->off. */
static void fs_write_work(void *data)
{
    struct fsreq *r = data;
    size_t done = 0;
    while (done < r->len) {
        ssize_t n = pwrite(r->fd, r->buf + done, r->len - done, (off_t)(r->off + (int64_t)done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r->result = n < 0 ? -errno : -EIO;
            return;
        }
        done += (size_t)n;
    }
    r->result = (ssize_t)done;
}

static struct fsreq *fsreq_new(struct hchan *ch)
{
    struct fsreq *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->ch = ch;
    r->fd = -1;
    r->dirfd = -1;
    ch->refs++;
    return r;
}

static void fsreq_free(struct fsreq *r)
{
    free(r->path);
    free(r->tmp);
    free(r->tmp_name);
    free(r->buf);
    sbx_error_free(r->err);
    struct hchan *ch = r->ch;
    free(r);
    chan_unref(ch);
}

/* A request with a buffer of `size` bytes; NULL (nothing held) when out of memory. */
static struct fsreq *fsreq_new_buf(struct hchan *ch, size_t size)
{
    struct fsreq *r = fsreq_new(ch);
    if (r && !(r->buf = malloc(size))) {
        fsreq_free(r);
        r = NULL;
    }
    return r;
}

/* Finishes a file channel on the local errno `e`, with its code and a message. */
static void chan_fail_errno(struct hchan *ch, int e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void chan_fail_errno(struct hchan *ch, int e, const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    int code = sbx__code_from_errno(e);
    chan_finish(ch, code, msg ? sbx_error_new_errno(code, e, "%s", msg) : NULL, NULL);
    free(msg);
}

static void put_fail_errno(struct hchan *ch, int uverr, const char *what)
{
    chan_fail_errno(ch, -uverr, "uploading '%s' to '%s': %s '%s'", ch->local, ch->remote, what,
                    ch->local);
}

/*
 * Sends the FILE_PUT (upload, with the file's `mode`) or FILE_GET (download)
 * that opens the channel's transfer. Returns 0 when sent; -1 when the stream
 * died (conn_fail completed the op) or the path does not fit a frame.
 */
static int send_file_request(struct hchan *ch, uint32_t mode)
{
    bool put = ch->kind == K_PUT;
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_file_encode(&b, mode, 0, ch->remote);
    int rc = send_pbuf(ch->c, &b, put ? SBX_MSG_FILE_PUT : SBX_MSG_FILE_GET, ch->id);
    if (rc == -2)
        chan_finish(ch, SBX_EINVAL,
                    sbx_error_new(SBX_EINVAL, "%s '%s': the path is too long",
                                  put ? "uploading to" : "downloading", ch->remote),
                    NULL);
    return rc < 0 ? -1 : 0;
}

static void upload_read_cb(struct fsreq *r)
{
    struct hchan *ch = r->ch;
    ch->read_pending = false;
    ssize_t n = r->result;
    if (ch->done) {
        fsreq_free(r);
        return;
    }
    if (n < 0) {
        put_fail_errno(ch, (int)n, "cannot read");
        send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
        fsreq_free(r);
        return;
    }
    if (n == 0) {
        /* EOF: an empty DATA frame; the agent answers with STATUS. */
        ch->eof_sent = true;
        send_empty(ch->c, SBX_MSG_DATA, ch->id);
        fsreq_free(r);
        return;
    }
    sbx__proto_put_header(r->buf, SBX_MSG_DATA, ch->id, (uint32_t)n);
    uint8_t *buf = steal_pointer(&r->buf);
    ch->offset += n;
    send_frame(ch->c, buf, SBX_PROTO_HEADER + (size_t)n, ch, (size_t)n);
    upload_pump(ch);
    fsreq_free(r);
}

static void stdin_pump(struct hchan *ch);

static void upload_pump(struct hchan *ch)
{
    if (ch->kind == K_EXEC) {
        stdin_pump(ch);
        return;
    }
    if (ch->kind != K_PUT || ch->done || ch->read_pending || ch->eof_sent || ch->fd < 0 ||
        ch->inflight >= UPLOAD_INFLIGHT || ch->c->state != ST_READY)
        return;
    struct fsreq *r = fsreq_new_buf(ch, SBX_PROTO_HEADER + SBX_PROTO_CHUNK);
    if (!r) {
        chan_finish(ch, SBX_ENOMEM, NULL, NULL);
        return;
    }
    r->fd = ch->fd;
    r->off = ch->offset;
    r->len = SBX_PROTO_CHUNK;
    ch->read_pending = true;
    if (fs_submit(r, fs_read_work, upload_read_cb) < 0) {
        ch->read_pending = false;
        fsreq_free(r);
        chan_finish(ch, SBX_EIO, NULL, NULL);
    }
}

/* --- streamed stdin ----------------------------------------------------- */
/*
 * The caller's stdin goes to the command as it arrives: one chunk at a time,
 * at most STDIN_INFLIGHT of it waiting for the socket, so memory stays
 * bounded whatever feeds it, and a command that never reads its stdin starts
 * (and ends) at once. Pipes and sockets are read on the loop when readable;
 * regular files and devices (which epoll refuses) on the thread pool.
 */

/* Sends `n` bytes read into buf + SBX_PROTO_HEADER (takes buf); EOF when n == 0. */
static void stdin_send(struct hchan *ch, uint8_t *buf, ssize_t n)
{
    if (n <= 0) {
        /* EOF, or a read error: the command sees the end of its input either way. */
        free(buf);
        stdin_stop(ch);
        send_empty(ch->c, SBX_MSG_STDIN, ch->id);
        return;
    }
    sbx__proto_put_header(buf, SBX_MSG_STDIN, ch->id, (uint32_t)n);
    ch->in_sent += (uint64_t)n;
    if (ch->in_off >= 0) {
        /* The caller's position follows what was sent, as if `cat` had read it. */
        ch->in_off += n;
        lseek(ch->in_fd, (off_t)ch->in_off, SEEK_SET);
    }
    if (send_frame(ch->c, buf, SBX_PROTO_HEADER + (size_t)n, ch, (size_t)n) == 0)
        stdin_pump(ch);
}

static void stdin_poll_cb(uv_poll_t *h, int status, int events)
{
    (void)events;
    struct hchan *ch = h->data;
    if (ch->done || ch->in_eof)
        return;
    uint8_t *buf = status < 0 ? NULL : malloc(SBX_PROTO_HEADER + SBX_PROTO_CHUNK);
    ssize_t n = -1;
    if (buf) {
        do
            n = read(ch->in_fd, buf + SBX_PROTO_HEADER, SBX_PROTO_CHUNK);
        while (n < 0 && errno == EINTR);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            free(buf);
            return;
        }
    }
    stdin_send(ch, buf, n);
}

static void stdin_read_cb(struct fsreq *r)
{
    struct hchan *ch = r->ch;
    ch->read_pending = false;
    if (ch->fin_deferred) {
        ch->fin_deferred = false;
        sbx_op_complete(ch->op, ch->fin_code, ch->fin_err, ch->fin_value);
        ch->op = NULL;
    } else if (!ch->done && !ch->in_eof) {
        stdin_send(ch, steal_pointer(&r->buf), r->result);
    }
    fsreq_free(r);
}

static void stdin_pump(struct hchan *ch)
{
    if (ch->done || ch->in_eof || ch->in_fd < 0 || ch->c->state != ST_READY)
        return;
    /*
     * A version 1 agent queues what it is sent until the command reads it;
     * a version 2 one acknowledges what the command took, and we stay
     * within a window of it (so neither side holds much of a stdin the
     * command is slow to read).
     */
    bool room = ch->inflight < STDIN_INFLIGHT &&
                (ch->c->version < 2 || ch->in_sent - ch->in_acked < STDIN_WINDOW);
    if (ch->in_poll) {
        if (room)
            uv_poll_start(ch->in_poll, UV_READABLE, stdin_poll_cb);
        else
            uv_poll_stop(ch->in_poll);
        return;
    }
    if (!room || ch->read_pending)
        return;
    struct fsreq *r = fsreq_new_buf(ch, SBX_PROTO_HEADER + SBX_PROTO_CHUNK);
    if (!r) {
        stdin_send(ch, NULL, -1);
        return;
    }
    r->fd = ch->in_fd;
    r->off = ch->in_off;
    r->len = SBX_PROTO_CHUNK;
    ch->read_pending = true;
    /*
     * A file is read at explicit offsets: a read still in flight when the
     * exec ends then cannot move the caller's position under a later use
     * of the descriptor. A device (-1) is a stream either way.
     */
    if (fs_submit(r, fs_read_work, stdin_read_cb) < 0) {
        ch->read_pending = false;
        fsreq_free(r);
        stdin_send(ch, NULL, -1);
    }
}

static void stdin_start(struct hchan *ch, int fd)
{
    ch->in_fd = fd;
    ch->in_off = -1;
    struct stat st;
    int flags = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
        ch->in_off = lseek(fd, 0, SEEK_CUR);
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode) && flags >= 0) {
        uv_poll_t *p = calloc(1, sizeof(*p));
        if (p && uv_poll_init(ch->c->loop, p, fd) == 0) {
            p->data = ch;
            ch->refs++; /* dropped when the handle is closed (stdin_stop) */
            ch->in_poll = p;
            ch->in_flags = flags;
        } else {
            /* Not pollable (/dev/zero, /dev/null): the thread pool reads it. */
            free(p);
            fcntl(fd, F_SETFL, flags);
        }
    }
    stdin_pump(ch);
}

static void upload_open_cb(struct fsreq *r)
{
    struct hchan *ch = r->ch;
    if (r->result >= 0)
        ch->fd = (int)r->result; /* closed in chan_unref */
    if (ch->done) {
        fsreq_free(r);
        return;
    }
    if (r->result < 0) {
        put_fail_errno(ch, (int)r->result, "cannot open");
    } else if (!S_ISREG(r->statbuf.st_mode)) {
        chan_finish(ch, SBX_EINVAL,
                    sbx_error_new(SBX_EINVAL, "uploading '%s' to '%s': '%s' is not a regular file",
                                  ch->local, ch->remote, ch->local),
                    NULL);
    } else if (send_file_request(ch, (uint32_t)(r->statbuf.st_mode & 07777)) == 0) {
        upload_pump(ch);
    }
    fsreq_free(r);
}

static bool start_file_op(sbx_agent_conn *c, sbx_op *op, const char *what, const char *path)
{
    if (c->state == ST_READY)
        return true;
    sbx_op_complete(op, SBX_EIO,
                    sbx_error_new(SBX_EIO,
                                  "%s '%s': the sandbox agent went away (the connection is closed)",
                                  what, path),
                    NULL);
    return false;
}

/* The channel of an upload (K_PUT) or download (K_GET); NULL once `op` is completed. */
static struct hchan *file_chan_new(sbx_agent_conn *c, sbx_op *op, enum chan_kind kind,
                                   const char *local_path, const char *remote_path)
{
    if (!start_file_op(c, op, kind == K_PUT ? "uploading" : "downloading", remote_path))
        return NULL;
    struct hchan *ch = chan_new(c, op, kind);
    if (!ch) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return NULL;
    }
    if (!(ch->local = strdup(local_path)) || !(ch->remote = strdup(remote_path)) ||
        !chan_watch_idle(ch)) {
        chan_finish(ch, SBX_ENOMEM, NULL, NULL);
        return NULL;
    }
    ch->max_bytes = c->limits.max_download_bytes ? c->limits.max_download_bytes
                                                 : SBX_AGENT_DEFAULT_MAX_DOWNLOAD;
    return ch;
}

static void upload_start(sbx_agent_conn *c, sbx_op *op, const char *local_path,
                         const char *remote_path, bool into_dir)
{
    struct hchan *ch = file_chan_new(c, op, K_PUT, local_path, remote_path);
    if (!ch)
        return;
    ch->into_dir = into_dir;
    struct fsreq *r = fsreq_new(ch);
    if (r && !(r->path = strdup(local_path))) {
        fsreq_free(r);
        r = NULL;
    }
    /* Opening may block (a FIFO waits for its writer): on the pool. */
    if (!r || fs_submit(r, fs_open_stat_work, upload_open_cb) < 0) {
        if (r)
            fsreq_free(r);
        chan_finish(ch, SBX_EIO, NULL, NULL);
        return;
    }
    sbx_op_on_cancel(op, file_cancel_cb, ch);
}

void sbx__agent_upload(sbx_agent_conn *c, sbx_op *op, const char *local_path,
                       const char *remote_path)
{
    upload_start(c, op, local_path, remote_path, false);
}

/*
 * `dir`/NAME, NAME being the last component of the host path `local`: where
 * `docker cp` puts a file whose target is an existing directory (`dir`'s
 * trailing slashes dropped, "/" kept). NULL when out of memory.
 */
static char *into_dir_path(const char *dir, const char *local)
{
    size_t dl = strlen(dir), ll = strlen(local);
    while (ll > 1 && local[ll - 1] == '/')
        ll--;
    size_t b = ll;
    while (b > 0 && local[b - 1] != '/')
        b--;
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    bool root = dl == 1 && dir[0] == '/';
    return sbx__printf("%.*s%s%.*s", (int)dl, dir, root || dl == 0 ? "" : "/", (int)(ll - b),
                       local + b);
}

/* --- download ------------------------------------------------------------ */

static void set_reading(sbx_agent_conn *c, bool on);

/*
 * An anonymous temp file (O_TMPFILE) given its name: linked in under a temp
 * name next to the target, then renamed over it, so the target is replaced
 * whole. Only a kill between the two leaves a name behind (sweep_temps
 * removes it); a kill during the transfer leaves nothing. 0 or an errno.
 */
static int link_anon(struct fsreq *r)
{
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", r->fd);
    _cleanup_free_ char *base_copy = strdup(r->path);
    if (!base_copy)
        return ENOMEM;
    const char *base = basename(base_copy);
    for (unsigned i = 0; i < 100; i++) {
        uint8_t rnd[4] = { 0 };
        if (getrandom(rnd, sizeof(rnd), 0) < 0)
            return errno;
        _cleanup_free_ char *name = sbx__printf(".%s.sbx-%ld-%02x%02x%02x", base,
                                                (long)getpid(), rnd[0], rnd[1], rnd[2]);
        if (!name)
            return ENOMEM;
        /* In the directory walked once: no name above it is looked up again. */
        if (linkat(AT_FDCWD, proc, r->dirfd, name, AT_SYMLINK_FOLLOW) < 0) {
            if (errno == EEXIST)
                continue;
            return errno;
        }
        if (renameat(r->dirfd, name, r->dirfd, base) < 0) {
            int e = errno;
            unlinkat(r->dirfd, name, 0);
            return e;
        }
        return 0;
    }
    return EEXIST;
}

/* Worker: the end of a download, the temp file made the named one. */
static void fs_finish_work(void *data)
{
    struct fsreq *r = data;
    int e = 0;
    /* Trailing zeros were skipped as a hole: the size makes them. */
    if (ftruncate(r->fd, (off_t)r->size) < 0)
        e = errno;
    if (!e && fchmod(r->fd, r->mode) < 0)
        e = errno;
    if (!e && r->anon)
        e = link_anon(r);
    if (close(r->fd) < 0 && !e)
        e = errno;
    r->fd = -1;
    if (!e && !r->anon) {
        _cleanup_free_ char *base_copy = strdup(r->path);
        if (!base_copy)
            e = ENOMEM;
        else if (renameat(r->dirfd, r->tmp_name, r->dirfd, basename(base_copy)) < 0)
            e = errno;
    }
    r->result = e ? -e : 0;
}

static void download_finished(struct fsreq *r)
{
    struct hchan *ch = r->ch;
    ch->finishing = false;
    if (r->result == 0) {
        /* Renamed: nothing for chan_unref to remove. */
        free(ch->tmp_path);
        ch->tmp_path = NULL;
        free(ch->tmp_name);
        ch->tmp_name = NULL;
    }
    if (!ch->done) {
        if (r->result < 0)
            chan_fail_errno(ch, (int)-r->result, "downloading '%s': cannot write '%s'",
                            ch->remote, ch->local);
        else
            chan_finish(ch, SBX_OK, NULL, NULL);
    }
    fsreq_free(r);
}

/* Once the agent said how it ended and every chunk is on disk: rename into place. */
static void download_finish(struct hchan *ch)
{
    if (ch->done || !ch->got_status || ch->writes_pending > 0 || ch->opening || ch->finishing)
        return;
    if (ch->werr) {
        chan_fail_errno(ch, ch->werr, "downloading '%s' to '%s': cannot write '%s'", ch->remote,
                        ch->local, ch->tmp_path ? ch->tmp_path : ch->local);
        return;
    }
    if (ch->lied || (!ch->status_code && ch->received != ch->size)) {
        /* The temp file goes with the channel (chan_unref): nothing is left behind. */
        chan_finish(ch, SBX_EPROTO,
                    sbx_error_new(SBX_EPROTO,
                                  "downloading '%s': the sandbox agent announced %" PRIu64
                                  " bytes and sent %s%" PRIu64 "; the download was discarded",
                                  ch->remote, ch->size, ch->lied ? "more than that after " : "",
                                  ch->received),
                    NULL);
        return;
    }
    if (ch->status_code) {
        chan_finish(ch, ch->status_code,
                    sbx_error_new(ch->status_code, "downloading '%s' from the sandbox: %s",
                                  ch->remote, ch->status_msg ? ch->status_msg : "failed"),
                    NULL);
        return;
    }
    if (!ch->tmp_path) {
        /* A hostile or broken agent: "done" without ever saying what the file is. */
        chan_finish(ch, SBX_EPROTO,
                    sbx_error_new(SBX_EPROTO,
                                  "downloading '%s': the sandbox agent ended the download "
                                  "without sending the file",
                                  ch->remote),
                    NULL);
        return;
    }
    /* Truncate, chmod, close and rename can wait on the disk: on the pool. */
    struct fsreq *r = fsreq_new(ch);
    if (r && (!(r->path = strdup(ch->local)) || !(r->tmp = strdup(ch->tmp_path)) ||
              (ch->tmp_name && !(r->tmp_name = strdup(ch->tmp_name))))) {
        fsreq_free(r);
        r = NULL;
    }
    if (!r) {
        chan_finish(ch, SBX_ENOMEM, NULL, NULL);
        return;
    }
    r->fd = ch->fd;
    r->dirfd = ch->dirfd; /* borrowed: the channel closes it */
    r->anon = ch->tmp_anon;
    ch->fd = -1; /* the worker closes it */
    r->mode = ch->mode & 0777;
    r->size = ch->size;
    ch->finishing = true;
    if (fs_submit(r, fs_finish_work, download_finished) < 0) {
        ch->finishing = false;
        ch->fd = r->fd;
        fsreq_free(r);
        chan_finish(ch, SBX_EIO, NULL, NULL);
    }
}

static void download_write_cb(struct fsreq *r)
{
    struct hchan *ch = r->ch;
    sbx_agent_conn *c = ch->c;
    ch->writes_pending--;
    c->disk_pending -= r->len;
    chan_progress(ch);
    if (r->result < 0 && !ch->werr) {
        ch->werr = (int)-r->result;
        /* Stop the agent sending more; finish on our own error. */
        if (!ch->done)
            send_empty(c, SBX_MSG_CANCEL, ch->id);
        ch->got_status = true;
    }
    if (c->disk_pending < DISK_LOW && !c->out_paused)
        set_reading(c, true);
    download_finish(ch);
    fsreq_free(r);
}

/*
 * The temp file of a download is ".NAME.sbx-<pid>-XXXXXX" next to NAME. A
 * process killed mid-download (kill -9) leaves it: the next download to the
 * same name removes those whose process is gone (ours, regular files only).
 */
static void sweep_temps(int dfd, const char *base)
{
    _cleanup_free_ char *prefix = sbx__printf(".%s.sbx-", base);
    int fd = prefix ? openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    size_t n = strlen(prefix);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, n) != 0)
            continue;
        char *end = NULL;
        errno = 0;
        long pid = strtol(de->d_name + n, &end, 10);
        struct stat st;
        if (errno || end == de->d_name + n || *end != '-' || strlen(end + 1) != 6 || pid <= 0 ||
            pid == (long)getpid() || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
            unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

/* Worker: the download's parent directories and its temp file next to the target. */
static void fs_mktemp_work(void *data)
{
    struct fsreq *r = data;
    /* Parent directories are created, as `docker cp` does for downloads. */
    _cleanup_free_ char *dir_copy = strdup(r->path);
    _cleanup_free_ char *base_copy = strdup(r->path);
    _cleanup_free_ char *what = sbx__printf("downloading to '%s'", r->path);
    if (!dir_copy || !base_copy || !what) {
        r->result = -ENOMEM;
        return;
    }
    const char *dir = dirname(dir_copy);
    const char *base = basename(base_copy);
    /*
     * The directory is walked once from "/" (sbx__mkdir_trusted: a link on
     * the way is followed only if nobody but root and the caller could have
     * put it there), and everything below happens in its descriptor: a user
     * who owns a directory on the way cannot swap a component for a link
     * and send root's file elsewhere.
     */
    int dfd = sbx__mkdir_trusted(dir, 0755, what, &r->err);
    if (dfd < 0) {
        r->result = -EPERM;
        return;
    }
    r->dirfd = dfd;
    sweep_temps(dfd, base);
    /*
     * An unnamed file in the target's directory (O_TMPFILE) when the
     * filesystem has them and /proc can name it at the end: a download
     * killed mid-way (kill -9) leaves nothing in the destination.
     */
    if (access("/proc/self/fd", X_OK) == 0) {
        int afd = openat(dfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (afd >= 0) {
            if (!(r->tmp = strdup(dir))) {
                close(afd);
                r->result = -ENOMEM;
                return;
            }
            r->anon = true;
            r->result = afd;
            return;
        }
    }
    for (unsigned i = 0; i < 100; i++) {
        uint8_t rnd[3] = { 0 };
        if (getrandom(rnd, sizeof(rnd), 0) < 0) {
            r->result = -errno;
            return;
        }
        free(r->tmp_name);
        r->tmp_name = sbx__printf(".%s.sbx-%ld-%02x%02x%02x", base, (long)getpid(), rnd[0],
                                  rnd[1], rnd[2]);
        if (!r->tmp_name) {
            r->result = -ENOMEM;
            return;
        }
        int fd = openat(dfd, r->tmp_name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0600);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0) {
            r->result = -errno;
            return;
        }
        if (!(r->tmp = sbx__printf("%s/%s", dir, r->tmp_name))) {
            unlinkat(dfd, r->tmp_name, 0);
            close(fd);
            r->result = -ENOMEM;
            return;
        }
        r->result = fd;
        return;
    }
    r->result = -EEXIST;
}

/* Drops the writes that waited for a temp file that will not come. */
static void drop_held(struct hchan *ch)
{
    while (ch->held) {
        struct fsreq *w = ch->held;
        ch->held = w->next;
        ch->writes_pending--;
        ch->c->disk_pending -= w->len;
        fsreq_free(w);
    }
    ch->held_tail = NULL;
    if (ch->c->disk_pending < DISK_LOW)
        set_reading(ch->c, true);
}

static void download_opened(struct fsreq *r)
{
    struct hchan *ch = r->ch;
    ch->opening = false;
    /* The channel owns them now: chan_unref closes and removes them if it ends here. */
    ch->dirfd = r->dirfd;
    r->dirfd = -1;
    if (r->result >= 0) {
        ch->fd = (int)r->result;
        ch->tmp_path = steal_pointer(&r->tmp);
        ch->tmp_name = steal_pointer(&r->tmp_name);
        ch->tmp_anon = r->anon;
    } else if (r->tmp_name && ch->dirfd >= 0) {
        unlinkat(ch->dirfd, r->tmp_name, 0);
    }
    if (ch->done) {
        drop_held(ch);
    } else if (r->err) {
        /* The target's directory was refused (a link another user could aim): why. */
        drop_held(ch);
        send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
        int code = sbx_error_code(r->err);
        chan_finish(ch, code, steal_pointer(&r->err), NULL);
    } else if (r->result < 0) {
        drop_held(ch);
        send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
        chan_fail_errno(ch, (int)-r->result, "downloading '%s': cannot create '%s'", ch->remote,
                        ch->local);
    } else {
        while (ch->held) {
            struct fsreq *w = ch->held;
            ch->held = w->next;
            w->next = NULL;
            w->fd = ch->fd;
            if (fs_submit(w, fs_write_work, download_write_cb) < 0) {
                ch->writes_pending--;
                ch->c->disk_pending -= w->len;
                if (!ch->werr) {
                    ch->werr = EIO;
                    ch->got_status = true;
                    send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
                }
                fsreq_free(w);
            }
        }
        ch->held_tail = NULL;
        download_finish(ch);
    }
    fsreq_free(r);
}

static void download_info(struct hchan *ch, const sbx_frame *f)
{
    sbx_msg_file_info info;
    if (sbx__msg_file_info_decode(f, &info) < 0 || ch->tmp_path || ch->opening) {
        conn_fail(ch->c, SBX_EPROTO, "the sandbox agent sent a malformed FILE_INFO");
        return;
    }
    ch->mode = info.mode;
    ch->size = info.size;
    if (info.size > ch->max_bytes) {
        /* Refused before anything exists on the host: nothing to clean up. */
        send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
        chan_finish(ch, SBX_EINVAL,
                    sbx_error_new(SBX_EINVAL,
                                  "downloading '%s': the file is %" PRIu64 " bytes, over the "
                                  "download limit of %" PRIu64 " bytes (the linux provider's "
                                  "max_download_bytes)",
                                  ch->remote, info.size, ch->max_bytes),
                    NULL);
        return;
    }
    /* The temp file is made on the pool; DATA arriving meanwhile waits in ch->held. */
    struct fsreq *r = fsreq_new(ch);
    if (r && !(r->path = strdup(ch->local))) {
        fsreq_free(r);
        r = NULL;
    }
    ch->opening = true;
    if (!r || fs_submit(r, fs_mktemp_work, download_opened) < 0) {
        ch->opening = false;
        if (r)
            fsreq_free(r);
        send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
        chan_finish(ch, SBX_ENOMEM, NULL, NULL);
    }
}

static bool all_zero(const uint8_t *p, size_t n)
{
    return n && p[0] == 0 && !memcmp(p, p + 1, n - 1);
}

static void download_data(struct hchan *ch, const sbx_frame *f)
{
    if ((ch->fd < 0 && !ch->opening) || ch->werr) {
        if (ch->fd < 0 && !ch->opening)
            conn_fail(ch->c, SBX_EPROTO, "the sandbox agent sent DATA before FILE_INFO");
        return;
    }
    if (f->len == 0)
        return;
    if (f->len > ch->size - ch->received) {
        /* The agent announced the size: more is a lie (or a file grown past it). */
        ch->lied = true;
        ch->got_status = true;
        send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
        download_finish(ch);
        return;
    }
    ch->received += f->len;
    if (all_zero(f->payload, f->len)) {
        /*
         * Leave a hole: a sparse file stays sparse on the host (ftruncate to the
         * announced size at the end makes the trailing zeros), and a box cannot
         * turn a few blocks of its disk into gigabytes of ours.
         */
        ch->offset += f->len;
        return;
    }
    struct fsreq *r = fsreq_new_buf(ch, f->len);
    if (!r) {
        ch->werr = ENOMEM;
        ch->got_status = true;
        send_empty(ch->c, SBX_MSG_CANCEL, ch->id);
        download_finish(ch);
        return;
    }
    /* The payload lives in the read buffer: the write needs its own copy. */
    memcpy(r->buf, f->payload, f->len);
    r->len = f->len;
    r->fd = ch->fd;
    r->off = ch->offset;
    ch->offset += f->len;
    ch->writes_pending++;
    ch->c->disk_pending += f->len;
    if (ch->opening) {
        /* Written once the temp file exists (download_opened), in order. */
        if (ch->held_tail)
            ch->held_tail->next = r;
        else
            ch->held = r;
        ch->held_tail = r;
    } else if (fs_submit(r, fs_write_work, download_write_cb) < 0) {
        ch->writes_pending--;
        ch->c->disk_pending -= f->len;
        ch->werr = EIO;
        ch->got_status = true;
        fsreq_free(r);
        download_finish(ch);
        return;
    }
    if (ch->c->disk_pending > DISK_HIGH)
        set_reading(ch->c, false);
}

void sbx__agent_download(sbx_agent_conn *c, sbx_op *op, const char *remote_path,
                         const char *local_path)
{
    struct hchan *ch = file_chan_new(c, op, K_GET, local_path, remote_path);
    if (ch && send_file_request(ch, 0) == 0)
        sbx_op_on_cancel(op, file_cancel_cb, ch);
}

/* --- ping ---------------------------------------------------------------- */

void sbx__agent_ping(sbx_agent_conn *c, sbx_op *op)
{
    if (!start_file_op(c, op, "pinging", "agent"))
        return;
    struct hchan *ch = chan_new(c, op, K_PING);
    if (!ch) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    if (!chan_watch_idle(ch)) {
        chan_finish(ch, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_u64_encode(&b, ch->id);
    if (send_pbuf(c, &b, SBX_MSG_PING, ch->id) == 0)
        sbx_op_on_cancel(op, file_cancel_cb, ch);
}

/* --- reading ------------------------------------------------------------- */

static void on_status(struct hchan *ch, const sbx_frame *f)
{
    sbx_msg_status *m = NULL;
    if (sbx__msg_status_decode(f, &m) < 0) {
        conn_fail(ch->c, SBX_EPROTO, "the sandbox agent sent a malformed STATUS");
        return;
    }
    int code = m->errnum ? code_for_agent_errno(m->errnum) : 0;
    char *into = NULL;
    if (ch->kind == K_PUT && m->errnum == EISDIR && !ch->into_dir && ch->op &&
        (into = into_dir_path(ch->remote, ch->local))) {
        /*
         * The target is a directory (the agent says so before taking any
         * data): the file goes into it under its own name, as `docker cp`
         * does (the reference's container providers). Once: a directory of
         * that name inside it is an error.
         */
        sbx_op *op = ch->op;
        ch->op = NULL;
        upload_start(ch->c, op, ch->local, into, true);
        chan_finish(ch, SBX_OK, NULL, NULL);
        free(into);
        free(m);
        return;
    }
    if (ch->kind == K_PUT) {
        if (code)
            chan_finish(ch, code,
                        sbx_error_new(code, "uploading '%s' to '%s' in the sandbox: %s", ch->local,
                                      ch->remote, m->message),
                        NULL);
        else if (!ch->eof_sent)
            conn_fail(ch->c, SBX_EPROTO, "the sandbox agent ended an upload before its end");
        else
            chan_finish(ch, SBX_OK, NULL, NULL);
    } else if (ch->kind == K_GET) {
        if (!ch->got_status) {
            ch->got_status = true;
            ch->status_code = code;
            ch->status_msg = strdup(m->message);
        }
        download_finish(ch);
    }
    free(m);
}

static void dispatch(sbx_agent_conn *c, const sbx_frame *f)
{
    if (c->state == ST_HELLO) {
        if (f->type == SBX_MSG_ERROR) {
            sbx_msg_status *m = NULL;
            if (sbx__msg_status_decode(f, &m) == 0) {
                conn_fail(c, SBX_EPROTO, "the sandbox agent refused the connection: %s",
                          m->message);
                free(m);
                return;
            }
        }
        sbx_msg_hello *h = NULL;
        if (f->type != SBX_MSG_HELLO || sbx__msg_hello_decode(f, &h) < 0) {
            conn_fail(c, SBX_EPROTO,
                      "the peer is not an sbx agent (no valid HELLO; got frame type 0x%02x)",
                      f->type);
            return;
        }
        sbx_msg_hello mine = {SBX_PROTO_MAGIC, SBX_PROTO_MIN_VERSION, SBX_PROTO_VERSION, 0, NULL};
        int v = sbx__proto_negotiate(&mine, h);
        if (v < 0) {
            conn_fail(c, SBX_EPROTO,
                      "the sandbox agent (%s) speaks protocol %u..%u, this library %d..%d; "
                      "use an sbx-agent from the same sbx release",
                      h->software, h->min_version, h->max_version, SBX_PROTO_MIN_VERSION,
                      SBX_PROTO_VERSION);
            free(h);
            return;
        }
        free(h);
        c->version = v;
        c->state = ST_READY;
        uv_timer_stop(c->timer);
        c->owned = true;
        sbx_agent_connect_cb cb = c->cb;
        c->cb = NULL;
        cb(c, SBX_OK, NULL, c->cb_data);
        return;
    }
    if (f->channel == 0) {
        if (f->type == SBX_MSG_ERROR) {
            sbx_msg_status *m = NULL;
            if (sbx__msg_status_decode(f, &m) == 0) {
                conn_fail(c, SBX_EPROTO, "the sandbox agent closed the stream: %s", m->message);
                free(m);
                return;
            }
        }
        conn_fail(c, SBX_EPROTO, "unexpected frame type 0x%02x on channel 0 from the agent",
                  f->type);
        return;
    }
    struct hchan *ch = chan_find(c, f->channel);
    if (!ch)
        return; /* a late frame for an op that already completed (cancelled): dropped */
    chan_progress(ch);
    switch (f->type) {
    case SBX_MSG_STDOUT:
    case SBX_MSG_STDERR:
        if (ch->kind != K_EXEC)
            break;
        exec_output(ch, f->type == SBX_MSG_STDOUT ? &ch->out : &ch->err, f);
        return;
    case SBX_MSG_EXIT: {
        sbx_msg_exit *m = NULL;
        if (ch->kind != K_EXEC || sbx__msg_exit_decode(f, &m) < 0)
            break;
        exec_done(ch, m);
        free(m);
        return;
    }
    case SBX_MSG_STDIN_ACK: {
        uint64_t n = 0;
        if (ch->kind != K_EXEC || c->version < 2 || sbx__msg_u64_decode(f, &n) < 0 ||
            n > ch->in_sent - ch->in_acked)
            break; /* more than was sent: a lie, a protocol error */
        ch->in_acked += n;
        stdin_pump(ch);
        return;
    }
    case SBX_MSG_FILE_INFO:
        if (ch->kind != K_GET)
            break;
        download_info(ch, f);
        return;
    case SBX_MSG_DATA:
        if (ch->kind != K_GET)
            break;
        download_data(ch, f);
        return;
    case SBX_MSG_STATUS:
        if (ch->kind != K_GET && ch->kind != K_PUT)
            break;
        on_status(ch, f);
        return;
    case SBX_MSG_PONG:
        if (ch->kind != K_PING)
            break;
        chan_finish(ch, SBX_OK, NULL, NULL);
        return;
    default:
        break;
    }
    conn_fail(c, SBX_EPROTO, "unexpected or malformed %s frame (type 0x%02x) from the agent",
              sbx__proto_type_name(f->type) ? sbx__proto_type_name(f->type) : "unknown", f->type);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    sbx_agent_conn *c = h->data;
    size_t avail = 0;
    uint8_t *p = sbx__proto_reader_space(&c->rd, 256 * 1024, &avail);
    *buf = uv_buf_init((char *)p, p ? (unsigned)avail : 0);
}

static void read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    sbx_agent_conn *c = s->data;
    if (nread == UV_ENOBUFS) {
        conn_fail(c, SBX_ENOMEM, "out of memory reading from the sandbox agent");
        return;
    }
    if (nread < 0) {
        conn_fail(c, SBX_EIO, "%s",
                  nread == UV_EOF ? "the agent closed the connection (did the box stop?)"
                                  : uv_strerror((int)nread));
        return;
    }
    sbx__proto_reader_commit(&c->rd, (size_t)nread);
    c->refs++; /* dispatch may fail the connection and drop other references */
    sbx_frame f;
    int rc = 0;
    while (c->state != ST_DEAD && (rc = sbx__proto_reader_next(&c->rd, &f)) == 1)
        dispatch(c, &f);
    if (c->state != ST_DEAD && rc < 0)
        conn_fail(c, SBX_EPROTO, "malformed frame from the sandbox agent (bad length)");
    conn_unref(c);
}

static void set_reading(sbx_agent_conn *c, bool on)
{
    if (c->state == ST_DEAD || !c->pipe || c->reading == on)
        return;
    c->reading = on;
    if (on)
        uv_read_start((uv_stream_t *)c->pipe, alloc_cb, read_cb);
    else
        uv_read_stop((uv_stream_t *)c->pipe);
}

/* --- connecting ---------------------------------------------------------- */

static void send_hello(sbx_agent_conn *c)
{
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx_msg_hello h = {SBX_PROTO_MAGIC, SBX_PROTO_MIN_VERSION, SBX_PROTO_VERSION,
                       SBX_PROTO_MAX_PAYLOAD, (char *)"libsbx " SBX_VERSION_STRING};
    sbx__msg_hello_encode(&b, &h);
    send_pbuf(c, &b, SBX_MSG_HELLO, 0);
}

/* Wraps a connected fd in a uv_pipe_t and starts the hello. Takes fd. */
static int attach(sbx_agent_conn *c, int fd)
{
    uv_pipe_t *p = calloc(1, sizeof(*p));
    if (!p) {
        close(fd);
        return SBX_ENOMEM;
    }
    uv_pipe_init(c->loop, p, 0);
    p->data = c;
    c->refs++;
    int rc = uv_pipe_open(p, fd);
    if (rc < 0) {
        close(fd);
        uv_close((uv_handle_t *)p, handle_closed);
        return SBX_EIO;
    }
    c->pipe = p;
    c->state = ST_HELLO;
    set_reading(c, true);
    send_hello(c);
    return SBX_OK;
}

static void on_timer(uv_timer_t *t);

static void try_connect(sbx_agent_conn *c)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        /* The limit many-box users meet first: each open connection holds one descriptor. */
        c->local_errno = errno; /* a failure here says nothing about the agent */
        conn_fail(c, SBX_EIO, "cannot create a socket: %s%s", strerror(c->local_errno),
                  c->local_errno == EMFILE || c->local_errno == ENFILE
                      ? " (each open agent connection holds one descriptor; raise the limit, "
                        "e.g. ulimit -n 65536, or keep fewer sandboxes open)"
                      : "");
        return;
    }
    /* A unix-socket connect completes at once: 0, or why not (no socket yet, backlog full). */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        /*
         * Before a byte is sent: the listener must be the process the caller
         * named (the box's agent), whatever the path led to. The kernel
         * records who called listen(), so no process can pass for another.
         */
        struct ucred cr;
        socklen_t crlen = sizeof(cr);
        if (c->peer_pid > 0 &&
            (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0 || cr.pid != c->peer_pid)) {
            pid_t got = crlen == sizeof(cr) ? cr.pid : 0;
            close(fd);
            conn_fail(c, SBX_EPERM,
                      "refusing the agent socket %s: the process listening on it is pid %d, not "
                      "the box's agent (pid %d); the socket was replaced, or the box restarted "
                      "under the same name",
                      c->path, (int)got, (int)c->peer_pid);
            return;
        }
        int rc = attach(c, fd);
        if (rc < 0) {
            conn_fail(c, rc, "cannot watch the agent socket %s", c->path);
            return;
        }
        uint64_t now = uv_now(c->loop);
        uv_timer_start(c->timer, on_timer, c->deadline > now ? c->deadline - now : 0, 0);
        return;
    }
    int e = errno;
    close(fd);
    bool transient = e == ENOENT || e == ECONNREFUSED || e == EAGAIN || e == EINTR;
    /* One attempt: nobody listening means the agent is gone (a full backlog is retried). */
    bool gone = c->one_attempt && (e == ENOENT || e == ECONNREFUSED);
    if (!transient || gone || uv_now(c->loop) >= c->deadline) {
        conn_fail(c, gone ? SBX_EPROVIDER : transient ? SBX_ETIMEDOUT : SBX_EIO,
                  "cannot connect to the sandbox agent at %s: %s%s", c->path, strerror(e),
                  gone        ? " (nobody is listening: the agent is gone)"
                  : transient ? " (it did not start listening in time)"
                              : "");
        return;
    }
    /* Back off gently: boxes usually start in milliseconds. */
    c->retry_ms = c->retry_ms ? (c->retry_ms * 2 > 50 ? 50 : c->retry_ms * 2) : 2;
    uv_timer_start(c->timer, on_timer, c->retry_ms, 0);
}

static void on_timer(uv_timer_t *t)
{
    sbx_agent_conn *c = t->data;
    if (c->state == ST_CONNECTING)
        try_connect(c);
    else if (c->state == ST_HELLO)
        conn_fail(c, SBX_ETIMEDOUT,
                  "the sandbox agent did not answer the protocol hello in time; is it an "
                  "sbx-agent of this release?");
}

static sbx_agent_conn *conn_alloc(void *loop, double timeout_s, sbx_agent_connect_cb cb, void *data)
{
    sbx_agent_conn *c = calloc(1, sizeof(*c));
    uv_timer_t *t = calloc(1, sizeof(*t));
    if (!c || !t) {
        free(c);
        free(t);
        return NULL;
    }
    c->loop = loop;
    c->cb = cb;
    c->cb_data = data;
    c->refs = 2; /* the owner's, and the timer handle's */
    c->state = ST_CONNECTING;
    sbx__proto_reader_init(&c->rd, SBX_PROTO_MAX_PAYLOAD);
    uv_timer_init(loop, t);
    t->data = c;
    c->timer = t;
    double ms = timeout_s < 0 ? 0 : timeout_s * 1000.0;
    c->deadline = uv_now(loop) + (uint64_t)ms;
    return c;
}

static int connect_path(void *loop, const char *socket_path, pid_t peer_pid, double timeout_s,
                        bool one_attempt, sbx_agent_connect_cb cb, void *data)
{
    struct sockaddr_un sa;
    if (!loop || !socket_path || !cb)
        return SBX_EINVAL;
    if (strlen(socket_path) >= sizeof(sa.sun_path))
        return SBX_EINVAL;
    sbx_agent_conn *c = conn_alloc(loop, timeout_s, cb, data);
    if (!c || !(c->path = strdup(socket_path))) {
        if (c) {
            /* Not started yet: undo by hand. */
            uv_close((uv_handle_t *)c->timer, handle_closed);
            c->refs = 1;
        }
        return SBX_ENOMEM;
    }
    c->one_attempt = one_attempt;
    c->peer_pid = peer_pid;
    /* The first attempt runs from the loop so `cb` never runs inside this call. */
    uv_timer_start(c->timer, on_timer, 0, 0);
    return SBX_OK;
}

int sbx__agent_connect(void *loop, const char *socket_path, double timeout_s,
                       sbx_agent_connect_cb cb, void *data)
{
    return connect_path(loop, socket_path, 0, timeout_s, false, cb, data);
}

int sbx__agent_reconnect(void *loop, const char *socket_path, double timeout_s,
                         sbx_agent_connect_cb cb, void *data)
{
    return connect_path(loop, socket_path, 0, timeout_s, true, cb, data);
}

int sbx__agent_connect_peer(void *loop, const char *socket_path, pid_t peer_pid, bool one_attempt,
                            double timeout_s, sbx_agent_connect_cb cb, void *data)
{
    if (peer_pid <= 0)
        return SBX_EINVAL;
    return connect_path(loop, socket_path, peer_pid, timeout_s, one_attempt, cb, data);
}

int sbx__agent_connect_fd(void *loop, int fd, double timeout_s, sbx_agent_connect_cb cb, void *data)
{
    if (!loop || fd < 0 || !cb) {
        if (fd >= 0)
            close(fd);
        return SBX_EINVAL;
    }
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    sbx_agent_conn *c = conn_alloc(loop, timeout_s, cb, data);
    if (!c) {
        close(fd);
        return SBX_ENOMEM;
    }
    int rc = attach(c, fd);
    if (rc < 0) {
        c->cb = NULL;
        c->state = ST_CONNECTING;
        uv_close((uv_handle_t *)c->timer, handle_closed);
        c->timer = NULL;
        c->refs--; /* the owner's; the timer's goes in its close callback */
        return rc;
    }
    uv_timer_start(c->timer, on_timer, (uint64_t)(timeout_s < 0 ? 0 : timeout_s * 1000.0), 0);
    return SBX_OK;
}

void sbx__agent_set_limits(sbx_agent_conn *c, const sbx_agent_limits *limits)
{
    if (c && limits)
        c->limits = *limits;
}

int sbx__agent_alive(const sbx_agent_conn *c)
{
    return c && c->state == ST_READY;
}

int sbx__agent_idle(const sbx_agent_conn *c)
{
    return c && c->n_open == 0;
}

void sbx__agent_close(sbx_agent_conn *c)
{
    if (!c || c->closing)
        return;
    c->closing = true;
    c->refs++;
    conn_fail(c, SBX_EIO, "the connection to the sandbox agent was closed");
    if (c->timer) {
        uv_close((uv_handle_t *)c->timer, handle_closed);
        c->timer = NULL;
    }
    if (c->owned)
        c->refs--; /* the owner's (we still hold our own, dropped below) */
    conn_unref(c);
}
