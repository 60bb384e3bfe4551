/*
 * The apptainer provider's config: the reference's sections (`create`,
 * `exec`, `probe`) and `bin_path`, with its defaults and its validation
 * messages; an unknown key is an error, as the reference's dataclasses raise
 * TypeError. Ours: `agent` (default true), `state_dir`, `create.default_image`.
 */
#include "apptainer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

void ap_config_clear(struct ap *a)
{
    free(a->bin);
    strv_free(a->child_env);
    free(a->tmp_dir);
    free(a->agent_path);
    free(a->mount_point);
    strv_free(a->extra_start_args);
    free(a->default_image);
    strv_free(a->default_binds);
    strv_free(a->extra_exec_args);
    free(a->probe_command);
    free(a->probe_expected);
}

static int fail(sbx_error **err, const char *fmt, const char *a1, const char *a2)
{
    *err = sbx_error_new(SBX_EINVAL, fmt, a1, a2);
    return SBX_EINVAL;
}

/* Unknown keys of a section: the reference's "unexpected keyword argument". */
static int only_keys(json_t *o, const char *section, const char *const *known, sbx_error **err)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        size_t i = 0;
        while (known[i] && strcmp(known[i], k))
            i++;
        if (!known[i]) {
            /* The reference's words, then what is known (what to write instead). */
            char list[1024] = "";
            size_t n = 0;
            for (size_t j = 0; known[j] && n < sizeof(list); j++)
                n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", j ? ", " : "", known[j]);
            *err = sbx_error_new(SBX_EINVAL,
                                 "apptainer %s config: unexpected keyword argument '%s' (known: %s)",
                                 section, k, list);
            return SBX_EINVAL;
        }
    }
    return SBX_OK;
}

static int get_num(json_t *o, const char *sec, const char *key, double *out, int allow_null,
                   sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return SBX_OK;
    if (json_is_null(v) && allow_null) {
        *out = 0;
        return SBX_OK;
    }
    if (!json_is_number(v) || json_is_true(v) || json_is_false(v))
        return fail(err, "apptainer %s config: %s must be a number", sec, key);
    *out = json_number_value(v);
    return SBX_OK;
}

static int get_bool(json_t *o, const char *sec, const char *key, int *out, sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return SBX_OK;
    if (!json_is_boolean(v))
        return fail(err, "apptainer %s config: %s must be true or false", sec, key);
    *out = json_is_true(v);
    return SBX_OK;
}

static int get_str(json_t *o, const char *sec, const char *key, char **out, int allow_null,
                   sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return SBX_OK;
    if (json_is_null(v) && allow_null) {
        free(*out);
        *out = NULL;
        return SBX_OK;
    }
    if (!json_is_string(v))
        return fail(err, "apptainer %s config: %s must be a string", sec, key);
    char *s = strdup(json_string_value(v));
    if (!s)
        return SBX_ENOMEM;
    free(*out);
    *out = s;
    return SBX_OK;
}

static int get_strv(json_t *o, const char *sec, const char *key, char ***out, sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return SBX_OK;
    if (!json_is_array(v))
        return fail(err, "apptainer %s config: %s must be a list of strings", sec, key);
    char **r = calloc(json_array_size(v) + 1, sizeof(char *));
    if (!r)
        return SBX_ENOMEM;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || !(r[i] = strdup(json_string_value(e)))) {
            strv_free(r);
            return json_is_string(e) ? SBX_ENOMEM
                                     : fail(err, "apptainer %s config: %s must be a list of strings",
                                            sec, key);
        }
    }
    strv_free(*out);
    *out = r;
    return SBX_OK;
}

/* A section: absent or null gives the defaults; otherwise a mapping. */
static int section(json_t *root, const char *name, json_t **out, sbx_error **err)
{
    json_t *v = json_object_get(root, name);
    *out = NULL;
    if (!v || json_is_null(v))
        return SBX_OK;
    if (!json_is_object(v))
        return fail(err, "apptainer config: %s must be a mapping (Apptainer%sConfig)", name,
                    !strcmp(name, "create") ? "Create" : !strcmp(name, "exec") ? "Exec" : "Probe");
    *out = v;
    return SBX_OK;
}

static char **empty_strv(void)
{
    return calloc(1, sizeof(char *));
}

