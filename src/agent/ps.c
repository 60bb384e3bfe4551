/*
 * PS: the box's processes as its /proc shows them (the agent is in the
 * box's pid namespace, so /proc lists the box's processes only), for
 * `sbx top` and sbx_sandbox_top. Bounded: at most SBX_PROCS_MAX_PS
 * processes (the answer says when there were more), each file read with a
 * fixed buffer. It runs on the agent's loop: one pass over /proc, a few
 * milliseconds for thousands of processes.
 */
#include "agent/agent.h"
#include "proto/procs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads up to cap-1 bytes of `path` (NUL-terminated); -1 when it cannot be read. */
static ssize_t slurp(int dirfd, const char *path, char *buf, size_t cap)
{
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got < cap - 1) {
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = 0;
    return (ssize_t)got;
}

/* The box's /etc/passwd (read inside the root, as exec's users are), at most 1 MiB. */
static char *passwd_db(void)
{
    int fd = root_open("/etc/passwd", O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
    if (fd < 0)
        return NULL;
    size_t cap = 1u << 20, got = 0;
    char *db = malloc(cap + 1);
    while (db && got < cap) {
        ssize_t n = read(fd, db + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (db)
        db[got] = 0;
    return db;
}

/* The name of `uid` in the passwd text, into out (cut at SBX_PROCS_USER_MAX); "" if none. */
static void user_name(const char *db, uint32_t uid, char *out)
{
    out[0] = 0;
    for (const char *line = db; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            char *num_end;
            unsigned long v = strtoul(c2 + 1, &num_end, 10);
            if (num_end > c2 + 1 && *num_end == ':' && v == uid) {
                size_t n = (size_t)(c1 - line);
                if (n > SBX_PROCS_USER_MAX)
                    n = SBX_PROCS_USER_MAX;
                memcpy(out, line, n);
                out[n] = 0;
                return;
            }
        }
        line = end ? end + 1 : NULL;
    }
}

/* Fills `e` from /proc/PID; false when the process went away meanwhile. */
static bool read_proc(int procfd, long pid, long ticks, long page_kib, uint64_t btime_ms,
                      const char *passwd, sbx_ps_entry *e)
{
    char dir[32], buf[1024];
    snprintf(dir, sizeof(dir), "%ld", pid);
    int dfd = openat(procfd, dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return false;
    struct stat st;
    bool ok = fstat(dfd, &st) == 0 && slurp(dfd, "stat", buf, sizeof(buf)) > 0;
    /* pid (comm) state ppid ...: comm may hold spaces and ')', so start after the last ')'. */
    const char *rp = ok ? strrchr(buf, ')') : NULL;
    char state = 0;
    int ppid = 0;
    unsigned long long ut = 0, stime = 0, start = 0, rss = 0;
    if (!rp || sscanf(rp + 1,
                      " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d"
                      " %llu %*u %llu",
                      &state, &ppid, &ut, &stime, &start, &rss) != 6) {
        close(dfd);
        return false;
    }
    e->pid = (uint32_t)pid;
    e->ppid = (uint32_t)ppid;
    e->uid = (uint32_t)st.st_uid;
    e->state = state >= 'A' && state <= 'z' ? state : '?';
    if (e->state == '?')
        e->state = 'X';
    e->rss_kib = rss * (unsigned long long)page_kib;
    e->cpu_ms = (ut + stime) * 1000ull / (unsigned long long)ticks;
    e->started_ms = btime_ms + start * 1000ull / (unsigned long long)ticks;
    if (passwd)
        user_name(passwd, e->uid, e->user);
    char cmd[SBX_PROCS_CMDLINE_MAX + 1];
    ssize_t n = slurp(dfd, "cmdline", cmd, sizeof(cmd));
    if (n > 0) {
        /* Arguments are NUL-separated: shown joined by spaces, as ps does. */
        while (n > 0 && cmd[n - 1] == 0)
            n--;
        for (ssize_t i = 0; i < n; i++)
            if (cmd[i] == 0 || cmd[i] == '\n')
                cmd[i] = ' ';
        cmd[n] = 0;
        memcpy(e->cmdline, cmd, (size_t)n + 1);
    } else {
        /* A kernel thread or a zombie has no arguments: its name in brackets, as ps shows it. */
        const char *lp = strchr(buf, '(');
        size_t len = lp && rp > lp ? (size_t)(rp - lp - 1) : 0;
        snprintf(e->cmdline, sizeof(e->cmdline), "[%.*s]", (int)len, lp ? lp + 1 : "");
    }
    close(dfd);
    return true;
}

void ps_list(struct conn *c, uint32_t ch)
{
    long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (ticks <= 0)
        ticks = 100;
    long page_kib = page >= 1024 ? page / 1024 : 4;
    uint64_t btime_ms = 0;
    char stat[4096];
    int procfd = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (procfd >= 0 && slurp(procfd, "stat", stat, sizeof(stat)) > 0) {
        const char *bt = strstr(stat, "\nbtime ");
        if (bt)
            btime_ms = strtoull(bt + 7, NULL, 10) * 1000ull;
    }
    DIR *d = procfd >= 0 ? opendir("/proc") : NULL;
    if (!d) {
        char msg[128];
        snprintf(msg, sizeof(msg), "cannot read /proc in the box: %s", strerror(errno));
        sbx_pbuf b = {0};
        sbx__pbuf_begin(&b);
        sbx__msg_status_encode(&b, errno ? errno : ENOENT, msg);
        conn_send(c, &b, SBX_MSG_STATUS, ch);
        if (procfd >= 0)
            close(procfd);
        return;
    }
    char *passwd = passwd_db();
    sbx_ps_entry *e = NULL;
    size_t n = 0, cap = 0;
    uint32_t flags = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0)
            continue;
        if (n == SBX_PROCS_MAX_PS) {
            flags |= SBX_PS_TRUNCATED;
            break;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            sbx_ps_entry *ne = realloc(e, ncap * sizeof(*e));
            if (!ne) {
                flags |= SBX_PS_TRUNCATED;
                break;
            }
            e = ne;
            cap = ncap;
        }
        memset(&e[n], 0, sizeof(e[n]));
        if (read_proc(procfd, pid, ticks, page_kib, btime_ms, passwd, &e[n]))
            n++;
    }
    closedir(d);
    close(procfd);
    free(passwd);
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_ps_encode(&b, flags, e, n);
    free(e);
    conn_send(c, &b, SBX_MSG_PS_LIST, ch);
}
