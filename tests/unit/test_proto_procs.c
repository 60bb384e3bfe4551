/*
 * Process listings (protocol version 4, src/proto/procs.c): round trips,
 * and a box that lies is refused: more entries than the bounds, counts the
 * payload cannot hold, strings over their bound or with NUL, unknown
 * flags, every truncation. The host's JSON rendering refuses the same.
 */
#include "tap.h"
#include "common.h"

#include "core/internal.h"
#include "proto/procs.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static sbx_frame frame_of(const sbx_pbuf *b, uint8_t type)
{
    sbx_frame f = {type, 1, b->data + SBX_PROTO_HEADER, (uint32_t)(b->len - SBX_PROTO_HEADER)};
    return f;
}

static void test_sessions_round_trip(void)
{
    sbx_session_entry in[2] = {{.id = 3, .pid = 40, .flags = SBX_SESSION_PIPES, .status = 0,
                                .started_ms = 1700000000123ull, .out_bytes = 9, .err_bytes = 1,
                                .command = "echo hi"},
                               {.id = 4, .pid = 41, .flags = SBX_SESSION_ENDED | SBX_SESSION_HELD,
                                .status = 143, .command = "sleep 9"}};
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    TAP_EQ_INT(sbx__msg_pty_sessions_encode(&b, in, 2), 0);
    sbx_frame f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    sbx_session_entry *out = NULL;
    size_t n = 0;
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), 0);
    TAP_EQ_INT((int)n, 2);
    TAP_EQ_STR(out[0].command, "echo hi");
    TAP_TRUE(out[0].started_ms == 1700000000123ull && out[0].out_bytes == 9);
    TAP_TRUE(out[1].status == 143 && out[1].flags == (SBX_SESSION_ENDED | SBX_SESSION_HELD));
    free(out);
    /* Every truncation is refused. */
    for (uint32_t cut = 0; cut < f.len; cut++) {
        sbx_frame t = f;
        t.len = cut;
        TAP_EQ_INT(sbx__msg_pty_sessions_decode(&t, &out, &n), -1);
    }
    /* The JSON the C API returns. */
    char *json = NULL;
    TAP_OK(sbx__procs_sessions_json(f.payload, f.len, &json, NULL));
    json_t *arr = json_loads(json, 0, NULL);
    free(json);
    TAP_EQ_INT((int)json_array_size(arr), 2);
    json_t *e0 = json_array_get(arr, 0), *e1 = json_array_get(arr, 1);
    TAP_EQ_STR(json_string_value(json_object_get(e0, "mode")), "pipe");
    TAP_TRUE(json_is_true(json_object_get(e0, "running")));
    TAP_TRUE(json_is_null(json_object_get(e0, "exit_code")));
    TAP_EQ_STR(json_string_value(json_object_get(e1, "mode")), "pty");
    TAP_EQ_INT((int)json_integer_value(json_object_get(e1, "exit_code")), 143);
    TAP_TRUE(json_is_true(json_object_get(e1, "attached")));
    json_decref(arr);
    sbx__pbuf_free(&b);
}

/* A hand-made PTY_SESSIONS with `count` entries claimed and `real` entries present. */
static void sessions_payload(sbx_pbuf *b, uint32_t count, uint32_t real, uint32_t cmd_len)
{
    sbx__pbuf_begin(b);
    sbx__pbuf_u32(b, count);
    for (uint32_t i = 0; i < real; i++) {
        sbx__pbuf_u32(b, i + 1);
        sbx__pbuf_u32(b, 100 + i);
        sbx__pbuf_u32(b, 0);
        sbx__pbuf_u32(b, 0);
        sbx__pbuf_u64(b, 0);
        sbx__pbuf_u64(b, 0);
        sbx__pbuf_u64(b, 0);
        sbx__pbuf_u32(b, cmd_len);
        for (uint32_t k = 0; k < cmd_len; k++)
            sbx__pbuf_u8(b, 'x');
    }
}

