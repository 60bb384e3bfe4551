"""Issue 11: code written for `nemo_gym.sandbox` behaves the same on sbx.

Each test runs the reference's call and checks the reference's result
(../shared/spec/reference-api.md, reference-newer.md). test_public_surface
lists every public name of each reference module and fails on a missing one.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import sys
import textwrap
import types
from pathlib import Path

import pytest

import sbx
from sbx import AsyncSandbox, SandboxSpec, SandboxStatus, nemo_gym_adapter, registry, rewrite_image
from conftest import RecordingProvider, run

DOCS = Path(__file__).resolve().parents[2] / "docs" / "python.md"


# --- 1. attribution constants ------------------------------------------------


def test_attribution_names_of_the_reference(monkeypatch):
    from sbx.attribution import (  # the import line of the reference's opensandbox provider & co.
        IGNORED_LOGIN_NAMES,
        RUN_ENV_VARS,
        RUN_KEY,
        TEAM_KEY,
        USER_KEY,
        WORKLOAD_KEY,
        log_attribution_once,
        resolve_attribution,
        resolve_run_id,
    )
    from sbx import attribution

    assert (TEAM_KEY, USER_KEY, WORKLOAD_KEY, RUN_KEY) == ("team", "user", "workload", "run")
    assert RUN_ENV_VARS == ("NEMO_GYM_RUN_ID",)
    assert "root" in IGNORED_LOGIN_NAMES
    assert attribution.TEAM_ENV_VARS == ("NEMO_GYM_TEAM", "SLURM_JOB_ACCOUNT")
    assert attribution.USER_ENV_VARS == ("NEMO_GYM_USER", "SLURM_JOB_USER")
    assert attribution.WORKLOAD_ENV_VARS[-1] == "NEMO_GYM_CONFIG_PATH"
    # How the reference's OpenSandbox provider builds its labels.
    md = resolve_attribution(team="t", user="u", environ={})
    md[RUN_KEY] = resolve_run_id("r1", environ={})
    assert md == {"team": "t", "user": "u", "run": "r1"}
    # The reference's own tests reset these private globals by name.
    monkeypatch.setattr(attribution, "_process_run_id", None)
    first = resolve_run_id(environ={})
    assert re.fullmatch(r"[0-9a-f]{12}", first) and resolve_run_id(environ={}) == first
    monkeypatch.setattr(attribution, "_logged_attribution", False)
    log_attribution_once({})
    assert attribution._logged_attribution is False


def _alias_reference_paths(monkeypatch):
    """Makes `nemo_gym.sandbox...` import sbx's modules (what "runs on sbx's
    core" means for a provider module written for the reference)."""
    import sbx.api
    import sbx.attribution
    import sbx.config
    import sbx.providers.utils
    import sbx.utils

    gym = types.ModuleType("nemo_gym")
    gym.__path__ = []
    monkeypatch.setitem(sys.modules, "nemo_gym", gym)
    for suffix, mod in {
        "": sbx, ".api": sbx.api, ".attribution": sbx.attribution, ".config": sbx.config,
        ".utils": sbx.utils, ".providers": sbx.providers, ".providers.base": sbx.providers.base,
        ".providers.registry": sbx.providers.registry, ".providers.utils": sbx.providers.utils,
    }.items():
        monkeypatch.setitem(sys.modules, "nemo_gym.sandbox" + suffix, mod)
    nemo_gym_adapter._reset_gym()


