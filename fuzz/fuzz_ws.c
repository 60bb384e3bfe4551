/*
 * libFuzzer target for the WebSocket codec (src/remote/ws_frame.c): what a
 * server sends a WebSocket client is hostile input, its frames and its
 * answer to the upgrade alike.
 *
 * Input: byte 0 picks the mode (server frames, client frames, the 101
 * response head) and the message limit; bytes 1-4 seed the chunk sizes
 * (0: one byte at a time); the rest is the stream.
 * The stream is read twice, once whole and once in those chunks (empty
 * ones included), and both runs must give the same digest of every event,
 * the same result and the same error message: a push decoder may not
 * depend on where the network cut the bytes. Each event is checked against
 * the decoder's promises (a known opcode, within its limit, NUL-terminated,
 * text and close reasons valid UTF-8, close codes allowed on the wire), a
 * failure carries one of RFC 6455's close codes, and every event encoded
 * again as a masked client frame reads back as itself.
 */
#include "remote/ws_frame.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum mode { SERVER, CLIENT, HEAD, SERVER_SMALL };

/* Small limits too, so that "too big" is cheap to reach; 0 is the default. */
static const size_t limits[8] = {1, 2, 7, 125, 126, 1024, 65536, 0};

typedef struct {
    uint64_t digest;
    int events;
} run;

static void mix(run *r, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        r->digest ^= b[i];
        r->digest *= 0x100000001b3ULL; /* FNV-1a */
    }
    /* The length too, so that ("ab", "c") and ("a", "bc") differ. */
    uint64_t len = n;
    for (int i = 0; i < 8; i++) {
        r->digest ^= (uint8_t)(len >> (8 * i));
        r->digest *= 0x100000001b3ULL;
    }
}

static void mix_int(run *r, long long v)
{
    mix(r, &v, sizeof(v));
}

