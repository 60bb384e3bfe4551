/*
 * libFuzzer target for `apptainer instance list --json` as the apptainer
 * provider reads it (src/providers/apptainer/instances.c, built into the
 * plugin and, here, into the target): the CLI's output is outside bytes.
 * Whatever they are, the parser answers a status of the table and never
 * reads past the buffer (ASan watches).
 */
#include "providers/apptainer/instances.c"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of exactly `size` bytes, so a read past it is ASan's finding. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    const char *names[] = {"nemo-gym-0123456789abcdef", "", "x"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        sbx_status s = ap_instance_status(buf, size, names[i]);
        if (s != SBX_STATUS_RUNNING && s != SBX_STATUS_STARTING && s != SBX_STATUS_STOPPED &&
            s != SBX_STATUS_ERROR && s != SBX_STATUS_UNKNOWN)
            abort();
    }
    free(buf);
    return 0;
}
