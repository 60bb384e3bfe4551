/*
 * hostbox: the box-provider kit's teaching example, as an out-of-tree plugin.
 *
 *   !!! NO ISOLATION. A hostbox "box" is a plain host process: sbx-agent
 *   !!! running as you, in a work directory. Its commands see and can change
 *   !!! everything you can. It exists to show how a provider is built on
 *   !!! <sbx/box.h> (docs/provider-guide.md walks through it) and to test the
 *   !!! kit; never run untrusted code in it.
 *
 * Each box is `sbx-agent serve --stdio` started by the kit with a socket pair
 * as its stdin/stdout, in <state>/boxes/<id>/work. A real provider differs
 * in start() only: `docker run -i IMAGE /sbx-agent serve --stdio`, an
 * apptainer or enroot command, a VM with the agent as init. Everything else
 * (hello and readiness, exec/upload/download, the connection pool, records,
 * list, stop by id, gc by TTL and label) is the kit's.
 *
 * A box lives as long as its stream: when the process that made it exits,
 * the agent sees end-of-file and exits too, and the box shows as "error" in
 * `sbx ls` until `sbx gc` (or `sbx stop ID`) removes its record.
 *
 * Config (the mapping under "hostbox"): none; {} only. Its state directory is
 * $SBX_STATE_DIR/hostbox (or $XDG_RUNTIME_DIR/sbx/hostbox, ...).
 *
 * Build: cc -shared -fPIC $(pkg-config --cflags sbx) -o hostbox.so hostbox.c
 * Use:   SBX_PLUGIN_PATH=$PWD SBX_PROVIDER=hostbox sbx run -- echo hi
 *
 * It includes only sbx's installed headers.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, mkdir, ... under -std=c11 */

#include <sbx.h>
#include <sbx/box.h>
#include <sbx/provider.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct hostbox {
    char *agent;          /* the sbx-agent binary */
    sbx_box_store *store; /* records: <state>/boxes/<id>/record.json */
    sbx_box_pool *pool;   /* agent connections */
};

struct hbox {
    char *id;
    sbx_box_agent *agent;
    char **env; /* the spec's env as "K=V", NULL-ended: under every exec's own */
};

/* --- provider ---------------------------------------------------------------- */

static int only_empty_object(const char *json)
{
    const char *p = json ? json : "{}";
    p += strspn(p, " \t\r\n");
    if (*p++ != '{')
        return 0;
    p += strspn(p, " \t\r\n");
    if (*p++ != '}')
        return 0;
    p += strspn(p, " \t\r\n");
    return *p == 0;
}

static void hb_release(void *state)
{
    struct hostbox *h = state;
    if (!h)
        return;
    sbx_box_pool_free(h->pool);
    sbx_box_store_free(h->store);
    free(h->agent);
    free(h);
}

static int hb_init(const char *config_json, void **state, sbx_error **err)
{
    if (!only_empty_object(config_json)) {
        *err = sbx_error_new(SBX_EINVAL, "hostbox takes no options (got %s): use {}", config_json);
        return SBX_EINVAL;
    }
    struct hostbox *h = calloc(1, sizeof(*h));
    if (!h)
        return SBX_ENOMEM;
    int rc = SBX_OK;
    if (!(h->agent = sbx_box_find_agent())) {
        *err = sbx_error_new(SBX_EINVAL, "hostbox: cannot find the sbx-agent binary (install "
                                         "sbx, or set SBX_AGENT to its path)");
        rc = SBX_EINVAL;
    } else if ((rc = sbx_box_store_open("hostbox", NULL, &h->store, err)) == SBX_OK &&
               !(h->pool = sbx_box_pool_new(0))) {
        rc = SBX_ENOMEM;
    }
    if (rc < 0) {
        hb_release(h);
        return rc;
    }
    *state = h;
    return SBX_OK;
}

/* --- create ------------------------------------------------------------------ */

