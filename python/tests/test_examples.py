"""The reference documentation's examples, verbatim except the import line
(`from nemo_gym.sandbox import` -> `from sbx import`) and the provider
config the docs tell the reader to replace, run as scripts."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import need_provider

ROOT = Path(__file__).resolve().parents[2]

FIRST_RUN = '''
import asyncio

from sbx import AsyncSandbox, SandboxResources, SandboxSpec


provider_config = PROVIDER

spec = SandboxSpec(
    image="docker://python:3.13.14-slim",
    ttl_s=1800,
    ready_timeout_s=300,
    workdir="/sandbox",
    files={
        "/sandbox/hello.py": "print('hello from sandbox')\\n",
    },
    resources=SandboxResources(cpu=1, memory_mib=1024, disk_gib=5),
    metadata={"example": "first-run"},
)


async def main() -> None:
    async with AsyncSandbox(provider_config, spec) as sandbox:
        await sandbox.start()
        result = await sandbox.exec("python /sandbox/hello.py", timeout_s=60)
        print(result.stdout or result.stderr)
        raise SystemExit(result.return_code)


asyncio.run(main())
'''

LIFECYCLE = '''
import asyncio
from sbx import AsyncSandbox, SandboxResources, SandboxSpec

provider_config = PROVIDER


spec = SandboxSpec(
    image="ghcr.io/example/eval-image:py312",
    ttl_s=18000,
    ready_timeout_s=1200,
    workdir="/workspace",
    resources=SandboxResources(cpu=2, memory_mib=8192, disk_gib=20),
    metadata={"benchmark": "my-benchmark", "task_id": "task-001"},
)

async def main():
    async with AsyncSandbox(provider_config, spec) as sandbox:
        await sandbox.start()
        result = await sandbox.exec(
            "python -m pytest -q",
            timeout_s=600,
            user="root",
        )
        passed = result.return_code == 0
    print("passed" if passed else "not passed")

    sandbox = AsyncSandbox(provider_config, spec)
    try:
        await sandbox.start()
        result = await sandbox.exec("pytest -q", timeout_s=600)
    finally:
        await sandbox.stop()

    status = await sandbox.status()
    if status.value == "error":
        raise SystemExit(1)
    print(status.value)

asyncio.run(main())
'''

SYNC = '''
from sbx import Sandbox, SandboxSpec

provider_config = PROVIDER

with Sandbox(provider_config, SandboxSpec(image="ghcr.io/example/eval-image:py312")) as sandbox:
    sandbox.start()
    result = sandbox.exec("python --version", timeout_s=30)
    output = "\\n".join(part for part in (result.stdout, result.stderr) if part)
print(output)
'''


def run_script(tmp_path, source, provider, extra_path=None):
    script = tmp_path / "example.py"
    script.write_text(textwrap.dedent(source).replace("PROVIDER", repr(provider)))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python")
    env.setdefault("SBX_LIB", str(ROOT / "build" / "libsbx.so"))
    if extra_path:
        env["PATH"] = f"{extra_path}:{env.get('PATH', '')}"
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture
def python_on_path(tmp_path):
    """The examples call `python`; make sure one is on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    return bindir


def test_first_run_example_on_fake(tmp_path):
    p = run_script(tmp_path, FIRST_RUN, {"fake": {}})
    assert p.returncode == 0, p.stderr
    assert '"command":"python /sandbox/hello.py"' in p.stdout


def test_lifecycle_examples_on_fake(tmp_path):
    p = run_script(tmp_path, LIFECYCLE, {"fake": {}})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["passed", "stopped"]


def test_sync_example_on_fake(tmp_path):
    p = run_script(tmp_path, SYNC, {"fake": {}})
    assert p.returncode == 0, p.stderr
    assert '"command":"python --version"' in p.stdout


def test_first_run_example_on_local(tmp_path, python_on_path):
    need_provider("local")
    existed = os.path.exists("/sandbox")
    try:
        p = run_script(tmp_path, FIRST_RUN, {"local": {}}, extra_path=python_on_path)
        assert p.returncode == 0, p.stderr
        assert p.stdout == "hello from sandbox\n\n"
    finally:
        if not existed:
            shutil.rmtree("/sandbox", ignore_errors=True)


def test_sync_example_on_local(tmp_path, python_on_path):
    need_provider("local")
    p = run_script(tmp_path, SYNC, {"local": {}}, extra_path=python_on_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Python 3.")
