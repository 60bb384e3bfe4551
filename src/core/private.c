/*
 * Private state: the directories sbx keeps its records in, and the records
 * themselves, are input like any other. Another local user may have made a
 * directory sbx meant to make (/tmp/sbx-<uid> is guessable), or planted a
 * file in one; a record names processes to signal, cgroups to empty and the
 * environment of every command. So nothing is trusted before it is checked:
 * every directory on the way is owned by root or the caller and writable by
 * nobody else (a sticky world-writable ancestor such as /tmp is fine: others
 * cannot rename or remove what is ours in it), the directory itself belongs
 * to the caller, and a record is a regular file of the caller's that nobody
 * else can write, read without following a link and bounded in size.
 */
#include "core/internal.h"

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

/*
 * "uid 1002 (alice)", for messages. /etc/passwd is read directly: NSS does
 * not work in the statically linked shim, and a name is only a courtesy.
 */
static void uid_text(uid_t uid, char *buf, size_t n)
{
    snprintf(buf, n, "uid %u", (unsigned)uid);
    FILE *f = fopen("/etc/passwd", "re");
    char line[1024];
    while (f && fgets(line, sizeof(line), f)) {
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        char *end;
        unsigned long u = strtoul(c2 + 1, &end, 10);
        if (end != c2 + 1 && *end == ':' && u == (unsigned long)uid) {
            *c1 = 0;
            snprintf(buf, n, "uid %u (%.64s)", (unsigned)uid, line);
            break;
        }
    }
    if (f)
        fclose(f);
}

/*
 * The canonical form of an absolute path whose tail may not exist yet: the
 * longest existing prefix through realpath(), the rest appended. `..` in the
 * missing part is refused (it would be resolved against a directory that
 * does not exist).
 */
char *sbx__canonical_path(const char *path)
{
    _cleanup_free_ char *copy = strdup(path);
    if (!copy)
        return NULL;
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/')
        copy[--len] = 0;
    /* `cut`: where the part that does not exist (yet) begins. */
    for (size_t cut = len;;) {
        char saved = copy[cut];
        copy[cut] = 0;
        char *real = realpath(cut ? copy : "/", NULL);
        copy[cut] = saved;
        if (!real && errno != ENOENT)
            return NULL;
        if (real) {
            const char *rest = copy + cut;
            size_t rl = strlen(rest);
            if (strstr(rest, "/../") || strstr(rest, "/./") ||
                (rl >= 3 && !strcmp(rest + rl - 3, "/..")) ||
                (rl >= 2 && !strcmp(rest + rl - 2, "/."))) {
                free(real);
                errno = EINVAL;
                return NULL;
            }
            char *out =
                !strcmp(real, "/") && *rest ? strdup(rest) : sbx__printf("%s%s", real, rest);
            free(real);
            return out;
        }
        if (cut == 0)
            return NULL;
        while (cut > 0 && copy[cut - 1] != '/')
            cut--;
        if (cut > 0)
            cut--; /* onto the '/' before the missing name */
    }
}

