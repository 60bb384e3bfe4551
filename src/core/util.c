/* Small helpers: strings, buffers, ordered key/value lists, files. */
#include "internal.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

char *sbx__strdup0(const char *s) { return s ? strdup(s) : NULL; }

char *sbx__printf(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    return n < 0 ? NULL : s;
}

/*
 * Python's str.__repr__: single quotes unless the text holds a single quote
 * and no double quote; backslash escapes for quotes, \\, \t \n \r and other
 * control bytes. Non-ASCII UTF-8 is kept as is (printable in Python 3).
 */
char *sbx__repr(const char *s)
{
    if (!s)
        return strdup("None");
    char q = '\'';
    if (strchr(s, '\'') && !strchr(s, '"'))
        q = '"';
    sbx_buf b = { 0 };
    sbx__buf_append(&b, &q, 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (c == (unsigned char)q || c == '\\') {
            char esc[2] = { '\\', (char)c };
            sbx__buf_append(&b, esc, 2);
        } else if (c == '\n') {
            sbx__buf_append(&b, "\\n", 2);
        } else if (c == '\r') {
            sbx__buf_append(&b, "\\r", 2);
        } else if (c == '\t') {
            sbx__buf_append(&b, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            sbx__buf_printf(&b, "\\x%02x", c);
        } else {
            sbx__buf_append(&b, p, 1);
        }
    }
    sbx__buf_append(&b, &q, 1);
    if (!b.data)
        return NULL;
    return b.data;
}

/* The exponent of "%e" text ("8e+03" -> 3). */
static int exponent_of(const char *e)
{
    const char *x = strchr(e, 'e');
    return x ? (int)strtol(x + 1, NULL, 10) : 0;
}

/*
 * Python repr(float): the fewest significant digits that read back as the
 * same double; positional notation when the exponent is in [-4, 16), else
 * exponent notation ("1e-05", "1e+16"); ".0" added to integral values.
 */
void sbx__fmt_float(double v, char *buf, size_t n)
{
    if (isnan(v)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v < 0 ? "-inf" : "inf");
        return;
    }
    char e[64];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    snprintf(e, sizeof(e), "%.*e", prec - 1, v);
    int exp10 = exponent_of(e);
    if (exp10 < -4 || exp10 >= 16) {
        snprintf(buf, n, "%s", e);
        return;
    }
    int decimals = prec - 1 - exp10;
    snprintf(buf, n, "%.*f", decimals > 0 ? decimals : 0, v);
    if (!strchr(buf, '.')) {
        size_t len = strlen(buf);
        if (len + 3 <= n)
            memcpy(buf + len, ".0", 3);
    }
}

/* Python format(v, "g"): six significant digits, trailing zeros dropped. */
void sbx__fmt_g(double v, char *buf, size_t n) { snprintf(buf, n, "%g", v); }

