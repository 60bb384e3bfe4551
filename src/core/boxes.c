/*
 * The box registry: provider-wide operations on boxes by id (list, stop,
 * gc) and on images, for every provider that has them (ABI 2). `sbx ls`,
 * `sbx stop`, `sbx gc` and `sbx image` go through these, never through a
 * provider's internals, so a new provider gets them by filling its table.
 *
 * Each call is one provider op, run on the provider's loop like every
 * other; its JSON answer is checked here (the provider may be a plugin)
 * before it reaches the caller.
 */
#include "internal.h"

#include <stdatomic.h>

enum pcall_kind {
    PC_LIST,
    PC_STOP,
    PC_GC,
    PC_IMAGE_LIST,
    PC_IMAGE_IMPORT,
    PC_IMAGE_REMOVE,
    PC_IMAGE_INSPECT,
    PC_IMAGE_TAG,
    PC_IMAGE_PRUNE,
    PC_IMAGE_PULL,
    PC_IMAGE_COMMIT, /* [img-commit] */
};

static const char *const pcall_names[] = {
    [PC_LIST] = "list",
    [PC_STOP] = "stop_id",
    [PC_GC] = "gc",
    [PC_IMAGE_LIST] = "image_list",
    [PC_IMAGE_IMPORT] = "image_import",
    [PC_IMAGE_REMOVE] = "image_remove",
    [PC_IMAGE_INSPECT] = "image_inspect",
    [PC_IMAGE_TAG] = "image_tag",
    [PC_IMAGE_PRUNE] = "image_prune",
    [PC_IMAGE_PULL] = "image_pull",
    [PC_IMAGE_COMMIT] = "image_commit",
};

struct pcall {
    enum pcall_kind kind;
    sbx_provider *p;
    sbx_future *f;
    sbx_op *op;
    char *a, *b, *c;
    int flag;
};

static void pcall_free(struct pcall *c)
{
    free(c->a);
    free(c->b);
    free(c->c);
    sbx__provider_unref(c->p);
    free(c);
}

static void pcall_finish(struct pcall *c, int code, sbx_error *err, void *value)
{
    sbx__future_set_cancel(c->f, NULL, NULL);
    sbx__future_complete(c->f, code, err, value);
    pcall_free(c);
}

/* What a kind's answer must be: an array of objects with a string key, an object, or nothing. */
static int check_answer(struct pcall *c, char **value, sbx_error **err)
{
    if (c->kind == PC_STOP || c->kind == PC_IMAGE_REMOVE || c->kind == PC_IMAGE_TAG) {
        free(*value);
        *value = NULL;
        return SBX_OK;
    }
    json_error_t je;
    _cleanup_json_ json_t *j = *value ? json_loads(*value, JSON_REJECT_DUPLICATES, &je) : NULL;
    bool obj = c->kind == PC_IMAGE_IMPORT || c->kind == PC_IMAGE_INSPECT ||
               c->kind == PC_IMAGE_PULL || c->kind == PC_IMAGE_COMMIT;
    const char *want = obj ? "a JSON object" : "a JSON array";
    bool ok = obj ? json_is_object(j) : json_is_array(j);
    if (ok && !obj) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v)
        {
            const char *key = c->kind == PC_IMAGE_LIST ? "name" : NULL;
            if (c->kind == PC_LIST)
                key = "id";
            ok = key ? json_is_string(json_object_get(v, key)) : json_is_string(v);
            if (!ok) {
                want = c->kind == PC_GC ? "a JSON array of ids"
                       : c->kind == PC_IMAGE_PRUNE ? "a JSON array of strings"
                       : c->kind == PC_LIST ? "a JSON array of objects with a string \"id\""
                                            : "a JSON array of objects with a string \"name\"";
                break;
            }
        }
    }
    if (!ok) {
        free(*value);
        *value = NULL;
        return sbx__set_error(err, SBX_EPROVIDER, "provider '%s' %s() did not return %s",
                              c->p->name, pcall_names[c->kind], want);
    }
    return SBX_OK;
}

