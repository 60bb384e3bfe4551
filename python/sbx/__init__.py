"""sbx: the nemo_gym.sandbox API over libsbx.

Code written for NeMo Gym's sandbox API runs after changing its import line:

    from nemo_gym.sandbox import AsyncSandbox, SandboxSpec   # before
    from sbx import AsyncSandbox, SandboxSpec                # after

Attribution helpers live in the module `sbx.attribution`, as in the reference;
the reference's other module paths exist too (`sbx.api`, `sbx.config`,
`sbx.utils`, `sbx.providers`, `sbx.providers.base`, `sbx.providers.registry`,
`sbx.providers.utils`).
"""

from ._lib import SandboxDescriptorError, version
from .api import AsyncSandbox, Sandbox, SandboxPty
from .boxes import (
    acleanup_sandboxes,
    alist_sandboxes,
    astop_sandbox,
    cleanup_sandboxes,
    list_sandboxes,
    stop_sandbox,
)
from .base import (
    ConnectableProvider,
    ExecResult,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
    SandboxError,
    SandboxExecResult,
    SandboxHandle,
    SandboxProvider,
    SandboxPtyError,
    SandboxPtySession,
    SandboxPtySpec,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxBackgroundServices,
    SupportsSandboxEndpoint,
    SupportsSandboxNetwork,
    SupportsSandboxPauseResume,
    SupportsSandboxPortForwarding,
    SupportsSandboxPty,
    SupportsSandboxPtyAttach,
    SupportsSandboxRuntimeRequirements,
    SupportsSandboxSharedStorage,
    SupportsSandboxSnapshot,
)
from .config import resolve_provider_config, resolve_provider_metadata
from .cprovider import CProvider
from .files import SandboxFile  # [svc-logs]
from .logs import LogEntry  # [svc-logs]
from .registry import create_provider, get_provider_class, list_providers, register_provider
from .utils import rewrite_image
from .warm_pool import WarmPool
from . import providers  # noqa: E402,F401  (the reference's module paths)
from . import transfer  # noqa: E402,F401  (the newer reference's transfer module)

__version__ = version()

__all__ = [
    "acleanup_sandboxes",
    "alist_sandboxes",
    "astop_sandbox",
    "cleanup_sandboxes",
    "list_sandboxes",
    "stop_sandbox",
    "AsyncSandbox",
    "CProvider",
    "ConnectableProvider",
    "ExecResult",
    "Sandbox",
    "WarmPool",
    "SandboxCreateError",
    "SandboxCreateVerificationError",
    "SandboxDescriptorError",
    "SandboxEndpoint",
    "SandboxError",
    "SandboxExecResult",
    "SandboxHandle",
    "SandboxProvider",
    "SandboxPty",
    "SandboxPtyError",
    "SandboxPtySession",
    "SandboxPtySpec",
    "SandboxResources",
    "SandboxSpec",
    "SandboxStatus",
    "SupportsSandboxBackgroundServices",
    "SupportsSandboxEndpoint",
    "SupportsSandboxNetwork",
    "SupportsSandboxPauseResume",
    "SupportsSandboxPortForwarding",
    "SupportsSandboxPty",
    "SupportsSandboxPtyAttach",
    "SupportsSandboxRuntimeRequirements",
    "SupportsSandboxSharedStorage",
    "SupportsSandboxSnapshot",
    "create_provider",
    "get_provider_class",
    "list_providers",
    "register_provider",
    "resolve_provider_config",
    "resolve_provider_metadata",
    "rewrite_image",
]
