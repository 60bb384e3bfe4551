/*
 * Commands. Each runs in its own session and process group (setsid), so a
 * timeout or cancel kills the whole group with one kill(-pgid). Output is
 * read from pipes and forwarded as STDOUT/STDERR frames up to the command's
 * cap (the rest is read and dropped, so the command never blocks on a full
 * pipe). The channel ends with one EXIT frame once the process was reaped
 * and its pipes are drained.
 *
 * Starting a command never waits for it: after fork() the agent goes back to
 * its loop at once, and the child's report pipe (close-on-exec) is one more
 * event. EOF with no data there means execve succeeded; a struct child_err
 * means setup or execve failed, and the EXIT frame then carries that error
 * instead of the child's _exit(125). So N concurrent execs cost N forks in
 * the agent (~0.1 ms each), not N complete execs one after the other.
 */
#include "agent/agent.h"
#include "agent/tar.h"

#include <errno.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

enum stage { STAGE_CHDIR = 1, STAGE_USER, STAGE_EXEC };
struct child_err {
    int stage;
    int err;
};

struct exec {
    struct chan ch; /* first: a struct chan * from the connection is a struct exec * */
    struct exec *next_all;
    struct conn *conn; /* NULL once the stream closed */
    pid_t pid;
    bool exited;
    int status;
    struct watch out, err, in;
    struct watch rep; /* the child's report pipe: open until execve or its failure */
    struct child_err ce;
    size_t ce_got;       /* bytes of ce read so far; sizeof(ce): setup or execve failed */
    char *argv0, *cwd, *user; /* for the failure messages */
    bool shell;
    bool out_paused, err_paused;
    struct obuf *inq;
    bool in_eof;
    uint64_t in_taken; /* stdin bytes written to the pipe and not yet acknowledged (v2) */
    uint64_t out_unacked; /* output sent that the host has not said its caller took (v5) */
    uint64_t limit, n_out, n_err;
    bool trunc_out, trunc_err;
    int64_t deadline; /* monotonic ms, -1: none */
    bool timed_out, cancelled;
    bool finished; /* EXIT sent (or dropped), memory queued for release */
    long long oom_before;
};

static struct exec *all_execs;

#define EXEC_OF(w, member) ((struct exec *)((char *)(w)-offsetof(struct exec, member)))

