/*
 * The shipped provider config blocks, providers/<p>/configs/<p>.yaml (what
 * `make install` puts under PREFIX/share/sbx and NeMo Gym configs name as
 * `sandbox_provider: sandbox`). For every built-in provider there is one;
 * each parses, its `sandbox` block resolves to exactly that one provider
 * key, the provider accepts it, and the file sets exactly the keys the
 * provider accepts (an unknown key fails the constructor; a key the
 * provider gained but the file lacks fails the comparison with the
 * provider's own list), so the files cannot rot. Then the CLI runs a box
 * through each with --config.
 *
 * Run from the source tree (tests/run.sh does): the files are read from
 * ./providers.
 */
#include "tap.h"
#include "common.h"
#include "lib/err.h"
#include "lib/proc.h"

#include <sbx.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

static char *file_of(const char *provider)
{
    char *p = NULL;
    if (asprintf(&p, "providers/%s/configs/%s.yaml", provider, provider) < 0)
        TAP_FAIL("out of memory");
    return p;
}

/* The real providers: every one this libsbx has, without the test doubles this binary registers. */
static char **real_providers(void)
{
    sbx_unregister_provider("fake", NULL);
    sbx_unregister_provider("fake_basic", NULL);
    sbx_unregister_provider("fake_boxes", NULL);
    char **names = NULL;
    TAP_OK(sbx_list_providers(&names, &e_));
    return names;
}

static void need_source_tree(void)
{
    struct stat st;
    if (stat("providers", &st) < 0 || !S_ISDIR(st.st_mode))
        TAP_FAIL("no ./providers here: run from the source tree (tests/run.sh does)");
    /*
     * The apptainer provider wants its CLI on PATH when it is made (as the
     * reference's does); this machine has none, so the suite's fake stands in.
     */
    const char *path = getenv("PATH");
    char *with = NULL;
    if (asprintf(&with, "%s/tests/fakes:%s", getcwd((char[4096]){0}, 4096), path ? path : "") < 0)
        TAP_FAIL("out of memory");
    setenv("PATH", with, 1);
    free(with);
}

/* The names in the provider's "unknown key" error: "... known: a, b, c)" or "known keys: a, b". */
static json_t *known_keys(const char *provider)
{
    char *cfg = NULL;
    if (asprintf(&cfg, "{\"%s\": {\"sbx_test_no_such_key\": 1}}", provider) < 0)
        TAP_FAIL("out of memory");
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    int rc = sbx_provider_new(cfg, &p, &e);
    free(cfg);
    if (rc == SBX_OK) {
        sbx_provider_free(p);
        TAP_FAIL("provider %s accepted an unknown config key", provider);
    }
    const char *msg = sbx_error_message(e);
    TAP_CONTAINS(msg, "sbx_test_no_such_key");
    const char *k = strstr(msg, "known");
    TAP_TRUE(k != NULL);
    k = strchr(k, ':');
    TAP_TRUE(k != NULL);
    json_t *keys = json_array();
    for (k++;;) {
        k += strspn(k, " ");
        size_t n = strspn(k, "abcdefghijklmnopqrstuvwxyz_0123456789");
        if (!n)
            break;
        json_array_append_new(keys, json_stringn(k, n));
        k += n;
        if (*k != ',')
            break;
        k++;
    }
    sbx_error_free(e);
    TAP_TRUE(json_array_size(keys) > 0);
    return keys;
}

static bool has_key(const json_t *arr, const char *key)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (!strcmp(json_string_value(v), key)) return true;
    return false;
}

/* Checks one provider's shipped file; returns its resolved provider mapping (caller frees). */
static char *check_file(const char *provider)
{
    char *path = file_of(provider);
    char *doc = NULL, *cfg = NULL, *md = NULL;
    sbx_error *e = NULL;
    if (sbx_config_load_file(path, &doc, &e) != SBX_OK)
        TAP_FAIL("%s: %s", path, sbx_error_message(e));
    /* The block is `sandbox`, holding exactly this provider. */
    TAP_OK(sbx_resolve_provider_config("sandbox", doc, &cfg, &e_));
    json_t *c = json_loads(cfg, 0, NULL);
    TAP_EQ_INT(json_object_size(c), 1);
    json_t *own = json_object_get(c, provider);
    if (!json_is_object(own))
        TAP_FAIL("%s: the sandbox block's provider key is not '%s': %s", path, provider, cfg);
    TAP_OK(sbx_resolve_provider_metadata("sandbox", doc, &md, &e_));
    json_t *m = json_loads(md, 0, NULL);
    TAP_TRUE(json_is_object(m) && json_object_size(m) > 0);
    /* The provider takes every key the file sets (an unknown one fails here)... */
    sbx_provider *p = NULL;
    if (sbx_provider_new(cfg, &p, &e) != SBX_OK)
        TAP_FAIL("%s: provider %s refuses the shipped config: %s", path, provider,
                 sbx_error_message(e));
    TAP_EQ_STR(sbx_provider_name(p), provider);
    sbx_provider_free(p);
    /* ...and the file sets every key the provider takes. */
    json_t *known = known_keys(provider);
    const char *k;
    json_t *v;
    json_object_foreach(own, k, v)
    {
        if (!has_key(known, k))
            TAP_FAIL("%s sets '%s', which provider %s does not list", path, k, provider);
    }
    size_t i;
    json_array_foreach(known, i, v)
    {
        if (!json_object_get(own, json_string_value(v)))
            TAP_FAIL("%s does not document key '%s' of provider %s", path,
                     json_string_value(v), provider);
    }
    json_decref(known);
    json_decref(m);
    json_decref(c);
    free(md);
    free(doc);
    free(path);
    return cfg;
}

