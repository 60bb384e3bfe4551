/*
 * restbox: the remote kit's example provider, as an out-of-tree plugin: a
 * provider whose boxes live behind a REST service, built on <sbx/http.h>.
 * It is the template for the API providers (E2B, Daytona, OpenSandbox):
 * each op is one request (or a few), mapped onto an sbx_op; the kit's
 * client does connections, retries, deadlines, cancellation and the
 * status-to-error map.
 *
 * The service is the restbox API of tests/remote/api_server.py (a local
 * test double: its "boxes" are plain host processes, no isolation):
 *
 *   POST   /v1/boxes              create      GET /v1/boxes[?label=k=v]  list
 *   GET    /v1/boxes/ID           status      DELETE /v1/boxes/ID        stop
 *   POST   /v1/boxes/ID/exec      exec (JSON in and out, output in base64)
 *   PUT    /v1/boxes/ID/files?path=P   upload (X-Mode)   GET ... download
 *   GET    /v1/boxes/ID/pty[/N]   a terminal session over a WebSocket (restbox_pty.c)
 *
 * Config (the mapping under "restbox"): {"url": "http://host:port",
 * "token": "..."}; `url` defaults to $SBX_RESTBOX_URL, `token` to
 * $SBX_RESTBOX_TOKEN (sent as a bearer token).
 *
 * Build: cc -shared -fPIC $(pkg-config --cflags sbx jansson nettle) -o restbox.so restbox.c \
 *            restbox_pty.c \
 *            $(pkg-config --libs sbx jansson nettle)
 * Use:   SBX_PLUGIN_PATH=$PWD SBX_PROVIDER=restbox SBX_RESTBOX_URL=http://... sbx run -- echo hi
 *
 * It includes only sbx's installed headers (and jansson's and nettle's).
 */
#define _GNU_SOURCE /* strdup, asprintf */

#include <sbx.h>
#include <sbx/http.h>
#include <sbx/provider.h>

#include "restbox.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <nettle/base64.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Files move whole through one request: larger ones are refused, not truncated. */
#define RB_MAX_FILE ((size_t)64 << 20)

static void rbox_free(void *box);

/* --- provider ------------------------------------------------------------------ */

static void rb_release(void *state)
{
    struct restbox *rb = state;
    if (rb)
        sbx_http_client_free(rb->http);
    free(rb);
}

