/*
 * sbx volume: the linux provider's named volumes (docs/volumes.md), over
 * the C calls sbx_provider_volume_*. The rules (names, the store, refusing
 * to remove a volume a running box uses) are the library's; this file only
 * parses arguments and prints.
 */
#include "cli/cli.h"

#include <getopt.h>

static int fail(sbx_error *e, int r, const char *what)
{
    cli_error("%s%s", e ? sbx_error_message(e) : sbx_strerror(r),
              r == SBX_ENOENT ? " (see 'sbx volume ls')" : "");
    sbx_error_free(e);
    (void)what;
    return r == SBX_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
}

static int cmd_create(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("volume", argc, argv, CLI_TAKES_JSON, &o, &rc))
        return rc;
    if (optind + 1 != argc)
        return cli_usage_error("volume", "volume create expects one NAME");
    char *text = NULL;
    sbx_error *e = NULL;
    int r = sbx_provider_volume_create(p, argv[optind], &text, &e);
    if (r < 0)
        return fail(e, r, "volume create");
    _cleanup_json_ json_t *v = json_loads(text, 0, NULL);
    free(text);
    if (o.json)
        return cli_print_json(v);
    printf("%s\n", argv[optind]);
    return CLI_EXIT_OK;
}

static int cmd_ls(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("volume", argc, argv, CLI_TAKES_JSON | CLI_TAKES_QUIET | CLI_NO_OPERANDS,
                        &o, &rc))
        return rc;
    char *text = NULL;
    sbx_error *e = NULL;
    int r = sbx_provider_volume_list(p, &text, &e);
    if (r < 0)
        return fail(e, r, "volume ls");
    _cleanup_json_ json_t *v = json_loads(text, 0, NULL);
    free(text);
    if (o.json)
        return cli_print_json(v);
    if (!o.quiet)
        printf("%-24s %-24s %s\n", "NAME", "USED BY", "MOUNTPOINT");
    size_t i;
    json_t *vol;
    json_array_foreach(v, i, vol)
    {
        const char *name = json_string_value(json_object_get(vol, "name"));
        if (o.quiet) {
            printf("%s\n", name);
            continue;
        }
        json_t *users = json_object_get(vol, "used_by");
        char used[64] = "-";
        if (json_array_size(users) == 1)
            snprintf(used, sizeof(used), "%s", json_string_value(json_array_get(users, 0)));
        else if (json_array_size(users) > 1)
            snprintf(used, sizeof(used), "%zu boxes", json_array_size(users));
        printf("%-24s %-24s %s\n", name, used,
               json_string_value(json_object_get(vol, "mountpoint")));
    }
    return CLI_EXIT_OK;
}

static int cmd_inspect(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("volume", argc, argv, 0, &o, &rc))
        return rc;
    if (optind >= argc)
        return cli_usage_error("volume", "volume inspect expects NAME...");
    _cleanup_json_ json_t *arr = json_array();
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        char *text = NULL;
        sbx_error *e = NULL;
        int r = sbx_provider_volume_inspect(p, argv[i], &text, &e);
        if (r < 0) {
            int x = fail(e, r, "volume inspect");
            rc = rc == CLI_EXIT_OK ? x : rc;
            continue;
        }
        json_array_append_new(arr, json_loads(text, 0, NULL));
        free(text);
    }
    cli_print_json(arr);
    return rc;
}

static int cmd_rm(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("volume", argc, argv, CLI_TAKES_FORCE, &o, &rc))
        return rc;
    if (optind >= argc)
        return cli_usage_error("volume", "volume rm expects NAME...");
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        sbx_error *e = NULL;
        int r = sbx_provider_volume_remove(p, argv[i], o.force, &e);
        if (r < 0) {
            int x = fail(e, r, "volume rm");
            rc = rc == CLI_EXIT_OK ? x : rc;
            continue;
        }
        printf("%s\n", argv[i]);
    }
    return rc;
}

int cli_cmd_volume(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("volume", "no volume command given (create, ls, inspect or rm)");
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        cli_help("volume");
        return CLI_EXIT_OK;
    }
    int (*fn)(int, char **, sbx_provider *) =
        !strcmp(sub, "create")                          ? cmd_create
        : !strcmp(sub, "ls") || !strcmp(sub, "list")    ? cmd_ls
        : !strcmp(sub, "inspect")                       ? cmd_inspect
        : !strcmp(sub, "rm") || !strcmp(sub, "remove") ? cmd_rm
                                                        : NULL;
    if (!fn)
        return cli_usage_error("volume", "unknown volume command '%s' (create, ls, inspect or rm)",
                               sub);
    _cleanup_free_ char *config = cli_default_config();
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (!config || sbx_provider_new(config, &p, &e) < 0) {
        cli_sbx_error(e, "volume");
        return CLI_EXIT_SBX;
    }
    optind = 1;
    int rc = fn(argc - 1, argv + 1, p);
    sbx_provider_free(p);
    return rc;
}
