/*
 * apptainer: boxes are Apptainer instances (`apptainer instance start`), for
 * HPC nodes where users have Apptainer and no Docker daemon. A plugin built
 * on the box kit (<sbx/box.h>) from the public headers only.
 *
 * The fast path: the host's static sbx-agent is bound into the instance
 * read-only and started there with `apptainer exec instance://NAME
 * /.sbx-agent serve --stdio`, its stdin/stdout one end of a socket pair the
 * kit holds (no socket file anywhere, so nothing in the box can plant or
 * race one). Exec, transfers, PTYs and background processes then go through
 * the agent at fork speed. The CLI path (`apptainer exec ... sh -c CMD`, the
 * reference's way) is what `agent: false` gives, and what an exec with a
 * `user` takes (the agent runs as the caller; --fakeroot and su are the
 * CLI's). The reference's argv, env files, status table, markers and
 * sentinel are kept; where it is weak sbx does otherwise (docs/providers/
 * apptainer.md, "Differences from the reference").
 */
#include "apptainer.h"
#include "instances.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct create_ctx {
    struct ap *a;
    const sbx_spec *spec;
    char *env_file; /* the agent's env file, removed once the agent said hello */
};

/* A box: its instance (= its id), its agent (NULL on the CLI path), the spec's env. */
struct abox {
    char *id;
    char *staging; /* <box dir>/staging, bound at mount_point */
    char *box_dir;
    sbx_box_agent *agent;
    char **env;  /* "K=V", NULL-ended: the CLI path's (the agent has the box's env itself) */
    char *scope; /* a connected handle's descriptor scope ("owner" ends the box on close) */
    pid_t listener_pid; /* who made the agent's socket: its SO_PEERCRED pid */
};

static void strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static char *path_join(const char *a, const char *b)
{
    size_t l = strlen(a) + strlen(b) + 2;
    char *s = malloc(l);
    if (s)
        snprintf(s, l, "%s/%s", a, b);
    return s;
}

/* --- argv ------------------------------------------------------------------------ */

struct argv {
    const char **v;
    size_t n, cap;
    char **owned; /* strings made here */
    size_t no;
    int oom;
};

