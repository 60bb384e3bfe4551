/*
 * `sbx stats [--no-stream] [--json] [ID...]`: what boxes use, as `docker
 * stats` shows it: CPU % over the last interval, memory in use against the
 * limit (the host's memory when the box has none), processes. Two readings
 * of sbx_sandbox_stats a second apart make the CPU figure; streaming
 * repaints every second until Ctrl-C, --no-stream prints one table.
 */
#include "cli/cli.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct row {
    char *id;
    char *name;
    sbx_provider *p;
    sbx_sandbox *sb;
    bool failed;   /* said once; its row shows "--" */
    double cpu_ns, t;
    double cpu_pct;
    json_t *last;
};

static long long host_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (long long)pages * size : -1;
}

/* "1.5MiB", as docker stats writes sizes. */
static void human(double v, char *out, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(out, n, u ? "%.4g%s" : "%.0f%s", v, units[u]);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One reading of each box; the CPU % from the one before. */
static void sample(struct row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct row *r = &rows[i];
        if (r->failed)
            continue;
        char *text = NULL;
        sbx_error *e = NULL;
        if (sbx_sandbox_stats(r->sb, &text, &e) < 0) {
            cli_error("stats of %s: %s", r->id, e ? sbx_error_message(e) : "unknown error");
            sbx_error_free(e);
            r->failed = true;
            continue;
        }
        json_t *v = json_loads(text, 0, NULL);
        sbx_free(text);
        double t = mono_s();
        json_t *cpu = json_object_get(v, "cpu_ns");
        double ns = json_is_integer(cpu) ? (double)json_integer_value(cpu) : -1;
        r->cpu_pct = -1;
        if (ns >= 0 && r->cpu_ns >= 0 && r->last && t > r->t)
            r->cpu_pct = (ns - r->cpu_ns) / ((t - r->t) * 1e9) * 100;
        r->cpu_ns = ns;
        r->t = t;
        json_decref(r->last);
        r->last = v;
    }
}

static json_t *row_json(const struct row *r, long long host)
{
    json_t *v = r->last;
    json_t *mem = json_object_get(v, "memory_bytes"), *lim = json_object_get(v, "memory_limit");
    long long m = json_is_integer(mem) ? json_integer_value(mem) : -1;
    long long l = json_is_integer(lim) ? json_integer_value(lim) : host;
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:O, s:O}", "id", r->id, "name",
                     r->name ? json_string(r->name) : json_null(), "cpu_percent",
                     r->cpu_pct >= 0 ? json_real(round(r->cpu_pct * 100) / 100) : json_null(),
                     "memory_bytes", m >= 0 ? json_integer(m) : json_null(), "memory_limit",
                     l > 0 ? json_integer(l) : json_null(), "memory_percent",
                     m >= 0 && l > 0 ? json_real(round(m * 10000.0 / l) / 100) : json_null(),
                     "pids", json_object_get(v, "pids") ? json_object_get(v, "pids") : json_null(),
                     "pids_limit",
                     json_object_get(v, "pids_limit") ? json_object_get(v, "pids_limit")
                                                      : json_null());
}

static void print_table(const struct row *rows, size_t n, long long host)
{
    int idw = 16;
    for (size_t i = 0; i < n; i++)
        idw = (int)strlen(rows[i].id) > idw ? (int)strlen(rows[i].id) : idw;
    printf("%-*s %-16s %-8s %-22s %-8s %s\n", idw, "ID", "NAME", "CPU %", "MEM USAGE / LIMIT",
           "MEM %", "PIDS");
    for (size_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        _cleanup_free_ char *fid = cli_field(r->id);
        _cleanup_free_ char *fname = cli_field(r->name ? r->name : "-");
        if (r->failed || !r->last) {
            printf("%-*s %-16s %-8s %-22s %-8s %s\n", idw, fid, fname, "--", "-- / --", "--",
                   "--");
            continue;
        }
        _cleanup_json_ json_t *v = row_json(r, host);
        char cpu[16] = "--", mem[64] = "--", pct[16] = "--", pids[24] = "--", a[24], b[24];
        json_t *x;
        if (json_is_number(x = json_object_get(v, "cpu_percent")))
            snprintf(cpu, sizeof(cpu), "%.2f%%", json_number_value(x));
        if (json_is_integer(x = json_object_get(v, "memory_bytes"))) {
            human((double)json_integer_value(x), a, sizeof(a));
            json_t *l = json_object_get(v, "memory_limit");
            if (json_is_integer(l))
                human((double)json_integer_value(l), b, sizeof(b));
            else
                snprintf(b, sizeof(b), "--");
            snprintf(mem, sizeof(mem), "%s / %s", a, b);
        }
        if (json_is_number(x = json_object_get(v, "memory_percent")))
            snprintf(pct, sizeof(pct), "%.2f%%", json_number_value(x));
        if (json_is_integer(x = json_object_get(v, "pids")))
            snprintf(pids, sizeof(pids), "%lld", (long long)json_integer_value(x));
        printf("%-*s %-16s %-8s %-22s %-8s %s\n", idw, fid, fname, cpu, mem, pct, pids);
    }
    fflush(stdout);
}

