/*
 * The sbx command-line tool: shared declarations of src/cli/.
 *
 * Exit codes (docs/cli.md lists them for users):
 *   run/exec      the command's own status (0-255; a signal N gives 128+N)
 *   0             success (other commands)
 *   1             the operation failed for a reason other than those below
 *                 (a copy whose source is missing, gc/stop partial failure)
 *   2             usage or configuration error: bad option or argument,
 *                 unknown provider, unreadable --config/--spec
 *   3             no such box (no record for the ID)
 *   124           the command timed out (--timeout)
 *   125           sbx or the provider failed (create, connect, transfer, ...)
 *   130, 143      interrupted by SIGINT / SIGTERM (after cleaning up)
 * 126 and 127 are never used by sbx itself: they keep the shell's meaning
 * (found but not executable / not found) for the command in the box.
 */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include "core/internal.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

/*
 * The provider used when none is named (the contract's embedded default);
 * SBX_PROVIDER in the environment overrides it.
 */
#define SBX_CLI_DEFAULT_PROVIDER "linux"

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAIL = 1,
    CLI_EXIT_USAGE = 2,
    CLI_EXIT_NOBOX = 3,
    CLI_EXIT_TIMEOUT = 124,
    CLI_EXIT_SBX = 125,
    CLI_EXIT_SIGPIPE = 141, /* 128 + SIGPIPE: stdout's reader went away mid-stream */
};

/* --- main.c: errors and usage ---------------------------------------------- */

/* "sbx: <message>\n" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints sbx_error's message (or "<what>: <default message>") and frees it. */
void cli_sbx_error(sbx_error *e, const char *what);
/* A usage error for `cmd`: message, then its usage line; returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the help text of `cmd` on stdout. */
void cli_help(const char *cmd);
/* Reports getopt's '?' or ':' result for `cmd`; returns CLI_EXIT_USAGE. */
int cli_bad_option(const char *cmd, int c, char **argv);
/*
 * sbx_provider_new for a command: on failure prints why and returns the exit
 * code (CLI_EXIT_USAGE for a bad name or config, else CLI_EXIT_SBX).
 */
int cli_provider_new(const char *config_json, sbx_provider **p);

/* --- options.c: the options commands share; spec and provider options ---- */

/* getopt values of the long options several commands take. */
enum {
    CLI_OPT_LABEL = 1012,  /* --label K=V */
    CLI_OPT_RUN_ID = 1015, /* --run-id R */
    CLI_OPT_JSON = 2004,   /* --json */
    CLI_OPT_MAX_BYTES = 2005, /* --max-bytes N (image import) */
    CLI_OPT_FORMAT = 2006,    /* --format TEMPLATE (image ls) */
    CLI_OPT_PLATFORM = 2007,  /* --platform P (image pull) */
};

/* Which of the shared options a command takes (-h/--help: every command). */
enum {
    CLI_TAKES_JSON = 1 << 0,     /* --json */
    CLI_TAKES_QUIET = 1 << 1,    /* -q, --quiet */
    CLI_TAKES_FORCE = 1 << 2,    /* -f, --force */
    CLI_TAKES_DRY_RUN = 1 << 3,  /* -n, --dry-run */
    CLI_TAKES_LABEL = 1 << 4,    /* --label K=V */
    CLI_TAKES_RUN_ID = 1 << 5,   /* --run-id R */
    CLI_TAKES_PROGRESS = 1 << 6, /* --progress, --no-progress */
    CLI_NO_OPERANDS = 1 << 7,    /* an argument after the options is a usage error */
    CLI_TAKES_MAX_BYTES = 1 << 8, /* --max-bytes N[K|M|G|T] */
    CLI_TAKES_ARCHIVE = 1 << 9,  /* -a, --archive (cp) */
    CLI_TAKES_FORMAT = 1 << 10,  /* --format TEMPLATE */
    CLI_TAKES_PLATFORM = 1 << 11, /* --platform os/arch[/variant] (image pull) */
    CLI_TAKES_ALL = 1 << 12,      /* -a, --all (ls, as docker ps -a) */
};

