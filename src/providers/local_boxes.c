/*
 * The local provider's box records and its side of the box registry
 * (provider ABI 2): list, stop by id and gc.
 *
 * A local box is a work directory that host processes run in; no process
 * stands for it between commands. So that boxes made by other processes
 * (`sbx create`, a program through the library) can be listed, stopped and
 * collected, create writes a record `<state_dir>/<id>.json` (0600, in a
 * 0700 directory of the caller's, checked as every sbx state directory is:
 * sbx__private_dir) and the stop that ends the box removes it.
 *
 * What the record says is believed only as far as it must be: it is read
 * without following links, from a regular file of the caller's, at most
 * SBX_RECORD_MAX bytes, its id must be its file name, and a workspace is
 * removed only when the record says sbx allocated it, the directory's name
 * is the box id, and it is a directory (not a link) of the caller's.
 *
 * A box is dead when its workspace is gone (removed by hand, or a stop that
 * crashed between removing it and its record): it lists as "error" and gc
 * forgets it. A box whose ttl_s passed is expired: gc ends it. Everything
 * here runs on the worker pool.
 */
#include "providers/local.h"
#include "providers/local_agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

char *sbx__local_state_dir(const char *override)
{
    if (override && *override)
        return strdup(override);
    const char *env = getenv("SBX_STATE_DIR");
    if (env && *env)
        return sbx__printf("%s/local", env);
    if (geteuid() == 0)
        return strdup("/run/sbx/local");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && *xdg)
        return sbx__printf("%s/sbx/local", xdg);
    return sbx__printf("/tmp/sbx-%u/local", (unsigned)geteuid());
}

