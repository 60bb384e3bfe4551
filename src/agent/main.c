/*
 * sbx-agent: command line, the event loop, signals and PID 1 duties.
 *
 *   sbx-agent init (--listen PATH | --listen-fd N) [--ready-fd N] [--root DIR] [--shell SH]
 *                  [--user USER]
 *                  [-- ENTRYPOINT...]
 *   sbx-agent serve --stdio [--root DIR] [--shell SH]
 *   sbx-agent builtin [--root DIR] NAME ARGS...   (one transfer built-in, tar.c)
 *   sbx-agent relay PATH   (stdin and stdout to the agent listening on PATH)
 *
 * As PID 1 of a box (init) it reaps every zombie, runs the optional
 * entrypoint as a supervised service, and on SIGTERM kills every process and
 * exits 0. docs/agent-protocol.md has the protocol it serves.
 */
#include "agent/agent.h"
#include "agent/tar.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int epfd = -1;
static struct conn *conns;
static pid_t service_pid = -1;
static bool stopping;
/* [svc-logs] The ready descriptor, kept after "R" to report the service's end; -1: none. */
static int report_fd = -1;
/* [svc-logs] Our own log lines: a non-blocking open of stderr, or stderr itself. */
static int log_fd = STDERR_FILENO;

struct grave {
    void *p;
    void (*fn)(void *);
    struct grave *next;
};
static struct grave *graves;

void agent_log(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One write per line so lines from the agent and its service do not interleave. */
    dprintf(log_fd, "sbx-agent: %s\n", line);
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
    if (w->fd < 0 || w->events == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = w};
    int op = !w->events ? EPOLL_CTL_ADD : events ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
    if (epoll_ctl(epfd, op, w->fd, &ev) < 0 && errno != ENOENT)
        agent_log("epoll_ctl(%d): %s", w->fd, strerror(errno));
    w->events = events;
}

void watch_close(struct watch *w)
{
    if (w->fd < 0)
        return;
    watch_set(w, 0);
    close(w->fd);
    w->fd = -1;
}

void agent_defer_free(void *p, void (*fn)(void *))
{
    struct grave *g = malloc(sizeof(*g));
    if (!g) {
        /* Leaking beats a use-after-free from a pending event. */
        return;
    }
    g->p = p;
    g->fn = fn;
    g->next = graves;
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

/* --- connections list ---------------------------------------------------- */

static bool exit_when_idle;

static void add_conn(struct conn *c)
{
    c->next = conns;
    conns = c;
}

void conns_pump(void)
{
    for (struct conn **pp = &conns; *pp;) {
        struct conn *c = *pp;
        if (!c->dead && c->write_failed)
            conn_close(c, "write failed");
        if (c->dead) {
            if (c->exit_on_close)
                exit_when_idle = true;
            *pp = c->next;
            continue;
        }
        if (!c->throttled) {
            for (struct chan *ch = c->chans; ch && !c->throttled && !c->dead;) {
                struct chan *next = ch->next;
                if (ch->kind == CHAN_GET)
                    file_get_pump(c, ch);
                ch = next;
            }
        }
        pp = &c->next;
    }
}

/* --- listening ----------------------------------------------------------- */

static struct watch listen_w;

/*
 * Who may talk to us: a process outside our pid namespace (the host: the
 * kernel gives its pid as 0 here), or one with our own uid (root, in a box).
 * Any other process of the box would run commands with our ids through us.
 * The socket is out of the box's sight and 0600 anyway (src/shim/box.c):
 * this holds should either ever change, and for an agent run by hand.
 */
static bool peer_allowed(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return false;
    return cr.pid == 0 || cr.uid == geteuid();
}

static void on_accept(struct watch *w, uint32_t events)
{
    (void)events;
    for (;;) {
        int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                agent_log("accept: %s", strerror(errno));
            return;
        }
        if (!peer_allowed(fd)) {
            agent_log("refused a connection from a process of another user");
            close(fd);
            continue;
        }
        struct conn *c = conn_new(fd, fd);
        if (!c) {
            close(fd);
            continue;
        }
        add_conn(c);
    }
}

