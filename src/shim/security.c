/*
 * Privilege reduction for the box's init, applied last before it execs the
 * agent: the capability bounding set and the process's sets shrink to
 * Docker's default list (minus CAP_MKNOD), no_new_privs is set, and a seccomp
 * filter refuses what Docker's default profile refuses.
 *
 * The filter is compiled by libseccomp once, not once per box: the BPF
 * program is kept in <state>/seccomp/<key>.bpf, where the key hashes the
 * rule set, the architecture, the libseccomp version and the kernel's
 * seccomp API level, so any change to one of them compiles a new file. The
 * file ends with the program's own SHA-256: a torn or altered file is
 * recompiled, never loaded.
 */
#include "shim/shim.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <nettle/sha2.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/capability.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

/*
 * Docker's default capabilities, without CAP_MKNOD: a box has no business
 * making device nodes, and dropping it closes the mknod-a-disk-node path even
 * where no devices cgroup can be set (cgroup v2 needs BPF for that).
 */
static const cap_value_t keep_caps[] = {
    CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER,           CAP_NET_RAW,
    CAP_SETGID, CAP_SETUID,       CAP_SETFCAP, CAP_SETPCAP,         CAP_NET_BIND_SERVICE,
    CAP_SYS_CHROOT, CAP_KILL,     CAP_AUDIT_WRITE,
};

/*
 * [caps] The kept list plus the box's cap_add, which the provider checked
 * against src/providers/linux/caps.c's table (checked again here: a name
 * not on it as addable is refused, never granted).
 */
/*
 * [nat] A nat box sends no frame of its own making: no CAP_NET_RAW (not even
 * in the bounding set, so no file capability of /bin/ping brings it back)
 * and no AF_PACKET socket. Docker keeps both because its policy is enforced
 * on the host's bridge, which every frame crosses, forged or not; a nat
 * box's only way out is pasta, a user-space stack that turns whatever frame
 * reaches the tap into host sockets, to 127.0.0.1 included, and its policy
 * is an nftables table that only the box's IP stack passes through. So the
 * box may only send what that stack built: ping still works, through ICMP
 * datagram sockets (the shim opens net.ipv4.ping_group_range in the box's
 * namespace, as Docker and Podman do). docs/networking.md.
 */
static bool no_raw_frames(const struct shim_cfg *c)
{
    return c->net == SBX_LINUX_NET_NAT;
}

struct capset {
    cap_value_t v[64];
    int n;
};

static int box_caps(const struct shim_cfg *c, struct capset *cs, char *msg, size_t msg_len)
{
    cs->n = 0;
    /* [nat] No NET_RAW: see no_raw_frames(). */
    for (size_t i = 0; i < SBX_ARRAY_SIZE(keep_caps); i++)
        if (keep_caps[i] != CAP_NET_RAW || !no_raw_frames(c))
            cs->v[cs->n++] = keep_caps[i];
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(c->json, "cap_add"), i, e)
    {
        _cleanup_json_ json_t *one = json_pack("[O]", e), *out = json_array();
        int cap = sbx__linux_cap_number(json_string_value(e));
        if (!one || !out || cap < 0 || cs->n >= (int)SBX_ARRAY_SIZE(cs->v) ||
            sbx__linux_caps_parse(one, "cap_add", c->net, out, NULL) < 0) {
            snprintf(msg, msg_len, "capability %s is not one a box may add",
                     json_string_value(e) ? json_string_value(e) : "(not a string)");
            return -EPERM;
        }
        cs->v[cs->n++] = cap;
    }
    return 0;
}

static bool kept(const struct capset *cs, int cap)
{
    for (int i = 0; i < cs->n; i++)
        if (cs->v[i] == cap)
            return true;
    return false;
}

