/*
 * Writing an OCI image layout: blobs that appear only under the digest of
 * their bytes, and an index.json updated under a lock. See layout.h.
 */
#include "image/layout.h"

#include <fcntl.h>
#include <inttypes.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>

/* index.json is read back whole: a layout's index beyond this is not ours. */
#define INDEX_MAX_BYTES (4u << 20)

bool sbx__digest_ok(const char *d)
{
    if (!d || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + 64)
        return false;
    for (const char *p = d + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

int sbx__layout_init(const char *dir, sbx_error **err)
{
    _cleanup_free_ char *blobs = sbx__printf("%s/blobs/sha256", dir);
    _cleanup_free_ char *marker = sbx__printf("%s/oci-layout", dir);
    if (!blobs || !marker)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx__mkdir_p(blobs, 0700) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot create the OCI layout %s", dir);
    struct stat st;
    if (lstat(marker, &st) == 0)
        return S_ISREG(st.st_mode) ? SBX_OK
                                   : sbx__set_error(err, SBX_EIO,
                                                    "%s is not a regular file: remove it", marker);
    static const char body[] = "{\"imageLayoutVersion\":\"1.0.0\"}\n";
    if (sbx__write_file_atomic(marker, body, sizeof(body) - 1, 0600) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot write %s", marker);
    return SBX_OK;
}

char *sbx__layout_blob_path(const char *dir, const char *digest)
{
    if (!sbx__digest_ok(digest))
        return NULL;
    return sbx__printf("%s/blobs/sha256/%s", dir, digest + 7);
}

bool sbx__layout_has_blob(const char *dir, const char *digest)
{
    _cleanup_free_ char *p = sbx__layout_blob_path(dir, digest);
    struct stat st;
    return p && lstat(p, &st) == 0 && S_ISREG(st.st_mode);
}

struct sbx_blob_writer {
    char *dir;
    char *partial; /* where the bytes go */
    char want[SBX_DIGEST_LEN];
    int fd;
    uint64_t size;
    struct sha256_ctx sha;
};

static void writer_free(sbx_blob_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd); /* also drops the lock */
    free(w->dir);
    free(w->partial);
    free(w);
}

/* Hashes what an earlier writer left in the partial file, to continue after it. */
static int rehash(sbx_blob_writer *w, sbx_error **err)
{
    char buf[1 << 16];
    for (;;) {
        ssize_t n = read(w->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "cannot read %s", w->partial);
        if (n == 0)
            return SBX_OK;
        sha256_update(&w->sha, (size_t)n, (const uint8_t *)buf);
        w->size += (uint64_t)n;
    }
}

int sbx__blob_writer_begin(const char *dir, const char *want, bool resume, sbx_blob_writer **out,
                           sbx_error **err)
{
    *out = NULL;
    if (want && !sbx__digest_ok(want))
        return sbx__set_error(err, SBX_EINVAL, "bad blob digest %s (want sha256:<64 hex>)", want);
    if (want && sbx__layout_has_blob(dir, want))
        return 1;
    sbx_blob_writer *w = calloc(1, sizeof(*w));
    if (!w)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    w->fd = -1;
    sha256_init(&w->sha);
    w->dir = strdup(dir);
    if (want) {
        snprintf(w->want, sizeof(w->want), "%s", want);
        w->partial = sbx__printf("%s/blobs/sha256/%s.partial", dir, want + 7);
    } else {
        char hex[17];
        sbx__random_hex(hex, 8);
        w->partial = sbx__printf("%s/blobs/sha256/tmp-%d-%s.partial", dir, (int)getpid(), hex);
    }
    if (!w->dir || !w->partial) {
        writer_free(w);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    struct stat st;
    for (int tries = 0;; tries++) {
        /* Never through a link someone planted at the partial's name. */
        w->fd = open(w->partial,
                     O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (want ? 0 : O_EXCL), 0600);
        if (w->fd < 0) {
            int rc = sbx__set_errno(err, SBX_EIO, errno, "cannot create %s", w->partial);
            writer_free(w);
            return rc;
        }
        if (flock(w->fd, LOCK_EX) < 0 || fstat(w->fd, &st) < 0 || !S_ISREG(st.st_mode)) {
            int rc = sbx__set_errno(err, SBX_EIO, errno, "cannot lock %s", w->partial);
            writer_free(w);
            return rc;
        }
        /*
         * The lock is on the file, the name may have moved on while this
         * waited: the writer before removed it (a refused blob) or a sweep
         * of abandoned partials did. Bytes written to an unlinked file are
         * lost, so take the lock again on what the name holds now.
         */
        struct stat now;
        if (lstat(w->partial, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
            break;
        close(w->fd);
        w->fd = -1;
        if (tries == 16) {
            writer_free(w);
            return sbx__set_error(err, SBX_EIO, "%s keeps being removed while sbx waits for it",
                                  want ? want : "a blob");
        }
    }
    /*
     * Another writer finished it while this one waited for the lock: the
     * partial this open made again goes (unless a third writer's is there now).
     */
    if (want && sbx__layout_has_blob(dir, want)) {
        struct stat now;
        if (lstat(w->partial, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
            unlink(w->partial);
        writer_free(w);
        return 1;
    }
    if (resume) {
        int rc = rehash(w, err);
        if (rc < 0) {
            writer_free(w);
            return rc;
        }
    } else if (ftruncate(w->fd, 0) < 0) {
        int rc = sbx__set_errno(err, SBX_EIO, errno, "cannot truncate %s", w->partial);
        writer_free(w);
        return rc;
    }
    *out = w;
    return SBX_OK;
}

int sbx__blob_writer_write(sbx_blob_writer *w, const void *buf, size_t n, sbx_error **err)
{
    const char *p = buf;
    size_t left = n;
    while (left) {
        ssize_t k = write(w->fd, p, left);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "cannot write %s", w->partial);
        p += k;
        left -= (size_t)k;
    }
    sha256_update(&w->sha, n, buf);
    w->size += n;
    return SBX_OK;
}

uint64_t sbx__blob_writer_size(const sbx_blob_writer *w) { return w->size; }

int sbx__blob_writer_commit(sbx_blob_writer *w, char digest[SBX_DIGEST_LEN], sbx_error **err)
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&w->sha, sizeof(d), d);
    char got[SBX_DIGEST_LEN] = "sha256:";
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(got + 7 + 2 * i, 3, "%02x", d[i]);
    int rc = SBX_OK;
    if (w->want[0] && strcmp(got, w->want) != 0) {
        rc = sbx__set_error(err, SBX_EIO,
                            "blob %s does not match its digest (its %" PRIu64
                            " bytes hash to %s): a corrupt or tampered source",
                            w->want, w->size, got);
        unlink(w->partial);
        writer_free(w);
        return rc;
    }
    _cleanup_free_ char *final = sbx__layout_blob_path(w->dir, got);
    if (!final)
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    else if (fsync(w->fd) < 0 || rename(w->partial, final) < 0)
        rc = sbx__set_errno(err, SBX_EIO, errno, "cannot store blob %s", got);
    if (rc < 0)
        unlink(w->partial);
    else if (digest)
        memcpy(digest, got, SBX_DIGEST_LEN);
    writer_free(w);
    return rc;
}

void sbx__blob_writer_abort(sbx_blob_writer *w, bool keep)
{
    if (!w)
        return;
    if (!keep || !w->want[0])
        unlink(w->partial);
    writer_free(w);
}

int sbx__layout_put_blob(const char *dir, const void *data, size_t n, char digest[SBX_DIGEST_LEN],
                         sbx_error **err)
{
    sbx_blob_writer *w = NULL;
    int rc = sbx__blob_writer_begin(dir, NULL, false, &w, err);
    if (rc < 0)
        return rc;
    rc = sbx__blob_writer_write(w, data, n, err);
    if (rc < 0) {
        sbx__blob_writer_abort(w, false);
        return rc;
    }
    return sbx__blob_writer_commit(w, digest, err);
}

int sbx__layout_tag(const char *dir, const char *ref_name, const char *media_type,
                    const char *digest, uint64_t size, sbx_error **err)
{
    if (!sbx__digest_ok(digest))
        return sbx__set_error(err, SBX_EINVAL, "bad manifest digest %s", digest ? digest : "");
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0 || flock(dfd, LOCK_EX) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot lock the OCI layout %s", dir);
    _cleanup_free_ char *ip = sbx__printf("%s/index.json", dir);
    if (!ip)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_json_ json_t *index = NULL;
    struct stat st;
    if (lstat(ip, &st) == 0) {
        if (!S_ISREG(st.st_mode) || st.st_size > INDEX_MAX_BYTES)
            return sbx__set_error(err, SBX_EIO,
                                  "%s is not a regular file of at most %u bytes: remove it", ip,
                                  INDEX_MAX_BYTES);
        json_error_t je;
        index = json_load_file(ip, JSON_REJECT_DUPLICATES, &je);
        if (!index || !json_is_array(json_object_get(index, "manifests")))
            return sbx__set_error(err, SBX_EIO, "%s is not an OCI index: remove it", ip);
    } else {
        index = json_pack("{s:i, s:[]}", "schemaVersion", 2, "manifests");
    }
    json_t *mans = json_object_get(index, "manifests");
    if (!mans)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /* The name points at one manifest: drop what it named before. */
    for (size_t i = json_array_size(mans); i-- > 0;) {
        const char *r = json_string_value(json_object_get(
            json_object_get(json_array_get(mans, i), "annotations"),
            "org.opencontainers.image.ref.name"));
        if (r && !strcmp(r, ref_name))
            json_array_remove(mans, i);
    }
    json_t *m = json_pack("{s:s, s:s, s:I, s:{s:s}}", "mediaType", media_type, "digest", digest,
                          "size", (json_int_t)size, "annotations",
                          "org.opencontainers.image.ref.name", ref_name);
    if (!m || json_array_append_new(mans, m) < 0)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_free_ char *text = json_dumps(index, JSON_COMPACT);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx__write_file_atomic(ip, text, strlen(text), 0600) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot write %s", ip);
    return SBX_OK;
}
