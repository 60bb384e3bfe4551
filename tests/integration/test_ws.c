/*
 * The remote kit's WebSocket client (include/sbx/ws.h) against a real
 * server (tests/remote/api_server.py: aiohttp's WebSocket server, and
 * frames written by hand where aiohttp would never send them): echo of
 * text and of 1 MiB binary, many messages in order, the server's close
 * code and reason, the client's closing handshake, ping and pong, the
 * server's protocol errors answered with RFC 6455's close codes, the
 * handshake's timeout and a wrong Sec-WebSocket-Accept refused, a dropped
 * connection, back-pressure, pause, a unix socket and TLS, cancel, and the
 * context ending with a connection open.
 */
#include "tap.h"
#include "common.h"

#include "core/internal.h"
#include "lib/api_server.h"
#include "lib/proc.h"
#include "lib/digest.h"

#include <sbx/http.h>
#include <sbx/ws.h>


#include <jansson.h>
#include <pthread.h>
#include <dirent.h>
#include <fcntl.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

static struct api_server srv;
static const char *sock_path = srv.sock_path, *ca_path = srv.ca_path;
static sbx_context *ctx;

/* Seconds stretched as the alarms are (SBX_TEST_TIMEOUT_SCALE: memcheck connects slowly). */
static double scaled(double s)
{
    const char *v = getenv("SBX_TEST_TIMEOUT_SCALE");
    double k = v ? strtod(v, NULL) : 1;
    return k > 1 ? s * k : s;
}

static sbx_http_client *client(bool tls) { return api_server_client(&srv, tls); }

/* How a case begins: the API server started (with TLS or not), a client of it. */
static sbx_http_client *serve_and_connect(bool tls)
{
    api_server_start_ctx(&srv, tls, &ctx);
    return client(tls);
}

/* How a case ends: its client freed, then the server stopped. */
static void disconnect_and_stop(sbx_http_client *cl)
{
    sbx_http_client_free(cl);
    api_server_stop_ctx(&srv, &ctx);
}

/* --- one connection, seen from the test's thread --------------------------- */

struct msg {
    int op;
    char *data;
    size_t len;
};

struct conn {
    sbx_ws *ws;
    pthread_mutex_t lock;
    sem_t opened, closed, got;
    struct msg *msgs;
    size_t n_msgs;
    bool open;
    bool ended;
    char *protocol;
    int status;
    char *reason;
    int code;
    char *err;
    int drains;
    size_t queued_at_open;
    /* behaviours */
    bool pause_at_open;
    bool cancel_at_open;
    bool send_in_open;
    int opens;
};

static void on_open(sbx_ws *ws, void *user)
{
    struct conn *c = user;
    pthread_mutex_lock(&c->lock);
    c->opens++;
    c->open = true;
    c->queued_at_open = sbx_ws_queued(ws);
    c->protocol = sbx_ws_protocol(ws) ? strdup(sbx_ws_protocol(ws)) : NULL;
    pthread_mutex_unlock(&c->lock);
    if (c->pause_at_open)
        sbx_ws_pause(ws);
    if (c->send_in_open)
        TAP_EQ_INT(sbx_ws_send(ws, SBX_WS_TEXT, "from open", 9, NULL), 0);
    if (c->cancel_at_open)
        sbx_ws_cancel(ws);
    sem_post(&c->opened);
}

static void on_message(sbx_ws *ws, int op, const void *data, size_t len, void *user)
{
    (void)ws;
    struct conn *c = user;
    TAP_EQ_INT(((const char *)data)[len], 0);
    pthread_mutex_lock(&c->lock);
    c->msgs = realloc(c->msgs, (c->n_msgs + 1) * sizeof(*c->msgs));
    struct msg *m = &c->msgs[c->n_msgs++];
    m->op = op;
    m->len = len;
    m->data = malloc(len + 1);
    memcpy(m->data, data, len);
    m->data[len] = 0;
    pthread_mutex_unlock(&c->lock);
    sem_post(&c->got);
}

static void on_drain(sbx_ws *ws, void *user)
{
    struct conn *c = user;
    TAP_EQ_INT(sbx_ws_queued(ws), 0);
    pthread_mutex_lock(&c->lock);
    c->drains++;
    pthread_mutex_unlock(&c->lock);
}

static void on_close(sbx_ws *ws, int status, const char *reason, int code, sbx_error *err,
                     void *user)
{
    (void)ws;
    struct conn *c = user;
    pthread_mutex_lock(&c->lock);
    c->ended = true;
    c->status = status;
    c->reason = strdup(reason);
    c->code = code;
    c->err = err ? strdup(sbx_error_message(err)) : NULL;
    if (code == SBX_OK)
        TAP_NULL(err);
    else if (!err || sbx_error_code(err) != code)
        TAP_FAIL("code %d, error %d: %s", code, err ? sbx_error_code(err) : 0,
                 err ? sbx_error_message(err) : "(none)");
    pthread_mutex_unlock(&c->lock);
    sbx_error_free(err);
    sem_post(&c->closed);
}

static void conn_init(struct conn *c)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
    sem_init(&c->opened, 0, 0);
    sem_init(&c->closed, 0, 0);
    sem_init(&c->got, 0, 0);
}

