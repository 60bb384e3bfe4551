/*
 * Hostile images against the linux provider's image store (issue #8 items
 * 1, 3, 11 and the decompression bomb). Every layer and tarball here is
 * built by the test with libarchive; each test asserts what an attacker
 * would have wanted to change on the host is unchanged: canary files and
 * directories outside the image keep their content, mode, mtime and link
 * count, nothing is left in the store (no tmp-*, no half image, no name),
 * and a second local user cannot reach what the store keeps.
 */
#include "tap.h"
#include "common.h"
#include "lib/box.h"
#include "lib/digest.h"
#include "lib/proc.h"
#include "lib/tar.h"

#include "core/internal.h"
#include "providers/linux/linux.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <time.h>

#define ATTACKER "sbxatk-img"

static char state_dir[2048]; /* <tmp>/st/linux */
static void need_root(void)
{
    if (geteuid() != 0)
        TAP_SKIP("the image store's owners, modes and device nodes need root");
}

/* A private state directory for this test; SBX_STATE_DIR for the CLI too. */
static void setup(void)
{
    need_root();
    char root[512];
    snprintf(root, sizeof(root), "%s/st", tap_tmpdir());
    snprintf(state_dir, sizeof(state_dir), "%s/linux", root);
    setenv("SBX_STATE_DIR", root, 1);
    /*
     * A sanitizer build's sbx-agent is dynamic, which the provider refuses
     * for image boxes: use the plain build's static one when there is one
     * (as test_linux does; the agent is not what these tests check).
     */
    char *agent = getenv("SBX_AGENT") ? NULL : realpath("build/sbx-agent", NULL);
    if (agent)
        setenv("SBX_AGENT", agent, 1);
    free(agent);
    tap_allow_fd_changes();
}

/* --- hostile archives ----------------------------------------------------- */

struct ent {
    const char *path;
    char type;       /* f file, d dir, l symlink, h hard link, c char dev, p fifo */
    const char *arg; /* file data, link target */
    mode_t mode;
};

static void add_entry(struct archive *a, const struct ent *x)
{
    tar_add(a, x->path, x->type, x->arg, x->mode);
}

static void make_tar(const char *out, const struct ent *v, size_t n)
{
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (archive_write_open_filename(a, out) != ARCHIVE_OK)
        TAP_FAIL("open %s: %s", out, archive_error_string(a));
    for (size_t i = 0; i < n; i++)
        add_entry(a, &v[i]);
    archive_write_free(a);
}

/*
 * A decompression bomb: one file of `bytes` zeros, zstd-compressed (gzip
 * when libarchive lacks zstd). 1 GiB is ~40 KB on disk.
 */
static void make_bomb(const char *out, long long bytes)
{
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    if (archive_write_add_filter_zstd(a) != ARCHIVE_OK)
        archive_write_add_filter_gzip(a);
    if (archive_write_open_filename(a, out) != ARCHIVE_OK)
        TAP_FAIL("open %s: %s", out, archive_error_string(a));
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "zeros");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, bytes);
    if (archive_write_header(a, e) != ARCHIVE_OK)
        TAP_FAIL("bomb header: %s", archive_error_string(a));
    static char zeros[1 << 20];
    for (long long left = bytes; left > 0; left -= (long long)sizeof(zeros)) {
        size_t k = left < (long long)sizeof(zeros) ? (size_t)left : sizeof(zeros);
        if (archive_write_data(a, zeros, k) != (la_ssize_t)k)
            TAP_FAIL("bomb data: %s", archive_error_string(a));
    }
    archive_entry_free(e);
    archive_write_free(a);
}

/* Writes `text` as blob and returns its digest hex. */
static void put_blob(const char *layout, const char *src, char hex[65])
{
    char cmd[PATH_MAX * 3], out[512];
    sha256_file_hex(src, hex);
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/blobs/sha256 && cp %s %s/blobs/sha256/%s", layout, src,
             layout, hex);
    if (run_cmd(out, sizeof(out), "%s", cmd) != 0)
        TAP_FAIL("%s: %s", cmd, out);
}

/* An OCI layout at `layout` of the given layer tarballs, in order. */
static void make_oci(const char *layout, const char *const *layers, size_t n)
{
    sbx_buf m = {0};
    sbx__buf_printf(&m, "{\"schemaVersion\":2,\"layers\":[");
    for (size_t i = 0; i < n; i++) {
        char hex[65];
        struct stat st;
        put_blob(layout, layers[i], hex);
        stat(layers[i], &st);
        sbx__buf_printf(&m,
                        "%s{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","
                        "\"digest\":\"sha256:%s\",\"size\":%lld}",
                        i ? "," : "", hex, (long long)st.st_size);
    }
    sbx__buf_printf(&m, "]}");
    char mp[4096], ip[4096], hex[65];
    snprintf(mp, sizeof(mp), "%s.manifest", layout);
    TAP_EQ_INT(write_text(mp, m.data), 0);
    sbx__buf_free(&m);
    put_blob(layout, mp, hex);
    char *idx =
        sbx__printf("{\"schemaVersion\":2,\"manifests\":[{\"digest\":\"sha256:%s\"}]}", hex);
    snprintf(ip, sizeof(ip), "%s/index.json", layout);
    TAP_EQ_INT(write_text(ip, idx), 0);
    free(idx);
    snprintf(ip, sizeof(ip), "%s/oci-layout", layout);
    TAP_EQ_INT(write_text(ip, "{\"imageLayoutVersion\":\"1.0.0\"}"), 0);
}

