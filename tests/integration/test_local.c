/*
 * The local provider against real host processes and files, through the
 * public API: exec semantics, timeouts that kill whole process trees,
 * cancellation, concurrency, output capture, transfer, serialize/connect
 * across processes, status, endpoint, and the box registry (list, stop by
 * id, gc) over the records of each test's own state directory.
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"
#include "lib/proc.h"

#include <sbx.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

/* This binary, for the connect test's second process (not /proc/self/exe: valgrind). */
static char self_path[4096] = "/proc/self/exe";

static char *cfgf(const char *extra)
{
    static char buf[1024];
    snprintf(buf, sizeof(buf),
             "{\"local\": {\"workspace_root\": \"%s/ws\", \"state_dir\": \"%s/state\"%s%s}}",
             tap_tmpdir(), tap_tmpdir(), extra ? ", " : "", extra ? extra : "");
    return buf;
}

static sbx_provider *local(const char *extra)
{
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new(cfgf(extra), &p, &e) != SBX_OK)
        TAP_FAIL("provider: %s", sbx_error_message(e));
    return p;
}

/* The workspace of a sandbox, as its commands see it. */
static char *workspace_of(sbx_sandbox *sb)
{
    sbx_exec_result *r = run(sb, "printf %s \"$PWD\"", NULL);
    char *ws = strdup(stdout_of(r));
    sbx_exec_result_free(r);
    return ws;
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Waits (bounded) for a file a command writes, and reads the number in it. */
static long wait_number(const char *path)
{
    for (int i = 0; i < 1000; i++) {
        char *t = read_text(path);
        if (t && *t && strchr(t, '\n')) {
            long v = strtol(t, NULL, 10);
            free(t);
            return v;
        }
        free(t);
        usleep(10000);
    }
    TAP_FAIL("%s never appeared", path);
}

/* A live (non-zombie) process in /proc with this pid, or in this process group. */
static bool alive(long pid, bool group)
{
    DIR *d = opendir("/proc");
    if (!d)
        TAP_FAIL("no /proc");
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        long p = strtol(de->d_name, NULL, 10);
        if (p <= 0 || (!group && p != pid))
            continue;
        char state;
        pid_t pgrp;
        if (!proc_stat((pid_t)p, &state, NULL, &pgrp) || state == 'Z' || state == 'X')
            continue;
        found = group ? pgrp == pid : true;
    }
    closedir(d);
    return found;
}

/* Dead processes go away promptly after SIGKILL; allow the kernel a moment. */
static bool gone(long pid, bool group)
{
    for (int i = 0; i < 500; i++) {
        if (!alive(pid, group))
            return true;
        usleep(10000);
    }
    return false;
}

static char *path_in(const char *dir, const char *name)
{
    char *p = NULL;
    if (asprintf(&p, "%s/%s", dir, name) < 0)
        TAP_FAIL("oom");
    return p;
}

/* --- the first-run flow -------------------------------------------------- */

static void test_first_run_flow(void)
{
    sbx_provider *p = local(NULL);
    char *wd = path_in(tap_tmpdir(), "mywork/deep");
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_workdir(s, wd);
    sbx_spec_set_env(s, "GREETING", "hello");
    sbx_spec_add_file(s, "hello.txt", "hi there\n", 9);
    sbx_spec_add_file(s, "sub/dir/x.txt", "xx", 2);
    sbx_sandbox *sb = start(p, s);
    TAP_TRUE(strncmp(sbx_sandbox_id(sb), "local-", 6) == 0);
    TAP_EQ_INT(strlen(sbx_sandbox_id(sb)), 18);
    TAP_TRUE(is_dir(wd)); /* a missing workdir is created */

    sbx_exec_result *r = run(sb, "cat hello.txt sub/dir/x.txt; echo; echo $GREETING; pwd", NULL);
    char *want = NULL;
    TAP_TRUE(asprintf(&want, "hi there\nxx\nhello\n%s\n", wd) > 0);
    TAP_EQ_STR(stdout_of(r), want);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_NULL(sbx_exec_result_error_type(r));
    TAP_EQ_INT(sbx_exec_result_truncated(r), 0);
    free(want);
    sbx_exec_result_free(r);

    r = run(sb, "echo out; echo err >&2; exit 3", NULL);
    TAP_EQ_STR(stdout_of(r), "out\n");
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "err\n");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 3);
    sbx_exec_result_free(r);

    /* a shell killed by a signal reads like Python's returncode: -SIGNUM */
    r = run(sb, "kill -TERM $$", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), -SIGTERM);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);

    /* upload: parent dirs made, mode and mtime kept; download mirrors it. */
    char *src = path_in(tap_tmpdir(), "src.bin");
    TAP_EQ_INT(write_text(src, "payload\001\002"), 0);
    chmod(src, 0751);
    struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    utimensat(AT_FDCWD, src, old, 0);
    TAP_OK(sbx_sandbox_upload(sb, src, "a/b/c.bin", &e_));
    char *up = path_in(wd, "a/b/c.bin");
    struct stat st;
    TAP_EQ_INT(stat(up, &st), 0);
    TAP_EQ_INT(st.st_mode & 07777, 0751);
    TAP_EQ_INT(st.st_mtim.tv_sec, 1000000000);
    r = run(sb, "cat a/b/c.bin | od -An -c | tr -s ' '", NULL);
    TAP_CONTAINS(stdout_of(r), "p a y l o a d 001 002");
    sbx_exec_result_free(r);
    char *dl = path_in(tap_tmpdir(), "dl/x/y.bin");
    TAP_OK(sbx_sandbox_download(sb, "a/b/c.bin", dl, &e_));
    char *got = read_text(dl);
    TAP_EQ_STR(got, "payload\001\002");
    TAP_EQ_INT(stat(dl, &st), 0);
    TAP_EQ_INT(st.st_mode & 07777, 0751);
    TAP_EQ_INT(st.st_mtim.tv_sec, 1000000000);
    free(got);
    /* an absolute remote path is a host path (no confinement) */
    char *abs = path_in(tap_tmpdir(), "abs/target.bin");
    TAP_OK(sbx_sandbox_upload(sb, src, abs, &e_));
    TAP_EQ_INT(stat(abs, &st), 0);

    /* stop keeps a caller's workdir */
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    TAP_TRUE(is_dir(wd));
    sbx_sandbox_free(sb);
    sbx_spec_free(s);

    /* ... and removes one it allocated */
    sb = start(p, NULL);
    char *ws = workspace_of(sb);
    char *prefix = path_in(tap_tmpdir(), "ws/");
    TAP_TRUE(strncmp(ws, prefix, strlen(prefix)) == 0);
    TAP_EQ_STR(ws + strlen(prefix), sbx_sandbox_id(sb));
    TAP_EQ_INT(stat(ws, &st), 0);
    TAP_EQ_INT(st.st_mode & 0777, 0700);
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    TAP_TRUE(!is_dir(ws));
    sbx_sandbox_free(sb);

    /* freeing an unstopped sandbox also removes its allocated workspace */
    sb = start(p, NULL);
    char *ws2 = workspace_of(sb);
    TAP_TRUE(is_dir(ws2));
    sbx_sandbox_free(sb);
    TAP_TRUE(!is_dir(ws2));

    free(ws);
    free(ws2);
    free(prefix);
    free(abs);
    free(dl);
    free(up);
    free(src);
    free(wd);
    sbx_provider_free(p);
}

