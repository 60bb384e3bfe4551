/*
 * `apptainer instance list --json` as the apptainer provider reads it: the
 * CLI's output is outside bytes (another program, or something on PATH that
 * calls itself apptainer), so it is bounded and checked, never trusted.
 * Built into the plugin and into fuzz/fuzz_apptainer_list.c.
 */
#ifndef SBX_APPTAINER_INSTANCES_H
#define SBX_APPTAINER_INSTANCES_H

#include <sbx.h>
#include <stddef.h>

/* Output past this is not JSON we read: the status is unknown. */
#define AP_LIST_MAX (4u << 20)

/*
 * The status of instance `name` in `json` (`len` bytes, no NUL needed), as
 * the reference maps it: an entry of "instances" whose "instance" is `name`,
 * its "state" (absent: running) through the reference's table; not listed:
 * STOPPED; bytes that are not such a document (too long, not JSON, not an
 * object, "instances" not an array): UNKNOWN. Pure; thread-safe.
 */
sbx_status ap_instance_status(const char *json, size_t len, const char *name);

#endif