static void av_add(struct argv *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        const char **v = realloc(a->v, cap * sizeof(*v));
        if (!v) {
            a->oom = 1;
            return;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = s;
    a->v[a->n] = NULL;
}

static void av_addf(struct argv *a, const char *fmt, const char *x, const char *y)
{
    char **o = realloc(a->owned, (a->no + 1) * sizeof(char *));
    if (!o) {
        a->oom = 1;
        return;
    }
    a->owned = o;
    size_t l = strlen(fmt) + strlen(x) + (y ? strlen(y) : 0) + 1;
    char *s = malloc(l);
    if (!s) {
        a->oom = 1;
        return;
    }
    snprintf(s, l, fmt, x, y ? y : "");
    a->owned[a->no++] = s;
    av_add(a, s);
}

static void av_free(struct argv *a)
{
    for (size_t i = 0; i < a->no; i++)
        free(a->owned[i]);
    free(a->owned);
    free(a->v);
    memset(a, 0, sizeof(*a));
}

/* Python's str() of a cpu count: 2 -> "2" when built from an int, 2.5 -> "2.5". */
static void fmt_cpu(double cpu, char *buf, size_t size)
{
    if (cpu == (long long)cpu)
        snprintf(buf, size, "%lld", (long long)cpu);
    else
        snprintf(buf, size, "%.17g", cpu);
}

/* The reference's _resolve_image: keep URIs, paths and .sif files; prefix docker:// otherwise. */
static char *resolve_image(const char *image)
{
    size_t n = strlen(image);
    if (strstr(image, "://") || image[0] == '/' || image[0] == '.' ||
        (n >= 4 && !strcmp(image + n - 4, ".sif")))
        return strdup(image);
    size_t l = n + sizeof("docker://");
    char *s = malloc(l);
    if (s)
        snprintf(s, l, "docker://%s", image);
    return s;
}

static int has_arg(char **v, const char *s)
{
    for (size_t i = 0; v && v[i]; i++)
        if (!strcmp(v[i], s))
            return 1;
    return 0;
}

/* provider_options["binds"]: a string or a list of strings. */
static int option_binds(const sbx_spec *spec, char ***out, sbx_error **err)
{
    *out = NULL;
    const char *o = sbx_spec_provider_options(spec);
    if (!o || !*o)
        return SBX_OK;
    json_t *root = json_loads(o, 0, NULL);
    json_t *b = json_object_get(root, "binds");
    int rc = SBX_OK;
    if (b && !json_is_null(b)) {
        size_t n = json_is_array(b) ? json_array_size(b) : 1;
        char **v = calloc(n + 1, sizeof(char *));
        if (!v) {
            rc = SBX_ENOMEM;
        } else if (json_is_string(b)) {
            if (!(v[0] = strdup(json_string_value(b))))
                rc = SBX_ENOMEM;
        } else if (json_is_array(b)) {
            for (size_t i = 0; i < n && rc == SBX_OK; i++) {
                json_t *e = json_array_get(b, i);
                if (!json_is_string(e)) {
                    *err = sbx_error_new(SBX_ECREATE,
                                         "provider_options['binds'] must be a string or list of "
                                         "strings, got a list holding %s",
                                         json_is_object(e) ? "a mapping" : "a non-string");
                    rc = SBX_ECREATE;
                } else if (!(v[i] = strdup(json_string_value(e)))) {
                    rc = SBX_ENOMEM;
                }
            }
        } else {
            *err = sbx_error_new(SBX_ECREATE,
                                 "provider_options['binds'] must be a string or list, got %s",
                                 json_is_object(b)    ? "dict"
                                 : json_is_integer(b) ? "int"
                                 : json_is_real(b)    ? "float"
                                                      : "bool");
            rc = SBX_ECREATE;
        }
        if (rc == SBX_OK)
            *out = v;
        else
            strv_free(v);
    }
    json_decref(root);
    return rc;
}

/* --- markers and results ---------------------------------------------------------- */

/*
 * The reference's runtime markers. It matches them anywhere in stderr, so a
 * user command printing "does not exist" is misread as a runtime failure;
 * sbx matches them only on apptainer's own lines (those starting FATAL: or
 * ERROR:, as the CLI writes its errors).
 */
static const char *const runtime_markers[] = {"fatal:", "no instance found", "instance not found",
                                              "does not exist", NULL};
static const char *const missing_markers[] = {"no instance found", "instance not found",
                                              "does not exist", NULL};

static int cli_line_has(const char *err, const char *const *markers)
{
    for (const char *line = err; line && *line;) {
        size_t n = strcspn(line, "\n");
        while (n && (*line == ' ' || *line == '\t'))
            line++, n--;
        if (n >= 6 && (!strncasecmp(line, "FATAL:", 6) || !strncasecmp(line, "ERROR:", 6))) {
            for (size_t m = 0; markers[m]; m++) {
                size_t ml = strlen(markers[m]);
                for (size_t i = 0; i + ml <= n; i++)
                    if (!strncasecmp(line + i, markers[m], ml))
                        return 1;
            }
        }
        line += n;
        if (*line == '\n')
            line++;
    }
    return 0;
}

/* --- the CLI commands --------------------------------------------------------------- */

/* `apptainer exec` argv of the reference for `cmd` in instance `name`. */
static void exec_argv(struct ap *a, struct argv *av, const char *name, const char *cwd,
                      const char *user, const char *env_file, const char *cmd, char **su_cmd)
{
    av_add(av, a->bin);
    av_add(av, "exec");
    if (cwd && *cwd) {
        av_add(av, "--pwd");
        av_add(av, cwd);
    }
    int root = user && (!strcmp(user, "root") || !strcmp(user, "0"));
    if ((user && !root) || (root && a->fakeroot_for_root))
        av_add(av, "--fakeroot");
    for (size_t i = 0; a->extra_exec_args[i]; i++)
        av_add(av, a->extra_exec_args[i]);
    if (env_file) {
        av_add(av, "--no-eval");
        av_add(av, "--env-file");
        av_add(av, env_file);
    }
    av_addf(av, "instance://%s%s", name, NULL);
    av_add(av, "sh");
    av_add(av, "-c");
    *su_cmd = NULL;
    if (user && !root) {
        /* su -s /bin/sh -c <quote(cmd)> <quote(user)>, as the reference. */
        char *qc = ap_quote(cmd), *qu = ap_quote(user);
        size_t l = (qc ? strlen(qc) : 0) + (qu ? strlen(qu) : 0) + 32;
        char *s = qc && qu ? malloc(l) : NULL;
        if (s)
            snprintf(s, l, "su -s /bin/sh -c %s %s", qc, qu);
        free(qc);
        free(qu);
        if (!s) {
            av->oom = 1;
            return;
        }
        *su_cmd = s;
        av_add(av, s);
    } else {
        av_add(av, cmd);
    }
}

/*
 * A box path as sbx means it: absolute as given; relative (or none: the
 * mount point itself) under the mount point, where the agent's path runs
 * commands too. The reference passed a relative cwd to --pwd as is, no cwd
 * as no --pwd (apptainer's default, the host's cwd when the box has it), and
 * failed relative transfer targets.
 */
static char *box_abs(struct ap *a, const char *path)
{
    if (path && path[0] == '/')
        return strdup(path);
    if (!path || !*path || !strcmp(path, "."))
        return strdup(a->mount_point);
    return path_join(a->mount_point, path);
}

/* Runs `cmd` in instance `name` through the CLI; fills an exec result as the reference. */
static int cli_exec(struct ap *a, const char *name, const char *dir, const char *const *base_env,
                    const char *cmd, const sbx_exec_opts *o, sbx_exec_result **result,
                    sbx_error **err)
{
    /* env: the box's, then the call's over it (an override keeps the key's place). */
    size_t nb = 0, ne = o ? sbx_exec_opts_env_count(o) : 0;
    while (base_env && base_env[nb])
        nb++;
    char **kv = calloc(nb + ne + 1, sizeof(char *));
    if (!kv)
        return SBX_ENOMEM;
    size_t n = 0;
    int rc = SBX_OK;
    for (size_t i = 0; i < nb && rc == SBX_OK; i++)
        if (!(kv[n++] = strdup(base_env[i])))
            rc = SBX_ENOMEM;
    for (size_t i = 0; i < ne && rc == SBX_OK; i++) {
        const char *k, *v;
        sbx_exec_opts_env_at(o, i, &k, &v);
        size_t kl = strlen(k), l = kl + strlen(v) + 2, j = 0;
        char *s = malloc(l);
        if (!s) {
            rc = SBX_ENOMEM;
            break;
        }
        snprintf(s, l, "%s=%s", k, v);
        while (j < n && !(strncmp(kv[j], k, kl) == 0 && kv[j][kl] == '='))
            j++;
        if (j < n) {
            free(kv[j]);
            kv[j] = s;
        } else {
            kv[n++] = s;
        }
    }
    char *env_file = NULL;
    if (rc == SBX_OK)
        rc = ap_env_file(a, dir, (const char *const *)kv, &env_file, err);
    strv_free(kv);
    if (rc < 0)
        return rc;
    struct argv av = {0};
    char *su = NULL, *cwd = box_abs(a, o ? sbx_exec_opts_cwd(o) : NULL);
    if (!cwd) {
        if (env_file)
            unlink(env_file);
        free(env_file);
        return SBX_ENOMEM;
    }
    exec_argv(a, &av, name, cwd, o ? sbx_exec_opts_user(o) : NULL, env_file, cmd, &su);
    double t = o ? sbx_exec_opts_timeout(o) : -1;
    if (t < 0 || t == 0)
        t = a->default_timeout_s;
    size_t in_len = 0;
    const void *in = o ? sbx_exec_opts_stdin(o, &in_len) : NULL;
    struct ap_cli_result r;
    if (av.oom)
        rc = SBX_ENOMEM;
    else
        rc = ap_cli_run(a, av.v, in, in_len, t, 0, &r, err);
    if (env_file) {
        unlink(env_file); /* always, as the reference */
        free(env_file);
    }
    free(su);
    free(cwd);
    av_free(&av);
    if (rc < 0)
        return rc;
    if (r.timed_out) {
        rc = sbx_exec_result_new_timeout(r.out.data, r.out.len, r.err.data, r.err.len, t, cmd,
                                         result);
    } else {
        const char *et = NULL;
        int code = r.code;
        if (code != 0 && cli_line_has(r.err.data, runtime_markers)) {
            code = AP_RUNTIME_RC;
            et = "sandbox";
        }
        int trunc = r.out.truncated || r.err.truncated;
        rc = sbx_exec_result_new_take(r.out.data, r.out.len, r.err.data, r.err.len, code, et,
                                      result);
        if (rc == SBX_OK && trunc)
            sbx_exec_result_set_truncated(*result, 1);
    }
    r.out.data = r.err.data = NULL;
    ap_cli_result_clear(&r);
    return rc;
}

static void instance_stop(struct ap *a, const char *name, sbx_error **err)
{
    const char *argv[] = {a->bin, "instance", "stop", name, NULL};
    struct ap_cli_result r;
    if (ap_cli_run(a, argv, NULL, 0, 60, 0, &r, err) < 0)
        return;
    if (r.timed_out)
        *err = sbx_error_new(SBX_EPROVIDER, "apptainer instance stop timed out after 60s: %s",
                             name);
    else if (r.code != 0 && !cli_line_has(r.err.data, missing_markers))
        *err = sbx_error_new(SBX_EPROVIDER, "apptainer instance stop failed (code=%d) for %s: %s",
                             r.code, name, r.err.data);
    ap_cli_result_clear(&r);
}

/* --- create ------------------------------------------------------------------------- */

/* The reference's readiness loop, through the CLI (the agent is not yet up). */
static int probe(struct ap *a, const char *name, const char *dir, char **env, sbx_error **err)
{
    if (!a->probe_command)
        return SBX_OK;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long stable = 0;
    char detail[1024] = "no probe attempt completed";
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (!o)
        return SBX_ENOMEM;
    sbx_exec_opts_set_timeout(o, a->probe_timeout_s > 0 ? a->probe_timeout_s : 30);
    int rc = SBX_OK;
    for (;;) {
        sbx_exec_result *r = NULL;
        rc = cli_exec(a, name, dir, (const char *const *)env, a->probe_command, o, &r, err);
        if (rc < 0)
            break;
        const char *out = sbx_exec_result_stdout(r, NULL);
        int pass = sbx_exec_result_return_code(r) == 0 &&
                   (!a->probe_expected || strstr(out ? out : "", a->probe_expected));
        if (!pass) {
            const char *e = sbx_exec_result_stderr(r, NULL);
            snprintf(detail, sizeof(detail), "return_code=%d, stderr='%.900s'",
                     sbx_exec_result_return_code(r), e ? e : "");
        }
        sbx_exec_result_free(r);
        if (pass && ++stable >= a->probe_stable_count)
            break;
        if (!pass) {
            stable = 0;
            if (a->probe_deadline_s <= 0) {
                *err = sbx_error_new(SBX_EVERIFY, "sandbox '%s' failed readiness probe: %s", name,
                                     detail);
                rc = SBX_EVERIFY;
                break;
            }
        }
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
        if (a->probe_deadline_s > 0 && el >= a->probe_deadline_s) {
            *err = sbx_error_new(SBX_EVERIFY,
                                 "sandbox '%s' did not pass readiness probe within %gs: %s", name,
                                 a->probe_deadline_s, detail);
            rc = SBX_EVERIFY;
            break;
        }
        if (a->probe_stable_delay_s > 0) {
            struct timespec d = {(time_t)a->probe_stable_delay_s,
                                 (long)((a->probe_stable_delay_s -
                                         (double)(time_t)a->probe_stable_delay_s) *
                                        1e9)};
            nanosleep(&d, NULL);
        }
    }
    sbx_exec_opts_free(o);
    return rc;
}

static char **spec_env(const sbx_spec *spec)
{
    size_t n = sbx_spec_env_count(spec);
    char **e = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; e && i < n; i++) {
        const char *k, *v;
        sbx_spec_env_at(spec, i, &k, &v);
        size_t l = strlen(k) + strlen(v) + 2;
        if (!(e[i] = malloc(l))) {
            strv_free(e);
            return NULL;
        }
        snprintf(e[i], l, "%s=%s", k, v);
    }
    return e;
}

