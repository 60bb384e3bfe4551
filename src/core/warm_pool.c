/*
 * Warm pools (docs/scale.md, "Warm pools"): boxes of one spec started
 * ahead of need, so a create is a claim of one already running.
 *
 * The pool keeps `size` boxes ready or starting. Each is an ordinary box
 * started with sbx_sandbox_start_async: it counts against every limit,
 * carries the spec's labels and TTL, and `sbx gc` collects it like any
 * other. A claim hands out the oldest started one and starts its
 * replacement; with none started yet it waits for the oldest still
 * starting (it began earlier than a fresh one would), and only when that
 * one failed does it start one of its own. Nothing runs on the loop
 * thread: a start's future is looked at from the claiming thread, so the
 * pool needs no callback and no lock of the loop's.
 */
#include "core/internal.h"

#include <pthread.h>
#include <time.h>

struct warm_box {
    sbx_sandbox *sb;
    sbx_future *f; /* the start; NULL once it has completed */
    bool failed;   /* it completed with an error: removed at the next claim */
    double started_at;
};

struct sbx_warm_pool {
    sbx_provider *p;
    sbx_spec *spec;
    unsigned size;
    pthread_mutex_t lock;
    struct warm_box *boxes; /* oldest first; at most `size` */
    unsigned n;
    unsigned long long claims, hits; /* hits: claims served by a started box */
    sbx_error *last_error;           /* the last failed start, for sbx_warm_pool_last_error */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Starts one box at the end of the list. Caller holds the lock. */
static void start_one(sbx_warm_pool *wp)
{
    sbx_sandbox *sb = NULL;
    sbx_future *f = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_new(wp->p, wp->spec, &sb, &e) < 0 || sbx_sandbox_start_async(sb, NULL, &f, &e) < 0) {
        sbx_sandbox_free(sb);
        sbx_error_free(wp->last_error);
        wp->last_error = e;
        return;
    }
    wp->boxes[wp->n++] = (struct warm_box){ .sb = sb, .f = f, .started_at = now_s() };
}

/* Removes entry i, keeping the order. Caller holds the lock. */
static struct warm_box take_at(sbx_warm_pool *wp, unsigned i)
{
    struct warm_box b = wp->boxes[i];
    memmove(&wp->boxes[i], &wp->boxes[i + 1], (wp->n - i - 1) * sizeof(*wp->boxes));
    wp->n--;
    return b;
}

enum warm_state { WARM_READY, WARM_STARTING, WARM_FAILED };

/*
 * Looks at box i's start: a success clears its future, a failure keeps its
 * error and leaves the box for the caller to remove. Caller holds the lock.
 */
static enum warm_state settle(sbx_warm_pool *wp, unsigned i)
{
    struct warm_box *b = &wp->boxes[i];
    if (!b->f)
        return b->failed ? WARM_FAILED : WARM_READY;
    if (!sbx_future_done(b->f))
        return WARM_STARTING;
    sbx_error *e = NULL;
    int rc = sbx_future_code(b->f, &e);
    sbx_future_free(b->f);
    b->f = NULL;
    if (rc == SBX_OK) {
        sbx_error_free(e);
        return WARM_READY;
    }
    sbx_error_free(wp->last_error);
    wp->last_error = e;
    b->failed = true;
    return WARM_FAILED;
}

/*
 * A box kept past half its TTL is not handed out: the caller would get a
 * box near its end. TTL counts from the start, not the claim.
 */
static bool too_old(const sbx_warm_pool *wp, const struct warm_box *b, double now)
{
    double ttl = wp->spec->ttl_s;
    return ttl > 0 && now - b->started_at > ttl / 2;
}

