"""Shared test helpers: a recording pure-Python provider (the reference's test
double), registry isolation, and the C providers available in this build."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sbx  # noqa: E402
from sbx import registry  # noqa: E402


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class RecordingProvider:
    """A pure-Python provider that records every call (as the reference's tests do)."""

    name = "recording"

    def __init__(self, marker: str | None = None, fail_upload: bool = False, fail_close: bool = False,
                 fail_create: BaseException | None = None, status: sbx.SandboxStatus = sbx.SandboxStatus.RUNNING,
                 endpoint_result: Any = None) -> None:
        self.marker = marker
        self.fail_upload = fail_upload
        self.fail_close = fail_close
        self.fail_create = fail_create
        self._status = status
        self.endpoint_result = endpoint_result
        self.calls: list[tuple] = []
        self.created: list[sbx.SandboxSpec] = []
        self.uploads: list[tuple[str, str]] = []
        self.closed: list[sbx.SandboxHandle] = []
        self.aclosed = 0
        self.exec_kwargs: list[dict] = []

    async def create(self, spec: sbx.SandboxSpec) -> sbx.SandboxHandle:
        self.calls.append(("create", spec))
        if self.fail_create is not None:
            raise self.fail_create
        self.created.append(spec)
        return sbx.SandboxHandle(sandbox_id=f"box-{len(self.created)}", provider_name=self.name, raw={"n": 1})

    async def exec(self, handle, command, *, cwd=None, env=None, timeout_s=None, user=None):
        kw = {"cwd": cwd, "env": env, "timeout_s": timeout_s, "user": user}
        self.calls.append(("exec", command, kw))
        self.exec_kwargs.append(kw)
        return sbx.SandboxExecResult(stdout="ok", stderr=None, return_code=0)

    async def upload_file(self, handle, source_path, target_path):
        self.calls.append(("upload", source_path, target_path))
        assert isinstance(source_path, Path)
        self.uploads.append((source_path.read_text(encoding="utf-8") if source_path.exists() else None, target_path))
        if self.fail_upload:
            raise RuntimeError("upload failed")

    async def download_file(self, handle, source_path, target_path):
        self.calls.append(("download", source_path, target_path))
        assert isinstance(target_path, Path)

    async def status(self, handle):
        self.calls.append(("status",))
        return self._status

    async def close(self, handle):
        self.calls.append(("close", handle))
        self.closed.append(handle)
        if self.fail_close:
            raise RuntimeError("close failed")

    async def aclose(self):
        self.calls.append(("aclose",))
        self.aclosed += 1


class EndpointProvider(RecordingProvider):
    name = "endpointy"

    async def endpoint(self, handle, port):
        self.calls.append(("endpoint", port))
        if self.endpoint_result is not None:
            return self.endpoint_result
        return sbx.SandboxEndpoint(f"http://127.0.0.1:{port}")


class ConnectProvider(RecordingProvider):
    name = "connecty"

    def __init__(self, descriptor: dict | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.descriptor = descriptor if descriptor is not None else {"sandbox_id": "box-1"}
        self.connected: list[Any] = []

    async def serialize_handle(self, handle, *, scope=None):
        self.calls.append(("serialize", scope))
        return dict(self.descriptor)

    async def connect(self, descriptor):
        self.calls.append(("connect", descriptor))
        self.connected.append(descriptor)
        return sbx.SandboxHandle(sandbox_id=descriptor.get("sandbox_id", "x"), provider_name=self.name, raw=None)


@pytest.fixture(autouse=True)
def _isolated_registry():
    """Each test sees only the registrations it makes."""
    saved = dict(registry._registered)
    registry._reset_entry_points()
    yield
    registry._registered.clear()
    registry._registered.update(saved)
    registry._reset_entry_points()


def c_provider_available(name: str) -> bool:
    from sbx import _lib

    return _lib.c_provider_exists(name)


def must_work() -> bool:
    return os.environ.get("SBX_MUST_WORK") == "1"


def skip_or_fail(why: str) -> None:
    """Skips a test this machine cannot run; under SBX_MUST_WORK=1 (CI) fails it."""
    if must_work():
        pytest.fail(f"skipped under SBX_MUST_WORK=1: {why}")
    pytest.skip(why)


def _must_work_report(report: Any) -> None:
    """Under SBX_MUST_WORK=1 a skip is a failure, whoever raised it (a skip
    mark, pytest.skip, importorskip): a machine that cannot run a test must not
    pass it. An expected failure (xfail) is not a skip."""
    if must_work() and report.skipped and not hasattr(report, "wasxfail"):
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        why = why[len("Skipped: "):] if why.startswith("Skipped: ") else why
        report.outcome = "failed"
        report.longrepr = f"skipped under SBX_MUST_WORK=1: {why}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _must_work_report(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _must_work_report(outcome.get_result())


def need_provider(name: str) -> None:
    """Skips when the C provider is not built (a failure in CI, where everything must run)."""
    if not c_provider_available(name):
        if must_work():
            pytest.fail(f"C provider {name!r} is not built into libsbx")
        pytest.skip(f"C provider {name!r} is not built into libsbx yet")
