/*
 * GPUs for linux boxes through CDI, the Container Device Interface
 * (https://github.com/cncf-tags/container-device-interface): the spec files
 * `nvidia-ctk cdi generate` (and other vendors' tools) write under /etc/cdi
 * and /var/run/cdi name, per device, the device nodes, mounts, environment
 * and hooks a container needs to use it. Podman and Docker apply them; so
 * does the linux provider, for a spec's resources.gpu.
 *
 * Everything in those files is input: read without following links, from
 * directories and files owned by root or the caller that nobody else can
 * write (a CDI file decides which host files every GPU box sees), bounded in
 * size and count, parsed with jansson (JSON) or sbx's libyaml reader (YAML),
 * and checked field by field. The result handed to the shim is a small
 * normalised description; the shim opens every host path again and checks
 * the device numbers before it binds anything (see src/shim/box.c).
 *
 * Hooks are never run (docs/providers/linux.md says why); they are counted,
 * so the record of a create can say what was left out.
 */
#include "providers/linux/linux.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define CDI_MAX_FILE_BYTES (4u << 20)
#define CDI_MAX_FILES_PER_DIR 256
#define CDI_MAX_DEVICES 1024
#define CDI_MAX_EDITS 1024 /* entries of one list of one containerEdits */
#define CDI_MAX_NAME 253

const char *const sbx__cdi_default_dirs[] = { "/etc/cdi", "/var/run/cdi", NULL };

/* --- parsing one spec ------------------------------------------------------ */

static int perr(sbx_error **err, const char *shown, const char *fmt, const char *what)
{
    return sbx__set_error(err, SBX_EINVAL, "CDI spec %s: %s%s", shown, fmt, what ? what : "");
}

/* A path of at most PATH_MAX bytes, absolute, without "." or ".." components. */
static bool abs_path_ok(const char *p)
{
    if (!p || p[0] != '/' || strlen(p) >= PATH_MAX)
        return false;
    for (const char *s = p; *s;) {
        while (*s == '/')
            s++;
        size_t n = strcspn(s, "/");
        if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        s += n;
    }
    return true;
}

/* CDI's kind: vendor (a domain-like name) '/' class. */
static bool kind_ok(const char *k)
{
    const char *slash = k ? strchr(k, '/') : NULL;
    if (!slash || slash == k || !slash[1] || strlen(k) > CDI_MAX_NAME || strchr(slash + 1, '/'))
        return false;
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    if (!strchr(alnum, k[0]) || !strchr(alnum, slash[1]))
        return false;
    size_t vn = (size_t)(slash - k);
    for (size_t i = 0; i < vn; i++)
        if (!strchr(alnum, k[i]) && k[i] != '.' && k[i] != '-')
            return false;
    for (const char *c = slash + 1; *c; c++)
        if (!strchr(alnum, *c) && *c != '.' && *c != '-' && *c != '_')
            return false;
    return true;
}

/* A device name: letters, digits, '_', '.', ':', '-', starting with a letter or digit. */
bool sbx__cdi_name_ok(const char *n)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    if (!n || !*n || strlen(n) > CDI_MAX_NAME || !strchr(alnum, n[0]))
        return false;
    for (const char *c = n; *c; c++)
        if (!strchr(alnum, *c) && !strchr("_.:-", *c))
            return false;
    return true;
}

static const json_t *list_of(const json_t *edits, const char *key, bool *bad)
{
    const json_t *v = json_object_get(edits, key);
    if (!v || json_is_null(v))
        return NULL;
    if (!json_is_array(v) || json_array_size(v) > CDI_MAX_EDITS)
        *bad = true;
    return v;
}

static int str_field(const json_t *o, const char *key, bool required, const char **out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = NULL;
        return required ? -1 : 0;
    }
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return -1;
    *out = json_string_value(v);
    return 0;
}

/*
 * One containerEdits object into its normalised form:
 *   {"env": ["K=V"...], "devices": [{path, host_path, type, major, minor}],
 *    "mounts": [{host_path, container_path, rw, recursive}], "hooks": N}
 * type is "c" or "b" or absent (any device node); major/minor -1 when absent.
 */
