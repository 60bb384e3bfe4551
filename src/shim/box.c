/*
 * The box's first process, from clone() to execve() of the agent.
 *
 * It starts in fresh mount, pid, uts, ipc (and net, and maybe user)
 * namespaces, as PID 1 of its pid namespace, and builds the box's root:
 *
 *   <box>/run/agent.sock  the agent's listening socket, made here on the host's
 *                         side (0600) and handed to the agent as a descriptor:
 *                         the box never sees the directory it lives in
 *   <box>/root            tmpfs (size = disk_gib, nosuid, nodev): every byte the
 *                         box can write lives here, so one limit bounds them all
 *     upper/ work/         overlay upper and work dirs
 *     dev/ shm/            the box's /dev and /dev/shm (bound, noexec)
 *     merged/              overlay(lower = image, upper) -> becomes /
 *
 * then /proc, /sys, a minimal /dev, pivot_root, privilege drop, and
 * execveat() of the agent binary through a descriptor opened on the host,
 * so the agent never has to exist inside the image.
 *
 * Every mount is made in the box's own mount namespace: when the box's last
 * process exits, the kernel drops them all, and nothing is left on the host
 * to unmount. The comments say why each step sits where it does.
 */
#include "shim/shim.h"
#include "core/inroot.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <grp.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

static int err_fd = -1;

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > 0 && err_fd >= 0) {
        ssize_t w = write(err_fd, buf, strlen(buf));
        (void)w;
    }
    _exit(127);
}

#define die_errno(fmt, ...) die(fmt ": %s", ##__VA_ARGS__, strerror(errno))

static void mkdirs(const char *path, mode_t mode)
{
    if (sbx__mkdir_p(path, mode) < 0)
        die_errno("cannot create %s", path);
}

static char *path2(const char *a, const char *b)
{
    char *p = sbx__printf("%s%s%s", a, b[0] == '/' ? "" : "/", b);
    if (!p)
        die("out of memory");
    return p;
}

static void do_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                     const char *data)
{
    if (mount(src, dst, type, flags, data) < 0)
        die_errno("mount %s on %s (%s)", src ? src : "none", dst, type ? type : "bind");
}

/*
 * A read-only bind. mount(2) ignores MS_RDONLY on the bind itself, so it
 * takes a remount; mount_setattr(AT_RECURSIVE) makes submounts read-only too
 * where the kernel has it (5.12+), and the single-level remount is the
 * fallback.
 */
static void bind_ro(const char *src, const char *dst, bool recursive)
{
    do_mount(src, dst, NULL, MS_BIND | (recursive ? MS_REC : 0), NULL);
    struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
    if (syscall(SYS_mount_setattr, AT_FDCWD, dst, recursive ? AT_RECURSIVE : 0, &attr,
                sizeof(attr)) == 0)
        return;
    do_mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
}

