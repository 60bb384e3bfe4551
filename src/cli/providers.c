/* sbx providers: the provider names sbx can use, sorted. */
#include "cli/cli.h"

#include <getopt.h>

int cli_cmd_providers(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "json", no_argument, NULL, 2004 },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    bool json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
        if (c == 'h') {
            cli_help("providers");
            return CLI_EXIT_OK;
        }
        if (c != 2004)
            return cli_bad_option("providers", c, argv);
        json = true;
    }
    if (optind < argc)
        return cli_usage_error("providers", "unexpected argument '%s'", argv[optind]);
    char **names = NULL;
    sbx_error *e = NULL;
    if (sbx_list_providers(&names, &e) < 0) {
        cli_sbx_error(e, "listing providers");
        return CLI_EXIT_SBX;
    }
    _cleanup_json_ json_t *arr = json_array();
    for (char **n = names; *n; n++) {
        if (json)
            json_array_append_new(arr, json_string(*n));
        else
            printf("%s\n", *n);
    }
    sbx_strv_free(names);
    if (json && cli_print_json(arr) < 0)
        return CLI_EXIT_FAIL;
    return CLI_EXIT_OK;
}
