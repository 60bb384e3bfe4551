/*
 * The docker provider against a real dockerd that this binary starts on a
 * private socket, data root and exec root (no bridge, no iptables: the
 * containers get loopback only), with a test image made here by `docker
 * import` of a busybox-static rootfs (scripts/make-test-rootfs.sh). Skips,
 * with the reason, where dockerd cannot start (not root, not installed).
 *
 * Cases: lifecycle and exec (exit codes, streams, env, cwd, user, stdin,
 * the timeout sentinel), files, status, serialize/connect, the spec's
 * mapping as the engine shows it (HostConfig), a missing image, a create
 * that fails half-way leaving nothing, a container removed behind sbx's
 * back, and list/gc. The provider-neutral suite runs on docker too:
 * SBX_SUITE_PLUGIN=docker in test_provider_suite (docs/providers/docker.md).
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"
#include "lib/proc.h"

#include <sbx.h>

#include "providers/docker/docker.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IMAGE "sbx-docker-test:1"
#define IMAGE_USER "sbx-docker-test:user"

static char dir[512];     /* the private dockerd's directory */
static pid_t dockerd = -1;
static char why_not[512]; /* set when dockerd could not start: every test skips with it */
static int tls_port; /* > 0: dockerd also listens on tcp://127.0.0.1:PORT with TLS (certs in DIR/certs) */

static pid_t spawn_dockerd(void);
static const char *sbx_cli(void);
static bool engine_up(pid_t pid);
static pid_t dockerd_pid(void);
static void end_dockerd(pid_t pid);

static void need_engine(void)
{
    if (why_not[0])
        TAP_SKIP(why_not);
    tap_allow_fd_changes(); /* the loop's and curl's descriptors */
    char st[1024];
    snprintf(st, sizeof(st), "%s/state", tap_tmpdir());
    setenv("SBX_STATE_DIR", st, 1);
}

/*
 * A provider on the private engine: `top` adds provider keys (", \"pull\":
 * false"), `extra` create keys ("" or NULL for none).
 */
static sbx_provider *provider_with(const char *top, const char *extra)
{
    char cfg[4096];
    if (snprintf(cfg, sizeof(cfg),
                 "{\"docker\": {\"host\": \"unix://%s/docker.sock\", \"create\": "
                 "{\"network\": \"none\"%s%s}%s}}",
                 dir, extra && extra[0] ? ", " : "", extra ? extra : "", top ? top : "") >=
        (int)sizeof(cfg))
        TAP_FAIL("provider config too long");
    return provider_of(cfg);
}

/* A provider on the private engine; `extra` adds create keys ("" for none). */
static sbx_provider *provider(const char *extra)
{
    return provider_with(NULL, extra);
}

static sbx_spec *image_spec(void)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "docker://" IMAGE); /* the prefix is dropped, as the reference does */
    return s;
}

/* A box of the test image with nothing else in its spec. */
static sbx_sandbox *start_image(sbx_provider *p)
{
    sbx_spec *spec = image_spec();
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    return sb;
}

/* A box of the test image whose entrypoint (its service) is `sh -c script`. */
static sbx_sandbox *start_service(sbx_provider *p, const char *script)
{
    sbx_spec *spec = image_spec();
    const char *const ep[] = {"sh", "-c", script, NULL};
    sbx_spec_set_entrypoint(spec, ep);
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    return sb;
}

/* `docker ...` against the private engine; its output (trimmed) in out. */
static int docker(char *out, size_t n, const char *args)
{
    int rc = run_cmd(out, n, "DOCKER_HOST=unix://%s/docker.sock docker %s", dir, args);
    size_t l = strlen(out);
    while (l && (out[l - 1] == '\n' || out[l - 1] == ' '))
        out[--l] = 0;
    return rc;
}

/* A box with env A=from-create, B=base and workdir /tmp, as check_exec_basics expects. */
static sbx_sandbox *start_env_box(sbx_provider *p)
{
    sbx_spec *spec = image_spec();
    sbx_spec_set_env(spec, "A", "from-create");
    sbx_spec_set_env(spec, "B", "base");
    sbx_spec_set_workdir(spec, "/tmp");
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    return sb;
}

/*
 * What every way of running a command must give (the agent's and the
 * engine's exec): exit code and both streams, the image's file, the
 * workdir, the call's env over the spec's (the reference's test), cwd,
 * user and stdin.
 */
static void check_exec_basics(sbx_sandbox *sb)
{
    run_is(sb, "echo out; echo err >&2; exit 7", NULL, 7, "out\n", "err\n");
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_env(o, "A", "from-call");
    sbx_exec_result *r = run(sb, "cat /etc/image-name; pwd; echo $A $B", o);
    TAP_EQ_STR(stdout_of(r), "sbx-test\n/tmp\nfrom-call base\n");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    o = sbx_exec_opts_new();
    sbx_exec_opts_set_cwd(o, "/etc");
    sbx_exec_opts_set_user(o, "1000");
    sbx_exec_opts_set_stdin(o, "piped", 5);
    r = run(sb, "pwd; id -u; cat", o);
    TAP_EQ_STR(stdout_of(r), "/etc\n1000\npiped");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
}

/* --- cases ------------------------------------------------------------------------ */

static void test_exec(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_sandbox *sb = start_env_box(p);
    check_exec_basics(sb);

    /* The timeout sentinel: 125, "timeout", no stdout. */
    sbx_exec_result *r = timed_out(sb, "sleep 30", 0.5);
    TAP_EQ_STR(stdout_of(r), "");
    sbx_exec_result_free(r);

    /* The box is an ordinary container: docker sees it by its id, labelled. */
    char out[4096];
    char args[512];
    snprintf(args, sizeof(args), "inspect -f '{{.State.Status}} {{index .Config.Labels \"sbx.sandbox\"}}' %s",
             sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "running 1");
    status_is(sb, SBX_STATUS_RUNNING);

    stop_free(sb);
    /* Gone from the engine. */
    TAP_NE_INT(docker(out, sizeof(out), args), 0);
    sbx_provider_free(p);
}

/* Pause and resume: the engine's own (docker pause); status PAUSED; exec refused at once. */
static void test_pause(void)
{
    need_engine();
    sbx_provider *p = provider("");
    TAP_TRUE(sbx_provider_supports(p, "pause"));
    sbx_sandbox *sb = start_env_box(p);
    TAP_OK(sbx_sandbox_pause(sb, &e_));
    TAP_OK(sbx_sandbox_pause(sb, &e_)); /* idempotent, over the engine's 409 */
    status_is(sb, SBX_STATUS_PAUSED);
    char out[4096], args[512];
    snprintf(args, sizeof(args), "inspect -f '{{.State.Status}}' %s", sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "paused");
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_exec(sb, "true", NULL, &r, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "is paused: resume it first");
    sbx_error_free(e);
    TAP_OK(sbx_sandbox_resume(sb, &e_));
    TAP_OK(sbx_sandbox_resume(sb, &e_));
    status_is(sb, SBX_STATUS_RUNNING);
    run_is(sb, "echo back", NULL, 0, "back\n", "");
    /* A paused container still stops. */
    TAP_OK(sbx_sandbox_pause(sb, &e_));
    stop_free(sb);
    TAP_NE_INT(docker(out, sizeof(out), args), 0);
    sbx_provider_free(p);
}

static void test_files(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_sandbox *sb = start_image(p);
    char src[1024], back[1024];
    snprintf(src, sizeof(src), "%s/in.sh", tap_tmpdir());
    snprintf(back, sizeof(back), "%s/back/out.sh", tap_tmpdir());
    TAP_EQ_INT(write_text(src, "#!/bin/sh\necho ran\n"), 0);
    chmod(src, 0750);
    /* Parents are made; the mode is kept. */
    TAP_OK(sbx_sandbox_upload(sb, src, "/opt/new/dir/run.sh", &e_));
    sbx_exec_result *r = run(sb, "/opt/new/dir/run.sh; stat -c %a /opt/new/dir/run.sh", NULL);
    TAP_EQ_STR(stdout_of(r), "ran\n750\n");
    sbx_exec_result_free(r);
    TAP_OK(sbx_sandbox_download(sb, "/opt/new/dir/run.sh", back, &e_));
    char *text = read_text(back);
    TAP_EQ_STR(text, "#!/bin/sh\necho ran\n");
    free(text);
    struct stat s;
    TAP_EQ_INT(stat(back, &s), 0);
    TAP_EQ_INT(s.st_mode & 07777, 0750);
    sbx_error *e = NULL;
    int rc = sbx_sandbox_download(sb, "/nope", back, &e);
    TAP_EQ_INT(rc, SBX_ENOENT);
    sbx_error_free(e);
    stop_free(sb);
    sbx_provider_free(p);
}

/*
 * Without cap_drop or security_opt in the config a box gets sbx's profile
 * (no MKNOD, no_new_privs), as a linux box does; empty lists give Docker's
 * defaults. Before: Docker's defaults always.
 */
static void test_default_profile(void)
{
    need_engine();
    static const struct {
        const char *cfg, *inspect, *inbox;
    } cases[] = {
        { NULL, "[MKNOD] [no-new-privileges]", "nnp=1 mknod=refused\n" },
        { "\"cap_drop\": [], \"security_opt\": []", "[] []", "nnp=0 mknod=made\n" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
        sbx_provider *p = provider(cases[i].cfg);
        sbx_spec *spec = image_spec();
        sbx_sandbox *sb = start(p, spec);
        sbx_spec_free(spec);
        char out[4096], args[512];
        snprintf(args, sizeof(args),
                 "inspect -f '{{.HostConfig.CapDrop}} {{.HostConfig.SecurityOpt}}' %s",
                 sbx_sandbox_id(sb));
        TAP_EQ_INT(docker(out, sizeof(out), args), 0);
        TAP_EQ_STR(out, cases[i].inspect);
        sbx_exec_result *r =
            run(sb, "echo nnp=$(grep NoNewPrivs /proc/self/status | tr -dc 0-9) "
                    "mknod=$(mknod /tmp/null c 1 3 2>/dev/null && echo made || echo refused)",
                NULL);
        TAP_EQ_STR(stdout_of(r), cases[i].inbox);
        sbx_exec_result_free(r);
        stop_free(sb);
        sbx_provider_free(p);
    }
}

static void test_mapping(void)
{
    need_engine();
    sbx_provider *p = provider("\"read_only\": true, \"cap_drop\": [\"NET_RAW\"], "
                               "\"pids_limit\": 64, \"security_opt\": [\"no-new-privileges\"]");
    sbx_spec *spec = image_spec();
    sbx_spec_set_cpu(spec, 0.5);
    sbx_spec_set_memory_mib(spec, 96);
    sbx_spec_set_metadata(spec, "team", "rl");
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    char out[4096], args[1024];
    snprintf(args, sizeof(args),
             "inspect -f '{{.HostConfig.NanoCpus}} {{.HostConfig.Memory}} "
             "{{.HostConfig.MemorySwap}} {{.HostConfig.PidsLimit}} {{.HostConfig.ReadonlyRootfs}} "
             "{{.HostConfig.CapDrop}} {{.HostConfig.SecurityOpt}} {{.HostConfig.NetworkMode}} "
             "{{index .Config.Labels \"team\"}} {{.Config.Image}} {{.HostConfig.Init}}' %s",
             sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "500000000 100663296 100663296 64 true [NET_RAW] [no-new-privileges] none rl "
                    IMAGE " false");
    /* The agent's mount is read-only, and the root too (but for the agent's socket dir). */
    sbx_exec_result *r = run(sb, "touch /x 2>/dev/null || echo ro; touch /.sbx-agent 2>/dev/null "
                                 "|| echo agent-ro; echo $(cat /proc/1/cmdline | tr '\\0' ' ')",
                             NULL);
    TAP_EQ_STR(stdout_of(r), "ro\nagent-ro\n/.sbx-agent init --listen /.sbx/agent.sock\n");
    sbx_exec_result_free(r);
    /* The socket directory is writable in the box, but a tiny tmpfs: it cannot fill the host. */
    r = run(sb, "dd if=/dev/zero of=/.sbx/fill bs=1024 count=1024 2>/dev/null && echo filled; "
                "rm -f /.sbx/fill",
            NULL);
    TAP_EQ_STR(stdout_of(r), "");
    sbx_exec_result_free(r);
    char mounts[8192];
    TAP_EQ_INT(run_cmd(mounts, sizeof(mounts), "grep -c ' %s/' /proc/self/mounts", tap_tmpdir()),
               0);
    TAP_EQ_STR(mounts, "1\n");
    stop_free(sb);
    /* Unmounted with the box. */
    run_cmd(mounts, sizeof(mounts), "grep -c ' %s/' /proc/self/mounts", tap_tmpdir());
    TAP_EQ_STR(mounts, "0\n");
    sbx_provider_free(p);
}

/* The engine has no container, running or not, whose `key` (name, label=case, ...) is `value`. */
static void no_container(const char *key, const char *value)
{
    char out[4096], args[512];
    snprintf(args, sizeof(args), "ps -aq --filter %s=%s", key, value);
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "");
}

