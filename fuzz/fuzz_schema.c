/*
 * Fuzzes the remote kit's config schema (src/remote/schema.c): arbitrary
 * text parsed against a fixed schema that has every field type, a section,
 * an alias, a secret, bounds and defaults. The input up to its first NUL is
 * the config; what follows it, when there is a NUL, is the value of the
 * environment variable that most fields fall back to (unset otherwise).
 *
 * Invariants: on success every field is in its range, lists and maps are
 * well formed, the dump is a JSON object that never holds the secret, and
 * freeing zeroes the struct (ASan and memcheck see that it frees it all);
 * on failure the struct is zero and the message is bounded printable ASCII.
 */
#include <sbx.h>
#include <sbx/schema.h>

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ENV "SBX_FUZZ_SCHEMA_ENV"
/* The longest message: a default unknown-key message with a key cut to 64 escaped bytes. */
#define MESSAGE_MAX 1024

static const char *const modes[] = {"fast", "safe", "off", NULL};

struct conn {
    char *host;
    int64_t port;
    double poll_s;
};

struct cfg {
    char *url;
    char *token;
    bool verbose;
    int64_t workers;
    double ratio;
    char **tags;
    char **labels;
    double timeout_s;
    int mode;
    char *extra;
    char *root;
    struct conn conn;
};

static const sbx_schema_field conn_fields[] = {
    {.key = "host",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct conn, host),
     .flags = SBX_SCHEMA_REQUIRED | SBX_SCHEMA_NONEMPTY,
     .alias = "hostname"},
    {.key = "port",
     .type = SBX_SCHEMA_INT,
     .offset = offsetof(struct conn, port),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
     .int_min = 1,
     .int_max = 65535,
     .default_json = "443",
     .env = ENV},
    {.key = "poll_s",
     .type = SBX_SCHEMA_NUMBER,
     .offset = offsetof(struct conn, poll_s),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_MIN_EXCLUSIVE | SBX_SCHEMA_HAS_MAX,
     .num_min = 0,
     .num_max = 60,
     .default_json = "1"},
    {.key = NULL},
};

static const sbx_schema conn_schema = {
    SBX_SCHEMA_HEADER,
    .fields = conn_fields,
    .config_size = sizeof(struct conn),
    .unknown_code = SBX_EINVAL,
    .unknown_message = "Unsupported {name} {section} settings: {key} (known: {known})",
};

static const sbx_schema_field fields[] = {
    {.key = "url",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct cfg, url),
     .flags = SBX_SCHEMA_NONEMPTY,
     .default_json = "\"http://localhost\""},
    {.key = "token",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct cfg, token),
     .flags = SBX_SCHEMA_SECRET | SBX_SCHEMA_NULLABLE | SBX_SCHEMA_NONEMPTY,
     .env = ENV},
    {.key = "verbose",
     .type = SBX_SCHEMA_BOOL,
     .offset = offsetof(struct cfg, verbose),
     .env = ENV},
    {.key = "workers",
     .type = SBX_SCHEMA_INT,
     .offset = offsetof(struct cfg, workers),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
     .int_min = -5,
     .int_max = 64,
     .default_json = "4",
     .env = ENV},
    {.key = "ratio",
     .type = SBX_SCHEMA_NUMBER,
     .offset = offsetof(struct cfg, ratio),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
     .num_min = -1,
     .num_max = 1,
     .env = ENV},
    {.key = "tags", .type = SBX_SCHEMA_LIST, .offset = offsetof(struct cfg, tags), .env = ENV},
    {.key = "labels",
     .type = SBX_SCHEMA_MAP,
     .offset = offsetof(struct cfg, labels),
     .flags = SBX_SCHEMA_NULLABLE,
     .env = ENV},
    {.key = "timeout_s",
     .type = SBX_SCHEMA_DURATION,
     .offset = offsetof(struct cfg, timeout_s),
     .flags = SBX_SCHEMA_HAS_MAX,
     .num_max = 3600,
     .default_json = "30",
     .env = ENV},
    {.key = "mode",
     .type = SBX_SCHEMA_ENUM,
     .offset = offsetof(struct cfg, mode),
     .choices = modes,
     .flags = SBX_SCHEMA_NULLABLE,
     .env = ENV},
    {.key = "extra",
     .type = SBX_SCHEMA_JSON,
     .offset = offsetof(struct cfg, extra),
     .flags = SBX_SCHEMA_NULLABLE,
     .env = ENV},
    {.key = "root",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct cfg, root),
     .flags = SBX_SCHEMA_ABSOLUTE_PATH | SBX_SCHEMA_NULLABLE,
     .alias = "dir"},
    {.key = "conn",
     .type = SBX_SCHEMA_SECTION,
     .offset = offsetof(struct cfg, conn),
     .section = &conn_schema},
    {.key = NULL},
};

