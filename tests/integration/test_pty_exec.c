/*
 * The pty exec facade (sbx_sandbox_pty_exec, docs/terminals.md) on real
 * boxes: the reference's section G items 43-51, on the linux provider and on
 * the local one (host processes under a host sbx-agent).
 *
 * No timing thresholds: the timeouts below are what a command that never
 * ends runs into, and serialization is asserted by what each result holds
 * (a command written while another ran would show up in its output as the
 * terminal's echo), not by how long anything took.
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"
#include "lib/proc.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

static bool on_local; /* the current test runs on the local provider */

static sbx_provider *make_provider(void)
{
    if (!on_local) {
        need_boxes();
        return provider(NULL);
    }
    if (!built("sbx-agent", "SBX_AGENT"))
        TAP_SKIP("sbx-agent is not built (make)");
    tap_allow_fd_changes();
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"local\": {\"workspace_root\": \"%s/ws\", \"state_dir\": \"%s/state\"}}",
             tap_tmpdir(), tap_tmpdir());
    return provider_of(cfg);
}

static sbx_sandbox *start_box(sbx_provider *p)
{
    sbx_spec *s = sbx_spec_new();
    if (!on_local)
        sbx_spec_set_workdir(s, "/work");
    /*
     * A local session's bash is the host user's interactive shell: its rc
     * files are not what these tests check, and some wait (pyenv's rehash
     * waits up to a minute on a lock a killed shell left). An empty HOME.
     */
    if (on_local) {
        char home[600];
        snprintf(home, sizeof(home), "%s/home", tap_tmpdir());
        mkdir(home, 0700);
        sbx_spec_set_env(s, "HOME", home);
    }
    sbx_sandbox *sb = start(p, s);
    sbx_spec_free(s);
    return sb;
}

/* The box's id, for the census of what the local provider left behind. */
static char box_id[128];

static void finish(sbx_provider *p, sbx_sandbox *sb)
{
    snprintf(box_id, sizeof(box_id), "%s", sbx_sandbox_id(sb) ? sbx_sandbox_id(sb) : "");
    long agent = 0;
    char rec[1024];
    if (on_local) {
        /* The box's host agent, as its record names it (local_agent.c). */
        snprintf(rec, sizeof(rec), "%s/state/%s.agent", tap_tmpdir(), box_id);
        FILE *f = fopen(rec, "r");
        char text[512] = {0};
        if (f) {
            size_t got = fread(text, 1, sizeof(text) - 1, f);
            text[got] = 0;
            fclose(f);
        }
        const char *k = strstr(text, "\"pid\":");
        agent = k ? strtol(k + 6, NULL, 10) : 0;
        TAP_TRUE(agent > 0);
        TAP_TRUE(proc_runs(agent));
    }
    stop_free(sb);
    sbx_provider_free(p);
    if (!on_local) {
        census_check(state_dir);
        return;
    }
    /* Nothing of the box runs on: its agent ended, its files are gone. */
    TAP_TRUE(!proc_runs(agent));
    TAP_TRUE(access(rec, F_OK) != 0);
    char sock[1024];
    snprintf(sock, sizeof(sock), "%s/state/%s.sock", tap_tmpdir(), box_id);
    TAP_TRUE(access(sock, F_OK) != 0);
}

static sbx_pty *open_shell(sbx_sandbox *sb)
{
    sbx_pty *p = NULL;
    sbx_error *e = NULL;
    if (sbx_pty_open(sb, NULL, &p, &e) != SBX_OK)
        TAP_FAIL("pty open: %s", sbx_error_message(e));
    return p;
}

static sbx_pty *open_cmd(sbx_sandbox *sb, const char *cmd)
{
    sbx_pty_opts *o = sbx_pty_opts_new();
    TAP_OK(sbx_pty_opts_set_command(o, cmd));
    sbx_pty *p = NULL;
    sbx_error *e = NULL;
    if (sbx_pty_open(sb, o, &p, &e) != SBX_OK)
        TAP_FAIL("pty open %s: %s", cmd, sbx_error_message(e));
    sbx_pty_opts_free(o);
    return p;
}

