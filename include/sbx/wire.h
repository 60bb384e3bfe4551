/*
 * sbx remote kit: incremental readers for the bodies of streaming HTTP
 * responses, for providers that talk to a hosted service (E2B, Daytona,
 * OpenSandbox, OpenShell). docs/remote-kit/streams.md describes them.
 *
 * - sbx_sse: Server-Sent Events (text/event-stream), interpreted exactly as
 *   the WHATWG HTML standard's "event stream interpretation" says.
 * - sbx_ndjson: newline-delimited JSON / JSON Lines, one callback per line.
 * - sbx_envelope: the 5-byte length-prefixed envelopes of the Connect
 *   streaming protocol and of gRPC-web, plus an encoder and a parser for a
 *   gRPC-web trailers block.
 *
 * Every reader is a push parser. The caller feeds the bytes as they arrive,
 * in any chunking: the same bytes give the same callbacks however they are
 * split. Callbacks run synchronously inside _feed (and _end), on the
 * caller's thread. A callback returning non-zero stops the reader: that
 * _feed returns the value, and so does every later _feed and _end, without
 * touching `err` (the callback knows why it stopped).
 *
 * Everything a reader holds is bounded by the limit given to its _new: a
 * larger event, line or message is refused with an error that names the
 * limit and the size seen. Stream errors are SBX_EPROTO (malformed or over
 * a limit) and SBX_ENOMEM; the message says what was wrong and at which
 * byte offset of the stream (counted from 0, over every byte fed). After an
 * error, every later _feed and _end returns the same code with a copy of
 * the same message. Misuse (a NULL reader, a feed after _end, a feed from
 * inside the reader's own callback) is SBX_EINVAL and leaves the reader as
 * it was.
 *
 * Nothing here blocks, does I/O or keeps global state. A reader may be used
 * by one thread at a time (readers are independent of each other); never
 * free a reader from inside its own callback.
 */
#ifndef SBX_WIRE_H
#define SBX_WIRE_H

#include <sbx.h>

