/*
 * The pty exec facade's reading of a session command's result (items 47-49
 * of the reference's section G), from frames as a box's agent sends them,
 * with reads of a few bytes so that the marker and the status are split
 * across reads at every position (src/core/pty_exec.c sbx__pty_exec_replay).
 */
#include "tap.h"
#include "common.h"
#include "core/internal.h"
#include "proto/proto.h"
#include "proto/pty.h"

#include <stdint.h>
#include <string.h>

struct frames {
    uint8_t data[1 << 16];
    size_t len;
    uint64_t off[2];
};

static void add(struct frames *f, sbx_pbuf *b, uint8_t type)
{
    TAP_EQ_INT(sbx__pbuf_finish(b, type, 1), 0);
    TAP_TRUE(f->len + b->len <= sizeof(f->data));
    memcpy(f->data + f->len, b->data, b->len);
    f->len += b->len;
    sbx__pbuf_free(b);
}

static void out(struct frames *f, int err, const char *text)
{
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__pbuf_u64(&b, f->off[err]);
    sbx__pbuf_bytes(&b, text, strlen(text));
    f->off[err] += strlen(text);
    add(f, &b, err ? SBX_MSG_PTY_ERR : SBX_MSG_PTY_OUT);
}

static void ended(struct frames *f, int code)
{
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_exit_encode(&b, SBX_EXIT_CODE, code, 0, "");
    add(f, &b, SBX_MSG_EXIT);
}

static int replay(const struct frames *f, int pipes, size_t cap, sbx_exec_result **r,
                  sbx_error **e)
{
    *r = NULL;
    *e = NULL;
    return sbx__pty_exec_replay(f->data, f->len, pipes, cap, r, e);
}

/* The marker and the status in any split: stdout is what came before the marker. */
static void test_marker_split_anywhere(void)
{
    struct frames f = {0};
    /* The echo of the printf line holds 'NGPTY' '0123456789ab': never the marker itself. */
    out(&f, 0, "printf '%s%s:%s\\n' 'NGPTY' '0123456789ab' \"$?\"\r\nhello\r\nNGPTY0123");
    out(&f, 0, "456789ab:7\r");
    out(&f, 0, "\n$ ");
    for (size_t cap = 1; cap <= 80; cap++) {
        sbx_exec_result *r;
        sbx_error *e;
        TAP_EQ_INT(replay(&f, 0, cap, &r, &e), SBX_OK);
        TAP_EQ_STR(sbx_exec_result_stdout(r, NULL),
                   "printf '%s%s:%s\\n' 'NGPTY' '0123456789ab' \"$?\"\r\nhello\r\n");
        TAP_EQ_INT(sbx_exec_result_return_code(r), 7);
        TAP_NULL(sbx_exec_result_error_type(r));
        TAP_NULL(sbx_exec_result_stderr(r, NULL));
        sbx_exec_result_free(r);
    }
}

/* Exit text that is not all digits (or past an int): 125 and "pty"; EOF ends the line too. */
static void test_exit_text(void)
{
    static const struct {
        const char *tail;
        int code;
    } cases[] = {
        {"NGPTY0123456789ab:oops\n", 125}, {"NGPTY0123456789ab: 12 \r\n", 12},
        {"NGPTY0123456789ab:\n", 125},     {"NGPTY0123456789ab:99999999999\n", 125},
        {"NGPTY0123456789ab:-1\n", 125},   {"NGPTY0123456789ab:0", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct frames f = {0};
        out(&f, 0, "x\r\n");
        out(&f, 0, cases[i].tail);
        ended(&f, 0);
        for (size_t cap = 1; cap <= 40; cap += 3) {
            sbx_exec_result *r;
            sbx_error *e;
            TAP_EQ_INT(replay(&f, 0, cap, &r, &e), SBX_OK);
            TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "x\r\n");
            TAP_EQ_INT(sbx_exec_result_return_code(r), cases[i].code);
            if (cases[i].code == 125)
                TAP_EQ_STR(sbx_exec_result_error_type(r), "pty");
            else
                TAP_NULL(sbx_exec_result_error_type(r));
            sbx_exec_result_free(r);
        }
    }
}

/* The session ends before the marker: the reference's error; no marker yet: a timeout. */
static void test_ended_or_timed_out(void)
{
    struct frames f = {0};
    out(&f, 0, "partial NGPTY0123456789ab");
    sbx_exec_result *r;
    sbx_error *e;
    TAP_EQ_INT(replay(&f, 0, 7, &r, &e), SBX_ETIMEDOUT);
    TAP_NULL(r);
    sbx_error_free(e);
    ended(&f, 0);
    TAP_EQ_INT(replay(&f, 0, 7, &r, &e), SBX_EPTY);
    TAP_EQ_STR(sbx_error_message(e), "PTY session ended before the command finished");
    sbx_error_free(e);
}

/* Pipe mode: stderr is what the session printed there (None when nothing). */
static void test_pipe_stderr(void)
{
    struct frames f = {0};
    out(&f, 1, "warn\r\n");
    out(&f, 0, "NGPTY0123456789ab:0\n");
    ended(&f, 0);
    sbx_exec_result *r;
    sbx_error *e;
    TAP_EQ_INT(replay(&f, 1, 2, &r, &e), SBX_OK);
    TAP_EQ_STR(sbx_exec_result_stderr(r, NULL), "warn\r\n");
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "");
    sbx_exec_result_free(r);
    struct frames g = {0};
    out(&g, 0, "NGPTY0123456789ab:0\n");
    ended(&g, 0);
    TAP_EQ_INT(replay(&g, 1, 64, &r, &e), SBX_OK);
    TAP_NULL(sbx_exec_result_stderr(r, NULL));
    sbx_exec_result_free(r);
}

TAP_MAIN(TAP(test_marker_split_anywhere), TAP(test_exit_text), TAP(test_ended_or_timed_out),
         TAP(test_pipe_stderr))
