/*
 * The sbx CLI as a user runs it: build/sbx as a real subprocess, with stdin,
 * stdout and stderr kept apart and the exact exit status checked. The fake
 * provider (the test plugin build/tests/fakes/sbx-fake.so, on SBX_PLUGIN_PATH
 * for every command; it is not in sbx itself) covers exit codes, output,
 * usage errors, config and records; the
 * local provider covers boxes shared by separate processes, cp, ttl and
 * interruption; the linux provider (the default) the same, plus images,
 * boxes made by other processes, and gc of expired and orphaned boxes, with
 * a census after each test (nothing may be left on the host). Every test has its own SBX_STATE_DIR and TMPDIR (so local
 * workspaces land in the test's temp dir and can be checked for leaks).
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"
#include "lib/file.h"
#include "lib/proc.h"
#include "linux_census.h"

#include <sbx.h>

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

struct proc {
    int code;
    char *out, *err;
    size_t out_len, err_len;
};

/* A private state dir and TMPDIR for this test. */
static void setup(void)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/state", tap_tmpdir());
    setenv("SBX_STATE_DIR", p, 1);
    snprintf(p, sizeof(p), "%s/tmp", tap_tmpdir());
    mkdir(p, 0700);
    setenv("TMPDIR", p, 1);
    unsetenv("SBX_PROVIDER");
    /* build/tests/fakes/sbx-fake.so beside build/sbx: the test doubles, as a plugin. */
    const char *bin = sbx_bin();
    snprintf(p, sizeof(p), "%.*s/tests/fakes/sbx-fake.so", (int)(strrchr(bin, '/') - bin), bin);
    if (access(p, R_OK) != 0)
        TAP_FAIL("%s is not built (make tests builds it)", p);
    setenv("SBX_PLUGIN_PATH", p, 1);
}

static pid_t spawn(char *const *argv, int in_fd, int out_fd, int err_fd)
{
    pid_t pid = fork();
    if (pid < 0)
        TAP_FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(in_fd, 0);
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        /*
         * sbx keeps a signal that was ignored when it started (docs/cli.md);
         * start it as from a terminal, whatever this test inherited (a
         * background job of a script ignores SIGINT).
         */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        execv(sbx_bin(), argv);
        _exit(127);
    }
    return pid;
}

static void append(char **buf, size_t *len, const char *data, size_t n)
{
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = 0;
}

/*
 * Runs sbx with `args` (NULL-terminated), feeding `in` (NULL: /dev/null) on
 * stdin; collects stdout and stderr separately.
 */
static struct proc sbx_in(const char *in, size_t in_len, const char *const *args)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)"sbx";
    for (; args[n - 1] && n < 63; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    int pin[2], pout[2], perr[2];
    if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0)
        TAP_FAIL("pipe: %s", strerror(errno));
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t pid = spawn(argv, in ? pin[0] : devnull, pout[1], perr[1]);
    close(devnull);
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    if (!in) {
        close(pin[1]);
        pin[1] = -1;
    }
    struct proc p = { 0 };
    append(&p.out, &p.out_len, "", 0);
    append(&p.err, &p.err_len, "", 0);
    size_t written = 0;
    int open_fds = 2;
    while (open_fds > 0 || pin[1] >= 0) {
        struct pollfd fds[3] = {
            { .fd = pout[0], .events = POLLIN },
            { .fd = perr[0], .events = POLLIN },
            { .fd = pin[1], .events = POLLOUT },
        };
        if (poll(fds, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            TAP_FAIL("poll: %s", strerror(errno));
        }
        char buf[65536];
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r = read(fds[i].fd, buf, sizeof(buf));
            if (r > 0) {
                if (i == 0)
                    append(&p.out, &p.out_len, buf, (size_t)r);
                else
                    append(&p.err, &p.err_len, buf, (size_t)r);
            } else if (r == 0 || errno != EINTR) {
                close(fds[i].fd);
                if (i == 0)
                    pout[0] = -1;
                else
                    perr[0] = -1;
                open_fds--;
            }
        }
        if (pin[1] >= 0 && (fds[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = write(pin[1], in + written, in_len - written);
            if (w > 0)
                written += (size_t)w;
            if (w < 0 || written == in_len) {
                close(pin[1]);
                pin[1] = -1;
            }
        }
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    p.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return p;
}

#define SBX(...) sbx_in(NULL, 0, (const char *const[]){ __VA_ARGS__, NULL })
#define SBX_STDIN(data, len, ...) sbx_in(data, len, (const char *const[]){ __VA_ARGS__, NULL })

static void proc_free(struct proc *p)
{
    free(p->out);
    free(p->err);
}

/* Asserts the exit code and shows stderr when it differs. */
#define EXPECT_CODE(p, want)                                                                       \
    do {                                                                                           \
        if ((p).code != (want))                                                                    \
            TAP_FAIL("exit %d, expected %d; stdout: %s; stderr: %s", (p).code, (want), (p).out,   \
                     (p).err);                                                                     \
    } while (0)

static json_t *parse_json(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_ALLOW_NUL, &je);
    if (!v)
        TAP_FAIL("not JSON (%s): %s", je.text, text);
    return v;
}

static char *path_in_tmp(const char *name)
{
    static char buf[4][PATH_MAX];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "%s/%s", tap_tmpdir(), name);
    return buf[i];
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Box records: <id>.json (not create --name's .names.lock). */
static int records(void)
{
    return count_entries(path_in_tmp("state/boxes")) -
           (access(path_in_tmp("state/boxes/.names.lock"), F_OK) == 0);
}
/* Local workspaces live under TMPDIR; sbx cp's temp files too, briefly. */
static int workspaces(void) { return count_entries(path_in_tmp("tmp")); }

/* Creates a box and returns its id (static storage). */
static const char *create_box(const char *const *args)
{
    static char id[256];
    struct proc p = sbx_in(NULL, 0, args);
    EXPECT_CODE(p, 0);
    size_t n = strcspn(p.out, "\n");
    TAP_TRUE(n > 0 && n < sizeof(id) && p.out[n] == '\n' && p.out[n + 1] == 0);
    memcpy(id, p.out, n);
    id[n] = 0;
    proc_free(&p);
    return id;
}

/* The id printed by `sbx create` (copied to `id`). */
static void create_into(char *id, size_t n, const char *const *args)
{
    snprintf(id, n, "%s", create_box(args));
}

/* Runs sbx and asserts its exit code only; a failure names the caller's line. */
static void expect_exit_at(const char *file, int line, int want, const char *const *args)
{
    struct proc p = sbx_in(NULL, 0, args);
    if (p.code != want)
        tap_fail_at(file, line, "sbx %s %s: exit %d, expected %d; stdout: %s; stderr: %s",
                    args[0] ? args[0] : "", args[0] && args[1] ? args[1] : "", p.code, want,
                    p.out, p.err);
    proc_free(&p);
}

#define SBX_EXPECT(want, ...)                                                                      \
    expect_exit_at(__FILE__, __LINE__, want, (const char *const[]){ __VA_ARGS__, NULL })

/* Runs sbx and asserts its exit code and that its stderr holds `needle`. */
static void expect_err_at(const char *file, int line, int want, const char *needle,
                          const char *const *args)
{
    struct proc p = sbx_in(NULL, 0, args);
    if (p.code != want || !strstr(p.err, needle))
        tap_fail_at(file, line, "sbx %s: exit %d (expected %d), stderr without '%s': %s",
                    args[0] ? args[0] : "", p.code, want, needle, p.err);
    proc_free(&p);
}

#define SBX_EXPECT_ERR(want, needle, ...)                                                          \
    expect_err_at(__FILE__, __LINE__, want, needle, (const char *const[]){ __VA_ARGS__, NULL })

/* "ID:PATH", the box side of sbx cp (rotating static storage, as path_in_tmp). */
static char *box_path(const char *id, const char *path)
{
    static char buf[4][PATH_MAX];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof(buf[i]), "%s:%s", id, path);
    return buf[i];
}

/* Polls `sbx gc --dry-run` until it reports an expired TTL (bounded by the test's alarm). */
static void wait_for_ttl_expiry(void)
{
    struct timespec ts = { 0, 100 * 1000 * 1000 };
    for (;;) {
        struct proc p = SBX("gc", "--dry-run");
        bool due = strstr(p.out, "ttl expired") != NULL;
        proc_free(&p);
        if (due)
            return;
        nanosleep(&ts, NULL);
    }
}

/* Starts sbx with `argv` (stdin and stdout /dev/null); its stderr is read from `*err_fd`. */
static pid_t spawn_watched(char *const *argv, int *err_fd)
{
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    int perr[2];
    TAP_TRUE(pipe2(perr, O_CLOEXEC) == 0);
    pid_t pid = spawn(argv, devnull, devnull, perr[1]);
    close(perr[1]);
    close(devnull);
    *err_fd = perr[0];
    return pid;
}

/* Sends `sig` to an sbx of spawn_watched and asserts it exits 128+sig saying so. */
static void interrupt_and_check(pid_t pid, int err_fd, int sig)
{
    kill(pid, sig);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    char err[1024] = "";
    ssize_t n = read(err_fd, err, sizeof(err) - 1);
    err[n > 0 ? n : 0] = 0;
    close(err_fd);
    TAP_TRUE(WIFEXITED(st));
    TAP_EQ_INT(WEXITSTATUS(st), 128 + sig);
    char want[64];
    snprintf(want, sizeof(want), "interrupted by SIG%s", sigabbrev_np(sig));
    TAP_CONTAINS(err, want);
}

/* --- fake provider ------------------------------------------------------- */

static void test_run_exit_codes(void)
{
    setup();
    int codes[] = { 0, 1, 3, 42, 255 };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        char n[8];
        snprintf(n, sizeof(n), "%d", codes[i]);
        struct proc p = SBX("run", "--provider", "fake", "--", "exit", n);
        EXPECT_CODE(p, codes[i]);
        TAP_EQ_STR(p.out, "");
        TAP_EQ_STR(p.err, "");
        proc_free(&p);
    }
    TAP_EQ_INT(records(), 0);
}

static void test_run_streams_separate(void)
{
    setup();
    /* The fake's `cat` of a missing file: stderr only, status 1. */
    struct proc p = SBX("run", "--provider", "fake", "--", "cat", "/nope");
    EXPECT_CODE(p, 1);
    TAP_EQ_STR(p.out, "");
    TAP_EQ_STR(p.err, "cat: no such file\n");
    proc_free(&p);
}

static void test_run_binary_output(void)
{
    setup();
    char data[256];
    for (int i = 0; i < 256; i++)
        data[i] = (char)i;
    const char *local = path_in_tmp("bin.dat");
    FILE *f = fopen(local, "wb");
    TAP_TRUE(f && fwrite(data, 1, sizeof(data), f) == sizeof(data));
    fclose(f);
    char file_arg[PATH_MAX + 16];
    snprintf(file_arg, sizeof(file_arg), "/bin.dat=%s", local);
    /* --file puts the bytes in the box at start; the fake's cat prints them back. */
    struct proc p = SBX("run", "--provider", "fake", "--file", file_arg, "--", "cat", "/bin.dat");
    EXPECT_CODE(p, 0);
    TAP_EQ_INT(p.out_len, sizeof(data));
    TAP_TRUE(memcmp(p.out, data, sizeof(data)) == 0);
    TAP_EQ_STR(p.err, "");
    proc_free(&p);
}

static void test_run_quoting_and_stdin(void)
{
    setup();
    static const char in[] = "line1\nzero\0byte";
    struct proc p = SBX_STDIN(in, sizeof(in) - 1, "run", "--provider", "fake", "--timeout", "7",
                              "--user", "1000", "--", "echo", "a b", "it's", "$HOME");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_STR(json_string_value(json_object_get(v, "command")),
               "echo 'a b' 'it'\"'\"'s' '$HOME'");
    json_t *s = json_object_get(v, "stdin");
    TAP_EQ_INT(json_string_length(s), sizeof(in) - 1);
    TAP_TRUE(memcmp(json_string_value(s), in, sizeof(in) - 1) == 0);
    TAP_EQ_INT((long long)json_number_value(json_object_get(v, "timeout")), 7);
    TAP_EQ_STR(json_string_value(json_object_get(v, "user")), "1000");
    json_decref(v);
    proc_free(&p);

    p = SBX_STDIN("x", 1, "run", "--provider", "fake", "--no-stdin", "--", "show");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_TRUE(json_is_null(json_object_get(v, "stdin")));
    json_decref(v);
    proc_free(&p);
}