/* Runs the facade; the test fails on an sbx error. */
static sbx_exec_result *px(sbx_sandbox *sb, const char *cmd, const sbx_pty_exec_opts *o)
{
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_pty_exec(sb, cmd, o, &r, &e) != SBX_OK)
        TAP_FAIL("pty exec %s: %s", cmd, sbx_error_message(e));
    return r;
}

/* The number a command printed as "PID=<n>" (0 when none). */
static long pid_in(const sbx_exec_result *r)
{
    const char *s = sbx_exec_result_stdout(r, NULL);
    const char *m = s ? strstr(s, "PID=") : NULL;
    /* The terminal's echo holds "PID=$$": skip to a PID= followed by a digit. */
    while (m && !(m[4] >= '0' && m[4] <= '9'))
        m = strstr(m + 4, "PID=");
    return m ? strtol(m + 4, NULL, 10) : 0;
}

/* Item 43: the default shell is reused only for a plain call; item 41: which one is the default. */
static void check_default_reuse(void)
{
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);

    /* No default yet: a one-shot session, stderr None on a terminal. */
    sbx_exec_result *r = px(sb, "echo PID=$$", NULL);
    long oneshot1 = pid_in(r);
    TAP_TRUE(oneshot1 > 0);
    TAP_NULL(sbx_exec_result_stderr(r, NULL));
    sbx_exec_result_free(r);

    sbx_pty *shell = open_shell(sb);
    sbx_pty *later = open_shell(sb);   /* the oldest live one stays the default */
    sbx_pty *cmd = open_cmd(sb, "sh"); /* command sessions never become the default */
    r = px(sb, "echo PID=$$", NULL);
    long first = pid_in(r);
    TAP_TRUE(first > 0);
    TAP_NE_INT(first, oneshot1);
    /* stdout is what the terminal printed before the marker, the echo included. */
    TAP_CONTAINS(sbx_exec_result_stdout(r, NULL), "echo PID=$$");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);
    r = px(sb, "echo PID=$$; (exit 7)", NULL);
    TAP_EQ_INT(pid_in(r), first); /* the same shell: reused, still open */
    TAP_EQ_INT(sbx_exec_result_return_code(r), 7);
    sbx_exec_result_free(r);

    /* Anything shaping the call forces a one-shot session and leaves the default alone. */
    sbx_pty_exec_opts *o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_size(o, 30, 100));
    r = px(sb, "echo PID=$$; stty size", o);
    TAP_NE_INT(pid_in(r), first);
    TAP_CONTAINS(sbx_exec_result_stdout(r, NULL), "30 100");
    sbx_exec_result_free(r);
    sbx_pty_exec_opts_free(o);
    o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_env_given(o)); /* env={} is given too */
    r = px(sb, "echo PID=$$", o);
    TAP_NE_INT(pid_in(r), first);
    sbx_exec_result_free(r);
    sbx_pty_exec_opts_free(o);
    o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_env(o, "GREETING", "hi-there"));
    r = px(sb, "echo PID=$$ $GREETING", o);
    TAP_NE_INT(pid_in(r), first);
    TAP_CONTAINS(sbx_exec_result_stdout(r, NULL), "hi-there");
    sbx_exec_result_free(r);
    sbx_pty_exec_opts_free(o);
    r = px(sb, "echo PID=$$", NULL);
    TAP_EQ_INT(pid_in(r), first); /* untouched */
    sbx_exec_result_free(r);

    /* Closing the default: the later shell is not promoted; a plain call is a one-shot. */
    TAP_OK(sbx_pty_close(shell, NULL));
    r = px(sb, "echo PID=$$", NULL);
    TAP_TRUE(pid_in(r) > 0);
    TAP_NE_INT(pid_in(r), first);
    sbx_exec_result_free(r);
    TAP_OK(sbx_pty_close(later, NULL));
    TAP_OK(sbx_pty_close(cmd, NULL));
    /* A shell opened now (no live default) becomes the default. */
    shell = open_shell(sb);
    r = px(sb, "echo PID=$$", NULL);
    long second = pid_in(r);
    sbx_exec_result_free(r);
    r = px(sb, "echo PID=$$", NULL);
    TAP_EQ_INT(pid_in(r), second);
    sbx_exec_result_free(r);
    sbx_pty_free(shell);
    finish(prov, sb);
}

