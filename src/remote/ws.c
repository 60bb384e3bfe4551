/*
 * The remote kit's WebSocket client (include/sbx/ws.h). libcurl 7.88 has
 * no WebSocket API, so libcurl only connects (CURLOPT_CONNECT_ONLY: TCP or
 * a unix socket, a proxy tunnel, TLS, all as the sbx_http_client's
 * requests do) and this file speaks the protocol over the connection with
 * curl_easy_send and curl_easy_recv, framed by ws_frame.c.
 *
 * Each connection has a multi handle of its own, driven by the context's
 * loop as http.c's engine drives its own (socket polls and a timer), until
 * the connection is made; then one uv_poll on its socket. Not the engine's
 * shared multi handle: once a CONNECT_ONLY transfer is done, libcurl holds
 * its connection in that multi's cache as an idle one, where the engine's
 * other transfers can reach it: the cache's size limit closes the oldest
 * idle connection, and the check libcurl makes before reusing one closes
 * idle connections with unread input, which a WebSocket with a message
 * waiting has. A private multi's cache holds this connection alone and is
 * never asked for another. The engine still ends every connection when the
 * context stops (the hook of http_kit.h).
 *
 * A connection's life, all on the loop thread: CONNECTING (libcurl) ->
 * HANDSHAKE (the upgrade request written, the 101 read and checked) ->
 * OPEN -> CLOSING (a close frame sent or received, the other awaited, then
 * the server's end of the connection) -> ENDING (the result recorded, the
 * connection dropped; the close callback waits for the next loop turn, so
 * that it never runs inside a call of the user) -> DONE (handles closing,
 * then freed).
 */
#include "core/internal.h"
#include "remote/http_kit.h"
#include "remote/ws_frame.h"

#include <sbx/provider.h>
#include <sbx/ws.h>

#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <uv.h>

#define WS_DEFAULT_TIMEOUT_S 30.0
#define WS_DEFAULT_CLOSE_TIMEOUT_S 5.0
#define WS_READ_CHUNK ((size_t)64 << 10)
/* Read per loop turn at most: a server that floods does not starve the loop's other work. */
#define WS_READ_BUDGET ((size_t)1 << 20)

enum ws_state { WS_NEW, WS_CONNECTING, WS_HANDSHAKE, WS_OPEN, WS_CLOSING, WS_ENDING, WS_DONE };

struct hdr {
    char *name;
    char *value;
};

/* A socket libcurl watches while it connects. */
struct csock {
    uv_poll_t poll;
    curl_socket_t fd;
    sbx_ws *ws;
    struct csock *next;
};

/* One frame to send, whole; `off` of its bytes are written. */
struct qframe {
    struct qframe *next;
    size_t len, off;
    bool control;   /* goes ahead of queued messages, outside the bound */
    bool auto_pong; /* a pong this side queued: a newer ping replaces it */
    bool is_close;
    uint8_t data[];
};

struct sbx_ws {
    sbx_http_client *c;
    char *path;
    char **protocols;
    size_t n_protocols;
    struct hdr *headers;
    size_t n_headers;
    double timeout_s, close_timeout_s;
    size_t max_message, max_queue;
    sbx_ws_open_cb on_open;
    sbx_ws_message_cb on_message;
    sbx_ws_drain_cb on_drain;
    sbx_ws_close_cb on_close;
    void *user;

    enum ws_state state;
    bool owned; /* sbx_ws_connect succeeded: the connection frees it */
    uv_loop_t *loop;
    struct sbx__http_hook hook;
    CURLM *multi;
    CURL *easy;
    char errbuf[CURL_ERROR_SIZE];
    struct csock *csocks;
    uv_timer_t curl_timer; /* libcurl's wake-ups while it connects */
    uv_timer_t deadline;   /* the handshake's, then the close's */
    uv_timer_t soon;       /* deferred work: the end, reads past the budget, resume */
    uv_poll_t poll;
    bool poll_inited;
    int poll_events;
    int open_handles;
    bool deadline_closing; /* the deadline now bounds the closing handshake */
    bool want_read;

    char key[25];
    sbx_buf req;
    size_t req_off;
    sbx__ws_head head;
    char *protocol;

    sbx__ws_decoder dec;
    uint8_t *rbuf;
    size_t rlen, roff;
    bool paused;

    struct qframe *qhead;
    size_t queued;
    uint8_t keys[256];
    size_t keys_left;

    bool close_queued, close_sent, close_received;
    int peer_status;
    char peer_reason[SBX__WS_MAX_REASON + 1];

    /* The end, recorded by ws_end, told by finish. */
    int end_code;
    int end_status;
    char end_reason[SBX__WS_MAX_REASON + 1];
    sbx_error *end_err;
};

/* --- building ------------------------------------------------------------- */

static bool path_ok(const char *path)
{
    if (!path || path[0] != '/')
        return false;
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '#')
            return false;
    return true;
}

