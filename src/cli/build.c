/*
 * `sbx image build [-f Sbxfile] [-t NAME[:TAG]] [CONTEXT]` (docs/images.md,
 * "Commit and build"): runs a Sbxfile (src/image/sbxfile.h) on the public
 * C API alone: a box of the current image per RUN or COPY, committed after
 * the step (sbx_provider_image_commit), then stopped.
 *
 * The cache, as Docker's: each step's key is the sha256 of the previous
 * key (the first: FROM's image id), the instruction's text, and for COPY
 * the paths, modes and bytes of what it copies. A RUN or COPY whose key
 * names an image (sbx-build-cache:<key>) is not run: "CACHED". Config
 * steps (ENV, WORKDIR, USER, ENTRYPOINT, CMD) make no box: they go into
 * the next commit's changes and into every later RUN's environment.
 */
#include "cli/cli.h"
#include "image/sbxfile.h"

#include "core/inroot.h"

#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define CACHE_PREFIX "sbx-build-cache:"
#define COPY_MAX_FILES 100000

struct build {
    sbx_provider *p;
    const char *file; /* the Sbxfile's path, for messages */
    char *context;    /* the directory ctxfd is, for messages */
    int ctxfd;        /* the context, opened once (sbx__open_trusted) */
    char key[65];     /* the current step's cache key */
    char *parent;     /* the image the next box starts from */
    json_t *env;      /* ["K=V"]: the image's Env, ENV steps applied */
    char *workdir;    /* NULL: / */
    char *user;       /* NULL: the image's */
    json_t *pending;  /* config changes for the next commit */
    bool no_cache;    /* --no-cache: run every step (its result still fills the cache) */
};

static void hash_hex(struct sha256_ctx *s, char out[65])
{
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(s, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* 'x' with every ' as '\'' : one shell word. */
static char *sq(const char *s)
{
    size_t n = 3;
    for (const char *c = s; *c; c++)
        n += *c == '\'' ? 4 : 1;
    char *o = malloc(n), *w = o;
    if (!o)
        return NULL;
    *w++ = '\'';
    for (const char *c = s; *c; c++) {
        if (*c == '\'') {
            memcpy(w, "'\\''", 4);
            w += 4;
        } else {
            *w++ = *c;
        }
    }
    *w++ = '\'';
    *w = 0;
    return o;
}

static int fail_step(const struct build *b, const sbx_sbxfile_step *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_step(const struct build *b, const sbx_sbxfile_step *s, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cli_error("%s line %u: %s: %s", b->file, s->line, sbx__sbxfile_keyword(s->kind), msg);
    return CLI_EXIT_FAIL;
}

/* --- COPY's sources ------------------------------------------------------- */

/*
 * The build context belongs to whoever made it, who may be another user
 * racing this build: each source is opened once, by descriptor, beneath the
 * context's descriptor (a link may lead elsewhere inside the context, never
 * out of it), a directory's entries are opened from its descriptor without
 * following a link, and each file's bytes are read once, into the step's
 * spool (an unnamed temporary file only this process holds), while they are
 * hashed. The box gets its copy from the spool: what the key covers is what
 * the image holds, whatever the context's owner does meanwhile.
 */
struct copy_item {
    char *src;  /* the source, relative to the context, for messages */
    char *base; /* its name (the Sbxfile's word's last component), for `into_dir` */
    char *dest; /* where it goes in the box */
    bool dir;
    bool into_dir; /* a lone file to a DEST without '/': into DEST when it is a directory */
    mode_t mode;
    off_t off, size; /* a file's bytes in the spool */
};

struct copy_list {
    struct copy_item *v;
    size_t n;
    int spool; /* -1 until a file is copied */
    off_t end;
};

static void copy_list_free(struct copy_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].src);
        free(l->v[i].base);
        free(l->v[i].dest);
    }
    free(l->v);
    if (l->spool >= 0)
        close(l->spool);
}

/*
 * An unnamed file for copies in $TMPDIR (else /var/tmp), 0600: no name
 * anyone could open, and nothing left behind however the build ends; in
 * memory where that directory's filesystem has no O_TMPFILE.
 */
