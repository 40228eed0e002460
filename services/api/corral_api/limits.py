"""Per-tenant concurrency: at most ``tenant_max_inflight`` requests of one tenant in flight on
this api replica; the next one is answered 429 with Retry-After at once.

Why in-process and not a Redis counter: the limit must hold when Redis itself is the scarce
resource (a counter there costs two round trips per request, on the very pool one tenant's
burst exhausts), and a replica that dies mid-request must not leave slots taken (a Redis
counter needs expiries and a sweeper for that). The price: the limit is per replica, so a
tenant gets at most R x tenant_max_inflight over R replicas (docs/security.md). It is a
plain counter, not a queue: a request over the limit never waits, so a burst costs the others
no more than its 429s.

The check runs before any route work (an ASGI middleware, which also sees a streamed answer
to its end): the tenant comes from the API key with the same cached lookup as
``auth.dependencies.current_tenant``; a request without a valid key goes on to its 401.
Requests that name their tenant another way (an E2B envd or traffic token, a SWE-ReX
runtime's token, SandboxFusion's key in the path) take their slot where that credential is
checked (``claim_tenant_slot``), and the middleware gives it back when the request ends, so no
route is outside the budget. WebSockets hold a slot while they are open: a tenant opening
sockets without end (each one an fd in the api and the node-agent) is refused like a burst of
requests (close code 1013, try again later).
"""

from collections import Counter
from typing import Protocol

from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from corral_api.deps import container_of
from corral_common.web.errors import TooManyRequests

# Where the middleware leaves (key, principal) for auth.dependencies.current_principal.
AUTHENTICATED_SCOPE_KEY = "corral.principal"
# Where it leaves the request's TenantSlot.
TENANT_SLOT_SCOPE_KEY = "corral.tenant_slot"
# WebSocket close code "try again later" (RFC 6455 registry).
WS_TRY_AGAIN_LATER = 1013


class Principal(Protocol):
    @property
    def tenant(self) -> str: ...


class Authenticator(Protocol):
    """Who an API key is (``corral_api.auth.service.ApiKeyService``, registered under this type
    too: the middleware runs below the auth domain, which imports this module)."""

    async def authenticate(self, key: str) -> Principal | None: ...


class TenantLimiter:
    def __init__(self, limit: int):
        self.limit = limit
        self._inflight: Counter[str] = Counter()

    def try_acquire(self, tenant: str) -> bool:
        if self._inflight[tenant] >= self.limit:
            return False
        self._inflight[tenant] += 1
        return True

    def release(self, tenant: str) -> None:
        self._inflight[tenant] -= 1
        if self._inflight[tenant] <= 0:
            del self._inflight[tenant]

    def inflight(self, tenant: str) -> int:
        return self._inflight[tenant]


class TenantSlot:
    """One request's place in its tenant's in-flight budget, taken at most once."""

    def __init__(self, limiter: TenantLimiter):
        self.limiter = limiter
        self.tenant: str | None = None

    def claim(self, tenant: str) -> bool:
        if self.tenant is not None:
            return True  # it holds one already (its API key's)
        if not self.limiter.try_acquire(tenant):
            return False
        self.tenant = tenant
        return True

    def release(self) -> None:
        if self.tenant is not None:
            self.limiter.release(self.tenant)
            self.tenant = None


def over_limit(tenant: str, limiter: TenantLimiter) -> TooManyRequests:
    return TooManyRequests(f"tenant {tenant!r} already has {limiter.limit} requests in flight on this "
                           "api replica (tenant_max_inflight); retry after the Retry-After seconds",
                           code="tenant_concurrency_limit")


def claim_tenant_slot(conn: HTTPConnection, tenant: str) -> None:
    """Count this request against ``tenant``'s budget (the route learnt its tenant from a
    credential other than an API key); 429 when the tenant is at its limit."""
    slot: TenantSlot | None = conn.scope.get(TENANT_SLOT_SCOPE_KEY)
    if slot is not None and not slot.claim(tenant):
        raise over_limit(tenant, slot.limiter)


def api_key_of(headers: Headers) -> str | None:
    """The request's API key: ``Authorization: Bearer <key>`` (as FastAPI's HTTPBearer reads it) or ``X-API-Key``."""
    scheme, credentials = get_authorization_scheme_param(headers.get("authorization"))
    if scheme.lower() == "bearer" and credentials:
        return credentials
    return headers.get("x-api-key") or None


class TenantConcurrencyMiddleware:
    """Holds one of the tenant's slots (the app's ``TenantLimiter``) while its request or
    WebSocket runs; tenants are told by the app's ``Authenticator`` (its ``ApiKeyService``)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services = container_of(scope["app"]) if scope["type"] in ("http", "websocket") and "app" in scope else None
        if services is None or not services.has(TenantLimiter):  # before the lifespan built them
            await self.app(scope, receive, send)
            return
        limiter = services.get(TenantLimiter)
        key = api_key_of(Headers(scope=scope))
        try:
            principal = await services.get(Authenticator).authenticate(key) if key else None
            tenant = principal.tenant if principal else None
            if principal is not None:  # the route's auth takes it from here: one lookup per request
                scope[AUTHENTICATED_SCOPE_KEY] = (key, principal)
        except Exception:  # noqa: BLE001 - the route's own auth meets the same error, inside the error handlers
            tenant = None
        slot = scope[TENANT_SLOT_SCOPE_KEY] = TenantSlot(limiter)
        if tenant is not None and not slot.claim(tenant):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": WS_TRY_AGAIN_LATER,
                            "reason": f"tenant {tenant!r} is at tenant_max_inflight"})
                return
            error = over_limit(tenant, limiter)
            await JSONResponse(error.to_body(), status_code=429, headers=error.response_headers())(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            slot.release()
