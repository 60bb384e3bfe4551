/*
 * libFuzzer target for the linux provider's teardown marker
 * (src/providers/linux/teardown.c): <box>/teardown is read by every stop
 * that outlives its deadline, from a box directory, so its bytes are input.
 * The parser must accept exactly "<q|t> <20 digits>\n" and nothing else.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned long long at = 7;
    char st = sbx__linux_teardown_marker_parse((const char *)data, size, &at);
    if (st) {
        /* Accepted: the exact shape, and the number it says. */
        if (size != 23 || (st != 'r' && st != 'q' && st != 't') || data[0] != (uint8_t)st)
            abort();
        char buf[24];
        memcpy(buf, data + 2, 20);
        buf[20] = 0;
        if (strtoull(buf, NULL, 10) != at)
            abort();
    } else if (at != 7) {
        abort(); /* refused input leaves the out-parameter alone */
    }
    return 0;
}
