/*
 * The linux provider against real boxes (root, namespaces, overlayfs,
 * cgroups). Each test uses a private SBX_STATE_DIR and ends with a census:
 * nothing of sbx may be left on the host.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <nettle/sha2.h>
#include <signal.h>
#include <sched.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define diag(...) (printf("# " __VA_ARGS__), printf("\n"))

static char self_path[4096] = "/proc/self/exe"; /* this binary, for re-exec */

static long atoi_ok(const char *s) { return s ? strtol(s, NULL, 10) : -1; }

/* A tiny root filesystem from busybox-static, as a directory and a tarball. */
/*
 * A busybox image: the applet links are made here, not by one `ln` per
 * applet, which costs ~400 processes (20 s in the emulated cgroup2 guest).
 */
static void busybox_rootfs(char *dir, size_t dn, char *tar, size_t tn)
{
    if (!have_file("/bin/busybox"))
        TAP_SKIP("busybox-static is not installed");
    snprintf(dir, dn, "%s/bb", tap_tmpdir());
    snprintf(tar, tn, "%s/bb.tar", tap_tmpdir());
    char out[4096];
    int rc = run_cmd(out, sizeof(out),
                     "set -e; mkdir -p %s/bin %s/etc %s/tmp; cp /bin/busybox %s/bin/; "
                     "echo 'root:x:0:0:root:/root:/bin/sh' > %s/etc/passwd; "
                     "echo 'root:x:0:' > %s/etc/group; echo bb-image > %s/etc/marker",
                     dir, dir, dir, dir, dir, dir, dir);
    if (rc != 0)
        TAP_FAIL("building the busybox rootfs: %s", out);
    FILE *list = popen("/bin/busybox --list", "r");
    if (!list)
        TAP_FAIL("busybox --list: %s", strerror(errno));
    char name[256], link[700];
    int n = 0;
    while (fscanf(list, "%255s", name) == 1) {
        if (!strcmp(name, "busybox"))
            continue;
        snprintf(link, sizeof(link), "%s/bin/%s", dir, name);
        if (symlink("busybox", link) < 0)
            TAP_FAIL("symlink %s: %s", link, strerror(errno));
        n++;
    }
    TAP_EQ_INT(pclose(list), 0);
    TAP_TRUE(n > 100);
    if (run_cmd(out, sizeof(out), "tar -C %s -cf %s .", dir, tar) != 0)
        TAP_FAIL("packing the busybox rootfs: %s", out);
}

/* A box's pids.max without pids_limit: scaled to this host (defaults.c). */
static const char *default_pids_str(void)
{
    static char buf[32];
    sbx_linux_host h;
    sbx__linux_host_read(&h);
    snprintf(buf, sizeof(buf), "%lld", sbx__linux_default_pids(&h));
    return buf;
}

static sbx_spec *spec_none(void)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_workdir(s, "/work");
    return s;
}

/* --- tests ---------------------------------------------------------------- */

/* Without pidfds (Linux < 5.3, valgrind) stop still ends the box and leaves nothing. */
static void test_stop_without_pidfd(void)
{
    need_boxes();
    setenv("SBX_LINUX_NO_PIDFD", "1", 1);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_INT(rc_of(sb, "true"), 0);
    stop_free(sb);
    census_check(state_dir);
    /* The library's stop-by-id (sbx stop, gc) takes the same fallback. */
    sbx_sandbox *sb2 = start(p, s);
    char *id = strdup(sbx_sandbox_id(sb2));
    sbx_sandbox_detach(sb2);
    TAP_OK(sbx__linux_stop_box(state_dir, id, 10, &e_));
    free(id);
    free_and_census(s, p, state_dir);
}

static void test_pid1_is_agent_and_namespaces(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_env(s, "GREETING", "hello");
    sbx_sandbox *sb = start(p, s);
    TAP_CONTAINS(out_of(sb, "tr '\\0' ' ' < /proc/1/cmdline"), "sbx-agent");
    TAP_CONTAINS(out_of(sb, "hostname"), sbx_sandbox_id(sb));
    TAP_CONTAINS(out_of(sb, "pwd"), "/work");
    TAP_CONTAINS(out_of(sb, "echo $GREETING"), "hello");
    /* Host processes are invisible: only the agent and this command's few. */
    const char *n = out_of(sb, "ls /proc | grep -c '^[0-9]'");
    TAP_TRUE(atoi_ok(n) < 10);
    /* The host's network is invisible: loopback only. */
    const char *dev = out_of(sb, "cat /proc/net/dev");
    TAP_CONTAINS(dev, "lo:");
    TAP_TRUE(strstr(dev, "eth") == NULL && strstr(dev, "ens") == NULL);
    /* Host files outside the image are invisible. */
    char secret[512];
    snprintf(secret, sizeof(secret), "%s/host-secret", tap_tmpdir());
    write_text(secret, "x");
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "test -e %s", secret);
    TAP_EQ_INT(rc_of(sb, cmd), 1);
    TAP_EQ_INT(rc_of(sb, "test -e /etc/shadow"), 1);
    /* The host's /usr is there, read-only. */
    TAP_EQ_INT(rc_of(sb, "test -x /usr/bin/env"), 0);
    TAP_NE_INT(rc_of(sb, "touch /usr/bin/sbx-should-fail 2>/dev/null"), 0);
    /* Writes elsewhere work and stay in the box. */
    char stay[128];
    snprintf(stay, sizeof(stay), "/tmp/sbx-stays-in-box-%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "echo data > %s && echo x > /root/r && cat %s", stay, stay);
    TAP_EQ_INT(rc_of(sb, cmd), 0);
    TAP_TRUE(!have_file(stay)); /* the box's /tmp is its own */
    status_is(sb, SBX_STATUS_RUNNING);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_writes_isolated_between_boxes(void)
{
    need_boxes();
    char dir[512], tar[512];
    busybox_rootfs(dir, sizeof(dir), tar, sizeof(tar));
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, tar);
    sbx_sandbox *a = start(p, s);
    sbx_sandbox *b = start(p, s);
    TAP_CONTAINS(out_of(a, "cat /etc/marker"), "bb-image");
    TAP_EQ_INT(rc_of(a, "echo mine > /etc/marker && echo new > /bin/added"), 0);
    TAP_CONTAINS(out_of(a, "cat /etc/marker"), "mine");
    TAP_CONTAINS(out_of(b, "cat /etc/marker"), "bb-image");
    TAP_EQ_INT(rc_of(b, "test -e /bin/added"), 1);
    /* One cached tree for both, and the host's copy is untouched. */
    char out[4096];
    run_cmd(out, sizeof(out), "ls -d %s/images/layers/sha256-* | wc -l", state_dir);
    TAP_EQ_INT(atoi_ok(out), 1);
    char marker[600];
    snprintf(marker, sizeof(marker), "%s/etc/marker", dir);
    char *m = read_text(marker);
    TAP_CONTAINS(m, "bb-image");
    free(m);
    stop_free(a);
    stop_free(b);
    free_and_census(s, p, state_dir);
}

static void test_memory_bomb_is_oom_and_box_lives(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_memory_mib(s, 64);
    sbx_sandbox *sb = start(p, s);
    /* tail keeps the last line, and /dev/zero has no newline: it grows until killed. */
    sbx_exec_result *r = run(sb, "exec tail -n 1 /dev/zero", NULL);
    if (!sbx_exec_result_error_type(r))
        TAP_FAIL("no oom: rc %d, stderr %s", sbx_exec_result_return_code(r),
                 sbx_exec_result_stderr(r, NULL));
    TAP_EQ_STR(sbx_exec_result_error_type(r), "oom");
    /* Killed by SIGKILL: 137, as docker reports an OOM-killed command. */
    TAP_EQ_INT(sbx_exec_result_return_code(r), 137);
    sbx_exec_result_free(r);
    TAP_CONTAINS(out_of(sb, "echo alive"), "alive");
    status_is(sb, SBX_STATUS_RUNNING);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_fork_bomb_stopped_by_pids(void)
{
    need_boxes();
    sbx_provider *p = provider("{\"pids_limit\": 40}");
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    sbx_exec_result *r =
        run(sb, "i=0; while [ $i -lt 100 ]; do sleep 3 & i=$((i+1)); done; wait; echo finished", NULL);
    const char *er = sbx_exec_result_stderr(r, NULL);
    TAP_TRUE(er && (strstr(er, "fork") || strstr(er, "Resource temporarily unavailable")));
    sbx_exec_result_free(r);
    TAP_CONTAINS(out_of(sb, "echo alive"), "alive");
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_disk_gib_enospc(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_disk_gib(s, 1);
    sbx_sandbox *sb = start(p, s);
    sbx_exec_result *r = run(sb, "dd if=/dev/zero of=/tmp/big bs=1M count=1200", NULL);
    TAP_NE_INT(sbx_exec_result_return_code(r), 0);
    TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "No space left on device");
    sbx_exec_result_free(r);
    TAP_EQ_INT(rc_of(sb, "rm /tmp/big && echo small > /tmp/small"), 0);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* The size of the filesystem at `path` in the box, in bytes, as its statfs says. */
static long long box_fs_size(sbx_sandbox *sb, const char *path)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "echo $(( $(stat -f -c '%%b * %%S' %s) ))", path);
    return atoll(out_of(sb, cmd));
}

static long long box_cg_value(sbx_sandbox *sb, const char *v2_file, const char *v1_file)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "cat /sys/fs/cgroup/%s",
             sbx__cg_mode() == SBX_CG_V2 ? v2_file : v1_file);
    const char *o = out_of(sb, cmd);
    return strncmp(o, "max", 3) == 0 ? -1 : atoll(o);
}

/*
 * A default box's limits are the host's shares (defaults.c), not flat
 * values: its pids.max, its RLIMIT_NOFILE and the size of its one writable
 * tmpfs (seen at / and /dev/shm). A memory limit bounds the tmpfs;
 * memory_cgroup "always" gives a box without a memory limit half of RAM;
 * each knob overrides its default.
 */
