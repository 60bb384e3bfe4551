/*
 * `sbx commit BOX NAME`: a running box's writable layer becomes one more
 * layer over its image (docs/images.md, "Commit and build").
 *
 * Where the layer is: the overlay upper dir lives on a tmpfs inside the
 * box's mount namespace, which nothing on the host reaches after
 * pivot_root. The box's first process hands the shim an O_PATH descriptor
 * of it before pivot_root (shim/box.c send_upper); the shim keeps it and
 * writes its number in the box record ("upper_fd"), so the host reaches it
 * as /proc/<shim>/fd/<N> (root only), once the shim is proven to be that
 * box's shim (pid, start time, command line: sbx__linux_shim_pidfd).
 *
 * What it holds was written by the box, so it is read as hostile: every
 * entry by openat/fstatat relative to its directory without following a
 * link, a regular file only when fstat of what was opened is the entry
 * that was listed, never across a mount, sizes bounded by the image cap
 * before a byte is read, device nodes refused except overlay's whiteouts
 * (0/0 character devices), overlay's xattrs believed only under the prefix
 * the box's overlay uses (trusted.* as root, user.* with a user namespace:
 * the box can set the other one on its own files).
 *
 * The layer is written as a deterministic OCI tar (entries sorted by name,
 * mtimes in whole seconds, no user/group names, no atime/ctime, uid/gid as
 * the box sees them, ".wh.NAME" for a deletion and ".wh..wh..opq" for a
 * replaced directory): its sha256 is the diff_id. It then goes into the
 * store the way any OCI layout does (sbx__linux_image_import_layout): the
 * store's unpacker, with its checks, turns it into overlay's format. The
 * image's other layers are named by their diff_ids, which the store has.
 */
#include "providers/linux/linux.h"
#include "image/sbxfile.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>

#define DEFAULT_COMMIT_MAX (16ull << 30) /* as image.c's import cap */
#define MAX_DEPTH 256
#define MAX_ENTRIES (1u << 20)

static void hex_of(struct sha256_ctx *s, char out[65])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(s, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* --- changes (docker commit --change) ------------------------------------ */

/* --- the walk ------------------------------------------------------------ */

struct walk {
    struct archive *a;
    struct sha256_ctx sha;
    int out;             /* the tar file */
    uint64_t bytes, cap; /* tar bytes so far, at most */
    uint64_t entries;
    dev_t dev; /* the upper dir's filesystem: never left */
    bool userns;
    unsigned uid_base;
    const char *xprefix; /* "trusted.overlay." or "user.overlay." */
    char path[4096];     /* the entry's path in the layer */
    sbx_error **err;
    int werr;                /* errno of a failed write */
    struct link_seen *links; /* files with more than one link, first path each */
    size_t nlinks;
};

/* A hard-linked file's first path in the layer: later links become tar hard links. */
struct link_seen {
    ino_t ino;
    char *path;
};

#define MAX_LINKS 65536 /* past that, further links are stored as copies */

static const char *link_of(const struct walk *w, ino_t ino)
{
    for (size_t i = 0; i < w->nlinks; i++)
        if (w->links[i].ino == ino)
            return w->links[i].path;
    return NULL;
}

static void remember_link(struct walk *w, ino_t ino)
{
    if (w->nlinks >= MAX_LINKS)
        return;
    struct link_seen *n = realloc(w->links, (w->nlinks + 1) * sizeof(*n));
    if (!n)
        return;
    w->links = n;
    if ((n[w->nlinks].path = strdup(w->path))) {
        n[w->nlinks].ino = ino;
        w->nlinks++;
    }
}

static la_ssize_t tar_write(struct archive *a, void *data, const void *buf, size_t n)
{
    (void)a;
    struct walk *w = data;
    sha256_update(&w->sha, n, buf);
    const char *p = buf;
    size_t left = n;
    while (left) {
        ssize_t k = write(w->out, p, left);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            w->werr = k < 0 ? errno : EIO;
            return -1;
        }
        p += k;
        left -= (size_t)k;
    }
    return (la_ssize_t)n;
}

static unsigned box_id_of(const struct walk *w, unsigned id)
{
    if (!w->userns)
        return id;
    return id >= w->uid_base && id - w->uid_base < 65536 ? id - w->uid_base : 65534;
}