/* The box's oom_kill counter (cgroup v2 memory.events, v1 memory.oom_control); -1 if hidden. */
static long long read_oom_kills(void)
{
    static const char *const files[] = {"/sys/fs/cgroup/memory.events",
                                        "/sys/fs/cgroup/memory/memory.oom_control"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        int fd = open(files[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        char buf[1024];
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = 0;
        for (char *line = buf; line && *line;) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = 0;
            if (strncmp(line, "oom_kill ", 9) == 0)
                return strtoll(line + 9, NULL, 10);
            line = nl ? nl + 1 : NULL;
        }
    }
    return -1;
}

static void send_exit(struct conn *c, uint32_t ch, uint8_t kind, int32_t code, uint32_t flags,
                      const char *msg)
{
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_exit_encode(&b, kind, code, flags, msg);
    conn_send(c, &b, SBX_MSG_EXIT, ch);
}

static void exec_free(void *p)
{
    struct exec *e = p;
    while (e->inq) {
        struct obuf *o = e->inq;
        e->inq = o->next;
        free(o->data);
        free(o);
    }
    free(e->argv0);
    free(e->cwd);
    free(e->user);
    free(e);
}

static void unlink_all(struct exec *e)
{
    for (struct exec **pp = &all_execs; *pp; pp = &(*pp)->next_all) {
        if (*pp == e) {
            *pp = e->next_all;
            return;
        }
    }
}

/* Sends EXIT once the process is reaped and both pipes are done. */
/* The EXIT for a command that never ran: what setup or execve said. */
static void send_start_failure(struct exec *e)
{
    const struct child_err *ce = &e->ce;
    char msg[600];
    if (ce->stage == STAGE_EXEC && !e->shell &&
        (ce->err == ENOENT || ce->err == EACCES || ce->err == ENOEXEC)) {
        /* What a shell would say and return for a command it cannot run. */
        int len = snprintf(msg, sizeof(msg), "sbx-agent: %s: %s\n", e->argv0,
                           ce->err == ENOENT ? "command not found" : strerror(ce->err));
        conn_send_raw(e->conn, SBX_MSG_STDERR, e->ch.id, msg,
                      len < (int)sizeof(msg) ? (size_t)len : sizeof(msg) - 1);
        send_exit(e->conn, e->ch.id, SBX_EXIT_CODE, ce->err == ENOENT ? 127 : 126, 0, "");
        return;
    }
    if (ce->stage == STAGE_CHDIR)
        snprintf(msg, sizeof(msg), "cannot change directory to '%s': %s", e->cwd,
                 strerror(ce->err));
    else if (ce->stage == STAGE_USER)
        snprintf(msg, sizeof(msg), "cannot switch to user '%s': %s", e->user, strerror(ce->err));
    else
        snprintf(msg, sizeof(msg), "cannot run %s: %s", e->shell ? agent_shell_path : e->argv0,
                 strerror(ce->err));
    send_exit(e->conn, e->ch.id, SBX_EXIT_FAILED, 0, 0, msg);
}

static void maybe_finish(struct exec *e)
{
    if (e->finished || !e->exited || e->out.fd >= 0 || e->err.fd >= 0 || e->rep.fd >= 0)
        return;
    e->finished = true;
    watch_close(&e->in);
    if (e->conn && e->ce_got == sizeof(e->ce)) {
        send_start_failure(e);
        conn_chan_remove(e->conn, &e->ch);
    } else if (e->conn) {
        uint32_t flags = (e->trunc_out ? SBX_EXITF_STDOUT_TRUNCATED : 0) |
                         (e->trunc_err ? SBX_EXITF_STDERR_TRUNCATED : 0);
        uint8_t kind;
        int32_t code;
        const char *msg = "";
        char buf[128];
        if (e->cancelled) {
            kind = SBX_EXIT_SIGNAL;
            code = SIGKILL;
            flags |= SBX_EXITF_CANCELLED;
            msg = "cancelled";
        } else if (e->timed_out) {
            kind = SBX_EXIT_TIMEOUT;
            code = SIGKILL;
            msg = "timed out: the process group was killed";
        } else if (WIFSIGNALED(e->status)) {
            kind = SBX_EXIT_SIGNAL;
            code = WTERMSIG(e->status);
            /* A SIGKILL while the cgroup's oom_kill count rose is the OOM killer's work. */
            if (code == SIGKILL && e->oom_before >= 0) {
                long long now = read_oom_kills();
                if (now > e->oom_before) {
                    flags |= SBX_EXITF_OOM;
                    snprintf(buf, sizeof(buf), "killed by the out-of-memory killer (oom_kill %lld)",
                             now);
                    msg = buf;
                }
            }
        } else {
            kind = SBX_EXIT_CODE;
            code = WEXITSTATUS(e->status);
        }
        send_exit(e->conn, e->ch.id, kind, code, flags, msg);
        conn_chan_remove(e->conn, &e->ch);
    }
    unlink_all(e);
    agent_defer_free(e, exec_free);
}

/* Reads one pipe: forwards up to the cap, drops the rest; EOF closes it. */
static void pump_output(struct exec *e, struct watch *w, bool is_err)
{
    bool *paused = is_err ? &e->err_paused : &e->out_paused;
    for (int round = 0; round < 8 && w->fd >= 0; round++) {
        if (e->conn && (e->conn->throttled || (e->conn->version >= 5 &&
                                                e->out_unacked >= SBX_PROTO_OUTPUT_WINDOW))) {
            /*
             * The host reads slower than the command writes (the whole
             * connection), or this exec's caller does (its window is full):
             * stop reading (backpressure) until the host catches up.
             */
            *paused = true;
            watch_set(w, 0);
            return;
        }
        static uint8_t buf[SBX_PROTO_CHUNK];
        ssize_t n = read(w->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /*
             * After the command exited, an empty pipe is the end even if a
             * background child still holds it open: do not wait on it.
             */
            if (!e->exited)
                return;
            n = 0;
        }
        if (n <= 0) {
            watch_close(w);
            maybe_finish(e);
            return;
        }
        uint64_t *count = is_err ? &e->n_err : &e->n_out;
        size_t keep = (size_t)n;
        if (e->limit && *count + keep > e->limit) {
            keep = (size_t)(e->limit - *count);
            if (is_err)
                e->trunc_err = true;
            else
                e->trunc_out = true;
        }
        *count += keep;
        if (keep && e->conn) {
            conn_send_raw(e->conn, is_err ? SBX_MSG_STDERR : SBX_MSG_STDOUT, e->ch.id, buf, keep);
            e->out_unacked += keep;
        }
    }
}

static void on_out(struct watch *w, uint32_t ev)
{
    (void)ev;
    pump_output(EXEC_OF(w, out), w, false);
}

static void on_err(struct watch *w, uint32_t ev)
{
    (void)ev;
    pump_output(EXEC_OF(w, err), w, true);
}

/* Reads the child's report: a struct child_err, or EOF alone once execve succeeded. */
static void read_report(struct exec *e)
{
    while (e->rep.fd >= 0) {
        ssize_t n = read(e->rep.fd, (char *)&e->ce + e->ce_got, sizeof(e->ce) - e->ce_got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0 || (e->ce_got += (size_t)n) == sizeof(e->ce)) {
            watch_close(&e->rep);
            maybe_finish(e);
            return;
        }
    }
}

static void on_rep(struct watch *w, uint32_t ev)
{
    (void)ev;
    read_report(EXEC_OF(w, rep));
}

static void flush_stdin(struct exec *e)
{
    while (e->inq && e->in.fd >= 0) {
        struct obuf *o = e->inq;
        ssize_t n = write(e->in.fd, o->data + o->off, o->len - o->off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            watch_set(&e->in, EPOLLOUT);
            return;
        }
        if (n < 0) {
            /* EPIPE: the command closed its stdin; the rest is dropped. */
            watch_close(&e->in);
            break;
        }
        o->off += (size_t)n;
        e->in_taken += (uint64_t)n;
        if (o->off == o->len) {
            e->inq = o->next;
            free(o->data);
            free(o);
        }
    }
    /*
     * Version 2: tell the host what the command took, so it sends at most a
     * window ahead and the queue above stays small whatever the caller feeds
     * in. Acknowledged every 256 KiB, and whenever the queue runs dry.
     */
    if (e->conn && e->conn->version >= 2 && e->in_taken &&
        (e->in_taken >= SBX_PROTO_CHUNK || !e->inq)) {
        sbx_pbuf b = {0};
        sbx__pbuf_begin(&b);
        sbx__msg_u64_encode(&b, e->in_taken);
        conn_send(e->conn, &b, SBX_MSG_STDIN_ACK, e->ch.id);
        e->in_taken = 0;
    }
    if (!e->inq && e->in_eof)
        watch_close(&e->in);
    else if (e->in.fd >= 0 && !e->inq)
        watch_set(&e->in, 0);
}

static void on_in(struct watch *w, uint32_t ev)
{
    (void)ev;
    flush_stdin(EXEC_OF(w, in));
}

void exec_stdin(struct conn *c, struct chan *ch, const sbx_frame *f)
{
    (void)c;
    struct exec *e = (struct exec *)ch;
    if (f->len == 0) {
        e->in_eof = true;
    } else if (e->in.fd >= 0) {
        struct obuf *o = malloc(sizeof(*o));
        uint8_t *d = malloc(f->len);
        if (!o || !d) {
            free(o);
            free(d);
            return;
        }
        memcpy(d, f->payload, f->len);
        *o = (struct obuf){NULL, d, f->len, 0};
        struct obuf **pp = &e->inq;
        while (*pp)
            pp = &(*pp)->next;
        *pp = o;
    }
    flush_stdin(e);
}

static void kill_group(struct exec *e)
{
    if (e->exited)
        return;
    kill(-e->pid, SIGKILL);
    kill(e->pid, SIGKILL);
}

void exec_cancel(struct chan *ch)
{
    struct exec *e = (struct exec *)ch;
    if (!e->exited)
        e->cancelled = true;
    kill_group(e);
}

void exec_detach(struct chan *ch)
{
    struct exec *e = (struct exec *)ch;
    e->conn = NULL;
    kill_group(e);
}

/* OUTPUT_ACK (version 5): the caller took `n` bytes; a paused pipe may go on. */
void exec_output_ack(struct chan *ch, uint64_t n)
{
    struct exec *e = (struct exec *)ch;
    /* More than was sent is the host's mistake: the window is then simply empty. */
    e->out_unacked -= n < e->out_unacked ? n : e->out_unacked;
    if (e->conn && !e->conn->throttled && e->out_unacked < SBX_PROTO_OUTPUT_WINDOW)
        exec_resume(ch);
}

void exec_resume(struct chan *ch)
{
    struct exec *e = (struct exec *)ch;
    if (e->out_paused && e->out.fd >= 0) {
        e->out_paused = false;
        watch_set(&e->out, EPOLLIN);
        pump_output(e, &e->out, false);
    }
    if (e->err_paused && e->err.fd >= 0) {
        e->err_paused = false;
        watch_set(&e->err, EPOLLIN);
        pump_output(e, &e->err, true);
    }
}

bool exec_reaped(pid_t pid, int status)
{
    for (struct exec *e = all_execs; e; e = e->next_all) {
        if (e->pid != pid || e->exited)
            continue;
        e->exited = true;
        e->status = status;
        /* The child is gone, so its report is complete (or EOF): read it now. */
        read_report(e);
        /* Drain what the command left in its pipes, then finish. */
        if (e->out.fd >= 0 && !e->out_paused)
            pump_output(e, &e->out, false);
        if (e->err.fd >= 0 && !e->err_paused)
            pump_output(e, &e->err, true);
        maybe_finish(e);
        return true;
    }
    return false;
}

int exec_check_timeouts(void)
{
    int64_t now = agent_now_ms(), next = -1;
    for (struct exec *e = all_execs; e; e = e->next_all) {
        if (e->exited || e->deadline < 0 || e->timed_out || e->cancelled)
            continue;
        if (now >= e->deadline) {
            e->timed_out = true;
            kill_group(e);
            continue;
        }
        if (next < 0 || e->deadline - now < next)
            next = e->deadline - now;
    }
    return next < 0 ? -1 : (int)(next > 1 << 30 ? 1 << 30 : next);
}

void exec_kill_all(void)
{
    for (struct exec *e = all_execs; e; e = e->next_all)
        kill_group(e);
}

/* --- spawning ------------------------------------------------------------ */

/* One "K=V" of an environment being merged, with where it came in. */
struct env_ent {
    char *kv;
    size_t klen;
    size_t pos;
};

static int env_ent_cmp(const void *pa, const void *pb)
{
    const struct env_ent *a = pa, *b = pb;
    size_t n = a->klen < b->klen ? a->klen : b->klen;
    int c = memcmp(a->kv, b->kv, n);
    if (c)
        return c;
    if (a->klen != b->klen)
        return a->klen < b->klen ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static int env_pos_cmp(const void *pa, const void *pb)
{
    const struct env_ent *a = pa, *b = pb;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/*
 * Merges env[0..n) in place, as setting each entry in turn would: a later
 * "K=V" replaces an earlier one's value at the earlier one's place. Sorted
 * by key, not compared pairwise: the request's env is the box's input, and
 * 100,000 variables compared with each other took the agent minutes. Returns
 * the new count (env[count] is NULL), or -1 when out of memory.
 */
static ssize_t env_merge(char **env, size_t n)
{
    struct env_ent *ents = calloc(n ? n : 1, sizeof(*ents));
    if (!ents)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(env[i], '=');
        ents[i] = (struct env_ent){ env[i], eq ? (size_t)(eq - env[i]) : strlen(env[i]), i };
    }
    qsort(ents, n, sizeof(*ents), env_ent_cmp);
    /* In each run of one key, the first place keeps the last value. */
    size_t kept = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && ents[j].klen == ents[i].klen && !memcmp(ents[j].kv, ents[i].kv, ents[i].klen))
            j++;
        ents[kept++] = (struct env_ent){ ents[j - 1].kv, ents[i].klen, ents[i].pos };
        i = j;
    }
    qsort(ents, kept, sizeof(*ents), env_pos_cmp);
    for (size_t i = 0; i < kept; i++)
        env[i] = ents[i].kv;
    env[kept] = NULL;
    free(ents);
    return (ssize_t)kept;
}