/* The options of the commands that make no box (ls, status, stop, gc, cp, providers, image). */
struct cli_opts {
    bool json;     /* --json */
    bool quiet;    /* -q, --quiet */
    bool force;    /* -f, --force */
    bool dry_run;  /* -n, --dry-run */
    int progress;  /* --progress: 1, --no-progress: 0, neither: -1 */
    bool archive;  /* -a, --archive */
    bool all;      /* -a, --all */
    sbx_kv labels; /* --label K=V, and --run-id R as run_id=R */
    unsigned long long max_bytes; /* --max-bytes; 0: not given */
    const char *format;           /* --format (argv's string); NULL: not given */
    const char *platform;         /* --platform; NULL: not given */
};

/*
 * Parses the options of `cmd`, those that `takes` (CLI_TAKES_*) names, into
 * `o`, which it initializes. -h/--help prints the command's help; an unknown
 * option, a missing value, a bad --label or (with CLI_NO_OPERANDS) an
 * argument is a usage error. Returns true when the command goes on (optind
 * at its first operand); false when it ends, with `*exit_code` set and `o`
 * freed.
 */
bool cli_parse_opts(const char *cmd, int argc, char **argv, unsigned takes, struct cli_opts *o,
                    int *exit_code);
void cli_opts_free(struct cli_opts *o);
#define _cleanup_cli_opts_ __attribute__((cleanup(cli_opts_free)))

struct cli_spec_opts {
    const char *provider;
    const char *config_file;
    const char *block;
    const char *spec_file;
    const char *image;
    const char *pull; /* --pull missing|always|never */
    const char *workdir;
    const char *cpu, *memory, *disk, *ttl, *ready_timeout;
    sbx_kv env;    /* -e K=V */
    sbx_kv labels; /* --label K=V */
    sbx_kv files;  /* --file REMOTE=LOCAL: remote -> local path */
    int *ports;
    size_t n_ports;
    const char **port_args;
    json_t *volumes;      /* [volumes] -v/--volume SRC:DST[:ro], as strings */
    json_t *cap_add;      /* [volumes] --cap-add CAP */
    const char *shm_size; /* [volumes] --shm-size SIZE */
    json_t *publish; /* [endpoint] -p mappings: provider_options.publish entries */
    const char *network; /* [nat] [netw] --network none|host|nat|NAME: provider_options.network */
};

/* The long options every box-making command takes (run, create). */
#define CLI_SPEC_LONGOPTS                                                                          \
    { "provider", required_argument, NULL, 1001 }, { "config", required_argument, NULL, 1002 },   \
        { "block", required_argument, NULL, 1003 }, { "spec", required_argument, NULL, 1004 },    \
        { "image", required_argument, NULL, 1005 }, { "workdir", required_argument, NULL, 1006 }, \
        { "env", required_argument, NULL, 'e' }, { "cpu", required_argument, NULL, 1007 },         \
        { "memory", required_argument, NULL, 1008 }, { "disk", required_argument, NULL, 1009 },   \
        { "ttl", required_argument, NULL, 1010 }, { "port", required_argument, NULL, 1011 },       \
        { "label", required_argument, NULL, CLI_OPT_LABEL },                                       \
        { "file", required_argument, NULL, 1013 },                                                 \
        { "ready-timeout", required_argument, NULL, 1014 },                                        \
        { "pull", required_argument, NULL, 1016 },                                                 \
        { "volume", required_argument, NULL, 'v' },                                                \
        { "cap-add", required_argument, NULL, 1030 },                                              \
        { "shm-size", required_argument, NULL, 1031 },                                             \
        { "network", required_argument, NULL, 1032 } /* [nat] [netw] */,                           \
        { "publish", required_argument, NULL, 'p' } /* [endpoint] */

/*
 * Handles one getopt result that belongs to the spec options. Returns 1 when
 * it was one (0 when not, -1 on a bad value, after printing a usage error).
 */
