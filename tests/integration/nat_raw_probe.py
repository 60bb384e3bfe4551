# [nat] Run inside a nat box by test_nat (test_nat_raw_frames_stay_in_the_box):
# tries every way root in a box has of sending a frame its IP stack did not
# build, aimed at a server on the host's 127.0.0.1:PORT (argv[1]). Prints one
# line per way: "<way>-refused <errno>" or "<way>-sent". Before sbx refused
# them, pasta turned the forged SYN into a connection to the host's loopback.
import socket
import struct
import sys
import time

port = int(sys.argv[1])


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def syn(src, dst):
    tcp = struct.pack("!HHIIBBHHH", 40000, port, 1, 0, 5 << 4, 0x02, 65535, 0, 0)
    ph = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(ph + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, src, dst)
    return ip[:10] + struct.pack("!H", csum(ip)) + ip[12:] + tcp


src, lo = socket.inet_aton("10.0.2.100"), socket.inet_aton("127.0.0.1")
for way, kind in (("packet", socket.SOCK_RAW), ("packet-dgram", socket.SOCK_DGRAM)):
    try:
        s = socket.socket(socket.AF_PACKET, kind, socket.htons(0x0800))
    except OSError as e:
        print(way + "-refused", e.errno)
        continue
    s.bind(("eth0", 0x0800))
    frame = syn(src, lo)
    if kind == socket.SOCK_RAW:
        frame = b"\xff" * 6 + s.getsockname()[4] + b"\x08\x00" + frame
        for _ in range(3):
            s.send(frame)
    else:
        for _ in range(3):
            s.sendto(frame, ("eth0", 0x0800, 0, 0, b"\xff" * 6))
    print(way + "-sent")
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"eth0")
    s.sendto(syn(src, lo), ("127.0.0.1", 0))
    print("raw-sent")
except OSError as e:
    print("raw-refused", e.errno)
# pasta connects after the frame is read: give it the time before the box may end.
time.sleep(1)
