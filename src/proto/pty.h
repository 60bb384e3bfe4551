/*
 * PTY session messages of the agent protocol (version 3), kept apart from
 * proto.h so other message families can grow there independently.
 * docs/agent-protocol.md ("PTY sessions") and docs/terminals.md describe them.
 */
#ifndef SBX_PROTO_PTY_H
#define SBX_PROTO_PTY_H

#include "proto/proto.h"

enum sbx_proto_pty_type {
    /* host -> agent, new channel: u32 rows, u32 cols, then an EXEC payload */
    SBX_MSG_PTY_OPEN = 0x30,
    /* agent -> host: u32 session id, u64 offset of the next PTY_OUT byte, u64 of PTY_ERR */
    SBX_MSG_PTY_INFO = 0x31,
    SBX_MSG_PTY_OUT = 0x32, /* agent -> host: u64 offset, bytes (the terminal, or stdout) */
    SBX_MSG_PTY_ERR = 0x33, /* agent -> host: u64 offset, bytes (stderr, pipe mode) */
    /* host -> agent, new channel: u32 session id, u32 flags (1: takeover), u64 since */
    SBX_MSG_PTY_ATTACH = 0x34,
    SBX_MSG_PTY_RESIZE = 0x35, /* host -> agent: u32 rows, u32 cols */
    SBX_MSG_PTY_SIGNAL = 0x36, /* host -> agent: u32 signal number (Linux numbering) */
    SBX_MSG_PTY_DETACH = 0x37, /* host -> agent: empty; STATUS 0 ends the channel */
};

/* PTY_OPEN flags, over the EXEC flags (SBX_EXEC_SHELL: argv[0] is a shell command). */
enum {
    SBX_PTY_BOX_SHELL = 1u << 8, /* run the box's shell (argv is ignored) */
    SBX_PTY_PIPES = 1u << 9,     /* pipe mode: stdout and stderr apart, no terminal */
};
#define SBX_PTY_ATTACH_TAKEOVER 1u

/* Limits both sides hold to. */
#define SBX_PROTO_PTY_SESSIONS 256
#define SBX_PTY_WINDOW (1u << 20) /* bytes of output each session keeps per stream */
#define SBX_PTY_MAX_DIM 4096      /* rows and cols above this are refused */

/* The name of a PTY message type, or NULL. */
const char *sbx__proto_pty_type_name(uint8_t type);

typedef struct {
    uint32_t rows, cols;
    sbx_msg_exec *exec; /* flags, cwd, user, argv, env (timeout and limit unused) */
} sbx_msg_pty_open;

int sbx__msg_pty_open_encode(sbx_pbuf *b, uint32_t rows, uint32_t cols, uint32_t flags,
                             const char *cwd, const char *user, const char *const *argv,
                             const char *const *env, const char *const *env2);
/* Free with sbx__msg_pty_open_free. */
int sbx__msg_pty_open_decode(const sbx_frame *f, sbx_msg_pty_open *out);
void sbx__msg_pty_open_free(sbx_msg_pty_open *m);

typedef struct {
    uint32_t id;
    uint64_t out_offset, err_offset;
} sbx_msg_pty_info;
int sbx__msg_pty_info_encode(sbx_pbuf *b, const sbx_msg_pty_info *m);
int sbx__msg_pty_info_decode(const sbx_frame *f, sbx_msg_pty_info *out);

typedef struct {
    uint32_t id, flags;
    uint64_t since;
} sbx_msg_pty_attach;
int sbx__msg_pty_attach_encode(sbx_pbuf *b, const sbx_msg_pty_attach *m);
int sbx__msg_pty_attach_decode(const sbx_frame *f, sbx_msg_pty_attach *out);

/* PTY_RESIZE (a = rows, b = cols) and PTY_SIGNAL (a = signal, b absent). */
int sbx__msg_pty_resize_decode(const sbx_frame *f, uint32_t *rows, uint32_t *cols);
int sbx__msg_pty_signal_decode(const sbx_frame *f, uint32_t *signo);

/* PTY_OUT / PTY_ERR: the offset, and the bytes (pointing into the frame). */
int sbx__msg_pty_data_decode(const sbx_frame *f, uint64_t *offset, const uint8_t **data,
                             uint32_t *len);

#endif /* SBX_PROTO_PTY_H */
