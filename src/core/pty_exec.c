/*
 * The reference's `pty.exec` facade (include/sbx.h sbx_sandbox_pty_exec,
 * docs/terminals.md, reference-api section G items 41-51), over the PTY
 * handles of pty.c:
 *
 * - a sandbox's default session: the first box-shell session opened through
 *   it while no live default existed (the handle stays its opener's; the
 *   sandbox only remembers it, see struct sbx__pty_home);
 * - which path a call takes (the default, a session given, or a one-shot);
 * - the NGPTY marker protocol for a command in a live session, with one lock
 *   per sandbox over session commands whose wait counts against the timeout;
 * - the reference's results and messages, 125 its "no exit status" code.
 *
 * What the session prints is the box's: the marker scan, the status line and
 * the kept output are bounded here.
 */
#include "core/internal.h"
#include "proto/pty.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PTY_EXEC_RC 125                       /* the reference's SANDBOX_PTY_RUNTIME_RETURN_CODE */
#define PTY_EXEC_DEFAULT_TIMEOUT_S 180.0
#define STDERR_SLICE_S 0.05                   /* the reference's read_stderr(timeout_s=0.05) */
#define STATUS_LINE_MAX 4096                  /* bytes after the marker searched for its newline */
#define TOKEN_LEN 17                          /* "NGPTY" + 12 hex */
#define READ_CHUNK 65536

static const char EINVAL_SESSION_MSG[] =
    "cwd/env/user apply only when pty.exec opens its own session; for an existing session they "
    "are fixed at pty.create() time";

/* --- a sandbox's state ------------------------------------------------------ */

struct sbx__pty_home {
    sbx_pty *dflt;   /* the default session (borrowed: its opener frees it) */
    sbx_pty *doomed; /* a default to close once the command lock is free (see unlock) */
    /* The command lock: a flag under a mutex, so a wait can have a monotonic deadline. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy;
};

/*
 * Guards every home's dflt/doomed and every handle's home slot: a handle
 * and its sandbox may be freed in either order from different threads, and
 * one process-wide mutex keeps the two links consistent without a lock
 * order between a handle and a sandbox.
 */
static pthread_mutex_t links = PTHREAD_MUTEX_INITIALIZER;

struct sbx__pty_home *sbx__pty_home_new(void)
{
    struct sbx__pty_home *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    return h;
}

void sbx__pty_home_free(struct sbx__pty_home *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&links);
    if (h->dflt)
        *sbx__pty_home_slot(h->dflt) = NULL;
    if (h->doomed)
        *sbx__pty_home_slot(h->doomed) = NULL;
    pthread_mutex_unlock(&links);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

void sbx__pty_home_offer(sbx_sandbox *sb, sbx_pty *p)
{
    struct sbx__pty_home *h = sbx__sandbox_pty_home(sb);
    if (!h)
        return; /* out of memory: the session works, it is just not a default */
    pthread_mutex_lock(&links);
    /* The oldest live default is kept (item 41); a closed one is replaced. */
    if (h->dflt && sbx_pty_closed(h->dflt)) {
        *sbx__pty_home_slot(h->dflt) = NULL;
        h->dflt = NULL;
    }
    if (!h->dflt && !*sbx__pty_home_slot(p)) {
        h->dflt = p;
        *sbx__pty_home_slot(p) = h;
    }
    pthread_mutex_unlock(&links);
}

void sbx__pty_home_forget(sbx_pty *p)
{
    pthread_mutex_lock(&links);
    struct sbx__pty_home *h = *sbx__pty_home_slot(p);
    if (h) {
        if (h->dflt == p)
            h->dflt = NULL;
        if (h->doomed == p)
            h->doomed = NULL;
        *sbx__pty_home_slot(p) = NULL;
    }
    pthread_mutex_unlock(&links);
}

/* The live default, a closed one dropped first (item 43). */
static sbx_pty *take_default(struct sbx__pty_home *h)
{
    pthread_mutex_lock(&links);
    if (h->dflt && sbx_pty_closed(h->dflt)) {
        *sbx__pty_home_slot(h->dflt) = NULL;
        h->dflt = NULL;
    }
    sbx_pty *p = h->dflt;
    pthread_mutex_unlock(&links);
    return p;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds left before `deadline` (< 0: none), never negative; -1 without a deadline. */
static double left_s(double deadline)
{
    if (deadline < 0)
        return -1;
    double l = deadline - now_s();
    return l > 0 ? l : 0;
}

/* Takes the command lock by `deadline` (< 0: no limit). false: the time ran out. */
static bool lock_cmd(struct sbx__pty_home *h, double deadline)
{
    pthread_mutex_lock(&h->mu);
    while (h->busy) {
        if (deadline < 0) {
            pthread_cond_wait(&h->cv, &h->mu);
            continue;
        }
        double d = deadline;
        struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - floor(d)) * 1e9)};
        if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) == ETIMEDOUT && h->busy) {
            pthread_mutex_unlock(&h->mu);
            return false;
        }
    }
    h->busy = true;
    pthread_mutex_unlock(&h->mu);
    return true;
}

