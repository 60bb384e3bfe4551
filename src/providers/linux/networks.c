/*
 * [netw] Box-to-box networks of the linux provider: the layout of a
 * network, and the boxes that join and leave one (provider_options.network
 * "NAME"). The public calls (`sbx network create|ls|rm`, the newer API's
 * SupportsSandboxNetwork) are networks_api.c's; the shim links this file.
 * docs/networking.md ("Box-to-box networks") is the user's side.
 *
 * A network is a directory in the provider's state directory:
 *
 *   <state>/networks/<name>/network.json   {"name", "index", "subnet", "created"} (0600)
 *   <state>/networks/<name>/netns          its network namespace, bind-mounted (as `ip netns`)
 *   <state>/networks/<name>/members/<id>.json  {"id", "hostname", "address", "box_dir",
 *                                           "hosts"}: one per box in it
 *   <state>/networks/<name>/.lock          flock'd while members change
 *   <state>/networks/<name>/next           the next address to try (round robin)
 *   <state>/networks/.lock                 flock'd while networks are made and removed
 *
 * The namespace holds one bridge (SBX_NET_BRIDGE) and no address, no route
 * and no other device: frames move between the boxes plugged into the
 * bridge and nowhere else. Subnets are 10.89.<index>.0/24, one index (0-255)
 * per network; a box gets .2-.254.
 *
 * A box's shim (host root) joins the network before the box's clone (an
 * address, a member record, hosts files), plugs a veth pair into it after
 * the clone (netlink: one end on the bridge, the other made straight in the
 * box's namespace) and leaves at teardown. The box's first process sets its
 * end's address itself, inside its own namespace (src/shim/box.c).
 *
 * Names: every member's <box_dir>/hosts (host root's, bound read-only at the
 * box's /etc/hosts) lists every member by hostname and id, and what
 * set_hosts added for that box. It is rewritten in place (a bind mount pins
 * the inode, a rename would not show) whenever a box joins or leaves.
 */
#include "providers/linux/linux.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

/* A member record holds at most 256 set_hosts entries of at most ~300 bytes each. */
#define NET_RECORD_MAX (256u << 10)
#define NET_MAX_HOSTS 256

/* --- names, paths, records ------------------------------------------------------ */

bool sbx__linux_net_name_ok(const char *n)
{
    size_t len = n ? strlen(n) : 0;
    if (len < 1 || len > 64 || !isalnum((unsigned char)n[0]))
        return false;
    /* The network modes a box may name instead of a network. */
    if (!strcmp(n, "none") || !strcmp(n, "host") || !strcmp(n, "nat"))
        return false;
    return strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == len;
}

char *sbx__linux_net_dir(const char *state_dir, const char *name)
{
    return sbx__printf("%s/networks/%s", state_dir, name);
}

/* Whether `path` is a network namespace (the bind mount of one), not a plain file. */
static bool is_netns(const char *path)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct statfs fs;
    return fd >= 0 && fstatfs(fd, &fs) == 0 && fs.f_type == NSFS_MAGIC;
}

json_t *sbx__linux_net_record(const char *dir)
{
    _cleanup_free_ char *p = sbx__printf("%s/network.json", dir);
    json_t *j = NULL;
    if (!p || sbx__load_private_json(p, NET_RECORD_MAX, &j, NULL) < 0)
        return NULL;
    if (!json_is_integer(json_object_get(j, "index")) ||
        json_integer_value(json_object_get(j, "index")) < 0 ||
        json_integer_value(json_object_get(j, "index")) > 255) {
        json_decref(j);
        return NULL;
    }
    return j;
}

int sbx__linux_net_check(const char *state_dir, const char *name, sbx_error **err)
{
    _cleanup_free_ char *dir = sbx__linux_net_dir(state_dir, name);
    _cleanup_free_ char *ns = dir ? sbx__printf("%s/netns", dir) : NULL;
    if (!ns)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_json_ json_t *rec = sbx__linux_net_record(dir);
    if (!rec || !is_netns(ns))
        return sbx__set_error(err, SBX_ECREATE,
                              "no network named '%s' (create it with sbx network create %s; sbx "
                              "network ls lists them)",
                              name, name);
    return SBX_OK;
}

