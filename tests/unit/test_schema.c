/*
 * The remote kit's config schema (include/sbx/schema.h, src/remote/schema.c):
 * every type taken and each wrong type refused with its exact message,
 * ranges, defaults, the environment fallback, required and nullable keys,
 * the unknown-key message and a schema's own, secrets kept out of messages
 * and dumps, hostile keys bounded and escaped, nothing left allocated after
 * a failure, the dump and the docs table, broken tables refused, and the
 * local provider's config messages as they were before it used the schema.
 */
#include "tap.h"
#include "common.h"

#include <sbx.h>
#include <sbx/schema.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const policies[] = {"Always", "IfNotPresent", "Never", NULL};

struct sec {
    int64_t retries;
    double delay_s;
    char *name;
};

struct cfg {
    char *url;
    char *api_key;
    bool verbose;
    int64_t workers;
    double ratio;
    char **tags;
    char **labels;
    double timeout_s;
    int policy;
    char *extensions;
    char *root;
    int64_t pin;
    struct sec create;
};

static const sbx_schema_field sec_fields[] = {
    {.key = "retries",
     .type = SBX_SCHEMA_INT,
     .offset = offsetof(struct sec, retries),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
     .int_min = 0,
     .int_max = 10,
     .default_json = "2",
     .help = "Create attempts after the first."},
    {.key = "delay_s",
     .type = SBX_SCHEMA_NUMBER,
     .offset = offsetof(struct sec, delay_s),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_MIN_EXCLUSIVE,
     .num_min = 0,
     .default_json = "0.5"},
    {.key = "name",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct sec, name),
     .flags = SBX_SCHEMA_NULLABLE,
     .alias = "label"},
    {.key = NULL},
};

static const sbx_schema sec_schema = {
    SBX_SCHEMA_HEADER,
    .fields = sec_fields,
    .config_size = sizeof(struct sec),
};

static const sbx_schema_field fields[] = {
    {.key = "url",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct cfg, url),
     .flags = SBX_SCHEMA_NONEMPTY,
     .default_json = "\"http://localhost:8080\"",
     .env = "SBX_TEST_SCHEMA_URL",
     .help = "Where the service | listens."},
    {.key = "api_key",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct cfg, api_key),
     .flags = SBX_SCHEMA_SECRET | SBX_SCHEMA_NULLABLE,
     .env = "SBX_TEST_SCHEMA_KEY",
     .help = "The API key."},
    {.key = "verbose",
     .type = SBX_SCHEMA_BOOL,
     .offset = offsetof(struct cfg, verbose),
     .default_json = "false",
     .env = "SBX_TEST_SCHEMA_VERBOSE"},
    {.key = "workers",
     .type = SBX_SCHEMA_INT,
     .offset = offsetof(struct cfg, workers),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
     .int_min = 1,
     .int_max = 64,
     .default_json = "4",
     .env = "SBX_TEST_SCHEMA_WORKERS",
     .help = "Requests at once."},
    {.key = "ratio",
     .type = SBX_SCHEMA_NUMBER,
     .offset = offsetof(struct cfg, ratio),
     .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
     .num_min = 0,
     .num_max = 1,
     .default_json = "0.25",
     .env = "SBX_TEST_SCHEMA_RATIO"},
    {.key = "tags",
     .type = SBX_SCHEMA_LIST,
     .offset = offsetof(struct cfg, tags),
     .env = "SBX_TEST_SCHEMA_TAGS"},
    {.key = "labels",
     .type = SBX_SCHEMA_MAP,
     .offset = offsetof(struct cfg, labels),
     .env = "SBX_TEST_SCHEMA_LABELS"},
    {.key = "timeout_s",
     .type = SBX_SCHEMA_DURATION,
     .offset = offsetof(struct cfg, timeout_s),
     .flags = SBX_SCHEMA_HAS_MAX,
     .num_max = 86400,
     .default_json = "30",
     .env = "SBX_TEST_SCHEMA_TIMEOUT"},
    {.key = "policy",
     .type = SBX_SCHEMA_ENUM,
     .offset = offsetof(struct cfg, policy),
     .choices = policies,
     .default_json = "\"IfNotPresent\"",
     .env = "SBX_TEST_SCHEMA_POLICY"},
    {.key = "extensions",
     .type = SBX_SCHEMA_JSON,
     .offset = offsetof(struct cfg, extensions),
     .flags = SBX_SCHEMA_NULLABLE,
     .env = "SBX_TEST_SCHEMA_EXT"},
    {.key = "root",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct cfg, root),
     .flags = SBX_SCHEMA_ABSOLUTE_PATH | SBX_SCHEMA_NULLABLE},
    {.key = "pin",
     .type = SBX_SCHEMA_INT,
     .offset = offsetof(struct cfg, pin),
     .flags = SBX_SCHEMA_SECRET | SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
     .int_min = 0,
     .int_max = 9999,
     .env = "SBX_TEST_SCHEMA_PIN"},
    {.key = "create",
     .type = SBX_SCHEMA_SECTION,
     .offset = offsetof(struct cfg, create),
     .section = &sec_schema,
     .help = "How boxes are made."},
    {.key = NULL},
};

static const sbx_schema schema = {
    SBX_SCHEMA_HEADER,
    .name = "test",
    .fields = fields,
    .config_size = sizeof(struct cfg),
};

/* Parses `text` with `s` into `out` (of `size` bytes), which must succeed. */
static void parse_ok(const sbx_schema *s, const char *text, void *out)
{
    sbx_error *e = NULL;
    int rc = sbx_schema_parse(s, text, out, &e);
    if (rc != SBX_OK)
        TAP_FAIL("%s: %d %s", text ? text : "NULL", rc, sbx_error_message(e));
}

static bool all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return false;
    return true;
}

