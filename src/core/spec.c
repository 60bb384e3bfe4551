/*
 * The sandbox spec and its validation, as the reference's SandboxSpec,
 * SandboxResources.from_mapping and port normalisation (reference-api.md B).
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>

sbx_spec *sbx_spec_new(void)
{
    sbx_spec *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->ttl_s = s->ready_timeout_s = -1;
    s->cpu = -1;
    s->memory_mib = s->disk_gib = s->gpu = -1;
    s->provider_options = json_object();
    if (!s->provider_options) {
        free(s);
        return NULL;
    }
    return s;
}

void sbx_spec_free(sbx_spec *s)
{
    if (!s)
        return;
    free(s->image);
    free(s->workdir);
    sbx__kv_free(&s->env);
    for (size_t i = 0; i < s->n_files; i++) {
        free(s->files[i].path);
        free(s->files[i].data);
    }
    free(s->files);
    json_decref(s->file_index);
    sbx__kv_free(&s->metadata);
    free(s->gpu_type);
    sbx_strv_free(s->entrypoint);
    json_decref(s->provider_options);
    free(s->provider_options_text);
    free(s->ports);
    free(s);
}

static int set_str(char **slot, const char *v)
{
    char *n = NULL;
    if (v && !(n = strdup(v)))
        return SBX_ENOMEM;
    free(*slot);
    *slot = n;
    return SBX_OK;
}

/*
 * Number fields: -1 unsets the field (the reference's None). Any other
 * negative value, NaN or an infinity is a mistake, not "no limit": it is
 * refused rather than dropped.
 */
static int set_real(double *slot, double v, double max)
{
    if (v != -1 && !(isfinite(v) && v >= 0 && v <= max))
        return SBX_EINVAL;
    *slot = v;
    return SBX_OK;
}

static int set_count(long long *slot, long long v, long long max)
{
    if (v < -1 || v > max)
        return SBX_EINVAL;
    *slot = v;
    return SBX_OK;
}

/* A box path: relative to nothing the box knows, a relative workdir failed every exec. */
static bool absolute_path(const char *p)
{
    return !p || p[0] == '/';
}

int sbx_spec_set_image(sbx_spec *s, const char *image)
{
    return s ? set_str(&s->image, image) : SBX_EINVAL;
}

int sbx_spec_set_workdir(sbx_spec *s, const char *dir)
{
    return s && absolute_path(dir) ? set_str(&s->workdir, dir) : SBX_EINVAL;
}

int sbx_spec_set_ttl(sbx_spec *s, double seconds)
{
    return s ? set_real(&s->ttl_s, seconds, SBX_MAX_SECONDS) : SBX_EINVAL;
}

int sbx_spec_set_ready_timeout(sbx_spec *s, double seconds)
{
    return s ? set_real(&s->ready_timeout_s, seconds, SBX_MAX_SECONDS) : SBX_EINVAL;
}

int sbx_spec_set_env(sbx_spec *s, const char *key, const char *value)
{
    if (!s || !key || !*key || strchr(key, '=') || !value || sbx__env_fits(&s->env, key, value) < 0)
        return SBX_EINVAL;
    return sbx__kv_set(&s->env, key, value);
}

static int add_file(sbx_spec *s, const char *path, const void *data, size_t len, int mode)
{
    if (!s || !path || !*path || (!data && len) || mode > 0777)
        return SBX_EINVAL;
    char *copy = malloc(len + 1);
    if (!copy)
        return SBX_ENOMEM;
    if (len)
        memcpy(copy, data, len);
    copy[len] = 0;
    /* A hashed lookup by path (specs are input: 100,000 files took 11 s with a scan each). */
    if (!s->file_index && !(s->file_index = json_object())) {
        free(copy);
        return SBX_ENOMEM;
    }
    json_t *at = json_object_get(s->file_index, path);
    if (at) {
        struct sbx_spec_file *f = &s->files[json_integer_value(at)];
        free(f->data);
        f->data = copy;
        f->len = len;
        f->mode = mode;
        return SBX_OK;
    }
    if (s->n_files == s->cap_files) {
        size_t cap = s->cap_files ? 2 * s->cap_files : 8;
        struct sbx_spec_file *f = realloc(s->files, cap * sizeof(*f));
        if (!f) {
            free(copy);
            return SBX_ENOMEM;
        }
        s->files = f;
        s->cap_files = cap;
    }
    char *p = strdup(path);
    if (!p || json_object_set_new_nocheck(s->file_index, path,
                                          json_integer((json_int_t)s->n_files)) < 0) {
        free(p);
        free(copy);
        return SBX_ENOMEM;
    }
    s->files[s->n_files++] = (struct sbx_spec_file){ p, copy, len, mode };
    return SBX_OK;
}

int sbx_spec_add_file(sbx_spec *s, const char *path, const void *data, size_t len)
{
    return add_file(s, path, data, len, -1);
}

