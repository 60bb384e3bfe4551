/* The agent protocol codec (src/proto/proto.c): frames and every message. */
#include "tap.h"
#include "common.h"

#include "proto/proto.h"
#include "proto/pty.h"

#include <stdint.h>

/* Encodes with `fill`, then parses the frame back out of the bytes. */
static sbx_pbuf b;

static sbx_frame reparse(uint8_t type, uint32_t channel)
{
    TAP_EQ_INT(sbx__pbuf_finish(&b, type, channel), 0);
    sbx_frame f;
    size_t used = 0;
    TAP_EQ_INT(sbx__proto_parse(b.data, b.len, SBX_PROTO_MAX_PAYLOAD, &f, &used), 1);
    TAP_EQ_INT(used, b.len);
    TAP_EQ_INT(f.type, type);
    TAP_EQ_INT(f.channel, channel);
    TAP_EQ_INT(f.len, b.len - SBX_PROTO_HEADER);
    return f;
}

static void test_header_layout(void)
{
    uint8_t h[SBX_PROTO_HEADER];
    sbx__proto_put_header(h, SBX_MSG_STDOUT, 0x01020304, 7);
    /* u32 length (type + channel + payload) | u8 type | u32 channel, big-endian. */
    const uint8_t want[] = {0, 0, 0, 12, 0x12, 1, 2, 3, 4};
    TAP_TRUE(memcmp(h, want, sizeof(want)) == 0);
}

static void test_hello_roundtrip_and_negotiation(void)
{
    sbx__pbuf_begin(&b);
    sbx_msg_hello h = {SBX_PROTO_MAGIC, 1, 3, 12345, (char *)"agent x"};
    TAP_EQ_INT(sbx__msg_hello_encode(&b, &h), 0);
    sbx_frame f = reparse(SBX_MSG_HELLO, 0);
    sbx_msg_hello *d = NULL;
    TAP_EQ_INT(sbx__msg_hello_decode(&f, &d), 0);
    TAP_EQ_INT(d->min_version, 1);
    TAP_EQ_INT(d->max_version, 3);
    TAP_EQ_INT(d->max_payload, 12345);
    TAP_EQ_STR(d->software, "agent x");
    sbx_msg_hello mine = {SBX_PROTO_MAGIC, 1, 1, 0, NULL};
    TAP_EQ_INT(sbx__proto_negotiate(&mine, d), 1);
    sbx_msg_hello newer = {SBX_PROTO_MAGIC, 4, 5, 0, NULL};
    TAP_EQ_INT(sbx__proto_negotiate(&newer, d), -1);
    sbx_msg_hello overlap = {SBX_PROTO_MAGIC, 2, 9, 0, NULL};
    TAP_EQ_INT(sbx__proto_negotiate(&overlap, d), 3);
    free(d);
    /* A wrong magic is not a hello. */
    sbx__pbuf_begin(&b);
    h.magic = 0x48545450; /* "HTTP" */
    sbx__msg_hello_encode(&b, &h);
    f = reparse(SBX_MSG_HELLO, 0);
    TAP_EQ_INT(sbx__msg_hello_decode(&f, &d), -1);
    sbx__pbuf_free(&b);
}