static void test_defaults_scale_with_the_host(void)
{
    need_boxes();
    if (sbx__cg_mode() == SBX_CG_NONE)
        TAP_SKIP("no cgroups here");
    sbx_linux_host h;
    sbx__linux_host_read(&h);
    long long pids = sbx__linux_default_pids(&h);
    struct rlimit rl;
    TAP_EQ_INT(getrlimit(RLIMIT_NOFILE, &rl), 0);
    long long creator = rl.rlim_max == RLIM_INFINITY ? LLONG_MAX : (long long)rl.rlim_max;
    long long hard = sbx__linux_default_nofile_hard(&h, pids);
    hard = hard < creator ? hard : creator;
    long long soft = hard < 1024 ? hard : 1024;
    long long tmpfs = sbx__linux_default_upper_size(&h, 0);
    diag("this host: pid_max %lld, threads-max %lld, file-max %lld, RAM %lld MiB -> pids %lld, "
         "nofile %lld:%lld, tmpfs %lld MiB",
         h.pid_max, h.threads_max, h.file_max, h.mem_bytes >> 20, pids, soft, hard, tmpfs >> 20);
    TAP_TRUE(tmpfs > 0);
    char want[128];

    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_INT(box_cg_value(sb, "pids.max", "pids/pids.max"), pids);
    snprintf(want, sizeof(want), "%lld %lld\n", soft, hard);
    TAP_EQ_STR(out_of(sb, "echo $(ulimit -n) $(ulimit -Hn)"), want);
    TAP_EQ_INT(box_fs_size(sb, "/dev/shm"), tmpfs);
    TAP_EQ_INT(box_fs_size(sb, "/"), tmpfs);
    stop_free(sb);

    /* A memory limit below the share bounds the tmpfs: its pages are charged to it. */
    sbx_spec_set_memory_mib(s, 64);
    sb = start(p, s);
    TAP_EQ_INT(box_fs_size(sb, "/dev/shm"), 64ll << 20);
    stop_free(sb);
    sbx_spec_free(s);

    /* The knobs override: pids_limit (which the hard nofile follows), disk_gib, nofile. */
    sbx_provider *pk = provider("{\"pids_limit\": 5000}");
    s = spec_none();
    sbx_spec_set_disk_gib(s, 1);
    sb = start(pk, s);
    TAP_EQ_INT(box_cg_value(sb, "pids.max", "pids/pids.max"), 5000);
    long long hard5000 = sbx__linux_default_nofile_hard(&h, 5000);
    snprintf(want, sizeof(want), "%lld\n", hard5000 < creator ? hard5000 : creator);
    TAP_EQ_STR(out_of(sb, "ulimit -Hn"), want);
    TAP_EQ_INT(box_fs_size(sb, "/dev/shm"), 1ll << 30);
    stop_free(sb);
    sbx_spec_set_provider_options(s, "{\"pids_limit\": 77, \"nofile\": [50, 60]}", NULL);
    sb = start(pk, s);
    TAP_EQ_INT(box_cg_value(sb, "pids.max", "pids/pids.max"), 77);
    TAP_EQ_STR(out_of(sb, "echo $(ulimit -n) $(ulimit -Hn)"), "50 60\n");
    stop_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(pk);

    /* null in the config is the default (the shipped config writes it so). */
    sbx_provider *pn = provider("{\"pids_limit\": null, \"nofile\": null}");
    s = spec_none();
    sb = start(pn, s);
    TAP_EQ_INT(box_cg_value(sb, "pids.max", "pids/pids.max"), pids);
    stop_free(sb);
    sbx_provider_free(pn);

    /* "always": the box has its memory cgroup anyway, and gets half of RAM as its ceiling. */
    sbx_provider *pa = provider("{\"memory_cgroup\": \"always\"}");
    sb = start(pa, s);
    TAP_EQ_INT(box_cg_value(sb, "memory.max", "memory/memory.limit_in_bytes"),
               sbx__linux_default_memory(&h));
    TAP_EQ_INT(box_fs_size(sb, "/dev/shm"), tmpfs);
    stop_free(sb);
    sbx_spec_set_memory_mib(s, 96);
    sb = start(pa, s);
    TAP_EQ_INT(box_cg_value(sb, "memory.max", "memory/memory.limit_in_bytes"), 96ll << 20);
    stop_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(pa);
    sbx_provider_free(p);
    census_check(state_dir);
}

static void test_escapes_fail(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    TAP_NE_INT(rc_of(sb, "mount -t tmpfs x /mnt"), 0);
    TAP_NE_INT(rc_of(sb, "unshare -m true"), 0);
    TAP_NE_INT(rc_of(sb, "unshare -U true"), 0);
    TAP_NE_INT(rc_of(sb, "echo evil > /proc/sys/kernel/hostname"), 0);
    TAP_NE_INT(rc_of(sb, "mknod /tmp/disk b 254 0"), 0);
    TAP_NE_INT(rc_of(sb, "test -r /proc/kcore && head -c1 /proc/kcore | grep -q ."), 0);
    TAP_NE_INT(rc_of(sb, "echo 1 > /sys/kernel/mm/ksm/run"), 0);
    /* A host process cannot be reached: its pid does not exist in the box. */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "kill -0 %d", (int)getpid());
    TAP_NE_INT(rc_of(sb, cmd), 0);
    /* The probes below are python3 one-liners (the none image is the host's /usr). */
    if (!have_file("/usr/bin/python3"))
        TAP_SKIP("python3 is needed for the syscall probes (apt-get install python3)");
    {
        /* ptrace of a process outside the box, by a pid the box cannot see. */
        snprintf(cmd, sizeof(cmd),
                 "/usr/bin/python3 -c 'import ctypes,sys; l=ctypes.CDLL(None,use_errno=True); "
                 "sys.exit(0 if l.ptrace(16,%d,0,0)==0 else 1)'",
                 (int)getpid());
        TAP_NE_INT(rc_of(sb, cmd), 0);
        /*
         * keyctl refused by seccomp, with EPERM: KEYCTL_GET_KEYRING_ID of the
         * session keyring (-3, create=1) succeeds on any kernel without the
         * filter, so only the filter can make it fail (arguments that are
         * invalid, e.g. all zero, would give EINVAL either way).
         */
        TAP_EQ_STR(out_of(sb, "/usr/bin/python3 -c 'import ctypes; "
                              "l=ctypes.CDLL(None,use_errno=True); "
                              "print(l.syscall(250,0,-3,1), ctypes.get_errno())'"),
                   "-1 1\n");
    }
    TAP_CONTAINS(out_of(sb, "grep NoNewPrivs /proc/self/status"), "1");
    TAP_CONTAINS(out_of(sb, "grep Seccomp: /proc/self/status"), "2");
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/*
 * An image whose mount points, workdir and /etc files are symlinks to host
 * paths: the box is built inside its own tree, nothing is created, mounted or
 * written on the host through them (the shim sees the host's root until
 * pivot_root, so following them there would).
 */
static void test_image_symlinks_cannot_reach_the_host(void)
{
    need_boxes();
    char dir[600], tar[600], host[700], out[4096];
    busybox_rootfs(dir, sizeof(dir), tar, sizeof(tar));
    snprintf(host, sizeof(host), "%s/host", tap_tmpdir());
    TAP_EQ_INT(
        run_cmd(out, sizeof(out),
                "set -e; H=%s; mkdir -p $H/run $H/proc $H/sys $H/dev $H/work; "
                "echo host-hosts > $H/hosts; echo host-name > $H/hostname; cd %s; "
                "for d in run proc sys dev; do rm -rf $d; ln -s $H/$d $d; done; "
                "ln -s $H/work work; ln -sf $H/hosts etc/hosts; ln -sf $H/hostname etc/hostname; "
                "mkdir data; ln -s /data work2",
                host, dir),
        0);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, dir);
    sbx_spec_set_workdir(s, "/work2/deep");
    sbx_sandbox *sb = start(p, s);
    /*
     * The box works: its own /proc, /etc files, and the workdir through its
     * own link; the agent's socket is nowhere in it, whatever /run is.
     */
    TAP_CONTAINS(out_of(sb, "pwd"), "/data/deep");
    TAP_EQ_STR(out_of(sb, "test -d /proc/1 && ! test -e /run/sbx/agent.sock && echo ok"), "ok\n");
    char want[128];
    snprintf(want, sizeof(want), "%s\n", sbx_sandbox_id(sb));
    TAP_EQ_STR(out_of(sb, "cat /etc/hostname"), want);
    TAP_CONTAINS(out_of(sb, "cat /etc/hosts"), sbx_sandbox_id(sb));
    /* And the host saw nothing: no entry in the link targets, files unchanged, nothing mounted. */
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cd %s && find . -mindepth 2 | head -5", host), 0);
    TAP_EQ_STR(out, "");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cat %s/hosts %s/hostname", host, host), 0);
    TAP_EQ_STR(out, "host-hosts\nhost-name\n");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "grep -c %s /proc/self/mountinfo || true", host), 0);
    TAP_EQ_STR(out, "0\n");
    stop_free(sb);
    /*
     * A workdir through a link to a path the image lacks (here a host path
     * that exists on the host) gets the link's target made, in the box, as
     * Docker does; the host's directory stays empty.
     */
    sbx_spec_set_workdir(s, "/work/x");
    sbx_sandbox *sb2 = start(p, s);
    TAP_EQ_STR(out_of(sb2, "cd /work/x && touch made-here && ls \"$(readlink /work)/x\""),
               "made-here\n");
    stop_free(sb2);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "test -e %s/work/x && echo leaked || true", host), 0);
    TAP_EQ_STR(out, "");
    free_and_census(s, p, state_dir);
}

/* A box resolves its own name and localhost with no network (as in Docker). */
static void test_box_resolves_its_own_name(void)
{
    need_boxes();
    if (!have_file("/usr/bin/getent"))
        TAP_SKIP("getent (libc-bin) is not installed");
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "getent hosts \"$(hostname)\" | cut -f1 -d' '"), "127.0.1.1\n");
    TAP_CONTAINS(out_of(sb, "getent ahosts localhost"), "127.0.0.1");
    char want[128];
    snprintf(want, sizeof(want), "%s\n", sbx_sandbox_id(sb));
    TAP_EQ_STR(out_of(sb, "cat /etc/hostname"), want);
    stop_free(sb);
    /* A name of the caller's own is the box's hostname and resolves the same way. */
    sbx_spec *named = spec_none();
    TAP_OK(sbx_spec_set_provider_options(named, "{\"hostname\": \"web-1.test\"}", &e_));
    sbx_sandbox *nb = start(p, named);
    TAP_EQ_STR(out_of(nb, "hostname; cat /etc/hostname"), "web-1.test\nweb-1.test\n");
    TAP_EQ_STR(out_of(nb, "getent hosts web-1.test | cut -f1 -d' '"), "127.0.1.1\n");
    stop_free(nb);
    /* One that would forge /etc/hosts entries is refused before any work. */
    static const char *const bad[] = { "{\"hostname\": \"a\\n127.0.0.1 evil\"}",
                                       "{\"hostname\": \"a b\"}", "{\"hostname\": \"-x\"}" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        sbx_spec *bs = spec_none();
        TAP_OK(sbx_spec_set_provider_options(bs, bad[i], &e_));
        start_fails(p, bs, SBX_EINVAL, "provider_options.hostname must be");
        sbx_spec_free(bs);
    }
    sbx_spec_free(named);
    /* Sharing the host's network: the host's entries stay, the box's name is added. */
    sbx_provider *ph = provider("{\"network\": \"host\"}");
    sbx_sandbox *sh = start(ph, s);
    long box_lines = strtol(out_of(sh, "grep -c . /etc/hosts"), NULL, 10);
    char out[256];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "grep -c . /etc/hosts"), 0);
    TAP_EQ_INT(box_lines, strtol(out, NULL, 10) + 1);
    TAP_EQ_STR(out_of(sh, "getent hosts \"$(hostname)\" | cut -f1 -d' '"), "127.0.1.1\n");
    stop_free(sh);
    sbx_provider_free(ph);
    free_and_census(s, p, state_dir);
}

/*
 * SBX_LINUX_CGROUP names the level the boxes' groups live under (tests/run.sh
 * gives each test its own): a wrong name is refused, saying what to do; a
 * box's groups are <mount>/<level>/<id>, and the level goes with its last box.
 */
static void test_cgroup_level(void)
{
    need_boxes();
    if (sbx__cg_mode() == SBX_CG_NONE)
        TAP_SKIP("no cgroups here");
    char level[64];
    snprintf(level, sizeof(level), "sbxlvl-%d", (int)getpid());
    static const char *const bad[] = { "../x", "a/b", "", ".nomem", "x y",
                                       "a123456789012345678901234567890123" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("SBX_LINUX_CGROUP", bad[i], 1);
        provider_fails("{\"linux\": {}}", SBX_EINVAL, "is not a cgroup name: use 1-32 letters");
    }
    /* Read once per process: this test's own process (the harness forks each). */
    setenv("SBX_LINUX_CGROUP", level, 1);
    TAP_EQ_STR(sbx__cg_name(), level);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_memory_mib(s, 64);
    sbx_sandbox *sb = start(p, s);
    char bd[900], want[200];
    snprintf(bd, sizeof(bd), "%s/boxes/%s", state_dir, sbx_sandbox_id(sb));
    snprintf(want, sizeof(want), "/%s/%s", level, sbx_sandbox_id(sb));
    sbx_linux_record rec;
    TAP_OK(sbx__linux_record_read(bd, &rec, &e_));
    TAP_TRUE(json_array_size(rec.cgroups) > 0);
    size_t i;
    json_t *v;
    json_array_foreach(rec.cgroups, i, v)
    {
        const char *dir = json_string_value(v);
        TAP_TRUE(strlen(dir) > strlen(want) && !strcmp(dir + strlen(dir) - strlen(want), want));
        TAP_TRUE(have_file(dir));
    }
    /* The box sees its own limit through the level. */
    TAP_CONTAINS(out_of(sb, sbx__cg_mode() == SBX_CG_V2 ? "cat /sys/fs/cgroup/memory.max"
                                                          : "cat /sys/fs/cgroup/memory/memory.limit_in_bytes"),
                 "67108864");
    stop_free(sb);
    json_array_foreach(rec.cgroups, i, v)
    {
        char top[600];
        snprintf(top, sizeof(top), "%s", json_string_value(v));
        *strrchr(top, '/') = 0;
        TAP_TRUE(!have_file(json_string_value(v)));
        TAP_TRUE(!have_file(top));
    }
    sbx__linux_record_free(&rec);
    free_and_census(s, p, state_dir);
}

