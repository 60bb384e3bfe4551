/*
 * Images of the linux provider: read-only root trees cached once under the
 * state directory, shared by every box through overlayfs.
 *
 *   images/sha256-<hex>/rootfs     the unpacked tree (hex: the tarball's or
 *                                  the OCI manifest's sha256)
 *   images/sha256-<hex>/meta.json  {"digest","source","created","size"}
 *   images/names/<name>            {"digest": ...} for `sbx image import`
 *   images/sources/<key>           the digest of a path, keyed by
 *                                  sha256(path, size, mtime, inode), so a
 *                                  box from the same tarball never rehashes it
 *   images/none-v2/                the "none" image's skeleton
 *
 * Every tree is built in a temporary directory and renamed into place, so a
 * crash mid-import leaves only a *.tmp-* directory that the next import of
 * the same thing ignores (and that image_remove cleans).
 */
#include "providers/linux/linux.h"

#include "core/inroot.h"
#include "providers/linux/image_formats.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <time.h>

/* Finishes `s` (nettle resets it for reuse) and writes the digest as 64 hex digits. */
static void sha256_hex(struct sha256_ctx *s, char out[65])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(s, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/*
 * The store's root, images/, is reachable by its owner only (0700, owned by
 * whoever runs sbx: root for the linux provider). Its trees keep what their
 * programs need in a box — setuid files, file capabilities, root-owned
 * files — and nobody else on the host may reach them: a setuid-root file
 * there would be a way to root for any local user. A store made by an older
 * sbx (0755) is tightened here; one owned by someone else, or a link, is
 * refused.
 */
static int check_store(const char *state_dir, sbx_error **err)
{
    _cleanup_free_ char *p = sbx__printf("%s/images", state_dir);
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /* The state directory's own mode is state.c's business; images/ is made 0700 here. */
    if ((sbx__mkdir_p(state_dir, 0755) < 0 || mkdir(p, 0700) < 0) && errno != EEXIST)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot create the image store %s", p);
    _cleanup_close_ int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno,
                              "the image store %s is not a directory (a link?): remove it", p);
    if (st.st_uid != geteuid())
        return sbx__set_error(err, SBX_ECREATE,
                              "the image store %s belongs to uid %u, not to this user (%u): "
                              "remove it or use another state_dir",
                              p, (unsigned)st.st_uid, (unsigned)geteuid());
    if ((st.st_mode & 077) && fchmod(fd, 0700) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot make the image store %s private",
                              p);
    return SBX_OK;
}

static int mkdir_for(const char *state_dir, const char *sub, char **out, sbx_error **err)
{
    int rc = check_store(state_dir, err);
    if (rc < 0)
        return rc;
    char *p = sbx__printf("%s/images/%s", state_dir, sub);
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx__mkdir_p(p, 0700) < 0) {
        int e = errno;
        free(p);
        return sbx__set_errno(err, SBX_ECREATE, e, "cannot create the image cache under %s",
                              state_dir);
    }
    *out = p;
    return SBX_OK;
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_link(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISLNK(st.st_mode);
}

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Copies a small regular file's bytes (following symlinks at the source). */
static void copy_file(const char *src, const char *dst)
{
    char *data = NULL;
    size_t n = 0;
    struct stat st;
    if (stat(src, &st) < 0 || !S_ISREG(st.st_mode) || sbx__read_file(src, &data, &n) < 0)
        return;
    _cleanup_close_ int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0777);
    if (fd >= 0) {
        ssize_t w = write(fd, data, n);
        (void)w;
    }
    free(data);
}

/*
 * A temporary tree's name carries its owner (pid and start time), so that
 * sbx__linux_image_gc can tell an import in progress from one whose process
 * died: "<prefix>tmp-<pid>-<start>-<random>".
 */
static char *tmp_path(const char *prefix)
{
    char hex[17];
    sbx__random_hex(hex, 8);
    return sbx__printf("%stmp-%d-%llu-%s", prefix, (int)getpid(),
                       sbx__linux_proc_start(getpid()), hex);
}

/* --- the "none" image ---------------------------------------------------- */

/*
 * The skeleton the "none" image's boxes overlay: mount points for the host's
 * system directories (bound read-only in the box), the host's merged-/usr
 * links mirrored, a few /etc files copied (not the whole /etc: no shadow, no
 * keys), and private /tmp, /root, /home, /var/tmp. Its users and groups are
 * its own (root, nobody), not the host's: a box has no business knowing the
 * host's accounts, and a name it resolves must not be a host user's.
 */
