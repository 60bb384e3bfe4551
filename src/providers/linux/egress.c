/*
 * [nat] The egress policy of a `network: "nat"` box (docs/networking.md):
 * provider_options.egress parsed into rules, and the nftables ruleset that
 * enforces them in the box's own network namespace.
 *
 * The rules match destination addresses and ports, never names: a filter
 * in the box's kernel sees packets, and a name's addresses change. The
 * ruleset is installed by the shim (as host root, through sbx-nft and
 * libnftables) before the box's first process runs and before pasta
 * connects the box to anything; the box never holds NET_ADMIN, so it cannot
 * change it.
 *
 * The same parser runs twice: in the provider, for the user's error, and in
 * the shim, which trusts nothing it is sent.
 */
#include "providers/linux/linux.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* A decimal port 1..65535, all of `s[0..len)`. */
static int port_of(const char *s, size_t len)
{
    if (len == 0 || len > 5)
        return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v >= 1 && v <= 65535 ? v : -1;
}

int sbx__egress_rule_parse(const char *s, struct sbx_egress_rule *r, char *why, size_t n)
{
    memset(r, 0, sizeof(*r));
    size_t len = strlen(s);
    if (len == 0 || len > SBX_EGRESS_RULE_MAX)
        return bad(why, n, "an empty or over-long rule (at most %d characters)",
                   SBX_EGRESS_RULE_MAX);
    if (s[0] == '[' || strchr(s, ':') != strrchr(s, ':'))
        return bad(why, n, "'%s': IPv6 is not routed by nat boxes (IPv4 only)", s);
    const char *colon = strchr(s, ':');
    size_t alen = colon ? (size_t)(colon - s) : len;
    if (colon) {
        const char *p = colon + 1, *dash = strchr(p, '-');
        int lo = port_of(p, dash ? (size_t)(dash - p) : strlen(p));
        int hi = dash ? port_of(dash + 1, strlen(dash + 1)) : lo;
        if (lo < 0 || hi < 0 || hi < lo)
            return bad(why, n,
                       "'%s': the port must be 1-65535 or a range LOW-HIGH (like :443 or "
                       ":8000-8099)",
                       s);
        r->lo = (uint16_t)lo;
        r->hi = (uint16_t)hi;
    }
    char addr[SBX_EGRESS_RULE_MAX + 1];
    memcpy(addr, s, alen);
    addr[alen] = 0;
    if (!strcmp(addr, "host")) {
        r->host = true;
        return 0;
    }
    int plen = 32;
    char *slash = strchr(addr, '/');
    if (slash) {
        *slash = 0;
        const char *p = slash + 1;
        plen = -1;
        if (*p && strlen(p) <= 2 && strspn(p, "0123456789") == strlen(p))
            plen = (int)strtol(p, NULL, 10);
        if (plen < 0 || plen > 32)
            return bad(why, n, "'%s': the prefix length must be 0-32 (like 10.0.0.0/8)", s);
    }
    struct in_addr a;
    if (inet_pton(AF_INET, addr, &a) != 1)
        return bad(why, n,
                   "'%s' is not an IPv4 address or CIDR, optionally with :PORT or :LOW-HIGH, "
                   "or host[:PORT]",
                   s);
    uint32_t net = ntohl(a.s_addr);
    uint32_t mask = plen ? 0xffffffffu << (32 - plen) : 0;
    if (net & ~mask)
        return bad(why, n, "'%s' has bits set past its /%d prefix", s, plen);
    r->net = net;
    r->plen = (uint8_t)plen;
    return 0;
}

