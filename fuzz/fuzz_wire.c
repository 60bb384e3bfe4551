/*
 * libFuzzer target for the remote kit's stream readers (src/remote/sse.c,
 * ndjson.c, envelope.c): a hosted service's response body is hostile input.
 *
 * Input: byte 0 picks the reader, its limit, its option and a callback
 * that stops it; bytes 1-4 seed the chunk sizes (0: one byte at a time);
 * the rest is the stream.
 * The stream is fed twice, once whole and once in those chunks (empty ones
 * included), and both runs must give the same digest of every callback,
 * the same return code and the same error message: a push parser may not
 * depend on where the network cut the bytes. Each callback's arguments are
 * checked against the reader's promises (NUL-terminated, within the limit,
 * valid UTF-8 for SSE, no LF in an NDJSON line, known flags), a gRPC-web
 * trailers envelope goes through sbx_grpc_trailers_parse, and a stream of
 * envelopes that parsed whole must re-encode to exactly its own bytes.
 */
#include <sbx/wire.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum kind { SSE, NDJSON, CONNECT, GRPC_WEB };

/* Small limits, so that the fuzzer reaches the "too large" paths cheaply; 0 is the default. */
static const size_t limits[8] = {1, 2, 7, 16, 64, 1024, 65536, 0};

typedef struct {
    enum kind kind;
    size_t max;  /* the limit in force (the default resolved) */
    int stop_at; /* the callback returns a value on this call (1-based); 0: never */
    int calls;
    uint64_t digest;
    /* CONNECT / GRPC_WEB: the envelopes re-encoded. */
    uint8_t *re;
    size_t re_len, re_cap;
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

static void mix_str(run *r, const char *s)
{
    mix(r, s, strlen(s));
}

static int stop(run *r)
{
    r->calls++;
    /* Any non-zero value, negative or not, must come back out of _feed unchanged. */
    return r->stop_at && r->calls == r->stop_at ? 1000 + r->stop_at : 0;
}

/* Strict UTF-8 (what the SSE reader promises after its U+FFFD replacement). */
static bool utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            return false;
        }
        if (n - i <= need)
            return false;
        for (size_t k = 1; k <= need; k++) {
            if (s[i + k] < lo || s[i + k] > hi)
                return false;
            lo = 0x80;
            hi = 0xBF;
        }
        i += need + 1;
    }
    return true;
}

static int sse_cb(const char *type, const char *data, size_t data_len, const char *last_id,
                  void *user)
{
    run *r = user;
    /* The type counts against the limit when the stream named one (a NUL may cut it short). */
    bool named = strcmp(type, "message") != 0;
    if (data[data_len] != 0 || data_len > r->max || (named && strlen(type) + data_len > r->max) ||
        strlen(last_id) > r->max)
        abort();
    if (!utf8_ok((const uint8_t *)type, strlen(type)) ||
        !utf8_ok((const uint8_t *)data, data_len) ||
        !utf8_ok((const uint8_t *)last_id, strlen(last_id)))
        abort();
    mix_str(r, type);
    mix(r, data, data_len);
    mix_str(r, last_id);
    return stop(r);
}

