/*
 * [netw] The few rtnetlink requests box-to-box networks need (libnl-route):
 * a bridge in a network's namespace, a veth pair from that bridge into a
 * box, and the box's address. docs/networking.md ("Box-to-box networks")
 * says what is built with them; networks.c and the shim call these. (libnl,
 * not libmnl: Debian ships libnl's static archives, and the shim is linked
 * statically.)
 *
 * Every request goes on a socket the caller opened in the network namespace
 * it means (a netlink socket stays in the namespace it was made in), waits
 * for the kernel's ack and returns -1 with an errno from it.
 */
#include "providers/linux/linux.h"

#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <net/if.h>

/* libnl's codes as errno, for the messages of the callers (sbx__set_errno). */
static int nl_errno(int rc)
{
    switch (rc < 0 ? -rc : rc) {
    case NLE_PERM:
    case NLE_NOACCESS: return EPERM;
    case NLE_EXIST: return EEXIST;
    case NLE_NODEV:
    case NLE_OBJ_NOTFOUND: return ENODEV;
    case NLE_BUSY: return EBUSY;
    case NLE_NOMEM: return ENOMEM;
    case NLE_INVAL: return EINVAL;
    case NLE_OPNOTSUPP: return EOPNOTSUPP;
    default: return EIO;
    }
}

static int fail(int rc)
{
    errno = nl_errno(rc);
    return -1;
}

void *sbx__nl_open(void)
{
    struct nl_sock *sk = nl_socket_alloc();
    if (!sk) {
        errno = ENOMEM;
        return NULL;
    }
    int rc = nl_connect(sk, NETLINK_ROUTE);
    if (rc < 0) {
        nl_socket_free(sk);
        fail(rc);
        return NULL;
    }
    return sk;
}

void sbx__nl_close(void *nl)
{
    if (nl)
        nl_socket_free(nl);
}

int sbx__nl_bridge_add(void *nl, const char *name)
{
    struct rtnl_link *l = rtnl_link_alloc();
    if (!l)
        return fail(NLE_NOMEM);
    rtnl_link_set_name(l, name);
    int rc = rtnl_link_set_type(l, "bridge");
    /* The kernel applies the flags to the new link: it comes up with no second request. */
    rtnl_link_set_flags(l, IFF_UP);
    if (rc >= 0)
        rc = rtnl_link_add(nl, l, NLM_F_CREATE | NLM_F_EXCL);
    rtnl_link_put(l);
    return rc < 0 ? fail(rc) : 0;
}

int sbx__nl_veth_add(void *nl, const char *name, int master, const char *peer, pid_t peer_pid,
                     const unsigned char peer_mac[6])
{
    struct rtnl_link *l = rtnl_link_veth_alloc();
    if (!l)
        return fail(NLE_NOMEM);
    struct nl_addr *mac = nl_addr_build(AF_LLC, peer_mac, 6);
    if (!mac) {
        rtnl_link_veth_release(l);
        return fail(NLE_NOMEM);
    }
    struct rtnl_link *p = rtnl_link_veth_get_peer(l);
    /* [netw] The box's MAC is chosen here, so the port filter knows it before the box runs. */
    rtnl_link_set_addr(p, mac);
    rtnl_link_set_name(l, name);
    rtnl_link_set_master(l, master);
    rtnl_link_set_flags(l, IFF_UP);
    /* The peer is made straight in the box's namespace: it never shows in this one. */
    rtnl_link_set_name(p, peer);
    rtnl_link_set_ns_pid(p, peer_pid);
    int rc = rtnl_link_add(nl, l, NLM_F_CREATE | NLM_F_EXCL);
    rtnl_link_put(p);
    rtnl_link_veth_release(l);
    nl_addr_put(mac);
    return rc < 0 ? fail(rc) : 0;
}

int sbx__nl_addr_up(void *nl, const char *ifname, const char *addr, unsigned prefix)
{
    int index = (int)if_nametoindex(ifname);
    if (index <= 0)
        return -1;
    char text[64];
    snprintf(text, sizeof(text), "%s/%u", addr, prefix);
    struct nl_addr *local = NULL;
    int rc = nl_addr_parse(text, AF_INET, &local);
    if (rc < 0)
        return fail(rc);
    struct rtnl_addr *a = rtnl_addr_alloc();
    if (!a) {
        nl_addr_put(local);
        return fail(NLE_NOMEM);
    }
    rtnl_addr_set_ifindex(a, index);
    rc = rtnl_addr_set_local(a, local);
    if (rc >= 0)
        rc = rtnl_addr_add(nl, a, NLM_F_CREATE | NLM_F_EXCL);
    rtnl_addr_put(a);
    nl_addr_put(local);
    if (rc < 0)
        return fail(rc);
    /* Up after the address: the subnet's route comes with it, and no other route is made. */
    struct rtnl_link *old = rtnl_link_alloc(), *up = rtnl_link_alloc();
    if (!old || !up) {
        rtnl_link_put(old);
        rtnl_link_put(up);
        return fail(NLE_NOMEM);
    }
    rtnl_link_set_ifindex(old, index);
    rtnl_link_set_flags(up, IFF_UP);
    rc = rtnl_link_change(nl, old, up, 0);
    rtnl_link_put(old);
    rtnl_link_put(up);
    return rc < 0 ? fail(rc) : 0;
}
