/*
 * The CLI's records of the boxes `sbx create` made: one JSON file per box in
 * <state dir>/boxes/<id>.json, enough for another sbx process to reconnect
 * (the provider config and the sandbox descriptor), list and collect it.
 */
#include "cli/cli.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cli_boxes_dir(char **out, sbx_error **err)
{
    const char *env = getenv("SBX_STATE_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    _cleanup_free_ char *base = NULL;
    if (env && *env)
        base = strdup(env);
    else if (geteuid() == 0)
        base = strdup("/run/sbx");
    else if (xdg && *xdg)
        base = sbx__printf("%s/sbx", xdg);
    else
        base = sbx__printf("/tmp/sbx-%u", (unsigned)geteuid());
    char *dir = base ? sbx__printf("%s/boxes", base) : NULL;
    if (!dir)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /*
     * 0700, and checked: records hold descriptors that grant control of the
     * boxes and the env of every exec. A directory another user made (say
     * /tmp/sbx-<uid> before us) or can write is refused, with what to do.
     */
    int rc = base && base[0] != '/'
                 ? sbx__set_error(err, SBX_EINVAL,
                                  "SBX_STATE_DIR '%s' must be an absolute path", base)
                 : sbx__private_dir(base, true, NULL, err);
    if (rc == SBX_OK)
        rc = sbx__private_dir(dir, true, NULL, err);
    if (rc < 0) {
        free(dir);
        return rc;
    }
    *out = dir;
    return SBX_OK;
}

/* An id becomes a file name: refuse anything that could leave the directory. */
static bool safe_id(const char *id)
{
    return *id && *id != '.' && !strchr(id, '/') && strlen(id) < 200;
}

static char *record_path(const char *dir, const char *id)
{
    return sbx__printf("%s/%s.json", dir, id);
}

int cli_box_save(const char *id, const char *config_json, const char *descriptor_json,
                 const sbx_kv *labels, const sbx_spec *spec, json_t **record_out, sbx_error **err)
{
    if (!safe_id(id))
        return sbx__set_error(err, SBX_EINVAL, "the provider returned an unusable box id '%s'", id);
    _cleanup_free_ char *dir = NULL;
    int rc = cli_boxes_dir(&dir, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *config = json_loads(config_json, 0, NULL);
    _cleanup_json_ json_t *desc = json_loads(descriptor_json, 0, NULL);
    if (!config || !desc)
        return sbx__set_error(err, SBX_EPROTO, "the provider config or descriptor is not JSON");
    _cleanup_json_ json_t *lab = json_object();
    for (size_t i = 0; i < labels->len; i++)
        json_object_set_new(lab, labels->keys[i], json_string(labels->values[i]));
    /* The spec's env: a connected handle does not know it, so exec passes it each time. */
    _cleanup_json_ json_t *env = json_object();
    for (size_t i = 0; i < spec->env.len; i++)
        json_object_set_new(env, spec->env.keys[i], json_string(spec->env.values[i]));
    const char *provider = json_object_iter_key(json_object_iter(config));
    const char *image = sbx_spec_image(spec);
    _cleanup_json_ json_t *rec =
        json_pack("{s:s, s:s?, s:O, s:O, s:O, s:O, s:f, s:o, s:o}", "id", id, "provider", provider,
                  "config", config, "descriptor", desc, "labels", lab, "env", env, "created",
                  cli_now(), "ttl_s", spec->ttl_s >= 0 ? json_real(spec->ttl_s) : json_null(),
                  "image", image ? json_string(image) : json_null());
    _cleanup_free_ char *text = rec ? json_dumps(rec, JSON_INDENT(2)) : NULL;
    _cleanup_free_ char *path = record_path(dir, id);
    if (!text || !path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx__write_file_atomic(path, text, strlen(text), 0600) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot write %s", path);
    if (record_out)
        *record_out = json_incref(rec);
    return SBX_OK;
}

/* A record is read only if it is the caller's own, not a link, not writable by others. */
static int load_path(const char *path, json_t **out)
{
    json_t *v = NULL;
    if (sbx__load_private_json(path, SBX_RECORD_MAX, &v, NULL) < 0)
        return -1;
    if (!json_is_object(v) || !json_is_string(json_object_get(v, "id"))) {
        json_decref(v);
        return -1;
    }
    *out = v;
    return 0;
}

static int by_created(const void *a, const void *b)
{
    double x = json_number_value(json_object_get(*(json_t *const *)a, "created"));
    double y = json_number_value(json_object_get(*(json_t *const *)b, "created"));
    return x < y ? -1 : x > y;
}

int cli_box_list(json_t **records, sbx_error **err)
{
    _cleanup_free_ char *dir = NULL;
    int rc = cli_boxes_dir(&dir, err);
    if (rc < 0)
        return rc;
    DIR *d = opendir(dir);
    if (!d)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot read %s", dir);
    json_t **items = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        /* Only finished records: temp files of atomic writes end otherwise. */
        if (de->d_name[0] == '.' || len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        _cleanup_free_ char *path = sbx__printf("%s/%s", dir, de->d_name);
        json_t *v;
        if (!path || load_path(path, &v) < 0)
            continue;
        json_t **grown = realloc(items, (n + 1) * sizeof(*items));
        if (!grown) {
            json_decref(v);
            break;
        }
        items = grown;
        items[n++] = v;
    }
    closedir(d);
    if (n)
        qsort(items, n, sizeof(*items), by_created);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, items[i]);
    free(items);
    *records = arr;
    return SBX_OK;
}

int cli_box_list_all(json_t **records, sbx_error **err)
{
    json_t *all = NULL;
    int rc = cli_box_list(&all, err);
    if (rc < 0)
        return rc;
    /* Records made by `sbx create` win: they hold the env and the provider config. */
    json_t *lin = NULL;
    if ((rc = cli_listed_records(all, &lin, err)) < 0) {
        json_decref(all);
        return rc;
    }
    json_array_extend(all, lin);
    json_decref(lin);
    size_t n = json_array_size(all);
    json_t **items = calloc(n ? n : 1, sizeof(*items));
    if (!items) {
        json_decref(all);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        items[i] = json_incref(json_array_get(all, i));
    json_decref(all);
    qsort(items, n, sizeof(*items), by_created);
    all = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(all, items[i]);
    free(items);
    *records = all;
    return SBX_OK;
}

int cli_box_load(const char *id, json_t **record, sbx_error **err)
{
    _cleanup_json_ json_t *all = NULL;
    return cli_box_load_cached(id, &all, record, err);
}

int cli_box_load_cached(const char *id, json_t **cache, json_t **record, sbx_error **err)
{
    _cleanup_free_ char *dir = NULL;
    int rc = cli_boxes_dir(&dir, err);
    if (rc < 0)
        return rc;
    if (safe_id(id)) {
        _cleanup_free_ char *path = record_path(dir, id);
        if (path && load_path(path, record) == 0)
            return SBX_OK;
    }
    /*
     * Then every box sbx can see (linux boxes made by any process included):
     * the exact id, or a unique prefix of one, as with container ids. Listed
     * once per cache: `sbx stop` of thousands of ids listed them all for each.
     */
    if (!*cache && (rc = cli_box_list_all(cache, err)) < 0)
        return rc;
    json_t *all = *cache;
    json_t *found = NULL, *named = NULL;
    size_t i, matches = 0;
    json_t *r;
    json_array_foreach(all, i, r)
    {
        const char *rid = cli_box_id(r);
        if (!strcmp(rid, id)) {
            *record = json_incref(r);
            return SBX_OK;
        }
        /* `create --name`'s label: a name, as Docker's, comes before a prefix of an id. */
        const char *name = json_string_value(json_object_get(json_object_get(r, "labels"), "name"));
        if (name && !strcmp(name, id))
            named = r;
        if (*id && !strncmp(rid, id, strlen(id))) {
            found = r;
            matches++;
        }
    }
    if (named) {
        *record = json_incref(named);
        return SBX_OK;
    }
    if (matches == 1) {
        *record = json_incref(found);
        return SBX_OK;
    }
    if (matches > 1)
        return sbx__set_error(err, SBX_EINVAL, "'%s' matches %zu boxes; give more of the id", id,
                              matches);
    return sbx__set_error(err, SBX_ENOENT,
                          "no such box: '%s' (see 'sbx ls'; 'sbx create' records boxes in %s, "
                          "and the default provider lists its own)",
                          id, dir);
}

int cli_box_find(const char *id, json_t **record)
{
    _cleanup_json_ json_t *all = NULL;
    return cli_box_find_cached(id, &all, record);
}

int cli_box_find_cached(const char *id, json_t **cache, json_t **record)
{
    sbx_error *e = NULL;
    if (cli_box_load_cached(id, cache, record, &e) == SBX_OK)
        return CLI_EXIT_OK;
    int code = sbx_error_code(e);
    /* An ambiguous prefix is the user's to fix; a state directory refused is sbx's failure. */
    int rc = code == SBX_ENOENT  ? CLI_EXIT_NOBOX
             : code == SBX_EINVAL ? CLI_EXIT_USAGE
                                  : CLI_EXIT_SBX;
    cli_sbx_error(e, "loading the box record");
    return rc;
}

bool cli_parse_box_ids(const char *cmd, int argc, char **argv, unsigned takes, bool one_id,
                       struct cli_opts *o, int *exit_code)
{
    if (!cli_parse_opts(cmd, argc, argv, takes, o, exit_code))
        return false;
    if (optind >= argc)
        *exit_code = cli_usage_error(cmd, "no box ID given");
    else if (one_id && optind + 1 < argc)
        *exit_code = cli_usage_error(cmd, "expected one box ID, got %d", argc - optind);
    else
        return true;
    cli_opts_free(o);
    return false;
}

int cli_box_records(bool all, json_t **records)
{
    sbx_error *e = NULL;
    if ((all ? cli_box_list_all(records, &e) : cli_box_list(records, &e)) == SBX_OK)
        return CLI_EXIT_OK;
    cli_sbx_error(e, "listing boxes");
    return CLI_EXIT_SBX;
}

const char *cli_box_id(const json_t *record)
{
    return json_string_value(json_object_get(record, "id"));
}

int cli_box_sweep_temps(void)
{
    _cleanup_free_ char *dir = NULL;
    if (cli_boxes_dir(&dir, NULL) < 0)
        return 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        /* <id>.json.tmp.<pid>[.<random>]: sbx__write_file_atomic's, before its rename. */
        const char *t = strstr(de->d_name, ".json.tmp.");
        if (!t || de->d_name[0] == '.')
            continue;
        char *end;
        long pid = strtol(t + 10, &end, 10);
        if (end == t + 10 || pid <= 0 || (*end && *end != '.'))
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its writer may still be at it */
        if (unlinkat(dirfd(d), de->d_name, 0) == 0)
            n++;
    }
    closedir(d);
    return n;
}

int cli_box_remove(const char *id)
{
    _cleanup_free_ char *dir = NULL;
    if (!safe_id(id) || cli_boxes_dir(&dir, NULL) < 0)
        return -1;
    _cleanup_free_ char *path = record_path(dir, id);
    if (!path)
        return -1;
    return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

char *cli_box_config(const json_t *record)
{
    return sbx__json_dump(json_object_get(record, "config"));
}

char *cli_box_descriptor(const json_t *record)
{
    return sbx__json_dump(json_object_get(record, "descriptor"));
}

bool cli_box_matches(const json_t *record, const sbx_kv *filter)
{
    json_t *labels = json_object_get(record, "labels");
    for (size_t i = 0; i < filter->len; i++) {
        const char *v = json_string_value(json_object_get(labels, filter->keys[i]));
        if (!v || strcmp(v, filter->values[i]) != 0)
            return false;
    }
    return true;
}

bool cli_box_expired(const json_t *record, double now)
{
    json_t *ttl = json_object_get(record, "ttl_s");
    if (!json_is_number(ttl))
        return false;
    return json_number_value(json_object_get(record, "created")) + json_number_value(ttl) <= now;
}

int cli_box_connect(const json_t *record, sbx_provider **p, sbx_sandbox **sb, sbx_error **err)
{
    _cleanup_free_ char *config = cli_box_config(record);
    _cleanup_free_ char *desc = cli_box_descriptor(record);
    if (!config || !desc)
        return sbx__set_error(err, SBX_EINVAL, "box record %s is incomplete", cli_box_id(record));
    sbx_provider *prov = NULL;
    int rc = sbx_provider_new(config, &prov, err);
    if (rc < 0)
        return rc;
    sbx_sandbox *s = NULL;
    sbx_future *f = NULL;
    if ((rc = sbx_sandbox_connect_async(prov, desc, &f, err)) == SBX_OK) {
        rc = cli_wait(f, err);
        if (rc == SBX_OK)
            rc = sbx_future_take_sandbox(f, &s, err);
        sbx_future_free(f);
    }
    if (rc < 0) {
        sbx_provider_free(prov);
        return rc;
    }
    *p = prov;
    *sb = s;
    return SBX_OK;
}

int cli_box_start(sbx_provider *p, const sbx_spec *spec, sbx_sandbox **sb, sbx_error **err)
{
    sbx_future *f = NULL;
    int rc = sbx_sandbox_new(p, spec, sb, err);
    if (rc == SBX_OK && (rc = sbx_sandbox_start_async(*sb, NULL, &f, err)) == SBX_OK) {
        /* A pull the start makes shows its bars on a terminal, as `sbx image pull` does. */
        struct cli_pull_view *v = cli_pull_view_new();
        if (v)
            sbx_future_on_progress(f, cli_pull_view_progress, v);
        rc = cli_wait(f, err);
        sbx_future_free(f);
        cli_pull_view_free(v);
    }
    return rc;
}

int cli_box_open(const char *cmd, const char *id, sbx_provider **p, sbx_sandbox **sb)
{
    _cleanup_json_ json_t *rec = NULL;
    int rc = cli_box_find(id, &rec);
    if (rc != CLI_EXIT_OK)
        return rc;
    sbx_error *e = NULL;
    if (cli_box_connect(rec, p, sb, &e) < 0) {
        int code = sbx_error_code(e) == SBX_ENOENT ? CLI_EXIT_NOBOX : CLI_EXIT_SBX;
        cli_sbx_error(e, cmd);
        return code;
    }
    return CLI_EXIT_OK;
}
