/*
 * The WebSocket codec (RFC 6455) under the remote kit's client (ws.c),
 * kept apart because it is pure: no I/O, no loop, no global state, no
 * randomness (the caller brings the masking keys and the nonce), so the
 * unit tests and fuzz/fuzz_ws.c reach all of it.
 *
 * - the decoder reads frames as they arrive, in any chunking, and gives
 *   one event per message (fragments joined) or control frame;
 * - the encoder writes client frames, masked;
 * - close frame payloads are built and parsed;
 * - the opening handshake: the key, the accept value it expects, and a
 *   reader and checker of the server's response head.
 */
#ifndef SBX_REMOTE_WS_FRAME_H
#define SBX_REMOTE_WS_FRAME_H

#include "core/internal.h"

#include <sbx/ws.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SBX__WS_CONTINUATION 0x0
/* Control frames carry at most this many payload bytes, and are never fragmented. */
#define SBX__WS_MAX_CONTROL 125
/* A close reason: what fits in a control frame beside the 2-byte code. */
#define SBX__WS_MAX_REASON 123
/* The server's response to the upgrade, status line and headers. */
#define SBX__WS_MAX_HEAD ((size_t)64 << 10)
/* A frame header: 2 bytes, 8 of extended length, 4 of masking key. */
#define SBX__WS_MAX_HEADER 14

/* --- decoding ------------------------------------------------------------- */

/* Where a UTF-8 check is inside a character: continuation bytes still owed and their range. */
typedef struct {
    uint8_t need;
    uint8_t lo, hi;
} sbx__utf8;

typedef struct {
    size_t max_message;
    bool from_client; /* frames must be masked (a test's or the fuzzer's server side) */
    /* The frame being read. */
    uint8_t hdr[SBX__WS_MAX_HEADER];
    uint8_t hdr_len, hdr_need;
    bool in_payload;
    bool fin;
    int opcode;
    uint8_t key[4];
    bool masked;
    uint64_t left;      /* payload bytes of this frame not yet read */
    uint64_t frame_pos; /* payload bytes of this frame read (the mask's phase) */
    uint64_t frame_at;  /* the stream offset of this frame's first byte */
    /* The data message being joined: its opcode (0: none), bytes, UTF-8 state. */
    int msg_opcode;
    sbx_buf msg;
    sbx__utf8 utf8;
    /* The control frame being read. */
    uint8_t ctl[SBX__WS_MAX_CONTROL + 1];
    size_t ctl_len;
    bool reset_msg; /* the last event was the message: its bytes go at the next call */
    bool closed;    /* a close frame was read: what follows is not read */
    uint64_t offset;
    /* The first failure, answered again by every later call. */
    sbx_error *failed;
    int close_code;
} sbx__ws_decoder;

typedef struct {
    int opcode;          /* SBX_WS_TEXT, _BINARY, _CLOSE, _PING or _PONG */
    const uint8_t *data; /* NUL-terminated after len bytes; the decoder's until its next call */
    size_t len;
    /* SBX_WS_CLOSE: the code (SBX_WS_NO_STATUS when the payload had none) and reason. */
    int status;
    char reason[SBX__WS_MAX_REASON + 1];
} sbx__ws_event;

/* A decoder of server frames (from_client: of client frames, which must be masked). */
SBX_INTERNAL void sbx__ws_decoder_init(sbx__ws_decoder *d, size_t max_message, bool from_client);
SBX_INTERNAL void sbx__ws_decoder_free(sbx__ws_decoder *d);

/*
 * Reads from `data` (`len` bytes) until an event completes. Sets *used to
 * the bytes read. Returns 1 with *ev when a message or control frame
 * completed (the bytes after it are not read: call again with them), 0
 * when all `len` bytes were read without completing one, or a failure:
 * SBX_EPROTO (the stream broke RFC 6455: the message says what and at
 * which byte offset) or SBX_ENOMEM, with sbx__ws_decoder_close_code() the
 * close code to fail the connection with (1002, 1007, 1009, 1011). A
 * failure is final: later calls return it again (a copy of its error).
 * After a close frame, later bytes are read and ignored (*used = len).
 */
