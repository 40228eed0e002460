"""The code interpreter's contexts (``e2b_code_interpreter``'s port 49999 API): each context
is one long-lived ``python3`` process in the sandbox (kernel_driver.py), started like any E2B
process (processes.py: the api holds its exec stream), fed through a FIFO in the sandbox by a
short exec per cell. Variables therefore survive between cells of a context; restart starts a
fresh process, delete ends it. Python only; contexts live in this api replica's memory."""

import asyncio
import base64
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from corral_api.compat.e2b.connect import ConnectError
from corral_api.compat.e2b.errors import E2bError
from corral_api.compat.e2b.kernel_driver import MARK, SOURCE
from corral_api.compat.e2b.processes import ProcessTable, RunningProcess, events
from corral_api.dataplane.service import SandboxDataPath
from corral_common.contracts.exec import ExecRequest
from corral_common.logging import get_logger
from corral_common.web.errors import CorralError

log = get_logger(__name__)

LANGUAGES = ("python",)
_READY_TIMEOUT_S = 60.0
_KERNEL_LIFETIME_S = 24 * 3600.0
_STARTUP_SAID = 2000  # bytes of a kernel's dying words kept for the error


@dataclass
class Context:
    id: str
    sandbox_id: str
    cwd: str
    language: str = "python"
    proc: RunningProcess | None = None
    reader: asyncio.Task | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Events of the cell being run, by its request id.
    inbox: dict[str, asyncio.Queue] = field(default_factory=dict)
    ready: asyncio.Future | None = None
    # What the kernel printed before it was ready, and how it ended if it never was: the
    # reason a cell gets when python3 cannot start (not installed, a broken image).
    startup_output: bytearray = field(default_factory=bytearray)
    exit_status: str = ""

    @property
    def fifo(self) -> str:
        return f"/tmp/.corral-kernel-{self.id}"  # noqa: S108 - inside the sandbox, made by the kernel (0600)

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}


