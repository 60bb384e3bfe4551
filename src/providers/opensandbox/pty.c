/*
 * opensandbox: terminals (provider ABI 3's pty_open) over execd's PTY API,
 * as the reference's os/pty.py speaks it (execd's components/execd/PTY.md):
 *
 *   POST {execd}/pty {"cwd"?, "command"?}        200/201 {"session_id"}
 *   WebSocket {execd}/pty/{id}/ws[?pty=0][&takeover=1][&since=N]
 *   DELETE {execd}/pty/{id}                       a session this client created
 *
 * Binary frames carry a channel byte: 0x00 stdin (ours), 0x01 stdout, 0x02
 * stderr, 0x03 a replay (u64 big-endian offset, then stdout bytes). Text
 * frames are JSON: resize and signal from us; connected, exit and error
 * from execd. Close code 4001: another client took the session over; 1008:
 * it already has a client. The same shape as the kit's example
 * (examples/provider/restbox_pty.c), with execd's create step in front.
 *
 * One struct opty a session, living from pty_open until both the core has
 * closed it and the WebSocket (and a DELETE, for a session we created) has
 * ended: then the op completes, which tells the core we let go.
 */

#include "osb.h"

#include <sbx/ws.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest message accepted from execd: output comes in far smaller chunks. */
#define OPTY_MAX_MESSAGE ((size_t)1 << 20)
/* The longest session id kept (execd's are UUIDs). */
#define OPTY_MAX_SID 256
/* Ids sbx gives sessions whose execd id is not a number start here. */
#define OPTY_MAPPED_BASE 0x80000000u

struct opty {
    sbx_op *op;
    sbx_pty_session *s;
    struct osb *st;
    struct obox *b;
    sbx_ws *ws;                  /* NULL once its close callback ran */
    sbx_http_request *req;       /* the POST in flight */
    char *sid;                   /* execd's session id */
    unsigned id;                 /* sbx's */
    bool created;                /* we POSTed it: DELETE it when it ends */
    bool ready;                  /* "connected" came: the core may call us */
    bool core_closed;            /* the core's close came */
    bool end;                    /* ... asking to end the session */
    bool taken;                  /* another client took it over: it is theirs now */
    bool exited;                 /* its exit came: nothing is left to keep it for */
    bool errored;                /* execd sent an error frame: final, no redial */
    bool fresh;                  /* data came since the last (re)dial */
    int redials;                 /* redials in a row that brought no data */
    unsigned long long received; /* stdout bytes seen: where a redial resumes */
    sbx_error *why;              /* why it ended before "connected" */
    json_t *body;                /* the POST /pty body, kept for its retries */
    int posts;                   /* POSTs sent */
};

static void opty_free(struct opty *c)
{
    sbx_error_free(c->why);
    json_decref(c->body);
    free(c->sid);
    free(c);
}

/* The key rule for PTY (os/pty.py): the key goes whenever one is set, direct mode too. */
static const char *direct_key(const struct osb *st)
{
    const char *key = st->cfg.connection.api_key;
    return key && *key && !st->cfg.connection.use_server_proxy ? key : NULL;
}

static double request_timeout(const struct osb *st)
{
    double t = st->cfg.connection.request_timeout_s;
    return t > 0 ? t : 300;
}

/* --- the end: DELETE what we created, then let go ---------------------------------- */

static void finish_deleted(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    (void)code;
    (void)resp; /* best effort: an ended session may be gone already */
    struct opty *c = ctx;
    sbx_error_free(err);
    sbx_error *why = c->why;
    c->why = NULL;
    sbx_op_complete(c->op, why ? sbx_error_code(why) : SBX_OK, why, NULL);
    opty_free(c);
}

/*
 * Completes the op (with c->why before ready), after a DELETE when `del`:
 * a session we created goes when its opener ends it or once it exited (a
 * detach leaves a running one be), never one another client took over.
 */
static void opty_finish(struct opty *c, bool del)
{
    if (del && c->created && c->sid && c->b->execd) {
        char *path = osb_path_id("/pty/%s", c->sid);
        sbx_http_request *req = NULL;
        sbx_error *err = NULL;
        int rc = path ? osb_request(c->b->execd, "DELETE", path, NULL, &req, &err) : SBX_ENOMEM;
        free(path);
        const char *key = direct_key(c->st);
        if (rc == SBX_OK && key)
            rc = sbx_http_request_set_header(req, "OPEN-SANDBOX-API-KEY", key);
        if (rc == SBX_OK) {
            osb_send(c->op, req, 10, NULL, finish_deleted, c);
            return;
        }
        sbx_http_request_free(req);
        sbx_error_free(err);
    }
    finish_deleted(c, SBX_OK, NULL, NULL);
}

