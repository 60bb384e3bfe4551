/*
 * The linux provider's boxes as the CLI sees them. Every linux box, whoever
 * made it (sbx create, sbx run, or any program through the library), has a
 * directory in the provider's state directory; the CLI turns each one it
 * has no record of into a record of its own shape, so ls, exec, cp, status
 * and stop handle them like the boxes `sbx create` recorded. Status, stop
 * and gc of linux boxes go straight to the state directory (no agent
 * connection): that also works for a box whose agent or shim is gone.
 */
#include "cli/cli.h"
#include "providers/linux/linux.h"

#include <sys/stat.h>

bool cli_is_linux(const json_t *record)
{
    const char *p = json_string_value(json_object_get(record, "provider"));
    return p && !strcmp(p, "linux");
}

char *cli_linux_state_dir(const json_t *record)
{
    const char *sd =
        json_string_value(json_object_get(json_object_get(record, "descriptor"), "state_dir"));
    if (sd && *sd)
        return strdup(sd);
    json_t *cfg = json_object_get(json_object_get(record, "config"), "linux");
    return sbx__linux_state_dir(json_string_value(json_object_get(cfg, "state_dir")));
}

/* The box's metadata as CLI labels: string values, anything else as JSON text. */
static json_t *labels_of(const json_t *metadata)
{
    json_t *labels = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)metadata, k, v)
    {
        if (json_is_string(v)) {
            json_object_set(labels, k, v);
        } else {
            char *text = sbx__json_dump(v);
            json_object_set_new(labels, k, json_string(text ? text : ""));
            free(text);
        }
    }
    return labels;
}

static bool listed(const json_t *records, const char *id)
{
    size_t i;
    json_t *r;
    json_array_foreach((json_t *)records, i, r)
    {
        const char *rid = cli_box_id(r);
        if (rid && !strcmp(rid, id))
            return true;
    }
    return false;
}

int cli_linux_records(const json_t *skip, json_t **records, sbx_error **err)
{
    _cleanup_free_ char *sd = sbx__linux_state_dir(NULL);
    if (!sd)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    int rc = sbx__linux_list(sd, NULL, &boxes, &n, err);
    if (rc < 0)
        return rc;
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++) {
        const sbx_linux_record *r = &boxes[i].rec;
        if (skip && listed(skip, r->id))
            continue;
        /* A box whose shim has not written its record yet: its directory's age. */
        double created = r->created;
        struct stat st;
        if (created <= 0 && stat(r->box_dir, &st) == 0)
            created = (double)st.st_mtime;
        json_t *rec =
            json_pack("{s:s, s:s, s:{s:{}}, s:{s:s, s:s}, s:o, s:{}, s:f, s:o, s:o, s:b}", "id",
                      r->id, "provider", "linux", "config", "linux", "descriptor", "sandbox_id",
                      r->id, "state_dir", sd, "labels", labels_of(r->metadata), "env", "created",
                      created, "ttl_s", r->ttl_s >= 0 ? json_real(r->ttl_s) : json_null(),
                      "image", r->image ? json_string(r->image) : json_null(), "recorded", 0);
        /* The box's workdir: a connected handle's default cwd, as for its creator. */
        if (rec && r->workdir)
            json_object_set_new(json_object_get(rec, "descriptor"), "workdir",
                                json_string(r->workdir));
        if (rec)
            json_array_append_new(out, rec);
    }
    sbx__linux_list_free(boxes, n);
    if (!out)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *records = out;
    return SBX_OK;
}

const char *cli_linux_status(const json_t *record)
{
    _cleanup_free_ char *sd = cli_linux_state_dir(record);
    const char *id = cli_box_id(record);
    _cleanup_free_ char *dir = sd && id ? sbx__printf("%s/boxes/%s", sd, id) : NULL;
    struct stat st;
    if (!dir || stat(dir, &st) < 0)
        return "stopped";
    sbx_linux_record rec;
    /* The shim writes its record within milliseconds of making the directory. */
    if (sbx__linux_record_read(dir, &rec, NULL) < 0)
        return "starting";
    const char *status;
    if (!sbx__linux_shim_alive(&rec) || !rec.state || !strcmp(rec.state, "error"))
        status = "error";
    else if (!strcmp(rec.state, "running"))
        status = "running";
    else
        status = "starting";
    sbx__linux_record_free(&rec);
    return status;
}

int cli_linux_stop(const json_t *record, sbx_error **err)
{
    _cleanup_free_ char *sd = cli_linux_state_dir(record);
    const char *id = cli_box_id(record);
    if (!sd || !id)
        return sbx__set_error(err, SBX_EINVAL, "box record is incomplete");
    /* The provider config's stop timeout, as a stop through the provider would use. */
    json_t *t = json_object_get(json_object_get(json_object_get(record, "config"), "linux"),
                                "stop_timeout_s");
    double timeout = json_is_number(t) && json_number_value(t) > 0 ? json_number_value(t) : 10;
    return sbx__linux_stop_box(sd, id, timeout, err);
}

int cli_linux_die_with_creator(const char *config, sbx_spec *spec, sbx_error **err)
{
    _cleanup_json_ json_t *cfg = json_loads(config ? config : "{}", 0, NULL);
    if (!json_object_get(cfg, "linux"))
        return SBX_OK;
    _cleanup_json_ json_t *po = json_loads(sbx_spec_provider_options(spec), 0, NULL);
    if (!json_is_object(po))
        return SBX_OK;
    json_object_set_new(po, "die_with_creator", json_true());
    _cleanup_free_ char *text = sbx__json_dump(po);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return sbx_spec_set_provider_options(spec, text, err);
}
