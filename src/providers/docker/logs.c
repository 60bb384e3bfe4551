/*
 * [svc-logs] The docker provider's service log (log_stream).
 *
 * The agent is the container's init and runs the box's entrypoint as its
 * service; their stdout and stderr are the container's, which the engine
 * keeps (its log driver, its rotation, maybe on another machine). So the log
 * is read where it is: GET /containers/ID/logs with timestamps, in the
 * engine's multiplexed format (8-byte frame headers, one log message a
 * frame), on a thread of its own, and written to the core's socket as the
 * records the linux shim writes (src/core/logs.h). This thread writes every
 * record header; the box's bytes are only ever payload, so a box cannot
 * forge a record, and the engine's time of each message (the prefix
 * `timestamps=1` adds) becomes the record's time.
 *
 * A follow ends when the engine ends the stream: the container stopped or
 * went. When it stopped, an event record "agent exited N" (or "agent killed
 * S") follows, from the engine's inspect: the box's agent, its PID 1, ended.
 * The service's own end is not an event here (the agent's line
 * "sbx-agent: entrypoint exited with status N" on stderr says it, but a
 * line of the container's output is the box's to forge).
 */
#include "core/internal.h"
#include "core/logs.h"
#include "providers/docker/docker.h"
#include "providers/docker/engine.h"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

/* A frame's bytes kept until it ends; a longer one (the engine splits at 16 KiB) goes in pieces. */
#define FRAME_MAX 65536

struct dk_logs {
    struct docker *d;
    sbx_op *op;
    char *cid, *query;
    int fd;
    bool follow;
    bool bad;  /* the body was not the multiplexed format */
    bool gone; /* a send failed: the reader closed its end */
    struct sbx_dk_demux dx;
    unsigned char frame[FRAME_MAX];
    size_t flen;
    bool timed;   /* the current frame's time is known (its prefix was read) */
    double ftime; /* unix seconds */
};

long sbx__dk_log_time(const char *p, size_t n, double *t)
{
    /* RFC 3339 with nanoseconds, as the engine writes it: 2026-12-02T13:20:00.123456789Z */
    char buf[48];
    size_t k = 0;
    while (k < n && k < sizeof(buf) - 1 && p[k] != ' ')
        k++;
    if (k >= n || p[k] != ' ' || k < 20)
        return -1;
    memcpy(buf, p, k);
    buf[k] = 0;
    struct tm tm = {0};
    int used = 0;
    if (sscanf(buf, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &used) != 6 ||
        used != 19 || tm.tm_year < 1970 || tm.tm_year > 9999 || tm.tm_mon < 1 || tm.tm_mon > 12 ||
        tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    const char *q = buf + 19;
    double frac = 0, scale = 0.1;
    if (*q == '.') {
        q++;
        if (*q < '0' || *q > '9')
            return -1;
        for (int digits = 0; *q >= '0' && *q <= '9'; q++, digits++) {
            if (digits < 9) {
                frac += (*q - '0') * scale;
                scale /= 10;
            }
        }
    }
    long off = 0;
    if (*q == 'Z')
        q++;
    else if ((*q == '+' || *q == '-') && q[1] >= '0' && q[1] <= '9' && q[2] >= '0' && q[2] <= '9' &&
             q[3] == ':' && q[4] >= '0' && q[4] <= '9' && q[5] >= '0' && q[5] <= '9') {
        off = ((q[1] - '0') * 10 + (q[2] - '0')) * 3600 + ((q[4] - '0') * 10 + (q[5] - '0')) * 60;
        if (*q == '-')
            off = -off;
        q += 6;
    } else
        return -1;
    if (*q)
        return -1;
    time_t secs = timegm(&tm);
    if (secs == (time_t)-1)
        return -1;
    *t = (double)(secs - off) + frac;
    return (long)k + 1;
}

static int send_all(int fd, const struct iovec *iov, int n)
{
    struct iovec v[2];
    memcpy(v, iov, sizeof(*iov) * (size_t)n);
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)n};
    for (;;) {
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        /* Advance past what went. */
        while (m.msg_iovlen && (size_t)w >= m.msg_iov[0].iov_len) {
            w -= (ssize_t)m.msg_iov[0].iov_len;
            m.msg_iov++;
            m.msg_iovlen--;
        }
        if (!m.msg_iovlen)
            return 0;
        m.msg_iov[0].iov_base = (char *)m.msg_iov[0].iov_base + w;
        m.msg_iov[0].iov_len -= (size_t)w;
    }
}

/* One record into the core's socket; -1 when the reader is gone. */
static int put_record(int fd, int stream, double t, const void *p, size_t n)
{
    unsigned char hdr[SBX_LOG_HEADER];
    sbx__log_header(hdr, stream, (uint32_t)n, t > 0 ? (uint64_t)(t * 1e9) : 0);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)p, n}};
    return send_all(fd, iov, n ? 2 : 1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* What of the frame is kept goes out as a record (its time read from its start first). */
static int flush_frame(struct dk_logs *l, int stream)
{
    size_t skip = 0;
    if (!l->timed) {
        double t = 0;
        long k = sbx__dk_log_time((const char *)l->frame, l->flen, &t);
        /* No readable time (an engine without timestamps?): the bytes stay whole, timed now. */
        l->ftime = k > 0 ? t : now_s();
        skip = k > 0 ? (size_t)k : 0;
        l->timed = true;
    }
    int rc = 0;
    if (l->flen > skip && (rc = put_record(l->fd, stream == 2 ? SBX_LOG_STDERR : SBX_LOG_STDOUT,
                                           l->ftime, l->frame + skip, l->flen - skip)) < 0)
        l->gone = true;
    l->flen = 0;
    return rc;
}

/* A piece of a frame's payload (the demultiplexer's output). */
static int on_piece(int stream, const uint8_t *p, size_t n, void *data)
{
    struct dk_logs *l = data;
    /* Called before the demultiplexer counts it: the piece ends the frame if it is all that is
     * left. */
    bool ends = l->dx.left == n;
    while (n) {
        size_t take = FRAME_MAX - l->flen < n ? FRAME_MAX - l->flen : n;
        memcpy(l->frame + l->flen, p, take);
        l->flen += take;
        p += take;
        n -= take;
        if (l->flen == FRAME_MAX && flush_frame(l, stream) < 0)
            return -1;
    }
    if (ends) {
        if (flush_frame(l, stream) < 0)
            return -1;
        l->timed = false;
    }
    return 0;
}

/* Asked about once a second: the reader closed its end (it stopped, or failed). */
static int reader_gone(void *data)
{
    struct dk_logs *l = data;
    struct pollfd pf = {.fd = l->fd, .events = 0};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR));
}

