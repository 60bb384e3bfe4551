/*
 * Config text and provider config resolution (reference-api.md J): named and
 * inline references, every message, the candidate list, default_metadata,
 * ${oc.env:...} interpolation, and how YAML scalars are typed.
 */
#include "tap.h"
#include "common.h"
#include "lib/err.h"

#include "core/internal.h"

#include <math.h>
#include <stdio.h>

static char *to_json(const char *text)
{
    char *out = NULL;
    TAP_OK(sbx_config_to_json(text, &out, &e_));
    return out;
}

static void expect_json(const char *text, const char *want)
{
    char *got = to_json(text);
    TAP_EQ_STR(got, want);
    free(got);
}

static char *resolve(const char *ref, const char *doc)
{
    char *out = NULL;
    TAP_OK(sbx_resolve_provider_config(ref, doc, &out, &e_));
    return out;
}

static char *metadata(const char *ref, const char *doc)
{
    char *out = NULL;
    TAP_OK(sbx_resolve_provider_metadata(ref, doc, &out, &e_));
    return out;
}

static void expect_resolved(const char *ref, const char *doc, const char *want)
{
    char *got = resolve(ref, doc);
    TAP_EQ_STR(got, want);
    free(got);
}

static void expect_metadata(const char *ref, const char *doc, const char *want)
{
    char *got = metadata(ref, doc);
    TAP_EQ_STR(got, want);
    free(got);
}

static const char DOC[] = "sandbox_main:\n"
                          "  docker:\n"
                          "    image_pull: always\n"
                          "    cpus: 2\n"
                          "  default_metadata:\n"
                          "    sandbox-api: docker\n"
                          "zeta:\n"
                          "  fake: {}\n"
                          "two_providers:\n"
                          "  a: {}\n"
                          "  b: {}\n"
                          "only_metadata:\n"
                          "  default_metadata: {k: v}\n"
                          "plain: text\n"
                          "a_list: [1, 2]\n"
                          "nothing: null\n"
                          "count: 3\n";

/* --- J.69: named and inline references ------------------------------------ */

static void test_named_reference(void)
{
    /* default_metadata is not part of the provider config (TS:578). */
    expect_resolved("sandbox_main", DOC, "{\"docker\":{\"image_pull\":\"always\",\"cpus\":2}}");
    /* A quoted name is still a name; so is a JSON document as the merged config. */
    expect_resolved("'zeta'", "{\"zeta\": {\"fake\": {\"x\": [1]}}}", "{\"fake\":{\"x\":[1]}}");
    expect_resolved("  zeta  ", DOC, "{\"fake\":{}}");
}

static void test_inline_reference(void)
{
    static const char *const forms[] = {
        "{\"fake\": {\"a\": 1}}",
        "{fake: {a: 1}}",
        "fake:\n  a: 1\n",
        "  {\"fake\": {\"a\": 1}, \"default_metadata\": {\"team\": \"x\"}}",
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(forms); i++) {
        /* An inline mapping needs no merged config. */
        expect_resolved(forms[i], NULL, "{\"fake\":{\"a\":1}}");
    }
    /* A null provider config stays null: create_provider treats it as {}. */
    expect_resolved("{\"fake\": null}", NULL, "{\"fake\":null}");
}

static void test_resolved_config_creates_provider(void)
{
    char *cfg = resolve("zeta", DOC);
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    TAP_EQ_STR(sbx_provider_name(p), "fake");
    sbx_provider_free(p);
    free(cfg);
}

/* --- J.70: string errors -------------------------------------------------- */

