/*
 * sbx box-provider kit: for authors of providers whose boxes run sbx-agent.
 *
 * A provider built on the kit starts its box (a container, a VM, a plain
 * process) with `sbx-agent` inside, hands the kit a byte stream to that
 * agent, and gets the rest: the hello and version check within the ready
 * timeout, exec/upload/download mapped onto an sbx_op, a bounded pool of
 * agent connections, and a per-user directory of box records that makes
 * list, stop_id and gc a few lines each. docs/provider-guide.md walks
 * through a complete provider (examples/provider/hostbox.c).
 *
 * Threads: functions taking an sbx_op run on the loop thread (where the core
 * starts ops) and never block. The record functions (sbx_box_record_*,
 * sbx_box_store_*) touch the file system and may block: call them from
 * init, or from work given to sbx_op_run_blocking(); the sbx_box_op_*
 * wrappers do that for you. Nothing here keeps global state; a store and a
 * pool may be used from several threads at once (after set_hooks), an
 * agent only from the loop thread (sbx_box_agent_free excepted).
 */
#ifndef SBX_BOX_H
#define SBX_BOX_H

#include <sbx.h>
#include <sbx/provider.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- the agent ------------------------------------------------------------ */

/*
 * The sbx-agent binary to put in a box: $SBX_AGENT, next to the program or
 * libsbx (a build tree), PREFIX/libexec/sbx of the install, then PATH. It is
 * linked statically, so it runs in any Linux box of the same architecture
 * (a sanitizer build's own sbx-agent is not: its sbx-agent-static, found
 * the same way, or $SBX_AGENT_STATIC, comes first).
 * Returns a malloc'd path (free it), or NULL when none was found. Blocking
 * (stats files); thread-safe.
 */
SBX_EXPORT char *sbx_box_find_agent(void);

/*
 * Starts `argv` (NULL-terminated; argv[0] a path or a name on PATH) in its
 * own session with stdin and stdout one end of a socket pair, stderr
 * appended to `log_path` (NULL: /dev/null), in `cwd` (NULL: unchanged) with
 * `envp` (NULL: this process's environment). The command is expected to end
 * up running `sbx-agent serve --stdio` (directly, or as `docker run -i IMAGE
 * /sbx-agent serve --stdio`, ...). Writes the child's pid and the host's end
 * of the pair (close-on-exec; hand it to sbx_box_agent_open_fd, which takes
 * it). The child is the caller's: something must reap it (sbx_box_stop_pid
 * does). Returns SBX_OK, or SBX_ECREATE with `err` naming the command.
 * Blocking only for the fork; thread-safe.
 */
SBX_EXPORT int sbx_box_spawn_stdio(const char *const *argv, const char *cwd,
                                   const char *const *envp, const char *log_path, pid_t *pid,
                                   int *fd, sbx_error **err);

/*
 * A provider's pool of agent connections: at most `max_connections` open
 * (0: 256), least recently used idle ones closed past that and reopened on
 * the box's next op (socket agents only: a stream handed in with
 * sbx_box_agent_open_fd cannot be reopened, so it is never closed to make
 * room). Make one in init, free it in release, after every agent of it is
 * freed. Returns NULL when out of memory. Thread-safe.
 */
typedef struct sbx_box_pool sbx_box_pool;
SBX_EXPORT sbx_box_pool *sbx_box_pool_new(int max_connections);
SBX_EXPORT void sbx_box_pool_free(sbx_box_pool *pool);
/* Connections open (or opening) now. Thread-safe. */
SBX_EXPORT int sbx_box_pool_count(sbx_box_pool *pool);

/*
 * One box's agent: its connection in the pool. Made by the open functions
 * below; freed with sbx_box_agent_free (which closes the connection; ops in
 * flight on it end as for an agent that died).
 */
typedef struct sbx_box_agent sbx_box_agent;

