/*
 * Where the build put the binaries a test drives (tests/lib/proc.c): the
 * build folder is three levels above the test binary
 * (build/tests/integration/test_x -> build/), whatever it is called
 * (build/, build/asan, ...).
 */
#ifndef SBX_TESTS_LIB_PROC_H
#define SBX_TESTS_LIB_PROC_H

#include "lib/procfs.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The build folder of this test binary (static buffer); fails the test if unknown. */
const char *build_dir(void);
/* Writes `build_dir()/name` into out; whether that file is there and executable. */
bool built_path(const char *name, char *out, size_t n);
/* The sbx CLI of this build; fails the test when it is not built (make tests builds it). */
const char *sbx_bin(void);
/* The sbx-agent of this build; fails the test when it is not built (make builds it). */
const char *agent_bin(void);

/*
 * The first process of this host (in /proc's order) whose command line
 * `match(cmd, arg)` accepts, `cmd` its arguments joined by spaces (up to n
 * bytes; it stays in cmd); 0 when none does.
 */
pid_t proc_find(bool (*match)(const char *cmd, const void *arg), const void *arg, char *cmd,
                size_t n);
/* The lines of this process's /proc/self/mountinfo that hold `text`: mounts naming it. */
int mounts_naming(const char *text);
/* proc_find(): the command line starts with `prefix` and holds `has` (NULL: anything). */
pid_t proc_named(const char *prefix, const char *has);

#endif
