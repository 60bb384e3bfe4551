/*
 * A box's default limits, scaled to the host (docs/providers/linux.md,
 * "Defaults scaled to the host").
 *
 * Flat defaults (4096 pids, 4096 descriptors per process, a tmpfs of the
 * kernel's default half of RAM) let one box take the host: eight boxes took
 * every pid of a pid_max of 32768, and one box's 4096 processes × 4096
 * descriptors passed the host's file-max. Each default here is a share of
 * what the host has, read once per provider from the kernel:
 *
 *   pids    = P / 16, at most file-max / (2 × 1024), at least 1024
 *             (and at most P / 2), where P = min(pid_max, threads-max)
 *   nofile  = soft 1024, hard file-max / (2 × pids), from 1024 to 4096,
 *             at most nr_open (and the creator's hard limit, provider.c)
 *   tmpfs   = MemTotal / 8, at most the box's memory limit
 *   memory  = MemTotal / 2, only with memory_cgroup "always"
 *
 * so one default box holds at most 1/16 of the host's pids, at most half of
 * its file-max in descriptors (unless the floors win: hosts of less than
 * about 20 GiB, where 1024 × 1024 is more than half of file-max), and an
 * eighth of its memory in files. Every one is a ceiling, never a
 * reservation: idle boxes cost the same as before, so density is unchanged.
 * The floors keep builds and test suites running on small hosts.
 */
#include "providers/linux/linux.h"

#include <stdio.h>
#include <sys/sysinfo.h>

#define MIB (1ll << 20)

/* A positive integer from a /proc/sys file, or 0. */
static long long read_sysctl(const char *path)
{
    FILE *f = fopen(path, "re");
    long long v = 0;
    if (f) {
        if (fscanf(f, "%lld", &v) != 1 || v < 0)
            v = 0;
        fclose(f);
    }
    return v;
}

void sbx__linux_host_read(sbx_linux_host *h)
{
    h->pid_max = read_sysctl("/proc/sys/kernel/pid_max");
    h->threads_max = read_sysctl("/proc/sys/kernel/threads-max");
    h->file_max = read_sysctl("/proc/sys/fs/file-max");
    h->nr_open = read_sysctl("/proc/sys/fs/nr_open");
    struct sysinfo si;
    h->mem_bytes = sysinfo(&si) == 0 && si.totalram > 0
                       ? (long long)si.totalram * (long long)(si.mem_unit ? si.mem_unit : 1)
                       : 0;
}

/* The host's pid budget: the lower of pid_max and threads-max; 0 when neither is known. */
static long long pid_budget(const sbx_linux_host *h)
{
    long long p = h->pid_max;
    if (h->threads_max > 0 && (p <= 0 || h->threads_max < p))
        p = h->threads_max;
    return p > 0 ? p : 0;
}

long long sbx__linux_default_pids(const sbx_linux_host *h)
{
    long long budget = pid_budget(h);
    if (budget <= 0)
        return SBX_LINUX_DEFAULT_PIDS; /* nothing known of the host: the old flat default */
    long long p = budget / SBX_LINUX_PIDS_SHARE;
    /* Each pid may hold the soft limit's descriptors: keep their product within the share. */
    if (h->file_max > 0) {
        long long by_files = h->file_max / SBX_LINUX_FILES_SHARE / SBX_LINUX_DEFAULT_NOFILE_SOFT;
        if (by_files < p)
            p = by_files;
    }
    if (p < SBX_LINUX_PIDS_FLOOR)
        p = SBX_LINUX_PIDS_FLOOR;
    /* A host too small for the floor: never more than half of it. */
    if (p > budget / 2)
        p = budget / 2 > 0 ? budget / 2 : 1;
    return p;
}

long long sbx__linux_default_nofile_hard(const sbx_linux_host *h, long long pids)
{
    long long hard = SBX_LINUX_DEFAULT_NOFILE_HARD;
    /* No pids limit: the box may have every pid of the host. */
    long long n = pids > 0 ? pids : pid_budget(h);
    if (h->file_max > 0 && n > 0) {
        hard = h->file_max / SBX_LINUX_FILES_SHARE / n;
        if (hard < SBX_LINUX_DEFAULT_NOFILE_SOFT)
            hard = SBX_LINUX_DEFAULT_NOFILE_SOFT;
        if (hard > SBX_LINUX_DEFAULT_NOFILE_HARD)
            hard = SBX_LINUX_DEFAULT_NOFILE_HARD;
    }
    /* setrlimit refuses a hard limit above nr_open. */
    if (h->nr_open > 0 && hard > h->nr_open)
        hard = h->nr_open;
    return hard;
}

long long sbx__linux_default_upper_size(const sbx_linux_host *h, long long memory_bytes)
{
    long long s = h->mem_bytes > 0 ? h->mem_bytes / SBX_LINUX_TMPFS_SHARE : 0;
    /* Its pages are charged to the box's memory limit: never promise more than that. */
    if (memory_bytes > 0 && (s <= 0 || memory_bytes < s))
        s = memory_bytes;
    /* Whole MiB (whole pages for tmpfs, and a figure the box's df shows exactly). */
    if (s >= MIB)
        s -= s % MIB;
    return s; /* 0: the kernel's default (half of RAM) */
}

long long sbx__linux_default_memory(const sbx_linux_host *h)
{
    long long m = h->mem_bytes > 0 ? h->mem_bytes / SBX_LINUX_MEMORY_SHARE : 0;
    return m >= MIB ? m - m % MIB : 0;
}