static int parse_edits(const json_t *e, const char *shown, const char *where, json_t **out,
                       sbx_error **err)
{
    _cleanup_json_ json_t *n = json_pack("{s:[], s:[], s:[], s:i}", "env", "devices", "mounts",
                                          "hooks", 0);
    if (!n)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    if (!e || json_is_null(e)) {
        *out = steal_pointer(&n);
        return SBX_OK;
    }
    if (!json_is_object(e))
        return perr(err, shown, "containerEdits must be a mapping in ", where);
    bool bad = false;
    const json_t *env = list_of(e, "env", &bad), *nodes = list_of(e, "deviceNodes", &bad),
                 *mounts = list_of(e, "mounts", &bad), *hooks = list_of(e, "hooks", &bad);
    if (bad)
        return perr(err, shown,
                    "env, deviceNodes, mounts and hooks must be lists of at most 1024 entries in ",
                    where);
    size_t i;
    json_t *v;
    json_array_foreach(env, i, v)
    {
        const char *s = json_string_value(v);
        const char *eq = s ? strchr(s, '=') : NULL;
        if (!eq || eq == s || strlen(s) != json_string_length(v) || strlen(s) > 65536)
            return perr(err, shown, "an env entry is not KEY=VALUE in ", where);
        json_array_append_new(json_object_get(n, "env"), json_string(s));
    }
    json_array_foreach(nodes, i, v)
    {
        const char *path, *host, *type, *perms;
        if (!json_is_object(v) || str_field(v, "path", true, &path) < 0 || !abs_path_ok(path) ||
            str_field(v, "hostPath", false, &host) < 0 || (host && !abs_path_ok(host)))
            return perr(err, shown,
                        "a deviceNode needs an absolute path (and hostPath, when given, must be "
                        "absolute; no '.' or '..' components) in ",
                        where);
        if (str_field(v, "type", false, &type) < 0 ||
            (type && *type && strcmp(type, "c") && strcmp(type, "b") && strcmp(type, "u")))
            return perr(err, shown,
                        "a deviceNode's type must be \"c\", \"u\" or \"b\" (sbx gives boxes "
                        "character and block devices only) in ",
                        where);
        if (str_field(v, "permissions", false, &perms) < 0 ||
            (perms && strspn(perms, "rwm") != strlen(perms)))
            return perr(err, shown, "a deviceNode's permissions must be letters of \"rwm\" in ",
                        where);
        json_int_t mm[2] = { -1, -1 };
        static const char *const mk[] = { "major", "minor" };
        for (int k = 0; k < 2; k++) {
            const json_t *x = json_object_get(v, mk[k]);
            if (x && !json_is_null(x)) {
                if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                    json_integer_value(x) > 0xFFFFF)
                    return perr(err, shown,
                                "a deviceNode's major and minor must be integers from 0 to "
                                "1048575 in ",
                                where);
                mm[k] = json_integer_value(x);
            }
        }
        /* "u" (unbuffered character device) is a character device to stat(2). */
        const char *t = type && *type ? (!strcmp(type, "b") ? "b" : "c") : NULL;
        json_array_append_new(json_object_get(n, "devices"),
                              json_pack("{s:s, s:s, s:s?, s:I, s:I}", "path", path, "host_path",
                                        host ? host : path, "type", t, "major", mm[0], "minor",
                                        mm[1]));
    }
    json_array_foreach(mounts, i, v)
    {
        const char *host, *cpath, *type;
        if (!json_is_object(v) || str_field(v, "hostPath", true, &host) < 0 ||
            !abs_path_ok(host) || str_field(v, "containerPath", true, &cpath) < 0 ||
            !abs_path_ok(cpath))
            return perr(err, shown,
                        "a mount needs an absolute hostPath and containerPath (no '.' or '..' "
                        "components) in ",
                        where);
        if (str_field(v, "type", false, &type) < 0 ||
            (type && *type && strcmp(type, "bind") && strcmp(type, "rbind")))
            return perr(err, shown,
                        "a mount's type must be \"bind\" (sbx makes bind mounts only; a "
                        "filesystem mount is not something a GPU spec needs) in ",
                        where);
        const json_t *opts = json_object_get(v, "options");
        if (opts && !json_is_null(opts) && (!json_is_array(opts) || json_array_size(opts) > 64))
            return perr(err, shown, "a mount's options must be a list of strings in ", where);
        /* Read-only unless the spec says "rw"; "rbind" binds what is mounted below too. */
        bool rw = false, rec = type && !strcmp(type, "rbind");
        size_t k;
        json_t *o;
        json_array_foreach(opts, k, o)
        {
            const char *s = json_string_value(o);
            if (!s)
                return perr(err, shown, "a mount's options must be a list of strings in ", where);
            if (!strcmp(s, "rw"))
                rw = true;
            else if (!strcmp(s, "ro"))
                rw = false;
            else if (!strcmp(s, "rbind"))
                rec = true;
        }
        json_array_append_new(json_object_get(n, "mounts"),
                              json_pack("{s:s, s:s, s:b, s:b}", "host_path", host,
                                        "container_path", cpath, "rw", rw, "recursive", rec));
    }
    json_array_foreach(hooks, i, v)
    {
        const char *name, *path;
        if (!json_is_object(v) || str_field(v, "hookName", true, &name) < 0 ||
            str_field(v, "path", true, &path) < 0 || !abs_path_ok(path))
            return perr(err, shown, "a hook needs a hookName and an absolute path in ", where);
    }
    json_object_set_new(n, "hooks", json_integer((json_int_t)json_array_size(hooks)));
    *out = steal_pointer(&n);
    return SBX_OK;
}

