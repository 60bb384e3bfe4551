/*
 * Transfer: directories and archives in and out of a box as tar streams,
 * and bytes without a local file (docs/transfer.md).
 *
 * Each call is one exec of an sbx-agent built-in (src/agent/tar.c): the box
 * side reads or writes the tar itself, with its paths resolved inside the
 * box root, so the box needs no shell and no tar. The stream rides on the
 * exec's stdin (its STDIN_ACK window) or stdout (its backpressure), so
 * neither side holds more than a few MiB of it. The host side is
 * libarchive, on a thread of this call, connected to the exec by a pipe.
 */
#include "core/internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/transfer_exec.h"

#define STDERR_KEEP 4096
#define READ_FILE_DEFAULT_MAX ((size_t)64 << 20)

/*
 * The providers whose boxes run sbx-agent, and so have the transfer
 * built-ins: those declaring SBX_CAP_AGENT (linux, docker, local through
 * the host's `sbx-agent builtin`, and kit plugins such as hostbox). The
 * others get the same transfers through their file ops and the box's shell
 * (transfer_exec.c).
 */
static bool via_agent(sbx_sandbox *sb)
{
    sbx_provider *p = sbx_sandbox_provider(sb);
    return p && sbx_provider_supports(p, "agent");
}

/* A relative box path is relative to the sandbox's workdir, as upload/download's. */
static char *box_path(sbx_sandbox *sb, const char *path)
{
    const char *wd = sbx_sandbox_workdir(sb);
    if (path[0] != '/' && wd && wd[0] == '/')
        return sbx__printf("%s/%s", wd, path);
    return strdup(path);
}

/* Collects the first STDERR_KEEP bytes of the built-in's stderr (loop thread). */
struct errbuf {
    char data[STDERR_KEEP + 1];
    size_t len;
};

static void stderr_cb(int stream, const char *data, size_t len, void *user)
{
    struct errbuf *e = user;
    if (stream != SBX_STREAM_STDERR || e->len >= STDERR_KEEP)
        return;
    size_t n = len < STDERR_KEEP - e->len ? len : STDERR_KEEP - e->len;
    memcpy(e->data + e->len, data, n);
    e->len += n;
    e->data[e->len] = 0;
}

int sbx__transfer_failure(const sbx_exec_result *res, const char *reason, bool builtin,
                          const char *what, const char *path, sbx_error **err)
{
    int status = sbx_exec_result_return_code(res);
    const char *etype = sbx_exec_result_error_type(res);
    const char *serr = sbx_exec_result_stderr(res, NULL);
    const char *msg = reason ? reason : serr ? serr : "";
    size_t ml = strnlen(msg, STDERR_KEEP);
    while (ml && msg[ml - 1] == '\n')
        ml--;
    if (etype && !strcmp(etype, "timeout"))
        return sbx__set_error(err, SBX_ETIMEDOUT, "%s '%s': %.*s", what, path, (int)ml, msg);
    if (etype && !strcmp(etype, "sandbox") && !reason)
        return sbx__set_error(err, SBX_EIO, "%s '%s': the sandbox did not answer: %.*s", what,
                              path, (int)ml, msg);
    if (builtin && status == 127 && !reason)
        return sbx__set_error(err, SBX_ENOTSUP,
                              "%s '%s': the box's sbx-agent has no transfer built-ins (an older "
                              "agent?): %.*s",
                              what, path, (int)ml, msg);
    return sbx__set_error(err, SBX_ETRANSFER, "%s '%s': %.*s", what, path, (int)ml,
                          ml ? msg : "the transfer failed in the sandbox");
}

/*
 * Runs built-in `argv` in the box with `opts` (stdin/stdout already set by
 * the caller) and maps its outcome onto the transfer taxonomy.
 */
