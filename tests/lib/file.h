/* Host files a test checks (tests/lib/file.c). */
#ifndef SBX_TESTS_LIB_FILE_H
#define SBX_TESTS_LIB_FILE_H

#include <sys/types.h>

/* The permission bits (07777) of `path`, following links; fails the test if it cannot stat it. */
mode_t mode_of(const char *path);

#endif
