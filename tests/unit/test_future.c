/*
 * sbx_future's contract, one rule per test: callbacks (registered before or
 * after completion) run once on the loop thread, never inside the call;
 * timeouts leave the future valid; results move out once; errors are copied
 * on every read; the poll descriptor is readable exactly when done.
 */
#include "common.h"
#include "tap.h"
#include "lib/box.h"

#include "core/internal.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

struct seen {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls;
    pthread_t thread;
    int wait_rc; /* sbx_future_wait on the (done) future from inside the callback */
};

#define SEEN_INIT                                                                                  \
    {                                                                                              \
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 1                               \
    }

static void seen_cb(sbx_future *f, void *data)
{
    struct seen *s = data;
    /* Waiting on a completed future is fine on the loop: it does not block. */
    int rc = sbx_future_wait(f, -1, NULL);
    pthread_mutex_lock(&s->lock);
    s->calls++;
    s->thread = pthread_self();
    s->wait_rc = rc;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static void seen_wait(struct seen *s)
{
    pthread_mutex_lock(&s->lock);
    while (!s->calls)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static void test_then_after_completion_runs_on_loop(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_sandbox *sb = fake_box(p);
    sbx_future *f = NULL;
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "exit 2", NULL, &f, NULL), SBX_OK);
    TAP_EQ_INT(sbx_future_wait(f, -1, NULL), SBX_OK);
    struct seen s = SEEN_INIT;
    TAP_EQ_INT(sbx_future_then(f, seen_cb, &s), SBX_OK);
    seen_wait(&s);
    TAP_TRUE(!pthread_equal(s.thread, pthread_self()));
    TAP_EQ_INT(s.wait_rc, SBX_OK);
    /* Once: nothing else arrives (a later exec on the same loop is a barrier). */
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "exit 0", NULL, &r, NULL), SBX_OK);
    sbx_exec_result_free(r);
    TAP_EQ_INT(s.calls, 1);
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_then_rules(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_sandbox *sb = fake_box(p);
    sbx_future *f = NULL;
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "sleep 100", NULL, &f, NULL), SBX_OK);
    struct seen s = SEEN_INIT;
    TAP_EQ_INT(sbx_future_then(f, NULL, &s), SBX_EINVAL);
    TAP_EQ_INT(sbx_future_then(NULL, seen_cb, &s), SBX_EINVAL);
    TAP_EQ_INT(sbx_future_then(f, seen_cb, &s), SBX_OK);
    TAP_EQ_INT(sbx_future_then(f, seen_cb, &s), SBX_ESTATE); /* one callback per future */
    sbx_future_cancel(f);
    seen_wait(&s);
    TAP_EQ_INT(s.wait_rc, SBX_ECANCELED);
    TAP_EQ_INT(sbx_future_code(f, NULL), SBX_ECANCELED);
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_timeout_leaves_future_valid(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_sandbox *sb = fake_box(p);
    sbx_future *f = NULL;
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "sleep 100", NULL, &f, NULL), SBX_OK);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_future_wait(f, 0, &e), SBX_ETIMEDOUT);
    TAP_CONTAINS(sbx_error_message(e), "sbx_future_cancel");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_future_code(f, &e), SBX_ESTATE);
    sbx_error_free(e);
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_future_take_exec_result(f, &r, NULL), SBX_ESTATE);
    TAP_EQ_INT(sbx_future_done(f), 0);
    sbx_future_cancel(f);
    TAP_EQ_INT(sbx_future_wait(f, -1, NULL), SBX_ECANCELED);
    TAP_EQ_INT(sbx_future_done(f), 1);
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_results_move_out_once(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_sandbox *sb = fake_box(p);
    sbx_future *f = NULL, *st = NULL;
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "exit 4", NULL, &f, NULL), SBX_OK);
    TAP_EQ_INT(sbx_future_wait(f, -1, NULL), SBX_OK);
    sbx_future_cancel(f); /* after completion: changes nothing */
    TAP_EQ_INT(sbx_future_code(f, NULL), SBX_OK);
    sbx_endpoint *ep = NULL;
    TAP_EQ_INT(sbx_future_take_endpoint(f, &ep, NULL), SBX_ETYPE);
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_future_take_exec_result(f, &r, NULL), SBX_OK);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 4);
    sbx_exec_result_free(r);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_future_take_exec_result(f, &r, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "already taken");
    sbx_error_free(e);
    /* A status is a value: it reads again. */
    TAP_EQ_INT(sbx_sandbox_status_async(sb, &st, NULL), SBX_OK);
    TAP_EQ_INT(sbx_future_wait(st, -1, NULL), SBX_OK);
    sbx_status s1 = SBX_STATUS_UNKNOWN, s2 = SBX_STATUS_UNKNOWN;
    TAP_EQ_INT(sbx_future_take_status(st, &s1, NULL), SBX_OK);
    TAP_EQ_INT(sbx_future_take_status(st, &s2, NULL), SBX_OK);
    TAP_EQ_INT(s1, SBX_STATUS_RUNNING);
    TAP_EQ_INT(s2, SBX_STATUS_RUNNING);
    sbx_future_free(f);
    sbx_future_free(st);
    sbx_future_cancel(NULL);
    sbx_future_free(NULL);
    TAP_EQ_INT(sbx_future_done(NULL), 0);
    TAP_EQ_INT(sbx_future_fd(NULL), -1);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_error_copied_on_every_read(void)
{
    sbx_provider *p = fake_provider("{\"fake\": {\"fail\": {\"exec\": \"exec broke\"}, "
                           "\"fail_code\": {\"exec\": \"EIO\"}}}");
    sbx_sandbox *sb = fake_box(p);
    sbx_future *f = NULL;
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "x", NULL, &f, NULL), SBX_OK);
    for (int i = 0; i < 3; i++) {
        sbx_error *e = NULL;
        TAP_EQ_INT(sbx_future_wait(f, -1, &e), SBX_EIO);
        TAP_CONTAINS(sbx_error_message(e), "exec broke");
        TAP_EQ_STR(sbx_error_provider(e), "fake");
        sbx_error_free(e);
        e = NULL;
        TAP_EQ_INT(sbx_future_code(f, &e), SBX_EIO);
        TAP_CONTAINS(sbx_error_message(e), "exec broke");
        sbx_error_free(e);
        e = NULL;
        sbx_exec_result *r = NULL;
        TAP_EQ_INT(sbx_future_take_exec_result(f, &r, &e), SBX_EIO);
        TAP_NULL(r);
        sbx_error_free(e);
    }
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

