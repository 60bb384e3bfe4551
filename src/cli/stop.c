/* sbx stop and sbx gc: end boxes (recorded ones, and listed ones) and forget them. */
#include "cli/cli.h"

/*
 * Stops the box a record names through a connected handle (its descriptor
 * has the owner's scope, so stop ends the box), then removes the record.
 * A box the provider no longer knows (SBX_ENOENT) is forgotten too; with
 * `force`, the record goes whatever happened.
 */
static int stop_box(const json_t *rec, bool force, sbx_error **err)
{
    const char *id = cli_box_id(rec);
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    /*
     * By id through the provider when it can (for linux: through the box's
     * shim, which works when its agent is gone too), else through a handle.
     */
    int rc = cli_listed_stop(rec, err);
    if (rc == SBX_ENOTSUP)
        rc = cli_box_connect(rec, &p, &sb, err);
    if (rc == SBX_OK && sb) {
        sbx_future *f = NULL;
        if ((rc = sbx_sandbox_stop_async(sb, &f, err)) == SBX_OK) {
            /* Not cli_wait: a stop, once asked, is seen through even after ^C. */
            rc = sbx_future_wait(f, -1, err);
            sbx_future_free(f);
        }
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
    }
    if (rc == SBX_OK || rc == SBX_ENOENT || force) {
        if (cli_box_remove(id) < 0 && rc == SBX_OK)
            return sbx__set_errno(err, SBX_EIO, errno, "box %s stopped, but removing its record "
                                                       "failed", id);
        if (rc == SBX_ENOENT && err) {
            sbx_error_free(*err);
            *err = NULL;
        }
        return SBX_OK;
    }
    return rc;
}

int cli_cmd_stop(int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_box_ids("stop", argc, argv, CLI_TAKES_FORCE, false, &o, &rc))
        return rc;
    cli_signals_install();
    rc = CLI_EXIT_OK;
    _cleanup_json_ json_t *listed = NULL; /* every box, listed once if an id needs it */
    for (int i = optind; i < argc; i++) {
        _cleanup_json_ json_t *rec = NULL;
        int found = cli_box_find_cached(argv[i], &listed, &rec);
        if (found != CLI_EXIT_OK) {
            if (rc == CLI_EXIT_OK)
                rc = found;
            continue;
        }
        sbx_error *e = NULL;
        const char *id = cli_box_id(rec);
        if (stop_box(rec, o.force, &e) < 0) {
            cli_error("stopping box %s failed: %s (retry, or forget it with 'sbx stop --force')",
                      id, e ? sbx_error_message(e) : "unknown error");
            sbx_error_free(e);
            if (rc == CLI_EXIT_OK)
                rc = CLI_EXIT_SBX;
            continue;
        }
        printf("%s\n", id);
    }
    return rc;
}

/*
 * Why gc collects a record, or NULL to keep it. `reachable` says whether the
 * box answered a status call (a box that does not cannot be stopped).
 */
static const char *gc_reason(const json_t *rec, double now, bool *reachable)
{
    const char *st = cli_listed_status(rec);
    if (st) {
        *reachable = strcmp(st, "stopped") != 0;
        if (cli_box_expired(rec, now))
            return "ttl expired";
        return !strcmp(st, "stopped") || !strcmp(st, "error") ? st : NULL;
    }
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    sbx_status status = SBX_STATUS_UNKNOWN;
    int rc = cli_box_connect(rec, &p, &sb, &e);
    if (rc == SBX_OK) {
        rc = sbx_sandbox_status(sb, &status, &e);
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
    }
    sbx_error_free(e);
    *reachable = rc == SBX_OK;
    if (cli_box_expired(rec, now))
        return "ttl expired";
    if (rc < 0)
        return "unreachable";
    if (status == SBX_STATUS_STOPPED)
        return "stopped";
    if (status == SBX_STATUS_ERROR)
        return "error";
    return NULL;
}

void cli_gc_row(const char *id, const char *reason, const char *note)
{
    /* A header over the first row only: a gc with nothing to do prints nothing. */
    static bool headed;
    if (!headed)
        printf("BOX\tREASON\n");
    headed = true;
    printf("%s\t%s%s\n", id, reason, note);
}

int cli_cmd_gc(int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    unsigned takes = CLI_TAKES_DRY_RUN | CLI_TAKES_JSON | CLI_TAKES_LABEL | CLI_TAKES_RUN_ID |
                     CLI_NO_OPERANDS;
    if (!cli_parse_opts("gc", argc, argv, takes, &o, &rc))
        return rc;
    _cleanup_json_ json_t *all = NULL;
    if ((rc = cli_box_records(false, &all)) != CLI_EXIT_OK)
        return rc;
    sbx_error *e = NULL;
    cli_signals_install();
    _cleanup_json_ json_t *out = json_array();
    _cleanup_json_ json_t *done = json_object();
    rc = CLI_EXIT_OK;
    double now = cli_now();
    size_t i;
    json_t *rec;
    json_array_foreach(all, i, rec)
    {
        if (cli_signal_received())
            break;
        bool reachable;
        const char *reason = gc_reason(rec, now, &reachable);
        /* With labels, every matching box goes (a crashed run's boxes, for one). */
        if (!reason && o.labels.len && cli_box_matches(rec, &o.labels))
            reason = "label";
        if (!reason)
            continue;
        const char *id = cli_box_id(rec);
        json_object_set_new(done, id, json_true());
        bool removed = false;
        if (!o.dry_run) {
            /* A box that no longer answers cannot be stopped: forget it all the same. */
            bool alive = reachable && (!strcmp(reason, "ttl expired") || !strcmp(reason, "label"));
            if (stop_box(rec, !alive, &e) < 0) {
                cli_error("stopping box %s failed: %s", id,
                          e ? sbx_error_message(e) : "unknown error");
                rc = CLI_EXIT_FAIL;
            } else {
                removed = true;
            }
            sbx_error_free(e);
            e = NULL;
        }
        if (o.json)
            json_array_append_new(out, json_pack("{s:s, s:s, s:b}", "id", id, "reason", reason,
                                                 "removed", removed));
        else
            cli_gc_row(id, reason, o.dry_run ? " (dry run)" : removed ? "" : " (kept)");
    }
    if (!cli_signal_received() && cli_listed_gc(&o, done, out) != CLI_EXIT_OK)
        rc = CLI_EXIT_FAIL;
    /* Half-written records of creates that were killed. */
    if (!o.dry_run && !cli_signal_received())
        cli_box_sweep_temps();
    if (o.json && cli_print_json(out) < 0)
        return CLI_EXIT_FAIL;
    return rc;
}
