/*
 * Internal interfaces shared by the core, the providers and the CLI.
 * Non-static internal functions are named sbx__*.
 */
#ifndef SBX_INTERNAL_H
#define SBX_INTERNAL_H

#include <sbx.h>
#include <sbx/provider.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#define SBX_INTERNAL __attribute__((visibility("hidden")))
#define SBX_UNUSED __attribute__((unused))
#define SBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* --- cleanup helpers (bubblewrap / crun style) --------------------------- */

static inline void sbx__freep(void *p) { free(*(void **)p); }
static inline void sbx__closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
}
static inline void sbx__json_decrefp(json_t **j)
{
    if (*j)
        json_decref(*j);
}
static inline void sbx__error_freep(sbx_error **e) { sbx_error_free(*e); }

#define _cleanup_free_ __attribute__((cleanup(sbx__freep)))
#define _cleanup_close_ __attribute__((cleanup(sbx__closep)))
#define _cleanup_json_ __attribute__((cleanup(sbx__json_decrefp)))
#define _cleanup_error_ __attribute__((cleanup(sbx__error_freep)))

static inline void *sbx__steal(void *pp)
{
    void **p = (void **)pp;
    void *v = *p;
    *p = NULL;
    return v;
}
#define steal_pointer(pp) sbx__steal(pp)

static inline int sbx__steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}

/* --- errors -------------------------------------------------------------- */