/* The spec's files, relative paths only, under the work directory (mode 0644). */
static int write_files(const char *work, const sbx_spec *spec, sbx_error **err)
{
    for (size_t i = 0; i < sbx_spec_file_count(spec); i++) {
        const char *path;
        const void *data;
        size_t len;
        sbx_spec_file_at(spec, i, &path, &data, &len);
        if (path[0] == '/' || strstr(path, "..") || strchr(path, '/')) {
            *err = sbx_error_new(SBX_EINVAL,
                                 "hostbox places spec files in the box's work directory only: "
                                 "'%s' is not a plain file name",
                                 path);
            return SBX_EINVAL;
        }
        char p[8192];
        if ((size_t)snprintf(p, sizeof(p), "%s/%s", work, path) >= sizeof(p)) {
            *err = sbx_error_new(SBX_EINVAL, "hostbox: the spec file name '%s' is too long", path);
            return SBX_EINVAL;
        }
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        ssize_t n = fd >= 0 ? write(fd, data, len) : -1;
        if (fd >= 0)
            close(fd);
        if (n != (ssize_t)len) {
            *err = sbx_error_new_errno(SBX_ECREATE, errno, "hostbox: cannot write %s", path);
            return SBX_ECREATE;
        }
    }
    return SBX_OK;
}

/* The kit's start hook: the one provider-specific step of create. Worker thread. */
static int hb_start(sbx_box_record *r, const char *box_dir, const sbx_spec *spec, void *data,
                    int *fd, sbx_error **err)
{
    struct hostbox *h = data;
    char work[4096], log[4096];
    if ((size_t)snprintf(work, sizeof(work), "%s/work", box_dir) >= sizeof(work) ||
        (size_t)snprintf(log, sizeof(log), "%s/agent.log", box_dir) >= sizeof(log)) {
        *err = sbx_error_new(SBX_EINVAL, "hostbox: the state directory's path is too long");
        return SBX_EINVAL;
    }
    if (mkdir(work, 0700) < 0 && errno != EEXIST) {
        *err = sbx_error_new_errno(SBX_ECREATE, errno, "hostbox: cannot make %s", work);
        return SBX_ECREATE;
    }
    int rc = write_files(work, spec, err);
    if (rc < 0)
        return rc;
    if (!(r->workdir = strdup(work)))
        return SBX_ENOMEM;
    const char *argv[] = {h->agent, "serve", "--stdio", NULL};
    pid_t pid;
    rc = sbx_box_spawn_stdio(argv, work, NULL, log, &pid, fd, err);
    if (rc < 0)
        return rc;
    r->pid = pid;
    return SBX_OK;
}

static void hbox_free(void *box)
{
    struct hbox *b = box;
    if (!b)
        return;
    sbx_box_agent_free(b->agent);
    for (size_t i = 0; b->env && b->env[i]; i++)
        free(b->env[i]);
    free(b->env);
    free(b->id);
    free(b);
}

static void hb_created(sbx_op *op, sbx_box_agent *agent, const sbx_box_record *r, int code,
                       sbx_error *err, void *data)
{
    const sbx_spec *spec = data;
    if (code < 0) {
        sbx_op_complete(op, code, err, NULL);
        return;
    }
    struct hbox *b = calloc(1, sizeof(*b));
    size_t n = sbx_spec_env_count(spec);
    if (b) {
        b->agent = agent;
        b->id = strdup(r->id);
        b->env = calloc(n + 1, sizeof(char *));
    }
    for (size_t i = 0; b && b->env && i < n; i++) {
        const char *k, *v;
        sbx_spec_env_at(spec, i, &k, &v);
        size_t len = strlen(k) + strlen(v) + 2;
        if ((b->env[i] = malloc(len)))
            snprintf(b->env[i], len, "%s=%s", k, v);
        else
            b->id = (free(b->id), NULL);
    }
    if (!b || !b->id || !b->env) {
        /* Out of memory: end the box we just made, then fail. */
        if (!b)
            sbx_box_agent_free(agent);
        hbox_free(b);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx_op_complete(op, SBX_OK, NULL, b);
}

static void hb_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    struct hostbox *h = state;
    if (sbx_spec_entrypoint(spec) || sbx_spec_port_count(spec) > 0) {
        sbx_op_complete(op, SBX_EINVAL,
                        sbx_error_new(SBX_EINVAL, "hostbox has no entrypoint and no ports: "
                                                  "leave them unset"),
                        NULL);
        return;
    }
    sbx_box_op_create(op, h->store, h->pool, spec, "hb", hb_start, h, hb_created, (void *)spec);
}

