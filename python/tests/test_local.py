"""The binding over real host processes: libsbx's `local` provider."""

import asyncio
import errno
import os
import re
import subprocess
import sys
from pathlib import Path

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


# --- the reference's LocalProvider, call by call (issue 11, items 12 and 14) ---


def test_reference_user_raises_value_error(tmp_path):
    """Reference: `if user is not None: raise ValueError("The local sandbox
    provider cannot run commands as another user")`, before anything runs."""

    async def go():
        async with AsyncSandbox({"local": {"workspace_root": str(tmp_path)}}, SandboxSpec()) as sb:
            await sb.start()
            for user in ("nobody", "root", 0, 1000, ""):
                with pytest.raises(ValueError, match="^The local sandbox provider cannot run commands as another user"):
                    await sb.exec(f"touch ran-{user}", user=user)
            assert (await sb.exec("ls")).stdout == ""  # nothing ran
            assert (await sb.exec("true", user=None)).return_code == 0

    run(go())


def test_reference_missing_cwd_raises_file_not_found(tmp_path):
    """Reference: the subprocess's chdir into `workspace / cwd` (or an absolute
    cwd) fails, raising FileNotFoundError with errno ENOENT; nothing runs and
    nothing is created."""

    async def go():
        async with AsyncSandbox({"local": {"workspace_root": str(tmp_path / "root")}}, SandboxSpec()) as sb:
            await sb.start()
            ws = (await sb.exec("pwd")).stdout.strip()
            with pytest.raises(FileNotFoundError) as ei:
                await sb.exec("touch ran", cwd="missing/deeper")
            assert ei.value.errno == errno.ENOENT
            assert f"'{ws}/missing/deeper'" in str(ei.value)
            with pytest.raises(FileNotFoundError) as ei:
                await sb.exec("touch ran", cwd=str(tmp_path / "nope"))
            assert ei.value.errno == errno.ENOENT
            assert not os.path.exists(f"{ws}/missing") and not (tmp_path / "nope").exists()
            assert (await sb.exec("ls")).stdout == ""
            # An existing relative cwd resolves against the workspace, as in the reference.
            await sb.exec("mkdir sub")
            assert (await sb.exec("pwd", cwd="sub")).stdout == f"{ws}/sub\n"

    run(go())


def test_reference_default_workspace_is_the_boxs_own(tmp_path):
    """Reference: with no workdir the workspace is `workspace_root / sandbox_id`
    (owned), startup files land in it, and close removes it."""

    async def go():
        cfg = {"local": {"workspace_root": str(tmp_path)}}
        spec = SandboxSpec(files={"hello.py": "print('hi')\n"})
        a = await AsyncSandbox(cfg, spec).start()
        b = await AsyncSandbox(cfg, spec).start()
        wa = (await a.exec("pwd")).stdout.strip()
        wb = (await b.exec("pwd")).stdout.strip()
        assert wa == str(tmp_path / a.sandbox_id) and wb == str(tmp_path / b.sandbox_id) and wa != wb
        assert (await a.exec(f"{sys.executable} hello.py")).stdout == "hi\n"
        await a.exec("mkdir -p d/e && echo x > d/e/f")
        await a.stop()
        assert not os.path.exists(wa) and os.path.isdir(wb)
        await b.stop()
        assert os.listdir(tmp_path) == []

    run(go())


def test_reference_absolute_workdir_is_the_hosts(tmp_path):
    """Reference: a caller's workdir is the host path itself, created with its
    parents when missing, and "theirs to keep": stop leaves it."""

    async def go():
        wd = tmp_path / "new" / "deep"
        async with AsyncSandbox({"local": {}}, SandboxSpec(workdir=str(wd), files={"a.txt": "x"})) as sb:
            await sb.start()
            assert (await sb.exec("pwd")).stdout == f"{wd}\n"
        assert (wd / "a.txt").read_text() == "x"

    run(go())


def test_docs_python_example_leaves_nothing(tmp_path):
    """docs/python.md's example, as written, prints `0 hi` and leaves nothing:
    no workspace under TMPDIR, no record, no file in the cwd or /tmp/work."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    example = re.findall(r"```python\n(.*?)```", doc, re.S)[1]
    assert '{"local": {}}' in example
    (tmp_path / "tmp").mkdir()
    (tmp_path / "cwd").mkdir()
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), SBX_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=str(root / "python"))
    env.setdefault("SBX_LIB", str(root / "build" / "libsbx.so"))

    def snapshot(d):  # what the example used to leave: /tmp/work and its files
        try:
            return {e.name: e.stat(follow_symlinks=False).st_mtime_ns for e in os.scandir(d)}
        except FileNotFoundError:
            return None

    work_before = snapshot("/tmp/work")
    p = subprocess.run([sys.executable, "-c", example], cwd=tmp_path / "cwd", env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "0 hi\n\n"
    assert os.listdir(tmp_path / "tmp") == [] and os.listdir(tmp_path / "cwd") == []
    assert os.listdir(tmp_path / "state" / "local") == []
    assert snapshot("/tmp/work") == work_before