static void unlock_cmd(struct sbx__pty_home *h)
{
    /*
     * A default that timed out while another command held the lock could not
     * be closed then (that thread may have been reading it): its holder, or
     * the next one, closes it here, before anyone can run in it again.
     */
    pthread_mutex_lock(&links);
    sbx_pty *doomed = h->doomed;
    if (doomed) {
        h->doomed = NULL;
        *sbx__pty_home_slot(doomed) = NULL;
    }
    pthread_mutex_unlock(&links);
    if (doomed) {
        sbx_error *e = NULL;
        sbx__pty_end(doomed, &e); /* errors while closing are ignored, as the reference's */
        sbx_error_free(e);
    }
    pthread_mutex_lock(&h->mu);
    h->busy = false;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* --- options ------------------------------------------------------------------ */

struct sbx_pty_exec_opts {
    sbx_pty *session;
    char *cwd, *user;
    sbx_kv env;
    bool env_given;
    unsigned rows, cols;
    bool pipes;
    double timeout_s;
};

sbx_pty_exec_opts *sbx_pty_exec_opts_new(void)
{
    sbx_pty_exec_opts *o = calloc(1, sizeof(*o));
    if (o) {
        o->rows = 24;
        o->cols = 80;
        o->timeout_s = PTY_EXEC_DEFAULT_TIMEOUT_S;
    }
    return o;
}

void sbx_pty_exec_opts_free(sbx_pty_exec_opts *o)
{
    if (!o)
        return;
    free(o->cwd);
    free(o->user);
    sbx__kv_free(&o->env);
    free(o);
}

int sbx_pty_exec_opts_set_session(sbx_pty_exec_opts *o, sbx_pty *session)
{
    if (!o)
        return SBX_EINVAL;
    o->session = session;
    return SBX_OK;
}

static int set_str(char **slot, const char *v)
{
    char *c = v ? strdup(v) : NULL;
    if (v && !c)
        return SBX_ENOMEM;
    free(*slot);
    *slot = c;
    return SBX_OK;
}

int sbx_pty_exec_opts_set_cwd(sbx_pty_exec_opts *o, const char *cwd)
{
    return o ? set_str(&o->cwd, cwd) : SBX_EINVAL;
}

int sbx_pty_exec_opts_set_user(sbx_pty_exec_opts *o, const char *user)
{
    return o ? set_str(&o->user, user) : SBX_EINVAL;
}

int sbx_pty_exec_opts_set_env(sbx_pty_exec_opts *o, const char *key, const char *value)
{
    if (!o || !key || !key[0] || strchr(key, '=') || !value)
        return SBX_EINVAL;
    o->env_given = true;
    return sbx__kv_set(&o->env, key, value);
}

int sbx_pty_exec_opts_set_env_given(sbx_pty_exec_opts *o)
{
    if (!o)
        return SBX_EINVAL;
    o->env_given = true;
    return SBX_OK;
}

int sbx_pty_exec_opts_set_size(sbx_pty_exec_opts *o, unsigned rows, unsigned cols)
{
    if (!o || rows < 1 || cols < 1 || rows > SBX_PTY_MAX_DIM || cols > SBX_PTY_MAX_DIM)
        return SBX_EINVAL;
    o->rows = rows;
    o->cols = cols;
    return SBX_OK;
}

int sbx_pty_exec_opts_set_pipes(sbx_pty_exec_opts *o, int pipes)
{
    if (!o)
        return SBX_EINVAL;
    o->pipes = pipes != 0;
    return SBX_OK;
}

int sbx_pty_exec_opts_set_timeout(sbx_pty_exec_opts *o, double seconds)
{
    if (!o || !isfinite(seconds) || seconds > SBX_MAX_SECONDS)
        return SBX_EINVAL;
    o->timeout_s = seconds < 0 ? -1 : seconds;
    return SBX_OK;
}

/* --- growable bytes ------------------------------------------------------------- */

struct buf {
    char *data;
    size_t len, cap;
};

static int buf_add(struct buf *b, const void *d, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p)
            return SBX_ENOMEM;
        b->data = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, d, n);
    b->len += n;
    b->data[b->len] = 0;
    return SBX_OK;
}