/*
 * `apptainer instance start` as the reference builds it, then the probe.
 * Worker thread. On failure nothing is left running.
 */
static int start_instance(struct ap *a, const char *name, const char *box_dir,
                          const sbx_spec *spec, sbx_error **err)
{
    const char *img = sbx_spec_image(spec);
    if (!img || !*img)
        img = a->default_image;
    if (!img) {
        *err = sbx_error_new(SBX_ECREATE, "spec.image is required for the apptainer provider");
        return SBX_ECREATE;
    }
    char *image = resolve_image(img), *staging = path_join(box_dir, "staging"), *env_file = NULL;
    char **binds = NULL, **env = spec_env(spec);
    struct argv av = {0};
    int rc = SBX_OK;
    if (!image || !staging || !env) {
        rc = SBX_ENOMEM;
        goto out;
    }
    /* The box's env, validated and in a 0600 file in the box's 0700 directory (not the box's). */
    if ((rc = ap_env_file(a, box_dir, (const char *const *)env, &env_file, err)) < 0) {
        *err = sbx_error_prefix(*err, "invalid Apptainer environment");
        rc = SBX_ECREATE;
        goto out;
    }
    if ((rc = option_binds(spec, &binds, err)) < 0)
        goto out;
    if (mkdir(staging, 0700) < 0 && errno != EEXIST) {
        *err = sbx_error_new_errno(SBX_ECREATE, errno, "apptainer: cannot make %s", staging);
        rc = SBX_ECREATE;
        goto out;
    }
    av_add(&av, a->bin);
    av_add(&av, "instance");
    av_add(&av, "start");
    av_add(&av, "--bind");
    av_addf(&av, "%s:%s", staging, a->mount_point);
    for (size_t i = 0; a->default_binds[i]; i++) {
        av_add(&av, "--bind");
        av_add(&av, a->default_binds[i]);
    }
    for (size_t i = 0; binds && binds[i]; i++) {
        av_add(&av, "--bind");
        av_add(&av, binds[i]);
    }
    if (a->agent) {
        av_add(&av, "--bind");
        av_addf(&av, "%s:" AP_AGENT_IN_BOX ":ro%s", a->agent_path, NULL);
    }
    double cpu = 0;
    long long mem = 0, gpu = 0;
    int has_cpu = sbx_spec_get_cpu(spec, &cpu) == 1 && cpu > 0;
    int has_mem = sbx_spec_get_memory_mib(spec, &mem) == 1 && mem > 0;
    if ((has_cpu || has_mem) && a->apply_resource_limits) {
        if (has_arg(a->extra_start_args, "--fakeroot")) {
            sbx_log(SBX_LOG_WARNING, "Skipping apptainer CPU/memory resource flags because "
                                  "create.extra_start_args contains --fakeroot.");
        } else {
            char num[64];
            if (has_cpu) {
                fmt_cpu(cpu, num, sizeof(num));
                av_add(&av, "--cpus");
                av_addf(&av, "%s%s", num, NULL);
            }
            if (has_mem) {
                snprintf(num, sizeof(num), "%lldm", mem);
                av_add(&av, "--memory");
                av_addf(&av, "%s%s", num, NULL);
            }
        }
    }
    if (sbx_spec_get_gpu(spec, &gpu) == 1 && gpu > 0)
        av_add(&av, "--nv");
    for (size_t i = 0; a->extra_start_args[i]; i++)
        av_add(&av, a->extra_start_args[i]);
    if (env_file) {
        av_add(&av, "--no-eval");
        av_add(&av, "--env-file");
        av_add(&av, env_file);
    }
    av_add(&av, image);
    av_add(&av, name);
    if (av.oom) {
        rc = SBX_ENOMEM;
        goto out;
    }
    struct ap_cli_result r;
    if ((rc = ap_cli_run(a, av.v, NULL, 0, a->start_timeout_s, 1, &r, err)) < 0)
        goto out;
    if (r.timed_out || r.code != 0) {
        if (r.timed_out)
            *err = sbx_error_new(SBX_ECREATE,
                                 "apptainer instance start timed out for image='%s': apptainer "
                                 "command timed out after %gs",
                                 image, a->start_timeout_s);
        else
            *err = sbx_error_new(SBX_ECREATE,
                                 "apptainer instance start failed (code=%d) for image='%s': %s",
                                 r.code, image, r.err.data[0] ? r.err.data : r.out.data);
        rc = SBX_ECREATE;
        ap_cli_result_clear(&r);
        /* A timed-out start may have left an instance behind: stop it, quietly. */
        sbx_error *ignored = NULL;
        instance_stop(a, name, &ignored);
        sbx_error_free(ignored);
        goto out;
    }
    ap_cli_result_clear(&r);
    if ((rc = probe(a, name, box_dir, env, err)) < 0) {
        sbx_error *ignored = NULL;
        instance_stop(a, name, &ignored);
        sbx_error_free(ignored);
    }
out:
    if (env_file) {
        unlink(env_file);
        free(env_file);
    }
    av_free(&av);
    strv_free(binds);
    strv_free(env);
    free(image);
    free(staging);
    return rc;
}