/*
 * The leak census (tests/linux_census.h) counts only its own test's level:
 * an empty box group under another level (another test's, running at the
 * same time under tests/run.sh) is not this test's leak, one under its own is.
 */
static void test_census_counts_its_own_level(void)
{
    need_boxes();
    if (sbx__cg_mode() == SBX_CG_NONE)
        TAP_SKIP("no cgroups here");
    const char *root = sbx__cg_mode() == SBX_CG_V2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/pids";
    char other[64], lvl[300], grp[400], why[1024];
    snprintf(other, sizeof(other), "sbxother-%d", (int)getpid());
    snprintf(lvl, sizeof(lvl), "%s/%s", root, other);
    snprintf(grp, sizeof(grp), "%s/sbx-0123456789ab", lvl);
    TAP_EQ_INT(mkdir(lvl, 0755), 0);
    TAP_EQ_INT(mkdir(grp, 0755), 0);
    const char *mine = getenv("SBX_LINUX_CGROUP");
    char saved[64];
    snprintf(saved, sizeof(saved), "%s", mine ? mine : "");
    const char *leak_elsewhere = census_find(state_dir, why, sizeof(why));
    setenv("SBX_LINUX_CGROUP", other, 1);
    const char *leak_here = census_find(state_dir, why, sizeof(why));
    if (saved[0])
        setenv("SBX_LINUX_CGROUP", saved, 1);
    else
        unsetenv("SBX_LINUX_CGROUP");
    rmdir(grp);
    rmdir(lvl);
    TAP_TRUE(leak_elsewhere == NULL);
    TAP_TRUE(leak_here != NULL && strstr(leak_here, "empty cgroup") && strstr(leak_here, other));
}

