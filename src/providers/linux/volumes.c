/*
 * [volumes] Host directories in linux boxes: bind mounts of host paths,
 * named volumes several boxes mount at once, and the newer API's shared
 * storage (a directory under the provider's shared root). docs/volumes.md
 * is the user's side of this file.
 *
 * What the user gives is parsed here (syntax only, on any thread), resolved
 * on a worker at create (a bind's host path must exist and not be a link; a
 * named volume is made when missing), and mounted by the box's first process
 * (src/shim/box.c mount_volumes), which opens every source again without
 * following a final link and binds what it opened (by descriptor) at a
 * target resolved inside the box's root by the kernel, nosuid and nodev.
 * Both opens walk the host path with sbx__open_trusted: a link on the way
 * is followed only where nobody but root and the caller could have put it,
 * so another user who owns a directory on the way cannot aim the mount
 * elsewhere, neither before the check nor between the check and the mount.
 *
 * The volume store (by default next to the image store:
 * /var/lib/sbx/linux/volumes for root) is private like the image store:
 *
 *   <store>/<name>/volume.json  {"name", "created"} (0600)
 *   <store>/<name>/data/        what boxes see (0755)
 *
 * <store> and <store>/<name> are 0700 and the caller's, so no box and no
 * other user can swap what the path names; data/ is the mount's root, which
 * a box can fill but not replace.
 */
#include "providers/linux/linux.h"
#include "core/inroot.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define VOLUME_RECORD_MAX (64u << 10)

/* --- syntax ------------------------------------------------------------------ */

/* Docker's volume names: [A-Za-z0-9][A-Za-z0-9_.-]*, here at most 64 long. */
static bool name_ok(const char *n)
{
    size_t len = n ? strlen(n) : 0;
    if (len < 1 || len > 64 || !isalnum((unsigned char)n[0]))
        return false;
    return strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == len;
}

/* Whether `p` has a ".." component. */
static bool has_dotdot(const char *p)
{
    for (const char *s = p; (s = strstr(s, "..")) != NULL; s += 2)
        if ((s == p || s[-1] == '/') && (s[2] == 0 || s[2] == '/'))
            return true;
    return false;
}

/*
 * `p` without repeated slashes, "." components or a trailing slash; NULL
 * (errno EINVAL) when it is not absolute or has "..".
 */
static char *clean_abs(const char *p)
{
    if (!p || p[0] != '/' || has_dotdot(p) || strlen(p) >= PATH_MAX) {
        errno = EINVAL;
        return NULL;
    }
    char *out = malloc(strlen(p) + 2);
    if (!out)
        return NULL;
    size_t k = 0;
    for (const char *s = p; *s;) {
        while (*s == '/')
            s++;
        size_t n = strcspn(s, "/");
        if (n == 0 || (n == 1 && s[0] == '.')) {
            s += n;
            continue;
        }
        out[k++] = '/';
        memcpy(out + k, s, n);
        k += n;
        s += n;
    }
    if (k == 0)
        out[k++] = '/';
    out[k] = 0;
    return out;
}

/* Where a volume may not go: "/" and the kernel interfaces sbx mounts itself. */
static const char *target_refusal(const char *t)
{
    if (!strcmp(t, "/"))
        return "it would hide the box's whole root";
    static const char *const mine[] = { "/proc", "/sys" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(mine); i++) {
        size_t n = strlen(mine[i]);
        if (!strncmp(t, mine[i], n) && (t[n] == 0 || t[n] == '/'))
            return "sbx mounts the box's kernel interfaces there";
    }
    return NULL;
}

static int entry_error(sbx_error **err, const char *what, size_t i, const char *fmt, const char *a,
                       const char *b)
{
    char msg[512];
    snprintf(msg, sizeof(msg), fmt, a ? a : "", b ? b : "");
    return sbx__set_error(err, SBX_EINVAL, "%s[%zu]: %s", what, i, msg);
}

