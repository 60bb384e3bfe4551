/*
 * [netw] libFuzzer target for what reaches a box's /etc/hosts
 * (src/providers/linux/networks.c): set_hosts' entries (the caller's JSON,
 * possibly from a server's client) and the network name a spec gives. What
 * the check lets through must make one line per entry in the hosts text,
 * "ADDRESS<TAB>NAME", with no control character: a newline or a space in
 * a name would forge entries in every peer's lookups. Pure: no file is
 * touched.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *name = strndup((const char *)data, size);
    if (!name)
        return 0;
    /* A network name is a path component: never "/", never "." or "..", never a mode. */
    if (sbx__linux_net_name_ok(name) &&
        (strchr(name, '/') || name[0] == '.' || !strcmp(name, "none") || !strcmp(name, "host")))
        abort();
    free(name);
    json_t *hosts = json_loadb((const char *)data, size, 0, NULL);
    if (hosts && sbx__linux_net_hosts_check(hosts, NULL) == SBX_OK) {
        json_t *ms = json_pack("[{s:s, s:s, s:s}]", "id", "sbx-0123456789ab", "hostname", "web",
                               "address", "10.89.0.2");
        json_t *self = json_pack("{s:s, s:s, s:s, s:O}", "id", "sbx-0123456789ab", "hostname",
                                 "web", "address", "10.89.0.2", "hosts", hosts);
        char *text = ms && self ? sbx__linux_net_hosts_text(ms, self) : NULL;
        if (text) {
            size_t lines = 0;
            for (const char *p = text; *p; p++) {
                if (*p == '\n')
                    lines++;
                else if ((unsigned char)*p < 0x20 && *p != '\t')
                    abort();
            }
            /* localhost twice, the member, then one line per entry. */
            if (lines != 3 + json_object_size(hosts))
                abort();
            for (const char *l = text; *l; l = strchr(l, '\n') + 1) {
                const char *tab = strchr(l, '\t'), *nl = strchr(l, '\n');
                if (!tab || tab > nl)
                    abort();
            }
        }
        free(text);
        json_decref(ms);
        json_decref(self);
    }
    json_decref(hosts);
    return 0;
}
