/*
 * opensandbox: the provider table, the plumbing every operation shares, and
 * the lifecycle: create (the request with the SDK's defaults, the
 * reference's retries and backoff, readiness through execd's endpoint and
 * /ping, the probe with stable_count, the box deleted when a step after the
 * create fails), status, close, endpoint, serialize/connect, and the
 * provider-wide list, stop by id and gc (the reference's cleanup_sandboxes).
 *
 * The wire protocol is the one /work/shared/spec/providers-remote.md §1
 * summarises from OpenSandbox's public specs (specs/sandbox-lifecycle.yml,
 * specs/execd-api.yaml); docs/providers/opensandbox.md says what differs.
 */
#include "osb.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <uv.h>

/* --- plumbing --------------------------------------------------------------------- */

double osb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double osb_backoff(double base, double cap, int n)
{
    double top = base * pow(2.0, n - 1);
    if (top > cap)
        top = cap;
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = (uint32_t)rand();
    return top * ((double)r / 4294967296.0);
}

struct osb_timer {
    uv_timer_t t;
    void (*fn)(void *);
    void *data;
};

static void timer_closed(uv_handle_t *h)
{
    free(h->data);
}

static void timer_fire(uv_timer_t *t)
{
    struct osb_timer *o = t->data;
    void (*fn)(void *) = o->fn;
    void *data = o->data;
    uv_close((uv_handle_t *)t, timer_closed);
    fn(data);
}

struct osb_timer *osb_after(void *loop, double s, void (*fn)(void *data), void *data)
{
    struct osb_timer *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->fn = fn;
    o->data = data;
    uv_timer_init(loop, &o->t);
    o->t.data = o;
    uint64_t ms = s > 0 ? (uint64_t)ceil(s * 1000) : 0;
    uv_timer_start(&o->t, timer_fire, ms, 0);
    return o;
}

void osb_timer_cancel(struct osb_timer *t)
{
    if (t) {
        uv_timer_stop(&t->t);
        uv_close((uv_handle_t *)&t->t, timer_closed);
    }
}

struct sendctx {
    sbx_http_request **slot;
    osb_done_fn done;
    void *ctx;
};

static void send_done(sbx_http_request *r, int code, sbx_http_response *resp, sbx_error *err,
                      void *user)
{
    (void)r;
    struct sendctx *s = user;
    if (s->slot)
        *s->slot = NULL;
    osb_done_fn done = s->done;
    void *ctx = s->ctx;
    free(s);
    done(ctx, code, resp, err);
}

void osb_send(sbx_op *op, sbx_http_request *req, double deadline_s, sbx_http_request **slot,
              osb_done_fn done, void *ctx)
{
    struct sendctx *s = calloc(1, sizeof(*s));
    sbx_error *err = NULL;
    int rc = s ? SBX_OK : SBX_ENOMEM;
    if (s) {
        *s = (struct sendctx){.slot = slot, .done = done, .ctx = ctx};
        if (deadline_s > 0)
            sbx_http_request_set_deadline(req, deadline_s);
        if (slot)
            *slot = req;
        rc = sbx_http_request_send(req, sbx_op_loop(op), send_done, s, &err);
    }
    if (rc < 0) {
        if (slot)
            *slot = NULL;
        sbx_http_request_free(req);
        free(s);
        done(ctx, rc, NULL, err);
    }
}

int osb_request(sbx_http_client *c, const char *method, const char *path, json_t *body,
                sbx_http_request **out, sbx_error **err)
{
    sbx_http_request *req = NULL;
    int rc = sbx_http_request_new(c, method, path, &req, err);
    if (rc == SBX_OK && body) {
        char *text = json_dumps(body, JSON_COMPACT);
        rc = text ? sbx_http_request_set_body(req, text, strlen(text), "application/json")
                  : SBX_ENOMEM;
        free(text);
    }
    json_decref(body);
    if (rc < 0) {
        sbx_http_request_free(req);
        return rc;
    }
    *out = req;
    return SBX_OK;
}

static void cancel_slot_cb(sbx_op *op, void *data)
{
    (void)op;
    sbx_http_request **slot = data;
    if (*slot)
        sbx_http_request_cancel(*slot);
}

void osb_cancel_slot(sbx_op *op, void *slot)
{
    sbx_op_on_cancel(op, cancel_slot_cb, slot);
}

void osb_call(sbx_op *op, sbx_http_client *c, const char *method, char *path, double deadline_s,
              sbx_http_request **slot, osb_done_fn done, void *ctx)
{
    sbx_http_request *req = NULL;
    sbx_error *err = NULL;
    int rc = path ? osb_request(c, method, path, NULL, &req, &err) : SBX_ENOMEM;
    free(path);
    if (rc < 0) {
        done(ctx, rc, NULL, err);
        return;
    }
    osb_send(op, req, deadline_s, slot, done, ctx);
}

char *osb_path_id(const char *fmt, const char *id)
{
    char *eid = sbx_http_escape(id), *p = NULL;
    if (eid && asprintf(&p, fmt, eid) < 0)
        p = NULL;
    free(eid);
    return p;
}

char *osb_query(const char *path, const char *key, const char *value)
{
    char *q = sbx_http_escape(value), *out = NULL;
    if (q && asprintf(&out, "%s?%s=%s", path, key, q) < 0)
        out = NULL;
    free(q);
    return out;
}

static char *sandbox_path(const char *id, const char *rest)
{
    char *p = osb_path_id("/sandboxes/%s", id), *out = NULL;
    if (p && asprintf(&out, "%s%s", p, rest ? rest : "") < 0)
        out = NULL;
    free(p);
    return out;
}

/* A JSON body of a 2xx answer, or NULL. */
static json_t *body_json(sbx_http_response *resp)
{
    size_t n = 0;
    const char *b = sbx_http_response_body(resp, &n);
    return json_loadb(b, n, 0, NULL);
}

/* --- provider -------------------------------------------------------------------- */

