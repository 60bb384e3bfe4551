/*
 * A minimal provider for the registry's plugin tests, written only against
 * the public headers as an out-of-tree plugin would be. A plugin source
 * defines PLUGIN_NAME (the provider name) and PLUGIN_TAG (echoed by exec, so
 * a test can tell which file's provider ran), then includes this file.
 *
 * Plugins are built with -fvisibility=hidden like the library, so the table
 * is marked SBX_EXPORT: dlsym() only finds exported symbols.
 */
#include <sbx/provider.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef PLUGIN_ABI
#define PLUGIN_ABI SBX_PROVIDER_ABI_VERSION
#endif

struct plug_box {
    char id[64];
};

static int plug_init(const char *config_json, void **state, sbx_error **err)
{
#ifdef PLUGIN_INIT_FAILS
    *err = sbx_error_new(SBX_EPROVIDER, "%s", PLUGIN_INIT_FAILS);
    (void)config_json;
    (void)state;
    return SBX_EPROVIDER;
#else
    (void)err;
    *state = strdup(config_json);
    return *state ? SBX_OK : SBX_ENOMEM;
#endif
}

static void plug_release(void *state) { free(state); }

static void plug_create(sbx_op *op, void *state, const sbx_spec *spec)
{
    (void)state;
    (void)spec;
    struct plug_box *b = calloc(1, sizeof(*b));
    if (!b) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    snprintf(b->id, sizeof(b->id), "%s-box", PLUGIN_NAME);
    sbx_op_complete(op, SBX_OK, NULL, b);
}

static void plug_exec(sbx_op *op, void *state, void *box, const char *command,
                      const sbx_exec_opts *opts)
{
    (void)box;
    (void)opts;
    char out[512];
    int n = snprintf(out, sizeof(out), "%s ran %s with %s", PLUGIN_TAG, command,
                     (const char *)state);
    sbx_exec_result *r = NULL;
    int rc = sbx_exec_result_new(out, (size_t)n, NULL, 0, 0, NULL, &r);
    sbx_op_complete(op, rc, NULL, r);
}

static void plug_unsupported(sbx_op *op)
{
    sbx_op_complete(op, SBX_ENOTSUP,
                    sbx_error_new(SBX_ENOTSUP, "the %s test plugin moves no files", PLUGIN_NAME),
                    NULL);
}

static void plug_upload(sbx_op *op, void *state, void *box, const char *l, const char *r)
{
    (void)state, (void)box, (void)l, (void)r;
    plug_unsupported(op);
}

static void plug_download(sbx_op *op, void *state, void *box, const char *r, const char *l)
{
    (void)state, (void)box, (void)l, (void)r;
    plug_unsupported(op);
}

static void plug_status(sbx_op *op, void *state, void *box)
{
    (void)state, (void)box;
    sbx_op_complete(op, SBX_OK, NULL, (void *)(intptr_t)SBX_STATUS_RUNNING);
}

static void plug_close(sbx_op *op, void *state, void *box, int owned)
{
    (void)state, (void)box, (void)owned;
    sbx_op_complete(op, SBX_OK, NULL, NULL);
}

static const char *plug_box_id(const void *box) { return ((const struct plug_box *)box)->id; }
static void plug_box_free(void *box) { free(box); }

/* The operations every table below has (the field names are ABI 1's, kept since). */
#define PLUG_OPS_FIELDS                                                                            \
    .name = PLUGIN_NAME, .init = plug_init, .release = plug_release, .create = plug_create,       \
    .exec = plug_exec, .upload_file = plug_upload, .download_file = plug_download,                \
    .status = plug_status, .close = plug_close, .box_id = plug_box_id, .box_free = plug_box_free

#ifdef PLUGIN_ABI1_TABLE
/*
 * The table exactly as ABI 1's header declared it (sbx 0.1's provider.h),
 * for a plugin built before ABI 2: the core must read no byte past it.
 */
struct plug_ops_v1 {
    int abi_version;
    const char *name;
    int (*init)(const char *, void **, sbx_error **);
    void (*release)(void *);
    void (*create)(sbx_op *, void *, const sbx_spec *);
    void (*exec)(sbx_op *, void *, void *, const char *, const sbx_exec_opts *);
    void (*upload_file)(sbx_op *, void *, void *, const char *, const char *);
    void (*download_file)(sbx_op *, void *, void *, const char *, const char *);
    void (*status)(sbx_op *, void *, void *);
    void (*close)(sbx_op *, void *, void *, int);
    const char *(*box_id)(const void *);
    void (*box_free)(void *);
    void (*endpoint)(sbx_op *, void *, void *, int);
    void (*serialize)(sbx_op *, void *, void *, const char *);
    void (*connect)(sbx_op *, void *, const char *);
};
static const struct plug_ops_v1 plug_ops_v1 = {
    .abi_version = 1,
    PLUG_OPS_FIELDS,
};
SBX_EXPORT const struct sbx_provider_ops *const sbx_plugin_providers[] = {
    (const struct sbx_provider_ops *)&plug_ops_v1, NULL
};
#elif defined(PLUGIN_ABI2_TABLE)
#include <stddef.h>
/* Never called: the core must not read past an ABI 2 table's struct_size. */
static void plug_poison_pty_open(sbx_op *op, void *state, void *box, sbx_pty_session *s)
{
    (void)op, (void)state, (void)box, (void)s;
    abort();
}
/*
 * An ABI 2 table as ABI 2's header built it: struct_size ends before
 * pty_open. The field past it holds a poison the core must never see.
 */
static const struct sbx_provider_ops plug_ops_v2 = {
    .abi_version = 2,
    .struct_size = offsetof(struct sbx_provider_ops, pty_open),
    PLUG_OPS_FIELDS,
    .pty_open = plug_poison_pty_open,
};
SBX_EXPORT const struct sbx_provider_ops *const sbx_plugin_providers[] = { &plug_ops_v2, NULL };
#else
static const struct sbx_provider_ops plug_ops = {
    .abi_version = PLUGIN_ABI,
    .struct_size = sizeof(struct sbx_provider_ops),
    PLUG_OPS_FIELDS,
};

SBX_EXPORT const struct sbx_provider_ops *const sbx_plugin_providers[] = { &plug_ops, NULL };
#endif
