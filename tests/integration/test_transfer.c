/*
 * Transfer (docs/transfer.md) against real linux boxes whose image has no
 * shell and no tar: directory trees and a 1 GiB file round-trip with their
 * bytes, modes, mtimes, symlinks and hard links; hostile archives write
 * nothing outside their target (checked in the box and with canaries on
 * the host); a download of a link to / stays a link. Each test ends with a
 * census.
 */
#include "tap.h"
#include "common.h"
#include "lib/digest.h"
#include "linux_census.h"
#include "linux_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

/* An image with no shell and no tar: only what a user lookup needs. */
static sbx_spec *bare_spec(void)
{
    static char dir[600];
    snprintf(dir, sizeof(dir), "%s/bare", tap_tmpdir());
    char out[2048];
    if (run_cmd(out, sizeof(out),
                "set -e; mkdir -p %s/etc %s/tmp; echo 'root:x:0:0:root:/root:/nope' > "
                "%s/etc/passwd; echo 'root:x:0:' > %s/etc/group; echo bare > %s/etc/shadow",
                dir, dir, dir, dir, dir) != 0)
        TAP_FAIL("building the bare image: %s", out);
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, dir);
    sbx_spec_set_workdir(s, "/work");
    return s;
}

static void mkdirs(const char *path)
{
    char out[1024];
    if (run_cmd(out, sizeof(out), "mkdir -p '%s'", path) != 0)
        TAP_FAIL("mkdir %s: %s", path, out);
}

static void write_file_at(const char *path, const char *text, mode_t mode, time_t mtime)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        TAP_FAIL("open %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n)
        TAP_FAIL("write %s", path);
    fchmod(fd, mode);
    struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
    futimens(fd, ts);
    close(fd);
}

/* --- comparing two trees -------------------------------------------------- */

static const char *cmp_a, *cmp_b;
static char cmp_why[1024];
static int cmp_count;

static int cmp_one(const char *path, const struct stat *sa, int flag, struct FTW *ftw)
{
    (void)flag;
    (void)ftw;
    const char *rel = path + strlen(cmp_a);
    char other[4096];
    snprintf(other, sizeof(other), "%s%s", cmp_b, rel);
    struct stat sb;
    if (lstat(other, &sb) < 0) {
        snprintf(cmp_why, sizeof(cmp_why), "%.900s is missing", other);
        return 1;
    }
    cmp_count++;
    if ((sa->st_mode & S_IFMT) != (sb.st_mode & S_IFMT)) {
        snprintf(cmp_why, sizeof(cmp_why), "%.900s: type differs", other);
        return 1;
    }
    if (S_ISLNK(sa->st_mode)) {
        char la[4096], lb[4096];
        ssize_t na = readlink(path, la, sizeof(la) - 1), nb = readlink(other, lb, sizeof(lb) - 1);
        if (na < 0 || nb < 0 || na != nb || memcmp(la, lb, (size_t)na)) {
            snprintf(cmp_why, sizeof(cmp_why), "%.900s: link target differs", other);
            return 1;
        }
        return 0;
    }
    if ((sa->st_mode & 07777) != (sb.st_mode & 07777)) {
        snprintf(cmp_why, sizeof(cmp_why), "%.900s: mode %o, want %o", other, sb.st_mode & 07777,
                 sa->st_mode & 07777);
        return 1;
    }
    if (sa->st_mtim.tv_sec != sb.st_mtim.tv_sec) {
        snprintf(cmp_why, sizeof(cmp_why), "%.900s: mtime %ld, want %ld", other,
                 (long)sb.st_mtim.tv_sec, (long)sa->st_mtim.tv_sec);
        return 1;
    }
    if (S_ISREG(sa->st_mode)) {
        if (sa->st_size != sb.st_size || sa->st_nlink != sb.st_nlink) {
            snprintf(cmp_why, sizeof(cmp_why), "%.900s: size/links %lld/%lu, want %lld/%lu", other,
                     (long long)sb.st_size, (unsigned long)sb.st_nlink, (long long)sa->st_size,
                     (unsigned long)sa->st_nlink);
            return 1;
        }
        if (sa->st_size < (1 << 20)) {
            char ba[1 << 16], bb[1 << 16];
            int fa = open(path, O_RDONLY | O_CLOEXEC), fb = open(other, O_RDONLY | O_CLOEXEC);
            ssize_t na = read(fa, ba, sizeof(ba)), nb = read(fb, bb, sizeof(bb));
            close(fa);
            close(fb);
            if (na != nb || na < 0 || memcmp(ba, bb, (size_t)na)) {
                snprintf(cmp_why, sizeof(cmp_why), "%.900s: content differs", other);
                return 1;
            }
        }
    }
    return 0;
}

