/*
 * src/providers/linux/cdi.c: CDI spec files parsed and checked, and the
 * edits for resources.gpu chosen from a directory of them. The device nodes
 * are stand-ins (/dev/null and /dev/zero under GPU-like names), so this runs
 * on any machine; real boxes that get them are in tests/integration/test_cdi.c.
 */
#include "tap.h"
#include "common.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "providers/linux/linux.h"

static char dir[PATH_MAX];

static void write_spec(const char *name, const char *text, mode_t mode)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    TAP_TRUE(fd >= 0);
    TAP_EQ_INT(write(fd, text, strlen(text)), (long long)strlen(text));
    close(fd);
    TAP_EQ_INT(chmod(p, mode), 0);
}

static const char two_gpus[] =
    "cdiVersion: 0.6.0\n"
    "kind: example.com/gpu\n"
    "containerEdits:\n"
    "  env: [SBX_CDI=1, SHARED=spec]\n"
    "  hooks: [{hookName: createContainer, path: /bin/true}]\n"
    "devices:\n"
    "- name: \"1\"\n"
    "  containerEdits:\n"
    "    deviceNodes: [{path: /dev/gpu1, hostPath: /dev/zero, type: c, major: 1, minor: 5}]\n"
    "- name: \"0\"\n"
    "  containerEdits:\n"
    "    env: [GPU0=yes]\n"
    "    deviceNodes: [{path: /dev/gpu0, hostPath: /dev/null, type: c, major: 1, minor: 3}]\n"
    "    mounts: [{hostPath: /etc/hostname, containerPath: /opt/gpu/hostname, "
    "options: [ro, bind]}]\n"
    "- name: all\n"
    "  containerEdits:\n"
    "    deviceNodes: [{path: /dev/gpu0, hostPath: /dev/null}]\n"
    "- name: GPU-0000\n"
    "  containerEdits:\n"
    "    deviceNodes: [{path: /dev/gpu0, hostPath: /dev/null}]\n";

static void setup(void)
{
    snprintf(dir, sizeof(dir), "%s/cdi", tap_tmpdir());
    TAP_EQ_INT(mkdir(dir, 0755), 0);
    write_spec("example.yaml", two_gpus, 0644);
}

static json_t *resolve(long long n, const char *type, int *rc, char **msg)
{
    const char *dirs[] = { dir, NULL };
    json_t *out = NULL;
    sbx_error *e = NULL;
    *rc = sbx__cdi_resolve(dirs, n, type, &out, &e);
    *msg = e ? strdup(sbx_error_message(e)) : NULL;
    sbx_error_free(e);
    return out;
}

/* gpu: 1 takes device "0" (index names sort numerically; "all" and UUIDs are not counted). */
static void test_one_gpu(void)
{
    setup();
    int rc;
    char *msg;
    json_t *e = resolve(1, "example.com/gpu", &rc, &msg);
    TAP_EQ_INT(rc, 0);
    TAP_EQ_STR(json_string_value(json_array_get(json_object_get(e, "names"), 0)),
               "example.com/gpu=0");
    json_t *devs = json_object_get(e, "devices");
    TAP_EQ_INT(json_array_size(devs), 1);
    TAP_EQ_STR(json_string_value(json_object_get(json_array_get(devs, 0), "path")), "/dev/gpu0");
    TAP_EQ_INT(json_integer_value(json_object_get(json_array_get(devs, 0), "minor")), 3);
    json_t *m = json_array_get(json_object_get(e, "mounts"), 0);
    TAP_EQ_STR(json_string_value(json_object_get(m, "container_path")), "/opt/gpu/hostname");
    TAP_TRUE(json_is_false(json_object_get(m, "rw")));
    /* The spec-wide env first, then the device's; the hook is counted, not run. */
    json_t *env = json_object_get(e, "env");
    TAP_EQ_INT(json_array_size(env), 3);
    TAP_EQ_STR(json_string_value(json_array_get(env, 0)), "SBX_CDI=1");
    TAP_EQ_STR(json_string_value(json_array_get(env, 2)), "GPU0=yes");
    TAP_EQ_INT(json_integer_value(json_object_get(e, "hooks")), 1);
    json_decref(e);
    free(msg);
}

