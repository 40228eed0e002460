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
"""

from collections import Counter

from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from corral_common.errors import TooManyRequests

# Where the middleware leaves (key, principal) for auth.dependencies.current_principal.
AUTHENTICATED_SCOPE_KEY = "corral.principal"


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


def api_key_of(headers: Headers) -> str | None:
    """The request's API key: ``Authorization: Bearer <key>`` (as FastAPI's HTTPBearer reads it) or ``X-API-Key``."""
    scheme, credentials = get_authorization_scheme_param(headers.get("authorization"))
    if scheme.lower() == "bearer" and credentials:
        return credentials
    return headers.get("x-api-key") or None


class TenantConcurrencyMiddleware:
    """Holds one of the tenant's slots (``app.state.tenant_limiter``) while its request runs."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = scope["app"].state if scope["type"] == "http" and "app" in scope else None
        limiter: TenantLimiter | None = getattr(state, "tenant_limiter", None)
        key = api_key_of(Headers(scope=scope)) if limiter is not None else None
        try:
            principal = await state.api_keys.authenticate(key) if key else None
            tenant = principal.tenant if principal else None
            if principal is not None:  # the route's auth takes it from here: one lookup per request
                scope[AUTHENTICATED_SCOPE_KEY] = (key, principal)
        except Exception:  # noqa: BLE001 - the route's own auth meets the same error, inside the error handlers
            tenant = None
        if tenant is None:
            await self.app(scope, receive, send)
            return
        if not limiter.try_acquire(tenant):
            error = TooManyRequests(f"tenant {tenant!r} already has {limiter.limit} requests in flight on this "
                                    "api replica (tenant_max_inflight); retry after the Retry-After seconds",
                                    code="tenant_concurrency_limit")
            await JSONResponse(error.to_body(), status_code=429, headers=error.response_headers())(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            limiter.release(tenant)
