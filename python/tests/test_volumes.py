"""[volumes] The linux provider's shared storage and runtime requirements through
the binding (SupportsSandboxSharedStorage, SupportsSandboxRuntimeRequirements) and
sbx.volumes: each call is the C library's, which owns the rules."""

import pytest

from sbx import (AsyncSandbox, SandboxError, SandboxSpec, SupportsSandboxRuntimeRequirements,
                 SupportsSandboxSharedStorage, create_provider, volumes)
from conftest import need_provider, run


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


def test_shared_volume_options_and_metadata(tmp_path):
    p = create_provider({"linux": {"state_dir": str(tmp_path / "state"), "shared_root": str(tmp_path / "shared")}})
    opts = p.shared_volume_options("runs/a", "/data", read_only=True)
    assert opts == {"volumes": [{"type": "shared", "source": "runs/a", "target": "/data", "read_only": True}]}
    assert p.shared_volume_options(None, "/all")["volumes"][0]["source"] == ""
    with pytest.raises(ValueError, match=r"\.\."):
        p.shared_volume_options("../up", "/x")
    with pytest.raises(ValueError, match="absolute"):
        p.shared_volume_options("a", "relative")
    assert isinstance(p, SupportsSandboxSharedStorage) and isinstance(p, SupportsSandboxRuntimeRequirements)
    # Only where the C provider has them: `local` boxes see the host's files already.
    local = create_provider({"local": {}})
    assert not isinstance(local, SupportsSandboxSharedStorage)
    assert not hasattr(local, "validate_runtime_requirements")
    md = p.shared_volume_metadata()
    assert md["sbx.shared_root"] == str(tmp_path / "shared") and md["sbx.provider"] == "linux"
    assert all(isinstance(v, str) for v in md.values())


def test_two_boxes_share_through_the_shared_root(tmp_path):
    p = create_provider({"linux": {"state_dir": str(tmp_path / "state"), "shared_root": str(tmp_path / "shared")}})

    async def go():
        opts = p.shared_volume_options("ep1", "/shared")
        async with AsyncSandbox(p, SandboxSpec(provider_options=opts)) as a, \
                AsyncSandbox(p, SandboxSpec(provider_options=opts)) as b:
            await a.start()
            await b.start()
            assert (await a.exec("echo hello > /shared/f")).return_code == 0
            assert (await b.exec("cat /shared/f")).stdout == "hello\n"
    run(go())
    assert (tmp_path / "shared" / "ep1" / "f").read_text() == "hello\n"


def test_runtime_requirements(tmp_path):
    p = create_provider({"linux": {"state_dir": str(tmp_path / "state")}})
    assert p.validate_runtime_requirements(cap_add=(), shm_size=None) is None
    md = p.validate_runtime_requirements(cap_add=("NET_ADMIN",), shm_size=32 << 20)
    assert md == {"sbx.cap_add": "NET_ADMIN", "sbx.shm_size": str(32 << 20)}
    with pytest.raises(PermissionError, match="SYS_ADMIN is refused"):
        p.validate_runtime_requirements(cap_add=("SYS_ADMIN",), shm_size=None)
    with pytest.raises(ValueError, match="shm_size"):
        p.validate_runtime_requirements(cap_add=(), shm_size=1)

    async def go():
        async with AsyncSandbox(p, SandboxSpec(metadata=md)) as sb:
            await sb.start()
            eff = int((await sb.exec("sed -n 's/^CapEff:\\t//p' /proc/self/status")).stdout, 16)
            assert eff & (1 << 12)
            assert (await sb.exec("df -k /dev/shm | awk 'NR==2 {print $2}'")).stdout == "32768\n"
    run(go())


def test_named_volumes(tmp_path):
    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    made = volumes.create_volume(cfg, "cache")
    assert made["name"] == "cache" and made["mountpoint"].endswith("/cache/data")
    assert [v["name"] for v in volumes.list_volumes(cfg)] == ["cache"]
    assert volumes.inspect_volume(cfg, "cache")["used_by"] == []
    volumes.remove_volume(cfg, "cache")
    with pytest.raises(SandboxError):
        volumes.inspect_volume(cfg, "cache")
