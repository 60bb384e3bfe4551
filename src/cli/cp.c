/*
 * sbx cp: files and directories into and out of a recorded box.
 *
 * Files go through the provider's upload/download. A directory streams as
 * a tar through the box's sbx-agent (sbx_sandbox_upload_dir/download_dir,
 * docs/transfer.md), which needs no shell or tar in the box. For a provider
 * without the agent it falls back to one tar archive: made here with
 * libarchive (modes kept) and unpacked in the box with its `tar -xpf`, or
 * made in the box with `tar -cf` and unpacked here with libarchive,
 * refusing entries that would land outside the destination; that path
 * needs `sh`, `mktemp` and `tar` in the box.
 */
#include "cli/cli.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>

struct box_conn {
    sbx_provider *p;
    sbx_sandbox *sb;
    bool archive;  /* -a: keep the archive's numeric owners on download */
    sbx_buf stale; /* box temps of dead sbx processes, found by box_temp: removed at the end */
};

/* "ID:PATH" with an ID free of '/': a box side. Fills id (malloc'd) and path. */
static bool is_box_side(const char *arg, char **id, const char **path)
{
    const char *colon = strchr(arg, ':');
    if (!colon || colon == arg || memchr(arg, '/', (size_t)(colon - arg)))
        return false;
    *id = strndup(arg, (size_t)(colon - arg));
    *path = colon + 1;
    return *id != NULL;
}

static char *strip_slashes(const char *s)
{
    char *c = strdup(s);
    size_t n = c ? strlen(c) : 0;
    while (n > 1 && c[n - 1] == '/')
        c[--n] = 0;
    return c;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Runs a shell command in the box; returns its result (or NULL after printing the error). */
static sbx_exec_result *box_sh(struct box_conn *c, const char *command)
{
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_future *f = NULL;
    sbx_exec_result *r = NULL;
    sbx_error *e = NULL;
    int rc = o ? sbx_sandbox_exec_async(c->sb, command, o, &f, &e) : SBX_ENOMEM;
    sbx_exec_opts_free(o);
    if (rc == SBX_OK) {
        rc = cli_wait(f, &e);
        if (rc == SBX_OK)
            rc = sbx_future_take_exec_result(f, &r, &e);
        sbx_future_free(f);
    }
    if (rc < 0) {
        cli_sbx_error(e, "exec");
        return NULL;
    }
    return r;
}

/* A failed helper command in the box: print what it said. */
static int box_failed(const char *what, sbx_exec_result *r)
{
    size_t len = 0;
    const char *err = sbx_exec_result_stderr(r, &len);
    while (len && (err[len - 1] == '\n' || err[len - 1] == ' '))
        len--;
    cli_error("%s failed in the box (exit %d): %.*s", what, sbx_exec_result_return_code(r),
              (int)len, err ? err : "");
    sbx_exec_result_free(r);
    return CLI_EXIT_FAIL;
}

static int transfer(struct box_conn *c, bool up, const char *from, const char *to)
{
    sbx_future *f = NULL;
    sbx_error *e = NULL;
    int rc = up ? sbx_sandbox_upload_async(c->sb, from, to, &f, &e)
                : sbx_sandbox_download_async(c->sb, from, to, &f, &e);
    if (rc == SBX_OK) {
        rc = cli_wait(f, &e);
        sbx_future_free(f);
    }
    if (rc < 0) {
        /* A missing file, or a destination refused (a link another user could aim): exit 1. */
        rc = rc == SBX_ENOENT || rc == SBX_EPERM ? CLI_EXIT_FAIL : CLI_EXIT_SBX;
        cli_sbx_error(e, up ? "upload" : "download");
        return rc;
    }
    return CLI_EXIT_OK;
}

/*
 * Temporaries carry the pid of the sbx that made them ("sbx-cp-<pid>-XXXXXX"
 * here, "sbx-cp.<pid>.XXXXXX" in the box): a `kill -9` leaves them behind,
 * and the next `sbx cp` removes those whose process is gone.
 */
static bool pid_gone(long pid)
{
    return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* The pid in NAME when it is PREFIX<pid>SEP + 6 characters (a mkstemp name), else -1. */
static long temp_owner(const char *name, const char *prefix, char sep)
{
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0)
        return -1;
    char *end = NULL;
    errno = 0;
    long pid = strtol(name + n, &end, 10);
    if (errno || end == name + n || *end != sep || strlen(end + 1) != 6)
        return -1;
    return pid;
}

static const char *tmp_dir(void)
{
    const char *dir = getenv("TMPDIR");
    return dir && *dir ? dir : "/tmp";
}

/* Removes this user's local cp temporaries left by dead sbx processes. */
static void sweep_local_temps(void)
{
    DIR *d = opendir(tmp_dir());
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        /*
         * "sbx-cp-<pid>-XXXXXX", or the download's own temp next to it,
         * ".sbx-cp-<pid>-XXXXXX.sbx-<pid>-XXXXXX", when the kill came mid-transfer.
         */
        const char *name = de->d_name;
        const char *inner = name[0] == '.' ? strstr(name + 1, ".sbx-") : NULL;
        _cleanup_free_ char *outer = inner ? strndup(name + 1, (size_t)(inner - name - 1)) : NULL;
        long pid = temp_owner(outer ? outer : name, "sbx-cp-", '-');
        struct stat st;
        if (pid < 0 || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) || st.st_uid != getuid() ||
            !pid_gone(pid))
            continue;
        /* cp's tar streams (`-`) stage the tree in a directory of that name. */
        if (S_ISDIR(st.st_mode)) {
            sbx__rm_rf_at(dirfd(d), de->d_name);
            continue;
        }
        unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
}

