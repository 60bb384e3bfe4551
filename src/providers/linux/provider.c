/*
 * The linux provider: boxes made of Linux namespaces, an overlayfs root over
 * a cached image, cgroup limits, seccomp and reduced capabilities, each
 * supervised by its own sbx-shim process, with sbx-agent as its PID 1.
 *
 * create: resolve the image (worker pool: it may unpack), spawn sbx-shim with
 *         a control socket, send it the box description, wait for "ready",
 *         connect to the agent's socket, say "ack". Any failure before the
 *         ack makes the shim remove everything, and the op completes only
 *         once it has (the control socket's EOF).
 * exec, upload, download: the agent protocol over the box's unix socket,
 *         through a bounded pool of connections (agentpool.c): a box whose
 *         connection was closed to stay under the cap reconnects on its next op.
 * close:  SIGTERM to the shim through a pidfd; done when the shim has exited
 *         (it removes cgroups and the box directory on its way out).
 */
#include "providers/linux/linux.h"
#include "kit/agentpool.h"
#include "core/logs.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include <uv.h>

#include "kit/client.h"

struct linux_state {
    char *state_dir;
    char *image_store; /* NULL: <state_dir>/images */
    char *shim;
    char *agent;
    long long pids;
    int net; /* SBX_LINUX_NET_*: the config's network */
    char *pasta; /* [nat] the config's pasta binary, NULL: found in PATH */
    bool userns;
    unsigned userns_base;  /* host uid of slot 0's box root */
    unsigned userns_slots; /* how many 65536-id ranges boxes may take */
    bool seccomp;
    bool memcg_limited; /* memory_cgroup: "limited": only boxes with a memory limit get one */
    /*
     * Stops watching a shim (each holds its pidfd until the shim exits), and
     * those waiting for their turn: a stop of 10,000 boxes at once from a
     * process with the usual 1024 descriptors must not run out of them.
     */
    unsigned stops_in_flight;
    struct stop *stops_waiting, *stops_waiting_tail;
    bool stops_draining;
    /* Creates running and those waiting for their turn (SBX_LINUX_CREATES_IN_FLIGHT). */
    unsigned creates_in_flight;
    struct create *creates_waiting, *creates_waiting_tail;
    bool creates_draining;
    double stop_grace_s;
    double stop_timeout_s;
    long long nofile_soft, nofile_hard; /* nofile; hard 0: the default */
    sbx_linux_host host; /* what the host has, read once: the defaults scale with it */
    int agent_dynamic; /* -1 unknown, 0 static, 1 needs an interpreter */
    long long max_conns;     /* max_agent_connections */
    unsigned long long max_image_bytes; /* 0: image.c's default */
    long long log_max_bytes; /* [svc-logs] service.log's rotation bound; 0: no log */
    sbx_kit_pool *pool; /* the agent connections of this provider's boxes */
    sbx_agent_limits limits; /* max_download_bytes, transfer_idle_timeout_s */
    char **cdi_dirs; /* cdi_spec_dirs, NULL-ended; NULL: sbx__cdi_default_dirs */
    char *shell; /* shell: NULL = auto (bash when the box has it, else sh) */
    /* Registry pulls (docs/images.md, "Pulling"). */
    char *pull; /* "missing" (NULL), "always", "never" */
    char *platform;
    char **mirrors, **insecure, **certs_dirs;
    char *docker_config;
    int pull_parallel;
    sbx_pull_opts registry; /* points into the fields above */
    sbx_linux_extras x; /* [volumes] volumes, cap_add, shm_size, volume_store, shared_root */
};

struct linux_box {
    char *id;
    char *box_dir;
    char *socket;
    json_t *cgroups;
    char **base_env; /* "K=V", NULL-ended */
    char *workdir;   /* spec.workdir or NULL: relative upload/download paths resolve against it */
    sbx_kit_slot agent; /* its connection, in st->pool */
    pid_t shim_pid;
    unsigned long long shim_start;
    /*
     * die_with_creator: the shim's control socket, kept open after the
     * handover. Its close without a "detach" (this process killed) ends the
     * box; box_free says "detach" first. -1 otherwise.
     */
    int ctl;
    struct linux_state *st;
    json_t *ports; /* [endpoint] the declared ports (numbers), for serialize; or NULL */
};

static const char *box_id(const void *box) { return ((const struct linux_box *)box)->id; }

static void box_free(void *box)
{
    struct linux_box *b = box;
    if (!b)
        return;
    sbx__kit_agent_drop(&b->agent);
    if (b->ctl >= 0) {
        /*
         * Freed, not killed: a handle freed after its stop, or detached (the
         * box outlives the handle, as sbx_sandbox_detach promises).
         */
        send(b->ctl, "detach", 6, MSG_NOSIGNAL | MSG_DONTWAIT);
        close(b->ctl);
    }
    free(b->id);
    free(b->box_dir);
    free(b->socket);
    json_decref(b->cgroups);
    sbx_strv_free(b->base_env);
    free(b->workdir);
    json_decref(b->ports); /* [endpoint] */
    free(b);
}

/* --- config --------------------------------------------------------------- */

/* 1 when an ELF executable names an interpreter (is dynamically linked), 0 if not, -1 unknown. */
static int elf_dynamic(const char *path)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    Elf64_Ehdr eh;
    if (fd < 0 || pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
        return -1;
    for (int i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + (Elf64_Off)i * eh.e_phentsize)) !=
            (ssize_t)sizeof(ph))
            return -1;
        if (ph.p_type == PT_INTERP)
            return 1;
    }
    return 0;
}

/* [nat] SBX_LINUX_NET_* of a network name, -1 for any other. */
static int net_mode(const char *s)
{
    if (!s)
        return -1;
    return !strcmp(s, "none") ? SBX_LINUX_NET_NONE
           : !strcmp(s, "host") ? SBX_LINUX_NET_HOST
           : !strcmp(s, "nat")  ? SBX_LINUX_NET_NAT
                                : -1;
}

static void state_free(struct linux_state *st)
{
    if (!st)
        return;
    free(st->state_dir);
    free(st->image_store);
    free(st->shim);
    free(st->agent);
    free(st->pasta);
    sbx_strv_free(st->cdi_dirs);
    free(st->shell);
    free(st->pull);
    free(st->platform);
    sbx_strv_free(st->mirrors);
    sbx_strv_free(st->insecure);
    sbx_strv_free(st->certs_dirs);
    free(st->docker_config);
    sbx__kit_agent_pool_free(st->pool);
    sbx__linux_extras_free(&st->x);
    free(st);
}

static int cfg_error(sbx_error **err, const char *key, const char *want)
{
    return sbx__set_error(err, SBX_EINVAL, "linux provider: %s must be %s", key, want);
}

/*
 * nofile: N (soft and hard) or [soft, hard], as `docker run --ulimit
 * nofile=soft:hard`. Returns false when `v` is neither.
 */
static bool parse_nofile(const json_t *v, long long *soft, long long *hard)
{
    const json_t *a = json_is_array(v) && json_array_size(v) == 2 ? json_array_get(v, 0) : v;
    const json_t *b = json_is_array(v) && json_array_size(v) == 2 ? json_array_get(v, 1) : v;
    if (!json_is_integer(a) || !json_is_integer(b))
        return false;
    long long s = json_integer_value(a), h = json_integer_value(b);
    if (s < 1 || h < s)
        return false;
    *soft = s;
    *hard = h;
    return true;
}

#define NOFILE_WANT "a positive integer or [soft, hard] with soft <= hard"

/*
 * The box's RLIMIT_NOFILE: the configured one, or sbx's default (soft 1024,
 * hard from 1024 to 4096 so that the box's pids × hard stays within half of
 * the host's file-max: defaults.c), never above the hard limit of this
 * process. The shim and the box inherit our limits, and without
 * CAP_SYS_RESOURCE nobody could raise them; with it (root), sbx still must
 * not hand a box more than its creator has, so a configured hard limit
 * above ours is an error, not a silent cut.
 */
static int box_nofile(const sbx_linux_host *host, long long pids, long long want_soft,
                      long long want_hard, long long *soft, long long *hard, sbx_error **err)
{
    struct rlimit rl;
    unsigned long long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY
                                 ? (unsigned long long)rl.rlim_max
                                 : ~0ULL;
    if (want_hard <= 0) {
        long long def = sbx__linux_default_nofile_hard(host, pids);
        *hard = (unsigned long long)def < max ? def : (long long)max;
        *soft = SBX_LINUX_DEFAULT_NOFILE_SOFT < *hard ? SBX_LINUX_DEFAULT_NOFILE_SOFT : *hard;
        return SBX_OK;
    }
    if ((unsigned long long)want_hard > max)
        return sbx__set_error(err, SBX_EINVAL,
                              "nofile: the hard limit %lld is above this process's own hard "
                              "limit (%llu), and sbx never raises it; ask for at most %llu, or "
                              "raise the creator's limit (ulimit -Hn)",
                              want_hard, max, max);
    *soft = want_soft;
    *hard = want_hard;
    return SBX_OK;
}

/*
 * First uid (and gid) of /etc/passwd (or /etc/group) inside [lo, hi), or -1,
 * and its name in `name`. Read from the files, as the useradd family writes
 * them (a directory service's users are not seen).
 */
static long long id_in_range(const char *file, unsigned long long lo, unsigned long long hi,
                             char *name, size_t n)
{
    FILE *f = fopen(file, "re");
    char line[4096];
    long long found = -1;
    while (f && found < 0 && fgets(line, sizeof(line), f)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        char *end;
        unsigned long long id = strtoull(c2 + 1, &end, 10);
        if (end == c2 + 1 || *end != ':' || id < lo || id >= hi)
            continue;
        *c1 = 0;
        snprintf(name, n, "%.64s", line);
        found = (long long)id;
    }
    if (f)
        fclose(f);
    return found;
}

/*
 * userns boxes map their root onto host uids base .. base + slots * 65536:
 * a range that holds a real user or group would make box root that user
 * on the host (files it writes, signals it may send). The range must start
 * above the ids of regular accounts (65536) and contain none from
 * /etc/passwd or /etc/group.
 */
static int check_userns_range(unsigned base, unsigned slots, sbx_error **err)
{
    unsigned long long lo = base, hi = (unsigned long long)base + (unsigned long long)slots * 65536;
    static const char *const files[] = { "/etc/passwd", "/etc/group" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(files); i++) {
        char name[80];
        long long id = id_in_range(files[i], lo, hi, name, sizeof(name));
        if (id >= 0)
            return sbx__set_error(err, SBX_EINVAL,
                                  "linux provider: the userns range %llu..%llu (userns_base %u, "
                                  "userns_slots %u) holds %s '%s' (%s %lld) from %s: box root "
                                  "would be that %s on the host. Choose a range no user or group "
                                  "falls in (the default starts at %u)",
                                  lo, hi - 1, base, slots, i ? "the group" : "the user", name,
                                  i ? "gid" : "uid", id, files[i], i ? "group" : "user",
                                  SBX_LINUX_USERNS_BASE);
    }
    if (lo < 65536)
        return sbx__set_error(err, SBX_EINVAL,
                              "linux provider: userns_base %u would map box root onto a host "
                              "user's uid: it must be at least 65536 (the default, %u, is above "
                              "the ranges useradd hands out); the range is userns_base .. "
                              "userns_base + userns_slots * 65536",
                              base, SBX_LINUX_USERNS_BASE);
    return SBX_OK;
}

/*
 * cdi_spec_dirs: the directories CDI spec files are read from for
 * resources.gpu, in rising priority (a later one's device of the same name
 * wins). Absolute paths; a string is a list of one.
 */
static int parse_cdi_dirs(const json_t *v, char ***out, sbx_error **err)
{
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if ((!json_is_array(v) && !json_is_string(v)) || n > 16)
        return cfg_error(err, "cdi_spec_dirs", "a list of at most 16 absolute directory paths");
    char **dirs = calloc(n + 1, sizeof(char *));
    if (!dirs)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *d = json_string_value(json_is_array(v) ? json_array_get(v, i) : v);
        if (!d || d[0] != '/' || strlen(d) >= PATH_MAX) {
            sbx_strv_free(dirs);
            return cfg_error(err, "cdi_spec_dirs", "a list of absolute directory paths");
        }
        if (!(dirs[i] = strdup(d))) {
            sbx_strv_free(dirs);
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
    }
    sbx_strv_free(*out);
    *out = dirs;
    return SBX_OK;
}

/* A list of at most 64 strings (absolute paths when `abs`), or one string. */
static int parse_strv(const json_t *v, const char *key, bool abs, char ***out, sbx_error **err)
{
    const char *want = abs ? "a list of absolute directory paths" : "a list of host[:port] names";
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if ((!json_is_array(v) && !json_is_string(v)) || n > 64)
        return cfg_error(err, key, want);
    char **list = calloc(n + 1, sizeof(char *));
    if (!list)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *d = json_string_value(json_is_array(v) ? json_array_get(v, i) : v);
        if (!d || !*d || (abs && d[0] != '/') || strlen(d) >= PATH_MAX || strpbrk(d, " \n\r")) {
            sbx_strv_free(list);
            return cfg_error(err, key, want);
        }
        if (!(list[i] = strdup(d))) {
            sbx_strv_free(list);
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
    }
    sbx_strv_free(*out);
    *out = list;
    return SBX_OK;
}

static bool pull_policy_ok(const char *s)
{
    return s && (!strcmp(s, "missing") || !strcmp(s, "always") || !strcmp(s, "never"));
}

