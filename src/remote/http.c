/*
 * The remote kit's HTTP client (include/sbx/http.h): libcurl's multi
 * interface driven by the context's libuv loop, as libcurl documents for
 * event loops (CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION and
 * curl_multi_socket_action). One engine per context, made on its loop at the
 * first request and closed when the context stops; clients are plain
 * reference-counted memory, so providers make and free them anywhere.
 *
 * A request's life, all on the loop thread: send -> attempt (an easy handle
 * in the multi) -> done (CURLMSG_DONE) -> either a retry (the request's
 * timer waits the backoff, then a new attempt) or the end (the callback,
 * then the request is freed once its timer has closed). A cancel only marks
 * the request and arms its timer at 0: libcurl forbids removing a handle
 * from inside its own callbacks, where a cancel may come from.
 */
#include "core/internal.h"
#include "remote/http_kit.h"
#include "remote/http_parse.h"

#include <sbx/http.h>
#include <sbx/provider.h>

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <uv.h>

/* Headers of one response, all told: more is a malformed response. */
#define HTTP_MAX_HEADER_BYTES (256u << 10)
/* Of a non-2xx response's body, what is kept for its error message. */
#define HTTP_ERROR_BODY_KEEP (64u << 10)
#define HTTP_DEFAULT_MAX_BODY ((size_t)64 << 20)

/* --- the client -------------------------------------------------------------- */

struct hdr {
    char *name;
    char *value;
};

