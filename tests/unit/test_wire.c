/*
 * The remote kit's stream readers (include/sbx/wire.h), through the public
 * API only: SSE against the WHATWG standard's own examples and its rules
 * (line endings, BOM, UTF-8 decoding, id, retry, dispatch), NDJSON lines,
 * Connect and gRPC-web envelopes and gRPC-web trailers. Every stream is
 * also fed in chunks of 1, 2, 3, 5 and 7 bytes: the events must be the same
 * as when it is fed whole.
 */
#include "tap.h"
#include "common.h"
#include "lib/text.h"

#include <sbx.h>
#include <sbx/wire.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- a log of what the callbacks saw ------------------------------------- */

typedef struct {
    char *text;
    size_t len, cap;
    int count;
    int stop_at; /* the callback returns stop_rc on this call (1-based); 0: never */
    int stop_rc;
    void *reader;   /* for the re-entry test */
    int reentry_rc; /* what feeding the reader from its callback returned */
} logbuf;

static void log_add(logbuf *l, const char *s, size_t n)
{
    text_append(&l->text, &l->len, &l->cap, s, n);
}

static void log_str(logbuf *l, const char *s)
{
    log_add(l, s, strlen(s));
}

/* Bytes as a readable string: NUL, LF and CR escaped, so a log is one line per event. */
static void log_bytes(logbuf *l, const char *s, size_t n)
{
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *esc = s[i] == 0 ? "\\0" : s[i] == '\n' ? "\\n" : s[i] == '\r' ? "\\r" : NULL;
        if (esc) {
            log_add(l, s + run, i - run);
            log_str(l, esc);
            run = i + 1;
        }
    }
    log_add(l, s + run, n - run);
}

static int log_stop(logbuf *l)
{
    l->count++;
    return l->stop_at && l->count == l->stop_at ? l->stop_rc : 0;
}

/* --- SSE ------------------------------------------------------------------ */

static int sse_cb(const char *type, const char *data, size_t data_len, const char *last_id,
                  void *user)
{
    logbuf *l = user;
    TAP_EQ_INT(data[data_len], 0); /* NUL-terminated after data_len */
    log_str(l, type);
    log_str(l, "|");
    log_bytes(l, data, data_len);
    log_str(l, "|");
    log_str(l, last_id);
    log_str(l, "\n");
    if (l->reader) {
        sbx_error *e = NULL;
        l->reentry_rc = sbx_sse_feed(l->reader, "x", 1, &e);
        sbx_error_free(e);
    }
    return log_stop(l);
}

typedef struct {
    char *log; /* each event as "type|data|last_id\n" */
    int rc;    /* the first non-zero return of a feed, else end's */
    char *msg; /* its error's message, or "" */
    char *last_id;
    long long retry;
} sse_result;

static void sse_result_free(sse_result *r)
{
    free(r->log);
    free(r->msg);
    free(r->last_id);
}

/* Feeds `in` in chunks of `chunk` bytes (0: whole), then ends it. */
static sse_result sse_run_n(const char *in, size_t len, size_t chunk, size_t max, int stop_at)
{
    logbuf l = {.stop_at = stop_at, .stop_rc = 42};
    sse_result res = {0};
    sbx_sse *r = NULL;
    TAP_OK(sbx_sse_new(max, sse_cb, &l, &r, &e_));
    sbx_error *err = NULL;
    size_t step = chunk ? chunk : (len ? len : 1);
    for (size_t i = 0; i < len && !res.rc; i += step) {
        size_t n = len - i < step ? len - i : step;
        res.rc = sbx_sse_feed(r, in + i, n, &err);
    }
    if (!res.rc)
        res.rc = sbx_sse_end(r, &err);
    res.log = l.text ? l.text : strdup("");
    res.msg = strdup(err ? sbx_error_message(err) : "");
    res.last_id = strdup(sbx_sse_last_id(r));
    res.retry = sbx_sse_retry_ms(r);
    sbx_error_free(err);
    sbx_sse_free(r);
    return res;
}

static sse_result sse_run(const char *in, size_t chunk)
{
    return sse_run_n(in, strlen(in), chunk, 0, 0);
}

/* The stream gives `want` (and no error) whole and in every small chunking. */
#define SSE_EXPECT(in, want)                                                                       \
    do {                                                                                           \
        static const size_t chunks_[] = {0, 1, 2, 3, 5, 7};                                        \
        for (size_t c_ = 0; c_ < SBX_ARRAY_SIZE_(chunks_); c_++) {                                 \
            sse_result r_ = sse_run((in), chunks_[c_]);                                            \
            if (strcmp(r_.log, (want)) != 0 || r_.rc != 0)                                         \
                TAP_FAIL("chunks of %zu: got \"%s\" (rc %d %s), want \"%s\"", chunks_[c_], r_.log, \
                         r_.rc, r_.msg, (want));                                                   \
            sse_result_free(&r_);                                                                  \
        }                                                                                          \
    } while (0)
#define SBX_ARRAY_SIZE_(a) (sizeof(a) / sizeof((a)[0]))

static void test_sse_whatwg_examples(void)
{
    /* The HTML standard's examples in "Interpreting an event stream". */
    SSE_EXPECT("data: YHOO\ndata: +2\ndata: 10\n\n", "message|YHOO\\n+2\\n10|\n");
    SSE_EXPECT(": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
               "data:  third event\n\n",
               "message|first event|1\nmessage|second event|\nmessage| third event|\n");
    /* An empty data field dispatches ""; two make "\n"; the unended last block is dropped. */
    SSE_EXPECT("data\n\ndata\ndata\n\ndata:", "message||\nmessage|\\n|\n");
    /* Only one space after the colon is removed: these two events are the same. */
    SSE_EXPECT("data:test\n\ndata: test\n\n", "message|test|\nmessage|test|\n");
    /* The standard's "event: add" example, with a type per event. */
    SSE_EXPECT("event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\n"
               "data: 113411\n\n",
               "add|73857293|\nremove|2153|\nadd|113411|\n");
}