class Interpreter:
    def __init__(self, data: SandboxDataPath):
        self.data = data
        self.kernels = ProcessTable(data)  # kept apart from the sandbox's own commands.list()
        self._contexts: dict[str, dict[str, Context]] = {}

    # ---- contexts ---------------------------------------------------------------------------

    def list(self, sandbox_id: str) -> list[Context]:
        return list(self._contexts.get(sandbox_id, {}).values())

    def create(self, sandbox_id: str, cwd: str | None, language: str | None) -> Context:
        language = language or "python"
        if language not in LANGUAGES:
            raise E2bError(400, f"language {language!r} is not supported here (supported: {', '.join(LANGUAGES)})")
        context = Context(id=secrets.token_hex(8), sandbox_id=sandbox_id, cwd=cwd or "/home/user", language=language)
        self._contexts.setdefault(sandbox_id, {})[context.id] = context
        return context

    def get(self, sandbox_id: str, context_id: str) -> Context:
        context = self._contexts.get(sandbox_id, {}).get(context_id)
        if context is None:
            raise E2bError(404, f"context {context_id} not found")
        return context

    def default(self, sandbox_id: str, language: str | None) -> Context:
        """The sandbox's default context for a language (made on first use)."""
        for context in self.list(sandbox_id):
            if context.id.startswith("default-") and context.language == (language or "python"):
                return context
        context = self.create(sandbox_id, None, language)
        self._contexts[sandbox_id].pop(context.id)
        context.id = f"default-{context.language}"
        self._contexts[sandbox_id][context.id] = context
        return context

    async def restart(self, context: Context) -> None:
        await self._stop(context)

    async def delete(self, context: Context) -> None:
        await self._stop(context)
        self._contexts.get(context.sandbox_id, {}).pop(context.id, None)

    async def _stop(self, context: Context) -> None:
        if context.proc is not None:
            self.kernels.kill(context.proc)
        if context.reader is not None:
            await asyncio.gather(context.reader, return_exceptions=True)
        context.proc = context.reader = context.ready = None

    async def forget(self, sandbox_id: str) -> None:
        """The sandbox is gone: end and drop its contexts."""
        for context in list(self._contexts.pop(sandbox_id, {}).values()):
            await self._stop(context)

    async def close(self) -> None:
        await self.kernels.close()

    # ---- running cells ----------------------------------------------------------------------

    async def _kernel(self, tenant: str, context: Context) -> None:
        """Start the context's python3 if it is not running, and wait until it reads requests."""
        if context.proc is not None and context.proc.task is not None and not context.proc.task.done():
            return
        config = {"cmd": "python3", "args": ["-u", "-c", SOURCE, context.fifo]}
        try:
            proc, queue = await self.kernels.start(tenant, context.sandbox_id, config, tag=f"kernel-{context.id}",
                                                   user="user", cwd=context.cwd, timeout_s=_KERNEL_LIFETIME_S)
        except CorralError as exc:
            raise E2bError(exc.status_code, exc.message) from None
        except ConnectError as exc:  # python3 could not start
            raise E2bError(400, f"cannot start a python kernel in this sandbox ({exc}); "
                                "the code interpreter needs an environment with python3") from None
        context.proc = proc
        context.startup_output.clear()
        context.exit_status = ""
        context.ready = asyncio.get_running_loop().create_future()
        context.reader = asyncio.create_task(self._read(context, proc, queue))
        try:
            started = await asyncio.wait_for(asyncio.shield(context.ready), _READY_TIMEOUT_S)
        except TimeoutError:
            await self._stop(context)
            raise E2bError(502, "the python kernel did not start") from None
        if not started:  # it ended before it could read a cell: say why, now
            said = context.startup_output.decode(errors="replace").strip()[-_STARTUP_SAID:]
            status, context.exit_status = context.exit_status, ""
            context.startup_output.clear()
            await self._stop(context)
            raise E2bError(400, "cannot start a python kernel in this sandbox (python3 -u: "
                                f"{status or 'ended'}{': ' + said if said else ''}); the code interpreter needs an "
                                "environment with python3 (e.g. templateID code-interpreter-v1 or debian-python)")

    async def _read(self, context: Context, proc: RunningProcess, queue: asyncio.Queue) -> None:
        """Split the kernel's output into marked events (to the cell they belong to) and
        plain output (stdout of the cell being run)."""
        pending = b""
        current: str | None = None

        def deliver(event: dict[str, Any]) -> None:
            target = context.inbox.get(event.get("rid") or current or "")
            if target is not None:
                target.put_nowait(event)

        async for event in events(proc, queue):
            if "end" in event:
                context.exit_status = str(event["end"].get("status") or event["end"].get("error") or "")
                break
            data = event.get("data", {})
            for stream, encoded in data.items():
                pending += base64.b64decode(encoded) if stream == "stdout" else b""
                if context.ready is not None and not context.ready.done():
                    context.startup_output += base64.b64decode(encoded)[:_STARTUP_SAID]
                    del context.startup_output[:-_STARTUP_SAID]
                if stream == "stderr":
                    deliver({"type": "stderr", "text": base64.b64decode(encoded).decode(errors="replace"),
                             "timestamp": 0})
            while b"\n" in pending:
                raw, pending = pending.split(b"\n", 1)
                line = raw.decode(errors="replace")
                if line.startswith(MARK):
                    try:
                        message = json.loads(line[len(MARK):])
                    except ValueError:
                        continue
                    if message.get("type") == "ready":
                        if context.ready is not None and not context.ready.done():
                            context.ready.set_result(True)
                        continue
                    current = message.get("rid") or current
                    deliver(message)
                else:
                    deliver({"type": "stdout", "text": line + "\n", "timestamp": 0})
        # The kernel is gone (killed, restarted, crashed): every waiting cell ends.
        for inbox in context.inbox.values():
            inbox.put_nowait({"type": "error", "name": "KernelDied", "value": "the python kernel exited",
                              "traceback": ""})
            inbox.put_nowait({"type": "end"})
        if context.ready is not None and not context.ready.done():
            context.ready.set_result(False)

    async def execute(self, tenant: str, context: Context, code: str, env: dict[str, str]) -> AsyncIterator[bytes]:
        """NDJSON lines of one cell: stdout/stderr/result/error/number_of_executions."""
        await context.lock.acquire()
        try:
            await self._kernel(tenant, context)
            rid = secrets.token_hex(8)
            inbox: asyncio.Queue = asyncio.Queue()
            context.inbox[rid] = inbox
            request = json.dumps({"id": rid, "code": code, "env": env}) + "\n"
            try:
                await self.data.exec(tenant, context.sandbox_id, ExecRequest(
                    cmd=["/bin/sh", "-c", 'cat >> "$0"', context.fifo], stdin=request, timeout_s=30))
            except CorralError as exc:
                context.inbox.pop(rid, None)
                raise E2bError(exc.status_code, exc.message) from None
        except BaseException:
            context.lock.release()
            raise
        return self._cell(context, rid, inbox)

    async def _cell(self, context: Context, rid: str, inbox: asyncio.Queue) -> AsyncIterator[bytes]:
        try:
            while True:
                event = await inbox.get()
                if event.get("type") == "end":
                    return
                event.pop("rid", None)
                yield json.dumps(event).encode() + b"\n"
        finally:
            context.inbox.pop(rid, None)
            context.lock.release()
