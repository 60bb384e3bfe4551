/*
 * Command-line options: those most commands share (--json, --label, ...),
 * and those that describe a box (provider, config, spec) and how they
 * become an sbx_spec.
 */
#include "cli/cli.h"

#include <math.h>

/* Splits "K=V"; returns -1 when there is no '='. `key` is malloc'd. */
static int split_kv(const char *arg, char **key, const char **value)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return -1;
    *key = strndup(arg, (size_t)(eq - arg));
    *value = eq + 1;
    return *key ? 0 : -1;
}

char *cli_join_argv(char *const *argv, int argc)
{
    sbx_buf b = { 0 };
    for (int i = 0; i < argc; i++) {
        _cleanup_free_ char *q = sbx_shell_quote(argv[i]);
        if (!q || (i && sbx__buf_append(&b, " ", 1) < 0) || sbx__buf_append(&b, q, strlen(q)) < 0) {
            sbx__buf_free(&b);
            return NULL;
        }
    }
    if (!b.data && sbx__buf_append(&b, "", 0) < 0)
        return NULL;
    return b.data;
}

int cli_parse_seconds(const char *s, double *out)
{
    double v;
    /* "inf" parses as a float but is no number of seconds: it overflowed into "out of memory". */
    if (sbx__parse_pyfloat(s, &v) < 0 || !isfinite(v) || v < 0 || v > SBX_MAX_SECONDS)
        return -1;
    *out = v;
    return 0;
}

int cli_add_env(const char *cmd, sbx_kv *kv, const char *arg)
{
    /*
     * -e KEY takes the value from sbx's own environment, as `docker run -e
     * KEY` does: a secret need not be on sbx's command line, which every
     * local user can read in ps. An unset KEY adds nothing (docker's rule).
     */
    if (*arg && !strchr(arg, '=')) {
        if (strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") !=
                strlen(arg) ||
            (*arg >= '0' && *arg <= '9')) {
            cli_usage_error(cmd, "-e/--env expects KEY=VALUE or a variable name KEY, got '%s'",
                            arg);
            return -1;
        }
        const char *v = getenv(arg);
        return !v ? 1 : sbx__kv_set(kv, arg, v) < 0 ? -1 : 1;
    }
    return cli_add_kv(cmd, kv, "-e/--env", arg);
}

int cli_add_kv(const char *cmd, sbx_kv *kv, const char *opt, const char *arg)
{
    _cleanup_free_ char *k = NULL;
    const char *v;
    if (split_kv(arg, &k, &v) < 0) {
        cli_usage_error(cmd, "%s expects KEY=VALUE, got '%s'", opt, arg);
        return -1;
    }
    return sbx__kv_set(kv, k, v) < 0 ? -1 : 1;
}

