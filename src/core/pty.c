/*
 * PTY session handles (include/sbx.h, docs/terminals.md): each handle holds
 * its own connection to the box's agent, found through the provider's
 * agent_address op, and speaks the PTY messages of protocol version 3 over
 * it with blocking I/O on the caller's thread. The sessions themselves live
 * in the agent (src/agent/pty.c), so a handle can go away and another, in
 * any process, attach.
 *
 * Everything the agent sends is hostile: frames go through the codec's
 * bounded reader and decoders, and what the handle buffers is bounded by the
 * window (older bytes are dropped, as the agent drops them).
 */
#include "core/internal.h"
#include "proto/proto.h"
#include "proto/procs.h"
#include "proto/pty.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct sbx_pty {
    int fd;
    uint32_t id;
    uint32_t channel;
    bool opener;
    sbx_proto_reader rd;
    struct sbx__pty_window out[2];
    bool exited;
    int code;
    bool gone;       /* the channel ended without EXIT (taken over, detached, lost) */
    int gone_code;   /* SBX_EPTY or SBX_EIO */
    char *gone_msg;
    bool pipes;      /* opened in pipe mode (an attached handle does not know: false) */
    bool closed;     /* ended by the pty exec facade (pty_exec.c); only _free is left */
    struct sbx__pty_home *home; /* the sandbox whose default it is (pty_exec.c) */
    char *workdir;   /* where the provider says sessions start (agent_address), or NULL */
    int version;     /* the protocol version the hello settled on */
    /* A one-frame question (sbx__pty_ask): the answer's type, and its payload once it came. */
    uint8_t want;
    uint8_t *answer;
    size_t answer_len;
    bool answered;
    /*
     * A session the provider opened itself (pty_open, pty_remote.c): every
     * call goes there instead of to the agent's socket. The handle holds the
     * sandbox, so the provider outlives it.
     */
    sbx_pty_session *session;
    sbx_sandbox *held;
};

/* --- options -------------------------------------------------------------- */

sbx_pty_opts *sbx_pty_opts_new(void)
{
    sbx_pty_opts *o = calloc(1, sizeof(*o));
    if (o) {
        o->rows = 24;
        o->cols = 80;
    }
    return o;
}

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

void sbx_pty_opts_free(sbx_pty_opts *o)
{
    if (!o)
        return;
    free(o->command);
    strv_free(o->argv);
    free(o->cwd);
    free(o->user);
    strv_free(o->env);
    free(o);
}

static int set_str(char **slot, const char *v)
{
    char *c = v ? strdup(v) : NULL;
    if (v && !c)
        return SBX_ENOMEM;
    free(*slot);
    *slot = c;
    return SBX_OK;
}

sbx_pty_opts *sbx__pty_opts_copy(const sbx_pty_opts *o)
{
    sbx_pty_opts *c = sbx_pty_opts_new();
    if (!c)
        return NULL;
    c->rows = o->rows;
    c->cols = o->cols;
    c->pipes = o->pipes;
    int rc = SBX_OK;
    if (o->argv)
        rc = sbx_pty_opts_set_argv(c, (const char *const *)o->argv);
    if (rc >= 0)
        rc = set_str(&c->command, o->command);
    if (rc >= 0)
        rc = set_str(&c->cwd, o->cwd);
    if (rc >= 0)
        rc = set_str(&c->user, o->user);
    for (size_t i = 0; rc >= 0 && i < o->n_env; i++) {
        char **v = realloc(c->env, (c->n_env + 2) * sizeof(*v));
        if (!v || !(v[c->n_env] = strdup(o->env[i]))) {
            if (v)
                c->env = v;
            rc = SBX_ENOMEM;
            break;
        }
        c->env = v;
        v[++c->n_env] = NULL;
    }
    if (rc < 0) {
        sbx_pty_opts_free(c);
        return NULL;
    }
    return c;
}

int sbx_pty_opts_set_command(sbx_pty_opts *o, const char *command)
{
    if (!o)
        return SBX_EINVAL;
    strv_free(o->argv);
    o->argv = NULL;
    return set_str(&o->command, command);
}

int sbx_pty_opts_set_argv(sbx_pty_opts *o, const char *const *argv)
{
    if (!o || !argv || !argv[0])
        return SBX_EINVAL;
    size_t n = 0;
    while (argv[n])
        n++;
    char **v = calloc(n + 1, sizeof(*v));
    if (!v)
        return SBX_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] = strdup(argv[i]))) {
            strv_free(v);
            return SBX_ENOMEM;
        }
    }
    strv_free(o->argv);
    o->argv = v;
    free(o->command);
    o->command = NULL;
    return SBX_OK;
}

int sbx_pty_opts_set_cwd(sbx_pty_opts *o, const char *cwd)
{
    return o ? set_str(&o->cwd, cwd) : SBX_EINVAL;
}

