/*
 * libFuzzer target for the agent's tar reader and writer (src/agent/tar.c):
 * the bytes are an archive a host (or anyone who reaches the agent) uploads.
 * They are extracted under a private temporary directory with the real
 * code, then that directory is archived again (the download side), and the
 * directory is emptied after each input. The reader must refuse, never
 * crash, hang or write outside the directory: a file appearing next to it
 * (the canary directory's only entry is checked) would be a finding.
 */
#include "agent/tar.h"

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

static int rootfd = -1;
static char base[256], target[300];

/* The agent's root (files.c): the temporary base stands in for the box. */
int files_root_fd(void)
{
    return rootfd;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_DP)
        chmod(p, 0700);
    return remove(p);
}

static void cleanup(void)
{
    rmdir(base);
}

static void setup(void)
{
    if (rootfd >= 0)
        return;
    snprintf(base, sizeof(base), "%s/sbx-fuzz-tar-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(base))
        abort();
    rootfd = open(base, O_PATH | O_DIRECTORY | O_CLOEXEC);
    atexit(cleanup);
    snprintf(target, sizeof(target), "%s/t", base);
}

/* Makes every directory writable again so the tree can be removed. */
static int unlock(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)f;
    if (flag == FTW_D || (st && S_ISDIR(st->st_mode)))
        chmod(p, 0700);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    mkdir(target, 0755);
    int in = memfd_create("tar", MFD_CLOEXEC);
    if (in < 0 || write(in, data, size) != (ssize_t)size)
        abort();
    lseek(in, 0, SEEK_SET);
    int dfd = open(target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct tar_limits lim = {.max_entries = 1000, .max_bytes = 1 << 24, .preserve_owner = 0};
    char msg[512];
    tar_extract_fd(in, dfd, &lim, msg, sizeof(msg));
    close(in);
    int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
    tar_create_fd(out, dfd, msg, sizeof(msg));
    close(out);
    close(dfd);
    nftw(target, unlock, 16, FTW_PHYS);
    nftw(target, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    /* A name that escaped the target would have landed in base (the "box root"). */
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
