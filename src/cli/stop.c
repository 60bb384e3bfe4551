/* sbx stop and sbx gc: end boxes (recorded ones, and linux boxes) and forget them. */
#include "cli/cli.h"
#include "providers/linux/linux.h"

#include <getopt.h>

/*
 * Stops the box a record names through a connected handle (its descriptor
 * has the owner's scope, so stop ends the box), then removes the record.
 * A box the provider no longer knows (SBX_ENOENT) is forgotten too; with
 * `force`, the record goes whatever happened.
 */
static int stop_box(const json_t *rec, bool force, sbx_error **err)
{
    const char *id = json_string_value(json_object_get(rec, "id"));
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    /* A linux box is stopped through its shim: that works when its agent is gone too. */
    int rc = cli_is_linux(rec) ? cli_linux_stop(rec, err) : cli_box_connect(rec, &p, &sb, err);
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
    static const struct option longopts[] = {
        { "force", no_argument, NULL, 'f' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    bool force = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:hf", longopts, NULL)) != -1) {
        if (c == 'h') {
            cli_help("stop");
            return CLI_EXIT_OK;
        }
        if (c != 'f')
            return cli_bad_option("stop", c, argv);
        force = true;
    }
    if (optind >= argc)
        return cli_usage_error("stop", "no box ID given");
    cli_signals_install();
    int rc = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        sbx_error *e = NULL;
        _cleanup_json_ json_t *rec = NULL;
        if (cli_box_load(argv[i], &rec, &e) < 0) {
            if (rc == CLI_EXIT_OK)
                rc = sbx_error_code(e) == SBX_ENOENT ? CLI_EXIT_NOBOX : CLI_EXIT_USAGE;
            cli_sbx_error(e, "loading the box record");
            continue;
        }
        const char *id = json_string_value(json_object_get(rec, "id"));
        if (stop_box(rec, force, &e) < 0) {
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
    if (cli_is_linux(rec)) {
        const char *st = cli_linux_status(rec);
        *reachable = strcmp(st, "stopped") != 0;
        if (cli_box_expired(rec, now))
            return "ttl expired";
        return !strcmp(st, "stopped") || !strcmp(st, "error") ? st : NULL;
    }
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    sbx_status st = SBX_STATUS_UNKNOWN;
    int rc = cli_box_connect(rec, &p, &sb, &e);
    if (rc == SBX_OK) {
        rc = sbx_sandbox_status(sb, &st, &e);
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
    }
    sbx_error_free(e);
    *reachable = rc == SBX_OK;
    if (cli_box_expired(rec, now))
        return "ttl expired";
    if (rc < 0)
        return "unreachable";
    if (st == SBX_STATUS_STOPPED)
        return "stopped";
    if (st == SBX_STATUS_ERROR)
        return "error";
    return NULL;
}

/* Why linux gc removed a box, from what the listing said before. */
static const char *linux_reason(const sbx_linux_box_info *boxes, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(boxes[i].rec.id, id) != 0)
            continue;
        if (!boxes[i].shim_alive)
            return "orphaned";
        return boxes[i].expired ? "ttl expired" : "label";
    }
    return "orphaned";
}

/*
 * The linux half of gc: sbx__linux_gc over the default state directory
 * (orphans, expired boxes, and with labels every matching box). Ids already
 * handled through CLI records (in `done`) are not reported twice.
 */
static int gc_linux(const sbx_kv *labels, bool dry, bool json, const json_t *done, json_t *out)
{
    sbx_error *e = NULL;
    _cleanup_free_ char *sd = sbx__linux_state_dir(NULL);
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    char **removed = NULL;
    sbx_linux_gc_opts o = { .labels = labels->len ? labels : NULL, .dry_run = dry };
    if (!sd || sbx__linux_list(sd, NULL, &boxes, &n, &e) < 0 ||
        sbx__linux_gc(sd, &o, &removed, &e) < 0) {
        cli_error("collecting linux boxes in %s: %s", sd ? sd : "?",
                  e ? sbx_error_message(e) : "out of memory");
        sbx_error_free(e);
        sbx__linux_list_free(boxes, n);
        return CLI_EXIT_FAIL;
    }
    for (char **id = removed; id && *id; id++) {
        if (json_object_get(done, *id))
            continue;
        const char *reason = linux_reason(boxes, n, *id);
        /* The CLI may hold a record of it under another state directory name: drop it. */
        if (!dry)
            cli_box_remove(*id);
        if (json)
            json_array_append_new(out, json_pack("{s:s, s:s, s:b}", "id", *id, "reason", reason,
                                                 "removed", !dry));
        else
            printf("%s\t%s%s\n", *id, reason, dry ? " (dry run)" : "");
    }
    sbx_strv_free(removed);
    sbx__linux_list_free(boxes, n);
    return CLI_EXIT_OK;
}

int cli_cmd_gc(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "dry-run", no_argument, NULL, 'n' },
        { "json", no_argument, NULL, 2004 },
        { "label", required_argument, NULL, 1012 },
        { "run-id", required_argument, NULL, 1015 },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    bool dry = false, json = false;
    sbx_kv labels = { 0 };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:hn", longopts, NULL)) != -1) {
        _cleanup_free_ char *k = NULL;
        const char *v;
        switch (c) {
        case 'h': cli_help("gc"); sbx__kv_free(&labels); return CLI_EXIT_OK;
        case 'n': dry = true; break;
        case 2004: json = true; break;
        case 1012:
            if (cli_split_kv(optarg, &k, &v) < 0) {
                sbx__kv_free(&labels);
                return cli_usage_error("gc", "--label expects KEY=VALUE, got '%s'", optarg);
            }
            sbx__kv_set(&labels, k, v);
            break;
        /* The run id a box was labelled with: the same as --label run_id=R. */
        case 1015: sbx__kv_set(&labels, "run_id", optarg); break;
        default: sbx__kv_free(&labels); return cli_bad_option("gc", c, argv);
        }
    }
    if (optind < argc) {
        sbx__kv_free(&labels);
        return cli_usage_error("gc", "unexpected argument '%s'", argv[optind]);
    }
    sbx_error *e = NULL;
    _cleanup_json_ json_t *all = NULL;
    if (cli_box_list(&all, &e) < 0) {
        sbx__kv_free(&labels);
        cli_sbx_error(e, "listing boxes");
        return CLI_EXIT_SBX;
    }
    cli_signals_install();
    _cleanup_json_ json_t *out = json_array();
    _cleanup_json_ json_t *done = json_object();
    int rc = CLI_EXIT_OK;
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
        if (!reason && labels.len && cli_box_matches(rec, &labels))
            reason = "label";
        if (!reason)
            continue;
        const char *id = json_string_value(json_object_get(rec, "id"));
        json_object_set_new(done, id, json_true());
        bool removed = false;
        if (!dry) {
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
        if (json)
            json_array_append_new(out, json_pack("{s:s, s:s, s:b}", "id", id, "reason", reason,
                                                 "removed", removed));
        else
            printf("%s\t%s%s\n", id, reason, dry ? " (dry run)" : removed ? "" : " (kept)");
    }
    if (!cli_signal_received() && gc_linux(&labels, dry, json, done, out) != CLI_EXIT_OK)
        rc = CLI_EXIT_FAIL;
    sbx__kv_free(&labels);
    if (json && cli_print_json(out) < 0)
        return CLI_EXIT_FAIL;
    return rc;
}
