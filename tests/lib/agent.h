/*
 * A real sbx-agent on the host for the agent-protocol tests (test_agent,
 * test_sec_client; tests/lib/agent.c): the agent started in --listen or
 * --stdio mode, and the host client (src/kit/client.h) driven on a
 * provider's loop from the test's thread. setup() makes the provider P
 * whose loop runs the client; teardown() ends the connection, the agent and P.
 */
#ifndef SBX_TESTS_LIB_AGENT_H
#define SBX_TESTS_LIB_AGENT_H

#include "core/internal.h"
#include "kit/client.h"
#include "lib/proc.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

/* --- the agent process --------------------------------------------------- */

struct agent {
    pid_t pid;
    char sock[100];
    int stdio_fd; /* host end in --stdio mode */
};

/*
 * init --listen SOCK [OPTS...] [-- ENTRY...] (opts and entry NULL-ended, may
 * be NULL); returns once the agent said it is ready (--ready-fd). `env`:
 * NAME, VALUE pairs set in the agent's environment.
 */
struct agent start_listen_opts(const char *const *opts, const char *const *env,
                               char *const *entry);
/* start_listen_opts() with --root ROOT (NULL: none). */
struct agent start_listen(const char *root, const char *const *env, char *const *entry);
/* serve --stdio [--root ROOT]: the host end in a->stdio_fd. */
struct agent start_stdio(const char *root, const char *const *env);
/* SIGTERM and reap; the wait status. */
int stop_agent(struct agent *a);

/* --- the sbx side -------------------------------------------------------- */

/* The provider whose loop runs the client (setup() makes it). */
extern sbx_provider *P;
void setup(void);
void *loop_of(void);
/* Runs fn(arg) on the loop thread and waits for it to have run. */
void on_loop(void (*fn)(void *), void *arg);

/* An op's completion, waited for from the test's thread. */
struct waiter {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    int code;
    sbx_error *err;
    void *value;
    sbx_op *op;
};

struct waiter *waiter_new(void);
void waiter_signal(struct waiter *w, int code, sbx_error *err, void *value);
/* An sbx_op callback completing the waiter `data`. */
void op_done(int code, sbx_error *err, void *value, void *data);
void waiter_wait(struct waiter *w);
void waiter_free(struct waiter *w);

struct connect_call {
    const char *path;
    int fd;
    struct waiter *w;
};

/* On the loop: connects the waiter cc->w to cc->path (or cc->fd when path is NULL). */
void do_connect(void *arg);
/* An sbx__agent_connect callback completing the waiter `data` with the connection. */
void connect_cb(sbx_agent_conn *conn, int code, sbx_error *err, void *data);
/* Connects to `a` (its socket, or its stdio fd, which the connection then owns). */
sbx_agent_conn *connect_agent(struct agent *a);
void close_conn(sbx_agent_conn *c);

/* --- ops on a connection ------------------------------------------------- */

/* Starts an exec; the waiter completes with the result. */
struct waiter *exec_start_async(sbx_agent_conn *c, const char *cmd, const char *const *argv,
                                const sbx_exec_opts *opts, const char *const *base_env);
/* Waits for an exec that must not fail with an sbx error; its result. */
sbx_exec_result *exec_wait(struct waiter *w);
/* exec_wait(exec_start_async(c, cmd, NULL, opts, NULL)). */
sbx_exec_result *agent_run(sbx_agent_conn *c, const char *cmd, const sbx_exec_opts *opts);
/* One transfer, started on the loop by do_file(); see transfer_limited(). */
struct file_call {
    sbx_agent_conn *c;
    const char *a, *b;
    int download;
    struct waiter *w;
    const sbx_agent_limits *lim;
};

void do_file(void *arg);
/*
 * An upload (download 0: host a -> box b) or a download (box a -> host b);
 * the op's code, *msg (optional) a copy of its error message. `lim` (may be
 * NULL) sets the connection's limits first.
 */
int transfer_limited(sbx_agent_conn *c, int download, const char *a, const char *b, char **msg,
                     const sbx_agent_limits *lim);
int transfer(sbx_agent_conn *c, int download, const char *a, const char *b, char **msg);
/* On the loop: cancels the op `arg`. */
void do_cancel(void *arg);
/* Closes c and stops a (either may be NULL), then frees P. */
void teardown(sbx_agent_conn *c, struct agent *a);

#endif
