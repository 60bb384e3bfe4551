/* sbx create: make a box that outlives this process and record it. */
#include "cli/cli.h"

#include <ctype.h>
#include <fcntl.h>
#include <getopt.h>
#include <sys/file.h>

/*
 * The descriptor scope recorded for boxes sbx creates: the owner's, so that
 * a later `sbx stop` (through a connected handle) may end the box.
 */
#define CREATE_SCOPE "owner"

/* A name as Docker takes one: [a-zA-Z0-9][a-zA-Z0-9_.-]*, at most 128; "sbx-" is the ids'. */
static bool name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len == 0 || len > 128 || !isalnum((unsigned char)n[0]) || !strncmp(n, "sbx-", 4))
        return false;
    for (const char *c = n; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.' && *c != '-')
            return false;
    return true;
}

/*
 * --name: the name is the box's label "name"; no other box sbx sees may have
 * it. Checked under <boxes dir>/.names.lock, held until the record is
 * written, so two creates of one name cannot both pass. Returns the lock's
 * fd (>= 0), or an exit code < 0 negated.
 */
static int claim_name(const char *name, int *exit_code)
{
    sbx_error *e = NULL;
    _cleanup_free_ char *dir = NULL;
    if (cli_boxes_dir(&dir, &e) < 0) {
        cli_sbx_error(e, "finding the boxes directory");
        *exit_code = CLI_EXIT_SBX;
        return -1;
    }
    _cleanup_free_ char *path = sbx__printf("%s/.names.lock", dir);
    int fd = path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
    if (fd < 0 || flock(fd, LOCK_EX) < 0) {
        cli_error("cannot lock %s: %s", path ? path : dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        *exit_code = CLI_EXIT_SBX;
        return -1;
    }
    _cleanup_json_ json_t *all = NULL;
    if ((*exit_code = cli_box_records(true, &all)) != CLI_EXIT_OK) {
        close(fd);
        return -1;
    }
    size_t i;
    json_t *rec;
    json_array_foreach(all, i, rec)
    {
        const char *n = json_string_value(json_object_get(json_object_get(rec, "labels"), "name"));
        if (n && !strcmp(n, name)) {
            cli_error("the name '%s' is already used by box %s: stop it (sbx rm -f %s) or choose "
                      "another name",
                      name, cli_box_id(rec), name);
            close(fd);
            *exit_code = CLI_EXIT_USAGE;
            return -1;
        }
    }
    return fd;
}

int cli_cmd_create(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_SPEC_LONGOPTS,
        { "json", no_argument, NULL, CLI_OPT_JSON },
        { "name", required_argument, NULL, 2101 },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    _cleanup_spec_opts_ struct cli_spec_opts so = { 0 };
    bool json = false;
    const char *name = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:he:v:p:w:", longopts, NULL)) != -1) {
        int r = 1;
        if (c == 'h') {
            cli_help("create");
            return CLI_EXIT_OK;
        }
        if (c == CLI_OPT_JSON)
            json = true;
        else if (c == 2101)
            name = optarg;
        else if ((r = cli_spec_opt("create", &so, c, optarg)) == 0)
            return cli_bad_option("create", c, argv);
        if (r < 0)
            return CLI_EXIT_USAGE;
    }
    if (optind < argc)
        return cli_usage_error("create", "unexpected argument '%s'", argv[optind]);
    return cli_create_box("create", &so, name, json, NULL);
}

int cli_create_box(const char *cmd, struct cli_spec_opts *so, const char *name, bool json,
                   char *const *entrypoint)
{
    int rc;
    if (name && !name_ok(name))
        return cli_usage_error(cmd,
                               "--name '%s' is not a name: letters, digits, '_', '.' and '-', "
                               "starting with a letter or digit, at most 128, not 'sbx-...' "
                               "(the ids')",
                               name);
    if (name) {
        const char *had = sbx__kv_get(&so->labels, "name");
        if (had && strcmp(had, name))
            return cli_usage_error(cmd, "--name %s and --label name=%s disagree", name, had);
        sbx__kv_set(&so->labels, "name", name);
    }
    /* Held until the record is written (or the create failed): closed on return. */
    _cleanup_close_ int name_lock = -1;
    if (name && (name_lock = claim_name(name, &rc)) < 0)
        return rc;
    _cleanup_free_ char *config = NULL;
    sbx_spec *spec = NULL;
    rc = cli_spec_build(cmd, so, &config, &spec);
    if (rc != CLI_EXIT_OK)
        return rc;
    /* run -d: CMD is the box's service, as docker run -d's command. */
    if (entrypoint && sbx_spec_set_entrypoint(spec, (const char *const *)entrypoint) < 0) {
        sbx_spec_free(spec);
        cli_error("out of memory");
        return CLI_EXIT_SBX;
    }
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
        rc = cli_box_save(sbx_sandbox_id(sb), config, desc, &so->labels, spec, &rec, &e);
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
