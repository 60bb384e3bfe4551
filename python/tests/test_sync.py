"""reference-api.md H: the blocking Sandbox and its private loop runner."""

import asyncio
import threading

import pytest

import sbx
from sbx import Sandbox, SandboxSpec, SandboxStatus, register_provider
from sbx.api import SYNC_LOOP_CLOSE_TIMEOUT_S, SYNC_OPERATION_TIMEOUT_S, _AsyncLoopRunner
from conftest import EndpointProvider, RecordingProvider


def test_runner_defaults_and_thread_name():
    assert SYNC_OPERATION_TIMEOUT_S == 3600.0 and SYNC_LOOP_CLOSE_TIMEOUT_S == 5.0
    r = _AsyncLoopRunner()
    try:
        assert r._wait_timeout_s == 3600.0 and r._close_timeout_s == 5.0
        assert r._thread.name == "nemo-gym-sandbox-sync-loop" and r._thread.daemon
        assert r.call("op", lambda: threading.current_thread().name) == "nemo-gym-sandbox-sync-loop"

        async def coro():
            return asyncio.get_running_loop()

        assert r.run("op", coro) is r._loop
    finally:
        r.close()


def test_runner_closed_and_close_idempotent():
    r = _AsyncLoopRunner()
    r.close()
    r.close()
    assert r._loop.is_closed()
    with pytest.raises(RuntimeError, match="sync loop is closed") as e:
        r.call("exec", lambda: 1)
    assert str(e.value) == "Sandbox sync loop is closed"
    with pytest.raises(RuntimeError, match="sync loop is closed"):
        r.run("exec", lambda: asyncio.sleep(0))


def test_call_timeout_keeps_function_running_and_close_leaves_busy_loop():
    r = _AsyncLoopRunner(wait_timeout_s=0.05, close_timeout_s=0.05)
    release = threading.Event()
    finished = threading.Event()

    def blocking():
        release.wait()
        finished.set()

    with pytest.raises(TimeoutError) as e:
        r.call("exec", blocking)
    assert str(e.value) == "Sandbox.exec() timed out waiting for the sync loop after 0.05s"
    r.close()  # the loop thread is busy: close returns without closing the loop
    assert not r._loop.is_closed()
    release.set()
    assert finished.wait(30)
    r._thread.join(30)


def test_run_timeout_cancels_the_coroutine_and_runs_cleanup():
    r = _AsyncLoopRunner(wait_timeout_s=0.05)
    cleaned = threading.Event()

    async def slow():
        try:
            await asyncio.sleep(100)
        finally:
            cleaned.set()

    with pytest.raises(TimeoutError, match=r"Sandbox.start\(\) timed out waiting for the sync loop after 0.05s"):
        r.run("start", slow)
    assert cleaned.wait(30)
    r.close()


def test_refuses_to_block_inside_a_running_loop():
    register_provider("recording", RecordingProvider)
    s = Sandbox(RecordingProvider(), SandboxSpec())

    async def inside():
        with pytest.raises(RuntimeError, match="use AsyncSandbox in async code") as e:
            s.start()
        assert str(e.value) == "Sandbox.start() is blocking; use AsyncSandbox in async code instead."
        with pytest.raises(RuntimeError, match=r"Sandbox.exec\(\) is blocking"):
            s.exec("x")
        with pytest.raises(RuntimeError, match=r"Sandbox.__init__\(\) is blocking; use AsyncSandbox"):
            Sandbox({"recording": {}})
        with pytest.raises(RuntimeError, match=r"Sandbox.__init__\(\) is blocking"):
            Sandbox({"fake": {}})

    asyncio.run(inside())
    s.stop()


def test_constructor_error_closes_runner():
    class Boom:
        def __init__(self, **kw):
            raise RuntimeError("provider constructor failed")

    register_provider("boom", Boom)
    before = threading.active_count()
    with pytest.raises(RuntimeError, match="provider constructor failed"):
        Sandbox({"boom": {}})
    with pytest.raises(ValueError, match="provider constructor failed"):
        Sandbox({"fake": {"init_error": "provider constructor failed"}})
    assert threading.active_count() == before  # both loop threads ended