static void osb_release(void *state)
{
    struct osb *st = state;
    if (!st)
        return;
    sbx_http_client_free(st->api);
    json_decref(st->labels);
    osb_config_free(&st->cfg);
    free(st->scheme);
    free(st);
}

/* Retried by the kit for idempotent requests: the reference's operation predicate's statuses. */
static void retry_policy(sbx_http_client *c, const struct osb_operations *o)
{
    sbx_http_client_set_retry(c, (int)o->retries + 1, o->retry_delay_s, o->retry_max_delay_s);
    static const int statuses[] = {408, 409, 425, 429, 500, 502, 503, 504};
    for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
        sbx_http_client_retry_status(c, statuses[i], 1);
}

static int osb_init(const char *config_json, void **state, sbx_error **err)
{
    struct osb *st = calloc(1, sizeof(*st));
    if (!st)
        return SBX_ENOMEM;
    int rc = osb_config_parse(config_json, &st->cfg, &st->labels, err);
    if (rc < 0) {
        free(st);
        return rc;
    }
    /* {protocol}://{domain}/v1; a domain with a scheme keeps it; a trailing / goes. */
    const char *domain = st->cfg.connection.domain;
    size_t n = strlen(domain);
    while (n && domain[n - 1] == '/')
        n--;
    char *url = NULL;
    const char *sep = strstr(domain, "://");
    if (sep) {
        st->scheme = strndup(domain, (size_t)(sep - domain));
        rc = asprintf(&url, "%.*s/v1", (int)n, domain) < 0 ? SBX_ENOMEM : SBX_OK;
    } else {
        st->scheme = strdup(osb_protocols[st->cfg.connection.protocol]);
        rc = asprintf(&url, "%s://%.*s/v1", st->scheme, (int)n, domain) < 0 ? SBX_ENOMEM : SBX_OK;
    }
    if (rc == SBX_OK && !st->scheme)
        rc = SBX_ENOMEM;
    if (rc == SBX_OK && (rc = sbx_http_client_new(OSB_NAME, url, &st->api, err)) < 0)
        *err = sbx_error_prefix(*err, OSB_NAME ": connection.domain '%.128s'", domain);
    free(url);
    if (rc == SBX_OK) {
        /* Every request carries its own deadline (create's are longer than the others'). */
        sbx_http_client_set_timeouts(st->api, 10, 0);
        retry_policy(st->api, &st->cfg.operations);
        const char *key = st->cfg.connection.api_key;
        if (key && *key && sbx_http_client_set_header(st->api, "OPEN-SANDBOX-API-KEY", key) < 0) {
            *err = sbx_error_new(SBX_EINVAL, OSB_NAME ": connection.api_key is not a valid "
                                                      "header value");
            rc = SBX_EINVAL;
        }
    }
    if (rc < 0) {
        osb_release(st);
        return rc;
    }
    *state = st;
    return SBX_OK;
}

int osb_execd_client(struct osb *st, const struct osb_endpoint *ep, sbx_http_client **out,
                     sbx_error **err)
{
    char *url = NULL;
    if (strstr(ep->endpoint, "://") ? asprintf(&url, "%s", ep->endpoint) < 0
                                    : asprintf(&url, "%s://%s", st->scheme, ep->endpoint) < 0)
        return SBX_ENOMEM;
    size_t n = strlen(url);
    while (n && url[n - 1] == '/')
        url[--n] = 0;
    sbx_http_client *c = NULL;
    int rc = sbx_http_client_new(OSB_NAME, url, &c, err);
    free(url);
    if (rc < 0)
        return rc;
    sbx_http_client_set_timeouts(c, 10, 0);
    retry_policy(c, &st->cfg.operations);
    sbx_http_client_set_max_body(c, OSB_MAX_FILE + 1);
    const char *k;
    json_t *v;
    json_object_foreach(ep->headers, k, v)
    {
        if (sbx_http_client_set_header(c, k, json_string_value(v)) < 0)
            rc = SBX_ENOMEM;
    }
    /*
     * The key rule: the management key goes to execd only through the
     * server's proxy, which checks it; a direct endpoint is the pod itself
     * and must never see it (the reference's os/provider.py:662-671).
     */
    const char *key = st->cfg.connection.api_key;
    if (rc == SBX_OK && st->cfg.connection.use_server_proxy && key && *key &&
        sbx_http_client_set_header(c, "OPEN-SANDBOX-API-KEY", key) < 0)
        rc = SBX_ENOMEM;
    if (rc < 0) {
        sbx_http_client_free(c);
        return rc;
    }
    *out = c;
    return SBX_OK;
}

void obox_free(void *box)
{
    struct obox *b = box;
    if (!b)
        return;
    sbx_http_client_free(b->execd);
    for (size_t i = 0; i < b->n_pty_sids; i++)
        free(b->pty_sids[i]);
    free(b->pty_sids);
    free(b->id);
    free(b);
}

static const char *osb_box_id(const void *box)
{
    return ((const struct obox *)box)->id;
}

static double lifecycle_deadline(const struct osb *st)
{
    return st->cfg.connection.request_timeout_s > 0 ? st->cfg.connection.request_timeout_s : 0;
}

/* --- create and connect ----------------------------------------------------------------- */

struct cjob {
    sbx_op *op;
    struct osb *st;
    json_t *body; /* NULL for a connect */
    bool skip_health;
    double ready_timeout;
    int attempt, attempts;
    struct obox *box;
    sbx_http_request *cur;
    struct osb_timer *sleep;
    double deadline; /* of the step under way (ping, probe) */
    int passes;
    /* What the last failure was, and whether the reference would retry it. */
    int code;
    sbx_error *err;
    bool retryable;
};

static void cj_free(struct cjob *cj)
{
    json_decref(cj->body);
    obox_free(cj->box);
    sbx_error_free(cj->err);
    free(cj);
}

static void cj_try(struct cjob *cj);
static void cj_endpoint(struct cjob *cj);
static void cj_ping(struct cjob *cj);
static void cj_probe(struct cjob *cj);

