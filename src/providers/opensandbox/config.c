/*
 * opensandbox: the config (the reference's keys, with the shipped yaml's
 * values as defaults), the attribution labels, and the create request body
 * with the SDK's defaults.
 */
#include "osb.h"

#include <sbx/schema.h>

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

const char *const osb_protocols[] = {"http", "https", NULL};
const char *const osb_pull_policies[] = {"Always", "IfNotPresent", "Never", NULL};
static const char *const outputs[] = {"reference", "lines", NULL};

#define F(st, m) offsetof(struct st, m)
#define DUR(st, m, def, h)                                                                         \
    {                                                                                              \
        .key = #m, .type = SBX_SCHEMA_DURATION, .offset = F(st, m), .flags = SBX_SCHEMA_NULLABLE,  \
        .default_json = def, .help = h                                                             \
    }
#define INT(st, m, def, lo, h)                                                                     \
    {                                                                                              \
        .key = #m, .type = SBX_SCHEMA_INT, .offset = F(st, m),                                     \
        .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX, .int_min = lo, .int_max = 1000,          \
        .default_json = def, .help = h                                                             \
    }
#define BOOL(st, m, def, h)                                                                        \
    {                                                                                              \
        .key = #m, .type = SBX_SCHEMA_BOOL, .offset = F(st, m), .default_json = def, .help = h     \
    }

static const sbx_schema_field connection_fields[] = {
    {.key = "domain",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_connection, domain),
     .flags = SBX_SCHEMA_NULLABLE | SBX_SCHEMA_NONEMPTY,
     .env = "OPENSANDBOX_DOMAIN",
     .help = "The server: host[:port], or a URL (its scheme then wins over protocol)."},
    {.key = "api_key",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_connection, api_key),
     .flags = SBX_SCHEMA_NULLABLE | SBX_SCHEMA_SECRET,
     .env = "OPENSANDBOX_API_KEY",
     .help = "Sent as OPEN-SANDBOX-API-KEY to the lifecycle API, and to execd only "
             "through the server proxy."},
    {.key = "protocol",
     .type = SBX_SCHEMA_ENUM,
     .offset = F(osb_connection, protocol),
     .flags = SBX_SCHEMA_NULLABLE,
     .choices = osb_protocols,
     .default_json = "\"http\"",
     .help = "http or https."},
    DUR(osb_connection, request_timeout_s, "300", "One request's bound (null: none)."),
    BOOL(osb_connection, use_server_proxy, "true",
         "Reach execd through the server's proxy (else the pod's endpoint directly)."),
    {.key = NULL},
};

static const sbx_schema_field create_fields[] = {
    DUR(osb_create, request_timeout_s, "1200", "The create request's bound."),
    DUR(osb_create, timeout_s, "1500", "One create attempt's bound (null: request_timeout_s)."),
    INT(osb_create, retries, "10", 0, "Create attempts after the first."),
    DUR(osb_create, retry_delay_s, "5", "Backoff base before a create retry."),
    DUR(osb_create, retry_max_delay_s, "90", "Backoff cap."),
    {.key = "image_pull_policy",
     .type = SBX_SCHEMA_ENUM,
     .offset = F(osb_create, image_pull_policy),
     .choices = osb_pull_policies,
     .default_json = "\"IfNotPresent\"",
     .help = "Always, IfNotPresent or Never (provider_options extensions win)."},
    BOOL(osb_create, skip_health_check, "false", "Skip execd's /ping wait after create."),
    DUR(osb_create, connect_attempt_timeout_s, "1500", "One connect's bound."),
    DUR(osb_create, connect_poll_s, "2", "Sleep between probe attempts."),
    {.key = NULL},
};