/* The overlay xattr `name` (after the prefix) of an open file, as text; "" when absent. */
static void ovl_xattr(const struct walk *w, int fd, const char *name, char *out, size_t len)
{
    char key[64];
    snprintf(key, sizeof(key), "%s%s", w->xprefix, name);
    ssize_t n = fgetxattr(fd, key, out, len - 1);
    out[n > 0 ? (size_t)n : 0] = 0;
}

static int too_big(struct walk *w)
{
    return sbx__set_error(w->err, SBX_EINVAL,
                          "the box's changes are larger than the image cap of %llu bytes (at "
                          "/%s): remove what is not needed, or raise max_bytes / max_image_bytes",
                          (unsigned long long)w->cap, w->path);
}

static int put_header(struct walk *w, struct archive_entry *e, uint64_t data)
{
    w->bytes += 1024 + data;
    if (w->bytes > w->cap)
        return too_big(w);
    if (++w->entries > MAX_ENTRIES)
        return sbx__set_error(w->err, SBX_EINVAL,
                              "the box's changes hold more than %u files: not committed",
                              MAX_ENTRIES);
    if (archive_write_header(w->a, e) != ARCHIVE_OK)
        return sbx__set_error(w->err, SBX_EIO, "cannot write the layer (at /%s): %s", w->path,
                              w->werr ? strerror(w->werr) : archive_error_string(w->a));
    return SBX_OK;
}

static struct archive_entry *entry_for(struct walk *w, const struct stat *st, mode_t type)
{
    struct archive_entry *e = archive_entry_new();
    if (!e)
        return NULL;
    archive_entry_set_pathname(e, w->path);
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, st ? st->st_mode & 07777 : 0);
    archive_entry_set_uid(e, st ? box_id_of(w, st->st_uid) : 0);
    archive_entry_set_gid(e, st ? box_id_of(w, st->st_gid) : 0);
    archive_entry_set_mtime(e, st ? st->st_mtim.tv_sec : 0, 0);
    return e;
}

/* A deletion (".wh.NAME") or a replaced directory (".wh..wh..opq") at w->path's `base`. */
static int put_marker(struct walk *w, size_t dir_len, const char *name)
{
    size_t keep = strlen(w->path);
    int n = snprintf(w->path + dir_len, sizeof(w->path) - dir_len, "%s.wh.%s", dir_len ? "/" : "",
                     name);
    if (n < 0 || (size_t)n >= sizeof(w->path) - dir_len)
        return sbx__set_error(w->err, SBX_EINVAL, "a path in the box is too long");
    struct archive_entry *e = entry_for(w, NULL, AE_IFREG);
    if (!e)
        return sbx__set_error(w->err, SBX_ENOMEM, "out of memory");
    archive_entry_set_size(e, 0);
    int rc = put_header(w, e, 0);
    archive_entry_free(e);
    w->path[keep] = 0;
    return rc;
}

static int copy_data(struct walk *w, int fd, uint64_t size)
{
    static __thread char buf[1 << 16];
    uint64_t done = 0;
    while (done < size) {
        size_t want = size - done < sizeof(buf) ? (size_t)(size - done) : sizeof(buf);
        ssize_t k = read(fd, buf, want);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return sbx__set_errno(w->err, SBX_EIO, errno, "cannot read /%s in the box", w->path);
        if (k == 0) {
            /* Shrunk while read (a running box): the header's size is kept, zeros follow. */
            memset(buf, 0, want);
            k = (ssize_t)want;
        }
        if (archive_write_data(w->a, buf, (size_t)k) != k)
            return sbx__set_error(w->err, SBX_EIO, "cannot write the layer (at /%s): %s", w->path,
                                  w->werr ? strerror(w->werr) : archive_error_string(w->a));
        done += (uint64_t)k;
    }
    return SBX_OK;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* The names in directory `dfd`, sorted. */
static int list_dir(struct walk *w, int dfd, char ***out, size_t *nout)
{
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d) {
        if (d2 >= 0)
            close(d2);
        return sbx__set_errno(w->err, SBX_EIO, errno, "cannot list /%s in the box", w->path);
    }
    rewinddir(d);
    char **v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = SBX_OK;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **nv = nc <= MAX_ENTRIES ? realloc(v, nc * sizeof(*v)) : NULL;
            if (!nv) {
                rc = sbx__set_error(w->err, SBX_EINVAL, "/%s in the box holds too many files",
                                    w->path);
                break;
            }
            v = nv;
            cap = nc;
        }
        if (!(v[n] = strdup(de->d_name))) {
            rc = sbx__set_error(w->err, SBX_ENOMEM, "out of memory");
            break;
        }
        n++;
    }
    closedir(d);
    if (rc < 0) {
        free_names(v, n);
        return rc;
    }
    if (n)
        qsort(v, n, sizeof(*v), cmp_names);
    *out = v;
    *nout = n;
    return SBX_OK;
}