static void test_exec_roundtrip(void)
{
    const char *argv[] = {"printf", "%s", "", "a b", NULL};
    const char *env1[] = {"A=1", "B=", NULL};
    const char *env2[] = {"A=2", NULL};
    sbx__pbuf_begin(&b);
    TAP_EQ_INT(
        sbx__msg_exec_encode(&b, SBX_EXEC_STDIN, 1500, 1u << 20, "/work", NULL, argv, env1, env2),
        0);
    sbx_frame f = reparse(SBX_MSG_EXEC, 42);
    sbx_msg_exec *m = NULL;
    TAP_EQ_INT(sbx__msg_exec_decode(&f, &m), 0);
    TAP_EQ_INT(m->flags, SBX_EXEC_STDIN);
    TAP_EQ_INT(m->timeout_ms, 1500);
    TAP_EQ_INT(m->output_limit, 1u << 20);
    TAP_EQ_STR(m->cwd, "/work");
    TAP_NULL(m->user); /* absent stays absent, distinct from "" */
    TAP_EQ_STR(m->argv[0], "printf");
    TAP_EQ_STR(m->argv[2], "");
    TAP_EQ_STR(m->argv[3], "a b");
    TAP_NULL(m->argv[4]);
    TAP_EQ_STR(m->env[0], "A=1");
    TAP_EQ_STR(m->env[1], "B=");
    TAP_EQ_STR(m->env[2], "A=2");
    TAP_NULL(m->env[3]);
    free(m);

    /* No timeout, shell mode, no env at all. */
    const char *sh[] = {"echo hi", NULL};
    sbx__pbuf_begin(&b);
    sbx__msg_exec_encode(&b, SBX_EXEC_SHELL, -1, 0, NULL, "root", sh, NULL, NULL);
    f = reparse(SBX_MSG_EXEC, 1);
    TAP_EQ_INT(sbx__msg_exec_decode(&f, &m), 0);
    TAP_EQ_INT(m->timeout_ms, -1);
    TAP_NULL(m->cwd);
    TAP_EQ_STR(m->user, "root");
    TAP_NULL(m->env[0]);
    free(m);

    /* An empty argv is refused. */
    const char *none[] = {NULL};
    sbx__pbuf_begin(&b);
    sbx__msg_exec_encode(&b, 0, -1, 0, NULL, NULL, none, NULL, NULL);
    f = reparse(SBX_MSG_EXEC, 1);
    TAP_EQ_INT(sbx__msg_exec_decode(&f, &m), -1);
    sbx__pbuf_free(&b);
}

static void test_exit_status_file_messages(void)
{
    sbx__pbuf_begin(&b);
    sbx__msg_exit_encode(&b, SBX_EXIT_SIGNAL, 9, SBX_EXITF_OOM | SBX_EXITF_STDOUT_TRUNCATED, "oom");
    sbx_frame f = reparse(SBX_MSG_EXIT, 3);
    sbx_msg_exit *x = NULL;
    TAP_EQ_INT(sbx__msg_exit_decode(&f, &x), 0);
    TAP_EQ_INT(x->kind, SBX_EXIT_SIGNAL);
    TAP_EQ_INT(x->code, 9);
    TAP_EQ_INT(x->flags, SBX_EXITF_OOM | SBX_EXITF_STDOUT_TRUNCATED);
    TAP_EQ_STR(x->message, "oom");
    free(x);
    /* Negative exit codes survive the u32 on the wire. */
    sbx__pbuf_begin(&b);
    sbx__msg_exit_encode(&b, SBX_EXIT_CODE, -5, 0, NULL);
    f = reparse(SBX_MSG_EXIT, 3);
    TAP_EQ_INT(sbx__msg_exit_decode(&f, &x), 0);
    TAP_EQ_INT(x->code, -5);
    TAP_EQ_STR(x->message, "");
    free(x);
    /* An unknown exit kind is malformed. */
    sbx__pbuf_begin(&b);
    sbx__msg_exit_encode(&b, 77, 0, 0, NULL);
    f = reparse(SBX_MSG_EXIT, 3);
    TAP_EQ_INT(sbx__msg_exit_decode(&f, &x), -1);

    sbx__pbuf_begin(&b);
    sbx__msg_status_encode(&b, 2, "cannot open '/x': No such file or directory");
    f = reparse(SBX_MSG_STATUS, 5);
    sbx_msg_status *s = NULL;
    TAP_EQ_INT(sbx__msg_status_decode(&f, &s), 0);
    TAP_EQ_INT(s->errnum, 2);
    TAP_CONTAINS(s->message, "/x");
    free(s);

    sbx__pbuf_begin(&b);
    sbx__msg_file_encode(&b, 0755, 0, "/tmp/a b");
    f = reparse(SBX_MSG_FILE_PUT, 6);
    sbx_msg_file *fm = NULL;
    TAP_EQ_INT(sbx__msg_file_decode(&f, &fm), 0);
    TAP_EQ_INT(fm->mode, 0755);
    TAP_EQ_STR(fm->path, "/tmp/a b");
    free(fm);
    /* An empty path is refused. */
    sbx__pbuf_begin(&b);
    sbx__msg_file_encode(&b, 0, 0, "");
    f = reparse(SBX_MSG_FILE_GET, 6);
    TAP_EQ_INT(sbx__msg_file_decode(&f, &fm), -1);

    sbx__pbuf_begin(&b);
    sbx__msg_file_info_encode(&b, 0640, 1ull << 40);
    f = reparse(SBX_MSG_FILE_INFO, 7);
    sbx_msg_file_info info;
    TAP_EQ_INT(sbx__msg_file_info_decode(&f, &info), 0);
    TAP_EQ_INT(info.mode, 0640);
    TAP_EQ_INT(info.size, 1ull << 40);

    sbx__pbuf_begin(&b);
    sbx__msg_u64_encode(&b, 0x0102030405060708ull);
    f = reparse(SBX_MSG_PING, 0);
    uint64_t v = 0;
    TAP_EQ_INT(sbx__msg_u64_decode(&f, &v), 0);
    TAP_EQ_INT(v, 0x0102030405060708ull);
    sbx__pbuf_free(&b);
}