/* --- what the host must keep --------------------------------------------- */

struct canary {
    char path[4096];
    struct stat st;
    char *text; /* file content, or NULL for a directory */
};

static void canary_file(struct canary *c, const char *path, const char *text, mode_t mode)
{
    snprintf(c->path, sizeof(c->path), "%s", path);
    TAP_EQ_INT(write_text(path, text), 0);
    TAP_EQ_INT(chmod(path, mode), 0);
    TAP_EQ_INT(lstat(path, &c->st), 0);
    c->text = strdup(text);
}

static void canary_dir(struct canary *c, const char *path, mode_t mode)
{
    snprintf(c->path, sizeof(c->path), "%s", path);
    TAP_EQ_INT(mkdir(path, mode), 0);
    TAP_EQ_INT(chmod(path, mode), 0);
    TAP_EQ_INT(lstat(path, &c->st), 0);
    c->text = NULL;
}

/* The canary exists as it was: content, type, mode, owner, link count, mtime. */
static void canary_check(struct canary *c)
{
    struct stat now;
    if (lstat(c->path, &now) < 0)
        TAP_FAIL("host file %s is gone: %s", c->path, strerror(errno));
    TAP_EQ_INT(now.st_mode, c->st.st_mode);
    TAP_EQ_INT(now.st_uid, c->st.st_uid);
    TAP_EQ_INT(now.st_nlink, c->st.st_nlink);
    TAP_EQ_INT(now.st_mtim.tv_sec, c->st.st_mtim.tv_sec);
    TAP_EQ_INT(now.st_mtim.tv_nsec, c->st.st_mtim.tv_nsec);
    if (c->text) {
        char *t = read_text(c->path);
        TAP_EQ_STR(t ? t : "(unreadable)", c->text);
        free(t);
    }
    free(c->text);
    c->text = NULL;
}

/* Nothing half-done in the store: no temporary, and `name` (if any) not recorded. */
static void store_clean(const char *name)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/images", state_dir);
    DIR *d = opendir(p);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strstr(de->d_name, "tmp-"))
            TAP_FAIL("temporary %s/%s left in the store", p, de->d_name);
    }
    if (d)
        closedir(d);
    if (name) {
        snprintf(p, sizeof(p), "%s/images/names/%s", state_dir, name);
        TAP_TRUE(access(p, F_OK) < 0);
    }
}

/* The top layer of an imported name (malloc'd): the whole tree of a one-layer image. */
static char *rootfs_of(const char *name)
{
    char *r = NULL;
    bool none = false;
    sbx_error *e = NULL;
    if (sbx__linux_image_resolve(state_dir, NULL, name, NULL, &r, NULL, &none, &e) != SBX_OK)
        TAP_FAIL("no rootfs recorded for %s: %s", name, e ? sbx_error_message(e) : "?");
    return r;
}

/* Whether `p` is an overlay whiteout (a 0/0 character device). */
static bool is_whiteout(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
}

static bool is_opaque(const char *p)
{
    char v[4] = "";
    return getxattr(p, "trusted.overlay.opaque", v, sizeof(v)) == 1 && v[0] == 'y';
}

static int import(const char *name, const char *source, uint64_t max_bytes, sbx_error **e)
{
    sbx_linux_image_opts io = {.max_bytes = max_bytes};
    return sbx__linux_image_import(state_dir, NULL, name, source, &io, e);
}

/* --- 1. writes, removals, links and modes stay inside the image ----------- */

/*
 * The attack: a layer plants `evil -> /host/dir` and
 * `evil2 -> /host/dir2`, the next one whites out `evil/victim` and makes
 * `evil2` opaque. Both must act on the image's own /host/dir, never the
 * host's.
 */