/* The binary: <bin_path>/apptainer (no fallback), else the first on PATH. */
static int find_bin(struct ap *a, const char *bin_path, sbx_error **err)
{
    char p[4096];
    struct stat st;
    if (bin_path) {
        if ((size_t)snprintf(p, sizeof(p), "%s/apptainer", bin_path) >= sizeof(p))
            return fail(err, "apptainer config: bin_path is too long%s%s", "", "");
        if (stat(p, &st) < 0 || !S_ISREG(st.st_mode) || access(p, X_OK) < 0) {
            *err = sbx_error_new(SBX_EINVAL,
                                 "apptainer binary not found or not executable at %s "
                                 "(bin_path=%s); bin_path has no PATH fallback: fix it or "
                                 "leave it unset",
                                 p, bin_path);
            return SBX_EINVAL;
        }
        return (a->bin = strdup(p)) ? SBX_OK : SBX_ENOMEM;
    }
    const char *path = getenv("PATH");
    for (const char *s = path ? path : ""; *s;) {
        size_t n = strcspn(s, ":");
        if (n && n < sizeof(p) - 16) {
            snprintf(p, sizeof(p), "%.*s/apptainer", (int)n, s);
            if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0)
                return (a->bin = strdup(p)) ? SBX_OK : SBX_ENOMEM;
        }
        s += n;
        if (*s == ':')
            s++;
    }
    *err = sbx_error_new(SBX_EINVAL, "apptainer executable not found on PATH: install Apptainer "
                                     "(or load its module), or set bin_path");
    return SBX_EINVAL;
}

/* The children's env: this process's at init, with PATH=<bin_path>:$PATH when bin_path is set. */
static int child_env(struct ap *a, const char *bin_path)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **e = calloc(n + 2, sizeof(char *));
    if (!e)
        return SBX_ENOMEM;
    size_t j = 0;
    int saw_path = 0;
    for (size_t i = 0; i < n; i++) {
        if (bin_path && !strncmp(environ[i], "PATH=", 5)) {
            size_t l = strlen(bin_path) + strlen(environ[i]) + 2;
            if ((e[j] = malloc(l)))
                snprintf(e[j], l, "PATH=%s:%s", bin_path, environ[i] + 5);
            saw_path = 1;
        } else {
            e[j] = strdup(environ[i]);
        }
        if (!e[j++]) {
            strv_free(e);
            return SBX_ENOMEM;
        }
    }
    if (bin_path && !saw_path) {
        size_t l = strlen(bin_path) + 6;
        if (!(e[j] = malloc(l))) {
            strv_free(e);
            return SBX_ENOMEM;
        }
        snprintf(e[j], l, "PATH=%s", bin_path);
    }
    a->child_env = e;
    return SBX_OK;
}

