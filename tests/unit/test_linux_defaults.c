/*
 * The linux provider's defaults scaled to the host (src/providers/linux/
 * defaults.c): given what a host has, the pids, RLIMIT_NOFILE, tmpfs and
 * memory defaults of one box, and the shares they promise.
 */
#include "tap.h"
#include "common.h"

#include "providers/linux/linux.h"

#include <limits.h>
#include <stdio.h>

#define MIB (1ll << 20)
#define diag(...) (printf("# " __VA_ARGS__), printf("\n"))
#define GIB (1ll << 30)

/* The 2-core, 24 GiB machine sbx is developed on. */
static const sbx_linux_host dev_host = {
    .pid_max = 32768,
    .threads_max = 192735,
    .file_max = 2466248,
    .nr_open = 1048576,
    .mem_bytes = 24683748ll * 1024,
};

static void test_this_machine(void)
{
    /* pid_max / 16 = 2048, but 2048 × 1024 descriptors would pass half of file-max. */
    long long pids = sbx__linux_default_pids(&dev_host);
    TAP_EQ_INT(pids, 1204); /* file-max / 2 / 1024 */
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&dev_host, pids), 1024);
    TAP_TRUE(pids * 1024 <= dev_host.file_max / 2);
    TAP_TRUE(pids <= dev_host.pid_max / 16);
    /* An eighth of RAM, whole MiB: 3013 MiB; the box's memory limit below that wins. */
    TAP_EQ_INT(sbx__linux_default_upper_size(&dev_host, 0), 3013 * MIB);
    TAP_EQ_INT(sbx__linux_default_upper_size(&dev_host, 64 * MIB), 64 * MIB);
    TAP_EQ_INT(sbx__linux_default_upper_size(&dev_host, 64 * GIB), 3013 * MIB);
    /* memory_cgroup "always": half of RAM, whole MiB. */
    TAP_EQ_INT(sbx__linux_default_memory(&dev_host), 12052 * MIB);
}

/* A large host (systemd's pid_max): the file share binds, not the pid share. */
static void test_large_host(void)
{
    sbx_linux_host h = { .pid_max = 4194304, .threads_max = 4126846, .file_max = 52428800,
                         .nr_open = 1048576, .mem_bytes = 512 * GIB };
    long long pids = sbx__linux_default_pids(&h);
    TAP_EQ_INT(pids, 25600);
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, pids), 1024);
    TAP_EQ_INT(sbx__linux_default_upper_size(&h, 0), 64 * GIB);
    TAP_EQ_INT(sbx__linux_default_memory(&h), 256 * GIB);
}

/* Plenty of files for few pids: the pid share binds and the hard limit rises, to 4096 at most. */
static void test_hard_limit_rises_with_file_max(void)
{
    sbx_linux_host h = { .pid_max = 32768, .threads_max = 1 << 20, .file_max = 6000000,
                         .nr_open = 1048576, .mem_bytes = 64 * GIB };
    long long pids = sbx__linux_default_pids(&h);
    TAP_EQ_INT(pids, 2048); /* 32768 / 16 */
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, pids), 1464); /* 3,000,000 / 2048 */
    h.file_max = 100000000;
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, pids), 4096);
    /* A configured pids_limit moves the hard limit with it; no limit counts the host's pids. */
    h.file_max = 6000000;
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, 100), 4096);
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, 0), 1024); /* 3,000,000 / 32768 < 1024 */
    /* Never above nr_open, which setrlimit would refuse. */
    h.nr_open = 2000;
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, 100), 2000);
}

/* systemd raises file-max to 2^63 - 1: the pid share binds, the hard limit is 4096, no overflow. */
static void test_unlimited_file_max(void)
{
    sbx_linux_host h = { .pid_max = 4194304, .threads_max = 514000, .file_max = LLONG_MAX,
                         .nr_open = 1073741816, .mem_bytes = 64 * GIB };
    long long pids = sbx__linux_default_pids(&h);
    TAP_EQ_INT(pids, 514000 / 16);
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, pids), 4096);
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, 0), 4096);
}

/* threads-max below pid_max is the budget. */
static void test_threads_max_counts(void)
{
    sbx_linux_host h = { .pid_max = 4194304, .threads_max = 40000, .file_max = 1ll << 40,
                         .nr_open = 1048576, .mem_bytes = 4 * GIB };
    TAP_EQ_INT(sbx__linux_default_pids(&h), 2500);
}