int cli_spec_opt(const char *cmd, struct cli_spec_opts *o, int c, const char *arg);
void cli_spec_opts_free(struct cli_spec_opts *o);
#define _cleanup_spec_opts_ __attribute__((cleanup(cli_spec_opts_free)))
/*
 * Builds the provider config (a single-key mapping as JSON) and the spec.
 * Prints the error and returns an exit code (non-zero) on failure.
 */
int cli_spec_build(const char *cmd, struct cli_spec_opts *o, char **config_json,
                   sbx_spec **spec);
/* Only the provider config (for commands without a spec). */
int cli_provider_config(const char *cmd, const char *provider, const char *config_file,
                        const char *block, char **config_json, json_t **default_metadata);
/*
 * Adds option `opt`'s "K=V" argument to `kv`. Returns 1, or -1 after a usage
 * error for `cmd` when there is no '=' (or no key).
 */
int cli_add_kv(const char *cmd, sbx_kv *kv, const char *opt, const char *arg);
/* -e: KEY=VALUE, or KEY alone for the value of $KEY (nothing when unset). Same returns. */
int cli_add_env(const char *cmd, sbx_kv *kv, const char *arg);
/* Parses a non-negative number of seconds. */
int cli_parse_seconds(const char *s, double *out);

/* argv joined with spaces, each word quoted with sbx_shell_quote. Caller frees. */
char *cli_join_argv(char *const *argv, int argc);

/* --- boxes.c: the CLI's records of boxes it created ---------------------- */

/* $SBX_STATE_DIR, /run/sbx (root) or $XDG_RUNTIME_DIR/sbx; "/boxes" under it. */
int cli_boxes_dir(char **out, sbx_error **err);
/*
 * Writes boxes/<id>.json: {id, provider, config, descriptor, labels, env,
 * created, ttl_s, image} (env, ttl_s and image from `spec`). `config` and
 * `descriptor` are JSON texts.
 */
int cli_box_save(const char *id, const char *config_json, const char *descriptor_json,
                 const sbx_kv *labels, const sbx_spec *spec, json_t **record_out,
                 sbx_error **err);
/*
 * Loads the record for `id` (exact, or a unique prefix). Returns SBX_ENOENT
 * when there is none (message says so), SBX_EINVAL when ambiguous.
 */
int cli_box_load(const char *id, json_t **record, sbx_error **err);
/*
 * cli_box_load for a command: when there is no record, prints why and
 * returns the exit code (CLI_EXIT_NOBOX when there is none, CLI_EXIT_USAGE
 * when the id is ambiguous or the records unreadable); else CLI_EXIT_OK.
 */
int cli_box_find(const char *id, json_t **record);
/*
 * cli_box_load / cli_box_find for many ids: the list of every box, when one
 * is needed, is made once into *cache (NULL at first; the caller frees it).
 */
int cli_box_load_cached(const char *id, json_t **cache, json_t **record, sbx_error **err);
int cli_box_find_cached(const char *id, json_t **cache, json_t **record);
/*
 * cli_parse_opts for a command whose operands are box IDs (status, stop):
 * at least one, exactly one with `one_id`; otherwise a usage error. Same
 * contract as cli_parse_opts (optind at the first ID).
 */
bool cli_parse_box_ids(const char *cmd, int argc, char **argv, unsigned takes, bool one_id,
                       struct cli_opts *o, int *exit_code);
/* The record's id. */
const char *cli_box_id(const json_t *record);
/* Every record, sorted by creation time. */
int cli_box_list(json_t **records, sbx_error **err);
int cli_box_remove(const char *id);
/*
 * Removes the temp files of record writes whose writer is dead (an `sbx
 * create` killed while it saved its record). Returns how many went.
 */
int cli_box_sweep_temps(void);
/* The record's provider mapping / descriptor as JSON text. Caller frees. */
char *cli_box_config(const json_t *record);
char *cli_box_descriptor(const json_t *record);
/* True when every label in `filter` matches the record's labels. */
bool cli_box_matches(const json_t *record, const sbx_kv *filter);
/* True when created + ttl_s is in the past. */
bool cli_box_expired(const json_t *record, double now);
double cli_now(void);

