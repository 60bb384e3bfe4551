/*
 * sbx-shim: the per-box supervisor of the linux provider (like conmon).
 *
 *   sbx-shim --box-dir DIR      (fd 3: a SOCK_SEQPACKET control socket)
 *
 * The provider starts it with a control socket on fd 3 and sends the box's
 * description as one JSON message. The shim detaches (fork, setsid: the box
 * must outlive its creator), creates the box's directory, record and cgroups,
 * clones the box's first process into new namespaces (box.c), and waits for
 * the agent inside to report ready on --ready-fd. Then it tells the provider
 * "ready" and waits for "ack": a creator that dies or gives up before acking
 * (EOF, "abort") gets the box torn down, so a create is all or nothing.
 *
 * After the ack the shim supervises: SIGTERM (a stop) or the TTL ends the
 * box; if the agent (the box's PID 1) dies on its own, the box's processes
 * die with it, the shim removes the cgroups and marks the record "error",
 * then waits for a stop or the TTL to remove the directory.
 *
 * Control messages, shim -> provider: "ready" | "error <sbx code> <message>".
 * Provider -> shim: "ack" | "abort". The shim closes the socket once its
 * work for the provider is over: after a failure, only when everything is
 * removed, so the provider can report an error that leaves nothing behind.
 */
#include "shim/shim.h"
#include "core/logs.h"

#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <math.h>
#include <time.h>

#define CTL_FD 3
/* How often the shim checks that its box directory is still there (seconds). */
#define DIR_CHECK_S 2.0

struct shim {
    struct shim_cfg cfg;
    int slot_fd; /* userns: the locked slot file that reserves our uid range, or -1 */
    int teardown_fds[2]; /* the teardown marker and slot lock (teardown.c), -1: none yet */
    int ctl;     /* control socket, -1 once closed */
    int sfd;     /* signalfd */
    dev_t dir_dev; /* the box directory, to notice its removal */
    ino_t dir_ino;
    double next_dir_check; /* monotonic seconds */
    int err_r;   /* the child's setup errors, -1 at EOF */
    int ready_r; /* the agent's readiness, -1 once read */
    pid_t init;  /* the box's PID 1 (host pid), 0 once reaped */
    int init_status;
    bool ready, acked, failed;
    json_t *cgroups;
    double created, expires; /* unix seconds; expires 0: no TTL */
    double ready_deadline;   /* monotonic seconds */
    char errbuf[1024];
    size_t errlen;
    int upper_fd; /* [img-commit] the box's overlay upper dir (O_PATH), or -1 */
    /* [svc-logs] The service's output pipes (read ends, non-blocking; -1 at EOF) and its log. */
    int out_r, errl_r;
    struct shim_log log;
    /* [svc-logs] What the agent says on the ready pipe after "R": lines, at most 63 bytes. */
    char rmsg[64];
    size_t rmsg_len;
    bool rmsg_skip;       /* dropping an overlong line up to its newline */
    const char *service;  /* NULL: no service; "running", "exited", "killed" */
    int service_code;     /* the exit status or the signal number */
    struct shim_ports ports; /* [endpoint] published ports (forward.c) */
    pid_t fwd;               /* [endpoint] the port forwarder, 0: none */
    pid_t pasta;             /* [nat] the box's user-mode network, 0: none */
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Timestamps of the create's steps, to stderr, when the description asks ("trace"). */
bool shim_tracing;
void shim_trace(const char *what)
{
    if (shim_tracing)
        fprintf(stderr, "sbx-shim %d: %.3f ms %s\n", (int)getpid(),
                fmod(mono(), 1000.0) * 1000.0, what);
}

static double unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noreturn)) static void teardown(struct shim *s, int code);

static void ctl_send(struct shim *s, const char *msg)
{
    if (s->ctl < 0)
        return;
    if (send(s->ctl, msg, strlen(msg), MSG_NOSIGNAL) < 0) {
        close(s->ctl);
        s->ctl = -1;
        /* The creator is gone before taking the box: nobody will ever ack it. */
        if (!s->acked && !s->failed)
            teardown(s, 1);
    }
}

static const char *jget(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static double jnum(json_t *o, const char *k, double def)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : def;
}

static int parse_cfg(json_t *j, struct shim_cfg *c, char *msg, size_t len)
{
    memset(c, 0, sizeof(*c));
    c->json = j;
    c->id = jget(j, "id");
    c->state_dir = jget(j, "state_dir");
    c->box_dir = jget(j, "box_dir");
    c->hostname = jget(j, "hostname");
    c->image = jget(j, "image");
    c->lower = jget(j, "lower");
    c->workdir = jget(j, "workdir");
    c->agent = jget(j, "agent");
    c->shell = jget(j, "shell");
    c->user = jget(j, "user");
    c->none_image = json_is_true(json_object_get(j, "none_image"));
    c->net_host = json_is_true(json_object_get(j, "net_host"));
    /* [nat] "net" names the mode; older providers sent only net_host. */
    const char *net = jget(j, "net");
    c->net = c->net_host ? SBX_LINUX_NET_HOST
             : net && !strcmp(net, "nat") ? SBX_LINUX_NET_NAT
                                          : SBX_LINUX_NET_NONE;
    c->pasta = jget(j, "pasta");
    c->nft = jget(j, "nft");
    c->egress = json_object_get(j, "egress");
    c->dns = json_object_get(j, "dns");
    json_t *netw = json_object_get(j, "network");
    c->net_name = jget(netw, "name");
    c->net_dir = jget(netw, "dir");
    if (!c->net_name != !c->net_dir || (c->net_host && c->net_name)) {
        snprintf(msg, len, "the box description's network lacks a name or a directory");
        return -1;
    }
    c->userns = json_is_true(json_object_get(j, "userns"));
    c->userns_base = (unsigned)jnum(j, "userns_base", 0);
    c->userns_slots = (unsigned)jnum(j, "userns_slots", 0);
    c->seccomp = !json_is_false(json_object_get(j, "seccomp"));
    c->die_with_creator = json_is_true(json_object_get(j, "die_with_creator"));
    c->upper_size = (long long)jnum(j, "upper_size", 0);
    c->log_max_bytes = (long long)jnum(j, "log_max_bytes", SBX_LINUX_DEFAULT_LOG_MAX_BYTES);
    c->nofile_soft = (long long)jnum(j, "nofile_soft", 0);
    c->nofile_hard = (long long)jnum(j, "nofile_hard", 0);
    c->ttl_s = jnum(j, "ttl_s", -1);
    c->ready_timeout_s = jnum(j, "ready_timeout_s", SBX_LINUX_DEFAULT_READY_TIMEOUT_S);
    c->stop_grace_s = jnum(j, "stop_grace_s", 0);
    c->limits.memory_bytes = (long long)jnum(j, "memory_bytes", 0);
    c->limits.pids = (long long)jnum(j, "pids", 0);
    c->limits.cpu = jnum(j, "cpu", 0);
    c->limits.memory_only_limited = json_is_true(json_object_get(j, "memory_cgroup_limited"));
    c->env = json_object_get(j, "env");
    c->entrypoint = json_object_get(j, "entrypoint");
    c->lowers = json_object_get(j, "lowers");
    if (!json_is_array(c->lowers) || json_array_size(c->lowers) < 1 ||
        json_array_size(c->lowers) > SHIM_MAX_LOWERS)
        c->lowers = NULL;
    for (size_t i = 0; c->lowers && i < json_array_size(c->lowers); i++)
        if (!json_is_string(json_array_get(c->lowers, i)))
            c->lowers = NULL;
    c->metadata = json_object_get(j, "metadata");
    c->cdi = json_object_get(j, "cdi");
    if (!json_is_object(c->cdi))
        c->cdi = NULL;
    if (!json_is_array(c->entrypoint))
        c->entrypoint = NULL;
    if (!c->id || !c->box_dir || !c->hostname || !c->lower || !c->agent || !c->state_dir) {
        snprintf(msg, len, "the box description lacks id, box_dir, hostname, lower or agent");
        return -1;
    }
    if (c->net == SBX_LINUX_NET_NAT && (!c->pasta || c->pasta[0] != '/' || !c->nft ||
                                        c->nft[0] != '/')) {
        snprintf(msg, len, "the box description of a nat box lacks the paths of pasta or sbx-nft");
        return -1;
    }
    if (c->net_name && (!c->nft || c->nft[0] != '/')) {
        snprintf(msg, len, "the box description of a box on a network lacks the path of sbx-nft");
        return -1;
    }
    return 0;
}

