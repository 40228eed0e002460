"""The one client of the node-agent's HTTP API (``contracts/node.py``), used by the api and the
memory-manager.

One ``NodeAgentClient`` per process holds one connection pool for every node: each call
takes the node's base URL. Every path segment (a sandbox id, a snapshot id, a piece of an
ingress path) is escaped as exactly one segment (``path_segment``): ``a/../b`` or ``x?y``
names a sandbox that does not exist, never another path or a query. The internal token goes
with every call. A node's error answer is raised again as the same ``CorralError`` (status,
code, message, loc); a node that cannot be reached is ``NodeAgentUnreachable`` (a 503). A
request that waited the pool timeout for a free connection raises ``httpx.PoolTimeout`` as it
is: ``corral_common.web.overload`` answers it with a 503 ``overloaded``.

Exec streams, file downloads and port ingress pass the node's bytes through, and uploads
stream their bodies: nothing of them is held whole. ``NodeAgentSyncClient`` is the blocking
twin for a caller on a thread (the memory-manager's reclaim pass), on the same URLs, models
and errors.
"""

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from corral_common.contracts.exec import INGRESS_MARK
from corral_common.contracts.images import path_segment
from corral_common.contracts.node import (
    HOUSEKEEPING_HEADER,
    BalloonState,
    BalloonTarget,
    CommitReply,
    CommitRequest,
    ExecRequest,
    ExecResult,
    FileInfo,
    FileWritten,
    FncallPoolsStatus,
    InputRequest,
    InputSent,
    NetworkApplied,
    NetworkPolicy,
    NetworkState,
    NodeHealth,
    SandboxActivity,
    SnapshotRequest,
    SnapshotSaved,
    StateReply,
    Usage,
)
from corral_common.web.errors import CorralError, ServiceUnavailable, raise_for_upstream
from corral_common.web.internal import INTERNAL_TOKEN_HEADER

Reply = TypeVar("Reply", bound=BaseModel)
_ACTIVITIES = TypeAdapter(list[SandboxActivity])
_FILES = TypeAdapter(list[FileInfo])
_JSON = {"content-type": "application/json"}


class NodeAgentUnreachable(ServiceUnavailable):
    """No answer from the node-agent (refused, reset, timed out): a 503."""


def node_url(node: str, *segments: str) -> str:
    """The URL of a path on the node-agent at ``node`` (its base URL), each segment escaped
    as exactly one (an id can neither add a segment nor a query)."""
    return node.rstrip("/") + "".join("/" + path_segment(segment) for segment in segments)


def sandbox_url(node: str, sandbox_id: str, *tail: str) -> str:
    return node_url(node, "v1", "sandboxes", sandbox_id, *tail)


def activity_url(node: str) -> str:
    return node_url(node, "v1", "activity")


def ingress_url(node: str, sandbox_id: str, port: int, path: str) -> str:
    """``/ports/{port}/{path}``: the path's own segments each escaped (``..`` stays a name)."""
    base = sandbox_url(node, sandbox_id, "ports", str(port))
    return base + "/" + "/".join(path_segment(part) for part in path.split("/")) if path else base + "/"


def _check(response: httpx.Response) -> None:
    raise_for_upstream(response, "node_error", "node-agent error")


def _unreachable(exc: httpx.HTTPError) -> NodeAgentUnreachable:
    return NodeAgentUnreachable(f"node-agent unreachable: {exc.__class__.__name__}")


