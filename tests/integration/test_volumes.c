/*
 * [volumes] Host directories in linux boxes, added capabilities and the
 * /dev/shm size, against real boxes (root): bind mounts read and written,
 * read-only ones refusing writes (submounts too), a named volume two boxes
 * use at once and cannot be removed while they do, links planted at the
 * box-side target or at the host source, nosuid/nodev, cap_add and
 * shm_size. Every test ends with the census, and with no mount of this
 * test's directories left on the host.
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <sys/mount.h>

/* Nothing of this test's directory is mounted on the host, and the census is clean. */
static void all_gone(void)
{
    census_check(state_dir);
    TAP_EQ_INT(mounts_naming(tap_tmpdir()), 0);
}

static void test_bind_read_write_and_read_only(void)
{
    need_boxes();
    char host[600], out[4096], opts[2048];
    snprintf(host, sizeof(host), "%s/host", tap_tmpdir());
    TAP_EQ_INT(run_cmd(out, sizeof(out), "mkdir -p %s/sub && echo from-host > %s/f", host, host),
               0);
    snprintf(opts, sizeof(opts),
             "{\"volumes\": [\"%s:/mnt/rw\", {\"source\": \"%s\", \"target\": \"/mnt/ro\", "
             "\"read_only\": true}]}",
             host, host);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_with(opts);
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_STR(output_of(sb, "cat /mnt/rw/f", NULL), "from-host\n");
    output_of(sb, "echo from-box > /mnt/rw/g", NULL);
    snprintf(out, sizeof(out), "%s/g", host);
    char *g = read_text(out);
    TAP_EQ_STR(g, "from-box\n");
    free(g);
    int rc;
    TAP_CONTAINS(output_of(sb, "echo x > /mnt/ro/h", &rc), "Read-only file system");
    TAP_NE_INT(rc, 0);
    /* Both nosuid,nodev; the read-only one ro. */
    const char *mi = output_of(sb, "grep ' /mnt/r[ow] ' /proc/self/mountinfo", NULL);
    TAP_CONTAINS(mi, "/mnt/rw rw,nosuid,nodev");
    TAP_CONTAINS(mi, "/mnt/ro ro,nosuid,nodev");
    /* The box cannot make it writable again: no mount(2), no CAP_SYS_ADMIN. */
    output_of(sb, "mount -o remount,rw /mnt/ro", &rc);
    TAP_NE_INT(rc, 0);
    output_of(sb, "mount --bind /mnt/rw /mnt/ro", &rc);
    TAP_NE_INT(rc, 0);
    TAP_CONTAINS(output_of(sb, "echo x > /mnt/ro/h", &rc), "Read-only file system");
    stop_free(sb);
    sbx_spec_free(s);

    /* A submount of a read-only source is read-only in the box too (recursive). */
    char sub[700];
    snprintf(sub, sizeof(sub), "%s/sub", host);
    TAP_EQ_INT(mount("sbx-test", sub, "tmpfs", 0, "size=1m"), 0);
    snprintf(opts, sizeof(opts), "{\"volumes\": [\"%s:/mnt/ro:ro\"]}", host);
    s = spec_with(opts);
    sb = start(p, s);
    TAP_CONTAINS(output_of(sb, "echo x > /mnt/ro/sub/y", &rc), "Read-only file system");
    TAP_NE_INT(rc, 0);
    TAP_CONTAINS(output_of(sb, "grep ' /mnt/ro/sub ' /proc/self/mountinfo", NULL), "ro,nosuid,nodev");
    stop_free(sb);
    sbx_spec_free(s);
    TAP_EQ_INT(umount(sub), 0);
    sbx_provider_free(p);
    all_gone();
}

