"""corral_common.web.metrics: route-template labels (never a raw path), the cardinality cap, the
scrape-time collectors' failure rule, and who may read /metrics on which service."""

import uuid

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from corral_common.web.handlers import install_error_handlers
from corral_common.web.internal import INTERNAL_TOKEN_HEADER
from corral_common.web.metrics import OTHER, UNMATCHED, RouteLabels, install_metrics

TOKEN = "s3cret-internal"


def _count(service: str, route: str, status: str, method: str = "GET") -> float:
    return REGISTRY.get_sample_value("corral_http_requests_total", {
        "service": service, "method": method, "route": route, "status": status}) or 0.0


def _routes_of(service: str) -> set[str]:
    return {s.labels["route"] for m in REGISTRY.collect() if m.name == "corral_http_requests"
            for s in m.samples if s.labels.get("service") == service}


def _app(service: str, **kwargs) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/v1/sandboxes/{sandbox_id}")
    async def get_sandbox(sandbox_id: str) -> dict:
        return {"id": sandbox_id}

    @app.get("/boom")
    async def boom() -> dict:
        raise RuntimeError("a bug")

    install_metrics(app, service, **kwargs)
    return app


def test_requests_are_labelled_by_route_template_not_path():
    service = f"t-{uuid.uuid4().hex[:8]}"
    client = TestClient(_app(service), raise_server_exceptions=False)
    ids = [f"sb-{uuid.uuid4().hex[:16]}" for _ in range(5)]
    for sid in ids:
        assert client.get(f"/v1/sandboxes/{sid}").status_code == 200
    assert client.get("/no/such/path/sb-1234").status_code == 404
    assert client.get("/boom").status_code == 500
    assert _count(service, "/v1/sandboxes/{sandbox_id}", "200") == 5
    assert _count(service, UNMATCHED, "404") == 1
    assert _count(service, "/boom", "500") == 1
    routes = _routes_of(service)
    assert not any(sid in route for route in routes for sid in ids), routes
    assert "/no/such/path/sb-1234" not in routes
    hist = REGISTRY.get_sample_value("corral_http_request_duration_seconds_count", {
        "service": service, "method": "GET", "route": "/v1/sandboxes/{sandbox_id}", "status": "200"})
    assert hist == 5


def test_odd_methods_share_one_label():
    service = f"t-{uuid.uuid4().hex[:8]}"
    client = TestClient(_app(service), raise_server_exceptions=False)
    client.request("PROPFIND", "/v1/sandboxes/x")
    assert _count(service, "/v1/sandboxes/{sandbox_id}", "405", method="OTHER") == 1


def test_route_labels_are_capped():
    class Route:
        def __init__(self, path):
            self.path_format = path

    labels = RouteLabels(limit=3)
    seen = [labels.label({"route": Route(f"/r{i}/{{x}}")}) for i in range(10)]
    assert seen[:3] == ["/r0/{x}", "/r1/{x}", "/r2/{x}"]
    assert set(seen[3:]) == {OTHER}
    assert labels.label({"route": Route("/r1/{x}")}) == "/r1/{x}"  # a known one keeps its label
    assert labels.label({}) == UNMATCHED


def test_a_failing_collector_keeps_the_scrape_answering():
    service = f"t-{uuid.uuid4().hex[:8]}"
    calls = []

    async def broken() -> None:
        raise ConnectionError("redis is away")

    async def working() -> None:
        calls.append(1)

    client = TestClient(_app(service, collectors=[broken, working]))
    r = client.get("/metrics")
    assert r.status_code == 200 and calls == [1]
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    errors = [s for s in families["corral_metrics_collect_errors"].samples
              if s.labels.get("service") == service and s.name.endswith("_total")]
    assert [(s.labels["collector"], s.value) for s in errors] == [("broken", 1.0)]
    # process metrics come with the default registry
    assert "process_resident_memory_bytes" in families or "process_cpu_seconds" in families
    assert "corral_service_info" in families