int sbx_spec_add_file_mode(sbx_spec *s, const char *path, const void *data, size_t len,
                           unsigned mode)
{
    return mode > 0777 ? SBX_EINVAL : add_file(s, path, data, len, (int)mode);
}

int sbx_spec_set_metadata(sbx_spec *s, const char *key, const char *value)
{
    if (!s || !key || !value)
        return SBX_EINVAL;
    return sbx__kv_set(&s->metadata, key, value);
}

int sbx_spec_set_cpu(sbx_spec *s, double cpu)
{
    return s ? set_real(&s->cpu, cpu, HUGE_VAL) : SBX_EINVAL;
}

int sbx_spec_set_memory_mib(sbx_spec *s, long long mib)
{
    return s ? set_count(&s->memory_mib, mib, SBX_MAX_MEMORY_MIB) : SBX_EINVAL;
}

int sbx_spec_set_disk_gib(sbx_spec *s, long long gib)
{
    return s ? set_count(&s->disk_gib, gib, SBX_MAX_DISK_GIB) : SBX_EINVAL;
}

int sbx_spec_set_gpu(sbx_spec *s, long long count)
{
    return s ? set_count(&s->gpu, count, SBX_MAX_GPU) : SBX_EINVAL;
}

int sbx_spec_set_gpu_type(sbx_spec *s, const char *type)
{
    return s ? set_str(&s->gpu_type, type) : SBX_EINVAL;
}

int sbx_spec_set_entrypoint(sbx_spec *s, const char *const *argv)
{
    if (!s)
        return SBX_EINVAL;
    char **copy = NULL;
    if (argv) {
        size_t n = 0;
        while (argv[n])
            n++;
        copy = calloc(n + 1, sizeof(char *));
        if (!copy)
            return SBX_ENOMEM;
        for (size_t i = 0; i < n; i++) {
            if (!(copy[i] = strdup(argv[i]))) {
                sbx_strv_free(copy);
                return SBX_ENOMEM;
            }
        }
    }
    sbx_strv_free(s->entrypoint);
    s->entrypoint = copy;
    return SBX_OK;
}

static int add_port_checked(sbx_spec *s, int port, sbx_error **err)
{
    if (port < 1 || port > 65535)
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox TCP port must be between 1 and 65535, got %d", port);
    for (size_t i = 0; i < s->n_ports; i++)
        if (s->ports[i] == port)
            return sbx__set_error(err, SBX_EINVAL, "Duplicate sandbox TCP port: %d", port);
    int *p = realloc(s->ports, (s->n_ports + 1) * sizeof(int));
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    s->ports = p;
    p[s->n_ports++] = port;
    return SBX_OK;
}

int sbx_spec_add_port(sbx_spec *s, int port, sbx_error **err)
{
    if (!s)
        return sbx__set_error(err, SBX_EINVAL, "spec is NULL");
    return add_port_checked(s, port, err);
}

int sbx__port_from_value(const json_t *v, int *out, sbx_error **err)
{
    long long port;
    if (json_is_boolean(v) || !(json_is_integer(v) || json_is_string(v))) {
        _cleanup_free_ char *r = sbx__json_repr(v);
        return sbx__set_error(err, SBX_EINVAL, "Invalid sandbox TCP port: %s", r ? r : "?");
    }
    if (json_is_integer(v)) {
        port = json_integer_value(v);
    } else if (sbx__parse_pyint(json_string_value(v), &port) < 0) {
        _cleanup_free_ char *r = sbx__json_repr(v);
        return sbx__set_error(err, SBX_EINVAL, "Invalid sandbox TCP port: %s", r ? r : "?");
    }
    if (port < 1 || port > 65535)
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox TCP port must be between 1 and 65535, got %lld", port);
    *out = (int)port;
    return SBX_OK;
}

int sbx_spec_set_provider_options(sbx_spec *s, const char *json, sbx_error **err)
{
    if (!s)
        return sbx__set_error(err, SBX_EINVAL, "spec is NULL");
    json_t *v;
    if (!json || !*json) {
        v = json_object();
    } else {
        json_error_t je;
        v = json_loads(json, JSON_DECODE_ANY, &je);
        if (!v)
            return sbx__set_error(err, SBX_EINVAL, "provider_options is not valid JSON: %s",
                                  je.text);
        if (!json_is_object(v)) {
            int rc = sbx__set_error(err, SBX_ETYPE,
                                    "Sandbox provider_options must be a mapping, got %s",
                                    sbx__json_typename(v));
            json_decref(v);
            return rc;
        }
    }
    json_decref(s->provider_options);
    s->provider_options = v;
    free(s->provider_options_text);
    s->provider_options_text = NULL;
    return SBX_OK;
}

/* --- resources (SandboxResources.from_mapping) ---------------------------- */

/*
 * The reference converts and keeps a negative count; sbx stores None as -1,
 * so a negative limit used to become "no limit" without a word. A limit
 * cannot be negative: say so.
 */
