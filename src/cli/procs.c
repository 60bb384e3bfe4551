/*
 * Background processes and process listings (docs/terminals.md,
 * "Background processes"; docs/cli.md):
 *
 *   sbx exec -d ID -- CMD          start CMD in the background, print its number
 *   sbx top [--sessions] ID        the box's processes (as docker top), or its sessions
 *   sbx attach --no-stdin ID N     a background process's output, followed to its end
 *   sbx attach --no-follow ID N    its output so far (it stays listed)
 *   sbx wait ID N                  wait for its end, print its exit status
 *   sbx kill [-s SIG] ID N         send it a signal (default KILL)
 *
 * A background process is a pipe-mode session of the box's agent
 * (sbx_proc_*), so all of these work from any process, later.
 */
#include "cli/cli.h"

#include <getopt.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <time.h>

static bool parse_number(const char *cmd, const char *s, unsigned *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || v == 0 || v > 0xffffffffUL) {
        cli_usage_error(cmd, "the process must be a number (from `sbx exec -d` or `sbx top "
                             "--sessions`), got '%s'",
                        s);
        return false;
    }
    *out = (unsigned)v;
    return true;
}

int cli_proc_start(sbx_sandbox *sb, const char *command, const char *cwd, const char *user,
                   const sbx_kv *env, bool tty)
{
    sbx_pty_opts *o = sbx_pty_opts_new();
    if (!o) {
        cli_error("out of memory");
        return CLI_EXIT_SBX;
    }
    sbx_pty_opts_set_command(o, command);
    if (cwd)
        sbx_pty_opts_set_cwd(o, cwd);
    if (user)
        sbx_pty_opts_set_user(o, user);
    for (size_t i = 0; env && i < env->len; i++)
        sbx_pty_opts_set_env(o, env->keys[i], env->values[i]);
    sbx_error *e = NULL;
    int rc;
    if (tty) {
        /* The size of the terminal sbx runs on, if any, so an attach from it needs no resize. */
        struct winsize ws;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
            sbx_pty_opts_set_size(o, ws.ws_row, ws.ws_col);
        sbx_pty *t = NULL;
        rc = sbx_pty_open(sb, o, &t, &e);
        sbx_pty_opts_free(o);
        if (rc < 0) {
            cli_sbx_error(e, "starting the command on a terminal");
            return CLI_EXIT_SBX;
        }
        printf("%u\n", sbx_pty_id(t));
        /* Unheld before we return, as a background process is, for an attach right after. */
        sbx_pty_detach(t, NULL);
        sbx_pty_free(t);
        return CLI_EXIT_OK;
    }
    sbx_proc *p = NULL;
    rc = sbx_proc_start(sb, o, &p, &e);
    sbx_pty_opts_free(o);
    if (rc < 0) {
        cli_sbx_error(e, "starting the process");
        return CLI_EXIT_SBX;
    }
    printf("%u\n", sbx_proc_id(p));
    /* Let it go cleanly: the agent has it unheld before we return, for an attach right after. */
    sbx_proc_detach(p, NULL);
    sbx_proc_free(p);
    return CLI_EXIT_OK;
}

/* --- top ------------------------------------------------------------------ */

static void fmt_time(json_int_t ms, char *out, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || !localtime_r(&t, &tm) || !strftime(out, cap, "%H:%M:%S", &tm))
        snprintf(out, cap, "-");
}