int sbx_pty_opts_set_user(sbx_pty_opts *o, const char *user)
{
    return o ? set_str(&o->user, user) : SBX_EINVAL;
}

int sbx_pty_opts_set_env(sbx_pty_opts *o, const char *key, const char *value)
{
    if (!o || !key || !key[0] || strchr(key, '=') || !value)
        return SBX_EINVAL;
    char **v = realloc(o->env, (o->n_env + 2) * sizeof(*v));
    if (!v)
        return SBX_ENOMEM;
    o->env = v;
    size_t len = strlen(key) + strlen(value) + 2;
    if (!(v[o->n_env] = malloc(len)))
        return SBX_ENOMEM;
    snprintf(v[o->n_env], len, "%s=%s", key, value);
    v[++o->n_env] = NULL;
    return SBX_OK;
}

int sbx_pty_opts_set_size(sbx_pty_opts *o, unsigned rows, unsigned cols)
{
    if (!o || rows < 1 || cols < 1 || rows > SBX_PTY_MAX_DIM || cols > SBX_PTY_MAX_DIM)
        return SBX_EINVAL;
    o->rows = rows;
    o->cols = cols;
    return SBX_OK;
}

int sbx_pty_opts_set_pipes(sbx_pty_opts *o, int pipes)
{
    if (!o)
        return SBX_EINVAL;
    o->pipes = pipes != 0;
    return SBX_OK;
}

/* --- the connection --------------------------------------------------------- */

static int send_all(sbx_pty *p, const uint8_t *data, size_t len, sbx_error **err)
{
    while (len) {
        ssize_t n = send(p->fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "PTY session %u: sending to the box's agent",
                                  p->id);
        data += n;
        len -= (size_t)n;
    }
    return SBX_OK;
}