int sbx__cdi_parse(const char *text, size_t len, const char *shown, json_t **out,
                   sbx_error **err)
{
    if (len > CDI_MAX_FILE_BYTES)
        return sbx__set_error(err, SBX_EINVAL, "CDI spec %s: larger than %u bytes", shown,
                              CDI_MAX_FILE_BYTES);
    if (strlen(text) != len)
        return sbx__set_error(err, SBX_EINVAL, "CDI spec %s: holds a NUL byte", shown);
    json_t *doc_raw = NULL;
    sbx_error *pe = NULL;
    if (sbx__parse_config_text(text, &doc_raw, &pe) < 0) {
        sbx_error_prefix(pe, "CDI spec %s", shown);
        return sbx__fail(err, pe);
    }
    _cleanup_json_ json_t *doc = doc_raw;
    const char *ver, *kind;
    if (!json_is_object(doc) || str_field(doc, "cdiVersion", true, &ver) < 0 || !*ver)
        return perr(err, shown, "not a CDI spec: a mapping with cdiVersion, kind and devices "
                                "is expected", NULL);
    if (str_field(doc, "kind", true, &kind) < 0 || !kind_ok(kind))
        return perr(err, shown, "kind must be vendor/class, e.g. nvidia.com/gpu", NULL);
    const json_t *devs = json_object_get(doc, "devices");
    if (!json_is_array(devs) || json_array_size(devs) == 0 ||
        json_array_size(devs) > CDI_MAX_DEVICES)
        return perr(err, shown, "devices must be a list of 1 to 1024 devices", NULL);
    _cleanup_json_ json_t *n = json_pack("{s:s, s:{}}", "kind", kind, "devices");
    json_t *edits = NULL;
    if (!n)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = parse_edits(json_object_get(doc, "containerEdits"), shown, "the top level", &edits,
                         err);
    if (rc < 0)
        return rc;
    json_object_set_new(n, "edits", edits);
    size_t i;
    json_t *d;
    json_array_foreach(devs, i, d)
    {
        const char *name;
        if (!json_is_object(d) || str_field(d, "name", true, &name) < 0 || !sbx__cdi_name_ok(name))
            return perr(err, shown,
                        "every device needs a name of letters, digits, '_', '.', ':' and '-'",
                        NULL);
        if (json_object_get(json_object_get(n, "devices"), name))
            return perr(err, shown, "two devices are named ", name);
        _cleanup_free_ char *where = sbx__printf("device %s", name);
        if (!where)
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        if ((rc = parse_edits(json_object_get(d, "containerEdits"), shown, where, &edits, err)) <
            0)
            return rc;
        json_object_set_new(json_object_get(n, "devices"), name, edits);
    }
    *out = steal_pointer(&n);
    return SBX_OK;
}

