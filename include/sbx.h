/*
 * sbx — one provider-neutral API to create isolated sandboxes, run commands
 * in them, move files in and out, reach services inside them, and tear them
 * down.
 *
 * Conventions (see docs/c-api.md):
 * - Fallible functions return SBX_OK (0) or a negative sbx_code. Their last
 *   parameter is an optional `sbx_error **err`; on failure it receives an
 *   allocated error that the caller frees with sbx_error_free().
 * - Out-parameters are written only on success.
 * - Every object is opaque and owned by exactly one caller; `_free` takes NULL.
 * - Strings returned through `char **` are freed with sbx_free().
 * - The library copies its inputs and never keeps a caller's pointer except
 *   user data.
 * - Every sandbox operation exists as a blocking call and as an `_async` call
 *   returning an sbx_future. The blocking call submits the async one and
 *   waits; calling it from the sbx loop thread (inside a future callback) is
 *   refused with SBX_ESTATE.
 * - Functions are thread-safe unless their comment says otherwise. One
 *   sandbox may run many operations at once from many threads.
 */
#ifndef SBX_H
#define SBX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SBX_EXPORT __attribute__((visibility("default")))
#else
#define SBX_EXPORT
#endif

#define SBX_VERSION_MAJOR 0
#define SBX_VERSION_MINOR 1
#define SBX_VERSION_PATCH 0
#define SBX_VERSION_STRING "0.1.0"

