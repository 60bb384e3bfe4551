/*
 * docker-save archives, oci-archives, SIF and squashfs images, and stdin as
 * image sources (see image_formats.h). Everything here reads hostile bytes:
 * archive entries are taken only under names these formats use, JSON only
 * up to 4 MiB, blobs only under the digest of their bytes, and a squashfs
 * is parsed by libsquashfs in userland, its tree then written as a tar that
 * image.c's unpacker (the one every image goes through) turns into a root.
 */
#include "providers/linux/image_formats.h"

#include "image/layout.h"
#include "image/sif.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sqfs/block.h>
#include <sqfs/compressor.h>
#include <sqfs/data_reader.h>
#include <sqfs/dir_reader.h>
#include <sqfs/error.h>
#include <sqfs/id_table.h>
#include <sqfs/inode.h>
#include <sqfs/io.h>
#include <sqfs/super.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* Bounds of an archive: far above docker save's few files per layer. */
#define ARCHIVE_MAX_ENTRIES 100000
#define ARCHIVE_MAX_JSON (4u << 20)
#define ARCHIVE_MAX_IMAGES 1024
#define DEFAULT_MAX_BYTES (16ull << 30)
#define IMPORT_TAG "sbx-import"

/* <store>/tmp-<pid>-<start>-<random>: the name sbx__linux_image_gc_dir knows. */
static char *make_tmp_dir(const char *images, sbx_error **err)
{
    char hex[17];
    sbx__random_hex(hex, 8);
    char *t = sbx__printf("%s/tmp-%d-%llu-%s", images, (int)getpid(),
                          sbx__linux_proc_start(getpid()), hex);
    if (!t) {
        sbx__set_error(err, SBX_ENOMEM, "out of memory");
        return NULL;
    }
    if (mkdir(t, 0700) < 0) {
        sbx__set_errno(err, SBX_ECREATE, errno, "cannot create a directory in %s", images);
        free(t);
        return NULL;
    }
    return t;
}

static bool cancelled(const sbx_linux_image_opts *o)
{
    return o && o->cancelled && o->cancelled(o->data);
}

