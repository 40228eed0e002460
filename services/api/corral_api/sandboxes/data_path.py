"""The data path to a sandbox's node-agent, shared by the sandbox endpoints and rollouts.

Each call finds the node that runs the sandbox (tenant-checked, 409 unless running) and
forwards the request through the shared ``NodeClient``.
"""

from collections.abc import AsyncIterator

import httpx
from starlette.requests import Request
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from corral_api.sandboxes.node_client import NodeClient, node_url
from corral_api.sandboxes.service import SandboxService
from corral_common.contracts.images import path_segment
from corral_common.display import InputRequest, InputSent
from corral_common.errors import BadRequest, Conflict, CorralError, ServiceUnavailable
from corral_common.exec import INGRESS_MARK, ExecRequest, ExecResult, FileInfo, FileWritten
from corral_common.network import NetworkPolicy
from corral_common.sandboxes import SandboxState, Usage
from corral_common.state import SandboxRecord

# Request headers ingress does not pass into a sandbox: Corral's credentials, and hop-by-hop.
INGRESS_DROPPED = frozenset({"authorization", "x-api-key", "x-access-token", "e2b-traffic-access-token",
                             "x-corral-internal-token", "host", "connection", "keep-alive", "te", "trailer",
                             "transfer-encoding", "upgrade", "proxy-authorization"})
# Response headers it does not pass back (hop-by-hop; the api frames the body itself).
INGRESS_RESPONSE_DROPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "trailer", "upgrade",
                                      "content-length", INGRESS_MARK})

_LIVE = frozenset({SandboxState.running, SandboxState.paused})


