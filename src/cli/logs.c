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
#include <time.h>

struct logs_out {
    bool timestamps;
    bool at_line_start[3]; /* per stream: the next byte starts a line */
    bool failed;           /* a write to stdout/stderr failed (reader gone) */
};

static int on_entry(double t, int stream, const char *data, size_t len, void *user)
{
    struct logs_out *o = user;
    if (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR)
        return 0; /* events: the service's end shows in `sbx status` */
    FILE *f = stream == SBX_STREAM_STDOUT ? stdout : stderr;
    if (o->timestamps && o->at_line_start[stream]) {
        time_t s = (time_t)floor(t);
        struct tm tm;
        char when[64];
        gmtime_r(&s, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        fprintf(f, "%s.%09ldZ ", when, (long)((t - floor(t)) * 1e9));
    }
    o->at_line_start[stream] = len > 0 && data[len - 1] == '\n';
    if (fwrite(data, 1, len, f) != len || fflush(f) != 0) {
        o->failed = true;
        return 1;
    }
    return 0;
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
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    bool follow = false;
    double since = 0;
    long long tail = -1;
    struct logs_out o = { .at_line_start = { true, true, true } };
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
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    int r = cli_box_connect(rec, &p, &sb, &e);
    if (r == SBX_OK)
        r = sbx_sandbox_logs(sb, since, tail, follow ? SBX_LOGS_FOLLOW : 0, on_entry, &o, &e);
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