int sbx_ws_new(sbx_http_client *c, const char *path, sbx_ws **out, sbx_error **err)
{
    if (!c || !out || !path_ok(path))
        return sbx__set_error(err, SBX_EINVAL,
                              "a WebSocket needs a client and a path starting with '/' without "
                              "spaces, control bytes or '#' (escape it with sbx_http_escape)");
    sbx_ws *ws = calloc(1, sizeof(*ws));
    if (!ws || !(ws->path = strdup(path))) {
        free(ws);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    sbx__http_client_ref(c);
    ws->c = c;
    ws->timeout_s = WS_DEFAULT_TIMEOUT_S;
    ws->close_timeout_s = WS_DEFAULT_CLOSE_TIMEOUT_S;
    ws->max_message = SBX_WS_DEFAULT_MAX_MESSAGE;
    ws->max_queue = SBX_WS_DEFAULT_MAX_QUEUE;
    *out = ws;
    return SBX_OK;
}

static void ws_release(sbx_ws *ws)
{
    for (size_t i = 0; i < ws->n_protocols; i++)
        free(ws->protocols[i]);
    free(ws->protocols);
    for (size_t i = 0; i < ws->n_headers; i++) {
        free(ws->headers[i].name);
        free(ws->headers[i].value);
    }
    free(ws->headers);
    while (ws->qhead) {
        struct qframe *f = ws->qhead;
        ws->qhead = f->next;
        free(f);
    }
    sbx__buf_free(&ws->req);
    sbx__ws_head_free(&ws->head);
    sbx__ws_decoder_free(&ws->dec);
    sbx_error_free(ws->end_err);
    free(ws->rbuf);
    free(ws->protocol);
    free(ws->path);
    sbx_http_client_free(ws->c);
    free(ws);
}

void sbx_ws_free(sbx_ws *ws)
{
    /* A connected one is the connection's: freed after its close callback. */
    if (ws && !ws->owned)
        ws_release(ws);
}

/* An HTTP token (RFC 9110 section 5.6.2), as a subprotocol name must be. */
static bool token_ok(const char *s)
{
    if (!s || !*s)
        return false;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= 0x20 || c >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", c))
            return false;
    }
    return true;
}

int sbx_ws_add_protocol(sbx_ws *ws, const char *protocol)
{
    if (!ws || ws->owned || !token_ok(protocol))
        return SBX_EINVAL;
    char **v = realloc(ws->protocols, (ws->n_protocols + 1) * sizeof(*v));
    if (!v)
        return SBX_ENOMEM;
    ws->protocols = v;
    if (!(v[ws->n_protocols] = strdup(protocol)))
        return SBX_ENOMEM;
    ws->n_protocols++;
    return SBX_OK;
}

/*
 * Headers the handshake writes itself, or that would make the server read
 * a body after the upgrade request: never taken from the caller.
 */
static bool reserved_header(const char *name)
{
    static const char *const names[] = {"Host",           "Upgrade",           "Connection",
                                        "Content-Length", "Transfer-Encoding", "Expect"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(names); i++)
        if (!strcasecmp(name, names[i]))
            return true;
    return !strncasecmp(name, "Sec-WebSocket-", 14);
}

int sbx_ws_set_header(sbx_ws *ws, const char *name, const char *value)
{
    if (!ws || ws->owned || !sbx__http_header_ok(name, true) ||
        !sbx__http_header_ok(value, false) || reserved_header(name))
        return SBX_EINVAL;
    for (size_t i = 0; i < ws->n_headers; i++) {
        if (!strcasecmp(ws->headers[i].name, name)) {
            char *v = strdup(value);
            if (!v)
                return SBX_ENOMEM;
            free(ws->headers[i].value);
            ws->headers[i].value = v;
            return SBX_OK;
        }
    }
    struct hdr *v = realloc(ws->headers, (ws->n_headers + 1) * sizeof(*v));
    if (!v)
        return SBX_ENOMEM;
    ws->headers = v;
    v[ws->n_headers].name = strdup(name);
    v[ws->n_headers].value = strdup(value);
    if (!v[ws->n_headers].name || !v[ws->n_headers].value) {
        free(v[ws->n_headers].name);
        free(v[ws->n_headers].value);
        return SBX_ENOMEM;
    }
    ws->n_headers++;
    return SBX_OK;
}

void sbx_ws_set_timeout(sbx_ws *ws, double seconds)
{
    if (ws && seconds > 0 && isfinite(seconds))
        ws->timeout_s = seconds;
}

void sbx_ws_set_close_timeout(sbx_ws *ws, double seconds)
{
    if (ws && seconds > 0 && isfinite(seconds))
        ws->close_timeout_s = seconds;
}

void sbx_ws_set_max_message(sbx_ws *ws, size_t bytes)
{
    if (ws)
        ws->max_message = bytes ? bytes : SBX_WS_DEFAULT_MAX_MESSAGE;
}

void sbx_ws_set_max_queue(sbx_ws *ws, size_t bytes)
{
    if (ws)
        ws->max_queue = bytes ? bytes : SBX_WS_DEFAULT_MAX_QUEUE;
}

void sbx_ws_on_open(sbx_ws *ws, sbx_ws_open_cb cb)
{
    if (ws && !ws->owned)
        ws->on_open = cb;
}

void sbx_ws_on_message(sbx_ws *ws, sbx_ws_message_cb cb)
{
    if (ws && !ws->owned)
        ws->on_message = cb;
}

void sbx_ws_on_drain(sbx_ws *ws, sbx_ws_drain_cb cb)
{
    if (ws && !ws->owned)
        ws->on_drain = cb;
}

const char *sbx_ws_protocol(const sbx_ws *ws)
{
    return ws ? ws->protocol : NULL;
}

size_t sbx_ws_queued(const sbx_ws *ws)
{
    return ws ? ws->queued : 0;
}

/* --- errors and the end ---------------------------------------------------- */

/* An error "NAME: WebSocket PATH: what", naming the provider. */
static __attribute__((format(printf, 3, 4))) sbx_error *ws_error(const sbx_ws *ws, int code,
                                                                 const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    const char *name = sbx__http_client_name(ws->c);
    sbx_error *e = sbx_error_new(code, "%s: WebSocket %s: %s", name, ws->path,
                                 n >= 0 ? msg : sbx_strerror(code));
    if (n >= 0)
        free(msg);
    if (e)
        sbx__error_set_provider(e, name);
    return e;
}

/* `e` (taken) with this connection's prefix; its code kept. */
static sbx_error *ws_wrap(const sbx_ws *ws, sbx_error *e)
{
    sbx_error *w = ws_error(ws, e ? sbx_error_code(e) : SBX_ENOMEM, "%s",
                            e ? sbx_error_message(e) : "out of memory");
    sbx_error_free(e);
    return w;
}

static void on_soon(uv_timer_t *t);
static void csock_closed(uv_handle_t *h);

