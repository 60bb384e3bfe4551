/*
 * PTY session messages (protocol version 3): encoders and decoders that check
 * every length before reading, as the rest of the codec does.
 */
#include "proto/pty.h"

#include <stdlib.h>
#include <string.h>

const char *sbx__proto_pty_type_name(uint8_t type)
{
    switch (type) {
    case SBX_MSG_PTY_OPEN:
        return "PTY_OPEN";
    case SBX_MSG_PTY_INFO:
        return "PTY_INFO";
    case SBX_MSG_PTY_OUT:
        return "PTY_OUT";
    case SBX_MSG_PTY_ERR:
        return "PTY_ERR";
    case SBX_MSG_PTY_ATTACH:
        return "PTY_ATTACH";
    case SBX_MSG_PTY_RESIZE:
        return "PTY_RESIZE";
    case SBX_MSG_PTY_SIGNAL:
        return "PTY_SIGNAL";
    case SBX_MSG_PTY_DETACH:
        return "PTY_DETACH";
    default:
        return NULL;
    }
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

int sbx__msg_pty_open_encode(sbx_pbuf *b, uint32_t rows, uint32_t cols, uint32_t flags,
                             const char *cwd, const char *user, const char *const *argv,
                             const char *const *env, const char *const *env2)
{
    sbx__pbuf_u32(b, rows);
    sbx__pbuf_u32(b, cols);
    return sbx__msg_exec_encode(b, flags, -1, 0, cwd, user, argv, env, env2);
}

int sbx__msg_pty_open_decode(const sbx_frame *f, sbx_msg_pty_open *out)
{
    if (f->len < 8)
        return -1;
    uint32_t rows = get32(f->payload), cols = get32(f->payload + 4);
    if (rows > SBX_PTY_MAX_DIM || cols > SBX_PTY_MAX_DIM)
        return -1;
    /* The rest is exactly an EXEC payload: one decoder checks it. */
    sbx_frame inner = {f->type, f->channel, f->payload + 8, f->len - 8};
    sbx_msg_exec *e = NULL;
    if (sbx__msg_exec_decode(&inner, &e) < 0)
        return -1;
    out->rows = rows;
    out->cols = cols;
    out->exec = e;
    return 0;
}

void sbx__msg_pty_open_free(sbx_msg_pty_open *m)
{
    if (m) {
        free(m->exec);
        m->exec = NULL;
    }
}

int sbx__msg_pty_info_encode(sbx_pbuf *b, const sbx_msg_pty_info *m)
{
    sbx__pbuf_u32(b, m->id);
    sbx__pbuf_u64(b, m->out_offset);
    sbx__pbuf_u64(b, m->err_offset);
    return b->oom ? -1 : 0;
}

int sbx__msg_pty_info_decode(const sbx_frame *f, sbx_msg_pty_info *out)
{
    if (f->len != 20)
        return -1;
    out->id = get32(f->payload);
    out->out_offset = get64(f->payload + 4);
    out->err_offset = get64(f->payload + 12);
    return 0;
}

int sbx__msg_pty_attach_encode(sbx_pbuf *b, const sbx_msg_pty_attach *m)
{
    sbx__pbuf_u32(b, m->id);
    sbx__pbuf_u32(b, m->flags);
    sbx__pbuf_u64(b, m->since);
    return b->oom ? -1 : 0;
}

int sbx__msg_pty_attach_decode(const sbx_frame *f, sbx_msg_pty_attach *out)
{
    if (f->len != 16)
        return -1;
    out->id = get32(f->payload);
    out->flags = get32(f->payload + 4);
    out->since = get64(f->payload + 8);
    /* KEEP (2) is version 4's (proto/procs.h); other bits are refused. */
    return out->flags & ~(SBX_PTY_ATTACH_TAKEOVER | 2u) ? -1 : 0;
}

int sbx__msg_pty_resize_decode(const sbx_frame *f, uint32_t *rows, uint32_t *cols)
{
    if (f->len != 8)
        return -1;
    uint32_t r = get32(f->payload), c = get32(f->payload + 4);
    if (r > SBX_PTY_MAX_DIM || c > SBX_PTY_MAX_DIM)
        return -1;
    *rows = r;
    *cols = c;
    return 0;
}

int sbx__msg_pty_signal_decode(const sbx_frame *f, uint32_t *signo)
{
    if (f->len != 4)
        return -1;
    uint32_t s = get32(f->payload);
    if (s == 0 || s > 64)
        return -1;
    *signo = s;
    return 0;
}

int sbx__msg_pty_data_decode(const sbx_frame *f, uint64_t *offset, const uint8_t **data,
                             uint32_t *len)
{
    if (f->len < 8)
        return -1;
    uint64_t off = get64(f->payload);
    /* An offset this large cannot come from a real stream: the sum below would wrap. */
    if (off > UINT64_MAX / 2)
        return -1;
    *offset = off;
    *data = f->payload + 8;
    *len = f->len - 8;
    return 0;
}