static void test_cgroup_limits_written(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_memory_mib(s, 128);
    sbx_spec_set_cpu(s, 0.5);
    sbx_sandbox *sb = start(p, s);
    char bd[900];
    snprintf(bd, sizeof(bd), "%s/boxes/%s", state_dir, sbx_sandbox_id(sb));
    sbx_linux_record rec;
    TAP_OK(sbx__linux_record_read(bd, &rec, &e_));
    /*
     * What each hierarchy's group must hold: v1 one group per controller, v2 one for
     * all (under the cgroup level, sbx/ or SBX_LINUX_CGROUP).
     */
    const char *pids = default_pids_str();
    const struct {
        const char *dir_part, *file, *want;
    } v1[] = {
        { "/memory/", "memory.limit_in_bytes", "134217728" },
        { "/pids/", "pids.max", pids },
        { "/cpu", "cpu.cfs_quota_us", "50000" },
    }, v2[] = {
        { "/", "memory.max", "134217728" },
        { "/", "memory.swap.max", "0" },
        { "/", "pids.max", pids },
        { "/", "cpu.max", "50000 100000" },
    };
    bool is_v2 = sbx__cg_mode() == SBX_CG_V2;
    size_t nwant = is_v2 ? sizeof(v2) / sizeof(v2[0]) : sizeof(v1) / sizeof(v1[0]);
    TAP_EQ_INT(json_array_size(rec.cgroups), is_v2 ? 1 : 3);
    size_t i, seen = 0;
    json_t *v;
    json_array_foreach(rec.cgroups, i, v)
    {
        const char *dir = json_string_value(v);
        for (size_t k = 0; k < nwant; k++) {
            const char *part = is_v2 ? v2[k].dir_part : v1[k].dir_part;
            if (!strstr(dir, part))
                continue;
            char path[1024];
            snprintf(path, sizeof(path), "%s/%s", dir, is_v2 ? v2[k].file : v1[k].file);
            char *t = NULL;
            sbx__read_file(path, &t, NULL); /* sysfs: no usable st_size */
            TAP_CONTAINS(t, is_v2 ? v2[k].want : v1[k].want);
            free(t);
            seen++;
        }
    }
    TAP_EQ_INT(seen, nwant);
    sbx__linux_record_free(&rec);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/*
 * A box reads its own limits at /sys/fs/cgroup (as in Docker), cannot change
 * them, and sees nothing of the host's groups or of other boxes'.
 */
static void test_box_sees_its_own_cgroup_limits(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_memory_mib(s, 128);
    sbx_spec_set_cpu(s, 0.5);
    sbx_sandbox *sb = start(p, s), *other = start(p, s);
    bool v2 = sbx__cg_mode() == SBX_CG_V2;
    const char *mem = v2 ? "/sys/fs/cgroup/memory.max" : "/sys/fs/cgroup/memory/memory.limit_in_bytes";
    const char *pids = v2 ? "/sys/fs/cgroup/pids.max" : "/sys/fs/cgroup/pids/pids.max";
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cat %s", mem);
    TAP_EQ_STR(out_of(sb, cmd), "134217728\n");
    char want_pids[40];
    snprintf(want_pids, sizeof(want_pids), "%s\n", default_pids_str());
    snprintf(cmd, sizeof(cmd), "cat %s", pids);
    TAP_EQ_STR(out_of(sb, cmd), want_pids);
    TAP_CONTAINS(out_of(sb, v2 ? "cat /sys/fs/cgroup/cpu.max" : "cat /sys/fs/cgroup/cpu*/cpu.cfs_quota_us"),
                 "50000");
    /* Its own processes are listed, as the box numbers them. */
    TAP_EQ_INT(rc_of(sb, v2 ? "grep -qx 1 /sys/fs/cgroup/cgroup.procs"
                            : "grep -qx 1 /sys/fs/cgroup/pids/cgroup.procs"),
               0);
    /* Read-only: raising a limit fails. */
    snprintf(cmd, sizeof(cmd), "echo max > %s", pids);
    TAP_NE_INT(rc_of(sb, cmd), 0);
    snprintf(cmd, sizeof(cmd), "cat %s", pids);
    TAP_EQ_STR(out_of(sb, cmd), want_pids);
    /* No sbx/ level, no other box: the view's root is the box's own group. */
    snprintf(cmd, sizeof(cmd), "ls -R /sys/fs/cgroup | grep -c -e sbx -e %s || true",
             sbx_sandbox_id(other));
    TAP_EQ_STR(out_of(sb, cmd), "0\n");
    stop_free(other);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* A cpu quota beyond the machine's CPUs (or below 0.01) is refused before any work. */
static void test_cpu_out_of_range_refused(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    const double bad[] = { 1e9, (double)n + 0.5, 0.001 };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        sbx_spec *s = spec_none();
        TAP_EQ_INT(sbx_spec_set_cpu(s, bad[i]), SBX_OK);
        char want[64];
        snprintf(want, sizeof(want), "from 0.01 to %ld.00", n);
        const char *msg = start_fails(p, s, SBX_ECREATE, want);
        TAP_CONTAINS(msg, "resources.cpu");
        sbx_spec_free(s);
    }
    /* Exactly all the CPUs is allowed. */
    sbx_spec *s = spec_none();
    sbx_spec_set_cpu(s, (double)n);
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_INT(rc_of(sb, "true"), 0);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_agent_killed_gives_error(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    char bd[900];
    snprintf(bd, sizeof(bd), "%s/boxes/%s/record.json", state_dir, sbx_sandbox_id(sb));
    json_t *j = json_load_file(bd, 0, NULL);
    pid_t init = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
    json_decref(j);
    TAP_TRUE(init > 1);
    TAP_EQ_INT(kill(init, SIGKILL), 0);
    sbx_status st = SBX_STATUS_RUNNING;
    while (st == SBX_STATUS_RUNNING) { /* the alarm bounds this */
        TAP_EQ_INT(sbx_sandbox_status(sb, &st, NULL), SBX_OK);
        if (st == SBX_STATUS_RUNNING)
            usleep(10000);
    }
    TAP_EQ_INT(st, SBX_STATUS_ERROR);
    /* The reference's docker result for a container no longer running: rc 125, "sandbox". */
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, "true", NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "agent");
    sbx_exec_result_free(r);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* True once `name` exists in some box directory under <state>/boxes. */
static bool some_box_has(const char *name)
{
    char boxes[700];
    snprintf(boxes, sizeof(boxes), "%s/boxes", state_dir);
    DIR *d = opendir(boxes);
    struct dirent *de;
    bool found = false;
    while (d && (de = readdir(d)) && !found) {
        char p[1200];
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s%s%s", boxes, de->d_name, *name ? "/" : "", name);
        found = have_file(p);
    }
    if (d)
        closedir(d);
    return found;
}

static void test_creator_killed_mid_create_leaves_nothing(void)
{
    need_boxes();
    /*
     * Kill the creating process at three moments of its create: at once,
     * once the shim made the box directory, once the agent's socket exists
     * (just before the handover). A shim that never got its "ack" removes
     * the box itself; nothing may be left, even before any gc.
     */
    static const char *const moments[] = { NULL, "", "run/agent.sock" };
    for (int round = 0; round < 3; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            sbx_provider *p = provider(NULL);
            sbx_spec *s = spec_none();
            sbx_spec_set_metadata(s, "run_id", "killed");
            sbx_sandbox *sb = NULL;
            sbx_sandbox_new(p, s, &sb, NULL);
            sbx_sandbox_start(sb, NULL, NULL);
            _exit(0); /* finished before the kill: the box outlives us, by design */
        }
        if (moments[round])
            for (int i = 0; i < 20000 && !some_box_has(moments[round]); i++)
                usleep(100);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        /*
         * Either the shim removes the box, or the kill came after the
         * handover (its record says "running"): then the box is legitimately
         * alive, and gc by run id is how a crashed run collects it.
         */
        bool handed_over = false;
        char why[512];
        for (int t = 0; t < 1000 && census_find(state_dir, why, sizeof(why)) && !handed_over; t++) {
            sbx_linux_box_info *boxes = NULL;
            size_t n = 0;
            sbx__linux_list(state_dir, NULL, &boxes, &n, NULL);
            for (size_t i = 0; i < n; i++)
                handed_over |= boxes[i].rec.state && !strcmp(boxes[i].rec.state, "running");
            sbx__linux_list_free(boxes, n);
            usleep(10000);
        }
        if (handed_over) {
            sbx_kv labels = { 0 };
            sbx__kv_set(&labels, "run_id", "killed");
            sbx_linux_gc_opts o = { .labels = &labels };
            char **removed = NULL;
            TAP_OK(sbx__linux_gc(state_dir, &o, &removed, &e_));
            TAP_TRUE(removed != NULL);
            sbx_strv_free(removed);
            sbx__kv_free(&labels);
        }
        census_check(state_dir);
    }
    /* And gc finds nothing to do. */
    char **removed = NULL;
    TAP_OK(sbx__linux_gc(state_dir, NULL, &removed, &e_));
    TAP_NULL(removed);
}

/*
 * [gcrace] A stand-in for sbx-shim that holds a create at the moment a gc
 * could once break it: the shim runs (as far as gc can tell: the executable's
 * name, the command line `sbx-shim --box-dir DIR`), its box directory is not
 * made yet. It is this binary, copied as <dir>/sbx-shim-hold and named as the
 * provider's "shim"; started as the shim is, it writes its pid to the FIFO
 * <dir>/held, waits for a writer on <dir>/go, then execs the real sbx-shim
 * (<dir>/real) with the same arguments and descriptors.
 */
static int shim_hold_main(char **argv)
{
    char self[PATH_MAX], held[PATH_MAX + 8], go[PATH_MAX + 8], real[PATH_MAX + 8];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        _exit(127);
    self[n] = 0;
    *strrchr(self, '/') = 0;
    snprintf(held, sizeof(held), "%s/held", self);
    snprintf(go, sizeof(go), "%s/go", self);
    snprintf(real, sizeof(real), "%s/real", self);
    /* The reader of `go` first: a writer that finds none knows this process is gone. */
    int g = open(go, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    int h = open(held, O_WRONLY | O_CLOEXEC);
    if (g < 0 || h < 0 || dprintf(h, "%d\n", (int)getpid()) < 0)
        _exit(127);
    close(h);
    /* Readable (or hung up) once the test opened `go` to write, and closed it. */
    struct pollfd pfd = { .fd = g, .events = POLLIN };
    while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
        ;
    close(g);
    execv(real, argv);
    _exit(127);
}

/* The entries of a directory (0 when it does not exist). */
static int entries(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* Makes <tmp>/hold (the stand-in, the link to the real shim, the FIFOs) into dir. */
static void shim_hold_setup(char *dir, size_t n)
{
    char *shim = sbx__kit_find_helper("sbx-shim", "SBX_SHIM");
    char *real = shim ? realpath(shim, NULL) : NULL;
    if (!real)
        TAP_FAIL("no sbx-shim to hand over to");
    snprintf(dir, n, "%s/hold", tap_tmpdir());
    char out[4096];
    if (run_cmd(out, sizeof(out),
                "set -e; mkdir -p %s; cp %s %s/sbx-shim-hold; ln -s %s %s/real; "
                "mkfifo -m 600 %s/held %s/go",
                dir, self_path, dir, real, dir, dir, dir) != 0)
        TAP_FAIL("making the shim stand-in: %s", out);
    free(real);
    free(shim);
}

/* Waits for the stand-in to hold a create (bounded by the alarm); its pid. */
static pid_t shim_hold_wait(const char *dir)
{
    char path[PATH_MAX], buf[32] = "";
    snprintf(path, sizeof(path), "%s/held", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t k = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    pid_t pid = k > 0 ? (pid_t)strtol(buf, NULL, 10) : 0;
    if (pid <= 0)
        TAP_FAIL("the shim stand-in did not say it holds the create");
    return pid;
}

/* Lets the stand-in go on into the real shim; false when it is no longer there to. */
static bool shim_hold_release(const char *dir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/go", dir);
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false; /* ENXIO: no reader, the stand-in died */
    close(fd);
    return true;
}

/*
 * [gcrace] gc beside a create, at the create's most fragile moment: its shim
 * started, the box directory not made yet. gc leaves it alone (the creator's
 * lock says the box is being created), and the create succeeds.
 */
static void test_gc_leaves_a_box_being_created_alone(void)
{
    need_boxes();
    char dir[512], cfg[600];
    shim_hold_setup(dir, sizeof(dir));
    snprintf(cfg, sizeof(cfg), "{\"shim\": \"%s/sbx-shim-hold\"}", dir);
    sbx_provider *p = provider(cfg);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = NULL;
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_new(p, s, &sb, &e_));
    TAP_OK(sbx_sandbox_start_async(sb, NULL, &f, &e_));
    shim_hold_wait(dir);
    char boxes[700];
    snprintf(boxes, sizeof(boxes), "%s/boxes", state_dir);
    TAP_EQ_INT(entries(boxes), 0);
    char **removed = NULL;
    sbx_linux_gc_opts o = { .grace_s = 0.001 };
    TAP_OK(sbx__linux_gc(state_dir, &o, &removed, &e_));
    if (removed)
        TAP_FAIL("gc collected %s, a box being created", removed[0]);
    if (!shim_hold_release(dir))
        TAP_FAIL("gc stopped the shim of a box being created");
    sbx_error *e = NULL;
    if (sbx_future_wait(f, -1, &e) != SBX_OK)
        TAP_FAIL("the create beside gc failed: %s", sbx_error_message(e));
    sbx_future_free(f);
    TAP_EQ_INT(rc_of(sb, "true"), 0);
    /* The lock went with the create. */
    char creating[700];
    snprintf(creating, sizeof(creating), "%s/creating", state_dir);
    TAP_EQ_INT(entries(creating), 0);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/*
 * A shim that ends before the box is ready: the create's error says what
 * ended it (its exit status or signal, or the signal it got and from whom)
 * and where its stderr went, not a guess.
 */
static void test_shim_gone_before_ready_says_why(void)
{
    need_boxes();
    char dir[512], cfg[600];
    shim_hold_setup(dir, sizeof(dir));
    snprintf(cfg, sizeof(cfg), "{\"shim\": \"%s/sbx-shim-hold\"}", dir);
    sbx_provider *p = provider(cfg);
    /* Killed outright: nothing can report but its exit status. */
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = NULL;
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_new(p, s, &sb, &e_));
    TAP_OK(sbx_sandbox_start_async(sb, NULL, &f, &e_));
    pid_t pid = shim_hold_wait(dir);
    TAP_EQ_INT(kill(pid, SIGKILL), 0);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_future_wait(f, -1, &e), SBX_ECREATE);
    char want[128];
    snprintf(want, sizeof(want), "sbx-shim (pid %d) was killed by signal 9 (SIGKILL)", (int)pid);
    TAP_CONTAINS(sbx_error_message(e), want);
    TAP_CONTAINS(sbx_error_message(e), "SBX_SHIM_STDERR");
    TAP_TRUE(!strstr(sbx_error_message(e), "system log"));
    sbx_error_free(e);
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    /* Stopped (SIGTERM) before the handover: the shim tells who stopped it. */
    TAP_OK(sbx_sandbox_new(p, s, &sb, &e_));
    TAP_OK(sbx_sandbox_start_async(sb, NULL, &f, &e_));
    pid = shim_hold_wait(dir);
    TAP_EQ_INT(kill(pid, SIGTERM), 0);
    if (!shim_hold_release(dir))
        TAP_FAIL("SIGTERM killed the starting shim without a word");
    e = NULL;
    TAP_EQ_INT(sbx_future_wait(f, -1, &e), SBX_ECREATE);
    snprintf(want, sizeof(want), "got SIGTERM from pid %d", (int)getpid());
    TAP_CONTAINS(sbx_error_message(e), want);
    sbx_error_free(e);
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_ttl_enforced_without_creator(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_ttl(s, 1);
    sbx_sandbox *sb = start(p, s);
    char bd[900];
    snprintf(bd, sizeof(bd), "%s/boxes/%s", state_dir, sbx_sandbox_id(sb));
    /* The shim ends the box at its TTL; nobody asks it to. */
    while (have_file(bd)) /* bounded by the test's alarm */
        usleep(50 * 1000);
    status_is(sb, SBX_STATUS_STOPPED);
    /*
     * An exec after the TTL is not an error: the reference's container
     * providers return rc 125, error_type "sandbox" (docker exec on a
     * container no longer there), twice in a row.
     */
    for (int k = 0; k < 2; k++) {
        sbx_exec_result *r = NULL;
        TAP_OK(sbx_sandbox_exec(sb, "true", NULL, &r, &e_));
        TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
        TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
        TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "agent");
        sbx_exec_result_free(r);
    }
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_serialize_connect_list_gc(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_metadata(s, "run_id", "r42");
    sbx_spec_set_env(s, "FROM_SPEC", "yes");
    sbx_sandbox *sb = start(p, s);
    char *desc = NULL;
    TAP_OK(sbx_sandbox_serialize(sb, NULL, &desc, &e_));
    TAP_CONTAINS(desc, sbx_sandbox_id(sb));
    /*
     * Another process connects, runs a command, and leaves the box running:
     * this binary again, fresh (a plain fork would inherit our loop thread's
     * half-done work, which valgrind then counts as the child's leaks).
     */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("SBX_TEST_LINUX_CONNECT", desc, 1);
        execl(self_path, "test_linux", (char *)NULL);
        _exit(127);
    }
    int wst;
    waitpid(pid, &wst, 0);
    TAP_EQ_INT(WEXITSTATUS(wst), 0);
    TAP_CONTAINS(out_of(sb, "cat /tmp/from-child"), "yes");
    /* Listing by label. */
    sbx_kv labels = { 0 };
    sbx__kv_set(&labels, "run_id", "r42");
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    TAP_OK(sbx__linux_list(state_dir, &labels, &boxes, &n, &e_));
    TAP_EQ_INT(n, 1);
    TAP_EQ_STR(boxes[0].rec.id, sbx_sandbox_id(sb));
    TAP_TRUE(boxes[0].shim_alive);
    sbx__linux_list_free(boxes, n);
    /* gc without labels leaves a healthy box alone; with its run's label it stops it. */
    char **removed = NULL;
    TAP_OK(sbx__linux_gc(state_dir, NULL, &removed, &e_));
    TAP_NULL(removed);
    sbx_linux_gc_opts o = { .labels = &labels };
    TAP_OK(sbx__linux_gc(state_dir, &o, &removed, &e_));
    TAP_TRUE(removed && removed[0] && !strcmp(removed[0], sbx_sandbox_id(sb)));
    sbx_strv_free(removed);
    status_is(sb, SBX_STATUS_STOPPED);
    sbx__kv_free(&labels);
    free(desc);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void progress_cb(const char *stage, uint64_t done, uint64_t total, void *data)
{
    (void)stage;
    (void)total;
    *(uint64_t *)data = done;
}

static void test_image_import_list_remove(void)
{
    need_boxes();
    char dir[512], tar[512];
    busybox_rootfs(dir, sizeof(dir), tar, sizeof(tar));
    uint64_t seen = 0;
    sbx_linux_image_opts io = { .progress = progress_cb, .data = &seen };
    TAP_OK(sbx__linux_image_import(state_dir, NULL, "bb", tar, &io, &e_));
    TAP_TRUE(seen > 0);
    sbx_linux_image_info *v = NULL;
    size_t n = 0;
    TAP_OK(sbx__linux_image_list(state_dir, NULL, &v, &n, &e_));
    TAP_EQ_INT(n, 1);
    TAP_EQ_STR(v[0].name, "bb");
    TAP_TRUE(!strncmp(v[0].digest, "sha256:", 7));
    /* The digest is the tarball's sha256, as sha256sum(1) computes it. */
    char sum[128];
    TAP_EQ_INT(run_cmd(sum, sizeof(sum), "sha256sum %s | cut -d' ' -f1 | tr -d '\\n'", tar), 0);
    TAP_EQ_STR(v[0].digest + 7, sum);
    TAP_TRUE(v[0].size > 1000000);
    sbx__linux_image_list_free(v, n);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "bb");
    sbx_sandbox *sb = start(p, s);
    TAP_CONTAINS(out_of(sb, "cat /etc/marker"), "bb-image");
    stop_free(sb);
    TAP_OK(sbx__linux_image_remove(state_dir, NULL, "bb", &e_));
    /* A name that is gone is a create error that says what to do. */
    start_fails(p, s, SBX_ECREATE, "sbx image import");
    /* A source that is no archive: SBX_EINVAL to import it, SBX_ECREATE to create from it. */
    char garbage[600];
    snprintf(garbage, sizeof(garbage), "%s/garbage.tar", tap_tmpdir());
    TAP_EQ_INT(sbx__write_file_atomic(garbage, "not a tarball, not at all", 25, 0644), 0);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx__linux_image_import(state_dir, NULL, "g", garbage, NULL, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "not a tar archive");
    sbx_error_free(e);
    sbx_spec_set_image(s, garbage);
    start_fails(p, s, SBX_ECREATE, "not a tar archive");
    free_and_census(s, p, state_dir);
}

static void test_ready_timeout_is_everify_and_torn_down(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_spec_set_ready_timeout(s, 0.0001);
    start_fails(p, s, SBX_EVERIFY, "ready");
    free_and_census(s, p, state_dir);
}

/* tests/run.sh runs this case alone, after the others (200 boxes at once). */
__attribute__((used)) static const char serial_cases[] = "SBX_TEST_SERIAL_CASES=\"many_boxes_at_once\"";

static void test_many_boxes_at_once(void)
{
    need_boxes();
    const char *env = getenv("SBX_LINUX_MANY");
    int n = env ? (int)strtol(env, NULL, 10) : 200;
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    /*
     * 200 creates at once under a sanitizer on a loaded 2-core machine can
     * take past the default 30 s: the bound is for a wedged box, not speed.
     */
    TAP_EQ_INT(sbx_spec_set_ready_timeout(s, 180), SBX_OK);
    sbx_sandbox **sbs = start_many(p, s, n);
    for (int i = 0; i < n; i++)
        TAP_CONTAINS(out_of(sbs[i], "hostname"), sbx_sandbox_id(sbs[i]));
    stop_many_wait(sbs, stop_many_begin(sbs, n), n);
    free(sbs);
    free_and_census(s, p, state_dir);
}

/* Runs `hostname` in every box at once and checks each answered with its own id. */
static void hostname_all_at_once(sbx_sandbox **sbs, int n)
{
    sbx_future *fs[64];
    for (int i = 0; i < n; i++)
        TAP_OK(sbx_sandbox_exec_async(sbs[i], "hostname", NULL, &fs[i], &e_));
    for (int i = 0; i < n; i++) {
        sbx_exec_result *r = NULL;
        sbx_error *e = NULL;
        if (sbx_future_wait(fs[i], -1, &e) != SBX_OK ||
            sbx_future_take_exec_result(fs[i], &r, &e) != SBX_OK)
            TAP_FAIL("box %d: %s", i, sbx_error_message(e));
        TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
        TAP_CONTAINS(sbx_exec_result_stdout(r, NULL), sbx_sandbox_id(sbs[i]));
        sbx_exec_result_free(r);
        sbx_future_free(fs[i]);
    }
}

/*
 * 20 boxes through a pool of 4 agent connections: every op finds its box
 * (reconnecting as needed), the process never keeps more than 4 connections
 * once its ops are done, and a box whose agent died while its connection
 * was closed is still reported as gone.
 */
static void test_agent_connections_pooled(void)
{
    need_boxes();
    enum { N = 20, CAP = 4 };
    sbx_provider *p = provider("{\"max_agent_connections\": 4}");
    sbx_spec *s = spec_none();
    /* One box first, so the loop thread and its descriptors exist before the baseline. */
    sbx_sandbox *sbs[N];
    sbs[0] = start(p, s);
    int base = open_fds() - 1; /* box 0's connection */
    sbx_future *fs[N];
    for (int i = 1; i < N; i++) {
        TAP_EQ_INT(sbx_sandbox_new(p, s, &sbs[i], NULL), SBX_OK);
        TAP_OK(sbx_sandbox_start_async(sbs[i], NULL, &fs[i], &e_));
    }
    for (int i = 1; i < N; i++) {
        sbx_error *e = NULL;
        if (sbx_future_wait(fs[i], -1, &e) != SBX_OK)
            TAP_FAIL("box %d: %s", i, sbx_error_message(e));
        sbx_future_free(fs[i]);
    }
    TAP_TRUE(open_fds() <= base + CAP);
    for (int round = 0; round < 3; round++) {
        /* Interleaved: each exec needs a box whose connection the pool closed. */
        for (int i = 0; i < N; i++) {
            char cmd[64];
            snprintf(cmd, sizeof(cmd), "echo %d-%d; hostname", round, i);
            char want[64];
            snprintf(want, sizeof(want), "%d-%d\n%s", round, i, sbx_sandbox_id(sbs[i]));
            TAP_CONTAINS(out_of(sbs[i], cmd), want);
            TAP_TRUE(open_fds() <= base + CAP);
        }
        /* All at once: busy connections stay open, the idle ones are closed after. */
        hostname_all_at_once(sbs, N);
        TAP_TRUE(open_fds() <= base + CAP);
    }
    /* Files go through the pool too. */
    char src[600], back[600];
    snprintf(src, sizeof(src), "%s/in.txt", tap_tmpdir());
    snprintf(back, sizeof(back), "%s/back.txt", tap_tmpdir());
    FILE *f = fopen(src, "we");
    fputs("pooled\n", f);
    fclose(f);
    for (int i = 0; i < N; i++)
        TAP_OK(sbx_sandbox_upload(sbs[i], src, "/tmp/in.txt", &e_));
    for (int i = 0; i < N; i++) {
        TAP_OK(sbx_sandbox_download(sbs[(i + 7) % N], "/tmp/in.txt", back, &e_));
        TAP_CONTAINS(out_of(sbs[i], "cat /tmp/in.txt"), "pooled");
    }
    TAP_TRUE(open_fds() <= base + CAP);

    /* Box 0's connection was closed long ago: kill its agent, then use it. */
    char rp[900];
    snprintf(rp, sizeof(rp), "%s/boxes/%s/record.json", state_dir, sbx_sandbox_id(sbs[0]));
    json_t *j = json_load_file(rp, 0, NULL);
    pid_t init = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
    json_decref(j);
    TAP_TRUE(init > 1);
    TAP_EQ_INT(kill(init, SIGKILL), 0);
    sbx_status st = SBX_STATUS_RUNNING;
    while (st == SBX_STATUS_RUNNING) { /* the shim marks the record; the alarm bounds this */
        TAP_EQ_INT(sbx_sandbox_status(sbs[0], &st, NULL), SBX_OK);
        if (st == SBX_STATUS_RUNNING)
            usleep(10000);
    }
    TAP_EQ_INT(st, SBX_STATUS_ERROR);
    for (int k = 0; k < 2; k++) {
        /* The reference's result for a container no longer running, not an error. */
        sbx_exec_result *r = NULL;
        TAP_OK(sbx_sandbox_exec(sbs[0], "true", NULL, &r, &e_));
        TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
        TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
        TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "agent");
        TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "");
        sbx_exec_result_free(r);
    }
    /* A transfer still fails, with the reason. */
    sbx_error *ue = NULL;
    TAP_EQ_INT(sbx_sandbox_upload(sbs[0], src, "/tmp/x", &ue), SBX_EPROVIDER);
    TAP_CONTAINS(sbx_error_message(ue), "agent");
    sbx_error_free(ue);
    /* The others are unaffected. */
    hostname_all_at_once(sbs + 1, N - 1);
    TAP_TRUE(open_fds() <= base + CAP);
    for (int i = 0; i < N; i++)
        stop_free(sbs[i]);
    free_and_census(s, p, state_dir);
}