/* One entry into {"type", "source", "target", "read_only"}. */
static int parse_entry(const json_t *e, const char *what, size_t i, json_t *out, sbx_error **err)
{
    _cleanup_free_ char *src = NULL, *dst = NULL;
    const char *type = NULL;
    bool ro = false;
    if (json_is_string(e)) {
        const char *s = json_string_value(e);
        const char *c1 = strchr(s, ':');
        const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c1 || c1 == s || c1[1] == 0)
            return entry_error(err, what, i,
                               "'%s' must be SOURCE:TARGET[:ro] (a host path or a volume name, "
                               "then the path in the box)%s",
                               s, NULL);
        if (c2 && (strchr(c2 + 1, ':') || (strcmp(c2 + 1, "ro") && strcmp(c2 + 1, "rw"))))
            return entry_error(err, what, i,
                               "'%s': the only options after the target are :ro and :rw%s", s,
                               NULL);
        ro = c2 && !strcmp(c2 + 1, "ro");
        src = strndup(s, (size_t)(c1 - s));
        dst = c2 ? strndup(c1 + 1, (size_t)(c2 - c1 - 1)) : strdup(c1 + 1);
        if (!src || !dst)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        type = src[0] == '/' ? "bind" : "volume";
    } else if (json_is_object(e)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)e, k, v)
        {
            if (strcmp(k, "source") && strcmp(k, "target") && strcmp(k, "read_only") &&
                strcmp(k, "type"))
                return entry_error(err, what, i,
                                   "unknown key '%s' (known: source, target, read_only, "
                                   "type)%s",
                                   k, NULL);
        }
        json_t *t = json_object_get(e, "type"), *r = json_object_get(e, "read_only");
        json_t *so = json_object_get(e, "source"), *ta = json_object_get(e, "target");
        if (r && !json_is_boolean(r))
            return entry_error(err, what, i, "read_only must be true or false%s%s", NULL, NULL);
        ro = json_is_true(r);
        if (!json_is_string(ta))
            return entry_error(err, what, i, "target (the path in the box) is required%s%s",
                               NULL, NULL);
        if (t && !json_is_string(t))
            return entry_error(err, what, i, "type must be \"bind\", \"volume\" or \"shared\"%s%s",
                               NULL, NULL);
        type = t ? json_string_value(t) : NULL;
        if (!so || json_is_null(so)) {
            /* Only shared storage has a default source: the shared root itself. */
            if (type && strcmp(type, "shared"))
                return entry_error(err, what, i, "a %s needs a source%s", type, NULL);
            type = "shared";
            src = strdup("");
        } else if (json_is_string(so)) {
            src = strdup(json_string_value(so));
        } else {
            return entry_error(err, what, i, "source must be a string%s%s", NULL, NULL);
        }
        dst = strdup(json_string_value(ta));
        if (!src || !dst)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        if (!type)
            type = src[0] == '/' ? "bind" : "volume";
        if (strcmp(type, "bind") && strcmp(type, "volume") && strcmp(type, "shared"))
            return entry_error(err, what, i,
                               "type '%s' is not \"bind\", \"volume\" or \"shared\"%s", type, NULL);
    } else {
        return sbx__set_error(err, SBX_EINVAL,
                              "%s[%zu] must be \"SOURCE:TARGET[:ro]\" or an object {source, "
                              "target, read_only, type}",
                              what, i);
    }
    if (dst[0] != '/')
        return entry_error(err, what, i,
                           "the target '%s' must be an absolute path in the box%s", dst, NULL);
    _cleanup_free_ char *target = clean_abs(dst);
    if (!target)
        return entry_error(err, what, i, "the target '%s' must not contain '..'%s", dst, NULL);
    const char *why = target_refusal(target);
    if (why)
        return entry_error(err, what, i, "the target '%s' is refused: %s", target, why);
    _cleanup_free_ char *source = NULL;
    if (!strcmp(type, "bind")) {
        if (src[0] != '/')
            return entry_error(err, what, i,
                               "the host path '%s' is relative: give an absolute path (sbx "
                               "resolves nothing against the current directory)%s",
                               src, NULL);
        if (!(source = clean_abs(src)))
            return entry_error(err, what, i,
                               "the host path '%s' must not contain '..': give the path it "
                               "means%s",
                               src, NULL);
    } else if (!strcmp(type, "volume")) {
        if (strchr(src, '/') || src[0] == '.')
            return entry_error(err, what, i,
                               "'%s' is a relative host path: give an absolute path for a bind "
                               "mount, or a volume name without '/'%s",
                               src, NULL);
        if (!name_ok(src))
            return entry_error(err, what, i,
                               "'%s' is not a volume name (1-64 letters, digits, '_', '.', '-', "
                               "starting with a letter or digit)%s",
                               src, NULL);
        source = strdup(src);
    } else {
        /* Shared: relative to the shared root, which it may not leave. */
        if (src[0] == '/' || has_dotdot(src) || strlen(src) >= PATH_MAX)
            return entry_error(err, what, i,
                               "the shared source '%s' must be a path relative to the shared "
                               "root, without '..'%s",
                               src, NULL);
        source = strdup(src);
    }
    if (!source)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    json_t *o = json_pack("{s:s, s:s, s:s, s:b}", "type", type, "source", source, "target",
                          target, "read_only", ro);
    if (!o || json_array_append_new(out, o) < 0)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}

int sbx__linux_volumes_parse(const json_t *v, const char *what, json_t *out, sbx_error **err)
{
    if (json_is_null(v))
        return SBX_OK;
    if (!json_is_array(v))
        return sbx__set_error(err, SBX_EINVAL,
                              "%s must be a list of \"SOURCE:TARGET[:ro]\" strings or {source, "
                              "target, read_only, type} objects",
                              what);
    if (json_array_size(v) > 64)
        return sbx__set_error(err, SBX_EINVAL, "%s: at most 64 volumes a box", what);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        int rc = parse_entry(e, what, i, out, err);
        if (rc < 0)
            return rc;
    }
    return SBX_OK;
}

