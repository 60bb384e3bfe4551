/*
 * [svc-logs] The box service's output, kept by its shim.
 *
 * The box's first process gets the write ends of two pipes as its fds 1
 * and 2 (box.c); the agent and the service it starts inherit them. The
 * shim, on the host, reads the other ends in its poll loop and appends each
 * read as one record (src/core/logs.h) to <box dir>/service.log. At the
 * bound it renames the file to service.log.1 (replacing the older one) and
 * starts a new one, so at most twice the bound is on disk.
 *
 * The pipes never wait on the disk: a write that fails (disk full, say)
 * drops the bytes and counts them, and the shim reads on.
 */
#include "core/logs.h"
#include "shim/shim.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>

static int open_new(struct shim_log *l)
{
    /* O_EXCL|O_NOFOLLOW: the box directory is ours, but never write through what we did not make. */
    l->fd = open(l->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    l->size = 0;
    return l->fd < 0 ? -errno : 0;
}

int shim_log_open(struct shim_log *l, const char *box_dir, long long max)
{
    l->fd = -1;
    l->max = max;
    l->size = 0;
    l->dropped = 0;
    l->path = sbx__printf("%s/%s", box_dir, SBX_LOG_FILE);
    l->old = sbx__printf("%s/%s", box_dir, SBX_LOG_OLD_FILE);
    if (!l->path || !l->old)
        return -ENOMEM;
    if (max <= 0)
        return 0;
    return open_new(l);
}

static void rotate(struct shim_log *l)
{
    close(l->fd);
    l->fd = -1;
    /* rename replaces service.log.1 at once: a reader sees the old file or the new, never none. */
    if (rename(l->path, l->old) < 0)
        unlink(l->path);
    open_new(l);
}

void shim_log_append(struct shim_log *l, int stream, const void *data, size_t len)
{
    if (l->max <= 0)
        return;
    if (len > SBX_LOG_MAX_RECORD)
        len = SBX_LOG_MAX_RECORD;
    long long need = (long long)(SBX_LOG_HEADER + len);
    if (l->fd >= 0 && l->size > 0 && l->size + need > l->max)
        rotate(l);
    if (l->fd < 0) {
        /* A failed rotation (or open) is retried at the next record, not given up for good. */
        if (open_new(l) < 0) {
            l->dropped += len;
            return;
        }
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned char hdr[SBX_LOG_HEADER];
    sbx__log_header(hdr, stream, (uint32_t)len,
                    (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    struct iovec iov[2] = { { hdr, sizeof(hdr) }, { (void *)data, len } };
    ssize_t w = writev(l->fd, iov, 2);
    if (w == need) {
        l->size += need;
        return;
    }
    l->dropped += len;
    if (w > 0) {
        /*
         * A short write left a torn record, which would end every reader
         * there: cut it off (O_APPEND: it is at the end).
         */
        if (ftruncate(l->fd, l->size) < 0) {
            close(l->fd);
            l->fd = -1;
            unlink(l->path);
        }
    }
}

void shim_log_drain(struct shim_log *l, int *fd, int stream)
{
    static unsigned char buf[SBX_LOG_MAX_RECORD];
    /* 16 reads of up to 64 KiB: 1 MiB a turn, then the loop serves the other descriptors. */
    for (int i = 0; i < 16 && *fd >= 0; i++) {
        ssize_t n = read(*fd, buf, sizeof(buf));
        if (n > 0) {
            shim_log_append(l, stream, buf, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EINTR))
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        /* EOF (every writer is gone: the box ended) or an error: stop watching it. */
        close(*fd);
        *fd = -1;
    }
}

void shim_log_close(struct shim_log *l)
{
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    free(l->path);
    free(l->old);
    l->path = l->old = NULL;
}
