"""`nemo_gym.sandbox.providers` under sbx: the provider-facing value types,
protocols and registry, under the reference's module names.

`sbx.providers.base` is `sbx.base` and `sbx.providers.registry` is
`sbx.registry` (the same module objects, so monkeypatching either name
patches both); `sbx.providers.utils` holds the helpers the reference's
providers share. A provider written for NeMo Gym imports from these paths
unchanged.
"""

from __future__ import annotations

import sys

from .. import base, registry

# Before anything imports the submodules by these names.
sys.modules.setdefault(__name__ + ".base", base)
sys.modules.setdefault(__name__ + ".registry", registry)

from ..base import (  # noqa: E402
    ConnectableProvider,
    ExecResult,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
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
from ..registry import create_provider, get_provider_class, list_providers, register_provider  # noqa: E402
from . import utils  # noqa: E402

__all__ = [
    "ConnectableProvider",
    "ExecResult",
    "SandboxCreateError",
    "SandboxCreateVerificationError",
    "SandboxEndpoint",
    "SandboxExecResult",
    "SandboxHandle",
    "SandboxProvider",
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
]