struct sbx_http_client {
    atomic_int refs;
    char *name;
    char *base_url;
    char *unix_socket;
    char *ca_file, *cert_file, *key_file;
    bool insecure;
    struct hdr *headers;
    size_t n_headers;
    double connect_s, attempt_s;
    int attempts;
    double base_s, cap_s;
    size_t max_body;
    /* Per status 100-599: a code override (0: the default map) and retry (-1 unset, 0, 1). */
    signed char retry[600];
    int code_of[600];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int sbx_http_client_new(const char *name, const char *base_url, sbx_http_client **out,
                        sbx_error **err)
{
    if (!base_url || (strncmp(base_url, "http://", 7) != 0 && strncmp(base_url, "https://", 8) != 0))
        return sbx__set_error(err, SBX_EINVAL,
                              "%s: the service URL '%.200s' must start with http:// or https://",
                              name ? name : "http", base_url ? base_url : "(none)");
    pthread_once(&curl_once, curl_init);
    sbx_http_client *c = calloc(1, sizeof(*c));
    if (!c)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    atomic_init(&c->refs, 1);
    c->name = strdup(name ? name : "http");
    /* One slash between base and path: the path brings its own. */
    size_t n = strlen(base_url);
    while (n > 0 && base_url[n - 1] == '/')
        n--;
    c->base_url = strndup(base_url, n);
    c->connect_s = 10;
    c->attempt_s = 60;
    c->attempts = 4;
    c->base_s = 0.2;
    c->cap_s = 10;
    c->max_body = HTTP_DEFAULT_MAX_BODY;
    memset(c->retry, -1, sizeof(c->retry));
    if (!c->name || !c->base_url) {
        sbx_http_client_free(c);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    *out = c;
    return SBX_OK;
}

static void client_ref(sbx_http_client *c) { atomic_fetch_add(&c->refs, 1); }

void sbx__http_client_ref(sbx_http_client *c) { client_ref(c); }
const char *sbx__http_client_name(const sbx_http_client *c) { return c->name; }
const char *sbx__http_client_base_url(const sbx_http_client *c) { return c->base_url; }
size_t sbx__http_client_n_headers(const sbx_http_client *c) { return c->n_headers; }

void sbx__http_client_header(const sbx_http_client *c, size_t i, const char **name,
                             const char **value)
{
    *name = c->headers[i].name;
    *value = c->headers[i].value;
}

void sbx_http_client_free(sbx_http_client *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    free(c->name);
    free(c->base_url);
    free(c->unix_socket);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    for (size_t i = 0; i < c->n_headers; i++) {
        free(c->headers[i].name);
        free(c->headers[i].value);
    }
    free(c->headers);
    free(c);
}

static int set_str(char **slot, const char *v)
{
    char *d = NULL;
    if (v && !(d = strdup(v)))
        return SBX_ENOMEM;
    free(*slot);
    *slot = d;
    return SBX_OK;
}

int sbx_http_client_set_unix_socket(sbx_http_client *c, const char *path)
{
    return set_str(&c->unix_socket, path);
}

int sbx_http_client_set_tls(sbx_http_client *c, const char *ca_file, const char *cert_file,
                            const char *key_file)
{
    if (set_str(&c->ca_file, ca_file) < 0 || set_str(&c->cert_file, cert_file) < 0 ||
        set_str(&c->key_file, key_file) < 0)
        return SBX_ENOMEM;
    return SBX_OK;
}

void sbx_http_client_set_insecure(sbx_http_client *c, int insecure)
{
    c->insecure = insecure != 0;
    if (c->insecure)
        sbx_log(SBX_LOG_WARNING, "%s: TLS certificates of %s are not checked (insecure)", c->name,
                c->base_url);
}

/* A header name or value with a CR or LF would split the request: refused. */
bool sbx__http_header_ok(const char *s, bool name)
{
    if (!s || (name && !*s))
        return false;
    for (const char *p = s; *p; p++)
        if (*p == '\r' || *p == '\n' || (name && (*p == ':' || *p == ' ')))
            return false;
    return true;
}

static int hdr_set(struct hdr **v, size_t *n, const char *name, const char *value)
{
    if (!sbx__http_header_ok(name, true) || !sbx__http_header_ok(value, false))
        return SBX_EINVAL;
    for (size_t i = 0; i < *n; i++)
        if (!strcasecmp((*v)[i].name, name))
            return set_str(&(*v)[i].value, value);
    struct hdr *nv = realloc(*v, (*n + 1) * sizeof(**v));
    if (!nv)
        return SBX_ENOMEM;
    *v = nv;
    nv[*n].name = strdup(name);
    nv[*n].value = strdup(value);
    if (!nv[*n].name || !nv[*n].value) {
        free(nv[*n].name);
        free(nv[*n].value);
        return SBX_ENOMEM;
    }
    (*n)++;
    return SBX_OK;
}

int sbx_http_client_set_header(sbx_http_client *c, const char *name, const char *value)
{
    return hdr_set(&c->headers, &c->n_headers, name, value);
}

void sbx_http_client_set_timeouts(sbx_http_client *c, double connect_s, double attempt_s)
{
    if (connect_s > 0 && isfinite(connect_s))
        c->connect_s = connect_s;
    if (attempt_s >= 0 && isfinite(attempt_s))
        c->attempt_s = attempt_s;
}

void sbx_http_client_set_retry(sbx_http_client *c, int attempts, double base_s, double cap_s)
{
    c->attempts = attempts < 1 ? 1 : attempts > 100 ? 100 : attempts;
    if (base_s >= 0 && isfinite(base_s))
        c->base_s = base_s;
    if (cap_s >= 0 && isfinite(cap_s))
        c->cap_s = cap_s;
}

void sbx_http_client_retry_status(sbx_http_client *c, int status, int retry)
{
    if (status >= 100 && status < 600)
        c->retry[status] = retry != 0;
}

void sbx_http_client_map_status(sbx_http_client *c, int status, int code)
{
    if (status >= 100 && status < 600 && code <= 0)
        c->code_of[status] = code;
}

void sbx_http_client_set_max_body(sbx_http_client *c, size_t bytes)
{
    c->max_body = bytes ? bytes : HTTP_DEFAULT_MAX_BODY;
}

static bool status_retried(const sbx_http_client *c, int status)
{
    if (status < 100 || status >= 600)
        return false;
    if (c->retry[status] >= 0)
        return c->retry[status] == 1;
    return status == 408 || status == 429 || status == 502 || status == 503 || status == 504;
}

int sbx__http_client_code_for_status(const sbx_http_client *c, int status)
{
    if (status >= 100 && status < 600 && c->code_of[status] < 0)
        return c->code_of[status];
    switch (status) {
    case 400:
    case 422:
        return SBX_EINVAL;
    case 401:
        return SBX_EAUTH;
    case 403:
        return SBX_EPERM;
    case 404:
    case 410:
        return SBX_ENOENT;
    case 409:
        return SBX_ESTATE;
    case 408:
    case 504:
        return SBX_ETIMEDOUT;
    default:
        return status >= 500 ? SBX_EPROVIDER : SBX_EINVAL;
    }
}

/* --- the engine: one per context ------------------------------------------ */

static void resp_free(sbx_http_response *r);

struct engine;

struct esock {
    uv_poll_t poll;
    curl_socket_t fd;
    struct engine *e;
    struct esock *next, *prev;
};

struct engine {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    int open_handles; /* the timer and socket polls not yet closed */
    bool closing;
    struct sbx_http_request *inflight; /* sent and not yet ended */
    struct esock *socks;
    struct sbx__http_hook *hooks; /* what else ends with the context (http_kit.h) */
};

struct sbx_http_response {
    int status;
    struct hdr *headers;
    size_t n_headers;
    size_t header_bytes;
    sbx_buf body;
    /* For check()'s message: what was asked. */
    const char *method;
    const char *path;
    const sbx_http_client *client;
};

enum abort_reason { ABORT_NONE, ABORT_BODY_TOO_BIG, ABORT_HEADERS_TOO_BIG, ABORT_BY_CALLBACK };

struct sbx_http_request {
    sbx_http_client *c;
    char *method;
    char *path;
    struct hdr *headers;
    size_t n_headers;
    char *body;
    size_t body_len;
    bool has_body;
    int idempotent; /* -1: by method */
    double deadline_s;

    sbx_http_data_cb on_data;
    void *data_user;
    sbx_http_done_cb cb;
    void *user;

    struct engine *e;
    uv_timer_t timer; /* retry waits and deferred ends */
    CURL *easy;
    struct curl_slist *slist;
    char errbuf[CURL_ERROR_SIZE];
    uint64_t sent_ns, deadline_ns; /* deadline_ns 0: none */
    int attempts;
    bool sent;        /* handed to send: the engine's from then on */
    bool delivered;   /* a chunk reached on_data: never retried after */
    bool paused;
    bool cancelled;
    bool ended;       /* the callback ran (or runs now) */
    enum abort_reason abort;
    sbx_http_response *resp; /* this attempt's */
    struct sbx_http_request *next, *prev;
};

static uint64_t now_ns(void) { return uv_hrtime(); }

sbx_http_response *sbx__http_response_new(const sbx_http_client *c, const char *method,
                                          const char *path)
{
    sbx_http_response *r = calloc(1, sizeof(*r));
    if (r) {
        r->client = c;
        r->method = method;
        r->path = path;
    }
    return r;
}

int sbx__http_response_append(sbx_http_response *r, const void *data, size_t len)
{
    return sbx__buf_append(&r->body, data, len);
}

void sbx__http_response_free(sbx_http_response *r) { resp_free(r); }

static void resp_free(sbx_http_response *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_headers; i++) {
        free(r->headers[i].name);
        free(r->headers[i].value);
    }
    free(r->headers);
    sbx__buf_free(&r->body);
    free(r);
}

static void sock_closed(uv_handle_t *h)
{
    struct esock *s = h->data;
    struct engine *e = s->e;
    free(s);
    if (--e->open_handles == 0 && e->closing)
        free(e);
}

static void sock_close(struct engine *e, struct esock *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        e->socks = s->next;
    if (s->next)
        s->next->prev = s->prev;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, sock_closed);
}