static void test_run_timeout(void)
{
    setup();
    struct proc p = SBX("run", "--provider", "fake", "--timeout", "0.2", "--", "sleep", "30");
    EXPECT_CODE(p, 124);
    TAP_EQ_STR(p.out, "");
    TAP_EQ_STR(p.err, "sbx: command timed out after 0.2s\n");
    proc_free(&p);

    p = SBX("run", "--provider", "fake", "--json", "--timeout", "0.2", "--", "sleep", "30");
    EXPECT_CODE(p, 124);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_integer_value(json_object_get(v, "return_code")), 125);
    TAP_EQ_STR(json_string_value(json_object_get(v, "error_type")), "timeout");
    TAP_EQ_INT(json_integer_value(json_object_get(v, "exit_code")), 124);
    TAP_TRUE(json_is_null(json_object_get(v, "stdout")));
    json_decref(v);
    proc_free(&p);
}

static void test_run_json_shape(void)
{
    setup();
    struct proc p = SBX("run", "--provider", "fake", "--json", "--", "exit", "4");
    EXPECT_CODE(p, 4);
    json_t *v = parse_json(p.out);
    TAP_TRUE(json_is_string(json_object_get(v, "id")));
    TAP_EQ_INT(json_integer_value(json_object_get(v, "return_code")), 4);
    TAP_EQ_STR(json_string_value(json_object_get(v, "stdout")), "");
    TAP_EQ_STR(json_string_value(json_object_get(v, "stderr")), "");
    TAP_TRUE(json_is_null(json_object_get(v, "error_type")));
    TAP_TRUE(json_is_false(json_object_get(v, "truncated")));
    json_decref(v);
    proc_free(&p);
}

static void test_usage_errors(void)
{
    setup();
    struct {
        const char *args[10];
        const char *msg;
        const char *usage;
    } cases[] = {
        { { "run", "--provider", "fake" }, "sbx: no command given (with --image IMAGE and no CMD, the image's Entrypoint and Cmd run)\n", "usage: sbx run " },
        { { "run", "--bogus", "--", "true" }, "unknown option '--bogus'", "usage: sbx run " },
        { { "run", "--timeout" }, "option '--timeout' needs a value", "usage: sbx run " },
        { { "run", "--memory", "lots", "--", "true" }, "--memory expects", "usage: sbx run " },
        { { "run", "-e", "NO-EQUALS", "--", "true" }, "expects KEY=VALUE", "usage: sbx run " },
        { { "run", "--timeout", "-1", "--", "true" }, "--timeout expects", "usage: sbx run " },
        { { "run", "--port", "70000", "--provider", "fake", "--", "true" }, "port", NULL },
        { { "exec" }, "sbx: no box ID given\n", "usage: sbx exec " },
        { { "exec", "abc" }, "sbx: no command given\n", "usage: sbx exec " },
        { { "cp", "a", "b" }, "exactly one of SRC and DST", "usage: sbx cp " },
        { { "cp", "x:a", "y:b" }, "exactly one of SRC and DST", "usage: sbx cp " },
        { { "status" }, "no box ID given", "usage: sbx status " },
        { { "stop" }, "no box ID given", "usage: sbx stop " },
        { { "create", "extra" }, "unexpected argument 'extra'", "usage: sbx create " },
        { { "frobnicate" }, "unknown command 'frobnicate'", "usage: sbx COMMAND" },
        { { "--frob" }, "unknown option '--frob'", "usage: sbx COMMAND" },
        { { "run", "--block", "b", "--", "true" }, "--block needs --config", "usage: sbx run " },
        { { "run", "--provider", "fake", "--config", "f", "--", "true" }, "cannot be used together",
          "usage: sbx run " },
        /* Docker's `run IMAGE CMD`: a first word that is no program but an image reference. */
        { { "run", "--provider", "fake", "ubuntu:22.04", "bash" },
          "'ubuntu:22.04' is no command here but names an image; did you mean sbx run --image "
          "ubuntu:22.04 -- CMD...?",
          "usage: sbx run " },
        { { "run", "--provider", "fake", "--", "ghcr.io/org/app" }, "--image ghcr.io/org/app",
          "usage: sbx run " },
        { { "run", "--provider", "fake", "app@sha256:0123" }, "--image app@sha256:0123",
          "usage: sbx run " },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct proc p = sbx_in(NULL, 0, cases[i].args);
        if (p.code != 2)
            TAP_FAIL("case %zu (%s %s): exit %d: %s", i, cases[i].args[0],
                     cases[i].args[1] ? cases[i].args[1] : "", p.code, p.err);
        TAP_EQ_STR(p.out, "");
        TAP_CONTAINS(p.err, cases[i].msg);
        TAP_TRUE(!strncmp(p.err, "sbx: ", 5));
        if (cases[i].usage)
            TAP_CONTAINS(p.err, cases[i].usage);
        proc_free(&p);
    }
    struct proc p = sbx_in(NULL, 0, (const char *const[]){ NULL });
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "usage: sbx");
    proc_free(&p);
}

static void test_unknown_provider(void)
{
    setup();
    struct proc p = SBX("run", "--provider", "nope", "--", "true");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "sbx: Unknown sandbox provider 'nope'");
    TAP_CONTAINS(p.err, "docker, fake, fake_basic, fake_boxes, linux, local");
    proc_free(&p);
    /* The same through SBX_PROVIDER, the default's override. */
    setenv("SBX_PROVIDER", "nope2", 1);
    p = SBX("run", "--", "true");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "'nope2'");
    proc_free(&p);
    setenv("SBX_PROVIDER", "fake", 1);
    SBX_EXPECT(6, "run", "--", "exit", "6");
}

static void test_provider_failure_is_125(void)
{
    setup();
    struct proc p =
        SBX("run", "--provider", "{fake: {fail: {create: 'no capacity'}}}", "--", "true");
    EXPECT_CODE(p, 125);
    TAP_EQ_STR(p.err, "sbx: no capacity\n");
    proc_free(&p);
    p = SBX("run", "--provider", "{fake: {fail: {exec: 'exec broke'}}}", "--", "true");
    EXPECT_CODE(p, 125);
    TAP_EQ_STR(p.err, "sbx: exec broke\n");
    proc_free(&p);
    /* A provider config the provider rejects is a configuration error. */
    p = SBX("run", "--provider", "{fake: {init_error: 'bad key'}}", "--", "true");
    EXPECT_CODE(p, 2);
    TAP_EQ_STR(p.err, "sbx: bad key\n");
    proc_free(&p);
    TAP_EQ_INT(records(), 0);
}

static void test_providers(void)
{
    setup();
    /*
     * sbx itself has no test doubles: without the test plugin, only the real
     * providers (apptainer: a plugin of the build tree's provider directory).
     */
    char *plugin = strdup(getenv("SBX_PLUGIN_PATH"));
    unsetenv("SBX_PLUGIN_PATH");
    struct proc p = SBX("providers", "-q");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "apptainer\ndocker\nlinux\nlocal\nopensandbox\n");
    proc_free(&p);
    /* The plugins sbx ships are in the build tree's provider directory, beside the CLI. */
    p = SBX("providers");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "NAME         SOURCE\napptainer    plugin /");
    TAP_CONTAINS(p.out, "/lib/sbx/providers/apptainer.so\ndocker       built-in\n"
                        "linux        built-in\nlocal        built-in\nopensandbox  plugin /");
    TAP_CONTAINS(p.out, "/lib/sbx/providers/opensandbox.so\n");
    proc_free(&p);
    p = SBX("run", "--provider", "fake", "--", "exit", "0");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err,
                 "Unknown sandbox provider 'fake'. Available providers: apptainer, docker, linux, "
                 "local, opensandbox");
    proc_free(&p);
    /* The plugin's providers join them. */
    setenv("SBX_PLUGIN_PATH", plugin, 1);
    free(plugin);
    p = SBX("providers", "-q");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "apptainer\ndocker\nfake\nfake_basic\nfake_boxes\nlinux\nlocal\nopensandbox\n");
    proc_free(&p);
    p = SBX("providers", "--json");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 8);
    const char *names[] = { "apptainer", "docker", "fake", "fake_basic", "fake_boxes", "linux",
                            "local", "opensandbox" };
    for (size_t i = 0; i < 8; i++) {
        json_t *o = json_array_get(v, i);
        TAP_EQ_STR(json_string_value(json_object_get(o, "name")), names[i]);
        /*
         * The fakes come from the plugin file on SBX_PLUGIN_PATH, apptainer and
         * opensandbox from the provider directory, the rest are built in.
         */
        bool from_file = i == 0 || (i >= 2 && i <= 4) || i == 7;
        TAP_EQ_STR(json_string_value(json_object_get(o, "source")), from_file ? "plugin" : "built-in");
        TAP_TRUE(from_file == (json_string_value(json_object_get(o, "path")) != NULL));
    }
    json_decref(v);
    proc_free(&p);
}

static void test_version_and_help(void)
{
    setup();
    struct proc p = SBX("--version");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "sbx " SBX_VERSION_STRING "\n");
    proc_free(&p);
    const char *cmds[] = { "run",  "create", "exec", "cp",        "ls",
                           "status", "stop", "gc",   "providers", "image", "logs" };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        p = SBX(cmds[i], "--help");
        EXPECT_CODE(p, 0);
        char want[64];
        snprintf(want, sizeof(want), "usage: sbx %s", cmds[i]);
        TAP_CONTAINS(p.out, want);
        TAP_EQ_STR(p.err, "");
        proc_free(&p);
    }
    p = SBX("--help");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "providers");
    proc_free(&p);
}

static void test_config_file_blocks(void)
{
    setup();
    const char *one = path_in_tmp("one.yaml");
    TAP_EQ_INT(write_text(one, "sandbox_main:\n  fake:\n    marker: 42\n"), 0);
    struct proc p = SBX("run", "--config", one, "--", "marker");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "42");
    proc_free(&p);

    const char *two = path_in_tmp("two.yaml");
    TAP_EQ_INT(write_text(two, "a:\n  fake: {marker: 1}\nb:\n  fake:\n    marker: 2\n"
                               "  default_metadata: {team: t}\n"),
               0);
    p = SBX("run", "--config", two, "--", "marker");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "--block NAME (blocks: a, b)");
    proc_free(&p);
    p = SBX("run", "--config", two, "--block", "b", "--", "marker");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "2");
    proc_free(&p);
    p = SBX("run", "--config", two, "--block", "zzz", "--", "marker");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "'zzz' is not defined");
    proc_free(&p);

    /* A file that is one provider mapping is used as it is. */
    const char *bare = path_in_tmp("bare.json");
    TAP_EQ_INT(write_text(bare, "{\"fake\": {\"marker\": \"m\"}}"), 0);
    p = SBX("run", "--config", bare, "--", "marker");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "\"m\"");
    proc_free(&p);

    p = SBX("run", "--config", path_in_tmp("missing.yaml"), "--", "marker");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "missing.yaml");
    proc_free(&p);
}

static void test_spec_file(void)
{
    setup();
    const char *spec = path_in_tmp("spec.yaml");
    TAP_EQ_INT(write_text(spec, "image: python:3.12\nfiles:\n  /hello.txt: \"hi there\"\n"), 0);
    struct proc p = SBX("run", "--provider", "fake", "--spec", spec, "--", "cat", "/hello.txt");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "hi there");
    proc_free(&p);
    TAP_EQ_INT(write_text(spec, "imag: typo\n"), 0);
    p = SBX("run", "--provider", "fake", "--spec", spec, "--", "true");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "sbx: --spec ");
    proc_free(&p);
}

static void test_no_such_box(void)
{
    setup();
    const char *cmds[][4] = { { "exec", "nope", "true" }, { "status", "nope", NULL },
                              { "stop", "nope", NULL }, { "cp", "nope:/a", "/tmp/x" } };
    for (size_t i = 0; i < 4; i++) {
        struct proc p = sbx_in(NULL, 0, cmds[i]);
        EXPECT_CODE(p, 3);
        TAP_CONTAINS(p.err, "sbx: no such box: 'nope'");
        proc_free(&p);
    }
}

static void test_create_exec_ls_stop_fake(void)
{
    setup();
    const char *id = create_box((const char *const[]){ "create", "--provider", "fake", "--label",
                                                       "team=a", "--label", "run=7", NULL });
    TAP_EQ_INT(records(), 1);
    SBX_EXPECT(9, "exec", id, "--", "exit", "9");
    /* Options after the ID, and a unique prefix of it. */
    char prefix[16];
    snprintf(prefix, sizeof(prefix), "%.8s", id);
    struct proc p = SBX("exec", prefix, "--cwd", "/w", "-e", "K=V", "--", "show");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_STR(json_string_value(json_object_get(v, "cwd")), "/w");
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(v, "env"), "K")), "V");
    json_decref(v);
    proc_free(&p);

    p = SBX("ls", "--json", "--label", "team=a");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 1);
    json_t *r = json_array_get(v, 0);
    TAP_EQ_STR(json_string_value(json_object_get(r, "id")), id);
    TAP_EQ_STR(json_string_value(json_object_get(r, "provider")), "fake");
    TAP_EQ_STR(json_string_value(json_object_get(r, "status")), "running");
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(r, "labels"), "run")), "7");
    json_decref(v);
    proc_free(&p);
    p = SBX("ls", "--json", "--label", "team=b");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "[]\n");
    proc_free(&p);

    p = SBX("status", id);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "running\n");
    proc_free(&p);

    p = SBX("stop", id);
    EXPECT_CODE(p, 0);
    TAP_TRUE(!strncmp(p.out, id, strlen(id)) && !strcmp(p.out + strlen(id), "\n"));
    proc_free(&p);
    TAP_EQ_INT(records(), 0);
    p = SBX("ls", "-q");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "");
    proc_free(&p);
}

