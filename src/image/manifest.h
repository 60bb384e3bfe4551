/*
 * Image manifests and indexes as a registry serves them (hostile input,
 * fuzzed): OCI image manifest and index, Docker schema-2 manifest and
 * manifest list. Schema 1 is refused with a message that says so.
 */
#ifndef SBX_IMAGE_MANIFEST_H
#define SBX_IMAGE_MANIFEST_H

#include "core/internal.h"
#include "image/layout.h"

#include <stdint.h>

#define SBX_MANIFEST_MAX (4u << 20) /* manifest, index and config bytes */
#define SBX_MANIFEST_MAX_LAYERS 1000
#define SBX_LAYER_MAX ((uint64_t)1 << 40)

#define SBX_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define SBX_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define SBX_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define SBX_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"

typedef struct sbx_descriptor {
    char *media_type;
    char digest[SBX_DIGEST_LEN];
    uint64_t size;
    char *os, *arch, *variant; /* index entries only */
} sbx_descriptor;

typedef struct sbx_manifest {
    bool is_index;
    char *media_type;
    sbx_descriptor config;      /* manifests */
    sbx_descriptor *layers;     /* manifests */
    size_t n_layers;
    sbx_descriptor *manifests;  /* indexes */
    size_t n_manifests;
} sbx_manifest;

/* `content_type` (may be NULL) is the response's Content-Type. */
SBX_INTERNAL int sbx__manifest_parse(const char *body, size_t n, const char *content_type,
                                     sbx_manifest **out, sbx_error **err);
SBX_INTERNAL void sbx__manifest_free(sbx_manifest *m);
/*
 * The entry of index `m` for `platform` ("os/arch[/variant]", NULL: this
 * host's). SBX_ENOENT with the platforms the index has when none fits.
 */
SBX_INTERNAL int sbx__manifest_select(const sbx_manifest *m, const char *platform, size_t *which,
                                      sbx_error **err);
/* This host's platform, "linux/amd64" or "linux/arm64/v8" (static). */
SBX_INTERNAL const char *sbx__host_platform(void);

#endif
