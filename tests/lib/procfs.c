/* What /proc says about processes: see procfs.h. */
#include "lib/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool proc_stat(pid_t pid, char *state, pid_t *ppid, pid_t *pgrp)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    /* pid (comm) state ppid pgrp ...: comm may hold spaces and ')', so parse after the last. */
    const char *rp = strrchr(buf, ')');
    char st;
    int pp, pg;
    if (!rp || sscanf(rp + 1, " %c %d %d", &st, &pp, &pg) != 3)
        return false;
    if (state)
        *state = st;
    if (ppid)
        *ppid = pp;
    if (pgrp)
        *pgrp = pg;
    return true;
}

bool proc_runs(pid_t pid)
{
    char st;
    return proc_stat(pid, &st, NULL, NULL) && st != 'Z' && st != 'X';
}

int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n - 1;
}
