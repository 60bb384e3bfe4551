/*
 * The linux provider's image store (docs/images.md "The store"): layers
 * unpacked once each and shared, overlayfs whiteouts and opaque
 * directories seen from inside boxes, removal and prune, Docker-style
 * names, concurrent imports, many-layer images, the image config kept,
 * and an older sbx's flattened trees still read. Real boxes, real
 * overlayfs; OCI layouts built here with tar, gzip and sha256sum.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "image_fixture.h"


/* --- tests ---------------------------------------------------------------- */

/*
 * OCI layouts A (the busybox base and a layer making /a) and C (the same
 * base and a layer making /c) in the test's temp dir, which it returns.
 */
static const char *two_layouts(void)
{
    busybox_tar();
    const char *t = tap_tmpdir();
    layer("a", "echo a > a");
    layer("c", "echo c > c");
    sh("%s %s/A v1 %s/bb.tar %s/a.tar && %s %s/C v1 %s/bb.tar %s/c.tar", mklayout(), t, t, t,
       mklayout(), t, t, t);
    return t;
}

/*
 * Two images sharing their base layer: the second import unpacks only its
 * own layer, both stacks name the same directory, and each box sees its own
 * top layer over the shared one.
 */
static void test_shared_layer_unpacked_once(void)
{
    need_boxes();
    const char *t = two_layouts();
    char src[700];
    snprintf(src, sizeof(src), "%s/A", t);
    TAP_EQ_INT(import("img-a", src), 2);
    TAP_EQ_INT(import("img-a2", src), 0); /* the same image again: nothing to do */
    snprintf(src, sizeof(src), "%s/C", t);
    TAP_EQ_INT(import("img-c", src), 1);
    TAP_EQ_INT(count_dir("layers", "sha256-"), 3);
    json_t *la = lowers_of("img-a"), *lc = lowers_of("img-c");
    TAP_EQ_INT(json_array_size(la), 2);
    TAP_EQ_STR(json_string_value(json_array_get(la, 1)), json_string_value(json_array_get(lc, 1)));
    TAP_TRUE(strcmp(json_string_value(json_array_get(la, 0)),
                    json_string_value(json_array_get(lc, 0))) != 0);
    json_decref(la);
    json_decref(lc);
    sbx_provider *p = provider(NULL);
    sbx_sandbox *a = box_of(p, "img-a"), *c = box_of(p, "img-c");
    TAP_CONTAINS(out_of(a, "cat /a /etc/marker"), "a\nbb-image");
    TAP_EQ_INT(rc_of(a, "test -e /c"), 1);
    TAP_CONTAINS(out_of(c, "cat /c"), "c");
    TAP_EQ_INT(rc_of(c, "test -e /a"), 1);
    /* Writes stay in each box's upper layer, never in the shared one. */
    TAP_EQ_INT(rc_of(a, "echo mine > /etc/marker"), 0);
    TAP_CONTAINS(out_of(c, "cat /etc/marker"), "bb-image");
    stop_free(a);
    stop_free(c);
    sbx_provider_free(p);
    census_check(state_dir);
}

/*
 * A deleted file and an opaque directory, seen from inside boxes, with and
 * without a user namespace (trusted.* and user.* overlay xattrs).
 */
