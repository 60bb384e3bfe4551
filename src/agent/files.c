/*
 * Uploads and downloads, confined to the box root. Every path is resolved
 * inside --root by src/core/inroot.c: ".." stops at the root and symlinks
 * (absolute or relative) are followed as if the root were "/", so neither a
 * path nor a link planted in the box can reach a file outside it.
 *
 * An upload is written to a temp file next to the target and renamed over it
 * at the end, so a reader never sees half a file and a symlink at the target
 * is replaced, never followed.
 */
#include "agent/agent.h"
#include "agent/tar.h"
#include "core/inroot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rootfd = -1;
/* The root's own path (resolved), for relative built-in paths (files_box_path). */
static char *root_path;

int files_set_root(const char *root)
{
    rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    free(root_path);
    root_path = realpath(root, NULL);
    /* Tests force the fallback walk to check it behaves like the kernel's. */
    const char *force = getenv("SBX_AGENT_NO_OPENAT2");
    if (force && *force && strcmp(force, "0") != 0)
        sbx__inroot_force_walk(true);
    return rootfd < 0 ? -1 : 0;
}

int files_root_fd(void)
{
    return rootfd;
}

/*
 * A built-in's path as a path inside the root: an absolute one as it is; a
 * relative one joined to the exec's working directory (the child chdir'd
 * there), as the box's commands see that path, so that `upload_dir(d,
 * "x")` lands where `ls x` looks. A working directory outside the root
 * (it cannot be reached from inside) leaves the path relative to the root.
 * malloc'd; NULL when out of memory.
 */
char *files_box_path(const char *path)
{
    if (path[0] == '/' || !root_path)
        return strdup(path);
    char *cwd = getcwd(NULL, 0);
    const char *inside = NULL;
    size_t n = strlen(root_path);
    if (cwd && !strcmp(root_path, "/"))
        inside = cwd;
    else if (cwd && !strncmp(cwd, root_path, n) && (cwd[n] == '/' || cwd[n] == 0))
        inside = cwd[n] ? cwd + n : "/";
    char *out = NULL;
    if (!inside)
        out = strdup(path);
    else if (asprintf(&out, "%s%s%s", inside, inside[strlen(inside) - 1] == '/' ? "" : "/",
                      path) < 0)
        out = NULL;
    free(cwd);
    return out;
}

int root_open(const char *path, int flags, mode_t mode)
{
    return sbx__inroot_open(rootfd, path, flags, mode);
}

static void send_status(struct conn *c, uint32_t ch, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_status(struct conn *c, uint32_t ch, int errnum, const char *fmt, ...)
{
    char msg[PATH_MAX + 256];
    msg[0] = 0;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
    }
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_status_encode(&b, errnum, msg);
    conn_send(c, &b, SBX_MSG_STATUS, ch);
}

/* --- upload -------------------------------------------------------------- */

struct put {
    struct chan ch;
    int dirfd, fd;
    char tmp[64];
    char *base; /* points into path */
    char *path;
    uint32_t mode;
};

static void put_free(struct put *p)
{
    if (p->fd >= 0) {
        close(p->fd);
        unlinkat(p->dirfd, p->tmp, 0);
    }
    if (p->dirfd >= 0)
        close(p->dirfd);
    free(p->path);
    free(p);
}

