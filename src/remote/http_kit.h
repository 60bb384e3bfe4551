/*
 * What the remote kit's other clients (the WebSocket client, ws.c) take
 * from the HTTP client (http.c), so that a connection goes where the
 * sbx_http_client's requests go and ends when the context does:
 * - an easy handle set up as a request's (URL, unix socket, TLS, connect
 *   timeout) and the client's fields it reads;
 * - a hook on the context's HTTP engine, closed when the context stops.
 */
#ifndef SBX_REMOTE_HTTP_KIT_H
#define SBX_REMOTE_HTTP_KIT_H

#include "core/internal.h"

#include <sbx/http.h>

#include <curl/curl.h>

/*
 * A new libcurl easy handle for `path` under `c`'s base URL, set up as
 * every request of `c` is: the URL, http and https only, no redirects, TCP
 * keepalive, no signals, the unix socket, the TLS files and check, the
 * connect timeout, `errbuf` (CURL_ERROR_SIZE bytes) as its error buffer.
 * NULL when out of memory.
 */
SBX_INTERNAL CURL *sbx__http_easy_new(const sbx_http_client *c, const char *path, char *errbuf);

SBX_INTERNAL void sbx__http_client_ref(sbx_http_client *c);
SBX_INTERNAL const char *sbx__http_client_name(const sbx_http_client *c);
SBX_INTERNAL const char *sbx__http_client_base_url(const sbx_http_client *c);
/* The client's default headers, in the order set: the i-th one's name and value. */
SBX_INTERNAL size_t sbx__http_client_n_headers(const sbx_http_client *c);
SBX_INTERNAL void sbx__http_client_header(const sbx_http_client *c, size_t i, const char **name,
                                          const char **value);
/* The sbx code the client's status map gives `status` (see sbx_http_client_map_status). */
SBX_INTERNAL int sbx__http_client_code_for_status(const sbx_http_client *c, int status);
/* Whether a header name (`name` true) or value could go on the wire as it is: no CR, LF. */
SBX_INTERNAL bool sbx__http_header_ok(const char *s, bool name);

/*
 * Something living on a context's loop beside its HTTP engine that must
 * end when the context does (a WebSocket). When the context stops, the
 * engine unlinks each hook and calls its `close` on the loop thread, which
 * must end it then: close its handles, run its last callback. `engine` is
 * the engine's (NULL when not added, or after close).
 */
struct sbx__http_hook {
    void (*close)(struct sbx__http_hook *h);
    void *engine;
    struct sbx__http_hook *next, *prev;
};

/* Adds `h` to the engine of `loop`'s context (made if none). Loop thread. */
SBX_INTERNAL int sbx__http_hook_add(void *loop, struct sbx__http_hook *h, sbx_error **err);
/* Removes `h` (a no-op when it is not added). Loop thread. */
SBX_INTERNAL void sbx__http_hook_remove(struct sbx__http_hook *h);

#endif