static int not_negative_int(const char *key, long long v, sbx_error **err)
{
    if (v < 0)
        return sbx__set_error(err, SBX_EINVAL,
                              "resources.%s must be 0 or more, got %lld; leave it out (or null) "
                              "for no limit",
                              key, v);
    /* Sizes become byte counts (memory_mib << 20): past these they overflow. */
    long long max = !strcmp(key, "memory_mib") ? SBX_MAX_MEMORY_MIB
                    : !strcmp(key, "disk_gib") ? SBX_MAX_DISK_GIB
                                               : SBX_MAX_GPU;
    if (v > max)
        return sbx__set_error(err, SBX_EINVAL, "resources.%s must be at most %lld, got %lld",
                              key, max, v);
    return SBX_OK;
}

static int conv_int(const char *key, json_t *v, long long *out, sbx_error **err)
{
    if (json_is_null(v)) {
        *out = -1;
        return SBX_OK;
    }
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return not_negative_int(key, *out, err);
    }
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return SBX_OK;
    }
    if (json_is_real(v)) {
        /* Python int(4.7) truncates. */
        double d = json_real_value(v);
        /* Out of range is undefined behaviour for the cast; Python's int has no range. */
        if (!isfinite(d) || d >= 9223372036854775808.0 || d <= -9223372036854775808.0)
            return sbx__set_error(err, SBX_EINVAL,
                                  "cannot convert float %g to integer (resources.%s)", d, key);
        *out = (long long)d;
        return not_negative_int(key, *out, err);
    }
    if (json_is_string(v) && sbx__parse_pyint(json_string_value(v), out) == 0)
        return not_negative_int(key, *out, err);
    _cleanup_free_ char *r = sbx__json_repr(v);
    if (json_is_string(v))
        return sbx__set_error(err, SBX_EINVAL,
                              "invalid literal for int() with base 10: %s (resources.%s must be "
                              "a whole number)",
                              r ? r : "?", key);
    return sbx__set_error(err, SBX_ETYPE,
                          "int() argument must be a string or a number, not '%s' (resources.%s)",
                          sbx__json_typename(v), key);
}

static int conv_float(json_t *v, double *out, sbx_error **err)
{
    if (json_is_null(v)) {
        *out = -1;
        return SBX_OK;
    }
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return SBX_OK;
    }
    if (json_is_number(v) ||
        (json_is_string(v) && sbx__parse_pyfloat(json_string_value(v), out) == 0)) {
        if (json_is_number(v))
            *out = json_number_value(v);
        _cleanup_free_ char *r = sbx__json_repr(v);
        /* NaN or infinity cannot be stored (JSON has neither) nor mean a CPU count. */
        if (!isfinite(*out))
            return sbx__set_error(err, SBX_EINVAL, "resources.cpu must be a finite number, got %s",
                                  r ? r : "?");
        if (*out < 0)
            return sbx__set_error(err, SBX_EINVAL,
                                  "resources.cpu must be 0 or more, got %s; leave it out (or null) "
                                  "for no limit",
                                  r ? r : "?");
        return SBX_OK;
    }
    _cleanup_free_ char *r = sbx__json_repr(v);
    if (json_is_string(v))
        return sbx__set_error(err, SBX_EINVAL,
                              "could not convert string to float: %s (resources.cpu must be a "
                              "number)",
                              r ? r : "?");
    return sbx__set_error(err, SBX_ETYPE,
                          "float() argument must be a string or a real number, not '%s' "
                          "(resources.cpu)",
                          sbx__json_typename(v));
}

static int resources_from_value(sbx_spec *s, json_t *v, sbx_error **err)
{
    if (json_is_null(v))
        return SBX_OK;
    if (!json_is_object(v))
        return sbx__set_error(err, SBX_ETYPE, "Sandbox resources must be a mapping, got %s",
                              sbx__json_typename(v));
    static const char *const known[] = { "cpu", "disk_gib", "gpu", "gpu_type", "memory_mib" };
    /* The reference lists the unknown keys sorted. */
    json_t *unknown = json_array();
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        bool ok = false;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(known); i++)
            ok |= !strcmp(k, known[i]);
        if (!ok)
            json_array_append_new(unknown, json_string(k));
    }
    if (json_array_size(unknown)) {
        size_t n = json_array_size(unknown);
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (strcmp(json_string_value(json_array_get(unknown, i)),
                           json_string_value(json_array_get(unknown, j))) > 0) {
                    json_t *a = json_incref(json_array_get(unknown, i));
                    json_array_set(unknown, i, json_array_get(unknown, j));
                    json_array_set_new(unknown, j, a);
                }
        sbx_buf b = { 0 };
        for (size_t i = 0; i < n; i++)
            sbx__buf_printf(&b, "%s%s", i ? ", " : "", json_string_value(json_array_get(unknown, i)));
        json_decref(unknown);
        int rc = sbx__set_error(err, SBX_EINVAL,
                                "Unknown sandbox resource keys: %s. Expected keys: cpu, disk_gib, "
                                "gpu, gpu_type, memory_mib",
                                b.data ? b.data : "");
        sbx__buf_free(&b);
        return rc;
    }
    json_decref(unknown);
    double cpu = s->cpu;
    long long mem = s->memory_mib, disk = s->disk_gib, gpu = s->gpu;
    int rc;
    if ((x = json_object_get(v, "cpu")) && (rc = conv_float(x, &cpu, err)) < 0)
        return rc;
    if ((x = json_object_get(v, "memory_mib")) && (rc = conv_int("memory_mib", x, &mem, err)) < 0)
        return rc;
    if ((x = json_object_get(v, "disk_gib")) && (rc = conv_int("disk_gib", x, &disk, err)) < 0)
        return rc;
    if ((x = json_object_get(v, "gpu")) && (rc = conv_int("gpu", x, &gpu, err)) < 0)
        return rc;
    char *gpu_type = NULL;
    bool gpu_type_set = false;
    if ((x = json_object_get(v, "gpu_type"))) {
        gpu_type_set = true;
        if (json_is_string(x))
            gpu_type = strdup(json_string_value(x));
        else if (!json_is_null(x))
            gpu_type = sbx__json_repr(x); /* str() of a number is its repr */
    }
    s->cpu = cpu;
    s->memory_mib = mem;
    s->disk_gib = disk;
    s->gpu = gpu;
    if (gpu_type_set) {
        free(s->gpu_type);
        s->gpu_type = gpu_type;
    }
    return SBX_OK;
}

