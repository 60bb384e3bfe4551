/*
 * opensandbox: exec over execd's POST /command (an event stream of JSON
 * lines), foreground or in the background with status polling, with the
 * reference's 502 resubmission and the OOM check after a 502, and its
 * result: stdout the lines joined (None when none), stderr the lines then
 * "ename: evalue", the exit code from the error event, 125/"sandbox" when
 * an error carries none.
 *
 * The exec's timeout is kept here (the reference's rc 125 "timeout" result
 * with what came before it), and execd is given the same timeout plus a
 * margin as a backstop, so the command ends even if this process dies.
 */
#include "osb.h"

#include <sbx/wire.h>

#include <errno.h>
#include <math.h>
#include <nettle/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

/* What execd is told beyond the client's own timeout: the client's result wins the race. */
#define OSB_EXECD_TIMEOUT_MARGIN_S 5.0
/* The reference polls the sandbox's info this long after a 502, looking for an OOM kill. */
#define OSB_OOM_CHECK_S 5.0

struct buf {
    char *p;
    size_t len, cap;
};

static int buf_add(struct buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            return SBX_ENOMEM;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return SBX_OK;
}

struct xrun {
    sbx_op *op;
    struct osb *st;
    struct obox *b;
    char *command; /* as the caller gave it, for the timeout message */
    json_t *body;  /* the POST /command body */
    double timeout_s;
    size_t limit;
    bool keep, background;
    osb_run_done_fn done;
    void *ctx;

    sbx_http_request *cur;
    struct osb_timer *sleep, *ttimer;
    bool finished;
    int submission;
    sbx_ndjson *nd;
    sbx_error *stream_err; /* what stopped the stream, if we did */
    struct buf errbody;    /* a non-200 answer's first bytes */

    /* the stream's outcome */
    struct buf out, err;
    size_t out_lines, err_lines;
    bool truncated, got_error, complete;
    char *ename, *evalue, *exec_id;

    /* background */
    double poll_wait;
    struct osb_cmd_status cst;
};

static void xr_free(struct xrun *x)
{
    free(x->command);
    json_decref(x->body);
    sbx_ndjson_free(x->nd);
    sbx_error_free(x->stream_err);
    free(x->errbody.p);
    free(x->out.p);
    free(x->err.p);
    free(x->ename);
    free(x->evalue);
    free(x->exec_id);
    free(x->cst.error);
    free(x);
}

/* Frees the run once its result went out and nothing of it is in flight. */
static void xr_maybe_free(struct xrun *x)
{
    if (x->finished && !x->cur && !x->sleep && !x->ttimer)
        xr_free(x);
}

/* A callback of a run whose result already went out: it only lets go. */
static bool xr_late(struct xrun *x, sbx_error *err)
{
    if (!x->finished)
        return false;
    sbx_error_free(err);
    xr_maybe_free(x);
    return true;
}

static void xr_finish(struct xrun *x, int code, sbx_exec_result *r, sbx_error *err)
{
    if (x->finished) {
        sbx_exec_result_free(r);
        sbx_error_free(err);
        return;
    }
    x->finished = true;
    sbx_op_on_cancel(x->op, NULL, NULL);
    if (x->ttimer) {
        osb_timer_cancel(x->ttimer);
        x->ttimer = NULL;
    }
    if (x->sleep) {
        osb_timer_cancel(x->sleep);
        x->sleep = NULL;
    }
    if (x->cur)
        sbx_http_request_cancel(x->cur); /* its callback frees the run */
    osb_run_done_fn done = x->done;
    void *ctx = x->ctx;
    xr_maybe_free(x);
    done(ctx, code, r, err);
}

static void xr_fail(struct xrun *x, int code, sbx_error *err)
{
    xr_finish(x, code, NULL,
              err ? err : sbx_error_new(code, OSB_NAME ": exec: %s", sbx_strerror(code)));
}

static void interrupted(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    (void)ctx;
    (void)code;
    (void)resp;
    sbx_error_free(err); /* best-effort: the run has ended already */
}

/*
 * A background command runs on after its stream ended: a cancel or a
 * timeout interrupts it (execd's DELETE /command?id=), best-effort. A
 * foreground one ends with its connection (execd kills it then).
 */