static int rb_init(const char *config_json, void **state, sbx_error **err)
{
    json_error_t je;
    json_t *cfg = json_loads(config_json ? config_json : "{}", 0, &je);
    const char *url = NULL, *token = NULL;
    int rc = SBX_OK;
    if (!json_is_object(cfg)) {
        *err = sbx_error_new(SBX_ETYPE, "restbox: the config must be a mapping");
        rc = SBX_ETYPE;
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(cfg, k, v)
    {
        if (strcmp(k, "url") != 0 && strcmp(k, "token") != 0) {
            *err = sbx_error_new(SBX_ETYPE, "restbox: unknown key '%.64s' (known: token, url)", k);
            rc = SBX_ETYPE;
            goto out;
        }
        if (!json_is_string(v)) {
            *err = sbx_error_new(SBX_ETYPE, "restbox: %s must be a string", k);
            rc = SBX_ETYPE;
            goto out;
        }
    }
    url = json_string_value(json_object_get(cfg, "url"));
    token = json_string_value(json_object_get(cfg, "token"));
    if (!url)
        url = getenv("SBX_RESTBOX_URL");
    if (!token)
        token = getenv("SBX_RESTBOX_TOKEN");
    if (!url || !*url) {
        *err = sbx_error_new(SBX_EINVAL, "restbox: no service URL: set url in the config, or "
                                         "SBX_RESTBOX_URL");
        rc = SBX_EINVAL;
        goto out;
    }
    struct restbox *rb = calloc(1, sizeof(*rb));
    if (!rb) {
        rc = SBX_ENOMEM;
        goto out;
    }
    if ((rc = sbx_http_client_new("restbox", url, &rb->http, err)) < 0) {
        free(rb);
        goto out;
    }
    if (token && *token) {
        char *bearer = NULL;
        if (asprintf(&bearer, "Bearer %s", token) < 0 ||
            sbx_http_client_set_header(rb->http, "Authorization", bearer) < 0) {
            *err = sbx_error_new(SBX_EINVAL, "restbox: the token is not a valid header value");
            rc = SBX_EINVAL;
        }
        free(bearer);
        if (rc < 0) {
            rb_release(rb);
            goto out;
        }
    }
    *state = rb;
out:
    json_decref(cfg);
    return rc;
}

/* --- plumbing: one request for an op --------------------------------------------- */

/* What a request's end does with its answer (a 2xx, or a 404 when `gone` is set). */
typedef void (*answer_fn)(sbx_op *op, sbx_http_response *resp, void *data);

struct call {
    sbx_op *op;
    sbx_http_request *req;
    answer_fn answer;
    answer_fn gone; /* a 404's meaning for this op; NULL: the status map's SBX_ENOENT */
    void *data;
    void (*drop)(void *data); /* frees `data` when no answer takes it (an error), or NULL */
};

static void on_cancel(sbx_op *op, void *data)
{
    (void)op;
    sbx_http_request_cancel(((struct call *)data)->req);
}

static void call_done(sbx_http_request *r, int code, sbx_http_response *resp, sbx_error *err,
                      void *user)
{
    (void)r;
    struct call *c = user;
    sbx_op *op = c->op;
    sbx_op_on_cancel(op, NULL, NULL); /* the request is freed after this callback */
    if (code == SBX_OK && c->gone && sbx_http_response_status(resp) == 404)
        c->gone(op, resp, c->data);
    else if (code == SBX_OK && (code = sbx_http_response_check(resp, &err)) == SBX_OK)
        c->answer(op, resp, c->data);
    else {
        sbx_op_complete(op, code, err, NULL);
        if (c->drop)
            c->drop(c->data);
    }
    free(c);
}

/*
 * Sends `req` (taken) for `op`, with a deadline (0: none). `data` is taken
 * too: an answer gets it, or `drop` frees it (an error, here or later, when
 * the op completes with it). Any thread.
 */
static int send_for(sbx_op *op, sbx_http_request *req, double deadline_s, answer_fn answer,
                    answer_fn gone, void *data, void (*drop)(void *))
{
    struct call *c = calloc(1, sizeof(*c));
    sbx_error *err = NULL;
    int rc = c ? SBX_OK : SBX_ENOMEM;
    if (rc == SBX_OK) {
        *c = (struct call){
            .op = op, .req = req, .answer = answer, .gone = gone, .data = data, .drop = drop};
        if (deadline_s > 0)
            sbx_http_request_set_deadline(req, deadline_s);
        sbx_op_on_cancel(op, on_cancel, c);
        if ((rc = sbx_http_request_send(req, sbx_op_loop(op), call_done, c, &err)) == SBX_OK)
            return SBX_OK;
        sbx_op_on_cancel(op, NULL, NULL);
    }
    sbx_http_request_free(req);
    free(c);
    sbx_op_complete(op, rc, err, NULL);
    if (drop)
        drop(data);
    return rc;
}

/* METHOD PATH with `body` (a JSON object, taken; or NULL), for `op`; `data` as send_for's. */
static int call(sbx_op *op, struct restbox *rb, const char *method, const char *path,
                json_t *body, double deadline_s, answer_fn answer, answer_fn gone, void *data,
                void (*drop)(void *))
{
    sbx_http_request *req = NULL;
    sbx_error *err = NULL;
    int rc = sbx_http_request_new(rb->http, method, path, &req, &err);
    if (rc == SBX_OK && body) {
        char *text = json_dumps(body, JSON_COMPACT);
        rc = text ? sbx_http_request_set_body(req, text, strlen(text), "application/json")
                  : SBX_ENOMEM;
        free(text);
    }
    json_decref(body);
    if (rc < 0) {
        sbx_http_request_free(req);
        sbx_op_complete(op, rc, err, NULL);
        if (drop)
            drop(data);
        return rc;
    }
    return send_for(op, req, deadline_s, answer, gone, data, drop);
}

char *rb_box_path(const char *id, const char *rest)
{
    char *eid = sbx_http_escape(id), *p = NULL;
    if (eid && asprintf(&p, "/v1/boxes/%s%s", eid, rest ? rest : "") < 0)
        p = NULL;
    free(eid);
    return p;
}

static json_t *body_json(sbx_http_response *resp)
{
    size_t n = 0;
    const char *b = sbx_http_response_body(resp, &n);
    return json_loadb(b, n, 0, NULL);
}

/* --- create ------------------------------------------------------------------------ */

static void created(sbx_op *op, sbx_http_response *resp, void *data)
{
    (void)data;
    json_t *j = body_json(resp);
    const char *id = json_string_value(json_object_get(j, "id"));
    struct rbox *b = id ? calloc(1, sizeof(*b)) : NULL;
    if (b && !(b->id = strdup(id))) {
        free(b);
        b = NULL;
    }
    json_decref(j);
    if (!b) {
        sbx_op_complete(op, id ? SBX_ENOMEM : SBX_EPROTO,
                        id ? NULL : sbx_error_new(SBX_EPROTO, "restbox: a create answer without "
                                                              "an id"),
                        NULL);
        return;
    }
    sbx_op_complete(op, SBX_OK, NULL, b);
}

static void rb_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    json_t *env = json_object(), *md = json_object(), *ep = json_null();
    for (size_t i = 0; i < sbx_spec_env_count(spec); i++) {
        const char *k, *v;
        sbx_spec_env_at(spec, i, &k, &v);
        json_object_set_new(env, k, json_string(v));
    }
    for (size_t i = 0; i < sbx_spec_metadata_count(spec); i++) {
        const char *k, *v;
        sbx_spec_metadata_at(spec, i, &k, &v);
        json_object_set_new(md, k, json_string(v));
    }
    const char *const *entry = sbx_spec_entrypoint(spec);
    if (entry) {
        json_decref(ep);
        ep = json_array();
        for (size_t i = 0; entry[i]; i++)
            json_array_append_new(ep, json_string(entry[i]));
    }
    double ttl = 0, ready = 0;
    json_t *body = json_pack("{s:o, s:o, s:o, s:o}", "env", env, "metadata", md, "entrypoint", ep,
                             "ttl", sbx_spec_get_ttl(spec, &ttl) ? json_real(ttl) : json_null());
    if (sbx_spec_get_ready_timeout(spec, &ready) != 1 || ready <= 0)
        ready = 60;
    /* A create is not idempotent: a retry could make a second box (no client token here). */
    call(op, state, "POST", "/v1/boxes", body, ready, created, NULL, NULL, NULL);
}

