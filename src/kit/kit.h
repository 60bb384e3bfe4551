/*
 * Internal parts of the box-provider kit (shared.c) that the linux provider
 * uses directly and the public kit (include/sbx/box.h, box.c) wraps.
 */
#ifndef SBX_KIT_KIT_H
#define SBX_KIT_KIT_H

#include "core/internal.h"

#include <stdbool.h>
#include <sys/types.h>

/*
 * Finds a helper binary (sbx-shim, sbx-agent): $ENV, next to the program or
 * library this code is in and up to two levels above, ../libexec/sbx from
 * either, the configured libexec directory (SBX_LIBEXECDIR), then PATH.
 * Malloc'd, or NULL when none is found.
 */
SBX_INTERNAL char *sbx__kit_find_helper(const char *name, const char *env);
/*
 * A provider's per-user state directory as spelled (not resolved):
 * `override` when non-empty, else $SBX_STATE_DIR/<provider>,
 * /run/sbx/<provider> for root, $XDG_RUNTIME_DIR/sbx/<provider>,
 * /tmp/sbx-<uid>/<provider>. Malloc'd.
 */
SBX_INTERNAL char *sbx__kit_state_dir_spelled(const char *provider, const char *override);
/* A box id fit for a path component: [A-Za-z0-9._-], 1..64, no leading '.' or '-'. */
SBX_INTERNAL bool sbx__kit_id_ok(const char *id);
/* The start time of `pid` (/proc/PID/stat field 22), 0 when gone or a zombie. */
SBX_INTERNAL unsigned long long sbx__kit_proc_start(pid_t pid);
/* pidfd_open, or -1/ENOSYS (also when SBX_LINUX_NO_PIDFD=1 simulates an old kernel). */
SBX_INTERNAL int sbx__kit_pidfd_open(pid_t pid);

#endif /* SBX_KIT_KIT_H */