static void test_whiteout_and_opaque_seen_in_box(void)
{
    need_boxes();
    busybox_tar();
    const char *t = tap_tmpdir();
    layer("wh", "mkdir -p etc opq gone; : > etc/.wh.marker; : > opq/.wh..wh..opq; "
                "echo new > opq/new; : > etc/.wh.group");
    sh("%s %s/W v1 %s/bb.tar %s/wh.tar", mklayout(), t, t, t);
    char src[700];
    snprintf(src, sizeof(src), "%s/W", t);
    import("wh", src);
    /*
     * A whiteout of a directory, then a file under the same name with no
     * directory entry (python's tarfile writes just these two): the layer's
     * directory replaces its own whiteout and hides the lower one's files.
     */
    sh("cd %s && /usr/bin/python3 -c \"import tarfile, io\n"
       "t = tarfile.open('re.tar', 'w')\n"
       "for n, d in (('.wh.opq', b''), ('opq/fresh', b'fresh\\\\n')):\n"
       "    i = tarfile.TarInfo(n); i.size = len(d); t.addfile(i, io.BytesIO(d))\n"
       "t.close()\" && %s %s/R v1 %s/bb.tar %s/re.tar",
       t, mklayout(), t, t, t);
    snprintf(src, sizeof(src), "%s/R", t);
    import("re", src);
    const char *cfgs[] = {NULL, "{\"userns\": true}"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cfgs); i++) {
        sbx_provider *p = provider(cfgs[i]);
        sbx_sandbox *r = box_of(p, "re");
        TAP_EQ_STR(out_of(r, "ls /opq"), "fresh\n");
        TAP_EQ_STR(out_of(r, "cat /opq/fresh"), "fresh\n");
        stop_free(r);
        sbx_sandbox *b = box_of(p, "wh");
        TAP_EQ_INT(rc_of(b, "test -e /etc/marker"), 1);
        TAP_EQ_INT(rc_of(b, "test -e /etc/passwd"), 0);
        TAP_EQ_STR(out_of(b, "ls /opq"), "new\n");
        TAP_EQ_INT(rc_of(b, "test -e /etc/group"), 1);
        /* The box can recreate what a lower layer deleted. */
        TAP_CONTAINS(out_of(b, "echo back > /etc/marker && cat /etc/marker"), "back");
        stop_free(b);
        sbx_provider_free(p);
    }
    census_check(state_dir);
}

/*
 * rm keeps a layer another image has and drops one nobody has; prune
 * (dry run first) drops an unnamed image (a tarball run by path) and a
 * dead import's temporary. A box running on a removed image keeps working.
 */