/* An exclusive lock on `dir`/.lock, held until the fd closes; -1 on failure. */
int sbx__linux_net_lock(const char *dir)
{
    /* ".lock": no network name starts with a dot, so the store's lock is never one. */
    _cleanup_free_ char *p = sbx__printf("%s/.lock", dir);
    int fd = p ? open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
    if (fd >= 0 && flock(fd, LOCK_EX) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/*
 * The members of the network at `dir`, as a JSON array. A member whose box
 * directory is gone (its shim was killed before it could leave) is dropped
 * here: its address is free again. Called with the lock held.
 */
json_t *sbx__linux_net_members(const char *dir)
{
    json_t *out = json_array();
    _cleanup_free_ char *mdir = sbx__printf("%s/members", dir);
    DIR *d = mdir ? opendir(mdir) : NULL;
    struct dirent *de;
    while (out && d && (de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".json"))
            continue;
        _cleanup_free_ char *p = sbx__printf("%s/%s", mdir, de->d_name);
        json_t *m = NULL;
        if (!p || sbx__load_private_json(p, NET_RECORD_MAX, &m, NULL) < 0)
            continue;
        const char *bd = json_string_value(json_object_get(m, "box_dir"));
        const char *id = json_string_value(json_object_get(m, "id"));
        const char *addr = json_string_value(json_object_get(m, "address"));
        struct stat st;
        if (!bd || !id || !addr || (stat(bd, &st) < 0 && errno == ENOENT)) {
            unlinkat(dirfd(d), de->d_name, 0);
            json_decref(m);
            continue;
        }
        json_array_append_new(out, m);
    }
    if (d)
        closedir(d);
    return out;
}

json_t *sbx__linux_net_member_ids(const json_t *ms)
{
    json_t *ids = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
        json_array_append(ids, json_object_get(m, "id"));
    return ids;
}

int sbx__linux_net_write_member(const char *dir, const json_t *m)
{
    const char *id = json_string_value(json_object_get(m, "id"));
    _cleanup_free_ char *p = sbx__printf("%s/members/%s.json", dir, id);
    _cleanup_free_ char *text = json_dumps(m, JSON_COMPACT);
    if (!p || !text) {
        errno = ENOMEM;
        return -1;
    }
    return sbx__write_file_atomic(p, text, strlen(text), 0600);
}

/* The /etc/hosts of member `self`: loopback, every member, then its own extra entries. */
char *sbx__linux_net_hosts_text(const json_t *ms, const json_t *self)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    len = (size_t)snprintf(buf, cap, "127.0.0.1\tlocalhost\n"
                                     "::1\tlocalhost ip6-localhost ip6-loopback\n");
    json_t *extra = json_object_get(self, "hosts");
    size_t n = json_array_size(ms) + json_object_size(extra);
    for (size_t i = 0; i < n; i++) {
        char line[600];
        if (i < json_array_size(ms)) {
            const json_t *m = json_array_get(ms, i);
            const char *id = json_string_value(json_object_get(m, "id"));
            const char *h = json_string_value(json_object_get(m, "hostname"));
            const char *a = json_string_value(json_object_get(m, "address"));
            if (!h || !strcmp(h, id))
                snprintf(line, sizeof(line), "%s\t%s\n", a, id);
            else
                snprintf(line, sizeof(line), "%s\t%s %s\n", a, h, id);
        } else {
            /* json_object_iter in order: the entries as set_hosts gave them. */
            void *it = json_object_iter(extra);
            for (size_t k = json_array_size(ms); it && k < i; k++)
                it = json_object_iter_next(extra, it);
            if (!it)
                continue;
            snprintf(line, sizeof(line), "%s\t%s\n",
                     json_string_value(json_object_iter_value(it)), json_object_iter_key(it));
        }
        size_t l = strlen(line);
        if (len + l + 1 > cap) {
            char *nb = realloc(buf, cap * 2 + l);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap = cap * 2 + l;
        }
        memcpy(buf + len, line, l + 1);
        len += l;
    }
    return buf;
}

