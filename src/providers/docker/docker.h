/* The docker provider's parts that tests and the fuzzer reach (provider.c). */
#ifndef SBX_PROVIDERS_DOCKER_DOCKER_H
#define SBX_PROVIDERS_DOCKER_DOCKER_H

#include "core/internal.h"
#include "providers/docker/engine.h"

#include <sbx/box.h>

#include <arpa/inet.h>
#include <pthread.h>
#include <stdbool.h>

/* The provider config (docs/providers/docker.md), parsed and checked. */
struct dk_config {
    char *host, *api_version, *state_dir;
    char *image; /* used when a spec names none; NULL: a spec must */
    char *image_rewrites; /* JSON list of {from, to} (sbx_rewrite_image), or NULL */
    int remote;  /* 1: the exec-session path; 0: the socket mount; -1: by where the engine is */
    bool pull;
    bool agent; /* false: no agent; the engine's exec and archive APIs (noagent.c) */
    int max_connections;
    /* create */
    char *network;
    bool read_only, apply_resource_limits;
    json_t *cap_drop, *security_opt; /* arrays of strings, or NULL */
    double pids_limit, start_timeout_s;
    char *publish_host;
    json_t *host_config; /* extra HostConfig fields, or NULL */
    /* agent: false only: what keeps the container running, and --init */
    char *keepalive_shell, *keepalive_cmd;
    bool use_init;
    /* exec */
    char *shell; /* the agent's --shell; NULL: auto (bash when the image has it) */
    /* probe: the reference's readiness loop, after the agent's hello */
    char *probe_command, *probe_expected; /* NULL: no probe */
    double probe_timeout_s, probe_deadline_s, probe_stable_delay_s; /* deadline 0: none */
    int probe_stable_count;
};

/* The provider's state, and a box of it (provider.c). */
struct docker {
    struct dk_config cfg;
    sbx_dk_engine *engine;
    sbx_box_store *store;
    sbx_box_pool *pool;
    char *agent; /* the sbx-agent binary on this host */
    /*
     * The remote path's agent volume (provider.c, agent_volume): named by
     * the agent's SHA-256, made once per engine, filled atomically, checked
     * on every create; vol_lock guards these and serializes fills.
     */
    pthread_mutex_t vol_lock;
    char *vol_name;
    long long agent_size;
    bool vol_made;
};

struct dbox {
    char *id;        /* the box id: also the container's name */
    char *container; /* the container's id */
    char *scope;     /* a connected handle's scope, or NULL */
    sbx_box_agent *agent;
    /*
     * The agent's socket on this machine and its pid here (the container's
     * PID 1) for connections of their own (agent_address: PTYs, background
     * processes, port forwarding); NULL, 0 on the remote path (relay).
     */
    char *socket;
    pid_t pid;
    /*
     * The remote path's connections of their own (agent_address): a socket
     * of this process whose every connection an exec session of `sbx-agent
     * relay` carries to the box's init agent; NULL until first asked for.
     * bind_agent: the agent is the bind-mounted one (a box made on the
     * socket path), not the agent volume's.
     */
    struct dk_relay *relay;
    bool bind_agent;
    /* agent: false (noagent.c): the engine's exec and archive APIs instead */
    bool noagent;
    char *shell;   /* the exec shell: the config's, else bash when the image has it, else sh */
    char *workdir; /* the container's WorkingDir (relative paths join it), or NULL */
};
struct dk_relay;
SBX_INTERNAL void sbx__dk_box_free(void *box);
/*
 * After the agent's hello: runs the config's probe command (probe.c) and
 * completes the create `op` with `b`, or ends the box and fails it
 * (SBX_EVERIFY). Loop thread.
 */
SBX_INTERNAL void sbx__dk_probe_start(struct docker *d, sbx_op *op, struct dbox *b);

SBX_INTERNAL int sbx__dk_config_parse(const char *config_json, struct dk_config *c,
                                      sbx_error **err);
SBX_INTERNAL void sbx__dk_config_free(struct dk_config *c);
/*
 * The engine's POST /containers/create body for `spec` (a new reference the
 * caller frees): `agent` and `run_dir` for the socket path, NULL for the
 * remote path; `noagent` for agent: false (no agent at all).
 */