static void test_two_gpus_and_too_many(void)
{
    setup();
    int rc;
    char *msg;
    json_t *e = resolve(2, NULL, &rc, &msg);
    /* The default kind is nvidia.com/gpu: none here, and the message says what there is. */
    TAP_EQ_INT(rc, SBX_ECREATE);
    TAP_CONTAINS(msg, "define 0 nvidia.com/gpu devices");
    TAP_CONTAINS(msg, "example.com/gpu (4)");
    free(msg);
    e = resolve(2, "example.com/gpu", &rc, &msg);
    TAP_EQ_INT(rc, 0);
    TAP_EQ_INT(json_array_size(json_object_get(e, "devices")), 2);
    /* The spec-wide env comes once however many of its devices are chosen. */
    TAP_EQ_INT(json_array_size(json_object_get(e, "env")), 3);
    json_decref(e);
    free(msg);
    e = resolve(3, "example.com/gpu", &rc, &msg);
    TAP_NULL(e);
    TAP_EQ_INT(rc, SBX_ECREATE);
    TAP_CONTAINS(msg, "resources.gpu is 3 but the CDI specs in");
    TAP_CONTAINS(msg, "define 2 example.com/gpu devices");
    free(msg);
}

static void test_qualified_names(void)
{
    setup();
    int rc;
    char *msg;
    json_t *e = resolve(1, "example.com/gpu=1", &rc, &msg);
    TAP_EQ_INT(rc, 0);
    TAP_EQ_STR(json_string_value(json_object_get(
                   json_array_get(json_object_get(e, "devices"), 0), "host_path")),
               "/dev/zero");
    json_decref(e);
    free(msg);
    e = resolve(1, "example.com/gpu=7", &rc, &msg);
    TAP_EQ_INT(rc, SBX_ECREATE);
    TAP_CONTAINS(msg, "example.com/gpu=7, which no spec");
    free(msg);
    e = resolve(2, "example.com/gpu=0", &rc, &msg);
    TAP_EQ_INT(rc, SBX_ECREATE);
    TAP_CONTAINS(msg, "names only 1 CDI device");
    free(msg);
}

/* A device whose numbers are not what the spec says is refused (a spec for another node). */
static void test_wrong_device_numbers(void)
{
    setup();
    write_spec("example.yaml",
               "cdiVersion: 0.6.0\nkind: example.com/gpu\ndevices:\n- name: \"0\"\n"
               "  containerEdits:\n    deviceNodes: [{path: /dev/gpu0, hostPath: /dev/null, "
               "major: 1, minor: 5}]\n",
               0644);
    int rc;
    char *msg;
    json_t *e = resolve(1, "example.com/gpu", &rc, &msg);
    TAP_NULL(e);
    TAP_EQ_INT(rc, SBX_ECREATE);
    TAP_CONTAINS(msg, "/dev/null is 1:3 on the host, not the 1:5");
    free(msg);
    write_spec("example.yaml",
               "cdiVersion: 0.6.0\nkind: example.com/gpu\ndevices:\n- name: \"0\"\n"
               "  containerEdits:\n    deviceNodes: [{path: /dev/gpu0, hostPath: /etc/hostname}]\n",
               0644);
    e = resolve(1, "example.com/gpu", &rc, &msg);
    TAP_EQ_INT(rc, SBX_ECREATE);
    TAP_CONTAINS(msg, "is not a character device");
    free(msg);
}

