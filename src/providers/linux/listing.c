/*
 * The linux provider's side of the box registry (provider ABI 2): list,
 * stop by id and gc over the boxes of its state directory, whoever made
 * them, and its images. Each runs on the worker pool: they read records,
 * walk directories and wait for shims, none of which may block the loop.
 */
#include "providers/linux/linux.h"

#include <sys/stat.h>

struct listing_call {
    char *state_dir;
    char *store; /* the image store (NULL: <state_dir>/images) */
    char *a, *b;
    json_t *opts;
    double timeout_s;
    int flag;
    unsigned long long max_image_bytes;
    const sbx_pull_opts *registry; /* the provider's; it outlives the op */
};

static void call_free(struct listing_call *c)
{
    if (!c)
        return;
    free(c->state_dir);
    free(c->store);
    free(c->a);
    free(c->b);
    json_decref(c->opts);
    free(c);
}

static struct listing_call *call_new(const char *state_dir, const char *a, const char *b,
                                     const char *opts_json)
{
    struct listing_call *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->state_dir = strdup(state_dir);
    c->a = a ? strdup(a) : NULL;
    c->b = b ? strdup(b) : NULL;
    /* The core checked it is an object (or absent). */
    c->opts = opts_json ? json_loads(opts_json, 0, NULL) : json_object();
    if (!c->state_dir || (a && !c->a) || (b && !c->b) || !c->opts) {
        call_free(c);
        return NULL;
    }
    return c;
}

static struct listing_call *with_store(struct listing_call *c, const char *store)
{
    if (c && store && !(c->store = strdup(store))) {
        call_free(c);
        return NULL;
    }
    return c;
}

/* The labels of a filter or gc options ({"labels": {K: V}}) as a kv; false when out of memory. */
static bool labels_of(const json_t *opts, sbx_kv *kv)
{
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(opts, "labels"), k, v)
    {
        if (json_is_string(v) && sbx__kv_set(kv, k, json_string_value(v)) < 0)
            return false;
    }
    return true;
}

const char *sbx__linux_box_status(const sbx_linux_box_info *b)
{
    const sbx_linux_record *r = &b->rec;
    if (!b->shim_alive || !r->state || !strcmp(r->state, "error"))
        return "error";
    /* [svc-logs] The service ended (docker's exited): the reference's STOPPED. */
    if (!strcmp(r->state, "running") && r->service && strcmp(r->service, "running"))
        return "stopped";
    if (strcmp(r->state, "running") != 0)
        return "starting";
    /* Frozen (a commit copies it), or its agent stopped: it answers nothing now. */
    return sbx__linux_box_paused(r) ? "paused" : "running";
}

