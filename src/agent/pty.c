/*
 * PTY sessions: a command on a terminal (one merged stream) or on pipes
 * (stdout and stderr apart) that lives in the agent, not in a stream. The
 * stream that opened a session holds it; another stream can attach to it
 * (replaying from a byte offset), and with takeover evict the holder. A
 * stream that goes away only detaches: the session runs on, up to the
 * box's end, and its output stays in a bounded window.
 *
 * Each output stream of a session is a ring of SBX_PTY_WINDOW bytes with an
 * absolute offset (bytes ever produced), so a holder that attaches with
 * `since` gets what the window still holds from there, then live bytes. The
 * command never blocks on a slow holder: the ring keeps the newest bytes.
 */
#include "agent/agent.h"
#include "proto/pty.h"
#include "proto/procs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

struct ring {
    uint8_t *buf;  /* SBX_PTY_WINDOW bytes, allocated on first output */
    uint64_t end;  /* bytes ever written */
    bool eof;
};

struct holder;

struct session {
    uint32_t id;
    pid_t pid;
    bool pipes;
    bool exited;
    int status;
    struct watch out, err, in; /* the terminal's master (out) or the three pipes */
    struct ring r[2];          /* 0: terminal or stdout, 1: stderr */
    struct holder *holder;
    struct session *next;
    int64_t started_ms;                        /* unix time, for PTY_LIST */
    char command[SBX_PROCS_COMMAND_MAX + 1];   /* what runs, cut, for PTY_LIST */
};

/* A stream's channel on a session. */
struct holder {
    struct chan ch; /* first: a struct chan * of the connection is a struct holder * */
    struct conn *conn;
    struct session *s;
    bool opener;      /* CANCEL ends the session (else it only detaches) */
    bool keep;        /* PTY_ATTACH_KEEP: reading the end does not forget the session */
    uint64_t sent[2]; /* next offset to send per stream */
};

static struct session *sessions;
static size_t n_sessions;
static uint32_t next_id = 1;

#define S_OF(w, member) ((struct session *)((char *)(w)-offsetof(struct session, member)))

static uint64_t ring_start(const struct ring *r)
{
    return r->end > SBX_PTY_WINDOW ? r->end - SBX_PTY_WINDOW : 0;
}

static void ring_put(struct ring *r, const uint8_t *p, size_t n)
{
    if (!r->buf && !(r->buf = malloc(SBX_PTY_WINDOW))) {
        r->end += n; /* out of memory: these bytes are lost, the offsets stay true */
        return;
    }
    if (n > SBX_PTY_WINDOW) {
        r->end += n - SBX_PTY_WINDOW;
        p += n - SBX_PTY_WINDOW;
        n = SBX_PTY_WINDOW;
    }
    size_t at = (size_t)(r->end % SBX_PTY_WINDOW);
    size_t first = n < SBX_PTY_WINDOW - at ? n : SBX_PTY_WINDOW - at;
    memcpy(r->buf + at, p, first);
    memcpy(r->buf, p + first, n - first);
    r->end += n;
}

/*
 * Ends everything of a session: its process group, and every other process
 * of its terminal session (a shell's background jobs have groups of their
 * own and would keep the terminal, and so the session, open).
 */
static void kill_session(const struct session *s)
{
    kill(-s->pid, SIGKILL);
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 1)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = 0;
        /* pid (comm) state ppid pgrp session: comm may hold spaces, so start after its ')'. */
        const char *rp = strrchr(buf, ')');
        int ppid, pgrp, sid;
        char st;
        if (rp && sscanf(rp + 1, " %c %d %d %d", &st, &ppid, &pgrp, &sid) == 4 && sid == s->pid)
            kill((pid_t)pid, SIGKILL);
    }
    closedir(d);
}

static void send_status(struct conn *c, uint32_t ch, int errnum, const char *msg)
{
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_status_encode(&b, errnum, msg);
    conn_send(c, &b, SBX_MSG_STATUS, ch);
}

static bool session_done(const struct session *s)
{
    return s->exited && s->r[0].eof && (!s->pipes || s->r[1].eof);
}

