/*
 * Docker references (src/image/ref.c) against a table of Docker's rules
 * (distribution/reference: normalize.go and regexp.go): the hub's
 * library/ prefix, registries told by '.', ':' or localhost, lower-case
 * repositories, the tag grammar and sha256 digests.
 */
#include "tap.h"
#include "common.h"

#include "image/ref.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const struct {
    const char *in, *canonical;
} good[] = {
    {"python:3.12", "docker.io/library/python:3.12"},
    {"python", "docker.io/library/python:latest"},
    {"org/x", "docker.io/org/x:latest"},
    {"docker.io/python", "docker.io/library/python:latest"},
    {"index.docker.io/library/debian:12", "docker.io/library/debian:12"},
    {"localhost/x", "localhost/x:latest"},
    {"localhost:5000/x", "localhost:5000/x:latest"},
    {"127.0.0.1:5000/a/b:1", "127.0.0.1:5000/a/b:1"},
    {"host.tld/a/b:tag", "host.tld/a/b:tag"},
    {"ghcr.io/org/env:v1.2-rc_3", "ghcr.io/org/env:v1.2-rc_3"},
    {"x@sha256:" D64, "docker.io/library/x@sha256:" D64},
    {"x:tag@sha256:" D64, "docker.io/library/x:tag@sha256:" D64},
    {"a__b/c-d/e.f:_t", "docker.io/a__b/c-d/e.f:_t"},
    {"a---b", "docker.io/library/a---b:latest"},
    {"[::1]:5000/x", "[::1]:5000/x:latest"},
};

static const struct {
    const char *in, *says;
} bad[] = {
    {"", "empty"},
    {"Python", "must be lowercase"},
    {"org/Python", "must be lowercase"},
    /* Issue 24: upper case makes no host (Docker's rule sent "MyRepo/x" to a host MyRepo). */
    {"MyRepo/x:1", "must be lowercase"},
    {"x:", "tag ''"},
    {"x:.t", "tag '.t'"},
    {"x:-t", "tag '-t'"},
    {"x:t$", "tag 't$'"},
    {"x@sha256:abc", "digest"},
    {"x@sha512:" D64, "digest"},
    {"a_-b", "component"},
    {"a..b", "component"},
    {"-a", "component"},
    {"a/", "component"},
    {"/a", "component"},
    {"a//b", "component"},
    {"host.tld:/x", "registry"},
    {"host-.tld/x", "registry"},
    {"a b", "space"},
    {"x:" "0123456789012345678901234567890123456789012345678901234567890123456789"
     "0123456789012345678901234567890123456789012345678901234567890", "tag"},
};

static void test_good(void)
{
    for (size_t i = 0; i < SBX_ARRAY_SIZE(good); i++) {
        sbx_image_ref r;
        sbx_error *e = NULL;
        int rc = sbx__image_ref_parse(good[i].in, &r, &e);
        if (rc != 0)
            TAP_FAIL("%s: %s", good[i].in, sbx_error_message(e));
        _cleanup_free_ char *c = sbx__image_ref_canonical(&r);
        TAP_EQ_STR(c, good[i].canonical);
        /* Canonical is a fixed point. */
        sbx_image_ref r2;
        TAP_OK(sbx__image_ref_parse(c, &r2, NULL));
        _cleanup_free_ char *c2 = sbx__image_ref_canonical(&r2);
        TAP_EQ_STR(c2, c);
        sbx__image_ref_free(&r2);
        sbx__image_ref_free(&r);
    }
}

static void test_parts(void)
{
    sbx_image_ref r;
    TAP_OK(sbx__image_ref_parse("localhost:5000/a/b:t@sha256:" D64, &r, NULL));
    TAP_EQ_STR(r.registry, "localhost:5000");
    TAP_EQ_STR(r.repository, "a/b");
    TAP_EQ_STR(r.tag, "t");
    TAP_EQ_STR(r.digest, "sha256:" D64);
    TAP_EQ_STR(sbx__image_ref_reference(&r), "sha256:" D64);
    sbx__image_ref_free(&r);
    TAP_OK(sbx__image_ref_parse("x@sha256:" D64, &r, NULL));
    TAP_NULL(r.tag);
    sbx__image_ref_free(&r);
}

static void test_bad(void)
{
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        sbx_image_ref r = {0};
        sbx_error *e = NULL;
        int rc = sbx__image_ref_parse(bad[i].in, &r, &e);
        if (rc == 0)
            TAP_FAIL("%s parsed", bad[i].in);
        TAP_EQ_INT(rc, SBX_EINVAL);
        TAP_CONTAINS(sbx_error_message(e), bad[i].says);
        sbx_error_free(e);
    }
    /* 255 characters in all, registry included. */
    char long_name[300];
    memset(long_name, 'a', sizeof(long_name));
    long_name[256 - 10] = 0; /* docker.io/library/ + 246 > 255 */
    sbx_image_ref r;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__image_ref_parse(long_name, &r, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "longer than 255");
    sbx_error_free(e);
}

static void test_local(void)
{
    TAP_TRUE(sbx__image_ref_is_local("/srv/rootfs"));
    TAP_TRUE(sbx__image_ref_is_local("./img.tar"));
    TAP_TRUE(sbx__image_ref_is_local("oci:/x:tag"));
    TAP_TRUE(!sbx__image_ref_is_local("python:3.12"));
    TAP_TRUE(!sbx__image_ref_is_local("127.0.0.1:5000/x"));
}

TAP_MAIN(TAP(test_good), TAP(test_parts), TAP(test_bad), TAP(test_local))
