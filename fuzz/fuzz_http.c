/*
 * libFuzzer target for what the remote kit's HTTP client reads from a
 * server (src/remote/http.c): header lines as libcurl hands them over, the
 * Retry-After it waits on, and the error message sbx_http_response_check
 * takes from a body. The input is a response's head (lines up to a blank
 * one) and its body. Checks: a status is 0 or 100-999; a header read back
 * holds no NUL, CR or LF at its ends and is no longer than the input;
 * Retry-After is -1 or 0 to a day; the check's message is bounded and
 * printable where it quotes the body. Pure.
 */
#include "core/internal.h"
#include "remote/http_parse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sbx_http_client *client;
    if (!client && sbx_http_client_new("fuzz", "http://x", &client, NULL) < 0)
        abort();
    sbx_http_response *r = sbx__http_response_new(client, "GET", "/p");
    if (!r)
        return 0;
    const char *p = (const char *)data, *end = p + size;
    bool body = false;
    while (p < end && !body) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p + 1) : (size_t)(end - p);
        if (len <= 2 && (len == 1 || p[0] == '\r'))
            body = true;
        if (sbx__http_response_header_line(r, p, len) < 0)
            break;
        p += len;
    }
    if (body && p < end)
        sbx__http_response_append(r, p, (size_t)(end - p));
    int st = sbx_http_response_status(r);
    if (st != 0 && (st < 100 || st > 999))
        abort();
    static const char *const names[] = {"Retry-After", "content-type", "X-A", ""};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = sbx_http_response_header(r, names[i]);
        if (v && (strlen(v) > size || strchr(v, '\n') || strchr(v, '\r')))
            abort();
    }
    double ra = sbx__http_retry_after(r);
    if (ra != -1 && (ra < 0 || ra > 86400))
        abort();
    sbx_error *e = NULL;
    int rc = sbx_http_response_check(r, &e);
    if (st >= 200 && st < 300) {
        if (rc != SBX_OK)
            abort();
    } else {
        if (rc >= 0 || !e)
            abort();
        /* name, method, path, status and reason, then at most 500 bytes of the server's words */
        if (strlen(sbx_error_message(e)) > 700)
            abort();
    }
    sbx_error_free(e);
    sbx__http_response_free(r);
    return 0;
}
