/* A real sbx-agent on the host and the host client driving it: see agent.h. */
#include "lib/agent.h"

#include "lib/proc.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- the agent process --------------------------------------------------- */

static void setenv_child(const char *const *env)
{
    for (size_t i = 0; env && env[i]; i += 2)
        setenv(env[i], env[i + 1], 1);
}

struct agent start_listen_opts(const char *const *opts, const char *const *env,
                               char *const *entry)
{
    struct agent a = {.stdio_fd = -1};
    snprintf(a.sock, sizeof(a.sock), "%s/run/sbx/agent.sock", tap_tmpdir());
    const char *argv[32] = {agent_bin(), "init", "--listen", a.sock, "--ready-fd", "3"};
    int n = 6;
    for (int i = 0; opts && opts[i] && n < 20; i++)
        argv[n++] = opts[i];
    if (entry) {
        argv[n++] = "--";
        for (int i = 0; entry[i] && n < 30; i++)
            argv[n++] = entry[i];
    }
    argv[n] = NULL;
    int rp[2];
    TAP_TRUE(pipe2(rp, O_CLOEXEC) == 0);
    a.pid = fork();
    TAP_TRUE(a.pid >= 0);
    if (a.pid == 0) {
        dup2(rp[1], 3);
        setenv_child(env);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(rp[1]);
    char b;
    TAP_EQ_INT(read(rp[0], &b, 1), 1);
    close(rp[0]);
    return a;
}

struct agent start_listen(const char *root, const char *const *env, char *const *entry)
{
    const char *opts[] = {"--root", root, NULL};
    return start_listen_opts(root ? opts : NULL, env, entry);
}

struct agent start_stdio(const char *root, const char *const *env)
{
    struct agent a = {.stdio_fd = -1};
    int sv[2];
    TAP_TRUE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    const char *bin = agent_bin();
    a.pid = fork();
    TAP_TRUE(a.pid >= 0);
    if (a.pid == 0) {
        dup2(sv[1], 0);
        dup2(sv[1], 1);
        setenv_child(env);
        const char *argv[] = {bin, "serve", "--stdio", root ? "--root" : NULL, root, NULL};
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(sv[1]);
    a.stdio_fd = sv[0];
    return a;
}

int stop_agent(struct agent *a)
{
    kill(a->pid, SIGTERM);
    int st = 0;
    while (waitpid(a->pid, &st, 0) < 0 && errno == EINTR)
        ;
    return st;
}

/* --- the sbx side -------------------------------------------------------- */

sbx_provider *P;

void *loop_of(void)
{
    return sbx__context_uv(P->ctx);
}

void setup(void)
{
    sbx_error *e = NULL;
    if (sbx_provider_new("{\"local\": {}}", &P, &e) != SBX_OK)
        TAP_FAIL("provider: %s", sbx_error_message(e));
}

struct waiter *waiter_new(void)
{
    struct waiter *w = calloc(1, sizeof(*w));
    pthread_mutex_init(&w->m, NULL);
    pthread_cond_init(&w->cv, NULL);
    return w;
}

void waiter_signal(struct waiter *w, int code, sbx_error *err, void *value)
{
    pthread_mutex_lock(&w->m);
    w->code = code;
    w->err = err;
    w->value = value;
    w->done = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->m);
}

void op_done(int code, sbx_error *err, void *value, void *data)
{
    waiter_signal(data, code, err, value);
}

void waiter_wait(struct waiter *w)
{
    pthread_mutex_lock(&w->m);
    while (!w->done)
        pthread_cond_wait(&w->cv, &w->m);
    pthread_mutex_unlock(&w->m);
}

void waiter_free(struct waiter *w)
{
    sbx_error_free(w->err);
    free(w);
}

/* Runs fn(arg) on the loop thread and waits for it to have run. */
void on_loop(void (*fn)(void *), void *arg)
{
    TAP_EQ_INT(sbx__context_post(P->ctx, fn, arg), SBX_OK);
    sbx__context_drain(P->ctx);
}

void connect_cb(sbx_agent_conn *conn, int code, sbx_error *err, void *data)
{
    waiter_signal(data, code, err, conn);
}

void do_connect(void *arg)
{
    struct connect_call *cc = arg;
    int rc = cc->path ? sbx__agent_connect(loop_of(), cc->path, 10.0, connect_cb, cc->w)
                      : sbx__agent_connect_fd(loop_of(), cc->fd, 10.0, connect_cb, cc->w);
    if (rc < 0)
        waiter_signal(cc->w, rc, NULL, NULL);
}

sbx_agent_conn *connect_agent(struct agent *a)
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

static void do_close(void *arg)
{
    sbx__agent_close(arg);
}

void close_conn(sbx_agent_conn *c)
{
    on_loop(do_close, c);
}

/* --- ops on a connection ------------------------------------------------- */

struct exec_call {
    sbx_agent_conn *c;
    const char *cmd;
    const char *const *argv;
    const sbx_exec_opts *opts;
    const char *const *base_env;
    struct waiter *w;
};

static void do_exec(void *arg)
{
    struct exec_call *ec = arg;
    ec->w->op = sbx__op_new(P, op_done, ec->w);
    sbx__agent_exec(ec->c, ec->w->op, ec->cmd, ec->argv, ec->opts, ec->base_env);
}

struct waiter *exec_start_async(sbx_agent_conn *c, const char *cmd, const char *const *argv,
                                const sbx_exec_opts *opts, const char *const *base_env)
{
    struct exec_call *ec = calloc(1, sizeof(*ec));
    TAP_TRUE(ec != NULL);
    *ec = (struct exec_call){c, cmd, argv, opts, base_env, waiter_new()};
    struct waiter *w = ec->w;
    on_loop(do_exec, ec);
    free(ec);
    return w;
}

sbx_exec_result *exec_wait(struct waiter *w)
{
    waiter_wait(w);
    if (w->code != SBX_OK)
        TAP_FAIL("exec failed: %d %s", w->code, w->err ? sbx_error_message(w->err) : "");
    sbx_exec_result *r = w->value;
    waiter_free(w);
    return r;
}

sbx_exec_result *agent_run(sbx_agent_conn *c, const char *cmd, const sbx_exec_opts *opts)
{
    return exec_wait(exec_start_async(c, cmd, NULL, opts, NULL));
}

void do_file(void *arg)
{
    struct file_call *fc = arg;
    fc->w->op = sbx__op_new(P, op_done, fc->w);
    if (fc->lim)
        sbx__agent_set_limits(fc->c, fc->lim);
    if (fc->download)
        sbx__agent_download(fc->c, fc->w->op, fc->a, fc->b);
    else
        sbx__agent_upload(fc->c, fc->w->op, fc->a, fc->b);
}

int transfer_limited(sbx_agent_conn *c, int download, const char *a, const char *b, char **msg,
                     const sbx_agent_limits *lim)
{
    struct file_call fc = {c, a, b, download, waiter_new(), lim};
    on_loop(do_file, &fc);
    waiter_wait(fc.w);
    int code = fc.w->code;
    if (msg)
        *msg = fc.w->err ? strdup(sbx_error_message(fc.w->err)) : NULL;
    waiter_free(fc.w);
    return code;
}

int transfer(sbx_agent_conn *c, int download, const char *a, const char *b, char **msg)
{
    return transfer_limited(c, download, a, b, msg, NULL);
}

void do_cancel(void *arg)
{
    sbx__op_cancel(arg);
}

void teardown(sbx_agent_conn *c, struct agent *a)
{
    if (c)
        close_conn(c);
    if (a)
        stop_agent(a);
    if (a && a->stdio_fd >= 0)
        close(a->stdio_fd);
    sbx_provider_free(P);
    P = NULL;
}