/* Drops the sockets libcurl watched while connecting (before anything closes their fds). */
static void csocks_drop(sbx_ws *ws)
{
    while (ws->csocks) {
        struct csock *s = ws->csocks;
        ws->csocks = s->next;
        if (ws->multi)
            curl_multi_assign(ws->multi, s->fd, NULL);
        uv_poll_stop(&s->poll);
        uv_close((uv_handle_t *)&s->poll, csock_closed);
    }
}

/*
 * Records the end (the first one wins) and stops all I/O now; the close
 * callback runs on the next loop turn (finish), outside whatever call of
 * the user got here.
 */
static void ws_end(sbx_ws *ws, int code, int status, const char *reason, sbx_error *err)
{
    if (ws->state >= WS_ENDING) {
        sbx_error_free(err);
        return;
    }
    ws->state = WS_ENDING;
    ws->end_code = code;
    ws->end_status = status;
    snprintf(ws->end_reason, sizeof(ws->end_reason), "%s", reason ? reason : "");
    ws->end_err = code == SBX_OK ? NULL : err ? err : ws_error(ws, code, "%s", sbx_strerror(code));
    if (code == SBX_OK)
        sbx_error_free(err);
    if (ws->poll_inited)
        uv_poll_stop(&ws->poll);
    csocks_drop(ws);
    uv_timer_stop(&ws->deadline);
    uv_timer_stop(&ws->curl_timer);
    uv_timer_start(&ws->soon, on_soon, 0, 0);
}

static void handle_closed(uv_handle_t *h)
{
    sbx_ws *ws = h->data;
    if (--ws->open_handles == 0)
        ws_release(ws);
}

static void csock_closed(uv_handle_t *h)
{
    struct csock *s = h->data;
    sbx_ws *ws = s->ws;
    free(s);
    if (--ws->open_handles == 0)
        ws_release(ws);
}

/* The end told: the connection closed, the close callback, the handles closed (then freed). */
static void finish(sbx_ws *ws)
{
    if (ws->state == WS_DONE)
        return;
    ws->state = WS_DONE;
    csocks_drop(ws);
    /* The poll stops before libcurl closes the socket under it. */
    if (ws->poll_inited)
        uv_poll_stop(&ws->poll);
    if (ws->easy) {
        curl_multi_remove_handle(ws->multi, ws->easy);
        curl_easy_cleanup(ws->easy);
        ws->easy = NULL;
    }
    if (ws->multi) {
        curl_multi_cleanup(ws->multi);
        ws->multi = NULL;
    }
    sbx__http_hook_remove(&ws->hook);
    sbx_error *err = ws->end_err;
    ws->end_err = NULL;
    ws->on_close(ws, ws->end_status, ws->end_reason, ws->end_code, err, ws->user);
    uv_close((uv_handle_t *)&ws->curl_timer, handle_closed);
    uv_close((uv_handle_t *)&ws->deadline, handle_closed);
    uv_close((uv_handle_t *)&ws->soon, handle_closed);
    if (ws->poll_inited)
        uv_close((uv_handle_t *)&ws->poll, handle_closed);
}

/* The context stops: the connection ends now, on the loop thread. */
static void on_hook_close(struct sbx__http_hook *h)
{
    sbx_ws *ws = (sbx_ws *)((char *)h - offsetof(sbx_ws, hook));
    ws_end(ws, SBX_ECANCELED, SBX_WS_ABNORMAL, NULL,
           ws_error(ws, SBX_ECANCELED, "the context ended first"));
    finish(ws);
}

/* --- sending --------------------------------------------------------------- */

static int next_key(sbx_ws *ws, uint8_t key[4])
{
    /* RFC 6455 section 10.3: unpredictable keys, so that no proxy can be fed chosen bytes. */
    if (ws->keys_left < 4) {
        if (getrandom(ws->keys, sizeof(ws->keys), 0) != (ssize_t)sizeof(ws->keys))
            return SBX_EIO;
        ws->keys_left = sizeof(ws->keys);
    }
    ws->keys_left -= 4;
    memcpy(key, ws->keys + ws->keys_left, 4);
    return SBX_OK;
}

static struct qframe *frame_new(sbx_ws *ws, int opcode, const void *data, size_t len)
{
    uint8_t key[4];
    size_t n = sbx__ws_frame_size(len, true);
    if (next_key(ws, key) < 0)
        return NULL;
    struct qframe *f = malloc(sizeof(*f) + n);
    if (!f)
        return NULL;
    memset(f, 0, sizeof(*f));
    f->len = sbx__ws_frame_write(f->data, opcode, true, data, len, key);
    f->control = (opcode & 0x8) != 0;
    f->is_close = opcode == SBX_WS_CLOSE;
    return f;
}

/*
 * Queues `f`: a control frame after the frame being written (frames never
 * interleave) and after the control frames before it, a message at the end.
 */
static void enqueue(sbx_ws *ws, struct qframe *f, bool ahead)
{
    struct qframe **pp = &ws->qhead;
    if (ahead) {
        if (*pp && (*pp)->off > 0)
            pp = &(*pp)->next;
        while (*pp && (*pp)->control && !(*pp)->is_close)
            pp = &(*pp)->next;
    } else {
        while (*pp)
            pp = &(*pp)->next;
    }
    f->next = *pp;
    *pp = f;
    ws->queued += f->len - f->off;
}

/* Drops the queued frames not yet begun: all of them, or (`data_only`) the messages. */
static void queue_drop(sbx_ws *ws, bool data_only)
{
    struct qframe **pp = &ws->qhead;
    while (*pp) {
        struct qframe *f = *pp;
        if (f->off == 0 && (!data_only || !f->control)) {
            *pp = f->next;
            ws->queued -= f->len;
            free(f);
        } else {
            pp = &f->next;
        }
    }
}

