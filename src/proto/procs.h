/*
 * Process listings of the agent protocol (version 4): the box's PTY
 * sessions and background processes (PTY_LIST), and the box's processes as
 * its /proc shows them (PS). docs/agent-protocol.md ("Process listings")
 * and docs/terminals.md ("Background processes") describe them.
 */
#ifndef SBX_PROTO_PROCS_H
#define SBX_PROTO_PROCS_H

#include "proto/proto.h"

/*
 * A family of its own (0x40..), apart from the PTY messages (0x30..0x37),
 * so the two can grow independently.
 */
enum sbx_proto_procs_type {
    SBX_MSG_PTY_LIST = 0x40,     /* host -> agent, new channel: empty */
    SBX_MSG_PTY_SESSIONS = 0x41, /* agent -> host: the sessions; ends the channel */
    SBX_MSG_PS = 0x42,           /* host -> agent, new channel: empty */
    SBX_MSG_PS_LIST = 0x43,      /* agent -> host: the processes; ends the channel */
};

/* The version that has these messages and PTY_ATTACH's KEEP flag. */
#define SBX_PROTO_PROCS_VERSION 4

/* PTY_ATTACH flag (version 4): the session is not forgotten when this holder reads its end. */
#define SBX_PTY_ATTACH_KEEP 2u

/* Bounds both sides hold to (the decoder refuses more). */
#define SBX_PROCS_MAX_SESSIONS 256 /* = SBX_PROTO_PTY_SESSIONS */
#define SBX_PROCS_MAX_PS 4096
#define SBX_PROCS_COMMAND_MAX 256 /* bytes of a session's command */
#define SBX_PROCS_USER_MAX 64
#define SBX_PROCS_CMDLINE_MAX 512

/* PTY_SESSIONS entry flags. */
enum {
    SBX_SESSION_PIPES = 1u << 0, /* pipe mode (a background process), else a terminal */
    SBX_SESSION_HELD = 1u << 1,  /* a client holds it (opened or attached) */
    SBX_SESSION_ENDED = 1u << 2, /* its command ended: status holds the exit status */
};
/* PS_LIST flags. */
#define SBX_PS_TRUNCATED 1u /* the box has more processes than listed */

/* The name of a message type of this family, or NULL. */
const char *sbx__proto_procs_type_name(uint8_t type);

typedef struct {
    uint32_t id, pid, flags;
    uint32_t status;     /* with SBX_SESSION_ENDED: exit code, or 128+N for a signal N */
    uint64_t started_ms; /* unix time in ms */
    uint64_t out_bytes, err_bytes;
    char command[SBX_PROCS_COMMAND_MAX + 1];
} sbx_session_entry;

typedef struct {
    uint32_t pid, ppid, uid;
    char user[SBX_PROCS_USER_MAX + 1]; /* "" when the uid has no passwd entry */
    char state;                        /* R, S, D, Z, T, ... */
    uint64_t rss_kib, cpu_ms, started_ms;
    char cmdline[SBX_PROCS_CMDLINE_MAX + 1];
} sbx_ps_entry;

/* Strings longer than the bounds are cut (at a UTF-8 boundary it does not check). */
int sbx__msg_pty_sessions_encode(sbx_pbuf *b, const sbx_session_entry *e, size_t n);
/* *out: n entries in one allocation (free()). -1: malformed or over the bounds. */
int sbx__msg_pty_sessions_decode(const sbx_frame *f, sbx_session_entry **out, size_t *n);

int sbx__msg_ps_encode(sbx_pbuf *b, uint32_t flags, const sbx_ps_entry *e, size_t n);
int sbx__msg_ps_decode(const sbx_frame *f, uint32_t *flags, sbx_ps_entry **out, size_t *n);

#endif /* SBX_PROTO_PROCS_H */
