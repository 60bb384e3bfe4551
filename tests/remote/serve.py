"""What the test servers (api_server.py, opensandbox_server.py) share: the
port file a test waits for, and running until the test that started them
ends (or a SIGTERM), then cleaning up (a test killed by its alarm leaves no
server and no box processes)."""

import asyncio
import os
import signal


def write_port_file(path, port):
    """Writes the port atomically: a reader never sees half a number."""
    with open(path + ".tmp", "w") as f:
        f.write("%d\n" % port)
    os.rename(path + ".tmp", path)


async def until_parent_ends(parent, cleanup):
    """Returns once `parent` (the test) is gone or SIGTERM came; runs `cleanup` either way."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        while os.getppid() == parent and not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 0.5)
            except asyncio.TimeoutError:
                pass
    finally:
        cleanup()
