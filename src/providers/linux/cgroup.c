/*
 * cgroups for linux boxes: v2 where the unified hierarchy has controllers,
 * v1 controllers otherwise (hybrid machines mount cgroup2 at
 * /sys/fs/cgroup/unified with no controllers, and memory, pids, cpu as v1
 * hierarchies under /sys/fs/cgroup/<controller>).
 *
 * Every box gets <root>/sbx/<id> in each hierarchy it uses. Groups are made
 * by the shim before the box's init runs, the init is moved in before it
 * execs anything, and the shim (or gc, when the shim died) removes them.
 *
 * The level's name, "sbx", can be changed with SBX_LINUX_CGROUP (a single
 * name: letters, digits, '-', '_'): providers (and their shims, which inherit
 * it) that use different names keep their groups apart, and each one's gc
 * sees only its own. The test runner gives each test its own.
 */
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

#define CG_ROOT "/sys/fs/cgroup"

static sbx_cg_mode detected;
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

/* The level's name and the paths made of it, set once per process. */
static char cg_name[SBX_LINUX_CGROUP_NAME_MAX + 1] = "sbx";
static char v2_base[64 + SBX_LINUX_CGROUP_NAME_MAX], v2_nomem[96 + SBX_LINUX_CGROUP_NAME_MAX];
static char v1_parents[4][64 + SBX_LINUX_CGROUP_NAME_MAX];
static const char *parents[7];
static pthread_once_t name_once = PTHREAD_ONCE_INIT;

bool sbx__cg_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SBX_LINUX_CGROUP_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

static void pick_name(void)
{
    /* An invalid value is refused by sbx_provider_new (linux_new); here it falls back. */
    const char *env = getenv("SBX_LINUX_CGROUP");
    if (env && sbx__cg_name_ok(env))
        snprintf(cg_name, sizeof(cg_name), "%s", env);
    snprintf(v2_base, sizeof(v2_base), CG_ROOT "/%s", cg_name);
    snprintf(v2_nomem, sizeof(v2_nomem), CG_ROOT "/%s/.nomem", cg_name);
    static const char *const v1[] = { "memory", "pids", "cpu", "cpu,cpuacct" };
    parents[0] = v2_base;
    parents[1] = v2_nomem;
    for (int i = 0; i < 4; i++) {
        snprintf(v1_parents[i], sizeof(v1_parents[i]), CG_ROOT "/%s/%s", v1[i], cg_name);
        parents[2 + i] = v1_parents[i];
    }
    parents[6] = NULL;
}