/* Returns the library's version string ("0.1.0"). */
SBX_EXPORT const char *sbx_version(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The codes, their names and default messages, defined once. The Python
 * exception each mirrors is in the comment column of docs/c-api.md.
 */
#define SBX_ERRNO_MAP(X)                                                              \
    X(EINVAL, -1, "invalid argument")                                                 \
    X(ETYPE, -2, "value has the wrong type")                                          \
    X(ESTATE, -3, "operation not valid in the sandbox's current state")               \
    X(ECREATE, -4, "sandbox creation failed")                                         \
    X(EVERIFY, -5, "sandbox failed its readiness check")                              \
    X(ENOTSUP, -6, "operation not supported by this provider")                        \
    X(ETIMEDOUT, -7, "operation timed out")                                           \
    X(EIO, -8, "input/output error")                                                  \
    X(EPROVIDER, -9, "provider failure")                                              \
    X(EPTY, -10, "PTY session failure")                                               \
    X(ENOMEM, -11, "out of memory")                                                   \
    X(ENOENT, -12, "no such file, sandbox or provider")                               \
    X(EPERM, -13, "permission denied")                                                \
    X(EPROTO, -14, "protocol error")                                                  \
    X(EAUTH, -15, "authentication failed")                                            \
    X(ECANCELED, -16, "operation cancelled")                                          \
    X(ETRANSFER, -17, "transfer failed inside the sandbox")

typedef enum {
    SBX_OK = 0,
#define SBX__CODE(name, value, msg) SBX_##name = value,
    SBX_ERRNO_MAP(SBX__CODE)
#undef SBX__CODE
} sbx_code;

typedef struct sbx_error sbx_error;

/* The code (a negative sbx_code) an error carries. */
SBX_EXPORT int sbx_error_code(const sbx_error *e);
/* The full message: what failed and what to do. Owned by the error. */
SBX_EXPORT const char *sbx_error_message(const sbx_error *e);
/* The errno behind the error, or 0. */
SBX_EXPORT int sbx_error_errno(const sbx_error *e);
/* The provider name involved, or NULL. Owned by the error. */
SBX_EXPORT const char *sbx_error_provider(const sbx_error *e);
/* Frees an error; NULL is allowed. */
SBX_EXPORT void sbx_error_free(sbx_error *e);
/* The default message for a code ("invalid argument"); never NULL. */
SBX_EXPORT const char *sbx_strerror(int code);
/* The code's symbolic name without prefix ("EINVAL"); "UNKNOWN" otherwise. */
SBX_EXPORT const char *sbx_err_name(int code);
/* Frees a string or string array element returned by sbx; NULL allowed. */
SBX_EXPORT void sbx_free(void *p);
/* Frees a NULL-terminated string vector returned by sbx; NULL allowed. */
SBX_EXPORT void sbx_strv_free(char **v);

/* ------------------------------------------------------------------------ */
/* Logging                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum {
    SBX_LOG_DEBUG = 10,
    SBX_LOG_INFO = 20,
    SBX_LOG_WARNING = 30,
    SBX_LOG_ERROR = 40,
} sbx_log_level;

typedef void (*sbx_log_cb)(sbx_log_level level, const char *message, void *data);

/*
 * Routes the library's log lines to `cb` (NULL: drop them, the default).
 * Lines below `min_level` are not formatted at all. Process-wide; may be
 * called at any time from any thread; `cb` may run on any thread.
 */
SBX_EXPORT void sbx_set_log_cb(sbx_log_cb cb, void *data, sbx_log_level min_level);

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum {
    SBX_STATUS_STARTING = 0,
    SBX_STATUS_RUNNING = 1,
    SBX_STATUS_PAUSED = 2,
    SBX_STATUS_STOPPED = 3,
    SBX_STATUS_ERROR = 4,
    SBX_STATUS_UNKNOWN = 5,
} sbx_status;

/* The reference's string for a status ("running"); "unknown" when out of range. */
SBX_EXPORT const char *sbx_status_name(sbx_status s);
/* Parses a status string; SBX_EINVAL when it is not one of the six names. */
SBX_EXPORT int sbx_status_from_name(const char *name, sbx_status *out);

/* Spec: the reference's SandboxSpec. Not thread-safe while being built. */
typedef struct sbx_spec sbx_spec;

SBX_EXPORT sbx_spec *sbx_spec_new(void); /* NULL only when out of memory */
SBX_EXPORT void sbx_spec_free(sbx_spec *spec);
SBX_EXPORT sbx_spec *sbx_spec_copy(const sbx_spec *spec);
/* Setters copy their arguments. NULL clears a string field. */
SBX_EXPORT int sbx_spec_set_image(sbx_spec *spec, const char *image);
/* An absolute path in the box; a relative one is SBX_EINVAL. */
SBX_EXPORT int sbx_spec_set_workdir(sbx_spec *spec, const char *dir);
/*
 * Seconds; -1 clears it (the reference's None). Another negative value, NaN,
 * an infinity or more than 1e9 s (about 31 years) is SBX_EINVAL and leaves
 * the field as it was.
 */
SBX_EXPORT int sbx_spec_set_ttl(sbx_spec *spec, double seconds);
SBX_EXPORT int sbx_spec_set_ready_timeout(sbx_spec *spec, double seconds);
/*
 * Sets or replaces one variable; the order of first insertion is kept.
 * SBX_EINVAL for an empty key, a key holding '=', a "K=V" longer than 128 KiB
 * or an env past 2 MiB (the kernel's limits for one command, pointers
 * counted).
 */
SBX_EXPORT int sbx_spec_set_env(sbx_spec *spec, const char *key, const char *value);
/* Adds or replaces a startup file written into the box after create. */
SBX_EXPORT int sbx_spec_add_file(sbx_spec *spec, const char *path, const void *data, size_t len);
/*
 * [svc-logs] The same, with the file's permission bits (`mode` 0 to 0777;
 * sbx_spec_add_file's files are 0600). SBX_EINVAL for a mode outside them
 * (setuid, setgid and sticky bits are refused).
 */
SBX_EXPORT int sbx_spec_add_file_mode(sbx_spec *spec, const char *path, const void *data,
                                      size_t len, unsigned mode);
SBX_EXPORT int sbx_spec_set_metadata(sbx_spec *spec, const char *key, const char *value);
/*
 * Resources; -1 clears the field (None). Another negative value, NaN, an
 * infinity, or a size whose byte count passes 1 EiB (memory_mib 2^40,
 * disk_gib 2^30) is SBX_EINVAL and leaves the field as it was.
 */
SBX_EXPORT int sbx_spec_set_cpu(sbx_spec *spec, double cpu);
SBX_EXPORT int sbx_spec_set_memory_mib(sbx_spec *spec, long long mib);
SBX_EXPORT int sbx_spec_set_disk_gib(sbx_spec *spec, long long gib);
SBX_EXPORT int sbx_spec_set_gpu(sbx_spec *spec, long long count);
SBX_EXPORT int sbx_spec_set_gpu_type(sbx_spec *spec, const char *type);
/* `argv` is NULL-terminated; NULL clears the entrypoint. */
SBX_EXPORT int sbx_spec_set_entrypoint(sbx_spec *spec, const char *const *argv);
/* Validates the port as the reference does (1..65535, no duplicates). */
SBX_EXPORT int sbx_spec_add_port(sbx_spec *spec, int port, sbx_error **err);
/* `json` is a JSON object (or NULL/"" to clear). SBX_EINVAL/ETYPE otherwise. */
SBX_EXPORT int sbx_spec_set_provider_options(sbx_spec *spec, const char *json, sbx_error **err);
/*
 * Parses the mapping a reference user writes in YAML/JSON: image, ttl_s,
 * ready_timeout_s, workdir, env, files, metadata, resources, entrypoint,
 * provider_options, ports. JSON or YAML text. Unknown keys are SBX_EINVAL,
 * and so are negative, non-finite or too large numbers (as the setters
 * refuse them), a relative workdir, a NUL byte in any text but a file's
 * body, and an env past sbx_spec_set_env's limits; the message names the
 * field. YAML is bounded: 256 levels of nesting,
 * 1,000,000 values (100,000 from aliases) and 32 MiB of text with aliases
 * expanded, 64 KiB keys.
 */
SBX_EXPORT int sbx_spec_from_json(const char *json, sbx_spec **out, sbx_error **err);
/* The spec as a JSON object with every field (None as null). */
SBX_EXPORT int sbx_spec_to_json(const sbx_spec *spec, char **json_out, sbx_error **err);
/* Read access (borrowed pointers valid until the spec changes or is freed). */
SBX_EXPORT const char *sbx_spec_image(const sbx_spec *spec);
SBX_EXPORT const char *sbx_spec_workdir(const sbx_spec *spec);

/*
 * Resources parsed like the reference's SandboxResources.from_mapping: a JSON
 * object whose values are converted (cpu to float, memory_mib/disk_gib/gpu to
 * int, gpu_type to str). Writes them into `spec`.
 */
SBX_EXPORT int sbx_spec_set_resources_json(sbx_spec *spec, const char *json, sbx_error **err);

/* Exec options. */
typedef struct sbx_exec_opts sbx_exec_opts;
SBX_EXPORT sbx_exec_opts *sbx_exec_opts_new(void);
SBX_EXPORT void sbx_exec_opts_free(sbx_exec_opts *o);
SBX_EXPORT int sbx_exec_opts_set_cwd(sbx_exec_opts *o, const char *cwd);
SBX_EXPORT int sbx_exec_opts_set_env(sbx_exec_opts *o, const char *key, const char *value);
/*
 * Default 180 s, as the reference. A negative value means no timeout; NaN,
 * an infinity or more than 1e9 s is SBX_EINVAL. sbx_exec_opts_set_env refuses what
 * sbx_spec_set_env refuses.
 */
SBX_EXPORT int sbx_exec_opts_set_timeout(sbx_exec_opts *o, double seconds);
/* A user name or a numeric id ("1000" or "1000:1000"). */
SBX_EXPORT int sbx_exec_opts_set_user(sbx_exec_opts *o, const char *user);
/*
 * The command as argv (NULL-ended, copied; NULL clears), run without a
 * shell, as docker exec runs its CMD: so a box whose image has no shell
 * (distroless, scratch) still runs it. The program is found on the box's
 * PATH; one that cannot run gives 127 ("command not found") or 126, as a
 * shell would. The exec's command string is then only its description,
 * and what a provider without argv support runs (linux, docker and the
 * kit's providers have it; local too). An empty argv is SBX_EINVAL.
 */
SBX_EXPORT int sbx_exec_opts_set_argv(sbx_exec_opts *o, const char *const *argv);
SBX_EXPORT int sbx_exec_opts_set_stdin(sbx_exec_opts *o, const void *data, size_t len);
/*
 * Streams the command's stdin from `fd` (a pipe, FIFO, socket, regular file
 * or device) as it arrives, in bounded memory, instead of bytes given up
 * front; it replaces sbx_exec_opts_set_stdin. The fd is borrowed: it must
 * stay open until the exec completes; it is read until EOF or until the
 * command ends (what is unread then stays unread), never closed. A pipe or
 * socket may be switched to non-blocking mode while it is read (its flags
 * are restored). SBX_EINVAL for a
 * negative fd.
 */
SBX_EXPORT int sbx_exec_opts_set_stdin_fd(sbx_exec_opts *o, int fd);
/*
 * Caps how many bytes of stdout and of stderr are kept (each). Past the cap
 * the output is drained and dropped, and the result says it was truncated.
 * 0 means the provider's default (16 MiB unless configured). Pass SIZE_MAX
 * for no cap (the whole output then sits in memory).
 */
SBX_EXPORT int sbx_exec_opts_set_output_limit(sbx_exec_opts *o, size_t bytes);

/*
 * Streaming output. The command's stdout and stderr are handed over in
 * chunks as they arrive, while it runs, through a callback and/or a
 * descriptor per stream; the result still carries the whole output unless
 * sbx_exec_opts_set_keep_output(o, 0). A provider that declares
 * SBX_CAP_EXEC_STREAM ("exec-stream") streams (linux and every box provider
 * on sbx-agent, local); for one that does not, the core hands over the whole
 * output as chunks when the command ends, before the future completes, so
 * code written for streaming works everywhere (only later).
 *
 * Chunks are the command's bytes only: sbx's own messages (a timeout, a lost
 * box, the OOM note) are in the result's stderr, never in a chunk. The
 * bytes of one stream arrive in order, never split or merged other than at
 * arbitrary boundaries; chunks of stdout and stderr interleave as they were
 * read, which need not be the order the command wrote them in. Chunks are
 * cut at the output limit like the result (bytes past it are drained and
 * dropped, and the result says truncated, even with keep_output 0).
 */
#define SBX_STREAM_STDOUT 1
#define SBX_STREAM_STDERR 2
/*
 * `cb(stream, data, len, user)` for each chunk: SBX_STREAM_STDOUT or
 * SBX_STREAM_STDERR, `len` > 0, `data` borrowed for the call only. Runs on
 * the context's loop thread, in order, every chunk before the exec's
 * future completes (and before its sbx_future_then callback). It must not
 * block (it holds up every sandbox of the context) nor call sync sbx
 * functions (refused on the loop thread); copy what it needs. NULL `cb`
 * removes it. One callback per opts; the copy the exec takes keeps `user`.
 * SBX_EINVAL for NULL `o`. Not thread-safe on one opts object.
 */
typedef void (*sbx_exec_output_cb)(int stream, const char *data, size_t len, void *user);
SBX_EXPORT int sbx_exec_opts_set_output_cb(sbx_exec_opts *o, sbx_exec_output_cb cb, void *user);
/*
 * Writes `stream`'s chunks (SBX_STREAM_STDOUT or SBX_STREAM_STDERR) to `fd`
 * as they arrive, for callers on another event loop. -1 removes it; the
 * same fd may serve both streams (bytes of each stay in order). The fd is
 * borrowed: it must stay open until the exec's future completes, and it is
 * never closed, nor are its flags changed. It is written without ever
 * blocking the loop thread: a pipe, FIFO, tty or character device is
 * reopened through /proc/self/fd in non-blocking mode (a new open file
 * description) and written when epoll says it is writable; a socket is
 * written with MSG_DONTWAIT; anything else (a regular file, a block device,
 * /dev/null, or when the reopen fails) through the thread pool, one write
 * at a time, at the descriptor's current offset.
 *
 * A reader that does not keep up: at most 256 KiB wait in memory per exec;
 * past that the provider stops reading the command's output (local: its
 * pipes; agent boxes: the box's connection, which also holds up that box's
 * other operations), so the command blocks writing and nothing is lost.
 * The future completes only after every byte was written. A write that
 * fails (EPIPE: the reader went away; EBADF ...) kills the command, as a
 * closed pipe ends a shell pipeline, and the exec completes with SBX_EIO
 * naming the stream, the fd and the errno; SIGPIPE is never raised.
 *
 * SBX_EINVAL for a bad stream or an fd < -1. The fd is not checked here:
 * sbx_sandbox_exec(_async) refuses one that is not open (SBX_EINVAL).
 */
SBX_EXPORT int sbx_exec_opts_set_output_fd(sbx_exec_opts *o, int stream, int fd);
/*
 * 1 (the default): the result carries stdout and stderr, up to the output
 * limit. 0: it carries empty stdout and stderr (never None) except sbx's
 * own message on a runtime failure (a timeout, a lost box, an OOM note), so
 * a long stream consumed through a callback or an fd costs no memory.
 * SBX_EINVAL for NULL `o`.
 */
SBX_EXPORT int sbx_exec_opts_set_keep_output(sbx_exec_opts *o, int keep);

/* Exec result: the reference's SandboxExecResult. */
typedef struct sbx_exec_result sbx_exec_result;
/* NULL means the reference's None; `len` (optional) receives the length. */
SBX_EXPORT const char *sbx_exec_result_stdout(const sbx_exec_result *r, size_t *len);
SBX_EXPORT const char *sbx_exec_result_stderr(const sbx_exec_result *r, size_t *len);
SBX_EXPORT int sbx_exec_result_return_code(const sbx_exec_result *r);
/* NULL, or "timeout", "sandbox", "oom", "pty", ... */
SBX_EXPORT const char *sbx_exec_result_error_type(const sbx_exec_result *r);
/* Non-zero when stdout or stderr hit the output limit. */
SBX_EXPORT int sbx_exec_result_truncated(const sbx_exec_result *r);
SBX_EXPORT void sbx_exec_result_free(sbx_exec_result *r);
/* Builds a result (for providers, bindings and tests); NULL data is None. */
SBX_EXPORT int sbx_exec_result_new(const char *out, size_t out_len, const char *errb,
                                   size_t err_len, int return_code, const char *error_type,
                                   sbx_exec_result **result);

/* Endpoint: the reference's SandboxEndpoint. */
typedef struct sbx_endpoint sbx_endpoint;
/* Validates as the reference: the stripped URL must be absolute. */
SBX_EXPORT int sbx_endpoint_new(const char *url, sbx_endpoint **out, sbx_error **err);
SBX_EXPORT int sbx_endpoint_add_header(sbx_endpoint *e, const char *key, const char *value);
SBX_EXPORT const char *sbx_endpoint_url(const sbx_endpoint *e);
SBX_EXPORT size_t sbx_endpoint_header_count(const sbx_endpoint *e);
SBX_EXPORT int sbx_endpoint_header(const sbx_endpoint *e, size_t i, const char **key,
                                   const char **value);
SBX_EXPORT void sbx_endpoint_free(sbx_endpoint *e);

/* ------------------------------------------------------------------------ */
/* Contexts, futures                                                        */
/* ------------------------------------------------------------------------ */

/*
 * A context owns one I/O thread (a libuv loop) that runs every async
 * operation of the providers made in it. sbx_provider_new() uses a shared
 * default context that lives while any provider made in it does.
 */
typedef struct sbx_context sbx_context;
SBX_EXPORT int sbx_context_new(sbx_context **out, sbx_error **err);
/*
 * Joins the loop thread. Every provider made in it must be freed first.
 * Blocking work its worker pool has not started is cancelled (cleanups, such
 * as removing temp files, still run); work running on a worker finishes first
 * (the call waits for it), then the workers are joined.
 */
SBX_EXPORT void sbx_context_free(sbx_context *ctx);
/*
 * Sets how many threads of the context's worker pool may run blocking work
 * at once: image unpacking, box records and cleanups (cgroups), the file side
 * of uploads and downloads. `n` from 1 to 256; the default is SBX_WORKERS
 * from the environment when it is such a number, else 8. Threads start only
 * when work needs them; lowering the size takes effect as running work
 * finishes. Each context has its own pool (libuv's process-wide pool is not
 * used), so blocking work in one context never waits for another's.
 * Returns SBX_OK, or SBX_EINVAL (NULL ctx, n out of range). Does not block;
 * any thread.
 */
SBX_EXPORT int sbx_context_set_workers(sbx_context *ctx, unsigned n, sbx_error **err);
/* The current size of the context's worker pool (0 for NULL). Any thread. */
SBX_EXPORT unsigned sbx_context_workers(const sbx_context *ctx);

typedef struct sbx_future sbx_future;
typedef void (*sbx_future_cb)(sbx_future *f, void *data);

/*
 * Waits until the future completes or `timeout_s` passes (negative: no
 * limit). Returns the operation's code (SBX_OK or its error, copied into
 * `err`), or SBX_ETIMEDOUT when it is still running (the future stays valid).
 * Refuses (SBX_ESTATE) to block on the sbx loop thread.
 */
SBX_EXPORT int sbx_future_wait(sbx_future *f, double timeout_s, sbx_error **err);
/* A descriptor that becomes readable when the future completes. Owned by it. */
SBX_EXPORT int sbx_future_fd(sbx_future *f);
/* Non-zero once complete. */
SBX_EXPORT int sbx_future_done(const sbx_future *f);
/*
 * Calls `cb` once on the loop thread when the future completes (at once on
 * the loop if it already has, never inside this call). One callback per future.
 */
SBX_EXPORT int sbx_future_then(sbx_future *f, sbx_future_cb cb, void *data);
/*
 * Progress of a long operation (an image import: bytes of the source read),
 * as its provider reports it: `cb(stage, done, total, data)` runs on the
 * loop thread, at most every 50 ms or so, never after the future completed.
 * `total` is 0 when unknown. One callback per future; SBX_ESTATE for a second.
 */
typedef void (*sbx_progress_cb)(const char *stage, unsigned long long done,
                                unsigned long long total, void *data);
SBX_EXPORT int sbx_future_on_progress(sbx_future *f, sbx_progress_cb cb, void *data);
/*
 * Asks the operation to stop: what it started is killed and it completes
 * with SBX_ECANCELED (or its own result if it finished first).
 */
SBX_EXPORT void sbx_future_cancel(sbx_future *f);
/* The completed operation's code and a copy of its error (`err` optional). */
SBX_EXPORT int sbx_future_code(const sbx_future *f, sbx_error **err);
/* Typed results; each moves the value out (once) and returns the op's code. */
SBX_EXPORT int sbx_future_take_exec_result(sbx_future *f, sbx_exec_result **out, sbx_error **err);
SBX_EXPORT int sbx_future_take_status(sbx_future *f, sbx_status *out, sbx_error **err);
SBX_EXPORT int sbx_future_take_endpoint(sbx_future *f, sbx_endpoint **out, sbx_error **err);
SBX_EXPORT int sbx_future_take_string(sbx_future *f, char **out, sbx_error **err);
typedef struct sbx_sandbox sbx_sandbox;
SBX_EXPORT int sbx_future_take_sandbox(sbx_future *f, sbx_sandbox **out, sbx_error **err);
/*
 * Frees the future. A pending operation runs on and its result is dropped
 * (cancel it first to stop it).
 */
SBX_EXPORT void sbx_future_free(sbx_future *f);

/* ------------------------------------------------------------------------ */
/* Providers, registry, config                                              */
/* ------------------------------------------------------------------------ */

typedef struct sbx_provider sbx_provider;
struct sbx_provider_ops; /* include/sbx/provider.h */

/*
 * Creates a provider from a single-key mapping `{name: {...}}` in JSON or YAML
 * text, as the reference's create_provider(). A null value means {}.
 * Runs in the default context.
 */
SBX_EXPORT int sbx_provider_new(const char *config, sbx_provider **out, sbx_error **err);
SBX_EXPORT int sbx_provider_new_in(sbx_context *ctx, const char *config, sbx_provider **out,
                                   sbx_error **err);
/* The reference's aclose(). The provider lives on until its sandboxes are freed. */
SBX_EXPORT void sbx_provider_free(sbx_provider *p);
SBX_EXPORT const char *sbx_provider_name(const sbx_provider *p);
/*
 * 1 when the provider supports a capability, by name: "endpoint", "connect"
 * (or "serialize"), "pty", "list", "stop", "gc", "images", "pause",
 * "snapshot", "network", "port-forward", "shared-storage", "exec-stream",
 * "agent" (its boxes run sbx-agent: directory and byte transfers).
 * 0 otherwise, and for unknown names.
 */
SBX_EXPORT int sbx_provider_supports(const sbx_provider *p, const char *capability);

/* ------------------------------------------------------------------------ */
/* Boxes by id: list, stop, collect; images                                 */
/* ------------------------------------------------------------------------ */

/*
 * The boxes the provider knows, whoever created them and whether or not a
 * handle is open (E2B's and Modal's Sandbox.list): a JSON array text, one
 * ob * handle is open (E2B's and Modal's Sandbox.list): a JSON array text, one
 * object a box: {"id", "status", "created", "expires_at", "labels", "image",
 * "descriptor" (what sbx_sandbox_connect takes, or null), "provider": {...}}. `filter_json` is NULL or {"labels": {K: V}} (every
 * label must match the box's metadata). The caller frees *json_out.
 * SBX_ENOTSUP when the provider cannot list. Blocks; not on the loop thread.
 */
SBX_EXPORT int sbx_provider_list(sbx_provider *p, const char *filter_json, char **json_out,
                                 sbx_error **err);
SBX_EXPORT int sbx_provider_list_async(sbx_provider *p, const char *filter_json,
                                       sbx_future **out, sbx_error **err);
/* Ends box `id` of this provider and forgets it. SBX_ENOENT: no such box. */
SBX_EXPORT int sbx_provider_stop_box(sbx_provider *p, const char *id, sbx_error **err);
SBX_EXPORT int sbx_provider_stop_box_async(sbx_provider *p, const char *id, sbx_future **out,
                                           sbx_error **err);
/*
 * Collects expired and dead boxes, and with {"labels": {..}} every box whose
 * metadata matches (how a crashed run's boxes are cleaned up by run id);
 * {"dry_run": true} only reports. *removed_json_out (may be NULL) gets a JSON
 * array text of the ids.
 */
SBX_EXPORT int sbx_provider_gc(sbx_provider *p, const char *opts_json, char **removed_json_out,
                               sbx_error **err);
SBX_EXPORT int sbx_provider_gc_async(sbx_provider *p, const char *opts_json, sbx_future **out,
                                     sbx_error **err);
/* The provider's images: a JSON array text ({"name", "digest", "size", "created", "source"}). */
SBX_EXPORT int sbx_provider_image_list(sbx_provider *p, char **json_out, sbx_error **err);
/*
 * Makes image `name` from a local `source` (a tarball, directory or OCI
 * layout for linux); `opts_json` may be NULL. *json_out (may be NULL) gets
 * the image's JSON object text.
 */
SBX_EXPORT int sbx_provider_image_import(sbx_provider *p, const char *name, const char *source,
                                         const char *opts_json, char **json_out,
                                         sbx_error **err);
/* The same as a future (cancellable; progress with sbx_future_on_progress). */
SBX_EXPORT int sbx_provider_image_import_async(sbx_provider *p, const char *name,
                                               const char *source, const char *opts_json,
                                               sbx_future **out, sbx_error **err);
/*
 * Removes what no image uses: image records no name points at, layers no
 * image has, temporaries of dead imports (linux: also the pull layout's
 * blobs no image reaches and dead partial blobs). With `dry_run` only lists
 * them. `removed_json_out` (optional, caller frees): a JSON array of strings
 * ("layer sha256:...", "image sha256:...", "temporary", "pulled blob
 * sha256:...", ...). Blocks (waits for imports in progress);
 * SBX_EUNSUPPORTED for a provider without images.
 */
SBX_EXPORT int sbx_provider_image_prune(sbx_provider *p, int dry_run, char **removed_json_out,
                                        sbx_error **err);
/*
 * Pulls image `ref` (a Docker reference such as "python:3.12" or
 * "registry:5000/org/env:tag", or one pinned "@sha256:...") from its
 * registry into the provider's store, under its canonical name
 * ("docker.io/library/python:3.12"), which `--image` then finds.
 * `opts_json` may be NULL or {"platform": "linux/arm64"}. *json_out (may be
 * NULL) gets the image's JSON object text ({"name", "digest", "size",
 * "created", "source", "reference"}). Blocks (network); SBX_ENOTSUP when the
 * provider does not pull, SBX_EINVAL for a bad reference, SBX_ENOENT for an
 * unknown image or platform, SBX_EAUTH for refused credentials, SBX_EIO.
 * Thread-safe.
 */
SBX_EXPORT int sbx_provider_image_pull(sbx_provider *p, const char *ref, const char *opts_json,
                                       char **json_out, sbx_error **err);
/* The same as a future (cancellable: partial blobs are kept for the next pull; progress per blob). */
SBX_EXPORT int sbx_provider_image_pull_async(sbx_provider *p, const char *ref,
                                             const char *opts_json, sbx_future **out,
                                             sbx_error **err);
/* Forgets image `name`; `force`: even while boxes use it. */
SBX_EXPORT int sbx_provider_image_remove(sbx_provider *p, const char *name, int force,
                                         sbx_error **err);

/*
 * One image as a JSON object text in *json_out (name, digest, size, created,
 * source, and where known layers and config: the image's Env, WorkingDir,
 * User, Entrypoint, Cmd, ExposedPorts, Labels). SBX_ENOENT: no such image;
 * SBX_ENOTSUP: the provider has no image_inspect. Blocking.
 */
SBX_EXPORT int sbx_provider_image_inspect(sbx_provider *p, const char *name, char **json_out,
                                          sbx_error **err);
/* Gives image `src` the second name `name` (as `docker tag`). Blocking. */
SBX_EXPORT int sbx_provider_image_tag(sbx_provider *p, const char *src, const char *name,
                                      sbx_error **err);

/*
 * Turns running box `box_id`'s writable layer into a new image `name`
 * (NAME[:TAG]): the box image's layers plus one layer of what the box
 * changed (files, deletions, replaced directories), with the box image's
 * config and `opts_json`'s changes ({"changes": ["ENV K=V", "WORKDIR /d",
 * "USER u", "ENTRYPOINT [..]", "CMD [..]"], "pause": true}; NULL: none).
 * *json_out (may be NULL): {"id", "name", "layer", "layers"}. SBX_ENOTSUP:
 * the provider cannot commit. Blocking. (docs/images.md "Commit and build")
 */
SBX_EXPORT int sbx_provider_image_commit(sbx_provider *p, const char *box_id, const char *name,
                                         const char *opts_json, char **json_out,
                                         sbx_error **err);

/* Sorted names of every provider (registered, built in, plugins). */
SBX_EXPORT int sbx_list_providers(char ***names_out, sbx_error **err);
/*
 * Where provider `name` comes from: "registered", "built-in", or the path of
 * the plugin file that has it (SBX_PLUGIN_PATH, then the provider directory,
 * PREFIX/lib/sbx/providers). `*out` is freed with free().
 */
SBX_EXPORT int sbx_provider_source(const char *name, char **out, sbx_error **err);
/* SBX_OK when `name` resolves; the reference's "Unknown sandbox provider" otherwise. */
SBX_EXPORT int sbx_provider_lookup(const char *name, sbx_error **err);
/* Registers `ops` (kept by pointer: it must outlive its use) under ops->name. */
SBX_EXPORT int sbx_register_provider(const struct sbx_provider_ops *ops, int override,
                                     sbx_error **err);
/* Forgets a registered provider (built-ins stay). For tests and plugins. */
SBX_EXPORT int sbx_unregister_provider(const char *name, sbx_error **err);

/*
 * The reference's resolve_provider_config(): `ref` is a block name or an
 * inline single-key mapping; `document` the merged config (JSON or YAML, may
 * be NULL). Writes the single-key provider mapping as JSON (default_metadata
 * removed). `ref` is read as a YAML value: text starting with '{' or parsing
 * as a mapping is inline, a string is a name, and a list/number/bool/null (or
 * NULL) is the reference's TypeError, SBX_ETYPE "... must be a name
 * reference ...". ${oc.env:...} is resolved in the selected block. Errors:
 * SBX_EINVAL with the reference's messages (docs/config.md).
 */
SBX_EXPORT int sbx_resolve_provider_config(const char *ref, const char *document, char **json_out,
                                           sbx_error **err);
/* The block's default_metadata as a JSON object ("{}" when absent or falsy). */
SBX_EXPORT int sbx_resolve_provider_metadata(const char *ref, const char *document,
                                             char **json_out, sbx_error **err);
/* Parses YAML or JSON text into JSON, with ${oc.env:VAR[,default]} interpolated. */
SBX_EXPORT int sbx_config_to_json(const char *text, char **json_out, sbx_error **err);
/* Reads a YAML/JSON file into JSON (as sbx_config_to_json). */
SBX_EXPORT int sbx_config_load_file(const char *path, char **json_out, sbx_error **err);

/* `rewrites_json` is a JSON array of {"from": ..., "to": ...}. NULL image gives NULL. */
SBX_EXPORT int sbx_rewrite_image(const char *image, const char *rewrites_json, char **out,
                                 sbx_error **err);

/*
 * Attribution (the reference's nemo_gym.sandbox.attribution). `environ` is a
 * NULL-terminated "K=V" array, or NULL for the process environment. Writes a
 * JSON object with the resolved keys among team, user, workload.
 */
SBX_EXPORT int sbx_resolve_attribution(const char *team, const char *user, const char *workload,
                                       const char *const *environ, char **json_out,
                                       sbx_error **err);
/* Explicit value, then NEMO_GYM_RUN_ID, then a per-process 12-hex id. */
SBX_EXPORT int sbx_resolve_run_id(const char *run, const char *const *environ, char **out,
                                  sbx_error **err);
/*
 * The reference's log_attribution_once(): logs INFO "Sandbox attribution
 * metadata: {...}" (a Python dict repr) through the log callback, once per
 * process. `metadata_json` is a JSON object; an empty one logs nothing and
 * does not use up the one line. Returns 1 when this call logged, 0 when it
 * did not, SBX_EINVAL/SBX_ETYPE when the text is not a JSON object.
 * Thread-safe; the "already logged" flag is inherited by a forked child.
 */
SBX_EXPORT int sbx_log_attribution_once(const char *metadata_json);

/*
 * Quotes `s` for a POSIX shell exactly as Python's shlex.quote(). Returns a
 * new string (free with sbx_free), NULL only when out of memory; NULL `s` is
 * quoted as the empty string. Thread-safe.
 */
SBX_EXPORT char *sbx_shell_quote(const char *s);

/* ------------------------------------------------------------------------ */
/* Sandboxes                                                                */
/* ------------------------------------------------------------------------ */

/*
 * Makes a sandbox object (nothing is created yet). Keeps a reference to the
 * provider and a copy of the spec (NULL allowed).
 */
SBX_EXPORT int sbx_sandbox_new(sbx_provider *p, const sbx_spec *spec, sbx_sandbox **out,
                               sbx_error **err);
/*
 * Creates the box (with `spec`, or the one given to sbx_sandbox_new) and
 * writes spec files into it. A failed startup upload closes the box and
 * returns the upload's error. Errors: SBX_ESTATE ("Sandbox has been stopped",
 * "Sandbox is already started"), SBX_EINVAL ("requires a SandboxSpec"),
 * SBX_ECREATE, SBX_EVERIFY, the provider's errors.
 */
SBX_EXPORT int sbx_sandbox_start(sbx_sandbox *sb, const sbx_spec *spec, sbx_error **err);
/*
 * Runs a shell command. `opts` NULL means cwd = spec.workdir, timeout 180 s.
 * A non-zero exit is not an error: it is in the result.
 */
SBX_EXPORT int sbx_sandbox_exec(sbx_sandbox *sb, const char *command, const sbx_exec_opts *opts,
                                sbx_exec_result **out, sbx_error **err);
SBX_EXPORT int sbx_sandbox_upload(sbx_sandbox *sb, const char *local_path, const char *remote_path,
                                  sbx_error **err);
SBX_EXPORT int sbx_sandbox_download(sbx_sandbox *sb, const char *remote_path,
                                    const char *local_path, sbx_error **err);
/* UNKNOWN before start, STOPPED after stop, else what the provider says. */
SBX_EXPORT int sbx_sandbox_status(sbx_sandbox *sb, sbx_status *out, sbx_error **err);
SBX_EXPORT int sbx_sandbox_endpoint(sbx_sandbox *sb, int port, sbx_endpoint **out,
                                    sbx_error **err);
/* A JSON descriptor another process can pass to sbx_sandbox_connect(). */
SBX_EXPORT int sbx_sandbox_serialize(sbx_sandbox *sb, const char *scope, char **json_out,
                                     sbx_error **err);
/* A started sandbox that borrows the box `descriptor_json` names. */
SBX_EXPORT int sbx_sandbox_connect(sbx_provider *p, const char *descriptor_json,
                                   sbx_sandbox **out, sbx_error **err);
/* Idempotent. Ends the box (a borrowed one when its scope allows). */
SBX_EXPORT int sbx_sandbox_stop(sbx_sandbox *sb, sbx_error **err);
/* The provider-neutral id, or NULL before start. Owned by the sandbox. */
SBX_EXPORT const char *sbx_sandbox_id(const sbx_sandbox *sb);
/* The provider the sandbox runs on (borrowed). */
SBX_EXPORT sbx_provider *sbx_sandbox_provider(const sbx_sandbox *sb);
/* The spec's workdir or NULL (owned by the sandbox). */
SBX_EXPORT const char *sbx_sandbox_workdir(const sbx_sandbox *sb);
/* Non-zero when this handle owns the box (not made by connect). */
SBX_EXPORT int sbx_sandbox_owned(const sbx_sandbox *sb);
/*
 * Frees the object. A box this handle started and did not stop is stopped
 * first (blocking, unless called on the loop thread, where the stop is
 * queued). A connected handle only releases itself.
 */
SBX_EXPORT void sbx_sandbox_free(sbx_sandbox *sb);
/*
 * Frees the handle WITHOUT stopping the box: it lives on until another handle
 * (sbx_sandbox_connect with a descriptor from sbx_sandbox_serialize) stops it
 * or its TTL ends. For tools such as `sbx create`. Serialize first: the
 * descriptor is the only way back to the box.
 */
SBX_EXPORT void sbx_sandbox_detach(sbx_sandbox *sb);

/*
 * Transfer (the reference's `transfer` module; docs/transfer.md). Whole
 * directories move as a tar stream through the box's sbx-agent, which reads
 * and writes it itself: the box needs neither a shell nor tar. Every path in
 * the box is resolved inside the box's root; a relative one is relative to
 * the sandbox's workdir. Modes and mtimes are kept; owners only with
 * SBX_TRANSFER_PRESERVE_OWNER (else the files belong to the exec user, root
 * in a box). Links are kept as links and never followed, in either
 * direction. Memory stays bounded whatever the size.
 *
 * Providers: those whose boxes run sbx-agent (linux, and plugins built on
 * src/kit/box.c); others fail with SBX_ENOTSUP.
 *
 * Errors (the reference's taxonomy, for bindings): SBX_ETRANSFER, the
 * transfer failed inside the box (the message says why: a name with "..",
 * a link in the way, a limit, a full disk) = SandboxTransferError;
 * SBX_EIO / SBX_ETIMEDOUT, the box's agent went away or did not answer =
 * SandboxProbeError; SBX_ENOTSUP / SBX_EPROVIDER, the provider could not
 * run it at all = SandboxUnavailableError. Host-side problems (a missing
 * local directory, a local write failing) keep their own codes
 * (SBX_ENOENT, SBX_EINVAL, SBX_EIO with the local path named).
 *
 * Blocking; thread-safe across sandboxes and on one sandbox (each call is
 * its own exec channel). Not callable on the loop thread.
 */
#define SBX_TRANSFER_PRESERVE_OWNER 1u
/* Limits the box applies to an upload (0: the default). */
#define SBX_TRANSFER_DEFAULT_MAX_ENTRIES 1000000ull
#define SBX_TRANSFER_DEFAULT_MAX_BYTES (64ull << 30)
/*
 * Copies the contents of host directory `local_dir` into `remote_dir`
 * (created, with missing parents; existing entries of the same names are
 * replaced, others kept), as `docker cp DIR/. box:REMOTE` does.
 */
SBX_EXPORT int sbx_sandbox_upload_dir(sbx_sandbox *sb, const char *local_dir,
                                      const char *remote_dir, unsigned flags, sbx_error **err);
/* Copies the contents of box directory `remote_dir` into host directory `local_dir` (created). */
SBX_EXPORT int sbx_sandbox_download_dir(sbx_sandbox *sb, const char *remote_dir,
                                        const char *local_dir, unsigned flags, sbx_error **err);
/*
 * Async forms of the two above: *out is a future (caller frees) completing
 * with no value and the same codes. The transfer runs on a thread of its
 * own; it cannot be cancelled yet (sbx_future_cancel has no effect on it).
 * The sandbox must not be stopped or freed before the future completes.
 */
SBX_EXPORT int sbx_sandbox_upload_dir_async(sbx_sandbox *sb, const char *local_dir,
                                            const char *remote_dir, unsigned flags,
                                            sbx_future **out, sbx_error **err);
SBX_EXPORT int sbx_sandbox_download_dir_async(sbx_sandbox *sb, const char *remote_dir,
                                              const char *local_dir, unsigned flags,
                                              sbx_future **out, sbx_error **err);
/*
 * Replays a tar stream read from `fd` (borrowed; read to EOF) into
 * `remote_dir`, byte for byte as given (the reference's upload_archive).
 * The box's reader is strict: ustar/pax (GNU long names accepted), regular
 * files, directories, symlinks and hard links within the tree only.
 */
SBX_EXPORT int sbx_sandbox_upload_archive(sbx_sandbox *sb, int fd, const char *remote_dir,
                                          unsigned flags, sbx_error **err);
/* Writes a tar stream of box directory `remote_dir` to `fd` (borrowed, never closed). */
SBX_EXPORT int sbx_sandbox_download_archive(sbx_sandbox *sb, const char *remote_dir, int fd,
                                            sbx_error **err);
/*
 * What `remote_path` is (links followed inside the box): *kind_out is
 * "file", "dir", "other" or NULL when nothing is there (static strings).
 */
SBX_EXPORT int sbx_sandbox_remote_kind(sbx_sandbox *sb, const char *remote_path,
                                       const char **kind_out, sbx_error **err);
/* Writes `len` bytes to `remote_path` with permission bits `mode` (parents made; atomic). */
SBX_EXPORT int sbx_sandbox_write_file(sbx_sandbox *sb, const char *remote_path, const void *data,
                                      size_t len, unsigned mode, sbx_error **err);
/*
 * Reads `remote_path` (a regular file of at most `max_bytes`, 0: 64 MiB)
 * into an allocated buffer (*data_out, NUL-terminated beyond *len_out; free()).
 */
SBX_EXPORT int sbx_sandbox_read_file(sbx_sandbox *sb, const char *remote_path, size_t max_bytes,
                                     char **data_out, size_t *len_out, sbx_error **err);

/*
 * Async forms: on success `*out` is a future the caller frees. The start's
 * future reports what the provider's create reports through
 * sbx_future_on_progress: an image pulled for it, per layer (docker: stage
 * "pull:STATE:layer:ID12", STATE waiting, downloading, verifying, extracting,
 * done or cached, with bytes done and total).
 */
SBX_EXPORT int sbx_sandbox_start_async(sbx_sandbox *sb, const sbx_spec *spec, sbx_future **out,
                                       sbx_error **err);
SBX_EXPORT int sbx_sandbox_exec_async(sbx_sandbox *sb, const char *command,
                                      const sbx_exec_opts *opts, sbx_future **out,
                                      sbx_error **err);
SBX_EXPORT int sbx_sandbox_upload_async(sbx_sandbox *sb, const char *local_path,
                                        const char *remote_path, sbx_future **out,
                                        sbx_error **err);
SBX_EXPORT int sbx_sandbox_download_async(sbx_sandbox *sb, const char *remote_path,
                                          const char *local_path, sbx_future **out,
                                          sbx_error **err);
SBX_EXPORT int sbx_sandbox_status_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err);
SBX_EXPORT int sbx_sandbox_endpoint_async(sbx_sandbox *sb, int port, sbx_future **out,
                                          sbx_error **err);
