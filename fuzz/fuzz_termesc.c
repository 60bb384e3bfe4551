/*
 * [term] libFuzzer target for the terminal filter (src/core/termesc.c): its
 * input is whatever a box prints. Checks that what it lets through holds
 * no control a terminal obeys (no C0 but TAB and LF, CR only before LF, no
 * DEL, no C1 in UTF-8, only valid UTF-8), that the input cut anywhere
 * (the first byte says where) gives the same output as in one piece, and
 * that a table field holds no control at all.
 */
#include "core/termesc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const unsigned char *p, size_t n, int field)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == 0x7f || (c < 0x20 && c != '\t' && c != '\n' && c != '\r'))
            abort();
        if (field && (c == '\t' || c == '\n' || c == '\r'))
            abort();
        if (c == '\r' && (i + 1 >= n || p[i + 1] != '\n'))
            abort();
        if (c < 0x80)
            continue;
        /* Valid UTF-8, never U+0080..U+009F. */
        size_t k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : 0;
        if (!k || c > 0xf4 || i + k >= n)
            abort();
        for (size_t j = 1; j <= k; j++)
            if ((p[i + j] & 0xc0) != 0x80)
                abort();
        if (c == 0xc2 && p[i + 1] < 0xa0)
            abort();
        i += k;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t cut = data[0] % size;
    const unsigned char *in = data + 1;
    size_t n = size - 1;
    if (cut > n)
        cut = n;
    sbx_buf one = { 0 }, two = { 0 };
    sbx_termesc a = { 0 }, b = { 0 };
    if (sbx__termesc_feed(&a, in, n, &one) < 0 || sbx__termesc_flush(&a, &one) < 0 ||
        sbx__termesc_feed(&b, in, cut, &two) < 0 || sbx__termesc_feed(&b, in + cut, n - cut, &two) < 0 ||
        sbx__termesc_flush(&b, &two) < 0)
        abort();
    if (one.len != two.len || (one.len && memcmp(one.data, two.data, one.len)))
        abort();
    check((const unsigned char *)one.data, one.len, 0);
    /* A field: a string up to its first NUL. */
    char *s = malloc(n + 1);
    if (!s)
        abort();
    memcpy(s, in, n);
    s[n] = 0;
    char *f = sbx__termesc_field(s);
    if (!f)
        abort();
    check((const unsigned char *)f, strlen(f), 1);
    free(f);
    free(s);
    sbx__buf_free(&one);
    sbx__buf_free(&two);
    return 0;
}