static void test_type_names(void)
{
    const uint8_t known[] = {SBX_MSG_HELLO,     SBX_MSG_ERROR,  SBX_MSG_PING,     SBX_MSG_PONG,
                             SBX_MSG_EXEC,      SBX_MSG_STDIN,  SBX_MSG_STDOUT,   SBX_MSG_STDERR,
                             SBX_MSG_EXIT,      SBX_MSG_CANCEL, SBX_MSG_FILE_PUT, SBX_MSG_FILE_GET,
                             SBX_MSG_FILE_INFO, SBX_MSG_DATA,   SBX_MSG_STATUS};
    for (size_t i = 0; i < sizeof(known); i++)
        TAP_TRUE(sbx__proto_type_name(known[i]) != NULL);
    TAP_NULL(sbx__proto_type_name(0));
    TAP_NULL(sbx__proto_type_name(0x7f));
    TAP_NULL(sbx__proto_type_name(0xff));
}

/* A stream of frames fed one byte at a time comes out whole and in order. */
static void test_reader_byte_by_byte(void)
{
    sbx_pbuf all = {0};
    for (uint32_t i = 0; i < 50; i++) {
        sbx__pbuf_begin(&b);
        for (uint32_t k = 0; k < i * 37; k++)
            sbx__pbuf_u8(&b, (uint8_t)(i + k));
        TAP_EQ_INT(sbx__pbuf_finish(&b, SBX_MSG_STDOUT, i + 1), 0);
        sbx__pbuf_bytes(&all, b.data, b.len);
    }
    sbx_proto_reader r;
    sbx__proto_reader_init(&r, SBX_PROTO_MAX_PAYLOAD);
    uint32_t next = 0;
    sbx_frame f;
    for (size_t i = 0; i < all.len; i++) {
        TAP_EQ_INT(sbx__proto_reader_feed(&r, all.data + i, 1), 0);
        int rc;
        while ((rc = sbx__proto_reader_next(&r, &f)) == 1) {
            TAP_EQ_INT(f.channel, next + 1);
            TAP_EQ_INT(f.len, next * 37);
            for (uint32_t k = 0; k < f.len; k++)
                TAP_EQ_INT(f.payload[k], (uint8_t)(next + k));
            next++;
        }
        TAP_EQ_INT(rc, 0);
    }
    TAP_EQ_INT(next, 50);
    /* Everything at once works the same. */
    sbx__proto_reader_free(&r);
    sbx__proto_reader_init(&r, SBX_PROTO_MAX_PAYLOAD);
    TAP_EQ_INT(sbx__proto_reader_feed(&r, all.data, all.len), 0);
    next = 0;
    while (sbx__proto_reader_next(&r, &f) == 1)
        next++;
    TAP_EQ_INT(next, 50);
    sbx__proto_reader_free(&r);
    sbx__pbuf_free(&all);
    sbx__pbuf_free(&b);
}

