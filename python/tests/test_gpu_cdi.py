"""resources.gpu on the linux provider: GPUs from CDI spec files (docs/providers/linux.md).

No GPU here: the CDI spec this test writes, in its own cdi_spec_dirs, names
stand-ins (/dev/null as /dev/nvidia0, a file as the driver's library).
"""

import json
import os

import pytest

from sbx import Sandbox, SandboxCreateError, SandboxResources, SandboxSpec
from conftest import need_provider, skip_or_fail


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")
    if os.geteuid() != 0:
        skip_or_fail("linux boxes need root")


def _cdi_dir(tmp_path):
    lib = tmp_path / "libstandin.so.1"
    lib.write_text("stand-in\n")
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "mounts": [
                {
                    "hostPath": str(lib),
                    "containerPath": "/opt/gpu/libstandin.so.1",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                }
            ],
        },
        "devices": [
            {
                "name": "0",
                "containerEdits": {
                    "env": ["SBX_GPU=0"],
                    "deviceNodes": [
                        {"path": "/dev/nvidia0", "hostPath": "/dev/null", "type": "c",
                         "major": 1, "minor": 3}
                    ],
                },
            }
        ],
    }
    (cdi / "nvidia.json").write_text(json.dumps(spec))
    return str(cdi)


def test_sandbox_resources_gpu_on_linux(tmp_path):
    cfg = {"linux": {"cdi_spec_dirs": [_cdi_dir(tmp_path)]}}
    with Sandbox(cfg, SandboxSpec(resources=SandboxResources(gpu=1))) as s:
        s.start()
        r = s.exec("stat -c '%F %t:%T' /dev/nvidia0; cat /opt/gpu/libstandin.so.1; "
                   "echo $NVIDIA_VISIBLE_DEVICES $SBX_GPU")
        assert (r.return_code, r.stdout) == (0, "character special file 1:3\nstand-in\nvoid 0\n")


def test_more_gpus_than_the_specs_define(tmp_path):
    cfg = {"linux": {"cdi_spec_dirs": [_cdi_dir(tmp_path)]}}
    with pytest.raises(SandboxCreateError, match=r"resources.gpu is 2 but .* define 1 "
                                                 r"nvidia.com/gpu device"):
        with Sandbox(cfg, SandboxSpec(resources=SandboxResources(gpu=2))) as s:
            s.start()
