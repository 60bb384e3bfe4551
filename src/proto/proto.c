/*
 * The agent protocol codec. Everything that reads outside bytes checks each
 * length against what is left before touching memory: a malformed frame is
 * an error return, never a crash (fuzz/fuzz_frames.c holds it to that).
 */
#include "proto/proto.h"
#include "proto/pty.h"
#include "proto/procs.h"
#include "proto/forward.h" /* [endpoint] */

#include <stdlib.h>
#include <string.h>

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

const char *sbx__proto_type_name(uint8_t type)
{
    switch (type) {
    case SBX_MSG_HELLO:
        return "HELLO";
    case SBX_MSG_ERROR:
        return "ERROR";
    case SBX_MSG_PING:
        return "PING";
    case SBX_MSG_PONG:
        return "PONG";
    case SBX_MSG_EXEC:
        return "EXEC";
    case SBX_MSG_STDIN:
        return "STDIN";
    case SBX_MSG_STDIN_ACK:
        return "STDIN_ACK";
    case SBX_MSG_OUTPUT_ACK:
        return "OUTPUT_ACK";
    case SBX_MSG_STDOUT:
        return "STDOUT";
    case SBX_MSG_STDERR:
        return "STDERR";
    case SBX_MSG_EXIT:
        return "EXIT";
    case SBX_MSG_CANCEL:
        return "CANCEL";
    case SBX_MSG_FILE_PUT:
        return "FILE_PUT";
    case SBX_MSG_FILE_GET:
        return "FILE_GET";
    case SBX_MSG_FILE_INFO:
        return "FILE_INFO";
    case SBX_MSG_DATA:
        return "DATA";
    case SBX_MSG_STATUS:
        return "STATUS";
    default: {
        /* The PTY family, the process listings, then FORWARD (proto/forward.h). */
        const char *n = sbx__proto_pty_type_name(type);
        if (!n)
            n = sbx__proto_procs_type_name(type);
        return n ? n : sbx__proto_forward_type_name(type);
    }
    }
}

/* --- frames -------------------------------------------------------------- */

void sbx__proto_put_header(uint8_t *out, uint8_t type, uint32_t channel, uint32_t payload_len)
{
    put32(out, payload_len + 5);
    out[4] = type;
    put32(out + 5, channel);
}

int sbx__proto_parse(const uint8_t *buf, size_t len, uint32_t max_payload, sbx_frame *frame,
                     size_t *used)
{
    if (len < 4)
        return 0;
    uint32_t n = get32(buf);
    /* Checked before waiting for the body: a huge length must not make us buffer it. */
    if (n < 5 || n - 5 > max_payload)
        return -1;
    if (len - 4 < n)
        return 0;
    frame->type = buf[4];
    frame->channel = get32(buf + 5);
    frame->payload = buf + SBX_PROTO_HEADER;
    frame->len = n - 5;
    *used = (size_t)n + 4;
    return 1;
}

void sbx__proto_reader_init(sbx_proto_reader *r, uint32_t max_payload)
{
    memset(r, 0, sizeof(*r));
    r->max_payload = max_payload;
}

void sbx__proto_reader_free(sbx_proto_reader *r)
{
    free(r->buf);
    memset(r, 0, sizeof(*r));
}

uint8_t *sbx__proto_reader_space(sbx_proto_reader *r, size_t want, size_t *avail)
{
    /* Slide the unread bytes to the front once the consumed prefix is large. */
    if (r->start && (r->start + r->len + want > r->cap || r->start > r->cap / 2)) {
        memmove(r->buf, r->buf + r->start, r->len);
        r->start = 0;
    }
    /* No buffer yet (even for want == 0: NULL + 0 is no pointer to hand out). */
    if (!r->buf || r->start + r->len + want > r->cap) {
        size_t cap = r->cap ? r->cap : 64 * 1024;
        while (cap < r->start + r->len + want)
            cap *= 2;
        uint8_t *nb = realloc(r->buf, cap);
        if (!nb)
            return NULL;
        r->buf = nb;
        r->cap = cap;
    }
    *avail = r->cap - r->start - r->len;
    return r->buf + r->start + r->len;
}