SBX_EXPORT int sbx_sandbox_serialize_async(sbx_sandbox *sb, const char *scope, sbx_future **out,
                                           sbx_error **err);
SBX_EXPORT int sbx_sandbox_connect_async(sbx_provider *p, const char *descriptor_json,
                                         sbx_future **out, sbx_error **err);
SBX_EXPORT int sbx_sandbox_stop_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err);
/*
 * Pauses the box keeping its state: its processes stop (cgroup freezer on
 * linux, the engine's pause on docker), use no CPU and answer nothing, and
 * resume continues them. Both are idempotent. While paused, status says
 * SBX_STATUS_PAUSED, and exec, transfers and terminals on this handle fail
 * at once with SBX_ESTATE ("Sandbox ... is paused: resume it first"); stop
 * ends a paused box. The box's TTL keeps running while it is paused.
 * SBX_ENOTSUP for a provider without pause (sbx_provider_supports "pause").
 * docs/pause.md.
 */
SBX_EXPORT int sbx_sandbox_pause(sbx_sandbox *sb, sbx_error **err);
SBX_EXPORT int sbx_sandbox_resume(sbx_sandbox *sb, sbx_error **err);
SBX_EXPORT int sbx_sandbox_pause_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err);
SBX_EXPORT int sbx_sandbox_resume_async(sbx_sandbox *sb, sbx_future **out, sbx_error **err);