/*
 * Called once on the loop thread when an open finished: `agent` (owned by
 * the callee) and SBX_OK, or NULL with a negative code and `err` (owned by
 * the callee): SBX_ETIMEDOUT when no hello came within the timeout,
 * SBX_EPROVIDER for a stream that closed or spoke another protocol version.
 */
typedef void (*sbx_box_ready_cb)(sbx_box_agent *agent, int code, sbx_error *err, void *data);

/*
 * Readiness over a stream: waits on `op`'s loop for the agent's hello on
 * `fd` (a connected stream socket or pipe pair end; ownership passes, also on
 * failure) for at most `ready_timeout_s` (<= 0: 60), checks its protocol
 * version, and calls `cb`. `workdir` (copied; NULL: none) is what relative
 * box paths in uploads and downloads are joined to. Loop thread; never
 * blocks. Returns nothing: every outcome reaches `cb`, later.
 */
SBX_EXPORT void sbx_box_agent_open_fd(sbx_op *op, sbx_box_pool *pool, int fd,
                                      double ready_timeout_s, const char *workdir,
                                      sbx_box_ready_cb cb, void *data);
/*
 * The same over the unix socket at `socket_path` (copied), retried until the
 * agent listens or the timeout passes. With `peer_pid` > 0 only that process
 * is accepted at the other end (SO_PEERCRED; another one fails with
 * SBX_EPERM before a byte is sent): use it whenever the socket's directory is
 * not yours alone. A pooled socket connection may be closed to make room
 * and is reopened (one attempt) on the box's next op.
 */
SBX_EXPORT void sbx_box_agent_open_socket(sbx_op *op, sbx_box_pool *pool, const char *socket_path,
                                          pid_t peer_pid, double ready_timeout_s,
                                          const char *workdir, sbx_box_ready_cb cb, void *data);
/* 1 when the agent is known to be gone (its stream closed, a reopen failed). Loop thread. */
SBX_EXPORT int sbx_box_agent_gone(const sbx_box_agent *agent);
/* Closes the connection for good and frees the agent. Any thread; NULL is a no-op. */
SBX_EXPORT void sbx_box_agent_free(sbx_box_agent *agent);

/*
 * A provider's ops, one call each (loop thread, never blocking; every one
 * completes `op` exactly once, honours cancellation, and keeps nothing of
 * the strings after the op completes).
 *
 * sbx_box_exec runs `command` with the agent's shell in the box (`SHELL -c`:
 * bash when the box has it, else /bin/sh; `sbx-agent --shell`) and completes
 * with an sbx_exec_result *: the opts' cwd (relative: under the workdir), env
 * (over `base_env`, "K=V" strings, NULL-ended, may be NULL), stdin, timeout
 * (rc 125, error_type "timeout") and output cap; a command killed by signal N
 * gives rc 128+N; a lost agent, or one already gone, gives rc 125,
 * error_type "sandbox" (not an error, as the reference's container
 * providers). Output is delivered as it arrives through the same call.
 *
 * sbx_box_upload / sbx_box_download copy a file into / out of the box (mode
 * kept, parent directories made, written atomically) and complete with
 * NULL: SBX_ENOENT for a missing source, SBX_EINVAL for a directory
 * downloaded, SBX_EPERM for a box path that escapes the box. An upload onto
 * an existing directory writes DIR/NAME (NAME: the host file's), as
 * `docker cp` does.
 *
 * sbx_box_ping completes with NULL after a round trip to the agent (a status
 * probe), SBX_EPROVIDER when the agent is gone.
 */
SBX_EXPORT void sbx_box_exec(sbx_op *op, sbx_box_agent *agent, const char *command,
                             const sbx_exec_opts *opts, const char *const *base_env);
SBX_EXPORT void sbx_box_upload(sbx_op *op, sbx_box_agent *agent, const char *local_path,
                               const char *remote_path);
SBX_EXPORT void sbx_box_download(sbx_op *op, sbx_box_agent *agent, const char *remote_path,
                                 const char *local_path);
