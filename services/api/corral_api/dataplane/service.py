"""The data path to a sandbox's node-agent, shared by the sandbox endpoints and rollouts.

Each call finds the node that runs the sandbox (tenant-checked, 409 unless running) and
forwards the request through the process's one ``NodeAgentClient`` (corral_common.contracts.node_client).
"""

from collections.abc import AsyncIterator

import httpx
from starlette.requests import Request
from websockets.asyncio.client import ClientConnection

from corral_api.sandboxes.service import SandboxService
from corral_common.contracts.exec import INGRESS_MARK
from corral_common.contracts.node import ExecRequest, ExecResult, FileInfo, InputRequest, NetworkPolicy, Usage
from corral_common.contracts.node_client import NodeAgentClient
from corral_common.contracts.sandboxes import SandboxState
from corral_common.store.state_records import SandboxRecord
from corral_common.web.errors import BadRequest, Conflict

# Request headers ingress does not pass into a sandbox: Corral's credentials, and hop-by-hop.
INGRESS_DROPPED = frozenset({"authorization", "x-api-key", "x-access-token", "e2b-traffic-access-token",
                             "x-corral-internal-token", "host", "connection", "keep-alive", "te", "trailer",
                             "transfer-encoding", "upgrade", "proxy-authorization"})
# Response headers it does not pass back (hop-by-hop; the api frames the body itself).
INGRESS_RESPONSE_DROPPED = frozenset({"connection", "keep-alive", "transfer-encoding", "trailer", "upgrade",
                                      "content-length", INGRESS_MARK})

_LIVE = frozenset({SandboxState.running, SandboxState.paused})


class SandboxDataPath:
    def __init__(self, sandboxes: SandboxService, nodes: NodeAgentClient):
        self.sandboxes = sandboxes
        self.nodes = nodes

    async def _node(self, tenant: str, sandbox_id: str,
                    states: frozenset[SandboxState] = frozenset({SandboxState.running})) -> str:
        """The base URL of the node that runs the sandbox."""
        _, node = await self.sandboxes.node_for(tenant, sandbox_id, states)
        return node.url

    async def exec(self, tenant: str, sandbox_id: str, body: ExecRequest) -> ExecResult:
        return await self.nodes.exec(await self._node(tenant, sandbox_id), sandbox_id, body)

    async def exec_stream(self, tenant: str, sandbox_id: str, body: ExecRequest) -> AsyncIterator[bytes]:
        return await self.nodes.exec_stream(await self._node(tenant, sandbox_id), sandbox_id, body)

    async def write_file(self, tenant: str, sandbox_id: str, path: str, content: bytes | AsyncIterator[bytes],
                         mode: int = 0o644) -> int:
        return (await self.nodes.write_file(await self._node(tenant, sandbox_id), sandbox_id, path, content,
                                            mode)).size

    async def open_file(self, tenant: str, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        return await self.nodes.read_file(await self._node(tenant, sandbox_id), sandbox_id, path)

    async def list_files(self, tenant: str, sandbox_id: str, path: str) -> list[FileInfo]:
        entries = await self.nodes.list_dir(await self._node(tenant, sandbox_id), sandbox_id, path)
        if entries is None:
            raise BadRequest(f"{path} is not a directory", loc=["query", "path"], code="not_a_directory")
        return entries

    async def stat(self, tenant: str, sandbox_id: str, path: str) -> FileInfo:
        return await self.nodes.stat(await self._node(tenant, sandbox_id), sandbox_id, path)

    async def port_request(self, tenant: str, sandbox_id: str, port: int, path: str, request: Request,
                           ) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        """Forward an HTTP request to ``port`` inside the sandbox (through its node-agent, which
        connects inside the sandbox); the response and its body, streamed."""
        node = await self._node(tenant, sandbox_id)
        headers = [(k, v) for k, v in request.headers.raw if k.decode("latin-1").lower() not in INGRESS_DROPPED]
        body = request.stream() if request.method not in ("GET", "HEAD") else None
        return await self.nodes.port_request(node, sandbox_id, port, path, request.method,
                                             params=request.query_params.multi_items(), headers=headers, content=body)

    async def port_websocket(self, tenant: str, sandbox_id: str, port: int, path: str, query: str,
                             subprotocols: list[str]) -> ClientConnection:
        """A WebSocket to ``port`` inside the sandbox, through its node-agent."""
        node = await self._node(tenant, sandbox_id)
        return await self.nodes.port_websocket(node, sandbox_id, port, path, query, subprotocols)

    async def pause(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        await self.nodes.pause(await self._node(tenant, sandbox_id, _LIVE), sandbox_id)
        return await self.sandboxes.get(tenant, sandbox_id)

    async def resume(self, tenant: str, sandbox_id: str) -> SandboxRecord:
        await self.nodes.resume(await self._node(tenant, sandbox_id, _LIVE), sandbox_id)
        return await self.sandboxes.get(tenant, sandbox_id)

    async def set_network(self, tenant: str, sandbox_id: str, network: NetworkPolicy) -> SandboxRecord:
        """New egress rules for a running (or paused) sandbox, in force when this returns."""
        record, node = await self.sandboxes.node_for(tenant, sandbox_id, _LIVE)
        if not isinstance(record.spec.network, NetworkPolicy):
            raise Conflict(f"sandbox {sandbox_id} was created with network 'none' and has no network interface; "
                           "create it with an allowlist (even an empty one) to change its rules later",
                           loc=["path", "sandbox_id"], code="network_none")
        await self.sandboxes.require_network(network, loc=("body",))
        await self.nodes.set_network(node.url, sandbox_id, network)
        await self.sandboxes.record_network(record, network)
        return await self.sandboxes.get(tenant, sandbox_id)

    async def network_state(self, tenant: str, sandbox_id: str) -> dict:
        record, node = await self.sandboxes.node_for(tenant, sandbox_id, _LIVE)
        state = await self.nodes.network(node.url, sandbox_id)
        return {"network": record.spec.network if isinstance(record.spec.network, str)
                else record.spec.network.model_dump(mode="json"), **state.model_dump(mode="json")}

    async def usage(self, tenant: str, sandbox_id: str) -> Usage:
        """What the sandbox has used so far, read on its node now."""
        return await self.nodes.usage(await self._node(tenant, sandbox_id, _LIVE), sandbox_id)

    async def screenshot(self, tenant: str, sandbox_id: str) -> bytes:
        """The screen as PNG bytes (a paused VM still shows its last frame)."""
        return await self.nodes.screen(await self._node(tenant, sandbox_id, _LIVE), sandbox_id)

    async def send_input(self, tenant: str, sandbox_id: str, body: InputRequest) -> int:
        return (await self.nodes.send_input(await self._node(tenant, sandbox_id), sandbox_id, body)).sent