static int dial(struct opty *c, bool redial, sbx_error **err);

/* --- the core's calls (loop thread, from sbx_pty_session_ready to close) ---------- */

static void send_json(struct opty *c, json_t *j)
{
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    sbx_error *err = NULL;
    if (!c->ws || !text || sbx_ws_send(c->ws, SBX_WS_TEXT, text, strlen(text), &err) < 0)
        sbx_pty_session_fail(c->s, err ? sbx_error_prefix(err, OSB_NAME ": terminal")
                                       : sbx_error_new(SBX_EIO, OSB_NAME ": the terminal's "
                                                                         "connection is gone"));
    free(text);
}

static void op_write(void *conn, const void *data, size_t len)
{
    struct opty *c = conn;
    if (!len)
        return; /* execd's protocol has no EOF for stdin: ^D on a terminal is the user's */
    uint8_t *frame = c->ws ? malloc(len + 1) : NULL;
    sbx_error *err = NULL;
    if (!frame) {
        sbx_pty_session_fail(c->s, c->ws ? sbx_error_new(SBX_ENOMEM, OSB_NAME ": out of memory")
                                         : sbx_error_new(SBX_EIO, OSB_NAME ": the terminal's "
                                                                           "connection is gone"));
        return;
    }
    frame[0] = 0x00;
    memcpy(frame + 1, data, len);
    if (sbx_ws_send(c->ws, SBX_WS_BINARY, frame, len + 1, &err) < 0)
        sbx_pty_session_fail(c->s, sbx_error_prefix(err, OSB_NAME ": terminal input"));
    free(frame);
}

static void op_resize(void *conn, unsigned rows, unsigned cols)
{
    send_json(conn, json_pack("{s:s, s:I, s:I}", "type", "resize", "cols", (json_int_t)cols, "rows",
                              (json_int_t)rows));
}

static void op_signal(void *conn, int signo, const char *name)
{
    (void)signo;
    /* The only ones execd takes (os/pty.py); the reference raises before sending others. */
    static const char *const ok[] = {"SIGINT", "SIGTERM", "SIGKILL", "SIGQUIT", "SIGHUP"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        if (name && !strcmp(name, ok[i])) {
            send_json(conn, json_pack("{s:s, s:s}", "type", "signal", "signal", name));
            return;
        }
    }
    sbx_log(SBX_LOG_WARNING,
            OSB_NAME ": execd's terminals take SIGINT, SIGTERM, SIGKILL, "
                     "SIGQUIT and SIGHUP only: %.32s not sent",
            name ? name : "?");
}

static void op_flow(void *conn, int pause)
{
    struct opty *c = conn;
    if (c->ws && pause)
        sbx_ws_pause(c->ws);
    else if (c->ws)
        sbx_ws_resume(c->ws);
}

static void op_close(void *conn, int end)
{
    struct opty *c = conn;
    c->core_closed = true;
    c->end = end;
    if (!c->ws) {
        opty_finish(c, (end || c->exited) && !c->taken);
        return;
    }
    sbx_ws_resume(c->ws); /* a paused socket would not see execd's close */
    if (sbx_ws_close(c->ws, SBX_WS_NORMAL, NULL, NULL) < 0)
        sbx_ws_cancel(c->ws);
}

static const struct sbx_pty_session_ops opty_ops = {
    .write = op_write,
    .resize = op_resize,
    .signal = op_signal,
    .flow = op_flow,
    .close = op_close,
};

/* --- execd's messages --------------------------------------------------------------- */

static void refuse(struct opty *c, sbx_error *why)
{
    if (!c->why)
        c->why = why;
    else
        sbx_error_free(why);
    sbx_ws_cancel(c->ws);
}

/* Fails the session (ready) or its open (not yet). */
static void lost(struct opty *c, sbx_error *e)
{
    if (c->ready)
        sbx_pty_session_fail(c->s, e);
    else
        refuse(c, e);
}

