/* sbx run: create a box, run one command in it, stop it; exit with the command's status. */
#include "cli/cli.h"

#include <ctype.h>
#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>

/* The exec-time options run and exec share. */
struct exec_args {
    double timeout_s; /* < 0: the library default (180 s); 0 given: none */
    bool has_timeout;
    const char *user;
    const char *cwd;
    bool no_stdin;
    bool json;
    size_t output_limit; /* 0: the provider's default */
    bool raw;            /* --raw: the command's bytes unchanged on a terminal too */
    int out_fd[3];       /* where the exec writes stdout [1] and stderr [2] */
    char **words;        /* CMD as given (NULL-ended), run as argv when no shell is meant */
};

/*
 * Whether CMD's first word asks for the shell: a keyword, a builtin with no
 * program of its own (cd, export, ...), or an assignment (VAR=value cmd).
 * Other words run as argv, without a shell, as docker exec runs CMD: images
 * without one (distroless, scratch) work, and the words arrive unquoted.
 */
static bool wants_shell(const char *first)
{
    static const char *const shell_words[] = {
        "!", "{", "}", "[[", ".", ":", "alias", "bg", "break", "case", "cd", "command",
        "continue", "coproc", "declare", "do", "done", "elif", "else", "esac", "eval", "exec",
        "exit", "export", "fg", "fi", "for", "function", "getopts", "hash", "if", "jobs",
        "let", "local", "read", "readonly", "return", "select", "set", "shift", "source",
        "then", "time", "trap", "type", "typeset", "ulimit", "umask", "unalias", "unset",
        "until", "wait", "while", NULL};
    if (!first || !*first || strchr(first, '='))
        return true;
    for (size_t i = 0; shell_words[i]; i++)
        if (!strcmp(first, shell_words[i]))
            return true;
    return false;
}

static sbx_exec_opts *make_exec_opts(const struct exec_args *a, const sbx_kv *env)
{
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (!o)
        return NULL;
    if (a->has_timeout)
        sbx_exec_opts_set_timeout(o, a->timeout_s > 0 ? a->timeout_s : -1);
    if (a->user)
        sbx_exec_opts_set_user(o, a->user);
    if (a->cwd)
        sbx_exec_opts_set_cwd(o, a->cwd);
    if (a->words && !wants_shell(a->words[0]) &&
        sbx_exec_opts_set_argv(o, (const char *const *)a->words) < 0) {
        sbx_exec_opts_free(o);
        return NULL;
    }
    for (size_t i = 0; env && i < env->len; i++)
        sbx_exec_opts_set_env(o, env->keys[i], env->values[i]);
    /*
     * stdin is streamed to the command as it arrives (never read whole into
     * memory first): a command that does not read it runs at once, and
     * `cat /dev/zero | sbx run ...` holds a bounded amount.
     */
    if (!a->no_stdin && cli_stdin_given())
        sbx_exec_opts_set_stdin_fd(o, 0);
    if (a->output_limit)
        sbx_exec_opts_set_output_limit(o, a->output_limit);
    /*
     * Output is printed as it arrives (first bytes before the command ends),
     * straight to our stdout and stderr; --json collects it into one object.
     */
    if (!a->json) {
        sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, a->out_fd[SBX_STREAM_STDOUT]);
        sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDERR, a->out_fd[SBX_STREAM_STDERR]);
        sbx_exec_opts_set_keep_output(o, 0);
    }
    return o;
}

/*
 * Runs `command` in `sb` (started or connected) and prints the result.
 * Shared by run and exec. Returns the exit code, or -1 when interrupted.
 */