/* No container of the spec labelled case=`tag` is left, and no record of it. */
static void nothing_left(sbx_provider *p, const char *tag)
{
    no_container("label=case", tag);
    char *list = NULL;
    TAP_OK(sbx_provider_list(p, NULL, &list, &e_));
    TAP_EQ_STR(list, "[]");
    free(list);
}

/* A create that fails after the container exists removes it, and its record. */
static void test_half_created(void)
{
    need_engine();
    sbx_provider *p =
        provider("\"host_config\": {\"Devices\": [{\"PathOnHost\": \"/dev/sbx-no-such-device\", "
                 "\"PathInContainer\": \"/dev/x\", \"CgroupPermissions\": \"rwm\"}]}");
    sbx_spec *spec = image_spec();
    sbx_spec_set_metadata(spec, "case", "half");
    start_fails(p, spec, 0, IMAGE);
    sbx_spec_free(spec);
    nothing_left(p, "half");
    sbx_provider_free(p);
}

static void test_missing_image(void)
{
    need_engine();
    sbx_provider *p = provider_with(", \"pull\": false", "");
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_image(spec, "sbx-no-such-image:9");
    TAP_CONTAINS(start_fails(p, spec, SBX_ECREATE, "sbx-no-such-image:9"), "pull is off");
    /* No image at all. */
    sbx_spec_set_image(spec, NULL);
    start_fails(p, spec, 0, "spec.image is required");
    sbx_spec_free(spec);
    sbx_provider_free(p);
}

/* The pull reports a start's future got (on the loop thread): how many, and the first's stage. */
struct pulled {
    atomic_int reports;
    char first[64];
};

static void on_pull(const char *stage, unsigned long long done, unsigned long long total,
                    void *data)
{
    (void)done, (void)total;
    struct pulled *p = data;
    if (atomic_fetch_add(&p->reports, 1) == 0)
        snprintf(p->first, sizeof(p->first), "%s", stage);
}

/*
 * A missing image is pulled through the engine from a registry (Debian's
 * docker-registry on loopback, which dockerd reaches over plain HTTP), and
 * the start's future reports the pull per layer: the image is the test
 * image with a layer of its own on top, pushed, then removed from the
 * engine, so that layer is downloaded and the base one is "cached".
 */
static void test_pull_progress(void)
{
    need_engine();
    char out[8192], cmd[2048], reg[1024];
    if (run_cmd(out, sizeof(out), "command -v docker-registry") != 0)
        TAP_SKIP("docker-registry is not installed");
    snprintf(reg, sizeof(reg), "%s/reg", tap_tmpdir());
    if (run_cmd(out, sizeof(out),
                "bash -c '. tests/registry/fixture.sh && reg_start %s plain none >/dev/null && "
                "echo $REG_PORT'",
                reg) != 0)
        TAP_FAIL("the registry did not start: %s", out);
    int port = atoi(out);
    char ref[128];
    snprintf(ref, sizeof(ref), "127.0.0.1:%d/sbx-pull:1", port);
    snprintf(cmd, sizeof(cmd),
             "run --name sbx-pull-src --network none " IMAGE " sh -c 'echo pulled > /pulled'");
    TAP_EQ_INT(docker(out, sizeof(out), cmd), 0);
    snprintf(cmd, sizeof(cmd), "commit sbx-pull-src %s", ref);
    TAP_EQ_INT(docker(out, sizeof(out), cmd), 0);
    snprintf(cmd, sizeof(cmd), "push %s", ref);
    if (docker(out, sizeof(out), cmd) != 0)
        TAP_FAIL("docker push to the loopback registry failed: %s", out);
    snprintf(cmd, sizeof(cmd), "rm sbx-pull-src && DOCKER_HOST=unix://%s/docker.sock docker rmi %s",
             dir, ref);
    TAP_EQ_INT(docker(out, sizeof(out), cmd), 0);

    sbx_provider *p = provider("");
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_image(spec, ref);
    sbx_sandbox *sb = NULL;
    TAP_OK(sbx_sandbox_new(p, spec, &sb, &e_));
    sbx_spec_free(spec);
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_start_async(sb, NULL, &f, &e_));
    struct pulled *pl = calloc(1, sizeof(*pl));
    TAP_OK(sbx_future_on_progress(f, on_pull, pl));
    TAP_OK(sbx_future_wait(f, -1, &e_));
    sbx_future_free(f);
    sbx_exec_result *r = run(sb, "cat /pulled", NULL);
    char got[64];
    snprintf(got, sizeof(got), "%s", stdout_of(r));
    sbx_exec_result_free(r);
    /* The box and the registry go first: a failed check must leave neither to the next case. */
    stop_free(sb);
    sbx_provider_free(p);
    run_cmd(out, sizeof(out), "kill $(cat %s/pid)", reg);
    TAP_EQ_STR(got, "pulled\n");
    /*
     * Reports closer than 50 ms apart are dropped (sbx_op_progress), so which
     * states arrive depends on timing; that they arrive, per layer, does not.
     */
    TAP_TRUE(atomic_load(&pl->reports) > 0);
    char st[16] = "", id[16] = "";
    TAP_EQ_INT(sscanf(pl->first, "pull:%15[a-z]:layer:%15[0-9a-f]", st, id), 2);
    TAP_EQ_INT((int)strlen(id), 12);
    free(pl);
}

static void test_bad_config(void)
{
    need_engine();
    const char *bad[][2] = {
        {"{\"docker\": {\"nope\": 1}}", "unknown key 'nope'"},
        {"{\"docker\": {\"create\": {\"publish_host\": \"localhost\"}}}",
         "create.publish_host must be an IPv4 or IPv6 address"},
        {"{\"docker\": {\"exec\": {\"exec_shell\": \"\"}}}", "exec.exec_shell must be null"},
        {"{\"docker\": {\"create\": {\"extra_run_args\": [\"--privileged\"]}}}",
         "docker CLI flags"},
        {"{\"docker\": {\"host\": \"ssh://me@there\"}}", "ssh://me@there"},
        {"{\"docker\": {\"image_rewrites\": [{\"from\": \"a/\"}]}}", "'from' and 'to'"},
        {"{\"docker\": {\"image_rewrites\": {\"from\": \"a/\"}}}", "image_rewrites must be a list"},
        {"{\"docker\": {\"agent\": \"no\"}}", "agent must be true or false"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sbx_provider *p = NULL;
        sbx_error *e = NULL;
        TAP_NE_INT(sbx_provider_new(bad[i][0], &p, &e), SBX_OK);
        TAP_CONTAINS(sbx_error_message(e), bad[i][1]);
        sbx_error_free(e);
    }
    /* An engine that accepts and never answers: bounded by create.start_timeout_s. */
    {
        char path[1024], hcfg[1400];
        snprintf(path, sizeof(path), "%s/mute.sock", tap_tmpdir());
        int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sa.sun_path))
            TAP_SKIP("the temporary directory's path is too long for a unix socket");
        memcpy(sa.sun_path, path, strlen(path) + 1);
        TAP_EQ_INT(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
        TAP_EQ_INT(listen(l, 16), 0);
        snprintf(hcfg, sizeof(hcfg),
                 "{\"docker\": {\"host\": \"unix://%s\", \"create\": {\"start_timeout_s\": "
                 "0.5}}}",
                 path);
        sbx_provider *mp = NULL;
        TAP_OK(sbx_provider_new(hcfg, &mp, &e_));
        sbx_spec *ms = image_spec();
        start_fails(mp, ms, SBX_ETIMEDOUT, "create.start_timeout_s (0.5s) ran out while");
        sbx_spec_free(ms);
        sbx_provider_free(mp);
        close(l);
    }
    /* An engine nobody answers at: the error names it. */
    sbx_provider *p = NULL;
    char cfg[1024];
    snprintf(cfg, sizeof(cfg), "{\"docker\": {\"host\": \"unix://%s/none.sock\"}}", tap_tmpdir());
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    sbx_spec *spec = image_spec();
    start_fails(p, spec, 0, "there is no socket at ");
    sbx_provider_free(p);
    /* A path that is no socket: said so, not libcurl's "localhost port 80". */
    snprintf(cfg, sizeof(cfg), "%s/plain", tap_tmpdir());
    TAP_EQ_INT(write_text(cfg, "x"), 0);
    char cfg2[1200];
    snprintf(cfg2, sizeof(cfg2), "{\"docker\": {\"host\": \"unix://%s\"}}", cfg);
    TAP_OK(sbx_provider_new(cfg2, &p, &e_));
    start_fails(p, spec, 0, "plain is not a socket");
    sbx_provider_free(p);
    sbx_spec_free(spec);
}

/*
 * A unix-socket proxy to the private engine that holds every request but
 * the container's create for `delay_ms` before passing it on: each request
 * stays well inside a bound that their sum passes. A child of its own
 * (killed by the caller); one grandchild per connection.
 */
static pid_t slow_proxy(const char *path, int delay_ms)
{
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (l < 0 || strlen(path) >= sizeof(sa.sun_path))
        TAP_FAIL("proxy socket %s", path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 64) < 0)
        TAP_FAIL("proxy bind %s: %s", path, strerror(errno));
    struct sockaddr_un ua = {.sun_family = AF_UNIX};
    char engine[600];
    snprintf(engine, sizeof(engine), "%s/docker.sock", dir);
    if (strlen(engine) >= sizeof(ua.sun_path))
        TAP_SKIP("the engine's socket path is too long for a unix socket");
    memcpy(ua.sun_path, engine, strlen(engine) + 1);
    pid_t pid = fork();
    if (pid != 0) {
        close(l);
        return pid;
    }
    /* It ends with the test (a failed assert exits it), and holds none of its output. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    struct sigaction ign = {.sa_handler = SIG_IGN}; /* no zombies of the connections */
    sigaction(SIGCHLD, &ign, NULL);
    for (;;) {
        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        if (fork() != 0) {
            close(c);
            continue;
        }
        char buf[65536];
        ssize_t n = read(c, buf, sizeof(buf) - 1);
        if (n <= 0)
            _exit(0);
        buf[n] = 0;
        if (!strstr(buf, "/containers/create"))
            usleep((useconds_t)delay_ms * 1000);
        int u = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(u, (struct sockaddr *)&ua, sizeof(ua)) < 0 || write(u, buf, (size_t)n) != n)
            _exit(1);
        struct pollfd pf[2] = {{.fd = c, .events = POLLIN}, {.fd = u, .events = POLLIN}};
        while (poll(pf, 2, -1) > 0) {
            for (int i = 0; i < 2; i++) {
                if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                n = read(pf[i].fd, buf, sizeof(buf));
                if (n <= 0 || write(pf[1 - i].fd, buf, (size_t)n) != n)
                    _exit(0);
            }
        }
        _exit(0);
    }
}

/*
 * create.start_timeout_s bounds the whole create (the reference's `docker
 * run`, pull included), not each request: through a proxy that holds each
 * request 1 s, a create of five requests with 3.5 s fails, says in which
 * step, and leaves no container and no record.
 */
static void test_create_deadline(void)
{
    need_engine();
    char path[1024], cfg[1500];
    snprintf(path, sizeof(path), "%s/slow.sock", tap_tmpdir());
    pid_t proxy = slow_proxy(path, 1000);
    snprintf(cfg, sizeof(cfg),
             "{\"docker\": {\"host\": \"unix://%s\", \"create\": {\"network\": \"none\", "
             "\"start_timeout_s\": 3.5}}}",
             path);
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    sbx_spec *spec = image_spec();
    sbx_spec_set_metadata(spec, "case", "deadline");
    start_fails(p, spec, SBX_ETIMEDOUT, "create.start_timeout_s (3.5s) ran out while");
    sbx_spec_free(spec);
    nothing_left(p, "deadline");
    sbx_provider_free(p);
    kill(proxy, SIGKILL);
    waitpid(proxy, NULL, 0);
}