static bool is_dir(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

const char *const shim_host_system_dirs[] = { "/usr", "/bin", "/sbin", "/lib", "/lib32",
                                               "/lib64", "/libx32", "/etc/alternatives",
                                               "/etc/ssl", "/etc/ld.so.conf.d" };
const size_t shim_n_host_system_dirs = SBX_ARRAY_SIZE(shim_host_system_dirs);

static void mask_dir(const char *p);

/* Attaches a detached mount (from open_tree/fsmount) at `dst`. */
static void attach_detached(int fd, const char *dst)
{
    if (syscall(SYS_move_mount, fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
        die_errno("cannot attach an idmapped mount on %s (move_mount)", dst);
    close(fd);
}

/*
 * The "none" image: the host's system directories, read-only, over the
 * skeleton. With a user namespace they are the idmapped copies the shim made
 * (read-only, nosuid, nodev already): host root's files then show as the
 * box's root instead of the overflow id.
 */
static void bind_host_system(const char *root, const struct shim_idmapped *idm)
{
    for (size_t i = 0; i < shim_n_host_system_dirs; i++) {
        const char *dir = shim_host_system_dirs[i];
        /* A merged-/usr host has /bin -> usr/bin: the skeleton carries the same link. */
        if (idm ? idm->sys[i] < 0 : !is_dir(dir))
            continue;
        _cleanup_free_ char *dst = path2(root, dir);
        if (!is_dir(dst))
            mkdirs(dst, 0755);
        if (idm)
            attach_detached(idm->sys[i], dst);
        else
            bind_ro(dir, dst, true);
    }
    /*
     * The host's private keys are no business of a box (and its root, being
     * host root without a user namespace, could list them): /etc/ssl/private
     * is hidden under an empty read-only tmpfs, as Docker masks paths.
     */
    _cleanup_free_ char *keys = path2(root, "/etc/ssl/private");
    if (is_dir(keys))
        mask_dir(keys);
}

/*
 * `name` in `dirfd` as a real directory, for sbx to mount on or create in: a
 * symlink or file the image put there is removed first (from the box's
 * writable layer only; the image is untouched). Until pivot_root this process
 * sees the host's root, so following an image's absolute link (/run -> /etc)
 * would land on the host. Returns an O_PATH fd of the directory.
 */
static int real_dir(int dirfd, const char *name, mode_t mode)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
        unlinkat(dirfd, name, 0) < 0)
        die_errno("cannot replace /%s of the image by a directory", name);
    if (mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
        die_errno("cannot create /%s in the box", name);
    int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        die_errno("cannot open /%s in the box", name);
    return fd;
}

/* Writes a small file `name` in `dirfd`, replacing (never following) what is there. */
static void put_file(int dirfd, const char *name, const char *text)
{
    if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
        die_errno("cannot replace %s in the box", name);
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        die_errno("cannot create %s in the box", name);
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len)
        die_errno("cannot write %s in the box", name);
    close(fd);
}

/*
 * The box's /etc/hostname and /etc/hosts, as Docker writes them: its own
 * name resolves (to loopback), so programs that look themselves up
 * (gethostbyname(gethostname()), Java's getLocalHost, Python's getfqdn)
 * work without a network. Sharing the host's network, the box keeps the
 * host's hosts entries and name servers and adds its own name. A nat box
 * asks pasta's DNS forwarder.
 */
static void write_etc(int rootfd, const struct shim_cfg *c)
{
    int etc = sbx__inroot_mkdir_p(rootfd, "/etc", 0755);
    if (etc < 0)
        die_errno("cannot create /etc in the box");
    _cleanup_free_ char *hostname = sbx__printf("%s\n", c->hostname);
    char *host_hosts = NULL, *resolv = NULL;
    if (c->net_host) {
        sbx__read_file("/etc/hosts", &host_hosts, NULL);
        sbx__read_file("/etc/resolv.conf", &resolv, NULL);
    }
    /* [nat] Names go to pasta's DNS forwarder, which asks the host's (or the given) servers. */
    if (c->net == SBX_LINUX_NET_NAT)
        resolv = sbx__printf("nameserver %s\n", SBX_NAT_DNS);
    _cleanup_free_ char *hosts =
        host_hosts
            ? sbx__printf("%s%s127.0.1.1\t%s\n", host_hosts,
                          *host_hosts && host_hosts[strlen(host_hosts) - 1] != '\n' ? "\n" : "",
                          c->hostname)
            : sbx__printf("127.0.0.1\tlocalhost\n"
                          "::1\tlocalhost ip6-localhost ip6-loopback\n"
                          "127.0.1.1\t%s\n",
                          c->hostname);
    if (!hostname || !hosts)
        die("out of memory");
    put_file(etc, "hostname", hostname);
    put_file(etc, "hosts", hosts);
    if (resolv)
        put_file(etc, "resolv.conf", resolv);
    free(host_hosts);
    free(resolv);
    close(etc);
}

/*
 * /proc for the box's pid namespace. It must be mounted by a process inside
 * that namespace (we are its PID 1) and before pivot_root, while the host's
 * /proc is still visible: with a user namespace the kernel only allows a new
 * proc mount when a fully visible one exists in the mount namespace.
 * Then the sensitive parts are masked or made read-only, as Docker does.
 */
static void mount_proc(const char *root)
{
    _cleanup_free_ char *proc = path2(root, "/proc");
    do_mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    static const char *const ro[] = { "sys", "sysrq-trigger", "irq", "bus", "fs" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(ro); i++) {
        _cleanup_free_ char *p = path2(proc, ro[i]);
        if (exists(p))
            bind_ro(p, p, true);
    }
    /*
     * Docker's masked paths, plus the page-frame tables (kpageflags, kpagecount,
     * kpagecgroup): they describe every physical page of the host, a side
     * channel for whoever can read them (root in a box without a user
     * namespace is host root to their 0400 mode).
     */
    static const char *const masked_files[] = { "kcore",         "keys",        "timer_list",
                                                "timer_stats",   "sched_debug", "latency_stats",
                                                "kallsyms",      "kmsg",        "kpageflags",
                                                "kpagecount",    "kpagecgroup" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(masked_files); i++) {
        _cleanup_free_ char *p = path2(proc, masked_files[i]);
        if (exists(p))
            do_mount("/dev/null", p, NULL, MS_BIND, NULL);
    }
    static const char *const masked_dirs[] = { "acpi", "scsi", "firmware", "asound" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(masked_dirs); i++) {
        _cleanup_free_ char *p = path2(proc, masked_dirs[i]);
        if (is_dir(p))
            mask_dir(p);
    }
}

/*
 * /sys, read-only. A fresh sysfs shows the box's own network devices; it
 * needs to own the network namespace, so a box sharing the host's network
 * inside a user namespace falls back to a read-only bind of the host's.
 */
static void mount_sys(const struct shim_cfg *c, const char *root)
{
    _cleanup_free_ char *sys = path2(root, "/sys");
    if (mount("sysfs", sys, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
        if (!(c->userns && c->net_host))
            die_errno("mount sysfs on %s", sys);
        bind_ro("/sys", sys, true);
    }
    static const char *const masked[] = { "firmware", "devices/virtual/powercap" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(masked); i++) {
        _cleanup_free_ char *p = path2(sys, masked[i]);
        if (is_dir(p))
            mask_dir(p);
    }
}

/*
 * The box's own cgroups at /sys/fs/cgroup, read-only, as Docker shows them:
 * programs that size themselves from their limits (memory.max, cpu.max:
 * JVMs, Go, Node, build tools) read them there. Mounted after the cgroup
 * namespace is made, so each hierarchy's root is the box's own group and
 * nothing of the host's tree shows. Best effort: a box without the view
 * works, it only cannot read its limits, so a refusal is traced, not fatal.
 */
static void mount_cgroup_view(const struct child_fds *f)
{
    const unsigned long ro = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
    if (sbx__cg_mode() == SBX_CG_V2) {
        if (mount("cgroup2", "/sys/fs/cgroup", "cgroup2", ro, NULL) < 0)
            shim_trace("child: no cgroup2 view");
        return;
    }
    /* v1: a tmpfs holding one mount per hierarchy the box has a group in. */
    if (!f->self_attach || !json_array_size(f->self_attach) ||
        mount("tmpfs", "/sys/fs/cgroup", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "mode=0755,size=16k") < 0)
        return;
    size_t i;
    json_t *v;
    json_array_foreach(f->self_attach, i, v)
    {
        /*
         * "/sys/fs/cgroup/<hierarchy>/sbx/<id>" (sbx: the level's name,
         * sbx__cg_name): the hierarchy's name lists its controllers.
         */
        const char *dir = json_string_value(v), *pre = "/sys/fs/cgroup/";
        char lvl[SBX_LINUX_CGROUP_NAME_MAX + 3];
        snprintf(lvl, sizeof(lvl), "/%s/", sbx__cg_name());
        const char *end = dir ? strstr(dir, lvl) : NULL;
        if (!end || strncmp(dir, pre, strlen(pre)) != 0)
            continue;
        char name[64], at[128];
        snprintf(name, sizeof(name), "%.*s", (int)(end - dir - strlen(pre)), dir + strlen(pre));
        snprintf(at, sizeof(at), "/sys/fs/cgroup/%s", name);
        if (mkdir(at, 0555) < 0)
            continue;
        /* A "cpu" that is a link to the joined "cpu,cpuacct" hierarchy mounts by its full set. */
        if (mount("cgroup", at, "cgroup", ro, name) < 0 &&
            (strcmp(name, "cpu") != 0 || mount("cgroup", at, "cgroup", ro, "cpu,cpuacct") < 0)) {
            shim_trace("child: a cgroup v1 view is missing");
            rmdir(at);
        }
    }
    if (mount(NULL, "/sys/fs/cgroup", NULL, MS_REMOUNT | ro, "mode=0755,size=16k") < 0)
        shim_trace("child: the cgroup view's tmpfs stays writable");
}

/* A bind that adds noexec: a second pass, since mount(2) ignores flags on the bind itself. */
static void bind_noexec(const char *src, const char *dst)
{
    do_mount(src, dst, NULL, MS_BIND, NULL);
    do_mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
}

/* A directory of the box's tmpfs (the cwd), with exactly `mode` whatever the umask. */
static void tmpfs_dir(const char *name, mode_t mode)
{
    if ((mkdir(name, mode) < 0 && errno != EEXIST) || chmod(name, mode) < 0)
        die_errno("cannot create %s in the box's tmpfs", name);
}

/*
 * Hides a directory under an empty read-only one, as Docker masks paths:
 * a bind of the empty "mask" directory of the box's tmpfs (the cwd until
 * pivot_root), not a tmpfs of its own. Every superblock registers a
 * memory-cgroup-aware shrinker, and every memory cgroup on the host carries
 * state for each one, so a superblock per mask made each box's kernel
 * memory grow with the number of boxes (docs/scale.md). Nothing writes the
 * directory: it shows in the box only through these read-only binds.
 */
static void mask_dir(const char *p)
{
    tmpfs_dir("mask", 0755);
    do_mount("mask", p, NULL, MS_BIND, NULL);
    do_mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
             NULL);
}

/*
 * A minimal /dev. The directory itself and /dev/shm are directories of the
 * box's tmpfs (the cwd), bound into place: what the box writes there counts
 * against the one disk limit of its writable layer, where a tmpfs of their
 * own would each add its size on top. A bind keeps its source mount's
 * flags, so both are nosuid,nodev like the tmpfs, and a remount adds
 * noexec. The device nodes are binds of the host's harmless character
 * devices (binds, not mknod, so this works in a user namespace too; each is
 * a mount of its own, which nodev on /dev does not reach), with a private
 * devpts instance and the usual links.
 */
static void mount_dev(const struct shim_cfg *c, const char *root)
{
    _cleanup_free_ char *dev = path2(root, "/dev");
    tmpfs_dir("dev", 0755);
    tmpfs_dir("shm", 01777);
    bind_noexec("dev", dev);
    static const char *const nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(nodes); i++) {
        _cleanup_free_ char *src = path2("/dev", nodes[i]);
        _cleanup_free_ char *dst = path2(dev, nodes[i]);
        int fd = open(dst, O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
        if (fd < 0)
            die_errno("cannot create %s", dst);
        close(fd);
        do_mount(src, dst, NULL, MS_BIND, NULL);
    }
    _cleanup_free_ char *pts = path2(dev, "/pts");
    _cleanup_free_ char *shm = path2(dev, "/shm");
    mkdirs(pts, 0755);
    mkdirs(shm, 0755);
    /* newinstance: the box's ptys are its own, numbered from 0, invisible to the host. */
    do_mount("devpts", pts, "devpts", MS_NOSUID | MS_NOEXEC,
             "newinstance,ptmxmode=0666,mode=0620,gid=5");
    long long shm_size = (long long)json_integer_value(json_object_get(c->json, "shm_size"));
    if (shm_size > 0) {
        /*
         * [volumes] shm_size: a tmpfs of its own, of that size, on top of the
         * disk limit (its pages are still charged to the box's memory
         * cgroup); nosuid,nodev,noexec like the bind it replaces.
         */
        char o[96];
        snprintf(o, sizeof(o), "mode=1777,uid=0,gid=0,size=%lld", shm_size);
        do_mount("shm", shm, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, o);
    } else {
        bind_noexec("shm", shm);
    }
    static const char *const links[][2] = { { "pts/ptmx", "ptmx" },
                                            { "/proc/self/fd", "fd" },
                                            { "/proc/self/fd/0", "stdin" },
                                            { "/proc/self/fd/1", "stdout" },
                                            { "/proc/self/fd/2", "stderr" } };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(links); i++) {
        _cleanup_free_ char *dst = path2(dev, links[i][1]);
        if (symlink(links[i][0], dst) < 0)
            die_errno("symlink %s", dst);
    }
}

