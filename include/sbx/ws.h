/*
 * sbx remote kit, WebSocket: an RFC 6455 client on the context's loop, for
 * providers whose service streams over a WebSocket (a PTY of OpenSandbox,
 * say). docs/remote-kit/ws.md walks through it.
 *
 * A connection is made through an sbx_http_client (include/sbx/http.h), so
 * it goes where that client's requests go: its base URL (http:// becomes a
 * plain connection, https:// a TLS one), its unix socket, its TLS files and
 * its default headers, which the upgrade request carries ("Authorization:
 * Bearer ...").
 *
 * Life of a connection, as an sbx_http_request's: build it (sbx_ws_new and
 * the setters), then sbx_ws_connect() it on an op's loop, from any thread.
 * From then on the connection owns it. Its callbacks run on the loop
 * thread, never inside the call that caused them: on_open at most once,
 * on_message for each message, on_drain when the send queue empties, and
 * the close callback exactly once, last; after the close callback returns
 * the connection is freed. sbx_ws_send, sbx_ws_close, sbx_ws_cancel and the
 * other calls on a connected object are loop-thread only, and valid until
 * the close callback has returned.
 *
 * What it does itself: the opening handshake (Sec-WebSocket-Key and the
 * check of Sec-WebSocket-Accept, a subprotocol when asked for), masking,
 * reassembling fragmented messages, pong for every ping, the closing
 * handshake both ways, and failing the connection with the close code RFC
 * 6455 names when the server breaks the protocol. No extension
 * (permessage-deflate) is offered.
 */
#ifndef SBX_WS_H
#define SBX_WS_H

#include <sbx.h>
#include <sbx/http.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sbx_ws sbx_ws;

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

/* --- building a connection ------------------------------------------------ */

/*
 * A WebSocket to `path` under `c`'s base URL ("/ws/pty?id=3": escape
 * segments and query values with sbx_http_escape). It holds a reference to
 * `c`. Writes the object to *out: the caller's until sbx_ws_connect
 * succeeds (sbx_ws_free frees it before then). SBX_EINVAL for a path not
 * starting with '/' or holding spaces or control bytes, SBX_ENOMEM. Any
 * thread.
 */
SBX_EXPORT int sbx_ws_new(sbx_http_client *c, const char *path, sbx_ws **out, sbx_error **err);
/* Frees a connection never connected (NULL is fine); a connected one is freed after its close. */
SBX_EXPORT void sbx_ws_free(sbx_ws *ws);

/*
 * Asks for a subprotocol (Sec-WebSocket-Protocol); call it once per name,
 * in order of preference. The server picks one or none: sbx_ws_protocol
 * says which. A server that picks one not asked for fails the handshake.
 * SBX_EINVAL for a name that is not an HTTP token, SBX_ENOMEM.
 */
SBX_EXPORT int sbx_ws_add_protocol(sbx_ws *ws, const char *protocol);
/*
 * A header of the upgrade request, over the client's of the same name.
 * The handshake's own (Host, Upgrade, Connection, Sec-WebSocket-*) are
 * refused: SBX_EINVAL, as for a name or value holding CR or LF.
 */
SBX_EXPORT int sbx_ws_set_header(sbx_ws *ws, const char *name, const char *value);
/*
 * Seconds from sbx_ws_connect to an open connection, connecting, TLS and
 * the upgrade included (default 30); past it the connection ends with
 * SBX_ETIMEDOUT. The client's connect timeout bounds the connect alone.
 */
SBX_EXPORT void sbx_ws_set_timeout(sbx_ws *ws, double seconds);
/* Seconds to wait for the server's close frame and its end of the connection (default 5). */
SBX_EXPORT void sbx_ws_set_close_timeout(sbx_ws *ws, double seconds);
/* The largest message received (all its fragments; 0: the default); larger ends it (1009). */
SBX_EXPORT void sbx_ws_set_max_message(sbx_ws *ws, size_t bytes);
/* The most bytes sbx_ws_send queues (0: the default); see sbx_ws_send. */
SBX_EXPORT void sbx_ws_set_max_queue(sbx_ws *ws, size_t bytes);

/* The connection is open: messages flow; sends queued before it go out now. */
typedef void (*sbx_ws_open_cb)(sbx_ws *ws, void *user);
/*
 * A message: SBX_WS_TEXT (valid UTF-8, checked) or SBX_WS_BINARY, whole
 * (fragments joined); or a control frame: SBX_WS_PING (already answered
 * with a pong) or SBX_WS_PONG (at most 125 bytes). `data` is the
 * connection's, valid during the call; it is followed by a NUL byte that
 * `len` does not count.
 */