/* Item 44: a session given takes no cwd/env/user; rows, cols and pty are ignored. */
static void check_explicit_session(void)
{
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);
    sbx_pty *p = open_cmd(sb, "sh");
    const char *msg = "cwd/env/user apply only when pty.exec opens its own session; for an "
                      "existing session they are fixed at pty.create() time";
    for (int k = 0; k < 3; k++) {
        sbx_pty_exec_opts *o = sbx_pty_exec_opts_new();
        TAP_OK(sbx_pty_exec_opts_set_session(o, p));
        if (k == 0)
            TAP_OK(sbx_pty_exec_opts_set_cwd(o, "/"));
        else if (k == 1)
            TAP_OK(sbx_pty_exec_opts_set_env(o, "A", "b"));
        else
            TAP_OK(sbx_pty_exec_opts_set_user(o, "root"));
        sbx_exec_result *r = NULL;
        sbx_error *e = NULL;
        TAP_EQ_INT(sbx_sandbox_pty_exec(sb, "true", o, &r, &e), SBX_EINVAL);
        TAP_EQ_STR(sbx_error_message(e), msg);
        TAP_NULL(r);
        sbx_error_free(e);
        sbx_pty_exec_opts_free(o);
    }
    sbx_pty_exec_opts *o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_session(o, p));
    TAP_OK(sbx_pty_exec_opts_set_size(o, 30, 100)); /* ignored */
    TAP_OK(sbx_pty_exec_opts_set_pipes(o, 1));      /* ignored */
    sbx_exec_result *r = px(sb, "echo PID=$$; stty size </dev/tty; exit_is() { return $1; }; exit_is 4", o);
    TAP_CONTAINS(sbx_exec_result_stdout(r, NULL), "24 80");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 4);
    long pid = pid_in(r);
    sbx_exec_result_free(r);
    r = px(sb, "echo PID=$$", o);
    TAP_EQ_INT(pid_in(r), pid);
    sbx_exec_result_free(r);
    sbx_pty_exec_opts_free(o);
    TAP_OK(sbx_pty_close(p, NULL));
    finish(prov, sb);
}

struct racer {
    sbx_sandbox *sb;
    const char *cmd;
    sbx_exec_result *r;
    int rc;
};

static void *race(void *arg)
{
    struct racer *x = arg;
    sbx_error *e = NULL;
    x->rc = sbx_sandbox_pty_exec(x->sb, x->cmd, NULL, &x->r, &e);
    sbx_error_free(e);
    return NULL;
}