static void test_env_precedence(void)
{
    setenv("SBX_T_PROC", "proc", 1);
    setenv("SBX_T_SPEC", "proc", 1);
    setenv("SBX_T_CALL", "proc", 1);
    sbx_provider *p = local(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_env(s, "SBX_T_SPEC", "spec");
    sbx_spec_set_env(s, "SBX_T_CALL", "spec");
    sbx_sandbox *sb = start(p, s);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_env(o, "SBX_T_CALL", "call");
    sbx_exec_opts_set_env(o, "SBX_T_EMPTY", "");
    sbx_exec_result *r =
        run(sb, "echo $SBX_T_PROC $SBX_T_SPEC $SBX_T_CALL \"[${SBX_T_EMPTY-unset}]\"", o);
    TAP_EQ_STR(stdout_of(r), "proc spec call []\n");
    sbx_exec_result_free(r);
    /* without call env, spec env still applies */
    r = run(sb, "echo $SBX_T_CALL", NULL);
    TAP_EQ_STR(stdout_of(r), "spec\n");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_user_rejected(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_user(o, "root");
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "id", o, &r, &e), SBX_EINVAL);
    TAP_NULL(r);
    /* The reference's ValueError text, then what to do. */
    TAP_CONTAINS(sbx_error_message(e),
                 "The local sandbox provider cannot run commands as another user");
    TAP_CONTAINS(sbx_error_message(e), "container provider");
    sbx_error_free(e);
    sbx_exec_opts_free(o);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* --- timeouts, cancel, stop kill the whole tree -------------------------- */

/* Writes the shell's pid (= its process group) and a backgrounded child's pid. */
#define TREE_CMD                                                                                   \
    "echo $$ > pgid.tmp; mv pgid.tmp pgid; sleep 100 & echo $! > pid.tmp; mv pid.tmp pid; wait"

static void test_timeout_kills_tree(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    char *ws = workspace_of(sb);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, 1);
    sbx_exec_result *r = run(sb, TREE_CMD, o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), ""); /* partial stdout: issue 9 */
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "local command timed out after 1s");
    sbx_exec_result_free(r);

    char *pidf = path_in(ws, "pid"), *pgf = path_in(ws, "pgid");
    long pid = wait_number(pidf), pgid = wait_number(pgf);
    TAP_TRUE(pid > 1 && pgid > 1);
    TAP_TRUE(gone(pid, false));
    TAP_TRUE(gone(pgid, true));

    /* {t:g} formatting of a fractional timeout */
    sbx_exec_opts_set_timeout(o, 0.25);
    r = run(sb, "sleep 100", o);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "local command timed out after 0.25s");
    sbx_exec_result_free(r);

    free(pidf);
    free(pgf);
    free(ws);
    sbx_exec_opts_free(o);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_timeout_escaped_grandchild(void)
{
    /*
     * A grandchild in its own session survives the group kill and keeps
     * stdout open: the exec still comes back (after the reap bound).
     */
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    char *ws = workspace_of(sb);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, 1);
    sbx_exec_result *r =
        run(sb, "setsid sh -c 'echo $$ > esc.tmp; mv esc.tmp esc; exec sleep 100' & wait", o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), ""); /* partial stdout: issue 9 */
    sbx_exec_result_free(r);
    char *escf = path_in(ws, "esc");
    long esc = wait_number(escf);
    TAP_TRUE(alive(esc, false)); /* it really escaped: that is what the bound is for */
    kill((pid_t)esc, SIGKILL);
    TAP_TRUE(gone(esc, false));
    free(escf);
    free(ws);
    sbx_exec_opts_free(o);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_cancel_kills_tree(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    char *ws = workspace_of(sb);
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_exec_async(sb, TREE_CMD, NULL, &f, &e_));
    char *pidf = path_in(ws, "pid"), *pgf = path_in(ws, "pgid");
    long pid = wait_number(pidf), pgid = wait_number(pgf);
    TAP_TRUE(alive(pid, false));
    TAP_EQ_INT(sbx_future_done(f), 0);
    sbx_future_cancel(f);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_future_wait(f, -1, &e), SBX_ECANCELED);
    TAP_CONTAINS(sbx_error_message(e), "cancelled");
    sbx_error_free(e);
    sbx_future_free(f);
    TAP_TRUE(gone(pid, false));
    TAP_TRUE(gone(pgid, true));
    free(pidf);
    free(pgf);
    free(ws);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_stop_kills_running_exec(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    char *ws = workspace_of(sb);
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_exec_async(sb, TREE_CMD, NULL, &f, &e_));
    char *pidf = path_in(ws, "pid");
    long pid = wait_number(pidf);
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    TAP_EQ_INT(sbx_future_wait(f, -1, NULL), SBX_OK);
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_future_take_exec_result(f, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "was stopped");
    sbx_exec_result_free(r);
    sbx_future_free(f);
    TAP_TRUE(gone(pid, false));
    TAP_TRUE(!is_dir(ws));
    free(pidf);
    free(ws);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* --- concurrency --------------------------------------------------------- */

