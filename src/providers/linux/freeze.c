/*
 * Freezing a box, and who undoes it.
 *
 * `sbx commit` freezes a box while it copies the box's writable layer
 * (image_commit.c), as Docker pauses a container: on cgroup v2 through the
 * box's group's cgroup.freeze; on v1, whose sbx groups (memory, pids, cpu)
 * have no freezer, by moving the box's processes into a freezer group of
 * their own, <freezer>/<level>/<id>, freezing that, and afterwards thawing
 * it, moving the processes back to the freezer hierarchy's root (where they
 * were: sbx makes no other v1 freezer groups) and removing the group.
 *
 * A frozen box answers nothing, and on v1 a frozen process does not even
 * die of SIGKILL until it is thawed, so a freeze whose maker died (a
 * `sbx commit` killed with SIGKILL mid-copy) held the box for good: exec and
 * stop timed out, the TTL and gc could not end it (issue 24). Two rules
 * now keep every freeze owned:
 *
 * 1. Whoever ends a box thaws it first. The shim's teardown (a stop, the
 *    TTL, gc's stop of an expired box), the removal of a dead shim's
 *    leftovers (stop, gc) and gc's sweep of groups that no shim owns call
 *    sbx__cg_thaw before they kill. It touches only what sbx makes (the
 *    box's own v2 groups, its v1 freezer group), costs a write or a stat
 *    when nothing is frozen, and may run any number of times from any
 *    process.
 *
 * 2. A commit's freeze has an owner the kernel keeps track of: the file
 *    <box dir>/freeze, which the committing process creates already locked
 *    (flock: made under a temporary name, locked, then linked into place,
 *    so the name never exists unlocked while its maker lives) and holds
 *    until it has thawed the box and removed the file. The lock goes with
 *    that process however it ends, kill -9 included. A freeze file nobody
 *    holds is therefore a freeze without an owner: the box's shim, which
 *    outlives any commit, looks for one each time it checks its directory
 *    (every 2 s) and thaws the box; the next commit does the same before it
 *    freezes. A lock rather than a recorded pid and start time: nothing to
 *    compare, no pid reuse, no window between two steps of a dying process.
 *    The file also says who holds it ("pid start"), for messages only.
 */
