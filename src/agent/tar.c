/*
 * The agent's built-in transfer commands: a strict tar reader and writer
 * (ustar with pax and GNU long-name extensions; regular files, directories,
 * symlinks and hard links within the tree) and byte-level file helpers.
 *
 * They run in an exec's child (exec.c, SBX_EXEC_BUILTIN), after the switch
 * to the exec's user, with plain blocking I/O on stdin and stdout: the
 * exec's STDIN window and output backpressure bound the memory on both
 * sides, and a box needs neither a shell nor tar.
 *
 * Confinement. The target directory is resolved inside the box root
 * (src/core/inroot.c). Below it, every entry name is checked (no absolute
 * name, no ".." component) and every intermediate directory is opened with
 * O_NOFOLLOW|O_DIRECTORY one component at a time, so a link, whether in the
 * box already or made by an earlier entry of the same archive, is never
 * followed: a name that goes through one fails. Final components that exist
 * are unlinked and created anew (O_EXCL|O_NOFOLLOW), never opened through.
 * Hard links must name an entry inside the target the same way.
 */
#include "agent/tar.h"
#include "agent/agent.h"
#include "core/inroot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define TAR_BLOCK 512
#define TAR_NAME_MAX 4096       /* a whole entry name */
#define TAR_COMP_MAX 255        /* one component */
#define TAR_EXT_MAX (64u << 10) /* a pax or GNU long-name header's data */
#define TAR_DEPTH_MAX 256
#define TAR_IO (256u << 10)

static void setmsg(char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void setmsg(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

/* --- I/O ----------------------------------------------------------------- */

static int write_full(int fd, const void *buf, size_t n)
{
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        buf = (const char *)buf + w;
        n -= (size_t)w;
    }
    return 0;
}

/* --- names --------------------------------------------------------------- */

/*
 * Normalizes an archive name into `out`: "." and empty components dropped,
 * a trailing "/" dropped. Refuses an absolute name, a ".." component, an
 * over-long name or component. "" is the target directory itself.
 */
static int clean_name(const char *in, char *out, size_t outsz, char *msg, size_t ml)
{
    if (in[0] == '/') {
        setmsg(msg, ml, "refusing absolute name '%.200s' in the archive", in);
        return -1;
    }
    size_t o = 0;
    for (const char *p = in; *p;) {
        const char *s = strchr(p, '/');
        size_t n = s ? (size_t)(s - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            setmsg(msg, ml, "refusing name '%.200s' in the archive: it contains '..'", in);
            return -1;
        }
        if (n > TAR_COMP_MAX) {
            setmsg(msg, ml, "a name component in the archive is longer than %d bytes",
                   TAR_COMP_MAX);
            return -1;
        }
        if (n && !(n == 1 && p[0] == '.')) {
            if (o + n + 2 > outsz) {
                setmsg(msg, ml, "a name in the archive is longer than %zu bytes", outsz - 1);
                return -1;
            }
            if (o)
                out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
        if (*p == '/')
            p++;
    }
    out[o] = 0;
    return 0;
}

/*
 * Opens the directory holding `rel` below `dirfd`, one component at a time
 * without following links, creating missing ones (0755) when `create`.
 * `*base` points at the last component. Returns an O_PATH fd, or -1.
 */
static int open_parent(int dirfd, char *rel, const char **base, bool create, char *msg, size_t ml)
{
    int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (cur < 0) {
        setmsg(msg, ml, "cannot duplicate a descriptor: %s", strerror(errno));
        return -1;
    }
    char *p = rel;
    for (;;) {
        char *s = strchr(p, '/');
        if (!s)
            break;
        *s = 0;
        int next = openat(cur, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT && create) {
            if (mkdirat(cur, p, 0755) < 0 && errno != EEXIST) {
                setmsg(msg, ml, "cannot create directory '%s': %s", rel, strerror(errno));
                *s = '/';
                close(cur);
                return -1;
            }
            next = openat(cur, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        struct stat st;
        if (next >= 0 && (fstat(next, &st) < 0 || !S_ISDIR(st.st_mode))) {
            close(next);
            next = -1;
            errno = ENOTDIR;
        }
        if (next < 0) {
            int e = errno;
            setmsg(msg, ml, "'%s' is not a directory inside the target (%s)", rel,
                   e == ENOTDIR || e == ELOOP ? "a link or a file is in the way" : strerror(e));
            *s = '/';
            close(cur);
            return -1;
        }
        *s = '/';
        close(cur);
        cur = next;
        p = s + 1;
    }
    *base = p;
    return cur;
}

/* Removes what is at pfd/base unless it is a directory (-1: it is one, or it cannot be removed). */
static int clear_slot(int pfd, const char *base, const char *name, char *msg, size_t ml)
{
    struct stat st;
    if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0;
    if (S_ISDIR(st.st_mode)) {
        setmsg(msg, ml, "cannot replace directory '%s' with a non-directory", name);
        return -1;
    }
    if (unlinkat(pfd, base, 0) < 0) {
        setmsg(msg, ml, "cannot replace '%s': %s", name, strerror(errno));
        return -1;
    }
    return 0;
}

/* --- reading ------------------------------------------------------------- */

static int parse_octal(const uint8_t *f, size_t n, uint64_t *out)
{
    size_t i = 0;
    while (i < n && f[i] == ' ')
        i++;
    uint64_t v = 0;
    bool any = false;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
        any = true;
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != 0)
            return -1; /* base-256 or garbage: strict */
    *out = any ? v : 0;
    return 0;
}

struct entry {
    char name[TAR_NAME_MAX + 1];
    char link[TAR_NAME_MAX + 1];
    uint64_t size, mtime, uid, gid, mode;
    char type;
};

/* The overrides a pax 'x' or GNU 'L'/'K' header sets for the next entry. */
struct ext {
    char *path, *linkpath;
    bool has_size, has_mtime, has_uid, has_gid;
    uint64_t size, mtime, uid, gid;
};

static void ext_clear(struct ext *x)
{
    free(x->path);
    free(x->linkpath);
    memset(x, 0, sizeof(*x));
}

static int parse_dec(const char *s, size_t n, uint64_t *out, bool frac_ok)
{
    uint64_t v = 0;
    size_t i = 0;
    if (!n)
        return -1;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == 0)
        return -1;
    if (i < n) {
        if (!frac_ok || s[i] != '.')
            return -1;
        for (i++; i < n; i++)
            if (s[i] < '0' || s[i] > '9')
                return -1;
    }
    *out = v;
    return 0;
}

static char *dup_value(const char *v, size_t n)
{
    if (n > TAR_NAME_MAX || memchr(v, 0, n))
        return NULL;
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, v, n);
        s[n] = 0;
    }
    return s;
}