static void test_100_concurrent_execs(void)
{
    sbx_provider *p = local("\"concurrency\": 100");
    sbx_sandbox *sb = start(p, NULL);
    enum { N = 100 };
    sbx_exec_result_free(run(sb, "mkdir bar", NULL));
    sbx_future *fs[N];
    for (int i = 0; i < N; i++) {
        /*
         * Each command waits until all 100 are running: this can only finish
         * if they really run at once (a serial runner would hang here).
         */
        char cmd[256];
        snprintf(cmd, sizeof(cmd),
                 "touch bar/%d; f=(bar/*); while [ ${#f[@]} -lt %d ]; do sleep 0.1; f=(bar/*); "
                 "done; echo out-%d",
                 i, N, i);
        TAP_OK(sbx_sandbox_exec_async(sb, cmd, NULL, &fs[i], &e_));
    }
    for (int i = 0; i < N; i++) {
        sbx_exec_result *r = NULL;
        TAP_OK(sbx_future_wait(fs[i], -1, &e_));
        TAP_OK(sbx_future_take_exec_result(fs[i], &r, &e_));
        char want[32];
        snprintf(want, sizeof(want), "out-%d\n", i);
        TAP_EQ_STR(stdout_of(r), want);
        TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
        sbx_exec_result_free(r);
        sbx_future_free(fs[i]);
    }
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_default_concurrency_queues(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    enum { N = 40 };
    sbx_exec_result_free(run(sb, "mkdir running", NULL));
    sbx_future *fs[N];
    for (int i = 0; i < N; i++) {
        /*
         * Reports how many commands were running at once, from inside. The
         * first 8 wait until 8 run together (non-waiters end, so the waiters
         * always get there): the bound is reached, not just respected. An
         * unbounded provider would have more running and fail the <= 8.
         */
        char cmd[320];
        snprintf(cmd, sizeof(cmd),
                 "touch running/%d; f=(running/*); while [ %d -lt 8 ] && [ ${#f[@]} -lt 8 ]; "
                 "do sleep 0.02; f=(running/*); done; sleep 0.05; f=(running/*); "
                 "echo \"%d ${#f[@]}\"; rm running/%d",
                 i, i, i, i);
        /*
         * No exec timeout: the test is of the bound, and under TSan (both
         * cores busy beside the ASan suite) the waiters took past the default
         * 180 s once, killed with nothing printed.
         */
        sbx_exec_opts *o = sbx_exec_opts_new();
        sbx_exec_opts_set_timeout(o, -1);
        TAP_OK(sbx_sandbox_exec_async(sb, cmd, o, &fs[i], &e_));
        sbx_exec_opts_free(o);
    }
    int max_seen = 0;
    for (int i = 0; i < N; i++) {
        sbx_exec_result *r = NULL;
        TAP_OK(sbx_future_wait(fs[i], -1, &e_));
        TAP_OK(sbx_future_take_exec_result(fs[i], &r, &e_));
        int id = -1, seen = -1;
        TAP_EQ_INT(sscanf(stdout_of(r), "%d %d", &id, &seen), 2);
        TAP_EQ_INT(id, i);
        if (seen > max_seen)
            max_seen = seen;
        sbx_exec_result_free(r);
        sbx_future_free(fs[i]);
    }
    TAP_EQ_INT(max_seen, 8); /* the default bound, reached; the rest waited their turn */
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* --- output -------------------------------------------------------------- */

static void test_large_output_and_cap(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    /*
     * 16-byte lines "0123456789abcde\n", 100 MiB of them; 10 MiB under
     * valgrind or TSan (tap_bulk), still far past any pipe or read buffer
     * (100 MiB took two of the valgrind run's minutes, 62 s of TSan's).
     */
    const size_t total = (size_t)tap_bulk(100) << 20;
    char cmd[128], capped[160];
    snprintf(cmd, sizeof(cmd), "yes 0123456789abcde | head -c %zu", total);
    snprintf(capped, sizeof(capped), "%s; echo done >&2", cmd);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, -1);
    /* Past the 16 MiB default: the call raises its own cap. */
    sbx_exec_opts_set_output_limit(o, total);
    sbx_exec_result *r = run(sb, cmd, o);
    size_t len = 0;
    const char *out = sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, total);
    TAP_EQ_INT(sbx_exec_result_truncated(r), 0);
    for (size_t off = 0; off < total; off += 16)
        if (memcmp(out + off, "0123456789abcde\n", 16) != 0)
            TAP_FAIL("stdout differs at offset %zu", off);
    sbx_exec_result_free(r);

    /* A 1 MiB cap keeps exactly 1 MiB, says so, and the command still ends normally. */
    sbx_exec_opts_set_output_limit(o, (size_t)1 << 20);
    r = run(sb, capped, o);
    out = sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, (size_t)1 << 20);
    TAP_EQ_INT(memcmp(out + len - 16, "0123456789abcde\n", 16), 0);
    TAP_EQ_INT(sbx_exec_result_truncated(r), 1);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "done\n");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);

    /* The provider-wide cap applies when the exec sets none. */
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    p = local("\"max_output_bytes\": 10");
    sb = start(p, NULL);
    r = run(sb, "echo 0123456789abcdef; echo short >&2", NULL);
    out = sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, 10);
    TAP_EQ_INT(memcmp(out, "0123456789", 10), 0);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "short\n");
    TAP_EQ_INT(sbx_exec_result_truncated(r), 1);
    sbx_exec_result_free(r);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_binary_output_and_stdin(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    sbx_exec_result *r = run(sb, "printf 'a\\0b\\0\\377c'", NULL);
    size_t len = 0;
    const char *out = sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, 6);
    TAP_EQ_INT(memcmp(out, "a\0b\0\377c", 6), 0);
    sbx_exec_result_free(r);

    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_stdin(o, "hello\0world", 11);
    r = run(sb, "cat; echo -n \" $(wc -c)\"", o);
    out = sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, 11 + 2);
    TAP_EQ_INT(memcmp(out, "hello\0world 0", 13), 0);
    sbx_exec_result_free(r);

    /* stdin that is not read does not fail the command */
    r = run(sb, "echo ignored", o);
    TAP_EQ_STR(stdout_of(r), "ignored\n");
    sbx_exec_result_free(r);

    /* an empty stdin is an immediate EOF */
    sbx_exec_opts_set_stdin(o, "", 0);
    r = run(sb, "cat; echo end", o);
    TAP_EQ_STR(stdout_of(r), "end\n");
    sbx_exec_result_free(r);

    /* a large stdin streams through */
    size_t big = (size_t)8 << 20;
    char *data = malloc(big);
    for (size_t i = 0; i < big; i++)
        data[i] = (char)(i * 7);
    sbx_exec_opts_set_stdin(o, data, big);
    r = run(sb, "cat", o);
    out = sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, big);
    TAP_EQ_INT(memcmp(out, data, big), 0);
    sbx_exec_result_free(r);
    free(data);
    sbx_exec_opts_free(o);

    /* no stdin: the command reads /dev/null */
    r = run(sb, "wc -c", NULL);
    TAP_EQ_STR(stdout_of(r), "0\n");
    sbx_exec_result_free(r);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* --- cwd ----------------------------------------------------------------- */