static void test_sse_every_line_ending(void)
{
    const char *want = "message|a\\nb|\nping|c|\n";
    SSE_EXPECT("data: a\ndata: b\n\nevent: ping\ndata: c\n\n", want);
    SSE_EXPECT("data: a\r\ndata: b\r\n\r\nevent: ping\r\ndata: c\r\n\r\n", want);
    SSE_EXPECT("data: a\rdata: b\r\revent: ping\rdata: c\r\r", want);
    SSE_EXPECT("data: a\r\ndata: b\r\revent: ping\ndata: c\r\n\n", want);
    /* LF CR is two line ends (an empty line between), not one. */
    SSE_EXPECT("data: a\n\rdata: b\n\n", "message|a|\nmessage|b|\n");
}

static void test_sse_cr_at_chunk_boundary(void)
{
    /* The CR ends one chunk, its LF starts the next: one line end, not an empty line. */
    logbuf l = {0};
    sbx_sse *r = NULL;
    TAP_OK(sbx_sse_new(0, sse_cb, &l, &r, &e_));
    TAP_OK(sbx_sse_feed(r, "data: a\r", 8, &e_));
    TAP_OK(sbx_sse_feed(r, "\ndata: b\r", 9, &e_));
    TAP_NULL(l.text);
    TAP_OK(sbx_sse_feed(r, "\n", 1, &e_));
    TAP_NULL(l.text);
    TAP_OK(sbx_sse_feed(r, "\r", 1, &e_));
    TAP_EQ_STR(l.text, "message|a\\nb|\n");
    /* The LF after that CR is that empty line's, not a second empty line. */
    TAP_OK(sbx_sse_feed(r, "\ndata: c\r\n\r\n", 12, &e_));
    TAP_EQ_STR(l.text, "message|a\\nb|\nmessage|c|\n");
    TAP_OK(sbx_sse_end(r, &e_));
    sbx_sse_free(r);
    free(l.text);
}

static void test_sse_fields(void)
{
    /* A field without a colon has an empty value; unknown fields are ignored. */
    SSE_EXPECT("foo: bar\ndata\nDATA: x\nData: y\n\n", "message||\n");
    /* The type is reset after each event, and by an event with no data. */
    SSE_EXPECT("event: a\ndata: 1\n\ndata: 2\n\nevent: b\n\ndata: 3\n\n",
               "a|1|\nmessage|2|\nmessage|3|\n");
    SSE_EXPECT("event\ndata: 1\n\n", "message|1|\n");
    /* Comments anywhere, even inside an event. */
    SSE_EXPECT(":c\ndata: 1\n: more\ndata: 2\n:\n\n", "message|1\\n2|\n");
    /* The id persists across events; "id" alone clears it; an id holding NUL is ignored. */
    SSE_EXPECT("id: 7\ndata: a\n\ndata: b\n\nid: 8\n\ndata: c\n\n",
               "message|a|7\nmessage|b|7\nmessage|c|8\n");
    SSE_EXPECT("id: 1\ndata: a\n\nid\ndata: b\n\n", "message|a|1\nmessage|b|\n");
    const char nul_id[] = "id: 1\ndata: a\n\nid: x\0y\ndata: b\n\n";
    sse_result r = sse_run_n(nul_id, sizeof(nul_id) - 1, 0, 0, 0);
    TAP_EQ_STR(r.log, "message|a|1\nmessage|b|1\n");
    sse_result_free(&r);
    /* NUL in data is kept (data_len says the size). */
    const char nul_data[] = "data: a\0b\n\n";
    r = sse_run_n(nul_data, sizeof(nul_data) - 1, 1, 0, 0);
    TAP_EQ_STR(r.log, "message|a\\0b|\n");
    sse_result_free(&r);
}

static void test_sse_last_id_and_retry(void)
{
    /* The last event ID is taken at dispatch: an unended event's id does not count. */
    sse_result r = sse_run("id: 5\ndata: a\n\nretry: 1500\nid: 6\ndata: b", 0);
    TAP_EQ_STR(r.log, "message|a|5\n");
    TAP_EQ_STR(r.last_id, "5");
    TAP_EQ_INT(r.retry, 1500);
    sse_result_free(&r);
    /* An event with no data still sets it (the standard sets it before the empty check). */
    r = sse_run("id: 9\n\n", 0);
    TAP_EQ_STR(r.log, "");
    TAP_EQ_STR(r.last_id, "9");
    TAP_EQ_INT(r.retry, -1);
    sse_result_free(&r);
    /* retry takes ASCII digits only; anything else leaves the last value. */
    static const char *const bad[] = {"retry: 15x\n",
                                      "retry: -1\n",
                                      "retry:\n",
                                      "retry: 1 \n",
                                      "retry: 99999999999999999999999\n",
                                      "retry\n"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE_(bad); i++) {
        char in[128];
        snprintf(in, sizeof(in), "retry: 250\n%s", bad[i]);
        r = sse_run(in, 1);
        TAP_EQ_INT(r.retry, 250);
        sse_result_free(&r);
    }
    r = sse_run("retry:0\n", 0);
    TAP_EQ_INT(r.retry, 0);
    sse_result_free(&r);
}

