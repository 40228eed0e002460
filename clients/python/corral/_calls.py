"""Every HTTP call the SDK makes, in one table: method, url, query, body and how to read the answer.

A builder returns a ``Call``; it sends nothing. The sync and the async transport
(``corral._transport``) both send it and hand back ``call.result(response)``, so a call is
written once for ``Corral`` and ``AsyncCorral`` alike, and every error answer goes through the
one mapping, ``corral.errors.raise_for``, before anything is parsed.

The query parameters are those the generated client (``corral_client.api``) sends for the
same operation, defaults included (``get_sandbox`` sends ``timeout=60.0``, as it always did):
``tests/unit/sdk/test_sdk_calls.py`` compares the two. Builders are named after the api's
operation ids. Path parameters are percent-escaped like the generated client does.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from corral._common import ExecChunk, ExecResult, input_body, label_selectors
from corral.errors import raise_for
from corral_client.models import (
    CommitResult,
    Environment,
    ExecRequest,
    FileInfo,
    ImageImport,
    Layer,
    Node,
    SandboxCreate,
    Snapshot,
    StorageUsage,
    Usage,
)
from corral_client.models import Rollout as RolloutInfo
from corral_client.models import Sandbox as SandboxInfo

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the parser of its success answer (of one NDJSON line, for a stream)."""

    method: str
    url: str
    parse: Callable[[Any], T]  # an httpx.Response; for a stream, one line (str)
    params: Any = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] | None = None

    def request_args(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client.request`` / ``.stream`` after method and url."""
        return {"params": self.params, "json": self.json, "content": self.content, "headers": self.headers}

    def result(self, response: httpx.Response) -> T:
        raise_for(response.status_code, response.content)
        return self.parse(response)


def _path(template: str, *ids: str) -> str:
    return template.format(*(quote(str(i), safe="") for i in ids))


def _json(response: httpx.Response) -> Any:
    return response.json()


def _content(response: httpx.Response) -> bytes:
    return response.content


def _nothing(response: httpx.Response) -> None:
    return None


def _model(cls: Any) -> Callable[[httpx.Response], Any]:
    return lambda response: cls.from_dict(response.json())


def _items(cls: Any) -> Callable[[httpx.Response], list[Any]]:
    return lambda response: [cls.from_dict(item) for item in response.json()["items"]]


def _without_none(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


# ---- sandboxes ---------------------------------------------------------------------------

def create_sandbox(body: SandboxCreate, *, wait_for: str | None = None, timeout: float = 60.0) -> Call[SandboxInfo]:
    return Call("POST", "/v1/sandboxes", _model(SandboxInfo), params=_without_none(
        {"wait_for": wait_for, "timeout": timeout}), json=body.to_dict())


def get_sandbox(sandbox_id: str, *, wait_for: str | None = None, timeout: float = 60.0) -> Call[SandboxInfo]:
    return Call("GET", _path("/v1/sandboxes/{}", sandbox_id), _model(SandboxInfo),
                params=_without_none({"wait_for": wait_for, "timeout": timeout}))


def list_sandboxes(labels: dict[str, str] | None = None, state: str | None = None) -> Call[list[SandboxInfo]]:
    return Call("GET", "/v1/sandboxes", _items(SandboxInfo),
                params=_without_none({"label": label_selectors(labels), "state": state or None}))


def delete_sandboxes(labels: dict[str, str]) -> Call[list[SandboxInfo]]:
    return Call("DELETE", "/v1/sandboxes", _items(SandboxInfo), params={"label": label_selectors(labels)})


def delete_sandbox(sandbox_id: str, *, wait: bool = False, timeout: float = 60.0) -> Call[SandboxInfo]:
    return Call("DELETE", _path("/v1/sandboxes/{}", sandbox_id), _model(SandboxInfo),
                params={"wait": wait, "timeout": timeout})


def exec_command(sandbox_id: str, body: ExecRequest) -> Call[ExecResult]:
    return Call("POST", _path("/v1/sandboxes/{}/exec", sandbox_id), _model(ExecResult), json=body.to_dict())


def exec_command_stream(sandbox_id: str, body: ExecRequest) -> Call[ExecChunk]:
    """A stream: ``parse`` reads one NDJSON line (see ``SyncTransport.stream``)."""
    return Call("POST", _path("/v1/sandboxes/{}/exec/stream", sandbox_id), ExecChunk.from_line, json=body.to_dict())


def write_file(sandbox_id: str, path: str, data: bytes | str, mode: int = 0o644) -> Call[None]:
    content = data.encode() if isinstance(data, str) else data
    return Call("PUT", _path("/v1/sandboxes/{}/files", sandbox_id), _nothing, params={"path": path, "mode": mode},
                content=content, headers={"content-type": "application/octet-stream"})


def read_file(sandbox_id: str, path: str) -> Call[bytes]:
    return Call("GET", _path("/v1/sandboxes/{}/files", sandbox_id), _content, params={"path": path})


def list_files(sandbox_id: str, path: str = ".") -> Call[list[FileInfo]]:
    return Call("GET", _path("/v1/sandboxes/{}/files/list", sandbox_id),
                lambda response: [FileInfo.from_dict(entry) for entry in response.json()], params={"path": path})


def pause_sandbox(sandbox_id: str) -> Call[SandboxInfo]:
    return Call("POST", _path("/v1/sandboxes/{}/pause", sandbox_id), _model(SandboxInfo))


def set_sandbox_network(sandbox_id: str, network: dict[str, Any]) -> Call[SandboxInfo]:
    return Call("PATCH", _path("/v1/sandboxes/{}/network", sandbox_id), _model(SandboxInfo), json=network)


def get_sandbox_network(sandbox_id: str) -> Call[dict[str, Any]]:
    return Call("GET", _path("/v1/sandboxes/{}/network", sandbox_id), _json)


def get_sandbox_usage(sandbox_id: str) -> Call[Usage]:
    return Call("GET", _path("/v1/sandboxes/{}/usage", sandbox_id), _model(Usage))


def resume_sandbox(sandbox_id: str) -> Call[SandboxInfo]:
    return Call("POST", _path("/v1/sandboxes/{}/resume", sandbox_id), _model(SandboxInfo))


def get_screen(sandbox_id: str) -> Call[bytes]:
    return Call("GET", _path("/v1/sandboxes/{}/screen", sandbox_id), _content)


def send_input(sandbox_id: str, events: Iterable[Any]) -> Call[int]:
    return Call("POST", _path("/v1/sandboxes/{}/input", sandbox_id), lambda response: int(response.json()["sent"]),
                json=input_body(events))


def snapshot_sandbox(sandbox_id: str) -> Call[Snapshot]:
    return Call("POST", _path("/v1/sandboxes/{}/snapshot", sandbox_id), _model(Snapshot))


def commit_sandbox(sandbox_id: str, body: dict[str, Any]) -> Call[CommitResult]:
    return Call("POST", _path("/v1/sandboxes/{}/commit", sandbox_id), _model(CommitResult), json=body)


def fork_sandbox(sandbox_id: str, count: int, processes: bool = False) -> Call[list[SandboxInfo]]:
    return Call("POST", _path("/v1/sandboxes/{}/fork", sandbox_id), _items(SandboxInfo),
                params={"count": count, "processes": processes})


# ---- layers, environments, images --------------------------------------------------------

TAR = {"content-type": "application/x-tar"}


def upload_layer(kind: str, name: str, version: str, tar: bytes) -> Call[Layer]:
    return Call("POST", "/v1/layers", _model(Layer), params={"kind": kind, "name": name, "version": version},
                content=tar, headers=TAR)


def list_layers(kind: str | None = None) -> Call[list[Layer]]:
    return Call("GET", "/v1/layers", lambda response: [Layer.from_dict(x) for x in response.json()],
                params=_without_none({"kind": kind}))


def get_layer(name: str, version: str) -> Call[Layer]:
    return Call("GET", _path("/v1/layers/{}/{}", name, version), _model(Layer))


def delete_layer(name: str, version: str) -> Call[Layer]:
    return Call("DELETE", _path("/v1/layers/{}/{}", name, version), _model(Layer))


def create_environment(body: dict[str, Any]) -> Call[Environment]:
    return Call("POST", "/v1/environments", _model(Environment), json=body)


def list_environments() -> Call[list[Environment]]:
    return Call("GET", "/v1/environments", lambda response: [Environment.from_dict(x) for x in response.json()])


def get_environment(name: str) -> Call[Environment]:
    return Call("GET", _path("/v1/environments/{}", name), _model(Environment))


def delete_environment(name: str) -> Call[Environment]:
    return Call("DELETE", _path("/v1/environments/{}", name), _model(Environment))


def import_image(params: dict[str, Any], archive: bytes | None) -> Call[ImageImport]:
    return Call("POST", "/v1/images/import", _model(ImageImport), params=_without_none(params), content=archive,
                headers=TAR if archive is not None else None)


def get_image_import(import_id: str) -> Call[ImageImport]:
    return Call("GET", _path("/v1/images/imports/{}", import_id), _model(ImageImport))


def get_image_usage() -> Call[StorageUsage]:
    return Call("GET", "/v1/images/usage", _model(StorageUsage))


# ---- snapshots ---------------------------------------------------------------------------

def list_snapshots(sandbox_id: str | None = None) -> Call[list[Snapshot]]:
    return Call("GET", "/v1/snapshots", _items(Snapshot), params=_without_none({"sandbox_id": sandbox_id or None}))


def get_snapshot(snapshot_id: str) -> Call[Snapshot]:
    return Call("GET", _path("/v1/snapshots/{}", snapshot_id), _model(Snapshot))


def delete_snapshot(snapshot_id: str) -> Call[Snapshot]:
    return Call("DELETE", _path("/v1/snapshots/{}", snapshot_id), _model(Snapshot))


# ---- jobs (answers stay dicts: Job.info) ---------------------------------------------------

def create_job(body: dict[str, Any]) -> Call[dict[str, Any]]:
    return Call("POST", "/v1/jobs", _json, json=body)


def list_jobs(include_deleted: bool = False) -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/jobs", lambda response: response.json()["items"],
                params={"include_deleted": include_deleted})


def get_job(job_id: str) -> Call[dict[str, Any]]:
    return Call("GET", _path("/v1/jobs/{}", job_id), _json)


def delete_job(job_id: str) -> Call[dict[str, Any]]:
    return Call("DELETE", _path("/v1/jobs/{}", job_id), _json)


# ---- nodes ---------------------------------------------------------------------------------

def list_nodes() -> Call[list[Node]]:
    return Call("GET", "/v1/nodes", _items(Node))


# ---- rollouts ----------------------------------------------------------------------------

def create_rollout(body: dict[str, Any], *, wait: bool, timeout: float) -> Call[RolloutInfo]:
    return Call("POST", "/v1/rollouts", _model(RolloutInfo), params={"wait": wait, "timeout": timeout}, json=body)


def get_rollout(rollout_id: str) -> Call[dict[str, Any]]:
    """The raw answer: ``RolloutInfo`` plus the trajectory's ``steps`` (read by rollouts.py)."""
    return Call("GET", _path("/v1/rollouts/{}", rollout_id), _json)


def list_rollouts(job_id: str | None = None, status: str | None = None) -> Call[list[RolloutInfo]]:
    return Call("GET", "/v1/rollouts", _items(RolloutInfo), params=_without_none({"job_id": job_id, "status": status}))


def rollout_step(rollout_id: str, body: dict[str, Any]) -> Call[dict[str, Any]]:
    return Call("POST", _path("/v1/rollouts/{}/steps", rollout_id), _json, json=body)


def finish_rollout(rollout_id: str, body: dict[str, Any]) -> Call[RolloutInfo]:
    return Call("POST", _path("/v1/rollouts/{}/finish", rollout_id), _model(RolloutInfo), json=body)


# ---- fncall (answers stay dicts shaped like the api's FncallResponse) ----------------------

def fncall(body: dict[str, Any]) -> Call[dict[str, Any]]:
    return Call("POST", "/v1/fncall", _json, json=body)


def create_fncall_batch(calls: list[dict[str, Any]]) -> Call[dict[str, Any]]:
    return Call("POST", "/v1/fncall/batch", _json, json={"calls": calls})


def get_fncall_batch(batch_id: str, *, offset: int, limit: int, timeout: float) -> Call[dict[str, Any]]:
    """Waits (server side, up to ``timeout`` seconds) until the page has results or the batch is done."""
    return Call("GET", _path("/v1/fncall/batch/{}", batch_id), _json,
                params={"offset": offset, "limit": limit, "wait": "true", "timeout": timeout})


# ---- administration (operator keys; answers stay dicts shaped like the api's) --------------

def list_tenants() -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/admin/tenants", lambda response: response.json()["tenants"])


def create_tenant(body: dict[str, Any]) -> Call[dict[str, Any]]:
    return Call("POST", "/v1/admin/tenants", _json, json=body)


def get_tenant(name: str) -> Call[dict[str, Any]]:
    return Call("GET", _path("/v1/admin/tenants/{}", name), _json)


def update_tenant(name: str, body: dict[str, Any]) -> Call[dict[str, Any]]:
    return Call("PATCH", _path("/v1/admin/tenants/{}", name), _json, json=body)


def list_keys(tenant: str | None = None) -> Call[list[dict[str, Any]]]:
    return Call("GET", "/v1/admin/keys", lambda response: response.json()["keys"],
                params=_without_none({"tenant": tenant}))


def create_key(body: dict[str, Any]) -> Call[dict[str, Any]]:
    return Call("POST", "/v1/admin/keys", _json, json=body)


def rotate_key(key_id: str) -> Call[dict[str, Any]]:
    return Call("POST", _path("/v1/admin/keys/{}/rotate", key_id), _json)


def revoke_key(key_id: str) -> Call[dict[str, Any]]:
    return Call("DELETE", _path("/v1/admin/keys/{}", key_id), _json)


def get_usage() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/usage", _json)