static uint64_t default_cap(const char *images, uint64_t max_bytes)
{
    if (max_bytes)
        return max_bytes;
    uint64_t cap = DEFAULT_MAX_BYTES;
    struct statvfs vfs;
    if (statvfs(images, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize / 2 < cap)
        cap = (uint64_t)vfs.f_bavail * vfs.f_frsize / 2;
    return cap;
}

/* --- sniffing ------------------------------------------------------------- */

static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t k = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

int sbx__linux_image_sniff(const char *path, sbx_linux_src *out, sbx_error **err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return sbx__set_errno(err, errno == ENOENT ? SBX_EINVAL : SBX_ECREATE, errno,
                              "cannot open %s", path);
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return sbx__set_error(err, SBX_EINVAL, "%s is not a regular file", path);
    *out = (sbx_linux_src){.kind = SBX_LINUX_SRC_TAR};
    uint64_t fsize = (uint64_t)st.st_size;
    uint8_t hdr[SBX_SIF_HEADER_SIZE];
    size_t n = fsize < sizeof(hdr) ? (size_t)fsize : sizeof(hdr);
    if (pread_all(fd, hdr, n, 0) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot read %s", path);
    if (n >= 4 && !memcmp(hdr, "hsqs", 4)) {
        *out = (sbx_linux_src){.kind = SBX_LINUX_SRC_SQUASHFS, .offset = 0, .size = fsize};
        return SBX_OK;
    }
    if (!sbx__sif_is(hdr, n))
        return SBX_OK;
    uint64_t need = sbx__sif_header_bytes(hdr, n, fsize);
    if (!need) /* a bad table: find_rootfs says what is wrong with it */
        need = n;
    _cleanup_free_ uint8_t *buf = malloc((size_t)need);
    if (!buf)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (pread_all(fd, buf, (size_t)need, 0) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot read %s", path);
    uint64_t off = 0, size = 0;
    int rc = sbx__sif_find_rootfs(buf, (size_t)need, fsize, &off, &size, err);
    if (rc < 0)
        return rc == SBX_ENOTSUP ? rc : SBX_EINVAL;
    *out =
        (sbx_linux_src){.kind = SBX_LINUX_SRC_SQUASHFS, .sif = true, .offset = off, .size = size};
    return SBX_OK;
}

/* --- docker save and oci-archive ------------------------------------------ */

char *sbx__linux_source_selector(char *path)
{
    for (char *c = strchr(path, ':'); c; c = strchr(c + 1, ':')) {
        *c = 0;
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
            return c + 1;
        *c = ':';
    }
    return NULL;
}

/* A file of the archive: its name there and the blob its bytes became. */
struct member {
    char *name;
    char *link; /* a symlink or hard link: the member it stands for */
    char digest[SBX_DIGEST_LEN];
    uint64_t size;
};

struct scan {
    const char *images, *path;
    const sbx_linux_image_opts *opts;
    uint64_t max_bytes, bytes;
    char *layout;
    struct member *m;
    size_t n, cap;
    char *manifest, *index; /* manifest.json, index.json */
    size_t manifest_len, index_len;
    bool oci_layout;
    /* the read side */
    int fd;
    uint64_t done, total;
    unsigned char buf[1 << 16];
};

static bool is_hex64(const char *s, size_t n)
{
    if (n != 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

enum kind { K_OTHER, K_SKIP, K_JSON, K_BLOB, K_FILE };

/*
 * Which entries a docker save archive or an oci-archive has: anything else
 * means a rootfs tarball (before the archive is known for what it is).
 * K_BLOB: blobs/sha256/<hex>, stored under that digest or refused;
 * K_FILE: docker save's <hex>.json, <hex>.tar, <hex>/layer.tar, stored under
 * the digest of their bytes.
 */
static enum kind classify(const char *name)
{
    size_t n = strlen(name);
    if (!strcmp(name, "manifest.json") || !strcmp(name, "index.json"))
        return K_JSON;
    if (!strcmp(name, "oci-layout") || !strcmp(name, "repositories") || !strcmp(name, "blobs") ||
        !strcmp(name, "blobs/sha256"))
        return K_SKIP;
    if (!strncmp(name, "blobs/sha256/", 13) && is_hex64(name + 13, n - 13))
        return K_BLOB;
    if (is_hex64(name, n))
        return K_SKIP; /* docker save's per-layer directory */
    if (n > 64 && is_hex64(name, 64) && (!strcmp(name + 64, ".json") || !strcmp(name + 64, ".tar")))
        return K_FILE;
    if (n > 65 && is_hex64(name, 64) && name[64] == '/') {
        const char *rest = name + 65;
        if (!strcmp(rest, "layer.tar") || !strcmp(rest, "json"))
            return K_FILE;
        if (!strcmp(rest, "VERSION"))
            return K_SKIP;
    }
    return K_OTHER;
}

static la_ssize_t scan_read(struct archive *a, void *data, const void **buf)
{
    struct scan *s = data;
    if (cancelled(s->opts)) {
        archive_set_error(a, ECANCELED, "cancelled");
        return -1;
    }
    ssize_t n;
    do
        n = read(s->fd, s->buf, sizeof(s->buf));
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        archive_set_error(a, errno, "read: %s", strerror(errno));
        return -1;
    }
    s->done += (uint64_t)n;
    if (s->opts && s->opts->progress)
        s->opts->progress("archive", s->done, s->total, s->opts->data);
    *buf = s->buf;
    return n;
}

static int archive_fail(struct scan *s, struct archive *a, sbx_error **err)
{
    if (cancelled(s->opts))
        return sbx__set_error(err, SBX_ECANCELED, "image import cancelled");
    return sbx__set_error(err, SBX_EINVAL, "reading %s: %s", s->path,
                          archive_error_string(a) ? archive_error_string(a) : "not an archive");
}

/* Reads a small JSON member into memory, bounded. */
static int read_json(struct scan *s, struct archive *a, struct archive_entry *e, const char *name,
                     char **out, size_t *len, sbx_error **err)
{
    int64_t sz = archive_entry_size(e);
    if (*out)
        return sbx__set_error(err, SBX_EINVAL, "%s holds %s twice", s->path, name);
    if (sz < 0 || sz > (int64_t)ARCHIVE_MAX_JSON)
        return sbx__set_error(err, SBX_EINVAL, "%s in %s is larger than %u bytes", name, s->path,
                              ARCHIVE_MAX_JSON);
    char *b = malloc((size_t)sz + 1);
    if (!b)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    la_ssize_t k = archive_read_data(a, b, (size_t)sz);
    if (k != (la_ssize_t)sz) {
        free(b);
        return k < 0 ? archive_fail(s, a, err)
                     : sbx__set_error(err, SBX_EINVAL, "%s in %s is truncated", name, s->path);
    }
    b[sz] = 0;
    *out = b;
    *len = (size_t)sz;
    return SBX_OK;
}

static struct member *add_member(struct scan *s, const char *name, sbx_error **err)
{
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 64;
        struct member *m = realloc(s->m, c * sizeof(*m));
        if (!m) {
            sbx__set_error(err, SBX_ENOMEM, "out of memory");
            return NULL;
        }
        s->m = m;
        s->cap = c;
    }
    struct member *m = &s->m[s->n];
    *m = (struct member){.name = strdup(name)};
    if (!m->name) {
        sbx__set_error(err, SBX_ENOMEM, "out of memory");
        return NULL;
    }
    s->n++;
    return m;
}

/* Streams a member into the layout as a blob (checked against `want` when given). */
static int store_blob(struct scan *s, struct archive *a, struct archive_entry *e, const char *name,
                      const char *want, sbx_error **err)
{
    sbx_blob_writer *w = NULL;
    int rc = sbx__blob_writer_begin(s->layout, want, false, &w, err);
    if (rc < 0)
        return rc;
    struct member *m = add_member(s, name, err);
    if (!m) {
        sbx__blob_writer_abort(w, false);
        return SBX_ENOMEM;
    }
    if (rc == 1) { /* the same blob twice in one archive: already here */
        snprintf(m->digest, sizeof(m->digest), "%s", want);
        m->size = (uint64_t)archive_entry_size(e);
        return SBX_OK;
    }
    for (;;) {
        const void *buf;
        size_t len;
        la_int64_t off;
        int r = archive_read_data_block(a, &buf, &len, &off);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            sbx__blob_writer_abort(w, false);
            return archive_fail(s, a, err);
        }
        s->bytes += len;
        if (s->bytes > s->max_bytes) {
            sbx__blob_writer_abort(w, false);
            return sbx__set_error(err, SBX_EINVAL,
                                  "%s holds more than %llu bytes; raise max_image_bytes (or "
                                  "`sbx image import --max-bytes`) to allow more",
                                  s->path, (unsigned long long)s->max_bytes);
        }
        rc = sbx__blob_writer_write(w, buf, len, err);
        if (rc < 0) {
            sbx__blob_writer_abort(w, false);
            return rc;
        }
    }
    m->size = sbx__blob_writer_size(w);
    rc = sbx__blob_writer_commit(w, m->digest, err);
    if (rc < 0 && want)
        return sbx__set_error(err, SBX_EINVAL,
                              "%s in %s does not match the digest its name claims (a corrupt or "
                              "tampered archive)",
                              name, s->path);
    return rc;
}

/* "./a/b" -> "a/b"; a trailing '/' goes too. */
static void tidy(char *p)
{
    while (p[0] == '.' && p[1] == '/')
        memmove(p, p + 2, strlen(p + 2) + 1);
    size_t n = strlen(p);
    while (n && p[n - 1] == '/')
        p[--n] = 0;
}

/*
 * One pass over the archive. Returns 1 at the first entry no docker save
 * archive or oci-archive has (a rootfs tarball), 0 when all were taken.
 */
static int scan_archive(struct scan *s, sbx_error **err)
{
    struct archive *a = archive_read_new();
    if (!a)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    int rc = SBX_OK;
    if (archive_read_open(a, s, NULL, scan_read, NULL) != ARCHIVE_OK) {
        /* Not a tar at all: the rootfs import says what it is not. */
        archive_read_free(a);
        return cancelled(s->opts) ? sbx__set_error(err, SBX_ECANCELED, "image import cancelled")
                                  : 1;
    }
    size_t entries = 0;
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            /* A broken first header: leave it to the rootfs import's message. */
            rc = entries == 0 && !cancelled(s->opts) ? 1 : archive_fail(s, a, err);
            break;
        }
        if (++entries > ARCHIVE_MAX_ENTRIES) {
            rc = sbx__set_error(err, SBX_EINVAL,
                                "%s has more than %d entries for an image "
                                "archive",
                                s->path, ARCHIVE_MAX_ENTRIES);
            break;
        }
        const char *raw = archive_entry_pathname(e);
        _cleanup_free_ char *name = strdup(raw ? raw : "");
        if (!name) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            break;
        }
        tidy(name);
        if (!*name || !strcmp(name, "."))
            continue;
        enum kind k = classify(name);
        bool known = s->manifest || s->oci_layout;
        /*
         * Entries not kept are still read through (and decompressed): their
         * declared sizes count against the cap too, so an archive of huge
         * skipped entries ends as soon as one would be past it.
         */
        if (k == K_SKIP || (k == K_OTHER && known)) {
            int64_t sz = archive_entry_size(e);
            s->bytes += sz > 0 ? (uint64_t)sz : 0;
            if (s->bytes > s->max_bytes) {
                rc = sbx__set_error(err, SBX_EINVAL,
                                    "%s holds more than %llu bytes; raise max_image_bytes (or "
                                    "`sbx image import --max-bytes`) to allow more",
                                    s->path, (unsigned long long)s->max_bytes);
                break;
            }
        }
        if (k == K_OTHER) {
            if (!known) {
                rc = 1;
                break;
            }
            continue; /* something newer tools add: not needed */
        }
        if (!strcmp(name, "oci-layout"))
            s->oci_layout = true;
        const char *hl = archive_entry_hardlink(e);
        mode_t type = archive_entry_filetype(e);
        if ((hl || type == AE_IFLNK) && (k == K_FILE || k == K_BLOB)) {
            /* docker save links a layer met twice to its first copy. */
            _cleanup_free_ char *t = NULL;
            if (hl) {
                t = strdup(hl);
            } else {
                const char *target = archive_entry_symlink(e);
                const char *slash = strrchr(name, '/');
                if (target && !strncmp(target, "../", 3) && slash)
                    t = strdup(target + 3); /* "<hex>/layer.tar" -> "../<hex2>/layer.tar" */
                else if (target && !slash)
                    t = strdup(target);
            }
            struct member *m = t ? add_member(s, name, err) : NULL;
            if (!m) {
                rc = t ? SBX_ENOMEM
                       : sbx__set_error(err, SBX_EINVAL, "%s: %s links outside the archive",
                                        s->path, name);
                break;
            }
            tidy(t);
            m->link = steal_pointer(&t);
            continue;
        }
        if (type != AE_IFREG || k == K_SKIP)
            continue;
        if (k == K_JSON) {
            bool man = !strcmp(name, "manifest.json");
            rc = read_json(s, a, e, name, man ? &s->manifest : &s->index,
                           man ? &s->manifest_len : &s->index_len, err);
        } else {
            char want[SBX_DIGEST_LEN];
            if (k == K_BLOB)
                snprintf(want, sizeof(want), "sha256:%s", name + 13);
            rc = store_blob(s, a, e, name, k == K_BLOB ? want : NULL, err);
        }
        if (rc < 0)
            break;
    }
    archive_read_free(a);
    if (rc == SBX_OK && !s->manifest && !(s->oci_layout && s->index))
        rc = 1;
    return rc;
}