/* [term] ls's table: a label's controls are shown, the row stays one line. */
static void test_ls_table_escapes_labels(void)
{
    setup();
    const char *id = create_box((const char *const[]){ "create", "--provider", "fake", "--label",
                                                       "note=x\033]0;t\007\ny", NULL });
    struct proc p = SBX("ls");
    EXPECT_CODE(p, 0);
    TAP_NULL(memchr(p.out, 0x1b, p.out_len));
    TAP_CONTAINS(p.out, "note=x^[]0;t^G^Jy\n");
    proc_free(&p);
    SBX_EXPECT(0, "stop", id);
    /* IMAGE: as created; a long reference keeps its end (the tag), marked cut. */
    id = create_box((const char *const[]){ "create", "--provider", "fake", "--image",
                                           "registry.example.com/org/app:1.2.3", NULL });
    p = SBX("ls");
    EXPECT_CODE(p, 0);
    TAP_TRUE(!strncmp(p.out, "ID    ", 6));
    TAP_CONTAINS(p.out, " PROVIDER   IMAGE                STATUS ");
    TAP_CONTAINS(p.out, " ~e.com/org/app:1.2.3 running ");
    proc_free(&p);
    SBX_EXPECT(0, "stop", id);
}

static void test_gc_fake(void)
{
    setup();
    /* One box that reports stopped, one its provider cannot reach, one alive. */
    char stopped[256], unreachable[256], alive[256];
    create_into(stopped, sizeof(stopped),
                (const char *const[]){ "create", "--provider", "{fake: {status: stopped}}", NULL });
    create_into(unreachable, sizeof(unreachable),
                (const char *const[]){ "create", "--provider",
                                       "{fake: {fail: {connect: 'gone'}}}", NULL });
    create_into(alive, sizeof(alive), (const char *const[]){ "create", "--provider", "fake", NULL });
    TAP_EQ_INT(records(), 3);

    struct proc p = SBX("status", unreachable);
    EXPECT_CODE(p, 125);
    TAP_EQ_STR(p.out, "unreachable\n");
    TAP_CONTAINS(p.err, "gone");
    proc_free(&p);

    p = SBX("gc", "--dry-run", "--json");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 2);
    json_decref(v);
    proc_free(&p);
    TAP_EQ_INT(records(), 3);

    p = SBX("gc");
    EXPECT_CODE(p, 0);
    TAP_TRUE(!strncmp(p.out, "BOX\tREASON\n", 11));
    TAP_CONTAINS(p.out, stopped);
    TAP_CONTAINS(p.out, unreachable);
    TAP_TRUE(!strstr(p.out, alive));
    proc_free(&p);
    TAP_EQ_INT(records(), 1);
    p = SBX("ls", "-q");
    TAP_TRUE(!strncmp(p.out, alive, strlen(alive)) && !strcmp(p.out + strlen(alive), "\n"));
    proc_free(&p);
}

/* --- local provider ------------------------------------------------------ */

static void test_local_run_exact_output(void)
{
    setup();
    struct proc p = SBX("run", "--provider", "local", "--", "sh", "-c", "printf 'out\\000\\377'; printf err >&2; exit 5");
    EXPECT_CODE(p, 5);
    TAP_EQ_INT(p.out_len, 5);
    TAP_TRUE(memcmp(p.out, "out\0\377", 5) == 0);
    TAP_EQ_STR(p.err, "err");
    proc_free(&p);
    p = SBX_STDIN("piped\n", 6, "run", "--provider", "local", "--", "tr", "a-z", "A-Z");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "PIPED\n");
    proc_free(&p);
    /* The shell's own codes for the command reach the caller unchanged. */
    SBX_EXPECT(127, "run", "--provider", "local", "--", "no-such-command-xyz");
    SBX_EXPECT(128 + SIGTERM, "run", "--provider", "local", "--", "sh", "-c", "kill -TERM $$");
    TAP_EQ_INT(workspaces(), 0);
    TAP_EQ_INT(records(), 0);
}

/*
 * [term] Runs sbx with stdout and stderr on a real terminal (a PTY this
 * test makes, in raw mode so the bytes are not translated), or stdout into
 * the file `out_file` and stderr on the terminal; collects what the
 * terminal received.
 */
static struct proc sbx_on_pty(const char *out_file, const char *const *args)
{
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)"sbx";
    for (; args[n - 1] && n < 63; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
        TAP_FAIL("posix_openpt: %s", strerror(errno));
    int sl = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
    struct termios tio;
    if (sl < 0 || tcgetattr(sl, &tio) < 0)
        TAP_FAIL("the PTY's other end: %s", strerror(errno));
    cfmakeraw(&tio);
    tcsetattr(sl, TCSANOW, &tio);
    int out = out_file ? open(out_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : sl;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (out < 0 || devnull < 0)
        TAP_FAIL("open: %s", strerror(errno));
    pid_t pid = spawn(argv, devnull, out, sl);
    close(sl);
    close(devnull);
    if (out_file)
        close(out);
    struct proc p = { 0 };
    append(&p.out, &p.out_len, "", 0);
    append(&p.err, &p.err_len, "", 0);
    for (;;) {
        char buf[65536];
        ssize_t r = read(m, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break; /* EIO: every holder of the terminal's other end closed it */
        append(&p.out, &p.out_len, buf, (size_t)r);
    }
    close(m);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    p.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return p;
}
#define SBX_PTY(out_file, ...) sbx_on_pty(out_file, (const char *const[]){ __VA_ARGS__, NULL })

/* How many lines of `text` start with `prefix`. */
static int lines_starting(const char *text, const char *prefix)
{
    int k = 0;
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
        if (!strncmp(l, prefix, strlen(prefix)))
            k++;
    return k;
}

/*
 * [term] A command's control sequences reach a terminal shown, not
 * obeyed (ESC, OSC, BEL, a lone CR, a C1 control in UTF-8); --raw and a
 * file get the exact bytes; UTF-8 text and CRLF pass.
 */
static void test_local_exec_output_on_a_terminal(void)
{
    setup();
    const char *cmd = "printf '\033]0;pwned\007red\033[31m\r\nA\rB \303\251t\303\251 "
                      "\302\233x\n'; printf '\033[2J' >&2";
    struct proc p = SBX_PTY(NULL, "run", "--provider", "local", "--", "sh", "-c", cmd);
    EXPECT_CODE(p, 0);
    TAP_NULL(memchr(p.out, 0x1b, p.out_len));
    TAP_CONTAINS(p.out, "^[]0;pwned^Gred^[[31m\r\nA^MB \303\251t\303\251 \\xc2\\x9bx\n");
    TAP_CONTAINS(p.out, "^[[2J");
    proc_free(&p);
    p = SBX_PTY(NULL, "run", "--raw", "--provider", "local", "--", "sh", "-c", cmd);
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "\033]0;pwned\007red\033[31m\r\nA\rB \303\251t\303\251 \302\233x\n");
    TAP_CONTAINS(p.out, "\033[2J");
    proc_free(&p);
    /* stdout into a file: the exact bytes there; stderr, still the terminal, shown. */
    const char *file = path_in_tmp("exec-out");
    p = SBX_PTY(file, "run", "--provider", "local", "--", "sh", "-c", cmd);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "^[[2J");
    proc_free(&p);
    char *got = read_text(file);
    size_t len = got ? strlen(got) : 0;
    const char want[] = "\033]0;pwned\007red\033[31m\r\nA\rB \303\251t\303\251 \302\233x\n";
    TAP_EQ_INT(len, sizeof(want) - 1);
    TAP_TRUE(got && memcmp(got, want, sizeof(want) - 1) == 0);
    free(got);
    TAP_EQ_INT(workspaces(), 0);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    TAP_EQ_INT(write_text(path, text), 0);
    TAP_EQ_INT(chmod(path, mode), 0);
}

/*
 * A file into box `id` and read there, and the box's note.txt (which holds
 * "hi\n") back out.
 */
static void check_file_in_out(const char *id)
{
    const char *f = path_in_tmp("in.txt");
    write_file(f, "payload\n", 0640);
    SBX_EXPECT(0, "cp", f, box_path(id, "copied.txt"));
    struct proc p = SBX("exec", id, "--", "cat", "copied.txt");
    TAP_EQ_STR(p.out, "payload\n");
    proc_free(&p);
    SBX_EXPECT(0, "cp", box_path(id, "note.txt"), path_in_tmp("back.txt"));
    char *back = read_text(path_in_tmp("back.txt"));
    TAP_EQ_STR(back, "hi\n");
    free(back);
}

static void test_local_create_exec_cp_stop(void)
{
    setup();
    char id[256];
    create_into(id, sizeof(id),
                (const char *const[]){ "create", "--provider", "local", "--label", "job=cli",
                                       "--ttl", "600", "-e", "GREETING=hi", NULL });
    TAP_EQ_INT(workspaces(), 1);

    /* State written by one process is seen by the next: the same box. */
    SBX_EXPECT(0, "exec", id, "--", "sh", "-c", "echo $GREETING > note.txt");
    struct proc p = SBX("exec", id, "--", "cat", "note.txt");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "hi\n");
    proc_free(&p);

    check_file_in_out(id);

    /* A directory in, with modes, and back out. */
    const char *tree = path_in_tmp("tree");
    TAP_EQ_INT(mkdir(tree, 0755), 0);
    char sub[PATH_MAX], file[PATH_MAX];
    snprintf(sub, sizeof(sub), "%s/sub", tree);
    TAP_EQ_INT(mkdir(sub, 0700), 0);
    snprintf(file, sizeof(file), "%s/run.sh", tree);
    write_file(file, "#!/bin/sh\necho ran\n", 0755);
    snprintf(file, sizeof(file), "%s/sub/data", tree);
    write_file(file, "data\n", 0600);
    const char *dst = box_path(id, "d/tree");
    SBX_EXPECT(0, "cp", tree, dst);
    p = SBX("exec", id, "--", "sh", "-c", "./d/tree/run.sh && cat d/tree/sub/data && stat -c %a d/tree/sub");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "ran\ndata\n700\n");
    proc_free(&p);
    SBX_EXPECT(0, "cp", dst, path_in_tmp("out"));
    snprintf(file, sizeof(file), "%s/out/sub/data", tap_tmpdir());
    char *data = read_text(file);
    TAP_EQ_STR(data, "data\n");
    free(data);
    TAP_EQ_INT(mode_of(file), 0600);
    snprintf(file, sizeof(file), "%s/out/run.sh", tap_tmpdir());
    TAP_EQ_INT(mode_of(file), 0755);
    snprintf(file, sizeof(file), "%s/out/sub", tap_tmpdir());
    TAP_EQ_INT(mode_of(file), 0700);
    /* A missing source in the box is an error that names it. */
    p = SBX("cp", box_path(id, "no/such"), path_in_tmp("x"));
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "no/such");
    proc_free(&p);

    p = SBX("ls", "--json");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 1);
    json_t *r = json_array_get(v, 0);
    TAP_EQ_STR(json_string_value(json_object_get(r, "status")), "running");
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(r, "labels"), "job")), "cli");
    TAP_EQ_INT((long long)json_number_value(json_object_get(r, "ttl_s")), 600);
    json_decref(v);
    proc_free(&p);

    /* Only the workspace remains in TMPDIR: cp cleaned its temp archives. */
    TAP_EQ_INT(workspaces(), 1);
    SBX_EXPECT(0, "stop", id);
    TAP_EQ_INT(records(), 0);
    TAP_EQ_INT(workspaces(), 0);
}

static void test_local_gc_after_ttl(void)
{
    setup();
    char id[256];
    create_into(id, sizeof(id),
                (const char *const[]){ "create", "--provider", "local", "--ttl", "0.5", NULL });
    TAP_EQ_INT(workspaces(), 1);
    wait_for_ttl_expiry();
    TAP_EQ_INT(records(), 1);
    struct proc p = SBX("gc", "--json");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 1);
    TAP_EQ_STR(json_string_value(json_object_get(json_array_get(v, 0), "id")), id);
    TAP_EQ_STR(json_string_value(json_object_get(json_array_get(v, 0), "reason")), "ttl expired");
    TAP_TRUE(json_is_true(json_object_get(json_array_get(v, 0), "removed")));
    json_decref(v);
    proc_free(&p);
    TAP_EQ_INT(records(), 0);
    TAP_EQ_INT(workspaces(), 0);
}