static const sbx_schema_field probe_fields[] = {
    {.key = "command",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_probe, command),
     .flags = SBX_SCHEMA_NONEMPTY,
     .default_json = "\"printf nemo-gym-sandbox-ready\"",
     .help = "Run as root after create; its stdout must hold expected_stdout."},
    {.key = "expected_stdout",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_probe, expected_stdout),
     .default_json = "\"nemo-gym-sandbox-ready\"",
     .help = "What the probe must print."},
    DUR(osb_probe, timeout_s, "60", "One probe's bound."),
    DUR(osb_probe, deadline_s, "180", "All probes' bound (null: timeout_s)."),
    INT(osb_probe, stable_count, "2", 1, "Passes in a row needed."),
    DUR(osb_probe, stable_delay_s, "1", "Sleep between passes."),
    {.key = NULL},
};

static const sbx_schema_field operations_fields[] = {
    INT(osb_operations, retries, "5", 0, "Retries of status, files, close; 502 resubmissions."),
    DUR(osb_operations, retry_delay_s, "1", "Backoff base."),
    DUR(osb_operations, retry_max_delay_s, "45", "Backoff cap."),
    INT(osb_operations, command_retries, "0", 0, "Retries inside one command submission."),
    DUR(osb_operations, close_timeout_s, "30", "The DELETE's bound."),
    BOOL(osb_operations, background_exec, "true",
         "Run commands in the background and poll their status (survives long commands)."),
    DUR(osb_operations, background_poll_initial_s, "1", "First status poll after."),
    DUR(osb_operations, background_poll_interval_s, "30",
        "Status poll interval (grows x1.5 to it)."),
    {.key = "output",
     .type = SBX_SCHEMA_ENUM,
     .offset = F(osb_operations, output),
     .choices = outputs,
     .default_json = "\"reference\"",
     .help = "sbx's own: reference (lines joined by \\n, stderr ends with the error event) or "
             "lines (each line ends with \\n, no error line)."},
    {.key = NULL},
};

static const sbx_schema_field attribution_fields[] = {
    BOOL(osb_attribution, enabled, "true", "Label boxes with team, user, workload and run."),
    {.key = "team",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_attribution, team),
     .flags = SBX_SCHEMA_NULLABLE,
     .help = "Else $NEMO_GYM_TEAM, $SLURM_JOB_ACCOUNT."},
    {.key = "user",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_attribution, user),
     .flags = SBX_SCHEMA_NULLABLE,
     .help = "Else $NEMO_GYM_USER, $SLURM_JOB_USER, the login name (not root)."},
    {.key = "workload",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_attribution, workload),
     .flags = SBX_SCHEMA_NULLABLE,
     .help = "Else $NEMO_GYM_WORKLOAD, $SLURM_JOB_NAME, $NEMO_GYM_CONFIG_PATH."},
    {.key = "run",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_attribution, run),
     .flags = SBX_SCHEMA_NULLABLE,
     .help = "Else $NEMO_GYM_RUN_ID, else 12 random hex per process."},
    {.key = "key_prefix",
     .type = SBX_SCHEMA_STRING,
     .offset = F(osb_attribution, key_prefix),
     .default_json = "\"nemo-gym.nvidia.com/\"",
     .help = "A lowercase DNS subdomain (a / is added); \"\": bare keys."},
    {.key = NULL},
};

#define SECTION(name, st, tbl)                                                                     \
    static const sbx_schema name##_schema = {SBX_SCHEMA_HEADER, .fields = tbl,                     \
                                             .config_size = sizeof(struct st)}
SECTION(connection, osb_connection, connection_fields);
SECTION(create, osb_create, create_fields);
SECTION(probe, osb_probe, probe_fields);
SECTION(operations, osb_operations, operations_fields);
SECTION(attribution, osb_attribution, attribution_fields);

#define SEC(name)                                                                                  \
    {                                                                                              \
        .key = #name, .type = SBX_SCHEMA_SECTION, .offset = F(osb_config, name),                   \
        .section = &name##_schema                                                                  \
    }