static void test_cwd(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    char *ws = workspace_of(sb);
    sbx_exec_result_free(run(sb, "mkdir -p sub/inner", NULL));
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_cwd(o, "sub/inner");
    sbx_exec_result *r = run(sb, "pwd", o);
    char *want = NULL;
    TAP_TRUE(asprintf(&want, "%s/sub/inner\n", ws) > 0);
    TAP_EQ_STR(stdout_of(r), want);
    free(want);
    sbx_exec_result_free(r);

    sbx_exec_opts_set_cwd(o, "/");
    r = run(sb, "pwd", o);
    TAP_EQ_STR(stdout_of(r), "/\n");
    sbx_exec_result_free(r);

    sbx_exec_opts_set_cwd(o, "nope");
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "pwd", o, &r, &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), "/nope");
    TAP_CONTAINS(sbx_error_message(e), "does not exist");
    /* The errno of the chdir, as the reference's FileNotFoundError carries it. */
    TAP_EQ_INT(sbx_error_errno(e), ENOENT);
    sbx_error_free(e);
    e = NULL;
    sbx_exec_result_free(run(sb, "touch plain", NULL));
    sbx_exec_opts_set_cwd(o, "plain");
    TAP_EQ_INT(sbx_sandbox_exec(sb, "pwd", o, &r, &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), "is not a directory");
    TAP_EQ_INT(sbx_error_errno(e), ENOTDIR);
    sbx_error_free(e);
    sbx_exec_opts_free(o);
    free(ws);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* --- transfer errors and a large file ------------------------------------ */

static void test_transfer(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    sbx_error *e = NULL;
    char *missing = path_in(tap_tmpdir(), "no-such-file");
    TAP_EQ_INT(sbx_sandbox_upload(sb, missing, "x", &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), missing);
    sbx_error_free(e);
    e = NULL;
    char *dst = path_in(tap_tmpdir(), "out.bin");
    TAP_EQ_INT(sbx_sandbox_download(sb, "not-there", dst, &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), "not-there");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_upload(sb, tap_tmpdir(), "x", &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "is a directory");
    sbx_error_free(e);

    /* 16 MiB (64 chunks) made in the box, downloaded, uploaded under another name, compared. */
    sbx_exec_result *r =
        run(sb, "head -c 16777216 /dev/urandom > big; chmod 640 big; mkdir d", NULL);
    sbx_exec_result_free(r);
    TAP_OK(sbx_sandbox_download(sb, "big", dst, &e_));
    struct stat st;
    TAP_EQ_INT(stat(dst, &st), 0);
    TAP_EQ_INT(st.st_size, 16777216);
    TAP_EQ_INT(st.st_mode & 0777, 0640);
    /* an existing directory as the target: the file lands inside it */
    TAP_OK(sbx_sandbox_upload(sb, dst, "d", &e_));
    r = run(sb, "cmp big d/out.bin && echo same", NULL);
    TAP_EQ_STR(stdout_of(r), "same\n");
    sbx_exec_result_free(r);
    /* overwriting an existing file */
    char *small = path_in(tap_tmpdir(), "small");
    write_text(small, "tiny");
    TAP_OK(sbx_sandbox_upload(sb, small, "big", &e_));
    r = run(sb, "cat big; ls -a | grep -c sbx- || true", NULL);
    TAP_EQ_STR(stdout_of(r), "tiny0\n"); /* and no temp files left behind */
    sbx_exec_result_free(r);
    free(small);
    free(dst);
    free(missing);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/*
 * Directories, archives and bytes (src/core/transfer.c): local runs the
 * host's sbx-agent built-ins, the same code as in a box, so modes, mtimes,
 * links and the refusals are the same.
 */
static void test_transfer_dirs_and_bytes(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    char *src = path_in(tap_tmpdir(), "src");
    char cmd[8192], out[4096];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p %s/sub/deep && printf one > %s/a && chmod 751 %s/a && "
             "printf two > %s/sub/deep/b && ln -s ../a %s/sub/l && ln %s/a %s/hard && "
             "touch -d @1500000000 %s/a",
             src, src, src, src, src, src, src, src);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s", cmd), 0);
    TAP_OK(sbx_sandbox_upload_dir(sb, src, "t", 0, &e_));
    sbx_exec_result *r = run(sb, "stat -c '%a %Y' t/a; cat t/sub/deep/b; readlink t/sub/l; "
                                 "stat -c %h t/hard",
                             NULL);
    TAP_EQ_STR(stdout_of(r), "751 1500000000\ntwo../a\n2\n");
    sbx_exec_result_free(r);
    /* Back out to a new host directory: the same tree. */
    char *back = path_in(tap_tmpdir(), "back");
    TAP_OK(sbx_sandbox_download_dir(sb, "t", back, 0, &e_));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "diff -r --no-dereference %s %s && stat -c '%%a %%Y' %s/a",
                       src, back, back),
               0);
    TAP_EQ_STR(out, "751 1500000000\n");
    /* Bytes and kinds. */
    TAP_OK(sbx_sandbox_write_file(sb, "t/new", "bytes\0in", 8, 0640, &e_));
    char *data = NULL;
    size_t n = 0;
    TAP_OK(sbx_sandbox_read_file(sb, "t/new", 0, &data, &n, &e_));
    TAP_EQ_INT((int)n, 8);
    TAP_TRUE(memcmp(data, "bytes\0in", 8) == 0);
    free(data);
    const char *k = NULL;
    TAP_OK(sbx_sandbox_remote_kind(sb, "t/sub", &k, &e_));
    TAP_EQ_STR(k, "dir");
    TAP_OK(sbx_sandbox_remote_kind(sb, "t/none", &k, &e_));
    TAP_NULL(k);
    /* A name leaving the target is refused, and nothing lands next to it. */
    char *tarf = path_in(tap_tmpdir(), "evil.tar");
    snprintf(cmd, sizeof(cmd),
             "cd %s && printf x > evil && tar --transform 's,^,../,' -cf %s evil && rm evil",
             tap_tmpdir(), tarf);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s", cmd), 0);
    int fd = open(tarf, O_RDONLY | O_CLOEXEC);
    TAP_TRUE(fd >= 0);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_upload_archive(sb, fd, "t", 0, &e), SBX_ETRANSFER);
    TAP_CONTAINS(sbx_error_message(e), "..");
    sbx_error_free(e);
    close(fd);
    r = run(sb, "ls -A .. | grep -c '^evil$' || true", NULL);
    TAP_EQ_STR(stdout_of(r), "0\n");
    sbx_exec_result_free(r);
    free(tarf);
    free(back);
    free(src);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* --- serialize / connect, status, endpoint ------------------------------- */