/* ------------------------------------------------------------------------ */
/* Warm pools (docs/scale.md, "Warm pools")                                  */
/* ------------------------------------------------------------------------ */

/*
 * Boxes of one spec started ahead of need, so a create is a claim of one
 * already running. The pool keeps `size` (1 to 4096) boxes started or
 * starting on provider `p` (which it references). They are ordinary boxes:
 * they count against limits, carry the spec's labels and TTL (counted from
 * their start: one past half its TTL is not handed out), and gc collects
 * them. Thread-safe.
 */
typedef struct sbx_warm_pool sbx_warm_pool;
SBX_EXPORT int sbx_warm_pool_new(sbx_provider *p, const sbx_spec *spec, unsigned size,
                                 sbx_warm_pool **out, sbx_error **err);
/*
 * A started sandbox, the caller's to use, stop and free as if it had made
 * it: the oldest started box at once, else the oldest still starting once
 * it has, else (that one failed) one started by this call, whose error is
 * returned as sbx_sandbox_start's. Each claim starts a replacement.
 */
SBX_EXPORT int sbx_warm_pool_claim(sbx_warm_pool *wp, sbx_sandbox **out, sbx_error **err);
/* Boxes ready and starting now; claims so far, and those a started box served. */
SBX_EXPORT int sbx_warm_pool_stats(sbx_warm_pool *wp, unsigned *ready, unsigned *starting,
                                   unsigned long long *claims, unsigned long long *hits);
