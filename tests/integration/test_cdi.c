/*
 * GPUs for linux boxes through CDI (src/providers/linux/cdi.c, the shim's
 * apply_cdi): real boxes asking resources.gpu get the device nodes, mounts
 * and env a CDI spec names. There is no GPU here, so the spec this test
 * writes (in its own cdi_spec_dirs) names harmless stand-ins: /dev/null and
 * /dev/zero as /dev/nvidia0 and /dev/nvidia1, and files the test makes as
 * the driver's libraries. Each test ends with a census: nothing left.
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

static char cdi_dir[400], lib[400], rwdir[400], cfg[900];

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "we");
    if (!f)
        TAP_FAIL("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* Two stand-in GPUs of kind nvidia.com/gpu, as `nvidia-ctk cdi generate` lays a spec out. */
static void setup(void)
{
    need_boxes();
    const char *t = tap_tmpdir();
    /* The box's root may be a mapped uid (userns): it must reach the sources. */
    TAP_EQ_INT(chmod(t, 0755), 0);
    snprintf(cdi_dir, sizeof(cdi_dir), "%s/cdi", t);
    snprintf(lib, sizeof(lib), "%s/libstandin.so.1", t);
    snprintf(rwdir, sizeof(rwdir), "%s/shared", t);
    TAP_EQ_INT(mkdir(cdi_dir, 0755), 0);
    TAP_EQ_INT(mkdir(rwdir, 0777), 0);
    TAP_EQ_INT(chmod(rwdir, 0777), 0);
    put(lib, "stand-in driver library\n");
    char spec[16384], path[PATH_MAX + 32];
    snprintf(spec, sizeof(spec),
             "---\n"
             "cdiVersion: 0.5.0\n"
             "kind: nvidia.com/gpu\n"
             "containerEdits:\n"
             "  env: [NVIDIA_VISIBLE_DEVICES=void, SBX_SHARED=spec]\n"
             "  hooks:\n"
             "  - {hookName: createContainer, path: /bin/sh, args: [sh, -c, 'touch %s/hook-ran']}\n"
             "  mounts:\n"
             "  - {hostPath: %s, containerPath: /opt/sbx-gpu/lib/libstandin.so.1,"
             " options: [nosuid, nodev, bind]}\n"
             "  - {hostPath: %s, containerPath: /opt/sbx-gpu/shared, options: [rw, bind]}\n"
             "devices:\n"
             "- name: \"0\"\n"
             "  containerEdits:\n"
             "    env: [SBX_GPU0=yes]\n"
             "    deviceNodes:\n"
             "    - {path: /dev/nvidia0, hostPath: /dev/null, type: c, major: 1, minor: 3}\n"
             "- name: \"1\"\n"
             "  containerEdits:\n"
             "    deviceNodes:\n"
             "    - {path: /dev/nvidia1, hostPath: /dev/zero, type: c, major: 1, minor: 5}\n"
             "- name: all\n"
             "  containerEdits:\n"
             "    deviceNodes:\n"
             "    - {path: /dev/nvidia0, hostPath: /dev/null}\n"
             "    - {path: /dev/nvidia1, hostPath: /dev/zero}\n",
             t, lib, rwdir);
    snprintf(path, sizeof(path), "%s/nvidia.yaml", cdi_dir);
    put(path, spec);
    snprintf(cfg, sizeof(cfg), "{\"cdi_spec_dirs\": [\"%s\"]}", cdi_dir);
}

static void one_gpu(const char *provider_cfg)
{
    sbx_provider *p = provider(provider_cfg);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_gpu(s, 1);
    sbx_spec_set_env(s, "SBX_SHARED", "caller");
    sbx_sandbox *sb = start(p, s);
    /* The chosen GPU's node, a working character device 1:3 (a bind, not nodev). */
    TAP_EQ_STR(out_of(sb, "stat -c '%F %t:%T' /dev/nvidia0"), "character special file 1:3\n");
    TAP_EQ_STR(out_of(sb, "echo gone > /dev/nvidia0 && echo written"), "written\n");
    /* Only the one asked for. */
    TAP_EQ_STR(out_of(sb, "test -e /dev/nvidia1 && echo there || echo absent"), "absent\n");
    /* The spec-wide mount, read-only without "rw" in its options; the rw one writable. */
    TAP_EQ_STR(out_of(sb, "cat /opt/sbx-gpu/lib/libstandin.so.1"), "stand-in driver library\n");
    TAP_EQ_STR(out_of(sb, "echo x > /opt/sbx-gpu/lib/libstandin.so.1 2>/dev/null && echo wrote "
                          "|| echo refused"),
               "refused\n");
    out_of(sb, "echo from-box > /opt/sbx-gpu/shared/note");
    char note[PATH_MAX + 16], *text = NULL;
    snprintf(note, sizeof(note), "%s/note", rwdir);
    TAP_EQ_INT(sbx__read_file(note, &text, NULL), 0);
    TAP_EQ_STR(text, "from-box\n");
    free(text);
    unlink(note);
    /* The env of the spec and the device; the caller's own value wins. */
    TAP_EQ_STR(out_of(sb, "echo $NVIDIA_VISIBLE_DEVICES $SBX_GPU0 $SBX_SHARED"),
               "void yes caller\n");
    stop_free(sb);
    /* Hooks are never run (docs/providers/linux.md). */
    char hook[PATH_MAX + 16];
    snprintf(hook, sizeof(hook), "%s/hook-ran", tap_tmpdir());
    TAP_TRUE(!have_file(hook));
    free_and_census(s, p, state_dir);
}

