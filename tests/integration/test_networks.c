/*
 * [netw] Box-to-box networks against real boxes (root): two boxes of one
 * network talk by id and by hostname, a box outside it and a box of another
 * network cannot reach them, the peers' /etc/hosts follows joins and
 * leaves, set_hosts and network_address, `sbx network rm` refused while
 * boxes are in it, and the CLI. Traffic only ever flows between the test's
 * own namespaces. Every test ends with the census: no box, no mount (the
 * networks' namespaces included), no sbx interface on the host.
 */
#include "tap.h"
#include "common.h"
#include "lib/proc.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include "core/internal.h"
#include "providers/linux/linux.h"
#include "kit/kit.h"

#include <signal.h>

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>

static sbx_sandbox *start_opts(sbx_provider *p, const char *opts)
{
    sbx_spec *s = spec_with(opts);
    sbx_sandbox *sb = start(p, s);
    sbx_spec_free(s);
    return sb;
}

static void net_create(sbx_provider *p, const char *name)
{
    sbx_error *e = NULL;
    char *out = NULL;
    if (sbx_provider_network_create(p, name, &out, &e) != SBX_OK)
        TAP_FAIL("network create %s: %s", name, sbx_error_message(e));
    TAP_CONTAINS(out, "\"subnet\":\"10.89.");
    free(out);
}

static void net_rm(sbx_provider *p, const char *name)
{
    sbx_error *e = NULL;
    if (sbx_provider_network_remove(p, name, &e) != SBX_OK)
        TAP_FAIL("network rm %s: %s", name, sbx_error_message(e));
}

static char *address(sbx_sandbox *sb)
{
    char *a = NULL;
    sbx_error *e = NULL;
    if (sbx_sandbox_network_address(sb, &a, &e) != SBX_OK)
        TAP_FAIL("network_address: %s", sbx_error_message(e));
    return a;
}

/* A one-line TCP server in the box on 0.0.0.0:8000 that answers "hi from NAME". */
static void serve(sbx_sandbox *sb, const char *name)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "setsid -f python3 -c 'import socket\n"
             "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
             "s.bind((\"0.0.0.0\", 8000)); s.listen(16); open(\"/tmp/up\", \"w\").close()\n"
             "while True:\n"
             "    c, _ = s.accept(); c.sendall(b\"hi from %s\\n\"); c.close()\n' "
             ">/dev/null 2>&1; "
             "for i in $(seq 100); do [ -e /tmp/up ] && exit 0; sleep 0.05; done; exit 1",
             name);
    output_of(sb, cmd, NULL);
}

/* What a connect from the box to HOST:8000 gets: the answer, or the error's name. */
static const char *fetch(sbx_sandbox *sb, const char *host)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "python3 -c 'import socket, sys\n"
             "try:\n"
             "    s = socket.create_connection((sys.argv[1], 8000), timeout=3)\n"
             "    print(s.recv(100).decode().strip())\n"
             "except OSError as e:\n"
             "    print(\"failed:\", type(e).__name__, e)\n' %s",
             host);
    return output_of(sb, cmd, NULL);
}

/* Nothing of this test's directory is mounted, no sbx interface on the host, census clean. */
static void all_gone(void)
{
    census_check(state_dir);
    TAP_EQ_INT(mounts_naming(tap_tmpdir()), 0);
    char out[4096];
    /* The bridge side of every veth lives in a network's namespace, never in the host's. */
    TAP_EQ_INT(run_cmd(out, sizeof(out), "ls /sys/class/net | grep -c '^sbx[0-9a-f]' || true"), 0);
    TAP_EQ_STR(out, "0\n");
}

/*
 * The devices in network `name`'s namespace other than lo and its bridge:
 * the bridge ends of its boxes' veths. Their removal follows the box
 * namespace's end, which the kernel finishes a moment after the stop:
 * looks a few times before answering non-zero.
 */