/* --- a box's ops: one kit call each --------------------------------------------- */

static void hb_exec(sbx_op *op, void *state, void *box, const char *command,
                    const sbx_exec_opts *opts)
{
    (void)state;
    struct hbox *b = box;
    sbx_box_exec(op, b->agent, command, opts, (const char *const *)b->env);
}

static void hb_upload(sbx_op *op, void *state, void *box, const char *local_path,
                      const char *remote_path)
{
    (void)state;
    sbx_box_upload(op, ((struct hbox *)box)->agent, local_path, remote_path);
}

static void hb_download(sbx_op *op, void *state, void *box, const char *remote_path,
                        const char *local_path)
{
    (void)state;
    sbx_box_download(op, ((struct hbox *)box)->agent, remote_path, local_path);
}

static void hb_status(sbx_op *op, void *state, void *box)
{
    (void)state;
    struct hbox *b = box;
    sbx_status s = sbx_box_agent_gone(b->agent) ? SBX_STATUS_ERROR : SBX_STATUS_RUNNING;
    sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)s);
}

static void hb_close(sbx_op *op, void *state, void *box, int owned)
{
    struct hostbox *h = state;
    struct hbox *b = box;
    (void)owned; /* hostbox has no connect: every handle is its box's owner */
    sbx_box_agent *a = b->agent;
    b->agent = NULL;
    sbx_box_op_close(op, h->store, a, b->id);
}

static const char *hb_box_id(const void *box)
{
    return ((const struct hbox *)box)->id;
}

/* --- provider-wide: the kit's records -------------------------------------------- */

static void hb_list(sbx_op *op, void *state, const char *filter_json)
{
    sbx_box_op_list(op, ((struct hostbox *)state)->store, filter_json);
}

static void hb_stop_id(sbx_op *op, void *state, const char *id)
{
    sbx_box_op_stop_id(op, ((struct hostbox *)state)->store, id);
}

static void hb_gc(sbx_op *op, void *state, const char *opts_json)
{
    sbx_box_op_gc(op, ((struct hostbox *)state)->store, opts_json);
}

static const struct sbx_provider_ops hostbox_ops = {
    SBX_PROVIDER_OPS_HEADER,
    .name = "hostbox",
    .init = hb_init,
    .release = hb_release,
    .create = hb_create,
    .exec = hb_exec,
    .upload_file = hb_upload,
    .download_file = hb_download,
    .status = hb_status,
    .close = hb_close,
    .box_id = hb_box_id,
    .box_free = hbox_free,
    .list = hb_list,
    .stop_id = hb_stop_id,
    .gc = hb_gc,
    /* sbx_box_exec streams output as the agent's frames arrive: nothing more to do here. */
    /* SBX_CAP_AGENT: the kit's exec runs the agent's built-ins, so directory transfers work. */
    .capabilities = SBX_CAP_LIST | SBX_CAP_STOP_ID | SBX_CAP_GC | SBX_CAP_EXEC_STREAM |
                    SBX_CAP_AGENT,
};

SBX_EXPORT const struct sbx_provider_ops *const sbx_plugin_providers[] = {&hostbox_ops, NULL};
