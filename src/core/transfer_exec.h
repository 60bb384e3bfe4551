/*
 * Transfers for boxes without sbx-agent (transfer_exec.c): the stand-ins
 * for the agent's transfer built-ins, through the provider's file ops and
 * the box's shell. Same arguments and errors as transfer.c's agent path.
 */
#ifndef SBX_CORE_TRANSFER_EXEC_H
#define SBX_CORE_TRANSFER_EXEC_H

#include "sbx.h"

#include <stdbool.h>

/*
 * The transfer taxonomy for an exec that ended non-zero (transfer.c): its
 * `reason` (NULL: the result's stderr) as SBX_ETRANSFER, a timeout as
 * SBX_ETIMEDOUT, a box that did not answer as SBX_EIO, and for an agent
 * `builtin` a 127 as an agent without the built-ins (SBX_ENOTSUP).
 */
int sbx__transfer_failure(const sbx_exec_result *res, const char *reason, bool builtin,
                          const char *what, const char *path, sbx_error **err);

/* Unpacks the tar stream read from in_fd (to its EOF) into box directory `remote`. */
int sbx__xfer_exec_extract(sbx_sandbox *sb, int in_fd, const char *remote, unsigned flags,
                           const char *what, const char *shown, sbx_error **err);
/* Writes box directory `remote` as a tar stream to out_fd. */
int sbx__xfer_exec_create(sbx_sandbox *sb, const char *remote, int out_fd, sbx_error **err);
/* "file", "dir", "other", or NULL for nothing there. */
int sbx__xfer_exec_kind(sbx_sandbox *sb, const char *remote, const char **kind_out,
                        sbx_error **err);
int sbx__xfer_exec_write(sbx_sandbox *sb, const char *remote, const void *data, size_t len,
                         unsigned mode, sbx_error **err);
int sbx__xfer_exec_read(sbx_sandbox *sb, const char *remote, size_t max_bytes, char **data_out,
                        size_t *len_out, sbx_error **err);

#endif