static void test_oversized_and_short_frames_rejected(void)
{
    sbx_proto_reader r;
    sbx_frame f;
    /* The length is checked before the body arrives: no waiting for 4 GiB. */
    sbx__proto_reader_init(&r, 1024);
    const uint8_t big[] = {0, 0, 0x04, 0x06, 0x12, 0, 0, 0, 1}; /* 1030 - 5 = 1025 > 1024 */
    TAP_EQ_INT(sbx__proto_reader_feed(&r, big, sizeof(big)), 0);
    TAP_EQ_INT(sbx__proto_reader_next(&r, &f), -1);
    TAP_TRUE(r.broken);
    /* Once broken, always broken: the stream must close. */
    TAP_EQ_INT(sbx__proto_reader_next(&r, &f), -1);
    sbx__proto_reader_free(&r);

    /* Exactly the limit is fine. */
    sbx__proto_reader_init(&r, 1024);
    const uint8_t edge[] = {0, 0, 0x04, 0x05, 0x12, 0, 0, 0, 1};
    TAP_EQ_INT(sbx__proto_reader_feed(&r, edge, sizeof(edge)), 0);
    TAP_EQ_INT(sbx__proto_reader_next(&r, &f), 0); /* waiting for the body */
    sbx__proto_reader_free(&r);

    /* A length that cannot hold type + channel. */
    for (uint8_t n = 0; n < 5; n++) {
        sbx__proto_reader_init(&r, 1024);
        const uint8_t shortf[] = {0, 0, 0, n, 0x12, 0, 0, 0, 1};
        TAP_EQ_INT(sbx__proto_reader_feed(&r, shortf, sizeof(shortf)), 0);
        TAP_EQ_INT(sbx__proto_reader_next(&r, &f), -1);
        sbx__proto_reader_free(&r);
    }
    /* The encoder refuses to build a frame over the protocol's limit. */
    sbx__pbuf_begin(&b);
    sbx__pbuf_bytes(&b, NULL, 0);
    uint8_t *chunk = calloc(1, SBX_PROTO_MAX_PAYLOAD + 1);
    sbx__pbuf_bytes(&b, chunk, SBX_PROTO_MAX_PAYLOAD + 1);
    free(chunk);
    TAP_EQ_INT(sbx__pbuf_finish(&b, SBX_MSG_DATA, 1), -1);
    sbx__pbuf_free(&b);
}

/* Every decoder, given every truncation of a valid payload, says -1 (never reads past it). */
static void test_truncated_payloads_rejected(void)
{
    const char *argv[] = {"sh", "-c", "echo", NULL};
    const char *env[] = {"K=V", NULL};
    struct {
        uint8_t type;
    } kinds[] = {{SBX_MSG_EXEC},     {SBX_MSG_EXIT},      {SBX_MSG_STATUS},
                 {SBX_MSG_FILE_PUT}, {SBX_MSG_FILE_INFO}, {SBX_MSG_PING}};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        sbx__pbuf_begin(&b);
        switch (kinds[k].type) {
        case SBX_MSG_EXEC:
            sbx__msg_exec_encode(&b, 0, 10, 0, "/", "u", argv, env, NULL);
            break;
        case SBX_MSG_EXIT:
            sbx__msg_exit_encode(&b, 0, 1, 0, "msg");
            break;
        case SBX_MSG_STATUS:
            sbx__msg_status_encode(&b, 1, "msg");
            break;
        case SBX_MSG_FILE_PUT:
            sbx__msg_file_encode(&b, 0644, 0, "/p");
            break;
        case SBX_MSG_FILE_INFO:
            sbx__msg_file_info_encode(&b, 0644, 10);
            break;
        default:
            sbx__msg_u64_encode(&b, 1);
        }
        size_t full = b.len - SBX_PROTO_HEADER;
        for (size_t cut = 0; cut < full; cut++) {
            /* A private copy of exactly `cut` bytes so ASan catches any over-read. */
            uint8_t *p = malloc(cut ? cut : 1);
            memcpy(p, b.data + SBX_PROTO_HEADER, cut);
            sbx_frame f = {kinds[k].type, 1, p, (uint32_t)cut};
            void *m = NULL;
            int rc;
            sbx_msg_file_info info;
            uint64_t v;
            switch (kinds[k].type) {
            case SBX_MSG_EXEC:
                rc = sbx__msg_exec_decode(&f, (sbx_msg_exec **)&m);
                break;
            case SBX_MSG_EXIT:
                rc = sbx__msg_exit_decode(&f, (sbx_msg_exit **)&m);
                break;
            case SBX_MSG_STATUS:
                rc = sbx__msg_status_decode(&f, (sbx_msg_status **)&m);
                break;
            case SBX_MSG_FILE_PUT:
                rc = sbx__msg_file_decode(&f, (sbx_msg_file **)&m);
                break;
            case SBX_MSG_FILE_INFO:
                rc = sbx__msg_file_info_decode(&f, &info);
                break;
            default:
                rc = sbx__msg_u64_decode(&f, &v);
            }
            if (rc != -1)
                TAP_FAIL("type 0x%02x cut at %zu of %zu decoded", kinds[k].type, cut, full);
            free(m);
            free(p);
        }
    }
    sbx__pbuf_free(&b);
}

