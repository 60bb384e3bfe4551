/* Manifest and index parsing, platform selection (see manifest.h). */
#include "image/manifest.h"

#include <string.h>
#include <sys/utsname.h>

static void desc_free(sbx_descriptor *d)
{
    free(d->media_type);
    free(d->os);
    free(d->arch);
    free(d->variant);
}

void sbx__manifest_free(sbx_manifest *m)
{
    if (!m)
        return;
    free(m->media_type);
    desc_free(&m->config);
    for (size_t i = 0; i < m->n_layers; i++)
        desc_free(&m->layers[i]);
    for (size_t i = 0; i < m->n_manifests; i++)
        desc_free(&m->manifests[i]);
    free(m->layers);
    free(m->manifests);
    free(m);
}

static int desc_parse(json_t *j, const char *what, size_t i, bool platform, sbx_descriptor *d,
                      sbx_error **err)
{
    const char *mt = json_string_value(json_object_get(j, "mediaType"));
    const char *dg = json_string_value(json_object_get(j, "digest"));
    json_t *sz = json_object_get(j, "size");
    if (!json_is_object(j) || !mt || !sbx__digest_ok(dg) || !json_is_integer(sz) ||
        json_integer_value(sz) < 0 || (uint64_t)json_integer_value(sz) > SBX_LAYER_MAX)
        return sbx__set_error(err, SBX_EIO,
                              "manifest: %s %zu is not a descriptor with a mediaType, a "
                              "sha256 digest and a size (0 to 1 TiB)",
                              what, i);
    if (strlen(mt) > 255)
        return sbx__set_error(err, SBX_EIO, "manifest: %s %zu has a media type that is too long",
                              what, i);
    d->media_type = strdup(mt);
    memcpy(d->digest, dg, SBX_DIGEST_LEN - 1);
    d->digest[SBX_DIGEST_LEN - 1] = 0;
    d->size = (uint64_t)json_integer_value(sz);
    if (platform) {
        json_t *p = json_object_get(j, "platform");
        d->os = sbx__strdup0(json_string_value(json_object_get(p, "os")));
        d->arch = sbx__strdup0(json_string_value(json_object_get(p, "architecture")));
        d->variant = sbx__strdup0(json_string_value(json_object_get(p, "variant")));
        if ((d->os && strlen(d->os) > 64) || (d->arch && strlen(d->arch) > 64) ||
            (d->variant && strlen(d->variant) > 64))
            return sbx__set_error(err, SBX_EIO, "manifest: %s %zu has a platform too long", what,
                                  i);
    }
    return d->media_type ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

static bool layer_type_ok(const char *mt)
{
    static const char *const ok[] = {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.v1.tar+zstd",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.docker.image.rootfs.diff.tar",
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(ok); i++)
        if (!strcmp(mt, ok[i]))
            return true;
    return false;
}

int sbx__manifest_parse(const char *body, size_t n, const char *content_type, sbx_manifest **out,
                        sbx_error **err)
{
    if (n > SBX_MANIFEST_MAX)
        return sbx__set_error(err, SBX_EIO, "manifest is larger than %u MiB",
                              SBX_MANIFEST_MAX >> 20);
    json_error_t je;
    _cleanup_json_ json_t *j = json_loadb(body, n, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j))
        return sbx__set_error(err, SBX_EIO, "manifest is not a JSON object (%s)", je.text);
    json_t *sv = json_object_get(j, "schemaVersion");
    if (json_is_integer(sv) && json_integer_value(sv) == 1)
        return sbx__set_error(err, SBX_EIO,
                              "the image has a Docker schema 1 manifest, which sbx does not "
                              "pull (it is deprecated and unsigned by digest); push it again "
                              "with a current docker or skopeo to get schema 2 or OCI");
    if (!json_is_integer(sv) || json_integer_value(sv) != 2)
        return sbx__set_error(err, SBX_EIO, "manifest has schemaVersion other than 2");
    const char *mt = json_string_value(json_object_get(j, "mediaType"));
    if (!mt && content_type && *content_type) {
        static const char *const known[] = {SBX_MT_OCI_INDEX, SBX_MT_OCI_MANIFEST,
                                            SBX_MT_DOCKER_LIST, SBX_MT_DOCKER_MANIFEST};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(known); i++)
            if (!strncmp(content_type, known[i], strlen(known[i])))
                mt = known[i];
    }
    json_t *mans = json_object_get(j, "manifests");
    json_t *layers = json_object_get(j, "layers");
    if (!mt)
        mt = json_is_array(mans) ? SBX_MT_OCI_INDEX : SBX_MT_OCI_MANIFEST;
    bool index = !strcmp(mt, SBX_MT_OCI_INDEX) || !strcmp(mt, SBX_MT_DOCKER_LIST);
    if (!index && strcmp(mt, SBX_MT_OCI_MANIFEST) && strcmp(mt, SBX_MT_DOCKER_MANIFEST))
        return sbx__set_error(err, SBX_EIO,
                              "manifest media type %.100s is not an image manifest or index "
                              "(sbx pulls OCI and Docker schema 2)",
                              mt);
    sbx_manifest *m = calloc(1, sizeof(*m));
    if (!m || !(m->media_type = strdup(mt))) {
        free(m);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    m->is_index = index;
    int rc = SBX_OK;
    json_t *arr = index ? mans : layers;
    size_t cnt = json_array_size(arr);
    if (!json_is_array(arr) || cnt == 0 || cnt > SBX_MANIFEST_MAX_LAYERS) {
        rc = sbx__set_error(err, SBX_EIO, "manifest: %s must be a list of 1 to %d entries",
                            index ? "manifests" : "layers", SBX_MANIFEST_MAX_LAYERS);
        goto out;
    }
    sbx_descriptor *v = calloc(cnt, sizeof(*v));
    if (!v) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    if (index) {
        m->manifests = v;
        m->n_manifests = cnt;
    } else {
        m->layers = v;
        m->n_layers = cnt;
    }
    for (size_t i = 0; i < cnt && rc == SBX_OK; i++)
        rc = desc_parse(json_array_get(arr, i), index ? "manifest" : "layer", i, index, &v[i],
                        err);
    if (rc < 0)
        goto out;
    if (!index) {
        rc = desc_parse(json_object_get(j, "config"), "config", 0, false, &m->config, err);
        if (rc == SBX_OK && m->config.size > SBX_MANIFEST_MAX)
            rc = sbx__set_error(err, SBX_EIO, "manifest: the config is larger than %u MiB",
                                SBX_MANIFEST_MAX >> 20);
        for (size_t i = 0; i < cnt && rc == SBX_OK; i++)
            if (!layer_type_ok(v[i].media_type))
                rc = sbx__set_error(err, SBX_EIO,
                                    "manifest: layer %zu has media type %.100s; sbx pulls tar "
                                    "layers, uncompressed, gzip or zstd (foreign and encrypted "
                                    "layers are not supported)",
                                    i, v[i].media_type);
    }
out:
    if (rc < 0) {
        sbx__manifest_free(m);
        return rc;
    }
    *out = m;
    return SBX_OK;
}

