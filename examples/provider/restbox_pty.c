/*
 * restbox's terminals: provider ABI 3's pty_open over a WebSocket
 * (<sbx/ws.h>), the template for a remote service's PTY (OpenSandbox's
 * execd, E2B, Daytona). The session's bytes never touch sbx-agent: the core
 * hands us an sbx_pty_session, we connect, and from then on we translate.
 *
 * The service (tests/remote/api_server.py, modelled on OpenSandbox's PTY):
 *   GET /v1/boxes/ID/pty            a new session: our first message is
 *                                   {"type": "open", ...what to run...}
 *   GET /v1/boxes/ID/pty/N?takeover=1&since=K   attach to session N
 * Binary frames carry a channel byte: 0x00 stdin (ours), 0x01 stdout, 0x02
 * stderr, 0x03 a replay (u64 big-endian offset, then stdout bytes). Text
 * frames are JSON: resize, signal and end from us; connected, exit and error
 * from the service. Close code 4001: another client took the session over;
 * 1008 before connected: it already has a client.
 *
 * One struct rpty a session, living from pty_open until both the core has
 * closed it (ops.close) and the WebSocket has ended: then the op completes,
 * which tells the core we let go.
 */
#define _GNU_SOURCE /* asprintf */

#include <sbx.h>
#include <sbx/provider.h>
#include <sbx/ws.h>

#include "restbox.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest message we accept from the service: output comes in far smaller chunks. */
#define RP_MAX_MESSAGE ((size_t)1 << 20)

struct rpty {
    sbx_op *op;
    sbx_pty_session *s;
    sbx_ws *ws;          /* NULL once its close callback ran */
    bool ready;          /* "connected" came: the core may call us */
    bool core_closed;    /* the core's close came: complete once the WebSocket ended */
    sbx_error *why;      /* why we ended the connection before "connected" */
};

/* Both ends are done: tell the core we let go (no more calls either way), and free. */
static void rp_finish(struct rpty *c, int code, sbx_error *err)
{
    sbx_op_complete(c->op, code, err, NULL);
    sbx_error_free(c->why);
    free(c);
}

/* Sends one JSON text message; a full or closed connection fails the session. */
static void rp_send_json(struct rpty *c, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    sbx_error *err = NULL;
    if (!c->ws || !text || sbx_ws_send(c->ws, SBX_WS_TEXT, text, strlen(text), &err) < 0)
        sbx_pty_session_fail(c->s, err ? sbx_error_prefix(err, "restbox: terminal")
                                       : sbx_error_new(SBX_EIO, "restbox: the terminal's "
                                                                "connection is gone"));
    free(text);
}

/* --- the core's calls (loop thread, from sbx_pty_session_ready to close) ---------- */

static void rp_write(void *conn, const void *data, size_t len)
{
    struct rpty *c = conn;
    uint8_t *frame = malloc(len + 1);
    sbx_error *err = NULL;
    if (!frame || !c->ws) {
        free(frame);
        sbx_pty_session_fail(c->s, sbx_error_new(SBX_EIO, "restbox: the terminal's "
                                                          "connection is gone"));
        return;
    }
    frame[0] = 0x00; /* stdin; empty: EOF */
    memcpy(frame + 1, data, len);
    if (sbx_ws_send(c->ws, SBX_WS_BINARY, frame, len + 1, &err) < 0)
        sbx_pty_session_fail(c->s, sbx_error_prefix(err, "restbox: terminal input"));
    free(frame);
}

static void rp_resize(void *conn, unsigned rows, unsigned cols)
{
    rp_send_json(conn, json_pack("{s:s, s:I, s:I}", "type", "resize", "rows", (json_int_t)rows,
                                 "cols", (json_int_t)cols));
}

static void rp_signal(void *conn, int signo, const char *name)
{
    (void)signo;
    rp_send_json(conn, json_pack("{s:s, s:s}", "type", "signal", "signal", name));
}

static void rp_flow(void *conn, int pause)
{
    struct rpty *c = conn;
    /* Stop reading the socket: TCP then holds the service back. */
    if (c->ws && pause)
        sbx_ws_pause(c->ws);
    else if (c->ws)
        sbx_ws_resume(c->ws);
}