static void conn_free(struct conn *c)
{
    for (size_t i = 0; i < c->n_msgs; i++)
        free(c->msgs[i].data);
    free(c->msgs);
    free(c->protocol);
    free(c->reason);
    free(c->err);
    pthread_mutex_destroy(&c->lock);
    sem_destroy(&c->opened);
    sem_destroy(&c->closed);
    sem_destroy(&c->got);
}

static void wait_sem(sem_t *s)
{
    while (sem_wait(s) < 0) /* the alarm bounds it */
        ;
}

/* A new connection to `path` with the test's callbacks (not yet connected). */
static sbx_ws *ws_make(struct conn *c, sbx_http_client *cl, const char *path)
{
    conn_init(c);
    TAP_OK(sbx_ws_new(cl, path, &c->ws, &e_));
    sbx_ws_on_open(c->ws, on_open);
    sbx_ws_on_message(c->ws, on_message);
    sbx_ws_on_drain(c->ws, on_drain);
    return c->ws;
}

/* Connects from this thread (the loop starts it). */
static void ws_go(struct conn *c)
{
    TAP_OK(sbx_ws_connect(c->ws, sbx__context_uv(ctx), on_close, c, &e_));
}

static void wait_open(struct conn *c)
{
    wait_sem(&c->opened);
    TAP_TRUE(c->open);
}

/* Waits for message number `i` (0-based) and returns it. */
static struct msg *wait_msg(struct conn *c, size_t i)
{
    for (;;) {
        pthread_mutex_lock(&c->lock);
        bool have = c->n_msgs > i;
        struct msg *m = have ? &c->msgs[i] : NULL;
        bool ended = c->ended;
        pthread_mutex_unlock(&c->lock);
        if (have)
            return m;
        if (ended)
            TAP_FAIL("the connection ended (%d %s) before message %zu", c->code,
                     c->err ? c->err : "", i);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        (void)sem_timedwait(&c->got, &ts);
    }
}

static void wait_closed(struct conn *c)
{
    wait_sem(&c->closed);
}

/* --- calls run on the loop, waited for here --------------------------------- */

struct task {
    struct conn *c;
    int what;
    int op;
    const void *data;
    size_t len;
    int status;
    const char *reason;
    int rc;
    int rc_send_after, rc_close_after;
    size_t queued;
    char *err;
    sem_t done;
};

enum { T_SEND, T_CLOSE, T_CANCEL, T_QUEUED, T_RESUME, T_PAUSE, T_CONNECT, T_CLOSE_MISUSE };

static void task_run(void *data)
{
    struct task *t = data;
    sbx_error *e = NULL;
    sbx_ws *ws = t->c->ws;
    switch (t->what) {
    case T_SEND:
        t->rc = sbx_ws_send(ws, t->op, t->data, t->len, &e);
        break;
    case T_CLOSE:
        t->rc = sbx_ws_close(ws, t->status, t->reason, &e);
        break;
    case T_CANCEL:
        sbx_ws_cancel(ws);
        break;
    case T_QUEUED:
        break;
    case T_RESUME:
        sbx_ws_resume(ws);
        break;
    case T_PAUSE:
        sbx_ws_pause(ws);
        break;
    case T_CONNECT:
        t->rc = sbx_ws_connect(ws, sbx__context_uv(ctx), on_close, t->c, &e);
        break;
    case T_CLOSE_MISUSE:
        /* In the same loop turn: once it returns, the close may end and free the connection. */
        t->rc = sbx_ws_close(ws, t->status, t->reason, &e);
        t->rc_send_after = sbx_ws_send(ws, SBX_WS_TEXT, "late", 4, NULL);
        t->rc_close_after = sbx_ws_close(ws, SBX_WS_NORMAL, NULL, NULL);
        break;
    }
    t->queued = sbx_ws_queued(ws);
    t->err = e ? strdup(sbx_error_message(e)) : NULL;
    if (t->rc < 0)
        TAP_TRUE(e && sbx_error_code(e) == t->rc);
    sbx_error_free(e);
    sem_post(&t->done);
}

static int on_loop(struct task *t)
{
    sem_init(&t->done, 0, 0);
    TAP_EQ_INT(sbx__context_post(ctx, task_run, t), 0);
    wait_sem(&t->done);
    sem_destroy(&t->done);
    return t->rc;
}

static int ws_send(struct conn *c, int op, const void *data, size_t len)
{
    struct task t = {.c = c, .what = T_SEND, .op = op, .data = data, .len = len};
    int rc = on_loop(&t);
    free(t.err);
    return rc;
}

static int ws_close(struct conn *c, int status, const char *reason)
{
    struct task t = {.c = c, .what = T_CLOSE, .status = status, .reason = reason};
    int rc = on_loop(&t);
    free(t.err);
    return rc;
}

static void ws_do(struct conn *c, int what)
{
    struct task t = {.c = c, .what = what};
    on_loop(&t);
    free(t.err);
}

/* --- HTTP, for what the server saw ----------------------------------------- */

struct call {
    sem_t done;
    char *body;
    int status;
};

static void http_done(sbx_http_request *r, int code, sbx_http_response *resp, sbx_error *err,
                      void *user)
{
    (void)r;
    struct call *c = user;
    TAP_EQ_INT(code, SBX_OK);
    c->status = sbx_http_response_status(resp);
    c->body = sbx_http_response_take_body(resp, NULL);
    sbx_error_free(err);
    sem_post(&c->done);
}

