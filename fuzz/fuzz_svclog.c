/*
 * [svc-logs] libFuzzer target for the service log parser (src/core/logfmt.c):
 * libsbx reads <box dir>/service.log, which the shim writes with the box's
 * bytes as payload, so every byte is input. Checks that the parser never
 * reads past the buffer, that a record it hands out lies inside it and is
 * bounded, and that its header is the one sbx__log_header writes for it.
 */
#include "core/logs.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes: ASan catches a read one past it. */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    size_t off = 0;
    while (off < size) {
        sbx_log_record rec;
        size_t used = 0;
        sbx_log_result r = sbx__log_parse(buf + off, size - off, &rec, &used);
        if (r != SBX_LOG_OK)
            break;
        if (used < SBX_LOG_HEADER || used > size - off || rec.len > SBX_LOG_MAX_RECORD ||
            rec.data != buf + off + SBX_LOG_HEADER || used != SBX_LOG_HEADER + rec.len ||
            rec.stream < SBX_LOG_STDOUT || rec.stream > SBX_LOG_EVENT)
            abort();
        unsigned char hdr[SBX_LOG_HEADER];
        sbx__log_header(hdr, rec.stream, (uint32_t)rec.len, rec.time_ns);
        if (memcmp(hdr, buf + off, SBX_LOG_HEADER) != 0)
            abort();
        off += used;
    }
    free(buf);
    return 0;
}
