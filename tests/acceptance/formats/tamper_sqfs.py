# Rewrites a squashfs made by `mksquashfs DIR OUT -noI -noD -noF` (metadata
# stored, not compressed) into a hostile one, for
# tests/acceptance/test_image_formats.sh: python3 tamper_sqfs.py MODE IN OUT.
#   fragments  the superblock declares 2^32-16 fragments (libsquashfs would
#              allocate their 64 GiB table before reading it)
#   dirtwice   the root lists its directory "d1" under the name "d2" too (a
#              directory with two names: chained, a tree of 2^depth nodes)
import struct, sys
mode, src, dst = sys.argv[1:4]
d = bytearray(open(src, "rb").read())
if mode == "fragments":
    struct.pack_into("<I", d, 16, 0xFFFFFFF0)
elif mode == "dirtwice":
    # A directory entry: offset (u16), inode offset (s16), type (u16), name size - 1 (u16), name.
    def entry(name):
        i = d.find(struct.pack("<HH", 1, len(name) - 1) + name)
        assert i >= 4, name
        return i - 4
    a, b = entry(b"d1"), entry(b"d2")
    d[b:b + 4] = d[a:a + 4]
else:
    sys.exit("unknown mode " + mode)
open(dst, "wb").write(bytes(d))
