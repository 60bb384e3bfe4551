/*
 * [svc-logs] `sbx logs [-f] [--since T] [--tail N] [-t] ID`: the output of a
 * box's service (its entrypoint), as its provider kept it (the linux
 * provider: docs/providers/linux.md, "Service logs"). stdout entries go to
 * stdout and stderr entries to stderr, oldest first.
 */
#include "cli/cli.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

/*
 * [term] sbx's own lines (its events: the service's end, the agent's
 * death) start with "sbx: ", as every message of the CLI does. A box's line
 * that starts like one of sbx's, or like the agent's notes (which the box
 * could have written as well as the agent), is shown after MARK, so a line
 * that starts with "sbx:" is sbx's and no box can print one.
 */
static const char *const reserved[] = { "sbx:", "sbx-agent:" };
#define MARK "box: "

/* Where a line may start: bytes at a line's start are held until they can or cannot be reserved. */
struct view {
    bool check;   /* the next payload byte starts a line (or follows a timestamp) */
    char head[16]; /* the line's first bytes, held while they could still be reserved */
    size_t nhead;
    int hstream; /* whose bytes the head holds */
};

struct logs_out {
    bool timestamps;
    bool events;          /* sbx's events shown (not --raw) */
    struct cli_out out[3]; /* [SBX_STREAM_STDOUT], [SBX_STREAM_STDERR] */
    bool mark[3];         /* per stream: reserved starts marked */
    bool shared;          /* stdout and stderr share one view (a terminal, or one file) */
    bool own_line[3];     /* per stream: its next byte starts a line of its own (-t) */
    struct view view[3];  /* per stream, or [0] for both when shared */
    bool failed;          /* a write to stdout/stderr failed (reader gone) */
};

static struct view *view_of(struct logs_out *o, int stream)
{
    return &o->view[o->shared ? 0 : stream];
}

static int put(struct logs_out *o, int stream, const void *p, size_t n)
{
    if (!o->failed && n && cli_out_write(&o->out[stream], p, n) < 0)
        o->failed = true;
    return o->failed ? -1 : 0;
}

/* 1: head is a reserved start; 0: it could still become one; -1: it cannot. */
static int reserved_start(const char *head, size_t n)
{
    bool maybe = false;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(reserved); i++) {
        size_t k = strlen(reserved[i]);
        if (n <= k && !memcmp(head, reserved[i], n)) {
            if (n == k)
                return 1;
            maybe = true;
        }
    }
    return maybe ? 0 : -1;
}

/*
 * Writes what a view held. `marked`: other bytes follow on the same line
 * (another stream's), which could complete a reserved start: mark it.
 */
static void flush_head(struct logs_out *o, struct view *v, bool marked)
{
    if (!v->nhead)
        return;
    if (marked)
        put(o, v->hstream, MARK, strlen(MARK));
    put(o, v->hstream, v->head, v->nhead);
    v->nhead = 0;
    v->check = false;
}

static void payload(struct logs_out *o, int stream, const char *p, size_t n)
{
    if (!o->mark[stream]) {
        put(o, stream, p, n);
        return;
    }
    struct view *v = view_of(o, stream);
    if (v->nhead && v->hstream != stream)
        flush_head(o, v, true);
    size_t i = 0;
    while (i < n && !o->failed) {
        if (v->check) {
            char c = p[i++];
            v->head[v->nhead++] = c;
            v->hstream = stream;
            int r = reserved_start(v->head, v->nhead);
            if (r == 0)
                continue;
            flush_head(o, v, r > 0);
            /* A line end (or a CR, which returns to the line's start) as the head's last byte. */
            v->check = c == '\n' || c == '\r';
            continue;
        }
        size_t end = i;
        while (end < n && p[end] != '\n' && p[end] != '\r')
            end++;
        if (end < n) {
            end++;
            v->check = true;
        }
        put(o, stream, p + i, end - i);
        i = end;
    }
}

