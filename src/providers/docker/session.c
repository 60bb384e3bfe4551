/*
 * The remote path: the agent protocol carried over one Engine-API exec
 * session (`/.sbx-agent serve --stdio` run by POST /containers/ID/exec and
 * POST /exec/ID/start, upgraded to a raw stream). The engine sends the
 * session's output in its multiplexed format (8-byte headers: stream, 0, 0,
 * 0, big-endian length); we send stdin raw. A thread per session copies
 * between the engine's connection (through libcurl, so TLS works) and one
 * end of a socket pair whose other end the kit reads as the agent's stream.
 */
#include "providers/docker/engine.h"

#include <curl/curl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

/* --- the multiplexed stream ------------------------------------------------ */

void sbx__dk_demux_init(struct sbx_dk_demux *d)
{
    memset(d, 0, sizeof(*d));
}

int sbx__dk_demux_feed(struct sbx_dk_demux *d, const uint8_t *in, size_t n, sbx_dk_out_fn out,
                       void *data)
{
    while (n) {
        if (d->left == 0) {
            /* A header, maybe split across reads. */
            size_t take = 8 - d->have < n ? 8 - d->have : n;
            memcpy(d->hdr + d->have, in, take);
            d->have += take;
            in += take;
            n -= take;
            if (d->have < 8)
                return 0;
            d->have = 0;
            if (d->hdr[0] > 2 || d->hdr[1] || d->hdr[2] || d->hdr[3])
                return -1; /* not a stream header: nothing after it can be trusted */
            d->stream = d->hdr[0];
            d->left = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16 |
                      (uint32_t)d->hdr[6] << 8 | d->hdr[7];
            continue;
        }
        size_t take = d->left < n ? d->left : n;
        if (out && out(d->stream, in, take, data) < 0)
            return -1;
        d->left -= (uint32_t)take;
        in += take;
        n -= take;
    }
    return 0;
}

/* --- the session ------------------------------------------------------------ */

struct session {
    CURL *c;
    curl_socket_t sock;
    int pair; /* our end */
    struct sbx_dk_demux dx;
};

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int to_pair(int stream, const uint8_t *p, size_t n, void *data)
{
    struct session *s = data;
    if (stream == 2) {
        /* The agent's own stderr: its log lines, not protocol. */
        sbx_log(SBX_LOG_DEBUG, "docker exec session: %.*s", (int)(n > 500 ? 500 : n),
                (const char *)p);
        return 0;
    }
    return write_all(s->pair, p, n);
}

/* Sends all of p over the engine connection (waiting when it would block). */
static int send_all(struct session *s, const char *p, size_t n)
{
    return sbx__dk_conn_send(s->c, s->sock, p, n);
}

static void *pump(void *arg)
{
    struct session *s = arg;
    /* Bulk transfers come in the engine's frames of up to 32 KiB: take many at once. */
    enum { BUF = 1 << 20 };
    char *buf = malloc(BUF);
    for (; buf;) {
        struct pollfd pf[2] = {{.fd = s->pair, .events = POLLIN}, {.fd = s->sock, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[0].revents) {
            ssize_t r = read(s->pair, buf, BUF);
            if (r <= 0 || send_all(s, buf, (size_t)r) < 0)
                break;
        }
        if (pf[1].revents) {
            /* TLS may hold several records: read until curl says it has nothing. */
            int done = 0;
            for (;;) {
                size_t got = 0;
                CURLcode cc = curl_easy_recv(s->c, buf, BUF, &got);
                if (cc == CURLE_AGAIN)
                    break;
                if (cc != CURLE_OK || got == 0 ||
                    sbx__dk_demux_feed(&s->dx, (const uint8_t *)buf, got, to_pair, s) < 0) {
                    done = 1;
                    break;
                }
            }
            if (done)
                break;
        }
    }
    /* Either side ended: the kit sees the stream close, the engine ends the session. */
    free(buf);
    close(s->pair);
    curl_easy_cleanup(s->c);
    free(s);
    return NULL;
}

int sbx__dk_conn_send(void *curl, int sock, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        size_t sent = 0;
        CURLcode cc = curl_easy_send(curl, b, n, &sent);
        if (cc == CURLE_AGAIN) {
            struct pollfd pf = {.fd = sock, .events = POLLOUT};
            poll(&pf, 1, 1000);
            continue;
        }
        if (cc != CURLE_OK)
            return -1;
        b += sent;
        n -= sent;
    }
    return 0;
}