int sbx__linux_shm_parse(const json_t *v, const char *what, long long *out, sbx_error **err)
{
    long long n = -1;
    if (json_is_integer(v)) {
        n = json_integer_value(v);
    } else if (json_is_string(v)) {
        /* Docker's units: b, k, m, g (1024-based), case-insensitive. */
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        unsigned long long x = strtoull(s, &end, 10);
        unsigned shift = 0;
        if (end != s && !errno && s[0] != '-') {
            switch (*end | 0x20) {
            case 'k': shift = 10; end++; break;
            case 'm': shift = 20; end++; break;
            case 'g': shift = 30; end++; break;
            case 'b': end++; break;
            default: break;
            }
            if (*end == 'b' || *end == 'B')
                end++;
            if (!*end && x <= (1ull << 40) >> shift)
                n = (long long)(x << shift);
        }
    }
    if (n < 4096 || n > (1ll << 40))
        return sbx__set_error(err, SBX_EINVAL,
                              "%s must be a size from 4096 bytes to 1 TiB: bytes, or a string "
                              "like \"64m\", \"1g\"",
                              what);
    *out = n;
    return SBX_OK;
}

/* --- the store ---------------------------------------------------------------- */

static char *store_path(const char *state_dir, const sbx_linux_extras *x)
{
    return x && x->store ? strdup(x->store) : sbx__printf("%s/volumes", state_dir);
}

/* The store, made (0700, checked like every private directory) when `create`. */
static int open_store(const char *state_dir, const sbx_linux_extras *x, bool create,
                      char **path_out, int *fd_out, sbx_error **err)
{
    _cleanup_free_ char *path = store_path(state_dir, x);
    if (!path)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!create && access(path, F_OK) < 0 && errno == ENOENT) {
        *fd_out = -1;
        *path_out = sbx__steal(&path);
        return SBX_OK;
    }
    char *canon = NULL;
    int rc = sbx__private_dir(path, create, &canon, err);
    if (rc < 0)
        return rc;
    int fd = open(canon, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = sbx__set_errno(err, SBX_EIO, errno, "cannot open the volume store %s", canon);
        free(canon);
        return rc;
    }
    *fd_out = fd;
    *path_out = canon;
    return SBX_OK;
}

/* <store>/<name>: a directory of the caller's, 0700, not a link. -1/ENOENT when missing. */
static int open_volume(int storefd, const char *store, const char *name, sbx_error **err)
{
    int fd = openat(storefd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (e == ENOENT)
            sbx__set_error(err, SBX_ENOENT, "no volume named '%s' (sbx volume ls lists them)",
                           name);
        else
            sbx__set_errno(err, SBX_EPERM, e, "the volume %s/%s is not a directory (a link?)",
                           store, name);
        errno = e;
        return -1;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077)) {
        close(fd);
        sbx__set_error(err, SBX_EPERM,
                       "the volume %s/%s belongs to uid %u with mode %03o, not to this user "
                       "(%u) with mode 0700: it is not sbx's; remove it",
                       store, name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
                       (unsigned)geteuid());
        errno = EPERM;
        return -1;
    }
    return fd;
}

static json_t *volume_json(int vfd, const char *store, const char *name)
{
    char *text = NULL;
    size_t len = 0;
    json_t *rec = NULL;
    if (sbx__read_private_file(vfd, "volume.json", name, VOLUME_RECORD_MAX, &text, &len, NULL) ==
        0)
        rec = json_loadb(text, len, 0, NULL);
    free(text);
    json_t *created = json_object_get(rec, "created");
    json_t *o = json_pack("{s:s, s:O?, s:s+++}", "name", name, "created",
                          json_is_number(created) ? created : json_null(), "mountpoint", store, "/",
                          name, "/data");
    json_decref(rec);
    return o;
}

/* The ids of running boxes that mount volume `name` (from their records). */
static json_t *used_by(const char *state_dir, const char *name)
{
    json_t *ids = json_array();
    sbx_linux_box_info *boxes = NULL;
    size_t n = 0;
    if (!ids || sbx__linux_list(state_dir, NULL, &boxes, &n, NULL) < 0)
        return ids;
    for (size_t i = 0; i < n; i++) {
        if (!boxes[i].shim_alive)
            continue;
        _cleanup_free_ char *path = sbx__printf("%s/record.json", boxes[i].rec.box_dir);
        _cleanup_json_ json_t *r = NULL;
        if (!path || sbx__load_private_json(path, 1u << 22, &r, NULL) < 0)
            continue;
        size_t k;
        json_t *v;
        json_array_foreach(json_object_get(r, "volumes"), k, v)
        {
            const char *vn = json_string_value(json_object_get(v, "name"));
            if (vn && !strcmp(vn, name)) {
                json_array_append_new(ids, json_string(boxes[i].rec.id));
                break;
            }
        }
    }
    sbx__linux_list_free(boxes, n);
    return ids;
}

