/*
 * sbx shell ID, sbx exec -it ID -- CMD, sbx attach ID SESSION: a terminal in
 * a box (docs/terminals.md). The local terminal goes raw, its size follows
 * (at start and on SIGWINCH), keys go to the box as bytes, and the terminal
 * is restored however this ends (exit, SIGINT/SIGTERM/SIGHUP). Ctrl-P Ctrl-Q
 * detaches as docker does: the session runs on, `sbx attach` comes back.
 */
#include "cli/cli.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>

static struct termios saved_tio;
static bool tio_saved;
static volatile sig_atomic_t winch;

static void restore_tty(void)
{
    if (tio_saved) {
        tcsetattr(0, TCSADRAIN, &saved_tio);
        tio_saved = false;
    }
}

static void on_winch(int sig)
{
    (void)sig;
    winch = 1;
}

static void window_size(unsigned *rows, unsigned *cols)
{
    struct winsize ws;
    if (ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    } else {
        *rows = 24;
        *cols = 80;
    }
}

static int raw_mode(void)
{
    if (tcgetattr(0, &saved_tio) < 0)
        return -1;
    struct termios raw = saved_tio;
    cfmakeraw(&raw);
    if (tcsetattr(0, TCSADRAIN, &raw) < 0)
        return -1;
    tio_saved = true;
    atexit(restore_tty);
    return 0;
}

/* Writes all of buf to fd 1 (a full terminal blocks us, as it blocks docker). */
static void out_all(const char *buf, size_t n)
{
    while (n) {
        ssize_t w = write(1, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        buf += w;
        n -= (size_t)w;
    }
}

enum { SESSION_DETACHED = -1000 };

/*
 * Runs the terminal loop on `p` until the session ends (returns its exit
 * status, 128+N for a signal), the user detaches (SESSION_DETACHED), or a
 * signal / error ends it (CLI_EXIT_SBX, or 128+signal).
 */
static int terminal_loop(sbx_pty *p, bool detach_keys)
{
    struct sigaction sa = { .sa_handler = on_winch };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, NULL);
    bool prefix = false; /* Ctrl-P seen: a Ctrl-Q next detaches */
    bool stdin_open = true;
    sbx_error *e = NULL;
    for (;;) {
        if (cli_signal_received())
            return 128 + cli_signal_received();
        if (winch) {
            winch = 0;
            unsigned rows, cols;
            window_size(&rows, &cols);
            sbx_pty_resize(p, rows, cols, NULL);
        }
        /* Drain what arrived. */
        for (;;) {
            char buf[65536];
            size_t n = 0;
            int rc = sbx_pty_read(p, SBX_STREAM_STDOUT, buf, sizeof(buf), 0, &n, NULL, &e);
            if (rc == SBX_ETIMEDOUT) {
                sbx_error_free(e);
                e = NULL;
                break;
            }
            if (rc < 0) {
                restore_tty();
                cli_sbx_error(e, "terminal");
                return CLI_EXIT_SBX;
            }
            if (n == 0) {
                int code = 0;
                sbx_pty_wait(p, 0, &code, NULL);
                return code;
            }
            out_all(buf, n);
        }
        struct pollfd pf[2] = { { .fd = stdin_open ? 0 : -1, .events = POLLIN },
                                { .fd = sbx_pty_fd(p), .events = POLLIN } };
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return CLI_EXIT_SBX;
        }
        if (pf[0].revents & (POLLIN | POLLHUP)) {
            char in[4096];
            ssize_t n = read(0, in, sizeof(in));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                stdin_open = false;
                continue;
            }
            /* The docker detach keys: Ctrl-P Ctrl-Q, not forwarded. */
            char fwd[4096 + 1];
            size_t m = 0;
            for (ssize_t i = 0; i < n; i++) {
                char ch = in[i];
                if (prefix) {
                    prefix = false;
                    if (ch == 0x11)
                        return SESSION_DETACHED;
                    fwd[m++] = 0x10; /* a lone Ctrl-P goes through */
                }
                if (ch == 0x10 && detach_keys) {
                    prefix = true;
                    continue;
                }
                fwd[m++] = ch;
            }
            if (m && sbx_pty_write(p, fwd, m, &e) < 0) {
                restore_tty();
                cli_sbx_error(e, "terminal");
                return CLI_EXIT_SBX;
            }
        }
    }
}

/* Runs `p` on this terminal and turns the outcome into sbx's exit code. */
static int run_terminal(const char *id, sbx_pty *p, bool detach_keys)
{
    if (raw_mode() < 0) {
        cli_error("cannot put the terminal in raw mode: %s", strerror(errno));
        sbx_pty_close(p, NULL);
        return CLI_EXIT_SBX;
    }
    unsigned rows, cols;
    window_size(&rows, &cols);
    sbx_pty_resize(p, rows, cols, NULL);
    int code = terminal_loop(p, detach_keys);
    restore_tty();
    if (code == SESSION_DETACHED) {
        fprintf(stderr, "\r\nsbx: detached from session %u; come back with: sbx attach %s %u\n",
                sbx_pty_id(p), id, sbx_pty_id(p));
        sbx_pty_detach(p, NULL);
        sbx_pty_free(p);
        return CLI_EXIT_OK;
    }
    if (code > 128 && code < 128 + 65 && cli_signal_received()) {
        /* Ended by a signal to us: the session we hold ends too. */
        sbx_pty_close(p, NULL);
        return code;
    }
    /*
     * The session ended: closed, not just freed, so a provider that keeps
     * sessions of its own (opensandbox's DELETE) hears of it before we exit.
     */
    sbx_pty_close(p, NULL);
    return code;
}