static void check_done(struct engine *e);

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct esock *s = h->data;
    struct engine *e = s->e;
    int flags = 0;
    if (status < 0)
        flags = CURL_CSELECT_ERR;
    if (events & UV_READABLE)
        flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE)
        flags |= CURL_CSELECT_OUT;
    int running = 0;
    curl_multi_socket_action(e->multi, s->fd, flags, &running);
    check_done(e);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct engine *e = userp;
    struct esock *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            curl_multi_assign(e->multi, fd, NULL);
            sock_close(e, s);
        }
        return 0;
    }
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return -1;
        if (uv_poll_init_socket(e->loop, &s->poll, fd) < 0) {
            free(s);
            return -1;
        }
        s->fd = fd;
        s->e = e;
        s->poll.data = s;
        e->open_handles++;
        s->next = e->socks;
        if (e->socks)
            e->socks->prev = s;
        e->socks = s;
        curl_multi_assign(e->multi, fd, s);
    }
    int ev = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        ev |= UV_READABLE;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        ev |= UV_WRITABLE;
    uv_poll_start(&s->poll, ev, on_poll);
    return 0;
}

static void on_timeout(uv_timer_t *t)
{
    struct engine *e = t->data;
    int running = 0;
    curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(e);
}

/* libcurl asks for a wake-up: never act inside this callback, only arm the timer. */
static int on_timer(CURLM *m, long timeout_ms, void *userp)
{
    (void)m;
    struct engine *e = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&e->timer);
    else
        uv_timer_start(&e->timer, on_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

static void engine_timer_closed(uv_handle_t *h)
{
    struct engine *e = h->data;
    if (--e->open_handles == 0 && e->closing)
        free(e);
}

static void request_end(sbx_http_request *r, int code, sbx_error *err);

/* The context stops: nothing of any provider runs any more, so nothing waits on these. */
static void engine_close(void *data)
{
    struct engine *e = data;
    e->closing = true;
    while (e->hooks) {
        struct sbx__http_hook *h = e->hooks;
        sbx__http_hook_remove(h);
        h->close(h);
    }
    while (e->inflight) {
        sbx_http_request *r = e->inflight;
        request_end(r, SBX_ECANCELED,
                    sbx_error_new(SBX_ECANCELED, "%s: %s %s: the context ended first", r->c->name,
                                  r->method, r->path));
    }
    curl_multi_cleanup(e->multi);
    e->multi = NULL;
    while (e->socks)
        sock_close(e, e->socks);
    uv_close((uv_handle_t *)&e->timer, engine_timer_closed);
}

/* Open connections at most: a quarter of the descriptors this process may open, 4 to 512. */
static long connection_cap(void)
{
    struct rlimit rl;
    long cap = 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        cap = (long)(rl.rlim_cur / 4);
    return cap < 4 ? 4 : cap > 512 ? 512 : cap;
}

static struct engine *engine_of(void *loop, sbx_error **err)
{
    sbx_context *ctx = sbx__context_of_uv(loop);
    struct engine *e = sbx__context_http(ctx);
    if (e)
        return e;
    e = calloc(1, sizeof(*e));
    if (!e || !(e->multi = curl_multi_init())) {
        free(e);
        sbx__set_error(err, SBX_ENOMEM, "out of memory");
        return NULL;
    }
    e->loop = loop;
    uv_timer_init(loop, &e->timer);
    e->timer.data = e;
    e->open_handles = 1;
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
    /* Past the cap, requests wait in libcurl's queue for a connection: back-pressure. */
    long cap = connection_cap();
    curl_multi_setopt(e->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, cap);
    curl_multi_setopt(e->multi, CURLMOPT_MAXCONNECTS, cap);
    sbx__context_set_http(ctx, e, engine_close);
    return e;
}

int sbx__http_hook_add(void *loop, struct sbx__http_hook *h, sbx_error **err)
{
    struct engine *e = engine_of(loop, err);
    if (!e)
        return err && *err ? sbx_error_code(*err) : SBX_ENOMEM;
    if (e->closing)
        return sbx__set_error(err, SBX_ECANCELED, "the context has ended");
    h->engine = e;
    h->prev = NULL;
    h->next = e->hooks;
    if (e->hooks)
        e->hooks->prev = h;
    e->hooks = h;
    return SBX_OK;
}

void sbx__http_hook_remove(struct sbx__http_hook *h)
{
    struct engine *e = h->engine;
    if (!e)
        return;
    if (h->prev)
        h->prev->next = h->next;
    else
        e->hooks = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->next = h->prev = NULL;
    h->engine = NULL;
}

/* --- requests ------------------------------------------------------------- */

int sbx_http_request_new(sbx_http_client *c, const char *method, const char *path,
                         sbx_http_request **out, sbx_error **err)
{
    if (!c || !method || !*method || !path || path[0] != '/')
        return sbx__set_error(err, SBX_EINVAL,
                              "an HTTP request needs a client, a method and a path starting "
                              "with '/'");
    for (const char *p = method; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || *p == '-'))
            return sbx__set_error(err, SBX_EINVAL, "'%.32s' is not an HTTP method", method);
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7f)
            return sbx__set_error(err, SBX_EINVAL,
                                  "an HTTP path may not hold spaces or control bytes: escape "
                                  "it with sbx_http_escape");
    sbx_http_request *r = calloc(1, sizeof(*r));
    if (!r)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    r->method = strdup(method);
    r->path = strdup(path);
    r->idempotent = -1;
    if (!r->method || !r->path) {
        free(r->method);
        free(r->path);
        free(r);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    client_ref(c);
    r->c = c;
    *out = r;
    return SBX_OK;
}