def test_token_dependency_on_the_metrics_route():
    from corral_common.web.metrics import METRICS_TOKEN

    service = f"t-{uuid.uuid4().hex[:8]}"
    app = _app(service, dependencies=METRICS_TOKEN)
    client = TestClient(app)
    assert client.get("/metrics").status_code == 401  # no settings on the app: fails closed

    class Settings:
        internal_token = TOKEN

    app.state.settings = Settings()
    r = client.get("/metrics")
    assert r.status_code == 401 and r.json()["error"]["details"][0]["loc"] == ["header", INTERNAL_TOKEN_HEADER]
    assert client.get("/metrics", headers={"Authorization": "Bearer a-tenant-key"}).status_code == 401
    assert client.get("/metrics", headers={INTERNAL_TOKEN_HEADER: "wrong"}).status_code == 401
    assert client.get("/metrics", headers={INTERNAL_TOKEN_HEADER: TOKEN}).status_code == 200
    assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_public_api_wants_the_internal_token(tmp_path):
    """Its numbers are every tenant's: a tenant's API key does not read them."""
    from corral_api.app import create_app
    from corral_api.settings import ApiSettings

    settings = ApiSettings(internal_token=TOKEN, data_dir=str(tmp_path))
    app = create_app(settings)
    app.state.settings = settings  # what the lifespan sets; no lifespan here (no Redis)
    client = TestClient(app)
    assert client.get("/metrics").status_code == 401
    r = client.get("/metrics", headers={INTERNAL_TOKEN_HEADER: TOKEN})
    assert r.status_code == 200
    assert "corral_fncall_api_calls_total" in r.text or "corral_fncall_api_calls" in r.text
    assert "/metrics" not in app.openapi()["paths"]


@pytest.mark.parametrize("service", ["image-service", "scheduler", "node-agent", "memory-manager"])
def test_internal_services_serve_metrics_without_the_token(service, tmp_path):
    from tests.unit.common.test_common_internal_routes import TOKEN as INTERNAL
    from tests.unit.common.test_common_internal_routes import _apps

    app = _apps(tmp_path)[service]
    client = TestClient(app)
    r = client.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    again = client.get("/metrics", headers={INTERNAL_TOKEN_HEADER: INTERNAL}).text  # counts the first scrape
    assert f'corral_http_requests_total{{method="GET",route="/metrics",service="{service}",status="200"}}' in again


def test_the_dashboard_queries_only_catalogued_metrics():
    """Static twin of tests/integration/test_metrics_every_service.py (which checks the live
    services): every metric a Grafana query names is in docs/observability.md's catalogue."""
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]

    def base(name: str) -> str:
        return re.sub(r"_(total|bucket|count|sum)$", "", name)

    pattern = r"\b((?:corral|process)_[a-z0-9_]+)\b"
    catalogue = {base(n) for n in re.findall(pattern, (root / "docs/observability.md").read_text())}
    dashboard = json.loads((root / "deploy/grafana/corral-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queried = {base(n) for e in exprs for n in re.findall(pattern, e)}
    assert queried and not queried - catalogue, sorted(queried - catalogue)
    assert all(t["datasource"]["uid"] == "corral-prometheus" for p in dashboard["panels"] for t in p.get("targets", []))
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


METRIC_MODULES = ["corral_common.web.metrics", "corral_api.metrics", "corral_api.fncall.metrics", "corral_scheduler.metrics",
                  "corral_image_service.metrics", "corral_node_agent.metrics", "corral_node_agent.fncall.metrics",
                  "corral_node_agent.network.egress", "corral_node_agent.events.registration"]


def test_metric_names_follow_the_conventions_and_are_catalogued():
    """corral_ prefix, histograms in _seconds, byte counts in _bytes; each one in docs/observability.md."""
    import importlib
    import re
    from pathlib import Path

    from prometheus_client.metrics import MetricWrapperBase

    doc = (Path(__file__).resolve().parents[3] / "docs/observability.md").read_text()
    found = {}
    for module in METRIC_MODULES:
        for obj in vars(importlib.import_module(module)).values():
            if isinstance(obj, MetricWrapperBase):
                found[obj._name] = obj._type
    assert len(found) > 40
    for name, kind in found.items():
        assert re.fullmatch(r"corral_[a-z0-9_]+", name), name
        if kind == "histogram":
            assert name.endswith("_seconds"), name
        if "bytes" in name:
            assert name.endswith("_bytes"), name  # (a counter's exposed name then adds _total)
        shown = f"{name}_total" if kind == "counter" else name
        assert f"`{shown}`" in doc, f"{shown} is not in docs/observability.md's catalogue"