/* What the server kept about connection `key` (/ws/seen/KEY), as JSON. */
static json_t *seen(sbx_http_client *cl, const char *key)
{
    char path[200];
    snprintf(path, sizeof(path), "/ws/seen/%s", key);
    sbx_http_request *r = NULL;
    TAP_OK(sbx_http_request_new(cl, "GET", path, &r, &e_));
    struct call c = {0};
    sem_init(&c.done, 0, 0);
    TAP_OK(sbx_http_request_send(r, sbx__context_uv(ctx), http_done, &c, &e_));
    wait_sem(&c.done);
    sem_destroy(&c.done);
    TAP_EQ_INT(c.status, 200);
    json_t *j = json_loads(c.body, 0, NULL);
    TAP_TRUE(j);
    free(c.body);
    return j;
}

/*
 * How many TCP sockets this process holds, failing on one that is not
 * close-on-exec. TCP only: libcurl 7.88 gives each multi handle a wakeup
 * socketpair made without SOCK_CLOEXEC, which no option changes.
 */
static int tcp_sockets_all_cloexec(void)
{
    DIR *d = opendir("/proc/self/fd");
    TAP_TRUE(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char link[300], target[64];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
        ssize_t k = readlink(link, target, sizeof(target) - 1);
        if (k <= 0)
            continue;
        target[k] = 0;
        if (strncmp(target, "socket:", 7) != 0)
            continue;
        int fd = (int)strtol(de->d_name, NULL, 10), domain = 0;
        socklen_t dl = sizeof(domain);
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) < 0 ||
            (domain != AF_INET && domain != AF_INET6))
            continue;
        if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC))
            TAP_FAIL("socket fd %d (%s) is not close-on-exec", fd, target);
        n++;
    }
    closedir(d);
    return n;
}

/* --- the tests ------------------------------------------------------------- */

/* Text, empty and 1 MiB binary messages go to the echo server and come back whole. */
static void echo_round_trip(sbx_http_client *cl)
{
    struct conn c;
    ws_make(&c, cl, "/ws/echo");
    /* Sent before the open: queued, and out once the handshake is done. */
    ws_go(&c);
    TAP_EQ_INT(ws_send(&c, SBX_WS_TEXT, "early", 5), 0);
    wait_open(&c);
    TAP_TRUE(c.queued_at_open > 0);
    /* The connection's socket (no other is open here: no HTTP request was made). */
    TAP_TRUE(tcp_sockets_all_cloexec() >= 1);
    TAP_EQ_STR(wait_msg(&c, 0)->data, "early");
    const char *text = "h\xC3\xA9llo, w\xC3\xB6rld \xE2\x82\xAC";
    TAP_EQ_INT(ws_send(&c, SBX_WS_TEXT, text, strlen(text)), 0);
    TAP_EQ_INT(ws_send(&c, SBX_WS_BINARY, "", 0), 0);
    size_t n = 1 << 20;
    unsigned char *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (unsigned char)(i * 7 + (i >> 9));
    TAP_EQ_INT(ws_send(&c, SBX_WS_BINARY, big, n), 0);
    struct msg *m = wait_msg(&c, 1);
    TAP_EQ_INT(m->op, SBX_WS_TEXT);
    TAP_EQ_STR(m->data, text);
    m = wait_msg(&c, 2);
    TAP_EQ_INT(m->op, SBX_WS_BINARY);
    TAP_EQ_INT(m->len, 0);
    m = wait_msg(&c, 3);
    TAP_EQ_INT(m->op, SBX_WS_BINARY);
    TAP_EQ_INT(m->len, n);
    char want[65], got[65];
    sha256_hex(big, n, want);
    sha256_hex(m->data, m->len, got);
    TAP_EQ_STR(got, want);
    free(big);
    TAP_EQ_INT(ws_close(&c, SBX_WS_NORMAL, "done"), 0);
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_OK);
    TAP_EQ_INT(c.status, SBX_WS_NORMAL);
    TAP_TRUE(c.drains >= 1);
    TAP_EQ_INT(c.opens, 1);
    conn_free(&c);
}

static void test_echo(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    echo_round_trip(cl);
    disconnect_and_stop(cl);
}

static void test_many_messages_in_order(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    int n = tap_bulk(2000);
    /* The client's to the echo server and back ... */
    struct conn a;
    ws_make(&a, cl, "/ws/echo");
    ws_go(&a);
    wait_open(&a);
    for (int i = 0; i < n; i++) {
        char s[32];
        int k = snprintf(s, sizeof(s), "m%d", i);
        TAP_EQ_INT(ws_send(&a, SBX_WS_TEXT, s, (size_t)k), 0);
    }
    for (int i = 0; i < n; i++) {
        char s[32];
        snprintf(s, sizeof(s), "m%d", i);
        TAP_EQ_STR(wait_msg(&a, (size_t)i)->data, s);
    }
    TAP_EQ_INT(ws_close(&a, 0, NULL), 0);
    wait_closed(&a);
    TAP_EQ_INT(a.code, SBX_OK);
    conn_free(&a);
    /* ... and the server's, then its close code and reason. */
    struct conn b;
    char path[100];
    snprintf(path, sizeof(path), "/ws/send?n=%d&code=4001&reason=bye%%20now", n);
    ws_make(&b, cl, path);
    ws_go(&b);
    wait_closed(&b);
    TAP_EQ_INT(b.code, SBX_OK);
    TAP_NULL(b.err);
    TAP_EQ_INT(b.status, 4001);
    TAP_EQ_STR(b.reason, "bye now");
    TAP_EQ_INT(b.n_msgs, n);
    for (int i = 0; i < n; i++) {
        char s[32];
        snprintf(s, sizeof(s), "%d", i);
        TAP_EQ_STR(b.msgs[i].data, s);
    }
    conn_free(&b);
    /* Binary ones, 100 KiB each. */
    struct conn d;
    ws_make(&d, cl, "/ws/send?n=20&size=102400");
    ws_go(&d);
    wait_closed(&d);
    TAP_EQ_INT(d.code, SBX_OK);
    TAP_EQ_INT(d.status, SBX_WS_NORMAL);
    TAP_EQ_INT(d.n_msgs, 20);
    for (size_t i = 0; i < 20; i++) {
        TAP_EQ_INT(d.msgs[i].op, SBX_WS_BINARY);
        TAP_EQ_INT(d.msgs[i].len, 102400);
        TAP_EQ_INT((unsigned char)d.msgs[i].data[102399], i);
    }
    conn_free(&d);
    disconnect_and_stop(cl);
}