static void request_release(sbx_http_request *r)
{
    for (size_t i = 0; i < r->n_headers; i++) {
        free(r->headers[i].name);
        free(r->headers[i].value);
    }
    free(r->headers);
    free(r->body);
    free(r->method);
    free(r->path);
    resp_free(r->resp);
    sbx_http_client_free(r->c);
    free(r);
}

void sbx_http_request_free(sbx_http_request *r)
{
    /* A sent request is the engine's: it is freed after its callback. */
    if (r && !r->sent)
        request_release(r);
}

int sbx_http_request_set_header(sbx_http_request *r, const char *name, const char *value)
{
    return hdr_set(&r->headers, &r->n_headers, name, value);
}

int sbx_http_request_set_body(sbx_http_request *r, const void *data, size_t len,
                              const char *content_type)
{
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return SBX_ENOMEM;
    if (len)
        memcpy(copy, data, len);
    free(r->body);
    r->body = copy;
    r->body_len = len;
    r->has_body = true;
    return content_type ? sbx_http_request_set_header(r, "Content-Type", content_type) : SBX_OK;
}

void sbx_http_request_set_idempotent(sbx_http_request *r, int idempotent)
{
    r->idempotent = idempotent != 0;
}

void sbx_http_request_set_deadline(sbx_http_request *r, double seconds)
{
    r->deadline_s = seconds > 0 && isfinite(seconds) ? seconds : 0;
}

void sbx_http_request_on_data(sbx_http_request *r, sbx_http_data_cb cb, void *user)
{
    r->on_data = cb;
    r->data_user = user;
}

int sbx_http_request_status(const sbx_http_request *r) { return r->resp ? r->resp->status : 0; }
int sbx_http_request_attempts(const sbx_http_request *r) { return r->attempts; }

static bool idempotent(const sbx_http_request *r)
{
    if (r->idempotent >= 0)
        return r->idempotent == 1;
    const char *m = r->method;
    return !strcmp(m, "GET") || !strcmp(m, "HEAD") || !strcmp(m, "PUT") || !strcmp(m, "DELETE") ||
           !strcmp(m, "OPTIONS");
}

static void timer_closed(uv_handle_t *h) { request_release(h->data); }

static void unlink_inflight(sbx_http_request *r)
{
    struct engine *e = r->e;
    if (r->prev)
        r->prev->next = r->next;
    else if (e->inflight == r)
        e->inflight = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->next = r->prev = NULL;
}

static void drop_easy(sbx_http_request *r)
{
    if (r->easy) {
        if (r->e->multi)
            curl_multi_remove_handle(r->e->multi, r->easy);
        curl_easy_cleanup(r->easy);
        r->easy = NULL;
    }
    curl_slist_free_all(r->slist);
    r->slist = NULL;
}

