# Writes a SIF (sylabs/sif v2 layout, little-endian, packed) around a squashfs.
import struct, sys, uuid
sqfs, out = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "ok"
data = open(sqfs, "rb").read()
HDR, DESC, NDESC = 128, 585, 48
doff = 4096
dstart = doff + NDESC * DESC
dstart = (dstart + 4095) // 4096 * 4096
off, size = dstart, len(data)
if mode == "outside": off, size = dstart, len(data) + (1 << 30)
hdr = b"#!/usr/bin/env run-singularity\n".ljust(32, b"\0") + b"SIF_MAGIC\0" + b"01\0" + b"\0\0\0"
hdr += uuid.uuid4().bytes + struct.pack("<8q", 0, 0, NDESC - 1, NDESC, doff, NDESC * DESC, dstart, len(data))
assert len(hdr) == HDR
extra = struct.pack("<ii", 1, 2) + b"2\0\0"  # squashfs, primary system partition, arch amd64
d = struct.pack("<i?III7q", 0x4004, True, 1, 0xf0000001, 0, off, size, size, 0, 0, 0, 0)
d += b"rootfs".ljust(128, b"\0") + extra.ljust(384, b"\0")
assert len(d) == DESC
f = open(out, "wb")
f.write(hdr.ljust(doff, b"\0"))
f.write(d + b"\0" * DESC * (NDESC - 1))
f.write(b"\0" * (dstart - f.tell()))
f.write(data)