static int exec_and_print(sbx_sandbox *sb, const char *command, struct exec_args *a,
                          const sbx_kv *env, sbx_exec_result **result)
{
    /*
     * [term] To a terminal, the command's bytes pass through a filter that
     * neutralises control sequences (term.c); --raw, a pipe or a file: as
     * they are. --json escapes them in its strings already.
     */
    struct cli_tty_pipe *tp[3] = { NULL, NULL, NULL };
    a->out_fd[SBX_STREAM_STDOUT] = STDOUT_FILENO;
    a->out_fd[SBX_STREAM_STDERR] = STDERR_FILENO;
    for (int s = SBX_STREAM_STDOUT; s <= SBX_STREAM_STDERR && !a->json; s++) {
        if (cli_tty_pipe_start(s == SBX_STREAM_STDOUT ? STDOUT_FILENO : STDERR_FILENO, a->raw,
                               &tp[s], &a->out_fd[s]) < 0) {
            cli_error("cannot set up the terminal's output: %s", strerror(errno));
            cli_tty_pipe_end(tp[SBX_STREAM_STDOUT]);
            return CLI_EXIT_SBX;
        }
    }
    sbx_exec_opts *o = make_exec_opts(a, env);
    sbx_future *f = NULL;
    sbx_error *e = NULL;
    int rc = o ? sbx_sandbox_exec_async(sb, command, o, &f, &e) : SBX_ENOMEM;
    sbx_exec_opts_free(o);
    if (rc == SBX_OK) {
        rc = cli_wait(f, &e);
        if (rc == SBX_OK)
            rc = sbx_future_take_exec_result(f, result, &e);
        sbx_future_free(f);
    }
    /* The exec has written everything (or was cancelled): the filters write the rest. */
    cli_tty_pipe_end(tp[SBX_STREAM_STDOUT]);
    cli_tty_pipe_end(tp[SBX_STREAM_STDERR]);
    if (!o)
        return CLI_EXIT_SBX;
    if (cli_signal_received()) {
        sbx_error_free(e);
        return -1;
    }
    if (rc == SBX_EIO && sbx_error_errno(e) == EPIPE && !a->json) {
        /*
         * Our reader went away (`sbx run -- yes | head -1`): the command was
         * killed, as a pipeline's writer dies of SIGPIPE; say nothing, and
         * exit as a shell reports a SIGPIPE death.
         */
        sbx_error_free(e);
        return CLI_EXIT_SIGPIPE;
    }
    if (rc < 0) {
        cli_sbx_error(e, "exec");
        return CLI_EXIT_SBX;
    }
    return CLI_EXIT_OK;
}

static int print_result(sbx_sandbox *sb, sbx_exec_result *r, const struct exec_args *a)
{
    int code = cli_print_result(sbx_sandbox_id(sb), r, a->has_timeout ? a->timeout_s : 180.0,
                                a->json, !a->json);
    sbx_exec_result_free(r);
    return code;
}

/* Parses an exec-time option (run and exec); 1 when it was one. */
static int exec_opt(const char *cmd, struct exec_args *a, int c, const char *arg)
{
    switch (c) {
    case 2001:
        if (cli_parse_seconds(arg, &a->timeout_s) < 0) {
            cli_usage_error(cmd, "--timeout expects a number of seconds, got '%s'", arg);
            return -1;
        }
        a->has_timeout = true;
        return 1;
    case 2002:
    case 'u': a->user = arg; return 1;
    case 2003: a->no_stdin = true; return 1;
    case 2007: a->raw = true; return 1;
    case CLI_OPT_JSON: a->json = true; return 1;
    case 2005:
    case 'w': a->cwd = arg; return 1;
    case 2006: {
        long long n = 0;
        if (sbx__parse_pyint(arg, &n) < 0 || n <= 0) {
            cli_usage_error(cmd, "--output-limit expects a positive number of bytes, got '%s'",
                            arg);
            return -1;
        }
        a->output_limit = (size_t)n;
        return 1;
    }
    default: return 0;
    }
}

#define EXEC_LONGOPTS                                                                              \
    { "timeout", required_argument, NULL, 2001 }, { "user", required_argument, NULL, 2002 },      \
        { "no-stdin", no_argument, NULL, 2003 }, { "json", no_argument, NULL, CLI_OPT_JSON },     \
        { "output-limit", required_argument, NULL, 2006 }, { "raw", no_argument, NULL, 2007 },  \
        { "help", no_argument, NULL, 'h' }