bool cli_parse_opts(const char *cmd, int argc, char **argv, unsigned takes, struct cli_opts *o,
                    int *exit_code)
{
    static const struct {
        unsigned takes; /* 0: every command */
        bool short_too; /* also -<val> */
        struct option opt;
    } table[] = {
        { CLI_TAKES_JSON, false, { "json", no_argument, NULL, CLI_OPT_JSON } },
        { CLI_TAKES_QUIET, true, { "quiet", no_argument, NULL, 'q' } },
        { CLI_TAKES_FORCE, true, { "force", no_argument, NULL, 'f' } },
        { CLI_TAKES_DRY_RUN, true, { "dry-run", no_argument, NULL, 'n' } },
        { CLI_TAKES_LABEL, false, { "label", required_argument, NULL, CLI_OPT_LABEL } },
        { CLI_TAKES_RUN_ID, false, { "run-id", required_argument, NULL, CLI_OPT_RUN_ID } },
        { CLI_TAKES_PROGRESS, false, { "progress", no_argument, NULL, 'p' } },
        { CLI_TAKES_PROGRESS, false, { "no-progress", no_argument, NULL, 'P' } },
        { CLI_TAKES_MAX_BYTES, false, { "max-bytes", required_argument, NULL, CLI_OPT_MAX_BYTES } },
        { CLI_TAKES_ARCHIVE, true, { "archive", no_argument, NULL, 'a' } },
        { CLI_TAKES_ALL, true, { "all", no_argument, NULL, 'a' } },
        { CLI_TAKES_FORMAT, false, { "format", required_argument, NULL, CLI_OPT_FORMAT } },
        { CLI_TAKES_PLATFORM, false, { "platform", required_argument, NULL, CLI_OPT_PLATFORM } },
        { 0, true, { "help", no_argument, NULL, 'h' } },
    };
    struct option longopts[SBX_ARRAY_SIZE(table) + 1];
    /* '+': stop at the first operand; ':': report a missing value as such. */
    char shortopts[SBX_ARRAY_SIZE(table) + 3] = "+:";
    size_t n = 0, ns = 2;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(table); i++) {
        if (table[i].takes && !(takes & table[i].takes))
            continue;
        longopts[n++] = table[i].opt;
        if (table[i].short_too)
            shortopts[ns++] = (char)table[i].opt.val;
    }
    longopts[n] = (struct option){ 0 };
    shortopts[ns] = 0;

    *o = (struct cli_opts){ .progress = -1 };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        switch (c) {
        case 'h': cli_help(cmd); *exit_code = CLI_EXIT_OK; goto end;
        case 'q': o->quiet = true; break;
        case 'f': o->force = true; break;
        case 'n': o->dry_run = true; break;
        case 'p': o->progress = 1; break;
        case 'P': o->progress = 0; break;
        /* -a is --archive (cp) or --all (ls): no command takes both. */
        case 'a': *(takes & CLI_TAKES_ALL ? &o->all : &o->archive) = true; break;
        case CLI_OPT_JSON: o->json = true; break;
        case CLI_OPT_FORMAT: o->format = optarg; break;
        case CLI_OPT_PLATFORM: o->platform = optarg; break;
        case CLI_OPT_LABEL:
            if (cli_add_kv(cmd, &o->labels, "--label", optarg) < 0) {
                *exit_code = CLI_EXIT_USAGE;
                goto end;
            }
            break;
        /* The run id a box was labelled with: the same as --label run_id=R. */
        case CLI_OPT_RUN_ID: sbx__kv_set(&o->labels, "run_id", optarg); break;
        case CLI_OPT_MAX_BYTES: {
            /* A byte count, with an optional binary suffix (16G = 16 GiB). */
            char *end = NULL;
            errno = 0;
            unsigned long long v =
                optarg[0] >= '0' && optarg[0] <= '9' ? strtoull(optarg, &end, 10) : 0;
            int shift = !end ? -1 : !*end ? 0 : !strcmp(end, "K") ? 10 : !strcmp(end, "M") ? 20
                        : !strcmp(end, "G") ? 30 : !strcmp(end, "T") ? 40 : -1;
            if (!v || errno || shift < 0 || v > (~0ull >> shift)) {
                *exit_code = cli_usage_error(cmd, "--max-bytes wants a positive byte count "
                                                  "(suffixes K, M, G, T), got '%s'", optarg);
                goto end;
            }
            o->max_bytes = v << shift;
            break;
        }
        default: *exit_code = cli_bad_option(cmd, c, argv); goto end;
        }
    }
    if ((takes & CLI_NO_OPERANDS) && optind < argc) {
        *exit_code = cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
        goto end;
    }
    return true;
end:
    cli_opts_free(o);
    return false;
}

void cli_opts_free(struct cli_opts *o)
{
    sbx__kv_free(&o->labels);
}

/*
 * [endpoint] -p/--publish [[HOSTADDR:]HOSTPORT:]PORT: declares PORT and fixes
 * its host listener (docker's -p; loopback unless HOSTADDR is given; a bare
 * PORT or an empty HOSTPORT: any free port, `sbx endpoint` tells which).
 */
