/* Where the build put the binaries a test drives: see proc.h. */
#include "lib/proc.h"

#include "tap.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *build_dir(void)
{
    static char dir[PATH_MAX];
    if (dir[0])
        return dir;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        TAP_FAIL("readlink /proc/self/exe: %s", strerror(errno));
    exe[n] = 0;
    /* build/tests/integration/test_x (or build/bench/bench_x: two levels) */
    int up = strstr(exe, "/bench/") ? 2 : 3;
    for (int i = 0; i < up; i++) {
        char *s = strrchr(exe, '/');
        if (!s)
            TAP_FAIL("unexpected test binary path %s", exe);
        *s = 0;
    }
    snprintf(dir, sizeof(dir), "%s", exe);
    return dir;
}

bool built_path(const char *name, char *out, size_t n)
{
    int k = snprintf(out, n, "%s/%s", build_dir(), name);
    return k > 0 && (size_t)k < n && access(out, X_OK) == 0;
}

const char *sbx_bin(void)
{
    static char path[PATH_MAX + 8];
    if (!path[0] && !built_path("sbx", path, sizeof(path)))
        TAP_FAIL("%s is not built (make tests builds it)", path);
    return path;
}

const char *agent_bin(void)
{
    static char path[PATH_MAX + 8];
    if (!path[0] && !built_path("sbx-agent", path, sizeof(path)))
        TAP_FAIL("no agent binary at %s (run make)", path);
    return path;
}