static void test_strings_with_nul_or_lying_lengths_rejected(void)
{
    /* A string length past the end. */
    sbx__pbuf_begin(&b);
    sbx__pbuf_u32(&b, 0);
    sbx__pbuf_u32(&b, 0);
    sbx__pbuf_u32(&b, 100);
    sbx__pbuf_bytes(&b, "abc", 3);
    sbx_frame f = reparse(SBX_MSG_FILE_GET, 1);
    sbx_msg_file *fm = NULL;
    TAP_EQ_INT(sbx__msg_file_decode(&f, &fm), -1);
    /* An embedded NUL (a path "a\0/etc/shadow" must not become "a"). */
    sbx__pbuf_begin(&b);
    sbx__pbuf_u32(&b, 0);
    sbx__pbuf_u32(&b, 0);
    sbx__pbuf_u32(&b, 5);
    sbx__pbuf_bytes(&b, "a\0bcd", 5);
    f = reparse(SBX_MSG_FILE_GET, 1);
    TAP_EQ_INT(sbx__msg_file_decode(&f, &fm), -1);
    /* Trailing garbage after a complete message. */
    sbx__pbuf_begin(&b);
    sbx__msg_file_encode(&b, 0, 0, "/ok");
    sbx__pbuf_u8(&b, 1);
    f = reparse(SBX_MSG_FILE_GET, 1);
    TAP_EQ_INT(sbx__msg_file_decode(&f, &fm), -1);
    /* An argv count that claims more elements than bytes could hold. */
    sbx__pbuf_begin(&b);
    sbx__pbuf_u32(&b, 0);
    sbx__pbuf_u64(&b, 0);
    sbx__pbuf_u64(&b, 0);
    sbx__pbuf_str(&b, NULL);
    sbx__pbuf_str(&b, NULL);
    sbx__pbuf_u32(&b, 0x40000000u);
    f = reparse(SBX_MSG_EXEC, 1);
    sbx_msg_exec *m = NULL;
    TAP_EQ_INT(sbx__msg_exec_decode(&f, &m), -1);
    /* An absent string inside argv. */
    sbx__pbuf_begin(&b);
    sbx__pbuf_u32(&b, 0);
    sbx__pbuf_u64(&b, 0);
    sbx__pbuf_u64(&b, 0);
    sbx__pbuf_str(&b, NULL);
    sbx__pbuf_str(&b, NULL);
    sbx__pbuf_u32(&b, 1);
    sbx__pbuf_str(&b, NULL);
    sbx__pbuf_u32(&b, 0);
    f = reparse(SBX_MSG_EXEC, 1);
    TAP_EQ_INT(sbx__msg_exec_decode(&f, &m), -1);
    sbx__pbuf_free(&b);
}

