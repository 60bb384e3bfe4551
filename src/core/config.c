/*
 * Provider config resolution (reference-api.md J) and image rewrites (L).
 *
 * The reference takes `sandbox_provider` as a Python value: a str names a
 * top-level block of the merged config, a mapping is an inline block, and
 * anything else is a TypeError. C receives text, so the value's type is read
 * from the text itself, as YAML would read it in a config file:
 *
 *   - text whose first non-space character is '{' is an inline mapping
 *     (JSON or a YAML flow mapping);
 *   - other text is parsed as one YAML value: a mapping ("docker: {}") is
 *     inline, a string ("sandbox", "'sandbox'") is a block name, and a list,
 *     number, boolean or null ("[a]", "42", "true", "~") is the reference's
 *     TypeError, SBX_ETYPE "sandbox_provider must be a name reference (str)
 *     or a single-key provider mapping, got list";
 *   - text that is not valid YAML, or is only blanks, is taken verbatim as a
 *     name (and then usually fails as "not defined", listing the candidates).
 *
 * ${oc.env:...} interpolation applies to the selected block only, as
 * OmegaConf resolves a block when it is converted to a container: a missing
 * variable in an unrelated block does not fail the lookup.
 */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>

#define DEFAULT_METADATA_KEY "default_metadata"
#define INLINE_SOURCE "inline sandbox_provider config"

/* --- whole documents ------------------------------------------------------ */

/* Parses text and resolves ${oc.env:...} everywhere in it. */
static int load_interpolated(const char *text, json_t **out, sbx_error **err)
{
    json_t *v = NULL;
    int rc = sbx__parse_config_text(text, &v, err);
    if (rc < 0)
        return rc;
    if ((rc = sbx__interpolate(v, err)) < 0) {
        json_decref(v);
        return rc;
    }
    *out = v;
    return SBX_OK;
}

static int dump_to(const json_t *v, char **json_out, sbx_error **err)
{
    char *text = sbx__json_dump(v);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *json_out = text;
    return SBX_OK;
}

int sbx_config_to_json(const char *text, char **json_out, sbx_error **err)
{
    if (!text || !json_out)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_config_to_json: text and json_out are required");
    _cleanup_json_ json_t *v = NULL;
    int rc = load_interpolated(text, &v, err);
    if (rc < 0)
        return rc;
    return dump_to(v, json_out, err);
}

int sbx_config_load_file(const char *path, char **json_out, sbx_error **err)
{
    if (!path || !json_out)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_config_load_file: path and json_out are required");
    _cleanup_free_ char *data = NULL;
    size_t len = 0;
    if (sbx__read_file(path, &data, &len) < 0)
        return sbx__set_errno(err, sbx__code_from_errno(errno), errno,
                              "cannot read config file %s", path);
    if (memchr(data, 0, len))
        return sbx__set_error(err, SBX_EINVAL,
                              "config file %s contains a NUL byte: it is not YAML or JSON text",
                              path);
    sbx_error *e = NULL;
    _cleanup_json_ json_t *v = NULL;
    int rc = load_interpolated(data, &v, &e);
    if (rc < 0)
        return sbx__fail(err, sbx_error_prefix(e, "%s", path));
    return dump_to(v, json_out, err);
}

/* --- resolving a reference ------------------------------------------------ */

static bool all_blank(const char *s)
{
    for (; *s; s++)
        if (!isspace((unsigned char)*s))
            return false;
    return true;
}

/* Keys of `block` other than the reserved default_metadata, in order. */
static json_t *provider_keys(const json_t *block)
{
    json_t *keys = json_array();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)block, k, v) {
        (void)v;
        if (strcmp(k, DEFAULT_METADATA_KEY) != 0)
            json_array_append_new(keys, json_string(k));
    }
    return keys;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * The reference's candidate list: top-level keys whose value is a mapping
 * with exactly one non-reserved key, sorted, each in repr quotes, joined by
 * ", "; "(none)" when there is none.
 */
static char *candidates(const json_t *doc)
{
    size_t n = 0, cap = doc ? json_object_size(doc) : 0;
    const char **names = calloc(cap + 1, sizeof(char *));
    if (!names)
        return NULL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)doc, k, v) {
        if (!json_is_object(v))
            continue;
        json_t *keys = provider_keys(v);
        if (json_array_size(keys) == 1)
            names[n++] = k;
        json_decref(keys);
    }
    qsort(names, n, sizeof(char *), cmp_str);
    sbx_buf b = { 0 };
    for (size_t i = 0; i < n; i++) {
        char *r = sbx__repr(names[i]);
        sbx__buf_printf(&b, "%s%s", i ? ", " : "", r ? r : names[i]);
        free(r);
    }
    free(names);
    if (!b.data)
        return strdup("(none)");
    return b.data;
}

