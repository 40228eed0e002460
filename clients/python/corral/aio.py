"""The asyncio SDK: ``AsyncCorral`` → ``corral.sandboxes`` → ``AsyncSandbox``, same shape as the sync one.

    async with AsyncCorral(url, api_key) as corral:
        async with await corral.sandboxes.create("busybox") as sb:
            print((await sb.exec("echo hi")).stdout)
"""

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx

from corral._common import (
    ExecChunk,
    click_event,
    create_body,
    exec_body,
    input_body,
    key_event,
    label_selectors,
    move_event,
    resolve,
    text_event,
)
from corral.errors import SandboxFailed, raise_for
from corral.rollouts import AsyncRollouts
from corral.snapshots import AsyncSnapshots
from corral_client import AuthenticatedClient
from corral_client.api.sandboxes import (
    create_sandbox,
    delete_sandbox,
    exec_command,
    get_sandbox,
    list_files,
    list_sandboxes,
    pause_sandbox,
    resume_sandbox,
    snapshot_sandbox,
)
from corral_client.models import ExecResult, FileInfo, Snapshot
from corral_client.models import Sandbox as SandboxInfo


def _parsed(response: Any) -> Any:
    raise_for(response.status_code, response.content)
    return response.parsed


class AsyncSandbox:
    def __init__(self, corral: "AsyncCorral", info: SandboxInfo):
        self._corral = corral
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return str(self.info.state)

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.id!r}, state={self.state!r})"

    async def refresh(self) -> "AsyncSandbox":
        self.info = _parsed(await get_sandbox.asyncio_detailed(self.id, client=self._corral.api))
        return self

    async def wait(self, state: str = "running", timeout: float = 120.0) -> "AsyncSandbox":
        self.info = _parsed(await get_sandbox.asyncio_detailed(self.id, client=self._corral.api, wait_for=state,
                                                               timeout=timeout))
        if state == "running" and self.state != "running":
            raise SandboxFailed(self.id, self.state, self.info.reason if isinstance(self.info.reason, str) else None)
        return self

    async def exec(self, cmd: list[str] | str, **kwargs: Any) -> ExecResult:
        return _parsed(await exec_command.asyncio_detailed(self.id, client=self._corral.api,
                                                           body=exec_body(cmd, **kwargs)))

    async def exec_stream(self, cmd: list[str] | str, **kwargs: Any) -> AsyncIterator[ExecChunk]:
        body = exec_body(cmd, **kwargs).to_dict()
        async with self._corral.http.stream("POST", f"/v1/sandboxes/{self.id}/exec/stream", json=body) as response:
            if response.status_code >= 400:
                raise_for(response.status_code, await response.aread())
            async for line in response.aiter_lines():
                if line:
                    yield ExecChunk.from_line(line)

    async def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        content = data.encode() if isinstance(data, str) else data
        response = await self._corral.http.put(f"/v1/sandboxes/{self.id}/files", params={"path": path, "mode": mode},
                                               content=content, headers={"content-type": "application/octet-stream"})
        raise_for(response.status_code, response.content)

    async def read_file(self, path: str) -> bytes:
        response = await self._corral.http.get(f"/v1/sandboxes/{self.id}/files", params={"path": path})
        raise_for(response.status_code, response.content)
        return response.content

    async def list_files(self, path: str = ".") -> list[FileInfo]:
        return _parsed(await list_files.asyncio_detailed(self.id, client=self._corral.api, path=path))

    async def pause(self) -> "AsyncSandbox":
        self.info = _parsed(await pause_sandbox.asyncio_detailed(self.id, client=self._corral.api))
        return self

    async def resume(self) -> "AsyncSandbox":
        self.info = _parsed(await resume_sandbox.asyncio_detailed(self.id, client=self._corral.api))
        return self

    # ---- screen, input and snapshots (`vm` sandboxes; `microvm` snapshots too) --------------

    async def screenshot(self) -> bytes:
        """The screen as PNG bytes. Containers and microVMs have none (409 unsupported_by_backend)."""
        response = await self._corral.http.get(f"/v1/sandboxes/{self.id}/screen")
        raise_for(response.status_code, response.content)
        return response.content

    async def send_input(self, events: Any) -> int:
        """Send input events in order (dicts as made by corral._common.key_event/text_event/
        move_event/click_event, or corral_client models); returns how many were sent."""
        response = await self._corral.http.post(f"/v1/sandboxes/{self.id}/input", json=input_body(events))
        raise_for(response.status_code, response.content)
        return int(response.json()["sent"])

    async def type_text(self, text: str) -> int:
        """Type text as a US keyboard would."""
        return await self.send_input([text_event(text)])

    async def press(self, *keys: str) -> int:
        """Press keys together (a chord), e.g. press("ctrl", "c"); QEMU key names."""
        return await self.send_input([key_event(*keys)])

    async def move_mouse(self, x: int, y: int) -> int:
        return await self.send_input([move_event(x, y)])

    async def click(self, x: int | None = None, y: int | None = None, button: str = "left") -> int:
        """Click ``button``, at (x, y) when given, else where the pointer is."""
        return await self.send_input([click_event(x, y, button)])

    async def snapshot(self) -> Snapshot:
        """Save the VM's state on its node (it keeps running); restore it with
        ``corral.sandboxes.create(from_snapshot=snapshot.id)``."""
        return _parsed(await snapshot_sandbox.asyncio_detailed(self.id, client=self._corral.api))

    async def delete(self, wait: bool = True, timeout: float = 60.0) -> "AsyncSandbox":
        self.info = _parsed(await delete_sandbox.asyncio_detailed(self.id, client=self._corral.api, wait=wait,
                                                                  timeout=timeout))
        return self

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete(wait=False)


