/*
 * sbx ls and sbx status: the recorded boxes, and the boxes the default
 * provider lists (every linux box of its state directory), with their live
 * status.
 */
#include "cli/cli.h"

#include <time.h>

/*
 * The live status of a recorded box: a status name, or "unreachable" when
 * its provider cannot be made or the box cannot be connected to or asked
 * (`why` then says why; caller frees).
 */
static const char *live_status(const json_t *rec, char **why)
{
    *why = NULL;
    /* A provider that lists its boxes knows their state: no connection (a dead agent says "error"). */
    const char *listed = cli_listed_status(rec);
    if (listed)
        return listed;
    sbx_provider *p = NULL;
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    sbx_status st = SBX_STATUS_UNKNOWN;
    int rc = cli_box_connect(rec, &p, &sb, &e);
    if (rc == SBX_OK) {
        sbx_future *f = NULL;
        if ((rc = sbx_sandbox_status_async(sb, &f, &e)) == SBX_OK) {
            rc = cli_wait(f, &e);
            if (rc == SBX_OK)
                rc = sbx_future_take_status(f, &st, &e);
            sbx_future_free(f);
        }
        sbx_sandbox_free(sb);
        sbx_provider_free(p);
    }
    if (rc < 0) {
        *why = strdup(e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
        return "unreachable";
    }
    *why = NULL;
    return sbx_status_name(st);
}

/*
 * [svc-logs] What ls and status print for a box whose service ended:
 * "exited(N)" or "killed(SIG)" (the API's status is "stopped"; the box
 * still runs commands). Else `status` itself.
 */
static const char *shown_status(const json_t *rec, const char *status, char *buf, size_t len)
{
    const json_t *svc = strcmp(status, "stopped") ? NULL : cli_listed_service(rec);
    const char *st = json_string_value(json_object_get(svc, "state"));
    if (!st || !strcmp(st, "running"))
        return status;
    snprintf(buf, len, "%s(%d)", st, (int)json_integer_value(json_object_get(svc, "code")));
    return buf;
}

/* The record plus its status (and the reason when unreachable), for --json. */
static json_t *with_status(const json_t *rec, const char *status, const char *why)
{
    json_t *o = json_deep_copy(rec);
    json_object_set_new(o, "status", json_string(status));
    /* false for a box its provider listed that the CLI has no record of. */
    if (!json_object_get(o, "recorded"))
        json_object_set_new(o, "recorded", json_true());
    if (why)
        json_object_set_new(o, "error", json_string(why));
    /* [svc-logs] The service's state and exit code, when the provider lists it. */
    const json_t *svc = cli_listed_service(rec);
    if (svc)
        json_object_set_new(o, "service", json_deep_copy(svc));
    /* [endpoint] The published ports, when the provider lists them. */
    const json_t *ports = cli_listed_ports(rec);
    if (ports)
        json_object_set_new(o, "published", json_deep_copy(ports));
    json_t *ttl = json_object_get(rec, "ttl_s");
    json_object_set_new(o, "expires",
                        json_is_number(ttl) ? json_real(json_number_value(json_object_get(
                                                            rec, "created")) +
                                                        json_number_value(ttl))
                                            : json_null());
    return o;
}

static void format_age(double seconds, char *buf, size_t n)
{
    long s = seconds < 0 ? 0 : (long)seconds;
    if (s < 120)
        snprintf(buf, n, "%lds", s);
    else if (s < 7200)
        snprintf(buf, n, "%ldm", s / 60);
    else if (s < 172800)
        snprintf(buf, n, "%ldh", s / 3600);
    else
        snprintf(buf, n, "%ldd", s / 86400);
}

static char *labels_text(const json_t *rec)
{
    sbx_buf b = { 0 };
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(rec, "labels"), k, v)
    {
        /* [term] A row per box: a label's controls are shown, never obeyed (term.c). */
        _cleanup_free_ char *fk = cli_field(k);
        _cleanup_free_ char *fv = cli_field(json_string_value(v));
        sbx__buf_printf(&b, "%s%s=%s", b.len ? "," : "", fk, fv);
    }
    return b.data ? b.data : strdup("");
}

/*
 * [endpoint] PORTS, as docker ps shows them: "ADDR:HOSTPORT->PORT" for each
 * port the box publishes (its provider's listing says), else the ports it
 * declares ("PORT"), comma-separated; NULL for none.
 */
static char *ports_text(const json_t *rec)
{
    sbx_buf b = {0};
    const json_t *pub = cli_listed_ports(rec);
    size_t i;
    json_t *p;
    json_array_foreach((json_t *)pub, i, p)
    {
        json_t *port = json_object_get(p, "port"), *hp = json_object_get(p, "host_port");
        const char *ip = json_string_value(json_object_get(p, "host_ip"));
        if (!json_is_integer(port))
            continue;
        if (b.len)
            sbx__buf_append(&b, ", ", 2);
        if (json_is_integer(hp))
            sbx__buf_printf(&b, "%s:%lld->%lld", ip ? ip : "", (long long)json_integer_value(hp),
                            (long long)json_integer_value(port));
        else
            sbx__buf_printf(&b, "%lld", (long long)json_integer_value(port));
    }
    if (!b.len) {
        json_array_foreach(json_object_get(json_object_get(rec, "descriptor"), "ports"), i, p)
        {
            if (!json_is_integer(p))
                continue;
            if (b.len)
                sbx__buf_append(&b, ", ", 2);
            sbx__buf_printf(&b, "%lld", (long long)json_integer_value(p));
        }
    }
    if (!b.len) {
        sbx__buf_free(&b);
        return NULL;
    }
    /* What the provider says is outside input: printed as cli_field prints any. */
    char *out = cli_field(b.data);
    sbx__buf_free(&b);
    return out;
}