def test_sync_mirrors_async():
    p = EndpointProvider()
    s = Sandbox(p, SandboxSpec(workdir="/w", ports=[8000]))
    assert s.status() == SandboxStatus.UNKNOWN
    assert s.start() is s
    assert s.exec("echo") == sbx.SandboxExecResult("ok", None, 0)
    assert p.exec_kwargs[-1] == {"cwd": "/w", "env": None, "timeout_s": 180, "user": None}
    s.exec("echo", cwd="/c", env={"a": "b"}, timeout_s=None, user="root")
    assert p.exec_kwargs[-1] == {"cwd": "/c", "env": {"a": "b"}, "timeout_s": None, "user": "root"}
    s.upload("a", "/b")
    s.download("/b", "c")
    assert s.endpoint(8000).endpoint == "http://127.0.0.1:8000"
    assert s.status() == SandboxStatus.RUNNING
    s.stop()
    s.stop()
    assert p.aclosed == 1 and len(p.closed) == 1
    assert s.status() == SandboxStatus.STOPPED
    for call in (lambda: s.exec("x"), lambda: s.start(), lambda: s.upload("a", "b"), lambda: s.endpoint(8000)):
        with pytest.raises(RuntimeError, match="sync loop is closed"):
            call()
    assert not hasattr(s, "pty") and not hasattr(s, "serialize") and not hasattr(Sandbox, "connect")


def test_sync_start_chains_and_context_does_not_start():
    p = RecordingProvider()
    with Sandbox(p) as s:
        assert p.calls == []
        assert s.start(SandboxSpec(image="i")) is s
    assert p.aclosed == 1 and s.status() == SandboxStatus.STOPPED
    q = RecordingProvider()
    with pytest.raises(ZeroDivisionError):
        with Sandbox(q, SandboxSpec()):
            1 / 0
    assert q.aclosed == 1


def test_sync_errors_propagate_with_reference_types():
    s = Sandbox({"fake": {}})
    with pytest.raises(ValueError, match="requires a SandboxSpec"):
        s.start()
    with pytest.raises(RuntimeError, match="not been started"):
        s.exec("x")
    s.stop()
    cfg = {"fake": {"fail": {"create": "boom"}, "fail_code": {"create": "ECREATE"}}}
    s2 = Sandbox(cfg, SandboxSpec())
    try:
        with pytest.raises(sbx.SandboxCreateError, match="boom"):
            s2.start()
    finally:
        s2.stop()


def test_gc_runs_best_effort_stop():
    import gc

    p = RecordingProvider()
    s = Sandbox(p, SandboxSpec()).start()
    del s
    gc.collect()
    assert len(p.closed) == 1 and p.aclosed == 1


# --- C providers: the C operations waited for in the calling thread ------------


def test_c_providers_block_in_the_calling_thread_with_the_same_rules():
    from sbx.api import _CallingThread

    before = threading.active_count()
    s = Sandbox({"fake": {}}, SandboxSpec())
    assert isinstance(s._runner, _CallingThread)
    assert s._async_sandbox._csb is not None  # a wrapper over the C sandbox
    assert threading.active_count() == before  # no loop thread of ours
    assert s._runner._wait_timeout_s == 3600.0
    assert isinstance(Sandbox(RecordingProvider())._runner, _AsyncLoopRunner)
    assert isinstance(Sandbox(sbx.create_provider({"fake": {}}))._runner, _CallingThread)

    async def inside():
        with pytest.raises(RuntimeError) as e:
            s.start()
        assert str(e.value) == "Sandbox.start() is blocking; use AsyncSandbox in async code instead."

    asyncio.run(inside())
    s.start()
    # A coroutine (a method that is more than one C operation) runs on a
    # short-lived loop in the calling thread.
    assert s._runner.run("exec", lambda: s._async_sandbox.exec("exit 6")).return_code == 6
    s.stop()
    s.stop()
    assert s.status() == SandboxStatus.STOPPED
    with pytest.raises(RuntimeError) as e:
        s.exec("x")
    assert str(e.value) == "Sandbox sync loop is closed"
    # Config errors surface as in the reference (from __init__).
    with pytest.raises(ValueError, match="Unknown sandbox provider 'nope'"):
        Sandbox({"nope": {}})
    with pytest.raises(TypeError, match="config must be a mapping"):
        Sandbox({"fake": 3})


def test_direct_runner_wait_timeout_cancels_the_operation():
    s = Sandbox({"fake": {}}, SandboxSpec()).start()
    s._runner._wait_timeout_s = 0.2
    with pytest.raises(TimeoutError) as e:
        s.exec("sleep 100", timeout_s=None)
    assert str(e.value) == "Sandbox.exec() timed out waiting for the sync loop after 0.2s"
    assert s.exec("exit 4").return_code == 4  # the sandbox is still usable
    s.stop()


def test_direct_runner_ctrl_c_cancels_the_operation():
    """Ctrl-C during a blocking exec on a C provider cancels the operation
    and raises KeyboardInterrupt (the wait is sliced so signals are seen)."""
    import os
    import signal

    s = Sandbox({"fake": {}}, SandboxSpec()).start()
    # Python leaves SIGINT ignored when it started so (a background job of a
    # script): install Ctrl-C's usual handler for this test, whatever we inherited.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            s.exec("sleep 100", timeout_s=None)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, old)
    assert s.exec("exit 5").return_code == 5
    s.stop()
