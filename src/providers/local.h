/* The local provider's box records and its side of the box registry (local_boxes.c). */
#ifndef SBX_PROVIDERS_LOCAL_H
#define SBX_PROVIDERS_LOCAL_H

#include "core/internal.h"

/*
 * Where records go: `override` when set, else $SBX_STATE_DIR/local, else
 * /run/sbx/local for root, else $XDG_RUNTIME_DIR/sbx/local or
 * /tmp/sbx-UID/local. Malloc'd.
 */
SBX_INTERNAL char *sbx__local_state_dir(const char *override);

/* What a record holds about a box. */
typedef struct {
    const char *id;
    const char *workspace; /* absolute */
    bool owned_workspace;  /* allocated by sbx: stopping the box removes it */
    const char *workdir;   /* spec.workdir as given, or NULL */
    double created;        /* unix seconds */
    double expires_at;     /* unix seconds, or 0: no ttl */
    const sbx_kv *labels;  /* spec.metadata */
} sbx_local_record;

/*
 * Makes (0700) and checks `state_dir` as every private state directory is
 * (sbx__private_dir); *canonical gets its resolved path, where records go.
 * Blocks: worker threads only.
 */
SBX_INTERNAL int sbx__local_state_open(const char *state_dir, char **canonical, sbx_error **err);
/*
 * Writes box `r`'s record into `canonical_dir` (from sbx__local_state_open).
 * Blocks: worker threads only.
 */
SBX_INTERNAL int sbx__local_record_write(const char *canonical_dir, const sbx_local_record *r,
                                         sbx_error **err);
/* Forgets box `id`'s record in `canonical_dir` (none is fine). Blocks: worker threads only. */
SBX_INTERNAL void sbx__local_record_remove(const char *canonical_dir, const char *id);

/* The provider-wide operations (provider ABI 2), on the worker pool. */
SBX_INTERNAL void sbx__local_op_list(sbx_op *op, const char *state_dir, const char *filter_json);
SBX_INTERNAL void sbx__local_op_stop_id(sbx_op *op, const char *state_dir, const char *id);
SBX_INTERNAL void sbx__local_op_gc(sbx_op *op, const char *state_dir, const char *opts_json);

#endif