int cli_cmd_ls(int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    /* -a (docker ps -a) is accepted: stopped boxes are listed anyway, until gc forgets them. */
    unsigned takes =
        CLI_TAKES_LABEL | CLI_TAKES_JSON | CLI_TAKES_QUIET | CLI_TAKES_ALL | CLI_NO_OPERANDS;
    if (!cli_parse_opts("ls", argc, argv, takes, &o, &rc))
        return rc;
    _cleanup_json_ json_t *all = NULL;
    if ((rc = cli_box_records(true, &all)) != CLI_EXIT_OK)
        return rc;
    cli_signals_install();
    _cleanup_json_ json_t *out = json_array();
    size_t i;
    json_t *rec;
    double now = cli_now();
    /* The ID column as wide as the longest id (sbx's are 16), not a fixed 40. */
    int idw = 16;
    json_array_foreach(all, i, rec)
    {
        int len = (int)strlen(cli_box_id(rec));
        idw = len > idw ? (len < 64 ? len : 64) : idw;
    }
    if (!o.json && !o.quiet)
        printf("%-*s %-10s %-20s %-12s %-6s %-8s %-22s %s\n", idw, "ID", "PROVIDER", "IMAGE",
               "STATUS", "AGE", "TTL", "PORTS", "LABELS");
    json_array_foreach(all, i, rec)
    {
        if (!cli_box_matches(rec, &o.labels))
            continue;
        const char *id = cli_box_id(rec);
        if (o.quiet) {
            printf("%s\n", id);
            continue;
        }
        _cleanup_free_ char *why = NULL;
        const char *status = live_status(rec, &why);
        if (o.json) {
            json_array_append_new(out, with_status(rec, status, why));
            continue;
        }
        char age[32], ttl[32] = "-";
        format_age(now - json_number_value(json_object_get(rec, "created")), age, sizeof(age));
        json_t *t = json_object_get(rec, "ttl_s");
        if (json_is_number(t))
            sbx__fmt_g(json_number_value(t), ttl, sizeof(ttl));
        _cleanup_free_ char *labels = labels_text(rec);
        const char *prov = json_string_value(json_object_get(rec, "provider"));
        char sbuf[32];
        status = shown_status(rec, status, sbuf, sizeof(sbuf));
        _cleanup_free_ char *fid = cli_field(id);
        _cleanup_free_ char *fprov = cli_field(prov ? prov : "?");
        /* The image as created (none: the host's directories); a long one keeps its end. */
        const char *img = json_string_value(json_object_get(rec, "image"));
        _cleanup_free_ char *fimg = cli_field(img ? img : "-");
        size_t il = fimg ? strlen(fimg) : 0;
        const char *shown_img = !fimg ? "-" : il > 20 ? fimg + il - 19 : fimg;
        _cleanup_free_ char *ports = ports_text(rec);
        printf("%-*s %-10s %s%-*s %-12s %-6s %-8s %-22s %s\n", idw, fid, fprov, il > 20 ? "~" : "",
               il > 20 ? 19 : 20, shown_img, status, age, ttl, ports ? ports : "-",
               labels ? labels : "");
    }
    if (o.json && cli_print_json(out) < 0)
        return CLI_EXIT_FAIL;
    /* What could be listed is printed; a provider that could not answer fails the command. */
    return cli_listing_failed() ? CLI_EXIT_SBX : CLI_EXIT_OK;
}

/*
 * `sbx inspect ID...`: what `status --json` prints, for each box, in one
 * JSON array (as `docker inspect`). A box that is not found is said on
 * stderr and makes the exit 3; the others are still printed.
 */
int cli_cmd_inspect(int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_box_ids("inspect", argc, argv, 0, false, &o, &rc))
        return rc;
    cli_signals_install();
    _cleanup_json_ json_t *out = json_array(), *cache = NULL;
    int worst = CLI_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        _cleanup_json_ json_t *rec = NULL;
        if ((rc = cli_box_find_cached(argv[i], &cache, &rec)) != CLI_EXIT_OK) {
            worst = worst == CLI_EXIT_OK ? rc : worst;
            continue;
        }
        _cleanup_free_ char *why = NULL;
        const char *status = live_status(rec, &why);
        if (!out || json_array_append_new(out, with_status(rec, status, why)) < 0) {
            cli_error("out of memory");
            return CLI_EXIT_SBX;
        }
    }
    cli_print_json(out);
    return worst;
}

int cli_cmd_status(int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_box_ids("status", argc, argv, CLI_TAKES_JSON, true, &o, &rc))
        return rc;
    _cleanup_json_ json_t *rec = NULL;
    if ((rc = cli_box_find(argv[optind], &rec)) != CLI_EXIT_OK)
        return rc;
    cli_signals_install();
    _cleanup_free_ char *why = NULL;
    const char *status = live_status(rec, &why);
    if (o.json) {
        _cleanup_json_ json_t *v = with_status(rec, status, why);
        cli_print_json(v);
    } else {
        char sbuf[32];
        printf("%s\n", shown_status(rec, status, sbuf, sizeof(sbuf)));
    }
    if (why) {
        cli_error("box %s is unreachable: %s", cli_box_id(rec), why);
        return CLI_EXIT_SBX;
    }
    return CLI_EXIT_OK;
}