/* A copy of the last start that failed in the background (sbx_error_free it), or NULL. */
SBX_EXPORT sbx_error *sbx_warm_pool_last_error(sbx_warm_pool *wp);
/* Stops every box not claimed (all at once), and frees the pool. */
SBX_EXPORT void sbx_warm_pool_free(sbx_warm_pool *wp);

/* ------------------------------------------------------------------------ */
/* PTY sessions (docs/terminals.md)                                          */
/* ------------------------------------------------------------------------ */

/*
 * A terminal (or, in pipe mode, a command with stdout and stderr apart) that
 * lives in the box's agent, not in this process: it keeps running when its
 * handle goes away, keeps the last SBX_PTY_WINDOW_BYTES of each output
 * stream with absolute byte offsets, and another handle (in any process)
 * can attach to it and replay from an offset. Providers with SBX_CAP_PTY
 * ("pty") have them: linux, local and docker (its local-engine path), whose
 * handles hold their own connection to the box's agent; and providers that
 * open sessions in their own service (provider ABI 3's pty_open, such as the
 * restbox example), whose handles talk to the provider on the context's
 * loop and whose sessions keep what that service keeps (docs/terminals.md).
 * The calls block the calling thread (never the context's loop) and one
 * thread at a time may use a handle.
 */
#define SBX_PTY_WINDOW_BYTES (1u << 20)
#define SBX_PTY_MAX_SESSIONS 256

