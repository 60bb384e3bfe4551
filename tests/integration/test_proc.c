/*
 * Background processes on real linux boxes (docs/terminals.md, "Background
 * processes"): sbx_proc_* and the listings, against the real agent. Each
 * test ends with the census: nothing of sbx may be left on the host.
 *
 * No timing thresholds: a read waits for what it expects (bounded by the
 * test's alarm), and a listing that must change is asked again until it has.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include <jansson.h>
#include <string.h>
#include <sys/wait.h>

static sbx_proc *start_cmd(sbx_sandbox *sb, const char *cmd)
{
    sbx_pty_opts *o = sbx_pty_opts_new();
    TAP_OK(sbx_pty_opts_set_command(o, cmd));
    sbx_proc *p = NULL;
    sbx_error *e = NULL;
    if (sbx_proc_start(sb, o, &p, &e) != SBX_OK)
        TAP_FAIL("start %s: %s", cmd, sbx_error_message(e));
    sbx_pty_opts_free(o);
    TAP_TRUE(sbx_proc_id(p) > 0);
    return p;
}

/* Reads `stream` until `needle` shows up; the text read is in buf (NUL-terminated). */
static void read_until(sbx_proc *p, int stream, char *buf, size_t cap, size_t *len,
                       const char *needle)
{
    for (;;) {
        buf[*len] = 0;
        if (strstr(buf, needle))
            return;
        size_t n = 0;
        sbx_error *e = NULL;
        if (*len + 1 >= cap)
            TAP_FAIL("no '%s' in %zu bytes: %s", needle, *len, buf);
        int rc = sbx_proc_read(p, stream, buf + *len, cap - 1 - *len, -1, &n, NULL, &e);
        if (rc != SBX_OK)
            TAP_FAIL("waiting for '%s': %s (read: %s)", needle, sbx_error_message(e), buf);
        if (n == 0)
            TAP_FAIL("the process ended before '%s' (read: %s)", needle, buf);
        *len += n;
    }
}

static int wait_code(sbx_proc *p)
{
    int code = -1;
    sbx_error *e = NULL;
    if (sbx_proc_wait(p, -1, &code, &e) != SBX_OK)
        TAP_FAIL("wait: %s", sbx_error_message(e));
    return code;
}

/* The listing's entry for session `id` (a new reference), or NULL when it is not listed. */
static json_t *listed(sbx_sandbox *sb, unsigned id)
{
    char *text = NULL;
    sbx_error *e = NULL;
    if (sbx_proc_list(sb, &text, &e) != SBX_OK)
        TAP_FAIL("list: %s", sbx_error_message(e));
    json_t *arr = json_loads(text, 0, NULL);
    sbx_free(text);
    TAP_TRUE(json_is_array(arr));
    json_t *found = NULL, *v;
    size_t i;
    json_array_foreach(arr, i, v)
    {
        if (json_integer_value(json_object_get(v, "id")) == (json_int_t)id)
            found = json_incref(v);
    }
    json_decref(arr);
    return found;
}

