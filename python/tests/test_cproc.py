"""Background processes on the linux provider: `sandbox.spawn()` handles over
the C library's sbx_proc_* (python/sbx/cproc.py, docs/terminals.md)."""

import asyncio

import pytest

from sbx import AsyncSandbox, Sandbox, SandboxSpec
from conftest import need_provider, run


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


async def read_until(p, needle: bytes, stream: str = "stdout") -> bytes:
    got = b""
    while needle not in got:
        chunk = await p.read(stream, timeout_s=60)
        assert chunk, f"the process ended before {needle!r} (read {got!r})"
        got += chunk
    return got


def test_background_python_repl_driven_through_stdin():
    """The issue's case: a background python3 REPL driven through stdin writes."""

    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec(workdir="/work")) as sb:
            await sb.start()
            repl = await sb.spawn("python3 -i -u -q")
            assert repl.id > 0 and repl.returncode is None
            await repl.write("x = 6\n")
            await repl.write("x * 7\n")
            assert b"42\n" in await read_until(repl, b"42\n")
            await repl.write(b"import sys; print('err-line', file=sys.stderr)\n")
            assert b"err-line" in await read_until(repl, b"err-line", "stderr")
            # Another handle (a new connection) takes it over and keeps driving it.
            again = await sb.attach_process(repl.id, takeover=True)
            assert b"42\n" in await read_until(again, b"42\n")  # replayed from offset 0
            await again.write("print(x + 1)\n")
            await read_until(again, b"7\n")
            await again.close_stdin()  # EOF: the REPL exits 0
            assert await again.wait(timeout_s=60) == 0
            assert again.returncode == 0
            assert b"42\n7\n" in await again.stdout()
            assert (await again.stderr()).count(b">>> ") >= 3  # its prompts, on stderr
            await again.close()
            await repl.close()
            assert not [p for p in await sb.processes() if p["id"] == repl.id]

    run(go())


def test_wait_poll_signal_list_and_top():
    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec(workdir="/work")) as sb:
            await sb.start()
            p = await sb.spawn("echo started; exec sleep 600", env={"X": "1"})
            await read_until(p, b"started\n")
            assert await p.poll() is None
            with pytest.raises(TimeoutError):
                await p.wait(timeout_s=0.1)
            listed = [e for e in await sb.processes() if e["id"] == p.id]
            assert len(listed) == 1 and listed[0]["running"] and listed[0]["mode"] == "pipe"
            assert listed[0]["attached"] and listed[0]["exit_code"] is None
            procs = (await sb.top())["processes"]
            assert any(q["pid"] == listed[0]["pid"] for q in procs)
            assert any(q["pid"] == 1 for q in procs)
            st = await sb.stats()  # one code path: sbx_sandbox_stats
            assert st["pids"] >= 2 and set(st) >= {"cpu_ns", "memory_bytes", "memory_limit", "pids_limit"}
            # read, wait and a signal awaited together all progress.
            waiter = asyncio.ensure_future(p.wait(timeout_s=60))
            await p.terminate()
            assert await waiter == 128 + 15
            assert await p.read(timeout_s=60) == b""  # everything read: the end
            await p.close()
            with pytest.raises(ValueError):
                await sb.attach_process(0)

    run(go())


def test_sync_sandbox_spawn_detach_and_reattach():
    with Sandbox({"linux": {}}, SandboxSpec(workdir="/work")) as sb:
        sb.start()
        p = sb.spawn("read line; echo got:$line; exit 3")
        pid = p.id
        p.detach()  # it runs on, unheld
        q = sb.attach_process(pid, keep=True)
        q.write("hello\n")
        assert q.wait(timeout_s=60) == 3
        assert q.stdout == b"got:hello\n"
        q.close()
        # keep=True: still listed, ended, with its code.
        [e] = [e for e in sb.processes() if e["id"] == pid]
        assert (e["running"], e["exit_code"]) == (False, 3)
        r = sb.attach_process(pid)
        assert r.wait(timeout_s=60) == 3 and r.returncode == 3
        r.close()
        assert not [e for e in sb.processes() if e["id"] == pid]