/* Parsing `text` fails with `code` and exactly `want`, leaving `out` zeroed. */
static void refused_by(const sbx_schema *s, size_t size, const char *text, int code,
                       const char *want)
{
    void *out = malloc(size);
    memset(out, 0xa5, size);
    sbx_error *e = NULL;
    int rc = sbx_schema_parse(s, text, out, &e);
    if (rc != code || !e || strcmp(sbx_error_message(e), want) != 0)
        TAP_FAIL("%s:\n  got  %d \"%s\"\n  want %d \"%s\"", text, rc, e ? sbx_error_message(e) : "",
                 code, want);
    TAP_EQ_INT(sbx_error_code(e), code);
    if (!all_zero(out, size))
        TAP_FAIL("%s: the config is not zeroed after the failure", text);
    sbx_error_free(e);
    free(out);
}

static void refused(const char *text, int code, const char *want)
{
    refused_by(&schema, sizeof(struct cfg), text, code, want);
}

static char *dump(const sbx_schema *s, const void *cfg)
{
    char *out = NULL;
    TAP_OK(sbx_schema_dump(s, cfg, &out, &e_));
    return out;
}

static void test_every_type_taken(void)
{
    struct cfg c;
    parse_ok(&schema,
             "{\"url\": \"https://api\", \"api_key\": \"k\", \"verbose\": true, \"workers\": 64,"
             " \"ratio\": 1, \"tags\": [\"a\", \"b\"], \"labels\": {\"team\": \"rl\", \"x\": \"\"},"
             " \"timeout_s\": 0.5, \"policy\": \"Never\", \"extensions\": {\"a\": [1, null]},"
             " \"root\": \"/srv\", \"pin\": 9999,"
             " \"create\": {\"retries\": 0, \"delay_s\": 1e-3, \"name\": \"n\"}}",
             &c);
    TAP_EQ_STR(c.url, "https://api");
    TAP_EQ_STR(c.api_key, "k");
    TAP_TRUE(c.verbose);
    TAP_EQ_INT(c.workers, 64);
    TAP_TRUE(c.ratio == 1.0);
    TAP_EQ_STR(c.tags[0], "a");
    TAP_EQ_STR(c.tags[1], "b");
    TAP_NULL(c.tags[2]);
    TAP_EQ_STR(c.labels[0], "team");
    TAP_EQ_STR(c.labels[1], "rl");
    TAP_EQ_STR(c.labels[2], "x");
    TAP_EQ_STR(c.labels[3], "");
    TAP_NULL(c.labels[4]);
    TAP_TRUE(c.timeout_s == 0.5);
    TAP_EQ_INT(c.policy, 2);
    TAP_EQ_STR(c.extensions, "{\"a\":[1,null]}");
    TAP_EQ_STR(c.root, "/srv");
    TAP_EQ_INT(c.pin, 9999);
    TAP_EQ_INT(c.create.retries, 0);
    TAP_TRUE(c.create.delay_s == 1e-3);
    TAP_EQ_STR(c.create.name, "n");
    /* Empty lists and maps are values, not unset. */
    sbx_schema_free(&schema, &c);
    parse_ok(&schema, "{\"tags\": [], \"labels\": {}, \"extensions\": 7}", &c);
    TAP_TRUE(c.tags && !c.tags[0]);
    TAP_TRUE(c.labels && !c.labels[0]);
    TAP_EQ_STR(c.extensions, "7");
    sbx_schema_free(&schema, &c);
}

static void test_wrong_types(void)
{
    refused("{\"url\": 3}", SBX_ETYPE, "test: url must be a non-empty string");
    refused("{\"api_key\": [\"k\"]}", SBX_ETYPE, "test: api_key must be a string, or null");
    refused("{\"verbose\": \"yes\"}", SBX_ETYPE, "test: verbose must be true or false");
    refused("{\"verbose\": 1}", SBX_ETYPE, "test: verbose must be true or false");
    refused("{\"workers\": \"4\"}", SBX_ETYPE, "test: workers must be an integer from 1 to 64");
    refused("{\"workers\": 4.0}", SBX_ETYPE, "test: workers must be an integer from 1 to 64");
    refused("{\"workers\": true}", SBX_ETYPE, "test: workers must be an integer from 1 to 64");
    refused("{\"ratio\": \"0.5\"}", SBX_ETYPE, "test: ratio must be a number from 0 to 1");
    refused("{\"ratio\": false}", SBX_ETYPE, "test: ratio must be a number from 0 to 1");
    refused("{\"tags\": \"a\"}", SBX_ETYPE, "test: tags must be a list of strings");
    refused("{\"tags\": [\"a\", 1]}", SBX_ETYPE, "test: tags must be a list of strings");
    refused("{\"labels\": [\"a\"]}", SBX_ETYPE,
            "test: labels must be a mapping of strings to strings");
    refused("{\"labels\": {\"a\": 1}}", SBX_ETYPE,
            "test: labels must be a mapping of strings to strings");
    refused("{\"timeout_s\": \"30\"}", SBX_ETYPE,
            "test: timeout_s must be a number of seconds from 0 to 86400, or null for none");
    refused("{\"policy\": 1}", SBX_ETYPE,
            "test: policy must be one of 'Always', 'IfNotPresent', 'Never'");
    refused("{\"root\": 1}", SBX_ETYPE, "test: root must be an absolute path, or null");
    refused("{\"pin\": \"1\"}", SBX_ETYPE, "test: pin must be an integer from 0 to 9999");
    refused("{\"create\": [1]}", SBX_ETYPE, "test: create must be a mapping");
    refused("{\"create\": {\"retries\": \"2\"}}", SBX_ETYPE,
            "test: create.retries must be an integer from 0 to 10");
    refused("{\"create\": {\"name\": 5}}", SBX_ETYPE,
            "test: create.name must be a string, or null");
    /* Not a mapping, not JSON. */
    refused("[1]", SBX_ETYPE, "test: the config must be a mapping");
    refused("\"x\"", SBX_ETYPE, "test: the config must be a mapping");
    refused("{\"url\": ", SBX_EINVAL,
            "test: the config is not valid JSON: unexpected token (line 1, column 8)");
}