/* Runs the callback and frees the request (once its timer has closed). */
static void request_end(sbx_http_request *r, int code, sbx_error *err)
{
    if (r->ended) {
        sbx_error_free(err);
        return;
    }
    r->ended = true;
    drop_easy(r);
    unlink_inflight(r);
    uv_timer_stop(&r->timer);
    sbx_http_response *resp = NULL;
    if (code == SBX_OK) {
        resp = r->resp;
        r->resp = NULL;
    }
    if (err)
        sbx__error_set_provider(err, r->c->name);
    r->cb(r, code, resp, err, r->user);
    resp_free(resp);
    uv_close((uv_handle_t *)&r->timer, timer_closed);
}

/*
 * One header line of a response as libcurl hands it over (with its CRLF):
 * a status line starts a new response (after a 100 Continue, say), whose
 * headers replace the last's. -1: the headers are too big or no memory.
 */
int sbx__http_response_header_line(sbx_http_response *resp, const char *data, size_t len)
{
    if (len >= 5 && !memcmp(data, "HTTP/", 5)) {
        for (size_t i = 0; i < resp->n_headers; i++) {
            free(resp->headers[i].name);
            free(resp->headers[i].value);
        }
        resp->n_headers = 0;
        resp->header_bytes = 0;
        const char *sp = memchr(data, ' ', len);
        long st = 0;
        if (sp) {
            /* Three digits, as RFC 9110 has them; anything else is no status (0). */
            const char *q = sp + 1, *end = data + len;
            for (int i = 0; i < 3 && q < end && *q >= '0' && *q <= '9'; i++, q++)
                st = st * 10 + (*q - '0');
            if (q - (sp + 1) != 3 || st < 100)
                st = 0;
        }
        resp->status = (int)st;
        return 0;
    }
    resp->header_bytes += len;
    if (resp->header_bytes > HTTP_MAX_HEADER_BYTES)
        return -1;
    const char *colon = memchr(data, ':', len);
    if (!colon || colon == data)
        return 0; /* the blank line, or a folded line: not kept */
    const char *v = colon + 1, *end = data + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
    /*
     * NUL, CR or LF inside a name or value (RFC 9110 allows none): not kept,
     * so no value read back can cut a string short or split a header line.
     */
    for (const char *q = data; q < end; q++)
        if ((*q == 0 || *q == '\r' || *q == '\n') && (q < colon || q >= v))
            return 0;
    struct hdr *nv = realloc(resp->headers, (resp->n_headers + 1) * sizeof(*nv));
    if (!nv)
        return -1;
    resp->headers = nv;
    nv[resp->n_headers].name = strndup(data, (size_t)(colon - data));
    nv[resp->n_headers].value = strndup(v, (size_t)(end - v));
    if (!nv[resp->n_headers].name || !nv[resp->n_headers].value) {
        free(nv[resp->n_headers].name);
        free(nv[resp->n_headers].value);
        return -1;
    }
    resp->n_headers++;
    return 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *user)
{
    sbx_http_request *r = user;
    size_t len = size * n;
    if (sbx__http_response_header_line(r->resp, data, len) < 0) {
        if (r->resp->header_bytes > HTTP_MAX_HEADER_BYTES)
            r->abort = ABORT_HEADERS_TOO_BIG;
        return 0;
    }
    return len;
}

static bool attempt_may_retry(const sbx_http_request *r)
{
    return idempotent(r) && !r->delivered && !r->cancelled && r->abort == ABORT_NONE &&
           r->attempts < r->c->attempts;
}

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    sbx_http_request *r = user;
    size_t len = size * n;
    if (r->cancelled)
        return 0;
    sbx_http_response *resp = r->resp;
    int st = resp->status;
    bool ok = st >= 200 && st < 300;
    /* A 2xx body streams to on_data; others are kept (bounded) for the error message. */
    if (r->on_data && ok) {
        r->delivered = true;
        int rc = r->on_data(r, data, len, r->data_user);
        if (rc < 0 || r->cancelled) {
            r->abort = r->cancelled ? ABORT_NONE : ABORT_BY_CALLBACK;
            return 0;
        }
        if (rc > 0) {
            r->paused = true;
            curl_easy_pause(r->easy, CURLPAUSE_RECV);
        }
        return len;
    }
    size_t cap = ok ? r->c->max_body : HTTP_ERROR_BODY_KEEP;
    if (resp->body.len + len > cap) {
        if (!ok) {
            size_t room = cap - resp->body.len;
            if (room && sbx__buf_append(&resp->body, data, room) < 0)
                return 0;
            return len; /* the rest of an error body is dropped, not an error */
        }
        r->abort = ABORT_BODY_TOO_BIG;
        return 0;
    }
    if (sbx__buf_append(&resp->body, data, len) < 0)
        return 0;
    return len;
}

void sbx_http_request_resume(sbx_http_request *r)
{
    if (r && r->paused && r->easy && !r->ended) {
        r->paused = false;
        curl_easy_pause(r->easy, CURLPAUSE_CONT);
    }
}

static void attempt_start(sbx_http_request *r);

static void on_request_timer(uv_timer_t *t)
{
    sbx_http_request *r = t->data;
    if (r->cancelled) {
        request_end(r, SBX_ECANCELED,
                    sbx_error_new(SBX_ECANCELED, "%s: %s %s: cancelled", r->c->name, r->method,
                                  r->path));
        return;
    }
    attempt_start(r);
}

