/*
 * The provider registry (reference-api.md I): registration, lookup order,
 * create_provider's config checks, and plugins on SBX_PLUGIN_PATH.
 *
 * Plugin discovery runs once per process; every TAP test is a fresh forked
 * child, so each sets SBX_PLUGIN_PATH before its first registry call.
 */
#include "tap.h"
#include "common.h"
#include "lib/err.h"

#include "core/internal.h"
#include "fakes/fake.h"

#include <libgen.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>

/* --- helpers -------------------------------------------------------------- */

static char plugin_dir[4096];

/* build/tests/plugins, found from this binary's path (build/tests/unit/test_registry). */
static const char *plugins(void)
{
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        TAP_FAIL("readlink /proc/self/exe failed");
    exe[n] = 0;
    char *unit = dirname(exe);  /* build/tests/unit */
    char *tests = dirname(unit); /* build/tests */
    snprintf(plugin_dir, sizeof(plugin_dir), "%s/plugins", tests);
    return plugin_dir;
}

static char *plugin(const char *name)
{
    char *p = sbx__printf("%s/%s.so", plugins(), name);
    struct stat st;
    if (stat(p, &st) < 0)
        TAP_SKIP("test plugins are not built (make tests builds build/tests/plugins/*.so)");
    return p;
}

static void use_plugin_path(const char *path) { setenv("SBX_PLUGIN_PATH", path, 1); }

/* Log lines the library emitted, newline-separated. */
static pthread_mutex_t logs_lock = PTHREAD_MUTEX_INITIALIZER;
static sbx_buf logs;

static void collect_log(sbx_log_level level, const char *msg, void *data)
{
    (void)data;
    pthread_mutex_lock(&logs_lock);
    sbx__buf_printf(&logs, "%d %s\n", (int)level, msg);
    pthread_mutex_unlock(&logs_lock);
}

static char *joined_providers(void)
{
    char **names = NULL;
    TAP_OK(sbx_list_providers(&names, &e_));
    sbx_buf b = { 0 };
    for (size_t i = 0; names[i]; i++)
        sbx__buf_printf(&b, "%s%s", i ? ", " : "", names[i]);
    sbx_strv_free(names);
    return b.data ? b.data : strdup("");
}

static bool listed(const char *name)
{
    char **names = NULL;
    TAP_OK(sbx_list_providers(&names, &e_));
    bool found = false;
    for (size_t i = 0; names[i]; i++)
        found |= !strcmp(names[i], name);
    sbx_strv_free(names);
    return found;
}

/* Runs `command` in a fresh sandbox of `p`, returning its stdout (caller frees). */
static char *run_in(sbx_provider *p, const char *command)
{
    sbx_sandbox *sb = NULL;
    sbx_spec *spec = sbx_spec_new();
    TAP_OK(sbx_sandbox_new(p, spec, &sb, &e_));
    sbx_spec_free(spec);
    TAP_OK(sbx_sandbox_start(sb, NULL, &e_));
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, command, NULL, &r, &e_));
    char *out = strdup(sbx_exec_result_stdout(r, NULL));
    sbx_exec_result_free(r);
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    sbx_sandbox_free(sb);
    return out;
}

/* A provider whose constructor always fails, to see which entry a name resolves to. */
static int failing_init(const char *config_json, void **state, sbx_error **err)
{
    (void)config_json;
    (void)state;
    *err = sbx_error_new(SBX_EPROVIDER, "override constructor ran");
    return SBX_EPROVIDER;
}

static struct sbx_provider_ops ops_named(const char *name)
{
    struct sbx_provider_ops o = sbx_fake_provider;
    o.name = name;
    return o;
}

/* --- registration (I.61-64) ----------------------------------------------- */

