/*
 * opensandbox: files through execd. Upload is execd's multipart POST
 * /files/upload (a "metadata" part with the path and mode, then the "file"
 * part, by the kit's encoder); download asks /files/info for the mode (so it is kept, as sbx
 * keeps it everywhere) and then GET /files/download. Host files are read
 * and written on a worker thread; the requests go from the loop.
 */
#include "osb.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fjob {
    sbx_op *op;
    struct osb *st;
    struct obox *b;
    sbx_http_request *cur;
    char *remote, *local;
    char *data;
    size_t len;
    int mode;
    bool hook; /* the op's cancel hook is set (cleared on the loop thread only) */
};

static void fjob_free(struct fjob *f)
{
    free(f->remote);
    free(f->local);
    free(f->data);
    free(f);
}

static struct fjob *fjob_new(sbx_op *op, struct osb *st, struct obox *b, const char *remote,
                             const char *local)
{
    struct fjob *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    *f = (struct fjob){
        .op = op, .st = st, .b = b, .remote = strdup(remote), .local = strdup(local), .mode = -1};
    if (!f->remote || !f->local) {
        fjob_free(f);
        return NULL;
    }
    return f;
}

static void fjob_finish(struct fjob *f, int code, sbx_error *err)
{
    if (f->hook)
        sbx_op_on_cancel(f->op, NULL, NULL);
    sbx_op_complete(f->op, code, err, NULL);
    fjob_free(f);
}

/* A job for a box that has its execd endpoint, or NULL with the op completed. */
static struct fjob *fjob_start(sbx_op *op, struct osb *st, struct obox *b, const char *remote,
                               const char *local)
{
    struct fjob *f = fjob_new(op, st, b, remote, local);
    if (!f) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return NULL;
    }
    if (!b->execd) {
        fjob_finish(
            f, SBX_ESTATE,
            sbx_error_new(SBX_ESTATE, OSB_NAME ": sandbox %s has no execd endpoint", b->id));
        return NULL;
    }
    return f;
}

static void uploaded(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct fjob *f = ctx;
    if (code == SBX_OK)
        code = sbx_http_response_check(resp, &err);
    fjob_finish(f, code, code < 0 ? sbx_error_prefix(err, "uploading %s", f->remote) : NULL);
}

