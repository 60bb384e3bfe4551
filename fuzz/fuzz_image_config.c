/*
 * Fuzzes the linux provider's reading of an OCI image's config blob
 * (src/providers/linux/image.c, image_config_load and config_check): the
 * input is the blob, put in a layout whose manifest names it by its true
 * digest, over one empty layer. The import either installs the image or
 * fails with a message; when it installs, sbx__linux_image_config hands back
 * an object (or NULL) whose checked fields have the types create relies
 * on; no temporary is left behind.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <dirent.h>
#include <nettle/sha2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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

static void put_blob(const char *blobs, const void *p, size_t n, char hex[65])
{
    hex_of(p, n, hex);
    char *path = sbx__printf("%s/%s", blobs, hex);
    if (!path)
        abort();
    write_or_die(path, p, n);
    free(path);
}

/* The types create relies on, when the import let the config through. */
static void check_config(json_t *c)
{
    if (!c)
        return;
    if (!json_is_object(c))
        abort();
    static const char *const arrays[] = {"Env", "Entrypoint", "Cmd"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(arrays); i++) {
        json_t *a = json_object_get(c, arrays[i]);
        size_t k;
        json_t *v;
        if (a && !json_is_null(a) && !json_is_array(a))
            abort();
        json_array_foreach(a, k, v)
        {
            const char *s = json_string_value(v);
            if (!s || (i == 0 && (!strchr(s, '=') || s[0] == '=')))
                abort();
        }
    }
    const char *wd = json_string_value(json_object_get(c, "WorkingDir"));
    if (wd && *wd && wd[0] != '/')
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!base[0]) {
        snprintf(base, sizeof(base), "%s/sbx-fuzz-imgcfg-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(base))
            abort();
        atexit(cleanup);
    }
    char *layout = sbx__printf("%s/oci", base);
    char *blobs = sbx__printf("%s/blobs/sha256", layout);
    char *state = sbx__printf("%s/st", base);
    if (!layout || !blobs || !state || sbx__mkdir_p(blobs, 0755) < 0)
        abort();
    /* An empty tar: two 512-byte zero blocks. */
    static const uint8_t empty_tar[1024];
    char lh[65], ch[65], mh[65];
    put_blob(blobs, empty_tar, sizeof(empty_tar), lh);
    put_blob(blobs, data, size, ch);
    char *m = sbx__printf("{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:%s\",\"size\":%zu},"
                          "\"layers\":[{\"digest\":\"sha256:%s\",\"size\":1024}]}",
                          ch, size, lh);
    if (!m)
        abort();
    put_blob(blobs, m, strlen(m), mh);
    free(m);
    char *idx = sbx__printf("{\"manifests\":[{\"digest\":\"sha256:%s\"}]}", mh);
    char *p = sbx__printf("%s/index.json", layout);
    if (!idx || !p)
        abort();
    write_or_die(p, idx, strlen(idx));
    free(p);
    free(idx);
    p = sbx__printf("%s/oci-layout", layout);
    write_or_die(p, "{}", 2);
    free(p);
    sbx_linux_image_opts io = {.max_bytes = 1 << 20};
    sbx_error *e = NULL;
    int rc = sbx__linux_image_import(state, NULL, "f", layout, &io, &e);
    if (rc < 0 && (!e || !sbx_error_message(e) || !*sbx_error_message(e)))
        abort();
    sbx_error_free(e);
    if (rc == SBX_OK) {
        json_t *c = sbx__linux_image_config(state, NULL, "f");
        check_config(c);
        json_decref(c);
        char *text = NULL;
        if (sbx__linux_image_inspect(state, NULL, "f", &text, NULL) < 0)
            abort();
        free(text);
    }
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
    sbx__rm_rf(layout);
    free(layout);
    free(blobs);
    free(state);
    return 0;
}