static void xr_interrupt(struct xrun *x)
{
    if (!x->background || !x->exec_id)
        return;
    osb_call(x->op, x->b->execd, "DELETE", osb_query("/command", "id", x->exec_id), 10, NULL,
             interrupted, NULL);
}

static void xr_cancel(sbx_op *op, void *data)
{
    (void)op;
    xr_interrupt(data);
    xr_fail(data, SBX_ECANCELED, NULL);
}

/* The result as the reference builds it. */
static void xr_result(struct xrun *x, bool has_exit, int exit_code)
{
    int rc = has_exit ? exit_code : x->got_error ? 125 : 0;
    const char *etype = !has_exit && x->got_error ? "sandbox" : NULL;
    bool lines = x->st->cfg.operations.output == 1;
    if (x->got_error && !lines && !x->background) {
        /* "{ename}: {evalue}" ends stderr: a failing command's stderr ends "CommandExecError: 1".
         */
        if ((x->err_lines++ && buf_add(&x->err, "\n", 1) < 0) ||
            buf_add(&x->err, x->ename, strlen(x->ename)) < 0 || buf_add(&x->err, ": ", 2) < 0 ||
            buf_add(&x->err, x->evalue, strlen(x->evalue)) < 0) {
            xr_fail(x, SBX_ENOMEM, NULL);
            return;
        }
    }
    char *out = x->out.len || x->out_lines ? x->out.p : NULL;
    char *err = x->err.len || x->err_lines ? x->err.p : NULL;
    size_t out_len = out ? x->out.len : 0, err_len = err ? x->err.len : 0;
    /* None when nothing came, as the reference's `or None`. */
    if (out && !out_len)
        out = NULL;
    if (err && !err_len)
        err = NULL;
    if (out == x->out.p)
        x->out.p = NULL;
    if (err == x->err.p)
        x->err.p = NULL;
    if (!x->keep) {
        free(out);
        free(err);
        out = err = NULL;
        out_len = err_len = 0;
    }
    sbx_exec_result *r = NULL;
    int code = sbx_exec_result_new_take(out, out_len, err, err_len, rc, etype, &r);
    if (code == SBX_OK && x->truncated)
        sbx_exec_result_set_truncated(r, 1);
    if (code < 0)
        xr_fail(x, code, NULL);
    else
        xr_finish(x, SBX_OK, r, NULL);
}

static int add_line(struct xrun *x, int stream, struct buf *b, size_t *count, const char *text)
{
    bool lines = x->st->cfg.operations.output == 1;
    size_t n = strlen(text);
    /* execd marks a blank line with "\n" as its text. */
    bool blank = !strcmp(text, "\n");
    /* A listener gets each line as it comes, with its end (the best the events allow). */
    if (sbx_op_exec_streaming(x->op)) {
        if (!blank)
            sbx_op_exec_output(x->op, stream, text, n);
        sbx_op_exec_output(x->op, stream, "\n", 1);
    }
    size_t need = lines ? (blank ? 1 : n + 1) : (*count ? 1 : 0) + n;
    if (!x->keep || b->len + need > x->limit) {
        x->truncated = x->truncated || x->keep;
        (*count)++;
        return SBX_OK;
    }
    int rc = SBX_OK;
    if (lines)
        rc = blank ? buf_add(b, "\n", 1) : buf_add(b, text, n) || buf_add(b, "\n", 1);
    else
        rc = (*count ? buf_add(b, "\n", 1) : SBX_OK) || buf_add(b, text, n);
    (*count)++;
    return rc ? SBX_ENOMEM : SBX_OK;
}

static int on_line(const char *line, size_t len, uint64_t line_no, void *user)
{
    (void)line_no;
    struct xrun *x = user;
    struct osb_event ev;
    sbx_error *err = NULL;
    int rc = osb_event_parse(line, len, &ev, &err);
    if (rc < 0) {
        x->stream_err = err;
        return -1;
    }
    switch (ev.type) {
    case OSB_EV_INIT:
        if (ev.text && !x->exec_id) {
            x->exec_id = ev.text;
            ev.text = NULL;
        }
        break;
    case OSB_EV_STDOUT:
        rc = add_line(x, SBX_STREAM_STDOUT, &x->out, &x->out_lines, ev.text ? ev.text : "");
        break;
    case OSB_EV_STDERR:
        rc = add_line(x, SBX_STREAM_STDERR, &x->err, &x->err_lines, ev.text ? ev.text : "");
        break;
    case OSB_EV_ERROR:
        x->got_error = true;
        free(x->ename);
        free(x->evalue);
        x->ename = ev.ename;
        x->evalue = ev.evalue;
        ev.ename = ev.evalue = NULL;
        break;
    case OSB_EV_COMPLETE:
        x->complete = true;
        break;
    default:
        break;
    }
    osb_event_clear(&ev);
    if (rc < 0) {
        x->stream_err = sbx_error_new(SBX_ENOMEM, OSB_NAME ": exec: out of memory");
        return -1;
    }
    return 0;
}