/* --- reading the directories ----------------------------------------------- */

/*
 * Whether `st` may be trusted as CDI config: root's or the caller's, and
 * nobody else may write it (a sticky directory does not help here: files in
 * it are still chosen by whoever made them).
 */
static int trusted(const struct stat *st, const char *what, sbx_error **err)
{
    uid_t me = geteuid();
    if ((st->st_uid != 0 && st->st_uid != me) || (st->st_mode & 022))
        return sbx__set_error(err, SBX_EPERM,
                              "CDI spec %s is owned by uid %u with mode %04o: it must be root's "
                              "(or the caller's) and writable by nobody else, since it decides "
                              "which host files GPU boxes see; fix its owner or mode",
                              what, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777));
    return SBX_OK;
}

/* Not an sbx code: a CDI directory that does not exist, which counts as empty. */
#define CDI_MISSING (-1000)

/* Every directory from / down to `dir` trusted; an O_DIRECTORY fd of it, CDI_MISSING, or error. */
static int open_dir(const char *dir, sbx_error **err)
{
    if (!abs_path_ok(dir))
        return sbx__set_error(err, SBX_EINVAL, "CDI spec directory %s is not an absolute path",
                              dir);
    _cleanup_close_ int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot open /");
    for (const char *s = dir;;) {
        while (*s == '/')
            s++;
        size_t len = strcspn(s, "/");
        if (!len)
            break;
        char c[NAME_MAX + 1];
        if (len > NAME_MAX)
            return sbx__set_error(err, SBX_EINVAL, "CDI spec directory %s: a name is too long",
                                  dir);
        memcpy(c, s, len);
        c[len] = 0;
        s += len;
        while (*s == '/')
            s++;
        bool last = !*s;
        int next = openat(fd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (next < 0 && errno == ENOENT)
            return CDI_MISSING;
        /* /var/run is a link to /run on most systems: a link of root's is followed. */
        if (next < 0 && errno == ENOTDIR) {
            struct stat ls;
            if (fstatat(fd, c, &ls, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(ls.st_mode) &&
                ls.st_uid == 0)
                next = openat(fd, c, O_PATH | O_DIRECTORY | O_CLOEXEC);
            if (next < 0 && errno == ENOENT)
                return CDI_MISSING;
        }
        if (next < 0)
            return sbx__set_errno(err, SBX_EINVAL, errno, "CDI spec directory %s: cannot open %s",
                                  dir, c);
        close(fd);
        fd = next;
        struct stat st;
        if (fstat(fd, &st) < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "CDI spec directory %s", dir);
        /* Sticky world-writable ancestors (/tmp) are fine: others cannot rename ours in them. */
        if (last || !(st.st_mode & S_ISVTX)) {
            _cleanup_free_ char *what = sbx__printf("directory %s (at %s)", dir, c);
            if (trusted(&st, what ? what : dir, err) < 0)
                return SBX_EPERM;
        }
    }
    int rd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rd < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot read CDI spec directory %s", dir);
    return rd;
}

static bool spec_name(const char *n)
{
    size_t l = strlen(n);
    return n[0] != '.' && ((l > 5 && !strcmp(n + l - 5, ".json")) ||
                           (l > 5 && !strcmp(n + l - 5, ".yaml")) ||
                           (l > 4 && !strcmp(n + l - 4, ".yml")));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads one file of `dirfd` as a trusted CDI spec. */
static int load_file(int dirfd, const char *dir, const char *name, json_t **out, sbx_error **err)
{
    _cleanup_free_ char *shown = sbx__printf("%s/%s", dir, name);
    if (!shown)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return sbx__set_errno(err, SBX_EINVAL, errno, "CDI spec %s: cannot open it (a link?)",
                              shown);
    if (!S_ISREG(st.st_mode))
        return sbx__set_error(err, SBX_EINVAL, "CDI spec %s is not a regular file", shown);
    int rc = trusted(&st, shown, err);
    if (rc < 0)
        return rc;
    if ((uint64_t)st.st_size > CDI_MAX_FILE_BYTES)
        return sbx__set_error(err, SBX_EINVAL, "CDI spec %s is larger than %u bytes", shown,
                              CDI_MAX_FILE_BYTES);
    _cleanup_free_ char *buf = malloc((size_t)st.st_size + 1);
    if (!buf)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "reading CDI spec %s", shown);
        if (r == 0)
            break;
        got += (size_t)r;
    }
    buf[got] = 0;
    return sbx__cdi_parse(buf, got, shown, out, err);
}

/*
 * Every spec of every directory, in order: {kind: {device name: {"edits":
 * the device's, "spec": its spec's top-level edits, "file": where}}}. A later directory's
 * device overrides an earlier one of the same kind and name, as CDI gives
 * /var/run/cdi priority over /etc/cdi.
 */
static int load_all(const char *const *dirs, json_t *kinds, json_t *files, sbx_error **err)
{
    for (size_t d = 0; dirs && dirs[d]; d++) {
        int dfd = open_dir(dirs[d], err);
        if (dfd == CDI_MISSING)
            continue;
        if (dfd < 0)
            return dfd;
        DIR *dp = fdopendir(dfd);
        if (!dp) {
            close(dfd);
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
        char *names[CDI_MAX_FILES_PER_DIR];
        size_t nn = 0;
        struct dirent *de;
        int rc = SBX_OK;
        while ((de = readdir(dp))) {
            if (!spec_name(de->d_name))
                continue;
            if (nn == CDI_MAX_FILES_PER_DIR) {
                rc = sbx__set_error(err, SBX_EINVAL,
                                    "CDI spec directory %s holds more than %d spec files",
                                    dirs[d], CDI_MAX_FILES_PER_DIR);
                break;
            }
            if (!(names[nn] = strdup(de->d_name))) {
                rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
                break;
            }
            nn++;
        }
        qsort(names, nn, sizeof(char *), cmp_str);
        for (size_t i = 0; i < nn && rc == SBX_OK; i++) {
            json_t *spec = NULL;
            rc = load_file(dirfd(dp), dirs[d], names[i], &spec, err);
            if (rc < 0)
                break;
            const char *kind = json_string_value(json_object_get(spec, "kind"));
            json_t *k = json_object_get(kinds, kind);
            if (!k) {
                k = json_object();
                json_object_set_new(kinds, kind, k);
            }
            _cleanup_free_ char *shown = sbx__printf("%s/%s", dirs[d], names[i]);
            const char *dn;
            json_t *e;
            json_object_foreach(json_object_get(spec, "devices"), dn, e)
            {
                /* Each device carries its spec's top-level edits along. */
                json_object_set_new(k, dn, json_pack("{s:O, s:O, s:s?}", "edits", e, "spec",
                                                     json_object_get(spec, "edits"), "file",
                                                     shown));
            }
            json_array_append_new(files, json_string(shown ? shown : names[i]));
            json_decref(spec);
        }
        for (size_t i = 0; i < nn; i++)
            free(names[i]);
        closedir(dp);
        if (rc < 0)
            return rc;
    }
    return SBX_OK;
}

/* Index names ("0", "1", "0:1" for MIG) sort numerically, before other names. */
static bool index_name(const char *n)
{
    return strspn(n, "0123456789:") == strlen(n) && isdigit((unsigned char)n[0]);
}

static int cmp_dev(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    while (*x && *y) {
        if (isdigit((unsigned char)*x) && isdigit((unsigned char)*y)) {
            unsigned long long u = strtoull(x, (char **)&x, 10), v = strtoull(y, (char **)&y, 10);
            if (u != v)
                return u < v ? -1 : 1;
            continue;
        }
        if (*x != *y)
            return (unsigned char)*x - (unsigned char)*y;
        x++, y++;
    }
    return (unsigned char)*x - (unsigned char)*y;
}

static const char *kind_list(json_t *kinds, char *buf, size_t n)
{
    size_t used = 0;
    const char *k;
    json_t *v;
    buf[0] = 0;
    json_object_foreach(kinds, k, v)
    {
        int w = snprintf(buf + used, n - used, "%s%s (%zu)", used ? ", " : "", k,
                         json_object_size(v));
        if (w < 0 || (size_t)w >= n - used)
            break;
        used += (size_t)w;
    }
    return used ? buf : "none";
}

/* Appends the normalised edits `e` to `acc`. */
static void merge_edits(json_t *acc, const json_t *e)
{
    static const char *const lists[] = { "env", "devices", "mounts" };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(lists); i++)
        json_array_extend(json_object_get(acc, lists[i]), json_object_get(e, lists[i]));
    json_object_set_new(acc, "hooks",
                        json_integer(json_integer_value(json_object_get(acc, "hooks")) +
                                     json_integer_value(json_object_get(e, "hooks"))));
}

/* The host side of each device node: it must exist and be what the spec says. */
static int check_nodes(json_t *acc, sbx_error **err)
{
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(acc, "devices"), i, d)
    {
        const char *host = json_string_value(json_object_get(d, "host_path"));
        const char *type = json_string_value(json_object_get(d, "type"));
        json_int_t maj = json_integer_value(json_object_get(d, "major"));
        json_int_t min = json_integer_value(json_object_get(d, "minor"));
        struct stat st;
        if (stat(host, &st) < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno,
                                  "the CDI device node %s is missing on the host", host);
        bool chr = S_ISCHR(st.st_mode), blk = S_ISBLK(st.st_mode);
        if ((!chr && !blk) || (type && ((type[0] == 'c') != chr)))
            return sbx__set_error(err, SBX_ECREATE,
                                  "the CDI device node %s is not a %s device on the host", host,
                                  type && type[0] == 'b' ? "block" : "character");
        if ((maj >= 0 && (json_int_t)major(st.st_rdev) != maj) ||
            (min >= 0 && (json_int_t)minor(st.st_rdev) != min))
            return sbx__set_error(err, SBX_ECREATE,
                                  "the CDI device node %s is %u:%u on the host, not the %lld:%lld "
                                  "its spec names",
                                  host, major(st.st_rdev), minor(st.st_rdev), (long long)maj,
                                  (long long)min);
        /* The shim checks the node it binds against exactly these. */
        json_object_set_new(d, "type", json_string(chr ? "c" : "b"));
        json_object_set_new(d, "major", json_integer(major(st.st_rdev)));
        json_object_set_new(d, "minor", json_integer(minor(st.st_rdev)));
    }
    json_array_foreach(json_object_get(acc, "mounts"), i, d)
    {
        const char *host = json_string_value(json_object_get(d, "host_path"));
        struct stat st;
        if (stat(host, &st) < 0)
            return sbx__set_errno(err, SBX_ECREATE, errno,
                                  "the CDI mount source %s is missing on the host", host);
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
            return sbx__set_error(err, SBX_ECREATE,
                                  "the CDI mount source %s is neither a file nor a directory",
                                  host);
    }
    return SBX_OK;
}

