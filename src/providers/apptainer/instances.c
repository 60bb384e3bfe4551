/* `apptainer instance list --json`: see instances.h. */
#include "instances.h"

#include <jansson.h>
#include <string.h>

static sbx_status map_state(const char *s)
{
    static const struct {
        const char *name;
        sbx_status status;
    } table[] = {
        {"running", SBX_STATUS_RUNNING},   {"active", SBX_STATUS_RUNNING},
        {"ready", SBX_STATUS_RUNNING},     {"starting", SBX_STATUS_STARTING},
        {"creating", SBX_STATUS_STARTING}, {"pending", SBX_STATUS_STARTING},
        {"stopped", SBX_STATUS_STOPPED},   {"exited", SBX_STATUS_STOPPED},
        {"terminated", SBX_STATUS_STOPPED}, {"error", SBX_STATUS_ERROR},
        {"failed", SBX_STATUS_ERROR},      {"unhealthy", SBX_STATUS_ERROR},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (!strcmp(s, table[i].name))
            return table[i].status;
    return SBX_STATUS_UNKNOWN;
}

sbx_status ap_instance_status(const char *json, size_t len, const char *name)
{
    if (!json || !name || len > AP_LIST_MAX)
        return SBX_STATUS_UNKNOWN;
    /* Depth is bounded by jansson (JSON_PARSER_MAX_DEPTH); NULs inside are refused. */
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return SBX_STATUS_UNKNOWN;
    }
    json_t *list = json_object_get(root, "instances");
    sbx_status st = SBX_STATUS_STOPPED;
    if (list && !json_is_array(list)) {
        st = SBX_STATUS_UNKNOWN;
    } else {
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) {
            const char *n = json_string_value(json_object_get(e, "instance"));
            if (!n || strcmp(n, name))
                continue;
            json_t *state = json_object_get(e, "state");
            /* The reference's `entry.get("state") or "running"`: absent, null or "" is running. */
            if (!state || json_is_null(state) ||
                (json_is_string(state) && !json_string_length(state)))
                st = SBX_STATUS_RUNNING;
            else if (json_is_string(state))
                st = map_state(json_string_value(state));
            else
                st = SBX_STATUS_UNKNOWN;
            break;
        }
    }
    json_decref(root);
    return st;
}
