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

WebSocket routes (aiohttp's own server side, and raw frames it would never
send), for the remote kit's WebSocket client (include/sbx/ws.h):

  GET  /ws/echo[?info=1][&protocols=a,b][&key=K]
                               echoes text and binary; with info, first a JSON text
                               message: path, query, headers, protocol; with key, the
                               client's close code and reason are kept for /ws/seen/K
  GET  /ws/send?n=N[&size=S][&code=C][&reason=R]
                               N messages "0".."N-1" in order (binary of S bytes
                               when size is given), then a close with C (1000) and R
  GET  /ws/ping?n=N            N pings "p0".., then the text "pongs p0,..." once every
                               pong came back; answers the client's pings; then echoes
  GET  /ws/sink?delay=S        reads nothing for S seconds (the client's sends back
                               up), then counts; the text "end" is answered with
                               "got BYTES MESSAGES"
  GET  /ws/raw?kind=K[&key=K2][&wait=S]
                               the handshake and frames written by hand: fragmented
                               (a text message in two fragments around a ping, a binary
                               one in three, then a close 1000), masked, bad_utf8, rsv,
                               too_big (a 2 MiB binary frame announced), drop (one
                               message, then the connection closed without a close
                               frame), trickle (the 101 a byte at a time, then a
                               message), no_close (never answers the client's close),
                               bad_accept, silent (never answers the upgrade). What the
                               client sent back (its close code, its frames' opcodes,
                               its pongs) is kept for /ws/seen/K2 (K2 defaults to K)
  GET  /ws/seen/KEY            {"close": code|null, "reason": "...", "ops": [...],
                               "pongs": [...]}

and the restbox API (examples/provider/restbox.c, the remote kit's example
provider): a "box" is a work directory of this server's host whose commands
run as its processes (NO isolation: a test double, as hostbox is):

  POST   /v1/boxes             {"env": {}, "metadata": {}, "ttl": s|null,
                               "entrypoint": null} -> 201 {"id", "status"}
  GET    /v1/boxes[?label=k=v] {"boxes": [{"id", "status", "created",
                               "expires_at", "metadata"}]}
  GET    /v1/boxes/ID          one box, or 404
  DELETE /v1/boxes/ID          204 (its processes killed, its directory
                               removed), or 404
  POST   /v1/boxes/ID/exec     {"command", "cwd", "env", "timeout",
                               "stdin" (base64)} -> {"exit_code", "stdout",
                               "stderr" (base64), "timed_out"}
  PUT    /v1/boxes/ID/files?path=P   the body, with X-Mode (octal) -> 204
  GET    /v1/boxes/ID/files?path=P   the file, with X-Mode, or 404
  GET    /v1/boxes/ID/pty      WebSocket: a new terminal session (restbox_pty.c).
                               The client's first message is the text
                               {"type": "open", "command"|"argv", "cwd", "env":
                               ["K=V"], "rows", "cols", "pipes"}; the server runs it
                               on a real PTY (pipes: stdout and stderr apart) and
                               answers {"type": "connected", "session": N}
  GET    /v1/boxes/ID/pty/N[?takeover=1][&since=K]
                               WebSocket: attaches to session N: a replay of the
                               stdout it keeps from byte K (binary 0x03 + u64 BE
                               offset + bytes), then {"type": "connected"}. A session
                               held by another client is refused with close code
                               1008 unless takeover, which closes the other with 4001

  Session frames (modelled on OpenSandbox's execd PTY): binary, first byte the
  channel: 0x00 stdin (client; empty: EOF), 0x01 stdout, 0x02 stderr, 0x03
  replay; text JSON: {"type": "resize", "cols", "rows"}, {"type": "signal",
  "signal": "SIGINT"}, {"type": "end"} (kills the session) from the client;
  {"type": "exit", "exit_code": N} (then a close 1000) and {"type": "error",
  "error"} from the server. A client that closes without "end" detaches: the
  session runs on and keeps the last 1 MiB of each stream.

  api_server.py --port-file F [--unix PATH] [--tls-cert C --tls-key K]

It listens on 127.0.0.1 (an ephemeral port, written to F once it listens)
and, with --unix, on a unix socket too. Debian's python3-aiohttp.
"""
import argparse
import asyncio
import base64
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import ssl
import struct
import sys
import tempfile
import termios
import time

from aiohttp import WSMsgType, web

import serve  # tests/remote/serve.py, beside this file

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


# --- WebSocket routes -------------------------------------------------------

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
WS_SEEN = {}


def ws_protocols(req):
    p = req.query.get("protocols")
    return tuple(p.split(",")) if p else ()


async def ws_echo(req):
    ws = web.WebSocketResponse(protocols=ws_protocols(req), max_msg_size=64 << 20)
    await ws.prepare(req)
    if "info" in req.query:
        await ws.send_json({"path": req.path, "query": dict(req.query),
                            "headers": dict(req.headers), "protocol": ws.ws_protocol})
    while True:
        msg = await ws.receive()
        if msg.type == WSMsgType.TEXT:
            await ws.send_str(msg.data)
        elif msg.type == WSMsgType.BINARY:
            await ws.send_bytes(msg.data)
        else:
            if msg.type == WSMsgType.CLOSE and "key" in req.query:
                WS_SEEN[req.query["key"]] = {"close": msg.data, "reason": msg.extra or "",
                                             "ops": [], "pongs": []}
            break
    return ws


async def ws_send(req):
    n = int(req.query.get("n", "3"))
    size = req.query.get("size")
    ws = web.WebSocketResponse()
    await ws.prepare(req)
    for i in range(n):
        if size is not None:
            await ws.send_bytes(bytes([i & 0xff]) * int(size))
        else:
            await ws.send_str(str(i))
    await ws.close(code=int(req.query.get("code", "1000")),
                   message=req.query.get("reason", "").encode())
    return ws


async def ws_ping(req):
    n = int(req.query.get("n", "3"))
    ws = web.WebSocketResponse(autoping=False)
    await ws.prepare(req)
    for i in range(n):
        await ws.ping(b"p%d" % i)
    pongs = []
    while True:
        msg = await ws.receive()
        if msg.type == WSMsgType.PONG:
            pongs.append(msg.data.decode())
            if len(pongs) == n:
                await ws.send_str("pongs " + ",".join(pongs))
        elif msg.type == WSMsgType.PING:
            await ws.pong(msg.data)
        elif msg.type == WSMsgType.TEXT:
            await ws.send_str(msg.data)
        else:
            break
    return ws


async def ws_sink(req):
    ws = web.WebSocketResponse(max_msg_size=64 << 20)
    await ws.prepare(req)
    await asyncio.sleep(float(req.query.get("delay", "1")))
    total = count = 0
    while True:
        msg = await ws.receive()
        if msg.type == WSMsgType.TEXT and msg.data == "end":
            await ws.send_str("got %d %d" % (total, count))
        elif msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
            total += len(msg.data)
            count += 1
        else:
            break
    return ws


def ws_frame(op, payload=b"", fin=True, rsv=0, mask=None, length=None):
    n = len(payload) if length is None else length
    m = 0x80 if mask else 0
    head = bytes([(0x80 if fin else 0) | rsv | op])
    if n < 126:
        head += bytes([m | n])
    elif n < 65536:
        head += bytes([m | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([m | 127]) + n.to_bytes(8, "big")
    if mask:
        head += mask
        payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
    return head + payload


RAW_FRAMES = {
    "fragmented": ws_frame(0x1, b"Hel", fin=False) + ws_frame(0x9, b"between")
    + ws_frame(0x0, b"lo") + ws_frame(0x2, b"\x00\x01", fin=False) + ws_frame(0x0, b"", fin=False)
    + ws_frame(0x0, b"\x02\xff"),
    "masked": ws_frame(0x1, b"hidden", mask=b"\x01\x02\x03\x04"),
    "bad_utf8": ws_frame(0x1, b"ok") + ws_frame(0x1, b"caf\xc3\x28"),
    "rsv": ws_frame(0x1, b"squeezed", rsv=0x40),
    "too_big": ws_frame(0x2, b"", length=2 << 20),
    "drop": ws_frame(0x1, b"last words"),
    "trickle": ws_frame(0x1, b"after a slow head"),
    "no_close": b"",
}


class ClientBytes:
    """The client's bytes after the 101, taken from aiohttp's connection
    (its set_parser hook, which its own WebSocket reader uses) and read as
    masked client frames."""

    def __init__(self):
        self.buf = bytearray()
        self.got = asyncio.Event()
        self.eof = False

    def feed_data(self, data):
        self.buf += data
        self.got.set()
        return False, b""

    def feed_eof(self):
        self.eof = True
        self.got.set()

    def frames(self):
        out, b, i = [], self.buf, 0
        while i + 2 <= len(b):
            op, n, k = b[i] & 0x0f, b[i + 1] & 0x7f, i + 2
            if n == 126:
                n, k = int.from_bytes(b[k:k + 2], "big"), k + 2
            elif n == 127:
                n, k = int.from_bytes(b[k:k + 8], "big"), k + 8
            masked = b[i + 1] & 0x80
            key = b[k:k + 4] if masked else b"\0\0\0\0"
            k += 4 if masked else 0
            if k + n > len(b):
                break
            out.append((op, bytes(c ^ key[j % 4] for j, c in enumerate(b[k:k + n]))))
            i = k + n
        return out

    def seen(self):
        close, reason = None, ""
        fr = self.frames()
        for op, pl in fr:
            if op == 0x8:
                close = int.from_bytes(pl[:2], "big") if len(pl) >= 2 else 1005
                reason = pl[2:].decode(errors="replace")
        return {"close": close, "reason": reason, "ops": [op for op, _ in fr],
                "pongs": [pl.decode(errors="replace") for op, pl in fr if op == 0xA]}


async def ws_raw(req):
    kind = req.query.get("kind", "")
    if kind == "silent":
        await asyncio.sleep(3600)
    key = req.headers.get("Sec-WebSocket-Key", "")
    if kind == "bad_accept":
        key += "x"
    accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    head = ("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n" % accept).encode()
    client = ClientBytes()
    req.protocol.set_parser(client)
    if kind == "trickle":
        for i in range(len(head)):
            req.transport.write(head[i:i + 1])
            await asyncio.sleep(0.002)
        req.transport.write(RAW_FRAMES[kind])
    else:
        # The head and the first frames in one write: the client must split them itself.
        req.transport.write(head + RAW_FRAMES.get(kind, b""))
    if kind == "drop":
        await asyncio.sleep(0.1)
    else:
        # Until the client's close frame (or its end of the connection), then the answer.
        loop = asyncio.get_running_loop()
        end = loop.time() + float(req.query.get("wait", "10"))
        while not client.eof and loop.time() < end and (
                kind == "no_close" or client.seen()["close"] is None):
            client.got.clear()
            try:
                await asyncio.wait_for(client.got.wait(), max(0.01, end - loop.time()))
            except asyncio.TimeoutError:
                pass
            if client.seen()["close"] is not None:
                WS_SEEN[req.query.get("key", kind)] = client.seen()
        if kind == "fragmented" and not client.eof:
            req.transport.write(ws_frame(0x8, b"\x03\xe8done"))
            await asyncio.sleep(0.05)
    WS_SEEN[req.query.get("key", kind)] = client.seen()
    if req.transport:  # None once the client has closed it
        req.transport.close()
    return web.Response()  # never sent: the connection is closed


async def ws_seen(req):
    return web.json_response(WS_SEEN.get(req.match_info["key"], {}))


# --- the restbox API --------------------------------------------------------

BOXES = {}
BOX_ROOT = tempfile.mkdtemp(prefix="sbx-restbox-")


def box_json(b):
    return {"id": b["id"], "status": "running", "created": b["created"],
            "expires_at": b["expires_at"], "metadata": b["metadata"]}


def bad(msg, status=400):
    return web.json_response({"message": msg}, status=status)


async def rb_create(req):
    try:
        spec = await req.json()
    except ValueError:
        return bad("the body is not JSON")
    if not isinstance(spec, dict):
        return bad("the body must be a JSON object")
    if spec.get("entrypoint"):
        return bad("restbox runs no entrypoint: leave it unset")
    env = spec.get("env") or {}
    md = spec.get("metadata") or {}
    if not isinstance(env, dict) or not isinstance(md, dict):
        return bad("env and metadata must be objects")
    bid = "rb-" + secrets.token_hex(6)
    work = os.path.join(BOX_ROOT, bid)
    # The box's own temporary directory (TMPDIR in its commands), inside it,
    # as a real sandbox has its own /tmp: what sbx stages there the file
    # routes reach too.
    os.makedirs(os.path.join(work, ".tmp"))
    now = time.time()
    ttl = spec.get("ttl")
    BOXES[bid] = {"id": bid, "work": work, "env": {str(k): str(v) for k, v in env.items()},
                  "metadata": {str(k): str(v) for k, v in md.items()}, "created": now,
                  "expires_at": now + ttl if isinstance(ttl, (int, float)) else None,
                  "procs": set(), "ptys": {}}
    return web.json_response({"id": bid, "status": "running", "workdir": work}, status=201)


def box_kill(b):
    """Every command a box runs, with its process group."""
    for p in list(b["procs"]):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def box_of(req):
    return BOXES.get(req.match_info["id"])


async def rb_list(req):
    want = req.query.getall("label", [])
    out = []
    for b in BOXES.values():
        ok = True
        for kv in want:
            k, _, v = kv.partition("=")
            ok = ok and b["metadata"].get(k) == v
        if ok:
            out.append(box_json(b))
    return web.json_response({"boxes": out})


async def rb_get(req):
    b = box_of(req)
    return web.json_response(box_json(b)) if b else bad("no such box", 404)


async def rb_delete(req):
    b = BOXES.pop(req.match_info["id"], None)
    if not b:
        return bad("no such box", 404)
    box_kill(b)
    shutil.rmtree(b["work"], ignore_errors=True)
    return web.Response(status=204)


def in_box(b, path):
    """A box path on this host: relative ones under the box's work directory;
    absolute ones only inside it (as `pwd` in the box prints them)."""
    full = os.path.normpath(os.path.join(b["work"], path))
    if full != b["work"] and not full.startswith(b["work"] + os.sep):
        return None
    return full


async def rb_exec(req):
    b = box_of(req)
    if not b:
        return bad("no such box", 404)
    try:
        x = await req.json()
    except ValueError:
        return bad("the body is not JSON")
    cwd = in_box(b, x.get("cwd") or ".")
    if cwd is None or not os.path.isdir(cwd):
        return bad("no such directory in the box: %s" % x.get("cwd"))
    env = dict(os.environ)
    env["TMPDIR"] = os.path.join(b["work"], ".tmp")
    env.update(b["env"])
    env.update({str(k): str(v) for k, v in (x.get("env") or {}).items()})
    stdin = base64.b64decode(x.get("stdin") or "")
    p = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", x["command"], cwd=cwd, env=env, start_new_session=True,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    b["procs"].add(p)
    out, err = bytearray(), bytearray()

    async def pump(src, dst):
        while True:
            chunk = await src.read(65536)
            if not chunk:
                return
            dst.extend(chunk)

    async def feed():
        try:
            if stdin:
                p.stdin.write(stdin)
                await p.stdin.drain()
            p.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass

    timeout = x.get("timeout")
    timed_out = False
    work = asyncio.gather(feed(), pump(p.stdout, out), pump(p.stderr, err), p.wait())
    try:
        await asyncio.wait_for(asyncio.shield(work), timeout if timeout and timeout > 0 else None)
    except asyncio.TimeoutError:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await work
    b["procs"].discard(p)
    return web.json_response({
        "exit_code": p.returncode if p.returncode >= 0 else 128 - p.returncode,
        "stdout": base64.b64encode(bytes(out)).decode(),
        "stderr": base64.b64encode(bytes(err)).decode(),
        "timed_out": timed_out})


async def rb_put_file(req):
    b = box_of(req)
    if not b:
        return bad("no such box", 404)
    path = in_box(b, req.query.get("path", ""))
    if path is None:
        return bad("the path leaves the box")
    try:
        mode = int(req.headers.get("X-Mode", "644"), 8)
    except ValueError:
        return bad("X-Mode is not octal")
    data = await req.read()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode & 0o7777)
    return web.Response(status=204)


async def rb_get_file(req):
    b = box_of(req)
    if not b:
        return bad("no such box", 404)
    path = in_box(b, req.query.get("path", ""))
    if path is None:
        return bad("the path leaves the box")
    if not os.path.isfile(path):
        return bad("no such file in the box: %s" % req.query.get("path"), 404)
    with open(path, "rb") as f:
        data = f.read()
    return web.Response(body=data, headers={"X-Mode": "%o" % (os.stat(path).st_mode & 0o7777)})


# --- restbox terminals (examples/provider/restbox_pty.c) -------------------------

PTY_KEEP = 1 << 20  # bytes of each stream a session keeps for replays
PTY_SIGNALS = {"SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM",
               "SIGALRM", "SIGSTOP", "SIGCONT", "SIGWINCH", "SIGTSTP", "SIGPIPE"}


class PtySession:
    def __init__(self, sid, proc, master, pipes):
        self.sid, self.proc, self.master, self.pipes = sid, proc, master, pipes
        self.out = [bytearray(), bytearray()]
        self.base = [0, 0]  # the offset of out[k][0]
        self.ws = None
        self.q = None  # what goes to the attached client, in order
        self.exit_code = None

    def emit(self, k, data):
        buf = self.out[k]
        buf.extend(data)
        if len(buf) > PTY_KEEP:
            drop = len(buf) - PTY_KEEP
            del buf[:drop]
            self.base[k] += drop
        if self.q is not None:
            self.q.put_nowait(("bytes", bytes([k + 1]) + data))

    def stdin(self, data):
        try:
            if self.pipes:
                if not data:
                    self.proc.stdin.close()
                else:
                    self.proc.stdin.write(data)
            else:
                os.write(self.master, data or b"\x04")
        except (OSError, BrokenPipeError, ConnectionResetError, RuntimeError):
            pass

    def signal(self, name):
        if name not in PTY_SIGNALS or self.exit_code is not None:
            return
        try:
            group = self.proc.pid if self.pipes else os.tcgetpgrp(self.master)
            os.killpg(group, signal.Signals[name])
        except OSError:
            pass

    def resize(self, rows, cols):
        if not self.pipes and self.exit_code is None:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def end(self):
        for g in {self.proc.pid} | ({os.tcgetpgrp(self.master)} if not self.pipes else set()):
            try:
                os.killpg(g, signal.SIGKILL)
            except OSError:
                pass


def pty_command(b, x):
    """The argv, cwd and env of an "open" message, or an error string."""
    argv = x.get("argv")
    if argv is not None:
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            return "argv must be a non-empty list of strings"
    elif isinstance(x.get("command"), str):
        argv = ["/bin/sh", "-c", x["command"]]
    else:
        argv = [shutil.which("bash") or "/bin/sh"]
    cwd = in_box(b, x.get("cwd") or ".")
    if cwd is None or not os.path.isdir(cwd):
        return "no such directory in the box: %s" % x.get("cwd")
    env = dict(os.environ)
    env.update(b["env"])
    env["TERM"] = "xterm"
    for kv in x.get("env") or []:
        k, _, v = str(kv).partition("=")
        env[k] = v
    return argv, cwd, env


def pty_child(tty):
    """In the child, before exec: a shell started in the background inherits
    SIGINT and SIGQUIT ignored, and could not even trap them; a terminal
    session's command gets them as a terminal's would. With a terminal, it
    becomes the controlling one (the job's signals and SIGWINCH reach it)."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    if tty:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def pty_start(b, x):
    got = pty_command(b, x)
    if isinstance(got, str):
        return got
    argv, cwd, env = got
    pipes = bool(x.get("pipes"))
    rows, cols = int(x.get("rows") or 24), int(x.get("cols") or 80)
    loop = asyncio.get_running_loop()
    try:
        if pipes:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, start_new_session=True, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                preexec_fn=lambda: pty_child(False))
            master = None
        else:
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, start_new_session=True, stdin=slave, stdout=slave,
                stderr=slave, preexec_fn=lambda: pty_child(True))
            os.close(slave)
    except OSError as e:
        return "cannot run %s: %s" % (argv[0], e.strerror)
    b["procs"].add(proc)
    sid = max(b["ptys"], default=0) + 1
    s = PtySession(sid, proc, master, pipes)
    b["ptys"][sid] = s

    async def pump(k, src):
        while True:
            chunk = await src.read(65536)
            if not chunk:
                return
            s.emit(k, chunk)

    async def run():
        if pipes:
            await asyncio.gather(pump(0, proc.stdout), pump(1, proc.stderr), proc.wait())
        else:
            done = loop.create_future()

            def readable():
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    chunk = b""
                if chunk:
                    s.emit(0, chunk)
                elif not done.done():
                    loop.remove_reader(master)
                    done.set_result(None)
            loop.add_reader(master, readable)
            await proc.wait()
            try:  # what the terminal still holds; background jobs may keep it open
                await asyncio.wait_for(asyncio.shield(done), 1)
            except asyncio.TimeoutError:
                loop.remove_reader(master)
            os.close(master)
        b["procs"].discard(proc)
        rc = proc.returncode
        s.exit_code = rc if rc >= 0 else 128 - rc
        if s.q is not None:
            s.q.put_nowait(("exit", s.exit_code))
    s.task = asyncio.ensure_future(run())
    return s


async def pty_sender(s, ws, q):
    while True:
        kind, v = await q.get()
        try:
            if kind == "stop":
                return
            if kind == "bytes":
                await ws.send_bytes(v)
            elif kind == "text":
                await ws.send_json(v)
            else:
                await ws.send_json({"type": "exit", "exit_code": v})
                await ws.close(code=1000)
                return
        except (ConnectionResetError, RuntimeError):
            return


async def rb_pty(req):
    b = box_of(req)
    if not b:
        return bad("no such box", 404)
    sid = req.match_info.get("sid")
    s = None
    if sid is not None:
        s = b["ptys"].get(int(sid)) if sid.isdigit() else None
        if s is None:
            return bad("no such PTY session: %s" % sid, 404)
    ws = web.WebSocketResponse(max_msg_size=1 << 20)
    await ws.prepare(req)
    since = 0
    if s is None:
        msg = await ws.receive(timeout=30)
        try:
            x = json.loads(msg.data) if msg.type == WSMsgType.TEXT else None
        except ValueError:
            x = None
        if not isinstance(x, dict) or x.get("type") != "open":
            await ws.send_json({"type": "error", "error": "the first message must be an open"})
            await ws.close(code=1008, message=b"no open")
            return ws
        s = await pty_start(b, x)
        if isinstance(s, str):
            await ws.send_json({"type": "error", "error": s})
            await ws.close(code=1000)
            return ws
    else:
        if s.ws is not None and req.query.get("takeover") != "1":
            await ws.close(code=1008, message=b"already attached")
            return ws
        if s.ws is not None:
            await s.ws.close(code=4001, message=b"taken over")
        since = int(req.query.get("since", "0") or 0)
    # From here on, everything for this client goes through its queue, in order.
    q = asyncio.Queue()
    start = max(since, s.base[0])
    if sid is not None and s.base[0] + len(s.out[0]) > start:
        data = bytes(s.out[0][start - s.base[0]:])
        q.put_nowait(("bytes", b"\x03" + struct.pack(">Q", start) + data))
    q.put_nowait(("text", {"type": "connected", "session": s.sid,
                           "mode": "pipe" if s.pipes else "pty"}))
    if s.exit_code is not None:
        q.put_nowait(("exit", s.exit_code))
    s.ws, s.q = ws, q
    sender = asyncio.ensure_future(pty_sender(s, ws, q))
    async for msg in ws:
        if msg.type == WSMsgType.BINARY and msg.data[:1] == b"\x00":
            s.stdin(msg.data[1:])
        elif msg.type == WSMsgType.TEXT:
            try:
                x = json.loads(msg.data)
            except ValueError:
                break
            t = x.get("type") if isinstance(x, dict) else None
            if t == "resize":
                s.resize(int(x.get("rows", 24)), int(x.get("cols", 80)))
            elif t == "signal":
                s.signal(str(x.get("signal")))
            elif t == "end":
                s.end()
    if s.ws is ws:  # closed without being taken over: a detach
        s.ws, s.q = None, None
    q.put_nowait(("stop", None))
    try:
        await asyncio.wait_for(sender, 2)
    except asyncio.TimeoutError:
        sender.cancel()
    return ws


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
        web.get("/ws/echo", ws_echo),
        web.get("/ws/send", ws_send),
        web.get("/ws/ping", ws_ping),
        web.get("/ws/sink", ws_sink),
        web.get("/ws/raw", ws_raw),
        web.get("/ws/seen/{key}", ws_seen),
        web.post("/v1/boxes", rb_create),
        web.get("/v1/boxes", rb_list),
        web.get("/v1/boxes/{id}", rb_get),
        web.delete("/v1/boxes/{id}", rb_delete),
        web.post("/v1/boxes/{id}/exec", rb_exec),
        web.put("/v1/boxes/{id}/files", rb_put_file),
        web.get("/v1/boxes/{id}/files", rb_get_file),
        web.get("/v1/boxes/{id}/pty", rb_pty),
        web.get("/v1/boxes/{id}/pty/{sid}", rb_pty),
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
    serve.write_port_file(a.port_file, port)
    # Ends with its parent (a test killed by its alarm leaves no server) or a
    # SIGTERM, and takes its boxes with it.
    def cleanup():
        for b in BOXES.values():
            box_kill(b)
        shutil.rmtree(BOX_ROOT, ignore_errors=True)

    await serve.until_parent_ends(parent, cleanup)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