static const struct member *find_member(const struct scan *s, const char *name, int depth)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->m[i].name, name))
            return s->m[i].link ? (depth < 8 ? find_member(s, s->m[i].link, depth + 1) : NULL)
                                : &s->m[i];
    return NULL;
}

/* A member named by manifest.json, with what is wrong when it cannot be had. */
static const struct member *named(const struct scan *s, const char *what, const char *name,
                                  sbx_error **err)
{
    if (!name || !*name || name[0] == '/' || strstr(name, "..")) {
        sbx__set_error(err, SBX_EINVAL,
                       "%s: manifest.json names %s %s, a path that leaves the archive", s->path,
                       what, name ? name : "(none)");
        return NULL;
    }
    _cleanup_free_ char *t = strdup(name);
    if (t)
        tidy(t);
    const struct member *m = t ? find_member(s, t, 0) : NULL;
    if (!m)
        sbx__set_error(err, SBX_EINVAL,
                       "%s: manifest.json names %s %s, which is not in the "
                       "archive",
                       s->path, what, name);
    return m;
}

/* True when `sel` is the reference `ref` or its tag ("name:tag" vs "tag"). */
static bool ref_matches(const char *ref, const char *sel)
{
    if (!ref || !sel)
        return false;
    if (!strcmp(ref, sel))
        return true;
    /* Docker writes docker.io/fmt/app:v1 for what its user calls fmt/app:v1. */
    static const char *const hub[] = {"docker.io/library/", "docker.io/"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(hub); i++)
        if (!strncmp(ref, hub[i], strlen(hub[i])) && !strcmp(ref + strlen(hub[i]), sel))
            return true;
    const char *c = strrchr(ref, ':');
    return c && !strchr(c, '/') && !strcmp(c + 1, sel);
}

static json_t *load_blob_json(const struct scan *s, const char *digest)
{
    _cleanup_free_ char *p = sbx__layout_blob_path(s->layout, digest);
    char *buf = NULL;
    size_t n = 0;
    struct stat st;
    if (!p || stat(p, &st) < 0 || st.st_size > (off_t)ARCHIVE_MAX_JSON ||
        sbx__read_file(p, &buf, &n) < 0)
        return NULL;
    json_t *j = json_loadb(buf, n, 0, NULL);
    free(buf);
    return j;
}

static int list_refs(json_t *arr, sbx_buf *b)
{
    return sbx__buf_printf(b, "%s", json_string_value(arr) ? json_string_value(arr) : "?");
}