#ifdef __cplusplus
extern "C" {
#endif

/* --- Server-Sent Events ---------------------------------------------------- */

typedef struct sbx_sse sbx_sse;

/* The limit an sbx_sse gets when created with max_event 0: 1 MiB. */
#define SBX_SSE_DEFAULT_MAX_EVENT ((size_t)1 << 20)

/*
 * One dispatched event. `type` is the event type ("message" when the event
 * named none), `data` its data lines joined with "\n" (`data_len` bytes,
 * NUL-terminated after them; it may hold NUL bytes), `last_id` the last
 * event ID of the stream ("" until an id field set one). All three are
 * valid UTF-8 (invalid bytes in the stream become U+FFFD, as the standard
 * decodes) and are owned by the reader: valid only during the call.
 * Return 0 to go on, non-zero to stop the reader (_feed returns the value).
 */
typedef int (*sbx_sse_event_cb)(const char *type, const char *data, size_t data_len,
                                const char *last_id, void *user);

/*
 * A new SSE reader that calls `cb` (with `user`) for each event. An event
 * (its data lines joined, and its type) and an id may each hold at most
 * `max_event` bytes (0: SBX_SSE_DEFAULT_MAX_EVENT). Lines are not kept
 * whole, so a comment or an unknown field of any length costs nothing.
 * Writes the reader, which the caller frees with sbx_sse_free, to *out.
 * Returns SBX_OK, SBX_EINVAL (`cb` or `out` NULL) or SBX_ENOMEM. Never
 * blocks; thread-safe.
 */
SBX_EXPORT int sbx_sse_new(size_t max_event, sbx_sse_event_cb cb, void *user, sbx_sse **out,
                           sbx_error **err);

/*
 * Feeds the next `len` bytes of the stream (the reader copies what it
 * keeps; `data` may be NULL when len is 0). Calls the callback for every
 * event these bytes complete. Returns SBX_OK; SBX_EPROTO when an event or
 * an id is larger than max_event ("SSE event of more than 1048576 bytes at
 * byte offset 5120: refused (raise max_event)"); SBX_ENOMEM; SBX_EINVAL on
 * misuse; or the callback's non-zero value. Never blocks; one thread at a
 * time per reader.
 */
SBX_EXPORT int sbx_sse_feed(sbx_sse *r, const void *data, size_t len, sbx_error **err);

/*
 * Ends the stream. As the standard says, an event not yet ended by an empty
 * line (and a last line without its end) is discarded, not an error.
 * Returns SBX_OK, or the code an earlier error or stop left. A later _feed
 * is SBX_EINVAL; a second _end returns what the first did. Never blocks.
 */
SBX_EXPORT int sbx_sse_end(sbx_sse *r, sbx_error **err);

/*
 * The stream's last event ID (what a reconnecting client sends as
 * Last-Event-ID): set by an id field, taken when its event is dispatched,
 * and kept across events; "" when none. Owned by the reader, valid until
 * the next _feed or _free. NULL reader: "". Never blocks.
 */
SBX_EXPORT const char *sbx_sse_last_id(const sbx_sse *r);

/*
 * The reconnection time the stream asked for with its last valid retry
 * field (ASCII digits only), in milliseconds; -1 when none did (or `r` is
 * NULL). Never blocks.
 */
SBX_EXPORT long long sbx_sse_retry_ms(const sbx_sse *r);

/* Frees a reader (NULL is allowed); its callback is not called. */
SBX_EXPORT void sbx_sse_free(sbx_sse *r);

/* --- NDJSON / JSON Lines -------------------------------------------------- */

typedef struct sbx_ndjson sbx_ndjson;

/* The limit an sbx_ndjson gets when created with max_line 0: 1 MiB. */
#define SBX_NDJSON_DEFAULT_MAX_LINE ((size_t)1 << 20)

/*
 * sbx_ndjson_new option: check that each line is one JSON value (with
 * jansson, which then parses every line twice: once here, once in the
 * provider) and fail the stream with its line number when one is not.
 * Without it the reader only splits lines, and the callback gets the line
 * number to put in its own parse error.
 */
#define SBX_NDJSON_VALIDATE 0x1u

/*
 * One line: `len` bytes without its "\n" and without a "\r" before it,
 * NUL-terminated after them, owned by the reader and valid only during the
 * call. `line_no` counts every line of the stream from 1, blank ones too,
 * as an editor numbers them. Return 0 to go on, non-zero to stop.
 */
typedef int (*sbx_ndjson_line_cb)(const char *line, size_t len, uint64_t line_no, void *user);

/*
 * A new NDJSON reader calling `cb` (with `user`) for each line that is not
 * blank (empty, or only spaces, tabs and CRs: skipped). A line may hold at
 * most `max_line` bytes (0: SBX_NDJSON_DEFAULT_MAX_LINE). `flags`: 0 or
 * SBX_NDJSON_VALIDATE. Writes the reader (freed with sbx_ndjson_free) to
 * *out. Returns SBX_OK, SBX_EINVAL (NULL `cb` or `out`, unknown flags) or
 * SBX_ENOMEM. Never blocks; thread-safe.
 */
SBX_EXPORT int sbx_ndjson_new(size_t max_line, unsigned flags, sbx_ndjson_line_cb cb, void *user,
                              sbx_ndjson **out, sbx_error **err);

/*
 * Feeds the next `len` bytes (copied as needed; `data` may be NULL when len
 * is 0) and calls the callback for each line they complete. Returns SBX_OK;
 * SBX_EPROTO for a line longer than max_line ("NDJSON line 3 at byte offset
 * 2048 has more than 1048576 bytes: refused (raise max_line)") or, with
 * SBX_NDJSON_VALIDATE, a line that is not JSON; SBX_ENOMEM; SBX_EINVAL on
 * misuse; or the callback's non-zero value. Never blocks.
 */
SBX_EXPORT int sbx_ndjson_feed(sbx_ndjson *r, const void *data, size_t len, sbx_error **err);

/*
 * Ends the stream: a last line without "\n" is a line (as JSON Lines
 * readers take it), and the callback gets it here. Returns what _feed
 * would; a later _feed is SBX_EINVAL, a second _end returns what the first
 * did. Never blocks.
 */
SBX_EXPORT int sbx_ndjson_end(sbx_ndjson *r, sbx_error **err);

/* Frees a reader (NULL is allowed); its callback is not called. */
SBX_EXPORT void sbx_ndjson_free(sbx_ndjson *r);

/* --- Length-prefixed envelopes (Connect streaming, gRPC-web) --------------- */

/*
 * An envelope is 1 flag byte, the message length as 4 bytes big-endian,
 * then the message. The flag bits on the wire:
 */
#define SBX_ENVELOPE_FLAG_COMPRESSED 0x01u /* both: the message is compressed */
#define SBX_ENVELOPE_FLAG_END_STREAM 0x02u /* Connect: the end-of-stream message (JSON) */
#define SBX_ENVELOPE_FLAG_TRAILERS 0x80u   /* gRPC-web: the trailers block */

/* sbx_envelope_new options: the protocol (exactly one), and what it accepts. */
#define SBX_ENVELOPE_CONNECT 0x1u  /* known flags: COMPRESSED, END_STREAM */
#define SBX_ENVELOPE_GRPC_WEB 0x2u /* known flags: COMPRESSED, TRAILERS */
/* Deliver compressed messages (their flag set; the caller decompresses). */
#define SBX_ENVELOPE_ALLOW_COMPRESSED 0x100u

/* The limit an sbx_envelope gets when created with max_message 0: 4 MiB (gRPC's default). */
#define SBX_ENVELOPE_DEFAULT_MAX_MESSAGE ((size_t)4 << 20)

typedef struct sbx_envelope sbx_envelope;

/*
 * One envelope: its flag byte and its `len`-byte message (binary, not
 * NUL-terminated; it may point into the bytes just fed), owned by the
 * reader or the caller's buffer and valid only during the call. Return 0 to
 * go on, non-zero to stop.
 */
typedef int (*sbx_envelope_cb)(unsigned flags, const void *msg, size_t len, void *user);

/*
 * A new envelope reader calling `cb` (with `user`) for each envelope.
 * `flags`: SBX_ENVELOPE_CONNECT or SBX_ENVELOPE_GRPC_WEB, optionally with
 * SBX_ENVELOPE_ALLOW_COMPRESSED. A message may hold at most `max_message`
 * bytes (0: SBX_ENVELOPE_DEFAULT_MAX_MESSAGE; no header can say more than
 * 4 GiB - 1). Writes the reader (freed with sbx_envelope_free) to
 * *out. Returns SBX_OK, SBX_EINVAL (NULL `cb` or `out`, no protocol or
 * both, unknown flags) or SBX_ENOMEM. Never blocks; thread-safe.
 */
SBX_EXPORT int sbx_envelope_new(size_t max_message, unsigned flags, sbx_envelope_cb cb, void *user,
                                sbx_envelope **out, sbx_error **err);

/*
 * Feeds the next `len` bytes (copied as needed; `data` may be NULL when len
 * is 0) and calls the callback for each envelope they complete. Returns
 * SBX_OK, or SBX_EPROTO for: a flag bit the protocol does not define; a
 * compressed message the reader was not allowed; a message longer than
 * max_message (seen in its header, before any of it is buffered); any
 * byte after the END_STREAM or TRAILERS envelope, which must be the last.
 * Or SBX_ENOMEM, SBX_EINVAL on misuse, or the callback's non-zero value.
 * Never blocks.
 */
SBX_EXPORT int sbx_envelope_feed(sbx_envelope *r, const void *data, size_t len, sbx_error **err);

/*
 * Ends the stream. Returns SBX_OK when it ended between envelopes (whether
 * an END_STREAM or TRAILERS envelope came is the caller's to check: its
 * callback saw the flag), SBX_EPROTO when it ended inside one ("stream
 * ended inside a 5-byte envelope header", "... after N of M message
 * bytes"), or the code an earlier error or stop left. A later _feed is
 * SBX_EINVAL. Never blocks.
 */
SBX_EXPORT int sbx_envelope_end(sbx_envelope *r, sbx_error **err);

/* Frees a reader (NULL is allowed); its callback is not called. */
SBX_EXPORT void sbx_envelope_free(sbx_envelope *r);

/*
 * Encodes one envelope: the `flags` byte (0..255), `len` as 4 bytes
 * big-endian, then `len` bytes of `msg` (NULL when len is 0). Writes a
 * malloc'd buffer of len + 5 bytes, which the caller frees with sbx_free,
 * to *out and its size to *out_len. Returns SBX_OK, SBX_EINVAL (flags over
 * 255, len over 4 GiB - 1, NULL out parameters) or SBX_ENOMEM. Never
 * blocks; thread-safe.
 */
SBX_EXPORT int sbx_envelope_encode(unsigned flags, const void *msg, size_t len, void **out,
                                   size_t *out_len, sbx_error **err);

/*
 * Parses a gRPC-web trailers block (the message of a TRAILERS envelope):
 * "name: value" lines ending in CRLF (a bare LF is taken too), names in any
 * case. Writes grpc-status (decimal digits, at most 2147483647) to *status
 * and grpc-message, percent-decoded ("" when absent; an invalid escape is
 * kept as it is, as the gRPC spec asks), to *message: malloc'd, freed with
 * sbx_free; it is no longer than the block. Other trailers are ignored.
 * Reads exactly `len` bytes of `block` and copies what it keeps. Returns
 * SBX_OK; SBX_EPROTO for a line without ':', a missing, repeated or
 * non-numeric grpc-status, or a repeated grpc-message (the message says
 * which, at which byte offset of the block); SBX_EINVAL for NULL out
 * parameters; SBX_ENOMEM. Never blocks; thread-safe.
 */
SBX_EXPORT int sbx_grpc_trailers_parse(const void *block, size_t len, int *status, char **message,
                                       sbx_error **err);

#ifdef __cplusplus
}
#endif

#endif