/* Item 45: two execs on the default at once never write into it together. */
static void check_concurrent_default(void)
{
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);
    sbx_pty *shell = open_shell(sb);
    for (int round = 0; round < 3; round++) {
        /* A runs long enough that an unserialized B would be typed (and echoed) meanwhile. */
        struct racer a = {sb, "echo A-$((1+1))-start; sleep 0.3; echo A-$((1+1))-end", NULL, -1};
        struct racer b = {sb, "echo B-$((1+1))-start; sleep 0.3; echo B-$((1+1))-end", NULL, -1};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, race, &a);
        pthread_create(&tb, NULL, race, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        TAP_EQ_INT(a.rc, SBX_OK);
        TAP_EQ_INT(b.rc, SBX_OK);
        const char *oa = sbx_exec_result_stdout(a.r, NULL), *ob = sbx_exec_result_stdout(b.r, NULL);
        /* Each result holds its own start and end, in order, and nothing of the other. */
        TAP_CONTAINS(oa, "A-2-start");
        TAP_CONTAINS(oa, "A-2-end");
        TAP_TRUE(strstr(oa, "A-2-start") < strstr(oa, "A-2-end"));
        TAP_TRUE(!strstr(oa, "B-"));
        TAP_CONTAINS(ob, "B-2-start");
        TAP_CONTAINS(ob, "B-2-end");
        TAP_TRUE(!strstr(ob, "A-"));
        sbx_exec_result_free(a.r);
        sbx_exec_result_free(b.r);
    }
    sbx_pty_free(shell);
    finish(prov, sb);
}

/* Items 47-48: a marker after a lot of output, and an exit text that is not a number. */
static void check_marker_and_exit_text(void)
{
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);
    sbx_pty *shell = open_shell(sb);
    /* ~600 KiB: many chunks, the marker wherever the last one ends (under the 1 MiB window). */
    sbx_exec_result *r = px(sb, "seq 1 100000", NULL);
    size_t len = 0;
    const char *out = sbx_exec_result_stdout(r, &len);
    TAP_TRUE(len > 500000);
    TAP_CONTAINS(out, "\n99999\r\n100000\r\n");
    /* Nothing of the marker's own line (the printed one) is in stdout: only the echo's quotes. */
    TAP_TRUE(!strstr(out, ":0\r\n"));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    /* The marker's printf, replaced for one command, prints a status that is not a number. */
    r = px(sb, "printf() { command printf \"$1\" \"$2\" \"$3\" oops; }", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "pty");
    sbx_exec_result_free(r);
    r = px(sb, "unset -f printf; echo back", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);
    /* A session that ends before its marker: the reference's error, not a result. */
    sbx_exec_result *none = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_pty_exec(sb, "exit 0", NULL, &none, &e), SBX_EPTY);
    TAP_EQ_STR(sbx_error_message(e), "PTY session ended before the command finished");
    TAP_TRUE(!sbx_pty_closed(shell)); /* not closed by the facade */
    sbx_error_free(e);
    sbx_pty_free(shell);
    finish(prov, sb);
}

/*
 * The test's sleep: a number of its own (local boxes share the host's
 * process list with everything else), and the pgrep pattern that finds it
 * but not the pgrep's own shell ("sleep 1[2]345" does not match itself).
 */
static char sleep_cmd[32], sleep_pat[64];

static void pick_sleep(void)
{
    unsigned n = 100000 + (unsigned)getpid() % 800000;
    snprintf(sleep_cmd, sizeof(sleep_cmd), "sleep %u", n);
    snprintf(sleep_pat, sizeof(sleep_pat), "pgrep -f 'sleep %u[%u]'", n / 10, n % 10);
}

static bool sleep_runs(sbx_sandbox *sb)
{
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, sleep_pat, NULL, &r, NULL));
    int rc = sbx_exec_result_return_code(r);
    sbx_exec_result_free(r);
    return rc == 0;
}

/*
 * Waits until the command runs (want) or is gone (!want): a SIGKILL is
 * delivered asynchronously, so a killed process may still be listed for a
 * moment after the call that killed it returned. Bounded by the test's alarm.
 */
static void await_sleep(sbx_sandbox *sb, bool want)
{
    while (sleep_runs(sb) != want)
        usleep(10000);
}