int sbx_spec_set_resources_json(sbx_spec *s, const char *text, sbx_error **err)
{
    if (!s)
        return sbx__set_error(err, SBX_EINVAL, "spec is NULL");
    _cleanup_json_ json_t *v = NULL;
    int rc = sbx__parse_config_text(text ? text : "null", &v, err);
    if (rc < 0)
        return rc;
    return resources_from_value(s, v, err);
}

/* --- from/to JSON -------------------------------------------------------- */

/* [svc-logs] Strict base64 (RFC 4648, padded, no whitespace); NULL when it is not. */
static unsigned char *base64_decode(const char *in, size_t n, size_t *out_len)
{
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n % 4)
        return NULL;
    unsigned char *out = malloc(n / 4 * 3 + 1);
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            char c = in[i + j];
            const char *at = c ? strchr(alpha, c) : NULL;
            /* '=' only at the end: at most two, in the last quantum. */
            if (c == '=' && i + 4 == n && j >= 2 && (j == 3 || in[i + 3] == '=')) {
                pad++;
                v <<= 6;
            } else if (at && !pad) {
                v = (v << 6) | (unsigned)(at - alpha);
            } else {
                free(out);
                return NULL;
            }
        }
        out[k++] = (unsigned char)(v >> 16);
        if (pad < 2)
            out[k++] = (unsigned char)(v >> 8);
        if (pad < 1)
            out[k++] = (unsigned char)v;
    }
    *out_len = k;
    return out;
}

static char *base64_encode(const unsigned char *in, size_t n)
{
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((n + 2) / 3 * 4 + 1);
    if (!out)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[k++] = alpha[(v >> 18) & 63];
        out[k++] = alpha[(v >> 12) & 63];
        out[k++] = i + 1 < n ? alpha[(v >> 6) & 63] : '=';
        out[k++] = i + 2 < n ? alpha[v & 63] : '=';
    }
    out[k] = 0;
    return out;
}

/*
 * [svc-logs] A startup file given as an object: {"content": TEXT, "mode":
 * "0755" | 493, "encoding": "utf-8" | "base64"}; only content is required.
 */