static void on_connected(struct opty *c)
{
    if (sbx_pty_session_ready(c->s, &opty_ops, c, c->id) != SBX_OK) {
        refuse(c, sbx_error_new(SBX_EPROVIDER, OSB_NAME ": the session was refused"));
        return;
    }
    c->ready = true;
    /* The reference's create sends the size after connected when it is not execd's 24x80. */
    unsigned rows, cols;
    sbx_pty_session_size(c->s, &rows, &cols);
    if (!sbx_pty_session_attach_id(c->s) && rows && cols && (rows != 24 || cols != 80))
        op_resize(c, rows, cols);
}

static void on_text(struct opty *c, const char *data, size_t len)
{
    json_t *j = json_loadb(data, len, 0, NULL);
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) {
        /* Malformed JSON is fatal, as in the reference. */
        lost(c, sbx_error_new(SBX_EPROTO, OSB_NAME ": execd's terminal sent a message that is "
                                                   "not a JSON object with a type"));
    } else if (!strcmp(type, "connected")) {
        if (!c->ready)
            on_connected(c);
    } else if (!strcmp(type, "exit")) {
        json_t *v = json_object_get(j, "exit_code");
        json_int_t code = json_integer_value(v);
        c->exited = true;
        sbx_pty_session_exit(c->s, json_is_integer(v) && code >= 0 && code <= 255 ? (int)code : -1);
    } else if (!strcmp(type, "error")) {
        const char *code = json_string_value(json_object_get(j, "code"));
        const char *msg = json_string_value(json_object_get(j, "error"));
        c->errored = true;
        lost(c, sbx_error_new(SBX_EPTY, OSB_NAME ": PTY session failed: %.64s: %.200s",
                              code ? code : "", msg ? msg : "(no reason given)"));
    }
    /* Other types are notices of a newer execd: ignored. */
    json_decref(j);
}

static void on_message(sbx_ws *ws, int opcode, const void *data, size_t len, void *user)
{
    (void)ws;
    struct opty *c = user;
    const uint8_t *d = data;
    if (opcode == SBX_WS_TEXT) {
        on_text(c, data, len);
    } else if (opcode == SBX_WS_BINARY && len > 1 && (d[0] == 0x01 || d[0] == 0x02)) {
        c->fresh = true;
        if (d[0] == 0x01)
            c->received += len - 1;
        sbx_pty_session_output(c->s, d[0] == 0x01 ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR,
                               SBX_PTY_OFFSET_NEXT, d + 1, len - 1);
    } else if (opcode == SBX_WS_BINARY && len > 9 && d[0] == 0x03) {
        unsigned long long off = 0;
        for (int i = 1; i <= 8; i++)
            off = off << 8 | d[i];
        if (off <= SBX_PTY_OFFSET_NEXT - len) {
            c->fresh = true;
            if (off + (len - 9) > c->received)
                c->received = off + (len - 9);
            sbx_pty_session_output(c->s, SBX_STREAM_STDOUT, off, d + 9, len - 9);
        }
    }
    /* Empty frames, short replays and unknown channels are dropped, as the reference does. */
}

static void on_closed(sbx_ws *ws, int status, const char *reason, int code, sbx_error *err,
                      void *user)
{
    (void)ws;
    (void)code;
    struct opty *c = user;
    c->ws = NULL;
    if (!c->ready) {
        sbx_error *e = c->why;
        c->why = NULL;
        /* execd refuses a second client with 409 at the upgrade (or 1008 after it). */
        const char *m = err ? sbx_error_message(err) : NULL;
        if (!e && (status == SBX_WS_POLICY || (m && strstr(m, "upgrade with 409"))))
            e = sbx_error_new(SBX_EPTY,
                              "PTY session %u already has an attached client (pass "
                              "takeover to evict it)",
                              c->id);
        if (!e)
            e = err ? sbx_error_prefix(err, OSB_NAME ": opening the terminal's WebSocket")
                    : sbx_error_new(SBX_EPTY,
                                    OSB_NAME ": execd closed the terminal before it "
                                             "ran (%d %.100s)",
                                    status, reason ? reason : "");
        else
            sbx_error_free(err);
        c->why = e;
        opty_finish(c, true); /* a session we created and cannot reach is deleted */
        return;
    }
    /*
     * A socket that died without an exit, an error frame or our close, and
     * not taken over or refused: redial (the reference's), with takeover
     * and since what we have, up to 3 times in a row without data.
     */
    if (!c->core_closed && !c->exited && !c->errored && status != 4001 && status != SBX_WS_POLICY &&
        (c->fresh || c->redials < 3)) {
        c->redials = c->fresh ? 1 : c->redials + 1;
        c->fresh = false;
        sbx_error *why = NULL;
        if (dial(c, true, &why) == SBX_OK) {
            sbx_log(SBX_LOG_INFO, OSB_NAME ": PTY session %s: redialling (%d, %s)", c->sid,
                    c->redials, err ? sbx_error_message(err) : "closed");
            sbx_error_free(err);
            return;
        }
        sbx_error_free(err);
        err = why;
    }
    if (status == 4001) {
        sbx_error_free(err);
        c->taken = true;
        sbx_pty_session_fail(c->s, sbx_error_new(SBX_EPTY, "taken over by another client"));
    } else if (!c->core_closed) {
        /* After an exit this is ignored; else the session is lost (no redial yet). */
        sbx_pty_session_fail(c->s, err ? sbx_error_prefix(err, OSB_NAME ": terminal")
                                       : sbx_error_new(SBX_EIO,
                                                       OSB_NAME ": execd closed the "
                                                                "terminal's connection (%d)",
                                                       status));
    } else {
        sbx_error_free(err);
    }
    if (c->core_closed)
        opty_finish(c, (c->end || c->exited) && !c->taken);
}