static int write_record(struct shim *s, const char *state)
{
    const struct shim_cfg *c = &s->cfg;
    _cleanup_json_ json_t *r = json_object();
    _cleanup_free_ char *sock = sbx__printf("%s/run/agent.sock", c->box_dir);
    if (!r || !sock)
        return -1;
    json_object_set_new(r, "id", json_string(c->id));
    json_object_set_new(r, "state", json_string(state));
    json_object_set_new(r, "created", json_real(s->created));
    json_object_set_new(r, "ttl_s", c->ttl_s >= 0 ? json_real(c->ttl_s) : json_null());
    json_object_set_new(r, "expires_at", json_real(s->expires));
    json_object_set_new(r, "image", c->image ? json_string(c->image) : json_null());
    json_object_set_new(r, "hostname", json_string(c->hostname));
    json_object_set_new(r, "metadata", c->metadata ? json_incref(c->metadata) : json_object());
    json_object_set_new(r, "env", c->env ? json_incref(c->env) : json_array());
    json_object_set_new(r, "workdir", c->workdir ? json_string(c->workdir) : json_null());
    json_object_set_new(r, "shim_pid", json_integer(getpid()));
    json_object_set_new(r, "shim_start", json_integer((json_int_t)sbx__linux_proc_start(getpid())));
    json_object_set_new(r, "init_pid", json_integer(s->init));
    json_object_set_new(r, "agent_socket", json_string(sock));
    static const char *const nets[] = { "none", "host", "nat" };
    json_object_set_new(r, "net", json_string(c->net_name ? c->net_name : nets[c->net]));
    /* [nat] pasta's pid: the box's helper process, while it runs. */
    json_object_set_new(r, "pasta_pid", s->pasta > 0 ? json_integer(s->pasta) : json_null());
    /* [netw] The box's address in its network: what network_address answers. */
    json_object_set_new(r, "address", c->net_addr ? json_string(c->net_addr) : json_null());
    /* The host uid (and gid) box root maps to; null: no user namespace. */
    json_object_set_new(r, "userns_uid", c->userns ? json_integer(c->uid_base) : json_null());
    json_object_set_new(r, "cgroups", s->cgroups ? json_incref(s->cgroups) : json_array());
    /* [img-commit] The upper dir as /proc/<shim_pid>/fd/<upper_fd>; null: not known. */
    json_object_set_new(r, "upper_fd", s->upper_fd >= 0 ? json_integer(s->upper_fd) : json_null());
    /* [img-commit] The layers the box stacks, top first: what a commit builds on. */
    json_object_set_new(r, "lowers", c->lowers ? json_incref(c->lowers) : json_null());
    /*
     * [svc-logs] The service (entrypoint): {"state": "running" | "exited" |
     * "killed", "code": exit status or signal}; null: the box has none. As
     * the agent reported it on the ready pipe.
     */
    json_object_set_new(r, "service",
                        s->service ? json_pack("{s:s, s:i}", "state", s->service, "code",
                                               s->service_code)
                                   : json_null());
    json_object_set_new(r, "log_dropped", json_integer((json_int_t)s->log.dropped));
    /* [volumes] What the box mounts: `sbx volume rm` refuses a volume a running box uses. */
    json_object_set_new(r, "volumes", json_is_array(json_object_get(c->json, "volumes"))
                                          ? json_incref(json_object_get(c->json, "volumes"))
                                          : json_array());
    /* [endpoint] The host listeners of the box's ports: what endpoint() reads. */
    if (s->ports.record)
        json_object_set_new(r, "ports", json_incref(s->ports.record));
    _cleanup_free_ char *text = json_dumps(r, JSON_COMPACT);
    _cleanup_free_ char *path = sbx__printf("%s/record.json", c->box_dir);
    if (!text || !path)
        return -1;
    /*
     * 0600: the record holds the box's env (API keys, tokens). Only the
     * box's owner reads it; written through a fresh O_EXCL temp file and a
     * rename, so a reader never sees half a record.
     */
    return sbx__write_file_atomic(path, text, strlen(text), 0600);
}

/* Undoes any freeze of the box (a commit's, whoever made it: freeze.c). */
static void thaw_box(struct shim *s)
{
    if (s->cgroups)
        sbx__cg_thaw(s->cfg.id, s->cgroups);
}

