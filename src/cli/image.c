/*
 * sbx image import/ls/rm: the linux provider's image store (its state
 * directory's images/). An imported NAME is what `--image NAME` of run and
 * create resolves to.
 */
#include "cli/cli.h"
#include "providers/linux/linux.h"

#include <inttypes.h>
#include <time.h>

static void human_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < SBX_ARRAY_SIZE(units)) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", n);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

/* --- import --------------------------------------------------------------- */

struct progress {
    const char *name;
    bool show;        /* print progress (else the callback only polls for a signal) */
    bool tty;         /* redraw one line with \r; otherwise a line per step */
    long long bucket; /* the step last printed */
    bool printed;
};

/*
 * The provider's callback: bytes of the source read so far. On a terminal one
 * line is redrawn at each percent; otherwise (--progress into a file or pipe)
 * a line is written each 10%, so logs stay short.
 */
static void on_progress(const char *stage, uint64_t done, uint64_t total, void *data)
{
    struct progress *p = data;
    if (!p->show || !strcmp(stage, "done"))
        return;
    int pct = total ? (int)(done * 100 / total) : -1;
    if (pct > 100)
        pct = 100;
    /* Without a total, a step is 16 MiB read. */
    long long bucket = pct >= 0 ? pct / (p->tty ? 1 : 10) : (long long)(done >> 24);
    if (p->printed && bucket == p->bucket)
        return;
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

/* The store's entry for `name` as JSON (or NULL when there is none). */
static json_t *image_json(const sbx_linux_image_info *v)
{
    return json_pack("{s:s, s:s, s:I, s:f, s:s?}", "name", v->name ? v->name : "", "digest",
                     v->digest ? v->digest : "", "size", (json_int_t)v->size, "created", v->created,
                     "source", v->source);
}

static json_t *find_image(const char *sd, const char *name)
{
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    json_t *found = NULL;
    if (sbx__linux_image_list(sd, &v, &n, NULL) < 0)
        return NULL;
    for (size_t i = 0; i < n && !found; i++)
        if (v[i].name && !strcmp(v[i].name, name))
            found = image_json(&v[i]);
    sbx__linux_image_list_free(v, n);
    return found;
}

static bool import_cancelled(void *data)
{
    (void)data;
    return cli_signal_received() != 0;
}

static int cmd_import(int argc, char **argv, const char *sd)
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
    if (strncmp(source, "oci:", 4) != 0 && access(source, F_OK) < 0) {
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
    sbx_linux_image_opts io = {.progress = on_progress, .data = &pr,
                               .cancelled = import_cancelled, .max_bytes = o.max_bytes};
    sbx_error *e = NULL;
    rc = sbx__linux_image_import(sd, name, source, &io, &e);
    if (pr.printed && tty)
        fputc('\n', stderr);
    if (rc == SBX_ECANCELED || (rc < 0 && cli_signal_received())) {
        sbx_error_free(e);
        return cli_interrupted("nothing was imported");
    }
    if (rc < 0) {
        /*
         * A bad name is a usage error; a missing or unusable source (not an
         * archive, `..` entries) is the operation's failure, as for cp; only
         * sbx's own trouble (disk full, state directory) is 125.
         */
        int code = !sbx__linux_image_name_ok(name)             ? CLI_EXIT_USAGE
                   : rc == SBX_EINVAL || rc == SBX_ENOENT ? CLI_EXIT_FAIL
                                                          : CLI_EXIT_SBX;
        cli_error("importing %s from %s: %s", name, source,
                  e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
        return code;
    }
    _cleanup_json_ json_t *img = find_image(sd, name);
    if (o.json) {
        if (!img || cli_print_json(img) < 0)
            return CLI_EXIT_FAIL;
    } else {
        const char *digest = json_string_value(json_object_get(img, "digest"));
        printf("%s %s\n", name, digest ? digest : "");
    }
    return CLI_EXIT_OK;
}

/* --- ls ------------------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    const sbx_linux_image_info *x = a, *y = b;
    return strcmp(x->name ? x->name : "", y->name ? y->name : "");
}

static int cmd_ls(int argc, char **argv, const char *sd)
{
    _cleanup_cli_opts_ struct cli_opts o = {0};
    int rc;
    unsigned takes = CLI_TAKES_JSON | CLI_TAKES_QUIET | CLI_NO_OPERANDS;
    if (!cli_parse_opts("image", argc, argv, takes, &o, &rc))
        return rc;
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    sbx_error *e = NULL;
    if (sbx__linux_image_list(sd, &v, &n, &e) < 0) {
        cli_sbx_error(e, "listing images");
        return CLI_EXIT_SBX;
    }
    if (n)
        qsort(v, n, sizeof(*v), by_name);
    _cleanup_json_ json_t *arr = json_array();
    if (!o.json && !o.quiet)
        printf("%-24s %-19s %-10s %-20s %s\n", "NAME", "DIGEST", "SIZE", "CREATED", "SOURCE");
    for (size_t i = 0; i < n; i++) {
        if (o.json) {
            json_array_append_new(arr, image_json(&v[i]));
            continue;
        }
        if (o.quiet) {
            printf("%s\n", v[i].name);
            continue;
        }
        char size[32], created[32] = "-";
        human_bytes(v[i].size, size, sizeof(size));
        time_t t = (time_t)v[i].created;
        struct tm tm;
        if (t > 0 && localtime_r(&t, &tm))
            strftime(created, sizeof(created), "%Y-%m-%d %H:%M:%S", &tm);
        /* Short digests, as container tools print them. */
        const char *d = v[i].digest ? v[i].digest : "";
        char shortd[20];
        snprintf(shortd, sizeof(shortd), "%.19s", d);
        printf("%-24s %-19s %-10s %-20s %s\n", v[i].name, shortd, size, created,
               v[i].source ? v[i].source : "");
    }
    sbx__linux_image_list_free(v, n);
    if (o.json && cli_print_json(arr) < 0)
        return CLI_EXIT_FAIL;
    return CLI_EXIT_OK;
}