static void test_sse_bom_and_utf8(void)
{
    /* One leading BOM is dropped; a second is text (here part of a field name). */
    SSE_EXPECT("\xEF\xBB\xBF"
               "data: x\n\n",
               "message|x|\n");
    SSE_EXPECT("\xEF\xBB\xBF\xEF\xBB\xBF"
               "data: x\n\ndata: y\n\n",
               "message|y|\n");
    /* A BOM's prefix that is not one is an invalid sequence: U+FFFD. */
    SSE_EXPECT("\xEF\xBB:\ndata: x\n\n", "message|x|\n");
    SSE_EXPECT("data: \xEF\xBB\n\n", "message|\xEF\xBF\xBD|\n");
    /* Valid multi-byte text passes, whatever splits it. */
    SSE_EXPECT("data: \xE2\x82\xAC \xF0\x9F\x98\x80 \xC3\xA9\n\n",
               "message|\xE2\x82\xAC \xF0\x9F\x98\x80 \xC3\xA9|\n");
    /* Invalid bytes become U+FFFD, one per maximal invalid prefix. */
    SSE_EXPECT("data: a\xFF"
               "b\n\n",
               "message|a\xEF\xBF\xBD"
               "b|\n");
    SSE_EXPECT("data: \xE2\x82\n\n", "message|\xEF\xBF\xBD|\n");
    SSE_EXPECT("data: \xE2\x82x\n\n", "message|\xEF\xBF\xBDx|\n");
    /* Overlong forms (2, 3 and 4 bytes), a surrogate, past U+10FFFF: each byte is U+FFFD. */
    SSE_EXPECT("data: \xC0\xAF\n\n", "message|\xEF\xBF\xBD\xEF\xBF\xBD|\n");
    SSE_EXPECT("data: \xE0\x9F\xBF\n\n", "message|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\n");
    SSE_EXPECT("data: \xF0\x8F\xBF\xBF\n\n",
               "message|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\n");
    SSE_EXPECT("data: \xED\xA0\x80\n\n", "message|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD|\n");
    SSE_EXPECT("data: \xF4\x90\x80\x80!\n\n",
               "message|\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD!|\n");
    /* The bounds themselves are valid: U+0800, U+10000, U+D7FF, U+10FFFF. */
    SSE_EXPECT("data: \xE0\xA0\x80\xF0\x90\x80\x80\xED\x9F\xBF\xF4\x8F\xBF\xBF\n\n",
               "message|\xE0\xA0\x80\xF0\x90\x80\x80\xED\x9F\xBF\xF4\x8F\xBF\xBF|\n");
    /* A CR or LF inside a sequence ends it: the line still ends there. */
    SSE_EXPECT("data: \xF0\x9F\r\n\r\n", "message|\xEF\xBF\xBD|\n");
    /* The id and type are decoded too. */
    SSE_EXPECT("event: \xFF\nid: \xFE\ndata: 1\n\n", "\xEF\xBF\xBD|1|\xEF\xBF\xBD\n");
}

static void test_sse_byte_at_a_time_equals_whole(void)
{
    /* A long mixed stream: every chunking, 1 to 40 bytes, gives the same events. */
    const char *in =
        "\xEF\xBB\xBF: hello\r\nretry: 3000\r\nid: a1\revent: start\ndata: {\"x\": 1}\n"
        "data: \xE2\x82\xAC\xFF\r\n\r\n: keep-alive\n\ndata\r\rid\n"
        "data: last\ndata:  two spaces\r\n\n"
        "event: partial\ndata: never";
    sse_result whole = sse_run(in, 0);
    TAP_EQ_STR(whole.log, "start|{\"x\": 1}\\n\xE2\x82\xAC\xEF\xBF\xBD|a1\nmessage||a1\n"
                          "message|last\\n two spaces|\n");
    for (size_t chunk = 1; chunk <= 40; chunk++) {
        sse_result r = sse_run(in, chunk);
        TAP_EQ_STR(r.log, whole.log);
        TAP_EQ_STR(r.last_id, whole.last_id);
        TAP_EQ_INT(r.retry, 3000);
        TAP_EQ_INT(r.rc, 0);
        sse_result_free(&r);
    }
    sse_result_free(&whole);
}