static int run_builtin(sbx_sandbox *sb, sbx_exec_opts *opts, const char *const *argv,
                       const char *what, const char *path, struct errbuf *eb,
                       sbx_exec_result **res_out, sbx_error **err)
{
    size_t n = 0;
    while (argv[n])
        n++;
    char **v = calloc(n + 1, sizeof(*v));
    for (size_t i = 0; v && i < n; i++)
        if (!(v[i] = strdup(argv[i]))) {
            sbx_strv_free(v);
            v = NULL;
        }
    if (!v)
        return sbx__set_error(err, SBX_ENOMEM, "%s '%s': out of memory", what, path);
    sbx_strv_free(opts->builtin_argv);
    opts->builtin_argv = v;
    sbx_exec_opts_set_timeout(opts, -1);
    sbx_exec_opts_set_output_cb(opts, stderr_cb, eb);
    sbx_exec_result *res = NULL;
    sbx_error *e = NULL;
    int rc = sbx_sandbox_exec(sb, argv[0], opts, &res, &e);
    if (rc < 0) {
        int code = rc == SBX_EPROVIDER ? SBX_EIO : rc;
        rc = sbx__set_error(err, code, "%s '%s': %s", what, path,
                            e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
        return rc;
    }
    if (sbx_exec_result_return_code(res) != 0) {
        rc = sbx__transfer_failure(res, eb->len ? eb->data : NULL, true, what, path, err);
        sbx_exec_result_free(res);
        return rc;
    }
    if (res_out)
        *res_out = res;
    else
        sbx_exec_result_free(res);
    return SBX_OK;
}

/* --- host side: libarchive on a thread ------------------------------------ */

struct side {
    int fd;          /* our end of the pipe (closed by the thread when done) */
    const char *dir; /* the host directory */
    bool beneath;    /* unpack: into dirfd, the thread's own working directory */
    int dirfd;       /* with beneath: the directory, walked once (sbx__mkdir_trusted) */
    unsigned flags;
    int code; /* SBX_OK, or what failed on the host */
    char msg[512];
};

static void side_fail(struct side *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void side_fail(struct side *s, int code, const char *fmt, ...)
{
    if (s->code)
        return;
    s->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof(s->msg), fmt, ap);
    va_end(ap);
}

/* A write to a pipe whose reader left must give EPIPE, not kill the process. */
static void block_sigpipe(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

/* Writes the host directory s->dir as a pax tar stream to s->fd. */
static void *pack_thread(void *arg)
{
    struct side *s = arg;
    block_sigpipe();
    struct archive *disk = archive_read_disk_new();
    struct archive *a = archive_write_new();
    struct archive_entry_linkresolver *lr = archive_entry_linkresolver_new();
    char *buf = malloc(256 << 10);
    size_t dl = strlen(s->dir);
    while (dl > 1 && s->dir[dl - 1] == '/')
        dl--;
    if (!disk || !a || !lr || !buf) {
        side_fail(s, SBX_ENOMEM, "out of memory");
        goto out;
    }
    archive_read_disk_set_symlink_physical(disk);
    archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
                                             ARCHIVE_READDISK_NO_FFLAGS |
                                             ARCHIVE_READDISK_NO_SPARSE);
    archive_write_set_format_pax_restricted(a);
    archive_write_set_bytes_per_block(a, 0); /* no blocking: every write goes out */
    archive_entry_linkresolver_set_strategy(
        lr, archive_format(a) ? archive_format(a) : ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
    if (archive_write_open_fd(a, s->fd) != ARCHIVE_OK) {
        side_fail(s, SBX_EIO, "%s", archive_error_string(a));
        goto out;
    }
    if (archive_read_disk_open(disk, s->dir) != ARCHIVE_OK) {
        side_fail(s, SBX_ENOENT, "cannot read '%s': %s", s->dir, archive_error_string(disk));
        goto out;
    }
    for (;;) {
        struct archive_entry *e = archive_entry_new();
        if (!e) {
            side_fail(s, SBX_ENOMEM, "out of memory");
            break;
        }
        int r = archive_read_next_header2(disk, e);
        if (r == ARCHIVE_EOF) {
            archive_entry_free(e);
            break;
        }
        if (r < ARCHIVE_WARN) {
            side_fail(s, SBX_EIO, "reading '%s': %s", s->dir, archive_error_string(disk));
            archive_entry_free(e);
            break;
        }
        archive_read_disk_descend(disk);
        const char *src = archive_entry_sourcepath(e);
        const char *p = archive_entry_pathname(e);
        /* Names relative to the directory: "." for itself, "a/b" below it. */
        const char *rel = p + (strncmp(p, s->dir, dl) == 0 ? dl : 0);
        while (*rel == '/')
            rel++;
        archive_entry_copy_pathname(e, *rel ? rel : ".");
        archive_entry_sparse_clear(e);
        if (!(s->flags & SBX_TRANSFER_PRESERVE_OWNER)) {
            archive_entry_set_uname(e, NULL);
            archive_entry_set_gname(e, NULL);
        }
        mode_t type = archive_entry_filetype(e);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
            archive_entry_free(e);
            continue; /* devices, FIFOs, sockets: not transferred (docs/transfer.md) */
        }
        struct archive_entry *spare = NULL;
        archive_entry_linkify(lr, &e, &spare);
        if (spare)
            archive_entry_free(spare);
        if (!e)
            continue;
        bool data = type == AE_IFREG && archive_entry_size(e) > 0 && !archive_entry_hardlink(e);
        int fd = -1;
        if (data && (fd = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)) < 0) {
            side_fail(s, SBX_EIO, "cannot open '%s': %s", src, strerror(errno));
            archive_entry_free(e);
            break;
        }
        if (archive_write_header(a, e) < ARCHIVE_WARN) {
            side_fail(s, SBX_EIO, "the box stopped reading the archive (%s)",
                      archive_error_string(a));
            if (fd >= 0)
                close(fd);
            archive_entry_free(e);
            break;
        }
        int64_t left = data ? archive_entry_size(e) : 0;
        while (left > 0) {
            ssize_t n = read(fd, buf, left < (256 << 10) ? (size_t)left : (256 << 10));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                /* Shrank while read: pad with zeros, and fail the upload. */
                side_fail(s, SBX_EIO, "'%s' changed while it was read", src);
                memset(buf, 0, 256 << 10);
                n = left < (256 << 10) ? (ssize_t)left : (256 << 10);
            }
            if (archive_write_data(a, buf, (size_t)n) < 0) {
                side_fail(s, SBX_EIO, "the box stopped reading the archive (%s)",
                          archive_error_string(a));
                break;
            }
            left -= n;
        }
        if (fd >= 0)
            close(fd);
        archive_entry_free(e);
        if (s->code)
            break;
    }
    if (!s->code && archive_write_close(a) != ARCHIVE_OK)
        side_fail(s, SBX_EIO, "the box stopped reading the archive (%s)", archive_error_string(a));
