/*
 * The WebSocket codec (src/remote/ws_frame.c): RFC 6455's own examples
 * (section 5.7, and the handshake's of sections 1.3 and 4.2.2), the
 * encoder's frames, every protocol error with the close code the RFC names
 * for it, close payloads, and the checks of the server's 101. Every stream
 * is also fed a byte at a time and in chunks of 2, 3, 5 and 7 bytes: the
 * events and the error must be the same as when it is fed whole.
 */
#include "tap.h"
#include "common.h"
#include "lib/text.h"

#include "remote/ws_frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a decoder said: one line per event, then the result. */
typedef struct {
    char *log;
    size_t len, cap;
    int rc;
    int close_code;
    char *err;
    size_t events;
} result;

static void log_add(result *r, const char *s, size_t n)
{
    text_append(&r->log, &r->len, &r->cap, s, n);
}

static void log_fmt(result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_fmt(result *r, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    log_add(r, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

static const char *op_name(int op)
{
    switch (op) {
    case SBX_WS_TEXT:
        return "text";
    case SBX_WS_BINARY:
        return "binary";
    case SBX_WS_CLOSE:
        return "close";
    case SBX_WS_PING:
        return "ping";
    case SBX_WS_PONG:
        return "pong";
    default:
        return "?";
    }
}

/* Decodes `in` in chunks of `chunk` bytes (0: whole), with `max` (0: the default). */
static result decode(const void *in, size_t len, size_t chunk, size_t max, bool from_client)
{
    result r = {0};
    sbx__ws_decoder d;
    sbx__ws_decoder_init(&d, max, from_client);
    const uint8_t *p = in;
    size_t i = 0;
    sbx_error *e = NULL;
    while (i < len) {
        size_t n = chunk && chunk < len - i ? chunk : len - i;
        size_t off = 0;
        while (off < n) {
            size_t used = 0, avail = n - off;
            sbx__ws_event ev;
            int rc = sbx__ws_decode(&d, p + i + off, avail, &used, &ev, &e);
            TAP_TRUE(used <= avail);
            off += used;
            if (rc < 0) {
                r.rc = rc;
                r.close_code = sbx__ws_decoder_close_code(&d);
                r.err = strdup(sbx_error_message(e));
                sbx_error_free(e);
                /* A failure is final: the same answer again. */
                e = NULL;
                TAP_EQ_INT(sbx__ws_decode(&d, "\x81\x00", 2, &used, &ev, &e), rc);
                TAP_EQ_STR(sbx_error_message(e), r.err);
                TAP_EQ_INT(used, 0);
                sbx_error_free(e);
                sbx__ws_decoder_free(&d);
                return r;
            }
            if (rc == 1) {
                TAP_EQ_INT(ev.data[ev.len], 0);
                r.events++;
                log_fmt(&r, "%s %zu:", op_name(ev.opcode), ev.len);
                log_add(&r, (const char *)ev.data, ev.len < 64 ? ev.len : 64);
                if (ev.opcode == SBX_WS_CLOSE)
                    log_fmt(&r, " [%d '%s']", ev.status, ev.reason);
                log_add(&r, "\n", 1);
            } else {
                TAP_EQ_INT(used, avail); /* 0: everything was read */
            }
        }
        i += n;
    }
    sbx__ws_decoder_free(&d);
    return r;
}

static void result_free(result *r)
{
    free(r->log);
    free(r->err);
    memset(r, 0, sizeof(*r));
}

/* Decodes whole and in every chunking; all must agree. Returns the whole run's result. */
static result decode_all(const void *in, size_t len, size_t max, bool from_client)
{
    result whole = decode(in, len, 0, max, from_client);
    static const size_t chunks[] = {1, 2, 3, 5, 7};
    for (size_t k = 0; k < SBX_ARRAY_SIZE(chunks); k++) {
        result c = decode(in, len, chunks[k], max, from_client);
        TAP_EQ_STR(c.log ? c.log : "", whole.log ? whole.log : "");
        TAP_EQ_INT(c.rc, whole.rc);
        TAP_EQ_INT(c.close_code, whole.close_code);
        TAP_EQ_STR(c.err ? c.err : "", whole.err ? whole.err : "");
        result_free(&c);
    }
    return whole;
}

static void expect_events(const void *in, size_t len, bool from_client, const char *want)
{
    result r = decode_all(in, len, 0, from_client);
    if (r.rc)
        TAP_FAIL("unexpected error: %s", r.err);
    TAP_EQ_STR(r.log ? r.log : "", want);
    result_free(&r);
}

static void expect_error(const void *in, size_t len, size_t max, int close_code, const char *msg)
{
    result r = decode_all(in, len, max, false);
    TAP_EQ_INT(r.rc, close_code == SBX_WS_INTERNAL_ERROR ? SBX_ENOMEM : SBX_EPROTO);
    TAP_EQ_INT(r.close_code, close_code);
    TAP_CONTAINS(r.err, msg);
    char code[32];
    snprintf(code, sizeof(code), "(close code %d)", close_code);
    TAP_CONTAINS(r.err, code);
    result_free(&r);
}

#define B(...) ((const uint8_t[]){__VA_ARGS__}), sizeof((const uint8_t[]){__VA_ARGS__})

static void test_rfc_examples(void)
{
    /* Section 5.7: a single-frame unmasked text message. */
    expect_events(B(0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f), false, "text 5:Hello\n");
    /* A single-frame masked text message: a client's, so the server side reads it ... */
    expect_events(B(0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58), true,
                  "text 5:Hello\n");
    /* ... and a client refuses it from a server. */
    expect_error(B(0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58), 0,
                 SBX_WS_PROTOCOL_ERROR, "at byte 0: a masked frame: a server never masks");
    /* A fragmented unmasked text message. */
    expect_events(B(0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f), false, "text 5:Hello\n");
    /* Unmasked ping, masked pong. */
    expect_events(B(0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f), false, "ping 5:Hello\n");
    expect_events(B(0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58), true,
                  "pong 5:Hello\n");
    /* 256 bytes binary in a single unmasked frame, and 64 KiB. */
    size_t n = 10 + 65536;
    uint8_t *big = calloc(1, n);
    memcpy(big, (const uint8_t[]){0x82, 0x7E, 0x01, 0x00}, 4);
    for (size_t i = 0; i < 256; i++)
        big[4 + i] = 'a' + i % 26;
    result r = decode_all(big, 4 + 256, 0, false);
    TAP_EQ_INT(r.rc, 0);
    TAP_EQ_INT(r.events, 1);
    TAP_CONTAINS(r.log, "binary 256:abcdefghijklmnopqrstuvwxyzabcdef");
    result_free(&r);
    memcpy(big, (const uint8_t[]){0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0}, 10);
    for (size_t i = 0; i < 65536; i++)
        big[10 + i] = 'A' + i % 26;
    r = decode(big, n, 0, 0, false); /* whole and in 4 KiB chunks: a byte at a time is slow */
    result c = decode(big, n, 4096, 0, false);
    TAP_EQ_INT(r.rc, 0);
    TAP_CONTAINS(r.log, "binary 65536:ABCDEFG");
    TAP_EQ_STR(c.log, r.log);
    result_free(&r);
    result_free(&c);
    free(big);
}

static void test_encoder(void)
{
    uint8_t out[64];
    const uint8_t key[4] = {0x37, 0xfa, 0x21, 0x3d};
    /* The RFC's masked "Hello", byte for byte, and its unmasked one. */
    size_t n = sbx__ws_frame_write(out, SBX_WS_TEXT, true, "Hello", 5, key);
    TAP_EQ_INT(n, 11);
    TAP_EQ_INT(n, sbx__ws_frame_size(5, true));
    TAP_TRUE(!memcmp(
        out, (const uint8_t[]){0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58},
        11));
    n = sbx__ws_frame_write(out, SBX_WS_TEXT, true, "Hello", 5, NULL);
    TAP_TRUE(n == 7 && !memcmp(out, "\x81\x05Hello", 7));
    /* The fragmented example's first frame: no FIN, then a continuation with it. */
    n = sbx__ws_frame_write(out, SBX_WS_TEXT, false, "Hel", 3, NULL);
    TAP_TRUE(n == 5 && !memcmp(out, "\x01\x03Hel", 5));
    n = sbx__ws_frame_write(out, SBX__WS_CONTINUATION, true, "lo", 2, NULL);
    TAP_TRUE(n == 4 && !memcmp(out, "\x80\x02lo", 4));
    /* Lengths: 7 bits up to 125, 16 bits up to 65535, then 64 bits; shortest form always. */
    static const size_t sizes[] = {0, 1, 125, 126, 127, 65535, 65536, 70001};
    for (size_t k = 0; k < SBX_ARRAY_SIZE(sizes); k++) {
        size_t len = sizes[k];
        uint8_t *pl = malloc(len + 1);
        for (size_t i = 0; i < len; i++)
            pl[i] = (uint8_t)(i * 31 + 7);
        size_t fs = sbx__ws_frame_size(len, true);
        TAP_EQ_INT(fs, len + 6 + (len < 126 ? 0 : len < 65536 ? 2 : 8));
        uint8_t *f = malloc(fs);
        TAP_EQ_INT(sbx__ws_frame_write(f, SBX_WS_BINARY, true, pl, len, key), fs);
        TAP_EQ_INT(f[1] & 0x7f, len < 126 ? len : len < 65536 ? 126 : 127);
        /* Read back by the server side, it is the payload again. */
        sbx__ws_decoder d;
        sbx__ws_decoder_init(&d, 0, true);
        sbx__ws_event ev;
        size_t used = 0;
        TAP_EQ_INT(sbx__ws_decode(&d, f, fs, &used, &ev, NULL), 1);
        TAP_EQ_INT(used, fs);
        TAP_EQ_INT(ev.opcode, SBX_WS_BINARY);
        TAP_EQ_INT(ev.len, len);
        TAP_TRUE(len == 0 || !memcmp(ev.data, pl, len));
        sbx__ws_decoder_free(&d);
        free(f);
        free(pl);
    }
    /* Masking at any phase is the byte-wise XOR. */
    uint8_t a[37], b[37];
    for (size_t i = 0; i < sizeof(a); i++)
        a[i] = b[i] = (uint8_t)(i * 13);
    sbx__ws_mask(a, sizeof(a), key, 3);
    for (size_t i = 0; i < sizeof(b); i++)
        b[i] ^= key[(i + 3) % 4];
    TAP_TRUE(!memcmp(a, b, sizeof(a)));
}

static void test_control_frames_between_fragments(void)
{
    /* A ping, a pong and a close may come between a message's fragments. */
    expect_events(
        B(0x01, 0x03, 'H', 'e', 'l', 0x89, 0x01, 'p', 0x0, 0x01, 'l', 0x8a, 0x00, 0x80, 0x01, 'o'),
        false, "ping 1:p\npong 0:\ntext 5:Hello\n");
    /* Binary in many fragments, empty ones included; then an empty text message. */
    expect_events(B(0x02, 0x00, 0x00, 0x02, 'a', 'b', 0x00, 0x00, 0x80, 0x01, 'c', 0x81, 0x00),
                  false, "binary 3:abc\ntext 0:\n");
    /* A UTF-8 character split across fragments is one character. */
    expect_events(B(0x01, 0x01, 0xC3, 0x80, 0x01, 0xA9), false, "text 2:\xC3\xA9\n");
    /* Close: its code and reason; what follows it is not read. */
    expect_events(B(0x88, 0x05, 0x03, 0xE8, 'b', 'y', 'e', 0xff, 0xff, 0x81), false,
                  "close 5:\003\350bye [1000 'bye']\n");
    expect_events(B(0x88, 0x00), false, "close 0: [1005 '']\n");
}

static void test_every_chunking_the_same(void)
{
    /* A mixed stream: messages of each kind, fragmented, with control frames between. */
    uint8_t s[600];
    size_t n = 0;
    for (int rep = 0; rep < 4; rep++) {
        n += sbx__ws_frame_write(s + n, SBX_WS_TEXT, false, "h\xC3", 2, NULL);
        n += sbx__ws_frame_write(s + n, SBX_WS_PING, true, "x", 1, NULL);
        n += sbx__ws_frame_write(s + n, SBX__WS_CONTINUATION, true, "\xA9llo", 4, NULL);
        uint8_t pl[130];
        memset(pl, 'z' - rep, sizeof(pl));
        n += sbx__ws_frame_write(s + n, SBX_WS_BINARY, true, pl, sizeof(pl), NULL);
    }
    n += sbx__ws_frame_write(s + n, SBX_WS_CLOSE, true, "\017\240done", 6, NULL);
    TAP_TRUE(n < sizeof(s));
    result r = decode_all(s, n, 0, false);
    TAP_EQ_INT(r.rc, 0);
    TAP_EQ_INT(r.events, 4 * 3 + 1);
    TAP_CONTAINS(r.log, "ping 1:x\ntext 6:h\xC3\xA9llo\nbinary 130:zzz");
    TAP_CONTAINS(r.log, "[4000 'done']");
    result_free(&r);
}

static void test_protocol_errors(void)
{
    /* Bits and opcodes. */
    expect_error(B(0xC1, 0x00), 0, SBX_WS_PROTOCOL_ERROR, "reserved bits 0x40 set");
    expect_error(B(0x81, 0x00, 0x92, 0x00), 0, SBX_WS_PROTOCOL_ERROR,
                 "at byte 2: reserved bits 0x10 set");
    expect_error(B(0x83, 0x00), 0, SBX_WS_PROTOCOL_ERROR, "unknown opcode 0x3");
    expect_error(B(0x8B, 0x00), 0, SBX_WS_PROTOCOL_ERROR, "unknown opcode 0xb");
    expect_error(B(0x09, 0x00), 0, SBX_WS_PROTOCOL_ERROR, "control frame (opcode 0x9) without FIN");
    expect_error(B(0x89, 0x7E, 0x00, 0x7E), 0, SBX_WS_PROTOCOL_ERROR, "more than 125 bytes");
    expect_error(B(0x80, 0x00), 0, SBX_WS_PROTOCOL_ERROR, "a continuation frame with no");
    expect_error(B(0x01, 0x01, 'a', 0x82, 0x01, 'b'), 0, SBX_WS_PROTOCOL_ERROR,
                 "at byte 3: a new message before the fragmented one ended");
    expect_error(B(0x82, 0x81, 1, 2, 3, 4, 'x'), 0, SBX_WS_PROTOCOL_ERROR, "a masked frame");
    /* Lengths. */
    expect_error(B(0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0), 0, SBX_WS_PROTOCOL_ERROR,
                 "a 64-bit length with its most significant bit set");
    expect_error(B(0x82, 0x7E, 0x00, 0x05), 0, SBX_WS_PROTOCOL_ERROR,
                 "a 16-bit length of 5, which fits in 7 bits");
    expect_error(B(0x82, 0x7F, 0, 0, 0, 0, 0, 0, 0xff, 0xff), 0, SBX_WS_PROTOCOL_ERROR,
                 "a 64-bit length of 65535, which fits in 16 bits");
    /* Too big: refused from the header, before its payload; fragments count together. */
    expect_error(B(0x82, 0x0B), 10, SBX_WS_TOO_BIG, "a message of more than 10 bytes");
    expect_error(B(0x82, 0x7F, 0, 0, 0, 1, 0, 0, 0, 0), 0, SBX_WS_TOO_BIG,
                 "more than 16777216 bytes");
    expect_error(B(0x02, 0x06, 1, 2, 3, 4, 5, 6, 0x80, 0x05), 10, SBX_WS_TOO_BIG,
                 "at byte 8: a message of more than 10 bytes (6 joined so far, a frame of 5)");
    expect_events(B(0x02, 0x06, 1, 2, 3, 4, 5, 6, 0x80, 0x04, 7, 8, 9, 10), false,
                  "binary 10:\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\n");
    /* Text that is not UTF-8: at its first bad byte, and a character cut at the end. */
    expect_error(B(0x81, 0x02, 0xC3, 0x28), 0, SBX_WS_INVALID_DATA,
                 "at byte 3: a text message that is not UTF-8 (byte 0x28)");
    expect_error(B(0x81, 0x01, 0xC3), 0, SBX_WS_INVALID_DATA, "ends inside a UTF-8 character");
    expect_error(B(0x01, 0x01, 0xE2, 0x80, 0x01, 0x82), 0, SBX_WS_INVALID_DATA,
                 "ends inside a UTF-8 character");
    expect_error(B(0x81, 0x02, 0xC0, 0x80), 0, SBX_WS_INVALID_DATA, "(byte 0xc0)"); /* overlong */
    expect_error(B(0x81, 0x03, 0xED, 0xA0, 0x80), 0, SBX_WS_INVALID_DATA, "(byte 0xa0)");
    expect_error(B(0x81, 0x04, 0xF4, 0x90, 0x80, 0x80), 0, SBX_WS_INVALID_DATA, "(byte 0x90)");
    expect_error(B(0x81, 0x01, 0xFF), 0, SBX_WS_INVALID_DATA, "(byte 0xff)");
    /* Binary is not checked. */
    expect_events(B(0x82, 0x01, 0xFF), false, "binary 1:\xff\n");
    /* Close frames. */
    expect_error(B(0x88, 0x01, 0x03), 0, SBX_WS_PROTOCOL_ERROR, "a close frame of 1 byte");
    static const int bad_codes[] = {0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad_codes); i++) {
        uint8_t f[4] = {0x88, 0x02, (uint8_t)(bad_codes[i] >> 8), (uint8_t)bad_codes[i]};
        char msg[80];
        snprintf(msg, sizeof(msg), "a close frame with code %d, which may not be sent",
                 bad_codes[i]);
        expect_error(f, sizeof(f), 0, SBX_WS_PROTOCOL_ERROR, msg);
    }
    expect_error(B(0x88, 0x04, 0x03, 0xE8, 0xC3, 0x28), 0, SBX_WS_INVALID_DATA,
                 "a close frame whose reason is not UTF-8");
}

static void test_close_payloads(void)
{
    uint8_t pl[SBX__WS_MAX_CONTROL];
    TAP_EQ_INT(sbx__ws_close_payload(pl, 1000, "bye"), 5);
    TAP_TRUE(!memcmp(pl, "\003\350bye", 5));
    TAP_EQ_INT(sbx__ws_close_payload(pl, 0, "ignored"), 0);
    TAP_EQ_INT(sbx__ws_close_payload(pl, 4001, NULL), 2);
    /* Cut to 123 bytes, never inside a character: 122 ASCII and a 2-byte one keep 122. */
    char reason[200];
    memset(reason, 'a', 122);
    memcpy(reason + 122, "\xC3\xA9zz", 5);
    size_t n = sbx__ws_close_payload(pl, 1001, reason);
    TAP_EQ_INT(n, 2 + 122);
    int st;
    char back[SBX__WS_MAX_REASON + 1];
    TAP_EQ_INT(sbx__ws_close_parse(pl, n, &st, back), 0);
    TAP_EQ_INT(st, 1001);
    TAP_EQ_INT(strlen(back), 122);
    memset(reason, 'b', 150);
    reason[150] = 0;
    TAP_EQ_INT(sbx__ws_close_payload(pl, 1000, reason), 125);
    TAP_EQ_INT(sbx__ws_close_parse(pl, 0, &st, back), 0);
    TAP_EQ_INT(st, SBX_WS_NO_STATUS);
    TAP_EQ_STR(back, "");
    TAP_EQ_INT(sbx__ws_close_parse(pl, 1, &st, back), SBX_WS_PROTOCOL_ERROR);
    TAP_EQ_INT(sbx__ws_close_parse((const uint8_t *)"\x03\xe8\xff", 3, &st, back),
               SBX_WS_INVALID_DATA);
    /* Codes a close frame may carry. */
    static const int ok[] = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010,
                             1011, 1012, 1014, 3000, 3999, 4000, 4999};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(ok); i++)
        TAP_TRUE(sbx__ws_status_ok(ok[i]));
    static const int bad[] = {0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++)
        TAP_TRUE(!sbx__ws_status_ok(bad[i]));
}

