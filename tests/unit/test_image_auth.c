/*
 * Registry auth pieces (src/image/auth.c, src/image/manifest.c): the
 * WWW-Authenticate challenge as registries send it and as an attacker
 * might, credentials from a docker config.json, and manifest/platform
 * parsing.
 */
#include "tap.h"
#include "common.h"

#include "image/auth.h"
#include "image/manifest.h"

#include <stdio.h>
#include <sys/stat.h>

static int parse(const char *s, sbx_www_auth *a)
{
    return sbx__www_auth_parse(s, strlen(s), a);
}

static void test_challenges(void)
{
    sbx_www_auth a;
    TAP_OK(parse("Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
                 "scope=\"repository:library/debian:pull\"",
                 &a));
    TAP_EQ_STR(a.scheme, "bearer");
    TAP_EQ_STR(a.realm, "https://auth.docker.io/token");
    TAP_EQ_STR(a.service, "registry.docker.io");
    TAP_EQ_STR(a.scope, "repository:library/debian:pull");
    sbx__www_auth_free(&a);
    TAP_OK(parse("Basic realm=\"sbx-test\"", &a));
    TAP_EQ_STR(a.scheme, "basic");
    TAP_EQ_STR(a.realm, "sbx-test");
    sbx__www_auth_free(&a);
    /* Escapes, unquoted values, spaces around '=', a second challenge ignored. */
    TAP_OK(parse("BEARER  realm = \"a\\\"b\" , service=svc, Basic realm=x", &a));
    TAP_EQ_STR(a.scheme, "bearer");
    TAP_EQ_STR(a.realm, "a\"b");
    TAP_EQ_STR(a.service, "svc");
    sbx__www_auth_free(&a);
}

static void test_hostile_challenges(void)
{
    sbx_www_auth a;
    TAP_EQ_INT(parse("", &a), -1);
    TAP_EQ_INT(parse("   ", &a), -1);
    TAP_EQ_INT(parse("Bearer realm=\"unterminated", &a), -1);
    TAP_EQ_INT(parse("Bearer realm=\"a\\", &a), -1);
    TAP_EQ_INT(parse("Bearer realm=\"line\r\nX-Injected: 1\"", &a), -1);
    TAP_EQ_INT(parse("\"Bearer\"", &a), -1);
    /* A NUL inside the header length is refused, never truncates a value. */
    TAP_EQ_INT(sbx__www_auth_parse("Bearer realm=\"a\0b\"", 18, &a), -1);
    char *big = malloc(SBX_WWW_AUTH_MAX + 64);
    memset(big, 'a', SBX_WWW_AUTH_MAX + 63);
    memcpy(big, "Bearer realm=", 13);
    big[SBX_WWW_AUTH_MAX + 63] = 0;
    TAP_EQ_INT(parse(big, &a), -1);
    free(big);
}

static char *write_config(const char *text)
{
    char tmpl[] = "/tmp/sbx-dc.XXXXXX";
    char *d = mkdtemp(tmpl) ? strdup(tmpl) : NULL;
    _cleanup_free_ char *p = sbx__printf("%s/config.json", d);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    return d;
}

static void rm_config(char *d)
{
    _cleanup_free_ char *p = sbx__printf("%s/config.json", d);
    unlink(p);
    rmdir(d);
    free(d);
}