static void test_named_volume_two_boxes_and_rm_refused(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    char *json = NULL;
    TAP_OK(sbx_provider_volume_create(p, "shared1", &json, &e_));
    TAP_CONTAINS(json, "\"name\":\"shared1\"");
    free(json);
    /* Created again: the same volume, no error. */
    TAP_OK(sbx_provider_volume_create(p, "shared1", NULL, &e_));
    sbx_spec *s = spec_with("{\"volumes\": [\"shared1:/data\"]}");
    sbx_sandbox *a = start(p, s);
    sbx_sandbox *b = start(p, s);
    output_of(a, "echo written-by-a > /data/note", NULL);
    TAP_EQ_STR(output_of(b, "cat /data/note", NULL), "written-by-a\n");
    output_of(b, "echo reply-from-b >> /data/note", NULL);
    TAP_EQ_STR(output_of(a, "cat /data/note", NULL), "written-by-a\nreply-from-b\n");

    /* In use: rm refused, naming the boxes; ls and inspect show them. */
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_volume_remove(p, "shared1", 0, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), sbx_sandbox_id(a));
    TAP_CONTAINS(sbx_error_message(e), sbx_sandbox_id(b));
    TAP_CONTAINS(sbx_error_message(e), "--force");
    sbx_error_free(e);
    TAP_OK(sbx_provider_volume_inspect(p, "shared1", &json, &e_));
    TAP_CONTAINS(json, sbx_sandbox_id(a));
    free(json);
    TAP_OK(sbx_provider_volume_list(p, &json, &e_));
    TAP_CONTAINS(json, "shared1");
    free(json);
    stop_free(a);
    stop_free(b);
    sbx_spec_free(s);

    /* Unused: removed, files and all. */
    TAP_OK(sbx_provider_volume_remove(p, "shared1", 0, &e_));
    e = NULL;
    TAP_EQ_INT(sbx_provider_volume_inspect(p, "shared1", &json, &e), SBX_ENOENT);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_provider_volume_create(p, "../x", NULL, &e), SBX_EINVAL);
    sbx_error_free(e);
    sbx_provider_free(p);
    all_gone();
}

/*
 * The box-side target is resolved inside the box's root: a link in the
 * image at the target (absolute, or climbing with ..) leads to a path in
 * the box, never the host's.
 */
static void test_link_at_target_stays_in_the_box(void)
{
    need_boxes();
    if (!have_file("/bin/busybox"))
        TAP_SKIP("busybox-static is not installed");
    char img[600], outside[600], vol[600], out[4096], opts[2048];
    snprintf(img, sizeof(img), "%s/img", tap_tmpdir());
    snprintf(outside, sizeof(outside), "%s/outside", tap_tmpdir());
    snprintf(vol, sizeof(vol), "%s/vol", tap_tmpdir());
    TAP_EQ_INT(run_cmd(out, sizeof(out),
                       "set -e; mkdir -p %s/bin %s/etc %s %s; cp /bin/busybox %s/bin/; "
                       "for a in sh cat echo grep ls readlink test; do ln -s busybox %s/bin/$a; "
                       "done; echo 'root:x:0:0:root:/root:/bin/sh' > %s/etc/passwd; "
                       "echo vol-file > %s/v; ln -s %s %s/abs; ln -s ../../../../../../..%s "
                       "%s/rel",
                       img, img, outside, vol, img, img, img, vol, outside, img, outside, img),
               0);
    snprintf(opts, sizeof(opts), "{\"volumes\": [\"%s:/abs\", \"%s:/rel/deeper\"]}", vol, vol);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_with(opts);
    sbx_spec_set_image(s, img);
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_STR(output_of(sb, "cat /abs/v", NULL), "vol-file\n");
    TAP_EQ_STR(output_of(sb, "cat /rel/deeper/v", NULL), "vol-file\n");
    output_of(sb, "echo in-box > /abs/w", NULL);
    /* The host's directory the links name got nothing: no mount, no file. */
    TAP_EQ_INT(run_cmd(out, sizeof(out), "ls -A %s; grep -c '%s' /proc/self/mountinfo || true",
                       outside, outside),
               0);
    TAP_EQ_STR(out, "0\n");
    stop_free(sb);
    /* A target that resolves to the root itself, or into /proc, is refused. */
    TAP_EQ_INT(run_cmd(out, sizeof(out), "ln -s / %s/toroot && ln -s /proc %s/toproc", img, img),
               0);
    snprintf(opts, sizeof(opts), "{\"volumes\": [\"%s:/toroot\"]}", vol);
    sbx_spec_set_provider_options(s, opts, NULL);
    start_fails(p, s, SBX_ECREATE, "resolves to the box's root");
    snprintf(opts, sizeof(opts), "{\"volumes\": [\"%s:/toproc/sys\"]}", vol);
    sbx_spec_set_provider_options(s, opts, NULL);
    start_fails(p, s, SBX_ECREATE, "/proc or /sys");
    sbx_spec_free(s);
    sbx_provider_free(p);
    all_gone();
}