static void test_ranges(void)
{
    refused("{\"url\": \"\"}", SBX_EINVAL, "test: url must be a non-empty string, got ''");
    refused("{\"workers\": 0}", SBX_EINVAL, "test: workers must be an integer from 1 to 64, got 0");
    refused("{\"workers\": 65}", SBX_EINVAL,
            "test: workers must be an integer from 1 to 64, got 65");
    refused("{\"workers\": -9223372036854775808}", SBX_EINVAL,
            "test: workers must be an integer from 1 to 64, got -9223372036854775808");
    refused("{\"ratio\": 1.5}", SBX_EINVAL, "test: ratio must be a number from 0 to 1, got 1.5");
    refused("{\"ratio\": -0.1}", SBX_EINVAL, "test: ratio must be a number from 0 to 1, got -0.1");
    refused(
        "{\"timeout_s\": -1}", SBX_EINVAL,
        "test: timeout_s must be a number of seconds from 0 to 86400, or null for none, got -1");
    refused("{\"timeout_s\": 86400.5}", SBX_EINVAL,
            "test: timeout_s must be a number of seconds from 0 to 86400, or null for none, got "
            "86400.5");
    refused("{\"policy\": \"always\"}", SBX_EINVAL,
            "test: policy must be one of 'Always', 'IfNotPresent', 'Never', got 'always'");
    refused("{\"root\": \"srv\"}", SBX_EINVAL,
            "test: root must be an absolute path, or null, got 'srv'");
    refused("{\"create\": {\"retries\": 11}}", SBX_EINVAL,
            "test: create.retries must be an integer from 0 to 10, got 11");
    refused("{\"create\": {\"delay_s\": 0}}", SBX_EINVAL,
            "test: create.delay_s must be a number > 0, got 0");
    /* The bounds themselves are in range. */
    struct cfg c;
    parse_ok(&schema,
             "{\"workers\": 1, \"ratio\": 0, \"timeout_s\": 86400, \"pin\": 0,"
             " \"create\": {\"retries\": 10, \"delay_s\": 5e-324}}",
             &c);
    TAP_EQ_INT(c.workers, 1);
    TAP_TRUE(c.timeout_s == 86400);
    TAP_TRUE(c.create.delay_s > 0);
    sbx_schema_free(&schema, &c);
}

static void test_defaults(void)
{
    struct cfg c;
    memset(&c, 0x5a, sizeof(c));
    parse_ok(&schema, "{}", &c);
    TAP_EQ_STR(c.url, "http://localhost:8080");
    TAP_NULL(c.api_key);
    TAP_TRUE(!c.verbose);
    TAP_EQ_INT(c.workers, 4);
    TAP_TRUE(c.ratio == 0.25);
    TAP_NULL(c.tags);
    TAP_NULL(c.labels);
    TAP_TRUE(c.timeout_s == 30);
    TAP_EQ_INT(c.policy, 1);
    TAP_NULL(c.extensions);
    TAP_NULL(c.root);
    TAP_EQ_INT(c.pin, 0);
    TAP_EQ_INT(c.create.retries, 2);
    TAP_TRUE(c.create.delay_s == 0.5);
    TAP_NULL(c.create.name);
    sbx_schema_free(&schema, &c);
    /* NULL text is "{}", and so is a null or absent section. */
    parse_ok(&schema, NULL, &c);
    TAP_EQ_INT(c.create.retries, 2);
    sbx_schema_free(&schema, &c);
    parse_ok(&schema, "{\"create\": null}", &c);
    TAP_EQ_INT(c.create.retries, 2);
    sbx_schema_free(&schema, &c);
    /* A default that is wrong for its type is the table's bug, said as such. */
    struct one {
        int64_t n;
    } o;
    static const sbx_schema_field bad_default[] = {
        {.key = "n", .type = SBX_SCHEMA_INT, .default_json = "\"many\""}, {.key = NULL}};
    static const sbx_schema bd = {SBX_SCHEMA_HEADER, .name = "bd", .fields = bad_default,
                                  .config_size = sizeof(o)};
    refused_by(&bd, sizeof(o), "{}", SBX_ETYPE, "bd: n (its default) must be an integer");
    static const sbx_schema_field not_json[] = {
        {.key = "n", .type = SBX_SCHEMA_INT, .default_json = "4 2"}, {.key = NULL}};
    static const sbx_schema nj = {SBX_SCHEMA_HEADER, .name = "nj", .fields = not_json,
                                  .config_size = sizeof(o)};
    refused_by(&nj, sizeof(o), "{}", SBX_EINVAL,
               "nj: invalid config schema: field 'n': default_json is not JSON");
    parse_ok(&bd, "{\"n\": 3}", &o);
    TAP_EQ_INT(o.n, 3);
}

