/* The sandbox lifecycle against the fake provider (reference-api.md C-F). */
#include "tap.h"
#include "common.h"
#include "lib/box.h"

#include "core/internal.h"
#include "fakes/fake.h"

#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>

static sbx_spec *spec_img(const char *workdir)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "img");
    if (workdir)
        sbx_spec_set_workdir(s, workdir);
    return s;
}

static void test_start_exec_stop(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = spec_img("/work");
    sbx_sandbox *sb = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    status_is(sb, SBX_STATUS_UNKNOWN);
    TAP_NULL(sbx_sandbox_id(sb));
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, NULL), SBX_OK);
    TAP_TRUE(strncmp(sbx_sandbox_id(sb), "fake-", 5) == 0);
    status_is(sb, SBX_STATUS_RUNNING);

    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "echo hi", NULL, &r, NULL), SBX_OK);
    const char *out = sbx_exec_result_stdout(r, NULL);
    /* cwd defaults to spec.workdir, timeout to 180, env is not merged with spec.env. */
    TAP_CONTAINS(out, "\"cwd\":\"/work\"");
    TAP_CONTAINS(out, "\"timeout\":180");
    TAP_CONTAINS(out, "\"env\":{}");
    TAP_CONTAINS(out, "\"user\":null");
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_NULL(sbx_exec_result_error_type(r));
    sbx_exec_result_free(r);

    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_cwd(o, "/elsewhere");
    sbx_exec_opts_set_env(o, "A", "1");
    sbx_exec_opts_set_timeout(o, -1);
    sbx_exec_opts_set_user(o, "root");
    TAP_EQ_INT(sbx_sandbox_exec(sb, "x", o, &r, NULL), SBX_OK);
    out = sbx_exec_result_stdout(r, NULL);
    TAP_CONTAINS(out, "\"cwd\":\"/elsewhere\"");
    TAP_CONTAINS(out, "\"env\":{\"A\":\"1\"}");
    TAP_CONTAINS(out, "\"timeout\":null");
    TAP_CONTAINS(out, "\"user\":\"root\"");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);

    TAP_EQ_INT(sbx_sandbox_exec(sb, "exit 3", NULL, &r, NULL), SBX_OK);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 3);
    sbx_exec_result_free(r);

    TAP_EQ_INT(sbx_sandbox_stop(sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_stop(sb, NULL), SBX_OK); /* idempotent */
    status_is(sb, SBX_STATUS_STOPPED);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "x", NULL, &r, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "Sandbox has not been started");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "Sandbox has been stopped");
    sbx_error_free(e);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_state_errors(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, NULL, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "requires a SandboxSpec");
    sbx_error_free(e);
    e = NULL;
    sbx_exec_result *r;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "x", NULL, &r, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "has not been started");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_upload(sb, "/a", "/b", &e), SBX_ESTATE);
    sbx_error_free(e);
    e = NULL;
    sbx_spec *s = spec_img(NULL);
    TAP_EQ_INT(sbx_sandbox_start(sb, s, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, s, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "Sandbox is already started");
    sbx_error_free(e);
    sbx_spec_free(s);
    sbx_sandbox_free(sb); /* stops the box it started */
    char *log = sbx_fake_log();
    TAP_CONTAINS(log, "close:owned");
    free(log);
    sbx_provider_free(p);
}

