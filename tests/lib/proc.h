/*
 * Where the build put the binaries a test drives (tests/lib/proc.c): the
 * build folder is three levels above the test binary
 * (build/tests/integration/test_x -> build/), whatever it is called
 * (build/, build/asan, ...).
 */
#ifndef SBX_TESTS_LIB_PROC_H
#define SBX_TESTS_LIB_PROC_H

#include <stdbool.h>
#include <stddef.h>

/* The build folder of this test binary (static buffer); fails the test if unknown. */
const char *build_dir(void);
/* Writes `build_dir()/name` into out; whether that file is there and executable. */
bool built_path(const char *name, char *out, size_t n);
/* The sbx CLI of this build; fails the test when it is not built (make tests builds it). */
const char *sbx_bin(void);
/* The sbx-agent of this build; fails the test when it is not built (make builds it). */
const char *agent_bin(void);

#endif