static void test_serialize_connect_other_process(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *sb = start(p, NULL);
    char *ws = workspace_of(sb);
    char *desc = NULL;
    TAP_OK(sbx_sandbox_serialize(sb, NULL, &desc, &e_));
    TAP_CONTAINS(desc, "\"sandbox_id\":\"");
    TAP_CONTAINS(desc, sbx_sandbox_id(sb));
    TAP_CONTAINS(desc, "\"owned_workspace\":true");
    TAP_CONTAINS(desc, "\"provider\":\"local\"");
    TAP_CONTAINS(desc, ws);

    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        /* A real separate process: this binary again, fresh, in its connect mode. */
        setenv("SBX_TEST_LOCAL_CONNECT", desc, 1);
        setenv("SBX_TEST_LOCAL_CONFIG", cfgf(NULL), 1);
        execl(self_path, "test_local", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    TAP_EQ_INT(waitpid(child, &status, 0), child);
    TAP_TRUE(WIFEXITED(status));
    TAP_EQ_INT(WEXITSTATUS(status), 0);
    sbx_exec_result *r = run(sb, "cat from-child", NULL);
    long cpid = strtol(stdout_of(r), NULL, 10);
    TAP_TRUE(cpid > 0 && cpid != getpid());
    sbx_exec_result_free(r);
    TAP_TRUE(is_dir(ws)); /* the child's free did not end the box */

    /* sandbox_id alone finds the workspace under workspace_root */
    char *byid = NULL;
    TAP_TRUE(asprintf(&byid, "{\"sandbox_id\": \"%s\"}", sbx_sandbox_id(sb)) > 0);
    sbx_sandbox *c1 = NULL;
    TAP_OK(sbx_sandbox_connect(p, byid, &c1, &e_));
    TAP_EQ_STR(sbx_sandbox_id(c1), sbx_sandbox_id(sb));
    TAP_EQ_INT(sbx_sandbox_owned(c1), 0);
    r = run(c1, "pwd", NULL);
    char *want = NULL;
    TAP_TRUE(asprintf(&want, "%s\n", ws) > 0);
    TAP_EQ_STR(stdout_of(r), want);
    sbx_exec_result_free(r);

    /* a narrower scope may not end the box; stop on it keeps the workspace */
    char *scoped = NULL;
    TAP_OK(sbx_sandbox_serialize(sb, "operate", &scoped, &e_));
    TAP_CONTAINS(scoped, "\"scope\":\"operate\"");
    sbx_sandbox *c2 = NULL;
    TAP_OK(sbx_sandbox_connect(p, scoped, &c2, &e_));
    TAP_OK(sbx_sandbox_stop(c2, &e_));
    TAP_TRUE(is_dir(ws));

    /* a connected handle with no scope ends it, as the reference's connect/stop */
    status_is(c1, SBX_STATUS_RUNNING);
    TAP_OK(sbx_sandbox_stop(c1, &e_));
    TAP_TRUE(!is_dir(ws));
    /* the owner's handle now sees its box gone */
    status_is(sb, SBX_STATUS_STOPPED);

    /* connecting to a stopped box fails clearly */
    sbx_sandbox *c3 = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_connect(p, desc, &c3, &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), "does not exist");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_connect(p, "{\"sandbox_id\": \"../etc\"}", &c3, &e), SBX_EINVAL);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_connect(p, "{\"sandbox_id\": \"x\", \"provider\": \"docker\"}", &c3, &e),
               SBX_EINVAL);
    sbx_error_free(e);

    sbx_sandbox_free(c2);
    sbx_sandbox_free(c1);
    free(want);
    free(scoped);
    free(byid);
    sbx_free(desc);
    free(ws);
    sbx_sandbox_free(sb); /* stopping a box whose workspace is gone is fine */
    sbx_provider_free(p);
}

/* WARNING lines the library logged (a test's own capture). */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_seen[8192];

static void on_log(sbx_log_level level, const char *message, void *data)
{
    (void)data;
    if (level < SBX_LOG_WARNING)
        return;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(log_seen);
    snprintf(log_seen + n, sizeof(log_seen) - n, "%s\n", message);
    pthread_mutex_unlock(&log_lock);
}

static void test_absolute_workdir_made_warns(void)
{
    /*
     * An absolute workdir is a host path: made when missing, with a WARNING
     * saying it stays; kept after stop. An existing one is used silently.
     */
    sbx_provider *p = local(NULL);
    char *wd = path_in(tap_tmpdir(), "made/here");
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_workdir(s, wd);
    log_seen[0] = 0;
    sbx_set_log_cb(on_log, NULL, SBX_LOG_WARNING);
    sbx_sandbox *a = start(p, s);
    pthread_mutex_lock(&log_lock);
    TAP_CONTAINS(log_seen, "made the host directory");
    TAP_CONTAINS(log_seen, wd);
    TAP_CONTAINS(log_seen, "stays after the box");
    log_seen[0] = 0;
    pthread_mutex_unlock(&log_lock);
    TAP_OK(sbx_sandbox_stop(a, &e_));
    TAP_TRUE(is_dir(wd));
    sbx_sandbox *b = start(p, s); /* exists now: no warning */
    pthread_mutex_lock(&log_lock);
    TAP_TRUE(strstr(log_seen, "made the host directory") == NULL);
    pthread_mutex_unlock(&log_lock);
    sbx_set_log_cb(NULL, NULL, SBX_LOG_WARNING);
    TAP_OK(sbx_sandbox_stop(b, &e_));
    TAP_TRUE(is_dir(wd));
    sbx_sandbox_free(a);
    sbx_sandbox_free(b);
    sbx_spec_free(s);
    free(wd);
    sbx_provider_free(p);
}

