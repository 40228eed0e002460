"""The image-service contract: the callers' models still match what image-service answers,
and the shared client escapes names, sends the token and names every failure."""

import asyncio
import time
from datetime import UTC, datetime
from typing import get_args

import httpx
import pytest

from corral_common.contracts.images import (
    ChunkIndex,
    DiskImage,
    Environment,
    EnvironmentCache,
    EnvironmentLayer,
    ImageNotFound,
    ImageServiceClient,
    ImageServiceUnreachable,
    MalformedReply,
    UnexpectedStatus,
    path_segment,
)
from corral_common.disk_images import DISK_IMAGE_FORMATS
from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from corral_image_service.chunks.schemas import ChunkIndexOut
from corral_image_service.disk_images.schemas import DiskFormat, DiskImageOut
from corral_image_service.environments import schemas as environments
from corral_image_service.layers.schemas import LayerKind

D = "sha256:" + "a" * 64
C = "sha256:" + "c" * 64
NOW = datetime.now(UTC)


@pytest.mark.parametrize("contract,producer", [
    (Environment, environments.EnvironmentOut), (EnvironmentLayer, environments.EnvironmentLayer),
    (DiskImage, DiskImageOut), (ChunkIndex, ChunkIndexOut)])
def test_every_field_a_caller_reads_is_one_image_service_sends(contract, producer):
    assert set(contract.model_fields) <= set(producer.model_fields)


def test_image_service_replies_parse_into_the_contract():
    layer = environments.EnvironmentLayer(kind=LayerKind.base, name="busybox", version="1", digest=D, size=9)
    env = environments.EnvironmentOut(name="bb", base="busybox:1", workspace=None, toolkit=None, layers=[layer],
                                      created_at=NOW)
    assert Environment.model_validate_json(env.model_dump_json()).layers == (
        EnvironmentLayer(kind="base", name="busybox", version="1", digest=D, size=9),)
    disk = DiskImageOut(name="desktop", version="1", digest=D, format=DiskFormat.qcow2, size_bytes=5,
                        virtual_size_bytes=9, created_at=NOW)
    assert DiskImage.model_validate_json(disk.model_dump_json()).format == "qcow2"
    index = ChunkIndexOut(digest=D, size=8192 + 1, chunk_size=8192, chunks=[C, C])
    assert ChunkIndex.model_validate_json(index.model_dump_json()).chunks == (C, C)
    assert set(get_args(DiskImage.model_fields["format"].annotation)) == set(DISK_IMAGE_FORMATS) == {
        f.value for f in DiskFormat}


def test_names_are_one_path_segment():
    assert path_segment("py3.12") == "py3.12"
    assert path_segment("a/b") == "a%2Fb"
    assert path_segment("busybox?x") == "busybox%3Fx"
    assert path_segment("bad\nname") == "bad%0Aname"
    assert path_segment(".") == "%2E" and path_segment("..") == "%2E%2E"


def _client(handler, **kw) -> ImageServiceClient:
    return ImageServiceClient("http://images/", transport=httpx.MockTransport(handler), **kw)


async def test_client_escapes_names_and_sends_the_token():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.raw_path.decode(), request.headers.get(INTERNAL_TOKEN_HEADER)))
        if request.url.raw_path.startswith(b"/v1/disk-images/"):
            return httpx.Response(200, json={"name": "d", "version": "v/1", "digest": D, "format": "raw"})
        return httpx.Response(200, json={"name": "a/b", "layers": [
            {"kind": "base", "name": "b", "version": "1", "digest": D, "size": 1}]})

    client = _client(handler, internal_token="s3cret")
    assert (await client.environment("a/b")).layers[0].digest == D
    await client.environment("..")
    await client.disk_image("d", "v/1")
    await client.disk_image("d")
    await client.aclose()
    assert seen == [("/v1/environments/a%2Fb", "s3cret"), ("/v1/environments/%2E%2E", "s3cret"),
                    ("/v1/disk-images/d/v%2F1", "s3cret"), ("/v1/disk-images/d", "s3cret")]
    untokened = _client(lambda r: httpx.Response(200, content=str(INTERNAL_TOKEN_HEADER in r.headers).encode()))
    assert await untokened.chunk(C) == b"False"
    await untokened.aclose()