/* --- rm ------------------------------------------------------------------- */

/* The ids of the boxes in the state directory that run `name`, comma-separated (NULL: none). */
static char *boxes_using(const char *sd, const char *name)
{
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    if (sbx__linux_list(sd, NULL, &boxes, &n, NULL) < 0)
        return NULL;
    sbx_buf b = {0};
    for (size_t i = 0; i < n; i++)
        if (boxes[i].rec.image && !strcmp(boxes[i].rec.image, name))
            sbx__buf_printf(&b, "%s%s", b.len ? ", " : "", boxes[i].rec.id);
    sbx__linux_list_free(boxes, n);
    return b.data;
}

static int cmd_rm(int argc, char **argv, const char *sd)
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
        /*
         * The boxes' overlays keep the files they have open, but a tree
         * removed under a running box may break it: refuse unless forced.
         */
        _cleanup_free_ char *users = boxes_using(sd, name);
        if (users && !o.force) {
            cli_error("image %s is used by box %s; stop them first, or remove it anyway with "
                      "'sbx image rm --force'",
                      name, users);
            rc = CLI_EXIT_FAIL;
            continue;
        }
        sbx_error *e = NULL;
        int r = sbx__linux_image_remove(sd, name, &e);
        if (r < 0) {
            cli_error("%s%s", e ? sbx_error_message(e) : sbx_strerror(r),
                      r == SBX_ENOENT ? " (see 'sbx image ls')" : "");
            sbx_error_free(e);
            if (rc == CLI_EXIT_OK)
                rc = r == SBX_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
            continue;
        }
        printf("%s\n", name);
    }
    return rc;
}

int cli_cmd_image(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("image", "no image command given (import, ls or rm)");
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        cli_help("image");
        return CLI_EXIT_OK;
    }
    _cleanup_free_ char *sd = sbx__linux_state_dir(NULL);
    if (!sd)
        return CLI_EXIT_SBX;
    /* Each subcommand parses its own argv, with its name as argv[0]. */
    optind = 1;
    if (!strcmp(sub, "import"))
        return cmd_import(argc - 1, argv + 1, sd);
    if (!strcmp(sub, "ls") || !strcmp(sub, "list"))
        return cmd_ls(argc - 1, argv + 1, sd);
    if (!strcmp(sub, "rm") || !strcmp(sub, "remove"))
        return cmd_rm(argc - 1, argv + 1, sd);
    return cli_usage_error("image", "unknown image command '%s' (import, ls or rm)", sub);
}