static void test_env_fallback(void)
{
    struct cfg c;
    setenv("SBX_TEST_SCHEMA_WORKERS", "8", 1);
    setenv("SBX_TEST_SCHEMA_VERBOSE", "Yes", 1);
    setenv("SBX_TEST_SCHEMA_RATIO", " 0.75 ", 1);
    setenv("SBX_TEST_SCHEMA_TAGS", "a, b,,c ", 1);
    setenv("SBX_TEST_SCHEMA_LABELS", "team=rl, run = 7", 1);
    setenv("SBX_TEST_SCHEMA_TIMEOUT", "90", 1);
    setenv("SBX_TEST_SCHEMA_POLICY", "Always", 1);
    setenv("SBX_TEST_SCHEMA_EXT", "{\"k\": [true]}", 1);
    setenv("SBX_TEST_SCHEMA_KEY", "sk-from-env", 1);
    setenv("SBX_TEST_SCHEMA_URL", "", 1); /* empty is unset: the default */
    parse_ok(&schema, "{}", &c);
    TAP_EQ_INT(c.workers, 8);
    TAP_TRUE(c.verbose);
    TAP_TRUE(c.ratio == 0.75);
    TAP_EQ_STR(c.tags[0], "a");
    TAP_EQ_STR(c.tags[1], "b");
    TAP_EQ_STR(c.tags[2], "c");
    TAP_NULL(c.tags[3]);
    TAP_EQ_STR(c.labels[0], "team");
    TAP_EQ_STR(c.labels[1], "rl");
    TAP_EQ_STR(c.labels[2], "run");
    TAP_EQ_STR(c.labels[3], "7");
    TAP_NULL(c.labels[4]);
    TAP_TRUE(c.timeout_s == 90);
    TAP_EQ_INT(c.policy, 0);
    TAP_EQ_STR(c.extensions, "{\"k\":[true]}");
    TAP_EQ_STR(c.api_key, "sk-from-env");
    TAP_EQ_STR(c.url, "http://localhost:8080");
    sbx_schema_free(&schema, &c);
    /* The config wins over the environment; null on a nullable key is absent. */
    parse_ok(&schema, "{\"workers\": 3, \"api_key\": null}", &c);
    TAP_EQ_INT(c.workers, 3);
    TAP_EQ_STR(c.api_key, "sk-from-env");
    sbx_schema_free(&schema, &c);
    /* A bad value names its variable. */
    setenv("SBX_TEST_SCHEMA_WORKERS", "eight", 1);
    refused("{}", SBX_ETYPE,
            "test: workers (from $SBX_TEST_SCHEMA_WORKERS) must be an integer from 1 to 64");
    setenv("SBX_TEST_SCHEMA_WORKERS", "100", 1);
    refused("{}", SBX_EINVAL,
            "test: workers (from $SBX_TEST_SCHEMA_WORKERS) must be an integer from 1 to 64, got "
            "100");
    unsetenv("SBX_TEST_SCHEMA_WORKERS");
    setenv("SBX_TEST_SCHEMA_VERBOSE", "maybe", 1);
    refused("{}", SBX_ETYPE, "test: verbose (from $SBX_TEST_SCHEMA_VERBOSE) must be true or false");
    unsetenv("SBX_TEST_SCHEMA_VERBOSE");
    setenv("SBX_TEST_SCHEMA_TIMEOUT", "inf", 1);
    refused("{}", SBX_ETYPE,
            "test: timeout_s (from $SBX_TEST_SCHEMA_TIMEOUT) must be a number of seconds from 0 "
            "to 86400, or null for none");
    unsetenv("SBX_TEST_SCHEMA_TIMEOUT");
    setenv("SBX_TEST_SCHEMA_LABELS", "team", 1);
    refused("{}", SBX_ETYPE,
            "test: labels (from $SBX_TEST_SCHEMA_LABELS) must be a mapping of strings to strings");
    unsetenv("SBX_TEST_SCHEMA_LABELS");
    setenv("SBX_TEST_SCHEMA_POLICY", "Sometimes", 1);
    refused("{}", SBX_EINVAL,
            "test: policy (from $SBX_TEST_SCHEMA_POLICY) must be one of 'Always', 'IfNotPresent', "
            "'Never', got 'Sometimes'");
    unsetenv("SBX_TEST_SCHEMA_POLICY");
    setenv("SBX_TEST_SCHEMA_EXT", "{not json", 1);
    refused("{}", SBX_ETYPE, "test: extensions (from $SBX_TEST_SCHEMA_EXT) must be any JSON value");
    /* A JSON variable saying null is absent on a nullable field, as null in the config is. */
    setenv("SBX_TEST_SCHEMA_EXT", "null", 1);
    parse_ok(&schema, "{}", &c);
    TAP_NULL(c.extensions);
    sbx_schema_free(&schema, &c);
}

struct req {
    char *token;
    struct {
        int64_t port;
    } conn;
};

static const sbx_schema_field req_conn[] = {
    {.key = "port", .type = SBX_SCHEMA_INT, .flags = SBX_SCHEMA_REQUIRED}, {.key = NULL}};
static const sbx_schema req_conn_schema = {SBX_SCHEMA_HEADER, .fields = req_conn,
                                           .config_size = sizeof(((struct req *)0)->conn)};
static const sbx_schema_field req_fields[] = {
    {.key = "token",
     .type = SBX_SCHEMA_STRING,
     .offset = offsetof(struct req, token),
     .flags = SBX_SCHEMA_REQUIRED | SBX_SCHEMA_SECRET,
     .env = "SBX_TEST_SCHEMA_TOKEN"},
    {.key = "conn",
     .type = SBX_SCHEMA_SECTION,
     .offset = offsetof(struct req, conn),
     .section = &req_conn_schema},
    {.key = NULL},
};
static const sbx_schema req_schema = {SBX_SCHEMA_HEADER, .name = "req", .fields = req_fields,
                                      .config_size = sizeof(struct req)};

static void test_required(void)
{
    refused_by(&req_schema, sizeof(struct req), "{}", SBX_EINVAL,
               "req: token is required (or set $SBX_TEST_SCHEMA_TOKEN)");
    refused_by(&req_schema, sizeof(struct req), "{\"token\": \"t\"}", SBX_EINVAL,
               "req: conn.port is required");
    refused_by(&req_schema, sizeof(struct req), "{\"token\": \"t\", \"conn\": {}}", SBX_EINVAL,
               "req: conn.port is required");
    /* null is not absent on a key that is not nullable. */
    refused_by(&req_schema, sizeof(struct req), "{\"token\": null}", SBX_ETYPE,
               "req: token must be a string");
    struct req r;
    setenv("SBX_TEST_SCHEMA_TOKEN", "from-env", 1);
    parse_ok(&req_schema, "{\"conn\": {\"port\": 443}}", &r);
    TAP_EQ_STR(r.token, "from-env");
    TAP_EQ_INT(r.conn.port, 443);
    sbx_schema_free(&req_schema, &r);
}

