/*
 * Stand-ins for library calls being written on the `config` branch
 * (sbx_shell_quote, sbx_config_load_file, sbx_resolve_provider_config,
 * sbx_resolve_provider_metadata). TODO: once that branch is merged, delete
 * this file and call the library directly.
 */
#include "cli/cli.h"

#include <stdio.h>

/* Python's shlex.quote: safe words as they are, else single-quoted. */
char *cli_shell_quote(const char *s)
{
    if (!*s)
        return strdup("''");
    bool safe = true;
    for (const char *p = s; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              strchr("_@%+=:,./-", ch))) {
            safe = false;
            break;
        }
    }
    if (safe)
        return strdup(s);
    sbx_buf b = { 0 };
    int rc = sbx__buf_append(&b, "'", 1);
    for (const char *p = s; *p && rc == 0; p++)
        rc = *p == '\'' ? sbx__buf_append(&b, "'\"'\"'", 5) : sbx__buf_append(&b, p, 1);
    if (rc == 0)
        rc = sbx__buf_append(&b, "'", 1);
    if (rc < 0) {
        sbx__buf_free(&b);
        return NULL;
    }
    return b.data;
}

char *cli_join_argv(char *const *argv, int argc)
{
    sbx_buf b = { 0 };
    for (int i = 0; i < argc; i++) {
        _cleanup_free_ char *q = cli_shell_quote(argv[i]);
        if (!q || (i && sbx__buf_append(&b, " ", 1) < 0) || sbx__buf_append(&b, q, strlen(q)) < 0) {
            sbx__buf_free(&b);
            return NULL;
        }
    }
    if (!b.data && sbx__buf_append(&b, "", 0) < 0)
        return NULL;
    return b.data;
}

int cli_config_load_file(const char *path, char **json_out, sbx_error **err)
{
    _cleanup_free_ char *text = NULL;
    if (sbx__read_file(path, &text, NULL) < 0)
        return sbx__set_errno(err, SBX_ENOENT, errno, "cannot read config file %s", path);
    _cleanup_json_ json_t *v = NULL;
    int rc = sbx__parse_config_text(text, &v, err);
    if (rc < 0)
        return rc;
    if ((rc = sbx__interpolate(v, err)) < 0)
        return rc;
    char *out = sbx__json_dump(v);
    if (!out)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *json_out = out;
    return SBX_OK;
}

static int find_block(const char *ref, const char *document, json_t **block, sbx_error **err)
{
    _cleanup_json_ json_t *doc = NULL;
    if (document) {
        int rc = sbx__parse_config_text(document, &doc, err);
        if (rc < 0)
            return rc;
    }
    json_t *b = json_is_object(doc) ? json_object_get(doc, ref) : NULL;
    if (!b || json_is_null(b))
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox provider reference '%s' is not defined in the merged "
                              "config. Define a top-level '%s:' block.",
                              ref, ref);
    if (!json_is_object(b))
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox provider config from reference '%s' must be a mapping", ref);
    *block = json_incref(b);
    return SBX_OK;
}

int cli_resolve_provider_config(const char *ref, const char *document, char **json_out,
                                sbx_error **err)
{
    _cleanup_json_ json_t *b = NULL;
    int rc = find_block(ref, document, &b, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *out = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v)
    {
        if (strcmp(k, "default_metadata") != 0)
            json_object_set(out, k, v);
    }
    if (json_object_size(out) != 1)
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox provider config from reference '%s' must have exactly one "
                              "provider key {provider_name: config}",
                              ref);
    *json_out = sbx__json_dump(out);
    return *json_out ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}

int cli_resolve_provider_metadata(const char *ref, const char *document, char **json_out,
                                  sbx_error **err)
{
    _cleanup_json_ json_t *b = NULL;
    int rc = find_block(ref, document, &b, err);
    if (rc < 0)
        return rc;
    json_t *m = json_object_get(b, "default_metadata");
    if (m && !json_is_null(m) && !json_is_object(m))
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox 'default_metadata' from reference '%s' must be a mapping",
                              ref);
    *json_out = json_is_object(m) ? sbx__json_dump(m) : strdup("{}");
    return *json_out ? SBX_OK : sbx__set_error(err, SBX_ENOMEM, "out of memory");
}
