/*
 * [nat] The network of a `network: "nat"` box (docs/networking.md): its own
 * network namespace, an nftables egress policy in it, and pasta (the passt
 * project's user-mode network stack) as its only way out.
 *
 * All of it happens while the box's first process waits for the shim's go
 * message, so no box code runs, and no packet can leave, before it is done:
 *
 *   1. pasta (started first: its start-up is the longer and overlaps 2),
 *      with the namespace as /proc/self/fd/3: it makes the box's
 *      interface (eth0, 10.0.2.100/24, gateway 10.0.2.2, DNS forwarder
 *      10.0.2.3) and turns the box's packets into the host's own sockets.
 *      Its port forwarding is off both ways (-t/-u/-T/-U none): nothing on
 *      the host reaches into the box and the box's 127.0.0.1 is its own. The
 *      gateway maps to the host's loopback only when the policy allows
 *      "host"; else --no-map-gw, and the ruleset refuses the gateway anyway;
 *   2. the ruleset: sbx-nft, forked into the box's namespace (setns), loads
 *      it through libnftables. A box never holds NET_ADMIN (caps.c refuses
 *      it with nat), so it cannot remove it;
 *   3. the shim waits for pasta's pid file: pasta writes it once the
 *      interface is configured, before its loop. Only then does the box's
 *      first process go on: a service (entrypoint) starts with its network
 *      up.
 *
 * pasta stays the shim's child (-f): it dies with the shim (PDEATHSIG; it
 * keeps uid 0, so the setting survives its exec and sandboxing) and the
 * shim kills and reaps it at teardown or when the box's first process dies
 * (pasta itself does not notice its namespace losing its last process).
 */
#include "shim/shim.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

/* The host's own IPv4 addresses but loopback: a nat box may not reach host services through them. */
static size_t host_addrs(uint32_t *out, size_t max)
{
    struct ifaddrs *ifa = NULL, *i;
    size_t n = 0;
    if (getifaddrs(&ifa) < 0)
        return 0;
    for (i = ifa; i && n < max; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
            continue;
        uint32_t a = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
        if ((a >> 24) != 127)
            out[n++] = a;
    }
    freeifaddrs(ifa);
    return n;
}

static int wait_child(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return st;
}

/* Reads up to n-1 bytes of a file (for error messages); "" when it cannot. */
static void read_small(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t k = read(fd, buf, n - 1);
    close(fd);
    buf[k > 0 ? k : 0] = 0;
    for (ssize_t i = 0; i < k; i++)
        if (buf[i] == '\n' && i + 1 < k)
            buf[i] = ' ';
    if (k > 0 && buf[k - 1] == '\n')
        buf[k - 1] = 0;
}