static int veths_in(const char *name, int want)
{
    char out[4096];
    int n = -1;
    for (int i = 0; i < 100 && n != want; i++) {
        if (i)
            usleep(50 * 1000);
        TAP_EQ_INT(run_cmd(out, sizeof(out),
                           "nsenter --net=%s/networks/%s/netns cat /proc/net/dev | "
                           "grep -c '^ *sbx[0-9a-f]\\{12\\}:' || true",
                           state_dir, name),
                   0);
        n = (int)strtol(out, NULL, 10); /* the count grep printed */
    }
    return n;
}

static void test_two_boxes_talk_by_name_others_cannot(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    net_create(p, "ep1");
    net_create(p, "ep2");
    sbx_sandbox *a = start_opts(p, "{\"network\": \"ep1\", \"hostname\": \"web\"}");
    sbx_sandbox *b = start_opts(p, "{\"network\": \"ep1\"}");
    sbx_sandbox *outside = start_opts(p, NULL);
    sbx_sandbox *other = start_opts(p, "{\"network\": \"ep2\"}");
    serve(a, "a");
    _cleanup_free_ char *addr = address(a);
    TAP_CONTAINS(addr, "10.89.");

    /* By hostname, by id, by address. */
    TAP_EQ_STR(fetch(b, "web"), "hi from a\n");
    TAP_EQ_STR(fetch(b, sbx_sandbox_id(a)), "hi from a\n");
    TAP_EQ_STR(fetch(b, addr), "hi from a\n");
    /* The box's hosts name its peers; it cannot change them. */
    const char *hosts = output_of(b, "cat /etc/hosts", NULL);
    TAP_CONTAINS(hosts, "web");
    TAP_CONTAINS(hosts, sbx_sandbox_id(a));
    int rc;
    output_of(b, "echo 1.2.3.4 evil >> /etc/hosts", &rc);
    TAP_NE_INT(rc, 0);

    /* A box without a network, and one of another network, reach nothing of ep1. */
    TAP_CONTAINS(fetch(outside, addr), "failed:");
    TAP_CONTAINS(fetch(outside, "web"), "failed:");
    TAP_CONTAINS(fetch(other, addr), "failed:");
    /* Nothing routes out of a network: no default route in its boxes. */
    TAP_EQ_STR(output_of(b, "grep -c '^eth0\t00000000' /proc/net/route || true", NULL), "0\n");

    /* rm refused while boxes are in it, naming them. */
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_provider_network_remove(p, "ep1", &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), sbx_sandbox_id(a));
    sbx_error_free(e);
    char *list = NULL;
    TAP_EQ_INT(sbx_provider_network_list(p, &list, NULL), SBX_OK);
    TAP_CONTAINS(list, sbx_sandbox_id(b));
    free(list);

    TAP_EQ_INT(veths_in("ep1", 2), 2);
    TAP_EQ_INT(veths_in("ep2", 1), 1);
    stop_free(a);
    stop_free(b);
    stop_free(outside);
    stop_free(other);
    /* The boxes' veths went with their namespaces: the bridges have no port left. */
    TAP_EQ_INT(veths_in("ep1", 0), 0);
    TAP_EQ_INT(veths_in("ep2", 0), 0);
    net_rm(p, "ep1");
    net_rm(p, "ep2");
    e = NULL;
    TAP_EQ_INT(sbx_provider_network_inspect(p, "ep1", NULL, &e), SBX_ENOENT);
    sbx_error_free(e);
    sbx_provider_free(p);
    all_gone();
}

