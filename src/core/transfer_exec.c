/*
 * Transfers for boxes without sbx-agent (remote API providers: restbox,
 * opensandbox, ...): the archive or file moves through the provider's own
 * upload_file/download_file, and the box's shell does the rest with the
 * POSIX tools every image has (tar, test, chmod, rm). The host side is the
 * same as the agent path's: transfer.c packs and unpacks the tar stream with
 * libarchive, and these functions stand where the agent's tar-extract,
 * tar-create, kind, write-file and read-file built-ins stand
 * (docs/transfer.md, "Boxes without sbx-agent").
 *
 * Each stages bytes in a private host directory and a box file named
 * /tmp/.sbx-transfer-<random>, removed by the same shell command that used
 * it (or by a last exec when the download failed).
 */
#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "core/transfer_exec.h"

#define KEEP_STDERR 4096
/* tar's own headers and padding over the files' bytes: a generous bound. */
#define ARCHIVE_SLACK(bytes) ((bytes) / 8 + (64ull << 20))

/* A private host directory for one transfer's staged file. */
struct stage {
    char *dir;
    char *file;
};

static int stage_open(struct stage *st, const char *what, const char *path, sbx_error **err)
{
    const char *base = getenv("TMPDIR");
    st->dir = sbx__printf("%s/sbx-transfer-XXXXXX", base && *base ? base : "/tmp");
    if (!st->dir || !mkdtemp(st->dir)) {
        int e = st->dir ? errno : ENOMEM;
        free(st->dir);
        st->dir = NULL;
        return sbx__set_errno(err, SBX_EIO, e, "%s '%s': cannot make a staging directory: %s",
                              what, path, strerror(e));
    }
    if (!(st->file = sbx__printf("%s/archive", st->dir)))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}

static void stage_close(struct stage *st)
{
    if (st->file)
        unlink(st->file);
    if (st->dir)
        rmdir(st->dir);
    free(st->file);
    free(st->dir);
    st->file = st->dir = NULL;
}

static int run_script(sbx_sandbox *sb, const char *script, size_t out_limit, const char *what,
                      const char *path, sbx_exec_result **res_out, sbx_error **err);

/*
 * A box path for a staged file: in the box's own temporary directory (its
 * TMPDIR, else /tmp; asked once per sandbox), under an unguessable name so
 * no box process can plant one first.
 */
static int box_stage_path(sbx_sandbox *sb, const char *what, const char *path, char **out,
                          sbx_error **err)
{
    *out = NULL;
    char *tmp = sbx__sandbox_box_tmpdir(sb);
    if (!tmp) {
        sbx_exec_result *res = NULL;
        int rc = run_script(sb, "printf '%s' \"${TMPDIR:-/tmp}\"", 4096, what, path, &res, err);
        if (rc < 0)
            return rc;
        size_t n = 0;
        const char *said = sbx_exec_result_stdout(res, &n);
        /* The box's word: an absolute path of printable bytes, else /tmp. */
        bool ok = said && n > 1 && n < 1024 && said[0] == '/' && strlen(said) == n;
        for (size_t i = 0; ok && i < n; i++)
            ok = (unsigned char)said[i] >= 0x20 && said[i] != 0x7f;
        while (ok && n > 1 && said[n - 1] == '/')
            n--;
        tmp = ok ? strndup(said, n) : strdup("/tmp");
        sbx_exec_result_free(res);
        if (tmp)
            sbx__sandbox_set_box_tmpdir(sb, tmp);
    }
    unsigned char r[12];
    char hex[sizeof(r) * 2 + 1];
    char *p = NULL;
    if (tmp && getrandom(r, sizeof(r), 0) == (ssize_t)sizeof(r)) {
        for (size_t i = 0; i < sizeof(r); i++)
            snprintf(hex + 2 * i, 3, "%02x", r[i]);
        p = sbx__printf("%s/.sbx-transfer-%s", tmp, hex);
    }
    free(tmp);
    if (!p)
        return sbx__set_error(err, SBX_ENOMEM, "%s '%s': cannot name a staging file", what, path);
    *out = p;
    return SBX_OK;
}

