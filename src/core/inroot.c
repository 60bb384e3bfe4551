/*
 * Paths resolved inside a directory as if it were "/": ".." stops at it and
 * symlinks (absolute or relative) are followed within it, so neither a path
 * nor a link planted in a box's tree can reach a file outside it.
 * openat2(RESOLVE_IN_ROOT) does that in the kernel (5.6+); without it,
 * walk_open() resolves one component at a time with O_NOFOLLOW and splices
 * link targets itself.
 *
 * Shared by sbx-agent (files inside the box, from inside) and sbx-shim (the
 * box's mount points and workdir, from the host before pivot_root): libc
 * only, so the static agent can carry it.
 */
#include "core/inroot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static bool no_openat2;

void sbx__inroot_force_walk(bool on)
{
    no_openat2 = on;
}

#define MAX_DEPTH 256
#define MAX_LINKS 40

/*
 * Resolves `path` under rootfd by hand: see the file comment. `beneath`:
 * as RESOLVE_BENEATH, a path that would leave the root (an absolute path or
 * link, a ".." above it) fails with EXDEV instead of staying at the root.
 */
static int walk_open(int rootfd, const char *path, int flags, mode_t mode, bool beneath)
{
    if (beneath && path[0] == '/') {
        errno = EXDEV;
        return -1;
    }
    int stack[MAX_DEPTH];
    int depth = 0, links = 0, fd = -1, err = 0;
    stack[0] = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    if (stack[0] < 0)
        return -1;
    char *rest = strdup(path);
    if (!rest) {
        close(stack[0]);
        errno = ENOMEM;
        return -1;
    }
    char *p = rest;
    for (;;) {
        while (*p == '/')
            p++;
        if (!*p) {
            fd = openat(stack[depth], ".", flags | O_CLOEXEC, mode);
            err = errno;
            break;
        }
        char *end = p;
        while (*end && *end != '/')
            end++;
        char *after = end;
        while (*after == '/')
            after++;
        bool last = *after == 0;
        char comp[NAME_MAX + 1];
        if ((size_t)(end - p) > NAME_MAX) {
            err = ENAMETOOLONG;
            break;
        }
        memcpy(comp, p, (size_t)(end - p));
        comp[end - p] = 0;
        p = after;
        if (strcmp(comp, ".") == 0)
            continue;
        if (strcmp(comp, "..") == 0) {
            /* ".." at the root stays at the root, as RESOLVE_IN_ROOT does. */
            if (depth > 0) {
                close(stack[depth--]);
            } else if (beneath) {
                err = EXDEV;
                break;
            }
            continue;
        }
        /* Zeroed: gcc -O2 may test st_mode before fstatat's result (memcheck then warns). */
        struct stat st = { 0 };
        int cfd = -1;
        bool is_link;
        if (last) {
            is_link =
                fstatat(stack[depth], comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
            if (!is_link || (flags & O_NOFOLLOW)) {
                /*
                 * O_NOFOLLOW: a link swapped in since the fstatat fails, never
                 * followed; asked for by the caller, a link at the end is not
                 * followed either (ELOOP, or the link itself with O_PATH), as
                 * the kernel does.
                 */
                fd = openat(stack[depth], comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
                err = errno;
                break;
            }
        } else {
            cfd = openat(stack[depth], comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
            if (cfd < 0 || fstat(cfd, &st) < 0) {
                err = errno;
                if (cfd >= 0)
                    close(cfd);
                break;
            }
            is_link = S_ISLNK(st.st_mode);
            if (!is_link) {
                if (!S_ISDIR(st.st_mode)) {
                    close(cfd);
                    err = ENOTDIR;
                    break;
                }
                if (depth + 1 >= MAX_DEPTH) {
                    close(cfd);
                    err = ENAMETOOLONG;
                    break;
                }
                stack[++depth] = cfd;
                continue;
            }
        }
        /* A symlink: splice its target in front of what is left of the path. */
        char target[PATH_MAX];
        ssize_t tl = cfd >= 0 ? readlinkat(cfd, "", target, sizeof(target) - 1)
                              : readlinkat(stack[depth], comp, target, sizeof(target) - 1);
        if (cfd >= 0)
            close(cfd);
        if (tl < 0 || ++links > MAX_LINKS) {
            err = tl < 0 ? errno : ELOOP;
            break;
        }
        target[tl] = 0;
        if (beneath && target[0] == '/') {
            err = EXDEV;
            break;
        }
        size_t rl = strlen(p);
        char *nr = malloc((size_t)tl + rl + 2);
        if (!nr) {
            err = ENOMEM;
            break;
        }
        memcpy(nr, target, (size_t)tl);
        nr[tl] = '/';
        memcpy(nr + tl + 1, p, rl + 1);
        free(rest);
        rest = p = nr;
        if (target[0] == '/') {
            while (depth > 0)
                close(stack[depth--]);
        }
    }
    while (depth >= 0)
        close(stack[depth--]);
    free(rest);
    if (fd < 0)
        errno = err ? err : EIO;
    return fd;
}

static int open_resolved(int rootfd, const char *path, int flags, mode_t mode, uint64_t resolve)
{
    if (!no_openat2) {
        struct open_how how = {
            .flags = (uint64_t)(flags | O_CLOEXEC),
            .mode = (flags & O_CREAT) ? mode : 0,
            /* Magic links (/proc/PID/root, /proc/self/fd/N) would jump out of any root. */
            .resolve = resolve | RESOLVE_NO_MAGICLINKS,
        };
        /*
         * RESOLVE_IN_ROOT and RESOLVE_BENEATH answer EAGAIN when a rename or
         * mount anywhere on the system raced with the lookup (the kernel
         * cannot prove it stayed inside the root). Retry; past a bound, the
         * careful manual walk gives the same confinement without that check.
         */
        for (int tries = 0; tries < 32; tries++) {
            int fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
            if (fd >= 0 || (errno != ENOSYS && errno != EAGAIN))
                return fd;
            if (errno == ENOSYS) {
                no_openat2 = true;
                break;
            }
        }
    }
    return walk_open(rootfd, path, flags, mode, resolve == RESOLVE_BENEATH);
}

int sbx__inroot_open(int rootfd, const char *path, int flags, mode_t mode)
{
    return open_resolved(rootfd, path, flags, mode, RESOLVE_IN_ROOT);
}

int sbx__beneath_open(int dirfd, const char *path, int flags)
{
    return open_resolved(dirfd, path, flags, 0, RESOLVE_BENEATH);
}

/*
 * A missing component that is a symlink (to a path not there yet) is
 * followed, as Docker does for a WORKDIR (GNU `mkdir -p` refuses): its
 * target is created in its place, itself resolved inside the root. `links`
 * bounds the chain as the kernel's 40.
 */
static int mkdir_p(int rootfd, const char *dir, mode_t mode, int links)
{
    int fd = sbx__inroot_open(rootfd, dir, O_PATH | O_DIRECTORY, 0);
    if (fd >= 0 || errno != ENOENT)
        return fd;
    char *buf = strdup(dir);
    if (!buf)
        return -1;
    size_t len = strlen(buf);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != 0)
            continue;
        char saved = buf[i];
        buf[i] = 0;
        int t = sbx__inroot_open(rootfd, buf, O_PATH | O_DIRECTORY, 0);
        if (t >= 0) {
            close(t);
            buf[i] = saved;
            continue;
        }
        if (errno != ENOENT) {
            free(buf);
            return -1;
        }
        char *slash = strrchr(buf, '/');
        const char *name = slash ? slash + 1 : buf;
        if (slash)
            *slash = 0;
        int pfd = sbx__inroot_open(rootfd, slash && buf[0] ? buf : "/", O_PATH | O_DIRECTORY, 0);
        /* mkdirat never follows a link at `name`: a link there gives EEXIST. */
        int rc = pfd >= 0 ? mkdirat(pfd, name, mode) : -1;
        int e = errno;
        char target[PATH_MAX];
        ssize_t tl = -1;
        if (rc < 0 && e == EEXIST)
            tl = readlinkat(pfd, name, target, sizeof(target) - 1);
        if (pfd >= 0)
            close(pfd);
        if (rc < 0 && e != EEXIST) {
            free(buf);
            errno = e;
            return -1;
        }
        if (tl >= 0) {
            /* A link to nothing yet: create its target, then the rest under it. */
            target[tl] = 0;
            const char *rest = saved ? dir + i : "";
            char *next = NULL;
            int n = ++links > MAX_LINKS ? (errno = ELOOP, -1)
                    : target[0] == '/'  ? asprintf(&next, "%s%s", target, rest)
                                        : asprintf(&next, "%s/%s%s", slash ? buf : "", target, rest);
            free(buf);
            if (n < 0)
                return -1;
            fd = mkdir_p(rootfd, next, mode, links);
            e = errno;
            free(next);
            errno = e;
            return fd;
        }
        if (slash)
            *slash = '/';
        buf[i] = saved;
    }
    free(buf);
    return sbx__inroot_open(rootfd, dir, O_PATH | O_DIRECTORY, 0);
}

int sbx__inroot_mkdir_p(int rootfd, const char *dir, mode_t mode)
{
    return mkdir_p(rootfd, dir, mode, 0);
}

int sbx__beneath_open_nofollow(int dirfd, const char *path)
{
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    const char *p = path;
    while (fd >= 0) {
        while (*p == '/')
            p++;
        if (!*p)
            return fd;
        size_t n = strcspn(p, "/");
        char comp[NAME_MAX + 1];
        if (n > NAME_MAX) {
            close(fd);
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(comp, p, n);
        comp[n] = 0;
        p += n;
        if (!strcmp(comp, "."))
            continue;
        if (!strcmp(comp, "..")) {
            close(fd);
            errno = EXDEV;
            return -1;
        }
        /* O_NOFOLLOW with O_PATH opens a link itself: fstat tells, and a link is refused. */
        int next = openat(fd, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(fd);
        struct stat st;
        if (next >= 0 && fstat(next, &st) == 0 && S_ISLNK(st.st_mode)) {
            close(next);
            errno = ELOOP;
            return -1;
        }
        errno = e;
        fd = next;
    }
    return -1;
}