out:
    if (a)
        archive_write_free(a);
    if (disk)
        archive_read_free(disk);
    if (lr)
        archive_entry_linkresolver_free(lr);
    free(buf);
    close(s->fd);
    return NULL;
}

/* Prefixes a name in the archive with the host directory. */
static char *under(const char *dir, const char *name)
{
    while (name[0] == '.' && name[1] == '/')
        name += 2;
    if (!strcmp(name, ".") || !name[0])
        return strdup(dir);
    return sbx__printf("%s/%s", dir, name);
}

/* A name relative to the target: not absolute, no ".." component. */
static bool safe_name(const char *n)
{
    if (!n || n[0] == '/')
        return false;
    for (const char *p = n; *p;) {
        size_t len = strcspn(p, "/");
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return false;
        p += len;
        while (*p == '/')
            p++;
    }
    return true;
}

/*
 * Reads a tar stream from s->fd into host directory s->dir. libarchive's
 * secure flags refuse "..", absolute names and writing through a link; the
 * box chose every byte, so nothing it names lands outside s->dir.
 */
static void *unpack_thread(void *arg)
{
    struct side *s = arg;
    struct archive *a = archive_read_new();
    struct archive *w = archive_write_disk_new();
    uint64_t entries = 0, bytes = 0;
    const char *dir = s->dir;
    bool root_seen = false;
    mode_t root_mode = 0;
    time_t root_mtime = 0;
    if (!a || !w) {
        side_fail(s, SBX_ENOMEM, "out of memory");
        goto out;
    }
    if (s->beneath) {
        /*
         * Names relative to the directory walked once, as this thread's own
         * working directory (unshare(CLONE_FS): the process's stays): no
         * component above it is looked up again, so a user who owns one
         * cannot swap it for a link while the archive is written.
         */
        if (unshare(CLONE_FS) < 0 || fchdir(s->dirfd) < 0) {
            side_fail(s, SBX_EIO, "cannot enter '%s': %s", s->dir, strerror(errno));
            goto out;
        }
        dir = ".";
    }
    archive_read_support_format_tar(a);
    int opts = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
               ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_UNLINK;
    if (s->flags & SBX_TRANSFER_PRESERVE_OWNER)
        opts |= ARCHIVE_EXTRACT_OWNER;
    archive_write_disk_set_options(w, opts);
    if (archive_read_open_fd(a, s->fd, 256 << 10) != ARCHIVE_OK) {
        /* Not a tar is the box's doing; a failed read is the host's. */
        if (archive_errno(a) == EILSEQ || archive_errno(a) <= 0) /* FILE_FORMAT, MISC */
            side_fail(s, SBX_EPROTO, "the archive from the box is malformed: %s",
                      archive_error_string(a));
        else
            side_fail(s, SBX_EIO, "%s", archive_error_string(a));
        goto out;
    }
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r < ARCHIVE_WARN) {
            side_fail(s, SBX_EPROTO, "the archive from the box is malformed: %s",
                      archive_error_string(a));
            break;
        }
        /* The box chooses how much comes: the host holds it to the upload limits. */
        if (++entries > SBX_TRANSFER_DEFAULT_MAX_ENTRIES) {
            side_fail(s, SBX_EPROTO, "the box sent more than %llu entries",
                      SBX_TRANSFER_DEFAULT_MAX_ENTRIES);
            break;
        }
        const char *name = archive_entry_pathname(e);
        const char *hl = archive_entry_hardlink(e);
        if (!safe_name(name) || (hl && !safe_name(hl))) {
            side_fail(s, SBX_EPROTO, "the box sent an unsafe name '%s'",
                      !safe_name(name) ? (name ? name : "") : hl);
            break;
        }
        if (!strcmp(name, ".") || !strcmp(name, "./")) {
            /* The directory itself: its mode and mtime are set after everything below it. */
            root_seen = true;
            root_mode = archive_entry_perm(e) & 01777;
            root_mtime = archive_entry_mtime(e);
            continue;
        }
        /*
         * Only files, directories and links are made: a device node or a FIFO
         * from the box is skipped, so no box can hand the host a device. The
         * setuid and setgid bits are dropped (the sticky bit on files): as
         * root, libarchive would otherwise recreate a box's setuid-root
         * binary on the host.
         */
        mode_t type = archive_entry_filetype(e);
        if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && !hl)
            continue;
        archive_entry_set_perm(e, archive_entry_perm(e) & (type == AE_IFDIR ? 01777 : 0777));
        char *dst = under(dir, name);
        char *hdst = hl ? under(dir, hl) : NULL;
        if (!dst || (hl && !hdst)) {
            free(dst);
            side_fail(s, SBX_ENOMEM, "out of memory");
            break;
        }
        archive_entry_copy_pathname(e, dst);
        if (hdst)
            archive_entry_copy_hardlink(e, hdst);
        free(dst);
        free(hdst);
        if (archive_write_header(w, e) < ARCHIVE_WARN) {
            side_fail(s, SBX_EIO, "cannot write '%s': %s", archive_entry_pathname(e),
                      archive_error_string(w));
            break;
        }
        const void *blk;
        size_t len;
        int64_t off;
        while ((r = archive_read_data_block(a, &blk, &len, &off)) == ARCHIVE_OK) {
            if ((bytes += len) > SBX_TRANSFER_DEFAULT_MAX_BYTES) {
                side_fail(s, SBX_EPROTO, "the box sent more than %llu bytes of files",
                          SBX_TRANSFER_DEFAULT_MAX_BYTES);
                break;
            }
            if (archive_write_data_block(w, blk, len, off) < ARCHIVE_WARN) {
                side_fail(s, SBX_EIO, "cannot write '%s': %s", archive_entry_pathname(e),
                          archive_error_string(w));
                break;
            }
        }
        if (s->code)
            break;
        if (r != ARCHIVE_EOF) {
            side_fail(s, SBX_EPROTO, "the archive from the box is malformed: %s",
                      archive_error_string(a));
            break;
        }
        if (archive_write_finish_entry(w) < ARCHIVE_WARN) {
            side_fail(s, SBX_EIO, "cannot finish '%s': %s", archive_entry_pathname(e),
                      archive_error_string(w));
            break;
        }
    }
