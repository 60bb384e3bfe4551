/*
 * What /proc says about processes (tests/lib/procfs.c). Nothing here fails
 * a test: the benches link it too.
 */
#ifndef SBX_TESTS_LIB_PROCFS_H
#define SBX_TESTS_LIB_PROCFS_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * Reads /proc/PID/stat: the process's state letter (R, S, Z, ...), parent
 * and process group, each into its pointer unless NULL. False when there is
 * no such process (or its line cannot be parsed).
 */
bool proc_stat(pid_t pid, char *state, pid_t *ppid, pid_t *pgrp);
/* Whether `pid` runs: it is there and neither a zombie (Z) nor dead (X). */
bool proc_runs(pid_t pid);
/* The descriptors this process has open now (the one reading them excluded); -1 on error. */
int open_fds(void);

#endif