/* Closes descriptors from `lo` to `hi` (close_range, or one by one up to the limit). */
static void close_fds_from(unsigned lo, unsigned hi)
{
    if (syscall(SYS_close_range, lo, hi == ~0U ? ~0U : hi - 1, 0) == 0)
        return;
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (long fd = lo; fd < max && (unsigned long)fd < hi; fd++)
        close((int)fd);
}

/* Runs in the child between fork and exec: only async-signal-safe calls. */
static void child(int in_fd, int out_fd, int err_fd, int report, const sbx_msg_exec *m,
                  const struct user_ids *u, char **envp, struct direct *direct, bool ctty)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGPIPE, &dfl, NULL);
    agent_restore_limits();
    setsid();
    /* Move the pipe ends clear of 0..2 first so the dup2s below cannot clobber each other. */
    in_fd = fcntl(in_fd, F_DUPFD_CLOEXEC, 10);
    out_fd = fcntl(out_fd, F_DUPFD_CLOEXEC, 10);
    err_fd = fcntl(err_fd, F_DUPFD_CLOEXEC, 10);
    dup2(in_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    /* A PTY session: after setsid() the terminal on fd 0 becomes the new session's own. */
    if (ctty)
        ioctl(0, TIOCSCTTY, 0);
    struct child_err ce = {0, 0};
    if (m->cwd && m->cwd[0] && chdir(m->cwd) < 0) {
        ce = (struct child_err){STAGE_CHDIR, errno};
        goto fail;
    }
    if (u) {
        /* Groups, then gid, then uid: once uid changes we could no longer change the others. */
        if (geteuid() == 0) {
            if (setgroups(u->n_groups, u->groups) < 0 || setgid(u->gid) < 0 || setuid(u->uid) < 0) {
                ce = (struct child_err){STAGE_USER, errno};
                goto fail;
            }
        } else if (u->uid != geteuid()) {
            ce = (struct child_err){STAGE_USER, EPERM};
            goto fail;
        }
    }
    if (m->flags & SBX_EXEC_BUILTIN) {
        /*
         * A transfer built-in (tar.c): no program is run, so a box needs
         * neither a shell nor tar. Closing the report pipe says it started.
         */
        /* A relative path means what it means to the box's commands here (files_box_path). */
        if (m->argv[0] && m->argv[1] && !(m->argv[1] = files_box_path(m->argv[1]))) {
            ce = (struct child_err){STAGE_EXEC, ENOMEM};
            goto fail;
        }
        int keep = files_root_fd();
        /* Without an exec, the close-on-exec descriptors (other pipe ends, the
         * agent's sockets) would stay open: the stdin pipe's write end among
         * them, so stdin would never end. Only the root stays. */
        if (keep > 3)
            close_fds_from(3, keep);
        close_fds_from(keep > 2 ? keep + 1 : 3, ~0U);
        _exit(agent_builtin(m->argv));
    }
    if (m->flags & SBX_EXEC_SHELL) {
        /* Plain words: the program itself, as the shell would exec it (direct.c). */
        if (direct && direct->argv)
            direct_exec(direct, envp);
        /* The box's shell, chosen once at startup (agent_choose_shell): bash when it has one. */
        char *const sh[] = {(char *)agent_shell_arg0, (char *)"-c", m->argv[0], NULL};
        if (strchr(agent_shell_path, '/'))
            execve(agent_shell_path, sh, envp);
        else
            errno = ENOENT; /* a configured name not on PATH */
    } else if (strchr(m->argv[0], '/')) {
        execve(m->argv[0], m->argv, envp);
    } else {
        /* PATH search in the command's own environment, not the agent's. */
        const char *path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        for (char **e = envp; *e; e++)
            if (strncmp(*e, "PATH=", 5) == 0)
                path = *e + 5;
        int saved = ENOENT;
        for (const char *p = path;;) {
            const char *colon = strchr(p, ':');
            size_t dl = colon ? (size_t)(colon - p) : strlen(p);
            char full[4096];
            size_t al = strlen(m->argv[0]);
            if (dl + al + 2 <= sizeof(full)) {
                memcpy(full, dl ? p : ".", dl ? dl : 1);
                size_t o = dl ? dl : 1;
                full[o++] = '/';
                memcpy(full + o, m->argv[0], al + 1);
                execve(full, m->argv, envp);
                if (errno != ENOENT && errno != ENOTDIR)
                    saved = errno;
            }
            if (!colon)
                break;
            p = colon + 1;
        }
        errno = saved;
    }
    ce = (struct child_err){STAGE_EXEC, errno};
fail : {
    ssize_t n = write(report, &ce, sizeof(ce));
    (void)n;
    _exit(125);
}
}

