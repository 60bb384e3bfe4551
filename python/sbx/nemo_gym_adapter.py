"""sbx's C providers as NeMo Gym sandbox providers.

NeMo Gym finds provider classes through the entry-point group
`nemo_gym.sandbox_providers`; python/pyproject.toml publishes one class per
sbx provider below under the name `sbx_<provider>`, so a Gym config can say

    sandbox:
      sbx_local: {}

Each class speaks Gym's provider protocol (async create, exec, upload_file,
download_file, status, close, aclose; endpoint and serialize_handle/connect
when the C provider has them) with Gym's own value types when nemo_gym is
importable: SandboxHandle, SandboxExecResult, SandboxStatus and
SandboxEndpoint are converted at the boundary so Gym's isinstance checks hold.
"""

from __future__ import annotations

from typing import Any

from .cprovider import CProvider

try:  # Use Gym's value classes when Gym is the caller.
    from nemo_gym.sandbox import providers as _gym  # type: ignore[import-not-found]
except Exception:  # Gym not installed: sbx's own types are the same shape.
    _gym = None


def _to_gym(value: Any) -> Any:
    if _gym is None or value is None:
        return value
    from . import base

    if isinstance(value, base.SandboxExecResult):
        return _gym.SandboxExecResult(value.stdout, value.stderr, value.return_code, value.error_type)
    if isinstance(value, base.SandboxStatus):
        return _gym.SandboxStatus(value.value)
    if isinstance(value, base.SandboxEndpoint):
        return _gym.SandboxEndpoint(value.endpoint, dict(value.headers))
    if isinstance(value, base.SandboxHandle):
        return _gym.SandboxHandle(value.sandbox_id, value.provider_name, value.raw)
    return value


def _from_gym_spec(spec: Any) -> Any:
    from .base import SandboxResources, SandboxSpec

    if isinstance(spec, SandboxSpec):
        return spec
    r = getattr(spec, "resources", None)
    res = SandboxResources(
        cpu=getattr(r, "cpu", None),
        memory_mib=getattr(r, "memory_mib", None),
        disk_gib=getattr(r, "disk_gib", None),
        gpu=getattr(r, "gpu", None),
        gpu_type=getattr(r, "gpu_type", None),
    )
    return SandboxSpec(
        image=spec.image,
        ttl_s=spec.ttl_s,
        ready_timeout_s=spec.ready_timeout_s,
        workdir=spec.workdir,
        env=dict(spec.env or {}),
        files=dict(spec.files or {}),
        metadata=dict(spec.metadata or {}),
        resources=res,
        entrypoint=spec.entrypoint,
        provider_options=dict(spec.provider_options or {}),
        ports=tuple(getattr(spec, "ports", ()) or ()),
    )


class GymProvider(CProvider):
    """A C provider behind NeMo Gym's provider protocol."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        # Re-bind the optional capabilities to the converting versions.
        if hasattr(self, "endpoint"):
            self.endpoint = self._gym_endpoint
        if hasattr(self, "connect"):
            self.connect = self._gym_connect

    async def create(self, spec: Any) -> Any:
        return _to_gym(await super().create(_from_gym_spec(spec)))

    async def exec(self, handle: Any, command: str, **kwargs: Any) -> Any:
        return _to_gym(await super().exec(handle, command, **kwargs))

    async def status(self, handle: Any) -> Any:
        return _to_gym(await super().status(handle))

    async def _gym_endpoint(self, handle: Any, port: int) -> Any:
        return _to_gym(await CProvider._endpoint(self, handle, port))

    async def _gym_connect(self, descriptor: Any) -> Any:
        return _to_gym(await CProvider._connect(self, descriptor))


def _adapter(c_name: str) -> type[GymProvider]:
    title = "".join(p.capitalize() for p in c_name.split("_"))
    return type(
        f"{title}Provider",
        (GymProvider,),
        {"sbx_name": c_name, "display_name": f"sbx_{c_name}", "__module__": __name__},
    )


# One class per provider sbx has or plans; instantiating one whose C
# provider is not built raises the "Unknown sandbox provider" ValueError.
LocalProvider = _adapter("local")
LinuxProvider = _adapter("linux")
DockerProvider = _adapter("docker")
ApptainerProvider = _adapter("apptainer")
EnrootProvider = _adapter("enroot")
RemoteProvider = _adapter("remote")
OpensandboxProvider = _adapter("opensandbox")
DaytonaProvider = _adapter("daytona")
E2bProvider = _adapter("e2b")
EcsFargateProvider = _adapter("ecs_fargate")
OpenshellProvider = _adapter("openshell")
