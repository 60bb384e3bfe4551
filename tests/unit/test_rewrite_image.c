/* sbx_rewrite_image(): the reference's rewrite_image (reference-api.md L). */
#include "tap.h"
#include "common.h"
#include "lib/err.h"

#include "core/internal.h"

static const char MIRRORS[] = "[{\"from\": \"docker.io/\", \"to\": \"mirror.local/hub/\"},"
                              " {\"from\": \"docker.io/library/\", \"to\": \"never/\"},"
                              " {\"from\": \"ghcr.io/\", \"to\": \"mirror.local/ghcr/\"}]";

static char *rewrite(const char *image, const char *rewrites)
{
    char *out = (char *)"unset";
    TAP_OK(sbx_rewrite_image(image, rewrites, &out, &e_));
    return out;
}

static void expect(const char *image, const char *rewrites, const char *want)
{
    char *got = rewrite(image, rewrites);
    TAP_EQ_STR(got, want);
    sbx_free(got);
}

static void test_none_image_gives_none(void)
{
    char *got = rewrite(NULL, MIRRORS);
    TAP_NULL(got);
}

static void test_first_matching_prefix_wins(void)
{
    /* The first entry matches, so the longer second prefix is never used. */
    expect("docker.io/library/ubuntu:22.04", MIRRORS, "mirror.local/hub/library/ubuntu:22.04");
    expect("ghcr.io/org/app@sha256:abc", MIRRORS, "mirror.local/ghcr/org/app@sha256:abc");
    expect("docker.io/", MIRRORS, "mirror.local/hub/");
}

static void test_no_match_is_unchanged(void)
{
    expect("quay.io/x/y:1", MIRRORS, "quay.io/x/y:1");
    /* A prefix must match at the start, whole. */
    expect("my.docker.io/x", MIRRORS, "my.docker.io/x");
    expect("docker.i", MIRRORS, "docker.i");
    expect("python:3.12", "[]", "python:3.12");
    expect("python:3.12", NULL, "python:3.12");
    expect("python:3.12", "null", "python:3.12");
    expect("", MIRRORS, "");
}

static void test_empty_from_matches_everything(void)
{
    expect("python:3.12", "[{\"from\": \"\", \"to\": \"registry.local/\"}]",
           "registry.local/python:3.12");
}

static void test_yaml_rewrites(void)
{
    expect("docker.io/x", "- from: docker.io/\n  to: m/\n", "m/x");
}

static void test_missing_keys_fail_only_when_reached(void)
{
    /* A later broken entry is never looked at once an earlier one matched. */
    expect("docker.io/x", "[{\"from\": \"docker.io/\", \"to\": \"m/\"}, {\"oops\": 1}]", "m/x");
    /* An entry whose 'from' does not match is not asked for its 'to'. */
    expect("docker.io/x", "[{\"from\": \"ghcr.io/\"}, {\"from\": \"docker.io/\", \"to\": \"m/\"}]",
           "m/x");
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_rewrite_image("docker.io/x", "[{\"to\": \"m/\"}]", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "image rewrite 0 has no 'from' key");
    TAP_EQ_INT(sbx_rewrite_image("docker.io/x", "[{\"from\": \"ghcr.io/\", \"to\": \"g/\"}, "
                                                "{\"from\": \"docker.io/\"}]",
                                 &out, ERR(e)),
               SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "image rewrite 1 has no 'to' key");
    TAP_NULL(out);
    sbx_error_free(e);
}

static void test_wrong_types(void)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_rewrite_image("x", "{\"from\": \"a\", \"to\": \"b\"}", &out, ERR(e)), SBX_ETYPE);
    TAP_CONTAINS(sbx_error_message(e), "image rewrites must be a list");
    TAP_EQ_INT(sbx_rewrite_image("x", "[\"a=b\"]", &out, ERR(e)), SBX_ETYPE);
    TAP_CONTAINS(sbx_error_message(e), "image rewrite 0 must be a mapping, got str");
    TAP_EQ_INT(sbx_rewrite_image("x", "[{\"from\": 1, \"to\": \"b\"}]", &out, ERR(e)), SBX_ETYPE);
    TAP_CONTAINS(sbx_error_message(e), "'from' must be a string, got int");
    TAP_EQ_INT(sbx_rewrite_image("x", "[{", &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_INT(sbx_rewrite_image("x", "[]", NULL, ERR(e)), SBX_EINVAL);
    TAP_NULL(out);
    sbx_error_free(e);
}

TAP_MAIN(TAP(test_none_image_gives_none), TAP(test_first_matching_prefix_wins),
         TAP(test_no_match_is_unchanged), TAP(test_empty_from_matches_everything),
         TAP(test_yaml_rewrites), TAP(test_missing_keys_fail_only_when_reached),
         TAP(test_wrong_types))