static void test_serialize_connect(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_spec *spec = image_spec();
    sbx_spec_set_env(spec, "K", "v");
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    char *desc = NULL;
    TAP_OK(sbx_sandbox_serialize(sb, NULL, &desc, &e_));
    TAP_CONTAINS(desc, "\"container\"");
    /* Another provider instance (as another process would) reaches the same box. */
    sbx_provider *p2 = provider("");
    sbx_sandbox *c = NULL;
    TAP_OK(sbx_sandbox_connect(p2, desc, &c, &e_));
    TAP_EQ_STR(sbx_sandbox_id(c), sbx_sandbox_id(sb));
    sbx_exec_result *r = run(c, "echo $K; echo made > /tmp/f", NULL);
    TAP_EQ_STR(stdout_of(r), "v\n");
    sbx_exec_result_free(r);
    /* A borrowed handle's stop leaves the box running. */
    stop_free(c);
    r = run(sb, "cat /tmp/f", NULL);
    TAP_EQ_STR(stdout_of(r), "made\n");
    sbx_exec_result_free(r);
    stop_free(sb);
    /* A descriptor of a box that is gone fails, saying so. */
    sbx_error *e = NULL;
    c = NULL;
    TAP_NE_INT(sbx_sandbox_connect(p2, desc, &c, &e), SBX_OK);
    TAP_CONTAINS(sbx_error_message(e), "is gone");
    sbx_error_free(e);
    free(desc);
    sbx_provider_free(p2);
    sbx_provider_free(p);
}