const char *sbx__cg_name(void)
{
    pthread_once(&name_once, pick_name);
    return cg_name;
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void detect(void)
{
    struct statfs sf;
    /* Pure v2: /sys/fs/cgroup itself is cgroup2 and lists controllers. */
    if (statfs(CG_ROOT, &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC) {
        char *c = NULL;
        size_t n = 0;
        if (sbx__read_file(CG_ROOT "/cgroup.controllers", &c, &n) == 0 &&
            strstr(c, "memory") && strstr(c, "pids")) {
            detected = SBX_CG_V2;
            free(c);
            return;
        }
        free(c);
    }
    if (exists(CG_ROOT "/memory/memory.limit_in_bytes") && exists(CG_ROOT "/pids/cgroup.procs")) {
        detected = SBX_CG_V1;
        return;
    }
    detected = SBX_CG_NONE;
}

sbx_cg_mode sbx__cg_mode(void)
{
    pthread_once(&detect_once, detect);
    return detected;
}

int sbx__cg_write(const char *path, const char *val)
{
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = strlen(val);
    if (write(fd, val, len) != (ssize_t)len)
        return -errno;
    return 0;
}

static int write_str(const char *dir, const char *file, const char *val)
{
    _cleanup_free_ char *p = sbx__printf("%s/%s", dir, file);
    return p ? sbx__cg_write(p, val) : -ENOMEM;
}

/* The v1 directory of the cpu controller: "cpu" or the joined "cpu,cpuacct". */
static const char *v1_cpu_dir(void)
{
    if (exists(CG_ROOT "/cpu/cpu.cfs_quota_us"))
        return CG_ROOT "/cpu";
    if (exists(CG_ROOT "/cpu,cpuacct/cpu.cfs_quota_us"))
        return CG_ROOT "/cpu,cpuacct";
    return NULL;
}

/*
 * Pure v2 with memory_cgroup "limited": boxes without a memory limit live in
 * sbx/.nomem, whose subtree enables pids and cpu but not memory, so their
 * memory is charged to that one group instead of one of their own (each
 * memory cgroup costs kernel memory that grows with the number of boxes:
 * docs/scale.md). The leading dot keeps it apart from every box id.
 */
#define NOMEM "/.nomem"

/*
 * mkdir <parent>/sbx (shared by the boxes, removed with the last one) and
 * <parent>/sbx/<id> (the box's), or <parent>/sbx/.nomem/<id> (v2 only).
 */
static char *make_group(const char *parent, const char *id, bool nomem, sbx_error **err)
{
    _cleanup_free_ char *base = sbx__printf("%s/%s", parent, sbx__cg_name());
    _cleanup_free_ char *mid = nomem ? sbx__printf("%s" NOMEM, base) : NULL;
    char *dir = sbx__printf("%s/%s", nomem ? mid : base, id);
    if (!base || !dir || (nomem && !mid)) {
        free(dir);
        sbx__set_error(err, SBX_ENOMEM, "out of memory");
        return NULL;
    }
    /* The last box of another process may remove sbx/ (or .nomem) between our mkdirs: retry. */
    for (int tries = 0;; tries++) {
        const char *what = base;
        int e = 0;
        if (mkdir(base, 0755) < 0 && errno != EEXIST)
            e = -errno;
        /* .nomem's own controllers come from sbx/'s subtree; its subtree drops memory. */
        if (!e && nomem &&
            !(e = write_str(base, "cgroup.subtree_control", "+memory +pids +cpu"))) {
            what = mid;
            if (mkdir(mid, 0755) < 0 && errno != EEXIST)
                e = -errno;
            else
                e = write_str(mid, "cgroup.subtree_control", "+pids +cpu");
        }
        if (e == -ENOENT && tries < 16)
            continue;
        if (e) {
            sbx__set_errno(err, SBX_ECREATE, -e,
                           "cannot create cgroup %s (is the cgroup filesystem writable? run as "
                           "root)",
                           what);
            free(dir);
            return NULL;
        }
        if (mkdir(dir, 0755) == 0)
            return dir;
        if (errno != ENOENT || tries >= 16) {
            sbx__set_errno(err, SBX_ECREATE, errno, "cannot create cgroup %s", dir);
            free(dir);
            return NULL;
        }
    }
}

static int limit_fail(sbx_error **err, int e, const char *dir, const char *file, const char *val)
{
    return sbx__set_errno(err, SBX_ECREATE, -e, "cgroup refused %s=%s in %s", file, val, dir);
}

static int setup_v2(const char *id, const sbx_cg_limits *lim, json_t *paths, sbx_error **err)
{
    /*
     * Controllers must be enabled in each ancestor's subtree_control before a
     * child can use them. The root normally has them (systemd enables them);
     * we enable them in our own sbx/ level. Errors on the root are ignored: a
     * delegated root may refuse, and the write into sbx/ then tells the truth.
     */
    write_str(CG_ROOT, "cgroup.subtree_control", "+memory +pids +cpu");
    bool nomem = lim->memory_only_limited && lim->memory_bytes <= 0;
    _cleanup_free_ char *dir = make_group(CG_ROOT, id, nomem, err);
    if (!dir)
        return SBX_ECREATE;
    json_array_append_new(paths, json_string(dir));
    int e = write_str(v2_base, "cgroup.subtree_control", "+memory +pids +cpu");
    if (e < 0 && (lim->memory_bytes > 0 || lim->pids > 0 || lim->cpu > 0))
        return limit_fail(err, e, v2_base, "cgroup.subtree_control", "+memory +pids +cpu");
    char v[64];
    if (lim->memory_bytes > 0) {
        snprintf(v, sizeof(v), "%lld", lim->memory_bytes);
        if ((e = write_str(dir, "memory.max", v)) < 0)
            return limit_fail(err, e, dir, "memory.max", v);
        /* No swap: the limit is the box's memory, as Docker's --memory-swap=--memory. */
        write_str(dir, "memory.swap.max", "0");
        /* An OOM kills the offending process only, so the box (and its agent) live on. */
        write_str(dir, "memory.oom.group", "0");
    }
    if (lim->pids > 0) {
        snprintf(v, sizeof(v), "%lld", lim->pids);
        if ((e = write_str(dir, "pids.max", v)) < 0)
            return limit_fail(err, e, dir, "pids.max", v);
    }
    if (lim->cpu > 0) {
        snprintf(v, sizeof(v), "%lld 100000", (long long)(lim->cpu * 100000 + 0.5));
        if ((e = write_str(dir, "cpu.max", v)) < 0)
            return limit_fail(err, e, dir, "cpu.max", v);
    }
    return SBX_OK;
}

static int setup_v1(const char *id, const sbx_cg_limits *lim, json_t *paths, sbx_error **err)
{
    char v[64];
    int e;
    /*
     * memory (unless memory_cgroup is "limited" and there is no limit) and
     * pids always (pids carries the default cap), cpu when limited.
     */
    _cleanup_free_ char *mem = NULL;
    if (!(lim->memory_only_limited && lim->memory_bytes <= 0)) {
        mem = make_group(CG_ROOT "/memory", id, false, err);
        if (!mem)
            return SBX_ECREATE;
        json_array_append_new(paths, json_string(mem));
    }
    if (mem && lim->memory_bytes > 0) {
        snprintf(v, sizeof(v), "%lld", lim->memory_bytes);
        if ((e = write_str(mem, "memory.limit_in_bytes", v)) < 0)
            return limit_fail(err, e, mem, "memory.limit_in_bytes", v);
        /* memsw exists only with swap accounting; equal limits mean no swap. */
        write_str(mem, "memory.memsw.limit_in_bytes", v);
    }
    /* Keep the OOM killer on: it kills the offender, the box lives on. */
    if (mem)
        write_str(mem, "memory.oom_control", "0");
    _cleanup_free_ char *pids = make_group(CG_ROOT "/pids", id, false, err);
    if (!pids)
        return SBX_ECREATE;
    json_array_append_new(paths, json_string(pids));
    if (lim->pids > 0) {
        snprintf(v, sizeof(v), "%lld", lim->pids);
        if ((e = write_str(pids, "pids.max", v)) < 0)
            return limit_fail(err, e, pids, "pids.max", v);
    }
    if (lim->cpu > 0) {
        const char *cpu_root = v1_cpu_dir();
        if (!cpu_root)
            return sbx__set_error(err, SBX_ECREATE,
                                  "a cpu limit needs the cpu cgroup controller, which is not mounted");
        _cleanup_free_ char *cpu = make_group(cpu_root, id, false, err);
        if (!cpu)
            return SBX_ECREATE;
        json_array_append_new(paths, json_string(cpu));
        if ((e = write_str(cpu, "cpu.cfs_period_us", "100000")) < 0)
            return limit_fail(err, e, cpu, "cpu.cfs_period_us", "100000");
        snprintf(v, sizeof(v), "%lld", (long long)(lim->cpu * 100000 + 0.5));
        if ((e = write_str(cpu, "cpu.cfs_quota_us", v)) < 0)
            return limit_fail(err, e, cpu, "cpu.cfs_quota_us", v);
    }
    return SBX_OK;
}

int sbx__cg_create(const char *id, const sbx_cg_limits *lim, json_t **paths_out, sbx_error **err)
{
    json_t *paths = json_array();
    if (!paths)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = SBX_OK;
    switch (sbx__cg_mode()) {
    case SBX_CG_V2:
        rc = setup_v2(id, lim, paths, err);
        break;
    case SBX_CG_V1:
        rc = setup_v1(id, lim, paths, err);
        break;
    case SBX_CG_NONE:
        if (lim->memory_bytes > 0 || lim->cpu > 0)
            rc = sbx__set_error(err, SBX_ECREATE,
                                "resource limits need cgroups, and no writable cgroup "
                                "filesystem is mounted at " CG_ROOT);
        break;
    }
    if (rc < 0) {
        sbx__cg_destroy(paths);
        json_decref(paths);
        return rc;
    }
    *paths_out = paths;
    return SBX_OK;
}

int sbx__cg_attach(const json_t *paths, pid_t pid, sbx_error **err)
{
    char v[32];
    snprintf(v, sizeof(v), "%d", (int)pid);
    size_t i;
    json_t *p;
    json_array_foreach(paths, i, p)
    {
        int e = write_str(json_string_value(p), "cgroup.procs", v);
        if (e < 0)
            return sbx__set_errno(err, SBX_ECREATE, -e, "cannot move the box into cgroup %s",
                                  json_string_value(p));
    }
    return SBX_OK;
}

/* Kills every process listed in a group (v1 has no cgroup.kill). */
static void kill_procs(const char *dir)
{
    _cleanup_free_ char *p = sbx__printf("%s/cgroup.procs", dir);
    char *data = NULL;
    size_t n = 0;
    if (!p || sbx__read_file(p, &data, &n) < 0)
        return;
    for (char *s = data; s && *s;) {
        char *end;
        long pid = strtol(s, &end, 10);
        if (end == s)
            break;
        if (pid > 1)
            kill((pid_t)pid, SIGKILL);
        s = end;
        while (*s == '\n')
            s++;
    }
    free(data);
}

const char *const *sbx__cg_parents(void)
{
    pthread_once(&name_once, pick_name);
    return parents;
}

bool sbx__cg_path_ok(const char *path, const char *id)
{
    if (!path || !sbx__linux_id_ok(id))
        return false;
    /* Compared as strings against the mounts: canonical by construction, no `..`, no link. */
    for (const char *const *pp = sbx__cg_parents(); *pp; pp++) {
        size_t pl = strlen(*pp);
        if (!strncmp(path, *pp, pl) && path[pl] == '/' && !strcmp(path + pl + 1, id))
            return true;
    }
    return false;
}

/*
 * Before a box's memory group goes: reclaim what is still charged to it.
 * Page cache the box first read (its binaries, its files) stays charged to a
 * removed group, which then lingers as a dying cgroup with its kernel
 * structures for as long as those pages stay cached: churn of many boxes
 * piles them up (issue 15). Reclaiming first lets the group go at rmdir. v1:
 * memory.force_empty (refused with EBUSY while a task is in the group, so it
 * is retried with the rmdir); v2: memory.reclaim of what memory.current says
 * (Linux 5.19+; absent before, and EAGAIN when not all could be reclaimed,
 * which is as good as it gets).
 */
static long long field(const char *text, const char *key);

/*
 * Bytes of reclaimable page cache charged to a memory group: memory.stat's
 * "cache" (v1) or "file" (v2), less "shmem": the box's own tmpfs is still
 * mounted while its shim tears down, and its pages cannot be reclaimed
 * without swap (they go with the tmpfs).
 */
static long long cached_bytes(const char *dir, bool v1)
{
    _cleanup_free_ char *p = sbx__printf("%s/memory.stat", dir);
    char *text = NULL;
    size_t n = 0;
    if (!p || sbx__read_file(p, &text, &n) < 0)
        return -1;
    long long v = field(text, v1 ? "cache" : "file"), shm = field(text, "shmem");
    free(text);
    return v - (shm > 0 ? shm : 0);
}

static bool reclaim_memory(const char *dir)
{
    bool v1 = !strncmp(dir, CG_ROOT "/memory/", strlen(CG_ROOT "/memory/"));
    size_t bl = strlen(v2_base), nl = strlen(v2_nomem);
    /* A box under sbx/.nomem has no memory controller, so nothing to reclaim. */
    if (!v1 && (sbx__cg_mode() != SBX_CG_V2 || strncmp(dir, v2_base, bl) || dir[bl] != '/' ||
                (!strncmp(dir, v2_nomem, nl) && dir[nl] == '/')))
        return true;
    /*
     * Only when page cache is charged: reclaim walks every shrinker on the
     * host for the group, over and over while kernel objects stay charged
     * (they go at removal anyway), which halved the stop rate of 1,000
     * boxes when it ran for every box.
     */
    long long cache = cached_bytes(dir, v1);
    if (cache <= 0)
        return true;
    if (v1)
        return write_str(dir, "memory.force_empty", "0") != -EBUSY;
    char v[32];
    snprintf(v, sizeof(v), "%lld", cache);
    write_str(dir, "memory.reclaim", v);
    return true;
}

int sbx__cg_destroy(const json_t *paths)
{
    int rc = 0;
    size_t i;
    json_t *p;
    json_array_foreach(paths, i, p)
    {
        const char *dir = json_string_value(p);
        const char *last = dir ? strrchr(dir, '/') : NULL;
        /*
         * Only a box's own group, <mount>/sbx/<id>: a path merely holding
         * "/sbx/" (a record's, say) could name any group on the host, and its
         * processes would be killed.
         */
        if (!last || !sbx__cg_path_ok(dir, last + 1))
            continue;
        /*
         * rmdir fails with EBUSY while a task is still attached, which lasts a
         * moment after the box's init has been reaped (its other processes are
         * released asynchronously). Kill stragglers and retry for up to ~2 s.
         */
        bool reclaimed = false;
        for (int tries = 0;; tries++) {
            if (!reclaimed)
                reclaimed = reclaim_memory(dir);
            if (rmdir(dir) == 0 || errno == ENOENT) {
                /*
                 * The shared levels go with the last box (EBUSY while others
                 * live): sbx/.nomem, then sbx/.
                 */
                _cleanup_free_ char *parent = strdup(dir);
                char *slash = parent ? strrchr(parent, '/') : NULL;
                if (slash) {
                    /* sbx__cg_path_ok said the parent is one of sbx__cg_parents(). */
                    *slash = 0;
                    if (!strcmp(parent, v2_nomem) && rmdir(parent) == 0)
                        snprintf(parent, strlen(parent) + 1, "%s", v2_base);
                    if (strcmp(parent, v2_nomem) != 0) {
                        /* An empty .nomem would hold sbx/ (the last box may be a limited one). */
                        if (!strcmp(parent, v2_base))
                            rmdir(v2_nomem);
                        rmdir(parent);
                    }
                }
                break;
            }
            if (errno != EBUSY || tries >= 400) {
                rc = -errno;
                break;
            }
            if (tries % 20 == 0)
                kill_procs(dir);
            struct timespec ts = { 0, 5 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
    return rc;
}

static long long field(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *s = text; s && *s;) {
        if (!strncmp(s, key, kl) && s[kl] == ' ')
            return strtoll(s + kl + 1, NULL, 10);
        s = strchr(s, '\n');
        if (s)
            s++;
    }
    return -1;
}

/* One number in a cgroup file ("max": no limit, -2); -1 when it cannot be read. */
static long long cg_number(const char *dir, const char *file)
{
    _cleanup_free_ char *p = sbx__printf("%s/%s", dir, file);
    char *text = NULL;
    size_t n = 0;
    if (!p || sbx__read_file(p, &text, &n) < 0)
        return -1;
    long long v = !strncmp(text, "max", 3) ? -2 : strtoll(text, NULL, 10);
    free(text);
    return v;
}

static json_t *number_or_null(long long v) { return v >= 0 ? json_integer(v) : json_null(); }

/*
 * What the box's groups say it uses (sbx_sandbox_stats): v2 from its one
 * group (cpu.stat's usage_usec, memory.current, memory.max, pids.current,
 * pids.max), v1 from each controller's (cpuacct.usage,
 * memory.usage_in_bytes, memory.limit_in_bytes, pids.*). Memory is counted
 * as docker stats counts it: less the inactive file cache. A group the box
 * has not (v1 makes a memory group only under a limit) gives nulls.
 */
/* utime + stime + cutime + cstime of the processes in group `dir`, in ns; -1 unknown. */
static long long procs_cpu_ns(const char *dir)
{
    _cleanup_free_ char *path = sbx__printf("%s/cgroup.procs", dir);
    char *pids = NULL;
    size_t n = 0;
    if (!path || sbx__read_file(path, &pids, &n) < 0)
        return -1;
    long tick = sysconf(_SC_CLK_TCK);
    long long ticks = 0;
    int seen = 0;
    for (char *q = pids; *q && seen < 4096; seen++) {
        char *end = NULL;
        long pid = strtol(q, &end, 10);
        if (end == q)
            break;
        q = *end ? end + 1 : end;
        char sp[64], *st = NULL;
        size_t sl = 0;
        snprintf(sp, sizeof(sp), "/proc/%ld/stat", pid);
        if (pid <= 0 || sbx__read_file(sp, &st, &sl) < 0)
            continue;
        /* After "(comm)", whose bytes are the process's own: fields 14-17 from the last ')'. */
        const char *r = strrchr(st, ')');
        unsigned long long f[4] = {0};
        if (r && sscanf(r + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
                        &f[0], &f[1], &f[2], &f[3]) == 4)
            ticks += (long long)(f[0] + f[1] + f[2] + f[3]);
        free(st);
    }
    free(pids);
    return tick > 0 ? ticks * (1000000000LL / tick) : -1;
}

/* `*slot` takes `v` when the group told it (a number, or -2 for "max"). */
static void known(long long *slot, long long v)
{
    if (v >= 0 || v == -2)
        *slot = v;
}

/* Memory in use less the inactive file cache (`key` in memory.stat), as docker stats counts. */
static long long memory_in_use(const char *dir, long long cur, const char *key)
{
    _cleanup_free_ char *p = sbx__printf("%s/memory.stat", dir);
    char *text = NULL;
    size_t n = 0;
    long long inactive = -1;
    if (p && sbx__read_file(p, &text, &n) == 0) {
        inactive = field(text, key);
        free(text);
    }
    return inactive > 0 && inactive < cur ? cur - inactive : cur;
}

json_t *sbx__cg_stats(const json_t *paths)
{
    long long cpu_ns = -1, mem = -1, mem_limit = -1, pids = -1, pids_limit = -1;
    size_t i;
    json_t *p;
    json_array_foreach(paths, i, p)
    {
        const char *dir = json_string_value(p);
        if (!dir)
            continue;
        /* cgroup2: the whole tree on pure v2, /sys/fs/cgroup/unified's on a hybrid host. */
        bool v2 = sbx__cg_mode() == SBX_CG_V2 || strstr(dir, "/unified/");
        if (v2) {
            /* cpu.stat's usage_usec is kept with or without the cpu controller. */
            _cleanup_free_ char *cs = sbx__printf("%s/cpu.stat", dir);
            char *text = NULL;
            size_t n = 0;
            if (cs && sbx__read_file(cs, &text, &n) == 0) {
                long long us = field(text, "usage_usec");
                if (us >= 0)
                    cpu_ns = us * 1000;
                free(text);
            }
            known(&pids, cg_number(dir, "pids.current"));
            known(&pids_limit, cg_number(dir, "pids.max"));
            long long cur = cg_number(dir, "memory.current");
            if (cur >= 0) {
                known(&mem_limit, cg_number(dir, "memory.max"));
                mem = memory_in_use(dir, cur, "inactive_file");
            }
        } else if (strstr(dir, "/cpuacct/") || strstr(dir, "/cpu,cpuacct/")) {
            known(&cpu_ns, cg_number(dir, "cpuacct.usage"));
        } else if (strstr(dir, "/pids/")) {
            known(&pids, cg_number(dir, "pids.current"));
            known(&pids_limit, cg_number(dir, "pids.max"));
        } else if (strstr(dir, "/memory/")) {
            long long cur = cg_number(dir, "memory.usage_in_bytes");
            if (cur >= 0) {
                long long lim = cg_number(dir, "memory.limit_in_bytes");
                /* v1's "no limit" is a huge number (PAGE_COUNTER_MAX pages). */
                known(&mem_limit, lim >= (1LL << 60) ? -2 : lim);
                mem = memory_in_use(dir, cur, "total_inactive_file");
            }
        }
    }
    /*
     * v1 with no cpuacct group (a box without a CPU limit has only a pids
     * group): the CPU time of its processes and of the children they
     * reaped, from /proc (the box's init reaps its orphans, so little is lost).
     */
    json_array_foreach(paths, i, p)
    {
        const char *dir = json_string_value(p);
        if (cpu_ns < 0 && dir && strstr(dir, "/pids/"))
            cpu_ns = procs_cpu_ns(dir);
    }
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "cpu_ns", number_or_null(cpu_ns),
                     "memory_bytes", number_or_null(mem), "memory_limit",
                     number_or_null(mem_limit), "pids", number_or_null(pids), "pids_limit",
                     number_or_null(pids_limit));
}

long long sbx__cg_oom_kills(const json_t *paths)
{
    size_t i;
    json_t *p;
    json_array_foreach(paths, i, p)
    {
        const char *dir = json_string_value(p);
        if (!dir)
            continue;
        const char *file = NULL;
        if (strstr(dir, "/memory/"))
            file = "memory.oom_control"; /* v1: "oom_kill N" since Linux 4.13 */
        else if (sbx__cg_mode() == SBX_CG_V2)
            file = "memory.events"; /* v2: "oom_kill N" */
        if (!file)
            continue;
        _cleanup_free_ char *path = sbx__printf("%s/%s", dir, file);
        char *data = NULL;
        size_t n = 0;
        if (!path || sbx__read_file(path, &data, &n) < 0)
            return -1;
        long long v = field(data, "oom_kill");
        free(data);
        return v;
    }
    return -1;
}