SBX_EXPORT void sbx_box_ping(sbx_op *op, sbx_box_agent *agent);

/* --- create and close ------------------------------------------------------ */

typedef struct sbx_box_store sbx_box_store;
typedef struct sbx_box_record sbx_box_record;

/*
 * Starts box `r` (its id, labels, created and expires_at already set) and
 * hands back a stream to its agent: sets r->pid (the process keeping the box
 * alive, 0 when none is the caller's to watch) and may set r->workdir,
 * r->image and r->provider_json (malloc'd; the record owns them); writes
 * `*fd` (ownership passes). `box_dir` is the box's own 0700 directory for
 * files. Runs on a worker thread and may block. On failure return a negative
 * code with `err`, leaving nothing started (what was made in box_dir goes
 * with it).
 */
typedef int (*sbx_box_start_fn)(sbx_box_record *r, const char *box_dir, const sbx_spec *spec,
                                void *data, int *fd, sbx_error **err);
/*
 * Called once on the loop thread when sbx_box_op_create finished: `agent`
 * and the written record `r` (borrowed for the call: copy what you keep),
 * or NULL, NULL with a negative code and `err` (owned by the callee). The
 * callee completes `op` (with its box, or the error).
 */
typedef void (*sbx_box_created_cb)(sbx_op *op, sbx_box_agent *agent, const sbx_box_record *r,
                                   int code, sbx_error *err, void *data);
/*
 * A provider's create op, all but the box: makes an id "<id_prefix>-<hex>"
 * and the box's directory in `s`, calls `start` on the worker pool, writes
 * the record, waits for the agent's hello within the spec's ready_timeout
 * (default 60 s) into `pool`, and calls `cb`. Any failure ends what was
 * started (sbx_box_store_stop: the stop hook, then the record) before `cb`
 * sees it, so a failed create leaves nothing behind. Loop thread; never
 * blocks. `s`, `pool` and `spec` must outlive the op.
 */
SBX_EXPORT void sbx_box_op_create(sbx_op *op, sbx_box_store *s, sbx_box_pool *pool,
                                  const sbx_spec *spec, const char *id_prefix,
                                  sbx_box_start_fn start, void *start_data, sbx_box_created_cb cb,
                                  void *cb_data);
/*
 * A start hook for a box whose agent listens on a unix socket (a container
 * with the agent as its init, a VM) rather than on a stream handed back:
 * as sbx_box_start_fn, but writes `*socket_path` (malloc'd; the caller frees
 * it) and `*peer_pid`, the process that must be listening there (> 0: checked
 * with SO_PEERCRED before a byte is sent; 0: unchecked, only for a socket in
 * a directory nobody else can write).
 */
typedef int (*sbx_box_start_socket_fn)(sbx_box_record *r, const char *box_dir,
                                       const sbx_spec *spec, void *data, char **socket_path,
                                       pid_t *peer_pid, sbx_error **err);
/*
 * sbx_box_op_create for such a box: the agent is reached with
 * sbx_box_agent_open_socket (retried until it listens, within the spec's
 * ready_timeout), so its pooled connection may be closed when idle past the
 * pool's cap and reopened on the next op. Everything else as
 * sbx_box_op_create, failures included.
 */
SBX_EXPORT void sbx_box_op_create_socket(sbx_op *op, sbx_box_store *s, sbx_box_pool *pool,
                                         const sbx_spec *spec, const char *id_prefix,
                                         sbx_box_start_socket_fn start, void *start_data,
                                         sbx_box_created_cb cb, void *cb_data);
/*
 * A provider's close op for an owned box: frees `agent` (its connection
 * closes: an agent on stdio then exits), then on the worker pool ends box
 * `id` and removes its record as sbx_box_store_stop does, and completes `op`
 * with NULL. A box already gone is no error. Loop thread; never blocks.
 */