/* --- exec ---------------------------------------------------------------------------- */

struct xjob {
    double timeout_s;
    size_t limit;
    int keep;
    char *command;
};

static void xjob_free(void *data)
{
    struct xjob *x = data;
    free(x->command);
    free(x);
}

static void json_drop(void *data) { json_decref(data); }

static char *b64_decode(const char *s, size_t *len)
{
    size_t n = s ? strlen(s) : 0;
    uint8_t *out = malloc(BASE64_DECODE_LENGTH(n) + 1);
    struct base64_decode_ctx ctx;
    size_t got = BASE64_DECODE_LENGTH(n);
    base64_decode_init(&ctx);
    if (!out || !base64_decode_update(&ctx, &got, out, n, s) || !base64_decode_final(&ctx)) {
        free(out);
        return NULL;
    }
    out[got] = 0;
    *len = got;
    return (char *)out;
}

static char *b64_encode(const void *data, size_t len)
{
    char *out = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);
    if (!out)
        return NULL;
    base64_encode_raw(out, len, data);
    out[BASE64_ENCODE_RAW_LENGTH(len)] = 0;
    return out;
}

static void exec_answer(sbx_op *op, sbx_http_response *resp, void *data)
{
    struct xjob *x = data;
    json_t *j = body_json(resp);
    size_t out_len = 0, err_len = 0;
    char *out = b64_decode(json_string_value(json_object_get(j, "stdout")), &out_len);
    char *errb = b64_decode(json_string_value(json_object_get(j, "stderr")), &err_len);
    json_t *rc = json_object_get(j, "exit_code");
    bool timed_out = json_is_true(json_object_get(j, "timed_out"));
    sbx_exec_result *r = NULL;
    int code = SBX_OK;
    if (!out || !errb || !json_is_integer(rc)) {
        free(out);
        free(errb);
        code = SBX_EPROTO;
    } else {
        bool truncated = false;
        if (x->limit && out_len > x->limit)
            out_len = x->limit, truncated = true;
        if (x->limit && err_len > x->limit)
            err_len = x->limit, truncated = true;
        if (!x->keep) {
            free(out);
            free(errb);
            out = errb = NULL;
            out_len = err_len = 0;
        }
        code = timed_out ? sbx_exec_result_new_timeout(out, out_len, errb, err_len, x->timeout_s,
                                                       x->command, &r)
                         : sbx_exec_result_new_take(out, out_len, errb, err_len,
                                                    (int)json_integer_value(rc), NULL, &r);
        if (code == SBX_OK && truncated)
            sbx_exec_result_set_truncated(r, 1);
    }
    json_decref(j);
    xjob_free(x);
    sbx_op_complete(op, code,
                    code == SBX_EPROTO ? sbx_error_new(SBX_EPROTO, "restbox: a malformed exec "
                                                                   "answer")
                                       : NULL,
                    r);
}

