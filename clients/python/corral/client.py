"""The synchronous SDK: ``Corral`` → ``corral.sandboxes`` → ``Sandbox``.

    with Corral(url, api_key) as corral:
        with corral.sandboxes.create("busybox") as sb:
            print(sb.exec("echo hi").stdout)
"""

from collections.abc import Iterator
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
from corral.jobs import Jobs
from corral.rollouts import Rollouts
from corral.snapshots import Snapshots
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


class Sandbox:
    def __init__(self, corral: "Corral", info: SandboxInfo):
        self._corral = corral
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return str(self.info.state)

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.state!r})"

    def refresh(self) -> "Sandbox":
        self.info = _parsed(get_sandbox.sync_detailed(self.id, client=self._corral.api))
        return self

    def wait(self, state: str = "running", timeout: float = 120.0) -> "Sandbox":
        self.info = _parsed(get_sandbox.sync_detailed(self.id, client=self._corral.api, wait_for=state, timeout=timeout))
        if state == "running" and self.state != "running":
            raise SandboxFailed(self.id, self.state, self.info.reason if isinstance(self.info.reason, str) else None)
        return self

    def exec(self, cmd: list[str] | str, **kwargs: Any) -> ExecResult:
        """Run a command; kwargs: cwd, env, stdin, timeout_s, output_limit, user."""
        return _parsed(exec_command.sync_detailed(self.id, client=self._corral.api, body=exec_body(cmd, **kwargs)))

    def exec_stream(self, cmd: list[str] | str, **kwargs: Any) -> Iterator[ExecChunk]:
        """Yield output chunks as they are produced; the last chunk has type ``exit`` and the result."""
        body = exec_body(cmd, **kwargs).to_dict()
        with self._corral.http.stream("POST", f"/v1/sandboxes/{self.id}/exec/stream", json=body) as response:
            if response.status_code >= 400:
                raise_for(response.status_code, response.read())
            for line in response.iter_lines():
                if line:
                    yield ExecChunk.from_line(line)

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        content = data.encode() if isinstance(data, str) else data
        response = self._corral.http.put(f"/v1/sandboxes/{self.id}/files", params={"path": path, "mode": mode},
                                         content=content, headers={"content-type": "application/octet-stream"})
        raise_for(response.status_code, response.content)

    def read_file(self, path: str) -> bytes:
        response = self._corral.http.get(f"/v1/sandboxes/{self.id}/files", params={"path": path})
        raise_for(response.status_code, response.content)
        return response.content

    def list_files(self, path: str = ".") -> list[FileInfo]:
        return _parsed(list_files.sync_detailed(self.id, client=self._corral.api, path=path))

    def pause(self) -> "Sandbox":
        """Freeze every process (cgroup freezer); exec/files answer 409 until ``resume``."""
        self.info = _parsed(pause_sandbox.sync_detailed(self.id, client=self._corral.api))
        return self

    def resume(self) -> "Sandbox":
        self.info = _parsed(resume_sandbox.sync_detailed(self.id, client=self._corral.api))
        return self

    # ---- screen, input and snapshots (`vm` sandboxes; `microvm` snapshots too) --------------

    def screenshot(self) -> bytes:
        """The screen as PNG bytes. Containers and microVMs have none (409 unsupported_by_backend)."""
        response = self._corral.http.get(f"/v1/sandboxes/{self.id}/screen")
        raise_for(response.status_code, response.content)
        return response.content

    def send_input(self, events: Any) -> int:
        """Send input events in order (dicts as made by corral._common.key_event/text_event/
        move_event/click_event, or corral_client models); returns how many were sent."""
        response = self._corral.http.post(f"/v1/sandboxes/{self.id}/input", json=input_body(events))
        raise_for(response.status_code, response.content)
        return int(response.json()["sent"])

    def type_text(self, text: str) -> int:
        """Type text as a US keyboard would."""
        return self.send_input([text_event(text)])

    def press(self, *keys: str) -> int:
        """Press keys together (a chord), e.g. press("ctrl", "c"); QEMU key names."""
        return self.send_input([key_event(*keys)])

    def move_mouse(self, x: int, y: int) -> int:
        return self.send_input([move_event(x, y)])

    def click(self, x: int | None = None, y: int | None = None, button: str = "left") -> int:
        """Click ``button``, at (x, y) when given, else where the pointer is."""
        return self.send_input([click_event(x, y, button)])

    def snapshot(self) -> Snapshot:
        """Save the VM's state on its node (it keeps running); restore it with
        ``corral.sandboxes.create(from_snapshot=snapshot.id)``."""
        return _parsed(snapshot_sandbox.sync_detailed(self.id, client=self._corral.api))

    def delete(self, wait: bool = True, timeout: float = 60.0) -> "Sandbox":
        self.info = _parsed(delete_sandbox.sync_detailed(self.id, client=self._corral.api, wait=wait, timeout=timeout))
        return self

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete(wait=False)


