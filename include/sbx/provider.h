/*
 * sbx provider interface: for authors of built-in providers and plugins.
 *
 * A provider is a `const struct sbx_provider_ops` table. Every operation
 * receives an `sbx_op` and finishes it exactly once with sbx_op_complete()
 * (from any thread: the core moves the completion onto the loop thread).
 * Operations are started on the context's loop thread and must not block it:
 * do socket work on the loop (sbx_op_loop()) or hand blocking work to the
 * worker pool with sbx_op_run_blocking().
 *
 * A NULL optional function means "unsupported": the core answers with the
 * reference's "does not support ..." error naming the provider.
 *
 * Plugins: a shared object on SBX_PLUGIN_PATH exports
 *   const struct sbx_provider_ops *const sbx_plugin_providers[];  (NULL-ended)
 */
#ifndef SBX_PROVIDER_H
#define SBX_PROVIDER_H

#include <sbx.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * ABI 2 appends to ABI 1's table (struct_size, capabilities and the
 * provider-wide operations below connect); ABI 3 appends pty_open
 * (terminals a provider opens itself, without sbx-agent), pause and resume. A table of ABI 1,
 * or of ABI 2 (from any older header: a smaller struct_size), still loads:
 * the fields it does not have read as NULL/0. New operations are only ever
 * appended.
 */
#define SBX_PROVIDER_ABI_VERSION 3

typedef struct sbx_op sbx_op;
/* The core's end of a terminal session a provider opened (pty_open, ABI 3). */
typedef struct sbx_pty_session sbx_pty_session;

/* The first fields of every table: `static const struct sbx_provider_ops t = {
 * SBX_PROVIDER_OPS_HEADER, .name = "mine", ... };` */
#define SBX_PROVIDER_OPS_HEADER                                                                    \
    .abi_version = SBX_PROVIDER_ABI_VERSION, .struct_size = sizeof(struct sbx_provider_ops)

/*
 * Capabilities a provider declares in `capabilities` (ABI 2). The core
 * derives the ones it can see from the table (a function present) and adds
 * these for what a table cannot show (a provider whose create makes real
 * networks, say); sbx_provider_supports() answers from both.
 */
#define SBX_CAP_ENDPOINT (1ull << 0)       /* endpoint() */
#define SBX_CAP_CONNECT (1ull << 1)        /* serialize() + connect() */
#define SBX_CAP_PTY (1ull << 2)            /* terminals */
#define SBX_CAP_LIST (1ull << 3)           /* list() */
#define SBX_CAP_STOP_ID (1ull << 4)        /* stop_id() */
#define SBX_CAP_GC (1ull << 5)             /* gc() */
#define SBX_CAP_IMAGES (1ull << 6)         /* image_list() / image_remove() / image_import() */
#define SBX_CAP_PAUSE (1ull << 7)          /* pause / resume */
#define SBX_CAP_SNAPSHOT (1ull << 8)       /* snapshots */
#define SBX_CAP_NETWORK (1ull << 9)        /* networks between boxes */
#define SBX_CAP_PORT_FORWARD (1ull << 10)  /* forwarding a box port to the host */
#define SBX_CAP_SHARED_STORAGE (1ull << 11) /* volumes shared between boxes */
#define SBX_CAP_EXEC_STREAM (1ull << 12)   /* output delivered as it arrives */
/*
 * Its boxes run sbx-agent and its exec runs the agent's built-ins (what the
 * kit's sbx_box_exec does): directory and byte transfers (upload_dir,
 * write_file, ...) need it. Declared; never derived.
 */
#define SBX_CAP_AGENT (1ull << 13)

struct sbx_provider_ops {
    int abi_version; /* SBX_PROVIDER_ABI_VERSION (SBX_PROVIDER_OPS_HEADER sets it) */
    const char *name;

    /*
     * Parses `config_json` (the mapping under the provider's name, "{}" when
     * absent) and allocates the provider state. Runs on the caller's thread.
     * Errors here are the reference's constructor errors.
     */
    int (*init)(const char *config_json, void **state, sbx_error **err);
    /* The reference's aclose(): frees the state. Runs after every box is freed. */
    void (*release)(void *state);