int sbx_warm_pool_new(sbx_provider *p, const sbx_spec *spec, unsigned size, sbx_warm_pool **out,
                      sbx_error **err)
{
    if (!p || !out)
        return sbx__set_error(err, SBX_EINVAL, "warm pool: a provider and out are needed");
    if (size < 1 || size > 4096)
        return sbx__set_error(err, SBX_EINVAL,
                              "warm pool: size %u is out of range: keep 1 to 4096 boxes started",
                              size);
    sbx_warm_pool *wp = calloc(1, sizeof(*wp));
    if (!wp || !(wp->boxes = calloc(size, sizeof(*wp->boxes))) ||
        !(wp->spec = spec ? sbx_spec_copy(spec) : sbx_spec_new())) {
        if (wp)
            free(wp->boxes);
        free(wp);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    sbx__provider_ref(p);
    wp->p = p;
    wp->size = size;
    pthread_mutex_init(&wp->lock, NULL);
    pthread_mutex_lock(&wp->lock);
    for (unsigned i = 0; i < size; i++)
        start_one(wp);
    bool none = wp->n == 0;
    pthread_mutex_unlock(&wp->lock);
    if (none) {
        /* Not one start could even be asked for: that is the caller's error now. */
        int rc = sbx__fail(err, sbx_error_copy(wp->last_error));
        sbx_warm_pool_free(wp);
        return rc < 0 ? rc : SBX_EPROVIDER;
    }
    *out = wp;
    return SBX_OK;
}

int sbx_warm_pool_claim(sbx_warm_pool *wp, sbx_sandbox **out, sbx_error **err)
{
    if (!wp || !out)
        return sbx__set_error(err, SBX_EINVAL, "warm pool: a pool and out are needed");
    *out = NULL;
    pthread_mutex_lock(&wp->lock);
    wp->claims++;
    double now = now_s();
    sbx_sandbox *got = NULL;
    /* Failed and stale boxes leave the list here and are freed (stopped) outside the lock. */
    sbx_sandbox **drop = calloc(wp->n ? wp->n : 1, sizeof(*drop));
    unsigned n_drop = 0;
    for (unsigned i = 0; i < wp->n && !got;) {
        enum warm_state st = settle(wp, i);
        if (st == WARM_STARTING) {
            i++;
            continue;
        }
        struct warm_box b = take_at(wp, i);
        if (st == WARM_READY && !too_old(wp, &b, now))
            got = b.sb;
        else if (drop)
            drop[n_drop++] = b.sb;
        else
            sbx_sandbox_free(b.sb);
    }
    /* The replacement (and any a failed or stale box left missing). */
    while (wp->n < wp->size) {
        unsigned before = wp->n;
        start_one(wp);
        if (wp->n == before)
            break;
    }
    if (got)
        wp->hits++;
    pthread_mutex_unlock(&wp->lock);
    for (unsigned i = 0; i < n_drop; i++)
        sbx_sandbox_free(drop[i]);
    free(drop);
    if (got) {
        *out = got;
        return SBX_OK;
    }
    pthread_mutex_lock(&wp->lock);
    /* None started yet: wait for the oldest one starting, outside the lock. */
    struct warm_box oldest = { 0 };
    if (wp->n > 0 && wp->boxes[0].f)
        oldest = take_at(wp, 0);
    if (oldest.sb)
        start_one(wp);
    pthread_mutex_unlock(&wp->lock);
    if (oldest.sb) {
        sbx_error *e = NULL;
        int rc = sbx_future_wait(oldest.f, -1, &e);
        sbx_future_free(oldest.f);
        if (rc == SBX_OK) {
            *out = oldest.sb;
            return SBX_OK;
        }
        sbx_sandbox_free(oldest.sb);
        pthread_mutex_lock(&wp->lock);
        sbx_error_free(wp->last_error);
        wp->last_error = e;
        pthread_mutex_unlock(&wp->lock);
    }
    /* One of the claimer's own, as sbx_sandbox_start: its error is the caller's. */
    sbx_sandbox *sb = NULL;
    int rc = sbx_sandbox_new(wp->p, wp->spec, &sb, err);
    if (rc == SBX_OK && (rc = sbx_sandbox_start(sb, NULL, err)) < 0) {
        sbx_sandbox_free(sb);
        sb = NULL;
    }
    *out = sb;
    return rc;
}

int sbx_warm_pool_stats(sbx_warm_pool *wp, unsigned *ready, unsigned *starting,
                        unsigned long long *claims, unsigned long long *hits)
{
    if (!wp)
        return SBX_EINVAL;
    pthread_mutex_lock(&wp->lock);
    unsigned r = 0, s = 0;
    for (unsigned i = 0; i < wp->n; i++) {
        enum warm_state st = settle(wp, i);
        r += st == WARM_READY;
        s += st == WARM_STARTING;
    }
    if (ready)
        *ready = r;
    if (starting)
        *starting = s;
    if (claims)
        *claims = wp->claims;
    if (hits)
        *hits = wp->hits;
    pthread_mutex_unlock(&wp->lock);
    return SBX_OK;
}

sbx_error *sbx_warm_pool_last_error(sbx_warm_pool *wp)
{
    if (!wp)
        return NULL;
    pthread_mutex_lock(&wp->lock);
    sbx_error *e = wp->last_error ? sbx_error_copy(wp->last_error) : NULL;
    pthread_mutex_unlock(&wp->lock);
    return e;
}

void sbx_warm_pool_free(sbx_warm_pool *wp)
{
    if (!wp)
        return;
    /* Every box still here stops, at once: starts are cancelled, then all stop together. */
    for (unsigned i = 0; i < wp->n; i++)
        if (wp->boxes[i].f)
            sbx_future_cancel(wp->boxes[i].f);
    sbx_future **stops = calloc(wp->n ? wp->n : 1, sizeof(*stops));
    for (unsigned i = 0; i < wp->n; i++) {
        struct warm_box *b = &wp->boxes[i];
        if (b->f) {
            sbx_future_wait(b->f, -1, NULL);
            sbx_future_free(b->f);
        }
        if (stops && sbx_sandbox_stop_async(b->sb, &stops[i], NULL) < 0)
            stops[i] = NULL;
    }
    for (unsigned i = 0; i < wp->n; i++) {
        if (stops && stops[i]) {
            sbx_future_wait(stops[i], -1, NULL);
            sbx_future_free(stops[i]);
        }
        sbx_sandbox_free(wp->boxes[i].sb);
    }
    free(stops);
    sbx_error_free(wp->last_error);
    sbx_spec_free(wp->spec);
    sbx__provider_unref(wp->p);
    pthread_mutex_destroy(&wp->lock);
    free(wp->boxes);
    free(wp);
}
