"""Prometheus metrics every service shares: the ``/metrics`` route, HTTP request metrics and
process metrics (``install_metrics(app, "scheduler")`` in each app factory; no copy per service).

- HTTP requests are counted and timed by **route template** (``/v1/sandboxes/{sandbox_id}``),
  never by raw path: a sandbox id in a label would make one time series per sandbox. A request
  no route matched is ``<unmatched>``; past ``MAX_ROUTES`` distinct templates per service
  (a router mounting routes per something unbounded would be a bug, but must not take
  Prometheus down with it) further ones share ``<other>``. Methods outside the HTTP set are
  ``OTHER``.
- Process metrics (``process_cpu_seconds_total``, ``process_resident_memory_bytes``,
  ``process_open_fds``...) and Python's GC/platform info come from prometheus_client's default
  registry, which ``/metrics`` serves whole: each service's own metric objects register there.
- Values read at scrape time (queue depths, sandboxes per state, node capacity) come from the
  ``collectors`` given to ``install_metrics``: async callables run before each scrape, each
  bounded by ``COLLECT_TIMEOUT_S``. One that fails or is slow is logged and its gauges keep
  their last values: a Redis hiccup must not make ``/metrics`` a 500 (Prometheus would then
  lose every other series of the service too).

Who may read ``/metrics``: on the internal services it is open, like ``/healthz``
(corral_common.web.internal: they are not reachable from outside the cluster). On the public api it
wants the internal token (``dependencies=METRICS_TOKEN``): its numbers are platform-wide
(every tenant's sandboxes per state, node capacity), which one tenant must not read about
another. Prometheus sends the token as ``Authorization: Bearer`` (``authorization:
credentials_file`` in its scrape config), so that header is accepted too.
"""

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable, Iterable

from fastapi import Depends, FastAPI
from fastapi.security.utils import get_authorization_scheme_param
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral_common.logging import get_logger
from corral_common.web.errors import Unauthorized
from corral_common.web.internal import INTERNAL_TOKEN_HEADER, require_internal_token

log = get_logger(__name__)

MAX_ROUTES = 200
UNMATCHED = "<unmatched>"
OTHER = "<other>"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
COLLECT_TIMEOUT_S = 5.0
# Request latency: a health check (ms) up to a sandbox create that waits for running (minutes).
HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

HTTP_REQUESTS = Counter("corral_http_requests_total", "HTTP requests answered, by route template and status",
                        ["service", "method", "route", "status"])
HTTP_DURATION = Histogram("corral_http_request_duration_seconds",
                          "Time from a request's arrival to the end of its answer (a stream's whole length)",
                          ["service", "method", "route", "status"], buckets=HTTP_BUCKETS)
HTTP_IN_FLIGHT = Gauge("corral_http_requests_in_flight", "HTTP requests being answered", ["service"])
SERVICE_INFO = Gauge("corral_service_info", "1 per running service process (its name and version)",
                     ["service", "version"])
COLLECT_ERRORS = Counter("corral_metrics_collect_errors_total",
                         "Scrape-time collectors that failed or ran out of time (their gauges kept old values)",
                         ["service", "collector"])

Collector = Callable[[], Awaitable[None]]


class RouteLabels:
    """The route label of a request: its template, capped at ``limit`` distinct values."""

    def __init__(self, limit: int = MAX_ROUTES):
        self.limit = limit
        self._seen: set[str] = set()

    def label(self, scope: Scope) -> str:
        route = scope.get("route")
        template = getattr(route, "path_format", None) or getattr(route, "path", None)
        if not template:
            return UNMATCHED
        if template in self._seen:
            return template
        if len(self._seen) >= self.limit:
            return OTHER
        self._seen.add(template)
        return template


class RequestMetrics:
    """ASGI middleware: counts and times every HTTP request (a WebSocket is not an HTTP request
    here: its length is the session's, not an answer's)."""

    def __init__(self, app: ASGIApp, service: str, routes: RouteLabels | None = None):
        self.app = app
        self.service = service
        self.routes = routes or RouteLabels()
        self.in_flight = HTTP_IN_FLIGHT.labels(service=service)
        # (method, route, status) -> the two children: labels() costs ~8 us a call, a dict hit 0.1
        self._children: dict[tuple[str, str, str], tuple] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception before the answer started is what the client gets as a 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            self.in_flight.dec()
            key = (scope["method"] if scope["method"] in METHODS else "OTHER", self.routes.label(scope), str(status))
            children = self._children.get(key)
            if children is None:
                labels = {"service": self.service, "method": key[0], "route": key[1], "status": key[2]}
                children = self._children[key] = (HTTP_REQUESTS.labels(**labels), HTTP_DURATION.labels(**labels))
            children[0].inc()
            children[1].observe(time.perf_counter() - started)


async def require_metrics_token(request: HTTPConnection) -> None:
    """The internal token, in ``X-Corral-Internal-Token`` or as ``Authorization: Bearer``."""
    scheme, credentials = get_authorization_scheme_param(request.headers.get("authorization"))
    settings = getattr(request.app.state, "settings", None)
    expected = (getattr(settings, "internal_token", "") or "") if settings is not None else ""
    if scheme.lower() == "bearer" and expected and hmac.compare_digest(credentials.encode(), expected.encode()):
        return
    try:
        await require_internal_token(request)
    except Unauthorized:
        raise Unauthorized("/metrics wants the internal token (X-Corral-Internal-Token or Authorization: Bearer)",
                           loc=["header", INTERNAL_TOKEN_HEADER]) from None


METRICS_TOKEN = [Depends(require_metrics_token)]


async def _collect(service: str, collectors: Iterable[Collector]) -> None:
    async def one(collector: Collector) -> None:
        name = getattr(collector, "__name__", type(collector).__name__)
        try:
            await asyncio.wait_for(collector(), COLLECT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - one broken source must not hide the other series
            COLLECT_ERRORS.labels(service=service, collector=name).inc()
            log.warning("metrics.collect_failed", collector=name, error=f"{type(exc).__name__}: {exc}"[:300])

    await asyncio.gather(*(one(c) for c in collectors))


def on_state(app: FastAPI, name: str) -> Collector:
    """A collector calling ``app.state.<name>()`` (an object the lifespan made); nothing before the
    lifespan ran or when the service does without it."""

    async def collect() -> None:
        target = getattr(app.state, name, None)
        if target is not None:
            await target()

    collect.__name__ = name
    return collect


def install_metrics(app: FastAPI, service: str, *, collectors: Iterable[Collector] = (),
                    dependencies: list | None = None, version: str = "") -> None:
    """Serve ``GET /metrics`` on ``app`` and count its HTTP requests as ``service``.

    ``collectors``: async callables refreshing scrape-time gauges (see the module doc);
    ``dependencies``: the route's auth (``METRICS_TOKEN`` on the public api, none elsewhere)."""
    collectors = list(collectors)
    app.add_middleware(RequestMetrics, service=service)
    SERVICE_INFO.labels(service=service, version=version or app.version).set(1)

    async def metrics(_: Request) -> Response:
        await _collect(service, collectors)
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    app.add_api_route("/metrics", metrics, methods=["GET"], include_in_schema=False, dependencies=dependencies or [])