static int mkdir_parents(const char *path)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return -1;
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf)
        return 0;
    *slash = 0;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static int listen_on(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        agent_log("socket path too long (max %zu bytes): %s", sizeof(sa.sun_path) - 1, path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (mkdir_parents(path) < 0) {
        agent_log("cannot create the directory of %s: %s", path, strerror(errno));
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    unlink(path); /* a stale socket from an earlier agent */
    /*
     * 0600 whatever the umask, set between bind() and listen(): until
     * listen() nobody can connect, so no connection sees a wider mode.
     */
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0600) < 0 ||
        listen(fd, 1024) < 0) {
        agent_log("cannot listen on %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * A listening socket made for us (by the box's first process, which made it
 * 0600 and out of the box's sight): checked to be one, then non-blocking and
 * close-on-exec like ours.
 */
static int adopt_listener(int fd)
{
    int type = 0, acc = 0;
    socklen_t len = sizeof(type), alen = sizeof(acc);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &alen) < 0 || !acc) {
        agent_log("--listen-fd %d is not a listening stream socket", fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
        agent_log("--listen-fd %d: %s", fd, strerror(errno));
        return -1;
    }
    return fd;
}

/* --- children ------------------------------------------------------------ */

static void restore_child_signals(void)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction sa = {.sa_handler = SIG_DFL};
    sigaction(SIGPIPE, &sa, NULL);
}

static pid_t start_service(char **argv)
{
    /* Resolved before the fork: reading /etc/passwd is no work for a forked child. */
    struct user_ids u = {0};
    bool have_user = agent_default_user && agent_default_user[0];
    char msg[512];
    if (have_user && users_resolve(agent_default_user, &u, msg, sizeof(msg)) < 0) {
        agent_log("cannot start the entrypoint: %s", msg);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        agent_log("cannot start the entrypoint: %s", strerror(errno));
        users_free(&u);
        return -1;
    }
    if (pid == 0) {
        restore_child_signals();
        agent_restore_limits();
        setsid();
        /* Groups, then gid, then uid: once uid changes the others could not be. */
        if (have_user && geteuid() == 0 &&
            (setgroups(u.n_groups, u.groups) < 0 || setgid(u.gid) < 0 || setuid(u.uid) < 0)) {
            dprintf(STDERR_FILENO, "sbx-agent: cannot switch to user '%s': %s\n",
                    agent_default_user, strerror(errno));
            _exit(126);
        }
        execvp(argv[0], argv);
        dprintf(STDERR_FILENO, "sbx-agent: cannot run entrypoint %s: %s\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    users_free(&u);
    return pid;
}

static void reap_all(void)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0)
            return;
        if (exec_reaped(pid, status) || pty_reaped(pid, status))
            continue;
        if (pid == service_pid) {
            if (WIFEXITED(status))
                agent_log("entrypoint exited with status %d", WEXITSTATUS(status));
            else if (WIFSIGNALED(status))
                agent_log("entrypoint killed by signal %d", WTERMSIG(status));
            /* [svc-logs] The shim records it: `sbx status` shows the service exited. */
            if (report_fd >= 0 && !stopping)
                dprintf(report_fd, "%s %d\n", WIFEXITED(status) ? "exited" : "killed",
                        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            service_pid = -1;
        }
        /* Anything else was an orphan reparented to us: reaping it is all we owe it. */
    }
}

static void kill_everything(void)
{
    exec_kill_all();
    pty_kill_all();
    if (service_pid > 0)
        kill(-service_pid, SIGKILL), kill(service_pid, SIGKILL);
    /*
     * As PID 1 of a pid namespace, kill(-1) reaches every other process in the
     * box (and init is exempt). Outside a namespace it would reach the whole
     * machine, so only PID 1 does it.
     */
    if (getpid() == 1)
        kill(-1, SIGKILL);
}

static struct watch signal_w;

static void on_signal(struct watch *w, uint32_t events)
{
    (void)events;
    struct signalfd_siginfo si;
    while (read(w->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            continue; /* reaped below, once per batch */
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT || si.ssi_signo == SIGHUP) {
            stopping = true;
        }
    }
    reap_all();
}

/* --- main ---------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: sbx-agent init (--listen PATH | --listen-fd N) [--ready-fd N] [--root DIR]\n"
            "                      [--shell SH] [--user USER] [--ttl SECONDS] [-- ENTRYPOINT...]\n"
            "       sbx-agent serve --stdio [--root DIR] [--shell SH]\n"
            "       sbx-agent builtin [--root DIR] NAME ARGS...\n"
            "       sbx-agent relay PATH\n"
            "       sbx-agent --version\n");
}

/* The soft descriptor limit we started with: commands and the entrypoint get it back. */
static struct rlimit start_nofile = {RLIM_INFINITY, RLIM_INFINITY};

void agent_restore_limits(void)
{
    if (start_nofile.rlim_cur != RLIM_INFINITY || start_nofile.rlim_max != RLIM_INFINITY)
        setrlimit(RLIMIT_NOFILE, &start_nofile);
}

static void raise_fd_limit(void)
{
    /*
     * Each running command holds a few descriptors: hundreds at once need
     * more than 1024. Only for us: the soft limit is what the box was given
     * (sbx's default 1024, as programs expect select() to cope), so each
     * command gets it back (agent_restore_limits) and may raise it itself,
     * up to the same hard limit.
     */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        start_nofile = rl;
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
}

const char *agent_default_user = NULL;
static int64_t ttl_ms; /* --ttl in ms; 0: none */
const char *agent_shell_path = "/bin/sh";
const char *agent_shell_arg0 = "sh";

/* `name` in the directories of PATH (the agent's, else the default), as `command -v` finds it. */
static char *find_on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    size_t nl = strlen(name);
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t dl = colon ? (size_t)(colon - p) : strlen(p);
        /* An empty or relative entry means a directory we cannot know for a command's cwd. */
        if (dl && p[0] == '/' && dl + nl + 2 <= PATH_MAX) {
            char full[PATH_MAX];
            memcpy(full, p, dl);
            full[dl] = '/';
            memcpy(full + dl + 1, name, nl + 1);
            struct stat st;
            if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
                return strdup(full);
        }
        if (!colon)
            return NULL;
        p = colon + 1;
    }
}