static int publish_opt(const char *cmd, struct cli_spec_opts *o, const char *arg)
{
    char *addr = NULL;
    int hp, port;
    if (cli_parse_port_map(arg, &addr, &hp, &port) < 0) {
        cli_usage_error(cmd,
                        "-p expects [[HOSTADDR:]HOSTPORT:]PORT (ports 1..65535), got '%s'", arg);
        return -1;
    }
    bool have = false;
    for (size_t i = 0; i < o->n_ports; i++)
        have |= o->ports[i] == port;
    if (!have) {
        int *n = realloc(o->ports, (o->n_ports + 1) * sizeof(*n));
        if (!n) {
            free(addr);
            return -1;
        }
        o->ports = n;
        o->ports[o->n_ports++] = port;
    }
    if (!o->publish)
        o->publish = json_array();
    json_t *e = json_pack("{s:i, s:i}", "port", port, "host_port", hp < 0 ? 0 : hp);
    if (e && addr)
        json_object_set_new(e, "host_ip", json_string(addr));
    free(addr);
    if (!o->publish || !e || json_array_append_new(o->publish, e) < 0)
        return -1;
    return 1;
}

int cli_spec_opt(const char *cmd, struct cli_spec_opts *o, int c, const char *arg)
{
    switch (c) {
    case 1001: o->provider = arg; return 1;
    case 1002: o->config_file = arg; return 1;
    case 1003: o->block = arg; return 1;
    case 1004: o->spec_file = arg; return 1;
    case 1005: o->image = arg; return 1;
    case 1006:
    case 'w': o->workdir = arg; return 1;
    case 'e': return cli_add_env(cmd, &o->env, arg);
    case 1007: o->cpu = arg; return 1;
    case 1008: o->memory = arg; return 1;
    case 1009: o->disk = arg; return 1;
    case 1010: o->ttl = arg; return 1;
    case 1011: {
        long long port;
        if (sbx__parse_pyint(arg, &port) < 0 || port < INT32_MIN || port > INT32_MAX) {
            cli_usage_error(cmd, "--port expects a number, got '%s'", arg);
            return -1;
        }
        int *n = realloc(o->ports, (o->n_ports + 1) * sizeof(*n));
        if (!n)
            return -1;
        o->ports = n;
        o->ports[o->n_ports++] = (int)port;
        return 1;
    }
    case 'p': return publish_opt(cmd, o, arg); /* [endpoint] */
    case CLI_OPT_LABEL: return cli_add_kv(cmd, &o->labels, "--label", arg);
    case 1013: return cli_add_kv(cmd, &o->files, "--file", arg);
    case 1014: o->ready_timeout = arg; return 1;
    case 1016:
        if (strcmp(arg, "missing") && strcmp(arg, "always") && strcmp(arg, "never")) {
            cli_usage_error(cmd, "--pull expects missing, always or never, got '%s'", arg);
            return -1;
        }
        o->pull = arg;
        return 1;
    case 'v':
    case 1030: {
        /* [volumes] Passed on as provider_options.volumes / cap_add: the provider checks them. */
        json_t **list = c == 'v' ? &o->volumes : &o->cap_add;
        if (!*list && !(*list = json_array()))
            return -1;
        return json_array_append_new(*list, json_string(arg)) < 0 ? -1 : 1;
    }
    case 1031: o->shm_size = arg; return 1;
    case 1032:
        /*
         * [nat] [netw] provider_options.network: none, host, nat, or the
         * name of a box-to-box network, which the provider checks.
         */
        if (!*arg) {
            cli_usage_error(cmd, "--network: give none, host, nat or a network's name");
            return -1;
        }
        o->network = arg;
        return 1;
    default: return 0;
    }
}

void cli_spec_opts_free(struct cli_spec_opts *o)
{
    sbx__kv_free(&o->env);
    sbx__kv_free(&o->labels);
    sbx__kv_free(&o->files);
    free(o->ports);
    json_decref(o->volumes);
    json_decref(o->cap_add);
    json_decref(o->publish); /* [endpoint] */
}

/* `{"name": {}}` for a provider name, after checking that it exists. */
static int config_from_name(const char *cmd, const char *name, char **out)
{
    sbx_error *e = NULL;
    if (sbx_provider_lookup(name, &e) < 0) {
        cli_sbx_error(e, "provider lookup");
        return CLI_EXIT_USAGE;
    }
    json_t *m = json_pack("{s:{}}", name);
    *out = m ? sbx__json_dump(m) : NULL;
    json_decref(m);
    (void)cmd;
    return *out ? CLI_EXIT_OK : CLI_EXIT_SBX;
}

