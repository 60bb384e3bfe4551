/*
 * [netw] The public calls of box-to-box networks (sbx.h): `sbx network
 * create|ls|rm` and the newer API's SupportsSandboxNetwork. The network's
 * layout and the members' bookkeeping are networks.c's (which the shim
 * links too; this file needs the provider's state).
 */
#include "providers/linux/linux.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


static char *store_of(const char *state_dir) { return sbx__printf("%s/networks", state_dir); }

static int name_error(const char *name, sbx_error **err)
{
    return sbx__set_error(err, SBX_EINVAL,
                          "'%s' is not a network name (1-64 letters, digits, '_', '.', '-', "
                          "starting with a letter or digit; none, host and nat are network "
                          "modes)",
                          name ? name : "(null)");
}

/* --- the public calls ------------------------------------------------------------------ */

static int state_of(sbx_provider *p, const char *fn, const char **state_dir, sbx_error **err)
{
    int net;
    if (!p)
        return sbx__set_error(err, SBX_EINVAL, "%s: the provider is required", fn);
    if (!sbx__linux_provider_extras(p, state_dir, &net))
        return sbx__set_error(err, SBX_ENOTSUP, "%s: only the linux provider has box-to-box "
                                                "networks", fn);
    return SBX_OK;
}

static int out_json(json_t *j, char **json_out, sbx_error **err)
{
    if (!j)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    char *t = json_out ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (json_out && !t)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (json_out)
        *json_out = t;
    return SBX_OK;
}

/* What list and inspect show of the network at `dir` (locks it to read its members). */
static json_t *network_json(const char *dir)
{
    json_t *rec = sbx__linux_net_record(dir);
    if (!rec)
        return NULL;
    _cleanup_close_ int lock = sbx__linux_net_lock(dir);
    _cleanup_json_ json_t *ms = lock >= 0 ? sbx__linux_net_members(dir) : json_array();
    json_object_del(rec, "index");
    json_object_set_new(rec, "boxes", sbx__linux_net_member_ids(ms));
    return rec;
}

struct mk_netns {
    const char *path;
    int err;
    const char *step;
};

/*
 * In a thread of its own: unshare(CLONE_NEWNET) moves only the calling
 * thread, so the caller's threads keep the host's network. The bind mount
 * (in the caller's mount namespace, which the thread shares) keeps the
 * namespace alive after the thread ends, as `ip netns add` does; the
 * bridge is made from inside it.
 */
static void *mk_netns_thread(void *arg)
{
    struct mk_netns *m = arg;
    if (unshare(CLONE_NEWNET) < 0) {
        m->err = errno;
        m->step = "cannot make a network namespace";
        return NULL;
    }
    if (mount("/proc/thread-self/ns/net", m->path, "none", MS_BIND, NULL) < 0) {
        m->err = errno;
        m->step = "cannot bind-mount the network namespace";
        return NULL;
    }
    /*
     * No IPv6 on the network's own devices (the bridge, the veths' bridge
     * ends): nothing of the namespace gets an address boxes could talk to,
     * and the first box's port does not wait on the bridge's address
     * setup. Best effort (a kernel without IPv6 has no such file). The
     * boxes' own eth0 keep their link-local IPv6, which reaches only peers.
     */
    static const char *const v6[] = { "/proc/sys/net/ipv6/conf/all/disable_ipv6",
                                      "/proc/sys/net/ipv6/conf/default/disable_ipv6" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(v6); i++) {
        int fd = open(v6[i], O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t w = write(fd, "1", 1);
            (void)w;
            close(fd);
        }
    }
    void *nl = sbx__nl_open();
    if (!nl || sbx__nl_bridge_add(nl, SBX_NET_BRIDGE) < 0) {
        m->err = errno;
        m->step = "cannot make the network's bridge";
    }
    sbx__nl_close(nl);
    return NULL;
}