static const sbx_schema_field fields[] = {
    SEC(connection), SEC(create), SEC(probe), SEC(operations), SEC(attribution), {.key = NULL},
};

static const sbx_schema schema = {
    SBX_SCHEMA_HEADER,
    .name = OSB_NAME,
    .fields = fields,
    .config_size = sizeof(struct osb_config),
};

void osb_config_free(struct osb_config *cfg)
{
    sbx_schema_free(&schema, cfg);
}

char *osb_sanitize_value(const char *v)
{
    size_t n = strlen(v);
    char *out = malloc(n + 1), *w = out;
    if (!out)
        return NULL;
    /* Runs of [^A-Za-z0-9_.-] become one "_". */
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)v[i];
        if (isalnum(c) || c == '_' || c == '.' || c == '-') {
            *w++ = (char)c;
            i++;
        } else {
            *w++ = '_';
            while (i < n &&
                   !(isalnum((unsigned char)v[i]) || v[i] == '_' || v[i] == '.' || v[i] == '-'))
                i++;
        }
    }
    *w = 0;
    /* Strip "._-" from both ends, cut to 63, strip again. */
    for (int pass = 0; pass < 2; pass++) {
        size_t len = strlen(out), a = 0;
        while (a < len && strchr("._-", out[a]))
            a++;
        while (len > a && strchr("._-", out[len - 1]))
            len--;
        memmove(out, out + a, len - a);
        out[len - a] = 0;
        if (pass == 0 && strlen(out) > 63)
            out[63] = 0;
    }
    if (!*out) {
        free(out);
        return strdup("metadata");
    }
    return out;
}

static bool dns_subdomain(const char *s, size_t n)
{
    /* RFC 1123: lowercase labels of [a-z0-9-], alphanumeric at both ends, 253 at most. */
    if (n == 0 || n > 253)
        return false;
    size_t label = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        if (!(islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-'))
            return false;
        if (label == 0 && c == '-')
            return false;
        if (++label > 63)
            return false;
    }
    return label > 0 && s[n - 1] != '-';
}

static const char *first_env(const char *a, const char *b, const char *c)
{
    const char *names[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        const char *v = names[i] ? getenv(names[i]) : NULL;
        if (v && *v)
            return v;
    }
    return NULL;
}

/* The run id made once per process, as the reference's uuid4().hex[:12]. */
static char run_id[13];

static void make_run_id(void)
{
    unsigned char r[6] = {0};
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        unsigned long long t = (unsigned long long)getpid() * 2654435761ull;
        memcpy(r, &t, sizeof(r));
    }
    for (int i = 0; i < 6; i++)
        snprintf(run_id + 2 * i, 3, "%02x", r[i]);
}

static const char *process_run_id(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_run_id);
    return run_id;
}

static int attribution_labels(const struct osb_attribution *a, json_t **out, sbx_error **err)
{
    json_t *labels = json_object();
    *out = labels;
    if (!a->enabled)
        return SBX_OK;
    char prefix[300] = "";
    size_t n = strlen(a->key_prefix);
    if (n) {
        size_t body = a->key_prefix[n - 1] == '/' ? n - 1 : n;
        if (!dns_subdomain(a->key_prefix, body)) {
            *err = sbx_error_new(SBX_EINVAL,
                                 OSB_NAME ": attribution.key_prefix must be a lowercase DNS "
                                          "subdomain such as \"nemo-gym.nvidia.com/\" (or \"\" for "
                                          "bare keys), got '%.64s'",
                                 a->key_prefix);
            return SBX_EINVAL;
        }
        snprintf(prefix, sizeof(prefix), "%.*s/", (int)body, a->key_prefix);
    }
    const char *login = NULL;
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &res) == 0 && res)
        login = res->pw_name;
    if (!login || !strcmp(login, "root"))
        login = NULL;
    const char *user = a->user ? a->user : first_env("NEMO_GYM_USER", "SLURM_JOB_USER", NULL);
    const char *vals[4][2] = {
        {"team", a->team ? a->team : first_env("NEMO_GYM_TEAM", "SLURM_JOB_ACCOUNT", NULL)},
        {"user", user ? user : login},
        {"workload",
         a->workload ? a->workload
                     : first_env("NEMO_GYM_WORKLOAD", "SLURM_JOB_NAME", "NEMO_GYM_CONFIG_PATH")},
        {"run", a->run ? a->run : first_env("NEMO_GYM_RUN_ID", NULL, NULL)},
    };
    if (!vals[3][1])
        vals[3][1] = process_run_id();
    for (int i = 0; i < 4; i++) {
        if (!vals[i][1] || !*vals[i][1])
            continue;
        char key[400];
        snprintf(key, sizeof(key), "%s%s", prefix, vals[i][0]);
        char *v = osb_sanitize_value(vals[i][1]);
        if (!v || json_object_set_new(labels, key, json_string(v)) < 0) {
            free(v);
            return SBX_ENOMEM;
        }
        free(v);
    }
    return SBX_OK;
}

