/*
 * [svc-logs] Reading a box's service log: sbx_sandbox_logs.
 *
 * The provider says where the log is (log_address); the files are read
 * here, in the caller's thread. A provider whose runtime keeps the log (a
 * container engine) writes it instead, in the same record format, into a
 * socket this reads as it comes (log_stream). They are treated as hostile input though the
 * shim writes them: a file must be a regular file the caller's uid owns that
 * no one else may write, every record is bounded (SBX_LOG_MAX_RECORD), and
 * reading stops at the first torn or malformed record.
 *
 * Records are split into entries at newlines: an entry is one line (with its
 * newline), or the piece of a line one read of the pipe held. `tail` counts
 * lines, as `docker logs --tail` does: the pieces of one line (a stream's
 * entries up to one that ends in a newline) count once; events (the
 * service's end) are not counted.
 */
#include "core/internal.h"
#include "core/logs.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

/* Past this much log in one read, the rest is not read (the files are bounded far below it). */
#define MAX_READ (1ull << 30)

/* One entry of the initial read, pointing into the buffer. */
struct entry {
    double t;
    int stream;
    size_t off, len;
    bool starts; /* the first piece of a line of its stream */
};

struct reader {
    const char *path, *old;
    double since;
    sbx_service_log_cb cb;
    void *user;
    bool stopped; /* the callback asked to stop */
    bool ended;   /* an event record: the service ended */
    /* The follow state: the file being read and its bytes not yet parsed. */
    int fd;
    unsigned char *pend;
    size_t plen, pcap;
};

/* Opens one log file: -1 with *missing when it is not there; refuses one it cannot trust. */
static int open_log(const char *path, bool *missing, sbx_error **err)
{
    *missing = false;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) {
            *missing = true;
            return -1;
        }
        return sbx__set_errno(err, SBX_EIO, errno, "cannot open the service log %s", path);
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 022)) {
        close(fd);
        return sbx__set_error(err, SBX_EPERM,
                              "the service log %s is not a regular file of uid %u that only it "
                              "may write: refused (was the box directory tampered with?)",
                              path, (unsigned)geteuid());
    }
    return fd;
}

/* Appends what `fd` holds from its offset to its end to r->pend. */
static int read_more(struct reader *r, int fd, size_t *got, sbx_error **err)
{
    *got = 0;
    for (;;) {
        if (r->pcap - r->plen < 65536) {
            if (r->pcap >= MAX_READ)
                return SBX_OK; /* no more: what is there is served */
            size_t cap = r->pcap ? r->pcap * 2 : 131072;
            unsigned char *p = realloc(r->pend, cap);
            if (!p)
                return sbx__set_error(err, SBX_ENOMEM, "out of memory reading the service log");
            r->pend = p;
            r->pcap = cap;
        }
        ssize_t n = read(fd, r->pend + r->plen, r->pcap - r->plen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "cannot read the service log %s", r->path);
        if (n == 0)
            return SBX_OK;
        r->plen += (size_t)n;
        *got += (size_t)n;
    }
}

/* Calls back for one piece; false once the callback asked to stop. */
static bool emit(struct reader *r, double t, int stream, const unsigned char *p, size_t n)
{
    if (r->stopped)
        return false;
    if (t < r->since)
        return true;
    if (r->cb(t, stream, (const char *)p, n, r->user) != 0)
        r->stopped = true;
    return !r->stopped;
}

/*
 * Parses r->pend: each whole record is handed to `fn` line by line (or
 * collected, for the first read). Keeps a trailing partial record. Returns
 * SBX_EIO on a malformed record.
 */
typedef bool (*piece_fn)(struct reader *r, double t, int stream, const unsigned char *p, size_t n,
                         void *ctx);

