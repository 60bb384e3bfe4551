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


def test_list_stop_and_cleanup_boxes_by_label(tmp_path):
    """sbx.list_sandboxes / stop_sandbox / cleanup_sandboxes see every box of the
    provider's state directory, with or without a handle, filtered by label."""
    import sbx

    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}

    async def go():
        a = AsyncSandbox(cfg, SandboxSpec(metadata={"run_id": "py-a", "job": "x"}))
        b = AsyncSandbox(cfg, SandboxSpec(metadata={"run_id": "py-b"}))
        await a.start()
        await b.start()
        try:
            mine = await sbx.alist_sandboxes(cfg, labels={"run_id": "py-a"})
            assert [m["id"] for m in mine] == [a.sandbox_id]
            assert mine[0]["status"] == "running" and mine[0]["labels"]["job"] == "x"
            assert {m["id"] for m in sbx.list_sandboxes(cfg)} == {a.sandbox_id, b.sandbox_id}
            # A crashed run's boxes, collected by its run id (dry run first).
            assert sbx.cleanup_sandboxes(cfg, run_id="py-a", dry_run=True) == [a.sandbox_id]
            assert await a.status() == SandboxStatus.RUNNING
            assert await sbx.acleanup_sandboxes(cfg, run_id="py-a") == [a.sandbox_id]
            assert await a.status() == SandboxStatus.STOPPED
            sbx.stop_sandbox(cfg, b.sandbox_id)
            assert await b.status() == SandboxStatus.STOPPED
            assert sbx.list_sandboxes(cfg) == []
            with pytest.raises(Exception, match="no box|not found|No such"):
                sbx.stop_sandbox(cfg, b.sandbox_id)
            with pytest.raises(TypeError, match="must be a string"):
                sbx.list_sandboxes(cfg, labels={"n": 1})
        finally:
            await a.stop()
            await b.stop()

    run(go())


def test_exec_argv_runs_without_a_shell():
    # A list is an argv (sbx's extension, as docker exec's exec form): no shell reads it,
    # so shell syntax in a word is just bytes, and a missing program is 127 as a shell says.
    with Sandbox({"linux": {}}, SandboxSpec()) as sb:
        sb.start()
        r = sb.exec(["echo", "$HOME", "a;b", "it's"])
        assert (r.stdout, r.return_code) == ("$HOME a;b it's\n", 0)
        r = sb.exec(["no-such-program-here"])
        assert r.return_code == 127
        with pytest.raises(TypeError, match="non-empty list of str"):
            sb.exec([])
        with pytest.raises(TypeError, match="non-empty list of str"):
            sb.exec(["echo", 1])