static int linux_init(const char *config_json, void **state, sbx_error **err)
{
    json_error_t je;
    _cleanup_json_ json_t *cfg = json_loads(config_json ? config_json : "{}", 0, &je);
    if (!json_is_object(cfg))
        return sbx__set_error(err, SBX_EINVAL, "linux provider config must be a mapping");
    /* The cgroup level's name (cgroup.c): a wrong one is refused, not replaced by "sbx". */
    const char *cg = getenv("SBX_LINUX_CGROUP");
    if (cg && !sbx__cg_name_ok(cg))
        return sbx__set_error(err, SBX_EINVAL,
                              "SBX_LINUX_CGROUP='%.64s' is not a cgroup name: use 1-%d letters, "
                              "digits, '-' or '_' (or unset it for \"sbx\")",
                              cg, SBX_LINUX_CGROUP_NAME_MAX);
    struct linux_state *st = calloc(1, sizeof(*st));
    if (!st)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    st->pids = -1; /* the default, scaled to the host once the config is read */
    sbx__linux_host_read(&st->host);
    st->seccomp = true;
    /*
     * Above the subordinate ranges useradd hands out (SUB_UID_MAX defaults to
     * 600100000), and base + slots * 65536 stays below 2^31 for tools that
     * keep uids in signed ints.
     */
    st->userns_base = SBX_LINUX_USERNS_BASE;
    st->userns_slots = SBX_LINUX_USERNS_SLOTS;
    st->stop_timeout_s = 10;
    st->agent_dynamic = -1;
    st->max_conns = SBX_KIT_DEFAULT_MAX_AGENT_CONNECTIONS;
    st->log_max_bytes = SBX_LINUX_DEFAULT_LOG_MAX_BYTES; /* [svc-logs] */
    /*
     * A memory cgroup only for a box with a memory limit (docs/scale.md): each
     * costs kernel memory that grows with the number of boxes on the host.
     */
    st->memcg_limited = true;
    const char *key;
    json_t *v;
    int rc = SBX_OK;
    json_object_foreach(cfg, key, v)
    {
        if (!strcmp(key, "state_dir") || !strcmp(key, "shim") || !strcmp(key, "agent") ||
            !strcmp(key, "image_store") || !strcmp(key, "pasta")) {
            /* null: the default (as the shipped providers/linux/configs/linux.yaml writes it). */
            if (json_is_null(v))
                continue;
            if (!json_is_string(v)) {
                rc = cfg_error(err, key, "a path");
                break;
            }
            char **dst = !strcmp(key, "state_dir")     ? &st->state_dir
                         : !strcmp(key, "image_store") ? &st->image_store
                         : !strcmp(key, "shim")        ? &st->shim
                         : !strcmp(key, "pasta")       ? &st->pasta
                                                       : &st->agent;
            /* A relative path would be resolved against whatever directory the program runs in. */
            if (json_string_value(v)[0] != '/') {
                rc = sbx__set_error(err, SBX_EINVAL,
                                    "linux provider: %s must be an absolute path (got '%s')", key,
                                    json_string_value(v));
                break;
            }
            *dst = strdup(json_string_value(v));
        } else if (!strcmp(key, "pids_limit")) {
            if (json_is_null(v)) /* the default, scaled to the host */
                continue;
            if (!json_is_integer(v) || json_integer_value(v) < 0) {
                rc = cfg_error(err, key,
                               "a non-negative integer (0: no limit), or null for the default "
                               "scaled to the host");
                break;
            }
            st->pids = json_integer_value(v);
        } else if (!strcmp(key, "network")) {
            const char *s = json_string_value(v);
            if (net_mode(s) < 0) {
                rc = cfg_error(err, key, "\"none\", \"host\" or \"nat\"");
                break;
            }
            st->net = net_mode(s);
        } else if (!strcmp(key, "userns") || !strcmp(key, "seccomp")) {
            if (!json_is_boolean(v)) {
                rc = cfg_error(err, key, "true or false");
                break;
            }
            *(!strcmp(key, "userns") ? &st->userns : &st->seccomp) = json_is_true(v);
        } else if (!strcmp(key, "userns_base") || !strcmp(key, "userns_slots")) {
            /* Each box takes one 65536-id range; all must fit in 32-bit uids. */
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > 0xFFFF0000LL) {
                rc = cfg_error(err, key, "a positive integer");
                break;
            }
            *(!strcmp(key, "userns_base") ? &st->userns_base : &st->userns_slots) =
                (unsigned)json_integer_value(v);
        } else if (!strcmp(key, "nofile")) {
            if (json_is_null(v)) /* the default, scaled to the host */
                continue;
            if (!parse_nofile(v, &st->nofile_soft, &st->nofile_hard)) {
                rc = cfg_error(err, key, NOFILE_WANT ", or null for the default");
                break;
            }
        } else if (!strcmp(key, "max_agent_connections")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 ||
                json_integer_value(v) > 1 << 20) {
                rc = cfg_error(err, key, "a positive integer (agent connections kept open)");
                break;
            }
            st->max_conns = json_integer_value(v);
        } else if (!strcmp(key, "max_image_bytes")) {
            if (json_is_null(v)) /* the default, which depends on the free space */
                continue;
            if (!json_is_integer(v) || json_integer_value(v) < 1) {
                rc = cfg_error(err, key, "a positive integer (bytes an image may unpack to)");
                break;
            }
            st->max_image_bytes = (unsigned long long)json_integer_value(v);
        } else if (!strcmp(key, "log_max_bytes")) {
            /* [svc-logs] 0 keeps no service log; else at least one whole record fits. */
            if (!json_is_integer(v) ||
                (json_integer_value(v) != 0 && json_integer_value(v) < 2 * SBX_LOG_MAX_RECORD)) {
                rc = cfg_error(err, key,
                               "0 (keep no service log) or an integer of at least 131072 "
                               "(bytes of service.log before it rotates)");
                break;
            }
            st->log_max_bytes = json_integer_value(v);
        } else if (!strcmp(key, "memory_cgroup")) {
            const char *m = json_string_value(v);
            if (!m || (strcmp(m, "always") && strcmp(m, "limited"))) {
                rc = cfg_error(err, key,
                               "\"limited\" (the default: a memory cgroup only for boxes with a "
                               "memory limit) or \"always\" (one per box; docs/scale.md)");
                break;
            }
            st->memcg_limited = !strcmp(m, "limited");
        } else if (!strcmp(key, "stop_grace_s") || !strcmp(key, "stop_timeout_s")) {
            if (!json_is_number(v) || json_number_value(v) < 0) {
                rc = cfg_error(err, key, "a non-negative number of seconds");
                break;
            }
            *(!strcmp(key, "stop_grace_s") ? &st->stop_grace_s : &st->stop_timeout_s) =
                json_number_value(v);
        } else if (!strcmp(key, "shell")) {
            /* The reference's docker exec.exec_shell: null is auto, "" is refused. */
            if (json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), "auto")))
                continue;
            if (!json_is_string(v) || !json_string_value(v)[0]) {
                rc = sbx__set_error(err, SBX_EINVAL,
                                    "linux provider: shell must be null (auto: bash when the box "
                                    "has it, else sh) or a non-empty shell name/path, like "
                                    "\"bash\" or \"/bin/sh\"");
                break;
            }
            free(st->shell);
            st->shell = strdup(json_string_value(v));
        } else if (!strcmp(key, "max_download_bytes")) {
            /* What a download from a box may write on the host (the box picks the size). */
            if (!json_is_integer(v) || json_integer_value(v) < 1) {
                rc = cfg_error(err, key, "a positive integer (bytes)");
                break;
            }
            st->limits.max_download_bytes = (uint64_t)json_integer_value(v);
        } else if (!strcmp(key, "transfer_idle_timeout_s")) {
            if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
                json_number_value(v) <= 0) {
                rc = cfg_error(err, key, "a positive number of seconds");
                break;
            }
            st->limits.idle_timeout_s = json_number_value(v);
        } else if (!strcmp(key, "cdi_spec_dirs")) {
            if (json_is_null(v)) /* the standard /etc/cdi and /var/run/cdi */
                continue;
            rc = parse_cdi_dirs(v, &st->cdi_dirs, err);
            if (rc < 0)
                break;
        } else if (!strcmp(key, "pull")) {
            if (json_is_null(v))
                continue;
            if (!pull_policy_ok(json_string_value(v))) {
                rc = cfg_error(err, key, "\"missing\", \"always\" or \"never\"");
                break;
            }
            free(st->pull);
            st->pull = strdup(json_string_value(v));
        } else if (!strcmp(key, "platform")) {
            if (json_is_null(v))
                continue;
            const char *pf = json_string_value(v);
            if (!pf || !strchr(pf, '/') || strlen(pf) > 128) {
                rc = cfg_error(err, key, "\"os/arch\" or \"os/arch/variant\", like linux/amd64");
                break;
            }
            free(st->platform);
            st->platform = strdup(pf);
        } else if (!strcmp(key, "docker_config")) {
            if (json_is_null(v))
                continue;
            const char *d = json_string_value(v);
            if (!d || d[0] != '/') {
                rc = cfg_error(err, key, "an absolute directory path (holding config.json)");
                break;
            }
            free(st->docker_config);
            st->docker_config = strdup(d);
        } else if (!strcmp(key, "pull_parallel")) {
            if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 32) {
                rc = cfg_error(err, key, "an integer from 1 to 32 (layers fetched at once)");
                break;
            }
            st->pull_parallel = (int)json_integer_value(v);
        } else if (!strcmp(key, "registry_mirrors") || !strcmp(key, "insecure_registries") ||
                   !strcmp(key, "registry_certs_dirs")) {
            if (json_is_null(v))
                continue;
            bool certs = !strcmp(key, "registry_certs_dirs");
            rc = parse_strv(v, key, certs, certs ? &st->certs_dirs
                                           : !strcmp(key, "registry_mirrors") ? &st->mirrors
                                                                              : &st->insecure,
                            err);
            if (rc < 0)
                break;
        } else if (sbx__linux_extras_key(&st->x, key, v, &rc, err)) {
            if (rc < 0)
                break;
        } else {
            rc = sbx__set_error(err, SBX_EINVAL,
                                "linux provider: unknown option '%s' (known: state_dir, shim, "
                                "agent, pids_limit, network, userns, userns_base, userns_slots, "
                                "seccomp, memory_cgroup, stop_grace_s, stop_timeout_s, "
                                "max_agent_connections, "
                                "nofile, max_image_bytes, max_download_bytes, transfer_idle_timeout_s, "
                                "cdi_spec_dirs, shell, image_store, pull, platform, "
                                "registry_mirrors, insecure_registries, registry_certs_dirs, "
                                "docker_config, pull_parallel, log_max_bytes, volumes, cap_add, "
                                "shm_size, volume_store, shared_root, pasta)",
                                key);
            break;
        }
    }
    if (st->pids < 0)
        st->pids = sbx__linux_default_pids(&st->host);
    if (rc == SBX_OK && (unsigned long long)st->userns_base +
                                (unsigned long long)st->userns_slots * 65536ull > 0xFFFFFFFFull)
        rc = sbx__set_error(err, SBX_EINVAL,
                            "linux provider: userns_base + userns_slots * 65536 must stay below "
                            "2^32 (every box takes a range of 65536 uids)");
    if (rc == SBX_OK)
        rc = check_userns_range(st->userns_base, st->userns_slots, err);
    if (rc == SBX_OK && !st->image_store)
        st->image_store = sbx__linux_image_store_default(st->state_dir);
    if (rc == SBX_OK)
        rc = sbx__linux_extras_init(&st->x, st->state_dir, err);
    if (rc == SBX_OK) {
        char *sd = sbx__linux_state_dir(st->state_dir);
        free(st->state_dir);
        st->state_dir = sd;
        st->pool = sbx__kit_agent_pool_new((int)st->max_conns);
        if (!st->state_dir || !st->pool)
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        else if (st->state_dir[0] != '/')
            rc = sbx__set_error(err, SBX_EINVAL,
                                "linux provider: the state directory '%s' (from SBX_STATE_DIR) "
                                "must be an absolute path",
                                st->state_dir);
    }
    if (rc < 0) {
        state_free(st);
        return rc;
    }
    /*
     * The helpers are looked up here, in the caller's thread, not by the
     * first create on the loop (stat, access and an ELF header read are
     * file I/O). One not found yet is looked up again at create, which then
     * says what is missing.
     */
    if (!st->shim)
        st->shim = sbx__kit_find_helper("sbx-shim", "SBX_SHIM");
    if (!st->agent)
        st->agent = sbx__kit_find_helper("sbx-agent", "SBX_AGENT");
    if (st->agent && st->agent_dynamic < 0)
        st->agent_dynamic = elf_dynamic(st->agent);
    st->registry = (sbx_pull_opts){.platform = st->platform,
                                   .mirrors = st->mirrors,
                                   .insecure = st->insecure,
                                   .certs_dirs = st->certs_dirs,
                                   .docker_config = st->docker_config,
                                   .parallel = st->pull_parallel};
    *state = st;
    return SBX_OK;
}

static void linux_release(void *state) { state_free(state); }

/* --- create --------------------------------------------------------------- */

struct create {
    sbx_op *op;
    struct linux_state *st;
    struct sbx__work *work; /* the image step on the context's pool, while queued or running */
    uv_poll_t poll;
    uv_timer_t timer;
    int handles; /* open uv handles still to close */
    bool poll_open;
    /* inputs, copied from the spec on the loop thread */
    char *image;
    char *pull; /* provider_options.pull, else the config's */
    char *hostname;
    int net; /* SBX_LINUX_NET_*; a box-to-box network is NONE plus `network` */
    json_t *egress, *dns; /* [nat] provider_options.egress and .dns, checked, or NULL */
    char *network; /* [netw] provider_options.network NAME: a box-to-box network, or NULL */
    bool userns;
    bool die_with_creator; /* provider_options.die_with_creator */
    long long pids;
    long long nofile_soft, nofile_hard; /* as asked for; hard 0: the default */
    double ready_timeout_s;
    long long gpu;  /* resources.gpu; 0: none */
    char *gpu_type; /* resources.gpu_type, or NULL */
    json_t *command;       /* provider_options.command: replaces the image's Cmd, or NULL */
    bool image_entrypoint; /* provider_options.image_entrypoint: run the image's Entrypoint+Cmd */
    json_t *publish; /* [endpoint] provider_options.publish, checked, or NULL */
    json_t *desc; /* the box description sent to the shim */
    json_t *volumes, *cap_add; /* [volumes] provider_options' own, parsed */
    long long shm_size;        /* [volumes] provider_options.shm_size; 0: the config's */
    /* outputs of the worker step */
    int code;
    sbx_error *err;
    /* the shim */
    int ctl;
    int create_lock;   /* [gcrace] held from before the shim starts until create_finish, or -1 */
    pid_t spawned;     /* the shim's first process until reaped, else 0 */
    pid_t shim_first;  /* its pid, for messages */
    int spawn_status;  /* its wait status, once reaped */
    bool spawn_reaped; /* ...and whether it was */
    bool reaping;      /* a worker waits for that status (eof_reap_work) */
    bool ready, connecting, aborted, eof;
    bool working; /* create_work queued or running: `c` must outlive it */
    bool reading; /* the record is being read on the pool (ready_work) */
    sbx_linux_record rec; /* what ready_work read */
    int rec_rc;
    sbx_error *rec_err;
    atomic_bool stop_work; /* a cancel: the worker's unpacking stops */
    struct linux_box *box;
    bool counted;        /* one of st->creates_in_flight */
    bool queued;         /* in st->creates_waiting */
    struct create *next; /* st->creates_waiting */
};

static double spec_num(int (*get)(const sbx_spec *, double *), const sbx_spec *s, double def)
{
    double v;
    return get(s, &v) ? v : def;
}

/* [gcrace] The create lock goes once the create has ended, whichever way. */
static void create_unlock(struct create *c)
{
    const char *id = json_string_value(json_object_get(c->desc, "id"));
    if (c->create_lock >= 0 && id)
        sbx__linux_create_unlock(c->st->state_dir, id, &c->create_lock);
}

static void create_free(struct create *c)
{
    create_unlock(c);
    json_decref(c->publish); /* [endpoint] */
    free(c->image);
    free(c->pull);
    free(c->hostname);
    free(c->network);
    free(c->gpu_type);
    json_decref(c->command);
    json_decref(c->desc);
    json_decref(c->volumes);
    json_decref(c->cap_add);
    json_decref(c->egress); /* [nat] */
    json_decref(c->dns);
    sbx_error_free(c->err);
    box_free(c->box);
    free(c);
}

static void maybe_free(struct create *c)
{
    /* An agent connect, a record read or a reap in flight still holds `c` as its callback data. */
    if (c->handles == 0 && !c->connecting && !c->reading && !c->reaping)
        create_free(c);
}

static void handle_closed(uv_handle_t *h)
{
    struct create *c = h->data;
    c->handles--;
    maybe_free(c);
}

static void create_begin(struct create *c);

/*
 * The create's place in flight goes to the next waiting one. Before the op
 * completes: its completion may free the provider's state.
 */
