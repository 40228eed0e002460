"""Public sandbox endpoints: the lifecycle (the control path over the bus). Exec, files, ports and the
other calls a sandbox's node answers are corral_api.dataplane.router; snapshots, corral_api.snapshots.router."""

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from corral_api.auth.dependencies import Tenant
from corral_api.deps import provide
from corral_api.sandboxes.schemas import Sandbox, SandboxCreate, SandboxList, WaitState
from corral_api.sandboxes.service import SandboxService
from corral_common.contracts.sandboxes import TERMINAL_STATES, SandboxState
from corral_common.inputs import ID_PATTERN
from corral_common.web.errors import ERROR_RESPONSES, BadRequest

router = APIRouter(prefix="/v1/sandboxes", tags=["sandboxes"], responses=ERROR_RESPONSES)

WaitFor = Annotated[WaitState | None, Query(description="Block until the sandbox reaches this state (or fails)")]
WaitTimeout = Annotated[float, Query(gt=0, le=3600, description="Longest wait in seconds")]


Service = Annotated[SandboxService, Depends(provide(SandboxService))]


def parse_labels(selectors: list[str]) -> dict[str, str]:
    labels = {}
    for selector in selectors:
        key, sep, value = selector.partition("=")
        if not sep or not key:
            raise BadRequest(f"label selector {selector!r} must be key=value", loc=["query", "label"])
        labels[key] = value
    return labels


@router.post("", status_code=202, response_model=Sandbox, operation_id="create_sandbox")
async def create_sandbox(body: SandboxCreate, tenant: Tenant, service: Service, response: Response,
                         wait_for: WaitFor = None, timeout: WaitTimeout = 60.0) -> Sandbox:
    """Ask for a sandbox. Answers 202 at once, or after it reaches ``wait_for``."""
    record = await service.create(tenant, body)
    if wait_for:
        record = await service.wait(tenant, record.id, SandboxState(wait_for), timeout)
    response.headers["Location"] = f"/v1/sandboxes/{record.id}"
    return Sandbox.from_record(record)


@router.get("", response_model=SandboxList, operation_id="list_sandboxes")
async def list_sandboxes(tenant: Tenant, service: Service,
                         label: Annotated[list[str], Query(description="key=value; repeat to AND")] = [],
                         state: SandboxState | None = None,
                         limit: Annotated[int | None, Query(ge=1, le=10_000, description=(
                             "At most this many, in id order (then next_after says where the next page starts); "
                             "unset: all of them"))] = None,
                         after: Annotated[str | None, Query(pattern=ID_PATTERN, description=(
                             "Start after this sandbox id (a page's next_after)"))] = None) -> SandboxList:
    if limit is None:
        if after is not None:
            raise BadRequest("after= pages through a listing: give limit= too", loc=["query", "after"])
        records = await service.list(tenant, parse_labels(label), state)
        return SandboxList(items=[Sandbox.from_record(r) for r in records])
    records, next_after = await service.list_page(tenant, parse_labels(label), state, limit=limit, after=after)
    return SandboxList(items=[Sandbox.from_record(r) for r in records], next_after=next_after)


@router.delete("", status_code=202, response_model=SandboxList, operation_id="delete_sandboxes")
async def delete_sandboxes(tenant: Tenant, service: Service,
                           label: Annotated[list[str], Query(description="key=value; repeat to AND; required")] = [],
                           ) -> SandboxList:
    """Delete every live sandbox whose labels match all selectors (e.g. ``job=<id>``)."""
    labels = parse_labels(label)
    if not labels:
        raise BadRequest("give at least one label selector (deleting everything is not offered)",
                         loc=["query", "label"])
    records = await service.list(tenant, labels, None)
    deleted = []
    for record in records:
        if record.state not in TERMINAL_STATES:
            deleted.append(await service.delete(tenant, record.id))
    return SandboxList(items=[Sandbox.from_record(r) for r in deleted])


@router.get("/{sandbox_id}", response_model=Sandbox, operation_id="get_sandbox")
async def get_sandbox(sandbox_id: str, tenant: Tenant, service: Service, wait_for: WaitFor = None,
                      timeout: WaitTimeout = 60.0) -> Sandbox:
    if wait_for:
        return Sandbox.from_record(await service.wait(tenant, sandbox_id, SandboxState(wait_for), timeout))
    return Sandbox.from_record(await service.get(tenant, sandbox_id))


@router.delete("/{sandbox_id}", status_code=202, response_model=Sandbox, operation_id="delete_sandbox")
async def delete_sandbox(sandbox_id: str, tenant: Tenant, service: Service,
                         wait: Annotated[bool, Query(description="Block until it is terminated")] = False,
                         timeout: WaitTimeout = 60.0) -> Sandbox:
    record = await service.delete(tenant, sandbox_id)
    if wait:
        record = await service.wait(tenant, sandbox_id, SandboxState.terminated, timeout)
    return Sandbox.from_record(record)
