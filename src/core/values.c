/* Status names, exec options, exec results, endpoints. */
#include "internal.h"

#include <ctype.h>
#include <math.h>

static const char *const status_names[] = {
    [SBX_STATUS_STARTING] = "starting", [SBX_STATUS_RUNNING] = "running",
    [SBX_STATUS_PAUSED] = "paused",     [SBX_STATUS_STOPPED] = "stopped",
    [SBX_STATUS_ERROR] = "error",       [SBX_STATUS_UNKNOWN] = "unknown",
};

const char *sbx_status_name(sbx_status s)
{
    if ((unsigned)s >= SBX_ARRAY_SIZE(status_names))
        return "unknown";
    return status_names[s];
}

int sbx_status_from_name(const char *name, sbx_status *out)
{
    for (size_t i = 0; name && i < SBX_ARRAY_SIZE(status_names); i++) {
        if (!strcmp(name, status_names[i])) {
            *out = (sbx_status)i;
            return SBX_OK;
        }
    }
    return SBX_EINVAL;
}

/* --- exec options -------------------------------------------------------- */

sbx_exec_opts *sbx_exec_opts_new(void)
{
    sbx_exec_opts *o = calloc(1, sizeof(*o));
    if (o)
        o->timeout_s = SBX_DEFAULT_EXEC_TIMEOUT_S;
    if (o)
        o->out_fd[0] = o->out_fd[1] = -1;
    return o;
}

void sbx_exec_opts_free(sbx_exec_opts *o)
{
    if (!o)
        return;
    free(o->cwd);
    sbx__kv_free(&o->env);
    free(o->user);
    free(o->stdin_data);
    sbx_strv_free(o->builtin_argv);
    sbx_strv_free(o->argv);
    free(o);
}

static int replace_str(char **slot, const char *v)
{
    char *n = NULL;
    if (v && !(n = strdup(v)))
        return SBX_ENOMEM;
    free(*slot);
    *slot = n;
    return SBX_OK;
}

int sbx_exec_opts_set_cwd(sbx_exec_opts *o, const char *cwd)
{
    if (!o)
        return SBX_EINVAL;
    return replace_str(&o->cwd, cwd);
}

int sbx_exec_opts_set_env(sbx_exec_opts *o, const char *key, const char *value)
{
    if (!o || !key || !*key || strchr(key, '=') ||
        sbx__env_fits(&o->env, key, value ? value : "") < 0)
        return SBX_EINVAL;
    return sbx__kv_set(&o->env, key, value);
}

int sbx_exec_opts_set_timeout(sbx_exec_opts *o, double seconds)
{
    /* An infinite or huge timeout is not "none" (a negative value is): it overflows the ms count. */
    if (!o || !isfinite(seconds) || seconds > SBX_MAX_SECONDS)
        return SBX_EINVAL;
    o->timeout_s = seconds < 0 ? -1 : seconds;
    return SBX_OK;
}

static char **strv_dup(char *const *v);

int sbx_exec_opts_set_argv(sbx_exec_opts *o, const char *const *argv)
{
    if (!o || (argv && (!argv[0] || !argv[0][0])))
        return SBX_EINVAL;
    char **copy = NULL;
    if (argv && !(copy = strv_dup((char *const *)argv)))
        return SBX_ENOMEM;
    sbx_strv_free(o->argv);
    o->argv = copy;
    return SBX_OK;
}

const char *const *sbx_exec_opts_argv(const sbx_exec_opts *o)
{
    return o ? (const char *const *)o->argv : NULL;
}

int sbx_exec_opts_set_user(sbx_exec_opts *o, const char *user)
{
    if (!o)
        return SBX_EINVAL;
    return replace_str(&o->user, user);
}

int sbx_exec_opts_set_stdin(sbx_exec_opts *o, const void *data, size_t len)
{
    if (!o || (!data && len))
        return SBX_EINVAL;
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return SBX_ENOMEM;
    if (len)
        memcpy(copy, data, len);
    free(o->stdin_data);
    o->stdin_data = copy;
    o->stdin_len = len;
    o->has_stdin = true;
    o->has_stdin_fd = false;
    return SBX_OK;
}

int sbx_exec_opts_set_output_limit(sbx_exec_opts *o, size_t bytes)
{
    if (!o)
        return SBX_EINVAL;
    o->output_limit = bytes;
    return SBX_OK;
}

static char **strv_dup(char *const *v)
{
    size_t n = 0;
    while (v[n])
        n++;
    char **c = calloc(n + 1, sizeof(*c));
    for (size_t i = 0; c && i < n; i++)
        if (!(c[i] = strdup(v[i]))) {
            sbx_strv_free(c);
            return NULL;
        }
    return c;
}

