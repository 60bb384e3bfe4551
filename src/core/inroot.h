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
 * Opens relative `path` under `dirfd` (flags as openat, O_CLOEXEC added;
 * no O_CREAT), following links only while they stay beneath it: an absolute
 * path or link target, or a ".." above `dirfd`, fails with EXDEV
 * (RESOLVE_BENEATH). A link at the end is followed unless O_NOFOLLOW. For a
 * tree another user owns (a build context). Returns the fd, or -1 with errno.
 */
int sbx__beneath_open(int dirfd, const char *path, int flags);
/*
 * Creates directory `dir` inside `rootfd` as mkdir -p would (missing
 * components get `mode`), resolving every component inside the root; a
 * link to a missing path gets its target created, inside the root too.
 * Returns an O_PATH fd of the directory, or -1 with errno.
 */
int sbx__inroot_mkdir_p(int rootfd, const char *dir, mode_t mode);
/*
 * [volumes] Opens relative `path` under `dirfd` with O_PATH, one component
 * at a time, refusing every symlink (ELOOP) and every ".." (EXDEV) on the
 * way: for a host directory a box can write (a shared root), where a link
 * planted by one box must not send another box's mount elsewhere. An empty
 * path (or only "/" and ".") opens `dirfd` itself. Returns the fd, or -1
 * with errno.
 */
int sbx__beneath_open_nofollow(int dirfd, const char *path);
/* Always use the manual walk (tests check it matches the kernel's). */
void sbx__inroot_force_walk(bool on);

#endif
