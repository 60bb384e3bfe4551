/*
 * `sbx commit` (docs/images.md "Commit and build"): a running box's
 * writable layer becomes a layer over its image, deletions and replaced
 * directories included; commits stack; --change edits the config; a box
 * with a user namespace keeps its own uids; what a hostile box leaves in
 * its upper dir (links, fifos, sparse giants) is recorded, never followed.
 * Real boxes, real overlayfs, busybox OCI layouts built here.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "image_fixture.h"


/* Commits box `sb` as `name` with `opts` (JSON or NULL); returns the answer (or NULL and *e). */
static json_t *commit(sbx_provider *p, sbx_sandbox *sb, const char *name, const char *opts,
                      sbx_error **e)
{
    char *out = NULL;
    if (sbx_provider_image_commit(p, sbx_sandbox_id(sb), name, opts, &out, e) != SBX_OK)
        return NULL;
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    return j;
}

static json_t *commit_ok(sbx_provider *p, sbx_sandbox *sb, const char *name, const char *opts)
{
    sbx_error *e = NULL;
    json_t *j = commit(p, sb, name, opts, &e);
    if (!j)
        TAP_FAIL("commit %s: %s", name, e ? sbx_error_message(e) : "?");
    return j;
}

/* The busybox image "bb" as a one-layer OCI layout with a config. */
static void bb_image(void)
{
    busybox_tar();
    const char *t = tap_tmpdir();
    sh("CONFIG='{\"Env\":[\"PATH=/bin\",\"A=1\"],\"Cmd\":[\"/bin/sh\"]}' %s %s/BB v1 %s/bb.tar",
       mklayout(), t, t);
    char src[700];
    snprintf(src, sizeof(src), "%s/BB", t);
    import("bb", src);
}

static int count_tmp(void)
{
    return count_dir("", "tmp-");
}

/* --- tests ---------------------------------------------------------------- */

/*
 * A new file, a deleted file of the image, a replaced directory (opaque),
 * a link and a mode change: a box of the committed image sees them all;
 * a commit of that box stacks a third layer; --change edits the config.
 */