static void cj_fail(struct cjob *cj, int code, sbx_error *err, bool retryable);

static void cj_sleep_done(void *data)
{
    struct cjob *cj = data;
    void (*next)(struct cjob *) = NULL;
    cj->sleep = NULL;
    sbx_op_on_cancel(cj->op, NULL, NULL);
    if (sbx_op_cancelled(cj->op)) {
        cj_fail(cj, SBX_ECANCELED, NULL, false); /* the box this attempt made goes too */
        return;
    }
    /* Which step waits is written in `passes`' sign: see cj_wait. */
    next = cj->box && cj->box->execd ? (cj->passes >= 0 ? cj_probe : cj_ping)
           : cj->box                 ? cj_endpoint
                                     : cj_try;
    if (cj->passes < 0)
        cj->passes = 0;
    next(cj);
}

static void cj_sleep_cancel(sbx_op *op, void *data)
{
    struct cjob *cj = data;
    (void)op;
    if (cj->sleep) {
        osb_timer_cancel(cj->sleep);
        cj->sleep = NULL;
        sbx_op_on_cancel(cj->op, NULL, NULL);
        /* A box made by this attempt is deleted before the op ends (cj_fail does). */
        cj_fail(cj, SBX_ECANCELED, NULL, false);
    }
}

/* Sleeps `s`, then goes on with the step the job is at (a ping when `ping`). */
static void cj_wait(struct cjob *cj, double s, bool ping)
{
    if (ping)
        cj->passes = -1;
    sbx_op_on_cancel(cj->op, cj_sleep_cancel, cj);
    if (!(cj->sleep = osb_after(sbx_op_loop(cj->op), s, cj_sleep_done, cj))) {
        sbx_op_on_cancel(cj->op, NULL, NULL);
        sbx_op_complete(cj->op, SBX_ENOMEM, NULL, NULL);
        cj_free(cj);
    }
}

static void cj_succeed(struct cjob *cj)
{
    sbx_op_on_cancel(cj->op, NULL, NULL);
    struct obox *b = cj->box;
    cj->box = NULL;
    sbx_op_complete(cj->op, SBX_OK, NULL, b);
    cj_free(cj);
}

static void cj_decide(struct cjob *cj)
{
    if (cj->retryable && cj->attempt < cj->attempts && !sbx_op_cancelled(cj->op)) {
        const struct osb_create *c = &cj->st->cfg.create;
        double wait = osb_backoff(c->retry_delay_s, c->retry_max_delay_s, cj->attempt);
        sbx_log(SBX_LOG_WARNING,
                OSB_NAME ": create attempt %d of %d failed (%s); retrying in %.2fs", cj->attempt,
                cj->attempts, sbx_error_message(cj->err), wait);
        sbx_error_free(cj->err);
        cj->err = NULL;
        cj_wait(cj, wait, false);
        return;
    }
    sbx_op_on_cancel(cj->op, NULL, NULL);
    sbx_error *e = cj->err;
    cj->err = NULL;
    if (cj->body && cj->attempts > 1)
        e = sbx_error_prefix(e, "after %d attempt%s", cj->attempt, cj->attempt > 1 ? "s" : "");
    sbx_op_complete(cj->op, cj->code, e, NULL);
    cj_free(cj);
}

static void cj_deleted(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    (void)code;
    (void)resp;
    struct cjob *cj = ctx;
    sbx_error_free(err); /* best-effort: the failure that led here is what the caller hears */
    obox_free(cj->box);
    cj->box = NULL;
    cj_decide(cj);
}

/*
 * A step failed: the box this attempt made is deleted (best-effort), then
 * the create is retried or fails. A connect fails at once.
 */
static void cj_fail(struct cjob *cj, int code, sbx_error *err, bool retryable)
{
    if (code == SBX_ECANCELED || sbx_op_cancelled(cj->op))
        retryable = false;
    sbx_error_free(cj->err);
    cj->code = code;
    cj->err = err ? err : sbx_error_new(code, OSB_NAME ": %s", sbx_strerror(code));
    cj->retryable = retryable;
    if (!cj->body) {
        cj->attempts = 0;
        cj_decide(cj);
        return;
    }
    if (!cj->box) {
        cj_decide(cj);
        return;
    }
    sbx_op_on_cancel(cj->op, NULL, NULL); /* the cleanup runs to its end */
    osb_call(cj->op, cj->st->api, "DELETE", sandbox_path(cj->box->id, NULL),
             cj->st->cfg.operations.close_timeout_s, NULL, cj_deleted, cj);
}

static bool retryable_status(int s)
{
    return s == 408 || s == 409 || s == 425 || s == 429 || s == 500 || s == 502 || s == 503 ||
           s == 504;
}

/* A request's outcome for the create flow: a 2xx response, or the step failed. */
static bool cj_ok(struct cjob *cj, int code, sbx_http_response *resp, sbx_error *err,
                  const char *what)
{
    if (code == SBX_OK && (code = sbx_http_response_check(resp, &err)) == SBX_OK)
        return true;
    int status = resp ? sbx_http_response_status(resp) : 0;
    /* Transport failures (refused, reset, timed out) are retried; statuses by the reference's set.
     */
    bool retry = status ? retryable_status(status) : code != SBX_ECANCELED && code != SBX_ENOMEM;
    if (status >= 500 || !status)
        code = code == SBX_ETIMEDOUT ? SBX_ETIMEDOUT : SBX_ECREATE;
    cj_fail(cj, code, sbx_error_prefix(err, "%s", what), retry);
    return false;
}

