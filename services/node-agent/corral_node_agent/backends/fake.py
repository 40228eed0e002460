"""An in-memory SandboxBackend for tests of everything above the port (manager, control path,
HTTP), like SWE-ReX's dummy deployment. It subclasses the port, so the ABC cannot change
without it noticing, and tests/contract runs the same contract against it as against crun
and QEMU.

Nothing runs: exec records the request and succeeds with no output, files live in a dict
(paths checked by the same rules as the real backends), a snapshot is a copy of that dict.
A sandbox ends on its own after ``spec.timeout_s`` (real time), or when a test calls
``end()``. The knobs are plain attributes: ``fail_start`` (raised by the next starts),
``screen`` (what screenshot() returns), ``calls`` (the calls made, as ``(method, id)``) and
``clock`` (usage's wall time).
"""

import asyncio
import io
import socket
import tarfile
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

from corral_common.contracts.display import InputEvent
from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.contracts.sandboxes import RuntimeInfo, SandboxSpec, Usage
from corral_node_agent.backends import paths
from corral_node_agent.backends.base import Capability, ExitReason, FileData, FinishedUsage, SandboxBackend
from corral_node_agent.backends.types import LayerFormat, RootFs
from corral_node_agent.errors import AlreadyExists, BadInput, NotFound, PortClosed, SandboxPaused

# The smallest valid PNG header a screen can have: signature + IHDR of a 1x1 image.
FAKE_PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"


@dataclass
class _File:
    data: bytes
    mode: int
    mtime: float = field(default_factory=time.time)


@dataclass
class FakeSandbox:
    spec: SandboxSpec
    rootfs: RootFs
    started: float
    paused: bool = False
    files: dict[str, _File] = field(default_factory=dict)  # sandbox path -> file
    timer: asyncio.TimerHandle | None = None