class SandboxDataPath:
    def __init__(self, sandboxes: SandboxService, nodes: NodeClient):
        self.sandboxes = sandboxes
        self.nodes = nodes

    async def _url(self, tenant: str, sandbox_id: str, tail: str,
                   states: frozenset[SandboxState] = frozenset({SandboxState.running})) -> str:
        _, node = await self.sandboxes.node_for(tenant, sandbox_id, states)
        return node_url(node, "v1", "sandboxes", sandbox_id, *tail.split("/"))

    async def exec(self, tenant: str, sandbox_id: str, body: ExecRequest) -> ExecResult:
        response = await self.nodes.request("POST", await self._url(tenant, sandbox_id, "exec"),
                                            content=body.model_dump_json(),
                                            headers={"content-type": "application/json"})
        return ExecResult.model_validate_json(response.content)

    async def exec_stream(self, tenant: str, sandbox_id: str, body: ExecRequest) -> AsyncIterator[bytes]:
        _, chunks = await self.nodes.stream("POST", await self._url(tenant, sandbox_id, "exec/stream"),
                                            content=body.model_dump_json(),
                                            headers={"content-type": "application/json"})
        return chunks

    async def write_file(self, tenant: str, sandbox_id: str, path: str, content: bytes | AsyncIterator[bytes],
                         mode: int = 0o644) -> int:
        response = await self.nodes.request("PUT", await self._url(tenant, sandbox_id, "files"),
                                            params={"path": path, "mode": f"{mode:o}"}, content=content)
        return FileWritten.model_validate_json(response.content).size

    async def open_file(self, tenant: str, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        _, body = await self.nodes.stream("GET", await self._url(tenant, sandbox_id, "files"), params={"path": path})
        return body

    async def list_files(self, tenant: str, sandbox_id: str, path: str) -> list[FileInfo]:
        response = await self.nodes.request("GET", await self._url(tenant, sandbox_id, "files"), params={"path": path})
        if not response.headers.get("content-type", "").startswith("application/json"):
            raise BadRequest(f"{path} is not a directory", loc=["query", "path"], code="not_a_directory")
        return [FileInfo.model_validate(item) for item in response.json()]

    async def stat(self, tenant: str, sandbox_id: str, path: str) -> FileInfo:
        response = await self.nodes.request("GET", await self._url(tenant, sandbox_id, "files/stat"),
                                            params={"path": path})
        return FileInfo.model_validate_json(response.content)

    async def port_request(self, tenant: str, sandbox_id: str, port: int, path: str, request: Request,
                           ) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        """Forward an HTTP request to ``port`` inside the sandbox (through its node-agent, which
        connects inside the sandbox); the response and its body, streamed."""
        url = await self._url(tenant, sandbox_id, f"ports/{port}")
        url += "/" + "/".join(path_segment(part) for part in path.split("/")) if path else "/"
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in INGRESS_DROPPED]
        body = request.stream() if request.method not in ("GET", "HEAD") else None
        return await self.nodes.stream(request.method, url, params=request.query_params.multi_items(),
                                       headers=headers, content=body,
                                       is_error=lambda r: INGRESS_MARK not in r.headers and r.status_code >= 400)

    async def port_websocket(self, tenant: str, sandbox_id: str, port: int, path: str, query: str,
                             subprotocols: list[str]) -> ClientConnection:
        """A WebSocket to ``port`` inside the sandbox, through its node-agent."""
        url = await self._url(tenant, sandbox_id, f"ports/{port}")
        url += "/" + "/".join(path_segment(part) for part in path.split("/")) if path else "/"
        url = "ws" + url.removeprefix("http") + (f"?{query}" if query else "")
        try:
            return await ws_connect(url, additional_headers=self.nodes.headers, subprotocols=subprotocols or None,
                                    proxy=None, compression=None)
        except InvalidStatus as exc:
            raise CorralError(f"node-agent refused the WebSocket ({exc.response.status_code})",
                              status_code=exc.response.status_code) from None
        except (OSError, InvalidHandshake) as exc:
            raise ServiceUnavailable(f"port {port} of sandbox {sandbox_id}: {exc}") from None

    async def pause(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        await self.nodes.request("POST", await self._url(tenant, sandbox_id, "pause", _LIVE))
        return await self.sandboxes.get(tenant, sandbox_id)

    async def resume(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        await self.nodes.request("POST", await self._url(tenant, sandbox_id, "resume", _LIVE))
        return await self.sandboxes.get(tenant, sandbox_id)

    async def set_network(self, tenant: str, sandbox_id: str, network: NetworkPolicy) -> SandboxRecord:
        """New egress rules for a running (or paused) sandbox, in force when this returns."""
        record, node = await self.sandboxes.node_for(tenant, sandbox_id, _LIVE)
        if not isinstance(record.spec.network, NetworkPolicy):
            raise Conflict(f"sandbox {sandbox_id} was created with network 'none' and has no network interface; "
                           "create it with an allowlist (even an empty one) to change its rules later",
                           loc=["path", "sandbox_id"], code="network_none")
        if self.sandboxes.network is not None:
            await self.sandboxes.network.require(network, loc=("body",))
        await self.nodes.request("PUT", node_url(node, "v1", "sandboxes", sandbox_id, "network"),
                                 content=network.model_dump_json(), headers={"content-type": "application/json"})
        await self.sandboxes.store.set_sandbox_spec(sandbox_id, record.spec.model_copy(update={"network": network}))
        return await self.sandboxes.get(tenant, sandbox_id)

    async def network_state(self, tenant: str, sandbox_id: str) -> dict:
        record, node = await self.sandboxes.node_for(tenant, sandbox_id, _LIVE)
        response = await self.nodes.request("GET", node_url(node, "v1", "sandboxes", sandbox_id, "network"))
        return {"network": record.spec.network if isinstance(record.spec.network, str)
                else record.spec.network.model_dump(mode="json"), **response.json()}

    async def usage(self, tenant: str, sandbox_id: str) -> Usage:
        """What the sandbox has used so far, read on its node now."""
        response = await self.nodes.request("GET", await self._url(tenant, sandbox_id, "usage", _LIVE))
        return Usage.model_validate_json(response.content)

    async def screenshot(self, tenant: str, sandbox_id: str) -> bytes:
        """The screen as PNG bytes (a paused VM still shows its last frame)."""
        response = await self.nodes.request("GET", await self._url(tenant, sandbox_id, "screen", _LIVE))
        return response.content

    async def send_input(self, tenant: str, sandbox_id: str, body: InputRequest) -> int:
        response = await self.nodes.request("POST", await self._url(tenant, sandbox_id, "input"),
                                            content=body.model_dump_json(),
                                            headers={"content-type": "application/json"})
        return InputSent.model_validate_json(response.content).sent
