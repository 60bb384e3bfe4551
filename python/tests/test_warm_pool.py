"""WarmPool: the C warm pool (src/core/warm_pool.c) through the binding:
claims give started boxes as Sandbox/AsyncSandbox, the pool refills, close()
stops what was not claimed, failures surface as the provider's errors."""

import asyncio
import time

import pytest

import sbx
from sbx import SandboxSpec, WarmPool


def local(tmp_path):
    return {"local": {"workspace_root": str(tmp_path / "ws"), "state_dir": str(tmp_path / "state")}}


def wait_ready(pool, n):
    for _ in range(6000):  # a bounded poll, not a timing assertion
        if pool.stats()["ready"] >= n:
            return
        time.sleep(0.01)
    raise AssertionError(f"the pool never had {n} ready: {pool.stats()}")


def test_claim_runs_and_refills(tmp_path):
    cfg = local(tmp_path)
    with WarmPool(cfg, SandboxSpec(), size=2) as pool:
        wait_ready(pool, 2)
        box = pool.claim()
        assert box.sandbox_id
        assert box.exec("echo pooled").stdout.strip() == "pooled"
        st = pool.stats()
        assert st["ready"] + st["starting"] == 2 and st["claims"] == 1 and st["hits"] == 1
        box.stop()
        wait_ready(pool, 2)
    # close() stopped the two it kept: nothing of this test is listed.
    assert sbx.list_sandboxes(cfg) == []


def test_aclaim(tmp_path):
    async def main():
        with WarmPool(local(tmp_path), SandboxSpec(), size=1) as pool:
            async with await pool.aclaim() as box:
                r = await box.exec("echo async")
                assert r.stdout.strip() == "async"
    asyncio.run(main())


def test_failures_are_the_providers_errors():
    cfg = {"fake": {"fail": {"create": "no capacity"}, "fail_code": {"create": "ECREATE"}}}
    with WarmPool(cfg, SandboxSpec(image="img"), size=1) as pool:
        with pytest.raises(sbx.SandboxCreateError, match="no capacity"):
            pool.claim()
        assert "no capacity" in str(pool.last_error())


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="size 0 is out of range"):
        WarmPool(local(tmp_path), SandboxSpec(), size=0)
    with pytest.raises(TypeError):
        WarmPool(local(tmp_path), SandboxSpec(), size="2")
    pool = WarmPool(local(tmp_path), SandboxSpec(), size=1)
    pool.close()
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.claim()
