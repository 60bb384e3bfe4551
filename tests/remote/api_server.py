#!/usr/bin/python3
"""A local HTTP API server for the remote kit's tests, with faults on request.

It stands in for the services no machine here can reach (E2B, Daytona,
OpenSandbox, AWS): the remote kit's client (include/sbx/http.h) and the API
providers built on it are tested against it. Every fault is asked for by the
request itself, so tests running at once never see each other's:

  ANY  /echo                   200, JSON: method, path, query, headers, body size
                               and sha256 (and the body itself when short text)
  ANY  /status/CODE            that status, JSON {"message": ...}; ?retry_after=S
                               adds Retry-After, ?text=T sends T as plain text
  ANY  /flaky/KEY?fail=N&code=C[&retry_after=S]
                               the first N requests for KEY get C (default 503),
                               then 200 {"attempts": n}
  GET  /count/KEY              {"count": n, "gaps": [s, ...]}: requests KEY got
                               and the seconds between them
  GET  /slow?delay=S           waits S seconds, then 200
  GET  /stall                  headers and 7 bytes, then nothing, until the client goes
  GET  /drop?after=N           announces 1 MiB, sends N bytes, closes the connection
  GET  /reset                  closes the connection without an answer
  GET  /big?bytes=N            N bytes of 'x', streamed in 64 KiB chunks
  GET  /sse?n=N&interval_ms=M  N server-sent events "data: i"
  GET  /ndjson?n=N             N JSON lines {"i": i}
  GET  /headers?size=N         one header of N bytes
  GET  /peer                   {"peer": "..."}: which connection carried it (reuse)

  api_server.py --port-file F [--unix PATH] [--tls-cert C --tls-key K]

It listens on 127.0.0.1 (an ephemeral port, written to F once it listens)
and, with --unix, on a unix socket too. Debian's python3-aiohttp.
"""
import argparse
import asyncio
import hashlib
import json
import os
import ssl
import sys
import time

from aiohttp import web

COUNTS = {}


def note(key):
    COUNTS.setdefault(key, []).append(time.monotonic())
    return len(COUNTS[key])


async def echo(req):
    body = await req.read()
    out = {
        "method": req.method,
        "path": req.path,
        "query": dict(req.query),
        "headers": {k: v for k, v in req.headers.items()},
        "body_len": len(body),
        "body_sha256": hashlib.sha256(body).hexdigest(),
    }
    if len(body) <= 4096:
        try:
            out["body"] = body.decode()
        except UnicodeDecodeError:
            pass
    return web.json_response(out)


def status_response(code, req):
    headers = {}
    if "retry_after" in req.query:
        headers["Retry-After"] = req.query["retry_after"]
    if "text" in req.query:
        return web.Response(status=code, text=req.query["text"], headers=headers)
    return web.json_response({"message": "status %d as asked" % code}, status=code,
                             headers=headers)


async def status(req):
    await req.read()
    return status_response(int(req.match_info["code"]), req)


async def flaky(req):
    await req.read()
    n = note(req.match_info["key"])
    if n <= int(req.query.get("fail", "1")):
        return status_response(int(req.query.get("code", "503")), req)
    return web.json_response({"attempts": n})


async def count(req):
    t = COUNTS.get(req.match_info["key"], [])
    return web.json_response({"count": len(t), "gaps": [b - a for a, b in zip(t, t[1:])]})


async def slow(req):
    delay = float(req.query.get("delay", "1"))
    await asyncio.sleep(delay)
    return web.json_response({"slept": delay})


async def stall(req):
    resp = web.StreamResponse()
    await resp.prepare(req)
    await resp.write(b"partial")
    await asyncio.sleep(3600)
    return resp


async def drop(req):
    after = int(req.query.get("after", "0"))
    resp = web.StreamResponse(headers={"Content-Length": str(1 << 20)})
    await resp.prepare(req)
    if after:
        await resp.write(b"y" * after)
    await asyncio.sleep(0.05)
    req.transport.close()
    return resp


async def reset(req):
    req.transport.close()
    await asyncio.sleep(0.05)
    return web.Response(status=500)


async def big(req):
    n = int(req.query.get("bytes", "0"))
    resp = web.StreamResponse(headers={"Content-Length": str(n)})
    await resp.prepare(req)
    chunk = b"x" * 65536
    try:
        while n > 0:
            k = min(n, len(chunk))
            await resp.write(chunk[:k])
            n -= k
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client stopped reading (a test that ends the stream)
    return resp


async def sse(req):
    n = int(req.query.get("n", "3"))
    gap = float(req.query.get("interval_ms", "0")) / 1000
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(req)
    for i in range(n):
        await resp.write(b"data: %d\n\n" % i)
        if gap:
            await asyncio.sleep(gap)
    await resp.write_eof()
    return resp


async def ndjson(req):
    n = int(req.query.get("n", "3"))
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(req)
    for i in range(n):
        await resp.write(json.dumps({"i": i}).encode() + b"\n")
    await resp.write_eof()
    return resp


async def headers(req):
    return web.json_response({}, headers={"X-Big": "h" * int(req.query.get("size", "10"))})


async def peer(req):
    return web.json_response({"peer": str(req.transport.get_extra_info("peername"))})


async def main():
    parent = os.getppid()
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--unix")
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    a = ap.parse_args()
    app = web.Application(client_max_size=256 << 20)
    app.add_routes([
        web.route("*", "/echo", echo),
        web.route("*", "/status/{code}", status),
        web.route("*", "/flaky/{key}", flaky),
        web.get("/count/{key}", count),
        web.get("/slow", slow),
        web.get("/stall", stall),
        web.get("/drop", drop),
        web.get("/reset", reset),
        web.get("/big", big),
        web.get("/sse", sse),
        web.get("/ndjson", ndjson),
        web.get("/headers", headers),
        web.get("/peer", peer),
    ])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ctx = None
    if a.tls_cert:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(a.tls_cert, a.tls_key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    if a.unix:
        await web.UnixSite(runner, a.unix).start()
    port = site._server.sockets[0].getsockname()[1]
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % port)
    os.rename(tmp, a.port_file)
    # Ends with its parent (a test killed by its alarm leaves no server).
    while os.getppid() == parent:
        await asyncio.sleep(0.5)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
