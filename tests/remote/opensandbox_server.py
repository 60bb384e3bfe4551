#!/usr/bin/python3
"""A fake OpenSandbox server: a local TEST DOUBLE of the OpenSandbox service,
built from its public specs (alibaba/OpenSandbox @ 4db3a993:
specs/sandbox-lifecycle.yml "OpenSandbox Lifecycle API" 0.1.0 and
specs/execd-api.yaml "OpenSandbox Execd API" 1.0.0), for the opensandbox
provider's tests. It is NOT OpenSandbox: there is no Kubernetes and NO
ISOLATION. A "sandbox" is a scratch directory of this host, and its
commands really run as this server's child processes (bash -c), in that
directory.

Served, on 127.0.0.1 (port in --port-file):

  the lifecycle API under /v1 (OPEN-SANDBOX-API-KEY checked when --api-key):
    POST   /v1/sandboxes                      202 {id, status, ...}
    GET    /v1/sandboxes?page&pageSize&metadata=k%3Dv&state=S
    GET    /v1/sandboxes/{id}                 404 {"code","message":"Sandbox X not found."}
    DELETE /v1/sandboxes/{id}                 204 / 404
    GET    /v1/sandboxes/{id}/endpoints/{port}?use_server_proxy=true|false
  execd through the server proxy (the key checked too):
    /v1/sandboxes/{id}/proxy/44772/...        the execd routes below
  and, on a second port (--direct-port-file), execd "directly", as a pod's
  endpoint is reached: /direct/{id}/44772/..., checked against the
  X-EXECD-ACCESS-TOKEN the endpoint gave. A direct request that carries
  OPEN-SANDBOX-API-KEY is counted (the provider must never send it there).

  execd: GET /ping; POST /command; DELETE /command?id= (interrupt) (JSON lines "{...}\\n\\n": init, stdout and
  stderr one event a line, ping every second, error {ename:
  "CommandExecError", evalue: "<exit code>"} or execution_complete; with
  background: init, then the command runs on, its stdout and stderr merged
  in a log); GET /command/status/{id}; GET /command/{id}/logs; POST
  /files/upload (multipart: metadata {path, mode}, then file); GET
  /files/download?path=; GET /files/info?path=.
  execd's PTY (PTY.md, the reference's os/pty.py): POST /pty {"cwd"?,
  "command"?} 201 {"session_id"} (a uuid); WebSocket GET /pty/{sid}/ws
  [?pty=0][&takeover=1][&since=N] (the first connection starts the command,
  bash -c on a real PTY of this host, or pipes with pty=0); DELETE
  /pty/{sid}. Frames: binary, channel byte 0x00 stdin (client), 0x01
  stdout, 0x02 stderr, 0x03 replay (u64 BE offset + stdout bytes); text
  JSON connected{mode}, exit{exit_code}, error{code,error} from it,
  resize{cols,rows} and signal{signal} from the client. Close 4001: taken
  over; 1008: already attached (without takeover). Counted in stats:
  pty_posts, pty_creates (sessions made), pty_deletes, pty_saw_key (requests
  carrying the key).
  Faults: "pty_create": [status, ...]; "pty_ws": ["error" (an error frame
  before connected), "notjson", "huge" (a 2 MiB frame), "junk" (frames to
  drop, then the session), "drop" (the connection aborted after 1 s), ...],
  one a WebSocket.

Faults and counters, for scripted cases (one test runs at a time):
  POST /_fake/faults {"create": [status, ...], "command": [status, ...],
       "oom": true, "sse_delay_ms": N, "sse_drop_after": N, "sse_cut": true,
       "pending_s": S}   each list is consumed one request at a time
  GET  /_fake/stats   {"creates", "deletes", "commands", "direct_requests",
       "direct_saw_key", "proxy_requests", "last_create": body, "live": n}
  POST /_fake/reset   forgets faults and counters
"""

import argparse
import asyncio
import datetime
import fcntl
import json
import os
import shutil
import signal
import struct
import sys
import tempfile
import termios
import time
import urllib.parse
import uuid

from aiohttp import WSMsgType, web