int sbx__dk_exec_attach(sbx_dk_engine *e, const char *exec_id, void **curl, int *sock_out,
                        char **early, size_t *early_len, sbx_error **err)
{
    const char *v;
    int rc = sbx__dk_engine_version(e, &v, err);
    if (rc < 0)
        return rc;
    CURL *c = curl_easy_init();
    if (!c)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory (curl)");
    /* Connect only (TLS included); the upgraded request is written by hand below. */
    if ((rc = sbx__dk_engine_setup(e, c, "/_ping")) < 0) {
        curl_easy_cleanup(c);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    curl_easy_setopt(c, CURLOPT_CONNECT_ONLY, 1L);
    CURLcode cc = curl_easy_perform(c);
    curl_socket_t sock = CURL_SOCKET_BAD;
    if (cc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_ACTIVESOCKET, &sock);
    if (cc != CURLE_OK || sock == CURL_SOCKET_BAD) {
        curl_easy_cleanup(c);
        return sbx__set_error(err, SBX_EPROVIDER, "cannot reach the docker engine at %s: %s",
                              sbx__dk_engine_host(e), curl_easy_strerror(cc));
    }
    const char *body = "{\"Detach\":false,\"Tty\":false}";
    char *req = sbx__printf("POST /v%s/exec/%s/start HTTP/1.1\r\nHost: docker\r\n"
                            "Content-Type: application/json\r\nConnection: Upgrade\r\n"
                            "Upgrade: tcp\r\nContent-Length: %zu\r\n\r\n%s",
                            v, exec_id, strlen(body), body);
    rc = req && sbx__dk_conn_send(c, sock, req, strlen(req)) == 0 ? SBX_OK : SBX_EPROVIDER;
    free(req);
    /* The answer's head, then the stream; bytes past the head are the stream's. */
    char head[4096];
    size_t hl = 0;
    char *end = NULL;
    head[0] = 0;
    while (rc == SBX_OK && !end) {
        size_t got = 0;
        cc = curl_easy_recv(c, head + hl, sizeof(head) - 1 - hl, &got);
        if (cc == CURLE_AGAIN) {
            struct pollfd pf = {.fd = sock, .events = POLLIN};
            if (poll(&pf, 1, 30000) <= 0)
                rc = SBX_ETIMEDOUT;
            continue;
        }
        if (cc != CURLE_OK || got == 0) {
            rc = SBX_EPROVIDER;
            break;
        }
        hl += got;
        head[hl] = 0;
        end = strstr(head, "\r\n\r\n");
        if (!end && hl >= sizeof(head) - 1)
            rc = SBX_EPROVIDER;
    }
    int status = 0;
    if (rc == SBX_OK && (sscanf(head, "HTTP/1.%*d %d", &status) != 1 ||
                         (status != 101 && status != 200)))
        rc = SBX_EPROVIDER;
    if (rc == SBX_OK) {
        size_t off = (size_t)(end + 4 - head);
        *early_len = hl - off;
        if (!(*early = malloc(*early_len + 1)))
            rc = SBX_ENOMEM;
        else
            memcpy(*early, head + off, *early_len);
    }
    if (rc < 0) {
        char *line = strndup(head, strcspn(head, "\r\n"));
        curl_easy_cleanup(c);
        rc = sbx__set_error(err, rc, "docker engine at %s: exec %.12s did not start%s%s",
                            sbx__dk_engine_host(e), exec_id, line && line[0] ? ": " : "",
                            line ? line : "");
        free(line);
        return rc;
    }
    *curl = c;
    *sock_out = (int)sock;
    return SBX_OK;
}

int sbx__dk_session_open(sbx_dk_engine *e, const char *exec_id, int *fd, sbx_error **err)
{
    int sv[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot make a socket pair");
    int rc = sbx__dk_session_open_on(e, exec_id, sv[1], err);
    if (rc < 0) {
        close(sv[0]);
        return rc;
    }
    *fd = sv[0];
    return SBX_OK;
}

int sbx__dk_session_open_on(sbx_dk_engine *e, const char *exec_id, int pair, sbx_error **err)
{
    void *c = NULL;
    int sock = -1;
    char *early = NULL;
    size_t early_len = 0;
    int rc = sbx__dk_exec_attach(e, exec_id, &c, &sock, &early, &early_len, err);
    if (rc < 0) {
        close(pair);
        return rc;
    }
    struct session *s = calloc(1, sizeof(*s));
    if (!s) {
        free(early);
        curl_easy_cleanup(c);
        close(pair);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    *s = (struct session){.c = c, .sock = sock, .pair = pair};
    sbx__dk_demux_init(&s->dx);
    rc = sbx__dk_demux_feed(&s->dx, (const uint8_t *)early, early_len, to_pair, s) < 0
             ? SBX_EPROVIDER
             : SBX_OK;
    free(early);
    pthread_t t;
    if (rc == SBX_OK && pthread_create(&t, NULL, pump, s) != 0)
        rc = SBX_EIO;
    if (rc < 0) {
        close(pair);
        curl_easy_cleanup(c);
        free(s);
        return sbx__set_error(err, rc, "docker engine at %s: exec session %.12s did not start",
                              sbx__dk_engine_host(e), exec_id);
    }
    pthread_detach(t);
    return SBX_OK;
}