void sbx__proto_reader_commit(sbx_proto_reader *r, size_t n)
{
    r->len += n;
}

int sbx__proto_reader_feed(sbx_proto_reader *r, const void *data, size_t n)
{
    size_t avail;
    uint8_t *p = sbx__proto_reader_space(r, n, &avail);
    if (!p)
        return -1;
    if (n)
        memcpy(p, data, n);
    r->len += n;
    return 0;
}

int sbx__proto_reader_next(sbx_proto_reader *r, sbx_frame *frame)
{
    if (r->broken)
        return -1;
    size_t used = 0;
    int rc =
        sbx__proto_parse(r->buf ? r->buf + r->start : NULL, r->len, r->max_payload, frame, &used);
    if (rc < 0) {
        r->broken = 1;
        return -1;
    }
    if (rc == 0) {
        if (r->len == 0)
            r->start = 0;
        return 0;
    }
    r->start += used;
    r->len -= used;
    return 1;
}

/* --- building ------------------------------------------------------------ */

static void reserve(sbx_pbuf *b, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
        cap *= 2;
    uint8_t *nd = realloc(b->data, cap);
    if (!nd) {
        b->oom = 1;
        return;
    }
    b->data = nd;
    b->cap = cap;
}

void sbx__pbuf_begin(sbx_pbuf *b)
{
    b->len = 0;
    b->oom = 0;
    reserve(b, SBX_PROTO_HEADER);
    if (!b->oom)
        b->len = SBX_PROTO_HEADER;
}

