/* Docker image references (see ref.h for the grammar). */
#include "image/ref.h"

#include <ctype.h>
#include <string.h>

#define NAME_MAX_LEN 255
#define TAG_MAX_LEN 128

void sbx__image_ref_free(sbx_image_ref *r)
{
    if (!r)
        return;
    free(r->registry);
    free(r->repository);
    free(r->tag);
    free(r->digest);
    memset(r, 0, sizeof(*r));
}

bool sbx__image_ref_is_local(const char *s)
{
    return s && (s[0] == '/' || !strncmp(s, "./", 2) || !strncmp(s, "../", 3) ||
                 !strcmp(s, ".") || !strncmp(s, "oci:", 4));
}

static bool alnum_lower(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* path-component: [a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)* over [p, p+n). */
static bool component_ok(const char *p, size_t n)
{
    if (n == 0 || !alnum_lower(p[0]) || !alnum_lower(p[n - 1]))
        return false;
    for (size_t i = 0; i < n;) {
        if (alnum_lower(p[i])) {
            i++;
            continue;
        }
        size_t j = i;
        if (p[i] == '.') {
            j = i + 1;
        } else if (p[i] == '_') {
            j = i + 1;
            if (j < n && p[j] == '_')
                j++;
        } else if (p[i] == '-') {
            while (j < n && p[j] == '-')
                j++;
        } else {
            return false;
        }
        if (j >= n || !alnum_lower(p[j]))
            return false;
        i = j;
    }
    return true;
}

/* domain: components of [A-Za-z0-9] / [A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9] joined by '.', then :port. */
static bool domain_ok(const char *p, size_t n)
{
    const char *close = n && p[0] == '[' ? memchr(p, ']', n) : NULL;
    if (n && p[0] == '[' && !close)
        return false;
    const char *colon = memchr(close ? close : p, ':', n - (size_t)((close ? close : p) - p));
    size_t hn = colon ? (size_t)(colon - p) : n;
    if (colon) {
        size_t pn = n - hn - 1;
        if (pn == 0 || pn > 5)
            return false;
        for (size_t i = 0; i < pn; i++)
            if (!isdigit((unsigned char)colon[1 + i]))
                return false;
    }
    if (hn == 0)
        return false;
    /* [IPv6] as the reference accepts it. */
    if (p[0] == '[') {
        if (p[hn - 1] != ']' || hn < 3)
            return false;
        for (size_t i = 1; i + 1 < hn; i++)
            if (!isxdigit((unsigned char)p[i]) && p[i] != ':')
                return false;
        return true;
    }
    if (colon && memchr(colon + 1, ':', n - hn - 1))
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= hn; i++) {
        if (i < hn && p[i] != '.')
            continue;
        size_t len = i - start;
        if (len == 0 || p[start] == '-' || p[i - 1] == '-')
            return false;
        for (size_t k = start; k < i; k++)
            if (!isalnum((unsigned char)p[k]) && p[k] != '-')
                return false;
        start = i + 1;
    }
    return true;
}

static bool tag_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > TAG_MAX_LEN)
        return false;
    if (!isalnum((unsigned char)t[0]) && t[0] != '_')
        return false;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)t[i]) && t[i] != '_' && t[i] != '.' && t[i] != '-')
            return false;
    return true;
}