static void test_rm_and_prune(void)
{
    need_boxes();
    const char *t = two_layouts();
    char src[700];
    snprintf(src, sizeof(src), "%s/A", t);
    import("img-a", src);
    snprintf(src, sizeof(src), "%s/C", t);
    import("img-c", src);
    json_t *la = lowers_of("img-a");
    char top_a[900], base[900];
    snprintf(top_a, sizeof(top_a), "%s", json_string_value(json_array_get(la, 0)));
    snprintf(base, sizeof(base), "%s", json_string_value(json_array_get(la, 1)));
    json_decref(la);
    sbx_provider *p = provider(NULL);
    sbx_sandbox *a = box_of(p, "img-a");
    TAP_CONTAINS(out_of(a, "cat /a"), "a");
    TAP_OK(sbx__linux_image_remove(state_dir, NULL, "img-a", &e_));
    TAP_TRUE(!have_file(top_a));
    TAP_TRUE(have_file(base));
    TAP_EQ_INT(count_dir("layers", "sha256-"), 2);
    /* The running box keeps what it had looked up, and the shared layer. */
    TAP_CONTAINS(out_of(a, "cat /a"), "a");
    TAP_CONTAINS(out_of(a, "cat /etc/marker"), "bb-image");
    stop_free(a);
    sbx_sandbox *c = box_of(p, "img-c");
    TAP_CONTAINS(out_of(c, "cat /c"), "c");
    stop_free(c);

    /*
     * An unnamed image: a tarball run by its path. While its box runs, prune
     * keeps it (no name does); once the box is gone, prune removes it.
     */
    char tar[700];
    snprintf(tar, sizeof(tar), "%s/ba.tar", t);
    sh("cp %s/bb.tar %s && tar -C %s/a.d -rf %s ./a", t, tar, t, tar);
    sbx_sandbox *u = box_of(p, tar);
    TAP_EQ_INT(count_dir("layers", "sha256-"), 3);
    TAP_OK(sbx__linux_image_prune(state_dir, NULL, false, NULL, &e_));
    TAP_EQ_INT(count_dir("layers", "sha256-"), 3);
    TAP_CONTAINS(out_of(u, "cat /a /etc/marker"), "a\nbb-image");
    stop_free(u);
    char tmp[900];
    snprintf(tmp, sizeof(tmp), "%s/images/tmp-999999999-1-0123456789abcdef", state_dir);
    TAP_EQ_INT(mkdir(tmp, 0700), 0);
    json_t *removed = NULL;
    TAP_OK(sbx__linux_image_prune(state_dir, NULL, true, &removed, &e_));
    char *text = json_dumps(removed, JSON_COMPACT);
    TAP_CONTAINS(text, "layer sha256:");
    TAP_CONTAINS(text, "image sha256:");
    TAP_CONTAINS(text, "temporary");
    free(text);
    json_decref(removed);
    TAP_EQ_INT(count_dir("layers", "sha256-"), 3);
    TAP_TRUE(have_file(tmp));
    TAP_OK(sbx__linux_image_prune(state_dir, NULL, false, NULL, &e_));
    TAP_EQ_INT(count_dir("layers", "sha256-"), 2);
    TAP_EQ_INT(count_dir("records", "sha256-"), 1);
    TAP_TRUE(!have_file(tmp));
    /* What is named stays whole, and runs. */
    c = box_of(p, "img-c");
    TAP_CONTAINS(out_of(c, "cat /c /etc/marker"), "c\nbb-image");
    stop_free(c);
    /* Through the provider, as `sbx image prune` calls it: nothing more to remove. */
    char *json = NULL;
    TAP_OK(sbx_provider_image_prune(p, 0, &json, &e_));
    TAP_EQ_STR(json, "[]");
    free(json);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* Docker-style names are stored as given, safely; malformed ones are refused. */
static void test_names_with_slashes_and_tags(void)
{
    need_boxes();
    busybox_tar();
    char tar[700];
    snprintf(tar, sizeof(tar), "%s/bb.tar", tap_tmpdir());
    char digest_name[200];
    snprintf(digest_name, sizeof(digest_name), "localhost:5000/org/env@sha256:%064d", 0);
    const char *good[] = {"ghcr.io/org/env:v1.2",
                          "docker.io/library/python:3.12-slim",
                          "python:3.12",
                          digest_name,
                          "a/b/c",
                          "legacy_Name"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(good); i++)
        import(good[i], tar);
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    TAP_OK(sbx__linux_image_list(state_dir, NULL, &v, &n, &e_));
    TAP_EQ_INT(n, SBX_ARRAY_SIZE(good));
    for (size_t i = 0; i < SBX_ARRAY_SIZE(good); i++) {
        bool found = false;
        for (size_t k = 0; k < n; k++)
            found |= !strcmp(v[k].name, good[i]);
        TAP_TRUE(found);
    }
    sbx__linux_image_list_free(v, n);
    /* One file per name under refs/, none anywhere else: no path from a name. */
    TAP_EQ_INT(count_dir("refs", ""), (int)SBX_ARRAY_SIZE(good));
    char p[900];
    snprintf(p, sizeof(p), "%s/images/ghcr.io", state_dir);
    TAP_TRUE(!have_file(p));
    sbx_provider *pr = provider(NULL);
    sbx_sandbox *b = box_of(pr, "ghcr.io/org/env:v1.2");
    TAP_CONTAINS(out_of(b, "cat /etc/marker"), "bb-image");
    stop_free(b);
    sbx_provider_free(pr);
    char longname[300];
    memset(longname, 'a', 256);
    longname[256] = 0;
    const char *bad[] = {"../x",    "a//b",    "Org/x",       "x:",           "/abs",
                         "a/../b",  "a/./b",   "x@sha256:12", "h:99999999/x", longname,
                         "a/b:t/c", ".hidden", "none"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        sbx_error *e = NULL;
        int brc = sbx__linux_image_import(state_dir, NULL, bad[i], tar, NULL, &e);
        if (brc != SBX_EINVAL)
            TAP_FAIL("name %s: %d", bad[i], brc);
        sbx_error_free(e);
    }
    TAP_OK(sbx__linux_image_remove(state_dir, NULL, "ghcr.io/org/env:v1.2", &e_));
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__linux_image_remove(state_dir, NULL, "ghcr.io/org/env:v1.2", &e), SBX_ENOENT);
    sbx_error_free(e);
    census_check(state_dir);
}

