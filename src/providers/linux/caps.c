/*
 * [caps] The capabilities a linux box may add (cap_add, `--cap-add`) on top
 * of the default set sbx-shim keeps (src/shim/security.c: Docker's default
 * list without MKNOD), and why every other one is refused.
 *
 * A capability is addable when what it grants stays inside the box's own
 * namespaces and cgroups: NET_ADMIN configures only the box's own network
 * namespace (refused with network "host", where it would be the host's);
 * IPC_LOCK locks memory its memory cgroup still counts; NET_BROADCAST and
 * LEASE are harmless. The rest reach the host's kernel, clock, devices,
 * security policy or limits, or the box's agent (SYS_PTRACE, which Docker
 * users often add, is refused for that reason), and a box cannot have them
 * whatever it asks: the table says which reach what, and the refusal
 * carries that reason.
 */
#include "providers/linux/linux.h"

#include <ctype.h>
#include <linux/capability.h>

enum { CAP_KEPT, CAP_ADDABLE, CAP_REFUSED };

static const struct cap_rule {
    const char *name;
    int number;
    int rule;
    const char *why; /* CAP_REFUSED: what it would let a box do */
} rules[] = {
    { "CHOWN", CAP_CHOWN, CAP_KEPT, NULL },
    { "DAC_OVERRIDE", CAP_DAC_OVERRIDE, CAP_KEPT, NULL },
    { "DAC_READ_SEARCH", CAP_DAC_READ_SEARCH, CAP_REFUSED,
      "it allows open_by_handle_at, which opens any file of a host filesystem by its handle "
      "(the 'shocker' container escape)" },
    { "FOWNER", CAP_FOWNER, CAP_KEPT, NULL },
    { "FSETID", CAP_FSETID, CAP_KEPT, NULL },
    { "KILL", CAP_KILL, CAP_KEPT, NULL },
    { "SETGID", CAP_SETGID, CAP_KEPT, NULL },
    { "SETUID", CAP_SETUID, CAP_KEPT, NULL },
    { "SETPCAP", CAP_SETPCAP, CAP_KEPT, NULL },
    { "LINUX_IMMUTABLE", CAP_LINUX_IMMUTABLE, CAP_REFUSED,
      "it marks files immutable, in host directories the box mounts too, where the host then "
      "cannot change or remove them" },
    { "NET_BIND_SERVICE", CAP_NET_BIND_SERVICE, CAP_KEPT, NULL },
    { "NET_BROADCAST", CAP_NET_BROADCAST, CAP_ADDABLE, NULL },
    { "NET_ADMIN", CAP_NET_ADMIN, CAP_ADDABLE, NULL },
    { "NET_RAW", CAP_NET_RAW, CAP_KEPT, NULL },
    { "IPC_LOCK", CAP_IPC_LOCK, CAP_ADDABLE, NULL },
    { "IPC_OWNER", CAP_IPC_OWNER, CAP_REFUSED,
      "sbx does not grant it: it is not on the list of capabilities known to stay inside a "
      "box" },
    { "SYS_MODULE", CAP_SYS_MODULE, CAP_REFUSED,
      "it loads kernel modules: code running in the host's kernel" },
    { "SYS_RAWIO", CAP_SYS_RAWIO, CAP_REFUSED,
      "it gives raw access to I/O ports and physical memory of the host" },
    { "SYS_CHROOT", CAP_SYS_CHROOT, CAP_KEPT, NULL },
    { "SYS_PTRACE", CAP_SYS_PTRACE, CAP_REFUSED,
      "it would let the box attach to its agent (PID 1), which sbx keeps undumpable: the "
      "agent's /proc/1/exe is the host's sbx-agent binary, and a box that could make the agent "
      "exec something else could then open that file for writing (the runc CVE-2019-5736 "
      "escape)" },
    { "SYS_PACCT", CAP_SYS_PACCT, CAP_REFUSED,
      "it switches the host's process accounting on and off" },
    { "SYS_ADMIN", CAP_SYS_ADMIN, CAP_REFUSED,
      "it grants mount, namespaces and many kernel interfaces the box's confinement relies on; "
      "a workload that needs it wants a virtual machine, not a linux box" },
    { "SYS_BOOT", CAP_SYS_BOOT, CAP_REFUSED, "it reboots the host" },
    { "SYS_NICE", CAP_SYS_NICE, CAP_REFUSED,
      "real-time scheduling would take CPUs from the host beyond the box's cpu limit" },
    { "SYS_RESOURCE", CAP_SYS_RESOURCE, CAP_REFUSED,
      "it lifts the box's resource limits above those of its creator" },
    { "SYS_TIME", CAP_SYS_TIME, CAP_REFUSED, "it sets the host's clock" },
    { "SYS_TTY_CONFIG", CAP_SYS_TTY_CONFIG, CAP_REFUSED,
      "it configures and hangs up the host's terminals" },
    { "MKNOD", CAP_MKNOD, CAP_REFUSED,
      "sbx drops it on purpose: a device node made in a box could open a host disk where no "
      "device cgroup applies (cgroup v2)" },
    { "LEASE", CAP_LEASE, CAP_ADDABLE, NULL },
    { "AUDIT_WRITE", CAP_AUDIT_WRITE, CAP_KEPT, NULL },
    { "AUDIT_CONTROL", CAP_AUDIT_CONTROL, CAP_REFUSED, "it changes the host's audit rules" },
    { "SETFCAP", CAP_SETFCAP, CAP_KEPT, NULL },
    { "MAC_OVERRIDE", CAP_MAC_OVERRIDE, CAP_REFUSED,
      "it overrides the host's security module policy (AppArmor, SELinux, Smack)" },
    { "MAC_ADMIN", CAP_MAC_ADMIN, CAP_REFUSED,
      "it changes the host's security module policy (AppArmor, SELinux, Smack)" },
    { "SYSLOG", CAP_SYSLOG, CAP_REFUSED,
      "it reads and clears the host kernel's log, which shows kernel addresses" },
    { "WAKE_ALARM", CAP_WAKE_ALARM, CAP_REFUSED, "it sets alarms that wake the host" },
    { "BLOCK_SUSPEND", CAP_BLOCK_SUSPEND, CAP_REFUSED, "it keeps the host from suspending" },
    { "AUDIT_READ", CAP_AUDIT_READ, CAP_REFUSED, "it reads the host's audit log" },
    { "PERFMON", 38, CAP_REFUSED, "it monitors the host's performance events (perf_event_open)" },
    { "BPF", 39, CAP_REFUSED, "it loads BPF programs into the host's kernel" },
    { "CHECKPOINT_RESTORE", 40, CAP_REFUSED,
      "sbx does not grant it: it is not on the list of capabilities known to stay inside a "
      "box" },
};