static void test_client_close_handshake(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    struct conn c;
    ws_make(&c, cl, "/ws/echo?key=c1");
    ws_go(&c);
    wait_open(&c);
    /* Closing: no more sends, no second close. */
    struct task t = {.c = &c, .what = T_CLOSE_MISUSE, .status = 4002, .reason = "finished here"};
    TAP_EQ_INT(on_loop(&t), 0);
    free(t.err);
    TAP_EQ_INT(t.rc_send_after, SBX_ESTATE);
    TAP_EQ_INT(t.rc_close_after, SBX_ESTATE);
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_OK);
    TAP_EQ_INT(c.status, SBX_WS_NORMAL); /* aiohttp answers with 1000 */
    json_t *j = seen(cl, "c1");
    TAP_EQ_INT(json_integer_value(json_object_get(j, "close")), 4002);
    TAP_EQ_STR(json_string_value(json_object_get(j, "reason")), "finished here");
    json_decref(j);
    conn_free(&c);
    /* A server that never answers the close: the close timeout ends it. */
    struct conn d;
    ws_make(&d, cl, "/ws/raw?kind=no_close&key=nc&wait=30");
    sbx_ws_set_close_timeout(d.ws, 0.3);
    ws_go(&d);
    wait_open(&d);
    TAP_EQ_INT(ws_close(&d, SBX_WS_GOING_AWAY, "bye"), 0);
    wait_closed(&d);
    TAP_EQ_INT(d.code, SBX_ETIMEDOUT);
    TAP_EQ_INT(d.status, SBX_WS_ABNORMAL);
    TAP_CONTAINS(d.err, "testapi: WebSocket /ws/raw?kind=no_close&key=nc&wait=30: the closing "
                        "handshake did not end within 0.3 s");
    conn_free(&d);
    for (int i = 0; i < 100; i++) {
        /* The server keeps what it saw once the client has gone. */
        j = seen(cl, "nc");
        bool done = json_object_get(j, "close") != NULL;
        if (done) {
            TAP_EQ_INT(json_integer_value(json_object_get(j, "close")), 1001);
            TAP_EQ_STR(json_string_value(json_object_get(j, "reason")), "bye");
        }
        json_decref(j);
        if (done)
            break;
        usleep(50 * 1000);
    }
    disconnect_and_stop(cl);
}

static void test_ping_pong(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    struct conn c;
    ws_make(&c, cl, "/ws/ping?n=3");
    ws_go(&c);
    /* Three pings delivered (already answered), then the server's word that all pongs came. */
    for (size_t i = 0; i < 3; i++) {
        struct msg *m = wait_msg(&c, i);
        TAP_EQ_INT(m->op, SBX_WS_PING);
        char want[8];
        snprintf(want, sizeof(want), "p%zu", i);
        TAP_EQ_STR(m->data, want);
    }
    struct msg *m = wait_msg(&c, 3);
    TAP_EQ_INT(m->op, SBX_WS_TEXT);
    TAP_EQ_STR(m->data, "pongs p0,p1,p2");
    /* The client's own ping, and the server's pong. */
    TAP_EQ_INT(ws_send(&c, SBX_WS_PING, "are you there", 13), 0);
    m = wait_msg(&c, 4);
    TAP_EQ_INT(m->op, SBX_WS_PONG);
    TAP_EQ_STR(m->data, "are you there");
    char big[126] = {0};
    TAP_EQ_INT(ws_send(&c, SBX_WS_PING, big, sizeof(big)), SBX_EINVAL);
    TAP_EQ_INT(ws_close(&c, SBX_WS_NORMAL, NULL), 0);
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_OK);
    conn_free(&c);
    disconnect_and_stop(cl);
}

/* A raw route's misbehaviour: the close code the client failed with, and what the server saw. */
static void protocol_error(sbx_http_client *cl, const char *kind, int status, const char *msg)
{
    char path[100], key[40];
    snprintf(key, sizeof(key), "pe_%s", kind);
    snprintf(path, sizeof(path), "/ws/raw?kind=%s&key=%s", kind, key);
    struct conn c;
    ws_make(&c, cl, path);
    sbx_ws_set_max_message(c.ws, 1 << 20);
    ws_go(&c);
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_EPROTO);
    TAP_EQ_INT(c.status, status);
    TAP_CONTAINS(c.err, msg);
    TAP_CONTAINS(c.err, "testapi: WebSocket /ws/raw?kind=");
    conn_free(&c);
    /* The client said why in its close frame before it dropped the connection. */
    for (int i = 0; i < 100; i++) {
        json_t *j = seen(cl, key);
        json_t *code = json_object_get(j, "close");
        bool done = code != NULL;
        if (done)
            TAP_EQ_INT(json_integer_value(code), status);
        json_decref(j);
        if (done)
            return;
        usleep(50 * 1000);
    }
    TAP_FAIL("the server never saw the client's close frame for %s", kind);
}