/* Items 50-51: the three timeout paths and what each leaves. */
static void check_timeouts(void)
{
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);
    const char *suffix = "; the command is still running and the session should be discarded";
    char want[512];

    /* A session given: the result says so, and the session is left as it is. */
    sbx_pty *p = open_cmd(sb, "sh");
    sbx_pty_exec_opts *o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_session(o, p));
    TAP_OK(sbx_pty_exec_opts_set_timeout(o, 0.5));
    pick_sleep();
    sbx_exec_result *r = px(sb, sleep_cmd, o);
    TAP_NULL(sbx_exec_result_stdout(r, NULL));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    snprintf(want, sizeof(want), "PTY command timed out after 0.5s: '%s'%s", sleep_cmd, suffix);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), want);
    sbx_exec_result_free(r);
    TAP_TRUE(!sbx_pty_closed(p));
    await_sleep(sb, true); /* still running, as the message says */
    TAP_OK(sbx_pty_close(p, NULL));
    sbx_pty_exec_opts_free(o);
    await_sleep(sb, false);

    /* The default: closed (its command killed) and forgotten; the next call is a one-shot. */
    sbx_pty *shell = open_shell(sb);
    o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_timeout(o, 1));
    char quoted[64];
    snprintf(quoted, sizeof(quoted), "%s # it's", sleep_cmd);
    r = px(sb, quoted, o);
    snprintf(want, sizeof(want), "PTY command timed out after 1s: \"%s\"%s", quoted, suffix);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), want);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    sbx_exec_result_free(r);
    TAP_TRUE(sbx_pty_closed(shell));
    await_sleep(sb, false);
    char b[16];
    size_t n;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_read(shell, SBX_STREAM_STDOUT, b, sizeof(b), 0, &n, NULL, &e), SBX_EPTY);
    sbx_error_free(e);
    r = px(sb, "echo PID=$$", NULL);
    TAP_TRUE(pid_in(r) > 0);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    sbx_pty_free(shell);

    /* A one-shot: no "discarded" suffix, and its session is closed all the same. */
    TAP_OK(sbx_pty_exec_opts_set_timeout(o, 0.25));
    TAP_OK(sbx_pty_exec_opts_set_cwd(o, "/"));
    r = px(sb, sleep_cmd, o);
    snprintf(want, sizeof(want), "PTY command timed out after 0.25s: '%s'", sleep_cmd);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), want);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    sbx_exec_result_free(r);
    await_sleep(sb, false);
    sbx_pty_exec_opts_free(o);
    finish(prov, sb);
}

/* Item 45: the timeout covers the wait for the lock (held here by a command on another session). */
struct holder {
    sbx_sandbox *sb;
    sbx_pty *p;
    sbx_exec_result *r;
};

static void *hold(void *arg)
{
    struct holder *h = arg;
    sbx_pty_exec_opts *o = sbx_pty_exec_opts_new();
    sbx_pty_exec_opts_set_session(o, h->p);
    sbx_pty_exec_opts_set_timeout(o, -1);
    sbx_sandbox_pty_exec(h->sb, "touch held; read line < gate; echo got-$line", o, &h->r, NULL);
    sbx_pty_exec_opts_free(o);
    return NULL;
}

static void check_lock_wait_times_out(void)
{
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, "rm -f gate held; mkfifo gate",
                            NULL, &r, NULL));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    struct holder h = {sb, open_cmd(sb, "sh"), NULL};
    sbx_pty *other = open_cmd(sb, "sh");
    pthread_t t;
    pthread_create(&t, NULL, hold, &h);
    /* The holder's command made `held`: it holds the lock. */
    for (;;) {
        TAP_OK(sbx_sandbox_exec(sb, "test -e held", NULL, &r, NULL));
        int rc = sbx_exec_result_return_code(r);
        sbx_exec_result_free(r);
        if (rc == 0)
            break;
    }
    sbx_pty_exec_opts *o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_session(o, other));
    TAP_OK(sbx_pty_exec_opts_set_timeout(o, 0.5));
    r = px(sb, "echo never", o);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    sbx_exec_result_free(r);
    TAP_TRUE(!sbx_pty_closed(other));
    TAP_OK(sbx_sandbox_exec(sb, "echo open > gate", NULL, &r, NULL));
    sbx_exec_result_free(r);
    pthread_join(t, NULL);
    TAP_TRUE(h.r != NULL);
    TAP_CONTAINS(sbx_exec_result_stdout(h.r, NULL), "got-open");
    sbx_exec_result_free(h.r);
    /* The lock is free again: the other session runs (its stream never saw "echo never"). */
    TAP_OK(sbx_pty_exec_opts_set_timeout(o, -1));
    r = px(sb, "echo PID=$$", o);
    TAP_TRUE(pid_in(r) > 0);
    sbx_exec_result_free(r);
    sbx_pty_exec_opts_free(o);
    TAP_OK(sbx_pty_close(h.p, NULL));
    TAP_OK(sbx_pty_close(other, NULL));
    finish(prov, sb);
}