SBX_INTERNAL int sbx__ws_decode(sbx__ws_decoder *d, const void *data, size_t len, size_t *used,
                                sbx__ws_event *ev, sbx_error **err);
SBX_INTERNAL int sbx__ws_decoder_close_code(const sbx__ws_decoder *d);

/* Checks `len` more bytes of a UTF-8 text; false at the first invalid one (*bad: its index). */
SBX_INTERNAL bool sbx__utf8_feed(sbx__utf8 *u, const uint8_t *s, size_t len, size_t *bad);
/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), whole. */
SBX_INTERNAL bool sbx__utf8_valid(const void *s, size_t len);

/* --- encoding ------------------------------------------------------------- */

/* The bytes of a frame carrying `len` payload bytes, masked or not. */
SBX_INTERNAL size_t sbx__ws_frame_size(uint64_t len, bool masked);
/*
 * Writes one frame to `out` (sbx__ws_frame_size bytes): `opcode`, FIN as
 * `fin`, the payload masked with `key` (NULL: unmasked, as a server
 * sends). Returns the bytes written.
 */
SBX_INTERNAL size_t sbx__ws_frame_write(uint8_t *out, int opcode, bool fin, const void *payload,
                                        size_t len, const uint8_t *key);
/* XORs `len` bytes with `key`, starting at phase `pos` of the key. */
SBX_INTERNAL void sbx__ws_mask(uint8_t *data, size_t len, const uint8_t key[4], uint64_t pos);

/* --- close frames --------------------------------------------------------- */

/* Whether `status` may travel in a close frame (1000-1003, 1007-1014, 3000-4999). */
SBX_INTERNAL bool sbx__ws_status_ok(int status);
/*
 * A close frame's payload: `status` (0: none, and then no reason either)
 * and `reason` cut at a character boundary to 123 bytes (NULL: none).
 * Returns its length (0 to 125).
 */
SBX_INTERNAL size_t sbx__ws_close_payload(uint8_t out[SBX__WS_MAX_CONTROL], int status,
                                          const char *reason);
/*
 * Reads a close frame's payload: 0 with *status (SBX_WS_NO_STATUS when
 * empty) and *reason (NUL-terminated), or the close code to fail with:
 * 1002 for one byte or a code not allowed on the wire, 1007 for a reason
 * that is not UTF-8.
 */
SBX_INTERNAL int sbx__ws_close_parse(const uint8_t *p, size_t len, int *status,
                                     char reason[SBX__WS_MAX_REASON + 1]);

/* --- the opening handshake ------------------------------------------------ */

/* Sec-WebSocket-Key: the 16 nonce bytes in base64 (24 characters). */
SBX_INTERNAL void sbx__ws_key(const uint8_t nonce[16], char out[25]);
/* The Sec-WebSocket-Accept a server must answer `key` with: base64(SHA-1(key GUID)). */
SBX_INTERNAL void sbx__ws_accept(const char *key, char out[29]);

/* The server's response head, read as it arrives. */
typedef struct {
    sbx_buf buf;
    bool done;
} sbx__ws_head;

/*
 * Reads response bytes until the blank line ending the head; *used: the
 * bytes that belong to the head (what follows is frames). Returns 1 when
 * the head is whole, 0 when more is needed, SBX_EPROTO when it passes
 * SBX__WS_MAX_HEAD, SBX_ENOMEM.
 */
SBX_INTERNAL int sbx__ws_head_feed(sbx__ws_head *h, const void *data, size_t len, size_t *used,
                                   sbx_error **err);
SBX_INTERNAL void sbx__ws_head_free(sbx__ws_head *h);

/*
 * The client's checks of a whole head (RFC 6455 section 4.1): status 101,
 * Upgrade: websocket, Connection: upgrade, the Sec-WebSocket-Accept `key`
 * expects, no extension, and a subprotocol (if any) among `protocols`.
 * Returns SBX_OK with *protocol (malloc'd, NULL when none) or SBX_EPROTO
 * (SBX_ENOMEM) saying what was wrong. *status is the response's status (0
 * when the status line is not one) either way.
 */
SBX_INTERNAL int sbx__ws_head_check(const sbx__ws_head *h, const char *key,
                                    const char *const *protocols, size_t n_protocols, int *status,
                                    char **protocol, sbx_error **err);

#endif