static int walk_dir(struct walk *w, int dfd, int depth);

static int walk_entry(struct walk *w, int dfd, const char *name, int depth)
{
    size_t dir_len = strlen(w->path);
    int n =
        snprintf(w->path + dir_len, sizeof(w->path) - dir_len, "%s%s", dir_len ? "/" : "", name);
    if (n < 0 || (size_t)n >= sizeof(w->path) - dir_len)
        return sbx__set_error(w->err, SBX_EINVAL, "a path in the box is longer than %zu bytes",
                              sizeof(w->path) - 1);
    /* OCI spends ".wh." names on whiteouts: a file so named would become one. */
    if (!strncmp(name, ".wh.", 4)) {
        int rc = sbx__set_error(w->err, SBX_EINVAL,
                                "/%s: a name starting with .wh. cannot be stored in an OCI layer "
                                "(it means a deletion there); rename it and commit again",
                                w->path);
        w->path[dir_len] = 0;
        return rc;
    }
    struct stat st;
    int rc = SBX_OK;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        /* Gone since it was listed (a running box): not in the layer. */
        w->path[dir_len] = 0;
        return errno == ENOENT ? SBX_OK
                               : sbx__set_errno(w->err, SBX_EIO, errno, "cannot stat /%s", w->path);
    }
    if (st.st_dev != w->dev) {
        rc = sbx__set_error(w->err, SBX_EINVAL, "/%s is another filesystem: refused", w->path);
    } else if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
        w->path[dir_len] = 0;
        return put_marker(w, dir_len, name);
    } else if (S_ISDIR(st.st_mode)) {
        if (depth >= MAX_DEPTH)
            return sbx__set_error(w->err, SBX_EINVAL,
                                  "/%s is more than %d directories deep: not committed", w->path,
                                  MAX_DEPTH);
        _cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat fs;
        if (fd < 0 || fstat(fd, &fs) < 0 || fs.st_ino != st.st_ino || fs.st_dev != st.st_dev) {
            rc = sbx__set_error(w->err, SBX_EIO, "/%s changed while it was read", w->path);
        } else {
            char v[16];
            ovl_xattr(w, fd, "redirect", v, sizeof(v));
            if (*v)
                rc = sbx__set_error(w->err, SBX_ENOTSUP,
                                    "/%s is a renamed directory (overlay redirect_dir): sbx "
                                    "cannot commit it; mount overlay with redirect_dir=off",
                                    w->path);
            struct archive_entry *e = rc == SBX_OK ? entry_for(w, &fs, AE_IFDIR) : NULL;
            if (rc == SBX_OK && !e)
                rc = sbx__set_error(w->err, SBX_ENOMEM, "out of memory");
            if (rc == SBX_OK)
                rc = put_header(w, e, 0);
            archive_entry_free(e);
            ovl_xattr(w, fd, "opaque", v, sizeof(v));
            if (rc == SBX_OK && !strcmp(v, "y"))
                rc = put_marker(w, strlen(w->path), ".wh..opq");
            if (rc == SBX_OK)
                rc = walk_dir(w, fd, depth + 1);
        }
    } else if (S_ISREG(st.st_mode) && st.st_nlink > 1 && link_of(w, st.st_ino)) {
        /* Another name of a file already in the layer (one filesystem: st_dev is checked). */
        struct archive_entry *e = entry_for(w, &st, AE_IFREG);
        if (!e)
            return sbx__set_error(w->err, SBX_ENOMEM, "out of memory");
        archive_entry_set_hardlink(e, link_of(w, st.st_ino));
        archive_entry_set_size(e, 0);
        rc = put_header(w, e, 0);
        archive_entry_free(e);
    } else if (S_ISREG(st.st_mode)) {
        if (w->bytes + 1024 + (uint64_t)st.st_size > w->cap)
            return too_big(w);
        _cleanup_close_ int fd =
            openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat fs;
        if (fd < 0 || fstat(fd, &fs) < 0 || !S_ISREG(fs.st_mode) || fs.st_ino != st.st_ino ||
            fs.st_dev != st.st_dev) {
            rc = sbx__set_error(w->err, SBX_EIO, "/%s changed while it was read", w->path);
        } else {
            char key[64];
            snprintf(key, sizeof(key), "%smetacopy", w->xprefix);
            if (fgetxattr(fd, key, NULL, 0) >= 0)
                return sbx__set_error(w->err, SBX_ENOTSUP,
                                      "/%s is an overlay metacopy file: sbx cannot commit it; "
                                      "mount overlay with metacopy=off",
                                      w->path);
            struct archive_entry *e = entry_for(w, &fs, AE_IFREG);
            if (!e)
                return sbx__set_error(w->err, SBX_ENOMEM, "out of memory");
            archive_entry_set_size(e, fs.st_size);
            rc = put_header(w, e, (uint64_t)fs.st_size);
            archive_entry_free(e);
            if (rc == SBX_OK)
                rc = copy_data(w, fd, (uint64_t)fs.st_size);
            if (rc == SBX_OK && fs.st_nlink > 1)
                remember_link(w, fs.st_ino);
        }
    } else if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t k = readlinkat(dfd, name, target, sizeof(target) - 1);
        if (k < 0 || (size_t)k >= sizeof(target) - 1) {
            rc = sbx__set_error(w->err, SBX_EIO, "cannot read the link /%s", w->path);
        } else {
            target[k] = 0;
            struct archive_entry *e = entry_for(w, &st, AE_IFLNK);
            if (!e)
                return sbx__set_error(w->err, SBX_ENOMEM, "out of memory");
            archive_entry_set_symlink(e, target);
            rc = put_header(w, e, (uint64_t)k);
            archive_entry_free(e);
        }
    } else if (S_ISFIFO(st.st_mode)) {
        /* Recorded, never opened. */
        struct archive_entry *e = entry_for(w, &st, AE_IFIFO);
        if (!e)
            return sbx__set_error(w->err, SBX_ENOMEM, "out of memory");
        rc = put_header(w, e, 0);
        archive_entry_free(e);
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        rc = sbx__set_error(w->err, SBX_EINVAL,
                            "/%s in the box is a device node: a layer carries none (remove it "
                            "and commit again)",
                            w->path);
    }
    /* A socket: bound to a process of the box, meaningless in an image; left out. */
    w->path[dir_len] = 0;
    return rc;
}

