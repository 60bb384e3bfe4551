/*
 * sbx-agent driven through the host client (src/kit/client.c): the real
 * agent binary runs as a child process (no namespaces needed), the client
 * runs on a real sbx context loop, ops are real sbx_ops.
 */
#include "tap.h"
#include "common.h"
#include "lib/file.h"
#include "lib/agent.h"
#include "lib/box.h"
#include "lib/proc.h"

#include "core/internal.h"
#include "kit/client.h"
#include "proto/proto.h"

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include <uv.h>


struct alive_call {
    sbx_agent_conn *c;
    int alive;
};

static void do_alive(void *arg)
{
    struct alive_call *ac = arg;
    ac->alive = sbx__agent_alive(ac->c);
}

static int conn_alive(sbx_agent_conn *c)
{
    struct alive_call ac = {c, -1};
    on_loop(do_alive, &ac);
    return ac.alive;
}

struct ping_call {
    sbx_agent_conn *c;
    struct waiter *w;
};

static void do_ping(void *arg)
{
    struct ping_call *pc = arg;
    pc->w->op = sbx__op_new(P, op_done, pc->w);
    sbx__agent_ping(pc->c, pc->w->op);
}

static void do_connect_short(void *arg)
{
    struct connect_call *cc = arg;
    int rc = sbx__agent_connect(loop_of(), cc->path, 0.3, connect_cb, cc->w);
    if (rc < 0)
        waiter_signal(cc->w, rc, NULL, NULL);
}

/* --- tests --------------------------------------------------------------- */

static void test_exec_basics(void)
{
    setup();
    struct agent a = start_stdio(NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);

    sbx_exec_result *r = agent_run(c, "echo hello; echo oops >&2; exit 3", NULL);
    TAP_EQ_STR(stdout_of(r), "hello\n");
    TAP_EQ_STR(stderr_of(r), "oops\n");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 3);
    TAP_NULL(sbx_exec_result_error_type(r));
    TAP_EQ_INT(sbx_exec_result_truncated(r), 0);
    sbx_exec_result_free(r);

    /* Empty streams are "", not None. */
    r = agent_run(c, "true", NULL);
    TAP_EQ_STR(stdout_of(r), "");
    TAP_EQ_STR(stderr_of(r), "");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);

    /* env: base env under the call's env; cwd; stdin. */
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_env(o, "A", "from-call");
    sbx_exec_opts_set_cwd(o, "/tmp");
    sbx_exec_opts_set_stdin(o, "line1\nline2\n", 12);
    const char *base[] = {"A=from-base", "B=base", NULL};
    r = exec_wait(exec_start_async(c, "echo $A $B; pwd; wc -l", NULL, o, base));
    TAP_EQ_STR(stdout_of(r), "from-call base\n/tmp\n2\n");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);

    /* argv mode, PATH search, and a command that does not exist. */
    const char *argv[] = {"printf", "%s|", "a b", "c", NULL};
    r = exec_wait(exec_start_async(c, NULL, argv, NULL, NULL));
    TAP_EQ_STR(stdout_of(r), "a b|c|");
    sbx_exec_result_free(r);
    const char *nope[] = {"no-such-command-sbx", NULL};
    r = exec_wait(exec_start_async(c, NULL, nope, NULL, NULL));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 127);
    TAP_CONTAINS(stderr_of(r), "no-such-command-sbx");
    sbx_exec_result_free(r);

    /* A missing cwd is a clear result, not a crash. */
    o = sbx_exec_opts_new();
    sbx_exec_opts_set_cwd(o, "/no/such/dir");
    r = agent_run(c, "pwd", o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    TAP_CONTAINS(stderr_of(r), "/no/such/dir");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);

    /* Killed by a signal: 128 + the signal, as docker (the reference) and a shell report. */
    r = agent_run(c, "kill -TERM $$", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 128 + SIGTERM);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);
    r = agent_run(c, "kill -9 $$", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 137);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);

    /* Large stdin through chunked frames. */
    o = sbx_exec_opts_new();
    size_t big = 3u << 20;
    char *data = malloc(big);
    memset(data, 'x', big);
    sbx_exec_opts_set_stdin(o, data, big);
    free(data);
    r = agent_run(c, "wc -c", o);
    TAP_EQ_STR(stdout_of(r), "3145728\n");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);

    TAP_EQ_INT(conn_alive(c), 1);
    teardown(c, &a);
}

/* init --listen with `--shell SH` (NULL: none) and the agent's own PATH set to `path` (NULL: ours). */
static struct agent start_with_shell(const char *shell, const char *path)
{
    const char *opts[] = {"--shell", shell, NULL};
    const char *env[] = {"PATH", path, NULL};
    return start_listen_opts(shell ? opts : NULL, path ? env : NULL, NULL);
}

/* What runs a string command: $0, and whether bash features work. */
static char *shell_of(sbx_agent_conn *c)
{
    sbx_exec_result *r = agent_run(c, "echo \"$0 ${BASH_VERSION:+has-bash}\"", NULL);
    char *s = strdup(stdout_of(r));
    sbx_exec_result_free(r);
    return s;
}

/*
 * The shell of a string command, as the reference's docker provider picks
 * it: bash when it is on PATH (so `source` works), else sh; --shell decides.
 */