import serve  # tests/remote/serve.py, beside this file

BOX_ROOT = tempfile.mkdtemp(prefix="sbx-fake-osb-")
BOXES = {}
FAULTS = {}
STATS = {}
EXECD_PORT = 44772
EGRESS_PORT = 18080
A = None  # the arguments
PORTS = {}


def reset():
    FAULTS.clear()
    STATS.clear()
    STATS.update(creates=0, deletes=0, commands=0, interrupts=0, direct_requests=0, direct_saw_key=0,
                 proxy_requests=0, last_create=None, last_command=None,
                 pty_posts=0, pty_creates=0, pty_deletes=0, pty_saw_key=0, pty_drops=0, last_pty=None)


reset()


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def err(status, code, message):
    return web.json_response({"code": code, "message": message}, status=status)


def fault(kind):
    q = FAULTS.get(kind)
    if isinstance(q, list) and q:
        return q.pop(0)
    return None


def kill_box(b):
    for s in b.get("ptys", {}).values():
        s.end()
    for c in b["commands"].values():
        p = c.get("proc")
        if p and p.returncode is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    shutil.rmtree(b["dir"], ignore_errors=True)


def reap():
    now = time.time()
    for sid in [k for k, b in BOXES.items() if b["expires"] <= now]:
        kill_box(BOXES.pop(sid))


def state_of(b):
    if b.get("oom"):
        return {"state": "Failed", "reason": "OOMKilled",
                "message": "container main was OOM killed (exit 137)"}
    if time.time() < b["ready_at"]:
        return {"state": "Pending", "reason": "ContainerCreating", "message": ""}
    return {"state": "Running", "reason": "", "message": ""}


def sandbox_json(b):
    d = {"id": b["id"], "status": state_of(b), "metadata": b["metadata"],
         "entrypoint": b["entrypoint"], "createdAt": iso(b["created"]),
         "expiresAt": iso(b["expires"])}
    if b.get("image"):
        d["image"] = b["image"]
    return d


@web.middleware
async def lifecycle_auth(req, handler):
    if req.path.startswith("/v1/") and A.api_key:
        if req.headers.get("OPEN-SANDBOX-API-KEY") != A.api_key:
            return err(401, "UNAUTHORIZED", "missing or invalid OPEN-SANDBOX-API-KEY")
    if "/proxy/" in req.path:
        STATS["proxy_requests"] += 1
    reap()
    return await handler(req)


def box_of(req):
    return BOXES.get(req.match_info["id"])


# --- the lifecycle API ---------------------------------------------------------


async def create(req):
    STATS["creates"] += 1
    try:
        body = await req.json()
    except Exception:
        return err(400, "BAD_REQUEST", "the body is not JSON")
    STATS["last_create"] = body
    f = fault("create")
    if f:
        return err(int(f), "INJECTED", "injected failure %s" % f)
    if not isinstance(body, dict):
        return err(400, "BAD_REQUEST", "the body must be an object")
    ep = body.get("entrypoint")
    if not isinstance(ep, list) or not ep or not all(isinstance(x, str) for x in ep):
        return err(400, "BAD_REQUEST", "entrypoint must be a non-empty list of strings")
    timeout = body.get("timeout")
    if timeout is not None and (not isinstance(timeout, int) or timeout < 1):
        return err(400, "BAD_REQUEST", "timeout must be an integer >= 1")
    rl = body.get("resourceLimits")
    if not isinstance(rl, dict) or not all(isinstance(v, str) for v in rl.values()):
        return err(400, "BAD_REQUEST", "resourceLimits must map names to strings")
    md = body.get("metadata") or {}
    env = body.get("env") or {}
    if not isinstance(md, dict) or not isinstance(env, dict):
        return err(400, "BAD_REQUEST", "metadata and env must be objects")
    sid = uuid.uuid4().hex[:16]
    d = os.path.join(BOX_ROOT, sid)
    os.makedirs(d)
    now = time.time()
    b = {"id": sid, "dir": d, "metadata": md, "env": {k: str(v) for k, v in env.items()},
         "entrypoint": ep, "image": body.get("image"), "created": now,
         "expires": now + (timeout if timeout else 600), "commands": {},
         "ready_at": now + float(FAULTS.get("pending_s") or 0),
         "token": uuid.uuid4().hex, "oom": False, "ptys": {}}
    BOXES[sid] = b
    return web.json_response({"id": sid, "status": {"state": "Pending"}, "metadata": md,
                              "expiresAt": iso(b["expires"]), "createdAt": iso(now),
                              "entrypoint": ep}, status=202)


