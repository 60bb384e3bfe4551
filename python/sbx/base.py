"""Value types, exceptions and provider protocols of the sandbox API.

These mirror nemo_gym.sandbox's provider-facing module (reference-api.md A, B):
same field order, defaults, validation and messages, so code written for the
reference sees the same objects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable
from urllib.parse import urlsplit


class SandboxStatus(str, Enum):
    """Provider-neutral sandbox lifecycle status: the newer reference's six
    values, PAUSED among them (a box paused, or frozen by a commit, or whose
    agent is stopped: it answers nothing until it continues)."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    ERROR = "error"
    UNKNOWN = "unknown"


_ENDPOINT_URL_ERROR = "Sandbox endpoint must be a non-empty absolute URL"


@dataclass(frozen=True)
class SandboxEndpoint:
    """A caller-reachable URL for a service port inside a sandbox, plus any
    headers the route needs."""

    endpoint: str
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.endpoint, str) or not self.endpoint.strip():
            raise ValueError(_ENDPOINT_URL_ERROR)
        url = self.endpoint.strip()
        parts = urlsplit(url)
        if not parts.scheme or not parts.netloc:
            raise ValueError(_ENDPOINT_URL_ERROR)
        if not isinstance(self.headers, Mapping):
            raise TypeError("Sandbox endpoint headers must be a mapping")
        object.__setattr__(self, "endpoint", url)
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in self.headers.items()})


_RESOURCE_KEYS = ("cpu", "disk_gib", "gpu", "gpu_type", "memory_mib")


@dataclass(frozen=True)
class SandboxResources:
    """Provider-neutral resource request. The constructor does not convert;
    from_mapping() does."""

    cpu: float | None = None
    memory_mib: int | None = None
    disk_gib: int | None = None
    gpu: int | None = None
    gpu_type: str | None = None

    @classmethod
    def from_mapping(cls, resources: Mapping[str, Any] | None) -> SandboxResources:
        if resources is None:
            return cls()
        unknown = set(resources) - set(_RESOURCE_KEYS)
        if unknown:
            raise ValueError(
                f"Unknown sandbox resource keys: {', '.join(sorted(unknown))}. "
                f"Expected keys: {', '.join(_RESOURCE_KEYS)}"
            )

        def conv(key: str, kind: type) -> Any:
            value = resources.get(key)
            return None if value is None else kind(value)

        return cls(
            cpu=conv("cpu", float),
            memory_mib=conv("memory_mib", int),
            disk_gib=conv("disk_gib", int),
            gpu=conv("gpu", int),
            gpu_type=conv("gpu_type", str),
        )


def _normalize_ports(ports: Any) -> tuple[int, ...]:
    if not isinstance(ports, (list, tuple)):
        raise TypeError("Sandbox ports must be a list or tuple of TCP port numbers")
    seen: list[int] = []
    for raw in ports:
        # bool is an int subclass; the reference refuses it before parsing.
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            raise ValueError(f"Invalid sandbox TCP port: {raw!r}")
        try:
            port = int(raw)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Invalid sandbox TCP port: {raw!r}") from exc
        if port < 1 or port > 65535:
            raise ValueError(f"Sandbox TCP port must be between 1 and 65535, got {port}")
        if port in seen:
            raise ValueError(f"Duplicate sandbox TCP port: {port}")
        seen.append(port)
    return tuple(seen)


@dataclass(frozen=True)
class SandboxSpec:
    """Sandbox creation request. `ports` stays last: old callers pass the
    first ten fields by position."""

    image: str | None = None
    ttl_s: int | float | None = None
    ready_timeout_s: int | float | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    resources: SandboxResources | Mapping[str, Any] | None = field(default_factory=SandboxResources)
    entrypoint: list[str] | None = None
    provider_options: dict[str, Any] = field(default_factory=dict)
    ports: tuple[int, ...] | list[int] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.resources, SandboxResources):
            object.__setattr__(self, "resources", SandboxResources.from_mapping(self.resources))
        object.__setattr__(self, "ports", _normalize_ports(self.ports))


@dataclass
class SandboxHandle:
    """Provider-neutral handle to a created sandbox; `raw` is the provider's."""

    sandbox_id: str
    provider_name: str
    raw: Any


@dataclass(frozen=True)
class SandboxExecResult:
    """Result of one command. A non-zero exit is in return_code; runtime
    failures without an exit status set error_type ("timeout", "sandbox")."""

    stdout: str | None
    stderr: str | None
    return_code: int
    error_type: str | None = None
    # True when stdout or stderr hit the provider's output cap (16 MiB per
    # stream by default) and the rest was dropped. Not a dataclass field: the
    # reference's four fields, their order and equality stay as they are; a
    # truncated result carries it as an instance attribute.
    truncated: ClassVar[bool] = False


ExecResult = SandboxExecResult


@dataclass(frozen=True)
class SandboxPtySpec:
    """Interactive PTY session request (pty=False selects pipe mode)."""

    command: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    rows: int = 24
    cols: int = 80
    user: str | int | None = None
    pty: bool = True


class SandboxPtyError(RuntimeError):
    """Raised when a PTY session fails outside normal process exit."""


