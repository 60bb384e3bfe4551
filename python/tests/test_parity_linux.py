"""Issue 11, items 8-12 (linux): code written for the reference's container
providers (docker) gets the reference's results on the `linux` provider.
Each test runs the reference's call and checks the reference's result."""

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from sbx import AsyncSandbox, SandboxSpec, SandboxStatus
from conftest import need_provider, run, skip_or_fail


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


async def _wait_not_running(sb):
    for _ in range(60000):  # a hang guard only
        if await sb.status() != SandboxStatus.RUNNING:
            return
        await asyncio.sleep(0.01)
    pytest.fail("the box kept running")


def test_exec_after_ttl_is_rc_125_sandbox():
    """Item 8: `await sb.exec("true")` after the box's TTL passed returns
    return_code=125, error_type="sandbox" (docker: `docker exec` on a container
    no longer there), not an exception."""

    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec(ttl_s=1)) as sb:
            await sb.start()
            assert (await sb.exec("true")).return_code == 0
            await _wait_not_running(sb)
            for _ in range(2):
                r = await sb.exec("true")
                assert (r.return_code, r.error_type) == (125, "sandbox")
                assert r.stdout == ""
                assert "agent" in r.stderr

    run(go())


def test_exec_after_init_killed_is_rc_125_sandbox():
    """Item 8: the same when the box's init was killed under it."""

    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec()) as sb:
            await sb.start()
            d = await sb.serialize()
            record = Path(d["state_dir"]) / "boxes" / d["sandbox_id"] / "record.json"
            init = json.loads(record.read_text())["init_pid"]
            assert init > 1
            os.kill(init, signal.SIGKILL)
            await _wait_not_running(sb)
            r = await sb.exec("true")
            assert (r.return_code, r.error_type) == (125, "sandbox")
            assert "agent" in r.stderr

    run(go())


def test_download_missing_is_runtime_error(tmp_path):
    """Item 9: `await sb.download("/missing", p)` raises RuntimeError (docker cp
    failed), with a message naming the path; it is a FileNotFoundError too."""

    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec()) as sb:
            await sb.start()
            with pytest.raises(RuntimeError, match="/missing") as info:
                await sb.download("/missing", tmp_path / "p")
            assert isinstance(info.value, FileNotFoundError)
            assert not (tmp_path / "p").exists()

    run(go())


def test_signal_death_is_128_plus_n():
    """Item 10: `await sb.exec("kill -9 $$")` returns 137 (128 + 9), as docker."""

    async def go():
        async with AsyncSandbox({"linux": {}}, SandboxSpec()) as sb:
            await sb.start()
            r = await sb.exec("kill -9 $$")
            assert (r.return_code, r.error_type) == (137, None)
            assert (await sb.exec("kill -TERM $$")).return_code == 143

    run(go())


def test_bash_when_the_box_has_it():
    """Item 11: `exec("source env.sh")` works (docker picks bash when the image
    has it); `shell: sh` in the provider config picks sh."""
    if not Path("/bin/bash").exists():
        skip_or_fail("the host has no bash for the default image")

    async def go():
        spec = SandboxSpec(workdir="/work", files={"/work/env.sh": "export FROM_ENV=sourced\n"})
        async with AsyncSandbox({"linux": {}}, spec) as sb:
            await sb.start()
            r = await sb.exec("source env.sh && echo $FROM_ENV")
            assert (r.return_code, r.stdout) == (0, "sourced\n")
            assert (await sb.exec('echo "$0"')).stdout == "bash\n"
        async with AsyncSandbox({"linux": {"shell": "sh"}}, spec) as sb:
            await sb.start()
            assert (await sb.exec('echo "$0"')).stdout == "sh\n"
            assert (await sb.exec("source env.sh")).return_code == 127

    run(go())


def test_empty_shell_is_refused():
    """Item 11: `shell: ""` is refused, as the reference's exec.exec_shell."""

    async def go():
        with pytest.raises(ValueError, match="shell must be null"):
            async with AsyncSandbox({"linux": {"shell": ""}}, SandboxSpec()) as sb:
                await sb.start()

    run(go())


def test_upload_onto_a_directory(tmp_path):
    """Item 12 (linux): `upload(f, "/tmp")` onto an existing directory puts the
    file into it under its own name, as `docker cp` does."""

    async def go():
        f = tmp_path / "notes.txt"
        f.write_text("into /tmp\n")
        async with AsyncSandbox({"linux": {}}, SandboxSpec()) as sb:
            await sb.start()
            await sb.upload(f, "/tmp")
            r = await sb.exec("cat /tmp/notes.txt; test -d /tmp && echo dir")
            assert (r.return_code, r.stdout) == (0, "into /tmp\ndir\n")

    run(go())
