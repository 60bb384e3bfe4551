/*
 * The Singularity Image Format (SIF, sylabs/sif v2, little-endian, packed):
 *
 *   global header, 128 bytes at offset 0:
 *     0   launch script [32]     32  magic "SIF_MAGIC\0" [10]
 *     42  version "01\0" [3]     45  arch [3] (deprecated)
 *     48  id [16]                64  created_at, modified_at (i64 each)
 *     80  descriptors_free i64   88  descriptors_total i64
 *     96  descriptors_offset i64 104 descriptors_size i64
 *     112 data_offset i64        120 data_size i64
 *   descriptors_total descriptors of 585 bytes at descriptors_offset:
 *     0   data_type i32 (0x4004: a partition)   4 used u8
 *     5   id u32   9 group_id u32   13 linked_id u32
 *     17  offset i64   25 size i64   33 size_with_padding i64
 *     41  created_at, modified_at, uid, gid (i64 each)   73 name [128]
 *     201 extra [384]: for a partition, fstype i32 (1: squashfs),
 *         parttype i32 (2: the primary system partition), arch [3]
 *
 * The header and descriptors are outside bytes: every count, offset and
 * size is checked against the file's size before anything is read there.
 */
#ifndef SBX_IMAGE_SIF_H
#define SBX_IMAGE_SIF_H

#include "core/internal.h"

#include <stdint.h>

#define SBX_SIF_HEADER_SIZE 128
#define SBX_SIF_DESCRIPTOR_SIZE 585
/* Far above what apptainer writes (a handful): a header claiming more is hostile. */
#define SBX_SIF_MAX_DESCRIPTORS 4096

/* True when `buf` (its first n bytes) starts with a SIF global header's magic. */
SBX_INTERNAL bool sbx__sif_is(const uint8_t *buf, size_t n);

/*
 * Finds the primary system partition (a squashfs) of a SIF file whose first
 * `n` bytes are `buf` and whose size is `file_size`: *offset and *size (both
 * inside the file) on success. The descriptors must lie within `buf`; a
 * caller reads min(file_size, SBX_SIF_HEADER_SIZE + the descriptors) bytes.
 * SBX_EINVAL with a message naming the fault on a bad or hostile header;
 * SBX_ENOTSUP for a primary partition that is not squashfs (ext3, an
 * encrypted squashfs).
 */
SBX_INTERNAL int sbx__sif_find_rootfs(const uint8_t *buf, size_t n, uint64_t file_size,
                                      uint64_t *offset, uint64_t *size, sbx_error **err);

/* Bytes of the file that sbx__sif_find_rootfs needs, or 0 when the header is bad. */
SBX_INTERNAL uint64_t sbx__sif_header_bytes(const uint8_t *hdr, size_t n, uint64_t file_size);

#endif