static void print_procs(json_t *top)
{
    printf("%-8s %-8s %-10s %-2s %10s %10s %-8s %s\n", "PID", "PPID", "USER", "S", "RSS(KiB)",
           "CPU(s)", "START", "COMMAND");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(top, "processes"), i, v)
    {
        char user[32], start[16];
        /* [term] Every string here is the box's: shown, never obeyed, one row per process. */
        _cleanup_free_ char *name = cli_field(json_string_value(json_object_get(v, "user")));
        _cleanup_free_ char *state = cli_field(json_string_value(json_object_get(v, "state")));
        _cleanup_free_ char *cmd = cli_field(json_string_value(json_object_get(v, "command")));
        if (json_string_value(json_object_get(v, "user")))
            snprintf(user, sizeof(user), "%s", name);
        else
            snprintf(user, sizeof(user), "%lld",
                     (long long)json_integer_value(json_object_get(v, "uid")));
        fmt_time(json_integer_value(json_object_get(v, "started_ms")), start, sizeof(start));
        printf("%-8lld %-8lld %-10s %-2s %10lld %10.2f %-8s %s\n",
               (long long)json_integer_value(json_object_get(v, "pid")),
               (long long)json_integer_value(json_object_get(v, "ppid")), user, state,
               (long long)json_integer_value(json_object_get(v, "rss_kib")),
               (double)json_integer_value(json_object_get(v, "cpu_ms")) / 1000.0, start, cmd);
    }
    if (json_is_true(json_object_get(top, "truncated")))
        fprintf(stderr, "sbx: the box has more processes than the 4096 listed\n");
}

static void print_sessions(json_t *arr)
{
    printf("%-6s %-8s %-5s %-9s %-10s %-8s %12s %12s %s\n", "ID", "PID", "MODE", "HELD",
           "STATE", "START", "STDOUT", "STDERR", "COMMAND");
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        char state[24], start[16];
        _cleanup_free_ char *mode = cli_field(json_string_value(json_object_get(v, "mode")));
        _cleanup_free_ char *cmd = cli_field(json_string_value(json_object_get(v, "command")));
        if (json_is_true(json_object_get(v, "running")))
            snprintf(state, sizeof(state), "running");
        else
            snprintf(state, sizeof(state), "exited(%lld)",
                     (long long)json_integer_value(json_object_get(v, "exit_code")));
        fmt_time(json_integer_value(json_object_get(v, "started_ms")), start, sizeof(start));
        printf("%-6lld %-8lld %-5s %-9s %-10s %-8s %12lld %12lld %s\n",
               (long long)json_integer_value(json_object_get(v, "id")),
               (long long)json_integer_value(json_object_get(v, "pid")),
               mode, json_is_true(json_object_get(v, "attached")) ? "attached" : "-", state, start,
               (long long)json_integer_value(json_object_get(v, "stdout_bytes")),
               (long long)json_integer_value(json_object_get(v, "stderr_bytes")), cmd);
    }
}

int cli_cmd_top(int argc, char **argv)
{
    static const struct option longopts[] = {{"sessions", no_argument, NULL, 's'},
                                             {"json", no_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {0}};
    bool sessions = false, json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        if (c == 'h') {
            cli_help("top");
            return CLI_EXIT_OK;
        }
        if (c == 's')
            sessions = true;
        else if (c == 'j')
            json = true;
        else
            return cli_bad_option("top", c, argv);
    }
    if (argc - optind != 1)
        return cli_usage_error("top", "expects one box ID");
    sbx_provider *prov = NULL;
    sbx_sandbox *sb = NULL;
    int rc = cli_box_open("top", argv[optind], &prov, &sb);
    if (rc != CLI_EXIT_OK)
        return rc;
    char *text = NULL;
    sbx_error *e = NULL;
    if ((sessions ? sbx_proc_list(sb, &text, &e) : sbx_sandbox_top(sb, &text, &e)) < 0) {
        cli_sbx_error(e, "top");
        rc = CLI_EXIT_SBX;
    } else {
        json_t *v = json_loads(text, 0, NULL);
        if (json)
            cli_print_json(v);
        else if (sessions)
            print_sessions(v);
        else
            print_procs(v);
        json_decref(v);
        sbx_free(text);
    }
    sbx_sandbox_free(sb);
    sbx_provider_free(prov);
    return rc;
}

/* --- attach (pipe mode), wait, kill --------------------------------------- */

/* [term] attach's writers of the process's output: neutralised on a terminal unless --raw. */
static bool attach_raw;
static struct cli_out attach_out[3];

