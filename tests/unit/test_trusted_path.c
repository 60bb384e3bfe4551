/*
 * sbx__open_trusted (src/core/private.c): a host path walked from "/",
 * following a link only where nobody but root and the caller could have put
 * it. Directories and links of "another user" are chowned to an unused uid
 * (root runs this; another uid needs no account for the kernel).
 */
#include "tap.h"
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"

#define OTHER 54321

static char base[PATH_MAX];

static void setup(void)
{
    if (geteuid() != 0)
        TAP_SKIP("needs root (to make files of another uid)");
    snprintf(base, sizeof(base), "%s/t", tap_tmpdir());
    TAP_EQ_INT(run_cmd(NULL, 0,
                       "set -e; mkdir -p %s/target/d && echo target > %s/target/d/f && cd %s && "
                       "mkdir other mine gw sticky && chown %d other && chmod 775 gw && "
                       "chmod 1777 sticky && ln -s ../target other/l && ln -s ../target mine/l && "
                       "ln -s ../target gw/l && ln -s ../target sticky/rootl && "
                       "ln -s ../target sticky/otherl && chown -h %d sticky/otherl && "
                       "ln -s %s/other/l mine/to-other",
                       base, base, base, OTHER, OTHER, base),
               0);
}

/* Opens base/rel; on success checks it is target/d/f and returns 0, else the code. */
static int open_rel(const char *rel, bool follow_last, char *msg, size_t n)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", base, rel);
    sbx_error *e = NULL;
    int fd = sbx__open_trusted(path, follow_last, "test", &e);
    msg[0] = 0;
    if (fd < 0) {
        TAP_TRUE(e != NULL);
        snprintf(msg, n, "%s", sbx_error_message(e));
        int code = sbx_error_code(e);
        sbx_error_free(e);
        return code;
    }
    TAP_TRUE(e == NULL);
    struct stat a, b;
    char want[PATH_MAX + 32];
    snprintf(want, sizeof(want), "%s/target/d/f", base);
    TAP_EQ_INT(fstat(fd, &a), 0);
    TAP_EQ_INT(stat(want, &b), 0);
    TAP_TRUE(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    close(fd);
    return 0;
}

static void has(const char *msg, const char *part)
{
    if (!strstr(msg, part))
        TAP_FAIL("'%s' is not in the message: %s", part, msg);
}

static void test_links_of_root_and_caller_are_followed(void)
{
    setup();
    char msg[2048];
    TAP_EQ_INT(open_rel("mine/l/d/f", false, msg, sizeof(msg)), 0);
    TAP_EQ_INT(open_rel("sticky/rootl/d/f", false, msg, sizeof(msg)), 0);
    TAP_EQ_INT(open_rel("mine/l/d/../d/./f", false, msg, sizeof(msg)), 0);
    /* A directory of another user's without links on the way is walked. */
    TAP_EQ_INT(run_cmd(NULL, 0, "mkdir -p %s/other/real/d && echo x > %s/other/real/d/f", base,
                       base),
               0);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/other/real/d/f", base);
    int fd = sbx__open_trusted(path, false, "test", NULL);
    TAP_TRUE(fd >= 0);
    close(fd);
}

static void test_links_others_could_plant_are_refused(void)
{
    setup();
    char msg[2048], want[2 * PATH_MAX + 128];
    /* In a directory of another user's. */
    TAP_EQ_INT(open_rel("other/l/d/f", false, msg, sizeof(msg)), SBX_EPERM);
    snprintf(want, sizeof(want), "%s/other/l is a symbolic link (to ../target) in %s/other", base,
             base);
    has(msg, want);
    has(msg, "belongs to uid 54321");
    has(msg, "Name the path it leads to");
    /* In a group-writable directory of root's. */
    TAP_EQ_INT(open_rel("gw/l/d/f", false, msg, sizeof(msg)), SBX_EPERM);
    has(msg, "writable by its group (mode 0775)");
    /* In a sticky directory, a link of another user's (root's is fine, above). */
    TAP_EQ_INT(open_rel("sticky/otherl/d/f", false, msg, sizeof(msg)), SBX_EPERM);
    has(msg, "the link belongs to uid 54321");
    /* Reached through a trusted link: the next one is judged where it lies. */
    TAP_EQ_INT(open_rel("mine/to-other/d/f", false, msg, sizeof(msg)), SBX_EPERM);
    has(msg, "other/l is a symbolic link");
}

static void test_the_last_link(void)
{
    setup();
    char msg[2048];
    TAP_EQ_INT(run_cmd(NULL, 0, "ln -s target/d/f %s/lastlink", base), 0);
    TAP_EQ_INT(open_rel("lastlink", false, msg, sizeof(msg)), SBX_EPERM);
    has(msg, "lastlink is a symbolic link (to target/d/f): sbx never follows one at the end");
    TAP_EQ_INT(open_rel("lastlink", true, msg, sizeof(msg)), 0);
    /* follow_last does not trust a link another user could have planted. */
    TAP_EQ_INT(run_cmd(NULL, 0, "ln -s ../target/d/f %s/other/fl", base), 0);
    TAP_EQ_INT(open_rel("other/fl", true, msg, sizeof(msg)), SBX_EPERM);
    has(msg, "belongs to uid 54321");
}

static void test_missing_and_not_a_directory(void)
{
    setup();
    char msg[2048];
    TAP_EQ_INT(open_rel("mine/nope/x", false, msg, sizeof(msg)), SBX_ENOENT);
    has(msg, "mine/nope: it does not exist");
    TAP_EQ_INT(open_rel("target/d/f/x", false, msg, sizeof(msg)), SBX_EINVAL);
    has(msg, "target/d/f is not a directory");
}

TAP_MAIN(TAP(test_links_of_root_and_caller_are_followed),
         TAP(test_links_others_could_plant_are_refused), TAP(test_the_last_link),
         TAP(test_missing_and_not_a_directory))
