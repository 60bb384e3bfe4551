/*
 * Archives a test writes by hand (tests/lib/tar.c), hostile ones included:
 * what an image layer or a box's download stream could hold.
 */
#ifndef SBX_TESTS_LIB_TAR_H
#define SBX_TESTS_LIB_TAR_H

#include <archive.h>

/* Every entry's mtime. */
#define TAR_MTIME 1600000000

/*
 * Adds one entry to the archive `a` being written: type 'f' a file (`arg`
 * its data, NULL: empty), 'd' a directory, 'l' a symlink and 'h' a hard
 * link (`arg` the target), 'c' the character device 1:3, 'p' a fifo.
 * Permission bits `mode` (0: 0644), owner 0:0, mtime TAR_MTIME. Fails the
 * test when libarchive refuses it.
 */
void tar_add(struct archive *a, const char *path, char type, const char *arg, unsigned mode);

#endif