static void test_protocol_errors(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    protocol_error(cl, "masked", SBX_WS_PROTOCOL_ERROR, "a masked frame: a server never masks");
    protocol_error(cl, "rsv", SBX_WS_PROTOCOL_ERROR, "reserved bits 0x40 set");
    protocol_error(cl, "bad_utf8", SBX_WS_INVALID_DATA, "a text message that is not UTF-8");
    protocol_error(cl, "too_big", SBX_WS_TOO_BIG, "a message of more than 1048576 bytes");
    disconnect_and_stop(cl);
}

static void test_fragments_and_a_slow_head(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    /* Fragments around a ping, joined; the ping answered; the server's close. */
    struct conn c;
    ws_make(&c, cl, "/ws/raw?kind=fragmented&key=fr");
    ws_go(&c);
    struct msg *m = wait_msg(&c, 0);
    TAP_EQ_INT(m->op, SBX_WS_PING);
    TAP_EQ_STR(m->data, "between");
    m = wait_msg(&c, 1);
    TAP_EQ_INT(m->op, SBX_WS_TEXT);
    TAP_EQ_STR(m->data, "Hello");
    m = wait_msg(&c, 2);
    TAP_EQ_INT(m->op, SBX_WS_BINARY);
    TAP_EQ_INT(m->len, 4);
    TAP_TRUE(!memcmp(m->data, "\x00\x01\x02\xff", 4));
    TAP_EQ_INT(ws_close(&c, SBX_WS_NORMAL, NULL), 0);
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_OK);
    TAP_EQ_INT(c.status, SBX_WS_NORMAL);
    TAP_EQ_STR(c.reason, "done");
    conn_free(&c);
    json_t *j = seen(cl, "fr");
    TAP_EQ_STR(json_string_value(json_array_get(json_object_get(j, "pongs"), 0)), "between");
    json_decref(j);
    /* The 101 a byte at a time. */
    struct conn d;
    ws_make(&d, cl, "/ws/raw?kind=trickle");
    ws_go(&d);
    TAP_EQ_STR(wait_msg(&d, 0)->data, "after a slow head");
    TAP_EQ_INT(ws_close(&d, SBX_WS_NORMAL, NULL), 0);
    wait_closed(&d);
    conn_free(&d);
    disconnect_and_stop(cl);
}

static void test_handshake_failures(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    /* No answer to the upgrade: the timeout. */
    struct conn a;
    ws_make(&a, cl, "/ws/raw?kind=silent");
    double t = scaled(0.5);
    sbx_ws_set_timeout(a.ws, t);
    ws_go(&a);
    wait_closed(&a);
    TAP_EQ_INT(a.code, SBX_ETIMEDOUT);
    TAP_EQ_INT(a.status, SBX_WS_ABNORMAL);
    TAP_EQ_INT(a.opens, 0);
    char want[100];
    snprintf(want, sizeof(want), "no open WebSocket within %g s (no answer to the upgrade request)",
             t);
    TAP_CONTAINS(a.err, want);
    conn_free(&a);
    /* A wrong Sec-WebSocket-Accept. */
    struct conn b;
    ws_make(&b, cl, "/ws/raw?kind=bad_accept");
    ws_go(&b);
    wait_closed(&b);
    TAP_EQ_INT(b.code, SBX_EPROTO);
    TAP_EQ_INT(b.opens, 0);
    TAP_CONTAINS(b.err, "the server's Sec-WebSocket-Accept '");
    TAP_CONTAINS(b.err, "not a WebSocket server, or a proxy in the way");
    conn_free(&b);
    /* A refusal: the client's status map gives the code. */
    struct conn d;
    ws_make(&d, cl, "/status/401");
    ws_go(&d);
    wait_closed(&d);
    TAP_EQ_INT(d.code, SBX_EAUTH);
    TAP_CONTAINS(d.err, "testapi: WebSocket /status/401: the server answered the WebSocket "
                        "upgrade with 401 Unauthorized, not 101");
    conn_free(&d);
    struct conn e;
    ws_make(&e, cl, "/nowhere");
    ws_go(&e);
    wait_closed(&e);
    TAP_EQ_INT(e.code, SBX_ENOENT);
    conn_free(&e);
    /* A plain HTTP answer (200) is no upgrade. */
    struct conn f;
    ws_make(&f, cl, "/echo");
    ws_go(&f);
    wait_closed(&f);
    TAP_EQ_INT(f.code, SBX_EPROTO);
    TAP_CONTAINS(f.err, "with 200 OK, not 101");
    conn_free(&f);
    /* A subprotocol the server does not have: aiohttp picks none, which is allowed. */
    struct conn g;
    ws_make(&g, cl, "/ws/echo?protocols=v1.pty");
    TAP_EQ_INT(sbx_ws_add_protocol(g.ws, "v9.pty"), 0);
    ws_go(&g);
    wait_open(&g);
    TAP_NULL(g.protocol);
    TAP_EQ_INT(ws_close(&g, SBX_WS_NORMAL, NULL), 0);
    wait_closed(&g);
    conn_free(&g);
    sbx_http_client_free(cl);
    /* Nobody listening. */
    api_server_stop_ctx(&srv, &ctx);
    TAP_OK(sbx_context_new(&ctx, &e_));
    cl = client(false);
    struct conn h;
    ws_make(&h, cl, "/ws/echo");
    ws_go(&h);
    wait_closed(&h);
    TAP_EQ_INT(h.code, SBX_EIO);
    TAP_CONTAINS(h.err, "testapi: WebSocket /ws/echo: connecting to http://127.0.0.1:");
    conn_free(&h);
    sbx_http_client_free(cl);
    sbx_context_free(ctx);
    ctx = NULL;
}