/* Sends the exec's request (any thread); on failure the op is completed and `x` freed. */
static void exec_send(sbx_op *op, struct restbox *rb, const char *path, json_t *body,
                      struct xjob *x)
{
    call(op, rb, "POST", path, body, x->timeout_s > 0 ? x->timeout_s + 60 : 0, exec_answer, NULL,
         x, xjob_free);
}

struct stdin_job {
    struct restbox *rb;
    struct xjob *x;
    json_t *body;
    char *path;
    int fd;
};

/*
 * Worker: a stdin stream is read to its end first (the service takes stdin
 * as bytes), bounded as files are, then the request goes.
 */
static void exec_read_stdin(sbx_op *op, void *data)
{
    struct stdin_job *j = data;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = SBX_OK;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = cap <= RB_MAX_FILE + 1 ? realloc(buf, cap) : NULL;
            if (!nb) {
                rc = cap > RB_MAX_FILE + 1 ? SBX_EINVAL : SBX_ENOMEM;
                break;
            }
            buf = nb;
        }
        ssize_t n = read(j->fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = SBX_EIO;
            break;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    char *in64 = rc == SBX_OK ? b64_encode(buf ? buf : "", len) : NULL;
    free(buf);
    if (rc == SBX_OK && (!in64 || json_object_set_new(j->body, "stdin", json_string(in64)) < 0))
        rc = SBX_ENOMEM;
    free(in64);
    if (rc < 0) {
        sbx_op_complete(op, rc,
                        rc == SBX_EINVAL ? sbx_error_new(SBX_EINVAL, "restbox: stdin is larger "
                                                                     "than %zu bytes",
                                                         RB_MAX_FILE)
                                         : NULL,
                        NULL);
        json_decref(j->body);
        xjob_free(j->x);
    } else {
        exec_send(op, j->rb, j->path, j->body, j->x);
    }
    free(j->path);
    free(j);
}

