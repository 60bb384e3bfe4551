"""pause()/resume() and SandboxStatus.PAUSED (the newer reference's
SupportsSandboxPauseResume) over the C calls: docs/pause.md."""

import asyncio

import pytest

from sbx import AsyncSandbox, Sandbox, SandboxSpec, SandboxStatus, SupportsSandboxPauseResume
from sbx.cprovider import CProvider
from conftest import need_provider


def test_pause_resume_blocking():
    need_provider("linux")
    with Sandbox({"linux": {}}, SandboxSpec()) as box:
        box.start()
        box.pause()
        box.pause()  # idempotent
        assert box.status() == SandboxStatus.PAUSED
        with pytest.raises(RuntimeError, match="is paused: resume it first"):
            box.exec("true")
        box.resume()
        assert box.status() == SandboxStatus.RUNNING
        assert box.exec("echo back").stdout == "back\n"
        box.pause()  # a paused box still stops (the with block)


def test_pause_resume_async():
    need_provider("linux")

    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec()) as box:
            await box.start()
            await box.pause()
            assert await box.status() == SandboxStatus.PAUSED
            await box.resume()
            r = await box.exec("echo async")
            assert r.stdout == "async\n"

    asyncio.run(go())


def test_capability_protocol(tmp_path):
    # The provider object has pause/resume exactly where C can pause.
    need_provider("linux")
    assert isinstance(CProvider.named("linux")(), SupportsSandboxPauseResume)
    local = CProvider.named("local")(workspace_root=str(tmp_path / "ws"), state_dir=str(tmp_path / "st"))
    assert not isinstance(local, SupportsSandboxPauseResume)
    with Sandbox({"local": {"workspace_root": str(tmp_path / "ws2"), "state_dir": str(tmp_path / "st2")}},
                 SandboxSpec()) as box:
        box.start()
        with pytest.raises(NotImplementedError, match="does not support pausing sandboxes"):
            box.pause()