static void session_free(struct session *s)
{
    for (struct session **pp = &sessions; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            n_sessions--;
            break;
        }
    }
    watch_close(&s->out);
    watch_close(&s->err);
    watch_close(&s->in);
    free(s->r[0].buf);
    free(s->r[1].buf);
    agent_defer_free(s, free);
}

/* Unlinks the holder from its stream and session; the channel is over. */
static void holder_end(struct holder *h)
{
    if (h->conn)
        conn_chan_remove(h->conn, &h->ch);
    if (h->s && h->s->holder == h)
        h->s->holder = NULL;
    h->s = NULL;
    h->conn = NULL;
    agent_defer_free(h, free);
}

static void send_exit(struct holder *h)
{
    const struct session *s = h->s;
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    if (WIFSIGNALED(s->status))
        sbx__msg_exit_encode(&b, SBX_EXIT_SIGNAL, WTERMSIG(s->status), 0, "");
    else
        sbx__msg_exit_encode(&b, SBX_EXIT_CODE, WEXITSTATUS(s->status), 0, "");
    conn_send(h->conn, &b, SBX_MSG_EXIT, h->ch.id);
}

/*
 * Sends the holder what it has not seen yet, as far as its stream's queue
 * allows; once the session is over and everything went out, EXIT ends the
 * channel and the session is forgotten.
 */
static void pump(struct session *s)
{
    struct holder *h = s->holder;
    if (!h || !h->conn)
        return;
    for (int k = 0; k < 2; k++) {
        struct ring *r = &s->r[k];
        if (h->sent[k] < ring_start(r) || !r->buf)
            h->sent[k] = r->buf ? ring_start(r) : r->end; /* gone from the window (or never kept) */
        while (h->sent[k] < r->end && !h->conn->throttled && !h->conn->dead) {
            uint64_t n = r->end - h->sent[k];
            if (n > SBX_PROTO_CHUNK)
                n = SBX_PROTO_CHUNK;
            size_t at = (size_t)(h->sent[k] % SBX_PTY_WINDOW);
            if (n > SBX_PTY_WINDOW - at)
                n = SBX_PTY_WINDOW - at;
            sbx_pbuf b = {0};
            sbx__pbuf_begin(&b);
            sbx__pbuf_u64(&b, h->sent[k]);
            sbx__pbuf_bytes(&b, r->buf + at, (size_t)n);
            conn_send(h->conn, &b, k ? SBX_MSG_PTY_ERR : SBX_MSG_PTY_OUT, h->ch.id);
            h->sent[k] += n;
        }
    }
    if (session_done(s) && h->sent[0] == s->r[0].end && h->sent[1] == s->r[1].end &&
        !h->conn->dead) {
        bool keep = h->keep;
        send_exit(h);
        holder_end(h);
        /* A KEEP holder only looked: the session stays listed for a later wait. */
        if (!keep)
            session_free(s);
    }
}

