/*
 * Text a test collects as it goes (tests/lib/text.c): a log of what
 * callbacks saw, grown in place and always NUL-terminated.
 */
#ifndef SBX_TESTS_LIB_TEXT_H
#define SBX_TESTS_LIB_TEXT_H

#include <stddef.h>

/*
 * Appends n bytes of s to *text (len bytes used of cap; all three start at
 * 0/NULL), growing it geometrically; *text stays NUL-terminated. The caller
 * frees *text.
 */
void text_append(char **text, size_t *len, size_t *cap, const char *s, size_t n);

#endif
