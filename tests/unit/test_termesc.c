/*
 * [term] The terminal filter (src/core/termesc.c): what a box prints, as a
 * terminal is sent it by the CLI. Each input also fed one byte at a time,
 * which must give the same text (a sequence split between two reads).
 */
#include "tap.h"
#include "common.h"

#include "core/termesc.h"

static const struct {
    const char *in, *want;
} table[] = {
    { "plain text\n", "plain text\n" },
    { "tab\there\n", "tab\there\n" },
    { "crlf\r\n", "crlf\r\n" },
    { "over\rwrite\n", "over^Mwrite\n" },
    { "end\r", "end^M" },
    { "\x1b[31mred\x1b[0m", "^[[31mred^[[0m" },
    { "\x1b]0;title\x07", "^[]0;title^G" },
    { "\x1b]52;c;cHduZWQ=\x1b\\", "^[]52;c;cHduZWQ=^[\\" },
    { "bs\b\b\x7f", "bs^H^H^?" },
    { "\x0c\x0b\x00", "^L^K" }, /* the NUL ends the C string of this table */
    { "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80", "\xc3\xa9t\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80" },
    { "\xc2\x9b" "31m", "\\xc2\\x9b31m" },                  /* C1 CSI in UTF-8 */
    { "\xc2\xa0nbsp", "\xc2\xa0nbsp" },                      /* U+00A0 is text */
    { "\x9b" "31m", "\\x9b31m" },                            /* 8-bit CSI */
    { "\xc0\xaf", "\\xc0\\xaf" },                            /* overlong */
    { "\xed\xa0\x80", "\\xed\\xa0\\x80" },                   /* a surrogate */
    { "\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80" },          /* past U+10FFFF */
    { "\xe6\x97", "\\xe6\\x97" },                            /* cut short at the end */
    { "\xe6\x97x", "\\xe6\\x97x" },                          /* cut short by ASCII */
    { "\xe6\x1b", "\\xe6^[" },
};

static char *run(const char *in, size_t n, bool bytewise)
{
    sbx_buf b = { 0 };
    sbx_termesc t = { 0 };
    if (bytewise) {
        for (size_t i = 0; i < n; i++)
            TAP_EQ_INT(sbx__termesc_feed(&t, in + i, 1, &b), 0);
    } else {
        TAP_EQ_INT(sbx__termesc_feed(&t, in, n, &b), 0);
    }
    TAP_EQ_INT(sbx__termesc_flush(&t, &b), 0);
    TAP_EQ_INT(sbx__buf_append(&b, "", 0), 0);
    return b.data;
}

static void test_termesc_table(void)
{
    for (size_t i = 0; i < SBX_ARRAY_SIZE(table); i++) {
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            char *got = run(table[i].in, strlen(table[i].in), bytewise);
            TAP_EQ_STR(got, table[i].want);
            free(got);
        }
    }
    /* A NUL is a control like the others. */
    char *got = run("a\0b", 3, false);
    TAP_EQ_STR(got, "a^@b");
    free(got);
}

static void test_termesc_field(void)
{
    char *f = sbx__termesc_field("sleep 1 'x\x1b[2J\ny'\t\r\xc2\x9b\xe6\x97");
    TAP_EQ_STR(f, "sleep 1 'x^[[2J^Jy'^I^M\\xc2\\x9b\\xe6\\x97");
    free(f);
    f = sbx__termesc_field(NULL);
    TAP_EQ_STR(f, "");
    free(f);
}

TAP_MAIN(TAP(test_termesc_table), TAP(test_termesc_field))