static void test_null(void)
{
    struct cfg c;
    /* Nullable: null is absent, so the default (or the variable) applies. */
    parse_ok(&schema,
             "{\"api_key\": null, \"extensions\": null, \"root\": null, \"timeout_s\": null,"
             " \"create\": {\"name\": null}}",
             &c);
    TAP_NULL(c.api_key);
    TAP_NULL(c.extensions);
    TAP_NULL(c.root);
    TAP_NULL(c.create.name);
    /* A duration's null is none, not its default. */
    TAP_TRUE(c.timeout_s == SBX_SCHEMA_NONE);
    char *d = dump(&schema, &c);
    TAP_CONTAINS(d, "\"timeout_s\":null");
    sbx_free(d);
    sbx_schema_free(&schema, &c);
    /* Not nullable: refused with the type's words. */
    refused("{\"url\": null}", SBX_ETYPE, "test: url must be a non-empty string");
    refused("{\"workers\": null}", SBX_ETYPE, "test: workers must be an integer from 1 to 64");
    refused("{\"verbose\": null}", SBX_ETYPE, "test: verbose must be true or false");
    refused("{\"ratio\": null}", SBX_ETYPE, "test: ratio must be a number from 0 to 1");
    refused("{\"tags\": null}", SBX_ETYPE, "test: tags must be a list of strings");
    refused("{\"labels\": null}", SBX_ETYPE,
            "test: labels must be a mapping of strings to strings");
    refused("{\"policy\": null}", SBX_ETYPE,
            "test: policy must be one of 'Always', 'IfNotPresent', 'Never'");
    refused("{\"create\": {\"retries\": null}}", SBX_ETYPE,
            "test: create.retries must be an integer from 0 to 10");
    /* A JSON field that is not nullable refuses null too. */
    struct one {
        char *j;
    } o;
    static const sbx_schema_field jf[] = {{.key = "j", .type = SBX_SCHEMA_JSON}, {.key = NULL}};
    static const sbx_schema js = {SBX_SCHEMA_HEADER, .name = "js", .fields = jf,
                                  .config_size = sizeof(o)};
    refused_by(&js, sizeof(o), "{\"j\": null}", SBX_ETYPE, "js: j must be a JSON value, not null");
}

static const sbx_schema_field small_fields[] = {
    {.key = "b", .type = SBX_SCHEMA_BOOL},
    {.key = "a", .type = SBX_SCHEMA_INT, .offset = 8},
    {.key = NULL},
};

static void test_unknown_keys(void)
{
    refused("{\"bogus\": 1}", SBX_ETYPE,
            "test: unknown key 'bogus' (known: api_key, create, extensions, labels, pin, policy, "
            "ratio, root, tags, timeout_s, url, verbose, workers)");
    refused("{\"create\": {\"x\": 1}}", SBX_ETYPE,
            "test: unknown key 'x' in create (known: delay_s, name, retries)");
    /* Unknown keys are refused before any value is looked at. */
    refused("{\"workers\": 0, \"bogus\": 1}", SBX_ETYPE,
            "test: unknown key 'bogus' (known: api_key, create, extensions, labels, pin, policy, "
            "ratio, root, tags, timeout_s, url, verbose, workers)");
    /* A schema's own code and words (Daytona's ValueError, say), every placeholder. */
    static const sbx_schema own = {
        SBX_SCHEMA_HEADER,
        .name = "daytona",
        .fields = small_fields,
        .config_size = 16,
        .unknown_code = SBX_EINVAL,
        .unknown_message = "Unsupported Daytona settings: {key} [{name}] ({known}){section} {x}",
    };
    refused_by(&own, 16, "{\"c\": 1}", SBX_EINVAL,
               "Unsupported Daytona settings: c [daytona] (a, b) {x}");
    static const sbx_schema own_sec = {
        SBX_SCHEMA_HEADER,
        .fields = small_fields,
        .config_size = 16,
        .unknown_code = SBX_EINVAL,
        .unknown_message = "Unsupported Daytona {section} settings",
    };
    static const sbx_schema_field outer_fields[] = {
        {.key = "create", .type = SBX_SCHEMA_SECTION, .section = &own_sec}, {.key = NULL}};
    static const sbx_schema outer = {SBX_SCHEMA_HEADER, .name = "daytona", .fields = outer_fields,
                                     .config_size = 16};
    refused_by(&outer, 16, "{\"create\": {\"c\": 1}}", SBX_EINVAL,
               "Unsupported Daytona create settings");
    refused_by(&outer, 16, "{\"c\": 1}", SBX_ETYPE, "daytona: unknown key 'c' (known: create)");
}

static void test_aliases(void)
{
    struct cfg c;
    parse_ok(&schema, "{\"create\": {\"label\": \"old\"}}", &c);
    TAP_EQ_STR(c.create.name, "old");
    sbx_schema_free(&schema, &c);
    refused("{\"create\": {\"label\": \"old\", \"name\": \"new\"}}", SBX_EINVAL,
            "test: create.name and its old name label are both set; keep name only");
    /* A message about the value names the key the user wrote. */
    refused("{\"create\": {\"label\": 1}}", SBX_ETYPE,
            "test: create.label must be a string, or null");
}

static void test_secrets_never_shown(void)
{
    refused("{\"pin\": 123456}", SBX_EINVAL, "test: pin must be an integer from 0 to 9999");
    refused("{\"pin\": -424242}", SBX_EINVAL, "test: pin must be an integer from 0 to 9999");
    setenv("SBX_TEST_SCHEMA_PIN", "777777", 1);
    refused("{}", SBX_EINVAL,
            "test: pin (from $SBX_TEST_SCHEMA_PIN) must be an integer from 0 to 9999");
    setenv("SBX_TEST_SCHEMA_PIN", "SECRETPIN", 1);
    refused("{}", SBX_ETYPE,
            "test: pin (from $SBX_TEST_SCHEMA_PIN) must be an integer from 0 to 9999");
    unsetenv("SBX_TEST_SCHEMA_PIN");
    /* jansson quotes the text near a syntax error: not in our message. */
    refused("{\"api_key\": \"sk-SECRET-1234", SBX_EINVAL,
            "test: the config is not valid JSON: premature end of input (line 1, column 27)");
    refused("{\"api_key\": sk-SECRET-1234}", SBX_EINVAL,
            "test: the config is not valid JSON: invalid token (line 1, column 14)");
    /* The dump shows that a secret is set, never what it is. */
    struct cfg c;
    parse_ok(&schema, "{\"api_key\": \"sk-SECRET-1234\", \"pin\": 4321}", &c);
    char *d = dump(&schema, &c);
    TAP_CONTAINS(d, "\"api_key\":\"***\"");
    TAP_CONTAINS(d, "\"pin\":\"***\"");
    TAP_TRUE(!strstr(d, "SECRET"));
    TAP_TRUE(!strstr(d, "4321"));
    sbx_free(d);
    sbx_schema_free(&schema, &c);
    /* Unset, it is null. */
    parse_ok(&schema, "{}", &c);
    d = dump(&schema, &c);
    TAP_CONTAINS(d, "\"api_key\":null");
    sbx_free(d);
    sbx_schema_free(&schema, &c);
}