void sbx__pbuf_bytes(sbx_pbuf *b, const void *p, size_t n)
{
    reserve(b, n);
    if (b->oom)
        return;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

void sbx__pbuf_u8(sbx_pbuf *b, uint8_t v)
{
    sbx__pbuf_bytes(b, &v, 1);
}

void sbx__pbuf_u32(sbx_pbuf *b, uint32_t v)
{
    uint8_t p[4];
    put32(p, v);
    sbx__pbuf_bytes(b, p, 4);
}

void sbx__pbuf_u64(sbx_pbuf *b, uint64_t v)
{
    sbx__pbuf_u32(b, (uint32_t)(v >> 32));
    sbx__pbuf_u32(b, (uint32_t)v);
}

void sbx__pbuf_str(sbx_pbuf *b, const char *s)
{
    if (!s) {
        sbx__pbuf_u32(b, UINT32_MAX);
        return;
    }
    size_t n = strlen(s);
    if (n >= UINT32_MAX) {
        b->oom = 1;
        return;
    }
    sbx__pbuf_u32(b, (uint32_t)n);
    sbx__pbuf_bytes(b, s, n);
}

void sbx__pbuf_strv(sbx_pbuf *b, const char *const *v)
{
    uint32_t n = 0;
    while (v && v[n])
        n++;
    sbx__pbuf_u32(b, n);
    for (uint32_t i = 0; i < n; i++)
        sbx__pbuf_str(b, v[i]);
}

int sbx__pbuf_finish(sbx_pbuf *b, uint8_t type, uint32_t channel)
{
    if (b->oom || b->len < SBX_PROTO_HEADER || b->len - SBX_PROTO_HEADER > SBX_PROTO_MAX_PAYLOAD)
        return -1;
    sbx__proto_put_header(b->data, type, channel, (uint32_t)(b->len - SBX_PROTO_HEADER));
    return 0;
}

void sbx__pbuf_free(sbx_pbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

/* --- decoding ------------------------------------------------------------ */

uint32_t sbx__pcur_u32(struct sbx_pcur *c)
{
    if (c->bad || c->left < 4) {
        c->bad = 1;
        return 0;
    }
    uint32_t v = get32(c->p);
    c->p += 4;
    c->left -= 4;
    return v;
}

uint64_t sbx__pcur_u64(struct sbx_pcur *c)
{
    uint64_t hi = sbx__pcur_u32(c);
    return hi << 32 | sbx__pcur_u32(c);
}

uint8_t sbx__pcur_u8(struct sbx_pcur *c)
{
    if (c->bad || c->left < 1) {
        c->bad = 1;
        return 0;
    }
    uint8_t v = c->p[0];
    c->p++;
    c->left--;
    return v;
}

/*
 * A string view. Strings may not hold NUL bytes (paths, argv and env cannot),
 * so a decoded string is always a whole C string. *absent is set for NULL.
 */
static const uint8_t *cur_str(struct sbx_pcur *c, uint32_t *len, int *absent)
{
    uint32_t n = sbx__pcur_u32(c);
    *absent = 0;
    if (c->bad)
        return NULL;
    if (n == UINT32_MAX) {
        *absent = 1;
        *len = 0;
        return NULL;
    }
    if (n > c->left || memchr(c->p, 0, n)) {
        c->bad = 1;
        return NULL;
    }
    const uint8_t *s = c->p;
    c->p += n;
    c->left -= n;
    *len = n;
    return s;
}

/*
 * Decoded messages are one block: the struct, then pointer arrays, then the
 * string bytes. `arena` hands out that space in order.
 */
struct arena {
    char *p;
    size_t left;
};

static void *arena_take(struct arena *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n > a->left)
        return NULL;
    void *r = a->p;
    a->p += n;
    a->left -= n;
    return r;
}

static char *arena_str(struct arena *a, const uint8_t *s, uint32_t n, int absent)
{
    if (absent)
        return NULL;
    char *d = arena_take(a, (size_t)n + 1);
    if (!d)
        return NULL;
    if (n)
        memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* Measures the strings of a payload: returns the arena size they need, 0 when malformed. */
static size_t measure_strv(struct sbx_pcur *c, uint32_t *count)
{
    uint32_t n = sbx__pcur_u32(c);
    /* Each element takes at least 4 bytes: bounds n before any allocation. */
    if (c->bad || n > c->left / 4) {
        c->bad = 1;
        return 0;
    }
    size_t need = ((size_t)n + 1) * sizeof(char *) + 8;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len;
        int absent;
        cur_str(c, &len, &absent);
        if (c->bad || absent) {
            c->bad = 1;
            return 0;
        }
        need += ((size_t)len + 1 + 7) & ~(size_t)7;
    }
    *count = n;
    return need;
}

static char **arena_strv(struct arena *a, struct sbx_pcur *c, uint32_t n)
{
    (void)sbx__pcur_u32(c);
    char **v = arena_take(a, ((size_t)n + 1) * sizeof(char *));
    if (!v)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len;
        int absent;
        const uint8_t *s = cur_str(c, &len, &absent);
        v[i] = arena_str(a, s, len, absent);
        if (!v[i])
            return NULL;
    }
    v[n] = NULL;
    return v;
}

static size_t str_need(struct sbx_pcur *c)
{
    uint32_t len;
    int absent;
    cur_str(c, &len, &absent);
    return absent ? 0 : (((size_t)len + 1 + 7) & ~(size_t)7);
}

static char *next_str(struct arena *a, struct sbx_pcur *c)
{
    uint32_t len;
    int absent;
    const uint8_t *s = cur_str(c, &len, &absent);
    return arena_str(a, s, len, absent);
}

static void *alloc_msg(size_t head, size_t rest, struct arena *a)
{
    head = (head + 7) & ~(size_t)7;
    char *m = calloc(1, head + rest);
    if (!m)
        return NULL;
    a->p = m + head;
    a->left = rest;
    return m;
}

int sbx__msg_hello_encode(sbx_pbuf *b, const sbx_msg_hello *m)
{
    sbx__pbuf_u32(b, m->magic);
    sbx__pbuf_u32(b, (uint32_t)m->min_version << 16 | m->max_version);
    sbx__pbuf_u32(b, m->max_payload);
    sbx__pbuf_str(b, m->software ? m->software : "");
    return b->oom ? -1 : 0;
}