/*
 * One reference, any spelling (as Docker): a name imported short is found by
 * its canonical form and back, for a box, inspect, tag and rm.
 */
static void test_reference_spellings(void)
{
    need_boxes();
    busybox_tar();
    char tar[700];
    snprintf(tar, sizeof(tar), "%s/bb.tar", tap_tmpdir());
    import("python:3.12", tar);
    import("docker.io/org/tool:latest", tar);
    sbx_provider *pr = provider(NULL);
    sbx_sandbox *b = box_of(pr, "docker.io/library/python:3.12");
    TAP_CONTAINS(out_of(b, "cat /etc/marker"), "bb-image");
    stop_free(b);
    b = box_of(pr, "org/tool");
    TAP_CONTAINS(out_of(b, "cat /etc/marker"), "bb-image");
    stop_free(b);
    sbx_provider_free(pr);
    char *j = NULL;
    TAP_OK(sbx__linux_image_inspect(state_dir, NULL, "docker.io/library/python:3.12", &j, &e_));
    TAP_CONTAINS(j, "\"python:3.12\"");
    free(j);
    TAP_OK(sbx__linux_image_tag(state_dir, NULL, "docker.io/org/tool", "tool2:1", &e_));
    TAP_OK(sbx__linux_image_remove(state_dir, NULL, "docker.io/library/python:3.12", &e_));
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__linux_image_remove(state_dir, NULL, "python:3.12", &e), SBX_ENOENT);
    sbx_error_free(e);
    /* Not a different image that shares a short name: another registry stays apart. */
    e = NULL;
    TAP_TRUE(sbx__linux_image_inspect(state_dir, NULL, "ghcr.io/org/tool", &j, &e) < 0);
    sbx_error_free(e);
    census_check(state_dir);
}

/*
 * Two processes import one image at once (a ~24 MB layer, so the second
 * arrives while the first unpacks): each layer is unpacked by exactly one
 * of them, one copy stays, and no temporary is left.
 */
static void test_concurrent_imports_one_copy(void)
{
    need_boxes();
    busybox_tar();
    const char *t = tap_tmpdir();
    layer("big", "head -c 24000000 /dev/urandom > big");
    sh("%s %s/B v1 %s/bb.tar %s/big.tar", mklayout(), t, t, t);
    char src[700];
    snprintf(src, sizeof(src), "%s/B", t);
    int go[2], res[2];
    TAP_EQ_INT(pipe(go), 0);
    TAP_EQ_INT(pipe(res), 0);
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            close(go[1]);
            char c;
            if (read(go[0], &c, 1) < 0)
                _exit(100);
            struct count n = {-1};
            sbx_linux_image_opts io = {.progress = count_progress, .data = &n};
            char name[16];
            snprintf(name, sizeof(name), "big%d", i);
            int rc = sbx__linux_image_import(state_dir, NULL, name, src, &io, NULL);
            char msg[32];
            int len = snprintf(msg, sizeof(msg), "%d %d\n", rc, n.unpacked);
            _exit(write(res[1], msg, (size_t)len) == len ? 0 : 101);
        }
    }
    close(go[0]);
    close(res[1]);
    close(go[1]); /* both start now */
    int status, total = 0, lines = 0;
    for (int i = 0; i < 2; i++) {
        TAP_EQ_INT(waitpid(kids[i], &status, 0), kids[i]);
        TAP_EQ_INT(status, 0);
    }
    FILE *f = fdopen(res[0], "r");
    int rc, n;
    while (f && fscanf(f, "%d %d", &rc, &n) == 2) {
        TAP_EQ_INT(rc, SBX_OK);
        total += n;
        lines++;
    }
    if (f)
        fclose(f);
    TAP_EQ_INT(lines, 2);
    TAP_EQ_INT(total, 2);
    TAP_EQ_INT(count_dir("layers", "sha256-"), 2);
    TAP_EQ_INT(count_dir("", "tmp-"), 0);
    sbx_provider *p = provider(NULL);
    sbx_sandbox *b = box_of(p, "big1");
    TAP_CONTAINS(out_of(b, "wc -c < /big"), "24000000");
    stop_free(b);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* 60 layers over the base (61 lower dirs) mount, in order. */
