/*
 * sbx remote kit, HTTP: an asynchronous HTTP/1.1 client on the context's
 * loop, for providers whose boxes live behind an HTTP service (E2B,
 * Daytona, OpenSandbox, a container engine's API). docs/remote-kit/http.md
 * walks through it.
 *
 * Two objects:
 * - an sbx_http_client holds what every request to one service shares: the
 *   base URL, a unix socket, TLS files, default headers, timeouts, the retry
 *   policy and the status-to-error map. It is plain memory (no loop, no
 *   socket): make it in init, free it in release, from any thread;
 *   requests in flight keep it alive (it is reference counted).
 * - an sbx_http_request is one call. Build it, then sbx_http_request_send()
 *   it on an op's loop (sbx_op_loop(op)), from any thread. Its callback
 *   runs once, on the loop thread, never inside send; after the callback
 *   returns the request and its response are freed.
 *
 * Requests of all providers of one context share one libcurl multi handle
 * driven by the context's libuv loop (no thread per request), so
 * connections to a service are kept and reused. The context caps its open
 * connections below the process's descriptor limit; requests past the cap
 * wait for a free connection (back-pressure, not an error).
 *
 * Retries: an idempotent request (GET, HEAD, PUT, DELETE, OPTIONS, unless
 * set otherwise) that fails to connect, loses its connection before any
 * response byte reached the caller, or gets a retryable status (408, 429,
 * 502, 503, 504 by default) is sent again after a full-jitter backoff, or
 * after the server's Retry-After when it gives one, while attempts and the
 * request's deadline allow: the deadline wins over every wait.
 */
#ifndef SBX_HTTP_H
#define SBX_HTTP_H

#include <sbx.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sbx_http_client sbx_http_client;
typedef struct sbx_http_request sbx_http_request;
typedef struct sbx_http_response sbx_http_response;

/* --- the client: one service ------------------------------------------------ */

/*
 * A client for the service at `base_url` ("https://api.example.com/v1",
 * "http://localhost" with a unix socket). `name` prefixes its error messages
 * (the provider's name). Both are copied. SBX_EINVAL for a base URL that is
 * not http:// or https://. Any thread.
 */
SBX_EXPORT int sbx_http_client_new(const char *name, const char *base_url, sbx_http_client **out,
                                   sbx_error **err);
/* Drops the caller's reference; requests in flight keep theirs. NULL is fine. Any thread. */
SBX_EXPORT void sbx_http_client_free(sbx_http_client *c);

/*
 * Setters: call them before the first request is sent (the client is read
 * by requests in flight without a lock afterwards). Strings are copied.
 */
/* Connects to this unix socket instead of the URL's host (a local engine). */
SBX_EXPORT int sbx_http_client_set_unix_socket(sbx_http_client *c, const char *path);
/* TLS: a CA bundle to trust (else the system's), a client certificate and key. */
SBX_EXPORT int sbx_http_client_set_tls(sbx_http_client *c, const char *ca_file,
                                       const char *cert_file, const char *key_file);
/* Skips the server certificate check (tests only: it says so in a warning). */
SBX_EXPORT void sbx_http_client_set_insecure(sbx_http_client *c, int insecure);
/* A header every request carries ("Authorization: Bearer ..."); a second with one name replaces. */
SBX_EXPORT int sbx_http_client_set_header(sbx_http_client *c, const char *name, const char *value);
/* Seconds to connect (default 10) and for one attempt, connect included (default 60; 0: none). */
SBX_EXPORT void sbx_http_client_set_timeouts(sbx_http_client *c, double connect_s, double attempt_s);
/*
 * The retry policy: at most `attempts` sends in all (default 4; 1: no
 * retry), waits drawn uniformly from 0 to min(`cap_s`, `base_s` * 2^n)
 * (full jitter; defaults 0.2 and 10 s). A server's Retry-After is waited
 * instead; one longer than `cap_s` or than the request's remaining
 * deadline ends the request with that answer.
 */
SBX_EXPORT void sbx_http_client_set_retry(sbx_http_client *c, int attempts, double base_s,
                                          double cap_s);
