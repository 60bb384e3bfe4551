/* Opening and creating paths confined to a directory tree (see inroot.c). */
#ifndef SBX_CORE_INROOT_H
#define SBX_CORE_INROOT_H

#include <stdbool.h>
#include <sys/types.h>

/*
 * Opens `path` resolved inside `rootfd` as if it were "/" (flags as openat;
 * O_CLOEXEC is added). Returns the fd, or -1 with errno.
 */
int sbx__inroot_open(int rootfd, const char *path, int flags, mode_t mode);
/*
 * Creates directory `dir` inside `rootfd` as mkdir -p would (missing
 * components get `mode`), resolving every component inside the root; a
 * link to a missing path gets its target created, inside the root too.
 * Returns an O_PATH fd of the directory, or -1 with errno.
 */
int sbx__inroot_mkdir_p(int rootfd, const char *dir, mode_t mode);
/* Always use the manual walk (tests check it matches the kernel's). */
void sbx__inroot_force_walk(bool on);

#endif