/* A private local temp file (an fd and its path). */
static int local_temp(char **path)
{
    char *p = sbx__printf("%s/sbx-cp-%ld-XXXXXX", tmp_dir(), (long)getpid());
    if (!p)
        return -1;
    int fd = mkostemp(p, O_CLOEXEC);
    if (fd < 0) {
        free(p);
        return -1;
    }
    *path = p;
    return fd;
}

/*
 * Writes the contents of directory `src` into a tar at fd (paths "./..."),
 * with an entry "." for src itself when `with_root` (the box's tar -x then
 * gives DST src's mode; a tar for the user's stdout has none: their tar
 * would give their working directory the temp directory's mode).
 */
static int tar_dir(const char *src, int fd, bool with_root)
{
    struct archive *disk = archive_read_disk_new();
    struct archive *w = archive_write_new();
    struct archive_entry *entry = archive_entry_new();
    int rc = -1;
    if (!disk || !w || !entry)
        goto out;
    archive_read_disk_set_standard_lookup(disk);
    archive_read_disk_set_symlink_physical(disk);
    archive_write_set_format_pax_restricted(w);
    if (archive_write_open_fd(w, fd) != ARCHIVE_OK || archive_read_disk_open(disk, src) != ARCHIVE_OK)
        goto fail;
    size_t src_len = strlen(src);
    for (;;) {
        archive_entry_clear(entry);
        int r = archive_read_next_header2(disk, entry);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
            goto fail;
        archive_read_disk_descend(disk);
        /* Names relative to src, so the box extracts them under DST. */
        const char *name = archive_entry_pathname(entry);
        const char *rel = strlen(name) >= src_len ? name + src_len : "";
        while (*rel == '/')
            rel++;
        if (!*rel && !with_root)
            continue;
        _cleanup_free_ char *renamed = sbx__printf("./%s", rel);
        if (!renamed)
            goto out;
        archive_entry_set_pathname(entry, *rel ? renamed : ".");
        if (archive_write_header(w, entry) != ARCHIVE_OK)
            goto fail_w;
        if (archive_entry_filetype(entry) == AE_IFREG && archive_entry_size(entry) > 0) {
            char buf[65536];
            la_ssize_t n;
            while ((n = archive_read_data(disk, buf, sizeof(buf))) > 0)
                if (archive_write_data(w, buf, (size_t)n) < 0)
                    goto fail_w;
            if (n < 0)
                goto fail;
        }
    }
    if (archive_write_close(w) != ARCHIVE_OK)
        goto fail_w;
    rc = 0;
    goto out;
fail:
    cli_error("archiving %s: %s", src, archive_error_string(disk));
    goto out;
fail_w:
    cli_error("archiving %s: %s", src, archive_error_string(w));
out:
    archive_entry_free(entry);
    archive_read_free(disk);
    archive_write_free(w);
    return rc;
}

