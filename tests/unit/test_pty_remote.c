/*
 * Terminals a provider opens itself (provider.h pty_open, ABI 3): the core's
 * side, through the public sbx_pty_* calls, against "doorterm", a provider
 * in this file whose session is an echo on the loop thread. What it is told
 * (writes, resizes, signals, flow, close) it echoes as output, and some
 * inputs make it act: "exit N" ends the command, "fail" loses the
 * connection, "flood" writes more than the reader's window, "err" writes
 * to stderr.
 */
#include "tap.h"
#include "common.h"

#include "core/internal.h"
#include "fakes/fake.h"

#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define ERR(e) (sbx_error_free(e), (e) = NULL, &(e))

static atomic_int pauses, resumes, closes, close_end = -1, opened;
static char seen[1024]; /* the request, as the provider read it (loop thread, then read after) */

struct conn {
    sbx_op *op;
    sbx_pty_session *s;
};
static struct conn *silent; /* a session not ready yet (loop thread) */

static void out_text(struct conn *c, int stream, const char *t)
{
    sbx_pty_session_output(c->s, stream, SBX_PTY_OFFSET_NEXT, t, strlen(t));
}

static void door_write(void *conn, const void *data, size_t len)
{
    struct conn *c = conn;
    char in[64];
    snprintf(in, sizeof(in), "%.*s", (int)(len < 63 ? len : 63), (const char *)data);
    if (!strncmp(in, "exit ", 5)) {
        sbx_pty_session_exit(c->s, (int)strtol(in + 5, NULL, 10));
    } else if (!strcmp(in, "fail")) {
        sbx_pty_session_fail(c->s, sbx_error_new(SBX_EIO, "the connection was reset"));
    } else if (!strcmp(in, "err")) {
        out_text(c, SBX_STREAM_STDERR, "to stderr");
    } else if (!strcmp(in, "flood")) {
        static char chunk[64 << 10];
        memset(chunk, 'x', sizeof(chunk));
        for (int i = 0; i < 24; i++) /* 1.5 MiB: past the window too */
            sbx_pty_session_output(c->s, SBX_STREAM_STDOUT, SBX_PTY_OFFSET_NEXT, chunk,
                                   sizeof(chunk));
    } else {
        sbx_pty_session_output(c->s, SBX_STREAM_STDOUT, SBX_PTY_OFFSET_NEXT, data, len);
    }
}

static void door_resize(void *conn, unsigned rows, unsigned cols)
{
    char t[64];
    snprintf(t, sizeof(t), "resize %ux%u", rows, cols);
    out_text(conn, SBX_STREAM_STDOUT, t);
}

static void door_signal(void *conn, int signo, const char *name)
{
    char t[64];
    snprintf(t, sizeof(t), "signal %s %d", name, signo);
    out_text(conn, SBX_STREAM_STDOUT, t);
}

static void door_flow(void *conn, int pause)
{
    (void)conn;
    atomic_fetch_add(pause ? &pauses : &resumes, 1);
}

static void door_close(void *conn, int end)
{
    struct conn *c = conn;
    atomic_store(&close_end, end);
    atomic_fetch_add(&closes, 1);
    /* Let go at once: a real provider completes once its connection closed. */
    sbx_op_complete(c->op, SBX_OK, NULL, NULL);
    free(c);
}

static const struct sbx_pty_session_ops door_ops = {
    .write = door_write,
    .resize = door_resize,
    .signal = door_signal,
    .flow = door_flow,
    .close = door_close,
};