SBX_INTERNAL json_t *sbx__dk_create_body(const struct dk_config *c, const sbx_spec *spec,
                                         const char *id, const char *image,
                                         const char *image_user, const char *agent,
                                         const char *run_dir, bool noagent);
/* Whether a spec's provider_options say agent: false (else the config's). SBX_EINVAL. */
SBX_INTERNAL int sbx__dk_spec_noagent(const struct dk_config *c, const sbx_spec *spec,
                                      bool *noagent, sbx_error **err);

/* --- agent: false (noagent.c): the engine's exec and archive APIs ------------------ */

/* The box's ops (loop thread; each runs on the worker pool and completes `op`). */
SBX_INTERNAL void sbx__dk_noagent_exec(sbx_op *op, struct docker *d, struct dbox *b,
                                       const char *command, const sbx_exec_opts *opts);
SBX_INTERNAL void sbx__dk_noagent_upload(sbx_op *op, struct docker *d, struct dbox *b,
                                         const char *local_path, const char *remote_path);
SBX_INTERNAL void sbx__dk_noagent_download(sbx_op *op, struct docker *d, struct dbox *b,
                                           const char *remote_path, const char *local_path);
/* The exec shell of container `cid` (the reference's _resolve_shell): malloc'd. Blocking. */
SBX_INTERNAL char *sbx__dk_noagent_shell(struct docker *d, const char *cid);
/* One exec of a box's ops, whichever way it goes (the probe uses it). Loop thread. */
SBX_INTERNAL void sbx__dk_box_exec(sbx_op *op, struct docker *d, struct dbox *b,
                                   const char *command, const sbx_exec_opts *opts);
/*
 * A tar of one regular file `name` (mode, size) followed by the file's
 * bytes from `fd`, written by libarchive to `out_fd`; and its reverse: the
 * one regular file of the tar on `in_fd` written to `out_path`
 * (atomically, mode kept). Fuzzed (fuzz_docker.c). Blocking.
 */
SBX_INTERNAL int sbx__dk_tar_one(int fd, const char *name, unsigned mode, long long size,
                                 int out_fd, char *msg, size_t msg_len);
SBX_INTERNAL int sbx__dk_untar_one(int in_fd, const char *out_path, char *msg, size_t msg_len);
/*
 * The engine's X-Docker-Container-Path-Stat header (base64 of a JSON
 * object): its Go mode bits, link target (malloc'd, or NULL) and, when
 * `size` is not NULL, its size (-1 when it has none). -1 for one that does
 * not parse. Fuzzed.
 */
SBX_INTERNAL int sbx__dk_path_stat_parse(const char *hdr, unsigned long long *mode, char **link,
                                         long long *size);
/*
 * The engine's stat of path `p` in container `cid` (HEAD
 * /containers/ID/archive), made or running: SBX_OK with what
 * sbx__dk_path_stat_parse gives, SBX_ENOENT when nothing is there. Blocking.
 */
SBX_INTERNAL int sbx__dk_stat_path(struct docker *d, const char *cid, const char *p,
                                   unsigned long long *mode, char **link, long long *size,
                                   sbx_error **err);
/*
 * [svc-logs] log_stream (logs.c): the container's output through the
 * engine's logs API, as service-log records into `fd` (taken). Loop thread.
 */
SBX_INTERNAL void sbx__dk_log_stream(sbx_op *op, struct docker *d, struct dbox *b, int fd,
                                     double since, long long tail, unsigned flags);
/*
 * The time prefix `timestamps=1` puts before each log message (RFC 3339,
 * "2026-12-02T13:20:00.123456789Z "): unix seconds into *t and the prefix's
 * length with its space, or -1 for bytes that do not start with one. Fuzzed.
 */
SBX_INTERNAL long sbx__dk_log_time(const char *p, size_t n, double *t);
SBX_INTERNAL int sbx__dk_endpoint_url(const json_t *info, int port, const char *publish_host,
                                      char **url, sbx_error **err);
SBX_INTERNAL sbx_status sbx__dk_status_of(const char *engine_status);
SBX_INTERNAL int sbx__dk_inspect(sbx_dk_engine *e, const char *c, json_t **out, sbx_error **err);
SBX_INTERNAL int sbx__dk_remove(sbx_dk_engine *e, const char *c, sbx_error **err);

#endif