/* Every entry of a is in b with the same type, bytes, mode, mtime, links. */
static void same_tree(const char *a, const char *b)
{
    cmp_a = a;
    cmp_b = b;
    cmp_count = 0;
    cmp_why[0] = 0;
    if (nftw(a, cmp_one, 64, FTW_PHYS) != 0)
        TAP_FAIL("trees differ: %s", cmp_why);
}

/* --- tests ---------------------------------------------------------------- */

/* 10,000 small files in 100 directories, modes, mtimes, symlinks, hard links. */
static void test_tree_of_10000_files_round_trips(void)
{
    need_boxes();
    char src[600], dst[600], path[800];
    snprintf(src, sizeof(src), "%s/src", tap_tmpdir());
    snprintf(dst, sizeof(dst), "%s/dst", tap_tmpdir());
    for (int d = 0; d < 100; d++) {
        snprintf(path, sizeof(path), "%s/d%02d/sub", src, d);
        mkdirs(path);
        for (int f = 0; f < 100; f++) {
            char text[64];
            snprintf(text, sizeof(text), "file %d/%d\n", d, f);
            snprintf(path, sizeof(path), "%s/d%02d/%s%03d", src, d, f % 2 ? "sub/f" : "f", f);
            write_file_at(path, text,
                          f % 3 == 0   ? 0755
                          : f % 3 == 1 ? 0600
                                       : 0640,
                          1600000000 + d * 100 + f);
        }
    }
    snprintf(path, sizeof(path), "%s/link-rel", src);
    TAP_EQ_INT(symlink("d00/f000", path), 0);
    snprintf(path, sizeof(path), "%s/link-root", src);
    TAP_EQ_INT(symlink("/", path), 0);
    snprintf(path, sizeof(path), "%s/dangling", src);
    TAP_EQ_INT(symlink("/no/such/thing", path), 0);
    char a[800], b[800];
    snprintf(a, sizeof(a), "%s/d01/f000", src);
    snprintf(b, sizeof(b), "%s/hard", src);
    TAP_EQ_INT(link(a, b), 0);
    /* A long name takes a pax header both ways. */
    snprintf(path, sizeof(path), "%s/%0150d", src, 7);
    write_file_at(path, "long\n", 0644, 1700000000);
    snprintf(path, sizeof(path), "%s/d05", src);
    chmod(path, 0750);
    struct timespec ts[2] = {{1500000000, 0}, {1500000000, 0}};
    utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);

    sbx_provider *p = provider(NULL);
    sbx_spec *s = bare_spec();
    sbx_sandbox *sb = start(p, s);
    TAP_OK(sbx_sandbox_upload_dir(sb, src, "tree", 0, &e_));
    const char *kind = "unset";
    TAP_OK(sbx_sandbox_remote_kind(sb, "/work/tree/d00", &kind, &e_));
    TAP_EQ_STR(kind, "dir");
    TAP_OK(sbx_sandbox_remote_kind(sb, "tree/d00/f000", &kind, &e_));
    TAP_EQ_STR(kind, "file");
    TAP_OK(sbx_sandbox_download_dir(sb, "/work/tree", dst, 0, &e_));
    same_tree(src, dst);
    TAP_TRUE(cmp_count >= 10000 + 100 + 100 + 4);
    /* The hard link is one inode again on the way back. */
    struct stat s1, s2;
    snprintf(a, sizeof(a), "%s/d01/f000", dst);
    snprintf(b, sizeof(b), "%s/hard", dst);
    TAP_EQ_INT(lstat(a, &s1), 0);
    TAP_EQ_INT(lstat(b, &s2), 0);
    TAP_TRUE(s1.st_ino == s2.st_ino);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/*
 * A 1 GiB file with a fixed pattern, in and out, in bounded memory. Under
 * memcheck (make check-valgrind) 64 MiB: the same chunked path at a cost
 * memcheck can bear (1 GiB took it 160 s), and no RSS bound (the process's
 * RSS is valgrind's there); the plain and ASan runs check both.
 */
