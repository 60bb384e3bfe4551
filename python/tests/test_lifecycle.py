"""reference-api.md C-F: the AsyncSandbox lifecycle, exec/upload/download,
endpoint and serialize/connect, with a pure-Python provider (call order is
visible) and with the C `fake` provider (the same rules through libsbx)."""

from pathlib import Path

import pytest

import sbx
from sbx import AsyncSandbox, SandboxEndpoint, SandboxExecResult, SandboxSpec, SandboxStatus, register_provider
from conftest import ConnectProvider, EndpointProvider, RecordingProvider, run


# --- C. lifecycle with a Python provider ---------------------------------------


def test_constructor_with_mapping_uses_registry_and_does_not_create():
    register_provider("recording", RecordingProvider)
    sb = AsyncSandbox({"recording": {"marker": "configured"}})
    assert isinstance(sb._provider, RecordingProvider)
    assert sb._provider.marker == "configured"
    assert sb._provider.calls == []
    p = RecordingProvider()
    assert AsyncSandbox(p)._provider is p


def test_status_before_start_and_after_stop():
    async def go():
        p = RecordingProvider()
        sb = AsyncSandbox(p, SandboxSpec(image="x"))
        assert await sb.status() == SandboxStatus.UNKNOWN
        await sb.start()
        assert await sb.status() == SandboxStatus.RUNNING
        await sb.stop()
        assert await sb.status() == SandboxStatus.STOPPED
        assert p.calls.count(("status",)) == 1

    run(go())


def test_start_spec_rules():
    async def go():
        p = RecordingProvider()
        with pytest.raises(ValueError, match="requires a SandboxSpec") as e:
            await AsyncSandbox(p).start()
        assert str(e.value) == "Sandbox.start() requires a SandboxSpec"
        ctor = SandboxSpec(image="ctor")
        arg = SandboxSpec(image="arg")
        sb = AsyncSandbox(p, ctor)
        assert await sb.start(arg) is sb
        assert p.created == [arg] and p.created[0] is arg
        sb2 = AsyncSandbox(p, ctor)
        await sb2.start()
        assert p.created[1] is ctor

    run(go())


def test_state_checks_before_spec_check():
    async def go():
        p = RecordingProvider()
        sb = AsyncSandbox(p, SandboxSpec())
        await sb.start()
        with pytest.raises(RuntimeError, match="Sandbox is already started"):
            await sb.start()
        await sb.stop()
        with pytest.raises(RuntimeError, match="Sandbox has been stopped"):
            await sb.start()
        closed = AsyncSandbox(p)
        await closed.stop()
        with pytest.raises(RuntimeError, match="has been stopped"):
            await closed.start()  # no spec either: the state check wins

    run(go())


def test_startup_files_uploaded_in_order_as_utf8():
    async def go():
        p = RecordingProvider()
        files = {"/b": "second ✓", "/a": "first"}
        sb = await AsyncSandbox(p, SandboxSpec(files=files)).start()
        assert p.uploads == [("second ✓", "/b"), ("first", "/a")]
        sources = [c[1] for c in p.calls if c[0] == "upload"]
        assert [s.name for s in sources] == ["file-0", "file-1"]
        assert all(s.parent.name.startswith("nemo-gym-sandbox-upload-") for s in sources)
        assert not any(s.exists() for s in sources)  # the temp dir is gone
        await sb.stop()
        p2 = RecordingProvider()
        await AsyncSandbox(p2, SandboxSpec()).start()
        assert p2.uploads == []

    run(go())


def test_failed_startup_upload_closes_and_marks_closed():
    async def go():
        p = RecordingProvider(fail_upload=True)
        sb = AsyncSandbox(p, SandboxSpec(files={"/x": "y"}))
        with pytest.raises(RuntimeError, match="upload failed"):
            await sb.start()
        assert p.closed == [sbx.SandboxHandle("box-1", "recording", {"n": 1})]
        assert p.aclosed == 1
        with pytest.raises(RuntimeError, match="has been stopped"):
            await sb.start()
        n = len(p.calls)
        await sb.stop()
        assert len(p.calls) == n

    run(go())


def test_owns_provider_false_leaves_the_shared_provider_open():
    """The newer reference's owns_provider=False: stop() (and a failed start)
    close the box, never the provider its other sandboxes share."""

    async def go():
        p = RecordingProvider()
        a = AsyncSandbox(p, SandboxSpec(image="x"), owns_provider=False)
        b = AsyncSandbox(p, SandboxSpec(image="x"), owns_provider=False)
        await a.start()
        await b.start()
        await a.stop()
        assert p.aclosed == 0 and len(p.closed) == 1
        assert (await b.exec("echo hi")).return_code == 0
        await b.stop()
        assert p.aclosed == 0 and len(p.closed) == 2
        failing = RecordingProvider(fail_upload=True)
        c = AsyncSandbox(failing, SandboxSpec(files={"/x": "y"}), owns_provider=False)
        with pytest.raises(RuntimeError, match="upload failed"):
            await c.start()
        assert len(failing.closed) == 1 and failing.aclosed == 0
        await p.aclose()
        assert p.aclosed == 1
        # The default owns it, as before.
        d = AsyncSandbox(RecordingProvider(), SandboxSpec(image="x"))
        await d.start()
        await d.stop()
        assert d._provider.aclosed == 1

    run(go())


