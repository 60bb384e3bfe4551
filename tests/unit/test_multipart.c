/*
 * The remote kit's multipart/form-data encoder (include/sbx/http.h,
 * src/remote/multipart.c): the exact bytes of a form (fields, a file part
 * with its filename and type, empty and binary data), the boundary in the
 * content type and in no part's bytes, and every refusal saying which part.
 */
#include "tap.h"
#include "common.h"

#include <sbx.h>
#include <sbx/http.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *boundary_of(const char *ct)
{
    const char *b = strstr(ct, "boundary=");
    TAP_TRUE(b != NULL);
    return b + 9;
}

static void test_exact_bytes(void)
{
    const char bin[] = {'a', 0, '\r', '\n', 'z'};
    sbx_http_part parts[] = {
        {.name = "metadata",
         .content_type = "application/json",
         .data = "{\"path\":\"/x\"}",
         .len = 13},
        {.name = "file",
         .filename = "x.bin",
         .content_type = "application/octet-stream",
         .data = bin,
         .len = sizeof(bin)},
        {.name = "empty", .data = NULL, .len = 0},
    };
    char *body = NULL, *ct = NULL;
    size_t len = 0;
    TAP_OK(sbx_http_multipart_encode(parts, 3, &body, &len, &ct, &e_));
    TAP_TRUE(!strncmp(ct, "multipart/form-data; boundary=sbx-", 34));
    const char *b = boundary_of(ct);
    TAP_EQ_INT((int)strlen(b), 36);
    char want[2048];
    int n = snprintf(want, sizeof(want),
                     "--%s\r\nContent-Disposition: form-data; name=\"metadata\"\r\n"
                     "Content-Type: application/json\r\n\r\n{\"path\":\"/x\"}\r\n"
                     "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.bin\"\r\n"
                     "Content-Type: application/octet-stream\r\n\r\n",
                     b, b);
    memcpy(want + n, bin, sizeof(bin));
    n += (int)sizeof(bin);
    n += snprintf(
        want + n, sizeof(want) - (size_t)n,
        "\r\n--%s\r\nContent-Disposition: form-data; name=\"empty\"\r\n\r\n\r\n--%s--\r\n", b, b);
    TAP_EQ_INT((int)len, n);
    TAP_TRUE(!memcmp(body, want, len));
    sbx_free(body);
    sbx_free(ct);
}

static void test_boundary_not_in_data(void)
{
    /* Data full of boundary-like text: the drawn one still occurs in none of it. */
    char data[4096];
    for (size_t i = 0; i + 5 <= sizeof(data); i += 5)
        memcpy(data + i, "--sbx", 5);
    sbx_http_part p = {.name = "f", .filename = "f", .data = data, .len = sizeof(data) - 1};
    for (int k = 0; k < 20; k++) {
        char *body = NULL, *ct = NULL;
        size_t len = 0;
        TAP_OK(sbx_http_multipart_encode(&p, 1, &body, &len, &ct, &e_));
        TAP_TRUE(memmem(data, sizeof(data) - 1, boundary_of(ct), strlen(boundary_of(ct))) == NULL);
        sbx_free(body);
        sbx_free(ct);
    }
}

static void test_refusals(void)
{
    sbx_error *e = NULL;
    char *body = NULL, *ct = NULL;
    size_t len = 0;
    sbx_http_part ok = {.name = "a", .data = "x", .len = 1};
    TAP_EQ_INT(sbx_http_multipart_encode(&ok, 0, &body, &len, &ct, &e), SBX_EINVAL);
    sbx_error_free(e);
    e = NULL;
    sbx_http_part quote[] = {ok,
                             {.name = "b", .filename = "evil\"; name=\"x", .data = "", .len = 0}};
    TAP_EQ_INT(sbx_http_multipart_encode(quote, 2, &body, &len, &ct, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "part 1 has a filename with a quote");
    sbx_error_free(e);
    e = NULL;
    sbx_http_part crlf = {.name = "a\r\nX-Injected: 1", .data = "", .len = 0};
    TAP_EQ_INT(sbx_http_multipart_encode(&crlf, 1, &body, &len, &ct, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "part 0 has a name with");
    sbx_error_free(e);
    e = NULL;
    sbx_http_part noname = {.data = "", .len = 0};
    TAP_EQ_INT(sbx_http_multipart_encode(&noname, 1, &body, &len, &ct, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "part 0 has no name");
    sbx_error_free(e);
    e = NULL;
    sbx_http_part nodata = {.name = "a", .data = NULL, .len = 3};
    TAP_EQ_INT(sbx_http_multipart_encode(&nodata, 1, &body, &len, &ct, &e), SBX_EINVAL);
    sbx_error_free(e);
    TAP_NULL(body);
    TAP_NULL(ct);
}

TAP_MAIN(TAP(test_exact_bytes), TAP(test_boundary_not_in_data), TAP(test_refusals))
