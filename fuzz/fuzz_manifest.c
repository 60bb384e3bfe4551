/*
 * libFuzzer target for the manifest/index parser and platform selection
 * (src/image/manifest.c) and the reference parser (src/image/ref.c): the
 * bytes a registry serves as a manifest, and names users type. The first
 * byte picks: even, a manifest (then platform selection on an index);
 * odd, a reference. A parsed manifest holds only valid digests, declared
 * sizes within bounds and known layer types; a parsed reference's
 * canonical form parses to itself. Pure.
 */
#include "core/internal.h"
#include "image/manifest.h"
#include "image/ref.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_ref(const uint8_t *data, size_t size)
{
    char *s = strndup((const char *)data, size);
    if (!s)
        return;
    sbx_image_ref r;
    if (sbx__image_ref_parse(s, &r, NULL) == SBX_OK) {
        char *c = sbx__image_ref_canonical(&r);
        sbx_image_ref r2;
        if (!c || sbx__image_ref_parse(c, &r2, NULL) != SBX_OK)
            abort();
        char *c2 = sbx__image_ref_canonical(&r2);
        if (!c2 || strcmp(c, c2))
            abort();
        free(c2);
        free(c);
        sbx__image_ref_free(&r2);
        sbx__image_ref_free(&r);
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1) {
        fuzz_ref(data + 1, size - 1);
        return 0;
    }
    sbx_manifest *m = NULL;
    sbx_error *e = NULL;
    if (sbx__manifest_parse((const char *)data + 1, size - 1, NULL, &m, &e) < 0) {
        if (!e)
            abort();
        sbx_error_free(e);
        return 0;
    }
    const sbx_descriptor *v = m->is_index ? m->manifests : m->layers;
    size_t n = m->is_index ? m->n_manifests : m->n_layers;
    if (n == 0 || n > SBX_MANIFEST_MAX_LAYERS)
        abort();
    for (size_t i = 0; i < n; i++)
        if (!sbx__digest_ok(v[i].digest) || v[i].size > SBX_LAYER_MAX)
            abort();
    if (!m->is_index && (!sbx__digest_ok(m->config.digest) || m->config.size > SBX_MANIFEST_MAX))
        abort();
    if (m->is_index) {
        size_t w = 0;
        static const char *const plats[] = {NULL, "linux/arm64", "linux/arm/v7", "bad"};
        for (size_t i = 0; i < SBX_ARRAY_SIZE(plats); i++) {
            sbx_error *pe = NULL;
            if (sbx__manifest_select(m, plats[i], &w, &pe) == SBX_OK) {
                if (w >= n)
                    abort();
            } else {
                sbx_error_free(pe);
            }
        }
    }
    sbx__manifest_free(m);
    return 0;
}