static void cj_probed(void *ctx, int code, sbx_exec_result *r, sbx_error *err)
{
    struct cjob *cj = ctx;
    const struct osb_probe *p = &cj->st->cfg.probe;
    sbx_op_on_cancel(cj->op, NULL, NULL);
    if (code == SBX_ECANCELED || sbx_op_cancelled(cj->op)) {
        sbx_exec_result_free(r);
        cj_fail(cj, SBX_ECANCELED, err, false);
        return;
    }
    const char *out = r ? sbx_exec_result_stdout(r, NULL) : NULL;
    bool pass = code == SBX_OK && sbx_exec_result_return_code(r) == 0 && out &&
                strstr(out, p->expected_stdout);
    char seen[160];
    if (code == SBX_OK)
        snprintf(seen, sizeof(seen), "exit %d, stdout '%.100s'", sbx_exec_result_return_code(r),
                 out ? out : "");
    else
        snprintf(seen, sizeof(seen), "%.150s", sbx_error_message(err));
    sbx_exec_result_free(r);
    sbx_error_free(err);
    double left = cj->deadline - osb_now();
    if (pass) {
        if (++cj->passes >= p->stable_count) {
            cj_succeed(cj);
            return;
        }
        cj_wait(cj, p->stable_delay_s > 0 ? fmin(p->stable_delay_s, fmax(left, 0)) : 0, false);
        return;
    }
    cj->passes = 0;
    if (left <= 0) {
        cj_fail(cj, SBX_EVERIFY,
                sbx_error_new(SBX_EVERIFY,
                              OSB_NAME ": sandbox %s did not pass its readiness probe '%s' "
                                       "within %.0fs (last: %s); check the image runs a shell",
                              cj->box->id, p->command,
                              p->deadline_s >= 0 ? p->deadline_s : p->timeout_s, seen),
                true);
        return;
    }
    cj_wait(cj, fmin(cj->st->cfg.create.connect_poll_s, left), false);
}

static void cj_probe(struct cjob *cj)
{
    const struct osb_probe *p = &cj->st->cfg.probe;
    double now = osb_now();
    if (cj->deadline <= 0) /* the first probe sets the deadline */
        cj->deadline = now + (p->deadline_s >= 0 ? p->deadline_s : fmax(p->timeout_s, 0));
    double t = p->timeout_s;
    if (p->deadline_s >= 0 && (t < 0 || t > cj->deadline - now))
        t = fmax(cj->deadline - now, 0.001);
    struct osb_run_opts o = {.user = "root", .timeout_s = t, .keep = true};
    osb_run(cj->op, cj->st, cj->box, p->command, &o, cj_probed, cj);
}

static void cj_pinged(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct cjob *cj = ctx;
    if (code == SBX_ECANCELED) {
        cj_fail(cj, code, err, false);
        return;
    }
    if (code == SBX_OK && sbx_http_response_status(resp) / 100 == 2) {
        cj->deadline = 0;
        if (cj->body)
            cj_probe(cj);
        else
            cj_succeed(cj);
        return;
    }
    sbx_error_free(err);
    if (osb_now() >= cj->deadline) {
        cj_fail(cj, SBX_ECREATE,
                sbx_error_new(SBX_ECREATE,
                              OSB_NAME ": sandbox %s: execd did not answer /ping within %.0fs "
                                       "(raise ready_timeout_s, or look at the pod's events)",
                              cj->box->id, cj->ready_timeout),
                true);
        return;
    }
    cj_wait(cj, OSB_PING_INTERVAL_S, true);
}

static void cj_ping(struct cjob *cj)
{
    sbx_http_request *req = NULL;
    sbx_error *err = NULL;
    if (osb_request(cj->box->execd, "GET", "/ping", NULL, &req, &err) < 0) {
        cj_fail(cj, SBX_ENOMEM, err, false);
        return;
    }
    sbx_http_request_set_idempotent(req, 0); /* the poll is the retry */
    osb_cancel_slot(cj->op, &cj->cur);
    double left = cj->deadline - osb_now();
    osb_send(cj->op, req, fmax(fmin(left, 5), 0.05), &cj->cur, cj_pinged, cj);
}

static void cj_ready(struct cjob *cj)
{
    if (cj->skip_health) {
        if (cj->body)
            cj_probe(cj);
        else
            cj_succeed(cj);
        return;
    }
    cj->deadline = osb_now() + cj->ready_timeout;
    cj_ping(cj);
}

static void cj_egress(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct cjob *cj = ctx;
    if (!cj_ok(cj, code, resp, err, "fetching the egress endpoint"))
        return;
    cj_ready(cj);
}

static void cj_got_endpoint(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct cjob *cj = ctx;
    if (!cj_ok(cj, code, resp, err, "fetching the execd endpoint"))
        return;
    size_t n = 0;
    const char *b = sbx_http_response_body(resp, &n);
    struct osb_endpoint ep;
    int rc = osb_endpoint_parse(b, n, &ep, &err);
    if (rc == SBX_OK) {
        rc = osb_execd_client(cj->st, &ep, &cj->box->execd, &err);
        osb_endpoint_clear(&ep);
    }
    if (rc < 0) {
        cj_fail(cj, rc, err, false);
        return;
    }
    /* The SDK fetches the egress sidecar's endpoint too: a box without it is not ready. */
    char rest[96];
    snprintf(rest, sizeof(rest), "/endpoints/%d?use_server_proxy=%s", OSB_EGRESS_PORT,
             cj->st->cfg.connection.use_server_proxy ? "true" : "false");
    char *path = sandbox_path(cj->box->id, rest);
    osb_cancel_slot(cj->op, &cj->cur);
    osb_call(cj->op, cj->st->api, "GET", path, lifecycle_deadline(cj->st), &cj->cur, cj_egress, cj);
}

static void cj_endpoint(struct cjob *cj)
{
    char rest[96];
    snprintf(rest, sizeof(rest), "/endpoints/%d?use_server_proxy=%s", OSB_EXECD_PORT,
             cj->st->cfg.connection.use_server_proxy ? "true" : "false");
    char *path = sandbox_path(cj->box->id, rest);
    osb_cancel_slot(cj->op, &cj->cur);
    osb_call(cj->op, cj->st->api, "GET", path, lifecycle_deadline(cj->st), &cj->cur,
             cj_got_endpoint, cj);
}