static int on_data(sbx_http_request *r, const void *data, size_t len, void *user)
{
    struct xrun *x = user;
    int status = sbx_http_request_status(r);
    if (status != 200) {
        /* An error's body: its first bytes are for the message. */
        size_t room = x->errbody.len < 512 ? 512 - x->errbody.len : 0;
        if (room && buf_add(&x->errbody, data, len < room ? len : room) < 0)
            return -1;
        return 0;
    }
    sbx_error *err = NULL;
    int rc = sbx_ndjson_feed(x->nd, data, len, &err);
    if (rc != SBX_OK && rc != -1) {
        sbx_error_free(x->stream_err);
        x->stream_err = sbx_error_prefix(err, OSB_NAME ": execd's event stream");
    }
    return rc == SBX_OK ? 0 : -1;
}

static void xr_submit(struct xrun *x);
static void xr_poll(struct xrun *x);

static void sleep_done(void *data)
{
    struct xrun *x = data;
    x->sleep = NULL;
    if (x->finished) {
        xr_maybe_free(x);
        return;
    }
    if (x->background && x->exec_id)
        xr_poll(x);
    else
        xr_submit(x);
}

static void xr_sleep(struct xrun *x, double s)
{
    if (!(x->sleep = osb_after(sbx_op_loop(x->op), s, sleep_done, x)))
        xr_fail(x, SBX_ENOMEM, NULL);
}

static void timeout_fire(void *data)
{
    struct xrun *x = data;
    x->ttimer = NULL;
    if (x->finished) {
        xr_maybe_free(x);
        return;
    }
    xr_interrupt(x);
    /* What came before the timeout is kept, as every provider's timeout result does. */
    char *out = x->keep ? x->out.p : NULL, *err = x->keep ? x->err.p : NULL;
    size_t ol = out ? x->out.len : 0, el = err ? x->err.len : 0;
    if (out)
        x->out.p = NULL;
    if (err)
        x->err.p = NULL;
    sbx_exec_result *r = NULL;
    int code = sbx_exec_result_new_timeout(out, ol, err, el, x->timeout_s, x->command, &r);
    xr_finish(x, code, r,
              code < 0 ? sbx_error_new(code, OSB_NAME ": exec: %s", sbx_strerror(code)) : NULL);
}

/* --- after a 502: the OOM check, then a resubmission ------------------------------------ */

static void oom_checked(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct xrun *x = ctx;
    sbx_error_free(err);
    if (x->finished) {
        xr_maybe_free(x);
        return;
    }
    if (code == SBX_OK && sbx_http_response_status(resp) / 100 == 2) {
        size_t n = 0;
        const char *b = sbx_http_response_body(resp, &n);
        struct osb_info info;
        sbx_error *e = NULL;
        if (osb_info_parse(b, n, &info, &e) == SBX_OK) {
            char text[1200];
            snprintf(text, sizeof(text), "%s %s", info.reason ? info.reason : "",
                     info.message ? info.message : "");
            bool oom = osb_is_oom(text);
            osb_info_clear(&info);
            if (oom) {
                xr_fail(x, SBX_EPROVIDER,
                        sbx_error_new(SBX_EPROVIDER,
                                      OSB_NAME ": Sandbox was OOM-killed. %.500s (raise the "
                                               "sandbox's memory_mib)",
                                      text));
                return;
            }
        }
        sbx_error_free(e);
    }
    int total = (int)x->st->cfg.operations.retries + 1;
    if (x->submission >= total) {
        xr_fail(x, SBX_EPROVIDER,
                sbx_error_new(SBX_EPROVIDER,
                              OSB_NAME ": sandbox %s: execd's proxy answered 502 to %d "
                                       "submission%s: the sandbox's backend is unreachable, "
                                       "likely dead",
                              x->b->id, total, total > 1 ? "s" : ""));
        return;
    }
    /* min(0.25 * 2^(n-1), 2) before submission n+1. */
    xr_sleep(x, fmin(0.25 * pow(2, x->submission - 1), 2.0));
}