static void test_startup_files_and_failure_closes(void)
{
    sbx_fake_log_reset();
    sbx_provider *p = fake_provider("{\"fake\": {\"fail\": {\"upload_file\": \"upload failed\"}, "
                           "\"fail_after\": {\"upload_file\": 1}}}");
    sbx_spec *s = spec_img(NULL);
    sbx_spec_add_file(s, "/a.txt", "A", 1);
    sbx_spec_add_file(s, "/b.txt", "B", 1);
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, &e), SBX_EPROVIDER);
    TAP_CONTAINS(sbx_error_message(e), "upload failed");
    sbx_error_free(e);
    char *log = sbx_fake_log();
    TAP_CONTAINS(log, "upload:/a.txt;upload:/b.txt;close:owned;");
    free(log);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "has been stopped");
    sbx_error_free(e);
    TAP_EQ_INT(sbx_sandbox_stop(sb, NULL), SBX_OK);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_startup_files_uploaded(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = spec_img(NULL);
    sbx_spec_add_file(s, "/etc/x.conf", "hello", 5);
    sbx_sandbox *sb = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, NULL), SBX_OK);
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "cat /etc/x.conf", NULL, &r, NULL), SBX_OK);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "hello");
    sbx_exec_result_free(r);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_create_failure_allows_retry(void)
{
    sbx_provider *p = fake_provider("{\"fake\": {\"fail\": {\"create\": \"no capacity\"}, "
                           "\"fail_code\": {\"create\": \"ECREATE\"}}}");
    sbx_spec *s = spec_img(NULL);
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, &e), SBX_ECREATE);
    TAP_CONTAINS(sbx_error_message(e), "no capacity");
    TAP_EQ_STR(sbx_error_provider(e), "fake");
    sbx_error_free(e);
    status_is(sb, SBX_STATUS_UNKNOWN);
    TAP_EQ_INT(sbx_sandbox_stop(sb, NULL), SBX_OK);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_endpoint_checks(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_provider *basic = fake_provider("{\"fake_basic\": null}");
    sbx_spec *s = spec_img(NULL);
    TAP_EQ_INT(sbx_spec_add_port(s, 8000, NULL), SBX_OK);
    sbx_sandbox *sb = NULL, *bb = NULL;
    sbx_endpoint *ep = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_endpoint(sb, 0, &ep, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "between 1 and 65535");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_endpoint(sb, 9000, &ep, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "was not declared");
    TAP_CONTAINS(sbx_error_message(e), "declared ports: [8000]");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_endpoint(sb, 8000, &ep, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "not been started");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_endpoint(sb, 8000, &ep, NULL), SBX_OK);
    TAP_EQ_STR(sbx_endpoint_url(ep), "http://127.0.0.1:8000");
    sbx_endpoint_free(ep);

    TAP_EQ_INT(sbx_sandbox_new(basic, s, &bb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_endpoint(bb, 8000, &ep, &e), SBX_ENOTSUP);
    TAP_EQ_STR(sbx_error_message(e), "Sandbox provider 'fake_basic' does not support service endpoints");
    sbx_error_free(e);
    e = NULL;
    char *json = NULL;
    TAP_EQ_INT(sbx_sandbox_serialize(bb, NULL, &json, &e), SBX_ENOTSUP);
    TAP_CONTAINS(sbx_error_message(e), "does not support serialize()/connect()");
    sbx_error_free(e);
    sbx_sandbox_free(sb);
    sbx_sandbox_free(bb);
    sbx_spec_free(s);
    sbx_provider_free(p);
    sbx_provider_free(basic);
}

static void test_serialize_connect(void)
{
    sbx_fake_log_reset();
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = spec_img("/w");
    sbx_sandbox *sb = NULL, *other = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, NULL), SBX_OK);
    char *json = NULL;
    TAP_EQ_INT(sbx_sandbox_serialize(sb, NULL, &json, NULL), SBX_OK);
    TAP_CONTAINS(json, "\"workdir\":\"/w\"");
    TAP_CONTAINS(json, sbx_sandbox_id(sb));
    /* A connect leaves the caller's descriptors alone (it once closed stdin). */
    struct stat in0, in1;
    TAP_EQ_INT(fstat(0, &in0), 0);
    TAP_EQ_INT(sbx_sandbox_connect(p, json, &other, NULL), SBX_OK);
    TAP_EQ_STR(sbx_sandbox_id(other), sbx_sandbox_id(sb));
    TAP_EQ_STR(sbx_sandbox_workdir(other), "/w");
    TAP_EQ_INT(sbx_sandbox_owned(other), 0);
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(other, "x", NULL, &r, NULL), SBX_OK);
    TAP_CONTAINS(sbx_exec_result_stdout(r, NULL), "\"cwd\":\"/w\"");
    sbx_exec_result_free(r);
    sbx_sandbox_free(other); /* only releases the handle */
    TAP_EQ_INT(fstat(0, &in1), 0);
    TAP_TRUE(in0.st_dev == in1.st_dev && in0.st_ino == in1.st_ino);
    char *log = sbx_fake_log();
    TAP_TRUE(strstr(log, "close:") == NULL);
    free(log);
    free(json);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_async_many_concurrent(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = spec_img(NULL);
    sbx_sandbox *sb = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, NULL), SBX_OK);
    enum { N = 200 };
    sbx_future *fs[N];
    for (int i = 0; i < N; i++)
        TAP_EQ_INT(sbx_sandbox_exec_async(sb, "sleep 0.2", NULL, &fs[i], NULL), SBX_OK);
    /* All 200 sleep concurrently: done well before 200 * 0.2 s (alarm would fire). */
    for (int i = 0; i < N; i++) {
        TAP_EQ_INT(sbx_future_wait(fs[i], 30, NULL), SBX_OK);
        sbx_exec_result *r = NULL;
        TAP_EQ_INT(sbx_future_take_exec_result(fs[i], &r, NULL), SBX_OK);
        TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
        sbx_exec_result_free(r);
        sbx_future_free(fs[i]);
    }
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_future_fd_and_cancel(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = spec_img(NULL);
    sbx_sandbox *sb = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, NULL), SBX_OK);
    sbx_future *f = NULL;
    TAP_EQ_INT(sbx_sandbox_exec_async(sb, "sleep 100", NULL, &f, NULL), SBX_OK);
    int fd = sbx_future_fd(f);
    TAP_TRUE(fd >= 0);
    struct pollfd pfd = { fd, POLLIN, 0 };
    TAP_EQ_INT(poll(&pfd, 1, 50), 0);
    TAP_EQ_INT(sbx_future_done(f), 0);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_future_wait(f, 0.05, &e), SBX_ETIMEDOUT);
    sbx_error_free(e);
    e = NULL;
    sbx_future_cancel(f);
    TAP_EQ_INT(poll(&pfd, 1, 5000), 1);
    TAP_EQ_INT(sbx_future_wait(f, 5, &e), SBX_ECANCELED);
    sbx_error_free(e);
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_exec_timeout_result(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = spec_img(NULL);
    sbx_sandbox *sb = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, NULL), SBX_OK);
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, 0.1);
    sbx_exec_result *r = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "sleep 10", o, &r, NULL), SBX_OK);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    TAP_NULL(sbx_exec_result_stdout(r, NULL));
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