static void cj_created(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct cjob *cj = ctx;
    if (!cj_ok(cj, code, resp, err, "creating the sandbox"))
        return;
    json_t *j = body_json(resp);
    const char *id = json_string_value(json_object_get(j, "id"));
    if (!id || !*id || strlen(id) > 256) {
        json_decref(j);
        cj_fail(cj, SBX_EPROTO,
                sbx_error_new(SBX_EPROTO, OSB_NAME ": the create answer has no usable sandbox id"),
                false);
        return;
    }
    cj->box = calloc(1, sizeof(*cj->box));
    if (cj->box && !(cj->box->id = strdup(id))) {
        free(cj->box);
        cj->box = NULL;
    }
    json_decref(j);
    if (!cj->box) {
        cj_fail(cj, SBX_ENOMEM, NULL, false);
        return;
    }
    cj_endpoint(cj);
}

static void cj_try(struct cjob *cj)
{
    cj->attempt++;
    cj->passes = 0;
    cj->deadline = 0;
    sbx_http_request *req = NULL;
    sbx_error *err = NULL;
    if (osb_request(cj->st->api, "POST", "/sandboxes", json_incref(cj->body), &req, &err) < 0) {
        cj_fail(cj, SBX_ENOMEM, err, false);
        return;
    }
    const struct osb_create *c = &cj->st->cfg.create;
    double t = c->timeout_s >= 0 ? c->timeout_s : c->request_timeout_s;
    osb_cancel_slot(cj->op, &cj->cur);
    osb_send(cj->op, req, t > 0 ? t : 0, &cj->cur, cj_created, cj);
}

static void osb_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    struct osb *st = state;
    struct cjob *cj = calloc(1, sizeof(*cj));
    sbx_error *err = NULL;
    if (!cj) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    int rc = osb_create_body(&st->cfg, st->labels, spec, &cj->body, &cj->skip_health, &err);
    if (rc < 0) {
        free(cj);
        sbx_op_complete(op, rc, err, NULL);
        return;
    }
    cj->op = op;
    cj->st = st;
    cj->attempts = (int)st->cfg.create.retries + 1;
    double ready;
    cj->ready_timeout =
        sbx_spec_get_ready_timeout(spec, &ready) && ready > 0 ? ready : OSB_DEFAULT_READY_TIMEOUT_S;
    cj_try(cj);
}

static void cj_info(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct cjob *cj = ctx;
    if (code == SBX_OK && sbx_http_response_status(resp) == 404) {
        cj_fail(cj, SBX_ENOENT,
                sbx_error_new(SBX_ENOENT,
                              OSB_NAME ": no sandbox %s on the server (stopped, or "
                                       "its TTL passed)",
                              cj->box->id),
                false);
        return;
    }
    if (!cj_ok(cj, code, resp, err, "connecting"))
        return;
    cj_endpoint(cj);
}

/* A descriptor is input: its id is checked with the service before the handle exists. */
static void osb_connect(sbx_op *op, void *state, const char *descriptor_json)
{
    struct osb *st = state;
    json_t *d = json_loads(descriptor_json ? descriptor_json : "", 0, NULL);
    const char *id = json_string_value(json_object_get(d, "sandbox_id"));
    if (!id || !*id || strlen(id) > 256) {
        json_decref(d);
        sbx_op_complete(op, SBX_EINVAL,
                        sbx_error_new(SBX_EINVAL, OSB_NAME ": a descriptor needs a \"sandbox_id\" "
                                                           "string (what serialize() gives)"),
                        NULL);
        return;
    }
    struct cjob *cj = calloc(1, sizeof(*cj));
    if (cj && (cj->box = calloc(1, sizeof(*cj->box))))
        cj->box->id = strdup(id);
    json_decref(d);
    if (!cj || !cj->box || !cj->box->id) {
        if (cj)
            cj_free(cj);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    cj->op = op;
    cj->st = st;
    cj->skip_health = st->cfg.create.skip_health_check;
    cj->ready_timeout = st->cfg.create.connect_attempt_timeout_s > 0
                            ? st->cfg.create.connect_attempt_timeout_s
                            : OSB_DEFAULT_READY_TIMEOUT_S;
    osb_cancel_slot(op, &cj->cur);
    osb_call(op, st->api, "GET", sandbox_path(cj->box->id, NULL), lifecycle_deadline(st), &cj->cur,
             cj_info, cj);
}

static void osb_serialize(sbx_op *op, void *state, void *box, const char *scope)
{
    (void)state;
    (void)scope;
    json_t *d = json_pack("{s:s}", "sandbox_id", ((struct obox *)box)->id);
    char *text = d ? json_dumps(d, JSON_COMPACT) : NULL;
    json_decref(d);
    sbx_op_complete(op, text ? SBX_OK : SBX_ENOMEM, NULL, text);
}

/* --- one-request operations: status, close, endpoint, stop by id ------------------------- */

typedef void (*answer_fn)(sbx_op *op, struct osb *st, int status, sbx_http_response *resp,
                          void *data);

struct single {
    sbx_op *op;
    struct osb *st;
    sbx_http_request *cur;
    answer_fn answer; /* a 2xx, or a 404 when gone_ok */
    bool gone_ok;
    const char *what;
    void *data;
};

static void single_done(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct single *s = ctx;
    sbx_op_on_cancel(s->op, NULL, NULL);
    int status = code == SBX_OK ? sbx_http_response_status(resp) : 0;
    if (code == SBX_OK && s->gone_ok && status == 404)
        s->answer(s->op, s->st, status, resp, s->data);
    else if (code == SBX_OK && (code = sbx_http_response_check(resp, &err)) == SBX_OK)
        s->answer(s->op, s->st, status, resp, s->data);
    else
        sbx_op_complete(s->op, code, sbx_error_prefix(err, "%s", s->what), NULL);
    free(s);
}

/* METHOD `path` (taken) on the lifecycle API for `op`, its answer to `answer`. */
static void single(sbx_op *op, struct osb *st, const char *method, char *path, double deadline,
                   bool gone_ok, const char *what, answer_fn answer, void *data)
{
    struct single *s = calloc(1, sizeof(*s));
    if (!s) {
        free(path);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    *s = (struct single){
        .op = op, .st = st, .answer = answer, .gone_ok = gone_ok, .what = what, .data = data};
    osb_cancel_slot(op, &s->cur);
    osb_call(op, st->api, method, path, deadline, &s->cur, single_done, s);
}

static void status_answer(sbx_op *op, struct osb *st, int status, sbx_http_response *resp,
                          void *data)
{
    (void)st;
    (void)data;
    sbx_status s = SBX_STATUS_STOPPED; /* 404: the server no longer has it */
    if (status != 404) {
        size_t n = 0;
        const char *b = sbx_http_response_body(resp, &n);
        struct osb_info info;
        sbx_error *err = NULL;
        int rc = osb_info_parse(b, n, &info, &err);
        if (rc < 0) {
            sbx_op_complete(op, rc, err, NULL);
            return;
        }
        s = osb_status_of(info.state);
        osb_info_clear(&info);
    }
    sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)s);
}

