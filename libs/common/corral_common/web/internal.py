"""Service-to-service auth: the shared internal token (``CORRAL_INTERNAL_TOKEN``) every
internal call carries in ``X-Corral-Internal-Token``.

Every internal service (image-service, scheduler, node-agent, memory-manager) puts
``INTERNAL_ONLY`` on each of its routes but ``/healthz`` and ``/metrics``: without the token
the answer is 401 with the JSON error body. The service's settings must be on
``app.state.settings``. An empty token setting turns the check off (a single-user
development machine; `make up` and compose always set one). The dependency is async so
FastAPI does not hop to a thread pool for it."""

import hmac

from fastapi import Depends
from starlette.requests import HTTPConnection

from corral_common.web.errors import Unauthorized

INTERNAL_TOKEN_HEADER = "X-Corral-Internal-Token"  # noqa: S105 - a header name, not a secret


async def require_internal_token(request: HTTPConnection) -> None:
    # HTTPConnection, not Request: the same check guards WebSocket routes (port ingress).
    settings = getattr(request.app.state, "settings", None)
    if settings is None:  # a wiring mistake must not open the door
        raise Unauthorized("this service does not know its internal token yet", loc=["header", INTERNAL_TOKEN_HEADER])
    expected = settings.internal_token or ""
    if not expected:
        return
    given = request.headers.get(INTERNAL_TOKEN_HEADER, "")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise Unauthorized("missing or invalid internal token", loc=["header", INTERNAL_TOKEN_HEADER])


# For ``APIRouter(dependencies=...)`` / ``include_router(dependencies=...)`` / a route's ``dependencies``.
INTERNAL_ONLY = [Depends(require_internal_token)]
