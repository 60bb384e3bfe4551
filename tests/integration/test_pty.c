/*
 * PTY sessions on real linux boxes: real terminals in the box's agent, real
 * connections from the host (docs/terminals.md). Each test ends with the
 * census: nothing of sbx may be left on the host.
 *
 * No timing thresholds: a read waits for what it expects (bounded by the
 * test's alarm), and every wait names what it waited for when it fails.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include <string.h>

/* Output of `stream` so far (appended to a growing buffer). */
struct text {
    char buf[1 << 16];
    size_t len;
};

/*
 * Reads until `needle` shows up in what was read (the whole text is kept,
 * the newest 64 KiB of it). Fails the test when the session ends first.
 */
static void read_until(sbx_pty *p, int stream, struct text *t, const char *needle)
{
    for (;;) {
        t->buf[t->len] = 0;
        if (strstr(t->buf, needle))
            return;
        char chunk[4096];
        size_t n = 0;
        sbx_error *e = NULL;
        int rc = sbx_pty_read(p, stream, chunk, sizeof(chunk), -1, &n, NULL, &e);
        if (rc != SBX_OK)
            TAP_FAIL("waiting for '%s': %s (read so far: %s)", needle, sbx_error_message(e),
                     t->buf);
        if (n == 0)
            TAP_FAIL("the session ended before '%s' (read: %s)", needle, t->buf);
        if (t->len + n >= sizeof(t->buf)) {
            size_t drop = t->len + n - sizeof(t->buf) + 1;
            memmove(t->buf, t->buf + drop, t->len - drop);
            t->len -= drop;
        }
        memcpy(t->buf + t->len, chunk, n);
        t->len += n;
    }
}

static sbx_pty *open_cmd(sbx_sandbox *sb, const char *cmd, int pipes, unsigned rows,
                         unsigned cols)
{
    sbx_pty_opts *o = sbx_pty_opts_new();
    if (cmd)
        TAP_EQ_INT(sbx_pty_opts_set_command(o, cmd), SBX_OK);
    TAP_EQ_INT(sbx_pty_opts_set_pipes(o, pipes), SBX_OK);
    if (rows)
        TAP_EQ_INT(sbx_pty_opts_set_size(o, rows, cols), SBX_OK);
    sbx_pty *p = NULL;
    sbx_error *e = NULL;
    if (sbx_pty_open(sb, o, &p, &e) != SBX_OK)
        TAP_FAIL("pty open %s: %s", cmd ? cmd : "(shell)", sbx_error_message(e));
    sbx_pty_opts_free(o);
    return p;
}

static int wait_code(sbx_pty *p)
{
    int code = -1;
    sbx_error *e = NULL;
    if (sbx_pty_wait(p, -1, &code, &e) != SBX_OK)
        TAP_FAIL("wait: %s", sbx_error_message(e));
    return code;
}

/* The terminal has the size asked for, a resize reaches it, and exit codes pass through. */
static void test_size_resize_and_exit_codes(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_pty *p = open_cmd(sb, NULL, 0, 33, 101); /* the box's shell */
    TAP_TRUE(sbx_pty_id(p) > 0);
    struct text t = {0};
    TAP_OK(sbx_pty_write(p, "stty size; echo MARK-$((40+2))\n", 31, NULL));
    read_until(p, SBX_STREAM_STDOUT, &t, "MARK-42");
    TAP_CONTAINS(t.buf, "33 101");
    TAP_OK(sbx_pty_resize(p, 50, 132, NULL));
    TAP_OK(sbx_pty_write(p, "stty size; echo MARK-$((50+2))\n", 31, NULL));
    read_until(p, SBX_STREAM_STDOUT, &t, "MARK-52");
    TAP_CONTAINS(t.buf, "50 132");
    TAP_OK(sbx_pty_write(p, "tty; exit 3\n", 12, NULL));
    read_until(p, SBX_STREAM_STDOUT, &t, "/dev/pts/");
    TAP_EQ_INT(wait_code(p), 3);
    /* Everything was read: the next read says the session ended. */
    char b[256];
    size_t n = 1;
    while (n)
        TAP_OK(sbx_pty_read(p, SBX_STREAM_STDOUT, b, sizeof(b), -1, &n, NULL, NULL));
    sbx_pty_free(p);

    /* A command as argv, killed by a signal: 128+N. */
    sbx_pty_opts *o = sbx_pty_opts_new();
    const char *argv[] = {"sh", "-c", "kill -TERM $$", NULL};
    TAP_OK(sbx_pty_opts_set_argv(o, argv));
    TAP_OK(sbx_pty_open(sb, o, &p, NULL));
    TAP_EQ_INT(wait_code(p), 128 + 15);
    sbx_pty_free(p);
    sbx_pty_opts_free(o);

    /* A command that cannot start says why. */
    o = sbx_pty_opts_new();
    TAP_OK(sbx_pty_opts_set_cwd(o, "/no/such/dir"));
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_open(sb, o, &p, &e), SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "/no/such/dir");
    sbx_error_free(e);
    sbx_pty_opts_free(o);
    /* Unknown signal names are refused before anything is sent. */
    p = open_cmd(sb, "sleep 1000", 0, 0, 0);
    e = NULL;
    TAP_EQ_INT(sbx_pty_signal(p, "NOPE", &e), SBX_EINVAL);
    sbx_error_free(e);
    TAP_OK(sbx_pty_close(p, NULL));

    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/* Closing an opened shell ends its background jobs too (they hold its terminal). */
