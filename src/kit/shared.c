/*
 * Parts of the box-provider kit shared by the linux provider and the public
 * kit (box.c): where helpers and state live, ids, and processes by pid and
 * start time. kit.h says what each does.
 */
#include "kit/kit.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SBX_LIBEXECDIR
#define SBX_LIBEXECDIR "/usr/local/libexec/sbx"
#endif

static bool executable(const char *p)
{
    return p && access(p, X_OK) == 0;
}

/*
 * Finds a helper binary (sbx-shim, sbx-agent): $ENV, next to the program or
 * library this code is in and up to two levels above (build/ from
 * build/tests/integration/), ../libexec/sbx from either, the configured
 * libexec directory, then PATH.
 */
char *sbx__kit_find_helper(const char *name, const char *env)
{
    const char *e = getenv(env);
    if (e && *e)
        return strdup(e);
    char self[PATH_MAX];
    Dl_info info;
    const char *bases[2] = {NULL, NULL};
    if (dladdr((void *)sbx__kit_find_helper, &info) && info.dli_fname &&
        strchr(info.dli_fname, '/'))
        bases[0] = info.dli_fname;
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = 0;
        bases[1] = self;
    }
    for (int b = 0; b < 2; b++) {
        if (!bases[b])
            continue;
        char *dir = realpath(bases[b], NULL);
        for (int up = 0; dir && up < 3; up++) {
            char *slash = strrchr(dir, '/');
            if (!slash)
                break;
            *slash = 0;
            char *cand = sbx__printf("%s/%s", *dir ? dir : "", name);
            if (executable(cand)) {
                free(dir);
                return cand;
            }
            free(cand);
        }
        free(dir);
    }
    /* An install keeps them in PREFIX/libexec/sbx, next to PREFIX/lib and PREFIX/bin:
     * found relative to the library or program first, so a moved or DESTDIR'd
     * install works too, then where this build was configured to install. */
    for (int b = 0; b < 2; b++) {
        char *dir = bases[b] ? realpath(bases[b], NULL) : NULL;
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash) {
            *slash = 0;
            char *cand = sbx__printf("%s/../libexec/sbx/%s", dir, name);
            if (executable(cand)) {
                free(dir);
                return cand;
            }
            free(cand);
        }
        free(dir);
    }
    static const char *const fixed[] = {SBX_LIBEXECDIR, "/usr/local/libexec/sbx",
                                        "/usr/libexec/sbx"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(fixed); i++) {
        char *cand = sbx__printf("%s/%s", fixed[i], name);
        if (executable(cand))
            return cand;
        free(cand);
    }
    const char *path = getenv("PATH");
    _cleanup_free_ char *copy = path ? strdup(path) : NULL;
    for (char *save = NULL, *d = copy ? strtok_r(copy, ":", &save) : NULL; d;
         d = strtok_r(NULL, ":", &save)) {
        char *cand = sbx__printf("%s/%s", d, name);
        if (executable(cand))
            return cand;
        free(cand);
    }
    return NULL;
}

char *sbx__kit_state_dir_spelled(const char *provider, const char *override)
{
    if (override && *override)
        return strdup(override);
    const char *env = getenv("SBX_STATE_DIR");
    if (env && *env)
        return sbx__printf("%s/%s", env, provider);
    if (geteuid() == 0)
        return sbx__printf("/run/sbx/%s", provider);
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && *xdg)
        return sbx__printf("%s/sbx/%s", xdg, provider);
    return sbx__printf("/tmp/sbx-%u/%s", (unsigned)geteuid(), provider);
}

bool sbx__kit_id_ok(const char *id)
{
    /* Ids become path components and cgroup names: "sbx-" and hex, or a name alike. */
    if (!id || !*id || id[0] == '.' || id[0] == '-' || strlen(id) > 64)
        return false;
    return strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
           strlen(id);
}

unsigned long long sbx__kit_proc_start(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    char *data = NULL;
    size_t n = 0;
    if (pid <= 0 || sbx__read_file(p, &data, &n) < 0)
        return 0;
    /* The command name may hold spaces and parentheses: fields start after the last ')'. */
    char *s = strrchr(data, ')');
    unsigned long long start = 0;
    if (s) {
        s += 2; /* field 3 */
        for (int f = 3; f < 22 && s; f++) {
            s = strchr(s, ' ');
            if (s)
                s++;
        }
        if (s)
            start = strtoull(s, NULL, 10);
    }
    /* A zombie has exited: treat it as gone. */
    char *st = strrchr(data, ')');
    if (st && st[1] == ' ' && (st[2] == 'Z' || st[2] == 'X'))
        start = 0;
    free(data);
    return start;
}

/*
 * pidfd_open, or ENOSYS without pidfd support (Linux < 5.3, valgrind), which
 * SBX_LINUX_NO_PIDFD=1 simulates so the fallback stays tested.
 */
int sbx__kit_pidfd_open(pid_t pid)
{
    const char *no = getenv("SBX_LINUX_NO_PIDFD");
    if (no && *no && strcmp(no, "0") != 0) {
        errno = ENOSYS;
        return -1;
    }
    return (int)syscall(SYS_pidfd_open, pid, 0);
}