static void test_whiteouts_through_links_stay_in_the_image(void)
{
    setup();
    const char *t = tap_tmpdir();
    char hd[1024], hd2[1024], p[4096];
    struct canary dir, victim, dir2, keep1, keep2;
    snprintf(hd, sizeof(hd), "%s/host", t);
    snprintf(hd2, sizeof(hd2), "%s/host2", t);
    canary_dir(&dir, hd, 0750);
    snprintf(p, sizeof(p), "%s/victim", hd);
    canary_file(&victim, p, "host victim\n", 0640);
    canary_dir(&dir2, hd2, 0755);
    snprintf(p, sizeof(p), "%s/a", hd2);
    canary_file(&keep1, p, "host a\n", 0600);
    snprintf(p, sizeof(p), "%s/b", hd2);
    canary_file(&keep2, p, "host b\n", 0644);
    TAP_EQ_INT(lstat(hd, &dir.st), 0); /* the directories' mtimes after their files */
    TAP_EQ_INT(lstat(hd2, &dir2.st), 0);

    char l1[1024], l2[1024], wh1[4096], wh2[4096];
    snprintf(l1, sizeof(l1), "%s/l1.tar", t);
    snprintf(l2, sizeof(l2), "%s/l2.tar", t);
    /* The image's own copy of the host path, so the whiteout has something to act on. */
    snprintf(wh1, sizeof(wh1), "%s/victim", hd + 1);
    snprintf(wh2, sizeof(wh2), "%s/a", hd2 + 1);
    const struct ent layer1[] = {
        {"evil", 'l', hd, 0777},
        {"evil2", 'l', hd2, 0777},
        {wh1, 'f', "image victim\n", 0644},
        {wh2, 'f', "image a\n", 0644},
        {"keep/old", 'f', "old\n", 0644},
    };
    make_tar(l1, layer1, SBX_ARRAY_SIZE(layer1));
    const struct ent layer2[] = {
        {"evil/.wh.victim", 'f', NULL, 0644},
        {"evil2/.wh..wh..opq", 'f', NULL, 0644},
        {"evil/.wh..", 'f', NULL, 0644}, /* a whiteout of ".." is ignored */
        {"evil/planted", 'f', "planted\n", 04755},
        /* A layer's whiteouts hide the lower layers only, not its own entries. */
        {"keep/new", 'f', "new\n", 0644},
        {"keep/.wh..wh..opq", 'f', NULL, 0644},
    };
    make_tar(l2, layer2, SBX_ARRAY_SIZE(layer2));
    char layout[1024];
    snprintf(layout, sizeof(layout), "%s/oci", t);
    const char *const layers[] = {l1, l2};
    make_oci(layout, layers, 2);

    sbx_error *e = NULL;
    if (import("wh", layout, 0, &e) != SBX_OK)
        TAP_FAIL("import: %s", e ? sbx_error_message(e) : "?");
    /* The host is untouched... */
    canary_check(&victim);
    canary_check(&keep1);
    canary_check(&keep2);
    canary_check(&dir);
    canary_check(&dir2);
    snprintf(p, sizeof(p), "%s/planted", hd);
    TAP_TRUE(access(p, F_OK) < 0);
    /*
     * ...and layer 2's own tree (the store keeps each layer apart, in
     * overlayfs' format, as Docker's overlay2 does) holds the whiteouts and
     * the file at the paths the layer names: layer 1's links are in another
     * directory, so nothing is written through them at all.
     */
    char *rf = rootfs_of("wh");
    snprintf(p, sizeof(p), "%s/evil/victim", rf);
    TAP_TRUE(is_whiteout(p));
    snprintf(p, sizeof(p), "%s/evil2", rf);
    TAP_TRUE(is_opaque(p));
    snprintf(p, sizeof(p), "%s/evil/planted", rf);
    char *txt = read_text(p);
    TAP_EQ_STR(txt ? txt : "(missing)", "planted\n");
    free(txt);
    snprintf(p, sizeof(p), "%s/keep", rf);
    TAP_TRUE(is_opaque(p));
    snprintf(p, sizeof(p), "%s/keep/old", rf);
    TAP_TRUE(access(p, F_OK) < 0);
    snprintf(p, sizeof(p), "%s/keep/new", rf);
    TAP_EQ_INT(access(p, F_OK), 0);
    /* The whiteout ".." was ignored: nothing named so beside evil's entries. */
    snprintf(p, sizeof(p), "%s%s/victim", rf, hd);
    TAP_TRUE(access(p, F_OK) < 0);
    free(rf);
    store_clean(NULL);
}

/*
 * A tarball whose links point at the host: a file written through a link,
 * a directory replaced by a link (libarchive's deferred chmod/utimes
 * followed it), hard links to a host file (through a link, absolute,
 * `..`). Each lands inside the image or is refused; the host keeps its
 * files, modes, mtimes and link counts.
 */
static void test_links_and_hard_links_resolve_inside_the_root(void)
{
    setup();
    const char *t = tap_tmpdir();
    char hd[1024], p[4096], tar[1024];
    struct canary dir, victim;
    snprintf(hd, sizeof(hd), "%s/host", t);
    canary_dir(&dir, hd, 0750);
    snprintf(p, sizeof(p), "%s/victim", hd);
    canary_file(&victim, p, "host victim\n", 0640);
    TAP_EQ_INT(lstat(hd, &dir.st), 0);
    snprintf(tar, sizeof(tar), "%s/a.tar", t);

    /* Through links: the writes land in the image's own <hd>. */
    const struct ent through[] = {
        {"lnk", 'l', hd, 0777},
        {"lnk/planted", 'f', "planted\n", 0644},
        {"lnk/sub/deeper", 'f', "deeper\n", 0644},
        {"d", 'd', NULL, 0777},
        {"d", 'l', hd, 0777},     /* replaces the directory; its mode/times must not follow */
        {"lnk", 'd', NULL, 0777}, /* and back: a link replaced by a directory */
    };
    make_tar(tar, through, SBX_ARRAY_SIZE(through));
    sbx_error *e = NULL;
    if (import("through", tar, 0, &e) != SBX_OK)
        TAP_FAIL("import: %s", e ? sbx_error_message(e) : "?");
    char *rf = rootfs_of("through");
    snprintf(p, sizeof(p), "%s%s/sub/deeper", rf, hd);
    char *txt = read_text(p);
    TAP_EQ_STR(txt ? txt : "(missing)", "deeper\n");
    free(txt);
    free(rf);
    snprintf(p, sizeof(p), "%s/planted", hd);
    TAP_TRUE(access(p, F_OK) < 0);
    snprintf(p, sizeof(p), "%s/sub", hd);
    TAP_TRUE(access(p, F_OK) < 0);

    /* Hard links to the host's file: refused, and the file gains no link. */
    char abs_victim[4096], dotdot[4096];
    snprintf(abs_victim, sizeof(abs_victim), "%s/victim", hd);
    snprintf(dotdot, sizeof(dotdot), "../../../../../../../..%s/victim", hd);
    const char *targets[] = {"lnk/victim", abs_victim, dotdot};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(targets); i++) {
        const struct ent hl[] = {
            {"lnk", 'l', hd, 0777},
            {"hl", 'h', targets[i], 0644},
        };
        make_tar(tar, hl, SBX_ARRAY_SIZE(hl));
        e = NULL;
        int rc = import("hl", tar, 0, &e);
        TAP_EQ_INT(rc, SBX_EINVAL);
        TAP_CONTAINS(sbx_error_message(e), "hl");
        sbx_error_free(e);
        e = NULL;
        store_clean("hl");
    }
    canary_check(&victim);
    canary_check(&dir);
    store_clean(NULL);
}