out:
    /* Closing applies the directories' modes and times, deepest first. */
    if (w) {
        if (archive_write_close(w) != ARCHIVE_OK && !s->code)
            side_fail(s, SBX_EIO, "%s", archive_error_string(w));
        archive_write_free(w);
    }
    if (a)
        archive_read_free(a);
    if (root_seen && !s->code) {
        struct timespec ts[2] = {{root_mtime, 0}, {root_mtime, 0}};
        if (chmod(dir, root_mode & 07777) < 0 || utimensat(AT_FDCWD, dir, ts, 0) < 0)
            side_fail(s, SBX_EIO, "cannot set the mode and mtime of '%s': %s", s->dir,
                      strerror(errno));
    }
    /*
     * Closing the read end early makes the exec's output fail with EPIPE,
     * which kills the box's side: a failed download stops at once.
     */
    close(s->fd);
    return NULL;
}

int sbx__transfer_unpack_fd(int fd, const char *dir, unsigned flags, char *msg, size_t msglen)
{
    struct side s = {.fd = fd, .dir = dir, .flags = flags};
    unpack_thread(&s);
    if (msg && msglen)
        snprintf(msg, msglen, "%s", s.msg);
    return s.code;
}

/* --- the calls ------------------------------------------------------------ */

static int upload_stream(sbx_sandbox *sb, int in_fd, const char *remote, unsigned flags,
                         const char *what, const char *shown, sbx_error **err)
{
    if (!via_agent(sb))
        return sbx__xfer_exec_extract(sb, in_fd, remote, flags, what, shown, err);
    char po[4], me[32], mb[32];
    snprintf(po, sizeof(po), "%u", (flags & SBX_TRANSFER_PRESERVE_OWNER) ? 1u : 0u);
    snprintf(me, sizeof(me), "%llu", SBX_TRANSFER_DEFAULT_MAX_ENTRIES);
    snprintf(mb, sizeof(mb), "%llu", SBX_TRANSFER_DEFAULT_MAX_BYTES);
    const char *argv[] = {"tar-extract", remote, po, me, mb, NULL};
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (!o)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    sbx_exec_opts_set_stdin_fd(o, in_fd);
    struct errbuf eb = {.len = 0};
    int rc = run_builtin(sb, o, argv, what, shown, &eb, NULL, err);
    sbx_exec_opts_free(o);
    return rc;
}