typedef struct sbx_pty_opts sbx_pty_opts;
SBX_EXPORT sbx_pty_opts *sbx_pty_opts_new(void);
SBX_EXPORT void sbx_pty_opts_free(sbx_pty_opts *o);
/* The command, run by the box's shell (`SHELL -c`). Neither this nor argv: the box's shell. */
SBX_EXPORT int sbx_pty_opts_set_command(sbx_pty_opts *o, const char *command);
/* The command as an argv (NULL-terminated, copied); replaces set_command. */
SBX_EXPORT int sbx_pty_opts_set_argv(sbx_pty_opts *o, const char *const *argv);
SBX_EXPORT int sbx_pty_opts_set_cwd(sbx_pty_opts *o, const char *cwd);
SBX_EXPORT int sbx_pty_opts_set_user(sbx_pty_opts *o, const char *user);
/* Adds K=V to the session's environment (later wins). SBX_EINVAL for an empty key or one with '='. */
SBX_EXPORT int sbx_pty_opts_set_env(sbx_pty_opts *o, const char *key, const char *value);
/* The terminal's size (default 24x80); 1..4096 each, else SBX_EINVAL. */
SBX_EXPORT int sbx_pty_opts_set_size(sbx_pty_opts *o, unsigned rows, unsigned cols);
/* Non-zero: pipe mode (no terminal; stdout and stderr apart). */
SBX_EXPORT int sbx_pty_opts_set_pipes(sbx_pty_opts *o, int pipes);

typedef struct sbx_pty sbx_pty;
/*
 * Opens a session in the started sandbox `sb` (opts NULL: the box's shell on
 * a 24x80 terminal). Blocks until the command runs. Errors: SBX_ENOTSUP (the
 * provider has no PTYs), SBX_ESTATE, SBX_EPTY (the command could not start:
 * the message says why; the box already holds SBX_PTY_MAX_SESSIONS), SBX_EIO.
 * `*out` is freed with sbx_pty_close or sbx_pty_free.
 */
SBX_EXPORT int sbx_pty_open(sbx_sandbox *sb, const sbx_pty_opts *opts, sbx_pty **out,
                            sbx_error **err);
/*
 * Attaches to session `id` of `sb` from a new connection: output replays from
 * byte offset `since` (or the oldest byte still kept), then follows live.
 * A session held by another handle is refused (SBX_EPTY) unless `takeover`,
 * which evicts that handle (its next read fails with SBX_EPTY, "taken over").
 * SBX_EPTY also when there is no such session.
 */
SBX_EXPORT int sbx_pty_attach(sbx_sandbox *sb, unsigned id, int takeover, unsigned long long since,
                              sbx_pty **out, sbx_error **err);
/* The session's id in its box (for sbx_pty_attach). */
SBX_EXPORT unsigned sbx_pty_id(const sbx_pty *p);
/* A descriptor that is readable when a read may have something (for poll loops). */
SBX_EXPORT int sbx_pty_fd(const sbx_pty *p);
/*
 * Reads output of `stream` (SBX_STREAM_STDOUT: the terminal, or stdout in
 * pipe mode; SBX_STREAM_STDERR: pipe mode's stderr). Waits up to `timeout_s`
 * (< 0: forever, 0: not at all) for bytes. SBX_OK with *n > 0 bytes, their
 * offset in *offset (optional; a gap from the last read means bytes fell out
 * of the window); SBX_OK with *n == 0 once the session ended and everything
 * was read; SBX_ETIMEDOUT when nothing came in time; SBX_EPTY when the
 * handle was taken over or detached, SBX_EIO when the box went away.
 */
SBX_EXPORT int sbx_pty_read(sbx_pty *p, int stream, void *buf, size_t cap, double timeout_s,
                            size_t *n, unsigned long long *offset, sbx_error **err);
/* Writes stdin bytes (len 0: EOF: pipe mode closes stdin, a terminal gets ^D). */
SBX_EXPORT int sbx_pty_write(sbx_pty *p, const void *data, size_t len, sbx_error **err);
/* The terminal's new size (the foreground job gets SIGWINCH); ignored in pipe mode. */
SBX_EXPORT int sbx_pty_resize(sbx_pty *p, unsigned rows, unsigned cols, sbx_error **err);
/*
 * Sends a signal by name ("INT", "SIGINT", "TERM", "KILL", "HUP", "QUIT",
 * "USR1", "USR2", "STOP", "CONT", "WINCH", "ALRM", or a number) to the
 * terminal's foreground group, or the session's group in pipe mode.
 */
SBX_EXPORT int sbx_pty_signal(sbx_pty *p, const char *name, sbx_error **err);
/*
 * Waits up to `timeout_s` (< 0: forever) for the session to end, keeping its
 * output for sbx_pty_read (up to the window). *code: the exit status, or
 * 128+N for a signal N. SBX_ETIMEDOUT, SBX_EPTY, SBX_EIO as for read.
 */
SBX_EXPORT int sbx_pty_wait(sbx_pty *p, double timeout_s, int *code, sbx_error **err);
/* Leaves the session running and ends this handle's hold (it can be attached again). */
SBX_EXPORT int sbx_pty_detach(sbx_pty *p, sbx_error **err);
/*
 * Ends the handle: a session this handle opened is ended (its processes,
 * background jobs included, are killed) and waited for (up to 30 s, else
 * SBX_ETIMEDOUT); an attached one is only detached. Frees `p` either way.
 */
SBX_EXPORT int sbx_pty_close(sbx_pty *p, sbx_error **err);
/* Frees the handle without ending the session (the connection closes: it detaches). */
SBX_EXPORT void sbx_pty_free(sbx_pty *p);

/* ------------------------------------------------------------------------ */
/* [svc-logs] Service logs                                                   */
/* ------------------------------------------------------------------------ */

/*
 * An event of the service log: the service ended ("exited N" or "killed
 * N", as the box's agent reported it), or the box's agent died ("agent
 * exited N", "agent killed N"). Events are records the provider writes
 * apart from the box's output (the linux shim's event records): no byte the
 * box prints becomes one. Output entries (SBX_STREAM_STDOUT/STDERR) are the
 * box's, whatever they say.
 */
#define SBX_STREAM_EVENT 3
/* sbx_sandbox_logs flags: keep reading as the service writes. */
#define SBX_LOGS_FOLLOW 1u

/*
 * One entry of a service log: `time` (unix seconds, when the provider read
 * it), `stream` (SBX_STREAM_STDOUT, SBX_STREAM_STDERR or SBX_STREAM_EVENT),
 * `data[0..len)` borrowed for the call only: one line with its newline, or a
 * piece of a line (what one read held). Return non-zero to stop reading.
 */
typedef int (*sbx_service_log_cb)(double time, int stream, const char *data, size_t len,
                                  void *user);

