/*
 * The agent's built-in transfer commands (src/agent/tar.c): a minimal,
 * strict tar reader and writer and byte-level file helpers that run in an
 * exec's child instead of a program, so a box needs neither a shell nor tar.
 *
 * An EXEC with the SBX_EXEC_BUILTIN flag names one in argv[0]; the child has
 * already switched to the exec's user and directory, and its stdin/stdout
 * are the exec's streams (so transfers reuse the exec's flow control).
 *
 *   tar-extract DIR PRESERVE_OWNER MAX_ENTRIES MAX_BYTES   stdin: a tar stream
 *   tar-create DIR                                          stdout: a tar stream
 *   write-file PATH MODE MAX_BYTES                          stdin: the bytes
 *   read-file PATH MAX_BYTES                                stdout: the bytes
 *   kind PATH                                               stdout: file|dir|other|missing
 *
 * Exit status 0 on success; otherwise 1 with one line on stderr saying what
 * was wrong.
 */
#ifndef SBX_AGENT_TAR_H
#define SBX_AGENT_TAR_H

#include <stddef.h>
#include <stdint.h>

/* Runs built-in `argv[0]` (in the exec's child); returns the exit status. */
int agent_builtin(char **argv);

/* The limits and options of one extraction. */
struct tar_limits {
    uint64_t max_entries;
    uint64_t max_bytes; /* the sum of regular files' sizes */
    int preserve_owner;
};

/*
 * Reads a tar stream from `in` and writes it under directory `dirfd`
 * (nothing outside it: no "..", no absolute names, no write through a
 * link). Returns 0, or -1 with a message in `msg`.
 */
int tar_extract_fd(int in, int dirfd, const struct tar_limits *lim, char *msg, size_t msg_len);
/* Writes directory `dirfd` as a tar stream to `out`, links kept as links. */
int tar_create_fd(int out, int dirfd, char *msg, size_t msg_len);

/* The root file operations resolve in (files.c). */
int files_root_fd(void);
/* A built-in's path inside the root: a relative one joined to the working directory. */
char *files_box_path(const char *path);

#endif