static int build_skeleton(const char *dir, sbx_error **err)
{
    static const char *const mirror[] = { "bin", "sbin", "lib", "lib32", "lib64", "libx32" };
    static const char *const dirs[][2] = {
        { "usr", "0755" },  { "etc", "0755" },      { "proc", "0555" },     { "sys", "0555" },
        { "dev", "0755" },  { "run", "0755" },      { "tmp", "1777" },      { "root", "0700" },
        { "home", "0755" }, { "var", "0755" },      { "var/tmp", "1777" },  { "mnt", "0755" },
        { "opt", "0755" },  { "srv", "0755" },      { "etc/alternatives", "0755" },
        { "etc/ssl", "0755" }, { "etc/ld.so.conf.d", "0755" }, { "var/log", "0755" },
        { "var/cache", "0755" }, { "var/lib", "0755" },
    };
    static const char *const etc_files[] = {
        "hosts", "resolv.conf", "nsswitch.conf", "host.conf", "ld.so.cache",
        "ld.so.conf", "localtime", "timezone", "os-release", "debian_version", "shells",
        "profile", "bash.bashrc", "environment", "protocols", "services", "inputrc",
        "mime.types", "login.defs",
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(dirs); i++) {
        _cleanup_free_ char *p = sbx__printf("%s/%s", dir, dirs[i][0]);
        mode_t m = (mode_t)strtol(dirs[i][1], NULL, 8);
        if (!p || mkdir(p, m) < 0 || chmod(p, m) < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "cannot build the none image in %s",
                                  dir);
    }
    for (size_t i = 0; i < SBX_ARRAY_SIZE(mirror); i++) {
        _cleanup_free_ char *host = sbx__printf("/%s", mirror[i]);
        _cleanup_free_ char *p = sbx__printf("%s/%s", dir, mirror[i]);
        if (!host || !p)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        if (is_link(host)) {
            char target[4096];
            ssize_t n = readlink(host, target, sizeof(target) - 1);
            if (n > 0) {
                target[n] = 0;
                if (symlink(target, p) < 0)
                    return sbx__set_errno(err, SBX_ECREATE, errno, "symlink %s", p);
            }
        } else if (is_dir(host) && mkdir(p, 0755) < 0) {
            return sbx__set_errno(err, SBX_ECREATE, errno, "mkdir %s", p);
        }
    }
    for (size_t i = 0; i < SBX_ARRAY_SIZE(etc_files); i++) {
        _cleanup_free_ char *src = sbx__printf("/etc/%s", etc_files[i]);
        _cleanup_free_ char *dst = sbx__printf("%s/etc/%s", dir, etc_files[i]);
        if (src && dst)
            copy_file(src, dst);
    }
    /* tty: the group of the box's ptys (devpts gid=5, as on Debian and Fedora). */
    static const char *const accounts[][2] = {
        { "passwd", "root:x:0:0:root:/root:/bin/sh\n"
                    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" },
        { "group", "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(accounts); i++) {
        _cleanup_free_ char *dst = sbx__printf("%s/etc/%s", dir, accounts[i][0]);
        if (!dst)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        if (sbx__write_file_atomic(dst, accounts[i][1], strlen(accounts[i][1]), 0644) < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "cannot write %s", dst);
    }
    return SBX_OK;
}

static int none_image(const char *state_dir, char **out, sbx_error **err)
{
    _cleanup_free_ char *images = NULL;
    int rc = mkdir_for(state_dir, "", &images, err);
    if (rc < 0)
        return rc;
    char *dir = sbx__printf("%s/" SBX_LINUX_NONE_IMAGE, images);
    if (!dir)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (is_dir(dir)) {
        *out = dir;
        return SBX_OK;
    }
    _cleanup_free_ char *pre = sbx__printf("%s.", dir);
    _cleanup_free_ char *tmp = pre ? tmp_path(pre) : NULL;
    if (!tmp || mkdir(tmp, 0755) < 0) {
        free(dir);
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot create the none image");
    }
    rc = build_skeleton(tmp, err);
    /* Another process may have won the race: its skeleton is as good as ours. */
    if (rc == SBX_OK && rename(tmp, dir) < 0 && !is_dir(dir))
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot install the none image at %s", dir);
    sbx__rm_rf(tmp);
    if (rc < 0) {
        free(dir);
        return rc;
    }
    *out = dir;
    return SBX_OK;
}

/* --- unpacking ------------------------------------------------------------ */

/*
 * Bounds of one import, all layers together. The byte cap is the
 * configurable one (sbx_linux_image_opts.max_bytes, the provider's
 * max_image_bytes); entries and nesting have fixed bounds far above real
 * images (a Debian tree has ~20k entries and ~15 levels; the largest CUDA
 * images ~300k entries) that stop inode bombs and trees too deep for the
 * removal code (one descriptor per level) and core/inroot.c's walk (256).
 */
#define MAX_IMAGE_ENTRIES 4000000
#define MAX_IMAGE_DEPTH 256
#define DEFAULT_MAX_IMAGE_BYTES (16ull << 30)

struct import_ctl {
    const sbx_linux_image_opts *opts;
    uint64_t max_bytes; /* unpacked file data allowed */
    bool max_is_default;
    uint64_t bytes;     /* file data written so far, across layers */
    uint64_t entries;
};

static bool cancelled(const struct import_ctl *c)
{
    return c->opts && c->opts->cancelled && c->opts->cancelled(c->opts->data);
}

struct reader {
    int fd;
    struct sha256_ctx sha;
    unsigned char buf[1 << 16];
    uint64_t done, total;
    struct import_ctl *ctl;
    const char *stage;
    bool stopped; /* a cancel seen by read_cb */
};

static la_ssize_t read_cb(struct archive *a, void *data, const void **buf)
{
    struct reader *r = data;
    /* Checked per 64 KiB read: an import of any size answers a cancel promptly. */
    if (cancelled(r->ctl)) {
        r->stopped = true;
        archive_set_error(a, ECANCELED, "cancelled");
        return -1;
    }
    ssize_t n;
    do
        n = read(r->fd, r->buf, sizeof(r->buf));
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        archive_set_error(a, errno, "read: %s", strerror(errno));
        return -1;
    }
    sha256_update(&r->sha, (size_t)n, r->buf);
    r->done += (uint64_t)n;
    const sbx_linux_image_opts *o = r->ctl->opts;
    if (o && o->progress)
        o->progress(r->stage, r->done, r->total, o->data);
    *buf = r->buf;
    return n;
}

/*
 * The source itself cannot be used (not an archive, a corrupt one, `..`
 * entries, a broken OCI layout, too big): the input is at fault, not sbx. An
 * import reports it as such; sbx__linux_image_resolve turns it into
 * SBX_ECREATE, as every failed create is.
 */
#define BAD_SOURCE SBX_EINVAL

/*
 * The writer of one layer. Nothing is written by a path from the host's
 * "/": every entry's parent directory is opened inside the image root by
 * the kernel (sbx__inroot_open: openat2 RESOLVE_IN_ROOT, or core/inroot.c's
 * walk), so a link planted by this or an earlier layer (`evil -> /etc`) is
 * followed *inside* the tree, as the box will see it; the entry itself is
 * then made with *at() calls that never follow a link at its name. The
 * same holds for whiteouts, hard link targets, modes, owners and times.
 * (libarchive's archive_write_disk takes whole paths, and its SECURE flags
 * neither cover whiteouts nor resolve links inside a root.)
 */
struct unpacker {
    int rootfd;
    int root_depth; /* '/' in the root's own path */
    struct import_ctl *ctl;
    /* The parent last opened: archives list a directory's entries together. */
    char *pdir;
    int pfd;
    bool stale; /* something was removed: the cached parent may be gone */
    /*
     * Directory modes and times, set once the layer is written: adding
     * entries changes the times, and a read-only mode would stop a non-root
     * import from adding them.
     */
    struct dir_time {
        char *path;
        mode_t mode;
        struct timespec ts[2];
    } *times;
    size_t ntimes, cap;
    /*
     * The paths this layer wrote (a set). Whiteouts hide the lower layers
     * only (OCI image spec: a layer's own entries are not hidden by its
     * whiteouts, whatever their order in the tar).
     */
    json_t *made;
    /* Device nodes not created: a hard link to one is skipped too, not an error. */
    json_t *skipped;
};

static void drop_parent(struct unpacker *u)
{
    if (u->pfd >= 0)
        close(u->pfd);
    u->pfd = -1;
    free(u->pdir);
    u->pdir = NULL;
    u->stale = false;
}

/* How many directories deep `fd` is under the root; -1 when too deep to name. */
static int depth_of(int fd, int root_depth)
{
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path));
    if (n < 0)
        /* Without /proc the name's own bound (256 components) still holds. */
        return errno == ENAMETOOLONG ? -1 : 0;
    if ((size_t)n >= sizeof(path))
        return -1;
    int d = 0;
    for (ssize_t i = 0; i < n; i++)
        d += path[i] == '/';
    return d - root_depth;
}

/* `path` ("" for the root) opened inside the root with `flags`. */
static int open_in(struct unpacker *u, const char *path, int flags)
{
    return sbx__inroot_open(u->rootfd, *path ? path : ".", flags, 0);
}

/*
 * Makes the missing directories of `dir` one at a time, inside the root,
 * each checked for depth before it is made (so no tree deeper than the
 * bound ever exists, and removing it never runs out of descriptors). A
 * missing component that is a link to nothing yet gets its target made in
 * its place, as Docker and containerd do, itself resolved inside the root
 * (core/inroot.c's mkdir_p does the same without the depth check). Returns
 * an O_PATH descriptor of `dir`, or -1 with errno (E2BIG: too deep).
 */
