/*
 * libFuzzer target for the WWW-Authenticate parser (src/image/auth.c): a
 * registry's 401 answer is hostile input. A parse that succeeds must give a
 * lower-case scheme and NUL-free strings no longer than the header. Pure.
 */
#include "core/internal.h"
#include "image/auth.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *s, size_t size)
{
    if (s && strlen(s) > size)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sbx_www_auth a;
    if (sbx__www_auth_parse((const char *)data, size, &a) < 0)
        return 0;
    if (!a.scheme || !*a.scheme)
        abort();
    for (const char *p = a.scheme; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            abort();
    check(a.scheme, size);
    check(a.realm, size);
    check(a.service, size);
    check(a.scope, size);
    check(a.error, size);
    sbx__www_auth_free(&a);
    return 0;
}