static void test_sse_limits(void)
{
    /* 16 bytes of data (in two lines, the join counted) fit max_event 16; 17 do not. */
    sse_result r = sse_run_n("data: 1234567\ndata: 12345678\n\n", 30, 0, 16, 0);
    TAP_EQ_INT(r.rc, 0);
    TAP_EQ_STR(r.log, "message|1234567\\n12345678|\n");
    sse_result_free(&r);
    /* The type and the data together: 8 + 8 fit 16 (the LF after the data is not counted). */
    r = sse_run_n("data: 12345678\nevent: 12345678\n\n", 32, 1, 16, 0);
    TAP_EQ_INT(r.rc, 0);
    TAP_EQ_STR(r.log, "12345678|12345678|\n");
    sse_result_free(&r);
    static const size_t chunks[] = {0, 1, 4};
    for (size_t c = 0; c < SBX_ARRAY_SIZE_(chunks); c++) {
        const char *in = "data: ok\n\ndata: 1234567\ndata: 123456789\n\n";
        r = sse_run_n(in, strlen(in), chunks[c], 16, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        TAP_EQ_STR(r.log, "message|ok|\n");
        TAP_EQ_STR(r.msg, "SSE event of more than 16 bytes at byte offset 10: refused (raise "
                          "max_event)");
        sse_result_free(&r);
        /* The type counts too. */
        in = "event: 0123456789\ndata: 1234567\n\n";
        r = sse_run_n(in, strlen(in), chunks[c], 16, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        TAP_CONTAINS(r.msg, "SSE event of more than 16 bytes at byte offset 0");
        sse_result_free(&r);
        /* An id too; a comment or an unknown field of any length is not held, so it passes. */
        in = "data: a\n\n: this comment is long\nlong-unknown-field: 0123456789abcdef\n"
             "id: 0123456789abcdef\n\nid: 0123456789abcdefg\n\n";
        r = sse_run_n(in, strlen(in), chunks[c], 16, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        TAP_EQ_STR(r.log, "message|a|\n");
        TAP_EQ_STR(r.last_id, "0123456789abcdef");
        TAP_EQ_STR(r.msg, "SSE id of more than 16 bytes at byte offset 91: refused (raise "
                          "max_event)");
        sse_result_free(&r);
        /* Empty data lines count their joins: 17 of them make 16 LFs, one too many for 15. */
        in = "data\ndata\ndata\ndata\ndata\ndata\ndata\ndata\ndata\ndata\ndata\ndata\n"
             "data\ndata\ndata\ndata\ndata\n\n";
        r = sse_run_n(in, strlen(in), chunks[c], 16, 0);
        TAP_EQ_INT(r.rc, 0);
        TAP_EQ_STR(r.log, "message|\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n|\n");
        sse_result_free(&r);
        r = sse_run_n(in, strlen(in), chunks[c], 15, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        TAP_CONTAINS(r.msg, "SSE event of more than 15 bytes at byte offset 0");
        sse_result_free(&r);
    }
    /* 0 means 1 MiB: 1 MiB of data passes, one byte more does not. */
    size_t big = SBX_SSE_DEFAULT_MAX_EVENT;
    char *in = malloc(big + 16);
    for (int extra = 0; extra <= 1; extra++) {
        memcpy(in, "data:", 5);
        memset(in + 5, 'x', big + extra);
        memcpy(in + 5 + big + extra, "\n\n", 2);
        r = sse_run_n(in, big + extra + 7, 4096, 0, 0);
        TAP_EQ_INT(r.rc, extra ? SBX_EPROTO : 0);
        if (extra)
            TAP_EQ_STR(r.msg, "SSE event of more than 1048576 bytes at byte offset 0: refused "
                              "(raise max_event)");
        else
            TAP_EQ_INT(strlen(r.log), big + strlen("message||\n"));
        sse_result_free(&r);
    }
    free(in);
}

static void test_sse_error_is_sticky(void)
{
    logbuf l = {0};
    sbx_sse *r = NULL;
    TAP_OK(sbx_sse_new(8, sse_cb, &l, &r, &e_));
    sbx_error *err = NULL;
    TAP_EQ_INT(sbx_sse_feed(r, "data: 123456789\n", 16, &err), SBX_EPROTO);
    char *first = strdup(sbx_error_message(err));
    sbx_error_free(err);
    err = NULL;
    /* Later feeds and the end say the same, and no event comes. */
    TAP_EQ_INT(sbx_sse_feed(r, "\ndata: a\n\n", 10, &err), SBX_EPROTO);
    TAP_EQ_STR(sbx_error_message(err), first);
    sbx_error_free(err);
    err = NULL;
    TAP_EQ_INT(sbx_sse_end(r, &err), SBX_EPROTO);
    TAP_EQ_STR(sbx_error_message(err), first);
    sbx_error_free(err);
    TAP_NULL(l.text);
    /* Without an err pointer, the code alone. */
    TAP_EQ_INT(sbx_sse_feed(r, "x", 1, NULL), SBX_EPROTO);
    free(first);
    sbx_sse_free(r);
}

static void test_sse_stop_from_callback(void)
{
    const char *in = "data: 1\n\ndata: 2\n\ndata: 3\n\n";
    for (size_t chunk = 0; chunk <= 3; chunk++) {
        sse_result r = sse_run_n(in, strlen(in), chunk, 0, 2);
        /* The second event's callback returned 42: the third never comes. */
        TAP_EQ_INT(r.rc, 42);
        TAP_EQ_STR(r.log, "message|1|\nmessage|2|\n");
        TAP_EQ_STR(r.msg, "");
        sse_result_free(&r);
    }
    /* Every later feed and the end return the same value. */
    logbuf l = {.stop_at = 1, .stop_rc = SBX_ECANCELED};
    sbx_sse *s = NULL;
    TAP_OK(sbx_sse_new(0, sse_cb, &l, &s, &e_));
    TAP_EQ_INT(sbx_sse_feed(s, in, strlen(in), NULL), SBX_ECANCELED);
    TAP_EQ_INT(sbx_sse_feed(s, in, strlen(in), NULL), SBX_ECANCELED);
    TAP_EQ_INT(sbx_sse_end(s, NULL), SBX_ECANCELED);
    TAP_EQ_INT(l.count, 1);
    sbx_sse_free(s);
    free(l.text);
}

static void test_sse_end_mid_event(void)
{
    /* The standard drops an event the stream did not end with an empty line. */
    static const char *const cut[] = {"data: a\n", "data: a", "data: a\r", "event: x\ndata: a\n",
                                      "data: \xE2\x82"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE_(cut); i++) {
        sse_result r = sse_run(cut[i], 0);
        TAP_EQ_INT(r.rc, 0);
        TAP_EQ_STR(r.log, "");
        sse_result_free(&r);
    }
    /* After the end, a feed is misuse; a second end says what the first did. */
    logbuf l = {0};
    sbx_sse *r = NULL;
    TAP_OK(sbx_sse_new(0, sse_cb, &l, &r, &e_));
    TAP_OK(sbx_sse_end(r, &e_));
    TAP_OK(sbx_sse_end(r, &e_));
    sbx_error *err = NULL;
    TAP_EQ_INT(sbx_sse_feed(r, "data: x\n\n", 9, &err), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(err), "after the stream was ended");
    sbx_error_free(err);
    TAP_NULL(l.text);
    sbx_sse_free(r);
}

static void test_sse_misuse(void)
{
    sbx_error *err = NULL;
    sbx_sse *r = NULL;
    TAP_EQ_INT(sbx_sse_new(0, NULL, NULL, &r, &err), SBX_EINVAL);
    TAP_NULL(r);
    sbx_error_free(err);
    TAP_EQ_INT(sbx_sse_feed(NULL, "x", 1, NULL), SBX_EINVAL);
    TAP_EQ_INT(sbx_sse_end(NULL, NULL), SBX_EINVAL);
    TAP_EQ_STR(sbx_sse_last_id(NULL), "");
    TAP_EQ_INT(sbx_sse_retry_ms(NULL), -1);
    sbx_sse_free(NULL);
    /* Feeding the reader from its own callback is refused; the reader goes on. */
    logbuf l = {0};
    TAP_OK(sbx_sse_new(0, sse_cb, &l, &r, &e_));
    l.reader = r;
    TAP_OK(sbx_sse_feed(r, "data: 1\n\ndata: 2\n\n", 18, &e_));
    TAP_EQ_INT(l.reentry_rc, SBX_EINVAL);
    TAP_EQ_STR(l.text, "message|1|\nmessage|2|\n");
    TAP_OK(sbx_sse_feed(r, NULL, 0, &e_));
    sbx_sse_free(r);
    free(l.text);
}

/* --- NDJSON --------------------------------------------------------------- */

static int nd_cb(const char *line, size_t len, uint64_t line_no, void *user)
{
    logbuf *l = user;
    TAP_EQ_INT(line[len], 0);
    char no[32];
    snprintf(no, sizeof(no), "%llu:", (unsigned long long)line_no);
    log_str(l, no);
    log_bytes(l, line, len);
    log_str(l, "\n");
    return log_stop(l);
}

typedef struct {
    char *log; /* each line as "N:text\n" */
    int rc;
    char *msg;
    int before_end; /* lines delivered before _end */
} nd_result;

static nd_result nd_run(const char *in, size_t len, size_t chunk, size_t max, unsigned flags,
                        int stop_at)
{
    logbuf l = {.stop_at = stop_at, .stop_rc = 9};
    nd_result res = {0};
    sbx_ndjson *r = NULL;
    TAP_OK(sbx_ndjson_new(max, flags, nd_cb, &l, &r, &e_));
    sbx_error *err = NULL;
    size_t step = chunk ? chunk : (len ? len : 1);
    for (size_t i = 0; i < len && !res.rc; i += step)
        res.rc = sbx_ndjson_feed(r, in + i, len - i < step ? len - i : step, &err);
    res.before_end = l.count;
    if (!res.rc)
        res.rc = sbx_ndjson_end(r, &err);
    res.log = l.text ? l.text : strdup("");
    res.msg = strdup(err ? sbx_error_message(err) : "");
    sbx_error_free(err);
    sbx_ndjson_free(r);
    return res;
}

static void nd_result_free(nd_result *r)
{
    free(r->log);
    free(r->msg);
}

#define ND_EXPECT(in, flags, want_rc, want)                                                        \
    do {                                                                                           \
        static const size_t chunks_[] = {0, 1, 2, 3, 5, 7};                                        \
        for (size_t c_ = 0; c_ < SBX_ARRAY_SIZE_(chunks_); c_++) {                                 \
            nd_result r_ = nd_run((in), strlen(in), chunks_[c_], 0, (flags), 0);                   \
            if (strcmp(r_.log, (want)) != 0 || r_.rc != (want_rc))                                 \
                TAP_FAIL("chunks of %zu: got \"%s\" (rc %d %s), want \"%s\"", chunks_[c_], r_.log, \
                         r_.rc, r_.msg, (want));                                                   \
            nd_result_free(&r_);                                                                   \
        }                                                                                          \
    } while (0)

static void test_ndjson_lines(void)
{
    ND_EXPECT("{\"a\":1}\n[2,3]\n\"s\"\n", 0, 0, "1:{\"a\":1}\n2:[2,3]\n3:\"s\"\n");
    /* CRLF: the CR goes; only one CR, and only before the LF. */
    ND_EXPECT("{\"a\":1}\r\n2\r\r\n3\r4\n", 0, 0, "1:{\"a\":1}\n2:2\\r\n3:3\\r4\n");
    /* Blank lines are skipped but numbered, as an editor numbers them. */
    ND_EXPECT("\n1\n\n  \t\r\n\r\n2\n", 0, 0, "2:1\n6:2\n");
    /* A last line without LF is a line, at the end. */
    ND_EXPECT("1\n{\"last\":true}", 0, 0, "1:1\n2:{\"last\":true}\n");
    ND_EXPECT("1\n{\"last\":true}\r", 0, 0, "1:1\n2:{\"last\":true}\n");
    ND_EXPECT("1\n   ", 0, 0, "1:1\n");
    ND_EXPECT("", 0, 0, "");
    /* Without validation, a line is a line. */
    ND_EXPECT("not json\n", 0, 0, "1:not json\n");
}

static void test_ndjson_last_line_waits_for_end(void)
{
    nd_result r = nd_run("1\n2", 3, 0, 0, 0, 0);
    TAP_EQ_INT(r.before_end, 1);
    TAP_EQ_STR(r.log, "1:1\n2:2\n");
    nd_result_free(&r);
    /* Byte at a time equals whole, on a longer stream with every kind of line. */
    const char *in = "{\"id\":1,\"s\":\"\xE2\x82\xAC\"}\r\n\n[1,2,\n  \r\n null\n\"tail\"";
    nd_result whole = nd_run(in, strlen(in), 0, 0, 0, 0);
    TAP_EQ_STR(whole.log, "1:{\"id\":1,\"s\":\"\xE2\x82\xAC\"}\n3:[1,2,\n5: null\n6:\"tail\"\n");
    for (size_t chunk = 1; chunk < 20; chunk++) {
        nd_result c = nd_run(in, strlen(in), chunk, 0, 0, 0);
        TAP_EQ_STR(c.log, whole.log);
        nd_result_free(&c);
    }
    nd_result_free(&whole);
}

static void test_ndjson_validate(void)
{
    ND_EXPECT("{\"a\":1}\n[2]\n3\n\"s\"\nnull\n", SBX_NDJSON_VALIDATE, 0,
              "1:{\"a\":1}\n2:[2]\n3:3\n4:\"s\"\n5:null\n");
    /* The bad line is named by number and offset; lines before it were delivered. */
    for (size_t chunk = 0; chunk < 4; chunk++) {
        const char *in = "{\"a\":1}\n\n{\"b\":\n[4]\n";
        nd_result r = nd_run(in, strlen(in), chunk, 0, SBX_NDJSON_VALIDATE, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        TAP_EQ_STR(r.log, "1:{\"a\":1}\n");
        TAP_CONTAINS(r.msg, "NDJSON line 3 at byte offset 9 is not JSON");
        nd_result_free(&r);
    }
    /* Two values on one line are not one JSON value. */
    nd_result r = nd_run("1 2\n", 4, 0, 0, SBX_NDJSON_VALIDATE, 0);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    nd_result_free(&r);
    /* The unended last line is checked too. */
    r = nd_run("1\n{", 3, 0, 0, SBX_NDJSON_VALIDATE, 0);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    TAP_CONTAINS(r.msg, "NDJSON line 2 at byte offset 2 is not JSON");
    nd_result_free(&r);
    sbx_error *err = NULL;
    sbx_ndjson *n = NULL;
    TAP_EQ_INT(sbx_ndjson_new(0, 0x80, nd_cb, NULL, &n, &err), SBX_EINVAL);
    TAP_NULL(n);
    sbx_error_free(err);
}

static void test_ndjson_limits(void)
{
    static const size_t chunks[] = {0, 1, 3};
    for (size_t c = 0; c < SBX_ARRAY_SIZE_(chunks); c++) {
        /* 8 bytes fit max_line 8, with or without a CR; 9 do not. */
        const char *in = "12345678\n12345678\r\n[1234567]\n";
        nd_result r = nd_run(in, strlen(in), chunks[c], 8, 0, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        TAP_EQ_STR(r.log, "1:12345678\n2:12345678\n");
        TAP_EQ_STR(r.msg, "NDJSON line 3 at byte offset 19 has more than 8 bytes: refused (raise "
                          "max_line)");
        nd_result_free(&r);
        /* The same when the long line is the last, unended, or ends in CRs. */
        r = nd_run("123456789", 9, chunks[c], 8, 0, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        TAP_CONTAINS(r.msg, "NDJSON line 1 at byte offset 0 has more than 8 bytes");
        nd_result_free(&r);
        r = nd_run("12345678\r\r\n", 11, chunks[c], 8, 0, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        nd_result_free(&r);
        r = nd_run("123456789\r\n", 11, chunks[c], 8, 0, 0);
        TAP_EQ_INT(r.rc, SBX_EPROTO);
        nd_result_free(&r);
        r = nd_run("12345678\r", 9, chunks[c], 8, 0, 0);
        TAP_EQ_INT(r.rc, 0);
        TAP_EQ_STR(r.log, "1:12345678\n");
        nd_result_free(&r);
    }
}

static void test_ndjson_refuses_before_the_line_ends(void)
{
    /* A peer that never sends the LF cannot make the reader wait on more than max_line + 1. */
    logbuf l = {0};
    sbx_ndjson *r = NULL;
    TAP_OK(sbx_ndjson_new(8, 0, nd_cb, &l, &r, &e_));
    TAP_OK(sbx_ndjson_feed(r, "12345678\r", 9, &e_)); /* could still be 8 bytes and CRLF */
    sbx_error *err = NULL;
    TAP_EQ_INT(sbx_ndjson_feed(r, "x", 1, &err), SBX_EPROTO);
    TAP_CONTAINS(sbx_error_message(err), "more than 8 bytes");
    sbx_error_free(err);
    sbx_ndjson_free(r);
    TAP_OK(sbx_ndjson_new(8, 0, nd_cb, &l, &r, &e_));
    TAP_EQ_INT(sbx_ndjson_feed(r, "123456789", 9, NULL), SBX_EPROTO);
    sbx_ndjson_free(r);
    TAP_NULL(l.text);
}

static void test_ndjson_stop(void)
{
    const char *in = "1\n2\n3\n";
    for (size_t chunk = 0; chunk < 3; chunk++) {
        nd_result r = nd_run(in, strlen(in), chunk, 0, 0, 2);
        TAP_EQ_INT(r.rc, 9);
        TAP_EQ_STR(r.log, "1:1\n2:2\n");
        nd_result_free(&r);
    }
    /* A stop in the callback for the unended last line comes out of _end. */
    nd_result r = nd_run("1\n2", 3, 0, 0, 0, 2);
    TAP_EQ_INT(r.rc, 9);
    nd_result_free(&r);
}

/* --- envelopes ------------------------------------------------------------ */

static int env_cb(unsigned flags, const void *msg, size_t len, void *user)
{
    logbuf *l = user;
    char f[16];
    snprintf(f, sizeof(f), "%02x:", flags);
    log_str(l, f);
    log_bytes(l, msg, len);
    log_str(l, "\n");
    return log_stop(l);
}

typedef struct {
    char *log; /* each envelope as "ff:message\n" */
    int rc;
    char *msg;
} env_result;

static env_result env_run(const void *in, size_t len, size_t chunk, size_t max, unsigned opts)
{
    logbuf l = {0};
    env_result res = {0};
    sbx_envelope *r = NULL;
    TAP_OK(sbx_envelope_new(max, opts, env_cb, &l, &r, &e_));
    sbx_error *err = NULL;
    size_t step = chunk ? chunk : (len ? len : 1);
    for (size_t i = 0; i < len && !res.rc; i += step)
        res.rc = sbx_envelope_feed(r, (const char *)in + i, len - i < step ? len - i : step, &err);
    if (!res.rc)
        res.rc = sbx_envelope_end(r, &err);
    res.log = l.text ? l.text : strdup("");
    res.msg = strdup(err ? sbx_error_message(err) : "");
    sbx_error_free(err);
    sbx_envelope_free(r);
    return res;
}

static void env_result_free(env_result *r)
{
    free(r->log);
    free(r->msg);
}

/* Appends an encoded envelope to a growing stream. */
static void env_append(logbuf *s, unsigned flags, const char *msg, size_t len)
{
    void *e = NULL;
    size_t n = 0;
    TAP_OK(sbx_envelope_encode(flags, msg, len, &e, &n, &e_));
    TAP_EQ_INT(n, len + 5);
    log_add(s, e, n);
    sbx_free(e);
}

static void test_envelope_encode(void)
{
    void *e = NULL;
    size_t n = 0;
    TAP_OK(sbx_envelope_encode(0x02, "{}", 2, &e, &n, &e_));
    TAP_EQ_INT(n, 7);
    TAP_TRUE(memcmp(e, "\x02\x00\x00\x00\x02{}", 7) == 0);
    sbx_free(e);
    /* The length is big-endian. */
    char *big = calloc(1, 0x010203);
    TAP_OK(sbx_envelope_encode(0x80, big, 0x010203, &e, &n, &e_));
    TAP_TRUE(memcmp(e, "\x80\x00\x01\x02\x03", 5) == 0);
    sbx_free(e);
    free(big);
    TAP_OK(sbx_envelope_encode(0, NULL, 0, &e, &n, &e_));
    TAP_TRUE(n == 5 && memcmp(e, "\0\0\0\0\0", 5) == 0);
    sbx_free(e);
    sbx_error *err = NULL;
    TAP_EQ_INT(sbx_envelope_encode(0x100, "x", 1, &e, &n, &err), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(err), "flags 0x100");
    sbx_error_free(err);
    TAP_EQ_INT(sbx_envelope_encode(0, NULL, 1, &e, &n, NULL), SBX_EINVAL);
}

static void test_envelope_round_trip(void)
{
    /* Connect: messages (one empty, one holding NUL and 0xff), then end-stream. */
    logbuf s = {0};
    env_append(&s, 0, "{\"a\":1}", 7);
    env_append(&s, 0, "", 0);
    env_append(&s, 0, "b\0\xff", 3);
    env_append(&s, 0x02, "{}", 2);
    for (size_t chunk = 0; chunk <= 12; chunk++) {
        env_result r = env_run(s.text, s.len, chunk, 0, SBX_ENVELOPE_CONNECT);
        TAP_EQ_INT(r.rc, 0);
        TAP_EQ_STR(r.log, "00:{\"a\":1}\n00:\n00:b\\0\xff\n02:{}\n");
        env_result_free(&r);
    }
    free(s.text);
    /* gRPC-web: a message, then the trailers. */
    logbuf g = {0};
    env_append(&g, 0, "\x08\x01", 2);
    env_append(&g, 0x80, "grpc-status: 0\r\n", 16);
    env_result r = env_run(g.text, g.len, 1, 0, SBX_ENVELOPE_GRPC_WEB);
    TAP_EQ_INT(r.rc, 0);
    TAP_EQ_STR(r.log, "00:\x08\x01\n80:grpc-status: 0\\r\\n\n");
    env_result_free(&r);
    free(g.text);
}

static void test_envelope_flags(void)
{
    /* Compressed: refused unless allowed, then delivered with its flag. */
    const char comp[] = "\x01\x00\x00\x00\x02zz";
    env_result r = env_run(comp, 7, 0, 0, SBX_ENVELOPE_CONNECT);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    TAP_CONTAINS(r.msg, "envelope at byte offset 0 is compressed");
    TAP_CONTAINS(r.msg, "SBX_ENVELOPE_ALLOW_COMPRESSED");
    TAP_EQ_STR(r.log, "");
    env_result_free(&r);
    r = env_run(comp, 7, 0, 0, SBX_ENVELOPE_CONNECT | SBX_ENVELOPE_ALLOW_COMPRESSED);
    TAP_EQ_INT(r.rc, 0);
    TAP_EQ_STR(r.log, "01:zz\n");
    env_result_free(&r);
    r = env_run("\x81\0\0\0\0", 5, 0, 0, SBX_ENVELOPE_GRPC_WEB | SBX_ENVELOPE_ALLOW_COMPRESSED);
    TAP_EQ_STR(r.log, "81:\n");
    env_result_free(&r);
    /* A flag the protocol does not define. */
    r = env_run("\0\0\0\0\0\x80\0\0\0\0", 10, 0, 0, SBX_ENVELOPE_CONNECT);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    TAP_EQ_STR(r.log, "00:\n");
    TAP_CONTAINS(r.msg, "envelope at byte offset 5 has flags 0x80, which Connect does not define");
    env_result_free(&r);
    r = env_run("\x02\0\0\0\0", 5, 0, 0, SBX_ENVELOPE_GRPC_WEB);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    TAP_CONTAINS(r.msg, "which gRPC-web does not define");
    env_result_free(&r);
    /* The end-of-stream envelope must be the last. */
    r = env_run("\x02\0\0\0\0\0", 6, 1, 0, SBX_ENVELOPE_CONNECT);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    TAP_EQ_STR(r.log, "02:\n");
    TAP_CONTAINS(r.msg, "bytes after its end-of-stream envelope, at byte offset 5");
    env_result_free(&r);
    r = env_run("\x80\0\0\0\x01x\0", 7, 0, 0, SBX_ENVELOPE_GRPC_WEB);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    TAP_CONTAINS(r.msg, "after its trailers envelope, at byte offset 6");
    env_result_free(&r);
    sbx_error *err = NULL;
    sbx_envelope *e = NULL;
    TAP_EQ_INT(sbx_envelope_new(0, 0, env_cb, NULL, &e, &err), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(err), "SBX_ENVELOPE_CONNECT or SBX_ENVELOPE_GRPC_WEB");
    sbx_error_free(err);
    TAP_EQ_INT(
        sbx_envelope_new(0, SBX_ENVELOPE_CONNECT | SBX_ENVELOPE_GRPC_WEB, env_cb, NULL, &e, NULL),
        SBX_EINVAL);
    TAP_NULL(e);
}

static void test_envelope_limit_from_header(void)
{
    /* The header says 1000 bytes with max_message 100: refused at the header, nothing buffered. */
    logbuf l = {0};
    sbx_envelope *r = NULL;
    TAP_OK(sbx_envelope_new(100, SBX_ENVELOPE_CONNECT, env_cb, &l, &r, &e_));
    TAP_OK(sbx_envelope_feed(r, "\0\0\0\0\x01x", 6, &e_));
    sbx_error *err = NULL;
    TAP_EQ_INT(sbx_envelope_feed(r, "\0\0\0\x03\xe8", 5, &err), SBX_EPROTO);
    TAP_EQ_STR(sbx_error_message(err), "envelope message of 1000 bytes at byte offset 6: more "
                                       "than max_message (100): refused (raise max_message)");
    sbx_error_free(err);
    TAP_EQ_STR(l.text, "00:x\n");
    sbx_envelope_free(r);
    free(l.text);
    /* 100 fits. */
    char in[105] = {0, 0, 0, 0, 100};
    env_result res = env_run(in, sizeof(in), 7, 100, SBX_ENVELOPE_CONNECT);
    TAP_EQ_INT(res.rc, 0);
    env_result_free(&res);
    /* The default is 4 MiB: a header saying 4 MiB + 1 is refused. */
    res = env_run("\0\0\x40\0\x01", 5, 0, 0, SBX_ENVELOPE_GRPC_WEB);
    TAP_EQ_INT(res.rc, SBX_EPROTO);
    TAP_CONTAINS(res.msg, "4194305 bytes");
    TAP_CONTAINS(res.msg, "max_message (4194304)");
    env_result_free(&res);
}

static void test_envelope_end_inside(void)
{
    env_result r = env_run("\0\0\0", 3, 0, 0, SBX_ENVELOPE_CONNECT);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    TAP_EQ_STR(r.msg, "Connect stream ended inside a 5-byte envelope header (3 bytes of it, at "
                      "byte offset 0)");
    env_result_free(&r);
    r = env_run("\0\0\0\0\x01x\0\0\0\0\x0a"
                "ab",
                13, 1, 0, SBX_ENVELOPE_GRPC_WEB);
    TAP_EQ_INT(r.rc, SBX_EPROTO);
    TAP_EQ_STR(r.log, "00:x\n");
    TAP_EQ_STR(r.msg, "gRPC-web stream ended inside the envelope at byte offset 6, after 2 of "
                      "10 message bytes");
    env_result_free(&r);
    /* Between envelopes, or with nothing at all, the end is fine. */
    r = env_run("", 0, 0, 0, SBX_ENVELOPE_CONNECT);
    TAP_EQ_INT(r.rc, 0);
    env_result_free(&r);
    /* The end's error stays: a second end says it again. */
    logbuf l = {0};
    sbx_envelope *e = NULL;
    TAP_OK(sbx_envelope_new(0, SBX_ENVELOPE_CONNECT, env_cb, &l, &e, &e_));
    TAP_OK(sbx_envelope_feed(e, "\0", 1, &e_));
    TAP_EQ_INT(sbx_envelope_end(e, NULL), SBX_EPROTO);
    sbx_error *err = NULL;
    TAP_EQ_INT(sbx_envelope_end(e, &err), SBX_EPROTO);
    TAP_CONTAINS(sbx_error_message(err), "inside a 5-byte envelope header");
    sbx_error_free(err);
    sbx_envelope_free(e);
}

static void test_envelope_stop(void)
{
    logbuf s = {0};
    env_append(&s, 0, "1", 1);
    env_append(&s, 0, "2", 1);
    logbuf l = {.stop_at = 1, .stop_rc = -100};
    sbx_envelope *r = NULL;
    TAP_OK(sbx_envelope_new(0, SBX_ENVELOPE_CONNECT, env_cb, &l, &r, &e_));
    TAP_EQ_INT(sbx_envelope_feed(r, s.text, s.len, NULL), -100);
    TAP_EQ_INT(sbx_envelope_feed(r, s.text, s.len, NULL), -100);
    TAP_EQ_INT(sbx_envelope_end(r, NULL), -100);
    TAP_EQ_STR(l.text, "00:1\n");
    sbx_envelope_free(r);
    free(l.text);
    free(s.text);
}

static void test_grpc_trailers(void)
{
    int status = -1;
    char *msg = NULL;
    TAP_OK(sbx_grpc_trailers_parse("grpc-status: 0\r\n", 16, &status, &msg, &e_));
    TAP_EQ_INT(status, 0);
    TAP_EQ_STR(msg, "");
    sbx_free(msg);
    /* Names in any case, the message percent-decoded, other trailers ignored. */
    const char *t = "Grpc-Status:5\r\nx-extra: 1\r\nGRPC-MESSAGE:  not%20found%3A%20%E2%82%AC"
                    "\r\ngrpc-status-details-bin: AAAA\r\n";
    TAP_OK(sbx_grpc_trailers_parse(t, strlen(t), &status, &msg, &e_));
    TAP_EQ_INT(status, 5);
    TAP_EQ_STR(msg, "not found: \xE2\x82\xAC");
    sbx_free(msg);
    /* Bad escapes (and %00) are kept as written; a bare LF ends a line too. */
    t = "grpc-message: 100% %zz %4 %00 %2\ngrpc-status: 13";
    TAP_OK(sbx_grpc_trailers_parse(t, strlen(t), &status, &msg, &e_));
    TAP_EQ_INT(status, 13);
    TAP_EQ_STR(msg, "100% %zz %4 %00 %2");
    sbx_free(msg);
    /* Only `len` bytes are read: what follows is not part of the block. */
    TAP_OK(sbx_grpc_trailers_parse("grpc-status: 7\r\ngrpc-message: x", 16, &status, &msg, &e_));
    TAP_EQ_INT(status, 7);
    TAP_EQ_STR(msg, "");
    sbx_free(msg);
    static const struct {
        const char *in, *why;
    } bad[] = {
        {"", "no grpc-status"},
        {"grpc-message: x\r\n", "no grpc-status"},
        {"grpc-status: 0\r\nbroken line\r\n", "the line at byte offset 16 has no ':'"},
        {"grpc-status: x1\r\n", "an invalid grpc-status 'x1' at byte offset 0"},
        {"grpc-status:\r\n", "an invalid grpc-status"},
        {"grpc-status: -1\r\n", "an invalid grpc-status"},
        {"grpc-status: 2147483648\r\n", "an invalid grpc-status"},
        {"grpc-status: 0\r\ngrpc-status: 1\r\n", "a second grpc-status"},
        {"grpc-status: 0\r\ngrpc-message: a\r\ngrpc-message: b\r\n", "a second grpc-message"},
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE_(bad); i++) {
        sbx_error *err = NULL;
        status = -1;
        msg = NULL;
        TAP_EQ_INT(sbx_grpc_trailers_parse(bad[i].in, strlen(bad[i].in), &status, &msg, &err),
                   SBX_EPROTO);
        TAP_CONTAINS(sbx_error_message(err), bad[i].why);
        TAP_EQ_INT(status, -1);
        TAP_NULL(msg);
        sbx_error_free(err);
    }
    TAP_OK(sbx_grpc_trailers_parse("grpc-status: 2147483647", 23, &status, &msg, &e_));
    TAP_EQ_INT(status, 2147483647);
    sbx_free(msg);
    TAP_EQ_INT(sbx_grpc_trailers_parse("grpc-status: 0", 14, NULL, &msg, NULL), SBX_EINVAL);
}

TAP_MAIN(TAP(test_sse_whatwg_examples), TAP(test_sse_every_line_ending),
         TAP(test_sse_cr_at_chunk_boundary), TAP(test_sse_fields), TAP(test_sse_last_id_and_retry),
         TAP(test_sse_bom_and_utf8), TAP(test_sse_byte_at_a_time_equals_whole),
         TAP(test_sse_limits), TAP(test_sse_error_is_sticky), TAP(test_sse_stop_from_callback),
         TAP(test_sse_end_mid_event), TAP(test_sse_misuse), TAP(test_ndjson_lines),
         TAP(test_ndjson_last_line_waits_for_end), TAP(test_ndjson_validate),
         TAP(test_ndjson_limits), TAP(test_ndjson_refuses_before_the_line_ends),
         TAP(test_ndjson_stop), TAP(test_envelope_encode), TAP(test_envelope_round_trip),
         TAP(test_envelope_flags), TAP(test_envelope_limit_from_header),
         TAP(test_envelope_end_inside), TAP(test_envelope_stop), TAP(test_grpc_trailers))
