/*
 * sbx pause / sbx unpause (resume): a box's processes frozen and thawed, as
 * docker pause/unpause (docs/pause.md). Each ID is printed once done; a box
 * not found (exit 3) or that cannot be paused (exit 125) is said on stderr
 * and the other IDs are still handled.
 */
#include "cli/cli.h"

static int pause_or_resume(const char *cmd, bool pause, int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_box_ids(cmd, argc, argv, 0, false, &o, &rc))
        return rc;
    cli_signals_install();
    rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        sbx_provider *p = NULL;
        sbx_sandbox *sb = NULL;
        int orc = cli_box_open(cmd, argv[i], &p, &sb);
        if (orc != CLI_EXIT_OK) {
            if (rc == CLI_EXIT_OK)
                rc = orc; /* said */
            continue;
        }
        sbx_error *e = NULL;
        int prc = pause ? sbx_sandbox_pause(sb, &e) : sbx_sandbox_resume(sb, &e);
        if (prc < 0) {
            cli_error("%s box %s failed: %s", pause ? "pausing" : "resuming",
                      sbx_sandbox_id(sb), e ? sbx_error_message(e) : sbx_strerror(prc));
            sbx_error_free(e);
            if (rc == CLI_EXIT_OK)
                rc = CLI_EXIT_SBX;
        } else {
            printf("%s\n", sbx_sandbox_id(sb));
        }
        sbx_sandbox_free(sb); /* a connected handle: the box stays as it is */
        sbx_provider_free(p);
    }
    return rc;
}

int cli_cmd_pause(int argc, char **argv) { return pause_or_resume("pause", true, argc, argv); }

int cli_cmd_unpause(int argc, char **argv)
{
    return pause_or_resume(argv[0] && !strcmp(argv[0], "resume") ? "resume" : "unpause", false,
                           argc, argv);
}
