"""The binding over the embedded default provider, `linux` (namespaced boxes)."""

import asyncio

import pytest

from sbx import AsyncSandbox, Sandbox, SandboxSpec, SandboxStatus
from conftest import need_provider, run


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


def test_linux_box_through_the_binding(tmp_path):
    async def go():
        spec = SandboxSpec(workdir="/work", env={"V": "1"}, files={"/work/in.txt": "from spec ✓"})
        async with AsyncSandbox({"linux": {}}, spec) as sb:
            await sb.start()
            assert await sb.status() == SandboxStatus.RUNNING
            r = await sb.exec("pwd; cat in.txt; echo; echo $V; exit 3")
            assert (r.stdout, r.return_code) == ("/work\nfrom spec ✓\n1\n", 3)
            (tmp_path / "up").write_text("up")
            await sb.upload(tmp_path / "up", "/work/up")
            await sb.download("/work/up", tmp_path / "down")
            assert (tmp_path / "down").read_text() == "up"
            task = asyncio.create_task(sb.exec("echo $$ > /work/pid; exec sleep 100", timeout_s=None))
            for _ in range(6000):  # a hang guard only
                if (await sb.exec("test -s /work/pid")).return_code == 0:
                    break
                await asyncio.sleep(0.01)
            pid = (await sb.exec("cat /work/pid")).stdout.strip()
            assert (await sb.exec(f"kill -0 {pid}")).return_code == 0
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 60)  # a hang guard only
            # The cancelled command's process is gone from the box (polled: a
            # killed process may take a moment to be reaped; the bound is a hang guard).
            for _ in range(6000):
                if (await sb.exec(f"kill -0 {pid} 2>/dev/null")).return_code != 0:
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail(f"process {pid} survived the cancelled exec")
            assert (await sb.exec("echo after")).stdout == "after\n"
        assert await sb.status() == SandboxStatus.STOPPED

    run(go())


def test_linux_sync_facade():
    with Sandbox({"linux": {}}, SandboxSpec()) as s:
        s.start()
        assert s.exec("echo sync").stdout == "sync\n"
    assert s.status() == SandboxStatus.STOPPED
