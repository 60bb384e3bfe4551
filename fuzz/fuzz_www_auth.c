/*
 * libFuzzer target for the WWW-Authenticate parser (src/image/auth.c): a
 * registry's 401 answer is hostile input. A parse that succeeds must give a
 * lower-case scheme and NUL-free strings no longer than the header. The
 * realm it names then goes through the rule of where credentials may go
 * (sbx__realm_may_get_credentials), as registry.c sends it there: a realm
 * holding '@' or a backslash never gets them, and one an https registry
 * may send them to an http one may too. Pure.
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
    if (a.realm) {
        static const char *const bases[] = {"https://reg.example:5000", "http://127.0.0.1:5000",
                                            "https://registry-1.docker.io"};
        for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
            bool ok = sbx__realm_may_get_credentials(bases[i], a.realm);
            if (ok && (strchr(a.realm, '@') || strchr(a.realm, '\\')))
                abort();
            /* A realm that may get them from an https base may from an http one. */
            if (ok && i == 0 && !sbx__realm_may_get_credentials("http://reg.example", a.realm))
                abort();
        }
    }
    sbx__www_auth_free(&a);
    return 0;
}
