/*
 * Job attribution (reference-api.md K): who runs a sandbox (team, user,
 * workload) and which launch of the process made it (run).
 *
 * Each field comes from an explicit value, then environment variables, then
 * (user only) the OS login name. The OS login is found as Python's
 * getpass.getuser() finds it, since that is what the reference calls: the
 * process environment's LOGNAME, USER, LNAME, USERNAME (first non-empty),
 * then the passwd entry of the real uid (getpwuid_r). getlogin_r() is not
 * used: it reads utmp and the controlling terminal, which daemons and
 * containers do not have, and Python does not consult it either.
 *
 * The generated run id is made once per process and cached. A forked child
 * keeps its parent's id, as a Python module global survives os.fork().
 */
#include "internal.h"

#include <ctype.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <strings.h>

static const char *const team_vars[] = { "NEMO_GYM_TEAM", "SLURM_JOB_ACCOUNT", NULL };
static const char *const user_vars[] = { "NEMO_GYM_USER", "SLURM_JOB_USER", NULL };
static const char *const workload_vars[] = { "NEMO_GYM_WORKLOAD", "SLURM_JOB_NAME",
                                             "NEMO_GYM_CONFIG_PATH", NULL };
/* The variables getpass.getuser() reads before the passwd database. */
static const char *const login_vars[] = { "LOGNAME", "USER", "LNAME", "USERNAME", NULL };

/* `envp` is a NULL-terminated "K=V" array, or NULL for the process environment. */
static const char *env_get(const char *const *envp, const char *name)
{
    if (!envp)
        return getenv(name);
    size_t n = strlen(name);
    for (; *envp; envp++)
        if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
            return *envp + n + 1;
    return NULL;
}

/* A copy of `s` without surrounding whitespace (Python's str.strip()). */
static char *strip_dup(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    return strndup(s, n);
}

/*
 * The first variable in `names` whose trimmed value is non-empty, trimmed;
 * NULL when none is (or on allocation failure, noted in *oom).
 */
static char *first_env(const char *const *envp, const char *const *names, bool *oom)
{
    for (; *names; names++) {
        const char *v = env_get(envp, *names);
        if (!v)
            continue;
        char *t = strip_dup(v);
        if (!t) {
            *oom = true;
            return NULL;
        }
        if (*t)
            return t;
        free(t);
    }
    return NULL;
}

/* getpass.getuser(), then the reference's filter: blank and "root" (any case) are dropped. */
static char *os_login(bool *oom)
{
    char *login = NULL;
    for (const char *const *n = login_vars; *n && !login; n++) {
        const char *v = getenv(*n);
        /* getuser() returns the first non-empty variable even if it is blank. */
        if (v && *v && !(login = strdup(v))) {
            *oom = true;
            return NULL;
        }
    }
    if (!login) {
        struct passwd pw, *res = NULL;
        char buf[4096];
        /* A uid without a passwd entry is the reference's "getuser() raised": no user. */
        if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &res) != 0 || !res || !res->pw_name)
            return NULL;
        if (!(login = strdup(res->pw_name))) {
            *oom = true;
            return NULL;
        }
    }
    char *t = strip_dup(login);
    free(login);
    if (!t) {
        *oom = true;
        return NULL;
    }
    /* Containers run as root by default: "root" names the image, not a person. */
    if (!*t || !strcasecmp(t, "root")) {
        free(t);
        return NULL;
    }
    return t;
}

static int set_key(json_t *o, const char *key, char *value_owned)
{
    json_t *s = json_string(value_owned);
    free(value_owned);
    /* json_string refuses invalid UTF-8; such a value is left out, not guessed. */
    if (!s)
        return 0;
    return json_object_set_new(o, key, s);
}

/* A truthy explicit value wins as given (the reference does not trim it); else the env. */
static char *pick(const char *explicit_value, const char *const *envp, const char *const *vars,
                  bool *oom)
{
    if (!explicit_value || !*explicit_value)
        return first_env(envp, vars, oom);
    char *v = strdup(explicit_value);
    if (!v)
        *oom = true;
    return v;
}

int sbx_resolve_attribution(const char *team, const char *user, const char *workload,
                            const char *const *envp, char **json_out, sbx_error **err)
{
    if (!json_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_resolve_attribution: json_out is NULL");
    _cleanup_json_ json_t *o = json_object();
    if (!o)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    bool oom = false;
    char *v = pick(team, envp, team_vars, &oom);
    if (v && set_key(o, "team", v) < 0)
        oom = true;
    v = pick(user, envp, user_vars, &oom);
    if (!v && !oom)
        v = os_login(&oom);
    if (v && set_key(o, "user", v) < 0)
        oom = true;
    v = pick(workload, envp, workload_vars, &oom);
    if (v && set_key(o, "workload", v) < 0)
        oom = true;
    if (oom)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    char *text = sbx__json_dump(o);
    if (!text)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *json_out = text;
    return SBX_OK;
}

static pthread_once_t run_id_once = PTHREAD_ONCE_INIT;
static char process_run_id[13];

/* uuid4().hex[:12]: the first 12 hex digits of a uuid4 are all random bits. */
static void make_run_id(void) { sbx__random_hex(process_run_id, 6); }

int sbx_resolve_run_id(const char *run, const char *const *envp, char **out, sbx_error **err)
{
    if (!out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_resolve_run_id: out is NULL");
    char *v = NULL;
    if (run && !(v = strip_dup(run)))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (v && !*v) {
        free(v);
        v = NULL;
    }
    if (!v) {
        static const char *const run_vars[] = { "NEMO_GYM_RUN_ID", NULL };
        bool oom = false;
        v = first_env(envp, run_vars, &oom);
        if (oom)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (!v) {
        pthread_once(&run_id_once, make_run_id);
        if (!(v = strdup(process_run_id)))
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    *out = v;
    return SBX_OK;
}

static atomic_bool attribution_logged;

int sbx_log_attribution_once(const char *metadata_json)
{
    _cleanup_json_ json_t *md = NULL;
    if (!metadata_json || sbx__parse_config_text(metadata_json, &md, NULL) < 0)
        return SBX_EINVAL;
    if (!json_is_object(md))
        return SBX_ETYPE;
    /* An empty mapping is not worth a log line and does not use up the one allowed. */
    if (json_object_size(md) == 0)
        return 0;
    if (atomic_exchange(&attribution_logged, true))
        return 0;
    _cleanup_free_ char *r = sbx__json_repr(md);
    sbx_log(SBX_LOG_INFO, "Sandbox attribution metadata: %s", r ? r : "{}");
    return 1;
}