int sbx_sandbox_upload_dir(sbx_sandbox *sb, const char *local_dir, const char *remote_dir,
                           unsigned flags, sbx_error **err)
{
    if (!sb || !local_dir || !remote_dir || !remote_dir[0])
        return sbx__set_error(err, SBX_EINVAL,
                              "upload_dir: a sandbox, a local and a remote "
                              "directory are needed");
    int rc;
    struct stat st;
    if (stat(local_dir, &st) < 0)
        return sbx__set_errno(err, sbx__code_from_errno(errno), errno,
                              "uploading '%s': cannot "
                              "read it: %s",
                              local_dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return sbx__set_error(err, SBX_EINVAL,
                              "uploading '%s': not a directory (use upload for "
                              "a file)",
                              local_dir);
    /* A link to a directory is followed here (as stat did), never below it. */
    _cleanup_free_ char *real = realpath(local_dir, NULL);
    if (!real)
        return sbx__set_errno(err, sbx__code_from_errno(errno), errno,
                              "uploading '%s': cannot resolve it: %s", local_dir, strerror(errno));
    _cleanup_free_ char *remote = box_path(sb, remote_dir);
    int p[2];
    if (!remote || pipe2(p, O_CLOEXEC) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "uploading '%s': cannot make a pipe", local_dir);
    struct side s = {.fd = p[1], .dir = real, .flags = flags};
    pthread_t t;
    if (pthread_create(&t, NULL, pack_thread, &s) != 0) {
        close(p[0]);
        close(p[1]);
        return sbx__set_error(err, SBX_ENOMEM, "uploading '%s': cannot start a thread", local_dir);
    }
    sbx_error *e = NULL;
    rc = upload_stream(sb, p[0], remote, flags, "uploading to", remote, &e);
    /* The box stopped reading (done or failed): the packer sees EPIPE and ends. */
    close(p[0]);
    pthread_join(t, NULL);
    if (s.code && (rc == SBX_OK || rc == SBX_ETRANSFER)) {
        /* The host's own failure explains a box's "truncated archive". */
        sbx_error_free(e);
        return sbx__set_error(err, s.code, "uploading '%s' to '%s': %s", local_dir, remote, s.msg);
    }
    if (rc < 0) {
        sbx__fail(err, e);
        return rc;
    }
    return SBX_OK;
}

int sbx_sandbox_upload_archive(sbx_sandbox *sb, int fd, const char *remote_dir, unsigned flags,
                               sbx_error **err)
{
    if (!sb || fd < 0 || !remote_dir || !remote_dir[0])
        return sbx__set_error(err, SBX_EINVAL,
                              "upload_archive: a sandbox, an fd and a remote "
                              "directory are needed");
    _cleanup_free_ char *remote = box_path(sb, remote_dir);
    if (!remote)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return upload_stream(sb, fd, remote, flags, "uploading an archive to", remote, err);
}

static int download_stream(sbx_sandbox *sb, const char *remote, int out_fd, sbx_error **err)
{
    if (!via_agent(sb))
        return sbx__xfer_exec_create(sb, remote, out_fd, err);
    const char *argv[] = {"tar-create", remote, NULL};
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (!o)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, out_fd);
    sbx_exec_opts_set_keep_output(o, 0);
    sbx_exec_opts_set_output_limit(o, SIZE_MAX);
    struct errbuf eb = {.len = 0};
    int rc = run_builtin(sb, o, argv, "downloading", remote, &eb, NULL, err);
    sbx_exec_opts_free(o);
    return rc;
}