/* "DST/name" for an archive member (NULL for one that would leave DST). */
static char *member_path(const char *dst, const char *name)
{
    if (!name || name[0] == '/')
        return NULL;
    while (name[0] == '.' && name[1] == '/')
        name += 2;
    if (!*name || !strcmp(name, "."))
        return strdup(dst);
    return sbx__printf("%s/%s", dst, name);
}

/*
 * Unpacks the tar read from `archive_fd` into the existing directory `dst`
 * (".": the working directory, the destination walked once). The archive is the box's: every byte of it is hostile.
 * - Nothing lands outside dst: absolute names are refused here (member_path),
 *   ".." by SECURE_NODOTDOT, a path through a symlink the archive planted by
 *   SECURE_SYMLINKS (for hard link targets too). NOABSOLUTEPATHS cannot be
 *   used because the names are rewritten to dst + name, which is absolute.
 * - Only regular files, directories and symlinks are made: a device node
 *   (a `c 1,1` /dev/mem), a FIFO or a socket from the box is skipped with a
 *   warning, so no box can hand the host a device.
 * - setuid and setgid bits are dropped (and the sticky bit on files): as
 *   root, libarchive would otherwise recreate a box's setuid-root binary on
 *   the host. Owners are kept only with -a (numeric ids, never looked up by
 *   name in the host's passwd); by default the caller owns what it copied.
 */
static int untar_into(int archive_fd, const char *dst, bool keep_owners, const char *from)
{
    struct archive *a = archive_read_new();
    struct archive *w = archive_write_disk_new();
    int rc = -1;
    if (!a || !w)
        goto out;
    archive_read_support_format_tar(a);
    archive_write_disk_set_options(
        w, ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
               ARCHIVE_EXTRACT_SECURE_SYMLINKS | (keep_owners ? ARCHIVE_EXTRACT_OWNER : 0));
    if (archive_read_open_fd(a, archive_fd, 65536) != ARCHIVE_OK) {
        cli_error("reading the archive from %s: %s", from, archive_error_string(a));
        goto out;
    }
    struct archive_entry *entry;
    int r;
    while ((r = archive_read_next_header(a, &entry)) == ARCHIVE_OK) {
        mode_t type = archive_entry_filetype(entry);
        /* A hard link's target is an earlier member (checked below), made only if allowed. */
        if (!archive_entry_hardlink(entry) && type != AE_IFREG && type != AE_IFDIR &&
            type != AE_IFLNK) {
            cli_error("warning: skipping '%s' from %s: only regular files, directories "
                      "and symlinks are copied (not device nodes, FIFOs or sockets)",
                      archive_entry_pathname(entry), from);
            continue;
        }
        archive_entry_set_perm(entry,
                               archive_entry_perm(entry) & (type == AE_IFDIR ? 01777 : 0777));
        _cleanup_free_ char *path = member_path(dst, archive_entry_pathname(entry));
        if (!path) {
            cli_error("refusing archive member '%s': absolute path", archive_entry_pathname(entry));
            goto out;
        }
        archive_entry_set_pathname(entry, path);
        const char *link = archive_entry_hardlink(entry);
        if (link) {
            _cleanup_free_ char *lp = member_path(dst, link);
            if (!lp) {
                cli_error("refusing archive member '%s': absolute hard link", link);
                goto out;
            }
            archive_entry_set_hardlink(entry, lp);
        }
        if (archive_write_header(w, entry) != ARCHIVE_OK) {
            cli_error("extracting %s: %s", path, archive_error_string(w));
            goto out;
        }
        const void *buf;
        size_t size;
        la_int64_t off;
        while ((r = archive_read_data_block(a, &buf, &size, &off)) == ARCHIVE_OK)
            if (archive_write_data_block(w, buf, size, off) != ARCHIVE_OK) {
                cli_error("extracting %s: %s", path, archive_error_string(w));
                goto out;
            }
        if (r != ARCHIVE_EOF) {
            cli_error("reading the archive from %s: %s", from, archive_error_string(a));
            goto out;
        }
        if (archive_write_finish_entry(w) != ARCHIVE_OK) {
            cli_error("extracting %s: %s", path, archive_error_string(w));
            goto out;
        }
    }
    if (r != ARCHIVE_EOF) {
        cli_error("reading the archive from %s: %s", from, archive_error_string(a));
        goto out;
    }
    rc = archive_write_close(w) == ARCHIVE_OK ? 0 : -1;
    if (rc < 0)
        cli_error("extracting into %s: %s", dst, archive_error_string(w));
out:
    archive_read_free(a);
    archive_write_free(w);
    return rc;
}