/*
 * One fcntl, not a F_GETFL/F_SETFL pair: the fds it is given are fresh pipe
 * ends, whose changeable status flags are all clear (F_SETFL keeps the
 * access mode). Four syscalls fewer per exec (strace, docs/benchmarks.md).
 */
static int set_nonblock(int fd)
{
    return fcntl(fd, F_SETFL, O_NONBLOCK);
}

/*
 * The command's environment: the agent's, the user's identity, then the
 * request's (later entries win), and a PATH when none is set. The strings
 * belong to environ, `m` and idvars[] (freed by the caller). NULL: out of memory.
 */
static char **make_env(const sbx_msg_exec *m, const char *user, bool have_user,
                       const struct user_ids *uids, char *idvars[3])
{
    size_t n_env = 0, n_req = 0;
    while (environ && environ[n_env])
        n_env++;
    while (m->env[n_req])
        n_req++;
    char **envp = calloc(n_env + n_req + 8, sizeof(char *));
    size_t n = 0;
    if (!envp)
        return NULL;
    envp[0] = NULL;
    for (size_t i = 0; i < n_env; i++)
        envp[n++] = environ[i];
    if (have_user) {
        const char *name = uids->name ? uids->name : user;
        idvars[0] = malloc(strlen(uids->home) + 6);
        idvars[1] = malloc(strlen(name) + 6);
        idvars[2] = malloc(strlen(name) + 9);
        if (!idvars[0] || !idvars[1] || !idvars[2]) {
            free(envp);
            return NULL;
        }
        snprintf(idvars[0], strlen(uids->home) + 6, "HOME=%s", uids->home);
        snprintf(idvars[1], strlen(name) + 6, "USER=%s", name);
        snprintf(idvars[2], strlen(name) + 9, "LOGNAME=%s", name);
        for (int i = 0; i < 3; i++)
            envp[n++] = idvars[i];
    }
    for (size_t i = 0; i < n_req; i++)
        envp[n++] = m->env[i];
    envp[n] = NULL;
    ssize_t merged = env_merge(envp, n);
    if (merged < 0) {
        free(envp);
        return NULL;
    }
    n = (size_t)merged;
    bool has_path = false;
    for (size_t i = 0; i < n; i++)
        has_path |= strncmp(envp[i], "PATH=", 5) == 0;
    if (!has_path) {
        envp[n++] = (char *)"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        envp[n] = NULL;
    }
    return envp;
}