static char *provider_json(struct ap *a, const char *name)
{
    json_t *o = json_pack("{s:s, s:s, s:b, s:I}", "instance", name, "bin", a->bin, "agent",
                          a->agent, "listener_pid", (json_int_t)getpid());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/*
 * The agent's listening socket, made here on the host before the agent
 * exists, in the box's 0700 directory (never bound into the box), and
 * handed to it as fd 3. Its SO_PEERCRED pid is this process's (the one that
 * called listen()), which connect checks: a socket a box planted in its
 * place would carry a box process's pid.
 */
static int agent_listener(const char *path, sbx_error **err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        *err = sbx_error_new(SBX_ECREATE,
                             "apptainer: the agent socket path %s is too long for a unix socket: "
                             "set state_dir to a shorter directory",
                             path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0600) < 0 ||
        listen(fd, 64) < 0) {
        *err = sbx_error_new_errno(SBX_ECREATE, errno, "apptainer: cannot listen on %s", path);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/*
 * Starts the agent in the instance, detached (its own session; it lives as
 * long as the instance, not as this process): `apptainer exec --pwd MOUNT
 * instance://NAME /.sbx-agent init --listen-fd 3`.
 */
static pid_t spawn_agent(struct ap *a, const char *name, const char *log, int lfd,
                         const char *env_file, sbx_error **err)
{
    char inst[256];
    snprintf(inst, sizeof(inst), "instance://%s", name);
    struct argv av = {0};
    av_add(&av, a->bin);
    av_add(&av, "exec");
    av_add(&av, "--pwd");
    av_add(&av, a->mount_point);
    for (size_t i = 0; a->extra_exec_args[i]; i++)
        av_add(&av, a->extra_exec_args[i]);
    if (env_file) {
        av_add(&av, "--no-eval");
        av_add(&av, "--env-file");
        av_add(&av, env_file);
    }
    av_add(&av, inst);
    av_add(&av, AP_AGENT_IN_BOX);
    av_add(&av, "init");
    av_add(&av, "--listen-fd");
    av_add(&av, "3");
    if (av.oom) {
        av_free(&av);
        return -1;
    }
    int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t pid = logfd >= 0 && nullfd >= 0 ? fork() : -1;
    if (pid == 0) {
        /* Async-signal-safe calls only. fd 3 is the listener, every other fd closes on exec. */
        setsid();
        dup2(nullfd, 0);
        dup2(logfd, 1);
        dup2(logfd, 2);
        if (lfd == 3)
            fcntl(3, F_SETFD, 0);
        else
            dup2(lfd, 3);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(a->bin, (char *const *)av.v, a->child_env);
        _exit(127);
    }
    if (pid < 0)
        *err = sbx_error_new_errno(SBX_ECREATE, errno, "apptainer: cannot start the agent");
    if (logfd >= 0)
        close(logfd);
    if (nullfd >= 0)
        close(nullfd);
    av_free(&av);
    return pid;
}

/* The kit's start hook for the agent path. Worker thread. */
static int ap_start(sbx_box_record *r, const char *box_dir, const sbx_spec *spec, void *data,
                    char **socket_path, pid_t *peer_pid, sbx_error **err)
{
    struct create_ctx *c = data;
    struct ap *a = c->a;
    int rc = start_instance(a, r->id, box_dir, spec, err);
    if (rc < 0)
        return rc;
    char *log = path_join(box_dir, "agent.log"), *sock = path_join(box_dir, "agent.sock");
    char **env = spec_env(spec);
    int lfd = -1;
    pid_t pid = -1;
    /*
     * The box's env is the agent's own (an env file, never argv), so every
     * command inherits it, also on a handle connected from another process.
     */
    if (!log || !sock || !env)
        rc = SBX_ENOMEM;
    else if ((rc = ap_env_file(a, box_dir, (const char *const *)env, &c->env_file, err)) < 0)
        ;
    else if ((lfd = agent_listener(sock, err)) < 0)
        rc = SBX_ECREATE;
    else if ((pid = spawn_agent(a, r->id, log, lfd, c->env_file, err)) < 0)
        rc = SBX_ECREATE;
    strv_free(env);
    if (lfd >= 0)
        close(lfd);
    free(log);
    if (rc == SBX_OK) {
        r->pid = pid;
        r->pid_start = sbx_box_pid_start(pid);
        const char *img = sbx_spec_image(spec) ? sbx_spec_image(spec) : a->default_image;
        if (!(r->workdir = strdup(a->mount_point)) || !(r->image = strdup(img)) ||
            !(r->provider_json = provider_json(a, r->id)))
            rc = SBX_ENOMEM;
    }
    if (rc < 0) {
        sbx_error *ignored = NULL;
        instance_stop(a, r->id, &ignored);
        sbx_error_free(ignored);
        if (pid > 0)
            sbx_box_stop_pid(pid, sbx_box_pid_start(pid), 1, NULL);
        free(sock);
        return rc;
    }
    *socket_path = sock;
    *peer_pid = getpid();
    return SBX_OK;
}

/* The store's hooks: an instance is alive while listed; ending it is `instance stop`. */
static int ap_alive(const sbx_box_record *r, void *data)
{
    struct ap *a = data;
    if (r->pid > 0 && sbx_box_pid_start(r->pid) != r->pid_start)
        return 0; /* its agent is gone: the box is of no more use */
    const char *argv[] = {a->bin, "instance", "list", "--json", NULL};
    struct ap_cli_result res;
    sbx_error *e = NULL;
    if (ap_cli_run(a, argv, NULL, 0, 60, 0, &res, &e) < 0) {
        sbx_error_free(e);
        return 1; /* unknown: never collect a box on a failed look */
    }
    sbx_status st = res.timed_out || res.code != 0 || res.out.truncated
                        ? SBX_STATUS_UNKNOWN
                        : ap_instance_status(res.out.data, res.out.len, r->id);
    ap_cli_result_clear(&res);
    return st != SBX_STATUS_STOPPED && st != SBX_STATUS_ERROR;
}

static int ap_stop_hook(const sbx_box_record *r, void *data, sbx_error **err)
{
    struct ap *a = data;
    sbx_error *e = NULL;
    instance_stop(a, r->id, &e);
    /* The agent's `apptainer exec` ends with its instance; reap it (or end it) either way. */
    if (r->pid > 0)
        sbx_box_stop_pid(r->pid, r->pid_start, 5, NULL);
    if (e) {
        if (err)
            *err = e;
        else
            sbx_error_free(e);
        return SBX_EPROVIDER;
    }
    return SBX_OK;
}

static void abox_free(void *box)
{
    struct abox *b = box;
    if (!b)
        return;
    sbx_box_agent_free(b->agent);
    strv_free(b->env);
    free(b->id);
    free(b->staging);
    free(b->box_dir);
    free(b->scope);
    free(b);
}

static struct abox *abox_new(struct ap *a, const char *id, const sbx_spec *spec)
{
    struct abox *b = calloc(1, sizeof(*b));
    char *dir = NULL;
    sbx_error *e = NULL;
    if (!b || !(b->id = strdup(id)) || !(b->env = spec ? spec_env(spec) : calloc(1, sizeof(char *))) ||
        sbx_box_store_box_dir(a->store, id, &dir, &e) < 0 ||
        !(b->staging = path_join(dir, "staging"))) {
        sbx_error_free(e);
        free(dir);
        abox_free(b);
        return NULL;
    }
    b->box_dir = dir;
    return b;
}


static void create_ctx_free(struct create_ctx *c)
{
    if (c->env_file)
        unlink(c->env_file); /* read by now: the agent it configured said hello */
    free(c->env_file);
    free(c);
}

static void ap_created(sbx_op *op, sbx_box_agent *agent, const sbx_box_record *r, int code,
                       sbx_error *err, void *data)
{
    struct create_ctx *c = data;
    if (code < 0) {
        create_ctx_free(c);
        sbx_op_complete(op, code, err, NULL);
        return;
    }
    struct abox *b = abox_new(c->a, r->id, NULL);
    create_ctx_free(c);
    if (!b) {
        sbx_box_agent_free(agent);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    b->agent = agent;
    b->listener_pid = getpid(); /* ap_start made the socket in this process */
    sbx_op_complete(op, SBX_OK, NULL, b);
}

/* The CLI path's create (agent: false): the kit's record, no agent. Worker thread. */
static void cli_create_work(sbx_op *op, void *data)
{
    struct create_ctx *c = data;
    struct ap *a = c->a;
    char id[80], *dir = NULL;
    sbx_error *err = NULL;
    sbx_box_record r = {0};
    struct abox *b = NULL;
    int rc = sbx_box_new_id(AP_NAME_PREFIX, id, sizeof(id));
    if (rc == SBX_OK)
        rc = sbx_box_record_init(&r, id, c->spec);
    if (rc == SBX_OK) {
        r.creating = 1;
        rc = sbx_box_store_box_dir(a->store, id, &dir, &err);
    }
    if (rc == SBX_OK && (rc = sbx_box_record_write(a->store, &r, &err)) == SBX_OK &&
        (rc = start_instance(a, id, dir, c->spec, &err)) == SBX_OK) {
        r.creating = 0;
        r.workdir = strdup(a->mount_point);
        r.provider_json = provider_json(a, id);
        if (!r.workdir || !r.provider_json || !(b = abox_new(a, id, c->spec)))
            rc = SBX_ENOMEM;
        else
            rc = sbx_box_record_write(a->store, &r, &err);
        if (rc < 0) {
            sbx_error *ignored = NULL;
            instance_stop(a, id, &ignored);
            sbx_error_free(ignored);
        }
    }
    if (rc < 0 && dir)
        sbx_box_record_remove(a->store, id, NULL);
    if (rc < 0) {
        abox_free(b);
        b = NULL;
    }
    sbx_box_record_clear(&r);
    free(dir);
    free(c);
    sbx_op_complete(op, rc, err, b);
}

static void ap_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    struct ap *a = state;
    struct create_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    c->a = a;
    c->spec = spec;
    if (a->agent) {
        sbx_box_op_create_socket(op, a->store, a->pool, spec, AP_NAME_PREFIX, ap_start, c, ap_created,
                                 c);
        return;
    }
    int rc = sbx_op_run_blocking(op, cli_create_work, c);
    if (rc < 0) {
        free(c);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

/* --- exec, files, status, close ------------------------------------------------------ */

struct work {
    struct ap *a;
    struct abox *b;
    char *s1, *s2; /* command / paths */
    sbx_exec_opts *o;
    const sbx_exec_opts *orig;
};

static void work_free(struct work *w)
{
    free(w->s1);
    free(w->s2);
    free(w);
}

static void cli_exec_work(sbx_op *op, void *data)
{
    struct work *w = data;
    sbx_exec_result *r = NULL;
    sbx_error *err = NULL;
    int rc = cli_exec(w->a, w->b->id, w->b->box_dir, (const char *const *)w->b->env, w->s1,
                      w->orig, &r, &err);
    if (rc == SBX_OK && w->orig) {
        /* Deliver output to a streaming caller, in one piece: the CLI path is not streamed. */
        const char *o = sbx_exec_result_stdout(r, NULL), *e = sbx_exec_result_stderr(r, NULL);
        if (o && *o)
            sbx_op_exec_output(op, 1, o, strlen(o));
        if (e && *e)
            sbx_op_exec_output(op, 2, e, strlen(e));
    }
    work_free(w);
    sbx_op_complete(op, rc, err, r);
}

static int run_work(sbx_op *op, sbx_op_work_fn fn, struct work *w)
{
    int rc = sbx_op_run_blocking(op, fn, w);
    if (rc < 0) {
        work_free(w);
        sbx_op_complete(op, rc, NULL, NULL);
    }
    return rc;
}

static struct work *work_new(struct ap *a, struct abox *b, const char *s1, const char *s2)
{
    struct work *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    w->a = a;
    w->b = b;
    if ((s1 && !(w->s1 = strdup(s1))) || (s2 && !(w->s2 = strdup(s2)))) {
        work_free(w);
        return NULL;
    }
    return w;
}

static void ap_exec(sbx_op *op, void *state, void *box, const char *command,
                    const sbx_exec_opts *opts)
{
    struct ap *a = state;
    struct abox *b = box;
    const char *user = opts ? sbx_exec_opts_user(opts) : NULL;
    if (b->agent && !user) {
        sbx_box_exec(op, b->agent, command, opts, NULL);
        return;
    }
    if (opts && sbx_exec_opts_argv(opts) && !command) {
        sbx_op_complete(op, SBX_ENOTSUP,
                        sbx_error_new(SBX_ENOTSUP, "apptainer's CLI path runs shell commands "
                                                   "only: pass a command string"),
                        NULL);
        return;
    }
    /* The CLI path: agent: false, or a user (the CLI's --fakeroot / su). */
    struct work *w = work_new(a, b, command, NULL);
    if (!w) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    w->orig = opts; /* the core keeps opts alive until the op completes */
    run_work(op, cli_exec_work, w);
}

/*
 * The CLI path's staging fast path, done safely: the box owns everything
 * under staging, so the path is resolved by the kernel beneath it with no
 * symlink followed (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS); the
 * reference followed a box-planted symlink out onto the host.
 */
static const char *under_mount(const char *mount, const char *path)
{
    size_t n = strlen(mount);
    if (strncmp(path, mount, n) || path[n] != '/' || !path[n + 1])
        return NULL;
    return path + n + 1;
}

static int open_beneath(int dirfd, const char *rel, int flags, mode_t mode)
{
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
                           .mode = (flags & O_CREAT) ? mode : 0,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
                                      RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));
}

/* mkdir -p of rel's parent beneath dirfd, no links followed. */
static int mkdirs_beneath(int dirfd, const char *rel)
{
    char buf[4096];
    if (strlen(rel) >= sizeof(buf))
        return -1;
    snprintf(buf, sizeof(buf), "%s", rel);
    for (char *p = strchr(buf, '/'); p; p = strchr(p + 1, '/')) {
        *p = 0;
        int fd = open_beneath(dirfd, buf, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0 && errno == ENOENT) {
            if (mkdirat(dirfd, buf, 0755) < 0 && errno != EEXIST)
                return -1;
            fd = open_beneath(dirfd, buf, O_RDONLY | O_DIRECTORY, 0);
        }
        if (fd < 0)
            return -1;
        close(fd);
        *p = '/';
    }
    return 0;
}

static int copy_fd(int in, int out)
{
    char chunk[65536];
    ssize_t n;
    while ((n = read(in, chunk, sizeof(chunk))) > 0)
        for (ssize_t o = 0; o < n;) {
            ssize_t w = write(out, chunk + o, (size_t)(n - o));
            if (w < 0)
                return -1;
            o += w;
        }
    return n < 0 ? -1 : 0;
}

/* mkdir -p of the host path's parent (the reference's download does it). */
static void host_parents(const char *path)
{
    char buf[4096];
    if (strlen(path) >= sizeof(buf))
        return;
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = strchr(buf + 1, '/'); p; p = strchr(p + 1, '/')) {
        *p = 0;
        mkdir(buf, 0755);
        *p = '/';
    }
}

/* s1: host path, s2: box path. upload (dir=0) / download (dir=1). */
static int cli_transfer(struct work *w, int download, sbx_error **err)
{
    struct ap *a = w->a;
    const char *host = w->s1;
    char *box_abs_path = box_abs(a, w->s2);
    if (!box_abs_path)
        return SBX_ENOMEM;
    const char *box_path = box_abs_path;
    int sfd = open(w->b->staging, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sfd < 0) {
        *err = sbx_error_new_errno(SBX_EIO, errno, "apptainer: box %s has no staging directory",
                                   w->b->id);
        return SBX_EIO;
    }
    const char *rel = under_mount(a->mount_point, box_path);
    int rc = SBX_OK;
    int hfd = -1, bfd = -1;
    char tmp[64];
    unsigned long rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        rnd = (unsigned long)time(NULL);
    snprintf(tmp, sizeof(tmp), ".sbx-xfer-%lx-%lx", (unsigned long)getpid(), rnd);
    struct stat hst;
    mode_t mode = 0644;
    if (!download && ((hfd = open(host, O_RDONLY | O_CLOEXEC)) < 0 || fstat(hfd, &hst) < 0)) {
        *err = sbx_error_new_errno(SBX_ENOENT, errno, "apptainer upload: cannot open %s", host);
        if (hfd >= 0)
            close(hfd);
        close(sfd);
        free(box_abs_path);
        return SBX_ENOENT;
    }
    if (!download)
        mode = hst.st_mode & 0777;
    else
        host_parents(host);
    if (rel) {
        /* The fast path: host file I/O beneath staging, no link followed. */
        if (!download) {
            if (mkdirs_beneath(sfd, rel) < 0 ||
                (bfd = open_beneath(sfd, rel, O_WRONLY | O_CREAT | O_TRUNC, mode)) < 0 ||
                fchmod(bfd, mode) < 0 || copy_fd(hfd, bfd) < 0) {
                *err = sbx_error_new_errno(SBX_EPERM, errno,
                                           "apptainer upload to '%s' failed (a link or a "
                                           "non-directory on the way is refused)",
                                           box_path);
                rc = SBX_EPERM;
            }
        } else if ((bfd = open_beneath(sfd, rel, O_RDONLY, 0)) < 0) {
            *err = sbx_error_new_errno(errno == ENOENT ? SBX_ENOENT : SBX_EPERM, errno,
                                       "apptainer download from '%s' failed", box_path);
            rc = errno == ENOENT ? SBX_ENOENT : SBX_EPERM;
        } else if (fstat(bfd, &hst) < 0 || !S_ISREG(hst.st_mode)) {
            *err = sbx_error_new(SBX_EINVAL, "apptainer download from '%s': not a regular file",
                                 box_path);
            rc = SBX_EINVAL;
        } else if ((hfd = open(host, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
                   fchmod(hfd, hst.st_mode & 0777) < 0 || copy_fd(bfd, hfd) < 0) {
            *err = sbx_error_new_errno(SBX_EIO, errno, "apptainer download: cannot write %s",
                                       host);
            rc = SBX_EIO;
        }
        goto out;
    }
    /* The fallback: through staging and a cp in the box, as root (the reference's). */
    char box_tmp[4096], *qt = NULL, *qb = ap_quote(box_path), cmd[12288];
    snprintf(box_tmp, sizeof(box_tmp), "%s/%s", a->mount_point, tmp);
    qt = ap_quote(box_tmp);
    if (!qt || !qb || strlen(qt) + 2 * strlen(qb) + 64 > sizeof(cmd)) {
        free(qt), free(qb);
        rc = SBX_EINVAL;
        *err = sbx_error_new(SBX_EINVAL, "apptainer: box path too long: %s", box_path);
        goto out;
    }
    if (!download) {
        if ((bfd = open_beneath(sfd, tmp, O_WRONLY | O_CREAT | O_EXCL, mode)) < 0 ||
            fchmod(bfd, mode) < 0 || copy_fd(hfd, bfd) < 0) {
            *err = sbx_error_new_errno(SBX_EIO, errno, "apptainer upload: cannot stage %s", host);
            rc = SBX_EIO;
        } else {
            snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname %s)\" && cp -p %s %s", qb, qt, qb);
        }
    } else {
        snprintf(cmd, sizeof(cmd), "cp -p %s %s", qb, qt);
    }
    free(qt);
    free(qb);
    if (rc == SBX_OK) {
        sbx_exec_opts *o = sbx_exec_opts_new();
        sbx_exec_result *r = NULL;
        if (o)
            sbx_exec_opts_set_user(o, "root");
        rc = o ? cli_exec(a, w->b->id, w->b->box_dir, (const char *const *)w->b->env, cmd, o, &r,
                          err)
               : SBX_ENOMEM;
        sbx_exec_opts_free(o);
        if (rc == SBX_OK && sbx_exec_result_return_code(r) != 0) {
            *err = sbx_error_new(SBX_ETRANSFER, "apptainer %s '%s' failed: %s",
                                 download ? "download from" : "upload to", box_path,
                                 sbx_exec_result_stderr(r, NULL));
            rc = SBX_ETRANSFER;
        }
        sbx_exec_result_free(r);
        if (rc == SBX_OK && download) {
            if (bfd >= 0)
                close(bfd);
            if ((bfd = open_beneath(sfd, tmp, O_RDONLY, 0)) < 0 || fstat(bfd, &hst) < 0 ||
                (hfd = open(host, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
                fchmod(hfd, hst.st_mode & 0777) < 0 || copy_fd(bfd, hfd) < 0) {
                *err = sbx_error_new_errno(SBX_EIO, errno, "apptainer download: cannot write %s",
                                           host);
                rc = SBX_EIO;
            }
        }
    }
    unlinkat(sfd, tmp, 0); /* always */
out:
    if (hfd >= 0)
        close(hfd);
    if (bfd >= 0)
        close(bfd);
    close(sfd);
    free(box_abs_path);
    return rc;
}

static void transfer_work(sbx_op *op, void *data, int download)
{
    sbx_error *err = NULL;
    int rc = cli_transfer(data, download, &err);
    work_free(data);
    sbx_op_complete(op, rc, err, NULL);
}

static void upload_work(sbx_op *op, void *data)
{
    transfer_work(op, data, 0);
}

static void download_work(sbx_op *op, void *data)
{
    transfer_work(op, data, 1);
}

/* A transfer on the CLI path: on the worker pool (it runs apptainer, or touches staging). */
static void cli_transfer_op(sbx_op *op, void *state, struct abox *b, const char *local_path,
                            const char *remote_path, sbx_op_work_fn fn)
{
    struct work *w = work_new(state, b, local_path, remote_path);
    if (!w)
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
    else
        run_work(op, fn, w);
}

static void ap_upload(sbx_op *op, void *state, void *box, const char *local_path,
                      const char *remote_path)
{
    struct abox *b = box;
    if (b->agent)
        sbx_box_upload(op, b->agent, local_path, remote_path);
    else
        cli_transfer_op(op, state, b, local_path, remote_path, upload_work);
}

static void ap_download(sbx_op *op, void *state, void *box, const char *remote_path,
                        const char *local_path)
{
    struct abox *b = box;
    if (b->agent)
        sbx_box_download(op, b->agent, remote_path, local_path);
    else
        cli_transfer_op(op, state, b, local_path, remote_path, download_work);
}

static void status_work(sbx_op *op, void *data)
{
    struct work *w = data;
    const char *argv[] = {w->a->bin, "instance", "list", "--json", NULL};
    struct ap_cli_result r;
    sbx_error *e = NULL;
    sbx_status st = SBX_STATUS_UNKNOWN;
    if (ap_cli_run(w->a, argv, NULL, 0, 60, 0, &r, &e) == SBX_OK) {
        if (!r.timed_out && r.code == 0 && !r.out.truncated)
            st = ap_instance_status(r.out.data, r.out.len, w->b->id);
        ap_cli_result_clear(&r);
    }
    sbx_error_free(e);
    work_free(w);
    sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)st);
}

static void ap_status(sbx_op *op, void *state, void *box)
{
    struct abox *b = box;
    /* An instance whose agent is gone is of no use to sbx: say so without asking the CLI. */
    if (b->agent && sbx_box_agent_gone(b->agent)) {
        sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)SBX_STATUS_ERROR);
        return;
    }
    struct work *w = work_new(state, b, NULL, NULL);
    if (!w)
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
    else
        run_work(op, status_work, w);
}

