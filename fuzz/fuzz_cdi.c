/*
 * libFuzzer target for the CDI spec parser (src/providers/linux/cdi.c): the
 * spec files under /etc/cdi and /var/run/cdi decide which host device nodes
 * and files a GPU box gets, so every byte is input. A spec that parses must
 * come out normalised: every path absolute, every list a list, hooks a
 * count, and each device's name one sbx accepts. Pure: no file is touched.
 */
#include "core/internal.h"
#include "providers/linux/linux.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_edits(const json_t *e)
{
    static const char *const lists[] = { "env", "devices", "mounts" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(lists); i++)
        if (!json_is_array(json_object_get(e, lists[i])))
            abort();
    if (!json_is_integer(json_object_get(e, "hooks")))
        abort();
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(e, "devices"), i, v)
    {
        const char *p = json_string_value(json_object_get(v, "path"));
        const char *h = json_string_value(json_object_get(v, "host_path"));
        if (!p || p[0] != '/' || !h || h[0] != '/' || strstr(p, "/../"))
            abort();
    }
    json_array_foreach(json_object_get(e, "mounts"), i, v)
    {
        const char *p = json_string_value(json_object_get(v, "container_path"));
        const char *h = json_string_value(json_object_get(v, "host_path"));
        if (!p || p[0] != '/' || !h || h[0] != '/' ||
            !json_is_boolean(json_object_get(v, "rw")))
            abort();
    }
    json_array_foreach(json_object_get(e, "env"), i, v)
    {
        const char *s = json_string_value(v);
        if (!s || !strchr(s, '=') || s[0] == '=')
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    json_t *spec = NULL;
    sbx_error *e = NULL;
    if (sbx__cdi_parse(text, size, "fuzz.yaml", &spec, &e) == SBX_OK) {
        if (!json_string_value(json_object_get(spec, "kind")))
            abort();
        check_edits(json_object_get(spec, "edits"));
        const char *name;
        json_t *d;
        json_object_foreach(json_object_get(spec, "devices"), name, d)
        {
            if (!sbx__cdi_name_ok(name))
                abort();
            check_edits(d);
        }
        json_decref(spec);
    } else if (!e || !sbx_error_message(e)) {
        abort();
    }
    sbx_error_free(e);
    free(text);
    return 0;
}