int exec_start(struct conn *c, uint32_t ch, const sbx_frame *f)
{
    sbx_msg_exec *m = NULL;
    if (sbx__msg_exec_decode(f, &m) < 0)
        return -1;
    char msg[512];
    struct user_ids uids = {0};
    const char *user = m->user && m->user[0] ? m->user : agent_default_user;
    bool have_user = user && user[0];
    if (have_user && users_resolve(user, &uids, msg, sizeof(msg)) < 0) {
        send_exit(c, ch, SBX_EXIT_FAILED, 0, 0, msg);
        free(m);
        return 0;
    }

    char *idvars[3] = {NULL, NULL, NULL};
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, rep[2] = {-1, -1};
    char **envp = make_env(m, user, have_user, &uids, idvars);
    struct direct direct = {0};
    if (!envp)
        goto oom;
    if ((m->flags & SBX_EXEC_SHELL) && direct_plan(m->argv[0], envp, &direct) == -2)
        goto oom;

    if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0 ||
        pipe2(rep, O_CLOEXEC) < 0) {
        snprintf(msg, sizeof(msg), "cannot create pipes: %s", strerror(errno));
        goto failed;
    }
    long long oom_before = read_oom_kills();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, sizeof(msg), "cannot fork: %s", strerror(errno));
        goto failed;
    }
    if (pid == 0)
        child(pin[0], pout[1], perr[1], rep[1], m, have_user ? &uids : NULL, envp, &direct, false);
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    close(rep[1]);
    pin[0] = pout[1] = perr[1] = rep[1] = -1;

    struct exec *e = calloc(1, sizeof(*e));
    if (e) {
        e->argv0 = strdup(m->argv[0]);
        e->cwd = strdup(m->cwd ? m->cwd : "");
        e->user = strdup(user ? user : "");
    }
    if (!e || !e->argv0 || !e->cwd || !e->user) {
        /* The child is reaped by reap_all() like any orphan. */
        kill(pid, SIGKILL);
        if (e)
            exec_free(e);
        snprintf(msg, sizeof(msg), "out of memory");
        goto failed;
    }
    e->shell = m->flags & SBX_EXEC_SHELL;
    e->ch.id = ch;
    e->ch.kind = CHAN_EXEC;
    e->conn = c;
    e->pid = pid;
    e->limit = m->output_limit;
    e->deadline = m->timeout_ms >= 0 ? agent_now_ms() + m->timeout_ms : -1;
    e->oom_before = oom_before;
    set_nonblock(pout[0]);
    set_nonblock(perr[0]);
    set_nonblock(pin[1]);
    watch_init(&e->out, pout[0], on_out);
    watch_init(&e->err, perr[0], on_err);
    watch_init(&e->in, pin[1], on_in);
    set_nonblock(rep[0]);
    watch_init(&e->rep, rep[0], on_rep);
    pout[0] = perr[0] = pin[1] = rep[0] = -1;
    watch_set(&e->rep, EPOLLIN);
    watch_set(&e->out, EPOLLIN);
    watch_set(&e->err, EPOLLIN);
    if (!(m->flags & SBX_EXEC_STDIN))
        watch_close(&e->in); /* the command sees EOF on stdin at once */
    e->next_all = all_execs;
    all_execs = e;
    conn_chan_add(c, &e->ch);
    if (c->throttled) {
        e->out_paused = e->err_paused = true;
        watch_set(&e->out, 0);
        watch_set(&e->err, 0);
    }
    goto done;