static void test_hosts_follow_joins_and_leaves(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    net_create(p, "hj");
    sbx_sandbox *a = start_opts(p, "{\"network\": \"hj\"}");
    TAP_EQ_STR(output_of(a, "grep -c late /etc/hosts || true", NULL), "0\n");
    sbx_sandbox *b = start_opts(p, "{\"network\": \"hj\", \"hostname\": \"late\"}");
    /* a learns of b as it joins, and forgets it when it leaves. */
    TAP_CONTAINS(output_of(a, "getent hosts late", NULL), "late");
    stop_free(b);
    int rc;
    output_of(a, "getent hosts late", &rc);
    TAP_NE_INT(rc, 0);

    /* set_hosts: extra entries after the peers, replaced by the next call. */
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_set_hosts(a, "{\"db\": \"10.89.0.77\", \"v6\": \"fd00::1\"}", &e),
               SBX_OK);
    TAP_CONTAINS(output_of(a, "getent hosts db", NULL), "10.89.0.77");
    TAP_EQ_INT(sbx_sandbox_set_hosts(a, "{\"cache\": \"10.89.0.78\"}", NULL), SBX_OK);
    output_of(a, "getent hosts db", &rc);
    TAP_NE_INT(rc, 0);
    TAP_CONTAINS(output_of(a, "cat /etc/hosts", NULL), "10.89.0.78\tcache");
    /* Hostile entries: a newline in a name, a name that is not an address. */
    TAP_EQ_INT(sbx_sandbox_set_hosts(a, "{\"x\\n1.2.3.4 evil\": \"10.0.0.1\"}", &e), SBX_EINVAL);
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_set_hosts(a, "{\"x\": \"10.0.0.1 evil\"}", &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "IPv4 or IPv6");
    sbx_error_free(e);
    TAP_EQ_INT(sbx_sandbox_set_hosts(a, "[]", NULL), SBX_EINVAL);

    /* network_address and set_hosts of a box in no network. */
    sbx_sandbox *none = start_opts(p, NULL);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_network_address(none, NULL, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "in no network");
    sbx_error_free(e);
    TAP_EQ_INT(sbx_sandbox_set_hosts(none, "{}", NULL), SBX_ESTATE);
    TAP_EQ_INT(sbx_provider_validate_networking(p, NULL), SBX_OK);
    stop_free(none);
    stop_free(a);
    net_rm(p, "hj");
    sbx_provider_free(p);
    all_gone();
}

static void test_names_and_missing_networks(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_error *e = NULL;
    static const char *const bad[] = { "none", "host", "nat", "", "-x", "a/b", "..", "a b" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        TAP_EQ_INT(sbx_provider_network_create(p, bad[i], NULL, &e), SBX_EINVAL);
        sbx_error_free(e);
        e = NULL;
    }
    /* A box naming a network that does not exist fails its create, saying what to do. */
    sbx_spec *s = sbx_spec_new();
    TAP_EQ_INT(sbx_spec_set_provider_options(s, "{\"network\": \"nope\"}", NULL), SBX_OK);
    start_fails(p, s, SBX_ECREATE, "sbx network create nope");
    sbx_spec_free(s);
    /* A box on the host's network: its services are at the host's loopback. */
    sbx_sandbox *h = start_opts(p, "{\"network\": \"host\"}");
    _cleanup_free_ char *ha = address(h);
    TAP_EQ_STR(ha, "127.0.0.1");
    stop_free(h);
    /* "lock" is a name like any other (the store's lock file is ".lock"). */
    net_create(p, "lock");
    net_create(p, "after-lock");
    net_rm(p, "lock");
    net_rm(p, "after-lock");
    /* create is idempotent; rm of a missing one is ENOENT. */
    net_create(p, "twice");
    net_create(p, "twice");
    net_rm(p, "twice");
    e = NULL;
    TAP_EQ_INT(sbx_provider_network_remove(p, "twice", &e), SBX_ENOENT);
    sbx_error_free(e);
    sbx_provider_free(p);
    all_gone();
}

/* Boxes come and go: each gets a working eth0, and no name or address collides. */
static void test_boxes_come_and_go(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    net_create(p, "reuse");
    for (int i = 0; i < 3; i++) {
        sbx_sandbox *a = start_opts(p, "{\"network\": \"reuse\"}");
        _cleanup_free_ char *addr = address(a);
        TAP_CONTAINS(addr, "10.89.");
        TAP_CONTAINS(output_of(a, "cat /sys/class/net/eth0/operstate", NULL), "up");
        stop_free(a);
    }
    net_rm(p, "reuse");
    sbx_provider_free(p);
    all_gone();
}

