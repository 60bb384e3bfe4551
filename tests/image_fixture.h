/*
 * Image fixtures for the linux store's tests (test_image_store.c,
 * test_image_commit.c): shell helpers, a busybox OCI layout and tarball
 * built in the test's temp dir, small layers, and an import that counts the
 * layers it unpacked. Include after linux_fixture.h (state_dir).
 */
#ifndef SBX_TESTS_IMAGE_FIXTURE_H
#define SBX_TESTS_IMAGE_FIXTURE_H

#include "tap.h"
#include "common.h"
#include "linux_fixture.h"
#include "lib/box.h"

#include "providers/linux/linux.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>

/* Runs a shell script; fails the test when it fails. */
static inline void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void sh(const char *fmt, ...)
{
    char script[8192], out[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(script, sizeof(script), fmt, ap);
    va_end(ap);
    if (run_cmd(out, sizeof(out), "set -e; %s", script) != 0)
        TAP_FAIL("%s: %s", script, out);
}

/*
 * <tmp>/mklayout LAYOUT TAG LAYER.tar...: an OCI layout of the layers in
 * order, each gzipped (gzip -n: the same tar gives the same blob in every
 * layout), with a config whose diff_ids are the tars' digests. $CONFIG is
 * the config's "config" object; $BAD_DIFF plants a wrong diff_id.
 */
static inline const char *mklayout(void)
{
    static char path[600];
    snprintf(path, sizeof(path), "%s/mklayout", tap_tmpdir());
    const char *script =
        "#!/bin/sh\n"
        "set -e\n"
        "L=$1; tag=$2; shift 2\n"
        ": ${CONFIG:='{}'}\n"
        "mkdir -p $L/blobs/sha256\n"
        "layers=; diffs=\n"
        "for f in \"$@\"; do\n"
        "  diff=$(sha256sum \"$f\" | cut -d' ' -f1)\n"
        "  [ -n \"$BAD_DIFF\" ] && diff=$(echo bad | sha256sum | cut -d' ' -f1)\n"
        "  gzip -n -c \"$f\" > \"$f.gz\"\n"
        "  d=$(sha256sum \"$f.gz\" | cut -d' ' -f1); cp \"$f.gz\" $L/blobs/sha256/$d\n"
        "  s=$(stat -c %s \"$f.gz\")\n"
        "  layers=\"$layers${layers:+,}{\\\"mediaType\\\":\\\"application/"
        "vnd.oci.image.layer.v1.tar+gzip\\\",\\\"digest\\\":\\\"sha256:$d\\\",\\\"size\\\":$s}\"\n"
        "  diffs=\"$diffs${diffs:+,}\\\"sha256:$diff\\\"\"\n"
        "done\n"
        "printf '{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":%s,\"rootfs\":"
        "{\"type\":\"layers\",\"diff_ids\":[%s]}}' \"$CONFIG\" \"$diffs\" > $L/c.json\n"
        "c=$(sha256sum $L/c.json | cut -d' ' -f1); cs=$(stat -c %s $L/c.json)\n"
        "mv $L/c.json $L/blobs/sha256/$c\n"
        "printf '{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/"
        "vnd.oci.image.config.v1+json\",\"digest\":\"sha256:%s\",\"size\":%s},\"layers\":[%s]}' "
        "$c $cs \"$layers\" > $L/m.json\n"
        "m=$(sha256sum $L/m.json | cut -d' ' -f1); mv $L/m.json $L/blobs/sha256/$m\n"
        "printf '{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/"
        "vnd.oci.image.manifest.v1+json\",\"digest\":\"sha256:%s\",\"annotations\":"
        "{\"org.opencontainers.image.ref.name\":\"%s\"}}]}' $m $tag > $L/index.json\n"
        "echo '{\"imageLayoutVersion\":\"1.0.0\"}' > $L/oci-layout\n";
    if (write_text(path, script) != 0 || chmod(path, 0755) != 0)
        TAP_FAIL("writing %s", path);
    return path;
}

/* A busybox root tree as a tarball at <tmp>/bb.tar (the tree at <tmp>/bb). */
static inline void busybox_tar(void)
{
    if (!have_file("/bin/busybox"))
        TAP_SKIP("busybox-static is not installed");
    const char *t = tap_tmpdir();
    sh("d=%s/bb; mkdir -p $d/bin $d/etc $d/tmp; cp /bin/busybox $d/bin/; "
       "for a in $(/bin/busybox --list); do [ $a = busybox ] || ln -s busybox $d/bin/$a; done; "
       "echo 'root:x:0:0:root:/root:/bin/sh' > $d/etc/passwd; echo 'root:x:0:' > $d/etc/group; "
       "echo bb-image > $d/etc/marker; mkdir -p $d/opq; echo old > $d/opq/old; "
       "tar -C $d -cf %s/bb.tar .",
       t, t);
}

/* A small layer <tmp>/NAME.tar: `setup` runs in its empty directory. */
static inline void layer(const char *name, const char *setup)
{
    const char *t = tap_tmpdir();
    sh("rm -rf %s/%s.d; mkdir -p %s/%s.d; cd %s/%s.d; %s; tar -cf %s/%s.tar .", t, name, t, name, t,
       name, setup, t, name);
}

struct count {
    int unpacked;
};

static inline void count_progress(const char *stage, uint64_t done, uint64_t total, void *data)
{
    (void)total;
    if (!strcmp(stage, "layers"))
        ((struct count *)data)->unpacked = (int)done;
}

/* Imports `source` as `name`; returns how many layers this import unpacked. */
static inline int import(const char *name, const char *source)
{
    struct count c = {-1};
    sbx_linux_image_opts io = {.progress = count_progress, .data = &c};
    sbx_error *e = NULL;
    if (sbx__linux_image_import(state_dir, NULL, name, source, &io, &e) != SBX_OK)
        TAP_FAIL("import %s from %s: %s", name, source, e ? sbx_error_message(e) : "?");
    return c.unpacked;
}

/* The overlay lower dirs of `image`, top first. */
static inline json_t *lowers_of(const char *image)
{
    char *rootfs = NULL;
    json_t *l = NULL;
    bool none = false;
    sbx_error *e = NULL;
    if (sbx__linux_image_resolve(state_dir, NULL, image, NULL, &rootfs, &l, &none, &e) != SBX_OK)
        TAP_FAIL("resolve %s: %s", image, e ? sbx_error_message(e) : "?");
    free(rootfs);
    return l;
}

static inline int count_dir(const char *sub, const char *prefix)
{
    char p[900];
    snprintf(p, sizeof(p), "%s/images/%s", state_dir, sub);
    DIR *d = opendir(p);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += de->d_name[0] != '.' && !strncmp(de->d_name, prefix, strlen(prefix));
    if (d)
        closedir(d);
    return n;
}

static inline sbx_sandbox *box_of(sbx_provider *p, const char *image)
{
    sbx_spec *s = sbx_spec_new();
    sbx_spec_set_image(s, image);
    sbx_sandbox *sb = start(p, s);
    sbx_spec_free(s);
    return sb;
}

#endif