/* Parses pax records "LEN key=value\n" (strict: every length checked). */
static int parse_pax(const char *d, size_t n, struct ext *x, char *msg, size_t ml)
{
    size_t off = 0;
    while (off < n) {
        size_t len = 0, i = off;
        while (i < n && d[i] >= '0' && d[i] <= '9' && len < TAR_EXT_MAX)
            len = len * 10 + (size_t)(d[i++] - '0');
        if (i >= n || d[i] != ' ' || len <= i - off + 1 || len > n - off ||
            d[off + len - 1] != '\n')
            goto bad;
        const char *k = d + i + 1, *end = d + off + len - 1;
        const char *eq = memchr(k, '=', (size_t)(end - k));
        if (!eq)
            goto bad;
        size_t kl = (size_t)(eq - k), vl = (size_t)(end - eq - 1);
        const char *v = eq + 1;
#define KEY(s) (kl == sizeof(s) - 1 && memcmp(k, s, kl) == 0)
        if (KEY("path") || KEY("linkpath")) {
            char **dst = KEY("path") ? &x->path : &x->linkpath;
            free(*dst);
            if (!(*dst = dup_value(v, vl)))
                goto bad;
        } else if (KEY("size")) {
            if (parse_dec(v, vl, &x->size, false) < 0)
                goto bad;
            x->has_size = true;
        } else if (KEY("mtime")) {
            if (parse_dec(v, vl, &x->mtime, true) < 0)
                goto bad;
            x->has_mtime = true;
        } else if (KEY("uid")) {
            if (parse_dec(v, vl, &x->uid, false) < 0)
                goto bad;
            x->has_uid = true;
        } else if (KEY("gid")) {
            if (parse_dec(v, vl, &x->gid, false) < 0)
                goto bad;
            x->has_gid = true;
        }
#undef KEY
        off += len;
    }
    return 0;
bad:
    setmsg(msg, ml, "malformed pax header in the archive");
    return -1;
}

struct dirfix {
    char *name;
    uint64_t mode, mtime, uid, gid;
};

struct xstate {
    int in, dirfd;
    const struct tar_limits *lim;
    uint64_t entries, bytes;
    struct dirfix *dirs;
    size_t n_dirs, cap_dirs;
    uint8_t *buf;
    char *msg;
    size_t ml;
    /* Input read TAR_IO at a time: a 512-byte header is not a syscall of its own. */
    uint8_t *ibuf;
    size_t ilen, ioff;
};

/* read_full through the input buffer. */
static ssize_t rd(struct xstate *s, void *dst, size_t n)
{
    size_t got = 0;
    while (got < n) {
        if (s->ioff == s->ilen) {
            ssize_t r;
            do
                r = read(s->in, s->ibuf, TAR_IO);
            while (r < 0 && errno == EINTR);
            if (r < 0)
                return -1;
            s->ilen = (size_t)r;
            s->ioff = 0;
            if (r == 0)
                break;
        }
        size_t k = s->ilen - s->ioff < n - got ? s->ilen - s->ioff : n - got;
        memcpy((char *)dst + got, s->ibuf + s->ioff, k);
        s->ioff += k;
        got += k;
    }
    return (ssize_t)got;
}

/* Skips `n` bytes of the stream (padding included by the caller). */
static int skip_bytes(struct xstate *s, uint64_t n)
{
    while (n) {
        size_t want = n < TAR_IO ? (size_t)n : TAR_IO;
        ssize_t r = rd(s, s->buf, want);
        if (r != (ssize_t)want) {
            setmsg(s->msg, s->ml, "the archive ends in the middle of an entry");
            return -1;
        }
        n -= want;
    }
    return 0;
}

