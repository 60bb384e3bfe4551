/*
 * The image store's garbage: temporary trees of imports whose process died.
 * Apart from image.c (which links libarchive) because state.c's gc calls it
 * and the static sbx-shim links state.c.
 */
#include "providers/linux/linux.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>

/*
 * Removes the temporaries of imports whose process is gone (killed, or a
 * machine that crashed): images/tmp-<pid>-<start>-*, and the none image's
 * none-v1.tmp-*. One whose owner still runs (same pid, same start time) is
 * an import in progress and stays. A name without an owner (an older sbx)
 * goes once it is an hour old.
 */
int sbx__linux_image_gc(const char *state_dir, bool dry_run)
{
    _cleanup_free_ char *images = sbx__printf("%s/images", state_dir);
    return images ? sbx__linux_image_gc_dir(images, dry_run) : 0;
}

int sbx__linux_image_gc_partials(const char *images, long grace_s, bool dry_run)
{
    _cleanup_free_ char *bd = sbx__printf("%s/oci/blobs/sha256", images);
    int dfd = bd ? open(bd, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (dfd < 0)
        return 0;
    int dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        close(dfd);
        return 0;
    }
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len <= 8 || strcmp(de->d_name + len - 8, ".partial"))
            continue;
        int fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
            continue;
        struct stat st, now;
        /*
         * Under the lock its writer would hold, the age is settled: a writer
         * waiting for it finds the name gone and starts a new file
         * (sbx__blob_writer_begin checks the name still holds its file).
         */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            fstat(fd, &st) == 0 && time(NULL) - st.st_mtime >= grace_s &&
            fstatat(dfd, de->d_name, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
            now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
            if (dry_run || unlinkat(dfd, de->d_name, 0) == 0)
                n++;
        }
        close(fd);
    }
    closedir(d);
    close(dfd);
    return n;
}

int sbx__linux_image_gc_dir(const char *images, bool dry_run)
{
    sbx__linux_image_gc_partials(images, SBX_PARTIAL_GRACE_S, dry_run);
    DIR *d = opendir(images);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *t =
            !strncmp(de->d_name, "tmp-", 4) ? de->d_name + 4 : strstr(de->d_name, ".tmp-");
        if (!t)
            continue;
        if (*t == '.')
            t += 5;
        int pid = 0;
        unsigned long long start = 0;
        int used = 0;
        bool abandoned;
        if (sscanf(t, "%d-%llu-%*x%n", &pid, &start, &used) >= 2 && used > 0 && pid > 0) {
            abandoned = sbx__linux_proc_start(pid) != start;
        } else {
            struct stat st;
            abandoned = fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                        time(NULL) - st.st_mtime > 3600;
        }
        if (!abandoned)
            continue;
        if (!dry_run)
            sbx__rm_rf_at(dirfd(d), de->d_name);
        n++;
    }
    closedir(d);
    return n;
}