/* Removes a network's directory, its namespace's bind mount first. */
static void net_destroy(int storefd, const char *dir, const char *name)
{
    _cleanup_free_ char *ns = sbx__printf("%s/netns", dir);
    /* MNT_DETACH: a process that has it open keeps it; the namespace dies with the last. */
    if (ns)
        umount2(ns, MNT_DETACH | UMOUNT_NOFOLLOW);
    sbx__rm_rf_at(storefd, name);
}

int sbx_provider_network_create(sbx_provider *p, const char *name, char **json_out,
                                sbx_error **err)
{
    const char *sd;
    int rc = state_of(p, "sbx_provider_network_create", &sd, err);
    if (rc < 0)
        return rc;
    if (!sbx__linux_net_name_ok(name))
        return name_error(name, err);
    _cleanup_free_ char *store = store_of(sd), *dir = sbx__linux_net_dir(sd, name);
    if (!store || !dir)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if ((rc = sbx__private_dir(sd, true, NULL, err)) < 0 ||
        (rc = sbx__private_dir(store, true, NULL, err)) < 0)
        return rc;
    _cleanup_close_ int storefd = open(store, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    _cleanup_close_ int lock = sbx__linux_net_lock(store);
    if (storefd < 0 || lock < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot lock the network store %s", store);
    if (sbx__linux_net_check(sd, name, NULL) == SBX_OK)
        return out_json(network_json(dir), json_out, err);
    /* A directory without a working record and namespace is what a failed create left. */
    net_destroy(storefd, dir, name);
    bool used[256] = { false };
    _cleanup_close_ int dfd = openat(storefd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d)
        dfd = -1;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (!sbx__linux_net_name_ok(de->d_name))
            continue;
        _cleanup_free_ char *od = sbx__linux_net_dir(sd, de->d_name);
        _cleanup_json_ json_t *r = od ? sbx__linux_net_record(od) : NULL;
        if (r)
            used[json_integer_value(json_object_get(r, "index"))] = true;
    }
    if (d)
        closedir(d);
    int index = 0;
    while (index < 256 && used[index])
        index++;
    if (index == 256)
        return sbx__set_error(err, SBX_ESTATE, "256 networks exist (10.89.0.0/16 is used up): "
                                               "remove one first");
    _cleanup_free_ char *ns = sbx__printf("%s/netns", dir);
    _cleanup_free_ char *mdir = sbx__printf("%s/members", dir);
    _cleanup_free_ char *recp = sbx__printf("%s/network.json", dir);
    if (!ns || !mdir || !recp)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int fd = -1;
    if (mkdir(dir, 0700) < 0 || mkdir(mdir, 0700) < 0 ||
        (fd = open(ns, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444)) < 0) {
        rc = sbx__set_errno(err, SBX_EIO, errno, "cannot create the network %s", dir);
        net_destroy(storefd, dir, name);
        return rc;
    }
    close(fd);
    struct mk_netns m = { .path = ns };
    pthread_t t;
    int pe = pthread_create(&t, NULL, mk_netns_thread, &m);
    if (pe == 0)
        pthread_join(t, NULL);
    else
        m.err = pe, m.step = "cannot start a thread";
    if (m.err) {
        rc = sbx__set_errno(err, m.err == EPERM ? SBX_EPERM : SBX_EIO, m.err,
                            "network %s: %s%s", name, m.step,
                            m.err == EPERM ? " (box-to-box networks need root: CAP_SYS_ADMIN "
                                             "and CAP_NET_ADMIN on the host)"
                                           : "");
        net_destroy(storefd, dir, name);
        return rc;
    }
    char subnet[32];
    snprintf(subnet, sizeof(subnet), "10.89.%d.0/24", index);
    _cleanup_json_ json_t *r = json_pack("{s:s, s:i, s:s, s:I}", "name", name, "index", index,
                                         "subnet", subnet, "created", (json_int_t)time(NULL));
    _cleanup_free_ char *text = r ? json_dumps(r, JSON_COMPACT) : NULL;
    if (!text || sbx__write_file_atomic(recp, text, strlen(text), 0600) < 0) {
        rc = sbx__set_errno(err, SBX_EIO, errno, "cannot write %s", recp);
        net_destroy(storefd, dir, name);
        return rc;
    }
    return out_json(network_json(dir), json_out, err);
}

int sbx_provider_network_inspect(sbx_provider *p, const char *name, char **json_out,
                                 sbx_error **err)
{
    const char *sd;
    int rc = state_of(p, "sbx_provider_network_inspect", &sd, err);
    if (rc < 0)
        return rc;
    if (!sbx__linux_net_name_ok(name))
        return name_error(name, err);
    _cleanup_free_ char *dir = sbx__linux_net_dir(sd, name);
    json_t *j = dir ? network_json(dir) : NULL;
    if (!j)
        return sbx__set_error(err, SBX_ENOENT, "no network named '%s' (sbx network ls lists "
                                               "them)", name);
    return out_json(j, json_out, err);
}

int sbx_provider_network_list(sbx_provider *p, char **json_out, sbx_error **err)
{
    const char *sd;
    int rc = state_of(p, "sbx_provider_network_list", &sd, err);
    if (rc < 0)
        return rc;
    if (!json_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_provider_network_list: json_out is required");
    _cleanup_free_ char *store = store_of(sd);
    if (!store)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    json_t *arr = json_array();
    DIR *d = opendir(store);
    struct dirent *de;
    while (arr && d && (de = readdir(d)) != NULL) {
        if (!sbx__linux_net_name_ok(de->d_name))
            continue;
        _cleanup_free_ char *dir = sbx__linux_net_dir(sd, de->d_name);
        json_t *j = dir ? network_json(dir) : NULL;
        if (j)
            json_array_append_new(arr, j);
    }
    if (d)
        closedir(d);
    return out_json(arr, json_out, err);
}

int sbx_provider_network_remove(sbx_provider *p, const char *name, sbx_error **err)
{
    const char *sd;
    int rc = state_of(p, "sbx_provider_network_remove", &sd, err);
    if (rc < 0)
        return rc;
    if (!sbx__linux_net_name_ok(name))
        return name_error(name, err);
    _cleanup_free_ char *store = store_of(sd), *dir = sbx__linux_net_dir(sd, name);
    if (!store || !dir)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_close_ int storefd = open(store, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (storefd < 0 || fstatat(storefd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISDIR(st.st_mode))
        return sbx__set_error(err, SBX_ENOENT, "no network named '%s' (sbx network ls lists "
                                               "them)", name);
    _cleanup_close_ int slock = sbx__linux_net_lock(store);
    _cleanup_close_ int lock = sbx__linux_net_lock(dir);
    if (slock < 0 || lock < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot lock the network %s", dir);
    _cleanup_json_ json_t *ms = sbx__linux_net_members(dir);
    if (json_array_size(ms) > 0) {
        _cleanup_json_ json_t *ids = sbx__linux_net_member_ids(ms);
        _cleanup_free_ char *t = ids ? json_dumps(ids, JSON_COMPACT) : NULL;
        return sbx__set_error(err, SBX_ESTATE,
                              "network '%s' is in use by box%s %s: stop %s first", name,
                              json_array_size(ms) > 1 ? "es" : "", t ? t : "?",
                              json_array_size(ms) > 1 ? "them" : "it");
    }
    net_destroy(storefd, dir, name);
    if (fstatat(storefd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot remove the network %s", dir);
    return SBX_OK;
}

int sbx_provider_validate_networking(sbx_provider *p, sbx_error **err)
{
    const char *sd;
    int rc = state_of(p, "validate_networking", &sd, err);
    if (rc < 0)
        return rc;
    /* A network namespace of the host's and a bridge in it: host root's privilege. */
    if (geteuid() != 0)
        return sbx__set_error(err, SBX_EPERM, "box-to-box networks of the linux provider need "
                                              "root (CAP_SYS_ADMIN and CAP_NET_ADMIN on the "
                                              "host); boxes without them have no network, or "
                                              "the host's");
    return SBX_OK;
}

/* The record of sandbox `sb`'s box, and its provider's state directory. */
static int box_record(sbx_sandbox *sb, const char *fn, const char **sd, json_t **rec,
                      sbx_error **err)
{
    const char *id = sbx_sandbox_id(sb);
    int rc = state_of(sbx_sandbox_provider(sb), fn, sd, err);
    if (rc < 0)
        return rc;
    if (!id || !sbx__linux_id_ok(id))
        return sbx__set_error(err, SBX_ESTATE, "%s: the sandbox is not started", fn);
    _cleanup_free_ char *p = sbx__printf("%s/boxes/%s/record.json", *sd, id);
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx__load_private_json(p, 1u << 22, rec, NULL) < 0)
        return sbx__set_error(err, SBX_ESTATE, "%s: box %s is stopped (no record)", fn, id);
    return SBX_OK;
}

int sbx_sandbox_network_address(sbx_sandbox *sb, char **addr_out, sbx_error **err)
{
    const char *sd;
    _cleanup_json_ json_t *rec = NULL;
    int rc = box_record(sb, "network_address", &sd, &rec, err);
    if (rc < 0)
        return rc;
    const char *net = json_string_value(json_object_get(rec, "net"));
    const char *a = json_string_value(json_object_get(rec, "address"));
    if (net && !strcmp(net, "host"))
        a = "127.0.0.1"; /* its services listen on the host's own addresses */
    if (!a)
        return sbx__set_error(err, SBX_ESTATE,
                              "network_address: box %s is in no network (network \"%s\"): "
                              "create it with provider_options.network NAME (sbx network "
                              "create NAME)",
                              sbx_sandbox_id(sb), net ? net : "none");
    if (!addr_out)
        return SBX_OK;
    if (!(*addr_out = strdup(a)))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}

int sbx_sandbox_set_hosts(sbx_sandbox *sb, const char *hosts_json, sbx_error **err)
{
    json_error_t je;
    _cleanup_json_ json_t *hosts = hosts_json ? json_loads(hosts_json, 0, &je) : NULL;
    if (!json_is_object(hosts))
        return sbx__set_error(err, SBX_EINVAL, "set_hosts: hosts must be a JSON object "
                                               "{\"name\": \"address\"}");
    int rc = sbx__linux_net_hosts_check(hosts, err);
    if (rc < 0)
        return rc;
    const char *sd;
    _cleanup_json_ json_t *rec = NULL;
    rc = box_record(sb, "set_hosts", &sd, &rec, err);
    if (rc < 0)
        return rc;
    const char *net = json_string_value(json_object_get(rec, "net"));
    const char *id = sbx_sandbox_id(sb);
    if (!net || !sbx__linux_net_name_ok(net) || !json_object_get(rec, "address"))
        return sbx__set_error(err, SBX_ESTATE,
                              "set_hosts: box %s is in no network: its /etc/hosts is written "
                              "for box-to-box networks (provider_options.network NAME)",
                              id);
    _cleanup_free_ char *dir = sbx__linux_net_dir(sd, net);
    if (!dir)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_close_ int lock = sbx__linux_net_lock(dir);
    if (lock < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot lock the network %s", dir);
    _cleanup_json_ json_t *ms = sbx__linux_net_members(dir);
    size_t i;
    json_t *m;
    json_array_foreach(ms, i, m)
    {
        if (strcmp(json_string_value(json_object_get(m, "id")), id))
            continue;
        json_object_set(m, "hosts", hosts);
        if (sbx__linux_net_write_member(dir, m) < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "cannot write the member record of %s",
                                  id);
        _cleanup_free_ char *t = sbx__linux_net_hosts_text(ms, m);
        if (!t || sbx__linux_net_write_hosts(json_string_value(json_object_get(m, "box_dir")), t) < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "cannot write the hosts of box %s", id);
        return SBX_OK;
    }
    return sbx__set_error(err, SBX_ESTATE, "set_hosts: box %s is not in network %s (stopped?)",
                          id, net);
}