/* Whether `word` (no '/') is a program on this process's PATH, as a shell would find it. */
static bool on_path(const char *word)
{
    const char *path = getenv("PATH");
    if (!path || !*word || strchr(word, '/'))
        return false;
    for (const char *d = path;;) {
        size_t n = strcspn(d, ":");
        _cleanup_free_ char *f = sbx__printf("%.*s/%s", (int)n, n ? d : ".", word);
        struct stat st;
        if (f && stat(f, &st) == 0 && S_ISREG(st.st_mode) && access(f, X_OK) == 0)
            return true;
        if (!d[n])
            return false;
        d += n + 1;
    }
}

/*
 * Docker's habit, `sbx run IMAGE CMD`: sbx runs CMD words as a command in
 * the default box, so a first word that is no program here but reads as an
 * image reference (a tag, a digest or a registry path: "ubuntu:22.04",
 * "ghcr.io/org/app", "app@sha256:...") is refused with the fix instead of
 * being run. A bare word ("ubuntu") is run as the command it may be; if the
 * box then says 127 (not found), run adds the same hint (hint_image). The
 * caller has found it is no program on the PATH.
 */
static bool looks_like_image_ref(const char *w)
{
    if (!*w || *w == '/' || *w == '.' || *w == '-')
        return false;
    for (const char *c = w; *c; c++)
        if (!(isalnum((unsigned char)*c) || strchr("._-/:@", *c)))
            return false;
    return strchr(w, ':') || strchr(w, '@') || strchr(w, '/');
}

static void hint_image(const char *word, int more)
{
    fprintf(stderr,
            "sbx: hint: sbx run takes the command first; to run it in the image '%s': "
            "sbx run --image %s -- %s\n",
            word, word, more ? "CMD..." : "(its command)");
}

/*
 * The command of `run --image IMAGE` with no CMD: the image's Entrypoint then
 * Cmd (as docker run IMAGE), each word quoted as CMD's are. Asked once the
 * box has started (a registry image is pulled by then). NULL, said, when
 * the provider cannot say or the image names neither.
 */
static char *image_command(sbx_provider *p, const char *image)
{
    char *text = NULL;
    sbx_error *e = NULL;
    int rc = sbx_provider_image_inspect(p, image, &text, &e);
    if (rc < 0) {
        cli_error("no command given, and the image's own could not be read (%s): give one "
                  "(sbx run --image %s -- CMD...)",
                  e ? sbx_error_message(e) : sbx_strerror(rc), image);
        sbx_error_free(e);
        return NULL;
    }
    _cleanup_json_ json_t *v = json_loads(text, 0, NULL);
    free(text);
    json_t *cfg = json_object_get(v, "config");
    json_t *parts[2] = { json_object_get(cfg, "Entrypoint"), json_object_get(cfg, "Cmd") };
    size_t n = json_array_size(parts[0]) + json_array_size(parts[1]);
    _cleanup_free_ char **words = calloc(n + 1, sizeof(*words));
    size_t k = 0;
    for (int j = 0; j < 2 && words; j++) {
        size_t i;
        json_t *w;
        json_array_foreach(parts[j], i, w)
        {
            if (json_is_string(w))
                words[k++] = (char *)json_string_value(w);
        }
    }
    if (!words || k == 0) {
        cli_error("no command given, and image %s has neither Entrypoint nor Cmd: give one "
                  "(sbx run --image %s -- CMD...)",
                  image, image);
        return NULL;
    }
    return cli_join_argv(words, (int)k);
}

