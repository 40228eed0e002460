"""Answers of the data-path routes that are not a node's reply passed on as it is."""

from pydantic import BaseModel, Field

from corral_common.contracts.events import NetworkDenial
from corral_common.contracts.network import Network


class NetworkCounters(BaseModel):
    tx_bytes: int = 0
    rx_bytes: int = 0
    denied: int = 0


class SandboxNetworkState(BaseModel):
    network: Network
    counters: NetworkCounters = Field(default_factory=NetworkCounters)
    denied: list[NetworkDenial] = Field(default_factory=list, description="The latest refusals, oldest first")
