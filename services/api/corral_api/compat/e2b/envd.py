"""envd, served by Corral: which sandbox and user a call is for, and the two Connect-RPC
services (``process.Process``, ``filesystem.Filesystem``) in terms of Corral's data path.

Reads (stat, list) use the node-agent's own file calls; the few writes envd offers beyond
uploads (mkdir -p, mv, rm -rf) run as that user's commands inside the sandbox, with the paths
as argv (never through a shell), so they see exactly the sandbox's own filesystem and rights.
"""

import base64
import binascii
import hmac
import posixpath
import stat as stat_mod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.requests import HTTPConnection

from corral_api.compat.e2b.connect import ConnectError
from corral_api.compat.e2b.errors import E2bError, SandboxGone
from corral_api.compat.e2b.processes import ProcessTable, RunningProcess, events
from corral_api.compat.e2b.repository import E2bRecord, E2bRepository
from corral_api.compat.e2b.service import E2bSandboxes
from corral_api.dataplane.service import SandboxDataPath
from corral_api.deps import service_of
from corral_api.limits import claim_tenant_slot
from corral_api.sandboxes.service import SandboxService
from corral_common.contracts.exec import ExecRequest, FileInfo
from corral_common.contracts.sandboxes import SandboxState
from corral_common.logging import get_logger
from corral_common.web.errors import CorralError, NotFound

log = get_logger(__name__)

HOMES = {"user": "/home/user", "root": "/root"}
_FILE_TYPES = {"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_SYMLINK"}
_MAX_DEPTH = 32


@dataclass
class Envd:
    """One envd call: the sandbox (running, the caller's token checked), its tenant and user."""

    sandbox_id: str
    tenant: str
    user: str

    @property
    def home(self) -> str:
        return HOMES[self.user]

    def path(self, path: str) -> str:
        """Absolute, or relative to the user's home (as envd resolves them)."""
        if not path:
            return self.home
        return posixpath.normpath(path if path.startswith("/") else f"{self.home}/{path}")


def user_of(request: HTTPConnection, query_user: str | None = None) -> str:
    """``Authorization: Basic base64("<user>:")`` (envd's user selection), or ``username=``."""
    user = query_user
    header = request.headers.get("authorization", "")
    if header.lower().startswith("basic "):
        try:
            user = base64.b64decode(header[6:]).decode().partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            raise E2bError(400, "Authorization: not valid Basic credentials") from None
    user = user or "user"
    if user not in HOMES:
        raise E2bError(400, f"user {user!r} does not exist here (users: {', '.join(HOMES)})")
    return user


def _token_ok(request: HTTPConnection, record: E2bRecord, allow_traffic: bool) -> bool:
    """The envd access token, or (the code interpreter's context calls carry only that one)
    the sandbox's traffic token."""
    pairs = [(request.headers.get("x-access-token"), record.access_token),
             (request.headers.get("e2b-traffic-access-token") if allow_traffic else None, record.traffic_token)]
    return any(given and expected and hmac.compare_digest(given.encode(), expected.encode())
               for given, expected in pairs)