/* "local-" and hex: what create makes, and all a record's file name may be. */
static bool id_ok(const char *id)
{
    size_t n = strlen(id);
    if (n <= 6 || n > 6 + 64 || strncmp(id, "local-", 6) != 0)
        return false;
    return strspn(id + 6, "0123456789abcdef") == n - 6;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* --- records --------------------------------------------------------------- */

int sbx__local_state_open(const char *state_dir, char **canonical, sbx_error **err)
{
    return sbx__private_dir(state_dir, true, canonical, err);
}

int sbx__local_record_write(const char *canon, const sbx_local_record *r, sbx_error **err)
{
    _cleanup_json_ json_t *labels = json_object();
    for (size_t i = 0; labels && r->labels && i < r->labels->len; i++)
        if (json_object_set_new(labels, r->labels->keys[i], json_string(r->labels->values[i])) < 0)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_json_ json_t *o =
        labels ? json_pack("{s:s, s:s, s:b, s:o, s:f, s:o, s:O}", "id", r->id, "workspace",
                           r->workspace, "owned_workspace", r->owned_workspace, "workdir",
                           r->workdir ? json_string(r->workdir) : json_null(), "created",
                           r->created, "expires_at",
                           r->expires_at > 0 ? json_real(r->expires_at) : json_null(), "labels",
                           labels)
               : NULL;
    _cleanup_free_ char *text = o ? sbx__json_dump(o) : NULL;
    _cleanup_free_ char *path = sbx__printf("%s/%s.json", canon, r->id);
    if (!text || !path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx__write_file_atomic(path, text, strlen(text), 0600) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot write the box record %s", path);
    return SBX_OK;
}

void sbx__local_record_remove(const char *canon, const char *id)
{
    if (!id_ok(id))
        return;
    _cleanup_free_ char *path = sbx__printf("%s/%s.json", canon, id);
    if (path && unlink(path) < 0 && errno != ENOENT)
        sbx_log(SBX_LOG_WARNING, "local provider: cannot remove the box record %s: %s", path,
                strerror(errno));
}

/*
 * Opens the state directory. A directory that does not exist holds no boxes
 * (*dfd = -1); one that fails the ownership checks is an error.
 */
static int open_state(const char *state_dir, int *dfd, char **canon, sbx_error **err)
{
    sbx_error *e = NULL;
    int rc = sbx__private_dir(state_dir, false, canon, &e);
    *dfd = -1;
    if (rc == SBX_ENOENT) {
        sbx_error_free(e);
        return SBX_OK;
    }
    if (rc < 0)
        return sbx__fail(err, e);
    *dfd = open(*canon, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*dfd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot open the state directory %s", *canon);
    return SBX_OK;
}

/* Box `id`'s record, checked: what the rest of this file may rely on. */
static int read_record(int dfd, const char *canon, const char *id, json_t **out, sbx_error **err)
{
    _cleanup_free_ char *name = sbx__printf("%s.json", id);
    _cleanup_free_ char *shown = sbx__printf("%s/%s.json", canon, id);
    if (!name || !shown)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_free_ char *text = NULL;
    size_t n = 0;
    int rc = sbx__read_private_file(dfd, name, shown, SBX_RECORD_MAX, &text, &n, err);
    if (rc < 0)
        return rc;
    json_t *o = json_loadb(text, n, 0, NULL);
    json_t *ws = json_object_get(o, "workspace");
    json_t *labels = json_object_get(o, "labels");
    json_t *created = json_object_get(o, "created");
    json_t *exp = json_object_get(o, "expires_at");
    json_t *wd = json_object_get(o, "workdir");
    bool ok = json_is_object(o) && json_is_string(json_object_get(o, "id")) &&
              !strcmp(json_string_value(json_object_get(o, "id")), id) && json_is_string(ws) &&
              json_string_value(ws)[0] == '/' &&
              json_is_boolean(json_object_get(o, "owned_workspace")) && json_is_object(labels) &&
              json_is_number(created) && (json_is_null(exp) || json_is_number(exp)) &&
              (json_is_null(wd) || json_is_string(wd));
    const char *k;
    json_t *v;
    json_object_foreach(labels, k, v) ok &= json_is_string(v);
    if (!ok) {
        json_decref(o);
        return sbx__set_error(err, SBX_EIO,
                              "box record %s is malformed (not what create writes): refused; "
                              "remove it by hand",
                              shown);
    }
    *out = o;
    return SBX_OK;
}

static const char *rec_str(const json_t *r, const char *key)
{
    return json_string_value(json_object_get(r, key));
}

static bool workspace_exists(const json_t *r)
{
    struct stat st;
    return lstat(rec_str(r, "workspace"), &st) == 0 && S_ISDIR(st.st_mode);
}

static bool expired(const json_t *r, double now)
{
    json_t *e = json_object_get(r, "expires_at");
    return json_is_number(e) && json_number_value(e) <= now;
}

/* Every label of `want` (an object or NULL) is in the record with that value. */
static bool labels_match(const json_t *r, const json_t *want)
{
    const char *k;
    json_t *v;
    json_t *have = json_object_get(r, "labels");
    json_object_foreach((json_t *)want, k, v)
    {
        if (!json_is_string(v) || !json_equal(json_object_get(have, k), v))
            return false;
    }
    return true;
}

/*
 * Ends the box a record describes: removes its workspace when sbx allocated
 * it (never the caller's own workdir), checking first that the directory is
 * the box's and the caller's, then the record.
 */
static int end_box(int dfd, const char *canon, const json_t *r, sbx_error **err)
{
    const char *id = rec_str(r, "id");
    const char *ws = rec_str(r, "workspace");
    if (json_is_true(json_object_get(r, "owned_workspace"))) {
        const char *base = strrchr(ws, '/') + 1;
        struct stat st;
        if (strcmp(base, id) != 0)
            return sbx__set_error(err, SBX_EPERM,
                                  "box record %s/%s.json names the workspace %s, which is not "
                                  "box %s's own: refused; remove the record by hand",
                                  canon, id, ws, id);
        if (lstat(ws, &st) == 0) {
            if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
                return sbx__set_error(err, SBX_EPERM,
                                      "the workspace %s of box %s is not a directory of yours "
                                      "(a link, or another user's?): refused",
                                      ws, id);
            if (sbx__rm_rf(ws) < 0)
                return sbx__set_errno(err, SBX_EIO, errno,
                                      "cannot remove the workspace %s of box %s; remove it by "
                                      "hand",
                                      ws, id);
        } else if (errno != ENOENT) {
            return sbx__set_errno(err, SBX_EIO, errno, "cannot look at the workspace %s", ws);
        }
    }
    /* Its host agent (PTY sessions) ends with it (local_agent.c). */
    sbx__local_agent_stop(canon, id);
    _cleanup_free_ char *name = sbx__printf("%s.json", id);
    if (!name)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot remove the box record %s/%s", canon,
                              name);
    return SBX_OK;
}

/* The ids of the records in the state directory (sorted), or an empty list. */
static int record_ids(int dfd, char ***out, size_t *n, sbx_error **err)
{
    *out = NULL;
    *n = 0;
    if (dfd < 0)
        return SBX_OK;
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return sbx__set_errno(err, SBX_EIO, errno, "cannot read the state directory");
    }
    rewinddir(d);
    struct dirent *de;
    int rc = SBX_OK;
    while ((de = readdir(d)) && rc == SBX_OK) {
        size_t len = strlen(de->d_name);
        if (len <= 5 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char *id = strndup(de->d_name, len - 5);
        if (!id) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            break;
        }
        if (!id_ok(id)) { /* temporary files of an atomic write, strangers: not records */
            free(id);
            continue;
        }
        char **grown = realloc(*out, (*n + 2) * sizeof(char *));
        if (!grown) {
            free(id);
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            break;
        }
        *out = grown;
        (*out)[(*n)++] = id;
        (*out)[*n] = NULL;
    }
    closedir(d);
    if (rc < 0) {
        sbx_strv_free(*out);
        *out = NULL;
        *n = 0;
        return rc;
    }
    if (*n)
        qsort(*out, *n, sizeof(char *), cmp_str);
    return SBX_OK;
}

static json_t *box_json(const char *canon, const json_t *r, double now)
{
    bool alive = workspace_exists(r);
    json_t *desc = json_pack("{s:s, s:s, s:O, s:s}", "sandbox_id", rec_str(r, "id"), "workspace",
                             rec_str(r, "workspace"), "owned_workspace",
                             json_object_get(r, "owned_workspace"), "provider", "local");
    /* A caller's workdir travels as the connected handle's default cwd, as serialize() says. */
    if (desc && json_is_string(json_object_get(r, "workdir")))
        json_object_set_new(desc, "workdir", json_string(rec_str(r, "workspace")));
    json_t *o = json_pack("{s:s, s:s, s:O, s:O, s:O, s:n, s:o, s:{s:s, s:s, s:O, s:b, s:b}}", "id",
                          rec_str(r, "id"), "status", alive ? "running" : "error", "created",
                          json_object_get(r, "created"), "expires_at",
                          json_object_get(r, "expires_at"), "labels",
                          json_object_get(r, "labels"), "image", "descriptor", desc, "provider",
                          "state_dir", canon, "workspace", rec_str(r, "workspace"),
                          "owned_workspace", json_object_get(r, "owned_workspace"),
                          "workspace_exists", alive, "expired", expired(r, now));
    return o;
}

/* --- the operations --------------------------------------------------------- */

struct call {
    char *state_dir;
    char *id;
    json_t *opts;
};

static void call_free(struct call *c)
{
    if (!c)
        return;
    free(c->state_dir);
    free(c->id);
    json_decref(c->opts);
    free(c);
}

static void list_work(sbx_op *op, void *data)
{
    struct call *c = data;
    sbx_error *e = NULL;
    _cleanup_free_ char *canon = NULL;
    _cleanup_close_ int dfd = -1;
    char **ids = NULL;
    size_t n = 0;
    json_t *arr = NULL;
    int rc = open_state(c->state_dir, &dfd, &canon, &e);
    if (rc == SBX_OK)
        rc = record_ids(dfd, &ids, &n, &e);
    if (rc == SBX_OK && !(arr = json_array()))
        rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    double now = now_s();
    json_t *want = json_object_get(c->opts, "labels");
    for (size_t i = 0; rc == SBX_OK && i < n; i++) {
        json_t *r = NULL;
        sbx_error *re = NULL;
        /* A record removed meanwhile (a stop racing) is simply not listed; a bad one is said. */
        if (read_record(dfd, canon, ids[i], &r, &re) < 0) {
            if (sbx_error_code(re) != SBX_ENOENT)
                sbx_log(SBX_LOG_WARNING, "local provider: %s", sbx_error_message(re));
            sbx_error_free(re);
            continue;
        }
        if (labels_match(r, want)) {
            json_t *b = box_json(canon, r, now);
            if (!b || json_array_append_new(arr, b) < 0)
                rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
        }
        json_decref(r);
    }
    char *text = rc == SBX_OK ? json_dumps(arr, JSON_COMPACT) : NULL;
    if (rc == SBX_OK && !text)
        rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    json_decref(arr);
    sbx_strv_free(ids);
    call_free(c);
    sbx_op_complete(op, rc, e, text);
}

static void stop_work(sbx_op *op, void *data)
{
    struct call *c = data;
    sbx_error *e = NULL;
    _cleanup_free_ char *canon = NULL;
    _cleanup_close_ int dfd = -1;
    json_t *r = NULL;
    int rc = id_ok(c->id) ? open_state(c->state_dir, &dfd, &canon, &e) : SBX_ENOENT;
    if (rc == SBX_OK && dfd >= 0)
        rc = read_record(dfd, canon, c->id, &r, &e);
    if (rc == SBX_ENOENT || (rc == SBX_OK && dfd < 0)) {
        sbx_error_free(e);
        e = sbx_error_new(SBX_ENOENT,
                          "the local provider has no box '%s' (no record in %s; a box made "
                          "with another state_dir is recorded there)",
                          c->id, canon ? canon : c->state_dir);
        rc = SBX_ENOENT;
    }
    if (rc == SBX_OK)
        rc = end_box(dfd, canon, r, &e);
    json_decref(r);
    call_free(c);
    sbx_op_complete(op, rc, e, NULL);
}

static void gc_work(sbx_op *op, void *data)
{
    struct call *c = data;
    sbx_error *e = NULL;
    _cleanup_free_ char *canon = NULL;
    _cleanup_close_ int dfd = -1;
    char **ids = NULL;
    size_t n = 0;
    json_t *removed = json_array();
    int rc = removed ? open_state(c->state_dir, &dfd, &canon, &e) : SBX_ENOMEM;
    if (rc == SBX_OK)
        rc = record_ids(dfd, &ids, &n, &e);
    json_t *want = json_object_get(c->opts, "labels");
    bool by_label = json_object_size(want) > 0;
    bool dry = json_is_true(json_object_get(c->opts, "dry_run"));
    double now = now_s();
    for (size_t i = 0; rc == SBX_OK && i < n; i++) {
        json_t *r = NULL;
        sbx_error *re = NULL;
        if (read_record(dfd, canon, ids[i], &r, &re) < 0) {
            if (sbx_error_code(re) != SBX_ENOENT)
                sbx_log(SBX_LOG_WARNING, "local provider: %s", sbx_error_message(re));
            sbx_error_free(re);
            continue;
        }
        bool collect = !workspace_exists(r) || expired(r, now) || (by_label && labels_match(r, want));
        if (collect && !dry && end_box(dfd, canon, r, &re) < 0) {
            /* One box that cannot be collected does not keep the others. */
            sbx_log(SBX_LOG_WARNING, "local provider: gc: %s", sbx_error_message(re));
            sbx_error_free(re);
            collect = false;
        }
        if (collect)
            json_array_append_new(removed, json_string(ids[i]));
        json_decref(r);
    }
    char *text = rc == SBX_OK ? json_dumps(removed, JSON_COMPACT) : NULL;
    if (rc == SBX_OK && !text)
        rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    json_decref(removed);
    sbx_strv_free(ids);
    call_free(c);
    sbx_op_complete(op, rc, e, text);
}

static void submit(sbx_op *op, const char *state_dir, const char *id, const char *opts_json,
                   sbx_op_work_fn fn)
{
    struct call *c = calloc(1, sizeof(*c));
    if (c) {
        c->state_dir = strdup(state_dir);
        c->id = id ? strdup(id) : NULL;
        /* The core checked it is an object (or absent). */
        c->opts = opts_json ? json_loads(opts_json, 0, NULL) : json_object();
    }
    if (!c || !c->state_dir || (id && !c->id) || !c->opts) {
        call_free(c);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    int rc = sbx_op_run_blocking(op, fn, c);
    if (rc < 0) {
        call_free(c);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

void sbx__local_op_list(sbx_op *op, const char *state_dir, const char *filter_json)
{
    submit(op, state_dir, NULL, filter_json, list_work);
}

void sbx__local_op_stop_id(sbx_op *op, const char *state_dir, const char *id)
{
    submit(op, state_dir, id, NULL, stop_work);
}

void sbx__local_op_gc(sbx_op *op, const char *state_dir, const char *opts_json)
{
    submit(op, state_dir, NULL, opts_json, gc_work);
}
