"""[svc-logs] sandbox.logs() over the C library's sbx_sandbox_logs (linux boxes)."""

import time

import pytest

from sbx import AsyncSandbox, Sandbox, SandboxSpec, SandboxStatus
from conftest import need_provider, run


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


def _wait_for(sb, want: bytes):
    for _ in range(1200):  # a hang guard only
        entries = sb.logs()
        if want in b"".join(e.data for e in entries if e.stream == "stdout"):
            return entries
        time.sleep(0.05)
    pytest.fail(f"the service log never showed {want!r}")


def test_logs_sync_and_exit():
    spec = SandboxSpec(entrypoint=["sh", "-c", "echo hello; echo oops >&2; exit 3"])
    with Sandbox({"linux": {}}, spec) as sb:
        sb.start()
        for _ in range(1200):  # a hang guard only
            if sb.status() == SandboxStatus.STOPPED:
                break
            time.sleep(0.05)
        assert sb.status() == SandboxStatus.STOPPED
        entries = sb.logs()
        assert [e.data for e in entries if e.stream == "stdout"] == [b"hello\n"]
        assert b"oops\n" in [e.data for e in entries if e.stream == "stderr"]
        assert entries[-1].stream == "event" and entries[-1].data == b"exited 3"
        assert all(e.time > 1e9 for e in entries)
        # The box still runs commands.
        assert sb.exec("echo still").stdout == "still\n"
        # tail counts entries (events not counted); on_entry stops on a true return.
        last = sb.logs(tail=1)
        assert [e.stream for e in last] == ["stderr", "event"]
        assert last[0].data == b"sbx-agent: entrypoint exited with status 3\n"
        seen = []
        assert sb.logs(on_entry=lambda e: seen.append(e) or True) is None
        assert len(seen) == 1
        with pytest.raises(ValueError):
            sb.logs(tail=-1)
        # A callback's exception comes back out of logs().
        with pytest.raises(ZeroDivisionError):
            sb.logs(on_entry=lambda e: 1 / 0)


def test_logs_async_follow():
    async def go():
        spec = SandboxSpec(entrypoint=["sh", "-c", "echo one; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo two"])
        async with AsyncSandbox({"linux": {}}, spec) as sb:
            await sb.start()
            for _ in range(1200):  # a hang guard only
                if any(e.data == b"one\n" for e in await sb.logs()):
                    break
                time.sleep(0.05)
            await sb.exec("touch /tmp/go")
            entries = await sb.logs(follow=True)  # returns when the service ends
            assert [e.data for e in entries if e.stream == "stdout"] == [b"one\n", b"two\n"]
            assert entries[-1].data == b"exited 0"
            assert [e.data for e in await sb.logs(since=entries[-1].time + 3600)] == []

    run(go())


def test_startup_files_with_modes_and_bytes():
    from sbx import SandboxFile

    spec = SandboxSpec(
        workdir="/w",
        files={
            "/w/run.sh": SandboxFile("#!/bin/sh\necho ran\n", mode=0o755),
            "/w/key": SandboxFile(b"\x00\xff", mode=0o640),
            "/w/blob": b"\x01\x02",
            "/w/plain": "text",
        },
    )
    with Sandbox({"linux": {}}, spec) as sb:
        sb.start()
        assert sb.exec("./run.sh").stdout == "ran\n"
        r = sb.exec("stat -c '%n %a %s' run.sh key blob plain")
        assert r.stdout == "run.sh 755 19\nkey 640 2\nblob 600 2\nplain 600 4\n"
        assert sb.exec("od -An -tx1 key | tr -d ' \\n'").stdout == "00ff"
    bad = SandboxSpec(files={"/w/x": SandboxFile("x", mode=0o4755)})
    with pytest.raises(Exception, match="setuid, setgid and sticky bits are refused"):
        Sandbox({"linux": {}}, bad)
    with pytest.raises(TypeError):
        Sandbox({"linux": {}}, SandboxSpec(files={"/w/x": SandboxFile("x", mode="755")}))


def test_stage_file_for_python_providers(tmp_path):
    import os
    import stat

    from sbx import SandboxFile
    from sbx.files import stage_file

    stage_file(tmp_path / "a", SandboxFile(b"\x00\xff", mode=0o750))
    assert (tmp_path / "a").read_bytes() == b"\x00\xff"
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o750
    stage_file(tmp_path / "b", b"raw")
    assert (tmp_path / "b").read_bytes() == b"raw"
    with pytest.raises(ValueError):
        stage_file(tmp_path / "c", SandboxFile("x", mode=0o4755))