/* The pid in `path` once a command has written it (bounded by the test's alarm). */
static long wait_for_pid(const char *path)
{
    struct timespec ts = { 0, 20 * 1000 * 1000 };
    for (;;) {
        char *t = read_text(path);
        long pid = t ? strtol(t, NULL, 10) : 0;
        bool done = t && strchr(t, '\n');
        free(t);
        if (done && pid > 0)
            return pid;
        nanosleep(&ts, NULL);
    }
}

static void interrupt_run(int sig)
{
    setup();
    const char *pidfile = path_in_tmp("pid");
    char script[PATH_MAX + 64];
    snprintf(script, sizeof(script), "echo $$ > %s.tmp && mv %s.tmp %s; exec sleep 60", pidfile,
             pidfile, pidfile);
    char *argv[] = { (char *)"sbx",    (char *)"run", (char *)"--provider", (char *)"local",
                     (char *)"--",     (char *)"sh",  (char *)"-c",         script,
                     NULL };
    int err_fd;
    pid_t pid = spawn_watched(argv, &err_fd);
    long box_pid = wait_for_pid(pidfile);
    TAP_TRUE(proc_runs(box_pid));
    TAP_EQ_INT(workspaces(), 1);
    interrupt_and_check(pid, err_fd, sig);
    TAP_TRUE(!proc_runs(box_pid));
    /* The command is dead, the workspace removed, nothing recorded. */
    TAP_EQ_INT(workspaces(), 0);
    TAP_EQ_INT(records(), 0);
}

static void test_local_sigint_run_leaves_nothing(void) { interrupt_run(SIGINT); }
static void test_local_sigterm_run_leaves_nothing(void) { interrupt_run(SIGTERM); }

/* --- linux provider (the default) ----------------------------------------- */

/* The linux provider's state directory under the test's SBX_STATE_DIR. */
static const char *linux_state(void) { return path_in_tmp("state/linux"); }

/* Skips unless this machine can run linux boxes (as test_linux does). */
static void need_linux(void)
{
    if (geteuid() != 0)
        TAP_SKIP("linux boxes need root");
    setup();
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/sbx-shim", build_dir());
    if (access(path, X_OK) != 0)
        TAP_SKIP("sbx-shim is not built (make)");
    /*
     * A sanitizer build links its sbx-agent dynamically, which cannot run in
     * a busybox image: use the static one of the plain build when there is one.
     */
    char *agent = getenv("SBX_AGENT") ? NULL : realpath("build/sbx-agent", NULL);
    if (agent)
        setenv("SBX_AGENT", agent, 1);
    free(agent);
}

/* The busybox rootfs tarball of scripts/make-test-rootfs.sh (static storage). */
static const char *busybox_tar(void)
{
    if (access("/bin/busybox", X_OK) != 0)
        TAP_SKIP("busybox-static is not installed");
    const char *tar = path_in_tmp("bb.tar");
    char out[4096];
    if (run_cmd(out, sizeof(out), "scripts/make-test-rootfs.sh %s", tar) != 0)
        TAP_FAIL("scripts/make-test-rootfs.sh: %s", out);
    return tar;
}

/* The one element of a `ls --json` array whose id is `id` (borrowed), or NULL. */
static json_t *ls_entry(json_t *arr, const char *id)
{
    size_t i;
    json_t *r;
    json_array_foreach(arr, i, r)
    {
        if (!strcmp(json_string_value(json_object_get(r, "id")), id))
            return r;
    }
    return NULL;
}

/*
 * A box of `spec` made by this process through the library on a provider of
 * `cfg`, then detached: it outlives the handle and the provider, for the CLI
 * (its id in `id`). Frees spec.
 */
static void library_box_of(const char *cfg, sbx_spec *spec, char *id, size_t n)
{
    sbx_provider *prov = provider_of(cfg);
    sbx_sandbox *sb = start(prov, spec);
    snprintf(id, n, "%s", sbx_sandbox_id(sb));
    sbx_sandbox_detach(sb);
    sbx_spec_free(spec);
    sbx_provider_free(prov);
}

/* A local box made by this process through the library, then left (detached) for the CLI. */
static void local_library_box(char *id, size_t n, const char *run, double ttl)
{
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_metadata(spec, "run", run);
    if (ttl > 0)
        sbx_spec_set_ttl(spec, ttl);
    library_box_of("{\"local\":{}}", spec, id, n);
}

/* The local provider's boxes, whoever made them, through sbx ls, exec, stop and gc. */
static void test_local_library_boxes_ls_stop_gc(void)
{
    setup();
    setenv("SBX_PROVIDER", "local", 1);
    char a[64], b[64], c[64], d[64];
    local_library_box(a, sizeof(a), "r1", 0);
    local_library_box(b, sizeof(b), "r2", 0.5);
    local_library_box(c, sizeof(c), "r3", 0);
    local_library_box(d, sizeof(d), "r4", 0);
    TAP_EQ_INT(records(), 0); /* none made by sbx create */
    TAP_EQ_INT(workspaces(), 4);
    /* d's workspace removed behind sbx's back: its record is all that is left. */
    char ws[PATH_MAX];
    snprintf(ws, sizeof(ws), "%s/%s", path_in_tmp("tmp"), d);
    TAP_EQ_INT(rm_rf(ws), 0);

    struct proc p = SBX("ls", "--json");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 4);
    const char *want[][2] = { { a, "running" }, { b, "running" }, { c, "running" }, { d, "error" } };
    for (size_t i = 0; i < 4; i++) {
        json_t *r = ls_entry(v, want[i][0]);
        if (!r)
            TAP_FAIL("%s not in ls: %s", want[i][0], p.out);
        TAP_EQ_STR(json_string_value(json_object_get(r, "provider")), "local");
        TAP_EQ_STR(json_string_value(json_object_get(r, "status")), want[i][1]);
        TAP_TRUE(json_is_false(json_object_get(r, "recorded")));
    }
    json_decref(v);
    proc_free(&p);
    p = SBX("ls", "-q", "--label", "run=r1");
    EXPECT_CODE(p, 0);
    char line[80];
    snprintf(line, sizeof(line), "%s\n", a);
    TAP_EQ_STR(p.out, line);
    proc_free(&p);

    /* Reached by id from another process: exec in its workspace, then stop. */
    p = SBX("exec", a, "--", "sh", "-c", "pwd");
    EXPECT_CODE(p, 0);
    snprintf(ws, sizeof(ws), "%s/%s\n", path_in_tmp("tmp"), a);
    TAP_EQ_STR(p.out, ws);
    proc_free(&p);
    SBX_EXPECT(0, "stop", a);
    TAP_EQ_INT(workspaces(), 2);
    p = SBX("stop", a);
    EXPECT_CODE(p, 3);
    TAP_CONTAINS(p.err, "no such box");
    proc_free(&p);

    /* gc: the expired one and the dead one, not the live one... */
    wait_for_ttl_expiry();
    p = SBX("gc", "--json");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 2);
    json_t *eb = ls_entry(v, b), *ed = ls_entry(v, d);
    if (!eb || !ed)
        TAP_FAIL("gc did not collect %s and %s: %s", b, d, p.out);
    TAP_EQ_STR(json_string_value(json_object_get(eb, "reason")), "ttl expired");
    TAP_EQ_STR(json_string_value(json_object_get(ed, "reason")), "orphaned");
    json_decref(v);
    proc_free(&p);
    TAP_EQ_INT(workspaces(), 1);
    /* ...and by label, what a crashed run left. */
    p = SBX("gc", "--json", "--label", "run=r3");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 1);
    TAP_EQ_STR(json_string_value(json_object_get(json_array_get(v, 0), "id")), c);
    json_decref(v);
    proc_free(&p);
    TAP_EQ_INT(workspaces(), 0);
    TAP_EQ_INT(count_entries(path_in_tmp("state/local")), 0);
    p = SBX("ls", "-q");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "");
    proc_free(&p);
}

/* The reason `gc --json` gave for `id`, or "(not collected)". */
static const char *gc_reason_of(json_t *gc, const char *id)
{
    json_t *e = ls_entry(gc, id);
    const char *r = e ? json_string_value(json_object_get(e, "reason")) : NULL;
    return r ? r : "(not collected)";
}

/*
 * What a race looks like to `sbx gc`: the provider's listing, taken first,
 * shows a box running; its gc then removes it (it died in between). The
 * reason is one gc collects by: never "label" without a --label it matches.
 */
static void test_gc_reasons_of_boxes_it_races_with(void)
{
    setup();
    setenv("SBX_PROVIDER", "fake_boxes", 1);
    setenv("SBX_FAKE_LIST",
           "[{\"id\": \"fake-raced\", \"status\": \"running\", \"created\": 1,"
           " \"expires_at\": null, \"labels\": {\"run\": \"r1\"}, \"image\": null,"
           " \"descriptor\": null},"
           " {\"id\": \"fake-old\", \"status\": \"running\", \"created\": 1,"
           " \"expires_at\": 2, \"labels\": {}, \"image\": null, \"descriptor\": null}]",
           1);
    setenv("SBX_FAKE_GC", "[\"fake-raced\", \"fake-old\", \"fake-unlisted\"]", 1);
    struct proc p = SBX("gc", "--json");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 3);
    TAP_EQ_STR(gc_reason_of(v, "fake-raced"), "orphaned");
    TAP_EQ_STR(gc_reason_of(v, "fake-old"), "ttl expired");
    TAP_EQ_STR(gc_reason_of(v, "fake-unlisted"), "orphaned");
    json_decref(v);
    proc_free(&p);
    /* With --label: collected for it when it matches, not when it does not. */
    p = SBX("gc", "--json", "--label", "run=r1");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_EQ_STR(gc_reason_of(v, "fake-raced"), "label");
    TAP_EQ_STR(gc_reason_of(v, "fake-old"), "ttl expired");
    json_decref(v);
    proc_free(&p);
    p = SBX("gc", "--json", "--label", "run=other");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_EQ_STR(gc_reason_of(v, "fake-raced"), "orphaned");
    json_decref(v);
    proc_free(&p);
}

static void test_default_provider_is_linux(void)
{
    need_linux();
    /* A fresh state directory: no image imported, nothing cached. */
    struct proc p = SBX("run", "--", "python3", "-c", "print(1)");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "1\n");
    TAP_EQ_STR(p.err, "");
    proc_free(&p);
    /* It is a linux box: the agent is PID 1. */
    p = SBX("run", "--json", "--", "cat", "/proc/1/cmdline");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_CONTAINS(json_string_value(json_object_get(v, "stdout")), "sbx-agent");
    TAP_TRUE(!strncmp(json_string_value(json_object_get(v, "id")), "sbx-", 4));
    json_decref(v);
    proc_free(&p);
    p = SBX("run", "--help");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "(default: $SBX_PROVIDER or linux)");
    proc_free(&p);
    /* SBX_PROVIDER still overrides the default. */
    setenv("SBX_PROVIDER", "fake", 1);
    SBX_EXPECT(6, "run", "--", "exit", "6");
    unsetenv("SBX_PROVIDER");
    TAP_EQ_INT(records(), 0);
    census_check(linux_state());
}

/* [volumes] -v, --cap-add, --shm-size and sbx volume, against real boxes. */
static void test_linux_volumes_caps_shm(void)
{
    need_linux();
    const char *hv = path_in_tmp("hv");
    TAP_EQ_INT(mkdir(hv, 0755), 0);
    char file[PATH_MAX], arg[PATH_MAX + 16];
    snprintf(file, sizeof(file), "%s/f", hv);
    write_file(file, "host-file\n", 0644);
    snprintf(arg, sizeof(arg), "%s:/h:ro", hv);
    struct proc p = SBX("run", "-v", arg, "--", "sh", "-c", "cat /h/f; touch /h/x");
    EXPECT_CODE(p, 1);
    TAP_EQ_STR(p.out, "host-file\n");
    TAP_CONTAINS(p.err, "Read-only file system");
    proc_free(&p);
    p = SBX("run", "--volume", "../rel:/h", "--", "true");
    EXPECT_CODE(p, 125);
    TAP_CONTAINS(p.err, "relative host path");
    proc_free(&p);

    /* A named volume: made by -v, used by a created box, rm refused until it stops. */
    char id[256];
    create_into(id, sizeof(id), (const char *const[]){ "create", "-v", "clivol:/d", NULL });
    SBX_EXPECT(0, "exec", id, "--", "sh", "-c", "echo kept > /d/k");
    p = SBX("volume", "ls");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "clivol");
    TAP_CONTAINS(p.out, id);
    proc_free(&p);
    p = SBX("volume", "rm", "clivol");
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "in use");
    TAP_CONTAINS(p.err, id);
    proc_free(&p);
    SBX_EXPECT(0, "stop", id);
    p = SBX("run", "-v", "clivol:/d", "--", "cat", "/d/k");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "kept\n");
    proc_free(&p);
    SBX_EXPECT(0, "volume", "rm", "clivol");
    SBX_EXPECT(1, "volume", "inspect", "clivol");
    SBX_EXPECT(2, "volume", "frob");
    p = SBX("run", "--provider", "local", "-v", arg, "--", "true");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "only the linux provider");
    proc_free(&p);

    /* Capabilities: one added, one refused with its reason; /dev/shm's size. */
    /* Bit 12 of CapEff is CAP_NET_ADMIN. */
    p = SBX("run", "--cap-add", "NET_ADMIN", "--", "sh", "-c",
            "c=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status); echo $(( 0x$c >> 12 & 1 ))");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "1\n");
    proc_free(&p);
    p = SBX("run", "--cap-add", "SYS_ADMIN", "--", "true");
    EXPECT_CODE(p, 125);
    TAP_CONTAINS(p.err, "SYS_ADMIN is refused");
    proc_free(&p);
    p = SBX("run", "--shm-size", "32m", "--", "sh", "-c", "df -k /dev/shm | tail -1");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "32768");
    proc_free(&p);
    TAP_EQ_INT(records(), 0);
    census_check(linux_state());
}