/*
 * A host file or directory bound at `path` inside the box (resolved in the
 * root by the kernel: an image's links cannot send it elsewhere), with
 * `attrs` (MOUNT_ATTR_*) added. `src` is an O_PATH fd of what to bind;
 * `want_dir` whether it is a directory. The mount point is made when
 * missing, in the box's writable layer; a link or an entry of the other
 * kind in the way (in /dev, the box's own tmpfs) is an error, not replaced.
 */
static void bind_in_root(const char *what, int rootfd, int src, const char *path, bool want_dir,
                         bool recursive, unsigned long long attrs)
{
    int dst = sbx__inroot_open(rootfd, path, O_PATH, 0);
    /*
     * A missing directory (or one a link names that leads nowhere yet) is
     * made as the workdir is: every component resolved inside the root.
     */
    if (dst < 0 && errno == ENOENT && want_dir)
        dst = sbx__inroot_mkdir_p(rootfd, path, 0755);
    if (dst < 0 && errno == ENOENT) {
        _cleanup_free_ char *parent = strdup(path);
        if (!parent)
            die("out of memory");
        char *slash = strrchr(parent, '/');
        const char *base = path + (slash - parent) + 1;
        *(slash == parent ? slash + 1 : slash) = 0;
        _cleanup_close_ int pfd = sbx__inroot_mkdir_p(rootfd, parent, 0755);
        if (pfd < 0)
            die_errno("%s: cannot create %s in the box for %s", what, parent, path);
        if (want_dir ? mkdirat(pfd, base, 0755) < 0
                     : mknodat(pfd, base, S_IFREG | 0644, 0) < 0)
            if (errno != EEXIST)
                die_errno("%s: cannot create the mount point %s in the box", what, path);
        dst = sbx__inroot_open(rootfd, path, O_PATH, 0);
    }
    struct stat ds;
    if (dst < 0 || fstat(dst, &ds) < 0)
        die_errno("%s: cannot open the mount point %s in the box", what, path);
    if (want_dir != !!S_ISDIR(ds.st_mode))
        die("%s: %s in the box is a %s, the host's source a %s", what, path,
            S_ISDIR(ds.st_mode) ? "directory" : "file", want_dir ? "directory" : "file");
    /*
     * Both ends by descriptor (/proc/self/fd/N is the host's proc until
     * pivot_root): the bind lands exactly on what was resolved in the root.
     */
    char from[64], to[64];
    snprintf(from, sizeof(from), "/proc/self/fd/%d", src);
    snprintf(to, sizeof(to), "/proc/self/fd/%d", dst);
    do_mount(from, to, NULL, MS_BIND | (recursive ? MS_REC : 0), NULL);
    close(dst);
    /* Opened again: now the path is the new mount's root, which the flags go on. */
    _cleanup_close_ int top = sbx__inroot_open(rootfd, path, O_PATH, 0);
    if (top < 0)
        die_errno("%s: cannot open %s after binding it", what, path);
    struct mount_attr attr = { .attr_set = attrs };
    if (syscall(SYS_mount_setattr, top, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0),
                &attr, sizeof(attr)) == 0)
        return;
    /* Without mount_setattr (before 5.12): a remount, keeping what the source had. */
    struct statvfs sv;
    unsigned long keep = fstatvfs(top, &sv) == 0 ? sv.f_flag & (ST_NOEXEC | ST_NOSUID | ST_NODEV |
                                                                ST_RDONLY)
                                                 : 0;
    unsigned long fl = MS_REMOUNT | MS_BIND | keep;
    fl |= (attrs & MOUNT_ATTR_RDONLY ? MS_RDONLY : 0) | (attrs & MOUNT_ATTR_NOSUID ? MS_NOSUID : 0) |
          (attrs & MOUNT_ATTR_NODEV ? MS_NODEV : 0) | (attrs & MOUNT_ATTR_NOEXEC ? MS_NOEXEC : 0);
    snprintf(to, sizeof(to), "/proc/self/fd/%d", top);
    do_mount(NULL, to, NULL, fl, NULL);
}