/* docker save: builds an OCI manifest of the picked image over its stored blobs. */
static int docker_image(struct scan *s, const char *sel, sbx_error **err)
{
    _cleanup_json_ json_t *man = json_loadb(s->manifest, s->manifest_len, 0, NULL);
    if (!json_is_array(man) || !json_array_size(man) || json_array_size(man) > ARCHIVE_MAX_IMAGES)
        return sbx__set_error(err, SBX_EINVAL,
                              "%s: manifest.json is not a list of images (not a docker save "
                              "archive?)",
                              s->path);
    json_t *pick = NULL;
    size_t i, j;
    json_t *it, *t;
    if (!sel && json_array_size(man) > 1) {
        sbx_buf b = {0};
        json_array_foreach(man, i, it) json_array_foreach(json_object_get(it, "RepoTags"), j, t)
        {
            sbx__buf_printf(&b, "%s", b.len ? ", " : "");
            list_refs(t, &b);
        }
        int rc =
            sbx__set_error(err, SBX_EINVAL, "%s holds %zu images (%s): pick one with ARCHIVE:TAG",
                           s->path, json_array_size(man), b.data ? b.data : "untagged");
        sbx__buf_free(&b);
        return rc;
    }
    json_array_foreach(man, i, it)
    {
        if (!sel) {
            pick = it;
            break;
        }
        json_array_foreach(json_object_get(it, "RepoTags"), j,
                           t) if (ref_matches(json_string_value(t), sel)) pick = it;
        if (pick)
            break;
    }
    if (!pick)
        return sbx__set_error(err, SBX_EINVAL, "%s has no image tagged %s", s->path, sel);
    const struct member *cfg =
        named(s, "config", json_string_value(json_object_get(pick, "Config")), err);
    if (!cfg)
        return SBX_EINVAL;
    json_t *layers = json_object_get(pick, "Layers");
    if (!json_is_array(layers) || json_array_size(layers) > 1000)
        return sbx__set_error(err, SBX_EINVAL, "%s: manifest.json's Layers is not a list", s->path);
    _cleanup_json_ json_t *config = load_blob_json(s, cfg->digest);
    if (!json_is_object(config))
        return sbx__set_error(err, SBX_EINVAL, "%s: the image config %s is not JSON", s->path,
                              json_string_value(json_object_get(pick, "Config")));
    json_t *diff = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
    if (json_array_size(diff) != json_array_size(layers))
        return sbx__set_error(err, SBX_EINVAL, "%s: the config lists %zu layers, manifest.json %zu",
                              s->path, json_array_size(diff), json_array_size(layers));
    _cleanup_json_ json_t *ls = json_array();
    json_array_foreach(layers, i, it)
    {
        const char *ln = json_string_value(it);
        const struct member *m = named(s, "layer", ln, err);
        if (!m)
            return SBX_EINVAL;
        /*
         * docker save's layers are the uncompressed tars the config's
         * diff_ids name: a layer that hashes otherwise is not the image's.
         */
        const char *want = json_string_value(json_array_get(diff, i));
        if (!want || strcmp(want, m->digest) != 0)
            return sbx__set_error(err, SBX_EINVAL,
                                  "%s: layer %s is %s, not the %s its image config claims (a "
                                  "corrupt or tampered archive)",
                                  s->path, ln, m->digest, want ? want : "(none)");
        json_array_append_new(ls, json_pack("{s:s, s:s, s:I}", "mediaType",
                                            "application/vnd.oci.image.layer.v1.tar", "digest",
                                            m->digest, "size", (json_int_t)m->size));
    }
    _cleanup_json_ json_t *om =
        json_pack("{s:i, s:s, s:{s:s, s:s, s:I}, s:O}", "schemaVersion", 2, "mediaType",
                  "application/vnd.oci.image.manifest.v1+json", "config", "mediaType",
                  "application/vnd.oci.image.config.v1+json", "digest", cfg->digest, "size",
                  (json_int_t)cfg->size, "layers", ls);
    _cleanup_free_ char *text = om ? json_dumps(om, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    char d[SBX_DIGEST_LEN];
    int rc = sbx__layout_put_blob(s->layout, text, strlen(text), d, err);
    if (rc == SBX_OK)
        rc = sbx__layout_tag(s->layout, IMPORT_TAG, "application/vnd.oci.image.manifest.v1+json", d,
                             strlen(text), err);
    return rc;
}

/* The names an oci-archive's index entry answers to. */
static bool oci_matches(json_t *m, const char *sel)
{
    json_t *an = json_object_get(m, "annotations");
    return ref_matches(json_string_value(json_object_get(an, "org.opencontainers.image.ref.name")),
                       sel) ||
           ref_matches(json_string_value(json_object_get(an, "io.containerd.image.name")), sel);
}

/* oci-archive: tags the picked manifest in the layout whose blobs were stored. */
static int oci_image(struct scan *s, const char *sel, sbx_error **err)
{
    _cleanup_json_ json_t *index = json_loadb(s->index, s->index_len, 0, NULL);
    json_t *mans = json_object_get(index, "manifests");
    if (!json_is_array(mans) || !json_array_size(mans) ||
        json_array_size(mans) > ARCHIVE_MAX_IMAGES)
        return sbx__set_error(err, SBX_EINVAL, "%s: index.json lists no manifests", s->path);
    if (!sel && json_array_size(mans) > 1) {
        sbx_buf b = {0};
        size_t i;
        json_t *m;
        json_array_foreach(mans, i, m)
        {
            const char *r = json_string_value(json_object_get(json_object_get(m, "annotations"),
                                                              "org.opencontainers.image.ref.name"));
            sbx__buf_printf(&b, "%s%s", b.len ? ", " : "", r ? r : "untagged");
        }
        int rc =
            sbx__set_error(err, SBX_EINVAL, "%s holds %zu images (%s): pick one with ARCHIVE:TAG",
                           s->path, json_array_size(mans), b.data ? b.data : "");
        sbx__buf_free(&b);
        return rc;
    }
    json_t *pick = NULL;
    size_t i;
    json_t *m;
    json_array_foreach(mans, i, m) if (!sel || oci_matches(m, sel))
    {
        pick = m;
        break;
    }
    if (!pick)
        return sbx__set_error(err, SBX_EINVAL, "%s has no image tagged %s", s->path, sel);
    const char *d = json_string_value(json_object_get(pick, "digest"));
    const char *mt = json_string_value(json_object_get(pick, "mediaType"));
    json_int_t size = json_integer_value(json_object_get(pick, "size"));
    if (!sbx__digest_ok(d) || !sbx__layout_has_blob(s->layout, d))
        return sbx__set_error(err, SBX_EINVAL,
                              "%s: index.json names manifest %s, which is not "
                              "in the archive",
                              s->path, d ? d : "(none)");
    /* Every blob the manifest names must be here: say which is missing now, not mid-unpack. */
    _cleanup_json_ json_t *man = load_blob_json(s, d);
    json_t *layers = json_object_get(man, "layers");
    json_array_foreach(layers, i, m)
    {
        const char *ld = json_string_value(json_object_get(m, "digest"));
        if (!sbx__digest_ok(ld) || !sbx__layout_has_blob(s->layout, ld))
            return sbx__set_error(err, SBX_EINVAL,
                                  "%s: the manifest names layer %s, which is "
                                  "not in the archive",
                                  s->path, ld ? ld : "(none)");
    }
    return sbx__layout_tag(s->layout, IMPORT_TAG,
                           mt ? mt : "application/vnd.oci.image.manifest.v1+json", d,
                           (uint64_t)size, err);
}

int sbx__linux_archive_to_layout(const char *images, const char *path, const char *sel,
                                 const sbx_linux_image_opts *opts, uint64_t max_bytes,
                                 char **layout, char **tag, sbx_error **err)
{
    struct scan *s = calloc(1, sizeof(*s));
    if (!s)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    s->images = images;
    s->path = path;
    s->opts = opts;
    s->max_bytes = default_cap(images, max_bytes);
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc;
    struct stat st;
    if (s->fd < 0 || fstat(s->fd, &st) < 0) {
        rc = sbx__set_errno(err, SBX_EINVAL, errno, "cannot open %s", path);
        goto out;
    }
    s->total = (uint64_t)st.st_size;
    s->layout = make_tmp_dir(images, err);
    if (!s->layout) {
        rc = SBX_ECREATE;
        goto out;
    }
    rc = sbx__layout_init(s->layout, err);
    if (rc == SBX_OK)
        rc = scan_archive(s, err);
    if (rc == SBX_OK)
        rc = s->manifest ? docker_image(s, sel, err) : oci_image(s, sel, err);
    if (rc == SBX_OK) {
        *tag = strdup(IMPORT_TAG);
        if (!*tag)
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (rc == SBX_OK) {
        *layout = steal_pointer(&s->layout);
    }
out:
    if (s->layout)
        sbx__rm_rf(s->layout);
    free(s->layout);
    if (s->fd >= 0)
        close(s->fd);
    for (size_t i = 0; i < s->n; i++) {
        free(s->m[i].name);
        free(s->m[i].link);
    }
    free(s->m);
    free(s->manifest);
    free(s->index);
    free(s);
    return rc;
}

/* --- squashfs -------------------------------------------------------------- */

/* The squashfs's bytes: [off, off+size) of the file, and never past it. */
struct part_file {
    sqfs_file_t base;
    int fd;
    uint64_t off, size;
};

static int part_read_at(sqfs_file_t *f, sqfs_u64 offset, void *buffer, size_t size)
{
    struct part_file *p = (struct part_file *)f;
    if (offset > p->size || size > p->size - offset)
        return SQFS_ERROR_OUT_OF_BOUNDS;
    return pread_all(p->fd, buffer, size, p->off + offset) < 0 ? SQFS_ERROR_IO : 0;
}

static int part_write_at(sqfs_file_t *f, sqfs_u64 offset, const void *buffer, size_t size)
{
    (void)f, (void)offset, (void)buffer, (void)size;
    return SQFS_ERROR_IO;
}

static sqfs_u64 part_get_size(const sqfs_file_t *f)
{
    return ((const struct part_file *)f)->size;
}

static int part_truncate(sqfs_file_t *f, sqfs_u64 size)
{
    (void)f, (void)size;
    return SQFS_ERROR_IO;
}

static void part_destroy(sqfs_object_t *o)
{
    (void)o; /* embedded in sbx_sqfs_stream */
}

struct sbx_sqfs_stream {
    struct part_file file;
    sqfs_super_t super;
    sqfs_compressor_t *cmp;
    sqfs_id_table_t *ids;
    sqfs_dir_reader_t *dirs;
    sqfs_data_reader_t *data;
    sqfs_tree_node_t *root;
    int out; /* the write end */
    pthread_t thread;
    /* Files with more than one name: inode number -> the first name written (a tar hard link
     * after). */
    struct link_seen {
        uint32_t ino;
        char *path;
    } * links;
    size_t n_links, cap_links;
    bool started;
    bool reader_gone;
    int rc;
    char msg[256];
    unsigned char buf[1 << 16];
};

static const char *sqfs_why(int e)
{
    switch (e) {
    case SQFS_ERROR_ALLOC:
        return "out of memory";
    case SQFS_ERROR_IO:
        return "a read error";
    case SQFS_ERROR_COMPRESSOR:
        return "data that does not decompress";
    case SQFS_ERROR_CORRUPTED:
        return "a corrupt structure";
    case SQFS_ERROR_UNSUPPORTED:
        return "an unsupported feature";
    case SQFS_ERROR_OVERFLOW:
        return "a size that overflows";
    case SQFS_ERROR_OUT_OF_BOUNDS:
        return "an offset past its end (truncated?)";
    case SFQS_ERROR_SUPER_MAGIC:
        return "no squashfs superblock";
    case SFQS_ERROR_SUPER_VERSION:
        return "an unsupported squashfs version";
    case SQFS_ERROR_SUPER_BLOCK_SIZE:
        return "a bad block size";
    case SQFS_ERROR_LINK_LOOP:
        return "a directory loop";
    default:
        return "an error";
    }
}

static void stream_free(sbx_sqfs_stream *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->cap_links; i++)
        free(s->links[i].path);
    free(s->links);
    if (s->root)
        sqfs_dir_tree_destroy(s->root);
    sqfs_destroy(s->data);
    sqfs_destroy(s->dirs);
    sqfs_destroy(s->ids);
    sqfs_destroy(s->cmp);
    if (s->file.fd >= 0)
        close(s->file.fd);
    if (s->out >= 0)
        close(s->out);
    free(s);
}

static la_ssize_t sock_write(struct archive *a, void *data, const void *buf, size_t n)
{
    sbx_sqfs_stream *s = data;
    size_t done = 0;
    while (done < n) {
        /* MSG_NOSIGNAL: a reader that stopped (an error, a cancel) is EPIPE, not SIGPIPE. */
        ssize_t k = send(s->out, (const char *)buf + done, n - done, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            /* The reader stopped (its own error, or a cancel): its error is the one to tell. */
            s->reader_gone = errno == EPIPE || errno == ECONNRESET;
            archive_set_error(a, errno, "%s", strerror(errno));
            return -1;
        }
        done += (size_t)k;
    }
    return (la_ssize_t)n;
}

static int fail(sbx_sqfs_stream *s, const char *fmt, const char *a, const char *b)
{
    snprintf(s->msg, sizeof(s->msg), fmt, a, b);
    return -1;
}

/*
 * The first name of a file with several (an extended file inode, nlink > 1),
 * or NULL after recording `path` as its first. An open-addressing table of
 * inode numbers (0 is never one: squashfs numbers them from 1).
 */
static const char *link_first(sbx_sqfs_stream *s, uint32_t ino, const char *path, bool *oom)
{
    if (ino == 0)
        return NULL;
    if ((s->n_links + 1) * 2 > s->cap_links) {
        size_t cap = s->cap_links ? s->cap_links * 2 : 256;
        struct link_seen *t = calloc(cap, sizeof(*t));
        if (!t) {
            *oom = true;
            return NULL;
        }
        for (size_t i = 0; i < s->cap_links; i++)
            if (s->links[i].path) {
                size_t j = s->links[i].ino & (cap - 1);
                while (t[j].path)
                    j = (j + 1) & (cap - 1);
                t[j] = s->links[i];
            }
        free(s->links);
        s->links = t;
        s->cap_links = cap;
    }
    size_t j = ino & (s->cap_links - 1);
    for (; s->links[j].path; j = (j + 1) & (s->cap_links - 1))
        if (s->links[j].ino == ino)
            return s->links[j].path;
    s->links[j].path = strdup(path);
    if (!s->links[j].path) {
        *oom = true;
        return NULL;
    }
    s->links[j].ino = ino;
    s->n_links++;
    return NULL;
}

static int write_node(sbx_sqfs_stream *s, struct archive *a, const sqfs_tree_node_t *n,
                      const char *path, int depth)
{
    if (depth > 256)
        return fail(s, "the squashfs tree is deeper than 256 levels (at %s)%s", path, "");
    const sqfs_inode_generic_t *in = n->inode;
    mode_t type;
    switch (in->base.type) {
    case SQFS_INODE_DIR:
    case SQFS_INODE_EXT_DIR:
        type = AE_IFDIR;
        break;
    case SQFS_INODE_FILE:
    case SQFS_INODE_EXT_FILE:
        type = AE_IFREG;
        break;
    case SQFS_INODE_SLINK:
    case SQFS_INODE_EXT_SLINK:
        type = AE_IFLNK;
        break;
    case SQFS_INODE_BDEV:
    case SQFS_INODE_EXT_BDEV:
        type = AE_IFBLK;
        break;
    case SQFS_INODE_CDEV:
    case SQFS_INODE_EXT_CDEV:
        type = AE_IFCHR;
        break;
    case SQFS_INODE_FIFO:
    case SQFS_INODE_EXT_FIFO:
        type = AE_IFIFO;
        break;
    default:
        type = 0; /* sockets: not in an image */
    }
    if (depth > 0 && type) {
        struct archive_entry *e = archive_entry_new();
        if (!e)
            return fail(s, "out of memory%s%s", "", "");
        archive_entry_set_pathname(e, path);
        archive_entry_set_filetype(e, type);
        archive_entry_set_perm(e, in->base.mode & 07777);
        archive_entry_set_uid(e, n->uid);
        archive_entry_set_gid(e, n->gid);
        archive_entry_set_mtime(e, in->base.mod_time, 0);
        sqfs_u64 size = 0;
        const char *first = NULL;
        bool oom = false;
        if (type == AE_IFREG && in->base.type == SQFS_INODE_EXT_FILE && in->data.file_ext.nlink > 1)
            first = link_first(s, in->base.inode_number, path, &oom);
        if (oom) {
            archive_entry_free(e);
            return fail(s, "out of memory%s%s", "", "");
        }
        if (first) {
            archive_entry_set_hardlink(e, first); /* no data: the unpacker links it */
            archive_entry_set_size(e, 0);
        } else if (type == AE_IFREG) {
            sqfs_inode_get_file_size(in, &size);
            archive_entry_set_size(e, (la_int64_t)size);
        } else if (type == AE_IFLNK) {
            uint32_t len = in->base.type == SQFS_INODE_SLINK ? in->data.slink.target_size
                                                             : in->data.slink_ext.target_size;
            char target[4097];
            if (len == 0 || len > 4096) {
                archive_entry_free(e);
                return fail(s, "the squashfs link %s has a target of a bad size%s", path, "");
            }
            memcpy(target, in->extra, len);
            target[len] = 0;
            archive_entry_set_symlink(e, target);
        } else if (type == AE_IFBLK || type == AE_IFCHR) {
            uint32_t dev = in->base.type == SQFS_INODE_BDEV || in->base.type == SQFS_INODE_CDEV
                               ? in->data.dev.devno
                               : in->data.dev_ext.devno;
            archive_entry_set_rdev(e, dev);
        }
        int r = archive_write_header(a, e);
        archive_entry_free(e);
        if (r < ARCHIVE_WARN)
            return fail(s, "writing %s: %s", path, archive_error_string(a));
        for (sqfs_u64 off = 0; off < size;) {
            sqfs_u32 want = size - off < sizeof(s->buf) ? (sqfs_u32)(size - off) : sizeof(s->buf);
            sqfs_s32 got = sqfs_data_reader_read(s->data, in, off, s->buf, want);
            if (got <= 0)
                return fail(s, "reading %s from the squashfs: %s", path,
                            got < 0 ? sqfs_why(got) : "a short file");
            if (archive_write_data(a, s->buf, (size_t)got) < 0)
                return fail(s, "writing %s: %s", path, archive_error_string(a));
            off += (sqfs_u64)got;
        }
    }
    for (const sqfs_tree_node_t *c = n->children; c; c = c->next) {
        _cleanup_free_ char *cp = sbx__printf("%s/%s", path, (const char *)c->name);
        if (!cp)
            return fail(s, "out of memory%s%s", "", "");
        if (write_node(s, a, c, cp, depth + 1) < 0)
            return -1;
    }
    return 0;
}

static void *stream_main(void *data)
{
    sbx_sqfs_stream *s = data;
    struct archive *a = archive_write_new();
    if (!a || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK ||
        archive_write_open(a, s, NULL, sock_write, NULL) != ARCHIVE_OK) {
        s->rc = fail(s, "cannot start the tar stream%s%s", "", "");
    } else {
        s->rc = write_node(s, a, s->root, ".", 0);
        if (s->rc == 0 && archive_write_close(a) != ARCHIVE_OK)
            s->rc = fail(s, "finishing the tar stream: %s%s", archive_error_string(a), "");
    }
    if (a)
        archive_write_free(a);
    /* The reader sees EOF: a complete stream, or a truncated one plus our error. */
    close(s->out);
    s->out = -1;
    return NULL;
}

/*
 * What libsquashfs allocates from the superblock's counts before it reads
 * what they count: the fragment table (16 bytes an entry) is malloc'd whole
 * from fragment_entry_count, so a 100-byte image can ask for 64 GiB. An image
 * of more than SQFS_MAX_INODES files is refused (a large distribution image
 * holds about 500,000), and a count the bytes cannot hold is corrupt: each
 * fragment block holds the tail of at least one file, and the table's block
 * index must lie inside the image.
 */
#define SQFS_MAX_INODES (1u << 22)
#define SQFS_MAX_ENTRIES (1u << 23) /* names: files may have several (hard links) */
/* The tree holds an inode per name, a file's with its block list: 512 MiB of them at most. */
#define SQFS_MAX_TREE_BYTES ((uint64_t)512 << 20)

static const char *sqfs_super_bad(const sqfs_super_t *sb, uint64_t size)
{
    if (sb->inode_count > SQFS_MAX_INODES)
        return "more inodes than sbx imports (4194304)";
    if (sb->bytes_used > size)
        return "a size past the end of its bytes";
    if (!(sb->flags & SQFS_FLAG_NO_FRAGMENTS) && sb->fragment_entry_count > 0 &&
        sb->fragment_table_start != UINT64_MAX) {
        if (sb->fragment_entry_count > sb->inode_count)
            return "more fragments than files";
        uint64_t blocks = ((uint64_t)sb->fragment_entry_count * 16 + SQFS_META_BLOCK_SIZE - 1) /
                          SQFS_META_BLOCK_SIZE;
        if (sb->fragment_table_start > size || blocks * 8 > size - sb->fragment_table_start)
            return "a fragment table past its end";
    }
    return NULL;
}

/*
 * Walks the directories once before libsquashfs builds the whole tree: a
 * directory has one name in squashfs, so a directory inode listed twice is
 * refused (else a chain of directories each listing the next twice makes a
 * tree of 2^depth nodes from a few hundred bytes), as is an inode number
 * past the count, more names than SQFS_MAX_ENTRIES and more inode bytes than
 * SQFS_MAX_TREE_BYTES (a file's block list is sized by its declared size, a
 * hard link repeats it). Directories still to
 * visit are a stack of their inodes, each pushed once (the bitmap).
 */
static int sqfs_walk_check(sbx_sqfs_stream *s, const char **why)
{
    uint32_t count = s->super.inode_count;
    uint8_t *seen = calloc((size_t)count / 8 + 1, 1);
    sqfs_inode_generic_t **stack = NULL;
    size_t n = 0, cap = 0, names = 0;
    uint64_t bytes = 0;
    int e = 0;
    *why = NULL;
    if (!seen)
        return SQFS_ERROR_ALLOC;
    sqfs_inode_generic_t *root = NULL;
    if ((e = sqfs_dir_reader_get_root_inode(s->dirs, &root)) != 0)
        goto out;
    stack = malloc(sizeof(*stack) * 64);
    if (!stack) {
        free(root);
        e = SQFS_ERROR_ALLOC;
        goto out;
    }
    cap = 64;
    stack[n++] = root;
    while (n > 0 && !e && !*why) {
        sqfs_inode_generic_t *dir = stack[--n];
        uint32_t ino = dir->base.inode_number;
        if (ino == 0 || ino > count) {
            *why = "an inode number past its count";
        } else if (seen[ino / 8] & (1u << (ino % 8))) {
            *why = "a directory listed twice";
        } else {
            seen[ino / 8] |= (uint8_t)(1u << (ino % 8));
            e = sqfs_dir_reader_open_dir(s->dirs, dir, SQFS_DIR_OPEN_NO_DOT_ENTRIES);
        }
        free(dir);
        while (!e && !*why) {
            sqfs_dir_entry_t *ent = NULL;
            int r = sqfs_dir_reader_read(s->dirs, &ent);
            if (r > 0)
                break;
            if (r < 0) {
                e = r;
                break;
            }
            free(ent);
            if (++names > SQFS_MAX_ENTRIES) {
                *why = "more names than sbx imports (8388608)";
                break;
            }
            sqfs_inode_generic_t *in = NULL;
            if ((e = sqfs_dir_reader_get_inode(s->dirs, &in)) != 0)
                break;
            bytes += sizeof(*in) + in->payload_bytes_available;
            if (bytes > SQFS_MAX_TREE_BYTES) {
                free(in);
                *why = "a tree larger than sbx imports (512 MiB of inodes)";
                break;
            }
            if (in->base.type != SQFS_INODE_DIR && in->base.type != SQFS_INODE_EXT_DIR) {
                free(in);
                continue;
            }
            if (n == cap) {
                sqfs_inode_generic_t **t = realloc(stack, sizeof(*stack) * cap * 2);
                if (!t) {
                    free(in);
                    e = SQFS_ERROR_ALLOC;
                    break;
                }
                stack = t;
                cap *= 2;
            }
            stack[n++] = in;
        }
    }
out:
    while (n > 0)
        free(stack[--n]);
    free(stack);
    free(seen);
    return e;
}

int sbx__linux_sqfs_stream_start(const char *path, uint64_t offset, uint64_t size,
                                 sbx_sqfs_stream **out, int *fd, sbx_error **err)
{
    sbx_sqfs_stream *s = calloc(1, sizeof(*s));
    if (!s)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    s->out = -1;
    s->file = (struct part_file){
        .base = {.base = {.destroy = part_destroy},
                 .read_at = part_read_at,
                 .write_at = part_write_at,
                 .get_size = part_get_size,
                 .truncate = part_truncate},
        .fd = open(path, O_RDONLY | O_CLOEXEC),
        .off = offset,
        .size = size,
    };
    int rc = SBX_OK, e = 0;
    const char *step = "";
    if (s->file.fd < 0) {
        rc = sbx__set_errno(err, SBX_EINVAL, errno, "cannot open %s", path);
        goto fail;
    }
    sqfs_compressor_config_t cfg;
    const char *why = NULL;
    if ((e = sqfs_super_read(&s->super, &s->file.base)) != 0) {
        step = "its superblock";
        goto bad;
    }
    if ((why = sqfs_super_bad(&s->super, size)) != NULL) {
        step = "its superblock";
        goto refused;
    }
    if ((e = sqfs_compressor_config_init(&cfg, s->super.compression_id, s->super.block_size,
                                         SQFS_COMP_FLAG_UNCOMPRESS)) != 0 ||
        (e = sqfs_compressor_create(&cfg, &s->cmp)) != 0) {
        step = "its compressor";
        goto bad;
    }
    s->ids = sqfs_id_table_create(0);
    s->dirs = sqfs_dir_reader_create(&s->super, s->cmp, &s->file.base, 0);
    s->data = sqfs_data_reader_create(&s->file.base, s->super.block_size, s->cmp, 0);
    if (!s->ids || !s->dirs || !s->data) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto fail;
    }
    if ((e = sqfs_id_table_read(s->ids, &s->file.base, &s->super, s->cmp)) != 0) {
        step = "its id table";
        goto bad;
    }
    if ((e = sqfs_data_reader_load_fragment_table(s->data, &s->super)) != 0) {
        step = "its fragment table";
        goto bad;
    }
    if ((e = sqfs_walk_check(s, &why)) != 0 || why) {
        step = "its directories";
        if (why)
            goto refused;
        goto bad;
    }
    /* The whole tree, read and checked (loops, names) before a byte is streamed. */
    if ((e = sqfs_dir_reader_get_full_hierarchy(s->dirs, s->ids, NULL, SQFS_TREE_NO_SOCKETS,
                                                &s->root)) != 0) {
        step = "its directory tree";
        goto bad;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        rc = sbx__set_errno(err, SBX_ECREATE, errno, "socketpair");
        goto fail;
    }
    s->out = sv[1];
    if ((e = pthread_create(&s->thread, NULL, stream_main, s)) != 0) {
        close(sv[0]);
        rc = sbx__set_errno(err, SBX_ECREATE, e, "cannot start a thread");
        goto fail;
    }
    s->started = true;
    *fd = sv[0];
    *out = s;
    return SBX_OK;
bad:
    why = sqfs_why(e);
refused:
    rc = sbx__set_error(err, SBX_EINVAL,
                        "%s: the squashfs (at offset %llu, %llu bytes) cannot "
                        "be read: %s in %s",
                        path, (unsigned long long)offset, (unsigned long long)size, why, step);
fail:
    stream_free(s);
    return rc;
}

