"""The dashboard's pure parts: the same-origin and CSRF checks, the security headers, and
that the templates escape what a sandbox or a tenant controls (output, labels, metadata)."""

import time
from types import SimpleNamespace

import pytest

from corral_api.ui.router import templates
from corral_api.ui.security import CONTENT_SECURITY_POLICY, SECURITY_HEADERS, csrf_token_matches, same_origin
from corral_api.ui.service import SandboxFilter, node_load, timeline
from corral_api.ui.sessions import session_key
from corral_common.contracts.exec import ExecResult
from corral_common.contracts.sandboxes import SandboxSpec, SandboxState
from corral_common.store.state_nodes import NodeInfo
from corral_common.store.state_records import SandboxRecord

OWN = "http://127.0.0.1:8000"
SCRIPT = "<script>alert('x')</script>"


@pytest.mark.parametrize("headers, allowed", [
    ({"origin": OWN}, True),
    ({"origin": OWN.upper()}, True),  # scheme and host are case-insensitive
    ({"origin": OWN + "/"}, True),
    ({"origin": "http://evil.example"}, False),
    ({"origin": "http://127.0.0.1:8001"}, False),  # another port is another origin
    ({"origin": "https://127.0.0.1:8000"}, False),
    ({"origin": "null"}, False),  # sandboxed iframes, file: pages
    ({"referer": OWN + "/ui/sandboxes/sb-1"}, True),
    ({"referer": "http://evil.example/ui"}, False),
    ({"referer": "not a url"}, False),
    ({}, False),  # says nothing: refused
    ({"origin": OWN, "sec-fetch-site": "cross-site"}, False),
    ({"origin": OWN, "sec-fetch-site": "same-site"}, False),  # a sibling subdomain is not us
    ({"origin": OWN, "sec-fetch-site": "same-origin"}, True),
])
def test_same_origin(headers, allowed):
    assert same_origin(headers, OWN) is allowed


def test_csrf_token_matches_only_the_sessions_token():
    assert csrf_token_matches("t0ken", "t0ken")
    assert not csrf_token_matches("t0ken", "t0kem")
    assert not csrf_token_matches("t0ken", None)
    assert not csrf_token_matches("t0ken", "")
    assert not csrf_token_matches("", "")  # a session without a token never matches


def test_security_headers_forbid_inline_script_and_framing():
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY
    assert SECURITY_HEADERS["Cache-Control"] == "no-store"


def test_session_key_does_not_contain_the_token():
    token = "abcdefghijklmnop"
    key = session_key(token)
    assert token not in key and key == session_key(token) and key != session_key(token + "x")


def record(**changes) -> SandboxRecord:
    now = time.time()
    fields = dict(id="sb-1", tenant="t", state=SandboxState.running,
                  spec=SandboxSpec(environment="busybox", labels={"job": "job-1", "k": SCRIPT}),
                  created_at=now - 10, updated_at=now, started_at=now - 5)
    return SandboxRecord(**{**fields, **changes})


def test_templates_escape_sandbox_output_and_labels():
    result = ExecResult(exit_code=0, stdout=SCRIPT, stderr="<img src=x onerror=alert(1)>", duration_ms=1.0)
    html = templates.get_template("_exec_result.html").render(cmd=SCRIPT, result=result, error=None)
    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    rows = templates.get_template("_sandbox_rows.html").render(sandboxes=[record()])
    assert "<script>" not in rows and "k=&lt;script&gt;" in rows


def test_csrf_token_in_hx_headers_cannot_break_out_of_the_attribute():
    session = SimpleNamespace(tenant=SCRIPT, csrf="a'b\"c<d>")
    html = templates.get_template("base.html").render(session=session, nav="overview")
    assert "<script>alert" not in html
    head, _, body = html.partition("<body")
    attribute = body.split(">", 1)[0]
    assert attribute.count("'") == 2  # hx-headers='…' stays one attribute