/* Kills the box (its PID 1 takes the whole pid namespace with it) and reaps it. */
static void kill_box(struct shim *s)
{
    if (s->init <= 0)
        return;
    /*
     * Thawed first: on cgroup v1 a frozen process takes no signal, SIGKILL
     * included, so a box frozen by a commit (or left frozen by one that was
     * killed) would hold this teardown, and the stop, for good.
     */
    thaw_box(s);
    if (s->cfg.stop_grace_s > 0 && s->ready) {
        /* The agent forwards SIGTERM to the entrypoint; give it the grace period. */
        kill(s->init, SIGTERM);
        double end = mono() + s->cfg.stop_grace_s;
        while (mono() < end) {
            if (waitpid(s->init, &s->init_status, WNOHANG) == s->init) {
                s->init = 0;
                thaw_box(s);
                return;
            }
            struct timespec ts = { 0, 10 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    /*
     * A commit that froze the box after that thaw (it started as the stop
     * came) is undone too: while the box has not died, it is thawed and
     * killed again every 100 ms. Without pidfds, one blocking wait.
     */
    int pfd = sbx__linux_pidfd_open(s->init);
    kill(s->init, SIGKILL);
    while (pfd >= 0) {
        struct pollfd p = { .fd = pfd, .events = POLLIN };
        int r = poll(&p, 1, 100);
        if (r > 0 || (r < 0 && errno != EINTR))
            break;
        if (r == 0) {
            thaw_box(s);
            kill(s->init, SIGKILL);
        }
    }
    if (pfd >= 0)
        close(pfd);
    while (waitpid(s->init, &s->init_status, 0) < 0 && errno == EINTR)
        ;
    s->init = 0;
    thaw_box(s); /* a v1 freezer group made meanwhile goes before the cgroups do */
}

/* Removes everything the box had on the host, closes the control socket, exits. */
static void net_port_unfilter(struct shim *s);

__attribute__((noreturn)) static void teardown(struct shim *s, int code)
{
    shim_trace("teardown");
    /* [endpoint] The listeners go first: no new connection into a dying box. */
    shim_forwarder_stop(&s->fwd);
    shim_ports_close(&s->ports);
    shim_nat_stop(&s->pasta); /* [nat] no packet leaves for a box being torn down */
    /*
     * Then a teardown slot: with thousands of boxes stopped at once, each
     * teardown runs alongside a bounded few, and the stop's deadline counts
     * from here (teardown.c). The lock goes with the process.
     */
    if (s->cfg.state_dir && s->cfg.box_dir && strcmp(s->cfg.box_dir, "/nonexistent"))
        (void)sbx__linux_teardown_begin(s->cfg.state_dir, s->cfg.box_dir,
                                        sbx__linux_teardown_slots(), s->teardown_fds);
    shim_trace("teardown slot");
    kill_box(s);
    shim_trace("box reaped");
    if (s->cgroups)
        sbx__cg_destroy(s->cgroups);
    shim_trace("cgroups removed");
    sbx__rm_rf(s->cfg.box_dir);
    shim_trace("directory removed");
    /* [netw] After the box is gone (its veth died with its namespace): peers forget it. */
    if (s->cfg.net_addr) {
        net_port_unfilter(s);
        sbx__linux_net_leave(s->cfg.net_dir, s->cfg.id);
    }
    if (s->ctl >= 0)
        close(s->ctl); /* the provider waits for this EOF: everything is gone */
    _exit(code);
}

/*
 * [netw] The port filter's chain goes with the box: the kernel drops a
 * netdev chain with its device on some versions and keeps it (deviceless)
 * on others, so it is deleted here, after an add that makes the delete
 * succeed either way. Best effort: a failure leaves an inert chain.
 */
static void net_port_unfilter(struct shim *s)
{
    const struct shim_cfg *c = &s->cfg;
    char port[16];
    sbx__linux_net_port(c->id, port);
    _cleanup_free_ char *ns = sbx__printf("%s/netns", c->net_dir);
    _cleanup_free_ char *rules = sbx__printf("add table netdev sbx\n"
                                             "add chain netdev sbx %s\n"
                                             "delete chain netdev sbx %s\n",
                                             port, port);
    int nsfd = ns ? open(ns, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    int mfd = memfd_create("sbx-nft", MFD_CLOEXEC);
    size_t rl = rules ? strlen(rules) : 0;
    if (nsfd >= 0 && mfd >= 0 && c->nft && rules && write(mfd, rules, rl) == (ssize_t)rl &&
        lseek(mfd, 0, SEEK_SET) == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
            if (setns(nsfd, CLONE_NEWNET) < 0 || dup2(mfd, 0) < 0 || devnull < 0 ||
                dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
                _exit(126);
            char *const argv[] = { (char *)"sbx-nft", NULL };
            execv(c->nft, argv);
            _exit(127);
        }
        int st;
        while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
    }
    if (nsfd >= 0)
        close(nsfd);
    if (mfd >= 0)
        close(mfd);
}

__attribute__((noreturn, format(printf, 3, 4))) static void fail(struct shim *s, int code,
                                                                 const char *fmt, ...)
{
    char msg[1200];
    int n = snprintf(msg, sizeof(msg), "error %d ", code);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    s->failed = true;
    ctl_send(s, msg);
    teardown(s, 1);
}

static int pipe_cloexec(int p[2]) { return pipe2(p, O_CLOEXEC); }

static void write_id_map(struct shim *s, const char *file, const char *map)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", (int)s->init, file);
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, map, strlen(map)) != (ssize_t)strlen(map))
        fail(s, SBX_ECREATE, "cannot write %s for the box's user namespace: %s", file,
             strerror(errno));
}

/*
 * userns: reserves a uid range for this box. Slot k is host uids (and gids)
 * userns_base + k*65536 .. +65535, held by an flock on <state>/userns/<k>
 * for the shim's whole life: a crashed shim's lock goes with it, and every
 * file of the range lived in the box's tmpfs or in its directory, both gone
 * by then, so a slot is free for reuse as soon as it can be locked.
 * The search starts at a slot hashed from our pid, so concurrent creates
 * rarely try the same slots.
 */
static void reserve_uid_range(struct shim *s)
{
    struct shim_cfg *c = &s->cfg;
    _cleanup_free_ char *dir = sbx__printf("%s/userns", c->state_dir);
    if (!dir || sbx__mkdir_p(dir, 0700) < 0)
        fail(s, SBX_ECREATE, "cannot create %s/userns: %s", c->state_dir, strerror(errno));
    unsigned n = c->userns_slots;
    if (n == 0 || (unsigned long long)c->userns_base +
                          (unsigned long long)n * SHIM_USERNS_SIZE > 0xFFFFFFFFull)
        fail(s, SBX_EINVAL, "userns_base %u with %u slots of %u ids exceeds the uid space",
             c->userns_base, n, SHIM_USERNS_SIZE);
    unsigned start = (unsigned)getpid() * 2654435761u % n;
    for (unsigned i = 0; i < n; i++) {
        unsigned k = (start + i) % n;
        char name[32];
        snprintf(name, sizeof(name), "/%u", k);
        _cleanup_free_ char *path = sbx__printf("%s%s", dir, name);
        int fd = path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
        if (fd < 0)
            fail(s, SBX_ECREATE, "cannot open the uid slot %s: %s", path ? path : name,
                 strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            s->slot_fd = fd;
            c->uid_base = c->userns_base + k * SHIM_USERNS_SIZE;
            return;
        }
        close(fd);
    }
    fail(s, SBX_ECREATE,
         "all %u user-namespace uid ranges are in use by running boxes (raise userns_slots)", n);
}

/*
 * A detached copy of `path` (recursive), idmapped through the box's user
 * namespace: host uid u shows as u - uid_base inside, so host root's files
 * belong to the box's root. The child cannot make it: creating an idmapped
 * mount needs CAP_SYS_ADMIN over the filesystem's own namespace (the host's).
 */
static int idmapped_tree(struct shim *s, int userns_fd, const char *path, bool ro)
{
    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path,
                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (fd < 0)
        fail(s, SBX_ECREATE, "cannot clone the mount of %s for the box's user namespace "
                             "(open_tree): %s", path, strerror(errno));
    struct mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                           (ro ? MOUNT_ATTR_RDONLY : 0),
                               .userns_fd = (uint64_t)userns_fd };
    if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0) {
        int e = errno;
        struct statfs sf;
        char fstype[32] = "unknown";
        if (fstatfs(fd, &sf) == 0)
            snprintf(fstype, sizeof(fstype), "0x%lx", (unsigned long)sf.f_type);
        close(fd);
        fail(s, SBX_ECREATE,
             "cannot make an idmapped mount of %s for the box's user namespace: %s (its "
             "filesystem, magic %s, or one mounted under it, may not support idmapped mounts; "
             "put the image on ext4, xfs or btrfs (tmpfs from Linux 6.3), or leave userns unset)",
             path, strerror(e), fstype);
    }
    return fd;
}