static void test_linux_run_exit_codes_and_streams(void)
{
    need_linux();
    struct proc p = SBX("run", "--", "sh", "-c", "printf 'out\\000\\377'; printf err >&2; exit 5");
    EXPECT_CODE(p, 5);
    TAP_EQ_INT(p.out_len, 5);
    TAP_TRUE(memcmp(p.out, "out\0\377", 5) == 0);
    TAP_EQ_STR(p.err, "err");
    proc_free(&p);
    p = SBX_STDIN("piped\n", 6, "run", "--", "tr", "a-z", "A-Z");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "PIPED\n");
    proc_free(&p);
    /* Not found: the shell's 127, and a hint that the word may have been an image. */
    p = SBX("run", "--", "no-such-command-xyz", "arg");
    EXPECT_CODE(p, 127);
    TAP_CONTAINS(p.err, "no-such-command-xyz");
    TAP_CONTAINS(p.err, "hint: sbx run takes the command first; to run it in the image "
                        "'no-such-command-xyz': sbx run --image no-such-command-xyz -- CMD...");
    proc_free(&p);
    /* A path is a command, whatever it holds. */
    p = SBX("run", "--", "/no/such:thing");
    EXPECT_CODE(p, 127);
    TAP_TRUE(strstr(p.err, "hint:") == NULL);
    proc_free(&p);
    p = SBX("run", "--", "sh", "-c", "exit 127");
    EXPECT_CODE(p, 127);
    TAP_TRUE(strstr(p.err, "hint:") == NULL); /* sh is a program here: no image meant */
    proc_free(&p);
    SBX_EXPECT(128 + SIGTERM, "run", "--", "sh", "-c", "kill -TERM $$");
    SBX_EXPECT(124, "run", "--timeout", "0.3", "--", "sleep", "30");
    TAP_EQ_INT(records(), 0);
    census_check(linux_state());
}

/*
 * The CLI behaviours the fake's mini language shows (exit codes, quoting,
 * stdin, timeout, JSON), against a real linux box.
 */
static void test_linux_run_quoting_stdin_timeout_json(void)
{
    need_linux();
    int codes[] = { 0, 1, 3, 42, 255 };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        char cmd[32];
        snprintf(cmd, sizeof(cmd), "exit %d", codes[i]);
        struct proc p = SBX("run", "--", "sh", "-c", cmd);
        EXPECT_CODE(p, codes[i]);
        TAP_EQ_STR(p.out, "");
        TAP_EQ_STR(p.err, "");
        proc_free(&p);
    }
    /* Each word arrives as one argument, unexpanded, whatever it holds. */
    struct proc p = SBX("run", "--", "printf", "[%s]", "a b", "it's", "$HOME", "*", "\"q\"");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "[a b][it's][$HOME][*][\"q\"]");
    proc_free(&p);
    /* stdin bytes pass exactly, NULs included; --no-stdin gives the command none. */
    static const char in[] = "line1\nzero\0byte";
    p = SBX_STDIN(in, sizeof(in) - 1, "run", "--", "od", "-An", "-c");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "\\0");
    TAP_CONTAINS(p.out, "b   y   t   e");
    proc_free(&p);
    p = SBX_STDIN("x", 1, "run", "--no-stdin", "--", "wc", "-c");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "0\n");
    proc_free(&p);
    /* A timeout: 124 and the reference's sentinels in JSON; a command's own 124 is not one. */
    p = SBX("run", "--timeout", "0.3", "--", "sh", "-c", "echo started; sleep 30");
    EXPECT_CODE(p, 124);
    TAP_EQ_STR(p.err, "sbx: command timed out after 0.3s\n");
    proc_free(&p);
    p = SBX("run", "--json", "--timeout", "0.3", "--", "sleep", "30");
    EXPECT_CODE(p, 124);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_integer_value(json_object_get(v, "return_code")), 125);
    TAP_EQ_STR(json_string_value(json_object_get(v, "error_type")), "timeout");
    json_decref(v);
    proc_free(&p);
    /*
     * --json is written as a stream (cli/output.c), byte for byte what
     * jansson writes for the same object: every byte value, a quote and a
     * backslash, valid UTF-8 kept, invalid bytes replaced (U+FFFD).
     */
    p = SBX("run", "--json", "--", "sh", "-c",
            "i=0; while [ $i -lt 256 ]; do printf \"\\\\$(printf %o $i)\"; i=$((i+1)); done; "
            "printf '\"\\\\ \303\251 \342\234\223 \303\050 \360\237\230'; printf 'e\001' >&2");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    char *again = json_dumps(v, JSON_INDENT(2));
    TAP_TRUE(again != NULL);
    size_t al = strlen(again);
    TAP_TRUE(p.out_len == al + 1 && !memcmp(p.out, again, al) && p.out[al] == '\n');
    free(again);
    size_t sl = json_string_length(json_object_get(v, "stdout"));
    const char *so = json_string_value(json_object_get(v, "stdout"));
    /* 128 ASCII bytes as they are, 128 high bytes each U+FFFD, then the tail. */
    TAP_TRUE(sl > 128 + 128 * 3 && !memcmp(so + 1, "\001\002", 2) && so[0] == 0);
    TAP_TRUE(!memcmp(so + 128, "\xef\xbf\xbd", 3));
    TAP_CONTAINS(so + 128 + 128 * 3, "\"\\ \xc3\xa9 \xe2\x9c\x93 \xef\xbf\xbd( \xef\xbf\xbd");
    TAP_EQ_STR(json_string_value(json_object_get(v, "stderr")), "e\001");
    json_decref(v);
    proc_free(&p);
    p = SBX("run", "--", "sh", "-c", "echo mine >&2; exit 124");
    EXPECT_CODE(p, 124);
    TAP_EQ_STR(p.err, "mine\n");
    proc_free(&p);
    p = SBX("run", "--json", "--", "sh", "-c", "echo hi; exit 4");
    EXPECT_CODE(p, 4);
    v = parse_json(p.out);
    TAP_EQ_INT(json_integer_value(json_object_get(v, "return_code")), 4);
    TAP_EQ_STR(json_string_value(json_object_get(v, "stdout")), "hi\n");
    TAP_TRUE(json_is_null(json_object_get(v, "error_type")));
    TAP_TRUE(json_is_false(json_object_get(v, "truncated")));
    json_decref(v);
    proc_free(&p);
    TAP_EQ_INT(records(), 0);
    census_check(linux_state());
}

static void test_linux_image_import_ls_run_rm(void)
{
    need_linux();
    const char *tar = busybox_tar();
    /* --progress writes percentage lines to stderr even when it is not a terminal. */
    struct proc p = SBX("image", "import", "--progress", "--json", "bb", tar);
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.err, "importing bb: unpack");
    TAP_CONTAINS(p.err, "100%");
    json_t *v = parse_json(p.out);
    TAP_EQ_STR(json_string_value(json_object_get(v, "name")), "bb");
    TAP_TRUE(!strncmp(json_string_value(json_object_get(v, "digest")), "sha256:", 7));
    TAP_TRUE(json_integer_value(json_object_get(v, "size")) > 100000);
    char digest[128];
    snprintf(digest, sizeof(digest), "%s", json_string_value(json_object_get(v, "digest")));
    json_decref(v);
    proc_free(&p);
    /* Without a terminal and without --progress: quiet. */
    p = SBX("image", "import", "bb2", tar);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.err, "");
    TAP_CONTAINS(p.out, digest);
    proc_free(&p);

    p = SBX("image", "ls", "--json");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 2);
    json_t *first = json_array_get(v, 0);
    TAP_EQ_STR(json_string_value(json_object_get(first, "name")), "bb");
    TAP_EQ_STR(json_string_value(json_object_get(first, "digest")), digest);
    TAP_TRUE(json_number_value(json_object_get(first, "created")) > 0);
    TAP_CONTAINS(json_string_value(json_object_get(first, "source")), "bb.tar");
    json_decref(v);
    proc_free(&p);
    p = SBX("image", "ls");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "NAME");
    TAP_CONTAINS(p.out, "\nbb ");
    TAP_CONTAINS(p.out, "\nbb2 ");
    proc_free(&p);

    p = SBX("run", "--image", "bb", "--", "cat", "/etc/image-name");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "sbx-test\n");
    proc_free(&p);

    /* A box running the image keeps it from being removed, unless forced. */
    char id[256];
    create_into(id, sizeof(id), (const char *const[]){ "create", "--image", "bb", NULL });
    p = SBX("image", "rm", "bb");
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, id);
    TAP_CONTAINS(p.err, "--force");
    proc_free(&p);
    SBX_EXPECT(0, "stop", id);
    p = SBX("image", "rm", "bb", "bb2");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "bb\nbb2\n");
    proc_free(&p);
    p = SBX("image", "ls", "-q");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "");
    proc_free(&p);
    char cmd[PATH_MAX];
    snprintf(cmd, sizeof(cmd), "%s/images", linux_state());
    /* The unpacked tree went with its last name (only the none skeleton and indexes stay). */
    char out[4096];
    run_cmd(out, sizeof(out), "ls %s | grep -c sha256- || true", cmd);
    TAP_EQ_STR(out, "0\n");

    /* A name that is gone is an error that says what to do. */
    p = SBX("run", "--image", "bb", "--", "true");
    EXPECT_CODE(p, 125);
    TAP_CONTAINS(p.err, "sbx image import");
    proc_free(&p);
    p = SBX("image", "rm", "bb");
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "no image named bb");
    proc_free(&p);
    p = SBX("image", "import", "x", path_in_tmp("missing.tar"));
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "missing.tar");
    proc_free(&p);
    /* A source that is not an archive is the import's failure (1), not sbx's (125)... */
    char garbage[1024];
    snprintf(garbage, sizeof(garbage), "%s", path_in_tmp("garbage.tar"));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "head -c 4096 /dev/urandom > %s", garbage), 0);
    p = SBX("image", "import", "g", garbage);
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "not a tar archive");
    proc_free(&p);
    /* ...while a create from it is a failed create, as any. */
    p = SBX("run", "--image", garbage, "--", "true");
    EXPECT_CODE(p, 125);
    TAP_CONTAINS(p.err, "not a tar archive");
    proc_free(&p);
    /* A name the provider refuses is the import's failure, saying what names may hold. */
    p = SBX("image", "import", "A/b", tar);
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "invalid image name A/b");
    proc_free(&p);
    p = SBX("image", "import", "a/../b", tar);
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "invalid image name a/../b");
    proc_free(&p);
    p = SBX("image", "import", "onlyname");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "usage: sbx image");
    proc_free(&p);
    SBX_EXPECT(2, "image", "frob");
    census_check(linux_state());
}

