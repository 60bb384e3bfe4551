/*
 * The remote kit's HTTP client (include/sbx/http.h) against a real local
 * server (tests/remote/api_server.py, aiohttp) that injects the faults each
 * test asks for: retries and their limits, Retry-After, deadlines, dropped
 * and reset connections, streaming with pause, cancellation, body bounds,
 * the status map, unix sockets, TLS, and many requests at once.
 */
#include "tap.h"
#include "common.h"

#include "core/internal.h"
#include "lib/api_server.h"
#include "lib/proc.h"
#include "lib/digest.h"

#include <sbx/http.h>


#include <jansson.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

static struct api_server srv;
static const char *sock_path = srv.sock_path, *ca_path = srv.ca_path;
static sbx_context *ctx;

static sbx_http_client *client(void)
{
    sbx_http_client *c = api_server_client(&srv, false);
    /* Short waits: the tests check which retries happen, not how long they wait. */
    sbx_http_client_set_retry(c, 4, 0.01, 0.05);
    return c;
}

/* One request, sent from the loop, waited for on this thread. */
struct call {
    sbx_http_request *r;
    sem_t done;
    int code;
    int status;
    int attempts;
    int check;
    char *check_msg;
    char *body;
    size_t len;
    char *err;
    char *header; /* the value of want_header */
    const char *want_header;
    /* streaming */
    size_t streamed;
    int chunks;
    bool paused;
    bool chunk_while_paused;
    int pause_every;
    int fail_at_chunk;
};

static void on_done(sbx_http_request *r, int code, sbx_http_response *resp, sbx_error *err,
                    void *user)
{
    struct call *c = user;
    c->code = code;
    c->attempts = sbx_http_request_attempts(r);
    if (resp) {
        c->status = sbx_http_response_status(resp);
        if (c->want_header) {
            const char *h = sbx_http_response_header(resp, c->want_header);
            c->header = h ? strdup(h) : NULL;
        }
        sbx_error *ce = NULL;
        c->check = sbx_http_response_check(resp, &ce);
        c->check_msg = ce ? strdup(sbx_error_message(ce)) : NULL;
        sbx_error_free(ce);
        c->body = sbx_http_response_take_body(resp, &c->len);
    }
    c->err = err ? strdup(sbx_error_message(err)) : NULL;
    sbx_error_free(err);
    sem_post(&c->done);
}

static void send_task(void *data)
{
    struct call *c = data;
    sbx_error *e = NULL;
    int rc = sbx_http_request_send(c->r, sbx__context_uv(ctx), on_done, c, &e);
    if (rc < 0) {
        c->code = rc;
        c->err = strdup(sbx_error_message(e));
        sbx_error_free(e);
        sbx_http_request_free(c->r);
        sem_post(&c->done);
    }
}

static void call_start(struct call *c)
{
    sem_init(&c->done, 0, 0);
    TAP_EQ_INT(sbx__context_post(ctx, send_task, c), 0);
}

static void call_wait(struct call *c)
{
    while (sem_wait(&c->done) < 0) /* the alarm bounds it */
        ;
    sem_destroy(&c->done);
}

static void call_free(struct call *c)
{
    free(c->body);
    free(c->err);
    free(c->check_msg);
    free(c->header);
    memset(c, 0, sizeof(*c));
}

static sbx_http_request *req(sbx_http_client *c, const char *method, const char *path)
{
    sbx_http_request *r = NULL;
    TAP_OK(sbx_http_request_new(c, method, path, &r, &e_));
    return r;
}

/* A request made, sent and waited for. */
static void call(struct call *out, sbx_http_client *c, const char *method, const char *path)
{
    out->r = req(c, method, path);
    call_start(out);
    call_wait(out);
}

static json_t *body_json(const struct call *c)
{
    json_t *j = json_loadb(c->body ? c->body : "", c->len, 0, NULL);
    if (!j)
        TAP_FAIL("not JSON: %.200s", c->body ? c->body : "(none)");
    return j;
}

static int count_of(sbx_http_client *c, const char *key)
{
    char path[200];
    snprintf(path, sizeof(path), "/count/%s", key);
    struct call k = {0};
    call(&k, c, "GET", path);
    json_t *j = body_json(&k);
    int n = (int)json_integer_value(json_object_get(j, "count"));
    json_decref(j);
    call_free(&k);
    return n;
}