static void test_fd_readable_exactly_when_done(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_sandbox *sb = fake_box(p);
    sbx_future *f = NULL, *g = NULL;
    /* Made before completion: not readable until the op ends. */
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "sleep 100", NULL, &f, NULL), SBX_OK);
    int fd = sbx_future_fd(f);
    TAP_TRUE(fd >= 0);
    TAP_EQ_INT(sbx_future_fd(f), fd);
    struct pollfd pfd = {fd, POLLIN, 0};
    TAP_EQ_INT(poll(&pfd, 1, 0), 0);
    sbx_future_cancel(f);
    TAP_EQ_INT(poll(&pfd, 1, -1), 1);
    TAP_EQ_INT(sbx_future_done(f), 1);
    /* Made after completion: readable at once. */
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "exit 0", NULL, &g, NULL), SBX_OK);
    TAP_EQ_INT(sbx_future_wait(g, -1, NULL), SBX_OK);
    struct pollfd pg = {sbx_future_fd(g), POLLIN, 0};
    TAP_EQ_INT(poll(&pg, 1, 0), 1);
    sbx_future_free(f); /* closes the descriptors: the harness checks */
    sbx_future_free(g);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

TAP_MAIN(TAP(test_then_after_completion_runs_on_loop), TAP(test_then_rules),
         TAP(test_timeout_leaves_future_valid), TAP(test_results_move_out_once),
         TAP(test_error_copied_on_every_read), TAP(test_fd_readable_exactly_when_done))