/* Makes volume `name` when missing; *created says whether this call made it. */
static int volume_make(int storefd, const char *store, const char *name, bool *created,
                       sbx_error **err)
{
    *created = false;
    if (mkdirat(storefd, name, 0700) == 0) {
        *created = true;
    } else if (errno != EEXIST) {
        return sbx__set_errno(err, SBX_EIO, errno, "cannot create the volume %s/%s", store, name);
    }
    _cleanup_close_ int vfd = open_volume(storefd, store, name, err);
    if (vfd < 0)
        return errno == ENOENT ? SBX_ENOENT : SBX_EPERM;
    /* A fresh tree: real directories with exactly these modes, whatever the umask. */
    _cleanup_close_ int dirfd = openat(vfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0 || (mkdirat(dirfd, "data", 0755) < 0 && errno != EEXIST))
        return sbx__set_errno(err, SBX_EIO, errno, "cannot create %s/%s/data", store, name);
    if (*created) {
        if (fchmodat(dirfd, "data", 0755, 0) < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "cannot set the mode of %s/%s/data",
                                  store, name);
        _cleanup_free_ char *rec = sbx__printf("%s/%s/volume.json", store, name);
        _cleanup_json_ json_t *j = json_pack("{s:s, s:I}", "name", name, "created",
                                             (json_int_t)time(NULL));
        _cleanup_free_ char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (!rec || !text)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        if (sbx__write_file_atomic(rec, text, strlen(text), 0600) < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "cannot write %s", rec);
    }
    return SBX_OK;
}

/* --- resolving a box's entries ------------------------------------------------ */

/* "dir" or "file" for an O_PATH fd of what may be mounted; NULL (and why) otherwise. */
static const char *mount_kind(int fd, const char **why)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        *why = strerror(errno);
        return NULL;
    }
    if (S_ISLNK(st.st_mode)) {
        *why = "it is a symbolic link: give the path it points to (sbx never follows a link "
               "at the source)";
        return NULL;
    }
    if (S_ISDIR(st.st_mode))
        return "dir";
    if (S_ISREG(st.st_mode))
        return "file";
    *why = "it is neither a directory nor a regular file";
    return NULL;
}

/* The shared root: an existing or new directory of the caller's, not a link. */
static char *shared_root(const char *state_dir, const sbx_linux_extras *x)
{
    if (x && x->shared_root)
        return strdup(x->shared_root);
    _cleanup_free_ char *store = store_path(state_dir, x);
    char *slash = store ? strrchr(store, '/') : NULL;
    if (!slash)
        return NULL;
    *slash = 0;
    return sbx__printf("%s/shared", *store ? store : "");
}

static int open_shared_root(const char *root, sbx_error **err)
{
    /*
     * 0700 when sbx makes it: a box (root, without a user namespace) can
     * leave setuid-root files there, harmless in boxes (nosuid) but not to
     * other local users who could reach them on the host.
     */
    _cleanup_free_ char *parent = strdup(root);
    char *slash = parent ? strrchr(parent, '/') : NULL;
    if (slash)
        *slash = 0;
    if (!parent || (parent[0] && sbx__mkdir_p(parent, 0755) < 0) ||
        (mkdir(root, 0700) < 0 && errno != EEXIST))
        return sbx__set_errno(err, SBX_ECREATE, errno, "cannot create the shared root %s", root);
    int fd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return sbx__set_errno(err, SBX_ECREATE, e, "the shared root %s is not a directory (a "
                                                   "link?)", root);
    }
    if (st.st_uid != geteuid() || (st.st_mode & 022)) {
        close(fd);
        return sbx__set_error(err, SBX_EPERM,
                              "the shared root %s belongs to uid %u with mode %03o: it must be "
                              "this user's (%u) and writable by nobody else",
                              root, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777),
                              (unsigned)geteuid());
    }
    return fd;
}

/* Makes `rel` under the shared root, component by component, never through a link. */
static int shared_make(int rootfd, const char *rel, sbx_error **err, const char *root)
{
    _cleanup_free_ char *copy = strdup(rel);
    if (!copy)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    for (char *p = copy; fd >= 0 && *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (!n)
            break;
        char save = p[n];
        p[n] = 0;
        if (strcmp(p, ".") && mkdirat(fd, p, 0755) < 0 && errno != EEXIST) {
            int e = errno;
            close(fd);
            return sbx__set_errno(err, SBX_ECREATE, e, "cannot create %s under the shared root %s",
                                  rel, root);
        }
        int next = sbx__beneath_open_nofollow(fd, p);
        int e = errno;
        close(fd);
        fd = next;
        errno = e;
        p[n] = save;
        p += n;
    }
    if (fd < 0)
        return sbx__set_errno(err, SBX_ECREATE, errno,
                              "cannot open %s under the shared root %s (a link on the way? sbx "
                              "follows none there)",
                              rel, root);
    close(fd);
    return SBX_OK;
}

