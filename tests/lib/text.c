/* Text a test collects as it goes: see text.h. */
#include "lib/text.h"

#include "tap.h"

#include <stdlib.h>
#include <string.h>

void text_append(char **text, size_t *len, size_t *cap, const char *s, size_t n)
{
    /* Grows geometrically: the 1 MiB events must not cost a copy per byte (memcheck). */
    if (*len + n + 1 > *cap) {
        while (*len + n + 1 > *cap)
            *cap = *cap ? 2 * *cap : 256;
        *text = realloc(*text, *cap);
        TAP_TRUE(*text);
    }
    memcpy(*text + *len, s, n);
    *len += n;
    (*text)[*len] = 0;
}