static void test_linux_create_exec_cp_ls_stop(void)
{
    need_linux();
    char id[256];
    create_into(id, sizeof(id),
                (const char *const[]){ "create", "--label", "job=cli", "--label", "run_id=r1",
                                       "--ttl", "600", "-e", "GREETING=hi", "--workdir", "/work",
                                       NULL });
    TAP_EQ_INT(records(), 1);
    /* Each sbx is its own process: what one wrote, the next sees. */
    SBX_EXPECT(0, "exec", id, "--", "sh", "-c", "echo $GREETING > note.txt");
    struct proc p = SBX("exec", id, "--", "sh", "-c", "cat /work/note.txt; exit 3");
    EXPECT_CODE(p, 3);
    TAP_EQ_STR(p.out, "hi\n");
    proc_free(&p);

    check_file_in_out(id);
    /* A directory in and out (the host's sh and tar serve the none image). */
    const char *tree = path_in_tmp("tree");
    TAP_EQ_INT(mkdir(tree, 0755), 0);
    char file[PATH_MAX];
    snprintf(file, sizeof(file), "%s/run.sh", tree);
    write_file(file, "#!/bin/sh\necho ran\n", 0755);
    const char *dst = box_path(id, "d/tree");
    SBX_EXPECT(0, "cp", tree, dst);
    p = SBX("exec", id, "--", "./d/tree/run.sh");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "ran\n");
    proc_free(&p);
    SBX_EXPECT(0, "cp", dst, path_in_tmp("out"));
    snprintf(file, sizeof(file), "%s/out/run.sh", tap_tmpdir());
    TAP_EQ_INT(mode_of(file), 0755);

    p = SBX("ls", "--json", "--label", "job=cli");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 1);
    json_t *r = json_array_get(v, 0);
    TAP_EQ_STR(json_string_value(json_object_get(r, "id")), id);
    TAP_EQ_STR(json_string_value(json_object_get(r, "provider")), "linux");
    TAP_EQ_STR(json_string_value(json_object_get(r, "status")), "running");
    TAP_TRUE(json_is_true(json_object_get(r, "recorded")));
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(r, "labels"), "run_id")), "r1");
    json_decref(v);
    proc_free(&p);
    p = SBX("ls", "--json", "--label", "job=other");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "[]\n");
    proc_free(&p);
    /* Listed once, though both the CLI and the provider know it. */
    p = SBX("ls", "-q");
    EXPECT_CODE(p, 0);
    char want[300];
    snprintf(want, sizeof(want), "%s\n", id);
    TAP_EQ_STR(p.out, want);
    proc_free(&p);
    p = SBX("status", id);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "running\n");
    proc_free(&p);

    p = SBX("stop", id);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, want);
    proc_free(&p);
    TAP_EQ_INT(records(), 0);
    SBX_EXPECT(3, "status", id);
    census_check(linux_state());
}

/*
 * sbx cp of a directory both ways into a box whose image has no sh and no
 * tar: it goes through the agent's tar built-ins (docs/transfer.md), with
 * modes and links kept, and -a keeping owners.
 */
static void test_linux_cp_dir_without_sh_or_tar(void)
{
    need_linux();
    char img[PATH_MAX], file[PATH_MAX];
    snprintf(img, sizeof(img), "%s/bare", tap_tmpdir());
    char out[1024];
    TAP_EQ_INT(run_cmd(out, sizeof(out),
                       "mkdir -p %s/etc && echo 'root:x:0:0::/:/nope' > %s/etc/passwd && "
                       "echo 'root:x:0:' > %s/etc/group", img, img, img), 0);
    char id[256];
    create_into(id, sizeof(id),
                (const char *const[]){ "create", "--image", img, "--workdir", "/work", NULL });
    const char *tree = path_in_tmp("tree");
    snprintf(file, sizeof(file), "%s/sub", tree);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "mkdir -p %s && ln -s / %s/root-link", file, tree), 0);
    snprintf(file, sizeof(file), "%s/sub/run.sh", tree);
    write_file(file, "#!/bin/sh\necho ran\n", 0751);
    TAP_EQ_INT(chown(file, 1234, 4321), 0);
    SBX_EXPECT(0, "cp", tree, box_path(id, "d/tree"));
    /* Relative to the workdir; the box has no shell to check with: back out again. */
    SBX_EXPECT(0, "cp", "-a", box_path(id, "/work/d/tree"), path_in_tmp("out"));
    snprintf(file, sizeof(file), "%s/out/sub/run.sh", tap_tmpdir());
    TAP_EQ_INT(mode_of(file), 0751);
    struct stat st;
    TAP_EQ_INT(lstat(file, &st), 0);
    TAP_EQ_INT((int)st.st_uid, 0); /* not kept on the way in without -a */
    snprintf(file, sizeof(file), "%s/out/root-link", tap_tmpdir());
    TAP_EQ_INT(lstat(file, &st), 0);
    TAP_TRUE(S_ISLNK(st.st_mode));
    SBX_EXPECT(0, "cp", "-a", tree, box_path(id, "kept"));
    SBX_EXPECT(0, "cp", "-a", box_path(id, "kept"), path_in_tmp("kept-out"));
    snprintf(file, sizeof(file), "%s/kept-out/sub/run.sh", tap_tmpdir());
    TAP_EQ_INT(lstat(file, &st), 0);
    TAP_EQ_INT((int)st.st_uid, 1234);
    TAP_EQ_INT((int)st.st_gid, 4321);
    /* A missing box directory: the box's reason, exit 1. */
    struct proc p = SBX("cp", box_path(id, "/no/such/dir/"), path_in_tmp("none"));
    TAP_NE_INT(p.code, 0);
    proc_free(&p);
    SBX_EXPECT(0, "stop", id);
    census_check(linux_state());
}

/* Starts a linux box through the library in this process and lets it go (its id in `id`). */
static void library_box(char *id, size_t n, const char *label_key, const char *label_value)
{
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_metadata(spec, label_key, label_value);
    sbx_spec_set_env(spec, "FROM", "library");
    library_box_of("{\"linux\":{}}", spec, id, n);
}

static void test_linux_library_box_seen_by_cli(void)
{
    need_linux();
    char id[256];
    library_box(id, sizeof(id), "team", "lib");
    TAP_EQ_INT(records(), 0);
    struct proc p = SBX("ls", "--json", "--label", "team=lib");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    json_t *r = ls_entry(v, id);
    if (!r)
        TAP_FAIL("%s not in ls: %s", id, p.out);
    TAP_EQ_INT(json_array_size(v), 1);
    TAP_EQ_STR(json_string_value(json_object_get(r, "provider")), "linux");
    TAP_EQ_STR(json_string_value(json_object_get(r, "status")), "running");
    TAP_TRUE(json_is_false(json_object_get(r, "recorded")));
    json_decref(v);
    proc_free(&p);
    p = SBX("ls");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, id);
    TAP_CONTAINS(p.out, "team=lib");
    proc_free(&p);

    /* exec by id (the box's spec env applies), and by a unique prefix. */
    p = SBX("exec", id, "--", "sh", "-c", "echo $FROM > f.txt; cat f.txt");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "library\n");
    proc_free(&p);
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "%.10s", id);
    SBX_EXPECT(4, "exec", prefix, "--", "sh", "-c", "exit 4");
    SBX_EXPECT(0, "cp", box_path(id, "f.txt"), path_in_tmp("f.txt"));
    char *t = read_text(path_in_tmp("f.txt"));
    TAP_EQ_STR(t, "library\n");
    free(t);
    p = SBX("status", "--json", id);
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_EQ_STR(json_string_value(json_object_get(v, "status")), "running");
    json_decref(v);
    proc_free(&p);

    SBX_EXPECT(0, "stop", id);
    p = SBX("ls", "-q");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "");
    proc_free(&p);
    census_check(linux_state());
}

/* The shim pid in a linux box's record. */
static long shim_pid_of(const char *id)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/boxes/%s/record.json", linux_state(), id);
    json_t *rec = json_load_file(path, 0, NULL);
    long pid = (long)json_integer_value(json_object_get(rec, "shim_pid"));
    json_decref(rec);
    if (pid <= 0)
        TAP_FAIL("no shim pid in %s", path);
    return pid;
}

static void test_linux_gc_expired_orphan_and_label(void)
{
    need_linux();
    /* 1. A box whose TTL passes: its shim ends it, gc forgets the record. */
    char expired[256];
    create_into(expired, sizeof(expired), (const char *const[]){ "create", "--ttl", "1", NULL });
    wait_for_ttl_expiry();
    TAP_EQ_INT(records(), 1);

    /* 2. An orphan: a box whose shim was killed (no CLI record: made through the library). */
    char orphan[256];
    library_box(orphan, sizeof(orphan), "kind", "orphan");
    long shim = shim_pid_of(orphan);
    TAP_EQ_INT(kill((pid_t)shim, SIGKILL), 0);
    struct timespec ts = { 0, 100 * 1000 * 1000 };
    while (proc_runs(shim))
        nanosleep(&ts, NULL);
    struct proc p = SBX("status", orphan);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "error\n");
    proc_free(&p);

    /* 3. Two healthy boxes with run ids: gc leaves them, --run-id takes one. */
    char keep[256], crashed[256];
    library_box(keep, sizeof(keep), "run_id", "keep");
    library_box(crashed, sizeof(crashed), "run_id", "crashed");

    p = SBX("gc", "--dry-run", "--json");
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 2);
    json_t *e = ls_entry(v, expired);
    TAP_TRUE(e != NULL);
    TAP_EQ_STR(json_string_value(json_object_get(e, "reason")), "ttl expired");
    TAP_TRUE(json_is_false(json_object_get(e, "removed")));
    e = ls_entry(v, orphan);
    TAP_TRUE(e != NULL);
    TAP_EQ_STR(json_string_value(json_object_get(e, "reason")), "orphaned");
    json_decref(v);
    proc_free(&p);
    /* A dry run touched nothing. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/boxes/%s", linux_state(), orphan);
    TAP_TRUE(access(dir, F_OK) == 0);

    p = SBX("gc");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, expired);
    TAP_CONTAINS(p.out, orphan);
    TAP_TRUE(!strstr(p.out, keep) && !strstr(p.out, crashed));
    proc_free(&p);
    TAP_EQ_INT(records(), 0);
    TAP_TRUE(access(dir, F_OK) != 0);

    p = SBX("gc", "--run-id", "crashed", "--json");
    EXPECT_CODE(p, 0);
    v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 1);
    TAP_EQ_STR(json_string_value(json_object_get(json_array_get(v, 0), "id")), crashed);
    TAP_EQ_STR(json_string_value(json_object_get(json_array_get(v, 0), "reason")), "label");
    TAP_TRUE(json_is_true(json_object_get(json_array_get(v, 0), "removed")));
    json_decref(v);
    proc_free(&p);
    p = SBX("ls", "-q");
    char want[300];
    snprintf(want, sizeof(want), "%s\n", keep);
    TAP_EQ_STR(p.out, want);
    proc_free(&p);
    p = SBX("gc", "--label", "run_id=keep");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, keep);
    proc_free(&p);
    census_check(linux_state());
}

/* Reads `fd` into `*buf` until it holds `text`; fails after a generous deadline (a hang guard). */
static void read_until_text(int fd, char **buf, size_t *len, const char *text)
{
    time_t end = time(NULL) + 60;
    while (!*buf || !strstr(*buf, text)) {
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        int left = (int)(end - time(NULL));
        if (left <= 0 || poll(&pf, 1, left * 1000) <= 0)
            TAP_FAIL("'%s' did not arrive while the command ran (got '%s')", text,
                     *buf ? *buf : "");
        char chunk[4096];
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n <= 0)
            TAP_FAIL("the stream ended before '%s' (got '%s')", text, *buf ? *buf : "");
        append(buf, len, chunk, (size_t)n);
    }
}

/*
 * sbx run prints output as it arrives. No timing: the command prints, then
 * waits for a line on its stdin, which the test writes only after it read
 * the first bytes from sbx's stdout and stderr; printed only at the end,
 * they would never come and the deadline fails the test.
 */
static void test_linux_run_streams_as_it_arrives(void)
{
    need_linux();
    int pin[2], pout[2], perr[2];
    TAP_TRUE(pipe2(pin, O_CLOEXEC) == 0 && pipe2(pout, O_CLOEXEC) == 0 &&
             pipe2(perr, O_CLOEXEC) == 0);
    char *argv[] = { (char *)"sbx", (char *)"run", (char *)"--", (char *)"sh", (char *)"-c",
                     (char *)"echo first; echo ferr >&2; read x; echo second:$x; echo serr >&2; "
                             "exit 7",
                     NULL };
    pid_t pid = spawn(argv, pin[0], pout[1], perr[1]);
    close(pin[0]);
    close(pout[1]);
    close(perr[1]);
    char *out = NULL, *err = NULL;
    size_t out_len = 0, err_len = 0;
    read_until_text(pout[0], &out, &out_len, "first\n");
    read_until_text(perr[0], &err, &err_len, "ferr\n");
    TAP_EQ_STR(out, "first\n");
    TAP_EQ_INT(write(pin[1], "go\n", 3), 3);
    close(pin[1]);
    read_until_text(pout[0], &out, &out_len, "second:go\n");
    read_until_text(perr[0], &err, &err_len, "serr\n");
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    TAP_TRUE(WIFEXITED(st));
    TAP_EQ_INT(WEXITSTATUS(st), 7);
    /* Nothing more, and no sbx message: stdout and stderr hold the command's bytes only. */
    char rest[64];
    TAP_EQ_INT(read(pout[0], rest, sizeof(rest)), 0);
    TAP_EQ_INT(read(perr[0], rest, sizeof(rest)), 0);
    TAP_EQ_STR(out, "first\nsecond:go\n");
    TAP_EQ_STR(err, "ferr\nserr\n");
    free(out);
    free(err);
    close(pout[0]);
    close(perr[0]);

    /* A timeout keeps what the command printed; sbx says it timed out, exit 124. */
    struct proc p = SBX("run", "--timeout", "1", "--", "sh", "-c", "echo partial; sleep 100");
    EXPECT_CODE(p, 124);
    TAP_EQ_STR(p.out, "partial\n");
    TAP_EQ_STR(p.err, "sbx: command timed out after 1s\n");
    proc_free(&p);
}