static void test_caller_workdir_connect(void)
{
    /* A caller's workdir is never removed, whoever stops the box. */
    sbx_provider *p = local(NULL);
    char *wd = path_in(tap_tmpdir(), "keep");
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_workdir(s, wd);
    sbx_sandbox *sb = start(p, s);
    char *desc = NULL;
    TAP_OK(sbx_sandbox_serialize(sb, NULL, &desc, &e_));
    TAP_CONTAINS(desc, "\"owned_workspace\":false");
    sbx_sandbox *c = NULL;
    TAP_OK(sbx_sandbox_connect(p, desc, &c, &e_));
    TAP_EQ_STR(sbx_sandbox_workdir(c), wd);
    sbx_exec_result *r = run(c, "pwd", NULL);
    char *want = NULL;
    TAP_TRUE(asprintf(&want, "%s\n", wd) > 0);
    TAP_EQ_STR(stdout_of(r), want);
    sbx_exec_result_free(r);
    TAP_OK(sbx_sandbox_stop(c, &e_));
    TAP_TRUE(is_dir(wd));
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    TAP_TRUE(is_dir(wd));
    free(want);
    sbx_free(desc);
    sbx_sandbox_free(c);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    free(wd);
    sbx_provider_free(p);
}

static void test_status_and_endpoint(void)
{
    sbx_provider *p = local(NULL);
    TAP_TRUE(sbx_provider_supports(p, "endpoint"));
    sbx_spec *s = sbx_spec_new();
    TAP_OK(sbx_spec_add_port(s, 8080, &e_));
    sbx_sandbox *sb = NULL;
    TAP_OK(sbx_sandbox_new(p, s, &sb, &e_));
    status_is(sb, SBX_STATUS_UNKNOWN);
    TAP_OK(sbx_sandbox_start(sb, NULL, &e_));
    status_is(sb, SBX_STATUS_RUNNING);
    sbx_endpoint *ep = NULL;
    TAP_OK(sbx_sandbox_endpoint(sb, 8080, &ep, &e_));
    TAP_EQ_STR(sbx_endpoint_url(ep), "http://127.0.0.1:8080");
    TAP_EQ_INT(sbx_endpoint_header_count(ep), 0);
    sbx_endpoint_free(ep);
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    status_is(sb, SBX_STATUS_STOPPED);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_config_errors(void)
{
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    provider_fails("{\"local\": {\"bogus\": 1}}", SBX_ETYPE, "bogus");
    provider_fails("{\"local\": {\"concurrency\": 0}}", SBX_EINVAL, "concurrency");
    /* a shell that does not exist: exec fails, naming it */
    p = local("\"shell\": \"/nonexistent/sh\"");
    sbx_sandbox *sb = start(p, NULL);
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "true", NULL, &r, &e), SBX_EPROVIDER);
    TAP_CONTAINS(sbx_error_message(e), "/nonexistent/sh");
    sbx_error_free(e);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    /* a configured shell is used; default_timeout_s applies when the exec has none */
    p = local("\"shell\": \"/bin/sh\", \"default_timeout_s\": 0.5");
    sb = start(p, NULL);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, -1);
    r = run(sb, "sleep 100", o);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "local command timed out after 0.5s");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

/* --- boxes by id: list, stop, gc ------------------------------------------ */

static json_t *list_of(sbx_provider *p, const char *filter)
{
    char *text = NULL;
    TAP_OK(sbx_provider_list(p, filter, &text, &e_));
    json_t *v = json_loads(text, 0, NULL);
    sbx_free(text);
    TAP_TRUE(json_is_array(v));
    return v;
}

static json_t *entry(json_t *arr, const char *id)
{
    size_t i;
    json_t *r;
    json_array_foreach(arr, i, r) if (!strcmp(json_string_value(json_object_get(r, "id")), id)) return r;
    return NULL;
}

static int records_in_state(void)
{
    char *d = path_in(tap_tmpdir(), "state");
    int n = count_dir_entries(d);
    free(d);
    return n < 0 ? 0 : n;
}

