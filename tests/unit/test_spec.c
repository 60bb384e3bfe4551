/*
 * Value types and spec validation (reference-api.md A and B): field order and
 * defaults, SandboxResources.from_mapping, port checks and normalisation, the
 * JSON round trip, and every message a reference test matches.
 */
#include "tap.h"
#include "common.h"
#include "lib/err.h"

#include "core/internal.h"

#include <math.h>

static sbx_spec *parse(const char *text)
{
    sbx_spec *s = NULL;
    TAP_OK(sbx_spec_from_json(text, &s, &e_));
    return s;
}

static char *dump(const sbx_spec *s)
{
    char *out = NULL;
    TAP_OK(sbx_spec_to_json(s, &out, &e_));
    return out;
}

/* The spec that `text` parses to, as JSON. */
static char *normalised(const char *text)
{
    sbx_spec *s = parse(text);
    char *out = dump(s);
    sbx_spec_free(s);
    return out;
}

/* sbx_spec_from_json(text) fails with `code`; the message contains `want`. */
static void expect_error(const char *text, int code, const char *want)
{
    sbx_spec *s = NULL;
    sbx_error *e = NULL;
    int rc = sbx_spec_from_json(text, &s, &e);
    if (rc != code)
        TAP_FAIL("%s: got %d (%s), want %d", text, rc, e ? sbx_error_message(e) : "", code);
    TAP_NULL(s);
    TAP_CONTAINS(sbx_error_message(e), want);
    sbx_error_free(e);
}

static const char DEFAULTS[] =
    "{\"image\":null,\"ttl_s\":null,\"ready_timeout_s\":null,\"workdir\":null,\"env\":{},"
    "\"files\":{},\"metadata\":{},\"resources\":{\"cpu\":null,\"memory_mib\":null,"
    "\"disk_gib\":null,\"gpu\":null,\"gpu_type\":null},\"entrypoint\":null,"
    "\"provider_options\":{},\"ports\":[]}";

/* --- A: value types --------------------------------------------------------- */

static void test_status_names(void)
{
    static const char *const names[] = { "starting", "running", "stopped", "error", "unknown" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(names); i++) {
        sbx_status st;
        TAP_EQ_INT(sbx_status_from_name(names[i], &st), SBX_OK);
        TAP_EQ_STR(sbx_status_name(st), names[i]);
    }
    sbx_status st;
    TAP_EQ_INT(sbx_status_from_name("RUNNING", &st), SBX_EINVAL);
    TAP_EQ_STR(sbx_status_name((sbx_status)99), "unknown");
}

static void test_exec_result_values(void)
{
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_exec_result_new("ok", 2, NULL, 0, 0, NULL, &r), SBX_OK);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "ok");
    TAP_NULL(sbx_exec_result_stderr(r, NULL)); /* None, not "" */
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);
}

