/*
 * A real sbx-agent on the host for the agent-protocol tests (test_agent,
 * test_sec_client): the agent started in --listen or --stdio mode, and the
 * host client (src/kit/client.h) driven on a provider's loop from the
 * test's thread. Everything is static: a test uses what it needs.
 */
#ifndef SBX_TESTS_AGENT_FIXTURE_H
#define SBX_TESTS_AGENT_FIXTURE_H

#include "tap.h"

#include "core/internal.h"
#include "kit/client.h"

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <uv.h>

/* --- the agent process --------------------------------------------------- */

static char agent_path[PATH_MAX];

static inline const char *agent_bin(void)
{
    if (!agent_path[0]) {
        /* build/tests/integration/test_agent -> build/sbx-agent (any build folder). */
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        TAP_TRUE(n > 0);
        exe[n] = 0;
        char *d = dirname(dirname(dirname(exe)));
        snprintf(agent_path, sizeof(agent_path), "%s/sbx-agent", d);
        if (access(agent_path, X_OK) != 0)
            TAP_FAIL("no agent binary at %s (run make)", agent_path);
    }
    return agent_path;
}

struct agent {
    pid_t pid;
    char sock[100];
    int stdio_fd; /* host end in --stdio mode */
};

static inline void setenv_child(const char *const *env)
{
    for (size_t i = 0; env && env[i]; i += 2)
        setenv(env[i], env[i + 1], 1);
}

/* init --listen SOCK [--root ROOT] [-- entry...]; waits for --ready-fd. */
static inline struct agent start_listen(const char *root, const char *const *env,
                                        char *const *entry)
{
    struct agent a = {.stdio_fd = -1};
    snprintf(a.sock, sizeof(a.sock), "%s/run/sbx/agent.sock", tap_tmpdir());
    int rp[2];
    TAP_TRUE(pipe2(rp, O_CLOEXEC) == 0);
    a.pid = fork();
    TAP_TRUE(a.pid >= 0);
    if (a.pid == 0) {
        dup2(rp[1], 3);
        setenv_child(env);
        const char *argv[32] = {agent_bin(), "init", "--listen", a.sock, "--ready-fd", "3"};
        int n = 6;
        if (root) {
            argv[n++] = "--root";
            argv[n++] = root;
        }
        if (entry) {
            argv[n++] = "--";
            for (int i = 0; entry[i] && n < 30; i++)
                argv[n++] = entry[i];
        }
        argv[n] = NULL;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(rp[1]);
    char b;
    TAP_EQ_INT(read(rp[0], &b, 1), 1);
    close(rp[0]);
    return a;
}

static inline struct agent start_stdio(const char *root, const char *const *env)
{
    struct agent a = {.stdio_fd = -1};
    int sv[2];
    TAP_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    a.pid = fork();
    TAP_TRUE(a.pid >= 0);
    if (a.pid == 0) {
        dup2(sv[1], 0);
        dup2(sv[1], 1);
        setenv_child(env);
        const char *argv[] = {agent_bin(), "serve", "--stdio", root ? "--root" : NULL, root, NULL};
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(sv[1]);
    a.stdio_fd = sv[0];
    return a;
}

static inline int stop_agent(struct agent *a)
{
    kill(a->pid, SIGTERM);
    int st = 0;
    while (waitpid(a->pid, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

/* --- the sbx side -------------------------------------------------------- */

static sbx_provider *P;

static inline void *loop_of(void)
{
    return sbx__context_uv(P->ctx);
}

static inline void setup(void)
{
    sbx_error *e = NULL;
    if (sbx_provider_new("{\"local\": {}}", &P, &e) != SBX_OK)
        TAP_FAIL("provider: %s", sbx_error_message(e));
}

struct waiter {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    int code;
    sbx_error *err;
    void *value;
    sbx_op *op;
};

static inline struct waiter *waiter_new(void)
{
    struct waiter *w = calloc(1, sizeof(*w));
    pthread_mutex_init(&w->m, NULL);
    pthread_cond_init(&w->cv, NULL);
    return w;
}

static inline void waiter_signal(struct waiter *w, int code, sbx_error *err, void *value)
{
    pthread_mutex_lock(&w->m);
    w->code = code;
    w->err = err;
    w->value = value;
    w->done = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->m);
}

static inline void op_done(int code, sbx_error *err, void *value, void *data)
{
    waiter_signal(data, code, err, value);
}

static inline void waiter_wait(struct waiter *w)
{
    pthread_mutex_lock(&w->m);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->m);
    pthread_mutex_unlock(&w->m);
}

static inline void waiter_free(struct waiter *w)
{
    sbx_error_free(w->err);
    free(w);
}

/* Runs fn(arg) on the loop thread and waits for it to have run. */
static inline void on_loop(void (*fn)(void *), void *arg)
{
    TAP_EQ_INT(sbx__context_post(P->ctx, fn, arg), SBX_OK);
    sbx__context_drain(P->ctx);
}

struct connect_call {
    const char *path;
    int fd;
    struct waiter *w;
};

static inline void connect_cb(sbx_agent_conn *conn, int code, sbx_error *err, void *data)
{
    waiter_signal(data, code, err, conn);
}

static inline void do_connect(void *arg)
{
    struct connect_call *cc = arg;
    int rc = cc->path ? sbx__agent_connect(loop_of(), cc->path, 10.0, connect_cb, cc->w)
                      : sbx__agent_connect_fd(loop_of(), cc->fd, 10.0, connect_cb, cc->w);
    if (rc < 0)
        waiter_signal(cc->w, rc, NULL, NULL);
}

static inline sbx_agent_conn *connect_agent(struct agent *a)
{
    struct connect_call cc = {a->stdio_fd >= 0 ? NULL : a->sock, a->stdio_fd, waiter_new()};
    a->stdio_fd = -1; /* owned by the connection now */
    on_loop(do_connect, &cc);
    waiter_wait(cc.w);
    if (cc.w->code != SBX_OK)
        TAP_FAIL("connect: %d %s", cc.w->code, cc.w->err ? sbx_error_message(cc.w->err) : "");
    sbx_agent_conn *c = cc.w->value;
    waiter_free(cc.w);
    return c;
}

static inline void do_close(void *arg)
{
    sbx__agent_close(arg);
}

static inline void close_conn(sbx_agent_conn *c)
{
    on_loop(do_close, c);
}

#endif