async def resolve(request: HTTPConnection, query_user: str | None = None, *, allow_traffic: bool = False) -> Envd:
    """The sandbox of an envd call, from ``E2b-Sandbox-Id`` and its token. A sandbox that is
    not running (or not the token's) answers 502 "…was not found"."""
    sandbox_id = request.headers.get("e2b-sandbox-id", "")
    repo: E2bRepository = service_of(request, E2bSandboxes).repo
    token = request.headers.get("x-access-token", "")
    if not sandbox_id and 0 < len(token) <= 128:
        sandbox_id = await repo.sandbox_of_token(token) or ""
    record = await repo.get(sandbox_id) if 0 < len(sandbox_id) <= 64 else None
    if record is None or not _token_ok(request, record, allow_traffic):
        log.info("e2b.envd_refused", sandbox_id=sandbox_id[:64], path=request.url.path,
                 why="unknown sandbox" if record is None else "token mismatch")
        raise SandboxGone(sandbox_id)
    sandboxes: SandboxService = service_of(request, SandboxService)
    try:
        corral = await sandboxes.get(record.tenant, sandbox_id)
    except NotFound:
        raise SandboxGone(sandbox_id) from None
    # A killed sandbox is gone for E2B as soon as kill returns (its SDK checks is_running right
    # after), although the node may still be stopping it.
    if corral.state is not SandboxState.running or corral.delete_requested:
        log.info("e2b.envd_refused", sandbox_id=sandbox_id, path=request.url.path,
                 why="deleted" if corral.delete_requested else corral.state.value)
        raise SandboxGone(sandbox_id)
    claim_tenant_slot(request, record.tenant)  # its token, not an API key, named the tenant
    return Envd(sandbox_id, record.tenant, user_of(request, query_user))


def connect_error(exc: CorralError) -> ConnectError:
    """A Corral data-path error as the Connect code envd would answer."""
    if exc.status_code == 409 and exc.code == "sandbox_not_running":
        return ConnectError("unavailable", "The sandbox was not found")
    code = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
            409: "failed_precondition", 413: "resource_exhausted", 422: "invalid_argument",
            429: "resource_exhausted", 503: "unavailable", 507: "resource_exhausted"}.get(exc.status_code, "internal")
    return ConnectError(code, exc.message)


def _timestamp(ts: float) -> str:
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry_info(info: FileInfo) -> dict[str, Any]:
    kind = {"file": stat_mod.S_IFREG, "dir": stat_mod.S_IFDIR, "symlink": stat_mod.S_IFLNK}.get(info.type, 0)
    entry: dict[str, Any] = {"name": info.name, "type": _FILE_TYPES.get(info.type, "FILE_TYPE_UNSPECIFIED"),
                             "path": info.path, "size": str(info.size), "mode": info.mode,
                             "permissions": stat_mod.filemode(kind | info.mode),
                             "modifiedTime": _timestamp(info.mtime)}
    if info.type == "symlink":
        entry["isSymlink"] = True
    return entry