int shim_nft_load(const struct shim_cfg *c, int nsfd, const char *rules, bool ping,
                  const char *what, char *msg, size_t len)
{
    /* The ruleset as sbx-nft's stdin: a memfd holds it whole, whatever its size. */
    int mfd = memfd_create("sbx-nft", MFD_CLOEXEC);
    size_t rl = strlen(rules);
    bool ok = mfd >= 0 && write(mfd, rules, rl) == (ssize_t)rl && lseek(mfd, 0, SEEK_SET) == 0;
    _cleanup_free_ char *errpath = sbx__printf("%s/run/nft.err", c->box_dir);
    int efd = ok && errpath ? open(errpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (!ok || efd < 0) {
        snprintf(msg, len, "cannot prepare %s: %s", what, strerror(errno));
        if (mfd >= 0)
            close(mfd);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* Into that namespace only: sbx-nft runs as the host's root, on the host's files. */
        if (setns(nsfd, CLONE_NEWNET) < 0 || dup2(mfd, 0) < 0 || dup2(efd, 1) < 0 ||
            dup2(efd, 2) < 0)
            _exit(126);
        /*
         * [nat] ping without CAP_NET_RAW, which a nat box lacks (security.c):
         * ICMP datagram sockets for every group, in this namespace only
         * (net sysctls are the opener's namespace's), as Docker sets it.
         */
        int pfd = ping ? open("/proc/sys/net/ipv4/ping_group_range", O_WRONLY | O_CLOEXEC) : -2;
        if (pfd == -1 || (pfd >= 0 && write(pfd, "0 2147483647", 12) != 12)) {
            dprintf(2, "cannot open ICMP datagram sockets to the box (ping_group_range): %s\n",
                    strerror(errno));
            _exit(1);
        }
        if (pfd >= 0)
            close(pfd);
        char *const argv[] = { (char *)"sbx-nft", NULL };
        execv(c->nft, argv);
        _exit(127);
    }
    close(mfd);
    close(efd);
    int st = pid > 0 ? wait_child(pid) : -1;
    if (st != 0) {
        char out[600];
        read_small(errpath, out, sizeof(out));
        snprintf(msg, len, "cannot install %s (%s): %s", what, c->nft,
                 pid < 0                                   ? strerror(errno)
                 : WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "cannot execute it"
                 : *out                                    ? out
                                                           : "it failed");
        unlink(errpath);
        return -1;
    }
    unlink(errpath);
    return 0;
}

int shim_nat_filter(const struct shim_cfg *c, pid_t init, char *msg, size_t len)
{
    struct sbx_egress *eg = malloc(sizeof(*eg));
    char why[512];
    if (!eg) {
        snprintf(msg, len, "out of memory");
        return -1;
    }
    if (sbx__egress_parse(c->egress, eg, why, sizeof(why)) < 0) {
        free(eg);
        snprintf(msg, len, "provider_options.%s", why);
        return -1;
    }
    uint32_t hosts[64];
    size_t nh = host_addrs(hosts, SBX_ARRAY_SIZE(hosts));
    char *rules = sbx__egress_nft(eg, hosts, nh);
    free(eg);
    if (!rules) {
        snprintf(msg, len, "out of memory");
        return -1;
    }
    char ns[64];
    snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)init);
    int nsfd = open(ns, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
        snprintf(msg, len, "cannot prepare the egress policy: %s", strerror(errno));
        free(rules);
        return -1;
    }
    int rc = shim_nft_load(c, nsfd, rules, true,
                           "the egress policy in the box's network namespace", msg, len);
    close(nsfd);
    free(rules);
    return rc;
}

