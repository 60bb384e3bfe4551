/*
 * sbx remote kit, WebSocket (RFC 6455): the opcodes, close codes and
 * limits of the protocol, for the client on the context's loop that
 * src/remote/ws_frame.c's codec is written for.
 */
#ifndef SBX_WS_H
#define SBX_WS_H

#include <sbx.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Message opcodes (RFC 6455 section 5.2). */
#define SBX_WS_TEXT 0x1
#define SBX_WS_BINARY 0x2
#define SBX_WS_CLOSE 0x8
#define SBX_WS_PING 0x9
#define SBX_WS_PONG 0xA

/* Close status codes (RFC 6455 section 7.4.1). */
#define SBX_WS_NORMAL 1000
#define SBX_WS_GOING_AWAY 1001
#define SBX_WS_PROTOCOL_ERROR 1002
#define SBX_WS_UNSUPPORTED_DATA 1003
#define SBX_WS_NO_STATUS 1005 /* received only: a close frame without a code */
#define SBX_WS_ABNORMAL 1006  /* received only: no close frame at all */
#define SBX_WS_INVALID_DATA 1007
#define SBX_WS_POLICY 1008
#define SBX_WS_TOO_BIG 1009
#define SBX_WS_INTERNAL_ERROR 1011

/* The largest message received whole, by default: 16 MiB. */
#define SBX_WS_DEFAULT_MAX_MESSAGE ((size_t)16 << 20)
/* The largest number of bytes waiting to be sent, by default: 16 MiB. */
#define SBX_WS_DEFAULT_MAX_QUEUE ((size_t)16 << 20)

#ifdef __cplusplus
}
#endif
#endif /* SBX_WS_H */