/* Item 51: one-shot results in pipe mode ("ab", "E", 3) and on a terminal ("merged", None, 0). */
static void check_one_shot_results(void)
{
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);
    sbx_pty_exec_opts *o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_pipes(o, 1));
    sbx_exec_result *r = px(sb, "printf a; printf E >&2; printf b; exit 3", o);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "ab");
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "E");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 3);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);
    r = px(sb, "printf out", o); /* pipe mode with nothing on stderr: "" (not None) */
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "");
    sbx_exec_result_free(r);
    sbx_pty_exec_opts_free(o);
    r = px(sb, "printf merged", NULL);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "merged");
    TAP_NULL(sbx_exec_result_stderr(r, NULL));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);
    /* A one-shot whose command cannot start: sbx_pty_open's error. */
    o = sbx_pty_exec_opts_new();
    TAP_OK(sbx_pty_exec_opts_set_cwd(o, "/no/such/dir"));
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_pty_exec(sb, "true", o, &r, &e), SBX_EPTY);
    sbx_error_free(e);
    sbx_pty_exec_opts_free(o);
    finish(prov, sb);
}

/* Reads `p` until `needle` shows up (the test fails when the session ends first). */
static void read_until(sbx_pty *p, const char *needle)
{
    char seen[1 << 16];
    size_t len = 0;
    for (;;) {
        seen[len] = 0;
        if (strstr(seen, needle))
            return;
        size_t n = 0;
        sbx_error *e = NULL;
        if (len + 4096 >= sizeof(seen))
            TAP_FAIL("no '%s' in 60 KiB: %s", needle, seen);
        if (sbx_pty_read(p, SBX_STREAM_STDOUT, seen + len, 4096, -1, &n, NULL, &e) != SBX_OK ||
            n == 0)
            TAP_FAIL("waiting for '%s': %s", needle, e ? sbx_error_message(e) : "ended");
        len += n;
    }
}

/* Another handle (as another process would: through serialize/connect) attaches to a session. */
static void check_attach_from_a_connected_handle(void)
{
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);
    sbx_pty *p = open_shell(sb);
    TAP_OK(sbx_pty_write(p, "echo FROM-$((2+3))\n", strlen("echo FROM-$((2+3))\n"), NULL));
    read_until(p, "FROM-5");
    sbx_provider *prov2 = make_provider();
    sbx_sandbox *other = connect_to(prov2, sb);
    sbx_pty *q = NULL;
    TAP_OK(sbx_pty_attach(other, sbx_pty_id(p), 1, 0, &q, NULL));
    read_until(q, "FROM-5"); /* replayed from the same agent */
    TAP_OK(sbx_pty_write(q, "echo AGAIN-$((3+4))\n", strlen("echo AGAIN-$((3+4))\n"), NULL));
    read_until(q, "AGAIN-7");
    /* The connected handle has no default of its own: a one-shot. */
    sbx_exec_result *r = px(other, "printf merged", NULL);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "merged");
    sbx_exec_result_free(r);
    sbx_pty_free(q);
    sbx_sandbox_free(other); /* borrowed: the box runs on */
    sbx_provider_free(prov2);
    /* The first handle's default was taken over: the facade says so (an error, not a result). */
    sbx_error *e = NULL;
    r = NULL;
    TAP_EQ_INT(sbx_sandbox_pty_exec(sb, "true", NULL, &r, &e), SBX_EPTY);
    TAP_CONTAINS(sbx_error_message(e), "taken over");
    TAP_NULL(r);
    sbx_error_free(e);
    sbx_pty_free(p);
    finish(prov, sb);
}