sbx_exec_opts *sbx__exec_opts_copy(const sbx_exec_opts *o)
{
    sbx_exec_opts *c = sbx_exec_opts_new();
    if (!c || !o)
        return c;
    c->timeout_s = o->timeout_s;
    c->output_limit = o->output_limit;
    c->has_stdin_fd = o->has_stdin_fd;
    c->stdin_fd = o->stdin_fd;
    c->output_cb = o->output_cb;
    c->output_user = o->output_user;
    c->drop_output = o->drop_output;
    for (int i = 0; i < 2; i++) {
        c->has_out_fd[i] = o->has_out_fd[i];
        c->out_fd[i] = o->out_fd[i];
    }
    if (replace_str(&c->cwd, o->cwd) < 0 || replace_str(&c->user, o->user) < 0 ||
        sbx__kv_copy(&c->env, &o->env) < 0 ||
        (o->has_stdin && sbx_exec_opts_set_stdin(c, o->stdin_data, o->stdin_len) < 0) ||
        (o->builtin_argv && !(c->builtin_argv = strv_dup(o->builtin_argv))) ||
        (o->argv && !(c->argv = strv_dup(o->argv)))) {
        sbx_exec_opts_free(c);
        return NULL;
    }
    return c;
}

const char *sbx_exec_opts_cwd(const sbx_exec_opts *o) { return o ? o->cwd : NULL; }
double sbx_exec_opts_timeout(const sbx_exec_opts *o)
{
    return o ? o->timeout_s : SBX_DEFAULT_EXEC_TIMEOUT_S;
}
const char *sbx_exec_opts_user(const sbx_exec_opts *o) { return o ? o->user : NULL; }
size_t sbx_exec_opts_env_count(const sbx_exec_opts *o) { return o ? o->env.len : 0; }
void sbx_exec_opts_env_at(const sbx_exec_opts *o, size_t i, const char **key, const char **value)
{
    *key = o->env.keys[i];
    *value = o->env.values[i];
}
const void *sbx_exec_opts_stdin(const sbx_exec_opts *o, size_t *len)
{
    if (!o || !o->has_stdin) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = o->stdin_len;
    return o->stdin_data;
}
size_t sbx_exec_opts_output_limit(const sbx_exec_opts *o) { return o ? o->output_limit : 0; }
int sbx_exec_opts_stdin_fd(const sbx_exec_opts *o)
{
    return o && o->has_stdin_fd ? o->stdin_fd : -1;
}

int sbx_exec_opts_set_stdin_fd(sbx_exec_opts *o, int fd)
{
    if (!o || fd < 0)
        return SBX_EINVAL;
    /* One source of stdin: the descriptor replaces bytes set before. */
    free(o->stdin_data);
    o->stdin_data = NULL;
    o->stdin_len = 0;
    o->has_stdin = false;
    o->has_stdin_fd = true;
    o->stdin_fd = fd;
    return SBX_OK;
}

int sbx_exec_opts_set_output_cb(sbx_exec_opts *o, sbx_exec_output_cb cb, void *user)
{
    if (!o)
        return SBX_EINVAL;
    o->output_cb = cb;
    o->output_user = cb ? user : NULL;
    return SBX_OK;
}

int sbx_exec_opts_set_output_fd(sbx_exec_opts *o, int stream, int fd)
{
    if (!o || (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR) || fd < -1)
        return SBX_EINVAL;
    o->has_out_fd[stream - 1] = fd >= 0;
    o->out_fd[stream - 1] = fd;
    return SBX_OK;
}

int sbx_exec_opts_set_keep_output(sbx_exec_opts *o, int keep)
{
    if (!o)
        return SBX_EINVAL;
    o->drop_output = !keep;
    return SBX_OK;
}

int sbx_exec_opts_keep_output(const sbx_exec_opts *o) { return o && o->drop_output ? 0 : 1; }

/* --- exec results -------------------------------------------------------- */

int sbx_exec_result_new_take(char *out, size_t out_len, char *errb, size_t err_len,
                             int return_code, const char *error_type, sbx_exec_result **result)
{
    sbx_exec_result *r = calloc(1, sizeof(*r));
    if (!r || (error_type && !(r->error_type = strdup(error_type)))) {
        free(r);
        free(out);
        free(errb);
        return SBX_ENOMEM;
    }
    r->out = out;
    r->out_len = out ? out_len : 0;
    r->err = errb;
    r->err_len = errb ? err_len : 0;
    r->return_code = return_code;
    *result = r;
    return SBX_OK;
}