/* PTY messages (version 3): round trips, and every bound checked. */
static void test_pty_messages(void)
{
    const char *argv[] = {"bash", "-l", NULL}, *env[] = {"TERM=xterm", NULL};
    sbx__pbuf_begin(&b);
    TAP_EQ_INT(sbx__msg_pty_open_encode(&b, 40, 120, SBX_PTY_PIPES, "/w", "u", argv, env, NULL), 0);
    sbx_frame f = reparse(SBX_MSG_PTY_OPEN, 7);
    sbx_msg_pty_open o = {0};
    TAP_EQ_INT(sbx__msg_pty_open_decode(&f, &o), 0);
    TAP_EQ_INT(o.rows, 40);
    TAP_EQ_INT(o.cols, 120);
    TAP_EQ_INT(o.exec->flags, SBX_PTY_PIPES);
    TAP_EQ_STR(o.exec->argv[1], "-l");
    TAP_EQ_STR(o.exec->env[0], "TERM=xterm");
    TAP_EQ_STR(o.exec->cwd, "/w");
    sbx__msg_pty_open_free(&o);
    /* A terminal larger than 4096 either way is refused. */
    sbx__pbuf_begin(&b);
    sbx__msg_pty_open_encode(&b, 4097, 80, 0, NULL, NULL, argv, NULL, NULL);
    f = reparse(SBX_MSG_PTY_OPEN, 7);
    TAP_EQ_INT(sbx__msg_pty_open_decode(&f, &o), -1);
    sbx__pbuf_begin(&b);
    sbx__pbuf_u32(&b, 24); /* no cols, no EXEC payload */
    f = reparse(SBX_MSG_PTY_OPEN, 7);
    TAP_EQ_INT(sbx__msg_pty_open_decode(&f, &o), -1);

    sbx__pbuf_begin(&b);
    sbx_msg_pty_info info = {9, 1ull << 40, 5}, gi;
    TAP_EQ_INT(sbx__msg_pty_info_encode(&b, &info), 0);
    f = reparse(SBX_MSG_PTY_INFO, 7);
    TAP_EQ_INT(sbx__msg_pty_info_decode(&f, &gi), 0);
    TAP_EQ_INT(gi.id, 9);
    TAP_TRUE(gi.out_offset == 1ull << 40 && gi.err_offset == 5);

    sbx__pbuf_begin(&b);
    sbx_msg_pty_attach a = {3, SBX_PTY_ATTACH_TAKEOVER, 77}, ga;
    TAP_EQ_INT(sbx__msg_pty_attach_encode(&b, &a), 0);
    f = reparse(SBX_MSG_PTY_ATTACH, 8);
    TAP_EQ_INT(sbx__msg_pty_attach_decode(&f, &ga), 0);
    TAP_TRUE(ga.id == 3 && ga.flags == 1 && ga.since == 77);
    a.flags = 3; /* takeover | keep (version 4) */
    sbx__pbuf_begin(&b);
    sbx__msg_pty_attach_encode(&b, &a);
    f = reparse(SBX_MSG_PTY_ATTACH, 8);
    TAP_EQ_INT(sbx__msg_pty_attach_decode(&f, &ga), 0);
    TAP_TRUE(ga.flags == 3);
    a.flags = 4; /* unknown flag bits are refused */
    sbx__pbuf_begin(&b);
    sbx__msg_pty_attach_encode(&b, &a);
    f = reparse(SBX_MSG_PTY_ATTACH, 8);
    TAP_EQ_INT(sbx__msg_pty_attach_decode(&f, &ga), -1);

    uint32_t r, c;
    sbx__pbuf_begin(&b);
    sbx__pbuf_u32(&b, 50);
    sbx__pbuf_u32(&b, 132);
    f = reparse(SBX_MSG_PTY_RESIZE, 8);
    TAP_EQ_INT(sbx__msg_pty_resize_decode(&f, &r, &c), 0);
    TAP_TRUE(r == 50 && c == 132);
    sbx__pbuf_u32(&b, 1); /* trailing bytes */
    f = reparse(SBX_MSG_PTY_RESIZE, 8);
    TAP_EQ_INT(sbx__msg_pty_resize_decode(&f, &r, &c), -1);
    uint32_t sig;
    for (uint32_t v = 0; v <= 65; v += 65) {
        sbx__pbuf_begin(&b);
        sbx__pbuf_u32(&b, v); /* 0 and 65: outside 1..64 */
        f = reparse(SBX_MSG_PTY_SIGNAL, 8);
        TAP_EQ_INT(sbx__msg_pty_signal_decode(&f, &sig), -1);
    }
    sbx__pbuf_begin(&b);
    sbx__pbuf_u64(&b, 1000);
    sbx__pbuf_bytes(&b, "abc", 3);
    f = reparse(SBX_MSG_PTY_OUT, 8);
    uint64_t off;
    const uint8_t *d;
    uint32_t n;
    TAP_EQ_INT(sbx__msg_pty_data_decode(&f, &off, &d, &n), 0);
    TAP_TRUE(off == 1000 && n == 3 && !memcmp(d, "abc", 3));
    sbx__pbuf_begin(&b);
    sbx__pbuf_u64(&b, UINT64_MAX); /* an offset no stream reaches: the sum would wrap */
    f = reparse(SBX_MSG_PTY_OUT, 8);
    TAP_EQ_INT(sbx__msg_pty_data_decode(&f, &off, &d, &n), -1);
    TAP_EQ_STR(sbx__proto_type_name(SBX_MSG_PTY_DETACH), "PTY_DETACH");
    TAP_NULL(sbx__proto_type_name(0x38));
    sbx__pbuf_free(&b);
}

TAP_MAIN(TAP(test_header_layout), TAP(test_pty_messages), TAP(test_hello_roundtrip_and_negotiation),
         TAP(test_exec_roundtrip), TAP(test_exit_status_file_messages), TAP(test_type_names),
         TAP(test_reader_byte_by_byte), TAP(test_oversized_and_short_frames_rejected),
         TAP(test_truncated_payloads_rejected),
         TAP(test_strings_with_nul_or_lying_lengths_rejected))