    /*
     * Required. create completes with a box (void *) whose id box_id() gives;
     * status completes with (void *)(intptr_t)sbx_status; exec with an
     * sbx_exec_result *; upload/download/close with NULL.
     */
    void (*create)(sbx_op *op, void *state, const sbx_spec *spec);
    void (*exec)(sbx_op *op, void *state, void *box, const char *command,
                 const sbx_exec_opts *opts);
    void (*upload_file)(sbx_op *op, void *state, void *box, const char *local_path,
                        const char *remote_path);
    void (*download_file)(sbx_op *op, void *state, void *box, const char *remote_path,
                          const char *local_path);
    void (*status)(sbx_op *op, void *state, void *box);
    /* Ends the box. `owned` is 0 for a connected (borrowed) handle. */
    void (*close)(sbx_op *op, void *state, void *box, int owned);
    const char *(*box_id)(const void *box);
    /* Frees the box state (never ends the box). Runs on the loop thread. */
    void (*box_free)(void *box);

    /* Optional. endpoint completes with an sbx_endpoint *. */
    void (*endpoint)(sbx_op *op, void *state, void *box, int port);
    /* serialize completes with a JSON object string (char *, malloc'd). */
    void (*serialize)(sbx_op *op, void *state, void *box, const char *scope);
    /* connect completes with a box, borrowed unless the descriptor says owner. */
    void (*connect)(sbx_op *op, void *state, const char *descriptor_json);

    /* --- ABI 2 ------------------------------------------------------------ */

    /* sizeof(struct sbx_provider_ops) as the provider was built: set it so. */
    size_t struct_size;
    /* SBX_CAP_* flags (see above); 0 lets the core derive them from the table. */
    unsigned long long capabilities;