int sbx__linux_volumes_resolve(const char *state_dir, const sbx_linux_extras *x, json_t *vols,
                               sbx_error **err)
{
    size_t i;
    json_t *v;
    int storefd = -1, rootfd = -1, rc = SBX_OK;
    _cleanup_free_ char *store = NULL, *root = NULL;
    json_array_foreach(vols, i, v)
    {
        const char *type = json_string_value(json_object_get(v, "type"));
        const char *src = json_string_value(json_object_get(v, "source"));
        const char *tgt = json_string_value(json_object_get(v, "target"));
        _cleanup_free_ char *host = NULL;
        if (!strcmp(type, "volume")) {
            if (storefd < 0 && (rc = open_store(state_dir, x, true, &store, &storefd, err)) < 0)
                break;
            bool made;
            if ((rc = volume_make(storefd, store, src, &made, err)) < 0)
                break;
            json_object_set_new(v, "name", json_string(src));
            host = sbx__printf("%s/%s/data", store, src);
        } else if (!strcmp(type, "shared")) {
            if (rootfd < 0) {
                root = shared_root(state_dir, x);
                if (!root) {
                    rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
                    break;
                }
                if ((rootfd = open_shared_root(root, err)) < 0) {
                    rc = rootfd;
                    rootfd = -1;
                    break;
                }
            }
            if ((rc = shared_make(rootfd, src, err, root)) < 0)
                break;
            json_object_set_new(v, "beneath", json_string(src));
            host = strdup(root);
        } else {
            host = strdup(src);
        }
        if (!host) {
            rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
            break;
        }
        /*
         * Checked the way the shim opens it again (and mounts what it opened):
         * no link at the end, nor beneath a shared root, and none on the way
         * that another user could have planted (sbx__open_trusted).
         */
        _cleanup_free_ char *what =
            sbx__printf("volume %s -> %s", src[0] ? src : "(shared root)", tgt);
        sbx_error *te = NULL;
        _cleanup_close_ int fd = what ? sbx__open_trusted(host, false, what, &te) : -1;
        if (fd < 0) {
            rc = sbx__set_error(err, SBX_ECREATE, "%s",
                                te ? sbx_error_message(te) : "out of memory");
            sbx_error_free(te);
            break;
        }
        const char *beneath = json_string_value(json_object_get(v, "beneath"));
        if (beneath) {
            int sub = sbx__beneath_open_nofollow(fd, beneath);
            close(fd);
            fd = sub;
        }
        const char *why = NULL, *kind = fd >= 0 ? mount_kind(fd, &why) : NULL;
        if (!kind) {
            rc = sbx__set_error(err, SBX_ECREATE, "volume %s -> %s: cannot mount %s%s%s: %s",
                                src[0] ? src : "(shared root)", tgt, host, beneath ? "/" : "",
                                beneath ? beneath : "",
                                why ? why : errno == ENOENT ? "it does not exist" : strerror(errno));
            break;
        }
        json_object_set_new(v, "kind", json_string(kind));
        json_object_set_new(v, "source", json_string(host));
    }
    if (storefd >= 0)
        close(storefd);
    if (rootfd >= 0)
        close(rootfd);
    return rc;
}

/* --- provider config ---------------------------------------------------------- */

int sbx__linux_extras_key(sbx_linux_extras *x, const char *key, const json_t *v, int *rc,
                          sbx_error **err)
{
    if (!x->volumes)
        x->volumes = json_array();
    if (!x->cap_add)
        x->cap_add = json_array();
    if (!x->volumes || !x->cap_add) {
        *rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        return 1;
    }
    *rc = SBX_OK;
    if (!strcmp(key, "volumes")) {
        *rc = sbx__linux_volumes_parse(v, "linux provider: volumes", x->volumes, err);
    } else if (!strcmp(key, "cap_add")) {
        /* NET_ADMIN with network "host" is refused at create, where the box's network is known. */
        *rc = sbx__linux_caps_parse(v, "linux provider: cap_add", false, x->cap_add, err);
    } else if (!strcmp(key, "shm_size")) {
        if (!json_is_null(v))
            *rc = sbx__linux_shm_parse(v, "linux provider: shm_size", &x->shm_size, err);
    } else if (!strcmp(key, "volume_store") || !strcmp(key, "shared_root")) {
        if (json_is_null(v))
            return 1;
        const char *s = json_string_value(v);
        _cleanup_free_ char *clean = s ? clean_abs(s) : NULL;
        if (!clean) {
            *rc = sbx__set_error(err, SBX_EINVAL,
                                 "linux provider: %s must be an absolute path without '..'", key);
            return 1;
        }
        char **dst = !strcmp(key, "volume_store") ? &x->store : &x->shared_root;
        free(*dst);
        *dst = sbx__steal(&clean);
    } else {
        return 0;
    }
    return 1;
}