/*
 * Rewrites <box_dir>/hosts in place: the box binds this inode at /etc/hosts.
 * Longer content first, then the cut: a reader at that moment sees the new
 * lines and at most a stale tail, never an empty file.
 */
int sbx__linux_net_write_hosts(const char *box_dir, const char *text)
{
    _cleanup_free_ char *p = sbx__printf("%s/hosts", box_dir);
    _cleanup_close_ int fd = p ? open(p, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
    size_t len = strlen(text);
    if (fd < 0 || fchmod(fd, 0644) < 0 || pwrite(fd, text, len, 0) != (ssize_t)len ||
        ftruncate(fd, (off_t)len) < 0)
        return -1;
    return 0;
}

static void rewrite_all(const json_t *ms)
{
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        _cleanup_free_ char *t = sbx__linux_net_hosts_text(ms, m);
        if (t)
            sbx__linux_net_write_hosts(json_string_value(json_object_get(m, "box_dir")), t);
    }
}

/* An /etc/hosts name: RFC 1123 labels, as Docker's --add-host takes. */
static bool host_name_ok(const char *n)
{
    size_t len = strlen(n);
    return len >= 1 && len <= 253 && n[0] != '-' && n[0] != '.' &&
           strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") == len;
}

int sbx__linux_net_hosts_check(const json_t *hosts, sbx_error **err)
{
    if (!json_is_object(hosts))
        return sbx__set_error(err, SBX_EINVAL, "set_hosts: hosts must be a JSON object "
                                               "{\"name\": \"address\"}");
    if (json_object_size(hosts) > NET_MAX_HOSTS)
        return sbx__set_error(err, SBX_EINVAL, "set_hosts: at most %d entries",
                              NET_MAX_HOSTS);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)hosts, k, v)
    {
        const char *a = json_string_value(v);
        unsigned char buf[16];
        if (!host_name_ok(k))
            return sbx__set_error(err, SBX_EINVAL,
                                  "set_hosts: '%.64s' is not a host name (letters, digits, "
                                  "'-', '.', '_', at most 253)",
                                  k);
        if (!a || (inet_pton(AF_INET, a, buf) != 1 && inet_pton(AF_INET6, a, buf) != 1))
            return sbx__set_error(err, SBX_EINVAL,
                                  "set_hosts: the address of '%s' must be an IPv4 or IPv6 "
                                  "address (got %.64s)",
                                  k, a ? a : "a non-string");
    }
    return SBX_OK;
}

/* --- a box joins and leaves (the shim, host root) ------------------------------------ */

