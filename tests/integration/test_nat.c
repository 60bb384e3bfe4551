/*
 * [nat] Boxes with network "nat" (docs/networking.md): their own network
 * namespace, pasta as the way out, an nftables egress policy. Every
 * connection the tests make goes to servers this test runs on the host's
 * loopback (reached from a box only through pasta's host gateway, and only
 * when the policy allows "host"), to the host's own address (always
 * refused inside the box, before any packet leaves), or to the box's own
 * loopback. No test sends anything to another machine: what a box is
 * refused never leaves its namespace, and a name resolves through a
 * resolver this test runs on a loopback address.
 */
#include "tap.h"
#include "common.h"
#include "lib/proc.h"
#include "linux_census.h"
#include "linux_fixture.h"
#include "providers/linux/linux.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <poll.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

/* Skips unless pasta is installed (the passt package). */
static void need_pasta(void)
{
    need_boxes();
    if (access("/usr/bin/pasta", X_OK) != 0 && access("/usr/local/bin/pasta", X_OK) != 0)
        TAP_SKIP("pasta is not installed (apt-get install passt)");
}

/* A listening TCP socket on `addr` (host byte order), any port; the port in *port. */
static int listen_on(uint32_t addr, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(addr) };
    socklen_t sl = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
        TAP_FAIL("listen: %s", strerror(errno));
    *port = ntohs(sa.sin_port);
    return fd;
}

/* A child that answers every HTTP request on `fd` with `body`; its pid. */
static pid_t serve_http(int fd, const char *body)
{
    pid_t pid = fork();
    if (pid != 0) {
        close(fd);
        return pid;
    }
    for (;;) {
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        char req[4096];
        size_t n = 0;
        while (n + 1 < sizeof(req)) {
            ssize_t k = read(c, req + n, sizeof(req) - 1 - n);
            if (k <= 0)
                break;
            n += (size_t)k;
            req[n] = 0;
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        char head[128];
        int hl = snprintf(head, sizeof(head),
                          "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                          strlen(body));
        if (write(c, head, (size_t)hl) == hl && write(c, body, strlen(body)) < 0)
            _exit(1);
        close(c);
    }
}

/*
 * A child that answers every DNS query on `addr`:53 with one A record,
 * 192.0.2.77 (a documentation address: the test never connects to it).
 */
static pid_t serve_dns(uint32_t addr)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(53),
                              .sin_addr.s_addr = htonl(addr) };
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        TAP_SKIP("cannot bind a resolver on a loopback address, port 53");
    pid_t pid = fork();
    if (pid != 0) {
        close(fd);
        return pid;
    }
    for (;;) {
        unsigned char q[512], a[600];
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&from, &fl);
        if (n < 12 + 5)
            continue;
        size_t i = 12;
        while (i < (size_t)n && q[i])
            i += q[i] + 1u;
        if (i + 5 > (size_t)n)
            continue;
        size_t ql = i + 5; /* header, name, type, class */
        memcpy(a, q, ql);
        a[2] = 0x81, a[3] = 0x80;               /* a response, recursion available */
        a[6] = 0, a[7] = 1;                     /* one answer */
        a[8] = a[9] = a[10] = a[11] = 0;        /* no authority, no additional */
        static const unsigned char rr[] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4,
                                            192,  0,    2, 77 };
        memcpy(a + ql, rr, sizeof(rr));
        if (sendto(fd, a, ql + sizeof(rr), 0, (struct sockaddr *)&from, fl) < 0)
            continue;
    }
}

static void end_child(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Runs `cmd` in the box; its exit status, and its stdout+stderr in out. */
static int box_sh(sbx_sandbox *sb, const char *cmd, char *out, size_t n)
{
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_exec(sb, cmd, NULL, &r, &e) != SBX_OK)
        TAP_FAIL("exec %s: %s", cmd, sbx_error_message(e));
    const char *o = sbx_exec_result_stdout(r, NULL), *er = sbx_exec_result_stderr(r, NULL);
    snprintf(out, n, "%s%s", o ? o : "", er ? er : "");
    int rc = sbx_exec_result_return_code(r);
    sbx_exec_result_free(r);
    return rc;
}