static json_t *box_json(const char *state_dir, const sbx_linux_box_info *b)
{
    const sbx_linux_record *r = &b->rec;
    /* What connect() takes to reach it: serialize()'s descriptor. */
    json_t *desc = json_pack("{s:s, s:s, s:o}", "sandbox_id", r->id, "state_dir", state_dir,
                             "workdir", r->workdir ? json_string(r->workdir) : json_null());
    json_t *o = json_pack("{s:s, s:s, s:o, s:o, s:O, s:o, s:{s:s, s:s, s:b, s:b, s:o, s:o}}", "id",
                     r->id, "status", sbx__linux_box_status(b), "created",
                     r->created > 0 ? json_real(r->created) : json_null(), "expires_at",
                     r->expires > 0 ? json_real(r->expires) : json_null(), "labels", r->metadata,
                     "image", r->image ? json_string(r->image) : json_null(), "provider",
                     "state_dir", state_dir, "box_dir", r->box_dir, "shim_alive", b->shim_alive,
                     "expired", b->expired, "hostname",
                     r->hostname ? json_string(r->hostname) : json_null(), "state",
                     r->state ? json_string(r->state) : json_null());
    /* [svc-logs] {"state": "running" | "exited" | "killed", "code": N}, or null: no service. */
    json_t *prov = json_object_get(o, "provider");
    /* [endpoint] Published ports ({port, host_ip, host_port}): what `sbx ls` shows as PORTS. */
    if (prov && r->ports)
        json_object_set(prov, "ports", r->ports);
    if (prov)
        json_object_set_new(prov, "service",
                            r->service ? json_pack("{s:s, s:i}", "state", r->service, "code",
                                                   r->service_code)
                                       : json_null());
    if (!o || !desc || json_object_set_new(o, "descriptor", desc) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void list_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_kv labels = { 0 };
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    sbx_error *e = NULL;
    int rc = labels_of(c->opts, &labels) ? SBX_OK : SBX_ENOMEM;
    if (rc == SBX_OK)
        rc = sbx__linux_list(c->state_dir, labels.len ? &labels : NULL, &boxes, &n, &e);
    json_t *arr = rc == SBX_OK ? json_array() : NULL;
    for (size_t i = 0; arr && i < n; i++) {
        json_t *b = box_json(c->state_dir, &boxes[i]);
        if (!b || json_array_append_new(arr, b) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    char *text = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    sbx__linux_list_free(boxes, n);
    sbx__kv_free(&labels);
    call_free(c);
    if (rc == SBX_OK && !text)
        rc = SBX_ENOMEM;
    sbx_op_complete(op, rc, e, text);
}

static void stop_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_error *e = NULL;
    int rc = sbx__linux_stop_box(c->state_dir, c->a, c->timeout_s, &e);
    call_free(c);
    sbx_op_complete(op, rc, e, NULL);
}

static void gc_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_kv labels = { 0 };
    char **removed = NULL;
    sbx_error *e = NULL;
    int rc = labels_of(c->opts, &labels) ? SBX_OK : SBX_ENOMEM;
    sbx_linux_gc_opts o = { .labels = labels.len ? &labels : NULL,
                            .dry_run = json_is_true(json_object_get(c->opts, "dry_run")),
                            .stop_timeout_s = c->timeout_s };
    if (rc == SBX_OK)
        rc = sbx__linux_gc(c->state_dir, &o, &removed, &e);
    /* The image store's temporaries of dead imports (state_dir's own went above). */
    if (rc == SBX_OK && c->store)
        sbx__linux_image_gc_dir(c->store, o.dry_run);
    json_t *arr = rc == SBX_OK ? json_array() : NULL;
    for (char **id = removed; arr && id && *id; id++)
        json_array_append_new(arr, json_string(*id));
    char *text = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    sbx_strv_free(removed);
    sbx__kv_free(&labels);
    call_free(c);
    if (rc == SBX_OK && !text)
        rc = SBX_ENOMEM;
    sbx_op_complete(op, rc, e, text);
}

static json_t *image_json(const sbx_linux_image_info *v)
{
    return json_pack("{s:s, s:s, s:s?, s:I, s:f}", "name", v->name, "digest", v->digest, "source",
                     v->source, "size", (json_int_t)v->size, "created", v->created);
}

static void image_list_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    sbx_error *e = NULL;
    int rc = sbx__linux_image_list(c->state_dir, c->store, &v, &n, &e);
    json_t *arr = rc == SBX_OK ? json_array() : NULL;
    for (size_t i = 0; arr && i < n; i++) {
        if (!v[i].name) /* an unnamed cache entry (a tarball used by path) */
            continue;
        json_array_append_new(arr, image_json(&v[i]));
    }
    char *text = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    sbx__linux_image_list_free(v, n);
    call_free(c);
    if (rc == SBX_OK && !text)
        rc = SBX_ENOMEM;
    sbx_op_complete(op, rc, e, text);
}

static bool import_cancelled(void *data) { return sbx_op_cancelled(data) != 0; }

static void import_progress(const char *stage, uint64_t done, uint64_t total, void *data)
{
    /* A count of layers, not bytes: for C callers of the import, not a progress bar. */
    if (!strcmp(stage, "layers"))
        return;
    sbx_op_progress(data, stage, done, total);
}

