/*
 * sbx image import/ls/rm: the images of the default provider (for linux,
 * its state directory's store), through the provider's image operations
 * (sbx_provider_image_*). An imported NAME is what `--image NAME` of run
 * and create resolves to.
 */
#include "cli/cli.h"

#include <inttypes.h>
#include <time.h>

static void human_bytes(uint64_t n, char *buf, size_t len)
{
    sbx__human_bytes(n, buf, len);
}

/* --- import --------------------------------------------------------------- */

struct progress {
    const char *name;
    bool show;        /* print progress (else the callback only polls for a signal) */
    bool tty;         /* redraw one line with \r; otherwise a line per step */
    long long bucket; /* the step last printed */
    char stage[48];   /* ... and its stage: a new stage always gets its line */
    bool printed;
};

/*
 * The provider's callback: bytes of the source read so far. On a terminal one
 * line is redrawn at each percent; otherwise (--progress into a file or pipe)
 * a line is written each 10%, so logs stay short.
 */
static void on_progress(const char *stage, unsigned long long done, unsigned long long total,
                        void *data)
{
    struct progress *p = data;
    if (!p->show || !strcmp(stage, "done"))
        return;
    int pct = total ? (int)(done * 100 / total) : -1;
    if (pct > 100)
        pct = 100;
    /* Without a total, a step is 16 MiB read. */
    long long bucket = pct >= 0 ? pct / (p->tty ? 1 : 10) : (long long)(done >> 24);
    if (p->printed && bucket == p->bucket && !strncmp(stage, p->stage, sizeof(p->stage) - 1))
        return;
    snprintf(p->stage, sizeof(p->stage), "%s", stage);
    char d[32], t[32];
    human_bytes(done, d, sizeof(d));
    human_bytes(total, t, sizeof(t));
    if (pct >= 0)
        fprintf(stderr, "%simporting %s: %s %3d%% (%s of %s)%s", p->tty ? "\r" : "", p->name, stage,
                pct, d, t, p->tty ? "\033[K" : "\n");
    else
        fprintf(stderr, "%simporting %s: %s %s%s", p->tty ? "\r" : "", p->name, stage, d,
                p->tty ? "\033[K" : "\n");
    fflush(stderr);
    p->bucket = bucket;
    p->printed = true;
}

