"""A commit's upload to image-service: the request as CommitRequest's fields (kind diff, nothing
for a quota not given), image-service's layer read as CommitReply, and that reply passed on
as the same JSON image-service sent."""

import json

import httpx

from corral_common.contracts.node import CommitReply, CommitRequest
from corral_node_agent.sandboxes.commits import LayerUploads

LAYER = {"owner": "acme", "kind": "diff", "name": "app", "version": "2", "ref": "app:2",
         "digest": "sha256:" + "ab" * 32, "size": 1234, "created_at": "2026-12-07T20:00:00.123456"}


async def test_a_commit_uploads_its_request_and_reads_the_layer(tmp_path):
    seen: list[httpx.Request] = []

    async def image_service(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        assert await request.aread() == b"tar bytes"
        return httpx.Response(201, content=json.dumps(LAYER).encode(), headers={"Content-Type": "application/json"})

    uploads = LayerUploads("http://image-service", "", str(tmp_path))
    uploads.http = httpx.AsyncClient(base_url="http://image-service", transport=httpx.MockTransport(image_service))
    spool = tmp_path / "x.diff.tar"
    spool.write_bytes(b"tar bytes")
    reply, status = await uploads.upload_diff(str(spool), CommitRequest(name="app", version="2", owner="acme"))
    await uploads.aclose()
    assert dict(seen[0].url.params) == {"name": "app", "version": "2", "owner": "acme", "kind": "diff"}
    assert isinstance(reply, CommitReply) and status == 201
    assert reply.model_dump(mode="json") == LAYER  # what the node answers is what image-service sent