/* Whether status `status` is retried (for idempotent requests): overrides the default set. */
SBX_EXPORT void sbx_http_client_retry_status(sbx_http_client *c, int status, int retry);
/*
 * The sbx code sbx_http_response_check() gives for `status` (100-599),
 * overriding the default map: 400 and 422 SBX_EINVAL, 401 SBX_EAUTH, 403
 * SBX_EPERM, 404 and 410 SBX_ENOENT, 409 SBX_ESTATE, 408 and 504
 * SBX_ETIMEDOUT, any other 4xx SBX_EINVAL, 5xx SBX_EPROVIDER.
 */
SBX_EXPORT void sbx_http_client_map_status(sbx_http_client *c, int status, int code);
/* The largest response body kept in memory (default 64 MiB); more is SBX_EPROTO. */
SBX_EXPORT void sbx_http_client_set_max_body(sbx_http_client *c, size_t bytes);

/* --- a request ------------------------------------------------------------- */

/*
 * A request `method` ("GET", "POST", ...) to `path`, which is appended to
 * the client's base URL (it may carry a query: build it with
 * sbx_http_escape). The request holds a reference to `c`. Any thread.
 */
SBX_EXPORT int sbx_http_request_new(sbx_http_client *c, const char *method, const char *path,
                                    sbx_http_request **out, sbx_error **err);
/* Frees a request never sent. Sent ones are freed after their callback. */
SBX_EXPORT void sbx_http_request_free(sbx_http_request *r);
/* A header of this request only (over the client's of the same name). */
SBX_EXPORT int sbx_http_request_set_header(sbx_http_request *r, const char *name,
                                           const char *value);
/* The body, copied, with its Content-Type (NULL: none sent). */
SBX_EXPORT int sbx_http_request_set_body(sbx_http_request *r, const void *data, size_t len,
                                         const char *content_type);
/* Whether a failed attempt may be sent again (default: by method, see above). */
SBX_EXPORT void sbx_http_request_set_idempotent(sbx_http_request *r, int idempotent);
/*
 * The whole request's deadline, retries and waits included, in seconds
 * from the send (default: none beyond the client's per-attempt timeout).
 * Past it the request ends with SBX_ETIMEDOUT.
 */
SBX_EXPORT void sbx_http_request_set_deadline(sbx_http_request *r, double seconds);

/*
 * Streams the response body to `cb` as it arrives instead of keeping it:
 * `cb(r, data, len, user)` on the loop thread for each chunk of a response
 * whose status is known (sbx_http_request_status). It returns 0 to go on,
 * 1 to pause (no more chunks, and the connection's window closes, until
 * sbx_http_request_resume), or -1 to end the request (SBX_ECANCELED). Once
 * a chunk was delivered the request is not retried.
 */
typedef int (*sbx_http_data_cb)(sbx_http_request *r, const void *data, size_t len, void *user);
SBX_EXPORT void sbx_http_request_on_data(sbx_http_request *r, sbx_http_data_cb cb, void *user);
/* Resumes a paused stream. Loop thread. */
SBX_EXPORT void sbx_http_request_resume(sbx_http_request *r);
/* The response status once headers arrived (0 before), for sbx_http_data_cb. */
SBX_EXPORT int sbx_http_request_status(const sbx_http_request *r);

/*
 * The end of a request: `code` SBX_OK when a response arrived (whatever its
 * status: see sbx_http_response_check), else the failure with `err`
 * (SBX_ETIMEDOUT, SBX_ECANCELED, SBX_EIO for a connection that failed or
 * closed early, SBX_EPROTO for a malformed or oversized response).
 * `resp` is NULL unless code is SBX_OK. `err` is the callback's to free;
 * `resp` and `r` are freed after it returns.
 */
typedef void (*sbx_http_done_cb)(sbx_http_request *r, int code, sbx_http_response *resp,
                                 sbx_error *err, void *user);