pid_t shim_nat_start(const struct shim_cfg *c, pid_t init, char *msg, size_t len)
{
    struct sbx_egress *eg = malloc(sizeof(*eg));
    char why[512];
    if (!eg || sbx__egress_parse(c->egress, eg, why, sizeof(why)) < 0) {
        snprintf(msg, len, "%s", eg ? why : "out of memory");
        free(eg);
        return -1;
    }
    bool map_gw = sbx__egress_host_allowed(eg);
    free(eg);
    _cleanup_free_ char *pidf = sbx__printf("%s/run/pasta.pid", c->box_dir);
    _cleanup_free_ char *logf = sbx__printf("%s/run/pasta.log", c->box_dir);
    _cleanup_free_ char *resolv = sbx__printf("%s/run/upstream.resolv", c->box_dir);
    _cleanup_free_ char *errf = sbx__printf("%s/run/pasta.err", c->box_dir);
    if (!pidf || !logf || !resolv || !errf) {
        snprintf(msg, len, "out of memory");
        return -1;
    }
    unlink(pidf);
    /* provider_options.dns: the forwarder's upstream, as pasta reads it, from /etc/resolv.conf. */
    if (c->dns) {
        char text[256] = "";
        size_t tl = 0, i;
        json_t *e;
        json_array_foreach(c->dns, i, e)
        {
            struct in_addr a;
            const char *s = json_string_value(e);
            if (!s || i >= 3 || inet_pton(AF_INET, s, &a) != 1) {
                snprintf(msg, len, "dns must be a list of 1 to 3 IPv4 addresses");
                return -1;
            }
            tl += (size_t)snprintf(text + tl, sizeof(text) - tl, "nameserver %s\n", s);
        }
        if (sbx__write_file_atomic(resolv, text, tl, 0644) < 0) {
            snprintf(msg, len, "cannot write %s: %s", resolv, strerror(errno));
            return -1;
        }
    }
    char ns[64];
    snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)init);
    int nsfd = open(ns, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
        snprintf(msg, len, "cannot open the box's network namespace: %s", strerror(errno));
        return -1;
    }
    const char *argv[48];
    int n = 0;
    argv[n++] = "pasta";
    argv[n++] = "-f"; /* the shim's child: it reaps it, and PDEATHSIG holds */
    argv[n++] = "-q";
    /*
     * As root (its default would be nobody, which can neither open nor
     * enter the box's namespace); pasta still drops every capability but
     * the two it needs and confines itself (seccomp, namespaces of its own).
     */
    argv[n++] = "--runas";
    argv[n++] = "0";
    argv[n++] = "--config-net";
    argv[n++] = "-4"; /* IPv4 only: the ruleset refuses IPv6 (docs/networking.md) */
    argv[n++] = "-I";
    argv[n++] = "eth0";
    argv[n++] = "-a";
    argv[n++] = SBX_NAT_ADDR;
    argv[n++] = "-n";
    argv[n++] = "24";
    argv[n++] = "-g";
    argv[n++] = SBX_NAT_GATEWAY;
    argv[n++] = "--dns-forward";
    argv[n++] = SBX_NAT_DNS;
    argv[n++] = "--no-dhcp"; /* --config-net did it; nothing to offer the box */
    argv[n++] = "-t";
    argv[n++] = "none";
    argv[n++] = "-u";
    argv[n++] = "none";
    argv[n++] = "-T";
    argv[n++] = "none";
    argv[n++] = "-U";
    argv[n++] = "none";
    if (!map_gw)
        argv[n++] = "--no-map-gw";
    argv[n++] = "-P";
    argv[n++] = pidf;
    argv[n++] = "-l";
    argv[n++] = logf;
    argv[n++] = "--log-size";
    argv[n++] = "1048576";
    argv[n++] = "--netns";
    argv[n++] = "/proc/self/fd/3";
    argv[n] = NULL;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, len, "fork: %s", strerror(errno));
        close(nsfd);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /*
         * The shim ignores SIGPIPE, and an ignored signal stays ignored
         * across exec: pasta 2023.03 takes a previous disposition other than
         * the default for a failure ("Couldn't install signal handlers").
         */
        struct sigaction dfl = { .sa_handler = SIG_DFL };
        sigaction(SIGPIPE, &dfl, NULL);
        /* What pasta says before its log file is open (bad options) goes to run/pasta.err. */
        int dn = open("/dev/null", O_RDWR | O_CLOEXEC);
        int ef = open(errf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (dn < 0 || ef < 0 || dup2(dn, 0) < 0 || dup2(ef, 1) < 0 || dup2(ef, 2) < 0 ||
            dup2(nsfd, 3) < 0)
            _exit(126);
        /*
         * pasta reads its upstream name servers from /etc/resolv.conf: given
         * resolvers become that file in a mount namespace of its own.
         */
        if (c->dns && (unshare(CLONE_NEWNS) < 0 ||
                       mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                       mount(resolv, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0))
            _exit(125);
        syscall(SYS_close_range, 4, ~0U, 0);
        execv(c->pasta, (char *const *)argv);
        _exit(127);
    }
    close(nsfd);
    return pid;
}

int shim_nat_wait(const struct shim_cfg *c, pid_t pid, double timeout_s, char *msg, size_t len)
{
    _cleanup_free_ char *pidf = sbx__printf("%s/run/pasta.pid", c->box_dir);
    _cleanup_free_ char *logf = sbx__printf("%s/run/pasta.log", c->box_dir);
    _cleanup_free_ char *errf = sbx__printf("%s/run/pasta.err", c->box_dir);
    if (!pidf || !logf || !errf) {
        snprintf(msg, len, "out of memory");
        return -1;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 0;; i++) {
        char buf[32];
        read_small(pidf, buf, sizeof(buf));
        if (buf[0] >= '1' && buf[0] <= '9')
            return 0;
        int st = 0;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char log[600];
            read_small(errf, log, sizeof(log));
            if (!strstr(log, "rror") && !strstr(log, "ouldn't"))
                read_small(logf, log, sizeof(log));
            snprintf(msg, len, "pasta (%s) %s %d before the box's network was ready%s%s",
                     c->pasta, WIFEXITED(st) ? "exited with status" : "was killed by signal",
                     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), *log ? ": " : "",
                     WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "cannot execute it" : log);
            return -2; /* reaped */
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9 >
            timeout_s) {
            snprintf(msg, len, "pasta did not set up the box's network within %.0f s", timeout_s);
            return -1;
        }
        /* A poll: pasta starts in a few milliseconds, so a short sleep costs little. */
        struct timespec ts = { 0, (i < 100 ? 200 : 2000) * 1000L };
        nanosleep(&ts, NULL);
    }
}

void shim_nat_stop(pid_t *pid)
{
    if (*pid <= 0)
        return;
    kill(*pid, SIGKILL);
    while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
        ;
    *pid = 0;
}
