"""The synchronous SDK: ``Corral`` → ``corral.sandboxes`` → ``Sandbox``.

    with Corral(url, api_key) as corral:
        with corral.sandboxes.create("busybox") as sb:
            print(sb.exec("echo hi").stdout)

``AsyncCorral`` (``corral.aio``) is the same client run by the async transport; both run the
one definition of each call (``corral._calls``, ``corral._transport``).
"""

import httpx

from corral._common import connect
from corral._transport import SyncTransport
from corral.admin import Admin, Usage
from corral.images import Environments, Images, Layers
from corral.jobs import Jobs
from corral.nodes import Nodes
from corral.rollouts import Rollouts
from corral.sandboxes import Sandbox, Sandboxes
from corral.snapshots import Snapshots

__all__ = ["Corral", "Sandbox", "Sandboxes"]


class Corral:
    def __init__(self, url: str | None = None, api_key: str | None = None, timeout: float = 300.0):
        self.api = connect(url, api_key, timeout)
        self._transport = SyncTransport(self.api.get_httpx_client)
        self.sandboxes = Sandboxes(self)
        self.rollouts = Rollouts(self)
        self.jobs = Jobs(self)
        self.snapshots = Snapshots(self)
        self.layers = Layers(self)
        self.environments = Environments(self)
        self.nodes = Nodes(self)
        self.admin = Admin(self)
        self._usage = Usage(self)
        self.images = Images(self)

    @property
    def http(self) -> httpx.Client:
        """The underlying httpx client (auth set), for raw and streaming calls."""
        return self.api.get_httpx_client()

    def usage(self) -> dict:
        """Your tenant's usage: ``current`` (live sandboxes, image bytes) and ``totals`` (billing)."""
        return self._usage.usage()

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Corral":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
