#!/usr/bin/env python3
"""A token server for distribution's `auth: token` (the bearer flow).

  token_server.py PORT KEY CERT USER PASS

Serves GET /token?service=S&scope=repository:NAME:pull: with Basic USER:PASS
it answers {"token": JWT} granting the scope's actions; anything else is 401.
The JWT is RS256, signed with KEY, its header's x5c holding CERT, which the
registry trusts through `rootcertbundle`. Each request is appended to
PORT.log next to this process's cwd, for the test to count.
"""
import base64, json, sys, time, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse, parse_qs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

port, keyf, certf, user, pw = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
key = serialization.load_pem_private_key(open(keyf, "rb").read(), None)
cert = x509.load_pem_x509_certificate(open(certf, "rb").read())
der = cert.public_bytes(serialization.Encoding.DER)


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def jwt(claims):
    h = {"alg": "RS256", "typ": "JWT", "x5c": [base64.b64encode(der).decode()]}
    si = b64(json.dumps(h).encode()) + "." + b64(json.dumps(claims).encode())
    sig = key.sign(si.encode(), padding.PKCS1v15(), hashes.SHA256())
    return si + "." + b64(sig)


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        u = urlparse(self.path)
        q = parse_qs(u.query)
        with open("token-%d.log" % port, "a") as f:
            f.write(self.path + "\n")
        want = "Basic " + base64.b64encode(("%s:%s" % (user, pw)).encode()).decode()
        if u.path != "/token" or self.headers.get("Authorization") != want:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        access = []
        for sc in q.get("scope", []):
            parts = sc.split(":")
            if len(parts) == 3:
                access.append({"type": parts[0], "name": parts[1], "actions": parts[2].split(",")})
        now = int(time.time())
        tok = jwt({"iss": "sbx-test-issuer", "sub": user, "aud": q.get("service", [""])[0],
                   "exp": now + 600, "nbf": now - 10, "iat": now, "jti": os.urandom(8).hex(),
                   "access": access})
        body = json.dumps({"token": tok, "expires_in": 600}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