def test_owns_provider_false_on_a_c_provider_and_the_sync_facade():
    async def go():
        sb = AsyncSandbox({"fake": {}}, SandboxSpec(), owns_provider=False)
        await sb.start()
        assert (await sb.exec("echo hi")).return_code == 0
        await sb.stop()
        assert await sb.status() == SandboxStatus.STOPPED

    run(go())
    p = RecordingProvider()
    with sbx.Sandbox(p, SandboxSpec(image="x"), owns_provider=False) as s:
        s.start()
    assert len(p.closed) == 1 and p.aclosed == 0


def test_failed_create_cleans_nothing_and_stop_only_acloses():
    async def go():
        p = RecordingProvider(fail_create=sbx.SandboxCreateError("no capacity"))
        sb = AsyncSandbox(p, SandboxSpec())
        with pytest.raises(sbx.SandboxCreateError, match="no capacity"):
            await sb.start()
        assert p.closed == [] and p.aclosed == 0
        assert sb._handle is None
        await sb.stop()
        assert p.closed == [] and p.aclosed == 1
        assert await sb.status() == SandboxStatus.UNKNOWN

    run(go())


def test_stop_idempotent_and_close_error_propagates_after_aclose():
    async def go():
        p = RecordingProvider()
        sb = await AsyncSandbox(p, SandboxSpec()).start()
        await sb.stop()
        await sb.stop()
        assert [c[0] for c in p.calls].count("close") == 1 and p.aclosed == 1
        p2 = RecordingProvider(fail_close=True)
        sb2 = await AsyncSandbox(p2, SandboxSpec()).start()
        with pytest.raises(RuntimeError, match="close failed"):
            await sb2.stop()
        assert p2.aclosed == 1 and sb2._closed
        await sb2.stop()
        assert p2.aclosed == 1

    run(go())


def test_stop_before_start_only_acloses():
    async def go():
        p = RecordingProvider()
        sb = AsyncSandbox(p, SandboxSpec())
        await sb.stop()
        assert p.calls == [("aclose",)]
        assert await sb.status() == SandboxStatus.UNKNOWN

    run(go())


def test_async_context_does_not_start_and_stops():
    async def go():
        p = RecordingProvider()
        sb = AsyncSandbox(p, SandboxSpec())
        async with sb as inner:
            assert inner is sb
            assert p.calls == []
            await sb.start()
        assert p.aclosed == 1 and len(p.closed) == 1
        with pytest.raises(ZeroDivisionError):
            async with AsyncSandbox(p, SandboxSpec()):
                1 / 0
        assert p.aclosed == 2

    run(go())


# --- D. exec / upload / download ------------------------------------------------


def test_operations_need_a_started_sandbox():
    async def go():
        p = EndpointProvider()
        sb = AsyncSandbox(p, SandboxSpec(ports=[80]))
        for op in (sb.exec("x"), sb.upload("a", "b"), sb.download("a", "b"), sb.endpoint(80)):
            with pytest.raises(RuntimeError, match="Sandbox has not been started"):
                await op
        await sb.start()
        await sb.stop()
        with pytest.raises(RuntimeError, match="not been started"):
            await sb.exec("x")

    run(go())


def test_exec_forwards_arguments():
    async def go():
        p = RecordingProvider()
        sb = await AsyncSandbox(p, SandboxSpec(workdir="/w", env={"S": "1"})).start()
        r = await sb.exec("echo")
        assert r == SandboxExecResult(stdout="ok", stderr=None, return_code=0)
        assert p.exec_kwargs[-1] == {"cwd": "/w", "env": None, "timeout_s": 180, "user": None}
        await sb.exec("echo", cwd="/c", env={"A": "b"}, timeout_s=None, user="root")
        assert p.exec_kwargs[-1] == {"cwd": "/c", "env": {"A": "b"}, "timeout_s": None, "user": "root"}
        await sb.exec("echo", user=1000, timeout_s=5.5)
        assert p.exec_kwargs[-1]["user"] == 1000 and p.exec_kwargs[-1]["timeout_s"] == 5.5

    run(go())


def test_upload_download_paths():
    async def go():
        p = RecordingProvider()
        sb = await AsyncSandbox(p, SandboxSpec()).start()
        await sb.upload("local.txt", "/remote.txt")
        await sb.download("/remote.txt", "out.txt")
        assert p.calls[-2] == ("upload", Path("local.txt"), "/remote.txt")
        assert p.calls[-1] == ("download", "/remote.txt", Path("out.txt"))

    run(go())