static void ap_close(sbx_op *op, void *state, void *box, int owned)
{
    struct ap *a = state;
    struct abox *b = box;
    sbx_box_agent *ag = b->agent;
    b->agent = NULL;
    /* A borrowed handle (connect) releases itself only; "owner" scope ends the box. */
    if (!owned && !(b->scope && !strcmp(b->scope, "owner"))) {
        sbx_box_agent_free(ag);
        sbx_op_complete(op, SBX_OK, NULL, NULL);
        return;
    }
    sbx_box_op_close(op, a->store, ag, b->id);
}

static void ap_serialize(sbx_op *op, void *state, void *box, const char *scope)
{
    (void)state;
    struct abox *b = box;
    json_t *d = json_pack("{s:s, s:s}", "provider", "apptainer", "sandbox_id", b->id);
    const char *sc = scope ? scope : b->scope;
    if (d && sc)
        json_object_set_new(d, "scope", json_string(sc));
    char *s = d ? json_dumps(d, JSON_COMPACT) : NULL;
    json_decref(d);
    sbx_op_complete(op, s ? SBX_OK : SBX_ENOMEM, NULL, s);
}

struct connect_ctx {
    sbx_op *op;
    struct abox *b;
};

static void connect_opened(sbx_box_agent *agent, int code, sbx_error *err, void *data)
{
    struct connect_ctx *c = data;
    sbx_op *op = c->op;
    struct abox *b = c->b;
    free(c);
    if (!agent) {
        abox_free(b);
        sbx_op_complete(op, code, sbx_error_prefix(err, "connecting to the box's agent"), NULL);
        return;
    }
    b->agent = agent;
    sbx_op_complete(op, SBX_OK, NULL, b);
}