#include "providers/linux/linux.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define V1_FREEZER "/sys/fs/cgroup/freezer"
#define FREEZE_FILE "freeze"
#define PAUSED_FILE "paused"

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Whether the cgroup.procs text `list` (`n` bytes) names `pid`. */
static bool has_pid(const char *list, size_t n, const char *pid)
{
    size_t l = strlen(pid);
    for (const char *p = list; p && p < list + n;) {
        const char *e = memchr(p, '\n', (size_t)(list + n - p));
        size_t k = e ? (size_t)(e - p) : (size_t)(list + n - p);
        if (k == l && !memcmp(p, pid, l))
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

/*
 * Moves each process `from_procs` lists that `to_procs` does not into it
 * (one pid a write: cgroup v1). Returns how many were missing, -1 when a
 * list cannot be read.
 */
static int move_procs(const char *from_procs, const char *to_procs)
{
    _cleanup_free_ char *t = NULL;
    _cleanup_free_ char *have = NULL;
    size_t n = 0, hn = 0;
    if (sbx__read_file(from_procs, &t, &n) < 0 || sbx__read_file(to_procs, &have, &hn) < 0)
        return -1;
    int missing = 0;
    for (char *save = NULL, *pid = strtok_r(t, "\n", &save); pid;
         pid = strtok_r(NULL, "\n", &save)) {
        if (has_pid(have, hn, pid))
            continue;
        char p[64];
        snprintf(p, sizeof(p), "/proc/%s", pid);
        if (sbx__cg_write(to_procs, pid) == 0 || access(p, F_OK) == 0)
            missing++; /* moved now, or still there and not movable: checked again */
    }
    return missing;
}

char *sbx__cg_v1_freezer_group(const char *id)
{
    if (!id)
        return sbx__printf(V1_FREEZER "/%s", sbx__cg_name());
    return sbx__linux_id_ok(id) ? sbx__printf(V1_FREEZER "/%s/%s", sbx__cg_name(), id) : NULL;
}

/* v2: freezes group `cg` and waits until every process stopped (at most 5 s); false: undone. */
static bool v2_freeze(const char *cg)
{
    _cleanup_free_ char *fp = sbx__printf("%s/cgroup.freeze", cg);
    _cleanup_free_ char *ep = sbx__printf("%s/cgroup.events", cg);
    if (!fp || !ep || sbx__cg_write(fp, "1") < 0)
        return false;
    /* "frozen 1" once every process stopped; a bounded wait, else not frozen. */
    for (int i = 0; i < 500; i++) {
        _cleanup_free_ char *t = NULL;
        size_t n = 0;
        if (sbx__read_file(ep, &t, &n) < 0)
            break;
        if (strstr(t, "frozen 1"))
            return true;
        nap_ms(10);
    }
    sbx__cg_write(fp, "0");
    return false;
}

/* v1: thaws freezer group `group`, moves its processes back to the root, removes it. */
static void v1_thaw(const char *group)
{
    _cleanup_free_ char *state = sbx__printf("%s/freezer.state", group);
    _cleanup_free_ char *procs = sbx__printf("%s/cgroup.procs", group);
    if (!state || !procs)
        return;
    sbx__cg_write(state, "THAWED");
    for (int i = 0; i < 100 && move_procs(procs, V1_FREEZER "/cgroup.procs") > 0; i++)
        ;
    for (int i = 0; i < 100 && rmdir(group) < 0 && errno == EBUSY; i++)
        nap_ms(10);
    /* <freezer>/<level> too, unless another box's group is in it (then EBUSY: it stays). */
    _cleanup_free_ char *top = sbx__cg_v1_freezer_group(NULL);
    if (top)
        rmdir(top);
}

/*
 * v1: moves the processes of group `box_cg` into the new freezer group
 * `group` and freezes it. A process forked meanwhile by one not yet moved
 * is found by the next pass; one forked by a moved process is born in the
 * group. False (the caller undoes it) when not every process got in.
 */
static bool v1_freeze(const char *box_cg, const char *group)
{
    _cleanup_free_ char *from = sbx__printf("%s/cgroup.procs", box_cg);
    _cleanup_free_ char *top = sbx__cg_v1_freezer_group(NULL);
    _cleanup_free_ char *procs = sbx__printf("%s/cgroup.procs", group);
    _cleanup_free_ char *state = sbx__printf("%s/freezer.state", group);
    if (!from || !top || !procs || !state || (mkdir(top, 0755) < 0 && errno != EEXIST))
        return false;
    if (mkdir(group, 0755) < 0) {
        /*
         * Left by a freeze of an sbx that predates the owner file (this
         * caller owns the box's freeze now): undone, then made afresh.
         */
        if (errno != EEXIST)
            return false;
        v1_thaw(group);
        if ((mkdir(top, 0755) < 0 && errno != EEXIST) || mkdir(group, 0755) < 0)
            return false;
    }
    int moved = 0;
    for (int i = 0; i < 100 && (moved = move_procs(from, procs)) > 0; i++)
        ;
    if (moved != 0 || sbx__cg_write(state, "FROZEN") < 0)
        return false;
    for (int i = 0; i < 500; i++) {
        _cleanup_free_ char *t = NULL;
        size_t n = 0;
        if (sbx__read_file(state, &t, &n) < 0)
            return false;
        if (!strncmp(t, "FROZEN", 6))
            /* Every process of the box is in the group (none was left to move). */
            return move_procs(from, procs) == 0;
        nap_ms(10);
    }
    return false;
}

/* Whether the v1 freezer hierarchy is mounted where sbx looks (its root has no freezer.state). */
static bool v1_freezer_mounted(void)
{
    struct stat st;
    return stat(V1_FREEZER "/freezer.state", &st) < 0 && stat(V1_FREEZER "/cgroup.procs", &st) == 0;
}

bool sbx__cg_freeze(const char *id, const json_t *cgroups)
{
    const char *cg = json_string_value(json_array_get(cgroups, 0));
    if (!cg || !sbx__cg_path_ok(cg, id))
        return false;
    if (sbx__cg_mode() == SBX_CG_V2)
        return v2_freeze(cg);
    if (sbx__cg_mode() != SBX_CG_V1 || !v1_freezer_mounted())
        return false;
    _cleanup_free_ char *group = sbx__cg_v1_freezer_group(id);
    if (!group)
        return false;
    if (v1_freeze(cg, group))
        return true;
    v1_thaw(group); /* also a freeze that failed half way */
    return false;
}

void sbx__cg_thaw(const char *id, const json_t *cgroups)
{
    if (!sbx__linux_id_ok(id))
        return;
    /* v2: only the box's own groups (a record's paths are checked to be, but once more here). */
    size_t i;
    json_t *p;
    json_array_foreach(cgroups, i, p)
    {
        const char *cg = json_string_value(p);
        if (sbx__cg_mode() != SBX_CG_V2 || !sbx__cg_path_ok(cg, id))
            continue;
        _cleanup_free_ char *fp = sbx__printf("%s/cgroup.freeze", cg);
        if (fp)
            sbx__cg_write(fp, "0"); /* a no-op for a group that is not frozen */
    }
    _cleanup_free_ char *group = sbx__cg_v1_freezer_group(id);
    struct stat st;
    if (group && stat(group, &st) == 0)
        v1_thaw(group);
}

/* Reads `dir`/`file` into buf (NUL-terminated); false when it cannot. */
static bool read_small(const char *dir, const char *rel, const char *file, char *buf, size_t n)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s%s/%s", dir, rel, file) >= sizeof(path))
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t k = read(fd, buf, n - 1);
    close(fd);
    if (k < 0)
        return false;
    buf[k] = 0;
    return true;
}

bool sbx__cg_pid_frozen(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
    _cleanup_free_ char *text = NULL;
    size_t n = 0;
    if (pid <= 0 || sbx__read_file(p, &text, &n) < 0)
        return false;
    /* Lines "N:controllers:path"; v2's is "0::path". Paths are the caller's view: the mounts'. */
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || !strcmp(c2 + 1, "/") || strstr(c2 + 1, ".."))
            continue;
        *c1 = 0;
        *c2 = 0;
        const char *path = c2 + 1;
        char *ctl = c1 + 1;
        char buf[256];
        if (!strcmp(line, "0") && !*ctl) {
            /* v2: the unified mount at the root, or beside v1 on a hybrid host. */
            const char *root =
                sbx__cg_mode() == SBX_CG_V2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified";
            if (read_small(root, path, "cgroup.events", buf, sizeof(buf)) &&
                strstr(buf, "frozen 1"))
                return true;
            if (read_small(root, path, "cgroup.freeze", buf, sizeof(buf)) && buf[0] == '1')
                return true; /* still freezing */
            continue;
        }
        /* v1: the freezer's own line ("freezer", or joined with others). */
        bool freezer = false;
        for (char *s2 = NULL, *c = strtok_r(ctl, ",", &s2); c; c = strtok_r(NULL, ",", &s2))
            freezer |= !strcmp(c, "freezer");
        if (freezer && read_small(V1_FREEZER, path, "freezer.state", buf, sizeof(buf)) &&
            (!strncmp(buf, "FROZEN", 6) || !strncmp(buf, "FREEZING", 8)))
            return true;
    }
    return false;
}