static void test_hostile_keys(void)
{
    static const char known[] = " (known: api_key, create, extensions, labels, pin, policy, "
                                "ratio, root, tags, timeout_s, url, verbose, workers)";
    char want[512];
    snprintf(want, sizeof(want), "test: unknown key '\\x01\\n\\x1b[31mred\\'\\\\\\xc3\\xa9'%s",
             known);
    refused("{\"\\u0001\\n\\u001b[31mred'\\\\\\u00e9\": 1}", SBX_ETYPE, want);
    /* A 1 MiB key: its first 64 bytes, then "...". */
    size_t n = (size_t)1 << 20;
    char *text = malloc(n + 16);
    memcpy(text, "{\"", 2);
    memset(text + 2, 'k', n);
    memcpy(text + 2 + n, "\": 1}", 6);
    char ks[65];
    memset(ks, 'k', 64);
    ks[64] = 0;
    snprintf(want, sizeof(want), "test: unknown key '%s...'%s", ks, known);
    refused(text, SBX_ETYPE, want);
    /* In a value too: a string seen in a range error is cut and escaped the same way. */
    memcpy(text, "{\"root\": \"", 10);
    for (size_t i = 0; i < n / 2; i++)
        memcpy(text + 10 + 2 * i, "\\n", 2);
    memcpy(text + 10 + n, "\"}", 3);
    char nl[64 * 2 + 1];
    for (int i = 0; i < 64; i++)
        memcpy(nl + 2 * i, "\\n", 2);
    nl[128] = 0;
    snprintf(want, sizeof(want), "test: root must be an absolute path, or null, got '%s...'", nl);
    refused(text, SBX_EINVAL, want);
    free(text);
}

static void test_failure_frees_everything(void)
{
    /* Every allocating field is filled before the last one fails. */
    refused("{\"url\": \"u\", \"api_key\": \"k\", \"tags\": [\"a\", \"b\"],"
            " \"labels\": {\"a\": \"b\"}, \"extensions\": {\"x\": 1}, \"root\": \"/r\","
            " \"create\": {\"name\": \"n\", \"retries\": 99}}",
            SBX_EINVAL, "test: create.retries must be an integer from 0 to 10, got 99");
    setenv("SBX_TEST_SCHEMA_TAGS", "a,b", 1);
    setenv("SBX_TEST_SCHEMA_PIN", "x", 1);
    refused("{\"labels\": {\"a\": \"b\"}}", SBX_ETYPE,
            "test: pin (from $SBX_TEST_SCHEMA_PIN) must be an integer from 0 to 9999");
    unsetenv("SBX_TEST_SCHEMA_PIN");
    /* Free is idempotent and takes NULL. */
    struct cfg c;
    parse_ok(&schema, "{\"tags\": [\"a\"], \"create\": {\"name\": \"n\"}}", &c);
    sbx_schema_free(&schema, &c);
    TAP_TRUE(all_zero(&c, sizeof(c)));
    sbx_schema_free(&schema, &c);
    sbx_schema_free(&schema, NULL);
    sbx_schema_free(NULL, &c);
}

static void test_dump(void)
{
    struct cfg c;
    parse_ok(&schema,
             "{\"tags\": [\"a\"], \"labels\": {\"k\": \"v\"}, \"extensions\": {\"x\": [1]},"
             " \"root\": \"/r\", \"create\": {\"name\": \"n\"}}",
             &c);
    char *d = dump(&schema, &c);
    TAP_EQ_STR(d, "{\"url\":\"http://localhost:8080\",\"api_key\":null,\"verbose\":false,"
                  "\"workers\":4,\"ratio\":0.25,\"tags\":[\"a\"],\"labels\":{\"k\":\"v\"},"
                  "\"timeout_s\":30.0,\"policy\":\"IfNotPresent\",\"extensions\":{\"x\":[1]},"
                  "\"root\":\"/r\",\"pin\":\"***\","
                  "\"create\":{\"retries\":2,\"delay_s\":0.5,\"name\":\"n\"}}");
    sbx_free(d);
    sbx_schema_free(&schema, &c);
    /* A string a provider put there that is not UTF-8 is refused, not dumped as bad JSON. */
    parse_ok(&schema, "{\"root\": \"/r\"}", &c);
    c.root[1] = (char)0xff;
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_schema_dump(&schema, &c, &out, &e), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "test: root holds text that is not UTF-8 or JSON");
    TAP_NULL(out);
    sbx_error_free(e);
    sbx_schema_free(&schema, &c);
}

static void test_describe(void)
{
    char *md = NULL;
    TAP_OK(sbx_schema_describe(&schema, &md, &e_));
    TAP_TRUE(!strncmp(md, "| key | type | default | env | help |\n|---|---|---|---|---|\n", 58));
    TAP_CONTAINS(md, "\n| `url` | a non-empty string | `\"http://localhost:8080\"` | "
                     "`SBX_TEST_SCHEMA_URL` | Where the service \\| listens. |\n");
    TAP_CONTAINS(md, "\n| `api_key` | a string, or null | - | `SBX_TEST_SCHEMA_KEY` | The API key. "
                     "Secret: never shown. |\n");
    TAP_CONTAINS(md, "\n| `workers` | an integer from 1 to 64 | `4` | `SBX_TEST_SCHEMA_WORKERS` | "
                     "Requests at once. |\n");
    TAP_CONTAINS(md, "\n| `create` | a mapping | - | - | How boxes are made. |\n");
    TAP_CONTAINS(md, "\n| `create.retries` | an integer from 0 to 10 | `2` | - | "
                     "Create attempts after the first. |\n");
    TAP_CONTAINS(md,
                 "\n| `create.name` | a string, or null | - | - | Deprecated name: `label`. |\n");
    sbx_free(md);
    char *r = NULL;
    TAP_OK(sbx_schema_describe(&req_schema, &r, &e_));
    TAP_CONTAINS(r, "\n| `token` | a string | required | `SBX_TEST_SCHEMA_TOKEN` | "
                    "Secret: never shown. |\n");
    sbx_free(r);
}