static void test_dropped_connection(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    struct conn c;
    ws_make(&c, cl, "/ws/raw?kind=drop");
    ws_go(&c);
    TAP_EQ_STR(wait_msg(&c, 0)->data, "last words");
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_EIO);
    TAP_EQ_INT(c.status, SBX_WS_ABNORMAL);
    TAP_CONTAINS(c.err, "the server closed the connection without a close frame");
    conn_free(&c);
    /* The server gone with connections open: each ends with SBX_EIO. */
    struct conn d;
    ws_make(&d, cl, "/ws/echo");
    ws_go(&d);
    wait_open(&d);
    kill(srv.pid, SIGKILL); /* killed, not stopped: the connection drops */
    waitpid(srv.pid, NULL, 0);
    srv.pid = 0;
    wait_closed(&d);
    TAP_EQ_INT(d.code, SBX_EIO);
    conn_free(&d);
    sbx_http_client_free(cl);
    sbx_context_free(ctx);
    ctx = NULL;
}

static void test_headers_protocols_and_unix_socket(void)
{
    api_server_start_ctx(&srv, false, &ctx);
    sbx_http_client *cl = NULL;
    TAP_OK(sbx_http_client_new("testapi", "http://localhost/", &cl, &e_));
    TAP_EQ_INT(sbx_http_client_set_unix_socket(cl, sock_path), 0);
    TAP_EQ_INT(sbx_http_client_set_header(cl, "Authorization", "Bearer client"), 0);
    TAP_EQ_INT(sbx_http_client_set_header(cl, "X-Both", "client"), 0);
    TAP_EQ_INT(sbx_http_client_set_header(cl, "Upgrade", "h2c"), 0); /* never sent */
    struct conn c;
    ws_make(&c, cl, "/ws/echo?info=1&protocols=v1.pty,chat");
    TAP_EQ_INT(sbx_ws_set_header(c.ws, "X-Both", "socket"), 0);
    TAP_EQ_INT(sbx_ws_add_protocol(c.ws, "v2.pty"), 0);
    TAP_EQ_INT(sbx_ws_add_protocol(c.ws, "v1.pty"), 0);
    ws_go(&c);
    wait_open(&c);
    TAP_EQ_STR(c.protocol, "v1.pty");
    json_t *j = json_loads(wait_msg(&c, 0)->data, 0, NULL);
    TAP_TRUE(j);
    TAP_EQ_STR(json_string_value(json_object_get(j, "path")), "/ws/echo");
    TAP_EQ_STR(json_string_value(json_object_get(j, "protocol")), "v1.pty");
    json_t *h = json_object_get(j, "headers");
    TAP_EQ_STR(json_string_value(json_object_get(h, "Host")), "localhost");
    TAP_EQ_STR(json_string_value(json_object_get(h, "Authorization")), "Bearer client");
    TAP_EQ_STR(json_string_value(json_object_get(h, "X-Both")), "socket");
    TAP_EQ_STR(json_string_value(json_object_get(h, "Upgrade")), "websocket");
    TAP_EQ_STR(json_string_value(json_object_get(h, "Sec-WebSocket-Protocol")), "v2.pty, v1.pty");
    TAP_EQ_STR(json_string_value(json_object_get(h, "Sec-WebSocket-Version")), "13");
    TAP_EQ_INT(strlen(json_string_value(json_object_get(h, "Sec-WebSocket-Key"))), 24);
    json_decref(j);
    TAP_EQ_INT(ws_send(&c, SBX_WS_TEXT, "over the socket", 15), 0);
    TAP_EQ_STR(wait_msg(&c, 1)->data, "over the socket");
    TAP_EQ_INT(ws_close(&c, SBX_WS_NORMAL, NULL), 0);
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_OK);
    conn_free(&c);
    disconnect_and_stop(cl);
}

static void test_tls(void)
{
    sbx_http_client *cl = serve_and_connect(true);
    TAP_EQ_INT(sbx_http_client_set_tls(cl, ca_path, NULL, NULL), 0);
    echo_round_trip(cl);
    /* Many messages through TLS: TLS holds decrypted bytes a poll does not see. */
    struct conn d;
    ws_make(&d, cl, "/ws/send?n=500&size=3000");
    ws_go(&d);
    wait_closed(&d);
    TAP_EQ_INT(d.code, SBX_OK);
    TAP_EQ_INT(d.n_msgs, 500);
    conn_free(&d);
    sbx_http_client_free(cl);
    /* Without the CA the certificate is refused. */
    cl = client(true);
    struct conn b;
    ws_make(&b, cl, "/ws/echo");
    /* libcurl reads the system's whole CA bundle first: slow under memcheck. */
    sbx_ws_set_timeout(b.ws, 200);
    ws_go(&b);
    wait_closed(&b);
    TAP_EQ_INT(b.code, SBX_EIO);
    TAP_CONTAINS(b.err, "certificate");
    conn_free(&b);
    disconnect_and_stop(cl);
}