int sbx_sandbox_download_dir(sbx_sandbox *sb, const char *remote_dir, const char *local_dir,
                             unsigned flags, sbx_error **err)
{
    if (!sb || !local_dir || !local_dir[0] || !remote_dir || !remote_dir[0])
        return sbx__set_error(err, SBX_EINVAL,
                              "download_dir: a sandbox, a remote and a local "
                              "directory are needed");
    int rc;
    /*
     * The directory (made with its parents when missing) is walked once from
     * "/", a link on the way followed only when nobody but root and the
     * caller could have put it there; entries are written beneath that
     * descriptor by names relative to it, where libarchive's SECURE_SYMLINKS
     * refuses any link the archive planted.
     */
    _cleanup_free_ char *what = sbx__printf("downloading '%s' to '%s'", remote_dir, local_dir);
    if (!what)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_close_ int dfd = sbx__mkdir_trusted(local_dir, 0755, what, err);
    if (dfd < 0)
        return dfd;
    _cleanup_free_ char *remote = box_path(sb, remote_dir);
    int p[2];
    if (!remote || pipe2(p, O_CLOEXEC) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "downloading '%s': cannot make a pipe",
                              remote_dir);
    struct side s = {.fd = p[0], .dir = local_dir, .beneath = true, .dirfd = dfd, .flags = flags};
    pthread_t t;
    if (pthread_create(&t, NULL, unpack_thread, &s) != 0) {
        close(p[0]);
        close(p[1]);
        return sbx__set_error(err, SBX_ENOMEM, "downloading '%s': cannot start a thread",
                              remote_dir);
    }
    sbx_error *e = NULL;
    rc = download_stream(sb, remote, p[1], &e);
    close(p[1]); /* EOF for the unpacker */
    pthread_join(t, NULL);
    /* The host's failure explains the box's EPIPE; a box's failure explains a short archive. */
    if (s.code && (rc == SBX_OK || rc == SBX_EIO)) {
        sbx_error_free(e);
        return sbx__set_error(err, s.code, "downloading '%s' to '%s': %s", remote, local_dir,
                              s.msg);
    }
    if (rc < 0) {
        sbx__fail(err, e);
        return rc;
    }
    return SBX_OK;
}