static int send_frame(sbx_pty *p, sbx_pbuf *b, uint8_t type, uint32_t channel, sbx_error **err)
{
    if (sbx__pbuf_finish(b, type, channel) < 0) {
        sbx__pbuf_free(b);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    int rc = send_all(p, b->data, b->len, err);
    sbx__pbuf_free(b);
    return rc;
}

static void set_gone(sbx_pty *p, int code, const char *msg)
{
    if (p->gone || p->exited)
        return;
    p->gone = true;
    p->gone_code = code;
    free(p->gone_msg);
    p->gone_msg = strdup(msg ? msg : "");
}

/* Handles one frame from the agent. -1: the stream is unusable (gone is set). */
static int handle(sbx_pty *p, const sbx_frame *f)
{
    if (f->channel == 0) {
        if (f->type == SBX_MSG_ERROR) {
            sbx_msg_status *m = NULL;
            if (sbx__msg_status_decode(f, &m) == 0) {
                set_gone(p, SBX_EIO, m->message);
                free(m);
            } else {
                set_gone(p, SBX_EIO, "the box's agent closed the stream");
            }
            return -1;
        }
        return 0; /* PONG and other stream-level frames: nothing to do */
    }
    if (f->channel != p->channel)
        return 0; /* a channel this handle no longer has */
    if (p->want && f->type == p->want && !p->answered) {
        free(p->answer);
        p->answer = malloc(f->len ? f->len : 1);
        if (!p->answer) {
            set_gone(p, SBX_ENOMEM, "out of memory");
            return -1;
        }
        memcpy(p->answer, f->payload, f->len);
        p->answer_len = f->len;
        p->answered = true;
        return 0;
    }
    switch (f->type) {
    case SBX_MSG_PTY_INFO: {
        sbx_msg_pty_info info;
        if (sbx__msg_pty_info_decode(f, &info) < 0 || info.id == 0)
            break;
        p->id = info.id;
        p->out[0].offset = info.out_offset;
        p->out[1].offset = info.err_offset;
        return 0;
    }
    case SBX_MSG_PTY_OUT:
    case SBX_MSG_PTY_ERR: {
        uint64_t off;
        const uint8_t *d;
        uint32_t n;
        if (sbx__msg_pty_data_decode(f, &off, &d, &n) < 0)
            break;
        if (n && sbx__pty_window_add(&p->out[f->type == SBX_MSG_PTY_ERR], off, d, n) < 0) {
            set_gone(p, SBX_ENOMEM, "out of memory");
            return -1;
        }
        return 0;
    }
    case SBX_MSG_EXIT: {
        sbx_msg_exit *m = NULL;
        if (sbx__msg_exit_decode(f, &m) < 0)
            break;
        if (m->kind == SBX_EXIT_FAILED) {
            /* The command never ran: the agent says why (a cwd, a user, the session cap). */
            set_gone(p, SBX_EPTY, m->message);
            free(m);
            return 0;
        }
        if (m->kind == SBX_EXIT_SIGNAL)
            p->code = 128 + (m->code & 0x7f);
        else
            p->code = m->code;
        p->exited = true;
        free(m);
        return 0;
    }
    case SBX_MSG_STATUS: {
        sbx_msg_status *m = NULL;
        if (sbx__msg_status_decode(f, &m) < 0)
            break;
        set_gone(p, SBX_EPTY, m->message[0] ? m->message : "the PTY session was detached");
        free(m);
        return 0;
    }
    default:
        return 0;
    }
    set_gone(p, SBX_EIO, "the box's agent sent a malformed PTY frame");
    return -1;
}

/*
 * Reads frames until `until(p)` holds or the time is up. SBX_OK, SBX_ETIMEDOUT,
 * SBX_EIO (the stream ended).
 */
static int pump(sbx_pty *p, bool (*until)(const sbx_pty *, int), int arg, double timeout_s)
{
    double deadline = timeout_s < 0 ? -1 : sbx__monotonic_s() + timeout_s;
    bool polled = false;
    for (;;) {
        sbx_frame f;
        int r;
        while ((r = sbx__proto_reader_next(&p->rd, &f)) == 1)
            if (handle(p, &f) < 0)
                return SBX_EIO;
        if (r < 0) {
            set_gone(p, SBX_EIO, "the box's agent sent a malformed frame");
            return SBX_EIO;
        }
        if (until(p, arg) || p->gone)
            return SBX_OK;
        int wait_ms = -1;
        if (deadline >= 0) {
            double left = deadline - sbx__monotonic_s();
            if (left <= 0 && polled)
                return SBX_ETIMEDOUT;
            wait_ms = left <= 0 ? 0 : (int)(left * 1000) + 1;
        }
        polled = true;
        struct pollfd pf = {.fd = p->fd, .events = POLLIN};
        int pr = poll(&pf, 1, wait_ms);
        if (pr <= 0)
            continue; /* EINTR or the time is up: the checks above decide */
        size_t avail;
        uint8_t *space = sbx__proto_reader_space(&p->rd, 65536, &avail);
        if (!space) {
            set_gone(p, SBX_ENOMEM, "out of memory");
            return SBX_EIO;
        }
        ssize_t n = recv(p->fd, space, avail, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            set_gone(p, SBX_EIO, "the connection to the box's agent closed (the box ended?)");
            return SBX_EIO;
        }
        sbx__proto_reader_commit(&p->rd, (size_t)n);
    }
}

static int connect_agent(sbx_sandbox *sb, int *out_fd, char **workdir, sbx_error **err)
{
    sbx_future *f = NULL;
    json_t *j = NULL;
    int rc = sbx__sandbox_agent_address_async(sb, &f, err);
    if (rc < 0 || (rc = sbx__future_wait_json(f, &j, err)) < 0)
        return rc;
    const char *path = json_string_value(json_object_get(j, "socket"));
    json_int_t pid = json_integer_value(json_object_get(j, "pid"));
    if (!path || pid <= 0) {
        json_decref(j);
        return sbx__set_error(err, SBX_EPROVIDER,
                              "the provider's agent_address gave no socket and pid");
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int dirfd = -1, fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        json_decref(j);
        return sbx__set_errno(err, SBX_EIO, errno, "socket");
    }
    if (strlen(path) < sizeof(sa.sun_path)) {
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    } else {
        /* A long path: reach it through its directory's descriptor. */
        const char *slash = strrchr(path, '/');
        char *dir = slash ? strndup(path, (size_t)(slash - path)) : NULL;
        dirfd = dir ? open(dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
        free(dir);
        if (dirfd >= 0)
            snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dirfd, slash + 1);
    }
    int c = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    int saved = errno;
    if (dirfd >= 0)
        close(dirfd);
    if (c < 0) {
        close(fd);
        rc = sbx__set_errno(err, SBX_EIO, saved, "connecting to the box's agent at %s", path);
        json_decref(j);
        return rc;
    }
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 || cred.pid != (pid_t)pid) {
        close(fd);
        rc = sbx__set_error(err, SBX_EPERM,
                            "%s is not served by the box's agent (pid %lld): refusing to use it",
                            path, (long long)pid);
        json_decref(j);
        return rc;
    }
    /* A provider whose boxes see host paths (local) names the directory sessions start in. */
    const char *wd = json_string_value(json_object_get(j, "workdir"));
    if (wd && !(*workdir = strdup(wd))) {
        close(fd);
        json_decref(j);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    json_decref(j);
    *out_fd = fd;
    return SBX_OK;
}

/* Sends and checks the HELLO; the stream must speak version 3. */
static int hello(sbx_pty *p, sbx_error **err)
{
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx_msg_hello mine = {SBX_PROTO_MAGIC, 3, SBX_PROTO_VERSION, SBX_PROTO_MAX_PAYLOAD,
                          (char *)"libsbx pty"};
    sbx__msg_hello_encode(&b, &mine);
    int rc = send_frame(p, &b, SBX_MSG_HELLO, 0, err);
    if (rc < 0)
        return rc;
    double deadline = sbx__monotonic_s() + 30;
    for (;;) {
        sbx_frame f;
        int r = sbx__proto_reader_next(&p->rd, &f);
        if (r == 1) {
            sbx_msg_hello *h = NULL;
            if (f.type != SBX_MSG_HELLO || sbx__msg_hello_decode(&f, &h) < 0)
                return sbx__set_error(err, SBX_EPROTO, "the box's agent did not say HELLO");
            int v = sbx__proto_negotiate(&mine, h);
            free(h);
            p->version = v;
            if (v < 3)
                return sbx__set_error(err, SBX_EPTY,
                                      "the box's agent is too old for PTY sessions (it needs "
                                      "protocol version 3): restart the box with this sbx");
            return SBX_OK;
        }
        if (r < 0)
            return sbx__set_error(err, SBX_EPROTO, "the box's agent sent a malformed frame");
        double left = deadline - sbx__monotonic_s();
        struct pollfd pf = {.fd = p->fd, .events = POLLIN};
        if (left <= 0 || poll(&pf, 1, (int)(left * 1000) + 1) == 0)
            return sbx__set_error(err, SBX_ETIMEDOUT, "the box's agent did not answer in 30 s");
        size_t avail;
        uint8_t *space = sbx__proto_reader_space(&p->rd, 4096, &avail);
        if (!space)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        ssize_t n = recv(p->fd, space, avail, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return sbx__set_error(err, SBX_EIO, "the box's agent closed the connection");
        sbx__proto_reader_commit(&p->rd, (size_t)n);
    }
}

static bool have_info(const sbx_pty *p, int arg)
{
    (void)arg;
    return p->id != 0 || p->exited;
}

/* A new handle with its own connection and hello done. */
static int pty_new(sbx_sandbox *sb, sbx_pty **out, sbx_error **err)
{
    sbx_pty *p = calloc(1, sizeof(*p));
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    p->fd = -1;
    p->channel = 1;
    sbx__proto_reader_init(&p->rd, SBX_PROTO_MAX_PAYLOAD);
    int rc = connect_agent(sb, &p->fd, &p->workdir, err);
    if (rc >= 0)
        rc = hello(p, err);
    if (rc < 0) {
        sbx_pty_free(p);
        return rc;
    }
    *out = p;
    return SBX_OK;
}

/* Waits for PTY_INFO (or the failure that replaced it). */
static int await_info(sbx_pty *p, const char *what, sbx_error **err)
{
    int rc = pump(p, have_info, 0, 60);
    if (rc == SBX_ETIMEDOUT)
        return sbx__set_error(err, SBX_ETIMEDOUT, "%s: the box's agent did not answer in 60 s",
                              what);
    if (p->id)
        return SBX_OK;
    if (p->gone)
        return sbx__set_error(err, p->gone_code, "%s: %s", what, p->gone_msg);
    return sbx__set_error(err, SBX_EPTY, "%s: the session ended at once", what);
}

/* A handle over a session the provider opens itself (provider.h pty_open). */
static int remote_new(sbx_sandbox *sb, sbx_pty_opts *req, unsigned attach_id, int takeover,
                      unsigned long long since, sbx_pty **out, sbx_error **err)
{
    sbx_pty *p = req ? calloc(1, sizeof(*p)) : NULL;
    if (!p) {
        sbx_pty_opts_free(req);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    p->fd = -1;
    p->opener = attach_id == 0;
    int rc = sbx__pty_session_new(req, attach_id, takeover, since, &p->session, err);
    if (rc >= 0) {
        sbx__sandbox_hold(sb);
        p->held = sb;
        rc = sbx__sandbox_pty_open(sb, p->session, err);
    }
    if (rc >= 0)
        rc = sbx__pty_session_start(p->session, &p->id, err);
    if (rc < 0) {
        sbx_pty_free(p);
        return rc;
    }
    *out = p;
    return SBX_OK;
}

static int pty_open(sbx_sandbox *sb, const sbx_pty_opts *opts, bool pipes, sbx_pty **out,
                    sbx_error **err)
{
    if (!sb || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_pty_open: a sandbox and out are required");
    sbx_pty_opts defaults = {.rows = 24, .cols = 80};
    const sbx_pty_opts *o = opts ? opts : &defaults;
    sbx_pty *p;
    int rc;
    if (sbx__sandbox_has_pty_open(sb)) {
        sbx_pty_opts *req = sbx__pty_opts_copy(o);
        if (req) {
            req->pipes = o->pipes || pipes;
            if (!req->cwd && sbx_sandbox_workdir(sb) &&
                set_str(&req->cwd, sbx_sandbox_workdir(sb)) < 0) {
                sbx_pty_opts_free(req);
                req = NULL;
            }
        }
        if ((rc = remote_new(sb, req, 0, 0, 0, &p, err)) < 0)
            return rc;
        p->pipes = o->pipes;
        if (!o->argv && !o->command)
            sbx__pty_home_offer(sb, p);
        *out = p;
        return SBX_OK;
    }
    rc = pty_new(sb, &p, err);
    if (rc < 0)
        return rc;
    p->opener = true;
    uint32_t flags = o->pipes || pipes ? SBX_PTY_PIPES : 0;
    const char *one[2] = {NULL, NULL};
    const char *const *argv = (const char *const *)o->argv;
    if (!argv && o->command) {
        one[0] = o->command;
        argv = one;
        flags |= SBX_EXEC_SHELL;
    } else if (!argv) {
        one[0] = "sh"; /* ignored by the agent: it runs the box's shell */
        argv = one;
        flags |= SBX_PTY_BOX_SHELL;
    }
    const char *cwd = o->cwd ? o->cwd : p->workdir ? p->workdir : sbx_sandbox_workdir(sb);
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_pty_open_encode(&b, o->rows, o->cols, flags, cwd, o->user, argv, NULL,
                             (const char *const *)o->env);
    if ((rc = send_frame(p, &b, SBX_MSG_PTY_OPEN, p->channel, err)) < 0 ||
        (rc = await_info(p, "opening a PTY session", err)) < 0) {
        sbx_pty_free(p);
        return rc;
    }
    p->pipes = o->pipes;
    /* A box-shell session may become the sandbox's default for sbx_sandbox_pty_exec. */
    if (!o->argv && !o->command)
        sbx__pty_home_offer(sb, p);
    *out = p;
    return SBX_OK;
}

int sbx_pty_open(sbx_sandbox *sb, const sbx_pty_opts *opts, sbx_pty **out, sbx_error **err)
{
    return pty_open(sb, opts, false, out, err);
}

int sbx__pty_open_pipes(sbx_sandbox *sb, const sbx_pty_opts *opts, sbx_pty **out,
                        sbx_error **err)
{
    return pty_open(sb, opts, true, out, err);
}

/* The agent's version is too old for `what` (needs SBX_PROTO_PROCS_VERSION). */
static int too_old(const sbx_pty *p, const char *what, sbx_error **err)
{
    return sbx__set_error(err, SBX_ENOTSUP,
                          "the box's agent is too old for %s (it speaks protocol version %d, "
                          "this needs %d): restart the box with this sbx",
                          what, p->version, SBX_PROTO_PROCS_VERSION);
}

int sbx__pty_attach_flags(sbx_sandbox *sb, unsigned id, unsigned flags, unsigned long long since,
                          sbx_pty **out, sbx_error **err)
{
    if (!sb || !out || id == 0)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_pty_attach: a sandbox, a session id and out are required");
    sbx_pty *p;
    int rc;
    if (sbx__sandbox_has_pty_open(sb)) {
        if (flags & SBX_PTY_ATTACH_KEEP)
            return sbx__set_error(err, SBX_ENOTSUP,
                                  "reading a background process needs a box that runs sbx-agent");
        return remote_new(sb, sbx_pty_opts_new(), id, (flags & SBX_PTY_ATTACH_TAKEOVER) != 0,
                          since, out, err);
    }
    rc = pty_new(sb, &p, err);
    if (rc < 0)
        return rc;
    if ((flags & SBX_PTY_ATTACH_KEEP) && p->version < SBX_PROTO_PROCS_VERSION) {
        rc = too_old(p, "reading a background process without ending it", err);
        sbx_pty_free(p);
        return rc;
    }
    sbx_msg_pty_attach a = {id, flags, since};
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_pty_attach_encode(&b, &a);
    char what[64];
    snprintf(what, sizeof(what), "attaching to PTY session %u", id);
    if ((rc = send_frame(p, &b, SBX_MSG_PTY_ATTACH, p->channel, err)) < 0 ||
        (rc = await_info(p, what, err)) < 0) {
        sbx_pty_free(p);
        return rc;
    }
    *out = p;
    return SBX_OK;
}

int sbx_pty_attach(sbx_sandbox *sb, unsigned id, int takeover, unsigned long long since,
                   sbx_pty **out, sbx_error **err)
{
    return sbx__pty_attach_flags(sb, id, takeover ? SBX_PTY_ATTACH_TAKEOVER : 0, since, out, err);
}

unsigned sbx_pty_id(const sbx_pty *p) { return p ? p->id : 0; }
int sbx_pty_fd(const sbx_pty *p)
{
    return !p ? -1 : p->session ? sbx__pty_session_fd(p->session) : p->fd;
}

static bool have_bytes(const sbx_pty *p, int k) { return p->out[k].len > 0 || p->exited; }

static int gone_error(const sbx_pty *p, sbx_error **err)
{
    return sbx__set_error(err, p->gone_code, "PTY session %u: %s", p->id, p->gone_msg);
}

int sbx_pty_read(sbx_pty *p, int stream, void *buf, size_t cap, double timeout_s, size_t *n,
                 unsigned long long *offset, sbx_error **err)
{
    if (!p || !buf || !n || (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR))
        return sbx__set_error(err, SBX_EINVAL, "sbx_pty_read: a handle, a stream, buf and n are "
                                               "required");
    if (p->closed)
        return sbx__set_error(err, SBX_EPTY, "PTY session %u is closed", p->id);
    int k = stream == SBX_STREAM_STDERR;
    if (p->session)
        return sbx__pty_session_read(p->session, k, buf, cap, timeout_s, n, offset, err);
    int rc = SBX_OK;
    if (!p->out[k].len && !p->exited && !p->gone)
        rc = pump(p, have_bytes, k, timeout_s);
    struct sbx__pty_window *q = &p->out[k];
    if (q->len) {
        *n = sbx__pty_window_take(q, buf, cap, offset);
        return SBX_OK;
    }
    if (p->exited) {
        *n = 0;
        return SBX_OK;
    }
    if (p->gone)
        return gone_error(p, err);
    if (rc == SBX_ETIMEDOUT)
        return sbx__set_error(err, SBX_ETIMEDOUT, "PTY session %u: no output in %.3g s", p->id,
                              timeout_s);
    return gone_error(p, err);
}

static int check_live(sbx_pty *p, const char *what, sbx_error **err)
{
    if (!p)
        return sbx__set_error(err, SBX_EINVAL, "%s: a handle is required", what);
    if (p->closed)
        return sbx__set_error(err, SBX_EPTY, "PTY session %u is closed", p->id);
    if (p->session)
        return SBX_OK; /* the session says (pty_remote.c) */
    if (p->gone)
        return gone_error(p, err);
    if (p->exited)
        return sbx__set_error(err, SBX_EPTY, "PTY session %u has ended", p->id);
    return SBX_OK;
}

int sbx_pty_write(sbx_pty *p, const void *data, size_t len, sbx_error **err)
{
    int rc = check_live(p, "sbx_pty_write", err);
    if (rc < 0)
        return rc;
    if (p->session)
        return sbx__pty_session_write(p->session, data, len, err);
    const uint8_t *d = data;
    do {
        size_t n = len < SBX_PROTO_CHUNK ? len : SBX_PROTO_CHUNK;
        sbx_pbuf b = {0};
        sbx__pbuf_begin(&b);
        sbx__pbuf_bytes(&b, d, n);
        if ((rc = send_frame(p, &b, SBX_MSG_STDIN, p->channel, err)) < 0)
            return rc;
        d += n;
        len -= n;
    } while (len);
    return SBX_OK;
}

int sbx_pty_resize(sbx_pty *p, unsigned rows, unsigned cols, sbx_error **err)
{
    int rc = check_live(p, "sbx_pty_resize", err);
    if (rc < 0)
        return rc;
    if (rows < 1 || cols < 1 || rows > SBX_PTY_MAX_DIM || cols > SBX_PTY_MAX_DIM)
        return sbx__set_error(err, SBX_EINVAL, "a terminal size is 1..%d rows and columns, got %ux%u",
                              SBX_PTY_MAX_DIM, rows, cols);
    if (p->session)
        return sbx__pty_session_resize(p->session, rows, cols, err);
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__pbuf_u32(&b, rows);
    sbx__pbuf_u32(&b, cols);
    return send_frame(p, &b, SBX_MSG_PTY_RESIZE, p->channel, err);
}

static const struct {
    const char *name;
    int sig;
} signals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"ALRM", SIGALRM},
    {"STOP", SIGSTOP}, {"CONT", SIGCONT}, {"WINCH", SIGWINCH}, {"TSTP", SIGTSTP},
    {"PIPE", SIGPIPE},
};

int sbx_pty_signal(sbx_pty *p, const char *name, sbx_error **err)
{
    int rc = check_live(p, "sbx_pty_signal", err);
    if (rc < 0)
        return rc;
    if (!name || !name[0])
        return sbx__set_error(err, SBX_EINVAL, "sbx_pty_signal: a signal name is required");
    const char *n = strncasecmp(name, "SIG", 3) == 0 ? name + 3 : name;
    int sig = 0;
    const char *known = NULL;
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
        if (strcasecmp(n, signals[i].name) == 0)
            sig = signals[i].sig;
    if (!sig) {
        char *end;
        long v = strtol(n, &end, 10);
        if (*n && !*end && v >= 1 && v <= 64)
            sig = (int)v;
    }
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
        if (sig == signals[i].sig)
            known = signals[i].name;
    if (!sig)
        return sbx__set_error(err, SBX_EINVAL,
                              "unknown signal '%s': use a name such as INT, TERM, KILL, HUP or a "
                              "number 1..64",
                              name);
    if (p->session) {
        char full[16];
        if (known)
            snprintf(full, sizeof(full), "SIG%s", known);
        else
            snprintf(full, sizeof(full), "SIG%d", sig);
        return sbx__pty_session_signal(p->session, sig, full, err);
    }
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__pbuf_u32(&b, (uint32_t)sig);
    return send_frame(p, &b, SBX_MSG_PTY_SIGNAL, p->channel, err);
}

static bool has_exited(const sbx_pty *p, int arg)
{
    (void)arg;
    return p->exited;
}

int sbx_pty_wait(sbx_pty *p, double timeout_s, int *code, sbx_error **err)
{
    if (!p)
        return sbx__set_error(err, SBX_EINVAL, "sbx_pty_wait: a handle is required");
    if (p->session)
        return sbx__pty_session_wait(p->session, timeout_s, code, err);
    int rc = p->exited || p->gone ? SBX_OK : pump(p, has_exited, 0, timeout_s);
    if (p->exited) {
        if (code)
            *code = p->code;
        return SBX_OK;
    }
    if (p->gone)
        return gone_error(p, err);
    (void)rc;
    return sbx__set_error(err, SBX_ETIMEDOUT, "PTY session %u did not end in %.3g s", p->id,
                          timeout_s);
}

static bool ended(const sbx_pty *p, int arg)
{
    (void)arg;
    return p->exited || p->gone;
}

int sbx_pty_detach(sbx_pty *p, sbx_error **err)
{
    int rc = check_live(p, "sbx_pty_detach", err);
    if (rc < 0)
        return rc;
    if (p->session) {
        rc = sbx__pty_session_close(p->session, 0, 30, err);
        sbx__pty_session_detached(p->session);
        return rc;
    }
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    if ((rc = send_frame(p, &b, SBX_MSG_PTY_DETACH, p->channel, err)) < 0)
        return rc;
    rc = pump(p, ended, 0, 30);
    if (p->gone && p->gone_code == SBX_EPTY)
        return SBX_OK; /* the STATUS that ends the hold */
    if (p->exited)
        return SBX_OK;
    return sbx__set_error(err, rc == SBX_ETIMEDOUT ? SBX_ETIMEDOUT : SBX_EIO,
                          "PTY session %u: detaching failed", p->id);
}

/* Ends the session (an opener's) or detaches (an attacher's), keeping the handle. */
static int end_session(sbx_pty *p, sbx_error **err)
{
    int rc = SBX_OK;
    if (p->session)
        return p->closed ? SBX_OK : sbx__pty_session_close(p->session, p->opener, 30, err);
    if (!p->gone && !p->exited && !p->closed) {
        sbx_pbuf b = {0};
        sbx__pbuf_begin(&b);
        /* CANCEL: the opener's ends the session (EXIT follows); an attached one's detaches. */
        rc = send_frame(p, &b, SBX_MSG_CANCEL, p->channel, err);
        if (rc >= 0 && pump(p, ended, 0, 30) == SBX_ETIMEDOUT)
            rc = sbx__set_error(err, SBX_ETIMEDOUT, "PTY session %u did not end in 30 s", p->id);
    }
    return rc;
}

int sbx_pty_close(sbx_pty *p, sbx_error **err)
{
    if (!p)
        return SBX_OK;
    int rc = end_session(p, err);
    sbx_pty_free(p);
    return rc;
}

void sbx_pty_free(sbx_pty *p)
{
    if (!p)
        return;
    sbx__pty_home_forget(p);
    if (p->session) {
        /* Lets go without waiting: the provider closes the connection (a detach). */
        sbx__pty_session_close(p->session, 0, -1, NULL);
        sbx__pty_session_unref(p->session);
    }
    if (p->held)
        sbx__sandbox_release(p->held);
    if (p->fd >= 0)
        close(p->fd);
    sbx__proto_reader_free(&p->rd);
    free(p->out[0].buf);
    free(p->out[1].buf);
    free(p->gone_msg);
    free(p->workdir);
    free(p->answer);
    free(p);
}

/*
 * For fuzz/fuzz_pty.c: feeds `data` as what a box's agent sent on a handle's
 * connection (after HELLO), then reads everything out of both streams and
 * waits, as a caller would. No socket: the handle's fd is -1.
 */
void sbx__pty_fuzz(const uint8_t *data, size_t len)
{
    sbx_pty *p = calloc(1, sizeof(*p));
    if (!p)
        return;
    p->fd = -1;
    p->channel = 1;
    /* A small payload limit, so the "too large" path is cheap to reach. */
    sbx__proto_reader_init(&p->rd, 1 << 16);
    if (sbx__proto_reader_feed(&p->rd, data, len) == 0) {
        char buf[4096];
        for (int k = 0; k < 2; k++) {
            size_t n = 0;
            sbx_error *e = NULL;
            while (sbx_pty_read(p, k ? SBX_STREAM_STDERR : SBX_STREAM_STDOUT, buf, sizeof(buf), 0,
                                &n, NULL, &e) == SBX_OK &&
                   n)
                ;
            sbx_error_free(e);
        }
        int code;
        sbx_error *e = NULL;
        sbx_pty_wait(p, 0, &code, &e);
        sbx_error_free(e);
    }
    sbx_pty_free(p);
}

/* --- for the pty exec facade (src/core/pty_exec.c) -------------------------- */

int sbx_pty_closed(const sbx_pty *p) { return p ? p->closed : 1; }

bool sbx__pty_pipes(const sbx_pty *p) { return p->pipes; }

bool sbx__pty_ready(const sbx_pty *p)
{
    if (p->session && !p->closed)
        return sbx__pty_session_ready_to_read(p->session);
    return p->out[0].len || p->out[1].len || p->exited || p->gone || p->closed;
}

int sbx__pty_end(sbx_pty *p, sbx_error **err)
{
    int rc = end_session(p, err);
    p->closed = true;
    return rc;
}

struct sbx__pty_home **sbx__pty_home_slot(sbx_pty *p) { return &p->home; }

/* For tests and fuzzing (pty_exec.c): a handle, no socket, that received `data`. */
sbx_pty *sbx__pty_from_bytes(const uint8_t *data, size_t len, int pipes)
{
    sbx_pty *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->fd = -1;
    p->channel = 1;
    p->id = 1;
    p->pipes = pipes != 0;
    sbx__proto_reader_init(&p->rd, 1 << 16);
    if (sbx__proto_reader_feed(&p->rd, data, len) < 0) {
        sbx_pty_free(p);
        return NULL;
    }
    return p;
}

/* --- one-frame questions (src/core/proc.c) ------------------------------- */

static bool have_answer(const sbx_pty *p, int arg)
{
    (void)arg;
    return p->answered;
}

/* The question on handle `p` (hello done); frees `p`. */
static int ask_on(sbx_pty *p, uint8_t type, uint8_t answer, const char *what, uint8_t **payload,
                  size_t *len, sbx_error **err)
{
    int rc;
    if (p->version < SBX_PROTO_PROCS_VERSION) {
        rc = too_old(p, what, err);
        sbx_pty_free(p);
        return rc;
    }
    p->want = answer;
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    if ((rc = send_frame(p, &b, type, p->channel, err)) < 0) {
        sbx_pty_free(p);
        return rc;
    }
    rc = pump(p, have_answer, 0, 60);
    if (p->answered) {
        *payload = p->answer;
        *len = p->answer_len;
        p->answer = NULL;
        rc = SBX_OK;
    } else if (p->gone) {
        rc = sbx__set_error(err, p->gone_code == SBX_EPTY ? SBX_EIO : p->gone_code, "%s: %s",
                            what, p->gone_msg);
    } else {
        rc = sbx__set_error(err, SBX_ETIMEDOUT, "%s: the box's agent did not answer in 60 s",
                            what);
    }
    sbx_pty_free(p);
    return rc;
}

int sbx__pty_ask(sbx_sandbox *sb, uint8_t type, uint8_t answer, const char *what,
                 uint8_t **payload, size_t *len, sbx_error **err)
{
    if (!sb || !payload || !len)
        return sbx__set_error(err, SBX_EINVAL, "%s: a sandbox is required", what);
    sbx_pty *p;
    int rc = pty_new(sb, &p, err);
    return rc < 0 ? rc : ask_on(p, type, answer, what, payload, len, err);
}

int sbx__pty_ask_fd(int fd, uint8_t type, uint8_t answer, const char *what, uint8_t **payload,
                    size_t *len, sbx_error **err)
{
    sbx_pty *p = calloc(1, sizeof(*p));
    if (!p) {
        close(fd);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    p->fd = fd;
    p->channel = 1;
    sbx__proto_reader_init(&p->rd, SBX_PROTO_MAX_PAYLOAD);
    int rc = hello(p, err);
    if (rc < 0) {
        sbx_pty_free(p);
        return rc;
    }
    return ask_on(p, type, answer, what, payload, len, err);
}
