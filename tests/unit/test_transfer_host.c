/*
 * The host side of a download (src/core/transfer.c, sbx__transfer_unpack_fd)
 * fed the tar streams a hostile box would send instead of its files: names
 * that leave the target, links that lead out and files written through them,
 * hard links to host files, devices, setuid bits, more entries than allowed.
 * Each must end in a refusal (or a skipped entry) with nothing written or
 * linked outside the target, and no host file changed.
 */
#include "tap.h"
#include "common.h"
#include "lib/tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "core/internal.h"

static char target[PATH_MAX], outside[PATH_MAX], secret[PATH_MAX + 16];

static void setup(void)
{
    snprintf(target, sizeof(target), "%s/target", tap_tmpdir());
    snprintf(outside, sizeof(outside), "%s/outside", tap_tmpdir());
    snprintf(secret, sizeof(secret), "%s/secret", outside);
    TAP_EQ_INT(mkdir(target, 0755), 0);
    TAP_EQ_INT(mkdir(outside, 0755), 0);
    FILE *f = fopen(secret, "we");
    TAP_TRUE(f != NULL);
    fputs("host\n", f);
    fclose(f);
}

/* An archive being written to a memfd, the stream a box would send. */
struct stream {
    int fd;
    struct archive *a;
};

static struct stream stream_new(void)
{
    struct stream s = {memfd_create("tar", MFD_CLOEXEC), archive_write_new()};
    TAP_TRUE(s.fd >= 0 && s.a != NULL);
    archive_write_set_format_pax_restricted(s.a);
    TAP_EQ_INT(archive_write_open_fd(s.a, s.fd), ARCHIVE_OK);
    return s;
}

/* Adds one entry (tar_add()). */
static void add(struct stream *s, const char *name, char type, const char *link_or_data,
                unsigned mode)
{
    tar_add(s->a, name, type, link_or_data, mode);
}

/* Ends the stream and unpacks it into the target (which closes it): the code, `msg`. */
static int unpack(struct stream *s, char *msg, size_t ml)
{
    TAP_EQ_INT(archive_write_close(s->a), ARCHIVE_OK);
    archive_write_free(s->a);
    lseek(s->fd, 0, SEEK_SET);
    return sbx__transfer_unpack_fd(s->fd, target, 0, msg, ml);
}

static bool exists_in(const char *dir, const char *rel)
{
    char p[PATH_MAX * 2];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    return lstat(p, &st) == 0;
}

