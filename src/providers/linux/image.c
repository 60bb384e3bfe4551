/*
 * Images of the linux provider: a content-addressed store of layers, each
 * unpacked once in overlayfs' format and shared by every image that has it;
 * a box stacks its image's layers as overlay lower dirs (docs/images.md,
 * "The store").
 *
 *   <store>/layers/sha256-<diff_id>/diff   a layer (whiteouts: 0/0 devices,
 *                                          opaque dirs: overlay.opaque xattrs)
 *   <store>/layers/sha256-<diff_id>/meta.json
 *   <store>/records/sha256-<id>.json       an image: its layers, manifest,
 *                                          size, created, source, config blob
 *   <store>/refs/<sha256(name)>.json       a name -> an image (or a dir)
 *   <store>/srcs/<key>, blobs/sha256-<hex> indexes: source path -> image id,
 *                                          blob -> diff_id
 *   <store>/locks/                         store.lock, per-layer/source locks
 *   <store>/oci/                           the OCI layout registry pulls land
 *                                          in (blobs shared by pulled images)
 *   <state_dir>/images/none-v2/            the "none" image's skeleton
 *   <state_dir>/images/{names,sha256-*}    an older sbx's names and flattened
 *                                          trees: still read, not migrated
 *
 * <store> is the image_store key, else <state_dir>/images. Every layer is
 * built in a temporary directory (tmp-<pid>-<start>-<rnd>) and renamed into
 * place, so a crash mid-import leaves only a temporary whose owner is dead,
 * which the next import, gc and prune remove.
 */
#include "providers/linux/linux.h"

#include "core/inroot.h"
#include "image/ref.h"
#include "providers/linux/image_formats.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
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
static int check_dir(const char *p, sbx_error **err);

static int check_store(const char *state_dir, sbx_error **err)
{
    _cleanup_free_ char *p = sbx__printf("%s/images", state_dir);
    return p ? check_dir(p, err) : sbx__set_error(err, SBX_ENOMEM, "out of memory");
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
    const char *source; /* the record's source, when not the path read (image_formats.c) */
};

static bool cancelled(const struct import_ctl *c)
{
    return c->opts && c->opts->cancelled && c->opts->cancelled(c->opts->data);
}

struct reader {
    int fd;
    struct sha256_ctx sha; /* of the file's bytes: the blob digest */
    unsigned char buf[1 << 16];
    uint64_t done, total;
    struct import_ctl *ctl;
    const char *stage;
    bool stopped; /* a cancel seen by read_cb */
    /*
     * A layer of the store: the file is decompressed by `raw` (libarchive's
     * raw format over every filter) and the tar reader reads the plain
     * bytes from it, which `dsha` hashes: the layer's diff_id, its key in
     * the store, checked against the image config's in the same pass.
     */
    struct archive *raw;
    struct sha256_ctx dsha;
    uint64_t dbytes;
};