/* Worker: reads the file, builds the body, then sends (any thread may send). */
static void upload_read(sbx_op *op, void *data)
{
    (void)op;
    struct fjob *f = data;
    int fd = open(f->local, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > OSB_MAX_FILE) {
        int e = fd < 0 ? errno : 0;
        bool big = fd >= 0 && S_ISREG(st.st_mode);
        if (fd >= 0)
            close(fd);
        int code = e == ENOENT ? SBX_ENOENT : SBX_EINVAL;
        fjob_finish(
            f, code,
            big ? sbx_error_new(SBX_EINVAL, OSB_NAME ": %s is larger than %zu bytes", f->local,
                                OSB_MAX_FILE)
                : sbx_error_new_errno(code, e ? e : EISDIR, OSB_NAME ": cannot read %s", f->local));
        return;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    ssize_t n = 0, got;
    while (buf && n < st.st_size &&
           ((got = read(fd, buf + n, (size_t)(st.st_size - n))) > 0 || (got < 0 && errno == EINTR)))
        n += got > 0 ? got : 0;
    close(fd);
    if (!buf || n != st.st_size) {
        free(buf);
        fjob_finish(f, SBX_EIO, sbx_error_new(SBX_EIO, OSB_NAME ": cannot read %s", f->local));
        return;
    }
    /* execd's mode is the octal digits written as a decimal number: 0751 is 751. */
    unsigned m = st.st_mode & 0777;
    json_t *meta = json_pack("{s:s, s:n, s:n, s:i}", "path", f->remote, "owner", "group", "mode",
                             (int)((m >> 6) * 100 + ((m >> 3) & 7) * 10 + (m & 7)));
    char *meta_text = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_decref(meta);
    /* The file part's name is informational (the metadata has the path): a plain one. */
    const char *slash = strrchr(f->remote, '/'), *base = slash ? slash + 1 : f->remote;
    if (!*base || strlen(base) > 255 || strpbrk(base, "\"\\\r\n"))
        base = "upload";
    sbx_http_part parts[] = {
        {.name = "metadata",
         .content_type = "application/json",
         .data = meta_text,
         .len = meta_text ? strlen(meta_text) : 0},
        {.name = "file",
         .filename = base,
         .content_type = "application/octet-stream",
         .data = buf,
         .len = (size_t)n},
    };
    sbx_http_request *req = NULL;
    sbx_error *err = NULL;
    int rc = meta_text ? sbx_http_request_new(f->b->execd, "POST", "/files/upload", &req, &err)
                       : SBX_ENOMEM;
    if (rc == SBX_OK && (rc = sbx_http_request_set_multipart(req, parts, 2, &err)) < 0) {
        sbx_http_request_free(req);
        req = NULL;
    }
    free(meta_text);
    free(buf);
    if (rc < 0) {
        fjob_finish(f, rc, sbx_error_prefix(err, "uploading %s", f->remote));
        return;
    }
    /* Writing the same bytes twice is the same file: the upload may be retried. */
    sbx_http_request_set_idempotent(req, 1);
    double rt = f->st->cfg.connection.request_timeout_s;
    osb_send(f->op, req, rt > 0 ? rt : 0, NULL, uploaded, f);
}

void osb_upload(sbx_op *op, void *state, void *box, const char *local_path, const char *remote_path)
{
    struct fjob *f = fjob_start(op, state, box, remote_path, local_path);
    if (!f)
        return;
    int rc = sbx_op_run_blocking(op, upload_read, f);
    if (rc < 0)
        fjob_finish(f, rc, NULL);
}

/* Worker: writes what came, its parents made, with the box's mode. */
static void download_write(sbx_op *op, void *data)
{
    (void)op;
    struct fjob *f = data;
    for (char *s = strchr(f->local + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        mkdir(f->local, 0755);
        *s = '/';
    }
    int fd = open(f->local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ssize_t n = fd >= 0 ? write(fd, f->data ? f->data : "", f->len) : -1;
    int e = errno;
    if (fd >= 0 && fchmod(fd, (mode_t)(f->mode >= 0 ? f->mode : 0644)) < 0)
        n = -1;
    if (fd >= 0 && close(fd) < 0)
        n = -1;
    if (n != (ssize_t)f->len)
        fjob_finish(f, SBX_EIO,
                    sbx_error_new_errno(SBX_EIO, e, OSB_NAME ": cannot write %s", f->local));
    else
        fjob_finish(f, SBX_OK, NULL);
}

static void downloaded(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct fjob *f = ctx;
    if (code == SBX_OK && (code = sbx_http_response_check(resp, &err)) == SBX_OK) {
        f->data = sbx_http_response_take_body(resp, &f->len);
        sbx_op_on_cancel(f->op, NULL, NULL);
        f->hook = false;
        code = f->data ? sbx_op_run_blocking(f->op, download_write, f) : SBX_ENOMEM;
        if (code == SBX_OK)
            return;
    }
    fjob_finish(f, code, code < 0 ? sbx_error_prefix(err, "downloading %s", f->remote) : NULL);
}

static void got_info(void *ctx, int code, sbx_http_response *resp, sbx_error *err)
{
    struct fjob *f = ctx;
    if (code == SBX_OK && (code = sbx_http_response_check(resp, &err)) == SBX_OK) {
        size_t n = 0;
        const char *b = sbx_http_response_body(resp, &n);
        int is_dir = 0;
        f->mode = osb_file_mode_parse(b, n, f->remote, &is_dir);
        if (is_dir) {
            fjob_finish(f, SBX_EINVAL,
                        sbx_error_new(SBX_EINVAL,
                                      OSB_NAME ": %s is a directory in the box "
                                               "(download moves single files)",
                                      f->remote));
            return;
        }
        char *path = osb_query("/files/download", "path", f->remote);
        double rt = f->st->cfg.connection.request_timeout_s;
        osb_call(f->op, f->b->execd, "GET", path, rt > 0 ? rt : 0, &f->cur, downloaded, f);
        return;
    }
    fjob_finish(f, code, sbx_error_prefix(err, "downloading %s", f->remote));
}

void osb_download(sbx_op *op, void *state, void *box, const char *remote_path,
                  const char *local_path)
{
    struct fjob *f = fjob_start(op, state, box, remote_path, local_path);
    if (!f)
        return;
    /* A missing file: 404, SBX_ENOENT by the status map. */
    osb_cancel_slot(op, &f->cur);
    f->hook = true;
    double rt = f->st->cfg.connection.request_timeout_s;
    osb_call(op, f->b->execd, "GET", osb_query("/files/info", "path", remote_path), rt > 0 ? rt : 0,
             &f->cur, got_info, f);
}
