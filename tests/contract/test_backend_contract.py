"""One contract, every backend: the container backend (real crun), the microvm backend (real
QEMU with the guest kit) and the shipped FakeBackend answer the same situations the same way.

Each backend keeps one sandbox running for the whole module (a VM boot costs seconds under
TCG): the cases use it and leave it as they found it. Only the case about a sandbox ending
on its own starts a second one.
"""

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import pytest_asyncio

from corral_common.contracts.exec import ExecRequest
from corral_common.contracts.sandboxes import SandboxSpec, Usage
from corral_node_agent.backends.base import Capability, ExitReason, SandboxBackend
from corral_node_agent.backends.fake import FakeBackend
from corral_node_agent.backends.types import RootFs
from corral_node_agent.errors import AlreadyExists, BadInput, NotFound, PortClosed, SandboxPaused, Unsupported
from corral_node_agent.http_errors import http_error
from tests.polling import until
from tests.sandbox_host import container_skip_reason

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("vm")]

KINDS = ["fake", "container", "microvm"]
CONTAINER_SKIP = container_skip_reason()  # entered the mount namespace already (conftest)
SESSION = uuid.uuid4().hex[:8]  # node ids: sessions on one host share its cgroups


@dataclass
class Subject:
    """A backend under contract, the root filesystem it takes and its long-lived sandbox."""

    kind: str
    backend: SandboxBackend
    rootfs: RootFs
    sid: str = field(default_factory=lambda: "ct-" + uuid.uuid4().hex[:10])
    exits: list[tuple[str, ExitReason, Usage]] = field(default_factory=list)

    def spec(self, **kw) -> SandboxSpec:
        backend = "container" if self.kind == "fake" else self.kind
        kw.setdefault("memory_mb", 256 if backend == "microvm" else 128)
        return SandboxSpec(environment="busybox", backend=backend, disk_mb=64, **kw)


def _settings(contract_dir: str, **kw):
    from corral_node_agent.settings import NodeAgentSettings

    return NodeAgentSettings(node_id=f"contract-{SESSION}-{uuid.uuid4().hex[:4]}",
                             state_dir=f"{contract_dir}/state-{uuid.uuid4().hex[:8]}", **kw)


def _build(kind: str, request) -> tuple[SandboxBackend, RootFs]:
    contract_dir = request.getfixturevalue("contract_dir")
    if kind == "fake":
        return FakeBackend(), RootFs(["/layers/busybox"])
    if kind == "container":
        if CONTAINER_SKIP:
            pytest.skip(CONTAINER_SKIP)
        from corral_node_agent.backends.container import ContainerBackend

        return ContainerBackend(_settings(contract_dir)), RootFs([request.getfixturevalue("busybox_mount")])
    if CONTAINER_SKIP:  # root, for QEMU's own uid and its cgroup
        pytest.skip(CONTAINER_SKIP)
    from corral_node_agent.backends.vm.backend import MicroVmBackend
    from corral_node_agent.backends.vm.guestkit import GuestKit
    from corral_node_agent.errors import GuestKitMissing

    settings = _settings(contract_dir)
    if shutil.which(settings.qemu) is None:
        pytest.skip(f"the microvm backend needs {settings.qemu}")
    try:
        GuestKit.load(settings.guestkit_dir)
    except GuestKitMissing as exc:
        pytest.skip(exc.message)
    return MicroVmBackend(settings), RootFs([request.getfixturevalue("busybox_erofs")])


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=KINDS)
async def subject(request) -> AsyncIterator[Subject]:
    backend, rootfs = _build(request.param, request)
    s = Subject(kind=request.param, backend=backend, rootfs=rootfs)

    def on_exit(sandbox_id, reason, usage):
        s.exits.append((sandbox_id, reason, usage))
        raise RuntimeError("a listener that fails")  # the backend must log it and go on

    backend.on_exit = on_exit
    await backend.start(s.sid, s.spec(), rootfs)
    try:
        yield s
    finally:
        await backend.close()


async def _ok(subject: Subject) -> None:
    """The shared sandbox still runs commands."""
    assert (await subject.backend.exec(subject.sid, ExecRequest(cmd="true"))).exit_code == 0


async def test_a_duplicate_start_is_already_exists_and_leaves_the_sandbox_alone(subject):
    with pytest.raises(AlreadyExists) as exc:
        await subject.backend.start(subject.sid, subject.spec(), subject.rootfs)
    assert (http_error(exc.value).status_code, http_error(exc.value).code) == (409, "conflict")
    assert subject.sid in subject.backend.list_running()
    await _ok(subject)


async def test_exec_while_paused_is_sandbox_paused(subject):
    backend = subject.backend
    assert Capability.pause in backend.capabilities  # every runtime so far can pause
    await backend.pause(subject.sid)
    await backend.pause(subject.sid)  # idempotent
    try:
        assert backend.is_paused(subject.sid)
        with pytest.raises(SandboxPaused) as exc:
            await backend.exec(subject.sid, ExecRequest(cmd="true"))
        error = http_error(exc.value)
        assert (error.status_code, error.code, error.loc) == (409, "sandbox_paused", ["path", "sandbox_id"])
        with pytest.raises(SandboxPaused):
            await anext(backend.exec_stream(subject.sid, ExecRequest(cmd="true")))
    finally:
        await backend.resume(subject.sid)
    await backend.resume(subject.sid)  # idempotent
    assert not backend.is_paused(subject.sid)
    await _ok(subject)