static void on_poll(uv_poll_t *h, int status, int events);

/* Whether the server's bytes are read: a pause holds messages, never the handshake or a close. */
static bool reading(const sbx_ws *ws)
{
    return !ws->paused || ws->close_received || ws->state == WS_HANDSHAKE;
}

static bool output_pending(const sbx_ws *ws)
{
    if (ws->state == WS_HANDSHAKE)
        return ws->req_off < ws->req.len;
    return (ws->state == WS_OPEN || ws->state == WS_CLOSING) && ws->qhead;
}

/* Watches for what the connection waits on: input unless paused, output when some is held. */
static void update_poll(sbx_ws *ws)
{
    if (!ws->poll_inited || ws->state >= WS_ENDING)
        return;
    int ev = 0;
    if (reading(ws))
        ev |= UV_READABLE;
    if (output_pending(ws))
        ev |= UV_WRITABLE;
    if (ev == ws->poll_events)
        return;
    ws->poll_events = ev;
    if (ev)
        uv_poll_start(&ws->poll, ev, on_poll);
    else
        uv_poll_stop(&ws->poll);
}

static void closing_deadline(sbx_ws *ws);

/* Writes what the socket takes: 0, or the libcurl error that ended the writing. */
static CURLcode write_out(sbx_ws *ws)
{
    while (ws->state < WS_ENDING && output_pending(ws)) {
        const uint8_t *p;
        size_t n, sent = 0;
        if (ws->state == WS_HANDSHAKE) {
            p = (const uint8_t *)ws->req.data + ws->req_off;
            n = ws->req.len - ws->req_off;
        } else {
            p = ws->qhead->data + ws->qhead->off;
            n = ws->qhead->len - ws->qhead->off;
        }
        ws->errbuf[0] = 0;
        CURLcode rc = curl_easy_send(ws->easy, p, n, &sent);
        if (rc == CURLE_AGAIN)
            break;
        if (rc != CURLE_OK)
            return rc;
        if (ws->state == WS_HANDSHAKE) {
            ws->req_off += sent;
            continue;
        }
        struct qframe *f = ws->qhead;
        f->off += sent;
        ws->queued -= sent;
        if (f->off == f->len) {
            ws->qhead = f->next;
            if (f->is_close) {
                ws->close_sent = true;
                /* Nothing follows a close frame (section 5.5.1). */
                queue_drop(ws, false);
            }
            free(f);
        }
    }
    return CURLE_OK;
}

/*
 * Writes what the socket takes, and watches for the rest. `from_loop`:
 * called from the loop (a poll event), where an emptied queue may tell the
 * drain callback; from sbx_ws_send it may not (no callback inside the
 * user's call).
 */
static void flush(sbx_ws *ws, bool from_loop)
{
    bool had = ws->qhead != NULL;
    CURLcode rc = write_out(ws);
    if (rc != CURLE_OK) {
        ws_end(ws, SBX_EIO, SBX_WS_ABNORMAL, NULL,
               ws_error(ws, SBX_EIO, "sending failed: %s",
                        ws->errbuf[0] ? ws->errbuf : curl_easy_strerror(rc)));
        return;
    }
    update_poll(ws);
    if (from_loop && had && !ws->qhead && ws->on_drain &&
        (ws->state == WS_OPEN || ws->state == WS_CLOSING))
        ws->on_drain(ws, ws->user);
}

int sbx_ws_send(sbx_ws *ws, int opcode, const void *data, size_t len, sbx_error **err)
{
    if (!ws || (!data && len))
        return sbx__set_error(err, SBX_EINVAL, "sbx_ws_send: a connection and data");
    bool control = opcode == SBX_WS_PING || opcode == SBX_WS_PONG;
    if (opcode != SBX_WS_TEXT && opcode != SBX_WS_BINARY && !control)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_ws_send: opcode %d is not SBX_WS_TEXT, _BINARY, _PING or "
                              "_PONG",
                              opcode);
    if (ws->state == WS_NEW || ws->state >= WS_CLOSING || ws->close_queued)
        return sbx__set_error(err, SBX_ESTATE, "%s: WebSocket %s: %s", sbx__http_client_name(ws->c),
                              ws->path,
                              ws->state == WS_NEW ? "not connected (sbx_ws_connect)"
                                                  : "the connection is closing or closed");
    if (control && len > SBX__WS_MAX_CONTROL)
        return sbx__set_error(
            err, SBX_EINVAL, "sbx_ws_send: a ping or pong carries at most 125 bytes, not %zu", len);
    if (opcode == SBX_WS_TEXT && !sbx__utf8_valid(data, len))
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_ws_send: a text message must be UTF-8 (send binary instead)");
    size_t n = sbx__ws_frame_size(len, true);
    if (!control && n > ws->max_queue)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_ws_send: a message of %zu bytes is larger than the send "
                              "queue's bound of %zu (sbx_ws_set_max_queue)",
                              len, ws->max_queue);
    if (!control && ws->queued + n > ws->max_queue)
        return sbx__set_error(err, SBX_ESTATE,
                              "%s: WebSocket %s: the send queue is full (%zu bytes queued, %zu at "
                              "most): wait for the drain callback",
                              sbx__http_client_name(ws->c), ws->path, ws->queued, ws->max_queue);
    struct qframe *f = frame_new(ws, opcode, data, len);
    if (!f)
        return sbx__set_error(err, SBX_ENOMEM, "sbx_ws_send: out of memory or randomness");
    enqueue(ws, f, control);
    if (ws->state == WS_OPEN)
        flush(ws, false);
    return SBX_OK;
}

/* The close frame this side sends: after the messages queued (a close), or ahead (a failure). */
static void queue_close(sbx_ws *ws, int status, const char *reason, bool drop_unsent)
{
    if (ws->close_queued)
        return;
    uint8_t pl[SBX__WS_MAX_CONTROL];
    size_t n = sbx__ws_close_payload(pl, status, reason);
    struct qframe *f = frame_new(ws, SBX_WS_CLOSE, pl, n);
    if (!f)
        return; /* the connection ends anyway: without a close frame */
    if (drop_unsent)
        queue_drop(ws, true);
    enqueue(ws, f, false);
    ws->close_queued = true;
}

