/*
 * Hostile specs and configs (issue #8): text that used to blow up the YAML
 * parser, numbers that were silently dropped, text cut at a NUL byte, and
 * env lists that took quadratic time. Each is refused with a message that
 * names what was wrong, or (for large but valid input) completes under the
 * test's alarm.
 */
#include "tap.h"
#include "common.h"
#include "lib/err.h"

#include "core/internal.h"

#include <math.h>
#include <stdio.h>

/* Parses `text` as config and expects a refusal whose message holds `want`. */
static void expect_config_refused(const char *text, const char *want)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_config_to_json(text, &out, &e), SBX_EINVAL);
    TAP_NULL(out);
    TAP_CONTAINS(sbx_error_message(e), want);
    sbx_error_free(e);
}

static void expect_spec_refused(const char *text, int code, const char *want)
{
    sbx_spec *s = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_spec_from_json(text, &s, &e), code);
    TAP_NULL(s);
    TAP_CONTAINS(sbx_error_message(e), want);
    sbx_error_free(e);
}

/* --- YAML ------------------------------------------------------------------ */

static void test_yaml_mapping_keys_are_refused(void)
{
    /*
     * Each level used the level below, as JSON text, as its key: the escapes
     * doubled per level (22 levels: 155 bytes of YAML gave 8 MiB; 30 levels,
     * 2 GiB). PyYAML refuses such keys as unhashable.
     */
    sbx_buf b = { 0 };
    for (int i = 0; i < 22; i++)
        sbx__buf_append(&b, "[{", 2);
    sbx__buf_append(&b, "a", 1);
    for (int i = 0; i < 22; i++)
        sbx__buf_append(&b, ": 1}]", 5);
    expect_config_refused(b.data, "a list used as a mapping key");
    sbx__buf_free(&b);
    expect_config_refused("? {a: 1}\n: 1\n", "line 1, column 3: a mapping used as a mapping key");
    expect_config_refused("x:\n  [1, 2]: y\n", "line 2, column 3: a list used as a mapping key");
    /* An alias of a mapping is a mapping too. */
    expect_config_refused("a: &m {k: v}\nb: {*m : 1}\n", "a mapping used as a mapping key");
    /* Scalar keys still become text, as before. */
    char *out = NULL;
    TAP_OK(sbx_config_to_json("1: a\n~: b\n", &out, &e_));
    TAP_EQ_STR(out, "{\"1\":\"a\",\"None\":\"b\"}");
    free(out);
}

static void test_yaml_long_key_is_refused(void)
{
    sbx_buf b = { 0 };
    /* An explicit key: libyaml itself limits implicit ones to 1024 characters. */
    sbx__buf_append(&b, "? ", 2);
    for (int i = 0; i < 70000; i++)
        sbx__buf_append(&b, "k", 1);
    sbx__buf_append(&b, "\n: v\n", 6);
    expect_config_refused(b.data, "a mapping key longer than 65536 bytes");
    sbx__buf_free(&b);
}

static void test_yaml_aliased_text_is_bounded(void)
{
    /*
     * 60 KB of text aliased 30 x 30 times: 900 values, far under the node
     * bound, but 54 MB once expanded (it used to be built).
     */
    sbx_buf b = { 0 };
    sbx__buf_append(&b, "s: &s \"", 7);
    for (int i = 0; i < 60000; i++)
        sbx__buf_append(&b, "x", 1);
    sbx__buf_append(&b, "\"\nl1: &l1 [", 11);
    for (int i = 0; i < 30; i++)
        sbx__buf_printf(&b, "%s*s", i ? ", " : "");
    sbx__buf_append(&b, "]\nl2: [", 7);
    for (int i = 0; i < 30; i++)
        sbx__buf_printf(&b, "%s*l1", i ? ", " : "");
    sbx__buf_append(&b, "]\n", 2);
    expect_config_refused(b.data, "line 3: the document expands to more than 32 MiB of text");
    sbx__buf_free(&b);
}