async def test_an_unknown_id_is_not_found_and_stop_is_idempotent(subject):
    backend, missing = subject.backend, "ct-missing-" + uuid.uuid4().hex[:6]
    with pytest.raises(NotFound):
        await backend.exec(missing, ExecRequest(cmd="true"))
    with pytest.raises(NotFound):
        await anext(backend.exec_stream(missing, ExecRequest(cmd="true")))
    with pytest.raises(NotFound):
        backend.usage(missing)
    with pytest.raises(NotFound):
        await backend.read_file(missing, "/etc/passwd")
    with pytest.raises(NotFound):
        await backend.write_file(missing, "x", b"x")
    with pytest.raises(NotFound):
        await backend.pause(missing)
    assert await backend.stop(missing) == Usage()
    assert await backend.stop(missing) == Usage()
    assert missing not in backend.list_running()


async def test_files_round_trip(subject):
    backend, sid = subject.backend, subject.sid
    assert await backend.write_file(sid, "notes/a.txt", b"data", 0o600) == 4

    async def chunks():
        yield b"streamed "
        yield b"upload"

    assert await backend.write_file(sid, "/home/user/notes/b.txt", chunks()) == 15
    assert await backend.read_file(sid, "/home/user/notes/a.txt") == b"data"
    size, body = await backend.open_file(sid, "notes/b.txt")
    assert size == 15 and b"".join([c async for c in body]) == b"streamed upload"
    info = await backend.stat(sid, "notes/a.txt")
    assert (info.name, info.path, info.type, info.size, info.mode) == ("a.txt", "/home/user/notes/a.txt", "file", 4, 0o600)
    assert (await backend.stat(sid, "/home/user/notes")).type == "dir"
    assert [e.name for e in await backend.list_dir(sid, "notes")] == ["a.txt", "b.txt"]

    with pytest.raises(NotFound) as missing:
        await backend.read_file(sid, "notes/nope")
    assert missing.value.loc == ["query", "path"]
    with pytest.raises(BadInput) as dotdot:
        await backend.read_file(sid, "../etc/passwd")
    assert dotdot.value.loc == ["query", "path"] and http_error(dotdot.value).status_code == 400
    with pytest.raises(BadInput, match="is a directory"):
        await backend.read_file(sid, "notes")


_METHODS = {Capability.pause: ("pause", "resume"), Capability.screen: ("screenshot", "send_input"),
            Capability.snapshot: ("snapshot", "delete_snapshot"), Capability.adopt: ("spec_of",),
            Capability.ports: ("connect_port",), Capability.commit: ("commit_diff",),
            Capability.balloon: ("balloon", "set_balloon"), Capability.warm_pool: ("start_ahead", "claim")}


async def test_capabilities_are_what_the_backend_does(subject):
    backend, sid = subject.backend, subject.sid
    for capability in Capability:
        declared = capability in backend.capabilities
        for name in _METHODS[capability]:
            overridden = getattr(type(backend), name) is not getattr(SandboxBackend, name)
            assert overridden or not declared, f"{subject.kind} declares {capability} but lacks {name}()"
        if declared:
            continue
        calls = {Capability.pause: lambda: backend.pause(sid), Capability.screen: lambda: backend.screenshot(sid),
                 Capability.snapshot: lambda: backend.snapshot(sid, "never"),
                 Capability.adopt: lambda: backend.spec_of(sid),
                 Capability.ports: lambda: backend.connect_port(sid, 8080),
                 Capability.commit: lambda: backend.commit_diff(sid, "/nonexistent/diff.tar"),
                 Capability.balloon: lambda: backend.balloon(sid),
                 Capability.warm_pool: lambda: backend.claim(sid, "claimed", subject.spec())}
        with pytest.raises(Unsupported) as exc:
            result = calls[capability]()
            if asyncio.iscoroutine(result):
                await result
        assert http_error(exc.value).code == "unsupported_by_backend"

    if Capability.adopt in backend.capabilities:
        assert backend.spec_of(sid) == subject.spec()
    if Capability.screen in backend.capabilities:
        assert (await backend.screenshot(sid))[:8] == b"\x89PNG\r\n\x1a\n"
    if Capability.ports in backend.capabilities:
        with pytest.raises(PortClosed):  # nothing listens there
            await backend.connect_port(sid, 9)
        with pytest.raises(NotFound):
            await backend.connect_port("no-such-sandbox", 9)
    if Capability.snapshot in backend.capabilities:
        snap = "snap-" + uuid.uuid4().hex[:8]
        assert await backend.snapshot(sid, snap) >= 0
        with pytest.raises(AlreadyExists):
            await backend.snapshot(sid, snap)
        await backend.delete_snapshot(snap)
        with pytest.raises(NotFound):
            await backend.delete_snapshot(snap)
    await _ok(subject)


async def test_a_sandbox_that_ends_on_its_own_is_reported_once_and_stays_accounted(subject):
    backend, sid = subject.backend, "ct-end-" + uuid.uuid4().hex[:6]
    await backend.start(sid, subject.spec(timeout_s=1), subject.rootfs)
    await until(lambda: any(e[0] == sid for e in subject.exits), timeout_s=60, what="the timeout to end it")
    await asyncio.sleep(0.2)  # a second report would come now
    (reported,) = [e for e in subject.exits if e[0] == sid]
    assert reported[1] == ExitReason.timeout
    assert sid not in backend.list_running()
    # The listener raised: the backend logged it and went on; stop() and usage() still answer.
    assert backend.usage(sid) == reported[2]
    assert await backend.stop(sid) == reported[2]
    await _ok(subject)
