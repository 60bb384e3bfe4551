/*
 * libFuzzer target for the pty exec facade's reading of a session command's
 * result (src/core/pty_exec.c): the bytes after the first are what a box's
 * agent sends on the session's connection; the first picks pipe mode and
 * the size of each read (1..64 bytes), so markers and status lines split
 * everywhere. Nothing may crash, leak, or read out of bounds.
 */
#include "core/internal.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    sbx__pty_exec_replay(data + 1, size - 1, data[0] & 0x80, 1 + (data[0] & 63), &r, &e);
    sbx_exec_result_free(r);
    sbx_error_free(e);
    return 0;
}