static void test_linux_sigint_run_leaves_nothing(void)
{
    need_linux();
    /*
     * Nothing of the box's files is visible on the host: the command shows
     * it started as a process with an argument nothing else uses.
     */
    char *argv[] = { (char *)"sbx", (char *)"run", (char *)"--", (char *)"sh", (char *)"-c",
                     (char *)"exec sleep 60.4242", NULL };
    int err_fd;
    pid_t pid = spawn_watched(argv, &err_fd);
    char out[4096];
    struct timespec ts = { 0, 20 * 1000 * 1000 };
    for (;;) {
        run_cmd(out, sizeof(out), "pgrep -xf 'sleep 60.4242' | wc -l");
        if (strtol(out, NULL, 10) > 0)
            break;
        nanosleep(&ts, NULL);
    }
    interrupt_and_check(pid, err_fd, SIGINT);
    TAP_EQ_INT(records(), 0);
    census_check(linux_state());
}

/* [svc-logs] sbx logs: both streams apart, --tail, --since, -t, -f; the service's end in status/ls. */
static void test_linux_logs_and_service_exit(void)
{
    need_linux();
    const char *spec = path_in_tmp("svc.yaml");
    TAP_EQ_INT(write_text(spec, "workdir: /work\nentrypoint: [sh, -c, 'echo out1; echo err1 >&2; "
                                "echo out2; exit 3']\n"),
               0);
    char id[256];
    create_into(id, sizeof(id), (const char *const[]){ "create", "--spec", spec, NULL });
    struct proc p = { 0 };
    for (int i = 0; i < 1200; i++) { /* a hang guard only */
        p = SBX("status", id);
        if (!strcmp(p.out, "exited(3)\n"))
            break;
        proc_free(&p);
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "exited(3)\n");
    proc_free(&p);
    p = SBX("ls");
    TAP_CONTAINS(p.out, "exited(3)");
    proc_free(&p);
    p = SBX("status", "--json", id);
    TAP_CONTAINS(p.out, "\"service\": {");
    TAP_CONTAINS(p.out, "\"status\": \"stopped\"");
    proc_free(&p);
    /* The box still runs commands. */
    p = SBX("exec", id, "--", "echo", "alive");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "alive\n");
    proc_free(&p);
    p = SBX("logs", id);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "out1\nout2\n");
    /* [term] The agent's line is the box's ("box: "); sbx's event follows. */
    TAP_EQ_STR(p.err, "err1\nbox: sbx-agent: entrypoint exited with status 3\n"
                      "sbx: the service exited with status 3\n");
    proc_free(&p);
    p = SBX("logs", "--raw", id);
    TAP_EQ_STR(p.err, "err1\nsbx-agent: entrypoint exited with status 3\n");
    proc_free(&p);
    p = SBX("logs", "--tail", "1", id);
    TAP_EQ_STR(p.out, "");
    TAP_EQ_STR(p.err, "box: sbx-agent: entrypoint exited with status 3\n"
                      "sbx: the service exited with status 3\n");
    proc_free(&p);
    p = SBX("logs", "--since", "1h", id);
    TAP_EQ_STR(p.out, "out1\nout2\n");
    proc_free(&p);
    p = SBX("logs", "--since", "2999-01-01T00:00:00Z", id);
    TAP_EQ_STR(p.out, "");
    TAP_EQ_STR(p.err, "");
    proc_free(&p);
    p = SBX("logs", "-t", "--tail", "1", id);
    /* 2026-01-02T03:04:05.123456789Z box: sbx-agent: ... */
    TAP_TRUE(strlen(p.err) > 31 && p.err[4] == '-' && p.err[10] == 'T' && p.err[29] == 'Z' &&
             p.err[30] == ' ');
    TAP_CONTAINS(p.err, "Z box: sbx-agent: entrypoint exited");
    TAP_CONTAINS(p.err, "Z sbx: the service exited with status 3\n");
    proc_free(&p);
    /* -f ends by itself: the service has ended. */
    p = SBX("logs", "-f", id);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "out1\nout2\n");
    proc_free(&p);
    p = SBX("logs", "--since", "yesterday", id);
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "--since 'yesterday'");
    proc_free(&p);
    SBX_EXPECT(0, "stop", id);
    SBX_EXPECT(3, "logs", id);
}

/*
 * [term] A service's lines that pass for sbx's own or its agent's are shown
 * as the box's ("box: "), the real end of the service as sbx's event (the
 * only line that starts with "sbx:"); on a terminal its escapes are shown,
 * not obeyed; --raw gives the exact bytes and no event; a file for stdout
 * gets the exact bytes.
 */
static void test_linux_logs_forged_lines_and_escapes(void)
{
    need_linux();
    const char *spec = path_in_tmp("forge.yaml");
    TAP_EQ_INT(write_text(spec, "entrypoint: [sh, -c, 'printf \"\\033]0;pwned\\007hi\\n\"; "
                                "echo \"sbx-agent: entrypoint exited with status 0\"; "
                                "echo \"sbx: the service exited with status 0\" >&2; "
                                "printf \"x\\rsbx: the service exited with status 0\\n\" >&2; "
                                "exit 3']\n"),
               0);
    char id[256];
    create_into(id, sizeof(id), (const char *const[]){ "create", "--spec", spec, NULL });
    struct proc p = { 0 };
    for (int i = 0; i < 1200; i++) { /* a hang guard only */
        p = SBX("status", id);
        bool done = !strcmp(p.out, "exited(3)\n");
        proc_free(&p);
        if (done)
            break;
        struct timespec ts = { 0, 50 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    p = SBX_PTY(NULL, "logs", id);
    EXPECT_CODE(p, 0);
    TAP_NULL(memchr(p.out, 0x1b, p.out_len));
    TAP_CONTAINS(p.out, "^[]0;pwned^Ghi\n");
    TAP_CONTAINS(p.out, "\nbox: sbx-agent: entrypoint exited with status 0\n");
    TAP_CONTAINS(p.out, "\nbox: sbx: the service exited with status 0\n");
    TAP_CONTAINS(p.out, "\nx^Mbox: sbx: the service exited with status 0\n");
    /* sbx's own line, the only one that starts with "sbx:". */
    TAP_CONTAINS(p.out, "\nsbx: the service exited with status 3\n");
    TAP_EQ_INT(lines_starting(p.out, "sbx:"), 1);
    TAP_EQ_INT(lines_starting(p.out, "sbx-agent:"), 0);
    proc_free(&p);
    /* --raw: the box's bytes, no event. */
    p = SBX_PTY(NULL, "logs", "--raw", id);
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "\033]0;pwned\007hi\n");
    TAP_CONTAINS(p.out, "x\rsbx: the service exited with status 0\n");
    TAP_TRUE(!strstr(p.out, "status 3\n") || strstr(p.out, "sbx-agent: entrypoint exited with status 3"));
    TAP_TRUE(!strstr(p.out, "sbx: the service exited with status 3"));
    proc_free(&p);
    /* stdout into a file: exact; stderr, on the terminal, has the marks and the event. */
    const char *file = path_in_tmp("logs-out");
    p = SBX_PTY(file, "logs", id);
    EXPECT_CODE(p, 0);
    TAP_EQ_INT(lines_starting(p.out, "sbx:"), 1);
    TAP_CONTAINS(p.out, "box: sbx: the service exited with status 0\n");
    proc_free(&p);
    char *got = read_text(file);
    TAP_EQ_STR(got, "\033]0;pwned\007hi\nsbx-agent: entrypoint exited with status 0\n");
    free(got);
    /* top: a process's command line is the box's; its table shows it, one row, escaped. */
    p = SBX("exec", "-d", id, "--", "sh", "-c", "exec sleep 1000", "x\033[2J\ny");
    EXPECT_CODE(p, 0);
    char n1[32];
    snprintf(n1, sizeof(n1), "%.*s", (int)strcspn(p.out, "\n"), p.out);
    proc_free(&p);
    p = SBX("top", "--sessions", id);
    EXPECT_CODE(p, 0);
    TAP_NULL(memchr(p.out, 0x1b, p.out_len));
    TAP_CONTAINS(p.out, "x^[[2J^Jy");
    proc_free(&p);
    p = SBX("top", "--sessions", "--json", id);
    TAP_CONTAINS(p.out, "x\\u001B[2J\\ny");
    proc_free(&p);
    SBX_EXPECT(0, "kill", id, n1);
    SBX_EXPECT(0, "stop", id);
    census_check(linux_state());
}

/*
 * [procs] Background processes: exec -d prints a number and returns at
 * once; top lists the box's processes and, with --sessions, the process
 * running; attach --no-follow prints output so far; attach passes stdin and
 * exits with its status; kill, then wait prints 128+15; -dt puts one on
 * a terminal of its own.
 */
static void test_linux_background_processes(void)
{
    need_linux();
    char id[256];
    create_into(id, sizeof(id), (const char *const[]){ "create", "--workdir", "/work", NULL });
    struct proc p = SBX("exec", "-d", id, "--", "sh", "-c",
                        "echo out-$((2+3)); echo err-1 >&2; read x; echo got-$x; exit 6");
    EXPECT_CODE(p, 0);
    char n1[32];
    snprintf(n1, sizeof(n1), "%.*s", (int)strcspn(p.out, "\n"), p.out);
    TAP_TRUE(atoi(n1) > 0);
    proc_free(&p);
    p = SBX("top", "--sessions", "--json", id);
    EXPECT_CODE(p, 0);
    json_t *v = parse_json(p.out);
    TAP_EQ_INT((int)json_array_size(v), 1);
    TAP_EQ_STR(json_string_value(json_object_get(json_array_get(v, 0), "mode")), "pipe");
    TAP_TRUE(json_is_true(json_object_get(json_array_get(v, 0), "running")));
    json_decref(v);
    proc_free(&p);
    p = SBX("top", id);
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "COMMAND");
    TAP_CONTAINS(p.out, "echo out-$((2+3))");
    proc_free(&p);
    /* Output so far: wait for it to be there (the listing counts the bytes). */
    for (;;) {
        p = SBX("attach", "--no-follow", id, n1);
        EXPECT_CODE(p, 0);
        bool both = strstr(p.out, "out-5\n") && strstr(p.err, "err-1\n");
        proc_free(&p);
        if (both)
            break;
        usleep(20000);
    }
    p = sbx_in("abc\n", 4, (const char *const[]){ "attach", id, n1, NULL });
    EXPECT_CODE(p, 6);
    TAP_EQ_STR(p.out, "out-5\ngot-abc\n");
    TAP_EQ_STR(p.err, "err-1\n");
    proc_free(&p);
    p = SBX("top", "--sessions", "--json", id);
    v = parse_json(p.out);
    TAP_EQ_INT((int)json_array_size(v), 0); /* attach read its end: it is collected */
    json_decref(v);
    proc_free(&p);

    p = SBX("exec", "-d", id, "--", "sleep", "1000");
    EXPECT_CODE(p, 0);
    char n2[32];
    snprintf(n2, sizeof(n2), "%.*s", (int)strcspn(p.out, "\n"), p.out);
    proc_free(&p);
    p = SBX("attach", "--no-follow", id, n2); /* nothing printed yet: returns at once */
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "");
    proc_free(&p);
    SBX_EXPECT(2, "kill", "-s", "NOPE", id, n2);
    SBX_EXPECT(0, "kill", "-s", "TERM", id, n2);
    p = SBX("wait", id, n2);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "143\n");
    proc_free(&p);
    p = SBX("wait", id, n2);
    EXPECT_CODE(p, 125);
    TAP_CONTAINS(p.err, "no PTY session");
    proc_free(&p);
    /* -dt: on a terminal of its own (24x80: this test's stdout is no terminal), left running. */
    p = SBX("exec", "-dt", id, "--", "sh", "-c", "tty; stty size; echo ready; sleep 1000");
    EXPECT_CODE(p, 0);
    char n3[32];
    snprintf(n3, sizeof(n3), "%.*s", (int)strcspn(p.out, "\n"), p.out);
    TAP_TRUE(atoi(n3) > 0);
    proc_free(&p);
    p = SBX("top", "--sessions", "--json", id);
    v = parse_json(p.out);
    TAP_EQ_INT((int)json_array_size(v), 1);
    TAP_EQ_STR(json_string_value(json_object_get(json_array_get(v, 0), "mode")), "pty");
    TAP_TRUE(json_is_false(json_object_get(json_array_get(v, 0), "attached")));
    json_decref(v);
    proc_free(&p);
    for (;;) {
        p = SBX("attach", "--no-follow", id, n3);
        EXPECT_CODE(p, 0);
        bool ready = strstr(p.out, "ready\r\n") != NULL;
        if (ready) {
            TAP_CONTAINS(p.out, "/dev/pts/");
            TAP_CONTAINS(p.out, "24 80\r\n");
        }
        proc_free(&p);
        if (ready)
            break;
        usleep(20000);
    }
    /* A terminal attach needs a terminal: said, and the session runs on. */
    p = SBX("attach", id, n3);
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "not a TTY");
    proc_free(&p);
    SBX_EXPECT(0, "kill", "-s", "TERM", id, n3);
    p = SBX("wait", id, n3);
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "143\n");
    proc_free(&p);
    SBX_EXPECT(0, "stop", id);
    census_check(linux_state());
}

