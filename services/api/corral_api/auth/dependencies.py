"""The caller, from its API key: every public route takes ``tenant: Tenant``; the admin routes
take ``operator: Operator`` (a tenant key there is a 403 ``operator_only``)."""

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from corral_api.auth.service import ApiKeyService, Principal
from corral_api.deps import service_of
from corral_api.limits import AUTHENTICATED_SCOPE_KEY
from corral_common.web.errors import CorralError, Unauthorized

bearer = HTTPBearer(auto_error=False, description="API key: `Authorization: Bearer <key>`")


async def current_principal(request: Request,
                            credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Principal:
    key = credentials.credentials if credentials else request.headers.get("x-api-key")
    if not key:
        raise Unauthorized("missing API key (Authorization: Bearer <key>)", loc=["header", "authorization"])
    # Looked up a moment ago by limits.TenantConcurrencyMiddleware for this same request.
    known = request.scope.get(AUTHENTICATED_SCOPE_KEY)
    principal = known[1] if known and known[0] == key else await service_of(request, ApiKeyService).authenticate(key)
    if principal is None:
        raise Unauthorized("invalid API key", loc=["header", "authorization"])
    return principal


async def current_tenant(principal: Principal = Depends(current_principal)) -> str:
    return principal.tenant


async def current_operator(principal: Principal = Depends(current_principal)) -> Principal:
    if not principal.is_operator:
        raise CorralError("this route needs an operator key", code="operator_only", status_code=403,
                          loc=["header", "authorization"])
    return principal


Tenant = Annotated[str, Depends(current_tenant)]
Operator = Annotated[Principal, Depends(current_operator)]