int sbx__linux_extras_init(sbx_linux_extras *x, const char *state_dir_configured,
                           sbx_error **err)
{
    if (!x->volumes)
        x->volumes = json_array();
    if (!x->cap_add)
        x->cap_add = json_array();
    if (!x->store) {
        /* Next to the image store: volumes outlive reboots as images do (/run does not). */
        _cleanup_free_ char *images = sbx__linux_image_store_default(state_dir_configured);
        char *slash = images ? strrchr(images, '/') : NULL;
        if (slash) {
            *slash = 0;
            x->store = sbx__printf("%s/volumes", images);
        }
    }
    if (!x->volumes || !x->cap_add)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}

void sbx__linux_extras_free(sbx_linux_extras *x)
{
    free(x->store);
    free(x->shared_root);
    json_decref(x->volumes);
    json_decref(x->cap_add);
    memset(x, 0, sizeof(*x));
}

/* --- the public calls ------------------------------------------------------------ */

static int extras_of(sbx_provider *p, const char *fn, const sbx_linux_extras **x,
                     const char **state_dir, int *net_host, sbx_error **err)
{
    int nh = 0;
    const char *sd = NULL;
    *x = p ? sbx__linux_provider_extras(p, &sd, &nh) : NULL;
    if (!*x)
        return sbx__set_error(err, p ? SBX_ENOTSUP : SBX_EINVAL,
                              "%s: %s", fn, p ? "only the linux provider has volumes and "
                                                "runtime requirements"
                                              : "the provider is required");
    *state_dir = sd;
    if (net_host)
        *net_host = nh;
    return SBX_OK;
}

static int out_json(json_t *j, char **json_out, sbx_error **err)
{
    if (!j)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (json_out) {
        char *t = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        json_decref(j);
        if (!t)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        *json_out = t;
        return SBX_OK;
    }
    json_decref(j);
    return SBX_OK;
}

static int check_name(const char *name, sbx_error **err)
{
    if (!name_ok(name))
        return sbx__set_error(err, SBX_EINVAL,
                              "'%s' is not a volume name (1-64 letters, digits, '_', '.', '-', "
                              "starting with a letter or digit)",
                              name ? name : "(null)");
    return SBX_OK;
}

int sbx_provider_volume_create(sbx_provider *p, const char *name, char **json_out,
                                          sbx_error **err)
{
    const sbx_linux_extras *x;
    const char *sd = NULL;
    int rc = extras_of(p, "sbx_provider_volume_create", &x, &sd, NULL, err);
    if (rc < 0 || (rc = check_name(name, err)) < 0)
        return rc;
    _cleanup_free_ char *store = NULL;
    _cleanup_close_ int storefd = -1;
    bool made;
    if ((rc = open_store(sd, x, true, &store, &storefd, err)) < 0 ||
        (rc = volume_make(storefd, store, name, &made, err)) < 0)
        return rc;
    _cleanup_close_ int vfd = open_volume(storefd, store, name, err);
    if (vfd < 0)
        return SBX_EPERM;
    return out_json(volume_json(vfd, store, name), json_out, err);
}

/*
 * The existing volume `name` of p's store, for inspect and remove: *sd the
 * state directory, *store the store's path (malloc'd), *storefd and *vfd
 * the store's and the volume's directories. SBX_ENOENT when there is none.
 */
static int find_volume(sbx_provider *p, const char *what, const char *name, const char **sd,
                       char **store, int *storefd, int *vfd, sbx_error **err)
{
    const sbx_linux_extras *x;
    int rc = extras_of(p, what, &x, sd, NULL, err);
    if (rc < 0 || (rc = check_name(name, err)) < 0)
        return rc;
    if ((rc = open_store(*sd, x, false, store, storefd, err)) < 0)
        return rc;
    if (*storefd < 0)
        return sbx__set_error(err, SBX_ENOENT, "no volume named '%s' (sbx volume ls lists them)",
                              name);
    *vfd = open_volume(*storefd, *store, name, err);
    if (*vfd < 0)
        return errno == ENOENT ? SBX_ENOENT : SBX_EPERM;
    return SBX_OK;
}

int sbx_provider_volume_inspect(sbx_provider *p, const char *name, char **json_out,
                                           sbx_error **err)
{
    const char *sd = NULL;
    _cleanup_free_ char *store = NULL;
    _cleanup_close_ int storefd = -1, vfd = -1;
    int rc = find_volume(p, "sbx_provider_volume_inspect", name, &sd, &store, &storefd, &vfd, err);
    if (rc < 0)
        return rc;
    json_t *j = volume_json(vfd, store, name);
    if (j)
        json_object_set_new(j, "used_by", used_by(sd, name));
    return out_json(j, json_out, err);
}