/* The listing's entry for process `n` of the box (a new reference), or NULL. */
static json_t *find_session(sbx_sandbox *sb, unsigned n, sbx_error **err)
{
    char *text = NULL;
    if (sbx_proc_list(sb, &text, err) < 0)
        return NULL;
    json_t *arr = json_loads(text, 0, NULL), *found = NULL, *v;
    sbx_free(text);
    size_t i;
    json_array_foreach(arr, i, v)
    {
        if (json_integer_value(json_object_get(v, "id")) == (json_int_t)n)
            found = json_incref(v);
    }
    json_decref(arr);
    return found;
}

/* Writes what is there of `stream` to `fd` without waiting; false once the process ended. */
static int drain(sbx_proc *p, int stream, int fd, unsigned long long limit, sbx_error **e)
{
    for (;;) {
        char buf[65536];
        size_t n = 0;
        unsigned long long off = 0;
        int rc = sbx_proc_read(p, stream, buf, sizeof(buf), 0, &n, &off, e);
        if (rc == SBX_ETIMEDOUT) {
            sbx_error_free(*e);
            *e = NULL;
            return 0;
        }
        if (rc < 0)
            return rc;
        if (n == 0)
            return 1;
        if (off >= limit)
            continue;
        if (off + n > limit)
            n = (size_t)(limit - off);
        if (cli_out_write(&attach_out[fd], buf, n) < 0)
            return SBX_EIO;
    }
}

/* Output so far: up to the byte counts the listing gave, without collecting the end. */
static int print_so_far(sbx_sandbox *sb, unsigned n, json_t *entry)
{
    unsigned long long ends[2] = {
        (unsigned long long)json_integer_value(json_object_get(entry, "stdout_bytes")),
        (unsigned long long)json_integer_value(json_object_get(entry, "stderr_bytes"))};
    sbx_proc *p = NULL;
    sbx_error *e = NULL;
    if (sbx_proc_attach(sb, n, SBX_PROC_KEEP, 0, &p, &e) < 0) {
        cli_sbx_error(e, "attach");
        return CLI_EXIT_SBX;
    }
    for (int k = 0; k < 2; k++) {
        int stream = k ? SBX_STREAM_STDERR : SBX_STREAM_STDOUT;
        /* Reads until the stream reaches the count the listing saw (the window may start later). */
        while (ends[k] > 0) {
            char buf[65536];
            size_t got = 0;
            unsigned long long off = 0;
            if (sbx_proc_read(p, stream, buf, sizeof(buf), -1, &got, &off, &e) < 0) {
                cli_sbx_error(e, "reading");
                sbx_proc_free(p);
                return CLI_EXIT_SBX;
            }
            if (got == 0 || off >= ends[k])
                break;
            size_t take = off + got > ends[k] ? (size_t)(ends[k] - off) : got;
            cli_out_write(&attach_out[k ? 2 : 1], buf, take);
            if (off + got >= ends[k])
                break;
        }
    }
    sbx_proc_detach(p, NULL);
    sbx_proc_free(p);
    return CLI_EXIT_OK;
}