async def test_client_failures_are_named():
    def handler(request: httpx.Request) -> httpx.Response:
        name = request.url.path.rsplit("/", 1)[-1]
        if name == "down":
            raise httpx.ConnectError("connection refused", request=request)
        if name == "broken":
            return httpx.Response(500)
        if name == "garbage":
            return httpx.Response(200, content=b"<html>")
        if name == "nolayers":
            return httpx.Response(200, json={"name": "nolayers"})
        if name == D:  # an index whose chunks do not cover the blob
            return httpx.Response(200, json={"digest": D, "size": 10_000, "chunk_size": 4096, "chunks": [C]})
        if name == C:  # another blob's index
            return httpx.Response(200, json={"digest": D, "size": 1, "chunk_size": 4096, "chunks": [C]})
        return httpx.Response(404)

    client = _client(handler)
    with pytest.raises(ImageNotFound) as exc:
        await client.environment("nope")
    assert exc.value.status_code == 404
    with pytest.raises(UnexpectedStatus, match="image-service answered 500") as exc:
        await client.environment("broken")
    assert exc.value.status_code == 500
    with pytest.raises(ImageServiceUnreachable, match="image-service unreachable: ConnectError: connection refused") as exc:
        await client.environment("down")
    assert isinstance(exc.value.cause, httpx.ConnectError)
    for name in ("garbage", "nolayers"):
        with pytest.raises(MalformedReply):
            await client.environment(name)
    for digest in (D, C):
        with pytest.raises(MalformedReply):
            await client.chunk_index(digest)
    with pytest.raises(ImageNotFound):
        await client.download_blob("sha256:" + "e" * 64, _never)
    await client.aclose()


async def _never(piece: bytes) -> None:
    raise AssertionError("no bytes expected")


async def test_client_streams_a_blob():
    blob = b"x" * (3 << 20)
    client = _client(lambda r: httpx.Response(200, content=blob))
    pieces: list[bytes] = []

    async def write(piece: bytes) -> None:
        pieces.append(piece)

    await client.download_blob(D, write)
    await client.aclose()
    assert b"".join(pieces) == blob and max(map(len, pieces)) <= 1 << 20


async def test_environment_cache_remembers_answers_not_failures():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path.endswith("/known"):
            return httpx.Response(200, json={"name": "known", "layers": []})
        return httpx.Response(404)

    cache = EnvironmentCache(_client(handler), ttl_s=60)
    assert (await cache.get("known")) == await cache.get("known")
    for _ in range(2):
        with pytest.raises(ImageNotFound):
            await cache.get("unknown")
    assert calls == ["/v1/environments/known", "/v1/environments/unknown", "/v1/environments/unknown"]
    cache.ttl_s = 0
    cache._known.clear()
    await cache.get("known")
    await cache.get("known")
    assert calls.count("/v1/environments/known") == 3
    await cache.client.aclose()


async def test_environment_cache_asks_once_for_concurrent_misses():
    calls, gate, asked = [], asyncio.Event(), asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        asked.set()
        await gate.wait()
        return httpx.Response(200, json={"name": "bb", "layers": []})

    cache = EnvironmentCache(_client(handler), ttl_s=60)
    waiting = [asyncio.ensure_future(cache.get("bb")) for _ in range(8)]
    await asked.wait()
    waiting[0].cancel()  # one caller giving up does not fail the others
    gate.set()
    results = await asyncio.gather(*waiting[1:])
    assert calls == ["/v1/environments/bb"] and all(r.name == "bb" for r in results)
    await cache.client.aclose()


async def test_environment_cache_stands_in_its_last_answer_for_a_failing_image_service():
    answer: list = [httpx.Response(200, json={"name": "bb", "layers": []})]

    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(answer[0], Exception):
            raise answer[0]
        return answer[0]

    cache = EnvironmentCache(_client(handler), ttl_s=60, stale_s=600)
    first = await cache.get("bb")
    expire = lambda ago: cache._known.update({("", "bb"): (time.monotonic() - ago, first)})  # noqa: E731
    for failure in (httpx.Response(503), httpx.Response(429), httpx.ReadTimeout("")):
        answer[0] = failure
        expire(1)
        assert await cache.get("bb") == first
    answer[0] = httpx.ReadTimeout("")
    expire(601)  # too old to stand in
    with pytest.raises(ImageServiceUnreachable, match="unreachable: ReadTimeout"):
        await cache.get("bb")
    for definite, error in ((httpx.Response(404), ImageNotFound), (httpx.Response(400), UnexpectedStatus),
                            (httpx.Response(200, json={"layers": "no"}), MalformedReply)):
        answer[0] = definite
        expire(1)
        with pytest.raises(error):
            await cache.get("bb")
    await cache.client.aclose()
