/*
 * What the remote kit's stream readers (sse.c, ndjson.c, envelope.c) share:
 * once a reader fails or its callback stops it, every later call answers
 * the same, so a provider that ignores one return value still cannot feed
 * a broken stream on as if it were whole.
 */
#ifndef SBX_REMOTE_LATCH_H
#define SBX_REMOTE_LATCH_H

#include "core/internal.h"

#include <stdio.h>

typedef struct {
    sbx_error *failed; /* the first error; each later call gets a copy */
    int stop;          /* the non-zero value a callback stopped the reader with */
    bool ended;        /* _end was called */
    bool in_cb;        /* a callback is running: feeding from it would re-enter */
} sbx_latch;

/*
 * The checks at the top of a reader's _feed (feeding) or _end: re-entry
 * from a callback and a feed after the end are misuse (SBX_EINVAL, the
 * reader unchanged); an earlier error or stop is answered again. Returns 0
 * when the call may go on.
 */
static inline int sbx__latch_enter(const sbx_latch *l, const char *fn, bool feeding,
                                   sbx_error **err)
{
    if (l->in_cb)
        return sbx__set_error(err, SBX_EINVAL,
                              "%s called from the reader's own callback: return non-zero from "
                              "the callback to stop the reader instead",
                              fn);
    if (l->failed) {
        sbx__fail(err, sbx_error_copy(l->failed));
        return sbx_error_code(l->failed);
    }
    if (l->stop)
        return l->stop;
    if (feeding && l->ended)
        return sbx__set_error(err, SBX_EINVAL, "%s after the stream was ended", fn);
    return 0;
}

/* Records the reader's first failure and gives the caller a copy. Returns its code. */
static inline __attribute__((format(printf, 4, 5))) int
sbx__latch_fail(sbx_latch *l, sbx_error **err, int code, const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&msg, fmt, ap);
    va_end(ap);
    sbx_error_free(l->failed);
    l->failed = sbx_error_new(code, "%s", n >= 0 ? msg : sbx_strerror(code));
    if (n >= 0)
        free(msg);
    sbx__fail(err, sbx_error_copy(l->failed));
    return sbx_error_code(l->failed);
}

/* Records a callback's return value: non-zero stops the reader. Returns it. */
static inline int sbx__latch_stop(sbx_latch *l, int rc)
{
    if (rc)
        l->stop = rc;
    return rc;
}

static inline void sbx__latch_free(sbx_latch *l)
{
    sbx_error_free(l->failed);
    l->failed = NULL;
}

#endif