/* Sleeps `s` seconds unless a signal comes first: false then. */
static bool wait_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0)
        if (cli_signal_received())
            return false;
    return !cli_signal_received();
}

int cli_cmd_stats(int argc, char **argv)
{
    static const struct option longopts[] = {{"no-stream", no_argument, NULL, 1},
                                             {"json", no_argument, NULL, 2},
                                             {"all", no_argument, NULL, 'a'},
                                             {"help", no_argument, NULL, 'h'},
                                             {0}};
    bool stream = true, json = false;
    int c, rc = CLI_EXIT_OK;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:ha", longopts, NULL)) != -1) {
        if (c == 'h') {
            cli_help("stats");
            return CLI_EXIT_OK;
        }
        if (c == 1 || c == 2) {
            stream = false; /* --json is one reading, as docker stats --format json --no-stream */
            json |= c == 2;
        } else if (c != 'a') { /* -a (docker stats -a): every box is listed anyway */
            return cli_bad_option("stats", c, argv);
        }
    }
    cli_signals_install();
    _cleanup_json_ json_t *all = NULL, *cache = NULL;
    size_t n = argc > optind ? (size_t)(argc - optind) : 0;
    if (!n) {
        if ((rc = cli_box_records(false, &all)) != CLI_EXIT_OK)
            return rc;
        n = json_array_size(all);
    }
    struct row *rows = calloc(n ? n : 1, sizeof(*rows));
    if (!rows)
        return CLI_EXIT_SBX;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *id = all ? cli_box_id(json_array_get(all, i)) : argv[optind + (int)i];
        struct row *r = &rows[k];
        int orc = cli_box_open("stats", id, &r->p, &r->sb);
        if (orc != CLI_EXIT_OK) {
            rc = orc; /* said; the other boxes are still shown */
            continue;
        }
        r->id = strdup(sbx_sandbox_id(r->sb));
        /* Its name (sbx create --name), from the record the listing or the id gives. */
        json_t *rec = all ? json_incref(json_array_get(all, i)) : NULL;
        if (!rec)
            cli_box_find_cached(id, &cache, &rec);
        const char *name =
            json_string_value(json_object_get(json_object_get(rec, "labels"), "name"));
        r->name = name ? strdup(name) : NULL;
        json_decref(rec);
        r->cpu_ns = -1;
        k++;
    }
    long long host = host_memory();
    sample(rows, k);
    if (wait_s(1.0))
        sample(rows, k);
    if (json) {
        json_t *out = json_array();
        for (size_t i = 0; i < k; i++)
            if (!rows[i].failed && rows[i].last)
                json_array_append_new(out, row_json(&rows[i], host));
        cli_print_json(out);
        json_decref(out);
    } else if (!cli_signal_received()) {
        bool tty = isatty(STDOUT_FILENO);
        do {
            if (stream && tty)
                printf("\033[2J\033[H"); /* a repaint, as docker stats does */
            print_table(rows, k, host);
        } while (stream && wait_s(1.0) && (sample(rows, k), true));
    }
    for (size_t i = 0; i < k; i++) {
        if (rows[i].failed && rc == CLI_EXIT_OK)
            rc = CLI_EXIT_SBX;
        json_decref(rows[i].last);
        sbx_sandbox_free(rows[i].sb);
        sbx_provider_free(rows[i].p);
        free(rows[i].id);
        free(rows[i].name);
    }
    free(rows);
    return rc;
}