/* `docker rm -f` behind sbx's back: status, exec, stop and gc all cope. */
static void test_removed_behind_back(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_spec *spec = image_spec();
    sbx_spec_set_metadata(spec, "case", "behind");
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    char out[4096], args[512];
    snprintf(args, sizeof(args), "rm -f %s", sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    status_is(sb, SBX_STATUS_STOPPED);
    /* The reference's result for a container that is gone: 125, "sandbox". */
    sbx_exec_result *r = run(sb, "echo hi", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    sbx_exec_result_free(r);
    /* Listed as not running; gc collects its record. */
    char *list = NULL;
    TAP_OK(sbx_provider_list(p, "{\"labels\": {\"case\": \"behind\"}}", &list, &e_));
    TAP_CONTAINS(list, "\"error\"");
    free(list);
    char *removed = NULL;
    TAP_OK(sbx_provider_gc(p, NULL, &removed, &e_));
    TAP_CONTAINS(removed, sbx_sandbox_id(sb));
    free(removed);
    /* close is idempotent: a missing container is success. */
    stop_free(sb);
    sbx_provider_free(p);
}

static void test_list_stop_id(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_spec *spec = image_spec();
    sbx_spec_set_metadata(spec, "case", "list");
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    char id[128];
    snprintf(id, sizeof(id), "%s", sbx_sandbox_id(sb));
    char *list = NULL;
    TAP_OK(sbx_provider_list(p, "{\"labels\": {\"case\": \"list\"}}", &list, &e_));
    TAP_CONTAINS(list, id);
    TAP_CONTAINS(list, "\"running\"");
    free(list);
    TAP_OK(sbx_provider_stop_box(p, id, &e_));
    no_container("name", id);
    stop_free(sb);
    sbx_provider_free(p);
}

/*
 * Containers of sbx's with no record in this state directory (a crashed
 * run, another state directory) are found by their label: listed (their
 * provider object's "record" false), never collected while they run,
 * collected by gc once stopped, and stopped by their box id.
 */
static void test_unrecorded(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_spec *spec = image_spec();
    sbx_spec_set_metadata(spec, "case", "unrecorded");
    sbx_sandbox *a = start(p, spec), *b = start(p, spec);
    sbx_spec_free(spec);
    char ida[128], idb[128];
    snprintf(ida, sizeof(ida), "%s", sbx_sandbox_id(a));
    snprintf(idb, sizeof(idb), "%s", sbx_sandbox_id(b));
    /* A provider of another state directory: no record of either. */
    char top[1100];
    snprintf(top, sizeof(top), ", \"state_dir\": \"%.900s/other\"", tap_tmpdir());
    sbx_provider *q = provider_with(top, "");
    char *list = NULL;
    TAP_OK(sbx_provider_list(q, "{\"labels\": {\"case\": \"unrecorded\"}}", &list, &e_));
    TAP_CONTAINS(list, ida);
    TAP_CONTAINS(list, idb);
    TAP_CONTAINS(list, "\"record\":false");
    TAP_CONTAINS(list, "\"status\":\"running\"");
    free(list);
    /* `sbx ls` of a third state directory shows them, from the provider's list. */
    static char cli[16384];
    TAP_EQ_INT(run_cmd(cli, sizeof(cli),
                       "SBX_PROVIDER=docker DOCKER_HOST=unix://%s/docker.sock "
                       "SBX_STATE_DIR=%s/cli %s ls 2>&1",
                       dir, tap_tmpdir(), sbx_cli()),
               0);
    TAP_CONTAINS(cli, ida);
    TAP_CONTAINS(cli, idb);
    /* Running: another state directory's live boxes, not gc's. */
    char *gone = NULL;
    TAP_OK(sbx_provider_gc(q, NULL, &gone, &e_));
    TAP_TRUE(!strstr(gone, ida) && !strstr(gone, idb));
    free(gone);
    /* b's container stopped behind sbx's back: gc collects it, and only it. */
    char out[4096], args[512];
    snprintf(args, sizeof(args), "kill %s", idb);
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_OK(sbx_provider_gc(q, NULL, &gone, &e_));
    TAP_CONTAINS(gone, idb);
    TAP_TRUE(!strstr(gone, ida));
    free(gone);
    no_container("name", idb);
    /* a by its box id, from the provider with no record of it. */
    TAP_OK(sbx_provider_stop_box(q, ida, &e_));
    no_container("name", ida);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_stop_box(q, "sbx-no-such-box", &e), SBX_ENOENT);
    sbx_error_free(e);
    sbx_provider_free(q);
    stop_free(a); /* gone already: still a success */
    stop_free(b);
    sbx_provider_free(p);
}

/* A spec entrypoint runs as the agent's service; the box stays up for execs. */
static void test_entrypoint(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_sandbox *sb = start_service(p, "echo served > /tmp/svc; exec sleep 100000");
    sbx_exec_result *r = run(sb, "for i in $(seq 100); do [ -f /tmp/svc ] && break; sleep 0.05; "
                                 "done; cat /tmp/svc",
                             NULL);
    TAP_EQ_STR(stdout_of(r), "served\n");
    sbx_exec_result_free(r);
    stop_free(sb);
    sbx_provider_free(p);
}

/* --- service logs (logs.c): the engine's log of the container, as records ------------ */

/* What sbx_sandbox_logs gave: every entry's bytes per stream, the events, the entries' count. */
struct dlogs {
    char out[8192], err[8192], events[256];
    size_t n;
    double first_t;
    int stop_after; /* > 0: stop the read at this many entries */
    atomic_int seen;
};

static void cat_to(char *dst, size_t cap, const char *data, size_t len)
{
    size_t have = strlen(dst);
    if (have + len < cap) {
        memcpy(dst + have, data, len);
        dst[have + len] = 0;
    }
}

static int dlogs_cb(double t, int stream, const char *data, size_t len, void *user)
{
    struct dlogs *g = user;
    if (!g->n)
        g->first_t = t;
    g->n++;
    cat_to(stream == SBX_STREAM_STDOUT   ? g->out
           : stream == SBX_STREAM_STDERR ? g->err
                                         : g->events,
           stream == SBX_STREAM_EVENT ? sizeof(g->events) : sizeof(g->out), data, len);
    atomic_store(&g->seen, (int)g->n);
    return g->stop_after > 0 && (int)g->n >= g->stop_after;
}

/*
 * The log once its stdout holds `out` and its stderr `err` (the engine
 * copies the two apart, so one may lag). Bounded at 60 s against a hang.
 */
static void dlogs_wait(sbx_sandbox *sb, struct dlogs *g, const char *out, const char *err)
{
    for (int i = 0; i < 600; i++) {
        memset(g, 0, sizeof(*g));
        TAP_OK(sbx_sandbox_logs(sb, 0, -1, 0, dlogs_cb, g, &e_));
        if (strstr(g->out, out) && strstr(g->err, err))
            return;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    TAP_FAIL("the log never held %s and %s (stdout: %s; stderr: %s)", out, err, g->out, g->err);
}

/*
 * The entrypoint's stdout and stderr as the engine keeps them: each stream
 * apart, with the engine's time; `tail` and `since`; bytes that look like a
 * record header are only bytes; the agent's own line says the service ended.
 */
static void test_logs(void)
{
    need_engine();
    sbx_provider *p = provider("");
    double before = (double)time(NULL) - 1;
    sbx_sandbox *sb = start_service(p, "echo one; echo two >&2; "
                                       "printf 'SL\\003\\001\\004\\001\\001\\001forged\\n'; "
                                       "echo three; exit 3");
    struct dlogs *g = calloc(1, sizeof(*g));
    /* The agent says on stderr that the service ended, after the box's own lines. */
    dlogs_wait(sb, g, "three\n", "sbx-agent: entrypoint exited with status 3");
    TAP_TRUE(!strncmp(g->out, "one\nSL\003\001\004\001\001\001forged\n", 16));
    TAP_CONTAINS(g->out, "forged\nthree\n");
    TAP_EQ_STR(g->events, ""); /* the forged header is payload */
    TAP_TRUE(!strncmp(g->err, "two\n", 4));
    TAP_TRUE(g->first_t >= before && g->first_t < (double)time(NULL) + 5);
    /*
     * The last line only: the engine copies the two streams apart, so the
     * newest is the service's last (stdout) or the agent's (stderr).
     */
    memset(g, 0, sizeof(*g));
    TAP_OK(sbx_sandbox_logs(sb, 0, 1, 0, dlogs_cb, g, &e_));
    TAP_EQ_INT((int)g->n, 1);
    TAP_TRUE((!strcmp(g->out, "three\n") && !g->err[0]) ||
             (!g->out[0] && strstr(g->err, "entrypoint exited with status 3")));
    /* Nothing since a time to come; everything since before the box. */
    memset(g, 0, sizeof(*g));
    TAP_OK(sbx_sandbox_logs(sb, (double)time(NULL) + 3600, -1, 0, dlogs_cb, g, &e_));
    TAP_EQ_INT((int)g->n, 0);
    memset(g, 0, sizeof(*g));
    TAP_OK(sbx_sandbox_logs(sb, before, -1, 0, dlogs_cb, g, &e_));
    TAP_CONTAINS(g->out, "three\n");
    free(g);
    stop_free(sb);
    sbx_provider_free(p);

    /* The engine's time prefix, read exactly; what is not one is refused. */
    double t = 0;
    const char *ts = "2026-12-02T13:20:00.123456789Z x";
    TAP_EQ_INT((int)sbx__dk_log_time(ts, strlen(ts), &t), 31);
    TAP_TRUE(t > 1796217600.1234 && t < 1796217600.1235);
    ts = "2026-12-02T13:20:00+01:30 x";
    TAP_EQ_INT((int)sbx__dk_log_time(ts, strlen(ts), &t), 26);
    TAP_TRUE(t == 1796217600.0 - 5400);
    ts = "2026-13-02T13:20:00Z x";
    TAP_EQ_INT((int)sbx__dk_log_time(ts, strlen(ts), &t), -1);
    ts = "2026-12-02T13:20:00Z";
    TAP_EQ_INT((int)sbx__dk_log_time(ts, strlen(ts), &t), -1); /* no space: not a prefix */
}

struct dfollow {
    sbx_sandbox *sb;
    struct dlogs g;
    int rc;
};

static void *dfollow_thread(void *arg)
{
    struct dfollow *f = arg;
    sbx_error *e = NULL;
    f->rc = sbx_sandbox_logs(f->sb, 0, -1, SBX_LOGS_FOLLOW, dlogs_cb, &f->g, &e);
    if (f->rc != SBX_OK)
        fprintf(stderr, "# follow: %s\n", sbx_error_message(e));
    sbx_error_free(e);
    return NULL;
}

/*
 * -f: lines as the service writes them; the read ends when the callback
 * says so, even while the box is silent, and when the container stops,
 * with the agent's end as an event.
 */
static void test_logs_follow(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_sandbox *sb = start_service(p, "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; "
                                       "echo second; exec sleep 100000");
    /* Stopped by the callback at its first entry, the box silent after it. */
    struct dfollow *f = calloc(1, sizeof(*f));
    f->sb = sb;
    f->g.stop_after = 1;
    pthread_t th;
    TAP_EQ_INT(pthread_create(&th, NULL, dfollow_thread, f), 0);
    TAP_EQ_INT(pthread_join(th, NULL), 0);
    TAP_EQ_INT(f->rc, SBX_OK);
    TAP_EQ_STR(f->g.out, "first\n");
    /* Followed to the container's end. */
    memset(f, 0, sizeof(*f));
    f->sb = sb;
    TAP_EQ_INT(pthread_create(&th, NULL, dfollow_thread, f), 0);
    for (int i = 0; i < 600 && !atomic_load(&f->g.seen); i++) {
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    sbx_exec_result *r = run(sb, "touch /tmp/go", NULL);
    sbx_exec_result_free(r);
    for (int i = 0; i < 600 && !strstr(f->g.out, "second"); i++) {
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    TAP_EQ_STR(f->g.out, "first\nsecond\n");
    char out[4096], cmd[256];
    snprintf(cmd, sizeof(cmd), "kill -s KILL %s", sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), cmd), 0);
    TAP_EQ_INT(pthread_join(th, NULL), 0);
    TAP_EQ_INT(f->rc, SBX_OK);
    TAP_EQ_STR(f->g.events, "agent killed 9");
    free(f);
    stop_free(sb);
    sbx_provider_free(p);
}

/*
 * tests/run.sh runs this case alone, after the others (50 containers at
 * once). Split in parts at once (SBX_TEST_PARTS, each process its own
 * dockerd) it was faster, but boxes missed their agent's ready timeout on
 * this loaded 2-core machine: it runs as one job.
 */
__attribute__((used)) static const char serial_cases[] = "SBX_TEST_SERIAL_CASES=\"test_many\"";

/* 50 boxes made, used and stopped at once: each its own container and agent. */
static void test_many(void)
{
    need_engine();
    enum { N = 50 };
    sbx_provider *p = provider("");
    sbx_spec *spec = image_spec();
    sbx_spec_set_metadata(spec, "case", "many");
    sbx_sandbox *sb[N];
    sbx_future *f[N];
    for (int i = 0; i < N; i++) {
        TAP_OK(sbx_sandbox_new(p, spec, &sb[i], &e_));
        TAP_OK(sbx_sandbox_start_async(sb[i], NULL, &f[i], &e_));
    }
    for (int i = 0; i < N; i++) {
        TAP_OK(sbx_future_wait(f[i], -1, &e_));
        sbx_future_free(f[i]);
    }
    for (int i = 0; i < N; i++) {
        char cmd[64];
        snprintf(cmd, sizeof(cmd), "echo %d", i);
        TAP_OK(sbx_sandbox_exec_async(sb[i], cmd, NULL, &f[i], &e_));
    }
    for (int i = 0; i < N; i++) {
        sbx_exec_result *r = NULL;
        TAP_OK(sbx_future_wait(f[i], -1, &e_));
        TAP_OK(sbx_future_take_exec_result(f[i], &r, &e_));
        char want[64];
        snprintf(want, sizeof(want), "%d\n", i);
        TAP_EQ_STR(stdout_of(r), want);
        sbx_exec_result_free(r);
        sbx_future_free(f[i]);
    }
    char out[8192];
    TAP_EQ_INT(docker(out, sizeof(out), "ps -q --filter label=case=many | wc -l"), 0);
    TAP_EQ_STR(out, "50");
    for (int i = 0; i < N; i++)
        TAP_OK(sbx_sandbox_stop_async(sb[i], &f[i], &e_));
    for (int i = 0; i < N; i++) {
        TAP_OK(sbx_future_wait(f[i], -1, &e_));
        sbx_future_free(f[i]);
        sbx_sandbox_free(sb[i]);
    }
    no_container("label=case", "many");
    sbx_spec_free(spec);
    sbx_provider_free(p);
}

/*
 * dockerd restarted under a live box: the engine stops its containers, so
 * the box reads as stopped, exec gives the reference's 125 "sandbox", stop
 * succeeds, and a new box works on the new engine.
 */
static void test_engine_restart(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_spec *spec = image_spec();
    sbx_sandbox *sb = start(p, spec);
    sbx_exec_result *r = run(sb, "echo before", NULL);
    TAP_EQ_STR(stdout_of(r), "before\n");
    sbx_exec_result_free(r);
    end_dockerd(dockerd_pid());
    pid_t again = spawn_dockerd();
    TAP_TRUE(engine_up(again));
    status_is(sb, SBX_STATUS_STOPPED);
    r = run(sb, "echo after", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    sbx_exec_result_free(r);
    stop_free(sb);
    sb = start(p, spec);
    r = run(sb, "echo new", NULL);
    TAP_EQ_STR(stdout_of(r), "new\n");
    sbx_exec_result_free(r);
    stop_free(sb);
    sbx_spec_free(spec);
    sbx_provider_free(p);
}

/* A declared port published on 127.0.0.1 by the engine; endpoint() names it (reference §1). */
static void test_endpoint(void)
{
    need_engine();
    char out[4096];
    /* A network of our own: the engine's default bridge is off (--bridge none). */
    docker(out, sizeof(out), "network rm sbx-test-net");
    TAP_EQ_INT(docker(out, sizeof(out), "network create sbx-test-net"), 0);
    sbx_provider *p = NULL;
    char cfg[2048];
    snprintf(cfg, sizeof(cfg),
             "{\"docker\": {\"host\": \"unix://%s/docker.sock\", \"create\": {\"network\": "
             "\"sbx-test-net\"}}}",
             dir);
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    sbx_spec *spec = image_spec();
    TAP_OK(sbx_spec_add_port(spec, 8080, &e_));
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    sbx_exec_result *r = run(sb, "mkdir -p /w && echo hello > /w/index.html && httpd -p 8080 -h /w",
                             NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    sbx_exec_result_free(r);
    sbx_endpoint *ep = NULL;
    TAP_OK(sbx_sandbox_endpoint(sb, 8080, &ep, &e_));
    const char *url = sbx_endpoint_url(ep);
    TAP_TRUE(!strncmp(url, "http://127.0.0.1:", 17));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "curl -s --max-time 10 --retry 20 --retry-delay 0 "
                                         "--retry-connrefused %s/",
                       url),
               0);
    TAP_EQ_STR(out, "hello\n");
    sbx_endpoint_free(ep);
    /* A port not declared: the reference's error. */
    sbx_error *e = NULL;
    TAP_NE_INT(sbx_sandbox_endpoint(sb, 9090, &ep, &e), SBX_OK);
    TAP_CONTAINS(sbx_error_message(e), "was not declared");
    sbx_error_free(e);
    stop_free(sb);
    sbx_provider_free(p);
    docker(out, sizeof(out), "network rm sbx-test-net");
}

/* --- connections of their own: PTYs, background processes, port forwarding -------------------- */

/* Reads a PTY's `stream` until `needle` shows up (text kept in buf). Fails when it ends first. */
static void pty_until(sbx_pty *pt, int stream, char *buf, size_t cap, size_t *len,
                      const char *needle)
{
    for (;;) {
        buf[*len] = 0;
        if (strstr(buf, needle))
            return;
        if (*len + 1 >= cap)
            TAP_FAIL("no '%s' in %zu bytes: %s", needle, *len, buf);
        size_t n = 0;
        sbx_error *e = NULL;
        if (sbx_pty_read(pt, stream, buf + *len, cap - 1 - *len, -1, &n, NULL, &e) != SBX_OK)
            TAP_FAIL("waiting for '%s': %s (read: %s)", needle, sbx_error_message(e), buf);
        if (n == 0)
            TAP_FAIL("the session ended before '%s' (read: %s)", needle, buf);
        *len += n;
    }
}

/* Reads a process's stdout to its end after the `*len` bytes already in buf; NUL-ends it. */
static void proc_read_all(sbx_proc *pr, char *buf, size_t size, size_t *len)
{
    for (;;) {
        size_t n = 0;
        TAP_OK(sbx_proc_read(pr, SBX_STREAM_STDOUT, buf + *len, size - 1 - *len, -1, &n, NULL,
                             &e_));
        if (n == 0)
            break;
        *len += n;
    }
    buf[*len] = 0;
}

/*
 * [pty] On the local-engine path the agent's socket is on this machine
 * (agent_address): a terminal (size, resize, exit code), a command on a
 * terminal of its own (sbx_sandbox_pty_exec), and a background process that
 * outlives its handle and is attached again. The same on the remote path,
 * through exec sessions relaying to the box's init agent.
 */
static void test_pty_and_procs(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_spec *spec = image_spec();
    sbx_spec_set_workdir(spec, "/tmp");
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);

    sbx_pty_opts *o = sbx_pty_opts_new();
    TAP_OK(sbx_pty_opts_set_size(o, 33, 101));
    sbx_pty *pt = NULL;
    TAP_OK(sbx_pty_open(sb, o, &pt, &e_)); /* the box's shell */
    sbx_pty_opts_free(o);
    TAP_TRUE(sbx_pty_id(pt) > 0);
    char buf[16384];
    size_t len = 0;
    TAP_OK(sbx_pty_write(pt, "stty size; pwd; echo MARK-$((40+2))\n", 36, &e_));
    pty_until(pt, SBX_STREAM_STDOUT, buf, sizeof(buf), &len, "MARK-42");
    TAP_CONTAINS(buf, "33 101");
    TAP_CONTAINS(buf, "/tmp");
    TAP_OK(sbx_pty_resize(pt, 50, 132, &e_));
    TAP_OK(sbx_pty_write(pt, "stty size; echo MARK-$((50+2))\n", 31, &e_));
    pty_until(pt, SBX_STREAM_STDOUT, buf, sizeof(buf), &len, "MARK-52");
    TAP_CONTAINS(buf, "50 132");
    TAP_OK(sbx_pty_write(pt, "tty; exit 3\n", 12, &e_));
    pty_until(pt, SBX_STREAM_STDOUT, buf, sizeof(buf), &len, "/dev/pts/");
    int code = -1;
    TAP_OK(sbx_pty_wait(pt, -1, &code, &e_));
    TAP_EQ_INT(code, 3);
    sbx_pty_free(pt);

    /* One command on a terminal of its own. */
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_pty_exec(sb, "tty; exit 5", NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 5);
    TAP_CONTAINS(stdout_of(r), "/dev/pts/");
    sbx_exec_result_free(r);

    /* A background process: started, let go, attached again, fed, waited for. */
    o = sbx_pty_opts_new();
    TAP_OK(sbx_pty_opts_set_command(o, "echo started-$((1+1)); read x; echo got:$x; exit 4"));
    sbx_proc *pr = NULL;
    TAP_OK(sbx_proc_start(sb, o, &pr, &e_));
    sbx_pty_opts_free(o);
    unsigned id = sbx_proc_id(pr);
    TAP_TRUE(id > 0);
    sbx_proc_free(pr); /* it runs on */
    pr = NULL;
    TAP_OK(sbx_proc_attach(sb, id, 0, 0, &pr, &e_));
    len = 0;
    for (;;) {
        buf[len] = 0;
        if (strstr(buf, "started-2"))
            break;
        size_t n = 0;
        TAP_OK(sbx_proc_read(pr, SBX_STREAM_STDOUT, buf + len, sizeof(buf) - 1 - len, -1, &n,
                             NULL, &e_));
        TAP_TRUE(n > 0);
        len += n;
    }
    TAP_OK(sbx_proc_write(pr, "abc\n", 4, &e_));
    TAP_OK(sbx_proc_wait(pr, -1, &code, &e_));
    TAP_EQ_INT(code, 4);
    proc_read_all(pr, buf, sizeof(buf), &len);
    TAP_EQ_STR(buf, "started-2\ngot:abc\n");
    sbx_proc_free(pr);

    /* A handle connected by another provider instance reaches the same agent. */
    sbx_provider *p2 = provider("");
    sbx_sandbox *c = connect_to(p2, sb);
    r = NULL;
    TAP_OK(sbx_sandbox_pty_exec(c, "echo via-connect", NULL, &r, &e_));
    TAP_CONTAINS(stdout_of(r), "via-connect");
    sbx_exec_result_free(r);
    stop_free(c);
    sbx_provider_free(p2);
    stop_free(sb);
    sbx_provider_free(p);

    /*
     * The remote path: each connection of its own is an exec session
     * relaying to the box's init agent, so a background process outlives
     * the handle that started it there too.
     */
    p = provider_with(", \"remote\": true", "");
    p2 = provider_with(", \"remote\": true", "");
    sb = start_image(p);
    o = sbx_pty_opts_new();
    TAP_OK(sbx_pty_opts_set_size(o, 21, 77));
    pt = NULL;
    TAP_OK(sbx_pty_open(sb, o, &pt, &e_));
    sbx_pty_opts_free(o);
    len = 0;
    TAP_OK(sbx_pty_write(pt, "stty size; echo MARK-$((60+2)); exit 6\n", 39, &e_));
    pty_until(pt, SBX_STREAM_STDOUT, buf, sizeof(buf), &len, "MARK-62");
    TAP_CONTAINS(buf, "21 77");
    TAP_OK(sbx_pty_wait(pt, -1, &code, &e_));
    TAP_EQ_INT(code, 6);
    sbx_pty_free(pt);
    r = NULL;
    TAP_OK(sbx_sandbox_pty_exec(sb, "tty; exit 7", NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 7);
    TAP_CONTAINS(stdout_of(r), "/dev/pts/");
    sbx_exec_result_free(r);
    o = sbx_pty_opts_new();
    TAP_OK(sbx_pty_opts_set_command(o, "read x; echo remote:$x; exit 8"));
    pr = NULL;
    TAP_OK(sbx_proc_start(sb, o, &pr, &e_));
    sbx_pty_opts_free(o);
    id = sbx_proc_id(pr);
    sbx_proc_free(pr); /* it runs on in the box's init, past this connection */
    /* Attached again through another provider's handle (its own relay). */
    c = connect_to(p2, sb);
    pr = NULL;
    TAP_OK(sbx_proc_attach(c, id, 0, 0, &pr, &e_));
    TAP_OK(sbx_proc_write(pr, "xyz\n", 4, &e_));
    TAP_OK(sbx_proc_wait(pr, -1, &code, &e_));
    TAP_EQ_INT(code, 8);
    len = 0;
    proc_read_all(pr, buf, sizeof(buf), &len);
    TAP_CONTAINS(buf, "remote:xyz");
    sbx_proc_free(pr);
    stop_free(c);
    stop_free(sb);
    sbx_provider_free(p2);
    sbx_provider_free(p);
}

/* The sbx CLI of this build (build/sbx), or a skip. */
/* `rel` in this binary's build tree (build/, build/asan, ...): it is B/tests/integration/. */
static const char *in_build(char *path, size_t len, const char *rel)
{
    char exe[900];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        TAP_FAIL("readlink: %s", strerror(errno));
    exe[n] = 0;
    for (int i = 0; i < 3; i++)
        *strrchr(exe, '/') = 0;
    snprintf(path, len, "%s/%s", exe, rel);
    return path;
}

static const char *sbx_cli(void)
{
    static char path[1024];
    if (access(in_build(path, sizeof(path), "sbx"), X_OK) != 0)
        TAP_SKIP("build/sbx is not built");
    return path;
}

/* The provider-neutral suite of the same build (the sanitized one under check-asan). */
static const char *suite_bin(void)
{
    static char path[1024];
    if (access(in_build(path, sizeof(path), "tests/integration/test_provider_suite"), X_OK) != 0)
        TAP_FAIL("%s is not built (make tests)", path);
    return path;
}

/*
 * `sbx port-forward` into a docker box with no network (loopback only): a
 * busybox httpd bound in the box is fetched from the host through the
 * agent; Ctrl-C ends it. Also `sbx exec -d` and `sbx top` (background
 * processes through the CLI).
 */
static void test_port_forward(void)
{
    need_engine();
    const char *bin = sbx_cli();
    /* Both paths: the remote one relays each connection through an exec session. */
    for (int remote = 0; remote < 2; remote++) {
        char out[8192], cmd[4096], id[128];
        snprintf(cmd, sizeof(cmd),
                 "%s create --provider '{\"docker\": {\"host\": \"unix://%s/docker.sock\", "
                 "\"remote\": %s, \"create\": {\"network\": \"none\"}}}' --image " IMAGE,
                 bin, dir, remote ? "true" : "false");
        TAP_EQ_INT(run_cmd(out, sizeof(out), "%s", cmd), 0);
        snprintf(id, sizeof(id), "%.*s", (int)strcspn(out, "\n"), out);
        TAP_TRUE(!strncmp(id, "sbx-", 4));
        snprintf(cmd, sizeof(cmd), "inspect -f '{{len .HostConfig.Binds}}' %s", id);
        TAP_EQ_INT(docker(out, sizeof(out), cmd), 0);
        TAP_EQ_STR(out, remote ? "0" : "2"); /* the remote path mounts nothing of here */
        TAP_EQ_INT(run_cmd(out, sizeof(out),
                           "%s exec -d %s -- sh -c 'mkdir -p /w && echo from-the-box > /w/f && "
                           "exec httpd -f -p 127.0.0.1:8000 -h /w'",
                           bin, id),
                   0);
        TAP_TRUE(atoi(out) > 0);
        TAP_EQ_INT(run_cmd(out, sizeof(out), "%s top %s", bin, id), 0);
        TAP_CONTAINS(out, "httpd");
        int pfd[2];
        TAP_EQ_INT(pipe2(pfd, O_CLOEXEC), 0);
        pid_t pf = fork();
        if (pf == 0) {
            dup2(pfd[1], 1);
            dup2(pfd[1], 2);
            execl(bin, "sbx", "port-forward", id, "0:8000", (char *)NULL);
            _exit(127);
        }
        close(pfd[1]);
        char *got = read_fd_until(pfd[0], " -> 8000\n", 60);
        const char *f = strstr(got, "Forwarding from 127.0.0.1:");
        TAP_TRUE(f != NULL);
        int port = atoi(f + strlen("Forwarding from 127.0.0.1:"));
        free(got);
        TAP_TRUE(port > 0);
        TAP_EQ_INT(run_cmd(out, sizeof(out),
                           "curl -s --max-time 10 --retry 20 --retry-delay 0 --retry-connrefused "
                           "http://127.0.0.1:%d/f",
                           port),
                   0);
        TAP_EQ_STR(out, "from-the-box\n");
        TAP_EQ_INT(kill(pf, SIGINT), 0);
        int st = 0;
        TAP_EQ_INT(waitpid(pf, &st, 0), pf);
        TAP_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 130);
        close(pfd[0]);
        TAP_EQ_INT(run_cmd(out, sizeof(out), "%s stop %s", bin, id), 0);
        no_container("name", id);
    }
}

/*
 * agent: false: the reference's container (keepalive, --init), commands
 * through the engine's exec API with the reference's sentinels, files
 * through its archive API (parents made, mode kept, links followed only
 * inside the box, directories refused), no PTYs; connect knows such a box
 * by its label; provider_options picks it per box.
 */
static void test_noagent(void)
{
    need_engine();
    sbx_provider *p = provider_with(", \"agent\": false", "");
    sbx_sandbox *sb = start_env_box(p);

    check_exec_basics(sb);
    /* A signal: 128+N, as the engine reports it. */
    TAP_EQ_INT(rc_of(sb, "kill -TERM $$"), 128 + 15);
    /* The timeout sentinel, with what came before it. */
    sbx_exec_result *r = timed_out(sb, "echo partial; sleep 30", 0.5);
    TAP_EQ_STR(stdout_of(r), "partial\n");
    TAP_CONTAINS(sbx_exec_result_stderr(r, NULL), "docker command timed out after 0.5s");
    sbx_exec_result_free(r);

    /* The reference's container: no agent, its keepalive, the engine's init. */
    char out[4096], args[1024];
    snprintf(args, sizeof(args),
             "inspect -f '{{.HostConfig.Init}} {{len .HostConfig.Binds}} {{.Config.Entrypoint}} "
             "{{index .Config.Labels \"sbx.agent\"}}' %s",
             sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "true 0 [/bin/sh] false");

    /* Files: parents made, mode kept, relative to the workdir, onto a directory. */
    char src[1024], back[1024];
    snprintf(src, sizeof(src), "%s/in.sh", tap_tmpdir());
    snprintf(back, sizeof(back), "%s/back/out.sh", tap_tmpdir());
    TAP_EQ_INT(write_text(src, "#!/bin/sh\necho ran\n"), 0);
    chmod(src, 0750);
    TAP_OK(sbx_sandbox_upload(sb, src, "/opt/new/dir/run.sh", &e_));
    TAP_OK(sbx_sandbox_upload(sb, src, "rel/x.sh", &e_));
    TAP_OK(sbx_sandbox_upload(sb, src, "/etc", &e_));
    r = run(sb, "/opt/new/dir/run.sh; stat -c %a /opt/new/dir/run.sh; cat /tmp/rel/x.sh "
                "/etc/in.sh | wc -l",
            NULL);
    TAP_EQ_STR(stdout_of(r), "ran\n750\n4\n");
    sbx_exec_result_free(r);
    TAP_OK(sbx_sandbox_download(sb, "/opt/new/dir/run.sh", back, &e_));
    char *text = read_text(back);
    TAP_EQ_STR(text, "#!/bin/sh\necho ran\n");
    free(text);
    struct stat st;
    TAP_EQ_INT(stat(back, &st), 0);
    TAP_EQ_INT(st.st_mode & 07777, 0750);
    /* A link is followed inside the box (the engine resolves it there), never out. */
    sbx_exec_result_free(run(sb, "ln -s /opt/new/dir/run.sh /tmp/l; ln -s /etc /tmp/d", NULL));
    unlink(back);
    TAP_OK(sbx_sandbox_download(sb, "l", back, &e_));
    text = read_text(back);
    TAP_EQ_STR(text, "#!/bin/sh\necho ran\n");
    free(text);
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_download(sb, "/nope", back, &e), SBX_ENOENT);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_download(sb, "/tmp/d", back, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "directory");
    sbx_error_free(e);
    e = NULL;
    snprintf(src, sizeof(src), "%s/no-such-file", tap_tmpdir());
    TAP_EQ_INT(sbx_sandbox_upload(sb, src, "/tmp/x", &e), SBX_ENOENT);
    sbx_error_free(e);
    /* 3 MiB both ways. */
    snprintf(src, sizeof(src), "%s/big", tap_tmpdir());
    snprintf(back, sizeof(back), "%s/big.back", tap_tmpdir());
    TAP_EQ_INT(run_cmd(out, sizeof(out), "head -c 3145728 /dev/urandom > %s", src), 0);
    TAP_OK(sbx_sandbox_upload(sb, src, "/tmp/big", &e_));
    TAP_OK(sbx_sandbox_download(sb, "/tmp/big", back, &e_));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cmp %s %s", src, back), 0);

    /* No agent, no PTY: said so. */
    sbx_pty *pt = NULL;
    e = NULL;
    TAP_EQ_INT(sbx_pty_open(sb, NULL, &pt, &e), SBX_ENOTSUP);
    TAP_CONTAINS(sbx_error_message(e), "agent: false");
    sbx_error_free(e);

    /* A provider configured with the agent connects to it as it was made. */
    sbx_provider *p2 = provider("");
    sbx_sandbox *c = connect_to(p2, sb);
    r = run(c, "cat /tmp/rel/x.sh | wc -l", NULL);
    TAP_EQ_STR(stdout_of(r), "2\n");
    sbx_exec_result_free(r);
    stop_free(c);

    /* Removed behind sbx's back: the runtime sentinel. */
    snprintf(args, sizeof(args), "rm -f %s", sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    r = run(sb, "true", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "sandbox");
    sbx_exec_result_free(r);
    stop_free(sb);
    sbx_provider_free(p);

    /* Per box: provider_options {"agent": false} on a provider with the agent. */
    sbx_spec *spec = image_spec();
    TAP_OK(sbx_spec_set_provider_options(spec, "{\"agent\": false}", &e_));
    sb = start(p2, spec);
    snprintf(args, sizeof(args), "inspect -f '{{index .Config.Labels \"sbx.agent\"}}' %s",
             sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "false");
    r = run(sb, "echo ok", NULL);
    TAP_EQ_STR(stdout_of(r), "ok\n");
    sbx_exec_result_free(r);
    stop_free(sb);
    TAP_OK(sbx_spec_set_provider_options(spec, "{\"agent\": 1}", &e_));
    start_fails(p2, spec, SBX_EINVAL, "provider_options['agent']");
    sbx_spec_free(spec);
    sbx_provider_free(p2);
}

/* The config's image_rewrites (the reference's rewrite_image) name the image the engine gets. */
static void test_image_rewrites(void)
{
    need_engine();
    sbx_provider *p =
        provider_with(", \"image_rewrites\": [{\"from\": \"mirror.invalid/x/\", \"to\": \"\"}]", "");
    sbx_spec *spec = sbx_spec_new();
    sbx_spec_set_image(spec, "docker://mirror.invalid/x/" IMAGE);
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    char out[4096], args[512];
    snprintf(args, sizeof(args), "inspect -f '{{.Config.Image}}' %s", sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, IMAGE);
    stop_free(sb);
    sbx_provider_free(p);
}

/* A TTL: the agent ends the box when it passes, and the engine removes the container. */
static void test_ttl(void)
{
    need_engine();
    sbx_provider *p = provider("");
    sbx_spec *spec = image_spec();
    sbx_spec_set_ttl(spec, 1.2); /* rounded up to 2 s, as the reference's sleep */
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    char out[4096], args[512];
    snprintf(args, sizeof(args), "inspect -f '{{.HostConfig.AutoRemove}}' %s", sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "true");
    sbx_exec_result *r = run(sb, "echo alive", NULL);
    TAP_EQ_STR(stdout_of(r), "alive\n");
    sbx_exec_result_free(r);
    /* Waits for the end the TTL brings (the exec ends with the box: no timing asserted). */
    r = run(sb, "sleep 600", NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    sbx_exec_result_free(r);
    sbx_status st = SBX_STATUS_RUNNING;
    for (int i = 0; i < 600 && st != SBX_STATUS_STOPPED; i++) {
        TAP_OK(sbx_sandbox_status(sb, &st, &e_));
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    TAP_EQ_INT(st, SBX_STATUS_STOPPED);
    snprintf(args, sizeof(args), "ps -aq --filter name=%s", sbx_sandbox_id(sb));
    for (int i = 0; i < 600; i++) {
        TAP_EQ_INT(docker(out, sizeof(out), args), 0);
        if (!out[0])
            break;
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    TAP_EQ_STR(out, "");
    stop_free(sb);
    sbx_provider_free(p);
}

/* A provider with probe settings (the reference's `probe` section). */
static sbx_provider *probe_provider(const char *probe)
{
    char top[2048];
    snprintf(top, sizeof(top), ", \"probe\": {%s}", probe);
    return provider_with(top, "");
}

/* The reference's readiness probe, through the agent after its hello. */
static void test_probe(void)
{
    need_engine();
    /* Passes: the expected text in stdout, stable twice. */
    sbx_provider *p = probe_provider("\"command\": \"printf docker-sandbox-ready\", "
                                     "\"expected_stdout\": \"sandbox-ready\", "
                                     "\"stable_count\": 2");
    sbx_spec *spec = image_spec();
    sbx_spec_set_metadata(spec, "case", "probe");
    sbx_sandbox *sb = start(p, spec);
    stop_free(sb);
    sbx_provider_free(p);
    /* No deadline: one failure is fatal, and the box is gone. */
    p = probe_provider("\"command\": \"echo bad >&2; exit 3\"");
    start_fails(p, spec, SBX_EVERIFY, "failed readiness probe: return_code=3, stderr='bad'");
    no_container("label=case", "probe");
    char *list = NULL;
    TAP_OK(sbx_provider_list(p, NULL, &list, &e_));
    TAP_EQ_STR(list, "[]");
    free(list);
    sbx_provider_free(p);
    /* A deadline: retried (with the delay) until it passes... */
    p = probe_provider("\"command\": \"test -f /tmp/ok || { touch /tmp/ok; exit 1; }\", "
                       "\"deadline_s\": 30, \"stable_delay_s\": 0.05");
    sb = start(p, spec);
    stop_free(sb);
    sbx_provider_free(p);
    /* ...or fails when the deadline passes, saying so. */
    p = probe_provider("\"command\": \"exit 1\", \"deadline_s\": 0.3, "
                       "\"stable_delay_s\": 0.05");
    start_fails(p, spec, SBX_EVERIFY, "did not pass readiness probe within 0.3s: return_code=1");
    no_container("label=case", "probe");
    sbx_spec_free(spec);
    sbx_provider_free(p);
}

/*
 * For a test of the engine over tcp with TLS: skips where dockerd has no TLS
 * listener, points DOCKER_TLS_VERIFY and DOCKER_CERT_PATH at its
 * certificates, and writes into cfg (n bytes) the provider config
 * {"docker": {"host": "tcp://127.0.0.1:PORT", REST}}.
 */
static void need_tls(char *cfg, size_t n, const char *rest)
{
    need_engine();
    if (tls_port <= 0)
        TAP_SKIP("no TLS certificates (openssl) for dockerd's tcp listener");
    char certs[600];
    snprintf(certs, sizeof(certs), "%s/certs", dir);
    setenv("DOCKER_TLS_VERIFY", "1", 1);
    setenv("DOCKER_CERT_PATH", certs, 1);
    snprintf(cfg, n, "{\"docker\": {\"host\": \"tcp://127.0.0.1:%d\", %s}}", tls_port, rest);
}

/* The engine over tcp with TLS (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH); loopback counts as local. */
static void test_tls(void)
{
    char cfg[1024];
    need_tls(cfg, sizeof(cfg), "\"create\": {\"network\": \"none\"}");
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    sbx_spec *spec = image_spec();
    sbx_sandbox *sb = start(p, spec);
    sbx_exec_result *r = run(sb, "echo over tls", NULL);
    TAP_EQ_STR(stdout_of(r), "over tls\n");
    sbx_exec_result_free(r);
    status_is(sb, SBX_STATUS_RUNNING);
    stop_free(sb);
    sbx_provider_free(p);
    /* Without the client certificate the engine refuses, and the error says where. */
    unsetenv("DOCKER_TLS_VERIFY");
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d", tls_port);
    start_fails(p, spec, 0, want);
    sbx_spec_free(spec);
    sbx_provider_free(p);
}

/*
 * The remote path over tcp with TLS: the agent copied in through the
 * archive API and reached through one exec session per handle (no bind
 * mount of this machine). "remote": true forces it on a loopback engine.
 */
static void test_remote(void)
{
    char cfg[1024];
    need_tls(cfg, sizeof(cfg),
             "\"remote\": true, \"create\": {\"network\": \"none\", \"read_only\": true, "
             "\"host_config\": {\"Tmpfs\": {\"/tmp\": \"size=16m\"}}}");
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new(cfg, &p, &e_));
    sbx_spec *spec = image_spec();
    sbx_spec_set_env(spec, "K", "v");
    sbx_sandbox *sb = start(p, spec);
    sbx_spec_free(spec);
    run_is(sb, "echo $K; echo err >&2; exit 4", NULL, 4, "v\n", "err\n");
    /* No bind mount: the agent from the engine's agent volume, the socket dir its own tmpfs. */
    char out[4096], args[512];
    snprintf(args, sizeof(args),
             "inspect -f '{{len .HostConfig.Binds}} {{.HostConfig.Tmpfs}} {{.HostConfig.ReadonlyRootfs}}' %s",
             sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "0 map[/.sbx:size=64k,mode=0700 /tmp:size=16m] true");
    snprintf(args, sizeof(args),
             "inspect -f '{{range .Mounts}}{{.Type}} {{.Destination}} {{.RW}}{{end}}' %s",
             sbx_sandbox_id(sb));
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    TAP_EQ_STR(out, "volume /.sbx-bin false");
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_opts_set_timeout(o, 0.5);
    sbx_exec_opts_set_stdin(o, "in", 2);
    sbx_exec_result *r = run(sb, "cat; sleep 30", o);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 125);
    TAP_EQ_STR(sbx_exec_result_error_type(r), "timeout");
    sbx_exec_result_free(r);
    sbx_exec_opts_free(o);
    /* Files both ways, 3 MiB (several stream frames). */
    char src[1024], back[1024];
    snprintf(src, sizeof(src), "%s/big", tap_tmpdir());
    snprintf(back, sizeof(back), "%s/big.back", tap_tmpdir());
    TAP_EQ_INT(run_cmd(out, sizeof(out), "head -c 3145728 /dev/urandom > %s", src), 0);
    TAP_OK(sbx_sandbox_upload(sb, src, "/tmp/big", &e_));
    TAP_OK(sbx_sandbox_download(sb, "/tmp/big", back, &e_));
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cmp %s %s", src, back), 0);
    /* A terminal of its own over TLS: the relay's exec session goes through curl too. */
    r = NULL;
    TAP_OK(sbx_sandbox_pty_exec(sb, "echo tls-$((3*3)); exit 2", NULL, &r, &e_));
    TAP_EQ_INT(sbx_exec_result_return_code(r), 2);
    TAP_CONTAINS(stdout_of(r), "tls-9");
    sbx_exec_result_free(r);
    /* Another handle: its own exec session. */
    sbx_sandbox *c = connect_to(p, sb);
    r = run(c, "ls -l /tmp/big | awk '{print $5}'", NULL);
    TAP_EQ_STR(stdout_of(r), "3145728\n");
    sbx_exec_result_free(r);
    stop_free(c);
    status_is(sb, SBX_STATUS_RUNNING);
    stop_free(sb);
    /* The container is gone; the agent volume (one per agent build) stays for the next. */
    TAP_EQ_INT(docker(out, sizeof(out), "volume ls -q"), 0);
    TAP_CONTAINS(out, "sbx-agent-");
    TAP_EQ_INT(docker(out, sizeof(out), "volume ls -q | wc -l"), 0);
    TAP_EQ_STR(out, "1");
    sbx_provider_free(p);
}

/*
 * The remote path's agent volume: one per engine and agent build, shared
 * read-only by every box; a damaged one (a short sbx-agent) is not trusted
 * but filled again by the next create; a missing one is made and filled by
 * first creates at once from two providers without a box seeing a partial
 * agent.
 */
static void test_remote_agent_volume(void)
{
    need_engine();
    char out[4096], args[1024];
    const char *remote = ", \"remote\": true";
    sbx_provider *p = provider_with(remote, "");
    sbx_spec *spec = image_spec();
    sbx_sandbox *a = start(p, spec), *b = start(p, spec);
    TAP_EQ_INT(docker(out, sizeof(out), "volume ls -q --filter label=sbx.agent-volume=1"), 0);
    TAP_CONTAINS(out, "sbx-agent-");
    TAP_EQ_INT((int)strlen(out), 10 + 64);
    char vol[128];
    snprintf(vol, sizeof(vol), "%.127s", out);
    /* Read-only in the box: a box cannot change the agent of the others. */
    sbx_exec_result *r = run(a, "echo x > /.sbx-bin/sbx-agent; echo $?", NULL);
    TAP_TRUE(strcmp(stdout_of(r), "0\n") != 0);
    sbx_exec_result_free(r);
    r = run(b, "echo ok", NULL);
    TAP_EQ_STR(stdout_of(r), "ok\n");
    sbx_exec_result_free(r);
    stop_free(a);
    stop_free(b);
    sbx_provider_free(p);
    /* Damaged behind sbx's back: the next provider fills it again before using it. */
    snprintf(args, sizeof(args),
             "run --rm --network none -v %s:/v --entrypoint /bin/sh " IMAGE
             " -c 'echo short > /v/sbx-agent'",
             vol);
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    p = provider_with(remote, "");
    a = start(p, spec);
    r = run(a, "echo again", NULL);
    TAP_EQ_STR(stdout_of(r), "again\n");
    sbx_exec_result_free(r);
    r = run(a, "wc -c < /.sbx-bin/sbx-agent", NULL);
    TAP_TRUE(atoll(stdout_of(r)) > 100000);
    sbx_exec_result_free(r);
    stop_free(a);
    sbx_provider_free(p);
    /*
     * No volume at all, and first creates at once from two providers (two
     * locks, as two processes): each fills or waits, every box runs.
     */
    snprintf(args, sizeof(args), "volume rm %s", vol);
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    enum { N = 6 };
    sbx_provider *ps[2] = {provider_with(remote, ""), provider_with(remote, "")};
    sbx_sandbox *sb[N];
    sbx_future *f[N];
    for (int i = 0; i < N; i++) {
        TAP_OK(sbx_sandbox_new(ps[i % 2], spec, &sb[i], &e_));
        TAP_OK(sbx_sandbox_start_async(sb[i], NULL, &f[i], &e_));
    }
    for (int i = 0; i < N; i++) {
        TAP_OK(sbx_future_wait(f[i], -1, &e_));
        sbx_future_free(f[i]);
        r = run(sb[i], "echo up", NULL);
        TAP_EQ_STR(stdout_of(r), "up\n");
        sbx_exec_result_free(r);
    }
    for (int i = 0; i < N; i++)
        stop_free(sb[i]);
    sbx_provider_free(ps[0]);
    sbx_provider_free(ps[1]);
    TAP_EQ_INT(docker(out, sizeof(out), "volume ls -q --filter label=sbx.agent-volume=1"), 0);
    TAP_EQ_STR(out, vol);
    /*
     * gc: another build's agent volume goes; one a container still uses
     * stays (the engine refuses), and so does this build's.
     */
    /* Names of the shape gc takes: "sbx-agent-" and 64 hex digits. */
    static const char old1[] = "sbx-agent-0000000000000000000000000000000000000000000000000000000"
                               "00000000a",
                      old2[] = "sbx-agent-0000000000000000000000000000000000000000000000000000000"
                               "00000000b";
    snprintf(args, sizeof(args), "volume create --label sbx.agent-volume=1 %s", old1);
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    snprintf(args, sizeof(args), "volume create --label sbx.agent-volume=1 %s", old2);
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    snprintf(args, sizeof(args),
             "create --name sbx-test-holder --network none -v %s:/v " IMAGE " true", old2);
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    p = provider_with(remote, "");
    char *removed = NULL;
    TAP_OK(sbx_provider_gc(p, NULL, &removed, &e_));
    free(removed);
    sbx_provider_free(p);
    TAP_EQ_INT(docker(out, sizeof(out), "volume ls -q --filter label=sbx.agent-volume=1"), 0);
    TAP_CONTAINS(out, vol);
    TAP_CONTAINS(out, old2);
    TAP_TRUE(strstr(out, old1) == NULL);
    TAP_EQ_INT(docker(out, sizeof(out), "rm -f sbx-test-holder"), 0);
    snprintf(args, sizeof(args), "volume rm %s", old2);
    TAP_EQ_INT(docker(out, sizeof(out), args), 0);
    sbx_spec_free(spec);
}

/*
 * An image with a USER: commands without one run as it (as `docker exec`
 * does), on both paths, and through a handle connected by a provider
 * configured for the other path; the entrypoint too.
 */
static void test_image_user(void)
{
    need_engine();
    for (int remote = 0; remote < 2; remote++) {
        sbx_provider *p = provider_with(remote ? ", \"remote\": true" : ", \"remote\": false", "");
        sbx_provider *other =
            provider_with(remote ? ", \"remote\": false" : ", \"remote\": true", "");
        sbx_spec *spec = sbx_spec_new();
        sbx_spec_set_image(spec, IMAGE_USER);
        const char *const ep[] = {"sh", "-c", "id -u > /tmp/svc-uid; exec sleep 100000", NULL};
        sbx_spec_set_entrypoint(spec, ep);
        sbx_sandbox *sb = start(p, spec);
        sbx_spec_free(spec);
        sbx_exec_result *r = run(sb, "id -u; for i in $(seq 100); do [ -s /tmp/svc-uid ] && "
                                     "break; sleep 0.05; done; cat /tmp/svc-uid",
                                 NULL);
        TAP_EQ_STR(stdout_of(r), "1000\n1000\n");
        sbx_exec_result_free(r);
        sbx_exec_opts *o = sbx_exec_opts_new();
        sbx_exec_opts_set_user(o, "root");
        r = run(sb, "id -u", o);
        TAP_EQ_STR(stdout_of(r), "0\n");
        sbx_exec_result_free(r);
        sbx_exec_opts_free(o);
        sbx_sandbox *c = connect_to(other, sb);
        r = run(c, "id -u", NULL);
        TAP_EQ_STR(stdout_of(r), "1000\n");
        sbx_exec_result_free(r);
        stop_free(c);
        stop_free(sb);
        sbx_provider_free(other);
        sbx_provider_free(p);
    }
}

/*
 * No host and no DOCKER_HOST: the docker CLI's current context names the
 * engine (config.json's currentContext, or DOCKER_CONTEXT), with its own
 * TLS files for a tcp endpoint.
 */
static void test_context(void)
{
    need_engine();
    char out[8192];
    const char *t = tap_tmpdir();
    unsetenv("DOCKER_HOST");
    TAP_EQ_INT(
        run_cmd(out, sizeof(out),
                "set -e; c=%s/dcfg; mkdir -p $c; echo '{\"currentContext\": \"sbxctx\"}' > "
                "$c/config.json; h=$(printf sbxctx | sha256sum | cut -d' ' -f1); "
                "mkdir -p $c/contexts/meta/$h; echo '{\"Name\": \"sbxctx\", \"Endpoints\": "
                "{\"docker\": {\"Host\": \"unix://%s/docker.sock\"}}}' > "
                "$c/contexts/meta/$h/meta.json; "
                "h=$(printf sbxtls | sha256sum | cut -d' ' -f1); mkdir -p $c/contexts/meta/$h "
                "$c/contexts/tls/$h/docker; echo '{\"Name\": \"sbxtls\", \"Endpoints\": "
                "{\"docker\": {\"Host\": \"tcp://127.0.0.1:%d\"}}}' > "
                "$c/contexts/meta/$h/meta.json; "
                "if [ -d %s/certs ]; then cp %s/certs/ca.pem %s/certs/cert.pem %s/certs/key.pem "
                "$c/contexts/tls/$h/docker/; fi; "
                /* No CA: with SkipTLSVerify (the engine's certificate unchecked), and without. */
                "for n in sbxskip sbxnoca; do h=$(printf $n | sha256sum | cut -d' ' -f1); "
                "mkdir -p $c/contexts/meta/$h $c/contexts/tls/$h/docker; "
                "s=false; [ $n = sbxskip ] && s=true; echo \"{\\\"Name\\\": \\\"$n\\\", "
                "\\\"Endpoints\\\": {\\\"docker\\\": {\\\"Host\\\": "
                "\\\"tcp://127.0.0.1:%d\\\", \\\"SkipTLSVerify\\\": $s}}}\" > "
                "$c/contexts/meta/$h/meta.json; "
                "if [ -d %s/certs ]; then cp %s/certs/cert.pem %s/certs/key.pem "
                "$c/contexts/tls/$h/docker/; fi; done",
                t, dir, tls_port, dir, dir, dir, dir, tls_port, dir, dir, dir),
        0);
    char cfgdir[1024];
    snprintf(cfgdir, sizeof(cfgdir), "%s/dcfg", t);
    setenv("DOCKER_CONFIG", cfgdir, 1);
    const char *cfg = "{\"docker\": {\"create\": {\"network\": \"none\"}}}";
    const char *ctxs[] = {NULL, "sbxtls", "sbxskip"};
    for (int i = 0; i < 3; i++) {
        if (ctxs[i] && tls_port <= 0)
            continue;
        if (ctxs[i])
            setenv("DOCKER_CONTEXT", ctxs[i], 1);
        sbx_provider *p = NULL;
        TAP_OK(sbx_provider_new(cfg, &p, &e_));
        sbx_sandbox *sb = start_image(p);
        sbx_exec_result *r = run(sb, "echo by context", NULL);
        TAP_EQ_STR(stdout_of(r), "by context\n");
        sbx_exec_result_free(r);
        stop_free(sb);
        sbx_provider_free(p);
    }
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    /* No CA and no SkipTLSVerify: the engine's certificate does not verify, and the error says what to do. */
    if (tls_port > 0) {
        setenv("DOCKER_CONTEXT", "sbxnoca", 1);
        TAP_OK(sbx_provider_new(cfg, &p, &e_));
        sbx_spec *spec = image_spec();
        TAP_CONTAINS(start_fails(p, spec, 0, "did not verify"), "SkipTLSVerify");
        sbx_spec_free(spec);
        sbx_provider_free(p);
        p = NULL;
    }
    /* A context that is not there: the constructor says which. */
    setenv("DOCKER_CONTEXT", "sbx-no-such-context", 1);
    TAP_NE_INT(sbx_provider_new(cfg, &p, &e), SBX_OK);
    TAP_CONTAINS(sbx_error_message(e), "sbx-no-such-context");
    sbx_error_free(e);
}

/*
 * The provider-neutral suite (test_provider_suite's plugin slot) on this
 * engine; DOCKER_HOST for the CLI it runs (`sbx ls/stop/gc`).
 */
static void test_shared_suite(void)
{
    need_engine();
    const char *suite = suite_bin();
    static char out[1 << 16];
    int rc = run_cmd(out, sizeof(out),
                     "DOCKER_HOST=unix://%s/docker.sock SBX_SUITE_PLUGIN=docker "
                     "SBX_SUITE_PROVIDERS=docker "
                     "SBX_SUITE_CONFIG_docker='{\"host\": \"unix://%s/docker.sock\", \"image\": "
                     "\"" IMAGE "\", \"create\": {\"network\": \"none\"}}' "
                     "%s plugin 2>&1",
                     dir, dir, suite);
    if (rc != 0)
        TAP_FAIL("the shared suite failed on docker:\n%s", out);
    TAP_CONTAINS(out, "10 passed, 0 failed");
    /* Again with every box reached through an exec session (the remote path). */
    rc = run_cmd(out, sizeof(out),
                 "DOCKER_HOST=unix://%s/docker.sock SBX_SUITE_PLUGIN=docker "
                 "SBX_SUITE_PROVIDERS=docker "
                 "SBX_SUITE_CONFIG_docker='{\"host\": \"unix://%s/docker.sock\", \"image\": "
                 "\"" IMAGE "\", \"remote\": true, \"create\": {\"network\": \"none\"}}' "
                 "%s plugin 2>&1",
                 dir, dir, suite);
    if (rc != 0)
        TAP_FAIL("the shared suite failed on docker's remote path:\n%s", out);
    TAP_CONTAINS(out, "10 passed, 0 failed");
    /* And without the agent: the engine's exec and archive APIs. */
    rc = run_cmd(out, sizeof(out),
                 "DOCKER_HOST=unix://%s/docker.sock SBX_SUITE_PLUGIN=docker "
                 "SBX_SUITE_PROVIDERS=docker "
                 "SBX_SUITE_CONFIG_docker='{\"host\": \"unix://%s/docker.sock\", \"image\": "
                 "\"" IMAGE "\", \"agent\": false, \"create\": {\"network\": \"none\"}}' "
                 "%s plugin 2>&1",
                 dir, dir, suite);
    if (rc != 0)
        TAP_FAIL("the shared suite failed on docker with agent: false:\n%s", out);
    TAP_CONTAINS(out, "10 passed, 0 failed");
}

/*
 * Podman's Docker-compatible service (`podman system service`) on a
 * private socket and storage, with runc and ulimits at or under this
 * machine's hard limits (containers.conf: Podman's defaults are higher and
 * runc may not raise them here): the shared suite on both paths.
 */
static void test_podman(void)
{
    if (geteuid() != 0)
        TAP_SKIP("podman's rootful service needs root");
    char out[1 << 16];
    if (run_cmd(out, sizeof(out), "command -v podman && command -v docker") != 0)
        TAP_SKIP("podman is not installed (apt-get install podman)");
    tap_allow_fd_changes();
    const char *t = tap_tmpdir();
    char st[1024];
    snprintf(st, sizeof(st), "%s/state", t);
    setenv("SBX_STATE_DIR", st, 1);
    char conf[1024], sock[1024];
    snprintf(conf, sizeof(conf), "%s/containers.conf", t);
    snprintf(sock, sizeof(sock), "%s/podman.sock", t);
    TAP_EQ_INT(write_text(conf, "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", "
                                "\"nproc=1024:1024\"]\n"),
               0);
    pid_t pid = fork();
    if (pid == 0) {
        char root[1100], runroot[1100], url[1100], log[1100];
        snprintf(root, sizeof(root), "%s/root", t);
        snprintf(runroot, sizeof(runroot), "%s/runroot", t);
        snprintf(url, sizeof(url), "unix://%s", sock);
        snprintf(log, sizeof(log), "%s/podman.log", t);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setenv("CONTAINERS_CONF", conf, 1);
        setsid();
        execlp("podman", "podman", "--root", root, "--runroot", runroot, "--runtime", "runc",
               "--cgroup-manager", "cgroupfs", "--events-backend", "file", "system", "service",
               "--time=0", url, (char *)NULL);
        _exit(127);
    }
    TAP_TRUE(pid > 0);
    bool up = false;
    for (int i = 0; i < 300 && !up; i++) {
        up = run_cmd(out, sizeof(out), "DOCKER_HOST=unix://%s docker version >/dev/null", sock) ==
             0;
        if (!up) {
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    int rc = -1;
    static char suite[1 << 16];
    suite[0] = 0;
    if (up &&
        run_cmd(out, sizeof(out),
                "scripts/make-test-rootfs.sh %s/base.tar && DOCKER_HOST=unix://%s docker import "
                "%s/base.tar " IMAGE,
                t, sock, t) == 0) {
        rc = 0;
        for (int remote = 0; remote < 2 && rc == 0; remote++)
            rc = run_cmd(suite, sizeof(suite),
                         "DOCKER_HOST=unix://%s SBX_SUITE_PLUGIN=docker SBX_SUITE_PROVIDERS=docker "
                         "SBX_SUITE_CONFIG_docker='{\"host\": \"unix://%s\", \"image\": "
                         "\"" IMAGE "\", \"remote\": %s, \"create\": {\"network\": "
                         "\"none\"}}' %s plugin 2>&1",
                         sock, sock, remote ? "true" : "false", suite_bin());
    }
    /* Every container of ours, then the service (by its pid), then its layers. */
    run_cmd(out, sizeof(out), "DOCKER_HOST=unix://%s docker ps -aq | DOCKER_HOST=unix://%s xargs "
                              "-r docker rm -f",
            sock, sock);
    kill(pid, SIGTERM);
    int wst;
    waitpid(pid, &wst, 0);
    /*
     * Podman keeps an exec session's conmon for a while after it ends
     * (--exit-delay): ours are found by this test's own storage path.
     */
    run_cmd(out, sizeof(out), "pgrep -f -- '-b %s/root/' | xargs -r kill", t);
    /*
     * Their exit commands (`podman container cleanup`, run as they end) may
     * mount the storage again: until neither a process nor a mount of this
     * test's storage is left.
     */
    for (int i = 0; i < 100; i++) {
        run_cmd(out, sizeof(out),
                "grep -o ' %s/[^ ]*' /proc/self/mounts | sort -r | xargs -r -n1 umount -l", t);
        if (run_cmd(out, sizeof(out), "pgrep -f -- '%s/root' || grep -q ' %s/' /proc/self/mounts",
                    t, t) != 0)
            break;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (!up)
        TAP_FAIL("podman system service did not answer; see its log in %s", t);
    if (rc != 0)
        TAP_FAIL("the shared suite failed on podman:\n%s", suite);
    TAP_CONTAINS(suite, "10 passed, 0 failed");
}

/* --- the private dockerd ------------------------------------------------------------- */

/*
 * A CA, a server certificate for 127.0.0.1 and a client certificate (the
 * names DOCKER_CERT_PATH expects), and a free loopback port: dockerd then
 * also serves TLS on tcp. Without openssl the TLS case skips.
 */
static void make_tls(void)
{
    char out[8192];
    int rc = run_cmd(
        out, sizeof(out),
        "set -e; d=%s/certs; mkdir -p $d; cd $d; "
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=sbx-test-ca "
        "-keyout ca-key.pem -out ca.pem; "
        "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server-key.pem "
        "-out server.csr; printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' "
        "> server.ext; openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem "
        "-CAcreateserial -days 1 -extfile server.ext -out server-cert.pem; "
        "openssl req -newkey rsa:2048 -nodes -subj /CN=client -keyout key.pem -out client.csr; "
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext; "
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 1 "
        "-extfile client.ext -out cert.pem; "
        "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); "
        "print(s.getsockname()[1])'",
        dir);
    if (rc == 0) {
        /* The port is the last line. */
        char *last = out + strlen(out);
        while (last > out && last[-1] == '\n')
            *--last = 0;
        char *l = strrchr(out, '\n');
        tls_port = atoi(l ? l + 1 : out);
    }
}

/* Starts dockerd on the private roots (its own session: it outlives a test child). */
static pid_t spawn_dockerd(void)
{
    char sock[600], data[600], exec_root[600], pidf[600], log[600];
    snprintf(sock, sizeof(sock), "unix://%s/docker.sock", dir);
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(exec_root, sizeof(exec_root), "%s/exec", dir);
    snprintf(pidf, sizeof(pidf), "%s/pid", dir);
    snprintf(log, sizeof(log), "%s/dockerd.log", dir);
    char tcp[64], ca[600], cert[600], key[600];
    snprintf(tcp, sizeof(tcp), "tcp://127.0.0.1:%d", tls_port);
    snprintf(ca, sizeof(ca), "%s/certs/ca.pem", dir);
    snprintf(cert, sizeof(cert), "%s/certs/server-cert.pem", dir);
    snprintf(key, sizeof(key), "%s/certs/server-key.pem", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setsid();
        if (tls_port > 0)
            execlp("dockerd", "dockerd", "--host", sock, "--host", tcp, "--tlsverify",
                   "--tlscacert", ca, "--tlscert", cert, "--tlskey", key, "--data-root", data,
                   "--exec-root", exec_root, "--pidfile", pidf, "--bridge", "none",
                   "--iptables=false", (char *)NULL);
        else
            execlp("dockerd", "dockerd", "--host", sock, "--data-root", data, "--exec-root",
                   exec_root, "--pidfile", pidf, "--bridge", "none", "--iptables=false",
                   (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits up to 30 s for the engine to answer; false when it does not (or `pid` exited). */
static bool engine_up(pid_t pid)
{
    char out[4096];
    for (int i = 0; i < 300; i++) {
        if (docker(out, sizeof(out), "info --format '{{.ServerVersion}}'") == 0)
            return true;
        int st;
        if (pid > 0 && waitpid(pid, &st, WNOHANG) == pid)
            return false;
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

/* The running dockerd's pid, from its pidfile (a test may have restarted it). */
static pid_t dockerd_pid(void)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/pid", dir);
    char *t = read_text(path);
    pid_t pid = t ? (pid_t)strtol(t, NULL, 10) : -1;
    free(t);
    return pid;
}

/* SIGTERM, then SIGKILL after 30 s; waits until it is gone (reaping it when it is ours). */
static void end_dockerd(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    for (int i = 0; i < 600; i++) {
        int st;
        /*
         * A test runs in a child of the process that started dockerd, so it
         * cannot reap it, and kill(pid, 0) keeps succeeding on the zombie (the
         * restart test waited the whole minute for it): a zombie is gone too.
         */
        if (waitpid(pid, &st, WNOHANG) == pid || kill(pid, 0) < 0 || !proc_runs(pid))
            return;
        if (i == 300)
            kill(pid, SIGKILL);
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void start_dockerd(void)
{
    if (geteuid() != 0) {
        snprintf(why_not, sizeof(why_not), "dockerd needs root");
        return;
    }
    char out[4096];
    if (run_cmd(out, sizeof(out), "command -v dockerd && command -v docker") != 0) {
        snprintf(why_not, sizeof(why_not), "dockerd or docker is not installed (docker.io)");
        return;
    }
    char tmpl[] = "/tmp/sbx-test-docker.XXXXXX";
    if (!mkdtemp(tmpl)) {
        snprintf(why_not, sizeof(why_not), "cannot make a temporary directory");
        return;
    }
    snprintf(dir, sizeof(dir), "%s", tmpl);
    make_tls();
    dockerd = spawn_dockerd();
    if (!engine_up(dockerd)) {
        snprintf(why_not, sizeof(why_not),
                 "dockerd did not start or answer within 30 s; see %.400s/dockerd.log", dir);
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "scripts/make-test-rootfs.sh %s/base.tar", dir);
    if (run_cmd(out, sizeof(out), "%s", cmd) != 0) {
        snprintf(why_not, sizeof(why_not), "cannot make the test rootfs: %.200s", out);
        return;
    }
    snprintf(cmd, sizeof(cmd), "import %s/base.tar " IMAGE, dir);
    if (docker(out, sizeof(out), cmd) != 0)
        snprintf(why_not, sizeof(why_not), "docker import failed: %.200s", out);
    /* The same with a USER, as images that do not run as root have. */
    snprintf(cmd, sizeof(cmd), "import --change 'USER 1000' %s/base.tar " IMAGE_USER, dir);
    if (!why_not[0] && docker(out, sizeof(out), cmd) != 0)
        snprintf(why_not, sizeof(why_not), "docker import failed: %.200s", out);
}

static void stop_dockerd(void)
{
    char out[4096];
    if (dir[0]) {
        /* Every container of ours first; then dockerd, which unmounts its layers as it ends. */
        run_cmd(out, sizeof(out),
                "export DOCKER_HOST=unix://%s/docker.sock; docker ps -aq | xargs -r docker rm -f",
                dir);
        pid_t now = dockerd_pid();
        end_dockerd(now);
        if (dockerd > 0 && dockerd != now)
            end_dockerd(dockerd);
        /* A failed test's boxes' socket-directory tmpfs (their tests' directories are gone). */
        run_cmd(out, sizeof(out),
                "awk '$1 == \"sbx-docker\" && $2 ~ /^\\/tmp\\/sbx-test-.*\\/state\\/docker\\/boxes\\// "
                "{print $2}' /proc/self/mounts | xargs -r -n1 umount -l");
        /* Whatever dockerd left mounted under its roots (a crash), then the files. */
        run_cmd(out, sizeof(out),
                "grep -o ' %s[^ ]*' /proc/self/mounts | sort -r | xargs -r -n1 umount -l", dir);
        rm_rf(dir);
    }
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP_T(test_exec, 120),         TAP_T(test_files, 120),        TAP_T(test_pause, 120),
        TAP_T(test_default_profile, 120), TAP_T(test_mapping, 120), TAP_T(test_half_created, 120),
        TAP_T(test_missing_image, 120), TAP_T(test_pull_progress, 120),
        TAP_T(test_bad_config, 120),
        TAP_T(test_create_deadline, 120),
        TAP_T(test_serialize_connect, 120), TAP_T(test_removed_behind_back, 120),
        TAP_T(test_list_stop_id, 120), TAP_T(test_unrecorded, 120),
        TAP_T(test_entrypoint, 120),  TAP_T(test_logs, 120),
        TAP_T(test_logs_follow, 120),
        TAP_T(test_many, 600),         TAP_T(test_engine_restart, 300),
        TAP_T(test_tls, 120),          TAP_T(test_remote, 120),
        TAP_T(test_remote_agent_volume, 120),
        TAP_T(test_image_user, 120),   TAP_T(test_context, 120),
        TAP_T(test_probe, 120),        TAP_T(test_pty_and_procs, 120),
        TAP_T(test_port_forward, 120), TAP_T(test_noagent, 120),
        TAP_T(test_image_rewrites, 120),
        TAP_T(test_endpoint, 120),     TAP_T(test_ttl, 120),          TAP_T(test_shared_suite, 600), TAP_T(test_podman, 600),
    };
    start_dockerd();
    int rc = tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
    stop_dockerd();
    return rc;
}