int sbx_provider_volume_list(sbx_provider *p, char **json_out, sbx_error **err)
{
    const sbx_linux_extras *x;
    const char *sd = NULL;
    int rc = extras_of(p, "sbx_provider_volume_list", &x, &sd, NULL, err);
    if (rc < 0)
        return rc;
    if (!json_out)
        return sbx__set_error(err, SBX_EINVAL, "sbx_provider_volume_list: json_out is required");
    _cleanup_free_ char *store = NULL;
    _cleanup_close_ int storefd = -1;
    if ((rc = open_store(sd, x, false, &store, &storefd, err)) < 0)
        return rc;
    json_t *arr = json_array();
    _cleanup_close_ int dfd = storefd >= 0 ? openat(storefd, ".", O_RDONLY | O_DIRECTORY |
                                                                      O_CLOEXEC)
                                           : -1;
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d)
        dfd = -1; /* the DIR owns it */
    struct dirent *de;
    while (arr && d && (de = readdir(d)) != NULL) {
        if (!name_ok(de->d_name))
            continue;
        int vfd = open_volume(storefd, store, de->d_name, NULL);
        if (vfd < 0)
            continue;
        json_t *j = volume_json(vfd, store, de->d_name);
        close(vfd);
        if (j)
            json_object_set_new(j, "used_by", used_by(sd, de->d_name));
        if (!j || json_array_append_new(arr, j) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (d)
        closedir(d);
    return out_json(arr, json_out, err);
}

int sbx_provider_volume_remove(sbx_provider *p, const char *name, int force,
                                          sbx_error **err)
{
    const char *sd = NULL;
    _cleanup_free_ char *store = NULL;
    _cleanup_close_ int storefd = -1, vfd = -1;
    int rc = find_volume(p, "sbx_provider_volume_remove", name, &sd, &store, &storefd, &vfd, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *users = used_by(sd, name);
    if (!force && json_array_size(users) > 0) {
        _cleanup_free_ char *ids = json_dumps(users, JSON_COMPACT);
        return sbx__set_error(err, SBX_ESTATE,
                              "volume '%s' is in use by running box%s %s: stop %s first, or "
                              "remove it anyway with --force (force)",
                              name, json_array_size(users) > 1 ? "es" : "", ids ? ids : "?",
                              json_array_size(users) > 1 ? "them" : "it");
    }
    _cleanup_close_ int dfd = openat(storefd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /*
     * Never following a link and never crossing into another mount: what a
     * box planted in data/ (links to host files, mounts it cannot make) is
     * removed as itself.
     */
    if (dfd < 0 || sbx__rm_rf_at(dfd, name) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot remove the volume %s/%s", store, name);
    return SBX_OK;
}

int sbx_provider_shared_volume_options(sbx_provider *p, const char *source,
                                                  const char *target, int read_only,
                                                  char **json_out, sbx_error **err)
{
    const sbx_linux_extras *x;
    const char *sd = NULL;
    int rc = extras_of(p, "sbx_provider_shared_volume_options", &x, &sd, NULL, err);
    if (rc < 0)
        return rc;
    if (!json_out)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_provider_shared_volume_options: json_out is required");
    json_t *e = json_pack("{s:s, s:s?, s:s?, s:b}", "type", "shared", "source", source, "target",
                          target, "read_only", read_only != 0);
    _cleanup_json_ json_t *in = e ? json_pack("[o]", e) : NULL;
    _cleanup_json_ json_t *out = json_array();
    if (!in || !out)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /* The descriptor is what create parses: checked now, so a bad one fails here, not later. */
    if ((rc = sbx__linux_volumes_parse(in, "shared_volume_options", out, err)) < 0)
        return rc;
    return out_json(json_pack("{s:O}", "volumes", out), json_out, err);
}

int sbx_provider_shared_volume_metadata(sbx_provider *p, char **json_out,
                                                   sbx_error **err)
{
    const sbx_linux_extras *x;
    const char *sd = NULL;
    int rc = extras_of(p, "sbx_provider_shared_volume_metadata", &x, &sd, NULL, err);
    if (rc < 0)
        return rc;
    if (!json_out)
        return sbx__set_error(err, SBX_EINVAL,
                              "sbx_provider_shared_volume_metadata: json_out is required");
    _cleanup_free_ char *root = shared_root(sd, x);
    char host[256] = "";
    if (gethostname(host, sizeof(host) - 1) < 0)
        host[0] = 0;
    /* Placement: boxes see the same shared files only on the same host. */
    return out_json(json_pack("{s:s, s:s, s:s}", "sbx.provider", "linux", "sbx.host", host,
                              "sbx.shared_root", root ? root : ""),
                    json_out, err);
}

int sbx_provider_validate_runtime_requirements(sbx_provider *p,
                                                          const char *const *cap_add,
                                                          long long shm_size, char **json_out,
                                                          sbx_error **err)
{
    const sbx_linux_extras *x;
    const char *sd = NULL;
    int net_host = 0;
    int rc = extras_of(p, "sbx_provider_validate_runtime_requirements", &x, &sd, &net_host, err);
    if (rc < 0)
        return rc;
    _cleanup_json_ json_t *in = json_array(), *caps = json_array();
    for (size_t i = 0; in && cap_add && cap_add[i]; i++)
        json_array_append_new(in, json_string(cap_add[i]));
    if (!in || !caps)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if ((rc = sbx__linux_caps_parse(in, "cap_add", net_host, caps, err)) < 0)
        return rc;
    if (shm_size >= 0) {
        _cleanup_json_ json_t *n = json_integer(shm_size);
        long long ok;
        if ((rc = sbx__linux_shm_parse(n, "shm_size", &ok, err)) < 0)
            return rc;
    }
    if (!json_out)
        return SBX_OK;
    /* The create-time metadata create() reads back (docs/volumes.md); null: nothing to ask. */
    if (json_array_size(caps) == 0 && shm_size < 0)
        return out_json(json_null(), json_out, err);
    json_t *md = json_object();
    if (md && json_array_size(caps) > 0) {
        /* At most the few addable names (caps.c), each under 32 bytes: the buffer holds all. */
        size_t i, len = 0;
        json_t *c;
        char buf[512] = "";
        json_array_foreach(caps, i, c)
        {
            int n = snprintf(buf + len, sizeof(buf) - len, "%s%s", i ? "," : "",
                             json_string_value(c));
            if (n < 0 || (size_t)n >= sizeof(buf) - len)
                break;
            len += (size_t)n;
        }
        json_object_set_new(md, "sbx.cap_add", json_string(buf));
    }
    if (md && shm_size >= 0) {
        char n[32];
        snprintf(n, sizeof(n), "%lld", shm_size);
        json_object_set_new(md, "sbx.shm_size", json_string(n));
    }
    return out_json(md, json_out, err);
}

/* --- a box's settings ------------------------------------------------------------ */

int sbx__linux_box_extras_option(const char *key, const json_t *v, json_t **vols,
                                 json_t **caps, long long *shm, sbx_error **err)
{
    if (!strcmp(key, "shm_size"))
        return json_is_null(v) ? SBX_OK
                               : sbx__linux_shm_parse(v, "provider_options.shm_size", shm, err);
    json_t **to = !strcmp(key, "volumes") ? vols : caps;
    if (!*to && !(*to = json_array()))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (to == vols)
        return sbx__linux_volumes_parse(v, "provider_options.volumes", *to, err);
    /* Names only here: NET_ADMIN against the box's network in sbx__linux_box_extras. */
    return sbx__linux_caps_parse(v, "provider_options.cap_add", false, *to, err);
}

int sbx__linux_box_extras(const sbx_linux_extras *x, const sbx_spec *spec, int net_host,
                          const json_t *vols, const json_t *caps, long long shm, json_t *desc,
                          sbx_error **err)
{
    _cleanup_json_ json_t *all = json_array(), *names = json_array();
    if (!all || !names)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    /* Copies: resolving adds host-side keys to each entry, which the config must not keep. */
    const json_t *lists[] = { x->volumes, vols };
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        json_t *e;
        json_array_foreach(lists[l], i, e)
            json_array_append_new(all, json_deep_copy(e));
    }
    if (json_array_size(all) > 64)
        return sbx__set_error(err, SBX_EINVAL, "at most 64 volumes a box (the config's and the "
                                               "box's together)");
    long long shm_size = x->shm_size;
    int rc = sbx__linux_caps_parse(x->cap_add, "linux provider: cap_add", net_host, names, err);
    for (size_t i = 0; rc == SBX_OK && i < sbx_spec_metadata_count(spec); i++) {
        const char *k, *v;
        sbx_spec_metadata_at(spec, i, &k, &v);
        if (!strcmp(k, "sbx.cap_add")) {
            _cleanup_json_ json_t *list = json_array();
            _cleanup_free_ char *copy = strdup(v);
            if (!list || !copy)
                return sbx__set_error(err, SBX_ENOMEM, "out of memory");
            for (char *save = NULL, *t = strtok_r(copy, ",", &save); t;
                 t = strtok_r(NULL, ",", &save))
                json_array_append_new(list, json_string(t));
            rc = sbx__linux_caps_parse(list, "metadata sbx.cap_add", net_host, names, err);
        } else if (!strcmp(k, "sbx.shm_size")) {
            _cleanup_json_ json_t *n = json_string(v);
            rc = sbx__linux_shm_parse(n, "metadata sbx.shm_size", &shm_size, err);
        }
    }
    if (rc == SBX_OK && caps)
        rc = sbx__linux_caps_parse(caps, "provider_options.cap_add", net_host, names, err);
    if (rc < 0)
        return rc;
    if (shm > 0)
        shm_size = shm;
    if ((json_array_size(all) && json_object_set(desc, "volumes", all) < 0) ||
        (json_array_size(names) && json_object_set(desc, "cap_add", names) < 0) ||
        (shm_size > 0 && json_object_set_new(desc, "shm_size", json_integer(shm_size)) < 0))
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    return SBX_OK;
}
