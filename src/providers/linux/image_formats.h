/*
 * Image sources beyond a rootfs tarball, directory or OCI layout, for
 * image.c's import: `docker save` archives and oci-archives (unpacked into a
 * temporary OCI layout that image.c's OCI import reads), SIF and squashfs
 * images (read in userland by libsquashfs and streamed as a tar into the
 * same unpacker), and stdin (spooled to a temporary file of the store).
 * Every temporary lives in <store>/tmp-<pid>-<start>-<random> (`images` below
 * is the store's directory), so a killed import's is collected by
 * sbx__linux_image_gc_dir.
 */
#ifndef SBX_LINUX_IMAGE_FORMATS_H
#define SBX_LINUX_IMAGE_FORMATS_H

#include "providers/linux/linux.h"

/* A tar-stream file (maybe compressed), or a squashfs at offset/size (a SIF's partition, or a whole
 * .sqsh). */
typedef struct {
    enum { SBX_LINUX_SRC_TAR, SBX_LINUX_SRC_SQUASHFS } kind;
    bool sif;
    uint64_t offset, size;
} sbx_linux_src;

/* What the regular file at `path` holds, by its bytes (never its name). */
SBX_INTERNAL int sbx__linux_image_sniff(const char *path, sbx_linux_src *out, sbx_error **err);

/*
 * When the tar file at `path` is a `docker save` archive or an oci-archive:
 * its image (`sel` picks one by tag when there are several) extracted to a
 * new temporary OCI layout `*layout` under `images` (the caller removes it),
 * tagged `*tag`; returns 0. Returns 1 with nothing made when it is a plain
 * rootfs tarball. Every blob is stored under the digest of its bytes and
 * checked against any digest the archive claims; `max_bytes` bounds them.
 */
SBX_INTERNAL int sbx__linux_archive_to_layout(const char *images, const char *path, const char *sel,
                                              const sbx_linux_image_opts *opts, uint64_t max_bytes,
                                              char **layout, char **tag, sbx_error **err);

/*
 * "ARCHIVE:SEL" (ARCHIVE an existing regular file, SEL a tag or a
 * reference such as fmt/app:v1): cuts `path` after ARCHIVE and returns SEL
 * (inside `path`), or NULL when no prefix of `path` is such a file.
 */
SBX_INTERNAL char *sbx__linux_source_selector(char *path);

typedef struct sbx_sqfs_stream sbx_sqfs_stream;

/*
 * Opens the squashfs at [offset, offset+size) of `path` with libsquashfs and
 * starts a thread that writes its tree as a tar stream into `*fd` (the read
 * end, close-on-exec, the caller's). The superblock and the whole directory
 * tree are read and checked before it returns, so a corrupt image fails here.
 */
SBX_INTERNAL int sbx__linux_sqfs_stream_start(const char *path, uint64_t offset, uint64_t size,
                                              sbx_sqfs_stream **out, int *fd, sbx_error **err);
/* Waits for the thread (close the read end first) and frees; its error, if any. */
SBX_INTERNAL int sbx__linux_sqfs_stream_end(sbx_sqfs_stream *s, sbx_error **err);

/*
 * Copies stdin to a new temporary <store>/tmp-.../stdin, at most `max_bytes`
 * (0: 16 GiB), answering `opts->cancelled` while it waits for input.
 * `*dir` is the temporary to remove, `*file` the copy.
 */
SBX_INTERNAL int sbx__linux_spool_stdin(const char *images, const sbx_linux_image_opts *opts,
                                        uint64_t max_bytes, char **dir, char **file,
                                        sbx_error **err);

#endif
