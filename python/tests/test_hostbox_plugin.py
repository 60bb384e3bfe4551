"""The box-provider kit's example plugin (examples/provider/hostbox.c) from
Python: loaded from SBX_PLUGIN_PATH into the binding's libsbx, it runs a box
and lists it. In a fresh process, since plugins are discovered once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, sys
import sbx
async def main():
    spec = sbx.SandboxSpec(metadata={"suite": "py"})
    async with sbx.AsyncSandbox({"hostbox": {}}, spec) as box:
        await box.start()
        r = await box.exec("echo from-hostbox; exit 3")
        print(r.stdout.strip(), r.return_code)
        listed = sbx.list_sandboxes({"hostbox": {}})
        print([b["labels"] for b in listed])
    print(sbx.list_sandboxes({"hostbox": {}}))
asyncio.run(main())
"""


def test_hostbox_plugin_runs_and_lists(tmp_path: Path) -> None:
    lib = os.environ.get("SBX_LIB") or str(ROOT / "build" / "libsbx.so")
    plugin_dir = Path(lib).parent / "examples" / "provider"
    if not (plugin_dir / "hostbox.so").exists():
        pytest.fail(f"the hostbox plugin is not built at {plugin_dir} (make tests)")
    env = dict(os.environ, SBX_LIB=lib, SBX_PLUGIN_PATH=str(plugin_dir),
               SBX_STATE_DIR=str(tmp_path / "state"),
               PYTHONPATH=str(ROOT / "python"))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "from-hostbox 3"
    assert lines[1] == "[{'suite': 'py'}]"
    assert lines[2] == "[]"
