/*
 * libFuzzer target for the host side of a download (src/core/transfer.c,
 * sbx__transfer_unpack_fd): the bytes are the tar stream a box sends. They
 * are extracted into a private temporary directory with the real code; the
 * directory is emptied after each input. The host must refuse, never
 * crash, hang or write outside the directory: any entry appearing next to
 * it in the base directory would be a finding.
 */
#include "core/internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char base[256], target[300];

static void cleanup(void)
{
    rmdir(base);
}

static void setup(void)
{
    if (base[0])
        return;
    snprintf(base, sizeof(base), "%s/sbx-fuzz-dl-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(base))
        abort();
    atexit(cleanup);
    snprintf(target, sizeof(target), "%s/t", base);
}

/* Directories writable again so the tree can be removed. */
static int unlock(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)f;
    if (flag == FTW_D || (st && S_ISDIR(st->st_mode)))
        chmod(p, 0700);
    return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    (void)flag;
    return remove(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    mkdir(target, 0755);
    int in = memfd_create("tar", MFD_CLOEXEC);
    if (in < 0 || write(in, data, size) != (ssize_t)size)
        abort();
    lseek(in, 0, SEEK_SET);
    char msg[512];
    sbx__transfer_unpack_fd(in, target, 0, msg, sizeof(msg)); /* closes `in` */
    nftw(target, unlock, 16, FTW_PHYS);
    nftw(target, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    DIR *d = opendir(base);
    if (!d)
        abort();
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            abort();
    closedir(d);
    return 0;
}
