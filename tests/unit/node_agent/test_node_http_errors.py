"""The node-agent's errors as HTTP answers: one table, the same bodies the api passes on."""

import httpx
import pytest
from fastapi import FastAPI

from corral_node_agent import errors
from corral_node_agent.http_errors import HTTP_ERRORS, http_error, install_node_error_handlers


def _app(exc: Exception) -> FastAPI:
    app = FastAPI()
    install_node_error_handlers(app)

    @app.get("/boom")
    async def boom():
        raise exc

    return app


async def _get(exc: Exception) -> httpx.Response:
    transport = httpx.ASGITransport(app=_app(exc), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        return await client.get("/boom")


@pytest.mark.parametrize(("exc", "status", "code"), [
    (errors.SandboxPaused("sandbox s1 is paused", loc=["path", "sandbox_id"]), 409, "sandbox_paused"),
    (errors.EnvironmentNotFound("environment 'x' not found", loc=["body", "environment"]), 404,
     "environment_not_found"),
    (errors.Unsupported("ContainerBackend sandboxes have no display"), 409, "unsupported_by_backend"),
    (errors.GuestTimeout("guest agent did not answer within 60 s"), 504, "guest_agent_timeout"),
    (errors.BadInput("path must not contain '..'", loc=["query", "path"]), 400, "bad_request"),
    (errors.DiskFull("sandbox disk is full (disk_mb)", loc=["body"]), 507, "disk_full"),
    (errors.TooLarge("upload exceeds 1024 bytes", loc=["body"]), 413, "payload_too_large"),
])
async def test_a_node_error_answers_its_row_with_message_and_loc(exc, status, code):
    resp = await _get(exc)
    assert resp.status_code == status
    details = [{"loc": exc.loc, "msg": exc.message}] if exc.loc else []
    assert resp.json() == {"error": {"code": code, "message": exc.message, "details": details}}


async def test_what_has_no_row_stays_a_500_in_the_json_error_shape():
    resp = await _get(errors.RuntimeFailure("crun pause failed (1): ..."))
    assert resp.status_code == 500 and resp.headers["content-type"] == "application/json"
    error = resp.json()["error"]
    assert error["code"] == "internal_error" and error["details"] == []
    assert "crun" not in error["message"]  # the internals stay in the service's log
    with pytest.raises(LookupError):
        http_error(errors.StartFailed("no kernel"))


def test_every_row_is_a_node_error_and_the_most_specific_row_wins():
    assert all(issubclass(cls, errors.NodeAgentError) for cls in HTTP_ERRORS)
    assert http_error(errors.DiskImageNotFound("disk image 'x' not found")).code == "disk_image_not_found"
    assert http_error(errors.GuestLost("gone")).status_code == 502
    assert http_error(errors.GuestKitMissing("build it")).status_code == 503
