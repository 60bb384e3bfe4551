/*
 * src/core/inroot.c: paths opened and directories made inside a root, with
 * links planted in the tree. Every case runs with openat2(RESOLVE_IN_ROOT,
 * or RESOLVE_BENEATH for sbx__beneath_open) and again with the manual walk,
 * which must agree.
 */
#include "tap.h"
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/inroot.h"

static char root[PATH_MAX], outside[PATH_MAX];
static int rootfd = -1;

static void setup(bool walk)
{
    sbx__inroot_force_walk(walk);
    snprintf(root, sizeof(root), "%s/root", tap_tmpdir());
    snprintf(outside, sizeof(outside), "%s/outside", tap_tmpdir());
    TAP_EQ_INT(mkdir(root, 0755), 0);
    TAP_EQ_INT(mkdir(outside, 0755), 0);
    rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    TAP_TRUE(rootfd >= 0);
}

static void teardown(void)
{
    close(rootfd);
    rootfd = -1;
    sbx__inroot_force_walk(false);
}

/* Plants `name -> target` under the root. */
static void link_in_root(const char *name, const char *target)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", root, name);
    TAP_EQ_INT(symlink(target, path), 0);
}

static bool is_dir_at(const char *base, const char *rel)
{
    char path[PATH_MAX * 3];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", base, rel);
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool outside_empty(void)
{
    char cmd[PATH_MAX + 64], out[64];
    snprintf(cmd, sizeof(cmd), "ls -A %s", outside);
    return run_cmd(out, sizeof(out), "%s", cmd) == 0 && out[0] == 0;
}

/* mkdir -p `dir` in the root must succeed (its fd is closed). */
static void made(const char *dir)
{
    int fd = sbx__inroot_mkdir_p(rootfd, dir, 0755);
    if (fd < 0)
        TAP_FAIL("mkdir -p %s in the root: %s", dir, strerror(errno));
    close(fd);
}

static void check_mkdir_p(bool walk)
{
    setup(walk);
    /* Plain: every missing level made. */
    made("/a/b/c");
    TAP_TRUE(is_dir_at(root, "a/b/c"));
    /* ".." stops at the root. */
    made("/../../up/x");
    TAP_TRUE(is_dir_at(root, "up/x"));

    /* A dangling absolute link to a host path: its target is made in the root. */
    link_in_root("abs", outside);
    made("/abs/deep");
    char in_root[PATH_MAX * 2];
    snprintf(in_root, sizeof(in_root), "%s%s", root, outside);
    TAP_TRUE(is_dir_at(in_root, "deep"));
    TAP_TRUE(outside_empty());

    /* Relative, through a chain of two links, and as the last component. */
    link_in_root("rel", "r1/../r2");
    link_in_root("last", "made/here");
    link_in_root("c1", "c2");
    link_in_root("c2", "/c3");
    made("rel/x");
    /* r1/../r2: r1 is made on the way (".." needs it), then r2 beside it. */
    TAP_TRUE(is_dir_at(root, "r1"));
    TAP_TRUE(is_dir_at(root, "r2/x"));
    made("/last");
    TAP_TRUE(is_dir_at(root, "made/here"));
    made("/c1/y");
    TAP_TRUE(is_dir_at(root, "c3/y"));

    /* A link loop is ELOOP, a link to a file ENOTDIR; nothing outside either way. */
    link_in_root("loop1", "loop2");
    link_in_root("loop2", "loop1");
    errno = 0;
    TAP_EQ_INT(sbx__inroot_mkdir_p(rootfd, "/loop1/z", 0755), -1);
    TAP_EQ_INT(errno, ELOOP);
    char file[PATH_MAX + 16];
    snprintf(file, sizeof(file), "%s/file", root);
    TAP_EQ_INT(run_cmd(NULL, 0, "touch %s", file), 0);
    link_in_root("to-file", "/file");
    errno = 0;
    TAP_EQ_INT(sbx__inroot_mkdir_p(rootfd, "/to-file/z", 0755), -1);
    TAP_EQ_INT(errno, ENOTDIR);
    TAP_TRUE(outside_empty());
    teardown();
}

static void test_mkdir_p_openat2(void) { check_mkdir_p(false); }
static void test_mkdir_p_walk(void) { check_mkdir_p(true); }

static void check_open(bool walk)
{
    setup(walk);
    char secret[PATH_MAX + 16];
    snprintf(secret, sizeof(secret), "%s/secret", outside);
    TAP_EQ_INT(run_cmd(NULL, 0, "echo host > %s", secret), 0);
    link_in_root("abs", secret);
    link_in_root("rel", "../../../outside/secret");
    /* Both resolve inside the root, where there is no such file. */
    errno = 0;
    TAP_EQ_INT(sbx__inroot_open(rootfd, "/abs", O_RDONLY, 0), -1);
    TAP_EQ_INT(errno, ENOENT);
    errno = 0;
    TAP_EQ_INT(sbx__inroot_open(rootfd, "rel", O_RDONLY, 0), -1);
    TAP_EQ_INT(errno, ENOENT);
    /* Creating through them makes the file in the root, never on the host. */
    made("/outside");
    int fd = sbx__inroot_open(rootfd, "rel", O_WRONLY | O_CREAT, 0644);
    TAP_TRUE(fd >= 0);
    close(fd);
    char in_root[PATH_MAX + 32];
    snprintf(in_root, sizeof(in_root), "%s/outside/secret", root);
    TAP_EQ_INT(access(in_root, F_OK), 0);
    char out[64];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cat %s", secret), 0);
    TAP_EQ_STR(out, "host\n");
    teardown();
}

static void test_open_openat2(void) { check_open(false); }
static void test_open_walk(void) { check_open(true); }

/* Beneath: links inside the tree are followed, any way out is EXDEV. */
static void check_beneath(bool walk)
{
    setup(walk);
    char secret[PATH_MAX + 16], in[PATH_MAX + 16], out[64];
    snprintf(secret, sizeof(secret), "%s/secret", outside);
    TAP_EQ_INT(run_cmd(NULL, 0, "echo host > %s", secret), 0);
    snprintf(in, sizeof(in), "%s/in", root);
    TAP_EQ_INT(run_cmd(NULL, 0, "mkdir -p %s/d && echo inside > %s/d/f", in, in), 0);
    link_in_root("abs", secret);
    link_in_root("rel", "../outside/secret");
    link_in_root("absdir", outside);
    link_in_root("ok", "in/d/../d/f");
    link_in_root("okdir", "in");
    const char *escapes[] = {"abs", "rel", "absdir/secret", "../outside/secret", "/in/d/f",
                             "in/../../outside/secret"};
    for (size_t i = 0; i < sizeof(escapes) / sizeof(*escapes); i++) {
        errno = 0;
        int fd = sbx__beneath_open(rootfd, escapes[i], O_RDONLY);
        if (fd >= 0) {
            close(fd);
            TAP_FAIL("%s was opened beneath the root", escapes[i]);
        }
        if (errno != EXDEV)
            TAP_FAIL("%s: errno %d (%s), wanted EXDEV", escapes[i], errno, strerror(errno));
    }
    const char *inside[] = {"ok", "okdir/d/f", "in/d/f", "./in/../in/d/f"};
    for (size_t i = 0; i < sizeof(inside) / sizeof(*inside); i++) {
        int fd = sbx__beneath_open(rootfd, inside[i], O_RDONLY);
        if (fd < 0)
            TAP_FAIL("%s: %s", inside[i], strerror(errno));
        ssize_t n = read(fd, out, sizeof(out) - 1);
        close(fd);
        TAP_TRUE(n > 0);
        out[n > 0 ? n : 0] = 0;
        TAP_EQ_STR(out, "inside\n");
    }
    /* O_NOFOLLOW: a link at the end is not followed (ELOOP), as the kernel does. */
    errno = 0;
    TAP_EQ_INT(sbx__beneath_open(rootfd, "ok", O_RDONLY | O_NOFOLLOW), -1);
    TAP_EQ_INT(errno, ELOOP);
    teardown();
}

static void test_beneath_openat2(void) { check_beneath(false); }
static void test_beneath_walk(void) { check_beneath(true); }

TAP_MAIN(TAP(test_mkdir_p_openat2), TAP(test_mkdir_p_walk), TAP(test_open_openat2),
         TAP(test_open_walk), TAP(test_beneath_openat2), TAP(test_beneath_walk))