/*
 * A layout whose manifest blob is not what its digest names: the digest
 * names the cached tree, so accepting it would plant this tree under
 * another image's digest for every later import of that image.
 */
static void test_oci_manifest_must_match_its_digest(void)
{
    setup();
    const char *t = tap_tmpdir();
    char l1[1024], l2[1024], a[1024], b[1024], out[8192];
    snprintf(l1, sizeof(l1), "%s/l1.tar", t);
    snprintf(l2, sizeof(l2), "%s/l2.tar", t);
    snprintf(a, sizeof(a), "%s/a", t);
    snprintf(b, sizeof(b), "%s/b", t);
    const struct ent good[] = {{"etc/marker", 'f', "genuine\n", 0644}};
    const struct ent evil[] = {{"etc/marker", 'f', "planted\n", 0644}};
    make_tar(l1, good, 1);
    make_tar(l2, evil, 1);
    const char *const la[] = {l1}, *const lb[] = {l2};
    make_oci(a, la, 1);
    make_oci(b, lb, 1);
    /* a's manifest digest, b's manifest bytes (and b's layer, so it would unpack). */
    char ha[65];
    snprintf(out, sizeof(out), "%s.manifest", a);
    sha256_file_hex(out, ha);
    TAP_EQ_INT(run_cmd(out, sizeof(out),
                       "cp %s.manifest %s/blobs/sha256/%s && cp %s/blobs/sha256/* "
                       "%s/blobs/sha256/",
                       b, a, ha, b, a),
               0);
    sbx_error *e = NULL;
    TAP_EQ_INT(import("forged", a, 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "does not match its digest");
    sbx_error_free(e);
    char p[4096];
    snprintf(p, sizeof(p), "%s/images/sha256-%s", state_dir, ha);
    TAP_TRUE(access(p, F_OK) < 0);
    store_clean("forged");
}

/* --- 3. the store: private, no device nodes, setuid kept ------------------ */

/* Creates the attacker's account; -1 when useradd is missing. */
static int attacker_add(uid_t *uid, gid_t *gid)
{
    char out[512];
    run_cmd(out, sizeof(out), "userdel -r " ATTACKER " 2>/dev/null; true");
    if (run_cmd(out, sizeof(out), "useradd -M -N -s /bin/sh " ATTACKER) != 0)
        return -1;
    struct passwd *pw = getpwnam(ATTACKER);
    if (!pw)
        return -1;
    *uid = pw->pw_uid;
    *gid = pw->pw_gid;
    return 0;
}

/*
 * As the attacker: exec `path` (a setuid-root `id -u`), and open `node`.
 * Writes "<exec result>|<open errno>" into out: the exec result is what id
 * printed, or "exec:<errno>".
 */
static void as_attacker(uid_t uid, gid_t gid, const char *path, const char *node, char *out,
                        size_t n)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        TAP_FAIL("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
            _exit(90);
        int o = open(node, O_RDONLY | O_CLOEXEC);
        char buf[64];
        snprintf(buf, sizeof(buf), "open:%d|", o < 0 ? errno : 0);
        if (write(pfd[1], buf, strlen(buf)) < 0)
            _exit(91);
        dup2(pfd[1], 1);
        execl(path, "id", "-u", (char *)NULL);
        snprintf(buf, sizeof(buf), "exec:%d", errno);
        if (write(1, buf, strlen(buf)) < 0)
            _exit(92);
        _exit(93);
    }
    close(pfd[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < n && (k = read(pfd[0], out + got, n - 1 - got)) > 0)
        got += (size_t)k;
    out[got] = 0;
    close(pfd[0]);
    waitpid(pid, NULL, 0);
}

static void test_store_private_no_devices_setuid_unreachable(void)
{
    setup();
    const char *t = tap_tmpdir();
    /* A world-traversable path to the store, as /run/sbx/linux is. */
    TAP_EQ_INT(chmod(t, 0755), 0);
    char p[4096], tar[1024];
    snprintf(p, sizeof(p), "%s/st", t);
    TAP_EQ_INT(mkdir(p, 0755), 0);
    TAP_EQ_INT(mkdir(state_dir, 0755), 0);
    char *idbin = read_text("/usr/bin/id");
    if (!idbin)
        TAP_SKIP("no /usr/bin/id to make a setuid program of");
    free(idbin);
    /* The setuid copy of id(1) comes from a real file: archive it with its bytes. */
    char *data = NULL;
    size_t dlen = 0;
    TAP_EQ_INT(sbx__read_file("/usr/bin/id", &data, &dlen), 0);
    snprintf(tar, sizeof(tar), "%s/suid.tar", t);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    TAP_EQ_INT(archive_write_open_filename(a, tar), ARCHIVE_OK);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, "bin/id");
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 04755);
    archive_entry_set_uid(e, 0);
    archive_entry_set_size(e, (la_int64_t)dlen);
    TAP_EQ_INT(archive_write_header(a, e), ARCHIVE_OK);
    TAP_EQ_INT(archive_write_data(a, data, dlen), (la_ssize_t)dlen);
    archive_entry_free(e);
    free(data);
    const struct ent more[] = {
        {"dev/mem0", 'c', NULL, 0666},
        {"dev/mem1", 'h', "dev/mem0", 0666}, /* a hard link to it is skipped with it */
        {"fifo", 'p', NULL, 0600},
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(more); i++)
        add_entry(a, &more[i]);
    archive_write_free(a);

    sbx_error *err = NULL;
    if (import("suid", tar, 0, &err) != SBX_OK)
        TAP_FAIL("import: %s", err ? sbx_error_message(err) : "?");
    char *rf = rootfs_of("suid");
    struct stat st;
    /* The store's root is root's alone. */
    snprintf(p, sizeof(p), "%s/images", state_dir);
    TAP_EQ_INT(stat(p, &st), 0);
    TAP_EQ_INT(st.st_mode & 07777, 0700);
    TAP_EQ_INT(st.st_uid, 0);
    /* No device node; the fifo and the setuid program (for the box) are kept. */
    char node[4096], prog[4096];
    snprintf(node, sizeof(node), "%s/dev/mem1", rf);
    TAP_TRUE(lstat(node, &st) < 0 && errno == ENOENT);
    snprintf(node, sizeof(node), "%s/dev/mem0", rf);
    TAP_TRUE(lstat(node, &st) < 0 && errno == ENOENT);
    snprintf(p, sizeof(p), "%s/fifo", rf);
    TAP_TRUE(lstat(p, &st) == 0 && S_ISFIFO(st.st_mode));
    snprintf(prog, sizeof(prog), "%s/bin/id", rf);
    TAP_EQ_INT(lstat(prog, &st), 0);
    TAP_EQ_INT(st.st_mode & 07777, 04755);
    TAP_EQ_INT(st.st_uid, 0);

    /* A second local user can reach neither (the old store: euid 0 and an open /dev/mem). */
    uid_t uid;
    gid_t gid;
    if (attacker_add(&uid, &gid) < 0)
        TAP_SKIP("useradd cannot make the second user " ATTACKER);
    char out[256];
    as_attacker(uid, gid, prog, node, out, sizeof(out));
    /* A store left 0755 by an older sbx is tightened by its next use. */
    snprintf(p, sizeof(p), "%s/images", state_dir);
    TAP_EQ_INT(chmod(p, 0755), 0);
    free(rf);
    rf = NULL;
    bool none = false;
    int rc = sbx__linux_image_resolve(state_dir, NULL, "suid", NULL, &rf, NULL, &none, NULL);
    char out_after[256];
    as_attacker(uid, gid, prog, node, out_after, sizeof(out_after));
    /* Removed before any assert can end the test. */
    char junk[64];
    run_cmd(junk, sizeof(junk), "userdel -r " ATTACKER " 2>/dev/null; true");
    TAP_OK(rc);
    free(rf);
    /* EACCES: the store cannot be traversed, so the node cannot be opened nor id run as root. */
    TAP_CONTAINS(out, "open:13|exec:13");
    TAP_CONTAINS(out_after, "open:13|exec:13");
    TAP_EQ_INT(stat(p, &st), 0);
    TAP_EQ_INT(st.st_mode & 07777, 0700);
    store_clean(NULL);
}