void sbx_http_request_cancel(sbx_http_request *r)
{
    if (!r || r->ended || r->cancelled || !r->e)
        return;
    r->cancelled = true;
    /* Deferred: a cancel may come from inside libcurl's callbacks (on_data). */
    uv_timer_start(&r->timer, on_request_timer, 0, 0);
}

static double remaining_s(const sbx_http_request *r)
{
    if (!r->deadline_ns)
        return INFINITY;
    uint64_t now = now_ns();
    return now >= r->deadline_ns ? 0 : (double)(r->deadline_ns - now) / 1e9;
}

/* `sl` with "NAME: VALUE" appended; NULL (and `sl` freed) when out of memory. */
static struct curl_slist *slist_add(struct curl_slist *sl, const struct hdr *h)
{
    _cleanup_free_ char *line = sbx__printf("%s: %s", h->name, h->value);
    struct curl_slist *nsl = line ? curl_slist_append(sl, line) : NULL;
    if (!nsl)
        curl_slist_free_all(sl);
    return nsl;
}

CURL *sbx__http_easy_new(const sbx_http_client *c, const char *path, char *errbuf)
{
    CURL *h = curl_easy_init();
    _cleanup_free_ char *url = sbx__printf("%s%s", c->base_url, path);
    if (!h || !url) {
        if (h)
            curl_easy_cleanup(h);
        return NULL;
    }
    /* libcurl copies the URL and every string option: nothing here outlives the call. */
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    if (c->unix_socket)
        curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->unix_socket);
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->cert_file)
        curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert_file);
    if (c->key_file)
        curl_easy_setopt(h, CURLOPT_SSLKEY, c->key_file);
    if (c->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->connect_s * 1000));
    return h;
}

static void attempt_start(sbx_http_request *r)
{
    sbx_http_client *c = r->c;
    double left = remaining_s(r);
    if (left <= 0) {
        request_end(r, SBX_ETIMEDOUT,
                    sbx_error_new(SBX_ETIMEDOUT, "%s: %s %s: no answer within its deadline of %g s",
                                  c->name, r->method, r->path, r->deadline_s));
        return;
    }
    resp_free(r->resp);
    r->resp = calloc(1, sizeof(*r->resp));
    r->errbuf[0] = 0;
    CURL *h = sbx__http_easy_new(c, r->path, r->errbuf);
    if (!r->resp || !h) {
        if (h)
            curl_easy_cleanup(h);
        request_end(r, SBX_ENOMEM, sbx_error_new(SBX_ENOMEM, "out of memory"));
        return;
    }
    r->resp->method = r->method;
    r->resp->path = r->path;
    r->resp->client = c;
    r->easy = h;
    r->attempts++;
    r->abort = ABORT_NONE;
    curl_easy_setopt(h, CURLOPT_PRIVATE, r);
    double t = c->attempt_s > 0 ? c->attempt_s : INFINITY;
    if (left < t)
        t = left;
    if (isfinite(t))
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, t * 1000 < 1 ? 1L : (long)(t * 1000));
    /* The request's own headers over the client's of the same name; no 100-continue wait. */
    struct curl_slist *sl = curl_slist_append(NULL, "Expect:");
    for (size_t i = 0; sl && i < c->n_headers; i++) {
        bool over = false;
        for (size_t j = 0; j < r->n_headers; j++)
            over |= !strcasecmp(r->headers[j].name, c->headers[i].name);
        if (!over)
            sl = slist_add(sl, &c->headers[i]);
    }
    for (size_t j = 0; sl && j < r->n_headers; j++)
        sl = slist_add(sl, &r->headers[j]);
    if (!sl) {
        request_end(r, SBX_ENOMEM, sbx_error_new(SBX_ENOMEM, "out of memory"));
        return;
    }
    r->slist = sl;
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, sl);
    if (!strcmp(r->method, "HEAD"))
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    else if (!strcmp(r->method, "GET") && !r->has_body)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    else
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    if (r->has_body || !strcmp(r->method, "POST") || !strcmp(r->method, "PUT") ||
        !strcmp(r->method, "PATCH")) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? r->body : "");
    }
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    if (curl_multi_add_handle(r->e->multi, h) != CURLM_OK) {
        request_end(r, SBX_ENOMEM,
                    sbx_error_new(SBX_ENOMEM, "%s: cannot queue %s %s", c->name, r->method,
                                  r->path));
    }
}

/* Retry-After: delta seconds or an HTTP date; -1 when absent or unreadable. */
double sbx__http_retry_after(const sbx_http_response *resp)
{
    const char *v = sbx_http_response_header(resp, "Retry-After");
    if (!v || !*v)
        return -1;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (end != v && *end == 0 && errno == 0 && n >= 0)
        return n > 86400 ? 86400 : (double)n;
    time_t when = curl_getdate(v, NULL);
    if (when < 0)
        return -1;
    double d = difftime(when, time(NULL));
    return d < 0 ? 0 : d > 86400 ? 86400 : d;
}