static void door_pty_open(sbx_op *op, void *state, void *box, sbx_pty_session *s)
{
    (void)state, (void)box;
    atomic_fetch_add(&opened, 1);
    unsigned rows, cols;
    sbx_pty_session_size(s, &rows, &cols);
    const char *cmd = sbx_pty_session_command(s);
    snprintf(seen, sizeof(seen), "cmd=%s cwd=%s size=%ux%u pipes=%d env=%zu:%s attach=%u/%d/%llu",
             cmd ? cmd : "-", sbx_pty_session_cwd(s) ? sbx_pty_session_cwd(s) : "-", rows, cols,
             sbx_pty_session_pipes(s), sbx_pty_session_env_count(s),
             sbx_pty_session_env_count(s) ? sbx_pty_session_env_at(s, 0) : "-",
             sbx_pty_session_attach_id(s), sbx_pty_session_takeover(s),
             sbx_pty_session_since(s));
    if (cmd && !strcmp(cmd, "silent")) {
        /* Says nothing until an exec (loop thread) makes it ready, too late. */
        silent = calloc(1, sizeof(*silent));
        silent->op = op;
        silent->s = s;
        return;
    }
    if (cmd && !strcmp(cmd, "refuse")) {
        sbx_op_complete(op, SBX_EPTY,
                        sbx_error_new(SBX_EPTY, "session 7 already has an attached client"), NULL);
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    c->op = op;
    c->s = s;
    if (sbx_pty_session_attach_id(s)) {
        /* A replay from `since`. */
        sbx_pty_session_output(s, SBX_STREAM_STDOUT, sbx_pty_session_since(s), "replayed", 8);
    } else {
        out_text(c, SBX_STREAM_STDOUT, "hello\n");
    }
    TAP_EQ_INT(sbx_pty_session_ready(s, &door_ops, c, 7), SBX_OK);
}

static sbx_provider *prov;
static sbx_sandbox *box;

/* The exec of doorterm: a "silent" session's late ready, then a result. */
static void door_exec(sbx_op *op, void *state, void *b, const char *command,
                      const sbx_exec_opts *opts)
{
    (void)state, (void)b, (void)command, (void)opts;
    if (silent) {
        TAP_EQ_INT(sbx_pty_session_ready(silent->s, &door_ops, silent, 9), SBX_OK);
        silent = NULL;
    }
    sbx_exec_result *r = NULL;
    int rc = sbx_exec_result_new("", 0, "", 0, 0, NULL, &r);
    sbx_op_complete(op, rc, NULL, r);
}

static void setup(void)
{
    static struct sbx_provider_ops door;
    door = sbx_fake_provider;
    door.name = "doorterm";
    door.pty_open = door_pty_open;
    door.agent_address = NULL;
    door.exec = door_exec;
    TAP_OK(sbx_register_provider(&door, 1, NULL));
    TAP_OK(sbx_provider_new("{\"doorterm\": {}}", &prov, NULL));
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "img");
    sbx_spec_set_workdir(s, "/work");
    TAP_OK(sbx_sandbox_new(prov, s, &box, NULL));
    TAP_OK(sbx_sandbox_start(box, NULL, NULL));
    sbx_spec_free(s);
}

static void teardown(void)
{
    sbx_sandbox_free(box);
    sbx_provider_free(prov);
}

/* Reads stdout until `want` came (or 5 s); returns what came. */
static char *read_until(sbx_pty *p, int stream, const char *want)
{
    static char got[8192];
    size_t have = 0;
    got[0] = 0;
    for (int i = 0; i < 100 && !strstr(got, want); i++) {
        size_t n = 0;
        sbx_error *e = NULL;
        int rc = sbx_pty_read(p, stream, got + have, sizeof(got) - 1 - have, 0.05, &n, NULL, &e);
        sbx_error_free(e);
        if (rc == SBX_ETIMEDOUT)
            continue;
        if (rc < 0 || n == 0)
            break;
        have += n;
        got[have] = 0;
    }
    return got;
}

static void wait_atomic(atomic_int *v, int at_least)
{
    for (int i = 0; i < 500 && atomic_load(v) < at_least; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
}

static void test_caps_and_io(void)
{
    setup();
    TAP_EQ_INT(sbx_provider_supports(prov, "pty"), 1);
    sbx_pty_opts *o = sbx_pty_opts_new();
    sbx_pty_opts_set_command(o, "bash");
    sbx_pty_opts_set_size(o, 30, 100);
    sbx_pty_opts_set_env(o, "K", "v");
    sbx_pty *p = NULL;
    TAP_OK(sbx_pty_open(box, o, &p, NULL));
    sbx_pty_opts_free(o);
    TAP_CONTAINS(seen, "cmd=bash cwd=/work size=30x100 pipes=0 env=1:K=v attach=0/0/0");
    TAP_EQ_INT(sbx_pty_id(p), 7);
    /* The fd is readable: "hello" waits. */
    struct pollfd pf = {.fd = sbx_pty_fd(p), .events = POLLIN};
    TAP_EQ_INT(poll(&pf, 1, 2000), 1);
    TAP_CONTAINS(read_until(p, SBX_STREAM_STDOUT, "hello"), "hello\n");

    TAP_OK(sbx_pty_write(p, "abc", 3, NULL));
    TAP_CONTAINS(read_until(p, SBX_STREAM_STDOUT, "abc"), "abc");
    TAP_OK(sbx_pty_resize(p, 40, 120, NULL));
    TAP_CONTAINS(read_until(p, SBX_STREAM_STDOUT, "resize"), "resize 40x120");
    TAP_OK(sbx_pty_signal(p, "int", NULL));
    TAP_CONTAINS(read_until(p, SBX_STREAM_STDOUT, "signal"), "signal SIGINT 2");
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_resize(p, 0, 10, ERR(e)), SBX_EINVAL);
    TAP_EQ_INT(sbx_pty_signal(p, "NOPE", ERR(e)), SBX_EINVAL);

    /* Nothing more: a bounded read times out. */
    char buf[16];
    size_t n = 99;
    TAP_EQ_INT(sbx_pty_read(p, SBX_STREAM_STDOUT, buf, sizeof(buf), 0, &n, NULL, ERR(e)),
               SBX_ETIMEDOUT);

    TAP_OK(sbx_pty_write(p, "exit 3", 6, NULL));
    int code = -1;
    TAP_OK(sbx_pty_wait(p, 5, &code, NULL));
    TAP_EQ_INT(code, 3);
    TAP_OK(sbx_pty_read(p, SBX_STREAM_STDOUT, buf, sizeof(buf), 1, &n, NULL, NULL));
    TAP_EQ_INT(n, 0);
    TAP_EQ_INT(sbx_pty_write(p, "x", 1, ERR(e)), SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "has ended");
    sbx_error_free(e);
    /* The opener's close ends the session, and waits for the provider to let go. */
    TAP_OK(sbx_pty_close(p, NULL));
    TAP_EQ_INT(atomic_load(&closes), 1);
    TAP_EQ_INT(atomic_load(&close_end), 1);
    teardown();
}

