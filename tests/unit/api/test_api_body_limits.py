"""corral_api.body_limits: every route's body is counted as it arrives, whatever its framing,
and refused with a JSON 413 naming the limit before a parser holds it; corral_api.multipart
streams the parts of a form."""

from types import SimpleNamespace

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel

from corral_api.body_limits import BodyLimitMiddleware, body_limit
from corral_api.compat.e2b.errors import E2bRoute
from corral_api.multipart import multipart_parts
from corral_common.web.errors import BadRequest
from corral_common.web.handlers import install_error_handlers

KB = 1024


class Command(BaseModel):
    cmd: str


def make_app(reads: list[int]) -> FastAPI:
    app = FastAPI()
    app.state.settings = SimpleNamespace(max_body_kb=4, max_upload_mb=1, fncall=SimpleNamespace(max_body_mb=2))
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware)

    @app.post("/exec")
    async def exec_(body: Command) -> dict:
        return {"len": len(body.cmd)}

    @app.put("/upload", openapi_extra=body_limit("max_upload_mb"))
    async def upload(request: Request) -> dict:
        async for chunk in request.stream():
            reads.append(len(chunk))
        return {"read": sum(reads)}

    @app.post("/nested", openapi_extra=body_limit("fncall.max_body_mb"))
    async def nested(request: Request) -> dict:
        return {"read": len(await request.body())}

    e2b = APIRouter(route_class=E2bRoute)

    @e2b.post("/files", openapi_extra=body_limit("max_upload_mb"))
    async def files(request: Request) -> dict:
        return {"read": len(await request.body())}

    app.include_router(e2b)
    return app


async def chunks(total: int, size: int = 16 * KB, pulled: list[int] | None = None):
    sent = 0
    while sent < total:
        n = min(size, total - sent)
        sent += n
        if pulled is not None:
            pulled.append(n)
        yield b"x" * n


@pytest.fixture
def client():
    reads: list[int] = []
    transport = httpx.ASGITransport(app=make_app(reads))
    return httpx.AsyncClient(transport=transport, base_url="http://api"), reads


async def test_a_json_body_within_the_default_limit_is_parsed(client):
    http, _ = client
    response = await http.post("/exec", json={"cmd": "x" * 3000})
    assert response.status_code == 200 and response.json() == {"len": 3000}


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_json_body_over_the_default_limit_is_a_413_naming_it(client, chunked):
    http, _ = client
    body = b'{"cmd": "' + b"x" * (5 * KB) + b'"}'
    if chunked:  # no Content-Length: counted as it arrives
        async def stream():
            for i in range(0, len(body), 1000):
                yield body[i:i + 1000]
        response = await http.post("/exec", content=stream(), headers={"content-type": "application/json"})
    else:
        response = await http.post("/exec", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "payload_too_large" and error["limit_bytes"] == 4 * KB
    assert "4096 bytes (max_body_kb)" in error["message"] and error["details"][0]["loc"] == ["body"]


async def test_a_declared_length_over_the_limit_is_refused_before_a_byte_is_read(client):
    http, reads = client
    pulled: list[int] = []
    response = await http.put("/upload", content=chunks(3 << 20, pulled=pulled),
                              headers={"content-length": str(3 << 20)})
    assert response.status_code == 413 and "1048576 bytes (max_upload_mb)" in response.json()["error"]["message"]
    assert reads == []


async def test_a_chunked_upload_stops_at_its_routes_limit(client):
    http, reads = client
    pulled: list[int] = []
    response = await http.put("/upload", content=chunks(8 << 20, pulled=pulled))
    assert response.status_code == 413
    assert sum(reads) <= 1 << 20  # the route never saw a byte past the limit
    assert sum(pulled) <= (1 << 20) + 16 * KB  # nor was more of the body taken from the client


async def test_a_route_declares_a_larger_limit_from_a_nested_setting(client):
    http, _ = client
    assert (await http.post("/nested", content=chunks(2 << 20))).json() == {"read": 2 << 20}
    assert (await http.post("/nested", content=chunks((2 << 20) + 1))).status_code == 413


async def test_an_e2b_route_answers_in_e2bs_shape(client):
    http, _ = client
    response = await http.post("/files", content=chunks(2 << 20))
    assert response.status_code == 413
    body = response.json()
    assert body["code"] == 413 and "1048576 bytes" in body["message"]


def form(*parts: tuple[str, str | None, bytes], boundary: str = "b0undary") -> bytes:
    out = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


async def split(data: bytes, size: int):
    for i in range(0, len(data), size):
        yield data[i:i + size]


@pytest.mark.parametrize("size", [1, 7, 1 << 16])
async def test_multipart_parts_stream_in_body_order(size):
    body = form(("target_path", None, b"/tmp/x"), ("file", "/a/b.bin", b"\x00\r\n--" * 1000), ("file", "c", b""))
    seen = []
    async for part in multipart_parts(split(body, size), "multipart/form-data; boundary=b0undary"):
        if part.filename is None:
            seen.append((part.name, None, await part.text()))
        else:
            seen.append((part.name, part.filename, b"".join([c async for c in part.content])))
    assert seen == [("target_path", None, "/tmp/x"), ("file", "/a/b.bin", b"\x00\r\n--" * 1000), ("file", "c", b"")]


async def test_a_part_left_unread_is_skipped():
    body = form(("file", "one", b"1" * 5000), ("file", "two", b"2"))
    names = [part.filename async for part in multipart_parts(split(body, 100), "multipart/form-data; boundary=b0undary")]
    assert names == ["one", "two"]


@pytest.mark.parametrize("body,ctype", [
    (form(("file", "one", b"1"))[:-20], "multipart/form-data; boundary=b0undary"),  # cut short
    (b"not a form", "multipart/form-data; boundary=b0undary"),
    (form(("file", "one", b"1")), "multipart/form-data"),  # no boundary
])
async def test_a_malformed_form_is_a_400(body, ctype):
    with pytest.raises(BadRequest):
        async for part in multipart_parts(split(body, 10), ctype):
            async for _ in part.content:
                pass