/* A box killed while its connection sits closed in the pool: one reconnect, then the error. */
static void test_pooled_agent_killed_gives_error(void)
{
    need_boxes();
    sbx_provider *p = provider("{\"max_agent_connections\": 1}");
    sbx_spec *s = spec_none();
    sbx_sandbox *a = start(p, s), *b = start(p, s); /* b's connection evicts a's */
    TAP_CONTAINS(out_of(b, "hostname"), sbx_sandbox_id(b));
    char rp[900];
    snprintf(rp, sizeof(rp), "%s/boxes/%s/record.json", state_dir, sbx_sandbox_id(a));
    json_t *j = json_load_file(rp, 0, NULL);
    pid_t init = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
    json_decref(j);
    TAP_TRUE(init > 1);
    TAP_EQ_INT(kill(init, SIGKILL), 0);
    /* Without waiting for the shim: the exec's own reconnect finds the agent gone. */
    /* Whether the reconnect or the exec lost the race with the kill: rc 125, "sandbox". */
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(a, "true", NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "agent");
    sbx_exec_result_free(r);
    status_is(a, SBX_STATUS_ERROR);
    TAP_CONTAINS(out_of(b, "hostname"), sbx_sandbox_id(b));
    stop_free(a);
    stop_free(b);
    free_and_census(s, p, state_dir);
}

/* $0 of a string command, and whether it is bash. */
static const char *shell_of(sbx_sandbox *sb)
{
    return out_of(sb, "echo \"$0 ${BASH_VERSION:+has-bash}\"");
}

/*
 * The shell, as the reference's docker provider picks it: bash when the box
 * has it (the none image, from the host), sh when it does not (busybox);
 * the `shell` config key overrides; "" is refused. Plus the reference's
 * other results: 128+N for a signal, a download of a missing file, an
 * upload onto a directory.
 */
static void test_shell_signals_and_transfers_as_docker(void)
{
    need_boxes();
    if (!have_file("/bin/bash"))
        TAP_SKIP("the host has no bash for the none image");
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_STR(shell_of(sb), "bash has-bash\n");
    TAP_EQ_STR(out_of(sb, "echo 'export FROM_ENV=sourced' > /tmp/env.sh; "
                          "source /tmp/env.sh && echo $FROM_ENV"),
               "sourced\n");
    /* A command killed by a signal: 128 + N, as docker and a shell say. */
    TAP_EQ_INT(rc_of(sb, "kill -9 $$"), 137);
    TAP_EQ_INT(rc_of(sb, "kill -TERM $$"), 143);
    /* upload(f, "/tmp"): /tmp/<f's name>, as docker cp. */
    char src[600], back[600];
    snprintf(src, sizeof(src), "%s/up-name.txt", tap_tmpdir());
    snprintf(back, sizeof(back), "%s/back.txt", tap_tmpdir());
    TAP_EQ_INT(write_text(src, "into the directory\n"), 0);
    TAP_OK(sbx_sandbox_upload(sb, src, "/tmp", &e_));
    TAP_EQ_STR(out_of(sb, "cat /tmp/up-name.txt; test -d /tmp && echo dir"),
               "into the directory\ndir\n");
    /* download of a missing file: SBX_ENOENT naming it (Python: a RuntimeError too). */
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_download(sb, "/missing", back, &e), SBX_ENOENT);
    TAP_CONTAINS(sbx_error_message(e), "/missing");
    sbx_error_free(e);
    stop_free(sb);

    /* An image without bash: sh, as docker's `command -v bash` fails there. */
    char dir[512], tar[512];
    busybox_rootfs(dir, sizeof(dir), tar, sizeof(tar));
    sbx_spec *bs = sbx_spec_new();
    sbx_spec_set_image(bs, dir);
    sb = start(p, bs);
    TAP_EQ_STR(shell_of(sb), "sh \n");
    TAP_EQ_INT(rc_of(sb, "kill -9 $$"), 137);
    stop_free(sb);
    sbx_provider_free(p);

    /* Configured: sh everywhere. */
    p = provider("{\"shell\": \"sh\"}");
    sb = start(p, s);
    TAP_EQ_STR(shell_of(sb), "sh \n");
    stop_free(sb);
    sbx_provider_free(p);
    /* A shell the box lacks: each string exec says so, rc 125 "sandbox". */
    p = provider("{\"shell\": \"/no/such/shell\"}");
    sb = start(p, bs);
    sbx_exec_result *r = run(sb, "true", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "/no/such/shell");
    sbx_exec_result_free(r);
    stop_free(sb);
    sbx_provider_free(p);
    /* "" is refused, as the reference's exec_shell; null is auto. */
    e = NULL;
    provider_fails("{\"linux\": {\"shell\": \"\"}}", SBX_EINVAL, "shell must be null");
    sbx_spec_free(bs);
    sbx_spec_free(s);
    census_check(state_dir);
}