static bool is_dir_in(const char *dir, const char *rel)
{
    char p[PATH_MAX * 2];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The host file is as it was: same content, one link. */
static void secret_untouched(void)
{
    struct stat st;
    TAP_EQ_INT(lstat(secret, &st), 0);
    TAP_EQ_INT((int)st.st_nlink, 1);
    TAP_EQ_INT((int)st.st_size, 5);
    char out[64];
    TAP_EQ_INT(run_cmd(out, sizeof(out), "cat %s", secret), 0);
    TAP_EQ_STR(out, "host\n");
    TAP_TRUE(!exists_in(outside, "evil"));
    TAP_TRUE(!exists_in(tap_tmpdir(), "evil"));
}

static void test_names_that_leave_are_refused(void)
{
    setup();
    const char *names[] = {"../evil", "a/../../evil", "/evil", "./../evil"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(names); i++) {
        struct stream s = stream_new();
        add(&s, "ok", 'f', "fine\n", 0644);
        add(&s, names[i], 'f', "escaped\n", 0644);
        char msg[512];
        int rc = unpack(&s, msg, sizeof(msg));
        if (rc != SBX_EPROTO)
            TAP_FAIL("%s: got %d (%s), want SBX_EPROTO", names[i], rc, msg);
        TAP_CONTAINS(msg, "unsafe name");
    }
    secret_untouched();
}

static void test_links_that_lead_out_write_nothing_there(void)
{
    setup();
    char msg[512];
    /*
     * A link to the outside directory, then a file written through it: the
     * link is replaced by a directory of the target (libarchive's
     * SECURE_SYMLINKS with UNLINK, as tar does) or the entry is refused;
     * either way the file lands inside.
     */
    struct stream s = stream_new();
    add(&s, "l", 'l', outside, 0777);
    add(&s, "l/evil", 'f', "through the link\n", 0644);
    if (unpack(&s, msg, sizeof(msg)) == SBX_OK)
        TAP_TRUE(is_dir_in(target, "l") && exists_in(target, "l/evil"));
    secret_untouched();
    /* The same by a relative link, and a file over the host file's name. */
    s = stream_new();
    add(&s, "r", 'l', "../outside", 0777);
    add(&s, "r/secret", 'f', "overwritten\n", 0644);
    if (unpack(&s, msg, sizeof(msg)) == SBX_OK)
        TAP_TRUE(is_dir_in(target, "r") && exists_in(target, "r/secret"));
    secret_untouched();
    /* A hard link through a link to a host file: never linked in. */
    s = stream_new();
    add(&s, "o", 'l', outside, 0777);
    add(&s, "h", 'h', "o/secret", 0644);
    int rc = unpack(&s, msg, sizeof(msg));
    if (rc == SBX_OK) {
        struct stat st;
        if (lstat(secret, &st) == 0 && st.st_nlink != 1)
            TAP_FAIL("a hard link to the host file was made in the target");
    }
    secret_untouched();
    /* Hard links by '..' or an absolute name are unsafe names. */
    const char *hl[] = {"../outside/secret", "/etc/passwd"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(hl); i++) {
        s = stream_new();
        add(&s, "h2", 'h', hl[i], 0644);
        TAP_EQ_INT(unpack(&s, msg, sizeof(msg)), SBX_EPROTO);
        TAP_CONTAINS(msg, "unsafe name");
        TAP_TRUE(!exists_in(target, "h2"));
    }
    secret_untouched();
}

static void test_devices_skipped_and_setuid_dropped(void)
{
    setup();
    char msg[512];
    struct stream s = stream_new();
    add(&s, "null", 'c', NULL, 0666);
    add(&s, "suid", 'f', "#!/bin/sh\n", 04755);
    add(&s, "sgid-dir", 'd', NULL, 02775);
    add(&s, "plain", 'f', "x\n", 0640);
    TAP_EQ_INT(unpack(&s, msg, sizeof(msg)), SBX_OK);
    struct stat st;
    TAP_TRUE(!exists_in(target, "null"));
    char p[PATH_MAX * 2];
    snprintf(p, sizeof(p), "%s/suid", target);
    TAP_EQ_INT(lstat(p, &st), 0);
    TAP_EQ_INT((int)(st.st_mode & 07777), 0755);
    snprintf(p, sizeof(p), "%s/sgid-dir", target);
    TAP_EQ_INT(lstat(p, &st), 0);
    TAP_EQ_INT((int)(st.st_mode & 02000), 0);
    snprintf(p, sizeof(p), "%s/plain", target);
    TAP_EQ_INT(lstat(p, &st), 0);
    TAP_EQ_INT((int)(st.st_mode & 07777), 0640);
    TAP_EQ_INT((int)st.st_mtim.tv_sec, TAR_MTIME);
}

static void test_garbage_is_a_clear_error(void)
{
    setup();
    int fd = memfd_create("junk", MFD_CLOEXEC);
    static const char junk[1024] = "this is not a tar archive, whatever the box says";
    TAP_EQ_INT((int)write(fd, junk, sizeof(junk)), (int)sizeof(junk));
    lseek(fd, 0, SEEK_SET);
    char msg[512];
    TAP_EQ_INT(sbx__transfer_unpack_fd(fd, target, 0, msg, sizeof(msg)), SBX_EPROTO);
    TAP_CONTAINS(msg, "malformed");
    /* A stream cut in the middle of a file. */
    struct stream s = stream_new();
    add(&s, "big", 'f', "0123456789abcdef", 0644);
    TAP_EQ_INT(archive_write_close(s.a), ARCHIVE_OK);
    archive_write_free(s.a);
    TAP_EQ_INT(ftruncate(s.fd, 600), 0);
    lseek(s.fd, 0, SEEK_SET);
    TAP_TRUE(sbx__transfer_unpack_fd(s.fd, target, 0, msg, sizeof(msg)) != SBX_OK);
    TAP_TRUE(msg[0] != 0);
    secret_untouched();
}

TAP_MAIN(TAP(test_names_that_leave_are_refused), TAP(test_links_that_lead_out_write_nothing_there),
         TAP(test_devices_skipped_and_setuid_dropped), TAP(test_garbage_is_a_clear_error))