int sbx__msg_hello_decode(const sbx_frame *f, sbx_msg_hello **out)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint32_t magic = sbx__pcur_u32(&c);
    uint32_t ver = sbx__pcur_u32(&c);
    uint32_t maxp = sbx__pcur_u32(&c);
    size_t need = str_need(&c);
    /* Later versions may append fields: trailing bytes are allowed in a hello. */
    if (c.bad || magic != SBX_PROTO_MAGIC)
        return -1;
    struct arena a;
    sbx_msg_hello *m = alloc_msg(sizeof(*m), need + 8, &a);
    if (!m)
        return -1;
    struct sbx_pcur c2 = {f->payload + 12, f->len - 12, 0};
    m->magic = magic;
    m->min_version = (uint16_t)(ver >> 16);
    m->max_version = (uint16_t)ver;
    m->max_payload = maxp;
    m->software = next_str(&a, &c2);
    if (!m->software)
        m->software = arena_str(&a, NULL, 0, 0);
    *out = m;
    return 0;
}

int sbx__proto_negotiate(const sbx_msg_hello *a, const sbx_msg_hello *b)
{
    int hi = a->max_version < b->max_version ? a->max_version : b->max_version;
    int lo = a->min_version > b->min_version ? a->min_version : b->min_version;
    return hi >= lo ? hi : -1;
}

int sbx__msg_exec_encode(sbx_pbuf *b, uint32_t flags, int64_t timeout_ms, uint64_t output_limit,
                         const char *cwd, const char *user, const char *const *argv,
                         const char *const *env, const char *const *env2)
{
    sbx__pbuf_u32(b, flags);
    sbx__pbuf_u64(b, (uint64_t)timeout_ms);
    sbx__pbuf_u64(b, output_limit);
    sbx__pbuf_str(b, cwd);
    sbx__pbuf_str(b, user);
    sbx__pbuf_strv(b, argv);
    /* The two env lists go out as one: env2 entries come later and so win. */
    uint32_t n = 0;
    while (env && env[n])
        n++;
    uint32_t n2 = 0;
    while (env2 && env2[n2])
        n2++;
    sbx__pbuf_u32(b, n + n2);
    for (uint32_t i = 0; i < n; i++)
        sbx__pbuf_str(b, env[i]);
    for (uint32_t i = 0; i < n2; i++)
        sbx__pbuf_str(b, env2[i]);
    return b->oom ? -1 : 0;
}

int sbx__msg_exec_decode(const sbx_frame *f, sbx_msg_exec **out)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint32_t flags = sbx__pcur_u32(&c);
    uint64_t timeout = sbx__pcur_u64(&c);
    uint64_t limit = sbx__pcur_u64(&c);
    struct sbx_pcur strs = c;
    size_t need = str_need(&c) + str_need(&c);
    uint32_t argc = 0, envc = 0;
    need += measure_strv(&c, &argc);
    need += measure_strv(&c, &envc);
    if (c.bad || c.left != 0 || argc == 0)
        return -1;
    struct arena a;
    sbx_msg_exec *m = alloc_msg(sizeof(*m), need, &a);
    if (!m)
        return -1;
    m->flags = flags;
    m->timeout_ms = (int64_t)timeout;
    m->output_limit = limit;
    /* Second pass over the validated bytes: every step below is in bounds. */
    m->cwd = next_str(&a, &strs);
    m->user = next_str(&a, &strs);
    m->argv = arena_strv(&a, &strs, argc);
    m->env = m->argv ? arena_strv(&a, &strs, envc) : NULL;
    if (!m->argv || !m->env) {
        free(m);
        return -1;
    }
    *out = m;
    return 0;
}

int sbx__msg_exit_encode(sbx_pbuf *b, uint8_t kind, int32_t code, uint32_t flags,
                         const char *message)
{
    sbx__pbuf_u8(b, kind);
    sbx__pbuf_u32(b, (uint32_t)code);
    sbx__pbuf_u32(b, flags);
    sbx__pbuf_str(b, message ? message : "");
    return b->oom ? -1 : 0;
}

