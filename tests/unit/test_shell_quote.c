/*
 * sbx_shell_quote() against Python's shlex.quote(). The expected outputs were
 * produced by running /usr/bin/python3's shlex.quote on each input while this
 * test was written, and are hard-coded here.
 */
#include "tap.h"
#include "common.h"

#include "core/internal.h"

static const struct {
    const char *in;
    const char *want;
} table[] = {
    { "", "''" },
    { "abc", "abc" },
    { "ABCxyz019", "ABCxyz019" },
    { "a b", "'a b'" },
    { "it's", "'it'\"'\"'s'" },
    { "a'b'c", "'a'\"'\"'b'\"'\"'c'" },
    { "'", "''\"'\"''" },
    { "''", "''\"'\"''\"'\"''" },
    { "$HOME", "'$HOME'" },
    { "a\"b", "'a\"b'" },
    { "safe@%+=:,./-_", "safe@%+=:,./-_" },
    { "tab\x09""", "'tab\x09""'" },
    { "new\x0a""line", "'new\x0a""line'" },
    { "\xc3""\xbc""", "'\xc3""\xbc""'" },
    { "\xe6""\x97""\xa5""\xe6""\x9c""\xac""", "'\xe6""\x97""\xa5""\xe6""\x9c""\xac""'" },
    { "*", "'*'" },
    { "?", "'?'" },
    { "~", "'~'" },
    { "!", "'!'" },
    { "#", "'#'" },
    { "a;b", "'a;b'" },
    { "`x`", "'`x`'" },
    { "\\", "'\\'" },
    { "-n", "-n" },
    { "--flag=value", "--flag=value" },
    { "a&b", "'a&b'" },
    { "a|b", "'a|b'" },
    { "(x)", "'(x)'" },
    { "{a,b}", "'{a,b}'" },
    { "[x]", "'[x]'" },
    { "^", "'^'" },
    { "0", "0" },
    { "x y'z\"w", "'x y'\"'\"'z\"w'" },
    { " ", "' '" },
    { "<", "'<'" },
    { ">", "'>'" },
    { "a=b", "a=b" },
    { "user@host:/path/file.txt", "user@host:/path/file.txt" },
    { "100%", "100%" },
    { "+1", "+1" },
    { ",", "," },
    { "\x7f""", "'\x7f""'" },
    { "\x01""", "'\x01""'" },
    { "don't stop", "'don'\"'\"'t stop'" },
    { "'; rm -rf / #", "''\"'\"'; rm -rf / #'" },
};

static void test_matches_python_shlex_quote(void)
{
    for (size_t i = 0; i < SBX_ARRAY_SIZE(table); i++) {
        char *got = sbx_shell_quote(table[i].in);
        TAP_EQ_STR(got, table[i].want);
        sbx_free(got);
    }
}

static void test_every_ascii_byte(void)
{
    /* Only [A-Za-z0-9_@%+=:,./-] pass unquoted (shlex's \w under re.ASCII plus @%+=:,./-). */
    for (int c = 1; c < 256; c++) {
        char in[2] = { (char)c, 0 };
        char *got = sbx_shell_quote(in);
        bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    (c < 128 && strchr("_@%+=:,./-", c));
        if (safe)
            TAP_EQ_STR(got, in);
        else if (c == '\'')
            TAP_EQ_STR(got, "''\"'\"''");
        else
            TAP_TRUE(got[0] == '\'' && got[1] == (char)c && got[2] == '\'' && !got[3]);
        sbx_free(got);
    }
}

static void test_null_is_empty(void)
{
    char *got = sbx_shell_quote(NULL);
    TAP_EQ_STR(got, "''");
    sbx_free(got);
}

static void test_quoted_text_round_trips_through_sh(void)
{
    /* What the shell reads back is the original text. */
    static const char *const inputs[] = { "it's a \"test\" $HOME `id` \\n", "''", "a\nb", "-e" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(inputs); i++) {
        char *q = sbx_shell_quote(inputs[i]);
        char out[256];
        int rc = run_cmd(out, sizeof(out), "printf '%%s' %s", q);
        TAP_EQ_INT(rc, 0);
        TAP_EQ_STR(out, inputs[i]);
        sbx_free(q);
    }
}

TAP_MAIN(TAP(test_matches_python_shlex_quote), TAP(test_every_ascii_byte),
         TAP(test_null_is_empty), TAP(test_quoted_text_round_trips_through_sh))