/*
 * The CDI edits the provider resolved for resources.gpu
 * (src/providers/linux/cdi.c): each device node is a bind of the host's
 * node (as /dev/null is, so it works in a user namespace too, where mknod
 * is refused; a bind keeps the host's devtmpfs, which nodev on the box's
 * /dev does not reach), after checking that what the host path opens now is
 * the very device the provider saw (type, major, minor); each mount a bind,
 * read-only unless the spec said "rw", always nosuid and nodev (device
 * nodes come only from deviceNodes). Hooks are never run.
 */
static void apply_cdi(const struct shim_cfg *c, const char *root)
{
    _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        die_errno("cannot open %s", root);
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(c->cdi, "devices"), i, d)
    {
        const char *path = json_string_value(json_object_get(d, "path"));
        const char *host = json_string_value(json_object_get(d, "host_path"));
        const char *type = json_string_value(json_object_get(d, "type"));
        json_int_t maj = json_integer_value(json_object_get(d, "major"));
        json_int_t min = json_integer_value(json_object_get(d, "minor"));
        if (!path || !host || !type)
            die("CDI: a device node without path, host path or type");
        _cleanup_close_ int src = open(host, O_PATH | O_CLOEXEC);
        struct stat st;
        if (src < 0 || fstat(src, &st) < 0)
            die_errno("CDI: cannot open the device node %s", host);
        bool chr = type[0] == 'c';
        if ((chr ? !S_ISCHR(st.st_mode) : !S_ISBLK(st.st_mode)) ||
            (json_int_t)major(st.st_rdev) != maj || (json_int_t)minor(st.st_rdev) != min)
            die("CDI: %s is no longer the %s device %lld:%lld it was", host,
                chr ? "character" : "block", (long long)maj, (long long)min);
        bind_in_root("CDI", rootfd, src, path, false, false, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC);
    }
    json_array_foreach(json_object_get(c->cdi, "mounts"), i, d)
    {
        const char *host = json_string_value(json_object_get(d, "host_path"));
        const char *path = json_string_value(json_object_get(d, "container_path"));
        if (!host || !path)
            die("CDI: a mount without host or container path");
        _cleanup_close_ int src = open(host, O_PATH | O_CLOEXEC);
        struct stat st;
        if (src < 0 || fstat(src, &st) < 0)
            die_errno("CDI: cannot open the mount source %s", host);
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
            die("CDI: the mount source %s is neither a file nor a directory", host);
        unsigned long long attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        if (!json_is_true(json_object_get(d, "rw")))
            attrs |= MOUNT_ATTR_RDONLY;
        bind_in_root("CDI", rootfd, src, path, S_ISDIR(st.st_mode),
                     json_is_true(json_object_get(d, "recursive")), attrs);
    }
}

/*
 * [volumes] The box's volumes (src/providers/linux/volumes.c resolved them),
 * opened here before the box's first process becomes the box's root (step
 * 7): until then its kernel uid is the shim's, which owns the private volume
 * store. The host path is walked from "/" by sbx__open_trusted, as the
 * provider did: a source that became a link since the provider looked is
 * refused, never followed, and so is a link on the way that a user other
 * than root and the caller could have swapped in; a shared source is walked
 * down from its root refusing every link and "..", since boxes write in
 * that tree.
 */
