/*
 * `sbx commit [--change 'ENV K=V']... [--no-pause] [--json] BOX NAME[:TAG]`:
 * a running box's changes become a new image (docs/images.md, "Commit and
 * build"). Prints the new image's id (or the JSON answer).
 */
#include "cli/cli.h"

#include <getopt.h>
#include <stdio.h>

int cli_cmd_commit(int argc, char **argv)
{
    static const struct option longs[] = {
        {"change", required_argument, NULL, 'c'},
        {"no-pause", no_argument, NULL, 'P'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    _cleanup_json_ json_t *opts = json_pack("{s:[]}", "changes");
    if (!opts)
        return CLI_EXIT_SBX;
    bool json = false;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+c:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'c':
            json_array_append_new(json_object_get(opts, "changes"), json_string(optarg));
            break;
        case 'P':
            json_object_set_new(opts, "pause", json_false());
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            cli_help("commit");
            return CLI_EXIT_OK;
        default:
            return cli_usage_error("commit", "unknown option");
        }
    }
    if (argc - optind != 2)
        return cli_usage_error("commit", "commit expects BOX NAME[:TAG], got %d argument%s",
                               argc - optind, argc - optind == 1 ? "" : "s");
    _cleanup_free_ char *config = cli_default_config();
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (!config || sbx_provider_new(config, &p, &e) < 0) {
        cli_sbx_error(e, "commit");
        return CLI_EXIT_SBX;
    }
    _cleanup_free_ char *ot = json_dumps(opts, JSON_COMPACT);
    char *out = NULL;
    int r = ot ? sbx_provider_image_commit(p, argv[optind], argv[optind + 1], ot, &out, &e)
               : SBX_ENOMEM;
    sbx_provider_free(p);
    if (r < 0) {
        cli_error("%s", e ? sbx_error_message(e) : sbx_strerror(r));
        sbx_error_free(e);
        return r == SBX_EINVAL || r == SBX_ENOTSUP ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    _cleanup_json_ json_t *j = out ? json_loads(out, 0, NULL) : NULL;
    free(out);
    if (json)
        return j && cli_print_json(j) == 0 ? CLI_EXIT_OK : CLI_EXIT_SBX;
    printf("%s\n", json_string_value(json_object_get(j, "id")));
    return CLI_EXIT_OK;
}
