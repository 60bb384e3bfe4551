/*
 * [netw] Box-to-box networks' pure parts, without root or boxes
 * (src/providers/linux/networks.c): network names, set_hosts' entries, and
 * the /etc/hosts text every member gets; and the members' bookkeeping in a
 * plain directory (join, leave, addresses round robin, a member whose box
 * directory is gone dropped).
 */
#include "tap.h"
#include "common.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <stdio.h>
#include <sys/stat.h>

static void test_network_names(void)
{
    static const char *const ok[] = { "ep1", "a", "A.b_c-d", "0net" };
    static const char *const bad[] = { "none", "host", "nat", "", "-x", ".x", "a/b",
                                       "..", "a b", "x\n", NULL };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(ok); i++)
        TAP_TRUE(sbx__linux_net_name_ok(ok[i]));
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++)
        TAP_TRUE(!sbx__linux_net_name_ok(bad[i]));
    char longname[80];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    TAP_TRUE(!sbx__linux_net_name_ok(longname));
}

static int check(const char *text)
{
    json_t *j = json_loads(text, 0, NULL);
    sbx_error *e = NULL;
    int rc = sbx__linux_net_hosts_check(j, &e);
    sbx_error_free(e);
    json_decref(j);
    return rc;
}

static void test_hosts_entries_checked(void)
{
    TAP_EQ_INT(check("{}"), SBX_OK);
    TAP_EQ_INT(check("{\"db\": \"10.89.0.3\", \"v6.x_y\": \"fd00::1\"}"), SBX_OK);
    TAP_EQ_INT(check("[]"), SBX_EINVAL);
    TAP_EQ_INT(check("{\"a b\": \"10.0.0.1\"}"), SBX_EINVAL);
    TAP_EQ_INT(check("{\"x\\n1.2.3.4 evil\": \"10.0.0.1\"}"), SBX_EINVAL);
    TAP_EQ_INT(check("{\"x\": \"10.0.0.1 evil\"}"), SBX_EINVAL);
    TAP_EQ_INT(check("{\"x\": \"db.local\"}"), SBX_EINVAL);
    TAP_EQ_INT(check("{\"x\": 7}"), SBX_EINVAL);
    TAP_EQ_INT(check("{\"-x\": \"10.0.0.1\"}"), SBX_EINVAL);
    /* 256 entries are fine, 257 are not. */
    json_t *many = json_object();
    char k[16];
    for (int i = 0; i < 257; i++) {
        snprintf(k, sizeof(k), "h%d", i);
        json_object_set_new(many, k, json_string("10.0.0.1"));
        TAP_EQ_INT(sbx__linux_net_hosts_check(many, NULL), i < 256 ? SBX_OK : SBX_EINVAL);
    }
    json_decref(many);
}

static void test_hosts_text(void)
{
    json_t *ms = json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:s}]", "id", "sbx-000000000001",
                           "hostname", "web", "address", "10.89.0.2", "id", "sbx-000000000002",
                           "hostname", "sbx-000000000002", "address", "10.89.0.3");
    json_t *self = json_pack("{s:s, s:s, s:s, s:{s:s}}", "id", "sbx-000000000002", "hostname",
                             "sbx-000000000002", "address", "10.89.0.3", "hosts", "db",
                             "10.89.0.9");
    char *t = sbx__linux_net_hosts_text(ms, self);
    TAP_EQ_STR(t, "127.0.0.1\tlocalhost\n"
                  "::1\tlocalhost ip6-localhost ip6-loopback\n"
                  "10.89.0.2\tweb sbx-000000000001\n"
                  "10.89.0.3\tsbx-000000000002\n"
                  "10.89.0.9\tdb\n");
    free(t);
    json_decref(ms);
    json_decref(self);
}

