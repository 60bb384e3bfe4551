"""A linux box's endpoint through the binding: a server bound to the box's own
loopback (the box has no network) is fetched from the host at the endpoint's
URL; undeclared ports raise the reference's ValueError (docs/networking.md)."""

import asyncio
import urllib.request

import pytest

from sbx import AsyncSandbox, Sandbox, SandboxSpec, create_provider
from conftest import need_provider, run


@pytest.fixture(autouse=True)
def _linux():
    need_provider("linux")


def _fetch(url: str) -> bytes:
    # Bypass any proxy from the environment: the URL is on this host's loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=30) as r:
        return r.read()


def test_endpoint_reaches_a_server_in_a_box_without_network():
    async def go():
        spec = SandboxSpec(workdir="/srv", files={"/srv/hello.txt": "hello from the box"}, ports=[8000])
        async with AsyncSandbox({"linux": {}}, spec) as sb:
            await sb.start()
            assert (await sb.exec("ls /sys/class/net")).stdout == "lo\n"
            r = await sb.exec("setsid -f python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1")
            assert r.return_code == 0
            ep = await sb.endpoint(8000)
            assert ep.endpoint.startswith("http://127.0.0.1:") and ep.headers == {}
            for _ in range(600):  # the server starts in the background; a hang guard only
                try:
                    body = await asyncio.to_thread(_fetch, ep.endpoint + "/hello.txt")
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            else:
                pytest.fail("the box's server never answered through its endpoint")
            assert body == b"hello from the box"
            with pytest.raises(ValueError, match="was not declared"):
                await sb.endpoint(9000)
            with pytest.raises(ValueError, match="between 1 and 65535"):
                await sb.endpoint(0)

    run(go())


def test_connected_handle_keeps_the_declared_ports():
    """The linux descriptor lists the declared ports, so a connected handle's
    endpoint() finds them (a descriptor without "ports" declares none)."""

    async def go():
        p = create_provider({"linux": {}})
        async with AsyncSandbox(p, SandboxSpec(ports=[8000, 9222])) as owner:
            await owner.start()
            url = (await owner.endpoint(9222)).endpoint
            d = await owner.serialize()
            assert d["ports"] == [8000, 9222]
            other = await AsyncSandbox.connect(d, provider=p)
            assert (await other.endpoint(9222)).endpoint == url
            with pytest.raises(ValueError, match=r"declared ports: \[8000, 9222\]"):
                await other.endpoint(1234)
            bare = await AsyncSandbox.connect({"sandbox_id": owner.sandbox_id}, provider=p)
            with pytest.raises(ValueError, match=r"declared ports: \[\]"):
                await bare.endpoint(8000)

    run(go())


def test_sync_endpoint():
    with Sandbox({"linux": {}}, SandboxSpec(ports=[8000])) as s:
        s.start()
        assert s.endpoint(8000).endpoint.startswith("http://127.0.0.1:")