static void test_commit_sees_changes_and_stacks(void)
{
    need_boxes();
    bb_image();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *b = box_of(p, "bb");
    out_of(b, "echo hello > /new && rm /etc/marker && rm -rf /opq && mkdir /opq && "
              "echo fresh > /opq/f && ln -s /new /lnk && mkdir -p /d/e && echo x > /d/e/x && "
              "chmod 0751 /d && echo linked > /h1 && mkdir /hd && ln /h1 /hd/h2");
    json_t *j = commit_ok(p, b, "c1:v1",
                          "{\"changes\": [\"ENV B=2 A=3\", \"WORKDIR /d\", "
                          "\"CMD [\\\"/bin/echo\\\", \\\"hi\\\"]\"]}");
    TAP_EQ_INT(json_integer_value(json_object_get(j, "layers")), 2);
    /* Frozen for the copy: cgroup v2's cgroup.freeze, or a v1 freezer group. */
    bool can_freeze =
        sbx__cg_mode() == SBX_CG_V2 ||
        (sbx__cg_mode() == SBX_CG_V1 && have_file("/sys/fs/cgroup/freezer/cgroup.procs"));
    TAP_EQ_INT(json_is_true(json_object_get(j, "paused")), can_freeze);
    char layer1[80];
    snprintf(layer1, sizeof(layer1), "%s", json_string_value(json_object_get(j, "layer")));
    json_decref(j);
    /* Thawed after: the box runs on, and the v1 freezer group is gone. */
    TAP_EQ_STR(out_of(b, "echo alive"), "alive\n");
    char fg[600];
    snprintf(fg, sizeof(fg), "/sys/fs/cgroup/freezer/%s/%s", sbx__cg_name(), sbx_sandbox_id(b));
    TAP_TRUE(!have_file(fg));
    /* --no-pause: not frozen. */
    j = commit_ok(p, b, "c1:nopause", "{\"pause\": false}");
    TAP_TRUE(json_is_false(json_object_get(j, "paused")));
    /* Deterministic: the same tree gives the same tar, so the same diff_id. */
    TAP_EQ_STR(json_string_value(json_object_get(j, "layer")), layer1);
    json_decref(j);
    stop_free(b);
    json_t *lw = lowers_of("c1:v1");
    TAP_EQ_INT(json_array_size(lw), 2);
    json_decref(lw);

    sbx_sandbox *c = box_of(p, "c1:v1");
    TAP_EQ_STR(out_of(c, "cat /new"), "hello\n");
    TAP_EQ_INT(rc_of(c, "test -e /etc/marker"), 1);
    TAP_EQ_INT(rc_of(c, "test -e /etc/passwd"), 0);
    TAP_EQ_STR(out_of(c, "ls /opq"), "f\n");
    TAP_EQ_STR(out_of(c, "readlink /lnk"), "/new\n");
    TAP_EQ_STR(out_of(c, "stat -c %a /d; cat /d/e/x"), "751\nx\n");
    /* A hard link stays one: two names, one inode. */
    TAP_EQ_STR(out_of(c, "cat /hd/h2; stat -c %h /h1; [ $(stat -c %i /h1) = $(stat -c %i /hd/h2) ] "
                         "&& echo same"),
               "linked\n2\nsame\n");
    /* And a commit of the commit: three layers, the second's changes kept. */
    out_of(c, "echo two > /two && rm /new && rm -r /d/e");
    j = commit_ok(p, c, "c2", NULL);
    TAP_EQ_INT(json_integer_value(json_object_get(j, "layers")), 3);
    json_decref(j);
    stop_free(c);
    sbx_sandbox *d = box_of(p, "c2");
    TAP_EQ_STR(out_of(d, "cat /two; ls /opq; ls /d"), "two\nf\n");
    TAP_EQ_INT(rc_of(d, "test -e /new || test -e /etc/marker || test -L /lnk"), 0);
    TAP_EQ_INT(rc_of(d, "test -e /new"), 1);
    stop_free(d);

    /* The config: the base's, the changes applied, kept by the next commit. */
    const char *names[] = {"c1:v1", "c2"};
    for (size_t i = 0; i < 2; i++) {
        json_t *cfg = sbx__linux_image_config(state_dir, NULL, names[i]);
        char *t = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
        TAP_EQ_STR(t, "{\"Cmd\":[\"/bin/echo\",\"hi\"],\"Env\":[\"PATH=/bin\",\"A=3\",\"B=2\"],"
                      "\"WorkingDir\":\"/d\"}");
        free(t);
        json_decref(cfg);
    }
    TAP_EQ_INT(count_tmp(), 0);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* Bad input refused before anything is made: names, changes, boxes, the none image. */
static void test_commit_refusals(void)
{
    need_boxes();
    bb_image();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *b = box_of(p, "bb");
    sbx_error *e = NULL;
    TAP_TRUE(!commit(p, b, "Bad Name", NULL, &e));
    TAP_CONTAINS(sbx_error_message(e), "invalid image name");
    sbx_error_free(e);
    e = NULL;
    TAP_TRUE(!commit(p, b, "x", "{\"changes\": [\"RUN rm -rf /\"]}", &e));
    TAP_CONTAINS(sbx_error_message(e), "not supported");
    sbx_error_free(e);
    e = NULL;
    TAP_TRUE(!commit(p, b, "x", "{\"changes\": [\"CMD [1]\"]}", &e));
    TAP_CONTAINS(sbx_error_message(e), "JSON array of strings");
    sbx_error_free(e);
    e = NULL;
    char *out = NULL;
    TAP_EQ_INT(sbx_provider_image_commit(p, "no-such-box", "x", NULL, &out, &e), SBX_ENOENT);
    sbx_error_free(e);
    e = NULL;
    stop_free(b);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *n = start(p, s);
    sbx_spec_free(s);
    TAP_TRUE(!commit(p, n, "x", NULL, &e));
    TAP_CONTAINS(sbx_error_message(e), "none image");
    sbx_error_free(e);
    stop_free(n);
    /* The box's image name now points at another image: refused, not built on it. */
    sbx_sandbox *r = box_of(p, "bb");
    const char *t = tap_tmpdir();
    sh("mkdir -p %s/other && cd %s/other && echo other > o && tar -cf %s/other.tar .", t, t, t);
    char src[700];
    snprintf(src, sizeof(src), "%s/other.tar", t);
    import("bb", src);
    e = NULL;
    TAP_TRUE(!commit(p, r, "x", NULL, &e));
    TAP_CONTAINS(sbx_error_message(e), "no longer the image box");
    sbx_error_free(e);
    stop_free(r);
    json_t *cfg = sbx__linux_image_config(state_dir, NULL, "x");
    TAP_TRUE(cfg == NULL);
    TAP_EQ_INT(count_tmp(), 0);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* A box with a user namespace: files it chowns keep the box's uids in the layer. */
static void test_commit_userns_keeps_box_ids(void)
{
    need_boxes();
    bb_image();
    sbx_provider *p = provider("{\"userns\": true}");
    sbx_sandbox *b = box_of(p, "bb");
    out_of(b, "echo u > /owned && chown 1234:4321 /owned && mkdir /home2 && "
              "chown 7:8 /home2 && rm /etc/marker && rm -rf /opq && mkdir /opq");
    json_decref(commit_ok(p, b, "uc", NULL));
    stop_free(b);
    sbx_provider *q = provider(NULL);
    sbx_sandbox *c = box_of(q, "uc");
    TAP_EQ_STR(out_of(c, "stat -c %u:%g /owned /home2 /bin/busybox"), "1234:4321\n7:8\n0:0\n");
    TAP_EQ_INT(rc_of(c, "test -e /etc/marker"), 1);
    TAP_EQ_STR(out_of(c, "ls -A /opq"), "");
    stop_free(c);
    /* And in a user-namespaced box of it, the same ids. */
    sbx_sandbox *d = box_of(p, "uc");
    TAP_EQ_STR(out_of(d, "stat -c %u:%g /owned; ls -A /opq"), "1234:4321\n");
    stop_free(d);
    sbx_provider_free(q);
    sbx_provider_free(p);
    census_check(state_dir);
}

/*
 * What a hostile box leaves: a link to /etc/shadow is kept as a link (the
 * host's file is never read into the layer), a fifo as a fifo (never
 * opened: the commit does not hang), a sparse file past the cap refused
 * before a byte of it is read, with nothing left behind.
 */
static void test_commit_hostile_upper(void)
{
    need_boxes();
    bb_image();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *b = box_of(p, "bb");
    out_of(b, "ln -s /etc/shadow /sh && ln -s ../../../../../../etc/shadow /etc/sh2 && "
              "mkfifo /fifo && mkdir -p /x && ln -s / /x/root");
    json_decref(commit_ok(p, b, "hostile", NULL));
    sbx_sandbox *c = box_of(p, "hostile");
    TAP_EQ_STR(out_of(c, "readlink /sh; readlink /etc/sh2; readlink /x/root"),
               "/etc/shadow\n../../../../../../etc/shadow\n/\n");
    TAP_EQ_INT(rc_of(c, "test -p /fifo"), 0);
    TAP_EQ_INT(rc_of(c, "test -e /etc/shadow"), 1);
    stop_free(c);
    /* The layer itself: links, no file named shadow with content. */
    const char *t = tap_tmpdir();
    sh("n=0; for d in %s/images/layers/*/diff; do "
       "[ -L $d/sh ] && n=$((n+1)); [ -f $d/etc/shadow ] && exit 1; done; [ $n = 1 ]",
       state_dir);
    (void)t;

    out_of(b, "dd if=/dev/zero of=/big bs=1 count=0 seek=100M 2>/dev/null && "
              "test $(stat -c %s /big) = 104857600");
    sbx_error *e = NULL;
    TAP_TRUE(!commit(p, b, "toobig", "{\"max_bytes\": 1048576}", &e));
    TAP_CONTAINS(sbx_error_message(e), "larger than the image cap");
    TAP_CONTAINS(sbx_error_message(e), "/big");
    sbx_error_free(e);
    json_t *cfg = sbx__linux_image_config(state_dir, NULL, "toobig");
    TAP_TRUE(cfg == NULL);
    TAP_EQ_INT(count_tmp(), 0);
    /* A file named as a whiteout would delete /etc/passwd in the new image: refused. */
    out_of(b, "rm /big && : > /etc/.wh.passwd");
    e = NULL;
    TAP_TRUE(!commit(p, b, "fakewh", NULL, &e));
    TAP_CONTAINS(sbx_error_message(e), "etc/.wh.passwd");
    sbx_error_free(e);
    TAP_TRUE(sbx__linux_image_config(state_dir, NULL, "fakewh") == NULL);
    TAP_EQ_INT(count_tmp(), 0);
    /* The box still works after a refused commit (it was thawed). */
    TAP_EQ_STR(out_of(b, "echo alive"), "alive\n");
    stop_free(b);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* The hook in the committing child: says "frozen" on fd 4, then waits to be killed. */
static int frozen_fd = -1;
static void frozen_then_wait(const char *id)
{
    (void)id;
    if (write(frozen_fd, "F", 1) != 1)
        _exit(4);
    for (;;)
        pause();
}

/*
 * A commit killed (SIGKILL) while its box is frozen: the box does not stay
 * frozen. While the commit lives the box is paused, its freeze owned (a
 * second commit is refused, naming the first); once it is killed, the
 * box's shim undoes the freeze, exec answers again, and the box commits
 * and stops as any other, leaving nothing behind.
 */
static void test_commit_killed_while_frozen_is_thawed(void)
{
    need_boxes();
    /* The committer, forked while this process has no threads yet (no provider). */
    int go[2], frozen[2];
    TAP_EQ_INT(pipe2(go, O_CLOEXEC), 0);
    TAP_EQ_INT(pipe2(frozen, O_CLOEXEC), 0);
    pid_t child = fork();
    TAP_TRUE(child >= 0);
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(go[1]);
        close(frozen[0]);
        char id[256] = "";
        ssize_t n = read(go[0], id, sizeof(id) - 1);
        if (n <= 0)
            _exit(0); /* the test ended first */
        id[n] = 0;
        frozen_fd = frozen[1];
        sbx__linux_commit_frozen_hook = frozen_then_wait;
        char *out = NULL;
        sbx_error *e = NULL;
        sbx__linux_image_commit(state_dir, NULL, id, "killed", NULL, 0, &out, &e);
        _exit(3); /* the hook never returns when the box froze */
    }
    close(go[0]);
    close(frozen[1]);
    bb_image();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *b = box_of(p, "bb");
    out_of(b, "echo kept > /kept");
    const char *id = sbx_sandbox_id(b);
    TAP_EQ_INT(write(go[1], id, strlen(id)), (ssize_t)strlen(id));
    char c = 0;
    if (read(frozen[0], &c, 1) != 1) {
        int ws = 0;
        waitpid(child, &ws, 0);
        /* The commit did not freeze: no freezer here (it exits 3 after committing). */
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 3)
            TAP_SKIP("no cgroup freezer here: a commit does not freeze the box");
        TAP_FAIL("the committing child died before the box froze (status %d)", ws);
    }
    /* Frozen, and owned by the live commit: paused; another commit is refused. */
    status_is(b, SBX_STATUS_PAUSED);
    char owner[900];
    snprintf(owner, sizeof(owner), "%s/boxes/%s/freeze", state_dir, id);
    TAP_TRUE(have_file(owner));
    sbx_error *e = NULL;
    TAP_TRUE(!commit(p, b, "second", NULL, &e));
    TAP_EQ_INT(sbx_error_code(e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "frozen by another commit");
    sbx_error_free(e);

    /* kill -9 mid-copy: the shim thaws the box (bounded by the test's alarm, not a wait here). */
    TAP_EQ_INT(kill(child, SIGKILL), 0);
    int ws = 0;
    TAP_EQ_INT(waitpid(child, &ws, 0), child);
    TAP_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL);
    TAP_EQ_STR(out_of(b, "cat /kept"), "kept\n");
    status_is(b, SBX_STATUS_RUNNING);
    TAP_TRUE(!have_file(owner));
    char fg[600];
    snprintf(fg, sizeof(fg), "/sys/fs/cgroup/freezer/%s/%s", sbx__cg_name(), id);
    TAP_TRUE(!have_file(fg));

    /* It commits as any box does; the killed commit's temporary in the store goes first. */
    json_t *j = commit_ok(p, b, "after", NULL);
    TAP_TRUE(json_is_true(json_object_get(j, "paused")));
    json_decref(j);
    TAP_EQ_INT(count_tmp(), 0);
    TAP_TRUE(!have_file(owner));
    stop_free(b);
    sbx_sandbox *d = box_of(p, "after");
    TAP_EQ_STR(out_of(d, "cat /kept"), "kept\n");
    stop_free(d);
    close(go[1]);
    close(frozen[0]);
    sbx_provider_free(p);
    census_check(state_dir);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_commit_sees_changes_and_stacks),
        TAP(test_commit_refusals),
        TAP(test_commit_userns_keeps_box_ids),
        TAP(test_commit_hostile_upper),
        TAP(test_commit_killed_while_frozen_is_thawed),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