int ap_config_parse(struct ap *a, const char *config_json, sbx_error **err)
{
    json_error_t jerr;
    json_t *root = json_loads(config_json && *config_json ? config_json : "{}", 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return fail(err, "apptainer config must be a mapping%s%s", "", "");
    }
    /* The reference's defaults. */
    a->agent = 1;
    a->start_timeout_s = 600;
    a->apply_resource_limits = 1;
    a->default_timeout_s = 180;
    a->fakeroot_for_root = 1;
    a->concurrency = 32;
    a->probe_timeout_s = 30;
    a->probe_stable_count = 1;
    double stable_count = 1, concurrency = 32;
    a->mount_point = strdup(AP_MOUNT_POINT);
    a->probe_command = strdup(AP_PROBE_COMMAND);
    a->probe_expected = strdup(AP_PROBE_EXPECTED);
    a->extra_start_args = empty_strv();
    a->default_binds = empty_strv();
    a->extra_exec_args = empty_strv();
    char *bin_path = NULL, *state_dir = NULL;
    json_t *c, *x, *p;
    static const char *const top[] = {"bin_path", "create", "exec", "probe", "agent", "state_dir",
                                      NULL};
    static const char *const ck[] = {"mount_point", "start_timeout_s", "extra_start_args",
                                     "apply_resource_limits", "default_image", NULL};
    static const char *const xk[] = {"default_timeout_s", "fakeroot_for_root", "default_binds",
                                     "extra_exec_args", "concurrency", NULL};
    static const char *const pk[] = {"command",  "expected_stdout", "timeout_s",
                                     "deadline_s", "stable_count",  "stable_delay_s", NULL};
    int rc;
    if (!a->mount_point || !a->probe_command || !a->probe_expected || !a->extra_start_args ||
        !a->default_binds || !a->extra_exec_args)
        rc = SBX_ENOMEM;
    else if ((rc = only_keys(root, "provider", top, err)) < 0 ||
             (rc = get_str(root, "provider", "bin_path", &bin_path, 1, err)) < 0 ||
             (rc = get_str(root, "provider", "state_dir", &state_dir, 1, err)) < 0 ||
             (rc = get_bool(root, "provider", "agent", &a->agent, err)) < 0 ||
             (rc = section(root, "create", &c, err)) < 0 ||
             (rc = section(root, "exec", &x, err)) < 0 ||
             (rc = section(root, "probe", &p, err)) < 0)
        ;
    else if (c && ((rc = only_keys(c, "create", ck, err)) < 0 ||
                   (rc = get_str(c, "create", "mount_point", &a->mount_point, 0, err)) < 0 ||
                   (rc = get_num(c, "create", "start_timeout_s", &a->start_timeout_s, 1, err)) < 0 ||
                   (rc = get_strv(c, "create", "extra_start_args", &a->extra_start_args, err)) < 0 ||
                   (rc = get_bool(c, "create", "apply_resource_limits", &a->apply_resource_limits,
                                  err)) < 0 ||
                   (rc = get_str(c, "create", "default_image", &a->default_image, 1, err)) < 0))
        ;
    else if (x && ((rc = only_keys(x, "exec", xk, err)) < 0 ||
                   (rc = get_num(x, "exec", "default_timeout_s", &a->default_timeout_s, 1, err)) < 0 ||
                   (rc = get_bool(x, "exec", "fakeroot_for_root", &a->fakeroot_for_root, err)) < 0 ||
                   (rc = get_strv(x, "exec", "default_binds", &a->default_binds, err)) < 0 ||
                   (rc = get_strv(x, "exec", "extra_exec_args", &a->extra_exec_args, err)) < 0 ||
                   (rc = get_num(x, "exec", "concurrency", &concurrency, 0, err)) < 0))
        ;
    else if (p && ((rc = only_keys(p, "probe", pk, err)) < 0 ||
                   (rc = get_str(p, "probe", "command", &a->probe_command, 1, err)) < 0 ||
                   (rc = get_str(p, "probe", "expected_stdout", &a->probe_expected, 1, err)) < 0 ||
                   (rc = get_num(p, "probe", "timeout_s", &a->probe_timeout_s, 1, err)) < 0 ||
                   (rc = get_num(p, "probe", "deadline_s", &a->probe_deadline_s, 1, err)) < 0 ||
                   (rc = get_num(p, "probe", "stable_count", &stable_count, 0, err)) < 0 ||
                   (rc = get_num(p, "probe", "stable_delay_s", &a->probe_stable_delay_s, 0, err)) <
                       0))
        ;
    /* The reference's __post_init__ checks, with its messages. */
    else if (a->mount_point[0] != '/')
        rc = fail(err, "create: mount_point must be an absolute path (got '%s')%s", a->mount_point,
                  "");
    else if (json_object_get(c, "start_timeout_s") && !json_is_null(json_object_get(c, "start_timeout_s")) &&
             a->start_timeout_s <= 0)
        rc = fail(err, "create: start_timeout_s must be None or > 0%s%s", "", "");
    else if (json_object_get(x, "default_timeout_s") &&
             !json_is_null(json_object_get(x, "default_timeout_s")) && a->default_timeout_s <= 0)
        rc = fail(err, "exec: default_timeout_s must be None or > 0%s%s", "", "");
    else if (concurrency < 1 || concurrency > 4096 || concurrency != (long)concurrency)
        rc = fail(err, "exec: concurrency must be >= 1%s%s", "", "");
    else if (a->probe_command && json_object_get(p, "timeout_s") &&
             !json_is_null(json_object_get(p, "timeout_s")) && a->probe_timeout_s <= 0)
        rc = fail(err, "probe: timeout_s must be > 0%s%s", "", "");
    else if (json_object_get(p, "deadline_s") && !json_is_null(json_object_get(p, "deadline_s")) &&
             a->probe_deadline_s <= 0)
        rc = fail(err, "probe: deadline_s must be None or > 0%s%s", "", "");
    else if (stable_count < 1 || stable_count != (long)stable_count)
        rc = fail(err, "probe: stable_count must be >= 1%s%s", "", "");
    else if (a->probe_stable_delay_s < 0)
        rc = fail(err, "probe: stable_delay_s must be >= 0%s%s", "", "");
    if (rc == SBX_OK) {
        a->concurrency = (long)concurrency;
        a->probe_stable_count = (long)stable_count;
        const char *t = getenv("TMPDIR");
        if ((rc = find_bin(a, bin_path, err)) == SBX_OK && (rc = child_env(a, bin_path)) == SBX_OK &&
            !(a->tmp_dir = strdup(t && *t ? t : "/tmp")))
            rc = SBX_ENOMEM;
    }
    if (rc == SBX_OK && a->agent && !(a->agent_path = sbx_box_find_agent())) {
        *err = sbx_error_new(SBX_EINVAL, "apptainer: cannot find the sbx-agent binary (install "
                                         "sbx, set SBX_AGENT, or set agent: false)");
        rc = SBX_EINVAL;
    }
    if (rc == SBX_OK)
        rc = sbx_box_store_open("apptainer", state_dir, &a->store, err);
    if (rc == SBX_OK && !(a->pool = sbx_box_pool_new(0)))
        rc = SBX_ENOMEM;
    if (rc == SBX_OK) {
        if (sem_init(&a->slots, 0, (unsigned)a->concurrency) < 0)
            rc = SBX_ENOMEM;
        else
            a->slots_ready = 1;
    }
    free(bin_path);
    free(state_dir);
    json_decref(root);
    return rc;
}