def test_filter_and_timeline():
    sb = record()
    assert SandboxFilter(job="job-1").matches(sb)
    assert not SandboxFilter(job="job-2").matches(sb)
    assert SandboxFilter(backend="container").matches(record(spec=SandboxSpec(environment="e", backend="container")))
    assert not SandboxFilter(backend="vm").matches(sb)
    ended = record(state=SandboxState.failed, reason="oom", ended_at=sb.created_at + 20)
    assert [what for _, what in timeline(ended)] == ["created (pending)", "running", "failed: oom"]
    assert [what for _, what in timeline(record(state=SandboxState.pending, started_at=None))] == ["created (pending)"]


def test_node_load_percentages():
    node = NodeInfo(node_id="n", url="u", cpu_milli=2000, memory_mb=1000, max_sandboxes=0, heartbeat_at=99.0,
                    used_cpu_milli=500, used_memory_mb=250)
    load = node_load(node, now=100.0)
    assert (load.cpu_pct, load.memory_pct, load.sandboxes_pct, load.age_s) == (25.0, 25.0, 0.0, 1.0)


def test_every_page_renders_and_escapes_what_tenants_control():
    """Each page with realistic records (StrictUndefined: a field a template names that the
    record lacks fails here, not in a browser); markup in names, metadata and observations
    comes out as text."""
    from datetime import UTC, datetime

    from corral_api.images.schemas import Environment, Layer, StorageUsage
    from corral_api.jobs.schemas import Job
    from corral_api.rollouts.schemas import Rollout, Step

    now = datetime.now(UTC)
    session = SimpleNamespace(tenant="t", csrf="tok")
    node = NodeInfo(node_id="node-1", url="u", cpu_milli=2000, memory_mb=1000, max_sandboxes=8,
                    heartbeat_at=time.time(), backends=("container", "vm"), disk_mb=100)
    nodes = [node_load(node, time.time())]
    step = Step(index=0, action="exec", args={"cmd": SCRIPT}, request_hash="h", status="done",
                observation={"stdout": SCRIPT}, started_at=now, duration_ms=3.2, replays=2)
    rollout = Rollout(id="ro-1", job_id=SCRIPT, sandbox_id="sb-1", owns_sandbox=True, metadata={"m": SCRIPT},
                      status="active", step_count=1, idle_pause_s=0, ttl_s=60, created_at=now, updated_at=now,
                      steps=[step])
    job = Job(id="job-1", count=4, weight=1, priority=0, labels={"x": SCRIPT}, created_at=time.time(), deleted=False,
              submitted=4, admitted=2, pending=2, queue_position=0, counts={"running": 2, "pending": 2})
    layer = dict(kind="base", name=SCRIPT, version="1", digest="sha256:" + "0" * 64, size=1)
    pages = {
        "overview.html": {"data": {"by_state": {"running": 1}, "by_backend": {"container": 1}, "live": 1,
                                   "creations_per_s": 0.1, "rate_window_s": 60, "queues": {"pending": 0},
                                   "nodes": nodes}},
        "nodes.html": {"nodes": nodes},
        "sandboxes.html": {"sandboxes": [record()], "states": ["running"], "labels": [SCRIPT],
                           "query": {"state": "", "label": "", "job": SCRIPT, "backend": "", "limit": 50},
                           "after": SCRIPT, "poll_url": f"/ui/sandboxes?job={SCRIPT}",
                           "first_url": f"/ui/sandboxes?job={SCRIPT}", "next_url": f"/ui/sandboxes?after={SCRIPT}"},
        "sandbox.html": {"sb": record(spec=SandboxSpec(environment="e", backend="vm", labels={"k": SCRIPT})),
                         "spec": {"labels": {"k": SCRIPT}}, "timeline": timeline(record())},
        "jobs.html": {"jobs": [job]},
        "rollouts.html": {"rollouts": [rollout], "job": SCRIPT},
        "rollout.html": {"rollout": rollout},
        "fncall.html": {"data": {"runtimes": [{"runtime": "python", "calls_per_s": 1.5, "verdicts": {"accepted": 3},
                                               "queue_depth": 0, "workers": 4}]}},
        "images.html": {"data": {"layers": [Layer(kind="base", name=SCRIPT, version="1", ref=f"{SCRIPT}:1",
                                                  digest="sha256:" + "0" * 64, size=1, shared=True, created_at=now)],
                                 "environments": [Environment(name=SCRIPT, base="b:1", layers=[layer], shared=False,
                                                              created_at=now)],
                                 "usage": StorageUsage(used_bytes=1, quota_bytes=None, layers=1)}},
    }
    for name, context in pages.items():
        html = templates.get_template(name).render(session=session, nav=name.removesuffix(".html"), **context)
        assert "<script>alert" not in html, name
        assert html.count("<script") == 2, name  # htmx and dashboard.js, nothing else
    trajectory = templates.get_template("rollout.html").render(session=session, nav="rollouts", rollout=rollout)
    assert '<td class="replays">2</td>' in trajectory
    vm_page = templates.get_template("sandbox.html").render(session=session, nav="s", **pages["sandbox.html"])
    assert 'id="screen-frame"' in vm_page and 'id="type-text"' in vm_page