static void test_every_provider_ships_a_config(void)
{
    need_source_tree();
    char **names = real_providers();
    size_t n = 0;
    for (; names[n]; n++) {
        char *path = file_of(names[n]);
        if (access(path, R_OK) != 0)
            TAP_FAIL("provider %s has no shipped config block: add %s", names[n], path);
        free(path);
    }
    TAP_TRUE(n >= 2);
    /* ...and no file for a provider that does not exist. */
    DIR *d = opendir("providers");
    TAP_TRUE(d != NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        bool found = false;
        for (size_t i = 0; names[i]; i++)
            found |= !strcmp(names[i], de->d_name);
        if (!found)
            TAP_FAIL("providers/%s: no provider of that name", de->d_name);
    }
    closedir(d);
    sbx_strv_free(names);
}

static void test_each_file_resolves_and_constructs(void)
{
    need_source_tree();
    char **names = real_providers();
    for (size_t i = 0; names[i]; i++)
        free(check_file(names[i]));
    sbx_strv_free(names);
}

/* A key the provider does not accept fails the check (what keeps the files honest). */
static void test_unknown_key_is_caught(void)
{
    need_source_tree();
    char **names = real_providers();
    for (size_t i = 0; names[i]; i++) {
        char *path = file_of(names[i]);
        char *doc = NULL, *cfg = NULL;
        TAP_OK(sbx_config_load_file(path, &doc, &e_));
        TAP_OK(sbx_resolve_provider_config("sandbox", doc, &cfg, &e_));
        json_t *c = json_loads(cfg, 0, NULL);
        json_object_set_new(json_object_get(c, names[i]), "sbx_test_rotten_key", json_true());
        char *bad = json_dumps(c, JSON_COMPACT);
        sbx_provider *p = NULL;
        sbx_error *e = NULL;
        TAP_NE_INT(sbx_provider_new(bad, &p, ERR(e)), SBX_OK);
        TAP_CONTAINS(sbx_error_message(e), "sbx_test_rotten_key");
        sbx_error_free(e);
        free(bad);
        json_decref(c);
        free(cfg);
        free(doc);
        free(path);
    }
    sbx_strv_free(names);
}

/* --- through the CLI ------------------------------------------------------- */

/* Runs argv, returning its exit status and stdout (stderr is passed through). */
static int run_cli(const char *const argv[], char *out, size_t cap)
{
    int fds[2];
    TAP_EQ_INT(pipe2(fds, O_CLOEXEC), 0);
    pid_t pid = fork();
    TAP_TRUE(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    for (ssize_t r; len + 1 < cap && (r = read(fds[0], out + len, cap - 1 - len)) != 0;) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        len += (size_t)r;
    }
    out[len] = 0;
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_cli_runs_a_box_with_each(void)
{
    need_source_tree();
    char state[PATH_MAX], tmp[PATH_MAX];
    snprintf(state, sizeof(state), "%s/state", tap_tmpdir());
    snprintf(tmp, sizeof(tmp), "%s/tmp", tap_tmpdir());
    TAP_EQ_INT(mkdir(tmp, 0700), 0);
    setenv("SBX_STATE_DIR", state, 1);
    setenv("TMPDIR", tmp, 1);
    static const char *const which[] = { "linux", "local" };
    for (size_t i = 0; i < sizeof(which) / sizeof(which[0]); i++) {
        if (!strcmp(which[i], "linux") && geteuid() != 0)
            TAP_SKIP("linux boxes need root");
        char *path = file_of(which[i]);
        char out[4096];
        const char *argv[] = { sbx_bin(), "run", "--config", path, "--no-stdin", "--",
                         "sh", "-c", "echo shipped $((6 * 7))", NULL };
        TAP_EQ_INT(run_cli(argv, out, sizeof(out)), 0);
        TAP_EQ_STR(out, "shipped 42\n");
        /* The same block named explicitly, as a NeMo Gym config names it. */
        const char *argv2[] = { sbx_bin(), "run", "--config", path, "--block", "sandbox",
                          "--no-stdin", "--", "sh", "-c", "exit 3", NULL };
        TAP_EQ_INT(run_cli(argv2, out, sizeof(out)), 3);
        free(path);
    }
}

TAP_MAIN(TAP(test_every_provider_ships_a_config), TAP(test_each_file_resolves_and_constructs),
         TAP(test_unknown_key_is_caught), TAP_T(test_cli_runs_a_box_with_each, 120))