static const struct cap_rule *find(const char *name)
{
    for (size_t i = 0; i < SBX_ARRAY_SIZE(rules); i++)
        if (!strcmp(rules[i].name, name))
            return &rules[i];
    return NULL;
}

int sbx__linux_cap_number(const char *name)
{
    const struct cap_rule *r = name ? find(name) : NULL;
    return r ? r->number : -1;
}

int sbx__linux_caps_parse(const json_t *v, const char *what, int net, json_t *out,
                          sbx_error **err)
{
    if (json_is_null(v))
        return SBX_OK;
    if (!json_is_array(v))
        return sbx__set_error(err, SBX_EINVAL, "%s must be a list of capability names, like "
                                               "[\"NET_ADMIN\"]", what);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        const char *s = json_string_value(e);
        if (!s || !*s || strlen(s) > 64)
            return sbx__set_error(err, SBX_EINVAL, "%s[%zu] must be a capability name, like "
                                                   "\"NET_ADMIN\"", what, i);
        char name[72];
        size_t k = 0;
        /* Docker takes "net_admin", "NET_ADMIN" and "CAP_NET_ADMIN" alike. */
        const char *p = strncasecmp(s, "CAP_", 4) == 0 ? s + 4 : s;
        for (; *p && k < sizeof(name) - 1; p++)
            name[k++] = (char)toupper((unsigned char)*p);
        name[k] = 0;
        if (!strcmp(name, "ALL"))
            return sbx__set_error(err, SBX_EPERM,
                                  "%s: capability ALL is refused: it includes SYS_ADMIN, "
                                  "SYS_MODULE and others that reach the host's kernel; name the "
                                  "ones needed (docs/volumes.md lists those a box may add)",
                                  what);
        const struct cap_rule *r = find(name);
        if (!r)
            return sbx__set_error(err, SBX_EINVAL, "%s: unknown capability '%s' (names as in "
                                                   "capabilities(7), like NET_ADMIN)", what, s);
        if (r->rule == CAP_REFUSED)
            return sbx__set_error(err, SBX_EPERM, "%s: capability %s is refused: %s", what,
                                  r->name, r->why);
        /* [nat] A nat box's egress policy is nftables rules in its own namespace. */
        if (r->number == CAP_NET_ADMIN && net == SBX_LINUX_NET_NAT)
            return sbx__set_error(err, SBX_EPERM,
                                  "%s: capability NET_ADMIN is refused with network \"nat\": "
                                  "the box could remove its egress policy (nftables rules in its "
                                  "network namespace); use network \"none\" to get NET_ADMIN",
                                  what);
        /* [nat] Nor NET_RAW: its frames would pass by the policy (src/shim/security.c). */
        if (r->number == CAP_NET_RAW && net == SBX_LINUX_NET_NAT)
            return sbx__set_error(err, SBX_EPERM,
                                  "%s: capability NET_RAW is refused with network \"nat\": raw "
                                  "and packet sockets would send frames that bypass the egress "
                                  "policy, to the host's loopback too (ping works without it); "
                                  "use network \"none\" or \"host\" for raw sockets", what);
        if (r->number == CAP_NET_ADMIN && net == SBX_LINUX_NET_HOST)
            return sbx__set_error(err, SBX_EPERM,
                                  "%s: capability NET_ADMIN is refused with network \"host\": "
                                  "the box shares the host's network namespace, so it would "
                                  "configure the host's interfaces, routes and firewall",
                                  what);
        /*
         * Every box has a kept one already; but NET_RAW, which a nat box
         * lacks, stays on the list so the check against the box's network
         * (at create, where it is known) sees it asked for.
         */
        if (r->rule == CAP_KEPT && r->number != CAP_NET_RAW)
            continue;
        bool dup = false;
        size_t j;
        json_t *o;
        json_array_foreach(out, j, o) dup |= !strcmp(json_string_value(o), r->name);
        if (!dup && json_array_append_new(out, json_string(r->name)) < 0)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    return SBX_OK;
}