/* Syscalls refused with EPERM, as Docker's default profile refuses them. */
static const char *const denied[] = {
    /* mounting and namespace games */
    "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "setns",
    /* the kernel itself */
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "create_module", "query_module", "get_kernel_syms", "reboot", "swapon", "swapoff", "acct",
    "syslog", "iopl", "ioperm", "vm86", "vm86old", "_sysctl", "sysfs", "ustat", "uselib",
    "nfsservctl", "lookup_dcookie", "quotactl", "quotactl_fd", "vhangup",
    /* time */
    "settimeofday", "clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64",
    "adjtimex", "stime",
    /* keys, bpf, perf, handles, fanotify, userfaultfd */
    "add_key", "request_key", "keyctl", "bpf", "perf_event_open", "open_by_handle_at",
    "name_to_handle_at", "fanotify_init", "userfaultfd", "pidfd_getfd",
    /* NUMA policy (CAP_SYS_NICE in Docker's profile) */
    "mbind", "migrate_pages", "move_pages", "set_mempolicy",
    /* io_uring bypasses seccomp for the operations it performs */
    "io_uring_setup", "io_uring_enter", "io_uring_register",
};

/*
 * The socket address families a box may use: local, IPv4, IPv6, netlink
 * (ip, ss, getaddrinfo's interface queries) and packet (ping, DHCP tools;
 * it needs CAP_NET_RAW, which boxes keep as in Docker, and sees only the
 * box's own interfaces), but for a nat box (no_raw_frames()). Every other family is refused with EAFNOSUPPORT,
 * what a kernel built without it answers, so programs fall back as they
 * would there. Docker refuses only AF_VSOCK, which reaches the hypervisor
 * whatever the box's network; sbx refuses it and the rarely used families
 * too (AF_KEY, AF_ALG, bluetooth, TIPC, RDS, CAN, XDP, ...), where most of
 * the kernel's socket vulnerabilities have been.
 */
static const int socket_families[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET };
/* [nat] A nat box's: no AF_PACKET (no_raw_frames()). */
static const int socket_families_nat[] = { AF_UNIX, AF_INET, AF_INET6, AF_NETLINK };

#define NS_FLAGS                                                                                   \
    (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |    \
     CLONE_NEWCGROUP)

/* The clone/unshare flags that would make a new namespace. */
static const unsigned long ns_flags[] = { CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
                                          CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP };

/*
 * Bump when build_filter() changes in a way the tables above do not show
 * (an action, an argument comparison): the cache key must change with it.
 */
#define RULES_VERSION 3

static int build_filter(scmp_filter_ctx ctx, bool nat)
{
    const int *families = nat ? socket_families_nat : socket_families;
    size_t nfamilies = nat ? SBX_ARRAY_SIZE(socket_families_nat) : SBX_ARRAY_SIZE(socket_families);
    int rc;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(denied); i++) {
        int nr = seccomp_syscall_resolve_name(denied[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not a syscall on this architecture */
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0)) < 0)
            return rc;
    }
    /*
     * New namespaces, through clone or unshare: refused per flag (libseccomp
     * compares one masked value per rule). unshare without them (CLONE_FS,
     * CLONE_FILES) stays allowed.
     */
    for (size_t i = 0; i < SBX_ARRAY_SIZE(ns_flags); i++) {
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                                   SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]))) < 0)
            return rc;
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                   SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]))) < 0)
            return rc;
    }
    /*
     * socket() and socketpair() of any family but the allowed ones. A rule
     * matches one comparison, so the refused values are listed: each one
     * below the highest allowed family, and everything above it. The
     * comparison is on the whole 64-bit register: a value the kernel would
     * truncate to an allowed family is refused, never the other way round.
     */
    int top = 0;
    for (size_t i = 0; i < nfamilies; i++)
        top = families[i] > top ? families[i] : top;
    static const char *const socket_calls[] = { "socket", "socketpair" };
    for (size_t k = 0; k < SBX_ARRAY_SIZE(socket_calls); k++) {
        int nr = seccomp_syscall_resolve_name(socket_calls[k]);
        if (nr == __NR_SCMP_ERROR)
            continue;
        for (int fam = 0; fam < top; fam++) {
            bool allowed = false;
            for (size_t i = 0; i < nfamilies; i++)
                allowed |= families[i] == fam;
            if (!allowed &&
                (rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1,
                                       SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)fam, 0))) < 0)
                return rc;
        }
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1,
                                   SCMP_A0(SCMP_CMP_GT, (scmp_datum_t)top, 0))) < 0)
            return rc;
    }
    /*
     * clone3 passes its flags in memory, where seccomp cannot look: answer
     * ENOSYS so libc falls back to clone(), which the rules above check.
     */
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
        return rc;
    return 0;
}

