/*
 * A small Docker Engine API client (libcurl + jansson): the docker provider
 * talks to dockerd (or Podman's Docker-compatible service) through it.
 *
 * The engine is found as the docker CLI finds it: an explicit host, else
 * $DOCKER_HOST, else unix:///var/run/docker.sock; tcp:// with
 * $DOCKER_TLS_VERIFY / $DOCKER_CERT_PATH speaks TLS with the client
 * certificate there. The API version is negotiated once (GET /_ping, whose
 * API-Version header is the engine's) and every request then goes to /vX.Y.
 *
 * Every call blocks (worker threads only) and is thread-safe: each request
 * uses its own curl handle. Responses are bounded (ENGINE_MAX_BODY).
 */
#ifndef SBX_PROVIDERS_DOCKER_ENGINE_H
#define SBX_PROVIDERS_DOCKER_ENGINE_H

#include "core/internal.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sbx_dk_engine sbx_dk_engine;

/*
 * `host`: "unix:///path", "tcp://host:port" (NULL or "": $DOCKER_HOST, else the
 * default socket). `api_version`: "1.41" to pin one (NULL: negotiate).
 * Connects to nothing yet. SBX_EINVAL naming a host sbx cannot use.
 */
SBX_INTERNAL int sbx__dk_engine_new(const char *host, const char *api_version,
                                    sbx_dk_engine **out, sbx_error **err);
SBX_INTERNAL void sbx__dk_engine_free(sbx_dk_engine *e);
/* Bounds every later request (but exec sessions) to `seconds` (<= 0: none). */
SBX_INTERNAL void sbx__dk_engine_set_timeout(sbx_dk_engine *e, double seconds);
/*
 * A deadline for every request this thread makes from now on (a whole
 * create's create.start_timeout_s): each request gets what is left of it
 * (or the engine's own bound, when smaller), and one started with nothing
 * left fails at once with SBX_ETIMEDOUT. `seconds` <= 0 clears it. Returns
 * the one it replaced; _swap puts one back (or clears it for a cleanup
 * that must not be bounded by it).
 */
struct sbx_dk_deadline {
    double at;     /* CLOCK_MONOTONIC seconds; 0: none */
    double budget; /* the seconds it was set for, for messages */
};
SBX_INTERNAL struct sbx_dk_deadline sbx__dk_deadline_set(double seconds);
SBX_INTERNAL struct sbx_dk_deadline sbx__dk_deadline_swap(struct sbx_dk_deadline d);
/* The host as resolved ("unix:///var/run/docker.sock"). */
SBX_INTERNAL const char *sbx__dk_engine_host(const sbx_dk_engine *e);
/*
 * Whether paths on this machine are paths on the engine's machine (a unix
 * socket, or tcp to a loopback address): what a bind mount of a host
 * directory needs.
 */
SBX_INTERNAL bool sbx__dk_engine_local(const sbx_dk_engine *e);
/* The negotiated API version ("1.41"); negotiates on first use. */
SBX_INTERNAL int sbx__dk_engine_version(sbx_dk_engine *e, const char **out, sbx_error **err);

/*
 * One request: `method` on `path` (below the version prefix, e.g.
 * "/containers/create?name=x"; the caller escapes query values) with an
 * optional JSON `body`. `*status` gets the HTTP status; `*resp` (may be
 * NULL) the parsed JSON body when there is one (NULL otherwise). A transport
 * failure (engine not reachable) is SBX_EPROVIDER with a message naming the
 * host; an HTTP status is not an error here: the caller maps it (with
 * sbx__dk_error below).
 */
SBX_INTERNAL int sbx__dk_request(sbx_dk_engine *e, const char *method, const char *path,
                                 json_t *body, long *status, json_t **resp, sbx_error **err);
/*
 * A streamed request (POST /images/create): each newline-ended JSON line
 * of the body goes to `line`; a line's error ("error"/"errorDetail") stops
 * the stream and is returned as SBX_EPROVIDER with its message.
 */
typedef void (*sbx_dk_line_fn)(const char *status, const char *id, long long current,
                               long long total, void *data);
SBX_INTERNAL int sbx__dk_request_stream(sbx_dk_engine *e, const char *method, const char *path,
                                        long *status, sbx_dk_line_fn line, void *data,
                                        sbx_error **err);

/*
 * An error for an engine answer that was not a success: `what` says what
 * was being done ("creating container for image 'x'"), the engine's own
 * message (from a JSON {"message": ...} body) follows. Returns `code`.
 */