static int parse_list(const json_t *v, const char *key, struct sbx_egress_rule *out, size_t *count,
                      char *why, size_t n)
{
    *count = 0;
    if (!v)
        return 0;
    if (!json_is_array(v))
        return bad(why, n, "egress.%s must be a list of strings like \"10.0.0.0/8:443\"", key);
    if (json_array_size(v) > SBX_EGRESS_MAX_RULES)
        return bad(why, n, "egress.%s has %zu rules; at most %d", key, json_array_size(v),
                   SBX_EGRESS_MAX_RULES);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e))
            return bad(why, n, "egress.%s[%zu] must be a string", key, i);
        char one[256];
        if (sbx__egress_rule_parse(json_string_value(e), &out[i], one, sizeof(one)) < 0)
            return bad(why, n, "egress.%s[%zu]: %s", key, i, one);
    }
    *count = json_array_size(v);
    return 0;
}

int sbx__egress_parse(const json_t *v, struct sbx_egress *out, char *why, size_t n)
{
    memset(out, 0, sizeof(*out));
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return bad(why, n, "egress must be a mapping like {\"default\": \"deny\", \"allow\": "
                           "[\"203.0.113.0/24:443\"]}");
    const char *key;
    json_t *e;
    json_object_foreach((json_t *)v, key, e)
    {
        if (!strcmp(key, "default")) {
            const char *d = json_string_value(e);
            if (!d || (strcmp(d, "allow") && strcmp(d, "deny")))
                return bad(why, n, "egress.default must be \"allow\" or \"deny\"");
            out->deny_default = !strcmp(d, "deny");
        } else if (strcmp(key, "allow") && strcmp(key, "deny")) {
            return bad(why, n, "egress has an unknown key '%.64s' (known: default, allow, deny)",
                       key);
        }
    }
    if (parse_list(json_object_get(v, "allow"), "allow", out->allow, &out->nallow, why, n) < 0 ||
        parse_list(json_object_get(v, "deny"), "deny", out->deny, &out->ndeny, why, n) < 0)
        return -1;
    return 0;
}

bool sbx__egress_host_allowed(const struct sbx_egress *e)
{
    for (size_t i = 0; i < e->nallow; i++)
        if (e->allow[i].host)
            return true;
    return false;
}

