/* The docker provider's parts that tests and the fuzzer reach (provider.c). */
#ifndef SBX_PROVIDERS_DOCKER_DOCKER_H
#define SBX_PROVIDERS_DOCKER_DOCKER_H

#include "core/internal.h"
#include "providers/docker/engine.h"

#include <sbx/box.h>

#include <arpa/inet.h>
#include <stdbool.h>

/* The provider config (docs/providers/docker.md), parsed and checked. */
struct dk_config {
    char *host, *api_version, *state_dir;
    char *image; /* used when a spec names none; NULL: a spec must */
    int remote;  /* 1: the exec-session path; 0: the socket mount; -1: by where the engine is */
    bool pull;
    int max_connections;
    /* create */
    char *network;
    bool read_only, apply_resource_limits;
    json_t *cap_drop, *security_opt; /* arrays of strings, or NULL */
    double pids_limit, start_timeout_s;
    char *publish_host;
    json_t *host_config; /* extra HostConfig fields, or NULL */
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
};

struct dbox {
    char *id;        /* the box id: also the container's name */
    char *container; /* the container's id */
    char *scope;     /* a connected handle's scope, or NULL */
    sbx_box_agent *agent;
    /*
     * The agent's socket on this machine and its pid here (the container's
     * PID 1) for connections of their own (agent_address: PTYs, background
     * processes, port forwarding); NULL, 0 on the remote path.
     */
    char *socket;
    pid_t pid;
};
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
/* The engine's POST /containers/create body for `spec` (a new reference the caller frees). */
SBX_INTERNAL json_t *sbx__dk_create_body(const struct dk_config *c, const sbx_spec *spec,
                                         const char *id, const char *image,
                                         const char *image_user, const char *agent,
                                         const char *run_dir);
SBX_INTERNAL int sbx__dk_endpoint_url(const json_t *info, int port, const char *publish_host,
                                      char **url, sbx_error **err);
SBX_INTERNAL sbx_status sbx__dk_status_of(const char *engine_status);
SBX_INTERNAL int sbx__dk_inspect(sbx_dk_engine *e, const char *c, json_t **out, sbx_error **err);
SBX_INTERNAL int sbx__dk_remove(sbx_dk_engine *e, const char *c, sbx_error **err);

#endif
