/*
 * PTY sessions on the local provider (docs/providers/local.md): a host
 * `sbx-agent init` per box, started on the first agent_address call, serves
 * the PTY messages from a unix socket in the box's state directory. It runs
 * as the caller (the box's owner: the state directory is theirs), in the
 * box's workspace with the box's environment, and is no box: no isolation,
 * as every local command.
 *
 * Files next to the box's record `<id>.json` (none ends in .json, so the
 * record scans never see them):
 *   <id>.agent       {"pid": P, "start": T, "socket": S}: the agent, with
 *                    its start time so a recycled pid is never taken for it;
 *   <id>.sock        the listening socket (made here, handed over by fd);
 *   <id>.agent.log   the agent's stderr;
 *   <id>.agent.lock  flock()ed while one process starts or stops the agent.
 * Another process (attach, a connected handle) finds the agent through
 * <id>.agent; ending the box (stop, stop_id, gc) stops it and removes them.
 */
#include "providers/local_agent.h"

#include "kit/kit.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#define READY_TIMEOUT_MS 10000
#define STOP_WAIT_MS 5000
#define WATCH_INTERVAL_S "2" /* how often the agent's watcher looks for the box record */

struct agent_job {
    char *canon, *id, *cwd, *shell;
    char **envp;
};

static void job_free(struct agent_job *j)
{
    if (!j)
        return;
    free(j->canon);
    free(j->id);
    free(j->cwd);
    free(j->shell);
    for (size_t i = 0; j->envp && j->envp[i]; i++)
        free(j->envp[i]);
    free(j->envp);
    free(j);
}

/* Takes the box's agent lock (blocking). -1 with errno on failure. */
static int lock_box(const char *canon, const char *id)
{
    _cleanup_free_ char *path = sbx__printf("%s/%s.agent.lock", canon, id);
    if (!path) {
        errno = ENOMEM;
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    while (flock(fd, LOCK_EX) < 0) {
        if (errno != EINTR) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
    }
    return fd;
}

/* The recorded agent, if it still runs: its pid (0: none) and socket (malloc'd). */
static pid_t recorded(const char *canon, const char *id, char **socket_out)
{
    _cleanup_free_ char *path = sbx__printf("%s/%s.agent", canon, id);
    char *text = NULL;
    size_t len = 0;
    if (!path || sbx__read_file(path, &text, &len) < 0)
        return 0;
    json_t *j = json_loadb(text, len, 0, NULL);
    free(text);
    json_int_t pid = json_integer_value(json_object_get(j, "pid"));
    json_int_t start = json_integer_value(json_object_get(j, "start"));
    const char *sock = json_string_value(json_object_get(j, "socket"));
    pid_t out = 0;
    /* The start time tells the agent from a later process given the same pid. */
    if (pid > 0 && pid < (1 << 30) && sock && start > 0 &&
        sbx__kit_proc_start((pid_t)pid) == (unsigned long long)start) {
        out = (pid_t)pid;
        if (socket_out && !(*socket_out = strdup(sock)))
            out = 0;
    }
    json_decref(j);
    return out;
}

/*
 * A socket bound at `path` (the agent's process listens on it: a client's
 * SO_PEERCRED names whoever called listen()), reached through its directory's descriptor
 * so that a state directory deeper than sun_path allows still works.
 */
static int listen_at(const char *canon, const char *name, sbx_error **err)
{
    _cleanup_close_ int dfd = open(canon, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot open the state directory %s", canon);
    unlinkat(dfd, name, 0); /* a socket left by an agent that died */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "socket");
    /* 0600 whatever the umask: the state directory is 0700 too, this is belt and braces. */
    mode_t old = umask(0177);
    int b = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int saved = errno;
    umask(old);
    if (b < 0) {
        close(fd);
        return sbx__set_errno(err, SBX_EIO, saved, "cannot listen on %s/%s", canon, name);
    }
    return fd;
}

/* Reads one byte from `fd` within `ms`. 1: got it, 0: EOF or time up. */
static int read_byte(int fd, char *c, int ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long spent = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (spent >= ms)
            return 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, (int)(ms - spent));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        ssize_t n = read(fd, c, 1);
        if (n < 0 && errno == EINTR)
            continue;
        return n == 1;
    }
}