int sbx_ws_close(sbx_ws *ws, int status, const char *reason, sbx_error **err)
{
    if (!ws)
        return sbx__set_error(err, SBX_EINVAL, "sbx_ws_close: no connection");
    if ((status != 0 && !sbx__ws_status_ok(status)) || (status == 0 && reason && *reason))
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_ws_close: %d is not a close code that may be sent (1000-1003, "
                              "1007-1014, 3000-4999; 0 for none, without a reason)",
                              status);
    if (reason && (strlen(reason) > SBX__WS_MAX_REASON || !sbx__utf8_valid(reason, strlen(reason))))
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_ws_close: a reason is UTF-8 of at most 123 bytes");
    if (ws->state == WS_NEW || ws->state >= WS_CLOSING)
        return sbx__set_error(
            err, SBX_ESTATE, "%s: WebSocket %s: %s", sbx__http_client_name(ws->c), ws->path,
            ws->state == WS_NEW ? "not connected" : "the connection is closing or closed");
    if (ws->state != WS_OPEN) {
        sbx_ws_cancel(ws);
        return SBX_OK;
    }
    queue_close(ws, status, reason, false);
    ws->state = WS_CLOSING;
    closing_deadline(ws);
    flush(ws, false);
    return SBX_OK;
}

void sbx_ws_cancel(sbx_ws *ws)
{
    if (!ws || ws->state == WS_NEW || ws->state >= WS_ENDING)
        return;
    ws_end(ws, SBX_ECANCELED, SBX_WS_ABNORMAL, NULL, ws_error(ws, SBX_ECANCELED, "cancelled"));
}

void sbx_ws_pause(sbx_ws *ws)
{
    if (!ws || ws->state >= WS_ENDING || ws->paused)
        return;
    ws->paused = true;
    update_poll(ws);
}

void sbx_ws_resume(sbx_ws *ws)
{
    if (!ws || !ws->paused)
        return;
    ws->paused = false;
    if (ws->state == WS_NEW || ws->state >= WS_ENDING)
        return;
    update_poll(ws);
    /* Bytes may wait in our buffer or in TLS's, where no poll sees them: read on the next turn. */
    ws->want_read = true;
    uv_timer_start(&ws->soon, on_soon, 0, 0);
}

/* --- receiving ------------------------------------------------------------- */

static void on_deadline(uv_timer_t *t)
{
    sbx_ws *ws = t->data;
    if (ws->state == WS_CLOSING) {
        if (ws->close_received && ws->close_sent) {
            /* Both close frames went; the server only kept its end open: a clean close. */
            ws_end(ws, SBX_OK, ws->peer_status, ws->peer_reason, NULL);
            return;
        }
        ws_end(ws, SBX_ETIMEDOUT, SBX_WS_ABNORMAL, NULL,
               ws_error(ws, SBX_ETIMEDOUT,
                        "the closing handshake did not end within %g s: connection dropped",
                        ws->close_timeout_s));
        return;
    }
    ws_end(ws, SBX_ETIMEDOUT, SBX_WS_ABNORMAL, NULL,
           ws_error(ws, SBX_ETIMEDOUT, "no open WebSocket within %g s (%s)", ws->timeout_s,
                    ws->state == WS_CONNECTING ? "still connecting"
                                               : "no answer to the upgrade request"));
}

/* Arms the close timeout once, when the closing handshake begins. */
static void closing_deadline(sbx_ws *ws)
{
    if (ws->deadline_closing)
        return;
    ws->deadline_closing = true;
    uv_timer_start(&ws->deadline, on_deadline, (uint64_t)(ws->close_timeout_s * 1000), 0);
}

/* The server broke the protocol: a close frame with the code (best effort), then the end. */
static void fail_protocol(sbx_ws *ws, sbx_error *e)
{
    int status = sbx__ws_decoder_close_code(&ws->dec);
    if (!ws->close_queued)
        queue_close(ws, status, NULL, true);
    /* Once, without waiting: the protocol error is the news, not a failed send. */
    (void)write_out(ws);
    int code = e ? sbx_error_code(e) : SBX_EPROTO;
    ws_end(ws, code, status, NULL, ws_wrap(ws, e));
}

static void on_event(sbx_ws *ws, const sbx__ws_event *ev)
{
    switch (ev->opcode) {
    case SBX_WS_PING:
        /* Only the latest ping needs its pong (section 5.5.3): a flood of pings queues one. */
        if (!ws->close_queued) {
            for (struct qframe **pp = &ws->qhead; *pp; pp = &(*pp)->next) {
                if ((*pp)->auto_pong && (*pp)->off == 0) {
                    struct qframe *old = *pp;
                    *pp = old->next;
                    ws->queued -= old->len;
                    free(old);
                    break;
                }
            }
            struct qframe *f = frame_new(ws, SBX_WS_PONG, ev->data, ev->len);
            if (!f) {
                ws_end(ws, SBX_ENOMEM, SBX_WS_ABNORMAL, NULL,
                       ws_error(ws, SBX_ENOMEM, "out of memory for a pong"));
                return;
            }
            f->auto_pong = true;
            enqueue(ws, f, true);
            flush(ws, true);
        }
        break;
    case SBX_WS_CLOSE:
        ws->close_received = true;
        ws->peer_status = ev->status;
        snprintf(ws->peer_reason, sizeof(ws->peer_reason), "%s", ev->reason);
        /* The answer echoes the server's code (section 5.5.1); what was not begun is dropped. */
        queue_close(ws, ev->status == SBX_WS_NO_STATUS ? 0 : ev->status, NULL, true);
        ws->state = WS_CLOSING;
        closing_deadline(ws);
        flush(ws, true);
        return;
    default:
        break;
    }
    if (ws->on_message && ws->state < WS_ENDING)
        ws->on_message(ws, ev->opcode, ev->data, ev->len, ws->user);
}

