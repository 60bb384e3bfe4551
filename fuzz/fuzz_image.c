/*
 * Fuzzes the linux provider's image unpacker (src/providers/linux/image.c):
 * the input's first byte picks the mode (even: a tarball; odd: the only
 * layer of an OCI layout, so ".wh." entries are whiteouts), the rest is the
 * tar stream, in any compression libarchive reads. A "tarball" is whatever
 * its bytes make it (image_formats.c): a docker save archive or an
 * oci-archive (seeds fmt_td_tar, fmt_to_tar), a squashfs or a SIF
 * (fmt_t_sqsh, fmt_t_sif), else a rootfs tarball.
 *
 * Whatever the stream holds, the import either installs an image or fails
 * with a message, and it never touches the host: a canary directory at a
 * fixed path (so corpus inputs can aim links, whiteouts and hard links at
 * it) keeps its file, and the store keeps no temporary. Unpacked bytes are
 * capped at 1 MiB so bombs stay cheap.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <fcntl.h>
#include <dirent.h>
#include <nettle/sha2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CANARY_DIR "/tmp/sbx-fuzz-image-canary"
#define CANARY CANARY_DIR "/victim"
#define CANARY_TEXT "host file\n"

static char base[64];

static void write_or_die(const char *path, const void *p, size_t n)
{
    if (sbx__write_file_atomic(path, p, n, 0644) < 0)
        abort();
}

static void cleanup(void)
{
    sbx__rm_rf(base);
}

static void setup_once(void)
{
    if (base[0])
        return;
    snprintf(base, sizeof(base), "%s/sbx-fuzz-image-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(base))
        abort();
    atexit(cleanup);
    mkdir(CANARY_DIR, 0755);
    char *t = NULL;
    size_t n = 0;
    if (sbx__read_file(CANARY, &t, &n) < 0)
        write_or_die(CANARY, CANARY_TEXT, strlen(CANARY_TEXT));
    free(t);
}

static void hex_of(const uint8_t *p, size_t n, char hex[65])
{
    struct sha256_ctx s;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&s);
    sha256_update(&s, n, p);
    sha256_digest(&s, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* An OCI layout at <base>/oci with `layer` as its only layer. */
static char *make_layout(const uint8_t *layer, size_t n)
{
    char *layout = sbx__printf("%s/oci", base);
    char *blobs = sbx__printf("%s/blobs/sha256", layout);
    if (!layout || !blobs || sbx__mkdir_p(blobs, 0755) < 0)
        abort();
    char lh[65], mh[65];
    hex_of(layer, n, lh);
    char *p = sbx__printf("%s/%s", blobs, lh);
    write_or_die(p, layer, n);
    free(p);
    char *m = sbx__printf("{\"schemaVersion\":2,\"layers\":[{\"mediaType\":"
                          "\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"sha256:%s\","
                          "\"size\":%zu}]}",
                          lh, n);
    hex_of((const uint8_t *)m, strlen(m), mh);
    p = sbx__printf("%s/%s", blobs, mh);
    write_or_die(p, m, strlen(m));
    free(p);
    free(m);
    char *idx = sbx__printf("{\"manifests\":[{\"digest\":\"sha256:%s\"}]}", mh);
    p = sbx__printf("%s/index.json", layout);
    write_or_die(p, idx, strlen(idx));
    free(p);
    free(idx);
    p = sbx__printf("%s/oci-layout", layout);
    write_or_die(p, "{}", 2);
    free(p);
    free(blobs);
    return layout;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    setup_once();
    bool oci = data[0] & 1;
    char *state = sbx__printf("%s/st", base);
    char *src = oci ? make_layout(data + 1, size - 1) : sbx__printf("%s/in.tar", base);
    if (!state || !src)
        abort();
    if (!oci)
        write_or_die(src, data + 1, size - 1);
    sbx_linux_image_opts io = {.max_bytes = 1 << 20};
    sbx_error *e = NULL;
    int rc = sbx__linux_image_import(state, NULL, "f", src, &io, &e);
    /* A failure always says why. */
    if (rc < 0 && (!e || !sbx_error_message(e) || !*sbx_error_message(e)))
        abort();
    sbx_error_free(e);
    /* The host's file is untouched. */
    char *t = NULL;
    size_t n = 0;
    if (sbx__read_file(CANARY, &t, &n) < 0 || n != strlen(CANARY_TEXT) ||
        memcmp(t, CANARY_TEXT, n) != 0)
        abort();
    free(t);
    /* No temporary is left behind. */
    char *images = sbx__printf("%s/images", state);
    DIR *d = images ? opendir(images) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, "tmp-"))
            abort();
    if (d)
        closedir(d);
    free(images);
    sbx__rm_rf(state);
    char *layout = sbx__printf("%s/oci", base);
    if (layout)
        sbx__rm_rf(layout);
    free(layout);
    free(state);
    free(src);
    return 0;
}
