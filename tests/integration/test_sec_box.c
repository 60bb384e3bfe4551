/*
 * The linux provider's box boundary, attacked (issue #8): what a box can
 * write and where it lands on the host, who can reach a box's agent, which
 * sockets a box may open, how many descriptors it gets, and what of the host
 * a box on the "none" image can read. Each test plays the box (and, where
 * the attack needs one, an unprivileged host user) and checks the host.
 *
 * Probes that must run inside a box are this binary, uploaded into a "none"
 * box (whose /usr and /lib are the host's, so it runs there) and started
 * with SBX_SEC_BOX_PROBE set: see probe_main().
 */
#include "tap.h"
#include "common.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "proto/proto.h"
#include "providers/linux/linux.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <sys/wait.h>

#define diag(...) (printf("# " __VA_ARGS__), printf("\n"))

static char self_path[4096] = "/proc/self/exe";

/* --- probes (run inside boxes, or as another user) ------------------------ */

/*
 * Connects to the agent socket at `path` and says the protocol's hello:
 * prints "answered" when the agent says hello back, else why not.
 */
static int probe_agent(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        printf("connect: %s\n", strerror(errno));
        return 0;
    }
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx_msg_hello h = {SBX_PROTO_MAGIC, SBX_PROTO_MIN_VERSION, SBX_PROTO_VERSION,
                       SBX_PROTO_MAX_PAYLOAD, (char *)"probe"};
    sbx__msg_hello_encode(&b, &h);
    sbx__pbuf_finish(&b, SBX_MSG_HELLO, 0);
    ssize_t w = send(fd, b.data, b.len, MSG_NOSIGNAL);
    sbx__pbuf_free(&b);
    char buf[256];
    /* The agent answers a hello at once, or closes a peer it refuses: no wait on a clock. */
    ssize_t n = w > 0 ? recv(fd, buf, sizeof(buf), 0) : -1;
    bool closed = n == 0 || (n < 0 && (errno == EPIPE || errno == ECONNRESET));
    printf("%s\n", n > 0 ? "answered" : closed ? "closed" : strerror(errno));
    close(fd);
    return 0;
}

/*
 * For each family given, tries the usual socket types: "F ok" when one
 * works, else "F EAFNOSUPPORT" when every type was refused with it, else
 * "F <the other errno's name>".
 */
static int probe_sockets(const char *list)
{
    static const int types[] = {SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET, SOCK_RAW};
    char *copy = strdup(list), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int fam = (int)strtol(t, NULL, 10), other = 0;
        bool ok = false;
        for (size_t i = 0; i < SBX_ARRAY_SIZE(types) && !ok; i++) {
            int s = socket(fam, types[i] | SOCK_CLOEXEC, 0);
            if (s >= 0) {
                ok = true;
                close(s);
            } else if (errno != EAFNOSUPPORT && !other) {
                other = errno;
            }
        }
        int sv[2];
        if (!ok && fam != AF_UNIX && socketpair(fam, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
            ok = true;
            close(sv[0]);
            close(sv[1]);
        }
        printf("%d %s\n", fam, ok ? "ok" : other ? strerrorname_np(other) : "EAFNOSUPPORT");
    }
    free(copy);
    return 0;
}

/* SBX_SEC_BOX_PROBE=agent:PATH | sockets:F,F,... */
static int probe_main(const char *what)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (!strncmp(what, "agent:", 6))
        return probe_agent(what + 6);
    if (!strncmp(what, "sockets:", 8))
        return probe_sockets(what + 8);
    fprintf(stderr, "unknown probe %s\n", what);
    return 2;
}

/* --- helpers ---------------------------------------------------------------- */

/* Runs `cmd` as `user` (NULL: root); its stdout+stderr in a static buffer, rc in *rc. */
static const char *run_as(sbx_sandbox *sb, const char *user, const char *cmd, int *rc)
{
    static char buf[1 << 16];
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (user)
        sbx_exec_opts_set_user(o, user);
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_exec(sb, cmd, o, &r, &e) != SBX_OK)
        TAP_FAIL("exec %s: %s", cmd, sbx_error_message(e));
    sbx_exec_opts_free(o);
    const char *out = sbx_exec_result_stdout(r, NULL), *er = sbx_exec_result_stderr(r, NULL);
    snprintf(buf, sizeof(buf), "%s%s", out ? out : "", er ? er : "");
    if (rc)
        *rc = sbx_exec_result_return_code(r);
    sbx_exec_result_free(r);
    return buf;
}

