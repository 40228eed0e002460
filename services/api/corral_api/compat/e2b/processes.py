"""envd's processes, run through Corral's streaming exec: one node-agent stream per process.

The stream from the node is held by a task of this table, not by the SDK's HTTP request, so a
process outlives the request that started it (``background=True``, a client that went away)
and others can re-attach (``Connect``) or end it (``SendSignal``: the node stream is closed,
and the node-agent kills the command with everything it forked). The pid is the process's own
pid in the sandbox: a one-line ``sh`` prelude prints ``$$`` before it ``exec``s the command.

What this costs: processes live in this api replica's memory (an api restart ends their
streams, and with them the commands); a call for a pid started through another replica
answers not_found.

Standard input (``stdin: true`` at Start): Corral's exec takes stdin only at start, so the
prelude puts a FIFO in the sandbox's /tmp on the command's stdin, held open by a sleeping
writer; ``SendInput`` is a short exec appending to it, ``CloseStdin`` ends the holder (EOF).
"""

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from corral_api.compat.e2b.connect import ConnectError
from corral_api.dataplane.service import SandboxDataPath
from corral_common.contracts.exec import ExecChunk, ExecRequest
from corral_common.logging import get_logger

log = get_logger(__name__)

# Prints the shell's pid, then becomes the command. E2B always asks for /bin/bash; images
# without bash (busybox) run the same arguments under /bin/sh.
_SHELL = 'p=$0; if [ "$p" = /bin/bash ] && [ ! -x /bin/bash ]; then p=/bin/sh; fi; '
PRELUDE = 'echo $$; ' + _SHELL + 'exec "$p" "$@"'
# With stdin: "<pid> <holder pid>", then the command reads the FIFO the holder keeps open.
STDIN_PRELUDE = ('f=/tmp/.corral-stdin-$$; mkfifo -m 600 "$f" || exit 126; '
                 '(exec sleep 2147483647 > "$f") & echo $$ $!; ' + _SHELL + 'exec "$p" "$@" < "$f"')
# No deadline from the client (timeout=0): as long as Corral lets one command run.
UNLIMITED_S = 24 * 3600.0
OUTPUT_LIMIT = 64 * 1024 * 1024
KILLED = {"exitCode": -1, "exited": False, "status": "signal: killed", "error": "signal: killed"}

Event = dict[str, Any]


def end_event(exit_code: int | None, timed_out: bool) -> Event:
    if exit_code is None or timed_out:
        return {"end": dict(KILLED)}
    end: dict[str, Any] = {"exited": True, "status": f"exit status {exit_code}"}
    if exit_code:
        end["exitCode"] = exit_code  # proto-JSON omits the default 0
        end["error"] = f"exit status {exit_code}"
    return {"end": end}


