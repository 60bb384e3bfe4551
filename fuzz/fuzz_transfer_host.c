/*
 * libFuzzer target for the host side of a download (src/core/transfer.c,
 * sbx__transfer_unpack_fd): the bytes are the tar stream a box sends. They
 * are extracted into a private temporary directory with the real code; the
 * directory is emptied after each input. The host must refuse, never
 * crash, hang or write outside the directory: any entry appearing next to
 * it in the base directory would be a finding.
 */
#include "core/internal.h"
#include "tree.h"

#include <fcntl.h>
#include <sys/mman.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char target[300];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!target[0])
        snprintf(target, sizeof(target), "%s/t", fuzz_tree_base("dl"));
    mkdir(target, 0755);
    int in = memfd_create("tar", MFD_CLOEXEC);
    if (in < 0 || write(in, data, size) != (ssize_t)size)
        abort();
    lseek(in, 0, SEEK_SET);
    char msg[512];
    sbx__transfer_unpack_fd(in, target, 0, msg, sizeof(msg)); /* closes `in` */
    fuzz_tree_empty_and_check(target);
    return 0;
}