    /*
     * Provider-wide operations: boxes by id, whoever made them and whether or
     * not a handle is open (what `sbx ls`, `sbx stop ID` and `sbx gc` use).
     * The provider's config names where its boxes are (a state directory, an
     * account, a daemon); it answers for those.
     *
     * list: `filter_json` is NULL or {"labels": {K: V, ...}} (all must match
     * the box's metadata). Completes with a malloc'd JSON array text, one
     * object a box: {"id", "status" (sbx_status_name), "created" and
     * "expires_at" (unix seconds or null), "labels" {..}, "image" (or null),
     * "descriptor" (what connect() takes, or null), and any
     * provider-specific keys under "provider": {..}}.
     */
    void (*list)(sbx_op *op, void *state, const char *filter_json);
    /* Ends box `id` and forgets it. SBX_ENOENT when the provider has no such box. */
    void (*stop_id)(sbx_op *op, void *state, const char *id);
    /*
     * Collects boxes: always the expired (TTL passed) and the dead (nothing
     * runs them any more, leftovers included); with "labels" also every box
     * whose metadata matches. `opts_json`: {"labels": {..}, "dry_run": bool}.
     * Completes with a malloc'd JSON array text of the ids removed (or that
     * would be, with dry_run).
     */
    void (*gc)(sbx_op *op, void *state, const char *opts_json);
    /*
     * Images, where the provider keeps them. image_list completes with a
     * malloc'd JSON array text ({"name", "digest", "size", "created",
     * "source"}); image_import(name, source, opts_json) makes an image from a
     * local source and completes with the image's JSON object text;
     * image_remove forgets one (`force`: even while boxes use it).
     */
    void (*image_list)(sbx_op *op, void *state);
    void (*image_import)(sbx_op *op, void *state, const char *name, const char *source,
                         const char *opts_json);
    void (*image_remove)(sbx_op *op, void *state, const char *name, int force);
    /*
     * image_inspect completes with one image as a malloc'd JSON object text
     * ({"name", "digest", "size", "created", "source", and what the
     * provider knows: "layers", "config" (the OCI image config's "config":
     * Env, WorkingDir, User, Entrypoint, Cmd, ExposedPorts, ...)});
     * SBX_ENOENT when there is no such image. image_tag gives image `src`
     * the second name `name` (completing with nothing).
     */
    void (*image_inspect)(sbx_op *op, void *state, const char *name);
    void (*image_tag)(sbx_op *op, void *state, const char *src, const char *name);
    /*
     * Removes what no image uses: image records no name points at, layers
     * no image has, and temporaries of dead imports. `opts_json`:
     * {"dry_run": bool}. Completes with a malloc'd JSON array text naming
     * each ("layer sha256:...", "image sha256:...", "temporary").
     */
    void (*image_prune)(sbx_op *op, void *state, const char *opts_json);
    /*
     * Fetches image `ref` (a Docker reference: "python:3.12",
     * "host:5000/a/b:tag", "x@sha256:...") from its registry into the
     * provider's store under its canonical name, and completes with the
     * image's JSON object text (as image_import, plus "reference").
     * `opts_json`: {"platform": "os/arch[/variant]"} or NULL. Reports
     * progress per blob (stage "pull:STATE:KIND:HEX12").
     */
    void (*image_pull)(sbx_op *op, void *state, const char *ref, const char *opts_json);
    /*
     * [img-commit] Turns running box `box_id`'s writable layer into a new
     * layer over its image, named `name` (as `docker commit`). `opts_json`:
     * {"changes": ["ENV K=V", "WORKDIR /d", "USER u", "ENTRYPOINT ...",
     * "CMD ..."], "pause": bool}. Completes with a malloc'd JSON object
     * text {"id", "name", "layer", "layers"}.
     */
    void (*image_commit)(sbx_op *op, void *state, const char *box_id, const char *name,
                         const char *opts_json);
    /*
     * [pty] Where box `box`'s sbx-agent listens, for a new connection of its
     * own (PTY sessions hold one each): completes with a malloc'd JSON object
     * text {"socket": "/path/to/unix/socket", "pid": N}, where `pid` (> 0)
     * is the process that must be listening there (checked with
     * SO_PEERCRED before a byte is sent). A provider with it declares
     * SBX_CAP_PTY; the agent must speak protocol version 3.
     */
    void (*agent_address)(sbx_op *op, void *state, void *box);
    /*
     * [svc-logs] Where box `box`'s service log is (the format of
     * src/core/logs.h): completes with a malloc'd JSON object text
     * {"path": "/dir/service.log", "old": "/dir/service.log.1"}, files the
     * caller's uid owns. sbx_sandbox_logs reads them.
     */
    void (*log_address)(sbx_op *op, void *state, void *box);
    /*
     * [svc-logs] The service log of box `box` for a provider whose runtime
     * keeps it (a container engine), written as it is read: records of the
     * src/core/logs.h format (16-byte header, then bytes; the provider writes
     * every header, so the box cannot forge one) into `fd`, a stream socket
     * the provider owns from the call on and closes when done. `since_s`
     * (unix seconds, 0: all) and `tail` (the last lines, < 0: all) are what
     * sbx_sandbox_logs was given; `flags` SBX_LOGS_FOLLOW keeps writing as the
     * service does, until the box ends. The op completes when the writing
     * ends: the log's end, the box's, or the reader's (a failed send: stop
     * then, within about a second even while the box is silent). A provider
     * has this or log_address.
     */
    void (*log_stream)(sbx_op *op, void *state, void *box, int fd, double since_s, long long tail,
                       unsigned flags);
    /*
     * The SBX_CAP_* flags of this configured provider, when its config
     * changes them (docker with `agent: false` runs no agent): replaces
     * `capabilities` for the provider `state` is of. NULL: `capabilities`.
     * Any thread; must not block.
     */
    unsigned long long (*capabilities_of)(const void *state);
    /*
     * What box `box` uses now (sbx_sandbox_stats): completes with a malloc'd
     * JSON object text {"cpu_ns": CPU time its processes used since it
     * started, "memory_bytes": memory in use less reclaimable file cache,
     * "memory_limit", "pids", "pids_limit"}; a value the provider cannot
     * tell, or a limit not set, is null.
     */
    void (*stats)(sbx_op *op, void *state, void *box);

    /* --- ABI 3 ------------------------------------------------------------ */