const char *sbx__host_platform(void)
{
    struct utsname u;
    if (uname(&u) < 0)
        return "linux/amd64";
    if (!strcmp(u.machine, "x86_64"))
        return "linux/amd64";
    if (!strcmp(u.machine, "aarch64") || !strcmp(u.machine, "arm64"))
        return "linux/arm64/v8";
    if (!strncmp(u.machine, "armv7", 5))
        return "linux/arm/v7";
    if (!strncmp(u.machine, "armv6", 5))
        return "linux/arm/v6";
    if (!strcmp(u.machine, "i686") || !strcmp(u.machine, "i386"))
        return "linux/386";
    if (!strcmp(u.machine, "ppc64le"))
        return "linux/ppc64le";
    if (!strcmp(u.machine, "s390x"))
        return "linux/s390x";
    if (!strcmp(u.machine, "riscv64"))
        return "linux/riscv64";
    return "linux/amd64";
}

int sbx__manifest_select(const sbx_manifest *m, const char *platform, size_t *which,
                         sbx_error **err)
{
    const char *want = platform && *platform ? platform : sbx__host_platform();
    char os[65] = "", arch[65] = "", variant[65] = "";
    if (sscanf(want, "%64[^/]/%64[^/]/%64s", os, arch, variant) < 2 || !*os || !*arch)
        return sbx__set_error(err, SBX_EINVAL,
                              "platform %s must be os/arch or os/arch/variant, like linux/amd64",
                              want);
    /* arm64's only variant is v8: an entry without one fits (as containerd matches). */
    bool v8 = !strcmp(arch, "arm64") && (!*variant || !strcmp(variant, "v8"));
    for (size_t i = 0; i < m->n_manifests; i++) {
        const sbx_descriptor *d = &m->manifests[i];
        if (!d->os || !d->arch || strcmp(d->os, os) || strcmp(d->arch, arch))
            continue;
        const char *dv = d->variant ? d->variant : "";
        if (v8 ? (*dv && strcmp(dv, "v8")) : (*variant && strcmp(dv, variant)))
            continue;
        *which = i;
        return SBX_OK;
    }
    sbx_buf b = {0};
    for (size_t i = 0; i < m->n_manifests; i++) {
        const sbx_descriptor *d = &m->manifests[i];
        if (d->os && d->arch && strcmp(d->os, "unknown"))
            sbx__buf_printf(&b, "%s%s/%s%s%s", b.len ? ", " : "", d->os, d->arch,
                            d->variant ? "/" : "", d->variant ? d->variant : "");
    }
    int rc = sbx__set_error(err, SBX_ENOENT,
                            "the image has no manifest for platform %s (it has: %s); choose one "
                            "with --platform",
                            want, b.data ? b.data : "none");
    sbx__buf_free(&b);
    return rc;
}