/* The top-level keys of `doc` that look like provider blocks, comma-separated. */
static char *block_names(json_t *doc, const char **only)
{
    sbx_buf b = { 0 };
    const char *k;
    json_t *v;
    size_t n = 0;
    json_object_foreach(doc, k, v)
    {
        if (!json_is_object(v))
            continue;
        size_t keys = json_object_size(v) - (json_object_get(v, "default_metadata") ? 1 : 0);
        if (keys != 1)
            continue;
        sbx__buf_printf(&b, "%s%s", n++ ? ", " : "", k);
        *only = k;
    }
    if (n != 1)
        *only = NULL;
    if (!b.data)
        sbx__buf_printf(&b, "(none)");
    return b.data;
}

int cli_provider_config(const char *cmd, const char *provider, const char *config_file,
                        const char *block, char **config_json, json_t **default_metadata)
{
    sbx_error *e = NULL;
    *default_metadata = NULL;
    if (provider && config_file)
        return cli_usage_error(cmd, "--provider and --config cannot be used together");
    if (block && !config_file)
        return cli_usage_error(cmd, "--block needs --config FILE");
    if (provider && (strchr(provider, '{') || strchr(provider, ':'))) {
        /* An inline mapping, as the reference's sandbox_provider accepts. */
        if (sbx_resolve_provider_config(provider, NULL, config_json, &e) < 0) {
            cli_sbx_error(e, "--provider");
            return CLI_EXIT_USAGE;
        }
        return CLI_EXIT_OK;
    }
    if (provider)
        return config_from_name(cmd, provider, config_json);
    if (!config_file) {
        const char *env = getenv("SBX_PROVIDER");
        return config_from_name(cmd, env && *env ? env : SBX_CLI_DEFAULT_PROVIDER, config_json);
    }
    _cleanup_free_ char *doc = NULL;
    if (sbx_config_load_file(config_file, &doc, &e) < 0) {
        cli_sbx_error(e, "--config");
        return CLI_EXIT_USAGE;
    }
    _cleanup_json_ json_t *v = json_loads(doc, JSON_DECODE_ANY, NULL);
    if (!json_is_object(v)) {
        cli_error("%s: a config file must hold a mapping", config_file);
        return CLI_EXIT_USAGE;
    }
    if (!block) {
        /* A file that is itself one provider mapping ({local: {...}}) is used as is. */
        const char *k = NULL;
        json_t *only;
        if (json_object_size(v) == 1) {
            void *it = json_object_iter(v);
            k = json_object_iter_key(it);
            only = json_object_iter_value(it);
            if (sbx_provider_lookup(k, NULL) == SBX_OK && (json_is_object(only) || json_is_null(only))) {
                *config_json = sbx__json_dump(v);
                return CLI_EXIT_OK;
            }
        }
        _cleanup_free_ char *names = block_names(v, &block);
        if (!block) {
            cli_error("%s holds no single provider mapping; choose a block with --block NAME "
                      "(blocks: %s)",
                      config_file, names ? names : "(none)");
            return CLI_EXIT_USAGE;
        }
    }
    if (sbx_resolve_provider_config(block, doc, config_json, &e) < 0) {
        cli_sbx_error(e, "--block");
        return CLI_EXIT_USAGE;
    }
    _cleanup_free_ char *meta = NULL;
    if (sbx_resolve_provider_metadata(block, doc, &meta, &e) < 0) {
        free(steal_pointer(config_json));
        cli_sbx_error(e, "--block");
        return CLI_EXIT_USAGE;
    }
    *default_metadata = json_loads(meta, 0, NULL);
    return CLI_EXIT_OK;
}

static int bad_value(const char *cmd, const char *opt, const char *arg, const char *what)
{
    return cli_usage_error(cmd, "%s expects %s, got '%s'", opt, what, arg);
}

