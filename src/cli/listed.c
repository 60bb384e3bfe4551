/*
 * Boxes as their providers list them (the box registry, provider ABI 2).
 * Every box of a provider that can list (for linux: every box of its state
 * directory, whoever made it: sbx create, sbx run, any program through the
 * library) shows in ls and can be reached by exec, cp, status and stop,
 * like the boxes `sbx create` recorded. Status, stop and gc go through the
 * provider's list, stop_id and gc: no agent connection, so they also work
 * for a box whose agent is gone. Providers that cannot list are reached
 * through their records (connect, then status or stop).
 *
 * Nothing here names a provider: what a provider can do is asked with
 * sbx_provider_supports().
 */
#include "cli/cli.h"

/* The provider the CLI lists when nothing names one: $SBX_PROVIDER or the default. */
static char *default_config(void)
{
    const char *name = getenv("SBX_PROVIDER");
    json_t *cfg = json_pack("{s:{}}", name && *name ? name : SBX_CLI_DEFAULT_PROVIDER);
    char *text = cfg ? sbx__json_dump(cfg) : NULL;
    json_decref(cfg);
    return text;
}

/*
 * One listing per provider config for the whole command, so `sbx ls` of N
 * boxes lists once, not N times. Keyed by the config text. A config whose
 * provider cannot list (or cannot be made) maps to null.
 */
static json_t *listings;
/* A provider's listing failed (a service down, say): what was listed is shown, the exit says so. */
static bool listing_failed;

bool cli_listing_failed(void) { return listing_failed; }

static json_t *listing_of(const char *config)
{
    if (!listings && !(listings = json_object()))
        return NULL;
    json_t *have = json_object_get(listings, config);
    if (have)
        return json_is_array(have) ? have : NULL;
    json_t *got = NULL;
    sbx_provider *p = NULL;
    if (sbx_provider_new(config, &p, NULL) == SBX_OK && sbx_provider_supports(p, "list")) {
        sbx_future *f = NULL;
        char *text = NULL;
        sbx_error *e = NULL;
        if (sbx_provider_list_async(p, NULL, &f, &e) == SBX_OK) {
            if (cli_wait(f, &e) == SBX_OK && sbx_future_take_string(f, &text, &e) == SBX_OK)
                got = json_loads(text, 0, NULL);
            sbx_future_free(f);
        }
        if (!got && e) {
            cli_error("listing boxes: %s", sbx_error_message(e));
            listing_failed = true;
        }
        sbx_error_free(e);
        free(text);
    }
    sbx_provider_free(p);
    json_object_set_new(listings, config, got ? got : json_null());
    return got;
}

static const json_t *listed_box(const char *config, const char *id)
{
    const json_t *all = listing_of(config);
    size_t i;
    json_t *b;
    json_array_foreach((json_t *)all, i, b)
    {
        if (!strcmp(json_string_value(json_object_get(b, "id")), id))
            return b;
    }
    return NULL;
}

static bool in_records(const json_t *records, const char *id)
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

int cli_listed_records(const json_t *skip, json_t **records, sbx_error **err)
{
    _cleanup_free_ char *config = default_config();
    if (!config)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_json_ json_t *cfg = json_loads(config, 0, NULL);
    const char *name = json_object_iter_key(json_object_iter(cfg));
    json_t *out = json_array();
    const json_t *all = listing_of(config);
    size_t i;
    json_t *b;
    json_array_foreach((json_t *)all, i, b)
    {
        const char *id = json_string_value(json_object_get(b, "id"));
        if (!out || (skip && in_records(skip, id)))
            continue;
        json_t *created = json_object_get(b, "created");
        json_t *expires = json_object_get(b, "expires_at");
        json_t *ttl = json_is_number(created) && json_is_number(expires)
                          ? json_real(json_number_value(expires) - json_number_value(created))
                          : json_null();
        json_t *desc = json_object_get(b, "descriptor");
        json_t *rec = json_pack("{s:s, s:s, s:O, s:o, s:O, s:{}, s:f, s:o, s:O, s:b}", "id", id,
                                "provider", name, "config", cfg, "descriptor",
                                json_is_object(desc) ? json_incref(desc)
                                                     : json_pack("{s:s}", "sandbox_id", id),
                                "labels", json_object_get(b, "labels"), "env", "created",
                                json_number_value(created), "ttl_s", ttl, "image",
                                json_object_get(b, "image"), "recorded", 0);
        if (rec)
            json_array_append_new(out, rec);
    }
    if (!out)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *records = out;
    return SBX_OK;
}

const char *cli_listed_status(const json_t *record)
{
    _cleanup_free_ char *config = cli_box_config(record);
    const char *id = cli_box_id(record);
    if (!config || !id || !listing_of(config))
        return NULL;
    const json_t *b = listed_box(config, id);
    /* A provider that lists every box it has does not have this one any more. */
    const char *st = b ? json_string_value(json_object_get(b, "status")) : "stopped";
    return st ? st : "unknown";
}

