/*
 * [netw] sbx network: the linux provider's box-to-box networks
 * (docs/networking.md), over the C calls sbx_provider_network_*. The rules
 * (names, subnets, refusing to remove a network boxes are in) are the
 * library's; this file only parses arguments and prints.
 */
#include "cli/cli.h"

#include <getopt.h>

static int fail(sbx_error *e, int r, const char *what)
{
    /* The library's messages already say what to do (sbx network ls, create). */
    cli_error("%s", e ? sbx_error_message(e) : sbx_strerror(r));
    sbx_error_free(e);
    (void)what;
    return r == SBX_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
}

static int cmd_create(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("network", argc, argv, CLI_TAKES_JSON, &o, &rc))
        return rc;
    if (optind + 1 != argc)
        return cli_usage_error("network", "network create expects one NAME");
    char *text = NULL;
    sbx_error *e = NULL;
    int r = sbx_provider_network_create(p, argv[optind], &text, &e);
    if (r < 0)
        return fail(e, r, "network create");
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
    if (!cli_parse_opts("network", argc, argv, CLI_TAKES_JSON | CLI_TAKES_QUIET | CLI_NO_OPERANDS,
                        &o, &rc))
        return rc;
    char *text = NULL;
    sbx_error *e = NULL;
    int r = sbx_provider_network_list(p, &text, &e);
    if (r < 0)
        return fail(e, r, "network ls");
    _cleanup_json_ json_t *v = json_loads(text, 0, NULL);
    free(text);
    if (o.json)
        return cli_print_json(v);
    if (!o.quiet)
        printf("%-24s %-18s %s\n", "NAME", "SUBNET", "BOXES");
    size_t i;
    json_t *net;
    json_array_foreach(v, i, net)
    {
        const char *name = json_string_value(json_object_get(net, "name"));
        if (o.quiet) {
            printf("%s\n", name);
            continue;
        }
        json_t *boxes = json_object_get(net, "boxes");
        char used[64] = "-";
        if (json_array_size(boxes) == 1)
            snprintf(used, sizeof(used), "%s", json_string_value(json_array_get(boxes, 0)));
        else if (json_array_size(boxes) > 1)
            snprintf(used, sizeof(used), "%zu boxes", json_array_size(boxes));
        printf("%-24s %-18s %s\n", name, json_string_value(json_object_get(net, "subnet")), used);
    }
    return CLI_EXIT_OK;
}

static int cmd_inspect(int argc, char **argv, sbx_provider *p)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("network", argc, argv, 0, &o, &rc))
        return rc;
    if (optind >= argc)
        return cli_usage_error("network", "network inspect expects NAME...");
    _cleanup_json_ json_t *arr = json_array();
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        char *text = NULL;
        sbx_error *e = NULL;
        int r = sbx_provider_network_inspect(p, argv[i], &text, &e);
        if (r < 0) {
            int x = fail(e, r, "network inspect");
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
    if (!cli_parse_opts("network", argc, argv, 0, &o, &rc))
        return rc;
    if (optind >= argc)
        return cli_usage_error("network", "network rm expects NAME...");
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        sbx_error *e = NULL;
        int r = sbx_provider_network_remove(p, argv[i], &e);
        if (r < 0) {
            int x = fail(e, r, "network rm");
            rc = rc == CLI_EXIT_OK ? x : rc;
            continue;
        }
        printf("%s\n", argv[i]);
    }
    return rc;
}

int cli_cmd_network(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("network", "no network command given (create, ls, inspect or rm)");
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        cli_help("network");
        return CLI_EXIT_OK;
    }
    int (*fn)(int, char **, sbx_provider *) =
        !strcmp(sub, "create")                          ? cmd_create
        : !strcmp(sub, "ls") || !strcmp(sub, "list")    ? cmd_ls
        : !strcmp(sub, "inspect")                       ? cmd_inspect
        : !strcmp(sub, "rm") || !strcmp(sub, "remove") ? cmd_rm
                                                        : NULL;
    if (!fn)
        return cli_usage_error("network", "unknown network command '%s' (create, ls, inspect or rm)",
                               sub);
    _cleanup_free_ char *config = cli_default_config();
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (!config || sbx_provider_new(config, &p, &e) < 0) {
        cli_sbx_error(e, "network");
        return CLI_EXIT_SBX;
    }
    optind = 1;
    int rc = fn(argc - 1, argv + 1, p);
    sbx_provider_free(p);
    return rc;
}