static void test_oci_layout_with_whiteouts(void)
{
    need_boxes();
    char dir[512], tar[512];
    busybox_rootfs(dir, sizeof(dir), tar, sizeof(tar));
    const char *t = tap_tmpdir();
    char out[8192];
    /* Two layers: the busybox tree, then one deleting /etc/marker and adding /etc/new. */
    int rc = run_cmd(
        out, sizeof(out),
        "set -e; L=%s/oci; mkdir -p $L/blobs/sha256 %s/l2/etc; touch %s/l2/etc/.wh.marker; "
        "echo new > %s/l2/etc/new; tar -C %s/l2 -cf %s/l2.tar .; layers=; "
        "for f in %s %s/l2.tar; do d=$(sha256sum $f | cut -d' ' -f1); cp $f $L/blobs/sha256/$d; "
        "s=$(stat -c %%s $f); layers=\"$layers${layers:+,}{\\\"mediaType\\\":"
        "\\\"application/vnd.oci.image.layer.v1.tar\\\",\\\"digest\\\":\\\"sha256:$d\\\","
        "\\\"size\\\":$s}\"; done; "
        "printf '{\"schemaVersion\":2,\"layers\":[%%s]}' \"$layers\" > %s/m.json; "
        "m=$(sha256sum %s/m.json | cut -d' ' -f1); cp %s/m.json $L/blobs/sha256/$m; "
        "printf '{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha256:%%s\",\"annotations\":"
        "{\"org.opencontainers.image.ref.name\":\"v1\"}}]}' $m > $L/index.json; "
        "echo '{\"imageLayoutVersion\":\"1.0.0\"}' > $L/oci-layout",
        t, t, t, t, t, t, tar, t, t, t, t);
    if (rc != 0)
        TAP_FAIL("building the OCI layout: %s", out);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    char image[700];
    snprintf(image, sizeof(image), "oci:%s/oci:v1", t);
    sbx_spec_set_image(s, image);
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_INT(rc_of(sb, "test -e /etc/marker"), 1);
    TAP_CONTAINS(out_of(sb, "cat /etc/new"), "new");
    TAP_EQ_INT(rc_of(sb, "test -x /bin/sh"), 0);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* --- user namespaces ------------------------------------------------------ */

/* The box's record as JSON (caller decrefs). */
static json_t *record_of(sbx_sandbox *sb)
{
    char path[900];
    snprintf(path, sizeof(path), "%s/boxes/%s/record.json", state_dir, sbx_sandbox_id(sb));
    json_t *j = json_load_file(path, 0, NULL);
    if (!j)
        TAP_FAIL("no record at %s", path);
    return j;
}

/* The host uid box root maps to, and the box's PID 1 as a host pid. */
static long long userns_uid_of(sbx_sandbox *sb, pid_t *init)
{
    json_t *j = record_of(sb);
    long long uid = json_is_integer(json_object_get(j, "userns_uid"))
                        ? json_integer_value(json_object_get(j, "userns_uid"))
                        : -1;
    if (init)
        *init = (pid_t)json_integer_value(json_object_get(j, "init_pid"));
    json_decref(j);
    return uid;
}

/* The real uid of a host process, from its /proc status. */
static long long host_uid_of(pid_t pid)
{
    char path[64], *t = NULL;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    sbx__read_file(path, &t, NULL);
    const char *u = t ? strstr(t, "\nUid:") : NULL;
    long long v = u ? strtoll(u + 5, NULL, 10) : -1;
    free(t);
    return v;
}

/* The owner of a path inside the box as the host sees it (through /proc/PID/root). */
static long long host_owner_of(pid_t init, const char *box_path)
{
    char path[700];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d/root%s", (int)init, box_path);
    return stat(path, &st) == 0 ? (long long)st.st_uid : -1;
}

static void test_userns_root_maps_to_unprivileged_range(void)
{
    need_boxes();
    /* A small custom range: box root must land inside it, on a slot boundary. */
    sbx_provider *p = provider("{\"userns\": true, \"userns_base\": 300000, \"userns_slots\": 8}");
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    pid_t init = 0;
    long long uid = userns_uid_of(sb, &init);
    TAP_TRUE(uid >= 300000 && uid < 300000 + 8 * 65536);
    TAP_EQ_INT((uid - 300000) % 65536, 0);
    /* Root inside; the box's PID 1 (the agent) is the mapped unprivileged uid on the host. */
    TAP_EQ_STR(out_of(sb, "id -u"), "0\n");
    TAP_CONTAINS(out_of(sb, "tr '\\0' ' ' < /proc/1/cmdline"), "sbx-agent");
    TAP_TRUE(init > 1);
    TAP_EQ_INT(host_uid_of(init), uid);
    char map[64];
    snprintf(map, sizeof(map), "%lld", uid);
    TAP_CONTAINS(out_of(sb, "cat /proc/self/uid_map /proc/self/gid_map"), map);
    /* Image (here: the host's system directories) files show as root's inside. */
    TAP_EQ_STR(out_of(sb, "stat -c %u:%g /usr/bin/env /etc/passwd /"), "0:0\n0:0\n0:0\n");
    /* ... read-only all the same: a host directory bound in cannot be written. */
    TAP_NE_INT(rc_of(sb, "touch /usr/bin/sbx-should-fail"), 0);
    TAP_CONTAINS(out_of(sb, "touch /usr/bin/sbx-should-fail 2>&1 || true"), "Read-only");
    /* A file the box creates belongs to the mapped uid on the host. */
    TAP_EQ_INT(rc_of(sb, "echo data > /tmp/mine && mkdir -p /work/d"), 0);
    TAP_EQ_INT(host_owner_of(init, "/tmp/mine"), uid);
    TAP_EQ_INT(host_owner_of(init, "/work/d"), uid);
    /* Another user of /etc/passwd: its id inside, uid + id outside. */
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_user(o, "nobody");
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, "id -u; touch /tmp/nob", o, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "65534\n");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    TAP_EQ_INT(host_owner_of(init, "/tmp/nob"), uid + 65534);
    /* Uploads belong to box root, downloads come back whole. */
    char local[600], back[600];
    snprintf(local, sizeof(local), "%s/up.txt", tap_tmpdir());
    snprintf(back, sizeof(back), "%s/back.txt", tap_tmpdir());
    write_text(local, "uploaded\n");
    TAP_OK(sbx_sandbox_upload(sb, local, "/work/up.txt", &e_));
    TAP_EQ_STR(out_of(sb, "stat -c %u:%g /work/up.txt; cat /work/up.txt"), "0:0\nuploaded\n");
    TAP_EQ_INT(host_owner_of(init, "/work/up.txt"), uid);
    TAP_OK(sbx_sandbox_download(sb, "/tmp/mine", back, &e_));
    char *t = read_text(back);
    TAP_EQ_STR(t, "data\n");
    free(t);
    /* /proc and /dev work; the host's processes stay invisible. */
    TAP_TRUE(atoi_ok(out_of(sb, "ls /proc | grep -c '^[0-9]'")) < 10);
    TAP_EQ_INT(rc_of(sb, "echo x > /dev/null && head -c 4 /dev/urandom | wc -c | grep -q 4"), 0);
    status_is(sb, SBX_STATUS_RUNNING);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_userns_image_limits_and_escapes(void)
{
    need_boxes();
    char dir[512], tar[512];
    busybox_rootfs(dir, sizeof(dir), tar, sizeof(tar));
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, tar);
    /* Per box, through provider_options. */
    sbx_spec_set_provider_options(s, "{\"userns\": true, \"pids_limit\": 40}", NULL);
    sbx_sandbox *a = start(p, s);
    sbx_sandbox *b = start(p, s);
    pid_t ia = 0, ib = 0;
    long long ua = userns_uid_of(a, &ia), ub = userns_uid_of(b, &ib);
    /* Each box has a range of its own. */
    TAP_TRUE(ua >= SBX_LINUX_USERNS_BASE && ub >= SBX_LINUX_USERNS_BASE);
    TAP_TRUE(ua != ub);
    TAP_EQ_INT(host_uid_of(ia), ua);
    TAP_EQ_INT(host_uid_of(ib), ub);
    /* The image's files are root's inside; writing them copies up, owned by the box's range. */
    TAP_EQ_STR(out_of(a, "stat -c %u:%g /bin/busybox /etc/marker"), "0:0\n0:0\n");
    TAP_EQ_INT(rc_of(a, "echo mine > /etc/marker && mkdir /root2 && chmod 700 /root2"), 0);
    TAP_EQ_STR(out_of(a, "cat /etc/marker; stat -c %u:%a /etc/marker"), "mine\n0:644\n");
    TAP_EQ_INT(host_owner_of(ia, "/etc/marker"), ua);
    TAP_CONTAINS(out_of(b, "cat /etc/marker"), "bb-image");
    /* Limits still apply: the pids limit stops a fork bomb, the box lives. */
    sbx_exec_result *r =
        run(a, "i=0; while [ $i -lt 100 ]; do sleep 3 & i=$((i+1)); done; wait; echo finished", NULL);
    const char *er = sbx_exec_result_stderr(r, NULL);
    TAP_TRUE(er && (strstr(er, "fork") || strstr(er, "Resource temporarily unavailable")));
    sbx_exec_result_free(r);
    TAP_CONTAINS(out_of(a, "echo alive"), "alive");
    /* Escapes still fail. */
    TAP_NE_INT(rc_of(a, "mount -t tmpfs x /mnt"), 0);
    TAP_NE_INT(rc_of(a, "unshare -m true"), 0);
    TAP_NE_INT(rc_of(a, "unshare -U true"), 0);
    TAP_NE_INT(rc_of(a, "echo evil > /proc/sys/kernel/hostname"), 0);
    TAP_NE_INT(rc_of(a, "mknod /tmp/disk b 254 0"), 0);
    TAP_NE_INT(rc_of(a, "echo 1 > /sys/kernel/mm/ksm/run"), 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "kill -0 %d", (int)getpid());
    TAP_NE_INT(rc_of(a, cmd), 0);
    TAP_CONTAINS(out_of(a, "grep NoNewPrivs /proc/self/status"), "1");
    TAP_CONTAINS(out_of(a, "grep Seccomp: /proc/self/status"), "2");
    stop_free(a);
    stop_free(b);
    free_and_census(s, p, state_dir);
}

static void test_userns_ranges_run_out_and_config_checked(void)
{
    need_boxes();
    /* A range that does not fit in 32-bit uids is refused at init. */
    provider_fails("{\"linux\": {\"userns_base\": 4294000000}}", SBX_EINVAL, "userns_base");
    /* One slot: the second box cannot get a range while the first holds it... */
    sbx_provider *p = provider("{\"userns\": true, \"userns_slots\": 1}");
    sbx_spec *s = spec_none();
    sbx_sandbox *a = start(p, s);
    start_fails(p, s, SBX_ECREATE, "userns_slots");
    long long ua = userns_uid_of(a, NULL);
    stop_free(a);
    /* ... and gets it once the first box is gone. */
    sbx_sandbox *c = start(p, s);
    TAP_EQ_INT(userns_uid_of(c, NULL), ua);
    TAP_EQ_STR(out_of(c, "id -u"), "0\n");
    stop_free(c);
    free_and_census(s, p, state_dir);
}

static void test_userns_network_host_and_ttl(void)
{
    need_boxes();
    sbx_provider *p = provider("{\"userns\": true, \"network\": \"host\"}");
    sbx_spec *s = spec_none();
    sbx_spec_set_ttl(s, 1);
    sbx_sandbox *sb = start(p, s);
    pid_t init = 0;
    long long uid = userns_uid_of(sb, &init);
    TAP_EQ_INT(host_uid_of(init), uid);
    /* The host's interfaces are visible (network: host), /sys is the host's, read-only. */
    TAP_EQ_INT(rc_of(sb, "test -e /sys/class/net/lo && grep -q lo: /proc/net/dev"), 0);
    TAP_NE_INT(rc_of(sb, "echo 1 > /sys/kernel/mm/ksm/run"), 0);
    TAP_EQ_STR(out_of(sb, "id -u"), "0\n");
    /* The shim ends the box at its TTL; nothing is left. */
    char bd[900];
    snprintf(bd, sizeof(bd), "%s/boxes/%s", state_dir, sbx_sandbox_id(sb));
    while (have_file(bd)) /* bounded by the test's alarm */
        usleep(50 * 1000);
    status_is(sb, SBX_STATUS_STOPPED);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/*
 * An image on a filesystem without idmapped mounts (ramfs) cannot be used by
 * a userns box: a clear SBX_ECREATE, and nothing left. The ramfs lives in a
 * mount namespace of this test's own, which dies with it (and its shims).
 */
static void test_userns_unsupported_filesystem_refused(void)
{
    need_boxes();
    char dir[512], tar[512];
    busybox_rootfs(dir, sizeof(dir), tar, sizeof(tar));
    if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0)
        TAP_FAIL("private mount namespace: %s", strerror(errno));
    char ram[600], out[4096];
    snprintf(ram, sizeof(ram), "%s/ram", tap_tmpdir());
    mkdir(ram, 0755);
    if (mount("ramfs", ram, "ramfs", 0, "mode=0755") < 0)
        TAP_SKIP("no ramfs to test with");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cp -a %s/. %s/", dir, ram), 0);
    sbx_provider *p = provider("{\"userns\": true}");
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, ram);
    start_fails(p, s, SBX_ECREATE, "idmapped");
    /* The same image without a user namespace works. */
    sbx_provider *q = provider(NULL);
    sbx_sandbox *sb = start(q, s);
    TAP_CONTAINS(out_of(sb, "cat /etc/marker"), "bb-image");
    stop_free(sb);
    sbx_provider_free(q);
    sbx_spec_free(s);
    sbx_provider_free(p);
    census_check(state_dir);
    umount2(ram, MNT_DETACH);
}

