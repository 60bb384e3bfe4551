/*
 * [svc-logs] The service log's record format (logs.h): the header the shim
 * writes and the parser every reader uses. libc only: sbx-shim links it
 * statically without the rest of the library.
 */
#include "core/logs.h"

void sbx__log_header(unsigned char *h, int stream, uint32_t len, uint64_t time_ns)
{
    h[0] = 'S';
    h[1] = 'L';
    h[2] = (unsigned char)stream;
    h[3] = 0;
    for (int i = 0; i < 4; i++)
        h[4 + i] = (unsigned char)(len >> (8 * i));
    for (int i = 0; i < 8; i++)
        h[8 + i] = (unsigned char)(time_ns >> (8 * i));
}

sbx_log_result sbx__log_parse(const unsigned char *buf, size_t len, sbx_log_record *rec,
                              size_t *used)
{
    /* Each check as soon as its bytes are there: a wrong magic is BAD even in a short buffer. */
    if (len >= 1 && buf[0] != 'S')
        return SBX_LOG_BAD;
    if (len >= 2 && buf[1] != 'L')
        return SBX_LOG_BAD;
    if (len >= 3 && (buf[2] < SBX_LOG_STDOUT || buf[2] > SBX_LOG_EVENT))
        return SBX_LOG_BAD;
    if (len >= 4 && buf[3] != 0)
        return SBX_LOG_BAD;
    if (len < SBX_LOG_HEADER)
        return SBX_LOG_MORE;
    uint32_t n = 0;
    uint64_t t = 0;
    for (int i = 0; i < 4; i++)
        n |= (uint32_t)buf[4 + i] << (8 * i);
    for (int i = 0; i < 8; i++)
        t |= (uint64_t)buf[8 + i] << (8 * i);
    if (n > SBX_LOG_MAX_RECORD)
        return SBX_LOG_BAD;
    if (len - SBX_LOG_HEADER < n)
        return SBX_LOG_MORE;
    rec->stream = buf[2];
    rec->time_ns = t;
    rec->data = buf + SBX_LOG_HEADER;
    rec->len = n;
    *used = SBX_LOG_HEADER + (size_t)n;
    return SBX_LOG_OK;
}
