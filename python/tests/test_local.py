"""The binding over real host processes: libsbx's `local` provider."""

import asyncio
import os

import pytest

from sbx import AsyncSandbox, Sandbox, SandboxSpec, SandboxStatus
from conftest import need_provider, run


@pytest.fixture(autouse=True)
def _local():
    need_provider("local")


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def procs_in(directory) -> list[int]:
    """Live processes whose working directory is `directory`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == str(directory) and alive(int(entry)):
                    out.append(int(entry))
            except OSError:
                pass
    return out


async def gone(check, guard_s=60.0):
    """Polls `check` until true; the guard only stops a hang."""
    loop = asyncio.get_running_loop()
    end = loop.time() + guard_s
    while not check():
        if loop.time() > end:
            return False
        await asyncio.sleep(0.01)
    return True


async def wait_for_file(path, guard_s=60.0):
    """Polls for a file the command writes; the guard only stops a hang."""
    loop = asyncio.get_running_loop()
    end = loop.time() + guard_s
    while not (os.path.exists(path) and open(path).read().strip()):
        assert loop.time() < end, f"{path} never appeared"
        await asyncio.sleep(0.01)
    return int(open(path).read().strip())


def test_exec_real_processes(tmp_path):
    async def go():
        spec = SandboxSpec(workdir=str(tmp_path), env={"SPEC_VAR": "s"}, files={"hello.txt": "hi ✓\n"})
        async with AsyncSandbox({"local": {}}, spec) as sb:
            await sb.start()
            assert sb.sandbox_id.startswith("local-")
            assert await sb.status() == SandboxStatus.RUNNING
            r = await sb.exec("echo out; echo err >&2; exit 3")
            assert (r.stdout, r.stderr, r.return_code, r.error_type) == ("out\n", "err\n", 3, None)
            assert (await sb.exec("pwd")).stdout == f"{tmp_path}\n"
            assert (await sb.exec("cat hello.txt")).stdout == "hi ✓\n"
            assert (await sb.exec("echo $SPEC_VAR $X", env={"X": "x"})).stdout == "s x\n"
            assert (await sb.exec("pwd", cwd="/")).stdout == "/\n"
            r = await sb.exec("printf '\\377ok'")
            assert r.stdout == "\ufffdok"
            r = await sb.exec("sleep 100", timeout_s=0.2)
            assert (r.return_code, r.error_type) == (125, "timeout")
            with pytest.raises(ValueError, match="cannot run commands as another user"):
                await sb.exec("id", user="nobody")
        assert await sb.status() == SandboxStatus.STOPPED

    run(go())


def test_upload_download(tmp_path):
    async def go():
        src = tmp_path / "src.bin"
        src.write_bytes(bytes(range(256)) * 1000)
        async with AsyncSandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path / "box"))) as sb:
            await sb.start()
            await sb.upload(src, "in.bin")
            assert (await sb.exec("wc -c < in.bin")).stdout.strip() == "256000"
            await sb.download("in.bin", tmp_path / "back.bin")
            assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
            with pytest.raises(FileNotFoundError):
                await sb.download("missing", tmp_path / "x")

    run(go())


def test_cancelled_exec_leaves_no_process(tmp_path):
    async def go():
        async with AsyncSandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path))) as sb:
            await sb.start()
            pidfile = tmp_path / "pid"
            task = asyncio.create_task(sb.exec(f"echo $$ > {pidfile}; exec sleep 100", timeout_s=None))
            pid = await wait_for_file(pidfile)
            assert alive(pid)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 60)  # a hang guard only
            assert not alive(pid) and procs_in(tmp_path) == []
            assert (await sb.exec("echo still usable")).stdout == "still usable\n"

    run(go())


def test_stop_kills_running_commands(tmp_path):
    async def go():
        sb = await AsyncSandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path))).start()
        pidfile = tmp_path / "pid"
        task = asyncio.create_task(sb.exec(f"echo $$ > {pidfile}; exec sleep 100", timeout_s=None))
        pid = await wait_for_file(pidfile)
        await sb.stop()
        r = await asyncio.wait_for(task, 60)
        assert (r.return_code, r.error_type) == (125, "sandbox")
        assert await gone(lambda: not alive(pid))

    run(go())


def test_200_concurrent_execs(tmp_path):
    async def go():
        async with AsyncSandbox({"local": {"concurrency": 16}}, SandboxSpec(workdir=str(tmp_path))) as sb:
            await sb.start()
            results = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(200)))
            assert [r.stdout for r in results] == [f"{i}\n" for i in range(200)]

    run(go())


def test_workspace_removed_on_stop():
    async def go():
        sb = await AsyncSandbox({"local": {}}, SandboxSpec()).start()
        ws = (await sb.exec("pwd")).stdout.strip()
        assert os.path.isdir(ws)
        await sb.stop()
        assert not os.path.exists(ws)

    run(go())


def test_sync_facade_on_local(tmp_path):
    with Sandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path))) as s:
        s.start()
        assert s.exec("echo $((6*7))").stdout == "42\n"
        (tmp_path / "f").write_text("x")
        s.download("f", tmp_path / "g")
        assert (tmp_path / "g").read_text() == "x"
    assert s.status() == SandboxStatus.STOPPED


def test_cancelled_sync_timeout_kills_the_command(tmp_path):
    """A sync call past its wait timeout cancels the coroutine, so the C
    operation is cancelled and its process killed."""
    from sbx.api import _AsyncLoopRunner

    s = Sandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path)))
    s._runner.close()
    s._runner = _AsyncLoopRunner(wait_timeout_s=0.5)
    s._async_sandbox = s._runner.call("__init__", lambda: AsyncSandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path))))
    s.start()
    pidfile = tmp_path / "pid"
    with pytest.raises(TimeoutError, match="timed out waiting for the sync loop after 0.5s"):
        s.exec(f"echo $$ > {pidfile}; exec sleep 100", timeout_s=None)
    s.stop()
    # stop() sent the kill; the process may take a moment to die.
    assert run(gone(lambda: procs_in(tmp_path) == []))
    if pidfile.exists():
        assert not alive(int(pidfile.read_text()))


def test_direct_sync_timeout_kills_the_command(tmp_path):
    """The blocking facade on a C provider: a wait timeout cancels the
    operation and returns only once its process is gone."""
    s = Sandbox({"local": {}}, SandboxSpec(workdir=str(tmp_path))).start()
    s._runner._wait_timeout_s = 0.5
    pidfile = tmp_path / "pid"
    with pytest.raises(TimeoutError, match=r"Sandbox.exec\(\) timed out waiting for the sync loop after 0.5s"):
        s.exec(f"echo $$ > {pidfile}; exec sleep 100", timeout_s=None)
    assert procs_in(tmp_path) == []
    assert s.exec("echo ok").stdout == "ok\n"
    s.stop()


def test_list_and_cleanup_local_boxes_by_run_id(tmp_path):
    """Boxes one provider object made are listed and collected by another (E2B's Sandbox.list)."""
    import sbx

    cfg = {"local": {"workspace_root": str(tmp_path / "ws"), "state_dir": str(tmp_path / "state")}}

    async def go():
        async with AsyncSandbox(cfg, SandboxSpec(metadata={"run_id": "r7"})) as keep:
            await keep.start()
            boxes = sbx.list_sandboxes(cfg, labels={"run_id": "r7"})
            assert [b["id"] for b in boxes] == [keep.sandbox_id]
            assert boxes[0]["status"] == "running" and boxes[0]["labels"] == {"run_id": "r7"}
            assert sbx.list_sandboxes(cfg, labels={"run_id": "other"}) == []
            # What a crashed run left: collected by run id, workspace and all.
            assert sbx.cleanup_sandboxes(cfg, run_id="r7") == [keep.sandbox_id]
            assert sbx.list_sandboxes(cfg) == []
            assert os.listdir(tmp_path / "ws") == []

    run(go())