/* Reads the next block of the file itself, hashing it. */
static la_ssize_t file_read(struct archive *a, struct reader *r, const void **buf)
{
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

static la_ssize_t raw_cb(struct archive *a, void *data, const void **buf)
{
    return file_read(a, data, buf);
}

static la_ssize_t read_cb(struct archive *a, void *data, const void **buf)
{
    struct reader *r = data;
    if (!r->raw)
        return file_read(a, r, buf);
    if (r->stopped || cancelled(r->ctl)) {
        r->stopped = true;
        archive_set_error(a, ECANCELED, "cancelled");
        return -1;
    }
    /*
     * The decompressor's own block, not a copy: it stays valid until the
     * next call here, which is as long as the tar reader keeps it.
     */
    const void *block = NULL;
    size_t len = 0;
    la_int64_t off;
    int k = archive_read_data_block(r->raw, &block, &len, &off);
    if (k == ARCHIVE_EOF)
        return 0;
    if (k < ARCHIVE_OK) {
        archive_set_error(a, EIO, "%s", archive_error_string(r->raw));
        return -1;
    }
    sha256_update(&r->dsha, len, block);
    r->dbytes += (uint64_t)len;
    *buf = block;
    return (la_ssize_t)len;
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
    /*
     * A layer of the store, in overlayfs' own format: a whiteout becomes a
     * 0/0 character device, an opaque directory gets the overlay.opaque
     * xattr, and nothing below is removed (there is nothing below: the
     * lower layers are other directories).
     */
    bool layer;
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
static int set_opaque(int fd);

/*
 * In a layer, `name` under `pfd` is this layer's own whiteout (a 0/0
 * device) that a path of the same layer now needs as a directory: the
 * whiteout goes, and the directory made in its place is opaque (what
 * "deleted below, then recreated" means). errno is kept otherwise.
 */
static bool drop_own_whiteout(struct unpacker *u, int pfd, const char *name)
{
    int e = errno;
    struct stat st;
    if (u->layer && fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode) &&
        st.st_rdev == makedev(0, 0) && unlinkat(pfd, name, 0) == 0) {
        u->stale = true;
        errno = ENOENT;
        return true;
    }
    errno = e;
    return false;
}

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
        char *slash = strrchr(buf, '/');
        const char *name = slash ? slash + 1 : buf;
        bool opaque = fd < 0 && errno == ENOTDIR && drop_own_whiteout(u, prev, name);
        if (fd < 0 && errno == ENOENT) {
            int d = depth_of(prev, u->root_depth);
            if (d < 0 || d + 1 >= MAX_IMAGE_DEPTH) {
                close(prev);
                errno = E2BIG;
                return -1;
            }
            if (mkdirat(prev, name, 0755) == 0) {
                fd = openat(prev, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                int ofd = opaque ? openat(prev, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
                                                          O_CLOEXEC)
                                 : -1;
                if (ofd >= 0) {
                    (void)set_opaque(ofd);
                    close(ofd);
                }
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
    /* ENOTDIR in a layer: maybe its own whiteout, which make_dirs replaces. */
    if (fd < 0 && (errno == ENOENT || (errno == ENOTDIR && u->layer)))
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
         * let a layer steer the box's overlay or LSMs; so would user.overlay.*,
         * which a user-namespace overlay (userxattr) reads as its own.
         */
        if ((!strncmp(name, "user.", 5) && strncmp(name, "user.overlay.", 13)) ||
            !strcmp(name, "security.capability"))
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

/*
 * Marks the directory open at `fd` opaque for overlayfs: trusted.* for a
 * box mounted by root, user.* for one mounted in a user namespace
 * (userxattr). One of them must hold.
 */
static int set_opaque(int fd)
{
    int a = fsetxattr(fd, "trusted.overlay.opaque", "y", 1, 0);
    int b = fsetxattr(fd, "user.overlay.opaque", "y", 1, 0);
    return a == 0 || b == 0 ? 0 : -1;
}

static int layer_opaque(struct unpacker *u, const char *dir, sbx_error **err)
{
    int pfd = *dir ? parent_fd(u, dir) : open_in(u, "", O_PATH | O_DIRECTORY);
    if (pfd < 0)
        return sbx__set_errno(err, code_for(errno), errno, "opaque directory %s", dir);
    if (!*dir)
        close(pfd);
    _cleanup_close_ int fd = open_in(u, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (fd < 0 || set_opaque(fd) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno,
                              "cannot mark %s opaque in the layer (overlay xattrs need root or a "
                              "filesystem with user xattrs)",
                              *dir ? dir : "/");
    return SBX_OK;
}

/*
 * A whiteout in a layer of the store: a 0/0 character device at `name`,
 * which overlayfs reads as "deleted below". When this layer has `name`
 * itself (its own entries are not hidden by its whiteouts) a directory of
 * its own becomes opaque instead, which is what "delete, then recreate"
 * means for the layers below; a file of its own stays as it is.
 */
static int layer_whiteout(struct unpacker *u, const char *dir, const char *name, sbx_error **err)
{
    if (!strcmp(name, ".wh..opq"))
        return layer_opaque(u, dir, err);
    int pfd = parent_fd(u, dir);
    if (pfd < 0)
        return sbx__set_errno(err, code_for(errno), errno, "whiteout in %s", dir);
    struct stat st;
    if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (!S_ISDIR(st.st_mode))
            return SBX_OK;
        _cleanup_close_ int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || set_opaque(fd) < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "whiteout of %s/%s", dir, name);
        return SBX_OK;
    }
    if (mknodat(pfd, name, S_IFCHR | 0, makedev(0, 0)) < 0)
        return sbx__set_errno(err, code_for(errno), errno,
                              "cannot make the whiteout of %s/%s in the layer", dir, name);
    return SBX_OK;
}

/* Applies an OCI whiteout: `name` (or, for ".wh..opq", everything) under `dir` goes. */
static int whiteout(struct unpacker *u, const char *dir, const char *name, sbx_error **err)
{
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        return SBX_OK;
    if (u->layer)
        return layer_whiteout(u, dir, name, err);
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
    /* A directory over this layer's own whiteout: the layers below are hidden under it. */
    bool over_whiteout = u->layer && exists && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
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
        if (over_whiteout && set_opaque(fd) < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno, "marking %s opaque", shown);
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
static int unpack(struct reader *r, int rootfd, bool oci, bool layer, sbx_error **err)
{
    struct import_ctl *c = r->ctl;
    struct unpacker u = {
        .rootfd = rootfd, .pfd = -1, .ctl = c, .made = oci ? json_object() : NULL, .layer = layer
    };
    u.root_depth = depth_of(rootfd, 0);
    if (layer) {
        sha256_init(&r->dsha);
        struct archive_entry *re;
        r->raw = archive_read_new();
        if (!r->raw)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        archive_read_support_filter_all(r->raw);
        archive_read_support_format_raw(r->raw);
        int h = archive_read_open(r->raw, r, NULL, raw_cb, NULL) != ARCHIVE_OK
                    ? ARCHIVE_FATAL
                    : archive_read_next_header(r->raw, &re);
        if (h == ARCHIVE_EOF && !r->stopped) {
            /* An empty file: an empty layer, as an empty tarball is an empty image. */
            archive_read_free(r->raw);
            r->raw = NULL;
        } else if (h != ARCHIVE_OK) {
            int rc = r->stopped ? sbx__set_error(err, SBX_ECANCELED, "image import cancelled")
                                : sbx__set_error(err, BAD_SOURCE, "not a tar archive: %s",
                                                 archive_error_string(r->raw));
            archive_read_free(r->raw);
            r->raw = NULL;
            return rc;
        }
    }
    struct archive *a = archive_read_new();
    if (!a) {
        if (r->raw)
            archive_read_free(r->raw);
        r->raw = NULL;
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
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
    /* And what follows the compressed stream, for the blob digest. */
    while (r->raw && file_read(r->raw, r, &(const void *){ NULL }) > 0)
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
    if (r->raw)
        archive_read_free(r->raw);
    r->raw = NULL;
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


/* --- the store (v2) --------------------------------------------------------- */

/*
 * Layers are a stack the box's overlay mounts directly, named to it by
 * descriptor ("/proc/self/fd/N", ~18 bytes each: 128 of them fit the one
 * page of mount options). Docker stops at 125.
 */
#define MAX_LAYERS 128

struct store {
    char *dir;       /* the store's root, canonical */
    const char *state_dir;
    int lockfd;      /* store.lock: shared while importing, exclusive while pruning */
};

static void store_close(struct store *s)
{
    if (s->lockfd >= 0)
        close(s->lockfd); /* drops the flock */
    s->lockfd = -1;
    free(s->dir);
    s->dir = NULL;
}

char *sbx__linux_image_store_dir(const char *state_dir, const char *store)
{
    return store && *store ? strdup(store) : sbx__printf("%s/images", state_dir);
}

char *sbx__linux_image_store_default(const char *state_dir_configured)
{
    if ((state_dir_configured && *state_dir_configured) || getenv("SBX_STATE_DIR"))
        return NULL;
    if (geteuid() == 0)
        return strdup("/var/lib/sbx/linux/images");
    const char *xdg = getenv("XDG_DATA_HOME");
    if (xdg && xdg[0] == '/')
        return sbx__printf("%s/sbx/linux/images", xdg);
    const char *home = getenv("HOME");
    return home && home[0] == '/' ? sbx__printf("%s/.local/share/sbx/linux/images", home) : NULL;
}

/* The store's directory `p` (made with its parents): 0700, the caller's, not a link. */
static int check_dir(const char *p, sbx_error **err)
{
    _cleanup_free_ char *parent = strdup(p);
    char *slash = parent ? strrchr(parent, '/') : NULL;
    if (!slash)
        return sbx__set_error(err, SBX_EINVAL, "the image store %s must be an absolute path", p);
    *slash = 0;
    if ((*parent && sbx__mkdir_p(parent, 0755) < 0) || (mkdir(p, 0700) < 0 && errno != EEXIST))
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot create the image store %s", p);
    _cleanup_close_ int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno,
                              "the image store %s is not a directory (a link?): remove it", p);
    if (st.st_uid != geteuid())
        return sbx__set_error(err, SBX_ECREATE,
                              "the image store %s belongs to uid %u, not to this user (%u): "
                              "remove it or set another image_store",
                              p, (unsigned)st.st_uid, (unsigned)geteuid());
    if ((st.st_mode & 077) && fchmod(fd, 0700) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot make the image store %s private",
                              p);
    return SBX_OK;
}

/*
 * Opens the store, making its directories, and takes its lock: shared
 * (imports, removals: many at once) or exclusive (prune: it must not see a
 * layer an import has just unpacked and not yet recorded).
 */
static int store_open(const char *state_dir, const char *store, int lock, struct store *s,
                      sbx_error **err)
{
    s->lockfd = -1;
    s->state_dir = state_dir;
    _cleanup_free_ char *want = sbx__linux_image_store_dir(state_dir, store);
    if (!want)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = check_dir(want, err);
    if (rc < 0)
        return rc;
    /* Without symlinks: the unpacker refuses to write through any. */
    s->dir = realpath(want, NULL);
    if (!s->dir)
        return sbx__set_errno(err, SBX_ECREATE, errno, "image store %s", want);
    static const char *const subs[] = { "layers", "records", "refs", "srcs", "blobs", "locks" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(subs); i++) {
        _cleanup_free_ char *p = sbx__printf("%s/%s", s->dir, subs[i]);
        if (!p || (mkdir(p, 0700) < 0 && errno != EEXIST)) {
            rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot create %s", p ? p : s->dir);
            store_close(s);
            return rc;
        }
    }
    if (lock) {
        _cleanup_free_ char *lp = sbx__printf("%s/locks/store.lock", s->dir);
        s->lockfd = lp ? open(lp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
        int r = -1;
        while (s->lockfd >= 0 && (r = flock(s->lockfd, lock)) < 0 && errno == EINTR)
            ;
        if (s->lockfd < 0 || r < 0) {
            rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot lock the image store %s",
                                s->dir);
            store_close(s);
            return rc;
        }
    }
    return SBX_OK;
}

static bool layer_done(const struct store *s, const char *hex)
{
    _cleanup_free_ char *p = sbx__printf("%s/layers/sha256-%s/diff", s->dir, hex);
    return p && is_dir(p);
}

static bool hex64(const char *h)
{
    if (!h || strlen(h) != 64)
        return false;
    for (const char *p = h; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

/* "sha256:<64 hex>" -> its hex, or NULL. */
static const char *digest_hex(const char *d)
{
    return d && !strncmp(d, "sha256:", 7) && hex64(d + 7) ? d + 7 : NULL;
}

/*
 * An exclusive flock on locks/<key>.lock, waited for while polling the
 * import's cancel: the importer that holds it does the work, the others
 * then find it done. Returns the descriptor, or < 0 (an sbx code).
 */
static int lock_key(const struct store *s, const char *key, struct import_ctl *ctl,
                    sbx_error **err)
{
    _cleanup_free_ char *p = sbx__printf("%s/locks/%s.lock", s->dir, key);
    int fd = p ? open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
    if (fd < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot open the lock %s", p ? p : key);
    while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            int e = errno;
            close(fd);
            return sbx__set_errno(err, SBX_ECREATE, e, "cannot lock %s", p);
        }
        if (cancelled(ctl)) {
            close(fd);
            return sbx__set_error(err, SBX_ECANCELED, "image import cancelled");
        }
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return fd;
}

/* The diff_id a blob unpacked to before (blobs/sha256-<hex>), when that layer is still here. */
static bool blob_known(const struct store *s, const char *blob_hex, char out[65])
{
    _cleanup_free_ char *p = sbx__printf("%s/blobs/sha256-%s", s->dir, blob_hex);
    char *t = NULL;
    size_t n = 0;
    if (!p || sbx__read_file(p, &t, &n) < 0)
        return false;
    bool ok = n == 64 && (t[64] = 0, hex64(t)) && layer_done(s, t);
    if (ok)
        memcpy(out, t, 65);
    free(t);
    return ok;
}

/*
 * One layer in the store: `file` (a tar stream, any compression) unpacked
 * into layers/sha256-<diff_id>/diff in overlayfs' format, unless it is
 * there already. `blob_hex`: the file's digest, checked; `want_hex`: its
 * diff_id (the image config's), checked too, so no image can plant a tree
 * under a digest it does not hash to. `*unpacked` counts the layers this
 * call unpacked (0 or 1, installed or not: another importer may have won),
 * which the tests read to see each layer's work done once.
 */
static int get_layer_fd(const struct store *s, int fd, int (*finish)(void *, sbx_error **),
                        void *fdata, const char *stage, bool whiteouts, const char *blob_hex,
                        const char *want_hex, struct import_ctl *ctl, uint64_t *base,
                        uint64_t total, char diff_hex[65], char file_hex[65], int *unpacked,
                        sbx_error **err);

static int get_layer(const struct store *s, const char *file, const char *stage, bool whiteouts,
                     const char *blob_hex, const char *want_hex, struct import_ctl *ctl,
                     uint64_t *base, uint64_t total,
                     char diff_hex[65], char file_hex[65], int *unpacked, sbx_error **err)
{
    if (want_hex && layer_done(s, want_hex)) {
        memcpy(diff_hex, want_hex, 65);
        return SBX_OK;
    }
    if (blob_hex && blob_known(s, blob_hex, diff_hex) && (!want_hex || !strcmp(diff_hex, want_hex)))
        return SBX_OK;
    /* Locked by the key known before unpacking: the diff_id, or else the blob's digest. */
    _cleanup_free_ char *key = want_hex  ? sbx__printf("layer-%s", want_hex)
                               : blob_hex ? sbx__printf("blob-%s", blob_hex)
                                          : NULL;
    _cleanup_close_ int lfd = -1;
    if (key) {
        lfd = lock_key(s, key, ctl, err);
        if (lfd < 0)
            return lfd;
        if (want_hex && layer_done(s, want_hex)) {
            memcpy(diff_hex, want_hex, 65);
            return SBX_OK;
        }
        if (blob_hex && blob_known(s, blob_hex, diff_hex) &&
            (!want_hex || !strcmp(diff_hex, want_hex)))
            return SBX_OK;
    }
    int fd = open_regular(file, err);
    if (fd < 0)
        return fd;
    return get_layer_fd(s, fd, NULL, NULL, stage, whiteouts, blob_hex, want_hex, ctl, base, total,
                        diff_hex, file_hex, unpacked, err);
}

/*
 * get_layer's unpacking and installing, of a tar stream read from `fd`
 * (closed here). `finish` (optional, called once the stream is read) may
 * still refuse it: a squashfs writer that failed (image_formats.c).
 */
static int get_layer_fd(const struct store *s, int fd, int (*finish)(void *, sbx_error **),
                        void *fdata, const char *stage, bool whiteouts, const char *blob_hex,
                        const char *want_hex, struct import_ctl *ctl, uint64_t *base,
                        uint64_t total, char diff_hex[65], char file_hex[65], int *unpacked,
                        sbx_error **err)
{
    _cleanup_free_ char *pre = sbx__printf("%s/", s->dir);
    _cleanup_free_ char *tmp = pre ? tmp_path(pre) : NULL;
    _cleanup_free_ char *diff = tmp ? sbx__printf("%s/diff", tmp) : NULL;
    struct reader *r = calloc(1, sizeof(*r));
    if (!diff || !r) {
        close(fd);
        free(r);
        if (finish)
            finish(fdata, NULL);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    int rc = SBX_OK;
    if (mkdir(tmp, 0700) < 0 || mkdir(diff, 0755) < 0)
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot create a directory in %s", s->dir);
    _cleanup_close_ int rootfd =
        rc == SBX_OK ? open(diff, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (rc == SBX_OK && rootfd < 0)
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot open %s", diff);
    if (rc == SBX_OK) {
        r->fd = fd;
        r->total = total;
        r->done = *base;
        r->ctl = ctl;
        r->stage = stage;
        sha256_init(&r->sha);
        /* A tarball is a root tree: its ".wh." names are plain files, as before the store. */
        rc = unpack(r, rootfd, whiteouts, true, err);
        *base = r->done;
        sha256_hex(&r->sha, file_hex);
        sha256_hex(&r->dsha, diff_hex);
    }
    close(fd);
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
        if (rc == SBX_OK && blob_hex && strcmp(file_hex, blob_hex) != 0)
            rc = sbx__set_error(err, BAD_SOURCE, "layer sha256:%s does not match its digest",
                                blob_hex);
        if (rc == SBX_OK && want_hex && strcmp(diff_hex, want_hex) != 0)
            rc = sbx__set_error(err, BAD_SOURCE,
                                "layer sha256:%s unpacks to sha256:%s, not to the diff_id "
                                "sha256:%s its image config names",
                                blob_hex ? blob_hex : file_hex, diff_hex, want_hex);
        if (rc == SBX_OK && unpacked)
            (*unpacked)++; /* the work done, whoever installs it */
    }
    free(r);
    if (rc == SBX_OK && !layer_done(s, diff_hex)) {
        _cleanup_free_ char *dst = sbx__printf("%s/layers/sha256-%s", s->dir, diff_hex);
        _cleanup_free_ char *mp = sbx__printf("%s/meta.json", tmp);
        json_t *meta = json_pack("{s:s+, s:I, s:f}", "digest", "sha256:", diff_hex, "size",
                                 (json_int_t)tree_size(diff), "created", now_unix());
        if (!dst || !mp || !meta || write_json(mp, meta) < 0)
            rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot write the layer's metadata");
        json_decref(meta);
        /* Another importer (by another key) may have won: its copy is the same bytes. */
        if (rc == SBX_OK && rename(tmp, dst) < 0 && !layer_done(s, diff_hex))
            rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot install the layer at %s", dst);
    }
    if (rc == SBX_OK && blob_hex) {
        _cleanup_free_ char *bp = sbx__printf("%s/blobs/sha256-%s", s->dir, blob_hex);
        if (bp)
            sbx__write_file_atomic(bp, diff_hex, 64, 0600);
    }
    sbx__rm_rf(tmp);
    return rc;
}

static json_t *load_record(const struct store *s, const char *id_hex)
{
    if (!hex64(id_hex))
        return NULL;
    _cleanup_free_ char *p = sbx__printf("%s/records/sha256-%s.json", s->dir, id_hex);
    return p ? json_load_file(p, 0, NULL) : NULL;
}

/* Whether every layer of record `id_hex` is in the store. */
static bool record_complete(const struct store *s, const char *id_hex)
{
    _cleanup_json_ json_t *rec = load_record(s, id_hex);
    json_t *layers = json_object_get(rec, "layers");
    if (!json_is_array(layers))
        return false;
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l)
    {
        const char *h = digest_hex(json_string_value(l));
        if (!h || !layer_done(s, h))
            return false;
    }
    return true;
}

static int write_record(const struct store *s, const char *id_hex, json_t *layers,
                        const char *manifest, const char *source, json_t *config, sbx_error **err)
{
    json_int_t size = 0;
    size_t i;
    json_t *l;
    json_array_foreach(layers, i, l)
    {
        _cleanup_free_ char *mp = sbx__printf("%s/layers/sha256-%s/meta.json", s->dir,
                                              json_string_value(l) + 7);
        _cleanup_json_ json_t *m = mp ? json_load_file(mp, 0, NULL) : NULL;
        size += json_integer_value(json_object_get(m, "size"));
    }
    _cleanup_json_ json_t *rec = json_pack(
        "{s:s+, s:O, s:s?, s:I, s:f, s:s, s:O?}", "id", "sha256:", id_hex, "layers", layers,
        "manifest", manifest, "size", size, "created", now_unix(), "source", source, "config",
        config);
    _cleanup_free_ char *p = sbx__printf("%s/records/sha256-%s.json", s->dir, id_hex);
    if (!rec || !p || write_json(p, rec) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot write the image record");
    return SBX_OK;
}

/* A tarball: one layer; the image's id is the file's digest. */
static int import_tarball(const struct store *s, const char *path, struct import_ctl *ctl,
                          char id_hex[65], int *unpacked, sbx_error **err)
{
    struct stat st;
    uint64_t base = 0, total = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    char diff[65], file[65];
    int rc = get_layer(s, path, "unpack", false, NULL, NULL, ctl, &base, total, diff, file,
                       unpacked, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *layers = json_pack("[s+]", "sha256:", diff);
    rc = layers ? write_record(s, file, layers, NULL, ctl->source ? ctl->source : path, NULL, err)
                : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (rc == SBX_OK)
        memcpy(id_hex, file, 65);
    return rc;
}

/* [img-config] At the end of this file. */
static int image_config_load(const char *layout, json_t *manifest, json_t **out, sbx_error **err);
static int config_check(const char *layout, json_t *blob, sbx_error **err);

static int import_oci(const struct store *s, const char *layout, const char *tag,
                      struct import_ctl *ctl, char id_hex[65], int *unpacked, sbx_error **err)
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
    if (!json_is_array(layers) || !hex64(hex))
        return sbx__set_error(err, BAD_SOURCE, "the OCI manifest in %s has no layers", layout);
    if (json_array_size(layers) > MAX_LAYERS)
        return sbx__set_error(err, BAD_SOURCE,
                              "the image in %s has %zu layers; at most %d can be stacked", layout,
                              json_array_size(layers), MAX_LAYERS);
    /*
     * [img-config] The config blob, checked before anything is unpacked: its
     * diff_ids key the layers, and it is kept whole in the image's record.
     */
    _cleanup_json_ json_t *config = NULL;
    int crc = image_config_load(layout, manifest, &config, err);
    if (crc < 0)
        return crc;
    json_t *diff_ids = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
    if (json_array_size(diff_ids) != json_array_size(layers))
        diff_ids = NULL;
    if (record_complete(s, hex)) {
        memcpy(id_hex, hex, 65);
        return SBX_OK;
    }
    uint64_t total = 0, base = 0;
    json_array_foreach(layers, i, m) total += (uint64_t)json_integer_value(json_object_get(m, "size"));
    _cleanup_json_ json_t *ids = json_array();
    int rc = ids ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    json_array_foreach(layers, i, m)
    {
        if (rc < 0)
            break;
        const char *d = digest_hex(json_string_value(json_object_get(m, "digest")));
        const char *want =
            diff_ids ? digest_hex(json_string_value(json_array_get(diff_ids, i))) : NULL;
        if (!d || (diff_ids && !want)) {
            rc = sbx__set_error(err, BAD_SOURCE, "bad layer digest in %s", layout);
            break;
        }
        _cleanup_free_ char *bp = sbx__printf("%s/blobs/sha256/%s", layout, d);
        char diff[65], file[65];
        rc = bp ? get_layer(s, bp, "layer", true, d, want, ctl, &base, total, diff, file,
                            unpacked, err)
                : sbx__set_error(err, SBX_ENOMEM, "out of memory");
        if (rc == SBX_OK)
            json_array_append_new(ids, json_sprintf("sha256:%s", diff));
    }
    if (rc == SBX_OK) {
        _cleanup_free_ char *man = sbx__printf("sha256:%s", hex);
        rc = write_record(s, hex, ids, man, ctl->source ? ctl->source : layout, config, err);
    }
    if (rc == SBX_OK)
        memcpy(id_hex, hex, 65);
    return rc;
}

/* --- archives, SIF, squashfs (image_formats.c): the dispatch -------------- */

static int sqfs_finish(void *data, sbx_error **err)
{
    return sbx__linux_sqfs_stream_end(data, err);
}

/*
 * A SIF's or a squashfs' tree, streamed as a tar by libsquashfs: one layer,
 * a root tree as a tarball's; the image's id is the stream's digest.
 */
static int import_squashfs(const struct store *s, const char *path, const sbx_linux_src *src,
                           struct import_ctl *ctl, char id_hex[65], int *unpacked,
                           sbx_error **err)
{
    sbx_sqfs_stream *q = NULL;
    int fd = -1;
    int rc = sbx__linux_sqfs_stream_start(path, src->offset, src->size, &q, &fd, err);
    if (rc < 0)
        return rc;
    uint64_t base = 0;
    char diff[65], file[65];
    rc = get_layer_fd(s, fd, sqfs_finish, q, "unpack", false, NULL, NULL, ctl, &base, 0, diff,
                      file, unpacked, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *layers = json_pack("[s+]", "sha256:", diff);
    rc = layers ? write_record(s, file, layers, NULL, ctl->source ? ctl->source : path, NULL, err)
                : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (rc == SBX_OK)
        memcpy(id_hex, file, 65);
    return rc;
}

/*
 * A regular file, by its bytes: a SIF or squashfs (one layer), a `docker
 * save` archive or an oci-archive (through a temporary OCI layout in the
 * store, whose layers are then the image's, shared by diff_id with the same
 * layers pulled or imported otherwise; `sel` picks an image by tag), else a
 * rootfs tarball.
 */
static int import_file(const struct store *s, const char *path, const char *sel,
                       struct import_ctl *ctl, char id_hex[65], int *unpacked, sbx_error **err)
{
    sbx_linux_src src;
    int rc = sbx__linux_image_sniff(path, &src, err);
    if (rc < 0)
        return rc;
    if (src.kind == SBX_LINUX_SRC_SQUASHFS) {
        if (sel)
            return sbx__set_error(err, BAD_SOURCE, "%s is a %s image, which holds one image: "
                                  "drop :%s", path, src.sif ? "SIF" : "squashfs", sel);
        return import_squashfs(s, path, &src, ctl, id_hex, unpacked, err);
    }
    _cleanup_free_ char *layout = NULL;
    _cleanup_free_ char *tag = NULL;
    rc = sbx__linux_archive_to_layout(s->dir, path, sel, ctl->opts, ctl->max_bytes, &layout, &tag,
                                      err);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if (sel)
            return sbx__set_error(err, BAD_SOURCE, "%s is a rootfs tarball, which holds one "
                                  "image: drop :%s", path, sel);
        return import_tarball(s, path, ctl, id_hex, unpacked, err);
    }
    /* The record names the archive, not the temporary layout. */
    if (!ctl->source)
        ctl->source = path;
    rc = import_oci(s, layout, tag, ctl, id_hex, unpacked, err);
    sbx__rm_rf(layout);
    return rc;
}

/* --- names ------------------------------------------------------------------ */

/* What an older sbx accepted: no '/', no leading '.', at most 200 bytes. */
static bool valid_legacy_name(const char *name)
{
    if (!name || !*name || name[0] == '.' || strlen(name) > 200)
        return false;
    for (const char *p = name; *p; p++)
        if (*p == '/' || (unsigned char)*p < 0x20 || *p == 0x7f)
            return false;
    return true;
}

static bool path_component_ok(const char *c, size_t n)
{
    if (!n || c[0] == '.' || c[0] == '-' || c[0] == '_')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((c[i] >= 'a' && c[i] <= 'z') || (c[i] >= '0' && c[i] <= '9') || c[i] == '.' ||
              c[i] == '_' || c[i] == '-'))
            return false;
    return true;
}

static bool host_ok(const char *c, size_t n)
{
    size_t i = 0;
    for (; i < n && c[i] != ':'; i++)
        if (!((c[i] >= 'a' && c[i] <= 'z') || (c[i] >= 'A' && c[i] <= 'Z') ||
              (c[i] >= '0' && c[i] <= '9') || c[i] == '.' || c[i] == '-'))
            return false;
    /* Labels: not empty, not starting or ending with '.' or '-' ("..", ".x" are no hosts). */
    if (!i || !isalnum((unsigned char)c[0]) || !isalnum((unsigned char)c[i - 1]))
        return false;
    for (size_t k = 1; k < i; k++)
        if (c[k] == '.' && (c[k - 1] == '.' || c[k - 1] == '-' || c[k + 1] == '-'))
            return false;
    if (i < n) {
        if (i + 1 == n || n - i - 1 > 5)
            return false;
        for (size_t k = i + 1; k < n; k++)
            if (c[k] < '0' || c[k] > '9')
                return false;
    }
    return true;
}

/*
 * A Docker-style name: [host[:port]/]path[:tag][@sha256:<hex>], path
 * components lowercase [a-z0-9._-]. Names without '/', ':' or '@' keep
 * what older sbx accepted.
 */
static bool valid_name(const char *name)
{
    if (!name || !*name || strlen(name) > 255)
        return false;
    if (!strpbrk(name, "/@:"))
        return valid_legacy_name(name);
    _cleanup_free_ char *n = strdup(name);
    if (!n)
        return false;
    char *at = strchr(n, '@');
    if (at) {
        if (strncmp(at + 1, "sha256:", 7) || !hex64(at + 8))
            return false;
        *at = 0;
    }
    char *slash = strrchr(n, '/');
    char *colon = strrchr(slash ? slash : n, ':');
    if (colon) {
        const char *t = colon + 1;
        size_t tl = strlen(t);
        if (!tl || tl > 128 || !(isalnum((unsigned char)t[0]) || t[0] == '_'))
            return false;
        for (size_t i = 0; i < tl; i++)
            if (!(isalnum((unsigned char)t[i]) || t[i] == '_' || t[i] == '.' || t[i] == '-'))
                return false;
        *colon = 0;
    }
    char *p = n;
    bool first = true;
    for (;;) {
        char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        bool is_host = first && end &&
                       (memchr(p, '.', len) || memchr(p, ':', len) ||
                        (len == 9 && !strncmp(p, "localhost", 9)));
        if (is_host ? !host_ok(p, len) : !path_component_ok(p, len))
            return false;
        first = false;
        if (!end)
            break;
        p = end + 1;
    }
    return true;
}

/* The refusal of a name that is not Docker's grammar, saying what is. */
static int bad_name(const char *name, sbx_error **err)
{
    return sbx__set_error(err, SBX_EINVAL,
                          "invalid image name %s: use [HOST[:PORT]/]PATH[:TAG][@sha256:HEX] "
                          "with lowercase path components [a-z0-9._-], at most 255 bytes",
                          name ? name : "(null)");
}

bool sbx__linux_image_name_ok(const char *name)
{
    return valid_name(name) && strcmp(name, "none") != 0;
}

/* refs/<sha256 of the name>.json: any name, no path in it. */
static char *ref_path(const struct store *s, const char *name)
{
    struct sha256_ctx c;
    char hex[65];
    sha256_init(&c);
    sha256_update(&c, strlen(name), (const uint8_t *)name);
    sha256_hex(&c, hex);
    return sbx__printf("%s/refs/%s.json", s->dir, hex);
}

static json_t *load_ref(const struct store *s, const char *name)
{
    _cleanup_free_ char *p = ref_path(s, name);
    json_t *j = p ? json_load_file(p, 0, NULL) : NULL;
    /* The name inside must be this one (a hash is not proof against a planted file). */
    const char *in = json_string_value(json_object_get(j, "name"));
    if (j && (!in || strcmp(in, name) != 0)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* --- resolving ------------------------------------------------------------ */

static bool is_oci_layout(const char *dir)
{
    _cleanup_free_ char *p = sbx__printf("%s/oci-layout", dir);
    struct stat st;
    return p && stat(p, &st) == 0;
}

/*
 * The default cap: 16 GiB (above the largest common images, CUDA and ML ones
 * included), and never more than half the free space where the store is, so
 * a bomb stops while the host still has room.
 */
static void default_cap(struct import_ctl *ctl, const char *dir)
{
    if (ctl->max_bytes)
        return;
    ctl->max_is_default = true;
    ctl->max_bytes = DEFAULT_MAX_IMAGE_BYTES;
    struct statvfs vfs;
    if (statvfs(dir, &vfs) == 0) {
        uint64_t half = (uint64_t)vfs.f_bavail * vfs.f_frsize / 2;
        if (half < ctl->max_bytes)
            ctl->max_bytes = half;
    }
}

/*
 * Turns a source (path to a tarball, a directory, an OCI layout, or
 * "oci:PATH[:TAG]") into an image of the store: `*id` its record's hex;
 * or, for a plain directory (used in place, read-only: not copied, not
 * hashed), `*dir` its canonical path.
 */
static int resolve_source(const struct store *s, const char *source,
                          const sbx_linux_image_opts *opts, char **id, char **dir,
                          int *unpacked, sbx_error **err)
{
    _cleanup_free_ char *path = NULL;
    _cleanup_free_ char *tag = NULL;
    bool oci = false;
    if (!strncmp(source, "oci:", 4)) {
        oci = true;
        path = strdup(source + 4);
        /*
         * "oci:PATH:TAG" where TAG may itself hold ':' (a registry reference
         * like 127.0.0.1:5000/x:1): the split is at the first ':' whose left
         * side is a directory; with none, at the last ':' as before.
         */
        struct stat pst;
        char *colon = NULL;
        if (path && !(stat(path, &pst) == 0 && S_ISDIR(pst.st_mode))) {
            for (char *c = strchr(path, ':'); c && !colon; c = strchr(c + 1, ':')) {
                *c = 0;
                if (stat(path, &pst) == 0 && S_ISDIR(pst.st_mode))
                    colon = c;
                *c = ':';
            }
            if (!colon)
                colon = strrchr(path, ':');
        }
        if (colon) {
            *colon = 0;
            tag = strdup(colon + 1);
        }
    } else {
        path = strdup(source);
    }
    if (!path)
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
        *dir = realpath(path, NULL);
        return *dir ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    oci = oci || S_ISDIR(st.st_mode);
    /* Seen before (same path, size, mtime, inode)? Then no hashing, no unpacking. */
    _cleanup_free_ char *real = realpath(path, NULL);
    _cleanup_free_ char *keysrc = sbx__printf("%s:%s", real ? real : path, tag ? tag : "");
    _cleanup_free_ char *key = keysrc ? source_key(keysrc, &st) : NULL;
    _cleanup_free_ char *kp = key ? sbx__printf("%s/srcs/%s", s->dir, key) : NULL;
    if (!kp)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    struct import_ctl ctl = { .opts = opts, .max_bytes = opts ? opts->max_bytes : 0 };
    /* Two imports of one source: the second waits for the first and finds its work. */
    _cleanup_free_ char *lk = sbx__printf("src-%s", key);
    _cleanup_close_ int lfd = lk ? lock_key(s, lk, &ctl, err) : -1;
    if (lfd < 0)
        return lk ? lfd : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    char *known = NULL;
    size_t kl = 0;
    if (sbx__read_file(kp, &known, &kl) == 0) {
        bool ok = kl == 64 && (known[64] = 0, record_complete(s, known));
        if (ok) {
            *id = known;
            return SBX_OK;
        }
    }
    free(known);
    /* Before making a temporary of our own: what crashed or killed imports left. */
    sbx__linux_image_gc_dir(s->dir, false);
    default_cap(&ctl, s->dir);
    /* A spool of stdin (image_formats.c, in the store itself) is gone after this import. */
    size_t dl = strlen(s->dir);
    const char *file = real ? real : path;
    bool spooled = !strncmp(file, s->dir, dl) && file[dl] == '/';
    if (spooled)
        ctl.source = "(stdin)";
    char hex[65];
    int rc = oci ? import_oci(s, file, tag, &ctl, hex, unpacked, err)
                 : import_file(s, file, tag, &ctl, hex, unpacked, err); /* image_formats.c */
    if (rc < 0)
        return rc;
    if (!spooled)
        sbx__write_file_atomic(kp, hex, 64, 0600);
    *id = strdup(hex);
    return *id ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

/* The overlay's lower directories of record `id_hex`, top first, each layer once. */
static int record_lowers(const struct store *s, const char *image, const char *id_hex,
                         json_t **out, sbx_error **err)
{
    _cleanup_json_ json_t *rec = load_record(s, id_hex);
    json_t *layers = json_object_get(rec, "layers");
    if (!json_is_array(layers) || !json_array_size(layers))
        return sbx__set_error(err, SBX_ECREATE,
                              "image %s: its record sha256:%s is gone or broken; import it again",
                              image, id_hex);
    json_t *v = json_array();
    if (!v)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /*
     * A layer twice in one stack (two empty layers): only its topmost place
     * is kept. Overlay refuses a directory twice, and the top copy already
     * covers everything the lower one does.
     */
    for (size_t i = json_array_size(layers); i-- > 0;) {
        const char *h = digest_hex(json_string_value(json_array_get(layers, i)));
        _cleanup_free_ char *p = h ? sbx__printf("%s/layers/sha256-%s/diff", s->dir, h) : NULL;
        if (!p || !is_dir(p)) {
            json_decref(v);
            return sbx__set_error(err, SBX_ECREATE,
                                  "image %s: its layer %s is gone (pruned?); import it again",
                                  image, json_string_value(json_array_get(layers, i)));
        }
        bool dup = false;
        size_t k;
        json_t *q;
        json_array_foreach(v, k, q) dup |= !strcmp(json_string_value(q), p);
        if (!dup)
            json_array_append_new(v, json_string(p));
    }
    *out = v;
    return SBX_OK;
}

/* An older sbx's name (<state_dir>/images/names/NAME), or NULL. */
static json_t *load_legacy(const char *state_dir, const char *name)
{
    if (!valid_legacy_name(name))
        return NULL;
    _cleanup_free_ char *np = sbx__printf("%s/images/names/%s", state_dir, name);
    return np ? json_load_file(np, 0, NULL) : NULL;
}

static bool load_legacy_exists(const char *state_dir, const char *name)
{
    _cleanup_json_ json_t *j = load_legacy(state_dir, name);
    return j != NULL;
}

/*
 * What `image` is in the store: an imported name (this store's, else an
 * older sbx's, whose flattened tree is read in place), or an absolute
 * source, imported when not seen before. `*id`: its record's hex; or
 * `*dir`: a tree used as it is (a directory image, an old tree).
 */
/*
 * The name record of `image` as Docker would find it: the name as given,
 * else the same reference spelled otherwise — its canonical form
 * ("docker.io/library/x:1", what a pull records) or its familiar ones
 * ("x:1", "x" for x:latest, what a user may have imported or tagged) —
 * so `python:3.12` and `docker.io/library/python:3.12` name one image.
 * `*found` (optional) gets the name that matched.
 */
static json_t *load_ref_any(const struct store *s, const char *image, char **found)
{
    json_t *ref = valid_name(image) ? load_ref(s, image) : NULL;
    if (ref || sbx__image_ref_is_local(image)) {
        if (ref && found)
            *found = strdup(image);
        return ref;
    }
    sbx_image_ref r;
    sbx_error *e = NULL;
    if (sbx__image_ref_parse(image, &r, &e) < 0) {
        sbx_error_free(e);
        return NULL;
    }
    char *forms[3] = { sbx__image_ref_canonical(&r), sbx__image_ref_familiar(&r, false),
                       sbx__image_ref_familiar(&r, true) };
    sbx__image_ref_free(&r);
    for (size_t i = 0; i < SBX_ARRAY_SIZE(forms); i++) {
        if (!ref && forms[i] && strcmp(forms[i], image) && valid_name(forms[i]) &&
            (ref = load_ref(s, forms[i])) && found)
            *found = steal_pointer(&forms[i]);
        free(forms[i]);
    }
    return ref;
}

static int lookup(const struct store *s, const char *image, const sbx_linux_image_opts *opts,
                  char **id, char **dir, sbx_error **err)
{
    _cleanup_json_ json_t *ref = load_legacy_exists(s->state_dir, image)
                                     ? (valid_name(image) ? load_ref(s, image) : NULL)
                                     : load_ref_any(s, image, NULL);
    if (ref) {
        const char *d = json_string_value(json_object_get(ref, "dir"));
        const char *h = digest_hex(json_string_value(json_object_get(ref, "image")));
        if (d)
            *dir = strdup(d);
        else if (h)
            *id = strdup(h);
        return *id || *dir
                   ? SBX_OK
                   : sbx__set_error(err, SBX_ECREATE, "image %s: its name record is broken", image);
    }
    _cleanup_json_ json_t *old = load_legacy(s->state_dir, image);
    const char *rf = json_string_value(json_object_get(old, "rootfs"));
    if (rf) {
        *dir = strdup(rf);
        return *dir ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (image[0] != '/' && strncmp(image, "oci:", 4) != 0)
        return sbx__set_error(err, SBX_ECREATE,
                              "image %s is not imported (run `sbx image import %s SOURCE`) and is "
                              "not an absolute path to a directory, tarball or OCI layout",
                              image, image);
    return resolve_source(s, image, opts, id, dir, NULL, err);
}

/* Whether `name` names an image of the store (or of an older sbx). */
static bool name_known(const char *state_dir, const char *store, const char *name)
{
    struct store s;
    if (!valid_name(name) && !valid_legacy_name(name))
        return false;
    if (store_open(state_dir, store, 0, &s, NULL) < 0)
        return false;
    _cleanup_json_ json_t *ref = load_ref_any(&s, name, NULL);
    _cleanup_json_ json_t *old = ref ? NULL : load_legacy(state_dir, name);
    store_close(&s);
    return ref || old;
}

/*
 * A registry reference that is no imported name: its canonical name when
 * that is in the store, else pulled (as docker run does) per opts->pull:
 * "missing" (default), "always" (even when present: a moved tag is
 * followed) or "never". *name_out: the name to look up instead of `image`
 * (NULL: `image` itself).
 */
static int pull_if_needed(const char *state_dir, const char *store, const char *image,
                          const sbx_linux_image_opts *opts, char **name_out, sbx_error **err)
{
    *name_out = NULL;
    if (sbx__image_ref_is_local(image))
        return SBX_OK;
    const char *pull = opts && opts->pull ? opts->pull : "missing";
    bool always = !strcmp(pull, "always");
    if (!always && name_known(state_dir, store, image))
        return SBX_OK;
    sbx_image_ref ref;
    sbx_error *pe = NULL;
    if (sbx__image_ref_parse(image, &ref, &pe) < 0) {
        sbx_error_free(pe);
        return SBX_OK; /* no reference: the lookup says what is wrong */
    }
    _cleanup_free_ char *canon = sbx__image_ref_canonical(&ref);
    sbx__image_ref_free(&ref);
    if (!canon)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!always && name_known(state_dir, store, canon)) {
        *name_out = steal_pointer(&canon);
        return SBX_OK;
    }
    if (!strcmp(pull, "never"))
        return sbx__set_error(err, SBX_ECREATE,
                              "image %s is not imported and is not in the store as %s, and "
                              "pulling is off (pull: never): run `sbx image pull %s` first",
                              image, canon, image);
    sbx_error *e = NULL;
    int rc = sbx__linux_image_pull(state_dir, store, image, opts, name_out, &e);
    if (rc == SBX_ECANCELED)
        return sbx__fail(err, e);
    if (rc < 0) {
        int code = rc == SBX_EAUTH ? SBX_EAUTH : SBX_ECREATE;
        rc = sbx__set_error(err, code,
                            "image %s is not imported (`sbx image import %s SOURCE` imports one), "
                            "and pulling it as %s failed: %s",
                            image, image, canon, sbx_error_message(e));
        sbx_error_free(e);
    }
    return rc;
}

int sbx__linux_image_resolve(const char *state_dir, const char *store, const char *image,
                             const sbx_linux_image_opts *opts, char **rootfs, json_t **lowers,
                             bool *none, sbx_error **err)
{
    *none = false;
    json_t *lv = NULL;
    /* Every box's image comes through here: the store's privacy is checked each time. */
    int rc = check_store(state_dir, err);
    if (rc < 0)
        return rc;
    if (!image || !*image || !strcmp(image, "none")) {
        *none = true;
        rc = none_image(state_dir, rootfs, err);
        if (rc == SBX_OK && lowers)
            *lowers = json_pack("[s]", *rootfs);
        return rc;
    }
    /* Before the store's lock: a pull takes it itself. */
    _cleanup_free_ char *pulled = NULL;
    rc = pull_if_needed(state_dir, store, image, opts, &pulled, err);
    if (rc < 0)
        return rc;
    struct store s;
    rc = store_open(state_dir, store, LOCK_SH, &s, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *id = NULL;
    _cleanup_free_ char *dir = NULL;
    rc = lookup(&s, pulled ? pulled : image, opts, &id, &dir, err);
    if (rc == SBX_OK && dir) {
        if (!is_dir(dir))
            rc = sbx__set_error(err, SBX_ECREATE,
                                "image %s points at %s, which is gone; import it again", image,
                                dir);
        else
            lv = json_pack("[s]", dir);
    } else if (rc == SBX_OK) {
        rc = record_lowers(&s, image, id, &lv, err);
    }
    store_close(&s);
    if (rc == SBX_OK && (!lv || !json_array_size(lv)))
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (rc == SBX_OK) {
        *rootfs = strdup(json_string_value(json_array_get(lv, 0)));
        if (!*rootfs)
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (rc == SBX_OK && lowers)
        *lowers = steal_pointer(&lv);
    json_decref(lv);
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

int sbx__linux_image_import(const char *state_dir, const char *store, const char *name,
                            const char *source, const sbx_linux_image_opts *opts, sbx_error **err)
{
    if (!sbx__linux_image_name_ok(name))
        return bad_name(name, err);
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
    struct store s;
    /*
     * `sbx image import NAME -` (image_formats.c): stdin spooled into a
     * temporary of the store (before its lock: a pipe may take its time and
     * prune must not wait on it), imported, then removed.
     */
    _cleanup_free_ char *spool_dir = NULL;
    _cleanup_free_ char *spool = NULL;
    int rc;
    if (from_stdin) {
        rc = store_open(state_dir, store, 0, &s, err);
        if (rc < 0)
            return rc;
        rc = sbx__linux_spool_stdin(s.dir, opts, opts ? opts->max_bytes : 0, &spool_dir, &spool,
                                    err);
        store_close(&s);
        if (rc < 0)
            return rc;
    }
    rc = store_open(state_dir, store, LOCK_SH, &s, err);
    if (rc < 0) {
        if (spool_dir)
            sbx__rm_rf(spool_dir);
        return rc;
    }
    _cleanup_free_ char *id = NULL;
    _cleanup_free_ char *dir = NULL;
    int unpacked = 0;
    rc = resolve_source(&s, spool ? spool : source, opts, &id, &dir, &unpacked, err);
    if (spool_dir)
        sbx__rm_rf(spool_dir);
    if (from_stdin)
        source = "(stdin)";
    json_t *j = NULL;
    if (rc == SBX_OK) {
        j = dir ? json_pack("{s:s, s:s, s:s, s:f}", "name", name, "dir", dir, "source", source,
                            "created", now_unix())
                : json_pack("{s:s, s:s+, s:s, s:f}", "name", name, "image", "sha256:", id,
                            "source", source, "created", now_unix());
        _cleanup_free_ char *np = ref_path(&s, name);
        if (!j || !np || write_json(np, j) < 0)
            rc = sbx__set_errno(err, SBX_EIO, errno, "cannot record image name %s", name);
    }
    json_decref(j);
    store_close(&s);
    if (rc == SBX_OK && opts && opts->progress) {
        /* "layers" reports how many this import unpacked (the others were in the store). */
        opts->progress("layers", (uint64_t)unpacked, 0, opts->data);
        opts->progress("done", 1, 1, opts->data);
    }
    return rc;
}

/* The sha256 of a regular file of at most 4 MiB (an image config). */
static bool hash_small_file(const char *path, char hex[65])
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (4 << 20))
        return false;
    struct sha256_ctx c;
    sha256_init(&c);
    uint8_t buf[1 << 16];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            sha256_update(&c, (size_t)n, buf);
    if (n < 0)
        return false;
    sha256_hex(&c, hex);
    return true;
}

int sbx__linux_image_import_layers(const char *state_dir, const char *store, const char *name,
                                   const char *const *layers, size_t n, const char *config_path,
                                   const char *source, const sbx_linux_image_opts *opts,
                                   sbx_error **err)
{
    if (!sbx__linux_image_name_ok(name))
        return bad_name(name, err);
    if (!layers || n < 1 || n > MAX_LAYERS)
        return sbx__set_error(err, SBX_EINVAL, "an image has 1 to %d layers, not %zu",
                              MAX_LAYERS, n);
    /* The config, checked as an OCI layout's is; the image's id is its digest, as Docker's. */
    _cleanup_json_ json_t *config = NULL;
    char id[65] = "";
    if (config_path) {
        bool mismatch = false;
        config = load_json(config_path, NULL, &mismatch);
        if (!config || !hash_small_file(config_path, id))
            return sbx__set_error(err, SBX_EINVAL,
                                  "the image config %s is missing, not a regular file, larger "
                                  "than 4 MiB or not JSON",
                                  config_path);
        int rc = config_check(config_path, config, err);
        if (rc < 0)
            return rc;
    }
    json_t *diff_ids = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
    if (json_array_size(diff_ids) != n)
        diff_ids = NULL;
    struct store s;
    int rc = store_open(state_dir, store, LOCK_SH, &s, err);
    if (rc < 0)
        return rc;
    struct import_ctl ctl = { .opts = opts, .max_bytes = opts ? opts->max_bytes : 0 };
    sbx__linux_image_gc_dir(s.dir, false);
    default_cap(&ctl, s.dir);
    uint64_t total = 0, base = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(layers[i], &st) == 0)
            total += (uint64_t)st.st_size;
    }
    int unpacked = 0;
    _cleanup_json_ json_t *ids = json_array();
    struct sha256_ctx all;
    sha256_init(&all);
    rc = ids ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    for (size_t i = 0; rc == SBX_OK && i < n; i++) {
        const char *want =
            diff_ids ? digest_hex(json_string_value(json_array_get(diff_ids, i))) : NULL;
        if (diff_ids && !want) {
            rc = sbx__set_error(err, SBX_EINVAL, "bad diff_id %zu in %s", i, config_path);
            break;
        }
        char diff[65], file[65];
        rc = get_layer(&s, layers[i], "layer", true, NULL, want, &ctl, &base, total, diff, file,
                       &unpacked, err);
        if (rc == SBX_OK) {
            json_array_append_new(ids, json_sprintf("sha256:%s", diff));
            sha256_update(&all, 64, (const uint8_t *)diff);
        }
    }
    /* Without a config, the id is the digest of the diff_ids in order. */
    if (rc == SBX_OK && !config)
        sha256_hex(&all, id);
    if (rc == SBX_OK)
        rc = write_record(&s, id, ids, NULL, source ? source : "layers", config, err);
    if (rc == SBX_OK) {
        _cleanup_json_ json_t *j = json_pack("{s:s, s:s+, s:s, s:f}", "name", name, "image",
                                             "sha256:", id, "source", source ? source : "layers",
                                             "created", now_unix());
        _cleanup_free_ char *np = ref_path(&s, name);
        if (!j || !np || write_json(np, j) < 0)
            rc = sbx__set_errno(err, SBX_EIO, errno, "cannot record image name %s", name);
    }
    store_close(&s);
    if (rc == BAD_SOURCE)
        rc = SBX_EINVAL;
    if (rc == SBX_OK && opts && opts->progress) {
        opts->progress("layers", (uint64_t)unpacked, 0, opts->data);
        opts->progress("done", 1, 1, opts->data);
    }
    return rc;
}

json_t *sbx__linux_image_config(const char *state_dir, const char *store, const char *image)
{
    struct store s;
    if (!image || !*image || !strcmp(image, "none") ||
        store_open(state_dir, store, LOCK_SH, &s, NULL) < 0)
        return NULL;
    _cleanup_free_ char *id = NULL;
    _cleanup_free_ char *dir = NULL;
    sbx_error *e = NULL;
    if (lookup(&s, image, NULL, &id, &dir, &e) < 0)
        sbx_error_free(e);
    _cleanup_json_ json_t *rec = id ? load_record(&s, id) : NULL;
    store_close(&s);
    json_t *c = json_object_get(json_object_get(rec, "config"), "config");
    return json_is_object(c) ? json_incref(c) : NULL;
}

/* --- listing, removing, pruning ------------------------------------------- */

void sbx__linux_image_list_free(sbx_linux_image_info *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].name);
        free(v[i].digest);
        free(v[i].source);
    }
    free(v);
}

static bool push_info(sbx_linux_image_info **v, size_t *n, const char *name, const char *digest,
                      const char *source, uint64_t size, double created)
{
    sbx_linux_image_info *nv = realloc(*v, (*n + 1) * sizeof(**v));
    if (!nv)
        return false;
    *v = nv;
    sbx_linux_image_info *x = &nv[(*n)++];
    memset(x, 0, sizeof(*x));
    x->name = sbx__strdup0(name);
    x->digest = sbx__strdup0(digest);
    x->source = sbx__strdup0(source);
    x->size = size;
    x->created = created;
    return true;
}

/* Calls `fn` for each regular file of `dir` (no dot files). */
static void each_file(const char *dir, void (*fn)(const char *path, const char *base, void *),
                      void *data)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        _cleanup_free_ char *p = sbx__printf("%s/%s", dir, de->d_name);
        if (p)
            fn(p, de->d_name, data);
    }
    if (d)
        closedir(d);
}

struct list_acc {
    const struct store *s;
    sbx_linux_image_info *v;
    size_t n;
    bool legacy;
};

static void list_one(const char *path, const char *base, void *data)
{
    struct list_acc *a = data;
    _cleanup_json_ json_t *j = json_load_file(path, 0, NULL);
    if (!j)
        return;
    if (a->legacy) {
        const char *rf = json_string_value(json_object_get(j, "rootfs"));
        _cleanup_free_ char *mp = rf ? sbx__printf("%s/../meta.json", rf) : NULL;
        _cleanup_json_ json_t *meta = mp ? json_load_file(mp, 0, NULL) : NULL;
        push_info(&a->v, &a->n, base, json_string_value(json_object_get(j, "digest")),
                  json_string_value(json_object_get(j, "source")),
                  (uint64_t)json_integer_value(json_object_get(meta, "size")),
                  json_number_value(json_object_get(j, "created")));
        return;
    }
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *img = json_string_value(json_object_get(j, "image"));
    const char *dir = json_string_value(json_object_get(j, "dir"));
    _cleanup_json_ json_t *rec = digest_hex(img) ? load_record(a->s, digest_hex(img)) : NULL;
    _cleanup_free_ char *dd = dir ? sbx__printf("dir:%s", dir) : NULL;
    if (name)
        push_info(&a->v, &a->n, name, img ? img : dd,
                  json_string_value(json_object_get(j, "source")),
                  (uint64_t)json_integer_value(json_object_get(rec, "size")),
                  json_number_value(json_object_get(j, "created")));
}

static int by_name(const void *a, const void *b)
{
    const sbx_linux_image_info *x = a, *y = b;
    return strcmp(x->name ? x->name : "", y->name ? y->name : "");
}

int sbx__linux_image_list(const char *state_dir, const char *store, sbx_linux_image_info **out,
                          size_t *n_out, sbx_error **err)
{
    *out = NULL;
    *n_out = 0;
    struct store s;
    int rc = store_open(state_dir, store, 0, &s, err);
    if (rc < 0)
        return rc;
    struct list_acc a = { .s = &s };
    _cleanup_free_ char *refs = sbx__printf("%s/refs", s.dir);
    _cleanup_free_ char *old = sbx__printf("%s/images/names", state_dir);
    if (refs)
        each_file(refs, list_one, &a);
    a.legacy = true;
    if (old)
        each_file(old, list_one, &a);
    store_close(&s);
    /* By name: refs/ is in hash order, which says nothing to a reader. */
    if (a.n > 1)
        qsort(a.v, a.n, sizeof(*a.v), by_name);
    *out = a.v;
    *n_out = a.n;
    return SBX_OK;
}

struct sweep {
    const struct store *s;
    json_t *named;   /* set: image hexes some name points at */
    json_t *keep;    /* set: layer hexes some kept record has */
    json_t *removed; /* what went, for prune's answer */
    bool dry_run;
    bool all_records; /* prune: records nobody names go too; rm: only `only` */
    const char *only;
};

static void gone(struct sweep *w, const char *what, const char *path)
{
    if (!w->dry_run)
        sbx__rm_rf(path);
    if (w->removed)
        json_array_append_new(w->removed, json_string(what));
}

static void keep_ref(const char *path, const char *base, void *data)
{
    (void)base;
    struct sweep *w = data;
    _cleanup_json_ json_t *j = json_load_file(path, 0, NULL);
    const char *h = digest_hex(json_string_value(json_object_get(j, "image")));
    if (h)
        json_object_set_new(w->named, h, json_true());
}

/* Whether the record `hex` goes (in a dry run: would go). */
static bool record_drops(const struct sweep *w, const char *hex)
{
    return !json_object_get(w->named, hex) && (w->all_records || (w->only && !strcmp(w->only, hex)));
}

static void sweep_record(const char *path, const char *base, void *data)
{
    struct sweep *w = data;
    char hex[65];
    if (strncmp(base, "sha256-", 7) || strlen(base) != 7 + 64 + 5)
        return;
    snprintf(hex, sizeof(hex), "%.64s", base + 7);
    if (record_drops(w, hex)) {
        _cleanup_free_ char *what = sbx__printf("image sha256:%s", hex);
        gone(w, what ? what : base, path);
    }
}

static void keep_layers(const char *path, const char *base, void *data)
{
    (void)base;
    struct sweep *w = data;
    char hex[65];
    snprintf(hex, sizeof(hex), "%.64s", strlen(base) > 7 ? base + 7 : "");
    /* A record that goes (or would, in a dry run) keeps no layer. */
    if (record_drops(w, hex))
        return;
    _cleanup_json_ json_t *rec = json_load_file(path, 0, NULL);
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(rec, "layers"), i, l)
    {
        const char *h = digest_hex(json_string_value(l));
        if (h)
            json_object_set_new(w->keep, h, json_true());
    }
}

static void sweep_layer(const char *path, const char *base, void *data)
{
    struct sweep *w = data;
    if (strncmp(base, "sha256-", 7) || !hex64(base + 7) || json_object_get(w->keep, base + 7))
        return;
    _cleanup_free_ char *what = sbx__printf("layer sha256:%s", base + 7);
    gone(w, what ? what : base, path);
}

/* Index entries whose target is gone (srcs/, blobs/) and lock files. */
static void sweep_index(const char *path, const char *base, void *data)
{
    struct sweep *w = data;
    if (!strcmp(base, "store.lock"))
        return;
    if (strstr(path, "/locks/")) {
        if (!w->dry_run)
            unlink(path);
        return;
    }
    char *t = NULL;
    size_t n = 0;
    bool keep = sbx__read_file(path, &t, &n) == 0 && n == 64 && (t[64] = 0, hex64(t)) &&
                (strstr(path, "/srcs/") ? record_complete(w->s, t) : layer_done(w->s, t));
    free(t);
    if (!keep && !w->dry_run)
        unlink(path);
}

/*
 * The record a source path was imported as, without importing it: what a
 * box made from `image: /path` (or oci:...) runs on, or NULL.
 */
static char *peek_source(const struct store *s, const char *source)
{
    bool oci = !strncmp(source, "oci:", 4);
    _cleanup_free_ char *path = strdup(oci ? source + 4 : source);
    char *colon = oci && path ? strrchr(path, ':') : NULL;
    if (colon)
        *colon = 0;
    struct stat st;
    /* ARCHIVE:TAG (image_formats.c), keyed as resolve_source keys it. */
    const char *sel = !oci && path && stat(path, &st) < 0 ? sbx__linux_source_selector(path) : NULL;
    if (!path || stat(path, &st) < 0)
        return NULL;
    _cleanup_free_ char *real = realpath(path, NULL);
    _cleanup_free_ char *keysrc =
        sbx__printf("%s:%s", real ? real : path, colon ? colon + 1 : sel ? sel : "");
    _cleanup_free_ char *key = keysrc ? source_key(keysrc, &st) : NULL;
    _cleanup_free_ char *kp = key ? sbx__printf("%s/srcs/%s", s->dir, key) : NULL;
    char *t = NULL;
    size_t n = 0;
    if (!kp || sbx__read_file(kp, &t, &n) < 0 || n != 64 || !hex64(t)) {
        free(t);
        return NULL;
    }
    return t;
}

/*
 * The images running boxes of this state directory were made from keep
 * their records (and so their layers): a box made from a path, which no
 * name keeps, must not lose its lower dirs under it.
 */
static void keep_running(struct sweep *w)
{
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    if (sbx__linux_list(w->s->state_dir, NULL, &boxes, &n, NULL) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const char *img = boxes[i].rec.image;
        if (!boxes[i].shim_alive || !img || (img[0] != '/' && strncmp(img, "oci:", 4)))
            continue;
        char *id = peek_source(w->s, img);
        if (id)
            json_object_set_new(w->named, id, json_true());
        free(id);
    }
    sbx__linux_list_free(boxes, n);
}

/*
 * Records of no name (all, or just `only`), then layers of no record. Runs
 * under the store's exclusive lock: no import is between unpacking a layer
 * and recording it.
 */
static void sweep(struct sweep *w)
{
    const char *dir = w->s->dir;
    _cleanup_free_ char *refs = sbx__printf("%s/refs", dir);
    _cleanup_free_ char *records = sbx__printf("%s/records", dir);
    _cleanup_free_ char *layers = sbx__printf("%s/layers", dir);
    _cleanup_free_ char *srcs = sbx__printf("%s/srcs", dir);
    _cleanup_free_ char *blobs = sbx__printf("%s/blobs", dir);
    _cleanup_free_ char *locks = sbx__printf("%s/locks", dir);
    w->keep = json_object();
    w->named = json_object();
    if (!refs || !records || !layers || !srcs || !blobs || !locks || !w->keep || !w->named)
        goto out;
    each_file(refs, keep_ref, w);
    keep_running(w);
    each_file(records, keep_layers, w);
    each_file(records, sweep_record, w);
    each_file(layers, sweep_layer, w);
    if (!w->dry_run) {
        each_file(srcs, sweep_index, w);
        each_file(blobs, sweep_index, w);
        if (w->all_records)
            each_file(locks, sweep_index, w);
    }
out:
    json_decref(w->keep);
    json_decref(w->named);
    w->keep = w->named = NULL;
}

static int legacy_remove(const char *state_dir, const char *name, sbx_error **err)
{
    _cleanup_free_ char *np = sbx__printf("%s/images/names/%s", state_dir, name);
    _cleanup_json_ json_t *j = np ? json_load_file(np, 0, NULL) : NULL;
    if (!j)
        return sbx__set_error(err, SBX_ENOENT, "no image named %s", name);
    const char *digest = json_string_value(json_object_get(j, "digest"));
    if (unlink(np) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot remove image %s", name);
    const char *h = digest_hex(digest);
    if (!h)
        return SBX_OK; /* a directory used in place: nothing cached */
    /* Keep the tree while another old name points at it. */
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    sbx__linux_image_list(state_dir, NULL, &v, &n, NULL);
    bool used = false;
    for (size_t i = 0; i < n; i++)
        used |= v[i].digest && !strcmp(v[i].digest, digest);
    sbx__linux_image_list_free(v, n);
    _cleanup_free_ char *dir = sbx__printf("%s/images/sha256-%s", state_dir, h);
    if (!used && dir)
        sbx__rm_rf(dir);
    return SBX_OK;
}

int sbx__linux_image_remove(const char *state_dir, const char *store, const char *name,
                            sbx_error **err)
{
    if (!valid_name(name) && !valid_legacy_name(name))
        return sbx__set_error(err, SBX_EINVAL, "invalid image name %s", name ? name : "(null)");
    struct store s;
    int rc = store_open(state_dir, store, 0, &s, err);
    if (rc < 0)
        return rc;
    /* Any spelling of the reference removes the name it was stored under (as `docker rmi`). */
    _cleanup_free_ char *found = NULL;
    _cleanup_json_ json_t *ref = load_ref(&s, name);
    if (!ref && !load_legacy_exists(state_dir, name))
        ref = load_ref_any(&s, name, &found);
    if (!ref) {
        store_close(&s);
        return legacy_remove(state_dir, name, err);
    }
    if (found)
        name = found;
    _cleanup_free_ char *np = ref_path(&s, name);
    if (!np || unlink(np) < 0) {
        rc = sbx__set_errno(err, SBX_EIO, errno, "cannot remove image %s", name);
        store_close(&s);
        return rc;
    }
    /*
     * Its record and the layers no other image has go now, unless an import
     * or prune holds the store (then prune collects them later). Running
     * boxes keep working: their overlay holds the layers' dentries.
     */
    _cleanup_free_ char *lp = sbx__printf("%s/locks/store.lock", s.dir);
    s.lockfd = lp ? open(lp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
    if (s.lockfd >= 0 && flock(s.lockfd, LOCK_EX | LOCK_NB) == 0) {
        struct sweep w = { .s = &s,
                           .only = digest_hex(json_string_value(json_object_get(ref, "image"))) };
        if (w.only)
            sweep(&w);
    }
    store_close(&s);
    return SBX_OK;
}

/* A flattened tree of an older sbx (<state_dir>/images/sha256-<hex>/rootfs) no old name keeps. */
static void legacy_prune(const char *state_dir, struct sweep *w)
{
    _cleanup_free_ char *images = sbx__printf("%s/images", state_dir);
    DIR *d = images ? opendir(images) : NULL;
    if (!d)
        return;
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    struct list_acc a = { .legacy = true };
    _cleanup_free_ char *names = sbx__printf("%s/names", images);
    if (names)
        each_file(names, list_one, &a);
    v = a.v;
    n = a.n;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, "sha256-", 7) || !hex64(de->d_name + 7))
            continue;
        _cleanup_free_ char *tree = sbx__printf("%s/%s", images, de->d_name);
        _cleanup_free_ char *rootfs = tree ? sbx__printf("%s/rootfs", tree) : NULL;
        if (!rootfs || !is_dir(rootfs))
            continue;
        bool used = false;
        for (size_t i = 0; i < n; i++)
            used |= v[i].digest && !strcmp(v[i].digest + 7, de->d_name + 7);
        if (!used) {
            _cleanup_free_ char *what = sbx__printf("old image sha256:%s", de->d_name + 7);
            gone(w, what ? what : de->d_name, tree);
        }
    }
    closedir(d);
    sbx__linux_image_list_free(v, n);
}

static void pull_sweep(const struct store *s, json_t *removed, bool dry_run);

int sbx__linux_image_prune(const char *state_dir, const char *store, bool dry_run,
                           json_t **removed, sbx_error **err)
{
    struct store s;
    int rc = store_open(state_dir, store, LOCK_EX, &s, err);
    if (rc < 0)
        return rc;
    json_t *out = json_array();
    if (!out) {
        store_close(&s);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    /* Every partial blob no writer holds (no grace: prune is asked for the space). */
    int parts = sbx__linux_image_gc_partials(s.dir, 0, dry_run);
    for (int i = 0; i < parts; i++)
        json_array_append_new(out, json_string("partial blob"));
    int tmps = sbx__linux_image_gc_dir(s.dir, dry_run) + sbx__linux_image_gc(state_dir, dry_run);
    for (int i = 0; i < tmps; i++)
        json_array_append_new(out, json_string("temporary"));
    struct sweep w = { .s = &s, .removed = out, .dry_run = dry_run, .all_records = true };
    sweep(&w);
    pull_sweep(&s, out, dry_run);
    legacy_prune(state_dir, &w);
    store_close(&s);
    if (removed)
        *removed = out;
    else
        json_decref(out);
    return SBX_OK;
}

/* --- the image's config (img-config) -------------------------------------- */

/*
 * The config blob of an OCI image (Env, WorkingDir, User, Entrypoint, Cmd,
 * ExposedPorts, Labels, StopSignal under "config") is hostile input like its
 * layers: its digest is checked, its size bounded (4 MiB, load_json), and
 * every field sbx uses is checked for its type and bounds at import, so that
 * a box's create never meets a value it must guess about. A field that fails
 * refuses the import with the field's name. JSON strings holding NUL bytes
 * never get this far: jansson refuses \u0000 unless asked.
 */
#define MAX_CONFIG_ITEMS 4096   /* entries of Env, Entrypoint, Cmd, ExposedPorts, Labels */
#define MAX_CONFIG_STRING 65536 /* bytes of one of their strings */

static int config_strings(const char *layout, const char *field, json_t *v, bool env,
                          sbx_error **err)
{
    if (!v || json_is_null(v))
        return SBX_OK;
    if (!json_is_array(v))
        return sbx__set_error(err, BAD_SOURCE,
                              "the image config in %s: %s must be a list of strings", layout,
                              field);
    if (json_array_size(v) > MAX_CONFIG_ITEMS)
        return sbx__set_error(err, BAD_SOURCE,
                              "the image config in %s: %s has %zu entries, more than the %d sbx "
                              "accepts",
                              layout, field, json_array_size(v), MAX_CONFIG_ITEMS);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s)
    {
        const char *t = json_string_value(s);
        if (!t)
            return sbx__set_error(err, BAD_SOURCE,
                                  "the image config in %s: %s[%zu] is not a string", layout, field,
                                  i);
        if (json_string_length(s) > MAX_CONFIG_STRING)
            return sbx__set_error(err, BAD_SOURCE,
                                  "the image config in %s: %s[%zu] is longer than %d bytes",
                                  layout, field, i, MAX_CONFIG_STRING);
        if (env && (t[0] == '=' || !strchr(t, '=')))
            return sbx__set_error(err, BAD_SOURCE,
                                  "the image config in %s: Env[%zu] \"%.40s\" is not NAME=VALUE",
                                  layout, i, t);
    }
    return SBX_OK;
}

static int config_check(const char *layout, json_t *blob, sbx_error **err)
{
    if (!json_is_object(blob))
        return sbx__set_error(err, BAD_SOURCE, "the image config in %s is not a JSON object",
                              layout);
    json_t *c = json_object_get(blob, "config");
    if (!c || json_is_null(c))
        return SBX_OK;
    if (!json_is_object(c))
        return sbx__set_error(err, BAD_SOURCE,
                              "the image config in %s: \"config\" is not a JSON object", layout);
    int rc;
    if ((rc = config_strings(layout, "Env", json_object_get(c, "Env"), true, err)) < 0 ||
        (rc = config_strings(layout, "Entrypoint", json_object_get(c, "Entrypoint"), false,
                             err)) < 0 ||
        (rc = config_strings(layout, "Cmd", json_object_get(c, "Cmd"), false, err)) < 0)
        return rc;
    static const char *const strs[] = { "WorkingDir", "User", "StopSignal" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(strs); i++) {
        json_t *v = json_object_get(c, strs[i]);
        if (v && !json_is_null(v) && (!json_is_string(v) || json_string_length(v) > 4096))
            return sbx__set_error(err, BAD_SOURCE,
                                  "the image config in %s: %s must be a string of at most 4096 "
                                  "bytes",
                                  layout, strs[i]);
    }
    const char *wd = json_string_value(json_object_get(c, "WorkingDir"));
    if (wd && *wd && wd[0] != '/')
        return sbx__set_error(err, BAD_SOURCE,
                              "the image config in %s: WorkingDir %s is not an absolute path",
                              layout, wd);
    const char *user = json_string_value(json_object_get(c, "User"));
    if (user && strpbrk(user, "\n/"))
        return sbx__set_error(err, BAD_SOURCE,
                              "the image config in %s: User holds a newline or '/'", layout);
    static const char *const objs[] = { "ExposedPorts", "Labels" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(objs); i++) {
        json_t *v = json_object_get(c, objs[i]);
        if (v && !json_is_null(v) &&
            (!json_is_object(v) || json_object_size(v) > MAX_CONFIG_ITEMS))
            return sbx__set_error(err, BAD_SOURCE,
                                  "the image config in %s: %s must be an object of at most %d "
                                  "entries",
                                  layout, objs[i], MAX_CONFIG_ITEMS);
    }
    const char *key;
    json_t *v;
    json_object_foreach(json_object_get(c, "Labels"), key, v)
    {
        if (!json_is_string(v))
            return sbx__set_error(err, BAD_SOURCE,
                                  "the image config in %s: label %.40s is not a string", layout,
                                  key);
    }
    return SBX_OK;
}

/* The manifest's config blob, checked; NULL in `*out` when the manifest names none. */
static int image_config_load(const char *layout, json_t *manifest, json_t **out, sbx_error **err)
{
    *out = NULL;
    json_t *desc = json_object_get(manifest, "config");
    if (!desc)
        return SBX_OK;
    const char *d = json_string_value(json_object_get(desc, "digest"));
    if (!d || strncmp(d, "sha256:", 7) || strlen(d) != 71 ||
        strspn(d + 7, "0123456789abcdef") != 64)
        return sbx__set_error(err, BAD_SOURCE,
                              "the OCI manifest in %s names its config by a bad digest (want "
                              "sha256: and 64 hex digits)",
                              layout);
    bool mismatch = false;
    json_t *blob = load_blob(layout, d, NULL, &mismatch);
    if (mismatch)
        return sbx__set_error(err, BAD_SOURCE,
                              "the image config %s in %s does not match its digest (a corrupt or "
                              "tampered layout)",
                              d, layout);
    if (!blob)
        return sbx__set_error(err, BAD_SOURCE,
                              "the image config %s in %s is missing, not a regular file, larger "
                              "than 4 MiB or not JSON",
                              d, layout);
    int rc = config_check(layout, blob, err);
    if (rc < 0) {
        json_decref(blob);
        return rc;
    }
    *out = blob;
    return SBX_OK;
}

int sbx__linux_image_inspect(const char *state_dir, const char *store, const char *name,
                             char **json_out, sbx_error **err)
{
    if (!valid_name(name))
        return sbx__set_error(err, SBX_EINVAL, "invalid image name %s", name ? name : "(null)");
    struct store s;
    int rc = store_open(state_dir, store, 0, &s, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *found = NULL; /* the name as stored, whatever the spelling asked */
    _cleanup_json_ json_t *ref = load_ref_any(&s, name, &found);
    _cleanup_json_ json_t *old = ref ? NULL : load_legacy(state_dir, name);
    json_t *j = ref ? ref : old;
    if (found)
        name = found;
    const char *h = digest_hex(json_string_value(json_object_get(ref, "image")));
    _cleanup_json_ json_t *rec = h ? load_record(&s, h) : NULL;
    store_close(&s);
    if (!j)
        return sbx__set_error(err, SBX_ENOENT, "no image named %s (see `sbx image ls`)", name);
    /* An older sbx's tree: its size beside it. */
    const char *rf = json_string_value(json_object_get(old, "rootfs"));
    _cleanup_free_ char *mp = rf ? sbx__printf("%s/../meta.json", rf) : NULL;
    _cleanup_json_ json_t *meta = mp ? json_load_file(mp, 0, NULL) : NULL;
    const char *dir = json_string_value(json_object_get(ref, "dir"));
    _cleanup_free_ char *dd = dir ? sbx__printf("dir:%s", dir) : NULL;
    json_t *digest = ref ? (h ? json_object_get(ref, "image") : NULL) : json_object_get(old, "digest");
    json_t *blob = json_object_get(rec, "config");
    json_t *cfg = json_object_get(blob, "config");
    json_t *layers = json_object_get(rec, "layers");
    json_int_t size = rec ? json_integer_value(json_object_get(rec, "size"))
                          : json_integer_value(json_object_get(meta, "size"));
    _cleanup_json_ json_t *o = json_pack(
        "{s:s, s:o, s:O, s:O, s:I, s:O?, s:O?, s:O?, s:O?, s:O?, s:O}", "name", name, "digest",
        digest ? json_incref(digest) : dd ? json_string(dd) : json_null(), "source",
        json_object_get(j, "source") ? json_object_get(j, "source") : json_null(), "created",
        json_object_get(j, "created") ? json_object_get(j, "created") : json_null(), "size", size,
        "manifest", json_object_get(rec, "manifest"), "architecture",
        json_object_get(blob, "architecture"), "os", json_object_get(blob, "os"), "image_created",
        json_object_get(blob, "created"), "layers", json_is_array(layers) ? layers : NULL,
        "config", json_is_object(cfg) ? cfg : json_null());
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *json_out = text;
    return SBX_OK;
}

int sbx__linux_image_tag(const char *state_dir, const char *store, const char *src,
                         const char *name, sbx_error **err)
{
    if (!valid_name(src))
        return sbx__set_error(err, SBX_EINVAL, "invalid image name %s", src ? src : "(null)");
    if (!sbx__linux_image_name_ok(name))
        return bad_name(name, err);
    struct store s;
    int rc = store_open(state_dir, store, LOCK_SH, &s, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *j = load_ref_any(&s, src, NULL);
    if (!j) {
        /* An older sbx's name: the new one points at its tree, as a directory image. */
        _cleanup_json_ json_t *old = load_legacy(state_dir, src);
        const char *rf = json_string_value(json_object_get(old, "rootfs"));
        j = rf ? json_pack("{s:s, s:O?}", "dir", rf, "source", json_object_get(old, "source"))
               : NULL;
    }
    if (!j) {
        store_close(&s);
        return sbx__set_error(err, SBX_ENOENT, "no image named %s (see `sbx image ls`)", src);
    }
    /* A second name for the same image: removing either keeps its layers for the other. */
    json_object_set_new(j, "name", json_string(name));
    json_object_set_new(j, "created", json_real(now_unix()));
    _cleanup_free_ char *np = ref_path(&s, name);
    if (!np || write_json(np, j) < 0)
        rc = sbx__set_errno(err, SBX_EIO, errno, "cannot record image name %s", name);
    store_close(&s);
    return rc;
}

/* --- pulling ---------------------------------------------------------------- */

/*
 * Registry pulls land in an OCI layout inside the store, <store>/oci, whose
 * blobs every pulled image shares; the store's OCI import then unpacks each
 * layer once into layers/, so a layer another image brought is neither
 * fetched nor unpacked again. A pull holds the store's shared lock from its
 * first byte to its name, so prune (exclusive) never meets a blob fetched
 * but not yet in index.json, nor a .partial whose writer is alive.
 */
static int pull_layout_in(const struct store *s, char **out, sbx_error **err)
{
    char *p = sbx__printf("%s/oci", s->dir);
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (mkdir(p, 0700) < 0 && errno != EEXIST) {
        int rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot create the pull layout %s", p);
        free(p);
        return rc;
    }
    *out = p;
    return SBX_OK;
}

int sbx__linux_pull_layout(const char *state_dir, const char *store, char **out, sbx_error **err)
{
    struct store s;
    int rc = store_open(state_dir, store, 0, &s, err);
    if (rc < 0)
        return rc;
    rc = pull_layout_in(&s, out, err);
    store_close(&s);
    return rc;
}

struct pull_bridge {
    const sbx_linux_image_opts *io;
};

static void pull_progress(const char *digest, const char *kind, uint64_t done, uint64_t total,
                          sbx_pull_state state, void *data)
{
    struct pull_bridge *b = data;
    if (!b->io || !b->io->progress)
        return;
    char stage[64];
    snprintf(stage, sizeof(stage), "pull:%s:%s:%.12s", sbx__pull_state_name(state), kind,
             digest && strlen(digest) > 7 ? digest + 7 : "");
    b->io->progress(stage, done, total, b->io->data);
}

static bool pull_cancelled(void *data)
{
    struct pull_bridge *b = data;
    return b->io && b->io->cancelled && b->io->cancelled(b->io->data);
}

int sbx__linux_image_pull(const char *state_dir, const char *store, const char *ref,
                          const sbx_linux_image_opts *io, char **canonical, sbx_error **err)
{
    struct store s;
    int rc = store_open(state_dir, store, LOCK_SH, &s, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *layout = NULL;
    rc = pull_layout_in(&s, &layout, err);
    /* What killed or failed pulls left and nobody resumed within the grace. */
    if (rc == SBX_OK)
        sbx__linux_image_gc_partials(s.dir, SBX_PARTIAL_GRACE_S, false);
    sbx_pull_opts po = { 0 };
    if (io && io->registry)
        po = *io->registry;
    /*
     * The bound of the manifest's declared sizes: the import's cap
     * (max_image_bytes, else min(16 GiB, half the free space)); compressed
     * blobs past what may be unpacked are refused before their first byte.
     */
    struct import_ctl cap = { .max_bytes = io ? io->max_bytes : 0 };
    default_cap(&cap, s.dir);
    po.max_bytes = cap.max_bytes;
    po.max_bytes_hint =
        cap.max_is_default
            ? "the default bound is the smaller of 16 GiB and half the free space of the image "
              "store's filesystem: set the linux provider's max_image_bytes to allow more"
            : "raise the linux provider's max_image_bytes to allow more";
    struct pull_bridge b = { .io = io };
    po.progress = pull_progress;
    po.cancelled = pull_cancelled;
    po.data = &b;
    _cleanup_free_ char *canon = NULL;
    if (rc == SBX_OK)
        rc = sbx__registry_pull(layout, ref, &po, &canon, err);
    _cleanup_free_ char *source = rc == SBX_OK ? sbx__printf("oci:%s:%s", layout, canon) : NULL;
    if (rc == SBX_OK && !source)
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /* The store's own OCI import: layers already in layers/ are not unpacked again. */
    if (rc == SBX_OK)
        rc = sbx__linux_image_import(state_dir, store, canon, source, io, err);
    store_close(&s);
    if (rc == SBX_OK && canonical)
        *canonical = steal_pointer(&canon);
    return rc;
}

/* Blobs reachable from a manifest or index blob (depth-bounded: an index of manifests). */
static void pull_keep(const char *layout, const char *digest, json_t *keep, int depth)
{
    if (!digest || strncmp(digest, "sha256:", 7) || !hex64(digest + 7))
        return;
    json_object_set_new(keep, digest + 7, json_true());
    if (depth > 2)
        return;
    bool mismatch = false;
    _cleanup_json_ json_t *m = load_blob(layout, digest, NULL, &mismatch);
    if (!json_is_object(m))
        return;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(m, "manifests"), i, v)
        pull_keep(layout, json_string_value(json_object_get(v, "digest")), keep, depth + 1);
    const char *cfg = json_string_value(json_object_get(json_object_get(m, "config"), "digest"));
    if (cfg && !strncmp(cfg, "sha256:", 7) && hex64(cfg + 7))
        json_object_set_new(keep, cfg + 7, json_true());
    json_array_foreach(json_object_get(m, "layers"), i, v)
    {
        const char *d = json_string_value(json_object_get(v, "digest"));
        if (d && !strncmp(d, "sha256:", 7) && hex64(d + 7))
            json_object_set_new(keep, d + 7, json_true());
    }
}

/*
 * Prune's part in the pull layout (under the store's exclusive lock: no
 * pull runs): index.json entries whose name no longer names an image go,
 * then every blob no kept entry reaches (prune removes the .partial files
 * whose writer is gone before, through sbx__linux_image_gc_partials).
 */
static void pull_sweep(const struct store *s, json_t *removed, bool dry_run)
{
    _cleanup_free_ char *layout = sbx__printf("%s/oci", s->dir);
    _cleanup_free_ char *ip = layout ? sbx__printf("%s/index.json", layout) : NULL;
    _cleanup_free_ char *bd = layout ? sbx__printf("%s/blobs/sha256", layout) : NULL;
    if (!bd || !is_dir(bd))
        return;
    _cleanup_json_ json_t *index = load_json(ip, NULL, NULL);
    _cleanup_json_ json_t *keep = json_object();
    json_t *mans = json_object_get(index, "manifests");
    /* A broken or unreadable index: better keep everything. (No index: nothing is tagged.) */
    struct stat st;
    if (!keep || (index && !json_is_array(mans)) || (!index && lstat(ip, &st) == 0))
        return;
    json_t *kept = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(mans, i, m)
    {
        const char *name = json_string_value(json_object_get(
            json_object_get(m, "annotations"), "org.opencontainers.image.ref.name"));
        _cleanup_json_ json_t *ref = name && valid_name(name) ? load_ref(s, name) : NULL;
        if (ref) {
            json_array_append(kept, m);
            pull_keep(layout, json_string_value(json_object_get(m, "digest")), keep, 0);
        } else if (removed) {
            json_array_append_new(removed, json_sprintf("pulled %s", name ? name : "(unnamed)"));
        }
    }
    if (!dry_run && kept && json_array_size(kept) != json_array_size(mans)) {
        json_object_set(index, "manifests", kept);
        write_json(ip, index);
    }
    json_decref(kept);
    DIR *d = opendir(bd);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *n = de->d_name;
        size_t len = strlen(n);
        _cleanup_free_ char *p = sbx__printf("%s/%s", bd, n);
        if (!p || n[0] == '.')
            continue;
        if (len > 8 && !strcmp(n + len - 8, ".partial")) {
            continue; /* sbx__linux_image_gc_partials' */
        } else if (hex64(n) && !json_object_get(keep, n)) {
            if (!dry_run)
                unlink(p);
            if (removed)
                json_array_append_new(removed, json_sprintf("pulled blob sha256:%s", n));
        }
    }
    if (d)
        closedir(d);
}
/* --- [img-commit] hooks for image_commit.c -------------------------------- */

json_t *sbx__linux_image_record(const char *state_dir, const char *store, const char *image,
                                sbx_error **err)
{
    struct store s;
    if (store_open(state_dir, store, LOCK_SH, &s, err) < 0)
        return NULL;
    _cleanup_free_ char *id = NULL;
    _cleanup_free_ char *dir = NULL;
    json_t *rec = NULL;
    if (lookup(&s, image, NULL, &id, &dir, err) == SBX_OK) {
        rec = id ? load_record(&s, id) : NULL;
        if (!rec)
            sbx__set_error(err, SBX_ENOTSUP,
                           "image %s is %s, not an image of layers: only a box of a layered "
                           "image (imported from a tarball or an OCI layout) can be committed",
                           image, dir ? "a plain directory" : "gone from the store");
    }
    store_close(&s);
    return rec;
}

int sbx__linux_image_import_layout(const char *state_dir, const char *store, const char *name,
                                   const char *layout, const char *source, uint64_t max_bytes,
                                   char id_out[65], sbx_error **err)
{
    if (!sbx__linux_image_name_ok(name))
        return bad_name(name, err);
    struct store s;
    int rc = store_open(state_dir, store, LOCK_SH, &s, err);
    if (rc < 0)
        return rc;
    struct import_ctl ctl = { .max_bytes = max_bytes ? max_bytes : DEFAULT_MAX_IMAGE_BYTES,
                              .max_is_default = !max_bytes };
    rc = import_oci(&s, layout, NULL, &ctl, id_out, NULL, err);
    if (rc == BAD_SOURCE)
        rc = SBX_ECREATE;
    if (rc == SBX_OK) {
        json_t *j = json_pack("{s:s, s:s+, s:s, s:f}", "name", name, "image", "sha256:", id_out,
                              "source", source, "created", now_unix());
        _cleanup_free_ char *np = ref_path(&s, name);
        if (!j || !np || write_json(np, j) < 0)
            rc = sbx__set_errno(err, SBX_EIO, errno, "cannot record image name %s", name);
        json_decref(j);
    }
    store_close(&s);
    return rc;
}