static void osb_status(sbx_op *op, void *state, void *box)
{
    struct osb *st = state;
    char *path = sandbox_path(((struct obox *)box)->id, NULL);
    single(op, st, "GET", path, lifecycle_deadline(st), true, "status", status_answer, NULL);
}

static void closed(sbx_op *op, struct osb *st, int status, sbx_http_response *resp, void *data)
{
    (void)st;
    (void)status;
    (void)resp;
    (void)data;
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

static void osb_close(sbx_op *op, void *state, void *box, int owned)
{
    struct osb *st = state;
    /* A connected handle borrows the box: letting go leaves it running. */
    if (!owned) {
        sbx_op_complete(op, SBX_OK, NULL, NULL);
        return;
    }
    char *path = sandbox_path(((struct obox *)box)->id, NULL);
    /* Already gone (404: its TTL, a stop elsewhere) is a success, as the reference has it. */
    single(op, st, "DELETE", path, st->cfg.operations.close_timeout_s, true, "deleting the sandbox",
           closed, NULL);
}

static void osb_stop_id(sbx_op *op, void *state, const char *id)
{
    struct osb *st = state;
    char *path = sandbox_path(id, NULL);
    /* A 404 is SBX_ENOENT here: `sbx stop ID` of an unknown box says so. */
    single(op, st, "DELETE", path, st->cfg.operations.close_timeout_s, false, "stopping", closed,
           NULL);
}

static void endpoint_answer(sbx_op *op, struct osb *st, int status, sbx_http_response *resp,
                            void *data)
{
    (void)status;
    (void)data;
    size_t n = 0;
    const char *b = sbx_http_response_body(resp, &n);
    struct osb_endpoint ep;
    sbx_error *err = NULL;
    int rc = osb_endpoint_parse(b, n, &ep, &err);
    if (rc < 0) {
        sbx_op_complete(op, rc, err, NULL);
        return;
    }
    char *url = NULL;
    sbx_endpoint *e = NULL;
    if (strstr(ep.endpoint, "://") ? asprintf(&url, "%s", ep.endpoint) < 0
                                   : asprintf(&url, "%s://%s", st->scheme, ep.endpoint) < 0)
        url = NULL;
    rc = url ? sbx_endpoint_new(url, &e, &err) : SBX_ENOMEM;
    free(url);
    /* The key through the proxy only (the key rule), then the endpoint's own headers over it. */
    const char *key = st->cfg.connection.api_key;
    if (rc == SBX_OK && st->cfg.connection.use_server_proxy && key && *key &&
        !json_object_get(ep.headers, "OPEN-SANDBOX-API-KEY"))
        rc = sbx_endpoint_add_header(e, "OPEN-SANDBOX-API-KEY", key);
    const char *k;
    json_t *v;
    if (rc == SBX_OK)
        json_object_foreach(ep.headers, k, v)
        {
            if ((rc = sbx_endpoint_add_header(e, k, json_string_value(v))) < 0)
                break;
        }
    osb_endpoint_clear(&ep);
    if (rc < 0) {
        sbx_endpoint_free(e);
        sbx_op_complete(op, rc, err, NULL);
        return;
    }
    sbx_op_complete(op, SBX_OK, NULL, e);
}

static void osb_endpoint(sbx_op *op, void *state, void *box, int port)
{
    struct osb *st = state;
    char rest[96];
    snprintf(rest, sizeof(rest), "/endpoints/%d?use_server_proxy=%s", port,
             st->cfg.connection.use_server_proxy ? "true" : "false");
    char *path = sandbox_path(((struct obox *)box)->id, rest);
    single(op, st, "GET", path, lifecycle_deadline(st), false, "endpoint", endpoint_answer, NULL);
}

/* --- list, gc: the listing's pages, then (gc) deletes ------------------------------------- */

#define OSB_PAGE_SIZE 100
#define OSB_MAX_PAGES 1000 /* 100000 boxes: past that the listing is not trusted to end */
#define OSB_REAP_SWEEPS 3  /* the reference's cleanup_sandboxes re-lists and sweeps so often */

struct ljob {
    sbx_op *op;
    struct osb *st;
    sbx_http_request *cur;
    json_t *labels; /* the filter (an object, maybe empty) */
    bool gc, dry_run;
    int page, sweep;
    json_t *items;   /* this listing's raw sandboxes */
    json_t *pick;    /* gc: ids to delete in this sweep */
    size_t next;     /* gc: the next of pick */
    json_t *removed; /* gc: every id removed (or that would be) */
};

static void lj_free(struct ljob *lj)
{
    json_decref(lj->labels);
    json_decref(lj->items);
    json_decref(lj->pick);
    json_decref(lj->removed);
    free(lj);
}

static void lj_finish(struct ljob *lj, int code, sbx_error *err, json_t *value)
{
    sbx_op_on_cancel(lj->op, NULL, NULL);
    char *text = value ? json_dumps(value, JSON_COMPACT) : NULL;
    json_decref(value);
    if (code == SBX_OK && !text)
        code = SBX_ENOMEM;
    sbx_op_complete(lj->op, code, err, code == SBX_OK ? text : NULL);
    if (code != SBX_OK)
        free(text);
    lj_free(lj);
}

static int parse_labels(const char *json, const char *what, json_t **labels, bool *dry_run,
                        sbx_error **err)
{
    json_t *j = json ? json_loads(json, 0, NULL) : json_object();
    json_t *l = json_object_get(j, "labels");
    const char *k;
    json_t *v;
    bool ok = json_is_object(j) && (!l || json_is_object(l));
    if (ok && l)
        json_object_foreach(l, k, v) ok = ok && json_is_string(v);
    if (!ok) {
        json_decref(j);
        *err = sbx_error_new(SBX_EINVAL, OSB_NAME ": the %s must be {\"labels\": {\"K\": \"V\"}}",
                             what);
        return SBX_EINVAL;
    }
    if (dry_run)
        *dry_run = json_is_true(json_object_get(j, "dry_run"));
    *labels = l ? json_incref(l) : json_object();
    json_decref(j);
    return SBX_OK;
}

static bool labels_match(json_t *labels, json_t *md)
{
    const char *k;
    json_t *v;
    json_object_foreach(labels, k, v)
    {
        /* The service keeps sanitised values: a filter value matches as it was stored. */
        char *s = osb_sanitize_value(json_string_value(v));
        bool eq = s && json_is_string(json_object_get(md, k)) &&
                  !strcmp(s, json_string_value(json_object_get(md, k)));
        free(s);
        if (!eq)
            return false;
    }
    return true;
}

/* Whether `md` carries the attribution's user label as this process has it. */
static bool owner_match(json_t *labels, json_t *md)
{
    const char *k;
    json_t *v;
    json_object_foreach(labels, k, v)
    {
        size_t n = strlen(k);
        if ((n == 4 || (n > 4 && k[n - 5] == '/')) && !strcmp(k + n - 4, "user"))
            return json_equal(v, json_object_get(md, k));
    }
    return false;
}

static json_t *time_or_null(json_t *v)
{
    double t;
    return osb_parse_time(json_string_value(v), &t) ? json_real(t) : json_null();
}

/* The core's list entry for one sandbox of the listing. */
static json_t *entry_of(json_t *b)
{
    const char *id = json_string_value(json_object_get(b, "id"));
    json_t *md = json_object_get(b, "metadata");
    const char *state = json_string_value(json_object_get(json_object_get(b, "status"), "state"));
    const char *image = json_string_value(json_object_get(json_object_get(b, "image"), "uri"));
    json_t *e = json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:{s:s}, s:{s:o}}", "id", id, "status",
                          sbx_status_name(osb_status_of(state)), "created",
                          time_or_null(json_object_get(b, "createdAt")), "expires_at",
                          time_or_null(json_object_get(b, "expiresAt")), "labels",
                          json_is_object(md) ? json_deep_copy(md) : json_object(), "image",
                          image ? json_string(image) : json_null(), "descriptor", "sandbox_id", id,
                          "provider", "state", state ? json_string(state) : json_null());
    return e;
}

