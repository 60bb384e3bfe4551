/*
 * libFuzzer target for the agent protocol decoder: the bytes are a stream as
 * the agent or the host would read it off a socket. Every frame is decoded
 * with every message decoder; nothing may crash, leak or read out of bounds,
 * and a malformed frame must stop the stream.
 */
#include "proto/proto.h"
#include "proto/pty.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_all(const sbx_frame *f)
{
    sbx_msg_hello *h = NULL;
    if (sbx__msg_hello_decode(f, &h) == 0) {
        (void)strlen(h->software);
        free(h);
    }
    sbx_msg_exec *e = NULL;
    if (sbx__msg_exec_decode(f, &e) == 0) {
        /* Walk what the agent would use: argv and env must be NULL-terminated C strings. */
        for (char **p = e->argv; *p; p++)
            (void)strlen(*p);
        for (char **p = e->env; *p; p++)
            (void)strlen(*p);
        if (e->cwd)
            (void)strlen(e->cwd);
        if (e->user)
            (void)strlen(e->user);
        free(e);
    }
    sbx_msg_exit *x = NULL;
    if (sbx__msg_exit_decode(f, &x) == 0) {
        (void)strlen(x->message);
        free(x);
    }
    sbx_msg_status *s = NULL;
    if (sbx__msg_status_decode(f, &s) == 0) {
        (void)strlen(s->message);
        free(s);
    }
    sbx_msg_file *fm = NULL;
    if (sbx__msg_file_decode(f, &fm) == 0) {
        (void)strlen(fm->path);
        free(fm);
    }
    sbx_msg_file_info info;
    (void)sbx__msg_file_info_decode(f, &info);
    uint64_t v;
    (void)sbx__msg_u64_decode(f, &v);
    (void)sbx__proto_type_name(f->type);
    /* PTY sessions (protocol version 3). */
    sbx_msg_pty_open po = {0};
    if (sbx__msg_pty_open_decode(f, &po) == 0) {
        for (char **p = po.exec->argv; *p; p++)
            (void)strlen(*p);
        sbx__msg_pty_open_free(&po);
    }
    sbx_msg_pty_info pi;
    (void)sbx__msg_pty_info_decode(f, &pi);
    sbx_msg_pty_attach pa;
    (void)sbx__msg_pty_attach_decode(f, &pa);
    uint32_t a, b;
    (void)sbx__msg_pty_resize_decode(f, &a, &b);
    (void)sbx__msg_pty_signal_decode(f, &a);
    uint64_t off;
    const uint8_t *d;
    if (sbx__msg_pty_data_decode(f, &off, &d, &a) == 0 && a)
        (void)(d[0] + d[a - 1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A small payload limit so the fuzzer reaches the "too large" path cheaply too. */
    sbx_proto_reader r;
    sbx__proto_reader_init(&r, 1 << 16);
    /* Feed in uneven pieces, as a socket would deliver them. */
    size_t off = 0, step = 1;
    int rc = 0;
    while (off < size && rc >= 0) {
        size_t n = size - off < step ? size - off : step;
        if (sbx__proto_reader_feed(&r, data + off, n) < 0)
            break;
        off += n;
        step = step * 3 + 1;
        sbx_frame f;
        while ((rc = sbx__proto_reader_next(&r, &f)) == 1)
            decode_all(&f);
    }
    sbx__proto_reader_free(&r);
    return 0;
}