typedef void (*sbx_ws_message_cb)(sbx_ws *ws, int opcode, const void *data, size_t len, void *user);
/* Everything sbx_ws_send queued has been handed to the socket: a paused producer may go on. */
typedef void (*sbx_ws_drain_cb)(sbx_ws *ws, void *user);
/*
 * The end, exactly once and last. `status` is the close code: the
 * server's (SBX_WS_NO_STATUS when its close frame had none), or the one
 * this side failed the connection with (1002, 1007, 1009), or
 * SBX_WS_ABNORMAL when no close frame was exchanged; `reason` its reason
 * ("" when none). `code` is SBX_OK after a closing handshake, else:
 * SBX_EIO (the connection failed or ended without a close frame),
 * SBX_EPROTO (the server broke the protocol or the handshake: a wrong
 * Sec-WebSocket-Accept, a masked frame, a text message not UTF-8, one
 * larger than the maximum), SBX_ETIMEDOUT (no open connection within the
 * timeout, or no close from the server within the close timeout),
 * SBX_ECANCELED (sbx_ws_cancel, or the context ended), the client's status
 * map's code for a server that answered the upgrade with a status other
 * than 101 (401: SBX_EAUTH), SBX_ENOMEM. `err` (NULL when code is SBX_OK)
 * says what happened and is the callback's to free. The connection is
 * freed after the callback returns.
 */
typedef void (*sbx_ws_close_cb)(sbx_ws *ws, int status, const char *reason, int code,
                                sbx_error *err, void *user);

/* The optional callbacks (NULL: none); set them before sbx_ws_connect. */
SBX_EXPORT void sbx_ws_on_open(sbx_ws *ws, sbx_ws_open_cb cb);
SBX_EXPORT void sbx_ws_on_message(sbx_ws *ws, sbx_ws_message_cb cb);
SBX_EXPORT void sbx_ws_on_drain(sbx_ws *ws, sbx_ws_drain_cb cb);

/*
 * Connects `ws` on `loop` (sbx_op_loop(op)), `on_close` and the others
 * getting `user`. Any thread: from another one the loop starts it. On
 * success the connection owns `ws` until its close callback has returned.
 * On failure (SBX_EINVAL: no callback or loop, or connected already;
 * SBX_ENOMEM; SBX_ECANCELED: the context has ended) no callback runs and
 * the caller still owns `ws`. Never blocks.
 */
SBX_EXPORT int sbx_ws_connect(sbx_ws *ws, void *loop, sbx_ws_close_cb on_close, void *user,
                              sbx_error **err);

/* --- a connection -------------------------------------------------------- */

/*
 * Queues one message: SBX_WS_TEXT (`data` must be valid UTF-8), or
 * SBX_WS_BINARY, sent as one frame; or SBX_WS_PING / SBX_WS_PONG, at most
 * 125 bytes, sent ahead of queued messages. The bytes are copied. A send
 * before the open is queued and goes out once the handshake is done. The
 * queue is bounded (sbx_ws_set_max_queue): a message that does not fit
 * beside the bytes queued is refused with SBX_ESTATE, and one larger than
 * the bound with SBX_EINVAL. A producer that must not be refused watches
 * sbx_ws_queued and waits for the drain callback. Returns SBX_OK,
 * SBX_EINVAL (a bad opcode, text that is not UTF-8, a control message over
 * 125 bytes), SBX_ESTATE (closing or ended, or the queue is full),
 * SBX_ENOMEM. A failure of the connection itself comes to the close
 * callback, later. Loop thread; never blocks.
 */
SBX_EXPORT int sbx_ws_send(sbx_ws *ws, int opcode, const void *data, size_t len, sbx_error **err);
/* Bytes queued and not yet handed to the socket (frame headers included). Loop thread. */
SBX_EXPORT size_t sbx_ws_queued(const sbx_ws *ws);

/*
 * Starts the closing handshake: sends a close frame with `status` (1000,
 * 1001, 1003, 1007-1014 or 3000-4999; 0: a close frame without a code) and
 * `reason` (UTF-8, at most 123 bytes; NULL: none) after the messages
 * already queued, then waits (sbx_ws_set_close_timeout) for the server's
 * close frame and end of the connection. Messages that arrive meanwhile
 * are still delivered. The close callback follows. Before the open, it
 * cancels instead. Returns SBX_OK, SBX_EINVAL (a status not allowed on the
 * wire, a reason too long or not UTF-8), SBX_ESTATE (closing or ended
 * already). Loop thread.
 */
SBX_EXPORT int sbx_ws_close(sbx_ws *ws, int status, const char *reason, sbx_error **err);
/*
 * Drops the connection now, without a closing handshake: the close
 * callback comes (later, on the loop) with SBX_ECANCELED unless the end
 * was under way already. Loop thread; from an op's cancel callback, say.
 */
SBX_EXPORT void sbx_ws_cancel(sbx_ws *ws);
/*
 * Stops reading from the server (no more on_message until resumed), so a
 * slow consumer holds the server back through TCP instead of growing
 * memory. Before the open it holds messages from the open on (the
 * handshake still completes). A server close is not seen while paused
 * either. Loop thread, or before sbx_ws_connect.
 */
SBX_EXPORT void sbx_ws_pause(sbx_ws *ws);
SBX_EXPORT void sbx_ws_resume(sbx_ws *ws);
/* The subprotocol the server picked (from the open on), NULL when none. Loop thread. */
SBX_EXPORT const char *sbx_ws_protocol(const sbx_ws *ws);

#ifdef __cplusplus
}
#endif
#endif /* SBX_WS_H */