static void test_yaml_many_anchors_complete(void)
{
    /* 100,000 anchors and as many aliases: a hashed lookup, not a scan per alias. */
    const int n = tap_bulk(100000);
    sbx_buf b = { 0 };
    for (int i = 0; i < n; i++)
        sbx__buf_printf(&b, "k%d: &a%d v%d\n", i, i, i);
    for (int i = 0; i < n; i++)
        sbx__buf_printf(&b, "r%d: *a%d\n", i, i);
    char *out = NULL;
    TAP_OK(sbx_config_to_json(b.data, &out, &e_));
    json_t *v = json_loads(out, 0, NULL);
    TAP_EQ_INT((long long)json_object_size(v), 2 * n);
    char rk[16], rv[16];
    snprintf(rk, sizeof(rk), "r%d", n - 1);
    snprintf(rv, sizeof(rv), "v%d", n - 1);
    TAP_EQ_STR(json_string_value(json_object_get(v, rk)), rv);
    TAP_EQ_STR(json_string_value(json_object_get(v, "r0")), "v0");
    json_decref(v);
    free(out);
    sbx__buf_free(&b);
}

static void test_interpolation_is_bounded(void)
{
    /* One 1 MiB variable used 40 times would be 40 MiB of text. */
    char *big = malloc((1u << 20) + 1);
    memset(big, 'v', 1u << 20);
    big[1u << 20] = 0;
    TAP_EQ_INT(setenv("SBX_TEST_BIG", big, 1), 0);
    free(big);
    sbx_buf b = { 0 };
    sbx__buf_append(&b, "a: &x ${oc.env:SBX_TEST_BIG}\nl: [", 33);
    for (int i = 0; i < 40; i++)
        sbx__buf_printf(&b, "%s*x", i ? ", " : "");
    sbx__buf_append(&b, "]\n", 2);
    expect_config_refused(b.data, "more than 32 MiB of text in this document");
    /* A few uses are fine. */
    char *out = NULL;
    TAP_OK(sbx_config_to_json("a: ${oc.env:SBX_TEST_BIG}\nb: x${oc.env:SBX_TEST_BIG}\n", &out,
                              &e_));
    TAP_EQ_INT((long long)strlen(out), 2 * (1 << 20) + 16);
    free(out);
    sbx__buf_free(&b);
    unsetenv("SBX_TEST_BIG");
}

static void test_json_depth_is_bounded(void)
{
    /* jansson stops at 2048 levels; the text then fails as YAML at 256. */
    sbx_buf b = { 0 };
    for (int i = 0; i < 5000; i++)
        sbx__buf_append(&b, "[", 1);
    for (int i = 0; i < 5000; i++)
        sbx__buf_append(&b, "]", 1);
    expect_config_refused(b.data, "nesting deeper than 256 levels");
    expect_spec_refused(b.data, SBX_EINVAL, "nesting deeper than 256 levels");
    sbx__buf_free(&b);
}

/* --- spec values ------------------------------------------------------------ */