class SandboxCreateError(RuntimeError):
    """Raised when a provider cannot create a sandbox."""


class SandboxCreateVerificationError(SandboxCreateError):
    """Raised when a newly created sandbox fails its readiness checks."""


class SandboxError(RuntimeError):
    """An sbx failure with no closer Python exception (I/O, provider, protocol,
    authentication). `sbx_code` holds the sbx code name, e.g. "EIO"."""

    sbx_code: str = "EPROVIDER"


# --- provider protocols ------------------------------------------------------


class SandboxProvider(Protocol):
    """What AsyncSandbox needs from a provider object."""

    name: str

    async def create(self, spec: SandboxSpec) -> SandboxHandle: ...

    async def exec(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = None,
        user: str | int | None = None,
    ) -> SandboxExecResult: ...

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None: ...

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None: ...

    async def status(self, handle: SandboxHandle) -> SandboxStatus: ...

    async def close(self, handle: SandboxHandle) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class SupportsSandboxEndpoint(Protocol):
    async def endpoint(self, handle: SandboxHandle, port: int) -> SandboxEndpoint: ...


@runtime_checkable
class ConnectableProvider(Protocol):
    async def serialize_handle(self, handle: SandboxHandle, *, scope: str | None = None) -> dict[str, Any]: ...

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle: ...


@runtime_checkable
class SandboxPtySession(Protocol):
    """One live terminal session (see reference-api.md G). An async context
    manager (exit closes it); `mode` is "pty" or "pipe" once connected, None
    before. isinstance() checks every member, as the reference's does."""

    session_id: str
    mode: str | None

    @property
    def closed(self) -> bool: ...

    async def read(self, *, timeout_s: float | None = None) -> bytes: ...

    async def read_stderr(self, *, timeout_s: float | None = None) -> bytes: ...

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def write(self, data: bytes) -> None: ...

    async def resize(self, rows: int, cols: int) -> None: ...

    async def send_signal(self, signal: str) -> None: ...

    async def wait_exit(self, *, timeout_s: float | None = None) -> int: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> SandboxPtySession: ...

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...


@runtime_checkable
class SupportsSandboxPty(Protocol):
    async def create_pty(self, handle: SandboxHandle, spec: SandboxPtySpec) -> SandboxPtySession: ...


@runtime_checkable
class SupportsSandboxPtyAttach(Protocol):
    async def attach_pty(
        self, handle: SandboxHandle, session_id: str, *, takeover: bool = True, since: int | None = None
    ) -> SandboxPtySession: ...


# --- the newer reference's optional capabilities ------------------------------
# Protocols only (reference-newer.md 9): a Python provider that implements one
# is recognised by isinstance(); AsyncSandbox has no methods that use them yet.


@runtime_checkable
class SupportsSandboxBackgroundServices(Protocol):
    """Optional execution override for services needed by a later command."""

    async def exec_with_background_services(
        self, handle: SandboxHandle, command: str, *, cwd: str | None = None, timeout_s: int | float | None = None
    ) -> SandboxExecResult: ...


@runtime_checkable
class SupportsSandboxNetwork(Protocol):
    """Optional direct networking between sandboxes, preserving service ports."""

    def validate_networking(self) -> None: ...

    async def network_address(self, handle: SandboxHandle) -> str: ...

    async def set_hosts(self, handle: SandboxHandle, hosts: Mapping[str, str]) -> None: ...


@runtime_checkable
class SupportsSandboxRuntimeRequirements(Protocol):
    """Optional validation and setup of task-declared runtime requirements."""

    def validate_runtime_requirements(
        self, *, cap_add: tuple[str, ...], shm_size: int | None
    ) -> dict[str, str] | None: ...

    async def configure_runtime(
        self, handle: SandboxHandle, *, cap_add: tuple[str, ...], shm_size: int | None
    ) -> None: ...


@runtime_checkable
class SupportsSandboxPortForwarding(Protocol):
    """Optional loopback TCP forwarding, running until cancellation."""

    def validate_port_forwarding(self) -> None: ...

    async def forward_ports(
        self, handle: SandboxHandle, target_address: str, ports: tuple[int, ...], *, ready_file: str
    ) -> None: ...


@runtime_checkable
class SupportsSandboxSharedStorage(Protocol):
    """Optional shared filesystem provisioned by the provider's config."""

    def shared_volume_options(self, source: str | None, target: str, *, read_only: bool = False) -> dict[str, Any]: ...

    def shared_volume_metadata(self) -> dict[str, str]: ...


@runtime_checkable
class SupportsSandboxPauseResume(Protocol):
    """Optional capability to pause and resume a sandbox."""

    async def pause(self, handle: SandboxHandle) -> None: ...

    async def resume(self, handle: SandboxHandle) -> None: ...


@runtime_checkable
class SupportsSandboxSnapshot(Protocol):
    """Optional capability to snapshot a running sandbox into an independent copy."""

    async def snapshot(self, handle: SandboxHandle, *, name: str | None = None) -> str: ...

    async def delete_snapshot(self, snapshot_id: str) -> None: ...


def provider_display_name(provider: Any) -> str:
    """The name error messages use: provider.name, else the type's name."""
    return getattr(provider, "name", type(provider).__name__)
