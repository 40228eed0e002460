"""The api's environment check before a create: its answers (422 unknown_environment, 503)
for every name, including names that are not one URL path segment."""

import httpx
import pytest

from corral_api.sandboxes.service import EnvironmentCatalog
from corral_common.contracts.images import ImageServiceClient
from corral_common.web.errors import ServiceUnavailable, Unprocessable


def _catalog(calls: list[str]) -> EnvironmentCatalog:
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.raw_path.decode())
        if request.url.path == "/v1/environments/busybox":
            return httpx.Response(200, json={"name": "busybox", "layers": [
                {"kind": "base", "name": "busybox", "version": "1", "digest": "sha256:" + "a" * 64, "size": 1}]})
        if request.url.path == "/v1/environments":  # the list
            return httpx.Response(200, json=[])
        if request.url.path == "/v1/environments/broken":
            return httpx.Response(500)
        if request.url.path == "/v1/environments/down":
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(404, json={"error": {"code": "not_found"}})

    return EnvironmentCatalog(ImageServiceClient("http://images", transport=httpx.MockTransport(handler)))


async def test_known_environment_is_asked_once():
    calls: list[str] = []
    catalog = _catalog(calls)
    await catalog.require("busybox")
    await catalog.require("busybox")
    assert calls == ["/v1/environments/busybox"]


@pytest.mark.parametrize("name", ["nope", "busybox?x", "busybox#x", "a/b", ".", "..", "bad\nname", "nul\x00"])
async def test_unknown_environment_is_422_whatever_the_name(name):
    # Unescaped, "busybox?x" asked for busybox, "." for the list, and a control character
    # made httpx raise InvalidURL (a 500).
    calls: list[str] = []
    with pytest.raises(Unprocessable) as exc:
        await _catalog(calls).require(name)
    assert exc.value.status_code == 422 and exc.value.code == "unknown_environment"
    assert exc.value.loc == ["body", "environment"] and exc.value.message == f"unknown environment {name!r}"
    assert len(calls) == 1 and calls[0].count("/") == 3


@pytest.mark.parametrize("name,message", [("broken", "image-service answered 500"),
                                          ("down", "image-service unreachable: ConnectError: connection refused")])
async def test_image_service_trouble_is_503(name, message):
    with pytest.raises(ServiceUnavailable) as exc:
        await _catalog([]).require(name)
    assert exc.value.status_code == 503 and exc.value.message == message