struct fwd {
    sbx_sandbox *sb;
    const char *target;
    int cancel_r;
    int rc;
    char msg[512];
};

static void *fwd_thread(void *arg)
{
    struct fwd *w = arg;
    int ports[] = { 8000 };
    sbx_error *e = NULL;
    w->rc = sbx_sandbox_forward_ports(w->sb, w->target, ports, 1, "/tmp/fwd-ready", w->cancel_r,
                                      &e);
    snprintf(w->msg, sizeof(w->msg), "%s", e ? sbx_error_message(e) : "");
    sbx_error_free(e);
    return NULL;
}

/* forward_ports: b's own 127.0.0.1:8000 reaches a's server, until cancelled. */
static void test_forward_ports(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    net_create(p, "fp");
    sbx_sandbox *a = start_opts(p, "{\"network\": \"fp\"}");
    sbx_sandbox *b = start_opts(p, "{\"network\": \"fp\"}");
    serve(a, "a");
    _cleanup_free_ char *addr = address(a);
    TAP_CONTAINS(fetch(b, "127.0.0.1"), "failed:");
    int cancel[2];
    TAP_EQ_INT(pipe2(cancel, O_CLOEXEC), 0);
    struct fwd w = { .sb = b, .target = addr, .cancel_r = cancel[0] };
    pthread_t t;
    TAP_EQ_INT(pthread_create(&t, NULL, fwd_thread, &w), 0);
    output_of(b, "for i in $(seq 200); do [ -e /tmp/fwd-ready ] && exit 0; sleep 0.05; done; exit 1", NULL);
    for (int i = 0; i < 5; i++)
        TAP_EQ_STR(fetch(b, "127.0.0.1"), "hi from a\n");
    TAP_EQ_INT(write(cancel[1], "x", 1), 1);
    pthread_join(t, NULL);
    if (w.rc != SBX_OK)
        TAP_FAIL("forward_ports: %d %s", w.rc, w.msg);
    /* Cancelled: nothing listens in b any more. */
    TAP_CONTAINS(fetch(b, "127.0.0.1"), "failed:");
    close(cancel[0]);
    close(cancel[1]);
    /* Refusals: a bad target, a port out of range, a taken port. */
    int ports[] = { 8000 }, bad[] = { 0 };
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_forward_ports(b, "web", ports, 1, NULL, 0, &e), SBX_EINVAL);
    sbx_error_free(e);
    TAP_EQ_INT(sbx_sandbox_forward_ports(b, addr, bad, 1, NULL, 0, NULL), SBX_EINVAL);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_forward_ports(a, addr, ports, 1, NULL, 0, &e), SBX_ESTATE);
    TAP_CONTAINS(sbx_error_message(e), "taken");
    sbx_error_free(e);
    stop_free(a);
    stop_free(b);
    net_rm(p, "fp");
    sbx_provider_free(p);
    all_gone();
}

/* A box whose shim was killed: stopping it (or gc) takes it out of its peers' names. */
static void test_killed_shim_forgotten_at_stop(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    net_create(p, "kill");
    sbx_sandbox *a = start_opts(p, "{\"network\": \"kill\", \"hostname\": \"victim\"}");
    sbx_sandbox *b = start_opts(p, "{\"network\": \"kill\"}");
    TAP_CONTAINS(output_of(b, "getent hosts victim", NULL), "victim");
    char box_dir[1024];
    snprintf(box_dir, sizeof(box_dir), "%s/boxes/%s", state_dir, sbx_sandbox_id(a));
    sbx_linux_record rec;
    sbx_error *e = NULL;
    if (sbx__linux_record_read(box_dir, &rec, &e) < 0)
        TAP_FAIL("record: %s", sbx_error_message(e));
    pid_t shim = rec.shim_pid;
    sbx__linux_record_free(&rec);
    TAP_TRUE(shim > 0);
    TAP_EQ_INT(kill(shim, SIGKILL), 0);
    for (int i = 0; i < 300 && kill(shim, 0) == 0; i++)
        usleep(20 * 1000);
    /* Its shim could not leave: the peer still names it. Stopping it cleans up. */
    TAP_CONTAINS(output_of(b, "getent hosts victim", NULL), "victim");
    sbx_sandbox_stop(a, NULL);
    sbx_sandbox_free(a);
    int rc;
    output_of(b, "getent hosts victim", &rc);
    TAP_NE_INT(rc, 0);
    stop_free(b);
    net_rm(p, "kill");
    sbx_provider_free(p);
    all_gone();
}