static void test_credentials(void)
{
    /* "alice:s3:cret" base64; a password may hold ':'. */
    char *d = write_config("{\"auths\": {\"https://reg.example:5000/v1/\": {\"auth\": "
                           "\"YWxpY2U6czM6Y3JldA==\"}, \"docker.io\": {\"username\": \"bob\", "
                           "\"password\": \"pw\"}, \"other\": {}}}");
    char *u = NULL, *s = NULL;
    TAP_EQ_INT(sbx__docker_credentials(d, "reg.example:5000", &u, &s, NULL), 1);
    TAP_EQ_STR(u, "alice");
    TAP_EQ_STR(s, "s3:cret");
    free(u);
    free(s);
    TAP_EQ_INT(sbx__docker_credentials(d, "docker.io", &u, &s, NULL), 1);
    TAP_EQ_STR(u, "bob");
    free(u);
    free(s);
    /* A prefix of a host is not the host. */
    TAP_EQ_INT(sbx__docker_credentials(d, "reg.example", &u, &s, NULL), 0);
    TAP_EQ_INT(sbx__docker_credentials(d, "other", &u, &s, NULL), 0);
    rm_config(d);
    d = write_config("{\"auths\": {\"r\": {\"auth\": \"!!notbase64\"}}}");
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__docker_credentials(d, "r", &u, &s, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "not base64");
    sbx_error_free(e);
    rm_config(d);
    d = write_config("{\"credHelpers\": {\"r\": \"../../bin/sh\"}}");
    e = NULL;
    TAP_EQ_INT(sbx__docker_credentials(d, "r", &u, &s, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "not a plain name");
    sbx_error_free(e);
    rm_config(d);
    /* No config at all: anonymous. */
    TAP_EQ_INT(sbx__docker_credentials("/nonexistent-sbx", "r", &u, &s, NULL), 0);
}

/* Where a registry's credentials may go: its own host, over no weaker a scheme. */
static void test_realm_rule(void)
{
    static const struct {
        const char *base, *realm;
        bool ok;
    } cases[] = {
        {"https://ghcr.io", "https://ghcr.io/token", true},
        {"http://127.0.0.1:5000", "http://127.0.0.1:5001/token", true}, /* another port */
        {"https://REG.example:5000", "https://reg.EXAMPLE/auth?x=1", true},
        {"http://127.0.0.1:5000", "https://127.0.0.1/token", true},      /* stronger */
        {"https://registry-1.docker.io", "https://auth.docker.io/token", true},
        {"https://index.docker.io", "https://auth.docker.io/token", true},
        {"https://[::1]:5000", "https://[::1]:6000/t", true},
        /* Another host. */
        {"http://127.0.0.1:5000", "http://127.0.0.2:5000/token", false},
        {"https://ghcr.io", "https://ghcr.io.evil.example/token", false},
        {"https://reg.example", "https://auth.reg.example/token", false},
        {"https://evil.example", "https://auth.docker.io/token", false},
        {"https://[::1]:5000", "https://[::2]:5000/t", false},
        /* A weaker scheme: the credentials would cross in clear. */
        {"https://127.0.0.1:5000", "http://127.0.0.1:5000/token", false},
        {"https://registry-1.docker.io", "http://auth.docker.io/token", false},
        /* Anything a URL parser could read two ways. */
        {"https://reg.example", "https://reg.example@evil.example/token", false},
        {"https://reg.example", "https://user:pw@reg.example/token", false},
        {"https://reg.example", "https://evil.example\\@reg.example/", false},
        {"https://reg.example", "https://reg.example%2f@evil/", false},
        {"https://reg.example", "https://reg.example\\.evil.example/", false},
        {"https://reg.example", "https://reg.example/token\\@evil", false}, /* in its path */
        {"https://reg.example", "https://reg.example/t@x", false},
        {"https://reg.example", "https://reg.example:x/token", false},
        {"https://reg.example", "https://reg.example:/token", false},
        {"https://reg.example", "https:///token", false},
        {"https://reg.example", "ftp://reg.example/token", false},
        {"https://reg.example", "https://reg example/token", false},
        {"https://reg.example", "", false},
        {"https://reg.example", NULL, false},
        {"https://[::1", "https://[::1/t", false},
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
        bool got = sbx__realm_may_get_credentials(cases[i].base, cases[i].realm);
        if (got != cases[i].ok)
            TAP_FAIL("%s -> %s: %d, wanted %d", cases[i].base,
                     cases[i].realm ? cases[i].realm : "(null)", got, cases[i].ok);
    }
}

#define Z64 "0000000000000000000000000000000000000000000000000000000000000000"

static void test_manifests(void)
{
    static const char idx[] =
        "{\"schemaVersion\":2,\"manifests\":["
        "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:" Z64
        "\",\"size\":1,\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}},"
        "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:" Z64
        "\",\"size\":2,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm\",\"variant\":\"v7\"}},"
        "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:" Z64
        "\",\"size\":3,\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\"}}]}";
    sbx_manifest *m = NULL;
    TAP_OK(sbx__manifest_parse(idx, strlen(idx), SBX_MT_OCI_INDEX, &m, NULL));
    TAP_TRUE(m->is_index);
    size_t w = 9;
    TAP_OK(sbx__manifest_select(m, "linux/arm64/v8", &w, NULL));
    TAP_EQ_INT((int)w, 2);
    TAP_OK(sbx__manifest_select(m, "linux/arm/v7", &w, NULL));
    TAP_EQ_INT((int)w, 1);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__manifest_select(m, "linux/arm/v6", &w, &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), "linux/arm/v7");
    sbx_error_free(e);
    sbx__manifest_free(m);
    static const char s1[] = "{\"schemaVersion\":1,\"name\":\"x\"}";
    e = NULL;
    TAP_TRUE(sbx__manifest_parse(s1, strlen(s1), NULL, &m, &e) < 0);
    TAP_CONTAINS(sbx_error_message(e), "schema 1");
    sbx_error_free(e);
    static const char bad_digest[] =
        "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"sha256:../../etc\","
        "\"size\":1},\"layers\":[]}";
    e = NULL;
    TAP_TRUE(sbx__manifest_parse(bad_digest, strlen(bad_digest), NULL, &m, &e) < 0);
    sbx_error_free(e);
}

TAP_MAIN(TAP(test_challenges), TAP(test_hostile_challenges), TAP(test_credentials),
         TAP(test_realm_rule), TAP(test_manifests))