static void test_back_pressure_and_pause(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    /* A server that reads nothing for a while: the queue fills and refuses, then drains. */
    struct conn c;
    ws_make(&c, cl, "/ws/sink?delay=1");
    sbx_ws_set_max_queue(c.ws, 1 << 20);
    ws_go(&c);
    wait_open(&c);
    size_t chunk = 64 << 10;
    char *buf = calloc(1, chunk);
    size_t sent = 0, msgs = 0;
    int rc = 0;
    for (int i = 0; i < 10000 && rc == 0; i++) {
        rc = ws_send(&c, SBX_WS_BINARY, buf, chunk);
        if (rc == 0) {
            sent += chunk;
            msgs++;
        }
    }
    TAP_EQ_INT(rc, SBX_ESTATE);
    struct task q = {.c = &c, .what = T_QUEUED};
    on_loop(&q);
    TAP_TRUE(q.queued > (1 << 20) - chunk - 16);
    /* One larger than the bound can never go. */
    char *huge = calloc(1, (2 << 20));
    TAP_EQ_INT(ws_send(&c, SBX_WS_BINARY, huge, 2 << 20), SBX_EINVAL);
    free(huge);
    /* The drain callback says when to go on. */
    for (;;) {
        pthread_mutex_lock(&c.lock);
        int drains = c.drains;
        pthread_mutex_unlock(&c.lock);
        if (drains)
            break;
        usleep(20 * 1000);
    }
    TAP_EQ_INT(ws_send(&c, SBX_WS_TEXT, "end", 3), 0);
    char want[64];
    snprintf(want, sizeof(want), "got %zu %zu", sent, msgs);
    TAP_EQ_STR(wait_msg(&c, 0)->data, want);
    TAP_EQ_INT(ws_close(&c, SBX_WS_NORMAL, NULL), 0);
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_OK);
    conn_free(&c);
    free(buf);
    /* Paused from the open: nothing arrives until resumed, then everything in order. */
    struct conn d;
    ws_make(&d, cl, "/ws/send?n=50");
    d.pause_at_open = true;
    ws_go(&d);
    wait_open(&d);
    usleep(300 * 1000);
    pthread_mutex_lock(&d.lock);
    TAP_EQ_INT(d.n_msgs, 0);
    TAP_TRUE(!d.ended);
    pthread_mutex_unlock(&d.lock);
    ws_do(&d, T_RESUME);
    wait_closed(&d);
    TAP_EQ_INT(d.code, SBX_OK);
    TAP_EQ_INT(d.n_msgs, 50);
    TAP_EQ_STR(d.msgs[49].data, "49");
    conn_free(&d);
    /* Paused before the connect: the handshake completes, the messages wait. */
    struct conn g;
    ws_make(&g, cl, "/ws/send?n=5");
    sbx_ws_pause(g.ws);
    ws_go(&g);
    wait_open(&g);
    usleep(300 * 1000);
    pthread_mutex_lock(&g.lock);
    TAP_EQ_INT(g.n_msgs, 0);
    pthread_mutex_unlock(&g.lock);
    ws_do(&g, T_RESUME);
    wait_closed(&g);
    TAP_EQ_INT(g.code, SBX_OK);
    TAP_EQ_INT(g.n_msgs, 5);
    conn_free(&g);
    disconnect_and_stop(cl);
}

static void connect_task(void *data)
{
    struct conn *c = data;
    /* From the loop itself: nothing runs inside the call. */
    TAP_OK(sbx_ws_connect(c->ws, sbx__context_uv(ctx), on_close, c, &e_));
    TAP_TRUE(!c->ended);
    TAP_EQ_INT(c->opens, 0);
}

