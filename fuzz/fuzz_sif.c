/*
 * libFuzzer target for the SIF header parser (src/image/sif.c): the input
 * is the start of a SIF file, and its size the file's. Whatever the bytes,
 * the parser either names a partition that lies inside the file or fails
 * with a message; it never reads past the buffer (ASan watches).
 */
#include "image/sif.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes, so a read past it is ASan's finding. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    uint64_t need = sbx__sif_header_bytes(buf, size, size);
    if (need > size)
        abort(); /* the table was checked against the file's size */
    uint64_t off = 0, len = 0;
    sbx_error *e = NULL;
    if (sbx__sif_find_rootfs(buf, size, size, &off, &len, &e) == SBX_OK) {
        if (off > size || len > size - off)
            abort();
    } else if (!e || !sbx_error_message(e)[0]) {
        abort();
    }
    sbx_error_free(e);
    free(buf);
    return 0;
}