#define MAX_VOLUMES 64

struct volume_fds {
    int fd[MAX_VOLUMES];
    size_t n;
};

static void open_volumes(const struct shim_cfg *c, struct volume_fds *v)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(c->json, "volumes"), i, e)
    {
        if (i >= MAX_VOLUMES)
            die("more than %d volumes", MAX_VOLUMES);
        const char *src = json_string_value(json_object_get(e, "source"));
        const char *beneath = json_string_value(json_object_get(e, "beneath"));
        const char *kind = json_string_value(json_object_get(e, "kind"));
        if (!src || !kind)
            die("volume %zu: no source or kind in the box description", i);
        /* The descriptor walked and checked is the one bound (mount_volumes). */
        sbx_error *oe = NULL;
        int fd = sbx__open_trusted(src, false, "volume", &oe);
        if (fd < 0)
            die("%s", oe ? sbx_error_message(oe) : "volume: out of memory");
        if (beneath) {
            int sub = sbx__beneath_open_nofollow(fd, beneath);
            if (sub < 0)
                die_errno("volume: cannot open %s under the shared root %s without following "
                          "a link",
                          beneath, src);
            close(fd);
            fd = sub;
        }
        struct stat st;
        if (fstat(fd, &st) < 0)
            die_errno("volume: cannot stat %s", src);
        if (S_ISLNK(st.st_mode))
            die("volume: the host path %s is a symbolic link: sbx never follows one at a "
                "volume's source",
                src);
        bool dir = !strcmp(kind, "dir");
        if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
            die("volume: the host path %s is no longer the %s it was", src,
                dir ? "directory" : "file");
        v->fd[v->n++] = fd;
    }
}

/*
 * Binds each volume at its target, resolved inside the root by the kernel
 * (bind_in_root): a link the image planted at the target, absolute or
 * relative, lands inside the box, never on the host. The target may not
 * resolve to the root itself nor into the box's /proc or /sys (a link
 * could lead there where the path did not). MS_REC: submounts of the
 * source come along (and must, in a user namespace, where the kernel locks
 * them to their parent), and the attributes go on every one of them:
 * nosuid, nodev, and read-only when asked.
 */
/* Whether the kernel has mount_setattr(2): ENOSYS says it has not; bad arguments, that it has. */
static bool have_mount_setattr(void)
{
    return !(syscall(SYS_mount_setattr, -1, "", 0, NULL, 0) < 0 && errno == ENOSYS);
}

static void mount_volumes(const struct shim_cfg *c, const char *root, struct volume_fds *v)
{
    _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat rs;
    if (rootfd < 0 || fstat(rootfd, &rs) < 0)
        die_errno("cannot open %s", root);
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(c->json, "volumes"), i, e)
    {
        if (i >= v->n)
            break;
        const char *target = json_string_value(json_object_get(e, "target"));
        if (!target)
            die("volume %zu: no target", i);
        int at = sbx__inroot_open(rootfd, target, O_PATH, 0);
        if (at >= 0) {
            struct stat ts;
            struct statfs fs;
            if (fstat(at, &ts) < 0 || fstatfs(at, &fs) < 0)
                die_errno("volume: cannot stat %s in the box", target);
            close(at);
            if (ts.st_dev == rs.st_dev && ts.st_ino == rs.st_ino)
                die("volume: the target %s resolves to the box's root (a link?)", target);
            if (fs.f_type == PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC)
                die("volume: the target %s resolves into the box's /proc or /sys (a link?)",
                    target);
        }
        unsigned long long attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        bool ro = json_is_true(json_object_get(e, "read_only"));
        if (ro)
            attrs |= MOUNT_ATTR_RDONLY;
        bool dir = !strcmp(json_string_value(json_object_get(e, "kind")), "dir");
        /*
         * Without mount_setattr (before 5.12) only the top mount of a bind
         * can be remounted read-only: a read-only volume is then bound
         * without its submounts, so none of them stays writable (where the
         * kernel refuses that, in a user namespace, the bind fails).
         */
        bool recursive = !ro || have_mount_setattr();
        bind_in_root("volume", rootfd, v->fd[i], target, dir, recursive, attrs);
        close(v->fd[i]);
        v->fd[i] = -1;
    }
}

/*
 * The agent's listening socket, <box>/run/agent.sock on the host (relative
 * to our cwd, the box directory), made here and handed to the agent as a
 * descriptor. Made by the box's first process, so the credentials the
 * kernel gives the socket's clients (SO_PEERCRED) name it: the host's
 * client checks that its peer is the pid the shim recorded as the box's
 * init, and a socket swapped for another box's fails that check. Made
 * while this process still has the shim's ids (with a user namespace,
 * before it becomes the box's root), so the socket and its directory are
 * host root's: nothing of that directory is mounted in the box, so no
 * process in the box can replace the socket or even reach it. Mode 0600 is
 * set explicitly after bind(), whatever the umask, and before listen(), so
 * no connection is ever accepted while the mode is wider.
 */
static int agent_socket(const struct shim_cfg *c)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof(sa.sun_path), "run/agent.sock");
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die_errno("cannot create the agent's socket");
    mode_t old = umask(077);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (rc < 0 || chmod(sa.sun_path, 0600) < 0 || listen(fd, 1024) < 0)
        die_errno("cannot make the agent's socket %s/%s", c->box_dir, sa.sun_path);
    return fd;
}

/* Loopback up in the box's own network namespace: "none" means lo only. */
static void loopback_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        die_errno("socket");
    struct ifreq ifr = { 0 };
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        die_errno("SIOCGIFFLAGS lo");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        die_errno("SIOCSIFFLAGS lo");
    close(s);
}