/* --- the owner of a commit's freeze -------------------------------------- */

int sbx__linux_freeze_own(const char *box_dir, const char *id, const json_t *cgroups,
                          sbx_error **err)
{
    _cleanup_free_ char *path = sbx__printf("%s/" FREEZE_FILE, box_dir);
    char rnd[17];
    sbx__random_hex(rnd, 8);
    _cleanup_free_ char *tmp = sbx__printf("%s/." FREEZE_FILE "-%s", box_dir, rnd);
    if (!path || !tmp)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot create %s", tmp);
    char who[64];
    int wl =
        snprintf(who, sizeof(who), "%d %llu\n", (int)getpid(), sbx__linux_proc_start(getpid()));
    if (flock(fd, LOCK_EX | LOCK_NB) < 0 || write(fd, who, (size_t)wl) != wl) {
        int e = errno;
        unlink(tmp);
        close(fd);
        return sbx__set_errno(err, SBX_EIO, e, "cannot lock %s", tmp);
    }
    /* Twice: an owner that died leaves its file, which reap removes (thawing the box). */
    int rc = SBX_OK;
    for (int tries = 0; tries < 2; tries++) {
        if (link(tmp, path) == 0) {
            unlink(tmp);
            return fd;
        }
        if (errno != EEXIST) {
            rc = sbx__set_errno(err, SBX_EIO, errno, "cannot create %s", path);
            break;
        }
        if (!sbx__linux_freeze_reap(box_dir, id, cgroups) || tries == 1) {
            char holder[64] = "";
            _cleanup_free_ char *t = NULL;
            if (sbx__read_file(path, &t, NULL) == 0)
                snprintf(holder, sizeof(holder), " (pid %ld)", strtol(t, NULL, 10));
            rc = sbx__set_error(err, SBX_ESTATE,
                                "box %s is frozen by another commit%s: commit it again once "
                                "that one has finished",
                                id, holder);
            break;
        }
    }
    unlink(tmp);
    close(fd);
    return rc;
}