/*
 * userns: the go message. Makes the idmapped trees the child attaches (the
 * image, and for the none image the host system directories) and sends
 * them with "g" over the sync socket; they close here once sent.
 */
static void send_idmapped(struct shim *s, int sock)
{
    const struct shim_cfg *c = &s->cfg;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)s->init);
    _cleanup_close_ int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0)
        fail(s, SBX_ECREATE, "cannot open %s: %s", path, strerror(errno));
    int fds[SHIM_MAX_LOWERS + 16];
    char names[2048] = "g";
    size_t len = 1, nfds = 0;
    /* One idmapped tree per layer, in order: the child stacks them as sent. */
    size_t nl = c->lowers ? json_array_size(c->lowers) : 1;
    for (size_t i = 0; i < nl; i++) {
        fds[nfds++] = idmapped_tree(
            s, ns, c->lowers ? json_string_value(json_array_get(c->lowers, i)) : c->lower, true);
        len += (size_t)snprintf(names + len, sizeof(names) - len, "lower") + 1;
    }
    for (size_t i = 0; c->none_image && i < shim_n_host_system_dirs && nfds < 17; i++) {
        struct stat st;
        /* Real directories only: a merged-/usr host's /bin is a link the skeleton has too. */
        if (lstat(shim_host_system_dirs[i], &st) < 0 || !S_ISDIR(st.st_mode))
            continue;
        fds[nfds++] = idmapped_tree(s, ns, shim_host_system_dirs[i], true);
        len += (size_t)snprintf(names + len, sizeof(names) - len, "%s",
                                shim_host_system_dirs[i]) + 1;
    }
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(fds))];
    } u;
    memset(&u, 0, sizeof(u));
    struct iovec iov = { names, len };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    ssize_t w = sendmsg(sock, &m, MSG_NOSIGNAL);
    for (size_t i = 0; i < nfds; i++)
        close(fds[i]);
    if (w < 0)
        fail(s, SBX_ECREATE, "the box's first process died before it started");
}

/*
 * [img-commit] The upper dir's descriptor the child sends once it made it
 * (box.c send_upper); kept for `sbx commit`. A child that dies first
 * closes the socket: no descriptor, and its error arrives on the err pipe.
 */
static void recv_upper(struct shim *s, int sock)
{
    struct timeval tv = { 30, 0 };
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char b[4];
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct iovec iov = { b, sizeof(b) };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof(u.buf) };
    ssize_t n;
    while ((n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    struct cmsghdr *cm = n == 1 && b[0] == 'u' ? CMSG_FIRSTHDR(&m) : NULL;
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
        cm->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(&s->upper_fd, CMSG_DATA(cm), sizeof(int));
}

/* Everything up to the agent's exec; fills s->init and the pipes. */
/*
 * [netw] Joins the box's network before the clone: an address, and the
 * hosts file the box binds read-only at /etc/hosts (a volume entry, so the
 * box mounts it the way it mounts every volume). Host root's: the box can
 * read its peers' names but not change them.
 */
static void net_join(struct shim *s)
{
    struct shim_cfg *c = &s->cfg;
    sbx_error *e = NULL;
    if (sbx__linux_net_join(c->net_dir, c->id, c->hostname, c->box_dir, &c->net_addr,
                            &c->net_prefix, &e) < 0) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", sbx_error_message(e));
        sbx_error_free(e);
        fail(s, SBX_ECREATE, "%s", msg);
    }
    json_t *vols = json_object_get(c->json, "volumes");
    if (!json_is_array(vols)) {
        vols = json_array();
        json_object_set_new(c->json, "volumes", vols);
    }
    char *hosts = sbx__printf("%s/hosts", c->box_dir);
    if (!vols || !hosts ||
        json_array_append_new(vols, json_pack("{s:s, s:s, s:s, s:b, s:s}", "type", "bind",
                                              "source", hosts, "target", "/etc/hosts",
                                              "read_only", 1, "kind", "file")) < 0)
        fail(s, SBX_ECREATE, "out of memory");
    free(hosts);
    shim_trace("network joined");
}

/*
 * [netw] The filter on the box's bridge port, in the network's namespace,
 * before the box has an address or runs a line of its own: it may send
 * only from its own MAC and address (ARP spoofing, docs/networking.md).
 * The chain is bound to the port's device and goes with it.
 */