oom:
    snprintf(msg, sizeof(msg), "out of memory");
failed:
    send_exit(c, ch, SBX_EXIT_FAILED, 0, 0, msg);
done:
    for (int i = 0; i < 2; i++) {
        if (pin[i] >= 0)
            close(pin[i]);
        if (pout[i] >= 0)
            close(pout[i]);
        if (perr[i] >= 0)
            close(perr[i]);
        if (rep[i] >= 0)
            close(rep[i]);
    }
    for (int i = 0; i < 3; i++)
        free(idvars[i]);
    free(envp);
    direct_free(&direct);
    users_free(&uids);
    free(m);
    return 0;
}

pid_t exec_spawn(const sbx_msg_exec *m, int in_fd, int out_fd, int err_fd, bool ctty, char *msg,
                 size_t msg_len)
{
    struct user_ids uids = {0};
    const char *user = m->user && m->user[0] ? m->user : agent_default_user;
    bool have_user = user && user[0];
    if (have_user && users_resolve(user, &uids, msg, msg_len) < 0)
        return -1;
    char *idvars[3] = {NULL, NULL, NULL};
    int rep[2] = {-1, -1};
    pid_t pid = -1;
    char **envp = make_env(m, user, have_user, &uids, idvars);
    struct direct direct = {0};
    if (!envp || ((m->flags & SBX_EXEC_SHELL) && direct_plan(m->argv[0], envp, &direct) == -2)) {
        snprintf(msg, msg_len, "out of memory");
        goto out;
    }
    if (pipe2(rep, O_CLOEXEC) < 0) {
        snprintf(msg, msg_len, "cannot create a pipe: %s", strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        snprintf(msg, msg_len, "cannot fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0)
        child(in_fd, out_fd, err_fd, rep[1], m, have_user ? &uids : NULL, envp, &direct, ctty);
    close(rep[1]);
    rep[1] = -1;
    /*
     * The report pipe closes at execve (close-on-exec) or carries why the
     * child could not get there; either comes right after the fork, so this
     * read waits for one execve, not for the command.
     */
    struct child_err ce;
    size_t got = 0;
    while (got < sizeof(ce)) {
        ssize_t r = read(rep[0], (char *)&ce + got, sizeof(ce) - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    if (got == sizeof(ce)) {
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        if (ce.stage == STAGE_CHDIR)
            snprintf(msg, msg_len, "cannot change to directory %s: %s", m->cwd ? m->cwd : "",
                     strerror(ce.err));
        else if (ce.stage == STAGE_USER)
            snprintf(msg, msg_len, "cannot switch to user %s: %s", user ? user : "",
                     strerror(ce.err));
        else
            snprintf(msg, msg_len, "cannot run %s: %s", m->argv[0],
                     ce.err == ENOENT ? "command not found" : strerror(ce.err));
        pid = -1;
    }
out:
    for (int i = 0; i < 2; i++)
        if (rep[i] >= 0)
            close(rep[i]);
    for (int i = 0; i < 3; i++)
        free(idvars[i]);
    free(envp);
    direct_free(&direct);
    users_free(&uids);
    return pid;
}
