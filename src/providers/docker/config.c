/* The docker provider's config (config.c): the reference's sections, checked. */
#include "providers/docker/docker.h"

void sbx__dk_config_free(struct dk_config *c)
{
    free(c->host);
    free(c->api_version);
    free(c->state_dir);
    free(c->image);
    free(c->network);
    free(c->shell);
    free(c->publish_host);
    free(c->probe_command);
    free(c->probe_expected);
    free(c->keepalive_shell);
    free(c->image_rewrites);
    free(c->keepalive_cmd);
    json_decref(c->cap_drop);
    json_decref(c->security_opt);
    json_decref(c->host_config);
    memset(c, 0, sizeof(*c));
}

static int bad(sbx_error **err, int code, const char *fmt, const char *a, const char *b)
{
    return sbx__set_error(err, code, fmt, a, b);
}

/* A string or null at `key` of `o` into `*out` (malloc'd). */
static int get_str(json_t *o, const char *sec, const char *key, char **out, sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return SBX_OK;
    if (!json_is_string(v))
        return bad(err, SBX_ETYPE, "docker: %s.%s must be a string", sec, key);
    free(*out);
    return (*out = strdup(json_string_value(v))) ? SBX_OK : SBX_ENOMEM;
}

static int get_bool(json_t *o, const char *sec, const char *key, bool *out, sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return SBX_OK;
    if (!json_is_boolean(v))
        return bad(err, SBX_ETYPE, "docker: %s.%s must be true or false", sec, key);
    *out = json_is_true(v);
    return SBX_OK;
}

/* A positive number or null (`*out` 0 then). */
static int get_pos(json_t *o, const char *sec, const char *key, double *out, sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return SBX_OK;
    if (!json_is_number(v) || json_number_value(v) <= 0)
        return bad(err, SBX_EINVAL, "docker: %s.%s must be null or a number > 0", sec, key);
    *out = json_number_value(v);
    return SBX_OK;
}

/* A list of strings (a single string is a list of one, as the reference takes it). */
static int get_list(json_t *o, const char *sec, const char *key, json_t **out, sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return SBX_OK;
    json_t *arr = json_is_string(v) ? json_pack("[O]", v) : json_incref(v);
    size_t i;
    json_t *it;
    if (!json_is_array(arr)) {
        json_decref(arr);
        return bad(err, SBX_ETYPE, "docker: %s.%s must be a list of strings", sec, key);
    }
    json_array_foreach(arr, i, it) if (!json_is_string(it))
    {
        json_decref(arr);
        return bad(err, SBX_ETYPE, "docker: %s.%s must be a list of strings", sec, key);
    }
    json_decref(*out);
    *out = arr;
    return SBX_OK;
}

/* Every key of `o` must be one of `known` (the reference raises TypeError for others). */
static int only_keys(json_t *o, const char *sec, const char *const *known, sbx_error **err)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool ok = false;
        for (size_t i = 0; known[i] && !ok; i++)
            ok = !strcmp(k, known[i]);
        if (!ok) {
            sbx_buf b = {0};
            for (size_t i = 0; known[i]; i++)
                sbx__buf_printf(&b, "%s%s", i ? ", " : "", known[i]);
            int rc = sbx__set_error(err, SBX_ETYPE, "docker: unknown key '%s' in %s (known: %s)", k,
                                    sec, b.data ? b.data : "");
            sbx__buf_free(&b);
            return rc;
        }
    }
    return SBX_OK;
}

/* A CLI-flag list of the reference: not a thing the engine API takes; refused unless empty. */
static int no_cli_args(json_t *o, const char *sec, const char *key, const char *instead,
                       sbx_error **err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v) || (json_is_array(v) && json_array_size(v) == 0))
        return SBX_OK;
    return sbx__set_error(err, SBX_EINVAL,
                          "docker: %s.%s are docker CLI flags, and sbx talks to the engine API, "
                          "not the CLI; %s",
                          sec, key, instead);
}