/*
 * Connects to the box a record names: a provider from its config and a
 * borrowed handle from its descriptor. The caller frees both.
 */
int cli_box_connect(const json_t *record, sbx_provider **p, sbx_sandbox **sb, sbx_error **err);
/*
 * Finds box `id` and connects to it: CLI_EXIT_OK with *p and *sb (the
 * caller frees both), else the exit code, the reason said as `cmd: ...`
 * (no such box: CLI_EXIT_NOBOX).
 */
int cli_box_open(const char *cmd, const char *id, sbx_provider **p, sbx_sandbox **sb);
/*
 * Makes a box of `spec` with `p` and starts it, waiting interruptibly. `*sb`
 * is set whenever the box was made, also when its start failed or was
 * interrupted: freeing it stops whatever the start left running.
 */
int cli_box_start(sbx_provider *p, const sbx_spec *spec, sbx_sandbox **sb, sbx_error **err);
/* The CLI's records plus the linux boxes that have none (cli_linux_records), by creation time. */
int cli_box_list_all(json_t **records, sbx_error **err);
/*
 * For a command: cli_box_list_all (`all`) or cli_box_list; when that fails,
 * prints why and returns CLI_EXIT_SBX; else CLI_EXIT_OK.
 */
int cli_box_records(bool all, json_t **records);

/* --- listed.c: boxes as their providers list them (provider ABI 2) ------- */

/* The provider mapping used when nothing names one ({$SBX_PROVIDER or linux: {}}). Caller frees. */
char *cli_default_config(void);
/*
 * A record, shaped like the CLI's, for every box the default provider lists
 * (for linux: every box of its state directory): {id, provider, config,
 * descriptor (what connect takes), labels (the box's metadata), env: {},
 * created, ttl_s, image, recorded: false}. Those whose id is in `skip` (an
 * array of records, may be NULL) are left out. None when it cannot list.
 */
int cli_listed_records(const json_t *skip, json_t **records, sbx_error **err);
/* Whether a provider's listing failed in this command (said on stderr then). */
bool cli_listing_failed(void);
/*
 * The live status of a record's box from its provider's list ("stopped" when
 * not listed), or NULL when that provider cannot list (connect to ask).
 */
const char *cli_listed_status(const json_t *record);
/* Stops a box by id through its provider's stop_id; SBX_ENOTSUP when it has none. */
int cli_listed_stop(const json_t *record, sbx_error **err);
/*
 * The default provider's gc (labels, dry run from `opts`), ids in `done`
 * (an object) already handled; prints (or appends to `out` with --json)
 * each collected box with its reason.
 */
int cli_listed_gc(const struct cli_opts *opts, const json_t *done, json_t *out);
/*
 * Sets provider_options.die_with_creator in `spec`: the box ends if this
 * process dies before it lets the box go (sbx_sandbox_detach). Providers
 * that do not know the option ignore it.
 */
int cli_die_with_creator(sbx_spec *spec, sbx_error **err);

/* --- wait.c: interruptible waits ---------------------------------------- */

/* Installs SIGINT/SIGTERM/SIGHUP handlers that only record the signal. */
int cli_signals_install(void);

/* --- shell.c: terminals in boxes ------------------------------------------ */

/*
 * A terminal on this one for `command` (NULL: the box's shell) in box `id`:
 * raw mode, size, detach keys. Returns the command's exit status, or the
 * CLI's code for a failure (said on stderr). Refuses a stdin that is not a TTY.
 */
int cli_pty_exec(const char *id, const char *command, const char *cwd, const char *user,
                 const sbx_kv *env);
/* The same on a box already at hand (`sbx run -it`); detach_keys: Ctrl-P Ctrl-Q detaches. */
int cli_pty_run(sbx_sandbox *sb, const char *id, const char *command, const char *cwd,
                const char *user, const sbx_kv *env, bool detach_keys);