static void test_empty_reference(void)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_resolve_provider_config("", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox provider reference must be a non-empty string");
    TAP_EQ_INT(sbx_resolve_provider_metadata("", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox provider reference must be a non-empty string");
    TAP_NULL(out);
    sbx_error_free(e);
}

static void test_missing_reference_lists_candidates(void)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_resolve_provider_config("sandbox", DOC, &out, ERR(e)), SBX_EINVAL);
    /*
     * Candidates: top-level mappings with exactly one non-reserved key, sorted.
     * two_providers has two, only_metadata none, the scalars are not mappings.
     */
    TAP_EQ_STR(sbx_error_message(e),
               "Sandbox provider reference 'sandbox' is not defined in the merged config. Define "
               "a top-level 'sandbox:' block (e.g. via "
               "nemo_gym/sandbox/providers/<provider>/configs/<provider>.yaml) and include it in "
               "your config_paths. Available sandbox configs: 'sandbox_main', 'zeta'");
    /* A key whose value is null is "not defined" too. */
    TAP_EQ_INT(sbx_resolve_provider_config("nothing", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Sandbox provider reference 'nothing' is not defined");
    /* No merged config at all, or one without candidates: "(none)". */
    TAP_EQ_INT(sbx_resolve_provider_config("sandbox", NULL, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Available sandbox configs: (none)");
    TAP_EQ_INT(sbx_resolve_provider_config("sandbox", "{}", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Available sandbox configs: (none)");
    TAP_EQ_INT(sbx_resolve_provider_config("sandbox", "", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Available sandbox configs: (none)");
    /* The metadata resolver finds blocks the same way. */
    TAP_EQ_INT(sbx_resolve_provider_metadata("sandbox", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Available sandbox configs: 'sandbox_main', 'zeta'");
    /* The name is repr-quoted in the first sentence and bare in the second. */
    TAP_EQ_INT(sbx_resolve_provider_config("it's", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "reference \"it's\" is not defined");
    TAP_CONTAINS(sbx_error_message(e), "Define a top-level 'it's:' block");
    TAP_NULL(out);
    sbx_error_free(e);
}

static void test_merged_config_must_be_mapping(void)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_resolve_provider_config("sandbox", "[1, 2]", &out, ERR(e)), SBX_ETYPE);
    TAP_CONTAINS(sbx_error_message(e), "merged config must be a mapping");
    TAP_EQ_INT(sbx_resolve_provider_config("sandbox", "a: [1,", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "merged config: invalid YAML at line");
    sbx_error_free(e);
}

/* --- J.71: the TypeError ------------------------------------------------------ */

static void test_reference_of_wrong_type(void)
{
    static const struct {
        const char *ref;
        const char *type;
    } cases[] = {
        { "[sandbox]", "list" }, { "42", "int" }, { "1.5", "float" },
        { "true", "bool" },      { "~", "NoneType" }, { "null", "NoneType" },
    };
    char *out = NULL;
    sbx_error *e = NULL;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
        TAP_EQ_INT(sbx_resolve_provider_config(cases[i].ref, DOC, &out, ERR(e)), SBX_ETYPE);
        char *want = sbx__printf("sandbox_provider must be a name reference (str) or a "
                                 "single-key provider mapping, got %s",
                                 cases[i].type);
        TAP_EQ_STR(sbx_error_message(e), want);
        free(want);
        TAP_EQ_INT(sbx_resolve_provider_metadata(cases[i].ref, DOC, &out, ERR(e)), SBX_ETYPE);
        TAP_CONTAINS(sbx_error_message(e), "must be a name reference");
    }
    /* NULL is the reference's None. */
    TAP_EQ_INT(sbx_resolve_provider_config(NULL, DOC, &out, ERR(e)), SBX_ETYPE);
    TAP_CONTAINS(sbx_error_message(e), "must be a name reference (str) or a single-key provider "
                                       "mapping, got NoneType");
    TAP_NULL(out);
    sbx_error_free(e);
}

/* --- J.72-73: block shape ------------------------------------------------- */

static void test_block_must_be_mapping(void)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_resolve_provider_config("plain", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e),
               "Sandbox provider config from reference 'plain' must be a mapping, got: 'text'");
    TAP_EQ_INT(sbx_resolve_provider_config("a_list", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e),
               "Sandbox provider config from reference 'a_list' must be a mapping, got: [1, 2]");
    TAP_EQ_INT(sbx_resolve_provider_metadata("count", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e),
               "Sandbox provider config from reference 'count' must be a mapping, got: 3");
    sbx_error_free(e);
}

static void test_block_needs_exactly_one_provider_key(void)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_resolve_provider_config("two_providers", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e),
               "Sandbox provider config from reference 'two_providers' must have exactly one "
               "provider key {provider_name: config}, got keys: ['a', 'b']");
    /* default_metadata does not count as a provider key. */
    TAP_EQ_INT(sbx_resolve_provider_config("only_metadata", DOC, &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e),
               "Sandbox provider config from reference 'only_metadata' must have exactly one "
               "provider key {provider_name: config}, got keys: []");
    TAP_EQ_INT(sbx_resolve_provider_config("{a: {}, b: {}}", NULL, &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e),
               "Sandbox provider config from inline sandbox_provider config must have exactly one "
               "provider key {provider_name: config}, got keys: ['a', 'b']");
    TAP_EQ_INT(sbx_resolve_provider_config("{}", NULL, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "exactly one provider key");
    /* A broken inline mapping is a parse error, said as such. */
    TAP_EQ_INT(sbx_resolve_provider_config("{fake: [}", NULL, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "inline sandbox_provider config: invalid YAML at line 1");
    TAP_NULL(out);
    sbx_error_free(e);
}

/* --- J.74: default_metadata --------------------------------------------------- */

static void test_default_metadata(void)
{
    expect_metadata("sandbox_main", DOC, "{\"sandbox-api\":\"docker\"}");
    /* Missing gives {}. */
    expect_metadata("zeta", DOC, "{}");
    /* The provider-key count is not checked here. */
    expect_metadata("{a: {}, b: {}, default_metadata: {team: x, n: 1}}", NULL,
                    "{\"team\":\"x\",\"n\":1}");
    expect_metadata("only_metadata", DOC, "{\"k\":\"v\"}");
    /* Falsy values (None, 0, '', [], False) give {} as `x or {}` does. */
    static const char *const falsy[] = { "null", "0", "''", "[]", "false", "{}", "0.0" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(falsy); i++) {
        char *ref = sbx__printf("{fake: {}, default_metadata: %s}", falsy[i]);
        expect_metadata(ref, NULL, "{}");
        free(ref);
    }
}

static void test_default_metadata_must_be_mapping(void)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_resolve_provider_metadata("{fake: {}, default_metadata: text}", NULL, &out,
                                             ERR(e)),
               SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox 'default_metadata' from inline sandbox_provider "
                                     "config must be a mapping, got: 'text'");
    TAP_EQ_INT(sbx_resolve_provider_metadata(
                   "s", "s:\n  fake: {}\n  default_metadata: [a, b]\n", &out, ERR(e)),
               SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e),
               "Sandbox 'default_metadata' from reference 's' must be a mapping, got: ['a', 'b']");
    TAP_NULL(out);
    sbx_error_free(e);
}

/* --- interpolation ------------------------------------------------------------ */

static void test_env_interpolation(void)
{
    setenv("SBX_TEST_HOST", "h1", 1);
    unsetenv("SBX_TEST_PORT");
    const char *doc = "sandbox:\n"
                      "  docker:\n"
                      "    host: ${oc.env:SBX_TEST_HOST}\n"
                      "    port: ${oc.env:SBX_TEST_PORT,8080}\n"
                      "    url: http://${oc.env:SBX_TEST_HOST}:${oc.env:SBX_TEST_PORT,'99'}/x\n"
                      "    gone: ${oc.env:SBX_TEST_PORT,null}\n"
                      "    literal: \\${oc.env:SBX_TEST_HOST}\n"
                      "  default_metadata:\n"
                      "    owner: ${oc.env:SBX_TEST_HOST}\n"
                      "unrelated:\n"
                      "  x: ${oc.env:SBX_TEST_SURELY_UNSET}\n";
    /* oc.env yields strings; a default of null yields None; \${ stays literal. */
    expect_resolved("sandbox", doc,
                    "{\"docker\":{\"host\":\"h1\",\"port\":\"8080\",\"url\":\"http://h1:99/x\","
                    "\"gone\":null,\"literal\":\"${oc.env:SBX_TEST_HOST}\"}}");
    expect_metadata("sandbox", doc, "{\"owner\":\"h1\"}");
    /* Inline mappings are interpolated too. */
    expect_resolved("{fake: {h: '${oc.env:SBX_TEST_HOST}'}}", NULL, "{\"fake\":{\"h\":\"h1\"}}");
}

static void test_env_interpolation_errors(void)
{
    unsetenv("SBX_TEST_SURELY_UNSET");
    char *out = NULL;
    sbx_error *e = NULL;
    const char *doc = "s:\n  fake:\n    x: ${oc.env:SBX_TEST_SURELY_UNSET}\n";
    TAP_EQ_INT(sbx_resolve_provider_config("s", doc, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Environment variable 'SBX_TEST_SURELY_UNSET' not found");
    TAP_EQ_INT(sbx_config_to_json("a: ${oc.env:SBX_TEST_SURELY_UNSET}", &out, ERR(e)),
               SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Environment variable 'SBX_TEST_SURELY_UNSET' not found");
    TAP_EQ_INT(sbx_config_to_json("a: ${now:}", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "unsupported interpolation ${now:}");
    TAP_EQ_INT(sbx_config_to_json("a: ${oc.env:A,${oc.env:B}}", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "unsupported nested interpolation");
    TAP_EQ_INT(sbx_config_to_json("a: x${oc.env:HOME", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "unterminated interpolation");
    TAP_NULL(out);
    sbx_error_free(e);
}

static void test_interpolation_runs_once_per_alias_use(void)
{
    /* A value that looks like an interpolation must not be interpolated again. */
    setenv("SBX_TEST_TRICKY", "${oc.env:SBX_TEST_SURELY_UNSET}", 1);
    unsetenv("SBX_TEST_SURELY_UNSET");
    expect_json("a: &x {v: '${oc.env:SBX_TEST_TRICKY}'}\nb: *x\nc: *x\n",
                "{\"a\":{\"v\":\"${oc.env:SBX_TEST_SURELY_UNSET}\"},"
                "\"b\":{\"v\":\"${oc.env:SBX_TEST_SURELY_UNSET}\"},"
                "\"c\":{\"v\":\"${oc.env:SBX_TEST_SURELY_UNSET}\"}}");
}

static void test_spec_is_not_interpolated(void)
{
    /* Spec values arrive from bindings byte for byte. */
    setenv("SBX_TEST_HOST", "h1", 1);
    sbx_spec *s = NULL;
    TAP_OK(sbx_spec_from_json("{\"env\": {\"A\": \"${oc.env:SBX_TEST_HOST}\"}}", &s, &e_));
    char *out = NULL;
    TAP_OK(sbx_spec_to_json(s, &out, &e_));
    TAP_CONTAINS(out, "\"env\":{\"A\":\"${oc.env:SBX_TEST_HOST}\"}");
    free(out);
    sbx_spec_free(s);
}

/* --- YAML typing -------------------------------------------------------------- */

static void test_yaml_bools_and_nulls(void)
{
    expect_json("a: yes\nb: no\nc: on\nd: off\ne: True\nf: FALSE\ng: ~\nh: null\ni:\nj: Yes\n",
                "{\"a\":true,\"b\":false,\"c\":true,\"d\":false,\"e\":true,\"f\":false,"
                "\"g\":null,\"h\":null,\"i\":null,\"j\":true}");
    /* Quoted, they are strings; so are near misses. */
    expect_json("a: 'yes'\nb: \"no\"\nc: yEs\nd: nul\n",
                "{\"a\":\"yes\",\"b\":\"no\",\"c\":\"yEs\",\"d\":\"nul\"}");
}

static void test_yaml_ints(void)
{
    expect_json("a: 42\nb: -7\nc: 0x1F\nd: 017\ne: 1_000\nf: 0b101\ng: 1:30\nh: +5\ni: -0x1F\n"
                "j: 0\nk: 9223372036854775807\n",
                "{\"a\":42,\"b\":-7,\"c\":31,\"d\":15,\"e\":1000,\"f\":5,\"g\":90,\"h\":5,"
                "\"i\":-31,\"j\":0,\"k\":9223372036854775807}");
    /* Not ints in YAML 1.1 (0o is YAML 1.2), or too large for JSON's int64: text. */
    expect_json("a: 0o17\nb: 08\nc: 12ab\nd: 0x\ne: 99999999999999999999\nf: '7'\n",
                "{\"a\":\"0o17\",\"b\":\"08\",\"c\":\"12ab\",\"d\":\"0x\","
                "\"e\":\"99999999999999999999\",\"f\":\"7\"}");
}

static void test_yaml_floats(void)
{
    char *got = to_json("a: 1.5\nb: 1e3\nc: .5\nd: -2.5E-3\ne: 1_000.5\nf: 1.\ng: 1:30.5\n"
                        "h: 6.02e+23\n");
    json_t *v = json_loads(got, 0, NULL);
    TAP_TRUE(v != NULL);
    static const struct {
        const char *key;
        double value;
    } want[] = { { "a", 1.5 },    { "b", 1000.0 }, { "c", 0.5 },  { "d", -0.0025 },
                 { "e", 1000.5 }, { "f", 1.0 },    { "g", 90.5 }, { "h", 6.02e23 } };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(want); i++) {
        json_t *x = json_object_get(v, want[i].key);
        if (!json_is_real(x))
            TAP_FAIL("%s is not a float in %s", want[i].key, got);
        TAP_TRUE(json_real_value(x) == want[i].value);
    }
    json_decref(v);
    free(got);
    /* Strings: no digit before the dot with a sign, hex floats, two dots. */
    expect_json("a: -.5\nb: 0x1.8p3\nc: 1.2.3\nd: '1.5'\ne: 1e\n",
                "{\"a\":\"-.5\",\"b\":\"0x1.8p3\",\"c\":\"1.2.3\",\"d\":\"1.5\",\"e\":\"1e\"}");
}

static void test_yaml_tags(void)
{
    expect_json("a: !!str 12\nb: !!int '12'\nc: !!float 2\nd: ! 12\ne: !!bool 'yes'\n",
                "{\"a\":\"12\",\"b\":12,\"c\":2.0,\"d\":\"12\",\"e\":true}");
}

static void test_yaml_non_string_keys_become_text(void)
{
    /* Python's str() of the key, as the reference's str(key): YAML 1.1 reads "on" as True. */
    expect_json("1: a\ntrue: b\n~: c\n1.5: d\n1e3: f\n",
                "{\"1\":\"a\",\"True\":\"b\",\"None\":\"c\",\"1.5\":\"d\",\"1000.0\":\"f\"}");
    expect_json("on: e\n", "{\"True\":\"e\"}");
}

static void test_yaml_anchors_and_aliases(void)
{
    expect_json("base: &b {x: 1, y: [1, 2]}\nuse: *b\nscalar: &s hello\nagain: *s\n",
                "{\"base\":{\"x\":1,\"y\":[1,2]},\"use\":{\"x\":1,\"y\":[1,2]},"
                "\"scalar\":\"hello\",\"again\":\"hello\"}");
    /* A redefined anchor: an alias names the latest definition before it. */
    expect_json("a: &x 1\nb: *x\nc: &x 2\nd: *x\n", "{\"a\":1,\"b\":1,\"c\":2,\"d\":2}");
}

static void test_yaml_merge_keys(void)
{
    /* Own keys win; merged keys come first, as PyYAML orders them. */
    expect_json("base: &b {x: 1, y: 2}\nderived:\n  y: 3\n  <<: *b\n",
                "{\"base\":{\"x\":1,\"y\":2},\"derived\":{\"x\":1,\"y\":3}}");
    /* A list of sources: the earlier source wins. */
    char *got = to_json("a: &a {x: 1, y: 2}\nb: &b {y: 5, z: 6}\nd:\n  <<: [*a, *b]\n  w: 0\n");
    json_t *v = json_loads(got, 0, NULL);
    json_t *want = json_loads("{\"x\":1,\"y\":2,\"z\":6,\"w\":0}", 0, NULL);
    TAP_TRUE(json_equal(json_object_get(v, "d"), want));
    json_decref(v);
    json_decref(want);
    free(got);
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_config_to_json("a:\n  <<: 3\n", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "'<<' must merge a mapping");
    sbx_error_free(e);
}

static void test_yaml_errors(void)
{
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_config_to_json("a: [1, 2\nb: 3\n", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "invalid YAML at line 2, column ");
    TAP_EQ_INT(sbx_config_to_json("a:\n  b: 1\n c: 2\n", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "invalid YAML at line 3, column 2");
    /* OmegaConf refuses duplicate keys. */
    TAP_EQ_INT(sbx_config_to_json("a: 1\nb: 2\na: 3\n", &out, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "invalid YAML at line 3, column 1: duplicate key 'a'");
    TAP_EQ_INT(sbx_config_to_json("a: *nope\n", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "unknown alias *nope");
    TAP_EQ_INT(sbx_config_to_json("a: &x [1, *x]\n", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "recursive structures are not supported");
    TAP_EQ_INT(sbx_config_to_json("a: 1\n---\nb: 2\n", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "expected one document");
    TAP_EQ_INT(sbx_config_to_json("a: .inf\n", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "'.inf' cannot be represented in JSON");
    TAP_EQ_INT(sbx_config_to_json("a: \"\\xff\xff\"\n", &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "invalid YAML");
    TAP_NULL(out);
    sbx_error_free(e);
}

static void test_yaml_alias_bomb_is_refused(void)
{
    /* Ten levels of ten aliases would be 10^10 values once expanded. */
    sbx_buf b = { 0 };
    sbx__buf_printf(&b, "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
    for (int i = 1; i < 10; i++) {
        sbx__buf_printf(&b, "l%d: &l%d [", i, i);
        for (int j = 0; j < 10; j++)
            sbx__buf_printf(&b, "%s*l%d", j ? ", " : "", i - 1);
        sbx__buf_printf(&b, "]\n");
    }
    char *out = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_config_to_json(b.data, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "aliases expand to more than 100000 values");
    TAP_NULL(out);
    sbx_error_free(e);
    sbx__buf_free(&b);
}

static void test_yaml_deep_nesting_is_refused(void)
{
    sbx_buf b = { 0 };
    for (int i = 0; i < 300; i++)
        sbx__buf_append(&b, "[", 1);
    for (int i = 0; i < 300; i++)
        sbx__buf_append(&b, "]", 1);
    char *out = NULL;
    sbx_error *e = NULL;
    /* JSON's own parser takes it; the same depth as YAML flow is refused. */
    TAP_OK(sbx_config_to_json(b.data, &out, &e_));
    free(out);
    out = NULL;
    sbx_buf y = { 0 };
    sbx__buf_printf(&y, "a: %s", b.data);
    TAP_EQ_INT(sbx_config_to_json(y.data, &out, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "nesting deeper than 256 levels");
    sbx_error_free(e);
    sbx__buf_free(&b);
    sbx__buf_free(&y);
}

static void test_json_input_keeps_types(void)
{
    expect_json("{\"a\": 1.5, \"b\": [true, null, \"yes\"], \"c\": {\"d\": 10}}",
                "{\"a\":1.5,\"b\":[true,null,\"yes\"],\"c\":{\"d\":10}}");
    expect_json("", "null");
}

/* --- files -------------------------------------------------------------------- */

static void test_load_file(void)
{
    char *path = sbx__printf("%s/conf.yaml", tap_tmpdir());
    TAP_EQ_INT(write_text(path, "sandbox:\n  fake:\n    n: 1\n"), 0);
    char *out = NULL;
    TAP_OK(sbx_config_load_file(path, &out, &e_));
    TAP_EQ_STR(out, "{\"sandbox\":{\"fake\":{\"n\":1}}}");
    /* The loaded JSON serves as the merged config. */
    char *cfg = resolve("sandbox", out);
    TAP_EQ_STR(cfg, "{\"fake\":{\"n\":1}}");
    free(cfg);
    free(out);
    out = NULL;

    sbx_error *e = NULL;
    TAP_EQ_INT(write_text(path, "a: [\n"), 0);
    TAP_EQ_INT(sbx_config_load_file(path, &out, ERR(e)), SBX_EINVAL);
    char *want = sbx__printf("%s: invalid YAML at line 2", path);
    TAP_CONTAINS(sbx_error_message(e), want);
    free(want);
    char *missing = sbx__printf("%s/absent.yaml", tap_tmpdir());
    TAP_EQ_INT(sbx_config_load_file(missing, &out, ERR(e)), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), missing);
    TAP_EQ_INT(sbx_error_errno(e), ENOENT);
    TAP_NULL(out);
    sbx_error_free(e);
    free(missing);
    free(path);
}

TAP_MAIN(TAP(test_named_reference), TAP(test_inline_reference),
         TAP(test_resolved_config_creates_provider), TAP(test_empty_reference),
         TAP(test_missing_reference_lists_candidates), TAP(test_merged_config_must_be_mapping),
         TAP(test_reference_of_wrong_type), TAP(test_block_must_be_mapping),
         TAP(test_block_needs_exactly_one_provider_key), TAP(test_default_metadata),
         TAP(test_default_metadata_must_be_mapping), TAP(test_env_interpolation),
         TAP(test_env_interpolation_errors), TAP(test_interpolation_runs_once_per_alias_use),
         TAP(test_spec_is_not_interpolated), TAP(test_yaml_bools_and_nulls), TAP(test_yaml_ints),
         TAP(test_yaml_floats), TAP(test_yaml_tags), TAP(test_yaml_non_string_keys_become_text),
         TAP(test_yaml_anchors_and_aliases), TAP(test_yaml_merge_keys), TAP(test_yaml_errors),
         TAP(test_yaml_alias_bomb_is_refused), TAP(test_yaml_deep_nesting_is_refused),
         TAP(test_json_input_keeps_types), TAP(test_load_file))