/* This binary, uploaded into the box as /tmp/probe. */
static void upload_probe(sbx_sandbox *sb)
{
    sbx_error *e = NULL;
    if (sbx_sandbox_upload(sb, self_path, "/tmp/probe", &e) != SBX_OK)
        TAP_FAIL("upload the probe: %s", sbx_error_message(e));
}

static void box_dir_of(sbx_sandbox *sb, char *out, size_t n)
{
    snprintf(out, n, "%s/boxes/%s", state_dir, sbx_sandbox_id(sb));
}

static long long file_bytes(const char *out, const char *name)
{
    const char *p = strstr(out, name);
    return p ? strtoll(p + strlen(name), NULL, 10) : 0;
}

/* --- item 2: nothing a box writes gives privilege on the host ---------------- */

static void box_writes_never_privileged(const char *cfg)
{
    need_boxes();
    /* umask 000 in the creator: the worst case for every mode sbx leaves to it. */
    mode_t old = umask(0);
    sbx_provider *p = provider(cfg);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *sb = start(p, s);
    umask(old);
    /* The box plants a setuid-root copy of id wherever it can write, the agent's dir first. */
    run_as(sb, NULL,
           "for d in /run/sbx /dev /dev/shm /tmp /; do mkdir -p $d 2>/dev/null; "
           "cp /usr/bin/id $d/rootid 2>/dev/null && chmod 4755 $d/rootid; done; true",
           NULL);
    char dir[700], run[800], sock[800], out[4096];
    box_dir_of(sb, dir, sizeof(dir));
    snprintf(run, sizeof(run), "%s/run", dir);
    snprintf(sock, sizeof(sock), "%s/run/agent.sock", dir);
    /* An unprivileged host user tries what the box planted: never euid 0. */
    run_cmd(out, sizeof(out),
            "setpriv --reuid 65534 --regid 65534 --clear-groups %s/rootid -u 2>&1", run);
    TAP_TRUE(strcmp(out, "0\n") != 0);
    /* No setuid file of the box's anywhere under its directory on the host. */
    TAP_EQ_INT(run_cmd(out, sizeof(out), "find %s -perm /6000 | wc -l", dir), 0);
    TAP_EQ_INT(strtol(out, NULL, 10), 0);
    /* The box directory and the socket's are host root's alone; the socket is 0600. */
    struct stat st;
    TAP_EQ_INT(stat(dir, &st), 0);
    TAP_EQ_INT(st.st_uid, 0);
    TAP_EQ_INT(st.st_mode & 07777, 0700);
    TAP_EQ_INT(stat(run, &st), 0);
    TAP_EQ_INT(st.st_uid, 0);
    TAP_EQ_INT(st.st_mode & 07777, 0700);
    TAP_EQ_INT(stat(sock, &st), 0);
    TAP_TRUE(S_ISSOCK(st.st_mode));
    TAP_EQ_INT(st.st_mode & 07777, 0600);
    /*
     * Inside the box, every mount of a regular filesystem it can write is
     * nosuid and nodev, and noexec unless it is the box's own root.
     */
    const char *mi = out_of(sb, "cat /proc/self/mountinfo");
    char *copy = strdup(mi), *save = NULL;
    int writable = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char mnt[512], opts[512], fstype[64];
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %*s %511s %511s", mnt, opts) != 2 ||
            sscanf(sep + 3, "%63s", fstype) != 1)
            continue;
        if (strncmp(opts, "rw", 2) != 0 || !strcmp(fstype, "proc") || !strcmp(fstype, "devpts") ||
            !strcmp(fstype, "devtmpfs") || !strcmp(fstype, "cgroup") || !strcmp(fstype, "cgroup2"))
            continue;
        writable++;
        if (!strstr(opts, "nodev") || !strstr(opts, "nosuid"))
            TAP_FAIL("%s (%s) is writable in the box without nosuid,nodev: %s", mnt, fstype, line);
        if (strcmp(mnt, "/") != 0 && !strstr(opts, "noexec"))
            TAP_FAIL("%s (%s) is writable in the box without noexec: %s", mnt, fstype, line);
    }
    free(copy);
    TAP_TRUE(writable >= 3); /* /, /dev, /dev/shm at least */
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