/* gpu: 1 gives the box device "0" with its node, the spec's mounts and env. */
static void test_gpu_one(void)
{
    setup();
    one_gpu(cfg);
}

/* The same in a user namespace, where box root is an unprivileged host uid. */
static void test_gpu_one_userns(void)
{
    setup();
    char c[900];
    snprintf(c, sizeof(c), "{\"cdi_spec_dirs\": [\"%s\"], \"userns\": true}", cdi_dir);
    one_gpu(c);
}

/* gpu: 2 gets both; gpu_type may name the device (a qualified CDI name). */
static void test_gpu_two_and_by_name(void)
{
    setup();
    sbx_provider *p = provider(cfg);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_gpu(s, 2);
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "stat -c %t:%T /dev/nvidia0 /dev/nvidia1"), "1:3\n1:5\n");
    stop_free(sb);
    sbx_spec_set_gpu(s, 1);
    sbx_spec_set_gpu_type(s, "nvidia.com/gpu=1");
    sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "ls /dev | grep nvidia; head -c 3 /dev/nvidia1 | od -An -tx1"),
               "nvidia1\n 00 00 00\n");
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void create_fails(const char *provider_cfg, long long gpu, int code, const char *want)
{
    sbx_provider *p = provider(provider_cfg);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_gpu(s, gpu);
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    TAP_EQ_INT(sbx_sandbox_start(sb, NULL, &e), code);
    TAP_CONTAINS(sbx_error_message(e), want);
    sbx_error_free(e);
    sbx_sandbox_free(sb);
    free_and_census(s, p, state_dir);
}

/* gpu: 3 with 2 devices: a clear create error naming what was found, and nothing left. */
static void test_gpu_too_many(void)
{
    setup();
    create_fails(cfg, 3, SBX_ECREATE,
                 "resources.gpu is 3 but the CDI specs in");
    create_fails(cfg, 3, SBX_ECREATE, "define 2 nvidia.com/gpu devices (kinds found: "
                                      "nvidia.com/gpu (3))");
}

/* A spec file anyone may write is not believed; a device that is not what it says neither. */
static void test_gpu_untrusted_spec(void)
{
    setup();
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/nvidia.yaml", cdi_dir);
    TAP_EQ_INT(chmod(path, 0666), 0);
    create_fails(cfg, 1, SBX_ECREATE, "writable by nobody else");
    TAP_EQ_INT(chmod(path, 0644), 0);
    put(path, "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n"
              "  containerEdits:\n    deviceNodes:\n"
              "    - {path: /dev/nvidia0, hostPath: /dev/null, type: c, major: 195, minor: 0}\n");
    create_fails(cfg, 1, SBX_ECREATE, "/dev/null is 1:3 on the host, not the 195:0");
}

/* No CDI directory at all (the default dirs on a machine without GPUs): a clear error. */
static void test_gpu_no_specs(void)
{
    setup();
    char c[900];
    snprintf(c, sizeof(c), "{\"cdi_spec_dirs\": [\"%s/none\"]}", tap_tmpdir());
    create_fails(c, 1, SBX_ECREATE, "define 0 nvidia.com/gpu devices (kinds found: none)");
}

/*
 * An image whose /opt is a link out of the box ("../../../<host dir>"): the
 * CDI mount point is resolved inside the box's root, so the mount lands in
 * the box (through the link, as the box sees it) and nothing is made on the
 * host where the link would point from outside.
 */
static void test_gpu_mount_through_image_link(void)
{
    setup();
    if (!have_file("/bin/busybox"))
        TAP_SKIP("busybox-static is not installed");
    char img[PATH_MAX], escape[PATH_MAX], out[4096];
    snprintf(img, sizeof(img), "%s/img", tap_tmpdir());
    snprintf(escape, sizeof(escape), "%s/escape", tap_tmpdir());
    if (run_cmd(out, sizeof(out),
                "set -e; mkdir -p %s/bin %s/etc %s/tmp %s; cp /bin/busybox %s/bin/; "
                "ln -s busybox %s/bin/sh; ln -s busybox %s/bin/cat; "
                "ln -s ../../../../../../../../..%s %s/opt",
                img, img, img, escape, img, img, img, escape, img) != 0)
        TAP_FAIL("building the image: %s", out);
    sbx_provider *p = provider(cfg);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, img);
    sbx_spec_set_gpu(s, 1);
    sbx_sandbox *sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "cat /opt/sbx-gpu/lib/libstandin.so.1"), "stand-in driver library\n");
    TAP_EQ_STR(out_of(sb, "cat /dev/nvidia0; echo ok"), "ok\n");
    char host_side[PATH_MAX + 32];
    snprintf(host_side, sizeof(host_side), "%s/sbx-gpu", escape);
    TAP_TRUE(!have_file(host_side));
    stop_free(sb);
    TAP_TRUE(!have_file(host_side));
    free_and_census(s, p, state_dir);
}

TAP_MAIN(TAP(test_gpu_one), TAP(test_gpu_mount_through_image_link), TAP(test_gpu_one_userns), TAP(test_gpu_two_and_by_name),
         TAP(test_gpu_too_many), TAP(test_gpu_untrusted_spec), TAP(test_gpu_no_specs))