static int file_from_object(sbx_spec *s, const char *path, json_t *x, sbx_error **err)
{
    const char *k;
    json_t *v;
    json_object_foreach(x, k, v)
    {
        if (strcmp(k, "content") && strcmp(k, "mode") && strcmp(k, "encoding"))
            return sbx__set_error(err, SBX_EINVAL,
                                  "Sandbox spec files['%s'] has an unknown key '%s' (known: "
                                  "content, mode, encoding)",
                                  path, k);
    }
    json_t *content = json_object_get(x, "content");
    if (!json_is_string(content))
        return sbx__set_error(err, SBX_ETYPE,
                              "Sandbox spec files['%s'] must have a string \"content\"", path);
    const char *enc = "utf-8";
    json_t *e = json_object_get(x, "encoding");
    if (e && !json_is_null(e)) {
        enc = json_string_value(e);
        if (!enc || (strcmp(enc, "utf-8") && strcmp(enc, "base64")))
            return sbx__set_error(err, SBX_EINVAL,
                                  "Sandbox spec files['%s'] encoding must be \"utf-8\" or "
                                  "\"base64\"",
                                  path);
    }
    long mode = -1;
    json_t *m = json_object_get(x, "mode");
    if (m && !json_is_null(m)) {
        char *end = NULL;
        if (json_is_integer(m)) {
            mode = (long)json_integer_value(m);
        } else if (json_is_string(m) && json_string_value(m)[0]) {
            /* "0755", "755", or Python's "0o755"; digits only (strtol would take a sign). */
            const char *t = json_string_value(m);
            if (t[0] == '0' && (t[1] == 'o' || t[1] == 'O'))
                t += 2;
            errno = 0;
            mode = *t >= '0' && *t <= '7' ? strtol(t, &end, 8) : -2;
            if (mode >= 0 && (errno || *end))
                mode = -2;
        } else {
            mode = -2;
        }
        if (mode < 0 || mode > 0777) {
            _cleanup_free_ char *r = sbx__json_repr(m);
            return sbx__set_error(err, SBX_EINVAL,
                                  "Sandbox spec files['%s'] mode %s is not valid: give the "
                                  "permission bits as an octal string like \"0755\" or an "
                                  "integer from 0 to 0777 (setuid, setgid and sticky bits are "
                                  "refused)",
                                  path, r ? r : "?");
        }
    }
    const char *text = json_string_value(content);
    size_t len = json_string_length(content);
    _cleanup_free_ unsigned char *bytes = NULL;
    if (!strcmp(enc, "base64")) {
        bytes = base64_decode(text, len, &len);
        if (!bytes)
            return sbx__set_error(err, SBX_EINVAL,
                                  "Sandbox spec files['%s'] content is not valid base64 "
                                  "(padded, no whitespace)",
                                  path);
        text = (const char *)bytes;
    }
    int rc = add_file(s, path, text, len, (int)mode);
    if (rc < 0)
        return sbx__set_error(err, rc, "Sandbox spec files key %s is not valid", path);
    return SBX_OK;
}

/* str() of a scalar as Python would build an env value or a file body. */
static char *scalar_text(const json_t *v)
{
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_true(v))
        return strdup("True");
    if (json_is_false(v))
        return strdup("False");
    if (json_is_null(v))
        return strdup("None");
    if (json_is_number(v))
        return sbx__json_repr(v);
    return NULL;
}

static int seconds_field(const char *key, json_t *v, double *out, sbx_error **err)
{
    if (json_is_null(v)) {
        *out = -1;
        return SBX_OK;
    }
    _cleanup_free_ char *r = sbx__json_repr(v);
    if ((json_is_number(v) && !json_is_boolean(v)) ||
        (json_is_string(v) && sbx__parse_pyfloat(json_string_value(v), out) == 0)) {
        if (json_is_number(v))
            *out = json_number_value(v);
        /* NaN would break every comparison and JSON cannot carry it back out. */
        if (!isfinite(*out))
            return sbx__set_error(err, SBX_EINVAL,
                                  "Sandbox spec %s must be a finite number of seconds, got %s",
                                  key, r ? r : "?");
        /* -1 is how sbx stores None: a negative time must not quietly mean "none". */
        if (*out < 0)
            return sbx__set_error(err, SBX_EINVAL,
                                  "Sandbox spec %s must be 0 or more seconds, got %s; leave it out "
                                  "(or null) for none",
                                  key, r ? r : "?");
        if (*out > SBX_MAX_SECONDS)
            return sbx__set_error(err, SBX_EINVAL,
                                  "Sandbox spec %s must be at most %.0f seconds (about 31 years), "
                                  "got %s",
                                  key, SBX_MAX_SECONDS, r ? r : "?");
        return SBX_OK;
    }
    return sbx__set_error(err, SBX_ETYPE, "Sandbox spec %s must be a number of seconds, got %s",
                          key, r ? r : "?");
}

/*
 * Text that becomes a C string (a path, a name, an env entry) cannot hold a
 * NUL byte: it would be cut there, silently running with another value.
 * JSON ("\u0000") and Python strings can hold one, so it is refused here.
 */
static int no_nul(const char *what, const char *text, size_t len, sbx_error **err)
{
    if (strlen(text) == len)
        return SBX_OK;
    _cleanup_free_ char *r = sbx__repr(text);
    return sbx__set_error(err, SBX_EINVAL,
                          "Sandbox spec %s contains a NUL byte (after %s); paths, names and "
                          "environment values cannot hold one",
                          what, r ? r : "?");
}

static int string_field(const char *key, json_t *v, char **slot, sbx_error **err)
{
    if (json_is_null(v))
        return set_str(slot, NULL);
    if (!json_is_string(v))
        return sbx__set_error(err, SBX_ETYPE, "Sandbox spec %s must be a string, got %s", key,
                              sbx__json_typename(v));
    int rc = no_nul(key, json_string_value(v), json_string_length(v), err);
    if (rc < 0)
        return rc;
    return set_str(slot, json_string_value(v));
}

static int mapping_field(const char *key, json_t *v, sbx_error **err)
{
    if (json_is_null(v) || json_is_object(v))
        return SBX_OK;
    return sbx__set_error(err, SBX_ETYPE, "Sandbox spec %s must be a mapping, got %s", key,
                          sbx__json_typename(v));
}