/* --- 11. sources: only files and directories; interruptible; gc ------------ */

static void test_non_regular_sources_refused(void)
{
    setup();
    const char *t = tap_tmpdir();
    sbx_error *e = NULL;
    TAP_EQ_INT(import("z", "/dev/zero", 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "/dev/zero");
    TAP_CONTAINS(sbx_error_message(e), "character device");
    TAP_CONTAINS(sbx_error_message(e), "regular file");
    sbx_error_free(e);
    e = NULL;
    char fifo[1024];
    snprintf(fifo, sizeof(fifo), "%s/fifo", t);
    TAP_EQ_INT(mkfifo(fifo, 0600), 0);
    e = NULL;
    TAP_EQ_INT(import("f", fifo, 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "fifo");
    sbx_error_free(e);
    e = NULL;
    /* An OCI layout whose layer blob is a link to /dev/zero. */
    char layout[1024], l1[1024], blob[4096], hex[65], out[512];
    snprintf(layout, sizeof(layout), "%s/oci", t);
    snprintf(l1, sizeof(l1), "%s/l1.tar", t);
    const struct ent one[] = {{"a", 'f', "a\n", 0644}};
    make_tar(l1, one, 1);
    const char *const layers[] = {l1};
    make_oci(layout, layers, 1);
    sha256_file_hex(l1, hex);
    snprintf(blob, sizeof(blob), "%s/blobs/sha256/%s", layout, hex);
    TAP_EQ_INT(run_cmd(out, sizeof(out), "ln -sf /dev/zero %s", blob), 0);
    e = NULL;
    TAP_EQ_INT(import("o", layout, 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "character device");
    sbx_error_free(e);
    e = NULL;
    /* A box from /dev/zero: a create error naming it, at once. */
    sbx_provider *p = NULL;
    TAP_OK(sbx_provider_new("{\"linux\": {}}", &p, &e));
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, "/dev/zero");
    const char *msg = start_fails(p, s, SBX_ECREATE, "/dev/zero");
    TAP_CONTAINS(msg, "character device");
    sbx_spec_free(s);
    sbx_provider_free(p);
    store_clean("z");
}

/* Runs `sbx image import --progress NAME SRC`; returns its pid, stderr readable at *errfd. */
static pid_t spawn_import(const char *name, const char *src, const char *max, int *errfd)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
        TAP_FAIL("pipe: %s", strerror(errno));
    const char *bin = sbx_bin();
    pid_t pid = fork();
    if (pid == 0) {
        /* Default dispositions: the test harness may have changed them. */
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(SIGINT, &dfl, NULL);
        sigaction(SIGTERM, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(pfd[1], 2);
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 1);
        execl(bin, "sbx", "image", "import", "--progress", "--max-bytes", max, name, src,
              (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    *errfd = pfd[0];
    return pid;
}

/*
 * Reads the child's stderr until its first line of the unpack stage: the
 * "archive" stage before it (the format scan) makes no temporary yet.
 */
static void wait_progress(int fd, char *buf, size_t n)
{
    size_t got = 0;
    ssize_t k;
    while (got + 1 < n && (k = read(fd, buf + got, n - 1 - got)) > 0) {
        got += (size_t)k;
        buf[got] = 0;
        if (strstr(buf, "importing big: unpack"))
            return;
    }
    buf[got] = 0;
    TAP_FAIL("no progress from sbx image import: %s", buf);
}

static int wait_exit(pid_t pid, int fd, char *buf, size_t n)
{
    size_t got = strlen(buf);
    ssize_t k;
    while (got + 1 < n && (k = read(fd, buf + got, n - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = 0;
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * SIGTERM and SIGINT stop an import mid-unpack: exit 128+N, nothing in the
 * store. A SIGKILLed import leaves its temporary, which gc removes (and
 * keeps the temporary of an import still running: ours, made by hand).
 */
static void test_import_interruptible_and_gc_removes_abandoned(void)
{
    setup();
    char bomb[1024];
    snprintf(bomb, sizeof(bomb), "%s/bomb.tar.zst", tap_tmpdir());
    /* 1 GiB of zeros; --max-bytes 512M: the import cannot finish before the signal. */
    make_bomb(bomb, 1ll << 30);
    const int sigs[] = {SIGTERM, SIGINT};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(sigs); i++) {
        int fd;
        char err[8192] = "";
        pid_t pid = spawn_import("big", bomb, "512M", &fd);
        wait_progress(fd, err, sizeof(err));
        kill(pid, sigs[i]);
        int code = wait_exit(pid, fd, err, sizeof(err));
        TAP_EQ_INT(code, 128 + sigs[i]);
        TAP_CONTAINS(err, "interrupted");
        store_clean("big");
    }
    /* SIGKILL: nothing can clean up, so the temporary stays for gc. */
    int fd;
    char err[8192] = "";
    pid_t pid = spawn_import("big", bomb, "512M", &fd);
    wait_progress(fd, err, sizeof(err));
    kill(pid, SIGKILL);
    TAP_EQ_INT(wait_exit(pid, fd, err, sizeof(err)), 128 + SIGKILL);
    char images[4096], live[PATH_MAX + 100];
    snprintf(images, sizeof(images), "%s/images", state_dir);
    int left = 0;
    DIR *d = opendir(images);
    struct dirent *de;
    while (d && (de = readdir(d)))
        left += !strncmp(de->d_name, "tmp-", 4);
    if (d)
        closedir(d);
    TAP_EQ_INT(left, 1);
    /* An import in progress (this process) keeps its temporary. */
    snprintf(live, sizeof(live), "%s/tmp-%d-%llu-abcd", images, (int)getpid(),
             sbx__linux_proc_start(getpid()));
    TAP_EQ_INT(mkdir(live, 0700), 0);
    /* `sbx gc`, as a user runs it (it calls sbx__linux_gc on the state directory). */
    char gc_out[4096];
    TAP_EQ_INT(run_cmd(gc_out, sizeof(gc_out), "%s gc", sbx_bin()), 0);
    TAP_EQ_INT(access(live, F_OK), 0);
    TAP_EQ_INT(rmdir(live), 0);
    store_clean("big");
}

/*
 * A create that unpacks answers its cancel: the unpack stops (it wrote far
 * less than the 1 GiB bomb) and leaves no temporary.
 */
static unsigned long long wchar_now(void)
{
    char *t = read_text("/proc/self/io");
    const char *w = t ? strstr(t, "wchar:") : NULL;
    unsigned long long v = w ? strtoull(w + 6, NULL, 10) : 0;
    free(t);
    return v;
}

static bool tmp_exists(void)
{
    char images[4096];
    snprintf(images, sizeof(images), "%s/images", state_dir);
    DIR *d = opendir(images);
    struct dirent *de;
    bool found = false;
    while (d && (de = readdir(d)))
        found |= !strncmp(de->d_name, "tmp-", 4);
    if (d)
        closedir(d);
    return found;
}

static void test_create_cancel_stops_unpacking(void)
{
    setup();
    char bomb[1024];
    snprintf(bomb, sizeof(bomb), "%s/bomb.tar.zst", tap_tmpdir());
    make_bomb(bomb, 1ll << 30);
    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    TAP_OK(sbx_provider_new("{\"linux\": {\"max_image_bytes\": 2147483648}}", &p, &e));
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, bomb);
    sbx_sandbox *sb = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    unsigned long long w0 = wchar_now();
    sbx_future *f = NULL;
    TAP_OK(sbx_sandbox_start_async(sb, NULL, &f, &e));
    /* Wait until the unpack runs (its temporary exists), then cancel. */
    while (!tmp_exists() && !sbx_future_done(f))
        usleep(1000);
    TAP_TRUE(!sbx_future_done(f));
    sbx_future_cancel(f);
    TAP_EQ_INT(sbx_future_wait(f, -1, &e), SBX_ECANCELED);
    sbx_error_free(e);
    e = NULL;
    unsigned long long written = wchar_now() - w0;
    sbx_future_free(f);
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
    if (written >= 256ull << 20)
        TAP_FAIL("the cancelled create wrote %llu bytes of the bomb", written);
    store_clean(NULL);
}

/* --- decompression bombs, entry bounds ------------------------------------ */

static long long used_bytes(const char *path)
{
    struct statvfs v;
    if (statvfs(path, &v) < 0)
        TAP_FAIL("statvfs %s: %s", path, strerror(errno));
    return (long long)(v.f_blocks - v.f_bfree) * (long long)v.f_frsize;
}

static void test_bomb_capped_and_nothing_left(void)
{
    setup();
    const char *t = tap_tmpdir();
    char bomb[1024];
    snprintf(bomb, sizeof(bomb), "%s/bomb.tar.zst", t);
    make_bomb(bomb, 256ll << 20);
    /* An explicit cap (sbx image import --max-bytes, the provider's max_image_bytes). */
    sbx_error *e = NULL;
    TAP_EQ_INT(import("bomb", bomb, 16 << 20, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "more than 16777216 bytes");
    TAP_CONTAINS(sbx_error_message(e), "max_image_bytes");
    sbx_error_free(e);
    e = NULL;
    e = NULL;
    store_clean("bomb");
    char p[4096];
    snprintf(p, sizeof(p), "%s/images", state_dir);
    DIR *d = opendir(p);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (!strncmp(de->d_name, "sha256-", 7))
            TAP_FAIL("a half image %s was installed", de->d_name);
    if (d)
        closedir(d);
    /* The provider's config key, for a create. */
    sbx_provider *pv = NULL;
    TAP_OK(sbx_provider_new("{\"linux\": {\"max_image_bytes\": 1048576}}", &pv, &e));
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, bomb);
    start_fails(pv, s, SBX_ECREATE, "more than 1048576 bytes");
    sbx_spec_free(s);
    sbx_provider_free(pv);
    e = NULL;
    provider_fails("{\"linux\": {\"max_image_bytes\": -1}}", SBX_EINVAL, "max_image_bytes");
    store_clean(NULL);

    /*
     * The default cap on a small filesystem (a private 64 MiB tmpfs): half
     * its free space, so the bomb stops with room left, not at ENOSPC.
     */
    if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0)
        TAP_SKIP("no private mount namespace for a small tmpfs");
    char small[512];
    snprintf(small, sizeof(small), "%s/small", t);
    TAP_EQ_INT(mkdir(small, 0700), 0);
    TAP_EQ_INT(mount("tmpfs", small, "tmpfs", 0, "size=64m"), 0);
    snprintf(state_dir, sizeof(state_dir), "%s/linux", small);
    long long before = used_bytes(small);
    e = NULL;
    TAP_EQ_INT(import("bomb", bomb, 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "default cap");
    sbx_error_free(e);
    e = NULL;
    store_clean("bomb");
    TAP_TRUE(used_bytes(small) - before < (1 << 20));
    umount2(small, MNT_DETACH);
}

/*
 * The unpacked tree is a working image: a box runs from it, sees the
 * setuid bit kept (in the box no_new_privs makes it grant nothing), the
 * file written through `lnk -> /etc` in its own /etc, and no device node
 * from the layer (its /dev is sbx's).
 */
static void test_box_runs_from_a_hostile_image(void)
{
    setup();
    if (access("/bin/busybox", X_OK) != 0)
        TAP_SKIP("busybox-static is not installed");
    const char *t = tap_tmpdir();
    char tar[1024];
    snprintf(tar, sizeof(tar), "%s/bb.tar", t);
    char *bb = NULL;
    size_t bl = 0;
    TAP_EQ_INT(sbx__read_file("/bin/busybox", &bb, &bl), 0);
    struct archive *a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    TAP_EQ_INT(archive_write_open_filename(a, tar), ARCHIVE_OK);
    const char *progs[] = { "bin/busybox", "bin/suid" };
    for (size_t i = 0; i < 2; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, progs[i]);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, i ? 04755 : 0755);
        archive_entry_set_size(e, (la_int64_t)bl);
        TAP_EQ_INT(archive_write_header(a, e), ARCHIVE_OK);
        TAP_EQ_INT(archive_write_data(a, bb, bl), (la_ssize_t)bl);
        archive_entry_free(e);
    }
    free(bb);
    const struct ent rest[] = {
        { "bin/sh", 'l', "busybox", 0777 },
        { "etc/passwd", 'f', "root:x:0:0:root:/root:/bin/sh\n", 0644 },
        { "lnk", 'l', "/etc", 0777 },
        { "lnk/planted", 'f', "planted\n", 0644 },
        { "dev/evil", 'c', NULL, 0666 },
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(rest); i++)
        add_entry(a, &rest[i]);
    archive_write_free(a);

    sbx_provider *p = NULL;
    sbx_error *e = NULL;
    TAP_OK(sbx_provider_new("{\"linux\": {}}", &p, &e));
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, tar);
    sbx_sandbox *sb = NULL;
    TAP_EQ_INT(sbx_sandbox_new(p, s, &sb, NULL), SBX_OK);
    if (sbx_sandbox_start(sb, NULL, &e) != SBX_OK)
        TAP_FAIL("start: %s", sbx_error_message(e));
    sbx_exec_result *r = NULL;
    TAP_OK(sbx_sandbox_exec(sb,
                            "/bin/busybox stat -c %a /bin/suid; /bin/busybox cat /etc/planted; "
                            "/bin/busybox test -e /dev/evil && echo evil || echo no-evil",
                            NULL, &r, &e));
    const char *out = sbx_exec_result_stdout(r, NULL);
    TAP_EQ_INT(sbx_exec_result_return_code(r), 0);
    TAP_EQ_STR(out ? out : "", "4755\nplanted\nno-evil\n");
    sbx_exec_result_free(r);
    TAP_OK(sbx_sandbox_stop(sb, &e));
    sbx_sandbox_free(sb);
    sbx_spec_free(s);
    sbx_provider_free(p);
    /* The box left nothing (its directory goes with its shim). */
    char boxes[4096];
    snprintf(boxes, sizeof(boxes), "%s/boxes", state_dir);
    TAP_TRUE(count_dir_entries(boxes) <= 0);
    store_clean(NULL);
}

static void test_deep_and_long_paths_refused(void)
{
    setup();
    const char *t = tap_tmpdir();
    char tar[1024];
    snprintf(tar, sizeof(tar), "%s/deep.tar", t);
    /* 300 levels, within PATH_MAX. */
    char deep[1024];
    for (int i = 0; i < 300; i++)
        memcpy(deep + 2 * i, "a/", 2);
    memcpy(deep + 600, "f", 2);
    const struct ent d1[] = {{deep, 'f', "x\n", 0644}};
    make_tar(tar, d1, 1);
    sbx_error *e = NULL;
    TAP_EQ_INT(import("deep", tar, 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "directories deep");
    sbx_error_free(e);
    e = NULL;
    store_clean("deep");
    /* Depth built through links: each link points at the deepest level so far. */
    char lvl[600];
    for (int i = 0; i < 200; i++)
        memcpy(lvl + 2 * i, "b/", 2);
    lvl[399] = 0;
    char target[700], p2[800];
    snprintf(target, sizeof(target), "/%s", lvl);
    snprintf(p2, sizeof(p2), "L/%s/f", lvl);
    const struct ent d2[] = {
        {lvl, 'd', NULL, 0755},
        {"L", 'l', target, 0777},
        {p2, 'f', "x\n", 0644},
    };
    make_tar(tar, d2, SBX_ARRAY_SIZE(d2));
    e = NULL;
    TAP_EQ_INT(import("deep", tar, 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "directories deep");
    sbx_error_free(e);
    e = NULL;
    store_clean("deep");
    /*
     * A link to a missing 1500-level path: its target is made (as Docker
     * does), but level by level with the bound checked, so the tree never
     * grows deeper than the removal can handle (the store is clean after).
     */
    char far[3100];
    far[0] = '/';
    for (int i = 0; i < 1500; i++)
        memcpy(far + 1 + 2 * i, "c/", 2);
    memcpy(far + 3001, "end", 4);
    const struct ent d3[] = {
        {"x", 'l', far, 0777},
        {"x/f", 'f', "x\n", 0644},
    };
    make_tar(tar, d3, SBX_ARRAY_SIZE(d3));
    e = NULL;
    TAP_EQ_INT(import("deep", tar, 0, &e), SBX_EINVAL);
    TAP_CONTAINS(sbx_error_message(e), "directories deep");
    sbx_error_free(e);
    e = NULL;
    store_clean("deep");
}

TAP_MAIN(TAP(test_whiteouts_through_links_stay_in_the_image),
         TAP(test_links_and_hard_links_resolve_inside_the_root),
         TAP(test_oci_manifest_must_match_its_digest), TAP(test_box_runs_from_a_hostile_image),
         TAP(test_store_private_no_devices_setuid_unreachable),
         TAP(test_non_regular_sources_refused),
         TAP_T(test_import_interruptible_and_gc_removes_abandoned, 120),
         TAP_T(test_create_cancel_stops_unpacking, 120),
         TAP_T(test_bomb_capped_and_nothing_left, 120), TAP(test_deep_and_long_paths_refused))