async def list_boxes(req):
    q = req.query
    try:
        page = int(q.get("page", "1"))
        size = int(q.get("pageSize", "20"))
        assert page >= 1 and size >= 1
    except Exception:
        return err(400, "BAD_REQUEST", "page and pageSize must be integers >= 1")
    want = {}
    if "metadata" in q:
        for part in q["metadata"].split("&"):
            if not part:
                continue
            k, _, v = part.partition("=")
            want[urllib.parse.unquote(k)] = urllib.parse.unquote(v)
    states = [s.lower() for s in q.getall("state", [])]
    items = [sandbox_json(b) for b in sorted(BOXES.values(), key=lambda b: b["created"])
             if all(b["metadata"].get(k) == v for k, v in want.items())
             and (not states or state_of(b)["state"].lower() in states)]
    total = len(items)
    chunk = items[(page - 1) * size:page * size]
    pages = (total + size - 1) // size
    return web.json_response({"items": chunk, "pagination": {
        "page": page, "pageSize": size, "totalItems": total, "totalPages": pages,
        "hasNextPage": page < pages}})


def not_found(sid):
    return err(404, "NOT_FOUND", "Sandbox %s not found." % sid)


async def get_box(req):
    b = box_of(req)
    if not b:
        return not_found(req.match_info["id"])
    return web.json_response(sandbox_json(b))


async def delete_box(req):
    b = BOXES.pop(req.match_info["id"], None)
    if not b:
        return not_found(req.match_info["id"])
    STATS["deletes"] += 1
    kill_box(b)
    return web.Response(status=204)


async def endpoint(req):
    b = box_of(req)
    if not b:
        return not_found(req.match_info["id"])
    port = int(req.match_info["port"])
    proxy = req.query.get("use_server_proxy", "false") == "true"
    if proxy:
        return web.json_response({"endpoint": "127.0.0.1:%d/v1/sandboxes/%s/proxy/%d" % (
            PORTS["main"], b["id"], port), "headers": {}})
    return web.json_response({"endpoint": "127.0.0.1:%d/direct/%s/%d" % (
        PORTS["direct"], b["id"], port), "headers": {"X-EXECD-ACCESS-TOKEN": b["token"]}})


# --- execd -------------------------------------------------------------------------


def execd_box(req):
    b = box_of(req)
    if not b or int(req.match_info["port"]) != EXECD_PORT:
        return None, err(404, "NOT_FOUND", "no execd for this sandbox and port")
    if b.get("oom"):
        return None, web.Response(status=502, text="Bad Gateway: the sandbox's pod is gone")
    return b, None


@web.middleware
async def direct_auth(req, handler):
    STATS["direct_requests"] += 1
    if "OPEN-SANDBOX-API-KEY" in req.headers:
        STATS["direct_saw_key"] += 1
    b = box_of(req)
    if b and req.headers.get("X-EXECD-ACCESS-TOKEN") != b["token"]:
        return err(401, "UNAUTHORIZED", "missing or wrong X-EXECD-ACCESS-TOKEN")
    reap()
    return await handler(req)


def in_box(b, path):
    return path if os.path.isabs(path) else os.path.join(b["dir"], path)