/*
 * A temp path in the box, from its mktemp. The same command lists the
 * temporaries earlier runs left there; those of sbx processes that are gone
 * (host pids: only this host makes them) go into c->stale, removed with ours.
 */
static char *box_temp(struct box_conn *c)
{
    _cleanup_free_ char *cmd =
        sbx__printf("d=\"${TMPDIR:-/tmp}\"; for f in \"$d\"/sbx-cp.*.*; do [ -f \"$f\" ] && "
                    "printf 'stale %%s\\n' \"$f\"; done; mktemp \"$d/sbx-cp.%ld.XXXXXX\"",
                    (long)getpid());
    sbx_exec_result *r = cmd ? box_sh(c, cmd) : NULL;
    if (!r)
        return NULL;
    size_t len = 0;
    const char *out = sbx_exec_result_stdout(r, &len);
    while (len && (out[len - 1] == '\n' || out[len - 1] == '\r'))
        len--;
    /* "stale PATH" lines, then mktemp's path on the last line. */
    const char *nl;
    while (out && len && (nl = memchr(out, '\n', len)) && !strncmp(out, "stale /", 7)) {
        _cleanup_free_ char *path = strndup(out + 6, (size_t)(nl - out - 6));
        const char *base = path ? strrchr(path, '/') + 1 : NULL;
        if (base && pid_gone(temp_owner(base, "sbx-cp.", '.'))) {
            _cleanup_free_ char *q = sbx_shell_quote(path);
            if (q)
                sbx__buf_printf(&c->stale, " %s", q);
        }
        len -= (size_t)(nl + 1 - out);
        out = nl + 1;
    }
    if (sbx_exec_result_return_code(r) != 0 || !out || !len || out[0] != '/' ||
        memchr(out, '\n', len)) {
        box_failed("mktemp", r);
        return NULL;
    }
    char *path = strndup(out, len);
    sbx_exec_result_free(r);
    return path;
}

/*
 * A directory through the agent's tar built-ins (no shell or tar in the
 * box; docs/transfer.md). SBX_ENOTSUP (a provider without sbx-agent, an
 * older agent) falls back to the box's own sh and tar below.
 */
