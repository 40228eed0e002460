"""SandboxFusion on a dedicated port (``CORRAL_API_SANDBOXFUSION_PORT``): ``POST /run_code`` and
``GET /v1/ping`` at the root path without credentials, as upstream serves them (SkyRL builds
``http://{host}:8080/run_code``; the sandbox-fusion client sends no key). Every call counts as
the one tenant the operator binds it to; it listens on loopback unless the operator names a
trusted network's address.

It runs in the api process beside the main server (same fncall service, same event loop) and
has no other route: nothing else of the api is reachable without a key through it.
"""

import asyncio
import contextlib
from typing import Annotated

import uvicorn
from fastapi import Depends, FastAPI, Request

from corral_api.body_limits import BodyLimitMiddleware
from corral_api.compat.sandboxfusion.schemas import RunCodeRequest, RunCodeResponse
from corral_api.compat.sandboxfusion.service import run_code
from corral_api.deps import Container, provide
from corral_api.fncall.router import LimitedBodyRoute, Quotas, take_fncall_quota
from corral_api.fncall.service import FncallService
from corral_api.limits import TenantConcurrencyMiddleware, claim_tenant_slot
from corral_api.settings import ApiSettings
from corral_common.logging import get_logger
from corral_common.web.handlers import install_error_handlers

log = get_logger(__name__)


def create_app(services: Container, settings: ApiSettings, tenant: str) -> FastAPI:
    app = FastAPI(title="Corral SandboxFusion", openapi_url=None, docs_url=None, redoc_url=None)
    # The api's services (its fncall service and the tenant's slots and quotas) and settings (the body limits').
    app.state.services = services
    app.state.settings = settings
    app.router.route_class = LimitedBodyRoute
    install_error_handlers(app)
    app.add_middleware(TenantConcurrencyMiddleware)  # the tenant's in-flight budget, as on the main port
    app.add_middleware(BodyLimitMiddleware)  # and its body limits

    @app.post("/run_code", response_model=RunCodeResponse)
    async def run_code_route(body: RunCodeRequest, request: Request, quotas: Quotas,
                             fncall: Annotated[FncallService, Depends(provide(FncallService))]) -> RunCodeResponse:
        claim_tenant_slot(request, tenant)
        await take_fncall_quota(quotas, tenant, 1, ["body"])  # the tenant's max_fncall_per_s
        response = await run_code(body, fncall)
        log.debug("sandboxfusion.run_code", tenant=tenant, language=body.language, status=response.status.value)
        return response

    @app.get("/v1/ping")
    async def ping() -> str:
        return "pong"

    return app


class _EmbeddedServer(uvicorn.Server):
    """A second uvicorn server in a running loop: the main server owns the process's signals."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class SandboxFusionServer:
    def __init__(self, services: Container, settings: ApiSettings, *, host: str, port: int, tenant: str):
        config = uvicorn.Config(create_app(services, settings, tenant), host=host, port=port, lifespan="off", log_config=None,
                                access_log=False)
        self.server = _EmbeddedServer(config)
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.server.serve(), name="sandboxfusion-server")
        while not self.server.started:
            if self.task.done():  # the port is taken, say: fail the api's start-up with the reason
                self.task.result()
                raise RuntimeError("the SandboxFusion server stopped while starting")
            await asyncio.sleep(0.01)
        log.info("sandboxfusion.listening", host=self.server.config.host, port=self.server.config.port)

    async def stop(self) -> None:
        if self.task is None:
            return
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 10)
