"""The dashboard's HTTP side: login/logout, the pages and the htmx fragments they poll, and the
few state-changing actions (exec console, delete, VM input), all under /ui.

Every page and fragment needs a session (else a redirect to the login form; an htmx request
gets ``HX-Redirect``); every POST but the login also needs the session's CSRF token and a
same-origin Origin/Referer. Responses carry a strict Content-Security-Policy (UiRoute)."""

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated
from urllib.parse import urlencode

import jinja2
from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.templating import Jinja2Templates

from corral_api.auth.service import ApiKeyService, hash_key
from corral_api.dataplane.service import SandboxDataPath
from corral_api.deps import provide, service_of
from corral_api.limits import TenantLimiter
from corral_api.sandboxes.router import parse_labels
from corral_api.sandboxes.service import SandboxService
from corral_api.ui.security import CSRF_FIELD, CSRF_HEADER, SECURITY_HEADERS, csrf_token_matches, same_origin
from corral_api.ui.service import (
    MAX_SANDBOX_PAGE_SIZE,
    SANDBOX_PAGE_SIZE,
    DashboardService,
    SandboxFilter,
    timeline,
)
from corral_api.ui.sessions import COOKIE, UiSession, UiSessions
from corral_common.contracts.display import InputRequest
from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxState
from corral_common.web.errors import BadRequest, CorralError, TooManyRequests

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
# Autoescape everywhere: sandbox output, labels, metadata and observations are attacker-controlled.
templates = Jinja2Templates(env=jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                                   autoescape=True, undefined=jinja2.StrictUndefined))
templates.env.filters["ts"] = lambda value: (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(value))
                                             if value else "")
templates.env.filters["pretty"] = lambda value: json.dumps(value, indent=2, sort_keys=True, default=str)

# What the console asks of a command: it answers within this and keeps this much of each stream.
CONSOLE_TIMEOUT_S = 30.0
CONSOLE_OUTPUT_LIMIT = 64 * 1024


class UiRoute(APIRoute):
    """Adds the dashboard's security headers (CSP, no framing, no caching) to every answer."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def with_headers(request: Request) -> Response:
            response = await handler(request)
            response.headers.update(SECURITY_HEADERS)
            return response

        return with_headers


class LoginRequired(Exception):
    """No valid session: the browser is sent to the login form."""


class CsrfRefused(CorralError):
    status_code = 403
    code = "csrf_refused"


router = APIRouter(prefix="/ui", include_in_schema=False, route_class=UiRoute)


async def current_session(request: Request) -> AsyncIterator[UiSession]:
    """The request's session; while the request runs it holds one of the tenant's in-flight
    slots, as an API-key request does (TenantConcurrencyMiddleware): the dashboard is no way
    around ``tenant_max_inflight``."""
    session = await service_of(request, UiSessions).get(request.cookies.get(COOKIE))
    if session is None:
        raise LoginRequired()
    principal = await service_of(request, ApiKeyService).authenticate_digest(session.key_hash)
    if principal is None or principal.tenant != session.tenant:
        # The key it logged in with was revoked (or its tenant disabled): the session ends too.
        await service_of(request, UiSessions).delete(request.cookies.get(COOKIE))
        raise LoginRequired()
    limiter = service_of(request, TenantLimiter)
    if not limiter.try_acquire(session.tenant):
        raise TooManyRequests(f"tenant {session.tenant!r} already has {limiter.limit} requests in flight on this "
                              "api replica (tenant_max_inflight)", code="tenant_concurrency_limit")
    try:
        yield session
    finally:
        limiter.release(session.tenant)


def own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}"


async def checked_session(request: Request, session: UiSession = Depends(current_session)) -> UiSession:
    """A state-changing request: same origin, and the session's CSRF token (header or form)."""
    if not same_origin(request.headers, own_origin(request)):
        raise CsrfRefused("cross-site request refused (Origin/Referer is not this dashboard)",
                          loc=["header", "origin"])
    token = request.headers.get(CSRF_HEADER)
    if token is None:
        token = (await request.form()).get(CSRF_FIELD)
    if not csrf_token_matches(session.csrf, token if isinstance(token, str) else None):
        raise CsrfRefused("missing or wrong CSRF token", loc=["header", CSRF_HEADER])
    return session


Session = Annotated[UiSession, Depends(current_session)]
Checked = Annotated[UiSession, Depends(checked_session)]
Dashboard = Annotated[DashboardService, Depends(provide(DashboardService))]