/* Copies fd `in` to fd `out` until EOF; at most `max` bytes (0: no bound). */
static int copy_fd(int in, int out, unsigned long long max, const char *what, const char *path,
                   sbx_error **err)
{
    char buf[64 << 10];
    unsigned long long total = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "%s '%s': %s", what, path, strerror(errno));
        if (n == 0)
            return SBX_OK;
        if (max && (total += (size_t)n) > max)
            return sbx__set_error(err, SBX_EPROTO, "%s '%s': the box sent more than %llu bytes",
                                  what, path, max);
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return sbx__set_errno(err, SBX_EIO, errno, "%s '%s': %s", what, path,
                                      strerror(errno));
            off += w;
        }
    }
}

/*
 * Runs `script` through the box's shell and maps its outcome onto the
 * transfer taxonomy, as transfer.c's run_builtin does for the agent's
 * built-ins: its stderr is the reason. *res_out, when asked, has stdout.
 */
static int run_script(sbx_sandbox *sb, const char *script, size_t out_limit, const char *what,
                      const char *path, sbx_exec_result **res_out, sbx_error **err)
{
    sbx_exec_opts *o = sbx_exec_opts_new();
    if (!o)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    sbx_exec_opts_set_timeout(o, -1);
    sbx_exec_opts_set_output_limit(o, out_limit > KEEP_STDERR ? out_limit : KEEP_STDERR);
    sbx_exec_result *res = NULL;
    sbx_error *e = NULL;
    int rc = sbx_sandbox_exec(sb, script, o, &res, &e);
    sbx_exec_opts_free(o);
    if (rc < 0) {
        rc = sbx__set_error(err, rc == SBX_EPROVIDER ? SBX_EIO : rc, "%s '%s': %s", what, path,
                            e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
        return rc;
    }
    if (sbx_exec_result_return_code(res) != 0) {
        rc = sbx__transfer_failure(res, NULL, false, what, path, err);
        sbx_exec_result_free(res);
        return rc;
    }
    if (res_out)
        *res_out = res;
    else
        sbx_exec_result_free(res);
    return SBX_OK;
}

/* Removes a staged box file after a step that did not (best effort). */
static void remove_box_file(sbx_sandbox *sb, const char *box_file)
{
    _cleanup_free_ char *q = sbx_shell_quote(box_file);
    _cleanup_free_ char *script = q ? sbx__printf("rm -f -- %s", q) : NULL;
    if (script)
        run_script(sb, script, 0, "removing", box_file, NULL, NULL);
}

int sbx__xfer_exec_extract(sbx_sandbox *sb, int in_fd, const char *remote, unsigned flags,
                           const char *what, const char *shown, sbx_error **err)
{
    struct stage st = { 0 };
    int rc = stage_open(&st, what, shown, err);
    _cleanup_free_ char *box_file = NULL;
    if (rc == SBX_OK)
        rc = box_stage_path(sb, what, shown, &box_file, err);
    if (rc == SBX_OK) {
        int fd = open(st.file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            rc = sbx__set_errno(err, SBX_EIO, errno, "%s '%s': cannot stage the archive: %s", what,
                                shown, strerror(errno));
        else {
            rc = copy_fd(in_fd, fd, 0, what, shown, err);
            if (close(fd) < 0 && rc == SBX_OK)
                rc = sbx__set_errno(err, SBX_EIO, errno, "%s '%s': %s", what, shown,
                                    strerror(errno));
        }
    }
    if (rc == SBX_OK) {
        sbx_error *e = NULL;
        if ((rc = sbx_sandbox_upload(sb, st.file, box_file, &e)) < 0) {
            rc = sbx__set_error(err, rc == SBX_EPROVIDER ? SBX_EIO : rc,
                                "%s '%s': uploading the archive: %s", what, shown,
                                e ? sbx_error_message(e) : sbx_strerror(rc));
            sbx_error_free(e);
            remove_box_file(sb, box_file);
        }
    }
    stage_close(&st);
    if (rc < 0)
        return rc;
    /* -o: do not restore the archive's owners (GNU and busybox tar alike, when extracting). */
    _cleanup_free_ char *qd = sbx_shell_quote(remote);
    _cleanup_free_ char *qf = sbx_shell_quote(box_file);
    _cleanup_free_ char *script =
        qd && qf ? sbx__printf("mkdir -p -- %s && tar -xp%s -f %s -C %s; rc=$?; rm -f -- %s; "
                               "exit $rc",
                               qd, (flags & SBX_TRANSFER_PRESERVE_OWNER) ? "" : "o", qf, qd, qf)
                 : NULL;
    if (!script)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return run_script(sb, script, 0, what, shown, NULL, err);
}

int sbx__xfer_exec_create(sbx_sandbox *sb, const char *remote, int out_fd, sbx_error **err)
{
    const char *what = "downloading";
    _cleanup_free_ char *box_file = NULL;
    int rc = box_stage_path(sb, what, remote, &box_file, err);
    if (rc < 0)
        return rc;
    _cleanup_free_ char *qd = sbx_shell_quote(remote);
    _cleanup_free_ char *qf = box_file ? sbx_shell_quote(box_file) : NULL;
    _cleanup_free_ char *script =
        qd && qf ? sbx__printf("if [ ! -d %s ]; then echo \"not a directory (or missing)\" >&2; "
                               "exit 1; fi; tar -c -f %s -C %s . || { rc=$?; rm -f -- %s; exit "
                               "$rc; }",
                               qd, qf, qd, qf)
                 : NULL;
    if (!script)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if ((rc = run_script(sb, script, 0, what, remote, NULL, err)) < 0)
        return rc;
    struct stage st = { 0 };
    rc = stage_open(&st, what, remote, err);
    sbx_error *e = NULL;
    if (rc == SBX_OK && (rc = sbx_sandbox_download(sb, box_file, st.file, &e)) < 0) {
        rc = sbx__set_error(err, rc == SBX_EPROVIDER ? SBX_EIO : rc,
                            "%s '%s': downloading the archive: %s", what, remote,
                            e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
    }
    remove_box_file(sb, box_file);
    if (rc == SBX_OK) {
        /* The box chose the archive's size: held to the upload limits (and tar's slack). */
        int fd = open(st.file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            rc = sbx__set_errno(err, SBX_EIO, errno, "%s '%s': %s", what, remote,
                                strerror(errno));
        else {
            /*
             * out_fd is the unpacker's pipe: when it fails it closes its end,
             * and this write must get EPIPE, not kill the process.
             */
            sigset_t pipe_set, old;
            sigemptyset(&pipe_set);
            sigaddset(&pipe_set, SIGPIPE);
            pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
            unsigned long long max = SBX_TRANSFER_DEFAULT_MAX_BYTES;
            rc = copy_fd(fd, out_fd, max + ARCHIVE_SLACK(max), what, remote, err);
            struct timespec zero = { 0, 0 };
            while (sigtimedwait(&pipe_set, NULL, &zero) == SIGPIPE)
                ; /* a SIGPIPE this thread raised: taken, not left pending */
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            close(fd);
        }
    }
    stage_close(&st);
    return rc;
}

int sbx__xfer_exec_kind(sbx_sandbox *sb, const char *remote, const char **kind_out,
                        sbx_error **err)
{
    _cleanup_free_ char *q = sbx_shell_quote(remote);
    /* As the agent's built-in: a link is "other" (not followed), nothing there "missing". */
    _cleanup_free_ char *script =
        q ? sbx__printf("if [ -L %s ]; then echo other; elif [ -d %s ]; then echo dir; elif "
                        "[ -f %s ]; then echo file; elif [ -e %s ]; then echo other; else echo "
                        "missing; fi",
                        q, q, q, q)
          : NULL;
    if (!script)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    sbx_exec_result *res = NULL;
    int rc = run_script(sb, script, KEEP_STDERR, "probing", remote, &res, err);
    if (rc < 0)
        return rc;
    const char *out = sbx_exec_result_stdout(res, NULL);
    static const char *const kinds[] = { "file", "dir", "other" };
    const char *k = NULL;
    bool known = out && !strcmp(out, "missing\n");
    for (size_t i = 0; out && i < SBX_ARRAY_SIZE(kinds); i++)
        if (!strncmp(out, kinds[i], strlen(kinds[i])) && !strcmp(out + strlen(kinds[i]), "\n"))
            k = kinds[i], known = true;
    sbx_exec_result_free(res);
    if (!known)
        return sbx__set_error(err, SBX_EPROTO, "probing '%s': unexpected answer from the box",
                              remote);
    *kind_out = k;
    return SBX_OK;
}

int sbx__xfer_exec_write(sbx_sandbox *sb, const char *remote, const void *data, size_t len,
                         unsigned mode, sbx_error **err)
{
    const char *what = "writing";
    struct stage st = { 0 };
    int rc = stage_open(&st, what, remote, err);
    if (rc == SBX_OK && sbx__write_file_atomic(st.file, data, len, (mode_t)mode) < 0)
        rc = sbx__set_errno(err, SBX_EIO, errno, "%s '%s': cannot stage it: %s", what, remote,
                            strerror(errno));
    sbx_error *e = NULL;
    if (rc == SBX_OK && (rc = sbx_sandbox_upload(sb, st.file, remote, &e)) < 0) {
        rc = sbx__set_error(err, rc == SBX_EPROVIDER ? SBX_EIO : rc, "%s '%s': %s", what, remote,
                            e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
    }
    stage_close(&st);
    if (rc < 0)
        return rc;
    /* Not every service keeps an upload's mode: the box's chmod says it. */
    _cleanup_free_ char *q = sbx_shell_quote(remote);
    _cleanup_free_ char *script = q ? sbx__printf("chmod %o %s", mode, q) : NULL;
    if (!script)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return run_script(sb, script, 0, what, remote, NULL, err);
}

int sbx__xfer_exec_read(sbx_sandbox *sb, const char *remote, size_t max_bytes, char **data_out,
                        size_t *len_out, sbx_error **err)
{
    const char *what = "reading";
    struct stage st = { 0 };
    int rc = stage_open(&st, what, remote, err);
    sbx_error *e = NULL;
    if (rc == SBX_OK && (rc = sbx_sandbox_download(sb, remote, st.file, &e)) < 0) {
        rc = sbx__set_error(err, rc == SBX_EPROVIDER ? SBX_EIO : rc, "%s '%s': %s", what, remote,
                            e ? sbx_error_message(e) : sbx_strerror(rc));
        sbx_error_free(e);
    }
    struct stat sst;
    int fd = rc == SBX_OK ? open(st.file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (rc == SBX_OK && (fd < 0 || fstat(fd, &sst) < 0))
        rc = sbx__set_errno(err, SBX_EIO, errno, "%s '%s': %s", what, remote, strerror(errno));
    else if (rc == SBX_OK && (unsigned long long)sst.st_size > max_bytes)
        rc = sbx__set_error(err, SBX_ETRANSFER,
                            "reading '%s': it holds %lld bytes, more than the limit of %zu",
                            remote, (long long)sst.st_size, max_bytes);
    char *d = NULL;
    size_t n = 0;
    if (rc == SBX_OK && !(d = malloc((size_t)sst.st_size + 1)))
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
    while (rc == SBX_OK && n < (size_t)sst.st_size) {
        ssize_t r = read(fd, d + n, (size_t)sst.st_size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rc = sbx__set_error(err, SBX_EIO, "%s '%s': the staged copy shrank", what, remote);
        else
            n += (size_t)r;
    }
    if (fd >= 0)
        close(fd);
    stage_close(&st);
    if (rc < 0) {
        free(d);
        return rc;
    }
    d[n] = 0;
    *data_out = d;
    *len_out = n;
    return SBX_OK;
}
