/*
 * Privilege reduction for the box's init, applied last before it execs the
 * agent: the capability bounding set and the process's sets shrink to
 * Docker's default list (minus CAP_MKNOD), no_new_privs is set, and a seccomp
 * filter refuses what Docker's default profile refuses.
 */
#include "shim/shim.h"

#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/capability.h>

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

static bool kept(int cap)
{
    for (size_t i = 0; i < SBX_ARRAY_SIZE(keep_caps); i++)
        if (keep_caps[i] == cap)
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

#define NS_FLAGS                                                                                   \
    (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |    \
     CLONE_NEWCGROUP)

static int build_filter(scmp_filter_ctx ctx)
{
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
    static const unsigned long flags[] = { CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,
                                           CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                                           CLONE_NEWCGROUP };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(flags); i++) {
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                                   SCMP_A0(SCMP_CMP_MASKED_EQ, flags[i], flags[i]))) < 0)
            return rc;
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                   SCMP_A0(SCMP_CMP_MASKED_EQ, flags[i], flags[i]))) < 0)
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

int shim_drop_privileges(const struct shim_cfg *c, char *msg, size_t msg_len)
{
    /*
     * Order: (1) shrink the bounding set while we still hold CAP_SETPCAP;
     * (2) clear ambient caps and set E/P/I to the kept list; (3) set
     * no_new_privs, which seccomp needs without CAP_SYS_ADMIN and which makes
     * setuid binaries in the image unable to gain anything; (4) load seccomp
     * last: the filter then governs the agent from its execve on, and nothing
     * above (prctl, capset) needs to be allowed by it.
     */
    int last = (int)cap_max_bits() - 1;
    for (int cap = 0; cap <= last; cap++) {
        if (kept(cap))
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
    int n = (int)SBX_ARRAY_SIZE(keep_caps);
    if (cap_set_flag(caps, CAP_EFFECTIVE, n, keep_caps, CAP_SET) < 0 ||
        cap_set_flag(caps, CAP_PERMITTED, n, keep_caps, CAP_SET) < 0 ||
        cap_set_flag(caps, CAP_INHERITABLE, n, keep_caps, CAP_SET) < 0 || cap_set_proc(caps) < 0) {
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
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) {
        snprintf(msg, msg_len, "seccomp_init failed");
        return -ENOMEM;
    }
    int rc = build_filter(ctx);
    if (rc == 0)
        rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc < 0) {
        snprintf(msg, msg_len, "cannot load the seccomp filter: %s", strerror(-rc));
        return rc;
    }
    return 0;
}