def render(request: Request, page: str, fragment: str | None, session: UiSession | None, status_code: int = 200,
           **context) -> HTMLResponse:
    """The whole page, or only its live fragment when htmx polls for it."""
    name = fragment if fragment and request.headers.get("hx-request") else page
    return templates.TemplateResponse(request, name, {"session": session, **context}, status_code=status_code)


# -- login ------------------------------------------------------------------------------------

@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request) -> HTMLResponse:
    return render(request, "login.html", None, None, error=None)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, api_key: Annotated[str, Form(max_length=512)] = "") -> Response:
    # Login CSRF (a forged form logging the victim into the attacker's tenant): same origin only.
    if not same_origin(request.headers, own_origin(request)):
        raise CsrfRefused("cross-site login refused", loc=["header", "origin"])
    principal = await service_of(request, ApiKeyService).authenticate(api_key) if api_key else None
    if principal is None:
        return render(request, "login.html", None, None, status_code=401, error="invalid API key")
    token, _ = await service_of(request, UiSessions).create(principal.tenant, hash_key(api_key))
    response = RedirectResponse("/ui", status_code=303)
    response.set_cookie(COOKIE, token, max_age=service_of(request, UiSessions).ttl_s, path="/ui", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/logout")
async def logout(request: Request, session: Checked) -> Response:
    await service_of(request, UiSessions).delete(request.cookies.get(COOKIE))
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
    return response


# -- pages ------------------------------------------------------------------------------------

@router.get("", response_class=HTMLResponse)
@router.get("/", response_class=HTMLResponse)
async def overview(request: Request, session: Session, ui: Dashboard) -> HTMLResponse:
    return render(request, "overview.html", "_overview.html", session, nav="overview",
                  data=await ui.overview(session.tenant))


def sandbox_filter(state: str, label: list[str], job: str, backend: str) -> SandboxFilter:
    try:
        parsed_state = SandboxState(state) if state else None
    except ValueError:
        raise BadRequest(f"unknown state {state!r}", loc=["query", "state"]) from None
    return SandboxFilter(state=parsed_state, label=parse_labels([x for x in label if x]), job=job, backend=backend)


@router.get("/sandboxes", response_class=HTMLResponse)
async def sandboxes(request: Request, session: Session, ui: Dashboard, state: str = "", job: str = "",
                    backend: str = "", after: Annotated[str, Query(max_length=64)] = "",
                    limit: Annotated[int, Query(ge=1, le=MAX_SANDBOX_PAGE_SIZE)] = SANDBOX_PAGE_SIZE,
                    ) -> HTMLResponse:
    labels = request.query_params.getlist("label")
    flt = sandbox_filter(state, labels, job, backend)
    page, next_after = await ui.sandbox_page(session.tenant, flt, after=after or None, limit=limit)
    # The page polls its own URL (this page of these filters); the pager keeps the filters.
    filters = [(k, v) for k, v in request.query_params.multi_items() if k != "after"]
    return render(request, "sandboxes.html", "_sandbox_rows.html", session, nav="sandboxes",
                  sandboxes=page, states=[s.value for s in SandboxState],
                  query={"state": state, "label": " ".join(labels), "job": job, "backend": backend, "limit": limit},
                  labels=labels, after=after,
                  poll_url=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                  first_url="/ui/sandboxes?" + urlencode(filters),
                  next_url="/ui/sandboxes?" + urlencode([*filters, ("after", next_after)]) if next_after else None)


@router.get("/sandboxes/{sandbox_id}", response_class=HTMLResponse)
async def sandbox(request: Request, sandbox_id: str, session: Session, ui: Dashboard) -> HTMLResponse:
    record = await ui.sandbox(session.tenant, sandbox_id)
    return render(request, "sandbox.html", "_sandbox_live.html", session, nav="sandboxes", sb=record,
                  spec=record.spec.model_dump(mode="json"), timeline=timeline(record))


@router.get("/sandboxes/{sandbox_id}/screen-frame", response_class=HTMLResponse)
async def screen_frame(request: Request, sandbox_id: str, session: Session, ui: Dashboard) -> HTMLResponse:
    """The screen image tag, re-rendered by polling so the browser fetches a new frame."""
    record = await ui.sandbox(session.tenant, sandbox_id)
    return render(request, "_screen.html", None, session, sb=record, frame=time.time_ns())


@router.get("/sandboxes/{sandbox_id}/screen")
async def screen(request: Request, sandbox_id: str, session: Session) -> Response:
    png = await service_of(request, SandboxDataPath).screenshot(session.tenant, sandbox_id)
    return Response(png, media_type="image/png")


@router.post("/sandboxes/{sandbox_id}/input", response_class=HTMLResponse)
async def send_input(request: Request, sandbox_id: str, session: Checked,
                     kind: Annotated[str, Form()], text: Annotated[str, Form(max_length=4096)] = "",
                     keys: Annotated[str, Form(max_length=200)] = "",
                     x: Annotated[int | None, Form()] = None, y: Annotated[int | None, Form()] = None) -> HTMLResponse:
    events = {"text": [{"type": "text", "text": text}], "key": [{"type": "key", "keys": keys.split()}],
              "click": [{"type": "click", "x": x, "y": y}]}.get(kind)
    if events is None:
        raise BadRequest("kind must be text, key or click", loc=["body", "kind"])
    try:
        body = InputRequest.model_validate({"events": events})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise BadRequest(f"bad {kind} input: {first['msg']}", loc=["body", kind]) from None
    sent = await service_of(request, SandboxDataPath).send_input(session.tenant, sandbox_id, body)
    return HTMLResponse(templates.get_template("_input_sent.html").render(sent=sent, kind=kind))


@router.post("/sandboxes/{sandbox_id}/exec", response_class=HTMLResponse)
async def console_exec(request: Request, sandbox_id: str, session: Checked,
                       cmd: Annotated[str, Form(min_length=1, max_length=8192)]) -> HTMLResponse:
    """Run a shell command in the sandbox and show its output (as text: it is the sandbox's)."""
    body = ExecRequest(cmd=cmd, timeout_s=CONSOLE_TIMEOUT_S, output_limit=CONSOLE_OUTPUT_LIMIT)
    try:
        result = await service_of(request, SandboxDataPath).exec(session.tenant, sandbox_id, body)
    except CorralError as exc:
        return render(request, "_exec_result.html", None, session, cmd=cmd, result=None, error=exc.message)
    return render(request, "_exec_result.html", None, session, cmd=cmd, result=result, error=None)


@router.post("/sandboxes/{sandbox_id}/delete")
async def delete_sandbox(request: Request, sandbox_id: str, session: Checked) -> Response:
    await service_of(request, SandboxService).delete(session.tenant, sandbox_id)
    response = Response(status_code=204)
    response.headers["HX-Redirect"] = f"/ui/sandboxes/{sandbox_id}"
    return response


@router.get("/jobs", response_class=HTMLResponse)
async def jobs(request: Request, session: Session, ui: Dashboard) -> HTMLResponse:
    return render(request, "jobs.html", "_jobs.html", session, nav="jobs", jobs=await ui.jobs(session.tenant))


@router.get("/rollouts", response_class=HTMLResponse)
async def rollouts(request: Request, session: Session, ui: Dashboard, job: str = "") -> HTMLResponse:
    return render(request, "rollouts.html", "_rollouts.html", session, nav="rollouts", job=job,
                  rollouts=await ui.rollouts(session.tenant, job))


@router.get("/rollouts/{rollout_id}", response_class=HTMLResponse)
async def rollout(request: Request, rollout_id: str, session: Session, ui: Dashboard) -> HTMLResponse:
    return render(request, "rollout.html", "_trajectory.html", session, nav="rollouts",
                  rollout=await ui.rollout(session.tenant, rollout_id))


@router.get("/fncall", response_class=HTMLResponse)
async def fncall(request: Request, session: Session, ui: Dashboard) -> HTMLResponse:
    return render(request, "fncall.html", "_fncall.html", session, nav="fncall", data=await ui.fncall())


@router.get("/images", response_class=HTMLResponse)
async def images(request: Request, session: Session, ui: Dashboard) -> HTMLResponse:
    return render(request, "images.html", None, session, nav="images", data=await ui.images(session.tenant))


@router.get("/nodes", response_class=HTMLResponse)
async def nodes(request: Request, session: Session, ui: Dashboard) -> HTMLResponse:
    return render(request, "nodes.html", "_nodes.html", session, nav="nodes", nodes=await ui.nodes())


async def _login_required(request: Request, exc: LoginRequired) -> Response:
    if request.headers.get("hx-request"):  # a poll from an expired page: htmx navigates itself
        response: Response = Response(status_code=401, headers={"HX-Redirect": "/ui/login"})
    else:
        response = RedirectResponse("/ui/login", status_code=303)
    response.headers.update(SECURITY_HEADERS)
    return response


def install_dashboard(app: FastAPI) -> None:
    """Mount the dashboard on the api; its sessions and reads (``UiSessions``, ``DashboardService``)
    are the app's container's (corral_api.services)."""
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    app.add_exception_handler(LoginRequired, _login_required)