int sbx__private_dir(const char *path, bool create, char **canonical_out, sbx_error **err)
{
    if (!path || path[0] != '/')
        return sbx__set_error(err, SBX_EINVAL,
                              "the state directory '%s' must be an absolute path (a relative one "
                              "would build a tree in whatever directory sbx runs from)",
                              path ? path : "(null)");
    _cleanup_free_ char *canon = sbx__canonical_path(path);
    if (!canon)
        return sbx__set_errno(err, errno == EINVAL ? SBX_EINVAL : SBX_EIO, errno,
                              "cannot resolve the state directory %s", path);
    uid_t me = geteuid();
    _cleanup_close_ int cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot open /");
    /* Every component from the root down: a link planted anywhere on the way is refused. */
    _cleanup_free_ char *walk = strdup(canon);
    if (!walk)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    char *save = NULL;
    char *name = strtok_r(walk, "/", &save);
    size_t done = 1; /* bytes of canon walked so far ("/") */
    while (name) {
        char *next = strtok_r(NULL, "/", &save);
        bool last = next == NULL;
        done += strlen(name) + (done > 1);
        _cleanup_free_ char *here = strndup(canon, done);
        struct stat st;
        if (fstatat(cur, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT || !create)
                return sbx__set_errno(err, errno == ENOENT ? SBX_ENOENT : SBX_EIO, errno,
                                      "cannot use the state directory %s", here ? here : canon);
            /* Ours from here on: 0700, whatever the umask left. */
            if (mkdirat(cur, name, 0700) < 0 && errno != EEXIST)
                return sbx__set_errno(err, SBX_EIO, errno,
                                      "cannot create the state directory %s (set SBX_STATE_DIR "
                                      "to a directory of yours)",
                                      here ? here : canon);
            if (fstatat(cur, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return sbx__set_errno(err, SBX_EIO, errno, "cannot stat %s", here ? here : canon);
        }
        char who[128], mine[128];
        uid_text(st.st_uid, who, sizeof(who));
        uid_text(me, mine, sizeof(mine));
        if (!S_ISDIR(st.st_mode))
            return sbx__set_error(err, SBX_EINVAL,
                                  "%s, on the way to the state directory %s, is not a directory "
                                  "(a link or a file someone put there?); remove it or set "
                                  "SBX_STATE_DIR to a directory of yours",
                                  here ? here : name, canon);
        if (st.st_uid != me && last)
            return sbx__set_error(err, SBX_EPERM,
                                  "the state directory %s belongs to %s, not to you (%s): "
                                  "another user may have made it to plant box records; sbx "
                                  "will not use it. Remove it (as its owner or root), or set "
                                  "SBX_STATE_DIR (or XDG_RUNTIME_DIR) to a directory of yours",
                                  canon, who, mine);
        if (st.st_uid != me && st.st_uid != 0)
            return sbx__set_error(err, SBX_EPERM,
                                  "%s, a parent of the state directory %s, belongs to %s, "
                                  "neither you (%s) nor root: its owner could swap what is "
                                  "inside; sbx will not use it. Set SBX_STATE_DIR (or "
                                  "XDG_RUNTIME_DIR) to a directory of yours",
                                  here ? here : name, canon, who, mine);
        if ((st.st_mode & 022) && (last || !(st.st_mode & S_ISVTX)))
            return sbx__set_error(err, SBX_EPERM,
                                  "%s is writable by %s (mode %04o, owner %s): anyone who can "
                                  "write there can plant box records; sbx will not use it. Run "
                                  "`chmod go-w %s` (sbx makes its directories 0700), or set "
                                  "SBX_STATE_DIR to a directory of yours",
                                  here ? here : name, (st.st_mode & 002) ? "others" : "its group",
                                  (unsigned)(st.st_mode & 07777), who, here ? here : name);
        int fd = openat(cur, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return sbx__set_errno(err, SBX_EIO, errno, "cannot open %s", here ? here : canon);
        /* The directory opened is the one checked (not swapped in between). */
        struct stat st2;
        if (fstat(fd, &st2) < 0 || st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) {
            close(fd);
            return sbx__set_error(err, SBX_EPERM, "%s changed while sbx checked it; retry",
                                  here ? here : canon);
        }
        close(cur);
        cur = fd;
        name = next;
    }
    if (canonical_out)
        *canonical_out = steal_pointer(&canon);
    return SBX_OK;
}

int sbx__read_private_file(int dirfd, const char *name, const char *shown, size_t max, char **data,
                           size_t *len, sbx_error **err)
{
    _cleanup_close_ int fd =
        openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return sbx__set_errno(err, errno == ENOENT ? SBX_ENOENT : SBX_EIO, errno,
                              "cannot open %s%s", shown,
                              errno == ELOOP ? " (a symbolic link: refused)" : "");
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sbx__set_errno(err, SBX_EIO, errno, "cannot stat %s", shown);
    char who[128];
    uid_text(st.st_uid, who, sizeof(who));
    if (!S_ISREG(st.st_mode))
        return sbx__set_error(err, SBX_EINVAL, "%s is not a regular file: refused", shown);
    if (st.st_uid != geteuid())
        return sbx__set_error(err, SBX_EPERM,
                              "%s belongs to %s, not to you: a record someone else planted is "
                              "refused (remove it)",
                              shown, who);
    if (st.st_mode & 022)
        return sbx__set_error(err, SBX_EPERM,
                              "%s is writable by group or others (mode %04o): refused (remove it, "
                              "or chmod go-w it)",
                              shown, (unsigned)(st.st_mode & 07777));
    if ((uint64_t)st.st_size > max)
        return sbx__set_error(err, SBX_EINVAL, "%s is %lld bytes, more than a record may be (%zu)",
                              shown, (long long)st.st_size, max);
    char *buf = malloc(max + 1);
    if (!buf)
        return sbx__set_error(err, SBX_ENOMEM, "out of memory");
    size_t n = 0;
    for (;;) {
        ssize_t k = read(fd, buf + n, max + 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            int e = errno;
            free(buf);
            return sbx__set_errno(err, SBX_EIO, e, "cannot read %s", shown);
        }
        if (k == 0)
            break;
        n += (size_t)k;
        if (n > max) {
            free(buf);
            return sbx__set_error(err, SBX_EINVAL, "%s grew past %zu bytes while read", shown, max);
        }
    }
    buf[n] = 0;
    *data = buf;
    if (len)
        *len = n;
    return SBX_OK;
}

int sbx__load_private_json(const char *path, size_t max, json_t **out, sbx_error **err)
{
    _cleanup_free_ char *dir = strdup(path);
    char *slash = dir ? strrchr(dir, '/') : NULL;
    if (!slash)
        return sbx__set_error(err, SBX_EINVAL, "%s is not an absolute path", path);
    const char *base = slash + 1;
    *slash = 0;
    _cleanup_close_ int dfd = open(*dir ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return sbx__set_errno(err, errno == ENOENT ? SBX_ENOENT : SBX_EIO, errno, "cannot open %s",
                              *dir ? dir : "/");
    _cleanup_free_ char *text = NULL;
    size_t n = 0;
    int rc = sbx__read_private_file(dfd, base, path, max, &text, &n, err);
    if (rc < 0)
        return rc;
    json_error_t je;
    json_t *j = json_loadb(text, n, 0, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return sbx__set_error(err, SBX_EIO, "%s is not a JSON object: %s", path,
                              j ? "another type" : je.text);
    }
    *out = j;
    return SBX_OK;
}

/*
 * The trusted walk (see internal.h). Who could have put a link where it is:
 * the owner of its directory (who may rename or remove anything in it), and,
 * unless the directory is sticky, anyone else who may write it; in a sticky
 * directory only the link's own owner besides. A link is followed only when
 * every one of them is root or the caller: the kernel's protected_symlinks
 * rule, made strict (systemd's CHASE_SAFE and OpenSSH's StrictModes make the
 * same call). Group-writable counts as writable by others: the group may hold
 * anyone.
 */
static const char *link_untrusted(const struct stat *dir, const struct stat *lnk, uid_t me,
                                  char *why, size_t n)
{
    char who[128];
    if (dir->st_uid != 0 && dir->st_uid != me) {
        uid_text(dir->st_uid, who, sizeof(who));
        snprintf(why, n, "belongs to %s", who);
        return why;
    }
    if (!(dir->st_mode & 022))
        return NULL;
    if ((dir->st_mode & S_ISVTX) && (lnk->st_uid == 0 || lnk->st_uid == me))
        return NULL;
    if (dir->st_mode & S_ISVTX) {
        uid_text(lnk->st_uid, who, sizeof(who));
        snprintf(why, n, "is writable by %s (mode %04o) and the link belongs to %s",
                 (dir->st_mode & 002) ? "others" : "its group", (unsigned)(dir->st_mode & 07777),
                 who);
    } else {
        snprintf(why, n, "is writable by %s (mode %04o)",
                 (dir->st_mode & 002) ? "others" : "its group", (unsigned)(dir->st_mode & 07777));
    }
    return why;
}

/* `walked` + "/" + `comp` (or without the slash after "/"), for messages. */
static char *walked_join(const char *walked, const char *comp)
{
    size_t wl = strlen(walked);
    return sbx__printf("%s%s%s", walked, wl && walked[wl - 1] == '/' ? "" : "/", comp);
}

/* `walked` without its last component ("/" and "." stay). */
static void walked_up(char *walked)
{
    char *s = strrchr(walked, '/');
    if (!s)
        return;
    if (s == walked)
        s[1] = 0;
    else
        *s = 0;
}

#define TRUSTED_MAX_LINKS 40

int sbx__open_trusted(const char *path, bool follow_last, const char *what, sbx_error **err)
{
    if (!path || !*path)
        return sbx__set_error(err, SBX_EINVAL, "%s: an empty path", what);
    uid_t me = geteuid();
    int cur = open(path[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat cst;
    if (cur < 0 || fstat(cur, &cst) < 0) {
        int e = errno;
        if (cur >= 0)
            close(cur);
        return sbx__set_errno(err, SBX_EIO, e, "%s: cannot open %s", what,
                              path[0] == '/' ? "/" : "the current directory");
    }
    char *rest = strdup(path);
    char *walked = strdup(path[0] == '/' ? "/" : ".");
    char *p = rest;
    int links = 0, rc = SBX_OK;
    if (!rest || !walked) {
        rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
        goto out;
    }
    for (;;) {
        while (*p == '/')
            p++;
        if (!*p)
            break; /* the path names `cur` itself */
        size_t len = strcspn(p, "/");
        if (len > NAME_MAX) {
            rc = sbx__set_errno(err, SBX_EINVAL, ENAMETOOLONG, "%s: a component of %s is too long",
                                what, path);
            goto out;
        }
        char comp[NAME_MAX + 1];
        memcpy(comp, p, len);
        comp[len] = 0;
        p += len;
        while (*p == '/')
            p++;
        bool last = !*p;
        if (!strcmp(comp, "."))
            continue;
        /* `..` is the parent of where the walk is (as the kernel's, after a link too). */
        int next = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        _cleanup_free_ char *here = !strcmp(comp, "..") ? NULL : walked_join(walked, comp);
        if (next < 0 || fstat(next, &st) < 0) {
            int e = errno;
            if (next >= 0)
                close(next);
            rc = sbx__set_errno(err, e == ENOENT ? SBX_ENOENT : SBX_EIO, e, "%s: cannot open %s%s",
                                what, here ? here : walked,
                                e == ENOENT ? ": it does not exist" : "");
            goto out;
        }
        if (!strcmp(comp, "..")) {
            walked_up(walked);
        } else if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t tl = readlinkat(next, "", target, sizeof(target) - 1);
            int e = errno;
            close(next);
            if (tl < 0) {
                rc = sbx__set_errno(err, SBX_EIO, e, "%s: cannot read the link %s", what, here);
                goto out;
            }
            target[tl] = 0;
            if (last && !follow_last) {
                rc = sbx__set_error(err, SBX_EPERM,
                                    "%s: %s is a symbolic link (to %s): sbx never follows one at "
                                    "the end of this path; name what it leads to",
                                    what, here, target);
                goto out;
            }
            char why[256];
            if (link_untrusted(&cst, &st, me, why, sizeof(why))) {
                char mine[128];
                uid_text(me, mine, sizeof(mine));
                rc = sbx__set_error(
                    err, SBX_EPERM,
                    "%s: %s is a symbolic link (to %s) in %s, which %s: someone other than root "
                    "and you (%s) could aim it anywhere on the host, so sbx does not follow it. "
                    "Name the path it leads to if you trust it, or keep the data under "
                    "directories only root and you can write",
                    what, here, target, walked, why, mine);
                goto out;
            }
            if (++links > TRUSTED_MAX_LINKS) {
                rc = sbx__set_errno(err, SBX_EINVAL, ELOOP, "%s: more than %d links in %s", what,
                                    TRUSTED_MAX_LINKS, path);
                goto out;
            }
            /* Its target, then what was left of the path. */
            char *nr = sbx__printf("%s/%s", target, p);
            if (!nr) {
                rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
                goto out;
            }
            free(rest);
            rest = p = nr;
            if (target[0] == '/') {
                int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (root < 0 || fstat(root, &cst) < 0) {
                    int e2 = errno;
                    if (root >= 0)
                        close(root);
                    rc = sbx__set_errno(err, SBX_EIO, e2, "%s: cannot open /", what);
                    goto out;
                }
                close(cur);
                cur = root;
                free(walked);
                walked = strdup("/");
                if (!walked) {
                    rc = sbx__set_error(err, SBX_ENOMEM, "out of memory");
                    goto out;
                }
            }
            continue;
        } else {
            if (!last && !S_ISDIR(st.st_mode)) {
                close(next);
                rc = sbx__set_errno(err, SBX_EINVAL, ENOTDIR, "%s: %s is not a directory", what,
                                    here);
                goto out;
            }
            free(walked);
            walked = steal_pointer(&here);
        }
        close(cur);
        cur = next;
        cst = st;
    }
out:
    free(rest);
    free(walked);
    if (rc < 0) {
        close(cur);
        return rc;
    }
    return cur;
}

int sbx__mkdir_trusted(const char *path, mode_t mode, const char *what, sbx_error **err)
{
    sbx_error *e = NULL;
    int fd = sbx__open_trusted(path, true, what, &e);
    if (fd == SBX_ENOENT) {
        /* Its parent first (made the same way), then this one in it, then the walk again. */
        _cleanup_free_ char *pc = strdup(path), *bc = strdup(path);
        if (!pc || !bc) {
            sbx_error_free(e);
            return sbx__set_error(err, SBX_ENOMEM, "out of memory");
        }
        const char *parent = dirname(pc), *base = basename(bc);
        if (!strcmp(parent, path) || !strcmp(base, "/") || !strcmp(base, ".") ||
            !strcmp(base, "..")) {
            sbx__fail(err, e);
            return fd;
        }
        sbx_error_free(e);
        e = NULL;
        int pfd = sbx__mkdir_trusted(parent, mode, what, err);
        if (pfd < 0)
            return pfd;
        /* Made in the descriptor just checked: no name above it is looked up again. */
        int made = mkdirat(pfd, base, mode) < 0 && errno != EEXIST ? errno : 0;
        close(pfd);
        if (made)
            return sbx__set_errno(err, sbx__code_from_errno(made), made, "%s: cannot create %s",
                                  what, path);
        fd = sbx__open_trusted(path, true, what, &e);
    }
    if (fd < 0) {
        sbx__fail(err, e);
        return fd;
    }
    struct stat st;
    int x = fstat(fd, &st) < 0 ? errno : !S_ISDIR(st.st_mode) ? ENOTDIR : 0;
    if (x) {
        close(fd);
        return sbx__set_errno(err, x == ENOTDIR ? SBX_EINVAL : SBX_EIO, x,
                              "%s: %s is not a directory", what, path);
    }
    return fd;
}
