#!/usr/bin/env python3
"""A registry that lies, for the tests of a hostile registry.

  hostile_registry.py PORT LOGDIR [--tls CERT KEY] [--realm URL]

Serves the OCI distribution API on 127.0.0.1:PORT for one small image (a
config and one uncompressed layer of 1 MiB, both real) under several
repositories, each of which misbehaves in its own way:

  ok/img:1        honest (Range honoured)
  huge/img:1      its manifest declares a layer of 1 TiB; the blob streams
  big/img:1       a layer declaring 900 GiB (below SBX's 1 TiB ceiling)
  many/img:1      four layers of 3 MiB each (declared; their bytes are never
                  needed: the test bounds the image to 10 MiB)
  more/img:1      the blob's Content-Length is twice the declared size
  nolen/img:1     the blob has no Content-Length and is twice the size
  forever/img:1   the blob has no Content-Length and never ends
  errpage/img:1   the blob is an HTTP 500 whose body never ends
  stall/img:1     the blob sends its first 256 KiB, then nothing (until killed)

"Never ends" is capped at 64 MiB per response so that a client without
bounds fills no disk in a failing test. Every response to a blob request is
logged to LOGDIR/blobs.log as "REPO DIGEST RANGE SENT" once it ends.

With --realm URL, /v2/ and every manifest need "Authorization: Bearer
tok"; without it they answer 401 with WWW-Authenticate: Bearer realm=URL.
Each listener started with --token-on ADDR:PORT also serves GET /token
there: it logs "PATH AUTH" to LOGDIR/token-ADDR.log (AUTH: "basic" when an
Authorization header came, else "none") and gives the token "tok" (with
--token-basic-only, only to a request with an Authorization header; 401
to the others).
"""
import argparse, hashlib, io, json, os, ssl, sys, tarfile, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("logdir")
ap.add_argument("--tls", nargs=2)
ap.add_argument("--realm")
ap.add_argument("--token-on", action="append", default=[])
ap.add_argument("--token-basic-only", action="store_true")
a = ap.parse_args()

CAP = 64 << 20
log_lock = threading.Lock()


def log(name, line):
    with log_lock, open(os.path.join(a.logdir, name), "a") as f:
        f.write(line + "\n")


def tar_of(name, data):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mode, ti.mtime = len(data), 0o644, 1700000000
        t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def digest(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


LAYER = tar_of("hostile", bytes(range(256)) * 4096)  # 1 MiB of data in a tar
CONFIG = json.dumps({"architecture": "amd64", "os": "linux",
                     "config": {"Env": ["PATH=/usr/bin:/bin"]},
                     "rootfs": {"type": "layers", "diff_ids": [digest(LAYER)]}}).encode()
BLOBS = {digest(LAYER): LAYER, digest(CONFIG): CONFIG}


def desc(mt, dg, size):
    return {"mediaType": mt, "digest": dg, "size": size}


def manifest(repo):
    layer = desc("application/vnd.oci.image.layer.v1.tar", digest(LAYER), len(LAYER))
    layers = [layer]
    if repo == "huge":
        layer["size"] = 1 << 40
    elif repo == "big":
        layer["size"] = 900 << 30
    elif repo == "many":
        layers = [desc("application/vnd.oci.image.layer.v1.tar", "sha256:%064x" % i, 3 << 20)
                  for i in range(1, 5)]
    m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
         "config": desc("application/vnd.oci.image.config.v1+json", digest(CONFIG), len(CONFIG)),
         "layers": layers}
    return json.dumps(m).encode()


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, code, body=b"", ctype="application/json", extra=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        if not a.realm or self.headers.get("Authorization") == "Bearer tok":
            return True
        self.answer(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                    extra=[("WWW-Authenticate",
                            'Bearer realm="%s",service="hostile"' % a.realm)])
        return False

    def stream(self, repo, dg, rng, code, length, total, body, crange=None):
        """Sends `total` bytes of `body` repeated (capped), logs what went."""
        self.send_response(code)
        self.send_header("Content-Type", "application/octet-stream")
        if crange:
            self.send_header("Content-Range", crange)
        if length is not None:
            self.send_header("Content-Length", str(length))
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        try:
            while sent < min(total, CAP):
                chunk = body[: min(len(body), min(total, CAP) - sent)]
                self.wfile.write(chunk)
                sent += len(chunk)
        except OSError:
            pass
        log("blobs.log", "%s %s %s %d" % (repo, dg, rng or "-", sent))
        self.close_connection = True

    def do_GET(self):
        if self.path.startswith("/token"):
            log("token-%s.log" % self.server.server_address[0],
                "%s %s" % (self.path, "basic" if self.headers.get("Authorization") else "none"))
            if a.token_basic_only and not self.headers.get("Authorization"):
                return self.answer(401, b"{}")
            return self.answer(200, b'{"token":"tok"}')
        parts = self.path.split("/")
        if self.path in ("/v2/", "/v2"):
            if self.authorized():
                self.answer(200, b"{}")
            return
        # /v2/REPO/img/(manifests|blobs)/REF
        if len(parts) != 6 or parts[1] != "v2":
            return self.answer(404)
        repo, kind, ref = parts[2], parts[4], parts[5]
        if kind == "manifests":
            if self.authorized():
                self.answer(200, manifest(repo), "application/vnd.oci.image.manifest.v1+json")
            return
        if not self.authorized():
            return
        rng = self.headers.get("Range")
        data = BLOBS.get(ref)
        if data is None:
            return self.answer(404)
        if ref == digest(CONFIG) or repo == "ok":
            start = int(rng[6:].split("-")[0]) if rng and rng.startswith("bytes=") else 0
            part = data[start:]
            self.stream(repo, ref, rng, 206 if start else 200, len(part), len(part), part or b"x",
                        "bytes %d-%d/%d" % (start, len(data) - 1, len(data)) if start else None)
        elif repo in ("huge", "big"):
            self.stream(repo, ref, rng, 200, None, CAP, data)
        elif repo == "more":
            self.stream(repo, ref, rng, 200, 2 * len(data), 2 * len(data), data)
        elif repo == "nolen":
            self.stream(repo, ref, rng, 200, None, 2 * len(data), data)
        elif repo == "forever":
            self.stream(repo, ref, rng, 200, None, CAP, data)
        elif repo == "errpage":
            self.stream(repo, ref, rng, 500, None, CAP, b"<html>error</html>\n" * 64)
        elif repo == "stall":
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: 256 << 10])
            self.wfile.flush()
            log("blobs.log", "%s %s %s %d" % (repo, ref, rng or "-", 256 << 10))
            while True:  # until the client goes or the test ends this server
                time.sleep(1)
                try:
                    self.wfile.write(b"")
                except OSError:
                    break
        else:
            self.answer(404)


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that hangs up mid-stream is what these tests do


def serve(addr, port, tls):
    srv = Server((addr, port), H)
    srv.daemon_threads = True
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.serve_forever()


for spec in a.token_on:
    host, _, p = spec.rpartition(":")
    threading.Thread(target=serve, args=(host, int(p), None), daemon=True).start()
serve("127.0.0.1", a.port, a.tls)