static double jitter_s(const sbx_http_client *c, int attempt)
{
    double ceil_s = c->base_s * ldexp(1.0, attempt - 1);
    if (ceil_s > c->cap_s)
        ceil_s = c->cap_s;
    uint32_t x = 0;
    if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x))
        x = (uint32_t)now_ns();
    return ceil_s * ((double)x / 4294967296.0);
}

static bool transport_retryable(CURLcode res)
{
    switch (res) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
        return true;
    default:
        return false;
    }
}

static void attempt_done(sbx_http_request *r, CURLcode res)
{
    sbx_http_client *c = r->c;
    drop_easy(r);
    if (r->cancelled) {
        request_end(r, SBX_ECANCELED,
                    sbx_error_new(SBX_ECANCELED, "%s: %s %s: cancelled", c->name, r->method,
                                  r->path));
        return;
    }
    switch (r->abort) {
    case ABORT_BODY_TOO_BIG:
        request_end(r, SBX_EPROTO,
                    sbx_error_new(SBX_EPROTO,
                                  "%s: %s %s: the response body is larger than %zu bytes: "
                                  "refused (sbx_http_client_set_max_body raises it)",
                                  c->name, r->method, r->path, c->max_body));
        return;
    case ABORT_HEADERS_TOO_BIG:
        request_end(r, SBX_EPROTO,
                    sbx_error_new(SBX_EPROTO,
                                  "%s: %s %s: the response's headers exceed %u bytes: refused",
                                  c->name, r->method, r->path, HTTP_MAX_HEADER_BYTES));
        return;
    case ABORT_BY_CALLBACK:
        request_end(r, SBX_ECANCELED,
                    sbx_error_new(SBX_ECANCELED, "%s: %s %s: ended by its data callback",
                                  c->name, r->method, r->path));
        return;
    case ABORT_NONE:
        break;
    }
    double wait = -1;
    if (res == CURLE_OK && status_retried(c, r->resp->status)) {
        /* A Retry-After past the policy's cap ends the request: no silent hour-long wait. */
        double ra = sbx__http_retry_after(r->resp);
        wait = ra > c->cap_s ? -1 : ra >= 0 ? ra : jitter_s(c, r->attempts);
    } else if (res != CURLE_OK && transport_retryable(res)) {
        wait = jitter_s(c, r->attempts);
    }
    /* Another attempt only while the deadline still leaves time after the wait. */
    if (wait >= 0 && attempt_may_retry(r) && wait < remaining_s(r)) {
        sbx_log(SBX_LOG_DEBUG, "%s: %s %s: attempt %d %s; again in %.3f s", c->name, r->method,
                r->path, r->attempts,
                res == CURLE_OK ? "got a retryable status" : curl_easy_strerror(res), wait);
        uv_timer_start(&r->timer, on_request_timer, (uint64_t)(wait * 1000), 0);
        return;
    }
    if (res == CURLE_OK) {
        request_end(r, SBX_OK, NULL);
        return;
    }
    const char *why = r->errbuf[0] ? r->errbuf : curl_easy_strerror(res);
    if (res == CURLE_OPERATION_TIMEDOUT) {
        bool by_deadline = remaining_s(r) <= 0;
        request_end(r, SBX_ETIMEDOUT,
                    by_deadline
                        ? sbx_error_new(SBX_ETIMEDOUT,
                                        "%s: %s %s: no answer within its deadline of %g s (%d "
                                        "attempt%s)",
                                        c->name, r->method, r->path, r->deadline_s, r->attempts,
                                        r->attempts == 1 ? "" : "s")
                        : sbx_error_new(SBX_ETIMEDOUT, "%s: %s %s: %s (%d attempt%s)", c->name,
                                        r->method, r->path, why, r->attempts,
                                        r->attempts == 1 ? "" : "s"));
        return;
    }
    request_end(r, SBX_EIO,
                sbx_error_new(SBX_EIO, "%s: %s %s%s: %s (%d attempt%s)", c->name, r->method,
                              c->base_url, r->path, why, r->attempts,
                              r->attempts == 1 ? "" : "s"));
}