static void test_list_stop_by_id_gc(void)
{
    sbx_provider *p = local(NULL);
    TAP_TRUE(sbx_provider_supports(p, "list") && sbx_provider_supports(p, "stop") &&
             sbx_provider_supports(p, "gc"));
    /* Nothing made yet, no state directory yet: an empty list, not an error. */
    json_t *v = list_of(p, NULL);
    TAP_EQ_INT(json_array_size(v), 0);
    json_decref(v);

    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_metadata(spec, "run", "r1");
    sbx_sandbox *a = start(p, spec);
    sbx_spec_set_metadata(spec, "run", "r2");
    sbx_spec_set_ttl(spec, 3600);
    char *wd = path_in(tap_tmpdir(), "mine");
    sbx_spec_set_workdir(spec, wd);
    sbx_sandbox *b = start(p, spec);
    sbx_spec_free(spec);
    char *ws_a = workspace_of(a);
    TAP_EQ_INT(records_in_state(), 2);

    /* Another provider object (as another process would) sees both, in the linux shapes. */
    sbx_provider *q = local(NULL);
    v = list_of(q, NULL);
    TAP_EQ_INT(json_array_size(v), 2);
    json_t *ra = entry(v, sbx_sandbox_id(a)), *rb = entry(v, sbx_sandbox_id(b));
    TAP_TRUE(ra && rb);
    TAP_EQ_STR(json_string_value(json_object_get(ra, "status")), "running");
    TAP_TRUE(json_is_number(json_object_get(ra, "created")));
    TAP_TRUE(json_is_null(json_object_get(ra, "expires_at")));
    TAP_TRUE(json_is_null(json_object_get(ra, "image")));
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(ra, "labels"), "run")), "r1");
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(ra, "provider"), "workspace")),
               ws_a);
    double exp_b = json_number_value(json_object_get(rb, "expires_at"));
    double cr_b = json_number_value(json_object_get(rb, "created"));
    TAP_TRUE(exp_b - cr_b > 3599 && exp_b - cr_b < 3601);
    /* The descriptor connects. */
    char *desc = json_dumps(json_object_get(ra, "descriptor"), JSON_COMPACT);
    sbx_sandbox *c = NULL;
    TAP_OK(sbx_sandbox_connect(q, desc, &c, &e_));
    sbx_exec_result *r = run(c, "printf %s \"$PWD\"", NULL);
    TAP_EQ_STR(stdout_of(r), ws_a);
    sbx_exec_result_free(r);
    sbx_sandbox_free(c);
    free(desc);
    json_decref(v);
    v = list_of(q, "{\"labels\": {\"run\": \"r2\"}}");
    TAP_EQ_INT(json_array_size(v), 1);
    TAP_TRUE(entry(v, sbx_sandbox_id(b)) != NULL);
    json_decref(v);

    /* Stop by id: the allocated workspace goes; the caller's workdir stays. */
    TAP_OK(sbx_provider_stop_box(q, sbx_sandbox_id(a), &e_));
    TAP_TRUE(!is_dir(ws_a));
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_stop_box(q, sbx_sandbox_id(a), &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), sbx_sandbox_id(a));
    sbx_error_free(e);
    e = NULL;
    TAP_NE_INT(sbx_provider_stop_box(q, "../../etc/passwd", &e), SBX_OK);
    sbx_error_free(e);
    TAP_OK(sbx_provider_stop_box(q, sbx_sandbox_id(b), &e_));
    TAP_TRUE(is_dir(wd));
    TAP_EQ_INT(records_in_state(), 0);
    /* The handles' own stops find nothing left to do. */
    TAP_OK(sbx_sandbox_stop(a, &e_));
    TAP_OK(sbx_sandbox_stop(b, &e_));
    sbx_sandbox_free(a);
    sbx_sandbox_free(b);

    /* gc: expired and dead boxes always, labelled ones on request; dry_run only says. */
    spec = sbx_spec_new();
    sbx_spec_set_ttl(spec, 0);
    sbx_sandbox *x = start(p, spec); /* expired at once */
    sbx_spec_free(spec);
    spec = sbx_spec_new();
    sbx_spec_set_metadata(spec, "run", "r3");
    sbx_sandbox *y = start(p, spec);
    sbx_sandbox *z = start(p, NULL); /* its workspace removed by hand: dead */
    sbx_spec_free(spec);
    char *ws_x = workspace_of(x), *ws_y = workspace_of(y), *ws_z = workspace_of(z);
    TAP_EQ_INT(rm_rf(ws_z), 0);
    v = list_of(q, NULL);
    TAP_EQ_STR(json_string_value(json_object_get(entry(v, sbx_sandbox_id(z)), "status")), "error");
    TAP_TRUE(json_is_true(
        json_object_get(json_object_get(entry(v, sbx_sandbox_id(x)), "provider"), "expired")));
    json_decref(v);
    char *removed = NULL;
    TAP_OK(sbx_provider_gc(q, "{\"dry_run\": true}", &removed, &e_));
    v = json_loads(removed, 0, NULL);
    TAP_EQ_INT(json_array_size(v), 2);
    json_decref(v);
    sbx_free(removed);
    TAP_TRUE(is_dir(ws_x));
    TAP_EQ_INT(records_in_state(), 3);
    TAP_OK(sbx_provider_gc(q, NULL, &removed, &e_));
    v = json_loads(removed, 0, NULL);
    TAP_EQ_INT(json_array_size(v), 2);
    TAP_TRUE(!is_dir(ws_x) && is_dir(ws_y));
    json_decref(v);
    sbx_free(removed);
    TAP_OK(sbx_provider_gc(q, "{\"labels\": {\"run\": \"r3\"}}", &removed, &e_));
    v = json_loads(removed, 0, NULL);
    TAP_EQ_INT(json_array_size(v), 1);
    TAP_EQ_STR(json_string_value(json_array_get(v, 0)), sbx_sandbox_id(y));
    TAP_TRUE(!is_dir(ws_y));
    json_decref(v);
    sbx_free(removed);
    TAP_EQ_INT(records_in_state(), 0);
    sbx_sandbox_free(x);
    sbx_sandbox_free(y);
    sbx_sandbox_free(z);
    free(ws_a);
    free(ws_x);
    free(ws_y);
    free(ws_z);
    free(wd);
    sbx_provider_free(q);
    sbx_provider_free(p);
}

/* A stop through the handle forgets the record; a borrowed handle's release does not. */
static void test_records_follow_the_box(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *a = start(p, NULL);
    TAP_EQ_INT(records_in_state(), 1);
    char *desc = NULL;
    TAP_OK(sbx_sandbox_serialize(a, "operate", &desc, &e_));
    sbx_sandbox *c = NULL;
    TAP_OK(sbx_sandbox_connect(p, desc, &c, &e_));
    TAP_OK(sbx_sandbox_stop(c, &e_)); /* operate scope: the box lives on */
    sbx_sandbox_free(c);
    sbx_free(desc);
    TAP_EQ_INT(records_in_state(), 1);
    TAP_OK(sbx_sandbox_stop(a, &e_));
    TAP_EQ_INT(records_in_state(), 0);
    sbx_sandbox_free(a);
    /* A state_dir that is not an absolute path is a config error. */
    provider_fails("{\"local\": {\"state_dir\": \"rel/dir\"}}", SBX_ETYPE, "state_dir");
    sbx_provider_free(p);
}