static void test_builtins_listed_sorted(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    char **names = NULL;
    TAP_OK(sbx_list_providers(&names, &e_));
    size_t n = 0;
    for (; names[n]; n++)
        if (n)
            TAP_TRUE(strcmp(names[n - 1], names[n]) < 0);
    TAP_TRUE(n >= 2);
    sbx_strv_free(names);
    TAP_TRUE(listed("linux"));
    TAP_TRUE(listed("local"));
    /* The test doubles are registered by this binary (tests/fakes/static.c), not built in. */
    TAP_TRUE(listed("fake"));
    TAP_TRUE(listed("fake_basic"));
    TAP_OK(sbx_provider_lookup("fake", &e_));
    TAP_OK(sbx_unregister_provider("fake", &e_));
    TAP_OK(sbx_unregister_provider("fake_basic", &e_));
    TAP_TRUE(!listed("fake"));
    TAP_TRUE(!listed("fake_basic"));
}

static void test_register_lookup_override(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    static struct sbx_provider_ops mine, mine2;
    mine = ops_named("mine");
    mine2 = ops_named("mine");
    mine2.init = failing_init;
    sbx_error *e = NULL;

    TAP_EQ_INT(sbx_provider_lookup("mine", ERR(e)), SBX_EINVAL);
    TAP_OK(sbx_register_provider(&mine, 0, &e_));
    TAP_OK(sbx_provider_lookup("mine", &e_));
    TAP_TRUE(listed("mine"));

    TAP_EQ_INT(sbx_register_provider(&mine2, 0, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox provider 'mine' is already registered");

    /* override replaces the entry: the new constructor runs. */
    TAP_OK(sbx_register_provider(&mine2, 1, &e_));
    sbx_provider *p = NULL;
    TAP_EQ_INT(sbx_provider_new("{\"mine\": {}}", &p, ERR(e)), SBX_EPROVIDER);
    TAP_CONTAINS(sbx_error_message(e), "override constructor ran");
    TAP_EQ_STR(sbx_error_provider(e), "mine");

    TAP_OK(sbx_unregister_provider("mine", &e_));
    TAP_TRUE(!listed("mine"));
    TAP_EQ_INT(sbx_unregister_provider("mine", ERR(e)), SBX_ENOENT);
    sbx_error_free(e);
}

static void test_register_shadows_builtin_only_with_override(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    static struct sbx_provider_ops over;
    over = ops_named("local");
    over.init = failing_init;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_register_provider(&over, 0, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox provider 'local' is already registered");

    TAP_OK(sbx_register_provider(&over, 1, &e_));
    sbx_provider *p = NULL;
    TAP_EQ_INT(sbx_provider_new("{\"local\": {}}", &p, ERR(e)), SBX_EPROVIDER);
    TAP_CONTAINS(sbx_error_message(e), "override constructor ran");

    /* Unregistering brings the built-in back. */
    TAP_OK(sbx_unregister_provider("local", &e_));
    TAP_OK(sbx_provider_new("{\"local\": {}}", &p, &e_));
    TAP_EQ_STR(sbx_provider_name(p), "local");
    sbx_provider_free(p);
    /* A built-in stays listed once. */
    char *all = joined_providers();
    TAP_TRUE(strstr(all, "linux, local") != NULL);
    TAP_TRUE(strstr(all, "local, local") == NULL);
    free(all);
    sbx_error_free(e);
}

static void test_register_empty_name(void)
{
    static struct sbx_provider_ops empty, null_name;
    empty = ops_named("");
    null_name = ops_named(NULL);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_register_provider(&empty, 0, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Provider name must be non-empty");
    TAP_EQ_INT(sbx_register_provider(&null_name, 1, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Provider name must be non-empty");
    TAP_EQ_INT(sbx_register_provider(NULL, 0, ERR(e)), SBX_EINVAL);
    sbx_error_free(e);
}

static void test_register_incomplete_ops(void)
{
    static struct sbx_provider_ops partial;
    partial = ops_named("partial");
    partial.exec = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_register_provider(&partial, 0, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "lacks the required operation exec()");
    static struct sbx_provider_ops old_abi;
    old_abi = ops_named("old_abi");
    old_abi.abi_version = SBX_PROVIDER_ABI_VERSION + 1;
    TAP_EQ_INT(sbx_register_provider(&old_abi, 0, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "provider ABI");
    sbx_error_free(e);
}

static void test_unknown_provider_lists_sorted(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    char *all = joined_providers();
    char *want = sbx__printf("Unknown sandbox provider 'nope'. Available providers: %s", all);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_lookup("nope", ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), want);
    sbx_provider *p = NULL;
    TAP_EQ_INT(sbx_provider_new("{\"nope\": {}}", &p, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Unknown sandbox provider 'nope'");
    /* Names are quoted as Python's repr would. */
    TAP_EQ_INT(sbx_provider_lookup("it's", ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Unknown sandbox provider \"it's\"");
    sbx_error_free(e);
    free(want);
    free(all);
}

/* --- create_provider's config checks (I.68) -------------------------------- */

static void test_provider_config_errors(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    static const char *const not_one[] = { "{}", "{\"fake\": {}, \"fake_basic\": {}}", "[1]",
                                           "fake", "" };
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(not_one); i++) {
        TAP_EQ_INT(sbx_provider_new(not_one[i], &p, ERR(e)), SBX_EINVAL);
        TAP_EQ_STR(sbx_error_message(e),
                   "Sandbox provider config must contain exactly one provider name");
    }
    TAP_EQ_INT(sbx_provider_new("{\"\": {}}", &p, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox provider name must be a non-empty string");
    TAP_EQ_INT(sbx_provider_new("{\"fake\": 3}", &p, ERR(e)), SBX_ETYPE);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox provider 'fake' config must be a mapping");
    TAP_EQ_INT(sbx_provider_new("fake: [1, 2]", &p, ERR(e)), SBX_ETYPE);
    TAP_CONTAINS(sbx_error_message(e), "config must be a mapping");
    /* The constructor's own error propagates, naming the provider. */
    TAP_EQ_INT(sbx_provider_new("{\"fake\": {\"init_error\": \"bad option x\"}}", &p, ERR(e)),
               SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), "bad option x");
    TAP_EQ_STR(sbx_error_provider(e), "fake");
    sbx_error_free(e);
}

static void test_provider_null_config_is_empty_mapping(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    static const char *const forms[] = { "{\"fake\": null}", "fake:", "fake: ~", "fake: {}" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(forms); i++) {
        sbx_provider *p = NULL;
        TAP_OK(sbx_provider_new(forms[i], &p, &e_));
        TAP_EQ_STR(sbx_provider_name(p), "fake");
        sbx_provider_free(p);
    }
}

static void test_provider_kwargs_reach_constructor(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new("fake:\n  marker: configured\n", &p, &e_));
    char *out = run_in(p, "marker");
    TAP_EQ_STR(out, "\"configured\""); /* the fake echoes the marker as JSON */
    free(out);
    sbx_provider_free(p);
}

/* --- plugins (I.65-66) ------------------------------------------------------ */

static void test_plugin_provider_usable(void)
{
    char *good = plugin("plug_good");
    use_plugin_path(good);
    TAP_TRUE(listed("plugged"));
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new("{\"plugged\": {\"k\": 1}}", &p, &e_));
    TAP_EQ_STR(sbx_provider_name(p), "plugged");
    char *out = run_in(p, "echo hi");
    TAP_EQ_STR(out, "good ran echo hi with {\"k\":1}");
    free(out);
    sbx_provider_free(p);
    free(good);
}

static void test_plugin_discovery_is_cached(void)
{
    char *good = plugin("plug_good");
    use_plugin_path(good);
    TAP_TRUE(listed("plugged"));
    /* Discovery ran once: changing the path later changes nothing in this process. */
    setenv("SBX_PLUGIN_PATH", "/nonexistent", 1);
    TAP_TRUE(listed("plugged"));
    TAP_OK(sbx_provider_lookup("plugged", &e_));
    free(good);
}

static void test_plugin_duplicate_names_both_files(void)
{
    char *a = plugin("plug_dup_a"), *b = plugin("plug_dup_b");
    char *path = sbx__printf("%s:%s", a, b);
    use_plugin_path(path);
    char *want = sbx__printf("Duplicate sandbox provider entry point 'dupname' published by '%s' "
                             "and '%s'. Rename one of them.",
                             a, b);
    char **names = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_list_providers(&names, ERR(e)), SBX_EINVAL);
    TAP_EQ_STR(sbx_error_message(e), want);
    /* A lookup that reaches the plugins reports it too; built-ins still resolve. */
    TAP_EQ_INT(sbx_provider_lookup("dupname", ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "Duplicate sandbox provider entry point");
    TAP_OK(sbx_provider_lookup("fake", &e_));
    sbx_error_free(e);
    free(want);
    free(path);
    free(a);
    free(b);
}

static void test_plugin_directory_scan(void)
{
    /* A directory on the path: every *.so in it, in name order (dup_a before dup_b). */
    char *probe = plugin("plug_dup_a");
    use_plugin_path(plugins());
    char **names = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_list_providers(&names, ERR(e)), SBX_EINVAL);
    char *want = sbx__printf("published by '%s/plug_dup_a.so' and '%s/plug_dup_b.so'", plugins(),
                             plugins());
    TAP_CONTAINS(sbx_error_message(e), want);
    sbx_error_free(e);
    free(want);
    free(probe);
}

static void test_plugin_shadowed_by_builtin_warns(void)
{
    char *shadow = plugin("plug_shadow");
    use_plugin_path(shadow);
    sbx_set_log_cb(collect_log, NULL, SBX_LOG_DEBUG);
    TAP_TRUE(listed("local"));
    pthread_mutex_lock(&logs_lock);
    char *seen = strdup(logs.data ? logs.data : "");
    pthread_mutex_unlock(&logs_lock);
    TAP_CONTAINS(seen, "30 Sandbox provider plugin 'local'");
    TAP_CONTAINS(seen, "shadowed by the built-in");
    TAP_CONTAINS(seen, shadow);
    free(seen);
    /* Lookups still return the built-in (the plugin's constructor would fail). */
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new("{\"local\": {}}", &p, &e_));
    char *out = run_in(p, "exit 0");
    sbx_provider_free(p);
    free(out);
    sbx_set_log_cb(NULL, NULL, SBX_LOG_DEBUG);
    free(shadow);
}

/* A log callback that calls back into the registry must not deadlock. */
static void reentrant_log(sbx_log_level level, const char *msg, void *data)
{
    (void)level;
    (void)msg;
    char **names = NULL;
    if (sbx_list_providers(&names, NULL) == SBX_OK)
        (*(int *)data)++;
    sbx_strv_free(names);
}

static void test_plugin_warning_callback_may_reenter(void)
{
    char *shadow = plugin("plug_shadow");
    use_plugin_path(shadow);
    int calls = 0;
    sbx_set_log_cb(reentrant_log, &calls, SBX_LOG_WARNING);
    TAP_EQ_INT(sbx_provider_lookup("no_such_provider_x", NULL), SBX_EINVAL);
    TAP_EQ_INT(calls, 1);
    sbx_set_log_cb(NULL, NULL, SBX_LOG_DEBUG);
    free(shadow);
}

static void test_plugin_bad_files_warn_and_are_skipped(void)
{
    char *bad = plugin("plug_bad_abi"), *notp = plugin("plug_not_plugin"),
         *good = plugin("plug_good");
    char *path = sbx__printf("%s:%s:/nonexistent/dir::%s", bad, notp, good);
    use_plugin_path(path);
    sbx_set_log_cb(collect_log, NULL, SBX_LOG_DEBUG);
    TAP_TRUE(listed("plugged"));
    TAP_TRUE(!listed("wrong_abi"));
    char *seen = strdup(logs.data ? logs.data : "");
    TAP_CONTAINS(seen, "ignoring sbx plugin provider in");
    TAP_CONTAINS(seen, "built for provider ABI 999");
    TAP_CONTAINS(seen, "is not an sbx plugin");
    free(seen);
    sbx_set_log_cb(NULL, NULL, SBX_LOG_DEBUG);
    free(path);
    free(bad);
    free(notp);
    free(good);
}

/* --- ABI 2: older tables, provider-wide operations ------------------------ */

/*
 * Loads the plugin of an older ABI from `so`, providing `name`, and runs
 * `echo hi` in it (its exec echoes `tag`): the provider, still usable.
 */
static sbx_provider *old_plugin(const char *so, const char *name, const char *tag)
{
    char *path = plugin(so);
    use_plugin_path(path);
    free(path);
    TAP_TRUE(listed(name));
    sbx_provider *p = NULL;
    char *cfg = sbx__printf("{\"%s\": {}}", name), *want = sbx__printf("%s ran echo hi with {}", tag);
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    char *out = run_in(p, "echo hi");
    TAP_EQ_STR(out, want);
    free(out);
    free(cfg);
    free(want);
    return p;
}

static void test_abi1_plugin_still_loads(void)
{
    sbx_provider *p = old_plugin("plug_abi1", "abi_one", "abi1");
    /* Nothing past ABI 1's table is read: no ABI-2 operation, no capability. */
    TAP_EQ_INT(sbx_provider_supports(p, "list"), 0);
    TAP_EQ_INT(sbx_provider_supports(p, "gc"), 0);
    char *json = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_list(p, NULL, &json, ERR(e)), SBX_ENOTSUP);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox provider 'abi_one' does not support list()");
    TAP_EQ_INT(sbx_provider_stop_box(p, "x", ERR(e)), SBX_ENOTSUP);
    sbx_error_free(e);
    sbx_provider_free(p);
}

/* ABI 3 appended pty_open: a table of ABI 2 still loads, and nothing past it is read. */
static void test_abi2_plugin_still_loads(void)
{
    sbx_provider *p = old_plugin("plug_abi2", "abi_two", "abi2");
    /* The poisoned pty_open past its struct_size is neither shown nor called. */
    TAP_EQ_INT(sbx_provider_supports(p, "pty"), 0);
    sbx_sandbox *sb = NULL;
    TAP_OK(sbx_sandbox_new(p, NULL, &sb, &e_));
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_image(spec, "img");
    TAP_OK(sbx_sandbox_start(sb, spec, &e_));
    sbx_spec_free(spec);
    sbx_pty *pty = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_pty_open(sb, NULL, &pty, ERR(e)), SBX_ENOTSUP);
    TAP_CONTAINS(sbx_error_message(e), "does not support PTY sessions");
    sbx_error_free(e);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static const char *list_answer;
static void answer_list(sbx_op *op, void *state, const char *filter)
{
    (void)state;
    /* Echo the filter back inside a valid answer, or give the configured (bad) answer. */
    char *v = list_answer ? strdup(list_answer)
                          : sbx__printf("[{\"id\": \"b1\", \"filter\": %s}]", filter ? filter : "null");
    sbx_op_complete(op, SBX_OK, NULL, v);
}
static void answer_stop(sbx_op *op, void *state, const char *id)
{
    (void)state;
    if (strcmp(id, "b1"))
        sbx_op_complete(op, SBX_ENOENT, sbx_error_new(SBX_ENOENT, "no box %s", id), NULL);
    else
        sbx_op_complete(op, SBX_OK, NULL, NULL);
}

static void test_abi2_short_table_reads_only_its_size(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    /* A table from an older ABI-2 header: its struct_size ends before `list`. */
    static struct sbx_provider_ops short_ops;
    short_ops = ops_named("short2");
    short_ops.struct_size = offsetof(struct sbx_provider_ops, list);
    short_ops.list = answer_list; /* beyond its size: must not be seen */
    TAP_OK(sbx_register_provider(&short_ops, 0, &e_));
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new("{\"short2\": {}}", &p, &e_));
    TAP_EQ_INT(sbx_provider_supports(p, "list"), 0);
    sbx_provider_free(p);
    /* ABI 2 without a struct_size is refused, saying how to fix it. */
    static struct sbx_provider_ops no_size;
    no_size = ops_named("nosize");
    no_size.struct_size = 0;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_register_provider(&no_size, 0, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), ".struct_size = sizeof(struct sbx_provider_ops)");
    sbx_error_free(e);
}

static void test_provider_list_and_stop_checked(void)
{
    unsetenv("SBX_PLUGIN_PATH");
    static struct sbx_provider_ops lister;
    lister = ops_named("lister");
    lister.list = answer_list;
    lister.stop_id = answer_stop;
    TAP_OK(sbx_register_provider(&lister, 0, &e_));
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new("{\"lister\": {}}", &p, &e_));
    TAP_EQ_INT(sbx_provider_supports(p, "list"), 1);
    TAP_EQ_INT(sbx_provider_supports(p, "stop"), 1);
    TAP_EQ_INT(sbx_provider_supports(p, "gc"), 0);
    char *json = NULL;
    TAP_OK(sbx_provider_list(p, "{\"labels\": {\"run_id\": \"r1\"}}", &json, &e_));
    TAP_CONTAINS(json, "\"run_id\": \"r1\"");
    free(json);
    json = NULL;
    sbx_error *e = NULL;
    /* Filters are checked before the provider sees them. */
    TAP_EQ_INT(sbx_provider_list(p, "[1]", &json, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "the list filter must be a JSON object");
    TAP_EQ_INT(sbx_provider_list(p, "{\"labels\": {\"k\": 1}}", &json, ERR(e)), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "must map names to strings");
    /* A provider's answer is checked before it reaches the caller. */
    const char *bad[] = { "not json", "{}", "[1]", "[{\"id\": 3}]" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        list_answer = bad[i];
        TAP_EQ_INT(sbx_provider_list(p, NULL, &json, ERR(e)), SBX_EPROVIDER);
        TAP_CONTAINS(sbx_error_message(e), "list() did not return a JSON array");
        TAP_TRUE(json == NULL);
    }
    list_answer = NULL;
    /* stop by id: the provider's answer, and ids that are not ids. */
    TAP_OK(sbx_provider_stop_box(p, "b1", &e_));
    TAP_EQ_INT(sbx_provider_stop_box(p, "b2", ERR(e)), SBX_ENOENT);
    TAP_EQ_INT(sbx_provider_stop_box(p, "../b1", ERR(e)), SBX_EINVAL);
    TAP_EQ_INT(sbx_provider_stop_box(p, "", ERR(e)), SBX_EINVAL);
    /* gc is not in this table. */
    TAP_EQ_INT(sbx_provider_gc(p, NULL, &json, ERR(e)), SBX_ENOTSUP);
    sbx_error_free(e);
    sbx_provider_free(p);
}

TAP_MAIN(TAP(test_abi1_plugin_still_loads), TAP(test_abi2_plugin_still_loads),
         TAP(test_abi2_short_table_reads_only_its_size),
         TAP(test_provider_list_and_stop_checked), TAP(test_builtins_listed_sorted), TAP(test_register_lookup_override),
         TAP(test_register_shadows_builtin_only_with_override), TAP(test_register_empty_name),
         TAP(test_register_incomplete_ops), TAP(test_unknown_provider_lists_sorted),
         TAP(test_provider_config_errors), TAP(test_provider_null_config_is_empty_mapping),
         TAP(test_provider_kwargs_reach_constructor), TAP(test_plugin_provider_usable),
         TAP(test_plugin_discovery_is_cached), TAP(test_plugin_duplicate_names_both_files),
         TAP(test_plugin_directory_scan), TAP(test_plugin_shadowed_by_builtin_warns),
         TAP(test_plugin_warning_callback_may_reenter),
         TAP(test_plugin_bad_files_warn_and_are_skipped))