/* --- the handshake -------------------------------------------------------- */

static int check_head(const char *head, const char *const *protos, size_t n_protos, int *status,
                      char **proto, char **msg)
{
    sbx__ws_head h = {0};
    size_t used = 0;
    sbx_error *e = NULL;
    size_t len = strlen(head);
    int rc = sbx__ws_head_feed(&h, head, len, &used, &e);
    if (rc == 1) {
        /* Byte at a time, the same head and the same length used. */
        sbx__ws_head h1 = {0};
        size_t total = 0;
        for (size_t i = 0; i < len && !h1.done; i++) {
            size_t u = 0;
            TAP_TRUE(sbx__ws_head_feed(&h1, head + i, 1, &u, NULL) >= 0);
            total += u;
        }
        TAP_EQ_INT(total, used);
        TAP_EQ_STR(h1.buf.data, h.buf.data);
        sbx__ws_head_free(&h1);
        rc =
            sbx__ws_head_check(&h, "dGhlIHNhbXBsZSBub25jZQ==", protos, n_protos, status, proto, &e);
    }
    *msg = e ? strdup(sbx_error_message(e)) : NULL;
    sbx_error_free(e);
    sbx__ws_head_free(&h);
    return rc;
}

#define OK_HEAD                                                                                    \
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"            \
    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"