# --- E. endpoint -----------------------------------------------------------------


def test_endpoint_check_order():
    async def go():
        plain = RecordingProvider()
        sb = AsyncSandbox(plain, SandboxSpec(ports=[8000]))
        for bad in (0, 70000, True, "8000", 8000.0):
            with pytest.raises(ValueError, match="between 1 and 65535") as e:
                await sb.endpoint(bad)
            assert str(e.value) == f"Sandbox endpoint port must be an integer between 1 and 65535, got {bad!r}"
        with pytest.raises(ValueError, match="was not declared") as e:
            await sb.endpoint(9000)
        assert str(e.value) == "Sandbox port 9000 was not declared in SandboxSpec.ports; declared ports: [8000]"
        with pytest.raises(NotImplementedError) as e:
            await sb.endpoint(8000)
        assert str(e.value) == "Sandbox provider 'recording' does not support service endpoints"
        with pytest.raises(ValueError, match=r"declared ports: \[\]"):
            await AsyncSandbox(plain).endpoint(1)
        ep = EndpointProvider()
        sb2 = AsyncSandbox(ep, SandboxSpec(ports=[8000]))
        with pytest.raises(RuntimeError, match="not been started"):
            await sb2.endpoint(8000)
        await sb2.start()
        assert await sb2.endpoint(8000) == SandboxEndpoint("http://127.0.0.1:8000")
        assert ep.calls.count(("endpoint", 8000)) == 1
        bad = EndpointProvider(endpoint_result={"endpoint": "http://x"})
        sb3 = await AsyncSandbox(bad, SandboxSpec(ports=[1])).start()
        with pytest.raises(TypeError, match="must return SandboxEndpoint, got dict"):
            await sb3.endpoint(1)

    run(go())


# --- F. serialize / connect ------------------------------------------------------


def test_serialize_and_connect():
    async def go():
        plain = RecordingProvider()
        with pytest.raises(RuntimeError, match="serialize") as e:
            await AsyncSandbox(plain).serialize()
        assert str(e.value) == "provider 'recording' does not support serialize()/connect()"
        with pytest.raises(RuntimeError, match="serialize"):
            await AsyncSandbox.connect({"sandbox_id": "x"}, provider=plain)
        # A config mapping is not a provider here (as in the reference): the error says so.
        with pytest.raises(RuntimeError, match="serialize") as e:
            await AsyncSandbox.connect({"sandbox_id": "x"}, provider={"connecty": {}})
        assert str(e.value) == (
            "AsyncSandbox.connect() needs a provider object with serialize()/connect(), not a "
            "config mapping: pass provider=create_provider({'connecty': {}})"
        )

        p = ConnectProvider()
        sb = AsyncSandbox(p, SandboxSpec(workdir="/work"))
        with pytest.raises(RuntimeError, match="not been started"):
            await sb.serialize()
        await sb.start()
        d = await sb.serialize(scope="operate")
        assert d == {"sandbox_id": "box-1", "workdir": "/work"}
        assert ("serialize", "operate") in p.calls
        p.descriptor = {"sandbox_id": "box-1", "workdir": "/keep"}
        assert (await sb.serialize())["workdir"] == "/keep"
        p.descriptor = {"sandbox_id": "box-1", "workdir": None}
        assert await AsyncSandbox(p, SandboxSpec()).start() and True
        sb_none = await AsyncSandbox(p, SandboxSpec()).start()
        assert (await sb_none.serialize()) == {"sandbox_id": "box-1", "workdir": None}

        class Desc:
            def to_dict(self):
                return {"sandbox_id": "zz", "workdir": "/from-desc"}

        other = await AsyncSandbox.connect(Desc(), provider=p)
        assert p.connected[-1] == {"sandbox_id": "zz", "workdir": "/from-desc"}
        assert other._spec == SandboxSpec(workdir="/from-desc")
        await other.exec("pwd")
        assert p.exec_kwargs[-1]["cwd"] == "/from-desc"
        with pytest.raises(ValueError, match="was not declared"):
            await other.endpoint(80)
        await other.stop()
        assert p.closed[-1].sandbox_id == "zz"

    run(go())


def test_cancelled_start_during_upload_closes_the_box():
    """sbx improvement: a cancelled start leaves no box behind."""
    import asyncio

    class Slow(RecordingProvider):
        async def upload_file(self, handle, source_path, target_path):
            self.uploading.set()
            await asyncio.sleep(100)

    async def go():
        p = Slow()
        p.uploading = asyncio.Event()
        sb = AsyncSandbox(p, SandboxSpec(files={"/a": "b"}))
        t = asyncio.create_task(sb.start())
        await p.uploading.wait()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert len(p.closed) == 1 and sb._closed

    run(go())
