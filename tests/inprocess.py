"""Services served in this test process over real sockets (uvicorn on a free loopback port),
so connection handling is real: accept backlog, keep-alive, one TCP connection per client
connection. The app's lifespan runs as it does in production."""

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn

from corral_common.settings import HTTP_KEEP_ALIVE_S
from tests.polling import until


def loopback_socket() -> socket.socket:
    """A TCP socket bound to a free port on 127.0.0.1 (its port is known before the app is made)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@asynccontextmanager
async def serve(app, sock: socket.socket | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on ``sock`` (default: a fresh loopback socket); yields its base URL."""
    sock = sock or loopback_socket()
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", backlog=4096,
                            timeout_keep_alive=HTTP_KEEP_ALIVE_S, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started or task.done(), timeout_s=60, what="uvicorn to start")
        if task.done():
            task.result()  # the lifespan's error, if it raised one
            raise RuntimeError("uvicorn stopped during start (its lifespan failed)")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()