int sbx_exec_result_new_timeout(char *out, size_t out_len, char *errb, size_t err_len,
                                double timeout_s, const char *command, sbx_exec_result **result)
{
    sbx_buf err = {.data = errb, .len = errb ? err_len : 0, .cap = errb ? err_len : 0};
    char t[32];
    sbx__fmt_g(timeout_s, t, sizeof(t));
    if ((err.len && err.data[err.len - 1] != '\n' && sbx__buf_append(&err, "\n", 1) < 0) ||
        sbx__buf_printf(&err, "command timed out after %ss: %s", t, command ? command : "") < 0 ||
        (!out && !(out = strdup("")))) {
        sbx__buf_free(&err);
        free(out);
        return SBX_ENOMEM;
    }
    return sbx_exec_result_new_take(out, out_len, err.data, err.len, 125, "timeout", result);
}

static char *dup_bytes(const char *p, size_t len)
{
    char *c = malloc(len + 1);
    if (!c)
        return NULL;
    if (len)
        memcpy(c, p, len);
    c[len] = 0;
    return c;
}

int sbx_exec_result_new(const char *out, size_t out_len, const char *errb, size_t err_len,
                        int return_code, const char *error_type, sbx_exec_result **result)
{
    char *o = NULL, *e = NULL;
    if ((out && !(o = dup_bytes(out, out_len))) || (errb && !(e = dup_bytes(errb, err_len)))) {
        free(o);
        return SBX_ENOMEM;
    }
    return sbx_exec_result_new_take(o, out_len, e, err_len, return_code, error_type, result);
}

const char *sbx_exec_result_stdout(const sbx_exec_result *r, size_t *len)
{
    if (len)
        *len = r && r->out ? r->out_len : 0;
    return r ? r->out : NULL;
}

const char *sbx_exec_result_stderr(const sbx_exec_result *r, size_t *len)
{
    if (len)
        *len = r && r->err ? r->err_len : 0;
    return r ? r->err : NULL;
}

int sbx_exec_result_return_code(const sbx_exec_result *r) { return r ? r->return_code : -1; }
const char *sbx_exec_result_error_type(const sbx_exec_result *r)
{
    return r ? r->error_type : NULL;
}
int sbx_exec_result_truncated(const sbx_exec_result *r) { return r ? r->truncated : 0; }
void sbx_exec_result_set_truncated(sbx_exec_result *r, int truncated)
{
    if (r)
        r->truncated = truncated != 0;
}

void sbx_exec_result_free(sbx_exec_result *r)
{
    if (!r)
        return;
    free(r->out);
    free(r->err);
    free(r->error_type);
    free(r);
}

/* --- endpoints ----------------------------------------------------------- */

struct sbx_endpoint {
    char *url;
    sbx_kv headers;
};

/* Mirrors urllib.parse.urlparse(): a scheme ("[A-Za-z][A-Za-z0-9+.-]*:") and a netloc ("//host"). */
static bool absolute_url(const char *u)
{
    if (!isalpha((unsigned char)*u))
        return false;
    const char *p = u + 1;
    while (isalnum((unsigned char)*p) || *p == '+' || *p == '-' || *p == '.')
        p++;
    if (*p != ':' || p[1] != '/' || p[2] != '/')
        return false;
    p += 3;
    return *p && *p != '/' && *p != '?' && *p != '#';
}

int sbx_endpoint_new(const char *url, sbx_endpoint **out, sbx_error **err)
{
    if (!url)
        url = "";
    while (isspace((unsigned char)*url))
        url++;
    size_t n = strlen(url);
    while (n && isspace((unsigned char)url[n - 1]))
        n--;
    _cleanup_free_ char *stripped = strndup(url, n);
    if (!stripped)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!absolute_url(stripped))
        return sbx__set_error(err, SBX_EINVAL, "Sandbox endpoint must be a non-empty absolute URL");
    sbx_endpoint *e = calloc(1, sizeof(*e));
    if (!e)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    e->url = steal_pointer(&stripped);
    *out = e;
    return SBX_OK;
}

int sbx_endpoint_add_header(sbx_endpoint *e, const char *key, const char *value)
{
    if (!e || !key)
        return SBX_EINVAL;
    return sbx__kv_set(&e->headers, key, value ? value : "");
}

const char *sbx_endpoint_url(const sbx_endpoint *e) { return e ? e->url : NULL; }
size_t sbx_endpoint_header_count(const sbx_endpoint *e) { return e ? e->headers.len : 0; }
int sbx_endpoint_header(const sbx_endpoint *e, size_t i, const char **key, const char **value)
{
    if (!e || i >= e->headers.len)
        return SBX_EINVAL;
    if (key)
        *key = e->headers.keys[i];
    if (value)
        *value = e->headers.values[i];
    return SBX_OK;
}

void sbx_endpoint_free(sbx_endpoint *e)
{
    if (!e)
        return;
    free(e->url);
    sbx__kv_free(&e->headers);
    free(e);
}
