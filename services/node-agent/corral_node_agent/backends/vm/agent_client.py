"""Host side of the guest agent protocol (docs/vm-guest-protocol.md), for the node-agent's
event loop: one client per VM, over the unix socket QEMU serves for the agent's
virtio-serial port. Requests are multiplexed by id, so any number of execs and file
transfers run at once.

Errors mirror the container backend's for the same situation (paths go through the same
paths.split_path checks; errno answers map through the same paths.os_error), so a caller
cannot tell a VM sandbox from a container by its errors.
"""

import asyncio
import errno as errno_mod
import itertools
import os
import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

from corral_common.contracts.exec import ExecChunk, ExecRequest, ExecResult, FileInfo
from corral_common.logging import get_logger
from corral_node_agent.backends import paths
from corral_node_agent.backends.commands import checked_argv
from corral_node_agent.backends.vm.protocol import (
    MARKER,
    MAX_FRAME,
    PROTOCOL_VERSION,
    WRITE_CHUNK,
    FrameDecoder,
    ProtocolError,
    b64,
    encode_frame,
    unb64,
)
from corral_node_agent.errors import (
    BadInput,
    DiskFull,
    GuestAgentError,
    GuestLost,
    GuestTimeout,
    NodeAgentError,
    TooLarge,
)
from corral_node_agent.output import OutputEncoder, encode_output

log = get_logger(__name__)

_FINAL = frozenset({"ok", "error", "exit"})
# How long past a command's own timeout the host waits for its exit before giving up on the
# guest (TCG guests are slow; the guest kills the command at timeout_s itself).
_EXEC_GRACE_S = 30.0
# File and metadata requests: a guest that answers none within this is wedged.
_REQUEST_TIMEOUT_S = 60.0
_HELLO_RETRY_S = 1.0
_READ_SIZE = 256 << 10
# Bytes of one file download the guest may send ahead of the reader: a slow consumer (an
# HTTP client) holds the guest back instead of filling the node-agent's memory.
READ_WINDOW = 2 << 20


class _Lost:
    def __init__(self, reason: str):
        self.reason = reason


class GuestAgentClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 env: dict[str, str] | None = None, output_limit_bytes: int | None = None,
                 max_upload_bytes: int | None = None):
        self._reader = reader
        self._writer = writer
        # Sandbox-wide environment (the spec's env), under each request's own env.
        self.default_env = dict(env or {})
        self.output_limit_bytes = output_limit_bytes
        self.max_upload_bytes = max_upload_bytes
        # Random start: an answer to an earlier session's request can never match an id of ours.
        self._ids = itertools.count(secrets.randbelow(1 << 40) + 1)
        self._pending: dict[int, asyncio.Queue] = {}
        self._decoder = FrameDecoder(wait_for_marker=True)
        self._ready = asyncio.Event()
        self._drain_lock = asyncio.Lock()
        self._lost: str | None = None
        self._reader_task: asyncio.Task | None = None
        self.info: dict[str, Any] = {}

    # ---- connection -------------------------------------------------------------------

    @classmethod
    async def connect(cls, socket_path: str, *, timeout_s: float, env: dict[str, str] | None = None,
                      output_limit_bytes: int | None = None,
                      max_upload_bytes: int | None = None) -> "GuestAgentClient":
        """Connect to QEMU's chardev socket (retrying until QEMU listens) and handshake;
        GuestTimeout if the guest does not answer within timeout_s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(socket_path, limit=4 << 20)
                break
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if loop.time() >= deadline:
                    raise GuestTimeout(f"guest agent socket {socket_path} not available within "
                                            f"{timeout_s:g} s ({exc.strerror})") from None
                await asyncio.sleep(0.02)
        client = cls(reader, writer, env=env, output_limit_bytes=output_limit_bytes,
                     max_upload_bytes=max_upload_bytes)
        client._reader_task = asyncio.ensure_future(client._read_loop())
        try:
            await client._handshake(deadline)
        except BaseException:
            await client.close()
            raise
        return client

    async def _handshake(self, deadline: float) -> None:
        """MARKER + hello until the guest answers this session's hello. The marker makes the
        guest drop whatever the previous host left half-sent (and the commands it ran); the
        session nonce keeps a stale answer from an earlier connection from passing as ours."""
        loop = asyncio.get_running_loop()
        session = uuid.uuid4().hex
        hello_ids: list[int] = []
        while True:
            rid = next(self._ids)
            queue: asyncio.Queue = asyncio.Queue()
            self._pending[rid] = queue
            hello_ids.append(rid)
            self._ready.clear()
            await self._send(MARKER + encode_frame({"id": rid, "op": "hello", "version": PROTOCOL_VERSION,
                                                    "session": session}))
            wait_until = min(deadline, loop.time() + _HELLO_RETRY_S)
            while True:
                remaining = wait_until - loop.time()
                if remaining <= 0:
                    break
                getter = asyncio.ensure_future(queue.get())
                readied = asyncio.ensure_future(self._ready.wait())
                done, _ = await asyncio.wait({getter, readied}, timeout=remaining,
                                             return_when=asyncio.FIRST_COMPLETED)
                getter.cancel()
                readied.cancel()
                if getter in done:
                    msg = getter.result()
                    if isinstance(msg, _Lost):
                        raise GuestLost(f"guest agent connection closed during the handshake: {msg.reason}")
                    if msg.get("type") == "ok" and msg.get("session") == session:
                        for old in hello_ids:
                            self._pending.pop(old, None)
                        if msg.get("version") != PROTOCOL_VERSION:
                            raise GuestAgentError(f"guest agent speaks protocol {msg.get('version')}, "
                                                  f"the host {PROTOCOL_VERSION}: rebuild the guest kit")
                        self.info = msg
                        return
                    continue
                if readied in done:
                    break  # the agent (re)started: say hello again right away
            if loop.time() >= deadline:
                raise GuestTimeout("guest agent did not answer the handshake in time (guest still booting, "
                                        "or its init failed: see the VM console)")

    async def _read_loop(self) -> None:
        reason = "connection closed by QEMU"
        try:
            while True:
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    break
                for msg in self._decoder.feed(data):
                    self._dispatch(msg)
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
            log.warning("guest_agent.stream_broken", error=str(exc))
        except (ConnectionError, OSError) as exc:
            reason = f"connection error: {exc}"
        except asyncio.CancelledError:
            reason = "client closed"
            raise
        finally:
            self._fail_all(reason)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        rid = msg.get("id")
        if rid == 0:
            if msg.get("type") == "ready":
                self._ready.set()
            return
        queue = self._pending.get(rid)
        if queue is not None:  # else: an answer to a request we stopped waiting for
            queue.put_nowait(msg)

    def _fail_all(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
        for queue in self._pending.values():
            queue.put_nowait(_Lost(reason))

    async def _send(self, data: bytes) -> None:
        if self._lost is not None:
            raise GuestLost(f"guest agent connection lost: {self._lost}")
        self._writer.write(data)
        async with self._drain_lock:
            try:
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                self._fail_all(f"connection error: {exc}")
                raise GuestLost(f"guest agent connection lost: {exc}") from None

    def _send_nowait(self, message: dict[str, Any]) -> None:
        if self._lost is None and not self._writer.is_closing():
            self._writer.write(encode_frame(message))

    async def _request(self, message: dict[str, Any]) -> tuple[int, asyncio.Queue]:
        rid = next(self._ids)
        try:
            frame = encode_frame({"id": rid, **message})
        except ProtocolError:
            # Only a command's stdin (or env) can get this big: one frame carries it whole.
            raise TooLarge(f"request too large for a VM sandbox's agent (max {MAX_FRAME * 3 // 4} bytes "
                                  "of stdin): upload a file and redirect from it", loc=["body"]) from None
        queue: asyncio.Queue = asyncio.Queue()
        self._pending[rid] = queue
        try:
            await self._send(frame)
        except BaseException:
            self._pending.pop(rid, None)
            raise
        return rid, queue

    async def _next(self, queue: asyncio.Queue, timeout_s: float) -> dict[str, Any]:
        try:
            msg = await asyncio.wait_for(queue.get(), timeout_s)
        except TimeoutError:
            raise GuestTimeout(f"guest agent did not answer within {timeout_s:g} s") from None
        if isinstance(msg, _Lost):
            raise GuestLost(f"guest agent connection lost: {msg.reason}")
        return msg

    async def _call(self, message: dict[str, Any], parts: list[str] | None = None) -> dict[str, Any]:
        """One request, one final answer."""
        rid, queue = await self._request(message)
        try:
            msg = await self._next(queue, _REQUEST_TIMEOUT_S)
        finally:
            self._pending.pop(rid, None)
        if msg["type"] == "error":
            raise _error(msg, parts)
        return msg

    async def close(self) -> None:
        """Drop the connection; pending calls fail at once with GuestLost. The guest
        keeps running and accepts the next connection."""
        self._fail_all("client closed")
        if self._reader_task is not None and not self._reader_task.done():
            self._reader_task.cancel()
            try:
                await self._reader_task
            except BaseException:  # noqa: BLE001, S110 - it only reports what we already know
                pass
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass

    @property
    def connected(self) -> bool:
        return self._lost is None

    async def ping(self) -> None:
        await self._call({"op": "ping"})

    async def shutdown(self) -> None:
        """Sync the guest's disks and power it off (QEMU then exits)."""
        try:
            await self._call({"op": "shutdown"})
        except GuestLost:
            pass  # powered off before the answer got out: the outcome we asked for
        await self.close()

    # ---- exec -----------------------------------------------------------------------------

    def _exec_message(self, req: ExecRequest) -> dict[str, Any]:
        # As in a container (container/oci.py build_env): root's commands get root's home
        # unless the request names one (the guest agent's own default is /home/user).
        env = {**self.default_env, **({"HOME": paths.ROOT_HOME} if req.user == "root" else {}), **req.env}
        argv = checked_argv(req, env)
        limit = req.output_limit if self.output_limit_bytes is None else min(req.output_limit,
                                                                             self.output_limit_bytes)
        message: dict[str, Any] = {"op": "exec", "argv": argv, "cwd": req.cwd, "env": env,
                                   "timeout_s": req.timeout_s, "output_limit": limit, "user": req.user}
        if req.stdin is not None:
            message["stdin"] = b64(req.stdin.encode())
        return message

    async def exec(self, req: ExecRequest) -> ExecResult:
        result = None
        async for chunk in self.exec_stream(req):
            if chunk.type == "exit":
                result = chunk.result
        assert result is not None
        return result

    async def exec_stream(self, req: ExecRequest) -> AsyncIterator[ExecChunk]:
        """Output chunks as the command produces them, then one `exit` chunk with the result.
        Closing the iterator early kills the command (like the container backend)."""
        message = self._exec_message(req)
        rid, queue = await self._request(message)
        # The guest sends the raw bytes (base64 on the wire); they are encoded for the caller here.
        encoding = req.output_encoding
        raw = {"stdout": bytearray(), "stderr": bytearray()}
        encoders = {name: OutputEncoder(encoding) for name in raw}
        finished = False
        try:
            while True:
                msg = await self._next(queue, req.timeout_s + _EXEC_GRACE_S)
                kind = msg["type"]
                if kind in raw:
                    data = unb64(msg["data"])
                    raw[kind] += data
                    piece = encoders[kind].feed(data)
                    if piece:
                        yield ExecChunk(type=kind, data=piece, encoding=encoding)
                elif kind == "exit":
                    finished = True
                    for name, encoder in encoders.items():
                        tail = encoder.flush()
                        if tail:
                            yield ExecChunk(type=name, data=tail, encoding=encoding)
                    yield ExecChunk(type="exit", result=ExecResult(
                        exit_code=msg["exit_code"], stdout=encode_output(raw["stdout"], encoding),
                        stderr=encode_output(raw["stderr"], encoding), duration_ms=round(msg["duration_ms"], 2),
                        timed_out=msg["timed_out"], truncated=msg["truncated"], oom_killed=msg["oom_killed"],
                        encoding=encoding))
                    return
                elif kind == "error":
                    finished = True
                    raise _error(msg, None)
        finally:
            self._pending.pop(rid, None)
            if not finished:
                # The reader went away (or the guest timed out): the command must not outlive it.
                self._send_nowait({"id": next(self._ids), "op": "cancel", "target": rid})

    # ---- files ----------------------------------------------------------------------------

    async def stat(self, path: str) -> FileInfo:
        parts = paths.split_path(path)
        msg = await self._call({"op": "stat", "parts": parts}, parts)
        name = parts[-1] if parts else "/"
        return FileInfo(name=name, path=paths.sandbox_path(parts), **msg["info"])

    async def list_dir(self, path: str) -> list[FileInfo]:
        parts = paths.split_path(path)
        msg = await self._call({"op": "list", "parts": parts}, parts)
        base = paths.sandbox_path(parts).rstrip("/")
        entries = sorted(msg["entries"], key=lambda e: e["name"])
        return [FileInfo(path=f"{base}/{e['name']}", **e) for e in entries]

    async def open_file(self, path: str) -> tuple[int, AsyncIterator[bytes]]:
        """(size, chunks); errors (missing file, a directory...) are raised here, before any byte."""
        parts = paths.split_path(path)
        if not parts:
            raise BadInput("/: is a directory", loc=paths.LOC)
        rid, queue = await self._request({"op": "read", "parts": parts, "window": READ_WINDOW})
        try:
            first = await self._next(queue, _REQUEST_TIMEOUT_S)
        except BaseException:
            self._pending.pop(rid, None)
            self._send_nowait({"id": next(self._ids), "op": "cancel", "target": rid})
            raise
        if first["type"] == "error":
            self._pending.pop(rid, None)
            raise _error(first, parts)

        async def chunks() -> AsyncIterator[bytes]:
            finished = False
            unacked = 0
            try:
                while True:
                    msg = await self._next(queue, _REQUEST_TIMEOUT_S)
                    if msg["type"] == "data":
                        data = unb64(msg["data"])
                        yield data
                        # Credit back what the reader took, in batches of half the window.
                        unacked += len(data)
                        if unacked >= READ_WINDOW // 2:
                            self._send_nowait({"id": next(self._ids), "op": "read_ack", "target": rid,
                                               "bytes": unacked})
                            unacked = 0
                    elif msg["type"] == "ok":
                        finished = True
                        return
                    else:
                        finished = True
                        raise _error(msg, parts)
            finally:
                self._pending.pop(rid, None)
                if not finished:
                    self._send_nowait({"id": next(self._ids), "op": "cancel", "target": rid})

        return int(first["size"]), chunks()

    async def read_file(self, path: str) -> bytes:
        _size, chunks = await self.open_file(path)
        return b"".join([c async for c in chunks])

    async def write_file(self, path: str, data: bytes | AsyncIterator[bytes], mode: int = 0o644) -> int:
        """Create or replace a file (parent dirs are created, owned by the sandbox user);
        returns the bytes written. A failed upload leaves no file behind."""
        parts = paths.split_path(path)
        if not parts:
            raise BadInput("/: is a directory", loc=paths.LOC)
        rid, queue = await self._request({"op": "write_open", "parts": parts, "mode": mode & 0o777})
        written = 0
        finished = False

        def early_error() -> None:
            # The guest answers write_open/write_data only when they fail.
            if not queue.empty():
                msg = queue.get_nowait()
                if isinstance(msg, _Lost):
                    raise GuestLost(f"guest agent connection lost: {msg.reason}")
                nonlocal finished
                finished = True
                raise _error(msg, parts)

        async def send(chunk: bytes) -> None:
            nonlocal written
            cap = self.max_upload_bytes
            if cap is not None and written + len(chunk) > cap:
                raise TooLarge(f"upload exceeds {cap} bytes", loc=["body"])
            view = memoryview(chunk)
            for off in range(0, len(view), WRITE_CHUNK):
                early_error()
                await self._send(encode_frame({"id": rid, "op": "write_data",
                                               "data": b64(view[off:off + WRITE_CHUNK])}))
            written += len(chunk)

        try:
            if isinstance(data, (bytes, bytearray, memoryview)):
                await send(bytes(data))
            else:
                async for chunk in data:
                    await send(chunk)
            early_error()
            await self._send(encode_frame({"id": rid, "op": "write_close"}))
            msg = await self._next(queue, _REQUEST_TIMEOUT_S)
            finished = True
            if msg["type"] == "error":
                raise _error(msg, parts)
            return int(msg["size"])
        finally:
            self._pending.pop(rid, None)
            if not finished:
                self._send_nowait({"id": rid, "op": "write_abort"})


def _error(msg: dict[str, Any], parts: list[str] | None) -> Exception:
    """An `error` answer as the exception the container backend raises in the same case."""
    err = int(msg.get("errno") or 0)
    text = str(msg.get("message") or os.strerror(err))
    if err in (errno_mod.ENOSPC, errno_mod.EDQUOT):
        return DiskFull(paths.DISK_FULL, loc=["body"])
    at = msg.get("at")
    if parts is not None and at is not None:
        mapped = paths.os_error(OSError(err, text), parts[:int(at)])
        if isinstance(mapped, NodeAgentError):
            return mapped
        where = paths.sandbox_path(parts[:int(at)])
        if err in (errno_mod.EACCES, errno_mod.EPERM, errno_mod.EROFS):
            return BadInput(f"{where}: {text}", loc=paths.LOC)
        return GuestAgentError(f"{where}: {text}")
    if err == errno_mod.EINVAL:
        return BadInput(text)
    return GuestAgentError(f"guest agent: {text}")