static void pcall_done(int code, sbx_error *err, void *value, void *data)
{
    struct pcall *c = data;
    c->op = NULL;
    if (code >= 0) {
        char *v = value;
        sbx_error *e = NULL;
        if (check_answer(c, &v, &e) < 0) {
            pcall_finish(c, sbx_error_code(e), e, NULL);
            return;
        }
        value = v;
    }
    pcall_finish(c, code, err, value);
}

static void pcall_cancel(void *data)
{
    struct pcall *c = data;
    if (c->op)
        sbx__op_cancel(c->op);
}

static void pcall_run(void *data)
{
    struct pcall *c = data;
    if (sbx__future_cancelled(c->f)) {
        pcall_finish(c, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "operation cancelled"), NULL);
        return;
    }
    c->op = sbx__op_new(c->p, pcall_done, c);
    if (!c->op) {
        pcall_finish(c, SBX_ENOMEM, sbx_error_new(SBX_ENOMEM, "out of memory"), NULL);
        return;
    }
    sbx__future_set_cancel(c->f, pcall_cancel, c);
    sbx__op_set_progress_future(c->op, c->f);
    const struct sbx_provider_ops *o = c->p->ops;
    void *st = c->p->state;
    switch (c->kind) {
    case PC_LIST:
        o->list(c->op, st, c->a);
        break;
    case PC_STOP:
        o->stop_id(c->op, st, c->a);
        break;
    case PC_GC:
        o->gc(c->op, st, c->a);
        break;
    case PC_IMAGE_LIST:
        o->image_list(c->op, st);
        break;
    case PC_IMAGE_IMPORT:
        o->image_import(c->op, st, c->a, c->b, c->c);
        break;
    case PC_IMAGE_REMOVE:
        o->image_remove(c->op, st, c->a, c->flag);
        break;
    case PC_IMAGE_INSPECT:
        o->image_inspect(c->op, st, c->a);
        break;
    case PC_IMAGE_TAG:
        o->image_tag(c->op, st, c->a, c->b);
        break;
    case PC_IMAGE_PRUNE:
        o->image_prune(c->op, st, c->a);
        break;
    case PC_IMAGE_PULL:
        o->image_pull(c->op, st, c->a, c->c);
        break;
    case PC_IMAGE_COMMIT:
        o->image_commit(c->op, st, c->a, c->b, c->c);
        break;
    }
}

static bool has_op(const sbx_provider *p, enum pcall_kind k)
{
    const struct sbx_provider_ops *o = p->ops;
    switch (k) {
    case PC_LIST:
        return o->list != NULL;
    case PC_STOP:
        return o->stop_id != NULL;
    case PC_GC:
        return o->gc != NULL;
    case PC_IMAGE_LIST:
        return o->image_list != NULL;
    case PC_IMAGE_IMPORT:
        return o->image_import != NULL;
    case PC_IMAGE_REMOVE:
        return o->image_remove != NULL;
    case PC_IMAGE_INSPECT:
        return o->image_inspect != NULL;
    case PC_IMAGE_TAG:
        return o->image_tag != NULL;
    case PC_IMAGE_PRUNE:
        return o->image_prune != NULL;
    case PC_IMAGE_PULL:
        return o->image_pull != NULL;
    case PC_IMAGE_COMMIT:
        return o->image_commit != NULL;
    }
    return false;
}

/* A JSON argument (NULL allowed) must be an object: checked before the provider sees it. */
static int check_object_arg(const char *what, const char *json, sbx_error **err)
{
    if (!json)
        return SBX_OK;
    json_error_t je;
    _cleanup_json_ json_t *j = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j))
        return sbx__set_error(err, SBX_EINVAL, "%s must be a JSON object%s%s", what,
                              j ? "" : ": ", j ? "" : je.text);
    json_t *labels = json_object_get(j, "labels");
    if (labels) {
        const char *k;
        json_t *v;
        bool ok = json_is_object(labels);
        json_object_foreach(labels, k, v) ok = ok && json_is_string(v);
        if (!ok)
            return sbx__set_error(err, SBX_EINVAL,
                                  "%s: \"labels\" must map names to strings, as metadata does",
                                  what);
    }
    return SBX_OK;
}

