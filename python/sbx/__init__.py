"""sbx: the nemo_gym.sandbox API over libsbx.

Code written for NeMo Gym's sandbox API runs after changing its import line:

    from nemo_gym.sandbox import AsyncSandbox, SandboxSpec   # before
    from sbx import AsyncSandbox, SandboxSpec                # after

Attribution helpers live in the module `sbx.attribution`, as in the reference.
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
    SupportsSandboxEndpoint,
    SupportsSandboxPty,
    SupportsSandboxPtyAttach,
)
from .config import resolve_provider_config, resolve_provider_metadata
from .cprovider import CProvider
from .registry import create_provider, get_provider_class, list_providers, register_provider
from .utils import rewrite_image

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
    "SupportsSandboxEndpoint",
    "SupportsSandboxPty",
    "SupportsSandboxPtyAttach",
    "create_provider",
    "get_provider_class",
    "list_providers",
    "register_provider",
    "resolve_provider_config",
    "resolve_provider_metadata",
    "rewrite_image",
]
