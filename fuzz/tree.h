/*
 * For fuzz targets that extract archives into a directory: a private base
 * directory per process, emptying a target between inputs, and the check
 * that nothing escaped it (the base must hold nothing once the target is
 * emptied). Header-only: each target is its own program.
 */
#ifndef SBX_FUZZ_TREE_H
#define SBX_FUZZ_TREE_H

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_tree_dir[256];

static void fuzz_tree_cleanup(void)
{
    rmdir(fuzz_tree_dir);
}

/* Makes the private base directory (once); returns its path. */
static const char *fuzz_tree_base(const char *tag)
{
    if (!fuzz_tree_dir[0]) {
        snprintf(fuzz_tree_dir, sizeof(fuzz_tree_dir), "%s/sbx-fuzz-%s-XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", tag);
        if (!mkdtemp(fuzz_tree_dir))
            abort();
        atexit(fuzz_tree_cleanup);
    }
    return fuzz_tree_dir;
}

/* Directories writable again, so that what an input made can be removed. */
static int fuzz_tree_unlock(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)f;
    if (flag == FTW_D || (st && S_ISDIR(st->st_mode)))
        chmod(p, 0700);
    return 0;
}

static int fuzz_tree_rm(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(p);
}

/*
 * Removes `target` and everything in it, then aborts if anything is left
 * in the base: a name that escaped the target landed there.
 */
static void fuzz_tree_empty_and_check(const char *target)
{
    nftw(target, fuzz_tree_unlock, 16, FTW_PHYS);
    nftw(target, fuzz_tree_rm, 16, FTW_DEPTH | FTW_PHYS);
    DIR *d = opendir(fuzz_tree_dir);
    if (!d)
        abort();
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            abort();
    closedir(d);
}

#endif