int sbx__parse_pyint(const char *s, long long *out)
{
    if (!s)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    const char *start = s;
    if (*s == '+' || *s == '-')
        s++;
    if (!isdigit((unsigned char)*s))
        return -1;
    /* Python allows single underscores between digits ("1_000"). */
    char digits[64];
    size_t k = 0;
    if (*start == '-')
        digits[k++] = '-';
    bool prev_us = false;
    for (; *s; s++) {
        if (isdigit((unsigned char)*s)) {
            if (k + 1 >= sizeof(digits))
                return -1;
            digits[k++] = *s;
            prev_us = false;
        } else if (*s == '_' && !prev_us && isdigit((unsigned char)s[1])) {
            prev_us = true;
        } else {
            break;
        }
    }
    while (isspace((unsigned char)*s))
        s++;
    if (*s)
        return -1;
    digits[k] = 0;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(digits, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int sbx__parse_pyfloat(const char *s, double *out)
{
    if (!s)
        return -1;
    while (isspace((unsigned char)*s))
        s++;
    if (!*s)
        return -1;
    /* strtod accepts hex floats; Python's float() does not. */
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    if (*end)
        return -1;
    *out = v;
    return 0;
}

/* --- buffers ------------------------------------------------------------- */

int sbx__buf_append(sbx_buf *b, const void *data, size_t len)
{
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *n = realloc(b->data, cap);
        if (!n)
            return SBX_ENOMEM;
        b->data = n;
        b->cap = cap;
    }
    if (len)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = 0;
    return SBX_OK;
}

int sbx__buf_printf(sbx_buf *b, const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        return SBX_ENOMEM;
    int rc = sbx__buf_append(b, s, (size_t)n);
    free(s);
    return rc;
}

void sbx__buf_free(sbx_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* --- ordered key/value --------------------------------------------------- */

/* Below this many pairs a scan is cheaper than keeping an index. */
#define KV_INDEX_FROM 16

static ssize_t kv_find(const sbx_kv *kv, const char *key)
{
    if (kv->index) {
        json_t *at = json_object_get(kv->index, key);
        return at ? (ssize_t)json_integer_value(at) : -1;
    }
    for (size_t i = 0; i < kv->len; i++)
        if (strcmp(kv->keys[i], key) == 0)
            return (ssize_t)i;
    return -1;
}

/* Records keys[i] in the index; the nocheck variant: keys need not be UTF-8. */
static int kv_index_add(sbx_kv *kv, size_t i)
{
    return json_object_set_new_nocheck(kv->index, kv->keys[i], json_integer((json_int_t)i));
}

int sbx__kv_set(sbx_kv *kv, const char *key, const char *value)
{
    if (!value)
        value = "";
    ssize_t at = kv_find(kv, key);
    char *v = strdup(value);
    if (!v)
        return SBX_ENOMEM;
    if (at >= 0) {
        kv->bytes = kv->bytes - strlen(kv->values[at]) + strlen(v);
        free(kv->values[at]);
        kv->values[at] = v;
        return SBX_OK;
    }
    if (kv->len == kv->cap) {
        /* Doubling: growing by one slot per insert copies the arrays n times. */
        size_t cap = kv->cap ? 2 * kv->cap : 8;
        char **nk = realloc(kv->keys, cap * sizeof(char *));
        if (nk)
            kv->keys = nk;
        char **nv = nk ? realloc(kv->values, cap * sizeof(char *)) : NULL;
        if (nv)
            kv->values = nv;
        if (!nk || !nv) {
            free(v);
            return SBX_ENOMEM;
        }
        kv->cap = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        return SBX_ENOMEM;
    }
    kv->keys[kv->len] = k;
    kv->values[kv->len] = v;
    if (!kv->index && kv->len + 1 >= KV_INDEX_FROM) {
        if (!(kv->index = json_object()))
            goto oom;
        for (size_t i = 0; i < kv->len; i++)
            if (kv_index_add(kv, i) < 0)
                goto oom;
    }
    if (kv->index && kv_index_add(kv, kv->len) < 0)
        goto oom;
    kv->len++;
    kv->bytes += strlen(k) + strlen(v) + 2;
    return SBX_OK;
oom:
    /* Without a complete index the list is still right: drop the index and scan. */
    json_decref(kv->index);
    kv->index = NULL;
    free(k);
    free(v);
    return SBX_ENOMEM;
}

const char *sbx__kv_get(const sbx_kv *kv, const char *key)
{
    ssize_t at = kv_find(kv, key);
    return at >= 0 ? kv->values[at] : NULL;
}

void sbx__kv_free(sbx_kv *kv)
{
    for (size_t i = 0; i < kv->len; i++) {
        free(kv->keys[i]);
        free(kv->values[i]);
    }
    free(kv->keys);
    free(kv->values);
    json_decref(kv->index);
    *kv = (sbx_kv){ 0 };
}

int sbx__env_fits(const sbx_kv *env, const char *key, const char *value)
{
    size_t entry = strlen(key) + strlen(value) + 2;
    if (entry > SBX_ENV_ENTRY_MAX_BYTES)
        return SBX_EINVAL;
    const char *old = sbx__kv_get(env, key);
    /* Each variable costs its "K=V\0" and a pointer in envp. */
    size_t total = env->bytes + env->len * sizeof(char *);
    total = old ? total - strlen(old) + strlen(value) : total + entry + sizeof(char *);
    return total > SBX_ENV_MAX_BYTES ? SBX_EINVAL : SBX_OK;
}

int sbx__kv_copy(sbx_kv *dst, const sbx_kv *src)
{
    for (size_t i = 0; i < src->len; i++)
        if (sbx__kv_set(dst, src->keys[i], src->values[i]) < 0)
            return SBX_ENOMEM;
    return SBX_OK;
}

/* --- files --------------------------------------------------------------- */

int sbx__mkdir_p(const char *path, mode_t mode)
{
    _cleanup_free_ char *copy = strdup(path);
    if (!copy)
        return -1;
    for (char *p = copy + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(copy, mode) < 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(copy, mode) < 0) {
        struct stat st;
        if (errno != EEXIST || stat(copy, &st) < 0 || !S_ISDIR(st.st_mode)) {
            if (errno == EEXIST)
                errno = ENOTDIR;
            return -1;
        }
    }
    return 0;
}

static int rm_rf_at(int parent, const char *name, dev_t dev)
{
    struct stat st;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlinkat(parent, name, 0) < 0 && errno != ENOENT ? -1 : 0;
    /* Never descend into another file system mounted below the tree. */
    if (st.st_dev != dev)
        return -1;
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (rm_rf_at(dirfd(d), de->d_name, dev) < 0)
            rc = -1;
    }
    closedir(d);
    if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        rc = -1;
    return rc;
}

int sbx__rm_rf_at(int dirfd, const char *name)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    return rm_rf_at(dirfd, name, st.st_dev);
}