static void test_pipes_stderr(void)
{
    setup();
    sbx_pty_opts *o = sbx_pty_opts_new();
    sbx_pty_opts_set_pipes(o, 1);
    sbx_pty *p = NULL;
    TAP_OK(sbx_pty_open(box, o, &p, NULL));
    sbx_pty_opts_free(o);
    TAP_CONTAINS(seen, "cmd=- cwd=/work size=24x80 pipes=1");
    TAP_OK(sbx_pty_write(p, "err", 3, NULL));
    TAP_CONTAINS(read_until(p, SBX_STREAM_STDERR, "stderr"), "to stderr");
    TAP_CONTAINS(read_until(p, SBX_STREAM_STDOUT, "hello"), "hello");
    TAP_OK(sbx_pty_close(p, NULL));
    teardown();
}

static void test_provider_error_mid_session(void)
{
    setup();
    sbx_pty *p = NULL;
    TAP_OK(sbx_pty_open(box, NULL, &p, NULL));
    TAP_CONTAINS(read_until(p, SBX_STREAM_STDOUT, "hello"), "hello");
    TAP_OK(sbx_pty_write(p, "fail", 4, NULL));
    char buf[16];
    size_t n = 0;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_read(p, SBX_STREAM_STDOUT, buf, sizeof(buf), 5, &n, NULL, ERR(e)), SBX_EIO);
    TAP_EQ_STR(sbx_error_message(e), "PTY session 7: the connection was reset");
    TAP_EQ_INT(sbx_pty_wait(p, 1, NULL, ERR(e)), SBX_EIO);
    TAP_EQ_INT(sbx_pty_write(p, "x", 1, ERR(e)), SBX_EIO);
    sbx_error_free(e);
    /* Still closed exactly once: the provider lets go of its connection. */
    TAP_OK(sbx_pty_close(p, NULL));
    TAP_EQ_INT(atomic_load(&closes), 1);
    teardown();
}

static void test_open_refused(void)
{
    setup();
    sbx_pty_opts *o = sbx_pty_opts_new();
    sbx_pty_opts_set_command(o, "refuse");
    sbx_pty *p = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_open(box, o, &p, ERR(e)), SBX_EPTY);
    TAP_EQ_STR(sbx_error_message(e), "session 7 already has an attached client");
    TAP_NULL(p);
    TAP_EQ_INT(atomic_load(&closes), 0); /* never ready: never closed */
    sbx_error_free(e);
    sbx_pty_opts_free(o);
    teardown();
}

static void test_flow_and_close_with_output_pending(void)
{
    setup();
    sbx_pty *p = NULL;
    TAP_OK(sbx_pty_open(box, NULL, &p, NULL));
    TAP_OK(sbx_pty_write(p, "flood", 5, NULL));
    /* The reader is behind: the provider is told to pause. */
    wait_atomic(&pauses, 1);
    TAP_EQ_INT(atomic_load(&pauses), 1);
    TAP_EQ_INT(atomic_load(&resumes), 0);
    /* Reading drains it: resume. The window kept the newest bytes (offsets say what fell out). */
    static char buf[1 << 20];
    size_t n = 0, total = 0;
    unsigned long long off = 0, first = 0;
    while (sbx_pty_read(p, SBX_STREAM_STDOUT, buf, sizeof(buf), 0, &n, &off, NULL) == SBX_OK &&
           n) {
        if (!total)
            first = off;
        total += n;
    }
    TAP_EQ_INT(total, SBX_PTY_WINDOW_BYTES);
    TAP_EQ_INT(first + total, 6 + 24 * (64 << 10)); /* "hello\n" and the flood */
    wait_atomic(&resumes, 1);
    TAP_EQ_INT(atomic_load(&resumes), 1);
    /* Output pending again, then the handle closes without reading it. */
    TAP_OK(sbx_pty_write(p, "flood", 5, NULL));
    wait_atomic(&pauses, 2);
    TAP_OK(sbx_pty_close(p, NULL));
    TAP_EQ_INT(atomic_load(&closes), 1);
    teardown();
}