/* A small host: the floors keep real workloads running, but never past half of the host. */
static void test_small_hosts(void)
{
    sbx_linux_host h = { .pid_max = 32768, .threads_max = 60000, .file_max = 800000,
                         .nr_open = 1048576, .mem_bytes = 8 * GIB };
    long long pids = sbx__linux_default_pids(&h);
    TAP_EQ_INT(pids, 1024); /* 800000 / 2 / 1024 = 390: the floor */
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, pids), 1024);
    TAP_EQ_INT(sbx__linux_default_upper_size(&h, 0), 1 * GIB);
    h.pid_max = 1000;
    TAP_EQ_INT(sbx__linux_default_pids(&h), 500);
    h.pid_max = 1;
    h.threads_max = 0;
    TAP_EQ_INT(sbx__linux_default_pids(&h), 1);
}

/* Nothing known of the host: the old flat defaults, and the kernel's tmpfs default. */
static void test_unknown_host(void)
{
    sbx_linux_host h = { 0 };
    TAP_EQ_INT(sbx__linux_default_pids(&h), SBX_LINUX_DEFAULT_PIDS);
    TAP_EQ_INT(sbx__linux_default_nofile_hard(&h, 4096), SBX_LINUX_DEFAULT_NOFILE_HARD);
    TAP_EQ_INT(sbx__linux_default_upper_size(&h, 0), 0);
    TAP_EQ_INT(sbx__linux_default_upper_size(&h, 64 * MIB), 64 * MIB);
    TAP_EQ_INT(sbx__linux_default_memory(&h), 0);
}

/*
 * The promise over many hosts: one default box holds at most 1/16 of the
 * host's pids and half of its file-max in descriptors, unless a floor wins
 * (and then the floor is exactly what it gets), and at most 1/8 of RAM in
 * its tmpfs.
 */
static void test_shares_hold(void)
{
    static const long long pid_maxes[] = { 4096, 32768, 65536, 4194304 };
    static const long long file_maxes[] = { 100000, 800000, 2466248, 6000000, 52428800, 1ll << 33 };
    static const long long mems[] = { 1 * GIB, 8 * GIB, 24 * GIB, 1024 * GIB };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(pid_maxes); i++)
        for (size_t j = 0; j < SBX_ARRAY_SIZE(file_maxes); j++)
            for (size_t k = 0; k < SBX_ARRAY_SIZE(mems); k++) {
                sbx_linux_host h = { .pid_max = pid_maxes[i], .threads_max = 1ll << 22,
                                     .file_max = file_maxes[j], .nr_open = 1048576,
                                     .mem_bytes = mems[k] };
                long long pids = sbx__linux_default_pids(&h);
                long long hard = sbx__linux_default_nofile_hard(&h, pids);
                long long budget = h.pid_max < h.threads_max ? h.pid_max : h.threads_max;
                TAP_TRUE(pids >= 1);
                TAP_TRUE(pids <= budget / 2);
                TAP_TRUE(pids <= budget / 16 || pids == 1024 || pids == budget / 2);
                TAP_TRUE(hard >= 1024 && hard <= 4096);
                TAP_TRUE(pids * hard <= h.file_max / 2 || (pids <= 1024 && hard == 1024));
                TAP_TRUE(sbx__linux_default_upper_size(&h, 0) <= mems[k] / 8);
                TAP_TRUE(sbx__linux_default_upper_size(&h, 0) > mems[k] / 8 - MIB);
            }
}

/* What the kernel says, read as the provider reads it. */
static void test_host_read(void)
{
    sbx_linux_host h;
    sbx__linux_host_read(&h);
    char out[64];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cat /proc/sys/kernel/pid_max"), 0);
    TAP_EQ_INT(h.pid_max, strtoll(out, NULL, 10));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cat /proc/sys/fs/file-max"), 0);
    TAP_EQ_INT(h.file_max, strtoll(out, NULL, 10));
    TAP_TRUE(h.threads_max > 0 && h.nr_open > 0 && h.mem_bytes > 0);
    diag("this host: pid_max %lld, threads-max %lld, file-max %lld, nr_open %lld, RAM %lld MiB: "
         "pids %lld, nofile hard %lld, tmpfs %lld MiB, memory (always) %lld MiB",
         h.pid_max, h.threads_max, h.file_max, h.nr_open, h.mem_bytes / MIB,
         sbx__linux_default_pids(&h), sbx__linux_default_nofile_hard(&h, sbx__linux_default_pids(&h)),
         sbx__linux_default_upper_size(&h, 0) / MIB, sbx__linux_default_memory(&h) / MIB);
}

TAP_MAIN(TAP(test_this_machine), TAP(test_large_host), TAP(test_hard_limit_rises_with_file_max),
         TAP(test_unlimited_file_max), TAP(test_threads_max_counts), TAP(test_small_hosts), TAP(test_unknown_host),
         TAP(test_shares_hold), TAP(test_host_read))