    /*
     * [pty] Opens (or attaches to) a terminal session in box `box` the
     * provider's own way, for a provider whose boxes run no sbx-agent (a
     * remote service's PTY over a WebSocket). sbx_pty_open/attach, `sbx
     * shell` and Python's sandbox.pty use it when it is set (agent_address
     * otherwise); a provider with it has SBX_CAP_PTY. What to run, and
     * whether it is an attach, are read from `s` (sbx_pty_session_*
     * below). See "Terminals a provider opens" below for the whole contract:
     * in short, call sbx_pty_session_ready() once the command runs, deliver
     * output/exit/failure through `s`, and complete `op` only when you have
     * let go of the session (after the core's close callback), or with an
     * error before ready when it could not be opened.
     */
    void (*pty_open)(sbx_op *op, void *state, void *box, sbx_pty_session *s);
    /*
     * [pause] Pauses box `box` keeping its state (its processes stop using
     * CPU and answer nothing), and resumes it. Both complete with no value
     * and are idempotent: pausing a paused box or resuming a running one is
     * SBX_OK. While paused, status() answers SBX_STATUS_PAUSED; the core
     * refuses exec, transfers and terminals on its own handle (SBX_ESTATE)
     * until resume, and a stop must end a paused box (thaw it first when
     * the runtime needs that). A provider with both has SBX_CAP_PAUSE.
     */
    void (*pause)(sbx_op *op, void *state, void *box);
    void (*resume)(sbx_op *op, void *state, void *box);
};

/* --- Operations ---------------------------------------------------------- */

/*
 * Finishes `op`: code SBX_OK with `value` (ownership passes to the core), or a
 * negative code with `err` (ownership passes; NULL makes a default message).
 * Exactly once per op; any thread.
 *
 * The completion may be the caller's last use of the provider, which can then
 * be released at any moment: after it, touch the provider's state (shared
 * pools, lists) only in the same loop-thread callback that completed (the
 * result is delivered after that callback returns), never from a worker
 * thread or a later callback such as a handle's close. Memory private to the
 * op may be freed whenever.
 */
SBX_EXPORT void sbx_op_complete(sbx_op *op, int code, sbx_error *err, void *value);
/*
 * Reports progress of a long op (bytes done of `total`, 0 when unknown) to
 * whoever waits on it (sbx_future_on_progress). Any thread; cheap to call
 * often: reports closer than ~50 ms apart are dropped, except the last.
 */
SBX_EXPORT void sbx_op_progress(sbx_op *op, const char *stage, unsigned long long done,
                                unsigned long long total);
/* The loop (a uv_loop_t *) the op runs on, for providers doing async I/O. */
SBX_EXPORT void *sbx_op_loop(sbx_op *op);
/* The provider's name, for messages. */
SBX_EXPORT const char *sbx_op_provider_name(const sbx_op *op);
/* Non-zero once the caller cancelled the operation. */
SBX_EXPORT int sbx_op_cancelled(const sbx_op *op);
/*
 * Called (on the loop thread) when the caller cancels the op. The provider
 * kills what it started and then completes the op (SBX_ECANCELED or its
 * result). Set before any await point; NULL removes it.
 */
typedef void (*sbx_op_cancel_cb)(sbx_op *op, void *data);
SBX_EXPORT void sbx_op_on_cancel(sbx_op *op, sbx_op_cancel_cb cb, void *data);
/*
 * Runs `work(op, data)` on a thread of the worker pool of the op's context
 * (sbx_context_set_workers; never libuv's process-wide pool). `work` may
 * block and must finish the op with sbx_op_complete(). Returns SBX_OK, or
 * SBX_ENOMEM / SBX_EIO (no worker thread could start), in which case `work`
 * never runs. Work not yet started when the context is freed is cancelled
 * (the op completes with SBX_ECANCELED). Any thread.
 */
typedef void (*sbx_op_work_fn)(sbx_op *op, void *data);
SBX_EXPORT int sbx_op_run_blocking(sbx_op *op, sbx_op_work_fn work, void *data);

/* --- Streaming exec ------------------------------------------------------ */

/*
 * Hands a chunk of the command's output to the core (SBX_STREAM_STDOUT or
 * SBX_STREAM_STDERR; the bytes are copied). A provider declaring
 * SBX_CAP_EXEC_STREAM calls it for every chunk it reads, in order, before
 * completing the exec, and still builds the result as before (honouring
 * sbx_exec_opts_keep_output). Chunks are the command's bytes only, never
 * sbx's own messages. Cheap when nobody listens (sbx_op_exec_streaming()).
 * On the loop thread it delivers at once; from another thread it queues a
 * copy for the loop (one thread at a time per op keeps the order). A
 * provider without SBX_CAP_EXEC_STREAM gets the core's fallback instead (its
 * whole output delivered when its exec completes); its calls are ignored. Ignored for an op
 * that is not an exec, after completion, and for a zero `len`.
 */
