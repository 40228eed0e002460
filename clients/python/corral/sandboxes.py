"""``corral.sandboxes`` and the ``Sandbox`` it returns, written once for both flavours.

``Sandbox`` / ``Sandboxes`` (sync, ``Corral``) and ``AsyncSandbox`` / ``AsyncSandboxes``
(``AsyncCorral``, every method awaited) are the operations of ``_SandboxOps`` /
``_SandboxesOps`` run by the two transports (see ``corral._transport``); only the context
manager protocol is written per flavour.
"""

import builtins
from collections.abc import Iterable
from typing import Any, Self

from corral import _calls as calls
from corral._common import ExecChunk, ExecResult, click_event, create_body, exec_body, key_event, move_event, text_event
from corral._transport import Concurrently, Flavored, Op, operation, streaming
from corral.errors import SandboxFailed
from corral_client.models import CommitResult, FileInfo, Snapshot
from corral_client.models import Sandbox as SandboxInfo


def _reason(info: SandboxInfo) -> str | None:
    return info.reason if isinstance(info.reason, str) else None


def _error(info: SandboxInfo) -> str | None:
    return info.error if isinstance(info.error, str) else None


class _SandboxOps(Flavored):
    def __init__(self, corral: Any, info: SandboxInfo):
        super().__init__(corral)
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return str(self.info.state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, state={self.state!r})"

    @operation
    def refresh(self) -> Op[Self]:
        self.info = yield calls.get_sandbox(self.id)
        return self

    def _wait(self, state: str = "running", timeout: float = 120.0) -> Op[Self]:
        self.info = yield calls.get_sandbox(self.id, wait_for=state, timeout=timeout)
        if state == "running" and self.state != "running":
            raise SandboxFailed(self.id, self.state, _reason(self.info), _error(self.info))
        return self

    wait = operation(_wait)

    @operation
    def exec(self, cmd: list[str] | str, **kwargs: Any) -> calls.Call[ExecResult]:
        """Run a command; kwargs: cwd, env, stdin, timeout_s, output_limit, user, output_encoding
        ("base64" keeps output that is not UTF-8 intact: read ``result.stdout_bytes``)."""
        return calls.exec_command(self.id, exec_body(cmd, **kwargs))

    @streaming
    def exec_stream(self, cmd: list[str] | str, **kwargs: Any) -> calls.Call[ExecChunk]:
        """Yield output chunks as they are produced; the last chunk has type ``exit`` and the result,
        as ``exec`` returns it (a command that ran out of ``timeout_s``: ``timed_out`` True,
        ``exit_code`` None). kwargs as ``exec``; ``chunk.data_bytes`` is a chunk's output as bytes."""
        return calls.exec_command_stream(self.id, exec_body(cmd, **kwargs))

    @operation
    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> calls.Call[None]:
        return calls.write_file(self.id, path, data, mode)

    @operation
    def read_file(self, path: str) -> calls.Call[bytes]:
        return calls.read_file(self.id, path)

    @operation
    def read_text(self, path: str, encoding: str = "utf-8") -> Op[str]:
        """The file as text (``read_file`` gives its bytes)."""
        return (yield calls.read_file(self.id, path)).decode(encoding)

    @operation
    def list_files(self, path: str = ".") -> calls.Call[list[FileInfo]]:
        return calls.list_files(self.id, path)

    @operation
    def pause(self) -> Op[Self]:
        """Freeze every process (cgroup freezer); exec/files answer 409 until ``resume``."""
        self.info = yield calls.pause_sandbox(self.id)
        return self

    @operation
    def resume(self) -> Op[Self]:
        self.info = yield calls.resume_sandbox(self.id)
        return self

    # ---- screen, input and snapshots (`vm` sandboxes; `microvm` snapshots too) --------------

    @operation
    def screenshot(self) -> calls.Call[bytes]:
        """The screen as PNG bytes. Containers and microVMs have none (409 unsupported_by_backend)."""
        return calls.get_screen(self.id)

    @operation
    def send_input(self, events: Any) -> calls.Call[int]:
        """Send input events in order (dicts as made by corral._common.key_event/text_event/
        move_event/click_event, or corral_client models); returns how many were sent."""
        return calls.send_input(self.id, events)

    @operation
    def type_text(self, text: str) -> calls.Call[int]:
        """Type text as a US keyboard would."""
        return calls.send_input(self.id, [text_event(text)])

    @operation
    def press(self, *keys: str) -> calls.Call[int]:
        """Press keys together (a chord), e.g. press("ctrl", "c"); QEMU key names."""
        return calls.send_input(self.id, [key_event(*keys)])

    @operation
    def move_mouse(self, x: int, y: int) -> calls.Call[int]:
        return calls.send_input(self.id, [move_event(x, y)])

    @operation
    def click(self, x: int | None = None, y: int | None = None, button: str = "left") -> calls.Call[int]:
        """Click ``button``, at (x, y) when given, else where the pointer is."""
        return calls.send_input(self.id, [click_event(x, y, button)])

    @operation
    def set_network(self, network: dict[str, Any]) -> Op[Self]:
        """Replace the egress allowlist (``{"allow": [...], "presets": [...], "bandwidth_mbit": N}``);
        in force when this returns. Only for sandboxes created with an allowlist."""
        self.info = yield calls.set_sandbox_network(self.id, network)
        return self

    @operation
    def network(self) -> calls.Call[dict[str, Any]]:
        """Its egress policy, byte and refusal counters, and its latest refusals."""
        return calls.get_sandbox_network(self.id)

    @operation
    def usage(self) -> calls.Call[Any]:
        """What it has used so far, read on its node now: cpu_seconds, peak_memory_bytes,
        working_set_bytes, memory_mib_seconds, disk_used_bytes, network bytes (an ended
        sandbox's totals are in ``info.usage``)."""
        return calls.get_sandbox_usage(self.id)

    @operation
    def snapshot(self) -> calls.Call[Snapshot]:
        """Save the VM's state on its node (it keeps running); restore it with
        ``corral.sandboxes.create(from_snapshot=snapshot.id)``."""
        return calls.snapshot_sandbox(self.id)

    # ---- commit and fork ---------------------------------------------------------------

    @operation
    def commit(self, name: str | None = None, version: str | None = None,
               environment: str | None = None) -> calls.Call[CommitResult]:
        """Save this container's changes (its writable layer; deletions as whiteouts) as a new
        ``diff`` layer, and with ``environment`` a new environment that starts from them."""
        body = {k: v for k, v in {"name": name, "version": version, "environment": environment}.items() if v}
        return calls.commit_sandbox(self.id, body)

    @operation
    def fork(self, count: int = 1, *, wait: bool = True, wait_timeout: float = 120.0) -> Op[builtins.list[Any]]:
        """``count`` new sandboxes from this one's current state (containers: its files, via a
        commit; VMs: a snapshot); with ``wait``, once each runs."""
        infos = yield calls.fork_sandbox(self.id, count)
        forks = [type(self)(self._corral, info) for info in infos]
        if wait:
            yield Concurrently([fork._wait("running", wait_timeout) for fork in forks], 32)
        return forks

    def _delete(self, wait: bool = True, timeout: float = 60.0) -> Op[Self]:
        self.info = yield calls.delete_sandbox(self.id, wait=wait, timeout=timeout)
        return self

    delete = operation(_delete)


