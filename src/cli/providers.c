/*
 * sbx providers: the provider names sbx can use, sorted, with where each
 * comes from (built in, registered, or the plugin file that has it).
 * -q prints the names alone, one a line, for scripts.
 */
#include "cli/cli.h"

int cli_cmd_providers(int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("providers", argc, argv, CLI_TAKES_JSON | CLI_TAKES_QUIET | CLI_NO_OPERANDS,
                        &o, &rc))
        return rc;
    char **names = NULL;
    sbx_error *e = NULL;
    if (sbx_list_providers(&names, &e) < 0) {
        cli_sbx_error(e, "listing providers");
        return CLI_EXIT_SBX;
    }
    size_t width = strlen("NAME");
    for (char **n = names; *n; n++)
        width = strlen(*n) > width ? strlen(*n) : width;
    _cleanup_json_ json_t *arr = json_array();
    if (!o.json && !o.quiet)
        printf("%-*s  %s\n", (int)width, "NAME", "SOURCE");
    for (char **n = names; *n; n++) {
        char *src = NULL;
        if (!o.quiet && sbx_provider_source(*n, &src, NULL) < 0)
            src = NULL;
        /* A plugin is named by its file; the others by what they are. */
        bool file = src && strcmp(src, "built-in") && strcmp(src, "registered");
        if (o.json) {
            json_t *obj = json_pack("{s:s, s:s}", "name", *n, "source",
                                    file ? "plugin" : src ? src : "unknown");
            if (obj && file)
                json_object_set_new(obj, "path", json_string(src));
            json_array_append_new(arr, obj);
        } else if (o.quiet) {
            printf("%s\n", *n);
        } else {
            _cleanup_free_ char *shown = src ? cli_field(src) : NULL;
            printf("%-*s  %s%s\n", (int)width, *n, file ? "plugin " : "",
                   shown ? shown : "unknown");
        }
        free(src);
    }
    sbx_strv_free(names);
    if (o.json && cli_print_json(arr) < 0)
        return CLI_EXIT_FAIL;
    return CLI_EXIT_OK;
}