void sbx__linux_freeze_release(const char *box_dir, const char *id, const json_t *cgroups, int fd)
{
    if (fd < 0)
        return;
    /* In this order: thawed, then the name gone, then the lock (see reap). A paused box stays so. */
    if (!sbx__linux_paused(box_dir))
        sbx__cg_thaw(id, cgroups);
    _cleanup_free_ char *path = sbx__printf("%s/" FREEZE_FILE, box_dir);
    if (path)
        unlink(path);
    close(fd);
}

bool sbx__linux_freeze_reap(const char *box_dir, const char *id, const json_t *cgroups)
{
    _cleanup_free_ char *path = sbx__printf("%s/" FREEZE_FILE, box_dir);
    int fd = path ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd < 0)
        return path != NULL; /* no file: nobody's freeze to undo (the usual case) */
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        close(fd);
        return false; /* its owner lives */
    }
    /*
     * The lock is ours. Only the file still under the name counts: one its
     * owner removed before letting go (a finished commit), or one that a
     * new owner has linked since, is left alone.
     */
    struct stat a, b;
    if (fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
        if (!sbx__linux_paused(box_dir))
            sbx__cg_thaw(id, cgroups);
        unlink(path);
    }
    close(fd);
    return true;
}

/* --- pause and resume ------------------------------------------------------ */

/*
 * A pause is a freeze with no end of its own: <box dir>/paused says the box
 * is to stay frozen until a resume, so a commit's freeze (released or
 * reaped) leaves it frozen, while a stop, gc and the shim's TTL still thaw
 * it before they kill (they end the box: its pause with it).
 */
bool sbx__linux_paused(const char *box_dir)
{
    _cleanup_free_ char *path = sbx__printf("%s/" PAUSED_FILE, box_dir);
    struct stat st;
    return path && lstat(path, &st) == 0;
}

int sbx__linux_pause(const char *box_dir, const char *id, const json_t *cgroups, sbx_error **err)
{
    _cleanup_free_ char *path = sbx__printf("%s/" PAUSED_FILE, box_dir);
    if (!path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "pausing box %s: cannot create %s", id, path);
    char who[64];
    int wl = snprintf(who, sizeof(who), "%d %llu\n", (int)getpid(), sbx__linux_proc_start(getpid()));
    ssize_t w = write(fd, who, (size_t)wl);
    close(fd);
    (void)w; /* who paused it, for people reading the box directory only */
    if (!sbx__cg_freeze(id, cgroups)) {
        unlink(path);
        return sbx__set_error(err, SBX_ENOTSUP,
                              "cannot pause box %s: its processes could not be frozen (it needs "
                              "cgroup v2's cgroup.freeze, or the v1 freezer mounted at "
                              "/sys/fs/cgroup/freezer)",
                              id);
    }
    return SBX_OK;
}

int sbx__linux_resume(const char *box_dir, const char *id, const json_t *cgroups, sbx_error **err)
{
    _cleanup_free_ char *path = sbx__printf("%s/" PAUSED_FILE, box_dir);
    if (!path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /* The name first: a commit ending meanwhile then thaws it too, never leaves it frozen. */
    if (unlink(path) < 0 && errno != ENOENT)
        return sbx__set_errno(err, SBX_EIO, errno, "resuming box %s: cannot remove %s", id, path);
    sbx__cg_thaw(id, cgroups);
    return SBX_OK;
}