/* --- the compiled filter, cached -------------------------------------------- */

static void to_hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* The cache key: everything the compiled program depends on. */
static void filter_key(bool nat, char hex[2 * SHA256_DIGEST_SIZE + 1])
{
    struct sha256_ctx h;
    sha256_init(&h);
    const struct scmp_version *v = seccomp_version();
    char head[160];
    snprintf(head, sizeof(head), "sbx-seccomp %d%s|arch %u|libseccomp %u.%u.%u|api %u|",
             RULES_VERSION, nat ? " nat" : "", seccomp_arch_native(), v ? v->major : 0, v ? v->minor : 0,
             v ? v->micro : 0, seccomp_api_get());
    sha256_update(&h, strlen(head), (const uint8_t *)head);
    for (size_t i = 0; i < SBX_ARRAY_SIZE(denied); i++)
        sha256_update(&h, strlen(denied[i]) + 1, (const uint8_t *)denied[i]);
    sha256_update(&h, sizeof(ns_flags), (const uint8_t *)ns_flags);
    sha256_update(&h, sizeof(socket_families), (const uint8_t *)socket_families);
    sha256_update(&h, sizeof(socket_families_nat), (const uint8_t *)socket_families_nat);
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&h, sizeof(d), d);
    to_hex(d, sizeof(d), hex);
}

/* Compiles the rules with libseccomp into a malloc'd BPF program. */
static int compile_filter(bool nat, struct sock_fprog *out)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return -ENOMEM;
    int rc = build_filter(ctx, nat);
    /* seccomp_export_bpf writes to a descriptor: a memfd keeps it off the disk. */
    int fd = rc < 0 ? -1 : memfd_create("sbx-seccomp", MFD_CLOEXEC);
    if (rc == 0 && fd < 0)
        rc = -errno;
    if (rc == 0)
        rc = seccomp_export_bpf(ctx, fd);
    seccomp_release(ctx);
    struct stat st;
    if (rc == 0 && fstat(fd, &st) < 0)
        rc = -errno;
    if (rc == 0 && (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) ||
                    st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS))
        rc = -EINVAL;
    struct sock_filter *prog = rc == 0 ? malloc((size_t)st.st_size) : NULL;
    if (rc == 0 && !prog)
        rc = -ENOMEM;
    if (rc == 0 && pread(fd, prog, (size_t)st.st_size, 0) != st.st_size)
        rc = -EIO;
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        free(prog);
        return rc;
    }
    out->filter = prog;
    out->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
    return 0;
}

/*
 * Reads a cached program: a regular file of ours that nobody else can
 * write, holding whole instructions followed by their SHA-256.
 */
static int read_cached(const char *path, struct sock_fprog *out)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    size_t insn = sizeof(struct sock_filter);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 022) || st.st_size <= SHA256_DIGEST_SIZE ||
        (st.st_size - SHA256_DIGEST_SIZE) % insn ||
        (size_t)(st.st_size - SHA256_DIGEST_SIZE) / insn > BPF_MAXINSNS) {
        close(fd);
        return -EINVAL;
    }
    size_t len = (size_t)st.st_size - SHA256_DIGEST_SIZE;
    uint8_t *buf = malloc((size_t)st.st_size);
    ssize_t n = buf ? pread(fd, buf, (size_t)st.st_size, 0) : -1;
    close(fd);
    uint8_t d[SHA256_DIGEST_SIZE];
    struct sha256_ctx h;
    sha256_init(&h);
    if (n == st.st_size) {
        sha256_update(&h, len, buf);
        sha256_digest(&h, sizeof(d), d);
    }
    if (n != st.st_size || memcmp(d, buf + len, sizeof(d)) != 0) {
        free(buf);
        return -EINVAL;
    }
    out->filter = (struct sock_filter *)(void *)buf;
    out->len = (unsigned short)(len / insn);
    return 0;
}