static void test_sessions_bounds(void)
{
    sbx_pbuf b = {0};
    sbx_session_entry *out = NULL;
    size_t n = 0;
    sbx_frame f;
    /* The most allowed, then one more: refused, and so is the JSON of it. */
    sessions_payload(&b, SBX_PROCS_MAX_SESSIONS, SBX_PROCS_MAX_SESSIONS, 1);
    f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), 0);
    TAP_EQ_INT((int)n, SBX_PROCS_MAX_SESSIONS);
    free(out);
    sessions_payload(&b, SBX_PROCS_MAX_SESSIONS + 1, SBX_PROCS_MAX_SESSIONS + 1, 1);
    f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), -1);
    char *json = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__procs_sessions_json(f.payload, f.len, &json, &e), SBX_EPROTO);
    TAP_CONTAINS(sbx_error_message(e), "over-long");
    sbx_error_free(e);
    /* A count the payload cannot hold (a huge allocation asked for): refused. */
    sessions_payload(&b, 200, 1, 1);
    f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), -1);
    /* A command over its bound, and one with a NUL. */
    sessions_payload(&b, 1, 1, SBX_PROCS_COMMAND_MAX + 1);
    f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), -1);
    sessions_payload(&b, 1, 1, SBX_PROCS_COMMAND_MAX);
    f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), 0);
    free(out);
    b.data[b.len - 3] = 0;
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), -1);
    /* Trailing bytes, an unknown flag, session id 0. */
    sessions_payload(&b, 1, 1, 1);
    sbx__pbuf_u8(&b, 0);
    f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), -1);
    sessions_payload(&b, 1, 1, 1);
    b.data[SBX_PROTO_HEADER + 4 + 8 + 3] = 8; /* flags */
    f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), -1);
    sessions_payload(&b, 1, 1, 1);
    memset(b.data + SBX_PROTO_HEADER + 4, 0, 4); /* id */
    f = frame_of(&b, SBX_MSG_PTY_SESSIONS);
    TAP_EQ_INT(sbx__msg_pty_sessions_decode(&f, &out, &n), -1);
    sbx__pbuf_free(&b);
}

static void test_ps_round_trip_and_bounds(void)
{
    sbx_ps_entry in = {.pid = 7, .ppid = 1, .uid = 0, .user = "root", .state = 'S',
                       .rss_kib = 1024, .cpu_ms = 30, .started_ms = 1700000000000ull,
                       .cmdline = "sleep 777"};
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    TAP_EQ_INT(sbx__msg_ps_encode(&b, 0, &in, 1), 0);
    sbx_frame f = frame_of(&b, SBX_MSG_PS_LIST);
    sbx_ps_entry *out = NULL;
    size_t n = 0;
    uint32_t flags = 9;
    TAP_EQ_INT(sbx__msg_ps_decode(&f, &flags, &out, &n), 0);
    TAP_TRUE(n == 1 && flags == 0 && out[0].pid == 7 && out[0].state == 'S');
    TAP_EQ_STR(out[0].user, "root");
    TAP_EQ_STR(out[0].cmdline, "sleep 777");
    free(out);
    for (uint32_t cut = 0; cut < f.len; cut++) {
        sbx_frame t = f;
        t.len = cut;
        TAP_EQ_INT(sbx__msg_ps_decode(&t, &flags, &out, &n), -1);
    }
    char *json = NULL;
    TAP_OK(sbx__procs_ps_json(f.payload, f.len, &json, NULL));
    TAP_CONTAINS(json, "\"command\":\"sleep 777\"");
    TAP_CONTAINS(json, "\"truncated\":false");
    free(json);
    /* A state that is not a letter, an unknown flag. */
    b.data[b.len - 4 - 9 - 24 - 1] = 0x01;
    TAP_EQ_INT(sbx__msg_ps_decode(&f, &flags, &out, &n), -1);
    sbx__pbuf_begin(&b);
    sbx__msg_ps_encode(&b, 2, &in, 1);
    f = frame_of(&b, SBX_MSG_PS_LIST);
    TAP_EQ_INT(sbx__msg_ps_decode(&f, &flags, &out, &n), -1);

    /* More than 4096 processes: the encoder sends 4096 and says truncated... */
    sbx_ps_entry *many = calloc(SBX_PROCS_MAX_PS + 1, sizeof(*many));
    for (size_t i = 0; i <= SBX_PROCS_MAX_PS; i++) {
        many[i] = in;
        many[i].pid = (uint32_t)i + 1;
    }
    sbx__pbuf_begin(&b);
    TAP_EQ_INT(sbx__msg_ps_encode(&b, 0, many, SBX_PROCS_MAX_PS + 1), 0);
    f = frame_of(&b, SBX_MSG_PS_LIST);
    TAP_EQ_INT(sbx__msg_ps_decode(&f, &flags, &out, &n), 0);
    TAP_TRUE(n == SBX_PROCS_MAX_PS && flags == SBX_PS_TRUNCATED);
    free(out);
    /* ...and a box that claims and sends 4097 is refused. */
    uint32_t over = SBX_PROCS_MAX_PS + 1;
    b.data[SBX_PROTO_HEADER + 4] = (uint8_t)(over >> 24);
    b.data[SBX_PROTO_HEADER + 5] = (uint8_t)(over >> 16);
    b.data[SBX_PROTO_HEADER + 6] = (uint8_t)(over >> 8);
    b.data[SBX_PROTO_HEADER + 7] = (uint8_t)over;
    sbx_pbuf extra = {0};
    sbx__pbuf_begin(&extra);
    sbx__msg_ps_encode(&extra, 0, &in, 1);
    sbx__pbuf_bytes(&b, extra.data + SBX_PROTO_HEADER + 8, extra.len - SBX_PROTO_HEADER - 8);
    f = frame_of(&b, SBX_MSG_PS_LIST);
    TAP_EQ_INT(sbx__msg_ps_decode(&f, &flags, &out, &n), -1);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__procs_ps_json(f.payload, f.len, &json, &e), SBX_EPROTO);
    sbx_error_free(e);
    sbx__pbuf_free(&extra);
    free(many);
    sbx__pbuf_free(&b);
}