/* CLI_EXIT_OK when stdin is a terminal, else says so (as docker) and CLI_EXIT_USAGE. */
int cli_pty_need_tty(const char *cmd);
int cli_cmd_shell(int argc, char **argv);
int cli_cmd_attach(int argc, char **argv);
/* The first signal received, or 0. */
int cli_signal_received(void);
/*
 * Waits for `f`. When a signal arrives first, the operation is cancelled
 * and waited for; the return is then the operation's code (often
 * SBX_ECANCELED) and cli_signal_received() tells why.
 */
int cli_wait(sbx_future *f, sbx_error **err);
/*
 * Reports that a signal interrupted the command ("interrupted by SIGINT;
 * <what>", `what` may be NULL) and returns the exit code 128+N.
 */
int cli_interrupted(const char *what);

/* --- term.c: a box's output on our terminal (docs/cli.md) ------------------ */

#include "core/termesc.h"

/* A writer of a box's bytes to `fd`: neutralised when `fd` is a terminal and not raw. */
struct cli_out {
    int fd;
    bool clean; /* a terminal, and --raw not given */
    sbx_termesc esc;
};
void cli_out_init(struct cli_out *o, int fd, bool raw);
/* 0, or -1 with errno (the write failed; EPIPE: the reader went away). */
int cli_out_write(struct cli_out *o, const void *data, size_t len);
/* Writes what the filter held (a CR or a UTF-8 sequence cut short at the end). */
int cli_out_flush(struct cli_out *o);
/*
 * For an exec's output to `fd`: when `fd` is a terminal and not `raw`, a
 * pipe whose bytes a thread writes to `fd` neutralised; *wfd is the fd to
 * give the exec (`fd` itself otherwise, and *tp NULL). -1 with errno on
 * failure. cli_tty_pipe_end, after the exec completed, writes the rest.
 */
struct cli_tty_pipe;
int cli_tty_pipe_start(int fd, bool raw, struct cli_tty_pipe **tp, int *wfd);
void cli_tty_pipe_end(struct cli_tty_pipe *tp);
/* A table field from a box (a command line, a user name): controls shown, never obeyed. */
char *cli_field(const char *s);

/* --- output.c ----------------------------------------------------------- */

/* Writes all bytes to fd (retrying short writes and EINTR). */
int cli_write_all(int fd, const void *data, size_t len);
/* Prints a JSON value (indented) and a newline on stdout. */
int cli_print_json(const json_t *v);
/*
 * Prints an exec result as the command's bytes (or JSON with `json`) and
 * returns the exit code run/exec use: the command's status, 124 on
 * timeout, 128+N for a signal.
 */
/*
 * `streamed`: the output already went to fds 1 and 2 as it arrived (the
 * result carries none); only sbx's own messages are printed then.
 */
int cli_print_result(const char *id, const sbx_exec_result *r, double timeout_s, bool json,
                     bool streamed);
/* True when stdin is not a terminal and is open: it is then streamed to the command. */
bool cli_stdin_given(void);

/* create.c: the handles `sbx create` leaves open on exit (globals: reachable for leak checkers). */

/* --- commands ------------------------------------------------------------ */

int cli_cmd_run(int argc, char **argv);
int cli_cmd_create(int argc, char **argv);
/*
 * Creates a box from `so` (named `name`, or NULL), records it and prints its
 * id (or its record with `json`); `entrypoint` (NULL-ended, or NULL) is its
 * service (run -d). `cmd` names the command in messages. Returns the exit code.
 */
int cli_create_box(const char *cmd, struct cli_spec_opts *so, const char *name, bool json,
                   char *const *entrypoint);
int cli_cmd_exec(int argc, char **argv);
int cli_cmd_cp(int argc, char **argv);
int cli_cmd_ls(int argc, char **argv);
int cli_cmd_status(int argc, char **argv);
/* One row of `sbx gc`'s table (BOX, REASON and a note), under a header printed once. */
void cli_gc_row(const char *id, const char *reason, const char *note);
int cli_cmd_inspect(int argc, char **argv);
int cli_cmd_stop(int argc, char **argv);
int cli_cmd_gc(int argc, char **argv);
int cli_cmd_providers(int argc, char **argv);
int cli_cmd_image(int argc, char **argv);
int cli_cmd_volume(int argc, char **argv);