/* Stop by id (another provider object, as `sbx stop ID` would) ends the local box's agent. */
static void test_local_stop_by_id_ends_the_agent(void)
{
    on_local = true;
    sbx_provider *prov = make_provider();
    sbx_sandbox *sb = start_box(prov);
    sbx_pty *p = open_shell(sb);
    pick_sleep();
    char bg[64];
    snprintf(bg, sizeof(bg), "%s & echo started", sleep_cmd);
    sbx_exec_result *r = px(sb, bg, NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    char rec[1024], text[512] = {0};
    snprintf(rec, sizeof(rec), "%s/state/%s.agent", tap_tmpdir(), sbx_sandbox_id(sb));
    FILE *f = fopen(rec, "r");
    TAP_TRUE(f != NULL);
    size_t got = fread(text, 1, sizeof(text) - 1, f);
    text[got] = 0;
    fclose(f);
    const char *k = strstr(text, "\"pid\":");
    long agent = k ? strtol(k + 6, NULL, 10) : 0;
    TAP_TRUE(agent > 0 && proc_runs(agent));
    sbx_provider *other = make_provider();
    TAP_OK(sbx_provider_stop_box(other, sbx_sandbox_id(sb), NULL));
    sbx_provider_free(other);
    TAP_TRUE(!proc_runs(agent));
    TAP_TRUE(access(rec, F_OK) != 0);
    /* Its session's background job went with it (killed: gone within the alarm). */
    for (;;) {
        FILE *pg = popen(sleep_pat, "r");
        char line[64];
        TAP_TRUE(pg != NULL);
        bool listed = fgets(line, sizeof(line), pg) != NULL;
        pclose(pg);
        if (!listed)
            break;
        usleep(10000);
    }
    sbx_pty_free(p);
    sbx_sandbox_detach(sb); /* the box is gone: release the handle only */
    sbx_provider_free(prov);
}

#define BOTH(name, secs)                                                                           \
    static void test_linux_##name(void)                                                            \
    {                                                                                              \
        on_local = false;                                                                          \
        check_##name();                                                                            \
    }                                                                                              \
    static void test_local_##name(void)                                                            \
    {                                                                                              \
        on_local = true;                                                                           \
        check_##name();                                                                            \
    }
BOTH(default_reuse, 60)
BOTH(explicit_session, 60)
BOTH(concurrent_default, 60)
BOTH(marker_and_exit_text, 60)
BOTH(timeouts, 60)
BOTH(lock_wait_times_out, 60)
BOTH(one_shot_results, 60)
BOTH(attach_from_a_connected_handle, 60)

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_linux_default_reuse),        TAP(test_linux_explicit_session),
        TAP(test_linux_concurrent_default),   TAP(test_linux_marker_and_exit_text),
        TAP(test_linux_timeouts),             TAP(test_linux_lock_wait_times_out),
        TAP(test_linux_one_shot_results),     TAP(test_local_default_reuse),
        TAP(test_local_explicit_session),     TAP(test_local_concurrent_default),
        TAP(test_local_marker_and_exit_text), TAP(test_local_timeouts),
        TAP(test_local_lock_wait_times_out),  TAP(test_local_one_shot_results),
        TAP(test_linux_attach_from_a_connected_handle),
        TAP(test_local_attach_from_a_connected_handle),
        TAP(test_local_stop_by_id_ends_the_agent),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
