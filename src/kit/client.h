/*
 * The host side of the agent protocol: one connection to an sbx-agent, on
 * the sbx libuv loop, carrying any number of concurrent execs and file
 * transfers. Box providers (linux, docker, ...) start the agent, connect,
 * and map their exec/upload/download ops onto these calls.
 *
 * Every function runs on the loop thread. Ops complete through
 * sbx_op_complete() (so the core's continuation runs later, never inside the
 * call). docs/agent-protocol.md describes the wire format.
 */
#ifndef SBX_PROTO_CLIENT_H
#define SBX_PROTO_CLIENT_H

#include <sbx.h>
#include <sbx/provider.h>
#include <stdbool.h>
#include <sys/types.h>

typedef struct sbx_agent_conn sbx_agent_conn;

/* conn is NULL on failure; `err` is owned by the callback. */
typedef void (*sbx_agent_connect_cb)(sbx_agent_conn *conn, int code, sbx_error *err, void *data);

/*
 * Connects to the agent's unix socket at `socket_path` on `loop` (a
 * uv_loop_t *, from sbx_op_loop(op)), retrying until it accepts or
 * `timeout_s` passes, and does the hello. `cb` runs later on the loop, once.
 * Returns SBX_OK, or a negative code (and `cb` is not called).
 */
int sbx__agent_connect(void *loop, const char *socket_path, double timeout_s,
                       sbx_agent_connect_cb cb, void *data);
/*
 * The same with exactly one connect attempt: a socket nobody listens on (the
 * agent died) fails at once instead of being retried until `timeout_s`,
 * which then bounds only the hello. For reconnecting to a box that was up.
 */
int sbx__agent_reconnect(void *loop, const char *socket_path, double timeout_s,
                         sbx_agent_connect_cb cb, void *data);
/*
 * sbx__agent_connect (or, with `one_attempt`, sbx__agent_reconnect) that
 * accepts only `peer_pid` (> 0) as the process listening on the socket
 * (SO_PEERCRED), checked before anything is sent: a path that leads to
 * another process fails with SBX_EPERM. For a socket whose path is not
 * trusted to lead to the right agent.
 */
int sbx__agent_connect_peer(void *loop, const char *socket_path, pid_t peer_pid, bool one_attempt,
                            double timeout_s, sbx_agent_connect_cb cb, void *data);
/* The same over an already-connected duplex stream fd (takes ownership of fd). */
int sbx__agent_connect_fd(void *loop, int fd, double timeout_s, sbx_agent_connect_cb cb,
                          void *data);

/*
 * Runs `command` with the agent's shell, `SHELL -c` (or `argv`, NULL-terminated,
 * when non-NULL), completing `op` with an sbx_exec_result *. `base_env` ("K=V",
 * NULL-ended, may be NULL) is applied under the opts env. A timeout gives rc
 * 125, error_type "timeout", stdout NULL; a signal N rc 128+N; an OOM kill rc
 * 137, "oom"; a lost connection rc 125, "sandbox". Honours sbx_op_on_cancel (SBX_ECANCELED once
 * the command's group is dead).
 */
void sbx__agent_exec(sbx_agent_conn *c, sbx_op *op, const char *command, const char *const *argv,
                     const sbx_exec_opts *opts, const char *const *base_env);
/*
 * Completes the exec `op` of a box whose agent is gone (its init died, its
 * TTL passed) before the command ran: SBX_OK with the reference's result for
 * a container that is no longer running, rc 125, error_type "sandbox",
 * stdout "" and stderr `why` (copied). Not an error, as the reference's
 * container providers return it.
 */
void sbx__agent_exec_unreachable(sbx_op *op, const char *why);
/*
 * Streams a host file into the box (mode kept, parent dirs created, replaced
 * atomically) / out of the box to a host path (atomic write, mode kept,
 * parent dirs created). Complete `op` with NULL. Errors name the path:
 * SBX_ENOENT for a missing file, SBX_EPERM for a path escaping the box.
 */
void sbx__agent_upload(sbx_agent_conn *c, sbx_op *op, const char *local_path,
                       const char *remote_path);
void sbx__agent_download(sbx_agent_conn *c, sbx_op *op, const char *remote_path,
                         const char *local_path);
/*
 * Limits the host applies to what the agent sends on transfers (the box
 * chooses every byte and every silence). Zero fields take the defaults.
 */
#define SBX_AGENT_DEFAULT_MAX_DOWNLOAD ((uint64_t)16 << 30)
#define SBX_AGENT_DEFAULT_IDLE_S 60.0
typedef struct {
    uint64_t max_download_bytes; /* a download announcing or sending more fails; 0: default */
    double idle_timeout_s;       /* a transfer or ping without progress this long fails; <= 0: default */
} sbx_agent_limits;
/* Applies to transfers started on `c` from now on. */
void sbx__agent_set_limits(sbx_agent_conn *c, const sbx_agent_limits *limits);

/* A round trip to the agent; completes with NULL. */
void sbx__agent_ping(sbx_agent_conn *c, sbx_op *op);
/* 0 once the stream closed (agent gone, protocol error, or closed). */
int sbx__agent_alive(const sbx_agent_conn *c);
/* 1 when no op is in flight on it (closing it then fails nothing). */
int sbx__agent_idle(const sbx_agent_conn *c);
/* Closes the stream and frees the connection; pending ops complete with errors. */
void sbx__agent_close(sbx_agent_conn *c);

#endif /* SBX_PROTO_CLIENT_H */