static void image_import_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_error *e = NULL;
    json_t *mb = json_object_get(c->opts, "max_bytes");
    sbx_linux_image_opts io = {
        .max_bytes = json_is_integer(mb) && json_integer_value(mb) > 0
                         ? (unsigned long long)json_integer_value(mb)
                         : c->max_image_bytes,
        .cancelled = import_cancelled,
        .progress = import_progress,
        .data = op,
    };
    int rc = sbx__linux_image_import(c->state_dir, c->store, c->a, c->b, &io, &e);
    char *text = NULL;
    if (rc == SBX_OK) {
        sbx_linux_image_info *v = NULL;
        size_t n = 0;
        json_t *found = NULL;
        if (sbx__linux_image_list(c->state_dir, c->store, &v, &n, NULL) == SBX_OK)
            for (size_t i = 0; i < n && !found; i++)
                if (v[i].name && !strcmp(v[i].name, c->a))
                    found = image_json(&v[i]);
        sbx__linux_image_list_free(v, n);
        text = found ? json_dumps(found, JSON_COMPACT) : NULL;
        json_decref(found);
        if (!text)
            rc = sbx__set_error(&e, SBX_EIO, "image %s was imported but cannot be listed", c->a);
    }
    call_free(c);
    sbx_op_complete(op, rc, e, text);
}

static void image_pull_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_error *e = NULL;
    sbx_pull_opts po = c->registry ? *c->registry : (sbx_pull_opts){0};
    const char *pf = json_string_value(json_object_get(c->opts, "platform"));
    if (pf && *pf)
        po.platform = pf;
    sbx_linux_image_opts io = {
        .max_bytes = c->max_image_bytes,
        .cancelled = import_cancelled,
        .progress = import_progress,
        .data = op,
        .registry = &po,
    };
    _cleanup_free_ char *canon = NULL;
    int rc = sbx__linux_image_pull(c->state_dir, c->store, c->a, &io, &canon, &e);
    char *text = NULL;
    if (rc == SBX_OK) {
        sbx_linux_image_info *v = NULL;
        size_t n = 0;
        json_t *found = NULL;
        if (sbx__linux_image_list(c->state_dir, c->store, &v, &n, NULL) == SBX_OK)
            for (size_t i = 0; i < n && !found; i++)
                if (v[i].name && !strcmp(v[i].name, canon))
                    found = image_json(&v[i]);
        sbx__linux_image_list_free(v, n);
        if (found)
            json_object_set_new(found, "reference", json_string(c->a));
        text = found ? json_dumps(found, JSON_COMPACT) : NULL;
        json_decref(found);
        if (!text)
            rc = sbx__set_error(&e, SBX_EIO, "image %s was pulled but cannot be listed", canon);
    }
    call_free(c);
    sbx_op_complete(op, rc, e, text);
}

static void image_remove_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_error *e = NULL;
    int rc = SBX_OK;
    if (!c->flag) {
        /* Refused while a running box was made from that name, unless forced. */
        sbx_linux_box_info *boxes = NULL;
        size_t n = 0;
        if (sbx__linux_list(c->state_dir, NULL, &boxes, &n, NULL) == SBX_OK) {
            for (size_t i = 0; i < n && rc == SBX_OK; i++)
                if (boxes[i].shim_alive && boxes[i].rec.image &&
                    !strcmp(boxes[i].rec.image, c->a))
                    rc = sbx__set_error(&e, SBX_ESTATE,
                                        "image %s is used by running box %s: stop it first, or "
                                        "force the removal",
                                        c->a, boxes[i].rec.id);
            sbx__linux_list_free(boxes, n);
        }
    }
    if (rc == SBX_OK)
        rc = sbx__linux_image_remove(c->state_dir, c->store, c->a, &e);
    call_free(c);
    sbx_op_complete(op, rc, e, NULL);
}

static void image_prune_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_error *e = NULL;
    json_t *removed = NULL;
    int rc = sbx__linux_image_prune(c->state_dir, c->store,
                                    json_is_true(json_object_get(c->opts, "dry_run")), &removed,
                                    &e);
    char *text = rc == SBX_OK ? json_dumps(removed, JSON_COMPACT) : NULL;
    json_decref(removed);
    if (rc == SBX_OK && !text)
        rc = SBX_ENOMEM;
    call_free(c);
    sbx_op_complete(op, rc, e, text);
}

static void submit(sbx_op *op, struct listing_call *c, sbx_op_work_fn fn)
{
    if (!c) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    int rc = sbx_op_run_blocking(op, fn, c);
    if (rc < 0) {
        call_free(c);
        sbx_op_complete(op, rc, NULL, NULL);
    }
}

void sbx__linux_op_list(sbx_op *op, const char *state_dir, const char *filter_json)
{
    submit(op, call_new(state_dir, NULL, NULL, filter_json), list_work);
}