int sbx_sandbox_download_archive(sbx_sandbox *sb, const char *remote_dir, int fd, sbx_error **err)
{
    if (!sb || fd < 0 || !remote_dir || !remote_dir[0])
        return sbx__set_error(err, SBX_EINVAL,
                              "download_archive: a sandbox, a remote directory "
                              "and an fd are needed");
    _cleanup_free_ char *remote = box_path(sb, remote_dir);
    if (!remote)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return download_stream(sb, remote, fd, err);
}

int sbx_sandbox_remote_kind(sbx_sandbox *sb, const char *remote_path, const char **kind_out,
                            sbx_error **err)
{
    if (!sb || !remote_path || !remote_path[0] || !kind_out)
        return sbx__set_error(err, SBX_EINVAL, "remote_kind: a sandbox and a path are needed");
    int rc;
    _cleanup_free_ char *remote = box_path(sb, remote_path);
    if (!remote)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!via_agent(sb))
        return sbx__xfer_exec_kind(sb, remote, kind_out, err);
    const char *argv[] = {"kind", remote, NULL};
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (!o)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    sbx_exec_opts_set_output_limit(o, STDERR_KEEP);
    struct errbuf eb = {.len = 0};
    sbx_exec_result *res = NULL;
    rc = run_builtin(sb, o, argv, "probing", remote, &eb, &res, err);
    sbx_exec_opts_free(o);
    if (rc < 0)
        return rc;
    const char *out = sbx_exec_result_stdout(res, NULL);
    const char *k = NULL;
    if (out && !strcmp(out, "file\n"))
        k = "file";
    else if (out && !strcmp(out, "dir\n"))
        k = "dir";
    else if (out && !strcmp(out, "other\n"))
        k = "other";
    else if (!out || strcmp(out, "missing\n") != 0)
        rc =
            sbx__set_error(err, SBX_EPROTO, "probing '%s': unexpected answer from the box", remote);
    sbx_exec_result_free(res);
    if (rc == SBX_OK)
        *kind_out = k;
    return rc;
}

int sbx_sandbox_write_file(sbx_sandbox *sb, const char *remote_path, const void *data, size_t len,
                           unsigned mode, sbx_error **err)
{
    if (!sb || !remote_path || !remote_path[0] || (!data && len) || mode > 07777)
        return sbx__set_error(err, SBX_EINVAL,
                              "write_file: a sandbox, a path, the bytes and a "
                              "mode (at most 07777) are needed");
    int rc;
    _cleanup_free_ char *remote = box_path(sb, remote_path);
    if (!remote)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!via_agent(sb))
        return sbx__xfer_exec_write(sb, remote, data ? data : "", len, mode, err);
    char m[16], mx[32];
    snprintf(m, sizeof(m), "%o", mode);
    snprintf(mx, sizeof(mx), "%zu", len);
    const char *argv[] = {"write-file", remote, m, mx, NULL};
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (!o)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (sbx_exec_opts_set_stdin(o, data ? data : "", len) < 0) {
        sbx_exec_opts_free(o);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    struct errbuf eb = {.len = 0};
    rc = run_builtin(sb, o, argv, "writing", remote, &eb, NULL, err);
    sbx_exec_opts_free(o);
    return rc;
}