static void xr_after_502(struct xrun *x)
{
    osb_call(x->op, x->st->api, "GET", osb_path_id("/sandboxes/%s", x->b->id), OSB_OOM_CHECK_S,
             &x->cur, oom_checked, x);
}

/* --- the stream's end ----------------------------------------------------------------------- */

static void reset_stream(struct xrun *x)
{
    sbx_ndjson_free(x->nd);
    x->nd = NULL;
    sbx_error_free(x->stream_err);
    x->stream_err = NULL;
    x->errbody.len = 0;
    x->out.len = x->err.len = 0;
    x->out_lines = x->err_lines = 0;
    x->truncated = x->got_error = x->complete = false;
}

static void submitted(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct xrun *x = ctx;
    if (xr_late(x, err))
        return;
    if (x->stream_err) {
        sbx_error_free(err);
        err = x->stream_err;
        x->stream_err = NULL;
        xr_fail(x, sbx_error_code(err), err);
        return;
    }
    if (code < 0) {
        xr_fail(x, code, sbx_error_prefix(err, "sandbox %s: exec", x->b->id));
        return;
    }
    int status = sbx_http_response_status(resp);
    if (status == 502) {
        xr_after_502(x);
        return;
    }
    if (status != 200) {
        xr_fail(x, status == 404 ? SBX_ENOENT : SBX_EPROVIDER,
                sbx_error_new(status == 404 ? SBX_ENOENT : SBX_EPROVIDER,
                              OSB_NAME
                              ": sandbox %s: Failed to run command. Status code: %d%s%.200s",
                              x->b->id, status, x->errbody.len ? ": " : "",
                              x->errbody.len ? x->errbody.p : ""));
        return;
    }
    sbx_error *e = NULL;
    int rc = sbx_ndjson_end(x->nd, &e);
    if (rc != SBX_OK) {
        if (x->stream_err) {
            sbx_error_free(e);
            e = x->stream_err;
            x->stream_err = NULL;
        }
        xr_fail(x, rc > 0 || rc == -1 ? SBX_EPROTO : rc, e);
        return;
    }
    if (x->background) {
        if (!x->exec_id) {
            xr_fail(x, SBX_EPROTO,
                    sbx_error_new(SBX_EPROTO,
                                  OSB_NAME ": sandbox %s: the background command's "
                                           "stream gave no execution id (init event)",
                                  x->b->id));
            return;
        }
        const struct osb_operations *o = &x->st->cfg.operations;
        x->poll_wait = fmin(o->background_poll_initial_s, o->background_poll_interval_s);
        xr_sleep(x, x->poll_wait);
        return;
    }
    int exit_code = 0;
    bool has_exit = x->got_error ? osb_parse_exit(x->evalue, &exit_code) : x->complete;
    if (!x->got_error && !x->complete) {
        /* The reference would say rc 0 here; a stream cut short is no success. */
        xr_fail(x, SBX_EPROVIDER,
                sbx_error_new(SBX_EPROVIDER,
                              OSB_NAME ": sandbox %s: execd's event stream ended without a "
                                       "completion or error event: the command's end is unknown",
                              x->b->id));
        return;
    }
    xr_result(x, has_exit, exit_code);
}

static void xr_submit(struct xrun *x)
{
    reset_stream(x);
    x->submission++;
    sbx_http_request *req = NULL;
    sbx_error *err = NULL;
    int rc = sbx_ndjson_new(OSB_MAX_EVENT, 0, on_line, x, &x->nd, &err);
    if (rc == SBX_OK)
        rc = osb_request(x->b->execd, "POST", "/command", json_incref(x->body), &req, &err);
    if (rc < 0) {
        xr_fail(x, rc, err);
        return;
    }
    /* Not retried by the kit: a command may not run twice. Only a 502 is resubmitted, here. */
    sbx_http_request_set_idempotent(req, 0);
    sbx_http_request_on_data(req, on_data, x);
    double rt = x->st->cfg.connection.request_timeout_s;
    double deadline = x->timeout_s > 0 ? x->timeout_s + 60 : rt > 0 ? rt : 0;
    if (x->background)
        deadline = rt > 0 ? rt : 60;
    osb_send(x->op, req, deadline, &x->cur, submitted, x);
}

