/*
 * [netw] sbx network: the linux provider's box-to-box networks
 * (docs/networking.md), over the C calls sbx_provider_network_*; the
 * subcommands are named.c's.
 */
#include "cli/cli.h"

static void network_row(const json_t *net)
{
    if (!net) {
        printf("%-24s %-18s %s\n", "NAME", "SUBNET", "BOXES");
        return;
    }
    char used[64];
    cli_named_users(json_object_get(net, "boxes"), used, sizeof(used));
    printf("%-24s %-18s %s\n", json_string_value(json_object_get(net, "name")),
           json_string_value(json_object_get(net, "subnet")), used);
}

/* A network has no force: boxes in it must leave first. */
static int network_remove(sbx_provider *p, const char *name, int force, sbx_error **err)
{
    (void)force;
    return sbx_provider_network_remove(p, name, err);
}

int cli_cmd_network(int argc, char **argv)
{
    static const struct cli_named_kind network = {
        .cmd = "network",
        .create = sbx_provider_network_create,
        .list = sbx_provider_network_list,
        .inspect = sbx_provider_network_inspect,
        .remove = network_remove,
        .print_row = network_row,
    };
    return cli_named_main(&network, argc, argv);
}