static void test_many_layers_mount(void)
{
    need_boxes();
    busybox_tar();
    const char *t = tap_tmpdir();
    sh("cd %s; list=bb.tar; for i in $(seq 0 59); do rm -rf m$i; mkdir m$i; echo $i > m$i/l$i; "
       "echo $i > m$i/last; tar -C m$i -cf m$i.tar .; list=\"$list m$i.tar\"; done; "
       "%s %s/M v1 $list",
       t, mklayout(), t);
    char src[700];
    snprintf(src, sizeof(src), "%s/M", t);
    TAP_EQ_INT(import("many", src), 61);
    json_t *l = lowers_of("many");
    TAP_EQ_INT(json_array_size(l), 61);
    json_decref(l);
    sbx_provider *p = provider(NULL);
    sbx_sandbox *b = box_of(p, "many");
    TAP_EQ_STR(out_of(b, "cat /l0 /l59 /last"), "0\n59\n59\n");
    TAP_EQ_STR(out_of(b, "ls / | grep -c '^l[0-9]'"), "60\n");
    stop_free(b);
    sbx_provider_free(p);
    sbx_provider *pu = provider("{\"userns\": true}");
    b = box_of(pu, "many");
    TAP_EQ_STR(out_of(b, "cat /last"), "59\n");
    stop_free(b);
    sbx_provider_free(pu);
    census_check(state_dir);
}

/*
 * The config blob is kept (sbx__linux_image_config reads its "config"), and
 * a layer that does not unpack to the config's diff_id is refused, with
 * nothing of it left in the store.
 */
static void test_config_kept_and_diff_ids_checked(void)
{
    need_boxes();
    busybox_tar();
    const char *t = tap_tmpdir();
    layer("a", "echo a > a");
    sh("CONFIG='{\"Env\":[\"A=1\"],\"WorkingDir\":\"/w\"}' %s %s/A v1 %s/bb.tar %s/a.tar",
       mklayout(), t, t, t);
    char src[700];
    snprintf(src, sizeof(src), "%s/A", t);
    import("cfg", src);
    json_t *c = sbx__linux_image_config(state_dir, NULL, "cfg");
    TAP_TRUE(c != NULL);
    TAP_EQ_STR(json_string_value(json_array_get(json_object_get(c, "Env"), 0)), "A=1");
    TAP_EQ_STR(json_string_value(json_object_get(c, "WorkingDir")), "/w");
    json_decref(c);
    char tar[700];
    snprintf(tar, sizeof(tar), "%s/a.tar", t);
    import("plain", tar);
    TAP_TRUE(sbx__linux_image_config(state_dir, NULL, "plain") == NULL);

    layer("x", "echo x > x");
    sh("BAD_DIFF=1 %s %s/X v1 %s/x.tar", mklayout(), t, t);
    snprintf(src, sizeof(src), "%s/X", t);
    int before = count_dir("layers", "sha256-");
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__linux_image_import(state_dir, NULL, "bad", src, NULL, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "diff_id");
    sbx_error_free(e);
    TAP_EQ_INT(count_dir("layers", "sha256-"), before);
    TAP_EQ_INT(count_dir("", "tmp-"), 0);
    census_check(state_dir);
}

