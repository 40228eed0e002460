"""HTTP ingress to a port inside a sandbox: the node-agent's half.

The request is sent with httpcore (the HTTP/1.1 client under httpx) over a connection the
sandbox's backend makes inside the sandbox (``SandboxBackend.connect_port``: for containers a
socket created in its network namespace, to 127.0.0.1:port), so the sandbox's network stays
closed: nothing is routed, nothing listens on the host. Bodies stream both ways.
"""

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpcore
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse

from corral_common.contracts.exec import INGRESS_MARK
from corral_node_agent.errors import PortBadAnswer

# Hop-by-hop headers (RFC 9110 7.6.1) and the ones that carry Corral's own credentials.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "x-corral-internal-token"})


class _SocketStream(httpcore.AsyncNetworkStream):
    """An already connected non-blocking socket as httpcore's stream."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.loop = asyncio.get_running_loop()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return await asyncio.wait_for(self.loop.sock_recv(self.sock, max_bytes), timeout)
        except TimeoutError:
            raise httpcore.ReadTimeout("sandbox port read timed out") from None
        except OSError as exc:
            raise httpcore.ReadError(str(exc)) from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(self.loop.sock_sendall(self.sock, buffer), timeout)
        except TimeoutError:
            raise httpcore.WriteTimeout("sandbox port write timed out") from None
        except OSError as exc:
            raise httpcore.WriteError(str(exc)) from None

    async def aclose(self) -> None:
        self.sock.close()

    def get_extra_info(self, info: str) -> Any:
        return self.sock if info == "socket" else None


class _SandboxNetwork(httpcore.AsyncNetworkBackend):
    def __init__(self, connect: Callable[[int], Awaitable[socket.socket]]):
        self.connect = connect

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        return _SocketStream(await self.connect(port))

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def forward(connect: Callable[[int], Awaitable[socket.socket]], port: int, path: str,
                  request: Request) -> StreamingResponse:
    """Send ``request`` to ``/path`` on the sandbox's ``port``; its answer, streamed."""
    pool = httpcore.AsyncConnectionPool(network_backend=_SandboxNetwork(connect), retries=0)
    target = "/" + path + (f"?{request.url.query}" if request.url.query else "")
    headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in HOP_BY_HOP]
    headers.append((b"host", f"localhost:{port}".encode()))
    body: AsyncIterator[bytes] | None = request.stream() if request.method not in ("GET", "HEAD") else None
    upstream = httpcore.Request(request.method, httpcore.URL(scheme=b"http", host=b"127.0.0.1", port=port,
                                                             target=target.encode()),
                                headers=headers, content=body)
    try:
        response = await pool.handle_async_request(upstream)
    except httpcore.ProtocolError as exc:  # an endless header, not HTTP at all...
        await pool.aclose()
        raise PortBadAnswer(f"the server on port {port} did not answer with HTTP ({exc})") from None
    except httpcore.NetworkError as exc:  # it hung up (or reset) before its answer
        await pool.aclose()
        raise PortBadAnswer(f"the server on port {port} closed the connection before answering ({exc})") from None
    except BaseException:
        await pool.aclose()
        raise

    async def close() -> None:
        await response.aclose()
        await pool.aclose()

    out_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers
                   if k.decode("latin-1").lower() not in HOP_BY_HOP]
    stream = response.aiter_stream()
    streaming = StreamingResponse(stream, status_code=response.status, background=BackgroundTask(close))
    streaming.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in out_headers]
    streaming.raw_headers.append((INGRESS_MARK.encode(), b"upstream"))
    return streaming