/* xorshift32 (never 0 from a non-zero state): chunk sizes from the input's seed bytes. */
static uint32_t next(uint32_t *s)
{
    uint32_t x = *s;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static size_t chunk_len(uint32_t *seed, size_t left)
{
    size_t n = left;
    if (seed && *seed == 0) {
        n = 1;
    } else if (seed) {
        uint32_t x = next(seed);
        n = (x & 0xff) < 16 ? 0 : (x & 0xff) < 240 ? 1 + (x >> 8) % 8 : 1 + (x >> 8) % 512;
    }
    return n > left ? left : n;
}

/* The event read back from a masked client frame of itself must be itself. */
static void round_trip(const sbx__ws_event *ev)
{
    size_t n = sbx__ws_frame_size(ev->len, true);
    uint8_t *f = malloc(n);
    if (!f)
        abort();
    static const uint8_t key[4] = {0xa5, 0x01, 0xff, 0x5a};
    if (sbx__ws_frame_write(f, ev->opcode, true, ev->data, ev->len, key) != n)
        abort();
    sbx__ws_decoder d;
    sbx__ws_decoder_init(&d, ev->len ? ev->len : 1, true);
    sbx__ws_event back;
    size_t used = 0;
    if (sbx__ws_decode(&d, f, n, &used, &back, NULL) != 1 || used != n ||
        back.opcode != ev->opcode || back.len != ev->len ||
        (ev->len && memcmp(back.data, ev->data, ev->len) != 0) || back.status != ev->status ||
        strcmp(back.reason, ev->reason) != 0)
        abort();
    sbx__ws_decoder_free(&d);
    free(f);
}

static void check_event(const sbx__ws_event *ev, size_t max)
{
    bool control =
        ev->opcode == SBX_WS_CLOSE || ev->opcode == SBX_WS_PING || ev->opcode == SBX_WS_PONG;
    if (!control && ev->opcode != SBX_WS_TEXT && ev->opcode != SBX_WS_BINARY)
        abort();
    if ((control && ev->len > SBX__WS_MAX_CONTROL) || (!control && ev->len > max) || !ev->data ||
        ev->data[ev->len] != 0)
        abort();
    if (ev->opcode == SBX_WS_TEXT && !sbx__utf8_valid(ev->data, ev->len))
        abort();
    if (ev->opcode == SBX_WS_CLOSE) {
        if (ev->status != SBX_WS_NO_STATUS && !sbx__ws_status_ok(ev->status))
            abort();
        if (strlen(ev->reason) > SBX__WS_MAX_REASON ||
            !sbx__utf8_valid(ev->reason, strlen(ev->reason)))
            abort();
    }
}

static uint64_t frames(enum mode mode, size_t max, const uint8_t *in, size_t len, uint32_t *seed,
                       run *r)
{
    sbx__ws_decoder d;
    sbx__ws_decoder_init(&d, max, mode == CLIENT);
    size_t effective = max ? max : SBX_WS_DEFAULT_MAX_MESSAGE;
    size_t i = 0;
    int rc = 0;
    sbx_error *err = NULL;
    while (rc >= 0 && i < len) {
        size_t n = chunk_len(seed, len - i);
        size_t off = 0;
        do {
            size_t used = 0;
            sbx__ws_event ev;
            rc = sbx__ws_decode(&d, in + i + off, n - off, &used, &ev, &err);
            if (used > n - off || (rc == 0 && used != n - off))
                abort();
            off += used;
            if (rc == 1) {
                check_event(&ev, effective);
                round_trip(&ev);
                r->events++;
                mix_int(r, ev.opcode);
                mix(r, ev.data, ev.len);
                if (ev.opcode == SBX_WS_CLOSE) {
                    mix_int(r, ev.status);
                    mix(r, ev.reason, strlen(ev.reason));
                }
            }
        } while (rc == 1 && off < n);
        i += n;
    }
    mix_int(r, rc < 0 ? rc : 0);
    if (rc < 0) {
        int cc = sbx__ws_decoder_close_code(&d);
        if (!err || sbx_error_code(err) != rc)
            abort();
        if (!(rc == SBX_EPROTO &&
              (cc == SBX_WS_PROTOCOL_ERROR || cc == SBX_WS_INVALID_DATA || cc == SBX_WS_TOO_BIG)) &&
            !(rc == SBX_ENOMEM && cc == SBX_WS_INTERNAL_ERROR))
            abort();
        mix_int(r, cc);
        mix(r, sbx_error_message(err), strlen(sbx_error_message(err)));
        /* A failure is final. */
        size_t used = 1;
        sbx__ws_event ev;
        if (sbx__ws_decode(&d, "\x81\x00", 2, &used, &ev, NULL) != rc || used != 0)
            abort();
    } else if (err) {
        abort();
    }
    sbx_error_free(err);
    sbx__ws_decoder_free(&d);
    return r->digest;
}

static uint64_t head(const uint8_t *in, size_t len, uint32_t *seed, run *r)
{
    sbx__ws_head h = {0};
    size_t i = 0, total = 0;
    int rc = 0;
    sbx_error *err = NULL;
    while (rc == 0 && i < len) {
        size_t n = chunk_len(seed, len - i), used = 0;
        rc = sbx__ws_head_feed(&h, in + i, n, &used, &err);
        if (used > n || (rc == 0 && used != n))
            abort();
        total += used;
        i += n;
    }
    if (h.buf.len > SBX__WS_MAX_HEAD || (rc == 1 && total != h.buf.len))
        abort();
    mix_int(r, rc);
    mix_int(r, (long long)total);
    if (rc == 1) {
        static const char *const protos[] = {"chat", "v1.pty"};
        int status = -1;
        char *proto = NULL;
        rc = sbx__ws_head_check(&h, "dGhlIHNhbXBsZSBub25jZQ==", protos, 2, &status, &proto, &err);
        if (rc != SBX_OK && rc != SBX_EPROTO && rc != SBX_ENOMEM)
            abort();
        if (status != 0 && (status < 100 || status > 999))
            abort();
        if (rc == SBX_OK && (status != 101 || err))
            abort();
        if (rc != SBX_OK && (proto || !err))
            abort();
        if (proto && strcmp(proto, "chat") != 0 && strcmp(proto, "v1.pty") != 0)
            abort();
        mix_int(r, rc);
        mix_int(r, status);
        if (proto)
            mix(r, proto, strlen(proto));
        free(proto);
    }
    if (err) {
        /* What a server said is quoted bounded and printable. */
        const char *m = sbx_error_message(err);
        if (strlen(m) > 600)
            abort();
        for (const char *p = m; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                abort();
        mix(r, m, strlen(m));
    }
    sbx_error_free(err);
    sbx__ws_head_free(&h);
    return r->digest;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    uint8_t sel = data[0];
    uint32_t seed = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 |
                    (uint32_t)data[4] << 24;
    enum mode mode = (enum mode)(sel & 3);
    size_t max = limits[(sel >> 2) & 7];
    if (mode == SERVER_SMALL)
        max = 1 + (sel >> 5);
    run whole = {.digest = 0xcbf29ce484222325ULL}, chunked = whole;
    uint64_t a, b;
    if (mode == HEAD) {
        a = head(data + 5, size - 5, NULL, &whole);
        b = head(data + 5, size - 5, &seed, &chunked);
    } else {
        a = frames(mode, max, data + 5, size - 5, NULL, &whole);
        b = frames(mode, max, data + 5, size - 5, &seed, &chunked);
    }
    if (a != b || whole.events != chunked.events)
        abort();
    return 0;
}
