/*
 * libFuzzer target for the agent's message dispatcher (src/agent/conn.c):
 * the bytes are what a host (or anyone who reaches the agent's socket)
 * sends. They go through the real connection code — frame reader, HELLO
 * negotiation, channel table, PING, FILE_PUT/DATA/FILE_GET/CANCEL with the
 * real transfer code (src/agent/files.c) confined to a private temporary
 * root, PTY_LIST and PS (src/agent/ps.c reads this machine's /proc) — and
 * the agent's answers are read and decoded as the host would.
 *
 * Commands are never run: this file stands in for src/agent/exec.c. Its
 * exec_start decodes the request and resolves the user in the temporary
 * root, as the real one does before fork(), then answers with an EXIT frame.
 * It also stands in for the loop in src/agent/main.c (watch_*, deferred
 * frees), driving the connection's callbacks directly.
 *
 * A test input may write files, but only under the temporary root (which is
 * emptied after each input): the agent's path resolution is what keeps them
 * there, and escaping it would be a finding.
 */
#include "agent/agent.h"
#include "proto/procs.h"
#include "proto/forward.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* --- the loop's side (main.c) ---------------------------------------------- */

struct grave {
    struct grave *next;
    void *p;
    void (*fn)(void *);
};
static struct grave *graves;

void agent_log(const char *fmt, ...)
{
    (void)fmt;
}

int64_t agent_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void watch_init(struct watch *w, int fd, void (*cb)(struct watch *, uint32_t))
{
    w->fd = fd;
    w->events = 0;
    w->cb = cb;
}

void watch_set(struct watch *w, uint32_t events)
{
    w->events = events;
}

void watch_close(struct watch *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    w->events = 0;
}

void agent_defer_free(void *p, void (*fn)(void *))
{
    struct grave *g = malloc(sizeof(*g));
    if (!g)
        return;
    *g = (struct grave){ graves, p, fn };
    graves = g;
}

static void bury(void)
{
    while (graves) {
        struct grave *g = graves;
        graves = g->next;
        g->fn(g->p);
        free(g);
    }
}

/* The one connection under test; main.c keeps a list. */
static struct conn *the_conn;

void conns_pump(void)
{
    struct conn *c = the_conn;
    if (!c || c->dead)
        return;
    if (c->write_failed) {
        conn_close(c, "write failed");
        return;
    }
    for (struct chan *ch = c->chans; ch && !c->throttled && !c->dead;) {
        struct chan *next = ch->next;
        if (ch->kind == CHAN_GET)
            file_get_pump(c, ch);
        ch = next;
    }
}

/* --- forwarded connections (forward.c), never connected [endpoint] ---------- */

/*
 * Stands in for src/agent/forward.c: no TCP connection is made from a fuzz
 * input. The request is decoded and the stream handed over as the real one
 * does (conn_hand_over), then closed.
 */
int forward_start(struct conn *c, uint32_t ch, const sbx_frame *f)
{
    uint32_t port, flags;
    (void)ch;
    if (sbx__msg_forward_decode(f, &port, &flags) < 0)
        return -1;
    uint8_t *pending = NULL, *rest = NULL;
    size_t pending_len = 0, rest_len = 0;
    int fd = conn_hand_over(c, &pending, &pending_len, &rest, &rest_len);
    free(pending);
    free(rest);
    if (fd >= 0)
        close(fd);
    return 0;
}

/* --- commands (exec.c), never run ------------------------------------------ */

int exec_start(struct conn *c, uint32_t ch, const sbx_frame *f)
{
    sbx_msg_exec *m = NULL;
    if (sbx__msg_exec_decode(f, &m) < 0)
        return -1;
    char msg[512] = "";
    struct user_ids u = { 0 };
    int32_t code = 0;
    if (m->user && m->user[0]) {
        if (users_resolve(m->user, &u, msg, sizeof(msg)) < 0)
            code = 125;
        users_free(&u);
    }
    free(m);
    sbx_pbuf b = { 0 };
    sbx__pbuf_begin(&b);
    sbx__msg_exit_encode(&b, code ? SBX_EXIT_FAILED : SBX_EXIT_CODE, code, 0, msg);
    conn_send(c, &b, SBX_MSG_EXIT, ch);
    return 0;
}

/* PTY sessions (src/agent/pty.c, linked in) reach the spawn here: nothing runs. */
const char *agent_shell_path = "/bin/sh";
pid_t exec_spawn(const sbx_msg_exec *m, int in_fd, int out_fd, int err_fd, bool ctty, char *msg,
                 size_t msg_len)
{
    (void)in_fd, (void)out_fd, (void)err_fd, (void)ctty;
    struct user_ids u = { 0 };
    if (m->user && m->user[0] && users_resolve(m->user, &u, msg, msg_len) < 0)
        return -1;
    users_free(&u);
    snprintf(msg, msg_len, "commands are not run under the fuzzer");
    return -1;
}

