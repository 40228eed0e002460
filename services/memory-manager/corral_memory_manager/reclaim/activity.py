"""The node-agent's data-path activity of its sandboxes (its internal ``GET /v1/activity``),
read by the reclaim pass from its thread: a blocking client."""

import httpx

from corral_common.contracts.node import SandboxActivity
from corral_common.contracts.node_client import NodeAgentSyncClient


class NodeAgentActivity:
    def __init__(self, node_agent_url: str, internal_token: str,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.node_agent_url = node_agent_url
        self.client = NodeAgentSyncClient(internal_token, timeout_s=3.0, transport=transport)

    def __call__(self) -> list[SandboxActivity]:
        return self.client.activity(self.node_agent_url)

    def close(self) -> None:
        self.client.close()