static int temp_fd(void)
{
    const char *dir = getenv("TMPDIR");
    int fd = open(dir && *dir ? dir : "/var/tmp", O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        fd = memfd_create("sbx-build-copy", MFD_CLOEXEC);
    return fd;
}

static bool push_item(struct copy_list *l, const char *src, const char *base, const char *dest,
                      bool dir, mode_t mode, struct sha256_ctx *sha)
{
    if (l->n >= COPY_MAX_FILES)
        return false;
    struct copy_item *nv = realloc(l->v, (l->n + 1) * sizeof(*nv));
    if (!nv)
        return false;
    l->v = nv;
    struct copy_item *it = &l->v[l->n];
    memset(it, 0, sizeof(*it));
    it->src = strdup(src);
    it->base = strdup(base);
    it->dest = strdup(dest);
    it->dir = dir;
    it->mode = mode & 07777;
    if (!it->src || !it->base || !it->dest) {
        free(it->src);
        free(it->base);
        free(it->dest);
        return false;
    }
    l->n++;
    /* The key covers where each item goes, its mode and (spool_file) its bytes. */
    char head[64];
    snprintf(head, sizeof(head), "\n%c %o ", dir ? 'D' : 'F', (unsigned)it->mode);
    sha256_update(sha, strlen(head), (const uint8_t *)head);
    sha256_update(sha, strlen(it->dest) + 1, (const uint8_t *)it->dest);
    return true;
}

/*
 * The st_size bytes of open file `fd` (the last item) into the spool, hashed
 * on the way. A file that grows meanwhile is copied as it was when stat'ed;
 * one that shrinks fails the step.
 */
static int spool_file(const struct build *b, const sbx_sbxfile_step *s, struct copy_list *l,
                      int fd, const struct stat *st, struct sha256_ctx *sha)
{
    struct copy_item *it = &l->v[l->n - 1];
    if (l->spool < 0 && (l->spool = temp_fd()) < 0)
        return fail_step(b, s, "cannot make a temporary file for the copy in %s: %s",
                         getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp", strerror(errno));
    it->off = l->end;
    it->size = st->st_size;
    char buf[65536];
    for (off_t left = st->st_size; left > 0;) {
        ssize_t k = read(fd, buf, left < (off_t)sizeof(buf) ? (size_t)left : sizeof(buf));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return fail_step(b, s, k < 0 ? "cannot read %s: %s" : "%s%s shrank while it was read",
                             it->src, k < 0 ? strerror(errno) : "");
        sha256_update(sha, (size_t)k, (const uint8_t *)buf);
        for (ssize_t done = 0; done < k;) {
            ssize_t w = pwrite(l->spool, buf + done, (size_t)(k - done), l->end);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return fail_step(b, s, "cannot keep a copy of %s: %s", it->src,
                                 w < 0 ? strerror(errno) : "short write");
            done += w;
            l->end += w;
        }
        left -= k;
    }
    return CLI_EXIT_OK;
}

static int cmp_names(const void *a, const void *c)
{
    return strcmp(*(char *const *)a, *(char *const *)c);
}

/*
 * A directory's contents, by descriptor (`dfd`, read and closed here),
 * sorted; a link or a special file is refused. Each entry is opened once,
 * from `dfd`, never following a link; what that descriptor is decides.
 */
static int walk_tree(const struct build *b, const sbx_sbxfile_step *s, int dfd, const char *shown,
                     const char *dest, struct copy_list *l, struct sha256_ctx *sha, int depth)
{
    if (depth > 64) {
        close(dfd);
        return fail_step(b, s, "%s is more than 64 directories deep", shown);
    }
    int lfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        int e = errno;
        if (lfd >= 0)
            close(lfd);
        close(dfd);
        return fail_step(b, s, "cannot list %s: %s", shown, strerror(e));
    }
    char **names = NULL;
    size_t n = 0;
    int rc = CLI_EXIT_OK;
    struct dirent *de;
    errno = 0;
    while (rc == CLI_EXIT_OK && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char **nn = n < COPY_MAX_FILES ? realloc(names, (n + 1) * sizeof(*nn)) : NULL;
        if (!nn || !(nn[n] = strdup(de->d_name))) {
            if (nn)
                names = nn;
            rc = fail_step(b, s, "too many files");
            break;
        }
        names = nn;
        n++;
    }
    if (rc == CLI_EXIT_OK && errno)
        rc = fail_step(b, s, "cannot list %s: %s", shown, strerror(errno));
    closedir(d);
    if (n)
        qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n && rc == CLI_EXIT_OK; i++) {
        _cleanup_free_ char *h = sbx__printf("%s/%s", shown, names[i]);
        _cleanup_free_ char *dd = sbx__printf("%s/%s", dest, names[i]);
        if (!h || !dd) {
            rc = CLI_EXIT_SBX;
            break;
        }
        /* O_NONBLOCK: a FIFO is opened (and refused) without waiting for a writer. */
        int fd = openat(dfd, names[i], O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            rc = e == ELOOP ? fail_step(b, s,
                                        "%s is a symbolic link: COPY copies regular files and "
                                        "directories only",
                                        h)
                            : fail_step(b, s, "cannot open %s: %s", h, strerror(e));
        } else if (S_ISDIR(st.st_mode)) {
            rc = push_item(l, h, names[i], dd, true, st.st_mode, sha)
                     ? walk_tree(b, s, fd, h, dd, l, sha, depth + 1)
                     : (close(fd), fail_step(b, s, "too many files"));
        } else if (S_ISREG(st.st_mode)) {
            rc = push_item(l, h, names[i], dd, false, st.st_mode, sha)
                     ? spool_file(b, s, l, fd, &st, sha)
                     : fail_step(b, s, "too many files");
            close(fd);
        } else {
            close(fd);
            rc = fail_step(b, s, "%s is a special file: COPY copies regular files and "
                                 "directories only",
                           h);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    close(dfd);
    return rc;
}

/* Joins `p` to the workdir unless absolute. */
static char *in_box(const struct build *b, const char *p)
{
    if (p[0] == '/')
        return strdup(p);
    return sbx__printf("%s/%s", b->workdir && *b->workdir ? b->workdir : "", p);
}

/* The last component of a COPY source ("a/b/" -> "b"; "." and "" -> "."). */
static char *last_name(const char *w)
{
    size_t len = strlen(w);
    while (len > 0 && w[len - 1] == '/')
        len--;
    size_t start = len;
    while (start > 0 && w[start - 1] != '/')
        start--;
    return len > start ? strndup(w + start, len - start) : strdup(".");
}

/* What COPY copies, each source confined to the context, spooled; hashed into `sha`. */
static int copy_plan(const struct build *b, const sbx_sbxfile_step *s, struct copy_list *l,
                     struct sha256_ctx *sha)
{
    const char *dst = s->words[s->nwords - 1];
    size_t dl = strlen(dst);
    bool to_dir = s->nwords > 2 || (dl && dst[dl - 1] == '/');
    _cleanup_free_ char *dbase = in_box(b, dst);
    if (!dbase)
        return CLI_EXIT_SBX;
    for (size_t i = 0; i + 1 < s->nwords; i++) {
        const char *w = s->words[i];
        const char *rel = w;
        while (*rel == '/')
            rel++; /* as Docker: a source is relative to the context, even "/x" */
        /*
         * Beneath the context by the kernel: a link inside it is followed
         * while it stays inside; one that leads out (absolute, or "..")
         * fails with EXDEV instead. One open: the descriptor is the source.
         */
        int fd = sbx__beneath_open(b->ctxfd, *rel ? rel : ".",
                                   O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            if (e == EXDEV)
                return fail_step(b, s,
                                 "%s leads outside the build context %s (through a symbolic "
                                 "link or '..'): COPY copies only what lies inside it",
                                 w, b->context);
            if (e == ENOENT || e == ENOTDIR)
                return fail_step(b, s, "%s: not found in the build context %s", w, b->context);
            return fail_step(b, s, "cannot open %s in the build context %s: %s", w, b->context,
                             strerror(e));
        }
        _cleanup_free_ char *base = last_name(w);
        if (!base) {
            close(fd);
            return CLI_EXIT_SBX;
        }
        if (S_ISDIR(st.st_mode)) {
            /* As Docker: a directory's contents go into DEST. */
            if (!push_item(l, w, base, dbase, true, st.st_mode, sha)) {
                close(fd);
                return CLI_EXIT_SBX;
            }
            int rc = walk_tree(b, s, fd, w, dbase, l, sha, 0);
            if (rc != CLI_EXIT_OK)
                return rc;
        } else if (S_ISREG(st.st_mode)) {
            _cleanup_free_ char *d = to_dir ? sbx__printf("%s/%s", dbase, base) : strdup(dbase);
            if (!d || !push_item(l, w, base, d, false, st.st_mode, sha)) {
                close(fd);
                return CLI_EXIT_SBX;
            }
            l->v[l->n - 1].into_dir = !to_dir;
            int rc = spool_file(b, s, l, fd, &st, sha);
            close(fd);
            if (rc != CLI_EXIT_OK)
                return rc;
        } else {
            close(fd);
            return fail_step(b, s, "%s is not a regular file or a directory", w);
        }
    }
    return CLI_EXIT_OK;
}

/* --- steps ----------------------------------------------------------------- */

static sbx_exec_result *box_exec(sbx_sandbox *sb, const char *cmd, const struct build *b,
                                 bool as_step, sbx_error **e)
{
    sbx_exec_opts *o = sbx_exec_opts_new();
    sbx_exec_result *r = NULL;
    if (!o)
        return NULL;
    sbx_exec_opts_set_timeout(o, -1); /* none: a build step takes what it takes */
    sbx_exec_opts_set_cwd(o, as_step && b->workdir ? b->workdir : "/");
    if (as_step && b->user)
        sbx_exec_opts_set_user(o, b->user);
    size_t i;
    json_t *v;
    json_array_foreach(b->env, i, v)
    {
        const char *kv = json_string_value(v);
        const char *eq = kv ? strchr(kv, '=') : NULL;
        if (!eq)
            continue;
        _cleanup_free_ char *k = strndup(kv, (size_t)(eq - kv));
        if (k)
            sbx_exec_opts_set_env(o, k, eq + 1);
    }
    if (as_step) {
        sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDOUT, STDOUT_FILENO);
        sbx_exec_opts_set_output_fd(o, SBX_STREAM_STDERR, STDERR_FILENO);
        sbx_exec_opts_set_keep_output(o, 0);
    }
    /* Interruptible: a signal cancels the command (and the build stops the box). */
    sbx_future *f = NULL;
    if (sbx_sandbox_exec_async(sb, cmd, o, &f, e) != SBX_OK || cli_wait(f, e) != SBX_OK ||
        sbx_future_take_exec_result(f, &r, e) != SBX_OK)
        r = NULL;
    sbx_future_free(f);
    sbx_exec_opts_free(o);
    return r;
}

/* Runs a command as root in the box, quietly; CLI_EXIT_OK when it exited 0. */
static int setup_cmd(const struct build *b, const sbx_sbxfile_step *s, sbx_sandbox *sb,
                     const char *cmd)
{
    sbx_error *e = NULL;
    sbx_exec_result *r = box_exec(sb, cmd, b, false, &e);
    if (!r) {
        int rc = fail_step(b, s, "%s", e ? sbx_error_message(e) : "exec failed");
        sbx_error_free(e);
        return rc;
    }
    int code = sbx_exec_result_return_code(r);
    const char *er = sbx_exec_result_stderr(r, NULL);
    int rc = code == 0 ? CLI_EXIT_OK : fail_step(b, s, "%s exited %d: %s", cmd, code, er ? er : "");
    sbx_exec_result_free(r);
    return rc;
}

static int do_run(const struct build *b, const sbx_sbxfile_step *s, sbx_sandbox *sb)
{
    _cleanup_free_ char *cmd = NULL;
    if (s->words) {
        size_t n = 1;
        for (size_t i = 0; i < s->nwords; i++) {
            _cleanup_free_ char *w = sq(s->words[i]);
            char *nc = w ? realloc(cmd, n + strlen(w) + 1) : NULL;
            if (!nc)
                return CLI_EXIT_SBX;
            if (n == 1)
                nc[0] = 0;
            cmd = nc;
            if (i)
                strcat(cmd, " ");
            strcat(cmd, w);
            n = strlen(cmd) + 1;
        }
    } else {
        cmd = strdup(s->args);
    }
    if (!cmd)
        return CLI_EXIT_SBX;
    if (b->workdir) {
        _cleanup_free_ char *q = sq(b->workdir);
        _cleanup_free_ char *mk = q ? sbx__printf("mkdir -p %s", q) : NULL;
        int rc = mk ? setup_cmd(b, s, sb, mk) : CLI_EXIT_SBX;
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    fflush(stdout);
    sbx_error *e = NULL;
    sbx_exec_result *r = box_exec(sb, cmd, b, true, &e);
    if (!r) {
        int rc = cli_signal_received()
                     ? CLI_EXIT_FAIL
                     : fail_step(b, s, "%s", e ? sbx_error_message(e) : "exec failed");
        sbx_error_free(e);
        return rc;
    }
    int code = sbx_exec_result_return_code(r);
    const char *et = sbx_exec_result_error_type(r);
    const char *er = sbx_exec_result_stderr(r, NULL);
    if (et && *et)
        cli_error("%s line %u: RUN: %s%s%s", b->file, s->line, et, er && *er ? ": " : "",
                  er ? er : "");
    sbx_exec_result_free(r);
    if (code != 0) {
        fail_step(b, s, "'%s' exited with status %d", s->args, code);
        return code > 0 && code < 256 ? code : CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

static int do_copy(const struct build *b, const sbx_sbxfile_step *s, sbx_sandbox *sb,
                   const struct copy_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct copy_item *it = &l->v[i];
        _cleanup_free_ char *dest = strdup(it->dest);
        if (!dest)
            return CLI_EXIT_SBX;
        if (it->into_dir) {
            /* As Docker: `COPY f /etc` puts f in /etc when /etc is a directory. */
            _cleanup_free_ char *qd = sq(dest);
            _cleanup_free_ char *t = qd ? sbx__printf("test -d %s", qd) : NULL;
            sbx_error *te = NULL;
            sbx_exec_result *r = t ? box_exec(sb, t, b, false, &te) : NULL;
            sbx_error_free(te);
            if (r && sbx_exec_result_return_code(r) == 0) {
                char *nd = sbx__printf("%s/%s", dest, it->base);
                free(dest);
                dest = nd;
            }
            sbx_exec_result_free(r);
            if (!dest)
                return CLI_EXIT_SBX;
        }
        _cleanup_free_ char *q = sq(dest);
        _cleanup_free_ char *parent = strdup(dest);
        char *slash = parent ? strrchr(parent, '/') : NULL;
        if (slash)
            *slash = 0;
        _cleanup_free_ char *qp = parent ? sq(*parent ? parent : "/") : NULL;
        if (!q || !qp)
            return CLI_EXIT_SBX;
        char mode[8];
        snprintf(mode, sizeof(mode), "%o", (unsigned)it->mode);
        _cleanup_free_ char *cmd = it->dir ? sbx__printf("mkdir -p %s && chmod %s %s", q, mode, q)
                                           : sbx__printf("mkdir -p %s", qp);
        int rc = cmd ? setup_cmd(b, s, sb, cmd) : CLI_EXIT_SBX;
        if (rc != CLI_EXIT_OK)
            return rc;
        if (it->dir)
            continue;
        /*
         * The upload reads a file of its own, filled from the spool: the
         * bytes hashed, not the context's (which its owner may have changed).
         */
        _cleanup_close_ int tf = temp_fd();
        loff_t from = it->off;
        for (off_t left = it->size; tf >= 0 && left > 0;) {
            ssize_t k = copy_file_range(l->spool, &from, tf, NULL, (size_t)left, 0);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                          errno == EOPNOTSUPP)) {
                /* Not between these two files (another filesystem): by hand. */
                char buf[65536];
                k = pread(l->spool, buf, left < (off_t)sizeof(buf) ? (size_t)left : sizeof(buf),
                          from);
                if (k > 0 && write(tf, buf, (size_t)k) != k)
                    k = -1;
                if (k > 0)
                    from += k;
            }
            if (k <= 0) {
                int e = k < 0 ? errno : EIO;
                close(tf);
                tf = -1;
                errno = e;
                break;
            }
            left -= k;
        }
        if (tf < 0)
            return fail_step(b, s, "cannot copy %s to a temporary file: %s", it->src,
                             strerror(errno));
        char local[64];
        snprintf(local, sizeof(local), "/proc/self/fd/%d", tf);
        sbx_error *e = NULL;
        if (sbx_sandbox_upload(sb, local, dest, &e) != SBX_OK) {
            rc = fail_step(b, s, "cannot copy %s to %s: %s", it->src, dest,
                           e ? sbx_error_message(e) : "?");
            sbx_error_free(e);
            return rc;
        }
        _cleanup_free_ char *ch = sbx__printf("chmod %s %s", mode, q);
        rc = ch ? setup_cmd(b, s, sb, ch) : CLI_EXIT_SBX;
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    return CLI_EXIT_OK;
}

/* Whether image `name` exists; its digest in *digest when asked. */
static bool image_exists(sbx_provider *p, const char *name, json_t **info)
{
    char *text = NULL;
    sbx_error *e = NULL;
    if (sbx_provider_image_inspect(p, name, &text, &e) != SBX_OK) {
        sbx_error_free(e);
        return false;
    }
    json_t *j = json_loads(text, 0, NULL);
    free(text);
    if (info)
        *info = j;
    else
        json_decref(j);
    return true;
}

/*
 * A box of b->parent, `s` done in it (RUN, COPY, or nothing for the final
 * config commit), committed as `name` with the pending changes, stopped.
 */
static int step_in_box(struct build *b, const sbx_sbxfile_step *s, const struct copy_list *l,
                       const char *name)
{
    sbx_spec *spec = sbx_spec_new();
    sbx_sandbox *sb = NULL;
    sbx_error *e = NULL;
    int rc = CLI_EXIT_OK;
    /* The box dies with this process, even by SIGKILL; the TTL is a second net. */
    if (!spec || sbx_spec_set_image(spec, b->parent) < 0 || sbx_spec_set_ttl(spec, 3600) < 0 ||
        cli_die_with_creator(spec, &e) < 0 || cli_box_start(b->p, spec, &sb, &e) < 0) {
        if (!cli_signal_received())
            rc = fail_step(b, s, "cannot start a box of %s: %s", b->parent,
                           e ? sbx_error_message(e) : "out of memory");
        else
            rc = CLI_EXIT_FAIL;
        sbx_error_free(e);
        e = NULL;
    }
    sbx_spec_free(spec);
    if (rc == CLI_EXIT_OK && s->kind == SBXF_RUN)
        rc = do_run(b, s, sb);
    else if (rc == CLI_EXIT_OK && s->kind == SBXF_COPY)
        rc = do_copy(b, s, sb, l);
    if (cli_signal_received())
        rc = CLI_EXIT_FAIL;
    if (rc == CLI_EXIT_OK) {
        _cleanup_json_ json_t *o = json_pack("{s:O}", "changes", b->pending);
        _cleanup_free_ char *ot = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (!ot ||
            sbx_provider_image_commit(b->p, sbx_sandbox_id(sb), name, ot, NULL, &e) != SBX_OK) {
            rc = fail_step(b, s, "commit: %s", e ? sbx_error_message(e) : "out of memory");
            sbx_error_free(e);
            e = NULL;
        }
    }
    /* No box is left behind, whatever happened. */
    if (sb) {
        if (sbx_sandbox_stop(sb, &e) != SBX_OK) {
            cli_error("cannot stop box %s: %s", sbx_sandbox_id(sb), e ? sbx_error_message(e) : "?");
            sbx_error_free(e);
            if (rc == CLI_EXIT_OK)
                rc = CLI_EXIT_FAIL;
        }
        sbx_sandbox_free(sb);
    }
    if (rc == CLI_EXIT_OK) {
        free(b->parent);
        b->parent = strdup(name);
        json_array_clear(b->pending);
        if (!b->parent)
            rc = CLI_EXIT_SBX;
    }
    return rc;
}

static void next_key(struct build *b, const char *text, const char *extra)
{
    struct sha256_ctx s;
    sha256_init(&s);
    sha256_update(&s, 65, (const uint8_t *)b->key);
    sha256_update(&s, strlen(text) + 1, (const uint8_t *)text);
    if (extra)
        sha256_update(&s, strlen(extra), (const uint8_t *)extra);
    hash_hex(&s, b->key);
}

/* ENV/WORKDIR/USER on the build's own state (what RUN sees before the commit). */
static void apply_config(struct build *b, const sbx_sbxfile_step *s)
{
    if (s->kind == SBXF_WORKDIR) {
        char *wd = s->args[0] == '/' ? strdup(s->args)
                                     : sbx__printf("%s/%s", b->workdir ? b->workdir : "", s->args);
        free(b->workdir);
        b->workdir = wd;
    } else if (s->kind == SBXF_USER) {
        free(b->user);
        b->user = strdup(s->args);
    } else if (s->kind == SBXF_ENV) {
        /* The commit parses it again (sbx__image_apply_change); the same rules here. */
        json_t *cfg = json_pack("{s:O}", "Env", b->env);
        sbx_error *e = NULL;
        if (cfg && sbx__image_apply_change(cfg, s->text, &e) == SBX_OK) {
            json_decref(b->env);
            b->env = json_incref(json_object_get(cfg, "Env"));
        }
        sbx_error_free(e);
        json_decref(cfg);
    }
}

static int run_build(struct build *b, const sbx_sbxfile *f)
{
    const sbx_sbxfile_step *from = &f->steps[0];
    json_t *info = NULL;
    if (!image_exists(b->p, from->args, &info))
        return fail_step(b, from, "no image %s (import it first: sbx image import %s SOURCE)",
                         from->args, from->args);
    const char *digest = json_string_value(json_object_get(info, "digest"));
    json_t *cfg = json_object_get(info, "config");
    if (!digest) {
        json_decref(info);
        return fail_step(b, from, "image %s is not an image of layers: it cannot be built on",
                         from->args);
    }
    json_t *env = json_object_get(cfg, "Env");
    b->env = json_is_array(env) ? json_deep_copy(env) : json_array();
    const char *wd = json_string_value(json_object_get(cfg, "WorkingDir"));
    const char *user = json_string_value(json_object_get(cfg, "User"));
    b->workdir = wd && *wd ? strdup(wd) : NULL;
    b->user = user && *user ? strdup(user) : NULL;
    b->parent = strdup(from->args);
    b->pending = json_array();
    memset(b->key, 0, sizeof(b->key));
    next_key(b, "sbx-build-v1", digest);
    json_decref(info);
    printf("Step 1/%zu : %s\n", f->n, from->text);
    for (size_t i = 1; i < f->n; i++) {
        const sbx_sbxfile_step *s = &f->steps[i];
        printf("Step %zu/%zu : %s\n", i + 1, f->n, s->text);
        fflush(stdout);
        if (s->kind != SBXF_RUN && s->kind != SBXF_COPY) {
            /* A config step: into the next commit (and the later RUNs' environment). */
            sbx_error *e = NULL;
            json_t *probe = json_object();
            int rc = probe ? sbx__image_apply_change(probe, s->text, &e) : SBX_ENOMEM;
            json_decref(probe);
            if (rc < 0) {
                int r = fail_step(b, s, "%s", e ? sbx_error_message(e) : "out of memory");
                sbx_error_free(e);
                return r;
            }
            next_key(b, s->text, NULL);
            apply_config(b, s);
            json_array_append_new(b->pending, json_string(s->text));
            continue;
        }
        struct copy_list l = {.spool = -1};
        char chex[65] = "";
        if (s->kind == SBXF_COPY) {
            struct sha256_ctx sha;
            sha256_init(&sha);
            int rc = copy_plan(b, s, &l, &sha);
            if (rc != CLI_EXIT_OK) {
                copy_list_free(&l);
                return rc;
            }
            hash_hex(&sha, chex);
        }
        next_key(b, s->text, chex);
        char name[128];
        snprintf(name, sizeof(name), CACHE_PREFIX "%.48s", b->key);
        if (!b->no_cache && image_exists(b->p, name, NULL)) {
            printf(" ---> CACHED\n");
            free(b->parent);
            b->parent = strdup(name);
            json_array_clear(b->pending);
            copy_list_free(&l);
            if (!b->parent)
                return CLI_EXIT_SBX;
            continue;
        }
        int rc = step_in_box(b, s, &l, name);
        copy_list_free(&l);
        if (rc != CLI_EXIT_OK)
            return rc;
        printf(" ---> %s\n", name + strlen(CACHE_PREFIX));
    }
    /* Config steps after the last RUN/COPY: one more commit, of an unchanged box. */
    if (json_array_size(b->pending)) {
        next_key(b, "sbx-build-config", NULL);
        char name[128];
        snprintf(name, sizeof(name), CACHE_PREFIX "%.48s", b->key);
        if (!b->no_cache && image_exists(b->p, name, NULL)) {
            printf(" ---> CACHED (config)\n");
            free(b->parent);
            b->parent = strdup(name);
        } else {
            int rc = step_in_box(b, &f->steps[f->n - 1], NULL, name);
            if (rc != CLI_EXIT_OK)
                return rc;
        }
    }
    return b->parent ? CLI_EXIT_OK : CLI_EXIT_SBX;
}

int cli_image_build(int argc, char **argv, sbx_provider *p)
{
    static const struct option longs[] = {
        {"file", required_argument, NULL, 'f'},
        {"tag", required_argument, NULL, 't'},
        {"no-cache", no_argument, NULL, 'N'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *file = NULL, *tag = NULL;
    bool no_cache = false;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+f:t:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'f':
            file = optarg;
            break;
        case 't':
            tag = optarg;
            break;
        case 'N':
            no_cache = true;
            break;
        case 'h':
            cli_help("image");
            return CLI_EXIT_OK;
        default:
            return cli_usage_error("image", "image build: unknown option");
        }
    }
    if (argc - optind > 1)
        return cli_usage_error("image", "image build takes at most one CONTEXT directory");
    const char *ctx = optind < argc ? argv[optind] : ".";
    struct build b = {.p = p, .no_cache = no_cache, .ctxfd = -1};
    /*
     * The context, opened once: every COPY source is looked up beneath this
     * descriptor. Its path may run through another user's directories (a
     * root build of a user's tree): a link one of them could have swapped
     * in is refused, never followed (sbx__open_trusted).
     */
    sbx_error *ce = NULL;
    b.ctxfd = sbx__open_trusted(ctx, true, "the build context", &ce);
    struct stat st;
    if (b.ctxfd < 0 || fstat(b.ctxfd, &st) < 0 || !S_ISDIR(st.st_mode)) {
        if (b.ctxfd < 0)
            cli_error("%s", ce ? sbx_error_message(ce) : "the build context: out of memory");
        else
            cli_error("the build context %s is not a directory", ctx);
        sbx_error_free(ce);
        if (b.ctxfd >= 0)
            close(b.ctxfd);
        return CLI_EXIT_USAGE;
    }
    char fdp[64], where[PATH_MAX];
    snprintf(fdp, sizeof(fdp), "/proc/self/fd/%d", b.ctxfd);
    ssize_t wl = readlink(fdp, where, sizeof(where) - 1);
    if (wl > 0)
        where[wl] = 0;
    b.context = strdup(wl > 0 ? where : ctx);
    _cleanup_free_ char *deffile = file ? NULL : sbx__printf("%s/Sbxfile", b.context);
    b.file = file ? file : deffile;
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    /* CONTEXT/Sbxfile is found as COPY finds its sources; -f FILE is the caller's own. */
    int oflags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    _cleanup_close_ int fd = !b.context || !b.file ? -1
                             : file               ? open(file, oflags)
                                                  : sbx__beneath_open(b.ctxfd, "Sbxfile", oflags);
    int rc = CLI_EXIT_OK;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
        st.st_size > SBX_SBXFILE_MAX_BYTES) {
        cli_error("cannot read the Sbxfile %s: %s", b.file ? b.file : "?",
                  fd < 0 ? (errno == EXDEV ? "a link out of the build context" : strerror(errno))
                         : "not a regular file of at most 1 MiB");
        rc = CLI_EXIT_USAGE;
    } else if ((text = malloc(SBX_SBXFILE_MAX_BYTES + 1)) == NULL) {
        rc = CLI_EXIT_SBX;
    } else {
        /* Read from the descriptor checked, at most the bound, whatever it grows to. */
        for (;;) {
            ssize_t k = read(fd, text + len, SBX_SBXFILE_MAX_BYTES + 1 - len);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                cli_error("cannot read the Sbxfile %s: %s", b.file, strerror(errno));
                rc = CLI_EXIT_USAGE;
            }
            if (k <= 0)
                break;
            len += (size_t)k;
            if (len > SBX_SBXFILE_MAX_BYTES) {
                cli_error("cannot read the Sbxfile %s: it grew past 1 MiB", b.file);
                rc = CLI_EXIT_USAGE;
                break;
            }
        }
        if (rc == CLI_EXIT_OK)
            text[len] = 0;
    }
    sbx_sbxfile *f = NULL;
    sbx_error *e = NULL;
    if (rc == CLI_EXIT_OK && sbx__sbxfile_parse(text, len, &f, &e) < 0) {
        cli_error("%s %s", b.file, e ? sbx_error_message(e) : "cannot be parsed");
        sbx_error_free(e);
        rc = CLI_EXIT_USAGE;
    }
    if (rc == CLI_EXIT_OK && cli_signals_install() < 0) {
        cli_error("cannot set up: %s", strerror(errno));
        rc = CLI_EXIT_SBX;
    }
    if (rc == CLI_EXIT_OK)
        rc = run_build(&b, f);
    /* Interrupted: the step's box was stopped, the steps before it stay cached. */
    if (cli_signal_received())
        rc = cli_interrupted("the step's box was stopped");
    if (rc == CLI_EXIT_OK && tag && sbx_provider_image_tag(p, b.parent, tag, &e) != SBX_OK) {
        cli_error("cannot name the image %s: %s", tag, e ? sbx_error_message(e) : "?");
        sbx_error_free(e);
        rc = CLI_EXIT_FAIL;
    }
    if (rc == CLI_EXIT_OK) {
        json_t *info = NULL;
        image_exists(p, b.parent, &info);
        printf("Successfully built %s\n", json_string_value(json_object_get(info, "digest")));
        if (tag)
            printf("Successfully tagged %s\n", tag);
        json_decref(info);
    }
    sbx__sbxfile_free(f);
    close(b.ctxfd);
    free(b.context);
    free(b.parent);
    free(b.workdir);
    free(b.user);
    json_decref(b.env);
    json_decref(b.pending);
    return rc;
}
