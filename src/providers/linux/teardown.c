/*
 * Teardown slots and the stop deadline.
 *
 * A stop of thousands of boxes at once signals thousands of shims, and each
 * one's teardown (reaping its pid namespace, removing its cgroups, its
 * directory) is kernel work that slows every other one down: run all at once,
 * each takes as long as all of them together, and a stop that waits a fixed
 * time from its signal reports failure for boxes that do end. So:
 *
 * - A shim tears down only while it holds one of a few slots, byte-range OFD
 *   locks on <state_dir>/teardown.lock (released by the kernel when the shim
 *   exits, however it exits): the teardowns in progress are bounded.
 * - It says where it stands in <box_dir>/teardown, "q <ns>" while it waits for
 *   a slot and "t <ns>" once its own teardown began (CLOCK_BOOTTIME), and a
 *   stop's deadline counts from the "t": it covers the box's own teardown, not
 *   its wait behind the others.
 */
#include "providers/linux/linux.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MARKER_LEN 23 /* "q " + 20 digits + "\n" */

static unsigned long long boot_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void mark(int fd, char state)
{
    char line[MARKER_LEN + 1];
    snprintf(line, sizeof(line), "%c %020llu\n", state, boot_ns());
    /* Fixed width at offset 0: a reader sees the old line or the new one. */
    if (fd >= 0 && pwrite(fd, line, MARKER_LEN, 0) != MARKER_LEN) {
        /* Best effort: without the marker a stop keeps its plain deadline. */
    }
}

unsigned sbx__linux_teardown_slots(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    /*
     * Much of a teardown waits on the kernel (RCU grace periods, the pid
     * namespace's reaper), not on a CPU: a few per core keep the cores busy
     * without piling every box's teardown on top of the others.
     */
    long k = (cpus > 0 ? cpus : 1) * 4;
    return (unsigned)(k < 8                              ? 8
                      : k > SBX_LINUX_TEARDOWN_SLOTS_MAX ? SBX_LINUX_TEARDOWN_SLOTS_MAX
                                                         : k);
}

static bool lock_byte(int fd, unsigned i, bool wait)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = i, .l_len = 1};
    for (;;) {
        if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) == 0)
            return true;
        if (errno != EINTR)
            return false;
    }
}