static void net_port_filter(struct shim *s)
{
    const struct shim_cfg *c = &s->cfg;
    _cleanup_free_ char *ns = sbx__printf("%s/netns", c->net_dir);
    _cleanup_free_ char *rules = sbx__linux_net_port_rules(c->id, c->net_addr);
    if (!ns || !rules)
        fail(s, SBX_ECREATE, "out of memory");
    _cleanup_close_ int nsfd = open(ns, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct statfs fs;
    if (nsfd < 0 || fstatfs(nsfd, &fs) < 0 || fs.f_type != NSFS_MAGIC)
        fail(s, SBX_ECREATE, "the network namespace %s is gone: remove the network and create "
                             "it again", ns);
    char msg[1024];
    if (shim_nft_load(c, nsfd, rules, false, "the filter of the box's port on its network", msg,
                      sizeof(msg)) < 0)
        fail(s, SBX_ECREATE, "%s", msg);
    shim_trace("port filter loaded");
}

static void start_box(struct shim *s)
{
    const struct shim_cfg *c = &s->cfg;
    sbx_error *e = NULL;

    shim_trace("start_box");
    if (c->userns)
        reserve_uid_range(s);
    /* Cgroups before the clone: the child must not run a step outside them. */
    if (sbx__cg_create(c->id, &c->limits, &s->cgroups, &e) < 0) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", sbx_error_message(e));
        sbx_error_free(e);
        fail(s, SBX_ECREATE, "%s", msg);
    }
    shim_trace("cgroups made");
    if (c->net_name)
        net_join(s);
    /*
     * The seccomp program, ready before the clone so the box only has to
     * load it. Without one (no memory, say) the box compiles its own.
     */
    static struct sock_fprog filter;
    if (c->seccomp && !filter.filter && shim_seccomp_filter(c, &filter) < 0)
        filter.filter = NULL;
    int agent_fd = open(c->agent, O_PATH | O_CLOEXEC);
    if (agent_fd < 0)
        fail(s, SBX_ECREATE, "cannot open the agent binary %s: %s (build it with make)",
             c->agent, strerror(errno));
    /* sync is a socket: in userns mode the go message carries the idmapped mounts. */
    int sync[2], errp[2], ready[2], outp[2], errl[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sync) < 0 ||
        pipe_cloexec(errp) < 0 || pipe_cloexec(ready) < 0 || pipe_cloexec(outp) < 0 ||
        pipe_cloexec(errl) < 0)
        fail(s, SBX_ECREATE, "pipe: %s", strerror(errno));
    /*
     * [svc-logs] Room for a burst while the shim is busy (best effort: the
     * kernel may cap it); the read ends never block the shim's loop.
     */
    fcntl(outp[1], F_SETPIPE_SZ, 256 * 1024);
    fcntl(errl[1], F_SETPIPE_SZ, 256 * 1024);
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    fcntl(errl[0], F_SETFL, O_NONBLOCK);
    s->service = c->entrypoint ? "running" : NULL;
    if (shim_log_open(&s->log, c->box_dir, c->log_max_bytes) < 0)
        fail(s, SBX_ECREATE, "cannot create %s: %s", s->log.path ? s->log.path : "service.log",
             strerror(errno));

    /*
     * One clone for every namespace: the child is PID 1 of the new pid
     * namespace and can mount its /proc. The cgroup namespace comes later,
     * from inside, once the child sits in its own groups (box.c step 3).
     * With CLONE_NEWUSER the child has no privilege on the host at all; its
     * mounts are owned by the new user namespace.
     */
    unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | SIGCHLD;
    if (!c->net_host)
        flags |= CLONE_NEWNET;
    if (c->userns)
        flags |= CLONE_NEWUSER;
    /*
     * On cgroup v2, clone3(CLONE_INTO_CGROUP) starts the child inside the
     * box's group: no attach afterwards, and no wait for the RCU grace period
     * a write to cgroup.procs costs. v1 (and kernels before 5.7) attach below.
     */
    /*
     * The child builds the box relative to its cwd, the box directory: in a
     * user namespace it may not search the state directory's parents.
     */
    if (chdir(c->box_dir) < 0)
        fail(s, SBX_ECREATE, "cannot enter %s: %s", c->box_dir, strerror(errno));
    pid_t pid = -1;
    bool attached = false;
    if (sbx__cg_mode() == SBX_CG_V2 && s->cgroups && json_array_size(s->cgroups) == 1) {
        int cgfd = open(json_string_value(json_array_get(s->cgroups, 0)),
                        O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (cgfd >= 0) {
            struct clone_args ca = { .flags = (flags & ~0xffUL) | CLONE_INTO_CGROUP,
                                     .exit_signal = SIGCHLD,
                                     .cgroup = (uint64_t)cgfd };
            pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
            attached = pid >= 0;
            if (pid != 0)
                close(cgfd);
        }
    }
    if (pid < 0)
        pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (pid < 0) {
        int ce = errno;
        char hint[256];
        sbx__linux_pid_hint(ce, hint, sizeof(hint));
        fail(s, SBX_ECREATE, "cannot create the box's namespaces (clone): %s%s%s", strerror(ce),
             ce == EPERM ? " (run as root, or enable user namespaces)" : "", hint);
    }
    if (pid == 0) {
        /* The child: keep only what it needs. */
        close(sync[1]);
        close(errp[0]);
        close(ready[0]);
        close(outp[0]);
        close(errl[0]);
        if (s->log.fd >= 0)
            close(s->log.fd);
        /* v1: the child joins its groups itself (box.c step 2). */
        bool self = !attached && sbx__cg_mode() == SBX_CG_V1 && s->cgroups;
        struct child_fds f = { sync[0], errp[1], ready[1], agent_fd,
                               self ? s->cgroups : NULL, filter.filter ? &filter : NULL,
                               outp[1], errl[1] };
        shim_box_child(c, &f);
    }
    s->init = pid;
    shim_trace("cloned");
    /*
     * [nat] pasta and the policy while the child still waits for its go
     * message: no box code runs, so no packet can leave, before the rules
     * hold (nat.c). pasta starts first so that its start-up (the longer)
     * overlaps the ruleset's load.
     */
    if (c->net == SBX_LINUX_NET_NAT) {
        char nmsg[1024];
        if ((s->pasta = shim_nat_start(c, pid, nmsg, sizeof(nmsg))) < 0) {
            s->pasta = 0;
            fail(s, SBX_ECREATE, "%s", nmsg);
        }
        if (shim_nat_filter(c, pid, nmsg, sizeof(nmsg)) < 0)
            fail(s, SBX_ECREATE, "%s", nmsg);
        shim_trace("egress policy loaded");
        int w = shim_nat_wait(c, s->pasta, c->ready_timeout_s > 0 ? c->ready_timeout_s : 30, nmsg,
                              sizeof(nmsg));
        if (w == -2)
            s->pasta = 0;
        if (w < 0)
            fail(s, SBX_ECREATE, "%s", nmsg);
        shim_trace("pasta ready");
    }
    /* The shim itself must not keep the box directory busy as its cwd. */
    if (chdir("/") < 0)
        fail(s, SBX_ECREATE, "chdir /: %s", strerror(errno));
    close(sync[0]);
    close(errp[1]);
    close(ready[1]);
    close(outp[1]);
    close(errl[1]);
    close(agent_fd);
    s->err_r = errp[0];
    s->ready_r = ready[0];
    s->out_r = outp[0];
    s->errl_r = errl[0];

    /*
     * Into the cgroups first (unless the child joins them itself), then the
     * uid maps and idmapped mounts (a user namespace's child can do nothing
     * privileged before), then the go message that releases it.
     */
    bool self_attached = !attached && sbx__cg_mode() == SBX_CG_V1;
    if (s->cgroups && !attached && !self_attached && sbx__cg_attach(s->cgroups, pid, &e) < 0) {
        char msg[1024];
        snprintf(msg, sizeof(msg), "%s", sbx_error_message(e));
        sbx_error_free(e);
        fail(s, SBX_ECREATE, "%s", msg);
    }
    shim_trace("attached");
    if (c->userns) {
        char map[64];
        snprintf(map, sizeof(map), "0 %u %u\n", c->uid_base, SHIM_USERNS_SIZE);
        /* setgroups must be denied before an unprivileged gid_map; as root we keep it. */
        write_id_map(s, "uid_map", map);
        write_id_map(s, "gid_map", map);
        shim_trace("uid maps written");
        send_idmapped(s, sync[1]);
        shim_trace("idmapped mounts sent");
    } else if ((!self_attached || c->net == SBX_LINUX_NET_NAT) && write(sync[1], "g", 1) != 1) {
        fail(s, SBX_ECREATE, "the box's first process died before it started");
    }
    if (c->net_addr) {
        /* [netw] The veth, now that the box's namespace exists; "n" lets the box set its end. */
        if (sbx__linux_net_attach(c->net_dir, c->id, c->net_addr, pid, &e) < 0) {
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", sbx_error_message(e));
            sbx_error_free(e);
            fail(s, SBX_ECREATE, "%s", msg);
        }
        net_port_filter(s);
        if (write(sync[1], "n", 1) != 1)
            fail(s, SBX_ECREATE, "the box's first process died before it started");
        shim_trace("network attached");
    }
    recv_upper(s, sync[1]);
    close(sync[1]);
    if (write_record(s, "creating") < 0)
        fail(s, SBX_ECREATE, "cannot write the box record: %s", strerror(errno));
}