static void test_one_gib_file_round_trips_in_bounded_memory(void)
{
    need_boxes();
    const bool memcheck = getenv("SBX_VALGRIND") != NULL;
    const int mib = memcheck ? 64 : 1024;
    char src[600], dst[600], path[800];
    snprintf(src, sizeof(src), "%s/big", tap_tmpdir());
    snprintf(dst, sizeof(dst), "%s/big-back", tap_tmpdir());
    mkdirs(src);
    snprintf(path, sizeof(path), "%s/one-gib", src);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    TAP_TRUE(fd >= 0);
    static uint8_t chunk[1 << 20];
    for (int i = 0; i < mib; i++) {
        for (size_t j = 0; j < sizeof(chunk); j += 8)
            memcpy(chunk + j, &(uint64_t){(uint64_t)i * 131071u + j}, 8);
        TAP_EQ_INT(write(fd, chunk, sizeof(chunk)), (int)sizeof(chunk));
    }
    struct timespec ts[2] = {{1234567890, 0}, {1234567890, 0}};
    futimens(fd, ts);
    close(fd);

    sbx_provider *p = provider(NULL);
    sbx_spec *s = bare_spec();
    sbx_sandbox *sb = start(p, s);
    TAP_OK(sbx_sandbox_upload_dir(sb, src, "/data", 0, &e_));
    TAP_OK(sbx_sandbox_download_dir(sb, "/data", dst, 0, &e_));
    stop_free(sb);
    char h1[65], h2[65];
    sha256_file_hex(path, h1);
    snprintf(path, sizeof(path), "%s/one-gib", dst);
    sha256_file_hex(path, h2);
    TAP_EQ_STR(h2, h1);
    same_tree(src, dst);
    /* The whole file never sat in this process's memory. */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (!memcheck)
        TAP_TRUE(ru.ru_maxrss < 256 * 1024);
    free_and_census(s, p, state_dir);
}

/* --- hostile archives ------------------------------------------------------ */

/* Appends one ustar header (and `data`) to `f`. */
static void tar_entry(FILE *f, const char *name, char type, const char *link, const char *data)
{
    unsigned char h[512] = {0};
    size_t dl = data ? strlen(data) : 0;
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)dl);
    snprintf((char *)h + 136, 12, "%011o", 1600000000);
    h[156] = (unsigned char)type;
    if (link)
        snprintf((char *)h + 157, 100, "%s", link);
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    fwrite(h, 1, 512, f);
    if (dl) {
        fwrite(data, 1, dl, f);
        static const char zeros[512];
        if (dl % 512)
            fwrite(zeros, 1, 512 - dl % 512, f);
    }
}

static void tar_end(FILE *f)
{
    static const char zeros[1024];
    fwrite(zeros, 1, sizeof(zeros), f);
}

/* Uploads the archive at `path` to /work/t; returns the code and the message. */
static int upload_tar(sbx_sandbox *sb, const char *path, char *msg, size_t ml)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        TAP_FAIL("open %s", path);
    sbx_error *e = NULL;
    int rc = sbx_sandbox_upload_archive(sb, fd, "/work/t", 0, &e);
    snprintf(msg, ml, "%s", e ? sbx_error_message(e) : "");
    sbx_error_free(e);
    close(fd);
    return rc;
}

static void expect_missing(sbx_sandbox *sb, const char *path)
{
    const char *k = "unset";
    TAP_OK(sbx_sandbox_remote_kind(sb, path, &k, &e_));
    if (k)
        TAP_FAIL("%s exists in the box (%s): the archive wrote outside its target", path, k);
}