/* A schema that must be refused as a table bug, with `want`. */
static void bad_table(const sbx_schema *s, const char *want)
{
    char buf[64];
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_schema_parse(s, "{}", buf, &e), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), want);
    sbx_error_free(e);
    char *out = NULL;
    TAP_EQ_INT(sbx_schema_dump(s, buf, &out, NULL), SBX_EINVAL);
    TAP_EQ_INT(sbx_schema_describe(s, &out, NULL), SBX_EINVAL);
    TAP_NULL(out);
    sbx_schema_free(s, buf); /* a no-op, not a crash */
}

static const sbx_schema cycle;
static const sbx_schema_field cycle_fields[] = {
    {.key = "again", .type = SBX_SCHEMA_SECTION, .section = &cycle}, {.key = NULL}};
static const sbx_schema cycle = {SBX_SCHEMA_HEADER, .name = "cyc", .fields = cycle_fields,
                                 .config_size = 8};

static void test_bad_tables(void)
{
    static const sbx_schema_field one_int[] = {{.key = "a", .type = SBX_SCHEMA_INT}, {.key = NULL}};
    static const sbx_schema no_header = {.name = "x", .fields = one_int, .config_size = 8};
    bad_table(&no_header, "(unnamed): invalid config schema: not a table of this libsbx (set "
                          "SBX_SCHEMA_HEADER)");
    static const sbx_schema newer = {.version = SBX_SCHEMA_VERSION + 1,
                                     .struct_size = sizeof(sbx_schema),
                                     .field_size = sizeof(sbx_schema_field),
                                     .name = "x",
                                     .fields = one_int,
                                     .config_size = 8};
    bad_table(&newer, "(unnamed): invalid config schema: not a table of this libsbx (set "
                      "SBX_SCHEMA_HEADER)");
    static const sbx_schema_field no_type[] = {{.key = "a"}, {.key = NULL}};
    static const sbx_schema s1 = {SBX_SCHEMA_HEADER, .name = "x", .fields = no_type,
                                  .config_size = 8};
    bad_table(&s1, "x: invalid config schema: field 'a': no such type (is .type set?)");
    static const sbx_schema small = {SBX_SCHEMA_HEADER, .name = "x", .fields = one_int,
                                     .config_size = 4};
    bad_table(&small, "x: invalid config schema: field 'a': offset past config_size");
    static const sbx_schema_field dup[] = {{.key = "a", .type = SBX_SCHEMA_INT},
                                           {.key = "a", .type = SBX_SCHEMA_INT, .offset = 8},
                                           {.key = NULL}};
    static const sbx_schema s2 = {SBX_SCHEMA_HEADER, .name = "x", .fields = dup, .config_size = 16};
    bad_table(&s2, "x: invalid config schema: field 'a': the key or alias is another field's");
    static const sbx_schema_field overlap[] = {{.key = "a", .type = SBX_SCHEMA_INT},
                                               {.key = "b", .type = SBX_SCHEMA_BOOL, .offset = 4},
                                               {.key = NULL}};
    static const sbx_schema s3 = {SBX_SCHEMA_HEADER, .name = "x", .fields = overlap,
                                  .config_size = 16};
    bad_table(&s3, "x: invalid config schema: field 'b': fills bytes another field fills");
    static const sbx_schema_field flags[] = {
        {.key = "a", .type = SBX_SCHEMA_INT, .flags = 1u << 30}, {.key = NULL}};
    static const sbx_schema s4 = {SBX_SCHEMA_HEADER, .name = "x", .fields = flags,
                                  .config_size = 8};
    bad_table(&s4, "x: invalid config schema: field 'a': flags this libsbx does not know");
    static const sbx_schema_field range[] = {{.key = "a",
                                              .type = SBX_SCHEMA_INT,
                                              .flags = SBX_SCHEMA_HAS_MIN | SBX_SCHEMA_HAS_MAX,
                                              .int_min = 5,
                                              .int_max = 1},
                                             {.key = NULL}};
    static const sbx_schema s5 = {SBX_SCHEMA_HEADER, .name = "x", .fields = range,
                                  .config_size = 8};
    bad_table(&s5, "x: invalid config schema: field 'a': int_min > int_max");
    static const sbx_schema_field no_choices[] = {{.key = "a", .type = SBX_SCHEMA_ENUM},
                                                  {.key = NULL}};
    static const sbx_schema s6 = {SBX_SCHEMA_HEADER, .name = "x", .fields = no_choices,
                                  .config_size = 8};
    bad_table(&s6, "x: invalid config schema: field 'a': an enum needs choices, NULL-ended");
    bad_table(&cycle, "cyc: invalid config schema: field 'again': sections nest too deep (a "
                      "cycle?)");
    static const sbx_schema_field pos_code[] = {{.key = "a", .type = SBX_SCHEMA_INT, .code = 3},
                                                {.key = NULL}};
    static const sbx_schema s7 = {SBX_SCHEMA_HEADER, .name = "x", .fields = pos_code,
                                  .config_size = 8};
    bad_table(&s7, "x: invalid config schema: field 'a': a code must be a negative SBX_E* code");
    sbx_error *e = NULL;
    char buf[8];
    TAP_EQ_INT(sbx_schema_parse(NULL, "{}", buf, &e), SBX_EINVAL);
    sbx_error_free(e);
}