class FakeBackend(SandboxBackend):
    def __init__(self, *, layer_format: LayerFormat = LayerFormat.mounts,
                 # Everything but a VM's memory balloon and the warm pool, which it does not model.
                 capabilities: Iterable[Capability] = frozenset(Capability) - {Capability.balloon, Capability.warm_pool},
                 runtime: dict[str, str] | None = None, accelerator: str = "",
                 clock: Callable[[], float] = time.monotonic):
        self.layer_format = layer_format
        self.capabilities = frozenset(capabilities)
        self.runtime = dict(runtime or {})
        self.accelerator = accelerator
        self.clock = clock
        self.fail_start: BaseException | None = None
        self.screen = FAKE_PNG
        self.calls: list[tuple[str, str]] = []
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.snapshots: dict[str, dict[str, _File]] = {}
        self._finished = FinishedUsage()
        self._tasks: set[asyncio.Task] = set()

    def _get(self, sandbox_id: str) -> FakeSandbox:
        sb = self.sandboxes.get(sandbox_id)
        if sb is None:
            raise NotFound(f"sandbox {sandbox_id} not found on this node", loc=["path", "sandbox_id"])
        return sb

    def _can(self, capability: Capability) -> None:
        if capability not in self.capabilities:
            raise self.unsupported(capability)

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self, sandbox_id: str, spec: SandboxSpec, rootfs: RootFs) -> None:
        self.calls.append(("start", sandbox_id))
        await asyncio.sleep(0)  # a real start takes a while: let concurrent callers run
        if sandbox_id in self.sandboxes:
            raise AlreadyExists(f"sandbox {sandbox_id} already exists")
        if self.fail_start is not None:
            raise self.fail_start
        files: dict[str, _File] = {}
        if spec.from_snapshot:
            self._can(Capability.snapshot)
            if spec.from_snapshot not in self.snapshots:
                raise NotFound(f"snapshot {spec.from_snapshot} is not on this node", loc=["body", "from_snapshot"])
            files = dict(self.snapshots[spec.from_snapshot])
        self._finished.pop(sandbox_id, None)
        sb = self.sandboxes[sandbox_id] = FakeSandbox(spec=spec, rootfs=rootfs, started=self.clock(), files=files)
        sb.timer = asyncio.get_running_loop().call_later(spec.timeout_s, self._timeout_fired, sandbox_id)

    def _timeout_fired(self, sandbox_id: str) -> None:
        task = asyncio.ensure_future(self.end(sandbox_id, ExitReason.timeout))
        self._tasks.add(task)  # tasks are only weakly held
        task.add_done_callback(self._tasks.discard)

    def _teardown(self, sandbox_id: str) -> Usage:
        usage = self.usage(sandbox_id)
        sb = self.sandboxes.pop(sandbox_id)
        if sb.timer is not None:
            sb.timer.cancel()
        self._finished.add(sandbox_id, usage)
        return usage

    async def stop(self, sandbox_id: str) -> Usage:
        self.calls.append(("stop", sandbox_id))
        if sandbox_id not in self.sandboxes:
            return self._finished.get(sandbox_id, Usage())
        return self._teardown(sandbox_id)

    async def end(self, sandbox_id: str, reason: ExitReason) -> Usage:
        """Make a sandbox end on its own (its init exited, it timed out...), as a real one would."""
        usage = self._teardown(sandbox_id)
        await self._report_exit(sandbox_id, reason, usage)
        return usage

    def usage(self, sandbox_id: str) -> Usage:
        sb = self.sandboxes.get(sandbox_id)
        if sb is not None:
            return Usage(wall_time_s=self.clock() - sb.started)
        if sandbox_id in self._finished:
            return self._finished[sandbox_id]
        raise NotFound(f"sandbox {sandbox_id} not found")

    def list_running(self) -> list[str]:
        return list(self.sandboxes)

    def describe(self, sandbox_id: str) -> RuntimeInfo:
        self._get(sandbox_id)
        return cast(RuntimeInfo, dict(self.runtime))

    def spec_of(self, sandbox_id: str) -> SandboxSpec:
        self._can(Capability.adopt)
        return self._get(sandbox_id).spec

    # ---- pause, screen, snapshots -------------------------------------------------------

    async def pause(self, sandbox_id: str) -> None:
        self._can(Capability.pause)
        self.calls.append(("pause", sandbox_id))
        self._get(sandbox_id).paused = True

    async def resume(self, sandbox_id: str) -> None:
        self._can(Capability.pause)
        self.calls.append(("resume", sandbox_id))
        self._get(sandbox_id).paused = False

    def is_paused(self, sandbox_id: str) -> bool:
        sb = self.sandboxes.get(sandbox_id)
        return bool(sb and sb.paused)

    async def commit_diff(self, sandbox_id: str, out_path: str) -> int:
        """The files written to the sandbox, as an OCI layer tar (a fake deletes nothing)."""
        self._can(Capability.commit)
        sb = self._get(sandbox_id)
        with tarfile.open(out_path, "w") as tar:
            for path, f in sorted(sb.files.items()):
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode, info.mtime = len(f.data), f.mode, int(f.mtime)
                tar.addfile(info, io.BytesIO(f.data))
        return len(sb.files)

    async def connect_port(self, sandbox_id: str, port: int) -> socket.socket:
        """A fake sandbox runs nothing, so nothing listens on any of its ports."""
        self._can(Capability.ports)
        self._get(sandbox_id)
        raise PortClosed(f"port {port} is not open in sandbox {sandbox_id}")

    async def screenshot(self, sandbox_id: str) -> bytes:
        self._can(Capability.screen)
        self._get(sandbox_id)
        return self.screen

    async def send_input(self, sandbox_id: str, events: list[InputEvent]) -> None:
        self._can(Capability.screen)
        self._get(sandbox_id)
        self.calls.append(("send_input", sandbox_id))

    async def snapshot(self, sandbox_id: str, snapshot_id: str) -> int:
        self._can(Capability.snapshot)
        sb = self._get(sandbox_id)
        self.calls.append(("snapshot", snapshot_id))
        if snapshot_id in self.snapshots:
            raise AlreadyExists(f"snapshot {snapshot_id} exists")
        self.snapshots[snapshot_id] = dict(sb.files)
        return sum(len(f.data) for f in sb.files.values())

    async def delete_snapshot(self, snapshot_id: str) -> None:
        self._can(Capability.snapshot)
        self.calls.append(("delete_snapshot", snapshot_id))
        if self.snapshots.pop(snapshot_id, None) is None:
            raise NotFound(f"snapshot {snapshot_id} is not on this node")

    # ---- data path ----------------------------------------------------------------------

    async def exec(self, sandbox_id: str, req: ExecRequest) -> ExecResult:
        sb = self._get(sandbox_id)
        if sb.paused:
            raise SandboxPaused(f"sandbox {sandbox_id} is paused", loc=["path", "sandbox_id"])
        self.calls.append(("exec", sandbox_id))
        return ExecResult(exit_code=0, stdout="", stderr="", duration_ms=0.0, encoding=req.output_encoding)

    async def exec_stream(self, sandbox_id: str, req: ExecRequest) -> AsyncIterator[ExecChunk]:
        yield ExecChunk(type="exit", result=await self.exec(sandbox_id, req))

    def _path(self, sandbox_id: str, path: str) -> tuple[FakeSandbox, str]:
        sb = self._get(sandbox_id)
        return sb, paths.sandbox_path(paths.split_path(path))

    @staticmethod
    def _is_dir(sb: FakeSandbox, where: str) -> bool:
        prefix = where.rstrip("/") + "/"
        return where == "/" or any(p.startswith(prefix) for p in sb.files)

    def _file(self, sandbox_id: str, path: str) -> tuple[str, _File]:
        sb, where = self._path(sandbox_id, path)
        if self._is_dir(sb, where):
            raise BadInput(f"{where}: is a directory", loc=paths.LOC)
        if where not in sb.files:
            raise NotFound(f"{where}: no such file or directory", loc=paths.LOC)
        return where, sb.files[where]

    async def write_file(self, sandbox_id: str, path: str, data: FileData, mode: int = 0o644) -> int:
        sb, where = self._path(sandbox_id, path)
        if self._is_dir(sb, where):
            raise BadInput(f"{where}: is a directory", loc=paths.LOC)
        body = data if isinstance(data, bytes) else b"".join([chunk async for chunk in data])
        sb.files[where] = _File(bytes(body), mode & 0o777)
        return len(body)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        return self._file(sandbox_id, path)[1].data

    async def open_file(self, sandbox_id: str, path: str) -> tuple[int, AsyncIterator[bytes]]:
        data = self._file(sandbox_id, path)[1].data

        async def chunks() -> AsyncIterator[bytes]:
            yield data

        return len(data), chunks()

    async def stat(self, sandbox_id: str, path: str) -> FileInfo:
        sb, where = self._path(sandbox_id, path)
        name = where.rsplit("/", 1)[-1] or "/"
        if self._is_dir(sb, where):
            return FileInfo(name=name, path=where, type="dir", size=0, mode=0o755, mtime=0.0)
        where, f = self._file(sandbox_id, path)
        return FileInfo(name=name, path=where, type="file", size=len(f.data), mode=f.mode, mtime=f.mtime)

    async def list_dir(self, sandbox_id: str, path: str) -> list[FileInfo]:
        sb, where = self._path(sandbox_id, path)
        if not self._is_dir(sb, where):
            if where in sb.files:
                raise BadInput(f"{where}: not a directory (or a symbolic link)", loc=paths.LOC)
            raise NotFound(f"{where}: no such file or directory", loc=paths.LOC)
        base = where.rstrip("/")
        names = sorted({p[len(base) + 1:].split("/", 1)[0] for p in sb.files if p.startswith(base + "/")})
        return [await self.stat(sandbox_id, f"{base}/{name}") for name in names]
