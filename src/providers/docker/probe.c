/* The docker provider's readiness probe (the reference's probe section), over the agent. */
#include "providers/docker/docker.h"

#include <sbx/box.h>

#include <time.h>
#include <uv.h>

/*
 * The reference's readiness probe (providers-local.md §0), run through the
 * agent once it said hello: the command until it passes stable_count times
 * in a row; without a deadline one failure is fatal, with one it retries
 * until the deadline. A failure ends the box (container and record) and
 * completes the create with SBX_EVERIFY. Loop thread.
 */
struct probe {
    struct docker *d;
    sbx_op *op; /* the create */
    struct dbox *b;
    sbx_exec_opts *opts;
    int passed;
    double deadline; /* monotonic seconds; 0: none */
    char *detail;    /* the last failure */
    uv_timer_t timer;
    bool timer_on;
    sbx_error *err; /* the failure being reported, while the box is ended */
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void probe_free_cb(uv_handle_t *h)
{
    free(h->data);
}

static void probe_free(struct probe *pr)
{
    sbx_exec_opts_free(pr->opts);
    free(pr->detail);
    sbx__dk_box_free(pr->b);
    sbx_error_free(pr->err);
    if (pr->timer_on) {
        pr->timer.data = pr;
        uv_close((uv_handle_t *)&pr->timer, probe_free_cb);
    } else {
        free(pr);
    }
}

static void probe_failed_closed(int code, sbx_error *err, void *value, void *data)
{
    (void)code;
    (void)value;
    struct probe *pr = data;
    if (err)
        sbx_log(SBX_LOG_WARNING, "docker: ending box %s after its failed probe: %s", pr->b->id,
                sbx_error_message(err));
    sbx_error_free(err);
    sbx_op *op = pr->op;
    sbx_error *e = pr->err;
    pr->err = NULL;
    probe_free(pr);
    sbx_op_complete(op, sbx_error_code(e), e, NULL);
}

/* Ends the box (the kit's close: container and record), then fails the create with `e`. */
static void probe_fail(struct probe *pr, sbx_error *e)
{
    pr->err = e;
    sbx_op *inner = sbx__op_new(sbx__op_provider(pr->op), probe_failed_closed, pr);
    if (!inner) {
        probe_failed_closed(SBX_ENOMEM, NULL, NULL, pr);
        return;
    }
    sbx_box_agent *a = pr->b->agent;
    pr->b->agent = NULL;
    sbx_box_op_close(inner, pr->d->store, a, pr->b->id);
}

static void probe_attempt(struct probe *pr);

static void probe_timer(uv_timer_t *t)
{
    probe_attempt(t->data);
}

static void probe_done(int code, sbx_error *err, void *value, void *data)
{
    struct probe *pr = data;
    sbx_exec_result *r = value;
    const char *want = pr->d->cfg.probe_expected;
    const char *out = r ? sbx_exec_result_stdout(r, NULL) : NULL;
    bool pass = code == SBX_OK && r && sbx_exec_result_return_code(r) == 0 &&
                (!want || strstr(out ? out : "", want));
    if (pass) {
        pr->passed++;
    } else {
        pr->passed = 0;
        char *stderr_text = r && sbx_exec_result_stderr(r, NULL)
                                ? strdup(sbx_exec_result_stderr(r, NULL))
                                : strdup(err ? sbx_error_message(err) : "");
        if (stderr_text) {
            /* Python's str.strip(), as the reference's detail shows it. */
            size_t n = strlen(stderr_text);
            while (n && strchr(" \t\r\n\v\f", stderr_text[n - 1]))
                stderr_text[--n] = 0;
            size_t lead = strspn(stderr_text, " \t\r\n\v\f");
            memmove(stderr_text, stderr_text + lead, n - lead + 1);
        }
        _cleanup_free_ char *rep = stderr_text ? sbx__repr(stderr_text) : NULL;
        free(stderr_text);
        free(pr->detail);
        pr->detail = sbx__printf("return_code=%d, stderr=%s",
                                 r ? sbx_exec_result_return_code(r) : 125, rep ? rep : "''");
    }
    sbx_exec_result_free(r);
    sbx_error_free(err);
    if (pass && pr->passed >= pr->d->cfg.probe_stable_count) {
        sbx_op *op = pr->op;
        struct dbox *b = pr->b;
        pr->b = NULL;
        probe_free(pr);
        sbx_op_complete(op, SBX_OK, NULL, b);
        return;
    }
    if (sbx_op_cancelled(pr->op)) {
        probe_fail(pr, sbx_error_new(SBX_ECANCELED, "create cancelled"));
        return;
    }
    const char *detail = pr->detail ? pr->detail : "no probe attempt completed";
    if (!pass && pr->deadline <= 0) {
        probe_fail(pr, sbx_error_new(SBX_EVERIFY, "sandbox '%s' failed readiness probe: %s",
                                     pr->b->id, detail));
        return;
    }
    if (pr->deadline > 0 && mono() >= pr->deadline) {
        char g[32];
        sbx__fmt_g(pr->d->cfg.probe_deadline_s, g, sizeof(g));
        probe_fail(pr, sbx_error_new(SBX_EVERIFY,
                                     "sandbox '%s' did not pass readiness probe within %ss: %s",
                                     pr->b->id, g, detail));
        return;
    }
    double delay = pr->d->cfg.probe_stable_delay_s;
    if (delay > 0) {
        if (!pr->timer_on) {
            uv_timer_init(sbx_op_loop(pr->op), &pr->timer);
            pr->timer.data = pr;
            pr->timer_on = true;
        }
        uv_timer_start(&pr->timer, probe_timer, (uint64_t)(delay * 1000.0), 0);
        return;
    }
    probe_attempt(pr);
}

static void probe_attempt(struct probe *pr)
{
    sbx_op *inner = sbx__op_new(sbx__op_provider(pr->op), probe_done, pr);
    if (!inner) {
        probe_fail(pr, sbx_error_new(SBX_ENOMEM, "out of memory"));
        return;
    }
    sbx__dk_box_exec(inner, pr->d, pr->b, pr->d->cfg.probe_command, pr->opts);
}

void sbx__dk_probe_start(struct docker *d, sbx_op *op, struct dbox *b)
{
    struct probe *pr = calloc(1, sizeof(*pr));
    sbx_exec_opts *o = pr ? sbx_exec_opts_new() : NULL;
    if (!o) {
        free(pr);
        /* Out of memory: the container and record stay for gc, as in dk_created. */
        sbx__dk_box_free(b);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    sbx_exec_opts_set_timeout(o, d->cfg.probe_timeout_s);
    *pr = (struct probe){.d = d, .op = op, .b = b, .opts = o};
    if (d->cfg.probe_deadline_s > 0)
        pr->deadline = mono() + d->cfg.probe_deadline_s;
    probe_attempt(pr);
}
