/*
 * TCP forwarding through the agent (docs/agent-protocol.md, "Forwarding";
 * docs/networking.md): the FORWARD message, the host's parser of the
 * agent's answer, and the byte relay both sides run once a stream carries
 * a forwarded connection. Plain C and libc only: the agent links it.
 *
 * A forwarding stream is an agent connection used once: the host sends
 * HELLO and FORWARD(port) on channel 1, the agent connects to
 * 127.0.0.1:port in the box and answers STATUS on channel 1 (errnum 0: the
 * connection is up). From then on the stream carries no frames: its bytes
 * are the forwarded connection's, both ways, and a shutdown of a write side
 * is passed on as one (half-close).
 */
#ifndef SBX_PROTO_FORWARD_H
#define SBX_PROTO_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

enum sbx_proto_forward_type {
    /* host -> agent, new channel, first and only frame after HELLO: u32 port, u32 flags (0) */
    SBX_MSG_FORWARD = 0x44, /* after the process listings (proto/procs.h, 0x40-0x43) */
};

/* The channel a forwarding stream's FORWARD and STATUS use. */
#define SBX_FORWARD_CHANNEL 1u
/* The largest frame payload the host accepts before the stream turns raw. */
#define SBX_FORWARD_MAX_REPLY 4096u
/* Bytes each relay direction buffers (both sides, per forwarded connection). */
#define SBX_RELAY_BUF (64u << 10)

/* The name of a forwarding message type, or NULL. */
const char *sbx__proto_forward_type_name(uint8_t type);

int sbx__msg_forward_encode(sbx_pbuf *b, uint32_t port, uint32_t flags);
/* 0 with *port in 1..65535, or -1 for a malformed payload. */
int sbx__msg_forward_decode(const sbx_frame *f, uint32_t *port, uint32_t *flags);

/*
 * The host's reading of the agent's answer: HELLO, then STATUS on
 * SBX_FORWARD_CHANNEL. Feed the agent's bytes with sbx__forward_reply_feed:
 *   0   more bytes needed;
 *   1   forwarding is up; *rest and *rest_len are bytes already received past the
 *       STATUS frame (the box's first data), pointing into the parser;
 *  -1   refused or malformed: `msg` says why (a bounded copy of the agent's
 *       message, or what was wrong with its bytes), *errnum its errno (or EPROTO).
 * Bytes after a -1 or a 1 must not be fed. Total input before the answer is
 * bounded (SBX_FORWARD_MAX_REPLY per frame, two frames).
 */
typedef struct {
    sbx_proto_reader rd;
    bool got_hello;
    int state; /* 0 running, 1 up, -1 failed */
} sbx_forward_reply;

void sbx__forward_reply_init(sbx_forward_reply *p);
void sbx__forward_reply_free(sbx_forward_reply *p);
int sbx__forward_reply_feed(sbx_forward_reply *p, const void *data, size_t n, int *errnum,
                            char *msg, size_t msg_len, const uint8_t **rest, size_t *rest_len);

/* --- the relay: two non-blocking stream fds, bytes copied both ways ------- */

typedef struct {
    uint8_t *buf; /* SBX_RELAY_BUF bytes read from one side, to be written to the other */
    size_t off, len;
    bool eof;  /* the source said EOF (or shut down its write side) */
    bool shut; /* EOF passed on: the destination's write side is shut down */
} sbx_relay_dir;

typedef struct {
    int fd[2];
    sbx_relay_dir dir[2]; /* dir[i]: from fd[i] to fd[1 - i] */
    bool failed;          /* a read or write failed: close both */
} sbx_relay;

enum { SBX_RELAY_IN = 1, SBX_RELAY_OUT = 2 };

/* Buffers for two connected non-blocking fds (not owned). -1 when out of memory. */
int sbx__relay_init(sbx_relay *r, int a, int b);
/* Queues bytes to be written to fd[1 - from] first (data already read from fd[from]). */
int sbx__relay_preload(sbx_relay *r, int from, const void *data, size_t n);
/*
 * Moves what the fds allow without blocking. `hup` (bit i: fd[i] reported
 * HUP or ERR) ends a relay that can make no more progress. Returns 1 while
 * bytes may still flow, 0 once both directions ended cleanly, -1 when a read
 * or write failed (both ends should close: the peers see a reset or EOF).
 */
int sbx__relay_step(sbx_relay *r, unsigned hup);
/* What fd[side] waits for: SBX_RELAY_IN and/or SBX_RELAY_OUT. */
unsigned sbx__relay_want(const sbx_relay *r, int side);
/* Frees the buffers (the fds are the caller's). */
void sbx__relay_free(sbx_relay *r);

#endif /* SBX_PROTO_FORWARD_H */