static int make_dirs(struct unpacker *u, const char *dir, int links)
{
    _cleanup_free_ char *buf = strdup(dir);
    if (!buf)
        return -1;
    int prev = open_in(u, "", O_PATH | O_DIRECTORY);
    size_t len = strlen(buf);
    for (size_t i = 0; prev >= 0 && i <= len; i++) {
        if (buf[i] != '/' && buf[i] != 0)
            continue;
        if (i == 0 || buf[i - 1] == '/')
            continue;
        char saved = buf[i];
        buf[i] = 0;
        int fd = open_in(u, buf, O_PATH | O_DIRECTORY);
        if (fd < 0 && errno == ENOENT) {
            char *slash = strrchr(buf, '/');
            const char *name = slash ? slash + 1 : buf;
            int d = depth_of(prev, u->root_depth);
            if (d < 0 || d + 1 >= MAX_IMAGE_DEPTH) {
                close(prev);
                errno = E2BIG;
                return -1;
            }
            if (mkdirat(prev, name, 0755) == 0) {
                fd = openat(prev, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            } else if (errno == EEXIST) {
                /* A link to a path not there yet: make its target, then the rest under it. */
                char target[PATH_MAX];
                ssize_t tl = readlinkat(prev, name, target, sizeof(target) - 1);
                close(prev);
                if (tl < 0 || ++links > 40) {
                    errno = tl < 0 ? errno : ELOOP;
                    return -1;
                }
                target[tl] = 0;
                if (slash)
                    *slash = 0;
                _cleanup_free_ char *next =
                    target[0] == '/' ? sbx__printf("%s%s%s", target, saved ? "/" : "",
                                                   saved ? buf + i + 1 : "")
                                     : sbx__printf("%s/%s%s%s", slash ? buf : "", target,
                                                   saved ? "/" : "", saved ? buf + i + 1 : "");
                if (!next) {
                    errno = ENOMEM;
                    return -1;
                }
                return make_dirs(u, next, links);
            }
        }
        int e = errno;
        close(prev);
        prev = fd;
        errno = e;
        buf[i] = saved;
    }
    return prev;
}

/*
 * The directory that receives `parent`'s entries (made when missing, inside
 * the root too). -1 with errno; E2BIG when it lies too deep.
 */
static int parent_fd(struct unpacker *u, const char *parent)
{
    if (u->pfd >= 0 && !u->stale && !strcmp(u->pdir, parent))
        return u->pfd;
    drop_parent(u);
    int fd = open_in(u, parent, O_PATH | O_DIRECTORY);
    if (fd < 0 && errno == ENOENT)
        fd = make_dirs(u, parent, 0);
    if (fd < 0)
        return -1;
    int d = depth_of(fd, u->root_depth);
    if (d < 0 || d >= MAX_IMAGE_DEPTH) {
        close(fd);
        errno = E2BIG;
        return -1;
    }
    u->pdir = strdup(parent);
    if (!u->pdir) {
        close(fd);
        errno = ENOMEM;
        return -1;
    }
    u->pfd = fd;
    return fd;
}

/* Whose fault a failed file operation is: a name the kernel refuses is the archive's. */
static int code_for(int e)
{
    return e == ENAMETOOLONG || e == ELOOP || e == ENOTDIR || e == EEXIST ? BAD_SOURCE
                                                                          : SBX_ECREATE;
}

/* Removes whatever is at `name` under `pfd` (a tree too), never following a link. */
static int remove_at(struct unpacker *u, int pfd, const char *name)
{
    u->stale = true;
    return sbx__rm_rf_at(pfd, name);
}

/*
 * "./a//b/." -> "a/b" in place. 1: the root itself; -1: a ".." component
 * (refused: RESOLVE_IN_ROOT would keep it inside, but an archive that
 * climbs is malformed); 0: a path.
 */
static int clean_path(char *p)
{
    char *w = p;
    const char *r = p;
    while (*r) {
        while (*r == '/')
            r++;
        const char *end = r;
        while (*end && *end != '/')
            end++;
        size_t len = (size_t)(end - r);
        if (len == 2 && r[0] == '.' && r[1] == '.')
            return -1;
        if (len && !(len == 1 && r[0] == '.')) {
            if (w != p)
                *w++ = '/';
            memmove(w, r, len);
            w += len;
        }
        r = end;
    }
    *w = 0;
    return *p ? 0 : 1;
}

/* Splits a clean path at its last '/': `*base` points into it; the parent is "" for the root. */
static void split_path(char *p, const char **parent, const char **base)
{
    char *slash = strrchr(p, '/');
    if (slash) {
        *slash = 0;
        *parent = p;
        *base = slash + 1;
    } else {
        *parent = "";
        *base = p;
    }
}

static void entry_times(struct archive_entry *e, struct timespec ts[2])
{
    ts[1].tv_sec = archive_entry_mtime_is_set(e) ? archive_entry_mtime(e) : 0;
    ts[1].tv_nsec = archive_entry_mtime_is_set(e) ? archive_entry_mtime_nsec(e) : UTIME_OMIT;
    if (archive_entry_atime_is_set(e)) {
        ts[0].tv_sec = archive_entry_atime(e);
        ts[0].tv_nsec = archive_entry_atime_nsec(e);
    } else {
        ts[0] = ts[1];
    }
}

/*
 * Owner, mode (setuid and all: the image's programs must work in the box as
 * in Docker; the store is root's alone, see the file comment), the xattrs a
 * box may rely on, and times, on an open file or directory. chown first:
 * it clears setuid bits and file capabilities.
 */
static void set_meta(int fd, struct archive_entry *e, bool mode_and_times)
{
    if (fchown(fd, archive_entry_uid(e), archive_entry_gid(e)) < 0) {
        /* Not root (a test's private store): files stay the importer's. */
    }
    if (mode_and_times && fchmod(fd, archive_entry_mode(e) & 07777) < 0) {
        /* Only on a read-only or odd filesystem; the tree is still usable. */
    }
    const char *name;
    const void *val;
    size_t size;
    archive_entry_xattr_reset(e);
    while (archive_entry_xattr_next(e, &name, &val, &size) == ARCHIVE_OK) {
        /*
         * user.* and file capabilities only: trusted.* (overlayfs' own
         * trusted.overlay.* among them) and the other security.* names would
         * let a layer steer the box's overlay or LSMs.
         */
        if (!strncmp(name, "user.", 5) || !strcmp(name, "security.capability"))
            (void)fsetxattr(fd, name, val, size, 0);
    }
    if (mode_and_times) {
        struct timespec ts[2];
        entry_times(e, ts);
        (void)futimens(fd, ts);
    }
}

static int write_data(struct unpacker *u, struct archive *a, struct archive_entry *e, int fd,
                      const char *path, sbx_error **err)
{
    const void *buf;
    size_t len;
    la_int64_t off;
    int k;
    struct import_ctl *c = u->ctl;
    while ((k = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
        if (cancelled(c))
            return sbx__set_error(err, SBX_ECANCELED, "image import cancelled");
        /* Data actually written is what fills the disk: sparse holes are not counted. */
        if (len > c->max_bytes - c->bytes)
            return sbx__set_error(
                err, BAD_SOURCE, "the image unpacks to more than %llu bytes (at %s); %s",
                (unsigned long long)c->max_bytes, path,
                c->max_is_default
                    ? "the default cap is the smaller of 16 GiB and half the free space of the "
                      "state directory's filesystem: set the linux provider's max_image_bytes "
                      "(or `sbx image import --max-bytes`) to allow more"
                    : "raise max_image_bytes (or `sbx image import --max-bytes`) to allow more");
        c->bytes += len;
        const char *p = buf;
        while (len) {
            ssize_t n = pwrite(fd, p, len, off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return sbx__set_errno(err, SBX_ECREATE, errno, "writing %s of the image", path);
            p += n;
            len -= (size_t)n;
            off += n;
        }
    }
    if (k != ARCHIVE_EOF)
        return sbx__set_error(err, BAD_SOURCE, "reading the image archive at %s: %s", path,
                              archive_error_string(a));
    /* A sparse file's trailing hole. */
    if (archive_entry_size_is_set(e) && ftruncate(fd, archive_entry_size(e)) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "writing %s of the image", path);
    return SBX_OK;
}

/* Whether this layer wrote `dir`/`name` itself (then its whiteouts spare it). */
static bool made_here(struct unpacker *u, const char *dir, const char *name)
{
    if (!u->made || !json_object_size(u->made))
        return false;
    _cleanup_free_ char *p = sbx__printf("%s%s%s", dir, *dir ? "/" : "", name);
    return p && json_object_get(u->made, p) != NULL;
}

/* Applies an OCI whiteout: `name` (or, for ".wh..opq", everything) under `dir` goes. */
static int whiteout(struct unpacker *u, const char *dir, const char *name, sbx_error **err)
{
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return SBX_OK;
    u->stale = true;
    if (!strcmp(name, ".wh..opq")) {
        /* Opaque directory: the lower layers' contents of `dir` vanish. */
        int fd = open_in(u, dir, O_RDONLY | O_DIRECTORY);
        if (fd < 0)
            return errno == ENOENT || errno == ENOTDIR
                       ? SBX_OK
                       : sbx__set_errno(err, SBX_ECREATE, errno, "whiteout in %s", dir);
        DIR *dh = fdopendir(fd);
        if (!dh) {
            close(fd);
            return sbx__set_errno(err, SBX_ENOMEM, errno, "whiteout in %s", dir);
        }
        int rc = SBX_OK;
        struct dirent *de;
        while ((de = readdir(dh))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
                made_here(u, dir, de->d_name))
                continue;
            if (sbx__rm_rf_at(dirfd(dh), de->d_name) < 0) {
                rc = sbx__set_errno(err, SBX_ECREATE, errno, "whiteout of %s/%s", dir,
                                    de->d_name);
                break;
            }
        }
        closedir(dh);
        return rc;
    }
    if (made_here(u, dir, name))
        return SBX_OK;
    _cleanup_close_ int fd = open_in(u, dir, O_PATH | O_DIRECTORY);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR
                   ? SBX_OK
                   : sbx__set_errno(err, SBX_ECREATE, errno, "whiteout in %s", dir);
    if (sbx__rm_rf_at(fd, name) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "whiteout of %s/%s", dir, name);
    return SBX_OK;
}

/* A hard link: both ends resolved inside the root; a link at the target is linked, not followed. */
static int put_hardlink(struct unpacker *u, int pfd, const char *base, const char *path,
                        const char *target, sbx_error **err)
{
    _cleanup_free_ char *t = strdup(target);
    if (!t)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int c = clean_path(t);
    if (c != 0)
        return sbx__set_error(err, BAD_SOURCE, "hard link %s points at %s, outside the image",
                              path, target);
    if (u->skipped && json_object_get(u->skipped, t))
        return SBX_OK;
    const char *tparent, *tbase;
    split_path(t, &tparent, &tbase);
    _cleanup_close_ int tfd = open_in(u, tparent, O_PATH | O_DIRECTORY);
    struct stat ts, ds;
    if (tfd < 0 || fstatat(tfd, tbase, &ts, AT_SYMLINK_NOFOLLOW) < 0)
        return sbx__set_error(err, BAD_SOURCE, "hard link %s: its target %s is not in the image",
                              path, target);
    if (fstatat(pfd, base, &ds, AT_SYMLINK_NOFOLLOW) == 0) {
        if (ds.st_dev == ts.st_dev && ds.st_ino == ts.st_ino)
            return SBX_OK;
        if (remove_at(u, pfd, base) < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "replacing %s in the image", path);
    }
    if (linkat(tfd, tbase, pfd, base, 0) < 0)
        return sbx__set_errno(err, errno == EPERM ? BAD_SOURCE : SBX_ECREATE, errno,
                              "hard link %s -> %s", path, target);
    return SBX_OK;
}

/* Writes one entry (not a whiteout) at `path` (clean, not the root). */
static int put_entry(struct unpacker *u, struct archive *a, struct archive_entry *e, char *path,
                     sbx_error **err)
{
    _cleanup_free_ char *shown = strdup(path);
    if (!shown)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    const char *parent, *base;
    split_path(path, &parent, &base);
    int pfd = parent_fd(u, parent);
    /* ENAMETOOLONG: inroot.c's walk (no openat2) stops at the same depth. */
    if (pfd < 0)
        return errno == E2BIG || errno == ENAMETOOLONG
                   ? sbx__set_error(err, BAD_SOURCE,
                                    "%s lies more than %d directories deep (links followed), or "
                                    "its path or a name in it is too long",
                                    shown, MAX_IMAGE_DEPTH)
                   : sbx__set_errno(err, code_for(errno), errno,
                                    "cannot make the directory of %s in the image", shown);
    const char *hl = archive_entry_hardlink(e);
    if (hl)
        return put_hardlink(u, pfd, base, shown, hl, err);
    mode_t type = archive_entry_filetype(e);
    struct stat st;
    bool exists = fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
    /* Whatever is there goes, except a directory a directory entry updates. */
    if (exists && !(type == AE_IFDIR && S_ISDIR(st.st_mode))) {
        if (remove_at(u, pfd, base) < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "replacing %s in the image", shown);
    }
    switch (type) {
    case AE_IFDIR: {
        if (!(exists && S_ISDIR(st.st_mode)) && mkdirat(pfd, base, 0700) < 0)
            return sbx__set_errno(err, code_for(errno), errno, "mkdir %s in the image", shown);
        _cleanup_close_ int fd =
            openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "opening %s in the image", shown);
        set_meta(fd, e, false);
        if (u->ntimes == u->cap) {
            size_t nc = u->cap ? u->cap * 2 : 256;
            struct dir_time *nt = realloc(u->times, nc * sizeof(*nt));
            if (!nt)
                return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            u->times = nt;
            u->cap = nc;
        }
        u->times[u->ntimes].path = steal_pointer(&shown);
        u->times[u->ntimes].mode = archive_entry_mode(e) & 07777;
        entry_times(e, u->times[u->ntimes].ts);
        u->ntimes++;
        return SBX_OK;
    }
    case AE_IFREG: {
        /* O_EXCL|O_NOFOLLOW: a new inode, never a write through a link or into a hard link. */
        _cleanup_close_ int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
                                                       O_CLOEXEC, 0600);
        if (fd < 0)
            return sbx__set_errno(err, code_for(errno), errno, "creating %s in the image", shown);
        int rc = write_data(u, a, e, fd, shown, err);
        if (rc < 0)
            return rc;
        set_meta(fd, e, true);
        return SBX_OK;
    }
    case AE_IFLNK: {
        const char *target = archive_entry_symlink(e);
        if (!target || !*target)
            return sbx__set_error(err, BAD_SOURCE, "symlink %s has no target", shown);
        /* Any target is fine: the box and this unpacker resolve it inside the root. */
        if (symlinkat(target, pfd, base) < 0)
            return sbx__set_errno(err, code_for(errno), errno, "symlink %s in the image", shown);
        (void)fchownat(pfd, base, archive_entry_uid(e), archive_entry_gid(e),
                       AT_SYMLINK_NOFOLLOW);
        struct timespec ts[2];
        entry_times(e, ts);
        (void)utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW);
        return SBX_OK;
    }
    case AE_IFIFO: {
        /* A fifo carries no privilege: kept, as some programs expect theirs. */
        if (mkfifoat(pfd, base, 0600) < 0)
            return sbx__set_errno(err, code_for(errno), errno, "mkfifo %s in the image", shown);
        _cleanup_close_ int fd = openat(pfd, base, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0)
            set_meta(fd, e, true);
        return SBX_OK;
    }
    default:
        /*
         * Device nodes are not created: a box's /dev is sbx's own, and a node
         * in the image (`c 1,3 0666`, a disk's `b 8,0`) would be a door to
         * the host's devices for whoever reaches the tree. Sockets cannot be
         * restored from an archive anyway.
         */
        if (!u->skipped)
            u->skipped = json_object();
        if (u->skipped)
            json_object_set_new(u->skipped, shown, json_null());
        return SBX_OK;
    }
}

