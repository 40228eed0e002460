"""The node-agent's HTTP API: one request and one reply model per route, as the node-agent
declares them and as its callers (the api, the memory-manager) read them.

The node-agent's routers import their models from here and declare them as response
models; ``corral_common.contracts.node_client.NodeAgentClient`` is the one client for them.
``tests/contract/test_node_contract.py`` fails on a node route whose request or reply is not
a model of this module (the raw-bytes routes excepted, listed in ``RAW_ROUTES``), and runs
the client against a live node-agent.

Models that already had a home are re-exported, not copied: exec and files
(``corral_common.contracts.exec``), usage (``corral_common.contracts.sandboxes``), the network allowlist
(``corral_common.contracts.network``), screen and snapshots (``corral_common.contracts.display``), balloons and
activity (``contracts.memory``).

    POST /v1/sandboxes/{id}/exec            ExecRequest → ExecResult
    POST /v1/sandboxes/{id}/exec/stream     ExecRequest → NDJSON of ExecChunk (raw)
    PUT  /v1/sandboxes/{id}/files?path&mode raw body → FileWritten
    GET  /v1/sandboxes/{id}/files?path      a file's bytes (raw), or a directory's list[FileInfo]
    GET  /v1/sandboxes/{id}/files/stat      FileInfo
    GET  /v1/sandboxes/{id}/usage           Usage
    GET  /v1/sandboxes/{id}/network         NetworkState
    PUT  /v1/sandboxes/{id}/network         NetworkPolicy → NetworkApplied
    POST /v1/sandboxes/{id}/pause, /resume  StateReply
    GET  /v1/sandboxes/{id}/balloon         BalloonState
    PUT  /v1/sandboxes/{id}/balloon         BalloonTarget → BalloonTarget
    GET  /v1/sandboxes/{id}/screen          PNG (raw)
    POST /v1/sandboxes/{id}/input           InputRequest → InputSent
    POST /v1/sandboxes/{id}/snapshot        SnapshotRequest → SnapshotSaved
    POST /v1/sandboxes/{id}/commit          CommitRequest → CommitReply (201 new, 200 the same again)
    *    /v1/sandboxes/{id}/ports/{port}/…  HTTP and WebSocket ingress (raw)
    DELETE /v1/snapshots/{id}?backend       204
    GET  /v1/activity                       list[SandboxActivity]
    GET  /v1/fncall/pools                   FncallPoolsStatus
    GET  /healthz                           NodeHealth
"""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from corral_common.contracts.display import InputRequest, InputSent, SnapshotRequest, SnapshotSaved
from corral_common.contracts.events import NetworkDenial
from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo, FileWritten
from corral_common.contracts.memory import HOUSEKEEPING_HEADER, BalloonState, BalloonTarget, SandboxActivity
from corral_common.contracts.network import NetworkPolicy
from corral_common.contracts.sandboxes import SandboxState, Usage
from corral_common.inputs import NAME_PATTERN, VERSION_PATTERN

__all__ = [
    "HOUSEKEEPING_HEADER", "RAW_ROUTES", "BalloonState", "BalloonTarget", "CommitReply", "CommitRequest",
    "ExecChunk", "ExecRequest", "ExecResult", "FileInfo", "FileWritten", "FncallPoolStatus", "FncallPoolsStatus",
    "InputRequest", "InputSent", "NetworkApplied", "NetworkDenial", "NetworkPolicy", "NetworkState", "NodeHealth",
    "SandboxActivity", "SnapshotRequest", "SnapshotSaved", "StateReply", "Usage",
]

# Routes whose body is bytes passed through, not a model: (method, path) as the node app
# declares them. Anything else the node serves has its models here.
RAW_ROUTES = frozenset({
    ("POST", "/v1/sandboxes/{sandbox_id}/exec/stream"),  # NDJSON, one ExecChunk per line
    ("GET", "/v1/sandboxes/{sandbox_id}/files"),  # a file's bytes, or a directory's list[FileInfo]
    ("GET", "/v1/sandboxes/{sandbox_id}/screen"),  # image/png
    ("*", "/v1/sandboxes/{sandbox_id}/ports/{port}/{path:path}"),  # HTTP/WebSocket ingress
    ("DELETE", "/v1/snapshots/{snapshot_id}"),  # 204, no body
    ("GET", "/metrics"),  # Prometheus text
})


class StateReply(BaseModel):
    """``POST /pause`` and ``/resume``: the sandbox's state once done (paused, running)."""

    state: SandboxState


class NetworkApplied(BaseModel):
    """``PUT /network``: the egress rules now in force."""

    network: NetworkPolicy


class NetworkState(BaseModel):
    """``GET /network``: the sandbox's egress counters and latest refusals."""

    counters: dict[str, int] = Field(description="tx_bytes, rx_bytes and denied; empty while the sandbox has "
                                                 "no egress (network 'none', or not attached yet)")
    denied: list[NetworkDenial] = Field(description="The latest refusals, oldest first")


class CommitRequest(BaseModel):
    """``POST /commit``: the writable layer as diff layer name:version of ``owner``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    version: str = Field(pattern=VERSION_PATTERN)
    owner: str = Field("", max_length=128)
    quota_bytes: int | None = Field(None, ge=0)


class CommitReply(BaseModel):
    """``POST /commit``: image-service's answer, passed on as it came (its ``LayerOut``: 201 a
    new layer, 200 the same content again); ``tests/unit/common/test_common_contracts_node.py``
    fails when a field here no longer exists there."""

    model_config = ConfigDict(extra="ignore")

    owner: str = ""
    kind: str
    name: str
    version: str
    ref: str
    digest: str
    size: int
    created_at: datetime


class FncallPoolStatus(BaseModel):
    runtime: str
    size: int
    busy: int
    min: int
    max: int
    queue_depth: int
    warm: bool
    calls_per_second: float


class FncallPoolsStatus(BaseModel):
    """``GET /v1/fncall/pools``: the node's fncall pools (node_id left out until they started)."""

    node_id: str | None = None
    status: str = Field(description="ready, starting, waiting for environment ..., not started")
    pools: list[FncallPoolStatus]


class NodeHealth(BaseModel):
    """``GET /healthz`` (no token needed)."""

    status: str
    node_id: str
    sandboxes: int
    backends: list[str]