int sbx__spec_from_value(json_t *root, sbx_spec **out, sbx_error **err)
{
    if (json_is_null(root))
        root = NULL;
    if (root && !json_is_object(root))
        return sbx__set_error(err, SBX_ETYPE, "Sandbox spec must be a mapping, got %s",
                              sbx__json_typename(root));
    sbx_spec *s = sbx_spec_new();
    if (!s)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    static const char *const fields[] = { "image",    "ttl_s",     "ready_timeout_s",
                                          "workdir",  "env",       "files",
                                          "metadata", "resources", "entrypoint",
                                          "provider_options", "ports" };
    const char *k;
    json_t *v;
    int rc = SBX_OK;
    json_object_foreach(root, k, v) {
        bool known = false;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(fields); i++)
            known |= !strcmp(k, fields[i]);
        if (!known) {
            rc = sbx__set_error(err, SBX_EINVAL,
                                "Unknown sandbox spec key '%s'. Expected keys: image, ttl_s, "
                                "ready_timeout_s, workdir, env, files, metadata, resources, "
                                "entrypoint, provider_options, ports",
                                k);
            goto fail;
        }
    }
    if ((v = json_object_get(root, "image")) && (rc = string_field("image", v, &s->image, err)) < 0)
        goto fail;
    if ((v = json_object_get(root, "workdir")) &&
        (rc = string_field("workdir", v, &s->workdir, err)) < 0)
        goto fail;
    if (!absolute_path(s->workdir)) {
        _cleanup_free_ char *r = sbx__repr(s->workdir);
        rc = sbx__set_error(err, SBX_EINVAL,
                            "Sandbox spec workdir must be an absolute path in the box, got %s; "
                            "write it from / (for example /work)",
                            r ? r : "?");
        goto fail;
    }
    if ((v = json_object_get(root, "ttl_s")) && (rc = seconds_field("ttl_s", v, &s->ttl_s, err)) < 0)
        goto fail;
    if ((v = json_object_get(root, "ready_timeout_s")) &&
        (rc = seconds_field("ready_timeout_s", v, &s->ready_timeout_s, err)) < 0)
        goto fail;
    static const char *const maps[] = { "env", "files", "metadata" };
    for (size_t m = 0; m < SBX_ARRAY_SIZE(maps); m++) {
        if (!(v = json_object_get(root, maps[m])))
            continue;
        if ((rc = mapping_field(maps[m], v, err)) < 0)
            goto fail;
        const char *key;
        size_t key_len;
        json_t *x;
        json_object_keylen_foreach(v, key, key_len, x) {
            if (m == 1 && json_is_object(x)) {
                if ((rc = no_nul("files key", key, key_len, err)) < 0 ||
                    (rc = file_from_object(s, key, x, err)) < 0)
                    goto fail;
                continue;
            }
            _cleanup_free_ char *text = scalar_text(x);
            if (!text) {
                rc = sbx__set_error(err, SBX_ETYPE, "Sandbox spec %s['%s'] must be a string, got %s",
                                    maps[m], key, sbx__json_typename(x));
                goto fail;
            }
            _cleanup_free_ char *what = sbx__printf("%s key", maps[m]);
            if ((rc = no_nul(what ? what : maps[m], key, key_len, err)) < 0)
                goto fail;
            /* A file's body may be any bytes; an env or metadata value is a C string. */
            size_t text_len = json_is_string(x) ? json_string_length(x) : strlen(text);
            free(what);
            what = sbx__printf("%s['%s']", maps[m], key);
            if (m != 1 && (rc = no_nul(what ? what : maps[m], text, text_len, err)) < 0)
                goto fail;
            if (m == 0 && sbx__env_fits(&s->env, key, text) < 0) {
                rc = sbx__set_error(err, SBX_EINVAL,
                                    "Sandbox spec env is too large at '%s': one variable may hold "
                                    "%u KiB and all of them %u MiB (the kernel's limits for a "
                                    "command); pass large data in a file (spec files) instead",
                                    key, SBX_ENV_ENTRY_MAX_BYTES >> 10, SBX_ENV_MAX_BYTES >> 20);
                goto fail;
            }
            if (m == 0)
                rc = sbx_spec_set_env(s, key, text);
            else if (m == 1)
                rc = sbx_spec_add_file(s, key, json_is_string(x) ? json_string_value(x) : text,
                                       text_len);
            else
                rc = sbx_spec_set_metadata(s, key, text);
            if (rc < 0) {
                rc = sbx__set_error(err, rc, "Sandbox spec %s key %s is not valid", maps[m], key);
                goto fail;
            }
        }
    }
    if ((v = json_object_get(root, "resources")) && (rc = resources_from_value(s, v, err)) < 0)
        goto fail;
    if ((v = json_object_get(root, "entrypoint")) && !json_is_null(v)) {
        if (!json_is_array(v)) {
            rc = sbx__set_error(err, SBX_ETYPE,
                                "Sandbox spec entrypoint must be a list of strings, got %s",
                                sbx__json_typename(v));
            goto fail;
        }
        size_t n = json_array_size(v);
        const char **argv = calloc(n + 1, sizeof(char *));
        if (!argv) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *a = json_array_get(v, i);
            if (!json_is_string(a)) {
                free(argv);
                rc = sbx__set_error(err, SBX_ETYPE,
                                    "Sandbox spec entrypoint must be a list of strings");
                goto fail;
            }
            if ((rc = no_nul("entrypoint", json_string_value(a), json_string_length(a), err)) < 0) {
                free(argv);
                goto fail;
            }
            argv[i] = json_string_value(json_array_get(v, i));
        }
        rc = sbx_spec_set_entrypoint(s, argv);
        free(argv);
        if (rc < 0)
            goto fail;
    }
    if ((v = json_object_get(root, "provider_options")) && !json_is_null(v)) {
        if (!json_is_object(v)) {
            rc = sbx__set_error(err, SBX_ETYPE,
                                "Sandbox provider_options must be a mapping, got %s",
                                sbx__json_typename(v));
            goto fail;
        }
        json_decref(s->provider_options);
        s->provider_options = json_deep_copy(v);
    }
    if ((v = json_object_get(root, "ports")) && !json_is_null(v)) {
        if (!json_is_array(v)) {
            rc = sbx__set_error(err, SBX_ETYPE,
                                "Sandbox ports must be a list or tuple of TCP port numbers");
            goto fail;
        }
        for (size_t i = 0; i < json_array_size(v); i++) {
            int port;
            if ((rc = sbx__port_from_value(json_array_get(v, i), &port, err)) < 0)
                goto fail;
            if ((rc = add_port_checked(s, port, err)) < 0)
                goto fail;
        }
    }
    *out = s;
    return SBX_OK;