static bool digest_ok(const char *d)
{
    if (strncmp(d, "sha256:", 7) != 0 || strlen(d) != 71)
        return false;
    for (const char *p = d + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

int sbx__image_ref_parse(const char *s, sbx_image_ref *out, sbx_error **err)
{
    if (!s || !*s)
        return sbx__set_error(err, SBX_EINVAL, "an image reference is empty");
    size_t len = strlen(s);
    if (len > 4096)
        return sbx__set_error(err, SBX_EINVAL, "image reference is too long (%zu bytes)", len);
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
            return sbx__set_error(err, SBX_EINVAL,
                                  "invalid image reference %s: it has a space, control or "
                                  "non-ASCII character",
                                  s);
    _cleanup_free_ char *copy = strdup(s);
    if (!copy)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    char *digest = NULL;
    char *at = strchr(copy, '@');
    if (at) {
        *at = 0;
        digest = at + 1;
        if (!digest_ok(digest))
            return sbx__set_error(err, SBX_EINVAL,
                                  "invalid image reference %s: the digest after '@' must be "
                                  "sha256: and 64 lower-case hex digits",
                                  s);
    }
    /* The tag is after the last ':' that follows the last '/'. */
    char *tag = NULL;
    char *slash = strrchr(copy, '/');
    char *colon = strrchr(slash ? slash : copy, ':');
    if (colon) {
        *colon = 0;
        tag = colon + 1;
        if (!tag_ok(tag))
            return sbx__set_error(err, SBX_EINVAL,
                                  "invalid image reference %s: tag '%s' must be 1-128 letters, "
                                  "digits, '_', '.' or '-', not starting with '.' or '-'",
                                  s, tag);
    }
    char *name = copy;
    if (!*name)
        return sbx__set_error(err, SBX_EINVAL, "invalid image reference %s: no repository name",
                              s);
    /*
     * Registry: the first component, when it looks like a host (a '.', a
     * ':' or localhost). Docker also takes one with upper case for a host,
     * which sent "MyRepo/x" to resolve MyRepo; here it is a repository,
     * refused below as upper case, which says what is wrong.
     */
    const char *registry = "docker.io";
    char *repo = name;
    char *first = strchr(name, '/');
    if (first) {
        size_t fl = (size_t)(first - name);
        bool host = memchr(name, '.', fl) || memchr(name, ':', fl) ||
                    (fl == 9 && !strncmp(name, "localhost", 9));
        if (host) {
            if (!domain_ok(name, fl))
                return sbx__set_error(err, SBX_EINVAL,
                                      "invalid image reference %s: registry '%.*s' is not a "
                                      "host name or address with an optional :port",
                                      s, (int)fl, name);
            *first = 0;
            registry = name;
            repo = first + 1;
        }
    }
    /* Components, and upper case is refused as Docker refuses it. */
    for (const char *p = repo;;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        for (size_t i = 0; i < n; i++)
            if (isupper((unsigned char)p[i]))
                return sbx__set_error(err, SBX_EINVAL,
                                      "invalid image reference %s: repository name must be "
                                      "lowercase",
                                      s);
        if (!component_ok(p, n))
            return sbx__set_error(err, SBX_EINVAL,
                                  "invalid image reference %s: repository component '%.*s' must "
                                  "be lower-case letters and digits, separated by '.', '_', "
                                  "'__' or '-'",
                                  s, (int)n, p);
        if (!e)
            break;
        p = e + 1;
    }
    bool hub = !strcmp(registry, "docker.io") || !strcmp(registry, "index.docker.io");
    if (hub)
        registry = "docker.io";
    _cleanup_free_ char *full_repo = hub && !strchr(repo, '/') ? sbx__printf("library/%s", repo)
                                                                 : strdup(repo);
    if (!full_repo)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (strlen(registry) + 1 + strlen(full_repo) > NAME_MAX_LEN)
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid image reference %s: the name is longer than %d "
                              "characters",
                              s, NAME_MAX_LEN);
    sbx_image_ref r = {0};
    r.registry = strdup(registry);
    r.repository = steal_pointer(&full_repo);
    r.tag = tag ? strdup(tag) : digest ? NULL : strdup("latest");
    r.digest = digest ? strdup(digest) : NULL;
    if (!r.registry || !r.repository || (!r.tag && !digest) || (digest && !r.digest)) {
        sbx__image_ref_free(&r);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    *out = r;
    return SBX_OK;
}

char *sbx__image_ref_canonical(const sbx_image_ref *r)
{
    return sbx__printf("%s/%s%s%s%s%s", r->registry, r->repository, r->tag ? ":" : "",
                       r->tag ? r->tag : "", r->digest ? "@" : "", r->digest ? r->digest : "");
}

char *sbx__image_ref_familiar(const sbx_image_ref *r, bool drop_latest)
{
    const char *repo = r->repository;
    bool hub = !strcmp(r->registry, "docker.io");
    if (hub && !strncmp(repo, "library/", 8) && !strchr(repo + 8, '/'))
        repo += 8;
    const char *tag = r->tag && !(drop_latest && !strcmp(r->tag, "latest")) ? r->tag : NULL;
    return sbx__printf("%s%s%s%s%s%s%s", hub ? "" : r->registry, hub ? "" : "/", repo,
                       tag ? ":" : "", tag ? tag : "", r->digest ? "@" : "",
                       r->digest ? r->digest : "");
}

const char *sbx__image_ref_reference(const sbx_image_ref *r)
{
    return r->digest ? r->digest : r->tag;
}