/* Appends to a growing string; false when out of memory (the string is freed). */
static bool add(char **s, size_t *len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool add(char **s, size_t *len, const char *fmt, ...)
{
    if (!*s)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *t = k >= 0 ? realloc(*s, *len + (size_t)k + 1) : NULL;
    if (!t) {
        free(*s);
        *s = NULL;
        return false;
    }
    va_start(ap, fmt);
    vsnprintf(t + *len, (size_t)k + 1, fmt, ap);
    va_end(ap);
    *s = t;
    *len += (size_t)k;
    return true;
}

/*
 * One direction of the ruleset: `out` judges what the box sends by its
 * destination, `in` what reaches the box by its source, with the same
 * rules. Each is a chain's body after its own first lines.
 */
struct dir {
    const char *addr, *port; /* "daddr"/"saddr", "dport"/"sport" */
    const char *refuse;       /* the verdict of a refused packet */
};

/* One rule's match: "ip daddr A/L" or the gateway, then the ports (TCP and UDP) if any. */
static bool add_rule(char **s, size_t *len, const struct dir *d, const struct sbx_egress_rule *r,
                     const char *verdict)
{
    char addr[INET_ADDRSTRLEN];
    struct in_addr a = { htonl(r->net) };
    if (r->host)
        snprintf(addr, sizeof(addr), "%s", SBX_NAT_GATEWAY);
    else
        inet_ntop(AF_INET, &a, addr, sizeof(addr));
    char ports[64] = "";
    if (r->lo)
        snprintf(ports, sizeof(ports), " meta l4proto { tcp, udp } th %s %u-%u", d->port, r->lo,
                 r->hi);
    return add(s, len, "    ip %s %s/%u%s %s\n", d->addr, addr, r->host ? 32u : r->plen, ports,
               verdict);
}

/*
 * Link-local addresses (169.254.0.0/16) hold cloud metadata services
 * (169.254.169.254 hands out credentials): refused unless an allow rule
 * names an address inside them, never by the default or a wider rule.
 */
static bool link_local(const struct sbx_egress_rule *r)
{
    return !r->host && r->plen >= 16 && (r->net & 0xffff0000u) == 0xa9fe0000u;
}

static void add_body(char **s, size_t *len, const struct dir *d, const struct sbx_egress *e,
                     const uint32_t *host_addrs, size_t nhost)
{
    add(s, len, "    ip %s %s meta l4proto { tcp, udp } th %s 53 accept\n", d->addr, SBX_NAT_DNS,
        d->port);
    for (size_t i = 0; i < e->ndeny; i++)
        add_rule(s, len, d, &e->deny[i], d->refuse);
    for (size_t i = 0; i < e->nallow; i++)
        if (e->allow[i].host)
            add_rule(s, len, d, &e->allow[i], "accept");
    /* The gateway is the host's loopback (when mapped) and the host's own addresses its services. */
    add(s, len, "    ip %s %s %s\n", d->addr, SBX_NAT_GATEWAY, d->refuse);
    for (size_t i = 0; i < nhost; i++) {
        struct in_addr a = { htonl(host_addrs[i]) };
        char addr[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a, addr, sizeof(addr));
        add(s, len, "    ip %s %s %s\n", d->addr, addr, d->refuse);
    }
    for (size_t i = 0; i < e->nallow; i++)
        if (link_local(&e->allow[i]))
            add_rule(s, len, d, &e->allow[i], "accept");
    add(s, len, "    ip %s 169.254.0.0/16 %s\n", d->addr, d->refuse);
    for (size_t i = 0; i < e->nallow; i++)
        if (!e->allow[i].host && !link_local(&e->allow[i]))
            add_rule(s, len, d, &e->allow[i], "accept");
    add(s, len, "    %s\n  }\n", e->deny_default ? d->refuse : "accept");
}

char *sbx__egress_nft(const struct sbx_egress *e, const uint32_t *host_addrs, size_t nhost)
{
    size_t len = 0;
    char *s = strdup("");
    /*
     * One table of its own in the box's namespace. `out` (the output hook)
     * judges every packet the box's IP stack sends before it reaches pasta;
     * a nat box has no way to send any other (no CAP_NET_RAW, no AF_PACKET:
     * src/shim/security.c). Order: the box's loopback, what no policy opens
     * (a source other than the box's address, 127.0.0.0/8 off loopback,
     * IPv6), the DNS forwarder, the deny list (deny wins), the host (closed
     * unless an allow rule names "host"), link-local addresses (closed
     * unless an allow rule names one), the allow list, the default. A
     * refused TCP connection gets a reset and anything else an ICMP error,
     * so programs fail at once instead of timing out.
     *
     * `in` (the input hook) holds the same rules by source address, and
     * drops: what pasta hands the box comes only from where the policy lets
     * it go, whatever pasta or a host socket behind it would deliver.
     */
    add(&s, &len,
        "table inet sbx_egress {\n"
        "  chain refuse {\n"
        "    meta l4proto tcp reject with tcp reset\n"
        "    reject with icmpx type admin-prohibited\n"
        "  }\n"
        "  chain in {\n"
        "    type filter hook input priority 0; policy accept;\n"
        "    iifname \"lo\" accept\n"
        "    meta nfproto ipv6 drop\n"
        "    ip saddr 127.0.0.0/8 drop\n");
    static const struct dir in = { "saddr", "sport", "drop" }, out = { "daddr", "dport",
                                                                         "jump refuse" };
    add_body(&s, &len, &in, e, host_addrs, nhost);
    add(&s, &len,
        "  chain out {\n"
        "    type filter hook output priority 0; policy accept;\n"
        "    oifname \"lo\" accept\n"
        "    meta nfproto ipv6 jump refuse\n"
        "    ip saddr != %s drop\n"
        "    ip daddr 127.0.0.0/8 jump refuse\n",
        SBX_NAT_ADDR);
    add_body(&s, &len, &out, e, host_addrs, nhost);
    add(&s, &len, "}\n");
    return s;
}