const json_t *cli_listed_ports(const json_t *record)
{
    _cleanup_free_ char *config = cli_box_config(record);
    const char *id = cli_box_id(record);
    if (!config || !id || !listing_of(config))
        return NULL;
    const json_t *b = listed_box(config, id);
    const json_t *s = b ? json_object_get(json_object_get(b, "provider"), "ports") : NULL;
    return json_is_array(s) ? s : NULL;
}

const json_t *cli_listed_service(const json_t *record)
{
    _cleanup_free_ char *config = cli_box_config(record);
    const char *id = cli_box_id(record);
    if (!config || !id || !listing_of(config))
        return NULL;
    const json_t *b = listed_box(config, id);
    const json_t *s = b ? json_object_get(json_object_get(b, "provider"), "service") : NULL;
    return json_is_object(s) ? s : NULL;
}

int cli_listed_stop(const json_t *record, sbx_error **err)
{
    _cleanup_free_ char *config = cli_box_config(record);
    const char *id = cli_box_id(record);
    if (!config || !id)
        return sbx__set_error(err, SBX_EINVAL, "box record is incomplete");
    sbx_provider *p = NULL;
    int rc = sbx_provider_new(config, &p, err);
    if (rc < 0)
        return rc;
    if (!sbx_provider_supports(p, "stop")) {
        sbx_provider_free(p);
        return SBX_ENOTSUP;
    }
    /* Not cli_wait: a stop, once asked, is seen through even after ^C. */
    rc = sbx_provider_stop_box(p, id, err);
    sbx_provider_free(p);
    return rc;
}

/*
 * Why the provider's gc removed `id`, by the rules gc collects by (its TTL
 * passed; with labels, they match; else nothing runs it any more), from the
 * listing taken before it. A box that listing saw running may have died
 * since (a race with gc, a stop): it was not collected for a label it does
 * not have, or without --label at all.
 */
static const char *gc_reason(const json_t *before, const char *id, const sbx_kv *labels,
                             double now)
{
    size_t i;
    json_t *b;
    json_array_foreach((json_t *)before, i, b)
    {
        if (strcmp(json_string_value(json_object_get(b, "id")), id) != 0)
            continue;
        json_t *exp = json_object_get(b, "expires_at");
        if (json_is_number(exp) && json_number_value(exp) <= now)
            return "ttl expired";
        if (labels->len && cli_box_matches(b, labels))
            return "label";
        break;
    }
    return "orphaned";
}

int cli_listed_gc(const struct cli_opts *opts, const json_t *done, json_t *out)
{
    _cleanup_free_ char *config = default_config();
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (!config || sbx_provider_new(config, &p, &e) < 0) {
        cli_sbx_error(e, "collecting boxes");
        return CLI_EXIT_FAIL;
    }
    if (!sbx_provider_supports(p, "gc")) {
        sbx_provider_free(p);
        return CLI_EXIT_OK;
    }
    json_t *labels = json_object();
    for (size_t i = 0; i < opts->labels.len; i++)
        json_object_set_new(labels, opts->labels.keys[i], json_string(opts->labels.values[i]));
    _cleanup_json_ json_t *req = json_pack("{s:o, s:b}", "labels", labels, "dry_run",
                                           opts->dry_run);
    _cleanup_free_ char *req_text = req ? sbx__json_dump(req) : NULL;
    const json_t *before = listing_of(config);
    char *text = NULL;
    sbx_future *f = NULL;
    int rc = req_text ? sbx_provider_gc_async(p, req_text, &f, &e) : SBX_ENOMEM;
    if (rc == SBX_OK) {
        /* Not cli_wait: a collection, once started, is seen through (it stops boxes). */
        rc = sbx_future_wait(f, -1, &e);
        if (rc == SBX_OK)
            rc = sbx_future_take_string(f, &text, &e);
        sbx_future_free(f);
    }
    sbx_provider_free(p);
    if (rc < 0) {
        cli_error("collecting boxes: %s", e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
        return CLI_EXIT_FAIL;
    }
    _cleanup_json_ json_t *removed = json_loads(text, 0, NULL);
    free(text);
    double now = cli_now();
    size_t i;
    json_t *v;
    json_array_foreach(removed, i, v)
    {
        const char *id = json_string_value(v);
        if (!id || json_object_get(done, id))
            continue;
        const char *reason = gc_reason(before, id, &opts->labels, now);
        /* The CLI may hold a record of it too (made under another config): drop it. */
        if (!opts->dry_run)
            cli_box_remove(id);
        if (opts->json)
            json_array_append_new(out, json_pack("{s:s, s:s, s:b}", "id", id, "reason", reason,
                                                 "removed", !opts->dry_run));
        else
            cli_gc_row(id, reason, opts->dry_run ? " (dry run)" : "");
    }
    return CLI_EXIT_OK;
}

int cli_die_with_creator(sbx_spec *spec, sbx_error **err)
{
    /* Providers ignore provider_options they do not know, as the reference does. */
    _cleanup_json_ json_t *po = json_loads(sbx_spec_provider_options(spec), 0, NULL);
    if (!json_is_object(po))
        return SBX_OK;
    json_object_set_new(po, "die_with_creator", json_true());
    _cleanup_free_ char *text = sbx__json_dump(po);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return sbx_spec_set_provider_options(spec, text, err);
}

char *cli_default_config(void) { return default_config(); }