static uint64_t padded(uint64_t n)
{
    return (n + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
}

static void set_times(int fd, const char *base, uint64_t mtime, int flags)
{
    struct timespec ts[2] = {{(time_t)mtime, 0}, {(time_t)mtime, 0}};
    if (base)
        utimensat(fd, base, ts, flags);
    else
        futimens(fd, ts);
}

static int put_regular(struct xstate *s, int pfd, const char *base, const struct entry *e)
{
    if (clear_slot(pfd, base, e->name, s->msg, s->ml) < 0)
        return -1;
    int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        setmsg(s->msg, s->ml, "cannot create '%s': %s", e->name, strerror(errno));
        return -1;
    }
    uint64_t left = e->size;
    while (left) {
        size_t want = left < TAR_IO ? (size_t)left : TAR_IO;
        ssize_t r = rd(s, s->buf, want);
        if (r != (ssize_t)want) {
            setmsg(s->msg, s->ml, "the archive ends in the middle of '%s'", e->name);
            close(fd);
            return -1;
        }
        if (write_full(fd, s->buf, want) < 0) {
            setmsg(s->msg, s->ml, "cannot write '%s': %s", e->name, strerror(errno));
            close(fd);
            return -1;
        }
        left -= want;
    }
    int rc = 0;
    if (s->lim->preserve_owner && fchown(fd, (uid_t)e->uid, (gid_t)e->gid) < 0) {
        setmsg(s->msg, s->ml, "cannot set the owner of '%s': %s", e->name, strerror(errno));
        rc = -1;
    }
    if (!rc && fchmod(fd, (mode_t)(e->mode & 07777)) < 0) {
        setmsg(s->msg, s->ml, "cannot set the mode of '%s': %s", e->name, strerror(errno));
        rc = -1;
    }
    set_times(fd, NULL, e->mtime, 0);
    close(fd);
    if (rc == 0 && skip_bytes(s, padded(e->size) - e->size) < 0)
        rc = -1;
    return rc;
}

static int put_entry(struct xstate *s, struct entry *e)
{
    char rel[TAR_NAME_MAX + 1];
    memcpy(rel, e->name, sizeof(rel));
    if (e->type == '5' && !rel[0]) {
        /* The target directory itself: its mode and mtime, at the end. */
    } else if (!rel[0]) {
        setmsg(s->msg, s->ml, "the archive names the target directory as a non-directory");
        return -1;
    }
    const char *base = NULL;
    int pfd = -1;
    if (rel[0] && (pfd = open_parent(s->dirfd, rel, &base, true, s->msg, s->ml)) < 0)
        return -1;
    int rc = 0;
    switch (e->type) {
    case '0':
        rc = put_regular(s, pfd, base, e);
        break;
    case '5': {
        if (rel[0]) {
            struct stat st;
            bool exists = fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
            if (exists && !S_ISDIR(st.st_mode)) {
                if ((rc = clear_slot(pfd, base, e->name, s->msg, s->ml)) < 0)
                    break;
                exists = false;
            }
            /* Owner-only until the end, when its own mode is set (children come first). */
            if (!exists && mkdirat(pfd, base, 0700) < 0) {
                setmsg(s->msg, s->ml, "cannot create directory '%s': %s", e->name, strerror(errno));
                rc = -1;
                break;
            }
        }
        if (s->n_dirs == s->cap_dirs) {
            size_t nc = s->cap_dirs ? s->cap_dirs * 2 : 64;
            struct dirfix *nd = realloc(s->dirs, nc * sizeof(*nd));
            if (!nd) {
                setmsg(s->msg, s->ml, "out of memory");
                rc = -1;
                break;
            }
            s->dirs = nd;
            s->cap_dirs = nc;
        }
        struct dirfix *d = &s->dirs[s->n_dirs];
        if (!(d->name = strdup(e->name))) {
            setmsg(s->msg, s->ml, "out of memory");
            rc = -1;
            break;
        }
        d->mode = e->mode;
        d->mtime = e->mtime;
        d->uid = e->uid;
        d->gid = e->gid;
        s->n_dirs++;
        break;
    }
    case '2':
        if ((rc = clear_slot(pfd, base, e->name, s->msg, s->ml)) < 0)
            break;
        if (symlinkat(e->link, pfd, base) < 0) {
            setmsg(s->msg, s->ml, "cannot create link '%s': %s", e->name, strerror(errno));
            rc = -1;
            break;
        }
        if (s->lim->preserve_owner &&
            fchownat(pfd, base, (uid_t)e->uid, (gid_t)e->gid, AT_SYMLINK_NOFOLLOW) < 0) {
            setmsg(s->msg, s->ml, "cannot set the owner of '%s': %s", e->name, strerror(errno));
            rc = -1;
            break;
        }
        set_times(pfd, base, e->mtime, AT_SYMLINK_NOFOLLOW);
        break;
    case '1': {
        char lrel[TAR_NAME_MAX + 1];
        const char *lbase = NULL;
        if (clean_name(e->link, lrel, sizeof(lrel), s->msg, s->ml) < 0) {
            rc = -1;
            break;
        }
        if (!lrel[0]) {
            setmsg(s->msg, s->ml, "hard link '%s' names the target directory", e->name);
            rc = -1;
            break;
        }
        int lfd = open_parent(s->dirfd, lrel, &lbase, false, s->msg, s->ml);
        if (lfd < 0) {
            rc = -1;
            break;
        }
        struct stat st;
        if (fstatat(lfd, lbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode)) {
            setmsg(s->msg, s->ml, "hard link '%s' names '%s', which is not a file in the target",
                   e->name, e->link);
            close(lfd);
            rc = -1;
            break;
        }
        if ((rc = clear_slot(pfd, base, e->name, s->msg, s->ml)) == 0 &&
            linkat(lfd, lbase, pfd, base, 0) < 0) {
            setmsg(s->msg, s->ml, "cannot link '%s' to '%s': %s", e->name, e->link,
                   strerror(errno));
            rc = -1;
        }
        close(lfd);
        break;
    }
    }
    if (pfd >= 0)
        close(pfd);
    return rc;
}