/* Records are believed only as far as they must be. */
static void test_hostile_records(void)
{
    sbx_provider *p = local(NULL);
    sbx_sandbox *a = start(p, NULL); /* makes the state directory */
    char *state = path_in(tap_tmpdir(), "state");
    char *victim = path_in(tap_tmpdir(), "victim");
    TAP_EQ_INT(mkdir(victim, 0700), 0);
    /* A record naming a directory that is not the box's own workspace: never removed. */
    char *rec = path_in(state, "local-0000000000aa.json");
    char text[8192];
    snprintf(text, sizeof(text),
             "{\"id\":\"local-0000000000aa\",\"workspace\":\"%s\",\"owned_workspace\":true,"
             "\"workdir\":null,\"created\":1,\"expires_at\":1,\"labels\":{}}",
             victim);
    TAP_EQ_INT(write_text(rec, text), 0);
    TAP_EQ_INT(chmod(rec, 0600), 0);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_stop_box(p, "local-0000000000aa", &e), SBX_EPERM);
    TAP_CONTAINS(sbx_error_message(e), "not box local-0000000000aa's own");
    sbx_error_free(e);
    e = NULL;
    char *removed = NULL;
    TAP_OK(sbx_provider_gc(p, NULL, &removed, &e_)); /* expired, but refused: not collected */
    TAP_EQ_STR(removed, "[]");
    sbx_free(removed);
    TAP_TRUE(is_dir(victim));
    /* A record whose id is not its name, a link, a malformed one: not listed. */
    char *rec2 = path_in(state, "local-0000000000bb.json");
    TAP_EQ_INT(write_text(rec2, "{\"id\":\"local-0000000000cc\",\"workspace\":\"/\","
                                "\"owned_workspace\":false,\"workdir\":null,\"created\":1,"
                                "\"expires_at\":null,\"labels\":{}}"),
               0);
    char *rec3 = path_in(state, "local-0000000000dd.json");
    TAP_EQ_INT(symlink(rec, rec3), 0);
    char *rec4 = path_in(state, "local-0000000000ee.json");
    TAP_EQ_INT(write_text(rec4, "{\"id\": 1"), 0);
    json_t *v = list_of(p, NULL);
    TAP_EQ_INT(json_array_size(v), 2); /* a, and the first forged record (well-formed) */
    TAP_TRUE(entry(v, sbx_sandbox_id(a)) != NULL);
    json_decref(v);
    TAP_NE_INT(sbx_provider_stop_box(p, "local-0000000000dd", &e), SBX_OK);
    TAP_CONTAINS(sbx_error_message(e), "local-0000000000dd.json");
    sbx_error_free(e);
    e = NULL;
    /* A state directory other users can write is refused outright. */
    TAP_EQ_INT(chmod(state, 0777), 0);
    char *out = NULL;
    TAP_EQ_INT(sbx_provider_list(p, NULL, &out, &e), SBX_EPERM);
    sbx_error_free(e);
    TAP_EQ_INT(chmod(state, 0700), 0);
    unlink(rec);
    unlink(rec2);
    unlink(rec3);
    unlink(rec4);
    sbx_sandbox_free(a);
    TAP_EQ_INT(records_in_state(), 0);
    free(rec);
    free(rec2);
    free(rec3);
    free(rec4);
    free(victim);
    free(state);
    sbx_provider_free(p);
}

/* Entries of directory `dir` (-1: it does not exist). */
static int entries_in(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return n;
}

static void test_default_workspace_removed(void)
{
    /*
     * No workdir: each box gets its own scratch directory <workspace_root>/<id>,
     * the default cwd, and stopping the box removes it with everything in it:
     * the workspace root is left as it was.
     */
    sbx_provider *p = local(NULL);
    char *root = path_in(tap_tmpdir(), "ws");
    int before = entries_in(root);
    sbx_spec *s = sbx_spec_new();
    TAP_OK(sbx_spec_add_file(s, "hello.py", "print('hi')\n", 12));
    sbx_sandbox *a = start(p, s), *b = start(p, s);
    char *ws = workspace_of(a), *wsb = workspace_of(b), *want = NULL;
    TAP_TRUE(asprintf(&want, "%s/%s", root, sbx_sandbox_id(a)) > 0);
    TAP_EQ_STR(ws, want);
    TAP_TRUE(strcmp(ws, wsb) != 0);
    sbx_exec_result *r = run(a, "cat hello.py; mkdir -p d/e; echo x > d/e/left.txt", NULL);
    TAP_EQ_STR(stdout_of(r), "print('hi')\n");
    sbx_exec_result_free(r);
    TAP_OK(sbx_sandbox_stop(a, &e_));
    TAP_TRUE(!is_dir(ws));
    TAP_TRUE(is_dir(wsb));
    TAP_OK(sbx_sandbox_stop(b, &e_));
    TAP_EQ_INT(entries_in(root), before < 0 ? 0 : before);
    TAP_EQ_INT(records_in_state(), 0);
    free(want);
    free(ws);
    free(wsb);
    free(root);
    sbx_sandbox_free(a);
    sbx_sandbox_free(b);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

int main(int argc, char **argv)
{
    const char *desc = getenv("SBX_TEST_LOCAL_CONNECT");
    if (desc)
        /* The other side of test_serialize_connect_other_process, in a fresh process. */
        return connect_child(getenv("SBX_TEST_LOCAL_CONFIG"), desc, "echo $$ > from-child; pwd");
    if (argc > 0 && !realpath(argv[0], self_path))
        snprintf(self_path, sizeof(self_path), "/proc/self/exe");
    static const struct tap_test tests[] = {
        TAP(test_first_run_flow),
        TAP(test_env_precedence),
        TAP(test_user_rejected),
        TAP(test_timeout_kills_tree),
        TAP_T(test_timeout_escaped_grandchild, 60),
        TAP(test_cancel_kills_tree),
        TAP(test_stop_kills_running_exec),
        TAP_T(test_100_concurrent_execs, 120),
        TAP_T(test_default_concurrency_queues, 120),
        TAP_T(test_large_output_and_cap, 120),
        TAP(test_binary_output_and_stdin),
        TAP(test_cwd),
        TAP_T(test_transfer, 120),
        TAP_T(test_transfer_dirs_and_bytes, 120),
        TAP(test_serialize_connect_other_process),
        TAP(test_caller_workdir_connect),
        TAP(test_absolute_workdir_made_warns),
        TAP(test_default_workspace_removed),
        TAP(test_status_and_endpoint),
        TAP(test_config_errors),
        TAP(test_list_stop_by_id_gc),
        TAP(test_records_follow_the_box),
        TAP(test_hostile_records),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