/*
 * The ABI grows by appending: a table whose entries are larger than this
 * library's (a provider built with members appended later) is read by its
 * own field_size, and the members this library knows still work.
 */
struct wide_field {
    sbx_schema_field f;
    long long appended[4];
};

static void test_tables_grow(void)
{
    static const struct wide_field wide[] = {
        {.f = {.key = "a", .type = SBX_SCHEMA_INT, .default_json = "7"}, .appended = {1, 2}},
        {.f = {.key = "b", .type = SBX_SCHEMA_STRING, .offset = 8}, .appended = {3}},
        {.f = {.key = NULL}},
    };
    static const sbx_schema s = {.version = SBX_SCHEMA_VERSION,
                                 .struct_size = sizeof(sbx_schema),
                                 .field_size = sizeof(struct wide_field),
                                 .name = "wide",
                                 .fields = &wide[0].f,
                                 .config_size = 16};
    struct {
        int64_t a;
        char *b;
    } c;
    parse_ok(&s, "{\"b\": \"x\"}", &c);
    TAP_EQ_INT(c.a, 7);
    TAP_EQ_STR(c.b, "x");
    sbx_schema_free(&s, &c);
    TAP_NULL(c.b);
    refused_by(&s, 16, "{\"c\": 1}", SBX_ETYPE, "wide: unknown key 'c' (known: a, b)");
}

/*
 * The local provider's config, parsed by the schema since, answers with the
 * messages and codes it gave when it parsed by hand (src/providers/local.c
 * before the schema): the same words, the same order of checks.
 */
static void local_refuses(const char *cfg, int code, const char *want)
{
    char *text = NULL;
    if (asprintf(&text, "{\"local\": %s}", cfg) < 0)
        TAP_FAIL("out of memory");
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    int rc = sbx_provider_new(text, &p, &e);
    if (rc != code || !e || strcmp(sbx_error_message(e), want) != 0)
        TAP_FAIL("%s:\n  got  %d \"%s\"\n  want %d \"%s\"", cfg, rc, e ? sbx_error_message(e) : "",
                 code, want);
    TAP_NULL(p);
    sbx_error_free(e);
    free(text);
}

static void test_local_provider_messages(void)
{
    const char *p = "local provider config: ";
    char want[512];
    snprintf(want, sizeof(want),
             "%sunknown key 'bogus'; known keys: workspace_root, shell, default_timeout_s, "
             "concurrency, max_output_bytes, state_dir",
             p);
    local_refuses("{\"bogus\": 1}", SBX_ETYPE, want);
    local_refuses("{\"concurrency\": 0, \"bogus\": 1}", SBX_ETYPE, want);
    snprintf(want, sizeof(want), "%sworkspace_root must be a non-empty path string", p);
    local_refuses("{\"workspace_root\": \"\"}", SBX_ETYPE, want);
    local_refuses("{\"workspace_root\": 3}", SBX_ETYPE, want);
    snprintf(want, sizeof(want), "%sshell must be a non-empty path string, like \"/bin/sh\"", p);
    local_refuses("{\"shell\": \"\"}", SBX_ETYPE, want);
    local_refuses("{\"shell\": [\"sh\"], \"concurrency\": 0}", SBX_ETYPE, want);
    snprintf(want, sizeof(want),
             "%sdefault_timeout_s must be a number of seconds >= 0, or null for no timeout", p);
    local_refuses("{\"default_timeout_s\": -1}", SBX_ETYPE, want);
    local_refuses("{\"default_timeout_s\": \"5\"}", SBX_ETYPE, want);
    local_refuses("{\"default_timeout_s\": true}", SBX_ETYPE, want);
    snprintf(want, sizeof(want), "%sconcurrency must be a positive integer (execs running at once)",
             p);
    local_refuses("{\"concurrency\": 0}", SBX_EINVAL, want);
    local_refuses("{\"concurrency\": 1000001}", SBX_EINVAL, want);
    local_refuses("{\"concurrency\": 2.0}", SBX_EINVAL, want);
    local_refuses("{\"concurrency\": null}", SBX_EINVAL, want);
    snprintf(want, sizeof(want),
             "%smax_output_bytes must be a positive integer (bytes kept per stream)", p);
    local_refuses("{\"max_output_bytes\": 0}", SBX_EINVAL, want);
    local_refuses("{\"max_output_bytes\": \"1\"}", SBX_EINVAL, want);
    snprintf(want, sizeof(want),
             "%sstate_dir must be an absolute path (where box records go), or null for the "
             "default",
             p);
    local_refuses("{\"state_dir\": \"rel/dir\"}", SBX_ETYPE, want);
    local_refuses("{\"state_dir\": \"\"}", SBX_ETYPE, want);
    local_refuses("{\"state_dir\": 1}", SBX_ETYPE, want);
    /* What it takes, it still takes. */
    sbx_provider *pr = NULL;
    TAP_OK(sbx_provider_new("{\"local\": {\"workspace_root\": null, \"shell\": null,"
                            " \"default_timeout_s\": null, \"concurrency\": 1000000,"
                            " \"max_output_bytes\": 9223372036854775807, \"state_dir\": null}}",
                            &pr, &e_));
    sbx_provider_free(pr);
    TAP_OK(sbx_provider_new("{\"local\": {\"shell\": \"sh\", \"default_timeout_s\": 0,"
                            " \"workspace_root\": \"rel\"}}",
                            &pr, &e_));
    sbx_provider_free(pr);
}

TAP_MAIN(TAP(test_every_type_taken), TAP(test_wrong_types), TAP(test_ranges), TAP(test_defaults),
         TAP(test_env_fallback), TAP(test_required), TAP(test_null), TAP(test_unknown_keys),
         TAP(test_aliases), TAP(test_secrets_never_shown), TAP(test_hostile_keys),
         TAP(test_failure_frees_everything), TAP(test_dump), TAP(test_describe),
         TAP(test_bad_tables), TAP(test_tables_grow), TAP(test_local_provider_messages))
