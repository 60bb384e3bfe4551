/* Where the build put the binaries a test drives: see proc.h. */
#include "lib/proc.h"

#include "tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
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

pid_t proc_find(bool (*match)(const char *cmd, const void *arg), const void *arg, char *cmd,
                size_t n)
{
    DIR *d = opendir("/proc");
    if (!d)
        TAP_FAIL("opendir /proc: %s", strerror(errno));
    struct dirent *de;
    pid_t found = 0;
    while (!found && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue; /* gone meanwhile */
        ssize_t k = 0, r;
        while ((size_t)k < n - 1 && (r = read(fd, cmd + k, n - 1 - (size_t)k)) > 0)
            k += r;
        close(fd);
        if (k == 0)
            continue; /* a kernel thread, or a zombie */
        cmd[k] = 0;
        for (ssize_t i = 0; i < k; i++)
            if (!cmd[i])
                cmd[i] = ' ';
        if (match(cmd, arg))
            found = (pid_t)strtol(de->d_name, NULL, 10);
    }
    closedir(d);
    return found;
}

struct named {
    const char *prefix, *has;
};

static bool is_named(const char *cmd, const void *arg)
{
    const struct named *w = arg;
    return !strncmp(cmd, w->prefix, strlen(w->prefix)) && (!w->has || strstr(cmd, w->has));
}

pid_t proc_named(const char *prefix, const char *has)
{
    static char cmd[8192];
    const struct named w = { prefix, has };
    return proc_find(is_named, &w, cmd, sizeof(cmd));
}

int mounts_naming(const char *text)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        TAP_FAIL("/proc/self/mountinfo: %s", strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (getline(&line, &cap, f) > 0)
        n += strstr(line, text) != NULL;
    free(line);
    fclose(f);
    return n;
}
