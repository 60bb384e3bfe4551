"""`sandbox.pty` on the linux provider: the reference's facade over the C
PTY sessions of the box's agent (docs/terminals.md)."""

import pytest

from sbx import AsyncSandbox, SandboxPtyError, SandboxSpec
from conftest import need_provider, run


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


async def read_all(s):
    out = b""
    while True:
        c = await s.read()
        if not c:
            return out
        out += c


def test_pty_sessions_through_the_binding():
    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec(workdir="/work")) as sb:
            await sb.start()
            # One-shot: a terminal merges the streams; pipe mode keeps them apart.
            r = await sb.pty.exec("echo hi; echo err >&2; exit 3", timeout_s=60)
            assert (r.return_code, r.stderr, r.error_type) == (3, None, None)
            assert "hi\r\n" in r.stdout and "err\r\n" in r.stdout
            r = await sb.pty.exec("echo hi; echo err >&2; exit 4", timeout_s=60, pty=False)
            assert (r.stdout, r.stderr, r.return_code) == ("hi\n", "err\n", 4)
            # A session: the size asked for, a resize, the exit status.
            s = await sb.pty.create(rows=30, cols=90)
            assert s.mode == "pty" and s.session_id.isdigit()
            await s.write(b"stty size\n")
            got = b""
            while b"30 90" not in got:
                got += await s.read(timeout_s=60)
            await s.resize(40, 100)
            await s.write(b"stty size; exit 5\n")
            assert b"40 100" in await read_all(s)
            assert await s.wait_exit(timeout_s=60) == 5
            await s.close()
            assert s.closed
            # Attach from another handle; takeover makes the first one's reads fail.
            a = await sb.pty.create()
            await a.write(b"echo FIRST-$((1+1))\n")
            got = b""
            while b"FIRST-2" not in got:
                got += await a.read(timeout_s=60)
            b = await sb.pty.attach(a.session_id, takeover=True, since=0)
            replay = b""
            while b"FIRST-2" not in replay:
                replay += await b.read(timeout_s=60)
            with pytest.raises(SandboxPtyError, match="taken over"):
                while await a.read(timeout_s=60):
                    pass
            await a.close()  # an evicted handle: closing it changes nothing
            await b.write(b"exit 6\n")
            assert await b.wait_exit(timeout_s=60) == 6
            await b.close()
            with pytest.raises(SandboxPtyError, match="no PTY session"):
                await sb.pty.attach("99999")

    run(go())


def _pid(stdout):
    """The number after the first "PID=" that is followed by a digit (the echo shows "PID=$$")."""
    import re

    m = re.search(r"PID=(\d+)", stdout)
    return int(m.group(1)) if m else None


def test_pty_exec_runs_the_c_facade():
    """pty.exec on a C provider is sbx_sandbox_pty_exec (src/core/pty_exec.c)."""

    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec(workdir="/work")) as sb:
            await sb.start()
            one = await sb.pty.exec("echo PID=$$")  # no default yet: a one-shot
            s = await sb.pty.create()  # the default
            r1 = await sb.pty.exec("echo PID=$$")
            r2 = await sb.pty.exec("echo PID=$$; (exit 9)")
            assert _pid(r1.stdout) == _pid(r2.stdout) != _pid(one.stdout)
            assert (r2.return_code, r2.stderr, r2.error_type) == (9, None, None)
            shaped = await sb.pty.exec("echo PID=$$", rows=30, cols=100)
            assert _pid(shaped.stdout) != _pid(r1.stdout)
            with pytest.raises(ValueError, match="fixed at pty.create"):
                await sb.pty.exec("true", session=s, cwd="/")
            # An explicit session keeps its shell; its timeout leaves it open.
            e = await sb.pty.create("sh")
            r = await sb.pty.exec("sleep 1000", session=e, timeout_s=0.5)
            assert (r.stdout, r.return_code, r.error_type) == (None, 125, "timeout")
            assert r.stderr == (
                "PTY command timed out after 0.5s: 'sleep 1000'; the command is still running "
                "and the session should be discarded"
            )
            assert not e.closed
            await e.close()
            # The default's timeout closes it (the reference prints 2.0 as given).
            r = await sb.pty.exec("sleep 1000", timeout_s=2.0)
            assert r.stderr.startswith("PTY command timed out after 2.0s: 'sleep 1000'; ")
            assert s.closed
            # A one-shot's timeout has no suffix.
            r = await sb.pty.exec("sleep 1000", timeout_s=1, pty=False)
            assert r.stderr == "PTY command timed out after 1s: 'sleep 1000'"
            r = await sb.pty.exec("printf a; printf E >&2; printf b; exit 3", pty=False)
            assert (r.stdout, r.stderr, r.return_code, r.error_type) == ("ab", "E", 3, None)

    run(go())


def test_pty_on_the_local_provider(tmp_path):
    """The local provider's sessions run under a host sbx-agent (docs/providers/local.md)."""
    need_provider("local")
    cfg = {"local": {"workspace_root": str(tmp_path / "ws"), "state_dir": str(tmp_path / "state")}}

    # The host user's rc files are not what this checks (some wait: pyenv's rehash lock).
    (tmp_path / "home").mkdir()
    spec = SandboxSpec(env={"HOME": str(tmp_path / "home")})

    async def go():
        async with AsyncSandbox(cfg, spec) as sb:
            await sb.start()
            s = await sb.pty.create()
            r1 = await sb.pty.exec("echo PID=$$; pwd")
            r2 = await sb.pty.exec("echo PID=$$")
            assert _pid(r1.stdout) == _pid(r2.stdout)
            assert str(tmp_path / "ws") in r1.stdout  # sessions start in the workspace
            r = await sb.pty.exec("printf merged")
            assert (r.return_code, r.error_type) == (0, None)
            await s.close()
            r = await sb.pty.exec("printf merged")
            assert (r.stdout, r.stderr, r.return_code) == ("merged", None, 0)
        # Stopped: the host agent and its files are gone.
        assert not list((tmp_path / "state").glob("*.agent*"))
        assert not list((tmp_path / "state").glob("*.sock"))

    run(go())


def test_run_detached_on_a_session():
    """The newer reference's SandboxPtySession.run_detached (sbx_proc_run_detached)."""

    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec(workdir="/work")) as sb:
            await sb.start()
            s = await sb.pty.create()
            out, code = await s.run_detached("echo a; echo b >&2; exit 6", poll_interval_s=0.05)
            assert (out, code) == (b"a\nb\n", 6)
            with pytest.raises(SandboxPtyError, match="send its output to a file"):
                await s.run_detached("head -c 2000000 /dev/zero", poll_interval_s=0.05)
            await s.close()
            await sb.stop()
            with pytest.raises(RuntimeError, match="not been started"):
                await s.run_detached("true")

    run(go())