/*
 * Sends `r` on `loop` (sbx_op_loop(op)); `cb` runs once, later, on the loop
 * thread. Any thread: from another one (a worker that read a file first)
 * the loop starts it. On failure (SBX_EINVAL, SBX_ENOMEM, SBX_ECANCELED: the
 * context has ended) `cb` never runs and the caller still owns `r`.
 */
SBX_EXPORT int sbx_http_request_send(sbx_http_request *r, void *loop, sbx_http_done_cb cb,
                                     void *user, sbx_error **err);
/*
 * Ends a sent request: its callback runs (later, on the loop) with
 * SBX_ECANCELED unless it has already run. Loop thread; from an op's
 * cancel callback (sbx_op_on_cancel), say.
 */
SBX_EXPORT void sbx_http_request_cancel(sbx_http_request *r);
/* How many times it was sent (1 when it was not retried). */
SBX_EXPORT int sbx_http_request_attempts(const sbx_http_request *r);

/* --- the response ---------------------------------------------------------- */

SBX_EXPORT int sbx_http_response_status(const sbx_http_response *resp);
/* A header's value (the last of that name, case-insensitive), or NULL. */
SBX_EXPORT const char *sbx_http_response_header(const sbx_http_response *resp, const char *name);
/* The kept body (NUL-terminated for convenience; empty when streamed). */
SBX_EXPORT const char *sbx_http_response_body(const sbx_http_response *resp, size_t *len);
/* Takes the kept body (malloc'd, NUL-terminated; free it); the response keeps none. */
SBX_EXPORT char *sbx_http_response_take_body(sbx_http_response *resp, size_t *len);
/*
 * SBX_OK for a 2xx status; else the mapped code (sbx_http_client_map_status)
 * and an error "NAME: METHOD PATH: STATUS REASON: MESSAGE", MESSAGE being the
 * body's JSON "message", "error" or "detail" when it has one, else its first
 * 200 printable bytes.
 */
SBX_EXPORT int sbx_http_response_check(const sbx_http_response *resp, sbx_error **err);

/* --- multipart/form-data bodies (RFC 7578) --------------------------------- */

/* One part of a form: a field, or a file when it has a filename. */
typedef struct sbx_http_part {
    const char *name;         /* the field's name (required) */
    const char *filename;     /* NULL: a plain field, no filename */
    const char *content_type; /* NULL: none written (text/plain, as the RFC says) */
    const void *data;         /* `len` bytes (NULL when len is 0) */
    size_t len;
} sbx_http_part;

/*
 * Encodes `n` parts, in order, as a multipart/form-data body: each part's
 * Content-Disposition (its name, and filename when set) and Content-Type,
 * then its bytes, between boundaries of a random token that occurs in no
 * part's bytes. Writes the body (malloc'd, freed with sbx_free) to *body
 * and its size to *len, and the header value "multipart/form-data;
 * boundary=..." (malloc'd, sbx_free) to *content_type; the caller's
 * pointers are written only on success. Names, filenames and content types
 * are written in quotes as they are: one holding '"', '\\', CR, LF or NUL,
 * or longer than 1024 bytes, is refused rather than escaped (receivers
 * disagree on escapes). Returns SBX_OK; SBX_EINVAL (NULL arguments, n 0, a
 * part without a name, a refused text, data NULL with len > 0) saying which
 * part; SBX_EIO (no randomness); SBX_ENOMEM. Does not block; thread-safe.
 */
SBX_EXPORT int sbx_http_multipart_encode(const sbx_http_part *parts, size_t n, char **body,
                                         size_t *len, char **content_type, sbx_error **err);
/*
 * sbx_http_multipart_encode() made the body of request `r` (copied, as
 * sbx_http_request_set_body copies). Returns what encode returns. Any thread.
 */
SBX_EXPORT int sbx_http_request_set_multipart(sbx_http_request *r, const sbx_http_part *parts,
                                              size_t n, sbx_error **err);

/* --- helpers --------------------------------------------------------------- */

/* `s` percent-encoded for a path segment or query value (malloc'd; NULL: no memory). */
SBX_EXPORT char *sbx_http_escape(const char *s);

#ifdef __cplusplus
}
#endif
#endif /* SBX_HTTP_H */
