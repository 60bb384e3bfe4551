/*
 * libFuzzer target for the linux provider's image name check
 * (sbx__linux_image_name_ok in src/providers/linux/image.c): names come
 * from users, scripts and registries. Whatever the bytes, a name that is
 * accepted is at most 255 bytes, holds no control character, no empty,
 * "." or ".." component and does not start with '/' or '.': even though
 * the store never uses a name as a path (it files it by its sha256), a
 * name that could climb must not pass.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024)
        return 0;
    char *name = malloc(size + 1);
    if (!name)
        abort();
    memcpy(name, data, size);
    name[size] = 0;
    if (sbx__linux_image_name_ok(name)) {
        size_t n = strlen(name);
        if (n == 0 || n > 255 || name[0] == '/' || name[0] == '.')
            abort();
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
                abort();
        /* Components before any "@digest": none empty, ".", "..". */
        size_t end = strcspn(name, "@");
        for (size_t i = 0; i <= end;) {
            size_t len = strcspn(name + i, "/@");
            if (i + len > end)
                len = end - i;
            if ((len == 0 && strchr(name, '/')) || (len == 1 && name[i] == '.') ||
                (len == 2 && name[i] == '.' && name[i + 1] == '.'))
                abort();
            i += len + 1;
        }
    }
    free(name);
    return 0;
}