static void create_release(struct create *c)
{
    struct linux_state *st = c->st;
    if (!c->counted)
        return;
    c->counted = false;
    st->creates_in_flight--;
    /* A loop, not recursion: a create failing at its begin releases its place again. */
    if (st->creates_draining)
        return;
    st->creates_draining = true;
    while (st->creates_waiting && st->creates_in_flight < SBX_LINUX_CREATES_IN_FLIGHT) {
        struct create *n = st->creates_waiting;
        st->creates_waiting = n->next;
        if (!st->creates_waiting)
            st->creates_waiting_tail = NULL;
        n->next = NULL;
        n->queued = false;
        create_begin(n);
    }
    st->creates_draining = false;
}

/* Takes a waiting create out of the queue (a cancel before its turn). */
static void create_unqueue(struct create *c)
{
    struct linux_state *st = c->st;
    struct create **pp = &st->creates_waiting, *prev = NULL;
    while (*pp && *pp != c) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = c->next;
        if (st->creates_waiting_tail == c)
            st->creates_waiting_tail = prev;
    }
    c->next = NULL;
    c->queued = false;
}

/* Completes the op (once) and closes the create's handles. */
static void create_finish(struct create *c, int code, sbx_error *err)
{
    sbx_op_on_cancel(c->op, NULL, NULL);
    create_release(c);
    /*
     * Before the op completes (the provider's state may go with it): the box
     * is handed over or torn down, so gc may look at it from now on.
     */
    create_unlock(c);
    if (code == SBX_OK) {
        sbx_op_complete(c->op, SBX_OK, NULL, c->box);
    } else {
        if (err)
            sbx_error_prefix(err, "creating linux sandbox");
        /*
         * The box leaves the provider's pool before the op completes: its
         * completion may drop the last reference to the provider (the caller
         * frees it), and the pool goes with it.
         */
        box_free(c->box);
        sbx_op_complete(c->op, code, err, NULL);
    }
    c->box = NULL;
    c->op = NULL;
    if (c->poll_open) {
        uv_poll_stop(&c->poll);
        uv_close((uv_handle_t *)&c->poll, handle_closed);
        c->poll_open = false;
    }
    if (c->ctl >= 0) {
        close(c->ctl);
        c->ctl = -1;
    }
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, handle_closed);
}

/*
 * A failure after the shim started: tell it to abort (if it still listens)
 * and finish once it closes the socket, i.e. once everything is removed.
 */
