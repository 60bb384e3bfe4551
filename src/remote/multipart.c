/*
 * The remote kit: multipart/form-data request bodies (RFC 7578), for
 * services that take files as form parts (OpenSandbox's execd upload).
 * A pure encoder: the request gets the bytes through set_body.
 */
#include <sbx/http.h>
#include <sbx/provider.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define MAX_TEXT 1024

/* A text written between quotes in a part's header: nothing that would end or bend it. */
static bool plain_text(const char *s)
{
    size_t n = strnlen(s, MAX_TEXT + 1);
    return n <= MAX_TEXT && !strpbrk(s, "\"\\\r\n");
}

static bool boundary_in(const sbx_http_part *parts, size_t n, const char *b)
{
    size_t bl = strlen(b);
    for (size_t i = 0; i < n; i++)
        if (parts[i].len >= bl && memmem(parts[i].data, parts[i].len, b, bl))
            return true;
    return false;
}

int sbx_http_multipart_encode(const sbx_http_part *parts, size_t n, char **body, size_t *len,
                              char **content_type, sbx_error **err)
{
    if (!parts || !n || !body || !len || !content_type) {
        if (err)
            *err = sbx_error_new(SBX_EINVAL, "multipart: no parts, or a NULL argument");
        return SBX_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const sbx_http_part *p = &parts[i];
        const char *bad = !p->name || !*p->name  ? "has no name"
                          : !plain_text(p->name) ? "has a name with a quote, backslash or line "
                                                   "end, or of more than 1024 bytes"
                          : p->filename && !plain_text(p->filename)
                              ? "has a filename with a quote, backslash or line end, or of "
                                "more than 1024 bytes"
                          : p->content_type && !plain_text(p->content_type)
                              ? "has a content type that cannot be a header value"
                          : !p->data && p->len ? "has no data but a length"
                                               : NULL;
        if (bad) {
            if (err)
                *err = sbx_error_new(SBX_EINVAL, "multipart: part %zu %s", i, bad);
            return SBX_EINVAL;
        }
    }
    /* 128 random bits: a collision is only possible by design of the data; then draw again. */
    char boundary[64];
    for (int tries = 0;; tries++) {
        unsigned char r[16];
        if (tries == 8 || getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
            if (err)
                *err = sbx_error_new(SBX_EIO, "multipart: no random boundary could be drawn");
            return SBX_EIO;
        }
        int k = snprintf(boundary, sizeof(boundary), "sbx-");
        for (int i = 0; i < 16; i++)
            k += snprintf(boundary + k, sizeof(boundary) - (size_t)k, "%02x", r[i]);
        if (!boundary_in(parts, n, boundary))
            break;
    }
    /* Each header is bounded (three texts of 1024 bytes at most), so the total is known first. */
    size_t total = strlen(boundary) + 8, bl = strlen(boundary);
    for (size_t i = 0; i < n; i++)
        total += bl + 3 * MAX_TEXT + 128 + parts[i].len;
    char *out = malloc(total), *ct = NULL;
    if (!out || asprintf(&ct, "multipart/form-data; boundary=%s", boundary) < 0) {
        free(out);
        return SBX_ENOMEM;
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const sbx_http_part *p = &parts[i];
        at += (size_t)snprintf(out + at, total - at,
                               "--%s\r\nContent-Disposition: form-data; name=\"%s\"", boundary,
                               p->name);
        if (p->filename)
            at += (size_t)snprintf(out + at, total - at, "; filename=\"%s\"", p->filename);
        if (p->content_type)
            at += (size_t)snprintf(out + at, total - at, "\r\nContent-Type: %s", p->content_type);
        at += (size_t)snprintf(out + at, total - at, "\r\n\r\n");
        if (p->len)
            memcpy(out + at, p->data, p->len);
        at += p->len;
        memcpy(out + at, "\r\n", 2);
        at += 2;
    }
    at += (size_t)snprintf(out + at, total - at, "--%s--\r\n", boundary);
    *body = out;
    *len = at;
    *content_type = ct;
    return SBX_OK;
}

int sbx_http_request_set_multipart(sbx_http_request *r, const sbx_http_part *parts, size_t n,
                                   sbx_error **err)
{
    char *body = NULL, *ct = NULL;
    size_t len = 0;
    int rc = r ? sbx_http_multipart_encode(parts, n, &body, &len, &ct, err) : SBX_EINVAL;
    if (rc == SBX_OK)
        rc = sbx_http_request_set_body(r, body, len, ct);
    free(body);
    free(ct);
    return rc;
}