void agent_choose_shell(const char *want)
{
    char *found = NULL;
    if (!want || !strcmp(want, "auto")) {
        /* The reference's docker provider: `command -v bash` succeeds -> bash, else sh. */
        found = find_on_path("bash");
    } else if (strchr(want, '/')) {
        found = strdup(want);
    } else {
        /* A name: resolved once here; one that is missing stays a name, and exec says so. */
        found = find_on_path(want);
        if (!found)
            found = strdup(want);
    }
    if (!found)
        return; /* /bin/sh */
    agent_shell_path = found; /* kept for the agent's life */
    const char *slash = strrchr(found, '/');
    agent_shell_arg0 = slash && slash[1] ? slash + 1 : found;
}

static int parse_fd(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > 1 << 20)
        return -1;
    return (int)v;
}

/*
 * relay PATH: a connection of its own to the agent listening on PATH (the
 * box's init), carried over this process's stdin and stdout. How a host
 * that reaches the box only through the engine's exec sessions (the docker
 * provider's remote path) gets PTYs, background processes and port
 * forwarding of the init agent, which outlive the session. Byte for byte,
 * both ways; ends when either side ends (the other is shut down first, so
 * what is in flight still arrives).
 */
static int write_full(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int relay(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "sbx-agent relay: path too long: %s\n", path);
        return 2;
    }
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "sbx-agent relay: cannot connect to %s: %s\n", path, strerror(errno));
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    static char buf[1 << 17];
    bool in_open = true, out_open = true;
    while (out_open) {
        struct pollfd pf[2] = {{.fd = in_open ? 0 : -1, .events = POLLIN},
                               {.fd = fd, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (pf[0].revents) {
            ssize_t n = read(0, buf, sizeof(buf));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0 || write_full(fd, buf, (size_t)n) < 0) {
                /* The host is done: the agent sees the end; its answers still come. */
                shutdown(fd, SHUT_WR);
                in_open = false;
            }
        }
        if (pf[1].revents) {
            ssize_t n = read(fd, buf, sizeof(buf));
            if (n < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (n <= 0 || write_full(1, buf, (size_t)n) < 0)
                out_open = false;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "relay") == 0)
        return relay(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "--version") == 0) {
        printf("%s (protocol %d)\n", AGENT_VERSION, SBX_PROTO_VERSION);
        return 0;
    }
    /*
     * One transfer built-in (tar.c) as a plain command, on stdin and stdout:
     * how providers without an agent in their boxes (local) run the same
     * transfer code as the agent's EXEC_BUILTIN.
     */
    if (argc >= 3 && strcmp(argv[1], "builtin") == 0) {
        int i = 2;
        const char *root = "/";
        if (strcmp(argv[i], "--root") == 0 && i + 2 < argc) {
            root = argv[i + 1];
            i += 2;
        }
        if (files_set_root(root) < 0) {
            fprintf(stderr, "sbx-agent: cannot open the root %s: %s\n", root, strerror(errno));
            return 2;
        }
        /* Every built-in's first argument is its path: a relative one is the cwd's. */
        char cwd[PATH_MAX], *abs = NULL;
        if (i + 1 < argc && argv[i + 1][0] != '/' && getcwd(cwd, sizeof(cwd))) {
            size_t need = strlen(cwd) + strlen(argv[i + 1]) + 2;
            abs = malloc(need);
            if (!abs) {
                fprintf(stderr, "sbx-agent: out of memory\n");
                return 2;
            }
            snprintf(abs, need, "%s/%s", cwd, argv[i + 1]);
            argv[i + 1] = abs;
        }
        int rc = agent_builtin(argv + i);
        free(abs);
        /* As in the agent's fork (exec.c): the built-ins end with _exit, not exit. */
        fflush(stdout);
        _exit(rc);
    }
    if (argc < 2 || (strcmp(argv[1], "init") != 0 && strcmp(argv[1], "serve") != 0)) {
        usage();
        return 2;
    }
    bool init = strcmp(argv[1], "init") == 0;
    /*
     * Not dumpable: the commands we run (same uid, but without
     * CAP_SYS_PTRACE) can then neither ptrace us nor open our /proc/PID/mem,
     * environ or fds. Our children are dumpable again from their execve on.
     */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    const char *listen_path = NULL, *root = "/", *shell = NULL;
    int ready_fd = -1, listen_fd = -1;
    bool stdio = false;
    char **entry = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            if (i + 1 < argc)
                entry = argv + i + 1;
            break;
        } else if (strcmp(a, "--listen") == 0 && i + 1 < argc) {
            listen_path = argv[++i];
        } else if (strcmp(a, "--listen-fd") == 0 && i + 1 < argc) {
            listen_fd = parse_fd(argv[++i]);
            if (listen_fd < 0) {
                fprintf(stderr, "sbx-agent: --listen-fd needs a descriptor number\n");
                return 2;
            }
        } else if (strcmp(a, "--root") == 0 && i + 1 < argc) {
            root = argv[++i];
        } else if (strcmp(a, "--ready-fd") == 0 && i + 1 < argc) {
            ready_fd = parse_fd(argv[++i]);
            if (ready_fd < 0) {
                fprintf(stderr, "sbx-agent: --ready-fd needs a descriptor number\n");
                return 2;
            }
        } else if (strcmp(a, "--shell") == 0 && i + 1 < argc) {
            shell = argv[++i];
            if (!shell[0]) {
                fprintf(stderr, "sbx-agent: --shell needs a shell name or path, or auto\n");
                return 2;
            }
        } else if (strcmp(a, "--user") == 0 && i + 1 < argc) {
            agent_default_user = argv[++i];
        } else if (strcmp(a, "--ttl") == 0 && i + 1 < argc) {
            /* The box's time to live: the agent (its init) ends it when it passes. */
            char *end;
            errno = 0;
            long long t = strtoll(argv[++i], &end, 10);
            if (errno || *end || t < 1 || t > (1LL << 31)) {
                fprintf(stderr, "sbx-agent: --ttl needs a number of seconds >= 1\n");
                return 2;
            }
            ttl_ms = t * 1000;
        } else if (strcmp(a, "--stdio") == 0) {
            stdio = true;
        } else {
            fprintf(stderr, "sbx-agent: unknown argument %s\n", a);
            usage();
            return 2;
        }
    }
    if (init && (listen_path != NULL) == (listen_fd >= 0)) {
        fprintf(stderr, "sbx-agent: init needs one of --listen PATH and --listen-fd N\n");
        return 2;
    }
    if (!init && !stdio) {
        fprintf(stderr, "sbx-agent: serve needs --stdio\n");
        return 2;
    }
    if (files_set_root(root) < 0) {
        fprintf(stderr, "sbx-agent: cannot open root %s: %s\n", root, strerror(errno));
        return 1;
    }
    raise_fd_limit();
    agent_choose_shell(shell);
    direct_init(agent_shell_path);

    /*
     * Signals arrive through a signalfd: blocked first so none is lost
     * between here and the loop. SIGPIPE is ignored (a closed stream is an
     * EPIPE we handle); children get both back to default before exec.
     */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigaction(SIGPIPE, &ign, NULL);

    /* Not PID 1 (tests, nested runs): still adopt our commands' orphans to reap them. */
    if (init && getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1);

    epfd = epoll_create1(EPOLL_CLOEXEC);
    int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (epfd < 0 || sfd < 0) {
        fprintf(stderr, "sbx-agent: epoll/signalfd: %s\n", strerror(errno));
        return 1;
    }
    watch_init(&signal_w, sfd, on_signal);
    watch_set(&signal_w, EPOLLIN);

    if (init) {
        int lfd = listen_fd >= 0 ? adopt_listener(listen_fd) : listen_on(listen_path);
        if (lfd < 0)
            return 1;
        watch_init(&listen_w, lfd, on_accept);
        watch_set(&listen_w, EPOLLIN);
        /*
         * [svc-logs] The ready descriptor stays ours (close-on-exec: the
         * service must not write on it). Our own lines go through a second,
         * non-blocking open of stderr (a pipe to the shim): a full pipe
         * drops an agent line rather than stall every exec; the service
         * keeps the blocking descriptor it expects.
         */
        if (ready_fd >= 0)
            fcntl(ready_fd, F_SETFD, FD_CLOEXEC);
        int lfd2 = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        struct stat lst;
        if (lfd2 >= 0 && fstat(lfd2, &lst) == 0 && S_ISFIFO(lst.st_mode))
            log_fd = lfd2;
        else if (lfd2 >= 0)
            close(lfd2);
        if (entry)
            service_pid = start_service(entry);
        if (entry && service_pid < 0 && ready_fd >= 0) {
            report_fd = ready_fd;
            ready_fd = -1;
            ssize_t n = write(report_fd, "R", 1);
            (void)n;
            dprintf(report_fd, "exited 127\n");
        } else if (entry && ready_fd >= 0) {
            report_fd = ready_fd;
            ready_fd = -1;
            ssize_t n = write(report_fd, "R", 1);
            (void)n;
        }
    } else {
        /* The host's pipe ends must not leak into commands. */
        fcntl(0, F_SETFD, FD_CLOEXEC);
        fcntl(1, F_SETFD, FD_CLOEXEC);
        struct conn *c = conn_new(0, 1);
        if (!c)
            return 1;
        c->exit_on_close = true;
        add_conn(c);
    }
    if (ready_fd >= 0) {
        ssize_t n = write(ready_fd, "R", 1);
        (void)n;
        close(ready_fd);
    }

    int64_t ttl_end = ttl_ms > 0 ? agent_now_ms() + ttl_ms : -1;
    struct epoll_event evs[64];
    while (!stopping && !exit_when_idle) {
        int timeout = exec_check_timeouts();
        if (ttl_end >= 0) {
            int64_t left = ttl_end - agent_now_ms();
            if (left <= 0) {
                agent_log("the box's ttl passed: stopping");
                break;
            }
            if (timeout < 0 || left < timeout)
                timeout = (int)(left > 1 << 30 ? 1 << 30 : left);
        }
        int n = epoll_wait(epfd, evs, 64, timeout);
        if (n < 0 && errno != EINTR) {
            agent_log("epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            struct watch *w = evs[i].data.ptr;
            /* A watch closed earlier in this batch (its memory is kept until bury()). */
            if (w->fd < 0)
                continue;
            w->cb(w, evs[i].events);
        }
        conns_pump();
        bury();
    }
    for (struct conn *c = conns; c; c = c->next)
        if (!c->dead)
            conn_close(c, "the agent is stopping");
    kill_everything();
    reap_all();
    bury();
    if (listen_path)
        unlink(listen_path);
    return 0;
}