/*
 * Reaches a box made elsewhere by its record (a small file of the store: read
 * here, on the loop thread) and its agent's socket, whose listener must be
 * the process that made the box (SO_PEERCRED).
 */
static void ap_connect(sbx_op *op, void *state, const char *descriptor_json)
{
    struct ap *a = state;
    json_t *d = json_loads(descriptor_json ? descriptor_json : "", 0, NULL);
    const char *prov = json_string_value(json_object_get(d, "provider"));
    const char *id = json_string_value(json_object_get(d, "sandbox_id"));
    const char *scope = json_string_value(json_object_get(d, "scope"));
    sbx_error *e = NULL;
    sbx_box_record r = {0};
    int rc = SBX_OK;
    json_t *pj = NULL;
    struct abox *b = NULL;
    if (!json_is_object(d) || !id) {
        e = sbx_error_new(SBX_EINVAL, "apptainer sandbox descriptor needs a 'sandbox_id' "
                                      "string, as serialize() returns");
        rc = SBX_EINVAL;
    } else if (prov && strcmp(prov, "apptainer")) {
        e = sbx_error_new(SBX_EINVAL,
                          "descriptor is for provider '%s', not 'apptainer'; connect with that "
                          "provider",
                          prov);
        rc = SBX_EINVAL;
    } else if ((rc = sbx_box_record_read(a->store, id, &r, &e)) < 0) {
        if (rc == SBX_ENOENT)
            e = sbx_error_prefix(e, "apptainer sandbox %s is gone (stopped, or made with "
                                    "another state_dir)",
                                 id);
    } else if (!(b = abox_new(a, id, NULL)) || (scope && !(b->scope = strdup(scope)))) {
        rc = SBX_ENOMEM;
    }
    if (rc == SBX_OK)
        pj = json_loads(r.provider_json ? r.provider_json : "{}", 0, NULL);
    json_int_t lpid = json_integer_value(json_object_get(pj, "listener_pid"));
    int agent = json_is_true(json_object_get(pj, "agent"));
    sbx_box_record_clear(&r);
    json_decref(d);
    json_decref(pj);
    if (rc < 0) {
        abox_free(b);
        sbx_op_complete(op, rc, e, NULL);
        return;
    }
    if (!agent) {
        sbx_op_complete(op, SBX_OK, NULL, b); /* the CLI path: nothing to reach but the CLI */
        return;
    }
    char *sock = path_join(b->box_dir, "agent.sock");
    struct connect_ctx *c = calloc(1, sizeof(*c));
    if (!sock || !c || lpid <= 0) {
        free(sock);
        free(c);
        abox_free(b);
        sbx_op_complete(op, lpid <= 0 ? SBX_EINVAL : SBX_ENOMEM,
                        lpid <= 0 ? sbx_error_new(SBX_EINVAL, "apptainer sandbox %s: its record "
                                                              "names no agent listener",
                                                  id)
                                  : NULL,
                        NULL);
        return;
    }
    c->op = op;
    c->b = b;
    b->listener_pid = (pid_t)lpid;
    sbx_box_agent_open_socket(op, a->pool, sock, (pid_t)lpid, 10.0, a->mount_point,
                              connect_opened, c);
    free(sock);
}

