#!/usr/bin/env bash
# The sbx docker provider against the docker CLI on the same engine and
# image, through Python as NeMo Gym code runs both (the reference's docker
# provider is a wrapper around these CLI calls): create (`docker run -d`),
# exec `echo hi` p50 (`docker exec`), 50 execs at once, and a 64 MiB file
# in and out (`docker cp`); then the same over the remote path (the agent
# through an Engine-API exec session, as for an engine on another machine)
# and with agent: false (the engine's exec and archive APIs).
# Prints each with the ratio; not pass/fail.
#
#   bench/bench_docker.sh [N]    (N execs for the p50, default 50; needs root and docker)
# docker: a daemon that already answers (DOCKER_HOST, or the private one of
# scripts/test-dockerd.sh); SBX_BENCH_DOCKER=1 starts a private dockerd of
# its own (bench/docker.sh) and stops it at the end.
set -u
N=${1:-50}
B=${B:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
[ "$(id -u)" = 0 ] || { echo "# bench_docker: needs root, skipped"; exit 0; }
command -v docker >/dev/null || { echo "# bench_docker: docker not installed, skipped"; exit 0; }
W=$(mktemp -d /tmp/sbx-bench-docker.XXXXXX)
export SBX_STATE_DIR="$W/state"
. "$ROOT/bench/docker.sh"
cleanup() {
  [ -n "$bench_docker_started" ] && docker rmi -f sbx-bench-docker >/dev/null 2>&1
  bench_docker_down
  rm -rf "$W"
}
trap cleanup EXIT
bench_docker_need bench_docker "$W"
cd "$W"
bench_docker_image sbx-bench-docker
head -c $((64 << 20)) /dev/urandom >"$W/blob"
SBX_LIB="$B/libsbx.so" PYTHONPATH="$ROOT/python" N="$N" W="$W" python3 - <<'PY'
import asyncio, os, statistics, subprocess, sys, time
import sbx

N = int(os.environ["N"])
W = os.environ["W"]
IMG = "sbx-bench-docker"
CFG = {"docker": {"create": {"network": "none"}}}


def now():
    return time.perf_counter()


async def sh(*argv):
    p = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                             stderr=asyncio.subprocess.PIPE)
    out, err = await p.communicate()
    if p.returncode:
        raise RuntimeError(f"{argv}: {err.decode()}")
    return out.decode()


