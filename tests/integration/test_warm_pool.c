/*
 * Warm pools (sbx_warm_pool_*): boxes started ahead, claimed already
 * running, replaced in the background; failures kept and surfaced; boxes
 * past half their TTL not handed out; every unclaimed box stopped with the
 * pool. On the local provider (real processes) and linux (real boxes), and
 * the fake provider for failures.
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"

#include <sbx.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

static sbx_provider *provider(const char *cfg)
{
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_new(cfg, &p, &e) != SBX_OK)
        TAP_FAIL("provider %s: %s", cfg, sbx_error_message(e));
    return p;
}

static sbx_provider *local_provider(void)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"local\": {\"workspace_root\": \"%s/ws\", \"state_dir\": \"%s/state\"}}",
             tap_tmpdir(), tap_tmpdir());
    return provider(cfg);
}

/* Waits (a bounded poll, not a timing assertion) until `want` boxes are ready. */
static void wait_ready(sbx_warm_pool *wp, unsigned want)
{
    unsigned ready = 0, starting = 0;
    for (int i = 0; i < 6000; i++) {
        TAP_OK(sbx_warm_pool_stats(wp, &ready, &starting, NULL, NULL));
        if (ready >= want)
            return;
        sbx_error *e = sbx_warm_pool_last_error(wp);
        if (e && !starting)
            TAP_FAIL("the pool's starts failed: %s", sbx_error_message(e));
        sbx_error_free(e);
        usleep(10000);
    }
    TAP_FAIL("the pool never had %u boxes ready (%u)", want, ready);
}

/* The ids the provider lists, space-separated (the box registry). */
static char *listed_ids(sbx_provider *p)
{
    char *json = NULL;
    TAP_OK(sbx_provider_list(p, NULL, &json, &e_));
    return json;
}

static void test_claims_started_boxes_and_refills(void)
{
    sbx_provider *p = local_provider();
    sbx_warm_pool *wp = NULL;
    TAP_OK(sbx_warm_pool_new(p, NULL, 3, &wp, &e_));
    wait_ready(wp, 3);
    sbx_sandbox *a = NULL, *b = NULL;
    TAP_OK(sbx_warm_pool_claim(wp, &a, &e_));
    TAP_OK(sbx_warm_pool_claim(wp, &b, &e_));
    TAP_TRUE(sbx_sandbox_id(a) && sbx_sandbox_id(b));
    TAP_TRUE(strcmp(sbx_sandbox_id(a), sbx_sandbox_id(b)) != 0);
    /* Claimed boxes run: the caller's, as if it had started them. */
    run_is(a, "echo from-a", NULL, 0, "from-a\n", "");
    sbx_status st;
    TAP_OK(sbx_sandbox_status(b, &st, &e_));
    TAP_EQ_INT(st, SBX_STATUS_RUNNING);
    /* Each claim started a replacement: three again, ready or starting. */
    unsigned ready = 0, starting = 0;
    unsigned long long claims = 0, hits = 0;
    TAP_OK(sbx_warm_pool_stats(wp, &ready, &starting, &claims, &hits));
    TAP_EQ_INT((int)(ready + starting), 3);
    TAP_EQ_INT((int)claims, 2);
    TAP_EQ_INT((int)hits, 2);
    wait_ready(wp, 3);
    /* The pool's boxes are ordinary boxes: listed as any other. */
    char *ids = listed_ids(p);
    TAP_CONTAINS(ids, sbx_sandbox_id(a));
    free(ids);
    /* Freeing the pool stops the three it kept; the claimed two live on. */
    sbx_warm_pool_free(wp);
    ids = listed_ids(p);
    json_t *arr = json_loads(ids, 0, NULL);
    TAP_EQ_INT((int)json_array_size(arr), 2);
    json_decref(arr);
    TAP_CONTAINS(ids, sbx_sandbox_id(a));
    TAP_CONTAINS(ids, sbx_sandbox_id(b));
    free(ids);
    TAP_OK(sbx_sandbox_stop(a, &e_));
    TAP_OK(sbx_sandbox_stop(b, &e_));
    sbx_sandbox_free(a);
    sbx_sandbox_free(b);
    sbx_provider_free(p);
}