static int agent_dir(struct box_conn *c, bool up, const char *src, const char *dst, bool *done)
{
    /*
     * SBX_CP_BOX_TAR=1 takes the fallback on purpose: tests/acceptance/
     * test_sec_client.sh feeds it hostile archives from a box's own tar,
     * the path providers without the agent's built-ins still use.
     */
    const char *force = getenv("SBX_CP_BOX_TAR");
    if (force && !strcmp(force, "1")) {
        *done = false;
        return CLI_EXIT_OK;
    }
    sbx_error *e = NULL;
    unsigned flags = c->archive ? SBX_TRANSFER_PRESERVE_OWNER : 0;
    int rc = up ? sbx_sandbox_upload_dir(c->sb, src, dst, flags, &e)
                : sbx_sandbox_download_dir(c->sb, src, dst, flags, &e);
    *done = rc != SBX_ENOTSUP;
    if (rc == SBX_ENOTSUP) {
        sbx_error_free(e);
        return CLI_EXIT_OK;
    }
    if (rc < 0) {
        int code = rc == SBX_ETRANSFER || rc == SBX_ENOENT || rc == SBX_EINVAL ||
                           rc == SBX_EPERM
                       ? CLI_EXIT_FAIL
                       : CLI_EXIT_SBX;
        cli_sbx_error(e, up ? "upload" : "download");
        return code;
    }
    return CLI_EXIT_OK;
}

static int upload_dir(struct box_conn *c, const char *src, const char *dst)
{
    bool done = false;
    int arc = agent_dir(c, true, src, dst, &done);
    if (done)
        return arc;
    _cleanup_free_ char *local = NULL;
    _cleanup_close_ int fd = local_temp(&local);
    if (fd < 0) {
        cli_error("cannot make a temp file: %s", strerror(errno));
        return CLI_EXIT_FAIL;
    }
    int rc = CLI_EXIT_FAIL;
    _cleanup_free_ char *remote = NULL;
    if (tar_dir(src, fd, true) == 0 && (remote = box_temp(c)))
        rc = transfer(c, true, local, remote);
    unlink(local);
    if (!remote)
        return rc;
    _cleanup_free_ char *qd = sbx_shell_quote(dst);
    _cleanup_free_ char *qt = sbx_shell_quote(remote);
    _cleanup_free_ char *cmd =
        rc == CLI_EXIT_OK
            ? sbx__printf("mkdir -p -- %s && tar -xpf %s -C %s; rc=$?; rm -f -- %s%s; exit $rc", qd,
                          qt, qd, qt, c->stale.data ? c->stale.data : "")
            : sbx__printf("rm -f -- %s%s", qt, c->stale.data ? c->stale.data : "");
    sbx_exec_result *r = cmd ? box_sh(c, cmd) : NULL;
    if (!r)
        return CLI_EXIT_SBX;
    if (rc == CLI_EXIT_OK && sbx_exec_result_return_code(r) != 0)
        return box_failed("unpacking the directory", r);
    sbx_exec_result_free(r);
    return rc;
}

/*
 * The destination directory, made when missing, walked once from "/" with
 * sbx__mkdir_trusted (a link on the way followed only when nobody but root
 * and the caller could have put it there). An O_PATH descriptor, or -1
 * after saying why.
 */
static int open_dst(const char *dst)
{
    sbx_error *e = NULL;
    _cleanup_free_ char *what = sbx__printf("downloading to '%s'", dst);
    int fd = what ? sbx__mkdir_trusted(dst, 0755, what, &e) : -1;
    if (fd < 0) {
        if (e)
            cli_error("%s", sbx_error_message(e));
        else
            cli_error("out of memory");
        sbx_error_free(e);
        return -1;
    }
    return fd;
}

