/* Host files a test checks: see file.h. */
#include "lib/file.h"

#include "tap.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

mode_t mode_of(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        TAP_FAIL("stat %s: %s", path, strerror(errno));
    return st.st_mode & 07777;
}