int sbx_sandbox_read_file(sbx_sandbox *sb, const char *remote_path, size_t max_bytes,
                          char **data_out, size_t *len_out, sbx_error **err)
{
    if (!sb || !remote_path || !remote_path[0] || !data_out || !len_out)
        return sbx__set_error(err, SBX_EINVAL, "read_file: a sandbox and a path are needed");
    int rc;
    if (!max_bytes)
        max_bytes = READ_FILE_DEFAULT_MAX;
    _cleanup_free_ char *remote = box_path(sb, remote_path);
    if (!remote)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!via_agent(sb))
        return sbx__xfer_exec_read(sb, remote, max_bytes, data_out, len_out, err);
    char mx[32];
    snprintf(mx, sizeof(mx), "%zu", max_bytes);
    const char *argv[] = {"read-file", remote, mx, NULL};
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (!o)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /* Per stream: stderr needs room for the reason too. */
    sbx_exec_opts_set_output_limit(o, max_bytes < STDERR_KEEP ? STDERR_KEEP : max_bytes + 1);
    struct errbuf eb = {.len = 0};
    sbx_exec_result *res = NULL;
    rc = run_builtin(sb, o, argv, "reading", remote, &eb, &res, err);
    sbx_exec_opts_free(o);
    if (rc < 0)
        return rc;
    size_t n = 0;
    const char *out = sbx_exec_result_stdout(res, &n);
    if (n > max_bytes) {
        sbx_exec_result_free(res);
        return sbx__set_error(err, SBX_EPROTO, "reading '%s': the box sent more than %zu bytes",
                              remote, max_bytes);
    }
    char *d = malloc(n + 1);
    if (!d) {
        sbx_exec_result_free(res);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    if (n)
        memcpy(d, out, n);
    d[n] = 0;
    sbx_exec_result_free(res);
    *data_out = d;
    *len_out = n;
    return SBX_OK;
}

/* --- async forms ----------------------------------------------------------- */

/*
 * A transfer is a blocking exec plus a libarchive thread, so its async form
 * runs the blocking call on a thread of its own (not the context's pool,
 * which a long transfer would hold) and completes the future from there.
 */
struct tjob {
    bool up;
    sbx_sandbox *sb;
    char *local, *remote;
    unsigned flags;
    sbx_future *f;
};

static void *tjob_main(void *arg)
{
    struct tjob *j = arg;
    sbx_error *e = NULL;
    int rc = j->up ? sbx_sandbox_upload_dir(j->sb, j->local, j->remote, j->flags, &e)
                   : sbx_sandbox_download_dir(j->sb, j->remote, j->local, j->flags, &e);
    sbx__future_complete(j->f, rc, e, NULL);
    sbx_future_free(j->f);
    sbx__sandbox_release(j->sb);
    free(j->local);
    free(j->remote);
    free(j);
    return NULL;
}

static int dir_async(sbx_sandbox *sb, bool up, const char *local, const char *remote,
                     unsigned flags, sbx_future **out, sbx_error **err)
{
    if (!sb || !local || !remote || !out)
        return sbx__set_error(err, SBX_EINVAL, "%s_dir_async: a sandbox, both directories and "
                                               "out are needed", up ? "upload" : "download");
    struct tjob *j = calloc(1, sizeof(*j));
    if (!j || !(j->local = strdup(local)) || !(j->remote = strdup(remote)) ||
        !(j->f = sbx__future_new(sbx_sandbox_provider(sb)->ctx, SBX_VALUE_NONE))) {
        if (j) {
            free(j->local);
            free(j->remote);
        }
        free(j);
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    }
    j->up = up;
    j->sb = sb;
    j->flags = flags;
    sbx__future_ref(j->f); /* the thread's; the caller's is *out */
    sbx__sandbox_hold(sb);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, tjob_main, j) != 0) {
        pthread_attr_destroy(&attr);
        sbx__sandbox_release(sb);
        sbx_future_free(j->f);
        sbx_future_free(j->f);
        free(j->local);
        free(j->remote);
        free(j);
        return sbx__set_error(err, SBX_ENOMEM, "cannot start a transfer thread");
    }
    pthread_attr_destroy(&attr);
    *out = j->f;
    return SBX_OK;
}

int sbx_sandbox_upload_dir_async(sbx_sandbox *sb, const char *local_dir, const char *remote_dir,
                                 unsigned flags, sbx_future **out, sbx_error **err)
{
    return dir_async(sb, true, local_dir, remote_dir, flags, out, err);
}

int sbx_sandbox_download_dir_async(sbx_sandbox *sb, const char *remote_dir,
                                   const char *local_dir, unsigned flags, sbx_future **out,
                                   sbx_error **err)
{
    return dir_async(sb, false, local_dir, remote_dir, flags, out, err);
}