/* --- named.c: the create/ls/inspect/rm subcommands of a provider's named objects --- */
struct cli_named_kind {
    const char *cmd; /* "volume", "network": the command, in messages and help */
    int (*create)(sbx_provider *p, const char *name, char **json_out, sbx_error **err);
    int (*list)(sbx_provider *p, char **json_out, sbx_error **err);
    int (*inspect)(sbx_provider *p, const char *name, char **json_out, sbx_error **err);
    int (*remove)(sbx_provider *p, const char *name, int force, sbx_error **err);
    bool rm_takes_force;
    /* One row of the ls table for an object of the list; NULL: the header. */
    void (*print_row)(const json_t *item);
};
/* Runs `sbx CMD SUB ...` (argv[0] is CMD) for kind `k`. Exit code. */
int cli_named_main(const struct cli_named_kind *k, int argc, char **argv);
/* "-", the one box's id, or "N boxes": who uses an object, for an ls row. */
void cli_named_users(const json_t *boxes, char *out, size_t cap);
int cli_cmd_network(int argc, char **argv); /* [netw] */
int cli_cmd_commit(int argc, char **argv); /* [img-commit] */
int cli_cmd_logs(int argc, char **argv);   /* [svc-logs] */
/* [svc-logs] The service of a box its provider listed ({"state", "code"}), or NULL. Borrowed. */
const json_t *cli_listed_service(const json_t *record);
/* [endpoint] The box's published ports as its provider lists them ({port, host_ip, host_port}), or NULL. */
const json_t *cli_listed_ports(const json_t *record);
int cli_image_build(int argc, char **argv, sbx_provider *p); /* [img-commit] build.c */

/* --- procs.c: background processes (exec -d, top, wait, kill, attach of a pipe session) --- */

/*
 * `sbx exec -d`: starts `command` in the background, prints its number. Exit
 * code. `tty` (`exec -dt`): on a terminal of its own (a PTY session left
 * running, for `sbx attach`), not pipes.
 */
int cli_proc_start(sbx_sandbox *sb, const char *command, const char *cwd, const char *user,
                   const sbx_kv *env, bool tty);
/* True when process/session `n` of the box is a background process (pipe mode). */
bool cli_proc_is_pipe(sbx_sandbox *sb, unsigned n);
/* attach's options (--no-stdin, --no-follow); false: the command ends with *exit_code. */
bool cli_attach_opts(int argc, char **argv, bool *no_stdin, bool *no_follow, int *exit_code);
/* Follows (or, no_follow, prints so far) a background process's output; its status. */
int cli_proc_attach(sbx_sandbox *sb, const char *id, unsigned n, bool no_stdin, bool no_follow);
int cli_cmd_top(int argc, char **argv);
int cli_cmd_stats(int argc, char **argv);
int cli_cmd_pause(int argc, char **argv);
int cli_cmd_unpause(int argc, char **argv);
/*
 * A pull's bars on stderr (image.c), for a start that may pull its image:
 * NULL when stderr is no terminal. The progress callback for
 * sbx_future_on_progress draws pull and unpack stages only.
 */
struct cli_pull_view;
struct cli_pull_view *cli_pull_view_new(void);
void cli_pull_view_progress(const char *stage, unsigned long long done, unsigned long long total,
                            void *data);
void cli_pull_view_free(struct cli_pull_view *v);
int cli_cmd_wait(int argc, char **argv);
int cli_cmd_kill(int argc, char **argv);
/* --- forward.c: endpoints and port forwarding [endpoint] ------------------- */

/*
 * Parses [[HOSTADDR:]HOSTPORT:]PORT ([V6]:HOSTPORT:PORT for IPv6): *addr is
 * malloc'd or NULL (none given), *host_port -1 when only PORT was given, 0
 * for an empty HOSTPORT (any free port). -1 when malformed.
 */
int cli_parse_port_map(const char *arg, char **addr, int *host_port, int *port);
int cli_cmd_endpoint(int argc, char **argv);
int cli_cmd_port_forward(int argc, char **argv);

#endif