class PagedSandboxes:
    """SandboxService's two listings: the whole list is refused, a page is recorded."""

    def __init__(self, records: list[SandboxRecord]):
        self.records = records
        self.pages: list[tuple] = []

    async def list(self, tenant, labels, state):
        raise AssertionError("the sandbox page read every record")

    async def list_page(self, tenant, labels, state, *, limit, after, keep=lambda _: True):
        self.pages.append((tenant, labels, state, limit, after))
        kept = [r for r in self.records if (after is None or r.id > after) and keep(r)]
        return kept[:limit], (kept[limit - 1].id if len(kept) > limit else None)


def test_the_sandbox_page_reads_and_polls_one_page_of_the_list():
    """issue 34: the page rendered (and re-polled every 2 s) every record of the tenant; it
    reads one page of the api's paging, polls that page, and links the next."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from corral_api.deps import Container
    from corral_api.ui.router import current_session, install_dashboard
    from corral_api.ui.service import DashboardService

    records = [record(id=f"sb-{i:02d}", spec=SandboxSpec(environment="busybox", labels={"job": "j"}))
               for i in range(7)]
    listing = PagedSandboxes(records)
    app = FastAPI()
    install_dashboard(app)
    app.state.services = Container.of({DashboardService: DashboardService(
        listing, store=None, heartbeat_timeout_s=0, jobs=None, rollouts=None, fncall=None, images=None)})
    app.dependency_overrides[current_session] = lambda: SimpleNamespace(tenant="t", csrf="tok")
    with TestClient(app) as http:
        page = http.get("/ui/sandboxes", params={"job": "j", "limit": 3})
        assert page.status_code == 200
        assert page.text.count('class="sandbox-row"') == 3 and 'data-id="sb-02"' in page.text
        assert 'href="/ui/sandboxes?job=j&amp;limit=3&amp;after=sb-02"' in page.text  # the next page
        assert 'hx-get="/ui/sandboxes?job=j&amp;limit=3"' in page.text  # polls this page only
        last = http.get("/ui/sandboxes", params={"job": "j", "limit": 3, "after": "sb-05"},
                        headers={"hx-request": "true"})  # a poll of the last page: its rows only
        assert last.text.count('class="sandbox-row"') == 1 and "<html" not in last.text
        assert http.get("/ui/sandboxes").text.count('class="sandbox-row"') == 7  # 50 a page by default
        assert http.get("/ui/sandboxes", params={"limit": 0}).status_code == 422
    assert listing.pages[:2] == [("t", {}, None, 3, None), ("t", {}, None, 3, "sb-05")]