static void test_cli(void)
{
    need_boxes();
    const char *sbx = sbx_bin();
    char out[8192];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s network create cli1", sbx), 0);
    TAP_EQ_STR(out, "cli1\n");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s create --network cli1", sbx), 0);
    char id[128];
    snprintf(id, sizeof(id), "%.*s", (int)strcspn(out, "\n"), out);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s network ls --json", sbx), 0);
    TAP_CONTAINS(out, id);
    TAP_CONTAINS(out, "\"name\": \"cli1\"");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s run --network cli1 -- getent hosts %s", sbx, id),
               0);
    TAP_CONTAINS(out, "10.89.");
    TAP_NE_INT(run_cmd(out, sizeof(out), "%s network rm cli1 2>&1", sbx), 0);
    TAP_CONTAINS(out, "in use by box");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s stop %s", sbx, id), 0);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s network rm cli1", sbx), 0);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s network ls -q", sbx), 0);
    TAP_EQ_STR(out, "");
    TAP_EQ_INT(run_cmd(out, sizeof(out), "%s run --network 'a b' -- true 2>&1", sbx), 125);
    all_gone();
}

/* The MAC of a box's eth0, as "xx:xx:xx:xx:xx:xx" (a copy). */
static char *mac_of(sbx_sandbox *sb)
{
    char *m = strdup(output_of(sb, "cat /sys/class/net/eth0/address", NULL));
    if (!m)
        TAP_FAIL("out of memory");
    m[strcspn(m, "\n")] = 0;
    TAP_EQ_INT((int)strlen(m), 17);
    return m;
}

/*
 * Issue #21: root in box A (CAP_NET_RAW, as Docker's boxes) writes frames on
 * a packet socket claiming box B's address, at A's MAC and at B's. Box C,
 * which talked to B before, must keep B's MAC for B's address and receive
 * none of the forged datagrams; A and B still talk. The frames go before a
 * datagram of A's own: once C has that one, it has seen all that came
 * through before it (one port, one queue), so nothing waits on a clock.
 */