static int need_tty(const char *cmd)
{
    if (!isatty(0)) {
        cli_error("%s: the input device is not a TTY", cmd);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

int cli_pty_need_tty(const char *cmd) { return need_tty(cmd); }

int cli_pty_run(sbx_sandbox *sb, const char *id, const char *command, const char *cwd,
                const char *user, const sbx_kv *env, bool detach_keys)
{
    sbx_pty_opts *o = sbx_pty_opts_new();
    if (!o) {
        cli_error("out of memory");
        return CLI_EXIT_SBX;
    }
    unsigned rows, cols;
    window_size(&rows, &cols);
    sbx_pty_opts_set_size(o, rows, cols);
    if (command)
        sbx_pty_opts_set_command(o, command);
    if (cwd)
        sbx_pty_opts_set_cwd(o, cwd);
    if (user)
        sbx_pty_opts_set_user(o, user);
    const char *term = getenv("TERM");
    sbx_pty_opts_set_env(o, "TERM", term && term[0] ? term : "xterm");
    for (size_t i = 0; env && i < env->len; i++)
        sbx_pty_opts_set_env(o, env->keys[i], env->values[i]);
    sbx_pty *p = NULL;
    sbx_error *e = NULL;
    int rc = sbx_pty_open(sb, o, &p, &e);
    sbx_pty_opts_free(o);
    if (rc < 0) {
        cli_sbx_error(e, "opening a terminal");
        return CLI_EXIT_SBX;
    }
    return run_terminal(id, p, detach_keys);
}

int cli_pty_exec(const char *id, const char *command, const char *cwd, const char *user,
                 const sbx_kv *env)
{
    int rc = need_tty(command ? "exec -t" : "shell");
    if (rc != CLI_EXIT_OK)
        return rc;
    _cleanup_json_ json_t *rec = NULL;
    if ((rc = cli_box_find(id, &rec)) != CLI_EXIT_OK)
        return rc;
    sbx_provider *prov = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    if (cli_box_connect(rec, &prov, &sb, &e) < 0) {
        int code = sbx_error_code(e) == SBX_ENOENT ? CLI_EXIT_NOBOX : CLI_EXIT_SBX;
        cli_sbx_error(e, "connecting to the box");
        return code;
    }
    /* The box's own env (from create), then the caller's, as a plain exec has. */
    sbx_kv all_env = { 0 };
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(rec, "env"), k, v)
    {
        if (json_is_string(v))
            sbx__kv_set(&all_env, k, json_string_value(v));
    }
    for (size_t i = 0; env && i < env->len; i++)
        sbx__kv_set(&all_env, env->keys[i], env->values[i]);
    if (cli_signals_install() < 0) {
        cli_error("cannot set up: %s", strerror(errno));
        rc = CLI_EXIT_SBX;
    } else {
        rc = cli_pty_run(sb, id, command, cwd, user, &all_env, true);
    }
    sbx__kv_free(&all_env);
    sbx_sandbox_free(sb);
    sbx_provider_free(prov);
    return rc;
}

int cli_cmd_shell(int argc, char **argv)
{
    struct cli_opts o;
    int code;
    if (!cli_parse_opts("shell", argc, argv, 0, &o, &code))
        return code;
    cli_opts_free(&o);
    if (argc - optind != 1)
        return cli_usage_error("shell", "expects one box ID");
    return cli_pty_exec(argv[optind], NULL, NULL, NULL, NULL);
}

int cli_cmd_attach(int argc, char **argv)
{
    int code;
    bool no_stdin = false, no_follow = false; /* [procs] background processes (procs.c) */
    if (!cli_attach_opts(argc, argv, &no_stdin, &no_follow, &code))
        return code;
    if (argc - optind != 2)
        return cli_usage_error("attach", "expects a box ID and a session number");
    char *end;
    unsigned long sid = strtoul(argv[optind + 1], &end, 10);
    if (!*argv[optind + 1] || *end || sid == 0 || sid > 0xffffffffUL)
        return cli_usage_error("attach", "the session must be a number, got '%s'",
                               argv[optind + 1]);
    sbx_provider *prov = NULL;
    sbx_sandbox *sb = NULL;
    int rc = cli_box_open("attach", argv[optind], &prov, &sb);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (cli_signals_install() < 0) {
        cli_error("cannot set up: %s", strerror(errno));
        return CLI_EXIT_SBX;
    }
    /* [procs] A background process (pipe mode) is followed on stdout/stderr, no terminal. */
    if (no_stdin || no_follow || cli_proc_is_pipe(sb, (unsigned)sid)) {
        rc = cli_proc_attach(sb, argv[optind], (unsigned)sid, no_stdin, no_follow);
        sbx_sandbox_free(sb);
        sbx_provider_free(prov);
        return rc;
    }
    if ((rc = need_tty("attach")) != CLI_EXIT_OK) {
        sbx_sandbox_free(sb);
        sbx_provider_free(prov);
        return rc;
    }
    sbx_pty *p = NULL;
    sbx_error *e = NULL;
    /* Takeover, as docker attach: whoever held it is told and let go. Replays the window. */
    if (sbx_pty_attach(sb, (unsigned)sid, 1, 0, &p, &e) < 0) {
        cli_sbx_error(e, "attaching");
        rc = CLI_EXIT_SBX;
    } else {
        rc = run_terminal(argv[optind], p, true);
    }
    sbx_sandbox_free(sb);
    sbx_provider_free(prov);
    return rc;
}
