/*
 * The SIF header parser (src/image/sif.c): the primary system partition of
 * a well-formed header is found; a partition or descriptor table outside
 * the file, a descriptor count past the bound, a non-squashfs partition and
 * a truncated header are refused with a message.
 */
#include "tap.h"
#include "common.h"

#include "image/sif.h"

#include <string.h>

#define NDESC 2
#define PAYLOAD 64
#define TOTAL (SBX_SIF_HEADER_SIZE + NDESC * SBX_SIF_DESCRIPTOR_SIZE + PAYLOAD)

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A SIF of a deffile descriptor and a squashfs primary partition (see sif.h). */
static void make(uint8_t *b, uint32_t fstype, uint64_t part_off, uint64_t part_size)
{
    memset(b, 0, TOTAL);
    memcpy(b + 32, "SIF_MAGIC", 10);
    memcpy(b + 42, "01", 3);
    put64(b + 88, NDESC);
    put64(b + 96, SBX_SIF_HEADER_SIZE);
    put64(b + 104, NDESC * SBX_SIF_DESCRIPTOR_SIZE);
    uint8_t *d = b + SBX_SIF_HEADER_SIZE;
    put32(d, 0x4001); /* a deffile */
    d[4] = 1;
    d += SBX_SIF_DESCRIPTOR_SIZE;
    put32(d, 0x4004);
    d[4] = 1;
    put64(d + 17, part_off);
    put64(d + 25, part_size);
    put32(d + 201, fstype);
    put32(d + 205, 2);
}

static int find(const uint8_t *b, size_t n, uint64_t *off, uint64_t *size, char *msg)
{
    sbx_error *e = NULL;
    int rc = sbx__sif_find_rootfs(b, n, n, off, size, &e);
    snprintf(msg, 256, "%s", e ? sbx_error_message(e) : "");
    sbx_error_free(e);
    return rc;
}

static void test_finds_the_partition(void)
{
    uint8_t b[TOTAL];
    make(b, 1, TOTAL - PAYLOAD, PAYLOAD);
    uint64_t off = 0, size = 0;
    char msg[256];
    TAP_EQ_INT(sbx__sif_header_bytes(b, TOTAL, TOTAL), TOTAL - PAYLOAD);
    TAP_OK(find(b, TOTAL, &off, &size, msg));
    TAP_EQ_INT(off, TOTAL - PAYLOAD);
    TAP_EQ_INT(size, PAYLOAD);
}

static void test_hostile_headers(void)
{
    uint8_t b[TOTAL];
    uint64_t off, size;
    char msg[256];
    make(b, 1, TOTAL - PAYLOAD, PAYLOAD + 1);
    TAP_EQ_INT(find(b, TOTAL, &off, &size, msg), SBX_EINVAL);
    TAP_TRUE(strstr(msg, "outside the") != NULL);
    make(b, 1, UINT64_MAX - 10, 20); /* offset + size wraps */
    TAP_EQ_INT(find(b, TOTAL, &off, &size, msg), SBX_EINVAL);
    make(b, 2, TOTAL - PAYLOAD, PAYLOAD);
    TAP_EQ_INT(find(b, TOTAL, &off, &size, msg), SBX_ENOTSUP);
    TAP_TRUE(strstr(msg, "ext3") != NULL);
    make(b, 1, TOTAL - PAYLOAD, PAYLOAD);
    put64(b + 88, 1ull << 40); /* descriptors */
    TAP_EQ_INT(find(b, TOTAL, &off, &size, msg), SBX_EINVAL);
    TAP_EQ_INT(sbx__sif_header_bytes(b, TOTAL, TOTAL), 0);
    make(b, 1, TOTAL - PAYLOAD, PAYLOAD);
    put64(b + 96, TOTAL); /* the table past the end */
    TAP_EQ_INT(find(b, TOTAL, &off, &size, msg), SBX_EINVAL);
    make(b, 1, TOTAL - PAYLOAD, PAYLOAD);
    TAP_EQ_INT(find(b, 300, &off, &size, msg), SBX_EINVAL); /* a truncated file */
    make(b, 1, TOTAL - PAYLOAD, PAYLOAD);
    b[32] = 'X';
    TAP_EQ_INT(find(b, TOTAL, &off, &size, msg), SBX_EINVAL);
}

TAP_MAIN(TAP(test_finds_the_partition), TAP(test_hostile_headers))