static void test_shell_choice(void)
{
    if (access("/bin/bash", X_OK) != 0 || access("/bin/sh", X_OK) != 0)
        TAP_SKIP("needs /bin/bash and /bin/sh");
    setup();
    /* Auto, bash on PATH: bash, as bash (not in sh mode), and `source` works. */
    struct agent a = start_with_shell(NULL, "/usr/bin:/bin");
    sbx_agent_conn *c = connect_agent(&a);
    char *sh = shell_of(c);
    TAP_EQ_STR(sh, "bash has-bash\n");
    free(sh);
    char env_sh[PATH_MAX];
    snprintf(env_sh, sizeof(env_sh), "%s/env.sh", tap_tmpdir());
    TAP_EQ_INT(write_text(env_sh, "export FROM_ENV=sourced\n"), 0);
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof(cmd), "source %s && echo $FROM_ENV", env_sh);
    sbx_exec_result *r = agent_run(c, cmd, NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_EQ_STR(stdout_of(r), "sourced\n");
    sbx_exec_result_free(r);
    teardown(c, &a);

    /* Auto, no bash on PATH: sh. */
    setup();
    char empty[PATH_MAX];
    snprintf(empty, sizeof(empty), "%s/nobash", tap_tmpdir());
    TAP_EQ_INT(mkdir(empty, 0755), 0);
    a = start_with_shell(NULL, empty);
    c = connect_agent(&a);
    sh = shell_of(c);
    TAP_EQ_STR(sh, "sh \n");
    free(sh);
    teardown(c, &a);

    /* Configured: a name found on PATH, and an absolute path. */
    setup();
    a = start_with_shell("sh", "/usr/bin:/bin");
    c = connect_agent(&a);
    sh = shell_of(c);
    TAP_EQ_STR(sh, "sh \n");
    free(sh);
    teardown(c, &a);
    setup();
    a = start_with_shell("/bin/bash", empty);
    c = connect_agent(&a);
    sh = shell_of(c);
    TAP_EQ_STR(sh, "bash has-bash\n");
    free(sh);
    teardown(c, &a);

    /* A configured shell the box lacks: the reason, as a runtime failure. */
    setup();
    a = start_with_shell("no-such-shell-sbx", "/usr/bin:/bin");
    c = connect_agent(&a);
    r = agent_run(c, "true", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    TAP_CONTAINS(stderr_of(r), "no-such-shell-sbx");
    sbx_exec_result_free(r);
    teardown(c, &a);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of `s` sorted, joined again: an environment compared whatever its order. */
static char *sorted_lines(const char *s)
{
    char *copy = strdup(s), *save = NULL, *lines[512];
    size_t n = 0, len = 0;
    for (char *l = strtok_r(copy, "\n", &save); l && n < 512; l = strtok_r(NULL, "\n", &save))
        lines[n++] = l, len += strlen(l) + 1;
    qsort(lines, n, sizeof(char *), cmp_str);
    char *out = calloc(1, len + 1);
    for (size_t i = 0; i < n; i++)
        strcat(strcat(out, lines[i]), "\n");
    free(copy);
    return out;
}

/*
 * [direct] A command of plain words skips the shell and gives the program
 * what the shell would have: the same stdout, stderr (the shell's own
 * errors when nothing can be exec'd), exit code and environment (PWD, and
 * SHLVL and _ for bash), under bash and dash, with PWD and SHLVL given or
 * not. Each is compared with the same command through the shell
 * (`exec SH -c 'CMD'`, quoted, so it cannot take the direct way).
 */
static void test_direct_exec_is_the_shells(void)
{
    if (access("/bin/bash", X_OK) != 0 || access("/bin/dash", X_OK) != 0)
        TAP_SKIP("needs /bin/bash and /bin/dash");
    /* The agents below inherit this environment: SHLVL absent is a case of its own. */
    unsetenv("SHLVL");
    char dir[PATH_MAX], script[PATH_MAX + 32], lnk[PATH_MAX + 32], notexec[PATH_MAX + 32];
    snprintf(dir, sizeof(dir), "%s/direct", tap_tmpdir());
    TAP_EQ_INT(mkdir(dir, 0755), 0);
    snprintf(script, sizeof(script), "%s/noshebang", dir);
    TAP_EQ_INT(write_text(script, "echo from-script $0\n"), 0);
    TAP_EQ_INT(chmod(script, 0755), 0);
    snprintf(notexec, sizeof(notexec), "%s/notexec", dir);
    TAP_EQ_INT(write_text(notexec, "echo never\n"), 0);
    snprintf(lnk, sizeof(lnk), "%s/lnk", dir);
    TAP_EQ_INT(symlink(dir, lnk), 0);
    const char *cmds[] = {
        "env", "/usr/bin/env", "printenv PWD SHLVL _", "true", "false", "ls /no-such-dir-sbx",
        "no-such-command-sbx a b", "/no/such/program", "/etc/passwd", "/tmp", script, notexec,
        "env -u PWD printenv HOME",
    };
    static const struct {
        const char *shell, *as;
    } shells[] = { { "/bin/bash", "bash" }, { "/bin/dash", "dash" } };
    for (size_t k = 0; k < SBX_ARRAY_SIZE(shells); k++) {
        setup();
        struct agent a = start_with_shell(shells[k].shell, "/usr/bin:/bin");
        sbx_agent_conn *c = connect_agent(&a);
        for (size_t v = 0; v < 4; v++) {
            sbx_exec_opts *o = sbx_exec_opts_new();
            sbx_exec_opts_set_cwd(o, dir);
            if (v == 1)
                sbx_exec_opts_set_env(o, "PWD", lnk); /* names the directory: kept */
            if (v == 2)
                sbx_exec_opts_set_env(o, "PWD", "/"); /* does not: replaced */
            if (v == 3)
                sbx_exec_opts_set_env(o, "SHLVL", "4");
            for (size_t i = 0; i < SBX_ARRAY_SIZE(cmds); i++) {
                /* The variants change the environment only: the commands that print it. */
                if (v > 0 && !strstr(cmds[i], "env"))
                    continue;
                char through[PATH_MAX + 128];
                snprintf(through, sizeof(through), "exec %s -c '%s'", shells[k].as, cmds[i]);
                sbx_exec_result *d = agent_run(c, cmds[i], o), *t = agent_run(c, through, o);
                char *dout = sorted_lines(stdout_of(d)), *tout = sorted_lines(stdout_of(t));
                if (strcmp(dout, tout) || strcmp(stderr_of(d), stderr_of(t)) ||
                    sbx_exec_result_return_code(d) != sbx_exec_result_return_code(t))
                    TAP_FAIL("%s, variant %zu, '%s': direct %d [%s|%s], shell %d [%s|%s]",
                             shells[k].shell, v, cmds[i], sbx_exec_result_return_code(d),
                             stdout_of(d), stderr_of(d), sbx_exec_result_return_code(t),
                             stdout_of(t), stderr_of(t));
                free(dout);
                free(tout);
                sbx_exec_result_free(d);
                sbx_exec_result_free(t);
            }
            sbx_exec_opts_free(o);
        }
        teardown(c, &a);
    }
    /*
     * The shell did not start for plain words: a shell that logs each start
     * (named bash, so it is taken for bash) sees `true` not at all, and
     * `true;` once.
     */
    char wrap[PATH_MAX + 32], logf[PATH_MAX + 32], text[2 * PATH_MAX + 64];
    snprintf(wrap, sizeof(wrap), "%s/bin/bash", dir);
    snprintf(logf, sizeof(logf), "%s/starts", dir);
    snprintf(text, sizeof(text), "#!/bin/dash\necho started >> %s\nexec /bin/bash \"$@\"\n", logf);
    snprintf(lnk, sizeof(lnk), "%s/bin", dir);
    TAP_EQ_INT(mkdir(lnk, 0755), 0);
    TAP_EQ_INT(write_text(wrap, text), 0);
    TAP_EQ_INT(chmod(wrap, 0755), 0);
    TAP_EQ_INT(write_text(logf, ""), 0);
    setup();
    struct agent a = start_with_shell(wrap, "/usr/bin:/bin");
    sbx_agent_conn *c = connect_agent(&a);
    sbx_exec_result *r = agent_run(c, "true", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    char *got = NULL;
    TAP_EQ_INT(sbx__read_file(logf, &got, NULL), 0);
    TAP_EQ_STR(got, "");
    free(got);
    r = agent_run(c, "true;", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    TAP_EQ_INT(sbx__read_file(logf, &got, NULL), 0);
    TAP_EQ_STR(got, "started\n");
    free(got);
    teardown(c, &a);
}

static void test_binary_output(void)
{
    setup();
    struct agent a = start_stdio(NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    sbx_exec_result *r = agent_run(c, "printf 'a\\000b\\377\\001c'", NULL);
    size_t len = 0;
    const char *out = sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, 6);
    TAP_TRUE(memcmp(out, "a\0b\377\001c", 6) == 0);
    sbx_exec_result_free(r);
    teardown(c, &a);
}

/* A zombie is dead too: it only waits for its parent (the agent) to reap it. */
static bool pid_gone(pid_t pid) { return !proc_runs(pid); }

static void wait_gone(pid_t pid)
{
    /* Bounded by the test's alarm: a process that survives fails the test. */
    while (!pid_gone(pid))
        usleep(10000);
}

/* The pid a command in the box writes to `path` (a line), once it has written it. */
static pid_t pid_written(const char *path)
{
    char *text = NULL;
    while (!(text = read_text(path)) || !strchr(text, '\n')) { /* the alarm bounds it */
        free(text);
        usleep(5000);
    }
    pid_t pid = (pid_t)strtol(text, NULL, 10);
    free(text);
    return pid;
}

static void test_timeout_kills_group(void)
{
    setup();
    struct agent a = start_listen(NULL, NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    char pidfile[PATH_MAX], cmd[PATH_MAX + 128];
    snprintf(pidfile, sizeof(pidfile), "%s/bg.pid", tap_tmpdir());
    snprintf(cmd, sizeof(cmd), "sleep 1000 & echo $! > %s; echo started; sleep 1000", pidfile);
    sbx_exec_opts *o = sbx_exec_opts_new();
    /*
     * Long enough for the shell to print "started" first under memcheck on
     * a loaded machine (0.5 s was not, beside the ASan stage).
     */
    sbx_exec_opts_set_timeout(o, 3);
    sbx_exec_result *r = agent_run(c, cmd, o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    TAP_EQ_STR(stdout_of(r), "started\n"); /* the partial stdout, not None: issue 9 */
    TAP_CONTAINS(stderr_of(r), "timed out after 3s");
    TAP_CONTAINS(stderr_of(r), "sleep 1000");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    char *pid_text = read_text(pidfile);
    TAP_TRUE(pid_text != NULL);
    pid_t bg = (pid_t)strtol(pid_text, NULL, 10);
    free(pid_text);
    TAP_TRUE(bg > 0);
    wait_gone(bg);
    /* The connection is still fine. */
    r = agent_run(c, "echo still here", NULL);
    TAP_EQ_STR(stdout_of(r), "still here\n");
    sbx_exec_result_free(r);
    teardown(c, &a);
}

static void test_cancel_kills_group(void)
{
    setup();
    struct agent a = start_listen(NULL, NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    char pidfile[PATH_MAX], cmd[PATH_MAX + 64];
    snprintf(pidfile, sizeof(pidfile), "%s/main.pid", tap_tmpdir());
    snprintf(cmd, sizeof(cmd), "echo $$ > %s; exec sleep 1000", pidfile);
    struct waiter *w = exec_start_async(c, cmd, NULL, NULL, NULL);
    pid_t pid = pid_written(pidfile);
    on_loop(do_cancel, w->op);
    waiter_wait(w);
    TAP_EQ_INT(w->code, SBX_ECANCELED);
    waiter_free(w);
    wait_gone(pid);
    teardown(c, &a);
}

#define N_CONCURRENT 300

static void test_concurrent_execs(void)
{
    setup();
    struct agent a = start_listen(NULL, NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    static struct waiter *ws[N_CONCURRENT];
    static char cmds[N_CONCURRENT][64];
    for (int i = 0; i < N_CONCURRENT; i++) {
        /* Each sleeps a little so they really overlap. */
        snprintf(cmds[i], sizeof(cmds[i]), "sleep 0.2; echo out-%d; echo err-%d >&2", i, i);
        ws[i] = exec_start_async(c, cmds[i], NULL, NULL, NULL);
    }
    for (int i = 0; i < N_CONCURRENT; i++) {
        sbx_exec_result *r = exec_wait(ws[i]);
        char want[64];
        snprintf(want, sizeof(want), "out-%d\n", i);
        TAP_EQ_STR(stdout_of(r), want);
        snprintf(want, sizeof(want), "err-%d\n", i);
        TAP_EQ_STR(stderr_of(r), want);
        TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
        sbx_exec_result_free(r);
    }
    teardown(c, &a);
}

/*
 * Starts overlap now (the agent does not wait for one command's execve
 * before reading the next request): failures found in the child (a missing
 * cwd, a command not found) still come back on their own channel, with
 * successes interleaved between them.
 */
static void test_concurrent_starts_with_failures(void)
{
    setup();
    struct agent a = start_listen(NULL, NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    enum { N = 60 };
    static struct waiter *ws[N];
    static char cmds[N][64];
    static const char *const nope[] = {"no-such-command-sbx", NULL};
    sbx_exec_opts *bad_cwd = sbx_exec_opts_new();
    sbx_exec_opts_set_cwd(bad_cwd, "/no/such/dir");
    for (int i = 0; i < N; i++) {
        snprintf(cmds[i], sizeof(cmds[i]), "echo out-%d; exit %d", i, i % 7);
        if (i % 3 == 1)
            ws[i] = exec_start_async(c, NULL, nope, NULL, NULL);
        else if (i % 3 == 2)
            ws[i] = exec_start_async(c, cmds[i], NULL, bad_cwd, NULL);
        else
            ws[i] = exec_start_async(c, cmds[i], NULL, NULL, NULL);
    }
    for (int i = 0; i < N; i++) {
        sbx_exec_result *r = exec_wait(ws[i]);
        if (i % 3 == 1) {
            TAP_EQ_INT(sbx_exec_result_return_code(r), 127);
            TAP_CONTAINS(stderr_of(r), "no-such-command-sbx: command not found");
        } else if (i % 3 == 2) {
            TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
            TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
            TAP_CONTAINS(stderr_of(r), "/no/such/dir");
        } else {
            char want[64];
            snprintf(want, sizeof(want), "out-%d\n", i);
            TAP_EQ_STR(stdout_of(r), want);
            TAP_EQ_INT(sbx_exec_result_return_code(r), i % 7);
        }
        sbx_exec_result_free(r);
    }
    sbx_exec_opts_free(bad_cwd);
    TAP_EQ_INT(conn_alive(c), 1);
    teardown(c, &a);
}

static void test_output_cap(void)
{
    setup();
    struct agent a = start_stdio(NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_output_limit(o, 1u << 20);
    /* 100 MiB to stdout, 3 bytes to stderr: stdout is capped, stderr whole, rc real. */
    sbx_exec_result *r = agent_run(c, "head -c 104857600 /dev/zero; echo end >&2; exit 4", o);
    size_t len = 0;
    sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, 1u << 20);
    TAP_EQ_STR(stderr_of(r), "end\n");
    TAP_EQ_INT(sbx_exec_result_truncated(r), 1);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 4);
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    /* Below the cap: not truncated. */
    r = agent_run(c, "head -c 1000 /dev/zero", NULL);
    sbx_exec_result_stdout(r, &len);
    TAP_EQ_INT(len, 1000);
    TAP_EQ_INT(sbx_exec_result_truncated(r), 0);
    sbx_exec_result_free(r);
    teardown(c, &a);
}

static void make_file(const char *path, size_t size, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    TAP_TRUE(fd >= 0);
    char *buf = malloc(1 << 20);
    uint32_t x = 12345;
    for (size_t off = 0; off < size;) {
        size_t n = size - off < (1u << 20) ? size - off : (1u << 20);
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = (char)(x >> 16);
        }
        TAP_EQ_INT(write(fd, buf, n), (long long)n);
        off += n;
    }
    free(buf);
    TAP_EQ_INT(fchmod(fd, mode), 0);
    close(fd);
}

static bool same_file(const char *a, const char *b)
{
    char out[64];
    return run_cmd(out, sizeof(out), "cmp -s '%s' '%s'", a, b) == 0;
}

static void check_upload_download(const char *const *env)
{
    setup();
    char root[1024], src[1024], in_box[PATH_MAX], back[PATH_MAX];
    snprintf(root, sizeof(root), "%s/root", tap_tmpdir());
    TAP_EQ_INT(mkdir(root, 0755), 0);
    snprintf(src, sizeof(src), "%s/src.bin", tap_tmpdir());
    /* 16 MiB: 64 chunks and four frames' worth, past every window (a bigger file
     * checks nothing more here, and costs minutes under TSan and memcheck). */
    make_file(src, 16u << 20, 0751);
    struct agent a = start_listen(root, env, NULL);
    sbx_agent_conn *c = connect_agent(&a);

    char *msg = NULL;
    TAP_EQ_INT(transfer(c, 0, src, "/deep/new/dir/file.bin", &msg), SBX_OK);
    snprintf(in_box, sizeof(in_box), "%s/deep/new/dir/file.bin", root);
    TAP_TRUE(same_file(src, in_box));
    TAP_EQ_INT(mode_of(in_box), 0751);

    /* Replacing an existing file keeps it whole (temp + rename). */
    TAP_EQ_INT(transfer(c, 0, src, "/deep/new/dir/file.bin", NULL), SBX_OK);
    TAP_TRUE(same_file(src, in_box));

    snprintf(back, sizeof(back), "%s/host/a/b/back.bin", tap_tmpdir());
    TAP_EQ_INT(transfer(c, 1, "/deep/new/dir/file.bin", back, &msg), SBX_OK);
    TAP_TRUE(same_file(src, back));
    TAP_EQ_INT(mode_of(back), 0751);

    /* Several at once on the same connection. */
    char dst[4][PATH_MAX];
    struct file_call fcs[4];
    for (int i = 0; i < 4; i++) {
        snprintf(dst[i], sizeof(dst[i]), "%s/host/par-%d.bin", tap_tmpdir(), i);
        fcs[i] = (struct file_call){c, "/deep/new/dir/file.bin", dst[i], 1, waiter_new(), NULL};
        TAP_EQ_INT(sbx__context_post(P->ctx, do_file, &fcs[i]), SBX_OK);
    }
    for (int i = 0; i < 4; i++) {
        waiter_wait(fcs[i].w);
        TAP_EQ_INT(fcs[i].w->code, SBX_OK);
        waiter_free(fcs[i].w);
        TAP_TRUE(same_file(src, dst[i]));
    }

    /*
     * A target that is a directory gets the file under its own name, as
     * `docker cp` does (the reference's container providers): an existing
     * one, one named with a trailing slash (made), and a link to one.
     */
    TAP_EQ_INT(transfer(c, 0, src, "/deep/new/dir", &msg), SBX_OK);
    snprintf(in_box, sizeof(in_box), "%s/deep/new/dir/src.bin", root);
    TAP_TRUE(same_file(src, in_box));
    TAP_EQ_INT(mode_of(in_box), 0751);
    TAP_EQ_INT(transfer(c, 0, src, "/made/here/", &msg), SBX_OK);
    snprintf(in_box, sizeof(in_box), "%s/made/here/src.bin", root);
    TAP_TRUE(same_file(src, in_box));
    char link[PATH_MAX];
    snprintf(link, sizeof(link), "%s/to-deep", root);
    TAP_EQ_INT(symlink("/deep/new", link), 0); /* absolute: resolved inside the root */
    TAP_EQ_INT(transfer(c, 0, src, "/to-deep", &msg), SBX_OK);
    snprintf(in_box, sizeof(in_box), "%s/deep/new/src.bin", root);
    TAP_TRUE(same_file(src, in_box));
    /* Once only: a directory of the file's name inside it is an error. */
    char out_dummy[256];
    snprintf(in_box, sizeof(in_box), "%s/made/dir-in/src.bin", root);
    TAP_EQ_INT(run_cmd(out_dummy, sizeof(out_dummy), "mkdir -p %s", in_box), 0);
    msg = NULL;
    TAP_NE_INT(transfer(c, 0, src, "/made/dir-in", &msg), SBX_OK);
    TAP_CONTAINS(msg, "directory");
    free(msg);

    /* Missing files, both sides: ENOENT naming the path. */
    TAP_EQ_INT(transfer(c, 1, "/no/such/file", back, &msg), SBX_ENOENT);
    TAP_CONTAINS(msg, "/no/such/file");
    free(msg);
    char missing[PATH_MAX];
    snprintf(missing, sizeof(missing), "%s/not-here", tap_tmpdir());
    TAP_EQ_INT(transfer(c, 0, missing, "/x", &msg), SBX_ENOENT);
    TAP_CONTAINS(msg, "not-here");
    free(msg);
    /* A directory is not a file. */
    TAP_EQ_INT(transfer(c, 1, "/deep", back, &msg), SBX_EINVAL);
    free(msg);
    /* No temp files left behind in the box or on the host. */
    char out[4096];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "find '%s' '%s/host' -name '.*sbx*'", root, tap_tmpdir()),
               0);
    TAP_EQ_STR(out, "");
    teardown(c, &a);
}

static void test_upload_download(void)
{
    check_upload_download(NULL);
}

static const char *const no_openat2_env[] = {"SBX_AGENT_NO_OPENAT2", "1", NULL};

static void test_upload_download_fallback_walk(void)
{
    check_upload_download(no_openat2_env);
}

static void check_escapes(const char *const *env)
{
    setup();
    char root[1024], path[PATH_MAX], outside[1024], host[1024];
    const char *t = tap_tmpdir();
    snprintf(root, sizeof(root), "%s/root", t);
    snprintf(path, sizeof(path), "%s/root/etc", t);
    TAP_EQ_INT(sbx__mkdir_p(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/root/etc/passwd", t);
    TAP_EQ_INT(write_text(path, "inside-the-box\n"), 0);
    snprintf(outside, sizeof(outside), "%s/outside", t);
    TAP_EQ_INT(mkdir(outside, 0755), 0);
    snprintf(path, sizeof(path), "%s/secret", outside);
    TAP_EQ_INT(write_text(path, "host secret\n"), 0);
    /* Links planted in the box pointing out of it, absolute and relative. */
    snprintf(path, sizeof(path), "%s/root/abs-link", t);
    TAP_EQ_INT(symlink(outside, path), 0);
    snprintf(path, sizeof(path), "%s/root/rel-link", t);
    TAP_EQ_INT(symlink("../outside/secret", path), 0);
    snprintf(path, sizeof(path), "%s/root/dir-link", t);
    TAP_EQ_INT(symlink("../../../../../../..", path), 0);

    struct agent a = start_listen(root, env, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    snprintf(host, sizeof(host), "%s/got", t);

    /* ".." stops at the box root: this is the box's own /etc/passwd. */
    TAP_EQ_INT(transfer(c, 1, "../../etc/passwd", host, NULL), SBX_OK);
    char *got = read_text(host);
    TAP_EQ_STR(got, "inside-the-box\n");
    free(got);
    unlink(host);

    const char *bad[] = {"/abs-link/secret", "/rel-link",
                         "/dir-link/"
                         "outside/secret",
                         "/root/../../outside/secret", NULL};
    char escaped[2048];
    snprintf(escaped, sizeof(escaped), "/dir-link%s/secret", outside);
    for (int i = 0; bad[i]; i++) {
        char *msg = NULL;
        int code = transfer(c, 1, bad[i], host, &msg);
        if (code != SBX_ENOENT && code != SBX_EPERM)
            TAP_FAIL("download of %s: code %d (%s)", bad[i], code, msg ? msg : "");
        free(msg);
        TAP_TRUE(access(host, F_OK) != 0);
    }
    int code = transfer(c, 1, escaped, host, NULL);
    TAP_TRUE(code == SBX_ENOENT || code == SBX_EPERM);
    TAP_TRUE(access(host, F_OK) != 0);

    /* Uploads through the same links land inside the root, never in `outside`. */
    char payload[2048];
    snprintf(payload, sizeof(payload), "%s/payload", t);
    TAP_EQ_INT(write_text(payload, "written\n"), 0);
    /*
     * The absolute link dangles inside the box: its target is made there, as
     * Docker does for a WORKDIR (checked below), never followed to the host's.
     */
    TAP_EQ_INT(transfer(c, 0, payload, "/abs-link/planted", NULL), SBX_OK);
    TAP_EQ_INT(transfer(c, 0, payload, escaped, NULL), SBX_OK);
    TAP_EQ_INT(transfer(c, 0, payload, "../../../outside/planted2", NULL), SBX_OK);
    snprintf(path, sizeof(path), "%s/planted", outside);
    TAP_TRUE(access(path, F_OK) != 0);
    snprintf(path, sizeof(path), "%s/planted2", outside);
    TAP_TRUE(access(path, F_OK) != 0);
    snprintf(path, sizeof(path), "%s/secret", outside);
    got = read_text(path);
    TAP_EQ_STR(got, "host secret\n");
    free(got);
    /* They are in the box, under the root. */
    snprintf(path, sizeof(path), "%s%s/secret", root, outside);
    got = read_text(path);
    TAP_EQ_STR(got, "written\n");
    free(got);
    snprintf(path, sizeof(path), "%s/outside/planted2", root);
    TAP_TRUE(access(path, F_OK) == 0);
    snprintf(path, sizeof(path), "%s%s/planted", root, outside);
    TAP_TRUE(access(path, F_OK) == 0);
    /* An upload onto a symlink replaces the link, it does not write through it. */
    TAP_EQ_INT(transfer(c, 0, payload, "/rel-link", NULL), SBX_OK);
    snprintf(path, sizeof(path), "%s/secret", outside);
    got = read_text(path);
    TAP_EQ_STR(got, "host secret\n");
    free(got);
    teardown(c, &a);
}

static void test_path_escapes(void)
{
    check_escapes(NULL);
}
static void test_path_escapes_fallback_walk(void)
{
    check_escapes(no_openat2_env);
}

static void test_agent_killed_mid_exec(void)
{
    setup();
    struct agent a = start_listen(NULL, NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    char flag[PATH_MAX], cmd[PATH_MAX + 64];
    snprintf(flag, sizeof(flag), "%s/running", tap_tmpdir());
    snprintf(cmd, sizeof(cmd), "echo $$ > %s; exec sleep 1000", flag);
    struct waiter *w = exec_start_async(c, cmd, NULL, NULL, NULL);
    pid_t sleeper = pid_written(flag);
    kill(a.pid, SIGKILL);
    sbx_exec_result *r = exec_wait(w);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    TAP_CONTAINS(stderr_of(r), "went away");
    sbx_exec_result_free(r);
    TAP_EQ_INT(conn_alive(c), 0);
    /* Later ops fail the same way, at once. */
    r = agent_run(c, "true", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    sbx_exec_result_free(r);
    /* The command outlived its agent (nobody killed its session): clean it up. */
    kill(sleeper, SIGKILL);
    teardown(c, &a);
}

static void raw_read_frame(int fd, sbx_frame *f, sbx_proto_reader *rd)
{
    for (;;) {
        int rc = sbx__proto_reader_next(rd, f);
        if (rc == 1)
            return;
        TAP_EQ_INT(rc, 0);
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        TAP_TRUE(n > 0);
        TAP_EQ_INT(sbx__proto_reader_feed(rd, buf, (size_t)n), 0);
    }
}

static void test_malformed_frame_closes_only_that_stream(void)
{
    setup();
    struct agent a = start_listen(NULL, NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);

    const uint8_t *bad[] = {
        /* A length far over the limit. */
        (const uint8_t *)"\xff\xff\xff\xff\x10\x00\x00\x00\x01",
        /* A length below the header. */
        (const uint8_t *)"\x00\x00\x00\x02\x10\x00\x00\x00\x01",
    };
    for (size_t i = 0; i < 3; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", a.sock);
        TAP_EQ_INT(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        sbx_proto_reader rd;
        sbx__proto_reader_init(&rd, SBX_PROTO_MAX_PAYLOAD);
        sbx_frame f;
        raw_read_frame(fd, &f, &rd);
        TAP_EQ_INT(f.type, SBX_MSG_HELLO);
        if (i < 2) {
            TAP_EQ_INT(write(fd, bad[i], 9), 9);
        } else {
            /* A valid hello, then an EXEC whose payload lies about its string lengths. */
            sbx_pbuf b = {0};
            sbx__pbuf_begin(&b);
            sbx_msg_hello h = {SBX_PROTO_MAGIC, 1, 1, SBX_PROTO_MAX_PAYLOAD, (char *)"test"};
            sbx__msg_hello_encode(&b, &h);
            TAP_EQ_INT(sbx__pbuf_finish(&b, SBX_MSG_HELLO, 0), 0);
            TAP_EQ_INT(write(fd, b.data, b.len), (long long)b.len);
            sbx__pbuf_begin(&b);
            sbx__pbuf_u32(&b, 0);
            sbx__pbuf_u32(&b, 0xffffff00u);
            TAP_EQ_INT(sbx__pbuf_finish(&b, SBX_MSG_EXEC, 7), 0);
            TAP_EQ_INT(write(fd, b.data, b.len), (long long)b.len);
            sbx__pbuf_free(&b);
        }
        /* The agent answers ERROR on channel 0 and closes the stream. */
        raw_read_frame(fd, &f, &rd);
        TAP_EQ_INT(f.type, SBX_MSG_ERROR);
        char buf[64];
        TAP_EQ_INT(read(fd, buf, sizeof(buf)), 0);
        sbx__proto_reader_free(&rd);
        close(fd);
    }
    /* The other connection and the agent carry on. */
    sbx_exec_result *r = agent_run(c, "echo alive", NULL);
    TAP_EQ_STR(stdout_of(r), "alive\n");
    sbx_exec_result_free(r);
    TAP_EQ_INT(kill(a.pid, 0), 0);
    teardown(c, &a);
}

static void test_user_switch(void)
{
    if (geteuid() != 0)
        TAP_SKIP("switching users needs root");
    setup();
    char root[PATH_MAX], path[PATH_MAX];
    const char *t = tap_tmpdir();
    snprintf(root, sizeof(root), "%s/root", t);
    snprintf(path, sizeof(path), "%s/root/etc", t);
    TAP_EQ_INT(sbx__mkdir_p(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/root/etc/passwd", t);
    TAP_EQ_INT(write_text(path, "root:x:0:0:root:/root:/bin/sh\n"
                                "# a comment\n"
                                "alice:x:4321:4322:Alice:/home/alice:/bin/sh\n"),
               0);
    snprintf(path, sizeof(path), "%s/root/etc/group", t);
    TAP_EQ_INT(write_text(path, "root:x:0:\nalicegrp:x:4322:\nstaff:x:5000:bob,alice\n"
                                "other:x:5001:bob\n"),
               0);
    struct agent a = start_listen(root, NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);

    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_user(o, "alice");
    sbx_exec_opts_set_cwd(o, "/");
    sbx_exec_result *r = agent_run(c, "id -u; id -g; id -G; echo $HOME $USER $LOGNAME", o);
    TAP_EQ_STR(stdout_of(r), "4321\n4322\n4322 5000\n/home/alice alice alice\n");
    sbx_exec_result_free(r);

    sbx_exec_opts_set_user(o, "4321:77");
    r = agent_run(c, "id -u; id -g", o);
    TAP_EQ_STR(stdout_of(r), "4321\n77\n");
    sbx_exec_result_free(r);

    sbx_exec_opts_set_user(o, "alice:staff");
    r = agent_run(c, "id -u; id -g", o);
    TAP_EQ_STR(stdout_of(r), "4321\n5000\n");
    sbx_exec_result_free(r);

    /* A numeric uid without an entry works (gid 0, as Docker). */
    sbx_exec_opts_set_user(o, "6000");
    r = agent_run(c, "id -u; id -g", o);
    TAP_EQ_STR(stdout_of(r), "6000\n0\n");
    sbx_exec_result_free(r);

    sbx_exec_opts_set_user(o, "mallory");
    r = agent_run(c, "id -u", o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    TAP_CONTAINS(stderr_of(r), "mallory");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    teardown(c, &a);
}

static void test_ping_and_close_with_pending(void)
{
    setup();
    struct agent a = start_stdio(NULL, NULL);
    sbx_agent_conn *c = connect_agent(&a);
    struct waiter *w = waiter_new();
    struct ping_call pc = {c, w};
    on_loop(do_ping, &pc);
    waiter_wait(w);
    TAP_EQ_INT(w->code, SBX_OK);
    waiter_free(w);
    /* Closing with an exec pending completes it (the agent kills it: its stream ended). */
    struct waiter *ew = exec_start_async(c, "sleep 1000", NULL, NULL, NULL);
    close_conn(c);
    sbx_exec_result *r = exec_wait(ew);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    sbx_exec_result_free(r);
    /* --stdio: the agent exits once its only stream closed. */
    int st = 0;
    while (waitpid(a.pid, &st, 0) < 0 && errno == EINTR)
        ;
    TAP_TRUE(WIFEXITED(st));
    TAP_EQ_INT(WEXITSTATUS(st), 0);
    sbx_provider_free(P);
}

static void test_connect_failures(void)
{
    setup();
    /* Nothing listens: retried until the timeout, then a clear error. */
    char sock[PATH_MAX];
    snprintf(sock, sizeof(sock), "%s/none.sock", tap_tmpdir());
    struct connect_call cc = {sock, -1, waiter_new()};
    on_loop(do_connect_short, &cc);
    waiter_wait(cc.w);
    TAP_EQ_INT(cc.w->code, SBX_ETIMEDOUT);
    TAP_NULL(cc.w->value);
    TAP_CONTAINS(sbx_error_message(cc.w->err), "none.sock");
    waiter_free(cc.w);

    /* A peer that is not an agent (it answers garbage). */
    int sv[2];
    TAP_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    TAP_EQ_INT(write(sv[1], "HTTP/1.1 400 Bad Request\r\n\r\n", 28), 28);
    struct connect_call cc2 = {NULL, sv[0], waiter_new()};
    on_loop(do_connect, &cc2);
    waiter_wait(cc2.w);
    TAP_EQ_INT(cc2.w->code, SBX_EPROTO);
    waiter_free(cc2.w);
    close(sv[1]);
    sbx_provider_free(P);
}

static void test_entrypoint_and_sigterm(void)
{
    setup();
    char flag[PATH_MAX], script[PATH_MAX + 64];
    snprintf(flag, sizeof(flag), "%s/service-ran", tap_tmpdir());
    snprintf(script, sizeof(script), "echo $$ > %s; exec sleep 1000", flag);
    char *const entry[] = {(char *)"sh", (char *)"-c", script, NULL};
    struct agent a = start_listen(NULL, NULL, entry);
    pid_t service = pid_written(flag);
    sbx_agent_conn *c = connect_agent(&a);
    sbx_exec_result *r = agent_run(c, "echo ok", NULL);
    TAP_EQ_STR(stdout_of(r), "ok\n");
    sbx_exec_result_free(r);
    close_conn(c);
    int st = stop_agent(&a);
    TAP_TRUE(WIFEXITED(st));
    TAP_EQ_INT(WEXITSTATUS(st), 0);
    /* The socket is gone and nothing of the service is left. */
    TAP_TRUE(access(a.sock, F_OK) != 0);
    wait_gone(service);
    sbx_provider_free(P);
}

TAP_MAIN(TAP(test_exec_basics), TAP(test_shell_choice), TAP(test_direct_exec_is_the_shells), TAP(test_binary_output), TAP(test_timeout_kills_group),
         TAP(test_cancel_kills_group), TAP_T(test_concurrent_execs, 120), TAP(test_concurrent_starts_with_failures), TAP(test_output_cap),
         TAP_T(test_upload_download, 120), TAP_T(test_upload_download_fallback_walk, 120),
         TAP(test_path_escapes), TAP(test_path_escapes_fallback_walk),
         TAP(test_agent_killed_mid_exec), TAP(test_malformed_frame_closes_only_that_stream),
         TAP(test_user_switch), TAP(test_ping_and_close_with_pending), TAP(test_connect_failures),
         TAP(test_entrypoint_and_sigterm))