SBX_EXPORT void sbx_op_exec_output(sbx_op *op, int stream, const void *data, size_t len);
/* 1 when the exec's caller listens to chunks (a callback or an fd), else 0. */
SBX_EXPORT int sbx_op_exec_streaming(const sbx_op *op);
/*
 * Flow control for chunks written to a slow fd: the core calls
 * `cb(op, 1, data)` on the loop thread when too much output waits for the
 * reader (the provider then stops reading the command's output) and
 * `cb(op, 0, data)` once it drained (reading resumes). Never called after
 * the op completed. A streaming provider sets it before its first chunk;
 * without it, output waits in memory. NULL removes it.
 */
typedef void (*sbx_op_flow_cb)(sbx_op *op, int pause, void *data);
SBX_EXPORT void sbx_op_exec_on_flow(sbx_op *op, sbx_op_flow_cb cb, void *data);

/* --- Terminals a provider opens (pty_open, ABI 3) -------------------------- */

/*
 * The life of one session, `s` below (all on the loop thread unless said):
 *
 *   1. The core calls pty_open(op, state, box, s). The provider reads the
 *      request from `s` (any thread, until it completes `op`) and starts
 *      its connection (a WebSocket, say: <sbx/ws.h>).
 *   2. When the command runs, the provider calls sbx_pty_session_ready(s,
 *      ops, conn, id): from then on the core calls `ops` with `conn`. The
 *      caller's sbx_pty_open returns. If it cannot open, the provider
 *      instead completes `op` with an error (SBX_EPTY "already attached",
 *      SBX_EIO, ...): that error is what sbx_pty_open returns. A caller
 *      waits 120 s for one or the other (then SBX_ETIMEDOUT; a ready that
 *      comes later gets its close at once).
 *   3. While the session lives the provider calls sbx_pty_session_output()
 *      for each chunk, then sbx_pty_session_exit() when the command ends, or
 *      sbx_pty_session_fail() when the session is lost (taken over by
 *      another client, the connection broke). Output may come before ready
 *      (a replay); exit and failure are final.
 *   4. The core calls ops->close(conn, end) exactly once after a successful
 *      ready, when the caller closes, detaches or frees its handle, which
 *      may be long after an exit or a failure: keep `conn` until then. The
 *      provider ends its connection (end: also the session) and completes
 *      `op` (SBX_OK, NULL) once it let go of everything; from that
 *      completion on it never touches `s` or `conn` again, and the core
 *      calls no more `ops`. Until then `s` stays valid.
 *
 * `op` stays pending for the whole session: the sandbox (and the provider)
 * stay alive until it completes. Complete it on the loop thread, where the
 * core calls `ops`, so no call can cross the completion. A provider that
 * must give up without a close (its service is gone for good) may complete
 * it early (with an error, say): the core then calls nothing more, and the
 * caller's next read says the session ended. The core never cancels it.
 */
struct sbx_pty_session_ops {
    /* Stdin bytes for the command (copy them: they are freed after the call). len 0: EOF. */
    void (*write)(void *conn, const void *data, size_t len);
    /* The terminal's new size (1..4096 each). */
    void (*resize)(void *conn, unsigned rows, unsigned cols);
    /* A signal for the foreground group: its number and name ("SIGINT"). */
    void (*signal)(void *conn, int signo, const char *name);
    /*
     * Flow control (may be NULL: output then waits in the core's window,
     * oldest bytes dropped past SBX_PTY_WINDOW_BYTES a stream): pause 1 when
     * the caller's reader is behind (stop reading your source, such as
     * sbx_ws_pause), 0 once it caught up.
     */
    void (*flow)(void *conn, int pause);
    /*
     * The handle is done: `end` 1 ends the session (its processes are
     * killed: the opener closed it), 0 leaves it running (a detach, or an
     * attached handle closing). Exactly once; then complete the op.
     */
    void (*close)(void *conn, int end);
};

/* For sbx_pty_session_output: the bytes follow the last ones delivered. */
#define SBX_PTY_OFFSET_NEXT (~0ull)

/*
 * The session runs: the core may now call `ops` (a static table; borrowed
 * for the session's life) with `conn` (the provider's, never freed by the
 * core). `id` (> 0) is what sbx_pty_id() answers and sbx_pty_attach() takes:
 * a provider whose service names sessions with strings keeps the mapping.
 * Once; loop thread. SBX_EINVAL when `id` is 0, `ops` lacks write, resize,
 * signal or close, or it is called twice: the session is then failed, no
 * close will come, and the provider completes `op` with an error.
 */
