/*
 * Reading a SIF file's header and descriptors (see sif.h for the layout).
 * Pure code over a buffer, so its fuzz target (fuzz/fuzz_sif.c) runs it alone.
 */
#include "image/sif.h"

#include <string.h>

#define SIF_MAGIC "SIF_MAGIC"
#define SIF_DATA_PARTITION 0x4004
#define SIF_FS_SQUASH 1
#define SIF_FS_EXT3 2
#define SIF_FS_ENC_SQUASH 5
#define SIF_PART_PRIMSYS 2

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

bool sbx__sif_is(const uint8_t *buf, size_t n)
{
    return n >= SBX_SIF_HEADER_SIZE && memcmp(buf + 32, SIF_MAGIC, sizeof(SIF_MAGIC)) == 0;
}

/*
 * The descriptor table's place, checked: a count within bounds, a table
 * inside the file, its declared size at least count * 585 (signed fields
 * read as unsigned, so a negative one is simply huge and refused).
 */
static int table(const uint8_t *buf, uint64_t file_size, uint64_t *off, uint64_t *count,
                 sbx_error **err)
{
    uint64_t total = le64(buf + 88), doff = le64(buf + 96), dsize = le64(buf + 104);
    if (total == 0 || total > SBX_SIF_MAX_DESCRIPTORS)
        return sbx__set_error(err, SBX_EINVAL,
                              "the SIF header claims %llu descriptors (1 to %d "
                              "expected): a corrupt or hostile SIF file",
                              (unsigned long long)total, SBX_SIF_MAX_DESCRIPTORS);
    uint64_t need = total * SBX_SIF_DESCRIPTOR_SIZE;
    if (doff < SBX_SIF_HEADER_SIZE || doff > file_size || need > file_size - doff || dsize < need)
        return sbx__set_error(err, SBX_EINVAL,
                              "the SIF descriptor table (offset %llu, %llu descriptors) lies "
                              "outside the %llu-byte file: a truncated or hostile SIF file",
                              (unsigned long long)doff, (unsigned long long)total,
                              (unsigned long long)file_size);
    *off = doff;
    *count = total;
    return SBX_OK;
}

uint64_t sbx__sif_header_bytes(const uint8_t *hdr, size_t n, uint64_t file_size)
{
    uint64_t off, count;
    if (!sbx__sif_is(hdr, n) || table(hdr, file_size, &off, &count, NULL) < 0)
        return 0;
    return off + count * SBX_SIF_DESCRIPTOR_SIZE;
}

int sbx__sif_find_rootfs(const uint8_t *buf, size_t n, uint64_t file_size, uint64_t *offset,
                         uint64_t *size, sbx_error **err)
{
    if (!sbx__sif_is(buf, n) || file_size < n)
        return sbx__set_error(err, SBX_EINVAL, "not a SIF file (no SIF_MAGIC header)");
    if (memcmp(buf + 42, "01", 3) != 0)
        return sbx__set_error(err, SBX_ENOTSUP,
                              "SIF version %.2s is not supported (sbx reads version 01)",
                              (const char *)buf + 42);
    uint64_t doff, count;
    int rc = table(buf, file_size, &doff, &count, err);
    if (rc < 0)
        return rc;
    if (doff + count * SBX_SIF_DESCRIPTOR_SIZE > n)
        return sbx__set_error(err, SBX_EINVAL, "the SIF descriptor table was not read whole");
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *d = buf + doff + i * SBX_SIF_DESCRIPTOR_SIZE;
        if (le32(d) != SIF_DATA_PARTITION || d[4] == 0)
            continue;
        uint32_t fstype = le32(d + 201), parttype = le32(d + 205);
        if (parttype != SIF_PART_PRIMSYS)
            continue;
        if (fstype != SIF_FS_SQUASH)
            return sbx__set_error(err, SBX_ENOTSUP,
                                  "the SIF's system partition is %s, not squashfs: sbx runs "
                                  "squashfs SIF images only",
                                  fstype == SIF_FS_EXT3         ? "ext3"
                                  : fstype == SIF_FS_ENC_SQUASH ? "an encrypted squashfs"
                                                                : "of an unknown type");
        uint64_t off = le64(d + 17), sz = le64(d + 25);
        if (off > file_size || sz > file_size - off || sz == 0)
            return sbx__set_error(err, SBX_EINVAL,
                                  "the SIF's system partition (offset %llu, %llu bytes) lies "
                                  "outside the %llu-byte file: a truncated or hostile SIF file",
                                  (unsigned long long)off, (unsigned long long)sz,
                                  (unsigned long long)file_size);
        *offset = off;
        *size = sz;
        return SBX_OK;
    }
    return sbx__set_error(err, SBX_EINVAL,
                          "the SIF file has no primary system partition (a SIF with data only?)");
}