void sbx__linux_teardown_prepare(const char *state_dir, const char *box_dir, int fds[2])
{
    _cleanup_free_ char *mpath = box_dir ? sbx__printf("%s/teardown", box_dir) : NULL;
    _cleanup_free_ char *lpath = state_dir ? sbx__printf("%s/teardown.lock", state_dir) : NULL;
    fds[0] = mpath ? open(mpath, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
    fds[1] = lpath ? open(lpath, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
    /* Written to its full length now: the marks later overwrite it in place. */
    mark(fds[0], 'r');
}

int sbx__linux_teardown_begin(const char *state_dir, const char *box_dir, unsigned slots,
                              const int prepared[2])
{
    int fds[2] = { prepared ? prepared[0] : -1, prepared ? prepared[1] : -1 };
    if (fds[0] < 0 && fds[1] < 0)
        sbx__linux_teardown_prepare(state_dir, box_dir, fds);
    _cleanup_close_ int mfd = fds[0];
    mark(mfd, 'q');
    int lfd = fds[1];
    if (lfd >= 0 && slots > 0) {
        /* A free slot if there is one; else queue on one picked by pid. */
        bool got = false;
        for (unsigned i = 0; i < slots && !got; i++)
            got = lock_byte(lfd, i, false);
        if (!got && !lock_byte(lfd, (unsigned)getpid() % slots, true)) {
            /* Locks refused (a filesystem without them): tear down unbounded. */
        }
    }
    mark(mfd, 't');
    return lfd;
}

char sbx__linux_teardown_marker_parse(const char *data, size_t len, unsigned long long *at)
{
    /* Exactly "<r|q|t> <20 digits>\n": anything else is no marker. */
    if (len != MARKER_LEN || (data[0] != 'r' && data[0] != 'q' && data[0] != 't') ||
        data[1] != ' ' ||
        data[MARKER_LEN - 1] != '\n')
        return 0;
    unsigned long long v = 0;
    for (size_t i = 2; i < MARKER_LEN - 1; i++) {
        if (data[i] < '0' || data[i] > '9')
            return 0;
        unsigned d = (unsigned)(data[i] - '0');
        if (v > (ULLONG_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *at = v;
    return data[0];
}

/*
 * A process in the kernel (D: a filesystem under thousands of teardowns'
 * metadata writes, say) or waiting for a CPU (R) is on its way, not stuck in
 * user space: a shim so found before its first mark is waited for like a
 * queued one.
 */
static bool busy_in_kernel(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    _cleanup_close_ int fd = pid > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (n <= 0)
        return false;
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* the command name may hold anything */
    return rp && rp[1] == ' ' && (rp[2] == 'D' || rp[2] == 'R');
}

double sbx__linux_stop_time_left(const char *box_dir, pid_t pid, double timeout_s,
                                 double waited_s)
{
    _cleanup_free_ char *p = box_dir ? sbx__printf("%s/teardown", box_dir) : NULL;
    _cleanup_close_ int fd = p ? open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    char buf[MARKER_LEN + 1];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf), 0) : -1;
    unsigned long long at = 0;
    char state = n > 0 ? sbx__linux_teardown_marker_parse(buf, (size_t)n, &at) : 0;
    if (state == 't') {
        unsigned long long now = boot_ns();
        double ran = now > at ? (double)(now - at) / 1e9 : 0;
        return ran < timeout_s ? timeout_s - ran : 0;
    }
    /*
     * No marker and no box directory: the shim removed both on its way out
     * and is about to exit. Like a queued one, waited for within the bound.
     */
    struct stat st;
    if (!state && box_dir && stat(box_dir, &st) < 0 && errno == ENOENT)
        state = 'q';
    if ((!state || state == 'r') && busy_in_kernel(pid))
        state = 'q';
    if (state == 'q') {
        /*
         * Queued behind other boxes' teardowns: wait on, up to a bound that
         * still ends a stop if a teardown ahead hangs in the kernel.
         */
        double cap = timeout_s * SBX_LINUX_STOP_QUEUE_FACTOR;
        return waited_s < cap ? (cap - waited_s < timeout_s ? cap - waited_s : timeout_s) : 0;
    }
    /* No mark since it started: the shim never took the signal in; the plain deadline holds. */
    return waited_s < timeout_s ? timeout_s - waited_s : 0;
}

void sbx__linux_stop_where(const char *box_dir, pid_t pid, char *buf, size_t len)
{
    _cleanup_free_ char *p = box_dir ? sbx__printf("%s/teardown", box_dir) : NULL;
    _cleanup_close_ int fd = p ? open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    char m[MARKER_LEN + 1];
    ssize_t n = fd >= 0 ? pread(fd, m, sizeof(m), 0) : -1;
    unsigned long long at = 0, now = boot_ns();
    char state = n > 0 ? sbx__linux_teardown_marker_parse(m, (size_t)n, &at) : 0;
    double since = now > at ? (double)(now - at) / 1e9 : 0;
    struct stat st;
    if (state == 't')
        snprintf(buf, len, "its teardown began %.1f s ago", since);
    else if (state == 'q')
        snprintf(buf, len, "it has waited %.1f s for a teardown slot", since);
    else if (state != 'r' && box_dir && stat(box_dir, &st) < 0 && errno == ENOENT)
        snprintf(buf, len, "its directory is gone, the process not yet");
    else {
        /* What the process was doing: its state, and its CPU time and wait for a CPU so far. */
        char path[64], st_buf[512] = "", sched[128] = "";
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        _cleanup_close_ int sfd = pid > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        ssize_t k = sfd >= 0 ? read(sfd, st_buf, sizeof(st_buf) - 1) : -1;
        st_buf[k > 0 ? k : 0] = 0;
        const char *rp = strrchr(st_buf, ')');
        snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
        _cleanup_close_ int cfd = pid > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        k = cfd >= 0 ? read(cfd, sched, sizeof(sched) - 1) : -1;
        sched[k > 0 ? k : 0] = 0;
        unsigned long long run = 0, wait = 0;
        sscanf(sched, "%llu %llu", &run, &wait);
        snprintf(buf, len, "it has not begun its teardown (state %c, %.3f s run, %.3f s waited for "
                 "a CPU)",
                 rp && rp[1] == ' ' ? rp[2] : '?', (double)run / 1e9, (double)wait / 1e9);
    }
}

void sbx__linux_pid_hint(int err, char *buf, size_t len)
{
    buf[0] = 0;
    if (err != EAGAIN)
        return;
    /* /proc/loadavg's fourth field: runnable/total threads on the host. */
    char la[128] = "", pm[32] = "", tm[32] = "";
    _cleanup_close_ int a = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    _cleanup_close_ int b = open("/proc/sys/kernel/pid_max", O_RDONLY | O_CLOEXEC);
    _cleanup_close_ int c = open("/proc/sys/kernel/threads-max", O_RDONLY | O_CLOEXEC);
    ssize_t n = a >= 0 ? read(a, la, sizeof(la) - 1) : -1;
    la[n > 0 ? n : 0] = 0;
    n = b >= 0 ? read(b, pm, sizeof(pm) - 1) : -1;
    pm[n > 0 ? n : 0] = 0;
    n = c >= 0 ? read(c, tm, sizeof(tm) - 1) : -1;
    tm[n > 0 ? n : 0] = 0;
    const char *slash = strchr(la, '/');
    sbx__linux_pid_hint_for(slash ? strtoll(slash + 1, NULL, 10) : -1, strtoll(pm, NULL, 10),
                            strtoll(tm, NULL, 10), buf, len);
}

void sbx__linux_pid_hint_for(long long threads, long long pid_max, long long threads_max,
                             char *buf, size_t len)
{
    buf[0] = 0;
    /* Within a tenth of a host limit: that is what refused the fork, not this box. */
    if (threads > 0 && pid_max > 0 && threads * 10 >= pid_max * 9)
        snprintf(buf, len,
                 " (the host is out of process ids: %lld threads, kernel.pid_max %lld; two per "
                 "box: raise it, e.g. sysctl -w kernel.pid_max=4194304; docs/scale.md)",
                 threads, pid_max);
    else if (threads > 0 && threads_max > 0 && threads * 10 >= threads_max * 9)
        snprintf(buf, len,
                 " (the host is out of threads: %lld of kernel.threads-max %lld; docs/scale.md)",
                 threads, threads_max);
}