static void read_out(struct session *s, struct watch *w, int k)
{
    uint8_t buf[65536];
    for (int i = 0; i < 16; i++) {
        ssize_t n = read(w->fd, buf, sizeof(buf));
        if (n > 0) {
            ring_put(&s->r[k], buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        /* EOF, or EIO from a master whose terminal nobody holds open any more. */
        s->r[k].eof = true;
        watch_close(w);
        break;
    }
    pump(s);
}

static void on_out(struct watch *w, uint32_t events)
{
    (void)events;
    read_out(S_OF(w, out), w, 0);
}

static void on_err(struct watch *w, uint32_t events)
{
    (void)events;
    read_out(S_OF(w, err), w, 1);
}

static void on_in(struct watch *w, uint32_t events)
{
    (void)w, (void)events; /* stdin is written directly; this watch only owns the pipe */
}

static struct session *find(uint32_t id)
{
    for (struct session *s = sessions; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

static struct holder *holder_new(struct conn *c, uint32_t ch, struct session *s, bool opener)
{
    struct holder *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->ch.id = ch;
    h->ch.kind = CHAN_PTY;
    h->conn = c;
    h->s = s;
    h->opener = opener;
    conn_chan_add(c, &h->ch);
    s->holder = h;
    return h;
}

static void send_info(struct holder *h)
{
    sbx_msg_pty_info info = {h->s->id, h->sent[0], h->sent[1]};
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_pty_info_encode(&b, &info);
    conn_send(h->conn, &b, SBX_MSG_PTY_INFO, h->ch.id);
}

static void send_failed(struct conn *c, uint32_t ch, const char *msg)
{
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_exit_encode(&b, SBX_EXIT_FAILED, 0, 0, msg);
    conn_send(c, &b, SBX_MSG_EXIT, ch);
}

/* The command as PTY_LIST shows it: a shell command as given, an argv joined by spaces. */
static void describe(struct session *s, const sbx_msg_exec *e)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    s->started_ms = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    size_t at = 0;
    for (size_t i = 0; e->argv && e->argv[i] && at < SBX_PROCS_COMMAND_MAX; i++) {
        int n = snprintf(s->command + at, sizeof(s->command) - at, "%s%s", i ? " " : "",
                         e->argv[i]);
        if (n < 0)
            break;
        at += (size_t)n;
    }
}

static int set_nonblock(int fd) { return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static int pty_open(struct conn *c, uint32_t ch, const sbx_frame *f)
{
    sbx_msg_pty_open m = {0};
    if (sbx__msg_pty_open_decode(f, &m) < 0)
        return -1;
    char msg[512];
    if (n_sessions >= SBX_PROTO_PTY_SESSIONS) {
        snprintf(msg, sizeof(msg),
                 "this box already has %d PTY sessions, the most it keeps; close some first",
                 SBX_PROTO_PTY_SESSIONS);
        send_failed(c, ch, msg);
        sbx__msg_pty_open_free(&m);
        return 0;
    }
    sbx_msg_exec e = *m.exec;
    char *shell_argv[] = {(char *)agent_shell_path, NULL};
    bool pipes = e.flags & SBX_PTY_PIPES;
    if (e.flags & SBX_PTY_BOX_SHELL) {
        /* The box's shell, interactive: its path, so execve needs no PATH search. */
        e.argv = shell_argv;
        e.flags &= ~(uint32_t)SBX_EXEC_SHELL;
    }
    struct session *s = calloc(1, sizeof(*s));
    int fds[2] = {-1, -1}; /* the terminal: master, slave */
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    pid_t pid = -1;
    if (!s) {
        snprintf(msg, sizeof(msg), "out of memory");
        goto failed;
    }
    watch_init(&s->out, -1, on_out);
    watch_init(&s->err, -1, on_err);
    watch_init(&s->in, -1, on_in);
    if (!pipes) {
        struct winsize ws = {.ws_row = (unsigned short)(m.rows ? m.rows : 24),
                             .ws_col = (unsigned short)(m.cols ? m.cols : 80)};
        if (openpty(&fds[0], &fds[1], NULL, NULL, &ws) < 0) {
            snprintf(msg, sizeof(msg), "cannot open a terminal: %s", strerror(errno));
            goto failed;
        }
        fcntl(fds[0], F_SETFD, FD_CLOEXEC);
        fcntl(fds[1], F_SETFD, FD_CLOEXEC);
        pid = exec_spawn(&e, fds[1], fds[1], fds[1], true, msg, sizeof(msg));
        if (pid < 0)
            goto failed;
        close(fds[1]);
        fds[1] = -1;
        set_nonblock(fds[0]);
        watch_init(&s->out, fds[0], on_out);
        fds[0] = -1;
        s->r[1].eof = true;
    } else {
        if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 ||
            pipe2(perr, O_CLOEXEC) < 0) {
            snprintf(msg, sizeof(msg), "cannot create pipes: %s", strerror(errno));
            goto failed;
        }
        pid = exec_spawn(&e, pin[0], pout[1], perr[1], false, msg, sizeof(msg));
        if (pid < 0)
            goto failed;
        close(pin[0]);
        close(pout[1]);
        close(perr[1]);
        pin[0] = pout[1] = perr[1] = -1;
        set_nonblock(pout[0]);
        set_nonblock(perr[0]);
        set_nonblock(pin[1]);
        watch_init(&s->out, pout[0], on_out);
        watch_init(&s->err, perr[0], on_err);
        watch_init(&s->in, pin[1], on_in);
        pout[0] = perr[0] = pin[1] = -1;
        watch_set(&s->err, EPOLLIN);
    }
    watch_set(&s->out, EPOLLIN);
    s->pid = pid;
    s->pipes = pipes;
    s->id = next_id++;
    describe(s, &e);
    s->next = sessions;
    sessions = s;
    n_sessions++;
    struct holder *h = holder_new(c, ch, s, true);
    if (!h) {
        /* Nobody can ever reach it: end it (reap_all collects it). */
        kill(-pid, SIGKILL);
        s->holder = NULL;
        sbx__msg_pty_open_free(&m);
        snprintf(msg, sizeof(msg), "out of memory");
        send_failed(c, ch, msg);
        return 0;
    }
    send_info(h);
    sbx__msg_pty_open_free(&m);
    return 0;

failed:
    send_failed(c, ch, msg);
    for (int i = 0; i < 2; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        if (pin[i] >= 0)
            close(pin[i]);
        if (pout[i] >= 0)
            close(pout[i]);
        if (perr[i] >= 0)
            close(perr[i]);
    }
    free(s);
    sbx__msg_pty_open_free(&m);
    return 0;
}

static int pty_attach(struct conn *c, uint32_t ch, const sbx_frame *f)
{
    sbx_msg_pty_attach a;
    if (sbx__msg_pty_attach_decode(f, &a) < 0)
        return -1;
    struct session *s = find(a.id);
    char msg[256];
    if (!s) {
        snprintf(msg, sizeof(msg), "no PTY session %u in this box (it ended or never was)", a.id);
        send_status(c, ch, ENOENT, msg);
        return 0;
    }
    if (s->holder && !(a.flags & SBX_PTY_ATTACH_TAKEOVER)) {
        snprintf(msg, sizeof(msg),
                 "PTY session %u is attached to another client; attach with takeover to take it",
                 a.id);
        send_status(c, ch, EBUSY, msg);
        return 0;
    }
    if (s->holder) {
        struct holder *old = s->holder;
        snprintf(msg, sizeof(msg), "PTY session %u was taken over by another client", a.id);
        send_status(old->conn, old->ch.id, EBUSY, msg);
        holder_end(old);
    }
    struct holder *h = holder_new(c, ch, s, false);
    if (!h) {
        send_status(c, ch, ENOMEM, "out of memory");
        return 0;
    }
    h->keep = a.flags & SBX_PTY_ATTACH_KEEP;
    for (int k = 0; k < 2; k++) {
        uint64_t start = ring_start(&s->r[k]);
        h->sent[k] = a.since < start ? start : a.since > s->r[k].end ? s->r[k].end : a.since;
    }
    send_info(h);
    pump(s);
    return 0;
}

static void write_stdin(struct session *s, const sbx_frame *f)
{
    int fd = s->pipes ? s->in.fd : s->out.fd;
    if (fd < 0)
        return;
    if (f->len == 0) {
        /* EOF: a pipe closes; a terminal gets its EOF character, as a keyboard would send. */
        if (s->pipes) {
            watch_close(&s->in);
            return;
        }
        struct termios t;
        uint8_t eof = tcgetattr(fd, &t) == 0 ? t.c_cc[VEOF] : 4;
        ssize_t r = write(fd, &eof, 1);
        (void)r;
        return;
    }
    /*
     * A terminal's input queue is small (4 KiB). A command that does not
     * read gets up to 100 ms per frame to make room, then the rest of the
     * frame is dropped with a log line rather than stalling every other
     * session of the agent.
     */
    size_t off = 0;
    while (off < f->len) {
        ssize_t n = write(fd, f->payload + off, f->len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, 100) > 0)
                continue;
        }
        if (n <= 0) {
            agent_log("PTY session %u: %zu input bytes dropped", s->id, f->len - off);
            return;
        }
        off += (size_t)n;
    }
}

int pty_frame(struct conn *c, struct chan *ch, const sbx_frame *f)
{
    if (f->type == SBX_MSG_PTY_OPEN)
        return pty_open(c, f->channel, f);
    if (f->type == SBX_MSG_PTY_ATTACH)
        return pty_attach(c, f->channel, f);
    struct holder *h = ch && ch->kind == CHAN_PTY ? (struct holder *)ch : NULL;
    struct session *s = h ? h->s : NULL;
    switch (f->type) {
    case SBX_MSG_PTY_RESIZE: {
        uint32_t rows, cols;
        if (sbx__msg_pty_resize_decode(f, &rows, &cols) < 0)
            return -1;
        if (s && !s->pipes && s->out.fd >= 0) {
            struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
            /* The kernel sends SIGWINCH to the terminal's foreground group. */
            ioctl(s->out.fd, TIOCSWINSZ, &ws);
        }
        return 0;
    }
    case SBX_MSG_PTY_SIGNAL: {
        uint32_t sig;
        if (sbx__msg_pty_signal_decode(f, &sig) < 0)
            return -1;
        if (s && !s->exited) {
            /* The session's group: on a terminal, the foreground job the user sees. */
            pid_t fg = !s->pipes && s->out.fd >= 0 ? tcgetpgrp(s->out.fd) : -1;
            if (fg <= 0 || kill(-fg, (int)sig) < 0)
                kill(-s->pid, (int)sig);
        }
        return 0;
    }
    case SBX_MSG_STDIN:
        if (s)
            write_stdin(s, f);
        return 0;
    case SBX_MSG_PTY_DETACH:
        if (h) {
            send_status(c, h->ch.id, 0, "");
            holder_end(h);
        }
        return 0;
    case SBX_MSG_CANCEL:
        if (!h)
            return 0;
        if (!h->opener || !s) {
            send_status(c, h->ch.id, 0, "");
            holder_end(h);
            return 0;
        }
        /* Close by the opener: end the session; EXIT follows when it is gone. */
        kill_session(s);
        return 0;
    default:
        return 0;
    }
}

void pty_detach(struct chan *ch)
{
    struct holder *h = (struct holder *)ch;
    /* The stream is gone (its channel list already let go of this one). */
    h->conn = NULL;
    if (h->s && h->s->holder == h)
        h->s->holder = NULL;
    h->s = NULL;
    agent_defer_free(h, free);
}

void pty_resume(struct chan *ch)
{
    struct holder *h = (struct holder *)ch;
    if (h->s)
        pump(h->s);
}

bool pty_reaped(pid_t pid, int status)
{
    for (struct session *s = sessions; s; s = s->next) {
        if (s->pid != pid || s->exited)
            continue;
        s->exited = true;
        s->status = status;
        /*
         * The session ends once its output does too: pipes at EOF, a
         * terminal's master at EIO, when nobody holds the terminal any
         * more (a background job that keeps it open keeps the session).
         */
        pump(s);
        return true;
    }
    return false;
}

void pty_kill_all(void)
{
    for (struct session *s = sessions; s; s = s->next)
        kill_session(s);
}

void pty_list(struct conn *c, uint32_t ch)
{
    sbx_session_entry *e = calloc(n_sessions ? n_sessions : 1, sizeof(*e));
    size_t n = 0;
    for (struct session *s = sessions; e && s && n < n_sessions; s = s->next, n++) {
        e[n].id = s->id;
        e[n].pid = (uint32_t)s->pid;
        e[n].flags = (s->pipes ? SBX_SESSION_PIPES : 0) | (s->holder ? SBX_SESSION_HELD : 0) |
                     (s->exited ? SBX_SESSION_ENDED : 0);
        if (s->exited)
            e[n].status = WIFSIGNALED(s->status) ? 128u + (uint32_t)WTERMSIG(s->status)
                                                 : (uint32_t)WEXITSTATUS(s->status);
        e[n].started_ms = (uint64_t)s->started_ms;
        e[n].out_bytes = s->r[0].end;
        e[n].err_bytes = s->r[1].end;
        memcpy(e[n].command, s->command, sizeof(e[n].command));
    }
    if (!e) {
        send_status(c, ch, ENOMEM, "out of memory");
        return;
    }
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_pty_sessions_encode(&b, e, n);
    free(e);
    conn_send(c, &b, SBX_MSG_PTY_SESSIONS, ch);
}