static void handshake_done(sbx_ws *ws)
{
    int status = 0;
    char *proto = NULL;
    sbx_error *e = NULL;
    int rc = sbx__ws_head_check(&ws->head, ws->key, (const char *const *)ws->protocols,
                                ws->n_protocols, &status, &proto, &e);
    sbx__ws_head_free(&ws->head);
    if (rc < 0) {
        /* A refusal (401, 404, ...) gets the client's code for its status, as a request would. */
        int code =
            status >= 400 && status < 600 ? sbx__http_client_code_for_status(ws->c, status) : rc;
        sbx_error *w = ws_wrap(ws, e);
        if (w && code != rc) {
            sbx_error *x = sbx_error_new(code, "%s", sbx_error_message(w));
            if (x)
                sbx__error_set_provider(x, sbx__http_client_name(ws->c));
            sbx_error_free(w);
            w = x;
        }
        ws_end(ws, code, SBX_WS_ABNORMAL, NULL, w);
        return;
    }
    ws->protocol = proto;
    ws->state = WS_OPEN;
    uv_timer_stop(&ws->deadline);
    sbx_log(SBX_LOG_DEBUG, "%s: WebSocket %s: open%s%s", sbx__http_client_name(ws->c), ws->path,
            proto ? ", subprotocol " : "", proto ? proto : "");
    if (ws->on_open)
        ws->on_open(ws, ws->user);
    /* What was sent before the open goes now. */
    flush(ws, true);
}

/* Reads what is in rbuf: the rest of the 101, then frames, until paused or the end. */
static void process(sbx_ws *ws)
{
    while (ws->roff < ws->rlen && ws->state < WS_ENDING && reading(ws)) {
        size_t used = 0;
        sbx_error *e = NULL;
        if (ws->state == WS_HANDSHAKE) {
            int rc =
                sbx__ws_head_feed(&ws->head, ws->rbuf + ws->roff, ws->rlen - ws->roff, &used, &e);
            ws->roff += used;
            if (rc < 0)
                ws_end(ws, rc, SBX_WS_ABNORMAL, NULL, ws_wrap(ws, e));
            else if (rc == 1)
                handshake_done(ws);
            continue;
        }
        sbx__ws_event ev;
        int rc = sbx__ws_decode(&ws->dec, ws->rbuf + ws->roff, ws->rlen - ws->roff, &used, &ev, &e);
        ws->roff += used;
        if (rc < 0)
            fail_protocol(ws, e);
        else if (rc == 1)
            on_event(ws, &ev);
    }
}

/* The server ended the connection (or it broke while closing). */
static void peer_gone(sbx_ws *ws, const char *why)
{
    if (ws->close_received) {
        ws_end(ws, SBX_OK, ws->peer_status, ws->peer_reason, NULL);
        return;
    }
    ws_end(ws, SBX_EIO, SBX_WS_ABNORMAL, NULL,
           ws_error(ws, SBX_EIO, "%s",
                    ws->state == WS_HANDSHAKE ? "the server closed the connection before answering "
                                                "the upgrade"
                                              : why));
}

/*
 * Reads until libcurl says there is no more (CURLE_AGAIN): TLS may hold
 * decrypted bytes the socket no longer shows, so one read per readable
 * event would leave them until the server sent again. Past the budget the
 * rest waits for the next loop turn.
 */
static void read_some(sbx_ws *ws)
{
    size_t budget = WS_READ_BUDGET;
    for (;;) {
        process(ws);
        if (ws->state >= WS_ENDING || !reading(ws) || ws->roff < ws->rlen)
            return;
        if (budget == 0) {
            ws->want_read = true;
            uv_timer_start(&ws->soon, on_soon, 0, 0);
            return;
        }
        size_t n = 0;
        ws->errbuf[0] = 0;
        CURLcode rc = curl_easy_recv(ws->easy, ws->rbuf, WS_READ_CHUNK, &n);
        if (rc == CURLE_AGAIN)
            return;
        if (rc != CURLE_OK) {
            char why[CURL_ERROR_SIZE + 40];
            snprintf(why, sizeof(why), "receiving failed: %s",
                     ws->errbuf[0] ? ws->errbuf : curl_easy_strerror(rc));
            peer_gone(ws, why);
            return;
        }
        if (n == 0) {
            peer_gone(ws, "the server closed the connection without a close frame");
            return;
        }
        ws->rlen = n;
        ws->roff = 0;
        budget = n >= budget ? 0 : budget - n;
    }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    sbx_ws *ws = h->data;
    if (ws->state >= WS_ENDING)
        return;
    if (status < 0) {
        /*
         * An error on the socket (libuv reports EPOLLERR as EBADF: a reset,
         * say) must not hide what the peer sent before it: a close frame
         * already received (a server that closes with a code and then resets
         * the connection) is read and ends the connection as that close.
         */
        if (ws->state < WS_ENDING)
            read_some(ws);
        if (ws->state < WS_ENDING)
            ws_end(ws, SBX_EIO, SBX_WS_ABNORMAL, NULL,
                   ws_error(ws, SBX_EIO, "the connection failed: %s", uv_strerror(status)));
        return;
    }
    if (events & UV_WRITABLE)
        flush(ws, true);
    if ((events & UV_READABLE) && ws->state < WS_ENDING)
        read_some(ws);
}

static void on_soon(uv_timer_t *t)
{
    sbx_ws *ws = t->data;
    if (ws->state == WS_ENDING) {
        finish(ws);
        return;
    }
    if (ws->want_read && ws->state >= WS_HANDSHAKE && ws->state < WS_ENDING) {
        ws->want_read = false;
        read_some(ws);
    }
}

