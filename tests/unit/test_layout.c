/*
 * The OCI layout writer (src/image/layout.c): blobs appear only under the
 * digest of their bytes, partials resume, a wrong blob is refused and leaves
 * nothing, index.json names each manifest once.
 */
#include "tap.h"
#include "common.h"

#include "image/layout.h"

#include <stdio.h>
#include <sys/stat.h>

/* sha256("hello\n") */
#define HELLO "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"

static char *fresh_layout(void)
{
    char tmpl[] = "/tmp/sbx-layout.XXXXXX";
    char *d = mkdtemp(tmpl) ? strdup(tmpl) : NULL;
    TAP_TRUE(d != NULL);
    TAP_OK(sbx__layout_init(d, NULL));
    return d;
}

static void test_digest_syntax(void)
{
    TAP_TRUE(sbx__digest_ok(HELLO));
    TAP_TRUE(!sbx__digest_ok("sha256:5891B5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"));
    TAP_TRUE(!sbx__digest_ok("sha256:../../etc/passwd"));
    TAP_TRUE(!sbx__digest_ok("sha512:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"));
    TAP_TRUE(!sbx__digest_ok(HELLO "0"));
    TAP_TRUE(!sbx__digest_ok(NULL));
    TAP_NULL(sbx__layout_blob_path("/x", "sha256:abc"));
}

static void test_put_and_index(void)
{
    _cleanup_free_ char *d = fresh_layout();
    char dig[SBX_DIGEST_LEN];
    TAP_OK(sbx__layout_put_blob(d, "hello\n", 6, dig, NULL));
    TAP_EQ_STR(dig, HELLO);
    TAP_TRUE(sbx__layout_has_blob(d, HELLO));
    TAP_OK(sbx__layout_tag(d, "a:1", "application/vnd.oci.image.manifest.v1+json", HELLO, 6, NULL));
    TAP_OK(sbx__layout_tag(d, "a:1", "application/vnd.oci.image.manifest.v1+json", HELLO, 6, NULL));
    TAP_OK(sbx__layout_tag(d, "b:2", "application/vnd.oci.image.manifest.v1+json", HELLO, 6, NULL));
    _cleanup_free_ char *ip = sbx__printf("%s/index.json", d);
    json_t *idx = json_load_file(ip, 0, NULL);
    TAP_EQ_INT((int)json_array_size(json_object_get(idx, "manifests")), 2);
    json_decref(idx);
    _cleanup_free_ char *marker = sbx__printf("%s/oci-layout", d);
    _cleanup_free_ char *m = read_text(marker);
    TAP_CONTAINS(m, "1.0.0");
    rm_rf(d);
}

static void test_wrong_bytes_refused(void)
{
    _cleanup_free_ char *d = fresh_layout();
    sbx_blob_writer *w = NULL;
    TAP_EQ_INT(sbx__blob_writer_begin(d, HELLO, false, &w, NULL), 0);
    TAP_OK(sbx__blob_writer_write(w, "hellO\n", 6, NULL));
    sbx_error *e = NULL;
    TAP_TRUE(sbx__blob_writer_commit(w, NULL, &e) < 0);
    TAP_CONTAINS(sbx_error_message(e), "does not match its digest");
    sbx_error_free(e);
    TAP_TRUE(!sbx__layout_has_blob(d, HELLO));
    _cleanup_free_ char *blobs = sbx__printf("%s/blobs/sha256", d);
    TAP_EQ_INT(count_dir_entries(blobs), 0);
    rm_rf(d);
}

static void test_resume_and_present(void)
{
    _cleanup_free_ char *d = fresh_layout();
    sbx_blob_writer *w = NULL;
    TAP_EQ_INT(sbx__blob_writer_begin(d, HELLO, false, &w, NULL), 0);
    TAP_OK(sbx__blob_writer_write(w, "hel", 3, NULL));
    sbx__blob_writer_abort(w, true); /* a broken connection: keep the partial */
    TAP_EQ_INT(sbx__blob_writer_begin(d, HELLO, true, &w, NULL), 0);
    TAP_EQ_INT((int)sbx__blob_writer_size(w), 3);
    TAP_OK(sbx__blob_writer_write(w, "lo\n", 3, NULL));
    char dig[SBX_DIGEST_LEN];
    TAP_OK(sbx__blob_writer_commit(w, dig, NULL));
    TAP_EQ_STR(dig, HELLO);
    /* Present now: a second writer has nothing to do. */
    TAP_EQ_INT(sbx__blob_writer_begin(d, HELLO, true, &w, NULL), 1);
    TAP_NULL(w);
    /* A fresh start (no resume) discards a partial's bytes. */
    char other[] = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    TAP_EQ_INT(sbx__blob_writer_begin(d, other, false, &w, NULL), 0);
    TAP_OK(sbx__blob_writer_write(w, "x", 1, NULL));
    sbx__blob_writer_abort(w, true);
    TAP_EQ_INT(sbx__blob_writer_begin(d, other, false, &w, NULL), 0);
    TAP_EQ_INT((int)sbx__blob_writer_size(w), 0);
    sbx__blob_writer_abort(w, false);
    _cleanup_free_ char *blobs = sbx__printf("%s/blobs/sha256", d);
    TAP_EQ_INT(count_dir_entries(blobs), 1);
    rm_rf(d);
}

static void test_planted_link_not_followed(void)
{
    _cleanup_free_ char *d = fresh_layout();
    _cleanup_free_ char *victim = sbx__printf("%s/victim", d);
    write_text(victim, "keep");
    _cleanup_free_ char *lnk = sbx__printf("%s/blobs/sha256/%s.partial", d, &HELLO[7]);
    TAP_EQ_INT(symlink(victim, lnk), 0);
    sbx_blob_writer *w = NULL;
    sbx_error *e = NULL;
    TAP_TRUE(sbx__blob_writer_begin(d, HELLO, false, &w, &e) < 0);
    sbx_error_free(e);
    _cleanup_free_ char *v = read_text(victim);
    TAP_EQ_STR(v, "keep");
    rm_rf(d);
}

TAP_MAIN(TAP(test_digest_syntax), TAP(test_put_and_index), TAP(test_wrong_bytes_refused),
         TAP(test_resume_and_present), TAP(test_planted_link_not_followed))
