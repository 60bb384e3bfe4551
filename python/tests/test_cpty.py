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