/* --- the reference's texts --------------------------------------------------------- */

/*
 * A float as Python's repr prints it: the shortest text that reads back as
 * the same double, except that an integral value has no ".0", since the
 * reference's default timeout is the int 180 and prints as "180".
 */
static void format_seconds(char *out, size_t cap, double v)
{
    if (v == floor(v) && fabs(v) < 1e16) {
        snprintf(out, cap, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* Decodes one UTF-8 sequence at s (n bytes left): its length, or 0 when it is not valid. */
static size_t utf8_len(const unsigned char *s, size_t n, unsigned *cp)
{
    unsigned c = s[0];
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (c >= 0xf5 || len == 0 || len > n)
        return 0;
    unsigned v = c & (0x3f >> (len - 1));
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && (v < 0x800 || (v >= 0xd800 && v <= 0xdfff))) || (len == 4 && (v < 0x10000 || v > 0x10ffff)))
        return 0;
    *cp = v;
    return len;
}

/*
 * `s` as Python's repr(str) prints it: single quotes unless the text holds a
 * single quote and no double quote; backslash, the quote, \t \n \r escaped;
 * other control characters (C0, DEL, C1) and U+00A0 as \xNN. A byte that is
 * not UTF-8 reaches C from Python as the surrogate escape U+DC80+byte, so it
 * prints as '\udcNN', as Python shows it. Other non-printable code points
 * (a few format characters) pass through as text: Python would escape them.
 */
static int py_repr(struct buf *b, const char *s)
{
    char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
    int rc = buf_add(b, &q, 1);
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n && rc == SBX_OK;) {
        char esc[16];
        unsigned c = u[i], cp = 0;
        size_t len = c < 0x80 ? 1 : utf8_len(u + i, n - i, &cp);
        if (c < 0x80)
            cp = c;
        if (len == 0) {
            snprintf(esc, sizeof(esc), "\\udc%02x", c);
            rc = buf_add(b, esc, strlen(esc));
            i++;
            continue;
        }
        if (cp == '\\' || cp == (unsigned)q) {
            esc[0] = '\\';
            esc[1] = (char)cp;
            rc = buf_add(b, esc, 2);
        } else if (cp == '\t' || cp == '\n' || cp == '\r') {
            snprintf(esc, sizeof(esc), "\\%c", cp == '\t' ? 't' : cp == '\n' ? 'n' : 'r');
            rc = buf_add(b, esc, 2);
        } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0)) {
            snprintf(esc, sizeof(esc), "\\x%02x", cp);
            rc = buf_add(b, esc, 4);
        } else {
            rc = buf_add(b, u + i, len);
        }
        i += len;
    }
    if (rc == SBX_OK)
        rc = buf_add(b, &q, 1);
    return rc;
}