void sbx__linux_op_stop_id(sbx_op *op, const char *state_dir, const char *id, double timeout_s)
{
    struct listing_call *c = call_new(state_dir, id, NULL, NULL);
    if (c)
        c->timeout_s = timeout_s;
    submit(op, c, stop_work);
}

void sbx__linux_op_gc(sbx_op *op, const char *state_dir, const char *store, const char *opts_json,
                      double timeout_s)
{
    struct listing_call *c = with_store(call_new(state_dir, NULL, NULL, opts_json), store);
    if (c)
        c->timeout_s = timeout_s;
    submit(op, c, gc_work);
}

void sbx__linux_op_image_list(sbx_op *op, const char *state_dir, const char *store)
{
    submit(op, with_store(call_new(state_dir, NULL, NULL, NULL), store), image_list_work);
}

void sbx__linux_op_image_prune(sbx_op *op, const char *state_dir, const char *store,
                               const char *opts_json)
{
    submit(op, with_store(call_new(state_dir, NULL, NULL, opts_json), store), image_prune_work);
}

void sbx__linux_op_image_import(sbx_op *op, const char *state_dir, const char *store,
                                const char *name, const char *source, const char *opts_json,
                                unsigned long long max_image_bytes)
{
    struct listing_call *c = with_store(call_new(state_dir, name, source, opts_json), store);
    if (c)
        c->max_image_bytes = max_image_bytes;
    submit(op, c, image_import_work);
}

void sbx__linux_op_image_remove(sbx_op *op, const char *state_dir, const char *store,
                                const char *name, int force)
{
    struct listing_call *c = with_store(call_new(state_dir, name, NULL, NULL), store);
    if (c)
        c->flag = force;
    submit(op, c, image_remove_work);
}

static void image_inspect_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_error *e = NULL;
    char *text = NULL;
    int rc = sbx__linux_image_inspect(c->state_dir, c->store, c->a, &text, &e);
    call_free(c);
    sbx_op_complete(op, rc, e, rc == SBX_OK ? text : NULL);
}

static void image_tag_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_error *e = NULL;
    int rc = sbx__linux_image_tag(c->state_dir, c->store, c->a, c->b, &e);
    call_free(c);
    sbx_op_complete(op, rc, e, NULL);
}

void sbx__linux_op_image_inspect(sbx_op *op, const char *state_dir, const char *store,
                                 const char *name)
{
    submit(op, with_store(call_new(state_dir, name, NULL, NULL), store), image_inspect_work);
}

void sbx__linux_op_image_tag(sbx_op *op, const char *state_dir, const char *store,
                             const char *src, const char *name)
{
    submit(op, with_store(call_new(state_dir, src, name, NULL), store), image_tag_work);
}

void sbx__linux_op_image_pull(sbx_op *op, const char *state_dir, const char *store,
                              const char *ref, const char *opts_json,
                              unsigned long long max_image_bytes, const sbx_pull_opts *registry)
{
    struct listing_call *c = with_store(call_new(state_dir, ref, NULL, opts_json), store);
    if (c) {
        c->max_image_bytes = max_image_bytes;
        c->registry = registry;
    }
    submit(op, c, image_pull_work);
}

/* [img-commit] image_commit: the work is in image_commit.c. */
static void image_commit_work(sbx_op *op, void *data)
{
    struct listing_call *c = data;
    sbx_error *e = NULL;
    char *text = NULL;
    _cleanup_free_ char *opts = json_dumps(c->opts, JSON_COMPACT);
    int rc = sbx__linux_image_commit(c->state_dir, c->store, c->a, c->b, opts,
                                     c->max_image_bytes, &text, &e);
    call_free(c);
    sbx_op_complete(op, rc, e, rc == SBX_OK ? text : NULL);
    if (rc != SBX_OK)
        free(text);
}

void sbx__linux_op_image_commit(sbx_op *op, const char *state_dir, const char *store,
                                const char *id, const char *name, const char *opts_json,
                                unsigned long long max_image_bytes)
{
    struct listing_call *c = with_store(call_new(state_dir, id, name, opts_json), store);
    if (c)
        c->max_image_bytes = max_image_bytes;
    submit(op, c, image_commit_work);
}