def test_reference_opensandbox_provider_imports_resolve(monkeypatch):
    _alias_reference_paths(monkeypatch)
    try:
        # The reference OpenSandbox provider's imports, verbatim.
        ns: dict = {}
        exec(textwrap.dedent("""
            from nemo_gym.sandbox.attribution import RUN_KEY, log_attribution_once, resolve_attribution, resolve_run_id
            from nemo_gym.sandbox.providers.base import (
                SandboxCreateError,
                SandboxCreateVerificationError,
                SandboxEndpoint,
                SandboxExecResult,
                SandboxHandle,
                SandboxPtySession,
                SandboxPtySpec,
                SandboxResources,
                SandboxSpec,
                SandboxStatus,
            )
            from nemo_gym.sandbox.providers.utils import coerce_config
            from nemo_gym.sandbox.providers.registry import ENTRY_POINT_GROUP
            from nemo_gym.sandbox.config import SANDBOX_BLOCK_DEFAULT_METADATA_KEY, SANDBOX_BLOCK_RESERVED_KEYS
            from nemo_gym.sandbox.api import SANDBOX_PTY_RUNTIME_RETURN_CODE, SandboxSpec as ApiSpec, create_provider
        """), ns)
        assert ns["RUN_KEY"] == "run" and ns["SandboxSpec"] is sbx.SandboxSpec is ns["ApiSpec"]
        assert ns["ENTRY_POINT_GROUP"] == "nemo_gym.sandbox_providers"
        assert ns["SANDBOX_BLOCK_DEFAULT_METADATA_KEY"] == "default_metadata"
        assert ns["SANDBOX_BLOCK_RESERVED_KEYS"] == frozenset({"default_metadata"})
        assert ns["SANDBOX_PTY_RUNTIME_RETURN_CODE"] == 125
        assert ns["create_provider"] is sbx.create_provider
    finally:
        nemo_gym_adapter._reset_gym()


def test_providers_utils_of_the_reference():
    from sbx.providers.utils import coerce_config, path_under_mount
    from dataclasses import dataclass

    @dataclass
    class Cfg:
        a: int = 1

    c = Cfg(2)
    assert coerce_config(None, Cfg) == Cfg() and coerce_config(c, Cfg) is c
    assert coerce_config({"a": 3}, Cfg) == Cfg(3)
    with pytest.raises(TypeError) as e:
        coerce_config(["a"], Cfg)
    assert str(e.value) == "Cfg must be a mapping or Cfg instance"
    assert path_under_mount("/sandbox", "/sandbox") == ""
    assert path_under_mount("/sandbox/", "/sandbox/a/b") == "a/b"
    assert path_under_mount("/sandbox", "/sandbox/a/../b") == "b"
    assert path_under_mount("/sandbox", "/sandboxes/x") is None
    assert path_under_mount("/sandbox", "/sandbox/../etc") is None
    assert path_under_mount("/sandbox", "rel/path") is None
    assert path_under_mount("/", "/x/y") == "x/y"
    # The same module objects under both paths: patching one patches the other.
    assert sbx.providers.base is sbx.base and sbx.providers.registry is sbx.registry


# --- 2. the Gym adapter raises the caller's exception classes ----------------