static void test_box_writes_never_privileged_on_host(void)
{
    box_writes_never_privileged(NULL);
}

/* The same with a user namespace: box root is then an unprivileged host uid. */
static void test_userns_box_writes_never_privileged_on_host(void)
{
    box_writes_never_privileged("{\"userns\": true}");
}

/* --- item 6: one disk limit for every place a box can write ------------------ */

static void test_disk_limit_bounds_every_writable_place(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_disk_gib(s, 1);
    sbx_sandbox *sb = start(p, s);
    char dir[700], out[4096];
    box_dir_of(sb, dir, sizeof(dir));
    struct statvfs before, after;
    TAP_EQ_INT(statvfs(state_dir, &before), 0);
    /*
     * 1100 MiB tried in each place the box can write, the agent's directory
     * included: only the first place can fill up to the limit, the others
     * find it full.
     */
    const char *o =
        run_as(sb, NULL,
               "for d in /run/sbx /dev/shm /dev /tmp /root; do "
               "  [ -d $d ] && dd if=/dev/zero of=$d/fill bs=1M count=1100 2>/dev/null; "
               "  printf '%s=%s\\n' $d $(stat -c %s $d/fill 2>/dev/null || echo 0); "
               "done",
               NULL);
    long long total = 0;
    static const char *const places[] = {"/run/sbx=", "/dev/shm=", "/dev=", "/tmp=", "/root="};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(places); i++)
        total += file_bytes(o, places[i]);
    diag("written in the box: %lld bytes (%s)", total, o);
    TAP_TRUE(total > 512LL << 20); /* the limit was reachable */
    TAP_TRUE(total <= 1LL << 30);
    /* Nothing of it landed on the host's disk: not under the box's directory, not anywhere. */
    TAP_EQ_INT(run_cmd(out, sizeof(out), "du -sk %s | cut -f1", dir), 0);
    TAP_TRUE(strtol(out, NULL, 10) < 1024);
    TAP_EQ_INT(statvfs(state_dir, &after), 0);
    long long drop =
        ((long long)before.f_bavail - (long long)after.f_bavail) * (long long)before.f_frsize;
    diag("host free space dropped by %lld bytes", drop);
    TAP_TRUE(drop < 1LL << 30);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* --- item 7: the host reaches only the box it names ------------------------- */

static sbx_sandbox *connect_fresh(sbx_provider **pp, sbx_sandbox *sb, sbx_error **e)
{
    char *desc = NULL;
    TAP_OK(sbx_sandbox_serialize(sb, NULL, &desc, &e_));
    *pp = provider(NULL); /* a provider of its own: a fresh connection, not a pooled one */
    sbx_sandbox *c = NULL;
    if (sbx_sandbox_connect(*pp, desc, &c, e) != SBX_OK)
        c = NULL;
    free(desc);
    return c;
}