int sbx__rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -1;
    return rm_rf_at(AT_FDCWD, path, st.st_dev);
}

int sbx__read_file(const char *path, char **data, size_t *len)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    sbx_buf b = { 0 };
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int saved = errno;
            sbx__buf_free(&b);
            errno = saved;
            return -1;
        }
        if (n == 0)
            break;
        if (sbx__buf_append(&b, chunk, (size_t)n) < 0) {
            sbx__buf_free(&b);
            errno = ENOMEM;
            return -1;
        }
    }
    if (!b.data && sbx__buf_append(&b, "", 0) < 0) {
        errno = ENOMEM;
        return -1;
    }
    *data = b.data;
    if (len)
        *len = b.len;
    return 0;
}

const char *sbx__human_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < SBX_ARRAY_SIZE(units)) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

int sbx__write_file_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
    /*
     * A fresh name, created exclusively and never through a link: a file or
     * link someone put at a guessable temp name is not written through. The
     * mode is set explicitly, whatever the umask (records are 0600).
     */
    char hex[17];
    sbx__random_hex(hex, 8);
    _cleanup_free_ char *tmp = sbx__printf("%s.tmp.%d.%s", path, (int)getpid(), hex);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
    if (fd < 0)
        return -1;
    if (fchmod(fd, mode & 07777) < 0) {
        int saved = errno;
        close(fd);
        unlink(tmp);
        errno = saved;
        return -1;
    }
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int saved = errno;
            close(fd);
            unlink(tmp);
            errno = saved;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
        return -1;
    }
    return 0;
}

void sbx__random_hex(char *out, size_t n_bytes)
{
    unsigned char raw[64];
    if (n_bytes > sizeof(raw))
        n_bytes = sizeof(raw);
    size_t got = 0;
    while (got < n_bytes) {
        ssize_t n = getrandom(raw + got, n_bytes - got, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            break;
        }
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n_bytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * n_bytes] = 0;
}

double sbx__monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
