#!/usr/bin/env python3
"""A TCP proxy that breaks connections, for resume tests.

  cut_proxy.py LISTEN_PORT UPSTREAM_PORT CONTROL_FILE

Forwards 127.0.0.1:LISTEN_PORT to 127.0.0.1:UPSTREAM_PORT. CONTROL_FILE
holds "N CUTS": while CUTS > 0, a connection that has sent N bytes to the
client is closed there (and CUTS decremented); shorter ones pass. It is read per connection,
so a test changes the behaviour between pulls.
"""
import socket, sys, threading

lp, up, ctl = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lock = threading.Lock()


def read_ctl():
    try:
        n, cuts = open(ctl).read().split()
        return int(n), int(cuts)
    except Exception:
        return 0, 0


def take_cut():
    """True (and one cut fewer) when a cut is still due."""
    with lock:
        n, cuts = read_ctl()
        if cuts <= 0:
            return False
        open(ctl, "w").write("%d %d" % (n, cuts - 1))
        return True


def pump(a, b, limit):
    sent = 0
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            if limit and sent + len(d) >= limit and take_cut():
                b.sendall(d[: limit - sent])
                break
            b.sendall(d)
            sent += len(d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(c):
    u = socket.create_connection(("127.0.0.1", up))
    limit = read_ctl()[0]
    threading.Thread(target=pump, args=(c, u, 0), daemon=True).start()
    pump(u, c, limit)
    c.close()
    u.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", lp))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
