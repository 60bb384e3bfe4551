/* sbx create: make a box that outlives this process and record it. */
#include "cli/cli.h"

#include <getopt.h>

/*
 * The descriptor scope recorded for boxes sbx creates: the owner's, so that
 * a later `sbx stop` (through a connected handle) may end the box.
 */
#define CREATE_SCOPE "owner"

int cli_cmd_create(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_SPEC_LONGOPTS,
        { "json", no_argument, NULL, CLI_OPT_JSON },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    _cleanup_spec_opts_ struct cli_spec_opts so = { 0 };
    bool json = false;
    int c, rc;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:he:v:p:", longopts, NULL)) != -1) {
        int r = 1;
        if (c == 'h') {
            cli_help("create");
            return CLI_EXIT_OK;
        }
        if (c == CLI_OPT_JSON)
            json = true;
        else if ((r = cli_spec_opt("create", &so, c, optarg)) == 0)
            return cli_bad_option("create", c, argv);
        if (r < 0)
            return CLI_EXIT_USAGE;
    }
    if (optind < argc)
        return cli_usage_error("create", "unexpected argument '%s'", argv[optind]);
    _cleanup_free_ char *config = NULL;
    sbx_spec *spec = NULL;
    rc = cli_spec_build("create", &so, &config, &spec);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (cli_signals_install() < 0) {
        sbx_spec_free(spec);
        cli_error("cannot set up: %s", strerror(errno));
        return CLI_EXIT_SBX;
    }

    sbx_provider *p = NULL;
    if ((rc = cli_provider_new(config, &p)) != CLI_EXIT_OK) {
        sbx_spec_free(spec);
        return rc;
    }
    sbx_error *e = NULL;
    sbx_sandbox *sb = NULL;
    sbx_future *f = NULL;
    _cleanup_free_ char *desc = NULL;
    /*
     * Until its record is written, the box dies with this process, even by
     * SIGKILL: a box nobody has the id of must not run on. The detach below
     * lets it go.
     */
    rc = cli_die_with_creator(spec, &e);
    if (rc == SBX_OK)
        rc = cli_box_start(p, spec, &sb, &e);
    if (rc == SBX_OK && !cli_signal_received() &&
        (rc = sbx_sandbox_serialize_async(sb, CREATE_SCOPE, &f, &e)) == SBX_OK) {
        rc = cli_wait(f, &e);
        if (rc == SBX_OK)
            rc = sbx_future_take_string(f, &desc, &e);
        sbx_future_free(f);
    }
    _cleanup_json_ json_t *rec = NULL;
    if (rc == SBX_OK && !cli_signal_received())
        rc = cli_box_save(sbx_sandbox_id(sb), config, desc, &so.labels, spec, &rec, &e);
    sbx_spec_free(spec);
    if (rc < 0 || cli_signal_received()) {
        /* Not recorded: nobody could find the box again, so stop it (free does). */
        int sig = cli_signal_received();
        /* A signal that came after the record was written: take the record
         * back with the box, or `sbx ls` would list a box that is gone. */
        if (rec)
            cli_box_remove(sbx_sandbox_id(sb));
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
        if (sig) {
            sbx_error_free(e);
            return cli_interrupted("no box was left running");
        }
        cli_sbx_error(e, "creating the box");
        return CLI_EXIT_SBX;
    }
    if (json)
        cli_print_json(rec);
    else
        printf("%s\n", sbx_sandbox_id(sb));
    /* The box outlives this process: the record lets exec, stop and gc reach it. */
    sbx_sandbox_detach(sb);
    sbx_provider_free(p);
    return CLI_EXIT_OK;
}
