"""The caller's tenant, from its API key: every public route takes ``tenant: Tenant``."""

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral_common.errors import Unauthorized

bearer = HTTPBearer(auto_error=False, description="API key: `Authorization: Bearer <key>`")


async def current_tenant(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:
    key = credentials.credentials if credentials else request.headers.get("x-api-key")
    if not key:
        raise Unauthorized("missing API key (Authorization: Bearer <key>)", loc=["header", "authorization"])
    tenant = request.app.state.api_keys.tenant_for(key)
    if tenant is None:
        raise Unauthorized("invalid API key", loc=["header", "authorization"])
    return tenant


Tenant = Annotated[str, Depends(current_tenant)]
