/*
 * Docker image references: parsing and normalization as Docker does it
 * (github.com/distribution/reference): `python:3.12` is
 * docker.io/library/python:3.12, `org/x` is docker.io/org/x:latest, the
 * first component is a registry when it has a '.' or a ':', is `localhost`,
 * or has an upper-case letter; repositories are lower case, at most 255
 * characters; tags [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; digests sha256:<64 hex>.
 */
#ifndef SBX_IMAGE_REF_H
#define SBX_IMAGE_REF_H

#include "core/internal.h"

typedef struct sbx_image_ref {
    char *registry;   /* "docker.io", "localhost:5000", "127.0.0.1:5000" */
    char *repository; /* "library/python", "org/x" */
    char *tag;        /* NULL when only a digest names the image */
    char *digest;     /* "sha256:<hex>" or NULL */
} sbx_image_ref;

/* Parses `s`; on failure *out is untouched and the error says what is wrong. */
SBX_INTERNAL int sbx__image_ref_parse(const char *s, sbx_image_ref *out, sbx_error **err);
SBX_INTERNAL void sbx__image_ref_free(sbx_image_ref *r);
/* "registry/repository[:tag][@digest]" (malloc'd; NULL on ENOMEM). */
SBX_INTERNAL char *sbx__image_ref_canonical(const sbx_image_ref *r);
/*
 * The short form Docker shows ("python:3.12" for
 * docker.io/library/python:3.12, "org/x:1" for docker.io/org/x:1; other
 * registries keep theirs), with `drop_latest` also without a ":latest" tag
 * ("python"). malloc'd; NULL on ENOMEM.
 */
SBX_INTERNAL char *sbx__image_ref_familiar(const sbx_image_ref *r, bool drop_latest);
/* The tag or digest to ask the registry for: the digest when there is one. */
SBX_INTERNAL const char *sbx__image_ref_reference(const sbx_image_ref *r);
/*
 * True when `s` names a local source rather than a registry image: an
 * absolute or ./ ../ path, or "oci:".
 */
SBX_INTERNAL bool sbx__image_ref_is_local(const char *s);

#endif
