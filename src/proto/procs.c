/*
 * Process listings (protocol version 4): encoders, and decoders that check
 * every length before reading and refuse more entries or longer strings
 * than the bounds in procs.h, so a box cannot make the host allocate more
 * than those bounds allow.
 */
#include "proto/procs.h"

#include <stdlib.h>
#include <string.h>

const char *sbx__proto_procs_type_name(uint8_t type)
{
    switch (type) {
    case SBX_MSG_PTY_LIST:
        return "PTY_LIST";
    case SBX_MSG_PTY_SESSIONS:
        return "PTY_SESSIONS";
    case SBX_MSG_PS:
        return "PS";
    case SBX_MSG_PS_LIST:
        return "PS_LIST";
    default:
        return NULL;
    }
}

/* u32 length + at most `max` bytes of `s` (the rest is cut). */
static void put_str(sbx_pbuf *b, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    sbx__pbuf_u32(b, (uint32_t)n);
    sbx__pbuf_bytes(b, s, n);
}

int sbx__msg_pty_sessions_encode(sbx_pbuf *b, const sbx_session_entry *e, size_t n)
{
    if (n > SBX_PROCS_MAX_SESSIONS)
        n = SBX_PROCS_MAX_SESSIONS;
    sbx__pbuf_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        sbx__pbuf_u32(b, e[i].id);
        sbx__pbuf_u32(b, e[i].pid);
        sbx__pbuf_u32(b, e[i].flags);
        sbx__pbuf_u32(b, e[i].status);
        sbx__pbuf_u64(b, e[i].started_ms);
        sbx__pbuf_u64(b, e[i].out_bytes);
        sbx__pbuf_u64(b, e[i].err_bytes);
        put_str(b, e[i].command, SBX_PROCS_COMMAND_MAX);
    }
    return b->oom ? -1 : 0;
}

int sbx__msg_ps_encode(sbx_pbuf *b, uint32_t flags, const sbx_ps_entry *e, size_t n)
{
    if (n > SBX_PROCS_MAX_PS) {
        n = SBX_PROCS_MAX_PS;
        flags |= SBX_PS_TRUNCATED;
    }
    sbx__pbuf_u32(b, flags);
    sbx__pbuf_u32(b, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        sbx__pbuf_u32(b, e[i].pid);
        sbx__pbuf_u32(b, e[i].ppid);
        sbx__pbuf_u32(b, e[i].uid);
        put_str(b, e[i].user, SBX_PROCS_USER_MAX);
        sbx__pbuf_u8(b, (uint8_t)e[i].state);
        sbx__pbuf_u64(b, e[i].rss_kib);
        sbx__pbuf_u64(b, e[i].cpu_ms);
        sbx__pbuf_u64(b, e[i].started_ms);
        put_str(b, e[i].cmdline, SBX_PROCS_CMDLINE_MAX);
    }
    return b->oom ? -1 : 0;
}

/* --- decoding ------------------------------------------------------------ */

static void str(struct sbx_pcur *c, char *out, size_t max)
{
    out[0] = 0;
    uint32_t n = sbx__pcur_u32(c);
    if (c->bad || n == UINT32_MAX)
        return;
    if (n > max || n > c->left || memchr(c->p, 0, n)) {
        c->bad = 1;
        return;
    }
    memcpy(out, c->p, n);
    out[n] = 0;
    c->p += n;
    c->left -= n;
}

int sbx__msg_pty_sessions_decode(const sbx_frame *f, sbx_session_entry **out, size_t *n)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint32_t count = sbx__pcur_u32(&c);
    /* Each entry takes at least 44 bytes: a count the payload cannot hold is a lie. */
    if (c.bad || count > SBX_PROCS_MAX_SESSIONS || count > c.left / 44)
        return -1;
    sbx_session_entry *e = calloc(count ? count : 1, sizeof(*e));
    if (!e)
        return -1;
    for (uint32_t i = 0; i < count && !c.bad; i++) {
        e[i].id = sbx__pcur_u32(&c);
        e[i].pid = sbx__pcur_u32(&c);
        e[i].flags = sbx__pcur_u32(&c);
        e[i].status = sbx__pcur_u32(&c);
        e[i].started_ms = sbx__pcur_u64(&c);
        e[i].out_bytes = sbx__pcur_u64(&c);
        e[i].err_bytes = sbx__pcur_u64(&c);
        str(&c, e[i].command, SBX_PROCS_COMMAND_MAX);
        if (e[i].id == 0 || e[i].flags & ~7u)
            c.bad = 1;
    }
    if (c.bad || c.left) {
        free(e);
        return -1;
    }
    *out = e;
    *n = count;
    return 0;
}

int sbx__msg_ps_decode(const sbx_frame *f, uint32_t *flags, sbx_ps_entry **out, size_t *n)
{
    struct sbx_pcur c = {f->payload, f->len, 0};
    uint32_t fl = sbx__pcur_u32(&c);
    uint32_t count = sbx__pcur_u32(&c);
    /* At least 45 bytes per entry (both strings empty). */
    if (c.bad || (fl & ~SBX_PS_TRUNCATED) || count > SBX_PROCS_MAX_PS || count > c.left / 45)
        return -1;
    sbx_ps_entry *e = calloc(count ? count : 1, sizeof(*e));
    if (!e)
        return -1;
    for (uint32_t i = 0; i < count && !c.bad; i++) {
        e[i].pid = sbx__pcur_u32(&c);
        e[i].ppid = sbx__pcur_u32(&c);
        e[i].uid = sbx__pcur_u32(&c);
        str(&c, e[i].user, SBX_PROCS_USER_MAX);
        e[i].state = (char)sbx__pcur_u8(&c);
        e[i].rss_kib = sbx__pcur_u64(&c);
        e[i].cpu_ms = sbx__pcur_u64(&c);
        e[i].started_ms = sbx__pcur_u64(&c);
        str(&c, e[i].cmdline, SBX_PROCS_CMDLINE_MAX);
        /* A state is one printable letter (the kernel's R, S, D, Z, T, t, X, I, ...). */
        if (e[i].state < 'A' || e[i].state > 'z')
            c.bad = 1;
    }
    if (c.bad || c.left) {
        free(e);
        return -1;
    }
    *out = e;
    *flags = fl;
    *n = count;
    return 0;
}