SBX_EXPORT void sbx_box_op_close(sbx_op *op, sbx_box_store *s, sbx_box_agent *agent,
                                 const char *id);

/* --- processes ------------------------------------------------------------ */

/* The start time of `pid` (a clock-tick count), 0 when it is gone or a zombie. Thread-safe. */
SBX_EXPORT unsigned long long sbx_box_pid_start(pid_t pid);
/*
 * Ends process `pid` if it is still the one started at `pid_start` (so a
 * reused pid is never signalled): SIGTERM to it and, when it leads one, its
 * process group,
 * SIGKILL after `grace_s` (< 0: 5 s), waits until it is gone and reaps it
 * when it is the caller's child. SBX_OK also when it was gone already.
 * Blocking (up to grace_s plus a bounded wait); thread-safe.
 */
SBX_EXPORT int sbx_box_stop_pid(pid_t pid, unsigned long long pid_start, double grace_s,
                                sbx_error **err);

/* --- box records ----------------------------------------------------------- */

/*
 * What the kit keeps of a box, in <store>/boxes/<id>/record.json (0600 in a
 * 0700 directory of the caller's). All strings are owned by the record:
 * malloc'd, freed by sbx_box_record_clear.
 */
struct sbx_box_record {
    char *id;                     /* [A-Za-z0-9._-], at most 64 bytes */
    double created;               /* unix seconds */
    double expires_at;            /* unix seconds; 0: no TTL */
    pid_t pid;                    /* the process keeping the box alive; 0: none */
    unsigned long long pid_start; /* its start time (sbx_box_pid_start) */
    char *image;                  /* or NULL */
    char *workdir;                /* or NULL */
    char *labels_json;            /* JSON object of string values ("{}": none) */
    char *provider_json;          /* the provider's own JSON object, or NULL */
    int creating;                 /* set while sbx_box_op_create runs (see the store) */
};

/*
 * Fills `r` for a new box: id (copied), created now, expires_at from the
 * spec's ttl, labels from its metadata; other fields zero. Returns SBX_OK,
 * SBX_EINVAL for an id unfit for a path component, SBX_ENOMEM.
 */
SBX_EXPORT int sbx_box_record_init(sbx_box_record *r, const char *id, const sbx_spec *spec);
/* Frees the record's strings and zeroes it. */
SBX_EXPORT void sbx_box_record_clear(sbx_box_record *r);
/*
 * Makes a fresh box id, "<prefix>-" and 16 random hex digits, into `buf`.
 * Returns SBX_OK, or SBX_EINVAL when it does not fit or the prefix is unfit.
 */
SBX_EXPORT int sbx_box_new_id(const char *prefix, char *buf, size_t size);

/*
 * A provider's per-user directory of box records. The store also answers
 * "is this box alive" and "end this box" through hooks the provider sets
 * once; the defaults use the record's pid (alive: sbx_box_pid_start
 * matches; stop: sbx_box_stop_pid).
 */
typedef int (*sbx_box_alive_fn)(const sbx_box_record *r, void *data);
typedef int (*sbx_box_stop_fn)(const sbx_box_record *r, void *data, sbx_error **err);

/*
 * Opens, creating it 0700 when absent, the state directory of provider
 * `provider`: `dir` when non-NULL and non-empty, else $SBX_STATE_DIR/<provider>,
 * /run/sbx/<provider> for root, $XDG_RUNTIME_DIR/sbx/<provider>, or
 * /tmp/sbx-<uid>/<provider>. Every component must be a directory (no link)
 * of root or the caller that nobody else can write: SBX_EPERM saying which
 * otherwise. `*out` is freed with sbx_box_store_free. Blocking.
 */
SBX_EXPORT int sbx_box_store_open(const char *provider, const char *dir, sbx_box_store **out,
                                  sbx_error **err);