/*
 * A fake agent in a child process: says HELLO with versions 1..`max`, then
 * sends `then` (frames, may be empty) at once and reads until the host goes.
 */
static pid_t fake_agent(int fd, int host_fd, int max, const sbx_pbuf *then, bool hang_up)
{
    pid_t pid = fork();
    TAP_TRUE(pid >= 0);
    if (pid > 0)
        return pid;
    close(host_fd); /* else the host's end stays open here and the read below never ends */
    sbx_pbuf h = {0};
    sbx__pbuf_begin(&h);
    sbx_msg_hello hello = {SBX_PROTO_MAGIC, 1, (uint32_t)max, SBX_PROTO_MAX_PAYLOAD,
                           (char *)"fake agent"};
    sbx__msg_hello_encode(&h, &hello);
    sbx__pbuf_finish(&h, SBX_MSG_HELLO, 0);
    if (write(fd, h.data, h.len) != (ssize_t)h.len)
        _exit(1);
    if (then && then->len && write(fd, then->data, then->len) != (ssize_t)then->len)
        _exit(1);
    char buf[4096];
    while (!hang_up && read(fd, buf, sizeof(buf)) > 0)
        ;
    _exit(0);
}

/* Asks PTY_LIST of a fake agent; returns the code, the error in *e. */
static int ask_fake(int max, const sbx_pbuf *then, bool hang_up, sbx_error **e)
{
    int sv[2];
    TAP_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pid_t pid = fake_agent(sv[1], sv[0], max, then, hang_up);
    close(sv[1]);
    uint8_t *payload = NULL;
    size_t len = 0;
    int rc = sbx__pty_ask_fd(sv[0], SBX_MSG_PTY_LIST, SBX_MSG_PTY_SESSIONS,
                             "listing the box's sessions", &payload, &len, e);
    if (rc == SBX_OK) {
        char *json = NULL;
        rc = sbx__procs_sessions_json(payload, len, &json, e);
        free(json);
        free(payload);
    }
    int st;
    TAP_EQ_INT(waitpid(pid, &st, 0), pid);
    return rc;
}

/* An older agent, one that does not know the message, and one that lies, each said plainly. */
static void test_old_and_hostile_agents(void)
{
    sbx_error *e = NULL;
    /* Protocol 3: refused before anything is sent, with what to do. */
    TAP_EQ_INT(ask_fake(3, NULL, false, &e), SBX_ENOTSUP);
    TAP_CONTAINS(sbx_error_message(e), "too old for listing the box's sessions");
    TAP_CONTAINS(sbx_error_message(e), "restart the box");
    sbx_error_free(e);
    e = NULL;
    /* An agent that says 4 but does not know the type: its ERROR is the message. */
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_status_encode(&b, 71, "unknown frame type 0x40");
    sbx__pbuf_finish(&b, SBX_MSG_ERROR, 0);
    TAP_EQ_INT(ask_fake(4, &b, false, &e), SBX_EIO);
    TAP_CONTAINS(sbx_error_message(e), "unknown frame type 0x40");
    sbx_error_free(e);
    e = NULL;
    /* An over-long list: refused, nothing of it kept. */
    sessions_payload(&b, SBX_PROCS_MAX_SESSIONS + 1, SBX_PROCS_MAX_SESSIONS + 1, 1);
    sbx__pbuf_finish(&b, SBX_MSG_PTY_SESSIONS, 1);
    TAP_EQ_INT(ask_fake(4, &b, false, &e), SBX_EPROTO);
    TAP_CONTAINS(sbx_error_message(e), "over-long session list");
    sbx_error_free(e);
    e = NULL;
    /* A well-formed answer on another channel is not the answer: the hang-up after it is. */
    sessions_payload(&b, 1, 1, 1);
    sbx__pbuf_finish(&b, SBX_MSG_PTY_SESSIONS, 2);
    TAP_EQ_INT(ask_fake(4, &b, true, &e), SBX_EIO);
    /* Which end notices the hang-up first is the kernel's: a closed read, or EPIPE on send. */
    TAP_CONTAINS(sbx_error_message(e), "the box's agent");
    sbx_error_free(e);
    e = NULL;
    /* And the right one is. */
    sessions_payload(&b, 1, 1, 1);
    sbx__pbuf_finish(&b, SBX_MSG_PTY_SESSIONS, 1);
    TAP_EQ_INT(ask_fake(4, &b, false, &e), SBX_OK);
    sbx__pbuf_free(&b);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_sessions_round_trip),
        TAP(test_sessions_bounds),
        TAP(test_ps_round_trip_and_bounds),
        TAP(test_old_and_hostile_agents),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