static void test_hostile_archives_write_nothing_outside(void)
{
    need_boxes();
    char hostdir[600], canary[700], path[800], msg[1024];
    /* Host canaries: a directory an absolute link in an archive would name. */
    snprintf(hostdir, sizeof(hostdir), "%s/host-canary", tap_tmpdir());
    mkdirs(hostdir);
    snprintf(canary, sizeof(canary), "%s/keep", hostdir);
    write_file_at(canary, "host\n", 0600, 1000000000);
    struct stat shadow_before, st;
    bool have_shadow = lstat("/etc/shadow", &shadow_before) == 0;

    sbx_provider *p = provider(NULL);
    sbx_spec *s = bare_spec();
    sbx_sandbox *sb = start(p, s);
    struct {
        const char *what;
        const char *want; /* in the error message */
    } cases[] = {
        {"dotdot", "'..'"},
        {"absolute", "absolute"},
        {"symlink-then-write", "in the way"},
        {"hardlink-shadow", "'..'"},
        {"hardlink-abs", "absolute"},
        {"huge-pax", "larger than"},
        {"bad-checksum", "checksum"},
        {"device", "unsupported type"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s.tar", tap_tmpdir(), cases[i].what);
        FILE *f = fopen(path, "we");
        TAP_TRUE(f != NULL);
        const char *w = cases[i].what;
        if (!strcmp(w, "dotdot")) {
            tar_entry(f, "ok", '0', NULL, "fine\n");
            tar_entry(f, "../x", '0', NULL, "escaped\n");
        } else if (!strcmp(w, "absolute")) {
            tar_entry(f, "/abs-x", '0', NULL, "escaped\n");
        } else if (!strcmp(w, "symlink-then-write")) {
            tar_entry(f, "l", '2', hostdir, NULL);
            snprintf(canary, sizeof(canary), "l/evil");
            tar_entry(f, canary, '0', NULL, "through the link\n");
        } else if (!strcmp(w, "hardlink-shadow")) {
            tar_entry(f, "sh", '1', "../../etc/shadow", NULL);
        } else if (!strcmp(w, "hardlink-abs")) {
            tar_entry(f, "sh", '1', "/etc/shadow", NULL);
        } else if (!strcmp(w, "huge-pax")) {
            unsigned char h[512] = {0};
            snprintf((char *)h, 100, "PaxHeaders/x");
            snprintf((char *)h + 100, 8, "%07o", 0644);
            snprintf((char *)h + 124, 12, "%011o", 07777777777);
            h[156] = 'x';
            memcpy(h + 257,
                   "ustar\0"
                   "00",
                   8);
            memset(h + 148, ' ', 8);
            unsigned sum = 0;
            for (int k = 0; k < 512; k++)
                sum += h[k];
            snprintf((char *)h + 148, 8, "%06o", sum);
            fwrite(h, 1, 512, f);
        } else if (!strcmp(w, "bad-checksum")) {
            tar_entry(f, "ok", '0', NULL, "fine\n");
            long end = ftell(f);
            tar_entry(f, "bad", '0', NULL, "x\n");
            fseek(f, end + 148, SEEK_SET);
            fputs("0000001", f);
            fseek(f, 0, SEEK_END);
        } else if (!strcmp(w, "device")) {
            tar_entry(f, "dev", '3', NULL, NULL);
        }
        tar_end(f);
        fclose(f);
        int rc = upload_tar(sb, path, msg, sizeof(msg));
        if (rc != SBX_ETRANSFER)
            TAP_FAIL("%s: got %d (%s), want SBX_ETRANSFER", w, rc, msg);
        TAP_CONTAINS(msg, cases[i].want);
    }
    expect_missing(sb, "/work/x");
    expect_missing(sb, "/x");
    expect_missing(sb, "/abs-x");
    expect_missing(sb, "/work/t/abs-x");
    expect_missing(sb, "/work/t/sh");
    expect_missing(sb, "/work/t/l/evil");
    /* In the box, the link resolves inside it: the host path is not there. */
    snprintf(path, sizeof(path), "%s/evil", hostdir);
    expect_missing(sb, path);
    /* The box's shadow is its own and unchanged. */
    char *data = NULL;
    size_t n = 0;
    TAP_OK(sbx_sandbox_read_file(sb, "/etc/shadow", 0, &data, &n, &e_));
    TAP_EQ_STR(data, "bare\n");
    free(data);
    stop_free(sb);
    /* On the host: nothing new next to the canary, shadow untouched. */
    TAP_TRUE(lstat(path, &st) < 0 && errno == ENOENT);
    snprintf(canary, sizeof(canary), "%s/keep", hostdir);
    TAP_EQ_INT(lstat(canary, &st), 0);
    TAP_EQ_INT((int)st.st_size, 5);
    if (have_shadow) {
        TAP_EQ_INT(lstat("/etc/shadow", &st), 0);
        TAP_TRUE(st.st_nlink == shadow_before.st_nlink);
        TAP_TRUE(st.st_mtim.tv_sec == shadow_before.st_mtim.tv_sec);
    }
    free_and_census(s, p, state_dir);
}

/* A box directory with links to / and /etc downloads as links, nothing behind them. */
static void test_download_of_link_to_root_stays_a_link(void)
{
    need_boxes();
    char src[600], dst[600], path[800];
    snprintf(src, sizeof(src), "%s/links", tap_tmpdir());
    snprintf(dst, sizeof(dst), "%s/links-back", tap_tmpdir());
    mkdirs(src);
    snprintf(path, sizeof(path), "%s/root", src);
    TAP_EQ_INT(symlink("/", path), 0);
    snprintf(path, sizeof(path), "%s/etc", src);
    TAP_EQ_INT(symlink("../../../../etc", path), 0);
    sbx_provider *p = provider(NULL);
    sbx_spec *s = bare_spec();
    sbx_sandbox *sb = start(p, s);
    TAP_OK(sbx_sandbox_upload_dir(sb, src, "/work/links", 0, &e_));
    /* Downloading through the link names the box's own root, not the host's. */
    TAP_OK(sbx_sandbox_download_dir(sb, "/work/links", dst, 0, &e_));
    stop_free(sb);
    char out[4096];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cd %s && find . | sort | tr '\\n' ' '", dst), 0);
    TAP_EQ_STR(out, ". ./etc ./root ");
    struct stat st;
    snprintf(path, sizeof(path), "%s/root", dst);
    TAP_EQ_INT(lstat(path, &st), 0);
    TAP_TRUE(S_ISLNK(st.st_mode));
    free_and_census(s, p, state_dir);
}

/* Bytes in and out without a local file; kinds; limits; errors. */
static void test_bytes_kinds_and_errors(void)
{
    need_boxes();
    sbx_provider *p = provider(NULL);
    sbx_spec *s = bare_spec();
    sbx_sandbox *sb = start(p, s);
    static const char bin[] = "a\0b\nc";
    TAP_OK(sbx_sandbox_write_file(sb, "deep/er/f.bin", bin, sizeof(bin), 0751, &e_));
    char *data = NULL;
    size_t n = 0;
    TAP_OK(sbx_sandbox_read_file(sb, "/work/deep/er/f.bin", 0, &data, &n, &e_));
    TAP_EQ_INT((int)n, (int)sizeof(bin));
    TAP_TRUE(memcmp(data, bin, n) == 0);
    free(data);
    const char *k = "unset";
    TAP_OK(sbx_sandbox_remote_kind(sb, "/nope", &k, &e_));
    TAP_NULL(k);
    TAP_OK(sbx_sandbox_remote_kind(sb, "/work/deep", &k, &e_));
    TAP_EQ_STR(k, "dir");
    sbx_error *e = NULL;
    TAP_EQ_INT(sbx_sandbox_read_file(sb, "/work/deep/er/f.bin", 3, &data, &n, &e), SBX_ETRANSFER);
    TAP_CONTAINS(sbx_error_message(e), "more than the limit");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_read_file(sb, "/work/deep", 0, &data, &n, &e), SBX_ETRANSFER);
    TAP_CONTAINS(sbx_error_message(e), "directory");
    sbx_error_free(e);
    e = NULL;
    char dst[600];
    snprintf(dst, sizeof(dst), "%s/none", tap_tmpdir());
    TAP_EQ_INT(sbx_sandbox_download_dir(sb, "/no/such/dir", dst, 0, &e), SBX_ETRANSFER);
    TAP_CONTAINS(sbx_error_message(e), "/no/such/dir");
    sbx_error_free(e);
    e = NULL;
    TAP_EQ_INT(sbx_sandbox_upload_dir(sb, "/no/such/host/dir", "/work/x", 0, &e), SBX_ENOENT);
    sbx_error_free(e);
    /* Owners: the exec user's unless asked. */
    char src[600], path[800];
    snprintf(src, sizeof(src), "%s/own", tap_tmpdir());
    mkdirs(src);
    snprintf(path, sizeof(path), "%s/f", src);
    write_file_at(path, "x\n", 0644, 1600000000);
    TAP_EQ_INT(chown(path, 1234, 4321), 0);
    TAP_OK(sbx_sandbox_upload_dir(sb, src, "/own-default", 0, &e_));
    /* A link to a directory as the source is followed (only at the top). */
    char via[700];
    snprintf(via, sizeof(via), "%s/own-link", tap_tmpdir());
    TAP_EQ_INT(symlink(src, via), 0);
    TAP_OK(sbx_sandbox_upload_dir(sb, via, "/via-link", 0, &e_));
    TAP_OK(sbx_sandbox_remote_kind(sb, "/via-link/f", &k, &e_));
    TAP_EQ_STR(k, "file");
    TAP_OK(sbx_sandbox_upload_dir(sb, src, "/own-kept", SBX_TRANSFER_PRESERVE_OWNER, &e_));
    char back[600];
    struct stat st;
    snprintf(back, sizeof(back), "%s/own-back", tap_tmpdir());
    TAP_OK(sbx_sandbox_download_dir(sb, "/own-kept", back, SBX_TRANSFER_PRESERVE_OWNER, &e_));
    snprintf(path, sizeof(path), "%s/f", back);
    TAP_EQ_INT(lstat(path, &st), 0);
    TAP_EQ_INT((int)st.st_uid, 1234);
    TAP_EQ_INT((int)st.st_gid, 4321);
    snprintf(back, sizeof(back), "%s/own-back2", tap_tmpdir());
    TAP_OK(sbx_sandbox_download_dir(sb, "/own-default", back, SBX_TRANSFER_PRESERVE_OWNER, &e_));
    snprintf(path, sizeof(path), "%s/f", back);
    TAP_EQ_INT(lstat(path, &st), 0);
    TAP_EQ_INT((int)st.st_uid, 0);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

/* The async forms: four uploads and four downloads at once on one box. */
static void test_async_transfers_run_at_once(void)
{
    need_boxes();
    char src[600], path[800];
    snprintf(src, sizeof(src), "%s/asrc", tap_tmpdir());
    snprintf(path, sizeof(path), "%s/sub", src);
    mkdirs(path);
    for (int i = 0; i < 200; i++) {
        snprintf(path, sizeof(path), "%s/sub/f%d", src, i);
        write_file_at(path, "async\n", 0640, 1600000000 + i);
    }
    sbx_provider *p = provider(NULL);
    sbx_spec *s = bare_spec();
    sbx_sandbox *sb = start(p, s);
    sbx_future *f[4];
    char remote[4][64], local[4][700];
    for (int i = 0; i < 4; i++) {
        snprintf(remote[i], sizeof(remote[i]), "/work/a%d", i);
        TAP_OK(sbx_sandbox_upload_dir_async(sb, src, remote[i], 0, &f[i], &e_));
    }
    for (int i = 0; i < 4; i++) {
        TAP_OK(sbx_future_wait(f[i], -1, &e_));
        sbx_future_free(f[i]);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(local[i], sizeof(local[i]), "%s/aback%d", tap_tmpdir(), i);
        TAP_OK(sbx_sandbox_download_dir_async(sb, remote[i], local[i], 0, &f[i], &e_));
    }
    for (int i = 0; i < 4; i++) {
        TAP_OK(sbx_future_wait(f[i], -1, &e_));
        sbx_future_free(f[i]);
        same_tree(src, local[i]);
    }
    /* A failure completes the future with the box's reason. */
    sbx_error *e = NULL;
    TAP_OK(sbx_sandbox_download_dir_async(sb, "/no/such", local[0], 0, &f[0], &e_));
    TAP_EQ_INT(sbx_future_wait(f[0], -1, &e), SBX_ETRANSFER);
    TAP_CONTAINS(sbx_error_message(e), "/no/such");
    sbx_error_free(e);
    sbx_future_free(f[0]);
    stop_free(sb);
    free_and_census(s, p, state_dir);
}

int main(int argc, char **argv)
{
    static const struct tap_test tests[] = {
        TAP_T(test_tree_of_10000_files_round_trips, 300),
        TAP_T(test_one_gib_file_round_trips_in_bounded_memory, 600),
        TAP(test_hostile_archives_write_nothing_outside),
        TAP(test_download_of_link_to_root_stays_a_link),
        TAP(test_bytes_kinds_and_errors),
        TAP(test_async_transfers_run_at_once),
    };
    return tap_main(argc, argv, tests, sizeof(tests) / sizeof(tests[0]));
}