static void test_cancel_and_context_end(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    /* Cancelled while waiting for the 101. */
    struct conn a;
    ws_make(&a, cl, "/ws/raw?kind=silent");
    ws_go(&a);
    usleep(200 * 1000);
    ws_do(&a, T_CANCEL);
    wait_closed(&a);
    TAP_EQ_INT(a.code, SBX_ECANCELED);
    TAP_EQ_INT(a.status, SBX_WS_ABNORMAL);
    TAP_CONTAINS(a.err, "cancelled");
    TAP_EQ_INT(a.opens, 0);
    conn_free(&a);
    /* Cancelled from its open callback, with a send made there: the end, no message. */
    struct conn b;
    ws_make(&b, cl, "/ws/echo");
    b.send_in_open = true;
    b.cancel_at_open = true;
    TAP_EQ_INT(sbx__context_post(ctx, connect_task, &b), 0);
    wait_closed(&b);
    TAP_EQ_INT(b.code, SBX_ECANCELED);
    TAP_EQ_INT(b.opens, 1);
    TAP_EQ_INT(b.n_msgs, 0);
    conn_free(&b);
    /* A close before the open cancels. */
    struct conn d;
    ws_make(&d, cl, "/ws/raw?kind=silent");
    ws_go(&d);
    usleep(100 * 1000);
    TAP_EQ_INT(ws_close(&d, SBX_WS_NORMAL, NULL), 0);
    wait_closed(&d);
    TAP_EQ_INT(d.code, SBX_ECANCELED);
    conn_free(&d);
    /* Cancelled while open, and while sending 1 MiB. */
    struct conn e;
    ws_make(&e, cl, "/ws/sink?delay=30");
    ws_go(&e);
    wait_open(&e);
    char *big = calloc(1, 1 << 20);
    for (int i = 0; i < 8; i++)
        TAP_EQ_INT(ws_send(&e, SBX_WS_BINARY, big, 1 << 20), 0);
    free(big);
    ws_do(&e, T_CANCEL);
    wait_closed(&e);
    TAP_EQ_INT(e.code, SBX_ECANCELED);
    conn_free(&e);
    /* The context ends with connections open and one connecting: each hears so. */
    struct conn f, g;
    ws_make(&f, cl, "/ws/echo");
    ws_go(&f);
    wait_open(&f);
    ws_make(&g, cl, "/ws/raw?kind=silent");
    ws_go(&g);
    usleep(100 * 1000);
    sbx_context_free(ctx);
    ctx = NULL;
    wait_closed(&f);
    wait_closed(&g);
    TAP_EQ_INT(f.code, SBX_ECANCELED);
    TAP_CONTAINS(f.err, "testapi: WebSocket /ws/echo: the context ended first");
    TAP_EQ_INT(g.code, SBX_ECANCELED);
    TAP_CONTAINS(g.err, "the context ended first");
    conn_free(&f);
    conn_free(&g);
    sbx_http_client_free(cl);
    api_server_stop(&srv);
}

static void test_bad_input(void)
{
    sbx_http_client *cl = serve_and_connect(false);
    sbx_ws *ws = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_ws_new(cl, "relative", &ws, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "sbx_http_escape");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_ws_new(cl, "/a b", &ws, NULL), SBX_EINVAL);
    TAP_EQ_INT(sbx_ws_new(cl, "/a#frag", &ws, NULL), SBX_EINVAL);
    TAP_OK(sbx_ws_new(cl, "/ws/echo", &ws, &e_));
    TAP_EQ_INT(sbx_ws_set_header(ws, "Sec-WebSocket-Key", "mine"), SBX_EINVAL);
    TAP_EQ_INT(sbx_ws_set_header(ws, "Connection", "close"), SBX_EINVAL);
    TAP_EQ_INT(sbx_ws_set_header(ws, "X-Evil", "a\r\nX-Injected: 1"), SBX_EINVAL);
    TAP_EQ_INT(sbx_ws_add_protocol(ws, "two words"), SBX_EINVAL);
    TAP_EQ_INT(sbx_ws_add_protocol(ws, "a,b"), SBX_EINVAL);
    /* Not connected: nothing to send or close. */
    TAP_EQ_INT(sbx_ws_send(ws, SBX_WS_TEXT, "x", 1, NULL), SBX_ESTATE);
    TAP_EQ_INT(sbx_ws_close(ws, 1000, NULL, NULL), SBX_ESTATE);
    TAP_EQ_INT(sbx_ws_connect(ws, NULL, on_close, NULL, NULL), SBX_EINVAL);
    sbx_ws_free(ws);
    /* On an open connection: bad opcodes, text that is not UTF-8, bad close codes. */
    struct conn c;
    ws_make(&c, cl, "/ws/echo");
    ws_go(&c);
    wait_open(&c);
    struct task again = {.c = &c, .what = T_CONNECT};
    TAP_EQ_INT(on_loop(&again), SBX_EINVAL);
    free(again.err);
    TAP_EQ_INT(ws_send(&c, SBX_WS_TEXT, "\xC3\x28", 2), SBX_EINVAL);
    TAP_EQ_INT(ws_send(&c, SBX_WS_CLOSE, "", 0), SBX_EINVAL);
    TAP_EQ_INT(ws_send(&c, 3, "x", 1), SBX_EINVAL);
    TAP_EQ_INT(ws_close(&c, 1005, NULL), SBX_EINVAL);
    TAP_EQ_INT(ws_close(&c, 999, NULL), SBX_EINVAL);
    TAP_EQ_INT(ws_close(&c, 0, "a reason without a code"), SBX_EINVAL);
    char long_reason[200];
    memset(long_reason, 'r', sizeof(long_reason) - 1);
    long_reason[sizeof(long_reason) - 1] = 0;
    TAP_EQ_INT(ws_close(&c, 1000, long_reason), SBX_EINVAL);
    /* Still open after all that. */
    TAP_EQ_INT(ws_send(&c, SBX_WS_TEXT, "still", 5), 0);
    TAP_EQ_STR(wait_msg(&c, 0)->data, "still");
    TAP_EQ_INT(ws_close(&c, 3000, "\xC3\xA9"), 0);
    wait_closed(&c);
    TAP_EQ_INT(c.code, SBX_OK);
    conn_free(&c);
    disconnect_and_stop(cl);
}

TAP_MAIN(TAP(test_echo), TAP(test_many_messages_in_order), TAP(test_client_close_handshake),
         TAP(test_ping_pong), TAP(test_protocol_errors), TAP(test_fragments_and_a_slow_head),
         TAP(test_handshake_failures), TAP(test_dropped_connection),
         TAP(test_headers_protocols_and_unix_socket), TAP(test_tls),
         TAP(test_back_pressure_and_pause), TAP(test_cancel_and_context_end), TAP(test_bad_input))