fail:
    sbx_spec_free(s);
    return rc;
}

int sbx_spec_from_json(const char *text, sbx_spec **out, sbx_error **err)
{
    _cleanup_json_ json_t *v = NULL;
    int rc = sbx__parse_config_text(text, &v, err);
    if (rc < 0)
        return rc;
    return sbx__spec_from_value(v, out, err);
}

static json_t *kv_object(const sbx_kv *kv)
{
    json_t *o = json_object();
    for (size_t i = 0; i < kv->len; i++)
        json_object_set_new(o, kv->keys[i], json_string(kv->values[i]));
    return o;
}

static json_t *opt_real(double v) { return v < 0 ? json_null() : json_real(v); }
static json_t *opt_int(long long v) { return v < 0 ? json_null() : json_integer(v); }
static json_t *opt_str(const char *s) { return s ? json_string(s) : json_null(); }

int sbx_spec_to_json(const sbx_spec *s, char **json_out, sbx_error **err)
{
    if (!s)
        return sbx__set_error(err, SBX_EINVAL, "spec is NULL");
    _cleanup_json_ json_t *o = json_object();
    json_object_set_new(o, "image", opt_str(s->image));
    json_object_set_new(o, "ttl_s", opt_real(s->ttl_s));
    json_object_set_new(o, "ready_timeout_s", opt_real(s->ready_timeout_s));
    json_object_set_new(o, "workdir", opt_str(s->workdir));
    json_object_set_new(o, "env", kv_object(&s->env));
    json_t *files = json_object();
    for (size_t i = 0; i < s->n_files; i++) {
        const struct sbx_spec_file *f = &s->files[i];
        /*
         * [svc-logs] A plain string as before; an object when the file has a
         * mode or bytes that are not UTF-8 (then base64: JSON holds text).
         */
        json_t *text = json_stringn(f->data, f->len);
        if (text && f->mode < 0) {
            json_object_set_new(files, f->path, text);
            continue;
        }
        json_t *o2 = json_object();
        if (text) {
            json_object_set_new(o2, "content", text);
        } else {
            _cleanup_free_ char *b64 = base64_encode((const unsigned char *)f->data, f->len);
            json_object_set_new(o2, "content", b64 ? json_string(b64) : json_null());
            json_object_set_new(o2, "encoding", json_string("base64"));
        }
        if (f->mode >= 0) {
            char mb[16];
            snprintf(mb, sizeof(mb), "0%03o", (unsigned)f->mode);
            json_object_set_new(o2, "mode", json_string(mb));
        }
        json_object_set_new(files, f->path, o2);
    }
    json_object_set_new(o, "files", files);
    json_object_set_new(o, "metadata", kv_object(&s->metadata));
    json_t *res = json_object();
    json_object_set_new(res, "cpu", opt_real(s->cpu));
    json_object_set_new(res, "memory_mib", opt_int(s->memory_mib));
    json_object_set_new(res, "disk_gib", opt_int(s->disk_gib));
    json_object_set_new(res, "gpu", opt_int(s->gpu));
    json_object_set_new(res, "gpu_type", opt_str(s->gpu_type));
    json_object_set_new(o, "resources", res);
    if (s->entrypoint) {
        json_t *a = json_array();
        for (char **p = s->entrypoint; *p; p++)
            json_array_append_new(a, json_string(*p));
        json_object_set_new(o, "entrypoint", a);
    } else {
        json_object_set_new(o, "entrypoint", json_null());
    }
    json_object_set(o, "provider_options", s->provider_options);
    json_t *ports = json_array();
    for (size_t i = 0; i < s->n_ports; i++)
        json_array_append_new(ports, json_integer(s->ports[i]));
    json_object_set_new(o, "ports", ports);
    char *text = sbx__json_dump(o);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *json_out = text;
    return SBX_OK;
}