/* The one compiled seccomp program in the state directory's cache, or "" when none. */
static void seccomp_cache_file(char *out, size_t n)
{
    char dir[700];
    snprintf(dir, sizeof(dir), "%s/seccomp", state_dir);
    out[0] = 0;
    int count = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 4 && !strcmp(de->d_name + l - 4, ".bpf")) {
            snprintf(out, n, "%s/%s", dir, de->d_name);
            count++;
        }
    }
    if (d)
        closedir(d);
    TAP_TRUE(count <= 1);
}

/* Replaces the cached program with `len` bytes of `prog` and their sha256 (or a bad one). */
static void write_cache(const char *path, const void *prog, size_t len, bool good_digest, mode_t mode)
{
    uint8_t buf[4096];
    memcpy(buf, prog, len);
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, len, buf);
    sha256_digest(&h, SHA256_DIGEST_SIZE, buf + len);
    if (!good_digest)
        buf[len] ^= 1;
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    TAP_TRUE(fd >= 0);
    TAP_EQ_INT(write(fd, buf, len + SHA256_DIGEST_SIZE), (long)(len + SHA256_DIGEST_SIZE));
    fchmod(fd, mode);
    close(fd);
}

/*
 * A box under the real filter: a new user namespace needs no capability, so
 * only seccomp refuses it.
 */
static void box_is_filtered(sbx_provider *p, sbx_spec *s)
{
    sbx_sandbox *sb = start(p, s);
    TAP_CONTAINS(out_of(sb, "grep Seccomp: /proc/self/status"), "2");
    TAP_NE_INT(rc_of(sb, "unshare -U true"), 0);
    stop_free(sb);
}

static void test_seccomp_filter_cached_and_checked(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    char path[1024];
    struct stat a, b;
    /* The first box compiles the program and caches it, private to root. */
    box_is_filtered(p, s);
    seccomp_cache_file(path, sizeof(path));
    TAP_TRUE(path[0] != 0);
    TAP_EQ_INT(stat(path, &a), 0);
    TAP_EQ_INT(a.st_mode & 0777, 0600);
    TAP_EQ_INT((a.st_size - SHA256_DIGEST_SIZE) % (long)sizeof(struct sock_filter), 0);
    /* The next box loads it as it is. */
    box_is_filtered(p, s);
    TAP_EQ_INT(stat(path, &b), 0);
    TAP_EQ_INT(b.st_ino, a.st_ino);
    TAP_EQ_INT(b.st_mtim.tv_nsec, a.st_mtim.tv_nsec);
    /* An "allow everything" program is never taken from a file that fails its digest... */
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    write_cache(path, &allow, sizeof(allow), false, 0600);
    box_is_filtered(p, s);
    TAP_EQ_INT(stat(path, &b), 0);
    TAP_EQ_INT(b.st_size, a.st_size);
    /* ...nor from one that others could have written. */
    write_cache(path, &allow, sizeof(allow), true, 0666);
    box_is_filtered(p, s);
    TAP_EQ_INT(stat(path, &b), 0);
    TAP_EQ_INT(b.st_size, a.st_size);
    TAP_EQ_INT(b.st_mode & 0777, 0600);
    /* A program the kernel refuses (it never returns): the box compiles its own. */
    struct sock_filter bad = BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0);
    write_cache(path, &bad, sizeof(bad), true, 0600);
    box_is_filtered(p, s);
    free_and_census(s, p, state_dir);
}

/*
 * The agent (the box's PID 1) is not dumpable: a command in the box, root
 * there but without CAP_SYS_PTRACE, can neither attach to it nor open its
 * memory, while the same command may still do both to its own processes.
 */