int sbx__dk_config_parse(const char *config_json, struct dk_config *c, sbx_error **err)
{
    memset(c, 0, sizeof(*c));
    c->apply_resource_limits = true;
    c->pull = true;
    c->agent = true;
    c->use_init = true;
    c->start_timeout_s = 600;
    c->probe_timeout_s = 30;
    c->probe_stable_count = 1;
    json_error_t je;
    _cleanup_json_ json_t *root = json_loads(config_json ? config_json : "{}", 0, &je);
    if (!json_is_object(root))
        return sbx__set_error(err, SBX_ETYPE, "docker: the provider config must be a mapping");
    static const char *const top[] = {"host",   "api_version",     "state_dir", "pull",
                                      "image",  "remote",          "agent",     "max_connections",
                                      "create", "exec",            "probe",     "image_rewrites",
                                      NULL};
    static const char *const create_keys[] = {
        "keepalive_shell", "keepalive_cmd", "start_timeout_s", "use_init", "network",
        "read_only", "cap_drop", "security_opt", "pids_limit", "extra_run_args",
        "apply_resource_limits", "publish_host", "host_config", NULL};
    static const char *const exec_keys[] = {"default_timeout_s", "extra_exec_args", "concurrency",
                                            "exec_shell", NULL};
    static const char *const probe_keys[] = {"command", "expected_stdout", "timeout_s",
                                             "deadline_s", "stable_count", "stable_delay_s", NULL};
    int rc = only_keys(root, "the docker provider config", top, err);
    json_t *cr = json_object_get(root, "create"), *ex = json_object_get(root, "exec"),
           *pr = json_object_get(root, "probe");
    const char *const names[] = {"create", "exec", "probe"};
    json_t *secs[] = {cr, ex, pr};
    for (int i = 0; rc == SBX_OK && i < 3; i++)
        if (secs[i] && !json_is_null(secs[i]) && !json_is_object(secs[i]))
            rc = bad(err, SBX_ETYPE, "docker: %s must be a mapping%s", names[i], "");
    if (rc == SBX_OK && cr)
        rc = only_keys(cr, "create", create_keys, err);
    if (rc == SBX_OK && ex)
        rc = only_keys(ex, "exec", exec_keys, err);
    if (rc == SBX_OK && pr)
        rc = only_keys(pr, "probe", probe_keys, err);
    if (rc == SBX_OK)
        rc = get_str(pr, "probe", "command", &c->probe_command, err);
    if (rc == SBX_OK)
        rc = get_str(pr, "probe", "expected_stdout", &c->probe_expected, err);
    /* As the reference: timeout_s is checked only when there is a command. */
    if (rc == SBX_OK && c->probe_command)
        rc = get_pos(pr, "probe", "timeout_s", &c->probe_timeout_s, err);
    if (rc == SBX_OK)
        rc = get_pos(pr, "probe", "deadline_s", &c->probe_deadline_s, err);
    json_t *sc = json_object_get(pr, "stable_count"), *sd = json_object_get(pr, "stable_delay_s");
    if (rc == SBX_OK && sc && !json_is_null(sc)) {
        if (!json_is_integer(sc) || json_integer_value(sc) < 1 || json_integer_value(sc) > 1000000)
            rc = bad(err, SBX_EINVAL, "docker: %s.%s must be an integer >= 1", "probe",
                     "stable_count");
        else
            c->probe_stable_count = (int)json_integer_value(sc);
    }
    if (rc == SBX_OK && sd && !json_is_null(sd)) {
        if (!json_is_number(sd) || json_number_value(sd) < 0 || json_number_value(sd) > 86400)
            rc = bad(err, SBX_EINVAL, "docker: %s.%s must be a number >= 0", "probe",
                     "stable_delay_s");
        else
            c->probe_stable_delay_s = json_number_value(sd);
    }
    double mc = 0;
    if (rc == SBX_OK)
        rc = get_str(root, "docker", "host", &c->host, err);
    if (rc == SBX_OK)
        rc = get_str(root, "docker", "api_version", &c->api_version, err);
    if (rc == SBX_OK)
        rc = get_str(root, "docker", "state_dir", &c->state_dir, err);
    if (rc == SBX_OK)
        rc = get_bool(root, "docker", "pull", &c->pull, err);
    if (rc == SBX_OK)
        rc = get_str(root, "docker", "image", &c->image, err);
    if (rc == SBX_OK)
        rc = get_bool(root, "docker", "agent", &c->agent, err);
    json_t *rw = json_object_get(root, "image_rewrites");
    if (rc == SBX_OK && rw && !json_is_null(rw)) {
        /* Checked now (each entry's from and to), so a bad list fails the constructor. */
        char *probe = NULL;
        if (!json_is_array(rw) || !(c->image_rewrites = sbx__json_dump(rw)))
            rc = bad(err, SBX_ETYPE, "docker: %s must be a list of {\"from\": ..., \"to\": ...}%s",
                     "image_rewrites", "");
        else if ((rc = sbx_rewrite_image("x", c->image_rewrites, &probe, err)) == SBX_OK) {
            size_t i;
            json_t *it;
            json_array_foreach(rw, i, it)
            {
                if (rc == SBX_OK && (!json_is_string(json_object_get(it, "from")) ||
                                     !json_is_string(json_object_get(it, "to"))))
                    rc = bad(err, SBX_EINVAL,
                             "docker: image_rewrites entries need string 'from' and 'to'%s%s", "",
                             "");
            }
        }
        sbx_free(probe);
    }
    if (rc == SBX_OK)
        rc = get_str(cr, "create", "keepalive_shell", &c->keepalive_shell, err);
    if (rc == SBX_OK)
        rc = get_str(cr, "create", "keepalive_cmd", &c->keepalive_cmd, err);
    if (rc == SBX_OK)
        rc = get_bool(cr, "create", "use_init", &c->use_init, err);
    json_t *rm = json_object_get(root, "remote");
    if (rc == SBX_OK && rm && !json_is_null(rm)) {
        if (!json_is_boolean(rm))
            rc = bad(err, SBX_ETYPE, "docker: %s must be true, false or null (auto)%s", "remote",
                     "");
        else
            c->remote = json_is_true(rm) ? 1 : 0;
    } else {
        c->remote = -1;
    }
    if (rc == SBX_OK)
        rc = get_pos(root, "docker", "max_connections", &mc, err);
    c->max_connections = mc > 1e6 ? 1000000 : (int)mc;
    if (rc == SBX_OK)
        rc = get_str(cr, "create", "network", &c->network, err);
    if (rc == SBX_OK)
        rc = get_bool(cr, "create", "read_only", &c->read_only, err);
    if (rc == SBX_OK)
        rc = get_bool(cr, "create", "apply_resource_limits", &c->apply_resource_limits, err);
    if (rc == SBX_OK)
        rc = get_list(cr, "create", "cap_drop", &c->cap_drop, err);
    if (rc == SBX_OK)
        rc = get_list(cr, "create", "security_opt", &c->security_opt, err);
    if (rc == SBX_OK)
        rc = get_pos(cr, "create", "pids_limit", &c->pids_limit, err);
    if (rc == SBX_OK)
        rc = get_pos(cr, "create", "start_timeout_s", &c->start_timeout_s, err);
    if (rc == SBX_OK)
        rc = get_str(cr, "create", "publish_host", &c->publish_host, err);
    if (rc == SBX_OK && c->publish_host) {
        unsigned char a[16];
        if (inet_pton(AF_INET, c->publish_host, a) != 1 &&
            inet_pton(AF_INET6, c->publish_host, a) != 1)
            rc = bad(err, SBX_EINVAL, "create.publish_host must be an IPv4 or IPv6 address%s%s",
                     "", "");
    }
    if (rc == SBX_OK && cr && json_object_get(cr, "host_config") &&
        !json_is_null(json_object_get(cr, "host_config"))) {
        c->host_config = json_incref(json_object_get(cr, "host_config"));
        if (!json_is_object(c->host_config))
            rc = bad(err, SBX_ETYPE, "docker: create.host_config must be a mapping (the engine "
                                     "API's HostConfig fields)%s%s",
                     "", "");
    }
    if (rc == SBX_OK)
        rc = no_cli_args(cr, "create", "extra_run_args",
                         "put engine HostConfig fields in create.host_config instead", err);
    if (rc == SBX_OK)
        rc = no_cli_args(ex, "exec", "extra_exec_args", "leave them unset", err);
    if (rc == SBX_OK)
        rc = get_str(ex, "exec", "exec_shell", &c->shell, err);
    if (rc == SBX_OK && c->shell && !c->shell[0])
        rc = bad(err, SBX_EINVAL,
                 "exec.exec_shell must be null (auto) or a non-empty shell name/path%s%s", "",
                 "");
    if (rc < 0)
        sbx__dk_config_free(c);
    return rc;
}