static int parse_pending(struct reader *r, piece_fn fn, void *ctx, sbx_error **err)
{
    size_t off = 0;
    int rc = SBX_OK;
    while (off < r->plen) {
        sbx_log_record rec;
        size_t used = 0;
        sbx_log_result res = sbx__log_parse(r->pend + off, r->plen - off, &rec, &used);
        if (res == SBX_LOG_MORE)
            break;
        if (res == SBX_LOG_BAD) {
            rc = sbx__set_error(err, SBX_EIO,
                                "the service log %s has a malformed record: reading stopped "
                                "there",
                                r->path);
            r->plen = off; /* nothing after it is trusted */
            break;
        }
        double t = (double)rec.time_ns / 1e9;
        if (rec.stream == SBX_LOG_EVENT) {
            r->ended = true;
            if (!fn(r, t, rec.stream, rec.data, rec.len, ctx))
                break;
        } else {
            /* One entry per line: a line's newline ends it; what is left is a piece. */
            size_t a = 0;
            bool go = true;
            while (go && a < rec.len) {
                const unsigned char *nl = memchr(rec.data + a, '\n', rec.len - a);
                size_t b = nl ? (size_t)(nl - rec.data) + 1 : rec.len;
                go = fn(r, t, rec.stream, rec.data + a, b - a, ctx);
                a = b;
            }
            if (!go) {
                off += used;
                break;
            }
        }
        off += used;
    }
    memmove(r->pend, r->pend + off, r->plen - off);
    r->plen -= off;
    return rc;
}

static bool piece_emit(struct reader *r, double t, int stream, const unsigned char *p, size_t n,
                       void *ctx)
{
    (void)ctx;
    return emit(r, t, stream, p, n);
}

/* The first read collects entries (copied: pend moves) so that `tail` can pick the last ones. */
struct collect {
    struct entry *e;
    size_t n, cap;
    unsigned char *bytes;
    size_t blen, bcap;
    bool oom;
    bool mid_line[4]; /* per stream (SBX_LOG_*): its last piece ended without a newline */
};

static bool piece_collect(struct reader *r, double t, int stream, const unsigned char *p,
                          size_t n, void *ctx)
{
    (void)r;
    struct collect *c = ctx;
    if (t < r->since)
        return true;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        struct entry *e = realloc(c->e, cap * sizeof(*e));
        if (!e) {
            c->oom = true;
            return false;
        }
        c->e = e;
        c->cap = cap;
    }
    if (c->bcap - c->blen < n) {
        size_t cap = c->bcap ? c->bcap : 65536;
        while (cap - c->blen < n)
            cap *= 2;
        unsigned char *b = realloc(c->bytes, cap);
        if (!b) {
            c->oom = true;
            return false;
        }
        c->bytes = b;
        c->bcap = cap;
    }
    memcpy(c->bytes + c->blen, p, n);
    bool *mid = stream >= 0 && stream < 4 ? &c->mid_line[stream] : NULL;
    c->e[c->n++] = (struct entry){ t, stream, c->blen, n, !mid || !*mid };
    if (mid)
        *mid = n > 0 && p[n - 1] != '\n';
    c->blen += n;
    return true;
}

/* Reads one whole file (from its start) into the collection. */
static int collect_file(struct reader *r, int fd, struct collect *c, sbx_error **err)
{
    size_t got;
    int rc = read_more(r, fd, &got, err);
    if (rc == SBX_OK)
        rc = parse_pending(r, piece_collect, c, err);
    if (rc == SBX_OK && c->oom)
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory reading the service log");
    return rc;
}