static int download_dir(struct box_conn *c, const char *src, const char *dst)
{
    bool done = false;
    _cleanup_close_ int dfd = open_dst(dst);
    if (dfd < 0)
        return CLI_EXIT_FAIL;
    int arc = agent_dir(c, false, src, dst, &done);
    if (done)
        return arc;
    _cleanup_free_ char *remote = box_temp(c);
    if (!remote)
        return CLI_EXIT_SBX;
    _cleanup_free_ char *qs = sbx_shell_quote(src);
    _cleanup_free_ char *qt = sbx_shell_quote(remote);
    _cleanup_free_ char *cmd = sbx__printf("tar -cf %s -C %s .", qt, qs);
    sbx_exec_result *r = cmd ? box_sh(c, cmd) : NULL;
    int rc = CLI_EXIT_SBX;
    if (r && sbx_exec_result_return_code(r) != 0) {
        rc = box_failed("archiving the directory", r);
        r = NULL;
    } else if (r) {
        sbx_exec_result_free(r);
        _cleanup_free_ char *local = NULL;
        int fd = local_temp(&local);
        if (fd < 0) {
            cli_error("cannot make a temp file: %s", strerror(errno));
            rc = CLI_EXIT_FAIL;
        } else {
            close(fd);
            rc = transfer(c, false, remote, local);
            /*
             * Unpacked beneath the descriptor walked above, as the working
             * directory (the transfer is over: nothing else runs): names are
             * relative to it, so no component above it is looked up again.
             */
            _cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
            _cleanup_close_ int afd = rc == CLI_EXIT_OK ? open(local, O_RDONLY | O_CLOEXEC) : -1;
            if (rc == CLI_EXIT_OK) {
                if (cwd < 0 || afd < 0 || fchdir(dfd) < 0) {
                    cli_error("cannot enter %s: %s", dst, strerror(errno));
                    rc = CLI_EXIT_FAIL;
                } else {
                    if (untar_into(afd, ".", c->archive, "the box") < 0)
                        rc = CLI_EXIT_FAIL;
                    if (fchdir(cwd) < 0) {
                        cli_error("cannot return to the working directory: %s", strerror(errno));
                        rc = CLI_EXIT_FAIL;
                    }
                }
            }
            unlink(local);
        }
    }
    _cleanup_free_ char *rm = sbx__printf("rm -f -- %s%s", qt, c->stale.data ? c->stale.data : "");
    sbx_exec_result_free(rm ? box_sh(c, rm) : NULL);
    return rc;
}

/* "dir", "file", "missing", or NULL when the box cannot say (then: try as a file). */
static const char *box_kind(struct box_conn *c, const char *path, int *fail)
{
    const char *k = NULL;
    sbx_error *e = NULL;
    int krc = sbx_sandbox_remote_kind(c->sb, path, &k, &e);
    if (krc == SBX_OK) {
        *fail = 0;
        return !k ? "missing" : !strcmp(k, "dir") ? "dir" : "file";
    }
    if (krc != SBX_ENOTSUP) {
        *fail = 1;
        cli_sbx_error(e, "looking at the box path");
        return NULL;
    }
    sbx_error_free(e);
    _cleanup_free_ char *q = sbx_shell_quote(path);
    _cleanup_free_ char *cmd = sbx__printf(
        "if [ -d %s ]; then echo dir; elif [ -e %s ]; then echo file; else echo missing; fi", q, q);
    sbx_exec_result *r = cmd ? box_sh(c, cmd) : NULL;
    *fail = !r;
    if (!r)
        return NULL;
    const char *out = sbx_exec_result_stdout(r, NULL);
    const char *kind = NULL;
    if (out && !strcmp(out, "dir\n"))
        kind = "dir";
    else if (out && !strcmp(out, "file\n"))
        kind = "file";
    else if (out && !strcmp(out, "missing\n"))
        kind = "missing";
    sbx_exec_result_free(r);
    return kind;
}