void exec_stdin(struct conn *c, struct chan *ch, const sbx_frame *f)
{
    (void)c, (void)ch, (void)f;
}
void exec_cancel(struct chan *ch)
{
    (void)ch;
}
void exec_detach(struct chan *ch)
{
    (void)ch;
}
void exec_resume(struct chan *ch)
{
    (void)ch;
}
void exec_output_ack(struct chan *ch, uint64_t n)
{
    (void)ch, (void)n;
}

/* --- the harness ------------------------------------------------------------ */

static char root[64];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag;
    if (ftw->level > 0)
        remove(path);
    return 0;
}

static void remove_root(void)
{
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    rmdir(root);
}

static void setup(void)
{
    if (root[0])
        return;
    snprintf(root, sizeof(root), "%s/sbx-fuzz-agent.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root) || files_set_root(root) < 0)
        abort();
    atexit(remove_root);
}

/* A passwd and group file, so user names resolve through users.c, and a file to download. */
static void seed_root(void)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/etc", root);
    mkdir(p, 0755);
    snprintf(p, sizeof(p), "%s/etc/passwd", root);
    FILE *f = fopen(p, "w");
    if (f) {
        fputs("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n", f);
        fclose(f);
    }
    snprintf(p, sizeof(p), "%s/etc/group", root);
    f = fopen(p, "w");
    if (f) {
        fputs("root:x:0:\nusers:x:100:user\n", f);
        fclose(f);
    }
    snprintf(p, sizeof(p), "%s/file", root);
    f = fopen(p, "w");
    if (f) {
        fputs("contents of a file to download\n", f);
        fclose(f);
    }
}

/* Reads and decodes what the agent sent, as the host would. */
static void drain(int fd, sbx_proto_reader *rd)
{
    for (;;) {
        size_t avail;
        uint8_t *p = sbx__proto_reader_space(rd, 64 * 1024, &avail);
        if (!p)
            return;
        ssize_t n = read(fd, p, avail);
        if (n <= 0)
            return;
        sbx__proto_reader_commit(rd, (size_t)n);
        sbx_frame f;
        while (sbx__proto_reader_next(rd, &f) == 1) {
            sbx_msg_status *s = NULL;
            if ((f.type == SBX_MSG_ERROR || f.type == SBX_MSG_STATUS) &&
                sbx__msg_status_decode(&f, &s) == 0)
                free(s);
            sbx_msg_exit *x = NULL;
            if (f.type == SBX_MSG_EXIT && sbx__msg_exit_decode(&f, &x) == 0)
                free(x);
            /* The listings the agent builds must decode within their bounds. */
            sbx_session_entry *se = NULL;
            sbx_ps_entry *pe = NULL;
            size_t ne = 0;
            uint32_t pf = 0;
            if (f.type == SBX_MSG_PTY_SESSIONS && sbx__msg_pty_sessions_decode(&f, &se, &ne) < 0)
                abort();
            if (f.type == SBX_MSG_PS_LIST && sbx__msg_ps_decode(&f, &pf, &pe, &ne) < 0)
                abort();
            free(se);
            free(pe);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    seed_root();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        abort();
    struct conn *c = the_conn = conn_new(sv[0], sv[0]);
    if (!c)
        abort();
    sbx_proto_reader host;
    sbx__proto_reader_init(&host, SBX_PROTO_MAX_PAYLOAD);
    /* Feed in uneven pieces, as a socket delivers them; the agent reads what is there. */
    size_t off = 0, step = 7;
    while (off < size && !c->dead) {
        size_t n = size - off < step ? size - off : step;
        ssize_t w = write(sv[1], data + off, n);
        if (w > 0)
            off += (size_t)w;
        c->in.cb(&c->in, EPOLLIN | (c->qhead ? EPOLLOUT : 0));
        if (!c->dead)
            conns_pump();
        drain(sv[1], &host);
        step = step * 2 + 1;
    }
    /* Let pending downloads finish, then the host hangs up. */
    for (int i = 0; i < 64 && !c->dead && (c->qhead || c->chans); i++) {
        conns_pump();
        if (!c->dead && c->qhead)
            c->in.cb(&c->in, EPOLLOUT);
        drain(sv[1], &host);
    }
    close(sv[1]);
    if (!c->dead)
        c->in.cb(&c->in, EPOLLIN);
    if (!c->dead)
        conn_close(c, NULL);
    the_conn = NULL;
    bury();
    sbx__proto_reader_free(&host);
    nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