/*
 * Sets the directories' modes and times, now that their entries are
 * written. Each is opened inside the root again, never through a link at
 * its name: a later entry may have replaced the directory by a link to
 * anywhere (libarchive's deferred chmod once followed such a link).
 */
static void apply_dir_meta(struct unpacker *u)
{
    for (size_t i = 0; i < u->ntimes; i++) {
        int fd = open_in(u, u->times[i].path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (fd >= 0) {
            (void)fchmod(fd, u->times[i].mode);
            (void)futimens(fd, u->times[i].ts);
            close(fd);
        }
    }
}

/*
 * Unpacks one tar stream (any compression libarchive knows) into the tree
 * at `rootfd`. With `oci`, ".wh." entries are applied as whiteouts instead
 * of written.
 */
static int unpack(struct reader *r, int rootfd, bool oci, sbx_error **err)
{
    struct import_ctl *c = r->ctl;
    struct unpacker u = {
        .rootfd = rootfd, .pfd = -1, .ctl = c, .made = oci ? json_object() : NULL
    };
    u.root_depth = depth_of(rootfd, 0);
    struct archive *a = archive_read_new();
    if (!a)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    int rc = SBX_OK;
    if (archive_read_open(a, r, NULL, read_cb, NULL) != ARCHIVE_OK) {
        rc = r->stopped ? sbx__set_error(err, SBX_ECANCELED, "image import cancelled")
                        : sbx__set_error(err, BAD_SOURCE, "not a tar archive: %s",
                                         archive_error_string(a));
        goto out;
    }
    struct archive_entry *e;
    for (;;) {
        int s = archive_read_next_header(a, &e);
        if (s == ARCHIVE_EOF)
            break;
        if (r->stopped || cancelled(c)) {
            rc = sbx__set_error(err, SBX_ECANCELED, "image import cancelled");
            goto out;
        }
        if (s < ARCHIVE_WARN) {
            rc = sbx__set_error(err, BAD_SOURCE, "reading the image archive: %s",
                                archive_error_string(a));
            goto out;
        }
        if (++c->entries > MAX_IMAGE_ENTRIES) {
            rc = sbx__set_error(err, BAD_SOURCE, "the image has more than %d entries",
                                MAX_IMAGE_ENTRIES);
            goto out;
        }
        const char *orig = archive_entry_pathname(e);
        if (!orig)
            continue;
        if (strlen(orig) >= PATH_MAX) {
            rc = sbx__set_error(err, BAD_SOURCE, "an entry's path is longer than %d bytes",
                                PATH_MAX - 1);
            goto out;
        }
        _cleanup_free_ char *path = strdup(orig);
        if (!path) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            goto out;
        }
        int cl = clean_path(path);
        if (cl < 0) {
            rc = sbx__set_error(err, BAD_SOURCE, "unpacking %s: a path with '..' leaves the image",
                                orig);
            goto out;
        }
        if (cl > 0)
            continue; /* the root itself: the store's directory stays as it is */
        size_t depth = 0;
        for (const char *q = path; *q; q++)
            depth += *q == '/';
        if (depth >= MAX_IMAGE_DEPTH) {
            rc = sbx__set_error(err, BAD_SOURCE, "%.200s... lies more than %d directories deep",
                                path, MAX_IMAGE_DEPTH);
            goto out;
        }
        if (oci) {
            const char *slash = strrchr(path, '/');
            const char *base = slash ? slash + 1 : path;
            if (!strncmp(base, ".wh.", 4)) {
                _cleanup_free_ char *dir = strndup(path, slash ? (size_t)(slash - path) : 0);
                rc = dir ? whiteout(&u, dir, base + 4, err)
                         : sbx__set_error(err, SBX_ENOMEM, "out of memory");
                if (rc < 0)
                    goto out;
                continue;
            }
        }
        if (oci && u.made)
            json_object_set_new(u.made, path, json_null());
        rc = put_entry(&u, a, e, path, err);
        if (rc < 0)
            goto out;
    }
    apply_dir_meta(&u);
    /* Drain what follows the archive so the digest covers the whole file. */
    while (read_cb(a, r, &(const void *){ NULL }) > 0)
        ;
    if (r->stopped)
        rc = sbx__set_error(err, SBX_ECANCELED, "image import cancelled");
out:
    drop_parent(&u);
    for (size_t i = 0; i < u.ntimes; i++)
        free(u.times[i].path);
    free(u.times);
    json_decref(u.made);
    json_decref(u.skipped);
    archive_read_free(a);
    return rc;
}