/* --- background: status polls, then the logs ------------------------------------------------ */

static void logs_done(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct xrun *x = ctx;
    if (xr_late(x, err))
        return;
    if (code == SBX_OK && (code = sbx_http_response_check(resp, &err)) == SBX_OK) {
        size_t n = 0;
        char *body = sbx_http_response_take_body(resp, &n);
        if (!body) {
            xr_fail(x, SBX_ENOMEM, NULL);
            return;
        }
        /* Background output comes whole, at the end: a listener gets it then. */
        sbx_op_exec_output(x->op, SBX_STREAM_STDOUT, body, n);
        if (x->cst.error)
            sbx_op_exec_output(x->op, SBX_STREAM_STDERR, x->cst.error, strlen(x->cst.error));
        free(x->out.p);
        x->out = (struct buf){.p = body, .len = n, .cap = n + 1};
        if (x->limit && x->out.len > x->limit) {
            x->out.len = x->limit;
            x->truncated = true;
        }
        x->out_lines = n > 0;
        x->err.len = 0;
        x->err_lines = 0;
        if (x->cst.error && buf_add(&x->err, x->cst.error, strlen(x->cst.error)) == SBX_OK)
            x->err_lines = 1;
        x->got_error = x->cst.error != NULL;
        xr_result(x, x->cst.has_exit, x->cst.exit_code);
        return;
    }
    xr_fail(x, code, sbx_error_prefix(err, "sandbox %s: reading the command's logs", x->b->id));
}

static void polled(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct xrun *x = ctx;
    if (xr_late(x, err))
        return;
    if (code == SBX_OK && (code = sbx_http_response_check(resp, &err)) == SBX_OK) {
        size_t n = 0;
        const char *b = sbx_http_response_body(resp, &n);
        free(x->cst.error);
        if ((code = osb_cmd_status_parse(b, n, &x->cst, &err)) == SBX_OK) {
            if (x->cst.running) {
                const struct osb_operations *o = &x->st->cfg.operations;
                x->poll_wait = fmin(x->poll_wait * 1.5, o->background_poll_interval_s);
                xr_sleep(x, x->poll_wait);
                return;
            }
            double rt = x->st->cfg.connection.request_timeout_s;
            osb_call(x->op, x->b->execd, "GET", osb_path_id("/command/%s/logs", x->exec_id),
                     rt > 0 ? rt : 60, &x->cur, logs_done, x);
            return;
        }
    }
    xr_fail(x, code, sbx_error_prefix(err, "sandbox %s: polling the command's status", x->b->id));
}

static void xr_poll(struct xrun *x)
{
    double rt = x->st->cfg.connection.request_timeout_s;
    osb_call(x->op, x->b->execd, "GET", osb_path_id("/command/status/%s", x->exec_id),
             rt > 0 ? rt : 60, &x->cur, polled, x);
}

/* --- the command as execd gets it ------------------------------------------------------------ */

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

static char *b64(const void *data, size_t len)
{
    char *out = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    if (!out)
        return NULL;
    base64_encode_raw(out, len, data);
    out[BASE64_ENCODE_RAW_LENGTH(len)] = 0;
    return out;
}