@dataclass
class RunningProcess:
    sandbox_id: str
    config: dict[str, Any]
    tag: str | None
    pid: int = 0
    subscribers: set[asyncio.Queue] = field(default_factory=set)
    started: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    task: asyncio.Task | None = None
    killed: bool = False
    user: str = "user"
    # stdin: true: the FIFO on its stdin and the pid of the process holding it open.
    holder_pid: int = 0

    @property
    def stdin_fifo(self) -> str:
        return f"/tmp/.corral-stdin-{self.pid}"  # noqa: S108 - inside the sandbox, made by the prelude (0600)

    def info(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": self.config, "pid": self.pid}
        if self.tag is not None:
            out["tag"] = self.tag
        return out

    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        self.subscribers.add(queue)
        return queue

    def publish(self, event: Event) -> None:
        for queue in self.subscribers:
            queue.put_nowait(event)


class ProcessTable:
    def __init__(self, data: SandboxDataPath):
        self.data = data
        self._by_sandbox: dict[str, dict[int, RunningProcess]] = {}
        self._cleanups: set[asyncio.Future] = set()

    async def start(self, tenant: str, sandbox_id: str, config: dict[str, Any], *, tag: str | None, user: str,
                    cwd: str, timeout_s: float, stdin: bool = False) -> tuple[RunningProcess, asyncio.Queue]:
        """Start a process; returns it (pid known) and a queue of its events."""
        cmd, args = config.get("cmd") or "", [str(a) for a in config.get("args") or []]
        if not cmd:
            raise ConnectError("invalid_argument", "process.cmd must not be empty")
        envs = {str(k): str(v) for k, v in (config.get("envs") or {}).items()}
        request = ExecRequest(cmd=["/bin/sh", "-c", STDIN_PRELUDE if stdin else PRELUDE, cmd, *args], cwd=cwd, env=envs,
                              timeout_s=min(timeout_s, UNLIMITED_S), output_limit=OUTPUT_LIMIT, user=user,
                              output_encoding="base64")
        chunks = await self.data.exec_stream(tenant, sandbox_id, request)
        proc = RunningProcess(sandbox_id, {k: v for k, v in config.items() if k in ("cmd", "args", "envs", "cwd")},
                              tag, user=user)
        queue = proc.subscribe()
        proc.task = asyncio.create_task(self._pump(tenant, proc, chunks))
        pid = await asyncio.shield(proc.started)
        if pid is None:
            # The prelude never ran: the command could not be started (bad cwd, no shell...).
            proc.subscribers.discard(queue)
            errors = []
            while not queue.empty():
                event = queue.get_nowait()
                if "data" in event and "stderr" in event["data"]:
                    errors.append(base64.b64decode(event["data"]["stderr"]).decode(errors="replace"))
            raise ConnectError("invalid_argument", f"could not start {cmd}: {''.join(errors).strip() or 'failed'}")
        return proc, queue

    async def _pump(self, tenant: str, proc: RunningProcess, chunks: AsyncIterator[bytes]) -> None:
        """Relay the node's exec stream (JSON lines) as envd events, until its exit chunk."""
        buffer, head, end = b"", b"", None
        try:
            async for raw in chunks:
                buffer += raw
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    chunk = ExecChunk.model_validate(json.loads(line))
                    if chunk.type == "exit":
                        result = chunk.result
                        end = end_event(result.exit_code if result else None, bool(result and result.timed_out))
                        continue
                    data = base64.b64decode(chunk.data or "")
                    if chunk.type == "stdout" and not proc.started.done():
                        head += data
                        if b"\n" not in head:
                            continue
                        pid_line, data = head.split(b"\n", 1)
                        pids = [int(p) for p in pid_line.split()] or [0]
                        proc.holder_pid = pids[1] if len(pids) > 1 else 0
                        self._started(proc, pids[0])
                    if data:
                        proc.publish({"data": {chunk.type: base64.b64encode(data).decode()}})
        except asyncio.CancelledError:
            end = {"end": dict(KILLED)}
        except Exception:
            log.exception("e2b.process_stream_failed", sandbox_id=proc.sandbox_id, pid=proc.pid)
            end = {"end": {**KILLED, "error": "lost the process's output stream"}}
        finally:
            closing = getattr(chunks, "aclose", None)
            if closing is not None:
                try:
                    await closing()
                except BaseException:  # noqa: BLE001, S110 - the stream is being abandoned anyway
                    pass
            if not proc.started.done():
                proc.started.set_result(None)
            self._forget(proc)
            if proc.killed:
                end = {"end": dict(KILLED)}
            proc.publish(end or {"end": dict(KILLED)})
            if proc.holder_pid:
                cleanup = asyncio.ensure_future(self._drop_stdin(tenant, proc))
                self._cleanups.add(cleanup)
                cleanup.add_done_callback(self._cleanups.discard)

    async def _drop_stdin(self, tenant: str, proc: RunningProcess) -> None:
        """The process ended: its stdin holder and FIFO go too."""
        try:
            await self.data.exec(tenant, proc.sandbox_id, ExecRequest(
                cmd=["/bin/sh", "-c", 'kill "$0" 2>/dev/null; rm -f "$1"', str(proc.holder_pid), proc.stdin_fifo],
                user=proc.user, timeout_s=10))
        except Exception:  # noqa: BLE001 - the sandbox may be gone with it
            log.debug("e2b.stdin_cleanup_failed", sandbox_id=proc.sandbox_id, pid=proc.pid)

    async def send_input(self, tenant: str, proc: RunningProcess, data: bytes) -> None:
        if not proc.holder_pid:
            raise ConnectError("failed_precondition", f"process {proc.pid} was started without stdin")
        result = await self.data.exec(tenant, proc.sandbox_id, ExecRequest(
            cmd=["/bin/sh", "-c", '[ -p "$0" ] && exec cat >> "$0"', proc.stdin_fifo],
            stdin=data.decode(errors="replace"), user=proc.user, timeout_s=30))
        if result.exit_code != 0:
            raise ConnectError("failed_precondition", f"stdin of process {proc.pid} is closed")

    async def close_stdin(self, tenant: str, proc: RunningProcess) -> None:
        if proc.holder_pid:
            await self.data.exec(tenant, proc.sandbox_id, ExecRequest(
                cmd=["/bin/sh", "-c", 'kill "$0" 2>/dev/null; rm -f "$1"', str(proc.holder_pid), proc.stdin_fifo],
                user=proc.user, timeout_s=10))

    def _started(self, proc: RunningProcess, pid: int) -> None:
        proc.pid = pid
        self._by_sandbox.setdefault(proc.sandbox_id, {})[pid] = proc
        proc.started.set_result(pid)

    def _forget(self, proc: RunningProcess) -> None:
        table = self._by_sandbox.get(proc.sandbox_id, {})
        if table.get(proc.pid) is proc:
            del table[proc.pid]
        if not table:
            self._by_sandbox.pop(proc.sandbox_id, None)

    def find(self, sandbox_id: str, selector: dict[str, Any]) -> RunningProcess:
        table = self._by_sandbox.get(sandbox_id, {})
        if "pid" in selector:
            proc = table.get(int(selector["pid"]))
        elif "tag" in selector:
            proc = next((p for p in table.values() if p.tag == selector["tag"]), None)
        else:
            raise ConnectError("invalid_argument", "process selector needs pid or tag")
        if proc is None:
            raise ConnectError("not_found", f"process {selector} not found")
        return proc

    def list(self, sandbox_id: str) -> list[RunningProcess]:
        return list(self._by_sandbox.get(sandbox_id, {}).values())

    def kill(self, proc: RunningProcess) -> None:
        proc.killed = True
        if proc.task is not None:
            proc.task.cancel()

    async def close(self) -> None:
        tasks = [p.task for table in self._by_sandbox.values() for p in table.values() if p.task]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def events(proc: RunningProcess, queue: asyncio.Queue) -> AsyncIterator[Event]:
    """A subscriber's events up to and including the end; unsubscribes when the reader stops."""
    try:
        while True:
            event = await queue.get()
            yield event
            if "end" in event:
                return
    finally:
        proc.subscribers.discard(queue)