SBX_EXPORT int sbx_pty_session_ready(sbx_pty_session *s, const struct sbx_pty_session_ops *ops,
                                     void *conn, unsigned id);
/*
 * A chunk of output (SBX_STREAM_STDOUT: the terminal, or stdout in pipe
 * mode; SBX_STREAM_STDERR: pipe mode's stderr), copied. `offset` is the
 * chunk's absolute byte offset in its stream (a replay since N starts at N)
 * or SBX_PTY_OFFSET_NEXT. Ignored after exit/failure. Loop thread.
 */
SBX_EXPORT void sbx_pty_session_output(sbx_pty_session *s, int stream, unsigned long long offset,
                                       const void *data, size_t len);
/* The command ended: its status, or 128+N for a signal N. Final. Loop thread. */
SBX_EXPORT void sbx_pty_session_exit(sbx_pty_session *s, int code);
/*
 * The session is lost without an exit status: `err` (taken; NULL: a default)
 * is what the caller's next read, write or wait returns. Use SBX_EPTY for
 * "taken over by another client" (the agent path's words), SBX_EIO for a
 * broken connection. Final. Loop thread.
 */
SBX_EXPORT void sbx_pty_session_fail(sbx_pty_session *s, sbx_error *err);

/*
 * The request, readable from any thread until the op completes. The command
 * is one of: command (run by the box's shell, `sh -c`), argv, or neither
 * (both NULL: the box's login shell). cwd and user may be NULL (the box's
 * defaults); env is K=V strings. attach_id > 0 makes it an attach to that
 * session (no command: replay output from byte `since` of each stream, or
 * the oldest kept; `takeover` evicts a client already attached, which else
 * is refused with SBX_EPTY).
 */
SBX_EXPORT const char *sbx_pty_session_command(const sbx_pty_session *s);
SBX_EXPORT const char *const *sbx_pty_session_argv(const sbx_pty_session *s);
SBX_EXPORT const char *sbx_pty_session_cwd(const sbx_pty_session *s);
SBX_EXPORT const char *sbx_pty_session_user(const sbx_pty_session *s);
SBX_EXPORT size_t sbx_pty_session_env_count(const sbx_pty_session *s);
/* "K=V" */
SBX_EXPORT const char *sbx_pty_session_env_at(const sbx_pty_session *s, size_t i);
SBX_EXPORT void sbx_pty_session_size(const sbx_pty_session *s, unsigned *rows, unsigned *cols);
/* 1: pipe mode (no terminal; stdout and stderr apart). */
SBX_EXPORT int sbx_pty_session_pipes(const sbx_pty_session *s);
SBX_EXPORT unsigned sbx_pty_session_attach_id(const sbx_pty_session *s);
SBX_EXPORT int sbx_pty_session_takeover(const sbx_pty_session *s);
SBX_EXPORT unsigned long long sbx_pty_session_since(const sbx_pty_session *s);

/* --- Errors -------------------------------------------------------------- */