/* Sources: a link is refused, as are relative paths and ".."; a box's link in shared storage too. */
static void test_sources_checked(void)
{
    need_boxes();
    char host[600], link[600], out[4096], opts[2048];
    snprintf(host, sizeof(host), "%s/real", tap_tmpdir());
    snprintf(link, sizeof(link), "%s/link", tap_tmpdir());
    TAP_EQ_INT(run_cmd(out, sizeof(out), "mkdir -p %s && ln -s %s %s", host, host, link), 0);
    sbx_provider *p = provider(NULL);
    snprintf(opts, sizeof(opts), "{\"volumes\": [\"%s:/x\"]}", link);
    sbx_spec *s = spec_with(opts);
    start_fails(p, s, SBX_ECREATE, "symbolic link");
    sbx_spec_free(s);
    static const struct {
        const char *opts, *want;
    } bad[] = {
        { "{\"volumes\": [\"../etc:/x\"]}", "relative host path" },
        { "{\"volumes\": [\"rel/dir:/x\"]}", "relative host path" },
        { "{\"volumes\": [\"/tmp/../etc:/x\"]}", "must not contain '..'" },
        { "{\"volumes\": [\"/tmp:x\"]}", "absolute path in the box" },
        { "{\"volumes\": [\"/tmp:/a/../b\"]}", "must not contain '..'" },
        { "{\"volumes\": [\"/tmp:/\"]}", "whole root" },
        { "{\"volumes\": [\"/tmp:/proc/x\"]}", "kernel interfaces" },
        { "{\"volumes\": [\"/tmp:/x:rx\"]}", ":ro and :rw" },
        { "{\"volumes\": [\"/does-not-exist-sbx:/x\"]}", "does not exist" },
        { "{\"shm_size\": \"12q\"}", "shm_size" },
        { "{\"cap_add\": [\"NOPE\"]}", "unknown capability" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        s = spec_with(bad[i].opts);
        start_fails(p, s, strstr(bad[i].want, "exist") ? SBX_ECREATE : SBX_EINVAL, bad[i].want);
        sbx_spec_free(s);
    }
    /* Shared storage: a link a box plants under the shared root is not followed later. */
    char *json = NULL;
    TAP_OK(sbx_provider_shared_volume_options(p, NULL, "/shared", 0, &json, &e_));
    s = spec_with(json);
    free(json);
    sbx_sandbox *sb = start(p, s);
    output_of(sb, "ln -s /etc /shared/evil && mkdir -p /shared/ok/inner", NULL);
    stop_free(sb);
    sbx_spec_free(s);
    TAP_OK(sbx_provider_shared_volume_options(p, "evil", "/x", 1, &json, &e_));
    s = spec_with(json);
    free(json);
    start_fails(p, s, SBX_ECREATE, "link");
    sbx_spec_free(s);
    TAP_OK(sbx_provider_shared_volume_options(p, "ok/inner", "/x", 1, &json, &e_));
    TAP_CONTAINS(json, "\"read_only\":true");
    s = spec_with(json);
    free(json);
    sb = start(p, s);
    int rc;
    TAP_CONTAINS(output_of(sb, "touch /x/f", &rc), "Read-only file system");
    stop_free(sb);
    sbx_spec_free(s);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_shared_volume_options(p, "../up", "/x", 0, &json, &e), SBX_EINVAL);
    sbx_error_free(e);
    TAP_OK(sbx_provider_shared_volume_metadata(p, &json, &e_));
    TAP_CONTAINS(json, "\"sbx.shared_root\":\"");
    free(json);
    sbx_provider_free(p);
    all_gone();
}

