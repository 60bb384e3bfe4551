/*
 * Running the apptainer CLI: the reference's `_run` (a child in its own
 * session, a timeout that kills its process group, the exit status or
 * -signo) and its daemonize mode for `instance start`, plus the env file
 * that keeps secrets off argv. Worker threads only: everything here blocks.
 */
#include "apptainer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Appends up to the cap; past it the bytes are dropped and `trunc` set. */
static void buf_add(struct ap_buf *b, const char *p, size_t n)
{
    if (b->len + n > AP_OUTPUT_MAX) {
        b->truncated = 1;
        n = AP_OUTPUT_MAX - b->len;
    }
    if (!n)
        return;
    char *q = realloc(b->data, b->len + n + 1);
    if (!q) {
        b->truncated = 1;
        return;
    }
    b->data = q;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void ap_cli_result_clear(struct ap_cli_result *r)
{
    free(r->out.data);
    free(r->err.data);
    memset(r, 0, sizeof(*r));
}

static void read_file_into(int fd, struct ap_buf *b)
{
    char chunk[8192];
    ssize_t n;
    lseek(fd, 0, SEEK_SET);
    while ((n = read(fd, chunk, sizeof(chunk))) > 0)
        buf_add(b, chunk, (size_t)n);
}

/* A file with no name in `dir` (O_TMPFILE, else a created-and-unlinked one). */
static int unnamed_file(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd;
    char p[4096];
    if ((size_t)snprintf(p, sizeof(p), "%s/.sbx-apptainer-XXXXXX", dir) >= sizeof(p))
        return -1;
    fd = mkostemp(p, O_CLOEXEC);
    if (fd >= 0)
        unlink(p);
    return fd;
}

int ap_cli_run(struct ap *a, const char *const *argv, const void *in, size_t in_len,
               double timeout_s, int daemonize, struct ap_cli_result *res, sbx_error **err)
{
    memset(res, 0, sizeof(*res));
    int inp[2] = {-1, -1}, outp[2] = {-1, -1}, errp[2] = {-1, -1};
    int rc = SBX_OK;
    /* The reference's semaphore: at most exec.concurrency CLI children at once. */
    while (sem_wait(&a->slots) < 0 && errno == EINTR)
        ;
    if (daemonize) {
        /*
         * `instance start` forks an instance that keeps the fds it inherited:
         * pipes would never reach end-of-file, so its output goes to unnamed
         * files and only the foreground process is waited for.
         */
        inp[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        outp[1] = unnamed_file(a->tmp_dir);
        errp[1] = unnamed_file(a->tmp_dir);
        if (inp[0] < 0 || outp[1] < 0 || errp[1] < 0)
            rc = SBX_EIO;
    } else if ((in ? pipe2(inp, O_CLOEXEC) : (inp[0] = open("/dev/null", O_RDONLY | O_CLOEXEC))) < 0 ||
               pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0) {
        rc = SBX_EIO;
    }
    if (rc < 0) {
        *err = sbx_error_new_errno(SBX_EIO, errno, "apptainer: cannot set up the CLI's streams");
        goto out;
    }
    pid_t pid = fork();
    if (pid < 0) {
        rc = SBX_EIO;
        *err = sbx_error_new_errno(SBX_EIO, errno, "apptainer: cannot fork for %s", argv[0]);
        goto out;
    }
    if (pid == 0) {
        /* Async-signal-safe calls only: this process may have other threads. */
        setsid();
        if (inp[0] >= 0)
            dup2(inp[0], 0);
        dup2(outp[1], 1);
        dup2(errp[1], 2);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(a->bin, (char *const *)argv, a->child_env);
        _exit(127);
    }
    if (inp[0] >= 0 && !daemonize)
        close(inp[0]), inp[0] = -1;
    if (!daemonize) {
        close(outp[1]), outp[1] = -1;
        close(errp[1]), errp[1] = -1;
    }
    double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
    size_t in_off = 0;
    int status = 0, done = 0;
    while (!done) {
        struct pollfd fds[3];
        int nf = 0;
        if (!daemonize) {
            if (outp[0] >= 0)
                fds[nf++] = (struct pollfd){.fd = outp[0], .events = POLLIN};
            if (errp[0] >= 0)
                fds[nf++] = (struct pollfd){.fd = errp[0], .events = POLLIN};
            if (inp[1] >= 0)
                fds[nf++] = (struct pollfd){.fd = inp[1], .events = POLLOUT};
        }
        int wait_ms = 50;
        if (deadline) {
            double left = deadline - now_s();
            if (left <= 0) {
                /* The reference: killpg(SIGKILL), then reap. */
                kill(-pid, SIGKILL);
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                    ;
                res->timed_out = 1;
                break;
            }
            if (left * 1000 < wait_ms)
                wait_ms = (int)(left * 1000) + 1;
        }
        if (nf == 0) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid)
                done = 1;
            else
                poll(NULL, 0, wait_ms);
            continue;
        }
        if (poll(fds, (nfds_t)nf, wait_ms) < 0 && errno != EINTR) {
            /* Cannot watch it any more: end it rather than guess its status. */
            kill(-pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            break;
        }
        for (int i = 0; i < nf; i++) {
            if (!fds[i].revents)
                continue;
            if (fds[i].fd == inp[1]) {
                ssize_t n = write(inp[1], (const char *)in + in_off, in_len - in_off);
                if (n > 0)
                    in_off += (size_t)n;
                if (n < 0 || in_off >= in_len)
                    close(inp[1]), inp[1] = -1;
                continue;
            }
            char chunk[16384];
            ssize_t n = read(fds[i].fd, chunk, sizeof(chunk));
            struct ap_buf *b = fds[i].fd == outp[0] ? &res->out : &res->err;
            if (n > 0) {
                buf_add(b, chunk, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                if (fds[i].fd == outp[0])
                    close(outp[0]), outp[0] = -1;
                else
                    close(errp[0]), errp[0] = -1;
            }
        }
        if (in_len == 0 && inp[1] >= 0)
            close(inp[1]), inp[1] = -1;
    }
    if (daemonize) {
        read_file_into(outp[1], &res->out);
        read_file_into(errp[1], &res->err);
    }
    if (!res->timed_out)
        res->code = WIFEXITED(status) ? WEXITSTATUS(status)
                    : WIFSIGNALED(status) ? -WTERMSIG(status)
                                          : AP_RUNTIME_RC;
out:
    for (int i = 0; i < 2; i++) {
        if (inp[i] >= 0)
            close(inp[i]);
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
    sem_post(&a->slots);
    if (!res->out.data)
        res->out.data = strdup("");
    if (!res->err.data)
        res->err.data = strdup("");
    return rc;
}

/* --- the env file -------------------------------------------------------------- */

static const char *const readonly_names[] = {"EUID", "GID", "HOME", "IFS", "OPTIND", "PWD", "UID"};

char *ap_quote(const char *v)
{
    size_t n = strlen(v);
    if (n && strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-") ==
                 n)
        return strdup(v);
    char *q = malloc(n * 5 + 3), *o = q;
    if (!q)
        return NULL;
    *o++ = '\'';
    for (; *v; v++) {
        if (*v == '\'') {
            memcpy(o, "'\"'\"'", 5);
            o += 5;
        } else {
            *o++ = *v;
        }
    }
    *o++ = '\'';
    *o = 0;
    return q;
}

static void quote_into(struct ap_buf *b, const char *v)
{
    char *q = ap_quote(v);
    if (!q) {
        b->truncated = 1;
        return;
    }
    buf_add(b, q, strlen(q));
    free(q);
}

/* Strict UTF-8: no overlongs, no surrogates (the reference's encode() refuses lone surrogates). */
static int valid_utf8(const unsigned char *s)
{
    while (*s) {
        unsigned c = *s;
        int n = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2
                           : (c & 0xf8) == 0xf0   ? 3
                                                  : -1;
        if (n < 0 || (n == 1 && c < 0xc2) || c > 0xf4)
            return 0;
        unsigned cp = n ? c & (0x3f >> n) : c;
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        s += n + 1;
    }
    return 1;
}

int ap_env_check(const char *key, const char *value, sbx_error **err)
{
    size_t n = strlen(key);
    if (!n || strspn(key, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != n ||
        (key[0] >= '0' && key[0] <= '9')) {
        *err = sbx_error_new(SBX_EINVAL, "invalid environment variable name: '%s'", key);
        return SBX_EINVAL;
    }
    for (size_t i = 0; i < sizeof(readonly_names) / sizeof(readonly_names[0]); i++)
        if (!strcmp(key, readonly_names[i])) {
            *err = sbx_error_new(SBX_EINVAL,
                                 "environment variable '%s' is read-only in Apptainer env files",
                                 key);
            return SBX_EINVAL;
        }
    if (!valid_utf8((const unsigned char *)value)) {
        *err = sbx_error_new(SBX_EINVAL,
                             "environment variable '%s' has a value that is not valid UTF-8", key);
        return SBX_EINVAL;
    }
    return SBX_OK;
}

int ap_env_file(struct ap *a, const char *dir, const char *const *kv, char **path,
                sbx_error **err)
{
    *path = NULL;
    if (!kv || !kv[0])
        return SBX_OK; /* the reference: an empty env gives no file and no flags */
    struct ap_buf b = {0};
    for (size_t i = 0; kv[i]; i++) {
        const char *eq = strchr(kv[i], '=');
        char key[512];
        size_t kl = eq ? (size_t)(eq - kv[i]) : strlen(kv[i]);
        if (kl >= sizeof(key)) {
            free(b.data);
            *err = sbx_error_new(SBX_EINVAL, "invalid environment variable name: too long");
            return SBX_EINVAL;
        }
        memcpy(key, kv[i], kl);
        key[kl] = 0;
        int rc = ap_env_check(key, eq ? eq + 1 : "", err);
        if (rc < 0) {
            free(b.data);
            return rc;
        }
        buf_add(&b, key, kl);
        buf_add(&b, "=", 1);
        quote_into(&b, eq ? eq + 1 : "");
        buf_add(&b, "\n", 1);
    }
    if (b.truncated) {
        free(b.data);
        *err = sbx_error_new(SBX_EINVAL, "apptainer: the environment is too large");
        return SBX_EINVAL;
    }
    /* In a 0700 directory of ours, created exclusively, 0600: never on argv, never in the box. */
    char p[4096];
    for (int attempt = 0; attempt < 16; attempt++) {
        unsigned long r = 0;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = (unsigned long)(now_s() * 1e6) ^ (unsigned long)attempt;
        snprintf(p, sizeof(p), "%s/.apptainer-env-%lx", dir, r);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0)
            break;
        fchmod(fd, 0600);
        ssize_t w = write(fd, b.data, b.len);
        close(fd);
        free(b.data);
        if (w != (ssize_t)b.len) {
            unlink(p);
            *err = sbx_error_new_errno(SBX_EIO, errno, "apptainer: cannot write the env file");
            return SBX_EIO;
        }
        if (!(*path = strdup(p))) {
            unlink(p);
            return SBX_ENOMEM;
        }
        (void)a;
        return SBX_OK;
    }
    free(b.data);
    *err = sbx_error_new_errno(SBX_EIO, errno, "apptainer: cannot create an env file in %s", dir);
    return SBX_EIO;
}