static void test_attach_replays_and_free_detaches(void)
{
    setup();
    sbx_pty *p = NULL;
    TAP_OK(sbx_pty_attach(box, 7, 1, 5, &p, NULL));
    TAP_CONTAINS(seen, "attach=7/1/5");
    char buf[32];
    size_t n = 0;
    unsigned long long off = 0;
    TAP_OK(sbx_pty_read(p, SBX_STREAM_STDOUT, buf, sizeof(buf), 5, &n, &off, NULL));
    TAP_EQ_INT(n, 8);
    TAP_EQ_INT(off, 5);
    /* Freeing the handle detaches: close(end 0), and the sandbox outlives it. */
    sbx_pty_free(p);
    wait_atomic(&closes, 1);
    TAP_EQ_INT(atomic_load(&close_end), 0);
    teardown();
}

static void test_open_times_out_and_a_late_ready_is_closed(void)
{
    setup();
    sbx__pty_open_timeout_s = 0.3;
    sbx_pty_opts *o = sbx_pty_opts_new();
    sbx_pty_opts_set_command(o, "silent");
    sbx_pty *p = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_open(box, o, &p, ERR(e)), SBX_ETIMEDOUT);
    TAP_CONTAINS(sbx_error_message(e), "did not open the PTY session in 0.3 s");
    sbx_error_free(e);
    sbx_pty_opts_free(o);
    /* The provider says ready after all: the core closes it (ending it) at once. */
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(box, "x", NULL, &r, NULL));
    sbx_exec_result_free(r);
    wait_atomic(&closes, 1);
    TAP_EQ_INT(atomic_load(&closes), 1);
    TAP_EQ_INT(atomic_load(&close_end), 1);
    teardown();
}

/* Background processes are pipe-mode sessions: they map; what needs the agent says so. */
static void test_background_process(void)
{
    setup();
    sbx_pty_opts *o = sbx_pty_opts_new();
    sbx_pty_opts_set_command(o, "server");
    sbx_proc *pr = NULL;
    TAP_OK(sbx_proc_start(box, o, &pr, NULL));
    sbx_pty_opts_free(o);
    TAP_CONTAINS(seen, "cmd=server cwd=/work size=24x80 pipes=1");
    TAP_OK(sbx_proc_write(pr, "err", 3, NULL));
    char buf[32];
    size_t n = 0;
    TAP_OK(sbx_proc_read(pr, SBX_STREAM_STDERR, buf, sizeof(buf), 5, &n, NULL, NULL));
    TAP_EQ_INT(n, 9);
    sbx_error *e = NULL;
    sbx_proc *again = NULL;
    TAP_EQ_INT(sbx_proc_attach(box, 7, SBX_PROC_KEEP, 0, &again, ERR(e)), SBX_ENOTSUP);
    TAP_CONTAINS(sbx_error_message(e), "needs a box that runs sbx-agent");
    char *json = NULL;
    TAP_EQ_INT(sbx_proc_list(box, &json, ERR(e)), SBX_ENOTSUP);
    TAP_CONTAINS(sbx_error_message(e), "runs no sbx-agent in its boxes: listing their sessions");
    sbx_error_free(e);
    /* Freeing the handle leaves the process running: a detach. */
    sbx_proc_free(pr);
    wait_atomic(&closes, 1);
    TAP_EQ_INT(atomic_load(&close_end), 0);
    teardown();
}

static void test_detach(void)
{
    setup();
    sbx_pty *p = NULL;
    TAP_OK(sbx_pty_open(box, NULL, &p, NULL));
    TAP_OK(sbx_pty_detach(p, NULL));
    TAP_EQ_INT(atomic_load(&close_end), 0);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_write(p, "x", 1, ERR(e)), SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "detached");
    sbx_error_free(e);
    sbx_pty_free(p);
    TAP_EQ_INT(atomic_load(&closes), 1);
    teardown();
}

TAP_MAIN(TAP(test_caps_and_io), TAP(test_pipes_stderr), TAP(test_provider_error_mid_session),
         TAP(test_open_refused), TAP(test_flow_and_close_with_output_pending),
         TAP(test_attach_replays_and_free_detaches), TAP(test_detach),
         TAP(test_open_times_out_and_a_late_ready_is_closed), TAP(test_background_process))