int sbx__linux_sqfs_stream_end(sbx_sqfs_stream *s, sbx_error **err)
{
    if (!s)
        return SBX_OK;
    if (s->started)
        pthread_join(s->thread, NULL);
    int rc = s->rc < 0 && !s->reader_gone ? sbx__set_error(err, SBX_EINVAL, "%s", s->msg) : SBX_OK;
    stream_free(s);
    return rc;
}

/* --- stdin ----------------------------------------------------------------- */

int sbx__linux_spool_stdin(const char *images, const sbx_linux_image_opts *opts, uint64_t max_bytes,
                           char **dir, char **file, sbx_error **err)
{
    uint64_t cap = default_cap(images, max_bytes);
    _cleanup_free_ char *t = make_tmp_dir(images, err);
    if (!t)
        return SBX_ECREATE;
    _cleanup_free_ char *f = sbx__printf("%s/stdin", t);
    _cleanup_close_ int out = f ? open(f, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    _cleanup_free_ char *buf = NULL;
    int rc = SBX_OK;
    if (out < 0) {
        rc = f ? sbx__set_errno(err, SBX_ECREATE, errno, "cannot create %s", f)
               : sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto fail;
    }
    struct stat st;
    if (fstat(0, &st) == 0 && isatty(0)) {
        rc = sbx__set_error(err, SBX_EINVAL,
                            "stdin is a terminal: pipe an image into it "
                            "(`docker save IMAGE | sbx image import NAME -`)");
        goto fail;
    }
    uint64_t total = 0;
    if (!(buf = malloc(1 << 16))) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto fail;
    }
    for (;;) {
        if (cancelled(opts)) {
            rc = sbx__set_error(err, SBX_ECANCELED, "image import cancelled");
            goto fail;
        }
        /* Waits in slices, so a cancel is seen while the writer is slow. */
        struct pollfd p = {.fd = 0, .events = POLLIN};
        int pr = poll(&p, 1, 200);
        if (pr < 0 && errno != EINTR) {
            rc = sbx__set_errno(err, SBX_EIO, errno, "reading stdin");
            goto fail;
        }
        if (pr <= 0)
            continue;
        ssize_t n = read(0, buf, 1 << 16);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0) {
            rc = sbx__set_errno(err, SBX_EIO, errno, "reading stdin");
            goto fail;
        }
        if (n == 0)
            break;
        total += (uint64_t)n;
        if (total > cap) {
            rc = sbx__set_error(err, SBX_EINVAL,
                                "stdin holds more than %llu bytes; raise max_image_bytes (or "
                                "`sbx image import --max-bytes`) to allow more",
                                (unsigned long long)cap);
            goto fail;
        }
        for (ssize_t w = 0; w < n;) {
            ssize_t k = write(out, buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                rc = sbx__set_errno(err, SBX_EIO, errno, "writing %s", f);
                goto fail;
            }
            w += k;
        }
        if (opts && opts->progress)
            opts->progress("stdin", total, 0, opts->data);
    }
    if (total == 0) {
        rc = sbx__set_error(err, SBX_EINVAL, "stdin was empty: no image to import");
        goto fail;
    }
    *dir = steal_pointer(&t);
    *file = steal_pointer(&f);
    return SBX_OK;
fail:
    sbx__rm_rf(t);
    return rc;
}