static void test_no_spoofing_on_a_network(void)
{
    need_boxes();
    char *probe = NULL;
    size_t plen = 0;
    if (sbx__read_file("tests/integration/arp_spoof_probe.py", &probe, &plen) < 0)
        TAP_FAIL("cannot read tests/integration/arp_spoof_probe.py: %s", strerror(errno));
    sbx_provider *p = provider(NULL);
    net_create(p, "arp");
    sbx_sandbox *a = start_opts(p, "{\"network\": \"arp\"}");
    sbx_sandbox *b = start_opts(p, "{\"network\": \"arp\"}");
    sbx_sandbox *c = start_opts(p, "{\"network\": \"arp\"}");
    _cleanup_free_ char *aip = address(a), *bip = address(b), *cip = address(c);
    _cleanup_free_ char *amac = mac_of(a), *bmac = mac_of(b), *cmac = mac_of(c);
    /* The MAC is the one sbx chose for the address (0a:58 and the address). */
    unsigned char m[6];
    TAP_EQ_INT(sbx__linux_net_mac(aip, m), 0);
    char want[18];
    snprintf(want, sizeof(want), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
             m[5]);
    TAP_EQ_STR(amac, want);

    /* C learns B's MAC by talking to it. */
    serve(b, "b");
    TAP_EQ_STR(fetch(c, bip), "hi from b\n");
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "grep '^%s ' /proc/net/arp", bip);
    TAP_CONTAINS(output_of(c, cmd, NULL), bmac);
    /* C records every datagram on UDP 9000 as "SOURCE PAYLOAD", until "done". */
    output_of(c, "setsid -f python3 -c 'import socket\n"
                 "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((\"0.0.0.0\", 9000))\n"
                 "open(\"/tmp/up\", \"w\").close()\n"
                 "f = open(\"/tmp/got.part\", \"w\")\n"
                 "while True:\n"
                 "    d, (h, _) = s.recvfrom(100); f.write(h + \" \" + d.decode() + \"\\n\"); f.flush()\n"
                 "    if d == b\"done\": break\n"
                 "f.close(); __import__(\"os\").rename(\"/tmp/got.part\", \"/tmp/got\")' "
                 ">/dev/null 2>&1; "
                 "for i in $(seq 100); do [ -e /tmp/up ] && exit 0; sleep 0.05; done; exit 1",
              NULL);

    sbx_error *e = NULL;
    if (sbx_sandbox_write_file(a, "/tmp/probe.py", probe, plen, 0644, &e) != SBX_OK)
        TAP_FAIL("write_file: %s", sbx_error_message(e));
    snprintf(cmd, sizeof(cmd), "python3 /tmp/probe.py %s %s %s %s 9000", bip, bmac, cip, cmac);
    TAP_EQ_STR(output_of(a, cmd, NULL), "sent\n");
    snprintf(cmd, sizeof(cmd),
             "python3 -c 'import socket; socket.socket(socket.AF_INET, "
             "socket.SOCK_DGRAM).sendto(b\"done\", (\"%s\", 9000))'",
             cip);
    output_of(a, cmd, NULL);
    const char *got = output_of(c, "for i in $(seq 200); do [ -e /tmp/got ] && break; "
                                   "sleep 0.05; done; cat /tmp/got",
                                NULL);
    _cleanup_free_ char *gotc = strdup(got);
    printf("# C received:\n%s", gotc);
    /* C still has B's MAC for B's address, not A's. */
    snprintf(cmd, sizeof(cmd), "grep '^%s ' /proc/net/arp", bip);
    const char *arp = output_of(c, cmd, NULL);
    printf("# C's ARP entry for B: %s", arp);
    TAP_TRUE(!strstr(arp, amac));
    TAP_CONTAINS(arp, bmac);
    /* C received A's own datagram and nothing else. */
    char line[64];
    snprintf(line, sizeof(line), "%s done\n", aip);
    TAP_EQ_STR(gotc, line);
    /* And A and B still talk, both ways. */
    serve(a, "a");
    TAP_EQ_STR(fetch(b, aip), "hi from a\n");
    TAP_EQ_STR(fetch(a, bip), "hi from b\n");
    TAP_EQ_STR(fetch(c, bip), "hi from b\n");
    char port[16];
    sbx__linux_net_port(sbx_sandbox_id(a), port);
    stop_free(a);
    stop_free(b);
    stop_free(c);
    TAP_EQ_INT(veths_in("arp", 0), 0);
    /* The port's filter went with the box (a delete of its chain finds none). */
    _cleanup_free_ char *nft = sbx__kit_find_helper("sbx-nft", "SBX_NFT");
    TAP_TRUE(nft != NULL);
    char out[4096];
    TAP_NE_INT(run_cmd(out, sizeof(out),
                       "echo 'delete chain netdev sbx %s' | nsenter --net=%s/networks/arp/netns "
                       "%s 2>&1",
                       port, state_dir, nft),
               0);
    TAP_CONTAINS(out, "No such file or directory");
    net_rm(p, "arp");
    sbx_provider_free(p);
    free(probe);
    all_gone();
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_two_boxes_talk_by_name_others_cannot),
        TAP(test_hosts_follow_joins_and_leaves),
        TAP(test_names_and_missing_networks),
        TAP(test_boxes_come_and_go),
        TAP(test_forward_ports),
        TAP(test_killed_shim_forgotten_at_stop),
        TAP(test_cli),
        TAP(test_no_spoofing_on_a_network),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
