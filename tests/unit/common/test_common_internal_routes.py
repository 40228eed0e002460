"""Every route of every internal service but /healthz and /metrics wants the internal token:
walked from each app's own OpenAPI document, so a route added later without it fails here."""

import re

import pytest
from fastapi.testclient import TestClient

from corral_common.web.internal import INTERNAL_TOKEN_HEADER

TOKEN = "s3cret-internal"
OPEN = {"/healthz", "/metrics"}


def _apps(tmp_path):
    from corral_image_service.app import create_app as image_app
    from corral_image_service.settings import ImageServiceSettings
    from corral_memory_manager.app import create_app as memory_app
    from corral_memory_manager.settings import MemoryManagerSettings
    from corral_node_agent.app import create_app as node_app
    from corral_node_agent.settings import NodeAgentSettings
    from corral_scheduler.app import create_app as scheduler_app
    from corral_scheduler.settings import SchedulerSettings

    return {
        "image-service": image_app(ImageServiceSettings(data_dir=str(tmp_path / "images"), internal_token=TOKEN)),
        "scheduler": scheduler_app(SchedulerSettings(internal_token=TOKEN)),
        "node-agent": node_app(NodeAgentSettings(state_dir=str(tmp_path / "node"), internal_token=TOKEN)),
        "memory-manager": memory_app(MemoryManagerSettings(internal_token=TOKEN)),
    }


SERVICES = ["image-service", "scheduler", "node-agent", "memory-manager"]


@pytest.mark.parametrize("service", SERVICES)
def test_every_route_but_health_is_401_without_the_token(service, tmp_path):
    app = _apps(tmp_path)[service]
    routes = [(method.upper(), path) for path, item in app.openapi()["paths"].items() for method in item
              if path not in OPEN]
    assert routes, "no route found"
    # No lifespan: nothing behind the check is there, so only the check can answer.
    client = TestClient(app, raise_server_exceptions=False)
    for method, path in routes:
        url = re.sub(r"\{[^}]+\}", "x", path)
        for headers in ({}, {INTERNAL_TOKEN_HEADER: "wrong"}):
            r = client.request(method, url, headers=headers)
            assert r.status_code == 401, (service, method, path, r.status_code, r.text)
            if method != "HEAD":  # a HEAD answer has no body
                assert r.json()["error"]["code"] == "unauthorized"
        r = client.request(method, url, headers={INTERNAL_TOKEN_HEADER: TOKEN})
        assert r.status_code != 401, (service, method, path)  # past the check (whatever comes next)
    assert client.get("/healthz").status_code != 401


def test_a_service_without_settings_on_its_state_refuses():
    """The check fails closed: an app wired without app.state.settings opens nothing."""
    from fastapi import Depends, FastAPI

    from corral_common.web.handlers import install_error_handlers
    from corral_common.web.internal import require_internal_token

    app = FastAPI()
    install_error_handlers(app)
    app.get("/x", dependencies=[Depends(require_internal_token)])(lambda: {"ok": True})
    assert TestClient(app).get("/x").status_code == 401
