"""reference-api.md A (public surface, value types) and B (spec validation)."""

import dataclasses

import pytest

import sbx
from sbx import (
    ExecResult,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxPtyError,
    SandboxPtySpec,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
)


def test_exports():
    for name in [
        "AsyncSandbox", "Sandbox", "SandboxPty", "SandboxSpec", "SandboxResources", "SandboxExecResult",
        "ExecResult", "SandboxStatus", "SandboxEndpoint", "SandboxHandle", "SandboxPtySpec",
        "SandboxCreateError", "SandboxCreateVerificationError", "SandboxPtyError", "create_provider",
        "get_provider_class", "list_providers", "register_provider", "resolve_provider_config",
        "resolve_provider_metadata", "rewrite_image", "SupportsSandboxEndpoint", "SupportsSandboxPty",
        "SupportsSandboxPtyAttach", "ConnectableProvider",
    ]:
        assert hasattr(sbx, name), name
    import sbx.attribution as attr

    assert callable(attr.resolve_attribution) and callable(attr.resolve_run_id)
    assert callable(attr.log_attribution_once)


def test_status_is_a_string_enum():
    assert [s.value for s in SandboxStatus] == ["starting", "running", "paused", "stopped", "error", "unknown"]
    assert SandboxStatus.RUNNING == "running"
    assert isinstance(SandboxStatus.STOPPED, str)
    assert SandboxStatus("error") is SandboxStatus.ERROR


def test_exec_result_frozen_value_equality_and_alias():
    r = SandboxExecResult(stdout="ok", stderr=None, return_code=0)
    assert ExecResult is SandboxExecResult
    assert r == ExecResult(stdout="ok", stderr=None, return_code=0)
    assert r.error_type is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.stdout = "x"
    assert [f.name for f in dataclasses.fields(r)] == ["stdout", "stderr", "return_code", "error_type"]


def test_handle_mutable_with_value_equality():
    a = SandboxHandle("id", "p", {"k": 1})
    b = SandboxHandle("id", "p", {"k": 1})
    assert a == b
    a.raw = {"k": 2}
    assert a != b
    assert [f.name for f in dataclasses.fields(a)] == ["sandbox_id", "provider_name", "raw"]


def test_exception_hierarchy():
    assert issubclass(SandboxPtyError, RuntimeError)
    assert issubclass(SandboxCreateError, RuntimeError)
    assert issubclass(SandboxCreateVerificationError, SandboxCreateError)
    assert issubclass(sbx.SandboxError, RuntimeError)


def test_pty_spec_defaults_and_frozen():
    s = SandboxPtySpec()
    assert (s.command, s.cwd, s.env, s.rows, s.cols, s.user, s.pty) == (None, None, None, 24, 80, None, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rows = 3


def test_spec_field_order_and_defaults():
    names = [f.name for f in dataclasses.fields(SandboxSpec)]
    assert names == ["image", "ttl_s", "ready_timeout_s", "workdir", "env", "files", "metadata", "resources",
                     "entrypoint", "provider_options", "ports"]
    s = SandboxSpec()
    assert s.image is None and s.ttl_s is None and s.ready_timeout_s is None and s.workdir is None
    assert s.env == {} and s.files == {} and s.metadata == {} and s.provider_options == {}
    assert s.resources == SandboxResources()
    assert s.entrypoint is None and s.ports == ()
    # Defaults are fresh objects per spec.
    assert SandboxSpec().env is not SandboxSpec().env
    # The first ten fields by position.
    p = SandboxSpec("img", 10, 20, "/w", {"A": "1"}, {"/f": "x"}, {"m": "v"}, {"cpu": 1}, ["sh"], {"o": 1})
    assert p.workdir == "/w" and p.resources == SandboxResources(cpu=1.0) and p.ports == ()


def test_spec_frozen_and_equal():
    a = SandboxSpec(image="x", ports=[8000])
    assert a == SandboxSpec(image="x", ports=(8000,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.image = "y"
    h1 = SandboxHandle("i", "p", a)
    assert h1 == SandboxHandle("i", "p", SandboxSpec(image="x", ports=["8000"]))


def test_resources_conversion():
    assert SandboxSpec(resources={"cpu": "0.5", "memory_mib": "4096", "disk_gib": "8"}).resources == SandboxResources(
        cpu=0.5, memory_mib=4096, disk_gib=8
    )
    assert SandboxResources.from_mapping({"cpu": 1}) == SandboxResources(cpu=1.0)
    assert SandboxResources.from_mapping({"gpu": "2", "gpu_type": 100}) == SandboxResources(gpu=2, gpu_type="100")
    assert SandboxResources.from_mapping({"cpu": None}) == SandboxResources()
    assert SandboxSpec(resources=None).resources == SandboxResources()
    keep = SandboxResources(cpu=1)
    assert SandboxSpec(resources=keep).resources is keep
    assert SandboxResources(cpu=1).cpu == 1 and isinstance(SandboxResources(cpu=1).cpu, int)


def test_resources_errors():
    with pytest.raises(ValueError, match="Unknown sandbox resource keys") as e:
        SandboxResources.from_mapping({"cpus": 1, "mem": 2})
    assert str(e.value) == (
        "Unknown sandbox resource keys: cpus, mem. Expected keys: cpu, disk_gib, gpu, gpu_type, memory_mib"
    )
    with pytest.raises(ValueError):
        SandboxResources.from_mapping({"memory_mib": "4Gi"})


def test_ports_normalised():
    assert SandboxSpec(ports=[8000, "9222"]).ports == (8000, 9222)
    assert SandboxSpec(ports=[" 80 ", "+81"]).ports == (80, 81)


@pytest.mark.parametrize(
    "ports, exc, message",
    [
        ("8000", TypeError, "Sandbox ports must be a list or tuple of TCP port numbers"),
        ({8000}, TypeError, "Sandbox ports must be a list or tuple of TCP port numbers"),
        ([True], ValueError, "Invalid sandbox TCP port: True"),
        ([8000.5], ValueError, "Invalid sandbox TCP port: 8000.5"),
        (["http"], ValueError, "Invalid sandbox TCP port: 'http'"),
        ([0], ValueError, "Sandbox TCP port must be between 1 and 65535, got 0"),
        (["70000"], ValueError, "Sandbox TCP port must be between 1 and 65535, got 70000"),
        ([8000, "8000"], ValueError, "Duplicate sandbox TCP port: 8000"),
    ],
)
def test_port_errors(ports, exc, message):
    with pytest.raises(exc) as e:
        SandboxSpec(ports=ports)
    assert str(e.value) == message


def test_endpoint_values():
    e = SandboxEndpoint("  http://h:1/x  ", {"a": 1})
    assert e.endpoint == "http://h:1/x" and e.headers == {"a": "1"}
    assert e == SandboxEndpoint("http://h:1/x", {"a": "1"})
    assert SandboxEndpoint("http://h").headers == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.endpoint = "x"
    for bad in ["/relative/path", "", "   ", "host:80"[:0] + "//nohost"]:
        with pytest.raises(ValueError, match="absolute URL"):
            SandboxEndpoint(bad)
    with pytest.raises(TypeError, match="Sandbox endpoint headers must be a mapping"):
        SandboxEndpoint("http://h", [("a", "b")])