static const sbx_schema schema = {
    SBX_SCHEMA_HEADER,
    .name = "fuzz",
    .fields = fields,
    .config_size = sizeof(struct cfg),
};

static bool all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

static size_t strv_len(char **v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    return n;
}

static void check_ok(const struct cfg *c)
{
    unsigned char vb;
    memcpy(&vb, &c->verbose, 1);
    if (!c->url || !*c->url || (c->token && !*c->token) || vb > 1 || c->workers < -5 ||
        c->workers > 64 || !isfinite(c->ratio) || c->ratio < -1 || c->ratio > 1)
        abort();
    if (!(c->timeout_s == SBX_SCHEMA_NONE || (c->timeout_s >= 0 && c->timeout_s <= 3600)))
        abort();
    if (c->mode < -1 || c->mode > 2 || (c->root && c->root[0] != '/'))
        abort();
    if (c->labels && strv_len(c->labels) % 2)
        abort();
    if (!c->conn.host || !*c->conn.host || c->conn.port < 1 || c->conn.port > 65535 ||
        !(c->conn.poll_s > 0 && c->conn.poll_s <= 60))
        abort();
    if (c->extra) {
        json_t *x = json_loads(c->extra, JSON_DECODE_ANY, NULL);
        if (!x || json_is_null(x))
            abort();
        json_decref(x);
    }
    char *text = NULL;
    if (sbx_schema_dump(&schema, c, &text, NULL) != SBX_OK)
        abort();
    json_t *d = json_loads(text, 0, NULL);
    json_t *tok = json_object_get(d, "token");
    if (!json_is_object(d) || json_object_size(d) != 12 ||
        !json_is_object(json_object_get(d, "conn")) ||
        !(c->token ? json_is_string(tok) && !strcmp(json_string_value(tok), "***")
                   : json_is_null(tok)))
        abort();
    json_decref(d);
    sbx_free(text);
}

static void check_message(const sbx_error *e, int rc)
{
    const char *m = sbx_error_message(e);
    if (!e || sbx_error_code(e) != rc || !m || strlen(m) > MESSAGE_MAX)
        abort();
    for (const unsigned char *p = (const unsigned char *)m; *p; p++)
        if (*p < 0x20 || *p > 0x7e)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    size_t n = strlen(text);
    if (n < size)
        setenv(ENV, text + n + 1, 1);
    else
        unsetenv(ENV);

    struct cfg c;
    memset(&c, 0x5a, sizeof(c));
    sbx_error *e = NULL;
    int rc = sbx_schema_parse(&schema, text, &c, &e);
    if (rc == SBX_OK) {
        if (e)
            abort();
        check_ok(&c);
        sbx_schema_free(&schema, &c);
        if (!all_zero(&c, sizeof(c)))
            abort();
        sbx_schema_free(&schema, &c);
    } else {
        check_message(e, rc);
        if (!all_zero(&c, sizeof(c)))
            abort();
    }
    sbx_error_free(e);
    free(text);
    return 0;
}