static void test_handshake(void)
{
    /* Section 1.3: the sample nonce, its key and the accept a server answers. */
    char key[25], acc[29];
    sbx__ws_key((const uint8_t *)"the sample nonce", key);
    TAP_EQ_STR(key, "dGhlIHNhbXBsZSBub25jZQ==");
    sbx__ws_accept(key, acc);
    TAP_EQ_STR(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");

    /* The head ends at its blank line: the frame after it is not the head's. */
    const char *resp = OK_HEAD "\r\n\x81\x02hi";
    sbx__ws_head h = {0};
    size_t used = 0;
    TAP_EQ_INT(sbx__ws_head_feed(&h, resp, strlen(resp), &used, NULL), 1);
    TAP_EQ_INT(used, strlen(OK_HEAD) + 2);
    sbx__ws_head_free(&h);

    int st;
    char *proto = NULL, *msg = NULL;
    TAP_EQ_INT(check_head(OK_HEAD "\r\n", NULL, 0, &st, &proto, &msg), SBX_OK);
    TAP_EQ_INT(st, 101);
    TAP_NULL(proto);
    /* Any case, lists, bare LFs. */
    TAP_EQ_INT(check_head("HTTP/1.1 101 OK\nupgrade: WebSocket\nCONNECTION: keep-alive, upgrade\n"
                          "sec-websocket-accept:  s3pPLMBiTxaQ9kYGzzhZRbK+xOo=  \n\n",
                          NULL, 0, &st, &proto, &msg),
               SBX_OK);
    /* A subprotocol asked for, picked; one not asked for, refused. */
    const char *const protos[] = {"v2.pty", "v1.pty"};
    TAP_EQ_INT(
        check_head(OK_HEAD "Sec-WebSocket-Protocol: v1.pty\r\n\r\n", protos, 2, &st, &proto, &msg),
        SBX_OK);
    TAP_EQ_STR(proto, "v1.pty");
    free(proto);
    proto = NULL;
    TAP_EQ_INT(
        check_head(OK_HEAD "Sec-WebSocket-Protocol: chat\r\n\r\n", protos, 2, &st, &proto, &msg),
        SBX_EPROTO);
    TAP_CONTAINS(msg, "the server picked the WebSocket subprotocol 'chat', which was not asked");
    free(msg);
    TAP_EQ_INT(
        check_head(OK_HEAD "Sec-WebSocket-Protocol: chat\r\n\r\n", NULL, 0, &st, &proto, &msg),
        SBX_EPROTO);
    free(msg);
    /* None picked though some were asked: allowed (sbx_ws_protocol says NULL). */
    TAP_EQ_INT(check_head(OK_HEAD "\r\n", protos, 2, &st, &proto, &msg), SBX_OK);
    TAP_NULL(proto);

    static const struct {
        const char *head;
        int status;
        const char *msg;
    } bad[] = {
        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Accept: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
         101,
         "Sec-WebSocket-Accept 'dGhlIHNhbXBsZSBub25jZQ==' is not 's3pPLMBiTxaQ9kYGzzhZRbK+xOo='"},
        {"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
         101, "no 'Upgrade: websocket' header"},
        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n"
         "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
         101, "no 'Upgrade: websocket' header"},
        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
         "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
         101, "no 'Connection: Upgrade' header"},
        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
         101, "has no Sec-WebSocket-Accept header"},
        {OK_HEAD "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n", 101,
         "more than one Sec-WebSocket-Accept"},
        {OK_HEAD "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n", 101,
         "turned on the WebSocket extension 'permessage-deflate', which was not asked for"},
        {"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", 404,
         "answered the WebSocket upgrade with 404 Not Found, not 101 Switching Protocols"},
        {"HTTP/1.1 200\r\n\r\n", 200, "with 200, not 101"},
        {"SSH-2.0-OpenSSH_9.2\r\n\r\n", 0, "is not HTTP/1.1: 'SSH-2.0-OpenSSH_9.2'"},
        {"HTTP/1.1 1010 x\r\n\r\n", 0, "is not HTTP/1.1"},
        {"HTTP/1.1 10\r\n\r\n", 0, "is not HTTP/1.1"},
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        TAP_EQ_INT(check_head(bad[i].head, NULL, 0, &st, &proto, &msg), SBX_EPROTO);
        TAP_EQ_INT(st, bad[i].status);
        TAP_CONTAINS(msg, bad[i].msg);
        TAP_NULL(proto);
        free(msg);
    }

    /* A head that never ends is refused at its bound, never kept whole. */
    sbx__ws_head big = {0};
    char line[1024];
    memset(line, 'x', sizeof(line) - 2);
    line[sizeof(line) - 2] = '\r';
    line[sizeof(line) - 1] = '\n';
    int rc = 0;
    size_t fed = 0;
    sbx_error *e = NULL;
    while (rc == 0 && fed < 2 * SBX__WS_MAX_HEAD) {
        rc = sbx__ws_head_feed(&big, line, sizeof(line), &used, &e);
        fed += sizeof(line);
    }
    TAP_EQ_INT(rc, SBX_EPROTO);
    TAP_CONTAINS(sbx_error_message(e), "passes 65536 bytes");
    TAP_TRUE(big.buf.len <= SBX__WS_MAX_HEAD);
    sbx_error_free(e);
    sbx__ws_head_free(&big);
}

