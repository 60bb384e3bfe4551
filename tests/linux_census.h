/*
 * A census of what linux boxes leave on the host, run after every linux
 * test: no box directory in the state directory, no process whose command
 * line names it (shims, a nat box's pasta), no mount that mentions it, no
 * cgroup under the provider's cgroup level (SBX_LINUX_CGROUP, else sbx/)
 * without a live box (an empty group with no box is a leak), no box network
 * interface in the host's namespace, and none of the box paths the tests use
 * (workdirs such as /work) on the host.
 *
 * Under tests/run.sh, which runs several tests at once, each test has its own
 * state directory and cgroup level, so this counts only its own; the last two
 * cannot be told apart from another test's, and run.sh checks them once for
 * the whole run instead (SBX_RUN_HOST_CENSUS=1 says so).
 *
 * Header-only (static functions): included by the linux tests and bench.
 */
#ifndef SBX_LINUX_CENSUS_H
#define SBX_LINUX_CENSUS_H

#include <sbx.h>

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "lib/proc.h"

static int census_read(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    size_t k = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[k] = 0;
    return (int)k;
}

/*
 * Box paths the tests use (workdirs, startup files, the examples'): they
 * belong inside boxes, so one on the host is a leak (a `local` box makes an
 * absolute workdir on the host, and nothing removes it). One that already
 * existed when the binary started is not this run's.
 */
static const char *const census_host_paths[] = {
    "/tmp/work", "/work", "/work2", "/w", "/sandbox", "/workspace", "/tmp/sbx-first-run",
};
static unsigned census_host_before; /* bit i: census_host_paths[i] existed at start */

__attribute__((constructor)) static void census_host_snapshot(void)
{
    struct stat st;
    for (unsigned i = 0; i < sizeof(census_host_paths) / sizeof(census_host_paths[0]); i++)
        if (lstat(census_host_paths[i], &st) == 0)
            census_host_before |= 1u << i;
}

/* [nat] pasta, a nat box's network, names its pid file in the box directory. */
static bool census_names_state(const char *cmd, const void *state_dir)
{
    return strstr(cmd, state_dir) && (strstr(cmd, "sbx-shim") || strstr(cmd, "pasta"));
}

/* Returns a description of the first leftover, or NULL when the host is clean. */
static const char *census_find(const char *state_dir, char *why, size_t why_len)
{
    char path[4096];
    /* 1. Box directories. */
    snprintf(path, sizeof(path), "%s/boxes", state_dir);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(why, why_len, "box directory %.400s/%.200s left", path, de->d_name);
        closedir(d);
        return why;
    }
    if (d)
        closedir(d);
    /* 2. Processes naming the state directory (sbx-shim --box-dir <state>/boxes/ID). */
    static char cmd[8192];
    pid_t pid = proc_find(census_names_state, state_dir, cmd, sizeof(cmd));
    if (pid > 0) {
        snprintf(why, why_len, "process %d left: %.200s", (int)pid, cmd);
        return why;
    }
    /* 3. Mounts on the host mentioning the state directory. */
    static char mi[1 << 20];
    if (census_read("/proc/self/mountinfo", mi, sizeof(mi)) > 0) {
        char *hit = strstr(mi, state_dir);
        if (hit) {
            char *ls = hit;
            while (ls > mi && ls[-1] != '\n')
                ls--;
            snprintf(why, why_len, "mount left: %.300s", ls);
            return why;
        }
    }
    /*
     * 4. Empty box cgroups under this test's level (a live box has processes
     *    in its group).
     */
    const char *lvl = getenv("SBX_LINUX_CGROUP") ? getenv("SBX_LINUX_CGROUP") : "sbx";
    static const char *const fmts[] = { "/sys/fs/cgroup/%s", "/sys/fs/cgroup/%s/.nomem",
                                        "/sys/fs/cgroup/memory/%s", "/sys/fs/cgroup/pids/%s",
                                        "/sys/fs/cgroup/cpu/%s", "/sys/fs/cgroup/cpu,cpuacct/%s" };
    char roots[6][128];
    for (size_t r = 0; r < sizeof(fmts) / sizeof(fmts[0]); r++) {
        snprintf(roots[r], sizeof(roots[r]), fmts[r], lvl); /* lvl: at most 32 (cgroup.c) */
        d = opendir(roots[r]);
        while (d && (de = readdir(d))) {
            if (strncmp(de->d_name, "sbx-", 4) != 0)
                continue;
            char procs[256];
            snprintf(path, sizeof(path), "%s/%s/cgroup.procs", roots[r], de->d_name);
            if (census_read(path, procs, sizeof(procs)) == 0) {
                snprintf(why, why_len, "empty cgroup %.300s/%.200s left", roots[r], de->d_name);
                closedir(d);
                return why;
            }
        }
        if (d)
            closedir(d);
    }
    /*
     * 4b. A v1 freezer group under this test's level: one exists only while
     *     a commit copies a box, so any group left, empty or not, is a leak
     *     (a box left frozen, or a group nobody removed).
     */
    char fz[128];
    snprintf(fz, sizeof(fz), "/sys/fs/cgroup/freezer/%s", lvl);
    d = opendir(fz);
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "sbx-", 4) != 0)
            continue;
        snprintf(why, why_len, "freezer cgroup %.300s/%.200s left", fz, de->d_name);
        closedir(d);
        return why;
    }
    if (d)
        closedir(d);
    /* What tests/run.sh checks for the whole run (see the top). */
    if (getenv("SBX_RUN_HOST_CENSUS"))
        return NULL;
    /*
     * 6. [netw] A box network's veth in the host's namespace: both ends
     *    belong in a network's namespace and a box's, never here.
     */
    d = opendir("/sys/class/net");
    while (d && (de = readdir(d))) {
        if (!strncmp(de->d_name, "sbx", 3) && strlen(de->d_name) == 15) {
            snprintf(why, why_len, "network interface %.30s left on the host", de->d_name);
            closedir(d);
            return why;
        }
    }
    if (d)
        closedir(d);
    /* 5. Box paths on the host. */
    struct stat st;
    for (unsigned i = 0; i < sizeof(census_host_paths) / sizeof(census_host_paths[0]); i++) {
        if (!(census_host_before & (1u << i)) && lstat(census_host_paths[i], &st) == 0) {
            snprintf(why, why_len, "host path %s left (a box path made on the host)",
                     census_host_paths[i]);
            return why;
        }
    }
    return NULL;
}

/*
 * Fails the test when anything is left. Removal is asynchronous in one place
 * only (a shim finishing after its pidfd said it exited is not possible, but
 * the kernel frees a cgroup a moment after its last task), so look a few
 * times before calling it a leak.
 */
static void census_check(const char *state_dir)
{
    char why[1024];
    const char *leak = NULL;
    for (int i = 0; i < 100; i++) {
        leak = census_find(state_dir, why, sizeof(why));
        if (!leak)
            return;
        usleep(20 * 1000);
    }
    TAP_FAIL("census: %s", leak);
}

/* A test's end: frees its spec and its provider, then census_check(state_dir). */
static inline void free_and_census(sbx_spec *s, sbx_provider *p, const char *state_dir)
{
    sbx_spec_free(s);
    sbx_provider_free(p);
    census_check(state_dir);
}

#endif