static void test_spec_negative_numbers_are_refused(void)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        { "{\"ttl_s\": -1}", "ttl_s must be 0 or more seconds, got -1" },
        { "{\"ttl_s\": -0.5}", "ttl_s must be 0 or more seconds, got -0.5" },
        { "{\"ttl_s\": \"-30\"}", "ttl_s must be 0 or more seconds" },
        { "{\"ready_timeout_s\": -5}", "ready_timeout_s must be 0 or more seconds" },
        { "{\"resources\": {\"memory_mib\": -5}}", "resources.memory_mib must be 0 or more, got -5" },
        { "{\"resources\": {\"memory_mib\": \"-512\"}}", "resources.memory_mib must be 0 or more" },
        { "{\"resources\": {\"disk_gib\": -1}}", "resources.disk_gib must be 0 or more, got -1" },
        { "{\"resources\": {\"disk_gib\": -2.5}}", "resources.disk_gib must be 0 or more, got -2" },
        { "{\"resources\": {\"gpu\": -1}}", "resources.gpu must be 0 or more" },
        { "{\"resources\": {\"cpu\": -0.5}}", "resources.cpu must be 0 or more, got -0.5" },
        { "{\"resources\": {\"cpu\": \"-2\"}}", "resources.cpu must be 0 or more" },
        { "ttl_s: -1\n", "ttl_s must be 0 or more seconds" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++)
        expect_spec_refused(cases[i].json, SBX_EINVAL, cases[i].want);
    /* Each message says what to write instead. */
    expect_spec_refused("{\"resources\": {\"memory_mib\": -5}}", SBX_EINVAL,
                        "leave it out (or null) for no limit");
    /* null still means None, and 0 stays 0. */
    sbx_spec *s = NULL;
    TAP_OK(sbx_spec_from_json("{\"ttl_s\": null, \"resources\": {\"memory_mib\": 0}}", &s, &e_));
    double d;
    long long n = -7;
    TAP_EQ_INT(sbx_spec_get_ttl(s, &d), 0);
    TAP_EQ_INT(sbx_spec_get_memory_mib(s, &n), 1);
    TAP_EQ_INT(n, 0);
    sbx_spec_free(s);
}

static void test_spec_non_finite_numbers_are_refused(void)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        { "{\"ttl_s\": \"inf\"}", "ttl_s must be a finite number of seconds" },
        { "ttl_s: .inf\n", "cannot be represented" },
        { "ttl_s: 1e400\n", "cannot be represented" },
        { "{\"ttl_s\": 1e400}", "cannot be represented" },
        { "{\"ready_timeout_s\": \"nan\"}", "ready_timeout_s must be a finite number" },
        { "{\"resources\": {\"cpu\": \"inf\"}}", "resources.cpu must be a finite number" },
        { "{\"resources\": {\"cpu\": \"-inf\"}}", "resources.cpu must be a finite number" },
        { "{\"resources\": {\"memory_mib\": \"1e400\"}}", "resources.memory_mib" },
        /* What Python's json.dumps writes for float('inf') and float('nan'). */
        { "{\"ttl_s\": Infinity}", "ttl_s must be a finite number of seconds" },
        { "{\"resources\": {\"cpu\": NaN}}", "resources.cpu must be a finite number" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++)
        expect_spec_refused(cases[i].json, SBX_EINVAL, cases[i].want);
}