static void test_agent_cannot_be_ptraced_from_the_box(void)
{
    need_boxes();
    if (!have_file("/usr/bin/python3"))
        TAP_SKIP("python3 is needed to call ptrace in the box");
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    TAP_CONTAINS(out_of(sb, "tr '\\0' ' ' < /proc/1/cmdline"), "sbx-agent");
    TAP_NE_INT(rc_of(sb, "exec 3</proc/1/mem"), 0);
    TAP_NE_INT(rc_of(sb, "cat /proc/1/environ"), 0);
    TAP_NE_INT(rc_of(sb, "readlink /proc/1/exe"), 0);
    TAP_EQ_INT(rc_of(sb, "exec 3</proc/self/mem"), 0);
    /* PTRACE_ATTACH (16) to PID 1 fails; to a child of the command it works. */
    static const char py[] =
        "/usr/bin/python3 -c 'import ctypes,os,sys,time\n"
        "l=ctypes.CDLL(None,use_errno=True)\n"
        "agent=l.ptrace(16,1,0,0)\n"
        "pid=os.fork()\n"
        "if pid==0:\n time.sleep(30); os._exit(0)\n"
        "own=l.ptrace(16,pid,0,0)\n"
        "os.kill(pid,9); os.waitpid(pid,0)\n"
        "print(\"agent\",agent,\"own\",own)'";
    TAP_CONTAINS(out_of(sb, py), "agent -1 own 0");
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/*
 * A box whose directory disappears (rm -rf of the state directory) can no
 * longer be reached or stopped: its shim notices and ends it, leaving nothing.
 */
static void test_box_ends_when_its_directory_is_removed(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    char box_dir[1024];
    snprintf(box_dir, sizeof(box_dir), "%s/boxes/%s", state_dir, sbx_sandbox_id(sb));
    sbx_linux_record rec;
    TAP_OK(sbx__linux_record_read(box_dir, &rec, &e_));
    pid_t shim = rec.shim_pid;
    sbx__linux_record_free(&rec);
    TAP_TRUE(shim > 0 && kill(shim, 0) == 0);
    /*
     * The shim may be writing its record (temp file + rename) while we remove
     * the tree, which makes one rmdir fail with ENOTEMPTY, as `rm -rf` would:
     * remove again until the directory is gone.
     */
    int rm = -1;
    for (int i = 0; i < 20 && rm != 0; i++)
        rm = sbx__rm_rf(box_dir);
    TAP_EQ_INT(rm, 0);
    /* The shim is not our child: wait for its pid to go (it looks every 2 s). */
    for (int i = 0; i < 300 && kill(shim, 0) == 0; i++)
        usleep(50 * 1000);
    TAP_NE_INT(kill(shim, 0), 0);
    sbx_sandbox_free(sb);
    free_and_census(s, p, state_dir);
}

/* --- frozen boxes (issue 24) ----------------------------------------------- */

/* Box `sb`'s record (state_dir/boxes/ID), parsed; the caller frees it. */
static void parsed_record_of(sbx_sandbox *sb, sbx_linux_record *rec)
{
    char bd[900];
    snprintf(bd, sizeof(bd), "%s/boxes/%s", state_dir, sbx_sandbox_id(sb));
    TAP_OK(sbx__linux_record_read(bd, rec, &e_));
}

/* A cgroup file's text (read_text seeks to the end, and a cgroup file has no size). */
static char *cg_text(const char *path)
{
    char *t = NULL;
    size_t n = 0;
    return sbx__read_file(path, &t, &n) == 0 ? t : NULL;
}

/*
 * Freezes (or thaws) box `sb` by hand, by writing the freezer's files as a
 * commit does and as a commit killed mid-copy leaves them: cgroup v2 its
 * group's cgroup.freeze; v1 a freezer group <freezer>/<level>/<id> its
 * processes are moved into (a thaw leaves that group for the box's end to
 * remove). Skips on a host without a freezer.
 */
static void freeze_by_hand(sbx_sandbox *sb, bool on)
{
    sbx_linux_record rec;
    parsed_record_of(sb, &rec);
    const char *cg = json_string_value(json_array_get(rec.cgroups, 0));
    char path[1200], g[700];
    TAP_TRUE(cg != NULL);
    if (sbx__cg_mode() == SBX_CG_V2) {
        snprintf(path, sizeof(path), "%s/cgroup.freeze", cg);
        TAP_EQ_INT(write_text(path, on ? "1" : "0"), 0);
        snprintf(path, sizeof(path), "%s/cgroup.events", cg);
        for (;;) { /* the alarm bounds this */
            char *ev = cg_text(path);
            bool done = ev && (strstr(ev, on ? "frozen 1" : "frozen 0") != NULL);
            free(ev);
            if (done)
                break;
            usleep(10 * 1000);
        }
        sbx__linux_record_free(&rec);
        return;
    }
    if (!have_file("/sys/fs/cgroup/freezer/cgroup.procs"))
        TAP_SKIP("no cgroup freezer here (neither cgroup v2 nor a v1 freezer hierarchy)");
    snprintf(g, sizeof(g), "/sys/fs/cgroup/freezer/%s", sbx__cg_name());
    mkdir(g, 0755);
    snprintf(g, sizeof(g), "/sys/fs/cgroup/freezer/%s/%s", sbx__cg_name(), sbx_sandbox_id(sb));
    if (on) {
        TAP_TRUE(mkdir(g, 0755) == 0 || errno == EEXIST);
        snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
        char *procs = cg_text(path);
        TAP_TRUE(procs != NULL);
        snprintf(path, sizeof(path), "%s/cgroup.procs", g);
        for (char *save = NULL, *pid = strtok_r(procs, "\n", &save); pid;
             pid = strtok_r(NULL, "\n", &save))
            write_text(path, pid); /* one that just exited is no matter */
        free(procs);
    }
    snprintf(path, sizeof(path), "%s/freezer.state", g);
    TAP_EQ_INT(write_text(path, on ? "FROZEN" : "THAWED"), 0);
    for (;;) { /* FREEZING until every process stopped; the alarm bounds this */
        char *st = cg_text(path);
        bool done = st && !strncmp(st, on ? "FROZEN" : "THAWED", 6);
        free(st);
        if (done)
            break;
        usleep(10 * 1000);
    }
    sbx__linux_record_free(&rec);
}

/* Box `sb`'s status, asked until it is not `from` (a kernel's signal lands a moment later). */
static sbx_status status_after(sbx_sandbox *sb, sbx_status from)
{
    sbx_status st = from;
    while (st == from) { /* the alarm bounds this */
        TAP_OK(sbx_sandbox_status(sb, &st, &e_));
        if (st == from)
            usleep(10 * 1000);
    }
    return st;
}

/* The "status" a provider listing gives box `sb`. */
static char *listed_status(sbx_provider *p, sbx_sandbox *sb)
{
    char *json = NULL;
    TAP_OK(sbx_provider_list(p, NULL, &json, &e_));
    json_t *a = json_loads(json, 0, NULL);
    free(json);
    char *st = NULL;
    size_t i;
    json_t *b;
    json_array_foreach(a, i, b)
    {
        if (!strcmp(json_string_value(json_object_get(b, "id")), sbx_sandbox_id(sb)))
            st = strdup(json_string_value(json_object_get(b, "status")));
    }
    json_decref(a);
    TAP_TRUE(st != NULL);
    return st;
}

/*
 * Status says what answers: a frozen box, and one whose agent is stopped
 * (SIGSTOP), say "paused" (the reference's PAUSED), through the handle and
 * through the listing sbx ls and sbx status read; running again once thawed
 * or continued.
 */
static void test_status_paused_when_frozen_or_agent_stopped(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_none();
    sbx_sandbox *sb = start(p, s);
    status_is(sb, SBX_STATUS_RUNNING);
    /* The shim marks its record running just after the handover: a listing at once may
     * still read "starting" (the alarm bounds the wait). */
    char *ls = listed_status(p, sb);
    while (!strcmp(ls, "starting")) {
        free(ls);
        usleep(10 * 1000);
        ls = listed_status(p, sb);
    }
    TAP_EQ_STR(ls, "running");
    free(ls);

    freeze_by_hand(sb, true);
    status_is(sb, SBX_STATUS_PAUSED);
    ls = listed_status(p, sb);
    TAP_EQ_STR(ls, "paused");
    free(ls);
    freeze_by_hand(sb, false);
    status_is(sb, SBX_STATUS_RUNNING);
    TAP_EQ_STR(out_of(sb, "echo thawed"), "thawed\n");

    pid_t init = init_pid_of(sb);
    TAP_EQ_INT(kill(init, SIGSTOP), 0);
    TAP_EQ_INT(status_after(sb, SBX_STATUS_RUNNING), SBX_STATUS_PAUSED);
    ls = listed_status(p, sb);
    TAP_EQ_STR(ls, "paused");
    free(ls);
    TAP_EQ_INT(kill(init, SIGCONT), 0);
    TAP_EQ_INT(status_after(sb, SBX_STATUS_PAUSED), SBX_STATUS_RUNNING);
    TAP_EQ_STR(out_of(sb, "echo continued"), "continued\n");
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/*
 * A box left frozen with nobody to thaw it (what a commit killed mid-copy
 * left): a stop ends it, its TTL ends it, and gc ends it once its shim is
 * gone, leaving nothing (no process, cgroup or freezer group). On cgroup v1
 * a frozen process does not die of SIGKILL, so each of them must thaw first.
 */
static void test_frozen_box_ended_by_stop_ttl_and_gc(void)
{
    need_boxes();
    /* A stop that waits longer than this for its shim fails, rather than the test's alarm. */
    sbx_provider *p = provider("{\"stop_timeout_s\": 15}");
    sbx_spec *s = spec_none();

    /* 1. A stop. */
    sbx_sandbox *a = start(p, s);
    freeze_by_hand(a, true);
    status_is(a, SBX_STATUS_PAUSED);
    TAP_OK(sbx_sandbox_stop(a, &e_));
    sbx_sandbox_free(a);
    census_check(state_dir);

    /* 2. The TTL: the shim ends it while frozen (paused first, so frozen before it). */
    sbx_spec_set_ttl(s, 4);
    sbx_sandbox *b = start(p, s);
    char bd[900];
    snprintf(bd, sizeof(bd), "%s/boxes/%s", state_dir, sbx_sandbox_id(b));
    freeze_by_hand(b, true);
    status_is(b, SBX_STATUS_PAUSED);
    while (have_file(bd)) /* bounded by the test's alarm */
        usleep(50 * 1000);
    stop_free(b);
    census_check(state_dir);

    /* 3. gc, after its shim was killed: the box's processes are orphans, and frozen. */
    sbx_spec_set_ttl(s, -1);
    sbx_sandbox *c = start(p, s);
    freeze_by_hand(c, true);
    sbx_linux_record rec;
    parsed_record_of(c, &rec);
    pid_t shim = rec.shim_pid;
    sbx__linux_record_free(&rec);
    TAP_EQ_INT(kill(shim, SIGKILL), 0);
    for (int i = 0; i < 3000 && kill(shim, 0) == 0; i++) /* not our child; the alarm bounds it */
        usleep(10 * 1000);
    char *removed = NULL;
    TAP_OK(sbx_provider_gc(p, NULL, &removed, &e_));
    TAP_CONTAINS(removed, sbx_sandbox_id(c));
    free(removed);
    sbx_sandbox_free(c);
    free_and_census(s, p, state_dir);
}

/* The ids in a JSON array text of boxes (objects with "id") or of ids, space-separated. */
static char *ids_of(const char *json)
{
    json_t *a = json_loads(json, 0, NULL);
    sbx_buf b = { 0 };
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        const char *id = json_is_string(v) ? json_string_value(v)
                                           : json_string_value(json_object_get(v, "id"));
        sbx__buf_printf(&b, "%s%s", b.len ? " " : "", id ? id : "?");
    }
    json_decref(a);
    return b.data ? b.data : strdup("");
}

/* The box registry through the public API (provider ABI 2), on real boxes. */
static void test_provider_list_stop_gc_images(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    TAP_EQ_INT(sbx_provider_supports(p, "list"), 1);
    TAP_EQ_INT(sbx_provider_supports(p, "gc"), 1);
    TAP_EQ_INT(sbx_provider_supports(p, "images"), 1);
    sbx_spec *s = spec_none();
    sbx_spec_set_metadata(s, "run_id", "run-a");
    sbx_sandbox *a = start(p, s);
    sbx_spec_set_metadata(s, "run_id", "run-b");
    sbx_sandbox *b = start(p, s);
    char ida[128], idb[128];
    snprintf(ida, sizeof(ida), "%s", sbx_sandbox_id(a));
    snprintf(idb, sizeof(idb), "%s", sbx_sandbox_id(b));
    sbx_error *e = NULL;
    char *json = NULL;
    /* Every box, then by label; a box's object says what a user would check. */
    TAP_OK(sbx_provider_list(p, NULL, &json, &e));
    char *ids = ids_of(json);
    TAP_TRUE(strstr(ids, ida) && strstr(ids, idb));
    free(ids);
    free(json);
    TAP_OK(sbx_provider_list(p, "{\"labels\": {\"run_id\": \"run-a\"}}", &json, &e));
    json_t *arr = json_loads(json, 0, NULL);
    TAP_EQ_INT(json_array_size(arr), 1);
    json_t *box = json_array_get(arr, 0);
    TAP_EQ_STR(json_string_value(json_object_get(box, "id")), ida);
    TAP_EQ_STR(json_string_value(json_object_get(box, "status")), "running");
    TAP_EQ_STR(json_string_value(json_object_get(json_object_get(box, "labels"), "run_id")),
               "run-a");
    TAP_TRUE(json_number_value(json_object_get(box, "created")) > 1e9);
    json_decref(arr);
    free(json);
    /* Stop by id, from the provider alone (no handle): the box is gone, its handle sees it. */
    TAP_OK(sbx_provider_stop_box(p, idb, &e));
    sbx_status st;
    TAP_OK(sbx_sandbox_status(b, &st, &e));
    TAP_EQ_INT(st, SBX_STATUS_STOPPED);
    TAP_EQ_INT(sbx_provider_stop_box(p, idb, &e), SBX_ENOENT);
    sbx_error_free(e);
    e = NULL;
    /* gc by label (how a crashed run's boxes are collected); dry run first. */
    TAP_OK(sbx_provider_gc(p, "{\"labels\": {\"run_id\": \"run-a\"}, \"dry_run\": true}", &json, &e));
    ids = ids_of(json);
    TAP_EQ_STR(ids, ida);
    free(ids);
    free(json);
    TAP_OK(sbx_sandbox_status(a, &st, &e));
    TAP_EQ_INT(st, SBX_STATUS_RUNNING);
    TAP_OK(sbx_provider_gc(p, "{\"labels\": {\"run_id\": \"run-a\"}}", &json, &e));
    ids = ids_of(json);
    TAP_EQ_STR(ids, ida);
    free(ids);
    free(json);
    TAP_OK(sbx_sandbox_status(a, &st, &e));
    TAP_EQ_INT(st, SBX_STATUS_STOPPED);
    TAP_OK(sbx_provider_list(p, NULL, &json, &e));
    TAP_EQ_STR(json, "[]");
    free(json);
    sbx_sandbox_free(a);
    sbx_sandbox_free(b);
    /* Images: import, list, refuse to remove while used, remove. */
    char dir[600], tar[700];
    busybox_rootfs(dir, sizeof(dir), tar, sizeof(tar));
    TAP_OK(sbx_provider_image_import(p, "reg-bb", tar, NULL, &json, &e));
    TAP_CONTAINS(json, "\"name\":\"reg-bb\"");
    TAP_CONTAINS(json, "\"digest\":\"sha256:");
    free(json);
    TAP_OK(sbx_provider_image_list(p, &json, &e));
    TAP_CONTAINS(json, "reg-bb");
    free(json);
    sbx_spec *si = sbx_spec_new();
    sbx_spec_set_image(si, "reg-bb");
    sbx_sandbox *c = start(p, si);
    TAP_EQ_INT(sbx_provider_image_remove(p, "reg-bb", 0, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "used by running box");
    sbx_error_free(e);
    e = NULL;
    stop_free(c);
    TAP_OK(sbx_provider_image_remove(p, "reg-bb", 0, &e));
    TAP_OK(sbx_provider_image_list(p, &json, &e));
    TAP_TRUE(!strstr(json, "reg-bb"));
    free(json);
    sbx_spec_free(si);
    free_and_census(s, p, state_dir);
}

int main(int argc, char **argv)
{
    /* Started as the provider starts sbx-shim: the stand-in of the [gcrace] tests. */
    if (argc == 3 && !strcmp(argv[1], "--box-dir"))
        return shim_hold_main(argv);
    const char *desc = getenv("SBX_TEST_LINUX_CONNECT");
    if (desc)
        /* The other side of test_serialize_connect_list_gc, in a fresh process. */
        return connect_child("{\"linux\": {}}", desc, "echo $FROM_SPEC > /tmp/from-child");
    if (argc > 0 && !realpath(argv[0], self_path))
        snprintf(self_path, sizeof(self_path), "/proc/self/exe");
    static const struct tap_test tests[] = {
        TAP(test_stop_without_pidfd), TAP(test_pid1_is_agent_and_namespaces),
        TAP(test_writes_isolated_between_boxes), TAP(test_memory_bomb_is_oom_and_box_lives),
        TAP(test_fork_bomb_stopped_by_pids), TAP(test_disk_gib_enospc),
        TAP(test_defaults_scale_with_the_host), TAP(test_escapes_fail),
        TAP(test_seccomp_filter_cached_and_checked),
        TAP(test_agent_cannot_be_ptraced_from_the_box),
        TAP(test_box_ends_when_its_directory_is_removed), TAP(test_cgroup_limits_written),
        TAP(test_cgroup_level), TAP(test_census_counts_its_own_level),
        TAP(test_box_sees_its_own_cgroup_limits), TAP(test_image_symlinks_cannot_reach_the_host),
        TAP(test_box_resolves_its_own_name), TAP(test_cpu_out_of_range_refused),
        TAP(test_agent_killed_gives_error), TAP(test_creator_killed_mid_create_leaves_nothing),
        TAP(test_gc_leaves_a_box_being_created_alone), TAP(test_shim_gone_before_ready_says_why),
        TAP(test_ttl_enforced_without_creator), TAP(test_serialize_connect_list_gc),
        TAP(test_image_import_list_remove), TAP(test_ready_timeout_is_everify_and_torn_down),
        TAP(test_oci_layout_with_whiteouts), TAP(test_userns_root_maps_to_unprivileged_range),
        TAP(test_userns_image_limits_and_escapes),
        TAP(test_userns_ranges_run_out_and_config_checked), TAP(test_userns_network_host_and_ttl),
        TAP(test_userns_unsupported_filesystem_refused),
        TAP_T(test_many_boxes_at_once, 300), TAP(test_agent_connections_pooled),
        TAP(test_pooled_agent_killed_gives_error), TAP(test_provider_list_stop_gc_images),
        TAP(test_shell_signals_and_transfers_as_docker),
        TAP(test_status_paused_when_frozen_or_agent_stopped),
        TAP(test_frozen_box_ended_by_stop_ttl_and_gc),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}