static const char **env_vector(const struct shim_cfg *c)
{
    size_t n = json_array_size(c->env);
    const char **v = calloc(n + 6, sizeof(char *));
    if (!v)
        die("out of memory");
    size_t k = 0;
    bool has_path = false, has_home = false;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(c->env, i));
        if (!s)
            continue;
        has_path |= !strncmp(s, "PATH=", 5);
        has_home |= !strncmp(s, "HOME=", 5);
        v[k++] = s;
    }
    if (!has_path)
        v[k++] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    if (!has_home)
        v[k++] = "HOME=/root";
    v[k++] = sbx__printf("HOSTNAME=%s", c->hostname);
    v[k++] = "container=sbx";
    return v;
}

/*
 * Blocks until the shim's go message; EOF means the shim died or gave up.
 * In userns mode it carries the idmapped mounts: "g" then one NUL-ended
 * name per descriptor ("lower" or a shim_host_system_dirs entry).
 */
static void wait_go(const struct child_fds *f, struct shim_idmapped *idm)
{
    char data[2048];
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * (SHIM_MAX_LOWERS + 32))];
    } u;
    struct iovec iov = { data, sizeof(data) - 1 };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof(u.buf) };
    ssize_t n = recvmsg(f->sync_r, &m, MSG_CMSG_CLOEXEC);
    if (n < 1 || data[0] != 'g')
        _exit(127);
    /* [img-commit] sync_r stays open: the upper dir's descriptor goes back over it. */
    if (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC))
        die("the shim's go message was truncated");
    data[n] = 0;
    idm->lower = -1;
    idm->nlowers = 0;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(idm->sys); i++)
        idm->sys[i] = -1;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    if (!cm || cm->cmsg_type != SCM_RIGHTS)
        return;
    size_t nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int fds[SHIM_MAX_LOWERS + 32];
    if (nfds > SBX_ARRAY_SIZE(fds))
        die("the shim's go message carries too many mounts");
    memcpy(fds, CMSG_DATA(cm), nfds * sizeof(int));
    const char *name = data + 1;
    for (size_t k = 0; k < nfds; k++, name += strlen(name) + 1) {
        if (name >= data + n)
            die("the shim's go message names fewer mounts than it carries");
        if (!strcmp(name, "lower")) {
            if (idm->lower < 0)
                idm->lower = fds[k];
            if (idm->nlowers < SHIM_MAX_LOWERS)
                idm->lowers[idm->nlowers++] = fds[k];
            continue;
        }
        for (size_t i = 0; i < shim_n_host_system_dirs; i++)
            if (!strcmp(name, shim_host_system_dirs[i]))
                idm->sys[i] = fds[k];
    }
}

/*
 * [img-commit] Hands the shim a descriptor of the upper dir ("u" + an
 * O_PATH fd): after pivot_root nothing on the host reaches this tmpfs, and
 * `sbx commit` reads the box's writable layer as /proc/<shim>/fd/<N>. A
 * failure costs only the box's commit, so it is not fatal.
 */
static void send_upper(int sock, const char *upper)
{
    int fd = open(upper, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int))];
        } u;
        memset(&u, 0, sizeof(u));
        char tag[] = "u";
        struct iovec iov = { tag, 1 };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                            .msg_controllen = sizeof(u.buf) };
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        (void)sendmsg(sock, &m, MSG_NOSIGNAL);
        close(fd);
    }
    close(sock);
}