static int cmd_import(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = {0};
    int rc;
    if (!cli_parse_opts("image", argc, argv,
                        CLI_TAKES_PROGRESS | CLI_TAKES_JSON | CLI_TAKES_MAX_BYTES, &o, &rc))
        return rc;
    if (argc - optind != 2)
        return cli_usage_error("image", "image import expects NAME SOURCE, got %d argument%s",
                               argc - optind, argc - optind == 1 ? "" : "s");
    const char *name = argv[optind], *source = argv[optind + 1];
    /* A missing source is the operation's failure (1), told before any work. */
    /* ARCHIVE:TAG (a tag may hold ':' and '/'): the file is the first prefix that exists. */
    bool found = access(source, F_OK) == 0;
    for (const char *c = strchr(source, ':'); c && !found; c = strchr(c + 1, ':')) {
        _cleanup_free_ char *file = strndup(source, (size_t)(c - source));
        found = file && access(file, F_OK) == 0;
    }
    if (strcmp(source, "-") != 0 && strncmp(source, "oci:", 4) != 0 && !found) {
        cli_error("importing %s: cannot read %s: %s", name, source, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    /* An import of any size answers SIGINT/SIGTERM/SIGHUP: it stops and leaves nothing. */
    if (cli_signals_install() < 0) {
        cli_error("cannot set up: %s", strerror(errno));
        return CLI_EXIT_SBX;
    }
    bool tty = isatty(2);
    /* Progress by default when stderr is a terminal. */
    struct progress pr = {.name = name, .tty = tty,
                          .show = o.progress == 1 || (o.progress == -1 && tty)};
    _cleanup_json_ json_t *opts = o.max_bytes ? json_pack("{s:I}", "max_bytes",
                                                          (json_int_t)o.max_bytes)
                                              : json_object();
    _cleanup_free_ char *opts_text = opts ? sbx__json_dump(opts) : NULL;
    sbx_error *e = NULL;
    sbx_future *f = NULL;
    char *text = NULL;
    rc = opts_text ? sbx_provider_image_import_async(p, name, source, opts_text, &f, &e)
                   : SBX_ENOMEM;
    if (rc == SBX_OK) {
        sbx_future_on_progress(f, on_progress, &pr);
        rc = cli_wait(f, &e);
        if (rc == SBX_OK)
            rc = sbx_future_take_string(f, &text, &e);
        sbx_future_free(f);
    }
    if (pr.printed && tty)
        fputc('\n', stderr);
    if (rc == SBX_ECANCELED || (rc < 0 && cli_signal_received())) {
        sbx_error_free(e);
        return cli_interrupted("nothing was imported");
    }
    if (rc < 0) {
        /*
         * A missing or unusable source (not an archive, `..` entries) or a
         * name the provider refuses is the operation's failure, as for cp;
         * only sbx's own trouble (disk full, state directory) is 125.
         */
        int code = rc == SBX_EINVAL || rc == SBX_ENOENT ? CLI_EXIT_FAIL : CLI_EXIT_SBX;
        cli_error("importing %s from %s: %s", name, source,
                  e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
        return code;
    }
    _cleanup_json_ json_t *img = json_loads(text, 0, NULL);
    free(text);
    if (o.json) {
        if (!img || cli_print_json(img) < 0)
            return CLI_EXIT_FAIL;
    } else {
        const char *digest = json_string_value(json_object_get(img, "digest"));
        printf("%s %s\n", name, digest ? digest : "");
    }
    return CLI_EXIT_OK;
}


/* --- pull ----------------------------------------------------------------- */

#define PULL_MAX_BLOBS 64

struct pull_blob {
    char hex[13];
    char kind[12];
    char state[12];
    unsigned long long done, total;
};

struct pull_view {
    bool tty;  /* bars on stderr */
    bool json; /* a JSON line per event on stdout */
    struct pull_blob blobs[PULL_MAX_BLOBS];
    size_t n;
    size_t drawn; /* lines drawn last time */
    struct timespec t0;
    char stage[24]; /* after the blobs: "unpacking" */
    unsigned long long udone, utotal;
};

static void draw_bar(char *buf, size_t width, unsigned long long done, unsigned long long total)
{
    size_t fill = total ? (size_t)((double)done / (double)total * (double)width) : 0;
    if (fill > width)
        fill = width;
    for (size_t i = 0; i < width; i++)
        buf[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    buf[width] = 0;
}

static void pull_redraw(struct pull_view *v)
{
    if (v->drawn)
        fprintf(stderr, "\033[%zuA", v->drawn);
    unsigned long long done = 0, total = 0;
    char bar[31], d[32], t[32];
    for (size_t i = 0; i < v->n; i++) {
        const struct pull_blob *b = &v->blobs[i];
        done += b->done;
        total += b->total;
        draw_bar(bar, 30, b->done, b->total);
        human_bytes(b->done, d, sizeof(d));
        human_bytes(b->total, t, sizeof(t));
        fprintf(stderr, "\r%s %-8s %-11s [%s] %s / %s\033[K\n", b->hex, b->kind, b->state, bar, d,
                t);
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double secs = (double)(now.tv_sec - v->t0.tv_sec) + (double)(now.tv_nsec - v->t0.tv_nsec) / 1e9;
    char rate[32];
    human_bytes(secs > 0.05 ? (uint64_t)((double)done / secs) : 0, rate, sizeof(rate));
    draw_bar(bar, 30, done, total);
    human_bytes(done, d, sizeof(d));
    human_bytes(total, t, sizeof(t));
    if (v->stage[0])
        fprintf(stderr, "\r%-33s %s\033[K\n", "total", v->stage);
    else
        fprintf(stderr, "\r%-33s [%s] %s / %s  %s/s\033[K\n", "total", bar, d, t, rate);
    v->drawn = v->n + 1;
    fflush(stderr);
}

static void on_pull_progress(const char *stage, unsigned long long done, unsigned long long total,
                             void *data)
{
    struct pull_view *v = data;
    char state[12] = "", kind[12] = "", hex[13] = "";
    bool blob = sscanf(stage, "pull:%11[a-z]:%11[a-z]:%12[0-9a-f]", state, kind, hex) == 3;
    if (v->json) {
        json_t *j = blob ? json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "event", "progress",
                                     "digest", hex, "kind", kind, "state", state, "done",
                                     (json_int_t)done, "total", (json_int_t)total)
                         : json_pack("{s:s, s:s, s:I, s:I}", "event", "unpacking", "stage",
                                     stage, "done", (json_int_t)done, "total",
                                     (json_int_t)total);
        char *line = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (line)
            printf("%s\n", line);
        fflush(stdout);
        free(line);
        json_decref(j);
        return;
    }
    if (!v->tty)
        return;
    if (blob) {
        struct pull_blob *b = NULL;
        for (size_t i = 0; i < v->n && !b; i++)
            if (!strcmp(v->blobs[i].hex, hex) && !strcmp(v->blobs[i].kind, kind))
                b = &v->blobs[i];
        if (!b && !strcmp(kind, "manifest"))
            return; /* manifests are small: not a bar */
        if (!b && v->n < PULL_MAX_BLOBS) {
            b = &v->blobs[v->n++];
            snprintf(b->hex, sizeof(b->hex), "%s", hex);
            snprintf(b->kind, sizeof(b->kind), "%s", kind);
        }
        if (!b)
            return;
        snprintf(b->state, sizeof(b->state), "%s", state);
        b->done = done;
        b->total = total;
    } else if (strcmp(stage, "done")) {
        int pct = total ? (int)(done * 100 / total) : 0;
        snprintf(v->stage, sizeof(v->stage), "unpacking %d%%", pct > 100 ? 100 : pct);
    }
    pull_redraw(v);
}

/*
 * A box's start may pull its image (run, create): the same bars on a
 * terminal, from the start's progress. Nothing is drawn until a pull stage
 * comes (a create without a pull shows nothing), and only pull and unpack
 * stages are drawn.
 */
struct cli_pull_view *cli_pull_view_new(void)
{
    if (!isatty(2))
        return NULL;
    struct pull_view *v = calloc(1, sizeof(*v));
    if (v) {
        v->tty = true;
        clock_gettime(CLOCK_MONOTONIC, &v->t0);
    }
    return (struct cli_pull_view *)v;
}

void cli_pull_view_progress(const char *stage, unsigned long long done, unsigned long long total,
                            void *data)
{
    struct pull_view *v = data;
    if (!strncmp(stage, "pull:", 5) || (v->n && strcmp(stage, "done") != 0))
        on_pull_progress(stage, done, total, v);
}

void cli_pull_view_free(struct cli_pull_view *v) { free(v); }

static int cmd_pull(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = {0};
    int rc;
    if (!cli_parse_opts("image", argc, argv, CLI_TAKES_JSON | CLI_TAKES_PLATFORM, &o, &rc))
        return rc;
    if (argc - optind != 1)
        return cli_usage_error("image", "image pull expects REF, got %d arguments",
                               argc - optind);
    const char *ref = argv[optind];
    /* SIGINT stops the transfer; the blobs fetched so far stay for the next pull. */
    if (cli_signals_install() < 0) {
        cli_error("cannot set up: %s", strerror(errno));
        return CLI_EXIT_SBX;
    }
    struct pull_view *v = calloc(1, sizeof(*v));
    if (!v)
        return CLI_EXIT_SBX;
    v->json = o.json;
    v->tty = !o.json && isatty(2);
    clock_gettime(CLOCK_MONOTONIC, &v->t0);
    _cleanup_json_ json_t *opts = o.platform ? json_pack("{s:s}", "platform", o.platform)
                                             : json_object();
    _cleanup_free_ char *opts_text = opts ? sbx__json_dump(opts) : NULL;
    sbx_error *e = NULL;
    sbx_future *f = NULL;
    char *text = NULL;
    rc = opts_text ? sbx_provider_image_pull_async(p, ref, opts_text, &f, &e) : SBX_ENOMEM;
    if (rc == SBX_OK) {
        sbx_future_on_progress(f, on_pull_progress, v);
        rc = cli_wait(f, &e);
        if (rc == SBX_OK)
            rc = sbx_future_take_string(f, &text, &e);
        sbx_future_free(f);
    }
    free(v);
    if (rc == SBX_ECANCELED || (rc < 0 && cli_signal_received())) {
        sbx_error_free(e);
        return cli_interrupted("the blobs fetched so far are kept; pulling again resumes");
    }
    if (rc < 0) {
        int code = rc == SBX_EINVAL || rc == SBX_ENOTSUP ? CLI_EXIT_USAGE
                   : rc == SBX_ENOMEM ? CLI_EXIT_SBX
                                      : CLI_EXIT_FAIL;
        cli_error("%s", e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
        return code;
    }
    _cleanup_json_ json_t *img = json_loads(text, 0, NULL);
    free(text);
    if (o.json) {
        /* The last event's line: the image, as compact as the others. */
        if (img)
            json_object_set_new(img, "event", json_string("pulled"));
        _cleanup_free_ char *line = img ? json_dumps(img, JSON_COMPACT) : NULL;
        if (!line || printf("%s\n", line) < 0 || fflush(stdout) != 0)
            return CLI_EXIT_FAIL;
    } else {
        const char *name = json_string_value(json_object_get(img, "name"));
        const char *digest = json_string_value(json_object_get(img, "digest"));
        printf("%s %s\n", name ? name : ref, digest ? digest : "");
    }
    return CLI_EXIT_OK;
}

/* --- ls ------------------------------------------------------------------- */

/* The "created" column: local time, or "-". */
static void created_text(json_t *img, char *buf, size_t len)
{
    snprintf(buf, len, "-");
    time_t t = (time_t)json_number_value(json_object_get(img, "created"));
    struct tm tm;
    if (t > 0 && localtime_r(&t, &tm))
        strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

/*
 * `--format TEMPLATE`: a small, exact subset of Docker's Go templates. Text
 * is copied; `\t`, `\n` and `\\` are a tab, a newline and a backslash;
 * `{{.Field}}` (spaces inside the braces allowed) is one of Name, Digest,
 * Size (as the table prints it), SizeBytes, Created (as the table), Source.
 * Anything else in braces is refused. With `img` NULL it only checks;
 * `bad` gets the refused text. One line per image: a newline is added.
 */
static int render(const char *t, json_t *img, FILE *out, char *bad, size_t bad_len)
{
    for (const char *p = t; *p;) {
        if (p[0] == '\\' && (p[1] == 't' || p[1] == 'n' || p[1] == '\\')) {
            if (img)
                fputc(p[1] == 't' ? '\t' : p[1] == 'n' ? '\n' : '\\', out);
            p += 2;
            continue;
        }
        if (p[0] != '{' || p[1] != '{') {
            if (img)
                fputc(*p, out);
            p++;
            continue;
        }
        const char *end = strstr(p + 2, "}}");
        const char *f = p + 2;
        while (end && f < end && *f == ' ')
            f++;
        size_t n = end ? (size_t)(end - f) : 0;
        while (n && f[n - 1] == ' ')
            n--;
        static const char *const fields[] = {"Name", "Digest", "Size", "SizeBytes", "Created",
                                             "Source"};
        size_t k = SBX_ARRAY_SIZE(fields);
        if (end && n > 1 && f[0] == '.')
            for (k = 0; k < SBX_ARRAY_SIZE(fields); k++)
                if (strlen(fields[k]) == n - 1 && !strncmp(f + 1, fields[k], n - 1))
                    break;
        if (k == SBX_ARRAY_SIZE(fields)) {
            snprintf(bad, bad_len, "%.*s", end ? (int)(end + 2 - p) : (int)strlen(p), p);
            return -1;
        }
        p = end + 2;
        if (!img)
            continue;
        char buf[64];
        const char *v = NULL;
        uint64_t size = (uint64_t)json_integer_value(json_object_get(img, "size"));
        switch (k) {
        case 0: v = json_string_value(json_object_get(img, "name")); break;
        case 1: v = json_string_value(json_object_get(img, "digest")); break;
        case 2: human_bytes(size, buf, sizeof(buf)); v = buf; break;
        case 3: snprintf(buf, sizeof(buf), "%" PRIu64, size); v = buf; break;
        case 4: created_text(img, buf, sizeof(buf)); v = buf; break;
        default: v = json_string_value(json_object_get(img, "source")); break;
        }
        fputs(v ? v : "", out);
    }
    if (img)
        fputc('\n', out);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));
    return strcmp(x ? x : "", y ? y : "");
}

static int cmd_ls(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = {0};
    int rc;
    unsigned takes =
        CLI_TAKES_JSON | CLI_TAKES_QUIET | CLI_TAKES_FORMAT | CLI_TAKES_ALL | CLI_NO_OPERANDS;
    if (!cli_parse_opts("image", argc, argv, takes, &o, &rc))
        return rc;
    char bad[128];
    if (o.format && (o.json || o.quiet))
        return cli_usage_error("image", "--format cannot be combined with --json or --quiet");
    if (o.format && render(o.format, NULL, stdout, bad, sizeof(bad)) < 0)
        return cli_usage_error("image",
                               "--format: '%s' is not one of {{.Name}}, {{.Digest}}, {{.Size}}, "
                               "{{.SizeBytes}}, {{.Created}}, {{.Source}}",
                               bad);
    char *text = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_image_list(p, &text, &e) < 0) {
        cli_sbx_error(e, "listing images");
        return CLI_EXIT_SBX;
    }
    _cleanup_json_ json_t *v = json_loads(text, 0, NULL);
    free(text);
    size_t n = json_array_size(v);
    json_t **items = calloc(n ? n : 1, sizeof(*items));
    if (!items)
        return CLI_EXIT_SBX;
    /*
     * `image build`'s cache (sbx-build-cache:<key>) only with -a, as docker
     * images hides intermediate images; the NAME column fits the longest
     * name shown (a registry reference is often longer than 24).
     */
    size_t shown = 0;
    int width = 24;
    for (size_t i = 0; i < n; i++) {
        json_t *img = json_array_get(v, i);
        const char *name = json_string_value(json_object_get(img, "name"));
        if (!o.all && name && !strncmp(name, "sbx-build-cache:", 16))
            continue;
        items[shown++] = img;
        int len = name ? (int)strlen(name) : 0;
        width = len > width ? (len < 80 ? len : 80) : width;
    }
    n = shown;
    qsort(items, n, sizeof(*items), by_name);
    _cleanup_json_ json_t *arr = json_array();
    if (!o.json && !o.quiet && !o.format)
        printf("%-*s %-19s %-10s %-20s %s\n", width, "NAME", "DIGEST", "SIZE", "CREATED",
               "SOURCE");
    for (size_t i = 0; i < n; i++) {
        json_t *img = items[i];
        const char *name = json_string_value(json_object_get(img, "name"));
        if (o.json) {
            json_array_append(arr, img);
            continue;
        }
        if (o.quiet) {
            printf("%s\n", name);
            continue;
        }
        if (o.format) {
            render(o.format, img, stdout, bad, sizeof(bad));
            continue;
        }
        char size[32], created[32];
        human_bytes((uint64_t)json_integer_value(json_object_get(img, "size")), size, sizeof(size));
        created_text(img, created, sizeof(created));
        /* Short digests, as container tools print them. */
        const char *d = json_string_value(json_object_get(img, "digest"));
        char shortd[20];
        snprintf(shortd, sizeof(shortd), "%.19s", d ? d : "");
        const char *src = json_string_value(json_object_get(img, "source"));
        printf("%-*s %-19s %-10s %-20s %s\n", width, name, shortd, size, created,
               src ? src : "");
    }
    free(items);
    if (o.json && cli_print_json(arr) < 0)
        return CLI_EXIT_FAIL;
    return CLI_EXIT_OK;
}

/* --- inspect, tag ---------------------------------------------------------- */

/* `sbx image inspect NAME...`: a JSON array, one object a name (as `docker image inspect`). */
static int cmd_inspect(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = {0};
    int rc;
    if (!cli_parse_opts("image", argc, argv, 0, &o, &rc))
        return rc;
    if (optind >= argc)
        return cli_usage_error("image", "image inspect expects NAME...");
    _cleanup_json_ json_t *arr = json_array();
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc && arr; i++) {
        char *text = NULL;
        sbx_error *e = NULL;
        int r = sbx_provider_image_inspect(p, argv[i], &text, &e);
        if (r < 0) {
            cli_error("%s", e ? sbx_error_message(e) : sbx_strerror(r));
            sbx_error_free(e);
            rc = r == SBX_ENOTSUP ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
            continue;
        }
        json_array_append_new(arr, json_loads(text, 0, NULL));
        free(text);
    }
    if (!arr || cli_print_json(arr) < 0)
        return CLI_EXIT_SBX;
    return rc;
}

/* `sbx image tag SRC NEW`: a second name for the same image. */
static int cmd_tag(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = {0};
    int rc;
    if (!cli_parse_opts("image", argc, argv, 0, &o, &rc))
        return rc;
    if (argc - optind != 2)
        return cli_usage_error("image", "image tag expects SOURCE NEW_NAME, got %d argument%s",
                               argc - optind, argc - optind == 1 ? "" : "s");
    sbx_error *e = NULL;
    int r = sbx_provider_image_tag(p, argv[optind], argv[optind + 1], &e);
    if (r < 0) {
        cli_error("%s%s", e ? sbx_error_message(e) : sbx_strerror(r),
                  r == SBX_ENOENT ? " (see 'sbx image ls')" : "");
        sbx_error_free(e);
        return r == SBX_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

/* --- rm ------------------------------------------------------------------- */

static int cmd_rm(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = {0};
    int rc;
    if (!cli_parse_opts("image", argc, argv, CLI_TAKES_FORCE, &o, &rc))
        return rc;
    if (optind >= argc)
        return cli_usage_error("image", "image rm expects NAME...");
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        const char *name = argv[i];
        sbx_error *e = NULL;
        /*
         * The boxes' overlays keep the files they have open, but a tree
         * removed under a running box may break it: the provider refuses
         * (SBX_ESTATE) unless forced.
         */
        int r = sbx_provider_image_remove(p, name, o.force, &e);
        if (r < 0) {
            cli_error("%s%s", e ? sbx_error_message(e) : sbx_strerror(r),
                      r == SBX_ENOENT   ? " (see 'sbx image ls')"
                      : r == SBX_ESTATE ? " (sbx image rm --force removes it anyway)"
                                        : "");
            sbx_error_free(e);
            if (rc == CLI_EXIT_OK)
                rc = r == SBX_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
            continue;
        }
        printf("%s\n", name);
    }
    return rc;
}

/* --- prune ---------------------------------------------------------------- */

static int cmd_prune(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = {0};
    int rc;
    if (!cli_parse_opts("image", argc, argv, CLI_TAKES_DRY_RUN, &o, &rc))
        return rc;
    if (optind < argc)
        return cli_usage_error("image", "image prune takes no arguments");
    char *out = NULL;
    sbx_error *e = NULL;
    int r = sbx_provider_image_prune(p, o.dry_run, &out, &e);
    if (r < 0) {
        cli_error("%s", e ? sbx_error_message(e) : sbx_strerror(r));
        sbx_error_free(e);
        return CLI_EXIT_FAIL;
    }
    json_t *arr = json_loads(out, 0, NULL);
    free(out);
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) printf("%s%s\n", o.dry_run ? "would remove " : "",
                                         json_string_value(v));
    json_decref(arr);
    return CLI_EXIT_OK;
}

int cli_cmd_image(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(
            "image", "no image command given (pull, import, ls, inspect, tag or rm)");
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        cli_help("image");
        return CLI_EXIT_OK;
    }
    bool known = !strcmp(sub, "pull") || !strcmp(sub, "import") || !strcmp(sub, "ls") ||
                 !strcmp(sub, "list") || !strcmp(sub, "rm") || !strcmp(sub, "remove") ||
                 !strcmp(sub, "inspect") || !strcmp(sub, "tag") || !strcmp(sub, "prune") ||
                 !strcmp(sub, "build");
    if (!known)
        return cli_usage_error("image",
                               "unknown image command '%s' (pull, build, import, ls, inspect, tag, rm "
                               "or prune)",
                               sub);
    _cleanup_free_ char *config = cli_default_config();
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (!config || sbx_provider_new(config, &p, &e) < 0) {
        cli_sbx_error(e, "image");
        return CLI_EXIT_SBX;
    }
    if (!sbx_provider_supports(p, "images")) {
        cli_error("provider %s has no images of its own to manage", sbx_provider_name(p));
        sbx_provider_free(p);
        return CLI_EXIT_USAGE;
    }
    /* Each subcommand parses its own argv, with its name as argv[0]. */
    optind = 1;
    int rc = !strcmp(sub, "pull")     ? cmd_pull(argc - 1, argv + 1, p)
             : !strcmp(sub, "build")  ? cli_image_build(argc - 1, argv + 1, p)
             : !strcmp(sub, "import") ? cmd_import(argc - 1, argv + 1, p)
             : !strcmp(sub, "ls") || !strcmp(sub, "list") ? cmd_ls(argc - 1, argv + 1, p)
             : !strcmp(sub, "inspect")                    ? cmd_inspect(argc - 1, argv + 1, p)
             : !strcmp(sub, "tag")                        ? cmd_tag(argc - 1, argv + 1, p)
             : !strcmp(sub, "prune")                      ? cmd_prune(argc - 1, argv + 1, p)
                                                           : cmd_rm(argc - 1, argv + 1, p);
    sbx_provider_free(p);
    return rc;
}