int sbx__cdi_resolve(const char *const *dirs, long long count, const char *gpu_type,
                     json_t **out, sbx_error **err)
{
    if (!dirs)
        dirs = sbx__cdi_default_dirs;
    _cleanup_json_ json_t *kinds = json_object(), *files = json_array();
    _cleanup_json_ json_t *acc = json_pack("{s:[], s:[], s:[], s:i, s:[]}", "env", "devices",
                                            "mounts", "hooks", 0, "names");
    if (!kinds || !files || !acc)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    int rc = load_all(dirs, kinds, files, err);
    if (rc < 0)
        return rc;
    char dirs_text[512] = "";
    for (size_t i = 0, u = 0; dirs[i] && u < sizeof(dirs_text); i++)
        u += (size_t)snprintf(dirs_text + u, sizeof(dirs_text) - u, "%s%s", i ? ", " : "",
                              dirs[i]);
    char found[512];
    /*
     * gpu_type: a CDI kind ("amd.com/gpu"), or fully qualified device names
     * ("nvidia.com/gpu=0,nvidia.com/gpu=GPU-..."); without a '/', a model
     * name for other providers, which the linux provider ignores as the
     * reference's docker provider does. Default kind: nvidia.com/gpu.
     */
    const char *kind = "nvidia.com/gpu";
    _cleanup_free_ char *type_copy = gpu_type && strchr(gpu_type, '/') ? strdup(gpu_type) : NULL;
    const char *chosen[CDI_MAX_DEVICES];
    const char *chosen_kind[CDI_MAX_DEVICES];
    size_t n = 0;
    if (type_copy && strchr(type_copy, '=')) {
        char *save = NULL;
        for (char *q = strtok_r(type_copy, ",", &save); q; q = strtok_r(NULL, ",", &save)) {
            while (*q == ' ')
                q++;
            char *eq = strchr(q, '=');
            if (!eq)
                return sbx__set_error(err, SBX_ECREATE,
                                      "resources.gpu_type '%s': each entry must be a qualified "
                                      "CDI device name, KIND=NAME (e.g. nvidia.com/gpu=0)",
                                      gpu_type);
            *eq = 0;
            json_t *dev = json_object_get(json_object_get(kinds, q), eq + 1);
            if (!dev)
                return sbx__set_error(err, SBX_ECREATE,
                                      "resources.gpu_type names the CDI device %s=%s, which no "
                                      "spec in %s defines (kinds found: %s)",
                                      q, eq + 1, dirs_text,
                                      kind_list(kinds, found, sizeof(found)));
            for (size_t j = 0; j < n; j++)
                if (!strcmp(chosen_kind[j], q) && !strcmp(chosen[j], eq + 1))
                    return sbx__set_error(err, SBX_ECREATE,
                                          "resources.gpu_type names the CDI device %s=%s twice",
                                          q, eq + 1);
            if (n == CDI_MAX_DEVICES)
                break;
            chosen_kind[n] = q;
            chosen[n++] = eq + 1;
        }
        if ((long long)n < count)
            return sbx__set_error(err, SBX_ECREATE,
                                  "resources.gpu is %lld but resources.gpu_type names only %zu "
                                  "CDI device%s",
                                  count, n, n == 1 ? "" : "s");
    } else {
        if (type_copy)
            kind = type_copy;
        json_t *devs = json_object_get(kinds, kind);
        /*
         * The candidates: devices named by index ("0", "1", MIG "0:1") when
         * the spec has any, since nvidia-ctk may also name the same GPUs by
         * UUID; else every name. "all" is never one GPU.
         */
        bool have_index = false;
        const char *dn;
        json_t *e;
        json_object_foreach(devs, dn, e) have_index |= index_name(dn);
        json_object_foreach(devs, dn, e)
        {
            if (!strcmp(dn, "all") || (have_index && !index_name(dn)) || n == CDI_MAX_DEVICES)
                continue;
            chosen_kind[n] = kind;
            chosen[n++] = dn;
        }
        if ((long long)n < count)
            return sbx__set_error(err, SBX_ECREATE,
                                  "resources.gpu is %lld but the CDI specs in %s define %zu %s "
                                  "device%s (kinds found: %s); generate the specs (nvidia-ctk "
                                  "cdi generate --output=/etc/cdi/nvidia.yaml), ask for fewer, "
                                  "or name another kind in gpu_type",
                                  count, dirs_text, n, kind, n == 1 ? "" : "s",
                                  kind_list(kinds, found, sizeof(found)));
        qsort(chosen, n, sizeof(char *), cmp_dev);
    }
    /* The spec-wide edits once per spec file, then each device's. */
    _cleanup_json_ json_t *seen = json_object();
    for (size_t i = 0; i < (size_t)count; i++) {
        json_t *dev = json_object_get(json_object_get(kinds, chosen_kind[i]), chosen[i]);
        const char *file = json_string_value(json_object_get(dev, "file"));
        if (file && !json_object_get(seen, file)) {
            json_object_set_new(seen, file, json_true());
            merge_edits(acc, json_object_get(dev, "spec"));
        }
        merge_edits(acc, json_object_get(dev, "edits"));
        json_array_append_new(json_object_get(acc, "names"),
                              json_sprintf("%s=%s", chosen_kind[i], chosen[i]));
    }
    if ((rc = check_nodes(acc, err)) < 0)
        return rc;
    *out = steal_pointer(&acc);
    return SBX_OK;
}