static int not_a_name_reference(const char *type, sbx_error **err)
{
    return sbx__set_error(err, SBX_ETYPE,
                          "sandbox_provider must be a name reference (str) or a single-key "
                          "provider mapping, got %s",
                          type);
}

/*
 * Hands out a found block (a copy the caller may change) and the name of
 * where it came from, after resolving ${oc.env:...} in it. Takes both; either
 * may be NULL after a failed allocation.
 */
static int found_block(json_t *block, char *source, json_t **block_out, char **source_out,
                       sbx_error **err)
{
    int rc = block && source ? sbx__interpolate(block, err)
                             : sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (rc < 0) {
        json_decref(block);
        free(source);
        return rc;
    }
    *block_out = block;
    *source_out = source;
    return SBX_OK;
}

static int lookup_named(const char *name, const char *document, json_t **block_out,
                        char **source_out, sbx_error **err)
{
    _cleanup_json_ json_t *doc = NULL;
    if (document) {
        sbx_error *e = NULL;
        if (sbx__parse_config_text(document, &doc, &e) < 0)
            return sbx__fail(err, sbx_error_prefix(e, "merged config"));
        if (json_is_null(doc)) {
            json_decref(doc);
            doc = NULL;
        } else if (!json_is_object(doc)) {
            return sbx__set_error(err, SBX_ETYPE,
                                  "the merged config must be a mapping of top-level blocks, got %s",
                                  sbx__json_typename(doc));
        }
    }
    json_t *block = doc ? json_object_get(doc, name) : NULL;
    _cleanup_free_ char *r = sbx__repr(name);
    if (!block || json_is_null(block)) {
        _cleanup_free_ char *cands = candidates(doc);
        return sbx__set_error(
            err, SBX_EINVAL,
            "Sandbox provider reference %s is not defined in the merged config. Define a "
            "top-level '%s:' block (e.g. via "
            "nemo_gym/sandbox/providers/<provider>/configs/<provider>.yaml) and include it in "
            "your config_paths. Available sandbox configs: %s",
            r ? r : name, name, cands ? cands : "(none)");
    }
    return found_block(json_deep_copy(block), sbx__printf("reference %s", r ? r : name),
                       block_out, source_out, err);
}

/* Finds the block `ref` designates; `*source_out` names it for messages. */
static int resolve_block(const char *ref, const char *document, json_t **block_out,
                         char **source_out, sbx_error **err)
{
    if (!ref)
        return not_a_name_reference("NoneType", err);
    if (!*ref)
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox provider reference must be a non-empty string");
    if (all_blank(ref))
        return lookup_named(ref, document, block_out, source_out, err);

    const char *p = ref;
    while (isspace((unsigned char)*p))
        p++;
    json_t *v = NULL;
    if (*p == '{') {
        sbx_error *e = NULL;
        if (sbx__parse_config_text(ref, &v, &e) < 0)
            return sbx__fail(err, sbx_error_prefix(e, INLINE_SOURCE));
    } else if (sbx__parse_config_text(ref, &v, NULL) < 0) {
        return lookup_named(ref, document, block_out, source_out, err);
    }

    if (json_is_string(v)) {
        int rc = lookup_named(json_string_value(v), document, block_out, source_out, err);
        json_decref(v);
        return rc;
    }
    if (!json_is_object(v)) {
        int rc = not_a_name_reference(sbx__json_typename(v), err);
        json_decref(v);
        return rc;
    }
    return found_block(v, strdup(INLINE_SOURCE), block_out, source_out, err);
}

/*
 * What both resolvers do first: check `json_out` (named in `fn`'s message),
 * find the block `ref` designates and require a mapping. `*block` and
 * `*source` may be set on failure too: the caller frees them.
 */
static int resolve_mapping(const char *fn, const char *ref, const char *document,
                           char **json_out, json_t **block, char **source, sbx_error **err)
{
    if (!json_out)
        return sbx__set_error(err, SBX_EINVAL, "%s: json_out is NULL", fn);
    int rc = resolve_block(ref, document, block, source, err);
    if (rc < 0)
        return rc;
    if (!json_is_object(*block)) {
        _cleanup_free_ char *r = sbx__json_repr(*block);
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox provider config from %s must be a mapping, got: %s",
                              *source, r ? r : "?");
    }
    return SBX_OK;
}