void shim_box_child(const struct shim_cfg *c, const struct child_fds *f)
{
    err_fd = f->err_w;
    struct shim_idmapped idm = { .lower = -1 };

    /*
     * 1. Die with the shim. (getppid() is 0 in a new pid namespace, so it
     *    cannot tell whether the shim died before this prctl; the read of the
     *    sync pipe below can: it sees EOF when the shim is gone.) The setting
     *    survives the agent's execve because the agent is not setuid.
     */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
        die_errno("PR_SET_PDEATHSIG");

    /*
     * The shim shields itself from the OOM killer (-1000) and we inherited
     * that: raise it back to 0 (raising needs no privilege) so the killer can
     * pick the box's processes, all of which descend from us.
     */
    int ofd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (ofd >= 0) {
        ssize_t w = write(ofd, "0", 1);
        (void)w;
        close(ofd);
    }

    /*
     * 2. Into the box's cgroups before anything else, so every allocation and
     *    process from here on is charged and limited. On cgroup v1 we move
     *    ourselves by writing "0" to each group's `tasks`: a single thread
     *    moving itself skips the global threadgroup lock that a write of a pid
     *    to cgroup.procs takes, and with it an RCU grace period (milliseconds
     *    on a busy machine, ~20 ms measured here). This works in a new user
     *    namespace too: until step 7 our kernel uid is still host root's, which
     *    is all v1 checks (owner of `tasks`, euid root), no capability needed.
     *    Otherwise (v2 without clone3) the shim attached us.
     */
    if (f->self_attach) {
        size_t i;
        json_t *v;
        json_array_foreach(f->self_attach, i, v)
        {
            _cleanup_free_ char *tasks = path2(json_string_value(v), "tasks");
            int fd = open(tasks, O_WRONLY | O_CLOEXEC);
            if (fd < 0 || write(fd, "0", 1) != 1)
                die_errno("cannot join cgroup %s", json_string_value(v));
            close(fd);
        }
    }
    /*
     * 3. Wait for the shim's go: it attached us (when we did not), and with a
     *    user namespace wrote our uid/gid maps and sends the idmapped mounts.
     *    [nat] A nat box always waits: the shim loads its egress policy and
     *    starts pasta first, so nothing of the box runs without them.
     */
    if (!f->self_attach || c->userns || c->net == SBX_LINUX_NET_NAT)
        wait_go(f, &idm);

    /* 4. The agent's socket, while we still have the shim's ids (see agent_socket). */
    int listen_fd = agent_socket(c);
    /* [volumes] Their sources, while we still have the shim's ids (see open_volumes). */
    struct volume_fds vols = { .n = 0 };
    open_volumes(c, &vols);

    /*
     * 5. Stop mount events from leaking back to the host: the copy of the
     *    host's mount tree this namespace started with is made a slave (host
     *    unmounts still reach us, so we never pin a host mount; nothing we
     *    mount reaches the host).
     */
    do_mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);

    /*
     * 6. The writable layer: a tmpfs on <box>/root (relative to our cwd, the
     *    box directory, where the shim chdir'ed before the clone), sized by
     *    disk_gib. It holds everything the box can write (overlay upper,
     *    /dev, /dev/shm), so the one size bounds them all. nosuid,nodev: no
     *    file the box writes gives privilege or opens a device, and the binds
     *    made from it inherit both. Made private, because pivot_root refuses
     *    a new root whose parent mount propagates. Then we work from inside
     *    it: the box directory is 0700 host root's, which box root in a user
     *    namespace could not search once it is box root (step 7), and the
     *    overlay's options name relative paths that say nothing of the host.
     *    uid=0,gid=0 are read in our user namespace: box root owns the tmpfs.
     */
    char opts[128];
    if (c->upper_size > 0)
        snprintf(opts, sizeof(opts), "mode=0755,uid=0,gid=0,size=%lld", c->upper_size);
    else
        snprintf(opts, sizeof(opts), "mode=0755,uid=0,gid=0");
    do_mount("sbx", "root", "tmpfs", MS_NOSUID | MS_NODEV, opts);
    do_mount(NULL, "root", NULL, MS_PRIVATE, NULL);
    if (chdir("root") < 0)
        die_errno("cannot enter the box's tmpfs");

    if (c->userns) {
        /*
         * 7. The maps exist now, but our ids are still the overflow id (host
         *    root is not mapped): become the box's root, the mapped uid_base,
         *    so files we create have an owner the filesystems can store.
         */
        if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
            die_errno("cannot become root in the box's user namespace");
    }

    if (sethostname(c->hostname, strlen(c->hostname)) < 0)
        die_errno("sethostname");
    if (!c->net_host)
        loopback_up();
    if (c->net_addr) {
        /*
         * [netw] The shim plugs a veth into our namespace once it exists
         * (after the clone) and says "n"; we give our end its address from
         * inside, where we hold CAP_NET_ADMIN even in a user namespace. No
         * route but the subnet's: the box reaches its network and nothing
         * else.
         */
        char go;
        if (read(f->sync_r, &go, 1) != 1 || go != 'n')
            _exit(127);
        void *nl = sbx__nl_open();
        if (!nl || sbx__nl_addr_up(nl, SBX_NET_BOX_IF, c->net_addr, c->net_prefix) < 0)
            die_errno("cannot set the address %s/%u of the box's %s", c->net_addr,
                      c->net_prefix, SBX_NET_BOX_IF);
        sbx__nl_close(nl);
    }

    const char *upper = "upper", *work = "work", *root = "merged";
    mkdirs(upper, 0755);
    mkdirs(work, 0700);
    mkdirs(root, 0755);
    send_upper(f->sync_r, upper);
    /*
     * With a user namespace the lower layer is the shim's idmapped copy of
     * the image (host uid 0 shows as the box's root, and files the box
     * creates in the upper layer belong to its mapped range on the host).
     * It is attached inside the tmpfs, so it goes away with it after
     * pivot_root; overlay keeps its own reference. Without one, the image's
     * directory is named through a descriptor: the box's mountinfo then
     * shows /proc/self/fd/N, not where the host keeps its images.
     */
    /*
     * An image of several layers is stacked as overlay lower dirs, top
     * first, each named short (its descriptor, or its idmapped mount's
     * relative name "l<N>") so that even 128 of them fit the one page of
     * mount options. The descriptors stay open until the mount is made.
     */
    char lower[SHIM_MAX_LOWERS * 24 + 64];
    size_t lp = 0;
    lower[0] = 0;
    int lower_fds[SHIM_MAX_LOWERS];
    size_t nlower_fds = 0;
    if (c->userns) {
        if (idm.nlowers < 1)
            die("the shim sent no idmapped image for the box's user namespace");
        for (size_t i = 0; i < idm.nlowers; i++) {
            char name[24]; /* "l" and a size_t */
            snprintf(name, sizeof(name), "l%zu", i);
            mkdirs(name, 0755);
            attach_detached(idm.lowers[i], name);
            lp += (size_t)snprintf(lower + lp, sizeof(lower) - lp, "%s%s", i ? ":" : "", name);
        }
    } else {
        size_t nl = c->lowers ? json_array_size(c->lowers) : 1;
        for (size_t i = 0; i < nl; i++) {
            const char *path = c->lowers ? json_string_value(json_array_get(c->lowers, i))
                                         : c->lower;
            int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
            if (fd < 0)
                die_errno("cannot open the image layer %s", path);
            lower_fds[nlower_fds++] = fd;
            lp += (size_t)snprintf(lower + lp, sizeof(lower) - lp, "%s/proc/self/fd/%d",
                                   i ? ":" : "", fd);
        }
    }

    /*
     * 8. The root: overlay of the cached read-only image under the tmpfs
     *    upper. nodev: even a device node that slipped into an image opens
     *    nothing. nosuid: no_new_privs already makes setuid files useless to
     *    the box, and this keeps them so for a host process that reaches
     *    them through /proc/<pid>/root. userxattr lets an unprivileged
     *    (user-namespace) mounter keep whiteouts in user.* xattrs.
     */
    _cleanup_free_ char *ovl = sbx__printf("lowerdir=%s,upperdir=%s,workdir=%s%s", lower,
                                           upper, work, c->userns ? ",userxattr" : "");
    if (!ovl)
        die("out of memory");
    if (mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV, ovl) < 0) {
        if (errno == ENODEV)
            die("overlayfs is not available in this kernel (modprobe overlay)");
        die_errno("mount overlay on %s (lower %s)", root, c->lower);
    }
    for (size_t i = 0; i < nlower_fds; i++)
        close(lower_fds[i]);

    shim_trace("child: overlay mounted");
    /*
     * 8b. Nothing below may follow the image's symlinks out of the box: the
     *     points sbx mounts on are made real directories, and the workdir
     *     and /etc are resolved inside the root (src/core/inroot.c).
     */
    _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        die_errno("cannot open %s", root);
    static const char *const points[] = {"proc", "sys", "dev"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(points); i++)
        close(real_dir(rootfd, points[i], 0555));
    if (c->workdir && *c->workdir) {
        int wd = sbx__inroot_mkdir_p(rootfd, c->workdir, 0755);
        if (wd < 0)
            die_errno("cannot create the workdir %s in the box", c->workdir);
        close(wd);
    }
    write_etc(rootfd, c);

    /* 9. What lives on top of the root. */
    if (c->none_image)
        bind_host_system(root, c->userns ? &idm : NULL);
    shim_trace("child: host system bound");
    mount_proc(root);
    shim_trace("child: proc");
    mount_sys(c, root);
    shim_trace("child: sys");
    mount_dev(c, root);
    shim_trace("child: dev");
    if (c->cdi) {
        apply_cdi(c, root);
        shim_trace("child: cdi");
    }
    /*
     * [volumes] After /proc, /sys, /dev and the CDI mounts, so a volume may
     * go anywhere in the box but cannot hide what sbx mounted beneath it.
     */
    if (vols.n) {
        mount_volumes(c, root, &vols);
        shim_trace("child: volumes");
    }
    _cleanup_free_ char *tmp = path2(root, "/tmp");
    if (!exists(tmp)) {
        mkdirs(tmp, 01777);
        chmod(tmp, 01777);
    }

    shim_trace("child: mounts done");
    /*
     * 10. pivot_root(".", ".") stacks the old root on top of the new one at
     *     "/", and the lazy unmount then detaches the whole host tree (and the
     *     tmpfs, which the overlay and the /dev binds keep alive by
     *     reference). No put_old directory is needed inside the image.
     */
    if (chdir(root) < 0)
        die_errno("chdir %s", root);
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        die_errno("pivot_root");
    if (umount2(".", MNT_DETACH) < 0)
        die_errno("umount the host's root");
    if (chdir("/") < 0)
        die_errno("chdir /");
    if (c->workdir && *c->workdir && chdir(c->workdir) < 0)
        die_errno("chdir %s", c->workdir);

    shim_trace("child: pivoted");
    /*
     * 11. A cgroup namespace rooted at the box's own group (we are in it since
     *     step 2), so /proc/self/cgroup shows "/" and not the host's tree;
     *     then, inside it, the read-only view of that group at /sys/fs/cgroup.
     */
    if (unshare(CLONE_NEWCGROUP) < 0)
        die_errno("unshare(CLONE_NEWCGROUP)");
    mount_cgroup_view(f);

    /*
     * 12. The agent keeps its readiness descriptor and its listening socket
     *     across the exec (their numbers go on its command line); every
     *     other descriptor we hold is close-on-exec.
     */
    if (fcntl(f->ready_w, F_SETFD, 0) < 0 || fcntl(listen_fd, F_SETFD, 0) < 0)
        die_errno("fcntl");
    /*
     * [svc-logs] The service log pipes become the agent's stdout and stderr
     * (dup2 clears close-on-exec): the agent's own lines and its service's
     * output reach the shim, which keeps them in service.log.
     */
    if (f->out_w >= 0 && f->errl_w >= 0) {
        if (dup2(f->out_w, STDOUT_FILENO) < 0 || dup2(f->errl_w, STDERR_FILENO) < 0)
            die_errno("dup2 of the service log pipes");
        close(f->out_w);
        close(f->errl_w);
    }

    /*
     * 13. The box's descriptor limit. The provider checked it against its own
     *     hard limit, which the shim and we inherited; checked again here,
     *     because until step 14 we could still raise it (CAP_SYS_RESOURCE),
     *     and a box must never get more than its creator had.
     */
    if (c->nofile_hard > 0) {
        struct rlimit cur, rl = { (rlim_t)c->nofile_soft, (rlim_t)c->nofile_hard };
        if (getrlimit(RLIMIT_NOFILE, &cur) == 0 && rl.rlim_max > cur.rlim_max)
            die("the box's nofile hard limit %lld is above sbx-shim's own (%llu)",
                c->nofile_hard, (unsigned long long)cur.rlim_max);
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            die_errno("cannot set the box's nofile limit to %lld:%lld", c->nofile_soft,
                      c->nofile_hard);
    }

    /* 14. Capabilities, no_new_privs, seccomp: last, so the setup above could use them. */
    char msg[512];
    if (shim_drop_privileges(c, f->filter, msg, sizeof(msg)) < 0)
        die("%s", msg);

    shim_trace("child: privileges dropped");
    size_t n_ep = c->entrypoint ? json_array_size(c->entrypoint) : 0;
    const char **argv = calloc(12 + n_ep + 1, sizeof(char *));
    if (!argv)
        die("out of memory");
    char listen_arg[16], ready_arg[16];
    snprintf(listen_arg, sizeof(listen_arg), "%d", listen_fd);
    snprintf(ready_arg, sizeof(ready_arg), "%d", f->ready_w);
    size_t k = 0;
    argv[k++] = "sbx-agent";
    argv[k++] = "init";
    argv[k++] = "--listen-fd";
    argv[k++] = listen_arg;
    argv[k++] = "--ready-fd";
    argv[k++] = ready_arg;
    if (c->shell && c->shell[0]) {
        argv[k++] = "--shell";
        argv[k++] = c->shell;
    }
    if (c->user && c->user[0]) {
        argv[k++] = "--user";
        argv[k++] = c->user;
    }
    if (n_ep) {
        argv[k++] = "--";
        for (size_t i = 0; i < n_ep; i++)
            argv[k++] = json_string_value(json_array_get(c->entrypoint, i));
    }
    argv[k] = NULL;
    const char **envp = env_vector(c);

    /*
     * 15. execveat on the descriptor opened on the host: the agent binary
     *     need not exist in the image. It is static, so no interpreter or
     *     library has to be found inside the box.
     */
    syscall(SYS_execveat, f->agent_fd, "", argv, envp, AT_EMPTY_PATH);
    die_errno("cannot execute the agent %s", c->agent);
}