static void timestamp(struct logs_out *o, int stream, double t)
{
    time_t s = (time_t)floor(t);
    struct tm tm;
    char when[64], line[96];
    gmtime_r(&s, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    int n = snprintf(line, sizeof(line), "%s.%09ldZ ", when, (long)((t - floor(t)) * 1e9));
    put(o, stream, line, (size_t)n);
}

/* An event's words, from its fixed vocabulary (the record is checked like any other input). */
static char *event_text(const char *data, size_t len)
{
    char ev[48];
    if (len >= sizeof(ev) || memchr(data, 0, len))
        goto other;
    memcpy(ev, data, len);
    ev[len] = 0;
    bool agent = !strncmp(ev, "agent ", 6);
    const char *w = agent ? ev + 6 : ev;
    const char *num = !strncmp(w, "exited ", 7) || !strncmp(w, "killed ", 7) ? w + 7 : NULL;
    if (!num || !*num || strspn(num, "0123456789") != strlen(num) || strlen(num) > 3)
        goto other;
    bool exited = w[0] == 'e';
    return sbx__printf("%s %s %s%s", agent ? "the box's agent (its PID 1)" : "the service",
                       exited ? "exited with status" : "was killed by signal", num,
                       agent ? ": the box is in error" : "");
other:;
    _cleanup_free_ char *raw = strndup(data, len);
    _cleanup_free_ char *f = cli_field(raw ? raw : "?");
    return sbx__printf("event: %s", f ? f : "?");
}

/* sbx's event on a line of its own, on stderr. */
static void event(struct logs_out *o, double t, const char *data, size_t len)
{
    /* Whatever is held ends here: the event starts a new line, nothing joins the head. */
    for (int i = 0; i < 3; i++)
        flush_head(o, &o->view[i], false);
    /* On a line of its own: where stderr's reader is not at a line's start, a newline first. */
    if (!view_of(o, SBX_STREAM_STDERR)->check)
        put(o, SBX_STREAM_STDERR, "\n", 1);
    o->own_line[SBX_STREAM_STDERR] = true;
    if (o->shared)
        o->own_line[SBX_STREAM_STDOUT] = true;
    if (o->timestamps)
        timestamp(o, SBX_STREAM_STDERR, t);
    _cleanup_free_ char *text = event_text(data, len);
    _cleanup_free_ char *line = sbx__printf("sbx: %s\n", text ? text : "event");
    if (line)
        put(o, SBX_STREAM_STDERR, line, strlen(line));
    for (int i = 0; i < 3; i++)
        o->view[i].check = true;
}

static int on_entry(double t, int stream, const char *data, size_t len, void *user)
{
    struct logs_out *o = user;
    if (stream == SBX_STREAM_EVENT) {
        if (o->events)
            event(o, t, data, len);
        return o->failed;
    }
    if (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR)
        return 0;
    if (o->timestamps && o->own_line[stream]) {
        struct view *v = view_of(o, stream);
        /* A timestamp follows what another stream held: nothing can join it into a reserved start. */
        if (v->nhead && v->hstream != stream)
            flush_head(o, v, false);
        timestamp(o, stream, t);
        v->check = true;
    }
    o->own_line[stream] = len > 0 && data[len - 1] == '\n';
    payload(o, stream, data, len);
    return o->failed;
}

/* stdout and stderr are one file (`2>&1`): what one shows, the other's reader sees too. */
static bool same_file(int a, int b)
{
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Ends the output: what was held is written, as it is (nothing follows it). */
static void logs_end(struct logs_out *o)
{
    for (int i = 0; i < 3; i++)
        flush_head(o, &o->view[i], false);
    for (int s = SBX_STREAM_STDOUT; s <= SBX_STREAM_STDERR; s++)
        if (!o->failed && cli_out_flush(&o->out[s]) < 0)
            o->failed = true;
}

/*
 * --since: a duration back from now ("90s", "5m", "2h", "1d"), unix
 * seconds ("1767225600.5"), or a UTC time ("2026-01-01T00:00:00Z").
 */
static bool parse_since(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end != s && errno == 0 && v >= 0 && isfinite(v)) {
        double unit = 0;
        if (!strcmp(end, "s"))
            unit = 1;
        else if (!strcmp(end, "m"))
            unit = 60;
        else if (!strcmp(end, "h"))
            unit = 3600;
        else if (!strcmp(end, "d"))
            unit = 86400;
        if (unit > 0) {
            *out = cli_now() - v * unit;
            return true;
        }
        if (!*end) {
            *out = v;
            return true;
        }
    }
    struct tm tm = { 0 };
    const char *rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (rest && (!strcmp(rest, "Z") || !*rest)) {
        *out = (double)timegm(&tm);
        return true;
    }
    return false;
}

int cli_cmd_logs(int argc, char **argv)
{
    static const struct option longs[] = {
        { "follow", no_argument, NULL, 'f' },
        { "since", required_argument, NULL, 's' },
        { "tail", required_argument, NULL, 'n' },
        { "timestamps", no_argument, NULL, 't' },
        { "raw", no_argument, NULL, 'r' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    bool follow = false;
    double since = 0;
    long long tail = -1;
    struct logs_out o = { .own_line = { true, true, true } };
    bool raw = false;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+fn:th", longs, NULL)) != -1) {
        switch (ch) {
        case 'f':
            follow = true;
            break;
        case 's':
            if (!parse_since(optarg, &since))
                return cli_usage_error("logs",
                                       "--since '%s': give a duration back from now (90s, 5m, "
                                       "2h, 1d), unix seconds, or a UTC time like "
                                       "2026-01-01T00:00:00Z",
                                       optarg);
            break;
        case 'n': {
            char *end;
            errno = 0;
            long long v = strtoll(optarg, &end, 10);
            if (!strcmp(optarg, "all")) {
                tail = -1;
            } else if (errno || end == optarg || *end || v < 0) {
                return cli_usage_error("logs", "--tail '%s': give a number of lines (0 or more) "
                                               "or all",
                                       optarg);
            } else {
                tail = v;
            }
            break;
        }
        case 't':
            o.timestamps = true;
            break;
        case 'r':
            raw = true;
            break;
        case 'h':
            cli_help("logs");
            return CLI_EXIT_OK;
        default:
            return cli_usage_error("logs", "unknown option");
        }
    }
    if (argc - optind != 1)
        return cli_usage_error("logs", "logs expects one box ID, got %d arguments", argc - optind);
    _cleanup_json_ json_t *rec = NULL;
    int rc;
    if ((rc = cli_box_find(argv[optind], &rec)) != CLI_EXIT_OK)
        return rc;
    /*
     * [term] Without --raw: sbx's events on stderr, and the lines that
     * could pass for them marked on stderr, and on stdout too where its
     * reader sees stderr beside it (a terminal, or `2>&1`); control
     * sequences neutralised on a terminal. --raw: the box's bytes exactly.
     */
    cli_out_init(&o.out[SBX_STREAM_STDOUT], STDOUT_FILENO, raw);
    cli_out_init(&o.out[SBX_STREAM_STDERR], STDERR_FILENO, raw);
    o.events = !raw;
    o.mark[SBX_STREAM_STDERR] = !raw;
    o.mark[SBX_STREAM_STDOUT] = o.shared =
        !raw && (isatty(STDOUT_FILENO) || same_file(STDOUT_FILENO, STDERR_FILENO));
    for (int i = 0; i < 3; i++)
        o.view[i].check = true;
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    int r = cli_box_connect(rec, &p, &sb, &e);
    if (r == SBX_OK)
        r = sbx_sandbox_logs(sb, since, tail, follow ? SBX_LOGS_FOLLOW : 0, on_entry, &o, &e);
    logs_end(&o);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    if (o.failed) {
        sbx_error_free(e);
        return CLI_EXIT_SIGPIPE;
    }
    if (r < 0) {
        cli_error("logs of %s: %s", cli_box_id(rec), e ? sbx_error_message(e) : sbx_strerror(r));
        sbx_error_free(e);
        return r == SBX_ENOTSUP ? CLI_EXIT_USAGE : CLI_EXIT_SBX;
    }
    return CLI_EXIT_OK;
}