async def ping(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    if time.time() < b["ready_at"]:
        return web.Response(status=503, text="execd is starting")
    return web.json_response({})


def event(kind, **kw):
    d = {"type": kind, "timestamp": int(time.time() * 1000)}
    d.update(kw)
    return (json.dumps(d) + "\n\n").encode()


async def pump(stream, kind, queue):
    """execd's tailing: one event a line, without its end; "\\n" for a blank line."""
    while True:
        line = await stream.readline()
        if not line:
            break
        text = line[:-1] if line.endswith(b"\n") else line
        await queue.put((kind, text.decode(errors="replace") if text else "\n"))
    await queue.put((kind, None))


async def command(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    STATS["commands"] += 1
    f = fault("command")
    if f:
        if int(f) == 502:
            return web.Response(status=502, text="Bad Gateway")
        return err(int(f), "INJECTED", "injected failure %s" % f)
    try:
        body = await req.json()
        cmd = body["command"]
        assert isinstance(cmd, str)
    except Exception:
        return err(400, "BAD_REQUEST", "command is required")
    STATS["last_command"] = body
    cwd = in_box(b, body.get("cwd") or "")
    if not os.path.isdir(cwd):
        return err(400, "BAD_REQUEST", "working directory %s does not exist" % body.get("cwd"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": b["dir"], "LANG": "C.UTF-8"}
    env.update(b["env"])
    env.update({k: str(v) for k, v in (body.get("envs") or {}).items()})
    cid = uuid.uuid4().hex[:12]
    timeout = body.get("timeout")
    rec = {"running": True, "exit_code": None, "error": "", "log": None, "proc": None}
    b["commands"][cid] = rec
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    if body.get("background"):
        rec["log"] = os.path.join(BOX_ROOT, "%s-%s.log" % (b["id"], cid))
        with open(rec["log"], "wb") as log:
            p = await asyncio.create_subprocess_exec(
                "bash", "-c", cmd, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log, start_new_session=True)
        rec["proc"] = p

        async def wait_bg():
            try:
                code = await asyncio.wait_for(p.wait(), timeout / 1000 if timeout else None)
            except asyncio.TimeoutError:
                os.killpg(p.pid, signal.SIGKILL)
                code = await p.wait()
            rec["running"] = False
            rec["exit_code"] = code if code >= 0 else -1
            if code != 0:
                rec["error"] = "exit status %d" % code if code > 0 else "signal: killed"
        asyncio.ensure_future(wait_bg())
        await resp.prepare(req)
        await resp.write(event("init", text=cid))
        await resp.write_eof()
        return resp
    p = await asyncio.create_subprocess_exec(
        "bash", "-c", cmd, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        limit=4 << 20)
    rec["proc"] = p
    queue = asyncio.Queue()
    tasks = [asyncio.ensure_future(pump(p.stdout, "stdout", queue)),
             asyncio.ensure_future(pump(p.stderr, "stderr", queue))]
    deadline = time.time() + timeout / 1000 if timeout else None
    sent = 0
    delay = (FAULTS.get("sse_delay_ms") or 0) / 1000
    drop_after = FAULTS.get("sse_drop_after")
    try:
        await resp.prepare(req)
        await resp.write(event("init", text=cid))
        open_streams = 2
        while open_streams:
            wait = 1.0
            if deadline is not None:
                wait = max(0.0, min(wait, deadline - time.time()))
            try:
                kind, text = await asyncio.wait_for(queue.get(), wait)
            except asyncio.TimeoutError:
                if deadline is not None and time.time() >= deadline:
                    os.killpg(p.pid, signal.SIGKILL)
                    deadline = None
                else:
                    await resp.write(event("ping", text="pong"))
                continue
            if text is None:
                open_streams -= 1
                continue
            if delay:
                await asyncio.sleep(delay)
            if drop_after is not None and sent >= drop_after:
                # The connection dies mid-stream: no end of the chunked body.
                os.killpg(p.pid, signal.SIGKILL)
                req.transport.close()
                return resp
            await resp.write(event(kind, text=text))
            sent += 1
        code = await p.wait()
        rec["running"] = False
        rec["exit_code"] = code if code >= 0 else -1
        if FAULTS.get("sse_cut"):
            pass  # the stream ends cleanly, without its last event
        elif code == 0:
            await resp.write(event("execution_complete", execution_time=1))
        else:
            rec["error"] = "exit status %d" % code
            await resp.write(event("error", error={
                "ename": "CommandExecError", "evalue": str(code if code >= 0 else -1),
                "traceback": ["exit status %d" % code]}))
        await resp.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        # The client went away: execd cancels the command's context and kills its group.
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        raise
    finally:
        for t in tasks:
            t.cancel()
    return resp


async def interrupt(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    rec = b["commands"].get(req.query.get("id", ""))
    if not rec:
        return err(404, "NOT_FOUND", "no such command")
    STATS["interrupts"] = STATS.get("interrupts", 0) + 1
    p = rec.get("proc")
    if p and p.returncode is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return web.json_response({})


async def command_status(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    rec = b["commands"].get(req.match_info["cid"])
    if not rec:
        return err(404, "NOT_FOUND", "no such command")
    return web.json_response({"id": req.match_info["cid"], "running": rec["running"],
                              "exit_code": rec["exit_code"], "error": rec["error"]})


async def command_logs(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    rec = b["commands"].get(req.match_info["cid"])
    if not rec or not rec["log"]:
        return err(404, "NOT_FOUND", "no such background command")
    with open(rec["log"], "rb") as f:
        return web.Response(body=f.read(), content_type="text/plain")


async def upload(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    reader = await req.multipart()
    meta = None
    while True:
        part = await reader.next()
        if part is None:
            break
        if part.name == "metadata":
            meta = json.loads(await part.text())
        elif part.name == "file":
            if not isinstance(meta, dict) or not isinstance(meta.get("path"), str):
                return err(400, "BAD_REQUEST", "a file part needs a metadata part before it")
            data = await part.read()
            path = in_box(b, meta["path"])
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            mode = meta.get("mode")
            if isinstance(mode, int):
                os.chmod(path, int(str(mode), 8))
            meta = None
    return web.json_response({})


async def download(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    path = in_box(b, req.query.get("path", ""))
    if not os.path.isfile(path):
        return err(404, "NOT_FOUND", "file not found: %s" % req.query.get("path"))
    with open(path, "rb") as f:
        return web.Response(body=f.read(), content_type="application/octet-stream")


async def info(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    out = {}
    for p in req.query.getall("path", []):
        path = in_box(b, p)
        if not os.path.exists(path):
            return err(404, "NOT_FOUND", "file not found: %s" % p)
        st = os.stat(path)
        out[p] = {"path": p, "type": "directory" if os.path.isdir(path) else "file",
                  "size": st.st_size, "modified_at": iso(st.st_mtime),
                  "created_at": iso(st.st_ctime), "owner": "root", "group": "root",
                  "mode": int("%o" % (st.st_mode & 0o777))}
    return web.json_response(out)


# --- execd's PTY ---------------------------------------------------------------------

PTY_KEEP = 1 << 20  # bytes of each stream a session keeps for replays
PTY_SIGNALS = {"SIGINT", "SIGTERM", "SIGKILL", "SIGQUIT", "SIGHUP"}


class PtySession:
    def __init__(self, sid, cmd, cwd, env):
        self.sid, self.cmd, self.cwd, self.env = sid, cmd, cwd, env
        self.proc = self.master = None
        self.pipes = False
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
                self.proc.stdin.write(data)
            else:
                os.write(self.master, data)
        except (OSError, BrokenPipeError, ConnectionResetError, RuntimeError):
            pass

    def signal(self, name):
        if name not in PTY_SIGNALS or self.exit_code is not None or not self.proc:
            return
        try:
            group = self.proc.pid if self.pipes else os.tcgetpgrp(self.master)
            os.killpg(group, signal.Signals[name])
        except OSError:
            pass

    def resize(self, rows, cols):
        if not self.pipes and self.exit_code is None and self.master is not None:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def end(self):
        if not self.proc or self.exit_code is not None:
            return
        groups = {self.proc.pid}
        try:
            if not self.pipes:
                groups.add(os.tcgetpgrp(self.master))
        except OSError:
            pass
        for g in groups:
            try:
                os.killpg(g, signal.SIGKILL)
            except OSError:
                pass


def pty_child(tty):
    """In the child, before exec: SIGINT and SIGQUIT as a terminal's job gets
    them; with a terminal, it becomes the controlling one."""
    for sig in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    if tty:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def pty_start(s, pipes):
    argv = ["bash", "-c", s.cmd] if s.cmd else ["bash"]
    s.pipes = pipes
    loop = asyncio.get_running_loop()
    if pipes:
        s.proc = await asyncio.create_subprocess_exec(
            *argv, cwd=s.cwd, env=s.env, start_new_session=True, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            preexec_fn=lambda: pty_child(False))
    else:
        s.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        s.proc = await asyncio.create_subprocess_exec(
            *argv, cwd=s.cwd, env=s.env, start_new_session=True, stdin=slave, stdout=slave,
            stderr=slave, preexec_fn=lambda: pty_child(True))
        os.close(slave)
    proc, master = s.proc, s.master

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
            try:
                await asyncio.wait_for(asyncio.shield(done), 1)
            except asyncio.TimeoutError:
                loop.remove_reader(master)
            os.close(master)
        rc = proc.returncode
        s.exit_code = rc if rc >= 0 else 128 - rc
        if s.q is not None:
            s.q.put_nowait(("exit", s.exit_code))
    s.task = asyncio.ensure_future(run())


def pty_key_seen(req):
    if "OPEN-SANDBOX-API-KEY" in req.headers:
        STATS["pty_saw_key"] += 1


async def pty_create(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    pty_key_seen(req)
    STATS["pty_posts"] += 1
    f = fault("pty_create")
    if f:
        return err(int(f), "INJECTED", "injected failure %s" % f)
    STATS["pty_creates"] += 1
    try:
        body = await req.json()
        assert isinstance(body, dict)
    except Exception:
        return err(400, "BAD_REQUEST", "the body must be a JSON object")
    cmd = body.get("command")
    if cmd is not None and not isinstance(cmd, str):
        return err(400, "BAD_REQUEST", "command must be a string")
    STATS["last_pty"] = body
    cwd = in_box(b, body.get("cwd") or "")
    if not os.path.isdir(cwd):
        return err(400, "BAD_REQUEST", "working directory %s does not exist" % body.get("cwd"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": b["dir"], "LANG": "C.UTF-8",
           "TERM": "xterm"}
    env.update(b["env"])
    sid = uuid.uuid4().hex
    b["ptys"][sid] = PtySession(sid, cmd, cwd, env)
    return web.json_response({"session_id": sid}, status=201)


async def pty_delete(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    pty_key_seen(req)
    s = b["ptys"].pop(req.match_info["sid"], None)
    if s is None:
        return err(404, "NOT_FOUND", "no such PTY session")
    STATS["pty_deletes"] += 1
    s.end()
    if s.ws is not None:
        await s.ws.close(code=1000)
    return web.Response(status=204)


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
        except (ConnectionResetError, RuntimeError):
            return


async def pty_ws(req):
    b, e = execd_box(req)
    if e is not None:
        return e
    pty_key_seen(req)
    s = b["ptys"].get(req.match_info["sid"])
    if s is None:
        return err(404, "NOT_FOUND", "no such PTY session")
    if s.ws is not None and req.query.get("takeover") != "1":
        return err(409, "CONFLICT", "the session already has an attached client")
    ws = web.WebSocketResponse(max_msg_size=1 << 20)
    transport = req.transport
    await ws.prepare(req)
    f = fault("pty_ws")
    if f == "drop" and transport is not None:  # the socket dies a second in, no close frame
        STATS["pty_drops"] += 1
        asyncio.get_running_loop().call_later(1.0, transport.abort)
    if f == "error":  # refused before connected
        await ws.send_json({"type": "error", "code": "INJECTED", "error": "injected refusal"})
        await ws.close(code=1000)
        return ws
    if f == "notjson":  # a text frame that is no JSON object, then nothing
        await ws.send_str("{not json")
        await asyncio.sleep(30)
        return ws
    if f == "huge":  # a message over the client's bound
        await ws.send_bytes(b"\x01" + b"x" * (2 << 20))
        await asyncio.sleep(30)
        return ws
    if f == "junk":  # frames a client must drop, then a normal session
        for junk in (b"", b"\x01", b"\x03\x00\x00", b"\x07hello", b"\x03" + b"\xff" * 8 + b"z"):
            await ws.send_bytes(junk)
        await ws.send_json({"type": "notice-of-a-newer-execd"})
    if s.ws is not None:
        old = s.ws
        s.ws, s.q = None, None
        await old.close(code=4001, message=b"taken over")
    since = int(req.query.get("since", "0") or 0) if "since" in req.query else None
    q = asyncio.Queue()
    if s.proc is None:
        try:
            await pty_start(s, req.query.get("pty") == "0")
        except OSError as x:
            await ws.send_json({"type": "error", "code": "START_FAILED", "error": str(x)})
            await ws.close(code=1000)
            return ws
    elif since is not None:
        start = max(since, s.base[0])
        if s.base[0] + len(s.out[0]) > start:
            data = bytes(s.out[0][start - s.base[0]:])
            q.put_nowait(("bytes", b"\x03" + struct.pack(">Q", start) + data))
    q.put_nowait(("text", {"type": "connected", "session_id": s.sid,
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
    if s.ws is ws:  # closed without being taken over: a detach
        s.ws, s.q = None, None
    q.put_nowait(("stop", None))
    try:
        await asyncio.wait_for(sender, 2)
    except asyncio.TimeoutError:
        sender.cancel()
    return ws


def execd_routes(prefix):
    return [
        web.get(prefix + "/ping", ping),
        web.post(prefix + "/command", command),
        web.delete(prefix + "/command", interrupt),
        web.get(prefix + "/command/status/{cid}", command_status),
        web.get(prefix + "/command/{cid}/logs", command_logs),
        web.post(prefix + "/files/upload", upload),
        web.get(prefix + "/files/download", download),
        web.get(prefix + "/files/info", info),
        web.post(prefix + "/pty", pty_create),
        web.get(prefix + "/pty/{sid}/ws", pty_ws),
        web.delete(prefix + "/pty/{sid}", pty_delete),
    ]


# --- faults ------------------------------------------------------------------------


async def set_faults(req):
    body = await req.json()
    if body.get("oom"):
        for b in BOXES.values():
            b["oom"] = True
        body = {k: v for k, v in body.items() if k != "oom"}
    FAULTS.update(body)
    return web.json_response(FAULTS)


async def get_stats(req):
    s = dict(STATS)
    s["live"] = len(BOXES)
    return web.json_response(s)


async def do_reset(req):
    reset()
    return web.json_response({})


async def main():
    global A
    parent = os.getppid()
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--direct-port-file")
    ap.add_argument("--api-key")
    A = ap.parse_args()
    app = web.Application(client_max_size=256 << 20, middlewares=[lifecycle_auth])
    app.add_routes([
        web.post("/v1/sandboxes", create),
        web.get("/v1/sandboxes", list_boxes),
        web.get("/v1/sandboxes/{id}", get_box),
        web.delete("/v1/sandboxes/{id}", delete_box),
        web.get("/v1/sandboxes/{id}/endpoints/{port}", endpoint),
        web.post("/_fake/faults", set_faults),
        web.get("/_fake/stats", get_stats),
        web.post("/_fake/reset", do_reset),
    ] + execd_routes("/v1/sandboxes/{id}/proxy/{port}"))
    direct = web.Application(client_max_size=256 << 20, middlewares=[direct_auth])
    direct.add_routes(execd_routes("/direct/{id}/{port}"))
    runners = []
    for a, key in ((app, "main"), (direct, "direct")):
        r = web.AppRunner(a, access_log=None)
        await r.setup()
        site = web.TCPSite(r, "127.0.0.1", 0)
        await site.start()
        PORTS[key] = site._server.sockets[0].getsockname()[1]
        runners.append(r)
    for path, key in ((A.direct_port_file, "direct"), (A.port_file, "main")):
        if path:
            serve.write_port_file(path, PORTS[key])
    # Ends with its parent (a test killed by its alarm leaves no server) or a
    # SIGTERM, and takes its boxes' processes with it.
    def cleanup():
        for b in BOXES.values():
            kill_box(b)
        shutil.rmtree(BOX_ROOT, ignore_errors=True)

    await serve.until_parent_ends(parent, cleanup)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