static void test_close_ends_background_jobs(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_pty *p = open_cmd(sb, NULL, 0, 0, 0);
    struct text t = {0};
    TAP_OK(sbx_pty_write(p, "sleep 1000 & echo STARTED-$((1+2))\n", 35, NULL));
    read_until(p, SBX_STREAM_STDOUT, &t, "STARTED-3");
    TAP_OK(sbx_pty_close(p, NULL));
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, "pgrep -x sleep", NULL, &r, NULL));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 1);
    sbx_exec_result_free(r);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/* signal INT interrupts a foreground `sleep` and the shell carries on. */
static void test_ctrl_c_interrupts_sleep(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_pty *p = open_cmd(sb, NULL, 0, 0, 0);
    struct text t = {0};
    TAP_OK(sbx_pty_write(p, "echo GO; sleep 1000\n", 20, NULL));
    read_until(p, SBX_STREAM_STDOUT, &t, "GO\r\n");
    /* The sleep must be the foreground job before the signal: wait until it runs. */
    sbx_exec_result *r = NULL;
    for (;;) {
        TAP_OK(sbx_sandbox_exec(sb, "pgrep -x sleep", NULL, &r, NULL));
        int rc = sbx_exec_result_return_code(r);
        sbx_exec_result_free(r);
        if (rc == 0)
            break;
    }
    TAP_OK(sbx_pty_signal(p, "SIGINT", NULL));
    /* Ctrl-C ends the foreground job; the shell takes the next line (as after a keypress). */
    TAP_OK(sbx_pty_write(p, "echo AFTER-$?\n", 14, NULL));
    read_until(p, SBX_STREAM_STDOUT, &t, "AFTER-130");
    TAP_OK(sbx_pty_write(p, "exit\n", 5, NULL));
    TAP_EQ_INT(wait_code(p), 0); /* the last command, echo, succeeded */
    sbx_pty_free(p);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/* Pipe mode keeps stdout and stderr apart and passes stdin and EOF. */
static void test_pipe_mode_keeps_stderr_apart(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_pty *p = open_cmd(sb, "echo out-line; echo err-line >&2; test -t 0 || echo no-tty; "
                              "cat; exit 7",
                          1, 0, 0);
    TAP_OK(sbx_pty_write(p, "from-stdin\n", 11, NULL));
    TAP_OK(sbx_pty_write(p, "", 0, NULL)); /* EOF: cat ends */
    TAP_EQ_INT(wait_code(p), 7);
    struct text out = {0}, err = {0};
    read_until(p, SBX_STREAM_STDOUT, &out, "from-stdin");
    read_until(p, SBX_STREAM_STDERR, &err, "err-line");
    TAP_CONTAINS(out.buf, "out-line\nno-tty\n");
    TAP_TRUE(!strstr(out.buf, "err-line"));
    TAP_TRUE(!strstr(err.buf, "out-line"));
    sbx_pty_free(p);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/*
 * A second connection attaches with since=0 and gets the retained output,
 * then live output; without takeover a held session is refused; takeover
 * makes the first holder's reads fail with the PTY error.
 */
static void test_attach_replay_and_takeover(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_pty *a = open_cmd(sb, NULL, 0, 0, 0);
    unsigned id = sbx_pty_id(a);
    struct text ta = {0};
    TAP_OK(sbx_pty_write(a, "echo FIRST-$((1+1))\n", 20, NULL));
    read_until(a, SBX_STREAM_STDOUT, &ta, "FIRST-2");

    sbx_pty *b = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_attach(sb, id, 0, 0, &b, &e), SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "attached to another client");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_pty_attach(sb, 999999, 1, 0, &b, &e), SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "no PTY session");
    sbx_error_free(e);

    TAP_OK(sbx_pty_attach(sb, id, 1, 0, &b, NULL));
    struct text tb = {0};
    /* The replay from offset 0: what the first holder saw, from the start. */
    read_until(b, SBX_STREAM_STDOUT, &tb, "FIRST-2");
    unsigned long long off = 99;
    char c;
    size_t n;
    /* The evicted holder's next read fails with the PTY error. */
    e = NULL;
    int rc;
    while ((rc = sbx_pty_read(a, SBX_STREAM_STDOUT, &c, 1, -1, &n, &off, &e)) == SBX_OK && n)
        ;
    TAP_EQ_INT(rc, SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "taken over");
    sbx_error_free(e);
    sbx_pty_free(a);
    /* Live output follows on the new holder. */
    TAP_OK(sbx_pty_write(b, "echo SECOND-$((2+2))\n", 21, NULL));
    read_until(b, SBX_STREAM_STDOUT, &tb, "SECOND-4");
    /* Detach, then attach again from a later offset: only what came after. */
    TAP_OK(sbx_pty_detach(b, NULL));
    sbx_pty_free(b);
    TAP_OK(sbx_pty_attach(sb, id, 0, 0, &b, NULL)); /* nobody holds it now */
    TAP_OK(sbx_pty_read(b, SBX_STREAM_STDOUT, &c, 1, -1, &n, &off, NULL));
    TAP_EQ_INT((int)off, 0);
    TAP_OK(sbx_pty_write(b, "exit 5\n", 7, NULL));
    TAP_EQ_INT(wait_code(b), 5);
    sbx_pty_free(b);
    /* The session is gone once its end was delivered. */
    e = NULL;
    TAP_EQ_INT(sbx_pty_attach(sb, id, 1, 0, &b, &e), SBX_EPTY);
    sbx_error_free(e);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/* More output than the window: the oldest bytes are gone and the offsets stay true. */
static void test_window_is_bounded_with_true_offsets(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    /* 3 MiB of digits in pipe mode (exact bytes: no terminal translation), then EXIT. */
    sbx_pty *p = open_cmd(sb, "head -c 3145728 /dev/zero | tr '\\0' 7; exit 0", 1, 0, 0);
    unsigned id = sbx_pty_id(p);
    /* Leave without reading: the session keeps its window after the command ends. */
    TAP_OK(sbx_pty_detach(p, NULL));
    sbx_pty_free(p);
    /* Wait for the command to end (its process disappears from the box). */
    for (;;) {
        sbx_exec_result *r = NULL;
        TAP_OK(sbx_sandbox_exec(sb, "pgrep -x head || pgrep -x tr", NULL, &r, NULL));
        int rc = sbx_exec_result_return_code(r);
        sbx_exec_result_free(r);
        if (rc != 0)
            break;
    }
    TAP_OK(sbx_pty_attach(sb, id, 0, 0, &p, NULL));
    static char buf[4 << 20];
    size_t total = 0, n;
    unsigned long long off, first = 0;
    bool got_first = false;
    for (;;) {
        TAP_OK(sbx_pty_read(p, SBX_STREAM_STDOUT, buf + total, sizeof(buf) - total, -1, &n, &off,
                            NULL));
        if (!n)
            break;
        if (!got_first) {
            first = off;
            got_first = true;
        }
        TAP_EQ_INT((long long)off, (long long)(first + total));
        total += n;
    }
    TAP_EQ_INT((long long)total, (long long)SBX_PTY_WINDOW_BYTES);
    TAP_EQ_INT((long long)first, (long long)(3145728 - SBX_PTY_WINDOW_BYTES));
    for (size_t i = 0; i < total; i++)
        if (buf[i] != '7')
            TAP_FAIL("byte %zu is 0x%02x", i, (unsigned char)buf[i]);
    int code = -1;
    TAP_OK(sbx_pty_wait(p, -1, &code, NULL));
    TAP_EQ_INT(code, 0);
    sbx_pty_free(p);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/* 50 sessions at once in one box, each its own terminal; then stop leaves nothing. */
static void test_fifty_sessions(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_pty *ps[50];
    for (int i = 0; i < 50; i++)
        ps[i] = open_cmd(sb, NULL, 0, 0, 0);
    for (int i = 0; i < 50; i++) {
        char cmd[64];
        int len = snprintf(cmd, sizeof(cmd), "echo S$((%d*1000))-$(tty)\n", i + 1);
        TAP_OK(sbx_pty_write(ps[i], cmd, (size_t)len, NULL));
    }
    char seen[50][64];
    for (int i = 0; i < 50; i++) {
        struct text t = {0};
        char want[32];
        snprintf(want, sizeof(want), "S%d-/dev/pts/", (i + 1) * 1000);
        read_until(ps[i], SBX_STREAM_STDOUT, &t, want);
        const char *at = strstr(t.buf, want) + strlen(want);
        snprintf(seen[i], sizeof(seen[i]), "%.*s", (int)strcspn(at, "\r\n"), at);
        for (int j = 0; j < i; j++)
            if (!strcmp(seen[i], seen[j]))
                TAP_FAIL("sessions %d and %d share /dev/pts/%s", i, j, seen[i]);
    }
    /* Half closed by their opener, half left running for stop to end. */
    for (int i = 0; i < 25; i++)
        TAP_OK(sbx_pty_close(ps[i], NULL));
    for (int i = 25; i < 50; i++)
        sbx_pty_free(ps[i]);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_size_resize_and_exit_codes), TAP(test_close_ends_background_jobs),
        TAP(test_ctrl_c_interrupts_sleep),
        TAP(test_pipe_mode_keeps_stderr_apart), TAP(test_attach_replay_and_takeover),
        TAP(test_window_is_bounded_with_true_offsets), TAP_T(test_fifty_sessions, 120),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
