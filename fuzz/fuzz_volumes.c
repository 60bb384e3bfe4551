/*
 * [volumes] libFuzzer target for the parsers of provider_options.volumes,
 * cap_add and shm_size (src/providers/linux/volumes.c, caps.c): a spec may
 * come from anywhere (a file, a server's client), and what they let through
 * decides what host path is mounted where in a box. What parses must come
 * out normalized: a target absolute, without "..", not "/" nor under /proc
 * or /sys; a bind's source absolute without ".."; a volume name without
 * "/"; a shared source relative without ".."; capabilities known and
 * addable. The input is a JSON object with those keys or, when it is not
 * JSON, one "SRC:DST[:ro]" string. Pure: no file is touched.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool dotdot(const char *p)
{
    for (const char *s = p; (s = strstr(s, "..")) != NULL; s += 2)
        if ((s == p || s[-1] == '/') && (s[2] == 0 || s[2] == '/'))
            return true;
    return false;
}

/* Whether `p` is `dir` or under it. */
static bool under(const char *p, const char *dir)
{
    size_t n = strlen(dir);
    return !strncmp(p, dir, n) && (p[n] == 0 || p[n] == '/');
}

static void check_entry(const json_t *v)
{
    const char *type = json_string_value(json_object_get(v, "type"));
    const char *src = json_string_value(json_object_get(v, "source"));
    const char *dst = json_string_value(json_object_get(v, "target"));
    if (!type || !src || !dst || !json_is_boolean(json_object_get(v, "read_only")))
        abort();
    if (dst[0] != '/' || dotdot(dst) || !strcmp(dst, "/") || under(dst, "/proc") ||
        under(dst, "/sys") || strstr(dst, "//") || strstr(dst, "/./"))
        abort();
    if (!strcmp(type, "bind")) {
        if (src[0] != '/' || dotdot(src))
            abort();
    } else if (!strcmp(type, "volume")) {
        if (!src[0] || strchr(src, '/') || src[0] == '.')
            abort();
    } else if (!strcmp(type, "shared")) {
        if (src[0] == '/' || dotdot(src))
            abort();
    } else {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    json_t *in = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!json_is_object(in)) {
        json_decref(in);
        char *s = strndup((const char *)data, size);
        in = s ? json_pack("{s:[s]}", "volumes", s) : NULL;
        free(s);
        if (!in)
            return 0;
    }
    json_t *vols = json_array(), *caps = json_array();
    sbx_error *e = NULL;
    if (sbx__linux_volumes_parse(json_object_get(in, "volumes"), "volumes", vols, &e) == SBX_OK) {
        size_t i;
        json_t *v;
        json_array_foreach(vols, i, v) check_entry(v);
    }
    sbx_error_free(e);
    e = NULL;
    if (sbx__linux_caps_parse(json_object_get(in, "cap_add"), "cap_add",
                              json_is_true(json_object_get(in, "net_host")), caps, &e) == SBX_OK) {
        size_t i;
        json_t *v;
        json_array_foreach(caps, i, v)
        {
            const char *n = json_string_value(v);
            /* Only the addable ones reach the list (the kept ones are dropped as no-ops). */
            if (!n || (strcmp(n, "NET_ADMIN") && strcmp(n, "IPC_LOCK") &&
                       strcmp(n, "NET_BROADCAST") && strcmp(n, "LEASE")))
                abort();
            if (!strcmp(n, "NET_ADMIN") && json_is_true(json_object_get(in, "net_host")))
                abort();
            if (sbx__linux_cap_number(n) < 0)
                abort();
        }
    }
    sbx_error_free(e);
    e = NULL;
    long long shm = 0;
    if (json_object_get(in, "shm_size") &&
        sbx__linux_shm_parse(json_object_get(in, "shm_size"), "shm_size", &shm, &e) == SBX_OK &&
        (shm < 4096 || shm > (1ll << 40)))
        abort();
    sbx_error_free(e);
    json_decref(vols);
    json_decref(caps);
    json_decref(in);
    return 0;
}