static int copy_in(struct box_conn *c, const char *src_arg, const char *dst_arg)
{
    _cleanup_free_ char *src = strip_slashes(src_arg);
    struct stat st;
    if (!src || stat(src, &st) < 0) {
        cli_error("cannot copy %s: %s", src_arg, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    if (S_ISDIR(st.st_mode)) {
        _cleanup_free_ char *dst = strip_slashes(dst_arg);
        return dst ? upload_dir(c, src, dst) : CLI_EXIT_SBX;
    }
    size_t n = strlen(dst_arg);
    _cleanup_free_ char *dst = n && dst_arg[n - 1] == '/'
                                   ? sbx__printf("%s%s", dst_arg, base_name(src))
                                   : strdup(dst_arg);
    return dst ? transfer(c, true, src, dst) : CLI_EXIT_SBX;
}

static int copy_out(struct box_conn *c, const char *src_arg, const char *dst_arg)
{
    _cleanup_free_ char *src = strip_slashes(src_arg);
    int fail = 0;
    const char *kind = src ? box_kind(c, src, &fail) : NULL;
    if (fail)
        return CLI_EXIT_SBX;
    if (kind && !strcmp(kind, "missing")) {
        cli_error("cannot copy %s: no such file or directory in the box", src_arg);
        return CLI_EXIT_FAIL;
    }
    if (kind && !strcmp(kind, "dir")) {
        _cleanup_free_ char *dst = strip_slashes(dst_arg);
        return dst ? download_dir(c, src, dst) : CLI_EXIT_SBX;
    }
    struct stat st;
    size_t n = strlen(dst_arg);
    bool into = (n && dst_arg[n - 1] == '/') || (stat(dst_arg, &st) == 0 && S_ISDIR(st.st_mode));
    _cleanup_free_ char *dst = into ? sbx__printf("%s%s%s", dst_arg,
                                                  dst_arg[n - 1] == '/' ? "" : "/", base_name(src))
                                    : strdup(dst_arg);
    return dst ? transfer(c, false, src, dst) : CLI_EXIT_SBX;
}

/* A private local temp directory, "sbx-cp-<pid>-XXXXXX" (the sweeper's name). */
static char *local_temp_dir(void)
{
    char *p = sbx__printf("%s/sbx-cp-%ld-XXXXXX", tmp_dir(), (long)getpid());
    if (p && !mkdtemp(p)) {
        cli_error("cannot make a temp directory in %s: %s", tmp_dir(), strerror(errno));
        free(p);
        return NULL;
    }
    return p;
}

/*
 * `sbx cp ID:PATH -` (as docker cp): a tar of PATH, named by its last
 * component, on stdout. The tree is copied out as `cp ID:PATH DIR` copies
 * it (no device nodes, setuid bits dropped), into a private temp directory,
 * then archived from there: the box's own bytes never reach the stream
 * unchecked.
 */
static int copy_out_tar(struct box_conn *c, const char *src_arg)
{
    if (isatty(STDOUT_FILENO)) {
        cli_error("refusing to write a tar archive to a terminal: redirect it "
                  "(sbx cp ID:PATH - > x.tar) or pipe it (| tar -x)");
        return CLI_EXIT_USAGE;
    }
    _cleanup_free_ char *src = strip_slashes(src_arg);
    int fail = 0;
    const char *kind = src ? box_kind(c, src, &fail) : NULL;
    if (fail || !src)
        return CLI_EXIT_SBX;
    if (kind && !strcmp(kind, "missing")) {
        cli_error("cannot copy %s: no such file or directory in the box", src_arg);
        return CLI_EXIT_FAIL;
    }
    _cleanup_free_ char *tmp = local_temp_dir();
    if (!tmp)
        return CLI_EXIT_FAIL;
    const char *base = base_name(src);
    _cleanup_free_ char *dst = *base ? sbx__printf("%s/%s", tmp, base) : strdup(tmp);
    int rc = !dst                              ? CLI_EXIT_SBX
             : kind && !strcmp(kind, "dir") ? download_dir(c, src, dst)
                                              : transfer(c, false, src, dst);
    if (rc == CLI_EXIT_OK && tar_dir(tmp, STDOUT_FILENO, false) < 0)
        rc = CLI_EXIT_FAIL;
    sbx__rm_rf(tmp);
    return rc;
}

/*
 * `sbx cp - ID:DIR` (as docker cp): the tar on stdin unpacked into DIR in
 * the box. It is unpacked here first, as a tar from a box is (nothing
 * outside the temp directory, no device nodes, setuid bits dropped, owners
 * kept), then sent as a directory.
 */
static int copy_in_tar(struct box_conn *c, const char *dst_arg)
{
    if (isatty(STDIN_FILENO)) {
        cli_error("refusing to read a tar archive from a terminal: redirect it "
                  "(sbx cp - ID:DIR < x.tar) or pipe it (tar -c . | sbx cp - ID:DIR)");
        return CLI_EXIT_USAGE;
    }
    _cleanup_free_ char *dst = strip_slashes(dst_arg);
    _cleanup_free_ char *tmp = dst ? local_temp_dir() : NULL;
    if (!tmp)
        return CLI_EXIT_FAIL;
    int rc = CLI_EXIT_FAIL;
    /* Unpacked beneath the fresh directory as the working directory (see download_dir). */
    _cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int tfd = open(tmp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cwd < 0 || tfd < 0 || fchdir(tfd) < 0) {
        cli_error("cannot enter %s: %s", tmp, strerror(errno));
    } else {
        int u = untar_into(STDIN_FILENO, ".", true, "stdin");
        if (fchdir(cwd) < 0)
            cli_error("cannot return to the working directory: %s", strerror(errno));
        else if (u == 0)
            rc = upload_dir(c, tmp, dst);
    }
    sbx__rm_rf(tmp);
    return rc;
}

int cli_cmd_cp(int argc, char **argv)
{
    _cleanup_cli_opts_ struct cli_opts o = { 0 };
    int rc;
    if (!cli_parse_opts("cp", argc, argv, CLI_TAKES_ARCHIVE, &o, &rc))
        return rc;
    if (argc - optind != 2)
        return cli_usage_error("cp", "expected SRC and DST, got %d argument%s", argc - optind,
                               argc - optind == 1 ? "" : "s");
    const char *src = argv[optind], *dst = argv[optind + 1];
    _cleanup_free_ char *src_id = NULL, *dst_id = NULL;
    const char *src_path = NULL, *dst_path = NULL;
    bool src_box = is_box_side(src, &src_id, &src_path);
    bool dst_box = is_box_side(dst, &dst_id, &dst_path);
    if (src_box == dst_box)
        return cli_usage_error("cp", "exactly one of SRC and DST must be ID:PATH");
    if (!*(src_box ? src_path : dst_path))
        return cli_usage_error("cp", "the box path after 'ID:' is empty");
    _cleanup_json_ json_t *rec = NULL;
    if ((rc = cli_box_find(src_box ? src_id : dst_id, &rec)) != CLI_EXIT_OK)
        return rc;
    cli_signals_install();
    sweep_local_temps();
    sbx_error *e = NULL;
    struct box_conn conn = { .archive = o.archive };
    if (cli_box_connect(rec, &conn.p, &conn.sb, &e) < 0) {
        int code = sbx_error_code(e) == SBX_ENOENT ? CLI_EXIT_NOBOX : CLI_EXIT_SBX;
        cli_sbx_error(e, "connecting to the box");
        return cli_signal_received() ? 128 + cli_signal_received() : code;
    }
    /*
     * A relative box path is under the box's workdir, whatever the provider
     * does with relative transfer paths (the linux agent takes them from /).
     */
    const char *wd = sbx_sandbox_workdir(conn.sb);
    const char *bp = src_box ? src_path : dst_path;
    _cleanup_free_ char *joined = NULL;
    if (bp[0] != '/' && wd && wd[0] == '/') {
        if (!(joined = sbx__printf("%s/%s", wd, bp))) {
            sbx_sandbox_free(conn.sb);
            sbx_provider_free(conn.p);
            return CLI_EXIT_SBX;
        }
        bp = joined;
    }
    rc = src_box && !strcmp(dst, "-")   ? copy_out_tar(&conn, bp)
         : !src_box && !strcmp(src, "-") ? copy_in_tar(&conn, bp)
         : src_box                       ? copy_out(&conn, bp, dst)
                                         : copy_in(&conn, src, bp);
    sbx__buf_free(&conn.stale);
    sbx_sandbox_free(conn.sb);
    sbx_provider_free(conn.p);
    return cli_signal_received() ? cli_interrupted(NULL) : rc;
}