/* A setuid-root binary in a volume gives nothing: the mount is nosuid (and no_new_privs holds). */
static void test_setuid_in_volume_gains_nothing(void)
{
    need_boxes();
    char host[600], out[4096], opts[2048];
    snprintf(host, sizeof(host), "%s/suid", tap_tmpdir());
    TAP_EQ_INT(run_cmd(out, sizeof(out), "mkdir -p %s && chmod 755 %s && cp /usr/bin/id %s/id && "
                                         "chown 0:0 %s/id && chmod 4755 %s/id",
                       host, host, host, host, host),
               0);
    snprintf(opts, sizeof(opts), "{\"volumes\": [\"%s:/v\"]}", host);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_with(opts);
    sbx_sandbox *sb = start(p, s);
    sbx_exec_opts *eo = sbx_exec_opts_new();
    sbx_exec_opts_set_user(eo, "1000");
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb, "/v/id -u; stat -c %a /v/id", eo, &r, &e_));
    TAP_EQ_STR(sbx_exec_result_stdout(r, NULL), "1000\n4755\n");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(eo);
    TAP_CONTAINS(output_of(sb, "grep ' /v ' /proc/self/mountinfo", NULL), "nosuid,nodev");
    stop_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
    all_gone();
}

static void test_cap_add_and_shm_size(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_with("{\"cap_add\": [\"net_admin\"], \"shm_size\": \"64m\"}");
    sbx_sandbox *sb = start(p, s);
    unsigned long long eff = strtoull(output_of(sb, "sed -n 's/^CapEff:\\t//p' /proc/self/status", NULL),
                                      NULL, 16);
    TAP_TRUE(eff & (1ull << 12)); /* CAP_NET_ADMIN */
    TAP_TRUE(!(eff & (1ull << 21))); /* never CAP_SYS_ADMIN */
    /* Its own network namespace: loopback only, whatever NET_ADMIN allows there. */
    const char *dev = output_of(sb, "cat /proc/net/dev", NULL);
    TAP_CONTAINS(dev, "lo:");
    TAP_TRUE(strstr(dev, "eth") == NULL && strstr(dev, "ens") == NULL);
    /* NET_ADMIN works on the box's own network (loopback's MTU), which the host never sees. */
    if (have_file("/usr/sbin/ip")) {
        output_of(sb, "/usr/sbin/ip link set lo mtu 1400", NULL);
        TAP_EQ_STR(output_of(sb, "cat /sys/class/net/lo/mtu", NULL), "1400\n");
    }
    TAP_EQ_STR(output_of(sb, "df -k /dev/shm | awk 'NR==2 {print $2}'", NULL), "65536\n");
    TAP_CONTAINS(output_of(sb, "grep ' /dev/shm ' /proc/self/mountinfo", NULL), "nosuid,nodev,noexec");
    stop_free(sb);
    sbx_spec_free(s);
    /* Without them: the default set, /dev/shm on the writable layer. */
    s = spec_with(NULL);
    sb = start(p, s);
    eff = strtoull(output_of(sb, "sed -n 's/^CapEff:\\t//p' /proc/self/status", NULL), NULL, 16);
    TAP_TRUE(!(eff & (1ull << 12)));
    int rc;
    if (have_file("/usr/sbin/ip")) {
        output_of(sb, "/usr/sbin/ip link set lo mtu 1400", &rc);
        TAP_NE_INT(rc, 0);
    }
    stop_free(sb);
    sbx_spec_free(s);

    /* Refused ones say why. */
    static const struct {
        const char *opts, *want;
    } bad[] = {
        { "{\"cap_add\": [\"SYS_ADMIN\"]}", "SYS_ADMIN is refused: it grants mount" },
        { "{\"cap_add\": [\"CAP_SYS_MODULE\"]}", "kernel modules" },
        { "{\"cap_add\": [\"SYS_PTRACE\"]}", "agent" },
        { "{\"cap_add\": [\"DAC_READ_SEARCH\"]}", "open_by_handle_at" },
        { "{\"cap_add\": [\"ALL\"]}", "ALL is refused" },
        { "{\"cap_add\": [\"NET_ADMIN\"], \"network\": \"host\"}", "host's interfaces" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        s = spec_with(bad[i].opts);
        start_fails(p, s, SBX_EPERM, bad[i].want);
        sbx_spec_free(s);
    }

    /* validate_runtime_requirements: its metadata, put in a spec, applies them. */
    const char *caps[] = { "NET_ADMIN", NULL };
    char *md = NULL;
    TAP_OK(sbx_provider_validate_runtime_requirements(p, caps, 8 << 20, &md, &e_));
    TAP_CONTAINS(md, "\"sbx.cap_add\":\"NET_ADMIN\"");
    TAP_CONTAINS(md, "\"sbx.shm_size\":\"8388608\"");
    free(md);
    TAP_OK(sbx_provider_validate_runtime_requirements(p, NULL, -1, &md, &e_));
    TAP_EQ_STR(md, "null");
    free(md);
    const char *bad_caps[] = { "SYS_TIME", NULL };
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_validate_runtime_requirements(p, bad_caps, -1, NULL, &e), SBX_EPERM);
    TAP_CONTAINS(sbx_error_message(e), "clock");
    sbx_error_free(e);
    s = spec_with(NULL);
    sbx_spec_set_metadata(s, "sbx.cap_add", "NET_ADMIN");
    sbx_spec_set_metadata(s, "sbx.shm_size", "8388608");
    sb = start(p, s);
    eff = strtoull(output_of(sb, "sed -n 's/^CapEff:\\t//p' /proc/self/status", NULL), NULL, 16);
    TAP_TRUE(eff & (1ull << 12));
    TAP_EQ_STR(output_of(sb, "df -k /dev/shm | awk 'NR==2 {print $2}'", NULL), "8192\n");
    stop_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
    all_gone();
}