/* Frees the store (its records stay). NULL is a no-op. */
SBX_EXPORT void sbx_box_store_free(sbx_box_store *s);
/* The store's canonical path. Borrowed; valid until sbx_box_store_free. */
SBX_EXPORT const char *sbx_box_store_path(const sbx_box_store *s);
/* Sets the hooks (NULL: the defaults) and the data they get. Call before sharing the store. */
SBX_EXPORT void sbx_box_store_set_hooks(sbx_box_store *s, sbx_box_alive_fn alive,
                                        sbx_box_stop_fn stop, void *data);
/*
 * The directory of box `id` (<store>/boxes/<id>), made 0700 when absent, for
 * the provider's own files of the box (a work directory, a log); removed
 * with the record. Malloc'd. SBX_EINVAL for a bad id. Blocking.
 */
SBX_EXPORT int sbx_box_store_box_dir(sbx_box_store *s, const char *id, char **path,
                                     sbx_error **err);

/* Writes box r->id's record atomically (replacing one). Blocking. */
SBX_EXPORT int sbx_box_record_write(sbx_box_store *s, const sbx_box_record *r, sbx_error **err);
/*
 * Reads box `id`'s record into `r` (sbx_box_record_clear it). The record is
 * input like any other: read without following links, a regular file of
 * the caller's nobody else can write, at most 1 MiB, its id the directory's.
 * SBX_ENOENT when there is no such box; SBX_EPERM / SBX_EINVAL for one not
 * to be believed. Blocking.
 */
SBX_EXPORT int sbx_box_record_read(sbx_box_store *s, const char *id, sbx_box_record *r,
                                   sbx_error **err);
/* Removes box `id`'s directory and everything in it (never through a link). Blocking. */
SBX_EXPORT int sbx_box_record_remove(sbx_box_store *s, const char *id, sbx_error **err);
/* Whether the box is alive, by the store's alive hook. Blocking. */
SBX_EXPORT int sbx_box_record_alive(sbx_box_store *s, const sbx_box_record *r);

/*
 * The provider-wide operations of provider.h, done on the records (each
 * blocking; the sbx_box_op_* forms below run them on the worker pool):
 *
 * list: `filter_json` NULL or {"labels": {..}}; `*out` a malloc'd JSON array
 * as provider.h's list describes ("status" running or error, by the alive
 * hook, or starting; "provider": the record's provider_json).
 * A box being created (its record marked `creating`, or its directory
 * without a record yet) counts as starting for 60 s after it was made:
 * gc leaves it alone, so a gc in another process never races a create;
 * past that its maker is taken to have died mid-create.
 * stop: ends box `id` by the stop hook and removes its record; SBX_ENOENT
 * when the store has no such box.
 * gc: `opts_json` NULL or {"labels": {..}, "dry_run": bool}; collects the
 * expired, the dead (not alive), and with labels the matching; `*out` the
 * malloc'd JSON array of their ids.
 */
SBX_EXPORT int sbx_box_store_list(sbx_box_store *s, const char *filter_json, char **out,
                                  sbx_error **err);
SBX_EXPORT int sbx_box_store_stop(sbx_box_store *s, const char *id, sbx_error **err);
SBX_EXPORT int sbx_box_store_gc(sbx_box_store *s, const char *opts_json, char **out,
                                sbx_error **err);

/*
 * The three above as a provider's list / stop_id / gc ops: copy the
 * argument, run on the worker pool, complete `op` (with the JSON text, or
 * NULL for stop). `s` must outlive the op. Loop thread; never block.
 */
SBX_EXPORT void sbx_box_op_list(sbx_op *op, sbx_box_store *s, const char *filter_json);
SBX_EXPORT void sbx_box_op_stop_id(sbx_op *op, sbx_box_store *s, const char *id);
SBX_EXPORT void sbx_box_op_gc(sbx_op *op, sbx_box_store *s, const char *opts_json);

#ifdef __cplusplus
}
#endif
#endif /* SBX_BOX_H */
