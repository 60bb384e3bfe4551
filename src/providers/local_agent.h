/* The local provider's host agent, for PTY sessions (local_agent.c). */
#ifndef SBX_PROVIDERS_LOCAL_AGENT_H
#define SBX_PROVIDERS_LOCAL_AGENT_H

#include "core/internal.h"

/*
 * The agent_address op: box `id`'s host agent (started now when none runs),
 * as {"socket", "pid", "workdir"}. `canon` is the box's state directory,
 * `cwd` its workspace, `shell` the provider's shell (NULL: the agent's
 * choice); takes `envp` (NULL-terminated, malloc'd strings). Runs on the
 * worker pool.
 */
SBX_INTERNAL void sbx__local_agent_address(sbx_op *op, const char *canon, const char *id,
                                           const char *cwd, const char *shell, char **envp);
/*
 * Stops box `id`'s host agent if one runs (its sessions' processes die with
 * it) and removes its files. Blocks (up to ~5 s): worker threads only.
 */
SBX_INTERNAL void sbx__local_agent_stop(const char *canon, const char *id);

#endif