class Sandbox(_SandboxOps, flavor="sync"):
    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete(wait=False)


class AsyncSandbox(_SandboxOps, flavor="async"):
    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.delete(wait=False)


class _SandboxesOps(Flavored):
    _sandbox: type[_SandboxOps]  # what this flavour returns

    def _create(self, environment: str | None = None, *, wait: bool = True, wait_timeout: float = 120.0,
                **spec: Any) -> Op[Any]:
        """Create a sandbox; with ``wait`` (default) return once it runs, raising SandboxFailed if it cannot.

        spec: backend ("auto" | "container" | "microvm" | "vm"), isolation ("container" | "vm"),
        display (a screen: picks vm), disk_image (boot a disk image instead of an environment),
        from_snapshot (restore a snapshot id; kind, image, cpu and memory come from it), cpu,
        memory_mb, disk_mb, timeout_s, pids_limit (these four are limits), requests (what placement
        counts: {"cpu", "memory_mb", "disk_mb", "pids"}, by default an idle sandbox's use), env, labels,
        workdir (default cwd of execs),
        run_as ("uid[:gid]" of execs as "user"); an imported environment supplies env, workdir
        and run_as from its image config.
        """
        waiting: dict[str, Any] = {"wait_for": "running", "timeout": wait_timeout} if wait else {}
        info = yield calls.create_sandbox(create_body(environment, **spec), **waiting)
        sandbox = self._sandbox(self._corral, info)
        if wait and sandbox.state != "running":
            if sandbox.state in ("failed", "terminated"):
                raise SandboxFailed(sandbox.id, sandbox.state, _reason(info), _error(info))
            yield from sandbox._wait("running", wait_timeout)
        return sandbox

    create = operation(_create)

    @operation
    def create_many(self, environment: str, count: int, *, concurrency: int = 32, **kwargs: Any) -> Op[list[Any]]:
        """Create ``count`` sandboxes with at most ``concurrency`` requests in flight."""
        return (yield Concurrently([self._create(environment, **kwargs) for _ in range(count)], concurrency))

    @operation
    def get(self, sandbox_id: str) -> Op[Any]:
        return self._sandbox(self._corral, (yield calls.get_sandbox(sandbox_id)))

    @operation
    def list(self, labels: dict[str, str] | None = None, state: str | None = None) -> Op[list[Any]]:
        return [self._sandbox(self._corral, info) for info in (yield calls.list_sandboxes(labels, state))]

    @operation
    def delete(self, sandbox: str | _SandboxOps | dict[str, str] | None = None, *,
               labels: dict[str, str] | None = None, wait: bool = True, timeout: float = 60.0) -> Op[Any]:
        """Delete one sandbox, by id or ``Sandbox``: returns it (with ``wait``, once it stopped,
        as ``Sandbox.delete``). Or, with ``labels`` (also accepted in place of the sandbox),
        every live sandbox matching all of them (at least one): returns them, as a list."""
        if isinstance(sandbox, dict):  # delete({"run": "7"}): the labels form, positionally
            sandbox, labels = None, sandbox
        if (sandbox is None) == (labels is None):
            raise TypeError("delete() takes a sandbox (its id or the Sandbox) or labels=, not both nor neither")
        if labels is not None:
            return [self._sandbox(self._corral, info) for info in (yield calls.delete_sandboxes(labels))]
        if isinstance(sandbox, _SandboxOps):
            return (yield from sandbox._delete(wait, timeout))
        return self._sandbox(self._corral, (yield calls.delete_sandbox(sandbox, wait=wait, timeout=timeout)))

    @operation
    def delete_many(self, sandboxes: Iterable[_SandboxOps], *, concurrency: int = 32) -> Op[None]:
        """Delete these sandboxes (without waiting for each to stop), ``concurrency`` requests in flight."""
        yield Concurrently([sandbox._delete(wait=False) for sandbox in sandboxes], concurrency)


class Sandboxes(_SandboxesOps, flavor="sync"):
    _sandbox = Sandbox


class AsyncSandboxes(_SandboxesOps, flavor="async"):
    _sandbox = AsyncSandbox