static void test_spec_huge_numbers_are_refused(void)
{
    /* Finite but past what a millisecond count or a byte count can hold. */
    static const struct {
        const char *json, *want;
    } cases[] = {
        { "{\"ttl_s\": 1e300}", "ttl_s must be at most 1000000000 seconds (about 31 years)" },
        { "{\"ready_timeout_s\": \"2e9\"}", "ready_timeout_s must be at most 1000000000 seconds" },
        { "{\"resources\": {\"memory_mib\": 9223372036854775807}}",
          "resources.memory_mib must be at most 1099511627776, got 9223372036854775807" },
        { "{\"resources\": {\"disk_gib\": 1e12}}", "resources.disk_gib must be at most 1073741824" },
        { "{\"resources\": {\"gpu\": \"99999999999\"}}", "resources.gpu must be at most" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++)
        expect_spec_refused(cases[i].json, SBX_EINVAL, cases[i].want);
    sbx_spec *s = sbx_spec_new();
    TAP_EQ_INT(sbx_spec_set_ttl(s, 1e300), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_ready_timeout(s, 2e9), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_memory_mib(s, 9223372036854775807LL), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_disk_gib(s, 1LL << 40), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_ttl(s, 1e9), SBX_OK);
    TAP_EQ_INT(sbx_spec_set_memory_mib(s, 1LL << 40), SBX_OK);
    sbx_spec_free(s);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_EQ_INT(sbx_exec_opts_set_timeout(o, 1e300), SBX_EINVAL);
    TAP_EQ_INT(sbx_exec_opts_set_timeout(o, 1e9), SBX_OK);
    sbx_exec_opts_free(o);
}

static void test_spec_setters_refuse_bad_numbers(void)
{
    sbx_spec *s = sbx_spec_new();
    TAP_EQ_INT(sbx_spec_set_ttl(s, 60), SBX_OK);
    TAP_EQ_INT(sbx_spec_set_ttl(s, -5), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_ttl(s, INFINITY), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_ttl(s, NAN), SBX_EINVAL);
    double d = 0;
    /* A refused value leaves the field as it was. */
    TAP_EQ_INT(sbx_spec_get_ttl(s, &d), 1);
    TAP_TRUE(d == 60);
    TAP_EQ_INT(sbx_spec_set_ready_timeout(s, -0.5), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_cpu(s, -0.5), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_cpu(s, INFINITY), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_memory_mib(s, 512), SBX_OK);
    TAP_EQ_INT(sbx_spec_set_memory_mib(s, -5), SBX_EINVAL);
    long long n = 0;
    TAP_EQ_INT(sbx_spec_get_memory_mib(s, &n), 1);
    TAP_EQ_INT(n, 512);
    TAP_EQ_INT(sbx_spec_set_disk_gib(s, -2), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_gpu(s, -3), SBX_EINVAL);
    /* -1 is the documented None. */
    TAP_EQ_INT(sbx_spec_set_ttl(s, -1), SBX_OK);
    TAP_EQ_INT(sbx_spec_get_ttl(s, &d), 0);
    TAP_EQ_INT(sbx_spec_set_memory_mib(s, -1), SBX_OK);
    TAP_EQ_INT(sbx_spec_get_memory_mib(s, &n), 0);
    sbx_spec_free(s);

    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_EQ_INT(sbx_exec_opts_set_timeout(o, INFINITY), SBX_EINVAL);
    TAP_EQ_INT(sbx_exec_opts_set_timeout(o, NAN), SBX_EINVAL);
    TAP_EQ_INT(sbx_exec_opts_set_timeout(o, -1), SBX_OK);
    sbx_exec_opts_free(o);
}

static void test_spec_relative_workdir_is_refused(void)
{
    expect_spec_refused("{\"workdir\": \"work\"}", SBX_EINVAL,
                        "workdir must be an absolute path in the box, got 'work'");
    expect_spec_refused("workdir: ./x\n", SBX_EINVAL, "absolute path");
    sbx_spec *s = sbx_spec_new();
    TAP_EQ_INT(sbx_spec_set_workdir(s, "relative/dir"), SBX_EINVAL);
    TAP_NULL(sbx_spec_workdir(s));
    TAP_EQ_INT(sbx_spec_set_workdir(s, "/work"), SBX_OK);
    TAP_EQ_STR(sbx_spec_workdir(s), "/work");
    TAP_EQ_INT(sbx_spec_set_workdir(s, NULL), SBX_OK);
    sbx_spec_free(s);
}

static void test_spec_nul_bytes_are_refused(void)
{
    expect_spec_refused("{\"env\": {\"A\": \"x\\u0000y\"}}", SBX_EINVAL,
                        "env['A'] contains a NUL byte (after 'x')");
    /* jansson refuses a NUL in a key; the text then fails as YAML, which would have cut it. */
    expect_spec_refused("{\"env\": {\"A\\u0000B\": \"x\"}}", SBX_EINVAL,
                        "a mapping key holding a NUL byte");
    expect_spec_refused("{\"workdir\": \"/work\\u0000/../etc\"}", SBX_EINVAL,
                        "workdir contains a NUL byte (after '/work')");
    expect_spec_refused("{\"image\": \"alpine\\u0000x\"}", SBX_EINVAL, "image contains a NUL byte");
    expect_spec_refused("{\"metadata\": {\"k\": \"a\\u0000\"}}", SBX_EINVAL,
                        "metadata['k'] contains a NUL byte");
    expect_spec_refused("{\"entrypoint\": [\"sh\", \"-c\\u0000x\"]}", SBX_EINVAL,
                        "entrypoint contains a NUL byte");
    /* A file's body is bytes: a NUL is kept, not cut. */
    sbx_spec *s = NULL;
    TAP_OK(sbx_spec_from_json("{\"files\": {\"/f\": \"a\\u0000b\"}}", &s, &e_));
    const char *path;
    const void *data;
    size_t len = 0;
    sbx_spec_file_at(s, 0, &path, &data, &len);
    TAP_EQ_INT((long long)len, 3);
    TAP_TRUE(memcmp(data, "a\0b", 3) == 0);
    sbx_spec_free(s);
}

/* --- env lists ------------------------------------------------------------- */

static void test_env_100k_entries(void)
{
    /*
     * 100,000 variables through every setter: this took ~100 s of CPU with a
     * scan per insert. Later sets of a key replace its value in place.
     */
    const int n = tap_bulk(100000);
    char last[16];
    snprintf(last, sizeof(last), "E%05x", n - 1);
    sbx_spec *s = sbx_spec_new();
    sbx_exec_opts *o = sbx_exec_opts_new();
    char k[16], v[16];
    for (int i = 0; i < n; i++) {
        snprintf(k, sizeof(k), "E%05x", i);
        snprintf(v, sizeof(v), "%d", i);
        TAP_EQ_INT(sbx_spec_set_env(s, k, v), SBX_OK);
        TAP_EQ_INT(sbx_exec_opts_set_env(o, k, v), SBX_OK);
    }
    TAP_EQ_INT(sbx_spec_set_env(s, "E00000", "again"), SBX_OK);
    TAP_EQ_INT(sbx_exec_opts_set_env(o, "E00000", "again"), SBX_OK);
    TAP_EQ_INT((long long)sbx_spec_env_count(s), n);
    TAP_EQ_INT((long long)sbx_exec_opts_env_count(o), n);
    const char *key, *val;
    sbx_spec_env_at(s, 0, &key, &val);
    TAP_EQ_STR(key, "E00000");
    TAP_EQ_STR(val, "again");
    sbx_spec_env_at(s, (size_t)n - 1, &key, &val);
    TAP_EQ_STR(key, last);
    TAP_EQ_INT(atoi(val), n - 1);
    sbx_exec_opts_env_at(o, 0, &key, &val);
    TAP_EQ_STR(val, "again");
    /* A copy keeps the order and the values. */
    sbx_spec *c = sbx_spec_copy(s);
    sbx_spec_env_at(c, 5, &key, &val);
    TAP_EQ_STR(key, "E00005");
    TAP_EQ_STR(val, "5");
    sbx_spec_free(c);
    sbx_exec_opts_free(o);
    sbx_spec_free(s);

    /* The same from spec text, where the last of a duplicated key wins. */
    sbx_buf b = { 0 };
    sbx__buf_append(&b, "{\"env\": {", 9);
    for (int i = 0; i < n; i++)
        sbx__buf_printf(&b, "%s\"E%05x\": \"%d\"", i ? ", " : "", i, i);
    sbx__buf_append(&b, ", \"E00007\": \"last\"}}", 20);
    s = NULL;
    TAP_OK(sbx_spec_from_json(b.data, &s, &e_));
    TAP_EQ_INT((long long)sbx_spec_env_count(s), n);
    sbx_spec_env_at(s, 7, &key, &val);
    TAP_EQ_STR(key, "E00007");
    TAP_EQ_STR(val, "last");
    sbx_spec_free(s);
    sbx__buf_free(&b);
}

static void test_files_and_metadata_100k_entries(void)
{
    /* A scan per added file made 100,000 of them take 11 s. */
    const int n = tap_bulk(100000);
    sbx_buf b = { 0 };
    sbx__buf_append(&b, "{\"files\": {", 11);
    for (int i = 0; i < n; i++)
        sbx__buf_printf(&b, "%s\"/f%d\": \"%d\"", i ? ", " : "", i, i);
    sbx__buf_append(&b, "}, \"metadata\": {", 16);
    for (int i = 0; i < n; i++)
        sbx__buf_printf(&b, "%s\"m%d\": \"%d\"", i ? ", " : "", i, i);
    sbx__buf_append(&b, "}}", 2);
    sbx_spec *s = NULL;
    TAP_OK(sbx_spec_from_json(b.data, &s, &e_));
    sbx__buf_free(&b);
    TAP_EQ_INT((long long)sbx_spec_file_count(s), n);
    TAP_EQ_INT((long long)sbx_spec_metadata_count(s), n);
    /* Adding a path again replaces its body in place. */
    TAP_EQ_INT(sbx_spec_add_file(s, "/f5", "new", 3), SBX_OK);
    TAP_EQ_INT((long long)sbx_spec_file_count(s), n);
    const char *path;
    const void *data;
    size_t len;
    sbx_spec_file_at(s, 5, &path, &data, &len);
    TAP_EQ_STR(path, "/f5");
    TAP_EQ_INT((long long)len, 3);
    TAP_TRUE(memcmp(data, "new", 3) == 0);
    sbx_spec *c = sbx_spec_copy(s);
    TAP_EQ_INT((long long)sbx_spec_file_count(c), n);
    sbx_spec_file_at(c, (size_t)n - 1, &path, &data, &len);
    char lastp[16];
    snprintf(lastp, sizeof(lastp), "/f%d", n - 1);
    TAP_EQ_STR(path, lastp);
    sbx_spec_free(c);
    sbx_spec_free(s);
}

static void test_env_size_is_bounded(void)
{
    sbx_spec *s = sbx_spec_new();
    /* One variable past MAX_ARG_STRLEN (128 KiB with "K=" and the NUL). */
    char *big = malloc(200000);
    memset(big, 'x', 199999);
    big[199999] = 0;
    TAP_EQ_INT(sbx_spec_set_env(s, "BIG", big), SBX_EINVAL);
    TAP_EQ_INT((long long)sbx_spec_env_count(s), 0);
    sbx_exec_opts *o = sbx_exec_opts_new();
    TAP_EQ_INT(sbx_exec_opts_set_env(o, "BIG", big), SBX_EINVAL);
    sbx_exec_opts_free(o);
    /* 100 KiB variables: the 21st passes 2 MiB in all. */
    big[100000] = 0;
    char k[16];
    int set = 0;
    for (int i = 0; i < 30; i++) {
        snprintf(k, sizeof(k), "V%d", i);
        if (sbx_spec_set_env(s, k, big) == SBX_OK)
            set++;
    }
    TAP_EQ_INT(set, 20);
    /* Replacing a value by a shorter one still fits. */
    TAP_EQ_INT(sbx_spec_set_env(s, "V0", "short"), SBX_OK);
    sbx_spec_free(s);

    big[100000] = 'x';
    sbx_buf b = { 0 };
    sbx__buf_printf(&b, "{\"env\": {\"A\": \"1\", \"BIG\": \"%s\"}}", big);
    expect_spec_refused(b.data, SBX_EINVAL, "Sandbox spec env is too large at 'BIG'");
    sbx__buf_free(&b);
    free(big);
}

TAP_MAIN(TAP(test_yaml_mapping_keys_are_refused), TAP(test_yaml_long_key_is_refused),
         TAP(test_yaml_aliased_text_is_bounded), TAP(test_yaml_many_anchors_complete),
         TAP(test_interpolation_is_bounded), TAP(test_json_depth_is_bounded),
         TAP(test_spec_negative_numbers_are_refused),
         TAP(test_spec_non_finite_numbers_are_refused), TAP(test_spec_huge_numbers_are_refused),
         TAP(test_spec_setters_refuse_bad_numbers), TAP(test_spec_relative_workdir_is_refused),
         TAP(test_spec_nul_bytes_are_refused), TAP(test_env_100k_entries),
         TAP(test_files_and_metadata_100k_entries),
         TAP(test_env_size_is_bounded))