/* Starts the agent; *pid_out on success. The caller holds the box's lock. */
static int start_agent(struct agent_job *j, const char *sock, pid_t *pid_out, sbx_error **err)
{
    _cleanup_free_ char *agent = sbx__kit_find_helper("sbx-agent", "SBX_AGENT");
    if (!agent)
        return sbx__set_error(err, SBX_ENOENT,
                              "PTY sessions on the local provider need sbx-agent, which was not "
                              "found: install sbx fully or set SBX_AGENT to its path");
    _cleanup_free_ char *name = sbx__printf("%s.sock", j->id);
    _cleanup_free_ char *log = sbx__printf("%s/%s.agent.log", j->canon, j->id);
    if (!name || !log)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_close_ int lfd = listen_at(j->canon, name, err);
    if (lfd < 0)
        return lfd;
    _cleanup_close_ int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    _cleanup_close_ int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int ready[2] = {-1, -1}, pidp[2] = {-1, -1};
    if (logfd < 0 || nullfd < 0 || pipe2(ready, O_CLOEXEC) < 0 || pipe2(pidp, O_CLOEXEC) < 0) {
        int saved = errno;
        for (int i = 0; i < 2; i++) {
            if (ready[i] >= 0)
                close(ready[i]);
            if (pidp[i] >= 0)
                close(pidp[i]);
        }
        return sbx__set_errno(err, SBX_EIO, saved, "starting the box's host agent");
    }
    _cleanup_free_ char *record = sbx__printf("%s/%s.json", j->canon, j->id);
    if (!record)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /*
     * Fixed descriptors in the agent: 3 the listener, 4 the ready pipe. Its
     * entrypoint (a service it supervises, its child) stops it once the box's
     * record is gone: a box ended by something that did not stop the agent
     * (its state directory removed, a process killed mid-stop) leaves no host
     * agent running for long.
     */
    char *argv[] = {agent,
                    (char *)"init",
                    (char *)"--listen-fd",
                    (char *)"3",
                    (char *)"--ready-fd",
                    (char *)"4",
                    (char *)"--shell",
                    j->shell ? j->shell : (char *)"auto",
                    (char *)"--",
                    (char *)"/bin/sh",
                    (char *)"-c",
                    (char *)"while [ -e \"$1\" ]; do sleep " WATCH_INTERVAL_S "; done; kill -TERM $PPID",
                    (char *)"sbx-local-watch",
                    record,
                    NULL};
    /*
     * Two forks: the agent is nobody's child here (it outlives this process
     * and whoever reaps it, init or a subreaper, is not us), and setsid()
     * keeps it out of this process's terminal session and its hangups. Only
     * async-signal-safe calls between fork and exec: this process has threads.
     */
    pid_t mid = fork();
    if (mid < 0) {
        int saved = errno;
        close(ready[0]), close(ready[1]), close(pidp[0]), close(pidp[1]);
        return sbx__set_errno(err, SBX_EIO, saved, "fork");
    }
    if (mid == 0) {
        setsid();
        pid_t a = fork();
        if (a == 0) {
            /* Above 4 first, so that the dup2 onto 3 and 4 never clobbers a source. */
            int l = fcntl(lfd, F_DUPFD_CLOEXEC, 10), r = fcntl(ready[1], F_DUPFD_CLOEXEC, 10);
            if (l < 0 || r < 0 || dup2(nullfd, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0 ||
                dup2(l, 3) < 0 || dup2(r, 4) < 0 || listen(3, 128) < 0 || chdir(j->cwd) < 0)
                _exit(126);
            execve(agent, argv, j->envp);
            _exit(127);
        }
        ssize_t w = write(pidp[1], &a, sizeof(a));
        (void)w;
        _exit(a > 0 ? 0 : 1);
    }
    close(ready[1]);
    close(pidp[1]);
    int status;
    while (waitpid(mid, &status, 0) < 0 && errno == EINTR)
        ;
    pid_t a = 0;
    ssize_t n = read(pidp[0], &a, sizeof(a));
    close(pidp[0]);
    char c = 0;
    int got = n == (ssize_t)sizeof(a) && a > 0 ? read_byte(ready[0], &c, READY_TIMEOUT_MS) : 0;
    close(ready[0]);
    if (!got || c != 'R') {
        if (n == (ssize_t)sizeof(a) && a > 0)
            kill(a, SIGKILL);
        unlinkat(AT_FDCWD, sock, 0);
        return sbx__set_error(err, SBX_EIO,
                              "the box's host agent (%s) did not start: see %s", agent, log);
    }
    *pid_out = a;
    return SBX_OK;
}

static void address_work(sbx_op *op, void *data)
{
    struct agent_job *j = data;
    sbx_error *e = NULL;
    int rc = SBX_OK;
    char *sock = NULL, *text = NULL;
    int lock = lock_box(j->canon, j->id);
    if (lock < 0) {
        rc = sbx__set_errno(&e, SBX_EIO, errno, "cannot lock %s/%s.agent.lock", j->canon, j->id);
        goto out;
    }
    pid_t pid = recorded(j->canon, j->id, &sock);
    if (!pid) {
        free(sock);
        sock = sbx__printf("%s/%s.sock", j->canon, j->id);
        _cleanup_free_ char *path = sbx__printf("%s/%s.agent", j->canon, j->id);
        if (!sock || !path) {
            rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
            goto out;
        }
        if ((rc = start_agent(j, sock, &pid, &e)) < 0)
            goto out;
        json_t *rec = json_pack("{s:I, s:I, s:s}", "pid", (json_int_t)pid, "start",
                                (json_int_t)sbx__kit_proc_start(pid), "socket", sock);
        char *rtext = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
        json_decref(rec);
        if (!rtext || sbx__write_file_atomic(path, rtext, strlen(rtext), 0600) < 0) {
            rc = sbx__set_errno(&e, SBX_EIO, errno, "cannot record the box's agent in %s", path);
            kill(pid, SIGKILL);
            free(rtext);
            goto out;
        }
        free(rtext);
    }
    json_t *o = json_pack("{s:s, s:I, s:s}", "socket", sock, "pid", (json_int_t)pid, "workdir",
                          j->cwd);
    text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text)
        rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
out:
    if (lock >= 0)
        close(lock);
    free(sock);
    job_free(j);
    sbx_op_complete(op, rc, e, rc == SBX_OK ? text : NULL);
    if (rc != SBX_OK)
        free(text);
}