def _stand_in_gym(tmp_path, monkeypatch):
    """A stand-in NeMo Gym: its own exception and value classes, unrelated to sbx's."""
    pkg = tmp_path / "nemo_gym" / "sandbox"
    pkg.mkdir(parents=True)
    (tmp_path / "nemo_gym" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from nemo_gym.sandbox.providers import *\n")
    (pkg / "providers.py").write_text(textwrap.dedent("""
        import enum
        from dataclasses import dataclass
        from typing import Any

        class SandboxStatus(str, enum.Enum):
            STARTING = "starting"
            RUNNING = "running"
            STOPPED = "stopped"
            ERROR = "error"
            UNKNOWN = "unknown"

        @dataclass
        class SandboxHandle:
            sandbox_id: str
            provider_name: str
            raw: Any

        @dataclass(frozen=True)
        class SandboxExecResult:
            stdout: Any
            stderr: Any
            return_code: int
            error_type: Any = None

        class SandboxPtyError(RuntimeError):
            pass

        class SandboxCreateError(RuntimeError):
            pass

        class SandboxCreateVerificationError(SandboxCreateError):
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in [m for m in sys.modules if m == "nemo_gym" or m.startswith("nemo_gym.")]:
        monkeypatch.delitem(sys.modules, m)


@pytest.fixture
def gym(tmp_path, monkeypatch):
    _stand_in_gym(tmp_path, monkeypatch)
    # The adapter module is already imported (and has looked for Gym and not
    # found it); Gym arrives afterwards, as when Gym loads it by entry point.
    nemo_gym_adapter._reset_gym()
    mod = importlib.import_module("nemo_gym.sandbox")
    yield mod
    for m in [m for m in sys.modules if m == "nemo_gym" or m.startswith("nemo_gym.")]:
        sys.modules.pop(m, None)
    nemo_gym_adapter._reset_gym()


def _failing(code, message="no capacity"):
    cls = nemo_gym_adapter._adapter("fake")
    return cls(fail={"create": message}, fail_code={"create": code})


def test_adapter_raises_gyms_create_error(gym):
    async def go():
        p = _failing("ECREATE")
        # cvdp / anyswe: `except SandboxCreateError` with Gym's class, around
        # Gym's AsyncSandbox.start(), which awaits provider.create(spec).
        try:
            await p.create(SandboxSpec())
        except gym.SandboxCreateError as exc:
            caught = exc
        else:
            pytest.fail("create did not fail")
        assert str(caught) == "no capacity"
        assert not isinstance(caught, gym.SandboxCreateVerificationError)
        # Still sbx's class too, with sbx's code.
        assert isinstance(caught, sbx.SandboxCreateError) and caught.sbx_code == "ECREATE"
        assert type(caught).__name__ == "SandboxCreateError"

        p = _failing("EVERIFY", "not ready in time")
        with pytest.raises(gym.SandboxCreateVerificationError, match="not ready in time") as e:
            await p.create(SandboxSpec())
        assert isinstance(e.value, gym.SandboxCreateError)
        assert isinstance(e.value, sbx.SandboxCreateVerificationError)

        # Other errors keep their builtin classes, which Gym shares.
        ok = nemo_gym_adapter._adapter("fake")(fail={"exec": "gone"}, fail_code={"exec": "ETIMEDOUT"})
        h = await ok.create(SandboxSpec())
        assert type(h) is gym.SandboxHandle
        with pytest.raises(TimeoutError):
            await ok.exec(h, "true")
        await ok.close(h)

    run(go())


def test_adapter_without_gym_raises_sbx_classes(monkeypatch):
    for m in [m for m in sys.modules if m == "nemo_gym" or m.startswith("nemo_gym.")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p) / "nemo_gym").exists()])
    nemo_gym_adapter._reset_gym()
    try:
        async def go():
            with pytest.raises(sbx.SandboxCreateError) as e:
                await _failing("ECREATE").create(SandboxSpec())
            assert type(e.value) is sbx.SandboxCreateError

        run(go())
    finally:
        nemo_gym_adapter._reset_gym()


# --- 3. pty.exec in a given session needs no create_pty ----------------------


class ShellSession:
    """A live session answering the marker protocol (a shell stand-in)."""

    def __init__(self):
        self.session_id = "s1"
        self.mode = "pty"
        self.written = []
        self._out = asyncio.Queue()
        self._closed = False

    @property
    def closed(self):
        return self._closed

    async def write(self, data):
        self.written.append(data)
        lines = data.decode().split("\n")
        pieces = lines[2].split("'")
        token = pieces[3] + pieces[5]
        self._out.put_nowait(f"{lines[0]}\r\nhello\r\n{token}:3\r\n".encode())

    async def read(self, *, timeout_s=None):
        return await self._out.get()

    async def read_stderr(self, *, timeout_s=None):
        raise TimeoutError

    def __aiter__(self):
        return self

    async def __anext__(self):
        raise StopAsyncIteration

    async def resize(self, rows, cols):
        pass

    async def send_signal(self, signal):
        pass

    async def wait_exit(self, *, timeout_s=None):
        return 0

    async def close(self):
        self._closed = True

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()


def test_pty_exec_in_a_given_session_without_create_pty():
    async def go():
        p = RecordingProvider()
        assert not hasattr(p, "create_pty")
        sb = await AsyncSandbox(p, SandboxSpec()).start()
        session = ShellSession()
        r = await sb.pty.exec("echo hello; exit 3", session=session)
        assert r.return_code == 3 and r.error_type is None and "hello" in r.stdout
        assert r.stderr is None
        assert not session.closed and len(session.written) == 1
        # Opening a session still needs the capability.
        with pytest.raises(NotImplementedError, match="does not support PTY sessions"):
            await sb.pty.exec("ls")
        await sb.stop()

    run(go())


# --- 4. stop() retries a failed aclose() ------------------------------------


class FlakyAclose(RecordingProvider):
    def __init__(self, failures=1):
        super().__init__()
        self.failures = failures

    async def aclose(self):
        await super().aclose()
        if self.failures:
            self.failures -= 1
            raise RuntimeError("aclose failed")


def test_stop_retries_failed_aclose():
    async def go():
        p = FlakyAclose()
        sb = await AsyncSandbox(p, SandboxSpec()).start()
        with pytest.raises(RuntimeError, match="aclose failed"):
            await sb.stop()
        assert [c[0] for c in p.calls].count("aclose") == 1
        await sb.stop()  # the reference tries again
        assert [c[0] for c in p.calls].count("aclose") == 2
        assert [c[0] for c in p.calls].count("close") == 1  # the box is closed once
        await sb.stop()  # and now it is done
        assert [c[0] for c in p.calls].count("aclose") == 2
        assert await sb.status() == SandboxStatus.STOPPED

    run(go())


def test_stop_during_create_still_ends_the_box():
    """The retry must not reopen the window sbx closes: a stop() while create
    is in flight ends the box create returns."""

    class Slow(RecordingProvider):
        def __init__(self):
            super().__init__()
            self.release = asyncio.Event()
            self.aclose_gate = asyncio.Event()

        async def create(self, spec):
            await self.release.wait()
            return await super().create(spec)

        async def aclose(self):
            await self.aclose_gate.wait()  # create returns while stop() is in aclose()
            await super().aclose()

    async def go():
        p = Slow()
        sb = AsyncSandbox(p, SandboxSpec())
        starting = asyncio.ensure_future(sb.start())
        await asyncio.sleep(0)
        stopping = asyncio.ensure_future(sb.stop())
        await asyncio.sleep(0)
        p.release.set()
        for _ in range(100):  # let start() see its create return (no clock involved)
            await asyncio.sleep(0)
        closed_before_aclose = len(p.closed)
        p.aclose_gate.set()
        await stopping
        with pytest.raises(RuntimeError, match="has been stopped"):
            await starting
        assert closed_before_aclose == 1 and len(p.closed) == 1 and len(p.created) == 1

    run(go())


# --- 5. SandboxPtySession checks every member ----------------------------------


def test_pty_session_protocol_is_complete():
    assert isinstance(ShellSession(), sbx.SandboxPtySession)

    def without(name):
        cls = type("Partial", (ShellSession,), {})
        obj = cls()
        if name == "mode":
            del obj.mode
        else:
            setattr(cls, name, None)  # a None member counts as missing for a protocol
        return obj

    for name in ("mode", "__aenter__", "__aexit__"):
        assert not isinstance(without(name), sbx.SandboxPtySession), name


# --- 6. the reference's logger names ------------------------------------------


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_attribution_logs_under_the_reference_name(monkeypatch, caplog):
    from sbx import attribution

    monkeypatch.setattr(attribution, "_logged_attribution", False)
    # The reference's test, verbatim but for the import.
    with caplog.at_level(logging.INFO, logger="nemo_gym.sandbox.attribution"):
        attribution.log_attribution_once({})
        attribution.log_attribution_once({"nemo-gym.nvidia.com/run": "run-1"})
        attribution.log_attribution_once({"nemo-gym.nvidia.com/run": "run-1"})
    matching = [r for r in caplog.records if "Sandbox attribution metadata" in r.getMessage()]
    assert len(matching) == 1 and "run-1" in matching[0].getMessage()
    assert matching[0].name == "nemo_gym.sandbox.attribution"
    assert matching[0].funcName == "log_attribution_once"


def test_sbx_and_reference_names_reach_each_handler_once(monkeypatch):
    from sbx import attribution

    gym_logger = logging.getLogger("nemo_gym.sandbox")
    sbx_logger = logging.getLogger("sbx")
    root = logging.getLogger()
    on_gym, on_sbx, on_root = ListHandler(), ListHandler(), ListHandler()
    monkeypatch.setattr(gym_logger, "level", logging.INFO)
    monkeypatch.setattr(sbx_logger, "level", logging.INFO)
    gym_logger.addHandler(on_gym)
    sbx_logger.addHandler(on_sbx)
    root.addHandler(on_root)
    try:
        monkeypatch.setattr(attribution, "_logged_attribution", False)
        attribution.log_attribution_once({"team": "t"})
        assert [r.name for r in on_gym.records] == ["nemo_gym.sandbox.attribution"]
        assert [r.name for r in on_sbx.records] == ["sbx.attribution"]
        assert len(on_root.records) == 1  # shared by both chains: one record, not two
        # A caller who silences the reference's names hears nothing there.
        gym_logger.setLevel(logging.ERROR)
        monkeypatch.setattr(attribution, "_logged_attribution", False)
        attribution.log_attribution_once({"team": "u"})
        assert len(on_gym.records) == 1 and len(on_sbx.records) == 2
    finally:
        gym_logger.removeHandler(on_gym)
        sbx_logger.removeHandler(on_sbx)
        root.removeHandler(on_root)


def test_registry_warns_under_the_reference_name(tmp_path, monkeypatch):
    info = tmp_path / "pkg_s-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg-s\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[nemo_gym.sandbox_providers]\nfake = os:getcwd\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    handler = ListHandler()
    logger = logging.getLogger("nemo_gym.sandbox.providers.registry")
    logger.addHandler(handler)
    registry._reset_entry_points()
    try:
        sbx.list_providers()
    finally:
        logger.removeHandler(handler)
        registry._reset_entry_points()
    assert [r.levelno for r in handler.records] == [logging.WARNING]
    assert "shadowed" in handler.records[0].getMessage()


# --- 7. the public surface, module by module -------------------------------------

# Every public name of each reference module (reference-api.md A, reference-newer.md
# 1, 3, 6, 9, 11), mapped to sbx's module of the same path.
REFERENCE_SURFACE = {
    "nemo_gym.sandbox": [
        # the snapshot's __all__
        "Sandbox", "AsyncSandbox", "ConnectableProvider", "ExecResult", "SandboxCreateError",
        "SandboxCreateVerificationError", "SandboxEndpoint", "SandboxExecResult", "SandboxHandle",
        "SandboxProvider", "SandboxPty", "SandboxPtyError", "SandboxPtySession", "SandboxPtySpec",
        "SandboxResources", "SandboxSpec", "SandboxStatus", "SupportsSandboxEndpoint", "SupportsSandboxPty",
        "SupportsSandboxPtyAttach", "create_provider", "get_provider_class", "list_providers",
        "register_provider", "resolve_provider_config", "resolve_provider_metadata", "rewrite_image",
        # the newer package table (v0.4.0), but AsyncSandboxCompose (see NOT_PROVIDED)
        "SupportsSandboxNetwork",
        # submodules
        "api", "attribution", "config", "utils", "providers",
    ],
    "nemo_gym.sandbox.api": [
        "AsyncSandbox", "Sandbox", "SandboxPty", "SANDBOX_PTY_RUNTIME_RETURN_CODE",
        "SYNC_OPERATION_TIMEOUT_S", "SYNC_LOOP_CLOSE_TIMEOUT_S", "T",
        # what it imports from providers, and so re-exports
        "ConnectableProvider", "SandboxEndpoint", "SandboxExecResult", "SandboxHandle", "SandboxProvider",
        "SandboxPtyError", "SandboxPtySession", "SandboxPtySpec", "SandboxSpec", "SandboxStatus",
        "SupportsSandboxEndpoint", "SupportsSandboxPty", "SupportsSandboxPtyAttach", "create_provider",
    ],
    "nemo_gym.sandbox.attribution": [
        "LOGGER", "TEAM_KEY", "USER_KEY", "WORKLOAD_KEY", "RUN_KEY", "TEAM_ENV_VARS", "USER_ENV_VARS",
        "WORKLOAD_ENV_VARS", "RUN_ENV_VARS", "IGNORED_LOGIN_NAMES", "resolve_attribution", "resolve_run_id",
        "log_attribution_once",
    ],
    "nemo_gym.sandbox.config": [
        "SANDBOX_BLOCK_DEFAULT_METADATA_KEY", "SANDBOX_BLOCK_RESERVED_KEYS", "resolve_provider_config",
        "resolve_provider_metadata",
    ],
    "nemo_gym.sandbox.utils": ["rewrite_image"],
    "nemo_gym.sandbox.providers": [
        "ConnectableProvider", "ExecResult", "SandboxCreateError", "SandboxCreateVerificationError",
        "SandboxEndpoint", "SandboxExecResult", "SandboxHandle", "SandboxProvider", "SandboxPtyError",
        "SandboxPtySession", "SandboxPtySpec", "SandboxResources", "SandboxSpec", "SandboxStatus",
        "SupportsSandboxBackgroundServices", "SupportsSandboxEndpoint", "SupportsSandboxNetwork",
        "SupportsSandboxPauseResume", "SupportsSandboxSnapshot", "SupportsSandboxPortForwarding",
        "SupportsSandboxRuntimeRequirements", "SupportsSandboxSharedStorage", "SupportsSandboxPty",
        "SupportsSandboxPtyAttach", "create_provider", "get_provider_class", "list_providers",
        "register_provider", "base", "registry", "utils",
    ],
    "nemo_gym.sandbox.providers.base": [
        "SandboxStatus", "SandboxEndpoint", "SandboxResources", "SandboxSpec", "SandboxHandle",
        "SandboxExecResult", "ExecResult", "SandboxPtySpec", "SandboxPtyError", "SandboxCreateError",
        "SandboxCreateVerificationError", "SandboxProvider", "SupportsSandboxBackgroundServices",
        "SupportsSandboxNetwork", "SupportsSandboxRuntimeRequirements", "SupportsSandboxPortForwarding",
        "SupportsSandboxSharedStorage", "SupportsSandboxEndpoint", "SupportsSandboxPauseResume",
        "SupportsSandboxSnapshot", "SandboxPtySession", "SupportsSandboxPty", "SupportsSandboxPtyAttach",
        "ConnectableProvider",
    ],
    "nemo_gym.sandbox.providers.registry": [
        "ENTRY_POINT_GROUP", "LOGGER", "ProviderClass", "ProviderLoader", "register_provider",
        "get_provider_class", "create_provider", "list_providers",
    ],
    "nemo_gym.sandbox.providers.utils": ["coerce_config", "path_under_mount"],
}

# What the newer reference has and sbx does not provide yet: each must be
# named in docs/python.md's "What does not work yet".
NOT_PROVIDED = [
    "AsyncSandboxCompose", "SandboxResourceAmounts", "access", "adapters.docker_compose", "compose_config",
    "compose_fields", "compose_volumes", "failures", "observability", "resource_telemetry", "transfer", "shell",
]


def _sbx_module(reference_name):
    return importlib.import_module("sbx" + reference_name[len("nemo_gym.sandbox"):])


@pytest.mark.parametrize("module", sorted(REFERENCE_SURFACE))
def test_public_surface(module):
    mod = _sbx_module(module)
    missing = [name for name in REFERENCE_SURFACE[module] if not hasattr(mod, name)]
    assert missing == [], f"{mod.__name__} lacks {module}'s {missing}"
    if hasattr(mod, "__all__"):
        assert [n for n in mod.__all__ if not hasattr(mod, n)] == []


def test_surface_values_match_the_reference():
    import sbx.api as api

    assert api.SANDBOX_PTY_RUNTIME_RETURN_CODE == 125
    assert api.SYNC_OPERATION_TIMEOUT_S == 3600.0 and api.SYNC_LOOP_CLOSE_TIMEOUT_S == 5.0
    for name in REFERENCE_SURFACE["nemo_gym.sandbox.providers"]:
        if name not in ("base", "registry", "utils"):
            assert getattr(sbx.providers, name) is getattr(sbx.providers.base, name, None) or getattr(
                sbx.providers, name) is getattr(sbx.registry, name), name
    for name in REFERENCE_SURFACE["nemo_gym.sandbox.api"][7:]:
        assert getattr(api, name) is getattr(sbx, name), name
    # The newer capability protocols recognise a provider by its shape.
    class Pausable:
        async def pause(self, handle): ...
        async def resume(self, handle): ...

    assert isinstance(Pausable(), sbx.providers.SupportsSandboxPauseResume)
    assert not isinstance(RecordingProvider(), sbx.providers.SupportsSandboxPauseResume)


def test_what_is_not_provided_is_documented():
    text = DOCS.read_text()
    section = text.split("## What does not work yet", 1)[1]
    assert [n for n in NOT_PROVIDED if f"`{n}`" not in section] == []


# --- 12. refusals of the reference ----------------------------------------------


def test_rewrite_image_refuses_none_rewrites():
    with pytest.raises(TypeError, match="not iterable"):
        rewrite_image("docker.io/library/python:3.12", None)
    assert rewrite_image(None, None) is None  # a None image is None before the rewrites are read
    assert rewrite_image("x", []) == "x"
    # An entry missing `to` is a KeyError when reached, match or not.
    with pytest.raises(KeyError):
        rewrite_image("ghcr.io/x", [{"from": "docker.io/"}])


def test_status_has_paused():
    # The newer reference's six values (reference-newer.md 9): PAUSED joined them.
    assert SandboxStatus("paused") is SandboxStatus.PAUSED
    assert [s.value for s in SandboxStatus] == ["starting", "running", "paused", "stopped", "error", "unknown"]
    with pytest.raises(ValueError):
        SandboxStatus("frozen")


# The reference's signatures (reference-api.md C-L, reference-newer.md 3, 9):
# parameter names, kinds and defaults, annotations aside.
REFERENCE_SIGNATURES = {
    "api.AsyncSandbox.start": "(self, spec=None)",
    "api.AsyncSandbox.exec": "(self, command, *, cwd=None, env=None, timeout_s=180, user=None)",
    "api.AsyncSandbox.upload": "(self, local_path, remote_path)",
    "api.AsyncSandbox.download": "(self, remote_path, local_path)",
    "api.AsyncSandbox.endpoint": "(self, port)",
    "api.AsyncSandbox.serialize": "(self, *, scope=None)",
    "api.AsyncSandbox.connect": "(descriptor, *, provider)",
    "api.SandboxPty.create": "(self, command=None, *, cwd=None, env=None, rows=24, cols=80, user=None, pty=True)",
    "api.SandboxPty.attach": "(self, session_id, *, takeover=True, since=None)",
    "api.SandboxPty.exec": "(self, command, *, session=None, cwd=None, env=None, timeout_s=180, user=None, "
                           "rows=24, cols=80, pty=True)",
    "api.Sandbox.exec": "(self, command, *, cwd=None, env=None, timeout_s=180, user=None)",
    "api.Sandbox.start": "(self, spec=None)",
    "registry.register_provider": "(name, provider_class, *, override=False)",
    "registry.create_provider": "(config)",
    "config.resolve_provider_config": "(sandbox_provider, named_configs=None)",
    "config.resolve_provider_metadata": "(sandbox_provider, named_configs=None)",
    "attribution.resolve_attribution": "(*, team=None, user=None, workload=None, environ=None)",
    "attribution.resolve_run_id": "(run=None, environ=None)",
    "utils.rewrite_image": "(image, rewrites)",
    "providers.utils.coerce_config": "(value, config_cls)",
    "providers.utils.path_under_mount": "(mount_point, path)",
    "base.SandboxResources.from_mapping": "(resources)",
}


@pytest.mark.parametrize("path", sorted(REFERENCE_SIGNATURES))
def test_reference_signatures(path):
    import inspect

    module, *attrs = path.split(".")
    if module == "providers":
        module, attrs = "providers." + attrs[0], attrs[1:]
    obj = importlib.import_module("sbx." + module)
    for a in attrs:
        obj = getattr(obj, a)
    sig = inspect.signature(obj)
    bare = sig.replace(
        parameters=[p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )
    assert str(bare) == REFERENCE_SIGNATURES[path]