int osb_config_parse(const char *json_text, struct osb_config *cfg, json_t **labels,
                     sbx_error **err)
{
    int rc = sbx_schema_parse(&schema, json_text, cfg, err);
    if (rc < 0)
        return rc;
    if (!cfg->connection.domain) {
        *err = sbx_error_new(SBX_EINVAL, OSB_NAME ": no server: set connection.domain in the "
                                                  "config (host:port or a URL), or "
                                                  "$OPENSANDBOX_DOMAIN");
        rc = SBX_EINVAL;
    } else if (cfg->connection.protocol < 0) {
        cfg->connection.protocol = 0; /* null: http (the reference would build "None://") */
    }
    if (rc == SBX_OK)
        rc = attribution_labels(&cfg->attribution, labels, err);
    if (rc < 0) {
        json_decref(*labels);
        *labels = NULL;
        osb_config_free(cfg);
    }
    return rc;
}

/* --- the create body ------------------------------------------------------------------ */

static const char *const option_keys[] = {"image_auth",  "network_policy",    "platform",
                                          "snapshot_id", "volumes",           "skip_health_check",
                                          "extensions",  "resource_requests", NULL};

static int bad(sbx_error **err, int code, const char *fmt, const char *a, const char *b)
{
    *err = sbx_error_new(code, fmt, a, b);
    return code;
}

static int check_options(json_t *po, sbx_error **err)
{
    const char *k;
    json_t *v;
    json_object_foreach(po, k, v)
    {
        /*
         * sbx's own: the CLI asks every provider to end a box whose creator
         * dies. The service cannot watch this process; the box's TTL ends it.
         */
        if (!strcmp(k, "die_with_creator"))
            continue;
        bool known = false;
        for (size_t i = 0; option_keys[i]; i++)
            known = known || !strcmp(k, option_keys[i]);
        if (!known)
            return bad(err, SBX_EINVAL,
                       OSB_NAME ": unknown provider_options key '%.64s' (allowed: %s)", k,
                       "extensions, image_auth, network_policy, platform, resource_requests, "
                       "skip_health_check, snapshot_id, volumes");
        bool ok;
        const char *want;
        if (!strcmp(k, "snapshot_id"))
            ok = json_is_string(v), want = "a string";
        else if (!strcmp(k, "volumes"))
            ok = json_is_array(v), want = "a list";
        else if (!strcmp(k, "skip_health_check"))
            ok = json_is_boolean(v), want = "a bool";
        else
            ok = json_is_object(v), want = "a mapping";
        if (!ok)
            return bad(err, SBX_ETYPE, OSB_NAME ": provider_options.%s must be %s", k, want);
    }
    json_t *auth = json_object_get(po, "image_auth");
    if (auth && (!json_is_string(json_object_get(auth, "username")) ||
                 !json_is_string(json_object_get(auth, "password"))))
        return bad(err, SBX_ETYPE,
                   OSB_NAME ": provider_options.image_auth must be {username: %s, password: %s}",
                   "str", "str");
    json_t *ext = json_object_get(po, "extensions");
    json_object_foreach(ext, k, v)
    {
        if (!json_is_string(v))
            return bad(err, SBX_ETYPE, OSB_NAME ": provider_options.extensions.%.64s must be %s", k,
                       "a string");
    }
    return SBX_OK;
}