int cli_cmd_run(int argc, char **argv)
{
    /* --rm (docker run --rm) is what run does anyway: accepted, nothing to do. */
    static const struct option longopts[] = {
        CLI_SPEC_LONGOPTS,
        EXEC_LONGOPTS,
        { "rm", no_argument, NULL, 2008 },
        { "detach", no_argument, NULL, 'd' },
        { "name", required_argument, NULL, 2009 },
        { "entrypoint", required_argument, NULL, 2010 },
        { 0 },
    };
    _cleanup_spec_opts_ struct cli_spec_opts so = { 0 };
    struct exec_args a = { 0 };
    bool tty = false, detach = false, rm = false;
    const char *name = NULL, *entrypoint = NULL;
    int c, rc = CLI_EXIT_OK;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:he:v:itdp:w:u:", longopts, NULL)) != -1) {
        if (c == 'h') {
            cli_help("run");
            return CLI_EXIT_OK;
        }
        if (c == 2008) {
            rm = true;
            continue;
        }
        if (c == 'd') {
            detach = true;
            continue;
        }
        if (c == 2009) {
            name = optarg;
            continue;
        }
        if (c == 2010) {
            if (!*optarg)
                return cli_usage_error("run", "--entrypoint needs a program");
            entrypoint = optarg;
            continue;
        }
        /* -i: stdin is passed anyway; -t: CMD runs on a terminal. */
        if (c == 'i')
            continue;
        if (c == 't') {
            tty = true;
            continue;
        }
        int r = cli_spec_opt("run", &so, c, optarg);
        if (r == 0)
            r = exec_opt("run", &a, c, optarg);
        if (r == 0)
            return cli_bad_option("run", c, argv);
        if (r < 0)
            return CLI_EXIT_USAGE;
    }
    /*
     * -d (docker run -d): CMD is the box's service (its entrypoint, argv as
     * given, `sbx logs` shows it) and the box is kept, as `sbx create` keeps
     * it; the id is printed. What only a command run here has does not apply.
     */
    /*
     * --entrypoint PROG (docker run --entrypoint): PROG then CMD's words run,
     * and the image's own Entrypoint and Cmd do not (docker drops the image's
     * Cmd too). `words` is what runs: argv's own array, or one with PROG first.
     */
    _cleanup_free_ char **with_ep = NULL;
    char **words = optind < argc ? argv + optind : NULL;
    int nwords = argc - optind;
    if (entrypoint) {
        if (!(with_ep = calloc((size_t)nwords + 2, sizeof(*with_ep))))
            return CLI_EXIT_SBX;
        with_ep[0] = (char *)entrypoint;
        for (int i = 0; i < nwords; i++)
            with_ep[i + 1] = argv[optind + i];
        words = with_ep;
        nwords++;
    }
    if (detach) {
        if (tty || a.has_timeout || a.user || a.cwd || a.no_stdin || a.raw || a.output_limit)
            return cli_usage_error("run", "-d makes CMD the box's service: -t, --timeout, "
                                          "--user, --cwd, --no-stdin, --raw and --output-limit "
                                          "apply to a command run here, not to it");
        if (rm)
            return cli_usage_error("run", "--rm with -d: a kept box is not removed when its service "
                                          "ends (not built); give it --ttl S, or sbx rm it");
        return cli_create_box("run", &so, name, a.json, words);
    }
    if (name)
        return cli_usage_error("run", "--name names a kept box: with -d, or use sbx create --name");
    /* No CMD with --image: the image's own command (image_command), as docker run IMAGE. */
    bool image_cmd = !words && so.image;
    if (!words && !image_cmd)
        return cli_usage_error("run", "no command given (with --image IMAGE and no CMD, "
                                      "the image's Entrypoint and Cmd run)");
    /* No image named: CMD's first word may be one (Docker's `run IMAGE CMD`). */
    const char *first = image_cmd ? "" : words[0];
    bool no_image = !so.image && !so.spec_file, found = no_image && on_path(first);
    bool bare_first = no_image && !found && !strchr(first, '/');
    if (no_image && !found && looks_like_image_ref(first))
        return cli_usage_error("run",
                               "'%s' is no command here but names an image; did you mean "
                               "sbx run --image %s -- %s?",
                               first, first, nwords > 1 ? "CMD..." : "CMD");
    if (tty && (rc = cli_pty_need_tty("run -t")) != CLI_EXIT_OK)
        return rc;
    _cleanup_free_ char *command = image_cmd ? NULL : cli_join_argv(words, nwords);
    _cleanup_free_ char *config = NULL;
    sbx_spec *spec = NULL;
    rc = cli_spec_build("run", &so, &config, &spec);
    if (rc != CLI_EXIT_OK)
        return rc;
    if ((!command && !image_cmd) || cli_signals_install() < 0) {
        sbx_spec_free(spec);
        cli_error("cannot set up: %s", strerror(errno));
        return CLI_EXIT_SBX;
    }

    sbx_provider *p = NULL;
    if ((rc = cli_provider_new(config, &p)) != CLI_EXIT_OK) {
        sbx_spec_free(spec);
        return rc;
    }
    sbx_error *e = NULL;
    sbx_sandbox *sb = NULL;
    /* The box dies with this process, even by SIGKILL (the shim sees its socket close). */
    rc = cli_die_with_creator(spec, &e);
    if (rc == SBX_OK)
        rc = cli_box_start(p, spec, &sb, &e);
    sbx_spec_free(spec);
    if (rc < 0 || cli_signal_received()) {
        /* Freeing stops whatever the start left running. */
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
        if (cli_signal_received()) {
            sbx_error_free(e);
            return cli_interrupted("no box was left running");
        }
        cli_sbx_error(e, "starting the box");
        return CLI_EXIT_SBX;
    }
    if (image_cmd && !(command = image_command(p, so.image))) {
        sbx_sandbox_free(sb); /* stops it */
        sbx_provider_free(p);
        return CLI_EXIT_USAGE;
    }

    sbx_exec_result *r = NULL;
    if (tty) {
        /* The box dies with this process: no detach keys (they would leave nothing to attach to). */
        rc = cli_pty_run(sb, sbx_sandbox_id(sb), command, a.cwd, a.user, NULL, false);
        if (sbx_sandbox_stop(sb, &e) < 0) {
            cli_error("stopping box %s failed: %s", sbx_sandbox_id(sb),
                      e ? sbx_error_message(e) : "unknown error");
            sbx_error_free(e);
        }
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
        return rc;
    }
    a.words = image_cmd ? NULL : words;
    rc = exec_and_print(sb, command, &a, NULL, &r);
    /* Stop before printing: the box is gone whatever happens to our stdout. */
    if (sbx_sandbox_stop(sb, &e) < 0) {
        cli_error("stopping box %s failed: %s", sbx_sandbox_id(sb),
                  e ? sbx_error_message(e) : "unknown error");
        sbx_error_free(e);
    }
    if (rc < 0) {
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
        return cli_interrupted("the box was stopped");
    }
    if (rc == CLI_EXIT_OK) {
        rc = print_result(sb, r, &a);
        /* 127: the box found no such program; a bare first word may have meant an image. */
        if (rc == 127 && bare_first && !a.json)
            hint_image(first, nwords > 1);
    }
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    return rc;
}

