/*
 * libFuzzer target for the opensandbox plugin's parsers of the service's
 * bytes (src/providers/opensandbox/wire.c): execd's event lines, a
 * sandbox's info, an endpoint, a command's status, a file's info, the
 * exit code and time texts. Everything the service sends is hostile.
 *
 * Input: byte 0 picks the parser; the rest is the bytes. Every parser must
 * return SBX_OK with its promises kept, or an error with a message; never
 * crash, never leak.
 */
#include "providers/opensandbox/osb.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    char *z = malloc(n + 1); /* a NUL-terminated copy for the text parsers */
    if (!z)
        return 0;
    memcpy(z, s, n);
    z[n] = 0;
    sbx_error *err = NULL;
    switch (data[0] % 8) {
    case 0: {
        struct osb_event ev;
        if (osb_event_parse(s, n, &ev, &err) == SBX_OK) {
            if (ev.type == OSB_EV_ERROR && (!ev.ename || !ev.evalue))
                abort(); /* an error event always has both */
            osb_event_clear(&ev);
        } else if (!err)
            abort();
        break;
    }
    case 1: {
        struct osb_info info;
        if (osb_info_parse(s, n, &info, &err) == SBX_OK) {
            if (!info.id)
                abort();
            (void)osb_status_of(info.state);
            osb_info_clear(&info);
        }
        break;
    }
    case 2: {
        struct osb_endpoint ep;
        if (osb_endpoint_parse(s, n, &ep, &err) == SBX_OK) {
            if (!ep.endpoint || !*ep.endpoint || !json_is_object(ep.headers))
                abort();
            osb_endpoint_clear(&ep);
        }
        break;
    }
    case 3: {
        struct osb_cmd_status st;
        if (osb_cmd_status_parse(s, n, &st, &err) == SBX_OK)
            free(st.error);
        break;
    }
    case 4: {
        int dir = 0;
        int mode = osb_file_mode_parse(s, n, "/p", &dir);
        if (mode < -1 || mode > 07777)
            abort();
        break;
    }
    case 5: {
        int code;
        double t;
        (void)osb_parse_exit(z, &code);
        (void)osb_parse_time(z, &t);
        break;
    }
    case 6:
        (void)osb_is_oom(z);
        break;
    default:
        (void)osb_status_of(z);
        break;
    }
    sbx_error_free(err);
    free(z);
    return 0;
}
