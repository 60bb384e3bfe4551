/*
 * libFuzzer target for the host side of PTY sessions (src/core/pty.c): the
 * bytes are what a box's agent sends on a PTY handle's connection (PTY_INFO,
 * PTY_OUT, PTY_ERR, EXIT, STATUS, ERROR, anything). They go through the
 * handle's frame handling and its bounded buffers, then are read out of
 * both streams as a caller would; nothing may crash, leak or read out of
 * bounds, and nothing the box sends may grow the handle past its window.
 */
#include "core/internal.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sbx__pty_fuzz(data, size);
    return 0;
}