static int write_cached(const char *path, const struct sock_fprog *p)
{
    size_t len = p->len * sizeof(struct sock_filter);
    uint8_t *buf = malloc(len + SHA256_DIGEST_SIZE);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, p->filter, len);
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, len, buf);
    sha256_digest(&h, SHA256_DIGEST_SIZE, buf + len);
    int rc = sbx__write_file_atomic(path, buf, len + SHA256_DIGEST_SIZE, 0600) < 0 ? -errno : 0;
    free(buf);
    return rc;
}

int shim_seccomp_filter(const struct shim_cfg *c, struct sock_fprog *out)
{
    char key[2 * SHA256_DIGEST_SIZE + 1];
    filter_key(no_raw_frames(c), key);
    _cleanup_free_ char *dir = sbx__printf("%s/seccomp", c->state_dir);
    _cleanup_free_ char *path = sbx__printf("%s/seccomp/%s.bpf", c->state_dir, key);
    if (!dir || !path)
        return -ENOMEM;
    if (read_cached(path, out) == 0) {
        shim_trace("seccomp filter read from the cache");
        return 0;
    }
    int rc = compile_filter(no_raw_frames(c), out);
    if (rc < 0)
        return rc;
    /* A cache that cannot be written costs the next box a compile, nothing more. */
    if (sbx__mkdir_p(dir, 0700) == 0)
        write_cached(path, out);
    shim_trace("seccomp filter compiled and cached");
    return 0;
}

int shim_drop_privileges(const struct shim_cfg *c, const struct sock_fprog *filter, char *msg,
                         size_t msg_len)
{
    /*
     * Order: (1) shrink the bounding set while we still hold CAP_SETPCAP;
     * (2) clear ambient caps and set E/P/I to the kept list; (3) set
     * no_new_privs, which seccomp needs without CAP_SYS_ADMIN and which makes
     * setuid binaries in the image unable to gain anything; (4) load seccomp
     * last: the filter then governs the agent from its execve on, and nothing
     * above (prctl, capset) needs to be allowed by it.
     */
    struct capset cs;
    int rc = box_caps(c, &cs, msg, msg_len);
    if (rc < 0)
        return rc;
    int last = (int)cap_max_bits() - 1;
    for (int cap = 0; cap <= last; cap++) {
        if (kept(&cs, cap))
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) {
            snprintf(msg, msg_len, "cannot drop capability %d from the bounding set: %s", cap,
                     strerror(errno));
            return -errno;
        }
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    cap_t caps = cap_init();
    if (!caps) {
        snprintf(msg, msg_len, "cap_init: %s", strerror(errno));
        return -ENOMEM;
    }
    int n = cs.n;
    if (cap_set_flag(caps, CAP_EFFECTIVE, n, cs.v, CAP_SET) < 0 ||
        cap_set_flag(caps, CAP_PERMITTED, n, cs.v, CAP_SET) < 0 ||
        cap_set_flag(caps, CAP_INHERITABLE, n, cs.v, CAP_SET) < 0 || cap_set_proc(caps) < 0) {
        int e = errno;
        cap_free(caps);
        snprintf(msg, msg_len, "cannot set the box's capabilities: %s", strerror(e));
        return -e;
    }
    cap_free(caps);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(msg, msg_len, "cannot set no_new_privs: %s", strerror(errno));
        return -errno;
    }
    if (!c->seccomp)
        return 0;
    /*
     * The shim's precompiled program when it has one. Should the kernel
     * refuse it (EINVAL: not a valid program), compile here: the box never
     * starts without its filter.
     */
    if (filter && filter->filter) {
        if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, filter) == 0)
            return 0;
        if (errno != EINVAL) {
            snprintf(msg, msg_len, "cannot load the seccomp filter: %s", strerror(errno));
            return -errno;
        }
    }
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) {
        snprintf(msg, msg_len, "seccomp_init failed");
        return -ENOMEM;
    }
    rc = build_filter(ctx, no_raw_frames(c));
    if (rc == 0)
        rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc < 0) {
        snprintf(msg, msg_len, "cannot load the seccomp filter: %s", strerror(-rc));
        return rc;
    }
    return 0;
}