def _token(internal_token: str) -> dict[str, str]:
    return {INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {}


class NodeAgentClient:
    def __init__(self, internal_token: str = "", *, timeout_s: float = 3600.0, connect_timeout_s: float = 5.0,
                 max_connections: int = 1000, pool_timeout_s: float = 5.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.headers = _token(internal_token)  # also for connections httpx does not make (WebSocket ingress)
        # A request waits pool_timeout_s at most for a free connection (httpx.PoolTimeout, not caught).
        self.http = httpx.AsyncClient(headers=self.headers, transport=transport,
                                      timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=pool_timeout_s),
                                      limits=httpx.Limits(max_connections=max_connections,
                                                          max_keepalive_connections=min(200, max_connections)))

    async def aclose(self) -> None:
        await self.http.aclose()

    # ---- a sandbox's data path ------------------------------------------------------------

    async def exec(self, node: str, sandbox_id: str, body: ExecRequest, *, housekeeping: bool = False) -> ExecResult:
        """Run a command and wait for it; ``housekeeping``: the caller's own maintenance, not
        counted as use of the sandbox."""
        response = await self._send("POST", sandbox_url(node, sandbox_id, "exec"), content=body.model_dump_json(),
                                    headers=_exec_headers(housekeeping))
        return ExecResult.model_validate_json(response.content)

    async def exec_stream(self, node: str, sandbox_id: str, body: ExecRequest, *,
                          housekeeping: bool = False) -> AsyncIterator[bytes]:
        """The node's NDJSON (one ExecChunk per line, the last ``exit``), as it arrives."""
        _, chunks = await self._stream("POST", sandbox_url(node, sandbox_id, "exec", "stream"),
                                       content=body.model_dump_json(), headers=_exec_headers(housekeeping))
        return chunks

    async def write_file(self, node: str, sandbox_id: str, path: str, content: bytes | AsyncIterator[bytes],
                         mode: int = 0o644) -> FileWritten:
        response = await self._send("PUT", sandbox_url(node, sandbox_id, "files"),
                                    params={"path": path, "mode": f"{mode:o}"}, content=content)
        return FileWritten.model_validate_json(response.content)

    async def read_file(self, node: str, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        """A file's bytes as they arrive (a directory's answer is its JSON list)."""
        _, body = await self._stream("GET", sandbox_url(node, sandbox_id, "files"), params={"path": path})
        return body

    async def list_dir(self, node: str, sandbox_id: str, path: str) -> list[FileInfo] | None:
        """A directory's entries; None when ``path`` is not a directory (its bytes are not read)."""
        response = await self._open("GET", sandbox_url(node, sandbox_id, "files"), params={"path": path})
        try:
            if not response.headers.get("content-type", "").startswith("application/json"):
                return None
            return _FILES.validate_json(await response.aread())
        finally:
            await response.aclose()

    async def stat(self, node: str, sandbox_id: str, path: str) -> FileInfo:
        return await self._model("GET", sandbox_url(node, sandbox_id, "files", "stat"), FileInfo,
                                 params={"path": path})

    async def usage(self, node: str, sandbox_id: str) -> Usage:
        return await self._model("GET", sandbox_url(node, sandbox_id, "usage"), Usage)

    async def network(self, node: str, sandbox_id: str) -> NetworkState:
        return await self._model("GET", sandbox_url(node, sandbox_id, "network"), NetworkState)

    async def set_network(self, node: str, sandbox_id: str, policy: NetworkPolicy) -> NetworkApplied:
        return await self._model("PUT", sandbox_url(node, sandbox_id, "network"), NetworkApplied,
                                 content=policy.model_dump_json(), headers=_JSON)

    async def pause(self, node: str, sandbox_id: str) -> StateReply:
        return await self._model("POST", sandbox_url(node, sandbox_id, "pause"), StateReply)

    async def resume(self, node: str, sandbox_id: str) -> StateReply:
        return await self._model("POST", sandbox_url(node, sandbox_id, "resume"), StateReply)

    async def balloon(self, node: str, sandbox_id: str) -> BalloonState:
        return await self._model("GET", sandbox_url(node, sandbox_id, "balloon"), BalloonState)

    async def set_balloon(self, node: str, sandbox_id: str, target: BalloonTarget) -> BalloonTarget:
        return await self._model("PUT", sandbox_url(node, sandbox_id, "balloon"), BalloonTarget,
                                 content=target.model_dump_json(), headers=_JSON)

    async def screen(self, node: str, sandbox_id: str) -> bytes:
        """The screen as PNG bytes."""
        return (await self._send("GET", sandbox_url(node, sandbox_id, "screen"))).content

    async def send_input(self, node: str, sandbox_id: str, body: InputRequest) -> InputSent:
        return await self._model("POST", sandbox_url(node, sandbox_id, "input"), InputSent,
                                 content=body.model_dump_json(), headers=_JSON)

    async def snapshot(self, node: str, sandbox_id: str, body: SnapshotRequest) -> SnapshotSaved:
        return await self._model("POST", sandbox_url(node, sandbox_id, "snapshot"), SnapshotSaved,
                                 content=body.model_dump_json(), headers=_JSON)

    async def delete_snapshot(self, node: str, snapshot_id: str, backend: str | None = None) -> None:
        await self._send("DELETE", node_url(node, "v1", "snapshots", snapshot_id),
                         params={"backend": backend} if backend is not None else None)

    async def commit(self, node: str, sandbox_id: str, body: CommitRequest) -> CommitReply:
        return await self._model("POST", sandbox_url(node, sandbox_id, "commit"), CommitReply,
                                 content=body.model_dump_json(exclude_none=True), headers=_JSON)

    async def port_request(self, node: str, sandbox_id: str, port: int, path: str, method: str, *,
                           params: Iterable[tuple[str, str]] = (), headers: Iterable[tuple[bytes, bytes]] = (),
                           content: AsyncIterator[bytes] | None = None,
                           ) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        """An HTTP request to ``port`` inside the sandbox (the node connects inside it); the
        sandbox's answer, whatever its status, and its body as it arrives. Only the node's
        own errors (no ingress mark: port not open, sandbox gone) are raised."""
        return await self._stream(method, ingress_url(node, sandbox_id, port, path), params=list(params),
                                  headers=list(headers), content=content,
                                  is_error=lambda r: INGRESS_MARK not in r.headers and r.status_code >= 400)

    async def port_websocket(self, node: str, sandbox_id: str, port: int, path: str, query: str,
                             subprotocols: list[str]) -> ClientConnection:
        """A WebSocket to ``port`` inside the sandbox, through its node-agent."""
        url = "ws" + ingress_url(node, sandbox_id, port, path).removeprefix("http") + (f"?{query}" if query else "")
        try:
            return await ws_connect(url, additional_headers=self.headers,
                                    subprotocols=[Subprotocol(p) for p in subprotocols] or None,
                                    proxy=None, compression=None)
        except InvalidStatus as exc:
            raise CorralError(f"node-agent refused the WebSocket ({exc.response.status_code})",
                              status_code=exc.response.status_code) from None
        except (OSError, InvalidHandshake) as exc:
            raise ServiceUnavailable(f"port {port} of sandbox {sandbox_id}: {exc}") from None

    # ---- the node ----------------------------------------------------------------------

    async def activity(self, node: str) -> list[SandboxActivity]:
        return _ACTIVITIES.validate_json((await self._send("GET", activity_url(node))).content)

    async def fncall_pools(self, node: str) -> FncallPoolsStatus:
        return await self._model("GET", node_url(node, "v1", "fncall", "pools"), FncallPoolsStatus)

    async def health(self, node: str) -> NodeHealth:
        return await self._model("GET", node_url(node, "healthz"), NodeHealth)

    # ---- transport ---------------------------------------------------------------------

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self.http.request(method, url, **kwargs)
        except httpx.PoolTimeout:
            raise
        except httpx.HTTPError as exc:
            raise _unreachable(exc) from exc
        _check(response)
        return response

    async def _model(self, method: str, url: str, model: type[Reply], **kwargs: Any) -> Reply:
        return model.model_validate_json((await self._send(method, url, **kwargs)).content)

    async def _open(self, method: str, url: str, *, is_error: Callable[[httpx.Response], bool] | None = None,
                    **kwargs: Any) -> httpx.Response:
        """The response with its body still to read (the caller closes it); ``is_error``
        decides which answers are the node's errors (default: every status >= 400)."""
        try:
            response = await self.http.send(self.http.build_request(method, url, **kwargs), stream=True)
        except httpx.PoolTimeout:
            raise
        except httpx.HTTPError as exc:
            raise _unreachable(exc) from exc
        failed = is_error(response) if is_error is not None else response.status_code >= 400
        if failed:
            await response.aread()
            await response.aclose()
            _check(response)
        return response

    async def _stream(self, method: str, url: str, **kwargs: Any) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        response = await self._open(method, url, **kwargs)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            finally:
                await response.aclose()

        return response, body()


def _exec_headers(housekeeping: bool) -> dict[str, str]:
    return {**_JSON, HOUSEKEEPING_HEADER: "1"} if housekeeping else _JSON


class NodeAgentSyncClient:
    """The blocking twin of ``NodeAgentClient`` for a caller on a thread: the routes it needs,
    on the same URLs, models and errors."""

    def __init__(self, internal_token: str = "", *, timeout_s: float = 3.0,
                 transport: httpx.BaseTransport | None = None):
        self.http = httpx.Client(headers=_token(internal_token), timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self.http.close()

    def activity(self, node: str) -> list[SandboxActivity]:
        return _ACTIVITIES.validate_json(self._send("GET", activity_url(node)).content)

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, url, **kwargs)
        except httpx.PoolTimeout:
            raise
        except httpx.HTTPError as exc:
            raise _unreachable(exc) from exc
        _check(response)
        return response
