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

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

/* Finishes `s` (nettle resets it for reuse) and writes the digest as 64 hex digits. */
static void sha256_hex(struct sha256_ctx *s, char out[65])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(s, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static int mkdir_for(const char *state_dir, const char *sub, char **out, sbx_error **err)
{
    char *p = sbx__printf("%s/images/%s", state_dir, sub);
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx__mkdir_p(p, 0755) < 0) {
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
    char hex[17];
    sbx__random_hex(hex, 8);
    _cleanup_free_ char *tmp = sbx__printf("%s.tmp-%s", dir, hex);
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

struct reader {
    int fd;
    struct sha256_ctx sha;
    unsigned char buf[1 << 16];
    uint64_t done, total;
    sbx_linux_progress_cb progress;
    void *pdata;
    const char *stage;
};

static la_ssize_t read_cb(struct archive *a, void *data, const void **buf)
{
    (void)a;
    struct reader *r = data;
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
    if (r->progress)
        r->progress(r->stage, r->done, r->total, r->pdata);
    *buf = r->buf;
    return n;
}

/* Removes `path` under `root` for an OCI whiteout; refuses to leave the root. */
static void whiteout(const char *root, const char *dir, const char *name)
{
    if (!strcmp(name, ".wh..opq")) {
        /* Opaque directory: the lower layers' contents of `dir` vanish. */
        _cleanup_free_ char *d = sbx__printf("%s/%s", root, dir);
        DIR *dh = d ? opendir(d) : NULL;
        struct dirent *de;
        while (dh && (de = readdir(dh))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            _cleanup_free_ char *p = sbx__printf("%s/%s", d, de->d_name);
            if (p)
                sbx__rm_rf(p);
        }
        if (dh)
            closedir(dh);
        return;
    }
    _cleanup_free_ char *p = sbx__printf("%s/%s%s%s", root, dir, *dir ? "/" : "", name);
    if (p)
        sbx__rm_rf(p);
}

/*
 * The source itself cannot be used (not an archive, a corrupt one, `..`
 * entries, a broken OCI layout): the input is at fault, not sbx. An import
 * reports it as such; sbx__linux_image_resolve turns it into SBX_ECREATE, as
 * every failed create is.
 */
#define BAD_SOURCE SBX_EINVAL

/*
 * Unpacks one tar stream (any compression libarchive knows) into `root`.
 * With `oci`, ".wh." entries are applied as whiteouts instead of written.
 * Paths are confined to `root` (no "..", no absolute paths, no writing
 * through symlinks).
 */
static int unpack(struct reader *r, const char *root, bool oci, sbx_error **err)
{
    struct archive *a = archive_read_new();
    struct archive *w = archive_write_disk_new();
    if (!a || !w) {
        archive_read_free(a);
        archive_write_free(w);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_gnutar(a);
    archive_write_disk_set_options(
        w, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_OWNER |
               ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
               ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_UNLINK);
    /*
     * Names are rewritten to "<root>/<name>" below (libarchive has no
     * extract-under-a-directory mode, and chdir is process-wide), so
     * absolute paths are expected; leading slashes of the archive's own names
     * are stripped first, ".." is refused, and no symlink on the way is
     * followed (`root` itself is a realpath without symlinks).
     */
    int rc = SBX_OK;
    if (archive_read_open(a, r, NULL, read_cb, NULL) != ARCHIVE_OK) {
        rc = sbx__set_error(err, BAD_SOURCE, "not a tar archive: %s", archive_error_string(a));
        goto out;
    }
    struct archive_entry *e;
    for (;;) {
        int s = archive_read_next_header(a, &e);
        if (s == ARCHIVE_EOF)
            break;
        if (s < ARCHIVE_WARN) {
            rc = sbx__set_error(err, BAD_SOURCE, "reading the image archive: %s",
                                archive_error_string(a));
            goto out;
        }
        const char *orig = archive_entry_pathname(e);
        _cleanup_free_ char *name_copy = orig ? strdup(orig) : NULL;
        const char *name = name_copy;
        while (name && name[0] == '.' && name[1] == '/')
            name += 2;
        while (name && name[0] == '/')
            name++;
        if (!name || !*name || !strcmp(name, "."))
            continue;
        if (oci) {
            const char *base = strrchr(name, '/');
            base = base ? base + 1 : name;
            if (!strncmp(base, ".wh.", 4)) {
                _cleanup_free_ char *dir = strndup(name, (size_t)(base - name));
                if (dir && *dir && dir[strlen(dir) - 1] == '/')
                    dir[strlen(dir) - 1] = 0;
                if (dir && !strstr(dir, ".."))
                    whiteout(root, dir, base + 4);
                continue;
            }
        }
        _cleanup_free_ char *dst = sbx__printf("%s/%s", root, name);
        if (!dst) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            goto out;
        }
        archive_entry_set_pathname(e, dst);
        const char *hl = archive_entry_hardlink(e);
        _cleanup_free_ char *hdst = NULL;
        if (hl) {
            while (hl[0] == '.' && hl[1] == '/')
                hl += 2;
            while (hl[0] == '/')
                hl++;
            hdst = sbx__printf("%s/%s", root, hl);
            archive_entry_set_hardlink(e, hdst);
        }
        s = archive_write_header(w, e);
        if (s >= ARCHIVE_WARN && archive_entry_size(e) > 0) {
            const void *buf;
            size_t len;
            la_int64_t off;
            int k;
            while ((k = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK)
                if (archive_write_data_block(w, buf, len, off) < ARCHIVE_WARN)
                    break;
            if (k < ARCHIVE_WARN) {
                rc = sbx__set_error(err, BAD_SOURCE, "reading the image archive: %s",
                                    archive_error_string(a));
                goto out;
            }
        }
        if (s < ARCHIVE_WARN) {
            /* A refused entry (`..`, through a symlink) has no errno; ENOSPC, EACCES do. */
            int en = archive_errno(w);
            rc = sbx__set_error(err, en > 0 ? SBX_ECREATE : BAD_SOURCE, "unpacking %s: %s", name,
                                archive_error_string(w));
            goto out;
        }
        archive_write_finish_entry(w);
    }
    /* Drain what follows the archive so the digest covers the whole file. */
    while (read_cb(a, r, &(const void *){ NULL }) > 0)
        ;
out:
    archive_read_free(a);
    archive_write_free(w);
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

/* Unpacks a tarball into the cache; `*digest_dir` is images/sha256-<hex>. */
static int import_tarball(const char *images, const char *path, sbx_linux_progress_cb progress,
                          void *pdata, char **digest_dir, sbx_error **err)
{
    struct reader *r = calloc(1, sizeof(*r));
    if (!r)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        free(r);
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot open image %s", path);
    }
    struct stat st;
    fstat(r->fd, &st);
    r->total = (uint64_t)st.st_size;
    r->progress = progress;
    r->pdata = pdata;
    r->stage = "unpack";
    sha256_init(&r->sha);
    char rnd[17];
    sbx__random_hex(rnd, 8);
    _cleanup_free_ char *tmp = sbx__printf("%s/tmp-%s", images, rnd);
    _cleanup_free_ char *rootfs = sbx__printf("%s/tmp-%s/rootfs", images, rnd);
    int rc = SBX_OK;
    if (!tmp || !rootfs || sbx__mkdir_p(rootfs, 0755) < 0)
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "cannot create a directory in %s", images);
    if (rc == SBX_OK)
        rc = unpack(r, rootfs, false, err);
    close(r->fd);
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

/* --- OCI image layouts ---------------------------------------------------- */

static json_t *load_blob(const char *layout, const char *digest, char *hex_out)
{
    if (!digest || strncmp(digest, "sha256:", 7) || strchr(digest + 7, '/'))
        return NULL;
    if (hex_out)
        snprintf(hex_out, 65, "%s", digest + 7);
    _cleanup_free_ char *p = sbx__printf("%s/blobs/sha256/%s", layout, digest + 7);
    return p ? json_load_file(p, 0, NULL) : NULL;
}

static int import_oci(const char *images, const char *layout, const char *tag,
                      sbx_linux_progress_cb progress, void *pdata, char **digest_dir,
                      sbx_error **err)
{
    _cleanup_free_ char *ip = sbx__printf("%s/index.json", layout);
    _cleanup_json_ json_t *index = ip ? json_load_file(ip, 0, NULL) : NULL;
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
    _cleanup_json_ json_t *manifest =
        load_blob(layout, json_string_value(json_object_get(pick, "digest")), hex);
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
                                       hex)
                           : NULL;
        json_decref(manifest);
        manifest = next;
    }
    json_t *layers = json_object_get(manifest, "layers");
    if (!json_is_array(layers))
        return sbx__set_error(err, BAD_SOURCE, "the OCI manifest in %s has no layers", layout);
    _cleanup_free_ char *done = sbx__printf("%s/sha256-%s", images, hex);
    if (done && is_dir(done)) {
        *digest_dir = steal_pointer(&done);
        return SBX_OK;
    }
    char rnd[17];
    sbx__random_hex(rnd, 8);
    _cleanup_free_ char *tmp = sbx__printf("%s/tmp-%s", images, rnd);
    _cleanup_free_ char *rootfs = sbx__printf("%s/tmp-%s/rootfs", images, rnd);
    if (!tmp || !rootfs || sbx__mkdir_p(rootfs, 0755) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot create a directory in %s", images);
    int rc = SBX_OK;
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
        r->fd = open(bp, O_RDONLY | O_CLOEXEC);
        if (r->fd < 0) {
            rc = sbx__set_errno(err, errno == ENOENT ? BAD_SOURCE : SBX_ECREATE, errno, "cannot open layer %s", bp);
            free(r);
            break;
        }
        r->total = total;
        r->done = base;
        r->progress = progress;
        r->pdata = pdata;
        r->stage = "layer";
        sha256_init(&r->sha);
        rc = unpack(r, rootfs, true, err);
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
                          sbx_linux_progress_cb progress, void *pdata, char **rootfs,
                          char **digest, sbx_error **err)
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
    if (stat(path, &st) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno,
                              "image %s not found (give an imported name, a directory, a tarball "
                              "or an OCI layout; see `sbx image ls`)",
                              source);
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
    _cleanup_free_ char *ddir = NULL;
    if (oci)
        rc = import_oci(images, real ? real : path, tag, progress, pdata, &ddir, err);
    else
        rc = import_tarball(images, real ? real : path, progress, pdata, &ddir, err);
    if (rc < 0)
        return rc;
    const char *base = strrchr(ddir, '/') + 1; /* "sha256-<hex>" */
    sbx__write_file_atomic(kp, base, strlen(base), 0644);
    if (digest)
        *digest = sbx__printf("sha256:%s", base + 7);
    *rootfs = sbx__printf("%s/rootfs", ddir);
    return *rootfs ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

int sbx__linux_image_resolve(const char *state_dir, const char *image, char **rootfs,
                             bool *none, sbx_error **err)
{
    *none = false;
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
    int rc = resolve_source(state_dir, image, NULL, NULL, rootfs, NULL, err);
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
                            sbx_linux_progress_cb progress, void *data, sbx_error **err)
{
    if (!sbx__linux_image_name_ok(name))
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid image name %s: use letters, digits, '-', '_', ':', '.' and "
                              "no '/'",
                              name ? name : "(null)");
    if (!source || !*source)
        return sbx__set_error(err, SBX_EINVAL, "an image source is required");
    _cleanup_free_ char *abs = NULL;
    if (strncmp(source, "oci:", 4) != 0 && source[0] != '/') {
        abs = realpath(source, NULL);
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
    rc = resolve_source(state_dir, source, progress, data, &rootfs, &digest, err);
    if (rc < 0)
        return rc;
    json_t *j = json_pack("{s:s, s:s, s:s, s:f}", "digest", digest ? digest : "", "rootfs",
                          rootfs, "source", source, "created", now_unix());
    _cleanup_free_ char *np = sbx__printf("%s/%s", names, name);
    int w = j && np ? write_json(np, j) : -1;
    json_decref(j);
    if (w < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot record image name %s", name);
    if (progress)
        progress("done", 1, 1, data);
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
