"""Streaming exec from Python: the async iterator, the callback form, the
blocking twin, timeouts with partial output, early exit, and the fallback
for Python providers. "Before the end" is shown without timing: the command
prints, then waits for a gate file the test creates only after it saw the
first chunk (chunks only at the end would hang; the bound is a hang guard)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import sbx
from sbx import AsyncSandbox, Sandbox, SandboxSpec
from sbx.stream import STDERR, STDOUT
from conftest import RecordingProvider, need_provider, run, skip_or_fail

GUARD_S = 60  # a hang guard only


def providers():
    out = []
    for name in ("local", "linux"):
        out.append(pytest.param(name, id=name))
    return out


def config(name, tmp_path):
    need_provider(name)
    if name == "linux" and os.geteuid() != 0:
        skip_or_fail("linux boxes need root")
    if name == "local":
        return {"local": {"workspace_root": str(tmp_path / "ws")}}
    return {"linux": {}}


def gate(name):
    return "/tmp/sbx-py-gate" if name == "linux" else "sbx-py-gate"


@pytest.mark.parametrize("name", providers())
def test_async_iterator_first_bytes_before_the_end(name, tmp_path):
    cfg = config(name, tmp_path)

    async def go():
        async with AsyncSandbox(cfg, SandboxSpec()) as sb:
            await sb.start()
            g = gate(name)
            cmd = f"rm -f {g}; echo first; echo err >&2; while [ ! -e {g} ]; do sleep 0.01; done; echo second"
            seen = {STDOUT: "", STDERR: ""}
            async with sb.exec_stream(cmd, text=True) as run_:
                it = run_.__aiter__()
                while "first\n" not in seen[STDOUT]:
                    stream, chunk = await asyncio.wait_for(it.__anext__(), GUARD_S)
                    seen[stream] += chunk
                assert run_.result is None  # still running
                assert (await sb.exec(f"touch {g}")).return_code == 0
                async for stream, chunk in it:
                    seen[stream] += chunk
            assert seen == {STDOUT: "first\nsecond\n", STDERR: "err\n"}
            assert run_.result == sbx.SandboxExecResult("first\nsecond\n", "err\n", 0, None)

    run(asyncio.wait_for(go(), GUARD_S * 2))


@pytest.mark.parametrize("name", providers())
def test_timeout_returns_partial_output(name, tmp_path):
    cfg = config(name, tmp_path)

    async def go():
        async with AsyncSandbox(cfg, SandboxSpec()) as sb:
            await sb.start()
            chunks = []
            r = await sb.exec_stream("echo partial; printf perr >&2; sleep 100", timeout_s=1,
                                     on_output=lambda s, c: chunks.append((s, c)))
            assert (r.return_code, r.error_type, r.stdout) == (125, "timeout", "partial\n")
            assert r.stderr.startswith("perr\n") and "timed out after 1s" in r.stderr
            assert b"".join(c for s, c in chunks if s == STDOUT) == b"partial\n"
            # The one-shot exec keeps the partial output too (the reference gave None).
            r = await sb.exec("echo partial; sleep 100", timeout_s=1)
            assert (r.return_code, r.error_type, r.stdout) == (125, "timeout", "partial\n")

    run(go())


@pytest.mark.parametrize("name", providers())
def test_keep_output_false_and_early_exit_kills(name, tmp_path):
    cfg = config(name, tmp_path)

    async def go():
        async with AsyncSandbox(cfg, SandboxSpec()) as sb:
            await sb.start()
            r = await sb.exec_stream("echo a; echo b >&2; exit 2", keep_output=False)
            assert r == sbx.SandboxExecResult("", "", 2, None)
            # Leaving the loop early cancels the command; nothing of it runs after.
            async with sb.exec_stream("echo $$ > spid; while :; do echo tick; sleep 0.01; done") as s:
                async for stream, chunk in s:
                    if b"tick" in chunk:
                        break
            pid = (await sb.exec("cat spid")).stdout.strip()
            probe = f"s=$(awk '{{print $3}}' /proc/{pid}/stat 2>/dev/null); [ -n \"$s\" ] && [ \"$s\" != Z ]"
            assert (await sb.exec(probe)).return_code != 0

    run(go())


def _hang_guard(signum, frame):
    raise TimeoutError(f"no chunk before the command could end ({GUARD_S} s hang guard)")


@pytest.mark.parametrize("name", providers())
def test_sync_twin(name, tmp_path):
    cfg = config(name, tmp_path)
    old = signal.signal(signal.SIGALRM, _hang_guard)
    signal.alarm(GUARD_S)
    try:
        sync_twin(cfg, name)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def sync_twin(cfg, name):
    with Sandbox(cfg, SandboxSpec()) as sb:
        sb.start()
        g = gate(name)
        got = []
        with sb.exec_stream(f"rm -f {g}; echo one; while [ ! -e {g} ]; do sleep 0.01; done; echo two") as s:
            for stream, chunk in s:
                got.append((stream, chunk))
                if chunk == b"one\n":
                    assert sb.exec(f"touch {g}").return_code == 0
        assert got == [(STDOUT, b"one\n"), (STDOUT, b"two\n")]
        assert s.result.stdout == "one\ntwo\n"
        seen = []
        r = sb.exec_stream("echo hi; exit 4", on_output=lambda st, c: seen.append(c)).wait()
        assert (r.return_code, seen) == (4, [b"hi\n"])


@pytest.mark.parametrize("name", providers())
def test_stdin_bytes_and_streamed(name, tmp_path):
    cfg = config(name, tmp_path)

    async def go():
        async with AsyncSandbox(cfg, SandboxSpec()) as sb:
            await sb.start()
            r = await sb.exec_stream("tr a-z A-Z", stdin=b"shout\n")
            assert r.stdout == "SHOUT\n"
            # Streamed stdin, interleaved with streamed output: the command answers
            # each line before the next is written (no timing: each waits for the other).
            rfd, wfd = os.pipe()
            try:
                async with sb.exec_stream("while read l; do echo got:$l; done", stdin=rfd, text=True) as s:
                    it = s.__aiter__()
                    for word in ("one", "two"):
                        os.write(wfd, f"{word}\n".encode())
                        _, chunk = await asyncio.wait_for(it.__anext__(), GUARD_S)
                        assert chunk == f"got:{word}\n"
                    os.close(wfd)
                    wfd = -1
                    assert [c async for c in it] == []
                assert s.result.return_code == 0
            finally:
                os.close(rfd)
                if wfd >= 0:
                    os.close(wfd)

    run(go())


def test_python_provider_yields_the_whole_output_at_the_end():
    async def go():
        sb = AsyncSandbox(RecordingProvider(), SandboxSpec())
        await sb.start()
        chunks = [c async for c in sb.exec_stream("anything", text=True)]
        assert chunks == [(STDOUT, "ok")]
        await sb.stop()

    run(go())
