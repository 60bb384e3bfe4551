# [netw] Run as root in box A of a named network by test_networks
# (test_no_spoofing_on_a_network): from eth0, with a packet socket, claims
# box B's address. argv: B's IP, B's MAC, C's IP, C's MAC, C's UDP port.
# Sends a gratuitous ARP request and an ARP reply to C saying B's IP is at
# A's MAC, a UDP datagram "spoof-ip" to C from B's IP (A's MAC), and one
# "spoof-mac" from B's IP and B's MAC. Prints "sent" once all went out of
# the box. Before sbx filtered the ports, C's ARP table took A's MAC for B
# and C received both datagrams.
import socket
import struct
import sys

b_ip, b_mac, c_ip, c_mac, port = sys.argv[1:6]
b_ip, c_ip = socket.inet_aton(b_ip), socket.inet_aton(c_ip)
b_mac, c_mac = bytes.fromhex(b_mac.replace(":", "")), bytes.fromhex(c_mac.replace(":", ""))
port = int(port)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
a_mac = s.getsockname()[4]
bcast = b"\xff" * 6


def csum(b):
    if len(b) % 2:
        b += b"\0"
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xFFFF) + (t >> 16)
    return ~t & 0xFFFF


def arp(op, sha, spa, tha, tpa):
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, sha, spa, tha, tpa)


def udp(src, dst, payload):
    u = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
    ph = src + dst + struct.pack("!BBH", 0, 17, len(u))
    u = u[:6] + struct.pack("!H", csum(ph + u) or 0xFFFF) + u[8:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(u), 7, 0, 64, 17, 0, src, dst)
    return ip[:10] + struct.pack("!H", csum(ip)) + ip[12:] + u


frames = [
    # Gratuitous ARP: "B's address is at A's MAC", to everyone.
    bcast + a_mac + b"\x08\x06" + arp(1, a_mac, b_ip, b"\0" * 6, b_ip),
    # The same as a reply to C.
    c_mac + a_mac + b"\x08\x06" + arp(2, a_mac, b_ip, c_mac, c_ip),
    # IPv4 from B's address, A's MAC.
    c_mac + a_mac + b"\x08\x00" + udp(b_ip, c_ip, b"spoof-ip"),
    # IPv4 from B's address and B's MAC.
    c_mac + b_mac + b"\x08\x00" + udp(b_ip, c_ip, b"spoof-mac"),
]
for f in frames:
    for _ in range(3):
        s.send(f)
print("sent")
