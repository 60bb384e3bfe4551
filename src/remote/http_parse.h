/*
 * The parts of the HTTP client (http.c) that read a server's bytes, for
 * fuzz/fuzz_http.c: header lines, Retry-After, and the error message
 * sbx_http_response_check() takes from a body.
 */
#ifndef SBX_REMOTE_HTTP_PARSE_H
#define SBX_REMOTE_HTTP_PARSE_H

#include "core/internal.h"

#include <sbx/http.h>

/* An empty response to a METHOD PATH of client `c` (all borrowed: they must outlive it). */
SBX_INTERNAL sbx_http_response *sbx__http_response_new(const sbx_http_client *c,
                                                       const char *method, const char *path);
SBX_INTERNAL void sbx__http_response_free(sbx_http_response *r);
/* One header line (CRLF included, as libcurl gives it); -1: too big or no memory. */
SBX_INTERNAL int sbx__http_response_header_line(sbx_http_response *resp, const char *data,
                                                size_t len);
SBX_INTERNAL int sbx__http_response_append(sbx_http_response *r, const void *data, size_t len);
/* Retry-After in seconds (delta or HTTP date, at most a day), -1 when absent or unreadable. */
SBX_INTERNAL double sbx__http_retry_after(const sbx_http_response *resp);

#endif