/* A name and a flattened tree an older sbx left are still read, listed and removed. */
static void test_old_store_still_read(void)
{
    need_boxes();
    busybox_tar();
    const char *t = tap_tmpdir();
    char hex[65];
    memset(hex, 'e', 64);
    hex[64] = 0;
    sh("mkdir -p %s/images/names %s/images/sha256-%s/rootfs && "
       "tar -C %s/images/sha256-%s/rootfs -xf %s/bb.tar && "
       "echo '{\"size\":1}' > %s/images/sha256-%s/meta.json && "
       "printf '{\"digest\":\"sha256:%s\",\"rootfs\":\"%s/images/sha256-%s/rootfs\","
       "\"source\":\"old\",\"created\":1}' > %s/images/names/oldimg && chmod 700 %s/images",
       state_dir, state_dir, hex, state_dir, hex, t, state_dir, hex, hex, state_dir, hex, state_dir,
       state_dir);
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    TAP_OK(sbx__linux_image_list(state_dir, NULL, &v, &n, &e_));
    TAP_EQ_INT(n, 1);
    TAP_EQ_STR(v[0].name, "oldimg");
    sbx__linux_image_list_free(v, n);
    sbx_provider *p = provider(NULL);
    sbx_sandbox *b = box_of(p, "oldimg");
    TAP_CONTAINS(out_of(b, "cat /etc/marker"), "bb-image");
    stop_free(b);
    TAP_OK(sbx__linux_image_prune(state_dir, NULL, false, NULL, &e_));
    char tree[900];
    snprintf(tree, sizeof(tree), "%s/images/sha256-%s/rootfs", state_dir, hex);
    TAP_TRUE(have_file(tree)); /* named: kept */
    TAP_OK(sbx__linux_image_remove(state_dir, NULL, "oldimg", &e_));
    TAP_TRUE(!have_file(tree));
    sbx_provider_free(p);
    census_check(state_dir);
}

/* The image_store key puts the store where it says, with the same checks. */
static void test_image_store_key(void)
{
    need_boxes();
    busybox_tar();
    const char *t = tap_tmpdir();
    char cfg[900], tar[700], lay[900];
    snprintf(cfg, sizeof(cfg), "{\"image_store\": \"%s/custom/store\"}", t);
    snprintf(tar, sizeof(tar), "%s/bb.tar", t);
    sbx_provider *p = provider(cfg);
    char *json = NULL;
    TAP_OK(sbx_provider_image_import(p, "org/bb:1", tar, NULL, &json, &e_));
    TAP_CONTAINS(json, "org/bb:1");
    free(json);
    snprintf(lay, sizeof(lay), "%s/custom/store/layers", t);
    TAP_TRUE(have_file(lay));
    struct stat st;
    snprintf(lay, sizeof(lay), "%s/custom/store", t);
    TAP_EQ_INT(stat(lay, &st), 0);
    TAP_EQ_INT(st.st_mode & 0777, 0700);
    sbx_sandbox *b = box_of(p, "org/bb:1");
    TAP_CONTAINS(out_of(b, "cat /etc/marker"), "bb-image");
    stop_free(b);
    sbx_provider_free(p);
    /* Not in the state directory's store. */
    TAP_EQ_INT(count_dir("refs", ""), 0);
    provider_fails("{\"linux\": {\"image_store\": \"rel/dir\"}}", SBX_EINVAL, "image_store");
    /* A store owned by someone else is refused. */
    TAP_EQ_INT(chown(lay, 65534, 65534), 0);
    p = provider(cfg);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "org/bb:1");
    start_fails(p, s, SBX_ECREATE, "belongs to uid 65534");
    sbx_spec_free(s);
    sbx_provider_free(p);
    TAP_EQ_INT(chown(lay, 0, 0), 0);
    census_check(state_dir);
}

/*
 * Layers given as tarballs with a config (as a `docker save` archive
 * holds them): the image's id is the config's digest, the layers are the
 * same store entries an OCI layout's are, and a wrong diff_id is refused.
 */
