/*
 * An OCI image layout that sbx writes (image-layout spec 1.0):
 *
 *   DIR/oci-layout              {"imageLayoutVersion": "1.0.0"}
 *   DIR/index.json              the tagged manifests, each with the
 *                               annotation org.opencontainers.image.ref.name
 *   DIR/blobs/sha256/<hex>      every blob, named by the sha256 of its bytes
 *   DIR/blobs/sha256/<hex>.partial   a blob being written (kept for resume)
 *
 * A blob appears under its final name only once its bytes hash to that
 * name, so a reader never sees a wrong or half blob: registry pulls, archive
 * imports and commits all land here before the store imports the image.
 * Writers of one blob are serialized by a lock on its .partial file; the
 * index by a lock on the layout directory.
 */
#ifndef SBX_IMAGE_LAYOUT_H
#define SBX_IMAGE_LAYOUT_H

#include "core/internal.h"

#include <stdint.h>

/* "sha256:" + 64 lowercase hex digits + NUL */
#define SBX_DIGEST_LEN 72

/* True when `d` is "sha256:" followed by exactly 64 lowercase hex digits. */
SBX_INTERNAL bool sbx__digest_ok(const char *d);

/* Makes DIR a layout (its blobs/sha256/ and oci-layout) when it is not one yet. */
SBX_INTERNAL int sbx__layout_init(const char *dir, sbx_error **err);
/* "DIR/blobs/sha256/<hex>" for a valid digest, else NULL. */
SBX_INTERNAL char *sbx__layout_blob_path(const char *dir, const char *digest);
/* True when the blob is present (a regular file under its final name). */
SBX_INTERNAL bool sbx__layout_has_blob(const char *dir, const char *digest);

typedef struct sbx_blob_writer sbx_blob_writer;

/*
 * Starts writing a blob. With `want` (a digest), the bytes go to
 * <hex>.partial under an exclusive lock (a second writer of the same blob
 * waits): when the blob is already present, returns 1 with *out NULL (nothing
 * to do); with `resume`, bytes of an earlier partial are kept and hashed, and
 * sbx__blob_writer_size says where to continue. Without `want`, the name is
 * known only at commit. Returns 0 with *out set, or a negative sbx code.
 */
SBX_INTERNAL int sbx__blob_writer_begin(const char *dir, const char *want, bool resume,
                                        sbx_blob_writer **out, sbx_error **err);
SBX_INTERNAL int sbx__blob_writer_write(sbx_blob_writer *w, const void *buf, size_t n,
                                        sbx_error **err);
/* Bytes in the blob so far (those resumed included). */
SBX_INTERNAL uint64_t sbx__blob_writer_size(const sbx_blob_writer *w);
/*
 * Checks the bytes against `want` (SBX_EIO "... does not match its digest",
 * the partial removed) and moves the blob to its name; `digest` (optional)
 * gets "sha256:<hex>". Frees `w` in every case.
 */
SBX_INTERNAL int sbx__blob_writer_commit(sbx_blob_writer *w, char digest[SBX_DIGEST_LEN],
                                         sbx_error **err);
/* Stops: the partial stays for a resume when `keep`, else it is removed. Frees `w`. */
SBX_INTERNAL void sbx__blob_writer_abort(sbx_blob_writer *w, bool keep);

/* Writes a small blob (a manifest, a config) in one call. */
SBX_INTERNAL int sbx__layout_put_blob(const char *dir, const void *data, size_t n,
                                      char digest[SBX_DIGEST_LEN], sbx_error **err);
/*
 * Points `ref_name` at a manifest in index.json (replacing what it named
 * before), under the layout's lock.
 */
SBX_INTERNAL int sbx__layout_tag(const char *dir, const char *ref_name, const char *media_type,
                                 const char *digest, uint64_t size, sbx_error **err);

#endif