static void rp_close(void *conn, int end)
{
    struct rpty *c = conn;
    c->core_closed = true;
    if (!c->ws) {
        rp_finish(c, SBX_OK, NULL);
        return;
    }
    if (end)
        rp_send_json(c, json_pack("{s:s}", "type", "end"));
    /* A paused socket would not see the service's close: read again. */
    sbx_ws_resume(c->ws);
    if (sbx_ws_close(c->ws, SBX_WS_NORMAL, NULL, NULL) < 0)
        sbx_ws_cancel(c->ws); /* closing already: make sure it ends */
}

static const struct sbx_pty_session_ops rp_ops = {
    .write = rp_write,
    .resize = rp_resize,
    .signal = rp_signal,
    .flow = rp_flow,
    .close = rp_close,
};

/* --- the service's messages ----------------------------------------------------------- */

/* Ends the connection before "connected", remembering why (the open's error). */
static void rp_refuse(struct rpty *c, sbx_error *why)
{
    if (!c->why)
        c->why = why;
    else
        sbx_error_free(why);
    sbx_ws_cancel(c->ws);
}

static void rp_text(struct rpty *c, const char *data, size_t len)
{
    json_t *j = json_loadb(data, len, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) {
        sbx_error *e = sbx_error_new(SBX_EPROTO, "restbox: the terminal service sent a message "
                                                 "that is not a JSON object with a type");
        if (c->ready)
            sbx_pty_session_fail(c->s, e);
        else
            rp_refuse(c, e);
    } else if (!strcmp(type, "connected") && !c->ready) {
        json_int_t id = json_integer_value(json_object_get(j, "session"));
        if (id < 1 || id > UINT32_MAX) {
            rp_refuse(c, sbx_error_new(SBX_EPROTO, "restbox: the terminal service named no "
                                                   "session id (1..2^32-1)"));
        } else if (sbx_pty_session_ready(c->s, &rp_ops, c, (unsigned)id) == SBX_OK) {
            c->ready = true;
        } else {
            rp_refuse(c, sbx_error_new(SBX_EPROVIDER, "restbox: the session was refused"));
        }
    } else if (!strcmp(type, "exit")) {
        /* A status is 0..255 (128+N for a signal); anything else is "unknown", -1. */
        json_int_t code = json_integer_value(json_object_get(j, "exit_code"));
        bool valid = json_is_integer(json_object_get(j, "exit_code")) && code >= 0 && code <= 255;
        sbx_pty_session_exit(c->s, valid ? (int)code : -1);
    } else if (!strcmp(type, "error")) {
        const char *msg = json_string_value(json_object_get(j, "error"));
        sbx_error *e = sbx_error_new(SBX_EPTY, "restbox: the PTY session failed: %.200s",
                                     msg ? msg : "(no reason given)");
        if (c->ready)
            sbx_pty_session_fail(c->s, e);
        else
            rp_refuse(c, e);
    }
    /* Other types (ping-like notices of a newer service) are ignored. */
    json_decref(j);
}

static void rp_message(sbx_ws *ws, int opcode, const void *data, size_t len, void *user)
{
    (void)ws;
    struct rpty *c = user;
    const uint8_t *d = data;
    if (opcode == SBX_WS_TEXT) {
        rp_text(c, data, len);
    } else if (opcode == SBX_WS_BINARY && len > 1 && (d[0] == 0x01 || d[0] == 0x02)) {
        sbx_pty_session_output(c->s, d[0] == 0x01 ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR,
                               SBX_PTY_OFFSET_NEXT, d + 1, len - 1);
    } else if (opcode == SBX_WS_BINARY && len > 9 && d[0] == 0x03) {
        unsigned long long off = 0;
        for (int i = 1; i <= 8; i++)
            off = off << 8 | d[i];
        sbx_pty_session_output(c->s, SBX_STREAM_STDOUT, off, d + 9, len - 9);
    }
    /* Empty frames and unknown channels are dropped, as OpenSandbox's clients do. */
}