struct cb_state {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int rc;
    bool called;
    sbx_sandbox *sb;
};

static void on_done(sbx_future *f, void *data)
{
    struct cb_state *st = data;
    /* On the loop thread: a blocking call is refused with a clear message. */
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    int rc = sbx_sandbox_exec(st->sb, "x", NULL, &r, &e);
    pthread_mutex_lock(&st->lock);
    st->rc = (rc == SBX_ESTATE && strstr(sbx_error_message(e), "is blocking; use sbx_sandbox_exec_async()"))
                 ? sbx_future_code(f, NULL)
                 : -1000;
    st->called = true;
    pthread_cond_signal(&st->cond);
    pthread_mutex_unlock(&st->lock);
    sbx_error_free(e);
}

static void test_then_callback_and_loop_refusal(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = spec_img(NULL);
    struct cb_state st = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false, NULL };
    TAP_EQ_INT(sbx_sandbox_new(p, s, &st.sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(st.sb, NULL, NULL), SBX_OK);
    sbx_future *f = NULL;
    TAP_EQ_INT(sbx_sandbox_exec_async(st.sb, "sleep 0.05", NULL, &f, NULL), SBX_OK);
    TAP_EQ_INT(sbx_future_then(f, on_done, &st), SBX_OK);
    pthread_mutex_lock(&st.lock);
    while (!st.called)
        pthread_cond_wait(&st.cond, &st.lock);
    pthread_mutex_unlock(&st.lock);
    TAP_EQ_INT(st.rc, SBX_OK);
    sbx_future_free(f);
    sbx_sandbox_free(st.sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_stop_during_start(void)
{
    sbx_fake_log_reset();
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = spec_img(NULL);
    sbx_spec_add_file(s, "/f", "x", 1);
    sbx_sandbox *sb = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    sbx_future *start = NULL, *stop = NULL;
    TAP_EQ_INT(sbx_sandbox_start_async(sb, NULL, &start, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_stop_async(sb, &stop, NULL), SBX_OK);
    TAP_EQ_INT(sbx_future_wait(stop, 10, NULL), SBX_OK);
    int rc = sbx_future_wait(start, 10, NULL);
    TAP_TRUE(rc == SBX_OK || rc == SBX_ECANCELED);
    /* Whatever happened first, no box is left open. */
    char *log = sbx_fake_log();
    if (strstr(log, "create:"))
        TAP_CONTAINS(log, "close:owned");
    free(log);
    status_is(sb, SBX_STATUS_STOPPED);
    sbx_future_free(start);
    sbx_future_free(stop);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

TAP_MAIN(TAP(test_start_exec_stop), TAP(test_state_errors),
         TAP(test_startup_files_and_failure_closes), TAP(test_startup_files_uploaded),
         TAP(test_create_failure_allows_retry), TAP(test_endpoint_checks),
         TAP(test_serialize_connect), TAP(test_async_many_concurrent),
         TAP(test_future_fd_and_cancel), TAP(test_exec_timeout_result),
         TAP(test_then_callback_and_loop_refusal), TAP(test_stop_during_start))