sbx_spec *sbx_spec_copy(const sbx_spec *src)
{
    if (!src)
        return NULL;
    sbx_spec *s = sbx_spec_new();
    if (!s)
        return NULL;
    if (set_str(&s->image, src->image) < 0 || set_str(&s->workdir, src->workdir) < 0 ||
        set_str(&s->gpu_type, src->gpu_type) < 0 || sbx__kv_copy(&s->env, &src->env) < 0 ||
        sbx__kv_copy(&s->metadata, &src->metadata) < 0 ||
        sbx_spec_set_entrypoint(s, (const char *const *)src->entrypoint) < 0)
        goto fail;
    for (size_t i = 0; i < src->n_files; i++)
        if (add_file(s, src->files[i].path, src->files[i].data, src->files[i].len,
                     src->files[i].mode) < 0)
            goto fail;
    s->ttl_s = src->ttl_s;
    s->ready_timeout_s = src->ready_timeout_s;
    s->cpu = src->cpu;
    s->memory_mib = src->memory_mib;
    s->disk_gib = src->disk_gib;
    s->gpu = src->gpu;
    json_decref(s->provider_options);
    s->provider_options = json_deep_copy(src->provider_options);
    if (!s->provider_options)
        goto fail;
    if (src->n_ports) {
        s->ports = malloc(src->n_ports * sizeof(int));
        if (!s->ports)
            goto fail;
        memcpy(s->ports, src->ports, src->n_ports * sizeof(int));
        s->n_ports = src->n_ports;
    }
    return s;
fail:
    sbx_spec_free(s);
    return NULL;
}

/* --- read access --------------------------------------------------------- */

const char *sbx_spec_image(const sbx_spec *s) { return s ? s->image : NULL; }
const char *sbx_spec_workdir(const sbx_spec *s) { return s ? s->workdir : NULL; }

#define OPT_GETTER(fn, field, type)                                                                \
    int fn(const sbx_spec *s, type *out)                                                           \
    {                                                                                              \
        if (!s || s->field < 0)                                                                    \
            return 0;                                                                              \
        *out = s->field;                                                                           \
        return 1;                                                                                  \
    }
OPT_GETTER(sbx_spec_get_ttl, ttl_s, double)
OPT_GETTER(sbx_spec_get_ready_timeout, ready_timeout_s, double)
OPT_GETTER(sbx_spec_get_cpu, cpu, double)
OPT_GETTER(sbx_spec_get_memory_mib, memory_mib, long long)
OPT_GETTER(sbx_spec_get_disk_gib, disk_gib, long long)
OPT_GETTER(sbx_spec_get_gpu, gpu, long long)
#undef OPT_GETTER

const char *sbx_spec_gpu_type(const sbx_spec *s) { return s ? s->gpu_type : NULL; }
size_t sbx_spec_env_count(const sbx_spec *s) { return s ? s->env.len : 0; }
void sbx_spec_env_at(const sbx_spec *s, size_t i, const char **key, const char **value)
{
    *key = s->env.keys[i];
    *value = s->env.values[i];
}
size_t sbx_spec_file_count(const sbx_spec *s) { return s ? s->n_files : 0; }
void sbx_spec_file_at(const sbx_spec *s, size_t i, const char **path, const void **data,
                      size_t *len)
{
    *path = s->files[i].path;
    *data = s->files[i].data;
    *len = s->files[i].len;
}
size_t sbx_spec_metadata_count(const sbx_spec *s) { return s ? s->metadata.len : 0; }
void sbx_spec_metadata_at(const sbx_spec *s, size_t i, const char **key, const char **value)
{
    *key = s->metadata.keys[i];
    *value = s->metadata.values[i];
}
const char *const *sbx_spec_entrypoint(const sbx_spec *s)
{
    return s ? (const char *const *)s->entrypoint : NULL;
}
size_t sbx_spec_port_count(const sbx_spec *s) { return s ? s->n_ports : 0; }
int sbx_spec_port_at(const sbx_spec *s, size_t i) { return s->ports[i]; }

const char *sbx_spec_provider_options(const sbx_spec *s)
{
    if (!s)
        return "{}";
    /* Cached text; a spec handed to providers is a private copy, so this is race-free. */
    if (!s->provider_options_text)
        ((sbx_spec *)s)->provider_options_text = sbx__json_dump(s->provider_options);
    return s->provider_options_text ? s->provider_options_text : "{}";
}