static void lj_list(struct ljob *lj);
static void gc_next(struct ljob *lj);

static void gc_deleted(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct ljob *lj = ctx;
    int status = code == SBX_OK ? sbx_http_response_status(resp) : 0;
    /* 404: gone meanwhile (its TTL, another sweeper): collected all the same. */
    if (code == SBX_OK && status != 404 && (code = sbx_http_response_check(resp, &err)) < 0) {
        lj_finish(lj, code, sbx_error_prefix(err, "gc"), NULL);
        return;
    }
    if (code < 0) {
        lj_finish(lj, code, sbx_error_prefix(err, "gc"), NULL);
        return;
    }
    gc_next(lj);
}

static void gc_next(struct ljob *lj)
{
    if (lj->next < json_array_size(lj->pick)) {
        const char *id = json_string_value(json_array_get(lj->pick, lj->next++));
        char *path = sandbox_path(id, NULL);
        osb_cancel_slot(lj->op, &lj->cur);
        osb_call(lj->op, lj->st->api, "DELETE", path, lj->st->cfg.operations.close_timeout_s,
                 &lj->cur, gc_deleted, lj);
        return;
    }
    /* Re-list and sweep again while a labelled sweep still finds boxes (creates in flight). */
    if (json_array_size(lj->pick) && json_object_size(lj->labels) &&
        ++lj->sweep < OSB_REAP_SWEEPS) {
        json_decref(lj->pick);
        lj->pick = NULL;
        json_array_clear(lj->items);
        lj->page = 0;
        lj_list(lj);
        return;
    }
    json_t *out = lj->removed;
    lj->removed = NULL;
    lj_finish(lj, SBX_OK, NULL, out);
}