static void create_fail(struct create *c, int code, sbx_error *err)
{
    if (c->err)
        sbx_error_free(err);
    else {
        c->err = err;
        c->code = code;
    }
    if (c->ctl < 0 || c->eof) {
        sbx_error *e = steal_pointer(&c->err);
        create_finish(c, c->code, e);
        return;
    }
    if (!c->aborted) {
        c->aborted = true;
        send(c->ctl, "abort", 5, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
}

static void reap_work(void *data)
{
    pid_t pid = (pid_t)(intptr_t)data;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Reaps the shim's first process if it has exited (keeping its status); false if it runs. */
static bool reap_now(struct create *c)
{
    if (c->spawned <= 0)
        return true;
    int status = 0, r;
    while ((r = waitpid(c->spawned, &status, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (r == 0)
        return false;
    if (r == c->spawned) {
        c->spawn_status = status;
        c->spawn_reaped = true;
    }
    c->spawned = 0;
    return true;
}

static void reap_spawned(struct create *c)
{
    /*
     * The shim's first process exits right after forking the real one, so
     * it is usually gone already; if not, a worker waits for it, not the loop.
     */
    pid_t pid = c->spawned;
    if (!reap_now(c)) {
        c->spawned = 0;
        if (sbx__context_submit(sbx__op_provider(c->op)->ctx, reap_work, NULL,
                                (void *)(intptr_t)pid, NULL) < 0)
            reap_work((void *)(intptr_t)pid); /* out of memory: wait here rather than leak */
    }
}

/*
 * The shim closed the control socket without a word: what is known of why.
 * Its first process's exit status, when that one died; else its detached
 * supervisor went without reporting (it reports every error and every stop
 * signal it gets), which only SIGKILL or a crash does. Its stderr is not
 * kept unless SBX_SHIM_STDERR says so: the message says where it went.
 */
static sbx_error *shim_gone_error(const struct create *c)
{
    int first = (int)c->shim_first;
    char what[256];
    int st = c->spawn_status;
    if (c->spawn_reaped && WIFSIGNALED(st))
        snprintf(what, sizeof(what), "sbx-shim (pid %d) was killed by signal %d (SIG%s)",
                 first, WTERMSIG(st),
                 sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
    else if (c->spawn_reaped && WIFEXITED(st) && WEXITSTATUS(st) != 0)
        snprintf(what, sizeof(what), "sbx-shim (pid %d) exited with status %d", first,
                 WEXITSTATUS(st));
    else
        snprintf(what, sizeof(what),
                 "the box's supervisor (the process sbx-shim detached) ended without reporting "
                 "why, which only SIGKILL (an OOM kill, kill -9) or a crash does; the kernel "
                 "log (dmesg) names an OOM kill or a crash");
    /* spawn_shim leaves the shim this process's stderr when the variable is set at all. */
    const char *err_went = getenv("SBX_SHIM_STDERR")
                               ? "its stderr is this process's (SBX_SHIM_STDERR)"
                               : "its stderr was discarded (set SBX_SHIM_STDERR=1 to get it on "
                                 "this process's stderr)";
    return sbx_error_new(SBX_ECREATE, "%s before the box was ready; %s", what, err_went);
}

/* Worker: the shim's first process closed the socket and is exiting: its status. */
static void eof_reap_work(void *data)
{
    struct create *c = data;
    int status = 0;
    pid_t r;
    while ((r = waitpid(c->spawned, &status, 0)) < 0 && errno == EINTR)
        ;
    if (r == c->spawned) {
        c->spawn_status = status;
        c->spawn_reaped = true;
    }
}

static void eof_reap_done(void *data, bool cancelled)
{
    struct create *c = data;
    c->reaping = false;
    if (cancelled) /* never ran (the context is closing): the process is exiting, wait here */
        eof_reap_work(c);
    c->spawned = 0;
    /* A cancel or the timeout meanwhile finished the create (the EOF was seen: at once). */
    if (!c->op) {
        maybe_free(c);
        return;
    }
    create_finish(c, SBX_ECREATE, shim_gone_error(c));
}

static void on_agent(sbx_agent_conn *conn, int code, sbx_error *err, void *data)
{
    struct create *c = data;
    c->connecting = false;
    if (!c->op) { /* finished meanwhile (cancel, shim gone) */
        if (conn)
            sbx__agent_close(conn);
        sbx_error_free(err);
        maybe_free(c);
        return;
    }
    if (code < 0 || !conn) {
        /* A listener that is not the box's init (SBX_EPERM) is not a slow agent: say which. */
        const char *why = code == SBX_EPERM ? "the box's agent socket"
                                            : "the box was not ready (ready_timeout_s): its "
                                              "agent did not say hello";
        sbx_error *e = err ? sbx_error_prefix(err, "%s", why)
                           : sbx_error_new(SBX_EVERIFY, "%s", why);
        create_fail(c, code == SBX_EPERM ? SBX_EPERM : SBX_EVERIFY, e);
        return;
    }
    sbx_error_free(err);
    sbx__kit_agent_put(&c->box->agent, conn);
    /* The ack hands the box over; from here on the shim keeps it until a stop or the TTL. */
    if (send(c->ctl, "ack", 3, MSG_NOSIGNAL) != 3) {
        create_fail(c, SBX_EVERIFY,
                    sbx_error_new(SBX_EVERIFY, "the box's shim went away during the handover"));
        return;
    }
    /* die_with_creator: the box keeps the socket; create_finish must not close it. */
    if (c->die_with_creator) {
        c->box->ctl = c->ctl;
        c->ctl = -1;
    }
    create_finish(c, SBX_OK, NULL);
}

static int parse_shim_error(const char *msg, sbx_error **out)
{
    int code = SBX_ECREATE;
    const char *text = msg;
    char *end;
    long v = strtol(msg, &end, 10);
    if (end != msg && v < 0 && v > -100) {
        code = (int)v;
        text = *end == ' ' ? end + 1 : end;
    }
    *out = sbx_error_new(code, "%s", text);
    return code;
}

/* Worker: the record the shim wrote when it said ready. */
static void ready_work(void *data)
{
    struct create *c = data;
    /* From the description, not c->box: a finish on the loop may free the box meanwhile. */
    const char *box_dir = json_string_value(json_object_get(c->desc, "box_dir"));
    c->rec_rc = sbx__linux_record_read(box_dir, &c->rec, &c->rec_err);
}

static void ready_done(void *data, bool cancelled)
{
    struct create *c = data;
    c->reading = false;
    int rr = cancelled ? SBX_ECANCELED : c->rec_rc;
    sbx_linux_record rec = c->rec;
    sbx_error *re = steal_pointer(&c->rec_err);
    memset(&c->rec, 0, sizeof(c->rec));
    if (!c->op || c->aborted) { /* finished meanwhile (cancel, shim gone, timeout) */
        if (rr == 0)
            sbx__linux_record_free(&rec);
        sbx_error_free(re);
        maybe_free(c);
        return;
    }
    /*
     * The record the shim wrote: its pid (for stop), cgroups (for OOM
     * accounting), and the box's init, the only process we accept at the
     * other end of the agent's socket.
     */
    if (rr < 0 || rec.init_pid <= 0) {
        if (rr == 0)
            sbx__linux_record_free(&rec);
        create_fail(c, SBX_ECREATE,
                    re ? sbx_error_prefix(re, "the box's shim said ready")
                       : sbx_error_new(SBX_ECREATE, "the box's record names no init pid"));
        return;
    }
    sbx_error_free(re);
    c->box->cgroups = json_incref(rec.cgroups);
    c->box->shim_pid = rec.shim_pid;
    c->box->shim_start = rec.shim_start;
    c->box->agent.peer_pid = rec.init_pid;
    sbx__linux_record_free(&rec);
    c->connecting = true;
    int rc = sbx__agent_connect_peer(sbx_op_loop(c->op), c->box->socket, c->box->agent.peer_pid,
                                     false, c->ready_timeout_s, on_agent, c);
    if (rc < 0) {
        c->connecting = false;
        create_fail(c, SBX_EVERIFY,
                    sbx_error_new(SBX_EVERIFY, "cannot connect to the box's agent at %s",
                                  c->box->socket));
    }
}

static void on_ctl(uv_poll_t *p, int status, int events)
{
    (void)events;
    struct create *c = p->data;
    char buf[2048];
    ssize_t n = status < 0 ? -1 : recv(c->ctl, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR) && status >= 0)
        return;
    if (n <= 0) {
        /* EOF: the shim is done with us; after a failure, everything is removed. */
        c->eof = true;
        uv_poll_stop(p);
        if (c->err) {
            reap_spawned(c);
            sbx_error *e = steal_pointer(&c->err);
            create_finish(c, c->code, e);
            return;
        }
        /*
         * Gone without a word. Its first process, if it is the one that
         * died, has closed its end and is exiting but may not be reapable
         * yet: its status is waited for on the pool, not guessed.
         */
        if (!reap_now(c)) {
            c->reaping = true;
            if (sbx__context_submit(sbx__op_provider(c->op)->ctx, eof_reap_work, eof_reap_done,
                                    c, NULL) == 0)
                return;
            c->reaping = false;
            reap_spawned(c);
        }
        create_finish(c, SBX_ECREATE, shim_gone_error(c));
        return;
    }
    reap_spawned(c);
    buf[n] = 0;
    if (!strncmp(buf, "error ", 6)) {
        sbx_error *e = NULL;
        int code = parse_shim_error(buf + 6, &e);
        create_fail(c, code, e); /* waits for the EOF */
        return;
    }
    if (!strcmp(buf, "ready") && !c->ready && !c->aborted) {
        c->ready = true;
        /* The record is a file: read on the pool, the handover continues in ready_done. */
        c->reading = true;
        if (sbx__context_submit(sbx__op_provider(c->op)->ctx, ready_work, ready_done, c, NULL) < 0) {
            c->reading = false;
            create_fail(c, SBX_ECREATE, sbx_error_new(SBX_ENOMEM, "out of memory"));
        }
    }
}

static void on_timeout(uv_timer_t *t)
{
    struct create *c = t->data;
    if (!c->aborted) {
        char tb[32];
        sbx__fmt_g(c->ready_timeout_s, tb, sizeof(tb));
        create_fail(c, SBX_EVERIFY,
                    sbx_error_new(SBX_EVERIFY,
                                  "the box was not ready within %ss (ready_timeout_s); it was "
                                  "torn down",
                                  tb));
        /* Give the shim a few seconds to clean up, then stop waiting for it. */
        uv_timer_start(&c->timer, on_timeout, 5000, 0);
        return;
    }
    /* The shim did not answer the abort: finish anyway; gc removes what is left. */
    c->eof = true;
    sbx_error *e = steal_pointer(&c->err);
    create_finish(c, c->code ? c->code : SBX_EVERIFY, e);
}

static void on_cancel_create(sbx_op *op, void *data)
{
    (void)op;
    struct create *c = data;
    if (c->queued) {
        create_unqueue(c);
        create_finish(c, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "create cancelled"));
        return;
    }
    /* The worker still uses `c`: create_work_done sees the cancel and finishes. */
    if (c->working) {
        atomic_store(&c->stop_work, true);
        sbx__work_cancel(c->work);
        return;
    }
    create_fail(c, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "create cancelled"));
}

static bool create_cancelled(void *data)
{
    return atomic_load(&((struct create *)data)->stop_work);
}

/*
 * A pull the create makes reports on the create's op (the start's future:
 * `sbx run` draws it); "layers" is a count for the image calls, not a bar.
 */
static void create_progress(const char *stage, uint64_t done, uint64_t total, void *data)
{
    struct create *c = data;
    if (strcmp(stage, "layers") != 0)
        sbx_op_progress(c->op, stage, done, total);
}

/* Whether the "K=V" list `env` sets the key of `kv`. */
static bool env_has(const json_t *env, const char *kv)
{
    size_t klen = strcspn(kv, "=");
    size_t i;
    json_t *v;
    json_array_foreach(env, i, v)
    {
        const char *s = json_string_value(v);
        if (s && !strncmp(s, kv, klen) && s[klen] == '=')
            return true;
    }
    return false;
}

/*
 * Puts the "K=V" strings of `entries` that the spec's env does not set
 * (nor an earlier entry) under it: first in the box's base environment and
 * before the spec's entries in the description, so the spec wins per name.
 * CDI devices' env and the image config's Env come in this way.
 */
static int env_under(struct create *c, json_t *entries, sbx_error **err)
{
    json_t *env = json_object_get(c->desc, "env");
    _cleanup_json_ json_t *added = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(entries, i, v)
    {
        if (!env_has(env, json_string_value(v)) && !env_has(added, json_string_value(v)))
            json_array_append(added, v);
    }
    if (!added)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!json_array_size(added))
        return SBX_OK;
    size_t n_base = 0;
    while (c->box->base_env[n_base])
        n_base++;
    char **be = calloc(n_base + json_array_size(added) + 1, sizeof(char *));
    if (!be)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    size_t k = 0;
    json_array_foreach(added, i, v) be[k++] = strdup(json_string_value(v));
    for (size_t j = 0; j < n_base; j++)
        be[k++] = c->box->base_env[j];
    free(c->box->base_env);
    c->box->base_env = be;
    json_array_extend(added, env);
    json_object_set(c->desc, "env", added);
    for (size_t j = 0; j < k; j++)
        if (!be[j])
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}

/*
 * Worker thread: the CDI edits for resources.gpu (src/providers/linux/cdi.c),
 * into the box description (the shim binds the device nodes and mounts) and
 * the box's environment. The spec's own env wins over a CDI variable of the
 * same name: it is what the caller asked for by name.
 */
static int add_gpus(struct create *c, sbx_error **err)
{
    json_t *edits = NULL;
    sbx_error *ce = NULL;
    int rc = sbx__cdi_resolve((const char *const *)c->st->cdi_dirs, c->gpu, c->gpu_type, &edits,
                              &ce);
    if (rc < 0) {
        /* A spec file not to be believed fails the create as a create (SandboxCreateError). */
        if (rc != SBX_ENOMEM && rc != SBX_ECREATE) {
            rc = sbx__set_error(err, SBX_ECREATE, "%s", sbx_error_message(ce));
            sbx_error_free(ce);
            return rc;
        }
        return sbx__fail(err, ce);
    }
    rc = env_under(c, json_object_get(edits, "env"), err);
    if (rc < 0) {
        json_decref(edits);
        return rc;
    }
    json_object_del(edits, "env");
    json_object_set_new(c->desc, "cdi", edits);
    return SBX_OK;
}

/* Appends the strings of the array `from` to the array `to`. */
static void extend_strings(json_t *to, json_t *from)
{
    size_t i;
    json_t *v;
    json_array_foreach(from, i, v)
    {
        if (json_is_string(v))
            json_array_append(to, v);
    }
}

/*
 * Worker thread: the image's config (checked at import, image.c) applied
 * as Docker applies it:
 *   Env         under the spec's env: a name the spec sets keeps the spec's
 *               value; an image PATH replaces the box's default PATH.
 *   WorkingDir  unless the spec sets a workdir; made in the box if missing.
 *   User        the default user of execs and of the entrypoint, unless an
 *               exec names one (resolved in the box's /etc/passwd by the agent).
 *   Entrypoint, Cmd
 *               the box's service, as `docker run` would start it, when the
 *               box asks for one: spec.entrypoint replaces Entrypoint and
 *               drops Cmd; provider_options.command replaces Cmd;
 *               provider_options.image_entrypoint: true runs the image's
 *               own. Without any of them no service runs, as before (the
 *               reference's container providers keep a box alive with their
 *               own keepalive, not the image's command).
 */
static int apply_image_config(struct create *c, sbx_error **err)
{
    _cleanup_json_ json_t *cfg =
        sbx__linux_image_config(c->st->state_dir, c->st->image_store, c->image);
    json_t *spec_ep = json_object_get(c->desc, "entrypoint");
    bool has_spec_ep = json_is_array(spec_ep) && json_array_size(spec_ep) > 0;
    /* The service's command line. */
    if (has_spec_ep && c->command) {
        extend_strings(spec_ep, c->command);
    } else if (!has_spec_ep && (c->image_entrypoint || c->command)) {
        _cleanup_json_ json_t *ep = json_array();
        if (!ep)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        extend_strings(ep, json_object_get(cfg, "Entrypoint"));
        extend_strings(ep, c->command ? c->command : json_object_get(cfg, "Cmd"));
        if (!json_array_size(ep))
            return sbx__set_error(err, SBX_ECREATE,
                                  "provider_options.image_entrypoint: image %s has no Entrypoint "
                                  "or Cmd to run; give spec.entrypoint or "
                                  "provider_options.command",
                                  c->image ? c->image : "none");
        json_object_set(c->desc, "entrypoint", ep);
    }
    if (!cfg)
        return SBX_OK;
    const char *wd = json_string_value(json_object_get(cfg, "WorkingDir"));
    const char *spec_wd = json_string_value(json_object_get(c->desc, "workdir"));
    if (wd && *wd && !(spec_wd && *spec_wd)) {
        char *w = strdup(wd);
        if (!w)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        free(c->box->workdir);
        c->box->workdir = w;
        json_object_set_new(c->desc, "workdir", json_string(wd));
    }
    const char *user = json_string_value(json_object_get(cfg, "User"));
    if (user && *user)
        json_object_set_new(c->desc, "user", json_string(user));
    /* Env: the image's entries the spec does not set, then the spec's (as add_gpus does). */
    return env_under(c, json_object_get(cfg, "Env"), err);
}

/* Worker thread: resolve (maybe unpack) the image. */
static void create_work(void *data)
{
    struct create *c = data;
    /*
     * The state directory and boxes/ are made 0700 and checked (ours, nobody
     * else can write them) before anything (an image, a box record) goes
     * there.
     */
    _cleanup_free_ char *boxes = sbx__printf("%s/boxes", c->st->state_dir);
    if (!boxes) {
        c->code = sbx__set_error(&c->err, SBX_ENOMEM, "out of memory");
        return;
    }
    if ((c->code = sbx__private_dir(c->st->state_dir, true, NULL, &c->err)) < 0 ||
        (c->code = sbx__private_dir(boxes, true, NULL, &c->err)) < 0)
        return;
    _cleanup_free_ char *rootfs = NULL;
    bool none = false;
    /* A cancelled create stops an unpack in progress (a big or endless source). */
    sbx_linux_image_opts io = { .data = c, .cancelled = create_cancelled,
                                .progress = create_progress,
                                .max_bytes = c->st->max_image_bytes,
                                .pull = c->pull ? c->pull : c->st->pull,
                                .registry = &c->st->registry };
    json_t *lowers = NULL;
    c->code = sbx__linux_image_resolve(c->st->state_dir, c->st->image_store, c->image, &io,
                                       &rootfs, &lowers, &none, &c->err);
    if (lowers)
        json_object_set_new(c->desc, "lowers", lowers);
    if (c->code < 0)
        return;
    json_object_set_new(c->desc, "lower", json_string(rootfs));
    json_object_set_new(c->desc, "none_image", json_boolean(none));
    if ((c->code = apply_image_config(c, &c->err)) < 0)
        return;
    if (c->gpu > 0 && (c->code = add_gpus(c, &c->err)) < 0)
        return;
    /* [volumes] host paths checked, named volumes made (file I/O: here, on the worker). */
    if (json_array_size(json_object_get(c->desc, "volumes")) > 0 &&
        (c->code = sbx__linux_volumes_resolve(c->st->state_dir, &c->st->x,
                                              json_object_get(c->desc, "volumes"), &c->err)) < 0)
        return;
    /* [netw] The network must exist: the shim joins it (networks.c). */
    if (c->network && (c->code = sbx__linux_net_check(c->st->state_dir, c->network, &c->err)) < 0)
        return;
    /*
     * [gcrace] The create lock, last and before the shim exists: from here
     * until create_finish a gc leaves the box alone, whatever it finds of it
     * (a shim whose directory is not made yet, a directory without a record).
     */
    int lock = sbx__linux_create_lock(c->st->state_dir,
                                      json_string_value(json_object_get(c->desc, "id")), &c->err);
    if (lock < 0)
        c->code = lock;
    else
        c->create_lock = lock;
}

static int spawn_shim(struct create *c, int child_end)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    /* fd 3 is the control socket; everything else the shim has is /dev/null. */
    posix_spawn_file_actions_adddup2(&fa, child_end, 3);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (!getenv("SBX_SHIM_STDERR"))
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    /*
     * A clean signal state: the application may block or ignore signals the
     * shim needs. Only the stop signals start blocked: one that arrives
     * before the shim can act on it (a gc, a kill) waits for it, and the
     * shim reports it (who sent it) instead of dying without a word.
     */
    sigset_t stops, all;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGHUP);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &stops);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const char *box_dir = json_string_value(json_object_get(c->desc, "box_dir"));
    char a0[] = "sbx-shim", a1[] = "--box-dir";
    static char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
    char *const argv[] = { a0, a1, (char *)box_dir, NULL };
    /* The cgroup level's name (cgroup.c): the shim makes the box's groups under it. */
    char cg_env[32 + SBX_LINUX_CGROUP_NAME_MAX];
    snprintf(cg_env, sizeof(cg_env), "SBX_LINUX_CGROUP=%s", sbx__cg_name());
    char *const envp[] = { path_env, cg_env, NULL };
    int rc = posix_spawn(&c->spawned, c->st->shim, &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    c->shim_first = rc == 0 ? c->spawned : 0;
    return -rc;
}

static void create_work_done(void *data, bool cancelled)
{
    struct create *c = data;
    c->working = false;
    c->work = NULL;
    if (cancelled || sbx_op_cancelled(c->op)) {
        create_finish(c, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "create cancelled"));
        return;
    }
    if (c->code < 0) {
        sbx_error *e = steal_pointer(&c->err);
        create_finish(c, c->code, e);
        return;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        create_finish(c, SBX_ECREATE,
                      sbx_error_new_errno(SBX_ECREATE, errno, "socketpair for sbx-shim"));
        return;
    }
    _cleanup_free_ char *text = json_dumps(c->desc, JSON_COMPACT);
    int rc = text ? spawn_shim(c, sv[1]) : -ENOMEM;
    close(sv[1]);
    if (rc < 0) {
        close(sv[0]);
        char hint[256];
        sbx__linux_pid_hint(-rc, hint, sizeof(hint));
        create_finish(c, SBX_ECREATE,
                      sbx_error_new_errno(SBX_ECREATE, -rc, "cannot run %s%s", c->st->shim, hint));
        return;
    }
    c->ctl = sv[0];
    /*
     * The description is one datagram, as large as the spec makes it (a big
     * env): the send buffer must hold it whole. SO_SNDBUFFORCE passes the
     * wmem_max cap when we may (root); otherwise SO_SNDBUF does what it can.
     */
    size_t len = strlen(text);
    int sndbuf = len + 4096 < INT_MAX / 2 ? (int)(len + 4096) : INT_MAX / 2;
    if (setsockopt(c->ctl, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
        (void)setsockopt(c->ctl, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    if (send(c->ctl, text, len, MSG_NOSIGNAL) < 0) {
        int e = errno;
        /* Closed first: the shim waits for its description and sees EOF, then exits. */
        close(c->ctl);
        c->ctl = -1;
        c->eof = true;
        reap_spawned(c);
        create_finish(c, SBX_ECREATE,
                      e == EMSGSIZE
                          ? sbx_error_new(SBX_ECREATE,
                                          "the box's description (%zu bytes, mostly its env and "
                                          "metadata) is too large to hand to sbx-shim; make the "
                                          "env smaller or pass data in files",
                                          len)
                          : sbx_error_new_errno(SBX_ECREATE, e, "cannot talk to sbx-shim"));
        return;
    }
    uv_poll_init(sbx_op_loop(c->op), &c->poll, c->ctl);
    c->poll.data = c;
    c->handles++;
    c->poll_open = true;
    uv_poll_start(&c->poll, UV_READABLE | UV_DISCONNECT, on_ctl);
    /* The shim enforces ready_timeout_s; ours adds slack for the hello. */
    uv_timer_start(&c->timer, on_timeout, (uint64_t)(c->ready_timeout_s * 1000) + 2000, 0);
}

static char **env_strv(const sbx_spec *spec)
{
    size_t n = sbx_spec_env_count(spec);
    char **v = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; v && i < n; i++) {
        const char *k, *val;
        sbx_spec_env_at(spec, i, &k, &val);
        v[i] = sbx__printf("%s=%s", k, val);
        if (!v[i]) {
            sbx_strv_free(v);
            return NULL;
        }
    }
    return v;
}

/*
 * [endpoint] provider_options.publish: [{"port": P, "host_port": H, "host_ip": A}],
 * P one of spec.ports, H 0..65535 (0: any free port), A an address literal
 * (default 127.0.0.1). Each declared port gets a listener; these fix where.
 */
static int check_publish(const sbx_spec *spec, const json_t *v, sbx_error **err)
{
    if (!json_is_array(v) || json_array_size(v) > 64)
        return sbx__set_error(err, SBX_EINVAL,
                              "provider_options.publish must be a list of at most 64 "
                              "{\"port\", \"host_port\", \"host_ip\"} objects");
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        json_t *port = json_object_get(e, "port"), *hp = json_object_get(e, "host_port");
        json_t *ip = json_object_get(e, "host_ip");
        bool declared = false;
        for (size_t k = 0; json_is_integer(port) && k < sbx_spec_port_count(spec); k++)
            declared |= sbx_spec_port_at(spec, k) == json_integer_value(port);
        if (!json_is_object(e) || !json_is_integer(port) || (hp && !json_is_integer(hp)) ||
            (hp && (json_integer_value(hp) < 0 || json_integer_value(hp) > 65535)) ||
            (ip && !json_is_string(ip)))
            return sbx__set_error(err, SBX_EINVAL,
                                  "provider_options.publish[%zu] must be {\"port\": a declared "
                                  "port, \"host_port\": 0..65535, \"host_ip\": an address}",
                                  i);
        if (!declared)
            return sbx__set_error(err, SBX_EINVAL,
                                  "provider_options.publish[%zu]: port %lld is not in the spec's "
                                  "ports; declare it there too",
                                  i, (long long)json_integer_value(port));
    }
    return SBX_OK;
}

/* [endpoint] The description's "ports": a listener per declared port, where publish says. */
static json_t *ports_desc(const sbx_spec *spec, const json_t *publish)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < sbx_spec_port_count(spec); i++) {
        int port = sbx_spec_port_at(spec, i);
        json_int_t hp = 0;
        const char *ip = "127.0.0.1";
        size_t k;
        json_t *e;
        json_array_foreach(publish, k, e)
        {
            if (json_integer_value(json_object_get(e, "port")) != port)
                continue;
            hp = json_integer_value(json_object_get(e, "host_port"));
            if (json_is_string(json_object_get(e, "host_ip")))
                ip = json_string_value(json_object_get(e, "host_ip"));
        }
        json_array_append_new(a, json_pack("{s:i, s:I, s:s}", "port", port, "host_port", hp,
                                           "host_ip", ip));
    }
    return a;
}

/* [nat] provider_options.dns: the upstream resolvers of pasta's DNS forwarder. */
static int check_dns(const json_t *v, sbx_error **err)
{
    bool ok = json_is_array(v) && json_array_size(v) >= 1 && json_array_size(v) <= 3;
    size_t i;
    json_t *a;
    struct in_addr in;
    json_array_foreach(v, i, a) ok = ok && json_is_string(a) &&
                                     inet_pton(AF_INET, json_string_value(a), &in) == 1;
    if (!ok)
        return sbx__set_error(err, SBX_EINVAL,
                              "provider_options.dns must be a list of 1 to 3 IPv4 addresses of "
                              "name servers, like [\"192.0.2.53\"]");
    return SBX_OK;
}

/* An executable named `name` in PATH, or NULL. */
static char *find_in_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        char *cand = sbx__printf("%.*s/%s", (int)n, path, name);
        if (cand && n > 0 && path[0] == '/' && access(cand, X_OK) == 0)
            return cand;
        free(cand);
        path += n;
        if (*path == ':')
            path++;
    }
    return NULL;
}

/*
 * [nat] The description's network part: "net", and for nat the helpers the
 * shim runs (pasta, sbx-nft) and the policy. Options that only nat uses are
 * refused without it rather than ignored: a policy that does nothing must
 * not look like one that holds.
 */
