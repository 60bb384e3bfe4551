/*
 * Pause and resume (sbx_sandbox_pause/resume, docs/pause.md) on linux: a
 * paused box's busy loop uses no CPU (its cgroup's CPU time stands still)
 * and continues after resume; status says PAUSED; exec and transfers fail
 * at once on the pausing handle and on another process's; both calls are
 * idempotent; a paused box still stops cleanly; a commit's freeze does not
 * thaw it; a provider without pause says so.
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include <sbx.h>
#include "providers/linux/linux.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "image_fixture.h"

/* The box's CPU time so far (its cgroup's), in ns. */
static long long cpu_ns(sbx_sandbox *sb)
{
    char *json = NULL;
    TAP_OK(sbx_sandbox_stats(sb, &json, &e_));
    json_t *v = json_loads(json, 0, NULL);
    free(json);
    json_t *n = json_object_get(v, "cpu_ns");
    if (!json_is_integer(n))
        TAP_FAIL("stats has no cpu_ns");
    long long ns = json_integer_value(n);
    json_decref(v);
    return ns;
}

/* A box whose service is a busy loop: it uses a CPU while it runs. */
static sbx_sandbox *busy_box(sbx_provider *p, sbx_spec **spec, const char *image)
{
    sbx_spec *s = sbx_spec_new();
    if (image)
        TAP_OK(sbx_spec_set_image(s, image));
    const char *argv[] = { "sh", "-c", "while :; do :; done", NULL };
    TAP_OK(sbx_spec_set_entrypoint(s, argv));
    sbx_sandbox *sb = start(p, s);
    *spec = s;
    return sb;
}

static void test_pause_stops_cpu_and_resume_continues(void)
{
    need_boxes();
    sbx_provider *p = provider_of("{\"linux\": {}}");
    TAP_TRUE(sbx_provider_supports(p, "pause"));
    sbx_spec *s = NULL;
    sbx_sandbox *sb = busy_box(p, &s, NULL);
    /* Running: its CPU time grows (a poll: the loop is scheduled when it is). */
    long long a = cpu_ns(sb), b = a;
    for (int i = 0; i < 500 && b == a; i++) {
        usleep(10000);
        b = cpu_ns(sb);
    }
    TAP_TRUE(b > a);

    TAP_OK(sbx_sandbox_pause(sb, &e_));
    status_is(sb, SBX_STATUS_PAUSED);
    /* Frozen: not one nanosecond more, however long we look. */
    long long c = cpu_ns(sb);
    usleep(300000);
    TAP_EQ_INT((int)(cpu_ns(sb) - c), 0);
    /* What needs the box fails at once, saying why and what to do. */
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "true", NULL, &r, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "is paused: resume it first");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_download(sb, "/etc/hostname", "/dev/null", &e), SBX_ESTATE);
    sbx_error_free(e);
    /* Idempotent. */
    TAP_OK(sbx_sandbox_pause(sb, &e_));

    TAP_OK(sbx_sandbox_resume(sb, &e_));
    TAP_OK(sbx_sandbox_resume(sb, &e_));
    status_is(sb, SBX_STATUS_RUNNING);
    long long d = cpu_ns(sb), f = d;
    for (int i = 0; i < 500 && f == d; i++) {
        usleep(10000);
        f = cpu_ns(sb);
    }
    TAP_TRUE(f > d);
    run_is(sb, "echo back", NULL, 0, "back\n", "");
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    sbx_sandbox_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_other_handles_see_the_pause(void)
{
    need_boxes();
    sbx_provider *p = provider_of("{\"linux\": {}}");
    sbx_spec *s = NULL;
    sbx_sandbox *sb = busy_box(p, &s, NULL);
    TAP_OK(sbx_sandbox_pause(sb, &e_));
    /* Another handle (another process would do the same): it connects without the agent's hello. */
    sbx_sandbox *other = connect_to(p, sb);
    status_is(other, SBX_STATUS_PAUSED);
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(other, "true", NULL, &r, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "is paused: resume it first (sbx unpause");
    sbx_error_free(e);
    /* It resumes the box; the first handle sees it running but still refuses until it resumes too. */
    TAP_OK(sbx_sandbox_resume(other, &e_));
    run_is(other, "echo resumed", NULL, 0, "resumed\n", "");
    status_is(sb, SBX_STATUS_RUNNING);
    sbx_sandbox_free(other);
    TAP_OK(sbx_sandbox_resume(sb, &e_));
    run_is(sb, "echo mine", NULL, 0, "mine\n", "");
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    sbx_sandbox_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_stop_ends_a_paused_box(void)
{
    need_boxes();
    sbx_provider *p = provider_of("{\"linux\": {}}");
    sbx_spec *s = NULL;
    sbx_sandbox *sb = busy_box(p, &s, NULL);
    TAP_OK(sbx_sandbox_pause(sb, &e_));
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    status_is(sb, SBX_STATUS_STOPPED);
    sbx_sandbox_free(sb);
    /* No frozen process, cgroup or box directory left behind. */
    free_and_census(s, p, state_dir);
}

static void test_commit_leaves_it_paused(void)
{
    need_boxes();
    /* Only a box of an imported image can be committed: busybox's. */
    busybox_tar();
    char src[700];
    snprintf(src, sizeof(src), "%s/bb.tar", tap_tmpdir());
    import("bb", src);
    sbx_provider *p = provider_of("{\"linux\": {}}");
    sbx_spec *s = NULL;
    sbx_sandbox *sb = busy_box(p, &s, "bb");
    TAP_OK(sbx_sandbox_pause(sb, &e_));
    char *json = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_image_commit(p, sbx_sandbox_id(sb), "paused-commit", NULL, &json, &e) < 0)
        TAP_FAIL("commit: %s", sbx_error_message(e));
    free(json);
    /* The commit froze and released the box: it is still paused, its CPU still. */
    status_is(sb, SBX_STATUS_PAUSED);
    long long c = cpu_ns(sb);
    usleep(200000);
    TAP_EQ_INT((int)(cpu_ns(sb) - c), 0);
    TAP_OK(sbx_sandbox_resume(sb, &e_));
    run_is(sb, "echo ok", NULL, 0, "ok\n", "");
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    sbx_sandbox_free(sb);
    TAP_OK(sbx_provider_image_remove(p, "paused-commit", 1, &e_));
    free_and_census(s, p, state_dir);
}

static void test_provider_without_pause(void)
{
    char cfg[600];
    snprintf(cfg, sizeof(cfg), "{\"local\": {\"workspace_root\": \"%s/ws\", \"state_dir\": \"%s/st\"}}",
             tap_tmpdir(), tap_tmpdir());
    sbx_provider *p = provider_of(cfg);
    TAP_TRUE(!sbx_provider_supports(p, "pause"));
    sbx_sandbox *sb = start(p, NULL);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_pause(sb, &e), SBX_ENOTSUP);
    TAP_CONTAINS(sbx_error_message(e), "Sandbox provider 'local' does not support pausing sandboxes");
    sbx_error_free(e);
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
}

TAP_MAIN(TAP(test_pause_stops_cpu_and_resume_continues), TAP(test_other_handles_see_the_pause),
         TAP(test_stop_ends_a_paused_box), TAP(test_commit_leaves_it_paused),
         TAP(test_provider_without_pause))