/* A new error with a printf-style message. Never NULL (falls back to static). */
SBX_EXPORT sbx_error *sbx_error_new(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, recording errno `errnum` and ": strerror(errnum)" at the end. */
SBX_EXPORT sbx_error *sbx_error_new_errno(int code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes context: "creating sandbox: <old message>". Returns `e`. */
SBX_EXPORT sbx_error *sbx_error_prefix(sbx_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
SBX_EXPORT sbx_error *sbx_error_copy(const sbx_error *e);
/* Logs through the application's callback. */
SBX_EXPORT void sbx_log(sbx_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* --- Reading a spec ------------------------------------------------------ */

/* Returns 1 and writes the value when set, 0 for None. */
SBX_EXPORT int sbx_spec_get_ttl(const sbx_spec *spec, double *out);
SBX_EXPORT int sbx_spec_get_ready_timeout(const sbx_spec *spec, double *out);
SBX_EXPORT int sbx_spec_get_cpu(const sbx_spec *spec, double *out);
SBX_EXPORT int sbx_spec_get_memory_mib(const sbx_spec *spec, long long *out);
SBX_EXPORT int sbx_spec_get_disk_gib(const sbx_spec *spec, long long *out);
SBX_EXPORT int sbx_spec_get_gpu(const sbx_spec *spec, long long *out);
SBX_EXPORT const char *sbx_spec_gpu_type(const sbx_spec *spec);
SBX_EXPORT size_t sbx_spec_env_count(const sbx_spec *spec);
SBX_EXPORT void sbx_spec_env_at(const sbx_spec *spec, size_t i, const char **key,
                                const char **value);
SBX_EXPORT size_t sbx_spec_file_count(const sbx_spec *spec);
SBX_EXPORT void sbx_spec_file_at(const sbx_spec *spec, size_t i, const char **path,
                                 const void **data, size_t *len);
SBX_EXPORT size_t sbx_spec_metadata_count(const sbx_spec *spec);
SBX_EXPORT void sbx_spec_metadata_at(const sbx_spec *spec, size_t i, const char **key,
                                     const char **value);
/* NULL-terminated, or NULL when unset. */
SBX_EXPORT const char *const *sbx_spec_entrypoint(const sbx_spec *spec);
SBX_EXPORT size_t sbx_spec_port_count(const sbx_spec *spec);
SBX_EXPORT int sbx_spec_port_at(const sbx_spec *spec, size_t i);
/* JSON object text ("{}" when empty). */
SBX_EXPORT const char *sbx_spec_provider_options(const sbx_spec *spec);

/* --- Reading exec options (NULL opts give the defaults) ------------------ */

SBX_EXPORT const char *sbx_exec_opts_cwd(const sbx_exec_opts *o);
/* The argv to run without a shell (sbx_exec_opts_set_argv), or NULL: the command string. */
SBX_EXPORT const char *const *sbx_exec_opts_argv(const sbx_exec_opts *o);
/* Negative: no timeout. */
SBX_EXPORT double sbx_exec_opts_timeout(const sbx_exec_opts *o);
SBX_EXPORT const char *sbx_exec_opts_user(const sbx_exec_opts *o);
SBX_EXPORT size_t sbx_exec_opts_env_count(const sbx_exec_opts *o);
SBX_EXPORT void sbx_exec_opts_env_at(const sbx_exec_opts *o, size_t i, const char **key,
                                     const char **value);
/* NULL when no stdin was set (the command then reads /dev/null). */
SBX_EXPORT const void *sbx_exec_opts_stdin(const sbx_exec_opts *o, size_t *len);
/* The output cap in bytes, or 0 for the provider's default. */
SBX_EXPORT size_t sbx_exec_opts_output_limit(const sbx_exec_opts *o);
/* The stdin descriptor of sbx_exec_opts_set_stdin_fd (borrowed), or -1. */
SBX_EXPORT int sbx_exec_opts_stdin_fd(const sbx_exec_opts *o);
/*
 * 0 when the result is to carry no output (sbx_exec_opts_set_keep_output),
 * else 1. Always 1 for a provider without SBX_CAP_EXEC_STREAM: the core
 * delivers its whole output to the caller's callback or fds, then drops it.
 */
SBX_EXPORT int sbx_exec_opts_keep_output(const sbx_exec_opts *o);
/* Marks a result truncated (providers set it when output hit the cap). */
SBX_EXPORT void sbx_exec_result_set_truncated(sbx_exec_result *r, int truncated);
/* Builds a result taking ownership of malloc'd buffers (NULL is None). */
SBX_EXPORT int sbx_exec_result_new_take(char *out, size_t out_len, char *errb, size_t err_len,
                                        int return_code, const char *error_type,
                                        sbx_exec_result **result);
/*
 * The reference's timeout result, as every provider must give it: return
 * code 125, error_type "timeout", stdout what the command wrote before it
 * was killed ("" when nothing), stderr its partial stderr then "command
 * timed out after Ns: COMMAND". Takes `out` and `errb` (malloc'd, or NULL)
 * as sbx_exec_result_new_take does, even on failure (SBX_ENOMEM).
 */
SBX_EXPORT int sbx_exec_result_new_timeout(char *out, size_t out_len, char *errb, size_t err_len,
                                           double timeout_s, const char *command,
                                           sbx_exec_result **result);

#ifdef __cplusplus
}
#endif
#endif /* SBX_PROVIDER_H */