class EnvdServices:
    """The RPC methods; each takes (call, request message) and returns the response message
    (unary) or an async iterator of them (server streams)."""

    def __init__(self, data: SandboxDataPath, processes: ProcessTable):
        self.data = data
        self.processes = processes

    # ---- process.Process --------------------------------------------------------------------

    async def start(self, call: Envd, message: dict[str, Any], timeout_s: float) -> AsyncIterator[dict[str, Any]]:
        config = message.get("process") or {}
        cwd = call.path(config["cwd"]) if config.get("cwd") else call.home
        proc, queue = await self._corral(self.processes.start(call.tenant, call.sandbox_id, config,
                                                              tag=message.get("tag"), user=call.user, cwd=cwd,
                                                              timeout_s=timeout_s,
                                                              stdin=bool(message.get("stdin"))))
        return self._stream(proc, queue)

    async def connect(self, call: Envd, message: dict[str, Any], timeout_s: float) -> AsyncIterator[dict[str, Any]]:
        proc = self.processes.find(call.sandbox_id, message.get("process") or {})
        return self._stream(proc, proc.subscribe())

    @staticmethod
    async def _stream(proc: RunningProcess, queue: Any) -> AsyncIterator[dict[str, Any]]:
        yield {"event": {"start": {"pid": proc.pid}}}
        async for event in events(proc, queue):
            yield {"event": event}

    async def list_processes(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        return {"processes": [p.info() for p in self.processes.list(call.sandbox_id)]}

    async def send_signal(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        proc = self.processes.find(call.sandbox_id, message.get("process") or {})
        if message.get("signal") not in ("SIGNAL_SIGKILL", "SIGNAL_SIGTERM", 9, 15):
            raise ConnectError("invalid_argument", "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM")
        self.processes.kill(proc)
        return {}

    async def send_input(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        proc = self.processes.find(call.sandbox_id, message.get("process") or {})
        given = (message.get("input") or {}).get("stdin") or (message.get("input") or {}).get("pty") or ""
        try:
            data = base64.b64decode(given, validate=False)
        except (binascii.Error, ValueError):
            raise ConnectError("invalid_argument", "input.stdin must be base64") from None
        await self._corral(self.processes.send_input(call.tenant, proc, data))
        return {}

    async def close_stdin(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        proc = self.processes.find(call.sandbox_id, message.get("process") or {})
        await self._corral(self.processes.close_stdin(call.tenant, proc))
        return {}

    # ---- filesystem.Filesystem --------------------------------------------------------------

    async def _corral(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except CorralError as exc:
            raise connect_error(exc) from None

    async def _stat(self, call: Envd, path: str) -> FileInfo:
        return await self._corral(self.data.stat(call.tenant, call.sandbox_id, path))

    async def _run(self, call: Envd, argv: list[str]) -> None:
        result = await self._corral(self.data.exec(call.tenant, call.sandbox_id,
                                                   ExecRequest(cmd=argv, user=call.user, timeout_s=60)))
        if result.exit_code != 0:
            err = (result.stderr or result.stdout).strip() or f"{argv[0]} failed"
            lowered = err.lower()
            code = ("not_found" if "no such file" in lowered else
                    "permission_denied" if "permission denied" in lowered else "invalid_argument")
            raise ConnectError(code, err)

    async def stat(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        return {"entry": entry_info(await self._stat(call, call.path(message.get("path", ""))))}

    async def list_dir(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        root = call.path(message.get("path", ""))
        depth = int(message.get("depth") or 1)
        if not 1 <= depth <= _MAX_DEPTH:
            raise ConnectError("invalid_argument", f"depth must be between 1 and {_MAX_DEPTH}")
        info = await self._stat(call, root)
        if info.type != "dir":
            raise ConnectError("invalid_argument", f"path {root} is not a directory")
        entries, level = [], [root]
        for _ in range(depth):
            below = []
            for directory in level:
                for item in await self._corral(self.data.list_files(call.tenant, call.sandbox_id, directory)):
                    entries.append(entry_info(item))
                    if item.type == "dir":
                        below.append(item.path)
            level = below
        return {"entries": entries}

    async def make_dir(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        path = call.path(message.get("path", ""))
        try:
            info = await self._stat(call, path)
        except ConnectError as exc:
            if exc.code != "not_found":
                raise
        else:
            if info.type == "dir":
                raise ConnectError("already_exists", f"directory {path} already exists")
            raise ConnectError("invalid_argument", f"path {path} already exists and is not a directory")
        await self._run(call, ["mkdir", "-p", "--", path])
        return {"entry": entry_info(await self._stat(call, path))}

    async def move(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        source, destination = call.path(message.get("source", "")), call.path(message.get("destination", ""))
        await self._stat(call, source)  # not_found before anything moves
        await self._run(call, ["mv", "--", source, destination])
        return {"entry": entry_info(await self._stat(call, destination))}

    async def remove(self, call: Envd, message: dict[str, Any]) -> dict[str, Any]:
        path = call.path(message.get("path", ""))
        if path in ("/", call.home):
            raise ConnectError("invalid_argument", f"refusing to remove {path}")
        await self._run(call, ["rm", "-rf", "--", path])
        return {}


PROCESS_UNARY = {"List": "list_processes", "SendSignal": "send_signal", "SendInput": "send_input", "CloseStdin": "close_stdin"}
PROCESS_STREAMS = {"Start": "start", "Connect": "connect"}
FILESYSTEM_UNARY = {"Stat": "stat", "ListDir": "list_dir", "MakeDir": "make_dir", "Move": "move", "Remove": "remove"}
