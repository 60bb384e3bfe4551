/* Provider instances: a vtable, its state, and the context that runs it. */
#include "internal.h"

#include <stdatomic.h>

int sbx_provider_new(const char *config, sbx_provider **out, sbx_error **err)
{
    return sbx_provider_new_in(NULL, config, out, err);
}

int sbx_provider_new_in(sbx_context *ctx, const char *config, sbx_provider **out,
                        sbx_error **err)
{
    if (!out)
        return sbx__set_error(err, SBX_EINVAL, "out is NULL");
    _cleanup_json_ json_t *root = NULL;
    int rc = sbx__parse_config_text(config ? config : "", &root, err);
    if (rc < 0)
        return rc;
    if (!json_is_object(root) || json_object_size(root) != 1)
        return sbx__set_error(err, SBX_EINVAL,
                              "Sandbox provider config must contain exactly one provider name");
    const char *name = json_object_iter_key(json_object_iter(root));
    json_t *value = json_object_iter_value(json_object_iter(root));
    if (!name || !*name)
        return sbx__set_error(err, SBX_EINVAL, "Sandbox provider name must be a non-empty string");
    if (!json_is_null(value) && !json_is_object(value)) {
        _cleanup_free_ char *r = sbx__repr(name);
        return sbx__set_error(err, SBX_ETYPE, "Sandbox provider %s config must be a mapping", r);
    }
    const struct sbx_provider_ops *ops;
    if ((rc = sbx__registry_find(name, &ops, err)) < 0)
        return rc;
    _cleanup_free_ char *cfg = json_is_null(value) ? strdup("{}") : sbx__json_dump(value);
    if (!cfg)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");

    sbx_provider *p = calloc(1, sizeof(*p));
    if (!p || !(p->name = strdup(name))) {
        free(p);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    p->ops = ops;
    atomic_init(&p->refs, 1);
    if (ctx) {
        sbx__context_ref(ctx);
        p->ctx = ctx;
    } else if ((rc = sbx__context_default(&p->ctx, err)) < 0) {
        free(p->name);
        free(p);
        return rc;
    }
    if (ops->init) {
        sbx_error *e = NULL;
        rc = ops->init(cfg, &p->state, &e);
        if (rc < 0) {
            if (!e)
                e = sbx_error_new(rc, "provider '%s' failed to initialise", name);
            sbx__error_set_provider(e, name);
            sbx__context_unref(p->ctx);
            free(p->name);
            free(p);
            return sbx__fail(err, e);
        }
    }
    *out = p;
    return SBX_OK;
}

void sbx__provider_ref(sbx_provider *p) { atomic_fetch_add(&p->refs, 1); }

void sbx__provider_unref(sbx_provider *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    if (p->ops->release)
        p->ops->release(p->state);
    sbx_context *ctx = p->ctx;
    free(p->name);
    free(p);
    sbx__context_unref(ctx);
}

void sbx_provider_free(sbx_provider *p)
{
    if (!p)
        return;
    /*
     * Completions already queued on the loop still hold references. Drain
     * them, so that when this returns off the loop the provider (and the
     * context, if it was the last user) is really gone: no thread or fd lingers.
     */
    sbx_context *ctx = p->ctx;
    sbx__context_ref(ctx);
    sbx__provider_unref(p);
    /* Not on any loop thread: two loops draining each other would deadlock. */
    if (!sbx__on_any_loop())
        sbx__context_drain(ctx);
    sbx__context_unref(ctx);
}

const char *sbx_provider_name(const sbx_provider *p) { return p ? p->name : NULL; }

