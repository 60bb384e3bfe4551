/*
 * agent: false (docs/providers/docker.md "Without the agent"): for images
 * where sbx-agent cannot run, the box is the reference's container (its
 * keepalive or entrypoint, `--init`), commands go through the Engine's exec
 * API and files through its archive API.
 *
 * exec: POST /containers/ID/exec, then POST /exec/ID/start upgraded to a
 * raw stream (session.c) carrying stdin out and the multiplexed stdout and
 * stderr back, then GET /exec/ID/json for the exit code. The reference's
 * sentinels: a timeout gives rc 125, error_type "timeout" (stdout None,
 * stderr saying so; the command is left running, as the reference leaves
 * it), the engine failing (container gone, not running, not answering)
 * gives rc 125, "sandbox" with the engine's message as stderr.
 *
 * upload / download: a one-file tar made and read by libarchive, streamed
 * through a socket pair between a thread and the request (never whole in
 * memory). The engine resolves container paths in the container's own root
 * (its FollowSymlinkInScope): nothing leads out of the box; what comes back
 * must be one regular file, written here atomically.
 *
 * Everything here blocks and runs on the worker pool.
 */
#include "providers/docker/docker.h"

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <libgen.h>
#include <nettle/base64.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

/* An exec's end can lag its stream's by a little: how often to ask for the exit code (~5 s). */
#define EXIT_WAIT_TRIES 500
/* Links followed for a download (each one resolved by the engine, in the container). */
#define MAX_LINK_HOPS 16
/* Go's os.FileMode bits in the engine's path stat. */
#define GO_MODE_DIR (1ull << 31)
#define GO_MODE_SYMLINK (1ull << 27)

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static char *esc(const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    char *out = e ? strdup(e) : NULL;
    curl_free(e);
    return out;
}

/* A box path: relative ones are under the container's workdir ("/" without one). */
static char *box_path(const struct dbox *b, const char *p)
{
    if (p[0] == '/')
        return strdup(p);
    const char *wd = b->workdir && b->workdir[0] == '/' ? b->workdir : "/";
    return sbx__printf("%s%s%s", wd, wd[strlen(wd) - 1] == '/' ? "" : "/", p);
}

/* --- the shell ------------------------------------------------------------------ */

struct capture {
    sbx_buf out;
};

static int capture_out(int stream, const uint8_t *p, size_t n, void *data)
{
    struct capture *c = data;
    if (stream == 1 && c->out.len + n <= 4096)
        return sbx__buf_append(&c->out, p, n) < 0 ? -1 : 0;
    return 0;
}

/*
 * Runs `cmd` (argv) in container `cid` through the exec API, no stdin,
 * waiting at most `timeout_s`: its exit code, or -1. For the shell check.
 */
static int quick_exec(struct docker *d, const char *cid, json_t *cmd, double timeout_s,
                      struct capture *cap);

char *sbx__dk_noagent_shell(struct docker *d, const char *cid)
{
    if (d->cfg.shell)
        return strdup(d->cfg.shell);
    /* The reference's _resolve_shell: bash when `command -v bash` says so, else sh. */
    struct capture cap = {0};
    int rc = quick_exec(d, cid, json_pack("[sss]", "sh", "-c", "command -v bash"), 30, &cap);
    sbx__buf_free(&cap.out);
    return strdup(rc == 0 ? "bash" : "sh");
}

/* --- exec ------------------------------------------------------------------------- */

struct xjob {
    struct docker *d;
    char *container, *command, *shell, *cwd, *user;
    json_t *env; /* ["K=V", ...] */
    json_t *argv; /* the caller's argv (sbx_exec_opts_set_argv): Cmd as it is, no shell; or NULL */
    const void *in;
    size_t in_len;
    int in_fd;
    bool has_stdin;
    double timeout; /* < 0: none */
    size_t limit;
    bool keep;
    /* the run */
    sbx_op *op; /* NULL: not streaming (quick_exec) */
    sbx_buf out, err;
    bool truncated;
    struct capture *cap;
};

static void xjob_free(struct xjob *j)
{
    free(j->container);
    json_decref(j->argv);
    free(j->command);
    free(j->shell);
    free(j->cwd);
    free(j->user);
    json_decref(j->env);
    sbx__buf_free(&j->out);
    sbx__buf_free(&j->err);
    free(j);
}

static int on_output(int stream, const uint8_t *p, size_t n, void *data)
{
    struct xjob *j = data;
    if (j->cap)
        return capture_out(stream, p, n, j->cap);
    if (stream != 1 && stream != 2)
        return 0; /* stdin echoed back (a tty only): not output */
    int s = stream == 1 ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR;
    if (j->op)
        sbx_op_exec_output(j->op, s, p, n);
    if (!j->keep)
        return 0;
    sbx_buf *b = stream == 1 ? &j->out : &j->err;
    size_t room = j->out.len + j->err.len < j->limit ? j->limit - j->out.len - j->err.len : 0;
    if (n > room) {
        j->truncated = true;
        n = room;
    }
    return n && sbx__buf_append(b, p, n) < 0 ? -1 : 0;
}