/*
 * Reads the output of the box's service (its entrypoint; the agent's own
 * lines are on stderr too, prefixed "sbx-agent: ", written inside the box
 * where the service could write the same: output, not events), oldest
 * first, calling
 * `cb` for each entry whose time is >= `since` (0: all). `tail` >= 0 gives
 * only the entries of the last `tail` lines (a line read in pieces counts
 * once; events not counted); < 0 all. With
 * SBX_LOGS_FOLLOW, then waits for new entries until the service ends, the
 * box is stopped, or `cb` returns non-zero. Blocks; runs `cb` on the calling
 * thread; not on the loop thread. Codes: SBX_ENOTSUP (the provider keeps no
 * logs), SBX_EPERM (a log file that is not the caller's own), SBX_EIO (a
 * malformed log; the entries before it were delivered).
 */
SBX_EXPORT int sbx_sandbox_logs(sbx_sandbox *sb, double since, long long tail, unsigned flags,
                                sbx_service_log_cb cb, void *user, sbx_error **err);
/* --- Volumes and runtime requirements (linux; docs/volumes.md) ---------- */

/*
 * Named volumes of the linux provider: directories in its volume store
 * that boxes mount by name (provider_options.volumes "NAME:/path"), several
 * at once. Each call blocks on local file I/O, is safe from any thread, and
 * returns SBX_ENOTSUP for a provider without volumes. *json_out (malloc'd;
 * may be NULL where said) gets the answer:
 *
 * create: makes volume `name` (1-64 of [A-Za-z0-9_.-], starting with a
 *   letter or digit) unless it exists; {"name", "created", "mountpoint"}.
 * list: a JSON array of those, each with "used_by" (ids of running boxes
 *   mounting it); json_out is required.
 * inspect: one volume as list gives it; SBX_ENOENT when there is none.
 * remove: deletes it and its files; SBX_ESTATE (naming the boxes) while
 *   running boxes mount it, unless `force`.
 */
SBX_EXPORT int sbx_provider_volume_create(sbx_provider *p, const char *name, char **json_out,
                                          sbx_error **err);
SBX_EXPORT int sbx_provider_volume_list(sbx_provider *p, char **json_out, sbx_error **err);
SBX_EXPORT int sbx_provider_volume_inspect(sbx_provider *p, const char *name, char **json_out,
                                           sbx_error **err);
SBX_EXPORT int sbx_provider_volume_remove(sbx_provider *p, const char *name, int force,
                                          sbx_error **err);
/*
 * The newer API's SupportsSandboxSharedStorage. shared_volume_options:
 * provider options {"volumes": [descriptor]} that mount `source` (relative
 * to the provider's shared root; NULL: the root itself) at absolute
 * `target` in the box, read-only when `read_only`; the descriptor is
 * checked now (SBX_EINVAL) and the directory made at create.
 * shared_volume_metadata: placement settings, a JSON object of strings
 * ("sbx.provider", "sbx.host", "sbx.shared_root"). json_out is required.
 */
SBX_EXPORT int sbx_provider_shared_volume_options(sbx_provider *p, const char *source,
                                                  const char *target, int read_only,
                                                  char **json_out, sbx_error **err);
SBX_EXPORT int sbx_provider_shared_volume_metadata(sbx_provider *p, char **json_out,
                                                   sbx_error **err);
/*
 * The newer API's SupportsSandboxRuntimeRequirements: checks capabilities
 * `cap_add` (NULL-ended; "NET_ADMIN", "CAP_SYS_PTRACE", any case; NULL: none)
 * and `shm_size` (bytes; < 0: none). SBX_EPERM names a refused capability
 * and why; SBX_EINVAL an unknown one or a bad size. *json_out (may be NULL)
 * gets the create-time metadata to put in the spec ({"sbx.cap_add":
 * "NET_ADMIN,...", "sbx.shm_size": "N"}), or "null" when nothing was asked.
 */
SBX_EXPORT int sbx_provider_validate_runtime_requirements(sbx_provider *p,
                                                          const char *const *cap_add,
                                                          long long shm_size, char **json_out,
                                                          sbx_error **err);
/* --- Box-to-box networks (linux; docs/networking.md) ------------------- */

/*
 * Named networks of the linux provider: a network namespace with a bridge
 * and no route out; boxes created with provider_options.network "NAME"
 * join it, each with an address of its subnet, and reach each other by
 * hostname or id (their /etc/hosts). Each call blocks on local file and
 * netlink I/O, is safe from any thread, and returns SBX_ENOTSUP for a
 * provider without networks. *json_out (malloc'd; may be NULL where said):
 *
 * create: makes network `name` (1-64 of [A-Za-z0-9_.-], starting with a
 *   letter or digit; not none, host or nat) unless it exists: {"name",
 *   "subnet", "created", "boxes"}. Needs root (SBX_EPERM says so).
 * list: a JSON array of those ("boxes": ids of the boxes in it); json_out
 *   is required.
 * inspect: one network as list gives it; SBX_ENOENT when there is none.
 * remove: deletes it; SBX_ESTATE (naming the boxes) while boxes are in it.
 */
SBX_EXPORT int sbx_provider_network_create(sbx_provider *p, const char *name, char **json_out,
                                           sbx_error **err);
SBX_EXPORT int sbx_provider_network_list(sbx_provider *p, char **json_out, sbx_error **err);
SBX_EXPORT int sbx_provider_network_inspect(sbx_provider *p, const char *name, char **json_out,
                                            sbx_error **err);
SBX_EXPORT int sbx_provider_network_remove(sbx_provider *p, const char *name, sbx_error **err);
/*
 * The newer API's SupportsSandboxNetwork. validate_networking: SBX_OK when
 * the provider can put boxes in networks here (linux, as root); SBX_ENOTSUP
 * or SBX_EPERM saying why not. Does not block.
 * network_address: the address other boxes of its network reach `sb` at
 * (*addr_out malloc'd): its network address, or "127.0.0.1" for a box on
 * the host's network; SBX_ESTATE for a box in no network. Blocks on a file
 * read.
 * set_hosts: `hosts_json` a JSON object {"name": "address"} that replaces
 * the extra entries of the box's /etc/hosts (after its network peers);
 * SBX_EINVAL for a bad name or address, SBX_ESTATE for a box in no
 * network. Blocks on file I/O. All three are safe from any thread.
 */
SBX_EXPORT int sbx_provider_validate_networking(sbx_provider *p, sbx_error **err);
SBX_EXPORT int sbx_sandbox_network_address(sbx_sandbox *sb, char **addr_out, sbx_error **err);
SBX_EXPORT int sbx_sandbox_set_hosts(sbx_sandbox *sb, const char *hosts_json, sbx_error **err);
/*
 * The newer API's SupportsSandboxPortForwarding.forward_ports (linux):
 * listens on the box's own 127.0.0.1:PORT for each of `ports` (1-64 of
 * them) and carries each connection to `target_address`:PORT (an IPv4 or
 * IPv6 literal, e.g. another box's network_address) from the box's network
 * namespace, so a program in the box reaches a peer's ports on its
 * loopback. Once listening it writes an empty `ready_file` in the box (NULL
 * or "": none). Blocks until `cancel_fd` is readable (returns SBX_OK) or
 * the box ends (SBX_ESTATE); a connection the target refuses is closed.
 * Not on the loop thread. SBX_EINVAL for a bad address or port,
 * SBX_ESTATE for a stopped box or a port already taken in it.
 */
SBX_EXPORT int sbx_sandbox_forward_ports(sbx_sandbox *sb, const char *target_address,
                                         const int *ports, size_t n_ports,
                                         const char *ready_file, int cancel_fd, sbx_error **err);
/*
 * The reference's `pty.exec` facade (docs/terminals.md "pty exec"): runs
 * `command` in a PTY session and returns it as an exec result.
 *
 * - With no session given and nothing shaping the call (no cwd, env or
 *   user, a 24x80 terminal, not pipe mode), the command runs in the
 *   sandbox's default session if it has one: the first box-shell session
 *   (sbx_pty_open with neither command nor argv) opened through `sb` while
 *   no live default existed. The default stays the caller's handle; the
 *   sandbox only remembers it until sbx_pty_free/sbx_pty_close or until
 *   the facade closes it (below), and forgets it when `sb` is freed.
 * - Otherwise, and when there is no default, it opens a one-shot session
 *   for `command` (with those options), reads its output and exit status,
 *   and always closes it: stdout, stderr (NULL on a terminal, the text in
 *   pipe mode) and the exit code, or on timeout return code 125, error type
 *   "timeout" and "PTY command timed out after {T}s: {command!r}".
 * - In a session (the default, or sbx_pty_exec_opts_set_session) the
 *   command runs between marker lines (the NGPTY protocol): stdout is what
 *   the terminal printed before the marker, echo included; the exit code
 *   is the marker's status (125 and error type "pty" when it is not a
 *   number); stderr is what a pipe-mode session printed there (NULL if
 *   none). One command at a time per sandbox: the lock is waited for within
 *   the same timeout. On timeout: 125, "timeout", the message above plus
 *   "; the command is still running and the session should be discarded";
 *   a default session is then closed (sbx_pty_closed says so; the caller
 *   still frees it) and forgotten, a session given is left as it is.
 *
 * {T} and {command!r} are printed as Python prints them for a float and a
 * str (an integral T without ".0": the reference's default is the int 180).
 * Errors: SBX_EINVAL (with a session: cwd, env or user given: "cwd/env/user
 * apply only when pty.exec opens its own session; for an existing session
 * they are fixed at pty.create() time"), SBX_EPTY ("PTY session ended before
 * the command finished", or the session's own error), sbx_pty_open's codes
 * for a one-shot session. Blocks the calling thread (never the loop's);
 * thread-safe per sandbox, but a session given or the default must not be
 * used by another thread meanwhile. `*out` (caller frees) on success only.
 */