static uint64_t tree_size(const char *root)
{
    uint64_t total = 0;
    DIR *d = opendir(root);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        _cleanup_free_ char *p = sbx__printf("%s/%s", root, de->d_name);
        struct stat st;
        if (!p || lstat(p, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode))
            total += tree_size(p);
        else
            total += (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
    return total;
}

static int write_json(const char *path, json_t *j)
{
    _cleanup_free_ char *t = json_dumps(j, JSON_COMPACT);
    return t ? sbx__write_file_atomic(path, t, strlen(t), 0644) : -1;
}

/* Moves an unpacked temp tree to images/sha256-<hex>, keeping an existing one. */
static int install_tree(const char *images, const char *tmp, const char *hex, const char *source,
                        char **digest_dir, sbx_error **err)
{
    _cleanup_free_ char *dir = sbx__printf("%s/sha256-%s", images, hex);
    if (!dir)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!is_dir(dir)) {
        json_t *meta = json_pack("{s:s+, s:s, s:f, s:I}", "digest", "sha256:", hex, "source",
                                 source, "created", now_unix(), "size",
                                 (json_int_t)tree_size(tmp));
        _cleanup_free_ char *mp = sbx__printf("%s/meta.json", tmp);
        int w = meta && mp ? write_json(mp, meta) : -1;
        json_decref(meta);
        if (w < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "cannot write image metadata");
        if (rename(tmp, dir) < 0 && !is_dir(dir))
            return sbx__set_errno(err, SBX_ECREATE, errno, "cannot install image at %s", dir);
    }
    *digest_dir = steal_pointer(&dir);
    return SBX_OK;
}