/* --- opening ----------------------------------------------------------------------- */

static void fail_open(struct opty *c, sbx_error *e)
{
    c->why = e;
    opty_finish(c, true);
}

/* Opens the WebSocket: the first time, or a redial (takeover, since what we have). */
static int dial(struct opty *c, bool redial, sbx_error **err)
{
    char *esc = sbx_http_escape(c->sid), *path = NULL;
    unsigned attach = sbx_pty_session_attach_id(c->s);
    bool takeover = redial || (attach && sbx_pty_session_takeover(c->s));
    int n = -1;
    c->ws = NULL;
    if (esc) {
        char q[96];
        if (attach || redial)
            snprintf(q, sizeof(q), "%s%ssince=%llu", sbx_pty_session_pipes(c->s) ? "pty=0&" : "",
                     takeover ? "takeover=1&" : "",
                     redial ? c->received : sbx_pty_session_since(c->s));
        else
            snprintf(q, sizeof(q), "%s", sbx_pty_session_pipes(c->s) ? "pty=0" : "");
        n = asprintf(&path, "/pty/%s/ws%s%s", esc, *q ? "?" : "", q);
    }
    free(esc);
    int rc = n >= 0 ? sbx_ws_new(c->b->execd, path, &c->ws, err) : SBX_ENOMEM;
    free(path);
    const char *key = direct_key(c->st);
    if (rc == SBX_OK && key)
        rc = sbx_ws_set_header(c->ws, "OPEN-SANDBOX-API-KEY", key);
    if (rc == SBX_OK) {
        sbx_ws_set_max_message(c->ws, OPTY_MAX_MESSAGE);
        sbx_ws_set_timeout(c->ws, request_timeout(c->st));
        sbx_ws_on_message(c->ws, on_message);
        rc = sbx_ws_connect(c->ws, sbx_op_loop(c->op), on_closed, c, err);
    }
    if (rc == SBX_OK)
        return SBX_OK;
    sbx_ws_free(c->ws);
    c->ws = NULL;
    if (!*err)
        *err = sbx_error_new(rc, OSB_NAME ": terminal: %s", sbx_strerror(rc));
    return rc;
}

static void connect_ws(struct opty *c)
{
    sbx_error *err = NULL;
    if (dial(c, false, &err) < 0)
        fail_open(c, sbx_error_prefix(err, OSB_NAME ": terminal"));
}

/* sbx's id for execd's `sid`: the number itself when it is one, else a mapping in the box. */
static int id_for(struct obox *b, const char *sid, unsigned *out)
{
    char *end = NULL;
    unsigned long long v = strtoull(sid, &end, 10);
    if (*sid >= '1' && *sid <= '9' && !*end && v < OPTY_MAPPED_BASE) {
        *out = (unsigned)v;
        return SBX_OK;
    }
    for (size_t i = 0; i < b->n_pty_sids; i++) {
        if (!strcmp(b->pty_sids[i], sid)) {
            *out = OPTY_MAPPED_BASE + (unsigned)i;
            return SBX_OK;
        }
    }
    if (b->n_pty_sids >= 0x10000)
        return SBX_EPTY;
    char **grown = realloc(b->pty_sids, (b->n_pty_sids + 1) * sizeof(*grown));
    if (!grown)
        return SBX_ENOMEM;
    b->pty_sids = grown;
    if (!(grown[b->n_pty_sids] = strdup(sid)))
        return SBX_ENOMEM;
    *out = OPTY_MAPPED_BASE + (unsigned)b->n_pty_sids++;
    return SBX_OK;
}