static void test_import_layers_shares_with_layouts(void)
{
    need_boxes();
    busybox_tar();
    const char *t = tap_tmpdir();
    layer("a", "echo a > a");
    layer("c", "echo c > c");
    char bb[700], a[700], cfg[700];
    snprintf(bb, sizeof(bb), "%s/bb.tar", t);
    snprintf(a, sizeof(a), "%s/a.tar.gz", t);
    snprintf(cfg, sizeof(cfg), "%s/cfg.json", t);
    sh("gzip -n -c %s/a.tar > %s && printf '{\"config\":{\"Env\":[\"X=1\"]},\"rootfs\":"
       "{\"type\":\"layers\",\"diff_ids\":[\"sha256:%%s\",\"sha256:%%s\"]}}' "
       "$(sha256sum %s | cut -d' ' -f1) $(sha256sum %s/a.tar | cut -d' ' -f1) > %s",
       t, a, bb, t, cfg);
    const char *const layers[] = { bb, a };
    struct count n = { -1 };
    sbx_linux_image_opts io = { .progress = count_progress, .data = &n };
    TAP_OK(sbx__linux_image_import_layers(state_dir, NULL, "docker.io/library/x:1", layers, 2,
                                          cfg, "x.tar", &io, &e_));
    TAP_EQ_INT(n.unpacked, 2);
    json_t *c = sbx__linux_image_config(state_dir, NULL, "docker.io/library/x:1");
    TAP_EQ_STR(json_string_value(json_array_get(json_object_get(c, "Env"), 0)), "X=1");
    json_decref(c);
    char out[256];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "sha256sum %s | cut -c1-64", cfg), 0);
    char rec[900];
    snprintf(rec, sizeof(rec), "%s/images/records/sha256-%.64s.json", state_dir, out);
    TAP_TRUE(have_file(rec));
    /* An OCI layout with the same base layer unpacks only its own. */
    sh("%s %s/C v1 %s/bb.tar %s/c.tar", mklayout(), t, t, t);
    char src[700];
    snprintf(src, sizeof(src), "%s/C", t);
    TAP_EQ_INT(import("img-c", src), 1);
    sbx_provider *p = provider(NULL);
    sbx_sandbox *b = box_of(p, "docker.io/library/x:1");
    TAP_CONTAINS(out_of(b, "cat /a /etc/marker"), "a\nbb-image");
    stop_free(b);
    sbx_provider_free(p);
    /*
     * A layer that is not what the config says (the diff_id named is not in
     * the store, so the layer is read and checked).
     */
    layer("d", "echo d > d");
    char d[700], cfg2[700];
    snprintf(d, sizeof(d), "%s/d.tar", t);
    snprintf(cfg2, sizeof(cfg2), "%s/cfg2.json", t);
    sh("printf '{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:%%s\","
       "\"sha256:%%s\"]}}' $(sha256sum %s | cut -d' ' -f1) $(echo other | sha256sum | "
       "cut -d' ' -f1) > %s",
       bb, cfg2);
    const char *const wrong[] = { bb, d };
    int before = count_dir("layers", "sha256-");
    sbx_error *e = NULL;
    TAP_EQ_INT(
        sbx__linux_image_import_layers(state_dir, NULL, "y", wrong, 2, cfg2, NULL, NULL, &e),
        SBX_EINVAL);
    TAP_EQ_INT(count_dir("layers", "sha256-"), before);
    TAP_CONTAINS(sbx_error_message(e), "diff_id");
    sbx_error_free(e);
    TAP_EQ_INT(count_dir("", "tmp-"), 0);
    census_check(state_dir);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_shared_layer_unpacked_once),
        TAP(test_whiteout_and_opaque_seen_in_box),
        TAP(test_rm_and_prune),
        TAP(test_names_with_slashes_and_tags),
        TAP(test_reference_spellings),
        TAP_T(test_concurrent_imports_one_copy, 120),
        TAP_T(test_many_layers_mount, 120),
        TAP(test_config_kept_and_diff_ids_checked),
        TAP(test_old_store_still_read),
        TAP(test_image_store_key),
        TAP(test_import_layers_shares_with_layouts),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