/* Output so far, stdin lines then EOF, stderr apart, the exit code. */
static void test_stdin_output_and_exit_code(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_proc *p = start_cmd(sb, "echo started-$((1+1)); while read l; do echo got:$l; done; "
                                "echo bye >&2; exit 4");
    char out[8192], err[1024];
    size_t no = 0, ne = 0;
    read_until(p, SBX_STREAM_STDOUT, out, sizeof(out), &no, "started-2");
    TAP_OK(sbx_proc_write(p, "one\ntwo\n", 8, NULL));
    read_until(p, SBX_STREAM_STDOUT, out, sizeof(out), &no, "got:two");
    TAP_OK(sbx_proc_write(p, "", 0, NULL)); /* nothing: not EOF */
    TAP_OK(sbx_proc_write(p, "three\n", 6, NULL));
    read_until(p, SBX_STREAM_STDOUT, out, sizeof(out), &no, "got:three");
    TAP_OK(sbx_proc_close_stdin(p, NULL));
    TAP_EQ_INT(wait_code(p), 4);
    read_until(p, SBX_STREAM_STDERR, err, sizeof(err), &ne, "bye");
    TAP_EQ_STR(out, "started-2\ngot:one\ngot:two\ngot:three\n");
    TAP_EQ_STR(err, "bye\n");
    sbx_proc_free(p);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/*
 * The process outlives its handle: a fresh handle (here) and one in a forked
 * child process (through the box's descriptor) attach to it and replay its
 * output; the listing shows it running, unheld, then ended with its code.
 */
/*
 * A forked child cannot free the parent's sandbox (its loop thread is not
 * there), and memcheck checks the child's heap at _exit: kept reachable.
 */
static sbx_sandbox *volatile parents_box;

static void test_reattach_and_list(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_proc *p = start_cmd(sb, "echo hello-$((6*7)); read x; echo after:$x; exit 3");
    unsigned id = sbx_proc_id(p);
    char out[4096];
    size_t no = 0;
    read_until(p, SBX_STREAM_STDOUT, out, sizeof(out), &no, "hello-42");
    sbx_proc_free(p); /* lets it go: it runs on */

    json_t *j = listed(sb, id);
    TAP_TRUE(j != NULL);
    TAP_EQ_STR(json_string_value(json_object_get(j, "mode")), "pipe");
    TAP_TRUE(json_is_true(json_object_get(j, "running")));
    TAP_TRUE(json_is_null(json_object_get(j, "exit_code")));
    TAP_CONTAINS(json_string_value(json_object_get(j, "command")), "echo hello-$((6*7))");
    TAP_TRUE(json_integer_value(json_object_get(j, "pid")) > 0);
    TAP_TRUE(json_integer_value(json_object_get(j, "stdout_bytes")) == 9);
    json_decref(j);
    /* Nobody holds it once its handle is gone; the agent notices the close on its own time. */
    for (;;) {
        j = listed(sb, id);
        bool held = json_is_true(json_object_get(j, "attached"));
        json_decref(j);
        if (!held)
            break;
        usleep(10000);
    }

    /* A forked child attaches with its own provider and connection, replays, and lets go. */
    char *desc = NULL;
    TAP_OK(sbx_sandbox_serialize(sb, NULL, &desc, NULL));
    fflush(NULL);
    parents_box = sb;
    pid_t child = fork();
    TAP_TRUE(child >= 0);
    if (child == 0) {
        sbx_provider *cp = NULL;
        sbx_sandbox *csb = NULL;
        sbx_proc *cpr = NULL;
        char buf[256] = {0};
        size_t n = 0, len = 0;
        if (sbx_provider_new("{\"linux\": {}}", &cp, NULL) != SBX_OK ||
            sbx_sandbox_connect(cp, desc, &csb, NULL) != SBX_OK ||
            sbx_proc_attach(csb, id, SBX_PROC_KEEP, 0, &cpr, NULL) != SBX_OK)
            _exit(10);
        while (!strstr(buf, "hello-42")) {
            if (sbx_proc_read(cpr, SBX_STREAM_STDOUT, buf + len, sizeof(buf) - 1 - len, -1, &n,
                              NULL, NULL) != SBX_OK ||
                n == 0)
                _exit(11);
            len += n;
            buf[len] = 0;
        }
        if (sbx_proc_detach(cpr, NULL) != SBX_OK)
            _exit(12);
        sbx_proc_free(cpr);
        sbx_sandbox_free(csb);
        sbx_provider_free(cp);
        _exit(0);
    }
    int st = 0;
    TAP_EQ_INT(waitpid(child, &st, 0), child);
    TAP_TRUE(WIFEXITED(st));
    TAP_EQ_INT(WEXITSTATUS(st), 0);
    sbx_free(desc);

    /* A fresh handle here: replay from 0, stdin, the end kept (KEEP) for the listing. */
    sbx_proc *q = NULL;
    TAP_OK(sbx_proc_attach(sb, id, SBX_PROC_KEEP, 0, &q, NULL));
    no = 0;
    read_until(q, SBX_STREAM_STDOUT, out, sizeof(out), &no, "hello-42");
    TAP_OK(sbx_proc_write(q, "xyz\n", 4, NULL));
    read_until(q, SBX_STREAM_STDOUT, out, sizeof(out), &no, "after:xyz");
    TAP_EQ_INT(wait_code(q), 3);
    sbx_proc_free(q);
    /* Ended, with its code, still listed (KEEP read its end), and nobody holds it. */
    for (;;) {
        j = listed(sb, id);
        TAP_TRUE(j != NULL);
        bool held = json_is_true(json_object_get(j, "attached"));
        if (!held)
            break;
        json_decref(j);
        usleep(10000);
    }
    TAP_TRUE(json_is_false(json_object_get(j, "running")));
    TAP_EQ_INT((int)json_integer_value(json_object_get(j, "exit_code")), 3);
    json_decref(j);
    /* An attach without KEEP replays and collects it: then it is gone from the list. */
    TAP_OK(sbx_proc_attach(sb, id, 0, 0, &q, NULL));
    TAP_EQ_INT(wait_code(q), 3);
    no = 0;
    read_until(q, SBX_STREAM_STDOUT, out, sizeof(out), &no, "after:xyz");
    sbx_proc_free(q);
    j = listed(sb, id);
    TAP_TRUE(j == NULL);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_proc_attach(sb, id, 0, 0, &q, &e), SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "no PTY session");
    sbx_error_free(e);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/* TERM ends it with 128+15; `top` lists the box's processes with their commands. */
static void test_signal_and_top(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    /* An argv: the process is sleep itself from the start (a shell would exec it later). */
    sbx_pty_opts *o = sbx_pty_opts_new();
    const char *argv[] = {"sleep", "777", NULL};
    TAP_OK(sbx_pty_opts_set_argv(o, argv));
    sbx_proc *p = NULL;
    TAP_OK(sbx_proc_start(sb, o, &p, NULL));
    sbx_pty_opts_free(o);
    json_t *j = listed(sb, sbx_proc_id(p));
    json_int_t pid = json_integer_value(json_object_get(j, "pid"));
    json_decref(j);

    char *text = NULL;
    TAP_OK(sbx_sandbox_top(sb, &text, NULL));
    json_t *top = json_loads(text, 0, NULL);
    sbx_free(text);
    TAP_TRUE(json_is_false(json_object_get(top, "truncated")));
    json_t *procs = json_object_get(top, "processes"), *v, *mine = NULL;
    size_t i;
    bool saw_init = false;
    json_array_foreach(procs, i, v)
    {
        if (json_integer_value(json_object_get(v, "pid")) == pid)
            mine = v;
        if (json_integer_value(json_object_get(v, "pid")) == 1)
            saw_init = true;
    }
    TAP_TRUE(saw_init); /* the box's own pid namespace: its agent is 1 */
    TAP_TRUE(mine != NULL);
    TAP_EQ_STR(json_string_value(json_object_get(mine, "command")), "sleep 777");
    TAP_EQ_STR(json_string_value(json_object_get(mine, "user")), "root");
    TAP_EQ_INT((int)json_integer_value(json_object_get(mine, "uid")), 0);
    TAP_TRUE(json_integer_value(json_object_get(mine, "rss_kib")) > 0);
    TAP_TRUE(json_integer_value(json_object_get(mine, "started_ms")) > 1500000000000LL);
    json_decref(top);

    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_proc_signal(p, "NOPE", &e), SBX_EINVAL);
    sbx_error_free(e);
    TAP_OK(sbx_proc_signal(p, "TERM", NULL));
    TAP_EQ_INT(wait_code(p), 128 + 15);
    sbx_proc_free(p);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/* 20 at once, each with its own output; left running, the box's stop ends them all. */
static void test_twenty_at_once(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    sbx_proc *ps[20];
    for (int i = 0; i < 20; i++) {
        char cmd[64];
        snprintf(cmd, sizeof(cmd), "echo P$((%d*3)); exec cat", i);
        ps[i] = start_cmd(sb, cmd);
    }
    for (int i = 0; i < 20; i++) {
        char out[256], want[32];
        size_t n = 0;
        snprintf(want, sizeof(want), "P%d\n", i * 3);
        read_until(ps[i], SBX_STREAM_STDOUT, out, sizeof(out), &n, want);
        TAP_EQ_STR(out, want);
    }
    char *text = NULL;
    TAP_OK(sbx_proc_list(sb, &text, NULL));
    json_t *arr = json_loads(text, 0, NULL);
    sbx_free(text);
    TAP_EQ_INT((int)json_array_size(arr), 20);
    json_decref(arr);
    /* Half end through stdin EOF, half are left running for the stop. */
    for (int i = 0; i < 10; i++) {
        TAP_OK(sbx_proc_close_stdin(ps[i], NULL));
        TAP_EQ_INT(wait_code(ps[i]), 0);
    }
    for (int i = 0; i < 20; i++)
        sbx_proc_free(ps[i]);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

/* Any process of the box still running, by the listing (none may be left). */
static int running_in(sbx_sandbox *sb)
{
    char *text = NULL;
    TAP_OK(sbx_proc_list(sb, &text, NULL));
    json_t *arr = json_loads(text, 0, NULL);
    sbx_free(text);
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) n += json_is_true(json_object_get(e, "running"));
    json_decref(arr);
    return n;
}

/*
 * run_detached: one merged stream and the status once it ended; more output
 * than the window is an error (the process stopped), never a cut result; a
 * timeout stops it too. Nothing is left listed after any of them.
 */
static void test_run_detached(void)
{
    sbx_provider *prov;
    sbx_sandbox *sb = work_box(&prov);
    char *out = NULL;
    size_t len = 0;
    int code = -1;
    TAP_OK(sbx_proc_run_detached(sb, "echo a; sleep 0.3; echo b >&2; exit 4", 0.05, -1, &out,
                                 &len, &code, &e_));
    TAP_EQ_STR(out, "a\nb\n");
    TAP_EQ_INT((int)len, 4);
    TAP_EQ_INT(code, 4);
    free(out);
    /* A command that ends at once may end before the start's handle lets go: the same result. */
    for (int i = 0; i < 20; i++) {
        TAP_OK(sbx_proc_run_detached(sb, "echo quick; exit 2", 0.01, -1, &out, &len, &code, &e_));
        TAP_EQ_STR(out, "quick\n");
        TAP_EQ_INT(code, 2);
        free(out);
    }
    /* Exactly the window is kept whole; one byte more is refused. */
    TAP_OK(sbx_proc_run_detached(sb, "head -c 1048576 /dev/zero | tr '\\0' x", 0.05, -1, &out,
                                 &len, &code, &e_));
    TAP_EQ_INT((int)len, 1048576);
    TAP_EQ_INT(code, 0);
    TAP_TRUE(out[0] == 'x' && out[len - 1] == 'x');
    free(out);
    sbx_error *e = NULL;
    out = NULL;
    TAP_EQ_INT(sbx_proc_run_detached(sb, "head -c 1048577 /dev/zero; sleep 100", 0.05, -1, &out,
                                     &len, &code, &e),
               SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "send its output to a file");
    sbx_error_free(e);
    e = NULL;
    TAP_NULL(out);
    TAP_EQ_INT(sbx_proc_run_detached(sb, "sleep 100", 0.05, 0.3, &out, &len, &code, &e),
               SBX_ETIMEDOUT);
    TAP_CONTAINS(sbx_error_message(e), "did not end within 0.3s");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(running_in(sb), 0);
    TAP_EQ_INT(sbx_proc_run_detached(sb, "true", 0, -1, &out, &len, &code, &e), SBX_EINVAL);
    sbx_error_free(e);
    stop_free(sb);
    sbx_provider_free(prov);
    census_check(state_dir);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_stdin_output_and_exit_code),
        TAP(test_reattach_and_list),
        TAP(test_signal_and_top),
        TAP_T(test_twenty_at_once, 120),
        TAP_T(test_run_detached, 120),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
