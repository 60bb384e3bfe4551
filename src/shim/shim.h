/* sbx-shim internals: the per-box supervisor of the linux provider. */
#ifndef SBX_SHIM_H
#define SBX_SHIM_H

#include "providers/linux/linux.h"

#include <linux/filter.h>
#include <sys/types.h>

/* The box description the provider sends over the control socket (JSON). */
struct shim_cfg {
    json_t *json; /* owns every string below */
    const char *id;
    const char *state_dir;
    const char *box_dir;
    const char *hostname;
    const char *image;    /* as the spec named it, for the record */
    const char *lower;    /* the read-only root tree */
    bool none_image;      /* lower is the skeleton: bind the host's system dirs */
    bool net_host;        /* share the host's network namespace */
    bool userns;          /* map root in the box to an unprivileged host range */
    unsigned uid_base;    /* host uid that box root maps to (userns) */
    bool seccomp;         /* the default filter (on unless disabled) */
    long long upper_size; /* bytes; 0 = tmpfs default */
    const char *workdir;
    const char *agent;    /* host path of the static sbx-agent */
    double ttl_s;         /* < 0: none */
    double ready_timeout_s;
    double stop_grace_s;
    sbx_cg_limits limits;
    json_t *env;        /* array of "K=V" */
    json_t *entrypoint; /* array or NULL */
    json_t *metadata;   /* object */
};

/* Fds the box's child process works with (see shim.c for who owns each). */
struct child_fds {
    int sync_r;   /* the shim writes one byte once the child is in its cgroups */
    int err_w;    /* the child writes why it failed; closes on exec (CLOEXEC) */
    int ready_w;  /* passed to the agent as --ready-fd 3 */
    int agent_fd; /* O_PATH of the agent binary, executed with execveat */
    const json_t *self_attach; /* v1 group dirs the child joins itself, or NULL */
    const struct sock_fprog *filter; /* the compiled seccomp filter, or NULL */
};

/* Runs in the cloned child: builds the box and execs the agent. Never returns. */
__attribute__((noreturn)) void shim_box_child(const struct shim_cfg *c, const struct child_fds *f);

/* Step timing on stderr when the box description says "trace" (SBX_SHIM_STDERR=trace). */
extern bool shim_tracing;
void shim_trace(const char *what);

/*
 * Capabilities, no_new_privs and seccomp (security.c). `filter` is the
 * program from shim_seccomp_filter(), or NULL to compile it here. Returns
 * -errno and a message.
 */
int shim_drop_privileges(const struct shim_cfg *c, const struct sock_fprog *filter, char *msg,
                         size_t msg_len);
/*
 * The default seccomp filter as BPF, from the cache under the state directory
 * or compiled (and cached) now. `out->filter` is malloc'd. Returns -errno.
 */
int shim_seccomp_filter(const struct shim_cfg *c, struct sock_fprog *out);

#endif