/* Follows to the end, forwarding our stdin unless no_stdin; exits with its status. */
static int follow(sbx_proc *p, bool no_stdin)
{
    bool in_open = !no_stdin;
    sbx_error *e = NULL;
    for (;;) {
        if (cli_signal_received()) {
            sbx_proc_detach(p, NULL);
            fprintf(stderr, "sbx: interrupted; process %u runs on\n", sbx_proc_id(p));
            return 128 + cli_signal_received();
        }
        int r0 = drain(p, SBX_STREAM_STDOUT, 1, ~0ull, &e);
        int r1 = r0 < 0 ? r0 : drain(p, SBX_STREAM_STDERR, 2, ~0ull, &e);
        if (r0 < 0 || r1 < 0) {
            cli_sbx_error(e, "attach");
            return CLI_EXIT_SBX;
        }
        if (r0 == 1 && r1 == 1) {
            int code = 0;
            if (sbx_proc_wait(p, 0, &code, &e) < 0) {
                cli_sbx_error(e, "attach");
                return CLI_EXIT_SBX;
            }
            return code;
        }
        /* A drain of stderr may have taken stdout's bytes (or the end) off the socket. */
        if (sbx__proc_ready(p) && !(r0 == 1 && r1 == 1))
            continue;
        struct pollfd pf[2] = {{.fd = in_open ? 0 : -1, .events = POLLIN},
                               {.fd = sbx_proc_fd(p), .events = POLLIN}};
        if (poll(pf, 2, -1) < 0)
            continue; /* EINTR: the signal check above */
        if (pf[0].revents & (POLLIN | POLLHUP)) {
            char in[65536];
            ssize_t n = read(0, in, sizeof(in));
            if (n < 0 && errno == EINTR)
                continue;
            int rc = n > 0 ? sbx_proc_write(p, in, (size_t)n, &e) : sbx_proc_close_stdin(p, &e);
            if (n <= 0)
                in_open = false;
            if (rc < 0) {
                /* The process may have just ended: its end is read on the next turn. */
                sbx_error_free(e);
                e = NULL;
                in_open = false;
            }
        }
    }
}

bool cli_proc_is_pipe(sbx_sandbox *sb, unsigned n)
{
    /* An agent without listings (protocol 3) has terminals only: the answer is no. */
    json_t *entry = find_session(sb, n, NULL);
    const char *mode = entry ? json_string_value(json_object_get(entry, "mode")) : NULL;
    bool pipe = mode && !strcmp(mode, "pipe");
    json_decref(entry);
    return pipe;
}