class AsyncSandboxes:
    def __init__(self, corral: "AsyncCorral"):
        self._corral = corral

    async def create(self, environment: str | None = None, *, wait: bool = True, wait_timeout: float = 120.0,
                     **spec: Any) -> AsyncSandbox:
        """Like Corral.sandboxes.create: spec is backend, isolation, display, disk_image,
        from_snapshot, cpu, memory_mb, disk_mb, timeout_s, pids_limit, env, labels."""
        kwargs: dict[str, Any] = {"wait_for": "running", "timeout": wait_timeout} if wait else {}
        info = _parsed(await create_sandbox.asyncio_detailed(client=self._corral.api,
                                                             body=create_body(environment, **spec), **kwargs))
        sandbox = AsyncSandbox(self._corral, info)
        if wait and sandbox.state != "running":
            if sandbox.state in ("failed", "terminated"):
                raise SandboxFailed(sandbox.id, sandbox.state, info.reason if isinstance(info.reason, str) else None)
            await sandbox.wait("running", wait_timeout)
        return sandbox

    async def create_many(self, environment: str, count: int, *, concurrency: int = 32,
                          **kwargs: Any) -> list[AsyncSandbox]:
        """Create ``count`` sandboxes with at most ``concurrency`` requests in flight."""
        gate = asyncio.Semaphore(concurrency)

        async def one() -> AsyncSandbox:
            async with gate:
                return await self.create(environment, **kwargs)

        return list(await asyncio.gather(*(one() for _ in range(count))))

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        return AsyncSandbox(self._corral, _parsed(await get_sandbox.asyncio_detailed(sandbox_id, client=self._corral.api)))

    async def list(self, labels: dict[str, str] | None = None, state: str | None = None) -> list[AsyncSandbox]:
        kwargs: dict[str, Any] = {"state": state} if state else {}
        page = _parsed(await list_sandboxes.asyncio_detailed(client=self._corral.api, label=label_selectors(labels),
                                                             **kwargs))
        return [AsyncSandbox(self._corral, info) for info in page.items]

    async def delete_many(self, sandboxes: Iterable[AsyncSandbox], *, concurrency: int = 32) -> None:
        gate = asyncio.Semaphore(concurrency)

        async def one(sb: AsyncSandbox) -> None:
            async with gate:
                await sb.delete(wait=False)

        await asyncio.gather(*(one(sb) for sb in sandboxes))


class AsyncCorral:
    def __init__(self, url: str | None = None, api_key: str | None = None, timeout: float = 300.0):
        url, api_key = resolve(url, api_key)
        self.api = AuthenticatedClient(base_url=url, token=api_key, timeout=httpx.Timeout(timeout, connect=10.0))
        self.sandboxes = AsyncSandboxes(self)
        self.rollouts = AsyncRollouts(self)
        self.snapshots = AsyncSnapshots(self)

    @property
    def http(self) -> httpx.AsyncClient:
        return self.api.get_async_httpx_client()

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> "AsyncCorral":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