/* Applies the individual options on top of `spec`. */
static int apply_options(const char *cmd, struct cli_spec_opts *o, sbx_spec *spec,
                         json_t *default_metadata)
{
    double d;
    long long n;
    if (o->image)
        sbx_spec_set_image(spec, o->image);
    if (o->pull) {
        /* provider_options.pull: providers that pull read it, the others ignore it. */
        _cleanup_json_ json_t *po = json_loads(sbx_spec_provider_options(spec), 0, NULL);
        if (!json_is_object(po))
            po = json_object();
        json_object_set_new(po, "pull", json_string(o->pull));
        _cleanup_free_ char *t = po ? sbx__json_dump(po) : NULL;
        if (!t || sbx_spec_set_provider_options(spec, t, NULL) < 0)
            return CLI_EXIT_SBX;
    }
    /* [volumes] -v, --cap-add, --shm-size: added to provider_options (docs/volumes.md). */
    if (o->network) {
        /* [nat] docs/networking.md */
        _cleanup_json_ json_t *po = json_loads(sbx_spec_provider_options(spec), 0, NULL);
        if (!json_is_object(po))
            po = json_object();
        json_object_set_new(po, "network", json_string(o->network));
        _cleanup_free_ char *t = po ? sbx__json_dump(po) : NULL;
        if (!t || sbx_spec_set_provider_options(spec, t, NULL) < 0)
            return CLI_EXIT_SBX;
    }
    if (o->volumes || o->cap_add || o->shm_size) {
        _cleanup_json_ json_t *po = json_loads(sbx_spec_provider_options(spec), 0, NULL);
        if (!json_is_object(po))
            po = json_object();
        const char *keys[] = { "volumes", "cap_add" };
        json_t *lists[] = { o->volumes, o->cap_add };
        for (size_t i = 0; po && i < 2; i++) {
            if (!lists[i])
                continue;
            json_t *have = json_object_get(po, keys[i]);
            if (!json_is_array(have))
                json_object_set_new(po, keys[i], have = json_array());
            json_array_extend(have, lists[i]);
        }
        if (po && o->shm_size)
            json_object_set_new(po, "shm_size", json_string(o->shm_size));
        _cleanup_free_ char *t = po ? sbx__json_dump(po) : NULL;
        if (!t || sbx_spec_set_provider_options(spec, t, NULL) < 0)
            return CLI_EXIT_SBX;
    }
    /* A relative workdir is relative to nothing in the box: every exec failed with it. */
    if (o->workdir && sbx_spec_set_workdir(spec, o->workdir) < 0)
        return bad_value(cmd, "--workdir", o->workdir, "an absolute path in the box (from /)");
    for (size_t i = 0; i < o->env.len; i++)
        if (sbx_spec_set_env(spec, o->env.keys[i], o->env.values[i]) < 0)
            return cli_usage_error(cmd,
                                   "-e %s: the environment is too large (%u KiB per variable, "
                                   "%u MiB in all, the kernel's limits for a command); pass "
                                   "large data with --file instead",
                                   o->env.keys[i], SBX_ENV_ENTRY_MAX_BYTES >> 10,
                                   SBX_ENV_MAX_BYTES >> 20);
    if (o->cpu) {
        if (sbx__parse_pyfloat(o->cpu, &d) < 0 || !isfinite(d) || !(d > 0))
            return bad_value(cmd, "--cpu", o->cpu, "a positive number");
        sbx_spec_set_cpu(spec, d);
    }
    if (o->memory) {
        if (sbx__parse_pyint(o->memory, &n) < 0 || n <= 0 || n > SBX_MAX_MEMORY_MIB)
            return bad_value(cmd, "--memory", o->memory,
                             "a whole number of MiB, e.g. 1536 (the spec takes an integer)");
        sbx_spec_set_memory_mib(spec, n);
    }
    if (o->disk) {
        if (sbx__parse_pyint(o->disk, &n) < 0 || n <= 0 || n > SBX_MAX_DISK_GIB)
            return bad_value(cmd, "--disk", o->disk,
                             "a whole number of GiB (the spec takes an integer)");
        sbx_spec_set_disk_gib(spec, n);
    }
    if (o->ttl) {
        if (cli_parse_seconds(o->ttl, &d) < 0 || d == 0)
            return bad_value(cmd, "--ttl", o->ttl, "a positive number of seconds");
        sbx_spec_set_ttl(spec, d);
    }
    if (o->ready_timeout) {
        if (cli_parse_seconds(o->ready_timeout, &d) < 0 || d == 0)
            return bad_value(cmd, "--ready-timeout", o->ready_timeout,
                             "a positive number of seconds");
        sbx_spec_set_ready_timeout(spec, d);
    }
    for (size_t i = 0; i < o->n_ports; i++) {
        sbx_error *e = NULL;
        if (sbx_spec_add_port(spec, o->ports[i], &e) < 0) {
            cli_sbx_error(e, "--port");
            return CLI_EXIT_USAGE;
        }
    }
    /* [endpoint] -p: provider_options.publish (the linux provider's host listeners). */
    if (o->publish) {
        _cleanup_json_ json_t *po = json_loads(sbx_spec_provider_options(spec), 0, NULL);
        if (!json_is_object(po))
            po = json_object();
        json_object_set(po, "publish", o->publish);
        _cleanup_free_ char *t = po ? sbx__json_dump(po) : NULL;
        if (!t || sbx_spec_set_provider_options(spec, t, NULL) < 0)
            return CLI_EXIT_SBX;
    }
    /* Metadata: the block's default_metadata, then the spec file's, then labels. */
    const char *k;
    json_t *v;
    json_object_foreach(default_metadata, k, v)
    {
        if (sbx__kv_get(&spec->metadata, k))
            continue;
        _cleanup_free_ char *text = json_is_string(v) ? strdup(json_string_value(v))
                                                      : sbx__json_dump(v);
        if (!text || sbx_spec_set_metadata(spec, k, text) < 0)
            return CLI_EXIT_SBX;
    }
    for (size_t i = 0; i < o->labels.len; i++)
        if (sbx_spec_set_metadata(spec, o->labels.keys[i], o->labels.values[i]) < 0)
            return CLI_EXIT_SBX;
    for (size_t i = 0; i < o->files.len; i++) {
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        if (sbx__read_file(o->files.values[i], &data, &len) < 0) {
            cli_error("--file %s=%s: cannot read %s: %s", o->files.keys[i], o->files.values[i],
                      o->files.values[i], strerror(errno));
            return CLI_EXIT_USAGE;
        }
        if (sbx_spec_add_file(spec, o->files.keys[i], data, len) < 0)
            return CLI_EXIT_SBX;
    }
    return CLI_EXIT_OK;
}