static bool same_file(int fd, const char *path, bool *gone)
{
    struct stat a, b;
    *gone = false;
    if (stat(path, &b) < 0) {
        *gone = errno == ENOENT || errno == ENOTDIR;
        return false;
    }
    return fstat(fd, &a) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static void nap_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/*
 * Follows r->path after the first read: new records as they come, across
 * rotations, until the service ended (its event record), the log is gone
 * (the box was stopped), or the callback stops it.
 */
static int follow(struct reader *r, sbx_error **err)
{
    int rc = SBX_OK;
    while (!r->stopped && !r->ended) {
        size_t got = 0;
        if (r->fd >= 0) {
            if ((rc = read_more(r, r->fd, &got, err)) < 0 ||
                (rc = parse_pending(r, piece_emit, NULL, err)) < 0)
                return rc;
            if (got)
                continue;
        }
        bool gone = false;
        if (r->fd >= 0 && same_file(r->fd, r->path, &gone)) {
            nap_ms(100);
            continue;
        }
        if (r->fd >= 0) {
            /* Rotated (or removed): what came before the rename is read, then the new file. */
            if ((rc = read_more(r, r->fd, &got, err)) < 0 ||
                (rc = parse_pending(r, piece_emit, NULL, err)) < 0)
                return rc;
            close(r->fd);
            r->fd = -1;
            r->plen = 0; /* a torn end of the old file is dropped */
        } else {
            struct stat st;
            gone = stat(r->path, &st) < 0 && (errno == ENOENT || errno == ENOTDIR);
        }
        if (gone) {
            /* No log: the box is gone, unless its directory is still there (no log kept). */
            _cleanup_free_ char *dir = strdup(r->path);
            char *slash = dir ? strrchr(dir, '/') : NULL;
            struct stat st;
            if (!slash)
                return SBX_OK;
            *slash = 0;
            if (stat(dir, &st) < 0)
                return SBX_OK;
            nap_ms(100);
            continue;
        }
        bool missing;
        r->fd = open_log(r->path, &missing, err);
        if (r->fd < 0 && !missing)
            return SBX_EPERM;
    }
    return rc;
}

/* Emits the collected entries: all, or those of the last `tail` lines. */
static void emit_collected(struct reader *r, const struct collect *c, long long tail)
{
    /* The last `tail` lines (events do not count), from the end. */
    size_t first = 0;
    if (tail >= 0) {
        size_t k = 0;
        first = c->n;
        while (first > 0 && k < (size_t)tail) {
            first--;
            if (c->e[first].stream != SBX_LOG_EVENT && c->e[first].starts)
                k++;
        }
        /* Events just before the window belong to nothing shown. */
    }
    /*
     * With a tail, the other stream's pieces whose line began before the
     * window are not shown: only whole lines.
     */
    bool in_window[4] = { tail < 0, tail < 0, tail < 0, tail < 0 };
    for (size_t i = first; i < c->n && !r->stopped; i++) {
        const struct entry *en = &c->e[i];
        bool known = en->stream >= 0 && en->stream < 4;
        if (known && en->starts)
            in_window[en->stream] = true;
        if (known && en->stream != SBX_LOG_EVENT && !in_window[en->stream])
            continue;
        emit(r, en->t, en->stream, c->bytes + en->off, en->len);
    }
}

/*
 * The log as the provider writes it into a socket (log_stream): read as it
 * comes; without a follow, collected first so that `tail` applies here as
 * it does to files (the provider was given it too). When the callback stops
 * the read, the socket's close tells the provider, and the op's end is
 * waited for, as is its outcome at the socket's end.
 */
static int logs_streamed(sbx_sandbox *sb, struct reader *r, long long tail, unsigned flags,
                         sbx_error **err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot make a socket for the service log");
    sbx_future *f = NULL;
    int rc = sbx__sandbox_log_stream_async(sb, sv[1], r->since, tail, flags, &f, err);
    if (rc < 0) {
        close(sv[0]);
        return rc;
    }
    bool follow = flags & SBX_LOGS_FOLLOW;
    struct collect c = { 0 };
    for (;;) {
        if (r->pcap - r->plen < 65536) {
            size_t cap = r->pcap ? r->pcap * 2 : 131072;
            unsigned char *p = r->pcap >= MAX_READ ? NULL : realloc(r->pend, cap);
            if (!p) {
                rc = sbx__set_error(err, SBX_ENOMEM, "out of memory reading the service log");
                break;
            }
            r->pend = p;
            r->pcap = cap;
        }
        ssize_t n = read(sv[0], r->pend + r->plen, r->pcap - r->plen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = sbx__set_errno(err, SBX_EIO, errno, "cannot read the service log %s", r->path);
            break;
        }
        if (n == 0)
            break;
        r->plen += (size_t)n;
        rc = parse_pending(r, follow ? piece_emit : piece_collect, &c, err);
        if (rc == SBX_OK && c.oom)
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory reading the service log");
        if (rc < 0 || r->stopped)
            break;
    }
    /* Tells the provider when it still writes (a stop, or an error here). */
    close(sv[0]);
    if (!follow && (rc == SBX_OK || rc == SBX_EIO))
        emit_collected(r, &c, tail);
    free(c.e);
    free(c.bytes);
    sbx_error *fe = NULL;
    int frc = sbx_future_wait(f, -1, &fe);
    sbx_future_free(f);
    /* The provider's failure, unless the read failed first or the caller stopped it. */
    if (rc == SBX_OK && frc < 0 && !r->stopped) {
        rc = frc;
        if (err) {
            *err = fe;
            fe = NULL;
        }
    }
    sbx_error_free(fe);
    return rc;
}

int sbx_sandbox_logs(sbx_sandbox *sb, double since, long long tail, unsigned flags,
                     sbx_service_log_cb cb, void *user, sbx_error **err)
{
    if (!sb || !cb)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_logs: a sandbox and a callback are "
                                               "required");
    if (flags & ~(unsigned)SBX_LOGS_FOLLOW)
        return sbx__set_error(err, SBX_EINVAL, "sbx_sandbox_logs: unknown flags 0x%x",
                              flags & ~(unsigned)SBX_LOGS_FOLLOW);
    if (sbx__sandbox_has_log_stream(sb)) {
        struct reader rs = { .path = "(the provider's stream)",
                             .since = since,
                             .cb = cb,
                             .user = user,
                             .fd = -1 };
        int rc = logs_streamed(sb, &rs, tail, flags, err);
        free(rs.pend);
        return rc < 0 ? rc : SBX_OK;
    }
    sbx_future *f = NULL;
    _cleanup_json_ json_t *j = NULL;
    int rc = sbx__sandbox_log_address_async(sb, &f, err);
    if (rc < 0 || (rc = sbx__future_wait_json(f, &j, err)) < 0)
        return rc;
    struct reader r = { .path = json_string_value(json_object_get(j, "path")),
                        .old = json_string_value(json_object_get(j, "old")),
                        .since = since,
                        .cb = cb,
                        .user = user,
                        .fd = -1 };
    if (!r.path)
        return sbx__set_error(err, SBX_EPROVIDER, "the provider's log_address gave no path");

    /* The current file, then the older: a rotation in between shows as the same file twice. */
    bool missing, old_missing = true;
    int cur = open_log(r.path, &missing, err);
    if (cur < 0 && !missing)
        return SBX_EPERM;
    int old = r.old ? open_log(r.old, &old_missing, err) : -1;
    if (old < 0 && !old_missing) {
        if (cur >= 0)
            close(cur);
        return SBX_EPERM;
    }
    bool gone;
    if (old >= 0 && cur >= 0 && same_file(cur, r.old, &gone)) {
        close(old);
        old = -1;
    }
    struct collect c = { 0 };
    if (old >= 0) {
        rc = collect_file(&r, old, &c, err);
        close(old);
        r.plen = 0; /* a torn end of the older file does not run into the newer */
    }
    if (rc == SBX_OK && cur >= 0)
        rc = collect_file(&r, cur, &c, err);
    /* A malformed record ends the read with SBX_EIO, after the entries before it. */
    if (rc == SBX_OK || rc == SBX_EIO) {
        emit_collected(&r, &c, tail);
    }
    free(c.e);
    free(c.bytes);
    if (rc == SBX_OK && (flags & SBX_LOGS_FOLLOW) && !r.stopped) {
        r.fd = cur;
        cur = -1;
        rc = follow(&r, err);
    }
    if (r.fd >= 0)
        close(r.fd);
    if (cur >= 0)
        close(cur);
    free(r.pend);
    return rc < 0 ? rc : SBX_OK;
}