static void test_echo_headers_and_bodies(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    TAP_EQ_INT(sbx_http_client_set_header(c, "Authorization", "Bearer client"), 0);
    TAP_EQ_INT(sbx_http_client_set_header(c, "X-Both", "client"), 0);

    struct call a = {0};
    a.r = req(c, "GET", "/echo?x=1&y=two");
    TAP_EQ_INT(sbx_http_request_set_header(a.r, "X-Both", "request"), 0);
    call_start(&a);
    call_wait(&a);
    TAP_EQ_INT(a.code, SBX_OK);
    TAP_EQ_INT(a.status, 200);
    TAP_EQ_INT(a.attempts, 1);
    TAP_EQ_INT(a.check, SBX_OK);
    json_t *j = body_json(&a);
    TAP_EQ_STR(json_string_value(json_object_get(j, "method")), "GET");
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(j, "query"), "y")), "two");
    json_t *h = json_object_get(j, "headers");
    TAP_EQ_STR(json_string_value(json_object_get(h, "Authorization")), "Bearer client");
    TAP_EQ_STR(json_string_value(json_object_get(h, "X-Both")), "request");
    json_decref(j);
    call_free(&a);

    /* A 1 MiB body of every byte value goes and comes back whole (its hash). */
    size_t n = 1 << 20;
    unsigned char *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (unsigned char)(i * 7 + (i >> 9));
    struct call b = {0};
    b.r = req(c, "POST", "/echo");
    TAP_EQ_INT(sbx_http_request_set_body(b.r, big, n, "application/octet-stream"), 0);
    call_start(&b);
    call_wait(&b);
    TAP_EQ_INT(b.status, 200);
    j = body_json(&b);
    TAP_EQ_INT(json_integer_value(json_object_get(j, "body_len")), (long long)n);
    char hex[65];
    sha256_hex(big, n, hex);
    TAP_EQ_STR(json_string_value(json_object_get(j, "body_sha256")), hex);
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(j, "headers"), "Content-Type")),
               "application/octet-stream");
    json_decref(j);
    call_free(&b);
    free(big);

    /* A POST with no body sends an empty one; DELETE and PATCH are methods like any. */
    const char *methods[] = {"POST", "DELETE", "PATCH", "PUT"};
    for (size_t i = 0; i < 4; i++) {
        struct call m = {0};
        call(&m, c, methods[i], "/echo");
        TAP_EQ_INT(m.status, 200);
        j = body_json(&m);
        TAP_EQ_STR(json_string_value(json_object_get(j, "method")), methods[i]);
        TAP_EQ_INT(json_integer_value(json_object_get(j, "body_len")), 0);
        json_decref(j);
        call_free(&m);
    }
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void test_unix_socket(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = NULL;
    TAP_OK(sbx_http_client_new("testapi", "http://localhost/", &c, &e_));
    TAP_EQ_INT(sbx_http_client_set_unix_socket(c, sock_path), 0);
    struct call a = {0};
    call(&a, c, "GET", "/echo");
    TAP_EQ_INT(a.status, 200);
    json_t *j = body_json(&a);
    TAP_EQ_STR(json_string_value(json_object_get(j, "path")), "/echo");
    json_decref(j);
    call_free(&a);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void test_idempotent_requests_retried(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    /* Two 503s, then 200: a GET sees the 200 on its third attempt. */
    struct call a = {0};
    call(&a, c, "GET", "/flaky/get1?fail=2");
    TAP_EQ_INT(a.code, SBX_OK);
    TAP_EQ_INT(a.status, 200);
    TAP_EQ_INT(a.attempts, 3);
    TAP_EQ_INT(count_of(c, "get1"), 3);
    call_free(&a);
    /* More failures than attempts: the last answer (a 502) is the result. */
    struct call b = {0};
    call(&b, c, "PUT", "/flaky/put1?fail=10&code=502");
    TAP_EQ_INT(b.code, SBX_OK);
    TAP_EQ_INT(b.status, 502);
    TAP_EQ_INT(b.attempts, 4);
    TAP_EQ_INT(b.check, SBX_EPROVIDER);
    TAP_CONTAINS(b.check_msg, "testapi: PUT /flaky/put1?fail=10&code=502: 502 Bad Gateway: "
                              "status 502 as asked");
    TAP_EQ_INT(count_of(c, "put1"), 4);
    call_free(&b);
    /* A status that is not retried (500) is answered at once. */
    struct call d = {0};
    call(&d, c, "GET", "/flaky/get500?fail=1&code=500");
    TAP_EQ_INT(d.status, 500);
    TAP_EQ_INT(d.attempts, 1);
    call_free(&d);
    /* ... unless the client says so. */
    sbx_http_client_retry_status(c, 500, 1);
    struct call e = {0};
    call(&e, c, "GET", "/flaky/get500b?fail=1&code=500");
    TAP_EQ_INT(e.status, 200);
    TAP_EQ_INT(e.attempts, 2);
    call_free(&e);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void test_post_not_retried_unless_idempotent(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    struct call a = {0};
    call(&a, c, "POST", "/flaky/post1?fail=1");
    TAP_EQ_INT(a.code, SBX_OK);
    TAP_EQ_INT(a.status, 503);
    TAP_EQ_INT(a.attempts, 1);
    TAP_EQ_INT(count_of(c, "post1"), 1);
    call_free(&a);
    /* A POST the provider knows to be safe to repeat (a create with a client token). */
    struct call b = {0};
    b.r = req(c, "POST", "/flaky/post2?fail=1");
    sbx_http_request_set_idempotent(b.r, 1);
    call_start(&b);
    call_wait(&b);
    TAP_EQ_INT(b.status, 200);
    TAP_EQ_INT(b.attempts, 2);
    call_free(&b);
    /* And a GET the provider says must not repeat. */
    struct call d = {0};
    d.r = req(c, "GET", "/flaky/get2?fail=1");
    sbx_http_request_set_idempotent(d.r, 0);
    call_start(&d);
    call_wait(&d);
    TAP_EQ_INT(d.status, 503);
    TAP_EQ_INT(d.attempts, 1);
    call_free(&d);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void test_retry_after_honoured_and_deadline_wins(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    /* A 429 asking for 1 s: the second attempt comes no sooner. */
    sbx_http_client_set_retry(c, 4, 0.01, 5);
    struct call a = {0};
    call(&a, c, "GET", "/flaky/ra1?fail=1&code=429&retry_after=1");
    TAP_EQ_INT(a.status, 200);
    TAP_EQ_INT(a.attempts, 2);
    call_free(&a);
    struct call k = {0};
    call(&k, c, "GET", "/count/ra1");
    json_t *j = body_json(&k);
    double gap = json_number_value(json_array_get(json_object_get(j, "gaps"), 0));
    TAP_TRUE(gap >= 0.95);
    json_decref(j);
    call_free(&k);
    /* Retry-After past the deadline: the 503 is the answer, without waiting for it. */
    struct call b = {0};
    b.r = req(c, "GET", "/flaky/ra2?fail=5&retry_after=20");
    sbx_http_request_set_deadline(b.r, 10);
    call_start(&b);
    call_wait(&b);
    TAP_EQ_INT(b.code, SBX_OK);
    TAP_EQ_INT(b.status, 503);
    TAP_EQ_INT(b.attempts, 1);
    call_free(&b);
    /* ... and past the policy's cap (5 s here) with no deadline: the same. */
    struct call b2 = {0};
    call(&b2, c, "GET", "/flaky/ra3?fail=5&code=429&retry_after=3600");
    TAP_EQ_INT(b2.status, 429);
    TAP_EQ_INT(b2.attempts, 1);
    call_free(&b2);
    /* A server that does not answer within the deadline: SBX_ETIMEDOUT, saying so. */
    struct call d = {0};
    d.r = req(c, "GET", "/slow?delay=60");
    sbx_http_request_set_deadline(d.r, 1);
    call_start(&d);
    call_wait(&d);
    TAP_EQ_INT(d.code, SBX_ETIMEDOUT);
    TAP_CONTAINS(d.err, "testapi: GET /slow?delay=60: no answer within its deadline of 1 s");
    call_free(&d);
    /* The client's per-attempt timeout, retried (GET), then the last timeout is the end. */
    sbx_http_client_set_timeouts(c, 5, 0.3);
    struct call e = {0};
    call(&e, c, "GET", "/stall");
    TAP_EQ_INT(e.code, SBX_ETIMEDOUT);
    TAP_EQ_INT(e.attempts, 4);
    TAP_CONTAINS(e.err, "(4 attempts)");
    call_free(&e);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void test_broken_connections(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    /* Closed after 100 of 1 MiB announced bytes: SBX_EIO after every attempt. */
    struct call a = {0};
    call(&a, c, "GET", "/drop?after=100");
    TAP_EQ_INT(a.code, SBX_EIO);
    TAP_EQ_INT(a.attempts, 4);
    TAP_CONTAINS(a.err, "testapi: GET http://127.0.0.1:");
    call_free(&a);
    /* Closed without an answer, for a POST: one attempt. */
    struct call b = {0};
    b.r = req(c, "GET", "/reset");
    sbx_http_request_set_idempotent(b.r, 0);
    call_start(&b);
    call_wait(&b);
    TAP_EQ_INT(b.code, SBX_EIO);
    TAP_EQ_INT(b.attempts, 1);
    call_free(&b);
    /* Nobody listening. */
    api_server_stop_ctx(&srv, &ctx);
    struct call d = {0};
    TAP_OK(sbx_context_new(&ctx, &e_));
    call(&d, c, "GET", "/echo");
    TAP_EQ_INT(d.code, SBX_EIO);
    TAP_EQ_INT(d.attempts, 4);
    call_free(&d);
    sbx_http_client_free(c);
    sbx_context_free(ctx);
    ctx = NULL;
}

/* Streaming: pauses after every `pause_every`th chunk; resumed from the loop a moment later. */

static void resume_task(void *data)
{
    struct call *c = data;
    c->paused = false;
    sbx_http_request_resume(c->r);
}

static void resume_later(uv_timer_t *t)
{
    resume_task(t->data);
    uv_close((uv_handle_t *)t, (uv_close_cb)free);
}

static int on_chunk(sbx_http_request *r, const void *data, size_t len, void *user)
{
    (void)data;
    struct call *c = user;
    TAP_EQ_INT(sbx_http_request_status(r), 200);
    if (c->paused)
        c->chunk_while_paused = true;
    c->streamed += len;
    c->chunks++;
    if (c->fail_at_chunk && c->chunks == c->fail_at_chunk)
        return -1;
    if (c->pause_every && c->chunks % c->pause_every == 0) {
        c->paused = true;
        uv_timer_t *t = malloc(sizeof(*t));
        uv_timer_init(sbx__context_uv(ctx), t);
        t->data = c;
        uv_timer_start(t, resume_later, 20, 0);
        return 1;
    }
    return 0;
}

static void test_streamed_body_with_pauses(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    sbx_http_client_set_max_body(c, 1 << 20); /* a stream is not bounded by it */
    struct call a = {0};
    a.pause_every = 5;
    a.r = req(c, "GET", "/big?bytes=8388608");
    sbx_http_request_on_data(a.r, on_chunk, &a);
    call_start(&a);
    call_wait(&a);
    TAP_EQ_INT(a.code, SBX_OK);
    TAP_EQ_INT(a.status, 200);
    TAP_EQ_INT((long long)a.streamed, 8388608);
    TAP_EQ_INT((long long)a.len, 0); /* nothing kept */
    TAP_TRUE(a.chunks >= 5);
    TAP_TRUE(!a.chunk_while_paused);
    call_free(&a);
    /* A callback that ends it: SBX_ECANCELED, and it is not retried. */
    struct call b = {0};
    b.fail_at_chunk = 2;
    b.r = req(c, "GET", "/big?bytes=8388608");
    sbx_http_request_on_data(b.r, on_chunk, &b);
    call_start(&b);
    call_wait(&b);
    TAP_EQ_INT(b.code, SBX_ECANCELED);
    TAP_EQ_INT(b.attempts, 1);
    TAP_CONTAINS(b.err, "ended by its data callback");
    call_free(&b);
    /* An error status is kept for its message, not streamed. */
    struct call d = {0};
    d.r = req(c, "GET", "/status/404");
    sbx_http_request_on_data(d.r, on_chunk, &d);
    call_start(&d);
    call_wait(&d);
    TAP_EQ_INT(d.status, 404);
    TAP_EQ_INT((long long)d.streamed, 0);
    TAP_EQ_INT(d.check, SBX_ENOENT);
    TAP_CONTAINS(d.check_msg, "404 Not Found: status 404 as asked");
    call_free(&d);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void cancel_task(void *data) { sbx_http_request_cancel(((struct call *)data)->r); }

static void test_cancel_and_context_end(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    struct call a = {0};
    a.r = req(c, "GET", "/slow?delay=60");
    call_start(&a);
    usleep(200 * 1000);
    TAP_EQ_INT(sbx__context_post(ctx, cancel_task, &a), 0);
    call_wait(&a);
    TAP_EQ_INT(a.code, SBX_ECANCELED);
    TAP_CONTAINS(a.err, "cancelled");
    call_free(&a);
    /* The context ends with a request out: its callback says so, nothing is left. */
    struct call b = {0};
    b.r = req(c, "GET", "/slow?delay=60");
    call_start(&b);
    usleep(200 * 1000);
    sbx_context_free(ctx);
    ctx = NULL;
    call_wait(&b);
    TAP_EQ_INT(b.code, SBX_ECANCELED);
    TAP_CONTAINS(b.err, "the context ended first");
    call_free(&b);
    sbx_http_client_free(c);
    api_server_stop(&srv);
}

static void test_bounds_and_bad_input(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    sbx_http_client_set_max_body(c, 1 << 20);
    struct call a = {0};
    call(&a, c, "GET", "/big?bytes=2097152");
    TAP_EQ_INT(a.code, SBX_EPROTO);
    TAP_EQ_INT(a.attempts, 1);
    TAP_CONTAINS(a.err, "the response body is larger than 1048576 bytes");
    call_free(&a);
    /* Headers past libcurl's bound (100 KiB a header): an error, never a crash. */
    struct call b = {0};
    call(&b, c, "GET", "/headers?size=300000");
    TAP_NE_INT(b.code, SBX_OK);
    call_free(&b);

    sbx_http_client *bad = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_http_client_new("x", "ftp://host/", &bad, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "must start with http:// or https://");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_http_client_set_header(c, "X-Evil", "a\r\nX-Injected: 1"), SBX_EINVAL);
    TAP_EQ_INT(sbx_http_client_set_header(c, "Bad Name", "v"), SBX_EINVAL);
    sbx_http_request *r = NULL;
    TAP_EQ_INT(sbx_http_request_new(c, "GET", "/a b", &r, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "sbx_http_escape");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_http_request_new(c, "GET", "relative", &r, &e), SBX_EINVAL);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_http_request_new(c, "G ET", "/x", &r, &e), SBX_EINVAL);
    sbx_error_free(e);
    e = NULL;
    /* Sent from this thread (not the loop's): the loop starts it, the callback runs there. */
    struct call o = {0};
    o.r = req(c, "GET", "/echo");
    sem_init(&o.done, 0, 0);
    TAP_OK(sbx_http_request_send(o.r, sbx__context_uv(ctx), on_done, &o, &e_));
    call_wait(&o);
    TAP_EQ_INT(o.status, 200);
    call_free(&o);
    /*
     * Again and again: the loop may end and free a request before send
     * returns on this thread, which must not touch it then (TSan saw it).
     */
    for (int i = 0; i < 20; i++) {
        struct call m = {0};
        m.r = req(c, "GET", "/echo");
        sem_init(&m.done, 0, 0);
        TAP_OK(sbx_http_request_send(m.r, sbx__context_uv(ctx), on_done, &m, &e_));
        call_wait(&m);
        TAP_EQ_INT(m.status, 200);
        call_free(&m);
    }
    /* No callback or no loop: refused, and the request stays the caller's. */
    r = req(c, "GET", "/echo");
    TAP_EQ_INT(sbx_http_request_send(r, NULL, on_done, NULL, &e), SBX_EINVAL);
    sbx_error_free(e);
    sbx_http_request_free(r);
    char *esc = sbx_http_escape("a b/c?d=é&~");
    TAP_EQ_STR(esc, "a%20b%2Fc%3Fd%3D%C3%A9%26~");
    free(esc);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void test_status_map(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    static const struct {
        int status;
        int code;
    } want[] = {{400, SBX_EINVAL}, {401, SBX_EAUTH},   {403, SBX_EPERM},    {404, SBX_ENOENT},
                {409, SBX_ESTATE}, {410, SBX_ENOENT},  {418, SBX_EINVAL},   {422, SBX_EINVAL},
                {500, SBX_EPROVIDER}, {501, SBX_EPROVIDER}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char path[64];
        snprintf(path, sizeof(path), "/status/%d", want[i].status);
        struct call a = {0};
        call(&a, c, "GET", path);
        TAP_EQ_INT(a.status, want[i].status);
        TAP_EQ_INT(a.check, want[i].code);
        call_free(&a);
    }
    sbx_http_client_map_status(c, 404, SBX_ESTATE);
    struct call b = {0};
    call(&b, c, "DELETE", "/status/404");
    TAP_EQ_INT(b.check, SBX_ESTATE);
    call_free(&b);
    /* A plain-text body is the message, bounded and printable. */
    struct call d = {0};
    call(&d, c, "GET", "/status/500?text=disk%0Afull");
    TAP_CONTAINS(d.check_msg, "500 Internal Server Error: disk full");
    call_free(&d);
    struct call k = {0};
    call(&k, c, "GET", "/status/204");
    TAP_EQ_INT(k.check, SBX_OK);
    call_free(&k);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void test_many_at_once_and_reuse(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *c = client();
    int n = tap_bulk(200);
    struct call *calls = calloc((size_t)n, sizeof(*calls));
    for (int i = 0; i < n; i++) {
        calls[i].r = req(c, "GET", "/slow?delay=0.2");
        call_start(&calls[i]);
    }
    for (int i = 0; i < n; i++) {
        call_wait(&calls[i]);
        TAP_EQ_INT(calls[i].code, SBX_OK);
        TAP_EQ_INT(calls[i].status, 200);
        call_free(&calls[i]);
    }
    free(calls);
    /* One after another, the same kept connection carries them. */
    struct call a = {0}, b = {0};
    call(&a, c, "GET", "/peer");
    call(&b, c, "GET", "/peer");
    TAP_EQ_STR(a.body, b.body);
    call_free(&a);
    call_free(&b);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

static void test_tls(void)
{
    api_server_start_ctx(&srv, true, &ctx);
    sbx_http_client *c = api_server_client(&srv, true);
    TAP_EQ_INT(sbx_http_client_set_tls(c, ca_path, NULL, NULL), 0);
    struct call a = {0};
    call(&a, c, "GET", "/echo");
    TAP_EQ_INT(a.code, SBX_OK);
    TAP_EQ_INT(a.status, 200);
    call_free(&a);
    sbx_http_client_free(c);
    /* Without the CA the certificate is refused, and a certificate error is not retried. */
    c = api_server_client(&srv, true);
    struct call b = {0};
    call(&b, c, "GET", "/echo");
    TAP_EQ_INT(b.code, SBX_EIO);
    TAP_EQ_INT(b.attempts, 1);
    TAP_CONTAINS(b.err, "certificate");
    call_free(&b);
    sbx_http_client_free(c);
    api_server_stop_ctx(&srv, &ctx);
}

TAP_MAIN(TAP(test_echo_headers_and_bodies), TAP(test_unix_socket),
         TAP(test_idempotent_requests_retried), TAP(test_post_not_retried_unless_idempotent),
         TAP(test_retry_after_honoured_and_deadline_wins), TAP(test_broken_connections),
         TAP(test_streamed_body_with_pauses), TAP(test_cancel_and_context_end),
         TAP(test_bounds_and_bad_input), TAP(test_status_map),
         TAP_T(test_many_at_once_and_reuse, 120), TAP(test_tls))
