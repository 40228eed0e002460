"""The per-tenant in-flight budget covers WebSockets and routes whose credential is not an
API key: an open WebSocket holds a slot until it closes; one over the budget is closed with
1013 (try again later) before it is accepted; another tenant is not affected; a route that
claims the slot itself (claim_tenant_slot) is refused with a 429 and gives the slot back."""

import asyncio
import contextlib

import pytest
from fastapi import FastAPI, Request, WebSocket
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from corral_api.auth.service import Principal
from corral_api.deps import Container, service_of
from corral_api.limits import (
    WS_TRY_AGAIN_LATER,
    Authenticator,
    TenantConcurrencyMiddleware,
    TenantLimiter,
    claim_tenant_slot,
)
from corral_common.web.handlers import install_error_handlers

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}


class Keys:
    async def authenticate(self, key: str) -> Principal | None:
        tenant = KEYS.get(key)
        return Principal(tenant=tenant, role="tenant", key_id=key) if tenant else None


@pytest.fixture
def app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.add_middleware(TenantConcurrencyMiddleware)
    app.state.services = Container.of({TenantLimiter: TenantLimiter(1), Authenticator: Keys()})

    @app.websocket("/ws")
    async def held_open(websocket: WebSocket) -> None:
        await websocket.accept()
        with contextlib.suppress(WebSocketDisconnect):
            await websocket.receive_text()  # open until the client closes it

    @app.get("/by-token/{tenant}")
    async def by_token(tenant: str, request: Request) -> dict:
        claim_tenant_slot(request, tenant)  # as E2B's envd token or a SWE-ReX token names the tenant
        await asyncio.sleep(0)
        return {"inflight": service_of(request, TenantLimiter).inflight(tenant)}

    return app


def test_an_open_websocket_holds_its_tenants_slot(app):
    limiter = app.state.services.get(TenantLimiter)
    with TestClient(app) as client:
        with client.websocket_connect("/ws", headers={"x-api-key": "key-a"}):
            assert limiter.inflight("tenant-a") == 1
            with pytest.raises(WebSocketDisconnect) as refused:
                with client.websocket_connect("/ws", headers={"x-api-key": "key-a"}):
                    pass
            assert refused.value.code == WS_TRY_AGAIN_LATER
            with client.websocket_connect("/ws", headers={"authorization": "Bearer key-b"}):
                assert limiter.inflight("tenant-b") == 1  # another tenant is not affected
            # A request named by a token counts too: the tenant is at its budget.
            answer = client.get("/by-token/tenant-a")
            assert answer.status_code == 429 and answer.json()["error"]["code"] == "tenant_concurrency_limit"
        assert limiter.inflight("tenant-a") == 0  # the closed socket gave its slot back
        with client.websocket_connect("/ws", headers={"x-api-key": "key-a"}):
            pass
        assert client.get("/by-token/tenant-a").json() == {"inflight": 1}
        assert limiter.inflight("tenant-a") == 0


def test_a_claim_on_a_request_with_an_api_key_takes_no_second_slot(app):
    with TestClient(app) as client:
        assert client.get("/by-token/tenant-a", headers={"x-api-key": "key-a"}).json() == {"inflight": 1}