/*
 * With a user namespace: a bind mount works; host root's files show as
 * the overflow id (nobody), and box root cannot write into host root's
 * directory (it is not host root).
 */
static void test_userns_bind(void)
{
    need_boxes();
    char host[600], out[4096], opts[2048];
    snprintf(host, sizeof(host), "%s/uhost", tap_tmpdir());
    TAP_EQ_INT(run_cmd(out, sizeof(out), "mkdir -p %s && chmod 755 %s && echo u > %s/f", host,
                       host, host),
               0);
    snprintf(opts, sizeof(opts), "{\"userns\": true, \"volumes\": [\"%s:/u\"]}", host);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = spec_with(opts);
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK) {
        const char *m = sbx_error_message(e);
        if (strstr(m, "idmap") || strstr(m, "user namespace"))
            TAP_SKIP("user namespaces with idmapped mounts are not available here");
        TAP_FAIL("start: %s", m);
    }
    TAP_EQ_STR(output_of(sb, "cat /u/f", NULL), "u\n");
    TAP_EQ_STR(output_of(sb, "stat -c %u /u/f", NULL), "65534\n");
    int rc;
    output_of(sb, "touch /u/new", &rc);
    TAP_NE_INT(rc, 0);
    stop_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
    all_gone();
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_bind_read_write_and_read_only),
        TAP(test_named_volume_two_boxes_and_rm_refused),
        TAP(test_link_at_target_stays_in_the_box),
        TAP(test_sources_checked),
        TAP(test_setuid_in_volume_gains_nothing),
        TAP(test_cap_add_and_shm_size),
        TAP(test_userns_bind),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