/* A network directory by hand (no namespace: join never needs it). */
static void mk_network(const char *dir)
{
    char p[1024];
    TAP_EQ_INT(mkdir(dir, 0700), 0);
    snprintf(p, sizeof(p), "%s/members", dir);
    TAP_EQ_INT(mkdir(p, 0700), 0);
    snprintf(p, sizeof(p), "%s/network.json", dir);
    const char *rec = "{\"name\": \"n\", \"index\": 7, \"subnet\": \"10.89.7.0/24\"}";
    TAP_EQ_INT(sbx__write_file_atomic(p, rec, strlen(rec), 0600), 0);
}

static char *join(const char *net, const char *id, const char *box_dir)
{
    char *addr = NULL;
    unsigned prefix = 0;
    sbx_error *e = NULL;
    TAP_EQ_INT(mkdir(box_dir, 0700), 0);
    if (sbx__linux_net_join(net, id, id, box_dir, &addr, &prefix, &e) < 0)
        TAP_FAIL("join: %s", sbx_error_message(e));
    TAP_EQ_INT((int)prefix, 24);
    return addr;
}

static void test_join_leave_bookkeeping(void)
{
    char net[600], a[600], b[600], c[600], p[700];
    snprintf(net, sizeof(net), "%s/net", tap_tmpdir());
    snprintf(a, sizeof(a), "%s/a", tap_tmpdir());
    snprintf(b, sizeof(b), "%s/b", tap_tmpdir());
    snprintf(c, sizeof(c), "%s/c", tap_tmpdir());
    mk_network(net);
    char *aa = join(net, "sbx-00000000000a", a);
    char *ba = join(net, "sbx-00000000000b", b);
    TAP_EQ_STR(aa, "10.89.7.2");
    TAP_EQ_STR(ba, "10.89.7.3");
    /* Both hosts files name both boxes. */
    char *text = NULL;
    snprintf(p, sizeof(p), "%s/hosts", a);
    TAP_EQ_INT(sbx__read_file(p, &text, NULL), 0);
    TAP_CONTAINS(text, "10.89.7.3\tsbx-00000000000b");
    free(text);
    /* b leaves: a's file forgets it; the next box does not get b's address back at once. */
    sbx__linux_net_leave(net, "sbx-00000000000b");
    TAP_EQ_INT(sbx__read_file(p, &text, NULL), 0);
    TAP_TRUE(strstr(text, "sbx-00000000000b") == NULL);
    free(text);
    char *ca = join(net, "sbx-00000000000c", c);
    TAP_EQ_STR(ca, "10.89.7.4");
    /* The largest set_hosts a member may keep still reads back. */
    json_t *big = json_object();
    char name[260], key[300];
    memset(name, 'n', 240);
    name[240] = 0;
    for (int i = 0; i < 256; i++) {
        snprintf(key, sizeof(key), "%s%d", name, i);
        json_object_set_new(big, key, json_string("fd00:1234:5678:9abc:def0:1234:5678:9abc"));
    }
    TAP_EQ_INT(sbx__linux_net_hosts_check(big, NULL), SBX_OK);
    json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", "sbx-00000000000c", "hostname",
                          "sbx-00000000000c", "address", "10.89.7.4", "box_dir", c, "hosts", big);
    TAP_EQ_INT(sbx__linux_net_write_member(net, m), 0);
    json_decref(m);
    json_t *all = sbx__linux_net_members(net);
    TAP_EQ_INT((int)json_array_size(all), 2);
    json_decref(all);
    /* a's box directory goes without a leave (a killed shim): the next look drops it. */
    TAP_EQ_INT(sbx__rm_rf(a), 0);
    json_t *ms = sbx__linux_net_members(net);
    TAP_EQ_INT((int)json_array_size(ms), 1);
    json_decref(ms);
    free(aa);
    free(ba);
    free(ca);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP(test_network_names),
        TAP(test_hosts_entries_checked),
        TAP(test_hosts_text),
        TAP(test_join_leave_bookkeeping),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
