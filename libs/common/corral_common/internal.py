"""Service-to-service auth: the shared internal token the api presents to node-agents and
memory-managers. The dependency is async so FastAPI does not hop to a thread pool for it."""

import hmac

from fastapi import Request

from corral_common.errors import Unauthorized

INTERNAL_TOKEN_HEADER = "X-Corral-Internal-Token"  # noqa: S105 - a header name, not a secret


async def require_internal_token(request: Request) -> None:
    settings = getattr(request.app.state, "settings", None)
    expected = getattr(settings, "internal_token", "") or ""
    if not expected:
        return
    given = request.headers.get(INTERNAL_TOKEN_HEADER, "")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise Unauthorized("missing or invalid internal token", loc=["header", INTERNAL_TOKEN_HEADER])