/* Spec files others can write are not believed: they pick the host files boxes see. */
static void test_untrusted_file(void)
{
    setup();
    write_spec("example.yaml", two_gpus, 0666);
    int rc;
    char *msg;
    json_t *e = resolve(1, "example.com/gpu", &rc, &msg);
    TAP_NULL(e);
    TAP_EQ_INT(rc, SBX_EPERM);
    TAP_CONTAINS(msg, "writable by nobody else");
    free(msg);
    write_spec("example.yaml", two_gpus, 0644);
    TAP_EQ_INT(chmod(dir, 0777), 0);
    e = resolve(1, "example.com/gpu", &rc, &msg);
    TAP_EQ_INT(rc, SBX_EPERM);
    free(msg);
    TAP_EQ_INT(chmod(dir, 0755), 0);
    /* A link to a spec elsewhere is not followed. */
    char p[PATH_MAX + 64];
    snprintf(p, sizeof(p), "%s/link.json", dir);
    TAP_EQ_INT(symlink("/etc/hostname", p), 0);
    e = resolve(1, "example.com/gpu", &rc, &msg);
    TAP_EQ_INT(rc, SBX_EINVAL);
    TAP_CONTAINS(msg, "link.json");
    free(msg);
}

static void parse_fails(const char *text, const char *want)
{
    json_t *out = NULL;
    sbx_error *e = NULL;
    int rc = sbx__cdi_parse(text, strlen(text), "t.yaml", &out, &e);
    if (rc != SBX_EINVAL)
        TAP_FAIL("parsed: %s", text);
    TAP_CONTAINS(sbx_error_message(e), want);
    sbx_error_free(e);
}

static void test_parse_refuses(void)
{
    parse_fails("[]", "not a CDI spec");
    parse_fails("cdiVersion: 0.6.0\nkind: nogpu\ndevices: [{name: a}]\n", "kind must be");
    parse_fails("cdiVersion: 0.6.0\nkind: a/b\ndevices: []\n", "devices must be");
    parse_fails("cdiVersion: 0.6.0\nkind: a/b\ndevices: [{name: ../x}]\n", "every device needs");
    parse_fails("cdiVersion: 0.6.0\nkind: a/b\ndevices: [{name: a}, {name: a}]\n", "two devices");
    parse_fails("cdiVersion: 0.6.0\nkind: a/b\ndevices: [{name: a, containerEdits: "
                "{deviceNodes: [{path: dev/x}]}}]\n",
                "absolute path");
    parse_fails("cdiVersion: 0.6.0\nkind: a/b\ndevices: [{name: a, containerEdits: "
                "{deviceNodes: [{path: /dev/x, hostPath: /dev/../etc/shadow}]}}]\n",
                "no '.' or '..'");
    parse_fails("cdiVersion: 0.6.0\nkind: a/b\ndevices: [{name: a, containerEdits: "
                "{deviceNodes: [{path: /dev/x, type: p}]}}]\n",
                "character and block devices only");
    parse_fails("cdiVersion: 0.6.0\nkind: a/b\ndevices: [{name: a, containerEdits: "
                "{mounts: [{hostPath: /x, containerPath: /y, type: tmpfs}]}}]\n",
                "bind mounts only");
    parse_fails("cdiVersion: 0.6.0\nkind: a/b\ndevices: [{name: a, containerEdits: {env: [=x]}}]\n",
                "KEY=VALUE");
    /* "rw" is the only way to a writable mount. */
    const char *ok = "cdiVersion: 0.6.0\nkind: a/b\ndevices: [{name: a, containerEdits: "
                     "{mounts: [{hostPath: /x, containerPath: /y, options: [rw, rbind]}, "
                     "{hostPath: /x, containerPath: /z}]}}]\n";
    json_t *out = NULL;
    TAP_EQ_INT(sbx__cdi_parse(ok, strlen(ok), "t", &out, NULL), 0);
    json_t *m = json_object_get(json_object_get(json_object_get(out, "devices"), "a"), "mounts");
    TAP_TRUE(json_is_true(json_object_get(json_array_get(m, 0), "rw")));
    TAP_TRUE(json_is_true(json_object_get(json_array_get(m, 0), "recursive")));
    TAP_TRUE(json_is_false(json_object_get(json_array_get(m, 1), "rw")));
    json_decref(out);
}

TAP_MAIN(TAP(test_one_gpu), TAP(test_two_gpus_and_too_many), TAP(test_qualified_names),
         TAP(test_wrong_device_numbers), TAP(test_untrusted_file), TAP(test_parse_refuses))
