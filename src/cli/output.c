/* What sbx prints: a command's exact bytes, or JSON with --json. */
#include "cli/cli.h"

#include <sys/stat.h>

int cli_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Length of the valid UTF-8 sequence at s (0 when invalid). */
static size_t utf8_seq(const unsigned char *s, size_t left)
{
    unsigned char c = s[0];
    size_t n;
    unsigned min;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2, min = 0x80, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3, min = 0x800, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4, min = 0x10000, cp = c & 0x07;
    } else {
        return 0;
    }
    if (left < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/*
 * The --json result, written as it is made: the command's output is escaped
 * into a small buffer and written out chunk by chunk, never built whole as
 * a JSON value and then as text (16 MiB of output made ~260 MB that way).
 * The text is byte for byte what json_dumps(JSON_INDENT(2)) gives for the
 * same object: the same keys in the same order, the same escapes.
 */
struct json_out {
    char buf[1 << 16];
    size_t n;
    bool failed;
};

static void jo_put(struct json_out *w, const void *p, size_t len)
{
    const char *c = p;
    while (len > 0 && !w->failed) {
        if (w->n == sizeof(w->buf)) {
            if (cli_write_all(1, w->buf, w->n) < 0)
                w->failed = true;
            w->n = 0;
        }
        size_t k = sizeof(w->buf) - w->n < len ? sizeof(w->buf) - w->n : len;
        memcpy(w->buf + w->n, c, k);
        w->n += k;
        c += k;
        len -= k;
    }
}

static void jo_str(struct json_out *w, const char *s)
{
    jo_put(w, s, strlen(s));
}

/* A scalar (a string, a number, null, a boolean) as jansson writes it. */
static void jo_value(struct json_out *w, json_t *v)
{
    _cleanup_free_ char *t = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
    json_decref(v);
    if (!t)
        w->failed = true;
    else
        jo_str(w, t);
}

/* Output bytes as a JSON string: UTF-8 with errors="replace" (as the reference decodes it). */
static void jo_bytes(struct json_out *w, const char *data, size_t len)
{
    if (!data) {
        jo_str(w, "null");
        return;
    }
    jo_put(w, "\"", 1);
    const unsigned char *s = (const unsigned char *)data;
    for (size_t i = 0; i < len && !w->failed;) {
        size_t n = utf8_seq(s + i, len - i);
        if (!n) {
            jo_put(w, "\xef\xbf\xbd", 3);
            i++;
            continue;
        }
        if (n > 1) {
            jo_put(w, s + i, n);
        } else if (s[i] == '"' || s[i] == '\\') {
            char e[2] = { '\\', (char)s[i] };
            jo_put(w, e, 2);
        } else if (s[i] < 0x20) {
            char e[8];
            const char *short_ = s[i] == '\b' ? "\\b" : s[i] == '\f' ? "\\f" : s[i] == '\n' ? "\\n"
                                 : s[i] == '\r' ? "\\r" : s[i] == '\t' ? "\\t" : NULL;
            if (short_)
                jo_put(w, short_, 2);
            else
                jo_put(w, e, (size_t)snprintf(e, sizeof(e), "\\u%04X", s[i]));
        } else {
            jo_put(w, s + i, 1);
        }
        i += n;
    }
    jo_put(w, "\"", 1);
}

static int print_result_json(const char *id, const sbx_exec_result *r, int code)
{
    struct json_out *w = calloc(1, sizeof(*w));
    if (!w)
        return -1;
    size_t out_len = 0, err_len = 0;
    const char *out = sbx_exec_result_stdout(r, &out_len);
    const char *errb = sbx_exec_result_stderr(r, &err_len);
    const char *et = sbx_exec_result_error_type(r);
    jo_str(w, "{\n  \"id\": ");
    jo_value(w, id ? json_string(id) : json_null());
    jo_str(w, ",\n  \"return_code\": ");
    jo_value(w, json_integer(sbx_exec_result_return_code(r)));
    jo_str(w, ",\n  \"stdout\": ");
    jo_bytes(w, out, out_len);
    jo_str(w, ",\n  \"stderr\": ");
    jo_bytes(w, errb, err_len);
    jo_str(w, ",\n  \"error_type\": ");
    jo_value(w, et ? json_string(et) : json_null());
    jo_str(w, ",\n  \"truncated\": ");
    jo_str(w, sbx_exec_result_truncated(r) ? "true" : "false");
    jo_str(w, ",\n  \"exit_code\": ");
    jo_value(w, json_integer(code));
    jo_str(w, "\n}\n");
    if (!w->failed && w->n && cli_write_all(1, w->buf, w->n) < 0)
        w->failed = true;
    int rc = w->failed ? -1 : 0;
    free(w);
    return rc;
}

int cli_print_json(const json_t *v)
{
    _cleanup_free_ char *text = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY);
    if (!text)
        return -1;
    if (cli_write_all(1, text, strlen(text)) < 0 || cli_write_all(1, "\n", 1) < 0)
        return -1;
    return 0;
}