static char *source_key(const char *path, const struct stat *st)
{
    struct sha256_ctx s;
    sha256_init(&s);
    char buf[256];
    snprintf(buf, sizeof(buf), "|%lld|%lld.%09ld|%llu", (long long)st->st_size,
             (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec, (unsigned long long)st->st_ino);
    sha256_update(&s, strlen(path), (const uint8_t *)path);
    sha256_update(&s, strlen(buf), (const uint8_t *)buf);
    char hex[65];
    sha256_hex(&s, hex);
    return strdup(hex);
}

/* What a file that cannot be an image source is, for the error. */
static const char *kind_of(mode_t m)
{
    return S_ISCHR(m)    ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISFIFO(m) ? "a fifo"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/*
 * Opens a file of a source for reading: a regular file only. /dev/zero, a
 * fifo or a terminal would be read (and hashed) forever; O_NONBLOCK keeps
 * the open itself from waiting on a fifo swapped in after a stat.
 */
static int open_regular(const char *path, sbx_error **err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return sbx__set_errno(err, errno == ENOENT ? BAD_SOURCE : SBX_ECREATE, errno,
                              "cannot open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sbx__set_error(err, BAD_SOURCE,
                              "%s is %s: an image source is a regular file (a tarball) or a "
                              "directory (a root tree or an OCI layout)",
                              path, kind_of(st.st_mode));
    }
    fcntl(fd, F_SETFL, 0);
    return fd;
}

/*
 * A new temporary tree images/tmp-<owner>-<random>/rootfs: `*tmp` is its
 * top, `*rootfd` an O_PATH descriptor of the rootfs it unpacks into.
 */
static int make_tmp(const char *images, char **tmp, int *rootfd, sbx_error **err)
{
    _cleanup_free_ char *pre = sbx__printf("%s/", images);
    _cleanup_free_ char *t = pre ? tmp_path(pre) : NULL;
    _cleanup_free_ char *rootfs = t ? sbx__printf("%s/rootfs", t) : NULL;
    if (!rootfs)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (mkdir(t, 0700) < 0 || mkdir(rootfs, 0755) < 0) {
        int e = errno;
        sbx__rm_rf(t);
        return sbx__set_errno(err, SBX_ECREATE, e, "cannot create a directory in %s", images);
    }
    *rootfd = open(rootfs, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*rootfd < 0) {
        int e = errno;
        sbx__rm_rf(t);
        return sbx__set_errno(err, SBX_ECREATE, e, "cannot open %s", rootfs);
    }
    *tmp = steal_pointer(&t);
    return SBX_OK;
}

/*
 * Unpacks a tar stream read from `fd` (closed here) into the cache;
 * `*digest_dir` is images/sha256-<hex>. `finish` (optional), called once
 * the stream is read, may still refuse it (a squashfs writer that failed).
 */
static int import_tarball_fd(const char *images, int fd, const char *path,
                             struct import_ctl *ctl, int (*finish)(void *, sbx_error **),
                             void *fdata, char **digest_dir, sbx_error **err)
{
    struct reader *r = calloc(1, sizeof(*r));
    if (!r) {
        close(fd);
        if (finish)
            finish(fdata, NULL);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    r->fd = fd;
    struct stat st;
    if (fstat(r->fd, &st) == 0)
        r->total = (uint64_t)st.st_size;
    r->ctl = ctl;
    r->stage = "unpack";
    sha256_init(&r->sha);
    _cleanup_free_ char *tmp = NULL;
    _cleanup_close_ int rootfd = -1;
    int rc = make_tmp(images, &tmp, &rootfd, err);
    if (rc == SBX_OK)
        rc = unpack(r, rootfd, false, err);
    close(r->fd);
    if (finish) {
        /* The writer's own error says more than the truncated stream it left. */
        sbx_error *fe = NULL;
        int frc = finish(fdata, &fe);
        if (frc < 0 && (rc == SBX_OK || rc == BAD_SOURCE)) {
            if (err && *err) {
                sbx_error_free(*err);
                *err = NULL;
            }
            rc = sbx__fail(err, fe);
        } else {
            sbx_error_free(fe);
        }
    }
    if (rc == SBX_OK) {
        char hex[65];
        sha256_hex(&r->sha, hex);
        rc = install_tree(images, tmp, hex, path, digest_dir, err);
    }
    free(r);
    if (tmp)
        sbx__rm_rf(tmp);
    return rc;
}

/* Unpacks a tarball into the cache; `*digest_dir` is images/sha256-<hex>. */
static int import_tarball(const char *images, const char *path, struct import_ctl *ctl,
                          char **digest_dir, sbx_error **err)
{
    int fd = open_regular(path, err);
    if (fd < 0)
        return fd;
    return import_tarball_fd(images, fd, path, ctl, NULL, NULL, digest_dir, err);
}

/* --- OCI image layouts ---------------------------------------------------- */

/*
 * A JSON file of a layout: a regular file of at most 4 MiB (not a fifo, not
 * /dev/zero). With `want_hex`, its bytes must hash to it: a manifest's
 * digest names the cached tree, so a blob that lies about its digest would
 * plant its tree under another image's name. `*mismatch` says so.
 */
static json_t *load_json(const char *path, const char *want_hex, bool *mismatch)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (4 << 20))
        return NULL;
    _cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
    size_t n = 0;
    while (buf && n < (size_t)st.st_size) {
        ssize_t k = read(fd, buf + n, (size_t)st.st_size - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    if (!buf || n != (size_t)st.st_size)
        return NULL;
    if (want_hex) {
        struct sha256_ctx sha;
        char hex[65];
        sha256_init(&sha);
        sha256_update(&sha, n, (const uint8_t *)buf);
        sha256_hex(&sha, hex);
        if (strcmp(hex, want_hex) != 0) {
            *mismatch = true;
            return NULL;
        }
    }
    return json_loadb(buf, n, 0, NULL);
}

static json_t *load_blob(const char *layout, const char *digest, char *hex_out, bool *mismatch)
{
    if (!digest || strncmp(digest, "sha256:", 7) || strchr(digest + 7, '/'))
        return NULL;
    if (hex_out)
        snprintf(hex_out, 65, "%s", digest + 7);
    _cleanup_free_ char *p = sbx__printf("%s/blobs/sha256/%s", layout, digest + 7);
    return p ? load_json(p, digest + 7, mismatch) : NULL;
}

static int import_oci(const char *images, const char *layout, const char *tag,
                      struct import_ctl *ctl, char **digest_dir, sbx_error **err)
{
    _cleanup_free_ char *ip = sbx__printf("%s/index.json", layout);
    _cleanup_json_ json_t *index = ip ? load_json(ip, NULL, NULL) : NULL;
    json_t *mans = json_object_get(index, "manifests");
    if (!json_is_array(mans) || !json_array_size(mans))
        return sbx__set_error(err, BAD_SOURCE, "%s is not an OCI image layout (no index.json "
                              "manifests)", layout);
    json_t *pick = NULL;
    size_t i;
    json_t *m;
    json_array_foreach(mans, i, m)
    {
        const char *ref = json_string_value(json_object_get(
            json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
        if (!tag || (ref && !strcmp(ref, tag))) {
            pick = m;
            break;
        }
    }
    if (!pick)
        return sbx__set_error(err, BAD_SOURCE, "no manifest tagged %s in %s", tag, layout);
    char hex[65] = "";
    bool mismatch = false;
    _cleanup_json_ json_t *manifest =
        load_blob(layout, json_string_value(json_object_get(pick, "digest")), hex, &mismatch);
    /* An index of manifests (multi-platform): take the first linux/amd64 one. */
    if (manifest && json_is_array(json_object_get(manifest, "manifests"))) {
        json_t *sub = NULL;
        json_array_foreach(json_object_get(manifest, "manifests"), i, m)
        {
            json_t *pl = json_object_get(m, "platform");
            const char *arch = json_string_value(json_object_get(pl, "architecture"));
            if (!pl || (arch && !strcmp(arch, "amd64"))) {
                sub = m;
                break;
            }
        }
        json_t *next = sub ? load_blob(layout, json_string_value(json_object_get(sub, "digest")),
                                       hex, &mismatch)
                           : NULL;
        json_decref(manifest);
        manifest = next;
    }
    if (mismatch)
        return sbx__set_error(err, BAD_SOURCE,
                              "the manifest sha256:%s in %s does not match its digest (a corrupt "
                              "or tampered layout)",
                              hex, layout);
    json_t *layers = json_object_get(manifest, "layers");
    if (!json_is_array(layers))
        return sbx__set_error(err, BAD_SOURCE, "the OCI manifest in %s has no layers", layout);
    _cleanup_free_ char *done = sbx__printf("%s/sha256-%s", images, hex);
    if (done && is_dir(done)) {
        *digest_dir = steal_pointer(&done);
        return SBX_OK;
    }
    _cleanup_free_ char *tmp = NULL;
    _cleanup_close_ int rootfd = -1;
    int rc = make_tmp(images, &tmp, &rootfd, err);
    if (rc < 0)
        return rc;
    uint64_t total = 0;
    json_array_foreach(layers, i, m) total += (uint64_t)json_integer_value(json_object_get(m, "size"));
    uint64_t base = 0;
    json_array_foreach(layers, i, m)
    {
        const char *d = json_string_value(json_object_get(m, "digest"));
        if (!d || strncmp(d, "sha256:", 7) || strchr(d + 7, '/')) {
            rc = sbx__set_error(err, BAD_SOURCE, "bad layer digest in %s", layout);
            break;
        }
        _cleanup_free_ char *bp = sbx__printf("%s/blobs/sha256/%s", layout, d + 7);
        struct reader *r = calloc(1, sizeof(*r));
        if (!r || !bp) {
            free(r);
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            break;
        }
        r->fd = open_regular(bp, err);
        if (r->fd < 0) {
            rc = r->fd;
            free(r);
            break;
        }
        r->total = total;
        r->done = base;
        r->ctl = ctl;
        r->stage = "layer";
        sha256_init(&r->sha);
        rc = unpack(r, rootfd, true, err);
        base = r->done;
        close(r->fd);
        char lhex[65];
        sha256_hex(&r->sha, lhex);
        free(r);
        if (rc == SBX_OK && strcmp(lhex, d + 7) != 0)
            rc = sbx__set_error(err, BAD_SOURCE, "layer %s does not match its digest", d);
        if (rc < 0)
            break;
    }
    if (rc == SBX_OK)
        rc = install_tree(images, tmp, hex, layout, digest_dir, err);
    sbx__rm_rf(tmp);
    return rc;
}

/* --- archives, SIF, squashfs (image_formats.c): the dispatch -------------- */

static int sqfs_finish(void *data, sbx_error **err)
{
    return sbx__linux_sqfs_stream_end(data, err);
}

/*
 * A regular file, by its bytes: a SIF or squashfs (streamed as a tar from
 * libsquashfs), a `docker save` archive or an oci-archive (through a
 * temporary OCI layout; `sel` picks an image by tag), else a rootfs tarball.
 * Every one goes through the same unpacker.
 */
static int import_file(const char *images, const char *path, const char *sel,
                       struct import_ctl *ctl, char **ddir, sbx_error **err)
{
    sbx_linux_src src;
    int rc = sbx__linux_image_sniff(path, &src, err);
    if (rc < 0)
        return rc;
    if (src.kind == SBX_LINUX_SRC_SQUASHFS) {
        if (sel)
            return sbx__set_error(err, BAD_SOURCE, "%s is a %s image, which holds one image: "
                                  "drop :%s", path, src.sif ? "SIF" : "squashfs", sel);
        sbx_sqfs_stream *s = NULL;
        int fd = -1;
        rc = sbx__linux_sqfs_stream_start(path, src.offset, src.size, &s, &fd, err);
        if (rc < 0)
            return rc;
        return import_tarball_fd(images, fd, path, ctl, sqfs_finish, s, ddir, err);
    }
    _cleanup_free_ char *layout = NULL;
    _cleanup_free_ char *tag = NULL;
    rc = sbx__linux_archive_to_layout(images, path, sel, ctl->opts, ctl->max_bytes, &layout,
                                      &tag, err);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if (sel)
            return sbx__set_error(err, BAD_SOURCE, "%s is a rootfs tarball, which holds one "
                                  "image: drop :%s", path, sel);
        return import_tarball(images, path, ctl, ddir, err);
    }
    rc = import_oci(images, layout, tag, ctl, ddir, err);
    sbx__rm_rf(layout);
    return rc;
}

/* --- resolving ------------------------------------------------------------ */

static bool valid_name(const char *name)
{
    if (!name || !*name || name[0] == '.' || strlen(name) > 200)
        return false;
    for (const char *p = name; *p; p++)
        if (*p == '/' || *p == '\n')
            return false;
    return true;
}

static bool is_oci_layout(const char *dir)
{
    _cleanup_free_ char *p = sbx__printf("%s/oci-layout", dir);
    struct stat st;
    return p && stat(p, &st) == 0;
}

/*
 * Turns a source (path to a tarball, a directory, an OCI layout, or
 * "oci:PATH[:TAG]") into a cached tree; `*rootfs` is the tree to use as the
 * overlay's lower layer, `*digest` (optional) "sha256:<hex>" or "dir:<path>".
 */
static int resolve_source(const char *state_dir, const char *source,
                          const sbx_linux_image_opts *opts, char **rootfs, char **digest,
                          sbx_error **err)
{
    _cleanup_free_ char *images = NULL;
    _cleanup_free_ char *sources = NULL;
    int rc = mkdir_for(state_dir, "sources", &sources, err);
    if (rc < 0)
        return rc;
    /* Without symlinks: the unpacker refuses to write through any. */
    images = realpath(sources, NULL);
    if (images)
        *strrchr(images, '/') = 0;
    _cleanup_free_ char *path = NULL;
    _cleanup_free_ char *tag = NULL;
    bool oci = false;
    if (!strncmp(source, "oci:", 4)) {
        oci = true;
        path = strdup(source + 4);
        char *colon = path ? strrchr(path, ':') : NULL;
        if (colon) {
            *colon = 0;
            tag = strdup(colon + 1);
        }
    } else {
        path = strdup(source);
    }
    if (!images || !path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    struct stat st;
    /* ARCHIVE:TAG picks one image of a docker save archive or an oci-archive. */
    char *sel = !oci && stat(path, &st) < 0 ? sbx__linux_source_selector(path) : NULL;
    if (sel) {
        tag = strdup(sel);
        if (!tag)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (stat(path, &st) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno,
                              "image %s not found (give an imported name, a directory, a tarball "
                              "or an OCI layout; see `sbx image ls`)",
                              source);
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return sbx__set_error(err, BAD_SOURCE,
                              "image %s is %s: an image source is a regular file (a tarball) or "
                              "a directory (a root tree or an OCI layout)",
                              source, kind_of(st.st_mode));
    if (S_ISDIR(st.st_mode) && !oci && !is_oci_layout(path)) {
        /* A directory is used in place, read-only: not copied, not hashed. */
        *rootfs = realpath(path, NULL);
        if (digest)
            *digest = sbx__printf("dir:%s", *rootfs ? *rootfs : path);
        return *rootfs ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    oci = oci || S_ISDIR(st.st_mode);
    /* Seen before (same path, size, mtime, inode)? Then no hashing, no unpacking. */
    _cleanup_free_ char *real = realpath(path, NULL);
    _cleanup_free_ char *keysrc = sbx__printf("%s:%s", real ? real : path, tag ? tag : "");
    _cleanup_free_ char *key = keysrc ? source_key(keysrc, &st) : NULL;
    _cleanup_free_ char *kp = key ? sbx__printf("%s/%s", sources, key) : NULL;
    if (!kp)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    char *known = NULL;
    size_t kl = 0;
    if (sbx__read_file(kp, &known, &kl) == 0) {
        _cleanup_free_ char *dir = sbx__printf("%s/%s/rootfs", images, known);
        if (dir && is_dir(dir)) {
            if (digest)
                *digest = sbx__printf("sha256:%s", known + 7);
            free(known);
            *rootfs = steal_pointer(&dir);
            return SBX_OK;
        }
    }
    free(known);
    /* Before making a temporary of our own: what crashed or killed imports left. */
    sbx__linux_image_gc(state_dir, false);
    struct import_ctl ctl = { .opts = opts, .max_bytes = opts ? opts->max_bytes : 0 };
    if (!ctl.max_bytes) {
        /*
         * The default cap: 16 GiB (above the largest common images, CUDA and
         * ML ones included), and never more than half the free space where
         * the store is, so a bomb stops while the host (whose /run, the
         * default store, is RAM) still has room.
         */
        ctl.max_is_default = true;
        ctl.max_bytes = DEFAULT_MAX_IMAGE_BYTES;
        struct statvfs vfs;
        if (statvfs(images, &vfs) == 0) {
            uint64_t half = (uint64_t)vfs.f_bavail * vfs.f_frsize / 2;
            if (half < ctl.max_bytes)
                ctl.max_bytes = half;
        }
    }
    _cleanup_free_ char *ddir = NULL;
    if (oci)
        rc = import_oci(images, real ? real : path, tag, &ctl, &ddir, err);
    else
        rc = import_file(images, real ? real : path, tag, &ctl, &ddir, err); /* image_formats.c */
    if (rc < 0)
        return rc;
    const char *base = strrchr(ddir, '/') + 1; /* "sha256-<hex>" */
    /* A spool of stdin (in the store itself) is gone after this import: no key for it. */
    if (strncmp(real ? real : path, images, strlen(images)) != 0)
        sbx__write_file_atomic(kp, base, strlen(base), 0644);
    if (digest)
        *digest = sbx__printf("sha256:%s", base + 7);
    *rootfs = sbx__printf("%s/rootfs", ddir);
    return *rootfs ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

int sbx__linux_image_resolve(const char *state_dir, const char *image,
                             const sbx_linux_image_opts *opts, char **rootfs, bool *none,
                             sbx_error **err)
{
    *none = false;
    /* Every box's image comes through here: the store's privacy is checked each time. */
    int rc = check_store(state_dir, err);
    if (rc < 0)
        return rc;
    if (!image || !*image || !strcmp(image, "none")) {
        *none = true;
        return none_image(state_dir, rootfs, err);
    }
    /* An imported name? */
    if (valid_name(image)) {
        _cleanup_free_ char *np = sbx__printf("%s/images/names/%s", state_dir, image);
        _cleanup_json_ json_t *j = np ? json_load_file(np, 0, NULL) : NULL;
        const char *rf = json_string_value(json_object_get(j, "rootfs"));
        if (rf) {
            if (!is_dir(rf))
                return sbx__set_error(err, SBX_ECREATE,
                                      "image %s points at %s, which is gone; import it again",
                                      image, rf);
            *rootfs = strdup(rf);
            return *rootfs ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
    }
    if (image[0] != '/' && strncmp(image, "oci:", 4) != 0)
        return sbx__set_error(err, SBX_ECREATE,
                              "image %s is not imported (run `sbx image import %s SOURCE`) and is "
                              "not an absolute path to a directory, tarball or OCI layout",
                              image, image);
    rc = resolve_source(state_dir, image, opts, rootfs, NULL, err);
    if (rc == BAD_SOURCE) {
        rc = SBX_ECREATE;
        if (err && *err) {
            sbx_error *c = sbx_error_new(rc, "%s", sbx_error_message(*err));
            sbx_error_free(*err);
            *err = c;
        }
    }
    /* Say which image could not be used ("not a tar archive" alone does not). */
    if (rc < 0 && err && *err && !strstr(sbx_error_message(*err), image))
        sbx_error_prefix(*err, "image %s", image);
    return rc;
}

bool sbx__linux_image_name_ok(const char *name)
{
    return valid_name(name) && strcmp(name, "none") != 0;
}

int sbx__linux_image_import(const char *state_dir, const char *name, const char *source,
                            const sbx_linux_image_opts *opts, sbx_error **err)
{
    if (!sbx__linux_image_name_ok(name))
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid image name %s: use letters, digits, '-', '_', ':', '.' and "
                              "no '/'",
                              name ? name : "(null)");
    if (!source || !*source)
        return sbx__set_error(err, SBX_EINVAL, "an image source is required");
    _cleanup_free_ char *abs = NULL;
    bool from_stdin = !strcmp(source, "-");
    if (!from_stdin && strncmp(source, "oci:", 4) != 0 && source[0] != '/') {
        abs = realpath(source, NULL);
        /* ARCHIVE:TAG (image_formats.c): the archive's path made absolute, the tag kept. */
        _cleanup_free_ char *file = abs ? NULL : strdup(source);
        const char *sel = file ? sbx__linux_source_selector(file) : NULL;
        _cleanup_free_ char *fabs = sel ? realpath(file, NULL) : NULL;
        if (fabs)
            abs = sbx__printf("%s:%s", fabs, sel);
        if (!abs)
            return sbx__set_errno(err, SBX_ENOENT, errno, "image source %s", source);
        source = abs;
    }
    _cleanup_free_ char *names = NULL;
    int rc = mkdir_for(state_dir, "names", &names, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *rootfs = NULL;
    _cleanup_free_ char *digest = NULL;
    /* `sbx image import NAME -` (image_formats.c): stdin spooled into the store, then removed. */
    _cleanup_free_ char *spool_dir = NULL;
    _cleanup_free_ char *spool = NULL;
    if (from_stdin) {
        _cleanup_free_ char *images = sbx__printf("%s/images", state_dir);
        rc = images ? sbx__linux_spool_stdin(images, opts, opts ? opts->max_bytes : 0,
                                             &spool_dir, &spool, err)
                    : sbx__set_error(err, SBX_ENOMEM, "out of memory");
        if (rc < 0)
            return rc;
    }
    rc = resolve_source(state_dir, spool ? spool : source, opts, &rootfs, &digest, err);
    if (spool_dir)
        sbx__rm_rf(spool_dir);
    if (rc < 0)
        return rc;
    json_t *j = json_pack("{s:s, s:s, s:s, s:f}", "digest", digest ? digest : "", "rootfs",
                          rootfs, "source", from_stdin ? "(stdin)" : source, "created",
                          now_unix());
    _cleanup_free_ char *np = sbx__printf("%s/%s", names, name);
    int w = j && np ? write_json(np, j) : -1;
    json_decref(j);
    if (w < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot record image name %s", name);
    if (opts && opts->progress)
        opts->progress("done", 1, 1, opts->data);
    return SBX_OK;
}

void sbx__linux_image_list_free(sbx_linux_image_info *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].name);
        free(v[i].digest);
        free(v[i].source);
    }
    free(v);
}

int sbx__linux_image_list(const char *state_dir, sbx_linux_image_info **out, size_t *n_out,
                          sbx_error **err)
{
    (void)err;
    *out = NULL;
    *n_out = 0;
    _cleanup_free_ char *names = sbx__printf("%s/images/names", state_dir);
    DIR *d = names ? opendir(names) : NULL;
    if (!d)
        return SBX_OK;
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        _cleanup_free_ char *p = sbx__printf("%s/%s", names, de->d_name);
        json_t *j = p ? json_load_file(p, 0, NULL) : NULL;
        if (!j)
            continue;
        sbx_linux_image_info *nv = realloc(v, (n + 1) * sizeof(*v));
        if (!nv) {
            json_decref(j);
            break;
        }
        v = nv;
        memset(&v[n], 0, sizeof(v[n]));
        v[n].name = strdup(de->d_name);
        v[n].digest = sbx__strdup0(json_string_value(json_object_get(j, "digest")));
        v[n].source = sbx__strdup0(json_string_value(json_object_get(j, "source")));
        v[n].created = json_number_value(json_object_get(j, "created"));
        const char *rf = json_string_value(json_object_get(j, "rootfs"));
        _cleanup_free_ char *mp = NULL;
        if (rf && (mp = sbx__printf("%s/../meta.json", rf))) {
            json_t *meta = json_load_file(mp, 0, NULL);
            v[n].size = (uint64_t)json_integer_value(json_object_get(meta, "size"));
            json_decref(meta);
        }
        json_decref(j);
        n++;
    }
    closedir(d);
    *out = v;
    *n_out = n;
    return SBX_OK;
}

int sbx__linux_image_remove(const char *state_dir, const char *name, sbx_error **err)
{
    if (!valid_name(name))
        return sbx__set_error(err, SBX_EINVAL, "invalid image name %s", name ? name : "(null)");
    _cleanup_free_ char *np = sbx__printf("%s/images/names/%s", state_dir, name);
    _cleanup_json_ json_t *j = np ? json_load_file(np, 0, NULL) : NULL;
    if (!j)
        return sbx__set_error(err, SBX_ENOENT, "no image named %s", name);
    const char *digest = json_string_value(json_object_get(j, "digest"));
    if (unlink(np) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot remove image %s", name);
    if (!digest || strncmp(digest, "sha256:", 7))
        return SBX_OK; /* a directory used in place: nothing cached */
    /* Keep the tree while another name points at it. */
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    sbx__linux_image_list(state_dir, &v, &n, NULL);
    bool used = false;
    for (size_t i = 0; i < n; i++)
        used |= v[i].digest && !strcmp(v[i].digest, digest);
    sbx__linux_image_list_free(v, n);
    if (used)
        return SBX_OK;
    /*
     * Running boxes keep working: their overlay holds the lower tree's
     * dentries, and rm only unlinks names. The source index entries that
     * point here go stale and are ignored (their target is missing).
     */
    _cleanup_free_ char *dir = sbx__printf("%s/images/sha256-%s", state_dir, digest + 7);
    if (dir)
        sbx__rm_rf(dir);
    return SBX_OK;
}