bool cli_attach_opts(int argc, char **argv, bool *no_stdin, bool *no_follow, int *exit_code)
{
    static const struct option longopts[] = {{"no-stdin", no_argument, NULL, 1},
                                             {"no-follow", no_argument, NULL, 2},
                                             {"raw", no_argument, NULL, 3},
                                             {"help", no_argument, NULL, 'h'},
                                             {0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        if (c == 'h') {
            cli_help("attach");
            *exit_code = CLI_EXIT_OK;
            return false;
        }
        if (c == 1)
            *no_stdin = true;
        else if (c == 2)
            *no_follow = true;
        else if (c == 3)
            attach_raw = true;
        else {
            *exit_code = cli_bad_option("attach", c, argv);
            return false;
        }
    }
    return true;
}

int cli_proc_attach(sbx_sandbox *sb, const char *id, unsigned n, bool no_stdin, bool no_follow)
{
    sbx_error *e = NULL;
    json_t *entry = find_session(sb, n, &e);
    if (!entry) {
        if (e)
            cli_sbx_error(e, "attach");
        else
            cli_error("box %s has no process or session %u (see `sbx top --sessions %s`)", id, n,
                      id);
        return CLI_EXIT_FAIL;
    }
    int rc;
    cli_out_init(&attach_out[1], STDOUT_FILENO, attach_raw);
    cli_out_init(&attach_out[2], STDERR_FILENO, attach_raw);
    if (no_follow) {
        rc = print_so_far(sb, n, entry);
        cli_out_flush(&attach_out[1]);
        cli_out_flush(&attach_out[2]);
        json_decref(entry);
        return rc;
    }
    json_decref(entry);
    sbx_proc *p = NULL;
    /* Takeover, as docker attach: whoever held it is let go. The end is collected. */
    if (sbx_proc_attach(sb, n, SBX_PROC_TAKEOVER, 0, &p, &e) < 0) {
        cli_sbx_error(e, "attach");
        return CLI_EXIT_SBX;
    }
    rc = follow(p, no_stdin);
    cli_out_flush(&attach_out[1]);
    cli_out_flush(&attach_out[2]);
    sbx_proc_free(p);
    return rc;
}

/* The common start of wait and kill: the box and the process number. */
static int box_and_number(const char *cmd, int argc, char **argv, sbx_provider **prov,
                          sbx_sandbox **sb, unsigned *n)
{
    if (argc - optind != 2)
        return cli_usage_error(cmd, "expects a box ID and a process number");
    if (!parse_number(cmd, argv[optind + 1], n))
        return CLI_EXIT_USAGE;
    return cli_box_open(cmd, argv[optind], prov, sb);
}

int cli_cmd_wait(int argc, char **argv)
{
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'}, {0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        if (c == 'h') {
            cli_help("wait");
            return CLI_EXIT_OK;
        }
        return cli_bad_option("wait", c, argv);
    }
    sbx_provider *prov = NULL;
    sbx_sandbox *sb = NULL;
    unsigned n = 0;
    int rc = box_and_number("wait", argc, argv, &prov, &sb, &n);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (cli_signals_install() < 0) {
        cli_error("cannot set up: %s", strerror(errno));
        rc = CLI_EXIT_SBX;
        goto out;
    }
    sbx_proc *p = NULL;
    sbx_error *e = NULL;
    /* No takeover: a handle that holds it keeps it (its holder waits instead). */
    if (sbx_proc_attach(sb, n, 0, 0, &p, &e) < 0) {
        cli_sbx_error(e, "wait");
        rc = CLI_EXIT_SBX;
        goto out;
    }
    for (;;) {
        int code = 0;
        /* Short slices, so that SIGINT is noticed (the wait itself has no limit). */
        int r = sbx_proc_wait(p, 0.2, &code, &e);
        if (r == SBX_OK) {
            printf("%d\n", code);
            break;
        }
        if (r != SBX_ETIMEDOUT) {
            cli_sbx_error(e, "wait");
            rc = CLI_EXIT_SBX;
            break;
        }
        sbx_error_free(e);
        e = NULL;
        /* Output is not shown here: drop what arrived so the handle's buffer stays small. */
        char sink[65536];
        size_t got;
        for (int k = 0; k < 2; k++)
            while (sbx_proc_read(p, k ? SBX_STREAM_STDERR : SBX_STREAM_STDOUT, sink,
                                 sizeof(sink), 0, &got, NULL, NULL) == SBX_OK &&
                   got)
                ;
        if (cli_signal_received()) {
            sbx_proc_detach(p, NULL);
            rc = cli_interrupted("the process runs on");
            break;
        }
    }
    sbx_proc_free(p);
out:
    sbx_sandbox_free(sb);
    sbx_provider_free(prov);
    return rc;
}

int cli_cmd_kill(int argc, char **argv)
{
    static const struct option longopts[] = {{"signal", required_argument, NULL, 's'},
                                             {"help", no_argument, NULL, 'h'},
                                             {0}};
    const char *sig = "KILL";
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:hs:", longopts, NULL)) != -1) {
        if (c == 'h') {
            cli_help("kill");
            return CLI_EXIT_OK;
        }
        if (c == 's')
            sig = optarg;
        else
            return cli_bad_option("kill", c, argv);
    }
    sbx_provider *prov = NULL;
    sbx_sandbox *sb = NULL;
    unsigned n = 0;
    int rc = box_and_number("kill", argc, argv, &prov, &sb, &n);
    if (rc != CLI_EXIT_OK)
        return rc;
    sbx_proc *p = NULL;
    sbx_error *e = NULL;
    /* KEEP: sending a signal does not collect its end; `sbx wait` still can. */
    if (sbx_proc_attach(sb, n, SBX_PROC_KEEP, ~0ull >> 2, &p, &e) < 0 ||
        sbx_proc_signal(p, sig, &e) < 0) {
        int code = e && sbx_error_code(e) == SBX_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_SBX;
        cli_sbx_error(e, "kill");
        rc = code;
    } else {
        sbx_proc_detach(p, NULL);
    }
    sbx_proc_free(p);
    sbx_sandbox_free(sb);
    sbx_provider_free(prov);
    return rc;
}