int sbx__msg_exit_decode(const sbx_frame *f, sbx_msg_exit **out)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint8_t kind = sbx__pcur_u8(&c);
    uint32_t code = sbx__pcur_u32(&c);
    uint32_t flags = sbx__pcur_u32(&c);
    struct sbx_pcur strs = c;
    size_t need = str_need(&c);
    if (c.bad || c.left != 0 || kind > SBX_EXIT_FAILED)
        return -1;
    struct arena a;
    sbx_msg_exit *m = alloc_msg(sizeof(*m), need + 8, &a);
    if (!m)
        return -1;
    m->kind = kind;
    m->code = (int32_t)code;
    m->flags = flags;
    m->message = next_str(&a, &strs);
    if (!m->message)
        m->message = arena_str(&a, NULL, 0, 0);
    *out = m;
    return 0;
}

int sbx__msg_status_encode(sbx_pbuf *b, int32_t errnum, const char *message)
{
    sbx__pbuf_u32(b, (uint32_t)errnum);
    sbx__pbuf_str(b, message ? message : "");
    return b->oom ? -1 : 0;
}

int sbx__msg_status_decode(const sbx_frame *f, sbx_msg_status **out)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint32_t errnum = sbx__pcur_u32(&c);
    struct sbx_pcur strs = c;
    size_t need = str_need(&c);
    if (c.bad || c.left != 0)
        return -1;
    struct arena a;
    sbx_msg_status *m = alloc_msg(sizeof(*m), need + 8, &a);
    if (!m)
        return -1;
    m->errnum = (int32_t)errnum;
    m->message = next_str(&a, &strs);
    if (!m->message)
        m->message = arena_str(&a, NULL, 0, 0);
    *out = m;
    return 0;
}

int sbx__msg_file_encode(sbx_pbuf *b, uint32_t mode, uint32_t flags, const char *path)
{
    sbx__pbuf_u32(b, mode);
    sbx__pbuf_u32(b, flags);
    sbx__pbuf_str(b, path);
    return b->oom ? -1 : 0;
}

int sbx__msg_file_decode(const sbx_frame *f, sbx_msg_file **out)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint32_t mode = sbx__pcur_u32(&c);
    uint32_t flags = sbx__pcur_u32(&c);
    struct sbx_pcur strs = c;
    uint32_t len = 0;
    int absent = 0;
    cur_str(&c, &len, &absent);
    /* A path is required and non-empty. */
    if (c.bad || c.left != 0 || absent || len == 0)
        return -1;
    struct arena a;
    sbx_msg_file *m = alloc_msg(sizeof(*m), (size_t)len + 16, &a);
    if (!m)
        return -1;
    m->mode = mode;
    m->flags = flags;
    m->path = next_str(&a, &strs);
    *out = m;
    return 0;
}

int sbx__msg_file_info_encode(sbx_pbuf *b, uint32_t mode, uint64_t size)
{
    sbx__pbuf_u32(b, mode);
    sbx__pbuf_u64(b, size);
    return b->oom ? -1 : 0;
}

int sbx__msg_file_info_decode(const sbx_frame *f, sbx_msg_file_info *out)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint32_t mode = sbx__pcur_u32(&c);
    uint64_t size = sbx__pcur_u64(&c);
    if (c.bad || c.left != 0)
        return -1;
    out->mode = mode;
    out->size = size;
    return 0;
}

int sbx__msg_u64_encode(sbx_pbuf *b, uint64_t v)
{
    sbx__pbuf_u64(b, v);
    return b->oom ? -1 : 0;
}

int sbx__msg_u64_decode(const sbx_frame *f, uint64_t *out)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint64_t v = sbx__pcur_u64(&c);
    if (c.bad || c.left != 0)
        return -1;
    *out = v;
    return 0;
}