static int nd_cb(const char *line, size_t len, uint64_t line_no, void *user)
{
    run *r = user;
    if (line[len] != 0 || len > r->max || memchr(line, '\n', len) || line_no == 0)
        abort();
    /* A blank line is never delivered. */
    size_t k = 0;
    while (k < len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
        k++;
    if (k == len)
        abort();
    mix(r, line, len);
    mix(r, &line_no, sizeof(line_no));
    return stop(r);
}

static void re_append(run *r, const void *p, size_t n)
{
    if (r->re_len + n > r->re_cap) {
        size_t cap = r->re_cap ? r->re_cap : 256;
        while (cap < r->re_len + n)
            cap *= 2;
        uint8_t *b = realloc(r->re, cap);
        if (!b)
            abort();
        r->re = b;
        r->re_cap = cap;
    }
    memcpy(r->re + r->re_len, p, n);
    r->re_len += n;
}

static int env_cb(unsigned flags, const void *msg, size_t len, void *user)
{
    run *r = user;
    unsigned known =
        SBX_ENVELOPE_FLAG_COMPRESSED |
        (r->kind == CONNECT ? SBX_ENVELOPE_FLAG_END_STREAM : SBX_ENVELOPE_FLAG_TRAILERS);
    if (len > r->max || (flags & ~known) || !msg)
        abort();
    uint8_t f = (uint8_t)flags;
    mix(r, &f, 1);
    mix(r, msg, len);
    void *enc = NULL;
    size_t enc_len = 0;
    if (sbx_envelope_encode(flags, msg, len, &enc, &enc_len, NULL) != 0 || enc_len != len + 5)
        abort();
    re_append(r, enc, enc_len);
    sbx_free(enc);
    if (r->kind == GRPC_WEB && (flags & SBX_ENVELOPE_FLAG_TRAILERS)) {
        int status = -1;
        char *message = NULL;
        sbx_error *err = NULL;
        int rc = sbx_grpc_trailers_parse(msg, len, &status, &message, &err);
        if (rc == 0) {
            if (status < 0 || !message || strlen(message) > len || err)
                abort();
            mix(r, &status, sizeof(status));
            mix_str(r, message);
        } else {
            if (rc != SBX_EPROTO || message || status != -1 || !err)
                abort();
            mix_str(r, sbx_error_message(err));
        }
        sbx_free(message);
        sbx_error_free(err);
    }
    return stop(r);
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

/*
 * Feeds `in` whole (seed NULL) or in chunks, ends the stream, and returns
 * the digest of everything the reader said.
 */
static uint64_t feed_all(enum kind kind, uint8_t sel, const uint8_t *in, size_t len, uint32_t *seed,
                         run *out)
{
    run r = {.kind = kind, .digest = 0xcbf29ce484222325ULL};
    size_t limit = limits[(sel >> 2) & 7];
    bool opt = sel & 0x20;
    r.stop_at = sel >> 6; /* 0: never; else the 1st, 2nd or 3rd callback */
    int rc = 0;
    sbx_error *err = NULL;
    void *reader = NULL;
    switch (kind) {
    case SSE:
        r.max = limit ? limit : SBX_SSE_DEFAULT_MAX_EVENT;
        rc = sbx_sse_new(limit, sse_cb, &r, (sbx_sse **)&reader, NULL);
        break;
    case NDJSON:
        r.max = limit ? limit : SBX_NDJSON_DEFAULT_MAX_LINE;
        rc = sbx_ndjson_new(limit, opt ? SBX_NDJSON_VALIDATE : 0, nd_cb, &r, (sbx_ndjson **)&reader,
                            NULL);
        break;
    case CONNECT:
    case GRPC_WEB:
        r.max = limit ? limit : SBX_ENVELOPE_DEFAULT_MAX_MESSAGE;
        rc = sbx_envelope_new(limit,
                              (kind == CONNECT ? SBX_ENVELOPE_CONNECT : SBX_ENVELOPE_GRPC_WEB) |
                                  (opt ? SBX_ENVELOPE_ALLOW_COMPRESSED : 0),
                              env_cb, &r, (sbx_envelope **)&reader, NULL);
        break;
    }
    if (rc != 0)
        abort();
    size_t i = 0;
    while (rc == 0 && i < len) {
        size_t n = len - i;
        if (seed && *seed == 0) {
            n = 1; /* seed 0: a byte at a time, every boundary */
        } else if (seed) {
            uint32_t x = next(seed);
            /* Mostly small chunks (every boundary matters), sometimes empty, sometimes large. */
            n = (x & 0xff) < 16 ? 0 : (x & 0xff) < 240 ? 1 + (x >> 8) % 8 : 1 + (x >> 8) % 512;
            if (n > len - i)
                n = len - i;
        }
        switch (kind) {
        case SSE:
            rc = sbx_sse_feed(reader, in + i, n, &err);
            break;
        case NDJSON:
            rc = sbx_ndjson_feed(reader, in + i, n, &err);
            break;
        default:
            rc = sbx_envelope_feed(reader, in + i, n, &err);
            break;
        }
        i += n;
    }
    if (rc == 0) {
        switch (kind) {
        case SSE:
            rc = sbx_sse_end(reader, &err);
            break;
        case NDJSON:
            rc = sbx_ndjson_end(reader, &err);
            break;
        default:
            rc = sbx_envelope_end(reader, &err);
            break;
        }
    }
    /* A failure carries its error; a stop (the callback's value) and success do not. */
    if (rc < 0 && rc != 1000 + r.stop_at && (!err || sbx_error_code(err) != rc))
        abort();
    if (rc == 1000 + r.stop_at && err)
        abort();
    if (rc != 0 && rc != 1000 + r.stop_at && rc != SBX_EPROTO && rc != SBX_ENOMEM)
        abort();
    mix(&r, &rc, sizeof(rc));
    if (err)
        mix_str(&r, sbx_error_message(err));
    sbx_error_free(err);
    /* After an error or a stop, the reader answers the same. */
    if (rc != 0) {
        int again;
        switch (kind) {
        case SSE:
            again = sbx_sse_feed(reader, "\n\n", 2, NULL);
            break;
        case NDJSON:
            again = sbx_ndjson_feed(reader, "\n", 1, NULL);
            break;
        default:
            again = sbx_envelope_feed(reader, "\0\0\0\0\0", 5, NULL);
            break;
        }
        if (again != rc)
            abort();
    }
    switch (kind) {
    case SSE: {
        mix_str(&r, sbx_sse_last_id(reader));
        long long retry = sbx_sse_retry_ms(reader);
        mix(&r, &retry, sizeof(retry));
        sbx_sse_free(reader);
        break;
    }
    case NDJSON:
        sbx_ndjson_free(reader);
        break;
    default:
        /* Every byte of a stream read whole and without error came back out of the encoder. */
        if (rc == 0 && (r.re_len != len || (len && memcmp(r.re, in, len) != 0)))
            abort();
        sbx_envelope_free(reader);
        break;
    }
    *out = r;
    return r.digest;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    uint8_t sel = data[0];
    uint32_t seed = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 |
                    (uint32_t)data[4] << 24;
    enum kind kind = (enum kind)(sel & 3);
    run whole, chunked;
    uint64_t a = feed_all(kind, sel, data + 5, size - 5, NULL, &whole);
    uint64_t b = feed_all(kind, sel, data + 5, size - 5, &seed, &chunked);
    if (a != b || whole.calls != chunked.calls)
        abort();
    free(whole.re);
    free(chunked.re);
    return 0;
}