static int timeout_result(const char *command, double timeout_s, bool discard,
                          sbx_exec_result **out, sbx_error **err)
{
    char t[64];
    format_seconds(t, sizeof(t), timeout_s);
    struct buf b = {0};
    int rc = buf_add(&b, "PTY command timed out after ", 28);
    if (rc == SBX_OK)
        rc = buf_add(&b, t, strlen(t));
    if (rc == SBX_OK)
        rc = buf_add(&b, "s: ", 3);
    if (rc == SBX_OK)
        rc = py_repr(&b, command);
    static const char suffix[] =
        "; the command is still running and the session should be discarded";
    if (rc == SBX_OK && discard)
        rc = buf_add(&b, suffix, sizeof(suffix) - 1);
    if (rc == SBX_OK)
        rc = sbx_exec_result_new_take(NULL, 0, b.data, b.len, PTY_EXEC_RC, "timeout", out);
    else
        free(b.data);
    return rc == SBX_OK ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

/* --- a command in a live session: the marker protocol (items 46-49) ---------------- */

/* Hands `e` to the caller (or frees it). */
static void pass_error(sbx_error **err, sbx_error *e)
{
    if (err && !*err)
        *err = e;
    else
        sbx_error_free(e);
}

/* Result of one step: SBX_OK, SBX_ETIMEDOUT (the deadline passed), or an error (err set). */
static int read_out(sbx_pty *p, int stream, char *chunk, size_t cap, double timeout_s, size_t *n,
                    sbx_error **err)
{
    sbx_error *e = NULL;
    int rc = sbx_pty_read(p, stream, chunk, cap, timeout_s, n, NULL, &e);
    if (rc == SBX_ETIMEDOUT) {
        sbx_error_free(e);
        return SBX_ETIMEDOUT;
    }
    if (rc < 0) {
        pass_error(err, e);
        return rc;
    }
    return SBX_OK;
}

static bool ascii_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/*
 * Runs `command` in session `p` (the caller holds the command lock) until
 * `deadline`. SBX_ETIMEDOUT without err when time ran out; *out otherwise.
 */
static int read_result(sbx_pty *p, const char *hex, double deadline, size_t cap,
                       sbx_exec_result **out, sbx_error **err);

static int session_command(sbx_pty *p, const char *command, double deadline,
                           sbx_exec_result **out, sbx_error **err)
{
    /* 12 hex of 6 random bytes (getrandom): a command cannot guess its marker. */
    char hex[13];
    sbx__random_hex(hex, 6);
    /*
     * The brace group runs the command in the session's shell with stdin at
     * EOF (the session's never ends); the marker is printed from two
     * literals, so the terminal's echo of these lines never contains it.
     */
    struct buf script = {0};
    int rc = buf_add(&script, "{ ", 2);
    if (rc == SBX_OK)
        rc = buf_add(&script, command, strlen(command));
    if (rc == SBX_OK)
        rc = buf_add(&script, "\n} </dev/null\nprintf '%s%s:%s\\n' 'NGPTY' '", 42);
    if (rc == SBX_OK)
        rc = buf_add(&script, hex, 12);
    if (rc == SBX_OK)
        rc = buf_add(&script, "' \"$?\"\n", 7);
    if (rc < 0) {
        free(script.data);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    rc = sbx_pty_write(p, script.data, script.len, err);
    free(script.data);
    if (rc < 0)
        return rc;

    return read_result(p, hex, deadline, READ_CHUNK, out, err);
}

/*
 * Reads a session command's output up to its marker NGPTY<hex>: and the
 * status after it, then a pipe-mode session's stderr, into *out. `cap`
 * bounds each read (READ_CHUNK; the fuzz target and tests make it small so
 * that a marker is split across reads).
 */
static int read_result(sbx_pty *p, const char *hex, double deadline, size_t cap,
                       sbx_exec_result **out, sbx_error **err)
{
    char token[TOKEN_LEN + 2];
    snprintf(token, sizeof(token), "NGPTY%s:", hex);
    const size_t nlen = TOKEN_LEN + 1;
    int rc;
    if (cap > READ_CHUNK)
        cap = READ_CHUNK; /* scan[] holds one read after the carried bytes */
    /*
     * Output before the marker is kept up to the exec output limit (the
     * rest is drained, and the result says truncated); the scan runs over
     * the last nlen-1 bytes seen plus each new chunk, so a marker split
     * across chunks is found (item 47).
     */
    char *scan = malloc(READ_CHUNK + nlen);
    struct buf kept = {0}, after = {0};
    if (!scan)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    size_t carry = 0;           /* bytes of scan[] kept from earlier chunks */
    unsigned long long seen = 0; /* bytes of output so far */
    unsigned long long at = 0;   /* where the marker starts */
    bool found = false, truncated = false;
    while (!found) {
        size_t n = 0;
        rc = read_out(p, SBX_STREAM_STDOUT, scan + carry, cap, left_s(deadline), &n, err);
        if (rc < 0)
            goto done;
        if (n == 0) {
            rc = sbx__set_error(err, SBX_EPTY, "PTY session ended before the command finished");
            goto done;
        }
        char *hit = memmem(scan, carry + n, token, nlen);
        size_t upto = n;
        if (hit) {
            found = true;
            at = seen - carry + (unsigned long long)(hit - scan);
            size_t tail = carry + n - (size_t)(hit - scan) - nlen;
            if ((rc = buf_add(&after, hit + nlen, tail)) < 0)
                goto oom;
        }
        size_t room = kept.len < SBX_DEFAULT_OUTPUT_LIMIT ? SBX_DEFAULT_OUTPUT_LIMIT - kept.len : 0;
        if (upto > room)
            upto = room;
        if ((rc = buf_add(&kept, scan + carry, upto)) < 0)
            goto oom;
        seen += n;
        size_t keep = carry + n < nlen - 1 ? carry + n : nlen - 1;
        memmove(scan, scan + carry + n - keep, keep);
        carry = keep;
    }
    if (kept.len > at)
        kept.len = (size_t)at; /* the marker's first bytes came in an earlier chunk */
    if (kept.data)
        kept.data[kept.len] = 0;
    truncated = at > SBX_DEFAULT_OUTPUT_LIMIT;
    /* The status runs to the end of its line, which may come in a later chunk (item 48). */
    while (!memchr(after.data ? after.data : "", '\n', after.len) && after.len < STATUS_LINE_MAX) {
        size_t n = 0;
        rc = read_out(p, SBX_STREAM_STDOUT, scan, cap, left_s(deadline), &n, err);
        if (rc < 0)
            goto done;
        if (n == 0)
            break;
        if ((rc = buf_add(&after, scan, n)) < 0)
            goto oom;
    }
    const char *line = after.data ? after.data : "";
    size_t llen = after.len;
    const char *nl = memchr(line, '\n', llen);
    if (nl)
        llen = (size_t)(nl - line);
    while (llen && ascii_space(line[0]))
        line++, llen--;
    while (llen && ascii_space(line[llen - 1]))
        llen--;
    int code = llen ? 0 : -1;
    for (size_t i = 0; i < llen && code >= 0; i++) {
        if (line[i] < '0' || line[i] > '9' || code > (0x7fffffff - 9) / 10)
            code = -1; /* not a number (or one past int): no exit status */
        else
            code = code * 10 + (line[i] - '0');
    }
    /* stderr: what a pipe-mode session printed there, in 50 ms slices until quiet (item 49). */
    struct buf errs = {0};
    while (sbx__pty_pipes(p)) {
        double l = left_s(deadline);
        double slice = l >= 0 && l < STDERR_SLICE_S ? l : STDERR_SLICE_S;
        size_t n = 0;
        rc = read_out(p, SBX_STREAM_STDERR, scan, cap, slice, &n, err);
        if (rc == SBX_ETIMEDOUT && slice < STDERR_SLICE_S) {
            free(errs.data);
            goto done; /* the deadline, not the slice, ran out */
        }
        if (rc == SBX_ETIMEDOUT || (rc == SBX_OK && n == 0))
            break;
        if (rc < 0) {
            free(errs.data);
            goto done;
        }
        if (errs.len + n > SBX_DEFAULT_OUTPUT_LIMIT) {
            n = errs.len < SBX_DEFAULT_OUTPUT_LIMIT ? SBX_DEFAULT_OUTPUT_LIMIT - errs.len : 0;
            truncated = true;
        }
        if (buf_add(&errs, scan, n) < 0) {
            free(errs.data);
            goto oom;
        }
    }
    if (!kept.data && buf_add(&kept, "", 0) < 0) {
        free(errs.data);
        goto oom;
    }
    rc = sbx_exec_result_new_take(kept.data, kept.len, errs.len ? errs.data : NULL, errs.len,
                                  code >= 0 ? code : PTY_EXEC_RC, code >= 0 ? NULL : "pty", out);
    if (!errs.len)
        free(errs.data);
    kept.data = NULL;
    if (rc < 0)
        goto oom;
    sbx_exec_result_set_truncated(*out, truncated);
    rc = SBX_OK;
    goto done;
oom:
    rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
done:
    free(scan);
    free(kept.data);
    free(after.data);
    return rc;
}

static int in_session(sbx_sandbox *sb, sbx_pty *p, const char *command, double timeout_s,
                      bool implicit, sbx_exec_result **out, sbx_error **err)
{
    struct sbx__pty_home *h = sbx__sandbox_pty_home(sb);
    if (!h)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /* The timeout covers the wait for the lock as well as the command (item 45). */
    double deadline = timeout_s < 0 ? -1 : now_s() + timeout_s;
    bool locked = lock_cmd(h, deadline);
    int rc = locked ? session_command(p, command, deadline, out, err) : SBX_ETIMEDOUT;
    if (rc == SBX_ETIMEDOUT) {
        if (implicit) {
            /*
             * The session's stream now carries the stray command's output:
             * retire it so no later implicit exec inherits it (item 50). With
             * the lock it is closed now; without it, its holder may be reading
             * it, so whoever releases the lock next closes it.
             */
            bool now = false;
            pthread_mutex_lock(&links);
            if (h->dflt == p) {
                h->dflt = NULL;
                if (locked) {
                    *sbx__pty_home_slot(p) = NULL;
                    now = true;
                } else {
                    /* An earlier doomed one (rare: two timeouts before a release) is only forgotten. */
                    if (h->doomed && h->doomed != p)
                        *sbx__pty_home_slot(h->doomed) = NULL;
                    h->doomed = p;
                }
            } else if (locked && *sbx__pty_home_slot(p) == NULL) {
                now = true; /* forgotten meanwhile by another timeout: still ours to close */
            }
            pthread_mutex_unlock(&links);
            if (now && !sbx_pty_closed(p)) {
                sbx_error *e = NULL;
                sbx__pty_end(p, &e);
                sbx_error_free(e);
            }
        }
        rc = timeout_result(command, timeout_s, true, out, err);
    }
    if (locked)
        unlock_cmd(h);
    return rc;
}

/* --- a one-shot session (item 51) -------------------------------------------------- */

static int one_shot(sbx_sandbox *sb, const char *command, const sbx_pty_exec_opts *o,
                    sbx_exec_result **out, sbx_error **err)
{
    sbx_pty_opts *po = sbx_pty_opts_new();
    if (!po)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = sbx_pty_opts_set_command(po, command);
    if (rc == SBX_OK && o->cwd)
        rc = sbx_pty_opts_set_cwd(po, o->cwd);
    if (rc == SBX_OK && o->user)
        rc = sbx_pty_opts_set_user(po, o->user);
    for (size_t i = 0; rc == SBX_OK && i < o->env.len; i++)
        rc = sbx_pty_opts_set_env(po, o->env.keys[i], o->env.values[i]);
    if (rc == SBX_OK)
        rc = sbx_pty_opts_set_size(po, o->rows, o->cols);
    if (rc == SBX_OK)
        rc = sbx_pty_opts_set_pipes(po, o->pipes);
    if (rc < 0) {
        sbx_pty_opts_free(po);
        return sbx__set_error(err, rc, "pty exec: building the session's options failed");
    }
    double timeout_s = o->timeout_s;
    double deadline = timeout_s < 0 ? -1 : now_s() + timeout_s;
    sbx_pty *p;
    rc = sbx_pty_open(sb, po, &p, err);
    sbx_pty_opts_free(po);
    if (rc < 0)
        return rc;
    /*
     * Both streams are drained as they come (the reference reads them
     * concurrently): a stream left unread would lose its oldest bytes once
     * the handle's window is full.
     */
    struct buf bufs[2] = {{0}, {0}};
    bool done[2] = {false, false}, truncated = false;
    char *chunk = malloc(READ_CHUNK);
    if (!chunk) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto end;
    }
    while (!done[0] || !done[1]) {
        bool progress = false;
        for (int k = 0; k < 2; k++) {
            if (done[k])
                continue;
            size_t n = 0;
            rc = read_out(p, k ? SBX_STREAM_STDERR : SBX_STREAM_STDOUT, chunk, READ_CHUNK, 0, &n, err);
            if (rc == SBX_ETIMEDOUT)
                continue;
            if (rc < 0)
                goto end;
            if (n == 0) {
                done[k] = true;
                continue;
            }
            progress = true;
            size_t room = bufs[k].len < SBX_DEFAULT_OUTPUT_LIMIT
                              ? SBX_DEFAULT_OUTPUT_LIMIT - bufs[k].len
                              : 0;
            if (n > room) {
                n = room;
                truncated = true;
            }
            if (buf_add(&bufs[k], chunk, n) < 0) {
                rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
                goto end;
            }
        }
        if (progress || (done[0] && done[1]))
            continue;
        double l = left_s(deadline);
        if (l == 0) {
            rc = SBX_ETIMEDOUT;
            break;
        }
        /*
         * Wait for the connection, unless a read of one stream already took
         * the other's bytes (or the end) off the socket into the handle:
         * then the socket has nothing more to say and a poll would sleep to
         * the deadline.
         */
        if (sbx__pty_ready(p))
            continue;
        struct pollfd pf = {.fd = sbx_pty_fd(p), .events = POLLIN};
        poll(&pf, 1, l < 0 ? -1 : (int)(l * 1000) + 1);
    }
    int code = 0;
    if (rc == SBX_OK) {
        double l = left_s(deadline);
        sbx_error *e = NULL;
        rc = sbx_pty_wait(p, l < 0 ? -1 : l, &code, &e);
        if (rc == SBX_ETIMEDOUT)
            sbx_error_free(e);
        else if (rc < 0)
            pass_error(err, e);
    }
    if (rc == SBX_ETIMEDOUT) {
        rc = timeout_result(command, timeout_s, false, out, err);
        goto end;
    }
    if (rc < 0)
        goto end;
    if ((!bufs[0].data && buf_add(&bufs[0], "", 0) < 0) ||
        (o->pipes && !bufs[1].data && buf_add(&bufs[1], "", 0) < 0)) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto end;
    }
    /* On a terminal, stderr is None: everything came merged on the terminal. */
    rc = sbx_exec_result_new_take(bufs[0].data, bufs[0].len, o->pipes ? bufs[1].data : NULL,
                                  bufs[1].len, code, NULL, out);
    bufs[0].data = NULL;
    if (o->pipes)
        bufs[1].data = NULL;
    if (rc < 0) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto end;
    }
    sbx_exec_result_set_truncated(*out, truncated);