/* Where the agent listens, for a connection of a PTY session's own. */
static void ap_agent_address(sbx_op *op, void *state, void *box)
{
    (void)state;
    struct abox *b = box;
    if (!b->agent || b->listener_pid <= 0) {
        sbx_op_complete(op, SBX_ENOTSUP,
                        sbx_error_new(SBX_ENOTSUP, "apptainer with agent: false has no "
                                                   "terminals; use exec() instead"),
                        NULL);
        return;
    }
    char *sock = path_join(b->box_dir, "agent.sock");
    json_t *o = sock ? json_pack("{s:s, s:I}", "socket", sock, "pid", (json_int_t)b->listener_pid)
                     : NULL;
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    free(sock);
    sbx_op_complete(op, s ? SBX_OK : SBX_ENOMEM, NULL, s);
}

static const char *ap_box_id(const void *box)
{
    return ((const struct abox *)box)->id;
}

static void ap_list(sbx_op *op, void *state, const char *filter_json)
{
    sbx_box_op_list(op, ((struct ap *)state)->store, filter_json);
}

static void ap_stop_id(sbx_op *op, void *state, const char *id)
{
    sbx_box_op_stop_id(op, ((struct ap *)state)->store, id);
}

static void ap_gc(sbx_op *op, void *state, const char *opts_json)
{
    sbx_box_op_gc(op, ((struct ap *)state)->store, opts_json);
}