void sbx__local_agent_address(sbx_op *op, const char *canon, const char *id, const char *cwd,
                              const char *shell, char **envp)
{
    struct agent_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->canon = strdup(canon)) || !(j->id = strdup(id)) ||
        !(j->cwd = strdup(cwd)) || (shell && !(j->shell = strdup(shell)))) {
        if (j)
            j->envp = envp;
        else
            sbx_strv_free(envp);
        job_free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->envp = envp;
    if (sbx_op_run_blocking(op, address_work, j) < 0) {
        job_free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

void sbx__local_agent_stop(const char *canon, const char *id)
{
    int lock = lock_box(canon, id);
    pid_t pid = recorded(canon, id, NULL);
    if (pid) {
        unsigned long long start = sbx__kit_proc_start(pid);
        /* TERM: the agent kills every session's processes and exits (src/agent/main.c). */
        kill(pid, SIGTERM);
        for (int waited = 0; waited < STOP_WAIT_MS && sbx__kit_proc_start(pid) == start;
             waited += 10)
            usleep(10000);
        if (sbx__kit_proc_start(pid) == start) {
            sbx_log(SBX_LOG_WARNING, "local provider: box %s's agent (pid %d) ignored SIGTERM: "
                                     "killing it", id, (int)pid);
            kill(pid, SIGKILL);
        }
    }
    static const char *const suffixes[] = {".agent", ".sock", ".agent.log", ".agent.lock"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        _cleanup_free_ char *path = sbx__printf("%s/%s%s", canon, id, suffixes[i]);
        if (path)
            unlink(path);
    }
    if (lock >= 0)
        close(lock);
}