int cli_cmd_exec(int argc, char **argv)
{
    static const struct option longopts[] = {
        EXEC_LONGOPTS, { "cwd", required_argument, NULL, 2005 },
        { "workdir", required_argument, NULL, 2005 }, { "env", required_argument, NULL, 'e' }, { 0 }
    };
    struct exec_args a = { 0 };
    sbx_kv env = { 0 };
    const char *id = NULL;
    bool tty = false, detach = false;
    int c, rc = CLI_EXIT_OK;
    opterr = 0;
    /* Options may come before the ID and between it and the command. */
    for (int phase = 0; phase < 2; phase++) {
        while ((c = getopt_long(argc, argv, "+:he:itdw:u:", longopts, NULL)) != -1) {
            int r;
            if (c == 'd') { /* [procs] a background process (procs.c) */
                detach = true;
                continue;
            }
            /* -i: stdin is passed anyway (--no-stdin turns it off); -t: a terminal. */
            if (c == 'i')
                continue;
            if (c == 't') {
                tty = true;
                continue;
            }
            if (c == 'h') {
                cli_help("exec");
                sbx__kv_free(&env);
                return CLI_EXIT_OK;
            }
            if (c == 'e') {
                if (cli_add_env("exec", &env, optarg) < 0) {
                    sbx__kv_free(&env);
                    return CLI_EXIT_USAGE;
                }
                continue;
            }
            if ((r = exec_opt("exec", &a, c, optarg)) <= 0) {
                sbx__kv_free(&env);
                return r < 0 ? CLI_EXIT_USAGE : cli_bad_option("exec", c, argv);
            }
        }
        if (phase == 1 || optind >= argc)
            break;
        /* getopt stopped at the ID (or after a "--" that came before it). */
        bool after_dashes = optind > 1 && !strcmp(argv[optind - 1], "--");
        id = argv[optind++];
        if (after_dashes) {
            if (optind < argc && !strcmp(argv[optind], "--"))
                optind++;
            break;
        }
    }
    if (!id) {
        sbx__kv_free(&env);
        return cli_usage_error("exec", "no box ID given");
    }
    if (optind >= argc) {
        sbx__kv_free(&env);
        return cli_usage_error("exec", "no command given");
    }
    _cleanup_free_ char *command = cli_join_argv(argv + optind, argc - optind);
    if (tty && !detach && (rc = cli_pty_need_tty("exec -t")) != CLI_EXIT_OK) {
        sbx__kv_free(&env);
        return rc;
    }
    _cleanup_json_ json_t *rec = NULL;
    if ((rc = cli_box_find(id, &rec)) != CLI_EXIT_OK) {
        sbx__kv_free(&env);
        return rc;
    }
    if (!command || cli_signals_install() < 0) {
        sbx__kv_free(&env);
        cli_error("cannot set up: %s", strerror(errno));
        return CLI_EXIT_SBX;
    }
    sbx_error *e = NULL;
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    if (cli_box_connect(rec, &p, &sb, &e) < 0) {
        sbx__kv_free(&env);
        if (cli_signal_received()) {
            sbx_error_free(e);
            return cli_interrupted("nothing was run");
        }
        /* Recorded but gone (stopped, TTL passed): "no such box", as without a record. */
        int code = sbx_error_code(e) == SBX_ENOENT ? CLI_EXIT_NOBOX : CLI_EXIT_SBX;
        cli_sbx_error(e, "connecting to the box");
        return code;
    }
    /* The box's own env (from create), then -e on top. */
    sbx_kv all_env = { 0 };
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(rec, "env"), k, v)
    {
        if (json_is_string(v))
            sbx__kv_set(&all_env, k, json_string_value(v));
    }
    for (size_t i = 0; i < env.len; i++)
        sbx__kv_set(&all_env, env.keys[i], env.values[i]);
    sbx__kv_free(&env);
    if (detach || tty) {
        /* The same box env and -e as a plain exec, on a terminal or in the background. */
        rc = detach ? cli_proc_start(sb, command, a.cwd, a.user, &all_env, tty)
                    : cli_pty_run(sb, id, command, a.cwd, a.user, &all_env, true);
        sbx__kv_free(&all_env);
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
        return rc;
    }
    sbx_exec_result *r = NULL;
    a.words = argv + optind;
    rc = exec_and_print(sb, command, &a, &all_env, &r);
    sbx__kv_free(&all_env);
    if (rc < 0)
        rc = cli_interrupted("the command was cancelled; the box lives on");
    else if (rc == CLI_EXIT_OK)
        rc = print_result(sb, r, &a);
    /* A connected handle only releases itself: the box lives on. */
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    return rc;
}