typedef struct sbx_pty_exec_opts sbx_pty_exec_opts;
SBX_EXPORT sbx_pty_exec_opts *sbx_pty_exec_opts_new(void);
SBX_EXPORT void sbx_pty_exec_opts_free(sbx_pty_exec_opts *o);
/* Runs in this session (borrowed; it must outlive the call). NULL: the default or one-shot. */
SBX_EXPORT int sbx_pty_exec_opts_set_session(sbx_pty_exec_opts *o, sbx_pty *session);
SBX_EXPORT int sbx_pty_exec_opts_set_cwd(sbx_pty_exec_opts *o, const char *cwd);
SBX_EXPORT int sbx_pty_exec_opts_set_user(sbx_pty_exec_opts *o, const char *user);
/* Adds K=V (SBX_EINVAL for an empty key or one with '='). Any call counts as "env given". */
SBX_EXPORT int sbx_pty_exec_opts_set_env(sbx_pty_exec_opts *o, const char *key, const char *value);
/* Marks the env as given even when empty (the reference's env={}). */
SBX_EXPORT int sbx_pty_exec_opts_set_env_given(sbx_pty_exec_opts *o);
/* The terminal's size for a one-shot session (default 24x80; 1..4096). */
SBX_EXPORT int sbx_pty_exec_opts_set_size(sbx_pty_exec_opts *o, unsigned rows, unsigned cols);
/* Non-zero: a one-shot session in pipe mode (the reference's pty=False). */
SBX_EXPORT int sbx_pty_exec_opts_set_pipes(sbx_pty_exec_opts *o, int pipes);
/* Seconds for the whole call (default 180); < 0: no limit. SBX_EINVAL: not finite or > 1e9. */
SBX_EXPORT int sbx_pty_exec_opts_set_timeout(sbx_pty_exec_opts *o, double seconds);
SBX_EXPORT int sbx_sandbox_pty_exec(sbx_sandbox *sb, const char *command,
                                    const sbx_pty_exec_opts *opts, sbx_exec_result **out,
                                    sbx_error **err);
/* Non-zero once the pty exec facade closed this session (after a timeout); free it then. */
SBX_EXPORT int sbx_pty_closed(const sbx_pty *p);

/* ------------------------------------------------------------------------ */
/* Background processes (docs/terminals.md, "Background processes")          */
/* ------------------------------------------------------------------------ */

/*
 * A command started in the background: a pipe-mode PTY session of the box's
 * agent (stdout and stderr apart, stdin a pipe), so it keeps running when
 * its handle goes away and any process can attach to it again by id. The
 * same providers as PTY sessions (SBX_CAP_PTY: linux, local, docker), and
 * the same rules: each handle holds its own connection, its calls block
 * the calling thread, one thread at a time per handle. A box whose agent
 * predates protocol version 4 refuses the KEEP flag and the listings with
 * SBX_ENOTSUP ("the box's agent is too old ...: restart the box").
 */
typedef struct sbx_proc sbx_proc;
/*
 * Starts `opts`' command (set_command or set_argv; cwd, user, env as for a
 * PTY; size and pipe mode are ignored: always pipes). `*out` holds the
 * process: sbx_proc_free lets it go (it runs on), sbx_proc_signal(p, "KILL")
 * ends it. Errors as sbx_pty_open: SBX_EPTY says why a command could not start.
 */
SBX_EXPORT int sbx_proc_start(sbx_sandbox *sb, const sbx_pty_opts *opts, sbx_proc **out,
                              sbx_error **err);
/* sbx_proc_attach flags. */
#define SBX_PROC_TAKEOVER 1u /* take the process from the handle that holds it */
#define SBX_PROC_KEEP 2u     /* reading its end does not collect it (it stays listed) */
/*
 * A new handle on background process `id` of `sb` (its own connection, any
 * process): output replays from byte offset `since` (0: the oldest byte
 * kept; each stream keeps its last SBX_PTY_WINDOW_BYTES) and then follows.
 * Held by another handle: SBX_EPTY unless SBX_PROC_TAKEOVER. Without
 * SBX_PROC_KEEP, once this handle has read the end of an ended process the
 * box forgets it (as waitpid collects a child); with it, it stays listed
 * with its exit code for a later attach. SBX_EPTY "no PTY session N" when
 * there is no such process.
 */
SBX_EXPORT int sbx_proc_attach(sbx_sandbox *sb, unsigned id, unsigned flags,
                               unsigned long long since, sbx_proc **out, sbx_error **err);
/* The process's id in its box (for sbx_proc_attach, `sbx attach ID N`). */
SBX_EXPORT unsigned sbx_proc_id(const sbx_proc *p);
/* A descriptor readable when a read may have something (for poll loops). */
SBX_EXPORT int sbx_proc_fd(const sbx_proc *p);
/* Writes `len` bytes to its stdin (0 bytes: nothing; EOF is sbx_proc_close_stdin). */
SBX_EXPORT int sbx_proc_write(sbx_proc *p, const void *data, size_t len, sbx_error **err);
/* Closes its stdin: the command reads EOF. */
SBX_EXPORT int sbx_proc_close_stdin(sbx_proc *p, sbx_error **err);
/*
 * Reads SBX_STREAM_STDOUT or SBX_STREAM_STDERR, as sbx_pty_read: waits up to
 * `timeout_s` (0: only what already arrived, < 0: forever); SBX_OK with
 * *n == 0 once the process ended and everything was read; SBX_ETIMEDOUT.
 */
SBX_EXPORT int sbx_proc_read(sbx_proc *p, int stream, void *buf, size_t cap, double timeout_s,
                             size_t *n, unsigned long long *offset, sbx_error **err);
/* Waits up to `timeout_s` (< 0 forever) for its end; *code: the status, 128+N for a signal N. */
SBX_EXPORT int sbx_proc_wait(sbx_proc *p, double timeout_s, int *code, sbx_error **err);
/* Sends a signal by name ("TERM", "SIGKILL", "9", ... as sbx_pty_signal) to its process group. */
SBX_EXPORT int sbx_proc_signal(sbx_proc *p, const char *name, sbx_error **err);
/* Lets the process go (it runs on, unheld: it can be attached without takeover). */
SBX_EXPORT int sbx_proc_detach(sbx_proc *p, sbx_error **err);
/* Frees the handle; the process runs on (the connection closes: it is let go). */
SBX_EXPORT void sbx_proc_free(sbx_proc *p);
/*
 * The box's PTY sessions and background processes as a JSON array text
 * (`*json_out`, free with sbx_free): [{id, pid, command, mode: "pipe"|"pty",
 * attached, running, exit_code (null while running), started_ms (unix ms),
 * stdout_bytes, stderr_bytes}]. At most SBX_PTY_MAX_SESSIONS. Blocks.
 */
SBX_EXPORT int sbx_proc_list(sbx_sandbox *sb, char **json_out, sbx_error **err);
/*
 * The box's processes, as its /proc shows them, as a JSON object text:
 * {processes: [{pid, ppid, uid, user (null without a passwd entry), state,
 * rss_kib, cpu_ms, started_ms, command}], truncated}. At most 4096
 * processes (`truncated` when the box has more); commands cut at 512
 * bytes. Blocks. Free with sbx_free.
 */
SBX_EXPORT int sbx_sandbox_top(sbx_sandbox *sb, char **json_out, sbx_error **err);
/*
 * What the box uses now, as a JSON object text (`*json_out`, free with
 * sbx_free): {cpu_ns (CPU time of its processes since it started),
 * memory_bytes (in use, less reclaimable file cache, as docker stats
 * counts), memory_limit, pids, pids_limit}; null where the provider cannot
 * tell or no limit is set. CPU use over time is two readings apart (what
 * `sbx stats` does). SBX_ENOTSUP for a provider that keeps no such
 * accounts (linux does). Blocks.
 */
SBX_EXPORT int sbx_sandbox_stats(sbx_sandbox *sb, char **json_out, sbx_error **err);
/*
 * The newer reference's run_detached: runs shell `command` as a background
 * process (stderr into stdout, stdin at EOF), holding no connection to the
 * box while it runs: every `poll_interval_s` (0 < s <= 86400) one listing
 * asks whether it ended. Then `*out` (malloc'd, NUL-terminated beyond *len)
 * is all it printed and `*code` its status (128+N for a signal N). More than
 * SBX_PTY_WINDOW_BYTES of output is SBX_EPTY, never a cut result; past
 * `timeout_s` (< 0: none) SBX_ETIMEDOUT; either way the process is killed
 * and collected. Blocks the calling thread.
 */
SBX_EXPORT int sbx_proc_run_detached(sbx_sandbox *sb, const char *command, double poll_interval_s,
                                     double timeout_s, char **out, size_t *len, int *code,
                                     sbx_error **err);

#ifdef __cplusplus
}
#endif
#endif /* SBX_H */