int sbx__linux_net_join(const char *dir, const char *id, const char *hostname,
                        const char *box_dir, char **addr, unsigned *prefix, sbx_error **err)
{
    _cleanup_json_ json_t *rec = sbx__linux_net_record(dir);
    if (!rec)
        return sbx__set_error(err, SBX_ECREATE, "the network %s is gone or damaged (no "
                                                "network.json): create it again", dir);
    _cleanup_close_ int lock = sbx__linux_net_lock(dir);
    if (lock < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot lock the network %s", dir);
    _cleanup_json_ json_t *ms = sbx__linux_net_members(dir);
    if (!ms)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    bool used[256] = { false };
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        const char *a = json_string_value(json_object_get(m, "address"));
        const char *dot = a ? strrchr(a, '.') : NULL;
        if (dot)
            used[strtoul(dot + 1, NULL, 10) & 255] = true;
    }
    /*
     * Round robin from after the last address given, not the lowest free:
     * a stopped box's namespace (and the ARP entries naming its end) may
     * outlive its stop by a moment, and a new box must not take its
     * address then.
     */
    unsigned start = 2, host = 0;
    _cleanup_free_ char *nextp = sbx__printf("%s/next", dir);
    char *text = NULL;
    if (nextp && sbx__read_file(nextp, &text, NULL) == 0) {
        unsigned long v = strtoul(text, NULL, 10);
        start = v >= 2 && v <= 254 ? (unsigned)v : 2;
    }
    free(text);
    for (unsigned k = 0; k < 253 && !host; k++) {
        unsigned h = 2 + (start - 2 + k) % 253;
        if (!used[h])
            host = h;
    }
    if (!host)
        return sbx__set_error(err, SBX_ECREATE, "the network %s is full (253 boxes)", dir);
    char next[16];
    snprintf(next, sizeof(next), "%u", host == 254 ? 2 : host + 1);
    if (!nextp || sbx__write_file_atomic(nextp, next, strlen(next), 0600) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot write %s/next", dir);
    char a[32];
    snprintf(a, sizeof(a), "10.89.%lld.%u",
             (long long)json_integer_value(json_object_get(rec, "index")), host);
    json_t *me = json_pack("{s:s, s:s, s:s, s:s, s:{}}", "id", id, "hostname", hostname,
                           "address", a, "box_dir", box_dir, "hosts");
    if (!me || json_array_append_new(ms, me) < 0)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx__linux_net_write_member(dir, me) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot write the member record of %s "
                                                       "in %s", id, dir);
    rewrite_all(ms);
    /* The box's own file must exist: it is bound at its /etc/hosts. */
    _cleanup_free_ char *mine = sbx__linux_net_hosts_text(ms, me);
    if (!mine || sbx__linux_net_write_hosts(box_dir, mine) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot write %s/hosts", box_dir);
    if (!(*addr = strdup(a)))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    *prefix = 24;
    return SBX_OK;
}

void sbx__linux_net_leave(const char *dir, const char *id)
{
    _cleanup_close_ int lock = sbx__linux_net_lock(dir);
    if (lock < 0)
        return;
    _cleanup_free_ char *p = sbx__printf("%s/members/%s.json", dir, id);
    if (p)
        unlink(p);
    _cleanup_json_ json_t *ms = sbx__linux_net_members(dir);
    rewrite_all(ms);
}

void sbx__linux_net_forget(const char *box_dir, const char *id)
{
    /* <state>/boxes/<id> -> <state>/networks */
    _cleanup_free_ char *sd = strdup(box_dir);
    char *slash = sd ? strrchr(sd, '/') : NULL;
    if (slash)
        *slash = 0;
    slash = sd ? strrchr(sd, '/') : NULL;
    if (!slash || strcmp(slash, "/boxes") || !sbx__linux_id_ok(id))
        return;
    *slash = 0;
    _cleanup_free_ char *store = sbx__printf("%s/networks", sd);
    DIR *d = store ? opendir(store) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (!sbx__linux_net_name_ok(de->d_name))
            continue;
        _cleanup_free_ char *m = sbx__printf("%s/%s/members/%s.json", store, de->d_name, id);
        struct stat st;
        if (m && lstat(m, &st) == 0) {
            _cleanup_free_ char *dir = sbx__printf("%s/%s", store, de->d_name);
            if (dir)
                sbx__linux_net_leave(dir, id);
        }
    }
    if (d)
        closedir(d);
}

void sbx__linux_net_port(const char *id, char name[16])
{
    const char *dash = strrchr(id, '-');
    snprintf(name, 16, "sbx%.12s", dash ? dash + 1 : id);
}

int sbx__linux_net_mac(const char *addr, unsigned char mac[6])
{
    struct in_addr in;
    if (!addr || inet_pton(AF_INET, addr, &in) != 1)
        return -1;
    /* 0x0a: locally administered (bit 1), unicast (bit 0 clear); never a vendor's. */
    mac[0] = 0x0a;
    mac[1] = 0x58;
    memcpy(mac + 2, &in.s_addr, 4);
    return 0;
}