static void post(void *ctx);

/* The reference's waits before the next POST /pty after a 404 or no connection (then one more). */
static const double post_delays[] = {0.25, 0.5, 1, 2, 4, 8};

static bool post_again(struct opty *c)
{
    if (c->posts > (int)(sizeof(post_delays) / sizeof(post_delays[0])))
        return false;
    return osb_after(sbx_op_loop(c->op), post_delays[c->posts - 1], post, c) != NULL;
}

static void created(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct opty *c = ctx;
    /* execd not there yet (behind the proxy: 404) or not reachable: try again, as the reference. */
    if (((code == SBX_EIO && !resp) || (code == SBX_OK && sbx_http_response_status(resp) == 404)) &&
        post_again(c)) {
        sbx_error_free(err);
        return;
    }
    if (code < 0) {
        fail_open(c, sbx_error_prefix(err, OSB_NAME ": creating a terminal"));
        return;
    }
    sbx_error_free(err);
    int status = sbx_http_response_status(resp);
    size_t len = 0;
    const char *body = sbx_http_response_body(resp, &len);
    if (status != 200 && status != 201) {
        fail_open(c, sbx_error_new(SBX_EPTY, OSB_NAME ": PTY create failed with HTTP %d: %.*s",
                                   status, (int)(len > 200 ? 200 : len), body ? body : ""));
        return;
    }
    json_t *j = body ? json_loadb(body, len, 0, NULL) : NULL;
    const char *sid = json_string_value(json_object_get(j, "session_id"));
    size_t n = sid ? strlen(sid) : 0;
    if (!n || n > OPTY_MAX_SID || n != json_string_length(json_object_get(j, "session_id"))) {
        json_decref(j);
        fail_open(c, sbx_error_new(SBX_EPROTO, OSB_NAME ": execd's PTY create answer has no "
                                                        "usable session_id"));
        return;
    }
    c->sid = strdup(sid);
    json_decref(j);
    c->created = c->sid != NULL;
    int rc = c->sid ? id_for(c->b, c->sid, &c->id) : SBX_ENOMEM;
    if (rc < 0) {
        fail_open(c, sbx_error_new(rc, OSB_NAME ": too many terminal sessions in one box"));
        return;
    }
    connect_ws(c);
}

/* What execd runs: os/pty.py's rewrite for env and user (malloc'd; *out NULL: the shell). */
static int command_of(sbx_pty_session *s, char **out, sbx_error **err)
{
    *out = NULL;
    char *cmd = NULL;
    const char *const *argv = sbx_pty_session_argv(s);
    if (argv) {
        for (size_t i = 0; argv[i]; i++) {
            char *q = osb_shq(argv[i]), *next = NULL;
            if (!q || asprintf(&next, "%s%s%s", cmd ? cmd : "", cmd ? " " : "", q) < 0)
                next = NULL;
            free(q);
            free(cmd);
            if (!(cmd = next))
                return SBX_ENOMEM;
        }
    } else if (sbx_pty_session_command(s) && !(cmd = strdup(sbx_pty_session_command(s)))) {
        return SBX_ENOMEM;
    }
    size_t nenv = sbx_pty_session_env_count(s);
    if (nenv) {
        char *w = strdup("env");
        for (size_t i = 0; w && i < nenv; i++) {
            const char *kv = sbx_pty_session_env_at(s, i), *eq = strchr(kv, '=');
            size_t kl = eq ? (size_t)(eq - kv) : 0;
            bool name = kl > 0 && !(kv[0] >= '0' && kv[0] <= '9');
            for (size_t k = 0; name && k < kl; k++)
                name = kv[k] == '_' || (kv[k] >= 'a' && kv[k] <= 'z') ||
                       (kv[k] >= 'A' && kv[k] <= 'Z') || (kv[k] >= '0' && kv[k] <= '9');
            if (!name) {
                free(w);
                free(cmd);
                *err = sbx_error_new(SBX_EINVAL,
                                     OSB_NAME ": terminal env '%.64s' is not NAME=VALUE", kv);
                return SBX_EINVAL;
            }
            char *q = osb_shq(eq + 1), *next = NULL;
            if (!q || asprintf(&next, "%s %.*s=%s", w, (int)kl, kv, q) < 0)
                next = NULL;
            free(q);
            free(w);
            w = next;
        }
        char *q = w ? osb_shq(cmd ? cmd : "exec \"$(command -v bash || echo sh)\"") : NULL,
             *next = NULL;
        if (!q || asprintf(&next, "%s sh -c %s", w, q) < 0)
            next = NULL;
        free(q);
        free(w);
        free(cmd);
        if (!(cmd = next))
            return SBX_ENOMEM;
    }
    const char *user = sbx_pty_session_user(s);
    if (user && *user && strcmp(user, "root")) {
        char *qc = cmd ? osb_shq(cmd) : NULL, *qu = osb_shq(user), *next = NULL;
        if ((cmd && !qc) || !qu ||
            asprintf(&next, "su -s /bin/sh%s%s %s", qc ? " -c " : "", qc ? qc : "", qu) < 0)
            next = NULL;
        free(qc);
        free(qu);
        free(cmd);
        if (!(cmd = next))
            return SBX_ENOMEM;
    }
    *out = cmd;
    return SBX_OK;
}