static void test_socket_swap_cannot_redirect_to_another_box(void)
{
    need_boxes();
    sbx_provider *p = provider("{\"max_agent_connections\": 1}");
    sbx_spec *sa = sbx_spec_new(), *sbs = sbx_spec_new();
    sbx_spec_set_env(sa, "SECRET", "secret-of-a");
    sbx_spec_set_env(sbs, "SECRET", "secret-of-b");
    sbx_sandbox *a = start(p, sa);
    sbx_sandbox *b = start(p, sbs);
    char adir[700], bdir[700], cmd[2400];
    box_dir_of(a, adir, sizeof(adir));
    box_dir_of(b, bdir, sizeof(bdir));
    /* 1. Box A swaps its agent's socket for a link to box B's, as far as it can. */
    snprintf(cmd, sizeof(cmd),
             "rm -f /run/sbx/agent.sock; ln -s %s/run/agent.sock /run/sbx/agent.sock; true", bdir);
    run_as(a, NULL, cmd, NULL);
    sbx_provider *p2 = NULL;
    sbx_error *e = NULL;
    sbx_sandbox *c = connect_fresh(&p2, a, &e);
    if (!c)
        TAP_FAIL("connect to A after its attempt: %s", sbx_error_message(e));
    char want[256];
    snprintf(want, sizeof(want), "secret-of-a %s\n", sbx_sandbox_id(a));
    TAP_EQ_STR(run_as(c, NULL, "echo $SECRET $(hostname)", NULL), want);
    sbx_sandbox_free(c);
    sbx_provider_free(p2);
    /*
     * 2. Should A's socket path ever lead elsewhere (here host root swaps it),
     *    the client refuses the peer: it is not A's agent.
     */
    char asock[800], bsock[800], moved[820];
    snprintf(asock, sizeof(asock), "%s/run/agent.sock", adir);
    snprintf(bsock, sizeof(bsock), "%s/run/agent.sock", bdir);
    snprintf(moved, sizeof(moved), "%s.real", asock);
    TAP_EQ_INT(rename(asock, moved), 0);
    TAP_EQ_INT(symlink(bsock, asock), 0);
    c = connect_fresh(&p2, a, &e);
    if (c) {
        const char *o = run_as(c, NULL, "echo $SECRET", NULL);
        TAP_FAIL("a connection to A ran in another box: %s", o);
    }
    TAP_CONTAINS(sbx_error_message(e), "not the box's agent");
    sbx_error_free(e);
    e = NULL;
    sbx_provider_free(p2);
    /*
     * 3. The same through the pool: A's connection was evicted (a pool of
     *    one, B used last), so A's next exec reconnects, and is refused.
     */
    run_as(b, NULL, "true", NULL);
    sbx_exec_result *r = NULL;
    if (sbx_sandbox_exec(a, "echo $SECRET", NULL, &r, &e) == SBX_OK)
        TAP_FAIL("A's reconnect ran in another box: %s", sbx_exec_result_stdout(r, NULL));
    TAP_CONTAINS(sbx_error_message(e), "not the box's agent");
    sbx_error_free(e);
    TAP_EQ_INT(unlink(asock), 0);
    TAP_EQ_INT(rename(moved, asock), 0);
    /* B saw nothing of it. */
    TAP_EQ_STR(run_as(b, NULL, "echo $SECRET", NULL), "secret-of-b\n");
    stop_free(a);
    stop_free(b);
    sbx_spec_free(sa);
    sbx_spec_free(sbs);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* Inside a box only root may use the agent: an unprivileged process gets nothing through it. */
static void test_unprivileged_box_process_cannot_use_agent(void)
{
    need_boxes();
    mode_t old = umask(0); /* the attack's condition: a creator with umask 000 */
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *sb = start(p, s);
    umask(old);
    upload_probe(sb);
    TAP_EQ_STR(run_as(sb, NULL, "id -u", NULL), "0\n");
    int rc;
    const char *o = run_as(sb, "65534",
                           "id -u; SBX_SEC_BOX_PROBE=agent:/run/sbx/agent.sock "
                           "/tmp/probe",
                           &rc);
    diag("as 65534 in the box: %s", o);
    TAP_CONTAINS(o, "65534\n");
    TAP_TRUE(strstr(o, "answered") == NULL);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* The agent itself refuses a peer of another uid, whatever the socket's mode. */
static void test_agent_refuses_other_users(void)
{
    if (geteuid() != 0)
        TAP_SKIP("needs root, to connect as another user");
    if (!built("sbx-agent", "SBX_AGENT"))
        TAP_SKIP("sbx-agent is not built (make)");
    if (!have_file("/usr/bin/setpriv"))
        TAP_SKIP("setpriv (util-linux) is not installed");
    char agent[1200];
    const char *env = getenv("SBX_AGENT");
    if (env)
        snprintf(agent, sizeof(agent), "%s", env);
    else {
        char *r = realpath("build/sbx-agent", NULL);
        if (!r)
            TAP_SKIP("run from the source tree (build/sbx-agent)");
        snprintf(agent, sizeof(agent), "%s", r);
        free(r);
    }
    /* A directory anyone can traverse and a socket anyone may connect to. */
    char dir[] = "/tmp/sbx-sec-box-XXXXXX";
    TAP_TRUE(mkdtemp(dir) != NULL);
    chmod(dir, 0755);
    char sock[128], probe[128], out[4096];
    snprintf(sock, sizeof(sock), "%s/agent.sock", dir);
    /* The probe where the other user can run it (the build tree may be closed to it). */
    snprintf(probe, sizeof(probe), "%s/probe", dir);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cp %s %s && chmod 0755 %s", self_path, probe, probe), 0);
    int rp[2];
    TAP_EQ_INT(pipe2(rp, O_CLOEXEC), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(rp[1], 3);
        umask(0);
        execl(agent, "sbx-agent", "init", "--listen", sock, "--ready-fd", "3", (char *)NULL);
        _exit(127);
    }
    close(rp[1]);
    char c;
    TAP_EQ_INT(read(rp[0], &c, 1), 1);
    close(rp[0]);
    /* Its own socket is 0600 though its umask is 000 (asserted once the agent is gone). */
    struct stat st;
    int mode = stat(sock, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
    /* Made reachable by anyone, to try the agent's own check. */
    chmod(sock, 0777);
    char as_root[4096], as_other[4096];
    run_cmd(as_root, sizeof(as_root), "SBX_SEC_BOX_PROBE=agent:%s %s", sock, probe);
    run_cmd(as_other, sizeof(as_other),
            "SBX_SEC_BOX_PROBE=agent:%s setpriv --reuid 65534 --regid 65534 --clear-groups %s",
            sock, probe);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    rm_rf(dir);
    TAP_EQ_INT(mode, 0600);
    TAP_EQ_STR(as_root, "answered\n");
    TAP_TRUE(strstr(as_other, "answered") == NULL);
    TAP_CONTAINS(as_other, "closed");
}

/* --- seccomp: socket families ------------------------------------------------ */

static void test_socket_families_refused(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *sb = start(p, s);
    upload_probe(sb);
    /* Allowed: unix, inet, inet6, netlink. Refused: vsock, key, bluetooth, alg, xdp, tipc, rds,
     * can. */
    const char *o = out_of(sb, "SBX_SEC_BOX_PROBE=sockets:1,2,10,16,40,15,31,38,44,30,21,29 "
                               "/tmp/probe");
    diag("in the box: %s", o);
    static const int ok[] = {1, 2, 10, 16};
    static const int refused[] = {40, 15, 31, 38, 44, 30, 21, 29};
    char want[64];
    for (size_t i = 0; i < SBX_ARRAY_SIZE(ok); i++) {
        snprintf(want, sizeof(want), "%d ok\n", ok[i]);
        TAP_CONTAINS(o, want);
    }
    for (size_t i = 0; i < SBX_ARRAY_SIZE(refused); i++) {
        snprintf(want, sizeof(want), "%d EAFNOSUPPORT\n", refused[i]);
        TAP_CONTAINS(o, want);
    }
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* --- descriptors: a default per box, configurable, never above the creator's --- */

static void test_nofile_default_and_configured(void)
{
    need_boxes();
    struct rlimit rl;
    TAP_EQ_INT(getrlimit(RLIMIT_NOFILE, &rl), 0);
    /* The default scales with the host (defaults.c), never above the creator's. */
    sbx_linux_host host;
    sbx__linux_host_read(&host);
    unsigned long long def =
        (unsigned long long)sbx__linux_default_nofile_hard(&host, sbx__linux_default_pids(&host));
    unsigned long long hard = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > def ? def : rl.rlim_max;
    unsigned long long soft = hard < 1024 ? hard : 1024;
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *sb = start(p, s);
    char want[128];
    snprintf(want, sizeof(want), "%llu %llu\n", soft, hard);
    TAP_EQ_STR(out_of(sb, "echo $(ulimit -n) $(ulimit -Hn)"), want);
    /* The agent's commands each get the box's limit, whatever the agent keeps for itself. */
    TAP_EQ_STR(out_of(sb, "sh -c 'echo $(ulimit -n) $(ulimit -Hn)'"), want);
    /* Above the hard limit: refused in the box (no CAP_SYS_RESOURCE). */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "ulimit -n %llu", hard + 1);
    int rc;
    run_as(sb, NULL, cmd, &rc);
    TAP_NE_INT(rc, 0);
    stop_free(sb);
    /* Configured per box (provider_options) and per provider. */
    sbx_spec_set_provider_options(s, "{\"nofile\": [100, 200]}", NULL);
    sb = start(p, s);
    TAP_EQ_STR(out_of(sb, "echo $(ulimit -n) $(ulimit -Hn)"), "100 200\n");
    stop_free(sb);
    sbx_provider *p2 = provider("{\"nofile\": 300}");
    sbx_spec *s2 = sbx_spec_new();
    sb = start(p2, s2);
    TAP_EQ_STR(out_of(sb, "echo $(ulimit -n) $(ulimit -Hn)"), "300 300\n");
    stop_free(sb);
    /* Bad values and a hard limit above the creator's: clear errors, no box. */
    provider_fails("{\"linux\": {\"nofile\": [10, 5]}}", SBX_EINVAL, "nofile");
    if (rl.rlim_max != RLIM_INFINITY) {
        char opts[128];
        snprintf(opts, sizeof(opts), "{\"nofile\": [64, %llu]}",
                 (unsigned long long)rl.rlim_max + 1);
        sbx_spec_set_provider_options(s, opts, NULL);
        start_fails(p, s, SBX_EINVAL, "above this process's own hard limit");
    }
    sbx_spec_free(s);
    sbx_spec_free(s2);
    sbx_provider_free(p);
    sbx_provider_free(p2);
    census_check(state_dir);
}

/* --- the "none" image shows nothing of the host a box has no business with ---- */

static void test_none_image_hides_host_secrets(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = sbx_spec_new();
    sbx_sandbox *sb = start(p, s);
    /* Its own accounts, not the host's. */
    TAP_EQ_STR(out_of(sb, "cut -d: -f1 /etc/passwd | sort | tr '\\n' ' '"), "nobody root ");
    TAP_EQ_STR(out_of(sb, "cut -d: -f1 /etc/group | sort | tr '\\n' ' '"), "nogroup root tty ");
    TAP_EQ_STR(out_of(sb, "ls /etc/shadow /etc/gshadow 2>/dev/null | wc -l"), "0\n");
    /* The host's private keys: not listable. */
    if (have_file("/etc/ssl/private"))
        TAP_EQ_STR(out_of(sb, "ls -A /etc/ssl/private 2>/dev/null | wc -l"), "0\n");
    /* The kernel's page tables and the rest of Docker's masked paths read as nothing. */
    static const char *const masked[] = {"kpageflags", "kpagecount", "kpagecgroup", "kcore",
                                         "keys",       "timer_list", "sched_debug"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(masked); i++) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "head -c 64 /proc/%s 2>/dev/null | wc -c", masked[i]);
        TAP_EQ_STR(out_of(sb, cmd), "0\n");
    }
    /* Its mount table names nothing of the host's state directory. */
    const char *mi = out_of(sb, "cat /proc/self/mountinfo");
    if (strstr(mi, state_root))
        TAP_FAIL("the box's mountinfo shows the host's state directory %s:\n%s", state_root, mi);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

int main(int argc, char **argv)
{
    const char *probe = getenv("SBX_SEC_BOX_PROBE");
    if (probe)
        return probe_main(probe);
    if (argc > 0 && !realpath(argv[0], self_path))
        snprintf(self_path, sizeof(self_path), "/proc/self/exe");
    static const struct tap_test tests[] = {
        TAP(test_box_writes_never_privileged_on_host),
        TAP(test_userns_box_writes_never_privileged_on_host),
        TAP(test_disk_limit_bounds_every_writable_place),
        TAP(test_socket_swap_cannot_redirect_to_another_box),
        TAP(test_unprivileged_box_process_cannot_use_agent),
        TAP(test_agent_refuses_other_users),
        TAP(test_socket_families_refused),
        TAP(test_nofile_default_and_configured),
        TAP(test_none_image_hides_host_secrets),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