class Sandboxes:
    def __init__(self, corral: "Corral"):
        self._corral = corral

    def create(self, environment: str | None = None, *, wait: bool = True, wait_timeout: float = 120.0,
               **spec: Any) -> Sandbox:
        """Create a sandbox; with ``wait`` (default) return once it runs, raising SandboxFailed if it cannot.

        spec: backend ("auto" | "container" | "microvm" | "vm"), isolation ("container" | "vm"),
        display (a screen: picks vm), disk_image (boot a disk image instead of an environment),
        from_snapshot (restore a snapshot id; kind, image, cpu and memory come from it), cpu,
        memory_mb, disk_mb, timeout_s, pids_limit, env, labels.
        """
        kwargs: dict[str, Any] = {"wait_for": "running", "timeout": wait_timeout} if wait else {}
        info = _parsed(create_sandbox.sync_detailed(client=self._corral.api, body=create_body(environment, **spec), **kwargs))
        sandbox = Sandbox(self._corral, info)
        if wait and sandbox.state != "running":
            if sandbox.state in ("failed", "terminated"):
                raise SandboxFailed(sandbox.id, sandbox.state, info.reason if isinstance(info.reason, str) else None)
            sandbox.wait("running", wait_timeout)
        return sandbox

    def get(self, sandbox_id: str) -> Sandbox:
        return Sandbox(self._corral, _parsed(get_sandbox.sync_detailed(sandbox_id, client=self._corral.api)))

    def list(self, labels: dict[str, str] | None = None, state: str | None = None) -> list[Sandbox]:
        kwargs: dict[str, Any] = {"state": state} if state else {}
        page = _parsed(list_sandboxes.sync_detailed(client=self._corral.api, label=label_selectors(labels), **kwargs))
        return [Sandbox(self._corral, info) for info in page.items]


    def delete(self, labels: dict[str, str]) -> "list[Sandbox]":
        """Delete every live sandbox matching all ``labels`` (at least one); returns them."""
        response = self._corral.http.delete("/v1/sandboxes", params=[("label", s) for s in label_selectors(labels)])
        raise_for(response.status_code, response.content)
        return [Sandbox(self._corral, SandboxInfo.from_dict(item)) for item in response.json()["items"]]


class Corral:
    def __init__(self, url: str | None = None, api_key: str | None = None, timeout: float = 300.0):
        url, api_key = resolve(url, api_key)
        self.api = AuthenticatedClient(base_url=url, token=api_key, timeout=httpx.Timeout(timeout, connect=10.0))
        self.sandboxes = Sandboxes(self)
        self.rollouts = Rollouts(self)
        self.jobs = Jobs(self)
        self.snapshots = Snapshots(self)

    @property
    def http(self) -> httpx.Client:
        """The underlying httpx client (auth set), for raw and streaming calls."""
        return self.api.get_httpx_client()

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Corral":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
