/*
 * sbx volume: the linux provider's named volumes (docs/volumes.md), over
 * the C calls sbx_provider_volume_*; the subcommands are named.c's.
 */
#include "cli/cli.h"

static void volume_row(const json_t *vol)
{
    if (!vol) {
        printf("%-24s %-24s %s\n", "NAME", "USED BY", "MOUNTPOINT");
        return;
    }
    char used[64];
    cli_named_users(json_object_get(vol, "used_by"), used, sizeof(used));
    printf("%-24s %-24s %s\n", json_string_value(json_object_get(vol, "name")), used,
           json_string_value(json_object_get(vol, "mountpoint")));
}

int cli_cmd_volume(int argc, char **argv)
{
    static const struct cli_named_kind volume = {
        .cmd = "volume",
        .create = sbx_provider_volume_create,
        .list = sbx_provider_volume_list,
        .inspect = sbx_provider_volume_inspect,
        .remove = sbx_provider_volume_remove,
        .rm_takes_force = true,
        .print_row = volume_row,
    };
    return cli_named_main(&volume, argc, argv);
}
