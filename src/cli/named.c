/*
 * The subcommands of a provider's named objects (`sbx volume`, `sbx
 * network`): create, ls, inspect, rm over the matching C calls. The rules
 * (names, stores, refusing to remove what boxes use) are the library's;
 * this file only parses arguments and prints, once for every kind, which
 * says its calls, its ls table and its hints (struct cli_named_kind).
 */
#include "cli/cli.h"

#include <getopt.h>

/* The library's messages already say what to do (`sbx volume ls`, `sbx network create`). */
static int fail(sbx_error *e, int r)
{
    cli_error("%s", e ? sbx_error_message(e) : sbx_strerror(r));
    sbx_error_free(e);
    return r == SBX_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
}

static int cmd_create(const struct cli_named_kind *k, int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts(k->cmd, argc, argv, CLI_TAKES_JSON, &o, &rc))
        return rc;
    if (optind + 1 != argc)
        return cli_usage_error(k->cmd, "%s create expects one NAME", k->cmd);
    char *text = NULL;
    sbx_error *e = NULL;
    int r = k->create(p, argv[optind], &text, &e);
    if (r < 0)
        return fail(e, r);
    _cleanup_json_ json_t *v = json_loads(text, 0, NULL);
    free(text);
    if (o.json)
        return cli_print_json(v);
    printf("%s\n", argv[optind]);
    return CLI_EXIT_OK;
}

/* "-", the one box's id, or "N boxes": who uses an object, for an ls table. */
void cli_named_users(const json_t *boxes, char *out, size_t cap)
{
    snprintf(out, cap, "-");
    if (json_array_size(boxes) == 1)
        snprintf(out, cap, "%s", json_string_value(json_array_get(boxes, 0)));
    else if (json_array_size(boxes) > 1)
        snprintf(out, cap, "%zu boxes", json_array_size(boxes));
}

static int cmd_ls(const struct cli_named_kind *k, int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts(k->cmd, argc, argv, CLI_TAKES_JSON | CLI_TAKES_QUIET | CLI_NO_OPERANDS, &o,
                        &rc))
        return rc;
    char *text = NULL;
    sbx_error *e = NULL;
    int r = k->list(p, &text, &e);
    if (r < 0)
        return fail(e, r);
    _cleanup_json_ json_t *v = json_loads(text, 0, NULL);
    free(text);
    if (o.json)
        return cli_print_json(v);
    if (!o.quiet)
        k->print_row(NULL);
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item)
    {
        if (o.quiet)
            printf("%s\n", json_string_value(json_object_get(item, "name")));
        else
            k->print_row(item);
    }
    return CLI_EXIT_OK;
}

static int cmd_inspect(const struct cli_named_kind *k, int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts(k->cmd, argc, argv, 0, &o, &rc))
        return rc;
    if (optind >= argc)
        return cli_usage_error(k->cmd, "%s inspect expects NAME...", k->cmd);
    _cleanup_json_ json_t *arr = json_array();
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        char *text = NULL;
        sbx_error *e = NULL;
        int r = k->inspect(p, argv[i], &text, &e);
        if (r < 0) {
            int x = fail(e, r);
            rc = rc == CLI_EXIT_OK ? x : rc;
            continue;
        }
        json_array_append_new(arr, json_loads(text, 0, NULL));
        free(text);
    }
    cli_print_json(arr);
    return rc;
}

static int cmd_rm(const struct cli_named_kind *k, int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts(k->cmd, argc, argv, k->rm_takes_force ? CLI_TAKES_FORCE : 0, &o, &rc))
        return rc;
    if (optind >= argc)
        return cli_usage_error(k->cmd, "%s rm expects NAME...", k->cmd);
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        sbx_error *e = NULL;
        int r = k->remove(p, argv[i], o.force, &e);
        if (r < 0) {
            int x = fail(e, r);
            rc = rc == CLI_EXIT_OK ? x : rc;
            continue;
        }
        printf("%s\n", argv[i]);
    }
    return rc;
}

int cli_named_main(const struct cli_named_kind *k, int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(k->cmd, "no %s command given (create, ls, inspect or rm)", k->cmd);
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        cli_help(k->cmd);
        return CLI_EXIT_OK;
    }
    int (*fn)(const struct cli_named_kind *, int, char **, sbx_provider *) =
        !strcmp(sub, "create")                          ? cmd_create
        : !strcmp(sub, "ls") || !strcmp(sub, "list")    ? cmd_ls
        : !strcmp(sub, "inspect")                       ? cmd_inspect
        : !strcmp(sub, "rm") || !strcmp(sub, "remove") ? cmd_rm
                                                        : NULL;
    if (!fn)
        return cli_usage_error(k->cmd, "unknown %s command '%s' (create, ls, inspect or rm)",
                               k->cmd, sub);
    _cleanup_free_ char *config = cli_default_config();
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (!config || sbx_provider_new(config, &p, &e) < 0) {
        cli_sbx_error(e, k->cmd);
        return CLI_EXIT_SBX;
    }
    optind = 1;
    int rc = fn(k, argc - 1, argv + 1, p);
    sbx_provider_free(p);
    return rc;
}
