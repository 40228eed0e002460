"""Every service's /metrics on the live platform (tests/live_platform.py: real processes, Redis,
RabbitMQ, crun): parsed with prometheus_client's own text parser, the catalogue of
docs/observability.md is there, a sandbox's life moves the state gauges and the latency
histograms, and every metric the Grafana dashboard queries exists on some service."""

import json
import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.live_platform import internal_headers, platform_missing
from tests.polling import until_sync

pytestmark = [pytest.mark.skipif(bool(platform_missing()), reason=platform_missing() or "platform runs"),
              pytest.mark.xdist_group("e2e")]  # the e2e suites' worker: one platform, not two

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy/grafana/corral-dashboard.json"

CATALOGUE = {
    "api": ["corral_sandboxes", "corral_api_sandboxes_requested", "corral_api_job_queue_depth", "corral_api_jobs_active",
            "corral_fncall_api_calls", "corral_fncall_api_latency_seconds", "corral_fncall_api_queue_depth"],
    "scheduler": ["corral_scheduler_placements", "corral_scheduler_placement_seconds",
                  "corral_scheduler_queue_wait_seconds", "corral_scheduler_pending_sandboxes", "corral_nodes_live",
                  "corral_node_cpu_capacity_cores", "corral_node_cpu_reserved_cores",
                  "corral_node_memory_capacity_bytes", "corral_node_memory_reserved_bytes",
                  "corral_node_disk_capacity_bytes", "corral_node_disk_reserved_bytes", "corral_node_sandboxes",
                  "corral_node_sandboxes_capacity"],
    "image-service": ["corral_image_uploads", "corral_image_upload_bytes", "corral_image_chunk_requests",
                      "corral_image_stored_bytes", "corral_image_stored_objects"],
    "node-1": ["corral_node_agent_sandboxes", "corral_node_agent_sandbox_create_seconds",
               "corral_node_agent_sandbox_stop_seconds", "corral_sandbox_create_to_running_seconds",
               "corral_node_chunk_cache_requests", "corral_node_chunk_cache_hits", "corral_node_chunk_cache_misses",
               "corral_fncall_pool_size"],
    "memory-manager": [],
}
EVERYWHERE = ["corral_http_requests", "corral_http_request_duration_seconds", "corral_service_info",
              "process_resident_memory_bytes", "process_cpu_seconds"]


def scrape(platform, service: str) -> dict[str, list]:
    """family name → its samples (name, labels, value)."""
    url = platform["api"] if service == "api" else platform["urls"][service]
    headers = internal_headers(platform) if service == "api" else {}
    r = httpx.get(f"{url}/metrics", headers=headers, timeout=30)
    assert r.status_code == 200, (service, r.status_code, r.text[:300])
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def value(families: dict, sample: str, **labels) -> float:
    """Sum of the samples named ``sample`` whose labels include ``labels``."""
    samples = families.get(_base(sample)) or families.get(sample, [])
    return sum(s.value for s in samples if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()))


def _base(name: str) -> str:
    """A sample's family (what the parser keys it by): counters lose _total, histograms their parts."""
    return re.sub(r"_(total|bucket|count|sum|created)$", "", name)


@pytest.fixture(scope="module")
def services(platform) -> list[str]:
    return ["api", "scheduler", "image-service", "node-1", "node-2", "memory-manager"]


def test_the_public_api_wants_the_internal_token_for_metrics(platform):
    api = platform["api"]
    assert httpx.get(f"{api}/metrics").status_code == 401
    tenant = httpx.get(f"{api}/metrics", headers={"Authorization": f"Bearer {platform['api_key']}"})
    assert tenant.status_code == 401 and tenant.json()["error"]["code"] == "unauthorized"
    bearer = httpx.get(f"{api}/metrics", headers={"Authorization": f"Bearer {platform['internal_token']}"})
    assert bearer.status_code == 200 and "corral_sandboxes" in bearer.text