static void rb_exec(sbx_op *op, void *state, void *box, const char *command,
                    const sbx_exec_opts *opts)
{
    struct rbox *b = box;
    struct xjob *x = calloc(1, sizeof(*x));
    json_t *env = json_object();
    for (size_t i = 0; i < sbx_exec_opts_env_count(opts); i++) {
        const char *k, *v;
        sbx_exec_opts_env_at(opts, i, &k, &v);
        json_object_set_new(env, k, json_string(v));
    }
    size_t in_len = 0;
    const void *in = sbx_exec_opts_stdin(opts, &in_len);
    char *in64 = b64_encode(in ? in : "", in ? in_len : 0);
    char *path = rb_box_path(b->id, "/exec");
    if (!x || !in64 || !path || !(x->command = strdup(command))) {
        json_decref(env);
        free(in64);
        free(path);
        free(x);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    x->timeout_s = sbx_exec_opts_timeout(opts);
    x->limit = sbx_exec_opts_output_limit(opts);
    x->keep = sbx_exec_opts_keep_output(opts);
    const char *cwd = sbx_exec_opts_cwd(opts);
    json_t *body = json_pack("{s:s, s:o, s:o, s:o, s:s}", "command", command, "cwd",
                             cwd ? json_string(cwd) : json_null(), "env", env, "timeout",
                             x->timeout_s > 0 ? json_real(x->timeout_s) : json_null(), "stdin",
                             in64);
    free(in64);
    int fd = sbx_exec_opts_stdin_fd(opts);
    if (fd >= 0) {
        /* The descriptor is the caller's until the op completes: read on a worker. */
        struct stdin_job *j = calloc(1, sizeof(*j));
        int rc = j ? SBX_OK : SBX_ENOMEM;
        if (j) {
            *j = (struct stdin_job){.rb = state, .x = x, .body = body, .path = path, .fd = fd};
            rc = sbx_op_run_blocking(op, exec_read_stdin, j);
        }
        if (rc < 0) {
            free(j);
            json_decref(body);
            free(path);
            xjob_free(x);
            sbx_op_complete(op, rc, NULL, NULL);
        }
        return;
    }
    /* The service ends the command at its timeout; the request waits that and a margin. */
    exec_send(op, state, path, body, x);
    free(path);
}

/* --- files: read and written on a worker, sent and fetched on the loop ------------------ */

struct fjob {
    struct restbox *rb;
    char *path;  /* the request's path */
    char *local; /* the host file */
    char *data;
    size_t len;
    unsigned mode;
};

static void fjob_free(struct fjob *f)
{
    free(f->path);
    free(f->local);
    free(f->data);
    free(f);
}

static void fjob_drop(void *data) { fjob_free(data); }

static void uploaded(sbx_op *op, sbx_http_response *resp, void *data)
{
    (void)resp;
    fjob_free(data);
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

/* Worker: reads the file, then hands the request to the loop. */
static void upload_read(sbx_op *op, void *data)
{
    struct fjob *f = data;
    int fd = open(f->local, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > RB_MAX_FILE) {
        int e = errno;
        bool big = fd >= 0 && S_ISREG(st.st_mode);
        if (fd >= 0)
            close(fd);
        sbx_op_complete(op, fd < 0 && e == ENOENT ? SBX_ENOENT : SBX_EINVAL,
                        big ? sbx_error_new(SBX_EINVAL, "restbox: %s is larger than %zu bytes",
                                            f->local, RB_MAX_FILE)
                            : sbx_error_new_errno(fd < 0 && e == ENOENT ? SBX_ENOENT : SBX_EINVAL,
                                                  fd < 0 ? e : EISDIR, "restbox: cannot read %s",
                                                  f->local),
                        NULL);
        fjob_free(f);
        return;
    }
    f->data = malloc((size_t)st.st_size + 1);
    ssize_t n = f->data ? read(fd, f->data, (size_t)st.st_size) : -1;
    close(fd);
    if (n != st.st_size) {
        sbx_op_complete(op, SBX_EIO, sbx_error_new(SBX_EIO, "restbox: cannot read %s", f->local),
                        NULL);
        fjob_free(f);
        return;
    }
    sbx_http_request *r = NULL;
    char mode[16];
    snprintf(mode, sizeof(mode), "%o", (unsigned)(st.st_mode & 07777));
    sbx_error *err = NULL;
    int rc = sbx_http_request_new(f->rb->http, "PUT", f->path, &r, &err);
    if (rc == SBX_OK && (sbx_http_request_set_body(r, f->data, (size_t)n,
                                                   "application/octet-stream") < 0 ||
                         sbx_http_request_set_header(r, "X-Mode", mode) < 0))
        rc = SBX_ENOMEM;
    if (rc < 0) {
        sbx_http_request_free(r);
        fjob_free(f);
        sbx_op_complete(op, rc, err, NULL);
        return;
    }
    free(f->data); /* the request has its copy */
    f->data = NULL;
    send_for(op, r, 0, uploaded, NULL, f, fjob_drop);
}

static struct fjob *fjob_new(struct restbox *rb, const char *id, const char *remote,
                             const char *local)
{
    struct fjob *f = calloc(1, sizeof(*f));
    char *q = sbx_http_escape(remote), *rest = NULL;
    if (!f || !q || asprintf(&rest, "/files?path=%s", q) < 0)
        rest = NULL;
    free(q);
    if (f) {
        f->rb = rb;
        f->path = rest ? rb_box_path(id, rest) : NULL;
        f->local = strdup(local);
    }
    free(rest);
    if (f && (!f->path || !f->local)) {
        fjob_free(f);
        f = NULL;
    }
    return f;
}

static void rb_upload(sbx_op *op, void *state, void *box, const char *local_path,
                      const char *remote_path)
{
    struct rbox *b = box;
    struct fjob *f = fjob_new(state, b->id, remote_path, local_path);
    int rc = f ? sbx_op_run_blocking(op, upload_read, f) : SBX_ENOMEM;
    if (rc < 0) {
        if (f)
            fjob_free(f);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

/* Worker: writes what came, its parents made, with the box's mode. */
static void download_write(sbx_op *op, void *data)
{
    struct fjob *f = data;
    for (char *s = strchr(f->local + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(f->local, 0755);
        *s = '/';
    }
    int fd = open(f->local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ssize_t n = fd >= 0 ? write(fd, f->data, f->len) : -1;
    int e = errno;
    if (fd >= 0 && fchmod(fd, f->mode & 07777) < 0)
        n = -1;
    if (fd >= 0 && close(fd) < 0)
        n = -1;
    if (n != (ssize_t)f->len)
        sbx_op_complete(op, SBX_EIO, sbx_error_new_errno(SBX_EIO, e, "restbox: cannot write %s",
                                                         f->local),
                        NULL);
    else
        sbx_op_complete(op, SBX_OK, NULL, NULL);
    fjob_free(f);
}

static void downloaded(sbx_op *op, sbx_http_response *resp, void *data)
{
    struct fjob *f = data;
    const char *m = sbx_http_response_header(resp, "X-Mode");
    char *end = NULL;
    unsigned long mode = m ? strtoul(m, &end, 8) : 0644;
    f->mode = m && end && !*end && mode <= 07777 ? (unsigned)mode : 0644;
    f->data = sbx_http_response_take_body(resp, &f->len);
    int rc = f->data ? sbx_op_run_blocking(op, download_write, f) : SBX_ENOMEM;
    if (rc < 0) {
        fjob_free(f);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

static void rb_download(sbx_op *op, void *state, void *box, const char *remote_path,
                        const char *local_path)
{
    struct rbox *b = box;
    struct fjob *f = fjob_new(state, b->id, remote_path, local_path);
    if (!f) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx_http_request *req = NULL;
    sbx_error *err = NULL;
    int rc = sbx_http_request_new(((struct restbox *)state)->http, "GET", f->path, &req, &err);
    if (rc < 0) {
        fjob_free(f);
        sbx_op_complete(op, rc, err, NULL);
        return;
    }
    /* A missing file is SBX_ENOENT, as the status map has it. */
    send_for(op, req, 0, downloaded, NULL, f, fjob_drop);
}

/* --- status, close ---------------------------------------------------------------- */

static void status_answer(sbx_op *op, sbx_http_response *resp, void *data)
{
    (void)data;
    json_t *j = body_json(resp);
    sbx_status s = SBX_STATUS_UNKNOWN;
    sbx_status_from_name(json_string_value(json_object_get(j, "status")), &s);
    json_decref(j);
    sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)s);
}

static void status_gone(sbx_op *op, sbx_http_response *resp, void *data)
{
    (void)resp;
    (void)data;
    sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)SBX_STATUS_STOPPED);
}

static void rb_status(sbx_op *op, void *state, void *box)
{
    char *path = rb_box_path(((struct rbox *)box)->id, NULL);
    if (!path) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    /* A box the service no longer has is stopped (its TTL, a stop from elsewhere). */
    call(op, state, "GET", path, NULL, 30, status_answer, status_gone, NULL, NULL);
    free(path);
}

static void closed(sbx_op *op, sbx_http_response *resp, void *data)
{
    (void)resp;
    (void)data;
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

static void rb_close(sbx_op *op, void *state, void *box, int owned)
{
    char *path = rb_box_path(((struct rbox *)box)->id, NULL);
    if (!path) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    /* A connected handle borrows the box: letting it go leaves the box running. */
    if (!owned) {
        free(path);
        sbx_op_complete(op, SBX_OK, NULL, NULL);
        return;
    }
    /* Already gone (its TTL, a stop by id): the stop still succeeds. */
    call(op, state, "DELETE", path, NULL, 60, closed, closed, NULL, NULL);
    free(path);
}

static const char *rb_box_id(const void *box) { return ((const struct rbox *)box)->id; }

/* What another process connects with: the box's id (the service is the config's). */
static json_t *descriptor(const char *id)
{
    return json_pack("{s:s, s:s}", "provider", "restbox", "sandbox_id", id);
}

static void rb_serialize(sbx_op *op, void *state, void *box, const char *scope)
{
    (void)state;
    (void)scope;
    json_t *d = descriptor(((struct rbox *)box)->id);
    char *text = d ? json_dumps(d, JSON_COMPACT) : NULL;
    json_decref(d);
    sbx_op_complete(op, text ? SBX_OK : SBX_ENOMEM, NULL, text);
}

static void connected(sbx_op *op, sbx_http_response *resp, void *data)
{
    (void)resp;
    struct rbox *b = data;
    sbx_op_complete(op, SBX_OK, NULL, b);
}

/* A descriptor is input: its id is checked with the service before the handle exists. */
static void rb_connect(sbx_op *op, void *state, const char *descriptor_json)
{
    json_t *d = json_loads(descriptor_json ? descriptor_json : "", 0, NULL);
    const char *id = json_string_value(json_object_get(d, "sandbox_id"));
    struct rbox *b = id ? calloc(1, sizeof(*b)) : NULL;
    char *path = id ? rb_box_path(id, NULL) : NULL;
    if (b && !(b->id = strdup(id))) {
        free(b);
        b = NULL;
    }
    json_decref(d);
    if (!b || !path) {
        rbox_free(b);
        free(path);
        sbx_op_complete(op, id ? SBX_ENOMEM : SBX_EINVAL,
                        id ? NULL : sbx_error_new(SBX_EINVAL, "restbox: a descriptor needs a "
                                                              "\"sandbox_id\""),
                        NULL);
        return;
    }
    call(op, state, "GET", path, NULL, 30, connected, NULL, b, rbox_free);
    free(path);
}

static void rbox_free(void *box)
{
    struct rbox *b = box;
    if (b)
        free(b->id);
    free(b);
}

/* --- provider-wide: list, stop by id, gc ----------------------------------------------- */

/* {"labels": {K: V}} (all strings) or NULL; SBX_EINVAL otherwise. */
static int parse_labels(const char *json, const char *what, json_t **labels, bool *dry_run,
                        sbx_error **err)
{
    *labels = NULL;
    json_t *j = json ? json_loads(json, 0, NULL) : json_object();
    json_t *l = json_object_get(j, "labels");
    const char *k;
    json_t *v;
    bool ok = json_is_object(j) && (!l || json_is_object(l));
    if (ok && l)
        json_object_foreach(l, k, v) ok = ok && json_is_string(v);
    if (!ok) {
        json_decref(j);
        *err = sbx_error_new(SBX_EINVAL, "restbox: the %s must be {\"labels\": {\"K\": \"V\"}}",
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
        if (!json_equal(v, json_object_get(md, k)))
            return false;
    }
    return true;
}

/* The service's boxes as the core's list entries, those matching `labels`. */
static json_t *entries(sbx_http_response *resp, json_t *labels)
{
    json_t *j = body_json(resp), *out = json_array(), *b;
    size_t i;
    json_array_foreach(json_object_get(j, "boxes"), i, b)
    {
        json_t *md = json_object_get(b, "metadata");
        if (!json_is_string(json_object_get(b, "id")) || !labels_match(labels, md))
            continue;
        json_array_append_new(
            out, json_pack("{s:O, s:O, s:O, s:O, s:o, s:n, s:n}", "id", json_object_get(b, "id"),
                           "status", json_object_get(b, "status"), "created",
                           json_object_get(b, "created"), "expires_at",
                           json_object_get(b, "expires_at"), "labels",
                           json_is_object(md) ? json_incref(md) : json_object(), "image",
                           "descriptor"));
        json_object_set_new(json_array_get(out, json_array_size(out) - 1), "descriptor",
                            descriptor(json_string_value(json_object_get(b, "id"))));
    }
    json_decref(j);
    return out;
}

static void listed(sbx_op *op, sbx_http_response *resp, void *data)
{
    json_t *labels = data;
    json_t *out = entries(resp, labels);
    json_decref(labels);
    char *text = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    sbx_op_complete(op, text ? SBX_OK : SBX_ENOMEM, NULL, text);
}

static void rb_list(sbx_op *op, void *state, const char *filter_json)
{
    json_t *labels = NULL;
    sbx_error *err = NULL;
    int rc = parse_labels(filter_json, "list filter", &labels, NULL, &err);
    if (rc < 0) {
        sbx_op_complete(op, rc, err, NULL);
        return;
    }
    call(op, state, "GET", "/v1/boxes", NULL, 60, listed, NULL, labels, json_drop);
}

static void rb_stop_id(sbx_op *op, void *state, const char *id)
{
    char *path = rb_box_path(id, NULL);
    if (!path) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    call(op, state, "DELETE", path, NULL, 60, closed, NULL, NULL, NULL); /* 404: SBX_ENOENT */
    free(path);
}

/* gc: the listing, then one DELETE after another for what it picked. */
struct gcjob {
    struct restbox *rb;
    json_t *labels;
    bool dry_run;
    json_t *pick;   /* ids */
    size_t next;
};

static void gcjob_free(void *data)
{
    struct gcjob *g = data;
    json_decref(g->pick);
    json_decref(g->labels);
    free(g);
}

static void gc_next(sbx_op *op, struct gcjob *g);

static void gc_deleted(sbx_op *op, sbx_http_response *resp, void *data)
{
    (void)resp;
    gc_next(op, data);
}

static void gc_next(sbx_op *op, struct gcjob *g)
{
    if (!g->dry_run && g->next < json_array_size(g->pick)) {
        char *path = rb_box_path(json_string_value(json_array_get(g->pick, g->next++)), NULL);
        if (path) {
            /* Gone meanwhile (its TTL): collected all the same. */
            call(op, g->rb, "DELETE", path, NULL, 60, gc_deleted, gc_deleted, g, gcjob_free);
            free(path);
            return;
        }
    }
    char *text = json_dumps(g->pick, JSON_COMPACT);
    gcjob_free(g);
    sbx_op_complete(op, text ? SBX_OK : SBX_ENOMEM, NULL, text);
}

static void gc_listed(sbx_op *op, sbx_http_response *resp, void *data)
{
    struct gcjob *g = data;
    json_t *none = json_object(), *all = entries(resp, none), *b;
    json_decref(none);
    size_t i;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec / 1e9; /* TTLs are fractional */
    g->pick = json_array();
    json_array_foreach(all, i, b)
    {
        json_t *exp = json_object_get(b, "expires_at");
        bool expired = json_is_number(exp) && json_number_value(exp) <= now;
        bool labelled = json_object_size(g->labels) > 0 &&
                        labels_match(g->labels, json_object_get(b, "labels"));
        if (expired || labelled)
            json_array_append(g->pick, json_object_get(b, "id"));
    }
    json_decref(all);
    gc_next(op, g);
}

static void rb_gc(sbx_op *op, void *state, const char *opts_json)
{
    struct gcjob *g = calloc(1, sizeof(*g));
    sbx_error *err = NULL;
    int rc = g ? parse_labels(opts_json, "gc options", &g->labels, &g->dry_run, &err) : SBX_ENOMEM;
    if (rc < 0) {
        free(g);
        sbx_op_complete(op, rc, err, NULL);
        return;
    }
    g->rb = state;
    call(op, state, "GET", "/v1/boxes", NULL, 60, gc_listed, NULL, g, gcjob_free);
}

static const struct sbx_provider_ops restbox_ops = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "restbox",
    .init = rb_init,
    .release = rb_release,
    .create = rb_create,
    .exec = rb_exec,
    .upload_file = rb_upload,
    .download_file = rb_download,
    .status = rb_status,
    .close = rb_close,
    .box_id = rb_box_id,
    .box_free = rbox_free,
    .serialize = rb_serialize,
    .connect = rb_connect,
    .list = rb_list,
    .stop_id = rb_stop_id,
    .gc = rb_gc,
    /* Terminals the provider opens itself (ABI 3): the service's PTY over a WebSocket. */
    .pty_open = rb_pty_open,
    /* No agent in its boxes: directory transfers are refused by the core, saying so. */
    .capabilities = SBX_CAP_CONNECT | SBX_CAP_LIST | SBX_CAP_STOP_ID | SBX_CAP_GC | SBX_CAP_PTY,
};

SBX_EXPORT const struct sbx_provider_ops *const sbx_plugin_providers[] = {&restbox_ops, NULL};