static json_t *cpu_text(double cpu)
{
    char buf[64];
    if (cpu == floor(cpu) && fabs(cpu) < 1e15)
        snprintf(buf, sizeof(buf), "%lld", (long long)cpu);
    else
        snprintf(buf, sizeof(buf), "%.15g", cpu); /* Python's str(float): 0.5 */
    return json_string(buf);
}

int osb_create_body(const struct osb_config *cfg, json_t *labels, const sbx_spec *spec,
                    json_t **body_out, bool *skip_health, sbx_error **err)
{
    json_t *po = json_loads(sbx_spec_provider_options(spec), 0, NULL);
    if (!json_is_object(po)) {
        json_decref(po);
        *err = sbx_error_new(SBX_ETYPE, OSB_NAME ": provider_options must be a mapping");
        return SBX_ETYPE;
    }
    int rc = check_options(po, err);
    if (rc < 0) {
        json_decref(po);
        return rc;
    }
    /* The pull policy: extensions' two spellings, else the config; checked, set in both. */
    json_t *ext = json_object_get(po, "extensions");
    ext = ext ? json_deep_copy(ext) : json_object();
    const char *pol = json_string_value(json_object_get(ext, "imagePullPolicy"));
    if (!pol)
        pol = json_string_value(json_object_get(ext, "opensandbox.extensions.image-pull-policy"));
    if (!pol)
        pol = osb_pull_policies[cfg->create.image_pull_policy];
    bool valid = false;
    for (size_t i = 0; osb_pull_policies[i]; i++)
        valid = valid || !strcmp(pol, osb_pull_policies[i]);
    if (!valid) {
        *err = sbx_error_new(SBX_EINVAL,
                             OSB_NAME ": image pull policy must be one of Always, IfNotPresent, "
                                      "Never, got '%.64s'",
                             pol);
        json_decref(ext);
        json_decref(po);
        return SBX_EINVAL;
    }
    char *policy = strdup(pol);
    if (!json_object_get(ext, "imagePullPolicy"))
        json_object_set_new(ext, "imagePullPolicy", json_string(policy));
    if (!json_object_get(ext, "opensandbox.extensions.image-pull-policy"))
        json_object_set_new(ext, "opensandbox.extensions.image-pull-policy", json_string(policy));
    free(policy);

    json_t *body = json_object();
    const char *image = sbx_spec_image(spec);
    if (image && *image) {
        json_t *img = json_pack("{s:s}", "uri", image);
        json_t *auth = json_object_get(po, "image_auth");
        if (auth)
            json_object_set(img, "auth", auth);
        json_object_set_new(body, "image", img);
    }
    if (json_object_get(po, "snapshot_id"))
        json_object_set(body, "snapshotId", json_object_get(po, "snapshot_id"));
    const char *const *ep = sbx_spec_entrypoint(spec);
    json_t *entry = json_array();
    if (ep)
        for (size_t i = 0; ep[i]; i++)
            json_array_append_new(entry, json_string(ep[i]));
    else {
        /* The SDK's keep-alive entrypoint. */
        json_array_append_new(entry, json_string("tail"));
        json_array_append_new(entry, json_string("-f"));
        json_array_append_new(entry, json_string("/dev/null"));
    }
    json_object_set_new(body, "entrypoint", entry);
    json_t *env = json_object();
    for (size_t i = 0; i < sbx_spec_env_count(spec); i++) {
        const char *k, *v;
        sbx_spec_env_at(spec, i, &k, &v);
        json_object_set_new(env, k, json_string(v));
    }
    if (json_object_size(env))
        json_object_set(body, "env", env);
    json_decref(env);
    /* Attribution first, so the spec's keys win; every value sanitised. */
    json_t *md = json_deep_copy(labels);
    for (size_t i = 0; i < sbx_spec_metadata_count(spec); i++) {
        const char *k, *v;
        sbx_spec_metadata_at(spec, i, &k, &v);
        char *s = osb_sanitize_value(v);
        if (s)
            json_object_set_new(md, k, json_string(s));
        free(s);
    }
    if (json_object_size(md))
        json_object_set(body, "metadata", md);
    json_decref(md);
    json_t *res = json_object();
    double cpu;
    long long mib, gib, gpu;
    if (sbx_spec_get_cpu(spec, &cpu))
        json_object_set_new(res, "cpu", cpu_text(cpu));
    if (sbx_spec_get_memory_mib(spec, &mib))
        json_object_set_new(res, "memory", json_sprintf("%lldMi", mib));
    if (sbx_spec_get_disk_gib(spec, &gib))
        json_object_set_new(res, "ephemeral-storage", json_sprintf("%lldGi", gib));
    if (sbx_spec_get_gpu(spec, &gpu))
        json_object_set_new(res, "gpu", json_sprintf("%lld", gpu));
    if (sbx_spec_gpu_type(spec))
        json_object_set_new(res, "gpu_type", json_string(sbx_spec_gpu_type(spec)));
    if (!json_object_size(res)) {
        /* The SDK's default for an empty map. */
        json_object_set_new(res, "cpu", json_string("1"));
        json_object_set_new(res, "memory", json_string("2Gi"));
    }
    json_object_set_new(body, "resourceLimits", res);
    static const struct {
        const char *opt, *wire;
    } pass[] = {{"platform", "platform"},
                {"network_policy", "networkPolicy"},
                {"volumes", "volumes"},
                /* Needs SDK >= 0.1.15; the wire name is not in the public spec yet. */
                {"resource_requests", "resourceRequests"}};
    for (size_t i = 0; i < sizeof(pass) / sizeof(pass[0]); i++)
        if (json_object_get(po, pass[i].opt))
            json_object_set(body, pass[i].wire, json_object_get(po, pass[i].opt));
    json_object_set_new(body, "extensions", ext);
    json_object_set_new(body, "secureAccess", json_false());
    double ttl;
    /* Whole seconds, at least 1 (a fractional TTL rounds up, never to "none"); 600 unset. */
    long long timeout = sbx_spec_get_ttl(spec, &ttl) ? (long long)ceil(ttl) : 600;
    json_object_set_new(body, "timeout", json_integer(timeout < 1 ? 1 : timeout));
    *skip_health = cfg->create.skip_health_check;
    if (json_is_boolean(json_object_get(po, "skip_health_check")))
        *skip_health = json_is_true(json_object_get(po, "skip_health_check"));
    json_decref(po);
    *body_out = body;
    return SBX_OK;
}

char *osb_shq(const char *s)
{
    /* shlex.quote: '' for empty; as is when only [\w@%+=:,./-] (ASCII); else single quotes. */
    if (!*s)
        return strdup("''");
    bool safe = true;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || strchr("_@%+=:,./-", *p)) || (unsigned char)*p > 127)
            safe = false;
    if (safe)
        return strdup(s);
    size_t n = 2;
    for (const char *p = s; *p; p++)
        n += *p == '\'' ? 5 : 1;
    char *out = malloc(n + 1), *w = out;
    if (!out)
        return NULL;
    *w++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            memcpy(w, "'\"'\"'", 5);
            w += 5;
        } else
            *w++ = *p;
    }
    *w++ = '\'';
    *w = 0;
    return out;
}
