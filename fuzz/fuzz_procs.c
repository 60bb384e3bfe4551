/*
 * libFuzzer target for the host side of the process listings (protocol
 * version 4): the bytes are a stream of frames a box's agent sends; each
 * frame's payload goes through the PTY_SESSIONS and PS_LIST decoders and
 * the JSON rendering sbx_proc_list and sbx_sandbox_top return
 * (src/core/proc.c). Nothing may crash, leak or read out of bounds, and a
 * listing over the protocol's bounds must be refused, never allocated.
 */
#include "core/internal.h"
#include "proto/procs.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sbx_proto_reader rd;
    sbx__proto_reader_init(&rd, SBX_PROTO_MAX_PAYLOAD);
    if (sbx__proto_reader_feed(&rd, data, size) == 0) {
        sbx_frame f;
        while (sbx__proto_reader_next(&rd, &f) == 1) {
            char *json = NULL;
            sbx_error *e = NULL;
            if (sbx__procs_sessions_json(f.payload, f.len, &json, &e) == SBX_OK)
                free(json);
            sbx_error_free(e);
            json = NULL;
            e = NULL;
            if (sbx__procs_ps_json(f.payload, f.len, &json, &e) == SBX_OK)
                free(json);
            sbx_error_free(e);
        }
    }
    sbx__proto_reader_free(&rd);
    return 0;
}
