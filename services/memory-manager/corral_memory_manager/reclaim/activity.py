"""The node-agent's data-path activity of its sandboxes (its internal ``GET /v1/activity``),
read by the reclaim pass from its thread: a blocking client."""

import httpx
from pydantic import TypeAdapter

from corral_common.contracts.memory import SandboxActivity
from corral_common.internal import INTERNAL_TOKEN_HEADER

_ACTIVITIES = TypeAdapter(list[SandboxActivity])


class NodeAgentActivity:
    def __init__(self, node_agent_url: str, internal_token: str,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.client = httpx.Client(base_url=node_agent_url.rstrip("/"), timeout=3.0, transport=transport,
                                   headers={INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {})

    def __call__(self) -> list[SandboxActivity]:
        resp = self.client.get("/v1/activity")
        resp.raise_for_status()
        return _ACTIVITIES.validate_python(resp.json())

    def close(self) -> None:
        self.client.close()