void osb_run(sbx_op *op, struct osb *st, struct obox *b, const char *command,
             const struct osb_run_opts *o, osb_run_done_fn done, void *ctx)
{
    struct xrun *x = calloc(1, sizeof(*x));
    char *cmd = NULL;
    sbx_error *err = NULL;
    int rc = x && (x->command = strdup(command)) ? SBX_OK : SBX_ENOMEM;
    /* execd has no stdin: bytes travel in the command, decoded in the box. */
    if (rc == SBX_OK && o->has_stdin && o->stdin_len > 0) {
        if (o->stdin_len > OSB_MAX_STDIN) {
            err = sbx_error_new(SBX_EINVAL,
                                OSB_NAME ": stdin of %zu bytes is more than the %zu execd can "
                                         "carry (it has no stdin: the bytes travel in the "
                                         "command); upload a file and redirect from it",
                                o->stdin_len, OSB_MAX_STDIN);
            rc = SBX_EINVAL;
        } else {
            char *in = b64(o->stdin_data ? o->stdin_data : "", o->stdin_len);
            if (!in || asprintf(&cmd, "printf %%s '%s' | base64 -d | {\n%s\n}", in, command) < 0)
                cmd = NULL, rc = SBX_ENOMEM;
            free(in);
        }
    } else if (rc == SBX_OK && !(cmd = strdup(command)))
        rc = SBX_ENOMEM;
    json_t *body = NULL;
    if (rc == SBX_OK) {
        body = json_object();
        const char *user = o->user;
        if (user && strcmp(user, "root") != 0 && !all_digits(user)) {
            /* su -s /bin/sh -c <shq(cmd)> <shq(user)>, as the reference wraps it. */
            char *qc = osb_shq(cmd), *qu = osb_shq(user), *w = NULL;
            if (qc && qu && asprintf(&w, "su -s /bin/sh -c %s %s", qc, qu) >= 0) {
                free(cmd);
                cmd = w;
            } else
                rc = SBX_ENOMEM;
            free(qc);
            free(qu);
        } else if (user && all_digits(user)) {
            json_object_set_new(body, "uid", json_integer(strtoll(user, NULL, 10)));
        }
        json_object_set_new(body, "command", json_string(cmd ? cmd : ""));
        if (o->cwd)
            json_object_set_new(body, "cwd", json_string(o->cwd));
        if (o->background)
            json_object_set_new(body, "background", json_true());
        if (o->timeout_s > 0)
            json_object_set_new(
                body, "timeout",
                json_integer((json_int_t)ceil((o->timeout_s + OSB_EXECD_TIMEOUT_MARGIN_S) * 1000)));
        if (o->envs && json_object_size(o->envs))
            json_object_set(body, "envs", o->envs);
    }
    free(cmd);
    if (rc < 0) {
        json_decref(body);
        if (x)
            free(x->command);
        free(x);
        done(ctx, rc, NULL, err);
        return;
    }
    if (!b->execd) {
        json_decref(body);
        free(x->command);
        free(x);
        done(ctx, SBX_ESTATE, NULL,
             sbx_error_new(SBX_ESTATE, OSB_NAME ": sandbox %s has no execd endpoint", b->id));
        return;
    }
    x->op = op;
    x->st = st;
    x->b = b;
    x->body = body;
    x->timeout_s = o->timeout_s;
    x->limit = o->limit ? o->limit : OSB_MAX_OUTPUT;
    x->keep = o->keep;
    x->background = o->background;
    x->done = done;
    x->ctx = ctx;
    sbx_op_on_cancel(op, xr_cancel, x);
    if (o->timeout_s > 0 &&
        !(x->ttimer = osb_after(sbx_op_loop(op), o->timeout_s, timeout_fire, x))) {
        xr_fail(x, SBX_ENOMEM, NULL);
        return;
    }
    xr_submit(x);
}

/* --- the exec op ------------------------------------------------------------------------------ */

static void exec_done(void *ctx, int code, sbx_exec_result *r, sbx_error *err)
{
    sbx_op_complete(ctx, code, err, r);
}

/*
 * A stdin stream (the CLI's own stdin) is read to its end on a worker (it
 * may block), bounded as stdin bytes are, then the run starts back on the
 * loop (timers live there): a uv_async made here carries it over.
 */
struct sjob {
    uv_async_t async;
    sbx_op *op;
    struct osb *st;
    struct obox *b;
    char *command;
    struct osb_run_opts o;
    json_t *envs;
    char *cwd, *user;
    struct buf in;
    int fd, code;
};

static void sjob_closed(uv_handle_t *h)
{
    struct sjob *j = h->data;
    free(j->command);
    json_decref(j->envs);
    free(j->cwd);
    free(j->user);
    free(j->in.p);
    free(j);
}