static void test_claim_before_ready_waits_for_the_oldest(void)
{
    sbx_provider *p = local_provider();
    sbx_warm_pool *wp = NULL;
    TAP_OK(sbx_warm_pool_new(p, NULL, 1, &wp, &e_));
    /* At once: the one starting is handed out when it is up. */
    sbx_sandbox *a = NULL;
    TAP_OK(sbx_warm_pool_claim(wp, &a, &e_));
    run_is(a, "echo up", NULL, 0, "up\n", "");
    sbx_warm_pool_free(wp);
    TAP_OK(sbx_sandbox_stop(a, &e_));
    sbx_sandbox_free(a);
    char *ids = listed_ids(p);
    TAP_EQ_STR(ids, "[]");
    free(ids);
    sbx_provider_free(p);
}

static void test_failed_starts_are_surfaced(void)
{
    sbx_provider *p = fake_provider("{\"fake\": {\"fail\": {\"create\": \"no capacity\"}, "
                                    "\"fail_code\": {\"create\": \"ECREATE\"}}}");
    sbx_spec *s = sbx_spec_new();
    TAP_OK(sbx_spec_set_image(s, "img"));
    sbx_warm_pool *wp = NULL;
    TAP_OK(sbx_warm_pool_new(p, s, 2, &wp, &e_));
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    /* The starts failed; the claim's own start fails too, with the provider's error. */
    TAP_EQ_INT(sbx_warm_pool_claim(wp, &sb, &e), SBX_ECREATE);
    TAP_NULL(sb);
    TAP_CONTAINS(sbx_error_message(e), "no capacity");
    sbx_error_free(e);
    sbx_error *last = sbx_warm_pool_last_error(wp);
    TAP_TRUE(last != NULL);
    TAP_CONTAINS(sbx_error_message(last), "no capacity");
    sbx_error_free(last);
    sbx_warm_pool_free(wp);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_failing_replacements(void)
{
    /* The first two creates succeed, the rest fail: the pool hands out the two, then says why. */
    sbx_provider *p = fake_provider("{\"fake\": {\"fail\": {\"create\": \"quota reached\"}, "
                                    "\"fail_after\": {\"create\": 2}}}");
    sbx_spec *s = sbx_spec_new();
    TAP_OK(sbx_spec_set_image(s, "img"));
    sbx_warm_pool *wp = NULL;
    TAP_OK(sbx_warm_pool_new(p, s, 2, &wp, &e_));
    wait_ready(wp, 2);
    for (int i = 0; i < 2; i++) {
        sbx_sandbox *sb = NULL;
        TAP_OK(sbx_warm_pool_claim(wp, &sb, &e_));
        TAP_TRUE(strncmp(sbx_sandbox_id(sb), "fake-", 5) == 0);
        sbx_sandbox_free(sb);
    }
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    TAP_TRUE(sbx_warm_pool_claim(wp, &sb, &e) < 0);
    TAP_NULL(sb);
    TAP_CONTAINS(sbx_error_message(e), "quota reached");
    sbx_error_free(e);
    unsigned long long claims = 0, hits = 0;
    TAP_OK(sbx_warm_pool_stats(wp, NULL, NULL, &claims, &hits));
    TAP_EQ_INT((int)claims, 3);
    TAP_EQ_INT((int)hits, 2);
    sbx_warm_pool_free(wp);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_stale_boxes_are_not_handed_out(void)
{
    sbx_provider *p = local_provider();
    sbx_spec *s = sbx_spec_new();
    TAP_OK(sbx_spec_set_ttl(s, 2));
    sbx_warm_pool *wp = NULL;
    TAP_OK(sbx_warm_pool_new(p, s, 1, &wp, &e_));
    wait_ready(wp, 1);
    char *before = listed_ids(p);
    sleep(1);
    usleep(200000); /* past half the TTL */
    sbx_sandbox *sb = NULL;
    TAP_OK(sbx_warm_pool_claim(wp, &sb, &e_));
    /* Not the stale one: it was stopped, and a fresh one handed out. */
    TAP_TRUE(strstr(before, sbx_sandbox_id(sb)) == NULL);
    free(before);
    run_is(sb, "echo fresh", NULL, 0, "fresh\n", "");
    sbx_sandbox_free(sb);
    sbx_warm_pool_free(wp);
    sbx_spec_free(s);
    char *ids = listed_ids(p);
    TAP_EQ_STR(ids, "[]");
    free(ids);
    sbx_provider_free(p);
}

/* Claims from many threads at once: each gets its own box, none twice. */
struct claimer {
    sbx_warm_pool *wp;
    char id[128];
    int rc;
};

static void *claim_thread(void *arg)
{
    struct claimer *c = arg;
    sbx_sandbox *sb = NULL;
    c->rc = sbx_warm_pool_claim(c->wp, &sb, NULL);
    if (c->rc == SBX_OK) {
        snprintf(c->id, sizeof(c->id), "%s", sbx_sandbox_id(sb));
        sbx_sandbox_free(sb);
    }
    return NULL;
}

static void test_concurrent_claims(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_spec *s = sbx_spec_new();
    TAP_OK(sbx_spec_set_image(s, "img"));
    sbx_warm_pool *wp = NULL;
    TAP_OK(sbx_warm_pool_new(p, s, 4, &wp, &e_));
    enum { N = 16 };
    struct claimer c[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        c[i] = (struct claimer){ .wp = wp };
        TAP_EQ_INT(pthread_create(&t[i], NULL, claim_thread, &c[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        TAP_EQ_INT(c[i].rc, SBX_OK);
        for (int j = 0; j < i; j++)
            TAP_TRUE(strcmp(c[i].id, c[j].id) != 0);
    }
    unsigned long long claims = 0;
    TAP_OK(sbx_warm_pool_stats(wp, NULL, NULL, &claims, NULL));
    TAP_EQ_INT((int)claims, N);
    sbx_warm_pool_free(wp);
    sbx_spec_free(s);
    sbx_provider_free(p);
}

static void test_bad_arguments(void)
{
    sbx_provider *p = fake_provider(NULL);
    sbx_warm_pool *wp = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_warm_pool_new(p, NULL, 0, &wp, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "size 0 is out of range: keep 1 to 4096");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_warm_pool_new(NULL, NULL, 1, &wp, &e), SBX_EINVAL);
    sbx_error_free(e);
    TAP_EQ_INT(sbx_warm_pool_claim(NULL, NULL, NULL), SBX_EINVAL);
    sbx_warm_pool_free(NULL);
    sbx_provider_free(p);
}

static void test_linux_boxes(void)
{
    if (geteuid() != 0)
        TAP_SKIP("linux boxes need root");
    sbx_provider *p = provider("{\"linux\": {}}");
    sbx_warm_pool *wp = NULL;
    TAP_OK(sbx_warm_pool_new(p, NULL, 2, &wp, &e_));
    wait_ready(wp, 2);
    sbx_sandbox *sb = NULL;
    TAP_OK(sbx_warm_pool_claim(wp, &sb, &e_));
    run_is(sb, "echo pooled", NULL, 0, "pooled\n", "");
    TAP_OK(sbx_sandbox_stop(sb, &e_));
    sbx_sandbox_free(sb);
    sbx_warm_pool_free(wp);
    sbx_provider_free(p);
}

TAP_MAIN(TAP(test_claims_started_boxes_and_refills), TAP(test_claim_before_ready_waits_for_the_oldest),
         TAP(test_failed_starts_are_surfaced), TAP(test_failing_replacements),
         TAP(test_stale_boxes_are_not_handed_out), TAP(test_concurrent_claims), TAP(test_bad_arguments), TAP(test_linux_boxes))