/* [svc-logs] Everything the box wrote before it ended goes into the log first. */
static void drain_logs(struct shim *s)
{
    for (int i = 0; i < 64 && (s->out_r >= 0 || s->errl_r >= 0); i++) {
        int out = s->out_r, err = s->errl_r;
        if (s->out_r >= 0)
            shim_log_drain(&s->log, &s->out_r, SBX_LOG_STDOUT);
        if (s->errl_r >= 0)
            shim_log_drain(&s->log, &s->errl_r, SBX_LOG_STDERR);
        if (out == s->out_r && err == s->errl_r)
            break; /* both still open: drained up to EAGAIN, or a turn's share */
    }
}

/*
 * [svc-logs] One line from the agent after "R": "exited N" or "killed N"
 * when its service ended. The agent runs as the box's root, so the line is
 * the box's word: parsed strictly, and only ever changes the service's
 * state in the record.
 */
static void on_agent_line(struct shim *s, const char *line)
{
    const char *state = NULL;
    const char *num = NULL;
    /* One end per service: a box repeating the line gets no more record writes for it. */
    if (!s->service || strcmp(s->service, "running"))
        return;
    if (!strncmp(line, "exited ", 7))
        state = "exited", num = line + 7;
    else if (!strncmp(line, "killed ", 7))
        state = "killed", num = line + 7;
    if (!state)
        return;
    char *end;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (errno || end == num || *end || v < 0 || v > 255 || !(*num >= '0' && *num <= '9'))
        return;
    s->service = state;
    s->service_code = (int)v;
    /* The output the service wrote before it ended comes first, then the event. */
    drain_logs(s);
    char ev[32];
    int n = snprintf(ev, sizeof(ev), "%s %ld", state, v);
    shim_log_append(&s->log, SBX_LOG_EVENT, ev, (size_t)n);
    if (s->acked)
        write_record(s, "running");
}

static void on_ready_bytes(struct shim *s, const char *b, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        if (b[i] == '\n') {
            s->rmsg[s->rmsg_len] = 0;
            if (!s->rmsg_skip)
                on_agent_line(s, s->rmsg);
            s->rmsg_len = 0;
            s->rmsg_skip = false;
        } else if (s->rmsg_len + 1 < sizeof(s->rmsg)) {
            s->rmsg[s->rmsg_len++] = b[i];
        } else {
            s->rmsg_skip = true; /* too long for any message: ignored up to its newline */
        }
    }
}

/*
 * One read of the child's setup-error pipe. EOF: the setup exec'd the
 * agent (the write end is CLOEXEC), or it died after writing why, which
 * fails the box with that reason.
 */
static void read_setup_error(struct shim *s)
{
    ssize_t k = read(s->err_r, s->errbuf + s->errlen, sizeof(s->errbuf) - 1 - s->errlen);
    if (k < 0 && errno == EINTR)
        return;
    if (k > 0) {
        s->errlen += (size_t)k;
        return;
    }
    close(s->err_r);
    s->err_r = -1;
    shim_trace("agent exec'd");
    if (s->errlen)
        fail(s, SBX_ECREATE, "%.*s", (int)s->errlen, s->errbuf);
}

static void on_init_exit(struct shim *s)
{
    int st = s->init_status;
    s->init = 0;
    drain_logs(s);
    if (!s->ready) {
        /*
         * The child wrote why it failed before it exited, but its exit may
         * be seen in the same poll round as those bytes, before them: read
         * what the pipe holds now, so the reason is never lost.
         */
        while (s->err_r >= 0) {
            struct pollfd ep = { .fd = s->err_r, .events = POLLIN };
            if (poll(&ep, 1, 0) <= 0)
                break;
            read_setup_error(s);
        }
        if (s->errlen)
            fail(s, SBX_ECREATE, "%.*s", (int)s->errlen, s->errbuf);
        if (WIFEXITED(st))
            fail(s, SBX_ECREATE, "the agent exited with status %d before it was ready",
                 WEXITSTATUS(st));
        fail(s, SBX_ECREATE, "the agent was killed by signal %d before it was ready",
             WTERMSIG(st));
    }
    if (!s->acked)
        fail(s, SBX_EVERIFY, "the agent died before the box was handed over");
    /*
     * The agent died under a running box. Its pid namespace died with it;
     * free the cgroups now, keep the directory with an "error" record so the
     * owner sees status error, until a stop or the TTL. Thawed first: a
     * process of the box left frozen would never die and free its group.
     */
    thaw_box(s);
    if (s->cgroups)
        sbx__cg_destroy(s->cgroups);
    json_decref(s->cgroups);
    s->cgroups = json_array();
    /* [nat] pasta would keep the dead box's namespace (and itself) alive. */
    shim_nat_stop(&s->pasta);
    /*
     * [endpoint] The forwarder also ends by itself when it sees the agent go,
     * but it may not have watched it yet (its pidfd_open can come after the
     * agent's death and reap): end it here, so no listener outlives the box.
     */
    shim_forwarder_stop(&s->fwd);
    /* [svc-logs] The log's last event: a follower stops here, and a reader sees why. */
    char ev[48];
    int n = snprintf(ev, sizeof(ev), "agent %s %d", WIFEXITED(st) ? "exited" : "killed",
                     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    shim_log_append(&s->log, SBX_LOG_EVENT, ev, (size_t)n);
    write_record(s, "error");
}

/*
 * Who sent a stop signal, in words: " from pid N (comm)"; without a sender
 * pid, the kernel or a process of a pid namespace we cannot see. The name is
 * best effort: the sender may be gone.
 */
static void signal_sender(pid_t pid, char *buf, size_t len)
{
    if (pid <= 0) {
        snprintf(buf, len, " from the kernel or another pid namespace");
        return;
    }
    char path[64], comm[32] = "";
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, comm, sizeof(comm) - 1) : -1;
    comm[n > 0 ? n : 0] = 0;
    comm[strcspn(comm, "\n")] = 0;
    if (comm[0])
        snprintf(buf, len, " from pid %d (%s)", (int)pid, comm);
    else
        snprintf(buf, len, " from pid %d", (int)pid);
}