static int walk_dir(struct walk *w, int dfd, int depth)
{
    char **names = NULL;
    size_t n = 0;
    int rc = list_dir(w, dfd, &names, &n);
    for (size_t i = 0; rc == SBX_OK && i < n; i++)
        rc = walk_entry(w, dfd, names[i], depth);
    free_names(names, n);
    return rc;
}

/* --- freezing (freeze.c: the owner file, and who thaws) ----------------- */

void (*sbx__linux_commit_frozen_hook)(const char *id);

/* --- the commit ---------------------------------------------------------- */

static int write_blob(const char *layout, const char *text, char hex[65], sbx_error **err)
{
    struct sha256_ctx s;
    sha256_init(&s);
    sha256_update(&s, strlen(text), (const uint8_t *)text);
    hex_of(&s, hex);
    _cleanup_free_ char *p = sbx__printf("%s/blobs/sha256/%s", layout, hex);
    if (!p || sbx__write_file_atomic(p, text, strlen(text), 0600) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot write %s", p ? p : layout);
    return SBX_OK;
}

/* The upper dir of box `rec`, through its shim, opened for reading; -1 and *err. */
static int open_upper(const sbx_linux_record *rec, json_t *raw, sbx_error **err)
{
    json_t *ufd = json_object_get(raw, "upper_fd");
    if (!json_is_integer(ufd) || json_integer_value(ufd) < 0 || json_integer_value(ufd) > 1 << 20)
        return sbx__set_error(err, SBX_ENOTSUP,
                              "box %s has no known writable layer (created by an older sbx-shim): "
                              "it cannot be committed; create it again",
                              rec->id);
    int pfd = -1;
    if (!sbx__linux_shim_pidfd(rec, &pfd))
        return sbx__set_error(err, SBX_ESTATE, "box %s is not running (its shim is gone)", rec->id);
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/fd/%d", (int)rec->shim_pid, (int)json_integer_value(ufd));
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = errno;
    /* Still that shim after the open: the pid was not reused in between. */
    bool same = pfd < 0 ? sbx__linux_proc_start(rec->shim_pid) == rec->shim_start
                        : syscall(SYS_pidfd_send_signal, pfd, 0, NULL, 0) == 0;
    if (pfd >= 0)
        close(pfd);
    struct statfs sf;
    if (fd >= 0 && (!same || fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC)) {
        close(fd);
        return sbx__set_error(
            err, SBX_ESTATE, "box %s's writable layer is not where its shim said (%s)", rec->id, p);
    }
    if (fd < 0)
        return sbx__set_errno(err, e == EACCES || e == EPERM ? SBX_EPERM : SBX_ESTATE, e,
                              "cannot open box %s's writable layer (%s)%s", rec->id, p,
                              e == EACCES || e == EPERM ? ": commit needs root" : "");
    return fd;
}

/* The layer hex of a lower dir path ".../layers/sha256-<hex>/diff", or NULL. */
static const char *lower_hex(const char *p, char out[65])
{
    const char *k = p ? strstr(p, "/layers/sha256-") : NULL;
    if (!k)
        return NULL;
    k += strlen("/layers/sha256-");
    if (strlen(k) != 64 + 5 || strcmp(k + 64, "/diff") != 0)
        return NULL;
    memcpy(out, k, 64);
    out[64] = 0;
    return out;
}

/*
 * Whether a record's layers (bottom first, "sha256:<hex>") are what the box
 * stacks (`lowers`, top first, each layer once at its topmost place, as the
 * store hands them out). No lowers in the record (an older shim): believed.
 */
static bool same_layers(json_t *layers, json_t *lowers)
{
    if (!json_is_array(lowers))
        return true;
    size_t n = json_array_size(layers), k = 0;
    for (size_t i = n; i-- > 0;) {
        const char *d = json_string_value(json_array_get(layers, i));
        if (!d || strncmp(d, "sha256:", 7) != 0)
            return false;
        bool dup = false;
        for (size_t j = i + 1; j < n && !dup; j++)
            dup = !strcmp(json_string_value(json_array_get(layers, j)), d);
        if (dup)
            continue;
        char hex[65];
        if (!lower_hex(json_string_value(json_array_get(lowers, k++)), hex) ||
            strcmp(hex, d + 7) != 0)
            return false;
    }
    return k == json_array_size(lowers);
}

static char *iso_now(void)
{
    time_t t = time(NULL);
    struct tm tm;
    char b[32];
    gmtime_r(&t, &tm);
    strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%SZ", &tm);
    return strdup(b);
}

int sbx__linux_image_commit(const char *state_dir, const char *store, const char *id,
                            const char *name, const char *opts_json, uint64_t max_bytes,
                            char **json_out, sbx_error **err)
{
    if (!sbx__linux_id_ok(id))
        return sbx__set_error(err, SBX_EINVAL, "invalid box id '%s'", id ? id : "(null)");
    /* A new name is Docker's form only (the store still reads an older sbx's freer names). */
    if (!name || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789._-/:") != strlen(name) ||
        !sbx__linux_image_name_ok(name))
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid image name %s: use [HOST[:PORT]/]PATH[:TAG] with "
                              "lowercase path components [a-z0-9._-]",
                              name ? name : "(null)");
    _cleanup_json_ json_t *opts = opts_json ? json_loads(opts_json, 0, NULL) : json_object();
    json_t *changes = json_object_get(opts, "changes");
    if (!json_is_object(opts) || (changes && !json_is_array(changes)))
        return sbx__set_error(err, SBX_EINVAL,
                              "commit options must be {\"changes\": [\"ENV K=V\", ...], "
                              "\"pause\": bool, \"max_bytes\": N}");
    json_t *mb = json_object_get(opts, "max_bytes");
    if (json_is_integer(mb) && json_integer_value(mb) > 0)
        max_bytes = (uint64_t)json_integer_value(mb);
    bool pause = !json_is_false(json_object_get(opts, "pause"));

    /* The box: its record, believed only as state.c believes it. */
    _cleanup_free_ char *bd = sbx__printf("%s/boxes/%s", state_dir, id);
    if (!bd)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    sbx_linux_record rec;
    int rc = sbx__linux_record_read(bd, &rec, err);
    if (rc < 0)
        return rc == SBX_ENOENT ? sbx__set_error(err, SBX_ENOENT, "no box %s", id) : rc;
    _cleanup_json_ json_t *raw = NULL;
    {
        _cleanup_close_ int dfd = open(bd, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_free_ char *text = NULL;
        size_t n = 0;
        if (dfd < 0 ||
            sbx__read_private_file(dfd, "record.json", bd, SBX_RECORD_MAX, &text, &n, err) < 0) {
            sbx__linux_record_free(&rec);
            return err && *err ? sbx_error_code(*err) : SBX_EIO;
        }
        raw = json_loadb(text, n, 0, NULL);
    }
    json_t *uid = json_object_get(raw, "userns_uid");
    struct walk w = {.out = -1, .err = err};
    w.userns = json_is_integer(uid);
    w.uid_base = w.userns ? (unsigned)json_integer_value(uid) : 0;
    w.xprefix = w.userns ? "user.overlay." : "trusted.overlay.";

    _cleanup_json_ json_t *base = NULL;
    _cleanup_free_ char *layout = NULL;
    _cleanup_free_ char *storedir = sbx__linux_image_store_dir(state_dir, store);
    _cleanup_close_ int upper = -1;
    int freeze_fd = -1; /* holds the box's freeze (freeze.c) while it lasts */
    _cleanup_json_ json_t *cfgblob = NULL;
    _cleanup_free_ char *blobs = NULL;
    _cleanup_free_ char *tarp = NULL;
    _cleanup_free_ char *lp = NULL;
    _cleanup_json_ json_t *diff_ids = NULL;
    _cleanup_json_ json_t *mlayers = NULL;
    _cleanup_free_ char *now = NULL;
    _cleanup_free_ char *ctext = NULL;
    _cleanup_json_ json_t *man = NULL;
    _cleanup_free_ char *mtext = NULL;
    _cleanup_json_ json_t *index = NULL;
    _cleanup_free_ char *itext = NULL;
    _cleanup_free_ char *ip = NULL;
    _cleanup_free_ char *op = NULL;
    _cleanup_free_ char *src = NULL;
    bool frozen = false;
    const char *cg = json_string_value(json_array_get(rec.cgroups, 0));
    char layer_hex[65] = "", id_hex[65] = "";
    /* "creating" too: the shim marks a box "running" a moment after its creator returns. */
    if (!rec.state || (strcmp(rec.state, "running") != 0 && strcmp(rec.state, "creating") != 0)) {
        rc = sbx__set_error(err, SBX_ESTATE,
                            "box %s is %s, not running: only a running box "
                            "can be committed",
                            id, rec.state ? rec.state : "in no known state");
        goto out;
    }
    if (!rec.image || !*rec.image || !strcmp(rec.image, "none")) {
        rc = sbx__set_error(err, SBX_ENOTSUP,
                            "box %s runs the none image (the host's system directories): only "
                            "a box of an imported image can be committed",
                            id);
        goto out;
    }
    base = sbx__linux_image_record(state_dir, store, rec.image, err);
    if (!base) {
        rc = err && *err ? sbx_error_code(*err) : SBX_ENOTSUP;
        goto out;
    }
    json_t *blayers = json_object_get(base, "layers");
    if (!json_is_array(blayers) || !json_array_size(blayers)) {
        rc = sbx__set_error(err, SBX_ECREATE, "image %s's record has no layers", rec.image);
        goto out;
    }
    /* The name may point elsewhere since the box was made: its layers must be the box's. */
    if (!same_layers(blayers, json_object_get(raw, "lowers"))) {
        rc = sbx__set_error(err, SBX_ESTATE,
                            "image %s is no longer the image box %s was made from (re-imported "
                            "or re-tagged since): its changes would land on other layers; not "
                            "committed",
                            rec.image, id);
        goto out;
    }

    /* The new config: the base image's, the changes applied. */
    json_t *bc = json_object_get(base, "config");
    cfgblob = json_is_object(bc)
                  ? json_deep_copy(bc)
                  : json_pack("{s:s, s:s, s:{}}", "architecture", "amd64", "os", "linux", "config");
    if (!cfgblob) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    json_t *cfg = json_object_get(cfgblob, "config");
    if (!json_is_object(cfg)) {
        cfg = json_object();
        json_object_set_new(cfgblob, "config", cfg);
    }
    size_t i;
    json_t *ch;
    json_array_foreach(changes, i, ch)
    {
        if (!json_is_string(ch)) {
            rc = sbx__set_error(err, SBX_EINVAL, "each change must be a string");
            goto out;
        }
        if ((rc = sbx__image_apply_change(cfg, json_string_value(ch), err)) < 0)
            goto out;
    }

    upper = open_upper(&rec, raw, err);
    if (upper < 0) {
        rc = upper;
        goto out;
    }
    struct stat ust;
    if (fstat(upper, &ust) < 0) {
        rc = sbx__set_errno(err, SBX_EIO, errno, "cannot stat box %s's writable layer", id);
        goto out;
    }
    w.dev = ust.st_dev;

    /* The cap: the caller's, else the store's default (and half the free space there). */
    w.cap = max_bytes ? max_bytes : DEFAULT_COMMIT_MAX;
    struct statvfs vfs;
    if (!max_bytes && storedir && statvfs(storedir, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize / 2 < w.cap)
        w.cap = (uint64_t)vfs.f_bavail * vfs.f_frsize / 2;

    /*
     * The temporary layout, named as the store's gc knows its temporaries.
     * Those of commits and imports whose process died (a commit killed
     * mid-copy) go first, as an import's do.
     */
    if (storedir)
        sbx__linux_image_gc_dir(storedir, false);
    char rnd[17];
    sbx__random_hex(rnd, 8);
    layout = storedir ? sbx__printf("%s/tmp-%d-%llu-%s", storedir, (int)getpid(),
                                    sbx__linux_proc_start(getpid()), rnd)
                      : NULL;
    blobs = layout ? sbx__printf("%s/blobs/sha256", layout) : NULL;
    tarp = layout ? sbx__printf("%s/layer.tar", layout) : NULL;
    if (!blobs || !tarp) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    if (mkdir(layout, 0700) < 0 || sbx__mkdir_p(blobs, 0700) < 0) {
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot create %s", layout);
        goto out;
    }
    w.out = open(tarp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    w.a = archive_write_new();
    if (w.out < 0 || !w.a) {
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot create %s", tarp);
        goto out;
    }
    sha256_init(&w.sha);
    archive_write_set_format_pax_restricted(w.a);
    archive_write_set_bytes_per_block(w.a, 10240);
    if (archive_write_open(w.a, &w, NULL, tar_write, NULL) != ARCHIVE_OK) {
        rc = sbx__set_error(err, SBX_EIO, "cannot start the layer: %s", archive_error_string(w.a));
        goto out;
    }
    /*
     * Docker pauses too: what a running box writes meanwhile would tear the
     * layer. The freeze is owned first, so that it is undone should this
     * process die before it thaws (freeze.c).
     */
    if (pause && cg) {
        if ((freeze_fd = sbx__linux_freeze_own(bd, id, rec.cgroups, err)) < 0) {
            rc = freeze_fd;
            goto out;
        }
        frozen = sbx__cg_freeze(id, rec.cgroups);
        if (frozen && sbx__linux_commit_frozen_hook)
            sbx__linux_commit_frozen_hook(id);
    }
    rc = walk_dir(&w, upper, 0);
    sbx__linux_freeze_release(bd, id, rec.cgroups, freeze_fd);
    freeze_fd = -1;
    if (rc == SBX_OK && archive_write_close(w.a) != ARCHIVE_OK)
        rc = sbx__set_error(err, SBX_EIO, "cannot finish the layer: %s",
                            w.werr ? strerror(w.werr) : archive_error_string(w.a));
    archive_write_free(w.a);
    w.a = NULL;
    if (rc < 0)
        goto out;
    hex_of(&w.sha, layer_hex);
    struct stat tst;
    if (fsync(w.out) < 0 || fstat(w.out, &tst) < 0) {
        rc = sbx__set_errno(err, SBX_EIO, errno, "cannot write %s", tarp);
        goto out;
    }
    lp = sbx__printf("%s/%s", blobs, layer_hex);
    if (!lp || rename(tarp, lp) < 0) {
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot write the layer in %s", layout);
        goto out;
    }

    /* The config and manifest: the base's layers (the store has them) and this one. */
    diff_ids = json_deep_copy(blayers);
    mlayers = json_array();
    if (!diff_ids || !mlayers) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    json_array_append_new(diff_ids, json_sprintf("sha256:%s", layer_hex));
    json_t *l;
    json_array_foreach(diff_ids, i, l)
    {
        bool last = i + 1 == json_array_size(diff_ids);
        json_array_append_new(mlayers, json_pack("{s:s, s:O, s:I}", "mediaType",
                                                 "application/vnd.oci.image.layer.v1.tar", "digest",
                                                 l, "size", (json_int_t)(last ? tst.st_size : 0)));
    }
    json_object_set_new(cfgblob, "rootfs",
                        json_pack("{s:s, s:O}", "type", "layers", "diff_ids", diff_ids));
    now = iso_now();
    json_object_set_new(cfgblob, "created", json_string(now ? now : ""));
    json_t *hist = json_object_get(cfgblob, "history");
    if (json_is_array(hist)) {
        _cleanup_free_ char *by = sbx__printf("sbx commit %s", id);
        json_array_append_new(hist, json_pack("{s:s, s:s}", "created", now ? now : "", "created_by",
                                              by ? by : "sbx commit"));
    }
    ctext = json_dumps(cfgblob, JSON_COMPACT | JSON_SORT_KEYS);
    char chex[65], mhex[65];
    if (!ctext) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = write_blob(layout, ctext, chex, err)) < 0)
        goto out;
    man = json_pack("{s:i, s:s, s:{s:s, s:s+, s:I}, s:O}", "schemaVersion", 2, "mediaType",
                    "application/vnd.oci.image.manifest.v1+json", "config", "mediaType",
                    "application/vnd.oci.image.config.v1+json", "digest", "sha256:", chex, "size",
                    (json_int_t)strlen(ctext), "layers", mlayers);
    mtext = man ? json_dumps(man, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!mtext) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = write_blob(layout, mtext, mhex, err)) < 0)
        goto out;
    index = json_pack("{s:i, s:[{s:s, s:s+, s:I}]}", "schemaVersion", 2, "manifests", "mediaType",
                      "application/vnd.oci.image.manifest.v1+json", "digest", "sha256:", mhex,
                      "size", (json_int_t)strlen(mtext));
    itext = index ? json_dumps(index, JSON_COMPACT) : NULL;
    ip = sbx__printf("%s/index.json", layout);
    op = sbx__printf("%s/oci-layout", layout);
    static const char ol[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
    if (!itext || !ip || !op || sbx__write_file_atomic(ip, itext, strlen(itext), 0600) < 0 ||
        sbx__write_file_atomic(op, ol, strlen(ol), 0600) < 0) {
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot write the layout %s", layout);
        goto out;
    }
    src = sbx__printf("commit:%s", id);
    rc = sbx__linux_image_import_layout(state_dir, store, name, layout, src ? src : "commit",
                                        max_bytes, id_hex, err);
    if (rc < 0)
        goto out;
    if (json_out) {
        _cleanup_json_ json_t *o = json_pack(
            "{s:s+, s:s, s:s+, s:I, s:b, s:I}", "id", "sha256:", id_hex, "name", name, "layer",
            "sha256:", layer_hex, "layers", (json_int_t)json_array_size(diff_ids), "paused",
            frozen ? 1 : 0, "size", (json_int_t)tst.st_size);
        *json_out = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (!*json_out)
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
out:
    sbx__linux_freeze_release(bd, id, rec.cgroups, freeze_fd);
    if (w.a)
        archive_write_free(w.a);
    if (w.out >= 0)
        close(w.out);
    if (layout)
        sbx__rm_rf(layout);
    for (size_t k = 0; k < w.nlinks; k++)
        free(w.links[k].path);
    free(w.links);
    sbx__linux_record_free(&rec);
    return rc;
}