/*
 * What a Docker user types (issue 24): -w, -u, --name and names in place of
 * ids, ps/rm/inspect, run --rm, run -d with its command as the service.
 */
static void test_linux_docker_habits(void)
{
    need_linux();
    /* run: -w, -u and --rm (what run does anyway). */
    struct proc p = SBX("run", "--rm", "-w", "/tmp", "-u", "65534", "--", "sh", "-c", "pwd; id -u");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "/tmp\n65534\n");
    proc_free(&p);
    TAP_EQ_INT(records(), 0);

    /* create --name; the name works wherever an id does. */
    char id[256];
    create_into(id, sizeof(id), (const char *const[]){ "create", "--name", "web", "-w", "/etc", NULL });
    p = SBX("exec", "web", "--", "pwd");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "/etc\n");
    proc_free(&p);
    p = SBX("exec", "-w", "/usr", "-u", "nobody", "web", "--", "sh", "-c", "pwd; id -un");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "/usr\nnobody\n");
    proc_free(&p);
    p = SBX("exec", "--workdir", "/var", "web", "--", "pwd");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "/var\n");
    proc_free(&p);
    /* A name is one box's: a second create of it is refused and makes nothing. */
    p = SBX("create", "--name", "web");
    EXPECT_CODE(p, 2);
    TAP_CONTAINS(p.err, "the name 'web' is already used by box ");
    TAP_CONTAINS(p.err, id);
    proc_free(&p);
    TAP_EQ_INT(records(), 1);
    SBX_EXPECT_ERR(2, "is not a name", "create", "--name", "sbx-1");
    SBX_EXPECT_ERR(2, "disagree", "create", "--name", "web", "--label", "name=other");

    /* ps -a is ls; inspect is a JSON array of status --json objects, a missing box said. */
    p = SBX("ps", "-a", "-q");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, id);
    proc_free(&p);
    /* PORTS: what a box publishes, as docker ps shows it. */
    char pid_[256];
    create_into(pid_, sizeof(pid_), (const char *const[]){"create", "-p", "127.0.0.1:0:8080", NULL});
    p = SBX("ls");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "TTL      PORTS                  LABELS");
    TAP_CONTAINS(p.out, "127.0.0.1:");
    TAP_CONTAINS(p.out, "->8080");
    proc_free(&p);
    SBX_EXPECT(0, "rm", "-f", pid_);
    p = SBX("inspect", "web", "nosuch");
    EXPECT_CODE(p, 3);
    TAP_CONTAINS(p.err, "no such box: 'nosuch'");
    json_t *v = parse_json(p.out);
    TAP_EQ_INT(json_array_size(v), 1);
    json_t *r = json_array_get(v, 0);
    TAP_EQ_STR(json_string_value(json_object_get(r, "id")), id);
    TAP_EQ_STR(json_string_value(json_object_get(r, "status")), "running");
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(r, "labels"), "name")), "web");
    json_decref(v);
    proc_free(&p);

    /* run -d: CMD (argv, no shell) is the service; the box is kept and named. */
    char svc[256];
    create_into(svc, sizeof(svc),
                (const char *const[]){ "run", "-d", "--name", "svc", "--", "sh", "-c",
                                       "echo up; exec sleep 1000", NULL });
    p = SBX("logs", "svc");
    for (int i = 0; i < 600 && !strstr(p.out, "up"); i++) { /* the test's alarm is the bound */
        proc_free(&p);
        usleep(50000);
        p = SBX("logs", "svc");
    }
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "up\n");
    proc_free(&p);
    SBX_EXPECT_ERR(2, "-d makes CMD the box's service", "run", "-d", "-t", "--", "true");
    SBX_EXPECT_ERR(2, "--rm with -d", "run", "-d", "--rm", "--", "true");
    SBX_EXPECT_ERR(2, "--name names a kept box", "run", "--name", "x", "--", "true");
    TAP_EQ_INT(records(), 2);

    /*
     * CMD runs as argv, without a shell, as docker exec runs it: an image
     * with no shell at all (one static program) runs words that need quoting,
     * and a missing program is the shell's 127; a word that asks for the
     * shell (cd, VAR=value) still goes to it, and says there is none.
     */
    char img[600], prog[700];
    snprintf(img, sizeof(img), "%s/noshell", tap_tmpdir());
    snprintf(prog, sizeof(prog), "%s/bin/echo", img);
    char out_[256];
    TAP_EQ_INT(run_cmd(out_, sizeof(out_), "mkdir -p %s/bin && cp /bin/busybox %s", img, prog), 0);
    p = SBX("run", "--image", img, "--", "echo", "a  b", "$HOME");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "a  b $HOME\n");
    proc_free(&p);
    p = SBX("run", "--image", img, "--", "nosuch", "x");
    EXPECT_CODE(p, 127);
    TAP_CONTAINS(p.err, "nosuch: command not found");
    proc_free(&p);
    p = SBX("run", "--image", img, "--", "cd", "/");
    EXPECT_CODE(p, 125);
    TAP_CONTAINS(p.err, "cannot run /bin/sh");
    proc_free(&p);
    p = SBX("run", "--", "X=1", "sh", "-c", "echo $X");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "1\n");
    proc_free(&p);

    /* rm -f is stop --force; by name. */
    SBX_EXPECT(0, "rm", "-f", "web", "svc");
    TAP_EQ_INT(records(), 0);
    p = SBX("exec", "web", "--", "true");
    EXPECT_CODE(p, 3);
    proc_free(&p);
}

/*
 * stats (docker stats): a box's memory against its limit and its processes,
 * from its groups; CPU % from two readings. A provider that keeps no such
 * accounts shows "--" and says so.
 */
static void test_linux_stats(void)
{
    need_linux();
    char id[256];
    create_into(id, sizeof(id), (const char *const[]){"create", "--name", "st", "--memory", "64",
                                                      NULL});
    /* Something to count: a process that stays, and memory it holds. */
    struct proc p = SBX("exec", "-d", "st", "--", "sh", "-c",
                        "x=$(head -c 8000000 /dev/zero | tr '\\0' a); sleep 600");
    EXPECT_CODE(p, 0);
    proc_free(&p);
    p = SBX("stats", "--json", "st");
    EXPECT_CODE(p, 0);
    json_t *v = json_loads(p.out, 0, NULL);
    json_t *r = json_array_get(v, 0);
    TAP_EQ_STR(json_string_value(json_object_get(r, "id")), id);
    TAP_EQ_STR(json_string_value(json_object_get(r, "name")), "st");
    TAP_EQ_INT(json_integer_value(json_object_get(r, "memory_limit")), 64LL << 20);
    TAP_TRUE(json_integer_value(json_object_get(r, "memory_bytes")) > 0);
    TAP_TRUE(json_integer_value(json_object_get(r, "pids")) >= 2);
    TAP_TRUE(json_is_number(json_object_get(r, "cpu_percent")));
    json_decref(v);
    proc_free(&p);
    p = SBX("stats", "--no-stream");
    EXPECT_CODE(p, 0);
    TAP_CONTAINS(p.out, "ID               NAME             CPU %    MEM USAGE / LIMIT");
    TAP_CONTAINS(p.out, id);
    TAP_CONTAINS(p.out, "/ 64MiB");
    proc_free(&p);
    SBX_EXPECT(0, "rm", "-f", "st");
    SBX_EXPECT_ERR(3, "st", "stats", "--no-stream", "st");
}

/* "name mode [-> target]" per member of the tar in `data`, one per line (static storage). */
static const char *tar_listing(const char *data, size_t len)
{
    static char out[4096];
    size_t n = 0;
    out[0] = 0;
    struct archive *a = archive_read_new();
    archive_read_support_format_tar(a);
    TAP_EQ_INT(archive_read_open_memory(a, data, len), ARCHIVE_OK);
    struct archive_entry *e;
    while (archive_read_next_header(a, &e) == ARCHIVE_OK && n < sizeof(out)) {
        const char *link = archive_entry_symlink(e);
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%s %o%s%s\n",
                              archive_entry_pathname(e), (unsigned)archive_entry_perm(e),
                              link ? " -> " : "", link ? link : "");
    }
    archive_read_free(a);
    return out;
}

/*
 * sbx cp with '-' (as docker cp): ID:PATH - writes a tar of PATH named by its
 * last component (no entry for the temp directory, setuid dropped as cp out
 * drops it); - ID:DIR unpacks a tar from stdin into DIR. No temp is left.
 */
static void test_linux_cp_tar_streams(void)
{
    need_linux();
    char id[256];
    create_into(id, sizeof(id), (const char *const[]){ "create", NULL });
    SBX_EXPECT(0, "exec", id, "--", "sh", "-c",
               "mkdir -p /d/s && printf hi > /d/s/f && chmod 4755 /d/s/f && ln -s /etc/passwd /d/l");
    struct proc p = SBX("cp", box_path(id, "/d"), "-");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(tar_listing(p.out, p.out_len),
               "./d/ 755\n./d/l 777 -> /etc/passwd\n./d/s/ 755\n./d/s/f 755\n");
    /* The same stream back in, elsewhere in the box. */
    struct proc q = SBX_STDIN(p.out, p.out_len, "cp", "-", box_path(id, "/up"));
    EXPECT_CODE(q, 0);
    proc_free(&q);
    proc_free(&p);
    p = SBX("exec", id, "--", "sh", "-c", "cat /up/d/s/f; stat -c ' %a' /up/d/s/f; readlink /up/d/l");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(p.out, "hi 755\n/etc/passwd\n");
    proc_free(&p);
    /* A file: one member, its name. */
    p = SBX("cp", box_path(id, "/d/s/f"), "-");
    EXPECT_CODE(p, 0);
    TAP_EQ_STR(tar_listing(p.out, p.out_len), "./f 755\n");
    proc_free(&p);
    p = SBX("cp", box_path(id, "/nosuch"), "-");
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "no such file or directory in the box");
    TAP_EQ_INT((int)p.out_len, 0);
    proc_free(&p);
    /* Not a tar on stdin: said, nothing made in the box. */
    p = SBX_STDIN("hello", 5, "cp", "-", box_path(id, "/bad"));
    EXPECT_CODE(p, 1);
    TAP_CONTAINS(p.err, "reading the archive from stdin");
    proc_free(&p);
    p = SBX("exec", id, "--", "test", "-e", "/bad");
    EXPECT_CODE(p, 1);
    proc_free(&p);
    TAP_EQ_INT(workspaces(), 0);
    SBX_EXPECT(0, "stop", id);
}

TAP_MAIN(TAP(test_run_exit_codes), TAP(test_run_streams_separate), TAP(test_run_binary_output),
         TAP(test_run_quoting_and_stdin), TAP(test_run_timeout), TAP(test_run_json_shape),
         TAP(test_usage_errors), TAP(test_unknown_provider), TAP(test_provider_failure_is_125),
         TAP(test_providers), TAP(test_version_and_help), TAP(test_config_file_blocks),
         TAP(test_spec_file), TAP(test_no_such_box), TAP(test_create_exec_ls_stop_fake),
         TAP(test_gc_fake), TAP(test_ls_table_escapes_labels), TAP(test_local_run_exact_output), TAP(test_local_exec_output_on_a_terminal),
         TAP_T(test_local_create_exec_cp_stop, 120), TAP(test_local_gc_after_ttl),
         TAP(test_local_library_boxes_ls_stop_gc), TAP(test_gc_reasons_of_boxes_it_races_with),
         TAP(test_local_sigint_run_leaves_nothing), TAP(test_local_sigterm_run_leaves_nothing),
         TAP(test_default_provider_is_linux), TAP(test_linux_run_exit_codes_and_streams), TAP(test_linux_volumes_caps_shm),
         TAP(test_linux_run_quoting_stdin_timeout_json),
         TAP_T(test_linux_image_import_ls_run_rm, 120), TAP_T(test_linux_create_exec_cp_ls_stop, 120),
         TAP_T(test_linux_cp_dir_without_sh_or_tar, 120),
         TAP(test_linux_library_box_seen_by_cli), TAP_T(test_linux_gc_expired_orphan_and_label, 120),
         TAP(test_linux_sigint_run_leaves_nothing), TAP_T(test_linux_run_streams_as_it_arrives, 120),
         TAP(test_linux_logs_and_service_exit), TAP(test_linux_logs_forged_lines_and_escapes),
         TAP_T(test_linux_background_processes, 120), TAP_T(test_linux_docker_habits, 120),
         TAP_T(test_linux_stats, 120),
         TAP_T(test_linux_cp_tar_streams, 120))