static void handle_signals(struct shim *s)
{
    struct signalfd_siginfo si;
    while (read(s->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD) {
            if (s->init > 0 && waitpid(s->init, &s->init_status, WNOHANG) == s->init)
                on_init_exit(s);
            /* [endpoint] The forwarder ends on its own with the agent: reap it. */
            if (s->fwd > 0 && waitpid(s->fwd, NULL, WNOHANG) == s->fwd)
                s->fwd = 0;
            /* [nat] pasta died: the box has no way out any more, which is what it may keep. */
            if (s->pasta > 0 && waitpid(s->pasta, NULL, WNOHANG) == s->pasta)
                s->pasta = 0;
            continue;
        }
        /*
         * SIGTERM, SIGINT, SIGHUP: a stop. One before the creator took the box
         * fails the create: the creator is told what stopped it and by whom.
         */
        if (!s->acked && s->ctl >= 0) {
            char from[80];
            const char *name = sigabbrev_np((int)si.ssi_signo);
            signal_sender((pid_t)si.ssi_pid, from, sizeof(from));
            fail(s, SBX_ECREATE,
                 "the box's supervisor (sbx-shim, pid %d) got SIG%s%s before the box was "
                 "handed over, and tore the box down",
                 (int)getpid(), name ? name : "?", from);
        }
        teardown(s, 0);
    }
}