static void rp_closed(sbx_ws *ws, int status, const char *reason, int code, sbx_error *err,
                      void *user)
{
    (void)ws;
    struct rpty *c = user;
    c->ws = NULL;
    if (!c->ready) {
        /* Never connected: the open's error. */
        sbx_error *e = c->why;
        c->why = NULL;
        if (!e && status == SBX_WS_POLICY)
            e = sbx_error_new(SBX_EPTY, "PTY session %u already has an attached client (pass "
                              "takeover to evict it)", sbx_pty_session_attach_id(c->s));
        if (!e)
            e = err ? sbx_error_prefix(err, "restbox: opening a terminal")
                    : sbx_error_new(SBX_EPTY, "restbox: the terminal service closed the session "
                                              "before it ran (%d %.100s)", status, reason);
        else
            sbx_error_free(err);
        rp_finish(c, sbx_error_code(e), e);
        return;
    }
    (void)code;
    if (status == 4001) {
        sbx_error_free(err);
        sbx_pty_session_fail(c->s, sbx_error_new(SBX_EPTY, "taken over by another client"));
    } else if (!c->core_closed) {
        /* After an exit this is ignored; else the session is lost. */
        sbx_pty_session_fail(c->s, err ? sbx_error_prefix(err, "restbox: terminal")
                                       : sbx_error_new(SBX_EIO, "restbox: the terminal service "
                                                                "closed the connection (%d)",
                                                       status));
    } else {
        sbx_error_free(err);
    }
    if (c->core_closed)
        rp_finish(c, SBX_OK, NULL);
    /* Else the core's close comes later (the caller still holds its handle). */
}

/* --- pty_open ---------------------------------------------------------------------------- */

/* The "open" message: what to run, as the core asked. */
static json_t *open_message(sbx_pty_session *s)
{
    unsigned rows, cols;
    sbx_pty_session_size(s, &rows, &cols);
    json_t *env = json_array(), *m = json_pack("{s:s, s:I, s:I, s:b}", "type", "open", "rows",
                                               (json_int_t)rows, "cols", (json_int_t)cols,
                                               "pipes", sbx_pty_session_pipes(s));
    for (size_t i = 0; i < sbx_pty_session_env_count(s); i++)
        json_array_append_new(env, json_string(sbx_pty_session_env_at(s, i)));
    json_object_set_new(m, "env", env);
    const char *const *argv = sbx_pty_session_argv(s);
    if (argv) {
        json_t *a = json_array();
        for (size_t i = 0; argv[i]; i++)
            json_array_append_new(a, json_string(argv[i]));
        json_object_set_new(m, "argv", a);
    } else if (sbx_pty_session_command(s)) {
        json_object_set_new(m, "command", json_string(sbx_pty_session_command(s)));
    }
    if (sbx_pty_session_cwd(s))
        json_object_set_new(m, "cwd", json_string(sbx_pty_session_cwd(s)));
    return m;
}

/* A new session: the first message says what to run. */
static void rp_opened(sbx_ws *ws, void *user)
{
    struct rpty *c = user;
    json_t *m = open_message(c->s);
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    sbx_error *err = NULL;
    if (!text || sbx_ws_send(ws, SBX_WS_TEXT, text, strlen(text), &err) < 0)
        rp_refuse(c, err ? err : sbx_error_new(SBX_ENOMEM, "restbox: out of memory"));
    free(text);
}

void rb_pty_open(sbx_op *op, void *state, void *box, sbx_pty_session *s)
{
    struct restbox *rb = state;
    const struct rbox *b = box;
    unsigned attach = sbx_pty_session_attach_id(s);
    char rest[96];
    if (attach)
        snprintf(rest, sizeof(rest), "/pty/%u?since=%llu%s", attach, sbx_pty_session_since(s),
                 sbx_pty_session_takeover(s) ? "&takeover=1" : "");
    else
        snprintf(rest, sizeof(rest), "/pty");
    if (sbx_pty_session_user(s)) {
        sbx_op_complete(op, SBX_ENOTSUP,
                        sbx_error_new(SBX_ENOTSUP, "restbox runs terminals as its service's "
                                                   "user only: leave user unset"),
                        NULL);
        return;
    }
    struct rpty *c = calloc(1, sizeof(*c));
    char *path = rb_box_path(b->id, rest);
    sbx_error *err = NULL;
    int rc = c && path ? sbx_ws_new(rb->http, path, &c->ws, &err) : SBX_ENOMEM;
    free(path);
    if (rc == SBX_OK) {
        c->op = op;
        c->s = s;
        sbx_ws_set_max_message(c->ws, RP_MAX_MESSAGE);
        sbx_ws_on_message(c->ws, rp_message);
        if (!attach)
            sbx_ws_on_open(c->ws, rp_opened);
    }
    if (rc == SBX_OK && (rc = sbx_ws_connect(c->ws, sbx_op_loop(op), rp_closed, c, &err)) == SBX_OK)
        return;
    if (c)
        sbx_ws_free(c->ws);
    free(c);
    sbx_op_complete(op, rc, err, NULL);
}