SBX_INTERNAL int sbx__dk_error(sbx_error **err, int code, long status, const json_t *resp,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/*
 * Parsers of engine bytes (fuzzed: fuzz/fuzz_docker.c). The message of an
 * error body: a JSON object's "message" string, else the body's text, made
 * printable and cut at 512 bytes; malloc'd. One line of a pull stream:
 * 0 and its fields (borrowed from `*obj`, which the caller frees) for a
 * progress line, 1 and `*errmsg` (malloc'd) for an error line, -1 for a line
 * that is not JSON.
 */
SBX_INTERNAL char *sbx__dk_error_text(const char *body, size_t len);
SBX_INTERNAL int sbx__dk_pull_line(const char *line, size_t len, json_t **obj,
                                   const char **status, const char **id, long long *current,
                                   long long *total, char **errmsg);
/*
 * The engine's multiplexed stream (attach, exec without a tty): 8-byte
 * headers (stream 0/1/2, three zero bytes, big-endian length) each followed
 * by that many bytes. feed() passes each payload piece to `out`; -1 for a
 * header that is not one (or `out` failing): the stream cannot go on.
 */
struct sbx_dk_demux {
    uint8_t hdr[8];
    size_t have;
    int stream;
    uint32_t left;
};
typedef int (*sbx_dk_out_fn)(int stream, const uint8_t *p, size_t n, void *data);
SBX_INTERNAL void sbx__dk_demux_init(struct sbx_dk_demux *d);
SBX_INTERNAL int sbx__dk_demux_feed(struct sbx_dk_demux *d, const uint8_t *in, size_t n,
                                    sbx_dk_out_fn out, void *data);
/*
 * Starts exec `exec_id` (made with AttachStdin/AttachStdout) upgraded to a
 * raw stream, and hands back one end of a socket pair that carries its
 * stdin and stdout (a thread copies, demultiplexing; stderr goes to the
 * debug log). Closing the fd ends the session. Blocking.
 */
SBX_INTERNAL int sbx__dk_session_open(sbx_dk_engine *e, const char *exec_id, int *fd,
                                      sbx_error **err);
/* The same on a stream of the caller's (`pair`: the session's from here on, failing too). */
SBX_INTERNAL int sbx__dk_session_open_on(sbx_dk_engine *e, const char *exec_id, int pair,
                                         sbx_error **err);
/*
 * Starts exec `exec_id` (POST /exec/ID/start upgraded to a raw stream) on a
 * connection of its own: the curl handle (connect-only; curl_easy_send/recv
 * on it, curl_easy_cleanup ends it), its socket, and the stream's bytes that
 * came with the answer's head (`*early`, malloc'd). Blocking.
 */
SBX_INTERNAL int sbx__dk_exec_attach(sbx_dk_engine *e, const char *exec_id, void **curl,
                                     int *sock, char **early, size_t *early_len,
                                     sbx_error **err);
/* Sends all of `p` on such a connection, waiting while it would block. -1: it broke. */
SBX_INTERNAL int sbx__dk_conn_send(void *curl, int sock, const void *p, size_t n);
/*
 * A request streaming its body from `in_fd` (-1: none; read to EOF, sent
 * chunked) and the answer's body into `out_fd` (-1: dropped): the archive
 * API. An answer that is not a success has its body (bounded) parsed into
 * `*resp` instead, as sbx__dk_request does. `*path_stat` (when not NULL)
 * gets the X-Docker-Container-Path-Stat header (malloc'd, or NULL).
 * `*in_failed` (when not NULL) is read once `in_fd` ends: non-zero aborts
 * the request (the writer failed). Blocking.
 */
SBX_INTERNAL int sbx__dk_request_fd(sbx_dk_engine *e, const char *method, const char *path,
                                    int in_fd, const int *in_failed, int out_fd, long *status,
                                    json_t **resp, char **path_stat, sbx_error **err);
/*
 * A GET whose successful body goes to `out` as it arrives (non-zero from it
 * stops the request), with no time bound: a followed log lasts as long as
 * its container. `stop` (may be NULL) is asked about once a second, however
 * silent the engine is; non-zero stops the request. Either stop is
 * SBX_ECANCELED; otherwise as sbx__dk_request_fd. Blocking.
 */
typedef int (*sbx_dk_chunk_fn)(const char *p, size_t n, void *data);
SBX_INTERNAL int sbx__dk_request_each(sbx_dk_engine *e, const char *path, sbx_dk_chunk_fn out,
                                      int (*stop)(void *data), void *data, long *status,
                                      json_t **resp, sbx_error **err);
/* Sets a curl handle's URL (`url_path` below the base), socket and TLS for the engine. */
SBX_INTERNAL int sbx__dk_engine_setup(sbx_dk_engine *e, void *curl, const char *url_path);
/*
 * A request with a raw body (`len` bytes of `content_type`), as
 * sbx__dk_request otherwise: PUT /containers/ID/archive takes a tar.
 */
SBX_INTERNAL int sbx__dk_request_raw(sbx_dk_engine *e, const char *method, const char *path,
                                     const void *data, size_t len, const char *content_type,
                                     long *status, json_t **resp, sbx_error **err);

/* "1.41" as a comparable number (1041); 0 for a string that is not a version. */
SBX_INTERNAL int sbx__dk_version_num(const char *v);

#endif