int cli_spec_build(const char *cmd, struct cli_spec_opts *o, char **config_json, sbx_spec **spec)
{
    _cleanup_json_ json_t *meta = NULL;
    _cleanup_free_ char *config = NULL;
    int rc = cli_provider_config(cmd, o->provider, o->config_file, o->block, &config, &meta);
    if (rc != CLI_EXIT_OK)
        return rc;
    sbx_spec *s = NULL;
    if (o->spec_file) {
        _cleanup_free_ char *text = NULL;
        if (sbx__read_file(o->spec_file, &text, NULL) < 0) {
            cli_error("--spec: cannot read %s: %s", o->spec_file, strerror(errno));
            return CLI_EXIT_USAGE;
        }
        sbx_error *e = NULL;
        if (sbx_spec_from_json(text, &s, &e) < 0) {
            cli_error("--spec %s: %s", o->spec_file, e ? sbx_error_message(e) : "invalid spec");
            sbx_error_free(e);
            return CLI_EXIT_USAGE;
        }
    } else if (!(s = sbx_spec_new())) {
        return CLI_EXIT_SBX;
    }
    /*
     * [volumes] Other providers ignore provider_options they do not know:
     * a -v that mounts nothing must not pass in silence.
     */
    if (o->volumes || o->cap_add || o->shm_size || o->network) {
        _cleanup_json_ json_t *cfg = json_loads(config, 0, NULL);
        void *it = json_object_iter(cfg);
        const char *name = it ? json_object_iter_key(it) : "";
        if (strcmp(name, "linux")) {
            sbx_spec_free(s);
            return cli_usage_error(cmd, "%s: only the linux provider mounts volumes, adds "
                                        "capabilities, sizes /dev/shm or chooses the box's "
                                        "network (provider %s)",
                                   o->volumes   ? "-v/--volume"
                                   : o->cap_add ? "--cap-add"
                                   : o->network ? "--network"
                                                : "--shm-size",
                                   name);
        }
    }
    if ((rc = apply_options(cmd, o, s, meta)) != CLI_EXIT_OK) {
        sbx_spec_free(s);
        return rc;
    }
    *config_json = steal_pointer(&config);
    *spec = s;
    return CLI_EXIT_OK;
}
