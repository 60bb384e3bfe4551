"""[netw] The linux provider's box-to-box networks through the binding:
SupportsSandboxNetwork (validate_networking, network_address, set_hosts) and
sbx.networks. Each call is the C library's, which owns the rules; traffic only
flows between the test's own boxes."""

import pytest

from sbx import AsyncSandbox, SandboxError, SandboxSpec, SupportsSandboxNetwork, create_provider, networks
from conftest import need_provider, run


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


SERVE = (
    "setsid -f python3 -c 'import socket\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind((\"0.0.0.0\", 8000)); s.listen(8); open(\"/tmp/up\", \"w\").close()\n"
    "while True:\n"
    "    c, _ = s.accept(); c.sendall(b\"hi\\n\"); c.close()\n' >/dev/null 2>&1; "
    "for i in $(seq 100); do [ -e /tmp/up ] && exit 0; sleep 0.05; done; exit 1"
)
FETCH = (
    "python3 -c 'import socket, sys\n"
    "try:\n"
    "    print(socket.create_connection((sys.argv[1], 8000), timeout=3).recv(10).decode().strip())\n"
    "except OSError as e:\n"
    "    print(\"failed\", e)\n' "
)


def test_network_api_and_two_boxes_by_name(tmp_path):
    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    p = create_provider(cfg)
    assert isinstance(p, SupportsSandboxNetwork)
    assert not isinstance(create_provider({"local": {}}), SupportsSandboxNetwork)
    p.validate_networking()
    made = networks.create_network(cfg, "pyn")
    assert made["name"] == "pyn" and made["subnet"].startswith("10.89.") and made["boxes"] == []

    async def go():
        spec = SandboxSpec(provider_options={"network": "pyn", "hostname": "api"})
        async with AsyncSandbox(p, spec) as a, \
                AsyncSandbox(p, SandboxSpec(provider_options={"network": "pyn"})) as b, \
                AsyncSandbox(p, SandboxSpec()) as outside:
            await a.start()
            await b.start()
            await outside.start()
            assert (await a.exec(SERVE)).return_code == 0
            addr = await p.network_address(a._handle)
            assert addr.startswith("10.89.")
            assert (await b.exec(FETCH + "api")).stdout == "hi\n"
            assert (await outside.exec(FETCH + addr)).stdout.startswith("failed")
            ids = sorted(networks.inspect_network(cfg, "pyn")["boxes"])
            assert ids == sorted([a._handle.sandbox_id, b._handle.sandbox_id])
            with pytest.raises(RuntimeError, match="in use"):
                networks.remove_network(cfg, "pyn")
            # set_hosts: names the compose adapter gives its services.
            await p.set_hosts(b._handle, {"svc-a": addr})
            assert (await b.exec(FETCH + "svc-a")).stdout == "hi\n"
            with pytest.raises(ValueError, match="IPv4 or IPv6"):
                await p.set_hosts(b._handle, {"x": "not an address"})
            with pytest.raises(RuntimeError, match="in no network"):
                await p.network_address(outside._handle)
    try:
        run(go())
    finally:
        networks.remove_network(cfg, "pyn")  # the boxes are stopped: nothing left mounted
    assert networks.list_networks(cfg) == []
    with pytest.raises(SandboxError):
        networks.inspect_network(cfg, "pyn")


def test_network_names_refused(tmp_path):
    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    for bad in ("host", "none", "a/b", ""):
        with pytest.raises(ValueError, match="network name"):
            networks.create_network(cfg, bad)


def test_forward_ports_until_cancelled(tmp_path):
    """SupportsSandboxPortForwarding: b's own loopback reaches a's server (compose's
    network_mode: service:a), until the task is cancelled."""
    import asyncio

    from sbx import SupportsSandboxPortForwarding

    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    p = create_provider(cfg)
    assert isinstance(p, SupportsSandboxPortForwarding)
    p.validate_port_forwarding()
    networks.create_network(cfg, "pyfw")

    async def go():
        opts = SandboxSpec(provider_options={"network": "pyfw"})
        async with AsyncSandbox(p, opts) as a, AsyncSandbox(p, opts) as b:
            await a.start()
            await b.start()
            assert (await a.exec(SERVE)).return_code == 0
            addr = await p.network_address(a._handle)
            task = asyncio.create_task(p.forward_ports(b._handle, addr, (8000,), ready_file="/tmp/fw-ready"))
            wait = "for i in $(seq 200); do [ -e /tmp/fw-ready ] && exit 0; sleep 0.05; done; exit 1"
            assert (await b.exec(wait)).return_code == 0
            assert (await b.exec(FETCH + "127.0.0.1")).stdout == "hi\n"
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await b.exec(FETCH + "127.0.0.1")).stdout.startswith("failed")
            with pytest.raises(ValueError, match="IPv4 or IPv6"):
                await p.forward_ports(b._handle, "not-an-address", (8000,), ready_file="/tmp/x")
    try:
        run(go())
    finally:
        networks.remove_network(cfg, "pyfw")


def test_concurrent_joins_and_leaves(tmp_path):
    """Boxes joining and leaving one network at once: distinct addresses, and
    every member's /etc/hosts names exactly the boxes in the network."""
    import asyncio

    cfg = {"linux": {"state_dir": str(tmp_path / "state")}}
    p = create_provider(cfg)
    networks.create_network(cfg, "par")

    async def go():
        boxes = [AsyncSandbox(p, SandboxSpec(provider_options={"network": "par"})) for _ in range(8)]
        try:
            await asyncio.gather(*(b.start() for b in boxes))
            ids = [b._handle.sandbox_id for b in boxes]
            addrs = await asyncio.gather(*(p.network_address(b._handle) for b in boxes))
            assert len(set(addrs)) == 8
            for r in await asyncio.gather(*(b.exec("cat /etc/hosts") for b in boxes)):
                assert all(i in r.stdout for i in ids)
            await asyncio.gather(*(b.stop() for b in boxes[:4]))
            for r in await asyncio.gather(*(b.exec("cat /etc/hosts") for b in boxes[4:])):
                assert not any(i in r.stdout for i in ids[:4]) and all(i in r.stdout for i in ids[4:])
        finally:
            await asyncio.gather(*(b.stop() for b in boxes), return_exceptions=True)
    try:
        run(go())
    finally:
        networks.remove_network(cfg, "par")