static void lj_listed_all(struct ljob *lj)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    json_t *out = json_array(), *b;
    size_t i;
    if (lj->gc)
        lj->pick = json_array();
    json_array_foreach(lj->items, i, b)
    {
        if (!json_is_string(json_object_get(b, "id")))
            continue;
        json_t *e = entry_of(b);
        if (!e)
            continue;
        bool match = labels_match(lj->labels, json_object_get(e, "labels"));
        if (!lj->gc) {
            if (match)
                json_array_append(out, e);
        } else {
            json_t *exp = json_object_get(e, "expires_at");
            const char *s = json_string_value(json_object_get(e, "status"));
            /*
             * The service is shared: without labels, gc touches only boxes
             * of this user (the attribution's user label), never another's.
             */
            bool mine = owner_match(lj->st->labels, json_object_get(e, "labels"));
            bool expired = mine && json_is_number(exp) && json_number_value(exp) <= now;
            bool dead = mine && s && (!strcmp(s, "error") || !strcmp(s, "stopped"));
            bool labelled = json_object_size(lj->labels) > 0 && match;
            if (expired || dead || labelled) {
                json_array_append(lj->pick, json_object_get(e, "id"));
                bool seen = false;
                size_t k;
                json_t *r;
                json_array_foreach(lj->removed, k, r) seen =
                    seen || json_equal(r, json_object_get(e, "id"));
                if (!seen)
                    json_array_append(lj->removed, json_object_get(e, "id"));
            }
        }
        json_decref(e);
    }
    if (!lj->gc) {
        lj_finish(lj, SBX_OK, NULL, out);
        return;
    }
    json_decref(out);
    if (lj->dry_run) {
        /* The audit: what a reap would remove, nothing removed. */
        json_t *r = lj->removed;
        lj->removed = NULL;
        lj_finish(lj, SBX_OK, NULL, r);
        return;
    }
    lj->next = 0;
    gc_next(lj);
}

static void lj_page(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct ljob *lj = ctx;
    if (code == SBX_OK && (code = sbx_http_response_check(resp, &err)) == SBX_OK) {
        json_t *j = body_json(resp);
        json_t *items = json_object_get(j, "items");
        if (!json_is_array(items)) {
            json_decref(j);
            lj_finish(lj, SBX_EPROTO,
                      sbx_error_new(SBX_EPROTO, OSB_NAME ": a sandbox listing without \"items\""),
                      NULL);
            return;
        }
        json_array_extend(lj->items, items);
        bool more = json_is_true(json_object_get(json_object_get(j, "pagination"), "hasNextPage"));
        json_decref(j);
        if (more && json_array_size(items) > 0 && lj->page < OSB_MAX_PAGES) {
            lj_list(lj);
            return;
        }
        lj_listed_all(lj);
        return;
    }
    lj_finish(lj, code, sbx_error_prefix(err, "listing sandboxes"), NULL);
}

/* The filter as the service takes it: metadata=<urlencoded "k=v&k2=v2">, each part encoded. */
static char *metadata_query(json_t *labels)
{
    size_t cap = 1, len = 0;
    char *q = calloc(1, cap);
    const char *k;
    json_t *v;
    json_object_foreach(labels, k, v)
    {
        char *sv = osb_sanitize_value(json_string_value(v));
        char *ek = sbx_http_escape(k), *ev = sv ? sbx_http_escape(sv) : NULL;
        size_t add = (ek ? strlen(ek) : 0) + (ev ? strlen(ev) : 0) + 2;
        char *nq = q && ek && ev ? realloc(q, cap + add) : NULL;
        if (nq) {
            q = nq;
            cap += add;
            len += (size_t)snprintf(q + len, cap - len, "%s%s=%s", len ? "&" : "", ek, ev);
        }
        free(sv);
        free(ek);
        free(ev);
        if (!nq) {
            free(q);
            return NULL;
        }
    }
    char *out = q ? sbx_http_escape(q) : NULL;
    free(q);
    return out;
}

static void lj_list(struct ljob *lj)
{
    lj->page++;
    char *path = NULL, *md = json_object_size(lj->labels) ? metadata_query(lj->labels) : NULL;
    if (asprintf(&path, "/sandboxes?page=%d&pageSize=%d%s%s", lj->page, OSB_PAGE_SIZE,
                 md ? "&metadata=" : "", md ? md : "") < 0)
        path = NULL;
    free(md);
    osb_cancel_slot(lj->op, &lj->cur);
    osb_call(lj->op, lj->st->api, "GET", path, lifecycle_deadline(lj->st), &lj->cur, lj_page, lj);
}

static void list_or_gc(sbx_op *op, struct osb *st, const char *json, bool gc)
{
    struct ljob *lj = calloc(1, sizeof(*lj));
    sbx_error *err = NULL;
    int rc = lj ? parse_labels(json, gc ? "gc options" : "list filter", &lj->labels,
                               gc ? &lj->dry_run : NULL, &err)
                : SBX_ENOMEM;
    if (rc < 0) {
        free(lj);
        sbx_op_complete(op, rc, err, NULL);
        return;
    }
    lj->op = op;
    lj->st = st;
    lj->gc = gc;
    lj->items = json_array();
    lj->removed = json_array();
    lj_list(lj);
}

static void osb_list(sbx_op *op, void *state, const char *filter_json)
{
    list_or_gc(op, state, filter_json, false);
}

static void osb_gc(sbx_op *op, void *state, const char *opts_json)
{
    list_or_gc(op, state, opts_json, true);
}

static const struct sbx_provider_ops opensandbox_ops = {
    SBX_PROVIDER_OPS_HEADER,
    .name = OSB_NAME,
    .init = osb_init,
    .release = osb_release,
    .create = osb_create,
    .exec = osb_exec,
    .upload_file = osb_upload,
    .download_file = osb_download,
    .status = osb_status,
    .close = osb_close,
    .box_id = osb_box_id,
    .box_free = obox_free,
    .endpoint = osb_endpoint,
    .serialize = osb_serialize,
    .connect = osb_connect,
    .list = osb_list,
    .stop_id = osb_stop_id,
    .gc = osb_gc,
    /* Terminals over execd's /pty WebSocket (pty.c): pty_open gives SBX_CAP_PTY. */
    .pty_open = osb_pty_open,
    /* No sbx-agent in its boxes (execd is OpenSandbox's own): no directory transfers. */
    .capabilities = SBX_CAP_ENDPOINT | SBX_CAP_CONNECT | SBX_CAP_LIST | SBX_CAP_STOP_ID |
                    SBX_CAP_GC | SBX_CAP_EXEC_STREAM,
};

SBX_EXPORT const struct sbx_provider_ops *const sbx_plugin_providers[] = {&opensandbox_ops, NULL};