static int on_body(const char *p, size_t n, void *data)
{
    struct dk_logs *l = data;
    if (l->bad)
        return -1;
    /* -1 is the reader gone (a send failed) or a frame header that is not one (the engine's). */
    if (sbx__dk_demux_feed(&l->dx, (const uint8_t *)p, n, on_piece, l) < 0) {
        if (!l->gone)
            l->bad = true;
        return -1;
    }
    return 0;
}

/* After a follow: the container's end, as the engine saw it, when it stopped (not when it went). */
static void put_end_event(struct dk_logs *l)
{
    json_t *info = NULL;
    sbx_error *e = NULL;
    if (sbx__dk_inspect(l->d->engine, l->cid, &info, &e) == SBX_OK) {
        json_t *state = json_object_get(info, "State");
        json_t *code = json_object_get(state, "ExitCode");
        if (json_is_false(json_object_get(state, "Running")) && json_is_integer(code)) {
            long long c = json_integer_value(code);
            char ev[64];
            /* The engine's 128 + N for a process ended by signal N. */
            int k = c > 128 && c < 128 + 65 ? snprintf(ev, sizeof(ev), "agent killed %lld", c - 128)
                                            : snprintf(ev, sizeof(ev), "agent exited %lld", c);
            (void)put_record(l->fd, SBX_LOG_EVENT, now_s(), ev, (size_t)k);
        }
    }
    json_decref(info);
    sbx_error_free(e);
}

static void logs_free(struct dk_logs *l)
{
    if (l) {
        free(l->cid);
        free(l->query);
        free(l);
    }
}

static void *logs_thread(void *arg)
{
    struct dk_logs *l = arg;
    long st = 0;
    json_t *resp = NULL;
    sbx_error *e = NULL;
    int rc = sbx__dk_request_each(l->d->engine, l->query, on_body, reader_gone, l, &st, &resp, &e);
    if (rc == SBX_OK && st == 404)
        rc = sbx__dk_error(&e, SBX_ENOENT, st, resp,
                           "reading the logs of container %.12s: it is gone", l->cid);
    else if (rc == SBX_OK && (st < 200 || st >= 300))
        rc = sbx__dk_error(&e, SBX_EPROVIDER, st, resp, "reading the logs of container %.12s",
                           l->cid);
    else if (rc == SBX_OK) {
        if (l->flen)
            (void)flush_frame(l, l->dx.stream); /* a stream cut inside a frame: what came */
        if (l->follow)
            put_end_event(l);
    } else if (rc == SBX_ECANCELED && l->bad) {
        rc = sbx__set_error(&e, SBX_EPROVIDER,
                            "docker engine at %s: the logs of container %.12s are not in the "
                            "multiplexed format (a container with a TTY?)",
                            sbx__dk_engine_host(l->d->engine), l->cid);
    } else if (rc == SBX_ECANCELED) {
        rc = SBX_OK; /* the reader stopped, as it may */
        sbx_error_free(e);
        e = NULL;
    }
    json_decref(resp);
    close(l->fd);
    sbx_op *op = l->op;
    logs_free(l);
    /* Last: the completion may be the provider's last use. */
    sbx_op_complete(op, rc, rc < 0 ? e : NULL, NULL);
    if (rc >= 0)
        sbx_error_free(e);
    return NULL;
}

void sbx__dk_log_stream(sbx_op *op, struct docker *d, struct dbox *b, int fd, double since,
                        long long tail, unsigned flags)
{
    struct dk_logs *l = calloc(1, sizeof(*l));
    char tl[32] = "all", sn[32] = "0";
    if (tail >= 0)
        snprintf(tl, sizeof(tl), "%lld", tail);
    /* Whole seconds: the engine reads a fraction as nanoseconds; the core filters the rest. */
    if (since > 0 && since < 1e12)
        snprintf(sn, sizeof(sn), "%lld", (long long)since);
    bool follow = flags & SBX_LOGS_FOLLOW;
    if (l) {
        l->cid = strdup(b->container);
        l->query = sbx__printf("/containers/%s/logs?stdout=1&stderr=1&timestamps=1&follow=%d"
                               "&since=%s&tail=%s",
                               b->container, follow ? 1 : 0, sn, tl);
    }
    if (!l || !l->cid || !l->query) {
        logs_free(l);
        close(fd);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    l->d = d;
    l->op = op;
    l->fd = fd;
    l->follow = follow;
    sbx__dk_demux_init(&l->dx);
    /* A thread of its own: a follow may last as long as the box, which a pool worker must not. */
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &a, logs_thread, l);
    pthread_attr_destroy(&a);
    if (e != 0) {
        logs_free(l);
        close(fd);
        sbx_op_complete(op, SBX_EIO,
                        sbx_error_new(SBX_EIO, "cannot start a thread to read the logs"), NULL);
    }
}