static void sjob_go(uv_async_t *a)
{
    struct sjob *j = a->data;
    if (j->code < 0)
        sbx_op_complete(j->op, j->code,
                        j->code == SBX_EINVAL
                            ? sbx_error_new(SBX_EINVAL,
                                            OSB_NAME ": stdin is more than the %zu bytes execd "
                                                     "can carry (it has no stdin: the bytes "
                                                     "travel in the command)",
                                            OSB_MAX_STDIN)
                            : NULL,
                        NULL);
    else {
        j->o.stdin_data = j->in.p ? j->in.p : "";
        j->o.stdin_len = j->in.len;
        j->o.has_stdin = true;
        osb_run(j->op, j->st, j->b, j->command, &j->o, exec_done, j->op);
    }
    uv_close((uv_handle_t *)a, sjob_closed);
}

static void sjob_read(sbx_op *op, void *data)
{
    (void)op;
    struct sjob *j = data;
    char chunk[16384];
    for (;;) {
        ssize_t n = read(j->fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            j->code = SBX_EIO;
            break;
        }
        if (n == 0)
            break;
        if (j->in.len + (size_t)n > OSB_MAX_STDIN) {
            j->code = SBX_EINVAL;
            break;
        }
        if (buf_add(&j->in, chunk, (size_t)n) < 0) {
            j->code = SBX_ENOMEM;
            break;
        }
    }
    uv_async_send(&j->async);
}

static void stdin_stream(sbx_op *op, struct osb *st, struct obox *b, const char *command,
                         const struct osb_run_opts *o, int fd)
{
    struct sjob *j = calloc(1, sizeof(*j));
    if (!j || !(j->command = strdup(command)) || (o->cwd && !(j->cwd = strdup(o->cwd))) ||
        (o->user && !(j->user = strdup(o->user)))) {
        if (j) {
            free(j->command);
            free(j->cwd);
            free(j);
        }
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->op = op;
    j->st = st;
    j->b = b;
    j->fd = fd;
    j->o = *o;
    j->o.cwd = j->cwd;
    j->o.user = j->user;
    j->envs = o->envs ? json_incref(o->envs) : NULL;
    j->o.envs = j->envs;
    uv_async_init(sbx_op_loop(op), &j->async, sjob_go);
    j->async.data = j;
    int rc = sbx_op_run_blocking(op, sjob_read, j);
    if (rc < 0) {
        j->code = rc;
        uv_async_send(&j->async);
    }
}

void osb_exec(sbx_op *op, void *state, void *box, const char *command, const sbx_exec_opts *opts)
{
    struct osb *st = state;
    /* An argv (no shell wanted) becomes one string execd's shell splits back into it. */
    char *joined = NULL;
    const char *const *argv = sbx_exec_opts_argv(opts);
    if (argv) {
        struct buf j = {0};
        int rc = SBX_OK;
        for (size_t i = 0; argv[i] && rc == SBX_OK; i++) {
            char *q = osb_shq(argv[i]);
            rc = !q || (i && buf_add(&j, " ", 1) < 0) || buf_add(&j, q, strlen(q)) < 0 ? SBX_ENOMEM
                                                                                       : SBX_OK;
            free(q);
        }
        if (rc < 0 || !j.p) {
            free(j.p);
            sbx_op_complete(op, rc < 0 ? rc : SBX_EINVAL, NULL, NULL);
            return;
        }
        command = joined = j.p;
    }
    json_t *env = json_object();
    for (size_t i = 0; i < sbx_exec_opts_env_count(opts); i++) {
        const char *k, *v;
        sbx_exec_opts_env_at(opts, i, &k, &v);
        json_object_set_new(env, k, json_string(v));
    }
    size_t in_len = 0;
    const void *in = sbx_exec_opts_stdin(opts, &in_len);
    struct osb_run_opts o = {
        .cwd = sbx_exec_opts_cwd(opts),
        .envs = env,
        .user = sbx_exec_opts_user(opts),
        .timeout_s = sbx_exec_opts_timeout(opts),
        .limit = sbx_exec_opts_output_limit(opts),
        .keep = sbx_exec_opts_keep_output(opts),
        .background = st->cfg.operations.background_exec,
        .stdin_data = in,
        .stdin_len = in_len,
        .has_stdin = in != NULL,
    };
    int fd = sbx_exec_opts_stdin_fd(opts);
    if (fd >= 0) {
        stdin_stream(op, st, box, command, &o, fd);
    } else
        osb_run(op, st, box, command, &o, exec_done, op);
    json_decref(env);
    free(joined);
}