static int nat_desc(struct linux_state *st, struct create *c, sbx_error **err)
{
    static const char *const names[] = { "none", "host", "nat" };
    json_object_set_new(c->desc, "net", json_string(names[c->net]));
    if (c->network) {
        /* [netw] The shim filters the box's bridge port through sbx-nft. */
        _cleanup_free_ char *nft = sbx__kit_find_helper("sbx-nft", "SBX_NFT");
        if (!nft)
            return sbx__set_error(err, SBX_ECREATE,
                                  "a box on a network needs the sbx-nft helper (set SBX_NFT, or "
                                  "install sbx)");
        json_object_set_new(c->desc, "nft", json_string(nft));
    }
    if (c->net != SBX_LINUX_NET_NAT) {
        if (c->egress || c->dns)
            return sbx__set_error(err, SBX_EINVAL,
                                  "provider_options.%s needs network \"nat\" (the box's network "
                                  "is \"%s\")",
                                  c->egress ? "egress" : "dns", names[c->net]);
        return SBX_OK;
    }
    _cleanup_free_ char *pasta = st->pasta ? strdup(st->pasta) : find_in_path("pasta");
    if (!pasta)
        return sbx__set_error(err, SBX_ECREATE,
                              "network \"nat\" needs pasta, which is not in PATH: install the "
                              "passt package (apt-get install passt), or set the provider's "
                              "pasta option");
    _cleanup_free_ char *nft = sbx__kit_find_helper("sbx-nft", "SBX_NFT");
    if (!nft)
        return sbx__set_error(err, SBX_ECREATE,
                              "network \"nat\" needs the sbx-nft helper (set SBX_NFT, or install "
                              "sbx)");
    json_object_set_new(c->desc, "pasta", json_string(pasta));
    json_object_set_new(c->desc, "nft", json_string(nft));
    if (c->egress)
        json_object_set(c->desc, "egress", c->egress);
    if (c->dns)
        json_object_set(c->desc, "dns", c->dns);
    return SBX_OK;
}

/* provider_options: hostname, network, userns, pids_limit, nofile, die_with_creator. */
static int read_options(const sbx_spec *spec, struct create *c, sbx_error **err)
{
    json_error_t je;
    _cleanup_json_ json_t *o = json_loads(sbx_spec_provider_options(spec), 0, &je);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (!strcmp(key, "hostname")) {
            const char *h = json_string_value(v);
            /*
             * RFC 1123 names, as Docker accepts: the name also goes into the
             * box's /etc/hosts and /etc/hostname, where a space or a newline
             * would forge entries.
             */
            if (!h || !*h || strlen(h) > 64 || h[0] == '-' || h[0] == '.' ||
                strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") !=
                    strlen(h))
                return sbx__set_error(err, SBX_EINVAL,
                                      "provider_options.hostname must be 1-64 letters, digits, "
                                      "'-' and '.', not starting with '-' or '.' (got %s%s%s)",
                                      h ? "'" : "", h ? h : "a non-string", h ? "'" : "");
            free(c->hostname);
            c->hostname = strdup(h);
        } else if (!strcmp(key, "network")) {
            const char *s = json_string_value(v);
            free(c->network);
            c->network = NULL;
            if (net_mode(s) >= 0) {
                c->net = net_mode(s);
            } else if (sbx__linux_net_name_ok(s)) {
                /* [netw] A box-to-box network: the box's own namespace, a veth into it. */
                c->net = SBX_LINUX_NET_NONE;
                if (!(c->network = strdup(s)))
                    return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            } else {
                return sbx__set_error(err, SBX_EINVAL,
                                      "provider_options.network must be \"none\", \"host\", "
                                      "\"nat\" or the name of a network (sbx network create "
                                      "NAME) (got %s%.64s%s)",
                                      s ? "'" : "", s ? s : "a non-string", s ? "'" : "");
            }
        } else if (!strcmp(key, "egress")) {
            /* [nat] docs/networking.md: checked here for the user's error, again by the shim. */
            struct sbx_egress *eg = malloc(sizeof(*eg));
            char why[512];
            int bad = !eg ? -2 : sbx__egress_parse(v, eg, why, sizeof(why));
            free(eg);
            if (bad == -2)
                return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            if (bad < 0)
                return sbx__set_error(err, SBX_EINVAL, "provider_options.%s", why);
            json_decref(c->egress);
            c->egress = json_incref(v);
        } else if (!strcmp(key, "dns")) {
            if (check_dns(v, err) < 0)
                return SBX_EINVAL;
            json_decref(c->dns);
            c->dns = json_incref(v);
        } else if (!strcmp(key, "userns")) {
            if (!json_is_boolean(v))
                return sbx__set_error(err, SBX_EINVAL, "provider_options.userns must be a bool");
            c->userns = json_is_true(v);
        } else if (!strcmp(key, "die_with_creator")) {
            if (!json_is_boolean(v))
                return sbx__set_error(err, SBX_EINVAL,
                                      "provider_options.die_with_creator must be a bool");
            c->die_with_creator = json_is_true(v);
        } else if (!strcmp(key, "pids_limit")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return sbx__set_error(err, SBX_EINVAL,
                                      "provider_options.pids_limit must be an integer >= 0");
            c->pids = json_integer_value(v);
        } else if (!strcmp(key, "nofile")) {
            if (!parse_nofile(v, &c->nofile_soft, &c->nofile_hard))
                return sbx__set_error(err, SBX_EINVAL, "provider_options.nofile must be " NOFILE_WANT);
        } else if (!strcmp(key, "image_entrypoint")) {
            if (!json_is_boolean(v))
                return sbx__set_error(err, SBX_EINVAL,
                                      "provider_options.image_entrypoint must be a bool");
            c->image_entrypoint = json_is_true(v);
        } else if (!strcmp(key, "command")) {
            /* Docker's COMMAND: replaces the image's Cmd (see apply_image_config). */
            bool ok = json_is_array(v) && json_array_size(v) > 0 && json_array_size(v) <= 4096;
            size_t i;
            json_t *a;
            json_array_foreach(v, i, a) ok = ok && json_is_string(a);
            if (!ok)
                return sbx__set_error(err, SBX_EINVAL,
                                      "provider_options.command must be a non-empty list of "
                                      "strings");
            json_decref(c->command);
            c->command = json_incref(v);
        } else if (!strcmp(key, "pull")) {
            if (!pull_policy_ok(json_string_value(v)))
                return sbx__set_error(err, SBX_EINVAL,
                                      "provider_options.pull must be \"missing\", \"always\" or "
                                      "\"never\"");
            free(c->pull);
            c->pull = strdup(json_string_value(v));
        } else if (!strcmp(key, "volumes") || !strcmp(key, "cap_add") ||
                   !strcmp(key, "shm_size")) {
            /* [volumes] docs/volumes.md; NET_ADMIN is checked against the network at create. */
            int rc = sbx__linux_box_extras_option(key, v, &c->volumes, &c->cap_add, &c->shm_size,
                                                  err);
            if (rc < 0)
                return rc;
        } else if (!strcmp(key, "publish")) {
            /* [endpoint] Fixed host listeners for declared ports (docs/networking.md). */
            if (check_publish(spec, v, err) < 0)
                return SBX_EINVAL;
            json_decref(c->publish);
            c->publish = json_incref(v);
        }
        /* Other keys belong to other providers: ignored, as the reference does. */
    }
    return SBX_OK;
}

static void linux_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    struct linux_state *st = state;
    struct create *c = calloc(1, sizeof(*c));
    sbx_error *e = NULL;
    if (!c) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    c->op = op;
    c->st = st;
    c->ctl = -1;
    c->create_lock = -1;
    c->net = st->net;
    c->userns = st->userns;
    c->pids = st->pids;
    c->nofile_soft = st->nofile_soft;
    c->nofile_hard = st->nofile_hard;
    /* GPUs come from CDI specs, read on the worker (create_work -> add_gpus). */
    if (!sbx_spec_get_gpu(spec, &c->gpu) || c->gpu < 0)
        c->gpu = 0;
    c->gpu_type = sbx__strdup0(sbx_spec_gpu_type(spec));
    /*
     * A quota above the machine's CPUs cannot be enforced (cgroup v2 accepts
     * it silently, v1 refuses it late): say the allowed range up front, as
     * `docker run --cpus` does.
     */
    double cpu_req;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (sbx_spec_get_cpu(spec, &cpu_req) &&
        (!(cpu_req >= 0.01) || (ncpu > 0 && cpu_req > (double)ncpu))) {
        e = sbx_error_new(SBX_ECREATE,
                          "resources.cpu %g is out of range: the range of CPUs is from 0.01 to "
                          "%ld.00, as there are only %ld CPUs available",
                          cpu_req, ncpu > 0 ? ncpu : 1, ncpu > 0 ? ncpu : 1);
        goto fail;
    }
    if (!st->shim && !(st->shim = sbx__kit_find_helper("sbx-shim", "SBX_SHIM"))) {
        e = sbx_error_new(SBX_ECREATE, "cannot find the sbx-shim binary (set SBX_SHIM or the "
                                       "provider's shim option, or install sbx)");
        goto fail;
    }
    if (!st->agent && !(st->agent = sbx__kit_find_helper("sbx-agent", "SBX_AGENT"))) {
        e = sbx_error_new(SBX_ECREATE, "cannot find the sbx-agent binary (set SBX_AGENT or the "
                                       "provider's agent option, or install sbx)");
        goto fail;
    }
    if (st->agent_dynamic < 0)
        st->agent_dynamic = elf_dynamic(st->agent);
    const char *img = sbx_spec_image(spec);
    if (st->agent_dynamic == 1 && img && *img && strcmp(img, "none") != 0) {
        /* Only the "none" image carries the host's libraries the agent would need. */
        e = sbx_error_new(SBX_ECREATE,
                          "the agent %s is dynamically linked (a sanitizer build?); boxes from "
                          "images need a static sbx-agent (set SBX_AGENT or the agent option)",
                          st->agent);
        goto fail;
    }
    char hex[13];
    sbx__random_hex(hex, 6);
    c->box = calloc(1, sizeof(*c->box));
    if (c->box)
        c->box->ctl = -1;
    c->image = sbx__strdup0(sbx_spec_image(spec));
    if (!c->box || !(c->box->id = sbx__printf("sbx-%s", hex))) {
        e = sbx_error_new(SBX_ENOMEM, "out of memory");
        goto fail;
    }
    c->box->st = st;
    c->hostname = strdup(c->box->id);
    if (read_options(spec, c, &e) < 0)
        goto fail;
    long long nofile_soft = 0, nofile_hard = 0;
    if (box_nofile(&st->host, c->pids, c->nofile_soft, c->nofile_hard, &nofile_soft, &nofile_hard,
                   &e) < 0)
        goto fail;
    c->box->box_dir = sbx__printf("%s/boxes/%s", st->state_dir, c->box->id);
    c->box->socket = sbx__printf("%s/run/agent.sock", c->box->box_dir);
    c->box->base_env = env_strv(spec);
    c->box->workdir = sbx__strdup0(sbx_spec_workdir(spec));
    /* [endpoint] A connected handle knows the declared ports through the descriptor. */
    if (sbx_spec_port_count(spec) > 0) {
        c->box->ports = json_array();
        for (size_t i = 0; c->box->ports && i < sbx_spec_port_count(spec); i++)
            json_array_append_new(c->box->ports, json_integer(sbx_spec_port_at(spec, i)));
    }
    sbx__kit_agent_init(&c->box->agent, st->pool, c->box->socket);
    if (!c->box->box_dir || !c->box->socket || !c->box->base_env) {
        e = sbx_error_new(SBX_ENOMEM, "out of memory");
        goto fail;
    }
    if (strlen(c->box->socket) >= 108) {
        e = sbx_error_new(SBX_ECREATE,
                          "the state directory %s is too long for a unix socket path; use a "
                          "shorter one (SBX_STATE_DIR)",
                          st->state_dir);
        goto fail;
    }
    c->ready_timeout_s = spec_num(sbx_spec_get_ready_timeout, spec,
                                  SBX_LINUX_DEFAULT_READY_TIMEOUT_S);
    double cpu = spec_num(sbx_spec_get_cpu, spec, -1);
    long long mem = -1, disk = -1;
    sbx_spec_get_memory_mib(spec, &mem);
    sbx_spec_get_disk_gib(spec, &disk);
    long long mem_bytes = mem > 0 ? mem << 20 : 0;
    /*
     * memory_cgroup "always": the box has its memory cgroup anyway, so a
     * ceiling costs nothing more; half of RAM keeps one box from taking the
     * host. "limited" (the default) sets none: a ceiling there would cost
     * every box a memory cgroup (docs/scale.md).
     */
    if (mem_bytes <= 0 && !st->memcg_limited && sbx__cg_mode() != SBX_CG_NONE)
        mem_bytes = sbx__linux_default_memory(&st->host);
    /* Without disk_gib, an eighth of RAM, and no more than the box's memory limit. */
    long long upper_size =
        disk > 0 ? disk << 30 : sbx__linux_default_upper_size(&st->host, mem_bytes);
    double ttl = spec_num(sbx_spec_get_ttl, spec, -1);
    json_t *env = json_array();
    for (char **p = c->box->base_env; env && *p; p++)
        json_array_append_new(env, json_string(*p));
    json_t *md = json_object();
    for (size_t i = 0; md && i < sbx_spec_metadata_count(spec); i++) {
        const char *k, *v;
        sbx_spec_metadata_at(spec, i, &k, &v);
        json_object_set_new(md, k, json_string(v));
    }
    json_t *ep = NULL;
    const char *const *entry = sbx_spec_entrypoint(spec);
    if (entry) {
        ep = json_array();
        for (size_t i = 0; ep && entry[i]; i++)
            json_array_append_new(ep, json_string(entry[i]));
    }
    c->desc = json_pack(
        "{s:s, s:s, s:s, s:s, s:s?, s:b, s:b, s:I, s:I, s:b, s:I, s:s?, s:s, s:f, s:f, s:f, s:I,"
        " s:I, s:f, s:o, s:o, s:o?}",
        "id", c->box->id, "state_dir", st->state_dir, "box_dir", c->box->box_dir, "hostname",
        c->hostname, "image", c->image, "net_host", c->net == SBX_LINUX_NET_HOST, "userns", c->userns, "userns_base",
        (json_int_t)st->userns_base, "userns_slots", (json_int_t)st->userns_slots, "seccomp", st->seccomp, "upper_size",
        (json_int_t)upper_size, "workdir", sbx_spec_workdir(spec), "agent",
        st->agent, "ttl_s", ttl, "ready_timeout_s", c->ready_timeout_s, "stop_grace_s",
        st->stop_grace_s, "memory_bytes", (json_int_t)mem_bytes, "pids",
        (json_int_t)c->pids, "cpu", cpu > 0 ? cpu : 0.0, "env", env, "metadata", md,
        "entrypoint", ep);
    if (c->desc &&
        (json_object_set_new(c->desc, "memory_cgroup_limited",
                             json_boolean(st->memcg_limited)) < 0 ||
         json_object_set_new(c->desc, "nofile_soft", json_integer(nofile_soft)) < 0 ||
         json_object_set_new(c->desc, "nofile_hard", json_integer(nofile_hard)) < 0)) {
        json_decref(c->desc);
        c->desc = NULL;
    }
    if (!c->desc) {
        e = sbx_error_new(SBX_ENOMEM, "out of memory");
        goto fail;
    }
    if (c->die_with_creator)
        json_object_set_new(c->desc, "die_with_creator", json_true());
    json_object_set_new(c->desc, "log_max_bytes", json_integer(st->log_max_bytes));
    if (c->network) {
        /* [netw] Where the shim finds the network it joins. */
        char *dir = sbx__linux_net_dir(st->state_dir, c->network);
        json_t *n = dir ? json_pack("{s:s, s:s}", "name", c->network, "dir", dir) : NULL;
        free(dir);
        if (!n || json_object_set_new(c->desc, "network", n) < 0) {
            e = sbx_error_new(SBX_ENOMEM, "out of memory");
            goto fail;
        }
    }
    /* [volumes] the config's volumes, caps and shm size, then the box's own. */
    if (nat_desc(st, c, &e) < 0)
        goto fail;
    if (sbx__linux_box_extras(&st->x, spec, c->net, c->volumes, c->cap_add, c->shm_size,
                              c->desc, &e) < 0)
        goto fail;
    /* [endpoint] Declared ports: the shim listens on the host for each (forward.c). */
    if (sbx_spec_port_count(spec) > 0)
        json_object_set_new(c->desc, "ports", ports_desc(spec, c->publish));
    if (st->shell)
        json_object_set_new(c->desc, "shell", json_string(st->shell));
    /* SBX_SHIM_STDERR=trace: the shim prints the timing of each step of its work. */
    const char *dbg = getenv("SBX_SHIM_STDERR");
    if (dbg && !strcmp(dbg, "trace"))
        json_object_set_new(c->desc, "trace", json_true());
    /* The timer exists from here so create_finish can always close it. */
    uv_timer_init(sbx_op_loop(op), &c->timer);
    c->timer.data = c;
    c->handles = 1; /* the timer; the poll adds itself */
    sbx_op_on_cancel(op, on_cancel_create, c);
    if (st->creates_in_flight >= SBX_LINUX_CREATES_IN_FLIGHT || st->creates_waiting) {
        /* Its turn comes when a create in flight ends; nothing of it runs meanwhile. */
        c->queued = true;
        if (st->creates_waiting_tail)
            st->creates_waiting_tail->next = c;
        else
            st->creates_waiting = c;
        st->creates_waiting_tail = c;
        return;
    }
    create_begin(c);
    return;
