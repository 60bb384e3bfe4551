/* sbx providers: the provider names sbx can use, sorted. */
#include "cli/cli.h"

int cli_cmd_providers(int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("providers", argc, argv, CLI_TAKES_JSON | CLI_NO_OPERANDS, &o, &rc))
        return rc;
    char **names = NULL;
    sbx_error *e = NULL;
    if (sbx_list_providers(&names, &e) < 0) {
        cli_sbx_error(e, "listing providers");
        return CLI_EXIT_SBX;
    }
    _cleanup_json_ json_t *arr = json_array();
    for (char **n = names; *n; n++) {
        if (o.json)
            json_array_append_new(arr, json_string(*n));
        else
            printf("%s\n", *n);
    }
    sbx_strv_free(names);
    if (o.json && cli_print_json(arr) < 0)
        return CLI_EXIT_FAIL;
    return CLI_EXIT_OK;
}
