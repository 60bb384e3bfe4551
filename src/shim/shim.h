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
    const char *lower;    /* the read-only root tree (the top layer of `lowers`) */
    json_t *lowers;       /* the image's layers, top first (NULL: just `lower`) */
    bool none_image;      /* lower is the skeleton: bind the host's system dirs */
    bool net_host;        /* share the host's network namespace */
    int net;              /* [nat] SBX_LINUX_NET_*: none, host or nat */
    const char *pasta;    /* [nat] the pasta binary */
    const char *nft;      /* [nat] the sbx-nft helper */
    json_t *egress;       /* [nat] provider_options.egress, or NULL */
    json_t *dns;          /* [nat] upstream name servers for pasta, or NULL */
    /* [netw] A box-to-box network (networks.c): its name and directory, NULL: none. */
    const char *net_name;
    const char *net_dir;
    char *net_addr;       /* the box's address in it, once joined (malloc'd) */
    unsigned net_prefix;
    bool userns;          /* map root in the box to an unprivileged host range */
    unsigned userns_base;  /* first host uid of the first slot (userns) */
    unsigned userns_slots; /* how many 65536-id ranges follow it */
    unsigned uid_base;     /* host uid box root maps to: the slot the shim locked */
    bool seccomp;         /* the default filter (on unless disabled) */
    long long upper_size; /* bytes; 0 = tmpfs default */
    long long nofile_soft; /* the box's RLIMIT_NOFILE; hard 0: left as inherited */
    long long nofile_hard;
    const char *workdir;
    const char *agent;    /* host path of the static sbx-agent */
    const char *shell;    /* the agent's --shell, NULL: its default (auto) */
    const char *user;     /* the agent's --user (the image's User), NULL: root */
    double ttl_s;         /* < 0: none */
    double ready_timeout_s;
    double stop_grace_s;
    sbx_cg_limits limits;
    json_t *env;        /* array of "K=V" */
    json_t *entrypoint; /* array or NULL */
    json_t *metadata;   /* object */
    json_t *cdi;        /* the CDI edits for resources.gpu (devices, mounts), or NULL */
    /*
     * The box ends when its creator's control socket closes, even after the
     * handover, unless the creator said "detach" first (sbx run, sbx create
     * until its record is written): a creator killed with SIGKILL takes its
     * box along instead of leaving it running with nobody knowing its id.
     */
    bool die_with_creator;
    long long log_max_bytes; /* [svc-logs] service.log's rotation bound; 0: no log kept */
};

/* The size of every box's uid and gid range in userns mode. */
#define SHIM_USERNS_SIZE 65536u

/*
 * The host directories the "none" image binds read-only into the box. In
 * userns mode the shim makes idmapped copies of them (box.c cannot: it has no
 * host privilege) and hands them to the box's child with the go message.
 */
extern const char *const shim_host_system_dirs[];
extern const size_t shim_n_host_system_dirs;

/* Detached idmapped mounts the shim gives the child (userns mode); -1 when absent. */
/* Layers of one image (image.c's MAX_LAYERS). */
#define SHIM_MAX_LOWERS 128

struct shim_idmapped {
    int lower;    /* the image's read-only root tree */
    int lowers[SHIM_MAX_LOWERS]; /* each layer, top first, when the image has several */
    size_t nlowers;
    int sys[16];  /* shim_host_system_dirs[i], for the none image */
};

/* Fds the box's child process works with (see shim.c for who owns each). */
struct child_fds {
    int sync_r;   /* socket: the shim sends "g" once the child is in its cgroups (and, with
                     a user namespace, its maps are written and its idmapped mounts made) */
    int err_w;    /* the child writes why it failed; closes on exec (CLOEXEC) */
    int ready_w;  /* passed to the agent as --ready-fd 3 */
    int agent_fd; /* O_PATH of the agent binary, executed with execveat */
    const json_t *self_attach; /* v1 group dirs the child joins itself, or NULL */
    const struct sock_fprog *filter; /* the compiled seccomp filter, or NULL */
    int out_w, errl_w; /* [svc-logs] the service log pipes: the agent's fds 1 and 2, or -1 */
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

/*
 * [svc-logs] The service's output, kept by the shim in <box dir>/service.log
 * (svclog.c; the format is src/core/logs.h). Writing never blocks on the
 * box: a failed write drops the bytes and counts them.
 */
struct shim_log {
    int fd;              /* service.log, O_APPEND; -1: not open (no log kept, or it failed) */
    char *path, *old;    /* service.log and service.log.1 */
    long long size, max; /* bytes in service.log; the rotation bound (0: no log) */
    unsigned long long dropped; /* bytes lost to write errors */
};
/* Creates service.log (0600) in `box_dir`; returns -errno. max 0: keeps nothing. */
int shim_log_open(struct shim_log *l, const char *box_dir, long long max);
/* Appends one record (len <= SBX_LOG_MAX_RECORD), rotating first when it would pass the bound. */
void shim_log_append(struct shim_log *l, int stream, const void *data, size_t len);
/*
 * Reads what the non-blocking pipe *fd holds now (a bounded number of
 * reads, so other work is not starved) into records of `stream`. At EOF
 * closes it and sets *fd to -1.
 */
void shim_log_drain(struct shim_log *l, int *fd, int stream);
void shim_log_close(struct shim_log *l);
/* --- published ports (forward.c) [endpoint] ------------------------------ */

#define SHIM_MAX_PORTS 64

struct shim_ports {
    int fds[SHIM_MAX_PORTS]; /* host listeners, until the forwarder takes them */
    uint16_t ports[SHIM_MAX_PORTS];
    size_t n;
    json_t *record; /* [{"port", "host_ip", "host_port"}] for the box record, or NULL */
};

/* Listens for each entry of the description's "ports" (NULL: none). -1 with `msg`. */
int shim_ports_open(json_t *desc, struct shim_ports *p, char *msg, size_t len);
void shim_ports_close(struct shim_ports *p);
/* Starts the forwarder (0 when there are no ports), which takes the listeners. */
pid_t shim_forwarder_start(struct shim_ports *p, const char *box_dir, pid_t agent, char *msg,
                           size_t len);
/* Kills and reaps it (*pid 0 afterwards). */
void shim_forwarder_stop(pid_t *pid);
/* `sbx-shim --forward ...`: the forwarder's main. */
int shim_forward_main(int argc, char **argv);

/* --- network "nat" (nat.c) [nat] ----------------------------------------- */

/* Loads the egress policy into the namespace of `init` (through sbx-nft). -1 with `msg`. */
int shim_nat_filter(const struct shim_cfg *c, pid_t init, char *msg, size_t len);
/*
 * Loads nftables `rules` into the network namespace `nsfd` through sbx-nft
 * (c->nft), run as a child setns'd there; `ping` also opens ICMP datagram
 * sockets there (nat). -1 with `msg` naming `what` and nft's error.
 */
int shim_nft_load(const struct shim_cfg *c, int nsfd, const char *rules, bool ping,
                  const char *what, char *msg, size_t len);
/* Starts pasta on the namespace of `init`; its pid, or -1 with `msg`. */
pid_t shim_nat_start(const struct shim_cfg *c, pid_t init, char *msg, size_t len);
/* Waits until pasta has configured the box's interface: 0; -1 (pasta still runs) or -2 (reaped). */
int shim_nat_wait(const struct shim_cfg *c, pid_t pid, double timeout_s, char *msg, size_t len);
/* Kills and reaps pasta (*pid 0 afterwards). */
void shim_nat_stop(pid_t *pid);

#endif