static int pcall_submit(sbx_provider *p, enum pcall_kind kind, const char *a, const char *b,
                        const char *c3, int flag, sbx_future **out, sbx_error **err)
{
    if (!p || !out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_provider_%s: provider and out are required",
                              pcall_names[kind]);
    if (!has_op(p, kind)) {
        _cleanup_free_ char *r = sbx__repr(p->name);
        return sbx__set_error(err, SBX_ENOTSUP, "Sandbox provider %s does not support %s()",
                              r ? r : p->name, pcall_names[kind]);
    }
    struct pcall *c = calloc(1, sizeof(*c));
    if (!c)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    c->kind = kind;
    c->p = p;
    sbx__provider_ref(p);
    c->flag = flag;
    c->a = a ? strdup(a) : NULL;
    c->b = b ? strdup(b) : NULL;
    c->c = c3 ? strdup(c3) : NULL;
    enum sbx__value_kind vk =
        kind == PC_STOP || kind == PC_IMAGE_REMOVE || kind == PC_IMAGE_TAG ? SBX_VALUE_NONE
                                                                           : SBX_VALUE_STRING;
    if ((a && !c->a) || (b && !c->b) || (c3 && !c->c) || !(c->f = sbx__future_new(p->ctx, vk))) {
        pcall_free(c);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    /* The future starts with two references: the caller's, and the call's. */
    *out = c->f;
    if (sbx__context_post(p->ctx, pcall_run, c) < 0) {
        *out = NULL;
        sbx_future_free(c->f);
        pcall_finish(c, SBX_ENOMEM, NULL, NULL);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    return SBX_OK;
}

/* The blocking form: submit, wait, take the string (or nothing). */
static int pcall_sync(const char *fn, sbx_provider *p, enum pcall_kind kind, const char *a,
                      const char *b, const char *c3, int flag, char **out, sbx_error **err)
{
    if (sbx__on_any_loop())
        return sbx__set_error(err, SBX_ESTATE,
                              "%s() is blocking; use %s_async() in code that runs on the sbx "
                              "loop instead.",
                              fn, fn);
    sbx_future *f = NULL;
    int rc = pcall_submit(p, kind, a, b, c3, flag, &f, err);
    if (rc < 0)
        return rc;
    rc = sbx_future_wait(f, -1, err);
    if (rc == SBX_OK) {
        if (kind == PC_STOP || kind == PC_IMAGE_REMOVE || kind == PC_IMAGE_TAG) {
            rc = sbx_future_code(f, err);
        } else {
            char *s = NULL;
            rc = sbx_future_take_string(f, &s, err);
            if (rc == SBX_OK && out)
                *out = s;
            else
                free(s);
        }
    }
    sbx_future_free(f);
    return rc;
}

int sbx_provider_list_async(sbx_provider *p, const char *filter_json, sbx_future **out,
                            sbx_error **err)
{
    int rc = check_object_arg("the list filter", filter_json, err);
    return rc < 0 ? rc : pcall_submit(p, PC_LIST, filter_json, NULL, NULL, 0, out, err);
}

int sbx_provider_list(sbx_provider *p, const char *filter_json, char **json_out, sbx_error **err)
{
    int rc = check_object_arg("the list filter", filter_json, err);
    if (rc == SBX_OK && !json_out)
        rc = sbx__set_error(err, SBX_EINVAL, "sbx_provider_list: json_out is required");
    return rc < 0 ? rc
                  : pcall_sync("sbx_provider_list", p, PC_LIST, filter_json, NULL, NULL, 0,
                               json_out, err);
}

static int check_id(const char *what, const char *id, sbx_error **err)
{
    if (!id || !*id)
        return sbx__set_error(err, SBX_EINVAL, "%s: a non-empty id is required", what);
    if (strlen(id) > 256 || strchr(id, '/') || strchr(id, '\n') || !strcmp(id, ".") ||
        !strcmp(id, ".."))
        return sbx__set_error(err, SBX_EINVAL,
                              "%s: '%.64s' is not a box id (no '/', '.', '..', newlines; at "
                              "most 256 bytes)",
                              what, id);
    return SBX_OK;
}

int sbx_provider_stop_box_async(sbx_provider *p, const char *id, sbx_future **out,
                                sbx_error **err)
{
    int rc = check_id("sbx_provider_stop_box", id, err);
    return rc < 0 ? rc : pcall_submit(p, PC_STOP, id, NULL, NULL, 0, out, err);
}

int sbx_provider_stop_box(sbx_provider *p, const char *id, sbx_error **err)
{
    int rc = check_id("sbx_provider_stop_box", id, err);
    return rc < 0 ? rc
                  : pcall_sync("sbx_provider_stop_box", p, PC_STOP, id, NULL, NULL, 0, NULL,
                               err);
}

int sbx_provider_gc_async(sbx_provider *p, const char *opts_json, sbx_future **out,
                          sbx_error **err)
{
    int rc = check_object_arg("the gc options", opts_json, err);
    return rc < 0 ? rc : pcall_submit(p, PC_GC, opts_json, NULL, NULL, 0, out, err);
}

int sbx_provider_gc(sbx_provider *p, const char *opts_json, char **removed_json_out,
                    sbx_error **err)
{
    int rc = check_object_arg("the gc options", opts_json, err);
    return rc < 0 ? rc
                  : pcall_sync("sbx_provider_gc", p, PC_GC, opts_json, NULL, NULL, 0,
                               removed_json_out, err);
}

int sbx_provider_image_list(sbx_provider *p, char **json_out, sbx_error **err)
{
    if (!json_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_provider_image_list: json_out is required");
    return pcall_sync("sbx_provider_image_list", p, PC_IMAGE_LIST, NULL, NULL, NULL, 0, json_out,
                      err);
}

int sbx_provider_image_import(sbx_provider *p, const char *name, const char *source,
                              const char *opts_json, char **json_out, sbx_error **err)
{
    if (!name || !*name || !source || !*source)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_provider_image_import: a name and a source are required");
    int rc = check_object_arg("the import options", opts_json, err);
    return rc < 0 ? rc
                  : pcall_sync("sbx_provider_image_import", p, PC_IMAGE_IMPORT, name, source,
                               opts_json, 0, json_out, err);
}

int sbx_provider_image_import_async(sbx_provider *p, const char *name, const char *source,
                                    const char *opts_json, sbx_future **out, sbx_error **err)
{
    if (!name || !*name || !source || !*source)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_provider_image_import: a name and a source are required");
    int rc = check_object_arg("the import options", opts_json, err);
    return rc < 0 ? rc
                  : pcall_submit(p, PC_IMAGE_IMPORT, name, source, opts_json, 0, out, err);
}

int sbx_provider_image_pull(sbx_provider *p, const char *ref, const char *opts_json,
                            char **json_out, sbx_error **err)
{
    if (!ref || !*ref)
        return sbx__set_error(err, SBX_EINVAL, "sbx_provider_image_pull: a reference is required");
    int rc = check_object_arg("the pull options", opts_json, err);
    return rc < 0 ? rc
                  : pcall_sync("sbx_provider_image_pull", p, PC_IMAGE_PULL, ref, NULL, opts_json,
                               0, json_out, err);
}

int sbx_provider_image_pull_async(sbx_provider *p, const char *ref, const char *opts_json,
                                  sbx_future **out, sbx_error **err)
{
    if (!ref || !*ref)
        return sbx__set_error(err, SBX_EINVAL, "sbx_provider_image_pull: a reference is required");
    int rc = check_object_arg("the pull options", opts_json, err);
    return rc < 0 ? rc : pcall_submit(p, PC_IMAGE_PULL, ref, NULL, opts_json, 0, out, err);
}

int sbx_provider_image_remove(sbx_provider *p, const char *name, int force, sbx_error **err)
{
    if (!name || !*name)
        return sbx__set_error(err, SBX_EINVAL, "sbx_provider_image_remove: a name is required");
    return pcall_sync("sbx_provider_image_remove", p, PC_IMAGE_REMOVE, name, NULL, NULL, force,
                      NULL, err);
}

int sbx_provider_image_inspect(sbx_provider *p, const char *name, char **json_out,
                               sbx_error **err)
{
    if (!name || !*name || !json_out)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_provider_image_inspect: a name and json_out are required");
    return pcall_sync("sbx_provider_image_inspect", p, PC_IMAGE_INSPECT, name, NULL, NULL, 0,
                      json_out, err);
}

int sbx_provider_image_tag(sbx_provider *p, const char *src, const char *name, sbx_error **err)
{
    if (!src || !*src || !name || !*name)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_provider_image_tag: an image and a new name are required");
    return pcall_sync("sbx_provider_image_tag", p, PC_IMAGE_TAG, src, name, NULL, 0, NULL, err);
}

int sbx_provider_image_prune(sbx_provider *p, int dry_run, char **removed_json_out,
                             sbx_error **err)
{
    return pcall_sync("sbx_provider_image_prune", p, PC_IMAGE_PRUNE,
                      dry_run ? "{\"dry_run\":true}" : "{}", NULL, NULL, 0, removed_json_out, err);
}

/* [img-commit] */
int sbx_provider_image_commit(sbx_provider *p, const char *box_id, const char *name,
                              const char *opts_json, char **json_out, sbx_error **err)
{
    if (!box_id || !*box_id || !name || !*name)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_provider_image_commit: a box id and an image name are "
                              "required");
    int rc = check_object_arg("the commit options", opts_json, err);
    if (rc < 0)
        return rc;
    return pcall_sync("sbx_provider_image_commit", p, PC_IMAGE_COMMIT, box_id, name,
                      opts_json ? opts_json : "{}", 0, json_out, err);
}

/* --- capabilities ---------------------------------------------------------- */

unsigned long long sbx__provider_caps(const sbx_provider *p)
{
    const struct sbx_provider_ops *o = p->ops;
    /*
     * What a table shows is read from it (a declared bit whose functions are
     * missing is not usable, so it is dropped); the rest is as declared.
     */
    const unsigned long long shown = SBX_CAP_ENDPOINT | SBX_CAP_CONNECT | SBX_CAP_LIST |
                                     SBX_CAP_STOP_ID | SBX_CAP_GC | SBX_CAP_IMAGES |
                                     SBX_CAP_PAUSE;
    unsigned long long declared =
        o->capabilities_of ? o->capabilities_of(p->state) : o->capabilities;
    unsigned long long caps = declared & ~shown;
    if (o->endpoint)
        caps |= SBX_CAP_ENDPOINT;
    if (o->serialize && o->connect)
        caps |= SBX_CAP_CONNECT;
    if (o->list)
        caps |= SBX_CAP_LIST;
    if (o->stop_id)
        caps |= SBX_CAP_STOP_ID;
    if (o->gc)
        caps |= SBX_CAP_GC;
    if (o->image_list && o->image_remove)
        caps |= SBX_CAP_IMAGES;
    /* Terminals: a provider that opens them itself has them (an agent's are declared). */
    if (o->pty_open)
        caps |= SBX_CAP_PTY;
    if (o->pause && o->resume)
        caps |= SBX_CAP_PAUSE;
    return caps;
}

int sbx_provider_supports(const sbx_provider *p, const char *cap)
{
    static const struct {
        const char *name;
        unsigned long long flag;
    } names[] = {
        { "endpoint", SBX_CAP_ENDPOINT },   { "connect", SBX_CAP_CONNECT },
        { "serialize", SBX_CAP_CONNECT },   { "pty", SBX_CAP_PTY },
        { "list", SBX_CAP_LIST },           { "stop", SBX_CAP_STOP_ID },
        { "gc", SBX_CAP_GC },               { "images", SBX_CAP_IMAGES },
        { "pause", SBX_CAP_PAUSE },         { "snapshot", SBX_CAP_SNAPSHOT },
        { "network", SBX_CAP_NETWORK },     { "port-forward", SBX_CAP_PORT_FORWARD },
        { "shared-storage", SBX_CAP_SHARED_STORAGE },
        { "exec-stream", SBX_CAP_EXEC_STREAM }, { "agent", SBX_CAP_AGENT },
    };
    if (!p || !cap)
        return 0;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(names); i++)
        if (!strcmp(names[i].name, cap))
            return (sbx__provider_caps(p) & names[i].flag) != 0;
    return 0;
}