static void check_done(struct engine *e)
{
    CURLMsg *m;
    int left = 0;
    while (e->multi && (m = curl_multi_info_read(e->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        sbx_http_request *r = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        CURLcode res = m->data.result;
        if (r)
            attempt_done(r, res);
    }
}

/* On the loop thread: the engine, the request's timer, its first attempt. */
static int start_on_loop(sbx_http_request *r, void *loop, sbx_error **err)
{
    struct engine *e = engine_of(loop, err);
    if (!e)
        return err && *err ? sbx_error_code(*err) : SBX_EINVAL;
    r->e = e;
    uv_timer_init(e->loop, &r->timer);
    r->timer.data = r;
    r->sent_ns = now_ns();
    r->deadline_ns = r->deadline_s > 0 ? r->sent_ns + (uint64_t)(r->deadline_s * 1e9) : 0;
    r->next = e->inflight;
    if (e->inflight)
        e->inflight->prev = r;
    e->inflight = r;
    /* The first attempt starts from the loop too: the callback never runs inside send. */
    uv_timer_start(&r->timer, on_request_timer, 0, 0);
    return SBX_OK;
}

struct posted {
    sbx_http_request *r;
    void *loop;
};

static void send_posted(void *data)
{
    struct posted *p = data;
    sbx_http_request *r = p->r;
    sbx_error *e = NULL;
    int rc = start_on_loop(r, p->loop, &e);
    free(p);
    if (rc < 0) {
        r->cb(r, rc, NULL, e, r->user);
        request_release(r);
    }
}

int sbx_http_request_send(sbx_http_request *r, void *loop, sbx_http_done_cb cb, void *user,
                          sbx_error **err)
{
    if (!r || !cb || !loop || r->sent)
        return sbx__set_error(err, SBX_EINVAL, "sbx_http_request_send: a request, sent once, "
                                               "with a callback and a loop");
    r->cb = cb;
    r->user = user;
    sbx_context *ctx = sbx__context_of_uv(loop);
    if (sbx__context_on_loop(ctx)) {
        int rc = start_on_loop(r, loop, err);
        if (rc == SBX_OK)
            r->sent = true;
        return rc;
    }
    /* From another thread (a worker that read a file, say): the loop starts it. */
    struct posted *p = malloc(sizeof(*p));
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    p->r = r;
    p->loop = loop;
    /*
     * Sent before the post: the loop may run the request to its end and
     * free it before sbx__context_post returns here.
     */
    r->sent = true;
    int rc = sbx__context_post(ctx, send_posted, p);
    if (rc < 0) {
        r->sent = false;
        free(p);
        return sbx__set_error(err, rc, "sbx_http_request_send: the context's loop has ended");
    }
    return SBX_OK;
}

/* --- responses ------------------------------------------------------------ */

int sbx_http_response_status(const sbx_http_response *resp) { return resp ? resp->status : 0; }

const char *sbx_http_response_header(const sbx_http_response *resp, const char *name)
{
    if (!resp || !name)
        return NULL;
    for (size_t i = resp->n_headers; i-- > 0;)
        if (!strcasecmp(resp->headers[i].name, name))
            return resp->headers[i].value;
    return NULL;
}

const char *sbx_http_response_body(const sbx_http_response *resp, size_t *len)
{
    if (len)
        *len = resp && resp->body.data ? resp->body.len : 0;
    return resp && resp->body.data ? resp->body.data : "";
}

char *sbx_http_response_take_body(sbx_http_response *resp, size_t *len)
{
    size_t n = resp->body.len;
    char *d = resp->body.data;
    if (!d && !(d = strdup("")))
        return NULL;
    resp->body.data = NULL;
    resp->body.len = resp->body.cap = 0;
    if (len)
        *len = n;
    return d;
}

/* The server's own words: a JSON body's message, error or detail, else its first printable bytes. */
static char *server_message(const sbx_http_response *resp)
{
    size_t n = 0;
    const char *b = sbx_http_response_body(resp, &n);
    json_t *j = n ? json_loadb(b, n, 0, NULL) : NULL;
    char *msg = NULL;
    if (json_is_object(j)) {
        static const char *const keys[] = {"message", "error", "detail", "msg"};
        for (size_t i = 0; !msg && i < sizeof(keys) / sizeof(keys[0]); i++) {
            json_t *v = json_object_get(j, keys[i]);
            if (json_is_string(v))
                msg = strndup(json_string_value(v), 500);
            else if (json_is_object(v) && json_is_string(json_object_get(v, "message")))
                msg = strndup(json_string_value(json_object_get(v, "message")), 500);
        }
    }
    json_decref(j);
    if (msg || !n)
        return msg;
    size_t k = n < 200 ? n : 200;
    msg = malloc(k + 1);
    if (!msg)
        return NULL;
    for (size_t i = 0; i < k; i++) {
        unsigned char ch = (unsigned char)b[i];
        msg[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : ' ';
    }
    msg[k] = 0;
    return msg;
}

static const char *reason_of(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
    }
}

int sbx_http_response_check(const sbx_http_response *resp, sbx_error **err)
{
    if (!resp)
        return sbx__set_error(err, SBX_EINVAL, "no HTTP response to check");
    if (resp->status >= 200 && resp->status < 300)
        return SBX_OK;
    int code = sbx__http_client_code_for_status(resp->client, resp->status);
    _cleanup_free_ char *msg = server_message(resp);
    const char *reason = reason_of(resp->status);
    int rc = sbx__set_error(err, code, "%s: %s %s: %d%s%s%s%s", resp->client->name, resp->method,
                            resp->path, resp->status, *reason ? " " : "", reason,
                            msg ? ": " : "", msg ? msg : "");
    if (err && *err)
        sbx__error_set_provider(*err, resp->client->name);
    return rc;
}

char *sbx_http_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *o = malloc(n * 3 + 1), *p = o;
    if (!o)
        return NULL;
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        /* RFC 3986 unreserved characters stay; everything else is %XX. */
        if ((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') ||
            *q == '-' || *q == '.' || *q == '_' || *q == '~') {
            *p++ = (char)*q;
        } else {
            *p++ = '%';
            *p++ = hex[*q >> 4];
            *p++ = hex[*q & 15];
        }
    }
    *p = 0;
    return o;
}