static void test_utf8(void)
{
    TAP_TRUE(sbx__utf8_valid("", 0));
    TAP_TRUE(sbx__utf8_valid("plain", 5));
    TAP_TRUE(sbx__utf8_valid("\xF0\x9F\x98\x80 \xE2\x82\xAC \xC2\xA9 \xF4\x8F\xBF\xBF", 16));
    TAP_TRUE(!sbx__utf8_valid("\xE2\x82", 2));             /* cut */
    TAP_TRUE(!sbx__utf8_valid("\xF8\x88\x80\x80\x80", 5)); /* 5 bytes */
    TAP_TRUE(!sbx__utf8_valid("\xE0\x80\xAF", 3));         /* overlong '/' */
    TAP_TRUE(!sbx__utf8_valid("\xF4\x90\x80\x80", 4));     /* past U+10FFFF */
    TAP_TRUE(!sbx__utf8_valid("\xED\xBF\xBF", 3));         /* a surrogate */
    TAP_TRUE(!sbx__utf8_valid("\x80", 1));
}

TAP_MAIN(TAP(test_rfc_examples), TAP(test_encoder), TAP(test_control_frames_between_fragments),
         TAP(test_every_chunking_the_same), TAP(test_protocol_errors), TAP(test_close_payloads),
         TAP(test_handshake), TAP(test_utf8))
