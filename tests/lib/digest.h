/* SHA-256 digests a test compares, as hex (tests/lib/digest.c). */
#ifndef SBX_TESTS_LIB_DIGEST_H
#define SBX_TESTS_LIB_DIGEST_H

#include <stddef.h>

/* The SHA-256 of the n bytes at data: 64 lowercase hex digits and a NUL. */
void sha256_hex(const void *data, size_t n, char hex[65]);
/*
 * The SHA-256 of the file at path, read in pieces (never whole in memory),
 * as sha256_hex(); fails the test if it cannot read it.
 */
void sha256_file_hex(const char *path, char hex[65]);

#endif