/* --- connecting ------------------------------------------------------------ */

static void connected(sbx_ws *ws)
{
    curl_socket_t fd = CURL_SOCKET_BAD;
    if (curl_easy_getinfo(ws->easy, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
        fd == CURL_SOCKET_BAD) {
        ws_end(ws, SBX_EIO, SBX_WS_ABNORMAL, NULL,
               ws_error(ws, SBX_EIO, "connected, but libcurl gives no socket"));
        return;
    }
    /* libcurl's polls stop before ours starts: one fd, one watcher in the loop. */
    csocks_drop(ws);
    uv_timer_stop(&ws->curl_timer);
    int rc = uv_poll_init_socket(ws->loop, &ws->poll, fd);
    if (rc < 0) {
        ws_end(ws, SBX_EIO, SBX_WS_ABNORMAL, NULL,
               ws_error(ws, SBX_EIO, "cannot watch the connection: %s", uv_strerror(rc)));
        return;
    }
    ws->poll.data = ws;
    ws->poll_inited = true;
    ws->open_handles++;
    ws->state = WS_HANDSHAKE;
    flush(ws, true);
}

static void check_connect(sbx_ws *ws)
{
    CURLMsg *m;
    int left = 0;
    while (ws->state == WS_CONNECTING && ws->multi &&
           (m = curl_multi_info_read(ws->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURLcode res = m->data.result;
        if (res == CURLE_OK) {
            connected(ws);
            return;
        }
        const char *why = ws->errbuf[0] ? ws->errbuf : curl_easy_strerror(res);
        int code = res == CURLE_OPERATION_TIMEDOUT ? SBX_ETIMEDOUT
                   : res == CURLE_OUT_OF_MEMORY    ? SBX_ENOMEM
                                                   : SBX_EIO;
        ws_end(ws, code, SBX_WS_ABNORMAL, NULL,
               ws_error(ws, code, "connecting to %s: %s", sbx__http_client_base_url(ws->c), why));
        return;
    }
}

static void on_csock_poll(uv_poll_t *h, int status, int events)
{
    struct csock *s = h->data;
    sbx_ws *ws = s->ws;
    if (ws->state != WS_CONNECTING)
        return;
    int flags = status < 0 ? CURL_CSELECT_ERR : 0;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running = 0;
    curl_multi_socket_action(ws->multi, s->fd, flags, &running);
    check_connect(ws);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    sbx_ws *ws = userp;
    struct csock *s = socketp;
    /* After the connect libcurl has no socket of ours to watch (csocks_drop unassigned them). */
    if (ws->state != WS_CONNECTING)
        return 0;
    if (what == CURL_POLL_REMOVE) {
        if (!s)
            return 0;
        curl_multi_assign(ws->multi, fd, NULL);
        for (struct csock **pp = &ws->csocks; *pp; pp = &(*pp)->next) {
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        }
        uv_poll_stop(&s->poll);
        uv_close((uv_handle_t *)&s->poll, csock_closed);
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return -1;
        if (uv_poll_init_socket(ws->loop, &s->poll, fd) < 0) {
            free(s);
            return -1;
        }
        s->fd = fd;
        s->ws = ws;
        s->poll.data = s;
        s->next = ws->csocks;
        ws->csocks = s;
        ws->open_handles++;
        curl_multi_assign(ws->multi, fd, s);
    }
    int ev = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        ev |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        ev |= UV_WRITABLE;
    uv_poll_start(&s->poll, ev, on_csock_poll);
    return 0;
}

static void on_curl_timeout(uv_timer_t *t)
{
    sbx_ws *ws = t->data;
    if (ws->state != WS_CONNECTING)
        return;
    int running = 0;
    curl_multi_socket_action(ws->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_connect(ws);
}

/* libcurl asks for a wake-up: only the timer is armed here, never any work. */
static int on_curl_timer(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    sbx_ws *ws = userp;
    if (ws->state != WS_CONNECTING)
        return 0;
    if (timeout_ms < 0)
        uv_timer_stop(&ws->curl_timer);
    else
        uv_timer_start(&ws->curl_timer, on_curl_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

/* Sockets made close-on-exec atomically: a fork elsewhere in the process cannot leak them. */
static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
    (void)clientp;
    (void)purpose;
    int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    return fd < 0 ? CURL_SOCKET_BAD : fd;
}

/* The upgrade request (RFC 6455 section 4.1), with the client's headers and ours. */
static int build_request(sbx_ws *ws, sbx_error **err)
{
    _cleanup_free_ char *url = sbx__printf("%s%s", sbx__http_client_base_url(ws->c), ws->path);
    CURLU *u = curl_url();
    char *host = NULL, *port = NULL, *path = NULL, *query = NULL;
    int rc = SBX_OK;
    if (!url || !u) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    if (curl_url_set(u, CURLUPART_URL, url, CURLU_PATH_AS_IS) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
        curl_url_get(u, CURLUPART_PATH, &path, 0) != CURLUE_OK) {
        rc = sbx__set_error(err, SBX_EINVAL, "%s: WebSocket %s: '%.200s' is not a URL",
                            sbx__http_client_name(ws->c), ws->path, url);
        goto out;
    }
    curl_url_get(u, CURLUPART_PORT, &port, 0); /* none when the scheme's default */
    curl_url_get(u, CURLUPART_QUERY, &query, 0);
    uint8_t nonce[16];
    if (getrandom(nonce, sizeof(nonce), 0) != (ssize_t)sizeof(nonce)) {
        rc = sbx__set_errno(err, SBX_EIO, errno, "%s: WebSocket %s: no random bytes for its key",
                            sbx__http_client_name(ws->c), ws->path);
        goto out;
    }
    sbx__ws_key(nonce, ws->key);
    sbx_buf *b = &ws->req;
    int bad = sbx__buf_printf(b,
                              "GET %s%s%s HTTP/1.1\r\nHost: %s%s%s\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                              "Sec-WebSocket-Version: 13\r\n",
                              path, query ? "?" : "", query ? query : "", host, port ? ":" : "",
                              port ? port : "", ws->key);
    for (size_t i = 0; i < ws->n_protocols; i++)
        bad |= sbx__buf_printf(b, "%s%s%s", i ? ", " : "Sec-WebSocket-Protocol: ", ws->protocols[i],
                               i + 1 == ws->n_protocols ? "\r\n" : "");
    size_t nh = sbx__http_client_n_headers(ws->c);
    for (size_t i = 0; i < nh; i++) {
        const char *name, *value;
        sbx__http_client_header(ws->c, i, &name, &value);
        bool over = reserved_header(name);
        for (size_t j = 0; j < ws->n_headers; j++)
            over |= !strcasecmp(ws->headers[j].name, name);
        if (!over)
            bad |= sbx__buf_printf(b, "%s: %s\r\n", name, value);
    }
    for (size_t j = 0; j < ws->n_headers; j++)
        bad |= sbx__buf_printf(b, "%s: %s\r\n", ws->headers[j].name, ws->headers[j].value);
    bad |= sbx__buf_append(b, "\r\n", 2);
    if (bad)
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
out:
    curl_free(host);
    curl_free(port);
    curl_free(path);
    curl_free(query);
    curl_url_cleanup(u);
    return rc;
}

/* On the loop thread: everything that can fail at once fails before any handle exists. */
static int start_on_loop(sbx_ws *ws, void *loop, sbx_error **err)
{
    int rc = build_request(ws, err);
    if (rc < 0)
        return rc;
    ws->rbuf = malloc(WS_READ_CHUNK);
    ws->multi = curl_multi_init();
    ws->easy = sbx__http_easy_new(ws->c, ws->path, ws->errbuf);
    if (!ws->rbuf || !ws->multi || !ws->easy)
        goto nomem;
    CURL *h = ws->easy;
    curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
    /* ALPN offers http/1.1 alone: a server that picked h2 could not read the upgrade. */
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    /* Through a proxy (its environment variables), a tunnel: the upgrade is ours to write. */
    curl_easy_setopt(h, CURLOPT_HTTPPROXYTUNNEL, 1L);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(h, CURLOPT_PRIVATE, ws);
    curl_multi_setopt(ws->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(ws->multi, CURLMOPT_SOCKETDATA, ws);
    curl_multi_setopt(ws->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(ws->multi, CURLMOPT_TIMERDATA, ws);
    sbx__ws_decoder_init(&ws->dec, ws->max_message, false);
    ws->hook.close = on_hook_close;
    if ((rc = sbx__http_hook_add(loop, &ws->hook, err)) < 0)
        goto fail;
    /* From here the connection owns the object: every end goes through the close callback. */
    ws->loop = loop;
    ws->owned = true;
    ws->state = WS_CONNECTING;
    uv_timer_init(loop, &ws->curl_timer);
    uv_timer_init(loop, &ws->deadline);
    uv_timer_init(loop, &ws->soon);
    ws->curl_timer.data = ws->deadline.data = ws->soon.data = ws;
    ws->open_handles = 3;
    uv_timer_start(&ws->deadline, on_deadline, (uint64_t)(ws->timeout_s * 1000), 0);
    /* libcurl arms its timer from here; its first work runs from the loop, never inside connect. */
    if (curl_multi_add_handle(ws->multi, ws->easy) != CURLM_OK)
        ws_end(ws, SBX_ENOMEM, SBX_WS_ABNORMAL, NULL,
               ws_error(ws, SBX_ENOMEM, "libcurl cannot start the connection"));
    return SBX_OK;
nomem:
    rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
fail:
    if (ws->easy)
        curl_easy_cleanup(ws->easy);
    if (ws->multi)
        curl_multi_cleanup(ws->multi);
    ws->easy = NULL;
    ws->multi = NULL;
    free(ws->rbuf);
    ws->rbuf = NULL;
    sbx__buf_free(&ws->req);
    sbx__ws_decoder_free(&ws->dec);
    return rc;
}

struct posted {
    sbx_ws *ws;
    void *loop;
};

static void connect_posted(void *data)
{
    struct posted *p = data;
    sbx_ws *ws = p->ws;
    void *loop = p->loop;
    free(p);
    sbx_error *e = NULL;
    int rc;
    /* A task the context runs after its loop closed (it ended meanwhile) runs off the loop. */
    if (!sbx__context_on_loop(sbx__context_of_uv(loop)))
        rc = sbx__fail(&e, ws_error(ws, SBX_ECANCELED, "the context ended first"));
    else
        rc = start_on_loop(ws, loop, &e);
    if (rc < 0) {
        ws->on_close(ws, SBX_WS_ABNORMAL, "", rc, e, ws->user);
        ws_release(ws);
    }
}

int sbx_ws_connect(sbx_ws *ws, void *loop, sbx_ws_close_cb on_close, void *user, sbx_error **err)
{
    if (!ws || !loop || !on_close || ws->owned)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_ws_connect: a WebSocket, connected once, with a loop and a "
                              "close callback");
    ws->on_close = on_close;
    ws->user = user;
    sbx_context *ctx = sbx__context_of_uv(loop);
    if (sbx__context_on_loop(ctx))
        return start_on_loop(ws, loop, err);
    struct posted *p = malloc(sizeof(*p));
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    p->ws = ws;
    p->loop = loop;
    /* Owned before the post: the loop may run the task, and free `ws`, before it returns. */
    ws->owned = true;
    int rc = sbx__context_post(ctx, connect_posted, p);
    if (rc < 0) {
        ws->owned = false;
        free(p);
        return sbx__set_error(err, rc, "sbx_ws_connect: the context's loop has ended");
    }
    return SBX_OK;
}
