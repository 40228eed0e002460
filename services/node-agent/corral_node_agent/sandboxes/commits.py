"""Committing a sandbox's writable layer: the backend writes it as an OCI diff tar, which is
uploaded to image-service as a ``diff`` layer of the sandbox's tenant.

The tar is spooled on the node's disk (at most the sandbox's disk_mb) and streamed from
there; image-service's answer (201/200, or its 4xx: a taken name:version, the tenant's
storage quota) is handed back as it is.
"""

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator

import anyio
import httpx

from corral_common.contracts.node import CommitReply, CommitRequest
from corral_common.web.errors import CorralError, raise_for_upstream
from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from corral_node_agent.backends.base import SandboxBackend


class LayerUploads:
    def __init__(self, image_service_url: str, internal_token: str, spool_dir: str, timeout_s: float = 900.0):
        headers = {INTERNAL_TOKEN_HEADER: internal_token} if internal_token else {}
        self.http = httpx.AsyncClient(base_url=image_service_url.rstrip("/"), headers=headers,
                                      timeout=httpx.Timeout(timeout_s, connect=5.0))
        self.spool_dir = spool_dir
        # A previous run that died mid-commit left its spool file: nothing will upload it now.
        with contextlib.suppress(OSError):
            for name in os.listdir(spool_dir):
                if name.endswith(".diff.tar"):
                    os.unlink(os.path.join(spool_dir, name))

    async def aclose(self) -> None:
        await self.http.aclose()

    def spool_path(self) -> str:
        os.makedirs(self.spool_dir, mode=0o700, exist_ok=True)
        fd, path = tempfile.mkstemp(dir=self.spool_dir, suffix=".diff.tar")
        os.close(fd)
        return path

    async def upload_diff(self, path: str, request: CommitRequest) -> tuple[CommitReply, int]:
        """The diff tar at ``path`` as layer ``request`` of kind diff; image-service's layer and
        status (201 new, 200 the same content again)."""
        async def body() -> AsyncIterator[bytes]:
            async with await anyio.open_file(path, "rb") as fh:
                while piece := await fh.read(1 << 20):
                    yield piece

        try:
            response = await self.http.post("/v1/layers", params={**request.model_dump(exclude_none=True), "kind": "diff"},
                                            content=body(), headers={"Content-Type": "application/x-tar"})
        except httpx.HTTPError as exc:
            raise CorralError(f"image-service unreachable: {exc.__class__.__name__}", code="image_unavailable",
                              status_code=502) from exc
        if response.status_code >= 500:
            raise CorralError(f"image-service answered {response.status_code}", code="image_unavailable",
                              status_code=502)
        raise_for_upstream(response, "image_error", "image-service error")
        return CommitReply.model_validate(response.json()), response.status_code

    async def commit(self, backend: SandboxBackend, sandbox_id: str,
                     request: CommitRequest) -> tuple[CommitReply, int]:
        """The sandbox's writable layer, written by its backend into a spool file, uploaded as
        a ``diff`` layer; the spool file goes whatever happens. Returns image-service's layer
        and status."""
        path = self.spool_path()
        try:
            await backend.commit_diff(sandbox_id, path)
            return await self.upload_diff(path, request)
        finally:
            await asyncio.to_thread(os.unlink, path)