static void ap_release(void *state)
{
    struct ap *a = state;
    if (!a)
        return;
    sbx_box_pool_free(a->pool);
    sbx_box_store_free(a->store);
    if (a->slots_ready)
        sem_destroy(&a->slots);
    ap_config_clear(a);
    free(a);
}

static int ap_init(const char *config_json, void **state, sbx_error **err)
{
    struct ap *a = calloc(1, sizeof(*a));
    if (!a)
        return SBX_ENOMEM;
    int rc = ap_config_parse(a, config_json, err);
    if (rc < 0) {
        ap_release(a);
        return rc;
    }
    sbx_box_store_set_hooks(a->store, ap_alive, ap_stop_hook, a);
    *state = a;
    return SBX_OK;
}

#define AP_CAPS (SBX_CAP_LIST | SBX_CAP_STOP_ID | SBX_CAP_GC | SBX_CAP_CONNECT)

/* `agent: false` runs no agent: no streaming, no agent built-ins. */
static unsigned long long ap_capabilities_of(const void *state)
{
    const struct ap *a = state;
    return a->agent ? AP_CAPS | SBX_CAP_EXEC_STREAM | SBX_CAP_AGENT | SBX_CAP_PTY : AP_CAPS;
}

static const struct sbx_provider_ops apptainer_ops = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "apptainer",
    .init = ap_init,
    .release = ap_release,
    .create = ap_create,
    .exec = ap_exec,
    .upload_file = ap_upload,
    .download_file = ap_download,
    .status = ap_status,
    .close = ap_close,
    .box_id = ap_box_id,
    .box_free = abox_free,
    .serialize = ap_serialize,
    .connect = ap_connect,
    .list = ap_list,
    .stop_id = ap_stop_id,
    .gc = ap_gc,
    .capabilities = AP_CAPS | SBX_CAP_EXEC_STREAM | SBX_CAP_AGENT | SBX_CAP_PTY,
    .agent_address = ap_agent_address,
    .capabilities_of = ap_capabilities_of,
};

SBX_EXPORT const struct sbx_provider_ops *const sbx_plugin_providers[] = {&apptainer_ops, NULL};