end:
    free(chunk);
    free(bufs[0].data);
    free(bufs[1].data);
    {
        /* Always closed, even after a timeout (item 51). */
        sbx_error *e = NULL;
        sbx_pty_close(p, &e);
        sbx_error_free(e);
    }
    return rc;
}

/* --- the entry point ----------------------------------------------------------------- */

int sbx_sandbox_pty_exec(sbx_sandbox *sb, const char *command, const sbx_pty_exec_opts *opts,
                         sbx_exec_result **out, sbx_error **err)
{
    if (!sb || !command || !out)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_sandbox_pty_exec: a sandbox, a command and out are required");
    sbx_pty_exec_opts defaults = {.rows = 24, .cols = 80, .timeout_s = PTY_EXEC_DEFAULT_TIMEOUT_S};
    const sbx_pty_exec_opts *o = opts ? opts : &defaults;
    bool shaped = o->cwd || o->env_given || o->user;
    sbx_pty *session = o->session;
    bool implicit = false;
    if (!session && !shaped && !o->pipes && o->rows == 24 && o->cols == 80) {
        struct sbx__pty_home *h = sbx__sandbox_pty_home(sb);
        if (!h)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        session = take_default(h);
        implicit = session != NULL;
    }
    if (session) {
        if (shaped)
            return sbx__set_error(err, SBX_EINVAL, "%s", EINVAL_SESSION_MSG);
        return in_session(sb, session, command, o->timeout_s, implicit, out, err);
    }
    return one_shot(sb, command, o, out, err);
}

/*
 * For fuzz/fuzz_pty_exec.c and tests/unit/test_pty_marker.c: reads a
 * session command's result from `frames` (what a box's agent sent, after
 * HELLO) with marker hex "0123456789ab", reads of at most `cap` bytes, and
 * a deadline already passed (nothing more will come). *out and the code as
 * sbx_sandbox_pty_exec would give them (SBX_ETIMEDOUT: no marker in time).
 */
int sbx__pty_exec_replay(const uint8_t *frames, size_t len, int pipes, size_t cap,
                         sbx_exec_result **out, sbx_error **err)
{
    sbx_pty *p = sbx__pty_from_bytes(frames, len, pipes);
    if (!p)
        return sbx__set_error(err, SBX_EPROTO, "not a frame stream");
    int rc = read_result(p, "0123456789ab", 0, cap ? cap : 1, out, err);
    sbx_pty_free(p);
    return rc;
}