async def main():
    spec = sbx.SandboxSpec(image=IMG)
    # create: sbx (container + agent hello) vs docker run -d (container running)
    sc, dc = [], []
    for _ in range(5):
        b = sbx.AsyncSandbox(CFG, spec)
        t = now(); await b.start(); sc.append(now() - t)
        await b.stop()
        t = now(); cid = (await sh("docker", "run", "-d", "--network", "none", IMG,
                                   "sleep", "2147483647")).strip(); dc.append(now() - t)
        await sh("docker", "rm", "-f", cid)
    box = sbx.AsyncSandbox(CFG, spec)
    await box.start()
    cid = (await sh("docker", "run", "-d", "--network", "none", IMG, "sleep", "2147483647")).strip()
    try:
        se, de = [], []
        for _ in range(N):
            t = now(); r = await box.exec("echo hi"); se.append(now() - t)
            assert r.stdout == "hi\n", r
            t = now(); out = await sh("docker", "exec", cid, "sh", "-c", "echo hi"); de.append(now() - t)
            assert out == "hi\n"
        t = now(); rs = await asyncio.gather(*(box.exec("echo hi") for _ in range(50))); s50 = now() - t
        assert all(r.stdout == "hi\n" for r in rs)
        t = now(); await asyncio.gather(*(sh("docker", "exec", cid, "sh", "-c", "echo hi") for _ in range(50))); d50 = now() - t
        blob = os.path.join(W, "blob")
        t = now(); await box.upload(blob, "/tmp/blob"); sup = now() - t
        t = now(); await sh("docker", "cp", blob, f"{cid}:/tmp/blob"); dup = now() - t
        t = now(); await box.download("/tmp/blob", os.path.join(W, "back1")); sdn = now() - t
        t = now(); await sh("docker", "cp", f"{cid}:/tmp/blob", os.path.join(W, "back2")); ddn = now() - t
        assert open(os.path.join(W, "back1"), "rb").read() == open(blob, "rb").read()
        # The remote path (exec session per handle, as for an engine on another machine).
        rcfg = {"docker": {"remote": True, "create": {"network": "none"}}}
        rc_ = []
        for _ in range(5):
            b = sbx.AsyncSandbox(rcfg, spec)
            t = now(); await b.start(); rc_.append(now() - t)
            await b.stop()
        rcreate = statistics.median(rc_)
        rbox = sbx.AsyncSandbox(rcfg, spec)
        await rbox.start()
        re_ = []
        for _ in range(N):
            t = now(); r = await rbox.exec("echo hi"); re_.append(now() - t)
            assert r.stdout == "hi\n", r
        t = now(); rs = await asyncio.gather(*(rbox.exec("echo hi") for _ in range(50))); r50 = now() - t
        assert all(r.stdout == "hi\n" for r in rs)
        t = now(); await rbox.upload(blob, "/tmp/blob"); rup = now() - t
        t = now(); await rbox.download("/tmp/blob", os.path.join(W, "back4")); rdn = now() - t
        assert open(os.path.join(W, "back4"), "rb").read() == open(blob, "rb").read()
        await rbox.stop()
        # agent: false (the engine's exec and archive APIs, as the reference but without the CLI).
        nbox = sbx.AsyncSandbox({"docker": {"agent": False, "create": {"network": "none"}}}, spec)
        t = now(); await nbox.start(); ncreate = now() - t
        ne = []
        for _ in range(N):
            t = now(); r = await nbox.exec("echo hi"); ne.append(now() - t)
            assert r.stdout == "hi\n", r
        t = now(); rs = await asyncio.gather(*(nbox.exec("echo hi") for _ in range(50))); n50 = now() - t
        assert all(r.stdout == "hi\n" for r in rs)
        t = now(); await nbox.upload(blob, "/tmp/blob"); nup = now() - t
        t = now(); await nbox.download("/tmp/blob", os.path.join(W, "back3")); ndn = now() - t
        assert open(os.path.join(W, "back3"), "rb").read() == open(blob, "rb").read()
        await nbox.stop()
    finally:
        await box.stop()
        await sh("docker", "rm", "-f", cid)
    ver = (await sh("docker", "version", "-f", "{{.Server.Version}}")).strip()
    print(f"# bench_docker: sbx docker provider vs the docker CLI, engine {ver}, busybox image, --network none")
    rows = [
        ("create (median of 5)", statistics.median(sc), "docker run -d", statistics.median(dc)),
        (f"exec echo hi p50 of {N}", statistics.median(se), "docker exec", statistics.median(de)),
        ("50 execs at once", s50, "50 docker exec at once", d50),
        ("upload 64 MiB", sup, "docker cp in", dup),
        ("download 64 MiB", sdn, "docker cp out", ddn),
        ("remote path: create (med 5)", rcreate, "docker run -d", statistics.median(dc)),
        (f"remote path: exec p50", statistics.median(re_), "docker exec", statistics.median(de)),
        ("remote path: 50 at once", r50, "50 docker exec at once", d50),
        ("remote path: upload 64 MiB", rup, "docker cp in", dup),
        ("remote path: download", rdn, "docker cp out", ddn),
        ("agent false: create", ncreate, "docker run -d", statistics.median(dc)),
        (f"agent false: exec p50", statistics.median(ne), "docker exec", statistics.median(de)),
        ("agent false: 50 at once", n50, "50 docker exec at once", d50),
        ("agent false: upload 64MiB", nup, "docker cp in", dup),
        ("agent false: download", ndn, "docker cp out", ddn),
    ]
    for name, s, dname, d in rows:
        print(f"{name:<26} sbx {s * 1000:9.2f} ms   {dname:<24} {d * 1000:9.2f} ms   {d / s:7.1f}x")


asyncio.run(main())
PY