/* Stores `e` into `*err` when err is non-NULL (else frees it); returns e's code. */
SBX_INTERNAL int sbx__fail(sbx_error **err, sbx_error *e);
/* sbx__fail(err, sbx_error_new(code, fmt...)) */
SBX_INTERNAL int sbx__set_error(sbx_error **err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
SBX_INTERNAL int sbx__set_errno(sbx_error **err, int code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Records the provider name an error is about. */
SBX_INTERNAL void sbx__error_set_provider(sbx_error *e, const char *provider);
/* Maps an errno to the closest sbx code (ENOENT -> SBX_ENOENT, ...). */
SBX_INTERNAL int sbx__code_from_errno(int errnum);

/* --- strings ------------------------------------------------------------- */

SBX_INTERNAL char *sbx__strdup0(const char *s); /* NULL stays NULL */
SBX_INTERNAL char *sbx__printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Python repr() of a str: 'text' with escapes, as the reference's messages show. */
SBX_INTERNAL char *sbx__repr(const char *s);
/* Python str() of a double the way "{x}" formats it (1.0, 0.5, 1e-05). */
SBX_INTERNAL void sbx__fmt_float(double v, char *buf, size_t n);
/* Python "{x:g}". */
SBX_INTERNAL void sbx__fmt_g(double v, char *buf, size_t n);
/* Parses like Python int(str): surrounding whitespace and a sign allowed. */
SBX_INTERNAL int sbx__parse_pyint(const char *s, long long *out);
/* Parses like Python float(str). */
SBX_INTERNAL int sbx__parse_pyfloat(const char *s, double *out);

typedef struct {
    char *data;
    size_t len;
    size_t cap;
} sbx_buf;
SBX_INTERNAL int sbx__buf_append(sbx_buf *b, const void *data, size_t len);
SBX_INTERNAL int sbx__buf_printf(sbx_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
SBX_INTERNAL void sbx__buf_free(sbx_buf *b);

/*
 * A list of key/value string pairs keeping first-insertion order. Keys are
 * found through a hashed index (jansson's seeded table), so that setting n
 * pairs is linear: env lists and labels come from users and specs, and a
 * linear search per insert made 100,000 variables take minutes. Zero is an
 * empty list; only the sbx__kv_* functions change one.
 */
typedef struct {
    char **keys;
    char **values;
    size_t len;
    size_t cap;    /* slots in keys and values */
    json_t *index; /* key -> position, built once the list is not tiny */
    size_t bytes;  /* "K=V" and its NUL, summed over the pairs: the size as an environment */
} sbx_kv;
SBX_INTERNAL int sbx__kv_set(sbx_kv *kv, const char *key, const char *value);
SBX_INTERNAL const char *sbx__kv_get(const sbx_kv *kv, const char *key);
SBX_INTERNAL void sbx__kv_free(sbx_kv *kv);
SBX_INTERNAL int sbx__kv_copy(sbx_kv *dst, const sbx_kv *src);

/*
 * What an environment may hold: the kernel refuses an execve whose strings
 * and pointers pass a quarter of the stack limit (2 MiB by default) or one of
 * whose strings passes MAX_ARG_STRLEN (128 KiB). An env that large would make
 * every command fail at execve; it is refused when it is set instead.
 */
/*
 * The largest number of seconds a timeout, ttl_s or ready_timeout_s may be
 * (about 31 years): past it, converting to milliseconds or adding to a clock
 * overflows. Larger values are refused, not clamped: they are mistakes.
 */
#define SBX_MAX_SECONDS 1e9
/* Resource sizes whose byte count must fit in 63 bits: 1 EiB each. */
#define SBX_MAX_MEMORY_MIB (1LL << 40)
#define SBX_MAX_DISK_GIB (1LL << 30)
#define SBX_MAX_GPU (1LL << 20)

#define SBX_ENV_MAX_BYTES (2u << 20)
#define SBX_ENV_ENTRY_MAX_BYTES (128u << 10)
/* 0 when setting key=value in `env` keeps it within those bounds, else SBX_EINVAL. */
SBX_INTERNAL int sbx__env_fits(const sbx_kv *env, const char *key, const char *value);

/* --- files --------------------------------------------------------------- */

/* mkdir -p with `mode`; EEXIST for a directory is success. */
SBX_INTERNAL int sbx__mkdir_p(const char *path, mode_t mode);
/* rm -rf that never crosses into another mount. */
SBX_INTERNAL int sbx__rm_rf(const char *path);
/* The same for `name` under `dirfd`, never following a link (not even at `name`). */
SBX_INTERNAL int sbx__rm_rf_at(int dirfd, const char *name);
SBX_INTERNAL int sbx__read_file(const char *path, char **data, size_t *len);
/*
 * Writes atomically: a fresh temp file (O_EXCL, never through a link) with
 * exactly `mode` (fchmod: the umask does not apply), then rename.
 */
/* "1.5 GiB" ("512 B" below a KiB) into buf; returns buf. */
SBX_INTERNAL const char *sbx__human_bytes(uint64_t n, char *buf, size_t len);
SBX_INTERNAL int sbx__write_file_atomic(const char *path, const void *data, size_t len,
                                        mode_t mode);
/*
 * Private state (private.c). sbx__private_dir checks (and with `create`
 * makes, 0700) a state directory: absolute; every component a directory, not
 * a link, owned by root or the caller and writable by nobody else (sticky
 * ancestors such as /tmp excepted); the directory itself the caller's.
 * SBX_EPERM with a message naming the path, its owner and mode, and what to
 * do. `canonical` (optional) receives the resolved path.
 */
SBX_INTERNAL int sbx__private_dir(const char *path, bool create, char **canonical,
                                  sbx_error **err);
/*
 * Reads `name` under `dirfd` (shown as `shown` in messages) without following
 * a link: a regular file of the caller's, not group/other-writable, at most
 * `max` bytes. `*data` is NUL-terminated, malloc'd.
 */
SBX_INTERNAL int sbx__read_private_file(int dirfd, const char *name, const char *shown,
                                        size_t max, char **data, size_t *len, sbx_error **err);
/*
 * Opens `path` (absolute, or relative to the current directory) with O_PATH
 * by walking it one component at a time, never letting another user steer
 * the walk: a symbolic link on the way is followed only when nobody but root
 * and the caller could have put it there (its directory belongs to root or
 * the caller and nobody else may write it, or is sticky and the link is
 * root's or the caller's); a link at the end is followed only with
 * `follow_last`. Returns the descriptor of exactly what was checked, or a
 * negative code (SBX_EPERM for a refused link, SBX_ENOENT, ...) with a message
 * that starts with `what` and names the component, its directory and why.
 * For host paths root uses on another user's behalf: volume sources, build
 * contexts.
 */
SBX_INTERNAL int sbx__open_trusted(const char *path, bool follow_last, const char *what,
                                   sbx_error **err);
/*
 * sbx__open_trusted for a directory, made as mkdir -p would when missing
 * (each missing component made with mkdirat in its parent's descriptor,
 * `mode`), the last link followed by the same rule. Returns an O_PATH
 * descriptor of the directory, or a negative code with a message starting
 * with `what`. For where root writes on another user's behalf (downloads).
 */
SBX_INTERNAL int sbx__mkdir_trusted(const char *path, mode_t mode, const char *what,
                                    sbx_error **err);
/* The same for an absolute path, parsed as a JSON object. */
SBX_INTERNAL int sbx__load_private_json(const char *path, size_t max, json_t **out,
                                        sbx_error **err);
/*
 * The canonical form of an absolute path whose tail may not exist yet
 * (realpath of the longest existing prefix, the rest appended; `.`/`..` in
 * the rest: NULL, EINVAL). Malloc'd.
 */
SBX_INTERNAL char *sbx__canonical_path(const char *path);
/*
 * The size a record may have: it holds a box's env (at most
 * SBX_ENV_MAX_BYTES, up to 6 bytes a byte once escaped in JSON) and its
 * metadata, so 16 MiB; still a bound on what a forged record can make sbx
 * read.
 */
#define SBX_RECORD_MAX (16u << 20)
/* Hex of `n` random bytes. */
SBX_INTERNAL void sbx__random_hex(char *out, size_t n_bytes);

/* --- json ---------------------------------------------------------------- */

/*
 * Parses JSON (or YAML when it is not JSON) into a jansson value. No
 * interpolation: values from bindings must arrive byte for byte.
 */
SBX_INTERNAL int sbx__parse_config_text(const char *text, json_t **out, sbx_error **err);
/* Replaces ${oc.env:VAR} and ${oc.env:VAR,default} in every string, in place. */
SBX_INTERNAL int sbx__interpolate(json_t *v, sbx_error **err);
/* Python-ish type name of a JSON value for messages ("str", "int", "dict", ...). */
SBX_INTERNAL const char *sbx__json_typename(const json_t *v);
/* Python repr() of a JSON value ({'a': 1}, [1, 2], 'x', None, True). */
SBX_INTERNAL char *sbx__json_repr(const json_t *v);
/* Dumps compactly, keys in insertion order. */
SBX_INTERNAL char *sbx__json_dump(const json_t *v);

/* --- spec and exec option internals ------------------------------------- */

struct sbx_spec_file {
    char *path;
    char *data;
    size_t len;
    int mode; /* [svc-logs] permission bits, or -1: the default (0600) */
};

struct sbx_spec {
    char *image;
    char *workdir;
    double ttl_s; /* < 0: None */
    double ready_timeout_s;
    sbx_kv env;
    struct sbx_spec_file *files;
    size_t n_files, cap_files;
    json_t *file_index; /* path -> position in files: adding n files stays linear */
    sbx_kv metadata;
    double cpu; /* < 0: None */
    long long memory_mib, disk_gib, gpu; /* < 0: None */
    char *gpu_type;
    char **entrypoint; /* NULL-terminated or NULL */
    json_t *provider_options; /* object, never NULL */
    char *provider_options_text;
    int *ports;
    size_t n_ports;
};

#define SBX_DEFAULT_EXEC_TIMEOUT_S 180.0
/*
 * Bytes of stdout and of stderr kept per exec unless the call sets its own
 * cap. A box decides how much it writes, and the whole result sits in the
 * caller's memory (twice in a binding that copies it): 16 MiB per stream
 * bounds a flooding command at ~32 MiB of host memory per exec, while
 * staying far above what a test log or a build's output usually needs.
 * Past it the output is drained and dropped and the result says truncated.
 */
#define SBX_DEFAULT_OUTPUT_LIMIT ((size_t)16 << 20)

struct sbx_exec_opts {
    char *cwd;
    sbx_kv env;
    double timeout_s;
    char *user;
    char *stdin_data;
    size_t stdin_len;
    bool has_stdin;
    bool has_stdin_fd;
    int stdin_fd; /* borrowed: sbx_exec_opts_set_stdin_fd */
    size_t output_limit;
    /* streaming (src/core/stream.c) */
    sbx_exec_output_cb output_cb;
    void *output_user;
    bool has_out_fd[2]; /* [0] stdout, [1] stderr */
    int out_fd[2];      /* borrowed */
    bool drop_output;   /* sbx_exec_opts_set_keep_output(o, 0) */
    /* An agent built-in instead of a command (src/core/transfer.c, src/agent/tar.h). */
    char **builtin_argv;
    /* The command as argv, run without a shell (sbx_exec_opts_set_argv), or NULL. */
    char **argv;
};

SBX_INTERNAL sbx_exec_opts *sbx__exec_opts_copy(const sbx_exec_opts *o);

/*
 * The streaming side of one exec (src/core/stream.c): where chunks go (the
 * caller's callback, its fds), fd write queues with flow control, and the
 * fallback for providers that do not stream. Lives in the sandbox call;
 * loop thread only unless said otherwise.
 */
typedef struct sbx__exec_sink sbx__exec_sink;
/* NULL opts or nothing to do gives *out = NULL and SBX_OK. Checks the fds (caller's thread). */
SBX_INTERNAL int sbx__exec_sink_new(sbx_provider *p, const sbx_exec_opts *o, sbx__exec_sink **out,
                                    sbx_error **err);
SBX_INTERNAL void sbx__exec_sink_free(sbx__exec_sink *s);
/* Ties the sink to the provider step; sbx_op_exec_output then feeds it. */
SBX_INTERNAL void sbx__op_set_exec_sink(sbx_op *op, sbx__exec_sink *s);
SBX_INTERNAL void sbx__exec_sink_attach(sbx__exec_sink *s, sbx_op *op);
SBX_INTERNAL void sbx__exec_sink_set_flow(sbx__exec_sink *s, sbx_op_flow_cb cb, void *data);
/*
 * The op completed: no more flow callbacks into the provider (`inner`: an
 * inner op of the provider's own ended; the outer op stays the one cancelled).
 */
SBX_INTERNAL void sbx__exec_sink_detach(sbx__exec_sink *s, bool inner);
/*
 * A provider that runs an exec through an inner op of its own (sbx__op_new,
 * as linux does around the agent client) passes the caller's output on:
 * chunks and flow control given to `inner` reach `outer`'s sink.
 */
SBX_INTERNAL void sbx__op_inherit_exec_sink(sbx_op *inner, const sbx_op *outer);
/* A chunk (loop thread). */
SBX_INTERNAL void sbx__exec_sink_chunk(sbx__exec_sink *s, int stream, const char *data, size_t len);
/*
 * The exec completed with `code` and result `r` (or NULL): runs the fallback
 * delivery for a provider that does not stream and applies keep_output to
 * `r`. Returns 1 when every byte reached the fds; else 0, and `done(data)`
 * is called once they did. Then sbx__exec_sink_settle.
 */
SBX_INTERNAL int sbx__exec_sink_finish(sbx__exec_sink *s, int code, sbx_exec_result *r,
                                       void (*done)(void *), void *data);
/* A write error turns the outcome into SBX_EIO (the result is freed). */
SBX_INTERNAL void sbx__exec_sink_settle(sbx__exec_sink *s, int *code, sbx_error **err,
                                        void **value);
/* The caller cancelled while output drains: drop what waits; `done` is not called. */
SBX_INTERNAL void sbx__exec_sink_abort(sbx__exec_sink *s);
/* Called by stream.c on a write error: the provider step's op to cancel (or NULL). */
SBX_INTERNAL sbx_op *sbx__exec_sink_op(sbx__exec_sink *s);
/* Whether the provider declared SBX_CAP_EXEC_STREAM (read-only after creation: any thread). */
SBX_INTERNAL bool sbx__exec_sink_streams(const sbx__exec_sink *s);

struct sbx_exec_result {
    char *out;
    size_t out_len;
    char *err;
    size_t err_len;
    int return_code;
    char *error_type;
    int truncated;
};

/* Builds a spec from a parsed JSON object (shared by from_json and the CLI). */
SBX_INTERNAL int sbx__spec_from_value(json_t *v, sbx_spec **out, sbx_error **err);
/* Validates one port value as the reference's SandboxSpec does. */
SBX_INTERNAL int sbx__port_from_value(const json_t *v, int *out, sbx_error **err);

/* --- loop and context ---------------------------------------------------- */

typedef void (*sbx__task_fn)(void *data);

/* The shared default context, created on first use; takes a reference. */
SBX_INTERNAL int sbx__context_default(sbx_context **out, sbx_error **err);
SBX_INTERNAL void sbx__context_ref(sbx_context *ctx);
SBX_INTERNAL void sbx__context_unref(sbx_context *ctx);
/* Runs fn(data) on the loop thread (at once if called there? never: queued). */
SBX_INTERNAL int sbx__context_post(sbx_context *ctx, sbx__task_fn fn, void *data);
SBX_INTERNAL bool sbx__context_on_loop(const sbx_context *ctx);
/* Waits until every task queued on the loop before this call has run. */
SBX_INTERNAL void sbx__context_drain(sbx_context *ctx);
/* True when the calling thread is the loop thread of any sbx context. */
SBX_INTERNAL bool sbx__on_any_loop(void);
SBX_INTERNAL void *sbx__context_uv(sbx_context *ctx);
/*
 * The remote kit's HTTP engine of the context (NULL until its first
 * request). Loop thread only. `close_fn` runs on the loop when the context
 * stops, before the loop closes its handles.
 */
SBX_INTERNAL void *sbx__context_http(sbx_context *ctx);
SBX_INTERNAL void sbx__context_set_http(sbx_context *ctx, void *http, void (*close_fn)(void *http));

/* --- the context's worker pool (pool.c) ---------------------------------- */

/*
 * Threads per context for blocking work, unless SBX_WORKERS or
 * sbx_context_set_workers() says otherwise (docs/core-concurrency.md says
 * why 8).
 */
#define SBX_WORKERS_DEFAULT 8
#define SBX_WORKERS_MAX 256
typedef void (*sbx__work_fn)(void *data);
/* On the loop thread, once: `cancelled` when the item was removed before it ran. */
typedef void (*sbx__work_done_fn)(void *data, bool cancelled);
struct sbx__pool;
struct sbx__work;
typedef struct {
    unsigned size, running, max_running, threads;
    size_t queued;
} sbx__pool_stat;
/* SBX_WORKERS when it is a number from 1 to SBX_WORKERS_MAX, else SBX_WORKERS_DEFAULT. */
SBX_INTERNAL unsigned sbx__workers_default(void);
SBX_INTERNAL struct sbx__pool *sbx__pool_new(sbx_context *ctx, unsigned size);
/* Joins the threads; nothing may be queued or running (the loop has ended). */
SBX_INTERNAL void sbx__pool_free(struct sbx__pool *p);
SBX_INTERNAL int sbx__pool_submit(struct sbx__pool *p, sbx__work_fn work, sbx__work_done_fn done,
                                  void *data, struct sbx__work **out);
/* Cancels every queued item that has an end; those without one (cleanups) still run. */
SBX_INTERNAL void sbx__pool_cancel_all(struct sbx__pool *p);
SBX_INTERNAL void sbx__pool_set_size(struct sbx__pool *p, unsigned size);
SBX_INTERNAL unsigned sbx__pool_size(struct sbx__pool *p);
SBX_INTERNAL void sbx__pool_stats(struct sbx__pool *p, sbx__pool_stat *out);
/*
 * Runs `work(data)` on a worker of `ctx`'s pool, then `done(data, false)` on
 * its loop thread (`done` may be NULL). From any thread. `*out` (optional)
 * names the item for sbx__work_cancel until `done` has run.
 */
SBX_INTERNAL int sbx__context_submit(sbx_context *ctx, sbx__work_fn work, sbx__work_done_fn done,
                                     void *data, struct sbx__work **out);
/*
 * Removes a queued item: true when it had not started (its `done` then runs
 * later on the loop with cancelled = true), false when it runs or ran.
 */
SBX_INTERNAL bool sbx__work_cancel(struct sbx__work *w);
SBX_INTERNAL struct sbx__pool *sbx__context_pool(sbx_context *ctx);
/* The context whose loop sbx__context_uv() gave. */
SBX_INTERNAL sbx_context *sbx__context_of_uv(void *loop);
/* The context counts queued and running items: its loop does not end while there are any. */
SBX_INTERNAL void sbx__context_work_begin(sbx_context *ctx);
SBX_INTERNAL void sbx__context_work_abandon(sbx_context *ctx);
/* Posts fn(data) to the loop and counts an item as ended, in one step. */
SBX_INTERNAL void sbx__context_work_end(sbx_context *ctx, sbx__task_fn fn, void *data);

/* --- futures ------------------------------------------------------------- */

typedef void (*sbx__value_free_fn)(void *value);
enum sbx__value_kind {
    SBX_VALUE_NONE,
    SBX_VALUE_EXEC_RESULT,
    SBX_VALUE_STATUS,
    SBX_VALUE_ENDPOINT,
    SBX_VALUE_STRING,
    SBX_VALUE_SANDBOX,
};

/* [svc-logs] Where the box's service log is (a JSON object text future; provider.h log_address). */
SBX_INTERNAL int sbx__sandbox_log_address_async(sbx_sandbox *sb, sbx_future **out,
                                                sbx_error **err);
/*
 * [svc-logs] Has the provider's log_stream write the box's log into `fd`
 * (a future with no value that completes when the writing ends). `fd` is
 * always taken: closed here when the call cannot be made.
 */
SBX_INTERNAL bool sbx__sandbox_has_log_stream(const sbx_sandbox *sb);
SBX_INTERNAL int sbx__sandbox_log_stream_async(sbx_sandbox *sb, int fd, double since,
                                               long long tail, unsigned flags,
                                               sbx_future **out, sbx_error **err);
/* [pty] The box's agent address (a JSON object text future; provider.h agent_address). */
SBX_INTERNAL int sbx__sandbox_agent_address_async(sbx_sandbox *sb, sbx_future **out,
                                                  sbx_error **err);

/* fuzz/fuzz_pty.c: runs a PTY handle over `data` as the agent's bytes. */
SBX_INTERNAL void sbx__pty_fuzz(const uint8_t *data, size_t len);
/* [procs] sbx_pty_open in pipe mode whatever `opts` says (background processes, proc.c). */
SBX_INTERNAL int sbx__pty_open_pipes(sbx_sandbox *sb, const sbx_pty_opts *opts, sbx_pty **out,
                                     sbx_error **err);
/* [procs] sbx_pty_attach with PTY_ATTACH flags (takeover 1, keep 2: version 4). */
SBX_INTERNAL int sbx__pty_attach_flags(sbx_sandbox *sb, unsigned id, unsigned flags,
                                       unsigned long long since, sbx_pty **out, sbx_error **err);
/*
 * [procs] Sends `type` (empty payload) on a connection of its own and returns
 * the payload of the `answer` frame (malloc'd, caller frees). SBX_ENOTSUP
 * when the box's agent speaks a version below 4.
 */
/* [procs] PTY_SESSIONS / PS_LIST payloads as sbx_proc_list / sbx_sandbox_top's JSON (proc.c). */
SBX_INTERNAL int sbx__procs_sessions_json(const uint8_t *payload, size_t len, char **out,
                                          sbx_error **err);
SBX_INTERNAL int sbx__procs_ps_json(const uint8_t *payload, size_t len, char **out,
                                    sbx_error **err);
SBX_INTERNAL int sbx__pty_ask(sbx_sandbox *sb, uint8_t type, uint8_t answer, const char *what,
                              uint8_t **payload, size_t *len, sbx_error **err);
/* [procs] The same over a connected stream `fd` (taken, closed): for tests with a fake agent. */
SBX_INTERNAL int sbx__pty_ask_fd(int fd, uint8_t type, uint8_t answer, const char *what,
                                 uint8_t **payload, size_t *len, sbx_error **err);

SBX_INTERNAL sbx_future *sbx__future_new(sbx_context *ctx, enum sbx__value_kind kind);
/*
 * Waits for a JSON object text future (agent_address, log_address), frees
 * it and parses its text: SBX_OK and *out (json_decref), or the future's
 * error; an answer that is not a JSON object is SBX_EPROVIDER.
 */
SBX_INTERNAL int sbx__future_wait_json(sbx_future *f, json_t **out, sbx_error **err);
/* Another reference (dropped with sbx_future_free). */
SBX_INTERNAL void sbx__future_ref(sbx_future *f);
/* Completes it (any thread); takes `err` and `value`. */
SBX_INTERNAL void sbx__future_complete(sbx_future *f, int code, sbx_error *err, void *value);
/* The future's operation-specific cancel hook, run on the loop thread. */
SBX_INTERNAL void sbx__future_set_cancel(sbx_future *f, void (*cb)(void *data), void *data);
SBX_INTERNAL bool sbx__future_cancelled(const sbx_future *f);
/* Calls the future's progress callback (loop thread), unless it completed. */
SBX_INTERNAL void sbx__future_progress(sbx_future *f, const char *stage, unsigned long long done,
                                       unsigned long long total);

/* --- ops (provider calls) ----------------------------------------------- */

typedef void (*sbx__op_done_fn)(int code, sbx_error *err, void *value, void *data);
/* Makes an op whose completion calls done(...) on the loop thread. */
SBX_INTERNAL sbx_op *sbx__op_new(sbx_provider *p, sbx__op_done_fn done, void *data);
SBX_INTERNAL void sbx__op_cancel(sbx_op *op);
/* The future sbx_op_progress reports to (a reference is held until the op ends). */
SBX_INTERNAL void sbx__op_set_progress_future(sbx_op *op, sbx_future *f);
/* The provider an op runs for: a provider wraps another op (sbx__op_new) around it. */
SBX_INTERNAL sbx_provider *sbx__op_provider(const sbx_op *op);

/* --- provider internals ------------------------------------------------- */

struct sbx_provider {
    const struct sbx_provider_ops *ops;
    void *state;
    sbx_context *ctx;
    char *name;
    atomic_int refs; /* the user's reference + one per sandbox and op */
};

SBX_INTERNAL void sbx__provider_ref(sbx_provider *p);
/* The SBX_CAP_* flags the provider has: declared, and derived from its table (boxes.c). */
SBX_INTERNAL unsigned long long sbx__provider_caps(const sbx_provider *p);
SBX_INTERNAL void sbx__provider_unref(sbx_provider *p);
/* Looks `name` up: registered, then built-in, then plugins. */
/* The box's TMPDIR as transfer_exec.c learned it (a copy), or NULL (sandbox.c). */
SBX_INTERNAL char *sbx__sandbox_box_tmpdir(sbx_sandbox *sb);
/* Keeps `dir` as the box's TMPDIR unless one is kept already. */
SBX_INTERNAL void sbx__sandbox_set_box_tmpdir(sbx_sandbox *sb, const char *dir);
SBX_INTERNAL int sbx__registry_find(const char *name, const struct sbx_provider_ops **out,
                                    sbx_error **err);
/* The built-in table (src/providers/builtin.c). */
SBX_INTERNAL const struct sbx_provider_ops *const *sbx__builtin_providers(void);
/* Unknown-provider error listing the available names. */
SBX_INTERNAL int sbx__unknown_provider(const char *name, sbx_error **err);

/* --- logging ------------------------------------------------------------- */
SBX_INTERNAL bool sbx__log_enabled(sbx_log_level level);

/* --- transfer (src/core/transfer.c) ---------------------------------------- */
/* A reference that keeps a sandbox object alive while a transfer thread uses it. */
SBX_INTERNAL void sbx__sandbox_hold(sbx_sandbox *sb);
SBX_INTERNAL void sbx__sandbox_release(sbx_sandbox *sb);
/*
 * The host side of a download: extracts the tar stream a box sends on `fd`
 * into the existing, link-free host directory `dir` (closing `fd`). Every
 * byte is the box's choice; nothing lands outside `dir`. SBX_OK, or the
 * code with what was wrong in `msg`. Apart for its tests and fuzz target.
 */
SBX_INTERNAL int sbx__transfer_unpack_fd(int fd, const char *dir, unsigned flags, char *msg,
                                         size_t msglen);

/* --- the pty exec facade (src/core/pty_exec.c) ------------------------------ */
/* A sandbox's facade state: its default session and the lock over session commands. */
struct sbx__pty_home;
/* The sandbox's state, made on first use (sandbox.c); NULL only when out of memory. */
SBX_INTERNAL struct sbx__pty_home *sbx__sandbox_pty_home(sbx_sandbox *sb);
SBX_INTERNAL struct sbx__pty_home *sbx__pty_home_new(void);
/* Frees it with the sandbox; its default handle (the user's) forgets it. */
SBX_INTERNAL void sbx__pty_home_free(struct sbx__pty_home *h);
/* A box-shell session opened on `sb`: the default unless a live one exists. */
SBX_INTERNAL void sbx__pty_home_offer(sbx_sandbox *sb, sbx_pty *p);
/* `p` is being freed: no sandbox keeps it as default any more. */
SBX_INTERNAL void sbx__pty_home_forget(sbx_pty *p);
/* pty.c's side: the handle's home slot, its mode, and closing without freeing. */
SBX_INTERNAL struct sbx__pty_home **sbx__pty_home_slot(sbx_pty *p);
SBX_INTERNAL bool sbx__pty_pipes(const sbx_pty *p);
/*
 * True when a read would not wait for the connection: output already
 * decoded into the handle (a read of the other stream may have taken it
 * off the socket), or the session ended or the connection is gone.
 */
SBX_INTERNAL bool sbx__pty_ready(const sbx_pty *p);
/* The same for a background process's handle (proc.c). */
SBX_INTERNAL bool sbx__proc_ready(const sbx_proc *p);
SBX_INTERNAL int sbx__pty_end(sbx_pty *p, sbx_error **err);
/* Tests and fuzzing: a socketless handle fed `data`; a command's result read from frames. */
SBX_INTERNAL sbx_pty *sbx__pty_from_bytes(const uint8_t *data, size_t len, int pipes);
SBX_INTERNAL int sbx__pty_exec_replay(const uint8_t *frames, size_t len, int pipes, size_t cap,
                                      sbx_exec_result **out, sbx_error **err);

/* --- terminals a provider opens (pty_remote.c; provider.h pty_open) ---------- */

/* Seconds on the monotonic clock (util.c). */
SBX_INTERNAL double sbx__monotonic_s(void);
/*
 * A PTY stream's bytes received and not yet read, with the absolute offset
 * of the first: the newest SBX_PTY_WINDOW bytes are kept (pty.c for the
 * agent's sessions, pty_remote.c for a provider's).
 */
struct sbx__pty_window {
    uint8_t *buf;
    size_t len;
    uint64_t offset; /* of buf[0] */
    bool started;    /* an offset was set (the first chunk's, or a replay's) */
};
/*
 * Appends `len` bytes at `offset` (SBX_PTY_OFFSET_NEXT: after the last),
 * dropping what overlaps bytes already there and the oldest past the
 * window. -1 when out of memory.
 */
SBX_INTERNAL int sbx__pty_window_add(struct sbx__pty_window *q, unsigned long long offset,
                                     const uint8_t *data, size_t len);
/* Moves up to `cap` bytes into `buf`; their offset in *offset (optional). */
SBX_INTERNAL size_t sbx__pty_window_take(struct sbx__pty_window *q, void *buf, size_t cap,
                                         unsigned long long *offset);
/* The options of a PTY session (pty.c's setters fill them). */
struct sbx_pty_opts {
    char *command;
    char **argv;
    char *cwd, *user;
    char **env;
    size_t n_env;
    unsigned rows, cols;
    int pipes;
};
/* A deep copy (NULL when out of memory). */
SBX_INTERNAL sbx_pty_opts *sbx__pty_opts_copy(const sbx_pty_opts *o);
/* The session of an open (`attach_id` 0) or an attach; takes `req`, even on failure. */
SBX_INTERNAL int sbx__pty_session_new(sbx_pty_opts *req, unsigned attach_id, int takeover,
                                      unsigned long long since, sbx_pty_session **out,
                                      sbx_error **err);
SBX_INTERNAL void sbx__pty_session_ref(sbx_pty_session *s);
SBX_INTERNAL void sbx__pty_session_unref(sbx_pty_session *s);
SBX_INTERNAL void sbx__pty_session_set_context(sbx_pty_session *s, sbx_context *ctx);
/*
 * The provider's op completed (op.c, at sbx_op_complete, and the call's end
 * in sandbox.c for a call that never reached the provider): no callback
 * runs after it; an error before ready is the open's error.
 */
SBX_INTERNAL void sbx__pty_session_done(sbx_pty_session *s, int code, const sbx_error *err);
SBX_INTERNAL void sbx__op_set_pty_session(sbx_op *op, sbx_pty_session *s);
/* True when the sandbox's provider opens terminals itself (pty_open). */
SBX_INTERNAL bool sbx__sandbox_has_pty_open(const sbx_sandbox *sb);
/* Starts the provider's pty_open for `s` (the call holds a reference and the sandbox). */
SBX_INTERNAL int sbx__sandbox_pty_open(sbx_sandbox *sb, sbx_pty_session *s, sbx_error **err);
/* How long sbx_pty_open waits for the provider's ready (tests shorten it). */
SBX_INTERNAL extern double sbx__pty_open_timeout_s;
/* The handle's side, on the caller's thread (pty.c dispatches to these). */
SBX_INTERNAL int sbx__pty_session_start(sbx_pty_session *s, unsigned *id, sbx_error **err);
SBX_INTERNAL int sbx__pty_session_read(sbx_pty_session *s, int k, void *buf, size_t cap,
                                       double timeout_s, size_t *n, unsigned long long *offset,
                                       sbx_error **err);
SBX_INTERNAL int sbx__pty_session_write(sbx_pty_session *s, const void *data, size_t len,
                                        sbx_error **err);
SBX_INTERNAL int sbx__pty_session_resize(sbx_pty_session *s, unsigned rows, unsigned cols,
                                         sbx_error **err);
SBX_INTERNAL int sbx__pty_session_signal(sbx_pty_session *s, int signo, const char *name,
                                         sbx_error **err);
SBX_INTERNAL int sbx__pty_session_wait(sbx_pty_session *s, double timeout_s, int *code,
                                       sbx_error **err);
SBX_INTERNAL int sbx__pty_session_close(sbx_pty_session *s, int end, double wait_s,
                                        sbx_error **err);
SBX_INTERNAL void sbx__pty_session_detached(sbx_pty_session *s);
SBX_INTERNAL int sbx__pty_session_fd(const sbx_pty_session *s);
SBX_INTERNAL bool sbx__pty_session_ready_to_read(sbx_pty_session *s);

#endif /* SBX_INTERNAL_H */
