/*
 * A small TAP harness. Each test runs in its own forked process under
 * alarm(), so a crash or hang fails that test only. Typed asserts print both
 * sides. After each test the harness checks that no file descriptor leaked.
 *
 *   static void test_x(void) { TAP_EQ_INT(1 + 1, 2); }
 *   TAP_MAIN(TAP(test_x), TAP_T(test_slow, 120))
 *
 * `test_x [FILTER]` (or TAP_FILTER=...) runs a selection: comma-separated name
 * substrings, those starting with '-' excluded ("linux,-userns").
 *
 * A test that cannot run here calls TAP_SKIP("why"). With SBX_MUST_WORK=1
 * (CI sets it), a skip is a failure: a broken environment cannot pass.
 */
#ifndef SBX_TAP_H
#define SBX_TAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tap_test {
    const char *name;
    void (*fn)(void);
    unsigned timeout_s;
};

#define TAP(fn) { #fn, fn, 60 }
#define TAP_T(fn, secs) { #fn, fn, secs }

int tap_main(int argc, char **argv, const struct tap_test *tests, size_t n);
void tap_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
void tap_skip(const char *why) __attribute__((noreturn));
/* Opt out of the fd-leak check for the current test (it forks daemons, say). */
void tap_allow_fd_changes(void);
/* A fresh private temp directory for this test, removed after it. */
const char *tap_tmpdir(void);
/*
 * A bulk count for a test whose size checks speed (no scan per entry), not
 * a memory path: n, or n / 10 under memcheck (SBX_VALGRIND) or TSan, which
 * run 5-50x slower and check the same code with a tenth of the entries.
 */
int tap_bulk(int n);

#define TAP_MAIN(...)                                                                              \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        static const struct tap_test tests_[] = { __VA_ARGS__ };                                   \
        return tap_main(argc, argv, tests_, sizeof(tests_) / sizeof(tests_[0]));                   \
    }

#define TAP_SKIP(why) tap_skip(why)
#define TAP_FAIL(...) tap_fail_at(__FILE__, __LINE__, __VA_ARGS__)

#define TAP_TRUE(c)                                                                                \
    do {                                                                                           \
        if (!(c))                                                                                  \
            tap_fail_at(__FILE__, __LINE__, "expected true: %s", #c);                              \
    } while (0)

#define TAP_EQ_INT(a, b)                                                                           \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_)                                                                              \
            tap_fail_at(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, a_, b_);             \
    } while (0)

#define TAP_NE_INT(a, b)                                                                           \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ == b_)                                                                              \
            tap_fail_at(__FILE__, __LINE__, "%s != %s: both %lld", #a, #b, a_);                    \
    } while (0)

#define TAP_EQ_STR(a, b)                                                                           \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                     \
            tap_fail_at(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,                  \
                        a_ ? a_ : "(null)", b_ ? b_ : "(null)");                                   \
    } while (0)

#define TAP_NULL(a)                                                                                \
    do {                                                                                           \
        const void *a_ = (a);                                                                      \
        if (a_)                                                                                    \
            tap_fail_at(__FILE__, __LINE__, "expected NULL: %s", #a);                              \
    } while (0)

#define TAP_CONTAINS(hay, needle)                                                                  \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (!h_ || !strstr(h_, n_))                                                                \
            tap_fail_at(__FILE__, __LINE__, "%s does not contain \"%s\": \"%s\"", #hay, n_,       \
                        h_ ? h_ : "(null)");                                                       \
    } while (0)

/* An sbx call that must succeed; prints the error's message otherwise. */
#define TAP_OK(call)                                                                               \
    do {                                                                                           \
        sbx_error *e_ = NULL;                                                                      \
        int rc_ = (call);                                                                          \
        if (rc_ != 0)                                                                              \
            tap_fail_at(__FILE__, __LINE__, "%s failed: %d %s", #call, rc_,                        \
                        e_ ? sbx_error_message(e_) : "");                                          \
        sbx_error_free(e_);                                                                        \
    } while (0)

#endif