def test_every_service_exports_its_catalogue(platform, services):
    for service in services:
        families = scrape(platform, service)
        wanted = CATALOGUE.get(service, CATALOGUE["node-1"] if service.startswith("node-") else [])
        missing = [name for name in wanted + EVERYWHERE if name not in families]
        assert not missing, (service, missing)
        name = "node-agent" if service.startswith("node-") else service
        assert any(s.labels.get("service") == name for s in families["corral_service_info"]), service
    nodes = scrape(platform, "scheduler")
    assert value(nodes, "corral_nodes_live") == 2
    assert value(nodes, "corral_node_cpu_capacity_cores", node="node-1") > 0


def test_a_sandbox_moves_the_gauges_and_histograms(platform):
    from corral import Corral

    before = {s: scrape(platform, s) for s in ("api", "scheduler", "node-1", "node-2")}
    with Corral(platform["api"], platform["api_key"]) as corral, corral.sandboxes.create("busybox", memory_mb=64) as sb:
        running = until_sync(lambda: (lambda f: f if value(f, "corral_sandboxes", state="running") >= 1 else None)(
            scrape(platform, "api")), timeout_s=60, what="the api counting a running sandbox")
        assert value(running, "corral_api_sandboxes_requested_total", via="single") \
            == value(before["api"], "corral_api_sandboxes_requested_total", via="single") + 1
        # a raw sandbox id never becomes a label value
        assert sb.id not in json.dumps([s.labels for samples in running.values() for s in samples])
        sched = scrape(platform, "scheduler")
        assert value(sched, "corral_scheduler_placements_total", outcome="placed") \
            == value(before["scheduler"], "corral_scheduler_placements_total", outcome="placed") + 1
        assert value(sched, "corral_scheduler_queue_wait_seconds_count", via="request") \
            == value(before["scheduler"], "corral_scheduler_queue_wait_seconds_count", via="request") + 1
        node = httpx.get(f"{platform['api']}/v1/sandboxes/{sb.id}",
                         headers={"Authorization": f"Bearer {platform['api_key']}"}).json()["node_id"]
        after_nodes = {n: scrape(platform, n) for n in ("node-1", "node-2")}
        assert value(after_nodes[node], "corral_node_agent_sandboxes", state="running", backend="container") >= 1
        for name in ("corral_sandbox_create_to_running_seconds_count", "corral_node_agent_sandbox_create_seconds_count"):
            assert value(after_nodes[node], name) == value(before[node], name) + 1, name
        assert value(after_nodes[node], "corral_sandbox_create_to_running_seconds_sum") \
            > value(before[node], "corral_sandbox_create_to_running_seconds_sum")
        assert value(sched, "corral_node_sandboxes", node=node) >= 1
        stops_before = value(after_nodes[node], "corral_node_agent_sandbox_stop_seconds_count")
        terminated_before = value(running, "corral_sandboxes", state="terminated")
    until_sync(lambda: value(scrape(platform, node), "corral_node_agent_sandbox_stop_seconds_count") == stops_before + 1,
               timeout_s=60, what="the node timing the stop")
    until_sync(lambda: value(scrape(platform, "api"), "corral_sandboxes", state="terminated") == terminated_before + 1,
               timeout_s=60, what="the api counting the terminated sandbox")
    routes = {s.labels["route"] for s in scrape(platform, "api")["corral_http_requests"] if "route" in s.labels}
    assert "/v1/sandboxes/{sandbox_id}" in routes and not any(r.startswith("/v1/sandboxes/sb-") for r in routes)


def test_every_metric_the_dashboard_queries_exists(platform, services):
    """By family: a labelled metric nothing has touched yet is declared (HELP/TYPE) without samples."""
    exported: set[str] = set()
    for service in services:
        exported.update(scrape(platform, service))
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]
    assert len(exprs) > 30
    names = {_base(n) for e in exprs for n in re.findall(r"\b((?:corral|process)_[a-z0-9_]+)\b", e)}
    assert len(names) > 40
    missing = sorted(names - exported)
    assert not missing, missing
