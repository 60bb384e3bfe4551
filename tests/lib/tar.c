/* Archives a test writes by hand: see tar.h. */
#include "lib/tar.h"

#include "tap.h"

#include <archive_entry.h>
#include <string.h>
#include <sys/sysmacros.h>

void tar_add(struct archive *a, const char *path, char type, const char *arg, unsigned mode)
{
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, path);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_mtime(e, TAR_MTIME, 0);
    size_t len = 0;
    switch (type) {
    case 'f':
        archive_entry_set_filetype(e, AE_IFREG);
        len = arg ? strlen(arg) : 0;
        archive_entry_set_size(e, (la_int64_t)len);
        break;
    case 'd':
        archive_entry_set_filetype(e, AE_IFDIR);
        break;
    case 'l':
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_symlink(e, arg);
        break;
    case 'h':
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_hardlink(e, arg);
        break;
    case 'c':
        archive_entry_set_filetype(e, AE_IFCHR);
        archive_entry_set_rdev(e, makedev(1, 3));
        break;
    case 'p':
        archive_entry_set_filetype(e, AE_IFIFO);
        break;
    default:
        TAP_FAIL("%s: bad entry type '%c'", path, type);
    }
    archive_entry_set_perm(e, mode ? mode : 0644);
    if (archive_write_header(a, e) != ARCHIVE_OK)
        TAP_FAIL("archive header %s: %s", path, archive_error_string(a));
    if (len && archive_write_data(a, arg, len) != (la_ssize_t)len)
        TAP_FAIL("archive data %s: %s", path, archive_error_string(a));
    archive_entry_free(e);
}
