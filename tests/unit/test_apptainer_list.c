/*
 * The apptainer provider's reading of `apptainer instance list --json`
 * (src/providers/apptainer/instances.c): the reference's status table
 * (test_status_* of its provider tests), an unlisted instance STOPPED, and
 * output that is not such a document UNKNOWN.
 */
#include "tap.h"

#include "providers/apptainer/instances.c"

#include <stdio.h>

static sbx_status of(const char *json, const char *name)
{
    return ap_instance_status(json, strlen(json), name);
}

static void test_status_table(void)
{
    static const struct {
        const char *state;
        sbx_status want;
    } rows[] = {
        {"running", SBX_STATUS_RUNNING},    {"active", SBX_STATUS_RUNNING},
        {"ready", SBX_STATUS_RUNNING},      {"starting", SBX_STATUS_STARTING},
        {"creating", SBX_STATUS_STARTING},  {"pending", SBX_STATUS_STARTING},
        {"stopped", SBX_STATUS_STOPPED},    {"exited", SBX_STATUS_STOPPED},
        {"terminated", SBX_STATUS_STOPPED}, {"error", SBX_STATUS_ERROR},
        {"failed", SBX_STATUS_ERROR},       {"unhealthy", SBX_STATUS_ERROR},
        {"weird", SBX_STATUS_UNKNOWN},      {"", SBX_STATUS_RUNNING},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char json[256];
        snprintf(json, sizeof(json),
                 "{\"instances\": [{\"instance\": \"other\", \"state\": \"error\"}, "
                 "{\"instance\": \"nemo-gym-a\", \"state\": \"%s\"}]}",
                 rows[i].state);
        TAP_EQ_INT(of(json, "nemo-gym-a"), rows[i].want);
    }
}

static void test_listed_without_state_is_running(void)
{
    /* What apptainer itself prints: no "state" key at all. */
    TAP_EQ_INT(of("{\"instances\": [{\"instance\": \"nemo-gym-a\", \"pid\": 4, \"img\": \"x.sif\"}]}",
                  "nemo-gym-a"),
               SBX_STATUS_RUNNING);
    TAP_EQ_INT(of("{\"instances\": [{\"instance\": \"nemo-gym-a\", \"state\": null}]}", "nemo-gym-a"),
               SBX_STATUS_RUNNING);
}

static void test_not_listed_is_stopped(void)
{
    TAP_EQ_INT(of("{\"instances\": []}", "nemo-gym-a"), SBX_STATUS_STOPPED);
    TAP_EQ_INT(of("{\"instances\": [{\"instance\": \"nemo-gym-ab\"}]}", "nemo-gym-a"),
               SBX_STATUS_STOPPED);
    TAP_EQ_INT(of("{}", "nemo-gym-a"), SBX_STATUS_STOPPED);
}

static void test_bad_output_is_unknown(void)
{
    TAP_EQ_INT(of("", "a"), SBX_STATUS_UNKNOWN);
    TAP_EQ_INT(of("FATAL: no", "a"), SBX_STATUS_UNKNOWN);
    TAP_EQ_INT(of("[]", "a"), SBX_STATUS_UNKNOWN);
    TAP_EQ_INT(of("{\"instances\": {}}", "a"), SBX_STATUS_UNKNOWN);
    TAP_EQ_INT(of("{\"instances\": [{\"instance\": \"a\", \"state\": 3}]}", "a"),
               SBX_STATUS_UNKNOWN);
    /* A NUL inside, and more than the bound. */
    TAP_EQ_INT(ap_instance_status("{\"instances\": []}\0x", 19, "a"), SBX_STATUS_UNKNOWN);
    TAP_EQ_INT(ap_instance_status("{}", AP_LIST_MAX + 1, "a"), SBX_STATUS_UNKNOWN);
}

TAP_MAIN(TAP(test_status_table), TAP(test_listed_without_state_is_running),
         TAP(test_not_listed_is_stopped), TAP(test_bad_output_is_unknown))