static int exit_code_for(const sbx_exec_result *r)
{
    const char *et = sbx_exec_result_error_type(r);
    int rc = sbx_exec_result_return_code(r);
    if (et && !strcmp(et, "timeout"))
        return CLI_EXIT_TIMEOUT;
    /*
     * Agent-backed providers report a command killed by signal N as 128+N
     * already; the local provider as -N (Python's returncode, as the
     * reference's local provider): the shell's 128+N.
     */
    if (rc < 0)
        return rc >= -127 ? 128 - rc : CLI_EXIT_SBX;
    return rc <= 255 ? rc : CLI_EXIT_SBX;
}

int cli_print_result(const char *id, const sbx_exec_result *r, double timeout_s, bool json,
                     bool streamed)
{
    size_t out_len = 0, err_len = 0;
    const char *out = sbx_exec_result_stdout(r, &out_len);
    const char *errb = sbx_exec_result_stderr(r, &err_len);
    const char *et = sbx_exec_result_error_type(r);
    int code = exit_code_for(r);
    if (json)
        return print_result_json(id, r, code) < 0 ? CLI_EXIT_SBX : code;
    /*
     * What happened, not the exit code: a command that itself exits 124 (as
     * timeout(1) does) exits 124 too, but its output and stderr are its own.
     */
    const char *etype = sbx_exec_result_error_type(r);
    bool timed_out = etype && !strcmp(etype, "timeout");
    if (streamed) {
        /*
         * The command's bytes are out already; the result holds only sbx's
         * message on a runtime failure (on a timeout, said below instead).
         */
        if (et && !timed_out && errb && err_len) {
            cli_write_all(2, errb, err_len);
            if (errb[err_len - 1] != '\n')
                cli_write_all(2, "\n", 1);
        }
        out = errb = NULL;
    }
    /* On a timeout, stderr without stdout is the provider's message, said below instead. */
    if (out && cli_write_all(1, out, out_len) < 0 && errno != EPIPE)
        cli_error("writing stdout: %s", strerror(errno));
    if (errb && (!timed_out || out))
        cli_write_all(2, errb, err_len);
    /*
     * sbx's own message below is a line of its own even when the command's
     * stderr did not end one (the agent's "cannot change directory ..." does not).
     */
    bool says = timed_out || et || sbx_exec_result_truncated(r);
    if (says && errb && (!timed_out || out) && err_len > 0 && errb[err_len - 1] != '\n')
        cli_write_all(2, "\n", 1);
    if (timed_out) {
        char t[32];
        sbx__fmt_g(timeout_s, t, sizeof(t));
        cli_error("command timed out after %ss", t);
    } else if (et) {
        cli_error("command failed in the sandbox (error_type %s, return code %d)", et,
                  sbx_exec_result_return_code(r));
    }
    if (sbx_exec_result_truncated(r))
        cli_error("output was truncated at the output limit (16 MiB per stream unless "
                  "configured); raise it with --output-limit BYTES");
    return code;
}

bool cli_stdin_given(void)
{
    struct stat st;
    return !isatty(0) && fstat(0, &st) == 0;
}
