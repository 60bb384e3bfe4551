/*
 * Shell quoting identical to Python's shlex.quote(), which the reference's
 * providers use to build command lines: the empty string becomes '', a
 * string made only of safe characters is returned as is, anything else is
 * wrapped in single quotes with each ' written as '"'"'.
 *
 * The safe set is shlex's `[\w@%+=:,./-]` under re.ASCII: ASCII letters,
 * digits, and _ @ % + = : , . / -. Every byte >= 0x80 is unsafe, so UTF-8
 * text is quoted, as Python quotes any non-ASCII str.
 */
#include "internal.h"

static bool safe_byte(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c && strchr("_@%+=:,./-", c) != NULL;
}

char *sbx_shell_quote(const char *s)
{
    if (!s || !*s)
        return strdup("''");
    bool safe = true;
    size_t quotes = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        safe &= safe_byte(*p);
        quotes += *p == '\'';
    }
    if (safe)
        return strdup(s);
    size_t len = strlen(s);
    /* Each ' grows from 1 to 5 bytes ('"'"'); plus the two outer quotes and the NUL. */
    char *out = malloc(len + quotes * 4 + 3);
    if (!out)
        return NULL;
    char *w = out;
    *w++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            memcpy(w, "'\"'\"'", 5);
            w += 5;
        } else {
            *w++ = *p;
        }
    }
    *w++ = '\'';
    *w = 0;
    return out;
}
