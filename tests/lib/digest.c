/* SHA-256 digests a test compares: see digest.h. */
#include "lib/digest.h"

#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void to_hex(struct sha256_ctx *c, char hex[65])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(c, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

void sha256_hex(const void *data, size_t n, char hex[65])
{
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, n, data);
    to_hex(&c, hex);
}

void sha256_file_hex(const char *path, char hex[65])
{
    struct sha256_ctx c;
    sha256_init(&c);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        TAP_FAIL("open %s: %s", path, strerror(errno));
    /* Static: a test of a 1 GiB transfer checks that the file never sat in memory. */
    static uint8_t buf[1 << 20];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        sha256_update(&c, (size_t)n, buf);
    int err = errno;
    close(fd);
    if (n < 0)
        TAP_FAIL("read %s: %s", path, strerror(err));
    to_hex(&c, hex);
}