int sbx_resolve_provider_config(const char *ref, const char *document, char **json_out,
                                sbx_error **err)
{
    _cleanup_json_ json_t *block = NULL;
    _cleanup_free_ char *source = NULL;
    int rc = resolve_mapping(__func__, ref, document, json_out, &block, &source, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *keys = provider_keys(block);
    if (json_array_size(keys) != 1) {
        _cleanup_free_ char *r = sbx__json_repr(keys);
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox provider config from %s must have exactly one provider key "
                              "{provider_name: config}, got keys: %s",
                              source, r ? r : "?");
    }
    const char *key = json_string_value(json_array_get(keys, 0));
    _cleanup_json_ json_t *out = json_object();
    if (!out || json_object_set(out, key, json_object_get(block, key)) < 0)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return dump_to(out, json_out, err);
}

/* Python truthiness of a JSON value. */
static bool truthy(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0.0;
    case JSON_TRUE:
        return true;
    case JSON_FALSE:
    case JSON_NULL:
        return false;
    }
    return false;
}

int sbx_resolve_provider_metadata(const char *ref, const char *document, char **json_out,
                                  sbx_error **err)
{
    _cleanup_json_ json_t *block = NULL;
    _cleanup_free_ char *source = NULL;
    int rc = resolve_mapping(__func__, ref, document, json_out, &block, &source, err);
    if (rc < 0)
        return rc;
    /* The reference does not count provider keys here: `block.get(...) or {}`. */
    json_t *md = json_object_get(block, DEFAULT_METADATA_KEY);
    if (!md || !truthy(md)) {
        char *empty = strdup("{}");
        if (!empty)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        *json_out = empty;
        return SBX_OK;
    }
    if (!json_is_object(md)) {
        _cleanup_free_ char *r = sbx__json_repr(md);
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox '" DEFAULT_METADATA_KEY
                              "' from %s must be a mapping, got: %s",
                              source, r ? r : "?");
    }
    return dump_to(md, json_out, err);
}

/* --- rewrite_image --------------------------------------------------------- */

static int rewrite_field(const json_t *entry, size_t i, const char *key, const char **out,
                         sbx_error **err)
{
    json_t *v = json_object_get(entry, key);
    if (!v)
        return sbx__set_error(err, SBX_EINVAL,
                              "image rewrite %zu has no '%s' key (KeyError '%s'): each rewrite is "
                              "{\"from\": prefix, \"to\": replacement}",
                              i, key, key);
    if (!json_is_string(v))
        return sbx__set_error(err, SBX_ETYPE, "image rewrite %zu: '%s' must be a string, got %s",
                              i, key, sbx__json_typename(v));
    *out = json_string_value(v);
    return SBX_OK;
}

int sbx_rewrite_image(const char *image, const char *rewrites_json, char **out, sbx_error **err)
{
    if (!out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_rewrite_image: out is NULL");
    if (!image) {
        *out = NULL;
        return SBX_OK;
    }
    _cleanup_json_ json_t *rw = NULL;
    if (rewrites_json) {
        int rc = sbx__parse_config_text(rewrites_json, &rw, err);
        if (rc < 0)
            return rc;
    }
    if (rw && !json_is_null(rw) && !json_is_array(rw))
        return sbx__set_error(err, SBX_ETYPE,
                              "image rewrites must be a list of {\"from\": ..., \"to\": ...} "
                              "mappings, got %s",
                              sbx__json_typename(rw));
    /* Entries are checked only when reached, as the reference's loop does. */
    for (size_t i = 0; i < json_array_size(rw); i++) {
        const json_t *entry = json_array_get(rw, i);
        if (!json_is_object(entry))
            return sbx__set_error(err, SBX_ETYPE, "image rewrite %zu must be a mapping, got %s",
                                  i, sbx__json_typename(entry));
        const char *from, *to;
        int rc;
        if ((rc = rewrite_field(entry, i, "from", &from, err)) < 0)
            return rc;
        size_t n = strlen(from);
        if (strncmp(image, from, n) != 0)
            continue;
        if ((rc = rewrite_field(entry, i, "to", &to, err)) < 0)
            return rc;
        char *r = sbx__printf("%s%s", to, image + n);
        if (!r)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        *out = r;
        return SBX_OK;
    }
    char *same = strdup(image);
    if (!same)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *out = same;
    return SBX_OK;
}