void osb_pty_open(sbx_op *op, void *state, void *box, sbx_pty_session *s)
{
    struct osb *st = state;
    struct obox *b = box;
    if (!b->execd) {
        sbx_op_complete(
            op, SBX_ESTATE,
            sbx_error_new(SBX_ESTATE, OSB_NAME ": sandbox %s has no execd endpoint", b->id), NULL);
        return;
    }
    struct opty *c = calloc(1, sizeof(*c));
    if (!c) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    *c = (struct opty){.op = op, .s = s, .st = st, .b = b};
    unsigned attach = sbx_pty_session_attach_id(s);
    if (attach) {
        /* Attach: no DELETE ever (the reference's), the id back to execd's. */
        c->id = attach;
        if (attach >= OPTY_MAPPED_BASE && attach - OPTY_MAPPED_BASE < b->n_pty_sids)
            c->sid = strdup(b->pty_sids[attach - OPTY_MAPPED_BASE]);
        else if (attach < OPTY_MAPPED_BASE)
            (void)(asprintf(&c->sid, "%u", attach) < 0 && (c->sid = NULL));
        if (!c->sid) {
            fail_open(c, attach >= OPTY_MAPPED_BASE
                             ? sbx_error_new(SBX_EPTY,
                                             OSB_NAME ": no PTY session %u in "
                                                      "sandbox %s",
                                             attach, b->id)
                             : sbx_error_new(SBX_ENOMEM, OSB_NAME ": out of memory"));
            return;
        }
        connect_ws(c);
        return;
    }
    char *cmd = NULL;
    sbx_error *err = NULL;
    int rc = command_of(s, &cmd, &err);
    json_t *body = rc == SBX_OK ? json_object() : NULL;
    if (body && cmd)
        json_object_set_new(body, "command", json_string(cmd));
    if (body && sbx_pty_session_cwd(s))
        json_object_set_new(body, "cwd", json_string(sbx_pty_session_cwd(s)));
    free(cmd);
    if (rc < 0 || !body) {
        json_decref(body);
        fail_open(c, err ? err : sbx_error_new(SBX_ENOMEM, OSB_NAME ": out of memory"));
        return;
    }
    c->body = body;
    post(c);
}

/* POST /pty (again: the body is kept). */
static void post(void *ctx)
{
    struct opty *c = ctx;
    sbx_error *err = NULL;
    sbx_http_request *req = NULL;
    c->posts++;
    int rc = osb_request(c->b->execd, "POST", "/pty", json_incref(c->body), &req, &err);
    const char *key = direct_key(c->st);
    if (rc == SBX_OK && key)
        rc = sbx_http_request_set_header(req, "OPEN-SANDBOX-API-KEY", key);
    if (rc < 0) {
        sbx_http_request_free(req);
        fail_open(c, err ? err : sbx_error_new(rc, OSB_NAME ": terminal: %s", sbx_strerror(rc)));
        return;
    }
    osb_send(c->op, req, request_timeout(c->st), &c->req, created, c);
}
