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
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse
import uuid

from aiohttp import web

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
                 proxy_requests=0, last_create=None, last_command=None)


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
         "token": uuid.uuid4().hex, "oom": False}
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
