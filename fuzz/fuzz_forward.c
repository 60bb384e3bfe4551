/*
 * libFuzzer target for the host's reading of a box agent's answer to
 * FORWARD (src/proto/forward.c): the bytes are what the agent sends on a
 * forwarding stream (HELLO, STATUS, ERROR, anything, then the box's data),
 * fed in chunks whose size the first byte picks, as reads split them. The
 * parser must stop at its bound, never read out of bounds, and hand back
 * exactly the bytes past STATUS. The same bytes also go through the agent's
 * FORWARD decoder, frame by frame.
 */
#include "proto/forward.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t chunk = (size_t)data[0] * 37 + 1;
    data++;
    size--;
    sbx_forward_reply p;
    sbx__forward_reply_init(&p);
    size_t off = 0;
    int rc = 0, e = 0;
    char msg[128];
    const uint8_t *rest = NULL;
    size_t rest_len = 0;
    while (rc == 0 && off < size) {
        size_t n = size - off < chunk ? size - off : chunk;
        rc = sbx__forward_reply_feed(&p, data + off, n, &e, msg, sizeof(msg), &rest, &rest_len);
        off += n;
        /* The bound: no answer may take more than two maximal frames. */
        if (rc == 0 && p.rd.len > 2 * (SBX_FORWARD_MAX_REPLY + SBX_PROTO_HEADER) + chunk)
            abort();
    }
    if (rc == 1) {
        /* What follows STATUS is the end of what the last chunk brought. */
        if (rest_len > chunk || memcmp(rest, data + off - rest_len, rest_len) != 0)
            abort();
    } else if (rc < 0 && (e <= 0 || strlen(msg) >= sizeof(msg))) {
        abort();
    }
    sbx__forward_reply_free(&p);
    /* The agent's decoder over every frame of the same bytes. */
    sbx_frame f;
    size_t used;
    for (size_t at = 0; at < size;) {
        if (sbx__proto_parse(data + at, size - at, SBX_PROTO_MAX_PAYLOAD, &f, &used) != 1)
            break;
        uint32_t port, flags;
        if (sbx__msg_forward_decode(&f, &port, &flags) == 0 && (port < 1 || port > 65535))
            abort();
        at += used;
    }
    return 0;
}