enum xend { X_DONE, X_TIMEOUT, X_CANCELLED, X_BROKEN };

/*
 * Runs one exec to its end (or timeout, or cancellation). `*code` gets the
 * exit code for X_DONE; `emsg` says what broke for X_BROKEN.
 */
static enum xend run_exec(struct xjob *j, int *code, char *emsg, size_t emsg_len)
{
    struct docker *d = j->d;
    json_t *cmd = j->argv ? json_incref(j->argv) : json_pack("[sss]", j->shell, "-c", j->command);
    json_t *body = cmd ? json_pack("{s:b,s:b,s:b,s:b,s:o}", "AttachStdin", j->has_stdin,
                                   "AttachStdout", 1, "AttachStderr", 1, "Tty", 0, "Cmd", cmd)
                       : NULL;
    if (body && j->env)
        json_object_set(body, "Env", j->env);
    if (body && j->cwd)
        json_object_set_new(body, "WorkingDir", json_string(j->cwd));
    if (body && j->user)
        json_object_set_new(body, "User", json_string(j->user));
    _cleanup_free_ char *ec = esc(j->container);
    _cleanup_free_ char *q = ec ? sbx__printf("/containers/%s/exec", ec) : NULL;
    if (!body || !q) {
        json_decref(body);
        snprintf(emsg, emsg_len, "out of memory");
        return X_BROKEN;
    }
    long st = 0;
    json_t *resp = NULL;
    sbx_error *e = NULL;
    int rc = sbx__dk_request(d->engine, "POST", q, body, &st, &resp, &e);
    json_decref(body);
    const char *id = json_string_value(json_object_get(resp, "Id"));
    if (rc == SBX_OK && (st != 201 || !id))
        sbx__dk_error(&e, SBX_EPROVIDER, st, resp, "docker exec in container %.12s", j->container);
    _cleanup_free_ char *exec_id = rc == SBX_OK && st == 201 && id ? strdup(id) : NULL;
    json_decref(resp);
    if (!exec_id) {
        snprintf(emsg, emsg_len, "%s", e ? sbx_error_message(e) : "out of memory");
        sbx_error_free(e);
        return X_BROKEN;
    }
    void *c = NULL;
    int sock = -1;
    char *early = NULL;
    size_t early_len = 0;
    if (sbx__dk_exec_attach(d->engine, exec_id, &c, &sock, &early, &early_len, &e) < 0) {
        snprintf(emsg, emsg_len, "%s", sbx_error_message(e));
        sbx_error_free(e);
        return X_BROKEN;
    }
    struct sbx_dk_demux dx;
    sbx__dk_demux_init(&dx);
    enum xend end = X_DONE;
    bool broke = sbx__dk_demux_feed(&dx, (const uint8_t *)early, early_len, on_output, j) < 0;
    free(early);
    double deadline = j->timeout >= 0 ? mono() + j->timeout : 0;
    /* stdin: the bytes given, or what the descriptor gives, then EOF (a half close). */
    const char *in = j->in;
    size_t in_left = j->has_stdin && j->in_fd < 0 ? j->in_len : 0;
    char inbuf[65536];
    bool in_eof = !j->has_stdin, wr_closed = !j->has_stdin;
    char buf[65536];
    while (!broke) {
        if (in_left == 0 && j->in_fd < 0)
            in_eof = true;
        if (in_eof && in_left == 0 && !wr_closed) {
            shutdown(sock, SHUT_WR); /* the command reads EOF */
            wr_closed = true;
        }
        int wait_ms = 250;
        if (deadline > 0) {
            double left = deadline - mono();
            if (left <= 0) {
                end = X_TIMEOUT;
                break;
            }
            if (left * 1000 < wait_ms)
                wait_ms = (int)(left * 1000) + 1;
        }
        if (j->op && sbx_op_cancelled(j->op)) {
            end = X_CANCELLED;
            break;
        }
        struct pollfd pf[2] = {{.fd = sock, .events = POLLIN | (in_left ? POLLOUT : 0)},
                               {.fd = j->in_fd, .events = POLLIN}};
        int npf = !in_eof && in_left == 0 && j->in_fd >= 0 ? 2 : 1;
        if (poll(pf, (nfds_t)npf, wait_ms) < 0 && errno != EINTR)
            break;
        /* The caller's stdin descriptor: read only when it has something (never blocks here). */
        if (npf == 2 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t r = read(j->in_fd, inbuf, sizeof(inbuf));
            if (r > 0) {
                in = inbuf;
                in_left = (size_t)r;
            } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
                in_eof = true;
            }
        }
        if (in_left && (pf[0].revents & POLLOUT)) {
            size_t sent = 0;
            CURLcode cc = curl_easy_send(c, in, in_left, &sent);
            if (cc == CURLE_OK) {
                in += sent;
                in_left -= sent;
            } else if (cc != CURLE_AGAIN) {
                in_left = 0; /* the command stopped reading: its output still counts */
                in_eof = true;
            }
        }
        if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            bool ended = false;
            for (;;) {
                size_t got = 0;
                CURLcode cc = curl_easy_recv(c, buf, sizeof(buf), &got);
                if (cc == CURLE_AGAIN)
                    break;
                if (cc != CURLE_OK || got == 0) {
                    ended = true;
                    break;
                }
                if (sbx__dk_demux_feed(&dx, (const uint8_t *)buf, got, on_output, j) < 0) {
                    broke = true;
                    break;
                }
            }
            if (ended)
                break;
        }
    }
    curl_easy_cleanup(c);
    if (broke) {
        snprintf(emsg, emsg_len,
                 "docker exec in container %.12s: the engine's stream was not "
                 "in its multiplexed format",
                 j->container);
        return X_BROKEN;
    }
    if (end != X_DONE)
        return end;
    /* The exit code: the exec may still be finishing as its stream ends. */
    _cleanup_free_ char *iq = sbx__printf("/exec/%s/json", exec_id);
    for (int i = 0; iq && i < EXIT_WAIT_TRIES; i++) {
        resp = NULL;
        rc = sbx__dk_request(d->engine, "GET", iq, NULL, &st, &resp, &e);
        if (rc < 0 || st != 200) {
            if (rc == SBX_OK)
                sbx__dk_error(&e, SBX_EPROVIDER, st, resp, "inspecting exec %.12s", exec_id);
            snprintf(emsg, emsg_len, "%s", sbx_error_message(e));
            sbx_error_free(e);
            json_decref(resp);
            return X_BROKEN;
        }
        json_t *ex = json_object_get(resp, "ExitCode");
        bool running = json_is_true(json_object_get(resp, "Running"));
        if (!running && json_is_integer(ex)) {
            *code = (int)json_integer_value(ex);
            json_decref(resp);
            return X_DONE;
        }
        json_decref(resp);
        /* Usually a millisecond or two behind: ask again soon, then less often. */
        struct timespec ts = {0, (i < 4 ? 1L << i : 10L) * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    snprintf(emsg, emsg_len, "docker exec %.12s in container %.12s: no exit code from the engine",
             exec_id, j->container);
    return X_BROKEN;
}

static int quick_exec(struct docker *d, const char *cid, json_t *cmd, double timeout_s,
                      struct capture *cap)
{
    struct xjob j = {.d = d, .in_fd = -1, .timeout = timeout_s, .cap = cap};
    /* run_exec builds [shell, -c, command]: the shell is argv[0], the command argv[2]. */
    j.shell = strdup(json_string_value(json_array_get(cmd, 0)) ?: "sh");
    j.command = strdup(json_string_value(json_array_get(cmd, 2)) ?: "");
    j.container = strdup(cid);
    json_decref(cmd);
    int code = -1;
    char msg[512];
    if (j.shell && j.command && j.container && run_exec(&j, &code, msg, sizeof(msg)) != X_DONE)
        code = -1;
    free(j.shell);
    free(j.command);
    free(j.container);
    return code;
}

static void exec_work(sbx_op *op, void *data)
{
    struct xjob *j = data;
    j->op = op;
    int code = 0;
    char msg[1024];
    enum xend end = run_exec(j, &code, msg, sizeof(msg));
    if (end == X_CANCELLED) {
        xjob_free(j);
        sbx_op_complete(op, SBX_ECANCELED, sbx_error_new(SBX_ECANCELED, "exec cancelled"), NULL);
        return;
    }
    sbx_exec_result *r = NULL;
    int rc;
    if (end == X_TIMEOUT) {
        /*
         * The reference's sentinel (rc 125, "timeout", stderr saying so), with
         * what the command printed before it, as every sbx provider gives.
         */
        char g[32];
        sbx__fmt_g(j->timeout, g, sizeof(g));
        char *o = j->keep ? strndup(j->out.data ? j->out.data : "", j->out.len) : NULL;
        char *m =
            sbx__printf("%.*s%sdocker command timed out after %ss: %s -c %s",
                        j->keep ? (int)j->err.len : 0, j->err.data ? j->err.data : "",
                        j->keep && j->err.len && j->err.data[j->err.len - 1] != '\n' ? "\n" : "", g,
                        j->shell, j->command);
        rc = sbx_exec_result_new_take(o, o ? j->out.len : 0, m, m ? strlen(m) : 0, 125, "timeout",
                                      &r);
    } else if (end == X_BROKEN) {
        /* The runtime failed (container gone, not running, engine away): 125, "sandbox". */
        char *m = strdup(msg);
        char *o = j->keep ? strndup(j->out.data ? j->out.data : "", j->out.len) : NULL;
        rc = sbx_exec_result_new_take(o, o ? j->out.len : 0, m, m ? strlen(m) : 0, 125, "sandbox",
                                      &r);
    } else {
        char *o = j->keep ? strndup(j->out.data ? j->out.data : "", j->out.len) : NULL;
        char *e = j->keep ? strndup(j->err.data ? j->err.data : "", j->err.len) : NULL;
        rc = sbx_exec_result_new_take(o, o ? j->out.len : 0, e, e ? j->err.len : 0, code, NULL, &r);
        if (rc == SBX_OK && j->truncated)
            sbx_exec_result_set_truncated(r, 1);
    }
    xjob_free(j);
    sbx_op_complete(op, rc, NULL, rc == SBX_OK ? r : NULL);
}

void sbx__dk_noagent_exec(sbx_op *op, struct docker *d, struct dbox *b, const char *command,
                          const sbx_exec_opts *opts)
{
    /* A transfer's agent built-in: there is no agent to run it. */
    if (opts && opts->builtin_argv) {
        sbx_op_complete(op, SBX_ENOTSUP,
                        sbx_error_new(SBX_ENOTSUP,
                                      "docker: this box runs without sbx-agent (agent: false), "
                                      "which directory and byte transfers need; use "
                                      "upload/download of single files"),
                        NULL);
        return;
    }
    struct xjob *j = calloc(1, sizeof(*j));
    if (!j) {
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    j->d = d;
    j->in_fd = sbx_exec_opts_stdin_fd(opts);
    j->in = sbx_exec_opts_stdin(opts, &j->in_len);
    j->has_stdin = j->in || j->in_fd >= 0;
    j->timeout = sbx_exec_opts_timeout(opts);
    j->limit = sbx_exec_opts_output_limit(opts);
    if (!j->limit)
        j->limit = SBX_DEFAULT_OUTPUT_LIMIT;
    j->keep = sbx_exec_opts_keep_output(opts);
    const char *cwd = sbx_exec_opts_cwd(opts), *user = sbx_exec_opts_user(opts);
    const char *const *av = sbx_exec_opts_argv(opts);
    if (av) {
        j->argv = json_array();
        for (size_t i = 0; j->argv && av[i]; i++)
            json_array_append_new(j->argv, json_string(av[i]));
    }
    bool oom = (av && !j->argv) || !(j->container = strdup(b->container)) ||
               !(j->command = strdup(command)) ||
               !(j->shell = strdup(b->shell ? b->shell : "sh")) ||
               (cwd && cwd[0] && !(j->cwd = box_path(b, cwd)));
    /* The reference's user mapping: "root" is uid 0; anything else as given. */
    if (!oom && user && user[0])
        oom = !(j->user = strdup(!strcmp(user, "root") ? "0" : user));
    size_t n = sbx_exec_opts_env_count(opts);
    if (!oom && n) {
        oom = !(j->env = json_array());
        for (size_t i = 0; !oom && i < n; i++) {
            const char *k, *v;
            sbx_exec_opts_env_at(opts, i, &k, &v);
            char *kv = sbx__printf("%s=%s", k, v ? v : "");
            oom = !kv || json_array_append_new(j->env, json_string(kv)) < 0;
            free(kv);
        }
    }
    if (oom) {
        xjob_free(j);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    if (sbx_op_run_blocking(op, exec_work, j) < 0) {
        xjob_free(j);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

/* --- tar, one file, by libarchive -------------------------------------------------- */

struct fdw {
    int fd;
};

static la_ssize_t sock_write(struct archive *a, void *data, const void *buf, size_t n)
{
    struct fdw *w = data;
    const char *p = buf;
    size_t left = n;
    while (left) {
        ssize_t r = send(w->fd, p, left, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            archive_set_error(a, errno ? errno : EPIPE, "the request stopped reading");
            return -1;
        }
        p += r;
        left -= (size_t)r;
    }
    return (la_ssize_t)n;
}

int sbx__dk_tar_one(int fd, const char *name, unsigned mode, long long size, int out_fd, char *msg,
                    size_t msg_len)
{
    struct archive *a = archive_write_new();
    struct archive_entry *en = archive_entry_new();
    struct fdw w = {out_fd};
    int rc = -1;
    if (!a || !en) {
        snprintf(msg, msg_len, "out of memory");
        goto out;
    }
    archive_write_set_format_pax_restricted(a); /* long names and big files as needed */
    archive_write_set_bytes_per_block(a, 0);    /* stream: no 10 KiB blocking */
    if (archive_write_open(a, &w, NULL, sock_write, NULL) != ARCHIVE_OK)
        goto fail;
    archive_entry_set_pathname(en, name);
    archive_entry_set_filetype(en, AE_IFREG);
    archive_entry_set_perm(en, mode & 07777);
    archive_entry_set_size(en, size);
    archive_entry_set_uid(en, 0); /* root's, as `docker cp` leaves the reference's */
    archive_entry_set_gid(en, 0);
    archive_entry_set_mtime(en, time(NULL), 0);
    if (archive_write_header(a, en) != ARCHIVE_OK)
        goto fail;
    char *chunk = malloc(1 << 20);
    if (!chunk) {
        snprintf(msg, msg_len, "out of memory");
        goto out;
    }
    long long done = 0;
    while (done < size) {
        ssize_t r = read(fd, chunk, 1 << 20);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(chunk);
            snprintf(msg, msg_len, "the file changed while it was read (%lld of %lld bytes)", done,
                     size);
            goto out;
        }
        if ((long long)r > size - done)
            r = (ssize_t)(size - done); /* it grew: the tar says `size` */
        if (archive_write_data(a, chunk, (size_t)r) != r) {
            free(chunk);
            goto fail;
        }
        done += r;
    }
    free(chunk);
    if (archive_write_close(a) != ARCHIVE_OK)
        goto fail;
    rc = 0;
    goto out;
fail:
    snprintf(msg, msg_len, "%s", archive_error_string(a) ? archive_error_string(a) : "tar failed");
out:
    archive_entry_free(en);
    archive_write_free(a);
    return rc;
}

int sbx__dk_untar_one(int in_fd, const char *out_path, char *msg, size_t msg_len)
{
    struct archive *a = archive_read_new();
    if (!a) {
        snprintf(msg, msg_len, "out of memory");
        return -1;
    }
    archive_read_support_format_tar(a);
    archive_read_support_filter_none(a);
    int rc = -1, tfd = -1;
    char *tmp = NULL;
    struct archive_entry *en;
    if (archive_read_open_fd(a, in_fd, 65536) != ARCHIVE_OK ||
        archive_read_next_header(a, &en) != ARCHIVE_OK) {
        snprintf(msg, msg_len, "the engine's tar could not be read: %s",
                 archive_error_string(a) ? archive_error_string(a) : "no entry");
        goto out;
    }
    /* One regular file: a link (or anything else) is not followed, anywhere. */
    if (archive_entry_filetype(en) != AE_IFREG) {
        snprintf(msg, msg_len, "not a regular file");
        rc = -2;
        goto out;
    }
    char *dup = strdup(out_path);
    char *dir = dup ? dirname(dup) : NULL;
    tmp = dir ? sbx__printf("%s/.sbx-download.XXXXXX", dir) : NULL;
    free(dup);
    if (!tmp || (tfd = mkostemp(tmp, O_CLOEXEC)) < 0) {
        snprintf(msg, msg_len, "cannot make a file next to %s: %s", out_path, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto out;
    }
    const void *blk;
    size_t len;
    la_int64_t off, at = 0;
    for (;;) {
        int r = archive_read_data_block(a, &blk, &len, &off);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK) {
            snprintf(msg, msg_len, "the engine's tar broke off: %s",
                     archive_error_string(a) ? archive_error_string(a) : "?");
            goto out;
        }
        if (off != at && lseek(tfd, off, SEEK_SET) < 0)
            goto io;
        const char *p = blk;
        size_t left = len;
        while (left) {
            ssize_t w = write(tfd, p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                goto io;
            p += w;
            left -= (size_t)w;
        }
        at = off + (la_int64_t)len;
    }
    /* Sparse holes at the end, then the mode (no set-id bits from a box). */
    if (ftruncate(tfd, archive_entry_size(en)) < 0 ||
        fchmod(tfd, archive_entry_perm(en) & 0777) < 0 || rename(tmp, out_path) < 0)
        goto io;
    free(tmp);
    tmp = NULL;
    rc = 0;
    goto out;
io:
    snprintf(msg, msg_len, "writing %s: %s", out_path, strerror(errno));
out:
    if (tfd >= 0)
        close(tfd);
    if (tmp)
        unlink(tmp);
    free(tmp);
    archive_read_free(a);
    return rc;
}

/* --- upload / download -------------------------------------------------------------- */

int sbx__dk_stat_path(struct docker *d, const char *cid, const char *p, unsigned long long *mode,
                      char **link, long long *size, sbx_error **err)
{
    _cleanup_free_ char *ec = esc(cid), *ep = esc(p);
    _cleanup_free_ char *q =
        ec && ep ? sbx__printf("/containers/%s/archive?path=%s", ec, ep) : NULL;
    if (!q)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    long st = 0;
    _cleanup_free_ char *hdr = NULL;
    _cleanup_json_ json_t *resp = NULL;
    int rc = sbx__dk_request_fd(d->engine, "HEAD", q, -1, NULL, -1, &st, &resp, &hdr, err);
    if (rc < 0)
        return rc;
    if (st == 404)
        return SBX_ENOENT; /* the path, or the container: the caller's next request says */
    if (st != 200 || !hdr)
        return sbx__dk_error(err, SBX_EPROVIDER, st, resp, "looking at %s in container %.12s", p,
                             cid);
    if (sbx__dk_path_stat_parse(hdr, mode, link, size) < 0)
        return sbx__set_error(err, SBX_EPROVIDER, "docker engine at %s gave no readable stat of %s",
                              sbx__dk_engine_host(d->engine), p);
    return SBX_OK;
}

/*
 * The engine's X-Docker-Container-Path-Stat header: base64 of a JSON object
 * {"name", "size", "mode", "mtime", "linkTarget"}, bounded; NULL when it is
 * not that.
 */
static json_t *path_stat_json(const char *hdr)
{
    size_t hl = strlen(hdr);
    if (hl > 8192)
        return NULL;
    uint8_t *raw = malloc(BASE64_DECODE_LENGTH(hl) + 1);
    struct base64_decode_ctx ctx;
    size_t dl = raw ? BASE64_DECODE_LENGTH(hl) : 0;
    base64_decode_init(&ctx);
    bool ok = raw && base64_decode_update(&ctx, &dl, raw, hl, hdr) && base64_decode_final(&ctx);
    json_t *j = ok ? json_loadb((const char *)raw, dl, 0, NULL) : NULL;
    free(raw);
    return j;
}

int sbx__dk_path_stat_parse(const char *hdr, unsigned long long *mode, char **link,
                            long long *size)
{
    *mode = 0;
    *link = NULL;
    if (size)
        *size = -1;
    json_t *j = path_stat_json(hdr);
    json_t *m = json_object_get(j, "mode"), *sz = json_object_get(j, "size");
    const char *lt = json_string_value(json_object_get(j, "linkTarget"));
    if (!json_is_integer(m) || json_integer_value(m) < 0) {
        json_decref(j);
        return -1;
    }
    *mode = (unsigned long long)json_integer_value(m);
    if (size && json_is_integer(sz) && json_integer_value(sz) >= 0)
        *size = json_integer_value(sz);
    /* A link target is a path in the box, bounded as one. */
    if (lt && lt[0] && strlen(lt) < 4096 && !(*link = strdup(lt))) {
        json_decref(j);
        return -1;
    }
    json_decref(j);
    return 0;
}

/* An archive answer that was not a success, as the kit's codes. */
static int archive_error(struct docker *d, const char *cid, long st, const json_t *resp,
                         const char *what, const char *p, sbx_error **err)
{
    (void)d;
    return sbx__dk_error(err,
                         st == 404   ? SBX_ENOENT
                         : st == 403 ? SBX_EPERM
                                     : SBX_EIO,
                         st, resp, "%s %s in container %.12s", what, p, cid);
}

struct xfer {
    struct docker *d;
    char *container, *workdir, *remote, *local;
};

static void xfer_free(struct xfer *x)
{
    free(x->container);
    free(x->workdir);
    free(x->remote);
    free(x->local);
    free(x);
}

struct tar_writer {
    int fd, out_fd;
    const char *name;
    unsigned mode;
    long long size;
    int failed;
    char msg[512];
};

static void *tar_thread(void *arg)
{
    struct tar_writer *w = arg;
    if (sbx__dk_tar_one(w->fd, w->name, w->mode, w->size, w->out_fd, w->msg, sizeof(w->msg)) < 0)
        __atomic_store_n(&w->failed, 1, __ATOMIC_RELEASE);
    close(w->out_fd); /* the request's body ends */
    return NULL;
}

/* PUT the file (open on `fd`) as `name` under container directory `dir`. */
static int put_file(struct docker *d, const char *cid, const char *dir, const char *name, int fd,
                    const struct stat *s, sbx_error **err)
{
    _cleanup_free_ char *ec = esc(cid), *ed = esc(dir);
    _cleanup_free_ char *q =
        ec && ed ? sbx__printf("/containers/%s/archive?path=%s&noOverwriteDirNonDir=true", ec, ed)
                 : NULL;
    int sv[2];
    if (!q)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "socketpair");
    struct tar_writer w = {
        .fd = fd, .out_fd = sv[1], .name = name, .mode = s->st_mode, .size = (long long)s->st_size};
    pthread_t t;
    if (pthread_create(&t, NULL, tar_thread, &w) != 0) {
        close(sv[0]);
        close(sv[1]);
        return sbx__set_error(err, SBX_EIO, "cannot start a thread");
    }
    long st = 0;
    _cleanup_json_ json_t *resp = NULL;
    int rc = sbx__dk_request_fd(d->engine, "PUT", q, sv[0], &w.failed, -1, &st, &resp, NULL, err);
    close(sv[0]); /* a writer still writing stops */
    pthread_join(t, NULL);
    if ((rc == SBX_OK || rc == SBX_EIO) && w.failed) {
        /* The local side's reason, not the request's "stopped". */
        if (err) {
            sbx_error_free(*err);
            *err = NULL;
        }
        rc = sbx__set_error(err, SBX_EIO, "uploading to %s/%s: %s", dir, name, w.msg);
    } else if (rc == SBX_OK && st != 200)
        rc = archive_error(d, cid, st, resp, "uploading to", dir, err);
    return rc;
}

static void upload_work(sbx_op *op, void *data)
{
    struct xfer *x = data;
    sbx_error *e = NULL;
    int rc = SBX_OK;
    int fd = open(x->local, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat s;
    if (fd < 0)
        rc = sbx__set_errno(&e, errno == ENOENT ? SBX_ENOENT : SBX_EIO, errno, "opening %s",
                            x->local);
    else if (fstat(fd, &s) < 0 || !S_ISREG(s.st_mode))
        rc = sbx__set_error(&e, SBX_EINVAL, "%s is not a regular file", x->local);
    _cleanup_free_ char *target = NULL, *dir = NULL, *name = NULL;
    if (rc == SBX_OK) {
        struct dbox tmp = {.workdir = x->workdir};
        target = box_path(&tmp, x->remote);
        size_t l = target ? strlen(target) : 0;
        while (l > 1 && target[l - 1] == '/')
            target[--l] = 0;
        if (!target)
            rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    }
    unsigned long long mode = 0;
    char *link = NULL;
    int srt = rc == SBX_OK ? sbx__dk_stat_path(x->d, x->container, target, &mode, &link, NULL, &e) : rc;
    free(link);
    if (rc < 0) {
        /* the local file: said above */
    } else if (srt == SBX_OK && (mode & GO_MODE_DIR)) {
        /* Onto a directory: DIR/NAME, NAME the host file's (as `docker cp`). */
        const char *b = strrchr(x->local, '/');
        dir = strdup(target);
        name = strdup(b ? b + 1 : x->local);
    } else if (srt == SBX_OK || srt == SBX_ENOENT) {
        const char *slash = strrchr(target, '/');
        dir = strndup(target, slash == target ? 1 : (size_t)(slash - target));
        name = strdup(slash + 1);
        if (!name || !name[0])
            rc = sbx__set_error(&e, SBX_EINVAL, "upload target '%s' names no file", x->remote);
        /* Parents that are not there: from the deepest that is, the tar's path makes them. */
        while (rc == SBX_OK && dir && name && strcmp(dir, "/")) {
            link = NULL;
            int pr = sbx__dk_stat_path(x->d, x->container, dir, &mode, &link, NULL, &e);
            free(link);
            if (pr == SBX_OK)
                break;
            if (pr != SBX_ENOENT) {
                rc = pr;
                break;
            }
            slash = strrchr(dir, '/');
            char *up = strndup(dir, slash == dir ? 1 : (size_t)(slash - dir));
            char *nn = sbx__printf("%s/%s", slash + 1, name);
            free(dir);
            free(name);
            dir = up;
            name = nn;
        }
    } else {
        rc = srt;
    }
    if (rc == SBX_OK && (!dir || !name))
        rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    if (rc == SBX_OK)
        rc = put_file(x->d, x->container, dir, name, fd, &s, &e);
    if (fd >= 0)
        close(fd);
    xfer_free(x);
    sbx_op_complete(op, rc, rc < 0 ? e : NULL, NULL);
    if (rc >= 0)
        sbx_error_free(e);
}

struct get_thread {
    struct docker *d;
    const char *q;
    int out_fd;
    long st;
    json_t *resp;
    int rc;
    sbx_error *err;
};

static void *get_thread_fn(void *arg)
{
    struct get_thread *g = arg;
    g->rc = sbx__dk_request_fd(g->d->engine, "GET", g->q, -1, NULL, g->out_fd, &g->st, &g->resp,
                               NULL, &g->err);
    close(g->out_fd); /* the reader sees the end */
    return NULL;
}

static void download_work(sbx_op *op, void *data)
{
    struct xfer *x = data;
    sbx_error *e = NULL;
    int rc = SBX_OK;
    struct dbox tmp = {.workdir = x->workdir};
    char *path = box_path(&tmp, x->remote);
    if (!path)
        rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    /* A link is followed as the engine resolves it, in the container's root; a few hops. */
    for (int hop = 0; rc == SBX_OK; hop++) {
        unsigned long long mode = 0;
        char *link = NULL;
        rc = sbx__dk_stat_path(x->d, x->container, path, &mode, &link, NULL, &e);
        if (rc == SBX_ENOENT)
            rc = sbx__set_error(&e, SBX_ENOENT, "no such file in the box: %s", x->remote);
        else if (rc == SBX_OK && (mode & GO_MODE_DIR))
            rc = sbx__set_error(&e, SBX_EINVAL, "%s is a directory; download takes files",
                                x->remote);
        else if (rc == SBX_OK && (mode & GO_MODE_SYMLINK)) {
            if (!link || link[0] != '/' || hop >= MAX_LINK_HOPS)
                rc = sbx__set_error(&e, SBX_EINVAL, "%s is a link that leads nowhere in the box",
                                    x->remote);
            else {
                free(path);
                path = link;
                continue;
            }
        }
        free(link);
        break;
    }
    char *parent = rc == SBX_OK ? strdup(x->local) : NULL;
    if (rc == SBX_OK && parent && sbx__mkdir_p(dirname(parent), 0755) < 0)
        rc = sbx__set_errno(&e, SBX_EIO, errno, "making the directory of %s", x->local);
    free(parent);
    _cleanup_free_ char *ec = esc(x->container), *ep = path ? esc(path) : NULL;
    _cleanup_free_ char *q =
        ec && ep ? sbx__printf("/containers/%s/archive?path=%s", ec, ep) : NULL;
    if (rc == SBX_OK && !q)
        rc = sbx__set_error(&e, SBX_ENOMEM, "out of memory");
    int sv[2] = {-1, -1};
    if (rc == SBX_OK && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        rc = sbx__set_errno(&e, SBX_EIO, errno, "socketpair");
    if (rc == SBX_OK) {
        struct get_thread g = {.d = x->d, .q = q, .out_fd = sv[1]};
        pthread_t t;
        if (pthread_create(&t, NULL, get_thread_fn, &g) != 0) {
            close(sv[1]);
            rc = sbx__set_error(&e, SBX_EIO, "cannot start a thread");
        } else {
            char msg[600];
            int ur = sbx__dk_untar_one(sv[0], x->local, msg, sizeof(msg));
            close(sv[0]); /* a request still writing stops */
            sv[0] = -1;
            pthread_join(t, NULL);
            /* The request's error, unless it only stopped because the tar reader did. */
            bool reader_stopped = ur < 0 && g.rc == SBX_EIO;
            if (g.rc < 0 && !reader_stopped) {
                rc = sbx__fail(&e, g.err);
                g.err = NULL;
            } else if (g.rc == SBX_OK && g.st != 200)
                rc = archive_error(x->d, x->container, g.st, g.resp, "downloading", path, &e);
            else if (ur == -2)
                rc = sbx__set_error(&e, SBX_EINVAL, "%s is not a regular file", x->remote);
            else if (ur < 0)
                rc = sbx__set_error(&e, SBX_EIO, "downloading %s: %s", x->remote, msg);
            sbx_error_free(g.err);
            json_decref(g.resp);
        }
        if (sv[0] >= 0)
            close(sv[0]);
    }
    free(path);
    xfer_free(x);
    sbx_op_complete(op, rc, rc < 0 ? e : NULL, NULL);
    if (rc >= 0)
        sbx_error_free(e);
}

static void start_xfer(sbx_op *op, struct docker *d, struct dbox *b, const char *remote,
                       const char *local, sbx_op_work_fn fn)
{
    struct xfer *x = calloc(1, sizeof(*x));
    if (!x || !(x->container = strdup(b->container)) || !(x->remote = strdup(remote)) ||
        !(x->local = strdup(local)) || (b->workdir && !(x->workdir = strdup(b->workdir)))) {
        if (x)
            xfer_free(x);
        sbx_op_complete(op, SBX_ENOMEM, NULL, NULL);
        return;
    }
    x->d = d;
    if (sbx_op_run_blocking(op, fn, x) < 0) {
        xfer_free(x);
        sbx_op_complete(op, SBX_EIO, NULL, NULL);
    }
}

void sbx__dk_noagent_upload(sbx_op *op, struct docker *d, struct dbox *b, const char *local_path,
                            const char *remote_path)
{
    start_xfer(op, d, b, remote_path, local_path, upload_work);
}

void sbx__dk_noagent_download(sbx_op *op, struct docker *d, struct dbox *b, const char *remote_path,
                              const char *local_path)
{
    start_xfer(op, d, b, remote_path, local_path, download_work);
}
