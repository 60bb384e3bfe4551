/*
 * Published ports of a linux box (docs/networking.md): the shim listens on
 * the host for each declared port before the box starts (a fixed host port
 * that is taken fails the create, with nothing left behind), and hands the
 * listeners to a forwarder process:
 *
 *   sbx-shim --forward BOX_DIR AGENT_PID PORT...   (listeners on fds 3...)
 *
 * a re-exec of the shim's own binary, so it starts clean (no inherited
 * memory, signal state or descriptors but the listeners). It runs the
 * host-side loop of src/kit/forward.c: every accepted connection becomes a
 * FORWARD stream to the box's agent. It dies with the shim (PDEATHSIG) or
 * with the box's agent (a pidfd among its stop fds), and the shim kills it
 * first at teardown, so no listener outlives the box. Its argv names the box
 * directory but not as `--box-dir`: the provider's scans for shims
 * (state.c) never take it for the box's supervisor.
 */
#include "shim/shim.h"
#include "kit/forward.h"
#include "kit/kit.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

int shim_ports_open(json_t *desc, struct shim_ports *p, char *msg, size_t len)
{
    p->n = 0;
    p->record = NULL;
    if (!desc)
        return 0;
    if (!json_is_array(desc) || json_array_size(desc) > SHIM_MAX_PORTS) {
        snprintf(msg, len, "ports must be a list of at most %d ports", SHIM_MAX_PORTS);
        return -1;
    }
    p->record = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(desc, i, e)
    {
        json_int_t port = json_integer_value(json_object_get(e, "port"));
        json_t *hp = json_object_get(e, "host_port");
        json_int_t host_port = json_is_integer(hp) ? json_integer_value(hp) : 0;
        const char *ip = json_string_value(json_object_get(e, "host_ip"));
        if (port < 1 || port > 65535 || host_port < 0 || host_port > 65535) {
            snprintf(msg, len, "ports[%zu]: port must be 1..65535 and host_port 0..65535", i);
            return -1;
        }
        char err[300];
        int bound = 0;
        int fd = sbx__forward_listen(ip ? ip : "127.0.0.1", (int)host_port, &bound, err,
                                     sizeof(err));
        if (fd < 0) {
            snprintf(msg, len, "cannot publish box port %d: %s", (int)port, err);
            return -1;
        }
        p->fds[p->n] = fd;
        p->ports[p->n] = (uint16_t)port;
        p->n++;
        json_array_append_new(p->record,
                              json_pack("{s:I, s:s, s:i}", "port", port, "host_ip",
                                        ip ? ip : "127.0.0.1", "host_port", bound));
    }
    return 0;
}

void shim_ports_close(struct shim_ports *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->fds[i] >= 0)
            close(p->fds[i]);
    p->n = 0;
}

pid_t shim_forwarder_start(struct shim_ports *p, const char *box_dir, pid_t agent, char *msg,
                           size_t len)
{
    if (p->n == 0)
        return 0;
    pid_t shim = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, len, "cannot start the port forwarder: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Dies with the shim; a shim already gone before this line leaves nothing to serve. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != shim)
            _exit(1);
        /* The listeners to 3, 4, ... (through fds above them: they may sit in that range). */
        int tmp[SHIM_MAX_PORTS];
        for (size_t i = 0; i < p->n; i++)
            if ((tmp[i] = fcntl(p->fds[i], F_DUPFD_CLOEXEC, 3 + SHIM_MAX_PORTS)) < 0)
                _exit(1);
        for (size_t i = 0; i < p->n; i++)
            if (dup2(tmp[i], 3 + (int)i) < 0)
                _exit(1);
        syscall(SYS_close_range, 3 + p->n, ~0U, 0);
        /* The shim blocks its signals for its signalfd; the forwarder takes the defaults. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        char pidbuf[24];
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)agent);
        char *argv[4 + SHIM_MAX_PORTS + 1];
        char portbuf[SHIM_MAX_PORTS][8];
        int a = 0;
        argv[a++] = (char *)"sbx-shim";
        argv[a++] = (char *)"--forward";
        argv[a++] = (char *)box_dir;
        argv[a++] = pidbuf;
        for (size_t i = 0; i < p->n; i++) {
            snprintf(portbuf[i], sizeof(portbuf[i]), "%u", (unsigned)p->ports[i]);
            argv[a++] = portbuf[i];
        }
        argv[a] = NULL;
        static char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
        char *envp[] = { path_env, NULL };
        execve("/proc/self/exe", argv, envp);
        _exit(127);
    }
    /* The forwarder holds them now: when it dies, connecting is refused, not queued. */
    shim_ports_close(p);
    return pid;
}

void shim_forwarder_stop(pid_t *pid)
{
    if (*pid <= 0)
        return;
    kill(*pid, SIGKILL);
    while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
        ;
    *pid = 0;
}

int shim_forward_main(int argc, char **argv)
{
    if (argc < 5 || argc - 4 > SHIM_MAX_PORTS) {
        fprintf(stderr, "usage: sbx-shim --forward BOX_DIR AGENT_PID PORT... (started by "
                        "sbx-shim, listeners on fds 3...)\n");
        return 2;
    }
    /* Exec'd through /proc/self/exe, it would be called "exe" in ps and top. */
    prctl(PR_SET_NAME, "sbx-forward");
    /* Only the listeners past this point; a stray fd would keep something of the shim's open. */
    size_t n = (size_t)(argc - 4);
    syscall(SYS_close_range, 3 + n, ~0U, 0);
    struct sigaction ign = { .sa_handler = SIG_IGN };
    sigaction(SIGPIPE, &ign, NULL);
    /* Two descriptors per connection, up to SBX_FORWARD_MAX_CONNS: as many as allowed. */
    struct rlimit nf;
    if (getrlimit(RLIMIT_NOFILE, &nf) == 0 && nf.rlim_cur < nf.rlim_max) {
        nf.rlim_cur = nf.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nf);
    }
    char *end;
    long agent = strtol(argv[3], &end, 10);
    if (*end || agent <= 0)
        return 2;
    sbx_forward_listener ls[SHIM_MAX_PORTS];
    for (size_t i = 0; i < n; i++) {
        long port = strtol(argv[4 + i], &end, 10);
        if (*end || port < 1 || port > 65535)
            return 2;
        ls[i] = (sbx_forward_listener){ 3 + (int)i, (uint16_t)port };
    }
    _cleanup_free_ char *sock = sbx__printf("%s/run/agent.sock", argv[2]);
    if (!sock)
        return 1;
    /* The box's agent gone (its init died): nothing left to forward to. */
    int stop = sbx__kit_pidfd_open((pid_t)agent);
    /* Already gone (and perhaps reaped, its pid free for another): nothing to serve. */
    if (stop < 0 && errno == ESRCH)
        return 0;
    sbx_forward_opts o = { .agent_socket = sock, .agent_pid = (pid_t)agent, .listeners = ls,
                           .n_listeners = n, .stop_fds = &stop, .n_stop_fds = stop >= 0 };
    char err[256];
    int rc = sbx__forward_run(&o, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "sbx-shim --forward: %s\n", err);
    return rc < 0 ? 1 : 0;
}