fail:
    /* Freed first, for the same reason as in create_finish. */
    create_free(c);
    sbx_op_complete(op, sbx_error_code(e), sbx_error_prefix(e, "creating linux sandbox"), NULL);
}

/* Counts the create in flight and sends it to the pool (create_work). */
static void create_begin(struct create *c)
{
    c->counted = true;
    c->st->creates_in_flight++;
    if (sbx_op_cancelled(c->op)) {
        create_finish(c, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "create cancelled"));
        return;
    }
    c->working = true;
    if (sbx__context_submit(sbx__op_provider(c->op)->ctx, create_work, create_work_done, c,
                            &c->work) < 0) {
        c->working = false;
        create_finish(c, SBX_ECREATE, sbx_error_new(SBX_ECREATE, "cannot queue work"));
    }
}

/* --- exec, files ---------------------------------------------------------- */

static sbx_error *agent_gone(const struct linux_box *b)
{
    return sbx_error_new(SBX_EPROVIDER,
                         "the agent of box %s is gone (its TTL passed, or its init died or was "
                         "killed): stop it and create a new one",
                         b->id);
}

/*
 * An exec, upload or download: it first gets the box's agent connection from
 * the pool (which may reconnect), then runs as an inner op on it, so that its
 * end can hand the connection back (the pool trims to its cap then). The
 * strings and opts belong to the core's call, which keeps them until the op
 * completes.
 */
enum agent_op { AOP_EXEC, AOP_UPLOAD, AOP_DOWNLOAD };
struct agent_call {
    enum agent_op kind;
    sbx_op *op;
    sbx_op *inner;
    struct linux_box *b;
    const char *a, *b2;
    const sbx_exec_opts *opts;
    long long oom_before;
    json_t *cgroups;
    char *remote; /* a relative remote path joined to the workdir, when one was made */
};

static void agent_call_cancel(sbx_op *op, void *data)
{
    (void)op;
    struct agent_call *k = data;
    if (k->inner)
        sbx__op_cancel(k->inner);
}

/*
 * The agent's answer. For an exec, an OOM kill the agent could not see is
 * attributed: the box's memory cgroup counted a kill during this exec and the
 * command died of SIGKILL. (With concurrent execs in one box the kill is given
 * to whichever SIGKILLed command finishes; the counter cannot tell them apart.)
 */
static void agent_call_done(int code, sbx_error *err, void *value, void *data)
{
    struct agent_call *k = data;
    sbx_op_on_cancel(k->op, NULL, NULL);
    k->inner = NULL;
    sbx_exec_result *r = k->kind == AOP_EXEC ? value : NULL;
    if (code == SBX_OK && r && !r->error_type && k->oom_before >= 0) {
        long long after = sbx__cg_oom_kills(k->cgroups);
        if (after > k->oom_before && (r->return_code == -9 || r->return_code == 137)) {
            r->error_type = strdup("oom");
        }
    }
    /* Before the completion: the box may be freed once its last op is done. */
    sbx__kit_agent_release(&k->b->agent);
    sbx_op_complete(k->op, code, err, value);
    json_decref(k->cgroups);
    free(k->remote);
    free(k);
}

/*
 * The box's agent is gone: an exec gets the reference's result for a
 * container that is no longer running (rc 125, "sandbox"), a transfer the error.
 */
static void agent_gone_complete(struct agent_call *k)
{
    sbx_error *e = agent_gone(k->b);
    if (k->kind == AOP_EXEC && e) {
        sbx__agent_exec_unreachable(k->op, sbx_error_message(e));
        sbx_error_free(e);
    } else {
        sbx_op_complete(k->op, SBX_EPROVIDER, e, NULL);
    }
}

static void with_agent(sbx_agent_conn *conn, int code, const char *msg, void *arg)
{
    struct agent_call *k = arg;
    sbx_op *inner = conn ? sbx__op_new(sbx__op_provider(k->op), agent_call_done, k) : NULL;
    /* The caller's output callback and fds see the agent client's chunks. */
    sbx__op_inherit_exec_sink(inner, k->op);
    if (!inner) {
        /*
         * Something else than the box's agent listens on its socket: never
         * talked to, and said as such (the slot is lost: nothing reaches the
         * box safely any more, so its status is error too).
         */
        if (!conn && code == SBX_EPERM && !k->b->agent.closed)
            sbx_op_complete(k->op, code, sbx_error_new(code, "box %s: %s", k->b->id, msg), NULL);
        else if (!conn && (k->b->agent.closed || sbx__kit_agent_gone(&k->b->agent)))
            agent_gone_complete(k);
        else if (!conn)
            sbx_op_complete(k->op, code,
                            sbx_error_new(code, "box %s: cannot reconnect to its agent: %s",
                                          k->b->id, msg),
                            NULL);
        else
            sbx_op_complete(k->op, SBX_ENOMEM, NULL, NULL);
        free(k->remote);
        free(k);
        return;
    }
    k->inner = inner;
    sbx_op_on_cancel(k->op, agent_call_cancel, k);
    if (k->kind == AOP_EXEC) {
        k->cgroups = json_incref(k->b->cgroups);
        k->oom_before = k->b->cgroups ? sbx__cg_oom_kills(k->b->cgroups) : -1;
        sbx__agent_exec(conn, inner, k->a, NULL, k->opts, (const char *const *)k->b->base_env);
    } else if (k->kind == AOP_UPLOAD) {
        sbx__agent_set_limits(conn, &k->b->st->limits);
        sbx__agent_upload(conn, inner, k->a, k->b2);
    } else {
        sbx__agent_set_limits(conn, &k->b->st->limits);
        sbx__agent_download(conn, inner, k->a, k->b2);
    }
}

static void agent_call(sbx_op *op, struct linux_box *b, enum agent_op kind, const char *a,
                       const char *b2, const sbx_exec_opts *opts)
{
    /*
     * A paused box answers nothing: said at once, not after the call's
     * timeout, whichever process paused it (one stat of the box directory,
     * a tmpfs under /run by default).
     */
    if (sbx__linux_paused(b->box_dir)) {
        sbx_op_complete(op, SBX_ESTATE,
                        sbx_error_new(SBX_ESTATE,
                                      "box %s is paused: resume it first (sbx unpause %s, or "
                                      "sbx_sandbox_resume)",
                                      b->id, b->id),
                        NULL);
        return;
    }
    struct agent_call *k = calloc(1, sizeof(*k));
    if (!k) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    *k = (struct agent_call){.kind = kind, .op = op, .b = b, .a = a, .b2 = b2, .opts = opts,
                             .oom_before = -1};
    /*
     * A relative box path is relative to the workdir, as for local and the
     * CLI (the agent itself resolves it against the box's root).
     */
    const char **remote = kind == AOP_UPLOAD ? &k->b2 : kind == AOP_DOWNLOAD ? &k->a : NULL;
    if (remote && *remote && (*remote)[0] != '/' && b->workdir && b->workdir[0] == '/') {
        k->remote = sbx__printf("%s/%s", b->workdir, *remote);
        if (!k->remote) {
            free(k);
            sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
            return;
        }
        *remote = k->remote;
    }
    sbx__kit_agent_use(&b->agent, sbx_op_loop(op), with_agent, k);
}

static void linux_exec(sbx_op *op, void *state, void *box, const char *command,
                       const sbx_exec_opts *opts)
{
    (void)state;
    agent_call(op, box, AOP_EXEC, command, NULL, opts);
}

static void linux_upload(sbx_op *op, void *state, void *box, const char *local_path,
                         const char *remote_path)
{
    (void)state;
    agent_call(op, box, AOP_UPLOAD, local_path, remote_path, NULL);
}

static void linux_download(sbx_op *op, void *state, void *box, const char *remote_path,
                           const char *local_path)
{
    (void)state;
    agent_call(op, box, AOP_DOWNLOAD, remote_path, local_path, NULL);
}

/* --- status --------------------------------------------------------------- */

/*
 * The record and /proc are read on the context's pool (a state directory on
 * a slow or stuck disk must not stall the loop); what the box's agent
 * connection says is read back on the loop, which owns it.
 */
enum raw_status {
    RAW_GONE,
    RAW_UNREADABLE,
    RAW_SHIM_DEAD,
    RAW_LIVE,
    RAW_PAUSED,
    RAW_ENDED,
    RAW_SERVICE_ENDED
};

struct status_job {
    sbx_op *op;
    struct linux_box *b;
    char *box_dir;
    enum raw_status raw;
};

static void status_work(void *data)
{
    struct status_job *j = data;
    sbx_linux_record rec;
    struct stat st;
    if (stat(j->box_dir, &st) < 0) {
        j->raw = RAW_GONE;
    } else if (sbx__linux_record_read(j->box_dir, &rec, NULL) < 0) {
        j->raw = RAW_UNREADABLE;
    } else {
        /*
         * "creating" as well: the shim marks the record "running" a moment
         * after our handle has the agent's hello, and a box frozen in that
         * moment (a slow host) is paused all the same.
         */
        const char *state = rec.state ? rec.state : ""; /* a record without one: ended */
        bool live = !strcmp(state, "creating") || !strcmp(state, "running");
        if (!sbx__linux_shim_alive(&rec))
            j->raw = RAW_SHIM_DEAD; /* the supervisor died: an orphan for gc */
        else if (!strcmp(state, "running") && rec.service && strcmp(rec.service, "running"))
            j->raw = RAW_SERVICE_ENDED; /* [svc-logs] */
        else if (live && sbx__linux_box_paused(&rec))
            j->raw = RAW_PAUSED; /* frozen, or its agent stopped: it answers nothing now */
        else if (live)
            j->raw = RAW_LIVE;
        else
            j->raw = RAW_ENDED;
        sbx__linux_record_free(&rec);
    }
}

static void status_done(void *data, bool cancelled)
{
    struct status_job *j = data;
    struct linux_box *b = j->b;
    sbx_status s = SBX_STATUS_UNKNOWN;
    switch (j->raw) {
    case RAW_GONE:
        s = SBX_STATUS_STOPPED;
        break;
    case RAW_UNREADABLE:
        s = SBX_STATUS_UNKNOWN;
        break;
    case RAW_SHIM_DEAD:
        s = SBX_STATUS_ERROR;
        break;
    case RAW_LIVE:
        /*
         * "creating": our handle got the agent's hello and sent the ack; the
         * record lags a moment. A closed (pooled) connection is no sign of
         * trouble; a dead one is.
         */
        s = sbx__kit_agent_gone(&b->agent) ? SBX_STATUS_ERROR : SBX_STATUS_RUNNING;
        break;
    case RAW_PAUSED:
        /*
         * What answers, not what was recorded: a frozen box (a commit copies
         * it) or one whose agent is stopped runs nothing until thawed or
         * continued. Whole, so not an error (gc keeps it).
         */
        s = SBX_STATUS_PAUSED;
        break;
    case RAW_SERVICE_ENDED:
        /*
         * [svc-logs] The box's service (its entrypoint) ended: what docker
         * calls exited and the reference maps to STOPPED. The agent still
         * runs, so exec and transfers keep working until the box is stopped.
         */
        s = SBX_STATUS_STOPPED;
        break;
    case RAW_ENDED:
        s = SBX_STATUS_ERROR;
        /*
         * The shim recorded the agent's end, which our connection may not
         * have read yet: from here on exec and transfers say "gone" too.
         */
        sbx__kit_agent_lost(&b->agent);
        break;
    }
    if (cancelled)
        sbx_op_complete(j->op, SBX_ECANCELED, NULL, NULL);
    else
        sbx_op_complete(j->op, SBX_OK, NULL, (void *)(intptr_t)s);
    free(j->box_dir);
    free(j);
}