/* Directories get their mode, owner and mtime last, deepest first. */
static int fix_dirs(struct xstate *s)
{
    int rc = 0;
    for (size_t i = s->n_dirs; i-- > 0;) {
        struct dirfix *d = &s->dirs[i];
        int fd;
        if (!d->name[0]) {
            fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        } else {
            const char *base = NULL;
            int pfd = open_parent(s->dirfd, d->name, &base, false, s->msg, s->ml);
            if (pfd < 0)
                return -1;
            fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            close(pfd);
        }
        if (fd < 0) {
            setmsg(s->msg, s->ml, "cannot open directory '%s': %s", d->name, strerror(errno));
            return -1;
        }
        if (s->lim->preserve_owner && fchown(fd, (uid_t)d->uid, (gid_t)d->gid) < 0 && !rc) {
            setmsg(s->msg, s->ml, "cannot set the owner of '%s': %s", d->name, strerror(errno));
            rc = -1;
        }
        if (fchmod(fd, (mode_t)(d->mode & 07777)) < 0 && !rc) {
            setmsg(s->msg, s->ml, "cannot set the mode of '%s': %s", d->name, strerror(errno));
            rc = -1;
        }
        set_times(fd, NULL, d->mtime, 0);
        close(fd);
    }
    return rc;
}

static int read_ext_data(struct xstate *s, uint64_t size, char **out)
{
    if (size > TAR_EXT_MAX) {
        setmsg(s->msg, s->ml, "an extended header of %" PRIu64 " bytes is larger than %u", size,
               TAR_EXT_MAX);
        return -1;
    }
    char *d = malloc((size_t)padded(size) + 1);
    if (!d) {
        setmsg(s->msg, s->ml, "out of memory");
        return -1;
    }
    if (rd(s, d, (size_t)padded(size)) != (ssize_t)padded(size)) {
        free(d);
        setmsg(s->msg, s->ml, "the archive ends in the middle of an extended header");
        return -1;
    }
    d[size] = 0;
    *out = d;
    return 0;
}