char *sbx__linux_net_port_rules(const char *id, const char *addr)
{
    unsigned char m[6];
    char port[16];
    if (sbx__linux_net_mac(addr, m) < 0)
        return NULL;
    sbx__linux_net_port(id, port);
    char mac[18];
    snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    /*
     * Ingress of the port's bridge end sees every frame the box sends (its
     * IP stack's, or a packet socket's), before the bridge learns or
     * forwards it. One chain per port, bound to that device: the kernel
     * releases it when the device goes with the box's namespace. IPv6 and
     * every other ethertype are dropped (the network is IPv4 only).
     */
    return sbx__printf("table netdev sbx {\n"
                       "\tchain %s {\n"
                       "\t\ttype filter hook ingress device \"%s\" priority 0; policy drop;\n"
                       "\t\tether saddr != %s drop\n"
                       "\t\tether type ip ip saddr %s accept\n"
                       "\t\tether type arp arp htype 1 arp ptype ip arp hlen 6 arp plen 4 "
                       "arp saddr ether %s arp saddr ip %s accept\n"
                       "\t}\n"
                       "}\n",
                       port, port, mac, addr, mac, addr);
}

int sbx__linux_net_attach(const char *dir, const char *id, const char *addr, pid_t pid,
                          sbx_error **err)
{
    _cleanup_free_ char *ns = sbx__printf("%s/netns", dir);
    if (!ns)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_close_ int own = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    _cleanup_close_ int nsfd = open(ns, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct statfs fs;
    if (own < 0 || nsfd < 0 || fstatfs(nsfd, &fs) < 0 || fs.f_type != NSFS_MAGIC)
        return sbx__set_error(err, SBX_ECREATE, "the network namespace %s is gone: remove the "
                                                "network and create it again", ns);
    /*
     * A netlink socket stays in the namespace it was made in: made in the
     * network's, it reaches the bridge there, and the shim goes back to its
     * own namespace at once (it is single-threaded; nothing else runs in
     * between). The veth's box end is made in the box's namespace by pid.
     */
    if (setns(nsfd, CLONE_NEWNET) < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno,
                              "cannot enter the network namespace %s (box-to-box networks need "
                              "root)", ns);
    void *nl = sbx__nl_open();
    int e = errno;
    int br = (int)if_nametoindex(SBX_NET_BRIDGE);
    if (setns(own, CLONE_NEWNET) < 0) {
        /* Never go on in the wrong namespace. */
        sbx__nl_close(nl);
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot return to the host's network "
                                                       "namespace");
    }
    if (!nl || br <= 0) {
        sbx__nl_close(nl);
        return sbx__set_errno(err, SBX_ECREATE, nl ? ENODEV : e,
                              "cannot reach the bridge of the network %s", dir);
    }
    /*
     * Named for the box, not its address: a stopped box's end may live on
     * for a moment in its dying namespace, and the next box's must not
     * collide with it. "sbx" and the id's 12 hex digits fit IFNAMSIZ.
     */
    char name[16];
    sbx__linux_net_port(id, name);
    unsigned char mac[6];
    if (sbx__linux_net_mac(addr, mac) < 0) {
        sbx__nl_close(nl);
        return sbx__set_error(err, SBX_ECREATE, "bad box address %.32s in the network %s",
                              addr ? addr : "(none)", dir);
    }
    int rc = sbx__nl_veth_add(nl, name, br, SBX_NET_BOX_IF, pid, mac);
    e = errno;
    sbx__nl_close(nl);
    if (rc < 0)
        return sbx__set_errno(err, SBX_ECREATE, e, "cannot plug the box into the network %s "
                                                   "(veth %s)", dir, name);
    return SBX_OK;
}

