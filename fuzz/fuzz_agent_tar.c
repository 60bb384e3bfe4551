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
#include "tree.h"

#include <fcntl.h>
#include <sys/mman.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int rootfd = -1;
static char target[300];

/* The agent's root (files.c): the private base stands in for the box. */
int files_root_fd(void)
{
    return rootfd;
}

static void setup(void)
{
    if (rootfd >= 0)
        return;
    const char *base = fuzz_tree_base("tar");
    rootfd = open(base, O_PATH | O_DIRECTORY | O_CLOEXEC);
    snprintf(target, sizeof(target), "%s/t", base);
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
    /* A name that escaped the target would have landed in the base (the "box root"). */
    fuzz_tree_empty_and_check(target);
    return 0;
}