int tar_extract_fd(int in, int dirfd, const struct tar_limits *lim, char *msg, size_t ml)
{
    struct xstate s = {.in = in, .dirfd = dirfd, .lim = lim, .msg = msg, .ml = ml};
    struct ext x = {0};
    struct entry *e = malloc(sizeof(*e));
    uint8_t h[TAR_BLOCK];
    int rc = -1, zeros = 0;
    if (!e || !(s.buf = malloc(TAR_IO)) || !(s.ibuf = malloc(TAR_IO))) {
        setmsg(msg, ml, "out of memory");
        goto out;
    }
    for (;;) {
        ssize_t r = rd(&s, h, sizeof(h));
        if (r == 0 && zeros == 0 && s.entries == 0) {
            setmsg(msg, ml, "the archive is empty");
            goto out;
        }
        if (r != (ssize_t)sizeof(h)) {
            if (r == 0 && zeros == 1)
                break; /* one end block then EOF: accepted, as GNU tar does */
            setmsg(msg, ml, r < 0 ? "cannot read the archive: %s" : "the archive is truncated%s",
                   r < 0 ? strerror(errno) : "");
            goto out;
        }
        bool allzero = true;
        for (size_t i = 0; i < sizeof(h) && allzero; i++)
            allzero = h[i] == 0;
        if (allzero) {
            if (++zeros == 2)
                break;
            continue;
        }
        if (zeros) {
            setmsg(msg, ml, "the archive has data after an end block");
            goto out;
        }
        uint64_t sum = 0, want;
        for (size_t i = 0; i < sizeof(h); i++)
            sum += (i >= 148 && i < 156) ? ' ' : h[i];
        if (parse_octal(h + 148, 8, &want) < 0 || want != sum) {
            setmsg(msg, ml, "not a tar archive (a header's checksum is wrong)");
            goto out;
        }
        if (memcmp(h + 257,
                   "ustar\0"
                   "00",
                   8) != 0 &&
            memcmp(h + 257, "ustar  \0", 8) != 0) {
            setmsg(msg, ml, "not a ustar/pax archive (unknown header magic)");
            goto out;
        }
        memset(e, 0, sizeof(*e));
        if (parse_octal(h + 100, 8, &e->mode) < 0 || parse_octal(h + 108, 8, &e->uid) < 0 ||
            parse_octal(h + 116, 8, &e->gid) < 0 || parse_octal(h + 124, 12, &e->size) < 0 ||
            parse_octal(h + 136, 12, &e->mtime) < 0) {
            setmsg(msg, ml, "malformed numeric field in a tar header");
            goto out;
        }
        e->type = h[156] ? (char)h[156] : '0';
        if (x.has_size)
            e->size = x.size;
        if (e->size > ((uint64_t)1 << 50)) {
            setmsg(msg, ml, "an entry of %" PRIu64 " bytes is too large", e->size);
            goto out;
        }
        if (e->type == 'x' || e->type == 'g' || e->type == 'L' || e->type == 'K') {
            char *d = NULL;
            if (read_ext_data(&s, e->size, &d) < 0)
                goto out;
            int prc = 0;
            if (e->type == 'x') {
                prc = parse_pax(d, (size_t)e->size, &x, msg, ml);
            } else if (e->type == 'L' || e->type == 'K') {
                char **dst = e->type == 'L' ? &x.path : &x.linkpath;
                free(*dst);
                size_t n = strnlen(d, (size_t)e->size);
                if (!(*dst = dup_value(d, n))) {
                    setmsg(msg, ml, "a long name in the archive is longer than %d bytes",
                           TAR_NAME_MAX);
                    prc = -1;
                }
            } /* 'g': global pax headers carry nothing we keep */
            free(d);
            if (prc < 0)
                goto out;
            continue;
        }
        if (++s.entries > lim->max_entries) {
            setmsg(msg, ml, "the archive has more than %" PRIu64 " entries (the limit)",
                   lim->max_entries);
            goto out;
        }
        char raw[TAR_NAME_MAX + 1];
        if (x.path) {
            snprintf(raw, sizeof(raw), "%s", x.path);
        } else {
            size_t pl = strnlen((const char *)h + 345, 155), nl = strnlen((const char *)h, 100);
            if (pl)
                snprintf(raw, sizeof(raw), "%.*s/%.*s", (int)pl, (const char *)h + 345, (int)nl,
                         (const char *)h);
            else
                snprintf(raw, sizeof(raw), "%.*s", (int)nl, (const char *)h);
        }
        if (x.linkpath)
            snprintf(e->link, sizeof(e->link), "%s", x.linkpath);
        else
            snprintf(e->link, sizeof(e->link), "%.*s", (int)strnlen((const char *)h + 157, 100),
                     (const char *)h + 157);
        if (x.has_mtime)
            e->mtime = x.mtime;
        if (x.has_uid)
            e->uid = x.uid;
        if (x.has_gid)
            e->gid = x.gid;
        ext_clear(&x);
        if (clean_name(raw, e->name, sizeof(e->name), msg, ml) < 0)
            goto out;
        if (e->type == '7')
            e->type = '0'; /* contiguous file: a regular file */
        if (e->type != '0' && e->type != '5' && e->type != '2' && e->type != '1') {
            setmsg(msg, ml,
                   "entry '%.200s' has an unsupported type '%c' (only files, "
                   "directories, symlinks and hard links are transferred)",
                   e->name, e->type);
            goto out;
        }
        if (e->type != '0' && e->size) {
            if (skip_bytes(&s, padded(e->size)) < 0)
                goto out;
            e->size = 0;
        }
        if (e->type == '0') {
            if (e->size > lim->max_bytes - s.bytes || s.bytes > lim->max_bytes) {
                setmsg(msg, ml,
                       "the archive holds more than %" PRIu64 " bytes of files (the limit)",
                       lim->max_bytes);
                goto out;
            }
            s.bytes += e->size;
        }
        if ((e->type == '2' || e->type == '1') && !e->link[0]) {
            setmsg(msg, ml, "link '%.200s' has an empty target", e->name);
            goto out;
        }
        if (put_entry(&s, e) < 0)
            goto out;
    }
    rc = fix_dirs(&s);
out:
    ext_clear(&x);
    for (size_t i = 0; i < s.n_dirs; i++)
        free(s.dirs[i].name);
    free(s.dirs);
    free(s.buf);
    free(s.ibuf);
    free(e);
    return rc;
}

/* --- writing ------------------------------------------------------------- */

struct ino_seen {
    dev_t dev;
    ino_t ino;
    char *name;
};

struct wstate {
    int out;
    char *msg;
    size_t ml;
    int err; /* a non-fatal problem seen (a file that shrank, a skipped special file) */
    struct ino_seen *seen;
    size_t n_seen, cap_seen;
    uint8_t *buf;
    /* Output is gathered into TAR_IO-sized writes: one exec STDOUT frame each, not three per file.
     */
    uint8_t *obuf;
    size_t olen;
};

static int wflush(struct wstate *w)
{
    if (w->olen && write_full(w->out, w->obuf, w->olen) < 0)
        return -1;
    w->olen = 0;
    return 0;
}

static int wput(struct wstate *w, const void *p, size_t n)
{
    while (n) {
        size_t k = TAR_IO - w->olen < n ? TAR_IO - w->olen : n;
        memcpy(w->obuf + w->olen, p, k);
        w->olen += k;
        p = (const char *)p + k;
        n -= k;
        if (w->olen == TAR_IO && wflush(w) < 0)
            return -1;
    }
    return 0;
}

static void put_octal(uint8_t *f, size_t n, uint64_t v)
{
    /* n-1 digits then NUL. */
    f[n - 1] = 0;
    for (size_t i = n - 1; i-- > 0;) {
        f[i] = (uint8_t)('0' + (v & 7));
        v >>= 3;
    }
}

static size_t pax_rec(char *out, size_t cap, const char *k, const char *v)
{
    size_t body = strlen(k) + strlen(v) + 3; /* ' ' '=' '\n' */
    size_t len = body + 1;
    for (;;) {
        char tmp[24];
        size_t dl = (size_t)snprintf(tmp, sizeof(tmp), "%zu", len);
        if (dl + body == len)
            break;
        len = dl + body;
    }
    if (len > cap)
        return 0;
    snprintf(out, cap, "%zu %s=%s\n", len, k, v);
    return len;
}