/* wget URL in the box: 0 and the body in out, or wget's failure status. */
static int fetch(sbx_sandbox *sb, const char *url, char *out, size_t n)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "wget -q -T 10 -t 1 -O- %s", url);
    return box_sh(sb, cmd, out, n);
}

static sbx_sandbox *nat_box(sbx_provider *p, const char *options)
{
    sbx_spec *s = sbx_spec_new();
    TAP_OK(sbx_spec_set_provider_options(s, options, &e_));
    sbx_sandbox *sb = start(p, s);
    sbx_spec_free(s);
    return sb;
}

/* The pid of a process whose command line names the state directory and pasta, or 0. */
static pid_t pasta_of_state(void)
{
    return proc_named("pasta ", state_dir);
}

/* The host's first IPv4 address that is not loopback (host order), or 0. */
static uint32_t host_address(void)
{
    struct ifaddrs *ifa = NULL;
    uint32_t found = 0;
    if (getifaddrs(&ifa) < 0)
        return 0;
    for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            uint32_t a = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
            if ((a >> 24) != 127)
                found = a;
        }
    freeifaddrs(ifa);
    return found;
}

/* The policy's parser and the ruleset it makes: errors name what is wrong. */
static void test_egress_policy_parse(void)
{
    struct sbx_egress_rule r;
    char why[256];
    TAP_EQ_INT(sbx__egress_rule_parse("10.0.0.0/8:443", &r, why, sizeof(why)), 0);
    TAP_TRUE(r.net == 0x0a000000u && r.plen == 8 && r.lo == 443 && r.hi == 443 && !r.host);
    TAP_EQ_INT(sbx__egress_rule_parse("host:8000-8099", &r, why, sizeof(why)), 0);
    TAP_TRUE(r.host && r.lo == 8000 && r.hi == 8099);
    TAP_EQ_INT(sbx__egress_rule_parse("203.0.113.7", &r, why, sizeof(why)), 0);
    TAP_TRUE(r.plen == 32 && r.lo == 0);
    static const struct {
        const char *rule, *says;
    } bad[] = {
        { "10.0.0.1/8", "bits set past its /8 prefix" },
        { "10.0.0.0/33", "prefix length must be 0-32" },
        { "10.0.0.0:0", "port must be 1-65535" },
        { "10.0.0.0:90-80", "port must be 1-65535" },
        { "example.com:443", "is not an IPv4 address" },
        { "[::1]:80", "IPv6 is not routed" },
        { "fd00::/8", "IPv6 is not routed" },
        { "", "empty or over-long" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        TAP_EQ_INT(sbx__egress_rule_parse(bad[i].rule, &r, why, sizeof(why)), -1);
        TAP_CONTAINS(why, bad[i].says);
    }
    struct sbx_egress *eg = malloc(sizeof(*eg));
    json_t *v = json_loads("{\"default\": \"deny\", \"allow\": [\"host:8080\", "
                           "\"198.51.100.0/24\"], \"deny\": [\"198.51.100.9:22\"]}",
                           0, NULL);
    TAP_EQ_INT(sbx__egress_parse(v, eg, why, sizeof(why)), 0);
    TAP_TRUE(eg->deny_default && eg->nallow == 2 && eg->ndeny == 1);
    TAP_TRUE(sbx__egress_host_allowed(eg));
    uint32_t hosts[] = { 0xc0000202u };
    char *rules = sbx__egress_nft(eg, hosts, 1);
    const char *out = strstr(rules, "chain out {"), *in = strstr(rules, "chain in {");
    TAP_TRUE(out && in && in < out);
    TAP_CONTAINS(out, "ip daddr 198.51.100.9/32 meta l4proto { tcp, udp } th dport 22-22 "
                      "jump refuse");
    TAP_CONTAINS(out, "ip daddr 10.0.2.2/32 meta l4proto { tcp, udp } th dport 8080-8080 accept");
    TAP_CONTAINS(out, "ip daddr 192.0.2.2 jump refuse");
    TAP_CONTAINS(out, "ip daddr 198.51.100.0/24 accept");
    /* Deny before allow, the host refused before the allow list, the default last. */
    TAP_TRUE(strstr(out, "dport 22-22") < strstr(out, "198.51.100.0/24 accept"));
    TAP_TRUE(strstr(out, "192.0.2.2 jump") < strstr(out, "198.51.100.0/24 accept"));
    TAP_CONTAINS(strstr(out, "198.51.100.0/24 accept"), "jump refuse\n  }\n}\n");
    /* What no policy opens: a forged source, the host's loopback off lo, metadata addresses. */
    TAP_CONTAINS(out, "ip saddr != " SBX_NAT_ADDR " drop\n");
    TAP_CONTAINS(out, "ip daddr 127.0.0.0/8 jump refuse\n");
    TAP_TRUE(strstr(out, "ip daddr 169.254.0.0/16 jump refuse") &&
             strstr(out, "ip daddr 169.254.0.0/16 jump refuse") <
                 strstr(out, "198.51.100.0/24 accept"));
    /* Ingress: the same rules by source, dropped. */
    TAP_TRUE(strstr(in, "ip saddr 198.51.100.9/32 meta l4proto { tcp, udp } th sport 22-22 drop") <
             out);
    TAP_TRUE(strstr(in, "ip saddr 192.0.2.2 drop") < out);
    TAP_TRUE(strstr(in, "ip saddr 169.254.0.0/16 drop") < out);
    TAP_TRUE(strstr(in, "ip saddr 198.51.100.0/24 accept") < out);
    TAP_TRUE(strstr(in, "ip saddr 127.0.0.0/8 drop") < out);
    free(rules);
    json_decref(v);
    /*
     * Link-local (cloud metadata) addresses: refused by the default and by
     * a wider allow rule; open only to an allow rule inside them.
     */
    v = json_loads("{\"allow\": [\"0.0.0.0/0\", \"169.254.169.254:80\"]}", 0, NULL);
    TAP_EQ_INT(sbx__egress_parse(v, eg, why, sizeof(why)), 0);
    rules = sbx__egress_nft(eg, NULL, 0);
    out = strstr(rules, "chain out {");
    const char *meta = strstr(out, "ip daddr 169.254.169.254/32 meta l4proto { tcp, udp } th "
                                   "dport 80-80 accept"),
               *ll = strstr(out, "ip daddr 169.254.0.0/16 jump refuse"),
               *all = strstr(out, "ip daddr 0.0.0.0/0 accept");
    TAP_TRUE(meta && ll && all && meta < ll && ll < all);
    free(rules);
    json_decref(v);
    static const struct {
        const char *json, *says;
    } badp[] = {
        { "[]", "egress must be a mapping" },
        { "{\"default\": \"block\"}", "egress.default must be \"allow\" or \"deny\"" },
        { "{\"alow\": []}", "unknown key 'alow'" },
        { "{\"allow\": \"10.0.0.0/8\"}", "egress.allow must be a list" },
        { "{\"deny\": [\"10.0.0.0/8\", 5]}", "egress.deny[1] must be a string" },
        { "{\"allow\": [\"1.2.3.4:http\"]}", "egress.allow[0]: '1.2.3.4:http'" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(badp); i++) {
        v = json_loads(badp[i].json, JSON_DECODE_ANY, NULL);
        TAP_EQ_INT(sbx__egress_parse(v, eg, why, sizeof(why)), -1);
        TAP_CONTAINS(why, badp[i].says);
        json_decref(v);
    }
    free(eg);
}

/*
 * The host's loopback only through the gateway and only when allowed: a
 * host server on 127.0.0.1 is fetched with "host:PORT", another port of
 * the host is refused, and the box's own 127.0.0.1 is its own.
 */
static void test_nat_reaches_an_allowed_host_port_only(void)
{
    need_pasta();
    int port, other;
    pid_t web = serve_http(listen_on(INADDR_LOOPBACK, &port), "nat-box-reached-the-host\n");
    pid_t web2 = serve_http(listen_on(INADDR_LOOPBACK, &other), "must-not-be-reached\n");
    sbx_provider *p = provider(NULL);
    char opts[256], url[128], out[4096];
    snprintf(opts, sizeof(opts), "{\"network\": \"nat\", \"egress\": {\"allow\": [\"host:%d\"]}}",
             port);
    sbx_sandbox *sb = nat_box(p, opts);
    TAP_TRUE(pasta_of_state() > 0);
    snprintf(url, sizeof(url), "http://" SBX_NAT_GATEWAY ":%d/", port);
    TAP_EQ_INT(fetch(sb, url, out, sizeof(out)), 0);
    TAP_EQ_STR(out, "nat-box-reached-the-host\n");
    /* Another port of the host's loopback: refused at once (a reset), never fetched. */
    snprintf(url, sizeof(url), "http://" SBX_NAT_GATEWAY ":%d/", other);
    TAP_NE_INT(fetch(sb, url, out, sizeof(out)), 0);
    TAP_TRUE(!strstr(out, "must-not-be-reached"));
    /* The box's 127.0.0.1 is the box's: the host's server is not there. */
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
    TAP_NE_INT(fetch(sb, url, out, sizeof(out)), 0);
    TAP_TRUE(!strstr(out, "nat-box-reached-the-host"));
    /*
     * The box cannot undo its policy: libnftables in the box (the host's
     * library, bound read-only) is refused, and so is any change of its
     * interface. Both need NET_ADMIN, which a nat box never has.
     */
    TAP_EQ_INT(box_sh(sb,
                      "python3 -c 'import ctypes; l = ctypes.CDLL(\"libnftables.so.1\"); "
                      "l.nft_ctx_new.restype = ctypes.c_void_p; "
                      "l.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]; "
                      "print(\"flush\", l.nft_run_cmd_from_buffer(l.nft_ctx_new(0), "
                      "b\"flush ruleset\"))' 2>/dev/null",
                      out, sizeof(out)),
               0);
    TAP_EQ_STR(out, "flush -1\n");
    TAP_NE_INT(box_sh(sb, "ip link set eth0 down", out, sizeof(out)), 0);
    TAP_CONTAINS(out, "Operation not permitted");
    snprintf(url, sizeof(url), "http://" SBX_NAT_GATEWAY ":%d/", other);
    TAP_NE_INT(fetch(sb, url, out, sizeof(out)), 0);
    TAP_TRUE(!strstr(out, "must-not-be-reached"));
    /* The box resolves through pasta's forwarder. */
    TAP_EQ_INT(box_sh(sb, "cat /etc/resolv.conf", out, sizeof(out)), 0);
    TAP_EQ_STR(out, "nameserver " SBX_NAT_DNS "\n");
    stop_free(sb);
    /* pasta went with the box. */
    TAP_EQ_INT(pasta_of_state(), 0);
    sbx_provider_free(p);
    end_child(web);
    end_child(web2);
    census_check(state_dir);
}

/*
 * From box sb, the host's loopback server (through the gateway, on `port`)
 * and its server on its own address `hs`:`hport` are both refused.
 */
static void host_refused(sbx_sandbox *sb, int port, const char *hs, int hport)
{
    char url[128], out[4096];
    snprintf(url, sizeof(url), "http://" SBX_NAT_GATEWAY ":%d/", port);
    TAP_NE_INT(fetch(sb, url, out, sizeof(out)), 0);
    TAP_TRUE(!strstr(out, "host-loopback"));
    snprintf(url, sizeof(url), "http://%s:%d/", hs, hport);
    TAP_NE_INT(fetch(sb, url, out, sizeof(out)), 0);
    TAP_TRUE(!strstr(out, "host-address"));
}

/*
 * Without a rule naming the host, the gateway is closed; the host's own
 * address is closed whatever the policy; a deny rule beats an allow rule.
 */
static void test_nat_host_closed_without_a_rule(void)
{
    need_pasta();
    uint32_t self = host_address();
    if (!self)
        TAP_SKIP("this host has no IPv4 address but loopback");
    int port, hport;
    pid_t web = serve_http(listen_on(INADDR_LOOPBACK, &port), "host-loopback\n");
    pid_t webh = serve_http(listen_on(self, &hport), "host-address\n");
    char hs[INET_ADDRSTRLEN];
    struct in_addr ha = { htonl(self) };
    inet_ntop(AF_INET, &ha, hs, sizeof(hs));
    sbx_provider *p = provider(NULL);
    char out[4096], opts[256];

    sbx_sandbox *sb = nat_box(p, "{\"network\": \"nat\"}");
    host_refused(sb, port, hs, hport);
    stop_free(sb);

    /* Deny wins: the same port allowed and denied is refused; the allowed one still works. */
    snprintf(opts, sizeof(opts),
             "{\"network\": \"nat\", \"egress\": {\"default\": \"deny\", \"allow\": [\"host\"], "
             "\"deny\": [\"" SBX_NAT_GATEWAY "/32:%d\"]}}",
             port);
    sb = nat_box(p, opts);
    /* host_refused(): the host's own address is refused even with "host" allowed. */
    host_refused(sb, port, hs, hport);
    /* Default deny: any other destination is refused in the box, before it leaves. */
    TAP_EQ_INT(box_sh(sb, "wget -q -T 5 -t 1 -O- http://198.51.100.1:9/; echo rc=$?", out,
                      sizeof(out)),
               0);
    TAP_CONTAINS(out, "rc=4"); /* wget's network failure */
    stop_free(sb);
    sbx_provider_free(p);
    end_child(web);
    end_child(webh);
    census_check(state_dir);
}

/* Names resolve through pasta's forwarder to the resolver `dns` names (this test's). */
static void test_nat_resolves_through_the_given_resolver(void)
{
    need_pasta();
    /* A loopback address of this run's own, so port 53 is free there. */
    uint32_t addr = 0x7f000000u | (((uint32_t)getpid() & 0xffffu) << 8) | 53u;
    pid_t dns = serve_dns(addr);
    char a[INET_ADDRSTRLEN], opts[256], out[4096];
    struct in_addr ia = { htonl(addr) };
    inet_ntop(AF_INET, &ia, a, sizeof(a));
    snprintf(opts, sizeof(opts), "{\"network\": \"nat\", \"dns\": [\"%s\"]}", a);
    sbx_provider *p = provider(NULL);
    sbx_sandbox *sb = nat_box(p, opts);
    TAP_EQ_INT(box_sh(sb,
                      "python3 -c 'import socket; print(socket.gethostbyname(\"svc.sbx-test\"))'",
                      out, sizeof(out)),
               0);
    TAP_EQ_STR(out, "192.0.2.77\n");
    stop_free(sb);
    sbx_provider_free(p);
    end_child(dns);
    census_check(state_dir);
}

/* What nat refuses, by name: NET_ADMIN, a bad policy, nat's options without nat. */
static void test_nat_refusals(void)
{
    need_pasta();
    sbx_provider *p = provider(NULL);
    static const struct {
        const char *opts, *says;
        int code;
    } cases[] = {
        { "{\"network\": \"nat\", \"cap_add\": [\"NET_ADMIN\"]}",
          "capability NET_ADMIN is refused with network \"nat\"", SBX_EPERM },
        { "{\"network\": \"nat\", \"cap_add\": [\"NET_RAW\"]}",
          "capability NET_RAW is refused with network \"nat\": raw and packet sockets would "
          "send frames that bypass the egress policy", SBX_EPERM },
        { "{\"network\": \"nat\", \"egress\": {\"allow\": [\"10.0.0.0/8:65536\"]}}",
          "provider_options.egress.allow[0]: '10.0.0.0/8:65536': the port must be", SBX_EINVAL },
        { "{\"egress\": {\"default\": \"deny\"}}", "provider_options.egress needs network \"nat\"",
          SBX_EINVAL },
        { "{\"network\": \"nat\", \"dns\": [\"resolver.example\"]}",
          "provider_options.dns must be a list of 1 to 3 IPv4 addresses", SBX_EINVAL },
        { "{\"network\": \"bad name!\"}",
          "must be \"none\", \"host\", \"nat\" or the name of a network (sbx network create "
          "NAME) (got 'bad name!')",
          SBX_EINVAL },
        { "{\"network\": \"bridge0\"}", "no network named 'bridge0' (create it with sbx network "
          "create bridge0", SBX_ECREATE },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
        sbx_spec *s = sbx_spec_new();
        TAP_OK(sbx_spec_set_provider_options(s, cases[i].opts, &e_));
        sbx_sandbox *sb = NULL;
        sbx_error *e = NULL;
        TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
        int rc = sbx_sandbox_start(sb, NULL, &e);
        TAP_TRUE(rc < 0);
        TAP_CONTAINS(sbx_error_message(e), cases[i].says);
        (void)cases[i].code;
        sbx_error_free(e);
        sbx_sandbox_free(sb);
        sbx_spec_free(s);
    }
    sbx_provider_free(p);
    /* The config's network counts too: NET_ADMIN is refused up front (the newer API's check). */
    p = provider("{\"network\": \"nat\"}");
    const char *caps[] = { "NET_ADMIN", NULL };
    char *json = NULL;
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_validate_runtime_requirements(p, caps, -1, &json, &e), SBX_EPERM);
    TAP_CONTAINS(sbx_error_message(e), "refused with network \"nat\"");
    sbx_error_free(e);
    sbx_provider_free(p);
    census_check(state_dir);
}

/*
 * Frames the box's IP stack did not build: root in a nat box has no packet
 * socket, no raw socket and no CAP_NET_RAW (not even in its bounding set),
 * so a forged SYN to the host's 127.0.0.1 never reaches pasta, whatever the
 * policy, with or without a user namespace. Before, pasta connected the
 * forged SYN to the host's loopback server. ping keeps working through ICMP
 * datagram sockets. A link-local (metadata) address is refused in the box.
 */
static void test_nat_raw_frames_stay_in_the_box(void)
{
    need_pasta();
    char *probe = NULL;
    size_t plen = 0;
    if (sbx__read_file("tests/integration/nat_raw_probe.py", &probe, &plen) < 0)
        TAP_FAIL("cannot read tests/integration/nat_raw_probe.py: %s", strerror(errno));
    static const struct {
        const char *cfg, *opts;
    } cases[] = {
        { NULL, "{\"network\": \"nat\"}" },
        { NULL, "{\"network\": \"nat\", \"egress\": {\"default\": \"deny\"}}" },
        { NULL, "{\"network\": \"nat\", \"egress\": {\"allow\": [\"host:1\"]}}" },
        { "{\"userns\": true}", "{\"network\": \"nat\"}" },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
        int port;
        int lfd = listen_on(INADDR_LOOPBACK, &port);
        sbx_provider *p = provider(cases[i].cfg);
        sbx_sandbox *sb = nat_box(p, cases[i].opts);
        TAP_OK(sbx_sandbox_write_file(sb, "/tmp/probe.py", probe, plen, 0644, &e_));
        char cmd[128], out[4096];
        snprintf(cmd, sizeof(cmd), "python3 /tmp/probe.py %d", port);
        TAP_EQ_INT(box_sh(sb, cmd, out, sizeof(out)), 0);
        printf("# case %zu: %s", i, out);
        TAP_CONTAINS(out, "packet-refused 97\n");       /* EAFNOSUPPORT: seccomp */
        TAP_CONTAINS(out, "packet-dgram-refused 97\n"); /* the same for SOCK_DGRAM */
        TAP_CONTAINS(out, "raw-refused 1\n");           /* EPERM: no CAP_NET_RAW */
        /* Not in any set, so no file capability or setuid program brings it back. */
        TAP_EQ_INT(box_sh(sb, "grep -E '^Cap(Bnd|Prm)' /proc/self/status", out, sizeof(out)), 0);
        for (char *l = out; (l = strchr(l, '\t'));) {
            unsigned long long caps = strtoull(++l, NULL, 16);
            TAP_TRUE(!(caps & (1ull << 13))); /* CAP_NET_RAW */
        }
        /*
         * ICMP datagram sockets (ping without NET_RAW) are open to every
         * group in the box (in a user namespace the range reads as unmapped
         * ids: the socket below is what counts).
         */
        TAP_EQ_INT(box_sh(sb, "cat /proc/sys/net/ipv4/ping_group_range", out, sizeof(out)), 0);
        if (!cases[i].cfg)
            TAP_EQ_STR(out, "0\t2147483647\n");
        TAP_EQ_INT(box_sh(sb,
                          "python3 -c 'import socket; socket.socket(socket.AF_INET, "
                          "socket.SOCK_DGRAM, socket.IPPROTO_ICMP); print(\"icmp ok\")'",
                          out, sizeof(out)),
                   0);
        TAP_EQ_STR(out, "icmp ok\n");
        if (i == 0) {
            /* Cloud metadata: refused in the box by the default policy, before it leaves. */
            TAP_EQ_INT(box_sh(sb,
                              "python3 -c 'import socket, errno\n"
                              "s = socket.socket(); s.settimeout(30)\n"
                              "try: s.connect((\"169.254.169.254\", 80)); print(\"connected\")\n"
                              "except OSError as e: print(errno.errorcode.get(e.errno, e))'",
                              out, sizeof(out)),
                       0);
            TAP_EQ_STR(out, "ECONNREFUSED\n");
        }
        stop_free(sb);
        sbx_provider_free(p);
        /* The host's loopback server was never reached: no connection waits to be accepted. */
        struct pollfd pf = { .fd = lfd, .events = POLLIN };
        TAP_EQ_INT(poll(&pf, 1, 0), 0);
        close(lfd);
    }
    free(probe);
    census_check(state_dir);
}

/* The box's first process dies: pasta is reaped with it, not left holding the namespace. */
static void test_nat_pasta_ends_with_the_box(void)
{
    need_pasta();
    sbx_provider *p = provider(NULL);
    sbx_sandbox *sb = nat_box(p, "{\"network\": \"nat\"}");
    pid_t pasta = pasta_of_state();
    TAP_TRUE(pasta > 0);
    pid_t init = init_pid_of(sb);
    TAP_EQ_INT(kill(init, SIGKILL), 0);
    /* The shim reaps both (a hang guard, not a timing: the alarm bounds it). */
    while (pasta_of_state() > 0)
        usleep(10 * 1000);
    TAP_EQ_INT(pasta_of_state(), 0);
    sbx_sandbox_stop(sb, NULL);
    sbx_sandbox_free(sb);
    sbx_provider_free(p);
    census_check(state_dir);
}

/* `--network` on run: nat gives the box pasta's resolver; a name is refused for now. */
static void test_cli_network(void)
{
    need_pasta();
    const char *bin = sbx_bin();
    char out[4096];
    TAP_EQ_INT(run_cmd(out, sizeof(out),
                       "%s run --provider linux --network nat -- cat /etc/resolv.conf", bin),
               0);
    TAP_EQ_STR(out, "nameserver " SBX_NAT_DNS "\n");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s run --provider linux --network none -- cat "
                                         "/proc/net/route",
                       bin),
               0);
    TAP_TRUE(!strstr(out, "eth0"));
    /* Any other name is a box-to-box network's, which must exist. */
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s create --provider linux --network backend", bin), 125);
    TAP_CONTAINS(out, "no network named 'backend' (create it with sbx network create backend");
    census_check(state_dir);
}

TAP_MAIN(TAP(test_egress_policy_parse), TAP_T(test_nat_reaches_an_allowed_host_port_only, 120),
         TAP_T(test_nat_host_closed_without_a_rule, 120),
         TAP_T(test_nat_resolves_through_the_given_resolver, 120), TAP_T(test_nat_refusals, 120),
         TAP_T(test_nat_raw_frames_stay_in_the_box, 240),
         TAP_T(test_nat_pasta_ends_with_the_box, 120), TAP_T(test_cli_network, 120))