static void linux_status(sbx_op *op, void *state, void *box)
{
    (void)state;
    struct linux_box *b = box;
    struct status_job *j = calloc(1, sizeof(*j));
    if (j)
        j->box_dir = strdup(b->box_dir);
    if (!j || !j->box_dir) {
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->op = op;
    j->b = b;
    int rc = sbx__context_submit(sbx__op_provider(op)->ctx, status_work, status_done, j, NULL);
    if (rc < 0) {
        free(j->box_dir);
        free(j);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

/* --- stats ---------------------------------------------------------------- */

/* The record and the groups are read on the context's pool: files, possibly slow. */
struct stats_job {
    sbx_op *op;
    char *box_dir;
    char *json;
    int code;
    sbx_error *err;
};

static void stats_work(void *data)
{
    struct stats_job *j = data;
    sbx_linux_record rec;
    if (sbx__linux_record_read(j->box_dir, &rec, &j->err) < 0) {
        j->code = j->err ? sbx_error_code(j->err) : SBX_EIO;
        return;
    }
    json_t *v = sbx__cg_stats(rec.cgroups);
    sbx__linux_record_free(&rec);
    j->json = v ? sbx__json_dump(v) : NULL;
    json_decref(v);
    j->code = j->json ? SBX_OK : SBX_ENOMEM;
}

static void stats_done(void *data, bool cancelled)
{
    struct stats_job *j = data;
    if (cancelled)
        sbx_op_complete(j->op, SBX_ECANCELED, NULL, NULL);
    else if (j->code < 0)
        sbx_op_complete(j->op, j->code, j->err, NULL);
    else
        sbx_op_complete(j->op, SBX_OK, NULL, j->json);
    if (cancelled || j->code < 0) {
        free(j->json);
        if (cancelled)
            sbx_error_free(j->err);
    }
    free(j->box_dir);
    free(j);
}

static void linux_stats(sbx_op *op, void *state, void *box)
{
    (void)state;
    struct linux_box *b = box;
    struct stats_job *j = calloc(1, sizeof(*j));
    if (j && !(j->box_dir = strdup(b->box_dir))) {
        free(j);
        j = NULL;
    }
    if (!j) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->op = op;
    int rc = sbx__context_submit(sbx__op_provider(op)->ctx, stats_work, stats_done, j, NULL);
    if (rc < 0) {
        free(j->box_dir);
        free(j);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

/* --- pause and resume ------------------------------------------------------ */

/* A freeze or thaw writes cgroup files and may wait (v2: until every process stopped): the pool. */
struct pause_job {
    sbx_op *op;
    bool pause;
    char *id, *box_dir;
    json_t *cgroups; /* a copy: the job's own on the pool thread */
    int code;
    sbx_error *err;
};

static void pause_work(void *data)
{
    struct pause_job *j = data;
    j->code = j->pause ? sbx__linux_pause(j->box_dir, j->id, j->cgroups, &j->err)
                       : sbx__linux_resume(j->box_dir, j->id, j->cgroups, &j->err);
}

static void pause_done(void *data, bool cancelled)
{
    struct pause_job *j = data;
    if (cancelled) {
        sbx_error_free(j->err);
        sbx_op_complete(j->op, SBX_ECANCELED, NULL, NULL);
    } else {
        sbx_op_complete(j->op, j->code, j->code < 0 ? j->err : NULL, NULL);
    }
    json_decref(j->cgroups);
    free(j->id);
    free(j->box_dir);
    free(j);
}

static void pause_or_resume(sbx_op *op, struct linux_box *b, bool pause)
{
    struct pause_job *j = calloc(1, sizeof(*j));
    if (j) {
        j->op = op;
        j->pause = pause;
        j->id = strdup(b->id);
        j->box_dir = strdup(b->box_dir);
        j->cgroups = json_deep_copy(b->cgroups);
    }
    if (!j || !j->id || !j->box_dir || !j->cgroups) {
        if (j) {
            json_decref(j->cgroups);
            free(j->id);
            free(j->box_dir);
        }
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    int rc = sbx__context_submit(sbx__op_provider(op)->ctx, pause_work, pause_done, j, NULL);
    if (rc < 0) {
        pause_done(j, true);
    }
}

static void linux_pause(sbx_op *op, void *state, void *box)
{
    (void)state;
    pause_or_resume(op, box, true);
}

static void linux_resume(sbx_op *op, void *state, void *box)
{
    (void)state;
    pause_or_resume(op, box, false);
}

/* --- close ---------------------------------------------------------------- */

/*
 * A stop: the shim is found and signalled on the pool (record, /proc), its
 * exit watched on the loop (pidfd, or /proc checks without pidfds), and what
 * an unclean end left (cgroups whose removal retries while tasks linger, the
 * box directory) removed on the pool again: nothing of it waits on the loop.
 */
struct stop {
    sbx_op *op;
    struct linux_box *b;
    char *box_dir;
    char *id;
    /* Exit is seen through a pidfd (poll), or without pidfds by checking /proc (check). */
    union {
        uv_poll_t poll;
        uv_timer_t check;
    } w;
    uv_timer_t timer;
    int pidfd; /* -1 without pidfd support */
    pid_t pid;
    unsigned long long start;
    bool signalled; /* the first step signalled the shim: wait for it */
    int handles;
    int code;
    sbx_error *err;
    double timeout_s;
    double signalled_at; /* uv_now, ms */
    double left_s;       /* the deadline check's answer */
    bool checking;       /* a deadline check is on the pool */
    bool ended;          /* stop_end ran: the handles are closing */
    bool closed;         /* the handles closed while a check was out */
    char where[160];     /* where the shim stood when the deadline passed */
    struct linux_state *st;
    bool counted;      /* one of st->stops_in_flight */
    struct stop *next; /* st->stops_waiting */
};

static void stop_begin(struct stop *s);

static void stop_free(struct stop *s)
{
    struct linux_state *st = s->counted ? s->st : NULL;
    sbx_error_free(s->err);
    free(s->box_dir);
    free(s->id);
    free(s);
    if (!st)
        return;
    st->stops_in_flight--;
    /* The next waiting stops take the freed places (a loop, not recursion: see draining). */
    if (st->stops_draining)
        return;
    st->stops_draining = true;
    while (st->stops_waiting && st->stops_in_flight < SBX_LINUX_STOPS_IN_FLIGHT) {
        struct stop *n = st->stops_waiting;
        st->stops_waiting = n->next;
        if (!st->stops_waiting)
            st->stops_waiting_tail = NULL;
        n->next = NULL;
        stop_begin(n);
    }
    st->stops_draining = false;
}

/* Worker: a shim that died uncleanly leaves its cgroups and directory: remove them. */
static void stop_leftovers_work(void *data)
{
    struct stop *s = data;
    struct stat st;
    if (stat(s->box_dir, &st) == 0) {
        sbx_linux_record rec;
        if (sbx__linux_record_read(s->box_dir, &rec, NULL) == 0) {
            if (!sbx__linux_shim_alive(&rec))
                sbx__linux_remove_leftovers(s->box_dir, &rec);
            sbx__linux_record_free(&rec);
        }
    }
}

static void stop_leftovers_done(void *data, bool cancelled)
{
    (void)cancelled;
    struct stop *s = data;
    sbx_op_complete(s->op, s->code, steal_pointer(&s->err), NULL);
    stop_free(s);
}

static void stop_closed(uv_handle_t *h)
{
    struct stop *s = h->data;
    if (--s->handles > 0)
        return;
    if (s->checking) { /* the deadline check still holds s: it finishes the stop */
        s->closed = true;
        return;
    }
    if (s->pidfd >= 0)
        close(s->pidfd);
    s->pidfd = -1;
    if (sbx__context_submit(sbx__op_provider(s->op)->ctx, stop_leftovers_work, stop_leftovers_done,
                            s, NULL) < 0)
        stop_leftovers_done(s, true);
}

static void stop_end(struct stop *s)
{
    if (s->ended)
        return;
    s->ended = true;
    if (s->pidfd >= 0)
        uv_poll_stop(&s->w.poll);
    else
        uv_timer_stop(&s->w.check);
    uv_timer_stop(&s->timer);
    uv_close((uv_handle_t *)&s->w, stop_closed);
    uv_close((uv_handle_t *)&s->timer, stop_closed);
}

static void stop_check(uv_timer_t *t)
{
    struct stop *s = t->data;
    if (sbx__linux_proc_start(s->pid) != s->start)
        stop_end(s);
}

static void stop_exited(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    stop_end(p->data);
}

static void stop_timeout(uv_timer_t *t);

/* Worker: how much longer this stop may wait (its shim may be queued for a teardown slot). */
static void stop_deadline_work(void *data)
{
    struct stop *s = data;
    s->left_s = sbx__linux_stop_time_left(s->box_dir, s->pid, s->timeout_s, s->left_s);
    if (s->left_s <= 0)
        sbx__linux_stop_where(s->box_dir, s->pid, s->where, sizeof(s->where));
}

static void stop_deadline_done(void *data, bool cancelled)
{
    struct stop *s = data;
    s->checking = false;
    if (s->closed) { /* the shim ended meanwhile: finish as stop_closed would have */
        s->handles = 1;
        stop_closed((uv_handle_t *)&s->timer);
        return;
    }
    if (s->ended)
        return;
    if (!cancelled && s->left_s > 0) {
        uv_timer_start(&s->timer, stop_timeout, (uint64_t)(s->left_s * 1000) + 1, 0);
        return;
    }
    s->code = SBX_ETIMEDOUT;
    s->err = sbx_error_new(SBX_ETIMEDOUT,
                           "box %s: its shim did not finish its teardown within the stop timeout "
                           "(stop_timeout_s %.0f: %s); `sbx gc` removes what is left",
                           s->id, s->timeout_s, s->where[0] ? s->where : "not checked");
    stop_end(s);
}

/*
 * The deadline is counted from the start of the shim's own teardown, which
 * may come long after the signal when thousands of boxes stop at once: at
 * each expiry the pool reads the shim's marker and the timer is re-armed
 * for what is left (teardown.c).
 */
static void stop_timeout(uv_timer_t *t)
{
    struct stop *s = t->data;
    if (s->checking || s->ended)
        return;
    s->checking = true;
    s->left_s = ((double)uv_now(t->loop) - s->signalled_at) / 1e3; /* waited so far, in */
    if (sbx__context_submit(sbx__op_provider(s->op)->ctx, stop_deadline_work, stop_deadline_done,
                            s, NULL) < 0)
        stop_deadline_done(s, true);
}

/* Worker: find the box's shim and signal it; without one, remove what is left. */
static void stop_signal_work(void *data)
{
    struct stop *s = data;
    sbx_linux_record rec;
    sbx_error *rerr = NULL;
    if (sbx__linux_record_read(s->box_dir, &rec, &rerr) < 0) {
        int e = sbx_error_errno(rerr);
        if (e == EMFILE || e == ENFILE) {
            /*
             * Out of descriptors says nothing about the box, which is most
             * likely running: removing its leftovers would wait on a busy
             * cgroup and then leak the box. Report it.
             */
            s->code = SBX_EIO;
            s->err = sbx_error_prefix(rerr, "stopping box %s", s->id);
            return;
        }
        sbx_error_free(rerr);
        /* No record: gone already, or a shim that died before writing it. */
        sbx_linux_record none = { .id = s->id };
        sbx__linux_remove_leftovers(s->box_dir, &none);
        return;
    }
    int pfd = -1;
    /*
     * The pidfd pins the process the record names, checked to be this box's
     * shim (owner, executable, command line, start time): the signal goes
     * through it, so it reaches that process and no other.
     */
    if (sbx__linux_shim_pidfd(&rec, &pfd)) {
        if (pfd >= 0) {
            s->signalled = syscall(SYS_pidfd_send_signal, pfd, SIGTERM, NULL, 0) == 0;
            if (!s->signalled) {
                close(pfd);
                pfd = -1;
            }
        } else {
            /* No pidfds (Linux < 5.3, valgrind): start-time check, kill(), poll /proc. */
            s->signalled = sbx__linux_proc_start(rec.shim_pid) == rec.shim_start &&
                           kill(rec.shim_pid, SIGTERM) == 0;
        }
    }
    if (!s->signalled && !sbx__linux_shim_alive(&rec))
        sbx__linux_remove_leftovers(s->box_dir, &rec);
    s->pidfd = pfd;
    s->pid = rec.shim_pid;
    s->start = rec.shim_start;
    sbx__linux_record_free(&rec);
}

/* Loop: watch a signalled shim's exit, bounded by the stop timeout. */
static void stop_signal_done(void *data, bool cancelled)
{
    struct stop *s = data;
    if (cancelled || !s->signalled) {
        if (s->pidfd >= 0)
            close(s->pidfd);
        if (!cancelled && s->err) { /* the record could not be read: nothing was done */
            sbx_op_complete(s->op, s->code, steal_pointer(&s->err), NULL);
            stop_free(s);
            return;
        }
        sbx_op_complete(s->op, cancelled ? SBX_ECANCELED : SBX_OK, NULL, NULL);
        stop_free(s);
        return;
    }
    uv_loop_t *loop = sbx_op_loop(s->op);
    s->handles = 2;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    if (s->pidfd >= 0) {
        uv_poll_init(loop, &s->w.poll, s->pidfd);
        s->w.poll.data = s;
        /* A pidfd polls readable once the process has exited. */
        uv_poll_start(&s->w.poll, UV_READABLE, stop_exited);
    } else {
        uv_timer_init(loop, &s->w.check);
        s->w.check.data = s;
        uv_timer_start(&s->w.check, stop_check, 5, 5);
    }
    s->signalled_at = (double)uv_now(loop);
    uv_timer_start(&s->timer, stop_timeout, (uint64_t)(s->timeout_s * 1000), 0);
}

static void linux_close(sbx_op *op, void *state, void *box, int owned)
{
    (void)owned; /* a stop through a connected handle ends the box too, as the reference's */
    struct linux_state *st = state;
    struct linux_box *b = box;
    sbx__kit_agent_drop(&b->agent);
    struct stop *s = calloc(1, sizeof(*s));
    if (s) {
        s->box_dir = strdup(b->box_dir);
        s->id = strdup(b->id);
    }
    if (!s || !s->box_dir || !s->id) {
        if (s)
            stop_free(s);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    s->op = op;
    s->b = b;
    s->pidfd = -1;
    s->timeout_s = st->stop_timeout_s;
    s->st = st;
    if (st->stops_in_flight >= SBX_LINUX_STOPS_IN_FLIGHT || st->stops_waiting) {
        /* Its turn comes when a stop in flight ends; its deadline starts at its signal. */
        if (st->stops_waiting_tail)
            st->stops_waiting_tail->next = s;
        else
            st->stops_waiting = s;
        st->stops_waiting_tail = s;
        return;
    }
    stop_begin(s);
}

/* Counts the stop in flight and sends it to the pool to signal the shim. */
static void stop_begin(struct stop *s)
{
    sbx_op *op = s->op;
    s->counted = true;
    s->st->stops_in_flight++;
    int rc = sbx_op_cancelled(op) ? SBX_ECANCELED
                                  : sbx__context_submit(sbx__op_provider(op)->ctx,
                                                        stop_signal_work, stop_signal_done, s,
                                                        NULL);
    if (rc < 0) {
        sbx_op_complete(op, rc, NULL, NULL);
        stop_free(s);
    }
}

/* --- serialize / connect ------------------------------------------------- */

static void linux_serialize(sbx_op *op, void *state, void *box, const char *scope)
{
    (void)scope;
    struct linux_state *st = state;
    struct linux_box *b = box;
    json_t *j = json_pack("{s:s, s:s}", "sandbox_id", b->id, "state_dir", st->state_dir);
    /* [endpoint] sbx_sandbox_connect declares them again (core/sandbox.c connect_done). */
    if (j && b->ports && json_array_size(b->ports))
        json_object_set(j, "ports", b->ports);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
    else
        sbx_op_complete(op, SBX_OK, NULL, s);
}

struct conn_call {
    sbx_op *op;
    struct linux_box *b;
};

static void on_connect_agent(sbx_agent_conn *conn, int code, sbx_error *err, void *data)
{
    struct conn_call *k = data;
    if (code < 0 || !conn) {
        sbx_error *e = err ? sbx_error_prefix(err, "connecting to box %s", k->b->id)
                           : sbx_error_new(SBX_EPROVIDER, "cannot reach box %s", k->b->id);
        /* Before the completion, which may free the provider and its pool. */
        box_free(k->b);
        sbx_op_complete(k->op, SBX_EPROVIDER, e, NULL);
    } else {
        sbx_error_free(err);
        sbx__kit_agent_put(&k->b->agent, conn);
        sbx_op_complete(k->op, SBX_OK, NULL, k->b);
    }
    free(k);
}

/*
 * Connect: the descriptor is checked and the box's record read on the
 * context's pool (a state directory and a record are files); the agent
 * connection is made on the loop.
 */
struct connect_job {
    sbx_op *op;
    struct linux_state *st;
    char *descriptor;
    int code;
    sbx_error *err;
    struct linux_box *b;
    pid_t init_pid;
    bool paused; /* its agent answers nothing now: connected to when it is next used */
};

static int connect_fail(struct connect_job *j, int code, sbx_error *e)
{
    j->code = code;
    j->err = e;
    return code;
}

static void connect_work(void *data)
{
    struct connect_job *j = data;
    struct linux_state *st = j->st;
    _cleanup_json_ json_t *d = json_loads(j->descriptor, 0, NULL);
    const char *id = json_string_value(json_object_get(d, "sandbox_id"));
    const char *sd = json_string_value(json_object_get(d, "state_dir"));
    if (!id || !sbx__linux_id_ok(id)) {
        connect_fail(j, SBX_EINVAL,
                     sbx_error_new(SBX_EINVAL, "a linux descriptor needs a \"sandbox_id\" "
                                               "(letters, digits, '-', '_', '.'; got %s%s%s)",
                                   id ? "'" : "", id ? id : "none", id ? "'" : ""));
        return;
    }
    /*
     * A descriptor is input: its state directory must be an absolute,
     * canonical path to a directory of the caller's that nobody else can
     * write, or a record planted there would be believed (pids to signal,
     * cgroups to empty, an env for every exec).
     */
    {
        /* Without one in the descriptor, the provider's own is checked the same way. */
        const char *dir = sd ? sd : st->state_dir;
        sbx_error *se = NULL;
        _cleanup_free_ char *canon = NULL;
        if (dir[0] != '/')
            se = sbx_error_new(SBX_EINVAL,
                               "the descriptor's state_dir '%s' must be an absolute path", dir);
        else if (sbx__private_dir(dir, false, &canon, &se) == SBX_OK && sd &&
                 strcmp(canon, sd) != 0)
            se = sbx_error_new(SBX_EINVAL,
                               "the descriptor's state_dir '%s' is not canonical (it is %s); "
                               "use the descriptor sbx_sandbox_serialize gave",
                               sd, canon);
        if (se && sbx_error_code(se) == SBX_ENOENT) {
            sbx_error_free(se);
            se = sbx_error_new(SBX_ENOENT, "no linux box %s in %s (stopped, or another state "
                                           "directory?)",
                               id, dir);
        }
        if (se) {
            int code = sbx_error_code(se);
            connect_fail(j, code, sbx_error_prefix(se, "connecting to linux box %s", id));
            return;
        }
    }
    struct linux_box *b = calloc(1, sizeof(*b));
    if (!b) {
        connect_fail(j, SBX_ENOMEM, NULL);
        return;
    }
    b->st = st;
    b->ctl = -1;
    b->id = strdup(id);
    b->box_dir = sbx__printf("%s/boxes/%s", sd ? sd : st->state_dir, id);
    sbx_linux_record rec;
    sbx_error *e = NULL;
    if (!b->id || !b->box_dir || sbx__linux_record_read(b->box_dir, &rec, &e) < 0) {
        int code = e ? sbx_error_code(e) : SBX_ENOMEM;
        if (code == SBX_ENOENT) {
            sbx_error_free(e);
            e = sbx_error_new(SBX_ENOENT, "no linux box %s in %s (stopped, or another state "
                                          "directory?)",
                              id, sd ? sd : st->state_dir);
        } else if (e) {
            /* A record that is there but not to be believed: say why. */
            sbx_error_prefix(e, "connecting to linux box %s", id);
        }
        box_free(b);
        connect_fail(j, code, e);
        return;
    }
    /*
     * The socket where the shim makes it, not wherever the record says, and
     * only the box's own init accepted behind it.
     */
    b->socket = sbx__printf("%s/run/agent.sock", b->box_dir);
    j->init_pid = rec.init_pid;
    b->cgroups = json_incref(rec.cgroups);
    b->shim_pid = rec.shim_pid;
    b->shim_start = rec.shim_start;
    bool alive = sbx__linux_shim_alive(&rec) && rec.state && strcmp(rec.state, "error") != 0;
    /* The spec's env, kept in the (checked) record, applies to a connected handle's execs too. */
    json_t *env = rec.env;
    b->base_env = calloc(json_array_size(env) + 1, sizeof(char *));
    for (size_t i = 0, k = 0; b->base_env && i < json_array_size(env); i++) {
        const char *kv = json_string_value(json_array_get(env, i));
        if (kv && strchr(kv, '='))
            b->base_env[k++] = strdup(kv);
    }
    b->workdir = sbx__strdup0(rec.workdir);
    /* [endpoint] The ports the box was created with, from its (checked) record. */
    if (rec.ports && json_array_size(rec.ports)) {
        b->ports = json_array();
        size_t i;
        json_t *p;
        json_array_foreach(rec.ports, i, p)
        {
            json_int_t port = json_integer_value(json_object_get(p, "port"));
            if (b->ports && port >= 1 && port <= 65535)
                json_array_append_new(b->ports, json_integer(port));
        }
    }
    sbx__linux_record_free(&rec);
    if (!alive || !b->socket || j->init_pid <= 0) {
        box_free(b);
        connect_fail(j, SBX_EPROVIDER, sbx_error_new(SBX_EPROVIDER, "box %s is not running", id));
        return;
    }
    j->paused = sbx__linux_paused(b->box_dir);
    j->b = b;
}

static void connect_done(void *data, bool cancelled)
{
    struct connect_job *j = data;
    sbx_op *op = j->op;
    struct linux_box *b = steal_pointer(&j->b);
    int code = cancelled ? SBX_ECANCELED : j->code;
    sbx_error *e = steal_pointer(&j->err);
    pid_t init_pid = j->init_pid;
    bool paused = j->paused;
    free(j->descriptor);
    free(j);
    if (code < 0 || !b) {
        box_free(b);
        sbx_op_complete(op, code < 0 ? code : SBX_ENOMEM, e, NULL);
        return;
    }
    if (paused) {
        /* A paused box's handle, to resume or stop it: no hello to wait for. */
        sbx__kit_agent_init(&b->agent, b->st->pool, b->socket);
        b->agent.peer_pid = init_pid;
        sbx_op_complete(op, SBX_OK, NULL, b);
        return;
    }
    struct conn_call *k = calloc(1, sizeof(*k));
    if (!k) {
        box_free(b);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx__kit_agent_init(&b->agent, b->st->pool, b->socket);
    b->agent.peer_pid = init_pid;
    k->op = op;
    k->b = b;
    if (sbx__agent_connect_peer(sbx_op_loop(op), b->socket, b->agent.peer_pid, false, 10.0,
                                on_connect_agent, k) < 0) {
        sbx_error *ce = sbx_error_new(SBX_EPROVIDER, "cannot connect to box %s", b->id);
        /* Before the completion, which may free the provider and its pool. */
        box_free(b);
        free(k);
        sbx_op_complete(op, SBX_EPROVIDER, ce, NULL);
    }
}

static void linux_connect(sbx_op *op, void *state, const char *descriptor_json)
{
    struct connect_job *j = calloc(1, sizeof(*j));
    if (j)
        j->descriptor = strdup(descriptor_json ? descriptor_json : "");
    if (!j || !j->descriptor) {
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->op = op;
    j->st = state;
    int rc = sbx__context_submit(sbx__op_provider(op)->ctx, connect_work, connect_done, j, NULL);
    if (rc < 0) {
        free(j->descriptor);
        free(j);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

/* --- the box registry (ABI 2): boxes of this provider's state directory ---- */

static void linux_list(sbx_op *op, void *state, const char *filter_json)
{
    sbx__linux_op_list(op, ((struct linux_state *)state)->state_dir, filter_json);
}

static void linux_stop_id(sbx_op *op, void *state, const char *id)
{
    struct linux_state *st = state;
    sbx__linux_op_stop_id(op, st->state_dir, id, st->stop_timeout_s);
}

static void linux_gc(sbx_op *op, void *state, const char *opts_json)
{
    struct linux_state *st = state;
    sbx__linux_op_gc(op, st->state_dir, st->image_store, opts_json, st->stop_timeout_s);
}

static void linux_image_list(sbx_op *op, void *state)
{
    struct linux_state *st = state;
    sbx__linux_op_image_list(op, st->state_dir, st->image_store);
}

static void linux_image_import(sbx_op *op, void *state, const char *name, const char *source,
                               const char *opts_json)
{
    struct linux_state *st = state;
    sbx__linux_op_image_import(op, st->state_dir, st->image_store, name, source, opts_json,
                               st->max_image_bytes);
}

static void linux_image_pull(sbx_op *op, void *state, const char *ref, const char *opts_json)
{
    struct linux_state *st = state;
    sbx__linux_op_image_pull(op, st->state_dir, st->image_store, ref, opts_json,
                             st->max_image_bytes, &st->registry);
}

static void linux_image_remove(sbx_op *op, void *state, const char *name, int force)
{
    struct linux_state *st = state;
    sbx__linux_op_image_remove(op, st->state_dir, st->image_store, name, force);
}

static void linux_image_prune(sbx_op *op, void *state, const char *opts_json)
{
    struct linux_state *st = state;
    sbx__linux_op_image_prune(op, st->state_dir, st->image_store, opts_json);
}

static void linux_image_inspect(sbx_op *op, void *state, const char *name)
{
    struct linux_state *st = state;
    sbx__linux_op_image_inspect(op, st->state_dir, st->image_store, name);
}

static void linux_image_tag(sbx_op *op, void *state, const char *src, const char *name)
{
    struct linux_state *st = state;
    sbx__linux_op_image_tag(op, st->state_dir, st->image_store, src, name);
}

/* [img-commit] */
static void linux_image_commit(sbx_op *op, void *state, const char *box_id, const char *name,
                               const char *opts_json)
{
    struct linux_state *st = state;
    sbx__linux_op_image_commit(op, st->state_dir, st->image_store, box_id, name, opts_json,
                               st->max_image_bytes);
}

/* [pty] PTY sessions hold their own connection to the box's agent: where it is. */
static void linux_agent_address(sbx_op *op, void *state, void *box)
{
    (void)state;
    struct linux_box *b = box;
    if (!b->socket || b->agent.peer_pid <= 0) {
        sbx_op_complete(op, SBX_ESTATE,
                        sbx_error_new(SBX_ESTATE, "box %s: its agent is not reachable", b->id),
                        NULL);
        return;
    }
    json_t *j = json_pack("{s:s, s:I}", "socket", b->socket, "pid", (json_int_t)b->agent.peer_pid);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx_op_complete(op, SBX_OK, NULL, text);
}

/* [svc-logs] The service log the box's shim keeps in its directory (shim/svclog.c). */
static void linux_log_address(sbx_op *op, void *state, void *box)
{
    (void)state;
    struct linux_box *b = box;
    _cleanup_free_ char *path = sbx__printf("%s/%s", b->box_dir, SBX_LOG_FILE);
    _cleanup_free_ char *old = sbx__printf("%s/%s", b->box_dir, SBX_LOG_OLD_FILE);
    json_t *j = path && old ? json_pack("{s:s, s:s}", "path", path, "old", old) : NULL;
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!text) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx_op_complete(op, SBX_OK, NULL, text);
}

/* --- endpoint [endpoint] ------------------------------------------------------ */

struct endpoint_job {
    char *box_dir;
    char *id;
    int port;
};

/* The box record's listener for `port` (the forwarder's), as a URL. */
static void endpoint_work(sbx_op *op, void *data)
{
    struct endpoint_job *j = data;
    sbx_linux_record rec;
    sbx_error *e = NULL;
    sbx_endpoint *ep = NULL;
    int rc = sbx__linux_record_read(j->box_dir, &rec, &e);
    if (rc < 0) {
        sbx_error_prefix(e, "endpoint of box %s", j->id);
    } else {
        const char *ip = NULL;
        json_int_t hp = 0;
        size_t i;
        json_t *p;
        json_array_foreach(rec.ports, i, p)
        {
            if (json_integer_value(json_object_get(p, "port")) == j->port) {
                ip = json_string_value(json_object_get(p, "host_ip"));
                hp = json_integer_value(json_object_get(p, "host_port"));
            }
        }
        if (!ip || hp < 1 || hp > 65535 || strlen(ip) > 64 ||
            strspn(ip, "0123456789abcdefABCDEF.:") != strlen(ip)) {
            rc = SBX_EPROVIDER;
            e = sbx_error_new(SBX_EPROVIDER,
                              "box %s has no host listener for port %d (a box created before "
                              "sbx published ports, or its record is damaged); recreate it",
                              j->id, j->port);
        } else {
            /* A wildcard listener is reached through loopback here. */
            bool v6 = strchr(ip, ':') != NULL;
            const char *host = !strcmp(ip, "0.0.0.0") ? "127.0.0.1" : !strcmp(ip, "::") ? "::1" : ip;
            _cleanup_free_ char *url = sbx__printf(v6 ? "http://[%s]:%d" : "http://%s:%d", host,
                                                   (int)hp);
            rc = url ? sbx_endpoint_new(url, &ep, &e) : SBX_ENOMEM;
        }
        sbx__linux_record_free(&rec);
    }
    free(j->box_dir);
    free(j->id);
    free(j);
    sbx_op_complete(op, rc < 0 ? rc : SBX_OK, rc < 0 ? e : NULL, rc < 0 ? NULL : ep);
}

static void linux_endpoint(sbx_op *op, void *state, void *box, int port)
{
    (void)state;
    struct linux_box *b = box;
    struct endpoint_job *j = calloc(1, sizeof(*j));
    if (j) {
        j->box_dir = strdup(b->box_dir);
        j->id = strdup(b->id);
        j->port = port;
    }
    if (!j || !j->box_dir || !j->id || sbx_op_run_blocking(op, endpoint_work, j) < 0) {
        if (j) {
            free(j->box_dir);
            free(j->id);
        }
        free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
    }
}

const struct sbx_provider_ops sbx__linux_provider = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "linux",
    .init = linux_init,
    .release = linux_release,
    .create = linux_create,
    .exec = linux_exec,
    .upload_file = linux_upload,
    .download_file = linux_download,
    .status = linux_status,
    .close = linux_close,
    .box_id = box_id,
    .box_free = box_free,
    .serialize = linux_serialize,
    .connect = linux_connect,
    .list = linux_list,
    .stop_id = linux_stop_id,
    .gc = linux_gc,
    .image_list = linux_image_list,
    .image_import = linux_image_import,
    .image_remove = linux_image_remove,
    .image_inspect = linux_image_inspect,
    .image_tag = linux_image_tag,
    .image_prune = linux_image_prune,
    .image_pull = linux_image_pull,
    .image_commit = linux_image_commit, /* [img-commit] */
    .agent_address = linux_agent_address, /* [pty] */
    .log_address = linux_log_address,     /* [svc-logs] */
    .endpoint = linux_endpoint,           /* [endpoint] */
    .stats = linux_stats,
    .pause = linux_pause,
    .resume = linux_resume,
    /* Exec goes through the agent client, which streams output as its frames arrive. */
    .capabilities = SBX_CAP_EXEC_STREAM | SBX_CAP_PTY | SBX_CAP_PORT_FORWARD /* [endpoint] */ |
                    SBX_CAP_AGENT |
                    SBX_CAP_NETWORK /* [netw] */,
};

/* [volumes] The linux provider's extras, for the public calls of volumes.c. */
const sbx_linux_extras *sbx__linux_provider_extras(const sbx_provider *p, const char **state_dir,
                                                   int *net)
{
    if (!p || p->ops != &sbx__linux_provider || !p->state)
        return NULL;
    const struct linux_state *st = p->state;
    *state_dir = st->state_dir;
    *net = st->net;
    return &st->x;
}