static int emit_block(struct wstate *w, const uint8_t *h)
{
    if (wput(w, h, TAR_BLOCK) < 0) {
        setmsg(w->msg, w->ml, "cannot write the archive: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static void finish_header(uint8_t *h)
{
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    memset(h + 148, ' ', 8);
    uint64_t sum = 0;
    for (size_t i = 0; i < TAR_BLOCK; i++)
        sum += h[i];
    put_octal(h + 148, 7, sum);
    h[155] = ' ';
}

static int emit_header(struct wstate *w, const char *name, char type, const struct stat *st,
                       uint64_t size, const char *link)
{
    uint8_t h[TAR_BLOCK];
    const uint64_t max11 = ((uint64_t)1 << 33) - 1, max7 = ((uint64_t)1 << 21) - 1;
    uint64_t mtime = st->st_mtim.tv_sec < 0 ? 0 : (uint64_t)st->st_mtim.tv_sec;
    bool long_name = strlen(name) > 100, long_link = link && strlen(link) > 100;
    bool big = size > max11 || mtime > max11 || st->st_uid > max7 || st->st_gid > max7;
    if (long_name || long_link || big) {
        char rec[2 * TAR_NAME_MAX + 256], num[32];
        size_t n = 0;
        if (long_name)
            n += pax_rec(rec + n, sizeof(rec) - n, "path", name);
        if (long_link)
            n += pax_rec(rec + n, sizeof(rec) - n, "linkpath", link);
        if (size > max11) {
            snprintf(num, sizeof(num), "%" PRIu64, size);
            n += pax_rec(rec + n, sizeof(rec) - n, "size", num);
        }
        if (mtime > max11) {
            snprintf(num, sizeof(num), "%" PRIu64, mtime);
            n += pax_rec(rec + n, sizeof(rec) - n, "mtime", num);
        }
        if (st->st_uid > max7) {
            snprintf(num, sizeof(num), "%u", (unsigned)st->st_uid);
            n += pax_rec(rec + n, sizeof(rec) - n, "uid", num);
        }
        if (st->st_gid > max7) {
            snprintf(num, sizeof(num), "%u", (unsigned)st->st_gid);
            n += pax_rec(rec + n, sizeof(rec) - n, "gid", num);
        }
        memset(h, 0, sizeof(h));
        snprintf((char *)h, 100, "PaxHeaders/%.80s", name);
        put_octal(h + 100, 8, 0644);
        put_octal(h + 108, 8, 0);
        put_octal(h + 116, 8, 0);
        put_octal(h + 124, 12, n);
        put_octal(h + 136, 12, mtime > max11 ? max11 : mtime);
        h[156] = 'x';
        finish_header(h);
        if (emit_block(w, h) < 0)
            return -1;
        for (size_t off = 0; off < n; off += TAR_BLOCK) {
            uint8_t blk[TAR_BLOCK] = {0};
            memcpy(blk, rec + off, n - off < TAR_BLOCK ? n - off : TAR_BLOCK);
            if (emit_block(w, blk) < 0)
                return -1;
        }
    }
    memset(h, 0, sizeof(h));
    memcpy(h, name, long_name ? 100 : strlen(name));
    put_octal(h + 100, 8, st->st_mode & 07777);
    put_octal(h + 108, 8, st->st_uid > max7 ? max7 : st->st_uid);
    put_octal(h + 116, 8, st->st_gid > max7 ? max7 : st->st_gid);
    put_octal(h + 124, 12, size > max11 ? 0 : size);
    put_octal(h + 136, 12, mtime > max11 ? max11 : mtime);
    h[156] = (uint8_t)type;
    if (link)
        memcpy(h + 157, link, long_link ? 100 : strlen(link));
    finish_header(h);
    return emit_block(w, h);
}

static int emit_file(struct wstate *w, int dfd, const char *base, const char *name,
                     const struct stat *lst)
{
    if (lst->st_nlink > 1) {
        for (size_t i = 0; i < w->n_seen; i++)
            if (w->seen[i].dev == lst->st_dev && w->seen[i].ino == lst->st_ino)
                return emit_header(w, name, '1', lst, 0, w->seen[i].name);
    }
    int fd = openat(dfd, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != lst->st_ino) {
        /* Replaced between the listing and the open: skipped, and said so. */
        fprintf(stderr, "sbx-agent: skipped '%s': it changed while it was read\n", name);
        w->err = 1;
        if (fd >= 0)
            close(fd);
        return 0;
    }
    if (st.st_nlink > 1 && w->n_seen < 1000000) {
        if (w->n_seen == w->cap_seen) {
            size_t nc = w->cap_seen ? w->cap_seen * 2 : 64;
            struct ino_seen *ns = realloc(w->seen, nc * sizeof(*ns));
            if (ns) {
                w->seen = ns;
                w->cap_seen = nc;
            }
        }
        if (w->n_seen < w->cap_seen && (w->seen[w->n_seen].name = strdup(name))) {
            w->seen[w->n_seen].dev = st.st_dev;
            w->seen[w->n_seen].ino = st.st_ino;
            w->n_seen++;
        }
    }
    uint64_t size = (uint64_t)st.st_size, left = size;
    if (emit_header(w, name, '0', &st, size, NULL) < 0) {
        close(fd);
        return -1;
    }
    bool shrank = false;
    while (left) {
        size_t want = left < TAR_IO ? (size_t)left : TAR_IO;
        ssize_t r = shrank ? 0 : read(fd, w->buf, want);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            /* Shrank while read: zeros keep the archive well-formed; the exit says so. */
            if (!shrank)
                fprintf(stderr, "sbx-agent: '%s' shrank while it was read\n", name);
            shrank = true;
            w->err = 1;
            memset(w->buf, 0, want);
            r = (ssize_t)want;
        }
        if (wput(w, w->buf, (size_t)r) < 0) {
            setmsg(w->msg, w->ml, "cannot write the archive: %s", strerror(errno));
            close(fd);
            return -1;
        }
        left -= (uint64_t)r;
    }
    close(fd);
    size_t pad = (size_t)(padded(size) - size);
    if (pad) {
        uint8_t z[TAR_BLOCK] = {0};
        if (wput(w, z, pad) < 0) {
            setmsg(w->msg, w->ml, "cannot write the archive: %s", strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int walk(struct wstate *w, int dfd, const char *prefix, int depth)
{
    if (depth > TAR_DEPTH_MAX) {
        setmsg(w->msg, w->ml, "'%s' is nested deeper than %d directories", prefix, TAR_DEPTH_MAX);
        return -1;
    }
    int lfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
    DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
    if (!d) {
        if (lfd >= 0)
            close(lfd);
        setmsg(w->msg, w->ml, "cannot list '%s': %s", prefix[0] ? prefix : ".", strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (errno = 0, de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char name[TAR_NAME_MAX + 2];
        int n = snprintf(name, sizeof(name), "%s%s", prefix, de->d_name);
        if (n < 0 || (size_t)n >= TAR_NAME_MAX) {
            setmsg(w->msg, w->ml, "a name under '%s' is longer than %d bytes", prefix,
                   TAR_NAME_MAX);
            rc = -1;
            break;
        }
        struct stat st;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
            continue; /* removed meanwhile */
        if (S_ISREG(st.st_mode)) {
            rc = emit_file(w, dfd, de->d_name, name, &st);
        } else if (S_ISDIR(st.st_mode)) {
            int cfd = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (cfd < 0) {
                setmsg(w->msg, w->ml, "cannot open directory '%s': %s", name, strerror(errno));
                rc = -1;
                break;
            }
            name[n] = '/';
            name[n + 1] = 0;
            rc = emit_header(w, name, '5', &st, 0, NULL);
            if (rc == 0)
                rc = walk(w, cfd, name, depth + 1);
            close(cfd);
        } else if (S_ISLNK(st.st_mode)) {
            char target[TAR_NAME_MAX + 1];
            ssize_t tl = readlinkat(dfd, de->d_name, target, sizeof(target));
            if (tl < 0 || (size_t)tl >= sizeof(target)) {
                fprintf(stderr, "sbx-agent: skipped link '%s': cannot read it\n", name);
                w->err = 1;
                continue;
            }
            target[tl] = 0;
            rc = emit_header(w, name, '2', &st, 0, target);
        } else {
            fprintf(stderr, "sbx-agent: skipped '%s': not a file, directory or link\n", name);
            w->err = 1;
        }
    }
    if (rc == 0 && errno) {
        setmsg(w->msg, w->ml, "cannot list '%s': %s", prefix, strerror(errno));
        rc = -1;
    }
    closedir(d);
    return rc;
}

int tar_create_fd(int out, int dirfd, char *msg, size_t ml)
{
    struct wstate w = {.out = out, .msg = msg, .ml = ml};
    struct stat st;
    int rc = -1;
    if (!(w.buf = malloc(TAR_IO)) || !(w.obuf = malloc(TAR_IO))) {
        free(w.buf);
        setmsg(msg, ml, "out of memory");
        return -1;
    }
    if (fstat(dirfd, &st) < 0 || !S_ISDIR(st.st_mode)) {
        setmsg(msg, ml, "not a directory");
        goto out;
    }
    if (emit_header(&w, "./", '5', &st, 0, NULL) < 0 || walk(&w, dirfd, "", 0) < 0)
        goto out;
    uint8_t z[TAR_BLOCK] = {0};
    if (emit_block(&w, z) < 0 || emit_block(&w, z) < 0)
        goto out;
    if (wflush(&w) < 0) {
        setmsg(msg, ml, "cannot write the archive: %s", strerror(errno));
        goto out;
    }
    rc = w.err ? 1 : 0;
    if (rc)
        setmsg(msg, ml, "some entries were skipped or changed while they were read");
out:
    for (size_t i = 0; i < w.n_seen; i++)
        free(w.seen[i].name);
    free(w.seen);
    free(w.buf);
    free(w.obuf);
    return rc;
}

/* --- the built-ins ------------------------------------------------------- */

static int parse_u64(const char *s, uint64_t *out, int base)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    if (errno || *end || s[0] == '-')
        return -1;
    *out = v;
    return 0;
}

static int fail(const char *what, const char *path, const char *msg)
{
    fprintf(stderr, "%s '%s': %s\n", what, path, msg);
    return 1;
}

static int bi_extract(char **argv)
{
    struct tar_limits lim = {0};
    uint64_t po;
    if (!argv[1] || parse_u64(argv[2], &po, 10) < 0 ||
        parse_u64(argv[3], &lim.max_entries, 10) < 0 ||
        parse_u64(argv[4], &lim.max_bytes, 10) < 0) {
        fprintf(stderr, "usage: tar-extract DIR PRESERVE_OWNER MAX_ENTRIES MAX_BYTES\n");
        return 2;
    }
    lim.preserve_owner = po != 0;
    int dfd = sbx__inroot_mkdir_p(files_root_fd(), argv[1], 0755);
    if (dfd < 0)
        return fail("cannot create directory", argv[1], strerror(errno));
    char msg[512] = "";
    int rc = tar_extract_fd(0, dfd, &lim, msg, sizeof(msg));
    close(dfd);
    return rc < 0 ? fail("extracting into", argv[1], msg) : 0;
}

static int bi_create(char **argv)
{
    if (!argv[1]) {
        fprintf(stderr, "usage: tar-create DIR\n");
        return 2;
    }
    int dfd = sbx__inroot_open(files_root_fd(), argv[1], O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0)
        return fail("cannot open directory", argv[1], strerror(errno));
    char msg[512] = "";
    int rc = tar_create_fd(1, dfd, msg, sizeof(msg));
    close(dfd);
    if (rc < 0)
        return fail("archiving", argv[1], msg);
    return rc ? fail("archiving", argv[1], msg) : 0;
}

static int bi_write(char **argv)
{
    uint64_t mode, max;
    if (!argv[1] || parse_u64(argv[2], &mode, 8) < 0 || parse_u64(argv[3], &max, 10) < 0) {
        fprintf(stderr, "usage: write-file PATH MODE MAX_BYTES\n");
        return 2;
    }
    char *path = strdup(argv[1]);
    if (!path)
        return fail("writing", argv[1], "out of memory");
    char *slash = strrchr(path, '/');
    const char *dir = "/", *base = path;
    if (slash) {
        *slash = 0;
        base = slash + 1;
        if (path[0])
            dir = path;
    }
    if (!base[0] || !strcmp(base, ".") || !strcmp(base, ".."))
        return fail("writing", argv[1], "it names a directory, not a file");
    int dfd = sbx__inroot_mkdir_p(files_root_fd(), dir, 0755);
    if (dfd < 0)
        return fail("cannot create directory", dir, strerror(errno));
    char tmp[64];
    snprintf(tmp, sizeof(tmp), ".sbx-write-%d", (int)getpid());
    unlinkat(dfd, tmp, 0);
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail("cannot create a file in", dir, strerror(errno));
    static uint8_t buf[TAR_IO];
    uint64_t total = 0;
    const char *err = NULL;
    for (;;) {
        ssize_t r = read(0, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = strerror(errno);
            break;
        }
        if (r == 0)
            break;
        total += (uint64_t)r;
        if (total > max) {
            err = "more bytes than the limit";
            break;
        }
        if (write_full(fd, buf, (size_t)r) < 0) {
            err = strerror(errno);
            break;
        }
    }
    if (!err && fchmod(fd, (mode_t)(mode & 07777)) < 0)
        err = strerror(errno);
    if (close(fd) < 0 && !err)
        err = strerror(errno);
    if (!err && renameat(dfd, tmp, dfd, base) < 0)
        err = strerror(errno);
    if (err)
        unlinkat(dfd, tmp, 0);
    close(dfd);
    return err ? fail("writing", argv[1], err) : 0;
}

static int bi_read(char **argv)
{
    uint64_t max;
    if (!argv[1] || parse_u64(argv[2], &max, 10) < 0) {
        fprintf(stderr, "usage: read-file PATH MAX_BYTES\n");
        return 2;
    }
    int fd = sbx__inroot_open(files_root_fd(), argv[1], O_RDONLY | O_NOCTTY | O_NONBLOCK, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return fail("cannot open", argv[1], strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fail("cannot read", argv[1],
                    S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file");
    if ((uint64_t)st.st_size > max) {
        char m[96];
        snprintf(m, sizeof(m), "it holds %lld bytes, more than the limit of %" PRIu64,
                 (long long)st.st_size, max);
        return fail("cannot read", argv[1], m);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    static uint8_t buf[TAR_IO];
    uint64_t left = (uint64_t)st.st_size;
    while (left) {
        ssize_t r = read(fd, buf, left < sizeof(buf) ? (size_t)left : sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return fail("cannot read", argv[1], r < 0 ? strerror(errno) : "it shrank");
        if (write_full(1, buf, (size_t)r) < 0)
            return 1;
        left -= (uint64_t)r;
    }
    return 0;
}

static int bi_kind(char **argv)
{
    if (!argv[1]) {
        fprintf(stderr, "usage: kind PATH\n");
        return 2;
    }
    int fd = sbx__inroot_open(files_root_fd(), argv[1], O_PATH, 0);
    struct stat st;
    const char *k;
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
        k = "missing";
    else if (fd < 0 || fstat(fd, &st) < 0)
        return fail("cannot look at", argv[1], strerror(errno));
    else
        k = S_ISDIR(st.st_mode) ? "dir" : S_ISREG(st.st_mode) ? "file" : "other";
    if (fd >= 0)
        close(fd);
    printf("%s\n", k);
    return fflush(stdout) == 0 ? 0 : 1;
}

int agent_builtin(char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(char **);
    } tab[] = {
        {"tar-extract", bi_extract}, {"tar-create", bi_create}, {"write-file", bi_write},
        {"read-file", bi_read},      {"kind", bi_kind},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
        if (!strcmp(argv[0], tab[i].name))
            return tab[i].fn(argv);
    fprintf(stderr, "sbx-agent: no built-in '%s'\n", argv[0]);
    return 127;
}