int file_put_start(struct conn *c, uint32_t ch, const sbx_frame *f)
{
    sbx_msg_file *m = NULL;
    if (sbx__msg_file_decode(f, &m) < 0)
        return -1;
    struct put *p = calloc(1, sizeof(*p));
    if (!p || !(p->path = strdup(m->path))) {
        free(p);
        send_status(c, ch, ENOMEM, "out of memory");
        free(m);
        return 0;
    }
    p->ch.id = ch;
    p->ch.kind = CHAN_PUT;
    p->dirfd = p->fd = -1;
    p->mode = m->mode & 07777;
    free(m);
    char *slash = strrchr(p->path, '/');
    const char *dir = "/";
    if (slash) {
        *slash = 0;
        p->base = slash + 1;
        if (p->path[0])
            dir = p->path;
    } else {
        p->base = p->path;
    }
    if (!p->base[0] || strcmp(p->base, ".") == 0 || strcmp(p->base, "..") == 0) {
        if (slash)
            *slash = '/';
        send_status(c, ch, EISDIR, "'%s' names a directory, not a file", p->path);
        put_free(p);
        return 0;
    }
    p->dirfd = sbx__inroot_mkdir_p(rootfd, dir, 0755);
    if (p->dirfd < 0) {
        int e = errno;
        send_status(c, ch, e, "cannot create directory '%s': %s", dir, strerror(e));
        put_free(p);
        return 0;
    }
    /*
     * A target that is a directory (or a link to one, resolved inside the
     * root) is refused at once, before any data: the host then puts the file
     * into it under its own name, as `docker cp` does.
     */
    struct stat tst;
    bool found = fstatat(p->dirfd, p->base, &tst, AT_SYMLINK_NOFOLLOW) == 0;
    bool is_dir = found && S_ISDIR(tst.st_mode);
    if (found && S_ISLNK(tst.st_mode)) {
        if (slash)
            *slash = '/';
        int dfd = root_open(p->path, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
        if (slash)
            *slash = 0;
        is_dir = dfd >= 0;
        if (dfd >= 0)
            close(dfd);
    }
    if (is_dir) {
        if (slash)
            *slash = '/';
        send_status(c, ch, EISDIR, "'%s' names a directory, not a file", p->path);
        put_free(p);
        return 0;
    }
    static unsigned counter;
    for (int tries = 0; tries < 100; tries++) {
        snprintf(p->tmp, sizeof(p->tmp), ".sbx-upload-%d-%u", (int)getpid(), counter++);
        p->fd =
            openat(p->dirfd, p->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (p->fd >= 0 || errno != EEXIST)
            break;
    }
    if (p->fd < 0) {
        int e = errno;
        send_status(c, ch, e, "cannot create a file in '%s': %s", dir, strerror(e));
        put_free(p);
        return 0;
    }
    if (slash)
        *slash = '/';
    conn_chan_add(c, &p->ch);
    return 0;
}

void file_put_data(struct conn *c, struct chan *ch, const sbx_frame *f)
{
    struct put *p = (struct put *)ch;
    int e = 0;
    const char *what = "write";
    if (f->len > 0) {
        const uint8_t *d = f->payload;
        size_t left = f->len;
        while (left) {
            ssize_t n = write(p->fd, d, left);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                e = n < 0 ? errno : EIO;
                break;
            }
            d += n;
            left -= (size_t)n;
        }
        if (!e)
            return;
    } else {
        /* EOF: set the mode (umask does not apply), then move it into place. */
        if (fchmod(p->fd, p->mode) < 0) {
            e = errno;
            what = "chmod";
        } else if (close(p->fd) < 0) {
            e = errno;
            p->fd = -1;
            unlinkat(p->dirfd, p->tmp, 0);
        } else {
            p->fd = -1;
            if (renameat(p->dirfd, p->tmp, p->dirfd, p->base) < 0) {
                e = errno;
                what = "rename";
                unlinkat(p->dirfd, p->tmp, 0);
            }
        }
    }
    conn_chan_remove(c, ch);
    if (e)
        send_status(c, ch->id, e, "cannot %s '%s': %s", what, p->path, strerror(e));
    else
        send_status(c, ch->id, 0, NULL);
    put_free(p);
}

/* --- download ------------------------------------------------------------ */

struct get {
    struct chan ch;
    int fd;
    char *path;
    /*
     * Bytes still to send: exactly the size FILE_INFO announced. A file that
     * keeps growing while it is read (a log, `yes > f`) would otherwise never
     * end; the host refuses more bytes than announced anyway.
     */
    uint64_t left;
};

static void get_free(struct get *g)
{
    if (g->fd >= 0)
        close(g->fd);
    free(g->path);
    free(g);
}

int file_get_start(struct conn *c, uint32_t ch, const sbx_frame *f)
{
    sbx_msg_file *m = NULL;
    if (sbx__msg_file_decode(f, &m) < 0)
        return -1;
    /* O_NONBLOCK: opening a FIFO planted at the path must not hang the agent. */
    int fd = root_open(m->path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        send_status(c, ch, e, "cannot open '%s': %s", m->path, strerror(e));
        if (fd >= 0)
            close(fd);
        free(m);
        return 0;
    }
    if (!S_ISREG(st.st_mode)) {
        int e = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        send_status(c, ch, e, "cannot download '%s': %s", m->path,
                    e == EISDIR ? "it is a directory" : "not a regular file");
        close(fd);
        free(m);
        return 0;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct get *g = calloc(1, sizeof(*g));
    if (!g || !(g->path = strdup(m->path))) {
        free(g);
        close(fd);
        send_status(c, ch, ENOMEM, "out of memory");
        free(m);
        return 0;
    }
    free(m);
    g->ch.id = ch;
    g->ch.kind = CHAN_GET;
    g->fd = fd;
    g->left = (uint64_t)st.st_size;
    sbx_pbuf b = {0};
    sbx__pbuf_begin(&b);
    sbx__msg_file_info_encode(&b, st.st_mode & 07777, (uint64_t)st.st_size);
    conn_send(c, &b, SBX_MSG_FILE_INFO, ch);
    conn_chan_add(c, &g->ch);
    return 0;
}

bool file_get_pump(struct conn *c, struct chan *ch)
{
    struct get *g = (struct get *)ch;
    static uint8_t buf[SBX_PROTO_CHUNK];
    while (!c->throttled && !c->dead) {
        size_t want = g->left < sizeof(buf) ? (size_t)g->left : sizeof(buf);
        ssize_t n = want ? read(g->fd, buf, want) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n > 0) {
            g->left -= (uint64_t)n;
            conn_send_raw(c, SBX_MSG_DATA, ch->id, buf, (size_t)n);
            continue;
        }
        conn_chan_remove(c, ch);
        if (n < 0) {
            int e = errno;
            send_status(c, ch->id, e, "cannot read '%s': %s", g->path, strerror(e));
        } else if (g->left) {
            send_status(c, ch->id, EIO, "cannot read '%s': it shrank while it was read", g->path);
        } else {
            send_status(c, ch->id, 0, NULL);
        }
        get_free(g);
        return true;
    }
    return false;
}

void file_abort(struct conn *c, struct chan *ch)
{
    (void)c;
    if (ch->kind == CHAN_PUT)
        put_free((struct put *)ch);
    else if (ch->kind == CHAN_GET)
        get_free((struct get *)ch);
}