static void test_endpoint_values(void)
{
    sbx_endpoint *ep = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_endpoint_new("/relative/path", &ep, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "absolute URL");
    TAP_EQ_INT(sbx_endpoint_new("   ", &ep, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox endpoint must be a non-empty absolute URL");
    TAP_OK(sbx_endpoint_new("  http://10.0.0.5:8000/x  ", &ep, &e_));
    TAP_EQ_STR(sbx_endpoint_url(ep), "http://10.0.0.5:8000/x");
    TAP_EQ_INT(sbx_endpoint_header_count(ep), 0);
    sbx_endpoint_free(ep);
    sbx_error_free(e);
}

static void test_float_repr_matches_python(void)
{
    /* Messages quote values as Python's repr(); these outputs came from /usr/bin/python3. */
    static const struct {
        double v;
        const char *repr;
    } table[] = {
        { 8000.0, "8000.0" },
        { 0.5, "0.5" },
        { 1.0, "1.0" },
        { 1e-05, "1e-05" },
        { 1.5e-05, "1.5e-05" },
        { 0.0001, "0.0001" },
        { 0.001234, "0.001234" },
        { 1e+16, "1e+16" },
        { 1.2345678901234568e+16, "1.2345678901234568e+16" },
        { 9999999999999998.0, "9999999999999998.0" },
        { 123456789.125, "123456789.125" },
        { 0.1, "0.1" },
        { 0.30000000000000004, "0.30000000000000004" },
        { -2.5, "-2.5" },
        { 1e+22, "1e+22" },
        { 5e-324, "5e-324" },
        { 1.7976931348623157e+308, "1.7976931348623157e+308" },
        { 100.0, "100.0" },
        { -0.0, "-0.0" },
        { 3.141592653589793, "3.141592653589793" },
        { 1234.5678, "1234.5678" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(table); i++) {
        json_t *r = json_real(table[i].v);
        char *got = sbx__json_repr(r);
        TAP_EQ_STR(got, table[i].repr);
        free(got);
        json_decref(r);
    }
}

/* --- B.9-10: fields, order, defaults --------------------------------------- */

static void test_defaults_and_field_order(void)
{
    sbx_spec *s = sbx_spec_new();
    char *out = dump(s);
    TAP_EQ_STR(out, DEFAULTS);
    free(out);
    sbx_spec_free(s);
    /* An empty mapping, null and "" all mean the defaults. */
    static const char *const empties[] = { "{}", "null", "" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(empties); i++) {
        out = normalised(empties[i]);
        TAP_EQ_STR(out, DEFAULTS);
        free(out);
    }
}

static const char FULL[] =
    "{\"image\":\"python:3.12\",\"ttl_s\":1800.0,\"ready_timeout_s\":120.5,"
    "\"workdir\":\"/testbed\","
    "\"env\":{\"B\":\"2\",\"A\":\"x y\"},\"files\":{\"/tmp/a.txt\":\"hello\\n\"},"
    "\"metadata\":{\"team\":\"t\"},\"resources\":{\"cpu\":0.5,\"memory_mib\":4096,"
    "\"disk_gib\":8,\"gpu\":1,\"gpu_type\":\"a100\"},\"entrypoint\":[\"sleep\",\"infinity\"],"
    "\"provider_options\":{\"platform\":\"linux/amd64\",\"volumes\":[{\"src\":\"/a\"}]},"
    "\"ports\":[8000,9222]}";

static void test_json_round_trip(void)
{
    char *once = normalised(FULL);
    TAP_EQ_STR(once, FULL);
    char *twice = normalised(once);
    TAP_EQ_STR(twice, once);
    free(twice);
    /* A copy is equal in value and independent. */
    sbx_spec *s = parse(FULL);
    sbx_spec *c = sbx_spec_copy(s);
    sbx_spec_free(s);
    char *copied = dump(c);
    TAP_EQ_STR(copied, FULL);
    free(copied);
    sbx_spec_free(c);
    free(once);
}

static void test_yaml_spec(void)
{
    char *out = normalised("image: python:3.12\n"
                           "ttl_s: 1800\n"
                           "workdir: /app\n"
                           "env: {DEBUG: 1, VERBOSE: yes, RATIO: 0.5}\n"
                           "resources:\n  cpu: 2\n  memory_mib: 512\n"
                           "ports: [8000, '9222']\n");
    /* YAML scalars become the text Python's str() gives ("1", "True"). */
    TAP_EQ_STR(out, "{\"image\":\"python:3.12\",\"ttl_s\":1800.0,\"ready_timeout_s\":null,"
                    "\"workdir\":\"/app\",\"env\":{\"DEBUG\":\"1\",\"VERBOSE\":\"True\","
                    "\"RATIO\":\"0.5\"},\"files\":{},"
                    "\"metadata\":{},\"resources\":{\"cpu\":2.0,\"memory_mib\":512,"
                    "\"disk_gib\":null,\"gpu\":null,\"gpu_type\":null},\"entrypoint\":null,"
                    "\"provider_options\":{},\"ports\":[8000,9222]}");
    free(out);
}

static void test_spec_shape_errors(void)
{
    expect_error("{\"imagee\": \"x\"}", SBX_EINVAL, "Unknown sandbox spec key 'imagee'");
    expect_error("[1]", SBX_ETYPE, "Sandbox spec must be a mapping, got list");
    expect_error("{\"image\": 3}", SBX_ETYPE, "Sandbox spec image must be a string, got int");
    expect_error("{\"env\": [1]}", SBX_ETYPE, "Sandbox spec env must be a mapping, got list");
    expect_error("{\"env\": {\"A\": [1]}}", SBX_ETYPE, "Sandbox spec env['A'] must be a string");
    expect_error("{\"ttl_s\": \"soon\"}", SBX_ETYPE, "ttl_s must be a number of seconds");
    expect_error("{\"entrypoint\": \"sleep 1\"}", SBX_ETYPE,
                 "entrypoint must be a list of strings");
    expect_error("{\"entrypoint\": [\"a\", 1]}", SBX_ETYPE, "entrypoint must be a list of strings");
    expect_error("{\"provider_options\": [1]}", SBX_ETYPE,
                 "Sandbox provider_options must be a mapping, got list");
}

static void test_non_finite_numbers_refused(void)
{
    /* JSON cannot carry NaN or infinity back out, and no timeout means NaN. */
    expect_error("{\"ttl_s\": \"nan\"}", SBX_EINVAL, "ttl_s must be a finite number of seconds");
    expect_error("{\"ready_timeout_s\": \"-inf\"}", SBX_EINVAL, "must be a finite number");
    expect_error("{\"resources\": {\"cpu\": \"inf\"}}", SBX_EINVAL,
                 "resources.cpu must be a finite number");
    expect_error("{\"resources\": {\"memory_mib\": 1e300}}", SBX_EINVAL,
                 "cannot convert float 1e+300 to integer (resources.memory_mib)");
}

/* --- B.11-13: resources ----------------------------------------------------- */

static void test_resources_from_mapping_converts(void)
{
    char *out = normalised("{\"resources\": {\"cpu\": \"0.5\", \"memory_mib\": \"4096\", "
                           "\"disk_gib\": \"8\"}}");
    TAP_CONTAINS(out, "\"resources\":{\"cpu\":0.5,\"memory_mib\":4096,\"disk_gib\":8,\"gpu\":null,"
                      "\"gpu_type\":null}");
    free(out);
    /* {"cpu": 1} equals SandboxResources(cpu=1.0). */
    out = normalised("{\"resources\": {\"cpu\": 1}}");
    TAP_CONTAINS(out, "\"cpu\":1.0,");
    free(out);
    /* int() truncates floats and accepts Python's int literal forms; gpu_type becomes str. */
    out = normalised("{\"resources\": {\"memory_mib\": 4.7, \"disk_gib\": \" 1_0 \", \"gpu\": "
                     "\"+2\", \"gpu_type\": 100}}");
    TAP_CONTAINS(out, "\"memory_mib\":4,\"disk_gib\":10,\"gpu\":2,\"gpu_type\":\"100\"");
    free(out);
    /* None stays None; a null resources mapping means all None. */
    out = normalised("{\"resources\": {\"cpu\": null, \"gpu_type\": null}}");
    TAP_EQ_STR(out, DEFAULTS);
    free(out);
    out = normalised("{\"resources\": null}");
    TAP_EQ_STR(out, DEFAULTS);
    free(out);
}

static void test_resources_setter(void)
{
    sbx_spec *s = sbx_spec_new();
    TAP_OK(sbx_spec_set_resources_json(s, "{\"cpu\": \"1.5\", \"gpu\": 2}", &e_));
    double cpu;
    long long gpu, mem;
    TAP_EQ_INT(sbx_spec_get_cpu(s, &cpu), 1);
    TAP_TRUE(cpu == 1.5);
    TAP_EQ_INT(sbx_spec_get_gpu(s, &gpu), 1);
    TAP_EQ_INT(gpu, 2);
    TAP_EQ_INT(sbx_spec_get_memory_mib(s, &mem), 0);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_spec_set_resources_json(s, "{\"ram\": 1}", ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Unknown sandbox resource keys: ram");
    /* A failed call changes nothing. */
    TAP_EQ_INT(sbx_spec_get_cpu(s, &cpu), 1);
    TAP_TRUE(cpu == 1.5);
    sbx_error_free(e);
    sbx_spec_free(s);
}

static void test_resources_errors(void)
{
    /* Unknown keys are listed sorted, known ones never. */
    expect_error("{\"resources\": {\"zeta\": 1, \"cpu\": 1, \"alpha\": 2}}", SBX_EINVAL,
                 "Unknown sandbox resource keys: alpha, zeta. Expected keys: cpu, disk_gib, gpu, "
                 "gpu_type, memory_mib");
    expect_error("{\"resources\": {\"memory_mib\": \"4Gi\"}}", SBX_EINVAL,
                 "invalid literal for int() with base 10: '4Gi'");
    expect_error("{\"resources\": {\"cpu\": \"two\"}}", SBX_EINVAL,
                 "could not convert string to float: 'two'");
    expect_error("{\"resources\": {\"gpu\": [1]}}", SBX_ETYPE,
                 "int() argument must be a string or a number, not 'list'");
    expect_error("{\"resources\": [1]}", SBX_ETYPE, "Sandbox resources must be a mapping");
}

/* --- B.14-16: ports -------------------------------------------------------- */

static void test_ports_normalised(void)
{
    char *out = normalised("{\"ports\": [8000, \" 9222 \", \"+81\", \"1_000\", 65535, 1]}");
    TAP_CONTAINS(out, "\"ports\":[8000,9222,81,1000,65535,1]}");
    free(out);
    sbx_spec *s = parse("{\"ports\": [8000, \"9222\"]}");
    TAP_EQ_INT(sbx_spec_port_count(s), 2);
    TAP_EQ_INT(sbx_spec_port_at(s, 0), 8000);
    TAP_EQ_INT(sbx_spec_port_at(s, 1), 9222);
    sbx_spec_free(s);
}

static void test_invalid_ports(void)
{
    static const struct {
        const char *ports;
        const char *msg;
    } cases[] = {
        { "[true]", "Invalid sandbox TCP port: True" },
        { "[false]", "Invalid sandbox TCP port: False" },
        { "[8000.5]", "Invalid sandbox TCP port: 8000.5" },
        { "[8000.0]", "Invalid sandbox TCP port: 8000.0" },
        { "[\"abc\"]", "Invalid sandbox TCP port: 'abc'" },
        { "[\"80.0\"]", "Invalid sandbox TCP port: '80.0'" },
        { "[\"\"]", "Invalid sandbox TCP port: ''" },
        { "[null]", "Invalid sandbox TCP port: None" },
        { "[[80]]", "Invalid sandbox TCP port: [80]" },
        { "[{\"p\": 80}]", "Invalid sandbox TCP port: {'p': 80}" },
        { "[0]", "Sandbox TCP port must be between 1 and 65535, got 0" },
        { "[65536]", "Sandbox TCP port must be between 1 and 65535, got 65536" },
        { "[-1]", "Sandbox TCP port must be between 1 and 65535, got -1" },
        { "[\" 70000\"]", "Sandbox TCP port must be between 1 and 65535, got 70000" },
        { "[8000, \"8000\"]", "Duplicate sandbox TCP port: 8000" },
        { "[1, 2, \" 2 \"]", "Duplicate sandbox TCP port: 2" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
        char *text = sbx__printf("{\"ports\": %s}", cases[i].ports);
        expect_error(text, SBX_EINVAL, cases[i].msg);
        free(text);
    }
    /* The first bad port in list order is the one reported. */
    expect_error("{\"ports\": [0, true]}", SBX_EINVAL, "between 1 and 65535, got 0");
    /* Not a list: the reference's TypeError. */
    expect_error("{\"ports\": 8000}", SBX_ETYPE,
                 "Sandbox ports must be a list or tuple of TCP port numbers");
    expect_error("{\"ports\": \"8000\"}", SBX_ETYPE, "must be a list or tuple");
}

static void test_add_port(void)
{
    sbx_spec *s = sbx_spec_new();
    sbx_error *e = NULL;
    TAP_OK(sbx_spec_add_port(s, 8000, &e_));
    TAP_EQ_INT(sbx_spec_add_port(s, 8000, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Duplicate sandbox TCP port: 8000");
    TAP_EQ_INT(sbx_spec_add_port(s, 0, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox TCP port must be between 1 and 65535, got 0");
    TAP_EQ_INT(sbx_spec_add_port(s, 70000, ERR(e)), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_port_count(s), 1);
    sbx_error_free(e);
    sbx_spec_free(s);
}

/* --- setters --------------------------------------------------------------- */

static void test_setters_build_the_same_spec(void)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "python:3.12");
    sbx_spec_set_ttl(s, 1800);
    sbx_spec_set_ready_timeout(s, 120.5);
    sbx_spec_set_workdir(s, "/testbed");
    sbx_spec_set_env(s, "B", "1");
    sbx_spec_set_env(s, "A", "x y");
    sbx_spec_set_env(s, "B", "2"); /* replaced, first position kept */
    sbx_spec_add_file(s, "/tmp/a.txt", "hello\n", 6);
    sbx_spec_set_metadata(s, "team", "t");
    sbx_spec_set_cpu(s, 0.5);
    sbx_spec_set_memory_mib(s, 4096);
    sbx_spec_set_disk_gib(s, 8);
    sbx_spec_set_gpu(s, 1);
    sbx_spec_set_gpu_type(s, "a100");
    const char *const argv[] = { "sleep", "infinity", NULL };
    sbx_spec_set_entrypoint(s, argv);
    TAP_OK(sbx_spec_set_provider_options(
        s, "{\"platform\":\"linux/amd64\",\"volumes\":[{\"src\":\"/a\"}]}", &e_));
    TAP_OK(sbx_spec_add_port(s, 8000, &e_));
    TAP_OK(sbx_spec_add_port(s, 9222, &e_));
    char *out = dump(s);
    TAP_EQ_STR(out, FULL);
    free(out);
    /* Negative values clear back to None. */
    sbx_spec_set_ttl(s, -1);
    sbx_spec_set_cpu(s, -1);
    double d;
    TAP_EQ_INT(sbx_spec_get_ttl(s, &d), 0);
    TAP_EQ_INT(sbx_spec_get_cpu(s, &d), 0);
    TAP_EQ_INT(sbx_spec_set_env(s, "A=B", "x"), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_set_ttl(s, NAN), SBX_EINVAL);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_spec_set_provider_options(s, "[1]", ERR(e)), SBX_ETYPE);
    TAP_CONTAINS(sbx_error_message(e), "provider_options must be a mapping");
    sbx_error_free(e);
    sbx_spec_free(s);
}

/* [svc-logs] Startup files as objects: a mode, base64 bytes; kept through to_json and copies. */
static void test_file_modes_and_bytes(void)
{
    sbx_spec *s = parse("{\"files\": {\"/a\": \"plain\", \"/b\": {\"content\": \"#!/bin/sh\\n\", "
                        "\"mode\": \"0755\"}, \"/c\": {\"content\": \"AAH/\", \"encoding\": "
                        "\"base64\", \"mode\": 384}}}");
    TAP_EQ_INT((int)sbx_spec_file_count(s), 3);
    TAP_EQ_INT(s->files[0].mode, -1);
    TAP_EQ_INT(s->files[1].mode, 0755);
    TAP_EQ_INT(s->files[2].mode, 0600);
    TAP_EQ_INT((int)s->files[2].len, 3);
    TAP_TRUE(!memcmp(s->files[2].data, "\0\1\377", 3));
    char *out = dump(s);
    TAP_CONTAINS(out, "\"/a\":\"plain\"");
    TAP_CONTAINS(out, "\"/b\":{\"content\":\"#!/bin/sh\\n\",\"mode\":\"0755\"}");
    TAP_CONTAINS(out, "\"/c\":{\"content\":\"AAH/\",\"encoding\":\"base64\",\"mode\":\"0600\"}");
    /* Round trip: what to_json wrote parses to the same spec. */
    sbx_spec *s2 = parse(out);
    char *out2 = dump(s2);
    TAP_EQ_STR(out2, out);
    free(out2);
    sbx_spec_free(s2);
    free(out);
    /* The setter: modes past 0777 are refused, the spec unchanged. */
    TAP_EQ_INT(sbx_spec_add_file_mode(s, "/d", "x", 1, 04755), SBX_EINVAL);
    TAP_EQ_INT(sbx_spec_add_file_mode(s, "/d", "x", 1, 0700), SBX_OK);
    TAP_EQ_INT((int)sbx_spec_file_count(s), 4);
    TAP_EQ_INT(s->files[3].mode, 0700);
    sbx_spec_free(s);
    expect_error("{\"files\": {\"/x\": {\"content\": \"a\", \"mode\": \"4755\"}}}", SBX_EINVAL,
                 "files['/x'] mode '4755' is not valid");
    sbx_spec *s3 = parse("{\"files\": {\"/o\": {\"content\": \"\", \"mode\": \"0o750\"}, "
                         "\"/p\": {\"content\": \"\", \"mode\": \"640\"}}}");
    TAP_EQ_INT(s3->files[0].mode, 0750);
    TAP_EQ_INT(s3->files[1].mode, 0640);
    sbx_spec_free(s3);
    expect_error("{\"files\": {\"/x\": {\"content\": \"a\", \"mode\": \"-1\"}}}", SBX_EINVAL,
                 "mode '-1' is not valid");
    expect_error("{\"files\": {\"/x\": {\"content\": \"a\", \"mode\": \"0o\"}}}", SBX_EINVAL,
                 "mode '0o' is not valid");
    expect_error("{\"files\": {\"/x\": {\"content\": \"a\", \"mode\": \"rwx\"}}}", SBX_EINVAL,
                 "octal string like \"0755\"");
    expect_error("{\"files\": {\"/x\": {\"content\": \"a\", \"mode\": -1}}}", SBX_EINVAL,
                 "mode -1 is not valid");
    expect_error("{\"files\": {\"/x\": {\"content\": \"a\", \"mode\": true}}}", SBX_EINVAL,
                 "mode True is not valid");
    expect_error("{\"files\": {\"/x\": {\"mode\": \"0644\"}}}", SBX_ETYPE,
                 "must have a string \"content\"");
    expect_error("{\"files\": {\"/x\": {\"content\": \"a\", \"owner\": 0}}}", SBX_EINVAL,
                 "unknown key 'owner'");
    expect_error("{\"files\": {\"/x\": {\"content\": \"a=b\", \"encoding\": \"base64\"}}}",
                 SBX_EINVAL, "not valid base64");
    expect_error("{\"files\": {\"/x\": {\"content\": \"a\", \"encoding\": \"latin-1\"}}}",
                 SBX_EINVAL, "encoding must be");
}

TAP_MAIN(TAP(test_status_names), TAP(test_float_repr_matches_python), TAP(test_exec_result_values),
         TAP(test_endpoint_values),
         TAP(test_defaults_and_field_order), TAP(test_json_round_trip), TAP(test_yaml_spec),
         TAP(test_spec_shape_errors), TAP(test_non_finite_numbers_refused),
         TAP(test_resources_from_mapping_converts), TAP(test_resources_setter),
         TAP(test_resources_errors), TAP(test_ports_normalised), TAP(test_invalid_ports),
         TAP(test_add_port), TAP(test_setters_build_the_same_spec),
         TAP(test_file_modes_and_bytes))