static void supervise(struct shim *s)
{
    for (;;) {
        struct pollfd p[7];
        int n = 0;
        p[n++] = (struct pollfd){ .fd = s->sfd, .events = POLLIN };
        int i_ctl = -1, i_err = -1, i_ready = -1, i_out = -1, i_errl = -1;
        if (s->out_r >= 0) {
            i_out = n;
            p[n++] = (struct pollfd){ .fd = s->out_r, .events = POLLIN };
        }
        if (s->errl_r >= 0) {
            i_errl = n;
            p[n++] = (struct pollfd){ .fd = s->errl_r, .events = POLLIN };
        }
        if (s->ctl >= 0) {
            i_ctl = n;
            p[n++] = (struct pollfd){ .fd = s->ctl, .events = POLLIN };
        }
        if (s->err_r >= 0) {
            i_err = n;
            p[n++] = (struct pollfd){ .fd = s->err_r, .events = POLLIN };
        } else if (s->ready_r >= 0) {
            /* Readiness only matters once the setup has exec'd the agent. */
            i_ready = n;
            p[n++] = (struct pollfd){ .fd = s->ready_r, .events = POLLIN };
        }
        double timeout = -1, now = mono();
        if (!s->ready)
            timeout = s->ready_deadline - now;
        if (s->expires > 0) {
            double t = s->expires - unix_now();
            if (timeout < 0 || t < timeout)
                timeout = t;
        }
        int ms = timeout < 0 ? -1 : (int)(timeout * 1000) + 1;
        if (timeout < 0 && (s->expires > 0 || !s->ready))
            ms = 0;
        int dir_ms = (int)((s->next_dir_check - now) * 1000) + 1;
        if (ms < 0 || dir_ms < ms)
            ms = dir_ms < 0 ? 0 : dir_ms;
        int r = poll(p, (nfds_t)n, ms);
        if (r < 0 && errno != EINTR)
            fail(s, SBX_EPROVIDER, "poll: %s", strerror(errno));
        if (mono() >= s->next_dir_check) {
            /*
             * Someone removed or moved the box directory (rm -rf of the state
             * directory): nobody can reach or stop this box any more, so end
             * it rather than run on forever. A look every few seconds, not an
             * inotify instance per box: root has only 128 of those
             * (fs.inotify.max_user_instances) for every program on the host.
             */
            struct stat dst;
            if (stat(s->cfg.box_dir, &dst) < 0 ? errno == ENOENT || errno == ENOTDIR
                                               : dst.st_ino != s->dir_ino || dst.st_dev != s->dir_dev)
                teardown(s, 1);
            /*
             * [img-commit] A commit's freeze whose process died (its lock on
             * <box>/freeze went with it) is undone here: the shim outlives
             * every commit (freeze.c). One failed open when there is none.
             */
            if (s->cgroups)
                sbx__linux_freeze_reap(s->cfg.box_dir, s->cfg.id, s->cgroups);
            s->next_dir_check = mono() + DIR_CHECK_S;
        }
        if (r <= 0) {
            if (!s->ready && mono() >= s->ready_deadline)
                fail(s, SBX_EVERIFY,
                     "the box's agent did not become ready within %gs (ready_timeout_s)",
                     s->cfg.ready_timeout_s);
            if (s->expires > 0 && unix_now() >= s->expires)
                teardown(s, 0); /* TTL */
            continue;
        }
        /* The output first: a service's last lines are logged before its exit is. */
        if (i_out >= 0 && p[i_out].revents)
            shim_log_drain(&s->log, &s->out_r, SBX_LOG_STDOUT);
        if (i_errl >= 0 && p[i_errl].revents)
            shim_log_drain(&s->log, &s->errl_r, SBX_LOG_STDERR);
        if (p[0].revents)
            handle_signals(s);
        if (i_err >= 0 && p[i_err].revents)
            read_setup_error(s);
        if (i_ready >= 0 && s->ready_r >= 0 && p[i_ready].revents) {
            char b[64];
            ssize_t k = read(s->ready_r, b, sizeof(b));
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                /* [svc-logs] After "R" the agent keeps it open to report its service; EOF: it ended. */
                close(s->ready_r);
                s->ready_r = -1;
                if (!s->ready)
                    fail(s, SBX_EVERIFY,
                         "the agent closed its ready descriptor without being ready");
            } else if (!s->ready) {
                s->ready = true;
                shim_trace("agent ready");
                /* "R", then the agent's lines (a service that ends at once may follow). */
                on_ready_bytes(s, b + 1, (size_t)k - 1);
                ctl_send(s, "ready");
            } else {
                on_ready_bytes(s, b, (size_t)k);
            }
        }
        if (i_ctl >= 0 && s->ctl >= 0 && p[i_ctl].revents) {
            char b[64];
            ssize_t k = recv(s->ctl, b, sizeof(b) - 1, 0);
            if (k > 0) {
                b[k] = 0;
                if (!strcmp(b, "ack") && s->ready && !s->acked) {
                    s->acked = true;
                    shim_trace("acked");
                    /* die_with_creator: the socket stays open; its EOF ends the box. */
                    if (!s->cfg.die_with_creator) {
                        close(s->ctl);
                        s->ctl = -1;
                    }
                    /* "running" means handed over: the box now outlives its creator. */
                    write_record(s, "running");
                } else if (!strcmp(b, "detach") && s->acked) {
                    /* The creator lets the box outlive it (sbx create, its record written). */
                    close(s->ctl);
                    s->ctl = -1;
                } else {
                    teardown(s, 1); /* "abort" */
                }
            } else if (!s->acked) {
                /* The creator died or gave up before taking the box: remove it. */
                teardown(s, 1);
            } else {
                /* die_with_creator: the creator is gone without detaching (killed, say). */
                teardown(s, 0);
            }
        }
    }
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = { { "box-dir", required_argument, NULL, 'b' },
                                              { NULL, 0, NULL, 0 } };
    /* [endpoint] The port forwarder the shim re-executes (forward.c). */
    if (argc > 1 && !strcmp(argv[1], "--forward"))
        return shim_forward_main(argc, argv);
    int o;
    while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (o != 'b') {
            fprintf(stderr, "usage: sbx-shim --box-dir DIR (started by libsbx, fd 3 = control)\n");
            return 2;
        }
    }
    struct stat st;
    if (fstat(CTL_FD, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        fprintf(stderr, "sbx-shim: fd 3 must be the control socket; sbx-shim is started by libsbx\n");
        return 2;
    }
    fcntl(CTL_FD, F_SETFD, FD_CLOEXEC);
    /* Whatever else the creator let us inherit is not ours to keep open for the box's life. */
    syscall(SYS_close_range, CTL_FD + 1, ~0U, 0);
    /*
     * The stop signals stay blocked from here on (the provider spawns us with
     * them blocked already): one that comes before the signalfd exists waits
     * for it, and is reported to the creator rather than killing us silently.
     */
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGHUP);
    sigprocmask(SIG_BLOCK, &stops, NULL);

    /*
     * The description is one datagram; its size follows the spec (an env may
     * hold up to 2 MiB), so it is measured first (MSG_TRUNC returns the
     * real length) rather than cut at a fixed buffer.
     */
    ssize_t n = recv(CTL_FD, NULL, 0, MSG_PEEK | MSG_TRUNC);
    char *buf = n > 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || (n = recv(CTL_FD, buf, (size_t)n, 0)) <= 0)
        return 2;
    buf[n] = 0;

    /* A stop before the fork: the child would not inherit it (pending signals are not). */
    siginfo_t early;
    struct timespec zero = { 0, 0 };
    if (sigtimedwait(&stops, &early, &zero) > 0) {
        char msg[300], from[80];
        const char *name = sigabbrev_np(early.si_signo);
        signal_sender(early.si_pid, from, sizeof(from));
        int len = snprintf(msg, sizeof(msg),
                           "error %d the box's supervisor (sbx-shim, pid %d) got SIG%s%s before "
                           "it started the box",
                           SBX_ECREATE, (int)getpid(), name ? name : "?", from);
        send(CTL_FD, msg, (size_t)len < sizeof(msg) ? (size_t)len : sizeof(msg) - 1,
             MSG_NOSIGNAL);
        return 1;
    }

    /*
     * Detach: the parent exits at once (the provider reaps it), the child
     * runs on in a session of its own, reparented to init or the nearest
     * subreaper. The box then survives its creator, and the creator never
     * has a zombie to collect when the box ends.
     */
    pid_t pid = fork();
    if (pid < 0) {
        char msg[400], hint[256];
        int e = errno;
        sbx__linux_pid_hint(e, hint, sizeof(hint));
        int len = snprintf(msg, sizeof(msg), "error -4 the box's supervisor cannot fork: %s%s",
                           strerror(e), hint);
        send(CTL_FD, msg, (size_t)len < sizeof(msg) ? (size_t)len : sizeof(msg) - 1,
             MSG_NOSIGNAL);
        return 1;
    }
    if (pid > 0)
        _exit(0);
    setsid();

    struct shim s = { .ctl = CTL_FD, .err_r = -1, .ready_r = -1, .slot_fd = -1, .teardown_fds = { -1, -1 }, .out_r = -1,
                      .errl_r = -1, .log = { .fd = -1 },
                      .upper_fd = -1 /* [img-commit] */ };
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    char msg[256];
    if (!json_is_object(j) || parse_cfg(j, &s.cfg, msg, sizeof(msg)) < 0) {
        if (json_is_object(j))
            fail(&s, SBX_EINVAL, "%s", msg);
        fail(&s, SBX_EINVAL, "bad box description: %s", je.text);
    }
    shim_tracing = json_is_true(json_object_get(j, "trace"));
    shim_trace("description read");
    s.created = unix_now();
    s.expires = s.cfg.ttl_s >= 0 ? s.created + s.cfg.ttl_s : 0;
    s.ready_deadline = mono() + s.cfg.ready_timeout_s;

    /* Signals arrive through a signalfd; SIGPIPE never kills the shim. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    struct sigaction sa = { .sa_handler = SIG_IGN };
    sigaction(SIGPIPE, &sa, NULL);
    s.sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s.sfd < 0)
        fail(&s, SBX_ECREATE, "signalfd: %s", strerror(errno));

    /*
     * The box directory is ours; it exists before anything that needs
     * cleaning. It and run/ (the agent's socket) are host root's and 0700,
     * whatever the umask: no other host user may reach the socket, and the
     * box reaches neither (its first process makes the socket and its tmpfs
     * before it becomes the box's root, box.c steps 4-6).
     */
    _cleanup_free_ char *run = sbx__printf("%s/run", s.cfg.box_dir);
    _cleanup_free_ char *root = sbx__printf("%s/root", s.cfg.box_dir);
    if (!run || !root || mkdir(s.cfg.box_dir, 0700) < 0) {
        int e = errno;
        s.cfg.box_dir = "/nonexistent"; /* not ours to remove */
        fail(&s, SBX_ECREATE, "cannot create the box directory: %s", strerror(e));
    }
    if (chmod(s.cfg.box_dir, 0700) < 0 || mkdir(run, 0700) < 0 || chmod(run, 0700) < 0 ||
        mkdir(root, 0700) < 0)
        fail(&s, SBX_ECREATE, "cannot create %s: %s", run, strerror(errno));

    struct stat dst;
    if (stat(s.cfg.box_dir, &dst) < 0)
        fail(&s, SBX_ECREATE, "cannot stat %s: %s", s.cfg.box_dir, strerror(errno));
    s.dir_dev = dst.st_dev;
    s.dir_ino = dst.st_ino;
    s.next_dir_check = mono() + DIR_CHECK_S;
    /* The teardown marker and slot lock now, not when thousands of boxes stop at once. */
    sbx__linux_teardown_prepare(s.cfg.state_dir, s.cfg.box_dir, s.teardown_fds);

    /* The supervisor is never the OOM killer's choice: it cleans up after the box. */
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t w = write(fd, "-1000", 5);
        (void)w;
        close(fd);
    }
    /* [endpoint] Listeners before the box: a taken host port fails the create early. */
    char pmsg[512];
    if (shim_ports_open(json_object_get(j, "ports"), &s.ports, pmsg, sizeof(pmsg)) < 0)
        fail(&s, SBX_ECREATE, "%s", pmsg);
    start_box(&s);
    if ((s.fwd = shim_forwarder_start(&s.ports, s.cfg.box_dir, s.init, pmsg, sizeof(pmsg))) < 0)
        fail(&s, SBX_ECREATE, "%s", pmsg);
    supervise(&s);
    return 0;
}
